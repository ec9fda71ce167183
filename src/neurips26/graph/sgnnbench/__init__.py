r"""SGNNBench: a unified design space, reference models and energy accounting for spiking GNNs.

Paper
-----
"SGNNBench: A Holistic Evaluation of Spiking Graph Neural Network on Large-scale Graph"
(arXiv 2509.21342); registry seed ``000_f8b4140a0e3b5d84.txt``, paragraph beginning "Graph Neural
Networks (GNNs), as representative". The benchmark puts spiking GNNs (binary spikes from
integrate-and-fire neurons over ``T`` steps) into one configurable design space and compares them
with ANN GNNs on accuracy, size, memory and theoretical energy; its per-layer energy breakdown
exposes the real-valued parts (encoders, pre-linear layers, float aggregation, readout) that can
dominate an SGNN's energy. Public: the paper's abstract and description of the design space and the energy
model. Inferred (spec ``shared/specs/sgnnbench.md``): PLIF's parametrisation of ``tau``, the counting
convention for normalisation layers (real-valued operations) and the default grids.

Math
----
Neurons (input current :math:`I_t`, membrane :math:`v`, threshold :math:`\theta`, reset :math:`v_r`;
the Heaviside :math:`H` has a surrogate derivative in the backward pass):

.. math::
    \text{IF: } v \leftarrow v + I_t, \qquad
    \text{LIF: } v \leftarrow v + \frac{I_t - (v - v_r)}{\tau}, \qquad
    s_t = H(v - \theta), \qquad v \leftarrow v (1 - s_t) + s_t v_r .

Spiking GCN layer and the model (``T`` time steps, membranes carried across steps, readout averaged
over time):

.. math::
    s^{(l)}_t = \mathrm{Neuron}\big(\mathrm{Norm}(W_l\, \hat A^K s^{(l-1)}_t)\big), \qquad
    \hat A = D^{-1/2}(A + I)D^{-1/2}, \qquad
    \text{logits} = W_{out} \frac1T \sum_{t=1}^{T} s^{(L)}_t .

Theoretical energy of one full-graph inference, summed over executed calls with dense operation
counts :math:`O` and measured input firing rates :math:`f` (:math:`E_{MAC} = 4.6` pJ,
:math:`E_{AC} = 0.9` pJ):

.. math::
    E = \sum_{\text{spike-input calls}} E_{AC}\, f\, O + \sum_{\text{real-input calls}} E_{MAC}\, O .

Shapes
------
- :class:`SGNN`, :func:`spiking_gcn`, :func:`spikenet_lite`, :func:`gc_snn`, :func:`ga_snn`,
  :class:`DRSGNN`, :class:`SpikeGCL`, :class:`SpikeGraphormer`, :class:`GCN`, :class:`SGC`: ``x [N, F]``,
  ``edge_index [2, E]`` (or a sparse ``[N, N]`` adjacency), optional ``edge_weight [E]`` -> logits
  ``[N, C]``.
- :class:`SpikingGCNConv`, :class:`SpikingSAGEConv`: ``x [N, in_channels]`` (spikes or reals),
  ``edge_index [2, E]`` -> spikes ``[N, out_channels]`` (one time step per call).
- :class:`GCNPropagation`: ``x [N, F]``, ``edge_index [2, E]`` -> ``[N, F]``.
- :class:`IF`, :class:`LIF`, :class:`PLIF`: ``current [*]`` -> spikes ``[*]`` in ``{0, 1}``.

Modules
-------
- :mod:`.neurons`: :class:`IF`, :class:`LIF`, :class:`PLIF`, :func:`surrogate_spike`
  (:math:`v \leftarrow v + I_t` / :math:`v + (I_t - (v - v_r))/\tau`, :math:`s = H(v - \theta)`,
  hard reset).
- :mod:`.layers`: :class:`SpikingGCNConv`, :class:`SpikingSAGEConv`, :class:`SpikingGATConv` (PyG
  ``MessagePassing``), :class:`STFN`, :class:`SpikingLinearAttention`.
- :mod:`.models`: :class:`SGNN` (encoding, propagation, neuron, ``T``, norm, residual, JK, readout),
  :func:`spiking_gcn`, :func:`spikenet_lite`, :func:`gc_snn`, :func:`ga_snn`, ANN baselines
  :class:`GCN`, :class:`SGC`.
- :mod:`.zoo`: :class:`DRSGNN` (random-walk PE + dynamic thresholds), :class:`SpikeGCL` (feature
  groups as time steps, 1-bit representation), :class:`SpikeGraphormer` (GCN branch + spike-driven
  linear all-pair attention).
- :mod:`.energy`: :func:`energy_report` (:math:`E = \sum E_{AC} f O + \sum E_{MAC} O`),
  :func:`count_parameters`, :func:`peak_memory`.
- :mod:`.bench`: :func:`run_benchmark`, :func:`design_space_sweep`, :func:`factor_average_ranks`.
"""

from neurips26.graph.sgnnbench.bench import (
    ROW_KEYS,
    design_space_sweep,
    factor_average_ranks,
    run_benchmark,
    train_node_classifier,
)
from neurips26.graph.sgnnbench.energy import (
    E_AC,
    E_MAC,
    EnergyReport,
    count_parameters,
    energy_report,
    peak_memory,
)
from neurips26.graph.sgnnbench.layers import (
    STFN,
    GCNPropagation,
    SpikingGATConv,
    SpikingGCNConv,
    SpikingLinearAttention,
    SpikingSAGEConv,
)
from neurips26.graph.sgnnbench.models import GCN, SGC, SGNN, ga_snn, gc_snn, spikenet_lite, spiking_gcn
from neurips26.graph.sgnnbench.neurons import IF, LIF, PLIF, SURROGATES, surrogate_grad, surrogate_spike
from neurips26.graph.sgnnbench.zoo import DRSGNN, SpikeGCL, SpikeGraphormer, random_walk_pe

__all__ = [
    "IF",
    "LIF",
    "PLIF",
    "SURROGATES",
    "surrogate_spike",
    "surrogate_grad",
    "GCNPropagation",
    "SpikingGCNConv",
    "SpikingSAGEConv",
    "SpikingGATConv",
    "SpikingLinearAttention",
    "STFN",
    "SGNN",
    "spiking_gcn",
    "spikenet_lite",
    "gc_snn",
    "ga_snn",
    "DRSGNN",
    "SpikeGCL",
    "SpikeGraphormer",
    "random_walk_pe",
    "GCN",
    "SGC",
    "EnergyReport",
    "energy_report",
    "count_parameters",
    "peak_memory",
    "E_MAC",
    "E_AC",
    "run_benchmark",
    "design_space_sweep",
    "factor_average_ranks",
    "train_node_classifier",
    "ROW_KEYS",
]

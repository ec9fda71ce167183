"""SGNNBench: a unified design space, reference models and energy accounting for spiking GNNs.

Paper: "SGNNBench: A Holistic Evaluation of Spiking Graph Neural Network on Large-scale Graph"
(arXiv 2509.21342); registry seed ``000_f8b4140a0e3b5d84.txt``, paragraph beginning "Graph Neural
Networks (GNNs), as representative". The benchmark puts spiking GNNs (binary spikes from
integrate-and-fire neurons over ``T`` steps) into one configurable design space and compares them
with ANN GNNs on accuracy, size, memory and theoretical energy; its per-layer energy breakdown
exposes the real-valued parts (encoders, pre-linear layers, float aggregation, readout) that can
dominate an SGNN's energy.

Modules
-------
- :mod:`.neurons`: :class:`IF`, :class:`LIF`, :class:`PLIF`, :func:`surrogate_spike`
  (:math:`v \\leftarrow v + I_t` / :math:`v + (I_t - (v - v_r))/\\tau`, :math:`s = H(v - \\theta)`,
  hard reset).
- :mod:`.layers`: :class:`SpikingGCNConv`, :class:`SpikingSAGEConv` (PyG ``MessagePassing``).
- :mod:`.models`: :class:`SGNN` (encoding, propagation, neuron, ``T``, norm, residual, JK, readout),
  :func:`spiking_gcn`, :func:`spikenet_lite`, ANN baselines :class:`GCN`, :class:`SGC`.
- :mod:`.energy`: :func:`energy_report` (:math:`E = \\sum E_{AC} f O + \\sum E_{MAC} O`),
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
from neurips26.graph.sgnnbench.layers import GCNPropagation, SpikingGCNConv, SpikingSAGEConv
from neurips26.graph.sgnnbench.models import GCN, SGC, SGNN, spikenet_lite, spiking_gcn
from neurips26.graph.sgnnbench.neurons import IF, LIF, PLIF, SURROGATES, surrogate_grad, surrogate_spike

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
    "SGNN",
    "spiking_gcn",
    "spikenet_lite",
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

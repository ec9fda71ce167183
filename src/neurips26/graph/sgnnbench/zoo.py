"""Further reference SGNNs of the SGNNBench model list: DRSGNN, SpikeGCL and SpikeGraphormer (lite).

Each is a full-graph node classifier ``(x [N, F], edge_index [2, E]) -> logits [N, C]`` unrolled over
``T`` time steps with surrogate-gradient spiking neurons (membranes reset at the start and end of
every forward pass), exposes :meth:`firing_rates` like :class:`~.models.SGNN`, and is counted by
:func:`~.energy.energy_report` (linear/BN hooks plus the layers' own propagation records).

- :class:`DRSGNN` (Zhao et al., "Dynamic Reactive Spiking Graph Neural Network", AAAI 2024):
  SpikingGCN-style precomputed :math:`\\hat A^K [x \\,\\|\\, p]` with random-walk positional encodings
  :math:`p_i = (\\mathrm{RW}^k)_{ii},\\ k = 1..P`, :math:`\\mathrm{RW} = D^{-1}A`, and dynamic-threshold
  ("reactive") neurons :math:`b \\leftarrow \\kappa b + \\gamma s`, :math:`\\theta_t = \\theta_0 + b`.
- :class:`SpikeGCL` (Li et al., "A Graph is Worth 1-bit Spikes: When Graph Contrastive Learning Meets
  Spiking Neural Networks", ICLR 2024): the features are cut into ``T`` groups and step ``t`` encodes
  group ``t`` of :math:`\\hat A^K x` with its own linear map, BN and a PLIF neuron; the node
  representation is the concatenation of the ``T`` binary outputs (``T x H`` bits):

  .. math::
      s_t = \\mathrm{PLIF}(\\mathrm{BN}(W_t (\\hat A^K x)_{[:, G_t]})), \\qquad
      \\text{logits} = W_{out} [s_1 \\| \\dots \\| s_T].

  Trained here with the benchmark's supervised protocol (the paper pre-trains contrastively and
  then fits a linear probe).
- :class:`SpikeGraphormer` (Sun et al., "SpikeGraphormer: A High-Performance Graph Transformer with
  Spiking Graph Attention", 2024), lite: spike encoder, then per layer a graph branch (one GCN hop
  on spikes) plus the spike-driven all-pair attention branch
  (:class:`~.layers.SpikingLinearAttention`), summed and fired:

  .. math::
      s^{(l)}_t = \\mathrm{SN}\\big(\\mathrm{BN}(W_g \\hat A s^{(l-1)}_t) + \\mathrm{SDA}(s^{(l-1)}_t)\\big).

Shapes
------
``x [N, F]``, ``edge_index [2, E]`` -> logits ``[N, C]``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from neurips26.common.checks import check_choice, check_int
from neurips26.graph.sgnnbench.layers import (
    GCNPropagation,
    SpikingLinearAttention,
    _check,
    _same,
)
from neurips26.graph.sgnnbench.models import SGNN
from neurips26.graph.sgnnbench.neurons import IF, NEURONS, make_neuron

__all__ = ["DRSGNN", "SpikeGCL", "SpikeGraphormer", "random_walk_pe"]


def random_walk_pe(edge_index: Tensor, num_nodes: int, steps: int) -> Tensor:
    """Random-walk positional encoding ``[N, steps]``: return probabilities :math:`(D^{-1}A)^k_{ii}`, ``k = 1..steps``.

    Isolated nodes get zeros. Exact (dense ``[N, N]`` powers; meant for graphs up to a few thousand nodes).
    """
    check_int("steps", steps, low=1)
    check_int("num_nodes", num_nodes, low=1)
    a = torch.zeros(num_nodes, num_nodes, dtype=torch.float64)
    a[edge_index[0], edge_index[1]] = 1.0
    deg = a.sum(1, keepdim=True)
    rw = a / deg.clamp_min(1.0)
    out, m = [], rw.clone()
    for _ in range(steps):
        out.append(torch.diagonal(m).clone())
        m = m @ rw
    return torch.stack(out, 1).float()


class _Spiking(nn.Module):
    """Shared neuron bookkeeping (reset, firing rates) for the models of this module."""

    def neurons(self) -> dict[str, IF]:
        return {name: m for name, m in self.named_modules() if isinstance(m, IF)}

    def reset(self) -> None:
        for m in self.neurons().values():
            m.reset()

    def _start(self) -> None:
        for m in self.neurons().values():
            m.reset()
            m.reset_stats()

    def firing_rates(self) -> dict[str, float]:
        """Mean firing rate of each neuron module during the last forward pass, in ``[0, 1]``."""
        return {name: m.firing_rate for name, m in self.neurons().items()}


class DRSGNN(_Spiking):
    """DRSGNN: SpikingGCN backbone with random-walk positional encodings and dynamic-threshold neurons.

    Parameters
    ----------
    in_channels, hidden_channels, out_channels : int
    pe_steps : int
        Random-walk steps of the positional encoding (default 8), appended to the features.
    K, T, v_threshold, neuron, surrogate : as :class:`~.models.SGNN` (defaults K = 2, T = 5, 0.5, LIF).
    **kw
        Further :class:`~.models.SGNN` arguments (e.g. ``norm``, ``cache_encoder``).

    Shapes
    ------
    ``x [N, F]``, ``edge_index [2, E]`` -> logits ``[N, C]``.
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int = 128,
        out_channels: int = 2,
        pe_steps: int = 8,
        K: int = 2,
        T: int = 5,
        v_threshold: float = 0.5,
        neuron: str = "LIF",
        **kw,
    ) -> None:
        super().__init__()
        self.in_channels = check_int("in_channels", in_channels, low=1)
        self.pe_steps = check_int("pe_steps", pe_steps, low=1)
        cfg = dict(
            num_layers=1,
            conv="gcn",
            K=K,
            precompute=True,
            neuron=neuron,
            T=T,
            encoding="direct",
            cache_encoder=False,
            norm="bn",
            v_threshold=v_threshold,
            adaptive_threshold=True,
        )
        cfg.update(kw)
        self.T = cfg["T"]
        self.sgnn = SGNN(in_channels + pe_steps, hidden_channels, out_channels, **cfg)
        self._pe_cache: tuple[int, Tensor, Tensor] | None = None

    def positional_encoding(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        """:func:`random_walk_pe` of the graph, cached against an exact snapshot of ``edge_index``."""
        if self._pe_cache is not None:
            n, ei, pe = self._pe_cache
            if n == num_nodes and _same(ei, edge_index):
                return pe
        pe = random_walk_pe(edge_index, num_nodes, self.pe_steps)
        self._pe_cache = (num_nodes, edge_index.detach().clone(), pe)
        return pe

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        _check(x, edge_index)
        if x.size(1) != self.in_channels:
            raise ValueError(f"x has {x.size(1)} features, model expects in_channels={self.in_channels}")
        if edge_index.layout != torch.strided:
            raise ValueError("DRSGNN needs edge_index as a [2, E] tensor (no sparse adjacency)")
        pe = self.positional_encoding(edge_index, x.size(0)).to(x.dtype)
        return self.sgnn(torch.cat([x, pe], 1), edge_index, edge_weight)

    def firing_rates(self) -> dict[str, float]:
        return self.sgnn.firing_rates()


class SpikeGCL(_Spiking):
    """SpikeGCL encoder (feature groups as time steps, 1-bit outputs) with a linear readout.

    Parameters
    ----------
    in_channels, hidden_channels, out_channels : int
        ``hidden_channels`` is the width of each step's output (the representation has
        ``T x hidden_channels`` bits).
    T : int
        Time steps = feature groups (``T <= in_channels``; groups differ in size by at most one).
    K : int
        Hops of the precomputed :math:`\\hat A^K x` (default 2).
    neuron : {"IF", "LIF", "PLIF"}
        Default PLIF, as in the paper.
    v_threshold, surrogate, tau : neuron arguments.

    Shapes
    ------
    ``x [N, F]``, ``edge_index [2, E]`` -> logits ``[N, C]``.
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int = 128,
        out_channels: int = 2,
        T: int = 5,
        K: int = 2,
        neuron: str = "PLIF",
        v_threshold: float = 0.5,
        surrogate: str = "sigmoid",
        tau: float = 2.0,
    ) -> None:
        super().__init__()
        self.in_channels = check_int("in_channels", in_channels, low=1)
        check_int("hidden_channels", hidden_channels, low=1)
        check_int("out_channels", out_channels, low=1)
        self.T = check_int("T", T, low=1, high=in_channels)
        check_choice("neuron", neuron, tuple(NEURONS))
        self.prop = GCNPropagation(check_int("K", K, low=0))
        bounds = torch.linspace(0, in_channels, T + 1).round().long().tolist()
        self.groups = [(bounds[t], bounds[t + 1]) for t in range(T)]
        self.encoders = nn.ModuleList(nn.Linear(b - a, hidden_channels) for a, b in self.groups)
        self.norms = nn.ModuleList(nn.BatchNorm1d(hidden_channels) for _ in self.groups)
        self.neuron = make_neuron(neuron, v_threshold=v_threshold, surrogate=surrogate, tau=tau)
        self.readout = nn.Linear(T * hidden_channels, out_channels)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        _check(x, edge_index, self)
        if x.size(1) != self.in_channels:
            raise ValueError(f"x has {x.size(1)} features, model expects in_channels={self.in_channels}")
        self._start()
        h = self.prop(x, edge_index, edge_weight)
        try:
            spikes = [
                self.neuron(norm(enc(h[:, a:b])))
                for (a, b), enc, norm in zip(self.groups, self.encoders, self.norms)
            ]
        finally:
            self.reset()
        return self.readout(torch.cat(spikes, 1))


class SpikeGraphormer(_Spiking):
    """SpikeGraphormer-lite: spike encoder, then layers of (GCN branch + spike-driven all-pair attention).

    Parameters
    ----------
    in_channels, hidden_channels, out_channels : int
    num_layers : int
        Dual-branch layers (default 1).
    T : int
        Time steps (default 5).
    neuron, v_threshold, surrogate, tau : neuron arguments (LIF, 0.5).

    Shapes
    ------
    ``x [N, F]``, ``edge_index [2, E]`` -> logits ``[N, C]``.
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int = 128,
        out_channels: int = 2,
        num_layers: int = 1,
        T: int = 5,
        neuron: str = "LIF",
        v_threshold: float = 0.5,
        surrogate: str = "sigmoid",
        tau: float = 2.0,
    ) -> None:
        super().__init__()
        self.in_channels = check_int("in_channels", in_channels, low=1)
        check_int("hidden_channels", hidden_channels, low=1)
        check_int("out_channels", out_channels, low=1)
        check_int("num_layers", num_layers, low=1)
        self.T = check_int("T", T, low=1)
        check_choice("neuron", neuron, tuple(NEURONS))
        nkw = {"v_threshold": v_threshold, "surrogate": surrogate, "tau": tau}
        self.encoder = nn.Linear(in_channels, hidden_channels)
        self.encoder_norm = nn.BatchNorm1d(hidden_channels)
        self.input_neuron = make_neuron(neuron, **nkw)
        self.graph_lins = nn.ModuleList(
            nn.Linear(hidden_channels, hidden_channels) for _ in range(num_layers)
        )
        self.graph_norms = nn.ModuleList(nn.BatchNorm1d(hidden_channels) for _ in range(num_layers))
        self.props = nn.ModuleList(GCNPropagation(1) for _ in range(num_layers))
        self.attns = nn.ModuleList(
            SpikingLinearAttention(hidden_channels, neuron, **nkw) for _ in range(num_layers)
        )
        self.layer_neurons = nn.ModuleList(make_neuron(neuron, **nkw) for _ in range(num_layers))
        self.readout = nn.Linear(hidden_channels, out_channels)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        _check(x, edge_index, self)
        if x.size(1) != self.in_channels:
            raise ValueError(f"x has {x.size(1)} features, model expects in_channels={self.in_channels}")
        self._start()
        enc = self.encoder_norm(self.encoder(x))  # computed once, reused for all T steps
        total: Tensor | float = 0.0
        try:
            for _ in range(self.T):
                s = self.input_neuron(enc)
                for prop, lin, norm, attn, sn in zip(
                    self.props, self.graph_lins, self.graph_norms, self.attns, self.layer_neurons
                ):
                    s = sn(norm(lin(prop(s, edge_index, edge_weight))) + attn(s))
                total = total + s
        finally:
            self.reset()
        return self.readout(total / self.T)

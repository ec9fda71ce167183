"""The modular spiking GNN of SGNNBench, its reference configurations and the ANN baselines.

Forward pass of :class:`SGNN` for ``t = 1..T`` (membrane states carried across ``t``):

.. math::
    s^{(0)}_t = \\begin{cases}
        \\mathrm{Neuron}_{in}(\\mathrm{Norm}(W_{in} \\tilde x)) & \\text{direct coding} \\\\
        \\mathrm{Bernoulli}(\\mathrm{clip}(\\tilde x, 0, 1)) & \\text{poisson coding}
    \\end{cases},
    \\qquad s^{(l)}_t = \\mathrm{Conv}_l(s^{(l-1)}_t, A),

with :math:`\\tilde x = \\hat A^K x` when ``precompute=True`` (SGC/SpikingGCN style, computed once)
and :math:`\\tilde x = x` otherwise. The direct encoder's real-valued pre-linear output is computed
once and reused for all ``T`` steps when ``cache_encoder=True`` and recomputed every step otherwise
(which multiplies its energy by ``T``). Readout: logits :math:`= W_{out} \\frac1T \\sum_t s^{(L)}_t`
(or the concatenation over layers when ``jk=True``). Trained with cross entropy and
backpropagation through time using surrogate gradients.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn
from torch_geometric.nn import SGConv
from torch_geometric.nn.models import GCN as _PyGGCN

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.graph.sgnnbench.layers import (
    NORMS,
    GCNPropagation,
    SpikingGATConv,
    SpikingGCNConv,
    SpikingSAGEConv,
    _check,
    make_norm,
)
from neurips26.graph.sgnnbench.neurons import IF, NEURONS, SURROGATES, make_neuron

__all__ = ["SGNN", "spiking_gcn", "spikenet_lite", "gc_snn", "ga_snn", "GCN", "SGC", "CONVS", "ENCODINGS"]

CONVS = ("gcn", "sage", "gat")
ENCODINGS = ("direct", "poisson")


class SGNN(nn.Module):
    """Configurable spiking GNN (the SGNNBench design space).

    Parameters
    ----------
    in_channels, hidden_channels, out_channels : int
        Widths (``out_channels`` = number of classes).
    num_layers : int
        Spiking graph-conv layers after the encoder (>= 1).
    conv : {"gcn", "sage", "gat"}
        Propagation operator (:class:`SpikingGCNConv` / :class:`SpikingSAGEConv` /
        :class:`SpikingGATConv`).
    K : int
        Hops for ``conv="gcn"`` (applied to the input once when ``precompute=True``, in which case
        the layers themselves do not propagate).
    neuron : {"IF", "LIF", "PLIF"}
    T : int
        Time steps (>= 1).
    encoding : {"direct", "poisson"}
    cache_encoder : bool
        Reuse the direct encoder's output across steps.
    norm : {"none", "bn", "stfn"}
    residual, jk : bool
        Residual connections in the conv layers; jumping-knowledge readout over all layers.
    surrogate : str
        Surrogate-gradient name (:data:`~neurips26.graph.sgnnbench.neurons.SURROGATES`).
    v_threshold, tau : float
        Neuron threshold and leak.
    precompute : bool
        Compute :math:`\\hat A^K x` once before encoding (SpikingGCN).
    adaptive_threshold : bool
        Dynamic threshold in every neuron (:class:`~neurips26.graph.sgnnbench.neurons.IF`).
    heads : int
        Attention heads for ``conv="gat"``.

    Shapes
    ------
    ``x [N, F]``, ``edge_index [2, E]`` (or ``torch.sparse`` ``[N, N]``) -> logits ``[N, C]``.
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int = 2,
        conv: str = "gcn",
        K: int = 2,
        neuron: str = "LIF",
        T: int = 5,
        encoding: str = "direct",
        cache_encoder: bool = True,
        norm: str = "bn",
        residual: bool = False,
        jk: bool = False,
        surrogate: str = "sigmoid",
        v_threshold: float = 0.5,
        tau: float = 2.0,
        precompute: bool = False,
        adaptive_threshold: bool = False,
        heads: int = 4,
    ) -> None:
        super().__init__()
        check_int("in_channels", in_channels, low=1)
        check_int("hidden_channels", hidden_channels, low=1)
        check_int("out_channels", out_channels, low=1)
        check_int("num_layers", num_layers, low=1)
        check_choice("conv", conv, CONVS)
        check_int("K", K, low=0)
        check_choice("neuron", neuron, tuple(NEURONS))
        check_int("T", T, low=1)
        check_choice("encoding", encoding, ENCODINGS)
        check_choice("norm", norm, NORMS)
        check_choice("surrogate", surrogate, SURROGATES)
        check_float("v_threshold", v_threshold, 0.0, low_open=True)
        self.in_channels, self.T, self.encoding = in_channels, T, encoding
        self.cache_encoder, self.jk, self.precompute = bool(cache_encoder), bool(jk), bool(precompute)
        nkw = {
            "v_threshold": v_threshold,
            "tau": tau,
            "surrogate": surrogate,
            "adaptive_threshold": bool(adaptive_threshold),
        }
        self.pre = GCNPropagation(K) if precompute else None
        if encoding == "direct":
            self.encoder = nn.Linear(in_channels, hidden_channels)
            self.encoder_norm = make_norm(norm, hidden_channels, v_threshold)
            self.input_neuron = make_neuron(neuron, **nkw)
            width = hidden_channels
        else:
            self.encoder = self.encoder_norm = self.input_neuron = None
            width = in_channels
        layers = []
        for _ in range(num_layers):
            if conv == "gcn":
                layers.append(
                    SpikingGCNConv(
                        width, hidden_channels, 0 if precompute else K, neuron, norm, residual, **nkw
                    )
                )
            elif conv == "sage":
                layers.append(SpikingSAGEConv(width, hidden_channels, neuron, norm, residual, **nkw))
            else:
                layers.append(SpikingGATConv(width, hidden_channels, heads, neuron, norm, residual, **nkw))
            width = hidden_channels
        self.convs = nn.ModuleList(layers)
        self.readout = nn.Linear(hidden_channels * (num_layers if jk else 1), out_channels)

    def neurons(self) -> dict[str, IF]:
        """Every spiking neuron by module name."""
        return {name: m for name, m in self.named_modules() if isinstance(m, IF)}

    def reset(self) -> None:
        for m in self.neurons().values():
            m.reset()

    def firing_rates(self) -> dict[str, float]:
        """Mean firing rate of each neuron module during the last forward pass, in ``[0, 1]``."""
        return {name: m.firing_rate for name, m in self.neurons().items()}

    def _encode_input(self, x: Tensor) -> Tensor:
        if (x < 0).any() or (x > 1).any():
            warnings.warn("poisson encoding needs features in [0, 1]; clipping", UserWarning, stacklevel=3)
        return x.clamp(0.0, 1.0)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        _check(x, edge_index, self)
        if x.size(1) != self.in_channels:
            raise ValueError(f"x has {x.size(1)} features, model expects in_channels={self.in_channels}")
        for m in self.neurons().values():
            m.reset()
            m.reset_stats()
        if self.pre is not None:
            x = self.pre(x, edge_index, edge_weight)
        rates = self._encode_input(x) if self.encoding == "poisson" else None
        cached = None
        sums = [0.0] * len(self.convs)
        try:
            for _ in range(self.T):
                if self.encoding == "poisson":
                    s = torch.bernoulli(rates)
                else:
                    if cached is None or not self.cache_encoder:
                        cached = self.encoder_norm(self.encoder(x))
                    s = self.input_neuron(cached)
                for i, conv in enumerate(self.convs):
                    s = conv(s, edge_index, edge_weight)
                    sums[i] = sums[i] + s
        finally:
            self.reset()
        feats = torch.cat(sums, 1) if self.jk else sums[-1]
        return self.readout(feats / self.T)


def spiking_gcn(in_channels: int, hidden_channels: int = 128, out_channels: int = 2, **kw) -> SGNN:
    """SpikingGCN reference configuration (as SGNNBench runs it).

    :math:`\\hat A^K x` precomputed (K = 2), a real-valued input linear layer recomputed at every
    step (``cache_encoder=False``, like the public code), LIF neurons, BatchNorm, one spiking layer,
    T = 5, threshold 0.5, rate-averaged readout. Keyword arguments override.
    """
    cfg = dict(
        num_layers=1,
        conv="gcn",
        K=2,
        precompute=True,
        neuron="LIF",
        T=5,
        encoding="direct",
        cache_encoder=False,
        norm="bn",
        v_threshold=0.5,
    )
    cfg.update(kw)
    return SGNN(in_channels, hidden_channels, out_channels, **cfg)


def spikenet_lite(in_channels: int, hidden_channels: int = 128, out_channels: int = 2, **kw) -> SGNN:
    """SpikeNet-lite reference configuration (static graph).

    Two spiking SAGE layers (mean aggregation + self term), LIF, BatchNorm, T = 5, direct encoding
    computed once (``cache_encoder=True``). Keyword arguments override.
    """
    cfg = dict(
        num_layers=2,
        conv="sage",
        neuron="LIF",
        T=5,
        encoding="direct",
        cache_encoder=True,
        norm="bn",
        v_threshold=0.5,
    )
    cfg.update(kw)
    return SGNN(in_channels, hidden_channels, out_channels, **cfg)


def gc_snn(in_channels: int, hidden_channels: int = 128, out_channels: int = 2, **kw) -> SGNN:
    """GC-SNN reference configuration (Xu et al., "Exploiting spiking dynamics with spatial-temporal
    feature normalization in graph learning", IJCAI 2021).

    Two spiking graph-convolution layers (one GCN hop each, :math:`\\hat A s W`), STFN normalisation
    (:class:`~neurips26.graph.sgnnbench.layers.STFN`, per step), LIF, T = 5, threshold 0.5, direct
    encoding computed once. Keyword arguments override.
    """
    cfg = dict(
        num_layers=2,
        conv="gcn",
        K=1,
        neuron="LIF",
        T=5,
        encoding="direct",
        cache_encoder=True,
        norm="stfn",
        v_threshold=0.5,
    )
    cfg.update(kw)
    return SGNN(in_channels, hidden_channels, out_channels, **cfg)


def ga_snn(in_channels: int, hidden_channels: int = 128, out_channels: int = 2, **kw) -> SGNN:
    """GA-SNN reference configuration (graph-attention variant of the same IJCAI 2021 paper).

    Two :class:`~neurips26.graph.sgnnbench.layers.SpikingGATConv` layers (4 heads), STFN, LIF,
    T = 5, threshold 0.5, direct encoding computed once. Keyword arguments override.
    """
    cfg = dict(
        num_layers=2,
        conv="gat",
        heads=4,
        neuron="LIF",
        T=5,
        encoding="direct",
        cache_encoder=True,
        norm="stfn",
        v_threshold=0.5,
    )
    cfg.update(kw)
    return SGNN(in_channels, hidden_channels, out_channels, **cfg)


class GCN(nn.Module):
    """ANN baseline: PyG's 2-layer GCN (ReLU, dropout 0.5).

    Shapes
    ------
    ``x [N, F]``, ``edge_index [2, E]``, optional ``edge_weight [E]`` -> logits ``[N, C]``.
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int = 128,
        out_channels: int = 2,
        num_layers: int = 2,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        self.in_channels = check_int("in_channels", in_channels, low=1)
        self.net = _PyGGCN(in_channels, hidden_channels, num_layers, out_channels, dropout=dropout)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        _check(x, edge_index)
        if x.size(1) != self.in_channels:
            raise ValueError(f"x has {x.size(1)} features, model expects in_channels={self.in_channels}")
        return self.net(x, edge_index, edge_weight=edge_weight)


class SGC(nn.Module):
    """ANN baseline: PyG's ``SGConv`` (:math:`\\hat A^K x W`, K = 2, propagation cached per graph).

    Shapes
    ------
    ``x [N, F]``, ``edge_index [2, E]``, optional ``edge_weight [E]`` -> logits ``[N, out_channels]``.
    """

    def __init__(self, in_channels: int, out_channels: int = 2, K: int = 2) -> None:
        super().__init__()
        self.in_channels = check_int("in_channels", in_channels, low=1)
        self.conv = SGConv(in_channels, out_channels, K=K, cached=False)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        _check(x, edge_index)
        if x.size(1) != self.in_channels:
            raise ValueError(f"x has {x.size(1)} features, model expects in_channels={self.in_channels}")
        return self.conv(x, edge_index, edge_weight)

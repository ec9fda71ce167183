"""Spiking graph convolutions (one time step per call) for SGNNBench.

:class:`SpikingGCNConv` (SpikingGCN style):

.. math::
    z = \\mathrm{Norm}\\big(W\\, \\hat A^K s_{in}\\big) + W_{res} s_{in}, \\qquad
    s_{out} = \\mathrm{Neuron}(z) \\in \\{0, 1\\}^{N \\times H}, \\qquad
    \\hat A = D^{-1/2}(A + I)D^{-1/2}.

:class:`SpikingSAGEConv` (SpikeNet style, static graph):

.. math::
    z = \\mathrm{Norm}\\big(W_1 s_{in} + W_2\\, \\mathrm{mean}_{j \\in \\mathcal N(i)} s_{in,j}\\big),
    \\qquad s_{out} = \\mathrm{Neuron}(z).

Both are :class:`torch_geometric.nn.MessagePassing` layers taking ``(x, edge_index)`` where
``edge_index`` is a ``[2, E]`` int64 tensor or a ``torch.sparse`` ``[N, N]`` adjacency; the neuron's
membrane carries state across calls until :meth:`reset`.

:class:`SpikingGATConv` (GA-SNN style): :math:`z = \\mathrm{Norm}(\\mathrm{GAT}(s_{in}))`,
:math:`s_{out} = \\mathrm{Neuron}(z)` with PyG's ``GATConv`` attention over the spike inputs.

:class:`STFN` (GC-SNN's spatio-temporal feature normalisation, per step):

.. math::
    \\mathrm{STFN}(z)_{i,c} = v_{th}\\Big(\\lambda_c \\frac{z_{i,c} - \\mu_i}{\\sqrt{\\sigma_i^2 + \\epsilon}}
    + \\beta_c\\Big),

with :math:`\\mu_i, \\sigma_i^2` over the channels of node :math:`i` at the current step.

:class:`SpikingLinearAttention` (SpikeGraphormer's spike-driven all-pair attention, linear in ``N``):

.. math::
    Q, K, V = \\mathrm{SN}(\\mathrm{BN}(W_{q,k,v} s)), \\qquad
    z = \\mathrm{BN}\\big(W_o\\, \\tfrac{1}{N} Q (K^\\top V)\\big),

where :math:`K^\\top V` and :math:`Q (K^\\top V)` take binary inputs (accumulate-only).
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import is_torch_sparse_tensor, spmm

from neurips26.common.checks import check_choice, check_float, check_int, check_tensor
from neurips26.common.graphs import check_adjacency
from neurips26.graph.sgnnbench._ops import record
from neurips26.graph.sgnnbench.neurons import NEURONS, make_neuron

__all__ = [
    "NORMS",
    "STFN",
    "GCNPropagation",
    "SpikingGCNConv",
    "SpikingSAGEConv",
    "SpikingGATConv",
    "SpikingLinearAttention",
    "make_norm",
]

NORMS = ("none", "bn", "stfn")


class STFN(nn.Module):
    """Spatio-temporal feature normalisation of GC-SNN (Xu et al., IJCAI 2021), per time step.

    Each node's pre-activation is standardised over its channels, then scaled per channel
    (:math:`\\lambda`, init 1) and shifted (:math:`\\beta`, init 0) and multiplied by the firing
    threshold, so the normalised current lives on the neuron's scale (module docstring). The paper
    also pools the statistics over time steps; here they are taken per step (the layers run one step
    per call). Counted as real-valued operations (one per element).

    Shapes
    ------
    ``z [N, C]`` -> ``[N, C]``, floating point in the parameters' dtype and device, finite (``TypeError`` /
    ``ValueError`` naming ``z`` otherwise).
    """

    def __init__(self, channels: int, v_threshold: float = 1.0, eps: float = 1e-5) -> None:
        super().__init__()
        check_int("channels", channels, low=1)
        self.v_threshold = check_float(
            "v_threshold", v_threshold, 0.0, math.inf, low_open=True, high_open=True
        )
        self.eps = check_float("eps", eps, 0.0, math.inf, low_open=True, high_open=True)
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, z: Tensor) -> Tensor:
        check_tensor("z", z, like=self, like_name="STFN")
        if z.dim() != 2 or z.size(1) != self.weight.numel():
            raise ValueError(f"z must be [N, {self.weight.numel()}], got {tuple(z.shape)}")
        record(self, "norm", z.numel(), z)
        mu = z.mean(1, keepdim=True)
        var = z.var(1, unbiased=False, keepdim=True)
        return self.v_threshold * (self.weight * (z - mu) / torch.sqrt(var + self.eps) + self.bias)


def make_norm(norm: str, channels: int, v_threshold: float = 1.0) -> nn.Module:
    """``"none"`` -> identity, ``"bn"`` -> ``BatchNorm1d`` over nodes, ``"stfn"`` -> :class:`STFN`.

    Both normalisations are counted as real-valued operations by the energy counter.
    """
    check_choice("norm", norm, NORMS)
    if norm == "bn":
        return nn.BatchNorm1d(channels)
    if norm == "stfn":
        return STFN(channels, v_threshold)
    return nn.Identity()


def _check(x: Tensor, edge_index: Tensor, like: nn.Module | None = None) -> None:
    """Validate ``(x, edge_index)``; with ``like``, ``x`` must also match that module's parameter dtype/device."""
    if not isinstance(x, Tensor) or x.dim() != 2:
        raise ValueError(f"x must be a [N, F] tensor, got {getattr(x, 'shape', type(x))}")
    if x.is_meta:
        raise ValueError("x is a meta tensor (no data); pass a materialised tensor")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got {x.dtype}")
    param = next(like.parameters(), None) if like is not None else None
    if param is not None and (x.dtype != param.dtype or x.device != param.device):
        raise TypeError(
            f"x is {x.dtype} on {x.device} but the model's parameters are {param.dtype} on {param.device} "
            "(convert the model or the input)"
        )
    if not bool(torch.isfinite(x).all()):
        raise ValueError("x contains NaN or inf")
    check_adjacency(edge_index, x.size(0))


def _to_csr(index: Tensor, values: Tensor, num_nodes: int) -> Tensor:
    """``[N, N]`` sparse CSR matrix with entries ``values`` at ``index`` (duplicates summed)."""
    with warnings.catch_warnings():  # torch flags sparse CSR as beta
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_coo_tensor(index, values, (num_nodes, num_nodes)).coalesce().to_sparse_csr()


def _same(a: Tensor | None, b: Tensor | None) -> bool:
    """Exact equality of two optional tensors (dtype, device, shape and every element)."""
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.device == b.device and a.shape == b.shape and torch.equal(a, b)


class GCNPropagation(MessagePassing):
    """Weight-free K-hop propagation :math:`\\hat A^K x` with symmetric normalisation and self-loops.

    ``cached=True`` keeps the normalised adjacency together with an exact snapshot of the graph it
    was computed from (a copy of ``edge_index`` and of ``edge_weight``, the node count and the
    dtype); a call is served from the cache only when the new graph is element-wise identical, so
    any rewiring (degree-preserving or not, in place or not) recomputes. The comparison costs
    :math:`O(E)`, far below the normalisation it saves. Normalisation runs in the input's dtype
    (float64 stays float64). Every hop is reported to the energy counter with its input (hop 1 on
    spikes is accumulate-only; later hops are real-valued).

    Shapes
    ------
    ``x [N, F]``, ``edge_index [2, E]`` (or a sparse ``[N, N]`` adjacency), optional ``edge_weight [E]``
    -> ``[N, F]``.
    """

    def __init__(self, K: int = 2, cached: bool = True) -> None:
        super().__init__(aggr="add")
        self.K = check_int("K", K, low=0)
        self.cached = bool(cached)
        # (num_nodes, dtype, edge_index snapshot, edge_weight snapshot) -> (normalised index, weights)
        self._cache: tuple[tuple[int, torch.dtype, Tensor, Tensor | None], Tensor, Tensor | None] | None = (
            None
        )

    def normalized(
        self,
        edge_index: Tensor,
        edge_weight: Tensor | None,
        num_nodes: int,
        dtype: torch.dtype = torch.float32,
    ):
        """Normalised adjacency :math:`\\hat A` in ``dtype`` (served from the exact-snapshot cache)."""
        if edge_weight is not None:
            edge_weight = edge_weight.to(dtype)
        if is_torch_sparse_tensor(edge_index):
            if edge_index.is_floating_point():
                edge_index = edge_index.to(dtype)
            adj, _ = gcn_norm(edge_index, None, num_nodes, add_self_loops=True, dtype=dtype)
            return adj, None
        if self.cached and self._cache is not None:
            (n, dt, ei_snap, w_snap), ei, w = self._cache
            same = (
                n == num_nodes and dt == dtype and _same(ei_snap, edge_index) and _same(w_snap, edge_weight)
            )
            if same and (edge_weight is None or not edge_weight.requires_grad):
                return ei, w
        ei, w = gcn_norm(edge_index, edge_weight, num_nodes, add_self_loops=True, dtype=dtype)
        if self.cached and (edge_weight is None or not edge_weight.requires_grad):
            snap_w = None if edge_weight is None else edge_weight.detach().clone()
            self._cache = ((num_nodes, dtype, edge_index.detach().clone(), snap_w), ei, w)
        return ei, w

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        if self.K == 0:
            return x
        ei, w = self.normalized(
            edge_index, edge_weight, x.size(0), x.dtype if x.is_floating_point() else torch.float32
        )
        nnz = ei._nnz() if is_torch_sparse_tensor(ei) else ei.size(1)
        adj = None if is_torch_sparse_tensor(ei) else self._csr(ei, w, x.size(0))
        for _ in range(self.K):
            record(self, "propagation", nnz * x.size(1), x)
            x = self.propagate(ei, x=x, edge_weight=w) if adj is None else torch.sparse.mm(adj, x)
        return x

    def _csr(self, ei: Tensor, w: Tensor | None, num_nodes: int) -> Tensor | None:
        """CSR form (rows = targets) of the normalised adjacency: built once per cached graph (every call
        when ``cached=False``), so cached and uncached calls run the same kernel on the same matrix.

        Same sums as PyG's gather-scatter path (up to float summation order), several times faster for
        the ``K x T`` propagations of a spiking model. ``None`` when the weights need gradients (then
        the gather-scatter path runs).
        """
        if w is not None and w.requires_grad:
            return None
        held = getattr(self, "_csr_cache", None)
        if held is not None and held[0] is ei:
            return held[1]
        vals = torch.ones(ei.size(1), dtype=torch.float32) if w is None else w.detach()
        adj = _to_csr(ei.flip(0), vals, num_nodes)
        self._csr_cache = (ei, adj)
        return adj

    def message(self, x_j: Tensor, edge_weight: Tensor | None) -> Tensor:
        return x_j if edge_weight is None else edge_weight.view(-1, 1) * x_j

    def message_and_aggregate(self, adj_t: Tensor, x: Tensor) -> Tensor:
        return spmm(adj_t, x, reduce=self.aggr)


class SpikingGCNConv(MessagePassing):
    """Spiking GCN layer: K-hop propagation, linear map, normalisation, spiking neuron (one time step).

    Parameters
    ----------
    in_channels, out_channels : int
        Widths.
    K : int
        Propagation hops (0 = a spiking linear layer, used when :math:`\\hat A^K x` is precomputed).
    neuron : {"IF", "LIF", "PLIF"}
        Neuron type; remaining keyword arguments go to it (``v_threshold``, ``tau``, ``surrogate``...).
    norm : {"none", "bn"}
        Normalisation of the pre-activation.
    residual : bool
        Add :math:`W_{res} s_{in}`.
    cached : bool
        Cache the normalised adjacency.

    Shapes
    ------
    ``x [N, in_channels]`` (spikes or reals), ``edge_index [2, E]`` -> spikes ``[N, out_channels]``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        K: int = 2,
        neuron: str = "LIF",
        norm: str = "bn",
        residual: bool = False,
        cached: bool = True,
        bias: bool = True,
        **neuron_kwargs,
    ) -> None:
        super().__init__(aggr="add")
        check_int("in_channels", in_channels, low=1)
        check_int("out_channels", out_channels, low=1)
        check_choice("neuron", neuron, tuple(NEURONS))
        self.in_channels, self.out_channels = in_channels, out_channels
        self.prop = GCNPropagation(K, cached=cached)
        self.lin = nn.Linear(in_channels, out_channels, bias=bias)
        self.norm = make_norm(norm, out_channels, neuron_kwargs.get("v_threshold", 1.0))
        self.res = nn.Linear(in_channels, out_channels, bias=False) if residual else None
        self.neuron = make_neuron(neuron, **neuron_kwargs)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        _check(x, edge_index, self)
        if x.size(1) != self.in_channels:
            raise ValueError(f"x has {x.size(1)} channels, layer expects in_channels={self.in_channels}")
        z = self.norm(self.lin(self.prop(x, edge_index, edge_weight)))
        if self.res is not None:
            z = z + self.res(x)
        return self.neuron(z)

    def reset(self) -> None:
        self.neuron.reset()


class SpikingSAGEConv(MessagePassing):
    """SpikeNet-style spiking SAGE layer: self and mean-of-neighbour terms, norm, neuron (one step).

    Parameters as :class:`SpikingGCNConv` (no ``K``; one hop of mean aggregation).

    Shapes
    ------
    ``x [N, in_channels]``, ``edge_index [2, E]`` -> spikes ``[N, out_channels]``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        neuron: str = "LIF",
        norm: str = "bn",
        residual: bool = False,
        bias: bool = True,
        **neuron_kwargs,
    ) -> None:
        super().__init__(aggr="mean")
        check_int("in_channels", in_channels, low=1)
        check_int("out_channels", out_channels, low=1)
        check_choice("neuron", neuron, tuple(NEURONS))
        self.in_channels, self.out_channels = in_channels, out_channels
        self.lin_self = nn.Linear(in_channels, out_channels, bias=bias)
        self.lin_neigh = nn.Linear(in_channels, out_channels, bias=False)
        self.norm = make_norm(norm, out_channels, neuron_kwargs.get("v_threshold", 1.0))
        self.res = nn.Linear(in_channels, out_channels, bias=False) if residual else None
        self.neuron = make_neuron(neuron, **neuron_kwargs)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        _check(x, edge_index)
        if x.size(1) != self.in_channels:
            raise ValueError(f"x has {x.size(1)} channels, layer expects in_channels={self.in_channels}")
        if is_torch_sparse_tensor(edge_index):
            nnz = edge_index._nnz()
            deg = torch.sparse.sum(
                edge_index.to_sparse_coo() if edge_index.layout != torch.sparse_coo else edge_index, 1
            )
            agg = spmm(edge_index, x, reduce="sum") / deg.to_dense().clamp_min(1).view(-1, 1)
        else:
            nnz = edge_index.size(1)
            agg = torch.sparse.mm(self._mean_csr(edge_index, x.size(0)).to(x.dtype), x)
        record(self, "propagation", nnz * x.size(1), x)
        z = self.norm(self.lin_self(x) + self.lin_neigh(agg))
        if self.res is not None:
            z = z + self.res(x)
        return self.neuron(z)

    def reset(self) -> None:
        self.neuron.reset()

    def _mean_csr(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        """Row-normalised ``[N, N]`` CSR (row = target, ``1 / in-degree`` per edge), cached per exact graph.

        Equals PyG's ``scatter(..., reduce="mean")`` of the messages (nodes without in-edges get 0).
        """
        held = getattr(self, "_csr_cache", None)
        if held is not None and held[0] == num_nodes and _same(held[1], edge_index):
            return held[2]
        deg = torch.bincount(edge_index[1], minlength=num_nodes).clamp_min(1).to(torch.float32)
        adj = _to_csr(edge_index.flip(0), 1.0 / deg[edge_index[1]], num_nodes)
        self._csr_cache = (num_nodes, edge_index.detach().clone(), adj)
        return adj


class SpikingGATConv(MessagePassing):
    """GA-SNN-style spiking graph attention layer (one time step per call).

    PyG's ``GATConv`` (``heads`` heads concatenated, self-loops added) on the spike input, then the
    normalisation and the spiking neuron. Its input projection sees binary spikes (accumulate-only in
    the energy count); the attention-weighted aggregation multiplies real attention coefficients with
    the projected (real) features and is counted as ``(nnz(A) + N) x out_channels`` real operations,
    plus ``2 x (nnz(A) + N) x heads`` for the attention logits.

    Parameters
    ----------
    in_channels, out_channels : int
        ``out_channels`` must be divisible by ``heads``.
    heads : int
        Attention heads (default 4).
    neuron, norm, residual, neuron_kwargs
        As :class:`SpikingGCNConv`.

    Shapes
    ------
    ``x [N, in_channels]``, ``edge_index [2, E]`` -> spikes ``[N, out_channels]``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        heads: int = 4,
        neuron: str = "LIF",
        norm: str = "bn",
        residual: bool = False,
        **neuron_kwargs,
    ) -> None:
        super().__init__(aggr="add")
        from torch_geometric.nn import GATConv

        check_int("in_channels", in_channels, low=1)
        check_int("out_channels", out_channels, low=1)
        check_int("heads", heads, low=1)
        if out_channels % heads:
            raise ValueError(f"out_channels ({out_channels}) must be divisible by heads ({heads})")
        check_choice("neuron", neuron, tuple(NEURONS))
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.gat = GATConv(in_channels, out_channels // heads, heads=heads, add_self_loops=True)
        self.norm = make_norm(norm, out_channels, neuron_kwargs.get("v_threshold", 1.0))
        self.res = nn.Linear(in_channels, out_channels, bias=False) if residual else None
        self.neuron = make_neuron(neuron, **neuron_kwargs)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        _check(x, edge_index, self)
        if x.size(1) != self.in_channels:
            raise ValueError(f"x has {x.size(1)} channels, layer expects in_channels={self.in_channels}")
        if is_torch_sparse_tensor(edge_index):
            raise ValueError("SpikingGATConv needs edge_index as a [2, E] tensor (no sparse adjacency)")
        z = self.gat(x, edge_index)
        nnz = edge_index.size(1) + x.size(0)
        record(self, "propagation", nnz * self.out_channels + 2 * nnz * self.heads, z)
        z = self.norm(z)
        if self.res is not None:
            z = z + self.res(x)
        return self.neuron(z)

    def reset(self) -> None:
        self.neuron.reset()


class SpikingLinearAttention(nn.Module):
    """Spike-driven all-pair (global) attention of SpikeGraphormer, linear in the number of nodes.

    Q, K and V are spikes (linear map + BatchNorm + neuron); :math:`K^\\top V` (an ``[H, H]`` count
    matrix) and :math:`Q (K^\\top V)` therefore take binary inputs and are counted as accumulates
    at the measured rates; the output projection and its BatchNorm are real-valued. Returns the
    real-valued pre-activation (the caller adds it to its graph branch and fires).

    Shapes
    ------
    ``s [N, channels]`` (spikes) -> ``[N, channels]`` (real).
    """

    def __init__(self, channels: int, neuron: str = "LIF", **neuron_kwargs) -> None:
        super().__init__()
        check_int("channels", channels, low=1)
        check_choice("neuron", neuron, tuple(NEURONS))
        self.channels = channels
        self.q = nn.Linear(channels, channels, bias=False)
        self.k = nn.Linear(channels, channels, bias=False)
        self.v = nn.Linear(channels, channels, bias=False)
        self.bn_q, self.bn_k, self.bn_v = (nn.BatchNorm1d(channels) for _ in range(3))
        self.sn_q, self.sn_k, self.sn_v = (make_neuron(neuron, **neuron_kwargs) for _ in range(3))
        self.out = nn.Linear(channels, channels)
        self.bn_out = nn.BatchNorm1d(channels)

    def forward(self, s: Tensor) -> Tensor:
        if s.dim() != 2 or s.size(1) != self.channels:
            raise ValueError(f"s must be [N, {self.channels}], got {tuple(s.shape)}")
        q = self.sn_q(self.bn_q(self.q(s)))
        k = self.sn_k(self.bn_k(self.k(s)))
        v = self.sn_v(self.bn_v(self.v(s)))
        n, h = s.shape
        record(self, "attention_kv", n * h * h, k)  # K^T V: rows of K gate accumulations of V
        kv = k.t() @ v
        record(self, "attention_qkv", n * h * h, q)  # Q (K^T V): spikes of Q select rows of K^T V
        return self.bn_out(self.out(q @ kv / n))

    def reset(self) -> None:
        for sn in (self.sn_q, self.sn_k, self.sn_v):
            sn.reset()

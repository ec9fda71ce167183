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
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import is_torch_sparse_tensor, scatter, spmm

from neurips26.common.checks import check_choice, check_int
from neurips26.common.graphs import check_adjacency
from neurips26.graph.sgnnbench._ops import record
from neurips26.graph.sgnnbench.neurons import NEURONS, make_neuron

__all__ = ["NORMS", "GCNPropagation", "SpikingGCNConv", "SpikingSAGEConv", "make_norm"]

NORMS = ("none", "bn")


def make_norm(norm: str, channels: int) -> nn.Module:
    """``"none"`` -> identity, ``"bn"`` -> ``BatchNorm1d`` over nodes (counted as real-valued ops)."""
    check_choice("norm", norm, NORMS)
    return nn.BatchNorm1d(channels) if norm == "bn" else nn.Identity()


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
        for _ in range(self.K):
            record(self, "propagation", nnz * x.size(1), x)
            x = self.propagate(ei, x=x, edge_weight=w)
        return x

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
        self.norm = make_norm(norm, out_channels)
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
        self.norm = make_norm(norm, out_channels)
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
            agg = scatter(x[edge_index[0]], edge_index[1], 0, dim_size=x.size(0), reduce="mean")
        record(self, "propagation", nnz * x.size(1), x)
        z = self.norm(self.lin_self(x) + self.lin_neigh(agg))
        if self.res is not None:
            z = z + self.res(x)
        return self.neuron(z)

    def reset(self) -> None:
        self.neuron.reset()

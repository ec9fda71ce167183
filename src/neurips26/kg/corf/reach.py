"""Receptive fields: hop distances from query heads over the transposed adjacency."""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from neurips26.common.checks import check_int
from neurips26.common.graphs import check_edge_index


def _transpose_adjacency(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Sparse CSR ``A^T`` with ``A^T[v, u] = 1`` for every edge ``u -> v`` (duplicates summed).

    float32 whatever torch's default dtype: the reach sets read only whether a sum of ones is
    positive, which every floating dtype decides exactly.
    """
    values = torch.ones(edge_index.shape[1], dtype=torch.float32)
    with warnings.catch_warnings():  # torch's "sparse CSR is beta" / invariant-check notices
        warnings.simplefilter("ignore", UserWarning)
        adj = torch.sparse_coo_tensor(edge_index.flip(0), values, (num_nodes, num_nodes)).coalesce()
        return adj.to_sparse_csr()


def hop_reach(
    edge_index: Tensor, sources: Tensor, num_hops: int, num_nodes: int, adjacency_t: Tensor | None = None
) -> list[Tensor]:
    """Forward reach sets of several source sets, hop by hop.

    Parameters
    ----------
    edge_index : Tensor
        ``[2, E]`` directed edges (messages flow ``edge_index[0] -> edge_index[1]``).
    sources : Tensor
        ``[S, num_nodes]`` bool: the source set of each row (one head per query, or several heads of
        disjoint components).
    num_hops : int
        ``L >= 0``.
    num_nodes : int
        Number of nodes.
    adjacency_t : Tensor, optional
        Precomputed sparse ``A^T`` (see ``_transpose_adjacency``) of any floating dtype; the hop
        products run in its dtype (only positivity is read, so the sets do not depend on it).

    Returns
    -------
    list of Tensor
        ``L + 1`` bool tensors ``[S, num_nodes]``; entry ``l`` marks nodes within ``l`` hops.
    """
    check_int("num_hops", num_hops, low=0)
    adj_t = _transpose_adjacency(edge_index, num_nodes) if adjacency_t is None else adjacency_t
    reach = sources.bool()
    out = [reach]
    x = reach.t().to(adj_t.dtype)  # [n, S], in the adjacency's dtype (sparse @ dense needs one dtype)
    for _ in range(num_hops):
        x = ((adj_t @ x) + x) > 0
        x = x.to(adj_t.dtype)
        out.append(x.t().bool())
    return out


def receptive_field(
    edge_index: Tensor, heads: Tensor, num_hops: int, num_nodes: int, chunk: int = 512
) -> tuple[Tensor, Tensor]:
    """The L-hop receptive field :math:`R_L(q)` of each head.

    Parameters
    ----------
    edge_index : Tensor
        ``[2, E]`` (with inverse edges, so the field is an undirected ball).
    heads : Tensor
        ``[B]`` long head ids.
    num_hops : int
        ``L >= 1``.
    num_nodes : int
        Number of entities ``N``.
    chunk : int, default 512
        Heads processed per sparse product.

    Returns
    -------
    mask : Tensor
        ``[B, N]`` bool, ``mask[b, e]`` iff ``e`` is within ``L`` hops of ``heads[b]``.
    distance : Tensor
        ``[B, N]`` int8 hop distance, ``L + 1`` where unreached.
    """
    check_int("num_hops", num_hops, low=1)
    check_int("num_nodes", num_nodes, low=1)
    check_edge_index(edge_index, num_nodes)
    if heads.dim() != 1 or ((heads < 0) | (heads >= num_nodes)).any():
        raise ValueError(f"heads must be a 1-D tensor of ids in [0, {num_nodes})")
    adj_t = _transpose_adjacency(edge_index, num_nodes)
    masks, dists = [], []
    for start in range(0, heads.numel(), chunk):
        h = heads[start : start + chunk]
        src = torch.zeros(h.numel(), num_nodes, dtype=torch.bool)
        src[torch.arange(h.numel()), h] = True
        levels = hop_reach(edge_index, src, num_hops, num_nodes, adj_t)
        dist = torch.full((h.numel(), num_nodes), num_hops + 1, dtype=torch.int8)
        for level in range(num_hops, -1, -1):
            dist[levels[level]] = level
        masks.append(levels[-1])
        dists.append(dist)
    return torch.cat(masks), torch.cat(dists)

r"""Personalized-PageRank subgraph sampling: push-based approximate PPR and top-k neighbourhoods.

The per-query sampler of one-shot-subgraph reasoning (Zhou et al., 2024; the spec's PPR baseline):
score every entity by its personalized PageRank from the query head, keep the ``top_k`` entities and
run the CMP model on the subgraph they induce. It is *approximate*: a top-k neighbourhood need not
contain the L-hop receptive field, so scores differ from the full graph's (CoRF's supports do not).

Math
----
Random walk with restart probability :math:`\alpha` on the graph with inverse edges (a symmetric
multigraph; a node without out-edges keeps its walker, i.e. has a self-loop):
:math:`\pi_s = \alpha e_s + (1 - \alpha)\, \pi_s P`, :math:`P = D^{-1} A`.

:func:`exact_ppr` solves :math:`(I - (1 - \alpha) P^\top)\, \pi_s^\top = \alpha e_s` (float64 dense
solve; small graphs). :func:`approximate_ppr` is Andersen-Chung-Lang's push (non-lazy form) with
synchronous rounds over a batch of sources: residual :math:`r = e_s`, estimate :math:`p = 0`; every
round, each node with :math:`r_u \ge \varepsilon d_u` moves :math:`\alpha r_u` to :math:`p_u` and
spreads :math:`(1 - \alpha) r_u / d_u` along each out-edge. The invariant
:math:`\pi_s = p + \sum_u r_u \pi_u` and, on a symmetric graph, :math:`d_u \pi_u(v) = d_v \pi_v(u)`
give on termination (every :math:`r_u < \varepsilon d_u`)

.. math::  0 \le \pi_s(v) - p(v) \le \varepsilon\, d_v .

Shapes
------
- ``sources [B]``; :func:`approximate_ppr` / :func:`exact_ppr`: ``[B, N]`` float64.
- :meth:`PPRSampler.sample`: a list of ``B`` sorted node-id tensors (each holds its head).
- :meth:`PPRSubgraphExecutor.scores`: ``[B, N]``.
"""

from __future__ import annotations

import time

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

from neurips26.common.checks import check_float, check_int
from neurips26.common.graphs import check_edge_index
from neurips26.kg.corf.baselines import (
    _BatchedExecutor,
    _checked_inputs,
    _disjoint_union,
    _fill_unreached,
    _full_in_degree,
)


def _check_sources(sources: Tensor, num_nodes: int) -> Tensor:
    if not isinstance(sources, Tensor) or sources.dim() != 1 or sources.dtype != torch.long:
        raise ValueError("sources must be a 1-D long tensor of node ids")
    if sources.numel() == 0:
        raise ValueError("sources must not be empty")
    if sources.min() < 0 or sources.max() >= num_nodes:
        raise ValueError(
            f"sources must lie in [0, {num_nodes}), got ids in [{int(sources.min())}, {int(sources.max())}]"
        )
    return sources


def _out_degree(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Out-degree as float64; nodes without out-edges count 1 (their self-loop)."""
    deg = torch.bincount(edge_index[0], minlength=num_nodes).to(torch.float64)
    return deg.clamp_min(1.0)


def _common_checks(edge_index: Tensor, sources: Tensor, num_nodes: int, alpha: float) -> float:
    check_int("num_nodes", num_nodes, low=1)
    check_edge_index(edge_index, num_nodes)
    _check_sources(sources, num_nodes)
    return check_float("alpha", alpha, 0.0, 1.0, low_open=True, high_open=True)


def exact_ppr(edge_index: Tensor, sources: Tensor, num_nodes: int, alpha: float = 0.15) -> Tensor:
    """Exact PPR rows ``[B, N]`` (float64) by a dense linear solve; for graphs up to 4000 nodes."""
    alpha = _common_checks(edge_index, sources, num_nodes, alpha)
    if num_nodes > 4000:
        raise ValueError(f"num_nodes must be <= 4000 for the dense exact solve, got {num_nodes}")
    deg = _out_degree(edge_index, num_nodes)
    p = torch.zeros(num_nodes, num_nodes, dtype=torch.float64)
    p.index_put_((edge_index[0], edge_index[1]), 1.0 / deg[edge_index[0]], accumulate=True)
    dangling = torch.bincount(edge_index[0], minlength=num_nodes) == 0
    p[dangling, dangling] = 1.0
    eye = torch.eye(num_nodes, dtype=torch.float64)
    rhs = alpha * eye[:, sources]  # [N, B]
    return torch.linalg.solve(eye - (1.0 - alpha) * p.T, rhs).T.contiguous()


def approximate_ppr(
    edge_index: Tensor,
    sources: Tensor,
    num_nodes: int,
    alpha: float = 0.15,
    eps: float = 1e-4,
    max_rounds: int = 100_000,
) -> Tensor:
    """Push-based approximate PPR ``[B, N]`` (float64): ``0 <= exact - approx <= eps * out_degree``.

    Synchronous Andersen-Chung-Lang push: all nodes above threshold push in the same round (only their
    out-edges are touched, through a CSR index).

    Raises:
        RuntimeError: if the residual is still above threshold after ``max_rounds`` rounds.
    """
    alpha = _common_checks(edge_index, sources, num_nodes, alpha)
    eps = check_float("eps", eps, 0.0, 1.0, low_open=True)
    check_int("max_rounds", max_rounds, low=1)
    deg = _out_degree(edge_index, num_nodes)
    perm = torch.argsort(edge_index[0], stable=True)  # CSR of out-edges: pushes touch active rows only
    col = edge_index[1, perm]
    count = torch.bincount(edge_index[0], minlength=num_nodes)
    rowptr = torch.cumsum(count, 0) - count
    b = sources.numel()
    r = torch.zeros(b, num_nodes, dtype=torch.float64)
    r[torch.arange(b), sources] = 1.0
    p = torch.zeros_like(r)
    thr = eps * deg
    for _ in range(max_rounds):
        qb, u = (r >= thr).nonzero(as_tuple=True)
        if qb.numel() == 0:
            return p
        mass = r[qb, u]
        p[qb, u] += alpha * mass
        r[qb, u] = 0.0
        share = (1.0 - alpha) * mass / deg[u]
        k = count[u]
        stay = k == 0  # a dangling node's walker stays (self-loop)
        r[qb[stay], u[stay]] += share[stay]
        rep = torch.repeat_interleave(torch.arange(u.numel()), k)
        first = torch.cumsum(k, 0) - k
        eid = rowptr[u][rep] + torch.arange(rep.numel()) - first[rep]
        r.index_put_((qb[rep], col[eid]), share[rep], accumulate=True)
    raise RuntimeError(f"approximate_ppr did not converge within max_rounds={max_rounds}")


class PPRSampler:
    """Top-k PPR neighbourhoods of query heads (the one-shot-subgraph sampler).

    Args:
        top_k (int): entities kept per query (the head always among them; fewer when fewer have
            non-zero PPR estimate).
        alpha (float, optional): restart probability. (default: ``0.15``)
        eps (float, optional): push threshold per unit degree. (default: ``1e-4``)
    """

    def __init__(self, top_k: int, alpha: float = 0.15, eps: float = 1e-4):
        self.top_k = check_int("top_k", top_k, low=1)
        self.alpha = check_float("alpha", alpha, 0.0, 1.0, low_open=True, high_open=True)
        self.eps = check_float("eps", eps, 0.0, 1.0, low_open=True)
        self.calls = 0

    def sample(self, edge_index: Tensor, heads: Tensor, num_nodes: int) -> list[Tensor]:
        """Sorted node ids of each head's top-k neighbourhood (ties broken by lower id)."""
        self.calls += 1
        ppr = approximate_ppr(edge_index, heads, num_nodes, self.alpha, self.eps)
        ppr[torch.arange(heads.numel()), heads] = float("inf")  # the head is always kept
        order = torch.sort(ppr, dim=1, descending=True, stable=True).indices[:, : self.top_k]
        keep = torch.gather(ppr, 1, order) > 0
        return [order[i][keep[i]].sort().values for i in range(heads.numel())]


class PPRSubgraphExecutor(_BatchedExecutor):
    """Baseline: per-query PPR top-k subgraphs (one-shot subgraph), batched as a disjoint union.

    Each query's head selects its top-k PPR neighbourhood; the model runs on the induced subgraph
    with full-graph in-degrees; entities outside it get the unreached score. Approximate.

    Args:
        model (NBFNetLite): the shared CMP model.
        sampler (PPRSampler): the neighbourhood sampler.
        batch_size (int, optional): queries per disjoint-union batch. (default: ``32``)
    """

    def __init__(self, model, sampler: PPRSampler, batch_size: int = 32):
        super().__init__(model, batch_size)
        if not isinstance(sampler, PPRSampler):
            raise TypeError(f"sampler must be a PPRSampler, got {type(sampler).__name__}")
        self.sampler = sampler

    def scores(self, queries: Tensor, graph: Data) -> Tensor:
        """Full-entity scores ``[B, N]`` (approximate)."""
        edge_index, edge_type, n = _checked_inputs(self.model, queries, graph)
        deg = _full_in_degree(graph)
        out = _fill_unreached(self.model, queries, n)
        sample_s = prop_s = 0.0
        edges = nodes_kept = 0
        for s in range(0, queries.shape[0], self.batch_size):
            chunk = queries[s : s + self.batch_size]
            t0 = time.perf_counter()
            picked = self.sampler.sample(edge_index, chunk[:, 0], n)
            parts = [subgraph(v, edge_index, edge_type, relabel_nodes=True, num_nodes=n) for v in picked]
            nodes, ei, et, eq, nq, heads = _disjoint_union(
                picked,
                [p[0] for p in parts],
                [p[1] for p in parts],
                torch.stack([torch.searchsorted(v, h) for v, h in zip(picked, chunk[:, 0])]),
            )
            sample_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            sc = self.model.forward_union(ei, et, eq, nq, heads, chunk[:, 1], deg[nodes])
            out[s + nq, nodes] = sc
            prop_s += time.perf_counter() - t0
            edges += ei.shape[1]
            nodes_kept += nodes.numel()
        self.last_stats = {
            "sampling_s": sample_s,
            "propagation_s": prop_s,
            "edges_processed": edges,
            "mean_nodes": nodes_kept / queries.shape[0],
        }
        return out

"""Baseline executors: full-graph propagation (NBFNet) and per-query subgraphs."""

from __future__ import annotations

import time

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import k_hop_subgraph

from neurips26.common.checks import check_int
from neurips26.common.graphs import check_edge_index
from neurips26.common.kg import check_queries
from neurips26.common.kg import in_degree as _in_degree
from neurips26.kg.corf.model import NBFNetLite, _check_data


def _graph_parts(graph: Data) -> tuple[Tensor, Tensor, int]:
    if not isinstance(graph, Data):
        raise TypeError(f"graph must be a torch_geometric.data.Data, got {type(graph).__name__}")
    if graph.edge_index is None or getattr(graph, "edge_type", None) is None:
        raise ValueError("graph must carry edge_index and edge_type")
    n = graph.num_nodes
    check_edge_index(graph.edge_index, n, "graph.edge_index")
    return graph.edge_index, graph.edge_type, int(n)


def _full_in_degree(graph: Data) -> Tensor:
    cached = getattr(graph, "in_degree", None)
    if cached is not None and cached.numel() == graph.num_nodes:
        return cached
    return _in_degree(graph.edge_index, graph.num_nodes)


def _check_model(model) -> NBFNetLite:
    if not isinstance(model, NBFNetLite):
        raise TypeError(f"model must be an NBFNetLite, got {type(model).__name__}")
    return model


def _fill_unreached(model: NBFNetLite, queries: Tensor, num_nodes: int) -> Tensor:
    return model.unreached_score(queries[:, 1]).unsqueeze(1).expand(-1, num_nodes).clone()


def _checked_inputs(model: NBFNetLite, queries: Tensor, graph: Data) -> tuple[Tensor, Tensor, int]:
    """``graph``'s ``edge_index``, ``edge_type`` and node count, once ``graph`` and ``queries`` are checked."""
    edge_index, edge_type, n = _graph_parts(graph)
    _check_data(queries)
    check_queries(queries, n, model.num_relations)
    return edge_index, edge_type, n


def _disjoint_union(
    nodes: list[Tensor], edge_index: list[Tensor], edge_type: list[Tensor], heads: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Relabelled per-query subgraphs as one disjoint union.

    Returns ``(nodes, edge_index, edge_type, edge_query, node_query, heads)`` in union-local ids
    (``heads [Q]`` given subgraph-local), the inputs of :meth:`NBFNetLite.forward_union`.
    """
    sizes = torch.tensor([v.numel() for v in nodes])
    offsets = torch.cumsum(sizes, 0) - sizes
    ei = torch.cat([e + off for e, off in zip(edge_index, offsets.tolist())], dim=1)
    eq = torch.repeat_interleave(torch.arange(len(nodes)), torch.tensor([e.shape[1] for e in edge_index]))
    nq = torch.repeat_interleave(torch.arange(len(nodes)), sizes)
    return torch.cat(nodes), ei, torch.cat(edge_type), eq, nq, heads + offsets


class _BatchedExecutor:
    """What every executor holds: the checked model, the queries per batch and the last call's stats."""

    def __init__(self, model: NBFNetLite, batch_size: int = 32):
        self.model = _check_model(model)
        self.batch_size = check_int("batch_size", batch_size, low=1)
        self.last_stats: dict = {}


class FullGraphExecutor(_BatchedExecutor):
    """Baseline: every query propagates over the whole graph (NBFNet), in chunks of ``batch_size``.

    Args:
        model (NBFNetLite): the shared CMP model.
        batch_size (int, optional): queries per propagation. (default: ``32``)
    """

    def scores(self, queries: Tensor, graph: Data) -> Tensor:
        """Full-entity scores ``[B, N]``."""
        edge_index, edge_type, n = _checked_inputs(self.model, queries, graph)
        deg = _full_in_degree(graph)
        t0 = time.perf_counter()
        out = [
            self.model(edge_index, edge_type, queries[s : s + self.batch_size], n, deg)
            for s in range(0, queries.shape[0], self.batch_size)
        ]
        self.last_stats = {
            "propagation_s": time.perf_counter() - t0,
            "edges_processed": queries.shape[0] * edge_index.shape[1],
        }
        return torch.cat(out)


class SubgraphExecutor(_BatchedExecutor):
    """Baseline: one L-hop subgraph per query (PyG ``k_hop_subgraph``), batched as a disjoint union.

    Args:
        model (NBFNetLite): the shared CMP model.
        batch_size (int, optional): queries per disjoint-union batch. (default: ``32``)
        num_hops (int, optional): extraction depth; defaults to the model's depth (exact).
    """

    def __init__(self, model: NBFNetLite, batch_size: int = 32, num_hops: int | None = None):
        super().__init__(model, batch_size)
        self.num_hops = check_int("num_hops", model.num_layers if num_hops is None else num_hops, low=1)

    def scores(self, queries: Tensor, graph: Data) -> Tensor:
        """Full-entity scores ``[B, N]``; entities outside a query's subgraph get the unreached score."""
        edge_index, edge_type, n = _checked_inputs(self.model, queries, graph)
        deg = _full_in_degree(graph)
        out = _fill_unreached(self.model, queries, n)
        extract_s = prop_s = 0.0
        edges = 0
        for s in range(0, queries.shape[0], self.batch_size):
            chunk = queries[s : s + self.batch_size]
            t0 = time.perf_counter()
            parts = [
                k_hop_subgraph(
                    int(h),
                    self.num_hops,
                    edge_index,
                    relabel_nodes=True,
                    num_nodes=n,
                    flow="target_to_source",
                )
                for h in chunk[:, 0].tolist()
            ]
            nodes, ei, et, eq, nq, heads = _disjoint_union(
                [p[0] for p in parts],
                [p[1] for p in parts],
                [edge_type[p[3]] for p in parts],
                torch.stack([p[2][0] for p in parts]),
            )
            extract_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            sc = self.model.forward_union(ei, et, eq, nq, heads, chunk[:, 1], deg[nodes])
            out[s + nq, nodes] = sc
            prop_s += time.perf_counter() - t0
            edges += ei.shape[1]
        self.last_stats = {"extraction_s": extract_s, "propagation_s": prop_s, "edges_processed": edges}
        return out

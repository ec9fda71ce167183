"""The CoRF executor: batched propagation on receptive supports with residual compensation."""

from __future__ import annotations

import time

import torch
from torch import Tensor
from torch_geometric.data import Data

from neurips26.common.checks import check_choice, check_int
from neurips26.kg.corf.baselines import (
    SubgraphExecutor,
    _check_model,
    _checked_inputs,
    _fill_unreached,
    _graph_parts,
)
from neurips26.kg.corf.model import NBFNetLite
from neurips26.kg.corf.planner import ReceptiveSupportPlanner, Support


class CoRFExecutor:
    """CoRF: batched CMP on shared receptive supports, exact residual compensation.

    Args:
        model (NBFNetLite): the shared CMP model; must be progressive unless ``allow_approx``.
        planner (ReceptiveSupportPlanner): support planner with ``num_hops == model.num_layers``.
        batch_size (int, optional): queries propagated together on one support (larger groups are
            split). (default: ``32``)
        residual (str, optional): ``"exact_subgraph"`` runs residual queries with their own exact
            L-hop subgraph. (default: ``"exact_subgraph"``)
        allow_approx (bool, optional): accept a non-progressive model or a budgeted planner; the
            results are then approximate and ``last_stats["exact"]`` is ``False``. (default: ``False``)

    Shapes:
        - **input:** queries ``[B, 2]`` (head, relation); graph with ``edge_index [2, E]``, ``edge_type [E]``
        - **output:** scores ``[B, N]``
    """

    def __init__(
        self,
        model: NBFNetLite,
        planner: ReceptiveSupportPlanner,
        batch_size: int = 32,
        residual: str = "exact_subgraph",
        allow_approx: bool = False,
    ):
        self.model = _check_model(model)
        if not isinstance(planner, ReceptiveSupportPlanner):
            raise TypeError(f"planner must be a ReceptiveSupportPlanner, got {type(planner).__name__}")
        if planner.num_hops != model.num_layers:
            raise ValueError(
                f"planner.num_hops ({planner.num_hops}) must equal model.num_layers ({model.num_layers})"
            )
        if not allow_approx and not model.progressive:
            raise ValueError(
                "exact CoRF needs a progressive (zero-preserving) model; a non-progressive model's biases make "
                "every node's state non-zero, so supports are approximate: pass allow_approx=True to accept that"
            )
        if not allow_approx and planner.padding != "exact":
            raise ValueError(
                "planner.padding < num_hops is approximate: pass allow_approx=True to accept that"
            )
        self.planner = planner
        self.batch_size = check_int("batch_size", batch_size, low=1)
        self.residual = check_choice("residual", residual, ("exact_subgraph",))
        self.allow_approx = bool(allow_approx)
        self._residual_exec = SubgraphExecutor(model, batch_size)
        self.last_stats: dict = {}

    def plan(self, queries: Tensor, graph: Data) -> tuple[list[Support], Tensor]:
        edge_index, edge_type, n = _graph_parts(graph)
        return self.planner.plan(queries, edge_index, edge_type, n, self.model.num_relations)

    def scores(
        self, queries: Tensor, graph: Data, plan: tuple[list[Support], Tensor] | None = None
    ) -> Tensor:
        """Full-entity scores ``[B, N]``; ``plan`` reuses a precomputed ``(supports, residual)``."""
        edge_index, edge_type, n = _checked_inputs(self.model, queries, graph)
        supports, residual = self.plan(queries, graph) if plan is None else plan
        out = _fill_unreached(self.model, queries, n)
        t0 = time.perf_counter()
        edges = 0
        pack: list[tuple[Support, Tensor]] = []
        count = 0
        for sup in supports:
            for s in range(0, sup.query_idx.numel(), self.batch_size):
                piece = sup.query_idx[s : s + self.batch_size]
                if count + piece.numel() > self.batch_size:
                    edges += self._run_pack(pack, queries, out)
                    pack, count = [], 0
                pack.append((sup, piece))
                count += piece.numel()
        if pack:
            edges += self._run_pack(pack, queries, out)
        prop_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        if residual.numel():
            out[residual] = self._residual_exec.scores(queries[residual], graph)
            edges += self._residual_exec.last_stats["edges_processed"]
        exact = self.model.progressive and all(s.exact for s in supports)
        self.last_stats = {
            **self.planner.last_stats,
            "propagation_s": prop_s,
            "residual_s": time.perf_counter() - t0,
            "edges_processed": edges,
            "exact": exact,
        }
        return out

    def _run_pack(self, pack: list[tuple[Support, Tensor]], queries: Tensor, out: Tensor) -> int:
        """Propagate a pack of (support, query positions) as one batch and write the scores into ``out``.

        Every query gets its own copy of its support (the ``[|g|, |S_g|, d]`` state layout, flattened
        so that supports of different sizes share one call); the support's edges are extracted once
        and copied by index offsets.
        """
        if len(pack) == 1:  # one support: the [|g|, |S_g|, d] layout on its shared edge_index (step 7)
            sup, idx = pack[0]
            q = torch.stack([torch.searchsorted(sup.nodes, queries[idx, 0]), queries[idx, 1]], dim=1)
            out[idx.unsqueeze(1), sup.nodes.unsqueeze(0)] = self.model(
                sup.edge_index, sup.edge_type, q, sup.nodes.numel(), sup.in_degree
            )
            return idx.numel() * sup.edge_index.shape[1]
        nodes, ei, et, eq, nq, heads, rels, qpos, deg = [], [], [], [], [], [], [], [], []
        base, qbase = 0, 0
        for sup, idx in pack:
            k, ns, es = idx.numel(), sup.nodes.numel(), sup.edge_index.shape[1]
            offsets = base + torch.arange(k) * ns
            nodes.append(sup.nodes.repeat(k))
            deg.append(sup.in_degree.repeat(k))
            ei.append((sup.edge_index.unsqueeze(1) + offsets.view(1, k, 1)).reshape(2, k * es))
            et.append(sup.edge_type.repeat(k))
            eq.append(torch.arange(qbase, qbase + k).repeat_interleave(es))
            nq.append(torch.arange(qbase, qbase + k).repeat_interleave(ns))
            heads.append(offsets + torch.searchsorted(sup.nodes, queries[idx, 0]))
            rels.append(queries[idx, 1])
            qpos.append(idx)
            base += k * ns
            qbase += k
        node_query = torch.cat(nq)
        sc = self.model.forward_union(
            torch.cat(ei, 1),
            torch.cat(et),
            torch.cat(eq),
            node_query,
            torch.cat(heads),
            torch.cat(rels),
            torch.cat(deg),
        )
        out[torch.cat(qpos)[node_query], torch.cat(nodes)] = sc
        return int(sum(e.shape[1] for e in ei))


#: The component name of the registry: the CoRF executor.
CoRF = CoRFExecutor

"""CoRF: coupled receptive fields - shared, padded supports for batched conditional message passing.

Paper: "CoRF" (abstract only; registry seed ``000_f8b4140a0e3b5d84.txt``, paragraph beginning
"Conditional message passing (CMP) currently represents"). No paper text or code is public; the
mechanisms below follow the spec's reconstruction (``../shared/specs/corf.md``), marked *inferred*.

Conditional message passing answers a query :math:`q = (h_q, r_q, ?)` by propagating query-specific
node states from the head. :class:`NBFNetLite` is the shared CMP model, in the zero-preserving
("progressive") form that makes locality exact:

.. math::
    H_q^{(0)}[e] &= \\mathbb 1[e = h_q]\\, w(r_q), \\\\
    a_q^{(l)}[v] &= \\frac{1}{\\deg^-_{G}(v)} \\sum_{(u, r, v) \\in E} H_q^{(l-1)}[u] \\odot W_l(r, r_q)
                    + H_q^{(0)}[v], \\\\
    H_q^{(l)}[v] &= H_q^{(l-1)}[v] + \\mathbb 1[v \\in R_l(q)]\\,
                    \\mathrm{ReLU}\\big(\\mathrm{Lin}_l [a_q^{(l)}[v], H_q^{(l-1)}[v]]\\big), \\\\
    s(q, e) &= \\mathrm{MLP}\\big([H_q^{(L)}[e], w(r_q)]\\big),

with :math:`W_l(r, r_q)` query-conditioned relation vectors (DistMult messages, NBFNet's dependent
relations), :math:`\\deg^-_G` the *full-graph* in-degree, and :math:`R_l(q)` the entities within
:math:`l` hops of :math:`h_q`. Unreached entities keep the exact zero state and send nothing, so
every score on :math:`R_L(q)` depends only on the subgraph induced by :math:`R_L(q)` plus the
full-graph in-degrees, and every entity outside it gets the closed-form score
:math:`\\mathrm{MLP}([0, w(r_q)])` (:meth:`NBFNetLite.unreached_score`).

Three executors share one model:

* :class:`FullGraphExecutor` - propagate every query over the whole graph (NBFNet);
* :class:`SubgraphExecutor` - extract :math:`R_L(q)` per query (PyG ``k_hop_subgraph``) and run the
  batch as a disjoint union (the per-query subgraph baseline);
* :class:`CoRFExecutor` - :class:`ReceptiveSupportPlanner` groups queries into *receptive supports*
  (unions of overlapping receptive fields under a node budget); each support is extracted once,
  carries the full-graph in-degrees of its nodes (boundary padding), and all its queries propagate on
  it together as a ``[|g|, |S_g|, d]`` state tensor. Queries whose receptive field a support cannot
  cover go to a residual set processed with their own exact subgraph (residual compensation), and
  candidates outside a support get the closed-form unreached score. Under these rules CoRF's scores
  equal the full-graph executor's (tested).

:func:`lpt_assign` balances supports over workers by longest-processing-time-first (makespan
:math:`\\le (4/3 - 1/(3W))\\,\\mathrm{OPT}`) and :func:`distributed_scores` runs it on a
``torch.distributed`` group.
"""

from __future__ import annotations

import heapq
import statistics
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import MessagePassing
from torch_geometric.utils import k_hop_subgraph, subgraph

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.common.graphs import check_edge_index
from neurips26.common.kg import check_queries
from neurips26.common.kg import in_degree as _in_degree

__all__ = [
    "CMPLayer",
    "NBFNetLite",
    "receptive_field",
    "hop_reach",
    "Support",
    "ReceptiveSupportPlanner",
    "FullGraphExecutor",
    "SubgraphExecutor",
    "CoRFExecutor",
    "CoRF",
    "redundancy_ratio",
    "lpt_assign",
    "round_robin_assign",
    "makespan",
    "distributed_scores",
    "train_cmp",
]


# ------------------------------------------------------------------------------------------ reach
def _transpose_adjacency(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Sparse CSR ``A^T`` with ``A^T[v, u] = 1`` for every edge ``u -> v`` (duplicates summed)."""
    values = torch.ones(edge_index.shape[1])
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
        Precomputed sparse ``A^T`` (see ``_transpose_adjacency``).

    Returns
    -------
    list of Tensor
        ``L + 1`` bool tensors ``[S, num_nodes]``; entry ``l`` marks nodes within ``l`` hops.
    """
    check_int("num_hops", num_hops, low=0)
    adj_t = _transpose_adjacency(edge_index, num_nodes) if adjacency_t is None else adjacency_t
    reach = sources.bool()
    out = [reach]
    x = reach.t().to(torch.float32)  # [n, S]
    for _ in range(num_hops):
        x = ((adj_t @ x) + x) > 0
        x = x.to(torch.float32)
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


# ------------------------------------------------------------------------------------------ model


def _check_data(queries: Tensor) -> None:
    """``queries`` must hold data (a meta tensor cannot be range-checked)."""
    if isinstance(queries, Tensor) and queries.is_meta:
        raise ValueError("queries is a meta tensor (no data); pass a materialised tensor")


class CMPLayer(MessagePassing):
    """One progressive DistMult CMP layer over a batch of query-conditioned node states.

    .. math::
        H'[v] = H[v] + m[v]\\, \\mathrm{ReLU}\\Big(\\mathrm{Lin}\\big[\\tfrac{1}{\\deg^-(v)}
        \\textstyle\\sum_{(u,r,v)} H[u] \\odot W(r, r_q) + H^{(0)}[v],\\; H[v]\\big]\\Big)

    Args:
        hidden (int): state width ``d``.

    Shapes:
        - **input:** states ``[S, n, d]``, edge_index ``[2, E]``, per-edge relation vectors
          ``[S, E, d]``, boundary ``[S, n, d]``, degree ``[n]``, update mask ``[S, n]``
        - **output:** ``[S, n, d]``
    """

    def __init__(self, hidden: int):
        super().__init__(aggr="sum", node_dim=-2)
        self.hidden = check_int("hidden", hidden, low=1)
        self.update_lin = nn.Linear(2 * hidden, hidden)

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_rel: Tensor,
        boundary: Tensor,
        degree: Tensor,
        mask: Tensor | None,
    ) -> Tensor:
        n = x.shape[-2]
        agg = self.propagate(edge_index, x=x, edge_rel=edge_rel, size=(n, n))
        agg = agg / degree.clamp(min=1.0).unsqueeze(-1) + boundary
        update = F.relu(self.update_lin(torch.cat([agg, x], dim=-1)))
        if mask is not None:
            update = update * mask.unsqueeze(-1).to(update.dtype)
        return x + update

    def message(self, x_j: Tensor, edge_rel: Tensor) -> Tensor:
        return x_j * edge_rel


class NBFNetLite(nn.Module):
    """NBFNet-style conditional message passing model in the zero-preserving (progressive) form.

    Args:
        num_relations (int): relation ids the model accepts, inverses included (``2R``).
        hidden (int, optional): state width ``d``. (default: ``32``)
        num_layers (int, optional): CMP depth ``L``. (default: ``3``)
        progressive (bool, optional): mask updates to the reached set :math:`R_l(q)` so unreached
            entities keep the exact zero state. ``False`` gives a vanilla NBFNet whose biases touch
            every node; then scores are not local and exact executors refuse it. (default: ``True``)
        degree_norm (bool, optional): divide the summed messages by the full-graph in-degree.
            (default: ``True``)

    Shapes:
        - **input:** edge_index ``[2, E]``, edge_type ``[E]``, queries ``[B, 2]`` (local head id,
          relation), in_degree ``[n]``
        - **output:** scores ``[B, n]``
    """

    def __init__(
        self,
        num_relations: int,
        hidden: int = 32,
        num_layers: int = 3,
        progressive: bool = True,
        degree_norm: bool = True,
    ):
        super().__init__()
        self.num_relations = check_int("num_relations", num_relations, low=1)
        self.hidden = check_int("hidden", hidden, low=1)
        self.num_layers = check_int("num_layers", num_layers, low=1)
        self.progressive = bool(progressive)
        self.degree_norm = bool(degree_norm)
        self.query = nn.Embedding(num_relations, hidden)
        self.relation = nn.ModuleList(nn.Linear(hidden, num_relations * hidden) for _ in range(num_layers))
        self.layers = nn.ModuleList(CMPLayer(hidden) for _ in range(num_layers))
        self.readout = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def unreached_score(self, relations: Tensor) -> Tensor:
        """``[B]`` closed-form score :math:`\\mathrm{MLP}([0, w(r_q)])` of an entity the query never reaches."""
        w = self.query(relations)
        return self.readout(torch.cat([torch.zeros_like(w), w], dim=-1)).squeeze(-1)

    def _check(self, edge_index, edge_type, queries, num_nodes):
        check_int("num_nodes", num_nodes, low=1)
        check_edge_index(edge_index, num_nodes)
        if edge_type.shape != (edge_index.shape[1],):
            raise ValueError(
                f"edge_type must have shape ({edge_index.shape[1]},), got {tuple(edge_type.shape)}"
            )
        if edge_type.numel() and (edge_type.min() < 0 or edge_type.max() >= self.num_relations):
            raise ValueError(f"edge_type ids must lie in [0, {self.num_relations})")
        check_queries(queries, num_nodes, self.num_relations)

    def forward(
        self,
        edge_index: Tensor,
        edge_type: Tensor,
        queries: Tensor,
        num_nodes: int,
        in_degree: Tensor | None = None,
    ) -> Tensor:
        """Scores ``[B, num_nodes]`` of every (sub)graph node for each query, states batched ``[B, n, d]``."""
        self._check(edge_index, edge_type, queries, num_nodes)
        b = queries.shape[0]
        deg = in_degree if in_degree is not None else _in_degree(edge_index, num_nodes)
        w = self.query(queries[:, 1])  # [B, d]
        boundary = torch.zeros(b, num_nodes, self.hidden)
        boundary[torch.arange(b), queries[:, 0]] = w
        masks = None
        if self.progressive:
            src = torch.zeros(b, num_nodes, dtype=torch.bool)
            src[torch.arange(b), queries[:, 0]] = True
            masks = hop_reach(edge_index, src, self.num_layers, num_nodes)
        rels = [lin(w).view(b, self.num_relations, self.hidden)[:, edge_type] for lin in self.relation]
        h = self._propagate(boundary, edge_index, rels, deg, masks)
        return self.readout(torch.cat([h, w.unsqueeze(1).expand(-1, num_nodes, -1)], dim=-1)).squeeze(-1)

    def forward_union(
        self,
        edge_index: Tensor,
        edge_type: Tensor,
        edge_query: Tensor,
        node_query: Tensor,
        heads: Tensor,
        relations: Tensor,
        in_degree: Tensor,
    ) -> Tensor:
        """Scores ``[n]`` of a disjoint union of per-query subgraphs (one state row per node).

        ``node_query[i]`` / ``edge_query[j]`` give the query of node ``i`` / edge ``j``; ``heads[q]``
        is the union-local id of query ``q``'s head and ``relations[q]`` its relation.
        """
        n = node_query.numel()
        w = self.query(relations)  # [Q, d]
        boundary = torch.zeros(1, n, self.hidden)
        boundary[0, heads] = w
        masks = None
        if self.progressive:
            src = torch.zeros(1, n, dtype=torch.bool)
            src[0, heads] = True
            masks = hop_reach(edge_index, src, self.num_layers, n)
        q = relations.numel()
        rels = [
            lin(w).view(q, self.num_relations, self.hidden)[edge_query, edge_type].unsqueeze(0)
            for lin in self.relation
        ]
        h = self._propagate(boundary, edge_index, rels, in_degree, masks)
        return self.readout(torch.cat([h[0], w[node_query]], dim=-1)).squeeze(-1)

    def _propagate(self, boundary, edge_index, rels, deg, masks):
        if not self.degree_norm:
            deg = torch.ones_like(deg)
        h = boundary
        for level, (layer, rel) in enumerate(zip(self.layers, rels), start=1):
            h = layer(h, edge_index, rel, boundary, deg, None if masks is None else masks[level])
        return h


# ------------------------------------------------------------------------------------------ graph helpers
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


# ------------------------------------------------------------------------------------------ executors
class FullGraphExecutor:
    """Baseline: every query propagates over the whole graph (NBFNet), in chunks of ``batch_size``.

    Args:
        model (NBFNetLite): the shared CMP model.
        batch_size (int, optional): queries per propagation. (default: ``32``)
    """

    def __init__(self, model: NBFNetLite, batch_size: int = 32):
        self.model = _check_model(model)
        self.batch_size = check_int("batch_size", batch_size, low=1)
        self.last_stats: dict = {}

    def scores(self, queries: Tensor, graph: Data) -> Tensor:
        """Full-entity scores ``[B, N]``."""
        edge_index, edge_type, n = _graph_parts(graph)
        _check_data(queries)
        check_queries(queries, n, self.model.num_relations)
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


class SubgraphExecutor:
    """Baseline: one L-hop subgraph per query (PyG ``k_hop_subgraph``), batched as a disjoint union.

    Args:
        model (NBFNetLite): the shared CMP model.
        batch_size (int, optional): queries per disjoint-union batch. (default: ``32``)
        num_hops (int, optional): extraction depth; defaults to the model's depth (exact).
    """

    def __init__(self, model: NBFNetLite, batch_size: int = 32, num_hops: int | None = None):
        self.model = _check_model(model)
        self.batch_size = check_int("batch_size", batch_size, low=1)
        self.num_hops = check_int("num_hops", model.num_layers if num_hops is None else num_hops, low=1)
        self.last_stats: dict = {}

    def scores(self, queries: Tensor, graph: Data) -> Tensor:
        """Full-entity scores ``[B, N]``; entities outside a query's subgraph get the unreached score."""
        edge_index, edge_type, n = _graph_parts(graph)
        _check_data(queries)
        check_queries(queries, n, self.model.num_relations)
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
            nodes = torch.cat([p[0] for p in parts])
            sizes = torch.tensor([p[0].numel() for p in parts])
            offsets = torch.cumsum(sizes, 0) - sizes
            ei = torch.cat([p[1] + off for p, off in zip(parts, offsets.tolist())], dim=1)
            et = torch.cat([edge_type[p[3]] for p in parts])
            eq = torch.repeat_interleave(
                torch.arange(len(parts)), torch.tensor([p[1].shape[1] for p in parts])
            )
            nq = torch.repeat_interleave(torch.arange(len(parts)), sizes)
            heads = torch.stack([p[2][0] for p in parts]) + offsets
            extract_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            sc = self.model.forward_union(ei, et, eq, nq, heads, chunk[:, 1], deg[nodes])
            out[s + nq, nodes] = sc
            prop_s += time.perf_counter() - t0
            edges += ei.shape[1]
        self.last_stats = {"extraction_s": extract_s, "propagation_s": prop_s, "edges_processed": edges}
        return out


@dataclass
class Support:
    """A receptive support: one subgraph shared by a group of queries.

    Attributes
    ----------
    nodes : Tensor
        ``[n_g]`` sorted global entity ids.
    edge_index : Tensor
        ``[2, E_g]`` induced edges in support-local ids.
    edge_type : Tensor
        ``[E_g]``.
    in_degree : Tensor
        ``[n_g]`` *full-graph* in-degrees of the support nodes (boundary padding).
    query_idx : Tensor
        ``[|g|]`` positions of the support's queries in the planned batch.
    exact : bool
        Every query's full L-hop receptive field lies inside the support.
    cost : float
        Cost-model estimate :math:`|g|\\,|E(S_g)|\\,L`.
    """

    nodes: Tensor
    edge_index: Tensor
    edge_type: Tensor
    in_degree: Tensor
    query_idx: Tensor
    exact: bool
    cost: float


def _locality_order(edge_index: Tensor, num_nodes: int, how: str, seed: int) -> np.ndarray:
    """Position of each node in a locality-preserving order."""
    if how == "none":
        return np.arange(num_nodes)
    import scipy.sparse as sp
    from scipy.sparse.csgraph import breadth_first_order

    ei = edge_index.numpy()
    adj = sp.coo_matrix((np.ones(ei.shape[1]), (ei[0], ei[1])), shape=(num_nodes, num_nodes)).tocsr()
    adj = (adj + adj.T).tocsr()
    if how == "louvain":
        import networkx as nx

        g = nx.Graph()
        g.add_nodes_from(range(num_nodes))
        g.add_edges_from(zip(ei[0].tolist(), ei[1].tolist()))
        comms = nx.community.louvain_communities(g, seed=seed)
        order = [v for c in sorted(comms, key=min) for v in sorted(c)]
    else:  # bfs over every component
        seen = np.zeros(num_nodes, dtype=bool)
        order = []
        for root in range(num_nodes):
            if not seen[root]:
                comp = breadth_first_order(adj, root, directed=False, return_predecessors=False)
                seen[comp] = True
                order.extend(comp.tolist())
    pos = np.empty(num_nodes, dtype=np.int64)
    pos[np.asarray(order)] = np.arange(num_nodes)
    return pos


def redundancy_ratio(field_edges: Tensor, multiplicity: Tensor, union_edges: int) -> float:
    """:math:`\\rho = \\sum_q |E(R_L(q))| / |\\bigcup_q E(R_L(q))|` from per-head edge counts and query counts."""
    if union_edges <= 0:
        return 1.0
    return float((field_edges.to(torch.float64) * multiplicity.to(torch.float64)).sum()) / union_edges


class ReceptiveSupportPlanner:
    """Group queries into receptive supports (CoRF step 4, *inferred* greedy algorithm).

    Heads are grouped (identical heads overlap perfectly), ordered by locality (BFS order, or Louvain
    communities), and merged greedily: a head's receptive field joins the open support when the union
    stays within the node budget and the field overlaps the support enough; otherwise a new support
    opens. Each support is extracted once with its full-graph in-degrees.

    Args:
        num_hops (int): CMP depth ``L`` (the receptive-field radius).
        node_budget (float or int, optional): a float is a multiple of the median receptive-field size,
            an int an absolute node count. (default: ``4.0``)
        min_overlap (float, optional): minimum overlap coefficient
            :math:`|S \\cap R| / |R|` for merging a field ``R`` into the open support ``S``.
            (default: ``0.3``)
        locality (str, optional): ``"bfs"``, ``"louvain"`` or ``"none"``; ``"auto"`` is ``"bfs"``.
            (default: ``"auto"``)
        padding (int or str, optional): ``"exact"`` pads each support to the full L-hop fields; an
            int ``p < L`` builds supports from p-hop fields (budgeted, approximate): queries whose
            L-hop field is not covered move to the residual set. (default: ``"exact"``)
        seed (int, optional): seed of the Louvain ordering. (default: ``0``)
        redundancy (bool, optional): compute the redundancy ratio :math:`\\rho` in ``last_stats``
            (a diagnostic over ``[64, E]`` masks, timed apart from planning). (default: ``True``)
    """

    def __init__(
        self,
        num_hops: int,
        node_budget: float | int = 4.0,
        min_overlap: float = 0.3,
        locality: str = "auto",
        padding: int | str = "exact",
        seed: int = 0,
        redundancy: bool = True,
    ):
        self.num_hops = check_int("num_hops", num_hops, low=1)
        self.redundancy = bool(redundancy)
        if isinstance(node_budget, bool) or not isinstance(node_budget, (int, float)) or node_budget <= 0:
            raise ValueError(
                f"node_budget must be a positive int (nodes) or float (x median field), got {node_budget!r}"
            )
        self.node_budget = node_budget
        self.min_overlap = check_float("min_overlap", min_overlap, 0.0, 1.0)
        self.locality = check_choice("locality", locality, ("auto", "bfs", "louvain", "none"))
        if padding != "exact":
            check_int("padding", padding, low=0, high=num_hops - 1)
        self.padding = padding
        self.seed = check_int("seed", seed, low=0)
        self._order_cache: tuple | None = None
        self.last_stats: dict = {}

    @staticmethod
    def redundancy_ratio(fields: Tensor, inverse: Tensor, edge_index: Tensor) -> float:
        """:math:`\\rho` from per-head receptive fields ``[U, N]`` and each query's head index ``[B]``."""
        counts = torch.bincount(inverse, minlength=fields.shape[0])
        src, dst = edge_index
        field_edges = torch.zeros(fields.shape[0], dtype=torch.long)
        union_mask = torch.zeros(edge_index.shape[1], dtype=torch.bool)
        for s in range(0, fields.shape[0], 64):
            inside = fields[s : s + 64][:, src] & fields[s : s + 64][:, dst]
            field_edges[s : s + 64] = inside.sum(1)
            union_mask |= inside.any(0)
        return redundancy_ratio(field_edges, counts, int(union_mask.sum()))

    def _order(self, edge_index: Tensor, num_nodes: int) -> np.ndarray:
        how = "bfs" if self.locality == "auto" else self.locality
        key = (edge_index.data_ptr(), edge_index.shape[1], num_nodes, how)
        if self._order_cache is None or self._order_cache[0] != key:
            self._order_cache = (key, _locality_order(edge_index, num_nodes, how, self.seed))
        return self._order_cache[1]

    def plan(
        self,
        queries: Tensor,
        edge_index: Tensor,
        edge_type: Tensor,
        num_nodes: int,
        num_relations: int | None = None,
    ) -> tuple[list[Support], Tensor]:
        """Return the supports and the ``[K]`` indices of residual queries.

        ``queries`` is ``[B, 2]`` (head, relation); ``num_relations`` (``2R``) validates the relation
        ids when given.
        """
        check_int("num_nodes", num_nodes, low=1)
        check_edge_index(edge_index, num_nodes)
        check_queries(queries, num_nodes, num_relations if num_relations is not None else int(2**62))
        t0 = time.perf_counter()
        heads, inverse = torch.unique(queries[:, 0], return_inverse=True)
        fields, _ = receptive_field(edge_index, heads, self.num_hops, num_nodes)  # [U, N]
        if self.padding == "exact":
            grow = fields
        elif self.padding == 0:
            grow = torch.zeros_like(fields)
            grow[torch.arange(heads.numel()), heads] = True
        else:
            grow, _ = receptive_field(edge_index, heads, self.padding, num_nodes)
        sizes = fields.sum(1)
        grow_sizes = grow.sum(1)
        if isinstance(self.node_budget, float):
            budget = max(int(self.node_budget * statistics.median(sizes.tolist())), 1)
        else:
            budget = int(self.node_budget)
        order = torch.as_tensor(self._order(edge_index, num_nodes))[heads].argsort(stable=True).tolist()
        groups: list[list[int]] = []
        residual_heads: list[int] = []
        current: Tensor | None = None
        cur_size = 0
        for u in order:
            if self.padding == "exact" and int(sizes[u]) > budget:
                residual_heads.append(u)
                continue
            r = grow[u]
            if current is not None:
                inter = int((current & r).sum())
                union = cur_size + int(grow_sizes[u]) - inter
                if union <= budget and inter >= self.min_overlap * int(grow_sizes[u]):
                    current |= r
                    cur_size = union
                    groups[-1].append(u)
                    continue
            current = r.clone()
            cur_size = int(grow_sizes[u])
            groups.append([u])
        queries_of_head = [[] for _ in range(heads.numel())]
        for qi, u in enumerate(inverse.tolist()):
            queries_of_head[u].append(qi)
        residual = [q for u in residual_heads for q in queries_of_head[u]]
        supports = []
        deg = _in_degree(edge_index, num_nodes)
        for group in groups:
            mask = grow[group].any(0)
            covered = [u for u in group if not bool((fields[u] & ~mask).any())]
            residual += [q for u in group if u not in covered for q in queries_of_head[u]]
            if not covered:
                continue
            nodes = mask.nonzero().flatten()
            ei, et = subgraph(nodes, edge_index, edge_type, relabel_nodes=True, num_nodes=num_nodes)
            qidx = torch.tensor(sorted(q for u in covered for q in queries_of_head[u]), dtype=torch.long)
            supports.append(
                Support(
                    nodes=nodes,
                    edge_index=ei,
                    edge_type=et,
                    in_degree=deg[nodes],
                    query_idx=qidx,
                    exact=self.padding == "exact" or len(covered) == len(group),
                    cost=float(qidx.numel() * max(ei.shape[1], 1) * self.num_hops),
                )
            )
        plan_s = time.perf_counter() - t0
        # redundancy ratio (reported, timed separately)
        t1 = time.perf_counter()
        rho = self.redundancy_ratio(fields, inverse, edge_index) if self.redundancy else float("nan")
        self.last_stats = {
            "planning_s": plan_s,
            "rho_s": time.perf_counter() - t1,
            "rho": rho,
            "num_supports": len(supports),
            "num_residual": len(residual),
            "support_nodes": [int(s.nodes.numel()) for s in supports],
            "support_edges": [int(s.edge_index.shape[1]) for s in supports],
            "support_queries": [int(s.query_idx.numel()) for s in supports],
            "median_field_nodes": float(statistics.median(sizes.tolist())),
            "node_budget": budget,
            "coverage": 1.0 - len(residual) / queries.shape[0],
            "unique_heads": int(heads.numel()),
        }
        return supports, torch.tensor(sorted(residual), dtype=torch.long)


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
        edge_index, edge_type, n = _graph_parts(graph)
        _check_data(queries)
        check_queries(queries, n, self.model.num_relations)
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


# ------------------------------------------------------------------------------------------ load balancing
def lpt_assign(costs: Sequence[float], num_workers: int) -> list[list[int]]:
    """Longest-processing-time-first assignment of jobs to workers.

    Jobs are sorted by cost (descending, ties by index) and each goes to the currently least-loaded
    worker (ties: lowest rank). Makespan :math:`\\le (4/3 - 1/(3W))\\,\\mathrm{OPT}` (Graham, 1969).

    Returns
    -------
    list of list of int
        Job indices per worker.
    """
    check_int("num_workers", num_workers, low=1)
    costs = [float(c) for c in costs]
    if any(c < 0 or c != c for c in costs):
        raise ValueError("costs must be non-negative numbers")
    heap = [(0.0, w) for w in range(num_workers)]
    out: list[list[int]] = [[] for _ in range(num_workers)]
    for j in sorted(range(len(costs)), key=lambda j: (-costs[j], j)):
        load, w = heapq.heappop(heap)
        out[w].append(j)
        heapq.heappush(heap, (load + costs[j], w))
    return out


def round_robin_assign(num_jobs: int, num_workers: int) -> list[list[int]]:
    """Job ``j`` to worker ``j mod W`` (the load-balancing baseline)."""
    check_int("num_jobs", num_jobs, low=0)
    check_int("num_workers", num_workers, low=1)
    return [list(range(w, num_jobs, num_workers)) for w in range(num_workers)]


def makespan(costs: Sequence[float], assignment: Sequence[Sequence[int]]) -> float:
    """Largest per-worker total cost."""
    return max((sum(costs[j] for j in jobs) for jobs in assignment), default=0.0)


def distributed_scores(executor: CoRFExecutor, queries: Tensor, graph: Data, group=None) -> Tensor:
    """Run CoRF on a ``torch.distributed`` group: LPT-assigned supports per rank, scores all-reduced.

    Every rank plans the same supports (deterministic), runs the supports LPT assigns to it (the
    residual queries count as one more job), writes its rows into a zero ``[B, N]`` tensor and the
    tensors are summed; each row is owned by exactly one rank, so the sum equals the single-process
    scores exactly.
    """
    import torch.distributed as dist

    if not dist.is_initialized():
        raise RuntimeError("distributed_scores needs an initialised torch.distributed process group")
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    supports, residual = executor.plan(queries, graph)
    costs = [s.cost for s in supports] + [float(residual.numel() * graph.edge_index.shape[1])]
    mine = set(lpt_assign(costs, world)[rank])
    local_sup = [s for j, s in enumerate(supports) if j in mine]
    local_res = residual if len(supports) in mine else residual[:0]
    full = executor.scores(queries, graph, plan=(local_sup, local_res))
    owned = torch.zeros(queries.shape[0], dtype=torch.bool)
    for s in local_sup:
        owned[s.query_idx] = True
    owned[local_res] = True
    out = torch.where(owned.unsqueeze(1), full, torch.zeros_like(full))
    dist.all_reduce(out, group=group)
    return out


# ------------------------------------------------------------------------------------------ training
@dataclass
class _TrainLog:
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0


def train_cmp(
    executor,
    triples: Tensor,
    graph: Data,
    num_relations: int,
    *,
    steps: int = 200,
    batch_queries: int = 16,
    num_negatives: int = 32,
    lr: float = 5e-3,
    seed: int = 0,
) -> dict:
    """Train the executor's model with binary cross-entropy (NBFNet training), through the executor.

    Each step draws ``batch_queries`` training triples, asks tail prediction for ``(h, r)`` and, with
    probability 1/2 per triple, head prediction as ``(t, r + R)``; the loss is BCE on the true entity
    against ``num_negatives`` uniformly drawn entities. Exactness makes the gradients identical for
    every exact executor.

    Returns
    -------
    dict
        ``{"losses": [...], "seconds": float, "steps": int}``.
    """
    check_int("steps", steps, low=0)
    check_int("batch_queries", batch_queries, low=1)
    check_int("num_negatives", num_negatives, low=1)
    check_float("lr", lr, 0.0, low_open=True)
    gen = torch.Generator().manual_seed(check_int("seed", seed, low=0))
    model = executor.model
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    n = graph.num_nodes
    log = _TrainLog()
    t0 = time.perf_counter()
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, triples.shape[0], (batch_queries,), generator=gen)
        h, r, t = triples[idx].t()
        flip = torch.rand(batch_queries, generator=gen) < 0.5
        heads = torch.where(flip, t, h)
        rels = torch.where(flip, r + num_relations, r)
        tails = torch.where(flip, h, t)
        scores = executor.scores(torch.stack([heads, rels], 1), graph)
        neg = torch.randint(0, n, (batch_queries, num_negatives), generator=gen)
        pos_s = scores.gather(1, tails.unsqueeze(1))
        neg_s = scores.gather(1, neg)
        loss = F.binary_cross_entropy_with_logits(
            pos_s, torch.ones_like(pos_s)
        ) + F.binary_cross_entropy_with_logits(neg_s, torch.zeros_like(neg_s))
        opt.zero_grad()
        loss.backward()
        opt.step()
        log.losses.append(float(loss.detach()))
    model.eval()
    log.seconds = time.perf_counter() - t0
    return {"losses": log.losses, "seconds": log.seconds, "steps": steps}

"""The shared conditional message-passing model (:class:`NBFNetLite`) and its layer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing

from neurips26.common.checks import check_int
from neurips26.common.graphs import check_edge_index
from neurips26.common.kg import check_queries
from neurips26.common.kg import in_degree as _in_degree
from neurips26.kg.corf.reach import hop_reach


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
        - **output:** scores ``[B, n]`` in the dtype of the model's parameters (``.double()`` gives
          float64 scores; every state tensor is created in that dtype)
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
        boundary = torch.zeros(b, num_nodes, self.hidden, dtype=w.dtype, device=w.device)  # the model's dtype
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
        boundary = torch.zeros(1, n, self.hidden, dtype=w.dtype, device=w.device)
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

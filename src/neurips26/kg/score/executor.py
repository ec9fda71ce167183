"""QTO-style fuzzy-set execution of a query over fuzzy adjacencies. Part of :mod:`neurips26.kg.score` (see its docstring for the paper and the math)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
from torch import Tensor

from neurips26.common.checks import check_float, check_int
from neurips26.kg.score.queries import _num_slots, _num_variables, _walk


class FuzzyAdjacency:
    """Per-relation sparse fuzzy adjacency :math:`M_r \\in [0, 1]^{N \\times N}` (QTO-style).

    Attributes
    ----------
    num_entities : int
    rows, cols, values : list of Tensor
        Per relation: ``[nnz]`` heads, tails and truth values.
    """

    def __init__(self, num_entities: int, rows: list[Tensor], cols: list[Tensor], values: list[Tensor]):
        self.num_entities = check_int("num_entities", num_entities, low=1)
        if not (len(rows) == len(cols) == len(values)):
            raise ValueError("rows, cols and values must list the same number of relations")
        self.rows, self.cols, self.values = rows, cols, values

    @property
    def num_relations(self) -> int:
        return len(self.rows)

    @property
    def dtype(self) -> torch.dtype:
        """The truth values' floating dtype, promoted over relations (torch's default dtype when there are
        none or they are not floating).

        :class:`QTOExecutor` runs its fuzzy sets in this dtype.
        """
        if not self.values:
            return torch.get_default_dtype()
        dtype = functools.reduce(torch.promote_types, (v.dtype for v in self.values))
        return dtype if dtype.is_floating_point else torch.get_default_dtype()

    @classmethod
    def from_edges(cls, edges: dict[int, Tensor], num_entities: int, num_relations: int) -> FuzzyAdjacency:
        """Observed edges only, each with truth 1 (symbolic execution). ``edges[r]`` is ``[2, E_r]``."""
        rows, cols, vals = [], [], []
        for r in range(num_relations):
            e = edges.get(r, torch.zeros(2, 0, dtype=torch.long))
            rows.append(e[0])
            cols.append(e[1])
            vals.append(torch.ones(e.shape[1]))
        return cls(num_entities, rows, cols, vals)

    @classmethod
    def from_link_predictor(
        cls,
        scorer: Callable[[Tensor, int], Tensor],
        train_edges: dict[int, Tensor],
        num_entities: int,
        num_relations: int,
        threshold: float = 1e-3,
        fraction: int = 1,
    ) -> FuzzyAdjacency:
        """Build :math:`M_r` from a link predictor ``scorer(heads [B], r) -> [B, N]`` (spec step 2).

        Row ``h``: softmax over tails times ``max(1, out-degree of h under r)``, clipped to 0.9999,
        entries below ``threshold`` dropped, observed training edges set to exactly 1. ``fraction``
        splits the heads into blocks to bound memory (the result does not depend on it). The truth
        values keep the scorer's floating dtype (integer scores are taken in torch's default dtype).
        """
        check_float("threshold", threshold, 0.0, 1.0)
        check_int("fraction", fraction, low=1)
        n = num_entities
        rows, cols, vals = [], [], []
        block = math.ceil(n / fraction)
        for r in range(num_relations):
            e = train_edges.get(r, torch.zeros(2, 0, dtype=torch.long))
            deg = torch.bincount(e[0], minlength=n).clamp(min=1)
            rr, cc, vv = [], [], []
            for s in range(0, n, block):
                heads = torch.arange(s, min(s + block, n))
                with torch.no_grad():
                    logits = scorer(heads, r)
                    if not logits.is_floating_point():
                        logits = logits.to(torch.get_default_dtype())
                    p = torch.softmax(logits, dim=-1) * deg[heads].unsqueeze(1).to(logits.dtype)
                p = p.clamp(max=0.9999)
                obs = e[:, (e[0] >= s) & (e[0] < s + block)]
                p[obs[0] - s, obs[1]] = 1.0
                keep = (p >= threshold).nonzero()
                rr.append(heads[keep[:, 0]])
                cc.append(keep[:, 1])
                vv.append(p[keep[:, 0], keep[:, 1]])
            rows.append(torch.cat(rr))
            cols.append(torch.cat(cc))
            vals.append(torch.cat(vv))
        return cls(n, rows, cols, vals)

    def project(self, v: Tensor, relation: int) -> Tensor:
        """Max-product projection :math:`v'[t] = \\max_h v[h] M_r[h, t]` of ``v`` ``[..., N]`` (leading dims broadcast)."""
        if not 0 <= relation < self.num_relations:
            raise ValueError(f"relation id {relation} outside [0, {self.num_relations})")
        cand = v[..., self.rows[relation]] * self.values[relation]
        out = torch.zeros(*v.shape[:-1], self.num_entities, dtype=v.dtype)
        index = self.cols[relation].expand(*v.shape[:-1], -1)
        return out.scatter_reduce(-1, index, cand, reduce="amax", include_self=True)


class QTOExecutor(torch.nn.Module):
    r"""Fuzzy QTO-style execution of BetaE queries over a :class:`FuzzyAdjacency`.

    Projection is max-product, intersection the product, union (DNF) the probabilistic sum
    :math:`1 - \prod_i (1 - v_i)`, and a negated projection maps its output ``v`` to
    :math:`1 - \min(1, s\, v)` (``s = neg_scale``). From a one-hot anchor this equals the spec's
    negated adjacency :math:`1 - \min(1, s M_r)`; from a fuzzy set it is the complement of the
    projected set (on a 0/1 adjacency, exactly the set semantics of BetaE's negation).

    Args:
        adjacency (FuzzyAdjacency): per-relation fuzzy adjacency.
        neg_scale (float, optional): ``s`` of the negation. (default: ``1.0``)

    Shapes:
        - **input:** anchors ``[A]`` long, relations ``[P]`` long (DFS order of the structure)
        - **output:** fuzzy target scores ``[N]``
    """

    def __init__(self, adjacency: FuzzyAdjacency, neg_scale: float = 1.0):
        super().__init__()
        if not isinstance(adjacency, FuzzyAdjacency):
            raise TypeError(f"adjacency must be a FuzzyAdjacency, got {type(adjacency).__name__}")
        self.adjacency = adjacency
        self.neg_scale = check_float("neg_scale", neg_scale, 0.0, low_open=True)

    def forward(
        self,
        structure,
        anchors: Tensor,
        relations: Tensor,
        adjust: dict[int, Callable[[Tensor], Tensor]] | None = None,
    ) -> Tensor:
        """Fuzzy scores ``[N]`` of the target; ``adjust[j]`` is applied to variable ``j`` when it is created."""
        n_anchor, n_proj = _num_slots(structure)
        anchors, relations = torch.as_tensor(anchors).flatten(), torch.as_tensor(relations).flatten()
        if anchors.numel() != n_anchor or relations.numel() != n_proj:
            raise ValueError(
                f"structure needs {n_anchor} anchors and {n_proj} relations, got {anchors.numel()} and {relations.numel()}"
            )
        n = self.adjacency.num_entities
        if ((anchors < 0) | (anchors >= n)).any():
            raise ValueError(f"anchor ids must lie in [0, {n})")
        nr = self.adjacency.num_relations
        bad_r = (relations < 0) | (relations >= nr)
        if bad_r.any():
            raise ValueError(
                f"relations: unknown relation id {int(relations[bad_r][0])}; ids must lie in [0, {nr}) "
                f"(inverse relations included)"
            )
        adjust = adjust or {}
        v_count = _num_variables(structure)
        bad = [j for j in adjust if not 0 <= j < v_count]
        if bad:
            raise ValueError(f"variable index {bad[0]} invalid; valid positions are 0..{v_count - 1}")
        a_it, r_it = iter(anchors.tolist()), iter(relations.tolist())

        dtype = self.adjacency.dtype

        def anchor():
            v = torch.zeros(n, dtype=dtype)
            v[next(a_it)] = 1.0
            return v

        def on_var(j, kind, v):
            return adjust[j](v) if j in adjust else v

        out, _ = _walk(
            structure,
            anchor,
            lambda v: self.adjacency.project(v, next(r_it)),
            lambda vs: functools.reduce(torch.mul, vs),
            on_var,
            on_union=lambda vs: 1.0 - functools.reduce(torch.mul, [1.0 - v for v in vs]),
            on_negate=lambda v: 1.0 - (self.neg_scale * v).clamp(max=1.0),
        )
        return out

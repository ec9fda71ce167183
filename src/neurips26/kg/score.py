"""SCORE: log-odds score reweighting that adds soft similarity constraints to any variable of a complex KG query.

Paper: "SCORE" (OpenReview KMzaR3M8SY; registry seed ``000_f8b4140a0e3b5d84.txt``, paragraph beginning
"Machine learning models for answering logical"); public code: the ``score`` branch of
https://github.com/dfdazac/nqr. Spec: ``../shared/specs/score.md``.

A tree-shaped query in BetaE form is executed QTO-style over fuzzy sets :math:`v \\in [0, 1]^N`:
anchors are one-hot, a projection by ``r`` is max-product with a fuzzy adjacency :math:`M_r`,
:math:`v'[t] = \\max_h v[h] M_r[h, t]`, an intersection is the elementwise product. Every projection or
intersection that creates a logical variable is indexed ``j = 0..V-1`` in creation order (target
``V - 1``; :func:`query_variables`). SCORE adjusts variable ``j`` with positive examples ``P`` and
negative examples ``Q`` in log-odds space,

.. math::
    v'_j[e] = \\sigma\\Big(\\mathrm{logit}(v_j[e])
      + w_p \\tfrac{1}{|P|}\\textstyle\\sum_{p \\in P} \\mathrm{logit}\\,\\varsigma(p, e)
      + w_n \\tfrac{1}{|Q|}\\textstyle\\sum_{n \\in Q} \\mathrm{logit}\\,(1 - \\varsigma(n, e))\\Big),
    \\qquad \\varsigma(p, e) = \\tfrac{1 + \\mathrm{sim}(p, e)}{2},

with :math:`\\mathrm{sim}` the (complex) cosine of entity embeddings. At an intermediate variable the
adjusted set is propagated through the rest of the query by the same executor.

Status: the component (variables, executor, adjustment, baselines' Cosine reranker, metrics) is
built and tested; the claim check is not (see the issue notes).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from neurips26.common.checks import check_float, check_int

__all__ = [
    "STRUCTURES",
    "VariableInfo",
    "query_variables",
    "FuzzyAdjacency",
    "QTOExecutor",
    "score_adjust",
    "complex_cosine",
    "SCORE",
    "CosineReranker",
    "graded_ndcg",
    "pairwise_accuracy",
    "complex_tail_scores",
]

#: BetaE query structures of the grammar this module executes.
STRUCTURES = {
    "1p": ("e", ("r",)),
    "2p": ("e", ("r", "r")),
    "3p": ("e", ("r", "r", "r")),
    "2i": (("e", ("r",)), ("e", ("r",))),
    "3i": (("e", ("r",)), ("e", ("r",)), ("e", ("r",))),
    "pi": (("e", ("r", "r")), ("e", ("r",))),
    "ip": ((("e", ("r",)), ("e", ("r",))), ("r",)),
}


@dataclass
class VariableInfo:
    """One logical variable of a query: index in creation order, what creates it, whether it is the target."""

    index: int
    kind: str  # "projection" | "intersection"
    is_target: bool


def _is_path(node) -> bool:
    return isinstance(node, tuple) and len(node) == 2 and node[0] == "e" and _is_rels(node[1])


def _is_rels(node) -> bool:
    return isinstance(node, tuple) and len(node) >= 1 and all(x == "r" for x in node)


def _check_structure(node, depth: int = 0) -> None:
    if depth > 8 or not isinstance(node, tuple):
        raise ValueError(f"query structure {node!r} is outside the grammar {sorted(STRUCTURES)}")
    if _is_path(node):
        return
    if len(node) == 2 and _is_rels(node[1]) and not _is_path(node[0]):
        _check_structure(node[0], depth + 1)
        if _is_path(node[0]) or node[0][0] == "e":
            raise ValueError(f"query structure {node!r} is outside the grammar")
        return
    if len(node) >= 2 and all(isinstance(b, tuple) for b in node):
        for b in node:
            _check_structure(b, depth + 1)
        return
    raise ValueError(f"query structure {node!r} is outside the grammar {sorted(STRUCTURES)}")


def _walk(structure, on_anchor, on_project, on_intersect, on_variable):
    """Evaluate ``structure`` bottom-up with callbacks; variables are numbered in creation order."""
    _check_structure(structure)
    counter = [0]

    def var(value, kind):
        j = counter[0]
        counter[0] += 1
        return on_variable(j, kind, value)

    def ev(node, feeds_merge: bool):
        if _is_path(node):
            v = on_anchor()
            for i, _ in enumerate(node[1]):
                v = on_project(v)
                if not (i == len(node[1]) - 1 and feeds_merge):
                    v = var(v, "projection")
            return v
        if len(node) == 2 and _is_rels(node[1]) and not _is_path(node[0]):
            v = ev(node[0], feeds_merge=False)
            for i, _ in enumerate(node[1]):
                v = on_project(v)
                if not (i == len(node[1]) - 1 and feeds_merge):
                    v = var(v, "projection")
            return v
        return var(on_intersect([ev(b, feeds_merge=True) for b in node]), "intersection")

    out = ev(structure, feeds_merge=False)
    return out, counter[0]


def query_variables(structure) -> list[VariableInfo]:
    """The logical variables of a BetaE ``structure`` in creation order (the single source of truth).

    2p -> 2, 3p -> 3, 2i -> 1, pi -> 2, ip -> 2 variables; the last one is the target.
    Raises ``ValueError`` for a structure outside the grammar (:data:`STRUCTURES`).
    """
    kinds: list[str] = []
    _walk(structure, lambda: None, lambda v: None, lambda vs: None, lambda j, k, v: kinds.append(k))
    return [VariableInfo(j, k, j == len(kinds) - 1) for j, k in enumerate(kinds)]


def _num_slots(structure) -> tuple[int, int]:
    counts = [0, 0]

    def anchor():
        counts[0] += 1

    def project(v):
        counts[1] += 1

    _walk(structure, anchor, project, lambda vs: None, lambda j, k, v: v)
    return counts[0], counts[1]


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
        splits the heads into blocks to bound memory (the result does not depend on it).
        """
        check_float("threshold", threshold, 0.0, 1.0)
        check_int("fraction", fraction, low=1)
        n = num_entities
        rows, cols, vals = [], [], []
        block = math.ceil(n / fraction)
        for r in range(num_relations):
            e = train_edges.get(r, torch.zeros(2, 0, dtype=torch.long))
            deg = torch.bincount(e[0], minlength=n).clamp(min=1).to(torch.float32)
            rr, cc, vv = [], [], []
            for s in range(0, n, block):
                heads = torch.arange(s, min(s + block, n))
                with torch.no_grad():
                    p = torch.softmax(scorer(heads, r).float(), dim=-1) * deg[heads].unsqueeze(1)
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
        """Max-product projection :math:`v'[t] = \\max_h v[h] M_r[h, t]` of ``v`` ``[N]``."""
        if not 0 <= relation < self.num_relations:
            raise ValueError(f"relation id {relation} outside [0, {self.num_relations})")
        cand = v[self.rows[relation]] * self.values[relation]
        out = torch.zeros(self.num_entities, dtype=v.dtype)
        return out.scatter_reduce(0, self.cols[relation], cand, reduce="amax", include_self=True)


class QTOExecutor(torch.nn.Module):
    """Fuzzy QTO-style execution of BetaE queries over a :class:`FuzzyAdjacency`.

    Args:
        adjacency (FuzzyAdjacency): per-relation fuzzy adjacency.

    Shapes:
        - **input:** anchors ``[A]`` long, relations ``[P]`` long (DFS order of the structure)
        - **output:** fuzzy target scores ``[N]``
    """

    def __init__(self, adjacency: FuzzyAdjacency):
        super().__init__()
        if not isinstance(adjacency, FuzzyAdjacency):
            raise TypeError(f"adjacency must be a FuzzyAdjacency, got {type(adjacency).__name__}")
        self.adjacency = adjacency

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
        adjust = adjust or {}
        v_count = len(query_variables(structure))
        bad = [j for j in adjust if not 0 <= j < v_count]
        if bad:
            raise ValueError(f"variable index {bad[0]} invalid; valid positions are 0..{v_count - 1}")
        a_it, r_it = iter(anchors.tolist()), iter(relations.tolist())

        def anchor():
            v = torch.zeros(n)
            v[next(a_it)] = 1.0
            return v

        def on_var(j, kind, v):
            return adjust[j](v) if j in adjust else v

        out, _ = _walk(
            structure,
            anchor,
            lambda v: self.adjacency.project(v, next(r_it)),
            lambda vs: torch.stack(vs).prod(0),
            on_var,
        )
        return out


def score_adjust(
    scores: Tensor, pref_sim: Tensor, labels: Tensor, w_p: float = 1.0, w_n: float = 0.5, eps: float = 1e-6
) -> Tensor:
    """SCORE's log-odds adjustment (spec step 5).

    Parameters
    ----------
    scores : Tensor
        ``[N]`` or ``[B, N]`` fuzzy truth values in ``[0, 1]``.
    pref_sim : Tensor
        ``[P, N]`` similarities in ``[-1, 1]`` of each preference entity to every entity.
    labels : Tensor
        ``[P]`` in ``{0, 1}``: 1 = positive (liked), 0 = negative.
    w_p, w_n : float
        Non-negative weights of the positive and negative evidence.
    eps : float
        Clamp for probabilities before the logit.

    Returns
    -------
    Tensor
        Same shape as ``scores``, in ``(0, 1)``.
    """
    check_float("w_p", w_p, 0.0)
    check_float("w_n", w_n, 0.0)
    check_float("eps", eps, 0.0, 0.5, low_open=True, high_open=True)
    labels = torch.as_tensor(labels)
    if pref_sim.dim() != 2 or pref_sim.shape[0] != labels.numel():
        raise ValueError(
            f"pref_sim must be [P, N] with P = len(labels) = {labels.numel()}, got {tuple(pref_sim.shape)}"
        )
    if pref_sim.shape[1] != scores.shape[-1]:
        raise ValueError(f"pref_sim has {pref_sim.shape[1]} columns, scores {scores.shape[-1]} entities")
    if labels.numel() and not ((labels == 0) | (labels == 1)).all():
        raise ValueError("labels must be in {0, 1}")
    logit = torch.logit(scores.clamp(eps, 1 - eps))
    sig = ((pref_sim + 1) / 2).clamp(eps, 1 - eps)
    delta = torch.zeros(scores.shape[-1], dtype=logit.dtype)
    pos, neg = labels == 1, labels == 0
    if pos.any() and w_p > 0:
        delta = delta + w_p * torch.logit(sig[pos]).mean(0)
    if neg.any() and w_n > 0:
        delta = delta + w_n * torch.logit(1 - sig[neg]).mean(0)
    if not labels.numel() or (w_p == 0 and w_n == 0):
        return scores.clamp(eps, 1 - eps)
    return torch.sigmoid(logit + delta)


def complex_cosine(embeddings: Tensor, ids: Tensor) -> Tensor:
    """``[P, N]`` cosine of entity ``ids`` to every entity: :math:`\\mathrm{Re}\\langle E_p, \\bar E_e\\rangle / (\\|E_p\\| \\|E_e\\|)`.

    Complex embeddings use the real part of the Hermitian product (equal to the real cosine of the
    stacked real and imaginary parts); real embeddings use the plain cosine.
    """
    e = torch.view_as_real(embeddings).flatten(1) if embeddings.is_complex() else embeddings
    e = torch.nn.functional.normalize(e.float(), dim=1)
    return (e[ids] @ e.t()).clamp(-1.0, 1.0)


class SCORE:
    """SCORE: similarity-constrained reweighting on any query variable.

    Args:
        entity_embeddings (Tensor): ``[N, k]`` complex (ComplEx) or real embeddings.
        w_p (float, optional): weight of positive evidence. (default: ``1.0``)
        w_n (float, optional): weight of negative evidence. (default: ``0.5``)
    """

    def __init__(self, entity_embeddings: Tensor, w_p: float = 1.0, w_n: float = 0.5):
        if entity_embeddings.dim() != 2:
            raise ValueError(f"entity_embeddings must be [N, k], got {tuple(entity_embeddings.shape)}")
        self.embeddings = entity_embeddings.detach()
        self.w_p = check_float("w_p", w_p, 0.0)
        self.w_n = check_float("w_n", w_n, 0.0)

    @property
    def num_entities(self) -> int:
        return self.embeddings.shape[0]

    def _check_prefs(self, ids: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        ids, labels = torch.as_tensor(ids).flatten(), torch.as_tensor(labels).flatten()
        if ids.numel() != labels.numel():
            raise ValueError(
                f"pref_ids ({ids.numel()}) and pref_labels ({labels.numel()}) must have the same length"
            )
        if ((ids < 0) | (ids >= self.num_entities)).any():
            raise ValueError(f"preference ids must lie in [0, {self.num_entities})")
        return ids, labels

    def similarity(self, pref_ids: Tensor) -> Tensor:
        """``[P, N]`` similarities of the preference entities to every entity."""
        return complex_cosine(self.embeddings, torch.as_tensor(pref_ids).flatten())

    def adjust(self, scores: Tensor, pref_ids: Tensor, pref_labels: Tensor) -> Tensor:
        ids, labels = self._check_prefs(pref_ids, pref_labels)
        return score_adjust(scores, self.similarity(ids), labels, self.w_p, self.w_n)

    def answer(
        self,
        executor: QTOExecutor,
        structure,
        anchors,
        relations,
        preferences: dict[int, tuple[Tensor, Tensor]],
    ) -> Tensor:
        """Target scores ``[N]`` with ``preferences[j] = (ids, labels)`` applied at variable ``j``."""
        adjust = {j: (lambda v, p=p: self.adjust(v, *p)) for j, p in preferences.items()}
        return executor(structure, anchors, relations, adjust=adjust)


class CosineReranker:
    """Target-only "Cosine" baseline of the precursor paper (arXiv 2508.13663).

    .. math::
        s' = \\alpha s + (1 - \\alpha)\\Big[\\tfrac{1 + \\beta}{2} \\overline{\\mathrm{sim}}_{+}
             - \\tfrac{1 - \\beta}{2} \\overline{\\mathrm{sim}}_{-}\\Big]
    """

    def __init__(self, alpha: float = 0.25, beta: float = 0.5):
        self.alpha = check_float("alpha", alpha, 0.0, 1.0)
        self.beta = check_float("beta", beta, -1.0, 1.0)

    def __call__(self, scores: Tensor, pref_sim: Tensor, labels: Tensor) -> Tensor:
        labels = torch.as_tensor(labels)
        pos = pref_sim[labels == 1].mean(0) if (labels == 1).any() else torch.zeros(scores.shape[-1])
        neg = pref_sim[labels == 0].mean(0) if (labels == 0).any() else torch.zeros(scores.shape[-1])
        bonus = (1 + self.beta) / 2 * pos - (1 - self.beta) / 2 * neg
        return self.alpha * scores + (1 - self.alpha) * bonus


def graded_ndcg(scores: Tensor, relevance: Tensor, k: int = 10) -> float:
    """NDCG@k with graded relevance ``[N]`` (gain :math:`2^{rel} - 1`, discount :math:`\\log_2(i + 1)`)."""
    check_int("k", k, low=1)
    order = torch.argsort(scores, descending=True, stable=True)[:k]
    disc = 1.0 / torch.log2(torch.arange(2, order.numel() + 2, dtype=torch.float64))
    dcg = ((2.0 ** relevance[order].double() - 1) * disc).sum()
    ideal = torch.sort(relevance.double(), descending=True).values[:k]
    idcg = ((2.0**ideal - 1) * disc[: ideal.numel()]).sum()
    return float(dcg / idcg) if idcg > 0 else 0.0


def pairwise_accuracy(scores: Tensor, preferred: Tensor, other: Tensor) -> float:
    """Fraction of pairs (preferred answer, other answer) with the preferred one scored strictly higher."""
    preferred, other = torch.as_tensor(preferred).flatten(), torch.as_tensor(other).flatten()
    if preferred.numel() == 0 or other.numel() == 0:
        raise ValueError("preferred and other answer sets must both be non-empty")
    return float((scores[preferred].unsqueeze(1) > scores[other].unsqueeze(0)).double().mean())


def complex_tail_scores(model, heads: Tensor, relation: int) -> Tensor:
    """``[B, N]`` scores of every tail under a PyG :class:`~torch_geometric.nn.kge.ComplEx` model.

    :math:`\\mathrm{Re}\\langle e_h, w_r, \\bar e_t\\rangle` for all ``t``, equal to ``model(h, r, t)``.
    """
    h_re, h_im = model.node_emb(heads), model.node_emb_im(heads)
    r = torch.full_like(heads, relation)
    r_re, r_im = model.rel_emb(r), model.rel_emb_im(r)
    a = h_re * r_re - h_im * r_im
    b = h_re * r_im + h_im * r_re
    return a @ model.node_emb.weight.t() + b @ model.node_emb_im.weight.t()

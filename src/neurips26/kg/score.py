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

Also here: the base link predictor (:func:`train_complex`, ComplEx with reciprocal relations, N3 and
1-vs-all cross entropy; its scores equal PyKEEN's ``ComplExInteraction``), BetaE query sampling
(:class:`QuerySampler`), exact per-value bindings of a variable (:func:`variable_bindings`), preference
sessions and their metrics (:class:`Session`, :func:`session_metrics`) and the baselines: the
unconstrained QTO ranking (the executor itself), :class:`CosineReranker` and :class:`NQRLite`. The
claim check is ``neurips26.claims.score``.

Shapes
------
- fuzzy sets and scores: ``[N]`` (the executor broadcasts over leading dimensions, ``[B, N]``)
- preference similarities: ``[P, N]``; labels ``[P]``
- ComplEx embeddings: entities ``[N, k]`` complex, relations ``[2R, k]`` complex
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.common.kg import filtered_ranks

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
    "ComplExEmbeddings",
    "train_complex",
    "QuerySampler",
    "sample_query",
    "variable_bindings",
    "Session",
    "answer_mrr",
    "session_metrics",
    "NQRLite",
    "train_nqr",
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


@functools.lru_cache(maxsize=256)
def _check_structure_cached(structure) -> None:
    _check_structure(structure)


def _walk(structure, on_anchor, on_project, on_intersect, on_variable):
    """Evaluate ``structure`` bottom-up with callbacks; variables are numbered in creation order."""
    _check_structure_cached(_hashable(structure))
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


def _num_variables(structure) -> int:
    return _num_variables_cached(_hashable(structure))


@functools.lru_cache(maxsize=256)
def _num_variables_cached(structure) -> int:
    return len(query_variables(structure))


def query_variables(structure) -> list[VariableInfo]:
    """The logical variables of a BetaE ``structure`` in creation order (the single source of truth).

    2p -> 2, 3p -> 3, 2i -> 1, pi -> 2, ip -> 2 variables; the last one is the target.
    Raises ``ValueError`` for a structure outside the grammar (:data:`STRUCTURES`).
    """
    kinds: list[str] = []
    _walk(structure, lambda: None, lambda v: None, lambda vs: None, lambda j, k, v: kinds.append(k))
    return [VariableInfo(j, k, j == len(kinds) - 1) for j, k in enumerate(kinds)]


def _hashable(structure):
    try:
        hash(structure)
    except TypeError:
        raise ValueError(
            f"query structure {structure!r} is outside the grammar {sorted(STRUCTURES)}"
        ) from None
    return structure


def _num_slots(structure) -> tuple[int, int]:
    return _num_slots_cached(_hashable(structure))


@functools.lru_cache(maxsize=256)
def _num_slots_cached(structure) -> tuple[int, int]:
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
        """Max-product projection :math:`v'[t] = \\max_h v[h] M_r[h, t]` of ``v`` ``[..., N]`` (leading dims broadcast)."""
        if not 0 <= relation < self.num_relations:
            raise ValueError(f"relation id {relation} outside [0, {self.num_relations})")
        cand = v[..., self.rows[relation]] * self.values[relation]
        out = torch.zeros(*v.shape[:-1], self.num_entities, dtype=v.dtype)
        index = self.cols[relation].expand(*v.shape[:-1], -1)
        return out.scatter_reduce(-1, index, cand, reduce="amax", include_self=True)


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
            lambda vs: functools.reduce(torch.mul, vs),
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
        Same shape as ``scores``, in ``(0, 1)``; ``scores`` itself (the same tensor) when no term is active
        (no examples, or zero weight on the labels present).
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
    pos, neg = labels == 1, labels == 0
    use_pos, use_neg = bool(pos.any()) and w_p > 0, bool(neg.any()) and w_n > 0
    if not (use_pos or use_neg):
        return scores  # no active evidence: the identity, exactly (weight 0 equals the unconstrained ranking)
    logit = torch.logit(scores.clamp(eps, 1 - eps))
    sig = ((pref_sim + 1) / 2).clamp(eps, 1 - eps)
    delta = torch.zeros(scores.shape[-1], dtype=logit.dtype)
    if use_pos:
        delta = delta + w_p * torch.logit(sig[pos]).mean(0)
    if use_neg:
        delta = delta + w_n * torch.logit(1 - sig[neg]).mean(0)
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

    def session_scores(self, executor: QTOExecutor, session: Session, base: Tensor | None = None) -> Tensor:
        """Final scores ``[N]`` of a session with its examples at its variable.

        At the target the base scores ``base`` (when given) are adjusted without re-execution.
        """
        prefs = (session.pref_ids, session.pref_labels)
        is_target = session.variable == _num_variables(session.structure) - 1
        if is_target and base is not None:
            return self.adjust(base, *prefs)
        return self.answer(
            executor, session.structure, session.anchors, session.relations, {session.variable: prefs}
        )

    def fit(
        self,
        executor: QTOExecutor,
        valid_sessions: list[Session],
        grid=((0.25, 0.5, 1.0, 2.0), (0.25, 0.5, 1.0, 2.0)),
        metric: str = "ndcg",
    ) -> tuple[float, float]:
        """Grid-search ``(w_p, w_n)`` on validation sessions (maximise ``metric``; ties: higher plain MRR).

        Sets and returns the chosen weights. Deterministic (no randomness).
        """
        check_choice("metric", metric, ("ndcg", "pref_mrr", "pairwise", "mrr_all"))
        if not valid_sessions:
            raise ValueError("valid_sessions must not be empty")
        for w in (*grid[0], *grid[1]):
            check_float("grid weight", w, 0.0)
        bases = [executor(s.structure, s.anchors, s.relations) for s in valid_sessions]
        results = []
        for w_p in grid[0]:
            for w_n in grid[1]:
                self.w_p, self.w_n = float(w_p), float(w_n)
                rows = [
                    session_metrics(self.session_scores(executor, s, b), s)
                    for s, b in zip(valid_sessions, bases)
                ]
                results.append(((float(w_p), float(w_n)), _mean_metrics(rows)))
        self.w_p, self.w_n = _select(results, metric)
        return self.w_p, self.w_n


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

    def fit(
        self,
        bases: list[Tensor],
        sims: list[Tensor],
        valid_sessions: list[Session],
        grid=((0.25, 0.5, 0.75, 0.9), (0.0, 0.5, 0.75, 1.0)),
        metric: str = "ndcg",
    ) -> tuple[float, float]:
        """Grid-search ``(alpha, beta)`` on validation sessions given their base scores and example similarities."""
        check_choice("metric", metric, ("ndcg", "pref_mrr", "pairwise", "mrr_all"))
        if not valid_sessions or not (len(bases) == len(sims) == len(valid_sessions)):
            raise ValueError("bases, sims and valid_sessions must be non-empty and of equal length")
        results = []
        for alpha in grid[0]:
            for beta in grid[1]:
                self.alpha, self.beta = (
                    check_float("alpha", alpha, 0.0, 1.0),
                    check_float("beta", beta, -1.0, 1.0),
                )
                rows = [
                    session_metrics(self(b, sim, s.pref_labels), s)
                    for b, sim, s in zip(bases, sims, valid_sessions)
                ]
                results.append(((float(alpha), float(beta)), _mean_metrics(rows)))
        self.alpha, self.beta = _select(results, metric)
        return self.alpha, self.beta


class NQRLite(torch.nn.Module):
    """Learned neural reranker baseline ("NQR-lite", precursor arXiv 2508.13663), target only.

    An MLP maps per-entity features ``[logit(base score), mean positive sim, mean negative sim,
    entity embedding]`` to an additive delta: :math:`s'_e = \\mathrm{logit}(s_e) + \\mathrm{MLP}(x_e)`.

    Args:
        embedding_dim (int): size of the (real view of the) entity embeddings.
        hidden (int, optional): hidden width. (default: ``32``)

    Shapes:
        - **input:** base scores ``[N]``, similarities ``[P, N]``, labels ``[P]``, embeddings ``[N, D]``
        - **output:** reranked scores ``[N]``
    """

    def __init__(self, embedding_dim: int, hidden: int = 32):
        super().__init__()
        check_int("embedding_dim", embedding_dim, low=1)
        check_int("hidden", hidden, low=1)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(embedding_dim + 3, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
        )

    @staticmethod
    def features(
        scores: Tensor, pref_sim: Tensor, labels: Tensor, embeddings: Tensor, eps: float = 1e-6
    ) -> Tensor:
        """``[N, D + 3]`` features of every entity."""
        labels = torch.as_tensor(labels)
        n = scores.shape[-1]
        pos = pref_sim[labels == 1].mean(0) if (labels == 1).any() else torch.zeros(n)
        neg = pref_sim[labels == 0].mean(0) if (labels == 0).any() else torch.zeros(n)
        base = torch.logit(scores.clamp(eps, 1 - eps)) / 10.0
        return torch.cat([torch.stack([base, pos, neg], 1), embeddings], 1)

    def forward(self, features: Tensor) -> Tensor:
        """Reranked scores ``[..., N]`` from features ``[..., N, D + 3]``."""
        return features[..., 0] * 10.0 + self.mlp(features).squeeze(-1)


def train_nqr(
    model: NQRLite,
    features: list[Tensor],
    sessions: list[Session],
    *,
    steps: int = 200,
    lr: float = 1e-2,
    margin: float = 1.0,
    negatives: int = 16,
    seed: int = 0,
    valid_features: list[Tensor] | None = None,
    valid_sessions: list[Session] | None = None,
    metric: str = "ndcg",
    eval_every: int = 10,
) -> list[float]:
    """Train :class:`NQRLite` full-batch with a pairwise hinge loss on training sessions.

    The loss averages :math:`\\max(0, m - (s'_a - s'_b))` over all pairs (preferred answer, other hard
    answer) of all sessions, plus the same over pairs (hard answer, one of ``negatives`` sampled
    non-answers of its session). Adam. With ``valid_sessions`` (and their ``valid_features``) the
    validation ``metric`` is computed every ``eval_every`` steps and at the end, and the best state is
    restored (early stopping, the learned baseline's counterpart of SCORE's grid search).
    Returns the loss per step.
    """
    check_int("steps", steps, low=1)
    check_float("lr", lr, 0.0, low_open=True)
    check_float("margin", margin, 0.0)
    if not sessions or len(features) != len(sessions):
        raise ValueError("features and sessions must be non-empty and of equal length")
    check_choice("metric", metric, ("ndcg", "pref_mrr", "pairwise", "mrr_all"))
    check_int("eval_every", eval_every, low=1)
    if bool(valid_sessions) != bool(valid_features) or len(valid_sessions or []) != len(valid_features or []):
        raise ValueError("valid_features and valid_sessions must be given together, with equal lengths")
    torch.manual_seed(check_int("seed", seed, low=0))
    for p in model.parameters():  # seeded re-initialisation: the result depends on ``seed`` only
        if p.dim() > 1:
            torch.nn.init.kaiming_uniform_(p, a=math.sqrt(5))
        else:
            torch.nn.init.uniform_(p, -0.05, 0.05)
    x = torch.stack(features)  # [S, N, F]
    gen = torch.Generator().manual_seed(seed)
    po, hn = [], []  # (session, better, worse) index triples
    for i, s in enumerate(sessions):
        pref, oth = s.preferred.tolist(), s.other.tolist()
        po += [(i, a, b) for a in pref for b in oth]
        non = torch.ones(x.shape[1], dtype=torch.bool)
        non[s.preferred] = non[s.other] = non[s.easy] = False
        non_ids = non.nonzero().flatten()
        non_ids = non_ids[torch.randperm(non_ids.numel(), generator=gen)[:negatives]].tolist()
        hn += [(i, a, b) for a in pref + oth for b in non_ids]
    groups = [torch.tensor(g, dtype=torch.long).view(-1, 3) for g in (po, hn)]
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    best = (-math.inf, None)

    def validate(step: int) -> None:
        nonlocal best
        with torch.no_grad():
            out = model(torch.stack(valid_features))
            value = sum(session_metrics(o, s)[metric] for o, s in zip(out, valid_sessions)) / len(
                valid_sessions
            )
        if value > best[0]:
            best = (value, {k: v.detach().clone() for k, v in model.state_dict().items()})

    for step in range(steps):
        if valid_sessions and step % eval_every == 0:
            validate(step)
        out = model(x)
        loss = sum(
            (margin - (out[g[:, 0], g[:, 1]] - out[g[:, 0], g[:, 2]])).clamp(min=0).mean()
            for g in groups
            if g.numel()
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    if valid_sessions:
        validate(steps)
        model.load_state_dict(best[1])
    model.eval()
    return losses


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


# ----------------------------------------------------------------------------------------------
# Base link predictor: ComplEx with reciprocal relations, 1-vs-all cross entropy, N3 (spec step 1)
# ----------------------------------------------------------------------------------------------


@dataclass
class ComplExEmbeddings:
    """A trained ComplEx link predictor with reciprocal relations.

    Attributes
    ----------
    entity : Tensor
        ``[N, k]`` complex entity embeddings.
    relation : Tensor
        ``[2R, k]`` complex relation embeddings; ``r + R`` is the inverse of ``r``.
    losses : list of float
        Mean training loss per epoch.
    """

    entity: Tensor
    relation: Tensor
    losses: list

    def tail_scores(self, heads: Tensor, relation: int) -> Tensor:
        """``[B, N]``: :math:`\\mathrm{Re}\\langle e_h, w_r, \\bar e_t\\rangle` for every tail ``t``."""
        nr = self.relation.shape[0]
        if not 0 <= int(relation) < nr:
            raise ValueError(f"relation id {relation} outside [0, {nr})")
        heads = torch.as_tensor(heads).flatten()
        q = self.entity[heads] * self.relation[int(relation)]
        return (q @ self.entity.conj().t()).real


def train_complex(
    triples: Tensor,
    num_entities: int,
    num_relations: int,
    *,
    rank: int = 32,
    epochs: int = 100,
    batch_size: int = 512,
    lr: float = 0.1,
    n3: float = 0.05,
    init_scale: float = 1e-3,
    seed: int = 0,
) -> ComplExEmbeddings:
    """Train ComplEx with reciprocal relations, 1-vs-all cross entropy, N3 and Adagrad (kbc recipe).

    Every triple ``(h, r, t)`` is also trained as ``(t, r + R, h)``. The per-batch loss is
    :math:`\\mathrm{CE}(\\phi(h, r, \\cdot), t) + \\lambda \\tfrac{1}{B}\\sum (|e_h|^3 + |w_r|^3 + |e_t|^3)`.
    The score function equals PyKEEN's ``ComplExInteraction`` (tested).

    Parameters
    ----------
    triples : Tensor
        ``[T, 3]`` long training triples with relation ids in ``[0, R)``.
    num_entities, num_relations : int
        ``N`` and ``R`` (without inverses).
    rank, epochs, batch_size : int
        Embedding size ``k``, passes over the ``2T`` training rows, rows per step.
    lr, n3, init_scale : float
        Adagrad learning rate, N3 weight, standard deviation of the initial embeddings.
    seed : int
        Initialisation and shuffling seed.
    """
    check_int("num_entities", num_entities, low=1)
    check_int("num_relations", num_relations, low=1)
    if (
        not isinstance(triples, Tensor)
        or triples.dim() != 2
        or triples.shape[1] != 3
        or triples.dtype != torch.long
    ):
        raise ValueError("triples must be a [T, 3] long tensor of (head, relation, tail)")
    if ((triples[:, [0, 2]] < 0) | (triples[:, [0, 2]] >= num_entities)).any():
        raise ValueError(f"triples: entity ids must lie in [0, {num_entities})")
    if ((triples[:, 1] < 0) | (triples[:, 1] >= num_relations)).any():
        raise ValueError(f"triples: unknown relation id; ids must lie in [0, {num_relations})")
    for name, value in (("rank", rank), ("epochs", epochs), ("batch_size", batch_size)):
        check_int(name, value, low=1)
    check_float("lr", lr, 0.0, low_open=True)
    check_float("n3", n3, 0.0)
    check_float("init_scale", init_scale, 0.0, low_open=True)
    gen = torch.Generator().manual_seed(check_int("seed", seed, low=0))
    h, r, t = triples.t()
    rows = torch.cat([torch.stack([h, r, t], 1), torch.stack([t, r + num_relations, h], 1)])
    ent = torch.nn.Parameter(torch.randn(num_entities, 2 * rank, generator=gen) * init_scale)
    rel = torch.nn.Parameter(torch.randn(2 * num_relations, 2 * rank, generator=gen) * init_scale)
    opt = torch.optim.Adagrad([ent, rel], lr=lr)
    losses = []
    for _ in range(epochs):
        perm = torch.randperm(rows.shape[0], generator=gen)
        total, count = 0.0, 0
        for s in range(0, rows.shape[0], batch_size):
            b = rows[perm[s : s + batch_size]]
            lhs, w, rhs = ent[b[:, 0]], rel[b[:, 1]], ent[b[:, 2]]
            lr_, li = lhs[:, :rank], lhs[:, rank:]
            wr, wi = w[:, :rank], w[:, rank:]
            qr, qi = lr_ * wr - li * wi, lr_ * wi + li * wr
            scores = qr @ ent[:, :rank].t() + qi @ ent[:, rank:].t()
            reg = (
                sum((x[:, :rank] ** 2 + x[:, rank:] ** 2).sqrt().pow(3).sum() for x in (lhs, w, rhs))
                / b.shape[0]
            )
            loss = torch.nn.functional.cross_entropy(scores, b[:, 2]) + n3 * reg
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * b.shape[0]
            count += b.shape[0]
        losses.append(total / count)
    e = ent.detach()
    w = rel.detach()
    return ComplExEmbeddings(
        torch.complex(e[:, :rank], e[:, rank:]), torch.complex(w[:, :rank], w[:, rank:]), losses
    )


# ----------------------------------------------------------------------------------------------
# Query sampling and exact (symbolic) bindings of a variable
# ----------------------------------------------------------------------------------------------


class QuerySampler:
    """Samples anchors and relations for a BetaE structure by walking backwards from an answer.

    ``triples`` ``[T, 3]`` are the graph's edges (inverse relations included as extra ids); every
    sampled query has at least one answer on that graph. With ``last_edges`` ``[E, 3]`` (held-out
    edges of the same graph) the hop into the answer of the first branch is one of them, so the
    query tends to have answers that need a held-out edge (BetaE's "hard" answers). Anchors and
    relations come in the order the executor consumes them (depth first, branches left to right).
    """

    def __init__(self, triples: Tensor, num_entities: int, last_edges: Tensor | None = None):
        check_int("num_entities", num_entities, low=1)
        if (
            not isinstance(triples, Tensor)
            or triples.dim() != 2
            or triples.shape[1] != 3
            or triples.numel() == 0
        ):
            raise ValueError("triples must be a non-empty [T, 3] long tensor")
        self.triples, self.num_entities = triples, num_entities
        self.order = torch.argsort(triples[:, 2], stable=True)
        tails = triples[self.order, 2].contiguous()
        ids = torch.arange(num_entities)
        self.lo = torch.searchsorted(tails, ids, right=False).tolist()
        self.hi = torch.searchsorted(tails, ids, right=True).tolist()
        self.order_list = self.order.tolist()
        self.heads, self.rels = triples[:, 0].tolist(), triples[:, 1].tolist()
        self.targets = torch.unique(triples[:, 2])
        self.last_edges = last_edges

    def _step(self, cur: int, gen: torch.Generator) -> tuple[int, int]:
        n_in = self.hi[cur] - self.lo[cur]
        if n_in == 0:
            raise LookupError
        k = self.order_list[self.lo[cur] + int(torch.randint(0, n_in, (1,), generator=gen))]
        return self.heads[k], self.rels[k]

    def sample(self, structure, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``(anchors [A], relations [P])`` long tensors for ``structure``."""
        _check_structure(structure)
        forced: list = []

        def back(node, target: int) -> tuple[list[int], list[int]]:
            if _is_path(node) or (len(node) == 2 and _is_rels(node[1])):
                cur, chosen = target, []
                for _ in node[1]:
                    if forced:
                        h, r = forced.pop()
                        cur = h
                    else:
                        cur, r = self._step(cur, generator)
                    chosen.append(r)
                chosen.reverse()
                if _is_path(node):
                    return [cur], chosen
                a, rs = back(node[0], cur)
                return a, rs + chosen
            anchors, rels = [], []
            for b in node:
                a, rs = back(b, target)
                anchors += a
                rels += rs
            return anchors, rels

        for _ in range(100):
            if self.last_edges is not None and self.last_edges.numel():
                k = int(torch.randint(0, self.last_edges.shape[0], (1,), generator=generator))
                h, r, target = self.last_edges[k].tolist()
                forced[:] = [(h, r)]
            else:
                target = int(
                    self.targets[int(torch.randint(0, self.targets.numel(), (1,), generator=generator))]
                )
            try:
                a, rs = back(structure, target)
            except LookupError:
                continue
            return torch.tensor(a, dtype=torch.long), torch.tensor(rs, dtype=torch.long)
        raise ValueError("could not sample a query with an answer from these triples (100 tries)")


def sample_query(
    structure, triples: Tensor, num_entities: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """One query for ``structure`` with an answer on ``triples`` (see :class:`QuerySampler`)."""
    return QuerySampler(triples, num_entities).sample(structure, generator)


def variable_bindings(
    executor: QTOExecutor, structure, anchors: Tensor, relations: Tensor, variable: int
) -> tuple[Tensor, Tensor]:
    """Values of variable ``variable`` and the target answers each one induces (exact on a symbolic executor).

    Variable ``j`` is replaced by each of its non-zero values in turn (batched one-hot rows) and the
    rest of the query is executed. Values that induce no answer are dropped.

    Returns
    -------
    values : Tensor
        ``[B]`` long entity ids.
    induced : Tensor
        ``[B, N]`` bool: ``induced[b, e]`` when value ``b`` of the variable leads to answer ``e``.
    """
    holder: dict[str, Tensor] = {}

    def expand(v: Tensor) -> Tensor:
        ids = v.nonzero().flatten()
        holder["ids"] = ids
        out = torch.zeros(ids.numel(), v.shape[-1], dtype=v.dtype)
        out[torch.arange(ids.numel()), ids] = v[ids]
        return out

    out = executor(structure, anchors, relations, adjust={variable: expand})
    if out.dim() == 1:  # no value: nothing to expand
        return torch.zeros(0, dtype=torch.long), torch.zeros(0, out.shape[-1], dtype=torch.bool)
    induced = out > 0
    keep = induced.any(1)
    return holder["ids"][keep], induced[keep]


# ----------------------------------------------------------------------------------------------
# Sessions and their metrics (spec step 8)
# ----------------------------------------------------------------------------------------------


@dataclass
class Session:
    """One preference instance: a query, the constrained variable, examples and graded answers.

    Attributes
    ----------
    structure : tuple
        BetaE structure.
    anchors, relations : Tensor
        ``[A]`` and ``[P]`` long.
    variable : int
        Constrained variable ``j`` (:func:`query_variables` index).
    pref_ids, pref_labels : Tensor
        ``[P]`` example entities and labels (1 = liked, 0 = disliked).
    preferred, other : Tensor
        Hard answers induced by the preferred values of ``j`` (relevance 2) and the other hard answers (1).
    easy : Tensor
        Answers reachable in the training graph: removed from every ranking.
    """

    structure: tuple
    anchors: Tensor
    relations: Tensor
    variable: int
    pref_ids: Tensor
    pref_labels: Tensor
    preferred: Tensor
    other: Tensor
    easy: Tensor


def answer_mrr(scores: Tensor, answers: Tensor, exclude: Tensor) -> float:
    """Filtered MRR of ``answers`` under ``scores`` ``[N]``: other answers and ``exclude`` are removed.

    Each answer is ranked (PyKEEN's realistic rank, :func:`neurips26.common.kg.filtered_ranks`) among
    the entities that are neither another answer nor in ``exclude``; the mean of ``1 / rank`` is returned.
    """
    answers = torch.as_tensor(answers).flatten()
    if answers.numel() == 0:
        raise ValueError("answers must not be empty")
    mask = torch.zeros(scores.shape[-1], dtype=torch.bool)
    mask[answers] = True
    mask[torch.as_tensor(exclude).flatten()] = True
    ranks = filtered_ranks(
        scores.unsqueeze(0).expand(answers.numel(), -1), answers, mask.expand(answers.numel(), -1)
    )
    return float((1.0 / ranks).mean())


def session_metrics(scores: Tensor, session: Session, k: int = 10) -> dict[str, float]:
    """Preference and plain QA metrics of final scores ``[N]`` for one session.

    ``pref_mrr``: :func:`answer_mrr` of the preferred answers (easy answers removed; the other hard
    answers compete). ``mrr_all``: filtered MRR of all hard answers. ``ndcg``: graded NDCG@k (2 preferred,
    1 other hard, 0 otherwise; easy answers removed). ``pairwise``: :func:`pairwise_accuracy`.
    """
    if not torch.isfinite(scores).all():
        raise ValueError("scores contains NaN or inf")
    hard = torch.cat([session.preferred, session.other])
    rel = torch.zeros(scores.shape[-1])
    rel[session.other] = 1.0
    rel[session.preferred] = 2.0
    keep = torch.ones(scores.shape[-1], dtype=torch.bool)
    keep[session.easy] = False
    return {
        "pref_mrr": answer_mrr(scores, session.preferred, session.easy),
        "mrr_all": answer_mrr(scores, hard, session.easy),
        "ndcg": graded_ndcg(scores[keep], rel[keep], k=k),
        "pairwise": pairwise_accuracy(scores, session.preferred, session.other),
    }


def _mean_metrics(rows: list[dict[str, float]]) -> dict[str, float]:
    return {key: sum(r[key] for r in rows) / len(rows) for key in rows[0]}


def _select(results: list[tuple[tuple[float, float], dict[str, float]]], metric: str) -> tuple[float, float]:
    # best validation metric; ties broken by the higher plain MRR (smaller MRR drop), then grid order
    best = max(range(len(results)), key=lambda i: (results[i][1][metric], results[i][1]["mrr_all"], -i))
    return results[best][0]

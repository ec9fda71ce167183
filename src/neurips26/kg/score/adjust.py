"""SCORE's log-odds adjustment of a query variable and its fitted wrapper. Part of :mod:`neurips26.kg.score` (see its docstring for the paper and the math)."""

from __future__ import annotations

import torch
from torch import Tensor

from neurips26.common.checks import check_choice, check_float
from neurips26.kg.score.executor import QTOExecutor
from neurips26.kg.score.metrics import Session, _mean_metrics, _select, session_metrics
from neurips26.kg.score.queries import _num_variables


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
    stacked real and imaginary parts); real embeddings use the plain cosine. The result has the
    embeddings' real dtype (float64 for float64 or complex128 input); integer embeddings are
    computed in torch's default dtype.
    """
    e = torch.view_as_real(embeddings).flatten(1) if embeddings.is_complex() else embeddings
    if not e.is_floating_point():
        e = e.to(torch.get_default_dtype())
    e = torch.nn.functional.normalize(e, dim=1)
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

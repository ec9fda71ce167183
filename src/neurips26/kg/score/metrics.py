"""Preference sessions and their ranking metrics. Part of :mod:`neurips26.kg.score` (see its docstring for the paper and the math)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from neurips26.common.checks import check_choice, check_int
from neurips26.common.kg import filtered_ranks


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


def add_answer_ranks(ranking, scores: Tensor, answers: Tensor, exclude: Tensor, group: int) -> None:
    """Hand :func:`answer_mrr`'s ranking problem to PyKEEN: one row per answer, keyed by ``group``.

    ``ranking`` is a :class:`neurips26.common.kg.PykeenRanking` (``macro=True`` makes its MRR the mean
    over groups of each group's :func:`answer_mrr`, PyKEEN's realistic rank; equal to averaging
    :func:`answer_mrr` within float64 rounding). The filtered set is the same: the other answers and
    ``exclude``.
    """
    answers = torch.as_tensor(answers).flatten()
    if answers.numel() == 0:
        raise ValueError("answers must not be empty")
    mask = torch.zeros(scores.shape[-1], dtype=torch.bool)
    mask[answers] = True
    mask[torch.as_tensor(exclude).flatten()] = True
    ranking.add(
        scores.unsqueeze(0).expand(answers.numel(), -1),
        answers,
        mask.expand(answers.numel(), -1),
        group=group,
    )


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


SESSION_MODES = ("mixed", "positive", "negative")


def session_steps(session: Session, mode: str = "mixed", max_steps: int | None = None) -> list[Session]:
    """The states of an interactive session: step ``t`` keeps the first ``t`` examples (spec step 7).

    Examples arrive one at a time. ``mixed`` alternates positive and negative examples (positive
    first; when one kind runs out the rest of the other follows), ``positive`` / ``negative`` use
    only that kind. Within a kind the order of ``session.pref_ids`` is kept.

    Returns
    -------
    list of Session
        ``T`` sessions (``T`` = number of usable examples, capped at ``max_steps``), the ``t``-th
        holding the first ``t`` examples; everything else is shared with ``session``.
    """
    check_choice("mode", mode, SESSION_MODES)
    labels = torch.as_tensor(session.pref_labels).flatten()
    ids = torch.as_tensor(session.pref_ids).flatten()
    if ids.numel() != labels.numel():
        raise ValueError(
            f"pref_ids and pref_labels must have the same length, got {ids.numel()} and {labels.numel()}"
        )
    pos, neg = ids[labels == 1].tolist(), ids[labels == 0].tolist()
    if mode == "positive":
        order = [(p, 1) for p in pos]
    elif mode == "negative":
        order = [(n, 0) for n in neg]
    else:
        order = []
        for i in range(max(len(pos), len(neg))):
            order += [(p, 1) for p in pos[i : i + 1]] + [(n, 0) for n in neg[i : i + 1]]
    if max_steps is not None:
        order = order[: check_int("max_steps", max_steps, low=1)]
    if not order:
        raise ValueError(f"session has no {mode} examples")
    out = []
    for t in range(1, len(order) + 1):
        out.append(
            replace(
                session,
                pref_ids=torch.tensor([e for e, _ in order[:t]], dtype=torch.long),
                pref_labels=torch.tensor([lab for _, lab in order[:t]], dtype=torch.long),
            )
        )
    return out


def interactive_metrics(
    scorer: Callable[[Session], Tensor],
    session: Session,
    mode: str = "mixed",
    max_steps: int | None = None,
    k: int = 10,
) -> dict:
    """Metrics of ``scorer`` at every step of an interactive session and averaged over steps.

    Returns ``{"steps": [metrics at t = 1..T], "cumulative": {metric: mean over steps}}`` with the
    metrics of :func:`session_metrics`; ``scorer(step_session)`` returns final scores ``[N]``.
    """
    rows = [session_metrics(scorer(s), s, k=k) for s in session_steps(session, mode, max_steps)]
    return {"steps": rows, "cumulative": _mean_metrics(rows)}


def _mean_metrics(rows: list[dict[str, float]]) -> dict[str, float]:
    return {key: sum(r[key] for r in rows) / len(rows) for key in rows[0]}


def _select(results: list[tuple[tuple[float, float], dict[str, float]]], metric: str) -> tuple[float, float]:
    # best validation metric; ties broken by the higher plain MRR (smaller MRR drop), then grid order
    best = max(range(len(results)), key=lambda i: (results[i][1][metric], results[i][1]["mrr_all"], -i))
    return results[best][0]

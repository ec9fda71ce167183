"""Controlled surgery, counterfactual transition-vs-emission tests and detector evaluation.

``inject`` edits a clean chain of thought in token space so that one pathology starts at a known
step (the onset); every edit inserts or replaces material at or after the onset only:

============  ===================================================================  ===============
pathology     edit                                                                 onset
============  ===================================================================  ===============
P1            insert an answer step with a wrong value at step 0 or 1              that step
P2            insert two aborted alternative-approach steps at step 0 or 1         first inserted
P3            duplicate a block of 1-3 derivation steps right after itself          first copy step
P4            insert three off-task steps inside the derivation                    first inserted
P5            append 2-4 redundant steps (copies of derivation steps / checks)     first appended
P6            append an answer step with a different value, or delete the answers  that step
============  ===================================================================  ===============

Detection quality is the AUROC of a detector's continuous score between injected traces and the
unmodified clean traces, and the mean absolute onset error (steps) over injected traces where the
detector fired. The counterfactual test re-encodes traces after an *emission* edit (each step's
surface replaced by a paraphrase) or a *transition* edit (one step replaced by a step of another
state) and reports how often a detector's decision flips:

.. math::

    \\text{flip} = \\frac{1}{N} \\sum_j \\mathbb{1}[f(\\tau_j) \\ne f(\\tau'_j)], \\qquad
    \\text{AUROC} = P(\\text{score}(\\tau^+) > \\text{score}(\\tau^-)) + \\tfrac12 P(=)

Shapes
------
ids : ``(T,)`` chain-of-thought token ids; spans : ``n`` half-open step spans.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .detectors import DetectorConfig, DetectorResult, detect
from .trajectory import ANSWER, LatentStateModel, Pathology, Phase, Trajectory, as_id_list


@dataclass(frozen=True)
class SurgeryTemplates:
    """Task-specific step material for :func:`inject` (token ids, each ending with a delimiter).

    Attributes
    ----------
    answer_step : callable
        ``answer_step(value: str) -> list[int]``, an answer-bearing step.
    wrong_value : callable
        ``wrong_value(value: str, rng: random.Random) -> str``, a different answer.
    branch_step : callable
        ``branch_step(rng) -> list[int]``, an aborted alternative approach.
    offtask_step : callable
        ``offtask_step(rng) -> list[int]``, an irrelevant, uncertain step.
    check_step : callable, optional
        ``check_step(rng) -> list[int]``, a redundant post-answer step; default: copy a derivation step.
    """

    answer_step: Callable[[str], list[int]]
    wrong_value: Callable[[str, random.Random], str]
    branch_step: Callable[[random.Random], list[int]]
    offtask_step: Callable[[random.Random], list[int]]
    check_step: Callable[[random.Random], list[int]] | None = None


def _steps(ids: list[int], spans: Sequence[tuple[int, int]]) -> list[list[int]]:
    if not spans:
        return []
    pos = 0
    for i, (s, e) in enumerate(spans):
        if s != pos or e <= s:
            raise ValueError(
                f"spans must tile the ids contiguously; span {i} = ({s}, {e}) after position {pos}"
            )
        pos = e
    if pos != len(ids):
        raise ValueError(f"spans cover {pos} tokens but ids has {len(ids)}")
    return [ids[s:e] for s, e in spans]


def inject(
    ids: Any,
    spans: Sequence[tuple[int, int]],
    pathology: Any,
    rng: random.Random,
    templates: SurgeryTemplates,
    answer_extractor: Callable[[list[int]], str | None],
    position: int | None = None,
) -> tuple[list[int], int]:
    """Inject ``pathology`` into a clean chain of thought; return ``(new_ids, onset_step)``.

    Parameters
    ----------
    ids : sequence of int, shape ``(T,)``
        A clean chain of thought (prompt excluded) whose last answer-bearing step is its final answer.
    spans : list of (int, int)
        Its steps (``StepSegmenter.split(ids)``).
    pathology : Pathology or str
    rng : random.Random
        Seeded source of every random choice.
    templates : SurgeryTemplates
    answer_extractor : callable
    position : int, optional
        Onset step for P1/P2 (``0`` or ``1``), block start for P3, insertion step for P4; random if None.
    """
    ids = as_id_list("ids", ids)
    p = Pathology.parse(pathology)
    if not isinstance(rng, random.Random):
        raise TypeError(f"rng must be a random.Random, got {type(rng).__name__}")
    steps = _steps(ids, spans)
    answers = [answer_extractor(st) for st in steps]
    answered = [i for i, a in enumerate(answers) if a is not None]
    if not answered:
        raise ValueError("inject needs a clean trace with an answer-bearing step")
    final_idx = answered[-1]
    final = answers[final_idx]
    derivation = [i for i in range(answered[0])]
    if p in (
        Pathology.LOOPING,
        Pathology.DRIFT,
        Pathology.PREMATURE_COMMITMENT,
        Pathology.UNSTABLE_BRANCHING,
    ):
        if not derivation:
            raise ValueError(f"{p.value} surgery needs at least one step before the first answer")

    def pick(name: str, low: int, high: int) -> int:
        if position is None:
            return rng.randint(low, high)
        if not low <= position <= high:
            raise ValueError(f"position for {p.value} must lie in [{low}, {high}], got {position}")
        return position

    def flat(parts: list[list[int]]) -> list[int]:
        return [t for st in parts for t in st]

    if p == Pathology.PREMATURE_COMMITMENT:
        at = pick("position", 0, min(1, len(derivation) - 1))
        new = steps[:at] + [templates.answer_step(templates.wrong_value(final, rng))] + steps[at:]
        return flat(new), at
    if p == Pathology.UNSTABLE_BRANCHING:
        at = pick("position", 0, min(1, len(derivation) - 1))
        new = steps[:at] + [templates.branch_step(rng), templates.branch_step(rng)] + steps[at:]
        return flat(new), at
    if p == Pathology.LOOPING:
        length = rng.randint(1, min(3, len(derivation)))
        start = pick("position", 0, len(derivation) - length)
        block = steps[start : start + length]
        new = steps[: start + length] + [list(s) for s in block] + steps[start + length :]
        return flat(new), start + length
    if p == Pathology.DRIFT:
        at = pick("position", 1 if len(derivation) > 1 else 0, len(derivation))
        new = steps[:at] + [templates.offtask_step(rng) for _ in range(3)] + steps[at:]
        return flat(new), at
    if p == Pathology.OVERRUN:
        k = rng.randint(2, 4)
        extra = []
        for _ in range(k):
            if templates.check_step is not None and (not derivation or rng.random() < 0.5):
                extra.append(templates.check_step(rng))
            else:
                extra.append(list(steps[rng.choice(derivation)]) if derivation else templates.check_step(rng))
        return flat(steps + extra), len(steps)
    # REVERSAL
    if rng.random() < 0.5:
        wrong = templates.wrong_value(final, rng)
        return flat(steps + [templates.answer_step(wrong)]), len(steps)
    kept = [st for i, st in enumerate(steps) if answers[i] is None]  # delete every answer step
    return flat(kept), min(answered[0], max(0, len(kept) - 1))


def auroc(positive: Sequence[float], negative: Sequence[float]) -> float:
    """Probability that a positive scores above a negative (ties count 1/2); NaN when a side is empty."""
    pos, neg = np.asarray(positive, dtype=float), np.asarray(negative, dtype=float)
    if pos.size == 0 or neg.size == 0:
        return float("nan")
    if not (np.isfinite(pos).all() and np.isfinite(neg).all()):
        raise ValueError("auroc needs finite scores")
    gt = (pos[:, None] > neg[None, :]).mean()
    eq = (pos[:, None] == neg[None, :]).mean()
    return float(gt + 0.5 * eq)


def evaluate_detectors(
    clean: Sequence[Trajectory],
    injected: Mapping[Any, Sequence[tuple[Trajectory, int]]],
    ref: LatentStateModel,
    graph_aware: bool = True,
    config: DetectorConfig | None = None,
    verifier: Callable[[str], bool] | None = None,
) -> dict[str, Any]:
    """AUROC, onset error and fire rates of every detector against its own surgery.

    Returns ``{"per_pathology": {name: {auroc, onset_error, fire_rate, false_alarm_rate}},
    "per_phase": {phase: mean auroc}}``.
    """
    if not clean:
        raise ValueError("clean must hold at least one trajectory")
    per: dict[str, dict[str, float]] = {}
    for key, items in injected.items():
        p = Pathology.parse(key)
        if not items:
            raise ValueError(f"injected[{p.value}] is empty")
        neg = [detect(t, p, ref, graph_aware, config, verifier) for t in clean]
        pos = [(detect(t, p, ref, graph_aware, config, verifier), onset) for t, onset in items]
        errors = [abs(r.onset - onset) for r, onset in pos if r.fired and r.onset is not None]
        per[p.value] = {
            "auroc": auroc([r.score for r, _ in pos], [r.score for r in neg]),
            "onset_error": float(np.mean(errors)) if errors else float("nan"),
            "fire_rate": float(np.mean([r.fired for r, _ in pos])),
            "false_alarm_rate": float(np.mean([r.fired for r in neg])),
        }
    phase: dict[str, list[float]] = {}
    for name, row in per.items():
        phase.setdefault(Pathology(name).phase.value, []).append(row["auroc"])
    return {"per_pathology": per, "per_phase": {k: float(np.mean(v)) for k, v in phase.items()}}


def counterfactual_flip_rate(
    detector: Callable[[Trajectory], DetectorResult],
    originals: Sequence[Trajectory],
    edited: Sequence[Trajectory],
) -> float:
    """Share of pairs whose ``detector(...).fired`` differs between the original and the edited trace."""
    if len(originals) != len(edited):
        raise ValueError(f"originals and edited must pair up, got {len(originals)} and {len(edited)}")
    if not originals:
        raise ValueError("originals must not be empty")
    flips = [detector(a).fired != detector(b).fired for a, b in zip(originals, edited)]
    return float(np.mean(flips))


def path_change_rate(originals: Sequence[Trajectory], edited: Sequence[Trajectory]) -> float:
    """Share of steps whose latent state changed under an edit that keeps the step count."""
    if len(originals) != len(edited):
        raise ValueError(f"originals and edited must pair up, got {len(originals)} and {len(edited)}")
    changed = total = 0
    for a, b in zip(originals, edited):
        if len(a) != len(b):
            raise ValueError("path_change_rate needs edits that keep the number of steps")
        changed += sum(x != y for x, y in zip(a.states, b.states))
        total += len(a)
    return changed / total if total else 0.0


__all__ = [
    "ANSWER",
    "Phase",
    "SurgeryTemplates",
    "inject",
    "auroc",
    "evaluate_detectors",
    "counterfactual_flip_rate",
    "path_change_rate",
]

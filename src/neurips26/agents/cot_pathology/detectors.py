"""Transition-grounded detection predicates of the six CoT pathologies, and surface baselines.

Every predicate reads only the latent trajectory (states, step uncertainty, extracted answers)
and the reference transition model, never the surface tokens. Notation: ``s_i`` states,
``T(s)`` expected hitting time of ``ANSWER`` (progress potential, smaller = closer),
``surp_i = -log P(s_i | s_{i-1})``, ``theta`` the 95th percentile of clean surprisal, ``u_90``
the 90th percentile of clean step uncertainty, ``D(i)`` the number of derivation steps (neither
restatement nor answer) before step ``i``.

.. math::

    \\text{P1: } D(a_1) < m_{min}, \\quad \\text{score} = m_{min} - D(a_1)

    \\text{P2: } \\#\\{i \\le e : \\text{surp}_i > \\theta\\} \\ge 2, \\quad
        \\text{score} = \\textstyle\\sum_{i \\le e} (\\text{surp}_i - \\theta)_+

    \\text{P3: } (s_{j-n+1..j}) \\text{ occurs earlier in the window } [j - W + 1, j]
        \\;[\\text{and } T(s_{j-n+1}) \\ge T(s_{j-n}) \\text{ when graph-aware}]

    \\text{P4: } \\text{run of } \\ge 3 \\text{ steps with } u_i > u_{90}
        \\;[\\text{and } T(s_{i+1}) \\ge T(s_i)], \\quad
        \\text{score} = \\max_{\\text{runs}} |r| \\cdot \\overline{(u - u_{90})}_r

    \\text{P5: } n - 1 - a^* \\ge 2, \\quad a^* = \\text{first verified answer}

    \\text{P6: a supported answer differs from the final answer, or no answer at all}

with ``a_1`` the first answer-bearing step and ``e`` the end of the early phase. Thresholds
(``m_min = 2``, ``W = 8``, runs of 3, 2 overrun steps) are the spec's inferred defaults
(:class:`DetectorConfig`).

Shapes
------
A :class:`~.trajectory.Trajectory` of ``n`` steps in, a :class:`DetectorResult` out (``onset`` is
a step index in ``[0, n)``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from neurips26.common.checks import check_int

from .trajectory import ANSWER, LatentStateModel, Pathology, Phase, Trajectory, as_id_list, phases


@dataclass(frozen=True)
class DetectorResult:
    """Outcome of one detector: whether it fired, the onset step and a continuous score (for AUROC)."""

    fired: bool
    onset: int | None
    score: float


@dataclass(frozen=True)
class DetectorConfig:
    """Thresholds of the detection predicates (inferred defaults of the spec)."""

    m_min: int = 2
    window: int = 8
    max_ngram: int = 3
    unigram_run: int = 3
    surprising_transitions: int = 2
    abandoned_states: int = 3
    drift_run: int = 3
    overrun_steps: int = 2

    def __post_init__(self) -> None:
        check_int("m_min", self.m_min, low=1)
        check_int("window", self.window, low=2)
        check_int("max_ngram", self.max_ngram, low=1)
        check_int("unigram_run", self.unigram_run, low=2)
        check_int("surprising_transitions", self.surprising_transitions, low=1)
        check_int("abandoned_states", self.abandoned_states, low=1)
        check_int("drift_run", self.drift_run, low=1)
        check_int("overrun_steps", self.overrun_steps, low=1)


Verifier = Callable[[str], bool]
_NONE = DetectorResult(False, None, 0.0)


def _derivation_before(traj: Trajectory, ref: LatentStateModel, i: int) -> int:
    return sum(1 for s in traj.states[:i] if s != ANSWER and not ref.is_restatement(s))


def _first_answer(traj: Trajectory) -> int | None:
    return next((i for i, a in enumerate(traj.answers) if a is not None), None)


def _supported(
    traj: Trajectory, ref: LatentStateModel, cfg: DetectorConfig, i: int, verifier: Verifier | None
) -> bool:
    if verifier is not None:
        return bool(verifier(traj.answers[i]))
    return _derivation_before(traj, ref, i) >= cfg.m_min


def premature_commitment(traj, ref, cfg, graph_aware=True, verifier=None) -> DetectorResult:
    """P1: an answer-bearing step with fewer than ``m_min`` derivation steps before it."""
    if len(traj) == 0:
        return _NONE
    first = _first_answer(traj)
    if first is None:
        return DetectorResult(False, None, float(cfg.m_min - _derivation_before(traj, ref, len(traj)) - 1))
    d = _derivation_before(traj, ref, first)
    return DetectorResult(d < cfg.m_min, first if d < cfg.m_min else None, float(cfg.m_min - d))


def unstable_branching(traj, ref, cfg, graph_aware=True, verifier=None) -> DetectorResult:
    """P2: surprising transitions (or, graph-aware, abandoned states without progress) early on."""
    n = len(traj)
    if n == 0:
        return _NONE
    ph = phases(traj, ref)
    early_end = sum(1 for p in ph if p == Phase.EARLY)
    last = min(n - 1, early_end)  # include the transition that leaves the early phase
    surp = ref.surprisals(traj.states)
    theta = ref.thresholds.get("surprisal", math.inf)
    idx = [i for i in range(last + 1) if surp[i] > theta]
    score = sum(surp[i] - theta for i in idx)
    fired, onset = len(idx) >= cfg.surprising_transitions, (idx[0] if idx else None)
    if graph_aware and not fired:
        abandoned = []
        for i in range(last):
            s, nxt = traj.states[i], traj.states[i + 1]
            if s == ANSWER or ref.is_restatement(s) or nxt == s:
                continue
            if ref.progress(nxt) >= ref.progress(s) and s not in traj.states[i + 1 :] and s not in abandoned:
                abandoned.append(s)
                onset = i if len(abandoned) == 1 and onset is None else onset
        if len(abandoned) >= cfg.abandoned_states:
            fired = True
            onset = onset if onset is not None else 0
    return DetectorResult(fired, onset if fired else None, float(score))


def looping(traj, ref, cfg, graph_aware=True, verifier=None) -> DetectorResult:
    """P3: a state n-gram (n = 1..3) repeats inside a window of ``W`` steps before the answer.

    Graph-aware: the transition that closes the cycle makes no progress toward ``ANSWER``
    (``T(s_start2) >= T(s_prev)``) and no answer lies between the two occurrences.
    """
    n = len(traj)
    if n == 0:
        return _NONE
    first = _first_answer(traj)
    end = n if first is None else first
    s = traj.states
    events, onset = 0, None
    for j in range(end):
        lo = max(0, j - cfg.window + 1)
        hit = None
        for k in range(min(cfg.max_ngram, j + 1), 0, -1):
            start2 = j - k + 1
            if k == 1:
                run = cfg.unigram_run
                if j - run + 1 >= lo and len(set(s[j - run + 1 : j + 1])) == 1:
                    hit = (start2, j - 1)
            else:
                gram = s[start2 : j + 1]
                for a in range(lo, start2 - k + 1):
                    if s[a : a + k] == gram:
                        hit = (start2, a + k - 1)
                        break
            if hit is not None:
                break
        if hit is None:
            continue
        start2, end1 = hit
        if graph_aware:
            prev = s[start2 - 1]
            between = traj.answers[end1 + 1 : start2]
            if ref.progress(s[start2]) < ref.progress(prev) or any(a is not None for a in between):
                continue
        events += 1
        onset = start2 if onset is None else onset
    return DetectorResult(events > 0, onset, float(events))


def drift(traj, ref, cfg, graph_aware=True, verifier=None) -> DetectorResult:
    """P4: a run of ``>= 3`` progression steps with ``u > u_90`` (graph-aware: without progress)."""
    n = len(traj)
    if n == 0:
        return _NONE
    ph = phases(traj, ref)
    u90 = ref.thresholds.get("uncertainty", math.inf)
    best, first_fire = 0.0, None
    i = 0
    while i < n:
        if ph[i] != Phase.PROGRESSION or traj.uncertainty[i] <= u90 or traj.states[i] == ANSWER:
            i += 1
            continue
        j = i + 1
        while j < n and ph[j] == Phase.PROGRESSION and traj.uncertainty[j] > u90 and traj.states[j] != ANSWER:
            if graph_aware and ref.progress(traj.states[j]) < ref.progress(traj.states[j - 1]):
                break
            j += 1
        length = j - i
        score = length * sum(traj.uncertainty[t] - u90 for t in range(i, j)) / length
        best = max(best, score)
        if length >= cfg.drift_run and first_fire is None:
            first_fire = i
        i = j
    return DetectorResult(first_fire is not None, first_fire, float(best))


def overrun(traj, ref, cfg, graph_aware=True, verifier=None) -> DetectorResult:
    """P5: at least ``overrun_steps`` steps after the first verified answer (= final answer or verifier)."""
    n = len(traj)
    answered = [i for i, a in enumerate(traj.answers) if a is not None]
    if not answered:
        return DetectorResult(False, None, -1.0)
    final = traj.answers[answered[-1]]
    ok = [
        i
        for i in answered
        if traj.answers[i] == final or (verifier is not None and verifier(traj.answers[i]))
    ]
    a = ok[0]
    post = n - 1 - a
    fired = post >= cfg.overrun_steps
    return DetectorResult(fired, a + 1 if fired else None, float(post))


def reversal(traj, ref, cfg, graph_aware=True, verifier=None) -> DetectorResult:
    """P6: a supported answer is later replaced by a different final answer, or no answer at all."""
    n = len(traj)
    if n == 0:
        return _NONE
    answered = [i for i, a in enumerate(traj.answers) if a is not None]
    if not answered:
        return DetectorResult(True, n - 1, 1.0)
    final = traj.answers[answered[-1]]
    for i in answered:
        if _supported(traj, ref, cfg, i, verifier) and traj.answers[i] != final:
            j = next(t for t in answered if t > i and traj.answers[t] != traj.answers[i])
            return DetectorResult(True, j, 1.0 + (j - i - 1) / n)
    return DetectorResult(False, None, 0.0)


#: Detection predicates by pathology; add an entry to register a custom predicate with the same
#: signature ``fn(traj, ref, config, graph_aware=True, verifier=None) -> DetectorResult``.
DETECTORS: dict[Any, Callable[..., DetectorResult]] = {
    Pathology.PREMATURE_COMMITMENT: premature_commitment,
    Pathology.UNSTABLE_BRANCHING: unstable_branching,
    Pathology.LOOPING: looping,
    Pathology.DRIFT: drift,
    Pathology.OVERRUN: overrun,
    Pathology.REVERSAL: reversal,
}


def _check_inputs(traj: Any, ref: Any, config: Any, verifier: Any = None) -> DetectorConfig:
    if not isinstance(traj, Trajectory):
        raise TypeError(f"traj must be a Trajectory, got {type(traj).__name__}")
    if not isinstance(ref, LatentStateModel):
        raise TypeError(f"ref must be a LatentStateModel, got {type(ref).__name__}")
    if not ref.fitted:
        raise ValueError("ref is not fitted: call fit, fit_embeddings or fit_sequences first")
    for i, s in enumerate(traj.states):
        if s != ANSWER and s >= ref.n_states:
            raise ValueError(f"traj.states[{i}] = {s} is outside the reference's {ref.n_states} states")
    if verifier is not None and not callable(verifier):
        raise TypeError(f"verifier must be callable (answer -> bool) or None, got {type(verifier).__name__}")
    if config is None:
        return DetectorConfig()
    if not isinstance(config, DetectorConfig):
        raise TypeError(f"config must be a DetectorConfig, got {type(config).__name__}")
    return config


def detect(
    traj: Trajectory,
    pathology: Any,
    ref: LatentStateModel,
    graph_aware: bool = True,
    config: DetectorConfig | None = None,
    verifier: Verifier | None = None,
) -> DetectorResult:
    """Run the detector of ``pathology`` on ``traj`` against the reference model ``ref``.

    Parameters
    ----------
    traj : Trajectory
    pathology : Pathology or str (or a custom key registered in :data:`DETECTORS`)
    ref : LatentStateModel
        Fitted reference (transition matrix, thresholds, restatement states, progress).
    graph_aware : bool
        Use the graph features (progress ``T(s)``, abandoned states, loop-closing transitions).
    config : DetectorConfig, optional
    verifier : callable, optional
        ``verifier(answer) -> bool``: an external answer check (P5 verified, P6 supported).
    """
    cfg = _check_inputs(traj, ref, config, verifier)
    key = pathology
    if key not in DETECTORS:
        key = Pathology.parse(pathology)
    return DETECTORS[key](traj, ref, cfg, graph_aware=bool(graph_aware), verifier=verifier)


def detect_all(
    traj: Trajectory,
    ref: LatentStateModel,
    graph_aware: bool = True,
    config: DetectorConfig | None = None,
    verifier: Verifier | None = None,
) -> dict[Any, DetectorResult]:
    """Every registered detector on ``traj``: ``{pathology: DetectorResult}``."""
    cfg = _check_inputs(traj, ref, config, verifier)
    return {
        k: fn(traj, ref, cfg, graph_aware=bool(graph_aware), verifier=verifier) for k, fn in DETECTORS.items()
    }


# ------------------------------------------------------------------------------ surface baselines
def ngram_repetition(ids: Any, n: int = 4) -> DetectorResult:
    """Surface loop baseline: token n-grams of ``ids`` (shape ``(T,)``) that repeat an earlier one.

    ``score`` = number of repeated n-gram occurrences; ``onset`` = token index of the first repeat.
    """
    ids = as_id_list("ids", ids)
    check_int("n", n, low=1)
    seen, count, onset = set(), 0, None
    for t in range(len(ids) - n + 1):
        gram = tuple(ids[t : t + n])
        if gram in seen:
            count += 1
            onset = t if onset is None else onset
        seen.add(gram)
    return DetectorResult(count > 0, onset, float(count))


def step_ngram_repetition(step_ids: Sequence[Sequence[int]], n: int = 4) -> DetectorResult:
    """:func:`ngram_repetition` on the concatenated steps, with the onset mapped to a step index."""
    flat, owner = [], []
    for i, st in enumerate(step_ids):
        st = as_id_list(f"step_ids[{i}]", st)
        flat.extend(st)
        owner.extend([i] * len(st))
    res = ngram_repetition(flat, n)
    onset = owner[res.onset + n - 1] if res.onset is not None else None
    return DetectorResult(res.fired, onset, res.score)


def detector_scores(
    trajs: Sequence[Trajectory],
    ref: LatentStateModel,
    pathology: Any,
    graph_aware: bool = True,
    config: DetectorConfig | None = None,
    verifier: Verifier | None = None,
) -> list[DetectorResult]:
    """:func:`detect` over many trajectories."""
    return [detect(t, pathology, ref, graph_aware, config, verifier) for t in trajs]


def results_table(results: Mapping[Any, DetectorResult]) -> dict[str, dict[str, Any]]:
    """JSON-friendly view of :func:`detect_all` output."""
    return {
        str(getattr(k, "value", k)): {"fired": r.fired, "onset": r.onset, "score": r.score}
        for k, r in results.items()
    }

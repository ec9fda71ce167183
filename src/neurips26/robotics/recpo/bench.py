"""Benchmark pieces: training compositions, held-out tasks, demonstrations, and the baselines.

Baselines (spec): **whole-composition retrieval** (replay the skills of the training composition whose
interpreted change sequence is nearest in edit distance), **full-state skill retrieval** (per demonstration
segment, the skill of the nearest training segment by Euclidean distance between concatenated
``(pre, post)`` observations, k = 1; no views, no preconditions) and the **oracle planner** on the true
symbolic model (:func:`~neurips26.robotics.recpo.kitchen.oracle_plan`).

Shapes
------
- demonstration: ``(T, 30)``; a segment's ``pre``/``post``: ``(settle_frames, 30)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from neurips26.common.checks import check_float, check_int
from neurips26.robotics.recpo.core import (
    DemoInterpreter,
    EpisodeResult,
    Segment,
    SegmentedEpisode,
    labels_of,
    ordered_subtask_completion,
)
from neurips26.robotics.recpo.kitchen import (
    CANONICAL_STATE,
    SKILLS,
    ExtendedKitchen,
    SkillCall,
    check_state,
    label,
    oracle_plan,
    parse_label,
    random_state,
    skill_target,
    state_labels,
    transition,
)
from neurips26.robotics.recpo.views import ProcedureView, as_observations

# skills never shown in training: recovering them needs the interface view (close a handle-pull door like the
# microwave; turn off a knob like the bottom burner)
HELD_OUT_SKILLS = (SkillCall("close", ("hinge cabinet",)), SkillCall("turn_off", ("top burner",)))


@dataclass(frozen=True)
class KitchenTask:
    """A task: target labels in order, the demonstrator's initial state and the robot's initial state."""

    target: tuple[str, ...]
    demo_state: Mapping[str, str]
    robot_state: Mapping[str, str]


def call_for(state: Mapping[str, str], target: str) -> SkillCall:
    """The single skill that drives ``target``'s element to its value."""
    element, value = parse_label(target)
    for call in SKILLS:
        if skill_target(call) == (element, value):
            return call
    raise ValueError(f"no skill reaches {target!r}")  # pragma: no cover


def _random_walk(state, length, rng, allowed):
    labels, state = [], dict(state)
    for _ in range(length):
        options = [c for c in allowed if transition(state, c)[1] and transition(state, c)[0] != state]
        if not options:
            return None
        call = options[int(rng.integers(len(options)))]
        state = transition(state, call)[0]
        labels.append(label(*skill_target(call)))
    return tuple(labels)


def training_compositions(n: int = 24, length: int = 4, seed: int = 0) -> list[tuple[str, ...]]:
    """``n`` distinct ``length``-step compositions from the canonical state, each step one skill whose
    precondition holds; skills in :data:`HELD_OUT_SKILLS` never appear; every other skill appears at least
    once (the generator retries with the next seed otherwise)."""
    check_int("n", n, 1)
    check_int("length", length, 1)
    allowed = [c for c in SKILLS if c not in HELD_OUT_SKILLS]
    for attempt in range(100):
        rng = np.random.default_rng([seed, attempt])
        out: list[tuple[str, ...]] = []
        for _ in range(50 * n):
            comp = _random_walk(CANONICAL_STATE, length, rng, allowed)
            if comp is not None and comp not in out:
                out.append(comp)
            if len(out) == n:
                break
        seen = {call_for(CANONICAL_STATE, lab) for comp in out for lab in comp}
        if len(out) == n and (n * length < len(allowed) or seen >= set(allowed)):
            return out
    raise RuntimeError("could not generate covering training compositions")  # pragma: no cover


def replay_fails(task: KitchenTask) -> bool:
    """Whether executing the demonstrated skills from the robot's state misses a target (true model)."""
    s, events = dict(task.robot_state), []
    for t in task.target:
        new, _ = transition(s, call_for(task.demo_state, t))
        events += sorted(state_labels(new) - state_labels(s))
        s = new
    return ordered_subtask_completion(events, task.target, initial=state_labels(task.robot_state)) < 1.0


def heldout_tasks(
    n: int,
    seed: int,
    exclude: Sequence[Sequence[str]] = (),
    min_len: int = 4,
    max_len: int = 7,
    max_depth: int = 3,
    regime_fraction: float = 0.5,
) -> list[KitchenTask]:
    """``n`` held-out tasks: a random demonstrator state, a pure demonstration path of ``min_len..max_len``
    skills from it (every skill allowed), a different random robot state from which the oracle can achieve the
    targets in order; label sequences in ``exclude`` are rejected. A ``regime_fraction`` of the tasks (evenly
    spread) is drawn so that replaying the demonstrated skills from the robot's state fails (the spec's regime:
    a precondition must be established); the others are unconstrained."""
    check_int("n", n, 1)
    check_int("min_len", min_len, 1)
    check_int("max_len", max_len, min_len)
    check_float("regime_fraction", regime_fraction, 0.0, 1.0)
    rng = np.random.default_rng([seed, 7])
    banned = {tuple(e) for e in exclude}
    out: list[KitchenTask] = []
    while len(out) < n:
        k = len(out)
        need = int((k + 1) * regime_fraction) > int(k * regime_fraction)
        demo = random_state(rng)
        target = _random_walk(demo, int(rng.integers(min_len, max_len + 1)), rng, SKILLS)
        robot = random_state(rng)
        if target is None or target in banned or robot == demo:
            continue
        if oracle_plan(robot, target, max_depth) is None:
            continue
        task = KitchenTask(target, demo, robot)
        if need and not replay_fails(task):
            continue
        out.append(task)
    return out


def record_demonstration(
    state: Mapping[str, str],
    target: Sequence[str],
    noise: float = 0.02,
    seed: int = 0,
    settle_frames: int = 4,
) -> tuple[np.ndarray, SegmentedEpisode]:
    """Execute ``target``'s skills from ``state`` and return the noisy frames ``(T, 30)`` and the segmented
    episode (each segment's ``pre``/``post`` are the ``settle_frames`` still frames around the skill)."""
    if isinstance(target, str) or not all(isinstance(t, str) for t in target):
        raise TypeError(f"target must be a sequence of labels like ['microwave=open'], got {target!r}")
    env = ExtendedKitchen(noise=check_float("noise", noise, 0.0, 10.0), settle_frames=settle_frames)
    env.reset(seed=seed, options={"state": check_state("state", state)})
    frames = [np.stack([env.observe() for _ in range(settle_frames)])]
    segments = []
    for t in target:
        call = call_for(env.state, t)
        pre = frames[-1][-settle_frames:]
        _, _, _, _, info = env.execute(call)
        if not info["success"]:
            raise ValueError(
                f"target {t!r} is not executable from the demonstrator's state: {info['failure']}"
            )
        frames.append(info["frames"])
        segments.append(Segment(pre, call, info["frames"][-settle_frames:]))
    return np.concatenate(frames), SegmentedEpisode(tuple(segments))


def replay(env, calls: Sequence[SkillCall]) -> EpisodeResult:
    """Execute ``calls`` open-loop and collect the events."""
    env = getattr(env, "unwrapped", env)
    result = EpisodeResult([], [], env.labels())
    for call in calls:
        _, _, _, _, info = env.execute(call)
        result.calls.append(call)
        result.events += info["events"]
    return result


def _timed_replay(env, plan: Callable[[], Sequence[SkillCall]]) -> EpisodeResult:
    """Time ``plan()`` (wall clock, into ``planning_time_s``), then :func:`replay` the calls it returns."""
    t0 = time.perf_counter()
    calls = plan()
    elapsed = time.perf_counter() - t0
    result = replay(env, calls)
    result.planning_time_s = elapsed
    return result


def edit_distance(a: Sequence[str], b: Sequence[str]) -> int:
    """Levenshtein distance between two label sequences."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


class WholeCompositionRetrieval:
    """Replay the skill sequence of the stored training composition nearest (edit distance over interpreted
    change labels) to the demonstration."""

    def __init__(self, views: Sequence[ProcedureView], min_persistence: int = 3) -> None:
        self.interpreter = DemoInterpreter(views, min_persistence)
        self.library: list[tuple[list[str], list[SkillCall]]] = []

    def add(self, demonstration: np.ndarray, episode: SegmentedEpisode) -> None:
        labels = labels_of(self.interpreter.interpret(demonstration))
        self.library.append((labels, [s.call for s in episode.segments]))

    def plan(self, demonstration: np.ndarray) -> list[SkillCall]:
        if not self.library:
            raise RuntimeError("WholeCompositionRetrieval has no stored compositions")
        labels = labels_of(self.interpreter.interpret(demonstration))
        best = min(range(len(self.library)), key=lambda i: (edit_distance(labels, self.library[i][0]), i))
        return list(self.library[best][1])

    def run(self, env, demonstration: np.ndarray) -> EpisodeResult:
        return _timed_replay(env, lambda: self.plan(demonstration))


class FullStateSkillRetrieval:
    """Per demonstration segment, retrieve the skill of the nearest stored segment in full-observation space.

    Segment boundaries come from the same key-frame detector as RecPo (changes closer than ``gap`` frames
    form one segment; boundaries at the midpoints between groups); a segment's pre/post observations are the
    mean of its first/last ``window`` frames. The feature is ``concat(pre, post)`` (``feature="pair"``, the
    spec's baseline) or the full-observation change ``post - pre`` (``feature="delta"``, a stronger variant
    that ignores the absolute state), Euclidean, ``k = 1``.
    """

    def __init__(
        self,
        views: Sequence[ProcedureView],
        min_persistence: int = 3,
        gap: int = 8,
        window: int = 3,
        feature: str = "pair",
    ):
        if feature not in ("pair", "delta"):
            raise ValueError(f"feature must be 'pair' or 'delta', got {feature!r}")
        self.feature = feature
        self.interpreter = DemoInterpreter(views, min_persistence)
        self.gap = check_int("gap", gap, 1)
        self.window = check_int("window", window, 1)
        self._x: list[np.ndarray] = []
        self._y: list[SkillCall] = []

    def add(self, episode: SegmentedEpisode) -> None:
        for s in episode.segments:
            pre, post = np.atleast_2d(s.pre).mean(0), np.atleast_2d(s.post).mean(0)
            self._x.append(self._feature(pre, post))
            self._y.append(s.call)

    def _feature(self, pre: np.ndarray, post: np.ndarray) -> np.ndarray:
        return np.concatenate([pre, post]) if self.feature == "pair" else post - pre

    def segments(self, demonstration: np.ndarray) -> list[tuple[int, int]]:
        obs = as_observations("demonstration", demonstration, batch=True)
        frames = sorted(f for f, _, _ in self.interpreter.changes(obs))
        groups: list[list[int]] = []
        for f in frames:
            if groups and f - groups[-1][-1] < self.gap:
                groups[-1].append(f)
            else:
                groups.append([f])
        cuts = [0] + [(a[-1] + b[0]) // 2 for a, b in zip(groups, groups[1:])] + [len(obs)]
        return list(zip(cuts[:-1], cuts[1:])) if groups else []

    def plan(self, demonstration: np.ndarray) -> list[SkillCall]:
        if not self._x:
            raise RuntimeError("FullStateSkillRetrieval has no stored segments")
        obs = as_observations("demonstration", demonstration, batch=True)
        X = np.stack(self._x)
        calls = []
        for a, b in self.segments(obs):
            w = min(self.window, max(1, (b - a) // 2))
            q = self._feature(obs[a : a + w].mean(0), obs[b - w : b].mean(0))
            calls.append(self._y[int(np.argmin(((X - q) ** 2).sum(1)))])
        return calls

    def run(self, env, demonstration: np.ndarray) -> EpisodeResult:
        return _timed_replay(env, lambda: self.plan(demonstration))


class OraclePlanner:
    """Upper bound: plans on the true symbolic model from the task's target labels (not the demonstration)."""

    def __init__(self, max_depth: int = 3) -> None:
        self.max_depth = check_int("max_depth", max_depth, 0)

    def run(self, env, target: Sequence[str]) -> EpisodeResult:
        env = getattr(env, "unwrapped", env)
        return _timed_replay(env, lambda: oracle_plan(env.symbolic_state(), target, self.max_depth) or [])


def view_training_data(n: int, noise: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(noisy, clean)`` observations ``(n, 30)`` along random skill trajectories from random states."""
    check_int("n", n, 1)
    check_float("noise", noise, 0.0, 10.0)
    rng = np.random.default_rng([seed, 11])
    env = ExtendedKitchen(noise=0.0)
    clean = []
    while sum(len(c) for c in clean) < n:
        env.reset(seed=int(rng.integers(2**31)), options={"state": random_state(rng)})
        _, _, _, _, info = env.execute(SKILLS[int(rng.integers(len(SKILLS)))])
        clean.append(info["frames"])
    clean_arr = np.concatenate(clean)[:n]
    return clean_arr + noise * rng.standard_normal(clean_arr.shape), clean_arr

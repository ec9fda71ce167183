"""The procedure knowledge base, demonstration interpretation, query resolution and the closed-loop agent.

Knowledge base. A training segment :math:`(o, \\sigma(a_1..a_k), o')` yields, for every view :math:`v` and
every change :math:`(e, b \\to a) \\in \\Delta_v(o, o')`, one local transition relation

.. math::

    R = \\big(v,\\; \\rho(e): \\rho(b) \\to \\rho(a),\\; \\sigma(?_0..?_{k-1}),\\;
    \\{(w, \\rho(x), \\phi_w(o)_x) : \\rho(x) \\text{ mentions a role}\\}\\big),

where :math:`\\rho` replaces every skill argument :math:`a_i` (as a whole name or a ``:``-separated part of one)
by the role :math:`?_i`. Preconditions are the pre-state values, in every view, of the entities that mention a
role; relations never record the task they came from. A relation applies to a goal :math:`(v, e, a)` whose
entity and value unify with its templates; unbound roles take the demonstration's binding.

Resolution. Goals of the compositional query are taken in order; satisfied goals are skipped; otherwise the
shortest chain (iterative deepening, ``<= max_depth`` levels of precondition sub-goals) of relations whose
preconditions hold in the predicted state is appended, provided it never changes an achieved goal that the
rest of the query does not target again. The predicted state is updated with every relation of the same
skill call whose preconditions hold (multi-view effects).

Metric. Ordered subtask completion of a target :math:`(t_1..t_n)` given the event stream: the largest
:math:`j` such that :math:`t_1..t_j` became true in that order (an event of a later target before the
current one stops the count unless a pending subtask concerns the same element; other events are
ignored), divided by :math:`n`.

Shapes
------
- demonstration observations: ``(T, 30)``; current observation ``(30,)``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neurips26.common.checks import check_int
from neurips26.robotics.recpo.kitchen import SKILLS, SkillCall
from neurips26.robotics.recpo.views import Change, ProcedureView, as_observations

StateKey = tuple[str, str]  # (view, entity)


class UnresolvableQueryError(RuntimeError):
    """No chain of knowledge-base relations reaches a goal of the query (``goal`` names it)."""

    def __init__(self, goal: Change, reason: str = "") -> None:
        self.goal = goal
        super().__init__(
            f"goal {goal.view}:{goal.entity} -> {goal.after!r} cannot be reached from the current state with the "
            f"knowledge base{': ' + reason if reason else ''}"
        )


@dataclass(frozen=True, order=True)
class ChangeSignature:
    """A change with role variables: ``entity`` template, ``before`` and ``after`` (literal or role)."""

    entity: str
    before: str
    after: str


@dataclass(frozen=True, order=True)
class TransitionRelation:
    """A local transition relation of one view (see the module docstring).

    ``roles``: ``((role, demonstration binding), ...)`` in skill-argument order;
    ``preconditions``: ``((view, entity template, value), ...)``.
    """

    view: str
    change: ChangeSignature
    skill: str
    roles: tuple[tuple[str, str], ...]
    preconditions: tuple[tuple[str, str, str], ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "view": self.view,
            "change": [self.change.entity, self.change.before, self.change.after],
            "skill": self.skill,
            "roles": [list(r) for r in self.roles],
            "preconditions": [list(p) for p in self.preconditions],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TransitionRelation:
        return cls(
            d["view"],
            ChangeSignature(*d["change"]),
            d["skill"],
            tuple(tuple(r) for r in d["roles"]),
            tuple(tuple(p) for p in d["preconditions"]),
        )

    # ------------------------------------------------------------------ binding
    def unify(self, entity: str, after: Hashable) -> dict[str, str] | None:
        """Role binding that makes the relation produce ``entity -> after`` (``None`` if impossible)."""
        binding: dict[str, str] = {}
        parts_t, parts = self.change.entity.split(":"), str(entity).split(":")
        if len(parts_t) != len(parts):
            return None
        for t, p in zip((*parts_t, self.change.after), (*parts, str(after))):
            if t.startswith("?"):
                if binding.setdefault(t, p) != p:
                    return None
            elif t != p:
                return None
        return {**{r: b for r, b in self.roles if r not in binding}, **binding}

    def bind_call(self, call: SkillCall) -> dict[str, str] | None:
        """Binding from a skill call with the same skill and arity."""
        if call.skill != self.skill or len(call.args) != len(self.roles):
            return None
        used = set(self.change.entity.split(":")) | {self.change.after}
        if any(r not in used and a != default for (r, default), a in zip(self.roles, call.args)):
            return None  # a role the change does not mention keeps the demonstration's binding
        return {r: a for (r, _), a in zip(self.roles, call.args)}

    def call(self, binding: Mapping[str, str]) -> SkillCall:
        return SkillCall(self.skill, tuple(binding[r] for r, _ in self.roles))

    def effect(self, binding: Mapping[str, str]) -> tuple[StateKey, str]:
        return (self.view, _fill(self.change.entity, binding)), _fill(self.change.after, binding)

    def instantiated_preconditions(self, binding: Mapping[str, str]) -> list[tuple[StateKey, str]]:
        return [((w, _fill(x, binding)), _fill(v, binding)) for w, x, v in self.preconditions]


def _fill(template: str, binding: Mapping[str, str]) -> str:
    return ":".join(binding.get(p, p) for p in str(template).split(":"))


def _template(name: Any, roles: Mapping[str, str]) -> str:
    return ":".join(roles.get(p, p) for p in str(name).split(":"))


@dataclass(frozen=True)
class Segment:
    """One executed skill: observation(s) before, the call, observation(s) after (``(30,)`` or ``(k, 30)``)."""

    pre: np.ndarray
    call: SkillCall
    post: np.ndarray


@dataclass(frozen=True)
class SegmentedEpisode:
    """A training demonstration segmented into skill calls."""

    segments: tuple[Segment, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.segments, tuple) or not all(isinstance(s, Segment) for s in self.segments):
            raise TypeError("segments must be a tuple of Segment")


def _encode_all(views: Sequence[ProcedureView], obs: np.ndarray) -> dict[StateKey, Hashable]:
    return {(v.name, e): val for v in views for e, val in v.encode(obs).items()}


def _check_views(views: Any) -> tuple[ProcedureView, ...]:
    views = tuple(views) if isinstance(views, (list, tuple)) else None
    if not views or not all(isinstance(v, ProcedureView) for v in views):
        raise TypeError("views must be a non-empty sequence of ProcedureView")
    names = [v.name for v in views]
    if len(set(names)) != len(names):
        raise ValueError(f"views must have distinct names, got {names}")
    return views


class ProcedureKnowledgeBase:
    """Task-agnostic store of local transition relations, indexed by ``(view, after template)``.

    Parameters
    ----------
    views : sequence of ProcedureView
        The views through which segments are read.
    """

    def __init__(self, views: Sequence[ProcedureView]) -> None:
        self.views = _check_views(views)
        self.support: dict[TransitionRelation, int] = {}

    def __len__(self) -> int:
        return len(self.support)

    @property
    def relations(self) -> list[TransitionRelation]:
        return sorted(self.support)

    def relations_from_segment(self, segment: Segment) -> list[TransitionRelation]:
        """The relations one segment yields (every view, every local change)."""
        if not isinstance(segment, Segment):
            raise TypeError(f"segment must be a Segment, got {type(segment).__name__}")
        if segment.call not in SKILLS:
            raise ValueError(f"segment.call {segment.call} is not a skill of the library")
        pre, post = _encode_all(self.views, segment.pre), _encode_all(self.views, segment.post)
        roles = {a: f"?{i}" for i, a in enumerate(segment.call.args)}
        role_pairs = tuple((f"?{i}", a) for i, a in enumerate(segment.call.args))
        out = []
        for view in self.views:
            before = {e: pre[(view.name, e)] for e in view.entities()}
            after = {e: post[(view.name, e)] for e in view.entities()}
            for ch in sorted(view.diff(before, after)):
                pres = []
                for (w, x), val in pre.items():
                    xt = _template(x, roles)
                    if xt == x or (w, x) == (view.name, ch.entity):
                        continue
                    if val in next(v for v in self.views if v.name == w).transient:
                        continue
                    pres.append((w, xt, _template(val, roles)))
                sig = ChangeSignature(
                    _template(ch.entity, roles), _template(ch.before, roles), _template(ch.after, roles)
                )
                out.append(
                    TransitionRelation(view.name, sig, segment.call.skill, role_pairs, tuple(sorted(pres)))
                )
        return out

    def add_demonstration(self, episode: SegmentedEpisode) -> int:
        """Add every relation of ``episode``; returns how many relations were new (support counts grow)."""
        if not isinstance(episode, SegmentedEpisode):
            raise TypeError(f"episode must be a SegmentedEpisode, got {type(episode).__name__}")
        new = 0
        for seg in episode.segments:
            for rel in self.relations_from_segment(seg):
                new += rel not in self.support
                self.support[rel] = self.support.get(rel, 0) + 1
        return new

    def merge(self, other: ProcedureKnowledgeBase) -> ProcedureKnowledgeBase:
        """Add ``other``'s relations and supports (a KB built from shards equals one built in one pass)."""
        if [v.name for v in other.views] != [v.name for v in self.views]:
            raise ValueError("other must use the same views")
        for rel, n in other.support.items():
            self.support[rel] = self.support.get(rel, 0) + n
        return self

    def query(self, view: str, change: Change) -> list[TransitionRelation]:
        """Relations of ``view`` that can produce ``change.entity -> change.after``, most supported first."""
        if not isinstance(change, Change):
            raise TypeError(f"change must be a Change, got {type(change).__name__}")
        hits = [
            r for r in self.support if r.view == view and r.unify(change.entity, change.after) is not None
        ]
        return sorted(hits, key=lambda r: (-self.support[r], r))

    def relations_for_call(self, call: SkillCall) -> list[TransitionRelation]:
        return sorted(r for r in self.support if r.bind_call(call) is not None)

    def to_json(self) -> str:
        data = {
            "views": [v.name for v in self.views],
            "relations": [{**r.to_dict(), "support": n} for r, n in sorted(self.support.items())],
        }
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, s: str, views: Sequence[ProcedureView]) -> ProcedureKnowledgeBase:
        data = json.loads(s)
        kb = cls(views)
        if data.get("views") != [v.name for v in kb.views]:
            raise ValueError(
                f"views {[v.name for v in kb.views]} do not match the stored views {data.get('views')}"
            )
        for d in data["relations"]:
            kb.support[TransitionRelation.from_dict(d)] = int(d["support"])
        return kb


@dataclass(frozen=True)
class CompositionalQuery:
    """Ordered view-level goals read from a demonstration (``frames``: where each goal was observed)."""

    goals: tuple[Change, ...]
    frames: tuple[int, ...] = ()

    def labels(self, view: str = "object") -> list[str]:
        return [f"{g.entity}={g.after}" for g in self.goals if g.view == view]


class DemoInterpreter:
    """Reads a demonstration (observations only) into a :class:`CompositionalQuery`.

    Every frame is encoded in every view; a value counts once it persists ``min_persistence`` frames
    (debouncing noise), transient values never count; every switch between persistent values is a goal.
    """

    def __init__(self, views: Sequence[ProcedureView], min_persistence: int = 3) -> None:
        self.views = _check_views(views)
        self.min_persistence = check_int("min_persistence", min_persistence, 1)

    def stable_runs(self, values: np.ndarray, transient) -> list[tuple[int, Hashable]]:
        """``(start frame, value)`` of every run of one value lasting ``>= min_persistence`` frames."""
        runs, start = [], 0
        for t in range(1, len(values) + 1):
            if t == len(values) or values[t] != values[start]:
                if t - start >= self.min_persistence and values[start] not in transient:
                    runs.append((start, values[start]))
                start = t
        return runs

    def changes(self, observations: Any) -> list[tuple[int, int, Change]]:
        """``(frame, view order, change)`` of every observed persistent switch."""
        obs = as_observations("observations", observations, batch=True)
        found = []
        for order, view in enumerate(self.views):
            for e, values in view.encode_batch(obs).items():
                current = None
                for start, value in self.stable_runs(values, view.transient):
                    if current is not None and value != current:
                        found.append((start, order, Change(view.name, e, current, value)))
                    current = value
        return sorted(found, key=lambda x: (x[0], x[1], x[2].entity))

    def interpret(self, observations: Any) -> CompositionalQuery:
        found = self.changes(observations)
        return CompositionalQuery(tuple(c for _, _, c in found), tuple(f for f, _, _ in found))


@dataclass(frozen=True)
class PlanStep:
    """One resolved skill call, the goal it serves and the predicted state after it."""

    goal_index: int
    call: SkillCall
    predicted: Mapping[StateKey, Hashable]


class RecPoResolver:
    """Resolve a :class:`CompositionalQuery` against a :class:`ProcedureKnowledgeBase` into skill calls.

    Parameters
    ----------
    kb : ProcedureKnowledgeBase
    views : sequence of ProcedureView
        Used to encode the current observation (may be learned views with the KB's view names).
    max_depth : int
        Levels of precondition sub-goals explored (iterative deepening, so the shortest chain wins).
    """

    def __init__(
        self, kb: ProcedureKnowledgeBase, views: Sequence[ProcedureView], max_depth: int = 3
    ) -> None:
        if not isinstance(kb, ProcedureKnowledgeBase):
            raise TypeError(f"kb must be a ProcedureKnowledgeBase, got {type(kb).__name__}")
        self.kb = kb
        self.views = _check_views(views)
        if sorted(v.name for v in self.views) != sorted(v.name for v in kb.views):
            raise ValueError("views must have the same names as the knowledge base's views")
        self.max_depth = check_int("max_depth", max_depth, 0, 10)

    def encode(self, obs: Any) -> dict[StateKey, Hashable]:
        return _encode_all(self.views, as_observations("current_obs", obs, batch=False))

    def predict(self, call: SkillCall, state: Mapping[StateKey, Hashable]) -> dict[StateKey, Hashable]:
        """State after ``call``: every relation of the call whose preconditions hold applies its change."""
        new = dict(state)
        for rel in self.kb.relations_for_call(call):
            binding = rel.bind_call(call)
            if all(state.get(k) == v for k, v in rel.instantiated_preconditions(binding)):
                key, value = rel.effect(binding)
                new[key] = value
        return new

    def _achieve(self, key: StateKey, value, state, keep, depth):
        if state.get(key) == value:
            return [], state
        for rel in self.kb.query(key[0], Change(key[0], key[1], None, value)):
            binding = rel.unify(key[1], value)
            call = rel.call(binding)
            if call not in SKILLS:
                continue
            pres = rel.instantiated_preconditions(binding)
            s, calls, ok = state, [], True
            for pk, pv in pres:
                if s.get(pk) == pv:
                    continue
                sub = self._achieve(pk, pv, s, keep, depth - 1) if depth > 0 else None
                if sub is None:
                    ok = False
                    break
                calls, s = calls + sub[0], sub[1]
            if not ok or any(s.get(pk) != pv for pk, pv in pres):
                continue
            s2 = self.predict(call, s)
            s2[key] = value
            if any(s2.get(k) != v for k, v in keep.items() if k != key):
                continue
            return [*calls, call], s2
        return None

    def resolve_steps(self, query: CompositionalQuery, current_obs: Any, start: int = 0) -> list[PlanStep]:
        """Plan for ``query.goals[start:]`` from ``current_obs``; goals before ``start`` count as achieved."""
        if not isinstance(query, CompositionalQuery):
            raise TypeError(f"query must be a CompositionalQuery, got {type(query).__name__}")
        state = self.encode(current_obs)
        goals = query.goals
        for g in goals:
            if g.key not in state:
                raise ValueError(
                    f"query goal {g} names an entity unknown to the views {[v.name for v in self.views]}"
                )
        steps: list[PlanStep] = []
        for i in range(start, len(goals)):
            g = goals[i]
            later = {h.key for h in goals[i + 1 :]}
            keep = {h.key: h.after for h in goals[:i] if h.key not in later and state.get(h.key) == h.after}
            found = None
            for depth in range(self.max_depth + 1):
                found = self._achieve(g.key, g.after, state, keep, depth)
                if found is not None:
                    break
            if found is None:
                raise UnresolvableQueryError(g, f"no chain of <= {self.max_depth + 1} relations")
            calls, state_after = found
            s = state
            for call in calls:
                s = self.predict(call, s)
                steps.append(PlanStep(i, call, s))
            if calls:
                steps[-1] = PlanStep(i, calls[-1], state_after)
            state = state_after
        return steps

    def resolve(self, query: CompositionalQuery, current_obs: Any) -> list[SkillCall]:
        """The skill sequence for ``query`` from ``current_obs``; raises :class:`UnresolvableQueryError`."""
        return [s.call for s in self.resolve_steps(query, current_obs)]


@dataclass
class EpisodeResult:
    """What an agent did on one task: executed calls, events (labels that became true), initial labels."""

    calls: list[SkillCall]
    events: list[str]
    initial: frozenset[str]
    planning_time_s: float = 0.0
    replans: int = 0
    error: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def completion(self, target: Sequence[str]) -> float:
        return ordered_subtask_completion(self.events, target, initial=self.initial)


class RecPoAgent:
    """Closed-loop RecPo: interpret the demonstration, resolve, execute, and re-resolve the rest of the query
    when an executed call's observed view changes differ from the predicted ones (at most ``max_replans``)."""

    def __init__(
        self,
        kb: ProcedureKnowledgeBase,
        views: Sequence[ProcedureView],
        min_persistence: int = 3,
        max_depth: int = 3,
        max_replans: int = 3,
    ) -> None:
        self.interpreter = DemoInterpreter(views, min_persistence)
        self.resolver = RecPoResolver(kb, views, max_depth)
        self.max_replans = check_int("max_replans", max_replans, 0)

    def run(self, env, demonstration: Any, max_calls: int = 40) -> EpisodeResult:
        env = getattr(env, "unwrapped", env)
        obs = env.observe()
        result = EpisodeResult([], [], env.labels())
        t0 = time.perf_counter()
        query = self.interpreter.interpret(demonstration)
        result.extra["query"] = [f"{g.view}:{g.entity}={g.after}" for g in query.goals]
        try:
            steps = self.resolver.resolve_steps(query, obs)
        except UnresolvableQueryError as err:
            result.planning_time_s, result.error = time.perf_counter() - t0, str(err)
            return result
        result.planning_time_s = time.perf_counter() - t0
        previous = self.resolver.encode(obs)
        while steps and len(result.calls) < max_calls:
            step = steps.pop(0)
            obs, _, _, _, info = env.execute(step.call)
            result.calls.append(step.call)
            result.events += info["events"]
            observed = self.resolver.encode(obs)
            touched = [k for k, v in step.predicted.items() if previous.get(k) != v and observed.get(k) != v]
            previous = step.predicted
            if (not info["success"] or touched) and result.replans < self.max_replans:
                result.replans += 1
                t0 = time.perf_counter()
                previous = observed
                try:
                    steps = self.resolver.resolve_steps(query, obs, start=step.goal_index)
                except UnresolvableQueryError as err:
                    result.error = str(err)
                    steps = []
                result.planning_time_s += time.perf_counter() - t0
        return result


def ordered_subtask_completion(
    achieved: Sequence[str], target: Sequence[str], initial: Sequence[str] | frozenset = ()
) -> float:
    """Fraction of ``target`` subtasks achieved in order (see the module docstring).

    An event of a later subtask ``t_j`` stops the count unless a pending subtask ``t_p..t_{j-1}`` concerns
    the same element (the event is then necessarily overridden before ``t_j``'s turn, e.g. an enabling
    ``close`` before a targeted ``open`` and ``close``).

    Parameters
    ----------
    achieved : sequence of str
        Events in time order: labels that became true (``"element=value"`` or any string).
    target : sequence of str
        The task's subtasks in the required order (non-empty).
    initial : collection of str
        Labels true before the first event; a target that holds when its turn comes counts. An event
        ``"e=v"`` makes every ``"e=w"`` (``w != v``) false and holds until then; a plain string (no ``=``)
        is a momentary event.
    """
    for name, seq in (("achieved", achieved), ("target", target), ("initial", initial)):
        if isinstance(seq, str) or not all(isinstance(x, str) for x in seq):
            raise TypeError(f"{name} must be a sequence of label strings")
    target = list(target)
    if not target:
        raise ValueError("target must not be empty")
    holds = set(initial)
    p = 0

    def advance(p):
        while p < len(target) and target[p] in holds:
            p += 1
        return p

    p = advance(p)
    for e in achieved:
        element = e.partition("=")[0] if "=" in e else None
        if element is not None:  # a state label persists until its element changes; a plain event does not
            holds = {h for h in holds if not (h.partition("=")[0] == element and h != e)}
            holds.add(e)
        if p < len(target) and e == target[p]:
            p = advance(p + 1)
        elif e in target[p + 1 :]:
            j = target.index(e, p + 1)
            if not any(t.partition("=")[0] == element for t in target[p:j]) or element is None:
                break  # a later subtask happened first (and will not be overridden before its turn)
    return p / len(target)


def labels_of(query: CompositionalQuery) -> list[str]:
    """Object-state and kettle-place goals of a query as subtask labels (used by the retrieval baseline)."""
    out = []
    for g in query.goals:
        if g.view == "object" or (g.view == "spatial" and g.entity == "kettle"):
            out.append(f"{g.entity}={g.after}")
    return out

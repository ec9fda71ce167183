"""``ExtendedKitchen``: a symbolic Franka Kitchen with reversible operations, three kettle places and preconditions.

The element layout (which entries of the 30-D joint-position vector belong to which element), the goal
joint values and the completion threshold are imported from gymnasium-robotics' ``FrankaKitchen-v1``
(:mod:`gymnasium_robotics.envs.franka_kitchen.kitchen_env`), never retyped, so that the symbolic goal
predicates are those of the MuJoCo environment:

.. math::

    \\text{done}(e, q) = \\lVert q_{I_e} - g_e \\rVert_2 < \\text{BONUS\\_THRESH} \\;(= 0.3).

The extension (inferred from the RecPo abstract, not from a public benchmark): every articulated element
can also be turned off / closed again (rest value 0), the kettle has three places (the bottom-left burner
where FrankaKitchen starts it, the top-left burner that is FrankaKitchen's kettle goal, and the bottom-right
burner), and two fixed physical preconditions hold: the kettle cannot be moved onto the top-left burner
while the slide cabinet is open (its door blocks the path), and the hinge cabinet cannot be operated while
the microwave door is open (the door blocks the arm). Skills are scripted: each moves the element's joints
smoothly to the target over 10-20 frames, then holds still for a few frames; observations are the clean
joint vector plus Gaussian noise.

Shapes
------
- observation: ``(30,)`` float64 in FrankaKitchen's ``qpos`` layout (9 robot joints, 21 object joints).
- ``info["frames"]`` of a step: ``(k, 30)``, the noisy frames the skill produced (motion then hold).
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from neurips26.common.checks import check_float, check_int
from neurips26.common.optional import require

ENV_ID = "neurips26/ExtendedKitchen-v0"
OBS_DIM = 30
ROBOT_DIMS = 9
ELEMENTS = (
    "bottom burner",
    "top burner",
    "light switch",
    "slide cabinet",
    "hinge cabinet",
    "microwave",
    "kettle",
)
SWITCHES = ("bottom burner", "top burner", "light switch")  # values off / on
DOORS = ("slide cabinet", "hinge cabinet", "microwave")  # values closed / open
KETTLE_PLACES = ("bottom_left", "top_left", "bottom_right")
VALUES: dict[str, tuple[str, ...]] = {
    **{e: ("off", "on") for e in SWITCHES},
    **{e: ("closed", "open") for e in DOORS},
    "kettle": KETTLE_PLACES,
}
GOAL_VALUE = {**{e: "on" for e in SWITCHES}, **{e: "open" for e in DOORS}, "kettle": "top_left"}
TRANSIENT = "mid"  # an articulated element between its anchors, or the kettle in transit
# kettle place offsets (x, y, z) from FrankaKitchen's kettle goal (the top-left burner); inferred geometry
_PLACE_OFFSETS = {
    "top_left": (0.0, 0.0, 0.0),
    "bottom_left": (-0.04, -0.40, 0.0),
    "bottom_right": (0.40, -0.40, 0.0),
}


@functools.cache
def franka_constants() -> tuple[float, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``(BONUS_THRESH, OBS_ELEMENT_GOALS, OBS_ELEMENT_INDICES)`` imported from gymnasium-robotics."""
    mod = require("gymnasium_robotics.envs.franka_kitchen.kitchen_env", "robotics")
    goals = {k: np.asarray(v, dtype=np.float64) for k, v in mod.OBS_ELEMENT_GOALS.items()}
    idx = {k: np.asarray(v, dtype=np.int64) for k, v in mod.OBS_ELEMENT_INDICES.items()}
    missing = [e for e in ELEMENTS if e not in goals or e not in idx]
    if missing:  # pragma: no cover - would mean an incompatible gymnasium-robotics
        raise ImportError(f"gymnasium-robotics FrankaKitchen lacks elements {missing}")
    return float(mod.BONUS_THRESH), goals, idx


def element_indices(element: str) -> np.ndarray:
    """Indices of ``element``'s joints in the 30-D observation (FrankaKitchen's ``OBS_ELEMENT_INDICES``)."""
    _check_element(element)
    return franka_constants()[2][element]


def anchor(element: str, value: str) -> np.ndarray:
    """Joint values of ``element`` at symbolic ``value`` (goal values from FrankaKitchen, rest = 0)."""
    _check_element(element)
    if value not in VALUES[element]:
        raise ValueError(f"value of {element!r} must be one of {VALUES[element]}, got {value!r}")
    return _anchors()[element, value].copy()


@functools.cache
def _anchors() -> dict[tuple[str, str], np.ndarray]:
    goals = franka_constants()[1]
    out = {}
    for element in ELEMENTS:
        for value in VALUES[element]:
            if element == "kettle":
                a = goals["kettle"].copy()
                a[:3] += np.asarray(_PLACE_OFFSETS[value])
            else:
                a = goals[element].copy() if value == GOAL_VALUE[element] else np.zeros_like(goals[element])
            a.flags.writeable = False
            out[element, value] = a
    return out


def _check_element(element: Any) -> str:
    if element not in ELEMENTS:
        raise ValueError(f"element must be one of {list(ELEMENTS)}, got {element!r}")
    return element


def task_completed(qpos: np.ndarray, task: str) -> bool:
    """FrankaKitchen's completion predicate for ``task`` (an element name) on a 30-D joint vector."""
    thresh, goals, idx = franka_constants()
    _check_element(task)
    return bool(np.linalg.norm(np.asarray(qpos)[idx[task]] - goals[task]) < thresh)


def element_value(qpos: np.ndarray, element: str) -> str:
    """Symbolic value of ``element``: its goal value iff FrankaKitchen's predicate holds, else the other anchor
    within ``BONUS_THRESH`` (nearest first), else ``"mid"``."""
    thresh, _, idx = franka_constants()
    q = np.asarray(qpos)[idx[element]]
    if element != "kettle" and task_completed(qpos, element):
        return GOAL_VALUE[element]
    dists = sorted((float(np.linalg.norm(q - anchor(element, v))), v) for v in VALUES[element])
    return dists[0][1] if dists[0][0] < thresh else TRANSIENT


def label(element: str, value: str) -> str:
    """The subtask label ``"element=value"``."""
    return f"{element}={value}"


def parse_label(text: str) -> tuple[str, str]:
    """``"microwave=open"`` -> ``("microwave", "open")``; a bare FrankaKitchen task name means its goal value."""
    if not isinstance(text, str):
        raise TypeError(f"task label must be a string, got {type(text).__name__}")
    element, _, value = text.partition("=")
    _check_element(element)
    value = value or GOAL_VALUE[element]
    if value not in VALUES[element]:
        raise ValueError(f"value of {element!r} in label {text!r} must be one of {VALUES[element]}")
    return element, value


@dataclass(frozen=True)
class SkillCall:
    """A parameterised skill: ``skill`` (verb) applied to ``args`` (element, and the place for ``move``)."""

    skill: str
    args: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.skill}({', '.join(self.args)})"


def _skill_library() -> tuple[SkillCall, ...]:
    out = []
    for e in SWITCHES:
        out += [SkillCall("turn_on", (e,)), SkillCall("turn_off", (e,))]
    for e in DOORS:
        out += [SkillCall("open", (e,)), SkillCall("close", (e,))]
    out += [SkillCall("move", ("kettle", p)) for p in KETTLE_PLACES]
    return tuple(out)


SKILLS = _skill_library()
_TARGET = {"turn_on": "on", "turn_off": "off", "open": "open", "close": "closed"}


def skill_target(call: SkillCall) -> tuple[str, str]:
    """``(element, value)`` that ``call`` drives its element to; raises for an unknown skill."""
    if call not in SKILLS:
        raise ValueError(f"unknown skill call {call}; the library has {[str(s) for s in SKILLS]}")
    if call.skill == "move":
        return call.args[0], call.args[1]
    return call.args[0], _TARGET[call.skill]


def precondition_unmet(state: Mapping[str, str], call: SkillCall) -> str | None:
    """The physical precondition of ``call`` that ``state`` violates (a sentence), or ``None``."""
    element, value = skill_target(call)
    if element == "kettle" and value == "top_left" and state["slide cabinet"] != "closed":
        return "the open slide cabinet door blocks the path to the top-left burner"
    if element == "hinge cabinet" and state["microwave"] != "closed":
        return "the open microwave door blocks the arm's path to the hinge cabinet"
    return None


def transition(state: Mapping[str, str], call: SkillCall) -> tuple[dict[str, str], bool]:
    """The true symbolic model: ``(next_state, success)``; an unmet precondition leaves the state unchanged."""
    new = dict(state)
    if precondition_unmet(state, call) is not None:
        return new, False
    element, value = skill_target(call)
    new[element] = value
    return new, True


def state_labels(state: Mapping[str, str]) -> frozenset[str]:
    return frozenset(label(e, v) for e, v in state.items())


CANONICAL_STATE = {**{e: "off" for e in SWITCHES}, **{e: "closed" for e in DOORS}, "kettle": "bottom_left"}


def check_state(name: str, state: Any) -> dict[str, str]:
    """Validate a symbolic state (every element mapped to one of its values)."""
    if not isinstance(state, Mapping):
        raise TypeError(f"{name} must be a mapping element -> value, got {type(state).__name__}")
    unknown = [k for k in state if k not in ELEMENTS]
    if unknown:
        raise ValueError(f"{name} has unknown elements {unknown}; elements are {list(ELEMENTS)}")
    out = dict(CANONICAL_STATE)
    for e, v in state.items():
        if v not in VALUES[e]:
            raise ValueError(f"{name}[{e!r}] must be one of {VALUES[e]}, got {v!r}")
        out[e] = v
    return out


def state_to_qpos(state: Mapping[str, str]) -> np.ndarray:
    """The clean 30-D joint vector of a symbolic state (robot joints at 0)."""
    q = np.zeros(OBS_DIM)
    for e in ELEMENTS:
        q[element_indices(e)] = anchor(e, state[e])
    return q


def oracle_plan(
    state: Mapping[str, str], targets: Sequence[str], max_depth: int = 3
) -> list[SkillCall] | None:
    """Oracle planner on the true symbolic model: achieve ``targets`` (labels) in order, each by the shortest
    skill sequence (breadth-first, ``<= max_depth`` skills) that keeps earlier targets whose element is not
    targeted again; ``None`` when some target cannot be reached."""
    state = check_state("state", state)
    if isinstance(targets, str):
        raise TypeError(
            f"targets must be a sequence of labels like ['microwave=open'], got the string {targets!r}"
        )
    goals = [parse_label(t) for t in targets]
    plan: list[SkillCall] = []
    for i, (element, value) in enumerate(goals):
        later = {e for e, _ in goals[i + 1 :]}
        keep = {e: v for e, v in goals[:i] if e not in later and e != element}
        seq = _bfs(state, element, value, keep, max_depth)
        if seq is None:
            return None
        for call in seq:
            state, _ = transition(state, call)
        plan += seq
    return plan


def _bfs(state, element, value, keep, max_depth):
    start = tuple(sorted(state.items()))
    if state[element] == value:
        return []
    frontier = deque([(start, [])])
    seen = {start}
    while frontier:
        key, seq = frontier.popleft()
        if len(seq) >= max_depth:
            continue
        for call in SKILLS:
            new, ok = transition(dict(key), call)
            if not ok or any(new[e] != v for e, v in keep.items()):
                continue
            if new[element] == value:
                return [*seq, call]
            nkey = tuple(sorted(new.items()))
            if nkey not in seen:
                seen.add(nkey)
                frontier.append((nkey, [*seq, call]))
    return None


class ExtendedKitchen(gym.Env):
    """Symbolic extended Franka Kitchen with the Gymnasium API (registered as ``neurips26/ExtendedKitchen-v0``).

    Parameters
    ----------
    tasks_to_complete : sequence of str, optional
        Subtask labels ``"element=value"`` (a bare FrankaKitchen name means its goal value); the reward of a
        step is the number of them completed in that step, as in FrankaKitchen. Default: FrankaKitchen's seven.
    noise : float
        Standard deviation of the Gaussian observation noise (default 0.02).
    max_episode_steps : int
        Skill calls before truncation.
    min_frames, max_frames, settle_frames : int
        A skill moves over ``U{min_frames..max_frames}`` frames, then holds for ``settle_frames`` frames.

    The action space is ``Discrete(len(SKILLS))`` (one action = one skill call, :data:`SKILLS`);
    :meth:`execute` takes a :class:`SkillCall`. ``reset(options={"state": {...}})`` sets the symbolic state.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        tasks_to_complete: Sequence[str] | None = None,
        noise: float = 0.02,
        max_episode_steps: int = 40,
        min_frames: int = 10,
        max_frames: int = 20,
        settle_frames: int = 4,
        terminate_on_tasks_completed: bool = True,
    ) -> None:
        franka_constants()
        tasks = list(ELEMENTS) if tasks_to_complete is None else list(tasks_to_complete)
        self.tasks = tuple(label(*parse_label(t)) for t in tasks)
        self.noise = check_float("noise", noise, 0.0, 10.0)
        self.max_episode_steps = check_int("max_episode_steps", max_episode_steps, 1)
        self.min_frames = check_int("min_frames", min_frames, 1)
        self.max_frames = check_int("max_frames", max_frames, min_frames)
        self.settle_frames = check_int("settle_frames", settle_frames, 1)
        self.terminate_on_tasks_completed = bool(terminate_on_tasks_completed)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(OBS_DIM,), dtype=np.float64)
        self.action_space = gym.spaces.Discrete(len(SKILLS))
        self.state = dict(CANONICAL_STATE)
        self._remaining: set[str] = set(self.tasks)
        self._steps = 0
        self._rng = np.random.default_rng(0)

    # ------------------------------------------------------------------ state
    @property
    def qpos(self) -> np.ndarray:
        """Clean joint vector of the current state, shape ``(30,)``."""
        return state_to_qpos(self.state)

    def symbolic_state(self) -> dict[str, str]:
        return dict(self.state)

    def labels(self) -> frozenset[str]:
        """Labels ``"element=value"`` that hold now."""
        return state_labels(self.state)

    def observe(self) -> np.ndarray:
        """A fresh noisy observation of the current state (no time passes)."""
        return self._noisy(self.qpos[None])[0]

    def _noisy(self, frames: np.ndarray) -> np.ndarray:
        return frames + self.noise * self._rng.standard_normal(frames.shape)

    def _info(self) -> dict[str, Any]:
        done = [t for t in self.tasks if t in self.labels()]
        return {
            "tasks_to_complete": sorted(self._remaining),
            "completed_now": done,
            "state": self.symbolic_state(),
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        options = options or {}
        self.state = check_state("options['state']", options.get("state", CANONICAL_STATE))
        self._remaining = set(self.tasks)
        self._steps = 0
        return self.observe(), {**self._info(), "events": [], "frames": np.zeros((0, OBS_DIM))}

    # ------------------------------------------------------------------ skills
    def _frames(self, before: np.ndarray, after: np.ndarray, kettle: bool) -> np.ndarray:
        n = int(self._rng.integers(self.min_frames, self.max_frames + 1))
        alpha = (1 - np.cos(np.pi * np.arange(1, n + 1) / n)) / 2
        frames = before[None] + alpha[:, None] * (after - before)[None]
        if kettle:  # lift over the counter while carrying
            frames[:, element_indices("kettle")[2]] += 0.15 * np.sin(np.pi * alpha)
        frames = np.concatenate([frames, np.repeat(after[None], self.settle_frames, 0)])
        return self._noisy(frames)

    def execute(self, call: SkillCall):
        """Run one skill call; returns ``(obs, reward, terminated, truncated, info)`` like :meth:`step`."""
        if not isinstance(call, SkillCall):
            raise TypeError(f"call must be a SkillCall, got {type(call).__name__}")
        if call not in SKILLS:
            raise ValueError(
                f"call must be one of the library's skills {[str(s) for s in SKILLS]}, got {call}"
            )
        return self.step(SKILLS.index(call))

    def step(self, action):
        if isinstance(action, (bool, np.bool_)) or not isinstance(action, (int, np.integer)):
            raise TypeError(f"action must be an int in [0, {len(SKILLS)}), got {type(action).__name__}")
        if not 0 <= int(action) < len(SKILLS):
            raise ValueError(f"action must lie in [0, {len(SKILLS)}), got {action}")
        call = SKILLS[int(action)]
        before_labels = self.labels()
        before_q = self.qpos
        reason = precondition_unmet(self.state, call)
        self.state, success = transition(self.state, call)
        after_q = self.qpos
        if success:
            frames = self._frames(before_q, after_q, kettle=call.skill == "move")
        else:
            frames = self._noisy(np.repeat(before_q[None], self.settle_frames, 0))
        events = sorted(self.labels() - before_labels)
        completed = [t for t in sorted(self._remaining) if t in self.labels()]
        self._remaining -= set(completed)
        self._steps += 1
        terminated = self.terminate_on_tasks_completed and not self._remaining
        truncated = self._steps >= self.max_episode_steps
        info = {
            **self._info(),
            "skill": str(call),
            "success": success,
            "failure": reason or "",
            "events": events,
            "step_task_completions": completed,
            "frames": frames,
        }
        return frames[-1].copy(), float(len(completed)), bool(terminated), bool(truncated), info


def register_env() -> str:
    """Register :class:`ExtendedKitchen` with Gymnasium under :data:`ENV_ID` (idempotent); returns the id."""
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point="neurips26.robotics.recpo.kitchen:ExtendedKitchen")
    return ENV_ID


def random_state(rng: np.random.Generator) -> dict[str, str]:
    """A uniformly random symbolic state (every combination is physically reachable)."""
    return {e: VALUES[e][int(rng.integers(len(VALUES[e])))] for e in ELEMENTS}

"""Text environments for multi-turn agents: the :class:`TextEnv` protocol, trajectories and KeyDoorGrid.

See :mod:`neurips26.common.agents` for the overview. KeyDoorGrid is registered with Gymnasium as
``neurips26/KeyDoorGrid-v0`` on import.

Shapes
------
No tensors: observations are strings, layouts are :class:`GridLayout` records.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

try:
    import gymnasium
    from gymnasium import spaces
except ImportError as _err:  # pragma: no cover - gymnasium is part of the envs extra
    raise ImportError("neurips26.common.agents needs gymnasium (pip install 'neurips26[envs]')") from _err

from neurips26.common.checks import check_choice, check_int

# ----------------------------------------------------------------------------------------------
# Trajectories and the environment protocol
# ----------------------------------------------------------------------------------------------


def to_hashable(obs: Any) -> Hashable:
    """Canonical hashable form of an observation: lists/tuples/arrays -> nested tuples, dicts ->
    sorted item tuples, sets -> frozensets; strings and numbers pass through.

    Raises ``TypeError`` for objects that cannot be made hashable.
    """
    if isinstance(obs, (str, bytes, int, float, bool)) or obs is None:
        return obs
    if isinstance(obs, np.ndarray):
        return to_hashable(obs.tolist())
    if isinstance(obs, torch.Tensor):
        return to_hashable(obs.tolist())
    if isinstance(obs, (list, tuple)):
        return tuple(to_hashable(x) for x in obs)
    if isinstance(obs, dict):
        return tuple(sorted((to_hashable(k), to_hashable(v)) for k, v in obs.items()))
    if isinstance(obs, (set, frozenset)):
        return frozenset(to_hashable(x) for x in obs)
    try:
        hash(obs)
    except TypeError as err:
        raise TypeError(
            f"observation of type {type(obs).__name__} is not hashable; pass a key_fn that maps it to a "
            "hashable canonical state"
        ) from err
    return obs


@dataclass
class Trajectory:
    """One multi-turn episode for RewardFlow-style credit assignment.

    Attributes
    ----------
    group_id : hashable
        The task (prompt / layout / game) the episode belongs to; episodes of one task form a group.
    observations : list
        Anchor observations ``s_0 .. s_T`` (canonical environment state, ``T + 1`` entries).
    actions : list of str
        ``a_0 .. a_{T-1}``.
    rewards : list of float
        ``rho_t``: the reward received on arriving in ``s_{t+1}``.
    """

    group_id: Hashable
    observations: list[Any]
    actions: list[str]
    rewards: list[float]

    def __post_init__(self) -> None:
        try:
            hash(self.group_id)
        except TypeError as err:
            raise TypeError(f"group_id must be hashable, got {type(self.group_id).__name__}") from err
        self.observations, self.actions, self.rewards = (
            list(self.observations),
            list(self.actions),
            [float(r) for r in self.rewards],
        )
        if len(self.observations) != len(self.actions) + 1:
            raise ValueError(
                f"trajectory lengths disagree: len(observations) = {len(self.observations)} must equal "
                f"len(actions) + 1 = {len(self.actions) + 1}"
            )
        if len(self.rewards) != len(self.actions):
            raise ValueError(
                f"trajectory lengths disagree: len(rewards) = {len(self.rewards)} must equal "
                f"len(actions) = {len(self.actions)}"
            )
        if any(not math.isfinite(r) for r in self.rewards):
            raise ValueError("trajectory rewards must be finite")

    def __len__(self) -> int:
        return len(self.actions)

    @property
    def episode_return(self) -> float:
        return float(sum(self.rewards))


@runtime_checkable
class TextEnv(Protocol):
    """Gymnasium-style text environment (see module docstring for the ``info`` keys)."""

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]: ...

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]: ...


# ----------------------------------------------------------------------------------------------
# KeyDoorGrid
# ----------------------------------------------------------------------------------------------

ACTIONS = ("up", "down", "left", "right", "pick")
#: Multi-token phrasing of the actions (responses of 2-3 tokens, used by AEM's check).
PHRASES = {"up": "go north", "down": "go south", "left": "go west", "right": "go east", "pick": "pick up key"}
_MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
_COMPASS = {"up": "N", "down": "S", "left": "W", "right": "E"}
SUCCESS_REWARD = 10.0


@dataclass(frozen=True)
class GridLayout:
    """A KeyDoorGrid layout: ``size x size`` cells, wall cells, start, key and door positions."""

    size: int
    walls: frozenset
    start: tuple[int, int]
    key: tuple[int, int]
    door: tuple[int, int]

    def free(self, cell: tuple[int, int]) -> bool:
        r, c = cell
        return 0 <= r < self.size and 0 <= c < self.size and cell not in self.walls

    def shortest_solution(self) -> int | None:
        """Fewest actions (moves + ``pick``) from start to an opened door, by BFS; None if unsolvable."""
        a = _bfs(self, self.start, self.key)
        b = _bfs(self, self.key, self.door)
        return None if a is None or b is None else a + 1 + b


def _bfs(layout: GridLayout, src, dst) -> int | None:
    seen, queue = {src}, deque([(src, 0)])
    while queue:
        cell, d = queue.popleft()
        if cell == dst:
            return d
        for dr, dc in _MOVES.values():
            nxt = (cell[0] + dr, cell[1] + dc)
            if layout.free(nxt) and nxt not in seen:
                seen.add(nxt)
                queue.append((nxt, d + 1))
    return None


def keydoor_layouts(
    n: int,
    seed: int,
    *,
    size: int = 5,
    horizon: int = 12,
    min_solution: int = 4,
    walls: tuple[int, int] = (2, 6),
) -> list[GridLayout]:
    """``n`` distinct seeded layouts, each solvable by BFS in ``min_solution..horizon`` actions."""
    check_int("n", n, low=1)
    check_int("seed", seed, low=0)
    check_int("size", size, low=3)
    check_int("horizon", horizon, low=2)
    rng = np.random.default_rng(seed)
    cells = [(r, c) for r in range(size) for c in range(size)]
    out: list[GridLayout] = []
    seen: set = set()
    for _ in range(1000 * n):
        k = int(rng.integers(walls[0], walls[1] + 1))
        picks = rng.choice(len(cells), size=k + 3, replace=False)
        chosen = [cells[i] for i in picks]
        layout = GridLayout(size, frozenset(chosen[3:]), chosen[0], chosen[1], chosen[2])
        sol = layout.shortest_solution()
        if sol is None or not (min_solution <= sol <= horizon) or layout in seen:
            continue
        seen.add(layout)
        out.append(layout)
        if len(out) == n:
            return out
    raise RuntimeError(f"could not generate {n} solvable layouts (size {size}, horizon {horizon})")


def keydoor_splits(n_train: int = 64, n_test: int = 64, seed: int = 0, **kwargs: Any):
    """Disjoint training and held-out layout lists generated from one seed."""
    layouts = keydoor_layouts(n_train + n_test, seed, **kwargs)
    return layouts[:n_train], layouts[n_train:]


class KeyDoorGrid(gymnasium.Env):
    """Text grid world: pick up the key, then reach the door (reward 10), within ``horizon`` steps.

    Observation (= anchor state): ``"pos r c key 0 | key kr kc door dr dc | here none | walls: N E"``
    (``key 1`` and no key position once the key is held; ``here key`` on the key cell; ``walls:`` lists blocked directions, boundary
    included, or ``none``). Actions: ``up``, ``down``, ``left``, ``right``, ``pick`` (or their
    phrases ``go north`` ... ``pick up key`` with ``phrasing="phrase"``; ints index :data:`ACTIONS`).
    Blocked moves and ``pick`` off the key leave the state unchanged; an unknown action raises
    ``ValueError``. Admissible commands: unblocked moves, and ``pick`` on the key cell.

    Parameters
    ----------
    layouts : sequence of GridLayout, optional
        Defaults to 64 layouts from :func:`keydoor_layouts` with seed 0.
    horizon : int
        Episode length limit (truncation).
    phrasing : {"word", "phrase"}
    """

    metadata = {"render_modes": []}

    def __init__(
        self, layouts: Sequence[GridLayout] | None = None, horizon: int = 12, phrasing: str = "word"
    ):
        check_int("horizon", horizon, low=1)
        check_choice("phrasing", phrasing, ("word", "phrase"))
        self.layouts = list(layouts) if layouts is not None else keydoor_layouts(64, 0, horizon=horizon)
        if not self.layouts or not all(isinstance(x, GridLayout) for x in self.layouts):
            raise TypeError("layouts must be a non-empty sequence of GridLayout")
        self.horizon, self.phrasing = horizon, phrasing
        self.action_space = spaces.Discrete(len(ACTIONS))
        self.observation_space = spaces.Text(
            max_length=96, charset=frozenset("abcdefghijklmnopqrstuvwxyz0123456789 |:NESW")
        )
        self._words = {self.command(a): a for a in ACTIONS}
        self.layout: GridLayout | None = None

    def command(self, action: str) -> str:
        return PHRASES[action] if self.phrasing == "phrase" else action

    def _blocked(self, action: str) -> bool:
        dr, dc = _MOVES[action]
        return not self.layout.free((self.pos[0] + dr, self.pos[1] + dc))

    def observation(self) -> str:
        lay = self.layout
        blocked = [_COMPASS[a] for a in ("up", "right", "down", "left") if self._blocked(a)]
        where = f"door {lay.door[0]} {lay.door[1]}"
        if not self.has_key:
            where = f"key {lay.key[0]} {lay.key[1]} " + where
        here = "key" if (not self.has_key and self.pos == lay.key) else "none"
        return (
            f"pos {self.pos[0]} {self.pos[1]} key {int(self.has_key)} | {where} | here {here} | "
            f"walls: {' '.join(blocked) or 'none'}"
        )

    def admissible(self) -> list[str]:
        out = [self.command(a) for a in _MOVES if not self._blocked(a)]
        if not self.has_key and self.pos == self.layout.key:
            out.append(self.command("pick"))
        return out

    def _info(self) -> dict:
        obs = self.observation()
        return {
            "admissible_commands": self.admissible(),
            "anchor_obs": obs,
            "score": float(self.won),
            "won": self.won,
            "layout": self.layout_index,
        }

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        index = (options or {}).get("layout")
        if index is None:
            index = int(self.np_random.integers(len(self.layouts)))
        check_int("options['layout']", index, low=0, high=len(self.layouts) - 1)
        self.layout_index, self.layout = index, self.layouts[index]
        self.pos, self.has_key, self.won, self.t = self.layout.start, False, False, 0
        return self.observation(), self._info()

    def step(self, action):
        if self.layout is None:
            raise RuntimeError("call reset() before step()")
        if isinstance(action, (int, np.integer)) and not isinstance(action, bool):
            if not 0 <= int(action) < len(ACTIONS):
                raise ValueError(f"action index must lie in [0, {len(ACTIONS) - 1}], got {action}")
            name = ACTIONS[int(action)]
        elif isinstance(action, str) and action.strip() in self._words:
            name = self._words[action.strip()]
        else:
            raise ValueError(f"unknown action {action!r}; expected one of {sorted(self._words)} or an index")
        if self.won:
            raise RuntimeError("episode is over; call reset()")
        self.t += 1
        reward = 0.0
        if name == "pick":
            if self.pos == self.layout.key and not self.has_key:
                self.has_key = True
        elif not self._blocked(name):
            dr, dc = _MOVES[name]
            self.pos = (self.pos[0] + dr, self.pos[1] + dc)
            if self.has_key and self.pos == self.layout.door:
                self.won, reward = True, SUCCESS_REWARD
        truncated = not self.won and self.t >= self.horizon
        return self.observation(), reward, self.won, truncated, self._info()


ENV_ID = "neurips26/KeyDoorGrid-v0"


def register_envs() -> None:
    """Register :class:`KeyDoorGrid` with Gymnasium as ``neurips26/KeyDoorGrid-v0`` (idempotent)."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(
            id=ENV_ID, entry_point="neurips26.common.agents.envs:KeyDoorGrid", disable_env_checker=True
        )


register_envs()


def keydoor_expert_action(layout: GridLayout, pos: tuple[int, int], has_key: bool) -> str:
    """A shortest-path action (BFS): towards the key, ``pick`` on it, then towards the door."""
    if not has_key and pos == layout.key:
        return "pick"
    goal = layout.door if has_key else layout.key
    best, best_d = None, None
    for name, (dr, dc) in _MOVES.items():
        nxt = (pos[0] + dr, pos[1] + dc)
        if layout.free(nxt):
            d = _bfs(layout, nxt, goal)
            if d is not None and (best_d is None or d < best_d):
                best, best_d = name, d
    if best is None:
        raise ValueError(f"no path from {pos} to {goal}")
    return best


def keydoor_vocabulary(size: int = 5) -> list[str]:
    words = ["pos", "key", "door", "here", "walls:", "none", "|", "prev", "start", "N", "E", "S", "W"]
    words += [str(i) for i in range(size)] + list(ACTIONS)
    for phrase in PHRASES.values():
        words += [w for w in phrase.split() if w not in words]
    return list(dict.fromkeys(words))

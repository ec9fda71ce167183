"""Multi-turn text-agent substrate: environments, a causal-LM rollout loop and a step-level PPO trainer.

Shared by the multi-turn agent-RL methods (:mod:`neurips26.rl.rewardflow`, :mod:`neurips26.rl.aem`)
and later agent work. Pieces:

* :class:`TextEnv`, a Gymnasium-style protocol for text games: ``reset(seed=, options=) -> (obs, info)``
  and ``step(action) -> (obs, reward, terminated, truncated, info)``; ``info`` always carries
  ``admissible_commands`` (list of str), ``anchor_obs`` (hashable canonical state: the raw environment
  text, not the prompt with history), ``score`` and ``won``.
* :class:`KeyDoorGrid`, a 5x5 text grid world (fetch the key, then reach the door; reward 10 on
  opening it), a ``gymnasium.Env`` registered as ``neurips26/KeyDoorGrid-v0``, with seeded layout
  sets (:func:`keydoor_layouts`) checked solvable by BFS within the horizon.
* :class:`TextWorldEnv`, an adapter over ``textworld.start`` with ``EnvInfos``, and
  :func:`generate_textworld_games` (seeded, cached under ``$NEURIPS26_CACHE``; Inform 7's side effects
  go to a scratch HOME inside the cache, never the user's HOME).
* :func:`collect_rollouts`: groups of ``N`` multi-turn rollouts per task with a causal-LM policy.
  The prompt of step ``t`` is the observation plus the previous action; the response is an action
  phrase, either generated freely (``action_mode="generate"``; text outside the admissible commands
  is an *invalid action*: no environment step, state unchanged) or chosen among the admissible
  commands by their sequence log-probability (``action_mode="rank"``, ALFWorld-style candidate
  ranking). Per-step ids, log-probs, entropies and masks are kept.
* :func:`ppo_update` / :func:`train_agent`: the step-level PPO-clip loop. Every agent step is one
  training row with its own prompt; a per-step advantage ``A_{i,t}`` (from any estimator callable)
  is broadcast to the tokens of the response. The loss is :func:`neurips26.rl.losses.policy_loss`
  (clipped surrogate, token-mean, k3 KL to a frozen reference) unless a ``loss_fn`` is given.

.. math::

    \\mathcal{L} = \\frac{1}{\\sum M}\\sum_{n,k} M_{n,k}\\Big[\\max\\big(-\\tilde A_n\\rho_{n,k},
    -\\tilde A_n\\,\\mathrm{clip}(\\rho_{n,k}, 1-\\epsilon, 1+\\epsilon)\\big)
    + \\beta\\,\\mathrm{KL}_{k3}\\Big], \\qquad \\tilde A_n = A_n - c\\,[\\text{step } n \\text{ invalid}]

Shapes
------
A rollout batch has ``N`` step rows (all steps of all trajectories, trajectory-major), prompts
left-padded to ``P`` tokens and responses right-padded to ``T`` tokens: ``prompt_ids (N, P)``,
``response_ids/response_mask/logprobs/entropy (N, T)``, ``rewards/invalid (N,)``.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import gymnasium
import numpy as np
import torch
from gymnasium import spaces

from neurips26.common.checks import check_choice, check_float, check_int, check_probability

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
        gymnasium.register(id=ENV_ID, entry_point=f"{__name__}:KeyDoorGrid", disable_env_checker=True)


register_envs()

# ----------------------------------------------------------------------------------------------
# TextWorld
# ----------------------------------------------------------------------------------------------

#: difficulty -> (rooms, quest length, objects)
TEXTWORLD_DIFFICULTY = {1: (3, 2, 4), 2: (4, 3, 6), 3: (5, 4, 8)}


@contextlib.contextmanager
def _scratch_home(folder: Path) -> Iterator[None]:
    """Point HOME at ``folder`` (Inform 7 writes ``$HOME/Inform``) and restore it afterwards."""
    folder.mkdir(parents=True, exist_ok=True)
    old = os.environ.get("HOME")
    os.environ["HOME"] = str(folder)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = old


def generate_textworld_games(n: int, seed: int, difficulty: int = 1) -> list[Path]:
    """Generate ``n`` TextWorld games offline (bundled Inform 7) and cache them.

    Parameters
    ----------
    n : int
        Number of games; game ``i`` uses TextWorld seed ``seed * 10_000 + i``.
    seed : int
    difficulty : int
        Key of :data:`TEXTWORLD_DIFFICULTY`: (rooms, quest length, objects) = (3, 2, 4), (4, 3, 6), (5, 4, 8).

    Returns
    -------
    list of Path
        ``.z8`` game files inside the cache entry (``$NEURIPS26_CACHE/textworld-games/<key>/``).
    """
    check_int("n", n, low=1)
    check_int("seed", seed, low=0)
    check_choice("difficulty", difficulty, tuple(TEXTWORLD_DIFFICULTY))
    try:
        import textworld
    except ImportError as err:  # pragma: no cover - textworld is part of the agents extra
        raise ImportError(
            "generate_textworld_games needs textworld (pip install 'neurips26[agents]')"
        ) from err
    from neurips26.common.cache import cache_root, cached_dir

    rooms, quest, objects = TEXTWORLD_DIFFICULTY[difficulty]

    def build(folder: Path) -> None:
        from textworld import GameOptions
        from textworld.generator import compile_game, make_game

        with _scratch_home(cache_root() / "textworld-home"):
            for i in range(n):
                opts = GameOptions()
                opts.seeds = seed * 10_000 + i
                opts.nb_rooms, opts.quest_length, opts.nb_objects = rooms, quest, objects
                opts.path = str(folder / f"game_{i:03d}.z8")
                opts.force_recompile = True
                compile_game(make_game(opts), opts)
        for extra in folder.glob("*.ni"):
            extra.unlink()

    config = {"n": n, "seed": seed, "difficulty": difficulty, "textworld": textworld.__version__, "v": 1}
    folder = cached_dir("textworld-games", config, build)
    return [folder / f"game_{i:03d}.z8" for i in range(n)]


def textworld_game_sets(
    n_train: int, n_test: int, seed: int, difficulty: int = 1
) -> tuple[list[Path], list[Path]]:
    """Training and held-out game sets from disjoint TextWorld seeds (``2 seed`` and ``2 seed + 1``)."""
    return (
        generate_textworld_games(n_train, 2 * seed, difficulty),
        generate_textworld_games(n_test, 2 * seed + 1, difficulty),
    )


class TextWorldEnv:
    """:class:`TextEnv` adapter over ``textworld.start`` with ``EnvInfos``.

    Observation: the feedback text of the last command. Anchor state: the room description plus the
    inventory text (the raw game state, independent of the command history). Reward: ``success_reward``
    on the step that wins, plus the score increase when ``dense=True``.

    Parameters
    ----------
    game_file : path to a ``.z8``/``.ulx`` game
    max_steps : int
        Truncation limit.
    success_reward : float
    dense : bool
    """

    def __init__(
        self, game_file: str | Path, max_steps: int = 25, success_reward: float = 10.0, dense: bool = False
    ):
        import textworld

        path = Path(game_file)
        if not path.is_file():
            raise ValueError(f"game_file {str(path)!r} does not exist")
        check_int("max_steps", max_steps, low=1)
        self.success_reward = check_float("success_reward", success_reward, 0.0)
        self.max_steps, self.dense, self.game_file = max_steps, dense, path
        infos = textworld.EnvInfos(
            admissible_commands=True, won=True, lost=True, score=True, max_score=True, description=True,
            inventory=True, policy_commands=True,
        )  # fmt: skip
        self._env = textworld.start(str(path), request_infos=infos)
        self._state = None

    def _info(self, gs) -> dict:
        return {
            "admissible_commands": sorted(
                c for c in gs.admissible_commands if c not in ("look", "inventory")
            ),
            "anchor_obs": f"{gs.description.strip()} | {gs.inventory.strip()}",
            "score": float(gs.score),
            "max_score": float(gs.max_score),
            "won": bool(gs.won),
            "lost": bool(gs.lost),
            "policy_commands": list(gs.policy_commands or []),
        }

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        gs = self._env.reset()
        self._state, self.t = gs, 0
        return gs.description.strip(), self._info(gs)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        if not isinstance(action, str) or not action.strip():
            raise ValueError(f"action must be a non-empty command string, got {action!r}")
        before = float(self._state.score)
        gs, _, done = self._env.step(action.strip())
        self._state, self.t = gs, self.t + 1
        reward = (float(gs.score) - before if self.dense else 0.0) + (self.success_reward if gs.won else 0.0)
        terminated = bool(done)
        truncated = not terminated and self.t >= self.max_steps
        return gs.feedback.strip(), reward, terminated, truncated, self._info(gs)

    def close(self) -> None:
        self._env.close()


# ----------------------------------------------------------------------------------------------
# Tokenizer, prompts
# ----------------------------------------------------------------------------------------------


def keydoor_vocabulary(size: int = 5) -> list[str]:
    words = ["pos", "key", "door", "here", "walls:", "none", "|", "prev", "start", "N", "E", "S", "W"]
    words += [str(i) for i in range(size)] + list(ACTIONS)
    for phrase in PHRASES.values():
        words += [w for w in phrase.split() if w not in words]
    return list(dict.fromkeys(words))


def word_tokenizer(words: Sequence[str], model_max_length: int = 256):
    """Whitespace word-level ``PreTrainedTokenizerFast`` (``<pad>``=0, ``<s>``=1, ``</s>``=2, ``<unk>``=3)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = list(dict.fromkeys(words))
    if not words or any(not isinstance(w, str) or not w or any(ch.isspace() for ch in w) for w in words):
        raise ValueError("words must be non-empty strings without whitespace")
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    for w in words:
        vocab.setdefault(w, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        padding_side="left",
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def format_prompt(observation: str, previous_action: str | None) -> str:
    """Prompt of one step: the observation plus a one-action history."""
    return f"{observation} | prev {previous_action or 'start'}"


# ----------------------------------------------------------------------------------------------
# Rollouts
# ----------------------------------------------------------------------------------------------


@dataclass
class RolloutBatch:
    """All agent steps of one round of group rollouts (trajectory-major rows, see Shapes above).

    Attributes
    ----------
    prompt_ids, prompt_mask : Tensor (N, P)
    response_ids : Tensor (N, T); response_mask : Tensor (N, T) bool (EOS included)
    logprobs, entropy : Tensor (N, T)
        Behaviour-policy token log-probs and entropies (0 at padding).
    rewards : Tensor (N,)
        Environment reward of each step.
    invalid : Tensor (N,) bool
        The response was not an admissible command (no environment step).
    group_ids, traj_ids, step_index, anchor_keys : lists of length N
    trajectories : list of Trajectory
        One per episode, in ``traj_ids`` order; ``trajectories[i].observations`` are anchor states.
    success : Tensor (num_episodes,) bool
    stats : dict
        ``env_steps``, ``episodes``, ``rollout_s``, ``new_tokens``, ``tokens_per_s``, ``env_steps_per_s``.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    logprobs: torch.Tensor
    entropy: torch.Tensor
    rewards: torch.Tensor
    invalid: torch.Tensor
    group_ids: list
    traj_ids: list[int]
    step_index: list[int]
    anchor_keys: list
    trajectories: list[Trajectory]
    success: torch.Tensor
    stats: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return self.response_ids.shape[0]

    @property
    def episode_returns(self) -> np.ndarray:
        return np.array([t.episode_return for t in self.trajectories])


def _pad(rows: list[list[int]], pad: int, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if left:
            ids[i, width - len(r) :], mask[i, width - len(r) :] = torch.tensor(r), 1
        elif r:
            ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
    return ids, mask


def _pad_float(rows: list[list[float]], width: int) -> torch.Tensor:
    out = torch.zeros((len(rows), width))
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.float32)
    return out


@torch.no_grad()
def _rank_actions(policy, tokenizer, prompts, candidates, temperature, greedy, generator):
    """Choose among admissible commands by sequence log-prob (command + EOS); returns per row
    (text, token ids, token log-probs, token entropies)."""
    from neurips26.common.rollouts import score_completions

    flat_p, flat_c, owner = [], [], []
    for i, (p, cands) in enumerate(zip(prompts, candidates)):
        for c in cands:
            flat_p.append(p)
            flat_c.append(tokenizer(c, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])
            owner.append(i)
    p_ids, p_mask = _pad([tokenizer(p)["input_ids"] for p in flat_p], tokenizer.pad_token_id, left=True)
    c_ids, c_mask = _pad(flat_c, tokenizer.pad_token_id, left=False)
    out = score_completions(policy, p_ids, p_mask, c_ids, c_mask.bool(), temperature=temperature)
    lp, ent = out["logprobs"].float() * c_mask, out["entropy"].float() * c_mask
    seq = lp.sum(1)
    results, k = [], 0
    for cands in candidates:
        scores = seq[k : k + len(cands)]
        if greedy:
            j = int(scores.argmax())
        else:
            j = int(torch.multinomial(torch.softmax(scores, 0), 1, generator=generator))
        n = int(c_mask[k + j].sum())
        results.append((cands[j], flat_c[k + j], lp[k + j, :n].tolist(), ent[k + j, :n].tolist()))
        k += len(cands)
    return results


@torch.no_grad()
def _generate_actions(policy, tokenizer, prompts, max_new_tokens, temperature, greedy, generator):
    """Sample a short response per prompt token by token (no KV cache: responses are a few tokens).

    Position ids come from the attention mask, so a left-padded row gets the same distribution as
    the unpadded prompt (the training-time scoring of :func:`score_completions` does the same)."""
    from neurips26.common.rollouts import position_ids_from_mask

    p_ids, p_mask = _pad([tokenizer(p)["input_ids"] for p in prompts], tokenizer.pad_token_id, left=True)
    ids, mask = p_ids, p_mask
    eos = tokenizer.eos_token_id
    n = len(prompts)
    out_ids: list[list[int]] = [[] for _ in range(n)]
    out_lp: list[list[float]] = [[] for _ in range(n)]
    out_ent: list[list[float]] = [[] for _ in range(n)]
    alive = torch.ones(n, dtype=torch.bool)
    for _ in range(max_new_tokens):
        logits = policy(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)).logits[
            :, -1
        ]
        logp = torch.log_softmax(logits.float() / temperature, -1)
        if greedy:
            nxt = logp.argmax(-1)
        else:
            nxt = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1)
        ent = -(logp.exp() * logp).sum(-1)
        for i in torch.nonzero(alive).flatten().tolist():
            tok_id = int(nxt[i])
            out_ids[i].append(tok_id)
            out_lp[i].append(float(logp[i, tok_id]))
            out_ent[i].append(float(ent[i]))
            if tok_id == eos:
                alive[i] = False
        if not alive.any():
            break
        nxt = torch.where(alive | (nxt == eos), nxt, torch.full_like(nxt, tokenizer.pad_token_id))
        ids = torch.cat([ids, nxt.unsqueeze(1)], 1)
        mask = torch.cat([mask, torch.ones(n, 1, dtype=mask.dtype)], 1)
    results = []
    for i in range(n):
        text = tokenizer.decode(out_ids[i], skip_special_tokens=True).strip()
        results.append((text, out_ids[i], out_lp[i], out_ent[i]))
    return results, sum(len(r) for r in out_ids)


def collect_rollouts(
    policy: torch.nn.Module,
    tokenizer: Any,
    make_env: Callable[[Hashable], Any],
    tasks: Sequence[Hashable],
    *,
    group_size: int,
    max_steps: int = 12,
    temperature: float = 1.0,
    greedy: bool = False,
    action_mode: str = "generate",
    max_new_tokens: int = 4,
    seed: int = 0,
    env_seed: int | None = None,
) -> RolloutBatch:
    """Run ``group_size`` episodes per task in lock-step and return every agent step.

    Parameters
    ----------
    policy : causal LM; tokenizer : its tokenizer (pad, eos)
    make_env : callable
        ``make_env(task) -> (env, reset_options)``: a fresh :class:`TextEnv` and the options for
        ``reset`` that select the task (e.g. ``{"layout": 3}``).
    tasks : sequence of hashable
        The task ids; they become the ``group_id`` of their episodes.
    group_size : int
        ``N`` rollouts per task.
    max_steps : int
        Agent turns per episode (invalid actions count).
    temperature, greedy : sampling of actions (greedy = arg-max).
    action_mode : {"generate", "rank"}
        Free generation or ranking of the admissible commands (module docstring).
    max_new_tokens : int
        Response length limit in ``"generate"`` mode.
    seed : int
        Seeds the action sampling (one ``torch.Generator`` for the whole call).
    env_seed : int, optional
        Base seed passed to ``env.reset`` (episode ``e`` gets ``env_seed + e``).

    Returns
    -------
    RolloutBatch
    """
    check_int("group_size", group_size, low=1)
    check_int("max_steps", max_steps, low=1)
    check_choice("action_mode", action_mode, ("generate", "rank"))
    check_float("temperature", temperature, 0.0, low_open=True)
    if isinstance(tasks, (str, bytes)) or len(tasks) == 0:
        raise ValueError("tasks must be a non-empty sequence of task ids")
    start = time.perf_counter()
    episodes = []  # per episode: dict of lists
    for task in tasks:
        for _ in range(group_size):
            env, options = make_env(task)
            e = len(episodes)
            obs, info = env.reset(seed=None if env_seed is None else env_seed + e, options=options)
            episodes.append(
                dict(env=env, task=task, obs=obs, info=info, prev=None, done=False, anchors=[to_hashable(info["anchor_obs"])],
                     actions=[], rewards=[], steps=[], won=False)
            )  # fmt: skip
    was_training = policy.training
    policy.eval()
    generator = torch.Generator().manual_seed(seed)
    new_tokens = env_steps = 0
    policy_s = 0.0
    for t in range(max_steps):
        active = [ep for ep in episodes if not ep["done"]]
        if not active:
            break
        prompts = [format_prompt(ep["obs"], ep["prev"]) for ep in active]
        t0 = time.perf_counter()
        if action_mode == "rank":
            chosen = _rank_actions(
                policy, tokenizer, prompts, [ep["info"]["admissible_commands"] for ep in active], temperature, greedy,
                generator,
            )  # fmt: skip
            new_tokens += sum(len(c[1]) for c in chosen)
        else:
            chosen, n_tok = _generate_actions(
                policy, tokenizer, prompts, max_new_tokens, temperature, greedy, generator
            )
            new_tokens += n_tok
        policy_s += time.perf_counter() - t0
        for ep, prompt, (text, ids, lps, ents) in zip(active, prompts, chosen):
            valid = text in ep["info"]["admissible_commands"]
            reward = 0.0
            if valid:
                obs, reward, terminated, truncated, info = ep["env"].step(text)
                env_steps += 1
                ep["obs"], ep["info"] = obs, info
                ep["won"] = ep["won"] or bool(info.get("won", False))
                ep["done"] = terminated or truncated
            ep["prev"] = text if valid else "none"
            ep["anchors"].append(to_hashable(ep["info"]["anchor_obs"]))
            ep["actions"].append(text)
            ep["rewards"].append(float(reward))
            ep["steps"].append((prompt, ids, lps, ents, not valid))
            if t + 1 >= max_steps:
                ep["done"] = True
    if was_training:
        policy.train()
    rows_p, rows_r, rows_lp, rows_ent = [], [], [], []
    rewards, invalid, group_ids, traj_ids, step_index, anchor_keys, trajs = [], [], [], [], [], [], []
    for e, ep in enumerate(episodes):
        for t, (prompt, ids, lps, ents, bad) in enumerate(ep["steps"]):
            rows_p.append(tokenizer(prompt)["input_ids"])
            rows_r.append(ids)
            rows_lp.append(lps)
            rows_ent.append(ents)
            rewards.append(ep["rewards"][t])
            invalid.append(bad)
            group_ids.append(ep["task"])
            traj_ids.append(e)
            step_index.append(t)
            anchor_keys.append(ep["anchors"][t])
        trajs.append(Trajectory(ep["task"], ep["anchors"], ep["actions"], ep["rewards"]))
    if any(len(r) == 0 for r in rows_r):
        raise RuntimeError("a response has no tokens (max_new_tokens too small?)")
    p_ids, p_mask = _pad(rows_p, tokenizer.pad_token_id, left=True)
    r_ids, r_mask = _pad(rows_r, tokenizer.pad_token_id, left=False)
    seconds = time.perf_counter() - start
    stats = {
        "env_steps": float(env_steps),
        "agent_steps": float(len(rows_r)),
        "episodes": float(len(episodes)),
        "rollout_s": seconds,
        "policy_s": policy_s,
        "new_tokens": float(new_tokens),
        "tokens_per_s": new_tokens / max(policy_s, 1e-9),
        "env_steps_per_s": env_steps / max(seconds - policy_s, 1e-9),
    }
    return RolloutBatch(
        prompt_ids=p_ids,
        prompt_mask=p_mask,
        response_ids=r_ids,
        response_mask=r_mask.bool(),
        logprobs=_pad_float(rows_lp, r_ids.shape[1]),
        entropy=_pad_float(rows_ent, r_ids.shape[1]),
        rewards=torch.tensor(rewards, dtype=torch.float32),
        invalid=torch.tensor(invalid, dtype=torch.bool),
        group_ids=group_ids,
        traj_ids=traj_ids,
        step_index=step_index,
        anchor_keys=anchor_keys,
        trajectories=trajs,
        success=torch.tensor([ep["won"] for ep in episodes], dtype=torch.bool),
        stats=stats,
    )


def keydoor_env_factory(layouts: Sequence[GridLayout], horizon: int = 12, phrasing: str = "word"):
    """``make_env`` for :func:`collect_rollouts` over KeyDoorGrid layouts; tasks are layout indices."""

    def make_env(task: int):
        return KeyDoorGrid(layouts, horizon=horizon, phrasing=phrasing), {"layout": int(task)}

    return make_env


# ----------------------------------------------------------------------------------------------
# Step-level PPO
# ----------------------------------------------------------------------------------------------


@dataclass
class AgentPPOConfig:
    """Step-level PPO-clip settings (defaults: the RewardFlow/AEM CPU protocol).

    Parameters
    ----------
    epochs : int
        PPO epochs over each rollout batch.
    minibatches : int
        Mini-batches per epoch.
    clip_eps : float
        Symmetric clip range.
    kl_coef : float
        k3 KL-to-reference weight (0 disables the reference forward).
    invalid_penalty : float
        Subtracted from the advantage of steps whose response was not an admissible command.
    max_grad_norm : float
    """

    epochs: int = 2
    minibatches: int = 2
    clip_eps: float = 0.2
    kl_coef: float = 0.01
    invalid_penalty: float = 0.1
    max_grad_norm: float = 1.0

    def __post_init__(self) -> None:
        check_int("epochs", self.epochs, low=1)
        check_int("minibatches", self.minibatches, low=1)
        check_float("clip_eps", self.clip_eps, 0.0, 1.0, low_open=True, high_open=True)
        check_float("kl_coef", self.kl_coef, 0.0)
        check_float("invalid_penalty", self.invalid_penalty, 0.0)
        check_float("max_grad_norm", self.max_grad_norm, 0.0, low_open=True)


LossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]


def ppo_update(
    policy: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: RolloutBatch,
    advantages: torch.Tensor,
    *,
    config: AgentPPOConfig | None = None,
    ref_model: torch.nn.Module | None = None,
    loss_fn: LossFn | None = None,
    seed: int = 0,
) -> dict[str, float]:
    """PPO-clip epochs over the step rows of ``batch`` with per-step ``advantages`` ``(N,)`` or ``(N, T)``.

    ``loss_fn(logprobs, old_logprobs, advantages, response_mask, entropy, ref_logprobs)`` defaults to
    :func:`neurips26.rl.losses.policy_loss` with the config's clip and KL (token-mean).
    """
    from neurips26.common.rollouts import score_completions
    from neurips26.rl.losses import policy_loss

    config = config or AgentPPOConfig()
    if not isinstance(advantages, torch.Tensor) or advantages.shape[0] != len(batch):
        raise ValueError(
            f"advantages must be a tensor with {len(batch)} rows (one per step), got "
            f"{getattr(advantages, 'shape', type(advantages).__name__)}"
        )
    if not torch.isfinite(advantages).all():
        raise ValueError("advantages contain NaN or inf")
    adv = advantages.float().clone()
    pen = config.invalid_penalty * batch.invalid.float()
    adv = adv - (pen if adv.ndim == 1 else pen.unsqueeze(1))
    if loss_fn is None:

        def loss_fn(lp, old, a, mask, ent, ref):
            return policy_loss(
                lp, old, a, mask, ref_logprobs=ref, beta=config.kl_coef if ref is not None else 0.0,
                eps_low=config.clip_eps, eps_high=config.clip_eps, loss_agg="token-mean",
            )  # fmt: skip

    ref_lp = None
    if ref_model is not None and config.kl_coef > 0:
        with torch.no_grad():
            ref_lp = score_completions(
                ref_model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask
            )["logprobs"]
    n = len(batch)
    mb = max(1, math.ceil(n / config.minibatches))
    stats: dict[str, list[float]] = {}
    policy.train()
    for epoch in range(config.epochs):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 7919 + epoch))
        for start in range(0, n, mb):
            idx = order[start : start + mb]
            out = score_completions(
                policy,
                batch.prompt_ids[idx],
                batch.prompt_mask[idx],
                batch.response_ids[idx],
                batch.response_mask[idx],
            )
            loss, metrics = loss_fn(
                out["logprobs"], batch.logprobs[idx], adv[idx], batch.response_mask[idx], out["entropy"],
                None if ref_lp is None else ref_lp[idx],
            )  # fmt: skip
            if not torch.isfinite(loss):
                raise FloatingPointError("non-finite PPO loss")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
            optimizer.step()
            stats.setdefault("loss", []).append(float(loss.detach()))
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and math.isfinite(value):
                    stats.setdefault(key, []).append(float(value))
    return {k: float(np.mean(v)) for k, v in stats.items()}


Estimator = Callable[[RolloutBatch], torch.Tensor]
Transform = Callable[[torch.Tensor, RolloutBatch], torch.Tensor]


def train_agent(
    policy: torch.nn.Module,
    tokenizer: Any,
    make_env: Callable[[Hashable], Any],
    task_schedule: Callable[[int], Sequence[Hashable]],
    estimator: Estimator,
    *,
    env_step_budget: int,
    group_size: int = 8,
    max_steps: int = 12,
    lr: float = 3e-4,
    ppo: AgentPPOConfig | None = None,
    transform: Transform | None = None,
    loss_fn: LossFn | None = None,
    ref_model: torch.nn.Module | None = None,
    action_mode: str = "generate",
    max_new_tokens: int = 4,
    max_iterations: int | None = None,
    seed: int = 0,
    callback: Callable[[int, RolloutBatch, dict], None] | None = None,
) -> dict[str, Any]:
    """Generic multi-turn agent RL: rollouts -> per-step advantages -> optional transform -> PPO.

    Runs iterations until ``env_step_budget`` agent steps have been consumed (or ``max_iterations``).
    Any advantage estimator (GRPO, GiGPO, RewardFlow), optionally an advantage transform on top (AEM)
    and optionally a different token-level loss (Archer) compose here.

    Parameters
    ----------
    task_schedule : callable
        ``task_schedule(iteration) -> task ids`` of that iteration (the same schedule for every arm).
    estimator : callable
        ``estimator(batch) -> Tensor (N,)`` per-step advantages.
    transform : callable, optional
        ``transform(advantages, batch) -> Tensor`` of the same shape.
    env_step_budget : int
        Total agent steps (turns) allowed, invalid actions included.

    Returns
    -------
    dict
        ``curves`` (per iteration: ``success``, ``env_steps`` (cumulative), ``entropy`` (mean token
        entropy), ``surprisal`` (mean response surprisal), ``nonzero_adv``, ``pos_adv_frac``, ``loss``),
        ``iterations``, ``env_steps``, timing (``rollout_s``, ``advantage_s``, ``update_s``,
        ``tokens_per_s``, ``env_steps_per_s``).
    """
    check_int("env_step_budget", env_step_budget, low=1)
    check_float("lr", lr, 0.0, low_open=True)
    ppo = ppo or AgentPPOConfig()
    optimizer = torch.optim.Adam(policy.parameters(), lr=lr)
    curves: dict[str, list[float]] = {
        k: [] for k in ("success", "env_steps", "entropy", "surprisal", "nonzero_adv", "pos_adv_frac", "loss")
    }
    used = it = 0
    timing = {"rollout_s": 0.0, "advantage_s": 0.0, "update_s": 0.0, "policy_s": 0.0, "new_tokens": 0.0}
    env_time = env_steps_total = 0.0
    while used < env_step_budget and (max_iterations is None or it < max_iterations):
        batch = collect_rollouts(
            policy, tokenizer, make_env, task_schedule(it), group_size=group_size, max_steps=max_steps,
            action_mode=action_mode, max_new_tokens=max_new_tokens, seed=seed * 1_000_003 + it,
        )  # fmt: skip
        timing["rollout_s"] += batch.stats["rollout_s"]
        timing["policy_s"] += batch.stats["policy_s"]
        timing["new_tokens"] += batch.stats["new_tokens"]
        env_time += batch.stats["rollout_s"] - batch.stats["policy_s"]
        env_steps_total += batch.stats["env_steps"]
        t0 = time.perf_counter()
        adv = estimator(batch)
        if transform is not None:
            adv = transform(adv, batch)
        timing["advantage_s"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        stats = ppo_update(
            policy,
            optimizer,
            batch,
            adv,
            config=ppo,
            ref_model=ref_model,
            loss_fn=loss_fn,
            seed=seed * 31 + it,
        )
        timing["update_s"] += time.perf_counter() - t0
        used += len(batch)
        mask = batch.response_mask.float()
        surprisal = -(batch.logprobs * mask).sum(1) / mask.sum(1).clamp(min=1)
        flat = adv if adv.ndim == 1 else adv[:, 0]
        curves["success"].append(float(batch.success.float().mean()))
        curves["env_steps"].append(float(used))
        curves["entropy"].append(float((batch.entropy * mask).sum() / mask.sum()))
        curves["surprisal"].append(float(surprisal.mean()))
        curves["nonzero_adv"].append(float((flat.abs() > 1e-8).float().mean()))
        curves["pos_adv_frac"].append(float((flat > 0).float().mean()))
        curves["loss"].append(stats.get("loss", float("nan")))
        if callback is not None:
            callback(it, batch, stats)
        it += 1
    return {
        "curves": curves,
        "iterations": it,
        "env_steps": used,
        **timing,
        "tokens_per_s": timing["new_tokens"] / max(timing["policy_s"], 1e-9),
        "env_steps_per_s": env_steps_total / max(env_time, 1e-9),
    }


@torch.no_grad()
def evaluate_agent(
    policy: torch.nn.Module,
    tokenizer: Any,
    make_env: Callable[[Hashable], Any],
    tasks: Sequence[Hashable],
    *,
    episodes_per_task: int = 1,
    greedy: bool = True,
    max_steps: int = 12,
    action_mode: str = "generate",
    max_new_tokens: int = 4,
    seed: int = 0,
) -> dict[str, float]:
    """Success rate, mean steps to success and invalid-action rate on ``tasks``."""
    batch = collect_rollouts(
        policy, tokenizer, make_env, tasks, group_size=episodes_per_task, max_steps=max_steps, greedy=greedy,
        action_mode=action_mode, max_new_tokens=max_new_tokens, seed=seed,
    )  # fmt: skip
    lengths = np.array([len(t) for t in batch.trajectories])
    won = batch.success.numpy()
    return {
        "success": float(won.mean()),
        "steps_to_success": float(lengths[won].mean()) if won.any() else float("nan"),
        "invalid_rate": float(batch.invalid.float().mean()),
    }


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


def keydoor_bc_examples(
    layouts: Sequence[GridLayout], tokenizer: Any, *, episodes_per_layout: int, seed: int, horizon: int = 12,
    phrasing: str = "word", expert_prob: float = 0.0,
) -> list[dict[str, list[int]]]:  # fmt: skip
    """Behaviour-cloning data: random *admissible* moves (teaches the action format, not the task);
    with probability ``expert_prob`` per step the shortest-path action instead (walkthrough plus noise)."""
    check_probability("expert_prob", expert_prob)
    rng = np.random.default_rng(seed)
    out = []
    for index in range(len(layouts)):
        for _ in range(episodes_per_layout):
            env = KeyDoorGrid(layouts, horizon=horizon, phrasing=phrasing)
            obs, info = env.reset(options={"layout": index})
            prev = None
            for _t in range(horizon):
                cmds = info["admissible_commands"]
                if rng.random() < expert_prob:
                    action = env.command(keydoor_expert_action(env.layout, env.pos, env.has_key))
                else:
                    action = cmds[int(rng.integers(len(cmds)))]
                prompt = tokenizer(format_prompt(obs, prev))["input_ids"]
                resp = tokenizer(action, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
                out.append({"input_ids": prompt + resp, "loss_mask": [0] * len(prompt) + [1] * len(resp)})
                obs, _, term, trunc, info = env.step(action)
                prev = action
                if term or trunc:
                    break
    return out


__all__ = [
    "ACTIONS",
    "PHRASES",
    "ENV_ID",
    "TEXTWORLD_DIFFICULTY",
    "AgentPPOConfig",
    "GridLayout",
    "KeyDoorGrid",
    "RolloutBatch",
    "TextEnv",
    "TextWorldEnv",
    "Trajectory",
    "collect_rollouts",
    "evaluate_agent",
    "format_prompt",
    "generate_textworld_games",
    "keydoor_bc_examples",
    "keydoor_env_factory",
    "keydoor_expert_action",
    "keydoor_layouts",
    "keydoor_splits",
    "keydoor_vocabulary",
    "ppo_update",
    "register_envs",
    "textworld_game_sets",
    "to_hashable",
    "train_agent",
    "word_tokenizer",
]

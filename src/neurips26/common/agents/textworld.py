"""TextWorld adapter (:class:`TextWorldEnv`) and seeded, cached offline game generation.

Inform 7 (bundled with ``textworld``) writes ``$HOME/Inform`` while compiling; generation points HOME
at a scratch folder inside the cache for the duration of the build.

Shapes
------
No tensors: text observations and admissible-command lists.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from neurips26.common.checks import check_choice, check_float, check_int, check_probability

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
            "generate_textworld_games needs textworld (pip install 'neurips26[textgames]')"
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


def _check_game_files(game_files: Sequence[str | Path], suffix: str | None) -> list[Path]:
    """``game_files`` as paths: a non-empty sequence of existing files (with ``suffix`` swapped in, if given)."""
    if isinstance(game_files, (str, Path)) or not isinstance(game_files, Sequence):
        raise TypeError(f"game_files must be a sequence of paths, got {type(game_files).__name__}")
    if not game_files:
        raise ValueError("game_files must not be empty")
    paths = [Path(p) for p in game_files]
    for path in paths:
        target = path.with_suffix(suffix) if suffix else path
        if not target.is_file():
            raise ValueError(f"game_files: no such game file {str(target)!r}")
    return paths


def normalize_text(text: str) -> str:
    """Lower-case ``text`` and replace every run of characters outside ``[a-z0-9]`` by one space."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


#: Command words of TextWorld's grammar (verbs, directions, prepositions) for :func:`textworld_vocabulary`.
COMMAND_WORDS = (
    "go north south east west take drop put on in insert into open close unlock lock with examine eat from "
    "goal room carrying nothing prev start none"
).split()


#: Objective words kept by the compact observation besides entity names (the rest is template filler).
_OBJECTIVE_WORDS = frozenset(
    COMMAND_WORDS + "unlocked locked shut closed opened inside within floor ground onto then".split()
)

#: Entity types of TextWorld's default grammar with their own placeholder letter (others use ``x``):
#: room, door, container, supporter, portable object, key, food.
_PLACEHOLDER_TYPES = "rdcsokf"
#: Placeholders per letter (``o1`` ... ``o12``); a game with more entities of one type reuses the last.
MAX_PLACEHOLDERS = 12


def placeholder_words() -> list[str]:
    """Every entity placeholder of the anonymised compact observation (``r1`` ... ``x12``)."""
    return [f"{t}{i}" for t in _PLACEHOLDER_TYPES + "x" for i in range(1, MAX_PLACEHOLDERS + 1)]


def entity_placeholders(entities: Sequence[tuple[str, str]], objective: str) -> dict[str, str]:
    """Map normalised entity names to type-lettered placeholders (``o1``, ``c2``, ``r3``, ...).

    Per type letter, entities are numbered in order of their first mention in the normalised
    ``objective``, then the unmentioned ones by name, so the numbering is a function of the game
    alone. ``entities`` holds ``(type, name)`` pairs; unnamed entities are skipped.
    """
    text = f" {normalize_text(objective)} "
    names: dict[str, str] = {}
    for kind, name in entities:
        norm = normalize_text(name or "")
        if norm and norm not in names:
            names[norm] = kind if kind in tuple(_PLACEHOLDER_TYPES) else "x"

    def order(norm: str) -> tuple[int, str]:
        at = text.find(f" {norm} ")
        return (at if at >= 0 else len(text), norm)

    counts: dict[str, int] = {}
    out: dict[str, str] = {}
    for norm in sorted(names, key=order):
        letter = names[norm]
        counts[letter] = min(counts.get(letter, 0) + 1, MAX_PLACEHOLDERS)
        out[norm] = f"{letter}{counts[letter]}"
    return out


def anonymize_text(text: str, placeholders: dict[str, str]) -> str:
    """Normalise ``text`` and replace every whole-word entity name by its placeholder (longest names first)."""
    out = f" {normalize_text(text)} "
    for norm in sorted(placeholders, key=lambda n: (-len(n), n)):
        out = out.replace(f" {norm} ", f" {placeholders[norm]} ")
        out = out.replace(f" {norm} ", f" {placeholders[norm]} ")  # adjacent repeats
    return " ".join(out.split())


def textworld_vocabulary(game_files: Sequence[str | Path], placeholders: bool = False) -> list[str]:
    """Normalised words of the games' objectives, entity names and TextWorld's command words
    (plus every entity placeholder of :func:`placeholder_words` with ``placeholders=True``).

    Held-out games may contribute words here (their embeddings are never trained unless the words
    also occur in training games); the vocabulary is a tokenizer detail, not training data.
    """
    paths = _check_game_files(game_files, ".json")
    import textworld

    words = list(COMMAND_WORDS) + (placeholder_words() if placeholders else [])
    for path in paths:
        game = textworld.Game.load(str(Path(path).with_suffix(".json")))
        words += normalize_text(game.objective).split()
        for info in game.infos.values():
            if info.name:
                words += normalize_text(info.name).split()
    return list(dict.fromkeys(words))


class TextWorldEnv:
    """:class:`TextEnv` adapter over ``textworld.start`` with ``EnvInfos``.

    Two observation modes. ``compact=False``: the observation is the feedback text of the last
    command and the anchor state is the room description plus the inventory text. ``compact=True``
    (for tiny word-level policies): the observation is ``"goal <objective> | room <room> | carrying
    <items>"`` in normalised words (:func:`normalize_text`), built from the game's logical facts (the
    objective keeps only entity-name words and command/state words, dropping TextWorld's template
    filler such as "here is your task for today"), and
    the anchor state is the sorted tuple of those facts (the full game state, independent of the
    command history); description and inventory are then not requested (each costs an extra
    interpreter command per step). ``anonymize=True`` (compact only) also replaces every entity name,
    in the observation, the admissible commands and the walkthrough, by a type-lettered placeholder
    (:func:`entity_placeholders`: ``take o1 from s1``); :meth:`step` accepts the anonymised commands
    and maps them back. A word-level policy trained from scratch has no embedding for the names of
    unseen games; placeholders stand in for the lexical knowledge of a pretrained LM, so that skills
    can transfer to held-out games. Reward: ``success_reward`` on the step that wins, plus the score
    increase when ``dense=True``. ``info["policy_commands"]`` (TextWorld's walkthrough from the
    current state) is filled only with ``walkthrough=True``.

    Parameters
    ----------
    game_file : path to a ``.z8``/``.ulx`` game
    max_steps : int
        Truncation limit.
    success_reward : float
    dense : bool
    compact : bool
    walkthrough : bool
    anonymize : bool
    """

    def __init__(
        self, game_file: str | Path, max_steps: int = 25, success_reward: float = 10.0, dense: bool = False,
        compact: bool = False, walkthrough: bool = True, anonymize: bool = False,
    ):  # fmt: skip
        try:
            import textworld
        except ImportError as err:  # pragma: no cover - textworld is part of the textgames extra
            raise ImportError("TextWorldEnv needs textworld (pip install 'neurips26[textgames]')") from err

        path = Path(game_file)
        if not path.is_file():
            raise ValueError(f"game_file {str(path)!r} does not exist")
        check_int("max_steps", max_steps, low=1)
        self.success_reward = check_float("success_reward", success_reward, 0.0)
        self.max_steps, self.dense, self.game_file, self.compact = max_steps, dense, path, compact
        self.walkthrough = walkthrough
        if anonymize and not compact:
            raise ValueError(
                "anonymize=True needs compact=True (placeholders replace names in the compact text)"
            )
        self.anonymize = bool(anonymize)
        self._names: dict[str, str] = {}
        self._commands: dict[str, str] = {}
        infos = textworld.EnvInfos(
            admissible_commands=True, won=True, lost=True, score=True, max_score=True, description=not compact,
            inventory=not compact, policy_commands=walkthrough, facts=compact, objective=compact,
        )  # fmt: skip
        self._env = textworld.start(str(path), request_infos=infos)
        self._state = None
        self._objective = ""

    def _compact(self, gs) -> tuple[str, tuple]:
        room, items = "nowhere", []
        for fact in gs.facts:
            if fact.name == "at" and fact.arguments[0].type == "P":
                room = fact.arguments[1].name
            elif fact.name == "in" and fact.arguments[1].type == "I":
                items.append(fact.arguments[0].name)
        name = self._name
        obs = (
            f"goal {self._objective} | room {name(room)} | carrying "
            f"{' '.join(sorted(name(i) for i in items)) or 'nothing'}"
        )
        return obs, tuple(sorted(str(f) for f in gs.facts))

    def _name(self, text: str) -> str:
        return anonymize_text(text, self._names) if self.anonymize else normalize_text(text)

    def _info(self, gs) -> tuple[str | None, dict]:
        commands = [c for c in gs.admissible_commands if c not in ("look", "inventory")]
        plan = list(gs.policy_commands or []) if self.walkthrough else []
        if self.anonymize:
            self._commands = {self._name(c): c for c in commands}
            commands, plan = list(self._commands), [self._name(c) for c in plan]
        info = {
            "admissible_commands": sorted(commands),
            "score": float(gs.score),
            "max_score": float(gs.max_score),
            "won": bool(gs.won),
            "lost": bool(gs.lost),
            "policy_commands": plan,
        }
        obs = None
        if self.compact:
            obs, info["anchor_obs"] = self._compact(gs)
        else:
            info["anchor_obs"] = f"{gs.description.strip()} | {gs.inventory.strip()}"
        return obs, info

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        gs = self._env.reset()
        self._state, self.t = gs, 0
        if self.anonymize:
            entities = {
                (v.type, v.name) for f in gs.facts for v in f.arguments if v.name and v.type not in "PI"
            }
            self._names = entity_placeholders(sorted(entities), gs.objective)
            keep = set(self._names.values()) | _OBJECTIVE_WORDS
            self._objective = " ".join(
                w for w in anonymize_text(gs.objective, self._names).split() if w in keep
            )
        elif self.compact:
            names = {
                w for f in gs.facts for v in f.arguments if v.name for w in normalize_text(v.name).split()
            }
            keep = names | _OBJECTIVE_WORDS
            self._objective = " ".join(w for w in normalize_text(gs.objective).split() if w in keep)
        obs, info = self._info(gs)
        return (obs if self.compact else gs.description.strip()), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        if not isinstance(action, str) or not action.strip():
            raise ValueError(f"action must be a non-empty command string, got {action!r}")
        before = float(self._state.score)
        action = action.strip()
        if self.anonymize:
            action = self._commands.get(action, action)
        gs, _, done = self._env.step(action)
        self._state, self.t = gs, self.t + 1
        reward = (float(gs.score) - before if self.dense else 0.0) + (self.success_reward if gs.won else 0.0)
        terminated = bool(done)
        truncated = not terminated and self.t >= self.max_steps
        obs, info = self._info(gs)
        return (obs if self.compact else gs.feedback.strip()), reward, terminated, truncated, info

    def close(self) -> None:
        self._env.close()


class _EnvPool:
    """Idle :class:`TextWorldEnv` instances per game, reused across rollout rounds (starting the
    interpreter costs ~0.1 s, a reset ~20 ms); ``close()`` of a handed-out env returns it here."""

    def __init__(self, make: Callable[[int], TextWorldEnv]):
        self.make, self.idle = make, {}

    def get(self, task: int):
        free = self.idle.setdefault(task, [])
        env = free.pop() if free else _PooledEnv(self.make(task), self, task)
        return env

    def release(self, env: _PooledEnv) -> None:
        self.idle.setdefault(env.task, []).append(env)


class _PooledEnv:
    def __init__(self, env: TextWorldEnv, pool: _EnvPool, task: int):
        self.env, self.pool, self.task = env, pool, task

    def reset(self, *, seed=None, options=None):
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        return self.env.step(action)

    def close(self) -> None:
        self.pool.release(self)


def textworld_env_factory(
    game_files: Sequence[str | Path], max_steps: int = 10, *, compact: bool = True, pool: bool = True,
    anonymize: bool = False,
) -> Callable[[int], tuple[Any, None]]:  # fmt: skip
    """``make_env`` for :func:`collect_rollouts` over TextWorld games; tasks are game indices.

    With ``pool=True`` the interpreters are kept and reused between rounds (identical trajectories:
    every episode starts with ``reset``). The factory is picklable only with ``pool=False`` (Ray)."""
    games = [Path(g) for g in game_files]
    if not games:
        raise ValueError("game_files must list at least one game")

    def make(task: int) -> TextWorldEnv:
        check_int("task", task, low=0, high=len(games) - 1)
        return TextWorldEnv(
            games[task], max_steps=max_steps, compact=compact, walkthrough=False, anonymize=anonymize
        )

    if not pool:
        return lambda task: (make(int(task)), None)
    shared = _EnvPool(make)
    return lambda task: (shared.get(int(task)), None)


def textworld_bc_examples(
    game_files: Sequence[str | Path], tokenizer: Any, *, episodes_per_game: int, seed: int, max_steps: int = 10,
    expert_prob: float = 0.7, anonymize: bool = False,
) -> list[dict[str, list[int]]]:  # fmt: skip
    """Behaviour-cloning data on TextWorld games: at each step the walkthrough's next command with
    probability ``expert_prob``, else a random admissible command (walkthrough plus noise); every
    visited (prompt, command) pair is a training example, the prompt formatted as in rollouts."""
    from neurips26.common.agents.rollout import bc_example

    check_probability("expert_prob", expert_prob)
    check_int("episodes_per_game", episodes_per_game, low=1)
    check_int("max_steps", max_steps, low=1)
    check_int("seed", seed, low=0)
    paths = _check_game_files(game_files, None)
    rng = np.random.default_rng(seed)
    out = []
    for path in paths:
        env = TextWorldEnv(path, max_steps=max_steps, compact=True, walkthrough=True, anonymize=anonymize)
        try:
            for _ in range(episodes_per_game):
                obs, info = env.reset()
                prev = None
                for _t in range(max_steps):
                    cmds, plan = info["admissible_commands"], info["policy_commands"]
                    if plan and plan[0] in cmds and rng.random() < expert_prob:
                        action = plan[0]
                    else:
                        action = cmds[int(rng.integers(len(cmds)))]
                    out.append(bc_example(tokenizer, obs, prev, action))
                    obs, _, term, trunc, info = env.step(action)
                    prev = action
                    if term or trunc:
                        break
        finally:
            env.close()
    return out

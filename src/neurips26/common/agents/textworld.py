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
from collections.abc import Iterator
from pathlib import Path

from neurips26.common.checks import check_choice, check_float, check_int

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
        try:
            import textworld
        except ImportError as err:  # pragma: no cover - textworld is part of the textgames extra
            raise ImportError("TextWorldEnv needs textworld (pip install 'neurips26[textgames]')") from err

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

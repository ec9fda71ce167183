"""Environment workers for multi-turn rollouts: in-process, or sharded over Ray actors.

:func:`collect_rollouts` steps all episodes of a round in lock-step through an *env batch*:
``reset() -> [(obs, info)]`` and ``step(indices, actions) -> [(obs, reward, terminated, truncated,
info)]``. :class:`EnvBatch` keeps the environments in this process; :class:`RayEnvBatch` shards them
round-robin over ``num_workers`` Ray actors (each an :class:`EnvBatch`), so environment stepping runs
in other processes or machines while the policy stays with the driver, as in verl-agent's env
workers. Both give identical trajectories for identical seeds (the environments are deterministic
given their reset seed and actions).

Shapes
------
No tensors: ``specs`` is a list of ``(task, reset_seed)`` pairs, one per episode.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from neurips26.common.checks import check_choice, check_int

EXECUTORS = ("inprocess", "ray")


class EnvBatch:
    """Episodes' environments in this process; ``make_env(task) -> (env, reset_options)``."""

    def __init__(self, make_env: Callable[[Hashable], Any], specs: Sequence[tuple[Hashable, int | None]]):
        self.make_env = make_env
        self.specs = list(specs)
        self.envs: list[Any] = []
        self.options: list[Any] = []

    def reset(self) -> list[tuple[str, dict]]:
        self.envs, self.options, out = [], [], []
        for task, seed in self.specs:
            env, options = self.make_env(task)
            self.envs.append(env)
            self.options.append(options)
            out.append(env.reset(seed=seed, options=options))
        return out

    def step(self, indices: Sequence[int], actions: Sequence[str]) -> list[tuple]:
        if len(indices) != len(actions):
            raise ValueError(f"{len(indices)} indices but {len(actions)} actions")
        return [self.envs[i].step(a) for i, a in zip(indices, actions)]

    def close(self) -> None:
        for env in self.envs:
            close = getattr(env, "close", None)
            if close is not None:
                close()


class RayEnvBatch:
    """The same API as :class:`EnvBatch`, with episodes sharded round-robin over Ray actors."""

    def __init__(
        self,
        make_env: Callable[[Hashable], Any],
        specs: Sequence[tuple[Hashable, int | None]],
        num_workers: int = 2,
    ):
        check_int("num_workers", num_workers, low=1)
        from neurips26.common.optional import require

        ray = require("ray", "ray")
        if not ray.is_initialized():
            ray.init(num_cpus=max(2, num_workers), include_dashboard=False, log_to_driver=False)
        self._ray = ray
        self.specs = list(specs)
        self.num_workers = min(num_workers, len(self.specs))
        self._owner = [(i % self.num_workers, i // self.num_workers) for i in range(len(self.specs))]
        actor = ray.remote(num_cpus=0)(EnvBatch)
        self.actors = [
            actor.remote(make_env, self.specs[w :: self.num_workers]) for w in range(self.num_workers)
        ]

    def reset(self) -> list[tuple[str, dict]]:
        parts = self._ray.get([a.reset.remote() for a in self.actors])
        return [parts[w][j] for w, j in self._owner]

    def step(self, indices: Sequence[int], actions: Sequence[str]) -> list[tuple]:
        if len(indices) != len(actions):
            raise ValueError(f"{len(indices)} indices but {len(actions)} actions")
        per_worker: list[tuple[list[int], list[str], list[int]]] = [([], [], []) for _ in self.actors]
        for k, (i, a) in enumerate(zip(indices, actions)):
            w, j = self._owner[i]
            per_worker[w][0].append(j)
            per_worker[w][1].append(a)
            per_worker[w][2].append(k)
        refs = [(w, self.actors[w].step.remote(js, acts)) for w, (js, acts, _) in enumerate(per_worker) if js]
        out: list[Any] = [None] * len(indices)
        for w, ref in refs:
            for k, res in zip(per_worker[w][2], self._ray.get(ref)):
                out[k] = res
        return out

    def close(self) -> None:
        for a in self.actors:
            self._ray.kill(a)
        self.actors = []


def make_env_batch(
    make_env: Callable[[Hashable], Any],
    specs: Sequence[tuple[Hashable, int | None]],
    executor: str = "inprocess",
    num_workers: int = 2,
):
    """An :class:`EnvBatch` (``executor="inprocess"``) or a :class:`RayEnvBatch` (``"ray"``)."""
    check_choice("executor", executor, EXECUTORS)
    if executor == "ray":
        return RayEnvBatch(make_env, specs, num_workers)
    return EnvBatch(make_env, specs)


def env_steps_per_second(
    make_env: Callable[[Hashable], Any],
    tasks: Sequence[Hashable],
    *,
    episodes_per_task: int = 8,
    steps: int = 12,
    executor: str = "inprocess",
    num_workers: int = 2,
    seed: int = 0,
) -> dict[str, float]:
    """Throughput of lock-step environment stepping with random admissible actions (no policy).

    Returns ``env_steps``, ``seconds`` (stepping only; actor start-up excluded) and ``env_steps_per_s``.
    """
    check_int("steps", steps, low=1)
    rng = np.random.default_rng(seed)
    specs = [(t, None) for t in tasks for _ in range(episodes_per_task)]
    batch = make_env_batch(make_env, specs, executor, num_workers)
    try:
        states = batch.reset()
        infos = [info for _, info in states]
        alive = list(range(len(specs)))
        n = 0
        start = time.perf_counter()
        for _ in range(steps):
            if not alive:
                break
            acts = [
                infos[i]["admissible_commands"][int(rng.integers(len(infos[i]["admissible_commands"])))]
                for i in alive
            ]
            results = batch.step(alive, acts)
            n += len(alive)
            nxt = []
            for i, (_, _, term, trunc, info) in zip(alive, results):
                infos[i] = info
                if not (term or trunc):
                    nxt.append(i)
            alive = nxt
        seconds = time.perf_counter() - start
    finally:
        batch.close()
    return {"env_steps": float(n), "seconds": seconds, "env_steps_per_s": n / max(seconds, 1e-9)}


__all__ = ["EXECUTORS", "EnvBatch", "RayEnvBatch", "env_steps_per_second", "make_env_batch"]

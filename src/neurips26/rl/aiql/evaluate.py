"""Policies and evaluation in the warehouse: greedy actors, the heuristic, and an oracle lookahead planner."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from neurips26.common.checks import check_int
from neurips26.rl.aiql.env import WarehouseConsolidationEnv, behaviour_policy, heuristic_policy
from neurips26.rl.aiql.nets import CandidateScoringActor, select_padded

Policy = Callable[[dict[str, np.ndarray], np.random.Generator], np.ndarray]


def actor_policy(actor: CandidateScoringActor, budget: int, greedy: bool = True) -> Policy:
    """Wrap an actor as an environment policy: top-``budget`` (greedy) or a Plackett-Luce sample."""

    @torch.no_grad()
    def policy(obs: dict[str, np.ndarray], rng: np.random.Generator) -> np.ndarray:
        mask = torch.as_tensor(np.asarray(obs["mask"]).astype(bool))[None]
        C = mask.shape[1]
        n = int(mask.sum())
        out = np.full(budget, C, dtype=np.int64)
        if n == 0:
            return out
        g = torch.as_tensor(obs["global"], dtype=torch.float32)[None]
        cand = torch.as_tensor(obs["candidates"][:n], dtype=torch.float32)[None]
        scores = actor(g, cand, mask[:, :n])
        gen = torch.Generator().manual_seed(int(rng.integers(2**31))) if not greedy else None
        sel = select_padded(scores, mask[:, :n], budget, greedy=greedy, generator=gen)[0].numpy()
        out[sel >= 0] = sel[sel >= 0]
        return out

    return policy


def heuristic(budget: int) -> Policy:
    return lambda obs, rng: heuristic_policy(obs, budget)


def behaviour(budget: int, temperature: float = 0.5, epsilon: float = 0.1) -> Policy:
    return lambda obs, rng: behaviour_policy(obs, budget, rng, temperature, epsilon)


def evaluate(policy: Policy, env_kwargs: dict[str, Any], episodes: int, seed: int) -> dict[str, Any]:
    """Roll ``policy`` for ``episodes`` episodes (reset seeds ``seed + e``).

    Returns
    -------
    dict with ``throughput`` (mean final inbound units stored / arrived), ``target_return`` and
    ``source_return`` (mean episode sums) and the per-episode lists.
    """
    check_int("episodes", episodes, low=1)
    rng = np.random.default_rng(seed)
    tp, tgt, src = [], [], []
    for e in range(episodes):
        env = WarehouseConsolidationEnv(**{**env_kwargs, "invalid_action": "raise"})
        obs, info = env.reset(seed=seed + e)
        done, r_t, r_s = False, 0.0, 0.0
        while not done:
            obs, _, terminated, truncated, info = env.step(policy(obs, rng))
            r_t += info["target_reward"]
            r_s += info["source_reward"]
            done = terminated or truncated
        tp.append(info["throughput"])
        tgt.append(r_t)
        src.append(r_s)
    return {
        "throughput": float(np.mean(tp)),
        "target_return": float(np.mean(tgt)),
        "source_return": float(np.mean(src)),
        "per_episode": {"throughput": tp, "target_return": tgt, "source_return": src},
    }


def oracle_planner(
    budget: int, lookahead: int = 5, samples: int = 6
) -> Callable[[WarehouseConsolidationEnv], np.ndarray]:
    """An oracle lookahead planner: it simulates a copy of the environment, future randomness included.

    At each epoch it scores ``samples`` candidate actions (the heuristic's, a near-dock-first one and
    behaviour-policy draws) by the inbound units stored over ``lookahead`` epochs when the heuristic
    continues, and plays the best. Only for small instances (a premise of the claim: the heuristic
    leaves room to improve).
    """

    def near_first(obs):
        cand, mask = obs["candidates"], np.asarray(obs["mask"]).astype(bool)
        score = np.where(mask, -cand[:, 2] - 0.1 * np.abs(cand[:, 4]), -np.inf)
        valid = np.flatnonzero(mask)
        order = valid[np.argsort(-score[valid], kind="stable")][:budget]
        out = np.full(budget, len(mask), dtype=np.int64)
        out[: len(order)] = order
        return out

    def plan(env: WarehouseConsolidationEnv, obs, rng: np.random.Generator) -> np.ndarray:
        options = [heuristic_policy(obs, budget), near_first(obs)]
        while len(options) < samples:
            options.append(behaviour_policy(obs, budget, rng))
        best, best_value = options[0], -np.inf
        for action in options:
            sim = copy.deepcopy(env)
            o, _, term, trunc, info = sim.step(action)
            stored = info["stored"]
            for _ in range(lookahead - 1):
                if term or trunc:
                    break
                o, _, term, trunc, info = sim.step(heuristic_policy(o, budget))
                stored += info["stored"]
            if stored > best_value:
                best, best_value = action, stored
        return best

    return plan


def evaluate_planner(planner, env_kwargs: dict[str, Any], episodes: int, seed: int) -> dict[str, Any]:
    """Throughput of :func:`oracle_planner` (it needs the environment itself, not only observations)."""
    rng = np.random.default_rng(seed)
    tp = []
    for e in range(episodes):
        env = WarehouseConsolidationEnv(**{**env_kwargs, "invalid_action": "raise"})
        obs, info = env.reset(seed=seed + e)
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(planner(env, obs, rng))
            done = terminated or truncated
        tp.append(info["throughput"])
    return {"throughput": float(np.mean(tp)), "per_episode": {"throughput": tp}}


__all__ = ["actor_policy", "behaviour", "evaluate", "evaluate_planner", "heuristic", "oracle_planner"]

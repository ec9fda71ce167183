"""Step-level PPO-clip for multi-turn agents and the generic trainer that composes estimators and losses.

The per-token loss is :func:`neurips26.rl.losses.policy_loss` unless a ``loss_fn`` is given (e.g. Archer).

Shapes
------
Advantages ``(N,)`` or ``(N, T)`` aligned with the step rows of a :class:`RolloutBatch`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from neurips26.common.agents.rollout import RolloutBatch, collect_rollouts
from neurips26.common.checks import check_float, check_int

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
    executor: str = "inprocess",
    num_workers: int = 2,
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
    executor, num_workers
        Environment workers (``"inprocess"`` or ``"ray"`` actors), see :func:`collect_rollouts`.

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
            action_mode=action_mode, max_new_tokens=max_new_tokens, seed=seed * 1_000_003 + it, executor=executor, num_workers=num_workers,
        )  # fmt: skip
        timing["rollout_s"] += batch.stats["rollout_s"]
        timing["policy_s"] += batch.stats["policy_s"]
        timing["new_tokens"] += batch.stats["new_tokens"]
        env_time += batch.stats["env_s"]
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

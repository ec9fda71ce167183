r"""Policy calibration: grid search of ``(theta_mid, gamma)`` per task under a mean-density cap.

:func:`calibrate_policies` is model-agnostic (a caller-supplied ``evaluate(task, policy)``);
:func:`model_evaluator` / :func:`calibrate_policies_on_model` evaluate the candidates with a
``transformers`` model through the registered attention.

.. math::
    (\theta_{mid}^*, \gamma^*)_\tau = \arg\max_{\bar d(\theta, \gamma) \le d_{cap}} \mathrm{acc}_\tau(\theta, \gamma)

Shapes
------
Labelled examples ``[(input_ids [1, n], answer_ids), ...]`` per task; scalars out.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.inference.adacal.config import DEFAULT_POLICIES, TASKS, AdaCalConfig, TaskPolicy
from neurips26.inference.adacal.dispatch import task
from neurips26.inference.adacal.integration import last_stats, register_adacal_attention


def _check_grid(name: str, grid: Any, low: float, low_open: bool) -> tuple[float, ...]:
    if isinstance(grid, (str, bytes)) or not isinstance(grid, Sequence) and not isinstance(grid, np.ndarray):
        raise TypeError(f"{name} must be a sequence of floats, got {type(grid).__name__}")
    values = tuple(float(x) for x in grid)
    if not values:
        raise ValueError(f"{name} must not be empty")
    for x in values:
        bad_low = x <= low if low_open else x < low
        if not math.isfinite(x) or bad_low or x > 1.0:
            side = "(" if low_open else "["
            raise ValueError(f"{name} values must lie in {side}{low:g}, 1], got {x!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"{name} has duplicate values: {list(values)}")
    return values


def calibrate_policies(
    evaluate: Callable[[str, TaskPolicy], tuple[float, float]],
    grid_theta_mid: Sequence[float],
    grid_gamma: Sequence[float],
    density_cap: float,
    tasks: Sequence[str] = TASKS,
    base_policies: Mapping[str, TaskPolicy] | None = None,
    return_table: bool = False,
) -> dict[str, TaskPolicy] | tuple[dict[str, TaskPolicy], list[dict[str, Any]]]:
    r"""Tune :math:`(\theta_{mid}, \gamma)` per task by grid search: best accuracy under a density cap.

    For each task ``t`` in ``tasks`` and each grid point, the candidate policy is
    ``base_policies[t]`` with ``theta_mid`` and ``gamma`` replaced (``theta_h``, ``augment`` and
    ``beta_max`` are kept); ``evaluate(t, candidate)`` returns ``(accuracy, density)`` on the
    caller's labelled calibration set. A point is *feasible* when ``density <= density_cap``.

    Selection (deterministic): among feasible points, the highest accuracy; ties broken by the
    lowest density, then by the smallest L1 distance
    :math:`|\theta_{mid}-\theta_{mid}^{0}|+|\gamma-\gamma^{0}|` to the base policy's values
    (rounded to 9 decimals, so float noise does not break a tie), then by grid order
    (``grid_theta_mid`` outer, ``grid_gamma`` inner). When no point is feasible the
    task keeps its base policy and a ``UserWarning`` says so.

    Parameters
    ----------
    evaluate : callable
        ``evaluate(task, policy) -> (accuracy, density)``; both finite, ``density >= 0``. Called
        once per task and grid point (see :func:`model_evaluator` for a ``transformers`` one).
    grid_theta_mid : sequence of float
        Values of ``theta_mid`` in ``[0, 1]`` (non-empty, distinct).
    grid_gamma : sequence of float
        Values of ``gamma`` in ``(0, 1]`` (non-empty, distinct).
    density_cap : float
        Largest admissible mean block density, in ``(0, 1]``.
    tasks : sequence of str
        Tasks to calibrate (distinct names from :data:`TASKS`); the others keep their base policy.
    base_policies : mapping, optional
        Policies to start from (default :data:`DEFAULT_POLICIES`); must define every task.
    return_table : bool
        Also return the evaluated grid: one dict per (task, point) with ``task``, ``theta_mid``,
        ``gamma``, ``accuracy``, ``density``, ``feasible`` and ``chosen``.

    Returns
    -------
    dict of str to TaskPolicy
        A policy for every task in :data:`TASKS`, ready for ``AdaCalConfig(policies=...)`` (and the
        table when ``return_table``).
    """
    if not callable(evaluate):
        raise TypeError(f"evaluate must be callable, got {type(evaluate).__name__}")
    thetas = _check_grid("grid_theta_mid", grid_theta_mid, 0.0, low_open=False)
    gammas = _check_grid("grid_gamma", grid_gamma, 0.0, low_open=True)
    check_float("density_cap", density_cap, 0.0, 1.0, low_open=True)
    if isinstance(tasks, str) or not isinstance(tasks, Sequence) or not tasks:
        raise ValueError(f"tasks must be a non-empty sequence of task names, got {tasks!r}")
    for t in tasks:
        check_choice("tasks", t, TASKS)
    if len(set(tasks)) != len(tasks):
        raise ValueError(f"tasks has duplicates: {list(tasks)}")
    base = dict(DEFAULT_POLICIES if base_policies is None else base_policies)
    missing = [t for t in TASKS if t not in base]
    if missing:
        raise ValueError(f"base_policies must define every task {list(TASKS)}; missing {missing}")
    for name, pol in base.items():
        if not isinstance(pol, TaskPolicy):
            raise TypeError(f"base_policies[{name!r}] must be a TaskPolicy, got {type(pol).__name__}")

    out = dict(base)
    table: list[dict[str, Any]] = []
    for t in tasks:
        b0 = base[t]
        rows = []
        for order, (theta, gamma) in enumerate((x, g) for x in thetas for g in gammas):
            cand = dataclasses.replace(b0, theta_mid=theta, gamma=gamma)
            res = evaluate(t, cand)
            if not isinstance(res, (tuple, list)) or len(res) != 2:
                raise ValueError(f"evaluate must return (accuracy, density), got {res!r}")
            acc, dens = float(res[0]), float(res[1])
            if not (math.isfinite(acc) and math.isfinite(dens)) or dens < 0:
                raise ValueError(f"evaluate returned a non-finite or negative value: ({acc}, {dens})")
            row = {"task": t, "theta_mid": theta, "gamma": gamma, "accuracy": acc, "density": dens}
            row.update(feasible=dens <= density_cap, chosen=False)
            rows.append((row, order, cand))
        feasible = [r for r in rows if r[0]["feasible"]]
        if feasible:
            best = min(
                feasible,
                key=lambda r: (
                    -r[0]["accuracy"],
                    r[0]["density"],
                    round(abs(r[0]["theta_mid"] - b0.theta_mid) + abs(r[0]["gamma"] - b0.gamma), 9),
                    r[1],
                ),
            )
            best[0]["chosen"] = True
            out[t] = best[2]
        else:
            warnings.warn(
                f"AdaCal calibration: no grid point of task {t!r} meets density_cap={density_cap:g} "
                f"(lowest density {min(r[0]['density'] for r in rows):.3f}); keeping the base policy",
                UserWarning,
                stacklevel=2,
            )
        table.extend(r[0] for r in rows)
    return (out, table) if return_table else out


def _default_is_correct(new_ids: list[int], answer: Any) -> bool:
    target = [int(answer)] if isinstance(answer, (int, np.integer)) else [int(a) for a in answer]
    return new_ids[: len(target)] == target


def model_evaluator(
    model: Any,
    examples: Mapping[str, Sequence[tuple[Any, Any]]],
    config: AdaCalConfig | None = None,
    max_new_tokens: int = 1,
    is_correct: Callable[[list[int], Any], bool] | None = None,
    name: str = "adacal_calibration",
) -> Callable[[str, TaskPolicy], tuple[float, float]]:
    """An ``evaluate(task, policy) -> (accuracy, density)`` for :func:`calibrate_policies` on a model.

    For a task and candidate policy it registers AdaCal (``config`` with that task's policy
    replaced) under ``name``, and for every ``(input_ids, answer)`` of ``examples[task]`` runs one
    AdaCal prefill under the explicit tag :func:`task` (the calibration set is labelled) followed
    by ``max_new_tokens - 1`` dense greedy decode steps, one prompt at a time. Accuracy is the mean
    of ``is_correct(new_ids, answer)``; density the mean of :func:`last_stats` ``["density"]``
    over the prompts. The model's attention implementation is restored afterwards.

    Parameters
    ----------
    model : transformers PreTrainedModel
        A causal LM supporting ``set_attn_implementation``.
    examples : mapping of str to sequence of (input_ids, answer)
        Labelled prompts per task; ``input_ids`` LongTensor ``[1, n]`` or ``[n]``.
    config : AdaCalConfig, optional
        Block size, zones and the other tasks' policies (default ``AdaCalConfig()``).
    max_new_tokens : int
        Greedy tokens generated per prompt (>= 1).
    is_correct : callable, optional
        ``is_correct(new_ids: list[int], answer) -> bool``; default: ``answer`` (an int or a
        sequence of ints) is a prefix of the generated ids.
    name : str
        Name under which the candidate attention functions are registered.
    """
    config = AdaCalConfig() if config is None else config
    if not isinstance(config, AdaCalConfig):
        raise TypeError(f"config must be an AdaCalConfig, got {type(config).__name__}")
    if not isinstance(examples, Mapping) or not examples:
        raise ValueError("examples must be a non-empty mapping task -> [(input_ids, answer), ...]")
    for t, rows in examples.items():
        check_choice("examples task", t, TASKS)
        if not rows:
            raise ValueError(f"examples[{t!r}] is empty")
    check_int("max_new_tokens", max_new_tokens, low=1)
    judge = _default_is_correct if is_correct is None else is_correct

    @torch.no_grad()
    def evaluate(task_name: str, policy: TaskPolicy) -> tuple[float, float]:
        from transformers import DynamicCache

        if task_name not in examples:
            raise ValueError(f"no calibration examples for task {task_name!r}")
        cfg = dataclasses.replace(config, policies={**dict(config.policies), task_name: policy})
        register_adacal_attention(cfg, name=name, method="adacal")
        previous = model.config._attn_implementation
        model.set_attn_implementation(name)
        hits, dens = [], []
        try:
            for ids, answer in examples[task_name]:
                ids = torch.as_tensor(ids, dtype=torch.long)
                ids = ids[None] if ids.dim() == 1 else ids
                cache = DynamicCache(config=model.config)
                with task(task_name, input_ids=ids):
                    logits = model(ids, cache=cache, use_cache=True).logits[:, -1]
                dens.append(float(last_stats()["density"]))
                new = []
                for step in range(max_new_tokens):
                    nxt = logits.argmax(-1, keepdim=True)
                    new.append(int(nxt))
                    if step + 1 < max_new_tokens:
                        logits = model(nxt, cache=cache, use_cache=True).logits[:, -1]
                hits.append(bool(judge(new, answer)))
        finally:
            model.set_attn_implementation(previous)
        return float(np.mean(hits)), float(np.mean(dens))

    return evaluate


def calibrate_policies_on_model(
    model: Any,
    examples: Mapping[str, Sequence[tuple[Any, Any]]],
    grid_theta_mid: Sequence[float],
    grid_gamma: Sequence[float],
    density_cap: float,
    config: AdaCalConfig | None = None,
    max_new_tokens: int = 1,
    is_correct: Callable[[list[int], Any], bool] | None = None,
    return_table: bool = False,
) -> dict[str, TaskPolicy] | tuple[dict[str, TaskPolicy], list[dict[str, Any]]]:
    """:func:`calibrate_policies` with :func:`model_evaluator`: tunes the tasks present in ``examples``.

    Returns policies for every task (starting from ``config.policies``), to be used as
    ``dataclasses.replace(config, policies=result)``.
    """
    config = AdaCalConfig() if config is None else config
    evaluate = model_evaluator(model, examples, config, max_new_tokens, is_correct)
    return calibrate_policies(
        evaluate,
        grid_theta_mid,
        grid_gamma,
        density_cap,
        tasks=tuple(examples),
        base_policies=config.policies,
        return_table=return_table,
    )

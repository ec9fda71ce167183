"""The two closed-form design criteria and their Monte-Carlo counterparts.

A. Uniform vs quality-weighted averaging of ``N`` branch estimates ``y_i = theta + n_i``,
``Var(n_i) = v_i``, with noisy weights ``w_i = w*_i + xi_i - mean(xi)`` (``Var(xi_i) = tau^2``,
``w*_i = (1 / v_i) / P``, ``P = sum_j 1 / v_j``, ``V = sum_i v_i``):

.. math::

    \\mathrm{MSE}_w = 1/P + \\tau^2 (1 - 1/N) V, \\qquad \\mathrm{MSE}_u = V / N^2, \\qquad
    \\tau_*^2 = \\Big(\\frac{1}{N^2} - \\frac{1}{P V}\\Big) \\frac{N}{N - 1}.

B. Generator-critic refinement as ``e_{k+1} = rho e_k + xi_k`` with ``rho = 1 - gamma kappa``:
contractive iff ``0 < gamma kappa < 2``; ``rho`` is estimated by the pooled least-squares slope
(through the origin) of ``e_{k+1}`` on ``e_k``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from neurips26.common.checks import check_float, check_int


def _variances(variances: Any) -> np.ndarray:
    if hasattr(variances, "is_meta") and variances.is_meta:
        raise ValueError("variances is a meta tensor (no data)")
    if hasattr(variances, "detach"):
        variances = variances.detach().cpu().double().numpy()
    try:
        v = np.asarray(variances, dtype=float)
    except (TypeError, ValueError) as err:
        raise TypeError(f"variances must be a 1-D array of positive numbers: {err}") from None
    if v.ndim != 1 or v.size < 2:
        raise ValueError(f"variances must be a 1-D array with at least 2 entries, got shape {v.shape}")
    if not np.isfinite(v).all() or (v <= 0).any():
        raise ValueError("variances must be finite and > 0")
    if v.max() / v.min() > 1e12:
        raise ValueError("variances span more than 12 orders of magnitude; the closed forms lose precision")
    return v


def uniform_vs_weighted_threshold(variances: Any) -> float:
    """``tau*^2``: weight-noise variance above which equal-weight averaging beats quality weighting.

    ``0`` for equal variances, positive otherwise (Cauchy-Schwarz: ``P V >= N^2``).
    """
    v = _variances(variances)
    n = v.size
    p, big_v = float(np.sum(1.0 / v)), float(np.sum(v))
    value = (1.0 / n**2 - 1.0 / (p * big_v)) * n / (n - 1)
    return max(0.0, value) if value > -1e-15 else value


def averaging_mse(variances: Any, tau2: float) -> tuple[float, float]:
    """Closed-form ``(MSE_weighted, MSE_uniform)`` for weight-noise variance ``tau2 >= 0``."""
    v = _variances(variances)
    tau2 = check_float("tau2", tau2, 0.0)
    if not math.isfinite(tau2):
        raise ValueError("tau2 must be finite")
    n = v.size
    p, big_v = float(np.sum(1.0 / v)), float(np.sum(v))
    return 1.0 / p + tau2 * (1.0 - 1.0 / n) * big_v, big_v / n**2


def uniform_beats_weighted(variances: Any, tau2: float) -> bool:
    """True when equal-weight averaging has the lower MSE (``tau2 > tau*^2``)."""
    weighted, uniform = averaging_mse(variances, tau2)
    return uniform < weighted


def simulate_averaging_mse(
    variances: Any, tau2: float, *, n_draws: int = 200_000, rng: np.random.Generator
) -> tuple[float, float]:
    """Monte-Carlo ``(MSE_weighted, MSE_uniform)`` under the model of :func:`averaging_mse`."""
    v = _variances(variances)
    tau2 = check_float("tau2", tau2, 0.0)
    check_int("n_draws", n_draws, low=1)
    n = v.size
    w_star = (1.0 / v) / np.sum(1.0 / v)
    noise = rng.standard_normal((n_draws, n)) * np.sqrt(v)
    xi = rng.standard_normal((n_draws, n)) * math.sqrt(tau2)
    w = w_star + xi - xi.mean(axis=1, keepdims=True)
    err_w = np.sum(w * noise, axis=1)
    err_u = noise.mean(axis=1)
    return float(np.mean(err_w**2)), float(np.mean(err_u**2))


def empirical_crossover(
    variances: Any, tau2_grid: Sequence[float], *, n_draws: int = 200_000, rng: np.random.Generator
) -> float:
    """Smallest ``tau^2`` (linear interpolation on ``tau2_grid``) where the simulated uniform MSE drops
    below the simulated weighted MSE; ``inf`` if it never does on the grid.

    Every grid point reuses the same branch-noise and weight-noise draws (common random numbers, the
    weight noise scaled by ``sqrt(tau^2)``), so the simulated difference is smooth in ``tau^2``.
    """
    v = _variances(variances)
    grid = [check_float("tau2_grid", t, 0.0) for t in tau2_grid]
    if len(grid) < 2 or grid != sorted(grid):
        raise ValueError("tau2_grid must be sorted with at least 2 values")
    check_int("n_draws", n_draws, low=1)
    n = v.size
    w_star = (1.0 / v) / np.sum(1.0 / v)
    noise = rng.standard_normal((n_draws, n)) * np.sqrt(v)
    eta = rng.standard_normal((n_draws, n))
    eta -= eta.mean(axis=1, keepdims=True)
    mse_u = float(np.mean(noise.mean(axis=1) ** 2))
    diffs = []
    for t in grid:
        err_w = np.sum((w_star + math.sqrt(t) * eta) * noise, axis=1)
        diffs.append(float(np.mean(err_w**2)) - mse_u)  # > 0: uniform wins
    if diffs[0] > 0:
        return grid[0]
    for i in range(1, len(grid)):
        if diffs[i - 1] <= 0 < diffs[i]:
            a, b = diffs[i - 1], diffs[i]
            return grid[i - 1] + (grid[i] - grid[i - 1]) * (-a) / (b - a)
    return math.inf


def contraction_factor(gamma: float, kappa: float) -> float:
    """``rho = 1 - gamma * kappa`` of the linear refinement model (``gamma > 0``, ``kappa in [-1, 1]``)."""
    gamma = check_float("gamma", gamma, 0.0, low_open=True)
    kappa = check_float("kappa", kappa, -1.0, 1.0)
    if not math.isfinite(gamma):
        raise ValueError("gamma must be finite")
    return 1.0 - gamma * kappa


def is_contractive(gamma: float, kappa: float) -> bool:
    """``|1 - gamma kappa| < 1``, i.e. ``0 < gamma kappa < 2``."""
    return abs(contraction_factor(gamma, kappa)) < 1.0


def simulate_refinement(
    rho: float, e0: float, rounds: int, *, noise: float = 0.0, rng: np.random.Generator
) -> np.ndarray:
    """One trajectory ``e_0 .. e_rounds`` of ``e_{k+1} = rho e_k + xi_k``, ``xi ~ N(0, noise^2)``."""
    rho = check_float("rho", rho)
    e0 = check_float("e0", e0)
    check_int("rounds", rounds, low=1)
    noise = check_float("noise", noise, 0.0)
    out = np.empty(rounds + 1)
    out[0] = e0
    for k in range(rounds):
        out[k + 1] = rho * out[k] + noise * rng.standard_normal()
    return out


def estimate_contraction(trajectories: Sequence[Sequence[float]]) -> float:
    """Pooled least-squares slope through the origin of ``e_{k+1}`` on ``e_k``: ``sum e_k e_{k+1} / sum e_k^2``."""
    if isinstance(trajectories, np.ndarray) and trajectories.ndim == 1:
        trajectories = [trajectories]
    xs, ys = [], []
    for i, tr in enumerate(trajectories):
        arr = np.asarray(tr, dtype=float)
        if arr.ndim != 1:
            raise ValueError(f"trajectories[{i}] must be 1-D, got shape {arr.shape}")
        if not np.isfinite(arr).all():
            raise ValueError(f"trajectories[{i}] contains NaN or inf")
        if arr.size >= 2:
            xs.append(arr[:-1])
            ys.append(arr[1:])
    if not xs:
        raise ValueError("trajectories must hold at least one trajectory with >= 2 points")
    x, y = np.concatenate(xs), np.concatenate(ys)
    denom = float(np.dot(x, x))
    if denom == 0:
        raise ValueError("trajectories are all zero before their last point; the slope is undefined")
    return float(np.dot(x, y) / denom)


__all__ = [
    "uniform_vs_weighted_threshold",
    "averaging_mse",
    "uniform_beats_weighted",
    "simulate_averaging_mse",
    "empirical_crossover",
    "contraction_factor",
    "is_contractive",
    "simulate_refinement",
    "estimate_contraction",
]

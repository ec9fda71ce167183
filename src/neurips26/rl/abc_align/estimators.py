"""Plug-in estimators of ABC-Align and PPI++: sufficient statistics, the MSE-optimal ``c`` and PPI++'s ``λ``.

Per-example corrections ``d_i`` ``(m, dim)`` are reduced to ``(count, Σ d_i, Σ ||d_i||²)`` (what
ranks all-reduce), from which :func:`correction_from_statistics` computes the debiased bias energy,
the variance term and ``ĉ``. :class:`RowWindow` keeps the most recent row per example.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from neurips26.common.checks import check_float, check_int


# ----------------------------------------------------------------------------- estimators
def _as_rows(name: str, d: torch.Tensor) -> torch.Tensor:
    if not isinstance(d, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(d).__name__}")
    if d.is_meta:
        raise ValueError(f"{name} is a meta tensor (no data); pass a materialised tensor")
    if d.dtype == torch.bool or d.is_complex():
        raise TypeError(f"{name} must be a real-valued tensor, got {d.dtype}")
    if d.ndim == 1:
        d = d.unsqueeze(1)
    if d.ndim != 2:
        raise ValueError(f"{name} must have shape (m, dim) or (m,), got {tuple(d.shape)}")
    if not bool(torch.isfinite(d).all()):
        raise ValueError(f"{name} contains NaN or inf")
    return d.detach().double()


def correction_statistics(per_example_corrections: torch.Tensor) -> tuple[int, torch.Tensor, float]:
    """Sufficient statistics ``(count, Σ_i d_i, Σ_i ||d_i||²)`` of per-example corrections.

    These are what ranks all-reduce before :func:`correction_from_statistics`, so that every rank
    computes the same ``c``.

    Shapes: ``per_example_corrections`` ``(m, dim)`` (or ``(m,)``) -> ``(int, (dim,), float)``.
    """
    return _statistics(_as_rows("per_example_corrections", per_example_corrections))


def _statistics(d: torch.Tensor) -> tuple[int, torch.Tensor, float]:
    """:func:`correction_statistics` of rows already checked by :func:`_as_rows`."""
    return d.shape[0], d.sum(0), float(d.pow(2).sum())


def correction_from_statistics(
    count: int,
    total: torch.Tensor,
    total_sq: float,
    n_human_total: int,
    c_min: float = 0.0,
    c_max: float = 1.0,
) -> dict[str, float]:
    """Plug-in bias/variance estimates and ``ĉ`` from sufficient statistics.

    .. math::  \\hat\\mu = \\tfrac{1}{W}\\textstyle\\sum_i d_i, \\quad
               \\mathrm{tr}\\hat\\Sigma = \\frac{\\sum_i\\lVert d_i\\rVert^2 - W\\lVert\\hat\\mu\\rVert^2}{W-1},
               \\quad \\hat b^2 = \\max(\\lVert\\hat\\mu\\rVert^2 - \\mathrm{tr}\\hat\\Sigma / W, 0),
               \\quad \\hat c = \\mathrm{clip}\\Big(\\frac{\\hat b^2}{\\hat b^2 + \\mathrm{tr}\\hat\\Sigma/n
               + 10^{-12}}, c_{min}, c_{max}\\Big)

    Returns
    -------
    dict with ``c_hat``, ``mu_sq`` (``||μ̂||²``), ``bias_sq`` (``b̂²``), ``trace`` (``tr Σ̂``),
    ``var_term`` (``tr Σ̂ / n``) and ``window`` (``W``).
    """
    check_int("count", int(count), low=2)
    check_int("n_human_total", n_human_total, low=1)
    check_float("c_min", c_min, 0.0, 1.0)
    check_float("c_max", c_max, 0.0, 1.0)
    if c_min > c_max:
        raise ValueError(f"c_min ({c_min}) must not exceed c_max ({c_max})")
    total = total.double()
    mu = total / count
    mu_sq = float(mu.pow(2).sum())
    trace = max((float(total_sq) - count * mu_sq) / (count - 1), 0.0)
    bias_sq = max(mu_sq - trace / count, 0.0)
    var_term = trace / n_human_total
    c_hat = bias_sq / (bias_sq + var_term + 1e-12)
    c_hat = min(max(c_hat, c_min), c_max)
    return {
        "c_hat": c_hat,
        "mu_sq": mu_sq,
        "bias_sq": bias_sq,
        "trace": trace,
        "var_term": var_term,
        "window": float(count),
    }


def estimate_correction_strength(
    per_example_corrections: torch.Tensor,
    n_human_total: int,
    c_min: float = 0.0,
    c_max: float = 1.0,
) -> float:
    """The MSE-minimising correction strength ``ĉ`` from per-example corrections ``d_i``.

    ``ĉ`` minimises the estimated :math:`\\mathrm{MSE}(c) = (1-c)^2 \\hat b^2 + c^2\\,\\mathrm{tr}
    \\hat\\Sigma / n` over ``[c_min, c_max]`` (see :func:`correction_from_statistics`).

    Parameters
    ----------
    per_example_corrections : Tensor ``(m, dim)`` or ``(m,)``
        ``d_i`` for ``m >= 2`` human examples (gradient space) or loss differences (loss space).
    n_human_total : int
        Size ``n`` of the whole human set (the correction averages over all of it).
    c_min, c_max : float
        Clip range inside [0, 1].

    Returns
    -------
    float in ``[c_min, c_max]``.
    """
    d = _as_rows("per_example_corrections", per_example_corrections)
    if d.shape[0] < 2:
        raise ValueError(
            f"per_example_corrections needs at least 2 rows to estimate a variance, got {d.shape[0]}"
        )
    count, total, total_sq = correction_statistics(d)
    return correction_from_statistics(count, total, total_sq, n_human_total, c_min, c_max)["c_hat"]


def ppi_pp_lambda(
    grad_true: torch.Tensor,
    grad_pseudo_h: torch.Tensor,
    grad_pseudo_p: torch.Tensor,
    n: int,
    N: int,
    clip: bool = True,
) -> float:
    """Power-tuning parameter of PPI++ (Angelopoulos, Duchi, Zrnic 2023, arXiv 2311.01453), trace form.

    .. math::  \\hat\\lambda = \\frac{\\mathrm{tr}\\,\\mathrm{Cov}(g^{h}, g^{\\hat p}_H)}
                                    {(1 + n/N)\\,\\mathrm{tr}\\,\\mathrm{Var}(g^{\\hat p})}

    ``Cov`` is estimated on the ``n`` human examples (gradients under human and under pseudo
    labels); ``Var`` of the pseudo-label gradient on the human and pseudo examples pooled. For mean
    estimation (``ℓ = (θ - y)²/2``) this is ``Cov(Y, F) / ((1 + n/N) Var(F))``.

    Parameters
    ----------
    grad_true, grad_pseudo_h : Tensor ``(m, dim)`` or ``(m,)``
        Per-example gradients on human pairs under the human and the pseudo label (same ``m >= 2``).
    grad_pseudo_p : Tensor ``(k, dim)`` or ``(k,)``
        Per-example gradients on pseudo pairs under the pseudo label (``k >= 0``).
    n, N : int
        Sizes of the whole human set and pseudo pool.
    clip : bool
        Clip ``λ̂`` to [0, 1] (the range in which PPI++ interpolates between human-only and PPI).

    Returns
    -------
    float
    """
    gt, gh = _as_rows("grad_true", grad_true), _as_rows("grad_pseudo_h", grad_pseudo_h)
    if gt.shape != gh.shape:
        raise ValueError(f"grad_true {tuple(gt.shape)} and grad_pseudo_h {tuple(gh.shape)} must match")
    if gt.shape[0] < 2:
        raise ValueError("need at least 2 human examples to estimate a covariance")
    gp = _as_rows("grad_pseudo_p", grad_pseudo_p) if grad_pseudo_p.numel() else gh.new_zeros(0, gh.shape[1])
    if gp.shape[1] != gh.shape[1]:
        raise ValueError(f"grad_pseudo_p has dim {gp.shape[1]}, human gradients {gh.shape[1]}")
    check_int("n", n, low=1)
    check_int("N", N, low=1)
    return _ppi_pp_lambda(gt, gh, gp, n, N, clip)


def _ppi_pp_lambda(gt: torch.Tensor, gh: torch.Tensor, gp: torch.Tensor, n: int, N: int, clip: bool) -> float:
    """:func:`ppi_pp_lambda` on rows already checked by :func:`_as_rows` (``gp`` may have no rows)."""
    cov = float(((gt - gt.mean(0)) * (gh - gh.mean(0))).sum() / (gt.shape[0] - 1))
    pooled = torch.cat([gh, gp], 0)
    var = float((pooled - pooled.mean(0)).pow(2).sum() / (pooled.shape[0] - 1))
    lam = cov / ((1.0 + n / N) * var) if var > 0 else 0.0
    return min(max(lam, 0.0), 1.0) if clip else lam


class RowWindow:
    """The most recent ``size`` per-example rows, one per example.

    Rows pushed with ``ids`` replace the earlier row of the same example (so a small human set that
    is revisited every few steps is not counted several times, which would make the debiasing
    ``tr Σ / W`` too small); rows without ids are all kept as distinct examples. Stored in float64.
    """

    def __init__(self, size: int) -> None:
        self.size = check_int("size", size, low=1)
        self._data: torch.Tensor | None = None
        self._ids = torch.zeros(0, dtype=torch.long)
        self._auto = 0
        self.dim: int | None = None

    def push(self, rows: torch.Tensor, ids: torch.Tensor | Sequence[int] | None = None) -> None:
        self._push(_as_rows("rows", rows), ids)

    def _push(self, rows: torch.Tensor, ids: torch.Tensor | Sequence[int] | None) -> None:
        """:meth:`push` for rows already checked and converted by :func:`_as_rows`."""
        if self.dim is not None and rows.shape[1] != self.dim:
            raise ValueError(f"rows have dim {rows.shape[1]}, the window holds dim {self.dim}")
        if ids is None:  # distinct examples: negative keys never collide with given ids
            keys = -1 - torch.arange(self._auto, self._auto + rows.shape[0])
            self._auto += rows.shape[0]
        else:
            keys = torch.as_tensor(ids, dtype=torch.long).reshape(-1)
            if keys.numel() != rows.shape[0]:
                raise ValueError(f"ids has {keys.numel()} entries for {rows.shape[0]} rows")
            if bool((keys < 0).any()):
                raise ValueError("ids must be non-negative")
            if torch.unique(keys).numel() != keys.numel():  # a repeated id keeps its last row
                last = torch.zeros(keys.numel(), dtype=torch.bool)
                seen: set[int] = set()
                for j in range(keys.numel() - 1, -1, -1):
                    if int(keys[j]) not in seen:
                        seen.add(int(keys[j]))
                        last[j] = True
                keys, rows = keys[last], rows[last]
        self.dim = rows.shape[1]
        if self._data is None or keys.numel() >= self.size:  # the new rows alone fill the window
            self._data, self._ids = rows, keys
        else:
            keep = ~torch.isin(self._ids, keys)
            self._data = torch.cat([self._data[keep], rows], 0)
            self._ids = torch.cat([self._ids[keep], keys], 0)
        if self._ids.numel() > self.size:
            self._data, self._ids = self._data[-self.size :], self._ids[-self.size :]

    def rows(self) -> torch.Tensor:
        """The kept rows, oldest first: ``(len(self), dim)``."""
        if self._data is None:
            return torch.zeros(0, self.dim or 1, dtype=torch.float64)
        return self._data

    def __len__(self) -> int:
        return int(self._ids.numel())


__all__ = [
    "RowWindow",
    "correction_from_statistics",
    "correction_statistics",
    "estimate_correction_strength",
    "ppi_pp_lambda",
]

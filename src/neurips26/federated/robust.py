"""Aggregation rules (AGRs) of federated learning on flattened client updates.

Every rule maps a stack of ``n`` client updates (each flattened to ``d`` numbers) to one update.

.. math::

    \\text{fedavg}(U, p) = \\sum_i p_i U_i / \\sum_i p_i, \\qquad
    \\text{median}(U)_k = \\operatorname{median}_i U_{ik}, \\qquad
    \\text{trimmed}_\\beta(U)_k = \\frac{1}{n - 2b} \\sum_{j=b+1}^{n-b} U_{(j)k},\\; b = \\lfloor \\beta n \\rfloor

Krum (Blanchard et al., 2017) scores client ``i`` by the sum of squared distances to its
``n - f - 2`` nearest other updates and returns the lowest-scoring update; Multi-Krum averages the
``multi`` lowest-scoring ones (``multi = n - f`` by default). Krum assumes ``n > 2f + 2``.

The coordinate-wise median of an even number of values is the mean of the two middle ones (NumPy's
convention, not ``torch.median``'s lower median), so every rule here is permutation invariant.

Shapes
------
``updates``: ``(n, d)`` float tensor; ``weights``: ``(n,)``; every rule returns ``(d,)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from neurips26.common.checks import check_float, check_int

__all__ = [
    "AGGREGATORS",
    "aggregate",
    "coordinate_median",
    "fedavg",
    "krum",
    "krum_scores",
    "krum_select",
    "multi_krum",
    "trimmed_mean",
]


def _check_updates(updates: torch.Tensor) -> torch.Tensor:
    if not isinstance(updates, torch.Tensor):
        raise TypeError(f"updates must be a torch.Tensor of shape (n, d), got {type(updates).__name__}")
    if updates.ndim != 2:
        raise ValueError(f"updates must have shape (n, d), got {tuple(updates.shape)}")
    if updates.shape[0] == 0:
        raise ValueError("updates must hold at least one client update (empty client set)")
    if not torch.is_floating_point(updates):
        raise TypeError(f"updates must be floating point, got {updates.dtype}")
    return updates


def fedavg(updates: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Weighted mean of the client updates (FedAvg's server step).

    Parameters
    ----------
    updates : torch.Tensor, shape (n, d)
    weights : torch.Tensor, shape (n,), optional
        Non-negative weights (e.g. sample counts) with a positive sum; uniform when omitted.

    Returns
    -------
    torch.Tensor, shape (d,)
    """
    updates = _check_updates(updates)
    if weights is None:
        return updates.mean(dim=0)
    weights = torch.as_tensor(weights, dtype=updates.dtype, device=updates.device)
    if weights.shape != (updates.shape[0],):
        raise ValueError(f"weights must have shape ({updates.shape[0]},), got {tuple(weights.shape)}")
    if (weights < 0).any() or not torch.isfinite(weights).all() or float(weights.sum()) <= 0:
        raise ValueError("weights must be finite, non-negative and sum to a positive number")
    return (weights[:, None] * updates).sum(dim=0) / weights.sum()


def coordinate_median(updates: torch.Tensor) -> torch.Tensor:
    """Coordinate-wise median (mean of the two middle values when ``n`` is even).

    Parameters
    ----------
    updates : torch.Tensor, shape (n, d)

    Returns
    -------
    torch.Tensor, shape (d,)
    """
    updates = _check_updates(updates)
    return torch.quantile(updates, 0.5, dim=0) if updates.shape[0] > 1 else updates[0].clone()


def trimmed_mean(updates: torch.Tensor, beta: float = 0.2) -> torch.Tensor:
    """Coordinate-wise trimmed mean dropping the ``floor(beta * n)`` largest and smallest values.

    Parameters
    ----------
    updates : torch.Tensor, shape (n, d)
    beta : float, default 0.2
        Fraction trimmed at each end, in ``[0, 0.5)``; at least one value must remain.

    Returns
    -------
    torch.Tensor, shape (d,)
    """
    updates = _check_updates(updates)
    check_float("beta", beta, 0.0, 0.5, high_open=True)
    n = updates.shape[0]
    b = int(beta * n)
    if n - 2 * b < 1:
        raise ValueError(f"trimmed_mean with beta={beta} leaves no value of n={n} updates")
    ordered = torch.sort(updates, dim=0).values
    return ordered[b : n - b].mean(dim=0)


def krum_scores(updates: torch.Tensor, num_malicious: int) -> torch.Tensor:
    """Krum score of every update: sum of squared distances to its ``n - f - 2`` nearest others.

    Parameters
    ----------
    updates : torch.Tensor, shape (n, d)
    num_malicious : int
        Assumed number ``f`` of Byzantine clients; requires ``n > 2f + 2``.

    Returns
    -------
    torch.Tensor, shape (n,)
    """
    updates = _check_updates(updates)
    n = updates.shape[0]
    check_int("num_malicious", num_malicious, low=0)
    if n <= 2 * num_malicious + 2:
        raise ValueError(f"Krum needs n > 2 * num_malicious + 2, got n={n}, num_malicious={num_malicious}")
    dist = torch.cdist(updates.double(), updates.double()).pow(2)
    dist.fill_diagonal_(float("inf"))
    closest = torch.sort(dist, dim=1).values[:, : n - num_malicious - 2]
    return closest.sum(dim=1)


def krum_select(updates: torch.Tensor, num_malicious: int, multi: int = 1) -> torch.Tensor:
    """Indices of the ``multi`` lowest Krum scores (ties broken by client index), shape ``(multi,)``."""
    scores = krum_scores(updates, num_malicious)
    check_int("multi", multi, low=1, high=updates.shape[0])
    order = sorted(range(len(scores)), key=lambda i: (float(scores[i]), i))
    return torch.tensor(order[:multi], dtype=torch.long)


def krum(updates: torch.Tensor, num_malicious: int, multi: int = 1) -> torch.Tensor:
    """Krum (``multi = 1``) or the mean of the ``multi`` best-scored updates.

    Parameters
    ----------
    updates : torch.Tensor, shape (n, d)
    num_malicious : int
        Assumed number ``f`` of Byzantine clients (``n > 2f + 2``).
    multi : int, default 1
        How many lowest-score updates to average.

    Returns
    -------
    torch.Tensor, shape (d,)
    """
    idx = krum_select(updates, num_malicious, multi)
    return updates[idx].mean(dim=0)


def multi_krum(updates: torch.Tensor, num_malicious: int, multi: int | None = None) -> torch.Tensor:
    """Multi-Krum: mean of the ``multi`` (default ``n - f``) lowest Krum scores, shape ``(d,)``."""
    n = _check_updates(updates).shape[0]
    return krum(updates, num_malicious, n - num_malicious if multi is None else multi)


def _fedavg_rule(updates, weights=None, num_malicious=0, beta=0.2):
    return fedavg(updates, weights)


def _median_rule(updates, weights=None, num_malicious=0, beta=0.2):
    return coordinate_median(updates)


def _trimmed_rule(updates, weights=None, num_malicious=0, beta=0.2):
    return trimmed_mean(updates, beta)


def _krum_rule(updates, weights=None, num_malicious=0, beta=0.2):
    return krum(updates, num_malicious)


def _multikrum_rule(updates, weights=None, num_malicious=0, beta=0.2):
    return multi_krum(updates, num_malicious)


AGGREGATORS: dict[str, Callable[..., torch.Tensor]] = {
    "fedavg": _fedavg_rule,
    "median": _median_rule,
    "trimmed_mean": _trimmed_rule,
    "krum": _krum_rule,
    "multi_krum": _multikrum_rule,
}
"""Rule name -> ``fn(updates, weights=None, num_malicious=0, beta=0.2) -> (d,)``."""


def aggregate(
    rule: str,
    updates: torch.Tensor,
    weights: torch.Tensor | None = None,
    num_malicious: int = 0,
    beta: float = 0.2,
) -> torch.Tensor:
    """Apply the aggregation rule named ``rule`` (one of :data:`AGGREGATORS`).

    Parameters
    ----------
    rule : str
        ``"fedavg"``, ``"median"``, ``"trimmed_mean"``, ``"krum"`` or ``"multi_krum"``.
    updates : torch.Tensor, shape (n, d)
    weights : torch.Tensor, shape (n,), optional
        Used by ``fedavg`` only.
    num_malicious : int
        Assumed Byzantine count for Krum-type rules.
    beta : float
        Trim fraction of ``trimmed_mean``.

    Returns
    -------
    torch.Tensor, shape (d,)
    """
    if rule not in AGGREGATORS:
        raise ValueError(f"unknown aggregation rule {rule!r}; choose one of {sorted(AGGREGATORS)}")
    return AGGREGATORS[rule](updates, weights=weights, num_malicious=num_malicious, beta=beta)

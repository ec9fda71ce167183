r"""Aggregation rules (AGRs) of federated learning on flattened client updates.

Every rule maps a stack of ``n`` client updates (each flattened to ``d`` numbers) to one update.

.. math::

    \text{fedavg}(U, p) = \sum_i p_i U_i / \sum_i p_i, \qquad
    \text{median}(U)_k = \operatorname{median}_i U_{ik}, \qquad
    \text{trimmed}_\beta(U)_k = \frac{1}{n - 2b} \sum_{j=b+1}^{n-b} U_{(j)k},\; b = \lfloor \beta n \rfloor

Krum (Blanchard et al., 2017, "Machine Learning with Adversaries: Byzantine Tolerant Gradient
Descent") scores client ``i`` by the sum of squared distances to its ``n - f - 2`` nearest other
updates and returns the lowest-scoring update; Multi-Krum averages the ``multi`` lowest-scoring ones
(``multi = n - f`` by default). Krum assumes ``n > 2f + 2``.

.. math::

    \text{score}(i) = \sum_{j \in N_i} \lVert U_i - U_j \rVert^2, \quad
    |N_i| = n - f - 2 \text{ nearest } j \ne i

Bulyan (El Mhamdi, Guerraoui and Rouault, 2018, "The Hidden Vulnerability of Distributed Learning
in Byzantium") needs ``n >= 4f + 3``: it selects ``theta = n - 2f`` updates by applying Krum
recursively, then averages, per coordinate, the ``beta = theta - 2f`` selected values closest to
their median.

Relation to Flower (flwr 1.42, ``flwr.serverapp.strategy``); ``tests/federated/test_robust_flower.py``
checks these functions equal to Flower's strategies on the same updates (values and selected
clients), for every rule and several Byzantine counts:

* ``FedAvg``, ``FedMedian`` (``numpy.median``), ``FedTrimmedAvg`` (``scipy.stats.trim_mean``):
  :func:`fedavg` (weights = ``num-examples``), :func:`coordinate_median`, :func:`trimmed_mean`.
* ``Krum``/``MultiKrum``: same scores and selection, but Flower (i) averages the selected models
  weighted by ``num-examples`` (here: ``weights=``; the paper's Multi-Krum is a plain mean),
  (ii) uses ``max(1, n - f - 2)`` neighbours and accepts any ``n`` (the paper, and this module,
  require ``n > 2f + 2``), (iii) computes distances as ``|a|^2 + |b|^2 - 2ab`` in the records'
  dtype (cancellation in float32 when parameters are large against their differences; here:
  direct float64 differences) and (iv) breaks score ties by an unstable ``argsort`` (here: index).
* ``Bulyan``: Flower's first stage is one-shot Multi-Krum over all ``n`` (``theta`` lowest scores),
  not the paper's recursive Krum, so the selected set can differ (:func:`bulyan` with
  ``selection="multikrum"`` reproduces Flower's, the default ``"krum"`` the paper's); below
  ``4f + 3`` replies Flower skips the round with a warning, here it is a ``ValueError``.

The coordinate-wise median of an even number of values is the mean of the two middle ones (NumPy's
convention, not ``torch.median``'s lower median), so every rule here is permutation invariant.

Non-finite updates. One NaN or infinite entry would poison every rule (a NaN mean, a NaN median,
a Krum score that no ordering can rank). Every rule therefore takes ``nonfinite``:

* ``"raise"`` (default): a :class:`ValueError` naming the offending clients;
* ``"drop"``: the offending clients are removed before the rule runs (the assumed Byzantine count
  ``f`` is unchanged), their number is logged on this module's logger at WARNING level and
  returned by :func:`filter_nonfinite`, and Krum-type selections report indices of the original
  clients. If every update is non-finite, :class:`ValueError`.

Means are computed as ``sum_i x_i / k`` (weights normalised first), so finite updates of any
magnitude give a finite result. Krum's ranking is NaN-safe by construction: distances are computed without the ``|a|^2 + |b|^2 -
2ab`` expansion (which turns two huge finite updates into ``inf - inf``), any non-finite score is
mapped to ``+inf`` (never selected before a finite one), and the order is a stable ``argsort``
(ties broken by client index).

Shapes
------
``updates``: ``(n, d)`` float tensor; ``weights``: ``(n,)``; every rule returns ``(d,)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from neurips26.common.checks import check_choice, check_float, check_int

__all__ = [
    "AGGREGATORS",
    "BULYAN_SELECTIONS",
    "aggregate",
    "bulyan",
    "bulyan_select",
    "NONFINITE_POLICIES",
    "FilteredUpdates",
    "coordinate_median",
    "fedavg",
    "filter_nonfinite",
    "krum",
    "krum_scores",
    "krum_select",
    "multi_krum",
    "trimmed_mean",
]


logger = logging.getLogger(__name__)

NONFINITE_POLICIES = ("raise", "drop")
_WORK_DTYPES = (torch.float32, torch.float64)


def _check_updates(updates: torch.Tensor) -> torch.Tensor:
    if not isinstance(updates, torch.Tensor):
        raise TypeError(f"updates must be a torch.Tensor of shape (n, d), got {type(updates).__name__}")
    if updates.ndim != 2:
        raise ValueError(f"updates must have shape (n, d), got {tuple(updates.shape)}")
    if updates.shape[0] == 0:
        raise ValueError("updates must hold at least one client update (empty client set)")
    if updates.shape[1] == 0:
        raise ValueError("updates must have at least one coordinate (d >= 1), got shape (n, 0)")
    if not torch.is_floating_point(updates):
        raise TypeError(f"updates must be floating point, got {updates.dtype}")
    if updates.device.type == "meta":
        raise ValueError("updates must hold data (a meta tensor has none)")
    return updates


@dataclass
class FilteredUpdates:
    """Result of :func:`filter_nonfinite`.

    Attributes
    ----------
    updates : torch.Tensor, shape (k, d)
        The finite updates, in their original order.
    weights : torch.Tensor or None, shape (k,)
        Their weights, if weights were given.
    kept : torch.Tensor, shape (k,), int64
        Original indices of the kept clients.
    dropped : torch.Tensor, shape (n - k,), int64
        Original indices of the dropped clients.
    """

    updates: torch.Tensor
    weights: torch.Tensor | None
    kept: torch.Tensor
    dropped: torch.Tensor


def filter_nonfinite(
    updates: torch.Tensor, weights: torch.Tensor | None = None, nonfinite: str = "raise"
) -> FilteredUpdates:
    """Apply the non-finite policy to a stack of client updates.

    Parameters
    ----------
    updates : torch.Tensor, shape (n, d)
    weights : torch.Tensor, shape (n,), optional
        Filtered along with the updates.
    nonfinite : {"raise", "drop"}
        ``"raise"``: :class:`ValueError` if any update holds a NaN or an infinity.
        ``"drop"``: remove those clients and log how many were dropped.

    Returns
    -------
    FilteredUpdates
    """
    updates = _check_updates(updates)
    check_choice("nonfinite", nonfinite, NONFINITE_POLICIES)
    finite = torch.isfinite(updates).all(dim=1)
    idx = torch.arange(updates.shape[0])
    if bool(finite.all()):
        return FilteredUpdates(updates, weights, idx, idx[:0])
    bad = idx[~finite.cpu()]
    if nonfinite == "raise":
        raise ValueError(
            f"updates of clients {bad.tolist()} hold NaN or infinite entries; pass nonfinite='drop' to "
            "drop such clients instead"
        )
    if bad.numel() == updates.shape[0]:
        raise ValueError(f"every one of the {updates.shape[0]} client updates holds NaN or infinite entries")
    logger.warning(
        "dropped %d of %d client updates holding NaN or infinite entries (clients %s)",
        bad.numel(), updates.shape[0], bad.tolist(),
    )  # fmt: skip
    kept = idx[finite.cpu()]
    w = None if weights is None else weights[kept.to(weights.device)]
    return FilteredUpdates(updates[kept.to(updates.device)], w, kept, bad)


def _work(updates: torch.Tensor) -> torch.Tensor:
    """float16/bfloat16 are computed in float32 (CPU sort/quantile kernels need it)."""
    return updates if updates.dtype in _WORK_DTYPES else updates.float()


def _mean(x: torch.Tensor) -> torch.Tensor:
    """Mean over dim 0 that cannot overflow: every partial sum of ``x_i / k`` is at most ``max |x|``."""
    return (x / x.shape[0]).sum(dim=0)


def fedavg(
    updates: torch.Tensor, weights: torch.Tensor | None = None, nonfinite: str = "raise"
) -> torch.Tensor:
    """Weighted mean of the client updates (FedAvg's server step).

    Parameters
    ----------
    updates : torch.Tensor, shape (n, d)
    weights : torch.Tensor, shape (n,), optional
        Non-negative weights (e.g. sample counts) with a positive sum; uniform when omitted.
    nonfinite : {"raise", "drop"}
        Policy for updates holding NaN/inf (see the module docstring).

    Returns
    -------
    torch.Tensor, shape (d,)
    """
    updates = _check_updates(updates)
    if weights is not None:
        weights = torch.as_tensor(weights, dtype=updates.dtype, device=updates.device)
        if weights.shape != (updates.shape[0],):
            raise ValueError(f"weights must have shape ({updates.shape[0]},), got {tuple(weights.shape)}")
        if not bool(torch.isfinite(weights).all()) or bool((weights < 0).any()):
            raise ValueError("weights must be finite and non-negative")
    kept = filter_nonfinite(updates, weights, nonfinite)
    x = _work(kept.updates)
    if kept.weights is None:
        return _mean(x).to(updates.dtype)
    w = kept.weights.to(x.dtype)
    if float(w.max()) <= 0:
        raise ValueError("weights of the aggregated clients must sum to a positive number")
    w = w / w.max()  # then w.sum() <= k cannot overflow, and sum_i p_i x_i stays within max |x|
    p = w / w.sum()
    return (p[:, None] * x).sum(dim=0).to(updates.dtype)


def coordinate_median(updates: torch.Tensor, nonfinite: str = "raise") -> torch.Tensor:
    """Coordinate-wise median (mean of the two middle values when ``n`` is even).

    Parameters
    ----------
    updates : torch.Tensor, shape (n, d)
    nonfinite : {"raise", "drop"}
        Policy for updates holding NaN/inf.

    Returns
    -------
    torch.Tensor, shape (d,)
    """
    x = _work(filter_nonfinite(updates, None, nonfinite).updates)
    out = torch.quantile(x, 0.5, dim=0) if x.shape[0] > 1 else x[0].clone()
    return out.to(updates.dtype)


def trimmed_mean(updates: torch.Tensor, beta: float = 0.2, nonfinite: str = "raise") -> torch.Tensor:
    """Coordinate-wise trimmed mean dropping the ``floor(beta * n)`` largest and smallest values.

    Parameters
    ----------
    updates : torch.Tensor, shape (n, d)
    beta : float, default 0.2
        Fraction trimmed at each end, in ``[0, 0.5)``; at least one value must remain.
    nonfinite : {"raise", "drop"}
        Policy for updates holding NaN/inf (``n`` is counted after dropping).

    Returns
    -------
    torch.Tensor, shape (d,)
    """
    _check_updates(updates)
    check_float("beta", beta, 0.0, 0.5, high_open=True)
    x = _work(filter_nonfinite(updates, None, nonfinite).updates)
    n = x.shape[0]
    b = int(beta * n)
    if n - 2 * b < 1:
        raise ValueError(f"trimmed_mean with beta={beta} leaves no value of n={n} updates")
    ordered = torch.sort(x, dim=0).values
    return _mean(ordered[b : n - b]).to(updates.dtype)


def _check_krum(n: int, num_malicious: int) -> None:
    check_int("num_malicious", num_malicious, low=0)
    if n <= 2 * num_malicious + 2:
        raise ValueError(
            f"Krum needs n > 2 * num_malicious + 2 client updates, got n={n}, num_malicious={num_malicious}"
        )


def _scores(x: torch.Tensor, num_malicious: int) -> torch.Tensor:
    """Krum scores of the rows of finite ``x`` ``(k, d)``, float64, non-finite mapped to ``+inf``."""
    k = x.shape[0]
    x = x.double()
    dist = torch.cdist(x, x, compute_mode="donot_use_mm_for_euclid_dist").pow(2)
    dist.fill_diagonal_(float("inf"))
    closest = torch.sort(dist, dim=1).values[:, : k - num_malicious - 2]
    scores = closest.sum(dim=1)
    return torch.where(torch.isnan(scores), torch.full_like(scores, float("inf")), scores)


def krum_scores(updates: torch.Tensor, num_malicious: int, nonfinite: str = "raise") -> torch.Tensor:
    """Krum score of every update: sum of squared distances to its ``n - f - 2`` nearest others.

    Parameters
    ----------
    updates : torch.Tensor, shape (n, d)
    num_malicious : int
        Assumed number ``f`` of Byzantine clients; requires ``n > 2f + 2`` (after dropping).
    nonfinite : {"raise", "drop"}
        Policy for updates holding NaN/inf; dropped clients score ``+inf``.

    Returns
    -------
    torch.Tensor, shape (n,), float64
    """
    _check_updates(updates)
    check_int("num_malicious", num_malicious, low=0)
    kept = filter_nonfinite(updates, None, nonfinite)
    _check_krum(kept.updates.shape[0], num_malicious)
    scores = torch.full((updates.shape[0],), float("inf"), dtype=torch.float64)
    scores[kept.kept] = _scores(kept.updates, num_malicious).cpu()
    return scores


def krum_select(
    updates: torch.Tensor, num_malicious: int, multi: int = 1, nonfinite: str = "raise"
) -> torch.Tensor:
    """Indices of the ``multi`` lowest Krum scores, ties broken by client index, shape ``(multi,)``.

    The ranking is a stable ``argsort`` of float64 scores in which any non-finite score is ``+inf``;
    with ``nonfinite="drop"`` at most the number of finite clients can be selected.
    """
    _check_updates(updates)
    check_int("num_malicious", num_malicious, low=0)
    kept = filter_nonfinite(updates, None, nonfinite)
    check_int("multi", multi, low=1, high=kept.updates.shape[0])
    scores = krum_scores(updates, num_malicious, nonfinite)
    return torch.argsort(scores, stable=True)[:multi]


def krum(
    updates: torch.Tensor,
    num_malicious: int,
    multi: int = 1,
    nonfinite: str = "raise",
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Krum (``multi = 1``) or the mean of the ``multi`` best-scored updates.

    Parameters
    ----------
    updates : torch.Tensor, shape (n, d)
    num_malicious : int
        Assumed number ``f`` of Byzantine clients (``n > 2f + 2``).
    multi : int, default 1
        How many lowest-score updates to average.
    nonfinite : {"raise", "drop"}
        Policy for updates holding NaN/inf.
    weights : torch.Tensor, shape (n,), optional
        Average the selected updates weighted by these (Flower's ``MultiKrum`` weighs by
        ``num-examples``); ``None`` gives the paper's plain mean.

    Returns
    -------
    torch.Tensor, shape (d,)
    """
    idx = krum_select(updates, num_malicious, multi, nonfinite)
    if weights is None:
        return _mean(_work(updates[idx.to(updates.device)])).to(updates.dtype)
    weights = torch.as_tensor(weights, dtype=updates.dtype, device=updates.device)
    if weights.shape != (updates.shape[0],):
        raise ValueError(f"weights must have shape ({updates.shape[0]},), got {tuple(weights.shape)}")
    return fedavg(updates[idx], weights[idx])


def multi_krum(
    updates: torch.Tensor,
    num_malicious: int,
    multi: int | None = None,
    nonfinite: str = "raise",
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Multi-Krum: mean of the ``multi`` (default ``k - f``, ``k`` finite clients) lowest Krum scores, ``(d,)``.

    ``weights`` as in :func:`krum`.
    """
    _check_updates(updates)
    check_int("num_malicious", num_malicious, low=0)
    if multi is None:
        multi = filter_nonfinite(updates, None, nonfinite).updates.shape[0] - num_malicious
    return krum(updates, num_malicious, multi, nonfinite, weights)


BULYAN_SELECTIONS = ("krum", "multikrum")


def _one_shot_scores(x: torch.Tensor, num_malicious: int) -> torch.Tensor:
    """Krum scores with ``max(1, k - f - 2)`` neighbours (defined for every ``k >= 2``)."""
    k = x.shape[0]
    if k == 1:
        return torch.zeros(1, dtype=torch.float64)
    x = x.double()
    dist = torch.cdist(x, x, compute_mode="donot_use_mm_for_euclid_dist").pow(2)
    dist.fill_diagonal_(float("inf"))
    closest = torch.sort(dist, dim=1).values[:, : max(1, k - num_malicious - 2)]
    scores = closest.sum(dim=1)
    return torch.where(torch.isnan(scores), torch.full_like(scores, float("inf")), scores)


def bulyan_select(
    updates: torch.Tensor, num_malicious: int, selection: str = "krum", nonfinite: str = "raise"
) -> torch.Tensor:
    """Bulyan's first stage: indices of the ``theta = n - 2f`` selected updates, in selection order.

    Parameters
    ----------
    updates : torch.Tensor, shape (n, d)
    num_malicious : int
        Assumed Byzantine count ``f``; Bulyan needs ``n >= 4f + 3`` (after dropping).
    selection : {"krum", "multikrum"}
        ``"krum"`` (El Mhamdi et al., 2018): apply Krum to the remaining updates ``theta`` times,
        moving the winner to the selection set each time (Krum on ``k`` remaining updates sums the
        ``max(1, k - f - 2)`` nearest squared distances; the last one left is taken as is). Exact
        score ties, which mutual nearest neighbours always produce once one neighbour is summed,
        go to the lexicographically smallest update, so the rule stays permutation invariant.
        ``"multikrum"`` (Flower's ``Bulyan``): score all ``n`` updates once and keep the ``theta``
        lowest scores.
    nonfinite : {"raise", "drop"}

    Returns
    -------
    torch.Tensor, shape (n - 2f,), int64 (original client indices)
    """
    _check_updates(updates)
    check_int("num_malicious", num_malicious, low=0)
    check_choice("selection", selection, BULYAN_SELECTIONS)
    kept = filter_nonfinite(updates, None, nonfinite)
    n, f = kept.updates.shape[0], num_malicious
    if n < 4 * f + 3:
        raise ValueError(
            f"Bulyan needs n >= 4 * num_malicious + 3 client updates, got n={n}, num_malicious={f}"
        )
    theta = n - 2 * f
    x = kept.updates
    if selection == "multikrum":
        order = torch.argsort(_one_shot_scores(x, f), stable=True)[:theta]
    else:
        remaining = list(range(n))
        chosen: list[int] = []
        for _ in range(theta):
            scores = _one_shot_scores(x[remaining], f)
            tied = [remaining[i] for i in torch.nonzero(scores == scores.min()).flatten().tolist()]
            winner = min(tied, key=lambda i: x[i].tolist())  # exact ties: smallest update, lexicographically
            chosen.append(winner)
            remaining.remove(winner)
        order = torch.tensor(chosen, dtype=torch.long)
    return kept.kept[order]


def bulyan(
    updates: torch.Tensor, num_malicious: int, selection: str = "krum", nonfinite: str = "raise"
) -> torch.Tensor:
    """Bulyan (El Mhamdi, Guerraoui and Rouault, 2018): Krum-based selection, then a trimmed mean around the median.

    With ``S`` the ``theta = n - 2f`` updates of :func:`bulyan_select` and ``beta = theta - 2f``,
    coordinate ``k`` of the result is the mean of the ``beta`` values ``S_{.k}`` closest to
    ``median(S_{.k})`` (ties broken by selection order).

    Parameters
    ----------
    updates : torch.Tensor, shape (n, d)
    num_malicious : int
        ``f``; requires ``n >= 4f + 3``.
    selection : {"krum", "multikrum"}
        The paper's recursive Krum, or Flower's one-shot Multi-Krum (see :func:`bulyan_select`).
    nonfinite : {"raise", "drop"}

    Returns
    -------
    torch.Tensor, shape (d,)
    """
    idx = bulyan_select(updates, num_malicious, selection, nonfinite)
    sel = _work(updates[idx.to(updates.device)]).double()
    beta = sel.shape[0] - 2 * num_malicious
    med = torch.quantile(sel, 0.5, dim=0) if sel.shape[0] > 1 else sel[0]
    closest = torch.argsort((sel - med).abs(), dim=0, stable=True)[:beta]
    return _mean(torch.gather(sel, 0, closest)).to(updates.dtype)


def _fedavg_rule(updates, weights=None, num_malicious=0, beta=0.2, nonfinite="raise"):
    return fedavg(updates, weights, nonfinite)


def _median_rule(updates, weights=None, num_malicious=0, beta=0.2, nonfinite="raise"):
    return coordinate_median(updates, nonfinite)


def _trimmed_rule(updates, weights=None, num_malicious=0, beta=0.2, nonfinite="raise"):
    return trimmed_mean(updates, beta, nonfinite)


def _krum_rule(updates, weights=None, num_malicious=0, beta=0.2, nonfinite="raise"):
    return krum(updates, num_malicious, 1, nonfinite)


def _multikrum_rule(updates, weights=None, num_malicious=0, beta=0.2, nonfinite="raise"):
    return multi_krum(updates, num_malicious, None, nonfinite)


def _bulyan_rule(updates, weights=None, num_malicious=0, beta=0.2, nonfinite="raise"):
    return bulyan(updates, num_malicious, "krum", nonfinite)


AGGREGATORS: dict[str, Callable[..., torch.Tensor]] = {
    "fedavg": _fedavg_rule,
    "median": _median_rule,
    "trimmed_mean": _trimmed_rule,
    "krum": _krum_rule,
    "multikrum": _multikrum_rule,
    "multi_krum": _multikrum_rule,
    "bulyan": _bulyan_rule,
}
"""Rule name -> ``fn(updates, weights=None, num_malicious=0, beta=0.2, nonfinite="raise") -> (d,)``.

``"multi_krum"`` is an alias of ``"multikrum"`` (Flower's spelling); ``"bulyan"`` is the paper's
recursive-Krum Bulyan.
"""


def aggregate(
    rule: str,
    updates: torch.Tensor,
    weights: torch.Tensor | None = None,
    num_malicious: int = 0,
    beta: float = 0.2,
    nonfinite: str = "raise",
) -> torch.Tensor:
    """Apply the aggregation rule named ``rule`` (one of :data:`AGGREGATORS`).

    Parameters
    ----------
    rule : str
        ``"fedavg"``, ``"median"``, ``"trimmed_mean"``, ``"krum"``, ``"multikrum"`` (alias
        ``"multi_krum"``) or ``"bulyan"``.
    updates : torch.Tensor, shape (n, d)
    weights : torch.Tensor, shape (n,), optional
        Used by ``fedavg`` only.
    num_malicious : int
        Assumed Byzantine count for Krum-type rules.
    beta : float
        Trim fraction of ``trimmed_mean``.
    nonfinite : {"raise", "drop"}
        Policy for updates holding NaN/inf.

    Returns
    -------
    torch.Tensor, shape (d,)
    """
    if not isinstance(rule, str) or rule not in AGGREGATORS:
        raise ValueError(f"unknown aggregation rule {rule!r}; choose one of {sorted(AGGREGATORS)}")
    return AGGREGATORS[rule](
        updates, weights=weights, num_malicious=num_malicious, beta=beta, nonfinite=nonfinite
    )

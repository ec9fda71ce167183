r"""Ownership verification: binomial thresholds and the :class:`Verification` record.

.. math::
    \tau(\alpha) = \min\{\tau : P[\mathrm{Bin}(K, p_0) \ge \tau] \le \alpha\}

optionally raised above the ``(1 - alpha)`` quantile of matches over independently trained null models;
ownership is claimed iff ``M >= tau``.

Shapes
------
Scalars only: ``num_bits`` ``K``, ``matches`` ``M``; an empirical null is a ``[R]`` tensor or list of ints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from neurips26.common.checks import check_float, check_int


def binomial_tail(num_bits: int, matches: int, p: float = 0.5) -> float:
    """``P[Binomial(num_bits, p) >= matches]`` (the verification p-value)."""
    from scipy.stats import binom

    check_int("num_bits", num_bits, low=1)
    check_int("matches", matches)
    return float(binom.sf(matches - 1, num_bits, p))


def binomial_threshold(num_bits: int, alpha: float, p: float = 0.5) -> int:
    r"""Smallest ``tau`` with ``P[Binomial(num_bits, p) >= tau] <= alpha``.

    Parameters
    ----------
    num_bits : int
        ``K >= 1`` verification bits (or key inputs).
    alpha : float
        Target false-positive rate in the open interval ``(0, 1)``.
    p : float
        Per-bit chance of a match under the null (1/2 for balanced bits; ``1/C`` for a trigger set).

    Returns
    -------
    int
        ``tau`` in ``[0, K + 1]``; ``K + 1`` means no match count is significant at this ``alpha``.
        For ``K = 64``, ``p = 1/2``: 42 at ``1e-2``, 45 at ``1e-3``, 51 at ``1e-6``.
    """
    from scipy.stats import binom

    check_int("num_bits", num_bits, low=1)
    check_float("alpha", alpha, 0.0, 1.0, low_open=True, high_open=True)
    check_float("p", p, 0.0, 1.0, low_open=True, high_open=True)
    ks = np.arange(0, num_bits + 2)
    tails = binom.sf(ks - 1, num_bits, p)
    ok = np.flatnonzero(tails <= alpha)
    return int(ks[ok[0]])


def _empirical_threshold(null_matches: Tensor | Sequence[int], alpha: float) -> int:
    """One more than the ``(1 - alpha)`` quantile (higher interpolation) of null match counts."""
    null = torch.as_tensor(null_matches, dtype=torch.float64).flatten()
    if null.numel() == 0:
        raise ValueError("empirical_null must hold at least one null match count")
    if not torch.isfinite(null).all():
        raise ValueError("empirical_null contains NaN or inf")
    q = torch.quantile(null, 1.0 - alpha, interpolation="higher")
    return int(math.floor(float(q))) + 1


@dataclass
class Verification:
    """Outcome of one ownership test.

    Attributes
    ----------
    bit_accuracy : float
        ``matches / num_bits``.
    matches : int
        Number of matching bits (or key inputs classified as the owner's target).
    threshold : int
        Decision threshold used: ``max(binomial, empirical)``.
    p_value : float
        ``P[Binomial(num_bits, p0) >= matches]``.
    owned : bool
        ``matches >= threshold``.
    num_bits : int
        ``K``.
    binomial_threshold : int
        ``tau(alpha)`` from the binomial null.
    empirical_threshold : int or None
        One more than the ``(1 - alpha)`` quantile of the null match counts, when they were given.
    """

    bit_accuracy: float
    matches: int
    threshold: int
    p_value: float
    owned: bool
    num_bits: int = 0
    binomial_threshold: int = 0
    empirical_threshold: int | None = None

    @property
    def margin(self) -> float:
        """``(matches - threshold) / num_bits``: accuracy above the decision threshold (negative = not owned)."""
        return (self.matches - self.threshold) / self.num_bits


def _verification(matches: int, num_bits: int, alpha: float, p0: float, empirical_null: Any) -> Verification:
    tau_b = binomial_threshold(num_bits, alpha, p0)
    tau_e = _empirical_threshold(empirical_null, alpha) if empirical_null is not None else None
    tau = max(tau_b, tau_e) if tau_e is not None else tau_b
    return Verification(
        bit_accuracy=matches / num_bits,
        matches=int(matches),
        threshold=int(tau),
        p_value=binomial_tail(num_bits, int(matches), p0),
        owned=bool(matches >= tau),
        num_bits=num_bits,
        binomial_threshold=tau_b,
        empirical_threshold=tau_e,
    )

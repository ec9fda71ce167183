"""Bit allocation: the static demand-ordered allocation and the online bit controller."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import torch

from neurips26.common.checks import check_float
from neurips26.inference.adakvq.aad import AADProfile, AADTracker
from neurips26.inference.adakvq.config import AdaKVQConfig, _rung_cost, kv_ladder


def _demands(profile: AADProfile | torch.Tensor | Sequence[float], kappa: float) -> list[float]:
    check_float("kappa", kappa, 0.0)
    if isinstance(profile, torch.Tensor) and (profile.is_meta or profile.dtype == torch.bool):
        raise TypeError(
            f"profile must be a real-valued tensor with data, got {profile.dtype} on {profile.device}"
        )
    demand = (
        profile.demand(kappa)
        if isinstance(profile, AADProfile)
        else torch.as_tensor(profile, dtype=torch.float64)
    )
    demand = [float(v) for v in demand.reshape(-1)]
    if not demand:
        raise ValueError("profile has no layers")
    if not all(math.isfinite(v) for v in demand):
        raise ValueError("profile contains NaN or inf demands")
    return demand


def allocate_kv_bits(
    profile: AADProfile | torch.Tensor | Sequence[float],
    bits: Sequence[int] = (2, 3, 4),
    avg_bits: float = 2.5,
    kappa: float = 1.0,
    key_bonus: int = 0,
) -> tuple[list[int], list[int]]:
    """Static per-layer key and value bit allocation from the AAD demand under a mean-bit budget.

    Every layer starts on rung 0 of :func:`kv_ladder`; the highest-demand layer that can move up one
    rung without breaking the budget or the monotonicity (no layer above a layer of higher demand;
    ties -> deeper layer) is raised, until none can. The budget counts keys and values separately:
    ``mean_l (key_bits_l + value_bits_l) / 2 <= avg_bits``.

    Parameters
    ----------
    profile : AADProfile, or per-layer demands ``D_l``
    bits : allowed bit-widths ``B``
    avg_bits : budget on the mean bits; at least the cost of rung 0 and at most ``max(B)``
    kappa : demand ``mu + kappa sigma`` (AADProfile only)
    key_bonus : int >= 0, steps of ``B`` by which keys sit above values (capped at ``max(B)``)

    Returns
    -------
    (key_bits, value_bits) : two lists of int, one entry per layer; both monotone in the demand.
    """
    ladder = kv_ladder(bits, key_bonus)
    check_float("avg_bits", avg_bits)
    lo, hi = ladder[0][1], ladder[-1][1]
    if not lo <= avg_bits <= hi:
        raise ValueError(f"avg_bits must lie in [min(bits), max(bits)] = [{lo}, {hi}]")
    cost = [_rung_cost(r) for r in ladder]
    if avg_bits < cost[0]:
        raise ValueError(
            f"avg_bits ({avg_bits}) is below the cheapest rung with key_bonus={key_bonus}: {cost[0]}"
        )
    demand = _demands(profile, kappa)
    n = len(demand)
    order = sorted(range(n), key=lambda i: (-demand[i], -i))
    rung = [0] * n
    budget = avg_bits * n + 1e-9
    while True:
        total = sum(cost[r] for r in rung)
        for rank, i in enumerate(order):
            new = rung[i] + 1
            if new >= len(ladder):
                continue
            if total - cost[rung[i]] + cost[new] > budget:
                continue
            if rank and any(rung[j] < new for j in order[:rank]):
                continue
            rung[i] = new
            break
        else:
            break
    return [ladder[r][0] for r in rung], [ladder[r][1] for r in rung]


def allocate_bits(
    profile: AADProfile | torch.Tensor | Sequence[float],
    bits: Sequence[int] = (2, 3, 4),
    avg_bits: float = 2.5,
    kappa: float = 1.0,
) -> list[int]:
    """Static per-layer bit allocation (same bits for keys and values) under a mean-bit budget.

    Start every layer at ``min(B)``; repeatedly upgrade the highest-demand layer by one step of ``B``
    while the mean stays ``<= avg_bits`` and no layer ends with more bits than a layer of higher
    demand (ties -> deeper layer). Equals ``allocate_kv_bits(..., key_bonus=0)[1]``.

    Parameters
    ----------
    profile : AADProfile, or per-layer demands ``D_l``
    bits : allowed bit-widths ``B``
    avg_bits : budget on the mean bits (``min(B) <= avg_bits <= max(B)``)
    kappa : demand ``mu + kappa sigma`` (AADProfile only)

    Returns
    -------
    list of int, one per layer; mean <= ``avg_bits``; monotone in the demand.
    """
    return allocate_kv_bits(profile, bits, avg_bits, kappa, key_bonus=0)[1]


class BitController:
    """Chooses the key and value bit-widths of each flushed block (online modulation + global budget).

    The controller works on the rungs of ``config.ladder`` (:func:`kv_ladder`); with
    ``key_bonus = 0`` a rung is simply a bit-width of ``B`` shared by keys and values.

    Parameters
    ----------
    config : AdaKVQConfig
    base_bits : list of int
        Static allocation per layer, as *value* bit-widths (keys follow the ladder).
    profile : AADProfile or None
        Needed for online modulation thresholds.
    tracker : AADTracker or None
        Source of the online nAAD; without it the static allocation is used (warned once).

    Attributes
    ----------
    bit_elems, elems : list
        Per layer: sum of ``bits * scalars`` and number of K/V scalars over the stored blocks (keys and
        values counted separately).
    log : list of (layer, block_index, value_bits)
    kv_log : list of (layer, block_index, key_bits, value_bits)
    """

    def __init__(
        self,
        config: AdaKVQConfig,
        base_bits: Sequence[int],
        profile: AADProfile | None,
        tracker: AADTracker | None,
    ):
        self.config = config
        self.ladder = config.ladder
        self.levels = list(config.bits)
        values = [v for _, v in self.ladder]
        base_bits = [int(b) for b in base_bits]
        bad = [b for b in base_bits if b not in values]
        if bad:
            raise ValueError(f"base_bits must come from {tuple(values)}, got {bad}")
        self.base_rungs = [values.index(b) for b in base_bits]
        self.base_bits = base_bits
        self.base_key_bits = [self.ladder[r][0] for r in self.base_rungs]
        self.profile = profile
        self.tracker = tracker
        n = len(self.base_bits)
        self.bit_elems = [0.0] * n
        self.elems = [0] * n
        self.log: list[tuple[int, int, int]] = []
        self.kv_log: list[tuple[int, int, int, int]] = []
        self._warned = False

    def _cost(self, rung: int) -> float:
        return _rung_cost(self.ladder[rung])

    def _layer_mean(self, i: int, extra_bits: float = 0.0, extra_elems: int = 0) -> float:
        elems = self.elems[i] + extra_elems
        if elems == 0:
            return self._cost(self.base_rungs[i])
        return (self.bit_elems[i] + extra_bits) / elems

    def running_mean(self, layer_idx: int | None = None, bits: float = 0, n_elems: int = 0) -> float:
        """Layer-averaged mean code bits per K/V scalar (layers without blocks count at their base rung),
        optionally with a prospective block of ``n_elems`` scalars at mean ``bits`` added to ``layer_idx``."""
        means = [
            self._layer_mean(i, bits * n_elems, n_elems) if i == layer_idx else self._layer_mean(i)
            for i in range(len(self.base_bits))
        ]
        return sum(means) / len(means)

    def token_mean(self) -> float:
        """Token-weighted mean code bits of all stored blocks."""
        e = sum(self.elems)
        return sum(self.bit_elems) / e if e else float("nan")

    def desired_rung(self, layer_idx: int) -> int:
        """Rung asked for by the online rule (the base rung when static or without measurements)."""
        base = self.base_rungs[layer_idx]
        if not self.config.online or self.profile is None:
            return base
        if self.tracker is None:
            if not self._warned:
                warnings.warn("AdaKVQCache has no AADTracker: using the static allocation", stacklevel=4)
                self._warned = True
            return base
        d = self.tracker.layer_demand(layer_idx)
        if d is None:
            return base
        mu, sigma = float(self.profile.mean[layer_idx]), float(self.profile.std[layer_idx])
        if d > mu + self.config.kappa_hi * sigma and base + 1 < len(self.ladder):
            return base + 1
        if d < mu - self.config.kappa_lo * sigma and base > 0:
            return base - 1
        return base

    def desired(self, layer_idx: int) -> int:
        """Value bit-width asked for by the online rule (see :meth:`desired_rung`)."""
        return self.ladder[self.desired_rung(layer_idx)][1]

    def choose_kv(self, layer_idx: int, n_elems: int, block_index: int = -1) -> tuple[int, int]:
        """``(key_bits, value_bits)`` for a block of ``n_elems`` K+V scalars (half keys, half values)
        of layer ``layer_idx``, accounted for.

        The desired rung is lowered step by step while the layer-averaged mean would exceed
        ``avg_bits + budget_slack``; rung 0 never raises the mean, so the bound always holds.
        """
        rung = self.desired_rung(layer_idx)
        limit = self.config.avg_bits + self.config.budget_slack
        while rung > 0 and self.running_mean(layer_idx, self._cost(rung), n_elems) > limit + 1e-12:
            rung -= 1
        kbits, vbits = self.ladder[rung]
        self.bit_elems[layer_idx] += self._cost(rung) * n_elems
        self.elems[layer_idx] += n_elems
        self.log.append((layer_idx, block_index, vbits))
        self.kv_log.append((layer_idx, block_index, kbits, vbits))
        return kbits, vbits

    def choose(self, layer_idx: int, n_elems: int, block_index: int = -1) -> int:
        """Like :meth:`choose_kv` but returns the value bit-width only (= key bits when ``key_bonus = 0``)."""
        return self.choose_kv(layer_idx, n_elems, block_index)[1]

    def release(self, layer_idx: int, bits: float, n_elems: int) -> None:
        """Forget a removed block of ``n_elems`` scalars at mean ``bits`` (crop)."""
        self.bit_elems[layer_idx] -= bits * n_elems
        self.elems[layer_idx] -= n_elems

"""AdaKVQ configuration and the per-layer key/value bit ladder."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from neurips26.common.checks import check_float, check_int
from neurips26.inference.quant import check_bits


@dataclass
class AdaKVQConfig:
    """Configuration of AdaKVQ.

    Parameters
    ----------
    bits : tuple of int
        Allowed bit-widths ``B`` (each in 1, 2, 3, 4, 8 or 16), e.g. ``(2, 3, 4)``; extreme ``(1, 2, 4)``.
    avg_bits : float
        Target average code bits ``b_bar``, within ``[min(B), max(B)]``.
    kappa, kappa_hi, kappa_lo : float >= 0
        Demand ``mu + kappa sigma``; online thresholds ``mu +/- kappa_hi/lo sigma``.
    ema : float in [0, 1)
        EMA factor of the online nAAD (``d <- ema d + (1 - ema) nAAD``).
    group_size, residual_length : int
        KIVI-layout block size ``G`` (tokens) and full-precision window ``R``.
    value_group_size : int or None
        Channels per value group (``None`` -> ``min(head_dim, 32)``); must divide ``head_dim``.
    budget_slack : float >= 0
        ``epsilon``: the running mean may not exceed ``avg_bits + budget_slack``.
    online : bool
        Online modulation (False = static mixed precision, the ablation).
    key_bonus : int >= 0
        Steps of ``B`` by which keys sit above values (capped at ``max(B)``); see :func:`kv_ladder`.
        The budget counts keys and values separately, so ``avg_bits`` must be at least the cost of the
        lowest rung, ``(B_min(key_bonus, |B|-1) + min(B)) / 2``.
    """

    bits: tuple[int, ...] = (2, 3, 4)
    avg_bits: float = 2.5
    kappa: float = 1.0
    kappa_hi: float = 1.0
    kappa_lo: float = 1.0
    ema: float = 0.9
    group_size: int = 32
    residual_length: int = 32
    value_group_size: int | None = None
    budget_slack: float = 0.05
    online: bool = True
    key_bonus: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.bits, int) or not isinstance(self.bits, Sequence) or not self.bits:
            raise TypeError(f"bits must be a non-empty tuple of ints, got {self.bits!r}")
        self.bits = tuple(sorted({check_bits("bits", b) for b in self.bits}))
        check_float("avg_bits", self.avg_bits)
        if not min(self.bits) <= self.avg_bits <= max(self.bits):
            raise ValueError(
                f"avg_bits must lie in [min(bits), max(bits)] = [{min(self.bits)}, {max(self.bits)}]"
            )
        for name in ("kappa", "kappa_hi", "kappa_lo", "budget_slack"):
            check_float(name, getattr(self, name), 0.0)
        check_float("ema", self.ema, 0.0, 1.0, high_open=True)
        check_int("group_size", self.group_size, low=1)
        check_int("residual_length", self.residual_length, low=0)
        if self.value_group_size is not None:
            check_int("value_group_size", self.value_group_size, low=1)
        check_int("key_bonus", self.key_bonus, low=0)
        floor = _rung_cost(kv_ladder(self.bits, self.key_bonus)[0])
        if self.avg_bits < floor:
            raise ValueError(
                f"avg_bits ({self.avg_bits}) is below the cheapest rung with key_bonus={self.key_bonus}: "
                f"(key + value bits) / 2 = {floor}"
            )

    @property
    def ladder(self) -> list[tuple[int, int]]:
        """``(key_bits, value_bits)`` per rung, see :func:`kv_ladder`."""
        return kv_ladder(self.bits, self.key_bonus)


def kv_ladder(bits: Sequence[int], key_bonus: int = 0) -> list[tuple[int, int]]:
    """Rungs ``(key_bits, value_bits)`` of the per-layer bit ladder.

    Rung ``r`` has value bits ``B_r`` (``B`` sorted) and key bits ``B_min(r + key_bonus, |B| - 1)``.

    Examples
    --------
    >>> kv_ladder((2, 3, 4), 1)
    [(3, 2), (4, 3), (4, 4)]
    """
    levels = sorted({check_bits("bits", b) for b in bits})
    if not levels:
        raise ValueError("bits must name at least one bit-width")
    check_int("key_bonus", key_bonus, low=0)
    top = len(levels) - 1
    return [(levels[min(r + key_bonus, top)], levels[r]) for r in range(len(levels))]


def _rung_cost(rung: tuple[int, int]) -> float:
    return (rung[0] + rung[1]) / 2

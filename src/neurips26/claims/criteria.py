"""Criteria and their statistics: how a claim check turns per-seed metrics into a verdict.

A claim's premises (the testbed can show the effect at all) and its criteria (the comparisons) are both
instances of these classes and are judged by the same rule; :mod:`neurips26.claims.base` decides what a
failed premise means for the claim (inconclusive, reason ``testbed``). This module declares no claim.

Statistics (one rule for every criterion)
-----------------------------------------
Each criterion reduces the per-seed metrics to ``n`` values ``v_s`` on a scale where larger is
better (for a paired comparison, ``d_s = sign * (method_s - baseline_s)``). With mean ``m``, sample
standard deviation ``s`` and Student's quantile ``t = t_{conf, n-1}``, the one-sided bounds are

.. math::

    L = m - t \\, s / \\sqrt{n}, \\qquad U = m + t \\, s / \\sqrt{n}.

The criterion is *reproduced* when ``L`` clears its margin, *not reproduced* when ``U`` is at or
below it, and *inconclusive* in between or with fewer seeds than ``min_seeds``. The rule is
symmetric: a noisy miss is inconclusive, not a refutation. ``Within`` applies it to ``|m|``: not
reproduced when ``max(0, |m| - t s / sqrt(n))`` exceeds the tolerance, reproduced when
``|m| + t s / sqrt(n)`` stays within it. With one seed both bounds equal the value.

A metric value that is NaN or infinite counts as the worst value for the criterion's direction (a
diverged arm loses), never as missing. A criterion that raises (a metric or arm that was not
measured) is recorded as ``error`` with its message and makes the claim inconclusive with reason
``error``. Arms with unequal seed counts raise :class:`ValueError`.

Every judgement reports ``n``, ``mean``, ``std``, ``lower_bound``, ``upper_bound`` and the minimal
detectable effect at the seeds used, ``mde = (t_{conf,n-1} + t_{0.8,n-1}) s / sqrt(n)`` (80 % power).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"
ERROR = "error"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)
KINDS = ("evidence", "design")
POWER = 0.8


def _t_quantile(confidence: float, dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(confidence, dof))


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = math.fsum(values) / n
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var)


def bounds(values: Sequence[float], confidence: float = 0.9) -> dict[str, float]:
    """Mean, std, one-sided ``confidence`` bounds and the 80 %-power minimal detectable effect.

    Non-finite values propagate: a ``-inf`` among finite values gives ``mean = L = U = -inf``; a
    mix of ``+inf`` and ``-inf`` gives NaN bounds (undecidable).
    """
    values = [float(v) for v in values]
    n = len(values)
    out = {"n": float(n)}
    if n == 0:
        return {
            **out,
            "mean": math.nan,
            "std": math.nan,
            "lower_bound": math.nan,
            "upper_bound": math.nan,
            "mde": math.nan,
        }
    if not all(math.isfinite(v) for v in values):
        total = sum(values)  # inf, -inf or nan
        std = math.inf if n > 1 else 0.0
        return {**out, "mean": total, "std": std, "lower_bound": total, "upper_bound": total, "mde": math.nan}
    mean, std = _mean_std(values)
    if n == 1:
        return {**out, "mean": mean, "std": 0.0, "lower_bound": mean, "upper_bound": mean, "mde": math.nan}
    se = std / math.sqrt(n)
    t = _t_quantile(confidence, n - 1)
    mde = (t + _t_quantile(POWER, n - 1)) * se
    return {
        **out,
        "mean": mean,
        "std": std,
        "lower_bound": mean - t * se,
        "upper_bound": mean + t * se,
        "mde": mde,
    }


def decide(
    values: Sequence[float], margin: float, *, min_seeds: int, confidence: float, strict: bool = True
) -> tuple[str, dict[str, float]]:
    """The symmetric rule on larger-is-better values against ``margin``.

    ``strict``: reproduced needs ``L > margin`` (not reproduced when ``U <= margin``); otherwise
    reproduced needs ``L >= margin`` (not reproduced when ``U < margin``).
    """
    numbers = bounds(values, confidence)
    lower, upper = numbers["lower_bound"], numbers["upper_bound"]
    se = numbers["std"] / math.sqrt(numbers["n"]) if numbers["n"] > 1 else 0.0
    gap = lower - margin
    numbers["slack_se"] = (
        gap / se if se > 0 and math.isfinite(se) else (math.copysign(math.inf, gap) if gap else 0.0)
    )
    if len(values) < max(1, min_seeds) or math.isnan(lower) or math.isnan(upper):
        return INCONCLUSIVE, numbers
    if (lower > margin) if strict else (lower >= margin):
        return REPRODUCED, numbers
    if (upper <= margin) if strict else (upper < margin):
        return NOT_REPRODUCED, numbers
    return INCONCLUSIVE, numbers


def _worst(value: float, higher_is_better: bool) -> float:
    if math.isfinite(value):
        return value
    return -math.inf if higher_is_better else math.inf


@dataclass(frozen=True)
class Judgement:
    """A criterion's verdict with the rule and the numbers it was computed from."""

    verdict: str
    rule: str
    numbers: dict[str, float]


@dataclass(frozen=True)
class Criterion:
    """Base class: a rule that turns per-seed metrics into a verdict.

    Parameters
    ----------
    metric : str
        Names an entry of the result's ``metrics``.
    label : str, keyword-only
        Short identifier, unique within a claim; headlines refer to criteria by label.
    kind : {"evidence", "design"}, keyword-only
        ``evidence``: an empirical comparison that could go either way. ``design``: holds by
        construction and is checked for bugs.
    arm : str, keyword-only, optional
        The arm judged; defaults to the claim's method.
    """

    metric: str
    label: str = field(default="", kw_only=True)
    kind: str = field(default="evidence", kw_only=True)
    arm: str | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.metric, str) or not self.metric:
            raise ValueError(f"metric must be a non-empty string, got {self.metric!r}")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if not isinstance(self.label, str):
            raise TypeError(f"label must be a string, got {type(self.label).__name__}")
        value = getattr(self, "min_seeds", 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"min_seeds must be an int >= 1, got {value!r}")
        confidence = getattr(self, "confidence", 0.9)
        if not 0.5 <= confidence < 1:
            raise ValueError(f"confidence must be in [0.5, 1), got {confidence!r}")

    def judge(self, metrics: Mapping[str, Mapping[str, Sequence[float]]], method: str) -> Judgement:
        raise NotImplementedError

    def describe(self, method: str) -> str:
        raise NotImplementedError

    @property
    def resolution(self) -> float | None:
        """The smallest difference the criterion must resolve (margin or tolerance), if any."""
        return None

    def arms_used(self, method: str) -> tuple[str, ...]:
        other = getattr(self, "baseline", None)
        return tuple(a for a in (self.arm or method, other) if a)

    def to_dict(self) -> dict[str, Any]:
        return {"type": type(self).__name__, **asdict(self)}

    def _arm(self, metrics: Mapping[str, Mapping[str, Sequence[float]]], arm: str) -> list[float]:
        if self.metric not in metrics:
            raise KeyError(f"criterion needs metric {self.metric!r}; measured: {sorted(metrics)}")
        if arm not in metrics[self.metric]:
            raise KeyError(f"metric {self.metric!r} has no arm {arm!r}; arms: {sorted(metrics[self.metric])}")
        return [float(v) for v in metrics[self.metric][arm]]

    def _over_seeds(self, paired: bool = False) -> str:
        """The seed-count and bound wording every ``describe`` ends with."""
        what = "paired over" if paired else "over"
        return f"{what} >= {self.min_seeds} seeds, one-sided {self.confidence:.0%} bounds"

    def _require_baseline(self) -> None:
        if not getattr(self, "baseline", ""):
            raise ValueError("baseline must name an arm")

    def _pair(self, metrics, method: str, baseline: str) -> tuple[list[float], list[float]]:
        m, b = self._arm(metrics, self.arm or method), self._arm(metrics, baseline)
        if len(m) != len(b):
            raise ValueError(
                f"{self.metric}: arm {self.arm or method!r} has {len(m)} seeds, {baseline!r} has {len(b)}"
            )
        return m, b


def _arm_stats(prefix: str, values: Sequence[float]) -> dict[str, float]:
    mean, std = _mean_std(values) if all(math.isfinite(v) for v in values) else (math.nan, math.nan)
    return {f"{prefix}_mean": mean, f"{prefix}_std": std}


@dataclass(frozen=True)
class Better(Criterion):
    """The arm beats ``baseline`` on ``metric`` by more than ``margin``, paired over seeds."""

    baseline: str = ""
    margin: float = 0.0
    higher_is_better: bool = True
    min_seeds: int = 2
    confidence: float = 0.9

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_baseline()

    @property
    def resolution(self) -> float | None:
        return self.margin if self.margin > 0 else None

    def judge(self, metrics, method):
        m, b = self._pair(metrics, method, self.baseline)
        sign = 1.0 if self.higher_is_better else -1.0
        diffs = []
        for x, y in zip(m, b):
            x, y = _worst(x, self.higher_is_better), _worst(y, self.higher_is_better)
            diffs.append(0.0 if x == y else sign * (x - y))  # both worst: a tie
        verdict, numbers = decide(diffs, self.margin, min_seeds=self.min_seeds, confidence=self.confidence)
        numbers.update(margin=self.margin, **_arm_stats("method", m), **_arm_stats("baseline", b))
        return Judgement(verdict, self.describe(method), numbers)

    def describe(self, method):
        op = ">" if self.higher_is_better else "<"
        direction = "higher" if self.higher_is_better else "lower"
        return (
            f"{self.metric}: {self.arm or method} {op} {self.baseline} by more than {self.margin:g} "
            f"({direction} is better), {self._over_seeds(paired=True)}"
        )


@dataclass(frozen=True)
class _Threshold(Criterion):
    """Shared logic of :class:`AtLeast` and :class:`AtMost`."""

    threshold: float = 0.0
    min_seeds: int = 1
    confidence: float = 0.9
    _higher = True
    _op = ">="

    def judge(self, metrics, method):
        values = [_worst(v, self._higher) for v in self._arm(metrics, self.arm or method)]
        sign = 1.0 if self._higher else -1.0
        verdict, numbers = decide(
            [sign * (v - self.threshold) for v in values],
            0.0,
            min_seeds=self.min_seeds,
            confidence=self.confidence,
            strict=False,
        )
        raw = bounds(values, self.confidence)  # report on the metric's own scale
        numbers.update(
            {k: raw[k] for k in ("mean", "std", "lower_bound", "upper_bound")}, threshold=self.threshold
        )
        return Judgement(verdict, self.describe(method), numbers)

    def describe(self, method):
        return f"{self.metric}: {self.arm or method} {self._op} {self.threshold:g} ({self._over_seeds()})"


@dataclass(frozen=True)
class AtLeast(_Threshold):
    """The arm's ``metric`` is at least ``threshold``: reproduced when ``L >= threshold``."""


@dataclass(frozen=True)
class AtMost(_Threshold):
    """The arm's ``metric`` is at most ``threshold``: reproduced when ``U <= threshold``."""

    _higher = False
    _op = "<="


@dataclass(frozen=True)
class RatioAtLeast(Criterion):
    """The per-seed ratio arm / ``baseline`` (or the arm's metric itself, a ratio) is at least ``ratio``."""

    ratio: float = 1.0
    baseline: str | None = None
    min_seeds: int = 1
    confidence: float = 0.9

    def judge(self, metrics, method):
        if self.baseline is None:
            ratios = [_worst(v, True) for v in self._arm(metrics, self.arm or method)]
        else:
            m, b = self._pair(metrics, method, self.baseline)
            ratios = []
            for x, y in zip(m, b):
                if math.isfinite(y) and y == 0:
                    raise ValueError(
                        f"{self.metric}: baseline {self.baseline!r} has a zero value; ratio undefined"
                    )
                if not math.isfinite(x):
                    ratios.append(-math.inf)
                elif not math.isfinite(y):
                    ratios.append(math.inf)
                else:
                    ratios.append(x / y)
        verdict, numbers = decide(
            [r - self.ratio for r in ratios],
            0.0,
            min_seeds=self.min_seeds,
            confidence=self.confidence,
            strict=False,
        )
        raw = bounds(ratios, self.confidence)
        numbers.update(
            mean=raw["mean"],
            std=raw["std"],
            lower_bound=raw["lower_bound"],
            upper_bound=raw["upper_bound"],
            mean_ratio=raw["mean"],
            threshold=self.ratio,
        )
        return Judgement(verdict, self.describe(method), numbers)

    def describe(self, method):
        what = f"{self.arm or method}/{self.baseline}" if self.baseline else f"{self.arm or method}"
        return f"{self.metric}: ratio {what} >= {self.ratio:g} ({self._over_seeds()})"


@dataclass(frozen=True)
class Within(Criterion):
    """The arm is within ``tolerance`` of ``baseline`` (absolute difference), paired over seeds.

    Reproduced when ``|m| + t s / sqrt(n) <= tolerance``; not reproduced when
    ``max(0, |m| - t s / sqrt(n)) > tolerance``; inconclusive in between.
    """

    baseline: str = ""
    tolerance: float = 0.0
    min_seeds: int = 2
    confidence: float = 0.9

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_baseline()
        if not self.tolerance >= 0:
            raise ValueError(f"tolerance must be >= 0, got {self.tolerance!r}")

    @property
    def resolution(self) -> float | None:
        return self.tolerance

    def judge(self, metrics, method):
        m, b = self._pair(metrics, method, self.baseline)
        diffs = [x - y if math.isfinite(x) and math.isfinite(y) else math.inf for x, y in zip(m, b)]
        numbers = bounds(diffs, self.confidence)
        n = len(diffs)
        if all(math.isfinite(d) for d in diffs) and n:
            half = numbers["upper_bound"] - numbers["mean"]
            gap = abs(numbers["mean"])
            lower_abs, upper_abs = max(0.0, gap - half), gap + half
        else:
            lower_abs = upper_abs = math.inf if n else math.nan
        numbers.update(
            mean_diff=numbers["mean"],
            lower_abs=lower_abs,
            upper_abs=upper_abs,
            tolerance=self.tolerance,
            **_arm_stats("method", m),
            **_arm_stats("baseline", b),
        )
        se = numbers["std"] / math.sqrt(n) if n > 1 else 0.0
        numbers["slack_se"] = (
            (self.tolerance - upper_abs) / se
            if se > 0 and math.isfinite(se)
            else (math.inf if upper_abs <= self.tolerance else -math.inf)
        )
        if n < self.min_seeds or math.isnan(upper_abs):
            verdict = INCONCLUSIVE
        elif upper_abs <= self.tolerance:
            verdict = REPRODUCED
        elif lower_abs > self.tolerance:
            verdict = NOT_REPRODUCED
        else:
            verdict = INCONCLUSIVE
        return Judgement(verdict, self.describe(method), numbers)

    def describe(self, method):
        return (
            f"{self.metric}: |{self.arm or method} - {self.baseline}| <= {self.tolerance:g}, "
            f"{self._over_seeds(paired=True)}"
        )


@dataclass(frozen=True)
class Exact(Criterion):
    """Every seed of ``metric`` (for the arm) equals ``expected`` exactly (1.0 = true). Design by default."""

    expected: float = 1.0
    kind: str = field(default="design", kw_only=True)

    def judge(self, metrics, method):
        values = self._arm(metrics, self.arm or method)
        ok = len(values) > 0 and all(v == self.expected for v in values)
        verdict = REPRODUCED if ok else (INCONCLUSIVE if not values else NOT_REPRODUCED)
        numbers = {
            "n": float(len(values)),
            "min": min(values, default=math.nan),
            "max": max(values, default=math.nan),
            "expected": self.expected,
            "slack_se": math.inf if ok else -math.inf,
        }
        return Judgement(verdict, self.describe(method), numbers)

    def describe(self, method):
        return f"{self.metric}: {self.arm or method} == {self.expected:g} on every seed (exact)"


CRITERIA: dict[str, type[Criterion]] = {
    c.__name__: c for c in (Better, RatioAtLeast, AtLeast, AtMost, Within, Exact)
}


def criterion_from_dict(data: Mapping[str, Any]) -> Criterion:
    """Rebuild a criterion from :meth:`Criterion.to_dict` output."""
    data = dict(data)
    kind = data.pop("type", None)
    if kind not in CRITERIA:
        raise ValueError(f"criterion type must be one of {sorted(CRITERIA)}, got {kind!r}")
    return CRITERIA[kind](**data)


def combine(verdicts: Sequence[str]) -> str:
    """All reproduced -> reproduced; any not reproduced -> not reproduced; else inconclusive."""
    if not verdicts:
        return INCONCLUSIVE
    if any(v == NOT_REPRODUCED for v in verdicts):
        return NOT_REPRODUCED
    if all(v == REPRODUCED for v in verdicts):
        return REPRODUCED
    return INCONCLUSIVE

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
detectable effect at the seeds used, ``mde = (t_{conf,n-1} + t_{0.8,n-1}) s / sqrt(n)`` (80 % power),
``effect`` (the point estimate on the larger-is-better scale minus the margin: its sign is the direction
of the effect) and ``p_refute`` (the one-sided p-value of the refutation, used by Holm below).

Kinds
-----
``evidence``: an empirical comparison that could go either way; decides its headline. ``design``: holds
by construction, a bug check; a failed design check makes its headline inconclusive (reason ``design``),
it never decides a verdict. ``cost``: speed or memory of our own CPU implementation; reported, never
deciding, unless the criterion opts in with ``cost_decides="<why this cost is the paper's claim>"`` (the
headline is about that cost and our code is the paper's algorithm at the paper's granularity).

Floors, sentinels and constants (rule version 3, :func:`screen`)
----------------------------------------------------------------
For a comparison of two arms (``Better``, ``Within``, ``RatioAtLeast`` with a baseline):

- ``testbed: floor``: on every seed both arms sit at the same floor, ceiling or sentinel value
  (``0``, ``1``, ``+-inf``, NaN, the criterion's ``floor`` and its declared ``sentinels``, e.g. a step
  horizon). The comparison cannot show anything: inconclusive.
- ``error-suspect``: the judged arm sits exactly at the criterion's ``floor`` on every seed while the
  baseline does not (``floor="auto"``: 0 when larger is better, ``+inf`` when smaller is better;
  ``floor="none"`` declares that the metric has none). A collapsed arm is a bug suspect, not a finding:
  inconclusive until the claim declares a diagnosis for the criterion (``Claim(diagnoses=...)``).
- ``constant``: with at least two seeds both arms report one and the same constant (e.g. a config value
  compared with itself): the criterion cannot fail, so it is inconclusive.

Floor and error-suspect apply to evidence and cost criteria; ``constant`` to every kind.

Headlines (:func:`judge_headline`)
----------------------------------
A headline is judged from the criteria that test it. Its deciding criteria are its evidence criteria
(and cost criteria that opt in). *Reproduced* needs every one of them reproduced at its own level (an
intersection-union test: no multiplicity correction is needed for "all hold") and every design check of
the headline reproduced. *Not reproduced* needs a refutation that survives Holm's step-down correction
over the headline's deciding criteria (family-wise error at each criterion's ``1 - confidence``): with
``p_(1) <= ... <= p_(k)`` the refutation p-values, ``p_(i)`` is a refutation while every
``p_(j) <= alpha / (k - j + 1)`` for ``j <= i``. Otherwise inconclusive, with the reason ``error``,
``testbed`` (a premise the headline names), ``error-suspect``, ``design``, ``testbed: floor``,
``constant``, ``evidence`` (nothing deciding) or ``spread``.
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
KINDS = ("evidence", "design", "cost")
POWER = 0.8
RULE_VERSION = 3  # claims-v3: per-headline verdicts, Holm, cost, floors and constants
FLOOR = "testbed: floor"
SUSPECT = "error-suspect"
CONSTANT = "constant"
DEFAULT_SENTINELS = (0.0, 1.0, math.inf, -math.inf)


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
    numbers["effect"] = numbers["mean"] - margin
    if len(values) < max(1, min_seeds) or math.isnan(lower) or math.isnan(upper):
        verdict = INCONCLUSIVE
    elif (lower > margin) if strict else (lower >= margin):
        verdict = REPRODUCED
    elif (upper <= margin) if strict else (upper < margin):
        verdict = NOT_REPRODUCED
    else:
        verdict = INCONCLUSIVE
    numbers["p_refute"] = _p_refute(verdict, numbers["mean"] - margin, se, len(values), min_seeds)
    return verdict, numbers


def _p_refute(verdict: str, gap: float, se: float, n: int, min_seeds: int) -> float:
    """One-sided p-value of "the effect is at or below the margin" given estimate - margin = ``gap``.

    ``P(T_{n-1} <= gap / se)``: small when the estimate lies far below the margin. Without a usable
    spread (one seed, zero or infinite sd) the refutation is certain (0) exactly when the rule says not
    reproduced, else impossible (1); with fewer than ``min_seeds`` seeds it is impossible (1).
    """
    if n < max(1, min_seeds) or math.isnan(gap):
        return 1.0
    if n > 1 and se > 0 and math.isfinite(se) and math.isfinite(gap):
        from scipy.stats import t

        return float(t.cdf(gap / se, n - 1))
    return 0.0 if verdict == NOT_REPRODUCED else 1.0


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
    kind : {"evidence", "design", "cost"}, keyword-only
        ``evidence``: an empirical comparison that could go either way. ``design``: holds by
        construction and is checked for bugs. ``cost``: speed or memory of our own implementation,
        reported but never deciding unless ``cost_decides`` gives the reason it may.
    arm : str, keyword-only, optional
        The arm judged; defaults to the claim's method.
    floor : float or {"auto", "none"}, keyword-only
        The metric's worst attainable value for the judged arm (module docstring, "Floors"): ``"auto"``
        is 0 when larger is better and ``+inf`` when smaller is better; ``"none"``: the metric has none.
    sentinels : tuple of float, keyword-only
        Further values at which a tie of both arms says nothing (a step horizon, a "not reached" code),
        besides 0, 1, +-inf, NaN and the floor.
    cost_decides : str, keyword-only
        Only for ``kind="cost"``: why this cost may decide its headline (the headline is about that cost
        and our code is the paper's algorithm at the paper's granularity). Printed in the report.
    """

    metric: str
    label: str = field(default="", kw_only=True)
    kind: str = field(default="evidence", kw_only=True)
    arm: str | None = field(default=None, kw_only=True)
    floor: float | str = field(default="auto", kw_only=True)
    sentinels: tuple[float, ...] = field(default=(), kw_only=True)
    cost_decides: str = field(default="", kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.metric, str) or not self.metric:
            raise ValueError(f"metric must be a non-empty string, got {self.metric!r}")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if isinstance(self.sentinels, (str, bytes)) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.sentinels
        ):
            raise TypeError(f"sentinels must be a tuple of numbers, got {self.sentinels!r}")
        object.__setattr__(self, "sentinels", tuple(float(v) for v in self.sentinels))
        if isinstance(self.floor, str):
            if self.floor not in ("auto", "none"):
                raise ValueError(f"floor must be a number, 'auto' or 'none', got {self.floor!r}")
        elif isinstance(self.floor, bool) or not isinstance(self.floor, (int, float)):
            raise TypeError(f"floor must be a number, 'auto' or 'none', got {self.floor!r}")
        if not isinstance(self.cost_decides, str):
            raise TypeError(f"cost_decides must be a string (the reason), got {type(self.cost_decides).__name__}")
        if self.cost_decides and self.kind != "cost":
            raise ValueError(f"cost_decides is only for kind='cost' criteria, got kind {self.kind!r}")
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

    @property
    def deciding(self) -> bool:
        """Whether the criterion decides its headline: evidence, or cost that opts in with a reason."""
        return self.kind == "evidence" or (self.kind == "cost" and bool(self.cost_decides))

    @property
    def larger_is_better(self) -> bool:
        """The direction of the judged arm's metric (``Better(higher_is_better=False)`` and ``AtMost``: no)."""
        return bool(getattr(self, "higher_is_better", getattr(self, "_higher", True)))

    def floor_value(self) -> float | None:
        """The declared floor; ``"auto"``: 0 when larger is better, ``+inf`` otherwise; ``"none"``: None."""
        if self.floor == "none":
            return None
        if self.floor == "auto":
            return 0.0 if self.larger_is_better else math.inf
        return float(self.floor)

    def screen(self, metrics: Mapping[str, Mapping[str, Sequence[float]]], method: str) -> tuple[str, str]:
        """``(reason, detail)``: ``FLOOR``, ``SUSPECT``, ``CONSTANT`` or ``("", "")`` (module docstring).

        Only comparisons of two arms are screened; single-arm criteria return ``("", "")``.
        """
        other = getattr(self, "baseline", None)
        if not other:
            return "", ""
        arm = self.arm or method
        m, b = self._pair(metrics, method, other)
        if not m:
            return "", ""
        if self.kind != "design":
            floor = self.floor_value()
            stops = {*DEFAULT_SENTINELS, *self.sentinels, *(() if floor is None else (floor,))}
            if all(_same(x, y) and (math.isnan(x) or x in stops) for x, y in zip(m, b)):
                values = sorted({_fmt(x) for x in m})
                return FLOOR, f"{arm} and {other} both sit at {', '.join(values)} on every seed"
            if floor is not None and all(x == floor for x in m) and not all(y == floor for y in b):
                return SUSPECT, f"{arm} is exactly at the floor {_fmt(floor)} on every seed while {other} is not"
        if len(m) >= 2 and all(_same(x, y) for x, y in zip(m, b)) and len({_fmt(x) for x in m}) == 1:
            return CONSTANT, f"{arm} and {other} report the same constant {_fmt(m[0])} on every seed: cannot fail"
        return "", ""

    def to_dict(self) -> dict[str, Any]:
        data = {"type": type(self).__name__, **asdict(self)}
        data["sentinels"] = list(self.sentinels)  # as JSON reads it back
        return data

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


def _same(x: float, y: float) -> bool:
    return x == y or (math.isnan(x) and math.isnan(y))


def _fmt(x: float) -> str:
    return f"{x:g}"


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
        gap = abs(numbers["mean"]) if n else math.nan
        numbers["effect"] = self.tolerance - gap
        # refutation: |d| > tolerance, i.e. P(T >= (|m| - tol) / se) = P(T <= (tol - |m|) / se)
        numbers["p_refute"] = _p_refute(verdict, self.tolerance - gap, se, n, self.min_seeds)
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
            "effect": 1.0 if ok else (-1.0 if values else math.nan),
            "p_refute": 0.0 if verdict == NOT_REPRODUCED else 1.0,
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


def _decides(entry: Mapping[str, Any]) -> bool:
    """Whether a judged entry decides its headline: evidence, or cost that opts in with a reason."""
    kind = entry.get("kind", "evidence")
    return kind == "evidence" or (kind == "cost" and bool((entry.get("data") or {}).get("cost_decides")))


def _number(entry: Mapping[str, Any], name: str, default: float) -> float:
    value = (entry.get("numbers") or {}).get(name, default)
    try:
        value = float(value)  # strict JSON writes inf/nan as text
    except (TypeError, ValueError):
        return default
    return default if math.isnan(value) else value


def _slack(entry: Mapping[str, Any]) -> float:
    return _number(entry, "slack_se", math.inf)


def holm(entries: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Holm's step-down correction over the refutation p-values of ``entries`` (one headline's family).

    Returns ``{key: {"p_refute", "threshold", "refuted"}}``: sorted by p, the i-th (from 0) of ``k`` is
    compared with ``alpha / (k - i)`` (``alpha = 1 - confidence`` of that criterion) and the procedure stops
    at the first p above its threshold. A criterion whose own verdict is not "not reproduced" (including one
    screened out as a floor, constant or error-suspect) counts with p = 1.
    """
    def p_of(entry: Mapping[str, Any]) -> float:  # a criterion not refuted on its own (or screened out): 1
        return _number(entry, "p_refute", 1.0) if entry.get("verdict") == NOT_REPRODUCED else 1.0

    ranked = sorted(entries, key=lambda e: (p_of(e), str(e["key"])))
    k, out, going = len(ranked), {}, True
    for i, entry in enumerate(ranked):
        p = p_of(entry)
        alpha = 1.0 - float((entry.get("data") or {}).get("confidence", 0.9))
        threshold = alpha / (k - i)
        going = going and p <= threshold
        out[entry["key"]] = {
            "p_refute": p,
            "threshold": threshold,
            "refuted": going,
        }
    return out


def judge_headline(
    keys: Sequence[str], judged: Mapping[str, Mapping[str, Any]], premises: Sequence[str] = ()
) -> dict[str, Any]:
    """The verdict of one headline from the judged entries it names (module docstring, "Headlines").

    ``judged`` maps keys to judged criterion and premise entries (``{key, kind, verdict, numbers, data,
    reason, diagnosis, error}``); ``premises`` lists which keys are premises. Returns ``verdict``,
    ``reason``, ``deciding`` (a key) and ``holm`` (:func:`holm` over the deciding criteria).
    """
    named = [judged[k] for k in keys if k in judged]
    prem = [e for e in named if e["key"] in premises]
    crits = [e for e in named if e["key"] not in premises]
    evidence = [e for e in crits if _decides(e)]
    design = [e for e in crits if e.get("kind") == "design"]
    family = holm(evidence)

    def out(verdict: str, reason: str, deciding: Mapping[str, Any] | None) -> dict[str, Any]:
        return {"verdict": verdict, "reason": reason, "deciding": deciding["key"] if deciding else None, "holm": family}

    missing = [k for k in keys if k not in judged]
    errors = [e for e in named if e.get("verdict") == ERROR]
    if missing or errors:
        return out(INCONCLUSIVE, ERROR, errors[0] if errors else None)
    failing = [e for e in prem if e.get("verdict") != REPRODUCED]
    if failing:
        return out(INCONCLUSIVE, "testbed", failing[0])
    if not evidence:
        return out(INCONCLUSIVE, "evidence", (crits or prem or [None])[0])
    suspects = [e for e in evidence if e.get("reason") == SUSPECT and not e.get("diagnosis")]
    if suspects:
        return out(INCONCLUSIVE, SUSPECT, suspects[0])
    broken = [e for e in design if e.get("verdict") == NOT_REPRODUCED]
    if broken:
        return out(INCONCLUSIVE, "design", broken[0])
    refuted = [e for e in evidence if family[e["key"]]["refuted"]]
    if refuted:
        return out(NOT_REPRODUCED, "criteria", min(refuted, key=lambda e: (_number(e, "p_refute", 1.0), _slack(e))))
    if all(e.get("verdict") == REPRODUCED for e in (*evidence, *design)):
        return out(REPRODUCED, "criteria", min(evidence, key=_slack))
    for reason in (FLOOR, CONSTANT):
        flagged = [e for e in (*evidence, *design) if e.get("reason") == reason]
        if flagged:
            return out(INCONCLUSIVE, reason, flagged[0])
    open_ = [e for e in evidence if e.get("verdict") != REPRODUCED] or [
        e for e in design if e.get("verdict") != REPRODUCED
    ]
    return out(INCONCLUSIVE, "spread", min(open_, key=_slack))

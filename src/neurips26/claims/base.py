"""Profiles, criteria, premises and headlines: the vocabulary of a claim check.

A claim check runs a method and its paper's baselines on the same data, seeds and budget, and
reports the paper's metric for every arm. Everything that decides its verdict is declared as data
in the claim module, before any run:

- ``premises``: criteria about the testbed itself (the baseline learns; the task is neither trivial
  nor at its ceiling; the regime the paper is about really occurs). A comparison on a testbed whose
  premise does not hold says nothing, so the claim is then *inconclusive* with reason ``testbed``.
- ``criteria``: the comparisons. Each has a ``kind``: ``"evidence"`` (an empirical comparison that
  could go either way) or ``"design"`` (holds by construction and is checked for bugs, such as
  bit-exactness or a byte-count identity). A verdict of *reproduced* needs at least one evidence
  criterion.
- ``headlines``: every headline claim of the paper, mapped to the criteria that test it or marked
  untested with the reason.

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

Claim verdicts
--------------
``inconclusive`` (reason ``testbed``)  a premise is not reproduced.
``inconclusive`` (reason ``error``)    a premise or criterion raised.
``not reproduced``                     a criterion is not reproduced.
``reproduced``                         every criterion is reproduced, at least one of them evidence.
``inconclusive`` (reason ``spread``)   otherwise (too few seeds, or a bound straddles a margin).

Power
-----
``Claim(items={metric: {profile: n_items}})`` declares how many evaluation items stand behind a
per-seed metric. A ``Better`` margin or ``Within`` tolerance finer than ``1 / n_items`` at the full
profile cannot be resolved by that metric and is rejected when the claim is defined.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"
ERROR = "error"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)
KINDS = ("evidence", "design")
POWER = 0.8


class Profile(str, enum.Enum):
    """How much compute a claim check may spend.

    ``smoke``: seconds, used by the tests. ``quick``: at most 60 s on 2 cores, the default report.
    ``full``: at most 10 minutes, a closer reproduction whose results are committed.
    """

    SMOKE = "smoke"
    QUICK = "quick"
    FULL = "full"

    @property
    def budget_s(self) -> float:
        return {"smoke": 30.0, "quick": 60.0, "full": 600.0}[self.value]

    @classmethod
    def parse(cls, value: str | Profile) -> Profile:
        if isinstance(value, Profile):
            return value
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"profile must be one of {[p.value for p in cls]}, got {value!r}") from None


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
        return {**out, "mean": math.nan, "std": math.nan, "lower_bound": math.nan, "upper_bound": math.nan, "mde": math.nan}
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
    return {**out, "mean": mean, "std": std, "lower_bound": mean - t * se, "upper_bound": mean + t * se, "mde": mde}


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
    numbers["slack_se"] = gap / se if se > 0 and math.isfinite(se) else (math.copysign(math.inf, gap) if gap else 0.0)
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
        if not self.baseline:
            raise ValueError("baseline must name an arm")

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
            f"({direction} is better), paired over >= {self.min_seeds} seeds, one-sided {self.confidence:.0%} bounds"
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
        return (
            f"{self.metric}: {self.arm or method} {self._op} {self.threshold:g} "
            f"(over >= {self.min_seeds} seeds, one-sided {self.confidence:.0%} bounds)"
        )


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
                    raise ValueError(f"{self.metric}: baseline {self.baseline!r} has a zero value; ratio undefined")
                if not math.isfinite(x):
                    ratios.append(-math.inf)
                elif not math.isfinite(y):
                    ratios.append(math.inf)
                else:
                    ratios.append(x / y)
        verdict, numbers = decide(
            [r - self.ratio for r in ratios], 0.0, min_seeds=self.min_seeds, confidence=self.confidence, strict=False
        )
        raw = bounds(ratios, self.confidence)
        numbers.update(
            mean=raw["mean"], std=raw["std"], lower_bound=raw["lower_bound"], upper_bound=raw["upper_bound"],
            mean_ratio=raw["mean"], threshold=self.ratio,
        )
        return Judgement(verdict, self.describe(method), numbers)

    def describe(self, method):
        what = f"{self.arm or method}/{self.baseline}" if self.baseline else f"{self.arm or method}"
        return f"{self.metric}: ratio {what} >= {self.ratio:g} (over >= {self.min_seeds} seeds, one-sided {self.confidence:.0%} bounds)"


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
        if not self.baseline:
            raise ValueError("baseline must name an arm")
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
            mean_diff=numbers["mean"], lower_abs=lower_abs, upper_abs=upper_abs, tolerance=self.tolerance,
            **_arm_stats("method", m), **_arm_stats("baseline", b),
        )
        se = numbers["std"] / math.sqrt(n) if n > 1 else 0.0
        numbers["slack_se"] = (self.tolerance - upper_abs) / se if se > 0 and math.isfinite(se) else (
            math.inf if upper_abs <= self.tolerance else -math.inf
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
            f"{self.metric}: |{self.arm or method} - {self.baseline}| <= {self.tolerance:g}, paired over >= "
            f"{self.min_seeds} seeds (one-sided {self.confidence:.0%} bounds)"
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


@dataclass(frozen=True)
class Headline:
    """One headline claim of the paper, mapped to the labels of the criteria that test it.

    Exactly one of ``criteria`` (labels of criteria or premises) and ``untested`` (the reason it is
    not tested here) is given.
    """

    text: str
    criteria: tuple[str, ...] = ()
    untested: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise ValueError("headline text must be a non-empty string")
        if isinstance(self.criteria, str):
            raise TypeError(f"criteria must be a tuple of labels, got the string {self.criteria!r}")
        if bool(self.criteria) == bool(self.untested):
            raise ValueError(
                f"headline {self.text!r}: give either criteria (labels) or an untested reason, not both or neither"
            )

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "criteria": list(self.criteria), "untested": self.untested}


def sweep_record(grid: Sequence[float], chosen: float) -> dict[str, Any]:
    """Record of a hyperparameter sweep for ``info["sweeps"]``; flags a choice at the grid's edge.

    A chosen value at the smallest or largest grid point means the optimum may lie outside the grid:
    the report warns about it.
    """
    values = [float(g) for g in grid]
    if not values:
        raise ValueError("grid must not be empty")
    if float(chosen) not in values:
        raise ValueError(f"chosen must be one of the grid values {values}, got {chosen!r}")
    at_edge = len(values) > 1 and float(chosen) in (min(values), max(values))
    return {"grid": values, "chosen": float(chosen), "at_edge": at_edge}


@dataclass
class SeedResult:
    """What one seed of a claim check returns.

    Attributes
    ----------
    metrics : dict
        ``metric -> arm -> float``; every arm (the method and each baseline) must report every metric
        that a criterion uses.
    curves : dict
        ``curve name -> arm -> list[float]`` (learning curves, frontiers) for the report's plots.
    info : dict
        Anything else JSON-serialisable: benchmarks (latency, memory, throughput), assumptions, tables.
    """

    metrics: dict[str, dict[str, float]]
    curves: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.metrics, dict) or not self.metrics:
            raise ValueError("metrics must be a non-empty dict metric -> arm -> float")
        for name, arms in self.metrics.items():
            if not isinstance(arms, dict) or not arms:
                raise ValueError(f"metrics[{name!r}] must be a non-empty dict arm -> float")
            for arm, value in arms.items():
                if isinstance(value, bool):
                    value = float(value)
                if not isinstance(value, (int, float)):
                    raise TypeError(
                        f"metrics[{name!r}][{arm!r}] must be a number, got {type(value).__name__}"
                    )
                arms[arm] = float(value)

    def to_dict(self) -> dict[str, Any]:
        return {"metrics": self.metrics, "curves": self.curves, "info": self.info}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SeedResult:
        return cls(
            metrics=dict(data["metrics"]),
            curves=dict(data.get("curves", {})),
            info=dict(data.get("info", {})),
        )


@dataclass(frozen=True)
class Claim:
    """A claim check, declared as data in ``neurips26/claims/<slug>.py`` as ``CLAIM``.

    Parameters
    ----------
    slug : str
        The method's registry slug.
    claim : str
        The paper's claim being checked, in one sentence.
    method : str
        Arm name of the method.
    baselines : tuple of str
        Arm names of the baselines (the paper's, measured in the same harness).
    criteria : tuple of Criterion
        The comparisons, declared before any run. At least one must be of kind ``evidence``.
    run : callable
        ``run(config: dict, seed: int) -> SeedResult``; must be deterministic given ``seed``.
    configs : dict
        ``profile value -> config dict`` for ``smoke``, ``quick`` and ``full``.
    seeds : dict
        ``profile value -> tuple of seeds``.
    premises : tuple of Criterion
        Criteria about the testbed itself; if one is not reproduced, the verdict is inconclusive
        (reason ``testbed``). Every claim declares at least one (checked by the registry tests).
    headlines : tuple of Headline
        Every headline claim of the paper's spec, mapped to criterion labels or marked untested.
    references : tuple of str
        Further arms reported in ``metrics`` that are neither method nor baseline (e.g. an SFT
        start or an oracle), used by premises.
    items : dict
        ``metric -> profile -> evaluation items per seed``, for the power check (module docstring).
    implemented, differences, data : str
        Report text: what is implemented, how the check differs from the paper, which data it uses.
    plot : callable, optional
        ``plot(result: dict, folder: Path) -> list[Path]`` writing PNGs from a result JSON.
    glossary : dict
        ``metric name -> exact definition``; every metric in ``metrics`` should be defined.
    """

    slug: str
    claim: str
    method: str
    baselines: tuple[str, ...]
    criteria: tuple[Criterion, ...]
    run: Callable[[dict[str, Any], int], SeedResult]
    configs: dict[str, dict[str, Any]]
    seeds: dict[str, tuple[int, ...]] = field(
        default_factory=lambda: {"smoke": (0,), "quick": (0, 1, 2), "full": (0, 1, 2, 3, 4)}
    )
    premises: tuple[Criterion, ...] = ()
    headlines: tuple[Headline, ...] = ()
    references: tuple[str, ...] = ()
    items: dict[str, dict[str, int]] = field(default_factory=dict)
    implemented: str = ""
    differences: str = ""
    data: str = ""
    plot: Callable[[dict[str, Any], Any], list[Any]] | None = None
    glossary: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.criteria:
            raise ValueError(f"claim {self.slug!r}: criteria must not be empty (declare them before any run)")
        for group, crits in (("criteria", self.criteria), ("premises", self.premises)):
            for crit in crits:
                if not isinstance(crit, Criterion):
                    raise TypeError(f"claim {self.slug!r}: {group} must be Criterion instances, got {crit!r}")
        if not any(c.kind == "evidence" for c in self.criteria):
            raise ValueError(f"claim {self.slug!r}: at least one criterion must be of kind 'evidence'")
        for profile in Profile:
            if profile.value not in self.configs:
                raise ValueError(f"claim {self.slug!r}: configs lacks profile {profile.value!r}")
            if not self.seeds.get(profile.value):
                raise ValueError(f"claim {self.slug!r}: seeds lacks profile {profile.value!r}")
        if self.method in self.baselines:
            raise ValueError(f"claim {self.slug!r}: method arm {self.method!r} is also listed as a baseline")
        overlap = set(self.references) & {self.method, *self.baselines}
        if overlap:
            raise ValueError(f"claim {self.slug!r}: references {sorted(overlap)} are already method or baselines")
        labels = [c.label for c in (*self.premises, *self.criteria) if c.label]
        dupes = sorted({x for x in labels if labels.count(x) > 1})
        if dupes:
            raise ValueError(f"claim {self.slug!r}: criterion labels must be unique, repeated: {dupes}")
        for head in self.headlines:
            if not isinstance(head, Headline):
                raise TypeError(f"claim {self.slug!r}: headlines must be Headline instances, got {head!r}")
            missing = [x for x in head.criteria if x not in labels]
            if missing:
                raise ValueError(
                    f"claim {self.slug!r}: headline {head.text!r} names unknown criterion labels {missing}; "
                    f"labels: {labels}"
                )
        arms = set(self.arms)
        for crit in (*self.premises, *self.criteria):
            unknown = [a for a in crit.arms_used(self.method) if a not in arms]
            if unknown:
                raise ValueError(
                    f"claim {self.slug!r}: criterion {crit.describe(self.method)!r} uses arms {unknown} "
                    f"that are not method, baselines or references"
                )
        self._check_power()

    def _check_power(self) -> None:
        for metric, per_profile in self.items.items():
            for profile, n in per_profile.items():
                Profile.parse(profile)
                if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                    raise ValueError(f"claim {self.slug!r}: items[{metric!r}][{profile!r}] must be an int >= 1, got {n!r}")
        for crit in (*self.premises, *self.criteria):
            full = self.items.get(crit.metric, {}).get("full")
            res = crit.resolution
            if full is None or res is None:
                continue
            if 1.0 / full > res + 1e-12:
                raise ValueError(
                    f"claim {self.slug!r}: {crit.describe(self.method)!r} needs resolution {res:g} but "
                    f"{crit.metric!r} moves in steps of 1/{full} = {1.0 / full:.3g} at the full profile"
                )

    @property
    def arms(self) -> tuple[str, ...]:
        return (self.method, *self.baselines, *self.references)

    def criteria_text(self) -> list[str]:
        return [c.describe(self.method) for c in self.criteria]

    def granularity(self, metric: str, profile: str | Profile) -> float | None:
        """``1 / items`` of ``metric`` at ``profile`` when declared."""
        n = self.items.get(metric, {}).get(Profile.parse(profile).value)
        return 1.0 / n if n else None


@dataclass
class ClaimResult:
    """The result JSON of one (claim, profile); see ``neurips26.claims.runner`` for the schema."""

    data: dict[str, Any]

    @property
    def verdict(self) -> str:
        return self.data["verdict"]

    def metric(self, name: str, arm: str) -> list[float]:
        return self.data["metrics"][name][arm]


def check_seed_counts(metrics: Mapping[str, Mapping[str, Sequence[float]]]) -> None:
    """Raise :class:`ValueError` unless every arm of every metric has the same number of seeds."""
    counts = {(name, arm): len(values) for name, arms in metrics.items() for arm, values in arms.items()}
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{n}[{a}]={c}" for (n, a), c in sorted(counts.items()))
        raise ValueError(f"arms have unequal seed counts: {detail}")


def _judge_one(crit: Criterion, index: int, prefix: str, metrics, method: str) -> dict[str, Any]:
    key = crit.label or f"{prefix}{index}"
    try:
        j = crit.judge(metrics, method)
        return {
            "key": key,
            "kind": crit.kind,
            "text": j.rule,
            "data": crit.to_dict(),
            "verdict": j.verdict,
            "numbers": j.numbers,
        }
    except Exception as err:  # noqa: BLE001 - recorded, never hidden
        return {
            "key": key,
            "kind": crit.kind,
            "text": crit.describe(method),
            "data": crit.to_dict(),
            "verdict": ERROR,
            "numbers": {},
            "error": f"{type(err).__name__}: {err}",
        }


def _slack(judged: dict[str, Any]) -> float:
    value = judged.get("numbers", {}).get("slack_se", math.nan)
    return value if isinstance(value, (int, float)) and not math.isnan(value) else math.inf


def judge_claim(claim: Claim, metrics: Mapping[str, Mapping[str, Sequence[float]]]) -> dict[str, Any]:
    """Judge premises and criteria of ``claim`` on aggregated per-seed metrics.

    Returns
    -------
    dict
        ``verdict``, ``verdict_reason`` (``testbed``, ``error``, ``criteria``, ``spread`` or
        ``evidence``), ``deciding`` (the key of the deciding criterion or premise), ``premises``,
        ``criteria`` and ``headlines`` (each headline with the verdicts of its criteria).
    """
    check_seed_counts(metrics)
    premises = [_judge_one(c, i, "p", metrics, claim.method) for i, c in enumerate(claim.premises)]
    criteria = [_judge_one(c, i, "c", metrics, claim.method) for i, c in enumerate(claim.criteria)]
    failing_premises = [p for p in premises if p["verdict"] != REPRODUCED]
    errors = [c for c in criteria if c["verdict"] == ERROR] + [p for p in premises if p["verdict"] == ERROR]
    if errors:
        verdict, reason, deciding = INCONCLUSIVE, ERROR, errors[0]["key"]
    elif failing_premises:
        verdict, reason, deciding = INCONCLUSIVE, "testbed", failing_premises[0]["key"]
    elif any(c["verdict"] == NOT_REPRODUCED for c in criteria):
        failed = [c for c in criteria if c["verdict"] == NOT_REPRODUCED]
        evidence = [c for c in failed if c["kind"] == "evidence"] or failed
        verdict, reason, deciding = NOT_REPRODUCED, "criteria", min(evidence, key=_slack)["key"]
    elif all(c["verdict"] == REPRODUCED for c in criteria):
        evidence = [c for c in criteria if c["kind"] == "evidence"]
        if evidence:
            verdict, reason, deciding = REPRODUCED, "criteria", min(evidence, key=_slack)["key"]
        else:
            verdict, reason, deciding = INCONCLUSIVE, "evidence", criteria[0]["key"]
    else:
        open_ = [c for c in criteria if c["verdict"] == INCONCLUSIVE]
        verdict, reason, deciding = INCONCLUSIVE, "spread", min(open_, key=_slack)["key"]
    by_key = {j["key"]: j["verdict"] for j in (*premises, *criteria)}
    headlines = []
    for head in claim.headlines:
        entry = head.to_dict()
        entry["verdicts"] = {k: by_key.get(k, ERROR) for k in head.criteria}
        entry["status"] = "untested" if head.untested else combine(
            [v if v != ERROR else INCONCLUSIVE for v in entry["verdicts"].values()]
        )
        headlines.append(entry)
    return {
        "verdict": verdict,
        "verdict_reason": reason,
        "deciding": deciding,
        "premises": premises,
        "criteria": criteria,
        "headlines": headlines,
    }

"""Profiles, criteria and results: the vocabulary of a claim check.

A claim check runs a method and its paper's baselines on the same data, seeds and budget, and
reports the paper's metric for every arm. Its :class:`Criterion` objects are declared as data in the
claim module, before any run; the verdict is computed from the measured numbers only.

Verdicts
--------
``reproduced``      every criterion holds with the declared confidence.
``not reproduced``  at least one criterion fails on its point estimate.
``inconclusive``    no criterion fails, but at least one cannot be decided: too few seeds, or the
                    seed-to-seed spread straddles the margin.

Statistics
----------
Paired criteria work on per-seed differences ``d_s`` (method minus baseline, sign-adjusted so that
larger is better). With ``n`` seeds, mean ``m`` and sample standard deviation ``s``, the one-sided
lower confidence bound is ``m - t_{conf, n-1} * s / sqrt(n)`` (Student's t). A criterion is
reproduced when the bound clears the margin, not reproduced when the mean itself does not, and
inconclusive in between.
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
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)


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
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var)


@dataclass(frozen=True)
class Judgement:
    """A criterion's verdict with the rule and the numbers it was computed from."""

    verdict: str
    rule: str
    numbers: dict[str, float]


@dataclass(frozen=True)
class Criterion:
    """Base class: a rule that turns per-seed metrics into a verdict.

    Subclasses implement :meth:`judge`. ``metric`` names an entry of the result's ``metrics``.
    """

    metric: str

    def judge(self, metrics: Mapping[str, Mapping[str, Sequence[float]]], method: str) -> Judgement:
        raise NotImplementedError

    def describe(self, method: str) -> str:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        return {"type": type(self).__name__, **asdict(self)}

    def _arm(self, metrics: Mapping[str, Mapping[str, Sequence[float]]], arm: str) -> list[float]:
        if self.metric not in metrics:
            raise KeyError(f"criterion needs metric {self.metric!r}; measured: {sorted(metrics)}")
        if arm not in metrics[self.metric]:
            raise KeyError(f"metric {self.metric!r} has no arm {arm!r}; arms: {sorted(metrics[self.metric])}")
        values = [float(v) for v in metrics[self.metric][arm]]
        if any(math.isnan(v) for v in values):
            raise ValueError(f"metric {self.metric!r} arm {arm!r} contains NaN: {values}")
        return values


def _three_way(
    diffs: Sequence[float], margin: float, min_seeds: int, confidence: float
) -> tuple[str, dict[str, float]]:
    """Shared decision on sign-adjusted per-seed values against a margin."""
    n = len(diffs)
    mean, std = _mean_std(diffs)
    numbers = {"n": float(n), "mean": mean, "std": std, "margin": margin}
    if n == 0:
        return INCONCLUSIVE, numbers
    if mean <= margin:
        return NOT_REPRODUCED, numbers
    if n < min_seeds:
        return INCONCLUSIVE, numbers
    lower = mean - _t_quantile(confidence, n - 1) * std / math.sqrt(n) if n > 1 else mean
    numbers["lower_bound"] = lower
    return (REPRODUCED if lower > margin else INCONCLUSIVE), numbers


@dataclass(frozen=True)
class Better(Criterion):
    """Method beats ``baseline`` on ``metric`` by more than ``margin``, paired over seeds."""

    baseline: str = ""
    margin: float = 0.0
    higher_is_better: bool = True
    min_seeds: int = 2
    confidence: float = 0.9

    def judge(self, metrics, method):
        m, b = self._arm(metrics, method), self._arm(metrics, self.baseline)
        if len(m) != len(b):
            raise ValueError(f"{self.metric}: method has {len(m)} seeds, baseline {len(b)}")
        sign = 1.0 if self.higher_is_better else -1.0
        diffs = [sign * (x - y) for x, y in zip(m, b)]
        verdict, numbers = _three_way(diffs, self.margin, self.min_seeds, self.confidence)
        numbers.update(method_mean=_mean_std(m)[0], baseline_mean=_mean_std(b)[0])
        return Judgement(verdict, self.describe(method), numbers)

    def describe(self, method):
        op = ">" if self.higher_is_better else "<"
        direction = "higher" if self.higher_is_better else "lower"
        return (
            f"{self.metric}: {method} {op} {self.baseline} by more than {self.margin:g} ({direction} is better), "
            f"paired over >= {self.min_seeds} seeds, one-sided {self.confidence:.0%} t-bound"
        )


@dataclass(frozen=True)
class RatioAtLeast(Criterion):
    """``metric`` ratio is at least ``ratio``.

    With ``baseline`` set the per-seed ratio is method / baseline; without it the method's metric is
    itself a ratio (e.g. a compression factor).
    """

    ratio: float = 1.0
    baseline: str | None = None
    min_seeds: int = 1
    confidence: float = 0.9

    def judge(self, metrics, method):
        m = self._arm(metrics, method)
        if self.baseline is None:
            ratios = m
        else:
            b = self._arm(metrics, self.baseline)
            if any(v == 0 for v in b):
                raise ValueError(
                    f"{self.metric}: baseline {self.baseline!r} has a zero value; ratio undefined"
                )
            ratios = [x / y for x, y in zip(m, b)]
        shifted = [r - self.ratio for r in ratios]
        verdict, numbers = _three_way(shifted, 0.0, self.min_seeds, self.confidence)
        # _three_way treats mean <= margin as failure; a ratio exactly at the threshold passes.
        mean_ratio = _mean_std(ratios)[0]
        if verdict == NOT_REPRODUCED and math.isclose(mean_ratio, self.ratio, rel_tol=1e-12):
            verdict = REPRODUCED
        numbers = {
            "n": float(len(ratios)),
            "mean_ratio": mean_ratio,
            "std_ratio": _mean_std(ratios)[1],
            "threshold": self.ratio,
        }
        return Judgement(verdict, self.describe(method), numbers)

    def describe(self, method):
        what = f"{method}/{self.baseline}" if self.baseline else f"{method}"
        return f"{self.metric}: ratio {what} >= {self.ratio:g} (mean over seeds, one-sided {self.confidence:.0%} t-bound)"


@dataclass(frozen=True)
class AtLeast(Criterion):
    """The method's (or ``arm``'s) ``metric`` is at least ``threshold``."""

    threshold: float = 0.0
    arm: str | None = None
    min_seeds: int = 1
    confidence: float = 0.9

    def judge(self, metrics, method):
        values = self._arm(metrics, self.arm or method)
        verdict, numbers = _three_way(
            [v - self.threshold for v in values], 0.0, self.min_seeds, self.confidence
        )
        mean = _mean_std(values)[0]
        if verdict == NOT_REPRODUCED and math.isclose(mean, self.threshold, rel_tol=1e-12):
            verdict = REPRODUCED
        numbers = {
            "n": float(len(values)),
            "mean": mean,
            "std": _mean_std(values)[1],
            "threshold": self.threshold,
        }
        return Judgement(verdict, self.describe(method), numbers)

    def describe(self, method):
        return f"{self.metric}: {self.arm or method} >= {self.threshold:g} (one-sided {self.confidence:.0%} t-bound)"


@dataclass(frozen=True)
class AtMost(Criterion):
    """The method's (or ``arm``'s) ``metric`` is at most ``threshold``."""

    threshold: float = 0.0
    arm: str | None = None
    min_seeds: int = 1
    confidence: float = 0.9

    def judge(self, metrics, method):
        values = self._arm(metrics, self.arm or method)
        verdict, numbers = _three_way(
            [self.threshold - v for v in values], 0.0, self.min_seeds, self.confidence
        )
        mean = _mean_std(values)[0]
        if verdict == NOT_REPRODUCED and math.isclose(mean, self.threshold, rel_tol=1e-12):
            verdict = REPRODUCED
        numbers = {
            "n": float(len(values)),
            "mean": mean,
            "std": _mean_std(values)[1],
            "threshold": self.threshold,
        }
        return Judgement(verdict, self.describe(method), numbers)

    def describe(self, method):
        return f"{self.metric}: {self.arm or method} <= {self.threshold:g} (one-sided {self.confidence:.0%} t-bound)"


@dataclass(frozen=True)
class Within(Criterion):
    """Method is within ``tolerance`` of ``baseline`` (absolute difference), paired over seeds.

    Reproduced when the upper confidence bound of ``|mean d|`` stays within the tolerance; not
    reproduced when ``|mean d|`` itself exceeds it; inconclusive in between.
    """

    baseline: str = ""
    tolerance: float = 0.0
    min_seeds: int = 2
    confidence: float = 0.9

    def judge(self, metrics, method):
        m, b = self._arm(metrics, method), self._arm(metrics, self.baseline)
        diffs = [x - y for x, y in zip(m, b)]
        mean, std = _mean_std(diffs)
        n = len(diffs)
        gap = abs(mean)
        numbers = {"n": float(n), "mean_diff": mean, "std_diff": std, "tolerance": self.tolerance}
        if gap > self.tolerance:
            verdict = NOT_REPRODUCED
        elif n < self.min_seeds:
            verdict = INCONCLUSIVE
        else:
            upper = gap + (_t_quantile(self.confidence, n - 1) * std / math.sqrt(n) if n > 1 else 0.0)
            numbers["upper_bound"] = upper
            verdict = REPRODUCED if upper <= self.tolerance else INCONCLUSIVE
        return Judgement(verdict, self.describe(method), numbers)

    def describe(self, method):
        return (
            f"{self.metric}: |{method} - {self.baseline}| <= {self.tolerance:g}, paired over >= {self.min_seeds} seeds "
            f"(one-sided {self.confidence:.0%} t-bound)"
        )


@dataclass(frozen=True)
class Exact(Criterion):
    """Every seed of ``metric`` (for the method or ``arm``) equals ``expected`` exactly (1.0 = true)."""

    expected: float = 1.0
    arm: str | None = None

    def judge(self, metrics, method):
        values = self._arm(metrics, self.arm or method)
        ok = len(values) > 0 and all(v == self.expected for v in values)
        verdict = REPRODUCED if ok else (INCONCLUSIVE if not values else NOT_REPRODUCED)
        numbers = {
            "n": float(len(values)),
            "min": min(values, default=math.nan),
            "max": max(values, default=math.nan),
            "expected": self.expected,
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
        Declared before any run; the verdict combines them (see :func:`combine`).
    run : callable
        ``run(config: dict, seed: int) -> SeedResult``; must be deterministic given ``seed``.
    configs : dict
        ``profile value -> config dict`` for ``smoke``, ``quick`` and ``full``.
    seeds : dict
        ``profile value -> tuple of seeds``.
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
    implemented: str = ""
    differences: str = ""
    data: str = ""
    plot: Callable[[dict[str, Any], Any], list[Any]] | None = None
    glossary: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.criteria:
            raise ValueError(f"claim {self.slug!r}: criteria must not be empty (declare them before any run)")
        for crit in self.criteria:
            if not isinstance(crit, Criterion):
                raise TypeError(f"claim {self.slug!r}: criteria must be Criterion instances, got {crit!r}")
        for profile in Profile:
            if profile.value not in self.configs:
                raise ValueError(f"claim {self.slug!r}: configs lacks profile {profile.value!r}")
            if not self.seeds.get(profile.value):
                raise ValueError(f"claim {self.slug!r}: seeds lacks profile {profile.value!r}")
        if self.method in self.baselines:
            raise ValueError(f"claim {self.slug!r}: method arm {self.method!r} is also listed as a baseline")

    @property
    def arms(self) -> tuple[str, ...]:
        return (self.method, *self.baselines)

    def criteria_text(self) -> list[str]:
        return [c.describe(self.method) for c in self.criteria]


@dataclass
class ClaimResult:
    """The result JSON of one (claim, profile); see ``docs`` in the README for the schema."""

    data: dict[str, Any]

    @property
    def verdict(self) -> str:
        return self.data["verdict"]

    def metric(self, name: str, arm: str) -> list[float]:
        return self.data["metrics"][name][arm]


def judge_claim(claim: Claim, metrics: Mapping[str, Mapping[str, Sequence[float]]]) -> tuple[str, list[dict]]:
    """Apply every criterion of ``claim`` to aggregated per-seed metrics."""
    judged = []
    for crit in claim.criteria:
        try:
            j = crit.judge(metrics, claim.method)
            judged.append(
                {"text": j.rule, "data": crit.to_dict(), "verdict": j.verdict, "numbers": j.numbers}
            )
        except (KeyError, ValueError) as err:
            judged.append(
                {
                    "text": crit.describe(claim.method),
                    "data": crit.to_dict(),
                    "verdict": INCONCLUSIVE,
                    "numbers": {},
                    "error": str(err),
                }
            )
    return combine([j["verdict"] for j in judged]), judged

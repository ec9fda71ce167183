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

Criteria and their statistics (one rule for every criterion) live in :mod:`neurips26.claims.criteria`
and are re-exported here.

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
from dataclasses import dataclass, field
from typing import Any

from neurips26.claims.criteria import (  # re-exported: the vocabulary of a claim in one place
    CRITERIA,
    ERROR,
    INCONCLUSIVE,
    KINDS,
    NOT_REPRODUCED,
    POWER,
    REPRODUCED,
    VERDICTS,
    AtLeast,
    AtMost,
    Better,
    Criterion,
    Exact,
    Judgement,
    RatioAtLeast,
    Within,
    bounds,
    combine,
    criterion_from_dict,
    decide,
)

__all__ = [
    "CRITERIA", "ERROR", "INCONCLUSIVE", "KINDS", "NOT_REPRODUCED", "POWER", "REPRODUCED", "VERDICTS",
    "AtLeast", "AtMost", "Better", "Claim", "ClaimResult", "Criterion", "Exact", "Headline", "Judgement",
    "Profile", "RatioAtLeast", "SeedResult", "Within", "bounds", "check_seed_counts", "combine",
    "criterion_from_dict", "decide", "judge_claim", "sweep_record",
]  # fmt: skip

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
    display_names : dict
        ``arm -> name as the paper writes it`` (arm names themselves are snake_case); the report and
        plots print these. Arms without an entry print as they are.
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
    display_names: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for arm, name in self.display_names.items():
            if not isinstance(arm, str) or not isinstance(name, str) or not name.strip():
                raise ValueError(f"claim {self.slug!r}: display_names must map arm names to non-empty strings")
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

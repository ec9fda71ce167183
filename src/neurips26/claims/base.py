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

- ``kind="cost"``: criteria about speed or memory of our own CPU code are reported, never deciding
  (unless ``cost_decides`` states why they may; see :mod:`neurips26.claims.criteria`).

Claim verdicts (rule version 3, "claims-v3")
--------------------------------------------
Every tested headline gets its own verdict (:func:`~neurips26.claims.criteria.judge_headline`: its
evidence criteria with Holm's correction for refutations, design checks as bug checks, floors,
constants and collapsed arms screened out). The claim's verdict is the verdict of its *primary*
headline(s): those declared ``Headline(..., primary=True)``, by default the first declared headline
tested by at least one evidence criterion (a claim without headlines: one implicit headline naming every
criterion). Secondary headlines keep their own verdicts and never change the claim's. In order:

``inconclusive`` (reason ``error``)          a premise or criterion raised.
``inconclusive`` (reason ``testbed``)        a premise is not reproduced.
``inconclusive`` (reason ``error-suspect``)  an evidence criterion's arm collapsed to its floor on every
                                             seed while the baseline did not, and the claim declares no
                                             diagnosis for it (``Claim(diagnoses={label: text})``).
otherwise                                    the primary headline's verdict (several primaries: not
                                             reproduced if one is, reproduced if all are, else
                                             inconclusive with the first one's reason).

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
    CONSTANT,
    CRITERIA,
    ERROR,
    FLOOR,
    INCONCLUSIVE,
    KINDS,
    NOT_REPRODUCED,
    POWER,
    REPRODUCED,
    RULE_VERSION,
    SUSPECT,
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
    holm,
    judge_headline,
)

__all__ = [
    "CONSTANT", "CRITERIA", "ERROR", "FLOOR", "INCONCLUSIVE", "KINDS", "NOT_REPRODUCED", "POWER", "REPRODUCED",
    "RULE_VERSION", "SUSPECT", "VERDICTS",
    "AtLeast", "AtMost", "Better", "Claim", "ClaimResult", "Criterion", "Exact", "Headline", "Judgement",
    "Profile", "RatioAtLeast", "SeedResult", "Within", "bounds", "check_seed_counts", "combine",
    "criterion_from_dict", "decide", "holm", "judge_claim", "judge_declared", "judge_headline", "primary_headlines",
    "rejudge", "sweep_record",
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
    not tested here) is given. ``primary=True`` marks the paper's main empirical result: the claim's
    verdict is its verdict (module docstring); a primary headline must be tested.
    """

    text: str
    criteria: tuple[str, ...] = ()
    untested: str = ""
    primary: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise ValueError("headline text must be a non-empty string")
        if isinstance(self.criteria, str):
            raise TypeError(f"criteria must be a tuple of labels, got the string {self.criteria!r}")
        if bool(self.criteria) == bool(self.untested):
            raise ValueError(
                f"headline {self.text!r}: give either criteria (labels) or an untested reason, not both or neither"
            )
        if not isinstance(self.primary, bool):
            raise TypeError(f"headline {self.text!r}: primary must be a bool, got {self.primary!r}")
        if self.primary and self.untested:
            raise ValueError(f"headline {self.text!r}: an untested headline cannot be primary")

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "criteria": list(self.criteria), "untested": self.untested, "primary": self.primary}


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
    diagnoses : dict
        ``criterion label -> diagnosis`` (a path to the committed diagnosis, e.g. a test or note, and
        what it found) for criteria screened as ``error-suspect`` (an arm at its floor on every seed).
        Without one such a criterion keeps the claim inconclusive; with one it is judged as usual and
        the report prints the diagnosis.
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
    diagnoses: dict[str, str] = field(default_factory=dict)

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
        if not any(c.kind in ("evidence", "cost") for c in self.criteria):
            raise ValueError(
                f"claim {self.slug!r}: at least one criterion must be of kind 'evidence' (or 'cost': a claim whose "
                "only comparisons are costs of our code is reported as inconclusive (evidence))"
            )
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
            used = crit.arms_used(self.method)
            unknown = [a for a in used if a not in arms]
            if unknown:
                raise ValueError(
                    f"claim {self.slug!r}: criterion {crit.describe(self.method)!r} uses arms {unknown} "
                    f"that are not method, baselines or references"
                )
            if len(used) == 2 and used[0] == used[1]:
                raise ValueError(
                    f"claim {self.slug!r}: criterion {crit.label or crit.describe(self.method)!r} compares "
                    f"{crit.metric!r} of arm {used[0]!r} with itself: it cannot fail"
                )
        crit_labels = {c.label for c in self.criteria if c.label}
        if not isinstance(self.diagnoses, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in self.diagnoses.items()
        ):
            raise ValueError(f"claim {self.slug!r}: diagnoses must map criterion labels to non-empty strings")
        unknown_diag = sorted(set(self.diagnoses) - crit_labels)
        if unknown_diag:
            raise ValueError(f"claim {self.slug!r}: diagnoses name unknown criterion labels {unknown_diag}")
        for head in self.headlines:
            if head.primary and not any(
                c.label in head.criteria and c.deciding for c in self.criteria
            ):
                raise ValueError(
                    f"claim {self.slug!r}: primary headline {head.text!r} is tested by no evidence criterion"
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


def _judge_one(
    crit: Criterion, index: int, prefix: str, metrics, method: str, diagnoses: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """One judged entry; criteria (``diagnoses`` given) are also screened for floors, collapse and constants."""
    key = crit.label or f"{prefix}{index}"
    entry: dict[str, Any] = {"key": key, "kind": crit.kind, "text": crit.describe(method), "data": crit.to_dict()}
    reason = detail = ""
    try:
        if diagnoses is not None:
            reason, detail = crit.screen(metrics, method)
        try:
            j = crit.judge(metrics, method)
        except Exception:  # a floor tie may leave nothing to compute (a ratio to 0): the floor says why
            if reason != FLOOR:
                raise
            j = Judgement(INCONCLUSIVE, crit.describe(method), {})
    except Exception as err:  # noqa: BLE001 - recorded, never hidden
        return {**entry, "verdict": ERROR, "numbers": {}, "reason": "", "error": f"{type(err).__name__}: {err}"}
    entry.update(text=j.rule, verdict=j.verdict, numbers=j.numbers, reason=reason)
    if reason:
        entry["reason_detail"] = detail
        entry["stat_verdict"] = j.verdict
        diagnosis = (diagnoses or {}).get(key, "")
        if reason == SUSPECT and diagnosis:
            entry["diagnosis"] = diagnosis  # judged as usual: the collapse is explained
        else:
            entry["verdict"] = INCONCLUSIVE
    return entry


def primary_headlines(headlines: Sequence[Headline], deciding_keys: set[str]) -> list[int]:
    """Indices of the primary headlines: the declared ones, else the first tested by a deciding criterion."""
    declared = [i for i, h in enumerate(headlines) if h.primary]
    if declared:
        return declared
    for i, head in enumerate(headlines):
        if any(k in deciding_keys for k in head.criteria):
            return [i]
    return []


def judge_declared(
    method: str,
    premises: Sequence[Criterion],
    criteria: Sequence[Criterion],
    headlines: Sequence[Headline],
    metrics: Mapping[str, Mapping[str, Sequence[float]]],
    diagnoses: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """:func:`judge_claim` on the declarations themselves (used to re-judge a stored result)."""
    check_seed_counts(metrics)
    diagnoses = dict(diagnoses or {})
    premise_entries = [_judge_one(c, i, "p", metrics, method) for i, c in enumerate(premises)]
    criteria_entries = [_judge_one(c, i, "c", metrics, method, diagnoses) for i, c in enumerate(criteria)]
    judged = {e["key"]: e for e in (*premise_entries, *criteria_entries)}
    premise_keys = [e["key"] for e in premise_entries]
    deciding_keys = {e["key"] for e, c in zip(criteria_entries, criteria) if c.deciding}
    heads = list(headlines)
    primary = primary_headlines(heads, deciding_keys)
    implicit = not primary
    if implicit:  # no headline tested by evidence: one implicit headline naming every criterion
        heads_for_verdict = [Headline("every criterion (no headline declared)", criteria=tuple(e["key"] for e in criteria_entries))]
        primary_idx = [0]
    else:
        heads_for_verdict, primary_idx = heads, primary
    head_entries = []
    for i, head in enumerate(heads):
        entry = head.to_dict()
        entry["primary"] = (not implicit) and i in primary
        entry["verdicts"] = {k: judged[k]["verdict"] if k in judged else ERROR for k in head.criteria}
        if head.untested:
            entry.update(status="untested", verdict="untested", reason="", deciding=None, holm={})
        else:
            h = judge_headline(head.criteria, judged, premise_keys)
            entry.update(status=h["verdict"], **h)
        head_entries.append(entry)
    if implicit:
        h = judge_headline(heads_for_verdict[0].criteria, judged, premise_keys)
        primary_results = [h]
    else:
        primary_results = [head_entries[i] for i in primary_idx]

    errors = [e for e in (*criteria_entries, *premise_entries) if e["verdict"] == ERROR]
    failing_premises = [p for p in premise_entries if p["verdict"] != REPRODUCED]
    suspects = [
        e for e, c in zip(criteria_entries, criteria) if c.deciding and e.get("reason") == SUSPECT and not e.get("diagnosis")
    ]
    if errors:
        verdict, reason, deciding = INCONCLUSIVE, ERROR, errors[0]["key"]
    elif failing_premises:
        verdict, reason, deciding = INCONCLUSIVE, "testbed", failing_premises[0]["key"]
    elif suspects:
        verdict, reason, deciding = INCONCLUSIVE, SUSPECT, suspects[0]["key"]
    else:
        refuted = [h for h in primary_results if h["verdict"] == NOT_REPRODUCED]
        if refuted:
            chosen = refuted[0]
        elif all(h["verdict"] == REPRODUCED for h in primary_results):
            chosen = min(primary_results, key=lambda h: _slack(judged.get(h["deciding"], {})))
        else:
            chosen = next(h for h in primary_results if h["verdict"] != REPRODUCED)
        verdict, reason, deciding = chosen["verdict"], chosen["reason"], chosen["deciding"]
        if reason == "evidence":  # nothing decides: name the first cost criterion the headline reports, if any
            named = [k for h in (heads_for_verdict[i] for i in primary_idx) for k in h.criteria]
            costs = [k for k in named if judged.get(k, {}).get("kind") == "cost"]
            deciding = costs[0] if costs else deciding
    return {
        "verdict": verdict,
        "verdict_reason": reason,
        "deciding": deciding,
        "rule_version": RULE_VERSION,
        "primary": [heads[i].text for i in primary] if not implicit else [],
        "premises": premise_entries,
        "criteria": criteria_entries,
        "headlines": head_entries,
        "implicit_headline": implicit and bool(criteria_entries),
    }


def _slack(judged: Mapping[str, Any]) -> float:
    value = judged.get("numbers", {}).get("slack_se", math.nan)
    return value if isinstance(value, (int, float)) and not math.isnan(value) else math.inf


def judge_claim(claim: Claim, metrics: Mapping[str, Mapping[str, Sequence[float]]]) -> dict[str, Any]:
    """Judge premises, criteria and headlines of ``claim`` on aggregated per-seed metrics.

    Returns
    -------
    dict
        ``verdict``, ``verdict_reason`` (``testbed``, ``error``, ``error-suspect``, ``criteria``,
        ``spread``, ``evidence``, ``design``, ``testbed: floor`` or ``constant``), ``deciding`` (the key
        of the deciding criterion or premise), ``rule_version``, ``primary`` (texts of the primary
        headlines), ``premises``, ``criteria`` (each with ``reason`` and, when screened, ``stat_verdict``
        and ``reason_detail``) and ``headlines`` (each with ``verdict``, ``reason``, ``deciding``,
        ``holm``, ``primary`` and the verdicts of its criteria).
    """
    return judge_declared(claim.method, claim.premises, claim.criteria, claim.headlines, metrics, claim.diagnoses)


_V3_FIELDS = ("kind", "floor", "sentinels", "cost_decides")


def rejudge(result: Mapping[str, Any], claim: Claim | None = None) -> dict[str, Any]:
    """``result`` (a stored result dict) judged again from its metrics by the current rule.

    The comparisons are those the run recorded (type, metric, arms, margins); from the current claim
    (``claim``, else the registry's, when it loads) come the classification fields of the same label
    (kind, floor, sentinels, cost_decides), the headlines (when every label they name was recorded), the
    primary headline and the diagnoses. The verdict the file recorded is kept under ``recorded``.
    Results without recorded criteria (schema 1) are returned unchanged.
    """
    data = dict(result)
    if not data.get("criteria") or not all("data" in c for c in data["criteria"]) or "metrics" not in data:
        return data
    if claim is None:
        claim = _current_claim(str(data.get("slug", "")))
    current = {c.label: c for c in (*claim.premises, *claim.criteria) if c.label} if claim else {}

    def rebuild(entries: Sequence[Mapping[str, Any]]) -> list[Criterion]:
        out = []
        for entry in entries:
            fields = dict(entry["data"])
            now = current.get(fields.get("label", ""))
            if now is not None:
                fields.update({k: getattr(now, k) for k in _V3_FIELDS})
            out.append(criterion_from_dict(fields))
        return out

    premises = rebuild(data.get("premises", []))
    criteria = rebuild(data["criteria"])
    keys = {c.label or f"c{i}" for i, c in enumerate(criteria)} | {c.label or f"p{i}" for i, c in enumerate(premises)}
    if claim is not None and claim.headlines and all(set(h.criteria) <= keys for h in claim.headlines):
        headlines = tuple(claim.headlines)
    else:
        headlines = tuple(
            Headline(h["text"], criteria=tuple(h.get("criteria", ())), untested=h.get("untested", ""),
                     primary=bool(h.get("primary", False)))  # fmt: skip
            for h in data.get("headlines", [])
        )
    diagnoses = {k: v for k, v in (claim.diagnoses if claim else {}).items() if k in keys}
    metrics = {
        name: {arm: [float(v) for v in values] for arm, values in arms.items()}
        for name, arms in data["metrics"].items()
    }
    judged = judge_declared(data.get("method", ""), premises, criteria, headlines, metrics, diagnoses)
    data["recorded"] = {
        k: result.get(k) for k in ("verdict", "verdict_reason", "deciding")
    } | {"rule_version": result.get("rule_version", 2)}
    for entries in (judged["premises"], judged["criteria"]):
        for entry in entries:
            entry["numbers"] = {k: (str(v) if isinstance(v, float) and not math.isfinite(v) else v) for k, v in entry["numbers"].items()}
    data.update(judged)
    return data


def _current_claim(slug: str) -> Claim | None:
    try:
        from neurips26.registry import load_claim

        return load_claim(slug)
    except Exception:  # noqa: BLE001 - an unknown or broken claim: judge with what the file recorded
        return None

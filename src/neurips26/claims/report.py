"""Build ``report.md`` and a self-contained ``report.html`` from result JSON files alone.

The report opens with one short line per claim: the verdict (with its reason when the testbed is at
fault), the deciding criterion with method against baseline (mean +- sd) and its bound, the seeds,
the wall time (warm and cold cache) and warnings. Then one section per claim: its premises first,
the evidence criteria with both bounds and the minimal detectable effect, the design checks apart,
the table of the paper's headlines and what tests them, the metrics per arm, plots (PNG, embedded in
the HTML as base64), what is implemented, the differences from the paper, the data, provenance and
the exact command to rerun it; finally a glossary of every metric and of the decision rule.
"""

from __future__ import annotations

import base64
import functools
import html
import json
import math
import os
from pathlib import Path
from typing import Any

from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.cache import atomic_write_text

RULER_HEADING = "RULER calibration"
RULER_INTRO = (
    "What the small model can do at all: full-precision accuracy per RULER task and context length "
    "(neurips26.common.ruler). The KV-cache and sparse-prefill claims judge only tasks whose premise (full "
    "precision reaches the declared accuracy) holds at their length; the others are named in their results."
)

GENERIC_GLOSSARY = {
    "verdict": (
        "reproduced / not reproduced / inconclusive, computed by the declared criteria from the per-seed "
        "numbers and re-judged from the stored metrics by the current rule (rule version 3, claims-v3) whenever "
        "a report or the README is built. Every tested headline of the paper gets its own verdict; the claim's "
        "verdict is the verdict of its primary headline(s) (declared in the claim; by default the first headline "
        "tested by an evidence criterion). In order: inconclusive (error) when a premise or criterion could not "
        "be computed, inconclusive (testbed) when a premise does not hold, inconclusive (error-suspect) when an "
        "evidence criterion's arm collapsed to its floor and no diagnosis is declared, else the primary "
        "headline's verdict. Secondary headlines are shown with their own verdicts and never change the claim's."
    ),
    "headline verdict": (
        "from the headline's evidence criteria (and cost criteria that opt in): reproduced when every one is "
        "reproduced at its own level (an intersection-union test, no correction needed) and every design check "
        "of the headline holds; not reproduced when a refutation survives Holm's step-down correction over the "
        "headline's evidence criteria (family-wise error 1 - confidence, 10 %: sorted refutation p-values "
        "p_(i) are compared with 0.1/(k - i + 1), stopping at the first that exceeds it); otherwise inconclusive "
        "with the reason error, testbed, error-suspect, design (a design check failed: a bug check, it never "
        "decides), testbed: floor, constant, evidence (nothing deciding) or spread."
    ),
    "Holm": (
        "family-wise control over one headline's k evidence criteria: p_refute is the one-sided p-value of "
        "'the effect is at or below the margin' (Student t, n - 1 dof); the smallest must be <= alpha/k, the "
        "next <= alpha/(k-1), and so on; a criterion is refuted only while every smaller p was."
    ),
    "primary headline": "the paper's main empirical result; its verdict is the claim's verdict (marked * in the headline table).",
    "cost": (
        "kind of a criterion about speed or memory of our own CPU implementation: reported, never deciding a "
        "headline unless the criterion states why (cost_decides: the headline is about that cost and our code is "
        "the paper's algorithm at the paper's granularity)."
    ),
    "testbed: floor": (
        "both arms of a comparison sit at the same floor, ceiling or sentinel value (0, 1, +-inf, NaN, the "
        "criterion's floor or a declared sentinel such as a step horizon) on every seed: the comparison cannot "
        "show anything, so it is inconclusive."
    ),
    "error-suspect": (
        "the judged arm sits exactly at the criterion's floor (0 when larger is better, +inf when smaller is "
        "better, unless declared) on every seed while the baseline does not: a collapsed arm is a bug suspect; "
        "the claim stays inconclusive until it declares a diagnosis for the criterion, which the report prints."
    ),
    "constant": "both arms report one and the same constant on every seed (e.g. a config value compared with itself): the criterion cannot fail, so it is inconclusive.",
    "hash": (
        "current when the claim hash recorded in the result equals the hash of today's code: every neurips26 "
        "module the claim imports, transitively (claim package, claims it imports, area modules, common/), plus "
        "claims/criteria.py; stale otherwise (the numbers were produced by other code)."
    ),
    "unseen-seed agreement": (
        "for each committed full-profile result, the runs in results/seedcheck/ of the same claim code and "
        "config on seeds the full run did not use, both re-judged by the current rule: same verdict or not. A "
        "decisive verdict that flips is shown as inconclusive (spread) with both runs."
    ),
    "same direction": (
        "the quick re-check beside a committed verdict: the sign of the committed deciding criterion's effect "
        "(estimate minus margin on the larger-is-better scale) in this machine's quick run against the committed "
        "full run."
    ),
    "decision rule": (
        "per-seed values v (paired differences, sign-adjusted so that larger is better) with mean m, sd s, "
        "n seeds; one-sided bounds L = m - t s/sqrt(n), U = m + t s/sqrt(n) (Student t at the criterion's "
        "confidence). Reproduced when L clears the margin, not reproduced when U is at or below it, "
        "inconclusive in between or with fewer seeds than min_seeds. Within: on |m|. NaN or inf counts as "
        "the worst value."
    ),
    "premise": "a criterion about the testbed itself (the baseline learns, the task is not at ceiling, the regime occurs); judged like any criterion, shown first.",
    "evidence / design / cost": "evidence: an empirical comparison that could go either way; design: holds by construction and is checked for bugs (bit-exactness, identities); cost: speed or memory of our CPU code, reported, never deciding unless it opts in with a reason. Reproduced needs evidence.",
    "mde": "minimal detectable effect at the seeds used: (t_conf + t_0.8) s / sqrt(n), the smallest true difference the criterion detects with 80 % power.",
    "wall_s": "wall-clock seconds of all seeds of the claim check in one process (warm cache).",
    "cold_wall_s": "wall_s plus the recorded build time of every cached artefact the run found on disk: the cost on an empty cache.",
    "dirty": "the checkout had uncommitted or untracked changes when the run started.",
}


def load_results(folder: Path) -> list[dict[str, Any]]:
    """Every ``*.json`` result in ``folder`` (sorted by slug); files that are not results are skipped."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    results = []
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("schema") in (1, 2) and "slug" in data:
            results.append(data)
    return sorted(results, key=lambda r: r["slug"])


def rejudged(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` re-judged from its metrics by the current rule (:func:`neurips26.claims.base.rejudge`).

    Schema-1 results are returned as they are; a result that cannot be re-judged keeps its recorded
    verdict with a warning saying so.
    """
    if result.get("schema") != 2:
        return result
    from neurips26.claims.base import rejudge

    try:
        return rejudge(result)
    except Exception as err:  # noqa: BLE001 - shown, never hidden
        out = dict(result)
        out["warnings"] = [*result.get("warnings", []), f"not re-judged: {type(err).__name__}: {err}"]
        return out


@functools.cache
def _current_hash(slug: str) -> str | None:
    try:
        from neurips26.claims.runner import claim_hash
        from neurips26.registry import load_claim

        return claim_hash(load_claim(slug))
    except Exception:  # noqa: BLE001 - an unknown or broken claim: unknown
        return None


@functools.cache
def current_torch() -> str | None:
    """The installed torch version without its local part (``2.14.1`` for ``2.14.1+cpu``)."""
    from importlib import metadata

    try:
        return metadata.version("torch").split("+")[0]
    except metadata.PackageNotFoundError:
        return None


def freshness(result: dict[str, Any]) -> dict[str, Any]:
    """Whether a result rests on today's code and stack.

    ``hash``: ``current`` (recorded claim hash = today's :func:`~neurips26.claims.runner.claim_hash`),
    ``stale`` or ``unknown`` (the claim does not load); ``torch``: the recorded version;
    ``torch_current``: whether it equals the installed one (local parts such as ``+cpu`` ignored).
    """
    recorded = (result.get("provenance") or {}).get("claim_hash")
    now = _current_hash(str(result.get("slug", "")))
    state = "unknown" if now is None or not recorded else ("current" if recorded == now else "stale")
    torch = ((result.get("env") or {}).get("versions") or {}).get("torch")
    here = current_torch()
    same = torch is not None and here is not None and str(torch).split("+")[0] == here
    return {"hash": state, "recorded_hash": recorded, "current_hash": now, "torch": torch, "torch_current": same}


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _disjoint(a: list[int], b: list[int]) -> bool:
    return not set(a) & set(b)


def seed_checks(committed: list[dict[str, Any]], folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Unseen-seed runs in ``folder`` (``<slug>_seeds*.json``) against the committed result of each slug.

    A run *matches* when it ran the committed code and config (same claim and config hash) on seeds the
    committed run did not use; only matching runs count for agreement. Both are re-judged by the current
    rule. Returns ``{slug: [{file, seeds, verdict, text, matching, why, agree}]}``.
    """
    by_slug = {r["slug"]: r for r in committed}
    out: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(Path(folder).glob("*_seeds*.json")) if Path(folder).is_dir() else []:
        try:
            data = json.loads(path.read_text())
        except ValueError:
            continue
        full = by_slug.get(data.get("slug")) if isinstance(data, dict) else None
        if full is None or data.get("schema") != 2:
            continue
        run = rejudged(data)
        prov, fprov = data.get("provenance") or {}, full.get("provenance") or {}
        why = []
        if not _disjoint(data.get("seeds", []), full.get("seeds", [])):
            why.append("shares seeds with the committed run")
        if prov.get("config_hash") != fprov.get("config_hash"):
            why.append("another config")
        if prov.get("claim_hash") != fprov.get("claim_hash"):
            why.append("other code")
        out.setdefault(full["slug"], []).append(
            {
                "file": path.name,
                "seeds": data.get("seeds", []),
                "verdict": run.get("verdict"),
                "text": verdict_text(run),
                "matching": not why,
                "why": ", ".join(why),
                "agree": run.get("verdict") == full.get("verdict"),
            }
        )
    return out


def published_verdict(result: dict[str, Any], checks: list[dict[str, Any]]) -> tuple[str, bool]:
    """The verdict to publish and whether it flipped: a decisive verdict that a matching unseen-seed run
    does not repeat is published as ``inconclusive (spread)``."""
    flipped = result.get("verdict") in ("reproduced", "not reproduced") and any(
        c["matching"] and not c["agree"] for c in checks
    )
    return ("inconclusive (spread: flipped on unseen seeds)" if flipped else verdict_text(result)), flipped


def _effect(entry: dict[str, Any] | None) -> float:
    return _float((entry or {}).get("numbers", {}).get("effect"))


def quick_recheck(full: dict[str, Any], quick: dict[str, Any] | None) -> str:
    """One cell: this machine's quick run beside the committed verdict (module docstring)."""
    if quick is None:
        return "not run here"
    failing = [p for p in quick.get("premises", []) if p.get("verdict") != "reproduced"]
    if failing:
        return f"quick testbed: premise {failing[0].get('key')} does not hold ({describe_numbers(quick, failing[0])})"
    key = (deciding(full) or {}).get("key")
    here = _find(quick, key)
    ref, now = _effect(deciding(full)), _effect(here)
    if here is None or math.isnan(ref) or math.isnan(now):
        return f"{verdict_text(quick)}; {key} not comparable here"
    same = (ref > 0) == (now > 0) and (ref != 0 or now == 0)
    word = "same direction" if same else "opposite direction"
    return f"{word}: {key} effect {_num(now)} here vs {_num(ref)} committed ({verdict_text(quick)})"


def committed_section(
    committed: list[dict[str, Any]], seed_dir: Path, quick: list[dict[str, Any]] | None = None
) -> tuple[list[str], list[str], list[list[str]]]:
    """The committed full-profile verdict table: intro lines, header and rows.

    One row per committed result (re-judged): the published verdict of its primary headline (a decisive
    verdict that flipped on unseen seeds shows as inconclusive (spread)), the primary headline, the deciding
    criterion with its numbers, the unseen-seed runs, code freshness and torch, and, when ``quick`` is given,
    this machine's quick re-check beside it.
    """
    checks = seed_checks(committed, seed_dir)
    quick_by = {r["slug"]: r for r in quick} if quick is not None else None
    rows, agree, pairs, undecided, stale, flips = [], 0, 0, [], 0, []
    for r in committed:
        mine = checks.get(r["slug"], [])
        matching = [c for c in mine if c["matching"]]
        pairs += len(matching)
        agree += sum(c["agree"] for c in matching)
        text, flipped = published_verdict(r, mine)
        if flipped:
            flips.append(r["slug"])
        if r.get("verdict") in ("reproduced", "not reproduced") and not matching:
            undecided.append(r["slug"])
        seeds = "; ".join(
            f"{c['text']} on {c['seeds']} ({'agrees' if c['agree'] else 'differs'})" for c in matching
        ) or "none"
        other = [c for c in mine if not c["matching"]]
        if other:
            seeds += f" (+{len(other)} of other code/config/seeds)"
        fresh = freshness(r)
        stale += fresh["hash"] != "current"
        torch = str(fresh["torch"]) + ("" if fresh["torch_current"] else f" (now {current_torch()})")
        primary = "; ".join(h[:60] for h in r.get("primary", [])) or "-"
        row = [f"[{r['slug']}](#{r['slug']})", text, primary, describe_numbers(r, deciding(r)), seeds, fresh["hash"], torch]
        if quick_by is not None:
            row.append(quick_recheck(r, quick_by.get(r["slug"])))
        rows.append(row)
    rate = f"{agree}/{pairs} ({100.0 * agree / pairs:.0f} %)" if pairs else "no matching runs"
    counts = {v: sum(r.get("verdict") == v for r in committed) for v in ("reproduced", "not reproduced", "inconclusive")}
    intro = [
        "## Committed full-profile verdicts",
        "",
        f"**Unseen-seed agreement: {rate}** of the seed checks that ran the committed code and config on seeds "
        f"the committed run did not use (results/seedcheck/, re-judged by the current rule)."
        + (f" Flipped, so published as inconclusive (spread): {', '.join(flips)}." if flips else "")
        + (f" Decisive verdicts without a matching unseen-seed run: {', '.join(undecided)}." if undecided else ""),
        "",
        f"{len(committed)} committed results (results/full/, re-judged by the current rule on their primary "
        "headline): " + ", ".join(f"{n} {v}" for v, n in counts.items())
        + f"; {stale} rest on code whose hash is no longer current (stale or unknown)."
        + (" Beside each, this machine's quick re-check: same direction of the committed deciding effect or not."
           if quick is not None else ""),  # fmt: skip
        "",
    ]
    header = ["method", "verdict (primary headline)", "primary headline", "deciding criterion", "unseen seeds", "code", "torch"]
    if quick is not None:
        header.append("quick re-check here")
    return intro, header, rows


def mean_std(values: list[float]) -> tuple[float, float]:
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean, std


def fmt(values: list[float] | None) -> str:
    if not values:
        return "n/a"
    mean, std = mean_std(values)
    magnitude = max(abs(mean), std)
    digits = 3 if magnitude < 100 else 1
    return f"{mean:.{digits}f} ± {std:.{digits}f}" if len(values) > 1 else f"{mean:.{digits}f}"


def _num(value: Any, digits: int = 3) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "-"
    if not math.isfinite(value):
        return str(value)
    return (
        _fmt_number(value)
        if value != 0 and (abs(value) >= 1e4 or abs(value) < 1e-3)
        else f"{value:.{digits}f}"
    )


def _find(result: dict[str, Any], key: str | None) -> dict[str, Any] | None:
    for entry in (*result.get("premises", []), *result.get("criteria", [])):
        if entry.get("key") == key:
            return entry
    return None


def deciding(result: dict[str, Any]) -> dict[str, Any] | None:
    """The criterion (or premise) that decided the verdict; for schema-1 results, the first failing one."""
    found = _find(result, result.get("deciding"))
    if found is not None:
        return found
    crits = result.get("criteria", [])
    failing = [c for c in crits if c.get("verdict") != "reproduced"]
    return (failing or crits or [None])[0]


def display_name(result: dict[str, Any], arm: str) -> str:
    """The arm as the paper writes it: the result's ``display_names`` (older results: the claim's), else ``arm``."""
    names = result.get("display_names")
    if names is None:
        names = _claim_display_names(str(result.get("slug", "")))
    return names.get(arm, arm)


@functools.cache
def _claim_display_names(slug: str) -> dict[str, str]:
    try:
        from neurips26.registry import load_claim

        return dict(load_claim(slug).display_names)
    except Exception:  # an unknown slug or a claim that does not import: print the arm names
        return {}


def describe_numbers(result: dict[str, Any], entry: dict[str, Any] | None) -> str:
    """``metric: arm m ± s vs baseline m ± s (L=.., margin ..)`` for one judged criterion."""
    if entry is None:
        return "-"
    data, nums = entry.get("data", {}), entry.get("numbers", {})
    metric = data.get("metric", "?")
    arm = data.get("arm") or result.get("method")
    arms = result.get("metrics", {}).get(metric, {})
    text = f"{entry.get('key', '')} [{metric}]: {display_name(result, arm)} {fmt(arms.get(arm))}"
    if data.get("baseline"):
        text += f" vs {display_name(result, data['baseline'])} {fmt(arms.get(data['baseline']))}"
    if entry.get("error"):
        return text + f" (error: {entry['error']})"
    if data.get("type") == "Within":
        text += f"; |d| bounds [{_num(nums.get('lower_abs'))}, {_num(nums.get('upper_abs'))}] vs tol {_num(nums.get('tolerance'))}"
    elif data.get("type") == "Exact":
        text += f"; min {_num(nums.get('min'))}, max {_num(nums.get('max'))}, expected {_num(nums.get('expected'))}"
    elif "lower_bound" in nums:
        target = nums.get("margin", nums.get("threshold"))
        what = {"Better": "d", "RatioAtLeast": "ratio"}.get(data.get("type"), "value")
        text += (
            f"; {what} L={_num(nums.get('lower_bound'))} U={_num(nums.get('upper_bound'))} vs {_num(target)}"
        )
    return text


def verdict_text(result: dict[str, Any]) -> str:
    verdict = result.get("verdict", "?")
    reason = result.get("verdict_reason")
    if verdict == "inconclusive" and reason:
        return f"{verdict} ({reason})"
    return verdict


def wall_text(result: dict[str, Any]) -> str:
    warm = result.get("wall_s", math.nan)
    cold = result.get("cold_wall_s", warm)
    return f"{warm:.0f} s" if abs(cold - warm) < 0.5 else f"{warm:.0f} s (cold {cold:.0f} s)"


def warnings_of(result: dict[str, Any]) -> list[str]:
    out = list(result.get("warnings", []))
    if result.get("schema") == 1:
        out.insert(0, "schema 1: not rerun under the v2 rules (no premises, asymmetric decision)")
        if result.get("over_budget"):
            out.append("over budget")
    prov = result.get("provenance") or {}
    if prov.get("dirty") and not any(w.startswith("dirty") for w in out):
        out.append("dirty")
    return out


def summary_rows(results: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for r in results:
        warn = warnings_of(r)
        rows.append(
            [
                f"[{r['slug']}](#{r['slug']})",
                verdict_text(r),
                describe_numbers(r, deciding(r)),
                str(len(r["seeds"])),
                wall_text(r),
                "; ".join(w.split(":")[0] for w in warn) or "-",
            ]
        )
    return rows


SUMMARY_HEADER = ["method", "verdict", "deciding criterion", "seeds", "wall", "warnings"]


def default_plots(result: dict[str, Any], folder: Path) -> list[Path]:
    """One bar chart (mean +- std over seeds, per arm) per metric and one line plot per curve."""
    plt = pyplot()
    paths = []
    metrics = result.get("metrics", {})
    if metrics:
        n = len(metrics)
        fig, axes = plt.subplots(1, n, figsize=(3.2 * n, 3), squeeze=False)
        for ax, (name, arms) in zip(axes[0], metrics.items()):
            labels = list(arms)
            stats = [mean_std(arms[a]) for a in labels]
            ax.bar(
                range(len(labels)),
                [s[0] for s in stats],
                yerr=[s[1] for s in stats],
                capsize=3,
                color=["C1" if a == result["method"] else "C0" for a in labels],
            )
            ax.set_xticks(
                range(len(labels)),
                [display_name(result, a) for a in labels],
                rotation=30,
                ha="right",
                fontsize=7,
            )
            ax.set_title(name, fontsize=8)
        paths.append(save_figure(fig, folder, f"{result['slug']}_metrics", dpi=90))
    for name, arms in result.get("curves", {}).items():
        fig, ax = plt.subplots(figsize=(4.5, 3))
        for arm, runs in arms.items():
            length = min(len(run) for run in runs) if runs else 0
            if length == 0:
                continue
            means = [mean_std([run[i] for run in runs])[0] for i in range(length)]
            ax.plot(
                range(length), means, label=display_name(result, arm), lw=2 if arm == result["method"] else 1
            )
        ax.set_title(name, fontsize=9)
        ax.legend(fontsize=7)
        safe = "".join(ch if ch.isalnum() else "_" for ch in name)
        paths.append(save_figure(fig, folder, f"{result['slug']}_curve_{safe}", dpi=90))
    return paths


def claim_plots(result: dict[str, Any], folder: Path) -> list[Path]:
    """Default plots plus the claim's own ``plot`` hook when its module is importable."""
    paths = default_plots(result, folder)
    try:
        from neurips26.registry import load_claim

        hook = load_claim(result["slug"]).plot
    except Exception:  # noqa: BLE001 - the report is built from JSON alone; the hook is a bonus
        hook = None
    if hook is not None:
        try:
            paths.extend(Path(p) for p in hook(result, folder))
        except Exception as err:  # noqa: BLE001
            print(f"plot hook of {result['slug']} failed: {err}")
    return paths


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    def clean(cell: str) -> str:
        return str(cell).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(clean(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def glossary(results: list[dict[str, Any]]) -> dict[str, str]:
    terms = dict(GENERIC_GLOSSARY)
    for r in results:
        for name, text in r.get("glossary", {}).items():
            terms.setdefault(name, text)
        for name in r.get("metrics", {}):
            terms.setdefault(name, f"(defined in the {r['slug']} claim check; no glossary entry given)")
    return dict(sorted(terms.items()))


def benchmark_tables(result: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """Tables of the performance benchmarks a claim stored in its per-seed ``info``.

    A benchmark is an ``info`` entry whose name ends in ``_benchmark`` and whose value is
    ``{setting: {arm: {measure: number}}}`` (for example ``{"T=1024": {"kivi": {"decode_step_s": ...}}}``).
    The first seed that carries it is rendered: one row per (setting, arm), one column per measure.

    Returns
    -------
    list of (name, header, rows)
    """
    tables = []
    for info in result.get("info") or []:
        for name, bench in (info or {}).items():
            if not name.endswith("_benchmark") or any(t[0] == name for t in tables):
                continue
            if not isinstance(bench, dict) or not all(isinstance(row, dict) for row in bench.values()):
                continue
            measures: list[str] = []
            rows = []
            for setting, arms in bench.items():
                for arm, values in arms.items():
                    if not isinstance(values, dict):
                        continue
                    for m in values:
                        if m not in measures:
                            measures.append(m)
                    rows.append((setting, arm, values))
            table = [[setting, arm] + [_fmt_number(v.get(m)) for m in measures] for setting, arm, v in rows]
            if table:
                tables.append((name, ["setting", "arm", *measures], table))
    return tables


def _fmt_number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "" if value is None else str(value)
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.3g}"
    return f"{value:.4g}"


def _entry_verdict(c: dict[str, Any]) -> str:
    """A judged entry's verdict; a screened one says why and what it alone would say."""
    verdict = c.get("verdict", "")
    if c.get("reason"):
        alone = c.get("stat_verdict")
        verdict += f" ({c['reason']}" + (f"; alone: {alone}" if alone and alone != verdict else "") + ")"
    return verdict


def judged_rows(result: dict[str, Any], entries: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for c in entries:
        n = c.get("numbers", {})
        rows.append(
            [
                c.get("key", ""),
                c.get("text", ""),
                _entry_verdict(c),
                _num(n.get("n"), 0),
                _num(n.get("mean")),
                _num(n.get("std")),
                _num(n.get("lower_bound", n.get("lower_abs"))),
                _num(n.get("upper_bound", n.get("upper_abs"))),
                _num(n.get("mde")),
                _num(n.get("p_refute")),
                c.get("error", "") or c.get("reason_detail", ""),
            ]
        )
    return rows


JUDGED_HEADER = ["key", "criterion", "verdict", "n", "mean", "sd", "L", "U", "mde", "p_refute", "note"]


def headline_rows(result: dict[str, Any]) -> list[list[str]]:
    """One row per headline: text (``*`` marks a primary headline), what tests it (with Holm's outcome for
    each refutation), and its own verdict with the reason and deciding criterion."""
    rows = []
    for h in result.get("headlines", []):
        text = ("* " if h.get("primary") else "") + h["text"]
        if h.get("untested"):
            rows.append([text, "-", "untested: " + h["untested"]])
            continue
        holm = h.get("holm") or {}
        parts = []
        for k, v in h.get("verdicts", {}).items():
            extra = "; Holm: refuted" if holm.get(k, {}).get("refuted") else (
                "; Holm: not refuted" if v == "not reproduced" and k in holm else ""
            )
            parts.append(f"{k} ({v}{extra})")
        status = h.get("verdict", h.get("status", ""))
        if status == "inconclusive" and h.get("reason"):
            status += f" ({h['reason']})"
        if h.get("deciding") and status != "untested":
            status += f"; deciding {h['deciding']}"
        rows.append([text, ", ".join(parts), status])
    return rows


def budget_table(result: dict[str, Any]) -> tuple[list[str], list[list[str]]] | None:
    """``info["budget"]`` of the first seed that records one: one row per arm, one column per quantity."""
    for info in result.get("info") or []:
        budget = (info or {}).get("budget")
        if isinstance(budget, dict) and budget and all(isinstance(v, dict) for v in budget.values()):
            keys: list[str] = []
            for values in budget.values():
                keys += [k for k in values if k not in keys]
            rows = [
                [display_name(result, arm)] + [_fmt_budget(values.get(k)) for k in keys]
                for arm, values in budget.items()
            ]
            return ["arm", *keys], rows
    return None


def _fmt_budget(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fmt_budget(v) for v in value) + "]"
    return (
        _fmt_number(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
    )


def _split_criteria(result: dict[str, Any]) -> tuple[list[dict], list[dict]]:
    crits = result.get("criteria", [])
    evidence = [c for c in crits if c.get("kind", "evidence") == "evidence"]
    design = [c for c in crits if c.get("kind") == "design"]
    return evidence, design


def _cost(result: dict[str, Any]) -> list[dict]:
    return [c for c in result.get("criteria", []) if c.get("kind") == "cost"]


def _v3_notes(r: dict[str, Any]) -> list[str]:
    """Lines on the re-judgement: what the file recorded, primary headline, diagnoses, cost opt-ins."""
    lines = []
    rec = r.get("recorded") or {}
    if rec and (rec.get("verdict"), rec.get("deciding")) != (r.get("verdict"), r.get("deciding")):
        text = rec.get("verdict", "?") + (
            f" ({rec['verdict_reason']})" if rec.get("verdict") == "inconclusive" and rec.get("verdict_reason") else ""
        )
        lines.append(
            f"**Recorded** (rule version {rec.get('rule_version')}): {text}, deciding {rec.get('deciding')}; "
            "re-judged above by the current rule from the stored metrics."
        )
    if r.get("primary"):
        lines.append("**Primary headline.** " + "; ".join(r["primary"]))
    for c in r.get("criteria", []):
        if c.get("diagnosis"):
            lines.append(f"**Diagnosis of {c['key']}** ({c.get('reason_detail', '')}): {c['diagnosis']}")
        elif c.get("reason") == "error-suspect":
            lines.append(f"**Undiagnosed collapse: {c['key']}**: {c.get('reason_detail', '')}; no diagnosis declared.")
        why = (c.get("data") or {}).get("cost_decides")
        if why:
            lines.append(f"**Cost criterion {c['key']} may decide:** {why}")
    return lines


def _section_md(r: dict[str, Any], plots: list[Path], base: Path) -> str:
    arms = [r["method"], *r["baselines"], *r.get("references", [])]
    rows = [[name] + [fmt(values.get(a)) for a in arms] for name, values in r["metrics"].items()]
    env = r.get("env", {})
    prov = r.get("provenance") or {
        "commit": env.get("git", {}).get("commit"),
        "dirty": env.get("git", {}).get("dirty"),
    }
    evidence, design = _split_criteria(r)
    fresh = freshness(r)
    lines = [
        f'<a id="{r["slug"]}"></a>',
        "",
        f"## {r['title']}",
        "",
        f"**Claim.** {r['claim']}  ",
        f"**Verdict ({r['profile']}, seeds {r['seeds']}).** {verdict_text(r)}; deciding: "
        f"{describe_numbers(r, deciding(r))}  ",
        f"**Paper.** seed `{r['paper'].get('seed')}`, paragraph {r['paper'].get('paragraph')}  ",
        f"**Rerun.** `{r['command']}`  ",
        f"**Wall time.** {wall_text(r)} (budget {r['budget_s']:.0f} s"
        + ("; OVER BUDGET)" if r.get("over_budget") else ")")
        + f"; commit {prov.get('commit')}, dirty {prov.get('dirty')}"
        + (
            f", claim {prov.get('claim_hash')} ({fresh['hash']}), config {prov.get('config_hash')}"
            if prov.get("claim_hash")
            else ""
        )
        + f"; torch {fresh['torch']}" + ("" if fresh["torch_current"] else f" (installed: {current_torch()})"),
        "",
    ]
    notes = _v3_notes(r)
    if notes:
        lines += ["  \n".join(notes), ""]
    warn = warnings_of(r)
    if warn:
        lines += ["**Warnings.** " + "; ".join(warn), ""]
    if r.get("premises"):
        lines += ["**Premises** (the testbed must show these before any comparison means anything).", ""]
        lines += [_md_table(JUDGED_HEADER, judged_rows(r, r["premises"])), ""]
    lines += ["**Evidence criteria.**", "", _md_table(JUDGED_HEADER, judged_rows(r, evidence)), ""]
    if design:
        lines += ["**Design checks** (hold by construction; checked for bugs).", ""]
        lines += [_md_table(JUDGED_HEADER, judged_rows(r, design)), ""]
    cost = _cost(r)
    if cost:
        lines += ["**Cost of our CPU code** (reported; never deciding unless a criterion opts in).", ""]
        lines += [_md_table(JUDGED_HEADER, judged_rows(r, cost)), ""]
    if r.get("headlines"):
        lines += [
            "**The paper's headlines** (* primary: its verdict is the claim's; the others keep their own).",
            "",
            _md_table(["headline", "tested by", "status"], headline_rows(r)),
            "",
        ]
    if r.get("items"):
        lines += ["**Items per seed.** " + ", ".join(f"{k}: {v}" for k, v in r["items"].items()), ""]
    budget = budget_table(r)
    if budget:
        lines += ["**Budget per arm** (seed 1 of the run).", "", _md_table(*budget), ""]
    lines += [_md_table(["metric", *(display_name(r, a) for a in arms)], rows), ""]
    for label, key in (
        ("Implemented", "implemented"),
        ("Differences from the paper", "differences"),
        ("Data", "data"),
    ):
        if r.get(key):
            lines += [f"**{label}.** {r[key]}", ""]
    for name, header, rows in benchmark_tables(r):
        lines += [f"**Benchmark `{name}`** (one run).", "", _md_table(header, rows), ""]
    for p in plots:
        lines += [f"![{p.stem}]({os.path.relpath(p, base)})", ""]
    return "\n".join(lines)


def load_ruler(folder: Path) -> list[dict[str, Any]]:
    """RULER tables written by ``neurips26 ruler --out <folder>/<name>.json`` (kind ``ruler``), sorted by name."""
    folder = Path(folder)
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        data = json.loads(path.read_text())
        if data.get("kind") == "ruler" and data.get("table"):
            out.append({**data, "name": path.stem})
    return out


def ruler_grid(data: dict[str, Any]) -> tuple[list[str], list[int], list[list[float | None]]]:
    """Tasks (rows), lengths (columns) and accuracy per cell (None where the table has no cell)."""
    tasks = list(dict.fromkeys(row["task"] for row in data["table"]))
    lengths = sorted({int(row["length"]) for row in data["table"]})
    acc = {(row["task"], int(row["length"])): float(row["accuracy"]) for row in data["table"]}
    return tasks, lengths, [[acc.get((t, n)) for n in lengths] for t in tasks]


def ruler_heatmap(data: dict[str, Any], folder: Path) -> Path:
    """Accuracy heatmap (task x context length) of one RULER table, as kvpress shows its leaderboard."""
    tasks, lengths, grid = ruler_grid(data)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(4.2, 1.6 + 1.1 * len(lengths)), 1.2 + 0.38 * len(tasks)))
    values = [[math.nan if v is None else v for v in row] for row in grid]
    im = ax.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            if not math.isnan(v):
                ax.text(
                    j,
                    i,
                    f"{v:.2f}",
                    ha="center",
                    va="center",
                    color="white" if v < 0.6 else "black",
                    fontsize=8,
                )
    ax.set_xticks(range(len(lengths)), [str(n) for n in lengths])
    ax.set_yticks(range(len(tasks)), tasks)
    ax.set_xlabel("context length (tokens)")
    ax.set_title(
        f"RULER accuracy: {data.get('model')}\n{data.get('cache')} cache, n={data.get('n')} per cell",
        fontsize=9,
    )
    fig.colorbar(im, ax=ax, fraction=0.04)
    return save_figure(fig, folder, f"ruler_{data['name']}", dpi=110)


def _ruler_md(data: dict[str, Any], plot: Path, base: Path) -> str:
    tasks, lengths, grid = ruler_grid(data)
    rows = [[t] + ["-" if v is None else f"{v:.2f}" for v in row] for t, row in zip(tasks, grid)]
    git = (data.get("env") or {}).get("git") or {}
    return "\n".join(
        [
            f"### RULER: {data.get('model')} with the {data.get('cache')} cache",
            "",
            f"Accuracy (RULER string match) per task and context length, {data.get('n')} items per cell, "
            f"seed {data.get('seed')}; commit {str(git.get('commit', '?'))[:10]}. Rerun: `{data.get('command', '')}`.",
            "",
            _md_table(["task", *[str(n) for n in lengths]], rows),
            "",
            f"![{data['name']}]({os.path.relpath(plot, base)})",
            "",
        ]
    )


def build_report(results_dir: Path, out_dir: Path | None = None) -> tuple[Path, Path]:
    """Write ``report.md`` and ``report.html`` for all results in ``results_dir``.

    Returns the two paths. Plots go to ``<out_dir>/plots``.
    """
    results_dir = Path(results_dir)
    out_dir = Path(out_dir) if out_dir is not None else results_dir
    results = [rejudged(r) for r in load_results(results_dir)]
    full_dir = results_dir.parent / "full"
    is_full = full_dir.resolve() == results_dir.resolve()
    committed = results if is_full else [rejudged(r) for r in load_results(full_dir)]
    lead: list[str] = []
    lead_table: tuple[list[str], list[list[str]]] | None = None
    if committed:
        intro_lines, header, crows = committed_section(
            committed, results_dir.parent / "seedcheck", None if is_full else results
        )
        lead = intro_lines + [_md_table(header, crows), ""]
        lead_table = (header, crows)
    plots = {r["slug"]: claim_plots(r, out_dir / "plots") for r in results}
    counts = {
        v: sum(r["verdict"] == v for r in results) for v in ("reproduced", "not reproduced", "inconclusive")
    }
    testbed = sum(str(r.get("verdict_reason", "")).startswith("testbed") for r in results)
    intro = [
        "# neurips26 claim-check report",
        "",
        *lead,
        *(["## This run: " + (results[0].get("profile", results_dir.name) if results else results_dir.name), ""] if lead else []),
        f"{len(results)} claim checks from `{results_dir}`: "
        + ", ".join(f"{n} {v}" for v, n in counts.items())
        + (f" ({testbed} of them because a premise of the testbed does not hold)" if testbed else "")
        + ". Each line names the criterion that decided the verdict; every claim's section lists its "
        "premises, criteria, design checks and the paper's headlines.",
        "",
    ]
    rows = summary_rows(results)
    md = "\n".join(intro + [_md_table(SUMMARY_HEADER, rows), ""])
    md += "\n" + "\n".join(_section_md(r, plots[r["slug"]], out_dir) for r in results)
    ruler = [
        (data, ruler_heatmap(data, out_dir / "plots")) for data in load_ruler(results_dir.parent / "ruler")
    ]
    if ruler:
        md += "\n## " + RULER_HEADING + "\n\n" + RULER_INTRO + "\n\n"
        md += "\n".join(_ruler_md(data, plot, out_dir) for data, plot in ruler)
    from neurips26.bench.report import bench_markdown, bench_plot, load_bench

    bench = [(data, bench_plot(data, out_dir / "plots")) for data in load_bench(results_dir.parent / "bench")]
    if bench:
        md += "\n" + bench_markdown(bench, out_dir)
    md += "\n## Glossary\n\n" + "\n".join(f"- **{k}**: {v}" for k, v in glossary(results).items()) + "\n"
    md_path = out_dir / "report.md"
    atomic_write_text(md_path, md)
    html_path = out_dir / "report.html"
    atomic_write_text(html_path, _html(results, rows, plots, ruler, bench, lead_table, lead[:5]))
    return md_path, html_path


def _img(path: Path) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}"/>'


def _link_cell(cell: str) -> str:
    if cell.startswith("[") and "](#" in cell:
        label, anchor = cell[1:].split("](#", 1)
        return f'<a href="#{html.escape(anchor.rstrip(")"))}">{html.escape(label)}</a>'
    return html.escape(str(cell))


def _html_rows(header: list[str], rows: list[list[str]], link_first: bool = False) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td>{_link_cell(c) if (link_first and i == 0) else html.escape(str(c))}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _html(
    results: list[dict[str, Any]],
    rows: list[list[str]],
    plots: dict[str, list[Path]],
    ruler: list[tuple[dict[str, Any], Path]] = (),
    bench: list[tuple[dict[str, Any], Path]] = (),
    lead_table: tuple[list[str], list[list[str]]] | None = None,
    lead_intro: list[str] = (),
) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>neurips26 report</title><style>",
        "body{font-family:sans-serif;max-width:1200px;margin:auto;padding:1em}"
        "table{border-collapse:collapse;font-size:12px;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}"
        "img{max-width:100%;margin:.3em}.warn{color:#a60}",
        "</style></head><body><h1>neurips26 claim-check report</h1>",
    ]
    if lead_table is not None:
        parts.append("<h2 id='committed'>Committed full-profile verdicts</h2>")
        parts += [f"<p>{html.escape(line.replace('**', ''))}</p>" for line in lead_intro[1:] if line and not line.startswith("#")]
        parts.append(_html_rows(*lead_table, link_first=True))
        parts.append("<h2>This run</h2>")
    parts.append(_html_rows(SUMMARY_HEADER, rows, link_first=True))
    for r in results:
        arms = [r["method"], *r["baselines"], *r.get("references", [])]
        evidence, design = _split_criteria(r)
        cost = _cost(r)
        parts.append(f"<h2 id='{html.escape(r['slug'])}'>{html.escape(r['title'])}</h2>")
        parts.append(
            f"<p><b>Claim.</b> {html.escape(r['claim'])}<br/><b>Verdict ({r['profile']}, seeds "
            f"{r['seeds']}).</b> {html.escape(verdict_text(r))}; deciding: {html.escape(describe_numbers(r, deciding(r)))}"
            f"<br/><b>Wall.</b> {html.escape(wall_text(r))}<br/><b>Rerun.</b> "
            f"<code>{html.escape(r['command'])}</code></p>"
        )
        warn = warnings_of(r)
        if warn:
            parts.append(f"<p class='warn'><b>Warnings.</b> {html.escape('; '.join(warn))}</p>")
        if r.get("premises"):
            parts.append("<p><b>Premises</b></p>" + _html_rows(JUDGED_HEADER, judged_rows(r, r["premises"])))
        parts.append("<p><b>Evidence criteria</b></p>" + _html_rows(JUDGED_HEADER, judged_rows(r, evidence)))
        if design:
            parts.append("<p><b>Design checks</b></p>" + _html_rows(JUDGED_HEADER, judged_rows(r, design)))
        if cost:
            parts.append("<p><b>Cost of our CPU code</b> (never deciding unless it opts in)</p>" + _html_rows(JUDGED_HEADER, judged_rows(r, cost)))
        for note in _v3_notes(r):
            parts.append(f"<p>{html.escape(note.replace('**', ''))}</p>")
        if r.get("headlines"):
            parts.append(
                "<p><b>The paper's headlines</b></p>"
                + _html_rows(["headline", "tested by", "status"], headline_rows(r))
            )
        budget = budget_table(r)
        if budget:
            parts.append("<p><b>Budget per arm</b></p>" + _html_rows(*budget))
        parts.append(
            _html_rows(
                ["metric", *(display_name(r, a) for a in arms)],
                [[n] + [fmt(v.get(a)) for a in arms] for n, v in r["metrics"].items()],
            )
        )
        for label, key in (("Implemented", "implemented"), ("Differences", "differences"), ("Data", "data")):
            if r.get(key):
                parts.append(f"<p><b>{label}.</b> {html.escape(r[key])}</p>")
        for name, header, table in benchmark_tables(r):
            parts.append(f"<p><b>Benchmark <code>{html.escape(name)}</code></b></p>")
            parts.append(_html_rows(header, table))
        parts += [_img(p) for p in plots[r["slug"]]]
    if ruler:
        parts.append(f"<h2 id='ruler'>{html.escape(RULER_HEADING)}</h2><p>{html.escape(RULER_INTRO)}</p>")
    for data, plot in ruler:
        tasks, lengths, grid = ruler_grid(data)
        parts.append(
            f"<h3>{html.escape(str(data.get('model')))} with the {html.escape(str(data.get('cache')))} cache</h3>"
        )
        parts.append(
            f"<p>{data.get('n')} items per cell, seed {data.get('seed')}. Rerun: "
            f"<code>{html.escape(str(data.get('command', '')))}</code></p>"
        )
        table = [[t] + ["-" if v is None else f"{v:.2f}" for v in row] for t, row in zip(tasks, grid)]
        parts += [_html_rows(["task", *[str(n) for n in lengths]], table), _img(plot)]
    if bench:
        from neurips26.bench.report import bench_html

        parts.append(bench_html(list(bench), _img))
    parts.append("<h2 id='glossary'>Glossary</h2><dl>")
    parts += [
        f"<dt><b>{html.escape(k)}</b></dt><dd>{html.escape(v)}</dd>" for k, v in glossary(results).items()
    ]
    parts.append("</dl></body></html>")
    return "".join(parts)

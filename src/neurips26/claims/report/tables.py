"""The report's verdict tables, as rows of text cells shared by the Markdown and the HTML rendering.

The one-line-per-claim summary, the judged premises and criteria (with both bounds, mde and Holm's
p-value), the paper's headlines and what tests them, the budget per arm, stored benchmarks, and the notes
on the re-judgement (recorded verdict, primary headline, diagnoses, cost opt-ins).
"""

from __future__ import annotations

from typing import Any

from neurips26.claims.report.cells import (
    _fmt_number,
    _num,
    deciding,
    describe_numbers,
    display_name,
    verdict_text,
    wall_text,
    warnings_of,
)

SUMMARY_HEADER = ["method", "verdict", "deciding criterion", "seeds", "wall", "warnings"]


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


JUDGED_HEADER = ["key", "criterion", "verdict", "n", "mean", "sd", "L", "U", "mde", "p_refute", "note"]


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

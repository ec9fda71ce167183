"""Unseen-seed agreement and the committed full-profile verdict table that leads every report.

A seed-check run (``results/seedcheck/<slug>_seeds*.json``) counts when it ran the committed code and
config on seeds the committed run did not use; a decisive verdict it does not repeat is published as
inconclusive (spread). Beside each committed verdict, a quick report shows this machine's quick re-check:
whether the committed deciding effect points the same way here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from neurips26.claims.report.cells import _find, _num, deciding, describe_numbers, verdict_text
from neurips26.claims.report.results import current_torch, freshness, rejudged


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

"""One claim's section of ``report.md``: verdict, provenance and freshness, premises, criteria, design
checks, cost, headlines, budget, metrics, what is implemented and the plots."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from neurips26.claims.report.cells import (
    _md_table,
    deciding,
    describe_numbers,
    display_name,
    fmt,
    verdict_text,
    wall_text,
    warnings_of,
)
from neurips26.claims.report.results import current_torch, freshness
from neurips26.claims.report.tables import (
    JUDGED_HEADER,
    _cost,
    _split_criteria,
    _v3_notes,
    benchmark_tables,
    budget_table,
    headline_rows,
    judged_rows,
)


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

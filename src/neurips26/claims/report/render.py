"""Rendering of the report's tables: one claim's section of ``report.md`` (verdict, provenance and
freshness, premises, criteria, design checks, cost, headlines, budget, metrics, what is implemented, plots)
and the self-contained ``report.html`` (the same tables, plots embedded as base64 PNG)."""

from __future__ import annotations

import base64
import html
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
from neurips26.claims.report.glossary import glossary
from neurips26.claims.report.results import current_torch, freshness
from neurips26.claims.report.ruler import RULER_HEADING, RULER_INTRO, ruler_grid
from neurips26.claims.report.tables import (
    JUDGED_HEADER,
    SUMMARY_HEADER,
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

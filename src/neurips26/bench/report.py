"""The report's Performance section: benchmark ratios as tables and plots (ratio against the case size).

Reads ``results/bench/<name>.json`` as :func:`neurips26.bench.run_bench` wrote them.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

HEADING = "Performance"
INTRO = (
    "Each efficiency component timed against the reference a user would otherwise run, in one process, "
    "interleaved (`neurips26 bench`). Ratios are medians of the method's time over the reference's "
    "(below 1 is faster); targets are issue 22's. Absolute times differ between CPUs and are not compared "
    "across runs."
)


def load_bench(folder: Path) -> list[dict[str, Any]]:
    """Every ``<folder>/*.json`` written by ``neurips26 bench``, sorted by name."""
    out = []
    for path in sorted(Path(folder).glob("*.json")) if Path(folder).is_dir() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, dict) and data.get("rows") and data.get("reference"):
            out.append(data)
    return out


def _arms(data: dict[str, Any]) -> list[str]:
    """Every arm of any row, in first-seen order, without the reference (a case may lack some arms)."""
    arms: list[str] = []
    for r in data["rows"]:
        arms += [a for a in r["ratio"] if a != data["reference"] and a not in arms]
    return arms


def ratio_rows(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per (threads, case): the ratio of every arm against the reference ("-" where not run)."""
    arms = _arms(data)
    keys = list(data["rows"][0]["case"])
    header = ["threads", *keys, f"{data['reference']} (ms)", *(f"{a} / {data['reference']}" for a in arms)]
    rows = []
    for r in data["rows"]:
        ref_ms = r["timing"][data["reference"]]["median_s"] * 1e3
        rows.append([str(r["threads"]), *(str(r["case"][k]) for k in keys), f"{ref_ms:.3g}",
                     *(f"{r['ratio'][a]:.2f}x" if a in r["ratio"] else "-" for a in arms)])  # fmt: skip
    return header, rows


def target_rows(data: dict[str, Any]) -> list[list[str]]:
    out = []
    for arm, t in data.get("targets", {}).items():
        where = f"{data['x']} = {t.get(data['x'])}"
        for key, lim in t.get("conditions", {}).items():
            where += f", {key} <= {lim}"
        if t.get("met") is None:
            measured, state = "-", "not in this run"
        else:
            measured, state = f"{t['measured']:.2f}x", ("met" if t["met"] else "missed")
        out.append([data["name"], arm, f"<= {t['max_ratio']}x at {where}", measured, state])
    return out


def bench_plot(data: dict[str, Any], folder: Path) -> Path:
    """Ratio against the case size ``x`` for every arm; one line per thread count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from neurips26.claims.plotting import save_figure

    x = data["x"]
    arms = _arms(data)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    styles = {t: s for t, s in zip(sorted({r["threads"] for r in data["rows"]}), ("-", "--", ":", "-."))}
    for i, arm in enumerate(arms):
        for t, style in styles.items():
            pts = {}
            for r in data["rows"]:
                if r["threads"] == t and arm in r["ratio"]:  # several batches at one x: the largest batch
                    pts[r["case"][x]] = r["ratio"][arm]
            xs = sorted(pts)
            ax.plot(xs, [pts[v] for v in xs], style, marker="o", color=f"C{i}", label=f"{arm} ({t} thr)")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(f"time / {data['reference']}")
    ax.set_title(data["title"], fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    return save_figure(fig, folder, f"bench_{data['name']}", dpi=110)


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def bench_markdown(items: list[tuple[dict[str, Any], Path]], base: Path) -> str:
    """The Markdown Performance section for ``[(data, plot)]``."""
    md = [f"## {HEADING}", "", INTRO, ""]
    targets = [row for data, _ in items for row in target_rows(data)]
    if targets:
        md += [_md_table(["benchmark", "arm", "target", "measured", "status"], targets), ""]
    for data, plot in items:
        head, rows = ratio_rows(data)
        quick = " (quick)" if data.get("quick") else ""
        md += [f"### {data['title']}{quick}", "", data.get("notes", ""), "", _md_table(head, rows), ""]
        md += [f"![{data['name']}]({plot.relative_to(base).as_posix()})", ""]
    return "\n".join(md) + "\n"


def bench_html(items: list[tuple[dict[str, Any], Path]], img) -> str:
    """The HTML Performance section; ``img(path)`` renders a plot (the report embeds it)."""

    def table(header: list[str], rows: list[list[str]]) -> str:
        h = "".join(f"<th>{html.escape(c)}</th>" for c in header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
        return f"<table><tr>{h}</tr>{body}</table>"

    parts = [f"<h2 id='performance'>{HEADING}</h2><p>{html.escape(INTRO)}</p>"]
    targets = [row for data, _ in items for row in target_rows(data)]
    if targets:
        parts.append(table(["benchmark", "arm", "target", "measured", "status"], targets))
    for data, plot in items:
        head, rows = ratio_rows(data)
        parts.append(f"<h3>{html.escape(data['title'])}</h3><p>{html.escape(data.get('notes', ''))}</p>")
        parts.append(table(head, rows))
        parts.append(img(plot))
    return "\n".join(parts)

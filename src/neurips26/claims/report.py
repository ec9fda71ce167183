"""Build ``report.md`` and a self-contained ``report.html`` from result JSON files alone.

The report has one summary table (method, paper claim, metric, baseline and method mean +- std, seeds,
criterion, verdict, wall time), then one section per claim with its plots (PNG, embedded in the HTML
as base64), what is implemented, the differences from the paper, the data used and the exact command
to rerun it, and finally a glossary of every metric.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
from pathlib import Path
from typing import Any

from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.cache import atomic_write_text

GENERIC_GLOSSARY = {
    "verdict": "reproduced / not reproduced / inconclusive, computed by the declared criteria from the per-seed numbers.",
    "wall_s": "wall-clock seconds of all seeds of the claim check in one process.",
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
        if isinstance(data, dict) and data.get("schema") == 1 and "slug" in data:
            results.append(data)
    return sorted(results, key=lambda r: r["slug"])


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


def headline(result: dict[str, Any]) -> tuple[str, str, str, str]:
    """(metric, baseline name, baseline numbers, method numbers) of the first criterion."""
    crit = result["criteria"][0]["data"] if result.get("criteria") else {}
    metric = crit.get("metric") or next(iter(result["metrics"]), "")
    baseline = crit.get("baseline") or (result["baselines"][0] if result["baselines"] else "")
    arms = result["metrics"].get(metric, {})
    return (
        metric,
        baseline or "-",
        fmt(arms.get(baseline)) if baseline else "-",
        fmt(arms.get(result["method"])),
    )


def summary_rows(results: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for r in results:
        metric, baseline, base_num, meth_num = headline(r)
        flag = " (over budget)" if r.get("over_budget") else ""
        rows.append(
            [
                r["slug"],
                r["claim"],
                metric,
                f"{baseline}: {base_num}",
                f"{r['method']}: {meth_num}",
                str(len(r["seeds"])),
                "; ".join(c["text"] for c in r["criteria"]),
                r["verdict"],
                f"{r['wall_s']:.0f} s{flag}",
            ]
        )
    return rows


SUMMARY_HEADER = [
    "method",
    "paper claim",
    "metric",
    "baseline",
    "method",
    "seeds",
    "criterion",
    "verdict",
    "wall",
]


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
            ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=7)
            ax.set_title(name, fontsize=8)
        paths.append(save_figure(fig, folder, f"{result['slug']}_metrics", dpi=90))
    for name, arms in result.get("curves", {}).items():
        fig, ax = plt.subplots(figsize=(4.5, 3))
        for arm, runs in arms.items():
            length = min(len(run) for run in runs) if runs else 0
            if length == 0:
                continue
            means = [mean_std([run[i] for run in runs])[0] for i in range(length)]
            ax.plot(range(length), means, label=arm, lw=2 if arm == result["method"] else 1)
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
            tables.append((name, ["setting", "arm", *measures], table))
    return tables


def _fmt_number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "" if value is None else str(value)
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.3g}"
    return f"{value:.4g}"


def _section_md(r: dict[str, Any], plots: list[Path], base: Path) -> str:
    arms = [r["method"], *r["baselines"]]
    rows = [[name] + [fmt(values.get(a)) for a in arms] for name, values in r["metrics"].items()]
    crit_rows = [
        [c["text"], c["verdict"], json.dumps({k: round(v, 4) for k, v in c["numbers"].items()})]
        for c in r["criteria"]
    ]
    env = r.get("env", {})
    lines = [
        f"## {r['title']}",
        "",
        f"**Claim.** {r['claim']}  ",
        f"**Verdict ({r['profile']}, seeds {r['seeds']}).** {r['verdict']}  ",
        f"**Paper.** seed `{r['paper'].get('seed')}`, paragraph {r['paper'].get('paragraph')}  ",
        f"**Rerun.** `{r['command']}`  ",
        f"**Wall time.** {r['wall_s']:.1f} s (budget {r['budget_s']:.0f} s"
        + ("; OVER BUDGET)" if r.get("over_budget") else ")")
        + f"; commit {env.get('git', {}).get('commit')}",
        "",
        _md_table(["metric", *arms], rows),
        "",
        _md_table(["criterion", "verdict", "numbers"], crit_rows),
        "",
    ]
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


def build_report(results_dir: Path, out_dir: Path | None = None) -> tuple[Path, Path]:
    """Write ``report.md`` and ``report.html`` for all results in ``results_dir``.

    Returns the two paths. Plots go to ``<out_dir>/plots``.
    """
    results_dir = Path(results_dir)
    out_dir = Path(out_dir) if out_dir is not None else results_dir
    results = load_results(results_dir)
    plots = {r["slug"]: claim_plots(r, out_dir / "plots") for r in results}
    counts = {
        v: sum(r["verdict"] == v for r in results) for v in ("reproduced", "not reproduced", "inconclusive")
    }
    intro = [
        "# neurips26 claim-check report",
        "",
        f"{len(results)} claim checks from `{results_dir}`: "
        + ", ".join(f"{n} {v}" for v, n in counts.items())
        + ".",
        "",
    ]
    rows = summary_rows(results)
    md = "\n".join(intro + [_md_table(SUMMARY_HEADER, rows), ""])
    md += "\n".join(_section_md(r, plots[r["slug"]], out_dir) for r in results)
    md += "\n## Glossary\n\n" + "\n".join(f"- **{k}**: {v}" for k, v in glossary(results).items()) + "\n"
    md_path = out_dir / "report.md"
    atomic_write_text(md_path, md)
    html_path = out_dir / "report.html"
    atomic_write_text(html_path, _html(results, rows, plots))
    return md_path, html_path


def _img(path: Path) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}"/>'


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _html(results: list[dict[str, Any]], rows: list[list[str]], plots: dict[str, list[Path]]) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>neurips26 report</title><style>",
        "body{font-family:sans-serif;max-width:1200px;margin:auto;padding:1em}"
        "table{border-collapse:collapse;font-size:12px;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 6px}"
        "img{max-width:100%;margin:.3em}.reproduced{color:#070}.not{color:#a00}",
        "</style></head><body><h1>neurips26 claim-check report</h1>",
        _html_table(SUMMARY_HEADER, rows),
    ]
    for r in results:
        arms = [r["method"], *r["baselines"]]
        parts.append(f"<h2 id='{html.escape(r['slug'])}'>{html.escape(r['title'])}</h2>")
        parts.append(
            f"<p><b>Claim.</b> {html.escape(r['claim'])}<br/><b>Verdict ({r['profile']}, seeds "
            f"{r['seeds']}).</b> {html.escape(r['verdict'])}<br/><b>Rerun.</b> "
            f"<code>{html.escape(r['command'])}</code></p>"
        )
        parts.append(
            _html_table(
                ["metric", *arms], [[n] + [fmt(v.get(a)) for a in arms] for n, v in r["metrics"].items()]
            )
        )
        parts.append(
            _html_table(["criterion", "verdict"], [[c["text"], c["verdict"]] for c in r["criteria"]])
        )
        for label, key in (("Implemented", "implemented"), ("Differences", "differences"), ("Data", "data")):
            if r.get(key):
                parts.append(f"<p><b>{label}.</b> {html.escape(r[key])}</p>")
        for name, header, table in benchmark_tables(r):
            parts.append(f"<p><b>Benchmark <code>{html.escape(name)}</code></b></p>")
            parts.append(_html_table(header, table))
        parts += [_img(p) for p in plots[r["slug"]]]
    parts.append("<h2>Glossary</h2><dl>")
    parts += [
        f"<dt><b>{html.escape(k)}</b></dt><dd>{html.escape(v)}</dd>" for k, v in glossary(results).items()
    ]
    parts.append("</dl></body></html>")
    return "".join(parts)

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
        "numbers. A claim is inconclusive (testbed) when one of its premises does not hold, inconclusive "
        "(error) when a criterion could not be computed, not reproduced when a criterion is not reproduced, "
        "reproduced when every criterion is and at least one of them is evidence, and inconclusive "
        "(spread) otherwise."
    ),
    "decision rule": (
        "per-seed values v (paired differences, sign-adjusted so that larger is better) with mean m, sd s, "
        "n seeds; one-sided bounds L = m - t s/sqrt(n), U = m + t s/sqrt(n) (Student t at the criterion's "
        "confidence). Reproduced when L clears the margin, not reproduced when U is at or below it, "
        "inconclusive in between or with fewer seeds than min_seeds. Within: on |m|. NaN or inf counts as "
        "the worst value."
    ),
    "premise": "a criterion about the testbed itself (the baseline learns, the task is not at ceiling, the regime occurs); judged like any criterion, shown first.",
    "evidence / design": "evidence: an empirical comparison that could go either way; design: holds by construction and is checked for bugs (bit-exactness, identities). Reproduced needs evidence.",
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


def judged_rows(result: dict[str, Any], entries: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for c in entries:
        n = c.get("numbers", {})
        rows.append(
            [
                c.get("key", ""),
                c.get("text", ""),
                c.get("verdict", ""),
                _num(n.get("n"), 0),
                _num(n.get("mean")),
                _num(n.get("std")),
                _num(n.get("lower_bound", n.get("lower_abs"))),
                _num(n.get("upper_bound", n.get("upper_abs"))),
                _num(n.get("mde")),
                c.get("error", ""),
            ]
        )
    return rows


JUDGED_HEADER = ["key", "criterion", "verdict", "n", "mean", "sd", "L", "U", "mde", "error"]


def headline_rows(result: dict[str, Any]) -> list[list[str]]:
    rows = []
    for h in result.get("headlines", []):
        if h.get("untested"):
            rows.append([h["text"], "-", "untested: " + h["untested"]])
        else:
            tested = ", ".join(f"{k} ({v})" for k, v in h.get("verdicts", {}).items())
            rows.append([h["text"], tested, h.get("status", "")])
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


def _section_md(r: dict[str, Any], plots: list[Path], base: Path) -> str:
    arms = [r["method"], *r["baselines"], *r.get("references", [])]
    rows = [[name] + [fmt(values.get(a)) for a in arms] for name, values in r["metrics"].items()]
    env = r.get("env", {})
    prov = r.get("provenance") or {
        "commit": env.get("git", {}).get("commit"),
        "dirty": env.get("git", {}).get("dirty"),
    }
    evidence, design = _split_criteria(r)
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
            f", claim {prov.get('claim_hash')}, config {prov.get('config_hash')}"
            if prov.get("claim_hash")
            else ""
        ),
        "",
    ]
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
    if r.get("headlines"):
        lines += [
            "**The paper's headlines.**",
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
    results = load_results(results_dir)
    plots = {r["slug"]: claim_plots(r, out_dir / "plots") for r in results}
    counts = {
        v: sum(r["verdict"] == v for r in results) for v in ("reproduced", "not reproduced", "inconclusive")
    }
    testbed = sum(r.get("verdict_reason") == "testbed" for r in results)
    intro = [
        "# neurips26 claim-check report",
        "",
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
    atomic_write_text(html_path, _html(results, rows, plots, ruler, bench))
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
) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>neurips26 report</title><style>",
        "body{font-family:sans-serif;max-width:1200px;margin:auto;padding:1em}"
        "table{border-collapse:collapse;font-size:12px;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}"
        "img{max-width:100%;margin:.3em}.warn{color:#a60}",
        "</style></head><body><h1>neurips26 claim-check report</h1>",
        _html_rows(SUMMARY_HEADER, rows, link_first=True),
    ]
    for r in results:
        arms = [r["method"], *r["baselines"], *r.get("references", [])]
        evidence, design = _split_criteria(r)
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

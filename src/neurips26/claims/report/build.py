"""``build_report``: write ``report.md`` and ``report.html`` for one results folder.

The committed full-profile table leads (with unseen-seed agreement and, for another profile, this
machine's re-check), then this run's summary, one section per claim, RULER calibration, the Performance
section and the glossary.
"""

from __future__ import annotations

from pathlib import Path

from neurips26.claims.report.cells import _md_table
from neurips26.claims.report.glossary import glossary
from neurips26.claims.report.plots import claim_plots
from neurips26.claims.report.render import _html, _section_md
from neurips26.claims.report.results import load_results, rejudged
from neurips26.claims.report.ruler import RULER_HEADING, RULER_INTRO, _ruler_md, load_ruler, ruler_heatmap
from neurips26.claims.report.seeds import committed_section
from neurips26.claims.report.tables import SUMMARY_HEADER, summary_rows
from neurips26.common.cache import atomic_write_text


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

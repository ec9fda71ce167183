"""Build ``report.md`` and a self-contained ``report.html`` from result JSON files alone.

The report opens with one short line per claim: the verdict (with its reason when the testbed is at
fault), the deciding criterion with method against baseline (mean +- sd) and its bound, the seeds,
the wall time (warm and cold cache) and warnings. Then one section per claim: its premises first,
the evidence criteria with both bounds and the minimal detectable effect, the design checks apart,
the table of the paper's headlines and what tests them, the metrics per arm, plots (PNG, embedded in
the HTML as base64), what is implemented, the differences from the paper, the data, provenance and
the exact command to rerun it; finally a glossary of every metric and of the decision rule.

Modules, by concern. This package re-exports every name they define (private ones too, as the single
module did); each module imports the names it uses, so a test patches a name in the module that uses it:

- :mod:`~neurips26.claims.report.results`: load result files, re-judge them, freshness of code and torch.
- :mod:`~neurips26.claims.report.cells`: one cell as text (mean +- sd, numbers, deciding criterion).
- :mod:`~neurips26.claims.report.seeds`: unseen-seed agreement and the committed verdict table.
- :mod:`~neurips26.claims.report.tables`: summary, judged-criteria, headline, budget and benchmark tables.
- :mod:`~neurips26.claims.report.glossary`: the glossary.
- :mod:`~neurips26.claims.report.plots`: default plots and the claim's plot hook.
- :mod:`~neurips26.claims.report.ruler`: the RULER calibration section.
- :mod:`~neurips26.claims.report.render`: a claim's Markdown section and the HTML page.
- :mod:`~neurips26.claims.report.build`: :func:`build_report`, which writes both files.

The whole package is harness code (:data:`neurips26.claims.runner.HARNESS`): no claim imports it, so it is
outside every claim hash.
"""

from __future__ import annotations

from neurips26.claims.report.build import (  # noqa: F401 - private names kept importable
    build_report,
)
from neurips26.claims.report.cells import (  # noqa: F401 - private names kept importable
    _claim_display_names,
    _find,
    _fmt_number,
    _md_table,
    _num,
    deciding,
    describe_numbers,
    display_name,
    fmt,
    mean_std,
    verdict_text,
    wall_text,
    warnings_of,
)
from neurips26.claims.report.glossary import (  # noqa: F401 - private names kept importable
    GENERIC_GLOSSARY,
    glossary,
)
from neurips26.claims.report.plots import (  # noqa: F401 - private names kept importable
    claim_plots,
    default_plots,
)
from neurips26.claims.report.render import (  # noqa: F401 - private names kept importable
    _html,
    _html_rows,
    _img,
    _link_cell,
    _section_md,
)
from neurips26.claims.report.results import (  # noqa: F401 - private names kept importable
    _current_hash,
    current_torch,
    freshness,
    load_results,
    rejudged,
)
from neurips26.claims.report.ruler import (  # noqa: F401 - private names kept importable
    RULER_HEADING,
    RULER_INTRO,
    _ruler_md,
    load_ruler,
    ruler_grid,
    ruler_heatmap,
)
from neurips26.claims.report.seeds import (  # noqa: F401 - private names kept importable
    _disjoint,
    _effect,
    _float,
    committed_section,
    published_verdict,
    quick_recheck,
    seed_checks,
)
from neurips26.claims.report.tables import (  # noqa: F401 - private names kept importable
    JUDGED_HEADER,
    SUMMARY_HEADER,
    _cost,
    _entry_verdict,
    _fmt_budget,
    _split_criteria,
    _v3_notes,
    benchmark_tables,
    budget_table,
    headline_rows,
    judged_rows,
    summary_rows,
)

__all__ = [
    "GENERIC_GLOSSARY",
    "JUDGED_HEADER",
    "RULER_HEADING",
    "RULER_INTRO",
    "SUMMARY_HEADER",
    "benchmark_tables",
    "budget_table",
    "build_report",
    "claim_plots",
    "committed_section",
    "current_torch",
    "deciding",
    "default_plots",
    "describe_numbers",
    "display_name",
    "fmt",
    "freshness",
    "glossary",
    "headline_rows",
    "judged_rows",
    "load_results",
    "load_ruler",
    "mean_std",
    "published_verdict",
    "quick_recheck",
    "rejudged",
    "ruler_grid",
    "ruler_heatmap",
    "seed_checks",
    "summary_rows",
    "verdict_text",
    "wall_text",
    "warnings_of",
]

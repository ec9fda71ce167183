"""The report's RULER calibration section: tables written by ``neurips26 ruler``, their heatmaps and Markdown."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from neurips26.claims.plotting import pyplot, save_figure
from neurips26.claims.report.cells import _md_table

RULER_HEADING = "RULER calibration"


RULER_INTRO = (
    "What the small model can do at all: full-precision accuracy per RULER task and context length "
    "(neurips26.common.ruler). The KV-cache and sparse-prefill claims judge only tasks whose premise (full "
    "precision reaches the declared accuracy) holds at their length; the others are named in their results."
)


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

"""Plots of one claim's result: a bar chart per metric, a line plot per curve, plus the claim's own hook."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from neurips26.claims.plotting import pyplot, save_figure
from neurips26.claims.report.cells import display_name, mean_std


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

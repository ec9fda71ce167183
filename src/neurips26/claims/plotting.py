"""Shared helpers for the claims' ``plot(result, folder)`` hooks and the report's default plots.

Every plot hook draws with matplotlib's headless ``Agg`` backend and writes one PNG per figure into
the folder it is given. The two steps every hook shares live here:

- :func:`pyplot` selects the ``Agg`` backend and returns ``matplotlib.pyplot`` (imported lazily, so
  importing a claim module stays light);
- :func:`save_figure` creates the folder, lays the figure out, writes ``<folder>/<name>.png`` and
  closes the figure (so long report builds do not accumulate open figures).

Typical hook::

    def plot(result, folder):
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ...
        return [save_figure(fig, folder, "myslug_curves", dpi=110)]
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from neurips26.common.checks import check_float

__all__ = ["pyplot", "save_figure"]


def pyplot() -> Any:
    """Select matplotlib's headless ``Agg`` backend and return the ``matplotlib.pyplot`` module.

    Returns
    -------
    module
        ``matplotlib.pyplot``, ready for ``plt.subplots(...)``; figures render without a display.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _check_name(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"name must be a str (the PNG file stem), got {type(name).__name__} ({name!r})")
    if not name or name.strip() != name:
        raise ValueError(f"name must be a non-empty file stem without surrounding spaces, got {name!r}")
    separators = {"/", "\\", os.sep, *((os.altsep,) if os.altsep else ())}
    if any(sep in name for sep in separators) or name in (".", ".."):
        raise ValueError(f"name must be a plain file stem without a path separator, got {name!r}")
    if name.lower().endswith(".png"):
        raise ValueError(f"name is the file stem ('.png' is appended), got {name!r}")
    return name


def save_figure(fig: Any, folder: str | os.PathLike[str], name: str, dpi: float = 100) -> Path:
    """Lay out ``fig``, save it as ``<folder>/<name>.png`` and close it.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure to save; it is closed afterwards (also when writing fails), so
        ``plt.get_fignums()`` no longer lists it.
    folder : str or os.PathLike
        Output folder; created with its parents when missing.
    name : str
        File stem without ``.png`` and without any path separator, e.g. ``"adkv_accuracy_metadata"``.
    dpi : float, default 100
        Resolution passed to ``Figure.savefig``; must be positive.

    Returns
    -------
    pathlib.Path
        ``Path(folder) / f"{name}.png"``.

    Raises
    ------
    TypeError
        ``fig`` is not a matplotlib figure, ``folder`` is not a path, ``name`` is not a str or ``dpi``
        is not a number. Nothing is written and the figure stays open.
    ValueError
        ``name`` is empty, contains a path separator or ends in ``.png``, or ``dpi`` is not a positive finite number.
        Nothing is written and the figure stays open.
    """
    from matplotlib.figure import Figure

    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib.figure.Figure, got {type(fig).__name__}")
    if not isinstance(folder, (str, os.PathLike)):
        raise TypeError(f"folder must be a str or os.PathLike, got {type(folder).__name__} ({folder!r})")
    if isinstance(folder, str) and not folder:
        raise ValueError("folder must be a non-empty path, got ''")
    name = _check_name(name)
    if not math.isfinite(check_float("dpi", dpi, low=0.0, low_open=True)):
        raise ValueError(f"dpi must be finite, got {dpi}")
    folder = Path(folder)
    path = folder / f"{name}.png"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fig.tight_layout()
        fig.savefig(path, dpi=dpi)
    finally:
        pyplot().close(fig)
    return path

"""Import optional dependencies with an error that names the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise ``ImportError`` telling the user which extra provides it.

    Parameters
    ----------
    module : str
        Dotted module name, e.g. ``"torch_geometric"``.
    extra : str
        The neurips26 extra that installs it, e.g. ``"graph"``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as err:  # pragma: no cover - exercised through a fake module name in tests
        raise ImportError(
            f"{module!r} is needed here but is not installed; install it with "
            f"`pip install 'neurips26[{extra}]'`"
        ) from err

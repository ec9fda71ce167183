"""Test-wide settings: headless plotting, cache folders out of HOME, bounded threads, and hypothesis
derandomised (the same examples on every run, so CI cannot fail by chance; set
``NEURIPS26_HYPOTHESIS=explore`` to draw fresh examples locally)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

_SCRATCH = Path(tempfile.gettempdir()) / "neurips26-tests"
# Trained tiny models are reused between test runs on one machine through this cache.
os.environ.setdefault("NEURIPS26_CACHE", str(Path.home() / ".cache" / "neurips26"))
os.environ.setdefault("MPLCONFIGDIR", str(_SCRATCH / "mpl"))
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("PYSTOW_HOME", str(_SCRATCH / "pystow"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
_hypothesis_settings.register_profile("explore", print_blob=True)
_hypothesis_settings.load_profile("explore" if os.environ.get("NEURIPS26_HYPOTHESIS") == "explore" else "ci")

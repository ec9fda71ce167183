"""Test-wide settings: headless plotting, cache folders out of HOME, bounded threads, and hypothesis
derandomised (the same examples on every run, so CI cannot fail by chance; set
``NEURIPS26_HYPOTHESIS=explore`` to draw fresh examples locally). Shared fixtures: ``one_thread``,
``tiny_llama`` and the session-wide ``smoke_result`` (one smoke run per claim check per session)."""

from __future__ import annotations

import copy
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

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


@pytest.fixture
def one_thread() -> Iterator[None]:
    """torch on one intra-op thread for the test; the previous count is restored afterwards."""
    from neurips26.common.threads import torch_threads

    with torch_threads(1):
        yield


@pytest.fixture
def tiny_llama() -> Callable[..., Any]:
    """Factory for the suite's tiny Llama, built with :func:`neurips26.common.models.build_tiny_lm`.

    ``tiny_llama(seed=0, vocab_size=64, **overrides)`` returns a ``LlamaForCausalLM`` in eval mode: hidden
    64, intermediate 96, 2 layers, 4 query / 2 KV heads, 256 positions, pad id 0 unless overridden
    (any ``LlamaConfig`` field). Its weights depend only on the arguments.
    """
    from neurips26.common.models import build_tiny_lm

    def make(seed: int = 0, vocab_size: int = 64, **overrides: Any):
        fields = {"hidden_size": 64, "intermediate_size": 96, **overrides}
        return build_tiny_lm("llama", vocab_size=vocab_size, seed=seed, **fields).eval()

    return make


def _run_once(done: dict[str, Any], slug: str, run: Callable[[], Any]) -> Any:
    """``run()`` once per ``slug``; a failure is remembered and re-raised, not rerun. Callers get deep copies."""
    if slug not in done:
        try:
            done[slug] = run()
        except Exception as err:  # noqa: BLE001 - re-raised for every caller
            done[slug] = err
    if isinstance(done[slug], BaseException):
        raise done[slug]
    return copy.deepcopy(done[slug])


@pytest.fixture(scope="session")
def smoke_result(tmp_path_factory) -> Callable[[str], dict[str, Any]]:
    """``smoke_result(slug)``: the smoke-profile result JSON of ``run_claim(slug, "smoke")``, run once per session.

    The conformance test (``tests/claims/test_conformance.py``) and the per-claim tests share one run per
    claim. The dict is the result file as written (JSON types: lists, not tuples).
    """
    done: dict[str, Any] = {}

    def run(slug: str) -> dict[str, Any]:
        from neurips26.claims.runner import run_claim

        out = tmp_path_factory.mktemp(f"smoke-{slug}")
        run_claim(slug, "smoke", out=out, force=True)
        return json.loads((out / "smoke" / f"{slug}.json").read_text())

    return lambda slug: _run_once(done, slug, lambda: run(slug))


@pytest.fixture(scope="session")
def smoke_rerun() -> Callable[[str], dict[str, Any]]:
    """``smoke_rerun(slug)``: the first smoke seed run again through the runner (``run_seed``), once per session.

    Returns the seed's ``SeedResult`` as JSON types (``{"metrics", "curves", "info"}``, one value per arm):
    compare it with ``smoke_result(slug)`` to check that the same seed gives the same numbers.
    """
    done: dict[str, Any] = {}

    def run(slug: str) -> dict[str, Any]:
        from neurips26.claims.base import Profile
        from neurips26.claims.runner import _json_default, run_seed
        from neurips26.registry import load_claim

        claim = load_claim(slug)
        result, _ = run_seed(claim, Profile.SMOKE, claim.seeds["smoke"][0])
        return json.loads(json.dumps(result.to_dict(), default=_json_default))

    return lambda slug: _run_once(done, slug, lambda: run(slug))

"""Test-wide settings: headless plotting, cache folders out of HOME, bounded threads, and hypothesis
derandomised (the same examples on every run, so CI cannot fail by chance; set
``NEURIPS26_HYPOTHESIS=explore`` to draw fresh examples locally). Shared fixtures: ``one_thread``,
``tiny_llama`` and the session-wide ``smoke_result`` (one smoke run per claim check per session)."""

from __future__ import annotations

import ast
import copy
import json
import os
import re
import sys
import tempfile
import textwrap
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


# ------------------------------------------------------------------------------------------- tiers
# Every test gets exactly one tier marker (issue 33 item 3), assigned here at collection:
#   unit         fast, no claim run                      `make test-fast` (-m 'unit and not slow')
#   claims       claim smoke runs and conformance         tests/claims/**, the smoke_result/smoke_rerun fixtures
#   integration  Ray, Flower simulation, gloo process groups, process pools, SmolLM2/Gemma
# An explicit @pytest.mark.unit/claims/integration on a test (or its module/class) wins. Otherwise a test
# is integration when its own source, the module-level helpers and strings it names, or the fixtures it
# requests match _INTEGRATION (a process group, a pool of processes, Ray, a Flower simulation, a
# pretrained SmolLM2/Gemma); then claims by path or fixture; everything else is unit. The `slow` marker is
# independent of the tier: `-m 'not slow'` still leaves those out of every tier.
TIERS = ("unit", "claims", "integration")
_CLAIM_FIXTURES = frozenset({"smoke_result", "smoke_rerun"})
_INTEGRATION = re.compile(
    r"""init_process_group | \bgloo\b | mp\.spawn | torch\.multiprocessing | multiprocessing\.(?:Pool|Process)
    | ProcessPoolExecutor | start_method\s*=\s*(?:FORK|'fork'|'spawn') | map_spans\(
    | \bray\.init | import\ ray | executor\s*=\s*'ray' | run_simulation | start_simulation | flwr\.simulation
    | 'simulation'
    | load_pretrained\(""",
    re.X,
)
# Fixtures whose use makes a test integration although their code names none of the above.
_INTEGRATION_FIXTURES = {
    "smol_runs": "the SmolLM2 + LoRA arm of AMARIS end to end (LoRA specialist training, cache round trip)",
}
# End-to-end runs that compose several components through a training loop, too long for the unit tier's
# 2-minute budget (CPU seconds measured on the 2-core Xeon under load, 6a80bec). An entry its module no
# longer defines fails collection.
_INTEGRATION_TESTS = {
    "tests/common/test_agents.py::test_composition_rewardflow_aem_archer_and_reductions": (
        "six train_agent runs composing RewardFlow, AEM and Archer (67 s CPU)"
    ),
    "tests/common/test_agents.py::test_textworld_trainer_runs_two_iterations_end_to_end": (
        "a generated TextWorld game and two training iterations (17 s CPU)"
    ),
    "tests/common/test_agents.py::test_textworld_game_generated_reset_stepped_and_ranked": (
        "compiles a TextWorld game and plays it (8 s CPU)"
    ),
}
_TESTS = Path(__file__).parent


def _sources(fn: Any, module: Any, depth: int = 1) -> Iterator[str]:
    """The source of ``fn``, and (``depth`` levels) of the module-level functions and strings it names."""
    import inspect
    import types

    fn = inspect.unwrap(fn)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return
    for node in ast.walk(tree):  # docstrings and comments do not count: only the code
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                body[0] = ast.Pass()
    yield ast.unparse(tree)
    if depth <= 0 or not isinstance(fn, types.FunctionType):
        return
    names, stack = set(), [fn.__code__]
    while stack:  # names used by the function and by the functions/lambdas nested in it
        code = stack.pop()
        names.update(code.co_names)
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    glob = getattr(module, "__dict__", {})
    for name in sorted(names):
        value = glob.get(name)
        if isinstance(value, str):
            yield value
        elif isinstance(value, types.FunctionType) and value.__module__ == getattr(module, "__name__", None):
            yield from _sources(value, module, depth - 1)


def _integration_reason(item: pytest.Item, cache: dict) -> str | None:
    fn = getattr(item, "function", None)
    if fn is None:
        return None
    base = item.nodeid.split("[")[0]
    if base in _INTEGRATION_TESTS:
        return _INTEGRATION_TESTS[base]
    found = []
    fixturedefs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    for name, defs in sorted(fixturedefs.items()):
        if name in _INTEGRATION_FIXTURES:
            return f"fixture {name}: {_INTEGRATION_FIXTURES[name]}"
        if name in _CLAIM_FIXTURES or not defs:
            continue
        func = defs[-1].func
        found.append((func, sys.modules.get(func.__module__)))
    found.append((fn, getattr(item, "module", None)))
    for func, module in found:
        key = id(func)
        if key not in cache:
            cache[key] = next(
                (
                    f"uses {m.group(0)!r}"
                    for s in _sources(func, module)
                    for m in [_INTEGRATION.search(s)]
                    if m
                ),
                None,
            )
        if cache[key]:
            return cache[key]
    return None


def tier_of(item: pytest.Item, cache: dict | None = None) -> tuple[str, str]:
    """``(tier, why)`` of a collected test (see the comment above ``TIERS``)."""
    explicit = {m.name for m in item.iter_markers() if m.name in TIERS}
    if len(explicit) > 1:
        raise pytest.UsageError(f"{item.nodeid} has several tier markers: {sorted(explicit)}")
    if explicit:
        return explicit.pop(), "explicit marker"
    why = _integration_reason(item, {} if cache is None else cache)
    if why:
        return "integration", why
    path = Path(str(item.path))
    if _TESTS / "claims" in path.parents:
        return "claims", "in tests/claims"
    if _CLAIM_FIXTURES & set(getattr(item, "fixturenames", ())):
        return "claims", "runs a claim's smoke profile"
    return "unit", "default"


def pytest_collection_modifyitems(config, items):
    cache: dict = {}
    for item in items:
        tier, why = tier_of(item, cache)
        if not any(m.name == tier for m in item.iter_markers()):
            item.add_marker(getattr(pytest.mark, tier)(reason=why))
    modules = {i.nodeid.split("::")[0]: getattr(i, "module", None) for i in items}
    stale = [
        k
        for k in _INTEGRATION_TESTS
        if k.split("::")[0] in modules and not hasattr(modules[k.split("::")[0]], k.split("::")[-1])
    ]
    if stale:  # the table names a test its module no longer defines
        raise pytest.UsageError(
            f"tests/conftest.py _INTEGRATION_TESTS names tests that do not exist: {stale}"
        )
    untiered = [i.nodeid for i in items if len({m.name for m in i.iter_markers()} & set(TIERS)) != 1]
    if untiered:  # the collection check: every test has exactly one tier
        raise pytest.UsageError(f"tests without exactly one tier marker: {untiered[:5]}")

"""Area exports (``from neurips26.<area> import X``): each name imports only the module that defines it.

The index is read from the files (:mod:`neurips26.common.exports`), so it must agree with what the
modules say at runtime; a missing optional dependency of one module must not break unrelated names,
and its error must name the extra only for the names that need it (issue 36 item 2).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

import neurips26
from neurips26.common.exports import _module_files, export_index, module_exports
from neurips26.registry import AREAS, METHODS

SRC = Path(neurips26.__file__).parent


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )


def test_module_exports_reads_literals_reexports_and_dynamic_all():
    src = textwrap.dedent(
        """
        from .algo import A as B, C
        from neurips26.x import D
        __all__ = ["B", "C", "E"]
        __all__ += ["F"]
        def E(): ...
        class F: ...
        try:
            from g import G
        except ImportError:
            def G(): ...
        """
    )
    listed, defined, imported = module_exports(src)
    assert listed == ["B", "C", "E", "F"]
    assert {"E", "F", "G", "__all__"} <= defined
    assert imported == {"B": ".algo", "C": ".algo", "D": "neurips26.x", "G": "g"}
    assert module_exports("import m\n__all__ = [*m.__all__, 'x']\n")[0] is None  # dynamic: import to know


# The two exhaustive checks import every module of every area (transformers, PyG, Flower, Ray wrappers):
# tens of seconds, so they run in the integration tier.
@pytest.mark.integration
@pytest.mark.parametrize("area", AREAS)
def test_static_all_equals_runtime_all(area):
    """Every module's literal ``__all__`` read from its file is the one it has when imported."""
    files = _module_files(f"neurips26.{area}", SRC / area)
    assert files
    checked = 0
    for module, path in files.items():
        listed = module_exports(path.read_text(encoding="utf-8"))[0]
        if listed is None:
            continue
        try:
            mod = importlib.import_module(module)
        except ImportError as err:  # an optional extra not installed here
            assert "neurips26[" in str(err) or "No module named" in str(err), err
            continue
        assert list(mod.__all__) == listed, module
        checked += 1
    assert checked


@pytest.mark.integration
@pytest.mark.parametrize("area", AREAS)
def test_every_exported_name_resolves_to_its_defining_module(area):
    pkg = importlib.import_module(f"neurips26.{area}")
    index, _ = export_index(f"neurips26.{area}", SRC / area)
    assert set(pkg.__all__) <= set(dir(pkg)), "registry components missing from dir()"
    assert set(index) <= set(dir(pkg))
    for m in METHODS:
        if m.area == area:
            for c in m.components:
                assert c in pkg.__all__, c
    for name in dir(pkg):
        try:
            obj = getattr(pkg, name)
        except ImportError as err:
            assert "neurips26[" in str(err) or "No module named" in str(err), err
            continue
        if isinstance(obj, types.ModuleType) and obj.__name__ == f"neurips26.{area}.{name}":
            continue  # a function named like its module (editing.amaris): once imported, the submodule wins
        if name in index:
            assert obj is getattr(importlib.import_module(index[name]), name), name


def test_unknown_name_is_an_attribute_error():
    import neurips26.rl as rl

    with pytest.raises(AttributeError, match="no attribute 'not_a_component'"):
        rl.not_a_component  # noqa: B018
    with pytest.raises(ImportError):
        from neurips26.rl import not_a_component  # noqa: F401


def test_importing_an_area_imports_none_of_its_modules():
    out = _run(
        """
        import sys
        import neurips26.rl, neurips26.federated, neurips26.inference
        loaded = [m for m in sys.modules if m.startswith(("neurips26.rl.", "neurips26.federated.", "neurips26.inference."))]
        assert not loaded, loaded
        from neurips26.rl import grpo_loss
        loaded = sorted(m for m in sys.modules if m.startswith("neurips26.rl."))
        assert loaded == ["neurips26.rl.losses"], loaded
        """
    )
    assert out.returncode == 0, out.stderr


def test_grpo_loss_imports_without_gymnasium_and_the_env_names_the_extra():
    """Without gymnasium (the ``envs`` extra) ``grpo_loss`` imports; only the names that need it fail,
    and their error says which extra to install."""
    out = _run(
        """
        import sys
        sys.modules["gymnasium"] = None  # as if the envs extra were not installed
        from neurips26.rl import grpo_loss, archer_policy_loss
        assert grpo_loss.__module__ == "neurips26.rl.losses"
        assert "neurips26.rl.aiql.env" not in sys.modules
        try:
            from neurips26.rl import WarehouseConsolidationEnv
        except ImportError as err:
            assert "neurips26[envs]" in str(err), err
            print("env error names the extra")
        else:
            raise AssertionError("WarehouseConsolidationEnv imported without gymnasium")
        """
    )
    assert out.returncode == 0, out.stderr
    assert "env error names the extra" in out.stdout


def test_federated_exports_the_flower_wiring():
    pytest.importorskip("flwr", reason="the Flower wiring needs the federated extra")
    from neurips26.federated import AsyncFedAvg, GridTransport, run_async
    from neurips26.federated.fedrevive import flower

    assert (AsyncFedAvg, GridTransport, run_async) == (
        flower.AsyncFedAvg,
        flower.GridTransport,
        flower.run_async,
    )
    import neurips26.federated as fed

    assert {"AsyncFedAvg", "GridTransport", "run_async"} <= set(dir(fed))

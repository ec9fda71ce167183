"""Area exports (``from neurips26.<area> import X``): each name imports only the module that defines it.

The index is read from the files (:mod:`neurips26.common.exports`), so it must agree with what the
modules say at runtime; a missing optional dependency of one module must not break unrelated names,
and its error must name the extra only for the names that need it (issue 36 item 2).
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

import neurips26
from neurips26 import registry
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


# --- explicit, typed exports: the generated stubs and API.md, runtime __all__, extras errors -----------

REPO = SRC.parents[1]
IN_CHECKOUT = (REPO / "src" / "neurips26").resolve() == SRC.resolve() and (REPO / "pyproject.toml").is_file()
needs_checkout = pytest.mark.skipif(not IN_CHECKOUT, reason="needs the source checkout (src/neurips26)")


def _stub(area: str) -> tuple[list[tuple[str, str]], list[str]]:
    """``([(module, name) of every from-import], __all__)`` of an area's generated ``__init__.pyi``."""
    tree = ast.parse((SRC / area / "__init__.pyi").read_text(encoding="utf-8"))
    imports = [
        (node.module, alias.name)
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname == alias.name  # explicit re-export
    ]
    listed = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets)
    )
    return imports, listed


@pytest.mark.unit
@needs_checkout
def test_exports_check_passes_on_the_repo(capsys):
    from neurips26.cli import main

    assert registry.write_exports(REPO, check=True) == []
    assert main(["exports", "--check"]) == 0
    assert "up to date" in capsys.readouterr().out


@pytest.mark.unit
def test_generated_files_are_deterministic():
    first, second = registry.export_files(), registry.export_files()
    assert first == second
    assert set(first) == {"API.md", *(f"src/neurips26/{a}/__init__.pyi" for a in AREAS)}
    for text in first.values():
        assert "neurips26 exports" in text.split("\n\n", 2)[1]  # says it is generated, and by what


@pytest.mark.unit
def test_check_names_a_tampered_or_missing_file(tmp_path, capsys, monkeypatch):
    from neurips26.cli import main

    files = registry.export_files()  # generated once: the sources do not change during the test
    monkeypatch.setattr(registry, "export_files", lambda src=None: files)
    assert len(registry.write_exports(tmp_path)) == len(AREAS) + 1  # everything written to a fresh root
    assert registry.write_exports(tmp_path, check=True) == []
    stub = tmp_path / "src/neurips26/optim/__init__.pyi"
    stub.write_text(stub.read_text().replace("AcceleGradSharp as AcceleGradSharp", "AcceleGrad as Oops"))
    (tmp_path / "API.md").unlink()
    stale = ["src/neurips26/optim/__init__.pyi", "API.md"]
    assert registry.write_exports(tmp_path, check=True) == stale
    assert main(["exports", "--root", str(tmp_path), "--check"]) == 1
    out = capsys.readouterr().out
    assert all(s in out for s in stale) and "run `neurips26 exports`" in out
    assert not (tmp_path / "API.md").exists(), "--check writes nothing"
    assert main(["exports", "--root", str(tmp_path)]) == 0
    assert registry.write_exports(tmp_path, check=True) == []


@pytest.mark.unit
@pytest.mark.parametrize("area", AREAS)
def test_stub_names_equal_runtime_dir_and_all(area):
    pkg = importlib.import_module(f"neurips26.{area}")
    imports, listed = _stub(area)
    names = [n for _, n in imports]
    assert len(names) == len(set(names)), "a name imported twice"
    assert sorted(names) == listed == dir(pkg) == list(pkg.__all__)
    assert set(registry.area_index(area)[0]) == set(listed)
    for m in METHODS:
        if m.area == area:
            assert set(m.components) <= set(listed), m.slug


@pytest.mark.unit
@pytest.mark.parametrize("area", AREAS)
def test_stub_imports_each_name_from_the_module_that_binds_it(area):
    """Statically: the stub's ``from X import N`` is the index's module of N, and X's file binds or lists N."""
    index, _ = registry.area_index(area)
    for module, name in _stub(area)[0]:
        assert index[name] == module, name
        path = SRC.parent.joinpath(*module.split("."))
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        listed, defined, imported = module_exports(path.read_text(encoding="utf-8"))
        assert name in defined or name in imported or name in (listed or ()), (module, name)


@pytest.mark.integration
@pytest.mark.parametrize("area", AREAS)
def test_stub_imports_resolve_at_runtime(area):
    """Every ``from X import N`` of the stub is the object ``neurips26.<area>.N`` gives at runtime."""
    pkg = importlib.import_module(f"neurips26.{area}")
    for module, name in _stub(area)[0]:
        obj = getattr(pkg, name)
        if isinstance(obj, types.ModuleType) and obj.__name__ == f"neurips26.{area}.{name}":
            continue  # a function named like its module (editing.amaris): once imported, the submodule wins
        defined_there = isinstance(obj, (type, types.FunctionType)) and obj.__module__ == module
        # else a re-export (a registry component defined in common/, an alias): the same object as X.N
        assert defined_there or obj is getattr(importlib.import_module(module), name), (module, name)


@pytest.mark.unit
def test_star_import_gives_every_listed_name():
    namespace: dict = {}
    exec("from neurips26.optim import *", namespace)
    import neurips26.optim as optim

    assert sorted(k for k in namespace if not k.startswith("__")) == optim.__all__


@pytest.mark.integration
def test_star_import_of_every_area_works():
    """``from neurips26.<area> import *`` imports every module of the area (all extras installed here)."""
    out = _run(
        """
        import importlib
        from neurips26.registry import AREAS
        for area in AREAS:
            namespace = {}
            exec(f"from neurips26.{area} import *", namespace)
            names = importlib.import_module(f"neurips26.{area}").__all__
            assert set(names) <= set(namespace), (area, set(names) - set(namespace))
        print("ok")
        """
    )
    assert out.returncode == 0, out.stderr
    assert "ok" in out.stdout


@pytest.mark.unit
def test_importing_an_area_reads_no_file_until_all_is_asked():
    out = _run(
        """
        import neurips26.common.exports as e
        calls = []
        real = e.export_index
        e.export_index = lambda *a, **k: calls.append(a) or real(*a, **k)
        import neurips26.kg as kg
        assert not calls, calls
        names = kg.__all__
        assert len(calls) == 1 and names == dir(kg) and len(names) > 10
        """
    )
    assert out.returncode == 0, out.stderr


def _fail_import(monkeypatch, failing: str, err: ImportError) -> None:
    real = importlib.import_module

    def fake(name, package=None):
        if name == failing:
            raise err
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", fake)


@pytest.mark.unit
def test_missing_optional_dependency_names_the_extra(monkeypatch):
    import neurips26.federated as fed

    module = registry.area_index("federated")[0]["AsyncFedAvg"]
    cause = ModuleNotFoundError("No module named 'flwr'", name="flwr")
    _fail_import(monkeypatch, module, cause)
    with pytest.raises(ImportError) as info:
        fed.AsyncFedAvg  # noqa: B018
    message = str(info.value)
    assert "'AsyncFedAvg' needs the optional dependency 'flwr': pip install 'neurips26[federated]'" in message
    assert info.value.__cause__ is cause and info.value.name == "flwr"
    with pytest.raises(ImportError, match=r"neurips26\[federated\]"):
        from neurips26.federated import AsyncFedAvg  # noqa: F401
    from neurips26.federated import FedBuff  # another module of the area keeps working

    assert FedBuff.__module__ == "neurips26.federated.fedrevive.strategies"


@pytest.mark.unit
def test_missing_extra_follows_the_chain_and_prefers_the_modules_own_hint(monkeypatch):
    missing = ModuleNotFoundError("No module named 'gymnasium'", name="gymnasium")
    assert registry.missing_extra(missing) == ("gymnasium", "envs")
    try:  # as neurips26.common.optional.require raises it inside robotics
        try:
            raise missing
        except ImportError as err:
            raise ImportError("install it with `pip install 'neurips26[robotics]'`") from err
    except ImportError as wrapped:
        assert registry.missing_extra(wrapped) == ("gymnasium", "robotics")
    assert registry.missing_extra(ModuleNotFoundError("x", name="not_a_known_module")) is None
    assert registry.missing_extra(ModuleNotFoundError("x", name="neurips26.rl.gone")) is None
    assert registry.missing_extra(ImportError("cannot import name 'x' from 'torch'")) is None

    import neurips26.kg as kg

    internal = ModuleNotFoundError("No module named 'neurips26.kg.gone'", name="neurips26.kg.gone")
    _fail_import(monkeypatch, registry.area_index("kg")[0]["STRUCTURES"], internal)
    with pytest.raises(ModuleNotFoundError) as info:  # not an extra: the original error, unchanged
        kg.STRUCTURES  # noqa: B018
    assert info.value is internal


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def _dist(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-").replace(".", "-")


@pytest.mark.unit
@needs_checkout
def test_optional_modules_table_matches_pyproject():
    from importlib import metadata

    extras = _pyproject()["project"]["optional-dependencies"]
    providers = metadata.packages_distributions()
    for module, extra in registry.OPTIONAL_MODULES.items():
        assert extra in extras, (module, extra)
        listed = {_dist(r) for r in extras[extra]}
        if module not in providers:
            continue  # not installed here: the extra name was checked above
        dists = {_dist(d) for d in providers[module]}
        through = {  # or a dependency of a listed distribution (datasets through trl)
            _dist(r) for d in listed for r in (_requires(d) or ()) if "extra ==" not in r
        }
        assert dists & (listed | through), (module, extra, dists)


def _requires(dist: str) -> list[str] | None:
    from importlib import metadata

    try:
        return metadata.requires(dist)
    except metadata.PackageNotFoundError:
        return None


@pytest.mark.unit
@needs_checkout
def test_every_optional_module_an_area_imports_is_in_the_table():
    """A third-party module imported at module level under an area or common/ is core or has an extra."""
    core = {_dist(r).replace("-", "_") for r in _pyproject()["project"]["dependencies"]} | {"tokenizers"}
    unknown: dict[str, str] = {}
    for path in sorted(SRC.rglob("*.py")):
        if path.relative_to(SRC).parts[0] in ("claims", "bench"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top in sys.stdlib_module_names or top in core or top == "neurips26":
                    continue
                if top not in registry.OPTIONAL_MODULES:
                    unknown[top] = str(path.relative_to(SRC))
    assert not unknown, f"add these to registry.OPTIONAL_MODULES with their extra: {unknown}"


@pytest.mark.unit
@needs_checkout
def test_stubs_and_py_typed_ship_as_package_data():
    from fnmatch import fnmatch
    from importlib import resources

    patterns = _pyproject()["tool"]["setuptools"]["package-data"]["neurips26"]
    assert "py.typed" in patterns
    for area in AREAS:
        assert any(fnmatch(f"{area}/__init__.pyi", p) for p in patterns), area
        assert resources.files(f"neurips26.{area}").joinpath("__init__.pyi").is_file()
    assert resources.files("neurips26").joinpath("py.typed").is_file()


@pytest.mark.unit
def test_type_checker_sees_the_real_type(tmp_path):
    """mypy resolves ``from neurips26.optim import AcceleGradSharp`` through the stub, not to ``Any``."""
    pytest.importorskip("mypy", reason="mypy is in the dev extra")
    (tmp_path / "snippet.py").write_text(
        "from neurips26.optim import AcceleGradSharp\n\nreveal_type(AcceleGradSharp)\n"
    )
    (tmp_path / "mypy.ini").write_text(
        "[mypy]\nfollow_imports = silent\nignore_missing_imports = True\n"
        "[mypy-torch.*,transformers.*,numpy.*,scipy.*]\nfollow_imports = skip\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--no-site-packages",
         "--cache-dir", str(tmp_path / "cache"), "snippet.py"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(SRC.parent)},
    )  # fmt: skip
    revealed = [line for line in out.stdout.splitlines() if "Revealed type" in line]
    assert len(revealed) == 1, out.stdout + out.stderr
    assert '"Any"' not in revealed[0]
    assert "neurips26.optim.accelegrad_sharp.AcceleGradSharp" in revealed[0]

"""Every area's usage example (issue 36 item 3) runs under doctest, as written and as shipped.

The examples live in :mod:`neurips26.usage` (the areas' own files are hashed into claim results) and
``neurips26 exports`` copies them into each area's ``__init__.pyi`` docstring and ``API.md``; here each one
runs from the source dict and from the docstring parsed back from the generated stub.
"""

from __future__ import annotations

import ast
import doctest
import io
from pathlib import Path

import pytest

import neurips26
from neurips26 import registry
from neurips26.registry import AREAS
from neurips26.usage import USAGE

SRC = Path(neurips26.__file__).parent


def _stub_docstring(area: str) -> str:
    return ast.get_docstring(
        ast.parse((SRC / area / "__init__.pyi").read_text(encoding="utf-8")), clean=False
    )


def _run_doctest(text: str, name: str) -> doctest.TestResults:
    """Run ``text``'s examples in a fresh namespace; fail naming ``name`` and showing doctest's report."""
    test = doctest.DocTestParser().get_doctest(text, {}, name, None, 0)
    out = io.StringIO()
    result = doctest.DocTestRunner(verbose=False).run(test, out=out.write, clear_globs=True)
    assert result.failed == 0, f"usage example of {name} failed:\n{out.getvalue()}"
    return result


@pytest.mark.unit
def test_every_area_has_a_usage_example_of_its_own_components():
    assert sorted(USAGE) == sorted(AREAS)
    for area, text in USAGE.items():
        examples = doctest.DocTestParser().get_examples(text)
        assert len(examples) >= 3, area
        assert any(f"from neurips26.{area} import" in e.source for e in examples), area
        assert sum(bool(e.want) for e in examples) >= 1, f"{area}: no expected output to check"
        assert '"""' not in text and "\\" not in text, area  # pasted verbatim into a docstring


@pytest.mark.unit
@pytest.mark.parametrize("area", AREAS)
@pytest.mark.parametrize("source", ["usage.py", "__init__.pyi"])
def test_usage_example_runs(area, source):
    if source == "usage.py":
        text = USAGE[area]
    else:
        if not (SRC / area / "__init__.pyi").is_file():
            pytest.skip("the generated stubs ship with the package; none here")
        text = _stub_docstring(area)
        assert USAGE[area].rstrip("\n") in text, f"{area}: stub docstring is stale; run `neurips26 exports`"
    result = _run_doctest(text, f"{area} ({source})")
    assert result.attempted == len(doctest.DocTestParser().get_examples(USAGE[area]))


@pytest.mark.unit
def test_usage_is_written_to_every_stub_and_under_every_api_heading():
    files = registry.export_files()
    api = files["API.md"]
    for area in AREAS:
        text = USAGE[area].rstrip("\n")
        stub = files[f"src/neurips26/{area}/__init__.pyi"]
        assert ast.get_docstring(ast.parse(stub), clean=False).rstrip("\n").endswith(text), area
        section = api.split(f"\n## {area}\n\n", 1)[1].split("\n## ", 1)[0]
        assert section.startswith("Usage (doctested") and f"```pycon\n{text}\n```\n\n| name |" in section, (
            area
        )


@pytest.mark.unit
def test_bad_usage_text_is_refused(monkeypatch):
    import neurips26.usage as usage

    monkeypatch.setattr(usage, "USAGE", {**USAGE, "nope": ">>> 1\n1\n"})
    with pytest.raises(ValueError, match="unknown areas"):
        registry.export_files()
    for bad, match in [
        ('>>> """x"""\n', "triple quote"),
        (">>> print('a\\\\nb')\n", "backslash"),
        ("prose first\n>>> 1\n1\n", "must start"),
        ("  \n", "non-empty"),
    ]:
        with pytest.raises(ValueError, match=match):
            registry._stub_with_usage('"""Doc."""\n', "optim", bad)
    with pytest.raises(ValueError, match="headings"):
        registry._api_with_usage("# API\n", {"optim": ">>> 1\n1\n"})
    assert registry._stub_with_usage('"""Doc.\n"""\n', "optim", ">>> 1\n1\n\n") == (
        '"""Doc.\n\nUsage (doctested by tests/test_usage.py; source: neurips26/usage.py):\n\n>>> 1\n1\n"""\n'
    )


@pytest.mark.unit
def test_usage_module_is_imported_by_no_component_or_claim():
    """Only the export generator imports ``neurips26.usage``: editing an example changes no claim hash."""
    importers = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if "neurips26.usage" in names:
                importers.append(path.relative_to(SRC).as_posix())
    assert sorted(set(importers)) == ["registry.py"]

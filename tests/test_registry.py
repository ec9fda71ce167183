"""Conformance matrix over every registered method."""

import importlib
import re
from pathlib import Path

import pytest

import neurips26
from neurips26 import registry
from neurips26.registry import METHODS, get, load_claim, status

# the seed abstracts ship with the package (src/neurips26/seeds, package data); the project's shared copy,
# when it sits beside the checkout, is checked to be the same text
SEEDS = Path(neurips26.__file__).resolve().parent / "seeds"
SHARED_SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"
SPEC_AREAS = {
    "inference": {"adakvq", "adkv", "adacal"},
    "rl": {"archer", "aem", "rewardflow", "abc_align", "aiql"},
    "distill": {"ssd", "avsd", "dlm_distill", "dho"},
    "editing": {"crosslingual_edit", "amaris", "amps"},
    "agents": {"channel_router", "cot_pathology", "skim"},
    "graph": {"gcn_mlp", "sgnnbench", "invgnn_wm"},
    "temporal": {"s3former", "regate"},
    "kg": {"corf", "score"},
    "federated": {"fedrevive", "asap"},
    "distributed": {"adera"},
    "optim": {"accelegrad_sharp"},
    "nn": {"ancre", "aot_pot", "anca"},
    "vision": {"radomni", "ahpa"},
    "robotics": {"spark_vla", "recpo"},
}


def test_36_unique_slugs_in_the_agreed_areas():
    slugs = [m.slug for m in METHODS]
    assert len(slugs) == 36 == len(set(slugs))
    assert {a: {m.slug for m in METHODS if m.area == a} for a in SPEC_AREAS} == SPEC_AREAS


def test_unknown_slug_names_closest():
    with pytest.raises(KeyError, match="did you mean archer"):
        get("archr")


@pytest.mark.parametrize("info", METHODS, ids=lambda m: m.slug)
def test_seed_paragraph_matches_abstract(info):
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", (SEEDS / info.seed).read_text()) if p.strip()]
    assert paragraphs[info.paragraph - 1].startswith(info.seed_start)


def test_every_registered_seed_ships_with_the_package():
    assert {m.seed for m in METHODS} == {p.name for p in SEEDS.glob("*.txt")}


@pytest.mark.skipif(
    not SHARED_SEEDS.is_dir(),
    reason="the project's shared/seeds is not beside this checkout (a standalone clone has only the packaged copy)",
)
def test_packaged_seeds_equal_the_shared_copy():
    for path in SEEDS.glob("*.txt"):
        assert path.read_bytes() == (SHARED_SEEDS / path.name).read_bytes(), path.name


@pytest.mark.parametrize("info", METHODS, ids=lambda m: m.slug)
def test_status_is_derived_and_never_broken(info):
    state, detail = status(info.slug)
    assert state in {"implemented", "partial", "planned"}, detail


@pytest.mark.parametrize(
    "info", [m for m in METHODS if status(m.slug)[0] == "implemented"], ids=lambda m: m.slug
)
def test_implemented_method_conforms(info):
    module = importlib.import_module(info.module)
    doc = module.__doc__ or ""
    assert info.name.split()[0].lower() in doc.lower(), f"{info.module} docstring must name its paper"
    for name in info.components:
        assert getattr(module, name).__doc__, f"{info.module}.{name} needs a docstring"
    claim = load_claim(info.slug)
    assert claim.slug == info.slug
    assert set(claim.configs) == {"smoke", "quick", "full"}
    assert len(claim.seeds["full"]) >= 3, "full profile needs several seeds"
    used = {c.metric for c in (*claim.criteria, *claim.premises)}
    assert used <= set(claim.glossary), (
        f"define every criterion metric in the glossary: {used - set(claim.glossary)}"
    )
    # claim checks v2: the testbed is checked, the paper's headlines are mapped, criteria are labelled
    assert claim.premises, "declare at least one premise about the testbed"
    assert claim.headlines, "map the spec's headline claims to criteria or mark them untested"
    assert all(c.label for c in (*claim.criteria, *claim.premises)), "label every criterion and premise"
    # claims-v3: a claim may consist of cost criteria only (corf: speed and memory of CoRF's own algorithm)
    assert any(c.kind in ("evidence", "cost") for c in claim.criteria)
    area = importlib.import_module(f"neurips26.{info.area}")
    for name in info.components:  # every component is importable from its area
        assert getattr(area, name) is getattr(module, name)
        assert name in dir(area)


IMPLEMENTED = [m for m in METHODS if status(m.slug)[0] == "implemented"]


def docstring_section(doc: str, title: str) -> str | None:
    """Body of the numpydoc section ``title`` (title line, then a dashed line of the same length), or None."""
    header = rf"^{re.escape(title)}\n-{{{len(title)}}}\n"
    match = re.search(header + r"(.*?)(?=^\S[^\n]*\n-+\n|\Z)", doc, re.M | re.S)
    return None if match is None else match.group(1)


def test_docstring_section_reader():
    doc = "Title.\n\nPaper\n-----\nThe paper.\n\nShapes\n------\n``x [N, F]``\n"
    assert docstring_section(doc, "Paper").strip() == "The paper."
    assert docstring_section(doc, "Shapes").strip() == "``x [N, F]``"
    assert docstring_section("Paper: inline, not a section", "Paper") is None
    assert docstring_section("Shapes\n----\nunderline too short", "Shapes") is None


@pytest.mark.parametrize("info", IMPLEMENTED, ids=lambda m: m.slug)
def test_method_docstring_has_paper_shapes_and_math(info):
    doc = importlib.import_module(info.module).__doc__ or ""
    missing = [title for title in ("Paper", "Shapes") if docstring_section(doc, title) is None]
    missing += [] if ".. math::" in doc else [".. math::"]
    assert not missing, f"{info.module} docstring lacks {missing} (numpydoc sections, math as .. math::)"
    paper = " ".join(docstring_section(doc, "Paper").split())
    assert info.seed in paper, f"{info.module}: the Paper section must name the seed file {info.seed}"
    assert info.seed_start in paper, (
        f"{info.module}: the Paper section must quote the abstract's opening words"
    )


def test_status_reports_missing_components(monkeypatch):
    fake = registry.MethodInfo("archer", "Archer", "t", "s", 1, "x", "rl", ("NoSuchThing",), ("b",), "m")
    monkeypatch.setitem(registry.BY_SLUG, "archer", fake)
    registry.status.cache_clear()
    monkeypatch.setattr(registry, "_module_exists", lambda name: True)
    monkeypatch.setattr(importlib, "import_module", lambda name: object())
    try:
        state, detail = registry.status("archer")
    finally:
        registry.status.cache_clear()
    assert state == "broken" and "NoSuchThing" in detail


def test_unknown_area_attribute_is_a_clear_error():
    import neurips26.graph

    with pytest.raises(AttributeError, match="has no attribute 'NoSuchLayer'"):
        neurips26.graph.NoSuchLayer  # noqa: B018
    with pytest.raises(ValueError, match="area"):
        registry.area_exports("neurips26.nowhere")


def test_importing_the_package_is_light():
    import subprocess
    import sys

    code = "import sys, neurips26, neurips26.registry, neurips26.inference, neurips26.rl; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_extra_claim_resolves_to_its_method_and_unknown_suffix_raises():
    from neurips26.registry import BY_SLUG, extra_claim, method_info

    claim = load_claim("amaris_smollm2")
    assert claim.slug == "amaris_smollm2"
    assert method_info("amaris_smollm2").slug == "amaris"
    assert method_info("amaris") is BY_SLUG["amaris"]
    assert extra_claim("amaris") is None and method_info("amaris_nope") is None
    with pytest.raises(KeyError, match="unknown method slug"):
        load_claim("amaris_nope")
    for bad in (["amaris"], 3):
        with pytest.raises(TypeError, match="slug must be a str"):
            method_info(bad)
        with pytest.raises(TypeError, match="slug must be a str"):
            extra_claim(bad)

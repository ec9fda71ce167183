"""Layering ratchet (issue 36 item 1): claims hold declarations and arm wiring, not testbeds.

Issue 36 asks for a testbeds layer so that ``src/neurips26/claims/`` holds only claim declarations and
arm wiring: no ``nn.Module`` subclass and no ``.backward()`` in ``claims/``, no claim-to-claim imports,
no test importing a private claim name. Moving the testbeds out changes the bytes of claim modules, and
every committed result is hashed on those bytes, so the move happens claim by claim with a rerun. Until
then this file is a ratchet: it scans the tree with ``ast`` only (no claim module is imported), and
``KNOWN_VIOLATIONS`` lists the debt that exists today, by name (``path:qualname`` or ``path:module``,
never a line number, so unrelated edits do not break it). The tests fail

- when a violation appears that is not listed (move it to an area or ``neurips26.testbeds``), and
- when a listed violation is gone (remove it from ``KNOWN_VIOLATIONS``: the ratchet only tightens).

Rules and their counts when the ratchet was set (distinct keys; call sites / import lines in brackets):

=============================  =====  ==========================================================
claims_nn_module               11     classes in claims/ subclassing torch.nn.Module (or a torch.nn
                                      layer, or such a class in the same file)
claims_backward                20     functions in claims/ calling ``.backward(...)`` (20 calls)
claims_import_claim             2     adkv -> adakvq, aem -> rewardflow (15 imported names); 1 since aem and
                                      rewardflow share neurips26.testbeds.agent_games
tests_private_claim_name       44     ``_private`` names of neurips26.claims.* used by tests (49 uses;
                                      2 of them are harness names: runner._git_commit, _json_default)
area_imports_claims             0     neurips26.<area> importing neurips26.claims
common_imports_non_common       1     common/agents/training.py imports neurips26.rl (lazily)
testbeds_import_claims          0     neurips26.testbeds importing neurips26.claims (rule added with the
                                      first testbed module)
=============================  =====  ==========================================================

Limits, by design: a key is per function (claims_backward) or per imported claim (claims_import_claim),
so a second ``.backward()`` in an already-listed function is not caught; a base class imported from
another neurips26 module is not resolved (only torch.nn names and classes of the same file are);
``importlib.import_module`` strings and ``setattr(mod, "_x")`` are not followed.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PKG = SRC / "neurips26"
CLAIMS = PKG / "claims"
TESTS = ROOT / "tests"

# Harness modules of neurips26.claims, exempt from the claims rules and importable by every claim:
#   __init__.py  re-exports the Claim/Criterion types of base.py, declares no claim;
#   base.py      Profile, Claim, ClaimResult: the declaration types every claim is written in;
#   criteria.py  the criteria and their statistics (turning per-seed metrics into a verdict);
#   runner.py    seeds, timing, environment capture, result JSON, executors;
#   plotting.py  the headless-matplotlib helpers every claim's plot hook shares;
#   report/      results/*.json -> report.md/.html (tables, plots, glossary).
# None of them declares a claim; they are the machinery a claim is declared in, so a claim importing
# them is the intended direction, not a claim-to-claim dependency.
HARNESS = frozenset({"__init__", "base", "criteria", "runner", "plotting", "report"})
# neurips26 subpackages that are not method areas: claims/common are layers of their own, bench is the
# benchmark tool (it may import areas), seeds holds data files.
NON_AREAS = frozenset({"claims", "common", "bench", "seeds", "testbeds"})
TORCH_MODULE = "torch.nn.Module"
MOVE_HINT = "move it to an area or neurips26.testbeds; see issue 36"

RULES = (
    "claims_nn_module",  # a class in claims/ subclassing torch.nn.Module
    "claims_backward",  # a `.backward(...)` call in claims/ (key: the enclosing function)
    "claims_import_claim",  # a claim module importing another claim module
    "tests_private_claim_name",  # a test importing (or reading) a `_private` name of neurips26.claims.*
    "area_imports_claims",  # neurips26.<area> importing neurips26.claims
    "common_imports_non_common",  # neurips26.common importing an area, claims, bench or the registry
    "testbeds_import_claims",  # neurips26.testbeds importing neurips26.claims (testbeds sit below claims)
)


@dataclass(frozen=True)
class Violation:
    rule: str
    key: str  # "<repo-relative path>:<qualname or imported name>", stable under unrelated edits
    line: int

    def message(self) -> str:
        path = self.key.split(":", 1)[0]
        return f"{path}:{self.line}: {self.rule}: {self.key}; {MOVE_HINT}"


# ----------------------------------------------------------------------------------------------------
# Static name resolution
# ----------------------------------------------------------------------------------------------------


def module_name(path: Path) -> str:
    """Dotted module name of a file under src/ (``pkg/__init__.py`` -> ``pkg``)."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve_from(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module of ``from <...> import``; relative levels resolved against ``module``."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if module else []
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join([*base, *([node.module] if node.module else [])])


def imported_modules(tree: ast.AST, module: str = "", is_package: bool = False) -> list[tuple[str, int]]:
    """Every ``(module or module.name, line)`` a file imports; ``from a import b`` yields ``a.b``."""
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            src = _resolve_from(node, module, is_package)
            out.extend((f"{src}.{alias.name}" if src else alias.name, node.lineno) for alias in node.names)
    return out


def import_aliases(tree: ast.AST, module: str = "", is_package: bool = False) -> dict[str, str]:
    """Local name -> dotted target for every import in the file (``import torch.nn as nn`` -> torch.nn)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    names[head] = head
        elif isinstance(node, ast.ImportFrom):
            src = _resolve_from(node, module, is_package)
            for alias in node.names:
                names[alias.asname or alias.name] = f"{src}.{alias.name}"
    return names


def dotted(expr: ast.expr, aliases: dict[str, str]) -> str | None:
    """``nn.Module`` -> ``torch.nn.Module`` given the aliases; None for anything not a name chain."""
    attrs: list[str] = []
    while isinstance(expr, ast.Attribute):
        attrs.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name) or expr.id not in aliases:
        return None
    return ".".join([aliases[expr.id], *reversed(attrs)])


def _qualnames(tree: ast.AST) -> dict[ast.AST, str]:
    """Every node -> the qualname of its innermost enclosing def/class (``<module>`` at top level)."""
    owner: dict[ast.AST, str] = {}

    def visit(node: ast.AST, qual: str) -> None:
        for child in ast.iter_child_nodes(node):
            owner[child] = qual
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = child.name if qual == "<module>" else f"{qual}.{child.name}"
                visit(child, inner)
            else:
                visit(child, qual)

    visit(tree, "<module>")
    return owner


# ----------------------------------------------------------------------------------------------------
# Scanners: each takes a source string and its repo-relative path and returns violations
# ----------------------------------------------------------------------------------------------------


def _is_torch_module(name: str | None) -> bool:
    """``torch.nn.Module`` or a torch.nn layer class (``torch.nn.Sequential``, ``torch.nn.modules.x.Y``)."""
    if not name or not name.startswith("torch.nn."):
        return False
    last = name.rsplit(".", 1)[-1]
    return name == TORCH_MODULE or (
        last[:1].isupper()
        and last not in {"Parameter", "Buffer", "UninitializedParameter"}
        and not name.startswith(("torch.nn.utils.", "torch.nn.functional.", "torch.nn.init."))
    )


def scan_nn_modules(source: str, rel: str, module: str = "", is_package: bool = False) -> list[Violation]:
    """Classes whose bases resolve to ``torch.nn.Module`` (or a torch.nn layer, or such a class in the file)."""
    tree = ast.parse(source)
    aliases = import_aliases(tree, module, is_package)
    owner = _qualnames(tree)
    classes = sorted((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)), key=lambda n: n.lineno)
    local_modules: set[str] = set()
    out = []
    for _ in range(2):  # a second pass catches a local subclass defined above its base
        for node in classes:
            bases = [dotted(b, aliases) for b in node.bases]
            local = [b.id for b in node.bases if isinstance(b, ast.Name) and b.id not in aliases]
            if any(_is_torch_module(b) for b in bases) or set(local) & local_modules:
                local_modules.add(node.name)
    for node in classes:
        if node.name in local_modules:
            qual = node.name if owner[node] == "<module>" else f"{owner[node]}.{node.name}"
            out.append(Violation("claims_nn_module", f"{rel}:{qual}", node.lineno))
    return out


def scan_backward(source: str, rel: str) -> list[Violation]:
    """Calls of an attribute named exactly ``backward`` (``loss.backward()``, ``torch.autograd.backward``)."""
    tree = ast.parse(source)
    owner = _qualnames(tree)
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "backward"
        ):
            out.append(Violation("claims_backward", f"{rel}:{owner[node]}", node.lineno))
    return out


def claim_units(claims_dir: Path = CLAIMS) -> frozenset[str]:
    """Claim modules and packages directly under claims/ (harness modules excluded)."""
    units = {p.stem for p in claims_dir.glob("*.py")} | {
        p.parent.name for p in claims_dir.glob("*/__init__.py")
    }
    return frozenset(units - HARNESS)


def scan_claim_imports(
    source: str, rel: str, module: str, is_package: bool, units: frozenset[str]
) -> list[Violation]:
    """Imports of ``neurips26.claims.<other>`` where other is a claim unit other than the file's own."""
    tree = ast.parse(source)
    own = module.split(".")[2] if module.count(".") >= 2 else None
    out = []
    for target, line in imported_modules(tree, module, is_package):
        parts = target.split(".")
        if parts[:2] == ["neurips26", "claims"] and len(parts) > 2 and parts[2] in units and parts[2] != own:
            out.append(Violation("claims_import_claim", f"{rel}:{'.'.join(parts[:3])}", line))
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def scan_private_claim_names(source: str, rel: str) -> list[Violation]:
    """``from neurips26.claims.x import _y`` and ``m._y`` where ``m`` is an imported neurips26.claims module."""
    tree = ast.parse(source)
    out = []
    for node in ast.walk(tree):
        is_claims = isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[:2] == [
            "neurips26",
            "claims",
        ]
        if is_claims and not node.level:
            for alias in node.names:
                if _private(alias.name):
                    out.append(
                        Violation(
                            "tests_private_claim_name", f"{rel}:{node.module}.{alias.name}", node.lineno
                        )
                    )
    aliases = import_aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            target = dotted(node.value, aliases)
            if (
                target
                and target.split(".")[:2] == ["neurips26", "claims"]
                and not _private(target.rsplit(".", 1)[-1])
            ):
                out.append(Violation("tests_private_claim_name", f"{rel}:{target}.{node.attr}", node.lineno))
    return out


def scan_layer_imports(
    source: str, rel: str, module: str, is_package: bool, rule: str, forbidden: tuple[str, ...]
) -> list[Violation]:
    """Imports of any module in ``forbidden`` (dotted prefixes) from the file ``module``."""
    tree = ast.parse(source)
    out = []
    for target, line in imported_modules(tree, module, is_package):
        hit = next((f for f in forbidden if target == f or target.startswith(f + ".")), None)
        if hit:
            out.append(Violation(rule, f"{rel}:{hit}", line))
    return out


# ----------------------------------------------------------------------------------------------------
# The tree scan
# ----------------------------------------------------------------------------------------------------


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _claim_files() -> list[Path]:
    return sorted(
        p for p in CLAIMS.rglob("*.py") if p.relative_to(CLAIMS).parts[0].removesuffix(".py") not in HARNESS
    )


def areas() -> tuple[str, ...]:
    return tuple(sorted(p.parent.name for p in PKG.glob("*/__init__.py") if p.parent.name not in NON_AREAS))


def scan_tree() -> dict[str, list[Violation]]:
    found: dict[str, list[Violation]] = {rule: [] for rule in RULES}
    units = claim_units()
    for path in _claim_files():
        src, rel = path.read_text(encoding="utf-8"), _rel(path)
        mod, pkg = module_name(path), path.name == "__init__.py"
        found["claims_nn_module"] += scan_nn_modules(src, rel, mod, pkg)
        found["claims_backward"] += scan_backward(src, rel)
        found["claims_import_claim"] += scan_claim_imports(src, rel, mod, pkg, units)
    for path in sorted(TESTS.rglob("*.py")):
        found["tests_private_claim_name"] += scan_private_claim_names(
            path.read_text(encoding="utf-8"), _rel(path)
        )
    area_names = areas()
    for area in area_names:
        for path in sorted((PKG / area).rglob("*.py")):
            found["area_imports_claims"] += scan_layer_imports(
                path.read_text(encoding="utf-8"),
                _rel(path),
                module_name(path),
                path.name == "__init__.py",
                "area_imports_claims",
                ("neurips26.claims",),
            )
    non_common = tuple(
        f"neurips26.{name}"
        for name in (*area_names, "claims", "bench", "registry", "cli", "readme", "testbeds")
    )
    for path in sorted((PKG / "common").rglob("*.py")):
        found["common_imports_non_common"] += scan_layer_imports(
            path.read_text(encoding="utf-8"),
            _rel(path),
            module_name(path),
            path.name == "__init__.py",
            "common_imports_non_common",
            non_common,
        )
    for path in sorted((PKG / "testbeds").rglob("*.py")):
        found["testbeds_import_claims"] += scan_layer_imports(
            path.read_text(encoding="utf-8"),
            _rel(path),
            module_name(path),
            path.name == "__init__.py",
            "testbeds_import_claims",
            ("neurips26.claims",),
        )
    return found


KNOWN_VIOLATIONS: dict[str, tuple[str, ...]] = {
    "claims_nn_module": (  # 7 (ancre's _Block/_ResNet and dlm_distill's denoiser went to neurips26.testbeds)
        "src/neurips26/claims/abc_align.py:EnsembleRewardMLP",
        "src/neurips26/claims/ahpa.py:_DigitCNN",
        "src/neurips26/claims/ahpa.py:_ReferenceViT",
        "src/neurips26/claims/amaris/smollm2.py:TopStack",
        "src/neurips26/claims/amps.py:TinyMLLM",
        "src/neurips26/claims/asap.py:_LogReg",
        "src/neurips26/claims/spark_vla.py:_TwoD",
    ),
    "claims_backward": (  # 20
        "src/neurips26/claims/accelegrad_sharp.py:_train",
        "src/neurips26/claims/adera.py:_train_arm",
        "src/neurips26/claims/ahpa.py:_train_arm",
        "src/neurips26/claims/ahpa.py:_train_cnn",
        "src/neurips26/claims/ahpa.py:_train_vae",
        "src/neurips26/claims/amaris/smollm2.py:_train_lora",
        "src/neurips26/claims/amps.py:_train",
        "src/neurips26/claims/anca.py:train",
        "src/neurips26/claims/ancre.py:_e1",
        "src/neurips26/claims/ancre.py:_e2",
        "src/neurips26/claims/aot_pot.py:_train",
        "src/neurips26/claims/archer.py:loss_overhead.run",
        "src/neurips26/claims/cot_pathology/__init__.py:_train",
        "src/neurips26/claims/dho.py:_train_teacher",
        "src/neurips26/claims/dlm_distill.py:_train_on_text",
        "src/neurips26/claims/invgnn_wm.py:_one_step.step",
        "src/neurips26/claims/sgnnbench.py:_scaling",
        "src/neurips26/claims/skim/teachers.py:_train_lm",
        "src/neurips26/claims/spark_vla.py:_pretrain",
        "src/neurips26/claims/spark_vla.py:_train_arm",
    ),
    "claims_import_claim": (  # 1 (aem -> rewardflow went to neurips26.testbeds.agent_games)
        "src/neurips26/claims/adkv.py:neurips26.claims.adakvq",
    ),
    "tests_private_claim_name": (  # 44
        "tests/claims/test_abc_align.py:neurips26.claims.abc_align._part_a_cell",
        "tests/claims/test_abc_align.py:neurips26.claims.abc_align._part_a_pool",
        "tests/claims/test_abc_align.py:neurips26.claims.abc_align._true_utility",
        "tests/claims/test_accelegrad_sharp.py:neurips26.claims.accelegrad_sharp._fit_slope",
        "tests/claims/test_accelegrad_sharp.py:neurips26.claims.accelegrad_sharp._log_marks",
        "tests/claims/test_accelegrad_sharp.py:neurips26.claims.accelegrad_sharp._mnist",
        "tests/claims/test_accelegrad_sharp.py:neurips26.claims.accelegrad_sharp._quadratic_run",
        "tests/claims/test_accelegrad_sharp.py:neurips26.claims.accelegrad_sharp._sweep",
        "tests/claims/test_accelegrad_sharp.py:neurips26.claims.accelegrad_sharp._train",
        "tests/claims/test_adkv.py:neurips26.claims.adkv._fill",
        "tests/claims/test_adkv.py:neurips26.claims.adkv._memory",
        "tests/claims/test_ahpa.py:neurips26.claims.ahpa._ReferenceViT",
        "tests/claims/test_ahpa.py:neurips26.claims.ahpa._cnn",
        "tests/claims/test_aiql.py:neurips26.claims.aiql._logs",
        "tests/claims/test_amaris.py:neurips26.claims.amaris.tiny._models",
        "tests/claims/test_amps.py:neurips26.claims.amps._lr_factor",
        "tests/claims/test_ancre.py:neurips26.claims.ancre._connector",
        "tests/claims/test_aot_pot.py:neurips26.claims.aot_pot._model",
        "tests/claims/test_aot_pot.py:neurips26.claims.aot_pot._persistence",
        "tests/claims/test_avsd.py:neurips26.claims.avsd._sft_examples",
        "tests/claims/test_channel_router.py:neurips26.claims.channel_router._expression",
        "tests/claims/test_channel_router.py:neurips26.claims.channel_router._lm_parse",
        "tests/claims/test_cot_pathology.py:neurips26.claims.cot_pathology._load_model",
        "tests/claims/test_cot_pathology.py:neurips26.claims.cot_pathology._model_seed",
        "tests/claims/test_crosslingual_edit.py:neurips26.claims.crosslingual_edit.gemma._gemma_round",
        "tests/claims/test_dho.py:neurips26.claims.dho._shift",
        "tests/claims/test_dlm_distill.py:neurips26.claims.dlm_distill._arm_config",
        "tests/claims/test_dlm_distill.py:neurips26.claims.dlm_distill._distil",
        "tests/claims/test_radomni.py:neurips26.claims.radomni._encoder",
        "tests/claims/test_radomni.py:neurips26.claims.radomni._features",
        "tests/claims/test_radomni.py:neurips26.claims.radomni._run",
        "tests/claims/test_radomni.py:neurips26.claims.radomni._schedule",
        "tests/claims/test_runner.py:neurips26.claims.runner._git_commit",
        "tests/claims/test_s3former.py:neurips26.claims.s3former._history_sampler",
        "tests/claims/test_s3former.py:neurips26.claims.s3former._model",
        "tests/claims/test_s3former.py:neurips26.claims.s3former._replay",
        "tests/claims/test_skim.py:neurips26.claims.skim._arms_at",
        "tests/claims/test_skim.py:neurips26.claims.skim._score",
        "tests/claims/test_skim.py:neurips26.claims.skim._tiny_teacher",
        "tests/claims/test_skim.py:neurips26.claims.skim._tool_prefix_len",
        "tests/claims/test_skim.py:neurips26.claims.skim.teachers._smollm_keys",
        "tests/claims/test_spark_vla.py:neurips26.claims.spark_vla._build",
        "tests/claims/test_spark_vla.py:neurips26.claims.spark_vla._vit",
        "tests/conftest.py:neurips26.claims.runner._json_default",
    ),
    "area_imports_claims": (),
    "common_imports_non_common": (  # 1
        "src/neurips26/common/agents/training.py:neurips26.rl",
    ),
    "testbeds_import_claims": (),
}


# ----------------------------------------------------------------------------------------------------
# The ratchet
# ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def found() -> dict[str, list[Violation]]:
    return scan_tree()


def test_known_violations_are_a_sorted_literal_per_rule():
    assert tuple(KNOWN_VIOLATIONS) == RULES
    for rule, keys in KNOWN_VIOLATIONS.items():
        assert list(keys) == sorted(set(keys)), f"KNOWN_VIOLATIONS[{rule!r}] must be sorted and unique"


@pytest.mark.parametrize("rule", RULES)
def test_no_new_violation(found, rule):
    new = [v for v in found[rule] if v.key not in KNOWN_VIOLATIONS[rule]]
    assert not new, "new layering violation(s):\n" + "\n".join(v.message() for v in new)


@pytest.mark.parametrize("rule", RULES)
def test_no_stale_known_violation(found, rule):
    gone = sorted(set(KNOWN_VIOLATIONS[rule]) - {v.key for v in found[rule]})
    assert not gone, (
        f"{rule}: these are fixed (or moved), remove them from KNOWN_VIOLATIONS[{rule!r}] "
        "so the ratchet tightens:\n" + "\n".join(gone)
    )


def test_the_scan_sees_the_tree():
    """The scanned sets are not empty (a moved folder must not turn the ratchet into a silent pass)."""
    assert len(_claim_files()) >= 30
    assert {"adkv", "amaris", "skim"} <= claim_units()
    assert claim_units().isdisjoint(HARNESS)
    assert {"inference", "rl", "graph"} <= set(areas()) and "testbeds" not in areas()
    assert (PKG / "testbeds" / "agent_games.py").is_file()
    assert len(list(TESTS.rglob("test_*.py"))) >= 30


# ----------------------------------------------------------------------------------------------------
# The scanners catch each rule on synthetic sources ...
# ----------------------------------------------------------------------------------------------------

UNITS = frozenset({"adkv", "adakvq", "amaris", "rewardflow"})


def _keys(violations: list[Violation]) -> list[str]:
    return sorted(v.key.split(":", 1)[1] for v in violations)


def test_nn_module_subclasses_are_caught_through_every_import_form():
    src = textwrap.dedent(
        """
        import torch
        import torch.nn as tnn
        from torch import nn
        from torch.nn import Module as M, Sequential

        class A(nn.Module): ...
        class B(torch.nn.Module): ...
        class C(tnn.Module): ...
        class D(M): ...
        class E(Sequential): ...
        class F(A): ...  # a subclass of a local module
        def build():
            class Inner(nn.Module): ...
            return Inner
        """
    )
    got = scan_nn_modules(src, "x.py")
    assert _keys(got) == ["A", "B", "C", "D", "E", "F", "build.Inner"]
    assert {v.rule for v in got} == {"claims_nn_module"}
    assert next(v for v in got if v.key.endswith(":D")).line == 10


def test_backward_calls_are_caught_with_their_function():
    src = textwrap.dedent(
        """
        import torch
        def train(model, x):
            loss = model(x).sum()
            loss.backward()
        class Loop:
            def step(self, loss):
                torch.autograd.backward([loss])
        """
    )
    got = scan_backward(src, "x.py")
    assert _keys(got) == ["Loop.step", "train"]
    assert [v.line for v in sorted(got, key=lambda v: v.line)] == [5, 8]


def test_claim_to_claim_imports_are_caught_in_every_form():
    src = textwrap.dedent(
        """
        import neurips26.claims.adakvq
        from neurips26.claims.rewardflow import ARMS
        from neurips26.claims import amaris
        from .adakvq import _cache
        def later():
            from neurips26.claims.amaris.tiny import build
        """
    )
    got = scan_claim_imports(src, "claims/adkv.py", "neurips26.claims.adkv", False, UNITS)
    assert _keys(got) == [
        "neurips26.claims.adakvq",
        "neurips26.claims.adakvq",
        "neurips26.claims.amaris",
        "neurips26.claims.amaris",
        "neurips26.claims.rewardflow",
    ]
    pkg = "from .. import adkv\n"
    got = scan_claim_imports(pkg, "claims/amaris/tiny.py", "neurips26.claims.amaris.tiny", False, UNITS)
    assert _keys(got) == ["neurips26.claims.adkv"]


def test_private_claim_names_in_tests_are_caught():
    src = textwrap.dedent(
        """
        from neurips26.claims.adkv import _fill, CLAIM
        from neurips26.claims.amaris.tiny import _models as models
        from neurips26.claims import adakvq
        import neurips26.claims.rewardflow as rf
        import neurips26.claims.skim

        def test_it():
            adakvq._cache(1)
            rf._arms
            neurips26.claims.skim._score
        """
    )
    got = scan_private_claim_names(src, "tests/claims/test_x.py")
    assert _keys(got) == [
        "neurips26.claims.adakvq._cache",
        "neurips26.claims.adkv._fill",
        "neurips26.claims.amaris.tiny._models",
        "neurips26.claims.rewardflow._arms",
        "neurips26.claims.skim._score",
    ]
    assert {v.rule for v in got} == {"tests_private_claim_name"}


def test_layer_imports_are_caught_absolute_and_relative():
    src = textwrap.dedent(
        """
        from neurips26.claims.base import Claim
        from ..claims import runner
        import neurips26.claims
        """
    )
    got = scan_layer_imports(
        src, "inference/x.py", "neurips26.inference.x", False, "area_imports_claims", ("neurips26.claims",)
    )
    assert [v.line for v in got] == [2, 3, 4]
    src = "from ...rl.losses import policy_loss\nfrom neurips26 import graph\n"
    got = scan_layer_imports(
        src,
        "common/agents/training.py",
        "neurips26.common.agents.training",
        False,
        "common_imports_non_common",
        ("neurips26.rl", "neurips26.graph"),
    )
    assert _keys(got) == ["neurips26.graph", "neurips26.rl"]


# ----------------------------------------------------------------------------------------------------
# ... and ignore look-alikes
# ----------------------------------------------------------------------------------------------------


def test_look_alikes_are_not_violations():
    src = textwrap.dedent(
        """
        import torch
        from torch import nn
        from torch.nn import Parameter
        from flax.linen import Module as FlaxModule
        from neurips26.common.models import Module as OurModule
        from neurips26.claims.base import Claim
        from neurips26.claims import criteria, runner, Claim as C
        from neurips26.claims.adkv.helpers import shared  # own package

        class Module:  # a local class named Module, not torch's
            def backward_compat(self): ...
        class A(Module): ...
        class B(FlaxModule): ...
        class P(Parameter): ...

        def f(m, backward):
            m.backward_compat()
            backward(m)          # a bare function named backward, not a .backward() call
            m.backward           # an attribute read, not a call
            torch.autograd.grad(m, m)
        """
    )
    assert scan_nn_modules(src, "x.py") == []
    assert scan_backward(src, "x.py") == []
    own = scan_claim_imports(src, "claims/adkv/__init__.py", "neurips26.claims.adkv", True, UNITS)
    assert own == []
    tests_src = textwrap.dedent(
        """
        from neurips26.claims.adkv import CLAIM, __doc__
        from neurips26.common.cache import _private_helper
        from neurips26.claims import adkv
        import neurips26.claims.runner as runner

        def test_it(other):
            adkv.__name__, adkv.CLAIM
            other._private       # not a claim module
            runner.run_claim
        """
    )
    assert scan_private_claim_names(tests_src, "tests/test_x.py") == []
    area_src = "from neurips26.claimsx import y\nfrom neurips26.common.claims_util import z\n"
    assert scan_layer_imports(area_src, "a.py", "neurips26.rl.a", False, "r", ("neurips26.claims",)) == []

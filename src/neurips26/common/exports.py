"""Static export index of an area package: which module defines each public name, found without importing.

An area's ``__init__`` (see :func:`neurips26.registry.area_exports`) resolves ``from neurips26.<area>
import X`` through this index: it reads every module file of the area with :mod:`ast` (the literal
``__all__`` and the top-level bindings) and maps each exported name to the module that *defines* it,
so the first use of ``X`` imports that module (and its parent packages) and nothing else. A module
that needs an optional dependency at import (``rl/aiql/env.py`` needs gymnasium) is imported only for
the names that live there, so its "install the extra" error reaches only the user who asked for them.
"""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["export_index", "module_exports"]


def _literal_names(node: ast.expr) -> list[str] | None:
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def module_exports(source: str) -> tuple[list[str] | None, set[str], dict[str, str]]:
    """``(__all__, defined, imported)`` of a module's source, read statically.

    ``__all__`` is the literal list (``+=`` and ``.extend`` of literals included), ``None`` when the
    module has none or builds it dynamically; ``defined`` are the names bound at top level by ``def``,
    ``class`` or assignment; ``imported`` maps names bound by ``from X import name`` to ``X`` (absolute
    or dotted-relative, as written).
    """
    tree = ast.parse(source)
    names: list[str] | None = None
    dynamic = False
    defined: set[str] = set()
    imported: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for t in ast.walk(target):
                    if isinstance(t, ast.Name):
                        defined.add(t.id)
                if isinstance(target, ast.Name) and target.id == "__all__" and node.value is not None:
                    listed = _literal_names(node.value)
                    names, dynamic = (listed, False) if listed is not None else (None, True)
        elif (
            isinstance(node, ast.AugAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == "__all__"
        ):
            listed = _literal_names(node.value)
            if listed is None or names is None:
                dynamic = True
            else:
                names = names + listed
        elif (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and isinstance(node.value.func.value, ast.Name)
            and node.value.func.value.id == "__all__"
        ):
            dynamic = True  # __all__.extend(...) / .append(...): not resolved statically
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            for alias in node.names:
                imported[alias.asname or alias.name] = base
        elif isinstance(node, (ast.If, ast.Try)):
            for sub in ast.walk(node):  # guarded definitions (try/except ImportError, if TYPE_CHECKING)
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    defined.add(sub.name)
                elif isinstance(sub, ast.ImportFrom):
                    for alias in sub.names:
                        imported.setdefault(alias.asname or alias.name, "." * sub.level + (sub.module or ""))
    return (None if dynamic else names), defined, imported


def _module_files(package: str, root: Path) -> dict[str, Path]:
    """``{dotted module name: file}`` of every public module under ``root`` (private ``_x`` parts skipped)."""
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("").parts
        if rel[-1] == "__init__":
            rel = rel[:-1]
            if not rel:
                continue  # the area's own __init__
        if any(p.startswith("_") for p in rel) or "__pycache__" in path.parts:
            continue
        if not all((root.joinpath(*rel[:i]) / "__init__.py").exists() for i in range(1, len(rel))):
            continue  # a folder without __init__.py is not a package
        out[".".join((package, *rel))] = path
    return out


def _resolve(module: str, base: str, is_package: bool) -> str:
    """Absolute name of ``from <base> import ...`` written in ``module``."""
    level = len(base) - len(base.lstrip("."))
    if not level:
        return base
    parts = module.split(".")
    anchor = parts if is_package else parts[:-1]
    anchor = anchor[: len(anchor) - (level - 1)]
    rest = base[level:]
    return ".".join(anchor + ([rest] if rest else []))


def export_index(
    package: str, root: str | Path, priority: tuple[str, ...] = ()
) -> tuple[dict[str, str], list[str]]:
    """``({name: defining module}, dynamic)`` for every name in some module's ``__all__`` under ``root``.

    A name listed in several ``__all__`` (a package re-exporting its submodule's names) maps to the
    module that defines it, found by following ``from ... import`` re-exports; a name whose definition
    cannot be found maps to the module that lists it. When unrelated modules list the same name, the
    first of ``priority`` wins, then the shallowest module. ``dynamic`` lists the modules whose
    ``__all__`` is not a literal (their names must be found by importing them).
    """
    root = Path(root)
    files = _module_files(package, root)
    parsed: dict[str, tuple[list[str] | None, set[str], dict[str, str]]] = {}
    dynamic: list[str] = []
    for module, path in files.items():
        try:
            parsed[module] = module_exports(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError):
            dynamic.append(module)
            continue
        if parsed[module][0] is None and "__all__" in parsed[module][1]:
            dynamic.append(module)

    def definer(module: str, name: str, depth: int = 0) -> str | None:
        if module not in parsed or depth > 8:
            return None
        _, defined, imported = parsed[module]
        if name in imported:
            source = _resolve(module, imported[name], files[module].name == "__init__.py")
            found = definer(source, name, depth + 1)
            if found is not None:
                return found
            return source if source in parsed else None
        return module if name in defined else None

    index: dict[str, str] = {}
    rank = {m: i for i, m in enumerate(priority)}
    for module in sorted(parsed, key=lambda m: (rank.get(m, len(rank)), m.count("."), m)):
        listed = parsed[module][0] or ()
        for name in listed:
            if name in index:
                continue
            index[name] = definer(module, name) or module
    return index, dynamic

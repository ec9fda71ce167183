"""Static export index of an area package: which module defines each public name, found without importing.

An area's ``__init__`` (see :func:`neurips26.registry.area_exports`) resolves ``from neurips26.<area>
import X`` through this index: it reads every module file of the area with :mod:`ast` (the literal
``__all__`` and the top-level bindings) and maps each exported name to the module that *defines* it,
so the first use of ``X`` imports that module (and its parent packages) and nothing else. A module
that needs an optional dependency at import (``rl/aiql/env.py`` needs gymnasium) is imported only for
the names that live there, so its "install the extra" error reaches only the user who asked for them.

The same static reading generates what ``neurips26 exports`` writes (:func:`neurips26.registry.export_files`):
each area's ``__init__.pyi`` (:func:`render_stub`, every name re-exported explicitly so type checkers see
the real types) and ``API.md`` (:func:`render_api`, from :func:`describe_exports`: kind, outside bases and
docstring summary of every name).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Export",
    "describe",
    "describe_exports",
    "export_index",
    "module_exports",
    "render_api",
    "render_stub",
]


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
    return _tree_exports(ast.parse(source))


def _tree_exports(tree: ast.Module) -> tuple[list[str] | None, set[str], dict[str, str]]:
    """:func:`module_exports` of a parsed module."""
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


def _all_spreads(tree: ast.Module) -> tuple[list[str], list[str]] | None:
    """``(literal names, spread aliases)`` of ``__all__ = ["a", *_sub.__all__, ...]`` (``+=`` of the same
    form included), ``None`` when ``__all__`` is built in any other way."""
    names: list[str] = []
    spreads: list[str] = []
    seen = False
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            names, spreads, seen, value = [], [], True, node.value
        elif (
            isinstance(node, ast.AugAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == "__all__"
        ):
            value = node.value
        elif (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and isinstance(node.value.func.value, ast.Name)
            and node.value.func.value.id == "__all__"
        ):
            return None
        else:
            continue
        if not isinstance(value, (ast.List, ast.Tuple)):
            return None
        for elt in value.elts:
            if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                names.append(elt.value)
            elif (
                isinstance(elt, ast.Starred)
                and isinstance(elt.value, ast.Attribute)
                and elt.value.attr == "__all__"
                and isinstance(elt.value.value, ast.Name)
            ):
                spreads.append(elt.value.value.id)
            else:
                return None
    return (names, spreads) if seen else None


def _module_aliases(tree: ast.Module) -> tuple[dict[str, tuple[str, str]], dict[str, str], list[str]]:
    """``({alias: (from-base, name)}, {alias: module of import-as}, [star-import bases])`` at top level."""
    froms: dict[str, tuple[str, str]] = {}
    plain: dict[str, str] = {}
    stars: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name == "*":
                    stars.append(base)
                else:
                    froms[alias.asname or alias.name] = (base, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    plain[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    plain[top] = top
    return froms, plain, stars


def export_index(
    package: str, root: str | Path, priority: tuple[str, ...] = ()
) -> tuple[dict[str, str], list[str]]:
    """``({name: defining module}, dynamic)`` for every name in some module's ``__all__`` under ``root``.

    A name listed in several ``__all__`` (a package re-exporting its submodule's names) maps to the
    module that defines it, found by following ``from ... import`` re-exports (``import *`` included);
    a name whose definition cannot be found maps to the module that lists it. When unrelated modules list
    the same name, the first of ``priority`` wins, then the shallowest module. An ``__all__`` written as
    a list of literals and ``*_submodule.__all__`` spreads is resolved through the submodules' literal
    lists. ``dynamic`` lists the modules whose ``__all__`` is otherwise not a literal (their names must be
    found by importing them).
    """
    root = Path(root)
    files = _module_files(package, root)
    parsed: dict[str, tuple[list[str] | None, set[str], dict[str, str]]] = {}
    trees: dict[str, ast.Module] = {}
    dynamic: list[str] = []
    for module, path in files.items():
        try:
            trees[module] = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError):
            dynamic.append(module)
            continue
        parsed[module] = _tree_exports(trees[module])
        if parsed[module][0] is None and "__all__" in parsed[module][1]:
            dynamic.append(module)

    def is_pkg(module: str) -> bool:
        return files[module].name == "__init__.py"

    changed = True
    while changed:  # spreads of spreads: resolve until nothing more can be
        changed = False
        for module in list(dynamic):
            if module not in trees:
                continue
            parts = _all_spreads(trees[module])
            if parts is None:
                continue
            names, spreads = parts
            froms, plain, _ = _module_aliases(trees[module])
            resolved: list[str] = []
            for alias in spreads:
                if alias in froms:
                    base, name = froms[alias]
                    target = ".".join(filter(None, (_resolve(module, base, is_pkg(module)), name)))
                else:
                    target = plain.get(alias, "")
                if target not in parsed or parsed[target][0] is None:
                    break
                resolved += parsed[target][0]
            else:
                parsed[module] = (names + resolved, *parsed[module][1:])
                dynamic.remove(module)
                changed = True

    stars = {
        m: [_resolve(m, base, is_pkg(m)) for base in _module_aliases(tree)[2]] for m, tree in trees.items()
    }

    def definer(module: str, name: str, depth: int = 0) -> str | None:
        if module not in parsed or depth > 8:
            return None
        listed, defined, imported = parsed[module]
        if name in imported:
            source = _resolve(module, imported[name], is_pkg(module))
            found = definer(source, name, depth + 1)
            if found is not None:
                return found
            return source if source in parsed else None
        if name in defined:
            return module
        for source in stars.get(module, ()):
            if source in parsed and name in (parsed[source][0] or parsed[source][1]):
                return definer(source, name, depth + 1) or source
        if is_pkg(module):  # served lazily by the package's __getattr__ from a submodule that lists it
            subs = sorted((m for m in parsed if m.startswith(module + ".")), key=lambda m: (m.count("."), m))
            for sub in subs:
                if name in (parsed[sub][0] or ()):
                    return definer(sub, name, depth + 1) or sub
        return None

    index: dict[str, str] = {}
    rank = {m: i for i, m in enumerate(priority)}
    for module in sorted(parsed, key=lambda m: (rank.get(m, len(rank)), m.count("."), m)):
        listed = parsed[module][0] or ()
        for name in listed:
            if name in index:
                continue
            index[name] = definer(module, name) or module
    return index, dynamic


# --- static descriptions and the generated files (`neurips26 exports`) -------------------------------

GENERATOR = "neurips26 exports"
# Bases too generic to name in the export table.
_PLAIN_BASES = frozenset({"object", "typing.Generic", "abc.ABC", "typing_extensions.Generic"})


@dataclass(frozen=True)
class Export:
    """One exported name of an area as :func:`describe_exports` reads it from the files.

    ``kind`` is ``class``, ``function`` or ``constant`` (``re-export`` for a name a module lists but
    imports from a third-party package); ``bases`` are the class's bases outside ``neurips26``, found by
    following its in-package bases; ``doc`` is the first line of its docstring (``""`` when it has none).
    """

    name: str
    module: str
    kind: str
    bases: tuple[str, ...] = ()
    doc: str = ""


class _Source:
    """Parsed modules of the ``neurips26`` tree under ``root`` (the folder holding ``neurips26/``), on demand."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._trees: dict[str, ast.Module | None] = {}

    def file(self, module: str) -> Path | None:
        base = self.root.joinpath(*module.split("."))
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path
        return None

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            path = self.file(module)
            try:
                self._trees[module] = ast.parse(path.read_text(encoding="utf-8")) if path else None
            except (SyntaxError, UnicodeDecodeError, OSError):
                self._trees[module] = None
        return self._trees[module]

    def is_package(self, module: str) -> bool:
        path = self.file(module)
        return path is not None and path.name == "__init__.py"


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    """Top-level statements, those inside ``if``/``try`` blocks included (guarded definitions)."""
    out: list[ast.stmt] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            out.append(node)
            if isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                    visit(block)

    visit(tree.body)
    return out


def _binding(tree: ast.Module, name: str) -> tuple[ast.stmt, ast.stmt | None] | None:
    """The statement that binds ``name`` at top level (the first one) and the statement after it."""
    body = _top_level(tree)
    for i, node in enumerate(body):
        nxt = body[i + 1] if i + 1 < len(body) else None
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node, nxt
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for tg in targets for t in ast.walk(tg)):
                return node, nxt
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                return node, nxt
    return None


def _dotted(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Subscript):
        expr = expr.value
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    return ".".join([expr.id, *reversed(parts)])


def _first_line(doc: str | None) -> str:
    for line in (doc or "").strip().splitlines():
        if line.strip():
            return line.strip()
    return ""


def _imported_by_call(value: ast.expr | None) -> str | None:
    """``X`` (or ``X.attr``) of ``require("X", ...)`` / ``importlib.import_module("X")`` (``.attr``)."""
    attrs: list[str] = []
    while isinstance(value, ast.Attribute):
        attrs.append(value.attr)
        value = value.value
    if not (isinstance(value, ast.Call) and value.args and isinstance(value.args[0], ast.Constant)):
        return None
    func = value.func
    fname = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if fname not in ("require", "import_module") or not isinstance(value.args[0].value, str):
        return None
    return ".".join([value.args[0].value, *reversed(attrs)])


def _scope_binding(scope: ast.AST, module: str, head: str, is_package: bool) -> str | None:
    """What ``head`` is bound to by imports or ``require(...)`` assignments inside a function ``scope``."""
    for node in ast.walk(scope):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == head:
                    base = _resolve(module, "." * node.level + (node.module or ""), is_package)
                    return ".".join(filter(None, (base, alias.name)))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname == head:
                    return alias.name
                if not alias.asname and alias.name.split(".")[0] == head:
                    return head
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == head for t in node.targets
        ):
            found = _imported_by_call(node.value)
            if found:
                return found
    return None


def _qualify(src: _Source, module: str, dotted: str, scope: ast.AST | None = None) -> str:
    """The absolute dotted name ``dotted`` (as written in ``module``) refers to, through its imports."""
    tree = src.tree(module)
    head, _, rest = dotted.partition(".")
    if tree is None:
        return dotted
    froms, plain, _ = _module_aliases(tree)
    local = _scope_binding(scope, module, head, src.is_package(module)) if scope is not None else None
    if local is not None:
        full = local
    elif head in froms:
        base, name = froms[head]
        full = ".".join(filter(None, (_resolve(module, base, src.is_package(module)), name)))
    elif head in plain:
        full = plain[head]
    elif (found := _binding(tree, head)) is not None:
        node = found[0]
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        full = _imported_by_call(value) or f"{module}.{head}"
    else:
        return dotted  # a builtin
    return ".".join(filter(None, (full, rest)))


def _nested_class(tree: ast.Module, name: str) -> tuple[ast.ClassDef, ast.AST] | None:
    """A class ``name`` defined inside a top-level function (built lazily) and that function."""
    for top in tree.body:
        if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(top):
                if isinstance(node, ast.ClassDef) and node.name == name:
                    return node, top
    return None


def _locate(src: _Source, dotted: str, depth: int = 0) -> tuple[str, ast.stmt] | None:
    """``(module, binding statement)`` of a ``neurips26`` name given as ``module.Name``, following re-exports."""
    if depth > 8 or not dotted.startswith("neurips26."):
        return None
    module, _, name = dotted.rpartition(".")
    tree = src.tree(module)
    if tree is None:
        return None
    found = _binding(tree, name)
    if found is None:
        for base in _module_aliases(tree)[2]:  # import *
            hit = _locate(src, f"{_resolve(module, base, src.is_package(module))}.{name}", depth + 1)
            if hit is not None:
                return hit
        return None
    node = found[0]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        target = _qualify(src, module, name)
        return _locate(src, target, depth + 1) if target != f"{module}.{name}" else None
    return module, node


def _external_bases(
    src: _Source, module: str, node: ast.ClassDef, depth: int = 0, scope: ast.AST | None = None
) -> list[str]:
    """Bases of class ``node`` outside ``neurips26``, following in-package bases (statically)."""
    out: list[str] = []
    for base in node.bases:
        dotted = _dotted(base)
        if dotted is None:
            continue
        full = _qualify(src, module, dotted, scope)
        if full.startswith("neurips26."):
            hit = _locate(src, full)
            if hit is not None and isinstance(hit[1], ast.ClassDef) and depth < 8:
                out += _external_bases(src, hit[0], hit[1], depth + 1)
        elif full not in _PLAIN_BASES:
            out.append(full)
    return list(dict.fromkeys(out))


def describe(root: str | Path, module: str, name: str) -> Export:
    """What ``name`` of ``module`` is, read statically from the tree under ``root`` (holding ``neurips26/``)."""
    return _describe(_Source(Path(root)), module, name)


def _describe(src: _Source, module: str, name: str, depth: int = 0) -> Export:
    tree = src.tree(module)
    found = _binding(tree, name) if tree is not None else None
    if found is None:
        if tree is not None and depth < 8:
            hit = _locate(src, f"{module}.{name}")
            if hit is not None and hit[0] != module:
                return _describe(src, hit[0], name, depth + 1)
            nested = _nested_class(tree, name)
            if nested is not None:  # built on first access by a module __getattr__
                node, scope = nested
                bases = tuple(_external_bases(src, module, node, scope=scope))
                return Export(name, module, "class", bases, _first_line(ast.get_docstring(node)))
        return Export(name, module, "constant")
    node, nxt = found
    if isinstance(node, ast.ClassDef):
        bases = tuple(_external_bases(src, module, node))
        return Export(name, module, "class", bases, _first_line(ast.get_docstring(node)))
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return Export(name, module, "function", (), _first_line(ast.get_docstring(node)))
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        target = _qualify(src, module, name)
        hit = _locate(src, target) if depth < 8 else None
        if hit is not None:
            inner = _describe(src, hit[0], target.rpartition(".")[2], depth + 1)
            return Export(name, module, inner.kind, inner.bases, inner.doc)
        return Export(name, module, "re-export", (target,))
    doc = ""
    if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
        doc = _first_line(nxt.value.value)  # an attribute docstring right below the assignment
    value = node.value
    if isinstance(value, ast.Name) and value.id != name and depth < 8:  # an alias: Foo = Bar
        inner = _describe(src, module, value.id, depth + 1)
        if inner.kind in ("class", "function"):
            return Export(name, module, inner.kind, inner.bases, doc or inner.doc)
    return Export(name, module, "constant", (), doc)


def describe_exports(root: str | Path, index: dict[str, str]) -> list[Export]:
    """:class:`Export` of every ``{name: defining module}`` of ``index``, sorted by name."""
    src = _Source(Path(root))
    return [_describe(src, index[name], name) for name in sorted(index)]


def _isort_key(name: str) -> tuple[int, str, str]:
    """isort's (and ruff's) order of imported names: CONSTANTS, then Classes, then the rest."""
    kind = 0 if name.isupper() and len(name) > 1 else 1 if name[:1].isupper() else 2
    return kind, name.lower(), name


def render_stub(package: str, index: dict[str, str]) -> str:
    """The ``__init__.pyi`` of an area: every name of ``index`` re-exported from its defining module."""
    by_module: dict[str, list[str]] = {}
    for name, module in index.items():
        by_module.setdefault(module, []).append(name)
    lines = [
        f'"""Type stub of {package}: its {len(index)} public names, re-exported explicitly.',
        "",
        f"Generated by `{GENERATOR}` from the modules' ``__all__`` (read with ast); do not edit by hand.",
        f"`{GENERATOR} --check` fails when it is stale. At runtime the names resolve lazily (PEP 562).",
        '"""',
        "",
    ]
    for module in sorted(by_module):
        for n in sorted(by_module[module], key=_isort_key):
            line = f"from {module} import {n} as {n}"
            lines.append(line if len(line) <= 110 else f"from {module} import (\n    {n} as {n},\n)")
    lines += ["", "__all__ = [", *(f'    "{n}",' for n in sorted(index)), "]", ""]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|")


def render_api(areas: dict[str, list[Export]]) -> str:
    """``API.md``: per area a table of name, kind (with the class's outside bases), module and summary."""
    total = sum(len(e) for e in areas.values())
    lines = [
        "# neurips26 API: the exported names of every area",
        "",
        f"Generated by `{GENERATOR}` from the sources (the modules' `__all__` and docstrings, read with `ast`,",
        f"nothing imported); do not edit by hand: `{GENERATOR} --check` fails when this file or an area's",
        "`__init__.pyi` stub is stale. Every name imports as `from neurips26.<area> import <name>`; its first",
        "use imports only its defining module. A class's kind names its bases outside neurips26.",
        "",
        "| area | names |",
        "|---|---:|",
        *(f"| [{a}](#{a}) | {len(e)} |" for a, e in areas.items()),
        f"| total | {total} |",
    ]
    for area, exports in areas.items():
        lines += ["", f"## {area}", "", "| name | kind | module | summary |", "|---|---|---|---|"]
        for e in exports:
            kind = e.kind + (f" ({', '.join(f'`{b}`' for b in e.bases)})" if e.bases else "")
            lines.append(f"| `{e.name}` | {_cell(kind)} | `{e.module}` | {_cell(e.doc)} |")
    return "\n".join(lines) + "\n"

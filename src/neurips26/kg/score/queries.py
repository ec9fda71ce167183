"""BetaE query structures: the grammar, logical variables in creation order, slots. Part of :mod:`neurips26.kg.score` (see its docstring for the paper and the math)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

#: BetaE query structures of the grammar this module executes.
STRUCTURES = {
    "1p": ("e", ("r",)),
    "2p": ("e", ("r", "r")),
    "3p": ("e", ("r", "r", "r")),
    "2i": (("e", ("r",)), ("e", ("r",))),
    "3i": (("e", ("r",)), ("e", ("r",)), ("e", ("r",))),
    "pi": (("e", ("r", "r")), ("e", ("r",))),
    "ip": ((("e", ("r",)), ("e", ("r",))), ("r",)),
}


@dataclass
class VariableInfo:
    """One logical variable of a query: index in creation order, what creates it, whether it is the target."""

    index: int
    kind: str  # "projection" | "intersection"
    is_target: bool


def _is_path(node) -> bool:
    return isinstance(node, tuple) and len(node) == 2 and node[0] == "e" and _is_rels(node[1])


def _is_rels(node) -> bool:
    return isinstance(node, tuple) and len(node) >= 1 and all(x == "r" for x in node)


def _check_structure(node, depth: int = 0) -> None:
    if depth > 8 or not isinstance(node, tuple):
        raise ValueError(f"query structure {node!r} is outside the grammar {sorted(STRUCTURES)}")
    if _is_path(node):
        return
    if len(node) == 2 and _is_rels(node[1]) and not _is_path(node[0]):
        _check_structure(node[0], depth + 1)
        if _is_path(node[0]) or node[0][0] == "e":
            raise ValueError(f"query structure {node!r} is outside the grammar")
        return
    if len(node) >= 2 and all(isinstance(b, tuple) for b in node):
        for b in node:
            _check_structure(b, depth + 1)
        return
    raise ValueError(f"query structure {node!r} is outside the grammar {sorted(STRUCTURES)}")


@functools.lru_cache(maxsize=256)
def _check_structure_cached(structure) -> None:
    _check_structure(structure)


def _walk(structure, on_anchor, on_project, on_intersect, on_variable):
    """Evaluate ``structure`` bottom-up with callbacks; variables are numbered in creation order."""
    _check_structure_cached(_hashable(structure))
    counter = [0]

    def var(value, kind):
        j = counter[0]
        counter[0] += 1
        return on_variable(j, kind, value)

    def ev(node, feeds_merge: bool):
        if _is_path(node):
            v = on_anchor()
            for i, _ in enumerate(node[1]):
                v = on_project(v)
                if not (i == len(node[1]) - 1 and feeds_merge):
                    v = var(v, "projection")
            return v
        if len(node) == 2 and _is_rels(node[1]) and not _is_path(node[0]):
            v = ev(node[0], feeds_merge=False)
            for i, _ in enumerate(node[1]):
                v = on_project(v)
                if not (i == len(node[1]) - 1 and feeds_merge):
                    v = var(v, "projection")
            return v
        return var(on_intersect([ev(b, feeds_merge=True) for b in node]), "intersection")

    out = ev(structure, feeds_merge=False)
    return out, counter[0]


def _num_variables(structure) -> int:
    return _num_variables_cached(_hashable(structure))


@functools.lru_cache(maxsize=256)
def _num_variables_cached(structure) -> int:
    return len(query_variables(structure))


def query_variables(structure) -> list[VariableInfo]:
    """The logical variables of a BetaE ``structure`` in creation order (the single source of truth).

    2p -> 2, 3p -> 3, 2i -> 1, pi -> 2, ip -> 2 variables; the last one is the target.
    Raises ``ValueError`` for a structure outside the grammar (:data:`STRUCTURES`).
    """
    kinds: list[str] = []
    _walk(structure, lambda: None, lambda v: None, lambda vs: None, lambda j, k, v: kinds.append(k))
    return [VariableInfo(j, k, j == len(kinds) - 1) for j, k in enumerate(kinds)]


def _hashable(structure):
    try:
        hash(structure)
    except TypeError:
        raise ValueError(
            f"query structure {structure!r} is outside the grammar {sorted(STRUCTURES)}"
        ) from None
    return structure


def _num_slots(structure) -> tuple[int, int]:
    return _num_slots_cached(_hashable(structure))


@functools.lru_cache(maxsize=256)
def _num_slots_cached(structure) -> tuple[int, int]:
    counts = [0, 0]

    def anchor():
        counts[0] += 1

    def project(v):
        counts[1] += 1

    _walk(structure, anchor, project, lambda vs: None, lambda j, k, v: v)
    return counts[0], counts[1]

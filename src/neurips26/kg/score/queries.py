"""BetaE query structures: the grammar, logical variables in creation order, slots. Part of :mod:`neurips26.kg.score` (see its docstring for the paper and the math).

Grammar (BetaE nested tuples, DNF form for unions):

* path: ``("e", ("r", ..., "r"))`` - an anchor followed by one or more projections;
* negated path: ``("e", ("r", ..., "r", "n"))`` - the last projection is negated; allowed only as a
  branch of an intersection that also has a positive branch (a lone negation has an unbounded answer set);
* intersection: ``(b_1, ..., b_k)`` with ``k >= 2`` branches;
* union (DNF): ``(b_1, ..., b_k, ("u",))`` with ``k >= 2`` positive branches;
* projection of a merge: ``(intersection_or_union, ("r", ..., "r"))``.
"""

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
    "2u": (("e", ("r",)), ("e", ("r",)), ("u",)),
    "up": ((("e", ("r",)), ("e", ("r",)), ("u",)), ("r",)),
    "2in": (("e", ("r",)), ("e", ("r", "n"))),
    "3in": (("e", ("r",)), ("e", ("r",)), ("e", ("r", "n"))),
    "inp": ((("e", ("r",)), ("e", ("r", "n"))), ("r",)),
    "pin": (("e", ("r", "r")), ("e", ("r", "n"))),
    "pni": (("e", ("r", "r", "n")), ("e", ("r",))),
}

#: Structures with a union (DNF) or a negated branch.
UNION_STRUCTURES = ("2u", "up")
NEGATION_STRUCTURES = ("2in", "3in", "inp", "pin", "pni")


@dataclass
class VariableInfo:
    """One logical variable of a query: index in creation order, what creates it, whether it is the target.

    ``negated`` marks a variable inside a negated branch: its values *exclude* answers, so preferences
    on it act through the negation.
    """

    index: int
    kind: str  # "projection" | "intersection" | "union"
    is_target: bool
    negated: bool = False


def _is_path(node) -> bool:
    return isinstance(node, tuple) and len(node) == 2 and node[0] == "e" and _is_rels(node[1])


def _is_rels(node) -> bool:
    return isinstance(node, tuple) and len(node) >= 1 and all(x == "r" for x in node)


def _is_neg_path(node) -> bool:
    """``("e", ("r", ..., "r", "n"))``: a path whose last projection is negated."""
    return (
        isinstance(node, tuple)
        and len(node) == 2
        and node[0] == "e"
        and isinstance(node[1], tuple)
        and len(node[1]) >= 2
        and node[1][-1] == "n"
        and _is_rels(node[1][:-1])
    )


def _is_union(node) -> bool:
    """``(b_1, ..., b_k, ("u",))`` with ``k >= 2`` branches (DNF union)."""
    return isinstance(node, tuple) and len(node) >= 3 and node[-1] == ("u",)


def _hops(rels: tuple) -> int:
    return sum(1 for x in rels if x == "r")


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
    if _is_union(node):
        for b in node[:-1]:
            if _is_neg_path(b):
                raise ValueError(
                    f"query structure {node!r} is outside the grammar: a union branch cannot be negated"
                )
            _check_structure(b, depth + 1)
        return
    if len(node) >= 2 and all(isinstance(b, tuple) for b in node):
        positive = [b for b in node if not _is_neg_path(b)]
        if not positive:
            raise ValueError(
                f"query structure {node!r} is outside the grammar: an intersection needs a non-negated branch"
            )
        for b in positive:
            _check_structure(b, depth + 1)
        return
    raise ValueError(f"query structure {node!r} is outside the grammar {sorted(STRUCTURES)}")


@functools.lru_cache(maxsize=256)
def _check_structure_cached(structure) -> None:
    _check_structure(structure)


def _walk(structure, on_anchor, on_project, on_intersect, on_variable, on_union=None, on_negate=None):
    """Evaluate ``structure`` bottom-up with callbacks; variables are numbered in creation order.

    ``on_union`` defaults to ``on_intersect`` and ``on_negate`` to the identity (enough for counting);
    ``on_negate`` is applied to the output of a negated path's last projection.
    """
    _check_structure_cached(_hashable(structure))
    on_union = on_union or on_intersect
    on_negate = on_negate or (lambda v: v)
    counter = [0]

    def var(value, kind):
        j = counter[0]
        counter[0] += 1
        return on_variable(j, kind, value)

    def ev(node, feeds_merge: bool):
        if _is_path(node) or _is_neg_path(node):
            neg = _is_neg_path(node)
            hops = _hops(node[1])
            v = on_anchor()
            for i in range(hops):
                v = on_project(v)
                if neg and i == hops - 1:
                    v = on_negate(v)
                if not (i == hops - 1 and feeds_merge):
                    v = var(v, "projection")
            return v
        if len(node) == 2 and _is_rels(node[1]) and not _is_path(node[0]):
            v = ev(node[0], feeds_merge=False)
            for i, _ in enumerate(node[1]):
                v = on_project(v)
                if not (i == len(node[1]) - 1 and feeds_merge):
                    v = var(v, "projection")
            return v
        if _is_union(node):
            return var(on_union([ev(b, feeds_merge=True) for b in node[:-1]]), "union")
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
    kinds: list[tuple[str, bool]] = []
    negated = _negated_flags(structure)
    _walk(structure, lambda: None, lambda v: None, lambda vs: None, lambda j, k, v: kinds.append(k))
    return [VariableInfo(j, k, j == len(kinds) - 1, negated[j]) for j, k in enumerate(kinds)]


def _negated_flags(structure) -> list[bool]:
    """Per variable (creation order): whether it lies inside a negated branch."""
    flags: list[bool] = []

    def ev(node, feeds_merge: bool, neg: bool = False):
        if _is_path(node) or _is_neg_path(node):
            hops = _hops(node[1])
            flags.extend([_is_neg_path(node)] * (hops - (1 if feeds_merge else 0)))
            return
        if len(node) == 2 and _is_rels(node[1]) and not _is_path(node[0]):
            ev(node[0], feeds_merge=False)
            flags.extend([False] * (len(node[1]) - (1 if feeds_merge else 0)))
            return
        for b in node[:-1] if _is_union(node) else node:
            ev(b, feeds_merge=True)
        flags.append(False)

    _check_structure_cached(_hashable(structure))
    ev(structure, feeds_merge=False)
    return flags


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

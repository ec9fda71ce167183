"""BetaE query sampling backwards from an answer and exact per-value variable bindings. Part of :mod:`neurips26.kg.score` (see its docstring for the paper and the math)."""

from __future__ import annotations

import torch
from torch import Tensor

from neurips26.common.checks import check_int
from neurips26.kg.score.executor import FuzzyAdjacency, QTOExecutor
from neurips26.kg.score.queries import _check_structure, _hops, _is_neg_path, _is_path, _is_rels, _is_union


class QuerySampler:
    """Samples anchors and relations for a BetaE structure by walking backwards from an answer.

    ``triples`` ``[T, 3]`` are the graph's edges (inverse relations included as extra ids); every
    sampled query has at least one answer on that graph. With ``last_edges`` ``[E, 3]`` (held-out
    edges of the same graph) the hop into the answer of the first branch is one of them, so the
    query tends to have answers that need a held-out edge (BetaE's "hard" answers). Anchors and
    relations come in the order the executor consumes them (depth first, branches left to right).

    Unions: the first branch is walked back from the answer, the others from independently drawn
    entities (so the union has answers that one branch alone misses). Negation: the positive branches
    of an intersection are walked back from the answer (the held-out hop goes into the first positive
    branch), a negated branch from another entity, and the query is kept only when the answer survives
    the negation on the symbolic graph of ``triples``.
    """

    def __init__(self, triples: Tensor, num_entities: int, last_edges: Tensor | None = None):
        check_int("num_entities", num_entities, low=1)
        if (
            not isinstance(triples, Tensor)
            or triples.dim() != 2
            or triples.shape[1] != 3
            or triples.numel() == 0
        ):
            raise ValueError("triples must be a non-empty [T, 3] long tensor")
        self.triples, self.num_entities = triples, num_entities
        self.order = torch.argsort(triples[:, 2], stable=True)
        tails = triples[self.order, 2].contiguous()
        ids = torch.arange(num_entities)
        self.lo = torch.searchsorted(tails, ids, right=False).tolist()
        self.hi = torch.searchsorted(tails, ids, right=True).tolist()
        self.order_list = self.order.tolist()
        self.heads, self.rels = triples[:, 0].tolist(), triples[:, 1].tolist()
        self.targets = torch.unique(triples[:, 2])
        self.last_edges = last_edges

    def _step(self, cur: int, gen: torch.Generator) -> tuple[int, int]:
        n_in = self.hi[cur] - self.lo[cur]
        if n_in == 0:
            raise LookupError
        k = self.order_list[self.lo[cur] + int(torch.randint(0, n_in, (1,), generator=gen))]
        return self.heads[k], self.rels[k]

    def _random_target(self, gen: torch.Generator) -> int:
        return int(self.targets[int(torch.randint(0, self.targets.numel(), (1,), generator=gen))])

    def _symbolic(self) -> QTOExecutor:
        if getattr(self, "_sym", None) is None:
            nr = int(self.triples[:, 1].max()) + 1
            edges = {r: self.triples[self.triples[:, 1] == r][:, [0, 2]].t() for r in range(nr)}
            self._sym = QTOExecutor(FuzzyAdjacency.from_edges(edges, self.num_entities, nr))
        return self._sym

    def sample(self, structure, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``(anchors [A], relations [P])`` long tensors for ``structure``."""
        _check_structure(structure)
        forced: list = []
        has_negation = "'n'" in str(structure)

        def back(node, target: int) -> tuple[list[int], list[int]]:
            if _is_path(node) or _is_neg_path(node) or (len(node) == 2 and _is_rels(node[1])):
                cur, chosen = target, []
                for _ in range(_hops(node[1])):
                    if forced:
                        h, r = forced.pop()
                        cur = h
                    else:
                        cur, r = self._step(cur, generator)
                    chosen.append(r)
                chosen.reverse()
                if _is_path(node) or _is_neg_path(node):
                    return [cur], chosen
                a, rs = back(node[0], cur)
                return a, rs + chosen
            if _is_union(node):
                branches = node[:-1]
                parts = [back(branches[0], target)]
                parts += [back(b, self._random_target(generator)) for b in branches[1:]]
            else:
                parts = [None] * len(node)
                for i, b in enumerate(node):  # positive branches first: they carry the answer
                    if not _is_neg_path(b):
                        parts[i] = back(b, target)
                for i, b in enumerate(node):
                    if _is_neg_path(b):
                        parts[i] = back(b, self._random_target(generator))
            anchors, rels = [], []
            for a, rs in parts:
                anchors += a
                rels += rs
            return anchors, rels

        for _ in range(100):
            if self.last_edges is not None and self.last_edges.numel():
                k = int(torch.randint(0, self.last_edges.shape[0], (1,), generator=generator))
                h, r, target = self.last_edges[k].tolist()
                forced[:] = [(h, r)]
            else:
                target = int(
                    self.targets[int(torch.randint(0, self.targets.numel(), (1,), generator=generator))]
                )
            try:
                a, rs = back(structure, target)
            except LookupError:
                continue
            a, rs = torch.tensor(a, dtype=torch.long), torch.tensor(rs, dtype=torch.long)
            if has_negation and not self._symbolic()(structure, a, rs)[target] > 0:
                continue
            return a, rs
        raise ValueError("could not sample a query with an answer from these triples (100 tries)")


def sample_query(
    structure, triples: Tensor, num_entities: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """One query for ``structure`` with an answer on ``triples`` (see :class:`QuerySampler`)."""
    return QuerySampler(triples, num_entities).sample(structure, generator)


def variable_bindings(
    executor: QTOExecutor, structure, anchors: Tensor, relations: Tensor, variable: int
) -> tuple[Tensor, Tensor]:
    """Values of variable ``variable`` and the target answers each one induces (exact on a symbolic executor).

    Variable ``j`` is replaced by each of its non-zero values in turn (batched one-hot rows) and the
    rest of the query is executed. Values that induce no answer are dropped.

    Returns
    -------
    values : Tensor
        ``[B]`` long entity ids.
    induced : Tensor
        ``[B, N]`` bool: ``induced[b, e]`` when value ``b`` of the variable leads to answer ``e``.
    """
    holder: dict[str, Tensor] = {}

    def expand(v: Tensor) -> Tensor:
        ids = v.nonzero().flatten()
        holder["ids"] = ids
        out = torch.zeros(ids.numel(), v.shape[-1], dtype=v.dtype)
        out[torch.arange(ids.numel()), ids] = v[ids]
        return out

    out = executor(structure, anchors, relations, adjust={variable: expand})
    if out.dim() == 1:  # no value: nothing to expand
        return torch.zeros(0, dtype=torch.long), torch.zeros(0, out.shape[-1], dtype=torch.bool)
    induced = out > 0
    keep = induced.any(1)
    return holder["ids"][keep], induced[keep]

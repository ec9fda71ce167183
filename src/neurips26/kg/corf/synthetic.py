"""A learnable synthetic community KG for the CoRF claim check (relations with paired, symmetric and rule structure).

:func:`neurips26.common.kg.community_kg` draws most triples with a uniformly random tail inside the head's
community, so a conditional message-passing model can at best tell "near the head" from "far": its
filtered MRR stays close to random. :func:`rule_community_kg` keeps the same locality (communities,
``intra`` share of triples inside the community, average out-degree) but gives every triple a reason
that a path in the *other* triples reveals:

* **paired relations** ``b`` and ``b' = B + b``: every base triple ``(h, b, t)`` comes with
  ``(t, b', h)``; a held-out one is found through its partner (a one-hop path);
* **symmetric relations** ``s``: ``(h, s, t)`` comes with ``(t, s, h)``;
* **composition rules** ``r_c = r_a \\circ r_b`` over base relations: ``(h, r_c, t)`` for two-hop paths
  ``h -r_a-> m -r_b-> t`` of the base triples (a two-hop path).

Relation layout for ``R`` relations: ``B = num_base`` base relations ``0..B-1``, their partners
``B..2B-1``, ``num_symmetric`` symmetric relations, and the remaining ``R - 2B - num_symmetric``
composition rules. Valid/test triples are drawn uniformly from all triples, as usual.

Shapes
------
- returned :class:`~neurips26.common.kg.KGSplits`: ``train/valid/test`` ``[T, 3]`` long, ``community [N]``.
"""

from __future__ import annotations

import numpy as np

from neurips26.common.checks import check_int
from neurips26.common.kg import KGSplits, check_community_args, community_ids, split_triples

__all__ = ["rule_community_kg"]


def rule_community_kg(
    num_entities: int,
    *,
    community_size: int = 100,
    intra: float = 0.95,
    num_relations: int = 20,
    num_base: int = 6,
    num_symmetric: int = 4,
    avg_out_degree: float = 2.0,
    rule_fraction: float = 0.25,
    valid_fraction: float = 0.05,
    test_fraction: float = 0.05,
    seed: int = 0,
) -> KGSplits:
    """Community KG whose held-out triples are implied by paths among the other triples.

    Parameters
    ----------
    num_entities, community_size, valid_fraction, test_fraction, seed
        As in :func:`~neurips26.common.kg.community_kg` (the same defaults).
    intra : float, default 0.95
        Probability that a base or symmetric triple stays inside the head's community.
    num_relations : int, default 20
        ``R``; needs ``R >= 2 * num_base + num_symmetric``.
    num_base : int, default 6
        Base relations, each with a paired relation (``num_base >= 1``).
    num_symmetric : int, default 4
        Symmetric relations.
    avg_out_degree : float, default 2.0
        Base + symmetric + rule triples per entity before the pairs/reverses are added (with the
        pairs, about 2.75 triples per entity at the defaults, close to ``community_kg``'s 3).
    rule_fraction : float, default 0.25
        Share of that budget produced by composition rules (0 when there are no rule relations).

    Returns
    -------
    KGSplits
        With ``community`` set; relation ids laid out as in the module docstring.
    """
    n, cs = check_community_args(
        num_entities, community_size, intra, avg_out_degree, rule_fraction, valid_fraction, test_fraction, seed
    )  # fmt: skip
    nr = check_int("num_relations", num_relations, low=2)
    nb = check_int("num_base", num_base, low=1)
    ns = check_int("num_symmetric", num_symmetric, low=0)
    if 2 * nb + ns > nr:
        raise ValueError(f"num_relations ({nr}) must be >= 2 * num_base + num_symmetric ({2 * nb + ns})")
    rng = np.random.default_rng(seed)
    n_rules = nr - 2 * nb - ns
    comm = community_ids(n, cs)
    start = np.arange(comm.max() + 1) * cs
    size = np.bincount(comm)

    def local_pairs(count: int) -> tuple[np.ndarray, np.ndarray]:
        h = rng.integers(0, n, count)
        t = rng.integers(0, n, count)
        stay = rng.random(count) < intra
        c = comm[h[stay]]
        t[stay] = start[c] + (rng.random(stay.sum()) * size[c]).astype(np.int64)
        return h, t

    total = int(round(n * avg_out_degree))
    n_rule = int(round(total * rule_fraction)) if n_rules else 0
    n_plain = max(total - n_rule, 1)
    n_sym = int(round(n_plain * ns / (nb + ns)))
    n_base = max(n_plain - n_sym, 1)
    h, t = local_pairs(n_base)
    b = rng.integers(0, nb, n_base)
    parts = [np.stack([h, b, t], 1), np.stack([t, b + nb, h], 1)]
    if n_sym:
        hs, ts = local_pairs(n_sym)
        s = 2 * nb + rng.integers(0, ns, n_sym)
        parts += [np.stack([hs, s, ts], 1), np.stack([ts, s, hs], 1)]
    if n_rule:
        base = parts[0]
        by_head: dict[tuple[int, int], list[int]] = {}
        for hh, rr, tt in base.tolist():
            by_head.setdefault((hh, rr), []).append(tt)
        per_rule = max(n_rule // n_rules, 1)
        out = []
        for c in range(n_rules):
            a, bb = rng.choice(nb, 2, replace=nb < 2)
            first = base[base[:, 1] == a]
            found = 0
            for idx in rng.permutation(len(first)):
                hh, _, mm = first[idx].tolist()
                if hh == mm:  # self-loops are dropped below, so they cannot carry a rule
                    continue
                for tt in by_head.get((mm, int(bb)), ()):
                    if tt != mm:
                        out.append((hh, 2 * nb + ns + c, tt))
                        found += 1
                if found >= per_rule:
                    break
        if out:
            parts.append(np.asarray(out, dtype=np.int64).reshape(-1, 3))
    return split_triples(
        parts, rng, name=f"rule_community_kg_n{n}_s{seed}", num_relations=nr, community=comm,
        valid_fraction=valid_fraction, test_fraction=test_fraction,
    )  # fmt: skip

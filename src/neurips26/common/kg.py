"""Shared knowledge-graph substrate: real splits shipped by PyKEEN, a synthetic community KG, filtered ranking.

Written once and reused by the KG methods (``neurips26.kg.*``). Nothing is downloaded.

Real data
---------
PyKEEN's wheel ships the Nations, Kinships and UMLS splits as tab-separated ``head relation tail``
files (``pykeen/datasets/<name>/{train,valid,test}.txt``). :func:`load_pykeen_dataset` reads them
straight from the installed package (found with :func:`importlib.util.find_spec`, so ``pykeen`` itself
is never imported and nothing is written under ``HOME``). Entity and relation ids follow PyKEEN's
``TriplesFactory`` convention: the sorted names of the training split (every entity and relation of
the three datasets occurs in training; a name that does not raises).

Synthetic community KG
----------------------
:func:`community_kg` draws ``N`` entities in communities of about ``community_size``; base triples
``(h, r, t)`` pick ``h`` uniformly, ``t`` inside ``h``'s community with probability ``intra`` (else
uniformly) and ``r`` among the base relations; a few compositional rules ``r_c = r_a \\circ r_b`` add
``(h, r_c, t)`` for sampled two-hop paths ``h -r_a-> m -r_b-> t``, so the relations are learnable.

Filtered ranking
----------------
For a query ``(h, r, ?)`` with true tail ``t`` and scores ``s``, every *other* known true tail
``t' \\ne t`` (from all splits) is removed from the candidate list and the rank is PyKEEN's
*realistic* rank, the mean of the optimistic and pessimistic ranks:

.. math::
    \\mathrm{rank} = 1 + \\#\\{e \\notin F: s_e > s_t\\} + \\tfrac12 \\#\\{e \\notin F \\cup \\{t\\}: s_e = s_t\\},

with ``F`` the filtered set. MRR is the mean of ``1 / rank``; Hits@k the fraction with ``rank <= k``.
The test suite checks both against :class:`pykeen.evaluation.RankBasedEvaluator` on the same scores.
The judged metrics of the KG claims come from PyKEEN itself: :class:`PykeenRanking` drives
``RankBasedEvaluator.process_scores_`` / ``finalize`` with our scores and filter (same rank variant,
realistic); :func:`filtered_ranks` stays as the tested-equal cross-check (:func:`pykeen_mrr_tolerance`).

Inverse relations
-----------------
Conditional message passing and query answering use relations ``0..R-1`` plus inverses ``R..2R-1``:
every triple ``(h, r, t)`` also yields ``(t, r + R, h)`` (:func:`add_inverse`).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from neurips26.common.checks import check_choice, check_float, check_int, check_shape

__all__ = [
    "PYKEEN_DATASETS",
    "KGSplits",
    "load_pykeen_dataset",
    "community_kg",
    "check_community_args",
    "community_ids",
    "split_triples",
    "add_inverse",
    "check_triples",
    "check_queries",
    "known_tails",
    "positive_mask",
    "filtered_ranks",
    "ranking_metrics",
    "in_degree",
    "zipf_queries",
    "PYKEEN_RANK_TYPE",
    "PykeenRanking",
    "pykeen_mrr_tolerance",
    "pykeen_ranking_metrics",
]

PYKEEN_DATASETS = ("nations", "kinships", "umls")


@dataclass
class KGSplits:
    """A knowledge graph split into train/valid/test triples.

    Attributes
    ----------
    name : str
        Dataset name.
    num_entities, num_relations : int
        Entity ids lie in ``[0, num_entities)``, relation ids in ``[0, num_relations)`` (no inverses).
    train, valid, test : Tensor
        ``[T, 3]`` long tensors of ``(head, relation, tail)``.
    entity_names, relation_names : list of str, optional
        Names by id (real datasets); ``None`` for synthetic graphs.
    community : Tensor, optional
        ``[num_entities]`` latent community of each entity (synthetic graphs).
    """

    name: str
    num_entities: int
    num_relations: int
    train: Tensor
    valid: Tensor
    test: Tensor
    entity_names: list[str] | None = None
    relation_names: list[str] | None = None
    community: Tensor | None = None

    def all_triples(self) -> Tensor:
        """``[T, 3]``: train, valid and test stacked."""
        return torch.cat([self.train, self.valid, self.test])

    def graph(self, split: str = "train") -> tuple[Tensor, Tensor]:
        """``(edge_index [2, 2T], edge_type [2T])`` of a split with inverse relations added."""
        check_choice("split", split, ("train", "train+valid", "all"))
        triples = {
            "train": self.train,
            "train+valid": torch.cat([self.train, self.valid]),
            "all": self.all_triples(),
        }
        return add_inverse(triples[split], self.num_relations)


def _pykeen_folder(name: str) -> Path:
    spec = importlib.util.find_spec("pykeen")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the PyKEEN datasets need the 'pykeen' package (install the kg extra)")
    return Path(next(iter(spec.submodule_search_locations))) / "datasets" / name


def _read_tsv(path: Path) -> list[tuple[str, str, str]]:
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            parts = line.split("\t")
            if len(parts) != 3:
                raise ValueError(f"{path}: expected 3 tab-separated fields, got {line!r}")
            rows.append((parts[0], parts[1], parts[2]))
    return rows


def load_pykeen_dataset(name: str) -> KGSplits:
    """Read one of PyKEEN's bundled datasets (``nations``, ``kinships``, ``umls``) from the wheel.

    Parameters
    ----------
    name : str
        One of :data:`PYKEEN_DATASETS`.

    Returns
    -------
    KGSplits
        Ids as PyKEEN's ``TriplesFactory`` assigns them (sorted training names).
    """
    check_choice("name", name, PYKEEN_DATASETS)
    folder = _pykeen_folder(name)
    rows = {split: _read_tsv(folder / f"{split}.txt") for split in ("train", "valid", "test")}
    entities = sorted({x for h, _, t in rows["train"] for x in (h, t)})
    relations = sorted({r for _, r, _ in rows["train"]})
    ent_id = {e: i for i, e in enumerate(entities)}
    rel_id = {r: i for i, r in enumerate(relations)}

    def encode(split: str) -> Tensor:
        try:
            ids = [(ent_id[h], rel_id[r], ent_id[t]) for h, r, t in rows[split]]
        except KeyError as err:
            raise ValueError(
                f"{name}/{split}: {err.args[0]!r} does not occur in the training split"
            ) from None
        return torch.tensor(ids, dtype=torch.long).view(-1, 3)

    return KGSplits(
        name=name,
        num_entities=len(entities),
        num_relations=len(relations),
        train=encode("train"),
        valid=encode("valid"),
        test=encode("test"),
        entity_names=entities,
        relation_names=relations,
    )


def community_kg(
    num_entities: int,
    *,
    community_size: int = 100,
    intra: float = 0.95,
    num_relations: int = 20,
    num_rules: int = 4,
    avg_out_degree: float = 3.0,
    rule_fraction: float = 0.3,
    valid_fraction: float = 0.05,
    test_fraction: float = 0.05,
    seed: int = 0,
) -> KGSplits:
    """Sparse synthetic KG with community structure and compositional rules.

    Parameters
    ----------
    num_entities : int
        ``N >= 2``.
    community_size : int, default 100
        Entities per community (the last one takes the remainder).
    intra : float, default 0.95
        Probability that a base triple stays inside the head's community.
    num_relations : int, default 20
        ``R``; the last ``num_rules`` relations are rule heads ``r_c = r_a \\circ r_b``.
    num_rules : int, default 4
        Compositional rules (``0 <= num_rules < num_relations``).
    avg_out_degree : float, default 3.0
        Triples per entity (before deduplication).
    rule_fraction : float, default 0.3
        Share of the triple budget produced by rules (by sampling two-hop paths).
    valid_fraction, test_fraction : float, default 0.05
        Held-out shares, drawn uniformly at random.
    seed : int, default 0
        Everything is a function of the seed.

    Returns
    -------
    KGSplits
        With ``community`` set.
    """
    n, cs = check_community_args(
        num_entities, community_size, intra, avg_out_degree, rule_fraction, valid_fraction, test_fraction, seed
    )  # fmt: skip
    nr = check_int("num_relations", num_relations, low=1)
    nrule = check_int("num_rules", num_rules, low=0, high=nr - 1)
    rng = np.random.default_rng(seed)
    comm = community_ids(n, cs)
    num_comm = int(comm.max()) + 1
    members = [np.flatnonzero(comm == c) for c in range(num_comm)]
    total = int(round(n * avg_out_degree))
    n_rule = int(round(total * rule_fraction)) if nrule else 0
    n_base = max(total - n_rule, 1)
    base_rel = nr - nrule
    h = rng.integers(0, n, n_base)
    stay = rng.random(n_base) < intra
    t = rng.integers(0, n, n_base)
    for i in np.flatnonzero(stay):
        group = members[comm[h[i]]]
        t[i] = group[rng.integers(0, len(group))]
    r = rng.integers(0, base_rel, n_base)
    triples = [np.stack([h, r, t], 1)]
    if nrule:
        # rule c: r_c = r_a o r_b with (a, b) distinct base relations
        pairs = [tuple(rng.choice(base_rel, 2, replace=base_rel < 2)) for _ in range(nrule)]
        base = triples[0]
        by_head_rel: dict[tuple[int, int], list[int]] = {}
        for hh, rr, tt in base:
            by_head_rel.setdefault((int(hh), int(rr)), []).append(int(tt))
        out = []
        per_rule = max(n_rule // nrule, 1)
        for c, (a, b) in enumerate(pairs):
            first = base[base[:, 1] == a]
            if len(first) == 0:
                continue
            for idx in rng.integers(0, len(first), per_rule * 2):
                hh, _, mm = first[idx]
                tails = by_head_rel.get((int(mm), int(b)))
                if tails:
                    out.append((hh, base_rel + c, tails[rng.integers(0, len(tails))]))
                if len(out) >= per_rule * (c + 1):
                    break
        if out:
            triples.append(np.asarray(out, dtype=np.int64).reshape(-1, 3))
    return split_triples(
        triples, rng, name=f"community_kg_n{n}_s{seed}", num_relations=nr, community=comm,
        valid_fraction=valid_fraction, test_fraction=test_fraction,
    )  # fmt: skip


def check_community_args(
    num_entities: int,
    community_size: int,
    intra: float,
    avg_out_degree: float,
    rule_fraction: float,
    valid_fraction: float,
    test_fraction: float,
    seed: int,
) -> tuple[int, int]:
    """Check the arguments the synthetic community KGs share (see :func:`community_kg`).

    Returns
    -------
    (int, int)
        ``num_entities`` and ``community_size``.
    """
    n = check_int("num_entities", num_entities, low=2)
    cs = check_int("community_size", community_size, low=1)
    check_float("intra", intra, 0.0, 1.0)
    check_float("avg_out_degree", avg_out_degree, 0.0, low_open=True)
    check_float("rule_fraction", rule_fraction, 0.0, 1.0, high_open=True)
    check_float("valid_fraction", valid_fraction, 0.0, 0.5)
    check_float("test_fraction", test_fraction, 0.0, 0.5)
    check_int("seed", seed, low=0)
    return n, cs


def community_ids(num_entities: int, community_size: int) -> np.ndarray:
    """Community of every entity: consecutive blocks of ``community_size``; the last holds what is left.

    Shapes: returns ``[num_entities]`` int64.
    """
    n = check_int("num_entities", num_entities, low=1)
    cs = check_int("community_size", community_size, low=1)
    return np.minimum(np.arange(n) // cs, max((n - 1) // cs, 0))


def split_triples(
    parts: list[np.ndarray],
    rng: np.random.Generator,
    *,
    name: str,
    num_relations: int,
    community: np.ndarray,
    valid_fraction: float,
    test_fraction: float,
) -> KGSplits:
    """Pool blocks of ``(h, r, t)`` triples into shuffled train/valid/test splits of a synthetic KG.

    Duplicates and self-loops ``(e, r, e)`` are dropped, the rest is shuffled with ``rng`` (one
    permutation draw) and split: the first ``int(T * valid_fraction)`` triples are ``valid``, the next
    ``int(T * test_fraction)`` are ``test``, the rest ``train``.

    Parameters
    ----------
    parts : list of ndarray
        Blocks of ``[T_i, 3]`` integer triples.
    rng : numpy.random.Generator
        The generator that drew the triples (its state decides the shuffle).
    name : str
    num_relations : int
    community : ndarray
        ``[N]`` community of every entity (``N`` = number of entities).
    valid_fraction, test_fraction : float

    Returns
    -------
    KGSplits
    """
    allt = np.unique(np.concatenate(parts), axis=0)
    allt = allt[allt[:, 0] != allt[:, 2]]
    allt = allt[rng.permutation(len(allt))]
    n_valid, n_test = int(len(allt) * valid_fraction), int(len(allt) * test_fraction)
    tt = torch.as_tensor(allt, dtype=torch.long)
    return KGSplits(
        name=name,
        num_entities=len(community),
        num_relations=num_relations,
        train=tt[n_valid + n_test :],
        valid=tt[:n_valid],
        test=tt[n_valid : n_valid + n_test],
        community=torch.as_tensor(community, dtype=torch.long),
    )


def check_triples(name: str, triples: Tensor, num_entities: int, num_relations: int) -> Tensor:
    """Validate a ``[T, 3]`` long tensor of ``(h, r, t)``; ids must be in range."""
    if not isinstance(triples, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(triples).__name__}")
    check_shape(name, triples, (None, 3))
    if triples.dtype != torch.long:
        raise TypeError(f"{name} must be a long tensor, got {triples.dtype}")
    if triples.numel():
        for col, what, hi in (
            (0, "head", num_entities),
            (1, "relation", num_relations),
            (2, "tail", num_entities),
        ):
            bad = (triples[:, col] < 0) | (triples[:, col] >= hi)
            if bad.any():
                raise ValueError(
                    f"{name}: {what} id {int(triples[bad.nonzero()[0, 0], col])} outside [0, {hi})"
                )
    return triples


def check_queries(queries: Tensor, num_entities: int, num_relations: int, name: str = "queries") -> Tensor:
    """Validate a ``[B, 2]`` long tensor of ``(head, relation)`` with ``B >= 1``.

    ``num_relations`` is the number of relation ids the caller accepts (``2R`` with inverses).
    """
    if not isinstance(queries, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(queries).__name__}")
    check_shape(name, queries, (None, 2))
    if queries.dtype != torch.long:
        raise TypeError(f"{name} must be a long tensor, got {queries.dtype}")
    if queries.shape[0] == 0:
        raise ValueError(f"{name} must hold at least one query, got an empty batch")
    bad_h = (queries[:, 0] < 0) | (queries[:, 0] >= num_entities)
    if bad_h.any():
        raise ValueError(f"{name}: head id {int(queries[bad_h, 0][0])} outside [0, {num_entities})")
    bad_r = (queries[:, 1] < 0) | (queries[:, 1] >= num_relations)
    if bad_r.any():
        raise ValueError(f"{name}: relation id {int(queries[bad_r, 1][0])} outside [0, {num_relations})")
    return queries


def add_inverse(triples: Tensor, num_relations: int) -> tuple[Tensor, Tensor]:
    """Edges of ``triples`` plus their inverses.

    Returns
    -------
    edge_index : Tensor
        ``[2, 2T]``: ``(h -> t)`` edges first, then ``(t -> h)``.
    edge_type : Tensor
        ``[2T]``: ``r`` for the forward edges, ``r + num_relations`` for the inverses.
    """
    check_shape("triples", triples, (None, 3))
    check_int("num_relations", num_relations, low=1)
    h, r, t = triples.t()
    edge_index = torch.stack([torch.cat([h, t]), torch.cat([t, h])])
    edge_type = torch.cat([r, r + num_relations])
    return edge_index, edge_type


def in_degree(edge_index: Tensor, num_nodes: int) -> Tensor:
    """``[num_nodes]`` float in-degree (number of edges ending at each node)."""
    return torch.bincount(edge_index[1], minlength=num_nodes).to(torch.float32)


def known_tails(
    *triple_sets: Tensor, num_relations: int, inverse: bool = True
) -> dict[tuple[int, int], set[int]]:
    """Index ``(h, r) -> {t}`` over the given triple sets (the filter of the filtered protocol).

    With ``inverse=True`` every triple also registers ``(t, r + num_relations) -> h``, so head
    prediction can be asked as tail prediction with an inverse relation.
    """
    index: dict[tuple[int, int], set[int]] = {}
    for triples in triple_sets:
        for h, r, t in triples.tolist():
            index.setdefault((h, r), set()).add(t)
            if inverse:
                index.setdefault((t, r + num_relations), set()).add(h)
    return index


def positive_mask(queries: Tensor, known: dict[tuple[int, int], set[int]], num_entities: int) -> Tensor:
    """``[B, N]`` bool: the known true tails of each ``(h, r)`` query."""
    mask = torch.zeros(queries.shape[0], num_entities, dtype=torch.bool)
    for i, (h, r) in enumerate(queries.tolist()):
        tails = known.get((h, r))
        if tails:
            mask[i, list(tails)] = True
    return mask


def filtered_ranks(scores: Tensor, targets: Tensor, filter_mask: Tensor | None = None) -> Tensor:
    """Realistic filtered rank of each target (PyKEEN's default rank type).

    Parameters
    ----------
    scores : Tensor
        ``[B, N]`` scores, higher is better; must be finite.
    targets : Tensor
        ``[B]`` long: the true entity of each row.
    filter_mask : Tensor, optional
        ``[B, N]`` bool of known true entities; all of them except the row's target are removed.

    Returns
    -------
    Tensor
        ``[B]`` float ranks in ``[1, N]`` (halves where ties are split).
    """
    if scores.dim() != 2:
        raise ValueError(f"scores must have shape (B, N), got {tuple(scores.shape)}")
    check_shape("targets", targets, (scores.shape[0],))
    if not torch.isfinite(scores).all():
        raise ValueError("scores contains NaN or inf")
    if ((targets < 0) | (targets >= scores.shape[1])).any():
        raise ValueError(f"targets must lie in [0, {scores.shape[1]})")
    rows = torch.arange(scores.shape[0])
    true = scores[rows, targets].unsqueeze(1)
    keep = torch.ones_like(scores, dtype=torch.bool)
    if filter_mask is not None:
        check_shape("filter_mask", filter_mask, tuple(scores.shape))
        keep = ~filter_mask.bool()
    keep[rows, targets] = False
    greater = ((scores > true) & keep).sum(1)
    equal = ((scores == true) & keep).sum(1)
    return 1.0 + greater.to(torch.float64) + 0.5 * equal.to(torch.float64)


def ranking_metrics(ranks: Tensor, ks: tuple[int, ...] = (1, 3, 10)) -> dict[str, float]:
    """``{"mrr": mean 1/rank, "hits@k": mean 1[rank <= k]}`` over a ``[B]`` rank tensor."""
    if ranks.numel() == 0:
        raise ValueError("ranks must not be empty")
    ranks = ranks.to(torch.float64)
    out = {"mrr": float((1.0 / ranks).mean())}
    for k in ks:
        out[f"hits@{k}"] = float((ranks <= k).to(torch.float64).mean())
    return out


def zipf_queries(
    triples: Tensor,
    num_relations: int,
    num_queries: int,
    *,
    pool_fraction: float = 0.1,
    exponent: float = 1.1,
    seed: int = 0,
) -> tuple[Tensor, Tensor]:
    """Tail-prediction queries whose heads follow a Zipf law over a pool of entities.

    The candidates are ``triples`` and their inverses ``(t, r + R, h)``. A random ``pool_fraction``
    of the candidate heads forms the pool; pool entity ``i`` (in random order) is drawn with
    probability proportional to ``(i + 1)^{-exponent}``, then one of its candidate triples uniformly.
    Popular heads repeat and neighbouring queries overlap, as in realistic query batches.

    Returns
    -------
    queries : Tensor
        ``[num_queries, 2]`` ``(head, relation)`` with relations in ``[0, 2R)``.
    targets : Tensor
        ``[num_queries]`` true tails.
    """
    check_shape("triples", triples, (None, 3))
    check_int("num_queries", num_queries, low=1)
    check_float("pool_fraction", pool_fraction, 0.0, 1.0, low_open=True)
    check_float("exponent", exponent, 0.0)
    rng = np.random.default_rng(check_int("seed", seed, low=0))
    h, r, t = triples.t()
    cand = torch.cat([torch.stack([h, r, t], 1), torch.stack([t, r + num_relations, h], 1)]).numpy()
    heads = np.unique(cand[:, 0])
    pool = rng.permutation(heads)[: max(1, int(round(pool_fraction * len(heads))))]
    weights = 1.0 / np.arange(1, len(pool) + 1) ** exponent
    chosen = pool[rng.choice(len(pool), num_queries, p=weights / weights.sum())]
    order = np.argsort(cand[:, 0], kind="stable")
    sorted_heads = cand[order, 0]
    lo = np.searchsorted(sorted_heads, chosen, "left")
    hi = np.searchsorted(sorted_heads, chosen, "right")
    pick = order[lo + (rng.random(num_queries) * (hi - lo)).astype(np.int64)]
    rows = torch.as_tensor(cand[pick], dtype=torch.long)
    return rows[:, :2].contiguous(), rows[:, 2].contiguous()


# ------------------------------------------------------------------------------ PyKEEN's evaluator

#: The PyKEEN rank variant the judged metrics use; :func:`filtered_ranks` computes the same rank.
PYKEEN_RANK_TYPE = "realistic"

_EPS32 = float(torch.finfo(torch.float32).eps)


def pykeen_mrr_tolerance(num_ranks: int) -> float:
    """Largest ``|ours - PyKEEN|`` between :func:`ranking_metrics`' MRR and :class:`PykeenRanking`'s.

    Both compute the same ranks (the realistic rank is a multiple of 1/2 below ``2^23``, exact in
    PyKEEN's float32); only the mean differs: PyKEEN takes ``1 / hmean`` of the float32 ranks (SciPy,
    float32 reciprocals and a pairwise float32 sum, then two reciprocals) where we average float64
    reciprocals. The mean of ``n`` values in ``(0, 1]`` summed pairwise in float32 is off by at most
    ``(ceil(log2 n) + 1) eps32`` relative, each reciprocal adds ``eps32 / 2``: the bound is
    ``(ceil(log2 n) + 4) eps32`` (MRR <= 1, so absolute = relative). The macro-averaged (grouped) path
    works in float64 and stays far inside it.
    """
    n = check_int("num_ranks", num_ranks, low=1)
    return (int(np.ceil(np.log2(n))) + 4) * _EPS32


def _pykeen_evaluation():
    """Import :mod:`pykeen.evaluation` with ``PYSTOW_HOME`` defaulting to a temporary folder.

    Importing PyKEEN creates its data folders through ``pystow``; unless the caller chose
    ``PYSTOW_HOME``, they go to a fresh temporary folder instead of ``~/.data`` (nothing is downloaded).
    """
    import os
    import tempfile

    if "PYSTOW_HOME" not in os.environ:
        os.environ["PYSTOW_HOME"] = tempfile.mkdtemp(prefix="neurips26-pystow-")
    import pykeen.evaluation as evaluation
    from pykeen.evaluation.evaluator import filter_scores_

    return evaluation, filter_scores_


class PykeenRanking:
    """Filtered ranking metrics computed by PyKEEN's :class:`~pykeen.evaluation.RankBasedEvaluator`.

    Our score tensors go through PyKEEN's own evaluation loop (``pykeen.evaluation.evaluator.
    _evaluate_batch``): the true score is kept, every filtered entity is set to NaN with PyKEEN's
    ``filter_scores_``, the true entity's score is restored, and the batch is handed to the evaluator's
    ``process_scores_`` (target ``"tail"``); :meth:`finalize` calls the evaluator's ``finalize`` and
    reads the :data:`PYKEEN_RANK_TYPE` (realistic) inverse harmonic mean rank (MRR) and Hits@k.

    ``macro=False`` (default): :class:`~pykeen.evaluation.RankBasedEvaluator`, the mean over all added
    rows (equal to :func:`ranking_metrics` of :func:`filtered_ranks` within
    :func:`pykeen_mrr_tolerance`). ``macro=True``: PyKEEN's
    :class:`~pykeen.evaluation.MacroRankBasedEvaluator` (a ``RankBasedEvaluator`` subclass) with each
    :meth:`add` call's ``group`` as the row key, so the metric is the mean over groups of each
    group's mean (e.g. the mean over sessions of each session's answer MRR).

    Parameters
    ----------
    ks : tuple of int, default (1, 3, 10)
        Hits@k cut-offs.
    macro : bool, default False
        Average per group first (see above).
    """

    def __init__(self, ks: tuple[int, ...] = (1, 3, 10), *, macro: bool = False) -> None:
        self.ks = tuple(check_int("k", k, low=1) for k in ks)
        self.macro = bool(macro)
        evaluation, self._filter = _pykeen_evaluation()
        from pykeen.metrics.ranking import HitsAtK, InverseHarmonicMeanRank

        cls = evaluation.MacroRankBasedEvaluator if self.macro else evaluation.RankBasedEvaluator
        self.evaluator = cls(
            filtered=True,
            metrics=[InverseHarmonicMeanRank(), *(HitsAtK(k=k) for k in self.ks)],
            add_defaults=False,
        )
        self.count = 0
        self._groups: set[int] = set()

    def add(
        self, scores: Tensor, targets: Tensor, filter_mask: Tensor | None = None, *, group: int | None = None
    ) -> None:
        """Rank the ``targets`` of a ``[B, N]`` score batch (filtered set as in :func:`filtered_ranks`).

        ``group`` (required with ``macro=True``, a non-negative int) keys the rows for macro averaging;
        without ``macro`` the rows are keyed by their running index.
        """
        if scores.dim() != 2:
            raise ValueError(f"scores must have shape (B, N), got {tuple(scores.shape)}")
        check_shape("targets", targets, (scores.shape[0],))
        if not torch.isfinite(scores).all():
            raise ValueError("scores contains NaN or inf")
        if ((targets < 0) | (targets >= scores.shape[1])).any():
            raise ValueError(f"targets must lie in [0, {scores.shape[1]})")
        if self.macro and group is None:
            raise ValueError("macro averaging needs the group of every batch")
        b = scores.shape[0]
        rows = torch.arange(b)
        targets = targets.long()
        true = scores[rows, targets].detach().clone()
        filtered = scores.detach().clone()
        if filter_mask is not None:
            check_shape("filter_mask", filter_mask, tuple(scores.shape))
            filtered = self._filter(scores=filtered, filter_batch=filter_mask.bool().nonzero())
            filtered[rows, targets] = true
        if group is None:
            keys = torch.arange(self.count, self.count + b)
        else:
            keys = torch.full((b,), check_int("group", group, low=0), dtype=torch.long)
            self._groups.add(int(group))
        hrt = torch.stack([keys, torch.zeros_like(keys), targets], 1)
        self.evaluator.process_scores_(hrt_batch=hrt, target="tail", scores=filtered, true_scores=true.unsqueeze(1))
        self.count += b

    def finalize(self) -> dict[str, float]:
        """``{"mrr", "hits@k", "count"}`` from the evaluator's ``finalize`` (clears the evaluator)."""
        if self.count == 0:
            raise ValueError("no ranks were added")
        res = self.evaluator.finalize()
        kind = PYKEEN_RANK_TYPE
        out = {"mrr": float(res.get_metric(f"tail.{kind}.inverse_harmonic_mean_rank"))}
        for k in self.ks:
            out[f"hits@{k}"] = float(res.get_metric(f"tail.{kind}.hits_at_{k}"))
        out["count"] = self.count
        self.count = 0
        self._groups.clear()
        return out


def pykeen_ranking_metrics(
    scores: Tensor, targets: Tensor, filter_mask: Tensor | None = None, ks: tuple[int, ...] = (1, 3, 10)
) -> dict[str, float]:
    """PyKEEN's filtered MRR and Hits@k of one score batch (:class:`PykeenRanking`, one ``add``).

    Equal to ``ranking_metrics(filtered_ranks(scores, targets, filter_mask), ks)`` within
    :func:`pykeen_mrr_tolerance` (MRR; Hits@k exactly: same ranks).
    """
    ranking = PykeenRanking(ks)
    ranking.add(scores, targets, filter_mask)
    return ranking.finalize()

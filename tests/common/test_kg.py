"""Tests of the shared KG substrate: PyKEEN's bundled splits, the community KG, filtered ranking."""

import hashlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.common.kg import (
    PYKEEN_DATASETS,
    add_inverse,
    check_queries,
    check_triples,
    community_ids,
    community_kg,
    filtered_ranks,
    known_tails,
    load_pykeen_dataset,
    positive_mask,
    ranking_metrics,
    split_triples,
)


@pytest.mark.parametrize(
    "name,entities,relations,sizes",
    [
        ("nations", 14, 55, (1592, 199, 201)),
        ("kinships", 104, 25, (8544, 1068, 1074)),
        ("umls", 135, 46, (5216, 652, 661)),
    ],
)
def test_pykeen_files_read_from_the_wheel(name, entities, relations, sizes):
    kg = load_pykeen_dataset(name)
    assert (kg.num_entities, kg.num_relations) == (entities, relations)
    assert (len(kg.train), len(kg.valid), len(kg.test)) == sizes
    assert kg.entity_names == sorted(kg.entity_names) and len(kg.entity_names) == entities
    check_triples("train", kg.all_triples(), entities, relations)


def test_unknown_dataset_raises():
    with pytest.raises(ValueError, match="name must be one of"):
        load_pykeen_dataset("fb15k237")


def test_ids_and_filtered_mrr_equal_pykeen(tmp_path, monkeypatch):
    """Ids match PyKEEN's TriplesFactory and our filtered MRR/Hits equal RankBasedEvaluator's."""
    monkeypatch.setenv("PYSTOW_HOME", str(tmp_path / "pystow"))
    from pykeen.datasets import UMLS
    from pykeen.evaluation import RankBasedEvaluator

    ours = load_pykeen_dataset("umls")
    ds = UMLS()
    assert ds.training.entity_to_id == {e: i for i, e in enumerate(ours.entity_names)}
    assert ds.training.relation_to_id == {r: i for i, r in enumerate(ours.relation_names)}
    assert set(map(tuple, ds.testing.mapped_triples.tolist())) == set(map(tuple, ours.test.tolist()))

    test = ours.test[:200]
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(len(test), ours.num_entities, generator=gen)
    scores = (scores * 2).round() / 2  # many ties: exercises the realistic rank
    known = known_tails(ours.train, ours.valid, ours.test, num_relations=ours.num_relations, inverse=False)
    mask = positive_mask(test[:, :2], known, ours.num_entities)
    ranks = filtered_ranks(scores, test[:, 2], mask)
    mine = ranking_metrics(ranks)
    ev = RankBasedEvaluator(filtered=True)
    # PyKEEN's evaluation loop (pykeen.evaluation.evaluator._evaluate_batch): keep the true score,
    # set every known positive to NaN with its own filter_scores_, restore the true entity's score
    from pykeen.evaluation.evaluator import filter_scores_

    rows = torch.arange(len(test))
    true = scores[rows, test[:, 2]]
    filtered = filter_scores_(scores=scores.clone(), filter_batch=mask.nonzero())
    filtered[rows, test[:, 2]] = true
    ev.process_scores_(hrt_batch=test, target="tail", scores=filtered, true_scores=true.unsqueeze(1))
    res = ev.finalize()
    assert mine["mrr"] == pytest.approx(res.get_metric("tail.realistic.inverse_harmonic_mean_rank"), abs=1e-6)
    for k in (1, 3, 10):
        assert mine[f"hits@{k}"] == pytest.approx(res.get_metric(f"tail.realistic.hits_at_{k}"), abs=1e-6)


def test_filtered_rank_by_hand():
    # entities 0..3; query's true tail is 2; entity 1 is another known tail (filtered)
    scores = torch.tensor([[0.1, 0.9, 0.5, 0.5]])
    mask = torch.tensor([[False, True, True, False]])
    # unfiltered: 0.9 beats, 0.5 ties -> 1 + 1 + 0.5
    assert filtered_ranks(scores, torch.tensor([2])).item() == 2.5
    # filtered: entity 1 removed -> 1 + 0 + 0.5
    assert filtered_ranks(scores, torch.tensor([2]), mask).item() == 1.5
    m = ranking_metrics(torch.tensor([1.0, 2.0, 4.0, 20.0]))
    assert m["mrr"] == pytest.approx((1 + 0.5 + 0.25 + 0.05) / 4)
    assert m["hits@1"] == 0.25 and m["hits@3"] == 0.5 and m["hits@10"] == 0.75


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 30), st.integers(0, 2**16))
def test_rank_bounds_and_filter_monotone(n, seed):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, 4, (5, n), generator=gen).float()
    targets = torch.randint(0, n, (5,), generator=gen)
    mask = torch.rand(5, n, generator=gen) < 0.3
    raw, filt = filtered_ranks(scores, targets), filtered_ranks(scores, targets, mask)
    assert ((raw >= 1) & (raw <= n)).all() and (filt <= raw).all()


def test_filtered_rank_errors():
    with pytest.raises(ValueError, match="NaN"):
        filtered_ranks(torch.tensor([[float("nan"), 0.0]]), torch.tensor([0]))
    with pytest.raises(ValueError, match="targets"):
        filtered_ranks(torch.zeros(1, 3), torch.tensor([3]))


def test_add_inverse_and_known_tails():
    triples = torch.tensor([[0, 1, 2], [2, 0, 3]])
    ei, et = add_inverse(triples, num_relations=2)
    assert ei.tolist() == [[0, 2, 2, 3], [2, 3, 0, 2]] and et.tolist() == [1, 0, 3, 2]
    known = known_tails(triples, num_relations=2)
    assert known[(0, 1)] == {2} and known[(2, 3)] == {0} and known[(3, 2)] == {2}


def test_community_kg_is_seeded_and_community_local():
    a, b = community_kg(600, seed=3), community_kg(600, seed=3)
    assert torch.equal(a.train, b.train) and torch.equal(a.test, b.test)  # same kernel: integer triples, rerun, same shapes and seed
    assert not torch.equal(a.train, community_kg(600, seed=4).train)  # same kernel: n/a, asserts a difference
    t = a.all_triples()
    intra = (a.community[t[:, 0]] == a.community[t[:, 2]]).float().mean()
    assert intra > 0.85
    assert (t[:, 1] >= a.num_relations - 4).any()  # rule relations are populated
    check_triples("t", t, a.num_entities, a.num_relations)


def test_bad_ids_raise():
    with pytest.raises(ValueError, match="relation id 7 outside"):
        check_triples("t", torch.tensor([[0, 7, 1]]), 3, 5)
    with pytest.raises(ValueError, match="head id 9 outside"):
        check_queries(torch.tensor([[9, 0]]), 5, 2)
    with pytest.raises(ValueError, match="relation id 4 outside"):
        check_queries(torch.tensor([[0, 4]]), 5, 4)
    with pytest.raises(ValueError, match="empty batch"):
        check_queries(torch.zeros(0, 2, dtype=torch.long), 5, 2)
    with pytest.raises(ValueError, match="num_entities"):
        community_kg(1)


def test_all_datasets_listed():
    assert PYKEEN_DATASETS == ("nations", "kinships", "umls")


def kg_digest(kg) -> str:
    """A digest of every tensor and scalar of a :class:`KGSplits` (bit-level)."""
    h = hashlib.sha256()
    for t in (kg.train, kg.valid, kg.test, kg.community):
        h.update(str(tuple(t.shape)).encode())
        h.update(t.numpy().tobytes())
    h.update(f"{kg.name}|{kg.num_entities}|{kg.num_relations}".encode())
    return h.hexdigest()[:16]


@pytest.mark.parametrize(
    "kwargs,digest",
    [
        ({"num_entities": 300, "seed": 0}, "d5bdbeaef8331d2a"),
        ({"num_entities": 1000, "community_size": 100, "seed": 3}, "aae51731b5ec41e6"),
        ({"num_entities": 57, "community_size": 10, "num_relations": 5, "num_rules": 0, "seed": 1}, "3a914194c68c2982"),
        (
            {"num_entities": 200, "intra": 0.5, "num_rules": 3, "rule_fraction": 0.5, "valid_fraction": 0.1,
             "test_fraction": 0.2, "seed": 7},
            "0062508d72a03b88",
        ),
    ],
)  # fmt: skip
def test_community_kg_bit_identical_to_before_the_shared_split(kwargs, digest):
    # digests recorded from community_kg before split_triples / community_ids were factored out of it
    assert kg_digest(community_kg(**kwargs)) == digest


def test_split_triples_drops_duplicates_and_self_loops():
    parts = [np.array([[0, 0, 1], [0, 0, 1], [2, 1, 2], [1, 0, 2]]), np.array([[3, 1, 0], [0, 0, 1]])]
    kg = split_triples(
        parts, np.random.default_rng(0), name="x", num_relations=2, community=community_ids(4, 2),
        valid_fraction=0.34, test_fraction=0.34,
    )  # fmt: skip
    rows = {tuple(r) for t in (kg.train, kg.valid, kg.test) for r in t.tolist()}
    assert rows == {(0, 0, 1), (1, 0, 2), (3, 1, 0)}
    assert (len(kg.valid), len(kg.test), len(kg.train)) == (1, 1, 1)
    assert kg.num_entities == 4 and kg.community.tolist() == [0, 0, 1, 1]


def test_community_ids_consecutive_blocks_last_holds_the_rest():
    assert community_ids(7, 3).tolist() == [0, 0, 0, 1, 1, 1, 2]
    assert community_ids(2, 5).tolist() == [0, 0]
    with pytest.raises(ValueError, match="community_size"):
        community_ids(5, 0)

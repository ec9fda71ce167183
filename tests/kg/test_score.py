"""Tests of SCORE: variable indexing, the log-odds adjustment, executor exactness, placement, metrics."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.nn.kge import ComplEx

from neurips26.kg.score import (
    SCORE,
    STRUCTURES,
    CosineReranker,
    FuzzyAdjacency,
    QTOExecutor,
    complex_cosine,
    complex_tail_scores,
    graded_ndcg,
    pairwise_accuracy,
    query_variables,
    score_adjust,
)


@pytest.mark.parametrize(
    "name,count", [("1p", 1), ("2p", 2), ("3p", 3), ("2i", 1), ("3i", 1), ("pi", 2), ("ip", 2)]
)
def test_variable_counts(name, count):
    vs = query_variables(STRUCTURES[name])
    assert len(vs) == count and [v.index for v in vs] == list(range(count))
    assert [v.is_target for v in vs] == [False] * (count - 1) + [True]
    if name == "ip":
        assert [v.kind for v in vs] == ["intersection", "projection"]
    if name == "pi":
        assert [v.kind for v in vs] == ["projection", "intersection"]


@pytest.mark.parametrize(
    "bad", [("e",), ("e", ("n",)), ("x", ("r",)), (("e", ("r",)),), "2p", (("e", ("r",)), ("u",))]
)
def test_structure_outside_grammar_raises(bad):
    with pytest.raises(ValueError, match="outside the grammar"):
        query_variables(bad)


def _toy():
    """6 entities: 0 -r0-> {1, 2}; 1 -r1-> 3; 2 -r1-> 4; 5 isolated."""
    edges = {0: torch.tensor([[0, 0], [1, 2]]), 1: torch.tensor([[1, 2], [3, 4]])}
    return FuzzyAdjacency.from_edges(edges, 6, 2)


def test_intermediate_variable_index_errors():
    ex = QTOExecutor(_toy())
    with pytest.raises(ValueError, match=r"valid positions are 0..0"):
        ex(STRUCTURES["1p"], torch.tensor([0]), torch.tensor([0]), adjust={1: lambda v: v})
    with pytest.raises(ValueError, match="needs 1 anchors and 2 relations"):
        ex(STRUCTURES["2p"], torch.tensor([0]), torch.tensor([0]))
    with pytest.raises(ValueError, match="relation id 5"):
        ex(STRUCTURES["1p"], torch.tensor([0]), torch.tensor([5]))


def _symbolic(structure, anchors, relations, edges, n):
    """Brute-force answer sets by set semantics."""
    a, r = iter(anchors), iter(relations)

    def proj(s, rel):
        e = edges.get(rel, torch.zeros(2, 0, dtype=torch.long))
        return {int(t) for h, t in e.t().tolist() for _ in [0] if h in s}

    def ev(node):
        if node[0] == "e":
            s = {next(a)}
            for _ in node[1]:
                s = proj(s, next(r))
            return s
        if len(node) == 2 and all(x == "r" for x in node[1]) and node[0][0] != "e":
            s = ev(node[0])
            for _ in node[1]:
                s = proj(s, next(r))
            return s
        sets = [ev(b) for b in node]
        return set.intersection(*sets)

    return ev(structure)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(sorted(STRUCTURES)), st.integers(0, 10_000))
def test_executor_equals_symbolic_answers(name, seed):
    gen = torch.Generator().manual_seed(seed)
    n, nr = 8, 3
    edges = {r: torch.randint(0, n, (2, 10), generator=gen) for r in range(nr)}
    structure = STRUCTURES[name]
    n_anchor = str(structure).count("'e'")
    n_rel = str(structure).count("'r'")
    anchors = torch.randint(0, n, (n_anchor,), generator=gen)
    rels = torch.randint(0, nr, (n_rel,), generator=gen)
    out = QTOExecutor(FuzzyAdjacency.from_edges(edges, n, nr))(structure, anchors, rels)
    expected = _symbolic(structure, anchors.tolist(), rels.tolist(), edges, n)
    assert set(out.nonzero().flatten().tolist()) == expected


def test_score_adjust_identity_and_bounds():
    s = torch.tensor([0.0, 0.2, 0.5, 1.0])
    sim = torch.tensor([[0.3, -0.2, 1.0, -1.0]])
    ident = s.clamp(1e-6, 1 - 1e-6)
    assert torch.equal(score_adjust(s, torch.zeros(0, 4), torch.zeros(0)), ident)
    assert torch.equal(score_adjust(s, sim, torch.tensor([1]), w_p=0.0, w_n=0.0), ident)
    out = score_adjust(s, sim, torch.tensor([1]))
    assert torch.isfinite(out).all() and (out > 0).all() and (out < 1).all()


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.1, 3.0), st.floats(0.1, 3.0))
def test_score_adjust_monotone_in_base_score(seed, wp, wn):
    gen = torch.Generator().manual_seed(seed)
    sim = torch.rand(3, 1, generator=gen).mul(2).sub(1).expand(3, 5)  # equal delta for all 5 entities
    s = torch.sort(torch.rand(5, generator=gen)).values
    out = score_adjust(s, sim, torch.tensor([1, 0, 1]), w_p=wp, w_n=wn)
    assert (out[1:] >= out[:-1]).all()  # order of equal-delta entities is kept


def test_positive_raises_own_score_and_label_flip():
    emb = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    sc = SCORE(emb, w_p=1.0, w_n=1.0)
    s = torch.full((6,), 0.3)
    up = sc.adjust(s, torch.tensor([2]), torch.tensor([1]))
    down = sc.adjust(s, torch.tensor([2]), torch.tensor([0]))
    assert up[2] > 0.3 and down[2] < 0.3
    l0 = torch.logit(s)
    keep = torch.tensor([0, 1, 3, 4, 5])  # entity 2 (sim 1) saturates the float32 sigmoid
    assert torch.allclose(
        (torch.logit(up) - l0)[keep], -(torch.logit(down) - l0)[keep], atol=1e-3
    )  # sign flips


def test_complex_cosine():
    e = torch.randn(5, 3, dtype=torch.cfloat, generator=torch.Generator().manual_seed(1))
    sim = complex_cosine(e, torch.arange(5))
    assert torch.allclose(sim.diagonal(), torch.ones(5)) and (sim.abs() <= 1).all()
    real = torch.randn(5, 3, generator=torch.Generator().manual_seed(2))
    as_complex = torch.complex(real, torch.zeros_like(real))
    assert torch.allclose(
        complex_cosine(as_complex, torch.arange(5)),
        torch.nn.functional.cosine_similarity(real[:, None], real[None], dim=-1),
        atol=1e-6,
    )


def test_intermediate_preference_moves_induced_answer():
    # 2p from 0: r0 -> {1, 2}; r1: 1 -> 3, 2 -> 4. Prefer intermediate 2 -> answer 4 goes first.
    ex = QTOExecutor(_toy())
    emb = torch.eye(6)  # entity 2 similar only to itself
    sc = SCORE(emb, w_p=2.0, w_n=0.0)
    anchors, rels = torch.tensor([0]), torch.tensor([0, 1])
    pref = (torch.tensor([2]), torch.tensor([1]))
    base = ex(STRUCTURES["2p"], anchors, rels)
    assert base[3] == base[4]
    inter = sc.answer(ex, STRUCTURES["2p"], anchors, rels, {0: pref})
    assert int(inter.argmax()) == 4 and inter[4] > inter[3]
    target = sc.answer(ex, STRUCTURES["2p"], anchors, rels, {1: pref})
    assert target[4] == target[3]  # the same preference at the target does not separate the answers
    # target placement equals post-hoc adjustment of the final vector, bitwise
    assert torch.equal(target, sc.adjust(base, *pref))


def test_metrics_by_hand():
    rel = torch.tensor([2.0, 1.0, 0.0, 1.0])
    assert graded_ndcg(torch.tensor([4.0, 3.0, 1.0, 2.0]), rel) == pytest.approx(1.0)
    assert graded_ndcg(torch.tensor([1.0, 2.0, 4.0, 3.0]), rel) < 1.0
    s = torch.tensor([0.1, 0.2, 0.3, 0.4])
    assert pairwise_accuracy(s, torch.tensor([0, 1]), torch.tensor([2, 3])) == 0.0
    assert pairwise_accuracy(-s, torch.tensor([0, 1]), torch.tensor([2, 3])) == 1.0


def test_cosine_reranker_alpha_one_is_identity():
    s = torch.rand(5)
    assert torch.equal(CosineReranker(alpha=1.0)(s, torch.rand(2, 5), torch.tensor([1, 0])), s)


def test_complex_tail_scores_equal_pyg_complex():
    torch.manual_seed(0)
    model = ComplEx(num_nodes=7, num_relations=3, hidden_channels=4)
    heads = torch.tensor([0, 3, 6])
    full = complex_tail_scores(model, heads, 2)
    for i, h in enumerate(heads.tolist()):
        ref = model(torch.full((7,), h), torch.full((7,), 2), torch.arange(7))
        assert torch.allclose(full[i], ref, atol=1e-5)


def test_adjacency_from_link_predictor_keeps_observed_and_is_partition_free():
    torch.manual_seed(0)
    model = ComplEx(num_nodes=9, num_relations=2, hidden_channels=4)
    edges = {0: torch.tensor([[0, 1], [2, 3]]), 1: torch.tensor([[4], [5]])}
    with torch.no_grad():
        a = FuzzyAdjacency.from_link_predictor(
            lambda h, r: complex_tail_scores(model, h, r), edges, 9, 2, threshold=0.01
        )
        b = FuzzyAdjacency.from_link_predictor(
            lambda h, r: complex_tail_scores(model, h, r), edges, 9, 2, threshold=0.01, fraction=3
        )
    for r in range(2):
        dense = torch.zeros(9, 9)
        dense[a.rows[r], a.cols[r]] = a.values[r]
        dense_b = torch.zeros(9, 9)
        dense_b[b.rows[r], b.cols[r]] = b.values[r]
        assert torch.allclose(dense, dense_b, atol=1e-6)  # blocks change matmul shapes, so float rounding
        assert (dense[edges[r][0], edges[r][1]] == 1).all() and dense.max() <= 1
        assert ((dense == 0) | (dense >= 0.01)).all()


def test_bad_input():
    sc = SCORE(torch.randn(4, 2))
    with pytest.raises(ValueError, match=r"preference ids must lie in \[0, 4\)"):
        sc.adjust(torch.rand(4), torch.tensor([4]), torch.tensor([1]))
    with pytest.raises(ValueError, match="same length"):
        sc.adjust(torch.rand(4), torch.tensor([0, 1]), torch.tensor([1]))
    with pytest.raises(ValueError, match=r"labels must be in \{0, 1\}"):
        sc.adjust(torch.rand(4), torch.tensor([0]), torch.tensor([2]))
    with pytest.raises(ValueError, match="w_p"):
        SCORE(torch.randn(4, 2), w_p=-1.0)
    with pytest.raises(ValueError, match="w_n"):
        score_adjust(torch.rand(4), torch.zeros(1, 4), torch.tensor([1]), w_n=-0.5)

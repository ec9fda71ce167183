"""Tests for the shared graph substrate (CSBM, homophily, splits, linear probe, motifs, karate club)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.utils import is_undirected

from neurips26.common.graphs import (
    check_adjacency,
    check_edge_index,
    class_mixing_matrix,
    csbm,
    edge_homophily,
    karate_club,
    linear_probe,
    perturb_edges,
    planted_motif_dataset,
    random_splits,
)


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny graphs: one intra-op thread is faster and avoids spin-waiting on a shared CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("h", [0.05, 0.2, 0.5, 0.8, 0.95])
def test_csbm_homophily_within_tolerance(h):
    data = csbm(2000, 5, h, 16, 1.0, 10.0, seed=3)
    assert abs(edge_homophily(data.edge_index, data.y) - h) <= 0.05


@settings(max_examples=10, deadline=None)
@given(h=st.floats(0.0, 1.0), seed=st.integers(0, 1000))
def test_csbm_homophily_property(h, seed):
    data = csbm(600, 3, h, 4, 1.0, 10.0, seed=seed)
    assert abs(edge_homophily(data.edge_index, data.y) - h) <= 0.06


def test_csbm_structure_balance_and_reproducibility():
    a = csbm(1000, 5, 0.3, 8, 2.0, 10.0, seed=7)
    b = csbm(1000, 5, 0.3, 8, 2.0, 10.0, seed=7)
    c = csbm(1000, 5, 0.3, 8, 2.0, 10.0, seed=8)
    assert torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index) and torch.equal(a.y, b.y)  # same kernel: rerun, same shapes and seed
    assert not torch.equal(a.edge_index, c.edge_index)  # same kernel: n/a, asserts a difference
    assert torch.bincount(a.y).tolist() == [200] * 5
    assert is_undirected(a.edge_index, num_nodes=1000)
    assert (a.edge_index[0] != a.edge_index[1]).all()
    assert abs(a.edge_index.size(1) / 1000 - 10.0) < 0.5
    assert a.x.shape == (1000, 8) and a.x.dtype == torch.float32
    masks = a.train_mask.int() + a.val_mask.int() + a.test_mask.int()
    assert (masks == 1).all() and abs(a.train_mask.float().mean() - 0.6) < 0.01


def test_csbm_heterophilic_structure_is_informative():
    # cyclic mixing: class c's cross-class neighbours are classes c+1 and c-1 (undirected), never c+2
    data = csbm(2000, 5, 0.0, 4, 1.0, 10.0, seed=1)
    p = class_mixing_matrix(data.edge_index, data.y, 5)
    for c in range(5):
        assert p[c, c] == 0
        assert p[c, (c + 1) % 5] > 0.4 and p[c, (c - 1) % 5] > 0.4
        assert p[c, (c + 2) % 5] == 0
    uni = csbm(2000, 5, 0.0, 4, 1.0, 10.0, seed=1, mixing="uniform")
    pu = class_mixing_matrix(uni.edge_index, uni.y, 5)
    off = pu[~torch.eye(5, dtype=torch.bool)]
    assert (off - 0.25).abs().max() < 0.05


def test_csbm_features_follow_mu():
    zero = csbm(3000, 3, 0.5, 20, 0.0, 5.0, seed=0)
    strong = csbm(3000, 3, 0.5, 20, 8.0, 5.0, seed=0)
    assert linear_probe(zero.x, zero.y, num_splits=2)["mean"] < 0.45
    assert linear_probe(strong.x, strong.y, num_splits=2)["mean"] > 0.98


def test_edge_homophily_hand_case():
    y = torch.tensor([0, 0, 1, 1])
    ei = torch.tensor([[0, 1, 0, 2], [1, 0, 2, 3]])
    assert edge_homophily(ei, y) == pytest.approx(0.75)


@pytest.mark.parametrize(
    ("edge_index", "match"),
    [
        (torch.tensor([[0, 4], [1, 0]]), "num_nodes"),
        (torch.tensor([[0, -1], [1, 0]]), "negative"),
        (torch.tensor([0, 1, 2]), r"\[2, E\]"),
    ],
)
def test_bad_edge_index(edge_index, match):
    with pytest.raises(ValueError, match=match):
        check_edge_index(edge_index, 4)


def test_check_adjacency_accepts_coo_and_sparse_and_returns_them_unchanged():
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    assert check_adjacency(edge_index, 3) is edge_index
    sparse = torch.sparse_coo_tensor(edge_index, torch.ones(3), (3, 3))
    assert check_adjacency(sparse, 3) is sparse


def test_check_adjacency_errors():
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    with pytest.raises(ValueError, match=r"sparse adjacency must be \[N, N\] with N=4"):
        check_adjacency(torch.sparse_coo_tensor(edge_index, torch.ones(3), (3, 3)), 4)
    with pytest.raises(ValueError, match="edge_index is a meta tensor"):
        check_adjacency(torch.empty(2, 3, dtype=torch.long, device="meta"), 3)
    with pytest.raises(ValueError, match="adj contains node id 2 >= num_nodes=2"):
        check_adjacency(edge_index, 2, name="adj")
    with pytest.raises(TypeError, match="int64/int32"):
        check_adjacency(edge_index.float(), 3)


def test_bad_arguments():
    with pytest.raises(TypeError, match="edge_index"):
        check_edge_index(torch.zeros(2, 3), 4)
    with pytest.raises(ValueError, match="homophily"):
        csbm(100, 3, 1.5)
    with pytest.raises(ValueError, match="num_classes"):
        csbm(100, 1)
    with pytest.raises(ValueError, match="mixing"):
        csbm(100, 3, 0.5, mixing=torch.ones(3, 3))
    with pytest.raises(ValueError, match="mixing"):
        csbm(100, 3, 0.5, mixing="nope")
    with pytest.raises(ValueError, match="without edges"):
        edge_homophily(torch.zeros(2, 0, dtype=torch.long), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="embeddings"):
        linear_probe(torch.full((4, 2), float("nan")), torch.tensor([0, 1, 0, 1]))
    with pytest.raises(ValueError, match="y must"):
        linear_probe(torch.zeros(4, 2), torch.tensor([0, 1]))


def test_random_splits_stratified_disjoint_and_reproducible():
    y = torch.arange(100) % 4
    a = random_splits(y, 3, 0.5, 0.25, seed=1)
    b = random_splits(y, 3, 0.5, 0.25, seed=1)
    assert len(a) == 3
    for (tr, va, te), (tr2, va2, te2) in zip(a, b):
        assert torch.equal(tr, tr2) and torch.equal(va, va2) and torch.equal(te, te2)  # same kernel: integer indices, rerun, same shapes and seed
        assert len(set(tr.tolist()) | set(va.tolist()) | set(te.tolist())) == 100
        assert len(tr) + len(va) + len(te) == 100
        assert len(set(torch.bincount(y[tr], minlength=4).tolist())) == 1
    assert not torch.equal(a[0][0], a[1][0])  # same kernel: n/a, asserts a difference


def test_linear_probe_separable_gives_one():
    y = torch.arange(200) % 4
    emb = torch.nn.functional.one_hot(y, 4).float() * 5 + 0.01 * torch.randn(200, 4)
    out = linear_probe(emb, y, num_splits=3)
    assert out["mean"] == 1.0 and out["accs"] == [1.0, 1.0, 1.0]


def test_linear_probe_selects_on_validation_not_test():
    # Embedding dim 0 predicts the label on train/val; on test only the label is flipped. If the
    # test set were used for model selection nothing would change (all C fail); the probe must
    # pick C from val and report the (wrong) test accuracy honestly: 0.
    y = torch.arange(60) % 2
    emb = torch.nn.functional.one_hot(y, 2).float()
    tr, va, te = torch.arange(0, 30), torch.arange(30, 45), torch.arange(45, 60)
    y_obs = y.clone()
    y_obs[te] = 1 - y_obs[te]
    out = linear_probe(emb, y_obs, [(tr, va, te)])
    assert out["accs"] == [0.0]
    assert out["chosen_c"][0] == 0.01  # first of the grid achieving perfect validation accuracy


def test_karate_club():
    data = karate_club()
    assert data.num_nodes == 34 and data.edge_index.size(1) == 156
    assert is_undirected(data.edge_index)
    assert torch.bincount(data.y).tolist() == [17, 17]
    assert data.train_mask.sum() == 8 and not (data.train_mask & data.test_mask).any()


def test_planted_motif_dataset():
    ds = planted_motif_dataset(12, ("house", "cycle", "grid"), base_nodes=10, seed=0)
    assert [int(g.y) for g in ds] == [0, 1, 2] * 4
    sizes = {0: 5, 1: 6, 2: 9}
    for g in ds:
        assert g.num_nodes == 10 + sizes[int(g.y)]
        assert int(g.motif_mask.sum()) == sizes[int(g.y)]
        assert is_undirected(g.edge_index)
        # base tree (9) + motif edges + 1 bridge
        motif_edges = {0: 6, 1: 6, 2: 12}[int(g.y)]
        assert g.edge_index.size(1) == 2 * (9 + motif_edges + 1)
        assert g.x.shape == (g.num_nodes, 11)
    again = planted_motif_dataset(12, ("house", "cycle", "grid"), base_nodes=10, seed=0)
    assert all(torch.equal(a.edge_index, b.edge_index) for a, b in zip(ds, again))  # same kernel: integer edges, rerun, same shapes and seed
    with pytest.raises(ValueError, match="motifs"):
        planted_motif_dataset(4, ("triangle",))


def test_perturb_edges():
    data = csbm(500, 3, 0.9, 4, 1.0, 10.0, seed=0)
    m = data.edge_index.size(1) // 2
    removed = perturb_edges(data.edge_index, 500, remove_ratio=0.2, seed=0)
    assert removed.size(1) // 2 == m - round(0.2 * m)
    added = perturb_edges(data.edge_index, 500, add_ratio=0.1, seed=0)
    assert is_undirected(added) and m < added.size(1) // 2 <= m + round(0.1 * m)
    assert torch.equal(perturb_edges(data.edge_index, 500, 0.0, 0.0), data.edge_index)  # same kernel: integer edges, zero ratios return them unchanged


def test_check_edge_index_rejects_meta_tensors_by_name():
    import pytest
    import torch

    from neurips26.common.graphs import check_edge_index

    with pytest.raises(ValueError, match="edge_index must hold data"):
        check_edge_index(torch.zeros(2, 3, dtype=torch.long, device="meta"), 4)

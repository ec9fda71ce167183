"""Tests for GCN-MLP and its baselines (GRACE, BGRL, DGI)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.nn.models import DeepGraphInfomax
from torch_geometric.utils import to_torch_coo_tensor, to_torch_csr_tensor

from neurips26.common.graphs import csbm
from neurips26.graph.gcn_mlp import (
    BGRL,
    GCNMLP,
    GRACE,
    GCNMLPConfig,
    cca_loss,
    dgi,
    embed_nodes,
    standardize,
    step_memory_bytes,
    structural_features,
    train_unsupervised,
    view_noise_correlation,
)


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny graphs: one intra-op thread is faster and avoids spin-waiting on a shared CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def toy():
    return csbm(120, 3, 0.3, 8, 1.5, 6.0, seed=0)


def _small(**kw):
    return GCNMLP(8, hidden_channels=16, out_channels=6, **kw)


def _permute(data, perm):
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel())
    return data.x[perm], inv[data.edge_index]


def test_shapes(toy):
    torch.manual_seed(0)
    model = _small()
    zg, zm = model(toy.x, toy.edge_index)
    assert zg.shape == zm.shape == (120, 6)
    assert model.embed(toy.x, toy.edge_index).shape == (120, 12)
    assert _small(variant="gcn").embed(toy.x, toy.edge_index).shape == (120, 6)
    assert model.embed(toy.x, toy.edge_index, view="mlp").shape == (120, 6)
    # behaviour: the MLP view of a node reads its own features only; the GCN view reads the graph
    model.eval()
    zg, zm = model(toy.x, toy.edge_index)
    none = torch.zeros(2, 0, dtype=torch.long)
    zg0, zm_alone = model(toy.x[:10], none)
    # a 10-row batch runs other GEMM shapes: bound: (F + 2 hidden) * eps32 * max|z| (F = 8, hidden = 16)
    bound = (8 + 2 * 16) * torch.finfo(torch.float32).eps * float(zm.abs().max())
    torch.testing.assert_close(zm_alone, zm[:10], rtol=0.0, atol=bound)
    assert (zg0 - zg[:10]).abs().max() > 1e-3  # dropping the edges changes the GCN view
    torch.testing.assert_close(model.embed(toy.x, toy.edge_index), torch.cat([zg, zm], 1))


def test_deterministic_in_eval(toy):
    model = _small().eval()
    a = model(toy.x, toy.edge_index)
    b = model(toy.x, toy.edge_index)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])  # same kernel: rerun, same shapes and seed


@pytest.mark.parametrize(
    "kw", [{}, {"propagation_k": 2, "variant": "gcn"}, {"gcn_input": "both"}, {"loss": "bootstrap"}]
)
def test_permutation_equivariance(toy, kw):
    torch.manual_seed(1)
    model = _small(**kw).eval()
    perm = torch.randperm(120)
    zg, zm = model(toy.x, toy.edge_index)
    xp, eip = _permute(toy, perm)
    zg_p, zm_p = model(xp, eip)
    if kw.get("gcn_input") != "both":  # SVD features are equivariant only up to sign/rotation
        assert torch.allclose(zg_p, zg[perm], atol=1e-5)
    assert torch.allclose(zm_p, zm[perm], atol=1e-5)
    if not kw:
        assert torch.allclose(model.loss(zg_p, zm_p), model.loss(zg, zm), atol=1e-5)


def test_baselines_permutation_equivariant(toy):
    torch.manual_seed(0)
    perm = torch.randperm(120)
    xp, eip = _permute(toy, perm)
    for model in (GRACE(8, 16, 6), BGRL(8, 16, 6)):
        z = embed_nodes(model, toy.x, toy.edge_index)
        assert torch.allclose(embed_nodes(model, xp, eip), z[perm], atol=1e-5)
    d = dgi(8, 16, 6)
    z = embed_nodes(d, toy.x, toy.edge_index)
    assert torch.allclose(embed_nodes(d, xp, eip), z[perm], atol=1e-5)


@pytest.mark.parametrize("convert", [to_torch_coo_tensor, to_torch_csr_tensor])
def test_sparse_adjacency_agrees_with_edge_index(toy, convert):
    torch.manual_seed(0)
    model = _small(propagation_k=2).eval()
    adj = convert(toy.edge_index, size=120)
    zg, zm = model(toy.x, toy.edge_index)
    zg_s, zm_s = model(toy.x, adj)
    assert torch.allclose(zg, zg_s, atol=1e-5) and torch.equal(zm, zm_s)  # same kernel: MLP view


def test_mlp_view_ignores_structure_and_isolated_nodes(toy):
    model = _small().eval()
    _, zm = model(toy.x, toy.edge_index)
    other = torch.tensor([[0, 1], [1, 0]])
    zg2, zm2 = model(toy.x, other)  # almost every node isolated
    assert torch.equal(zm, zm2)  # same kernel: the MLP view reads x only
    assert torch.isfinite(zg2).all()


def test_cca_loss_hand_cases():
    torch.manual_seed(0)
    # whitened, identical views: invariance 0 and decorrelation 0 -> loss 0
    n, d = 400, 4
    q, _ = torch.linalg.qr(torch.randn(n, d))
    z = standardize(q * n**0.5)
    z = z @ torch.linalg.inv(torch.linalg.cholesky(z.t() @ z / n)).t()
    assert torch.allclose(cca_loss(z, z, 1.0, standardized=True), torch.tensor(0.0), atol=1e-4)
    # hand case: invariance only
    a = torch.tensor([[1.0, -1.0], [-1.0, 1.0]])
    b = torch.tensor([[-1.0, 1.0], [1.0, -1.0]])
    # (1/2) * ||a - b||^2 = (1/2) * 16 = 8; decorrelation of each: [[1,-1],[-1,1]] - I -> 2 per view
    assert cca_loss(a, b, lambd=0.0, standardized=True).item() == pytest.approx(8.0)
    assert cca_loss(a, b, lambd=1.0, standardized=True).item() == pytest.approx(12.0)


@settings(max_examples=15, deadline=None)
@given(scale=st.floats(0.1, 10.0), shift=st.floats(-5.0, 5.0))
def test_cca_loss_invariant_to_affine_rescaling(scale, shift):
    g = torch.Generator().manual_seed(0)
    zg, zm = torch.randn(50, 3, generator=g), torch.randn(50, 3, generator=g)
    assert torch.allclose(cca_loss(zg * scale + shift, zm), cca_loss(zg, zm), atol=1e-4)


def test_loss_decreases_and_no_collapse(toy):
    torch.manual_seed(0)
    model = _small()
    out = train_unsupervised(model, toy, epochs=20, lr=1e-2, patience=100)
    assert out["epochs"] == 20 and out["losses"][-1] < out["losses"][0]
    assert out["seconds_per_epoch"] > 0 and out["memory_bytes"] > 0
    # collapse guard metric: per-dimension std of the embedding
    std = model.embed(toy.x, toy.edge_index).std(0)
    assert std.min() > 1e-3
    cosine = _small(loss="cosine")
    train_unsupervised(cosine, toy, epochs=20, lr=1e-2, patience=100)
    assert torch.isfinite(cosine.embed(toy.x, toy.edge_index).std(0)).all()  # computed (collapse documented)


@pytest.mark.parametrize("maker", [lambda: GRACE(8, 16, 6), lambda: BGRL(8, 16, 6), lambda: dgi(8, 16, 6)])
def test_baselines_train(toy, maker):
    torch.manual_seed(0)
    model = maker()
    out = train_unsupervised(model, toy, epochs=5, lr=1e-2)
    assert all(map(lambda v: v == v, out["losses"]))
    assert embed_nodes(model, toy.x, toy.edge_index).shape == (120, 6)


def test_dgi_is_pyg_and_bgrl_target_ema(toy):
    assert isinstance(dgi(8, 16, 6), DeepGraphInfomax)
    torch.manual_seed(0)
    model = BGRL(8, 16, 6, momentum=0.5)
    before = [p.clone() for p in model.target.parameters()]
    train_unsupervised(model, toy, epochs=1, lr=1e-1)
    for pt, po, pb in zip(model.target.parameters(), model.encoder.parameters(), before):
        assert torch.allclose(pt, 0.5 * pb + 0.5 * po, atol=1e-6)


def test_memory_accounting_ranks_grace_above_gcn_mlp(toy):
    assert step_memory_bytes(GRACE(8, 16, 6), toy) > step_memory_bytes(_small(), toy)
    assert step_memory_bytes(_small(), toy) == step_memory_bytes(_small(), toy)


def test_structural_features_and_noise_diagnostic(toy):
    s1 = structural_features(toy.edge_index, 120, 8)
    s2 = structural_features(toy.edge_index, 120, 8)
    assert s1.shape == (120, 8) and torch.equal(s1, s2)  # same kernel: rerun, same shapes and seed
    tiny = structural_features(torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]), 5, 16)
    assert tiny.shape == (5, 16) and (tiny[:, 5:] == 0).all()
    model = _small(gcn_input="structural")
    assert model(toy.x, toy.edge_index)[0].shape == (120, 6)
    x_clean = toy.class_means[toy.y]
    diag = view_noise_correlation(_small(), toy.x, x_clean, toy.edge_index)
    assert 0.0 <= diag["views"] <= 1.0
    # aggregation over ~6 neighbours (+ self) decorrelates the noise from the raw noise: corr ~ 1/sqrt(7)
    assert diag["aggregated_vs_raw_input"] < 0.6


def test_bad_input(toy):
    model = _small()
    with pytest.raises(ValueError, match="num_nodes"):
        model(toy.x, torch.tensor([[0, 500], [1, 0]]))
    with pytest.raises(ValueError, match="negative"):
        model(toy.x, torch.tensor([[0, -1], [1, 0]]))
    with pytest.raises(ValueError, match="in_channels=8"):
        model(torch.randn(120, 5), toy.edge_index)
    with pytest.raises(ValueError, match="loss"):
        _small(loss="infonce")
    with pytest.raises(ValueError, match="variant"):
        _small(variant="both")
    with pytest.raises(ValueError, match="gcn_input"):
        _small(gcn_input="pe")
    with pytest.raises(ValueError, match="config"):
        GCNMLP(8, config=GCNMLPConfig(in_channels=8))
    with pytest.raises(ValueError, match="view"):
        model.embed(toy.x, toy.edge_index, view="all")
    with pytest.raises(TypeError, match="floating"):
        model(toy.x.long(), toy.edge_index)

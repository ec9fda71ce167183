"""Behaviour tests for neurips26.graph.invgnn_wm (InvGNN-WM, attacks, backdoor baseline)."""

from __future__ import annotations

import math

import networkx as nx
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom
from torch_geometric.data import Data

from neurips26.common.graphs import csbm, planted_motif_dataset
from neurips26.graph.invgnn_wm import (
    BackdoorWatermark,
    CarrierSet,
    GaussianFeatureSampler,
    InvariantHead,
    InvGNNWatermark,
    RowFeatureSampler,
    Verification,
    WatermarkKey,
    accuracy,
    binomial_threshold,
    distill,
    fake_quantize,
    finetune,
    fit,
    graph_query,
    make_gnn,
    node_query,
    normalized_algebraic_connectivity,
    prune_global,
    weight_sparsity,
)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # tiny graphs: thread start-up dominates, and oversubscribed cores make it much worse
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _ei(g: nx.Graph) -> torch.Tensor:
    edges = list(g.edges())
    ei = torch.tensor(edges, dtype=torch.long).t()
    return torch.cat([ei, ei.flip(0)], 1)


# ---------------------------------------------------------------------------------------- invariant
@pytest.mark.parametrize("n", [2, 3, 5, 9])
@pytest.mark.parametrize("norm", ["sym", "rw", "combinatorial"])
def test_complete_graph_is_one(n, norm):
    assert normalized_algebraic_connectivity(_ei(nx.complete_graph(n)), n, norm) == pytest.approx(
        1.0, abs=1e-12
    )


def test_disconnected_is_exactly_zero():
    g = nx.disjoint_union(nx.complete_graph(4), nx.cycle_graph(5))
    assert normalized_algebraic_connectivity(_ei(g), 9) == 0.0
    # isolated node (Chung convention: zero row) -> disconnected
    assert normalized_algebraic_connectivity(_ei(nx.complete_graph(4)), 5) == 0.0
    assert normalized_algebraic_connectivity(torch.zeros(2, 0, dtype=torch.long), 3) == 0.0


@pytest.mark.parametrize("n", [3, 4, 7, 12, 30])
def test_ring_closed_form(n):
    expected = (1 - math.cos(2 * math.pi / n)) * (n - 1) / n
    assert normalized_algebraic_connectivity(_ei(nx.cycle_graph(n)), n) == pytest.approx(expected, abs=1e-12)


def test_path_graph_hand_value():
    # P_3: L_sym eigenvalues are {0, 1, 2}; a = 1 * 2/3.
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    assert normalized_algebraic_connectivity(ei, 3) == pytest.approx(2 / 3, abs=1e-12)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(3, 14), p=st.floats(0.25, 0.9), seed=st.integers(0, 10_000))
def test_matches_networkx_and_is_permutation_invariant(n, p, seed):
    g = nx.gnp_random_graph(n, p, seed=seed)
    if not nx.is_connected(g) or g.number_of_edges() == 0:
        return
    ei = _ei(g)
    a = normalized_algebraic_connectivity(ei, n, "sym")
    ref = nx.algebraic_connectivity(g, normalized=True, method="lanczos", tol=1e-12)
    assert a == pytest.approx(ref * (n - 1) / n, abs=1e-6)
    comb = nx.algebraic_connectivity(g, normalized=False, method="lanczos", tol=1e-12)
    assert normalized_algebraic_connectivity(ei, n, "combinatorial") == pytest.approx(comb / n, abs=1e-6)
    assert normalized_algebraic_connectivity(ei, n, "rw") == pytest.approx(a, abs=1e-9)
    perm = torch.from_numpy(__import__("numpy").random.default_rng(seed).permutation(n))
    assert normalized_algebraic_connectivity(perm[ei], n) == pytest.approx(a, abs=1e-10)
    # duplicate edges, one direction only, and self-loops do not change the value
    noisy = torch.cat([ei, ei[:, :3], torch.tensor([[0], [0]])], 1)
    assert normalized_algebraic_connectivity(noisy, n) == pytest.approx(a, abs=1e-12)
    one_way = ei[:, ei[0] < ei[1]]
    assert normalized_algebraic_connectivity(one_way, n) == pytest.approx(a, abs=1e-12)


def test_invariant_bad_input():
    ei = _ei(nx.path_graph(3))
    with pytest.raises(ValueError, match="at least 2 nodes"):
        normalized_algebraic_connectivity(torch.zeros(2, 0, dtype=torch.long), 1)
    with pytest.raises(ValueError, match="normalization"):
        normalized_algebraic_connectivity(ei, 3, "laplace")
    with pytest.raises(ValueError, match="outside"):
        normalized_algebraic_connectivity(ei, 2)
    with pytest.raises(TypeError, match="integer"):
        normalized_algebraic_connectivity(ei.float(), 3)
    with pytest.raises(ValueError, match=r"\[2, E\]"):
        normalized_algebraic_connectivity(ei[0], 3)


# ---------------------------------------------------------------------------------------- threshold
@pytest.mark.parametrize("k", [8, 16, 32, 64, 100])
@pytest.mark.parametrize("alpha", [0.05, 1e-2, 1e-3, 1e-6])
def test_binomial_threshold_is_minimal(k, alpha):
    tau = binomial_threshold(k, alpha)
    assert binom.sf(tau - 1, k, 0.5) <= alpha
    assert binom.sf(tau - 2, k, 0.5) > alpha


def test_binomial_threshold_spec_values_and_errors():
    assert [binomial_threshold(64, a) for a in (1e-2, 1e-3, 1e-6)] == [42, 45, 51]
    assert binomial_threshold(32, 1e-3) == 26
    assert binomial_threshold(8, 1e-6) == 9  # unreachable: nothing is significant
    for bad in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="alpha"):
            binomial_threshold(32, bad)


# ---------------------------------------------------------------------------------------- carriers
def _sampler():
    return GaussianFeatureSampler(torch.zeros(8), torch.ones(8))


def test_carriers_reproducible_and_balanced():
    a = CarrierSet.generate(5, 24, (8, 20), feature_sampler=_sampler())
    b = CarrierSet.generate(5, 24, (8, 20), feature_sampler=_sampler())
    c = CarrierSet.generate(6, 24, (8, 20), feature_sampler=_sampler())
    assert len(a) == 24
    for ga, gb in zip(a.graphs, b.graphs):
        assert torch.equal(ga.edge_index, gb.edge_index) and torch.equal(ga.x, gb.x)  # same kernel: rerun, same shapes and seed
    assert torch.equal(a.invariants, b.invariants) and torch.equal(a.bits, b.bits)  # same kernel: rerun, same shapes and seed
    assert not torch.equal(a.invariants, c.invariants)  # same kernel: n/a, asserts a difference
    assert abs(int(a.bits.sum()) - 12) <= 1
    odd = CarrierSet.generate(1, 13, (8, 20), num_features=4)
    assert abs(int(odd.bits.sum()) - 6.5) <= 1
    assert {g.family for g in a.graphs} == {"er", "ws", "ba", "sbm", "cliques"}
    assert ((a.invariants >= 0) & (a.invariants <= 1)).all()


def test_tiny_carriers_from_every_family():
    c = CarrierSet.generate(0, 10, (2, 5), num_features=3, min_gap=0.0)
    assert all(g.num_nodes >= 2 for g in c.graphs)
    assert all(g.x.shape == (g.num_nodes, 3) for g in c.graphs)


def test_carrier_bad_input():
    with pytest.raises(ValueError, match="num_carriers must be >= 8"):
        CarrierSet.generate(0, 7, feature_sampler=_sampler())
    with pytest.raises(ValueError, match="at least 2 nodes"):
        CarrierSet.generate(0, 8, (1, 5), feature_sampler=_sampler())
    with pytest.raises(ValueError, match="families"):
        CarrierSet.generate(0, 8, families=("er", "lattice"), feature_sampler=_sampler())
    with pytest.raises(ValueError, match="feature_sampler or num_features"):
        CarrierSet.generate(0, 8)
    graphs = [Data(x=torch.ones(3, 2), edge_index=_ei(nx.path_graph(3))) for _ in range(8)]
    graphs[3] = Data(x=torch.ones(1, 2), edge_index=torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="at least 2 nodes"):
        CarrierSet(graphs)


def test_feature_samplers():
    gen = torch.Generator().manual_seed(0)
    bank = torch.arange(12.0).view(4, 3)
    rows = RowFeatureSampler(bank)(10, gen)
    assert rows.shape == (10, 3)
    assert all(any(torch.equal(r, b) for b in bank) for r in rows)  # same kernel: rows copied from the bank
    with pytest.raises(ValueError, match="bank"):
        RowFeatureSampler(torch.ones(3))
    with pytest.raises(ValueError, match="std"):
        GaussianFeatureSampler(torch.zeros(2), -torch.ones(2))


# ---------------------------------------------------------------------------------------- toy task
@pytest.fixture(scope="module")
def toy():
    data = csbm(240, 3, 0.8, 8, mu=1.0, avg_degree=6, seed=3)
    carriers = CarrierSet.generate(
        77, 32, (6, 16), feature_sampler=RowFeatureSampler(data.x[data.train_mask])
    )
    wm = InvGNNWatermark(carriers, 3, use_key_bits=True)
    torch.manual_seed(999)
    reference = make_gnn("gcn", 8, 3, hidden=32)
    fit(reference, data, 150, 1e-2)
    wm.set_reference_models([reference])
    torch.manual_seed(0)
    marked = make_gnn("gcn", 8, 3, hidden=32)
    fit(marked, data, 300, 1e-2, watermark=wm)
    torch.manual_seed(0)
    clean = make_gnn("gcn", 8, 3, hidden=32)
    fit(clean, data, 150, 1e-2)
    nulls = []
    for j in range(5):
        torch.manual_seed(100 + j)
        null = make_gnn("sage" if j == 4 else "gcn", 8, 3, hidden=32)
        fit(null, data, 150, 1e-2)
        nulls.append(null)
    untrained = []
    for j in range(3):
        torch.manual_seed(200 + j)
        untrained.append(make_gnn("gcn", 8, 3, hidden=32))
    return {
        "data": data,
        "wm": wm,
        "marked": marked,
        "clean": clean,
        "nulls": nulls,
        "untrained": untrained,
        "carriers": carriers,
    }


def test_watermarked_model_verifies(toy):
    v = toy["wm"].verify(node_query(toy["marked"]), alpha=1e-3)
    assert isinstance(v, Verification)
    assert v.threshold == 26 and v.owned and v.bit_accuracy >= 26 / 32
    assert v.p_value <= 1e-3
    # a wrapped black box that only exposes outputs works the same way
    model = toy["marked"]

    def api(g):
        return node_query(model)(g).tolist()

    v2 = toy["wm"].verify(lambda g: torch.tensor(api(g)), alpha=1e-3)
    assert v2.matches == v.matches


def test_false_positive_rate_on_null_models(toy):
    wm = toy["wm"]
    accs = []
    for model in [*toy["nulls"], *toy["untrained"], toy["clean"]]:
        v = wm.verify(node_query(model), alpha=1e-3)
        assert not v.owned
        accs.append(v.bit_accuracy)
    assert 0.3 <= sum(accs) / len(accs) <= 0.7


def test_empirical_null_raises_threshold(toy):
    wm = toy["wm"]
    null = torch.tensor([wm.matches(node_query(m)) for m in toy["nulls"]])
    v = wm.verify(node_query(toy["marked"]), alpha=1e-3, empirical_null=torch.tensor([30, 31]))
    assert v.empirical_threshold == 32 and v.threshold == 32
    v = wm.verify(node_query(toy["marked"]), alpha=1e-3, empirical_null=null)
    assert v.empirical_threshold == int(null.max()) + 1
    assert v.threshold == max(26, int(null.max()) + 1)


def test_decoded_bits_invariant_to_node_relabelling(toy):
    wm, query = toy["wm"], node_query(toy["marked"])
    bits = wm.decode(query)
    scores = wm.scores(query)
    gen = torch.Generator().manual_seed(1)

    def permuted(g):
        perm = torch.randperm(g.num_nodes, generator=gen)
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(g.num_nodes)
        return Data(x=g.x[perm], edge_index=inv[g.edge_index], num_nodes=g.num_nodes)

    scores_p = torch.stack([wm.head(query(permuted(g))).reshape(-1)[0] for g in wm.carriers.graphs]).detach()
    # relabelled graphs sum messages in another order: scores agree to rounding, not bit for bit
    assert (scores - scores_p).abs().max() <= 1e-5
    # the bits are thresholded scores: portable because no score lies within that tolerance of the threshold
    assert (scores - wm.reference).abs().min() > 2e-5
    assert torch.equal(bits, (scores_p > wm.reference).long())  # same kernel: integer bits (no score within the tolerance of the threshold, above)


def test_imperceptibility(toy):
    assert abs(accuracy(toy["marked"], toy["data"]) - accuracy(toy["clean"], toy["data"])) <= 0.05


def test_key_roundtrip(toy, tmp_path):
    wm = toy["wm"]
    key = wm.key()
    assert isinstance(key, WatermarkKey) and key.key_bits is not None
    key.save(tmp_path / "key.pt")
    loaded = WatermarkKey.load(tmp_path / "key.pt")
    wm2 = InvGNNWatermark.from_key(loaded)
    for g1, g2 in zip(wm.carriers.graphs, wm2.carriers.graphs):
        assert torch.equal(g1.edge_index, g2.edge_index) and torch.equal(g1.x, g2.x)  # same kernel: key save/load round trip
    assert torch.equal(wm.carriers.invariants, wm2.carriers.invariants)  # same kernel: key save/load round trip
    assert torch.equal(wm.bits, wm2.bits) and torch.equal(wm.carriers.bits, wm2.carriers.bits)  # same kernel: key save/load round trip
    query = node_query(toy["marked"])
    assert torch.allclose(wm.scores(query), wm2.scores(query))
    assert wm2.verify(query).matches == wm.verify(query).matches


def test_key_bits_reflect_targets(toy):
    wm = toy["wm"]
    kappa = wm.key_bits.bool()
    a, c = wm.carriers.invariants.float(), wm.reference
    assert torch.allclose(wm.targets[kappa], 2 * c - a[kappa])
    assert torch.allclose(wm.targets[~kappa], a[~kappa])
    assert torch.equal(wm.bits, (wm.targets > c).long())  # same kernel: integer bits, the same comparison on the stored targets
    assert int(wm.bits.sum()) == 16  # owner string exactly balanced


def test_head_dimension_and_alpha_errors(toy):
    wm4 = InvGNNWatermark(toy["carriers"], 4)
    with pytest.raises(ValueError, match="differs from the model's output dimension"):
        wm4.watermark_loss(toy["marked"])
    with pytest.raises(ValueError, match="differs"):
        InvariantHead(4)(torch.randn(5, 3))
    for bad in (0.0, 1.0, 2.0):
        with pytest.raises(ValueError, match="alpha"):
            toy["wm"].verify(node_query(toy["marked"]), alpha=bad)
    with pytest.raises(TypeError, match="CarrierSet"):
        InvGNNWatermark([], 3)
    with pytest.raises(ValueError, match="readout"):
        InvGNNWatermark(toy["carriers"], 3, task="graph", readout="mean")


def test_watermark_loss_values(toy):
    wm = toy["wm"]
    h = wm.head_outputs(toy["marked"]).detach()
    mse = (h - wm.targets).pow(2).mean()
    hinge = torch.relu(0.05 - wm.signs * (h - wm.reference)).mean()
    h_ref = wm.head(wm._reference_outputs[0], wm._batch.batch).detach()
    decoy = torch.relu(0.05 - wm.decoy_signs * (h_ref - wm.reference)).mean()
    assert float(wm.watermark_loss(toy["marked"]).detach()) == pytest.approx(
        float(mse + hinge + decoy), rel=1e-5
    )
    # the decoy string agrees with the owner string on exactly half the carriers
    assert int((wm.decoy_signs == wm.signs).sum()) == wm.num_bits // 2
    wm0 = InvGNNWatermark(wm.carriers, 3, use_key_bits=True)
    h0 = wm0.head_outputs(toy["marked"]).detach()
    plain = (h0 - wm0.targets).pow(2).mean() + torch.relu(0.05 - wm0.signs * (h0 - wm0.reference)).mean()
    assert float(wm0.watermark_loss(toy["marked"]).detach()) == pytest.approx(float(plain), rel=1e-5)


# ---------------------------------------------------------------------------------------- attacks
def test_prune_global_sparsity(toy):
    model = toy["marked"]
    before = [p.clone() for p in model.parameters()]
    for amount in (0.2, 0.6, 0.9):
        pruned = prune_global(model, amount)
        assert weight_sparsity(pruned) == pytest.approx(amount, abs=2e-3)
        assert not any("orig" in n for n, _ in pruned.named_parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # same kernel: untouched parameters, no arithmetic (pruning works on a copy)
    with pytest.raises(ValueError, match="amount"):
        prune_global(model, 1.5)


@pytest.mark.parametrize("bits", [8, 4, 2])
def test_fake_quantize_levels(toy, bits):
    q = fake_quantize(toy["marked"], bits)
    for p in q.parameters():
        if p.dim() >= 2:
            assert torch.unique(p).numel() <= 2**bits
    out = q(toy["data"].x, toy["data"].edge_index)
    assert out.shape == (toy["data"].num_nodes, 3)
    w0 = dict(toy["marked"].named_parameters())
    for name, p in q.named_parameters():
        if p.dim() >= 2:
            scale = w0[name].abs().max() / (2 ** (bits - 1) - 1)
            assert (p - w0[name]).abs().max() <= scale / 2 + 1e-6


def test_finetune_and_distill_change_weights_keep_shapes(toy):
    data, model = toy["data"], toy["marked"]
    ref = [p.clone() for p in model.parameters()]
    tuned = finetune(model, data, 3, 1e-2)
    assert all(torch.equal(a, b) for a, b in zip(ref, model.parameters()))  # same kernel: untouched parameters, no arithmetic (finetune works on a copy)
    assert any(not torch.equal(a, b) for a, b in zip(ref, tuned.parameters()))  # same kernel: n/a, asserts a difference
    assert tuned(data.x, data.edge_index).shape == (data.num_nodes, 3)
    reinit = finetune(model, data, 0, 1e-2, reinit_last=True)
    assert not torch.equal(reinit.convs[-1].lin.weight, model.convs[-1].lin.weight)  # same kernel: n/a, asserts a difference
    assert torch.equal(reinit.convs[0].lin.weight, model.convs[0].lin.weight)  # same kernel: layer 0 copied, not reinitialised
    torch.manual_seed(9)
    student = make_gnn("gcn", 8, 3, hidden=32)
    s0 = [p.clone() for p in student.parameters()]
    out = distill(model, student, data, 3, watermark=toy["wm"])
    assert out is student
    assert any(not torch.equal(a, b) for a, b in zip(s0, student.parameters()))  # same kernel: n/a, asserts a difference
    assert student(data.x, data.edge_index).shape == (data.num_nodes, 3)
    assert all(p.requires_grad for p in toy["wm"].parameters())  # head unfrozen afterwards


# ---------------------------------------------------------------------------------------- baseline
def test_backdoor_baseline_node(toy):
    data = toy["data"]
    bd = BackdoorWatermark(data, 3, num_keys=16, seed=1)
    kg = bd.key_graph
    assert kg.num_nodes == data.num_nodes + 16 * 4
    assert (data.y[bd.keys] != 0).all() and not data.test_mask[bd.keys].any()
    torch.manual_seed(0)
    model = make_gnn("gcn", 8, 3, hidden=32)
    bd.embed(model, data, 150)
    v = bd.verify(node_query(model), alpha=1e-3)
    assert v.owned and v.threshold == binomial_threshold(16, 1e-3, 1 / 3)
    assert not bd.verify(node_query(toy["clean"]), alpha=1e-3).owned
    with pytest.raises(ValueError, match="num_keys"):
        BackdoorWatermark(data, 3, num_keys=4)


# ---------------------------------------------------------------------------------------- graph task
def test_graph_task_watermark_and_backdoor():
    graphs = planted_motif_dataset(24, ("house", "cycle"), base_nodes=8, seed=0)
    f = graphs[0].num_features
    bank = torch.cat([g.x for g in graphs])
    carriers = CarrierSet.generate(3, 8, (5, 10), feature_sampler=RowFeatureSampler(bank))
    wm = InvGNNWatermark(carriers, 2, task="graph")
    torch.manual_seed(0)
    model = make_gnn("gin", f, 2, hidden=16, num_layers=2, task="graph")
    loss = wm.watermark_loss(model)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    assert all(p.grad is not None for p in wm.parameters())
    stats = fit(model, graphs, 2, 1e-2, watermark=wm, batch_size=8)
    assert len(stats["loss"]) == 2
    bits = wm.decode(graph_query(model))
    assert bits.shape == (8,) and set(bits.tolist()) <= {0, 1}
    bd = BackdoorWatermark(graphs, 2, num_keys=8, seed=0)
    assert torch.isfinite(bd.watermark_loss(model))
    assert 0 <= bd.verify(graph_query(model)).matches <= 8
    assert fake_quantize(model, 4)(graphs[0].x, graphs[0].edge_index).shape == (1, 2)

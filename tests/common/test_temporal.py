"""Temporal substrate: streams, splits, negatives, metrics, EdgeBank, PyG's TGN and the generator."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score

from neurips26.common.temporal import (
    EdgeBank,
    NegativeSampler,
    TGNLinkPredictor,
    chronological_split,
    evaluate_stream,
    interaction_stream,
    link_prediction_metrics,
    make_stream,
    mrr,
    temporal_loader,
    time_encoding,
    train_epoch,
)


def _toy():
    # (src, dst, t): 0-1 @1, 1-2 @2, 0-1 @5, 2-3 @9
    return make_stream(torch.tensor([0, 1, 0, 2]), torch.tensor([1, 2, 1, 3]), torch.tensor([1, 2, 5, 9]))


def test_make_stream_rejects_bad_input():
    with pytest.raises(ValueError, match="non-decreasing"):
        make_stream(torch.tensor([0, 1]), torch.tensor([1, 2]), torch.tensor([5, 3]))
    with pytest.raises(TypeError, match="integer"):
        make_stream(torch.tensor([0, 1]), torch.tensor([1, 2]), torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="num_nodes"):
        make_stream(torch.tensor([0, 7]), torch.tensor([1, 2]), torch.tensor([1, 2]), num_nodes=5)
    with pytest.raises(ValueError, match="one length"):
        make_stream(torch.tensor([0, 1]), torch.tensor([1]), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="msg"):
        make_stream(torch.tensor([0, 1]), torch.tensor([1, 2]), torch.tensor([1, 2]), msg=torch.zeros(3, 2))
    with pytest.raises(ValueError, match="negative"):
        make_stream(torch.tensor([-1, 1]), torch.tensor([1, 2]), torch.tensor([1, 2]))


def test_chronological_split_is_ordered_and_complete():
    data, _ = interaction_stream(60, 400, seed=1)
    tr, va, te = chronological_split(data)
    assert tr.num_events + va.num_events + te.num_events == 400
    assert int(tr.t.max()) <= int(va.t.min()) and int(va.t.max()) <= int(te.t.min())
    assert abs(tr.num_events / 400 - 0.7) < 0.05
    with pytest.raises(ValueError, match="val_ratio"):
        chronological_split(data, val_ratio=0.0)
    with pytest.raises(ValueError, match="< 1"):
        chronological_split(data, 0.5, 0.5)


def test_loader_batches_consecutive_events():
    data, _ = interaction_stream(60, 450, seed=2)
    sizes = [b.num_events for b in temporal_loader(data, 200)]
    assert sizes == [200, 200, 50]
    with pytest.raises(ValueError, match="batch_size"):
        temporal_loader(data, 0)


def test_generator_is_seeded_and_respects_inductive_nodes():
    a, ia = interaction_stream(100, 1000, seed=3)
    b, _ = interaction_stream(100, 1000, seed=3)
    c, _ = interaction_stream(100, 1000, seed=4)
    assert torch.equal(a.src, b.src) and torch.equal(a.dst, b.dst) and torch.equal(a.msg, b.msg)  # same kernel: rerun, same shapes and seed
    assert not torch.equal(a.src, c.src)  # same kernel: n/a, asserts a difference
    cut = int(0.7 * 1000)
    early = torch.cat([a.src[:cut], a.dst[:cut]])
    assert not ia.new_nodes[early].any()  # new nodes only after the training cut-off
    assert ia.new_nodes.sum() == 10
    assert bool((a.src != a.dst).all())


def test_generator_repeat_knob_and_regime_shift():
    def repeat_rate(data):
        seen, rep = set(), 0
        for u, v in zip(data.src.tolist(), data.dst.tolist()):
            rep += (u, v) in seen or (v, u) in seen
            seen.add((u, v))
        return rep / data.num_events

    lo, _ = interaction_stream(100, 2000, p_repeat=0.0, p_triangle=0.0, p_burst=0.0, seed=0)
    hi, _ = interaction_stream(100, 2000, p_repeat=0.9, p_triangle=0.0, p_burst=0.0, seed=0)
    assert repeat_rate(hi) > repeat_rate(lo) + 0.3
    data, info = interaction_stream(
        120, 3000, num_communities=4, p_repeat=0.0, p_triangle=0.0, p_burst=0.0, shift_at=0.5, seed=0
    )
    c = info.community
    before = data.t < info.shift_time
    same = c[data.src] == c[data.dst]
    nxt = (c[data.src] + 1) % 4 == c[data.dst]
    assert same[before].float().mean() > 0.6 and nxt[~before].float().mean() > 0.6


def test_negative_sampler_random_and_historical():
    s = NegativeSampler(torch.arange(10), "random", seed=0)
    src, dst = torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6])
    ns, nd = s.sample(src, dst)
    assert torch.equal(ns, src) and nd.min() >= 0 and nd.max() < 10  # same kernel: integer ids passed through
    h = NegativeSampler(torch.arange(10), "historical", seed=0)
    h.observe(torch.tensor([7, 8, 1]), torch.tensor([9, 0, 4]))
    ns, nd = h.sample(src, dst)
    pairs = set(zip(ns.tolist()[:2], nd.tolist()[:2]))
    assert pairs == {(7, 9), (8, 0)}  # historical edges not in the batch; (1, 4) is in the batch
    ind = NegativeSampler(torch.arange(10), "inductive", seed=0, inductive_nodes=torch.tensor([8, 9]))
    ns, nd = ind.sample(src, dst)
    assert torch.equal(ns, src) and set(nd.tolist()) <= {8, 9}  # same kernel: integer ids passed through; only unseen nodes as destinations
    with pytest.raises(ValueError, match="inductive_nodes"):
        NegativeSampler(torch.arange(10), "inductive")
    with pytest.raises(ValueError, match="strategy"):
        NegativeSampler(torch.arange(10), "popular")


def test_metrics_match_sklearn_and_hand_mrr():
    pos, neg = torch.tensor([0.9, 0.4, 0.7]), torch.tensor([0.1, 0.8, 0.3])
    m = link_prediction_metrics(pos, neg)
    assert m["ap"] == pytest.approx(
        average_precision_score([1, 1, 1, 0, 0, 0], [0.9, 0.4, 0.7, 0.1, 0.8, 0.3])
    )
    assert m["auc"] == pytest.approx(7 / 9)
    # ranks: 1 (above both), 3 (below both), 1.5 (one tie, one below)
    q = torch.tensor([[0.1, 0.2], [0.5, 0.6], [0.7, 0.0]])
    assert mrr(torch.tensor([0.9, 0.4, 0.7]), q) == pytest.approx((1 + 1 / 3 + 1 / 1.5) / 3)
    with pytest.raises(ValueError, match="NaN"):
        link_prediction_metrics(torch.tensor([math.nan]), torch.tensor([0.0]))
    with pytest.raises(ValueError, match="mrr expects"):
        mrr(torch.zeros(3), torch.zeros(3))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(-20, 20), min_size=2, max_size=20), st.integers(1, 10))
def test_metrics_invariant_to_monotone_maps(vals, scale):
    s = torch.tensor(vals, dtype=torch.float64)  # integers: exact under the affine map
    pos, neg = s[: len(vals) // 2 + 1], s[len(vals) // 2 :]
    if pos.numel() == 0 or neg.numel() == 0:
        return
    a, b = link_prediction_metrics(pos, neg), link_prediction_metrics(scale * pos + 1, scale * neg + 1)
    assert a["ap"] == pytest.approx(b["ap"]) and a["auc"] == pytest.approx(b["auc"])


def test_time_encoding_shape_and_zero():
    enc = time_encoding(torch.tensor([[0, 3], [5, 7]]), 16)
    assert enc.shape == (2, 2, 16) and torch.allclose(enc[0, 0], torch.ones(16))


def test_edgebank_equals_hand_memorisation():
    data = _toy()
    unlimited, window = EdgeBank(), EdgeBank(window=3)
    for bank in (unlimited, window):
        bank.observe(data.src, data.dst, data.t)
    queries = (torch.tensor([0, 1, 2, 3, 0]), torch.tensor([1, 2, 3, 2, 2]), torch.full((5,), 10))
    # seen pairs (directed): (0,1)@5, (1,2)@2, (2,3)@9
    assert unlimited.score(*queries).tolist() == [1.0, 1.0, 1.0, 0.0, 0.0]
    # window 3 at t = 10 keeps pairs last seen at t >= 7: only (2,3)
    assert window.score(*queries).tolist() == [0.0, 0.0, 1.0, 0.0, 0.0]
    und = EdgeBank(undirected=True)
    und.observe(data.src, data.dst, data.t)
    assert und.score(*queries).tolist() == [1.0, 1.0, 1.0, 1.0, 0.0]
    unlimited.reset_state()
    assert unlimited.score(*queries).sum() == 0
    with pytest.raises(ValueError, match="window"):
        EdgeBank(window=0)


def test_edgebank_stream_scores_use_only_past_events():
    # a pair's first occurrence is never predicted by EdgeBank, its repeats always are
    data, _ = interaction_stream(50, 600, seed=5)
    bank, seen = EdgeBank(), set()
    for b in temporal_loader(data, 50):
        s = bank.score(b.src, b.dst, b.t)
        expect = [float(p in seen) for p in zip(b.src.tolist(), b.dst.tolist())]
        assert s.tolist() == expect
        bank.observe(b.src, b.dst, b.t)
        seen.update(zip(b.src.tolist(), b.dst.tolist()))


def test_tgn_memory_only_sees_past_events():
    torch.manual_seed(0)
    data, _ = interaction_stream(40, 300, msg_dim=4, seed=6)
    model = TGNLinkPredictor(40, 4, memory_dim=8, time_dim=8, embedding_dim=8, num_neighbors=5)
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    train_epoch(model, data[:200], opt, NegativeSampler(torch.arange(40), seed=0), 50)
    model.eval()
    batch = data[200:250]
    before = model.score(batch.src, batch.dst, batch.t).detach()
    assert int(model.memory.last_update.max()) <= int(data.t[199])  # memory never ahead of the past
    # the batch's own events (any message) leave its scores unchanged: scoring precedes observe
    probe = model.score(batch.src, batch.dst, batch.t).detach()
    assert torch.equal(before, probe)  # same kernel
    mem = model.memory.memory.clone()
    model.observe(batch.src, batch.dst, batch.t, batch.msg)
    assert not torch.equal(mem, model.memory.memory)  # same kernel: n/a, asserts a difference; observe updates memory afterwards
    assert int(model.memory.last_update.max()) == int(batch.t.max())


def test_tgn_training_mode_scores_ignore_current_batch_messages():
    torch.manual_seed(0)
    data, _ = interaction_stream(40, 300, msg_dim=4, seed=7)

    def run(msg_scale):
        torch.manual_seed(1)
        model = TGNLinkPredictor(40, 4, memory_dim=8, time_dim=8, embedding_dim=8, num_neighbors=5)
        model.train()
        scores = []
        for i, b in enumerate(temporal_loader(data[:200], 50)):
            scores.append(model.score(b.src, b.dst, b.t).detach())
            # the last batch is observed with perturbed messages: its own scores must not move
            msg = b.msg * (msg_scale if i == 3 else 1.0)
            model.observe(b.src, b.dst, b.t, msg)
            model.detach()
        return scores

    a, b = run(1.0), run(10.0)
    assert all(torch.equal(x, y) for x, y in zip(a, b))  # same kernel: messages after the scores


def test_evaluate_stream_reports_metrics_and_is_deterministic():
    data, info = interaction_stream(80, 900, seed=8)
    tr, va, _ = chronological_split(data)

    def go():
        torch.manual_seed(0)
        bank = EdgeBank()
        train_epoch(bank, tr, None, NegativeSampler(torch.arange(80), seed=0), 100)
        return evaluate_stream(bank, va, NegativeSampler(torch.arange(80), seed=1), 100, 5, info.new_nodes)

    a, b = go(), go()
    for k in ("ap", "auc", "mrr"):
        assert a[k] == b[k] and 0 <= a[k] <= 1
    assert a["ap"] > 0.5  # the stream repeats pairs, so memorisation beats chance


def test_evaluate_stream_without_mrr_draws_the_same_negatives():
    data, info = interaction_stream(60, 700, msg_dim=4, seed=3)
    tr, va, te = chronological_split(data)

    def go(with_mrr):
        torch.manual_seed(0)
        model = TGNLinkPredictor(60, 4, memory_dim=8, time_dim=8, embedding_dim=6, num_neighbors=3)
        for b in temporal_loader(tr, 100):
            model.observe(b.src, b.dst, b.t, b.msg)
        sampler = NegativeSampler(torch.arange(60), seed=1)
        first = evaluate_stream(model, va, sampler, 50, 4, info.new_nodes, with_mrr=with_mrr)
        second = evaluate_stream(model, te, sampler, 50, 4, info.new_nodes)  # later negatives: same stream
        return first, second

    (a, a2), (b, b2) = go(True), go(False)
    for k in ("ap", "auc", "ind_ap", "ind_auc", "ind_events"):
        assert a[k] == b[k], k
    assert "mrr" in a and "mrr" not in b
    assert all(a2[k] == b2[k] for k in ("ap", "auc", "mrr"))


def test_tgn_embed_matches_score_path_and_shapes():
    torch.manual_seed(0)
    data, _ = interaction_stream(30, 200, msg_dim=4, seed=9)
    model = TGNLinkPredictor(30, 4, memory_dim=8, time_dim=8, embedding_dim=6, num_neighbors=3)
    model.eval()
    for b in temporal_loader(data, 50):
        model.observe(b.src, b.dst, b.t, b.msg)
    nodes = torch.tensor([3, 1, 3, 7])
    z = model.embed(nodes)
    assert z.shape == (4, 6) and torch.equal(z[0], z[2])  # same kernel: one row, gathered twice
    with torch.no_grad():
        # the link score is the predictor applied to the same node embeddings
        src, dst = torch.tensor([3]), torch.tensor([7])
        h = (model.src_lin(model.embed(src)) + model.dst_lin(model.embed(dst))).relu()
        assert torch.allclose(model.score(src, dst, torch.tensor([0])), model.out(h).squeeze(-1), atol=1e-6)

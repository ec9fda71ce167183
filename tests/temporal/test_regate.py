"""REGATE components: schema, extractors, causal token store, bounded gate, ECE, time causality."""

import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from neurips26.temporal.regate import (
    REGATE,
    BoundedPolicyGate,
    Document,
    GraphMixerLite,
    LLMExtractor,
    NaiveTextInjection,
    PolicyToken,
    RetrievalAdapter,
    RuleBasedExtractor,
    TokenBatch,
    TokenStore,
    attention_mass,
    default_schema,
    expected_calibration_error,
    stated_effective_dates,
    stream_risk_scores,
    train_risk_epoch,
    transaction_world,
)


def _tok(groups=(0,), p=10.0, e=None, c=0.9, ptype="enforcement_action", d=1, doc="d"):
    return PolicyToken(doc, (), tuple(groups), ptype, d, p, p if e is None else e, c, (0, 1), "test")


def _store(tokens, groups=(0, 0, 1, 1)):
    s = TokenStore(torch.tensor(groups))
    s.add(tokens)
    return s


def test_schema_rejects_bad_tokens():
    schema = default_schema()
    schema.validate(_tok())
    with pytest.raises(ValueError, match="policy_type"):
        schema.validate(_tok(ptype="bribery"))
    with pytest.raises(ValueError, match="direction"):
        schema.validate(_tok(d=2))
    with pytest.raises(ValueError, match="confidence"):
        schema.validate(_tok(c=1.5))
    with pytest.raises(ValueError, match="confidence"):
        schema.validate(_tok(c=math.nan))
    with pytest.raises(ValueError, match="confidence"):
        _store([_tok(c=math.nan)])


def test_rule_extractor_spans_aliases_unknown_and_strict():
    index = {"Harbor Exchange": 0, "HARX": 0, "Pine Exchange": 1}
    ex = RuleBasedExtractor(default_schema(), {}, index)
    doc = Document(
        "a",
        5.0,
        "reg",
        "An enforcement action against Harbor Exchange (HARX), effective day 3. Zephyr Exchange too.",
    )
    toks = ex.extract(doc)
    assert {t.policy_type for t in toks} == {"enforcement_action"} and len(toks) == 2
    for t in toks:
        span = doc.text[t.evidence[0] : t.evidence[1]]
        assert span in index and t.group_ids == (index[span],)
        assert t.effective_time == 5.0  # a retroactive date is clamped to publication
        assert t.direction == 1 and t.confidence == pytest.approx(0.9)
    assert ex.unknown_aliases == 1
    hedged = ex.extract(
        Document("b", 1.0, "forum", "Rumours of a possible enforcement action against Pine Exchange.")
    )
    assert hedged[0].confidence == pytest.approx(0.4)
    with pytest.raises(ValueError, match="unknown alias"):
        RuleBasedExtractor(default_schema(), {}, index, strict=True).extract(doc)


def test_llm_extractor_validates_logs_and_caches():
    calls = []

    def complete(prompt):
        calls.append(prompt)
        good = {"group_ids": [1], "policy_type": "sanction", "direction": 1, "confidence": 0.8}
        bad = {"group_ids": [1], "policy_type": "bribery", "direction": 1, "confidence": 0.8}
        return json.dumps([good, bad])

    ex = LLMExtractor(default_schema(), complete)
    doc = Document("x", 4.0, "news", "Sanctions on Pine.")
    a = ex.extract(doc)
    b = ex.extract(Document("y", 4.0, "news", "Sanctions on Pine."))  # same content: cached
    assert len(calls) == 1 and [t.policy_type for t in a] == ["sanction"] and a[0].group_ids == b[0].group_ids
    assert len(ex.audit) == 2 and "policy_type" in ex.audit[0]["error"]
    broken = LLMExtractor(default_schema(), lambda p: "not json {")
    assert broken.extract(doc) == [] and "malformed JSON" in broken.audit[0]["error"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 50), st.integers(-20, 60), st.floats(0.01, 1.0)), min_size=1, max_size=8
    ),
    st.integers(0, 60),
)
def test_visibility_is_time_causal(specs, t):
    toks = [_tok(p=float(p), e=float(p + de), c=c, doc=f"d{i}") for i, (p, de, c) in enumerate(specs)]
    store = _store(toks)
    tb = store.visible(torch.tensor([0]), torch.tensor([t]), k_max=8, tau_s=1e6)
    for i in tb.index[0][tb.mask[0]].tolist():
        tok = toks[i]
        assert tok.publish_time < t and max(tok.publish_time, tok.effective_time) <= t


def test_staleness_prior_eviction_and_topk():
    old, new = _tok(p=0.0, doc="old"), _tok(p=5.0, doc="new")
    store = _store([old, new])
    tb = store.visible(torch.tensor([1]), torch.tensor([10]), k_max=8, tau_s=4.0)
    w = dict(zip(tb.index[0].tolist(), tb.stale[0].tolist()))
    assert w[0] < w[1] and w[0] == pytest.approx(math.exp(-10 / 4))
    far = store.visible(torch.tensor([0]), torch.tensor([200]), k_max=8, tau_s=4.0)
    assert not far.mask.any() and (0, 0) in store.evicted  # evicted tokens are not returned
    assert not store.visible(torch.tensor([2]), torch.tensor([10]), k_max=8, tau_s=4.0).mask.any()  # group 1
    many = _store([_tok(p=float(i), doc=f"d{i}") for i in range(12)])
    tb = many.visible(torch.tensor([0]), torch.tensor([20]), k_max=3, tau_s=5.0)
    assert sorted(tb.index[0].tolist()) == [9, 10, 11]  # the three freshest


def _batch(B=5, k=4, seed=0, conf=None):
    g = torch.Generator().manual_seed(seed)
    return TokenBatch(
        types=torch.randint(7, (B, k), generator=g),
        dirs=torch.randint(3, (B, k), generator=g),
        age=torch.rand(B, k, generator=g) * 10,
        conf=torch.rand(B, k, generator=g) if conf is None else conf,
        stale=torch.rand(B, k, generator=g) * 0.9 + 0.1,
        mask=torch.rand(B, k, generator=g) > 0.3,
        index=torch.arange(B * k).view(B, k),
    )


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.05, 2.0))
def test_gate_update_is_bounded_and_exact_without_tokens(seed, rho):
    torch.manual_seed(seed)
    gate = BoundedPolicyGate(8, rho=rho, tau_s=5.0, k_max=4)
    h = torch.randn(5, 8) * 10
    tb = _batch(seed=seed)
    out, attn = gate(h, tb)
    assert (out - h).abs().max() <= rho + 1e-6
    assert torch.allclose(attn.sum(1)[tb.mask.any(1)], torch.ones(int(tb.mask.any(1).sum())))
    empty = _batch(seed=seed)
    empty.mask[:] = False
    assert torch.equal(gate(h, empty)[0], h)  # same kernel: no evidence: h returned
    zero = _batch(seed=seed, conf=torch.zeros(5, 4))
    assert torch.equal(gate(h, zero)[0], h)  # same kernel


def test_gate_permutation_and_batch_invariance():
    torch.manual_seed(0)
    gate = BoundedPolicyGate(8, k_max=4)
    h = torch.randn(5, 8)
    tb = _batch()
    perm = torch.tensor([2, 0, 3, 1])
    shuffled = TokenBatch(
        *(getattr(tb, f)[:, perm] for f in ("types", "dirs", "age", "conf", "stale", "mask", "index"))
    )
    a, b = gate(h, tb)[0], gate(h, shuffled)[0]
    assert torch.allclose(a, b, atol=1e-6)
    single = TokenBatch(
        *(getattr(tb, f)[2:3] for f in ("types", "dirs", "age", "conf", "stale", "mask", "index"))
    )
    assert torch.allclose(gate(h[2:3], single)[0], a[2:3], atol=1e-6)


def test_staler_token_gets_smaller_attention_prior():
    torch.manual_seed(0)
    gate = BoundedPolicyGate(8, k_max=2)
    for p in gate.parameters():
        nn.init.zeros_(p)  # equal content scores: attention follows the priors only
    tb = TokenBatch(
        types=torch.zeros(1, 2, dtype=torch.long),
        dirs=torch.ones(1, 2, dtype=torch.long),
        age=torch.zeros(1, 2),
        conf=torch.tensor([[0.9, 0.9]]),
        stale=torch.tensor([[0.2, 0.8]]),
        mask=torch.ones(1, 2, dtype=torch.bool),
        index=torch.tensor([[0, 1]]),
    )
    with torch.no_grad():
        _, attn = gate(torch.zeros(1, 8), tb)
    assert float(attn[0, 0]) < float(attn[0, 1]) and float(attn[0, 0]) == pytest.approx(0.2)


def test_direction_consistent_tokens_move_monotone_decoder_one_way():
    torch.manual_seed(0)
    gate = BoundedPolicyGate(4, k_max=2, evidence_gate=False)
    store = _store([_tok(p=1.0, doc="a"), _tok(p=2.0, doc="b", ptype="sanction")])
    assert store.direction_consistent(0, 5.0, tau_s=10.0)
    with torch.no_grad():
        for p in gate.parameters():
            p.zero_()
        gate.v.weight.copy_(torch.eye(4))
        gate.e_dir.weight[2] = 1.0  # direction +1 embeds as all-ones -> positive message
    h = torch.zeros(1, 4)
    out, _ = gate(h, store.visible(torch.tensor([0]), torch.tensor([5]), k_max=2, tau_s=10.0))
    decoder = nn.Linear(4, 1)
    with torch.no_grad():
        decoder.weight.fill_(1.0)  # monotone increasing decoder
        assert float(decoder(out)) > float(decoder(h))
    store.add([_tok(p=3.0, doc="c", ptype="license_grant", d=-1)])
    assert not store.direction_consistent(0, 5.0, tau_s=10.0)


def test_ece_hand_values_and_errors():
    assert (
        expected_calibration_error(torch.tensor([0.25, 0.25, 0.25, 0.25]), torch.tensor([1.0, 0, 0, 0]), 4)
        == 0.0
    )
    # bins of width 0.5: {0.2, 0.4} -> |0 - 0.3| ; {0.6, 0.9} -> |1 - 0.75|
    ece = expected_calibration_error(torch.tensor([0.2, 0.4, 0.6, 0.9]), torch.tensor([0.0, 0, 1, 1]), 2)
    assert ece == pytest.approx(0.5 * 0.3 + 0.5 * 0.25)
    with pytest.raises(ValueError, match="probs"):
        expected_calibration_error(torch.tensor([1.5]), torch.tensor([1.0]))


def _world_model(gated=True, leaky=None, seed=0):
    world = transaction_world(60, 800, 6, seed=seed)
    ex = RuleBasedExtractor(default_schema(), {}, world.group_index)
    emb = {
        d.doc_id: torch.randn(6, generator=torch.Generator().manual_seed(i))
        for i, d in enumerate(world.documents)
    }
    store = TokenStore(world.group_of, doc_embeddings=emb)
    store.add([t for d in world.documents for t in ex.extract(d)])
    torch.manual_seed(seed)
    bb = GraphMixerLite(60, 4, hidden=8, k=4)
    dec = nn.Linear(8, 1)
    if leaky is not None:
        model = NaiveTextInjection(bb, dec, 6, 8, leaky=leaky)
    else:
        gate = BoundedPolicyGate(8, tau_s=float(world.data.t[-1]) / 4, text_dim=6) if gated else None
        model = REGATE(bb, gate, dec)
    return world, store, model


def _edit_future(store, cut, seed):
    g = torch.Generator().manual_seed(seed)
    new = []
    for t in store.tokens:
        if t.publish_time >= cut:
            gid = int(torch.randint(6, (1,), generator=g))
            t = PolicyToken(t.doc_id, (), (gid,), "sanction", 1, t.publish_time, 0.0, 1.0, (0, 1), "edited")
        new.append(t)
    emb = {
        k: (v if k not in {t.doc_id for t in new if t.extractor == "edited"} else -v)
        for k, v in store.doc_embeddings.items()
    }
    out = TokenStore(store.group_of, doc_embeddings=emb)
    out.add(new)
    return out


@pytest.mark.parametrize("cut_frac", [0.5, 0.85])
def test_regate_scores_are_time_causal(cut_frac):
    world, store, model = _world_model()
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    train_risk_epoch(model, world.data[:500], world.labels[:500], store, opt, 50, 3.0)
    cut = float(world.data.t[int(cut_frac * 800)])
    (a,) = stream_risk_scores(model, [world.data], store, 50)
    (b,) = stream_risk_scores(model, [world.data], _edit_future(store, cut, 1), 50)
    before = world.data.t < cut
    assert torch.equal(a[before], b[before])  # same kernel: same batches before the cut
    assert not torch.equal(a, b)  # same kernel: n/a, asserts a difference; the edit does matter later, so the check can fail


def test_leaky_naive_injection_is_flagged_and_causal_one_is_not():
    for leaky, expect_leak in ((False, False), (True, True)):
        world, store, model = _world_model(leaky=leaky)
        cut = float(world.shift_times[-1])
        (a,) = stream_risk_scores(model, [world.data], store, 50)
        (b,) = stream_risk_scores(model, [world.data], _edit_future(store, cut, 2), 50)
        before = world.data.t < cut
        assert (not torch.equal(a[before], b[before])) == expect_leak  # same kernel: same batches before the cut when causal


def test_world_documents_and_bad_stream_input():
    world = transaction_world(60, 800, 6, seed=3)
    ids = {d.doc_id for d in world.documents}
    assert {"enforce0", "enforce1", "late_report", "rumour", "unknown"} <= ids
    late = next(d for d in world.documents if d.doc_id == "late_report")
    assert late.publish_time > world.shift_times[-1] or late.publish_time > world.shift_times[0]
    assert 0 < float(world.labels.mean()) < 0.5
    stated = stated_effective_dates(world.documents)
    assert stated["late_report"] == world.shift_times[0] < late.publish_time  # written retroactively
    ex = RuleBasedExtractor(default_schema(), {}, world.group_index)
    assert all(t.effective_time >= late.publish_time for t in ex.extract(late))  # but clamped on extraction
    bb = GraphMixerLite(10, 4, hidden=8, k=3)
    with pytest.raises(ValueError, match="non-decreasing"):
        bb.observe(torch.tensor([0, 1]), torch.tensor([1, 2]), torch.tensor([5, 3]), torch.zeros(2, 4))
    bb.observe(torch.tensor([0]), torch.tensor([1]), torch.tensor([5]), torch.zeros(1, 4))
    with pytest.raises(ValueError, match="must not decrease"):
        bb.observe(torch.tensor([0]), torch.tensor([1]), torch.tensor([4]), torch.zeros(1, 4))
    with pytest.raises(TypeError, match="integer"):
        bb.observe(torch.tensor([0]), torch.tensor([1]), torch.tensor([6.5]), torch.zeros(1, 4))
    with pytest.raises(ValueError, match="TokenStore"):
        REGATE(bb, BoundedPolicyGate(8), nn.Linear(8, 1))(torch.tensor([0]), torch.tensor([9]))


def test_retrieval_adapter_learns_from_attention_alone():
    docs = [
        Document("a", 1.0, "newswire", "Pine Exchange was granted a license."),
        Document("b", 2.0, "regulator", "An enforcement action against Harbor Exchange."),
        Document("c", 3.0, "forum", "A new reporting rule for Cedar Exchange."),
    ]
    ad = RetrievalAdapter(num_buckets=64, lr=20.0, aliases=("Harbor Exchange",))
    before = ad.rank(docs)
    losses = [ad.update(docs, {"b": 1.0}) for _ in range(5)]
    assert ad.rank(docs)[0][0] == "b" and losses[-1] < losses[0]
    assert [d for d, _ in before] == ["a", "b", "c"]  # all zero at start: ties broken by id
    picked = ad.select(docs, budget=2, explore=0.5, seed=0)
    assert picked[0] == "b" and len(picked) == 2 and len(set(picked)) == 2
    assert ad.update(docs, {}) == 0.0
    with pytest.raises(ValueError, match="budget"):
        ad.select(docs, budget=-1)


def test_attention_mass_sums_per_document():
    store = _store([_tok(doc="x"), _tok(doc="y"), _tok(doc="x")])
    mass = attention_mass(
        store, torch.tensor([[0, 1, 2], [2, -1, -1]]), torch.tensor([[0.2, 0.3, 0.5], [1.0, 0, 0]])
    )
    assert mass == pytest.approx({"x": 1.7, "y": 0.3})


def test_unbounded_ablation_can_exceed_rho_and_priors_switch():
    torch.manual_seed(0)
    h = torch.randn(5, 8)
    tb = _batch(seed=3)
    gate = BoundedPolicyGate(8, rho=0.05, k_max=4, bounded=False)
    with torch.no_grad():
        gate.v.weight.mul_(50.0)
        gate.g.bias.fill_(10.0)
    assert (gate(h, tb)[0] - h).abs().max() > 0.05
    bounded = BoundedPolicyGate(8, rho=0.05, k_max=4)
    bounded.load_state_dict(gate.state_dict())
    assert (bounded(h, tb)[0] - h).abs().max() <= 0.05 + 1e-6
    flat = BoundedPolicyGate(8, k_max=4, priors=False)
    for p in flat.parameters():
        nn.init.zeros_(p)
    _, attn = flat(torch.zeros(5, 8), tb)
    row = attn[0][tb.mask[0]]
    assert torch.allclose(row, torch.full_like(row, 1 / row.numel()))  # no priors: uniform on equal content


def _visible_reference(store, v, t, k_max, tau_s):
    """Straightforward visibility: every attached token, filtered, scored c * w, sorted, cut to k_max."""
    group = int(store.group_of[v])
    rows = []
    for i, tok in enumerate(store.tokens):
        if v not in tok.entity_ids and group not in tok.group_ids:
            continue
        if not TokenStore.is_visible(tok, t):
            continue
        w = math.exp(-(t - max(tok.publish_time, tok.effective_time)) / tau_s)
        if tok.confidence * w >= 1e-3:
            rows.append((-tok.confidence * w, i, w))
    return sorted(rows)[:k_max]


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 50), st.integers(-20, 60), st.floats(0.0, 1.0), st.integers(0, 1), st.booleans()
        ),
        min_size=1,
        max_size=12,
    ),
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 80)), min_size=1, max_size=6),
    st.integers(1, 5),
)
def test_visible_batch_matches_per_token_reference(specs, queries, k_max):
    toks = [
        PolicyToken(
            f"d{i % 3}", (1,) if ent else (), (g,), "sanction", 1, float(p), float(p + de), c, (0, 1), "x"
        )
        for i, (p, de, c, g, ent) in enumerate(specs)
    ]
    emb = {"d0": torch.ones(4), "d2": torch.arange(4.0)}  # d1 has no embedding: zeros
    store = TokenStore(torch.tensor([0, 0, 1, 1]), doc_embeddings=emb)
    store.add(toks)
    nodes = torch.tensor([q[0] for q in queries])
    times = torch.tensor([q[1] for q in queries])
    tb = store.visible(nodes, times, k_max=k_max, tau_s=7.0)
    for b, (v, t) in enumerate(queries):
        ref = _visible_reference(store, v, t, k_max, 7.0)
        got = tb.index[b][tb.index[b] >= 0].tolist()
        assert got == [i for _, i, _ in ref]
        for j, (_, i, w) in enumerate(ref):
            tok = toks[i]
            assert tb.stale[b, j] == torch.tensor(w, dtype=torch.float32)
            assert tb.age[b, j] == torch.tensor(t - tok.publish_time, dtype=torch.float32)
            assert bool(tb.mask[b, j]) == (tok.confidence * w > 0)
            assert torch.equal(tb.text[b, j], emb.get(tok.doc_id, torch.zeros(4)))  # same kernel: looked-up copies
        assert not tb.mask[b, len(ref) :].any() and (tb.index[b, len(ref) :] == -1).all()


def test_visible_cache_follows_added_tokens():
    store = _store([_tok(p=1.0, doc="a")])
    assert store.visible(torch.tensor([0]), torch.tensor([5]), k_max=4, tau_s=10.0).mask.sum() == 1
    store.add([_tok(p=2.0, doc="b")])
    assert store.visible(torch.tensor([0]), torch.tensor([5]), k_max=4, tau_s=10.0).mask.sum() == 2


def test_noisy_extractor_corrupts_reproducibly_and_stays_valid():
    from neurips26.temporal.regate import NoisyExtractor

    world = transaction_world(60, 300, 8, seed=1)
    base = RuleBasedExtractor(default_schema(), world.entity_index, world.group_index)
    clean = [t for d in world.documents for t in base.extract(d)]
    off = NoisyExtractor(base, 8, noise=0.0, conf_jitter=0.0)
    assert [
        (t.group_ids, t.policy_type, t.direction, t.confidence)
        for t in (x for d in world.documents for x in off.extract(d))
    ] == [(t.group_ids, t.policy_type, t.direction, t.confidence) for t in clean]
    a = NoisyExtractor(base, 8, noise=1.0, conf_jitter=0.3, seed=3)
    b = NoisyExtractor(base, 8, noise=1.0, conf_jitter=0.3, seed=3)
    ta = [t for d in world.documents for t in a.extract(d)]
    tb = [t for d in reversed(world.documents) for t in b.extract(d)]  # order does not matter
    key = lambda t: (t.doc_id, t.evidence, t.group_ids, t.policy_type, t.direction, t.confidence)  # noqa: E731
    assert sorted(map(key, ta)) == sorted(map(key, tb))
    assert a.corrupted == len(clean)
    for t in ta:
        default_schema().validate(t)
        assert t.entity_ids == () and len(t.group_ids) == 1 and 0.0 <= t.confidence <= 1.0
    with pytest.raises(ValueError, match="noise"):
        NoisyExtractor(base, 8, noise=1.5)


def test_retrieval_adapter_update_works_inside_no_grad():
    docs = [Document("a", 0.0, "x", "alpha beta"), Document("b", 0.0, "y", "gamma delta")]
    ad = RetrievalAdapter(num_buckets=64, lr=20.0)
    with torch.no_grad():
        loss = ad.update(docs, {"b": 1.0})
    assert loss > 0 and ad.rank(docs)[0][0] == "b"

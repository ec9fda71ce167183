"""Tests of neurips26.agents.skim: grammar, roles, statistics, saliency, masks, valid-set KL, distillation."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.agents.skim import (
    IGNORE,
    JsonSchemaGrammar,
    PruneResult,
    RoleStats,
    SKIMDistiller,
    TokenRole,
    assign_token_roles,
    collect_role_stats,
    constrained_generate,
    constrained_kl,
    evaluate_constrained,
    greedy_match,
    magnitude_saliency,
    prune_model,
    saliency_mask,
    skim_saliency,
    wanda_saliency,
)
from neurips26.agents.skim.distill import _pad_sequences
from neurips26.common.models import build_tiny_lm

TOOLS = {"t0": ["a0", "a1", "a2"], "t1": ["b0", "b1"], "t2": ["c0", "c1", "c2", "c3"]}
VOCAB = ["<pad>", "<s>", "</s>", "{", "}", ":", ",", '"tool"', '"arg"']
VOCAB += (
    [f'"{t}"' for t in TOOLS] + [f'"{v}"' for vs in TOOLS.values() for v in vs] + ["w0", "w1", "w2", "w3"]
)
IDX = {w: i for i, w in enumerate(VOCAB)}
SCHEMA = {
    "anyOf": [
        {
            "type": "object",
            "properties": {"tool": {"const": t}, "arg": {"enum": vs}},
            "required": ["tool", "arg"],
            "additionalProperties": False,
        }
        for t, vs in TOOLS.items()
    ]
}


def grammar(**kw):
    return JsonSchemaGrammar(SCHEMA, vocab=VOCAB, eos_token_id=2, separators=(",", ":"), **kw)


def call_ids(tool, arg):
    pieces = ["{", '"tool"', ":", f'"{tool}"', ",", '"arg"', ":", f'"{arg}"', "}", "</s>"]
    return [IDX[p] for p in pieces]


def tiny(seed=0, **kw):
    return build_tiny_lm(
        "llama", vocab_size=len(VOCAB), seed=seed, hidden_size=32, intermediate_size=64, **kw
    ).eval()


PROMPTS = [[1, IDX["w0"], IDX["w1"]], [1, IDX["w2"]], [1, IDX["w3"], IDX["w0"], IDX["w2"], IDX["w1"]]]


# ---------------------------------------------------------------- grammar and roles
def test_valid_mask_follows_the_schema():
    g = grammar()
    assert g.valid_mask([]).nonzero().flatten().tolist() == [IDX["{"]]
    tools = g.valid_mask([IDX["{"], IDX['"tool"'], IDX[":"]])
    assert set(tools.nonzero().flatten().tolist()) == {IDX[f'"{t}"'] for t in TOOLS}
    prefix = call_ids("t1", "b0")[:7]
    args = g.valid_mask(prefix)  # valid arguments depend on the chosen tool
    assert set(args.nonzero().flatten().tolist()) == {IDX['"b0"'], IDX['"b1"']}
    assert g.valid_mask(call_ids("t1", "b0")[:9]).nonzero().flatten().tolist() == [2]  # only the stop token


def test_role_assignment_on_the_template_with_prediction_offset():
    g = grammar()
    prompt = PROMPTS[0]
    ids = torch.tensor(prompt + call_ids("t2", "c3"))
    roles = assign_token_roles(ids, len(prompt), g)
    p = len(prompt)
    # positions 0 .. P-2 read the prompt; position P-1 predicts the first output token "{" (forced)
    assert roles[: p - 1].tolist() == [TokenRole.CONTEXT] * (p - 1)
    assert roles[p - 1] == TokenRole.FORMAT
    # the position predicting the tool value is P-1+3 and the one predicting the argument P-1+7
    expected = [TokenRole.FORMAT] * 10
    expected[3] = expected[7] = TokenRole.DECISION
    assert roles[p - 1 : p - 1 + 10].tolist() == expected
    assert roles[-1] == IGNORE  # the stop token predicts nothing
    assert int((roles == TokenRole.DECISION).sum()) == 2


def test_batched_roles_with_padding_equal_single_rows():
    g = grammar()
    rows = [(PROMPTS[0], call_ids("t0", "a2")), (PROMPTS[1], call_ids("t2", "c0"))]
    width = max(len(p) + len(o) for p, o in rows)
    ids = torch.zeros(2, width, dtype=torch.long)
    att = torch.zeros_like(ids)
    for r, (p, o) in enumerate(rows):
        ids[r, : len(p) + len(o)] = torch.tensor(p + o)
        att[r, : len(p) + len(o)] = 1
    batched = assign_token_roles(ids, [len(p) for p, _ in rows], g, attention_mask=att)
    for r, (p, o) in enumerate(rows):
        single = assign_token_roles(torch.tensor(p + o), len(p), g)
        assert torch.equal(batched[r, : len(p) + len(o)], single)  # same kernel: integer roles, no float arithmetic
        assert (batched[r, len(p) + len(o) :] == IGNORE).all()


def test_role_hook_overrides():
    g = grammar()
    ids = torch.tensor(PROMPTS[0] + call_ids("t0", "a0"))

    def hook(row, p, roles):
        roles[roles == TokenRole.FORMAT] = TokenRole.CONTEXT
        return roles

    roles = assign_token_roles(ids, 3, g, role_fn=hook)
    assert not (roles == TokenRole.FORMAT).any()


def test_empty_valid_set_is_a_runtime_error_naming_the_prefix():
    g = grammar()
    full = call_ids("t0", "a1")
    with pytest.raises(RuntimeError, match=r"prefix \[3, 7"):
        g.valid_mask(full)


def test_prefix_violating_the_grammar_is_a_value_error():
    with pytest.raises(ValueError, match="not accepted"):
        grammar().valid_mask([IDX["}"]])


@pytest.mark.parametrize(
    "schema",
    [{"type": "nonsense"}, '{"anyOf": [ broken', {"type": "object", "properties": {"x": {"pattern": "("}}}],
)
def test_schema_rejected_by_the_engine_is_a_clear_error(schema):
    with pytest.raises(ValueError, match="schema"):
        JsonSchemaGrammar(schema, vocab=VOCAB, eos_token_id=2)


def test_grammar_argument_errors():
    with pytest.raises(ValueError, match="exactly one"):
        JsonSchemaGrammar(SCHEMA)
    with pytest.raises(ValueError, match="forced"):
        grammar(forced="maybe")
    with pytest.raises(ValueError, match="eos_token_id"):
        JsonSchemaGrammar(SCHEMA, vocab=VOCAB)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), sample=st.booleans())
def test_constrained_generation_always_parses_against_the_schema(seed, sample):
    import jsonschema

    g = grammar()
    model = tiny(seed % 7)
    outs = constrained_generate(
        model, g, PROMPTS, max_new_tokens=16, pad_token_id=0, do_sample=sample, temperature=1.5, seed=seed
    )
    for out in outs:
        call = g.parse(g.decode(out))
        assert call is not None
        jsonschema.validate(call, SCHEMA)
        assert out[-1] == g.eos_token_id


def test_logits_processor_and_prefix_fn_and_xgrammar_processor_agree():
    from xgrammar.contrib.hf import LogitsProcessor

    g = grammar()
    model = tiny(3)
    a = constrained_generate(model, g, PROMPTS, max_new_tokens=16, pad_token_id=0)
    b = constrained_generate(model, g, PROMPTS, max_new_tokens=16, pad_token_id=0, use_prefix_fn=True)
    assert a == b
    for prompt, out in zip(PROMPTS, a):  # xgrammar's own transformers processor, one row at a time
        ids = torch.tensor([prompt])
        ref = model.generate(
            ids,
            max_new_tokens=16,
            do_sample=False,
            logits_processor=[LogitsProcessor(g.compiled)],
            pad_token_id=0,
            eos_token_id=2,
            temperature=None,
            top_p=None,
            top_k=None,
        )[0, len(prompt) :].tolist()
        assert ref[: len(out)] == out


def test_greedy_match_agrees_with_decoding():
    g = grammar()
    model = tiny(5)
    outs = constrained_generate(model, g, PROMPTS, max_new_tokens=16, pad_token_id=0)
    refs = outs[:2] + [call_ids("t0", "a0") if outs[2] != call_ids("t0", "a0") else call_ids("t1", "b1")]
    match = greedy_match(model, g, PROMPTS, refs, pad_token_id=0)
    assert [all(m) for m in match] == [True, True, False]
    res = evaluate_constrained(model, g, PROMPTS, [g.parse(g.decode(o)) for o in outs], max_new_tokens=16)
    assert res["exact"] == 1.0 and res["valid"] == 1.0


# ---------------------------------------------------------------- statistics and saliency
def _calibration(model, g):
    outs = constrained_generate(model, g, PROMPTS, max_new_tokens=16, pad_token_id=0)
    seqs = [p + o for p, o in zip(PROMPTS, outs)]
    width = max(map(len, seqs))
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    att = torch.zeros_like(ids)
    for r, s in enumerate(seqs):
        ids[r, : len(s)] = torch.tensor(s)
        att[r, : len(s)] = 1
    roles = assign_token_roles(ids, [len(p) for p in PROMPTS], g, attention_mask=att)
    return ids, att, roles


def test_role_stats_merge_of_halves_equals_whole():
    g = grammar()
    model = tiny(1)
    ids, att, roles = _calibration(model, g)
    whole = collect_role_stats(model, ids, roles, attention_mask=att)
    a = collect_role_stats(model, ids[:1], roles[:1], attention_mask=att[:1])
    b = collect_role_stats(model, ids[1:], roles[1:], attention_mask=att[1:])
    # The halves run the float32 forward at batch 1 and the whole at batch 2: different GEMM shapes, so
    # different CPU kernels, and activations that agree only to float32 rounding (AVX2 vs AVX-512: up to
    # 1.6e-7 relative). Each activation passes L layers of reductions of length <= d_ff, and a sum of
    # squares doubles a relative error:
    # bound: |sumsq_merged - sumsq_whole| <= 2 * L * (d + d_ff) * eps32 * sumsq (+ the same times max sumsq)
    cfg = model.config
    rel = (
        2 * cfg.num_hidden_layers * (cfg.hidden_size + cfg.intermediate_size) * torch.finfo(torch.float32).eps
    )
    for name in whole:
        merged = a[name].merge(b[name])
        assert torch.equal(merged.counts, whole[name].counts)  # same kernel: integer counts (exact sums)
        ref = whole[name].sumsq
        torch.testing.assert_close(merged.sumsq, ref, rtol=rel, atol=rel * float(ref.max()))
    first = whole[next(iter(whole))]
    assert first.counts.tolist() == [float((roles == c).sum()) for c in range(3)]


def test_role_stats_hand_computed():
    stats = RoleStats.zeros(2)
    x = torch.tensor([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5], [9.0, 9.0]])
    stats.add(x, torch.tensor([0, 1, 1, IGNORE]))
    assert stats.counts.tolist() == [1.0, 2.0, 0.0]
    assert stats.sumsq.tolist() == [[1.0, 4.0], [9.25, 1.25], [0.0, 0.0]]


def test_wanda_mask_equals_hand_computed_mask():
    weight = torch.tensor([[1.0, -2.0, 3.0, 0.5], [-4.0, 1.0, 0.1, 2.0]])
    stats = RoleStats.zeros(4)
    # ||X_j||_2 = [1, 3, 0.5, 2] from two tokens of different roles
    stats.add(torch.tensor([[1.0, 0.0, 0.3, 2.0], [0.0, 3.0, 0.4, 0.0]]), torch.tensor([0, 1]))
    scores = wanda_saliency(weight, stats)
    expected = torch.tensor([[1.0, 6.0, 1.5, 1.0], [4.0, 3.0, 0.05, 4.0]], dtype=torch.float64)
    torch.testing.assert_close(scores, expected)
    # sparsity 0.5 drops floor(0.5 * 4) = 2 per row, ties broken by column index (lower first)
    keep = saliency_mask(scores, 0.5)
    assert keep.tolist() == [[False, True, True, False], [True, False, False, True]]


def test_skim_with_uniform_unnormalised_weights_equals_wanda_exactly():
    torch.manual_seed(0)
    weight = torch.randn(6, 5)
    stats = RoleStats.zeros(5)
    stats.add(torch.randn(40, 5), torch.randint(0, 3, (40,)))
    uniform = {"context": 1.0, "decision": 1.0, "format": 1.0}
    # unit role weights multiply exactly (x * 1.0 == x), then the same sum over the 3 roles
    skim = skim_saliency(weight, stats, uniform, normalize=False)
    assert torch.equal(skim, wanda_saliency(weight, stats))  # same kernel
    # only decision weight: scores are Wanda on the decision tokens alone (up to the 1/n_decision scale)
    only = skim_saliency(weight, stats, {"context": 0.0, "decision": 1.0, "format": 0.0})
    dec = weight.abs().double() * stats.sumsq[1].sqrt()
    torch.testing.assert_close(only * stats.counts[1].sqrt(), dec)


def test_magnitude_saliency_is_abs():
    w = torch.tensor([[-1.0, 2.0]])
    assert magnitude_saliency(w).tolist() == [[1.0, 2.0]]


@settings(max_examples=20, deadline=None)
@given(
    s=st.floats(0.0, 0.99),
    method=st.sampled_from(["skim", "wanda", "magnitude"]),
    seed=st.integers(0, 100),
)
def test_pruned_model_keeps_exactly_the_requested_sparsity_per_row(s, method, seed):
    g = grammar()
    model = tiny(seed % 3)
    ids, att, roles = _calibration(model, g)
    stats = collect_role_stats(model, ids, roles, attention_mask=att)
    res = prune_model(model, stats, s, method)
    table = dict(model.named_modules())
    assert set(res.masks) == set(stats)
    for name, keep in res.masks.items():
        d_in = keep.shape[1]
        k = math.floor(s * d_in)
        assert ((~keep).sum(1) == k).all()
        assert res.sparsity[name] == k / d_in
        assert (table[name].weight[~keep] == 0).all()


def test_two_four_pattern():
    torch.manual_seed(1)
    scores = torch.rand(3, 8)
    keep = saliency_mask(scores, 0.5, pattern="2:4")
    groups = keep.reshape(3, 2, 4)
    assert (groups.sum(-1) == 2).all()
    top = scores.reshape(3, 2, 4).topk(2, -1).indices
    assert groups.gather(-1, top).all()
    with pytest.raises(ValueError, match="2:4"):
        saliency_mask(scores, 0.6, pattern="2:4")


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5, float("nan")])
def test_sparsity_outside_unit_interval_is_rejected(bad):
    model = tiny()
    with pytest.raises(ValueError, match="sparsity"):
        prune_model(model, None, bad, "magnitude")


def test_unknown_role_key_and_bad_method():
    w = torch.randn(2, 3)
    stats = RoleStats.zeros(3)
    with pytest.raises(KeyError, match="unknown role"):  # also a ValueError (UnknownRoleError)
        skim_saliency(w, stats, {"decisoin": 1.0})
    with pytest.raises(ValueError, match="method"):
        prune_model(tiny(), None, 0.5, "sparsegpt")
    with pytest.raises(TypeError, match="stats"):
        prune_model(tiny(), None, 0.5, "wanda")


# ---------------------------------------------------------------- constrained KL
def _kl_inputs(seed, b=2, length=3, v=7):
    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(b, length, v, generator=gen)
    t = torch.randn(b, length, v, generator=gen)
    valid = torch.rand(b, length, v, generator=gen) < 0.5
    valid[..., 0] = True
    w = torch.rand(b, length, generator=gen) + 0.1
    return s, t, valid, w


def test_constrained_kl_is_zero_with_a_single_valid_token():
    s, t, _, w = _kl_inputs(0)
    valid = torch.zeros_like(s, dtype=torch.bool)
    valid[..., 3] = True
    assert constrained_kl(s, t, valid, w).item() == 0.0
    assert constrained_kl(s, t, valid, w, divergence="jsd").item() == 0.0


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.floats(-50, 50), div=st.sampled_from(["kl", "jsd"]))
def test_constrained_kl_ignores_invalid_logits(seed, scale, div):
    s, t, valid, w = _kl_inputs(seed)
    noise = torch.randn(s.shape, generator=torch.Generator().manual_seed(seed + 1)) * scale
    a = constrained_kl(s, t, valid, w, divergence=div)
    b = constrained_kl(s + noise * ~valid, t - noise * ~valid, valid, w, divergence=div)
    assert a.item() == b.item()  # same kernel: invalid logits are masked out, the valid ones are unchanged


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), tau=st.floats(0.5, 3.0))
def test_constrained_kl_equals_full_vocabulary_kl_when_all_valid(seed, tau):
    s, t, _, w = _kl_inputs(seed)
    valid = torch.ones_like(s, dtype=torch.bool)
    ours = constrained_kl(s, t, valid, w, temperature=tau)
    per_pos = F.kl_div(
        torch.log_softmax(s / tau, -1), torch.log_softmax(t / tau, -1), log_target=True, reduction="none"
    ).sum(-1)
    torch.testing.assert_close(ours, (w * per_pos).sum() / w.sum(), rtol=1e-5, atol=1e-6)


def test_jsd_matches_trl_generalized_jsd():
    gkd = pytest.importorskip("trl.experimental.gkd")
    s, t, _, _ = _kl_inputs(4)
    valid = torch.ones_like(s, dtype=torch.bool)
    w = torch.ones(s.shape[:2])
    for beta in (0.1, 0.5, 0.9):
        ours = constrained_kl(s, t, valid, w, divergence="jsd", beta=beta)
        ref = gkd.GKDTrainer.generalized_jsd_loss(s, t, beta=beta, reduction="none").sum(-1).mean()
        torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-6)


def test_constrained_kl_argument_errors():
    s, t, valid, w = _kl_inputs(0)
    with pytest.raises(ValueError, match="vocabulary"):
        constrained_kl(s, t[..., :5], valid, w)
    with pytest.raises(ValueError, match="divergence"):
        constrained_kl(s, t, valid, w, divergence="tv")
    with pytest.raises(ValueError, match="weights"):
        constrained_kl(s, t, valid, -w)


# ---------------------------------------------------------------- distillation
@pytest.mark.parametrize("mode", ["skim", "standard"])
def test_masks_stay_exact_zeros_after_distillation_steps(mode):
    g = grammar()
    teacher = tiny(0)
    student = copy.deepcopy(teacher)
    res = prune_model(student, None, 0.6, "magnitude")
    dist = SKIMDistiller(student, teacher, g, res, mode=mode, lr=1e-2, max_new_tokens=16, seed=1)
    before = {n: p.clone() for n, p in student.named_parameters()}
    hist = dist.fit(iter([PROMPTS, PROMPTS]), 2)
    assert len(hist) == 2 and all(math.isfinite(h["loss"]) for h in hist)
    table = dict(student.named_modules())
    for name, keep in res.masks.items():
        assert (table[name].weight[~keep] == 0).all()
    assert any(not torch.equal(before[n], p) for n, p in student.named_parameters())  # same kernel: n/a, asserts a difference
    if mode == "skim":
        assert hist[0]["on_policy"] == 1.0 and hist[0]["decision_positions"] == 2 * len(PROMPTS)
    for p in teacher.parameters():
        assert p.grad is None


def test_distillation_is_deterministic():
    g = grammar()
    teacher = tiny(0)
    runs = []
    for _ in range(2):
        student = copy.deepcopy(teacher)
        res = prune_model(student, None, 0.5, "magnitude")
        SKIMDistiller(student, teacher, g, res, lr=1e-2, max_new_tokens=16, seed=3).fit(
            iter([PROMPTS] * 2), 2
        )
        runs.append([p.detach().clone() for p in student.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*runs))  # same kernel: rerun, same shapes and seed


def test_vocabulary_mismatch_is_rejected():
    g = grammar()
    teacher = tiny(0)
    student = build_tiny_lm("llama", vocab_size=len(VOCAB) + 3, seed=0, hidden_size=32, intermediate_size=64)
    with pytest.raises(ValueError, match="vocabularies differ"):
        SKIMDistiller(student, teacher, g, PruneResult(masks={}))


def _allreduce_worker(rank, world, port, path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    gen = torch.Generator().manual_seed(7)
    x, roles = torch.randn(10, 4, generator=gen), torch.randint(-1, 3, (10,), generator=gen)
    stats = RoleStats.zeros(4)
    stats.add(x[rank * 5 : (rank + 1) * 5], roles[rank * 5 : (rank + 1) * 5])
    stats.all_reduce()
    if rank == 0:
        torch.save({"counts": stats.counts, "sumsq": stats.sumsq}, path)
    dist.destroy_process_group()


def test_all_reduced_stats_equal_single_process(tmp_path):
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path = tmp_path / "stats.pt"
    mp.spawn(_allreduce_worker, args=(2, port, str(path)), nprocs=2, join=True)
    got = torch.load(path)
    gen = torch.Generator().manual_seed(7)
    x, roles = torch.randn(10, 4, generator=gen), torch.randint(-1, 3, (10,), generator=gen)
    ref = RoleStats.zeros(4)
    ref.add(x, roles)
    assert torch.equal(got["counts"], ref.counts)  # same kernel: integer counts (exact sums)
    # float64 sums of exact squares of float32 values, summed as two halves of 5 rows and then across
    # ranks vs as one sum of 10 rows: bound: n * eps64 * sum(x^2) with n = 10 rows
    bound = 10 * torch.finfo(torch.float64).eps
    torch.testing.assert_close(got["sumsq"], ref.sumsq, rtol=bound, atol=bound * float(ref.sumsq.max()))


@pytest.mark.parametrize("feat_scale", ["absolute", "teacher"])
def test_feature_term_equals_hand_computation(feat_scale):
    g = grammar()
    teacher = tiny(0)
    student = copy.deepcopy(teacher)
    res = prune_model(student, None, 0.5, "magnitude")
    before = copy.deepcopy(student)
    dist = SKIMDistiller(
        student, teacher, g, res, lr=1e-2, max_new_tokens=16, seed=1, on_policy=0.0, feat_scale=feat_scale
    )
    out = dist.step(PROMPTS)
    outputs = dist.teacher_outputs(PROMPTS)
    ids, att = _pad_sequences(PROMPTS, outputs, 0)
    with torch.no_grad():
        hs = before(input_ids=ids, attention_mask=att, output_hidden_states=True).hidden_states
        ht = teacher(input_ids=ids, attention_mask=att, output_hidden_states=True).hidden_states
    expected = 0.0
    for ell in dist.feat_layers:
        err = (hs[ell] - ht[ell]).pow(2).mean(-1)
        if feat_scale == "teacher":
            err = err / ht[ell].pow(2).mean(-1)
        # role means over the whole batch (context weight 0.5, decision 1.0, format 0.0)
        ctx_all = torch.cat([err[r, : len(p) - 1] for r, p in enumerate(PROMPTS)])
        dec_all = torch.cat(
            [
                err[r, len(p) - 1 : len(p) - 1 + len(o)][g.trace(o)[1] == 1]
                for r, (p, o) in enumerate(zip(PROMPTS, outputs))
            ]
        )
        expected += 0.5 * float(ctx_all.mean()) + 1.0 * float(dec_all.mean())
    assert out["feat"] == pytest.approx(expected, rel=1e-4)
    assert out["feat"] > 0


def test_feat_scale_is_checked():
    g = grammar()
    teacher = tiny(0)
    with pytest.raises(ValueError, match="feat_scale"):
        SKIMDistiller(copy.deepcopy(teacher), teacher, g, PruneResult(masks={}), feat_scale="relative")

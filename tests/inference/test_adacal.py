"""Tests of AdaCal sparse prefill: masks, metrics, policies, transformers integration."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.inference import adacal
from neurips26.inference.adacal import (
    DEFAULT_POLICIES,
    HEAD_DENSE,
    HEAD_DYNAMIC,
    HEAD_STATIC,
    AdaCalConfig,
    FeaturesReady,
    TaskDispatcher,
    TaskPolicy,
    a_shape_mask,
    block_density,
    calibrate_policies,
    calibrate_policies_on_model,
    dispatch_features,
    features_only,
    flex_block_mask,
    flexprefill_mask,
    last_stats,
    metrics_from_distribution,
    model_evaluator,
    plan_blocks,
    probe_metrics,
    prompt_features,
    register_adacal_attention,
    sparse_prefill_attention,
    task,
)


def _qkv(b=2, h=4, h_kv=2, n=70, d=8, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, n, d, generator=g).to(dtype)
    k = torch.randn(b, h_kv, n, d, generator=g).to(dtype)
    v = torch.randn(b, h_kv, n, d, generator=g).to(dtype)
    return q, k, v


def _dense_reference(q, k, v):
    rep = q.shape[1] // k.shape[1]
    ke, ve = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    return F.scaled_dot_product_attention(q, ke, ve, is_causal=True).transpose(1, 2)


# ------------------------------------------------------------------ sparse attention
@pytest.mark.parametrize(("n", "h_kv"), [(64, 4), (70, 2), (5, 1)])
def test_all_ones_mask_equals_causal_sdpa(n, h_kv):
    q, k, v = _qkv(n=n, h_kv=h_kv)
    nb = math.ceil(n / 16)
    for backend in ("masked", "gather", "flex"):
        out = sparse_prefill_attention(q, k, v, torch.ones(nb, nb, dtype=torch.bool), 16, backend=backend)
        assert out.shape == (2, n, 4, 8)
        torch.testing.assert_close(out, _dense_reference(q, k, v), atol=1e-5, rtol=1e-5)


def test_sparse_attention_matches_hand_masked_softmax():
    q, k, v = _qkv(b=1, h=2, h_kv=2, n=12, d=4)
    mask = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 1, 1]], dtype=torch.bool)  # row 2 drops block 0
    out = sparse_prefill_attention(q, k, v, mask, 4)
    # query 10 (block 2) sees keys 4..10 only
    scores = torch.einsum("hd,hkd->hk", q[0, :, 10], k[0, :, 4:11]) / 2.0
    expected = torch.einsum("hk,hkd->hd", scores.softmax(-1), v[0, :, 4:11])
    torch.testing.assert_close(out[0, 10], expected, atol=1e-6, rtol=1e-5)


def _bool_mask_reference(q, k, v, block_mask, block):
    """The boolean token mask (expanded blocks & tril, diagonal on) through one SDPA call."""
    b, h, n, _ = q.shape
    nb = math.ceil(n / block)
    m = block_mask
    while m.dim() < 4:
        m = m.unsqueeze(0)
    m = (m | torch.eye(nb, dtype=torch.bool)).expand(b, h, nb, nb)
    tok = m[:, :, :, None, :, None].expand(b, h, nb, block, nb, block).reshape(b, h, nb * block, nb * block)
    allowed = tok[..., :n, :n] & torch.ones(n, n, dtype=torch.bool).tril()
    rep = h // k.shape[1]
    ke, ve = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    return F.scaled_dot_product_attention(q, ke, ve, attn_mask=allowed).transpose(1, 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("n", "block"), [(64, 16), (53, 8), (5, 16)])
def test_masked_backend_additive_mask_equals_boolean_mask(dtype, n, block):
    """The fast path (additive mask of the query dtype, broadcast plans kept broadcast) computes exactly
    what a boolean token mask gives, bit for bit, for per-(batch, head), broadcast and 2-D plans."""
    q, k, v = _qkv(b=3, h=4, h_kv=2, n=n, dtype=dtype, seed=11)
    nb = math.ceil(n / block)
    g = torch.Generator().manual_seed(2)
    plans = (
        torch.rand(3, 4, nb, nb, generator=g) < 0.4,
        (torch.rand(nb, nb, generator=g) < 0.4).expand(3, 4, nb, nb),
        (torch.rand(1, 4, nb, nb, generator=g) < 0.4).expand(3, 4, nb, nb),
        torch.rand(nb, nb, generator=g) < 0.3,
    )
    for plan in plans:
        out = sparse_prefill_attention(q, k, v, plan, block, backend="masked")
        assert out.dtype == dtype and torch.isfinite(out).all()
        # same kernel: SDPA turns a boolean mask into this additive 0/-inf mask before its kernel
        assert torch.equal(out, _bool_mask_reference(q, k, v, plan, block))  # same kernel (see above)
    # broadcast and materialised copies of one plan give the same result
    plan = torch.rand(nb, nb, generator=g) < 0.5
    a = sparse_prefill_attention(q, k, v, plan.expand(3, 4, nb, nb), block)
    # same kernel: one SDPA call, the mask's strides differ, not its values or the arithmetic
    assert torch.equal(a, sparse_prefill_attention(q, k, v, plan.expand(3, 4, nb, nb).clone(), block))  # same kernel (see above)


@pytest.mark.parametrize("n", [48, 53])
def test_gather_and_masked_backends_agree(n):
    q, k, v = _qkv(b=2, h=4, h_kv=2, n=n)
    nb = math.ceil(n / 8)
    g = torch.Generator().manual_seed(5)
    mask = torch.rand(2, 4, nb, nb, generator=g) < 0.4
    a = sparse_prefill_attention(q, k, v, mask, 8, backend="masked")
    c = sparse_prefill_attention(q, k, v, mask, 8, backend="gather")
    torch.testing.assert_close(a, c, atol=1e-5, rtol=1e-5)
    # with a left-padding bool mask and an additive float mask
    pad = torch.ones(2, 1, n, n, dtype=torch.bool).tril()
    pad[1, :, :, :5] = False
    additive = torch.zeros(2, 1, n, n).masked_fill(~pad, torch.finfo(torch.float32).min)
    for am in (pad, additive):
        a = sparse_prefill_attention(q, k, v, mask, 8, attention_mask=am, backend="masked")
        c = sparse_prefill_attention(q, k, v, mask, 8, attention_mask=am, backend="gather")
        assert torch.isfinite(a).all() and torch.isfinite(c).all()
        torch.testing.assert_close(a[1, 5:], c[1, 5:], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(a[0], c[0], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="backend"):
        sparse_prefill_attention(q, k, v, mask, 8, backend="triton")


def test_sparse_attention_bf16_and_errors():
    q, k, v = _qkv(n=40, dtype=torch.bfloat16)
    out = sparse_prefill_attention(q, k, v, torch.ones(3, 3, dtype=torch.bool), 16)
    assert out.dtype == torch.bfloat16
    ref = _dense_reference(q.float(), k.float(), v.float())
    assert (out.float() - ref).abs().max() < 3e-2
    with pytest.raises(ValueError, match="block_size"):
        sparse_prefill_attention(q, k, v, torch.ones(3, 3, dtype=torch.bool), 0)
    with pytest.raises(ValueError, match="block_mask"):
        sparse_prefill_attention(q, k, v, torch.ones(2, 2, dtype=torch.bool), 16)
    with pytest.raises(TypeError, match="bool"):
        sparse_prefill_attention(q, k, v, torch.ones(3, 3), 16)
    with pytest.raises(ValueError, match="multiple"):
        sparse_prefill_attention(q, k[:, :1].expand(2, 3, 40, 8), v, torch.ones(3, 3, dtype=torch.bool), 16)


# ------------------------------------------------------------------ flex_attention backend
@pytest.mark.parametrize(("n", "block", "h_kv"), [(53, 8, 2), (64, 16, 4), (5, 16, 1)])
def test_flex_backend_equals_reference(n, block, h_kv):
    """Random block masks, GQA, a short tail block, bool and additive padding masks, bf16."""
    q, k, v = _qkv(b=2, h=4, h_kv=h_kv, n=n, seed=n)
    nb = math.ceil(n / block)
    mask = torch.rand(2, 4, nb, nb, generator=torch.Generator().manual_seed(n)) < 0.4
    ref = sparse_prefill_attention(q, k, v, mask, block, backend="masked")
    out = sparse_prefill_attention(q, k, v, mask, block, backend="flex")
    assert out.shape == (2, n, 4, 8)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    pad = torch.ones(2, 1, n, n, dtype=torch.bool).tril()
    pad[1, :, :, :3] = False  # left padding: rows 0..2 of item 1 see no key (attend to themselves)
    additive = torch.zeros(2, 1, n, n).masked_fill(~pad, torch.finfo(torch.float32).min)
    additive[0, 0, :, 0] += 0.7  # a non-trivial bias goes through score_mod
    for am in (pad, additive):
        ref = sparse_prefill_attention(q, k, v, mask, block, attention_mask=am, backend="masked")
        out = sparse_prefill_attention(q, k, v, mask, block, attention_mask=am, backend="flex")
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    qb, kb, vb = q.bfloat16(), k.bfloat16(), v.bfloat16()
    out = sparse_prefill_attention(qb, kb, vb, mask, block, backend="flex")
    assert out.dtype == torch.bfloat16
    ref = sparse_prefill_attention(q, k, v, mask, block, backend="masked")
    assert (out.float() - ref).abs().max() < 3e-2


def test_flex_block_mask_without_lookup_keeps_the_block_lists_and_drops_the_captured_mask():
    """lookup=False: the same partial/full block lists; mask_mod is the causal rule alone (no tensor
    captured, so one compiled kernel serves every plan of a shape)."""
    n, block = 70, 16
    plan = torch.rand(5, 5, generator=torch.Generator().manual_seed(3)) < 0.5
    a, b = flex_block_mask(plan, block, n), flex_block_mask(plan, block, n, lookup=False)
    for name in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices"):
        assert torch.equal(getattr(a, name), getattr(b, name))  # same kernel: integer block lists
    i = torch.arange(n)
    assert torch.equal(b.mask_mod(0, 0, i[:, None], i[None, :]), i[None, :] <= i[:, None])  # same kernel: bool mask
    assert b.mask_mod.__closure__ is None


@pytest.mark.slow
def test_compiled_flex_equals_reference_on_cpu_and_reuses_the_kernel():
    """backend="flex_compiled": torch.compile on CPU (inductor C++), within 1e-5 of the masked reference;
    a second plan of the same shape runs without recompiling."""
    import time

    n, block = 256, 64
    q, k, v = _qkv(b=1, h=4, h_kv=2, n=n, seed=1)
    for seed in (0, 1):
        mask = torch.rand(4, 4, 4, generator=torch.Generator().manual_seed(seed)) < 0.4
        start = time.perf_counter()
        out = sparse_prefill_attention(q, k, v, mask, block, backend="flex_compiled")
        took = time.perf_counter() - start
        ref = sparse_prefill_attention(q, k, v, mask, block, backend="masked")
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert took < 5.0  # the second plan reused the compiled kernel


def test_flex_block_mask_encodes_the_plan():
    from torch.nn.attention.flex_attention import BlockMask, create_mask

    n, block = 70, 16
    plan = a_shape_mask(n, block, 1, 1)
    bm = flex_block_mask(plan, block, n)
    assert isinstance(bm, BlockMask) and bm.shape == (1, 1, n, n)
    assert torch.equal(bm.to_dense()[0, 0].bool(), plan)  # same kernel: bool mask; partial + full blocks = the selected blocks
    assert torch.equal(bm.full_kv_num_blocks[0, 0], (plan.sum(-1) - 1).int())  # same kernel: integer counts; all but the diagonal
    # token level: the mask_mod reproduces block-expanded plan AND causal
    tok = create_mask(bm.mask_mod, 1, 1, n, n, device="cpu")[0, 0]
    i = torch.arange(n)
    expected = plan[i[:, None] // block, i[None, :] // block] & (i[None, :] <= i[:, None])
    assert torch.equal(tok, expected)  # same kernel: bool mask
    # an upper-triangular request is ignored, the diagonal is forced on
    weird = torch.zeros(5, 5, dtype=torch.bool)
    weird[0, 4] = True
    assert torch.equal(  # same kernel: bool mask
        flex_block_mask(weird, block, n).to_dense()[0, 0].bool(), torch.eye(5, dtype=torch.bool)
    )
    # a [nb, nb] BlockMask broadcasts over batch and heads inside flex_attention
    from torch.nn.attention.flex_attention import flex_attention

    q, k, v = _qkv(b=2, h=4, h_kv=4, n=n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        out = flex_attention(q, k, v, block_mask=bm).transpose(1, 2)
    torch.testing.assert_close(out, sparse_prefill_attention(q, k, v, plan, block), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="block_mask"):
        flex_block_mask(plan, block, 200)
    with pytest.raises(TypeError, match="bool"):
        flex_block_mask(plan.float(), block, n)
    with pytest.raises(ValueError, match="block_size"):
        flex_block_mask(plan, 0, n)


def test_config_backend_choice():
    assert AdaCalConfig(backend="flex").backend == "flex"
    with pytest.raises(ValueError, match="backend"):
        AdaCalConfig(backend="triton")


# ------------------------------------------------------------------ A-shape and metrics
def test_a_shape_mask_by_hand():
    m = a_shape_mask(80, 16, sink_blocks=1, local_blocks=1)
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [1, 1, 1, 0, 0],
            [1, 0, 1, 1, 0],
            [1, 0, 0, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(m, expected)  # same kernel: bool mask
    assert torch.isclose(block_density(m), torch.tensor(12 / 15))
    with pytest.raises(ValueError, match="block_size"):
        a_shape_mask(80, 0)


def test_metrics_uniform_onehot_and_local():
    nb = 10
    uniform = torch.full((1, 1, nb), 1 / nb)
    m = metrics_from_distribution(uniform, 1, 2)
    assert torch.isclose(m["entropy"], torch.tensor(1.0)).all()
    assert torch.isclose(m["concentration"], torch.tensor(2 / nb)).all()  # top k = max(2, ceil(0.4)) = 2
    assert torch.isclose(m["mid_coverage"], torch.tensor(6 / nb)).all()  # blocks 1..6
    onehot = torch.zeros(1, 1, nb)
    onehot[..., 4] = 1.0
    m = metrics_from_distribution(onehot, 1, 2)
    assert m["entropy"].item() == 0.0 and m["concentration"].item() == 1.0
    assert m["mid_coverage"].item() == 1.0
    local = torch.zeros(1, 1, nb)
    local[..., [0, 7, 8, 9]] = torch.tensor([0.4, 0.2, 0.2, 0.2])
    assert metrics_from_distribution(local, 1, 2)["mid_coverage"].item() == pytest.approx(0.0)


def test_probe_metrics_shapes_and_concentrated_attention():
    q, k, _ = _qkv(b=2, h=4, h_kv=2, n=100, d=8)
    m = probe_metrics(q, k, 16)
    assert m["probe_dist"].shape == (2, 4, 7)
    torch.testing.assert_close(m["probe_dist"].sum(-1), torch.ones(2, 4))
    for key in ("entropy", "concentration", "mid_coverage"):
        assert m[key].shape == (2, 4) and ((m[key] >= 0) & (m[key] <= 1)).all()
    # keys orthogonal to the queries except one strong key in the middle -> probe mass in its block
    q2 = torch.zeros(1, 1, 64, 4)
    q2[..., 0] = 1.0
    k2 = torch.zeros(1, 1, 64, 4)
    k2[0, 0, 20, 0] = 50.0
    m2 = probe_metrics(q2, k2, 8, sink_blocks=1, local_blocks=2)
    assert m2["probe_dist"][0, 0, 2] > 0.99 and m2["mid_coverage"].item() > 0.99
    assert m2["entropy"].item() < 0.05


# ------------------------------------------------------------------ plans
def _structured_qk(n=256, h=4, d=8, seed=0):
    q, k, _ = _qkv(b=2, h=h, h_kv=h, n=n, d=d, seed=seed)
    # heads 2, 3 attend strongly to a mid-context key
    q[:, 2:, :, 0] = 4.0
    k[:, 2:, 100, 0] = 12.0
    return q, k


@pytest.mark.parametrize("tag", ["structure", "mixed", "retrieval"])
def test_plan_invariants(tag):
    q, k = _structured_qk()
    cfg = AdaCalConfig(block_size=16)
    plan = plan_blocks(q, k, cfg, task=tag)
    nb = 16
    assert plan.mask.shape == (2, 4, nb, nb) and plan.task == tag
    assert not plan.mask.triu(1).any()  # nothing above the diagonal
    mandatory = a_shape_mask(256, 16, 1, 2)
    assert (plan.mask | ~mandatory).all()  # diagonal, sink and local always selected
    torch.testing.assert_close(plan.density, plan.mask.sum((-1, -2)).float() / (nb * (nb + 1) / 2))
    pol = DEFAULT_POLICIES[tag]
    cap = torch.maximum(torch.ceil(pol.beta_max * torch.arange(1, nb + 1)).long(), mandatory.sum(-1))
    dyn = plan.head_type == HEAD_DYNAMIC
    rows = plan.mask.sum(-1)  # [b, h, nb]
    assert (rows[dyn] <= cap).all()  # per-head budget
    static = plan.head_type == HEAD_STATIC
    assert (plan.mask[static] == mandatory).all()
    quota = round(cfg.dense_quota * 4)
    assert ((plan.head_type == HEAD_DENSE).sum(-1) <= quota).all()


def test_augmentation_depends_on_task():
    q, k = _structured_qk()
    # every head dynamic, no budget cap
    low = {t: TaskPolicy(0.0, 1.0, p.gamma, p.augment, 1.0) for t, p in DEFAULT_POLICIES.items()}
    cfg = AdaCalConfig(block_size=16, policies=low)
    s = plan_blocks(q, k, cfg, task="structure")
    r = plan_blocks(q, k, cfg, task="retrieval")
    assert (s.head_type == HEAD_DYNAMIC).all() and (r.head_type == HEAD_DYNAMIC).all()
    assert not s.augment_mask.any()
    assert r.augment_mask.any()
    # the top-m block of the probe (block 6 holds key 100) reaches the last query rows of heads 2, 3
    assert r.mask[:, 2:, -1, 6].all()
    # stride blocks (j - 1) % 8 == 0 in the mid zone of row 15: j = 1, 9
    assert r.augment_mask[:, :, 15, 9].all() and r.mask[:, :, 15, 9].all()
    assert r.density.mean() > s.density.mean()


def test_static_and_dense_heads():
    q, k = _structured_qk()
    all_static = {
        t: TaskPolicy(1.0, 1.0, p.gamma, p.augment, p.beta_max) for t, p in DEFAULT_POLICIES.items()
    }
    plan = plan_blocks(q, k, AdaCalConfig(block_size=16, policies=all_static))
    assert (plan.head_type == HEAD_STATIC).all()
    assert torch.equal(plan.mask, a_shape_mask(256, 16).expand(2, 4, 16, 16))  # same kernel: bool mask
    all_dense = {t: TaskPolicy(0.0, 0.0, p.gamma, p.augment, p.beta_max) for t, p in DEFAULT_POLICIES.items()}
    plan = plan_blocks(q, k, AdaCalConfig(block_size=16, policies=all_dense, dense_quota=0.5))
    assert ((plan.head_type == HEAD_DENSE).sum(-1) == 2).all()  # quota round(0.5 * 4) = 2
    dense_rows = plan.mask[plan.head_type == HEAD_DENSE]
    assert (plan.density[plan.head_type == HEAD_DENSE] == 1.0).all() and dense_rows.shape[0] == 4
    plan = plan_blocks(q, k, AdaCalConfig(block_size=16, policies=all_dense, dense_quota=0.0))
    assert not (plan.head_type == HEAD_DENSE).any()


def test_probe_confined_to_sink_and_local_has_zero_mid_coverage():
    # every query attends (almost) only to key 0 (the sink block): mid-zone coverage 0, entropy ~ 0
    n, block = 96, 16
    q = torch.zeros(1, 2, n, 4)
    q[..., 0] = 1.0
    k = torch.zeros(1, 2, n, 4)
    k[0, :, 0, 0] = 60.0
    m = probe_metrics(q, k, block, sink_blocks=1, local_blocks=2)
    assert m["mid_coverage"].max().item() < 1e-6
    assert m["entropy"].max().item() < 1e-3
    # the same keys with the strong key moved to the local zone (block 3 of 6): still 0
    k2 = torch.zeros(1, 2, n, 4)
    k2[0, :, 3 * block + 2, 0] = 60.0
    assert probe_metrics(q, k2, block, sink_blocks=1, local_blocks=2)["mid_coverage"].max().item() < 1e-6


def test_beta_max_budget_binds_for_dynamic_heads():
    q, k = _structured_qk()
    nb = 16
    # every head dynamic, gamma = 1 wants every causal block: the cap decides the row sizes
    pols = {t: TaskPolicy(0.0, 1.0, 1.0, "off", 0.3) for t in DEFAULT_POLICIES}
    plan = plan_blocks(q, k, AdaCalConfig(block_size=16, policies=pols, dense_quota=0.0), task="mixed")
    assert (plan.head_type == HEAD_DYNAMIC).all()
    mandatory = a_shape_mask(256, 16, 1, 2).sum(-1)
    cap = torch.maximum(torch.ceil(0.3 * torch.arange(1, nb + 1)).long(), mandatory)
    assert torch.equal(plan.mask.sum(-1), cap.expand(2, 4, nb))  # same kernel: integer counts; exactly the cap, never more
    assert (plan.density < 1.0).all()
    loose = {t: TaskPolicy(0.0, 1.0, 1.0, "off", 1.0) for t in DEFAULT_POLICIES}
    plan = plan_blocks(q, k, AdaCalConfig(block_size=16, policies=loose, dense_quota=0.0), task="mixed")
    assert (plan.density == 1.0).all()  # gamma = 1 with no cap keeps every causal block


def test_plan_accepts_bf16():
    q, k = _structured_qk()
    plan32 = plan_blocks(q, k, AdaCalConfig(block_size=16), task="retrieval")
    plan16 = plan_blocks(q.bfloat16(), k.bfloat16(), AdaCalConfig(block_size=16), task="retrieval")
    assert plan16.mask.shape == plan32.mask.shape and plan16.metrics["entropy"].dtype == torch.float32
    assert not plan16.mask.triu(1).any()
    # the strong mid-context key dominates heads 2, 3 in both precisions
    assert torch.equal(plan16.head_type[:, 2:], plan32.head_type[:, 2:])  # same kernel: integer head types; the planted key dominates heads 2-3 in either precision


def test_too_few_blocks_falls_back_to_dense_with_warning():
    q, k, _ = _qkv(n=40)
    with pytest.warns(UserWarning, match="dense"):
        plan = plan_blocks(q, k, AdaCalConfig(block_size=16))
    assert (plan.density == 1.0).all()


def test_plan_errors():
    q, k, _ = _qkv(n=64)
    with pytest.raises(ValueError, match="task"):
        plan_blocks(q, k, AdaCalConfig(block_size=8), task="summarise")
    with pytest.raises(ValueError, match="task"):
        with task("poetry"):
            pass
    with pytest.raises(ValueError, match="block_size"):
        AdaCalConfig(block_size=0)
    with pytest.raises(ValueError, match="gamma"):
        TaskPolicy(0.1, 0.9, 0.0, "off", 0.5)
    with pytest.raises(ValueError, match="augment"):
        TaskPolicy(0.1, 0.9, 0.9, "always", 0.5)
    with pytest.raises(ValueError, match="policies"):
        AdaCalConfig(policies={"mixed": DEFAULT_POLICIES["mixed"]})
    with pytest.raises(TypeError, match="config"):
        plan_blocks(q, k, {"block_size": 8})
    with pytest.raises(ValueError, match="4-D"):
        plan_blocks(q[0], k, AdaCalConfig(block_size=8))


@settings(max_examples=10, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=150),
    block=st.sampled_from([4, 8, 16]),
    b=st.integers(1, 2),
    gqa=st.sampled_from([1, 2]),
    seed=st.integers(0, 1000),
    tag=st.sampled_from(["structure", "mixed", "retrieval"]),
)
def test_plan_property(n, block, b, gqa, seed, tag):
    q, k, v = _qkv(b=b, h=4, h_kv=4 // gqa, n=n, d=4, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        plan = plan_blocks(q, k, AdaCalConfig(block_size=block), task=tag)
    nb = math.ceil(n / block)
    eye = torch.eye(nb, dtype=torch.bool)
    assert (plan.mask & eye).sum((-1, -2)).eq(nb).all()
    assert not plan.mask.triu(1).any()
    assert ((plan.density > 0) & (plan.density <= 1)).all()
    out = sparse_prefill_attention(q, k, v, plan.mask, block)
    assert out.shape == (b, n, 4, 4) and torch.isfinite(out).all()
    fp = flexprefill_mask(q, k, block)
    assert (fp & eye).sum((-1, -2)).eq(nb).all() and not fp.triu(1).any()


def test_flexprefill_patterns():
    q, k = _structured_qk()
    mask, qa = flexprefill_mask(q, k, 16, gamma=0.9, tau=0.1, return_pattern=True)
    assert mask.shape == (2, 4, 16, 16) and qa.shape == (2, 4)
    # tau = 1 forces the query-aware pattern everywhere, tau = 0 the vertical-slash pattern
    _, qa1 = flexprefill_mask(q, k, 16, tau=1.0, return_pattern=True)
    _, qa0 = flexprefill_mask(q, k, 16, tau=0.0, return_pattern=True)
    assert qa1.all() and not qa0.any()
    vs = flexprefill_mask(q, k, 16, tau=0.0)
    # heads 2, 3 put their probe mass on key 100 (block 6): a vertical line covering every row below
    assert vs[:, 2:, 6:, 6].all()
    full = flexprefill_mask(q, k, 16, gamma=1.0, tau=0.0)
    assert block_density(full).min() >= block_density(vs).min()
    with pytest.raises(ValueError, match="gamma"):
        flexprefill_mask(q, k, 16, gamma=0.0)


# ------------------------------------------------------------------ dispatcher
def test_dispatcher_fit_predict_save_load(tmp_path):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 1, (20, 7)), rng.normal(3, 1, (20, 7))])
    y = ["structure"] * 20 + ["retrieval"] * 20
    d = TaskDispatcher(query_marker_ids=(5,)).fit(x, y)
    assert d.predict(x) == y
    d.save(tmp_path / "d.json")
    d2 = TaskDispatcher.load(tmp_path / "d.json")
    np.testing.assert_allclose(d2.predict_proba(x), d.predict_proba(x))
    assert d2.query_marker_ids == (5,)
    with pytest.raises(RuntimeError, match="fitted"):
        TaskDispatcher().predict(x)
    with pytest.raises(ValueError, match="labels"):
        TaskDispatcher().fit(x[:2], ["structure", "chat"])
    with pytest.raises(ValueError, match="columns"):
        d.predict(x[:, :3])


def test_prompt_and_dispatch_features():
    f = prompt_features(torch.tensor([[5, 6, 5, 6, 7]]), query_marker_ids=(7,))
    np.testing.assert_allclose(f, [[1 / 4, 3 / 5, 1.0]])
    q, k, _ = _qkv(b=1, n=64)
    feats = dispatch_features(probe_metrics(q, k, 8), torch.tensor([[5, 6, 5, 6, 7]]))
    assert feats.shape == (1, 7) and np.isfinite(feats).all()


# ------------------------------------------------------------------ transformers integration
@pytest.fixture(scope="module")
def tiny_model():
    from neurips26.common.models import build_tiny_lm

    model = build_tiny_lm("llama", vocab_size=64, seed=0, max_position_embeddings=512).eval()
    for method in adacal.METHODS:
        register_adacal_attention(AdaCalConfig(block_size=16), name=f"test_adacal_{method}", method=method)
    return model


def _logits(model, impl, ids, **kw):
    model.set_attn_implementation(impl)
    with torch.no_grad():
        return model(ids, **kw).logits


def test_dense_method_matches_eager_and_sdpa(tiny_model):
    ids = torch.randint(4, 64, (2, 150), generator=torch.Generator().manual_seed(1))
    ref = _logits(tiny_model, "eager", ids)
    out = _logits(tiny_model, "test_adacal_dense", ids)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert last_stats()["density"] == 1.0
    # padded batch (left padding) also matches on the real tokens
    am = torch.ones(2, 150, dtype=torch.long)
    am[1, :23] = 0
    ref = _logits(tiny_model, "eager", ids, attention_mask=am)
    out = _logits(tiny_model, "test_adacal_dense", ids, attention_mask=am)
    torch.testing.assert_close(out[0], ref[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out[1, 23:], ref[1, 23:], atol=1e-5, rtol=1e-5)


def test_sparse_methods_run_and_report(tiny_model):
    ids = torch.randint(4, 64, (1, 200), generator=torch.Generator().manual_seed(2))
    ref = _logits(tiny_model, "eager", ids)
    for method in ("adacal", "a_shape", "flexprefill"):
        with task("retrieval"):
            out = _logits(tiny_model, f"test_adacal_{method}", ids)
        stats = last_stats()
        assert torch.isfinite(out).all() and out.shape == ref.shape
        assert len(stats["layers"]) == 2 and 0 < stats["density"] <= 1
        # the first block of queries sees only the diagonal block in every method: identical logits
        torch.testing.assert_close(out[:, :16], ref[:, :16], atol=1e-5, rtol=1e-5)
    assert stats["method"] == "flexprefill"


def test_decode_is_dense_and_generation_matches(tiny_model):
    ids = torch.randint(4, 64, (1, 40), generator=torch.Generator().manual_seed(3))
    tiny_model.set_attn_implementation("test_adacal_a_shape")
    from transformers import DynamicCache

    with torch.no_grad():
        cache = DynamicCache(config=tiny_model.config)
        tiny_model(ids, cache=cache)
        step = tiny_model(ids[:, -1:], cache=cache).logits
        tiny_model.set_attn_implementation("sdpa")
        cache2 = DynamicCache(config=tiny_model.config)
        tiny_model(ids, cache=cache2)
        step2 = tiny_model(ids[:, -1:], cache=cache2).logits
    # 40 tokens / 16 = 3 blocks <= sink + local + 1: a_shape prefill is dense, decode is plain sdpa
    torch.testing.assert_close(step, step2, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        tiny_model.set_attn_implementation("eager")
        g1 = tiny_model.generate(ids, max_new_tokens=6, do_sample=False)
        tiny_model.set_attn_implementation("test_adacal_dense")
        g2 = tiny_model.generate(ids, max_new_tokens=6, do_sample=False)
        tiny_model.set_attn_implementation("eager")
        logits = tiny_model(g1).logits[0, ids.shape[1] - 1 : -1]  # the steps that chose the 6 tokens
    # greedy tokens of two attention implementations (logits equal up to rounding): a portable equality
    # because every step's top-2 logit gap exceeds twice the bound L (d + d_ff + T) eps32 max|logit|
    cfg = tiny_model.config
    n = cfg.num_hidden_layers * (cfg.hidden_size + cfg.intermediate_size + g1.shape[1])
    top2 = logits.topk(2, dim=-1).values
    assert (top2[:, 0] - top2[:, 1]).min() > 2 * n * torch.finfo(torch.float32).eps * logits.abs().max()
    assert torch.equal(g1, g2)  # same kernel: integer tokens, guarded by the margin check above


def test_decode_path_calls_sdpa_exactly():
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    name = register_adacal_attention(AdaCalConfig(block_size=4), name="test_adacal_decode")
    fn = AttentionInterface._global_mapping[name]

    class M(torch.nn.Module):
        num_key_value_groups = 2
        layer_idx = 0
        is_causal = True

    q = torch.randn(2, 4, 1, 8)
    k = torch.randn(2, 2, 30, 8)
    v = torch.randn(2, 2, 30, 8)
    out, _ = fn(M(), q, k, v, None, scaling=0.3)
    ref, _ = sdpa_attention_forward(M(), q, k, v, None, scaling=0.3)
    assert torch.equal(out, ref)  # same kernel: the decode path is transformers' sdpa_attention_forward


def test_dispatcher_in_the_loop(tiny_model):
    ids = torch.randint(4, 64, (1, 128), generator=torch.Generator().manual_seed(4))
    register_adacal_attention(AdaCalConfig(block_size=16), name="test_adacal_features")
    tiny_model.set_attn_implementation("test_adacal_features")
    with torch.no_grad(), features_only(), task(None, input_ids=ids):
        with pytest.raises(FeaturesReady) as info:
            tiny_model(ids)
    feats = info.value.features
    assert feats.shape == (1, 7)
    disp = TaskDispatcher().fit(np.concatenate([feats, feats + 1.0]), ["retrieval", "structure"])
    register_adacal_attention(AdaCalConfig(block_size=16), name="test_adacal_disp", dispatcher=disp)
    tiny_model.set_attn_implementation("test_adacal_disp")
    with torch.no_grad(), task(None, input_ids=ids):
        tiny_model(ids)
    assert last_stats()["task"] == "retrieval"
    with torch.no_grad(), task("structure"):
        tiny_model(ids)
    assert last_stats()["task"] == "structure"  # an explicit tag wins over the dispatcher


def test_register_errors():
    with pytest.raises(ValueError, match="method"):
        register_adacal_attention(AdaCalConfig(), method="oracle")
    with pytest.raises(ValueError, match="name"):
        register_adacal_attention(AdaCalConfig(), name="sdpa")
    with pytest.raises(TypeError, match="config"):
        register_adacal_attention({"block_size": 4})


def test_flex_backend_in_the_model_matches_reference(tiny_model):
    ids = torch.randint(4, 64, (2, 150), generator=torch.Generator().manual_seed(7))
    am = torch.ones(2, 150, dtype=torch.long)
    am[1, :11] = 0
    for method in ("adacal", "a_shape"):
        register_adacal_attention(AdaCalConfig(block_size=16), name="test_ref_backend", method=method)
        register_adacal_attention(
            AdaCalConfig(block_size=16, backend="flex"), name="test_flex_backend", method=method
        )
        with task("retrieval"):
            ref = _logits(tiny_model, "test_ref_backend", ids, attention_mask=am)
            dens_ref = last_stats()["density"]
            out = _logits(tiny_model, "test_flex_backend", ids, attention_mask=am)
        assert last_stats()["density"] == dens_ref < 1.0
        torch.testing.assert_close(out[0], ref[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out[1, 11:], ref[1, 11:], atol=1e-5, rtol=1e-5)


def test_adacal_batch_rows_are_planned_independently(tiny_model):
    """batch > 1 with left padding: the unpadded row gives exactly its solo result."""
    g = torch.Generator().manual_seed(8)
    ids = torch.randint(4, 64, (2, 160), generator=g)
    am = torch.ones(2, 160, dtype=torch.long)
    am[1, :40] = 0
    with task("retrieval"):
        both = _logits(tiny_model, "test_adacal_adacal", ids, attention_mask=am)
        dens_both = np.array(last_stats()["layers"][0]["density"])
        solo = _logits(tiny_model, "test_adacal_adacal", ids[:1])
        dens_solo = np.array(last_stats()["layers"][0]["density"])
    torch.testing.assert_close(both[0], solo[0], atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(dens_both[0], dens_solo[0])
    assert torch.isfinite(both[1, 40:]).all()


# ------------------------------------------------------------------ calibration (grid search)
def _synthetic(opt=(0.2, 0.9), slope=1.0):
    """Accuracy peaks at ``opt``; density grows with gamma and falls with theta_mid."""
    calls = []

    def evaluate(task_name, pol):
        calls.append((task_name, pol.theta_mid, pol.gamma))
        acc = 1.0 - abs(pol.theta_mid - opt[0]) - abs(pol.gamma - opt[1])
        dens = slope * (0.3 + 0.5 * pol.gamma - 0.5 * pol.theta_mid)
        return acc, dens

    return evaluate, calls


def test_calibration_finds_the_known_optimum():
    evaluate, calls = _synthetic()
    pols, table = calibrate_policies(
        evaluate, (0.1, 0.2, 0.3), (0.8, 0.9, 0.95), density_cap=1.0, tasks=("retrieval",), return_table=True
    )
    assert (pols["retrieval"].theta_mid, pols["retrieval"].gamma) == (0.2, 0.9)
    # the other fields and the other tasks keep the base (default) policy
    for f in ("theta_h", "augment", "beta_max"):
        assert getattr(pols["retrieval"], f) == getattr(DEFAULT_POLICIES["retrieval"], f)
    assert pols["structure"] == DEFAULT_POLICIES["structure"] and pols["mixed"] == DEFAULT_POLICIES["mixed"]
    assert len(calls) == 9 and {c[0] for c in calls} == {"retrieval"}
    assert len(table) == 9 and sum(r["chosen"] for r in table) == 1
    assert AdaCalConfig(policies=pols).policies["retrieval"].gamma == 0.9


def test_calibration_respects_the_density_cap():
    evaluate, _ = _synthetic()
    # density(0.2, 0.9) = 0.65 > cap 0.55; feasible points: density <= 0.55
    pols, table = calibrate_policies(
        evaluate, (0.1, 0.2, 0.3), (0.8, 0.9, 0.95), density_cap=0.55, tasks=("structure",), return_table=True
    )
    feas = [r for r in table if r["feasible"]]
    assert all(r["density"] <= 0.55 for r in feas) and len(feas) < len(table)
    best = max(r["accuracy"] for r in feas)
    chosen = next(r for r in table if r["chosen"])
    assert chosen["feasible"] and chosen["accuracy"] == best
    assert (pols["structure"].theta_mid, pols["structure"].gamma) == (0.3, 0.8)  # acc 0.8, dens 0.5


def test_calibration_without_feasible_point_keeps_the_default():
    evaluate, _ = _synthetic(slope=10.0)
    with pytest.warns(UserWarning, match="density_cap"):
        pols, table = calibrate_policies(
            evaluate, (0.1, 0.2), (0.8, 0.9), density_cap=0.5, tasks=("mixed", "retrieval"), return_table=True
        )
    assert pols == dict(DEFAULT_POLICIES)
    assert not any(r["chosen"] for r in table) and len(table) == 8


def test_calibration_tie_breaking_is_deterministic():
    # constant accuracy: lowest density wins
    pols = calibrate_policies(lambda t, p: (0.5, p.gamma), (0.1, 0.2), (0.8, 0.9), 1.0, tasks=("mixed",))
    assert pols["mixed"].gamma == 0.8 and pols["mixed"].theta_mid == 0.1  # then closest to 0.15: tie
    # ... between theta 0.1 and 0.2 (both 0.05 from the default 0.15): grid order picks the first
    pols = calibrate_policies(lambda t, p: (0.5, p.gamma), (0.2, 0.1), (0.8, 0.9), 1.0, tasks=("mixed",))
    assert pols["mixed"].theta_mid == 0.2
    # equal accuracy and density: the point closest to the default (0.15, 0.90) wins
    pols = calibrate_policies(lambda t, p: (1.0, 0.1), (0.0, 0.15, 0.5), (0.5, 0.9), 1.0, tasks=("mixed",))
    assert (pols["mixed"].theta_mid, pols["mixed"].gamma) == (0.15, 0.9)


def test_calibration_rejects_bad_input():
    ok = lambda t, p: (1.0, 0.5)  # noqa: E731
    with pytest.raises(ValueError, match="grid_theta_mid"):
        calibrate_policies(ok, (), (0.9,), 0.5)
    with pytest.raises(ValueError, match="grid_theta_mid"):
        calibrate_policies(ok, (1.5,), (0.9,), 0.5)
    with pytest.raises(ValueError, match="grid_gamma"):
        calibrate_policies(ok, (0.1,), (0.0,), 0.5)
    with pytest.raises(ValueError, match="grid_gamma"):
        calibrate_policies(ok, (0.1,), (0.9, 0.9), 0.5)
    with pytest.raises(ValueError, match="grid_gamma"):
        calibrate_policies(ok, (0.1,), (float("nan"),), 0.5)
    with pytest.raises(TypeError, match="grid_gamma"):
        calibrate_policies(ok, (0.1,), 0.9, 0.5)
    with pytest.raises(ValueError, match="density_cap"):
        calibrate_policies(ok, (0.1,), (0.9,), 0.0)
    with pytest.raises(ValueError, match="tasks"):
        calibrate_policies(ok, (0.1,), (0.9,), 0.5, tasks=("poetry",))
    with pytest.raises(ValueError, match="tasks"):
        calibrate_policies(ok, (0.1,), (0.9,), 0.5, tasks=())
    with pytest.raises(TypeError, match="evaluate"):
        calibrate_policies(None, (0.1,), (0.9,), 0.5)
    with pytest.raises(ValueError, match="evaluate"):
        calibrate_policies(lambda t, p: 1.0, (0.1,), (0.9,), 0.5)
    with pytest.raises(ValueError, match="non-finite"):
        calibrate_policies(lambda t, p: (float("nan"), 0.5), (0.1,), (0.9,), 0.5)
    with pytest.raises(ValueError, match="base_policies"):
        calibrate_policies(ok, (0.1,), (0.9,), 0.5, base_policies={"mixed": DEFAULT_POLICIES["mixed"]})


def test_model_calibration_on_tiny_model(tiny_model):
    g = torch.Generator().manual_seed(9)
    prompts = [torch.randint(4, 64, (1, 128), generator=g) for _ in range(2)]
    tiny_model.set_attn_implementation("sdpa")
    with torch.no_grad():  # answers = the dense model's own next token
        answers = [int(tiny_model(p).logits[0, -1].argmax()) for p in prompts]
    examples = {"retrieval": list(zip(prompts, answers))}
    cfg = AdaCalConfig(block_size=16)
    evaluate = model_evaluator(tiny_model, examples, cfg, max_new_tokens=2)
    full = TaskPolicy(0.0, 1.0, 1.0, "off", 1.0)  # every head dynamic, every block: dense
    acc, dens = evaluate("retrieval", full)
    assert (acc, dens) == (1.0, 1.0)
    sparse = TaskPolicy(0.0, 1.0, 0.3, "off", 0.2)
    acc_s, dens_s = evaluate("retrieval", sparse)
    assert 0.0 <= acc_s <= 1.0 and dens_s < 1.0
    assert tiny_model.config._attn_implementation == "sdpa"  # restored
    with pytest.raises(ValueError, match="no calibration examples"):
        evaluate("structure", full)
    pols, table = calibrate_policies_on_model(
        tiny_model, examples, (0.0, 0.5), (0.5, 1.0), density_cap=0.9, config=cfg, return_table=True
    )
    assert len(table) == 4 and set(pols) == set(DEFAULT_POLICIES)
    assert pols["structure"] == DEFAULT_POLICIES["structure"]
    chosen = [r for r in table if r["chosen"]]
    assert len(chosen) <= 1 and all(r["density"] <= 0.9 for r in chosen)
    with pytest.raises(ValueError, match="examples"):
        model_evaluator(tiny_model, {}, cfg)
    with pytest.raises(ValueError, match="task"):
        model_evaluator(tiny_model, {"chat": examples["retrieval"]}, cfg)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("where", ["q", "k", "v"])
def test_nonfinite_inputs_are_named(dtype, bad, where):
    # the one-pass aminmax check rejects exactly what isfinite(x).all() rejects, naming the tensor
    from neurips26.inference.adacal import sparse_prefill_attention

    g = torch.Generator().manual_seed(0)
    t = {n: torch.randn(1, 2, 16, 8, generator=g).to(dtype) for n in "qkv"}
    mask = torch.ones(4, 4, dtype=torch.bool)
    sparse_prefill_attention(t["q"], t["k"], t["v"], mask, 4)  # finite: accepted
    t[where][0, 1, 7, 3] = bad
    with pytest.raises(ValueError, match=f"{where} contains NaN or inf"):
        sparse_prefill_attention(t["q"], t["k"], t["v"], mask, 4)

"""Tests of ADKV: the EMA delta quantiser, its cache, metadata accounting and calibration."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from neurips26.inference.adkv import (
    ADKVCache,
    ADKVConfig,
    ADKVLayer,
    ADKVQuantizer,
    GroupwiseStaticCache,
    adkv_memory_formula,
    calibrate_adkv,
    calibrate_streams,
    index_bits,
    metadata_bits,
    select_outlier_channels,
)
from neurips26.inference.adkv.calibrate import _attention
from neurips26.inference.adkv.outliers import _pack_indices, _unpack_indices


def tiny_model(seed=0, kv_heads=2):
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        max_position_embeddings=256,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).eval()


def drift_stream(T=256, d=16, lead=(2, 3), seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(T, dtype=torch.float32).unsqueeze(-1)
    amp = torch.rand(*lead, 1, d, generator=g) * 3
    omega = torch.rand(d, generator=g) * 0.1
    phase = torch.rand(d, generator=g) * 6
    return amp * torch.cos(omega * t + phase) + 0.5 + 0.05 * torch.randn(*lead, T, d, generator=g)


# ----------------------------------------------------------------------------------------- quantiser
@pytest.mark.parametrize("bits", [2, 3, 4])
def test_decode_encode_equals_simulate_bitwise(bits):
    x = drift_stream()
    q = ADKVQuantizer(16, ADKVConfig(bits=bits))
    state = q.init_state(x[..., :16, :])
    codes, _ = q.encode(x, state)
    assert codes.shape == (2, 3, 256, math.ceil(16 * bits / 8)) and codes.dtype == torch.uint8
    assert torch.equal(q.decode(codes, 256, state), q.simulate(x, state))  # same kernel: the same float64 elementwise steps in the encoder's order; cumsum is sequential


def test_encoding_continues_across_chunks_and_decoder_replays_states():
    x = drift_stream(T=120)
    q = ADKVQuantizer(16, ADKVConfig(bits=3))
    s0 = q.init_state(x[..., :16, :])
    full, end = q.encode(x, s0)
    c1, e1 = q.encode(x[..., :50, :], s0)
    c2, e2 = q.encode(x[..., 50:, :], e1)
    assert torch.equal(torch.cat([c1, c2], -2), full)  # same kernel: integer codes; chunks run the same per-token recurrence
    assert torch.equal(e2.log_acc, end.log_acc) and torch.equal(e2.dsum, end.dsum) and e2.t == 120  # same kernel: the same per-token recurrence, continued from the state


def test_error_bound_unsaturated_codes():
    x = drift_stream(seed=1).double()
    cfg = ADKVConfig(bits=3)
    q = ADKVQuantizer(16, cfg)
    state = q.init_state(x[..., :16, :])
    codes, xh, _ = q.encode_raw(x, state)
    # recover s_t from the recurrence: x_hat - z = (q - o) s, and z from x_hat via the EMA
    z = state.z1.double().clone()
    eta_z = torch.tensor(cfg.eta_z, dtype=torch.float16).double()
    ok = (codes > 0) & (codes < 7)
    errs, steps = [], []
    for t in range(x.shape[-2]):
        d = codes[..., t, :].double() - cfg.offset + cfg.half
        s = torch.where(d != 0, (xh[..., t, :] - z) / d, torch.full_like(z, float("nan")))
        errs.append((x[..., t, :] - xh[..., t, :]).abs())
        steps.append(s)
        z = z + eta_z * (xh[..., t, :] - z)
    err, step = torch.stack(errs, -2), torch.stack(steps, -2)
    sel = ok & torch.isfinite(step)
    assert sel.sum() > 1000
    assert bool((err[sel] <= step[sel] / 2 + 1e-9).all())


@pytest.mark.parametrize(("levels", "T"), [("midtread", 64), ("midrise", 256)])
def test_constant_input_error_vanishes_and_8bit_is_accurate(levels, T):
    # midtread reconstructs a constant exactly (code 0 = the prediction); midrise levels sit at
    # z +- s/2, so the error decays with the step, by (1 - eta_s) + eta_s gamma / (2 o) = 0.95 per token
    g = torch.Generator().manual_seed(0)
    x = torch.full((1, 1, T, 4), 2.5) + torch.linspace(0, 1, 4)
    x[..., :8, :] += torch.randn(1, 1, 8, 4, generator=g)  # varied start, constant afterwards
    for eta_z, final in ((0.1, 0.1), (0.5, 1e-2)):
        q = ADKVQuantizer(4, ADKVConfig(bits=2, eta_z=eta_z, levels=levels))
        err = (x - q.simulate(x, q.init_state(x[..., :16, :]))).abs().amax(-1)[0, 0]
        assert err[-1] < err[8] / 4 and err[-1] < final
    y = drift_stream(seed=2)
    q8 = ADKVQuantizer(16, ADKVConfig(bits=8))
    yh = q8.simulate(y, q8.init_state(y[..., :16, :]))
    assert ((y - yh).norm() / y.norm()) < 1e-2


def test_ste_gradients_reach_eta_and_gamma():
    x = drift_stream(T=40)
    params = ADKVConfig(bits=2).default_params(16, (3,)).requires_grad_(True)
    q = ADKVQuantizer(16, ADKVConfig(bits=2), params)
    xh = q.simulate(x, q.init_state(x[..., :16, :]), differentiable=True)
    (xh - x).pow(2).mean().backward()
    g = params.grad
    assert g is not None and torch.isfinite(g).all()
    assert g[:, 0].abs().sum() > 0 and g[:, 1].abs().sum() > 0 and g[:, 2].abs().sum() > 0


def test_quantizer_errors():
    with pytest.raises(ValueError, match="bits must lie in"):
        ADKVConfig(bits=9)
    with pytest.raises(ValueError, match="bits must lie in"):
        ADKVConfig(bits=0)
    with pytest.raises(ValueError, match="eta_z"):
        ADKVConfig(eta_z=1.0)
    with pytest.raises(ValueError, match="eta_s"):
        ADKVConfig(eta_s=0.0)
    with pytest.raises(ValueError, match="storage"):
        ADKVConfig(storage="disk")
    q = ADKVQuantizer(4, ADKVConfig(bits=2))
    with pytest.raises(RuntimeError, match="initial state"):
        q.decode(torch.zeros(1, 3, 1, dtype=torch.uint8), 3, None)
    with pytest.raises(ValueError, match="channels"):
        ADKVQuantizer(4, ADKVConfig(), ADKVConfig().default_params(5))
    bad = ADKVConfig().default_params(4)
    bad[0, 0] = 1.5
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        ADKVQuantizer(4, ADKVConfig(), bad)


# ---------------------------------------------------------------------------------------- metadata
def test_metadata_independent_of_length_and_static_linear():
    a = metadata_bits("adkv", 128, 64, 3, 30)
    assert a == metadata_bits("adkv", 4096, 64, 3, 30) == 2 * 5 * 16 * 64 * 3 * 30
    s = [metadata_bits("static", T, 64, 3, 30, group_size=32, value_group_size=32) for T in (32, 64, 128)]
    assert s[1] == 2 * s[0] and s[2] == 4 * s[0]
    # the 1K-token ratio of the formulas: static G=32 / ADKV = T / 80 for d = 64
    ratio = metadata_bits("static", 1024, 64, 1, 1, group_size=32, value_group_size=32) / metadata_bits(
        "adkv", 1024, 64, 1, 1
    )
    assert ratio == pytest.approx(12.8)


def test_memory_report_matches_formulas():
    model = tiny_model()
    ids = torch.randint(1, 64, (2, 30), generator=torch.Generator().manual_seed(0))
    cache = ADKVCache(model.config, ADKVConfig(bits=3))
    with torch.no_grad():
        model(ids, cache=cache)
        model(ids[:, :3], cache=cache)
    layer = cache.layers[0]
    formula = adkv_memory_formula(33, 2, 2, 16, 3, sink_tokens=1)
    assert layer.memory_bytes(2) == {**formula, "elements": 2 * 2 * 2 * 16 * 33}
    assert formula["payload"] == 2 * 2 * 32 * math.ceil(2 * 16 * 3 / 8) + 2 * 2 * 2 * 1 * 16 * 2  # + fp16 sink
    assert cache.memory_bytes(2)["metadata"] * 8 == metadata_bits("adkv", 33, 16, 2, 2, batch=2, sink_tokens=1)
    static = GroupwiseStaticCache(model.config, bits=2, group_size=8, value_group_size=8)
    with torch.no_grad():
        model(ids, cache=static)
    assert static.memory_bytes(2)["metadata"] * 8 == metadata_bits(
        "static", 30, 16, 2, 2, group_size=8, value_group_size=8, batch=2
    )


# ------------------------------------------------------------------------------------------- cache
def test_identity_path_equals_dynamic_cache_bitwise_gqa_batch():
    model = tiny_model(kv_heads=1)
    ids = torch.randint(1, 64, (3, 9), generator=torch.Generator().manual_seed(5))
    kw = dict(max_new_tokens=15, do_sample=False, output_scores=True, return_dict_in_generate=True)
    ref = model.generate(ids, cache=DynamicCache(config=model.config), **kw)
    cache = ADKVCache(model.config, ADKVConfig(bits=16))
    out = model.generate(ids, cache=cache, **kw)
    assert torch.equal(ref.sequences, out.sequences)  # same kernel: the identity path returns the same key/value tensors: same forward
    assert all(torch.equal(a, b) for a, b in zip(ref.scores, out.scores))  # same kernel: the identity path returns the same key/value tensors: same forward
    assert cache.get_seq_length() == 9 + 15 - 1


def test_packed_and_simulated_storage_identical_and_rows_independent():
    model = tiny_model()
    g = torch.Generator().manual_seed(6)
    ids = torch.randint(1, 64, (2, 24), generator=g)
    mask = torch.ones_like(ids)
    ids[1, :4], mask[1, :4] = 0, 0
    kw = dict(
        max_new_tokens=10, do_sample=False, output_scores=True, return_dict_in_generate=True, pad_token_id=0
    )
    outs = {}
    for storage in ("packed", "simulated"):
        cache = ADKVCache(model.config, ADKVConfig(bits=2, storage=storage))
        outs[storage] = model.generate(ids, attention_mask=mask, cache=cache, **kw)
        assert cache.get_seq_length() == 24 + 10 - 1
    assert torch.equal(outs["packed"].sequences, outs["simulated"].sequences)  # same kernel: both storages give the same dequantised bits (elementwise), then the same forward
    assert all(torch.equal(a, b) for a, b in zip(outs["packed"].scores, outs["simulated"].scores))  # same kernel: both storages give the same dequantised bits (elementwise), then the same forward
    # rows independent: batch 1 vs batch 2 run different GEMMs, so compare in float64, where their rounding
    # difference (~1e-16 relative) would have to land a value on a quantisation boundary to flip a code
    model64 = model.double()
    both = model64.generate(ids, attention_mask=mask, cache=ADKVCache(model64.config, ADKVConfig(bits=2)), **kw)
    single = model64.generate(
        ids[1:], attention_mask=mask[1:], cache=ADKVCache(model64.config, ADKVConfig(bits=2)), **kw
    )
    assert torch.equal(single.sequences[0], both.sequences[1])  # same kernel: integer tokens; float64 (see above)


def test_reorder_and_crop():
    model = tiny_model()
    ids = torch.randint(1, 64, (3, 12), generator=torch.Generator().manual_seed(7))
    cache = ADKVCache(model.config, ADKVConfig(bits=3, residual_length=4))
    with torch.no_grad():
        model(ids, cache=cache)
    layer = cache.layers[1]
    k_before = torch.cat([layer.dequantized_states()[0], layer.keys], -2)
    beam = torch.tensor([1, 1, 0])
    cache.reorder_cache(beam)
    k_after = torch.cat([layer.dequantized_states()[0], layer.keys], -2)
    assert torch.equal(k_after, k_before[beam])  # same kernel: reorder is a gather of the same values
    cache.crop(-2)
    assert cache.get_seq_length() == 10 and layer.keys.shape[-2] == 2
    with pytest.raises(ValueError, match="residual tokens"):
        cache.crop(-5)


def test_cache_param_shape_mismatch():
    model = tiny_model()
    bad = {0: {"key": torch.full((2, 3, 8), 0.1)}}
    with pytest.raises(ValueError, match="head_dim"):
        ADKVCache(model.config, ADKVConfig(), params=bad)


# ------------------------------------------------------------------------------------- calibration
def test_calibration_reduces_attention_error():
    model = tiny_model()
    g = torch.Generator().manual_seed(8)
    ids = torch.randint(1, 64, (4, 32), generator=g)
    cfg = ADKVConfig(bits=2)
    params = calibrate_adkv(model, [ids], cfg, steps=15, lr=5e-2, batch_size=4, n_query=16)
    assert set(params) == {0, 1} and params[0]["key"].shape == (2, 3, 16)
    eta = torch.stack([p[n][:, :2] for p in params.values() for n in ("key", "value")])
    assert bool(((eta > 0) & (eta < 1)).all())

    from neurips26.inference.adkv import record_qkv

    with torch.no_grad(), record_qkv(model) as rec:
        model(ids, use_cache=False)
    assert model.config._attn_implementation == "sdpa"

    def attn_err(p):
        total = 0.0
        for i in (0, 1):
            q, k, v = rec[i][0]
            qk = ADKVQuantizer(16, cfg, None if p is None else p[i]["key"])
            qv = ADKVQuantizer(16, cfg, None if p is None else p[i]["value"])
            kh = qk.simulate(k, qk.init_state(k[..., :16, :]))
            vh = qv.simulate(v, qv.init_state(v[..., :16, :]))
            ref = _attention(q, k, v, 16)
            total += float((_attention(q, kh, vh, 16) - ref).pow(2).mean() / ref.pow(2).mean())
        return total

    assert attn_err(params) < attn_err(None)


def test_bulk_prefill_equals_layerwise_updates():
    model = tiny_model()
    g = torch.Generator().manual_seed(9)
    kv = [(torch.randn(2, 2, 20, 16, generator=g), torch.randn(2, 2, 20, 16, generator=g)) for _ in range(2)]
    configs = (ADKVConfig(bits=3), ADKVConfig(bits=2, residual_length=5, storage="simulated"))
    for cfg, chunk in itertools.product(configs, (1 << 25, 1)):  # one pass over both layers / one per layer
        a, b = ADKVCache(model.config, cfg), ADKVCache(model.config, cfg)
        for i, (k, v) in enumerate(kv):
            a.update(k, v, i)
        b.bulk_prefill(kv, max_chunk_elements=chunk)
        for la, lb in zip(a.layers, b.layers):
            assert torch.equal(la.key_codes, lb.key_codes) and torch.equal(la.value_codes, lb.value_codes)  # same kernel: integer codes
            assert torch.allclose(la.dequantized_states()[0], lb.dequantized_states()[0], rtol=0, atol=1e-6)
            assert torch.equal(la.keys, lb.keys) and la.get_seq_length() == lb.get_seq_length() == 20  # same kernel: full-precision residual keys, copies
        assert a.memory_bytes() == b.memory_bytes()
        new = torch.randn(2, 2, 1, 16, generator=g)
        ka, _ = a.update(new, new, 0)
        kb, _ = b.update(new, new, 0)
        assert torch.allclose(ka, kb, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="max_chunk_elements"):
        ADKVCache(model.config, ADKVConfig(bits=3)).bulk_prefill(kv, max_chunk_elements=0)
    with pytest.raises(TypeError, match="max_chunk_elements"):
        ADKVCache(model.config, ADKVConfig(bits=3)).bulk_prefill(kv, max_chunk_elements=1.5)


# ------------------------------------------------------------------------- decoder states (spec step 3)
@pytest.mark.parametrize("levels", ["midrise", "midtread"])
def test_decoder_regenerates_encoder_states_from_codes_alone(levels):
    """A naive per-token implementation of the update equations gives the same codes, z_t and s_t."""
    x = drift_stream(T=60, d=6, lead=(2,), seed=3).double()
    cfg = ADKVConfig(bits=2, overload_up=1.5, levels=levels)
    q = ADKVQuantizer(6, cfg)
    state = q.init_state(x[..., :16, :])
    codes, _, _ = q.encode_raw(x, state)
    z_dec, s_dec = q.decode_states(codes, state)
    eta_z, eta_s, gamma = (torch.tensor(v, dtype=torch.float16).double() for v in (0.1, 0.1, 2.0))
    o, top = cfg.offset, 3
    z = state.z1.double()
    s = torch.clamp(gamma * state.a1.double() / o, min=1e-6)
    s_min = s * cfg.s_min_rel
    for t in range(60):
        assert torch.allclose(z_dec[..., t, :], z, rtol=1e-12, atol=1e-12)
        assert torch.allclose(s_dec[..., t, :], s, rtol=1e-12, atol=0)
        u = (x[..., t, :] - z) / s
        qt = torch.clamp((torch.floor(u) if levels == "midrise" else torch.round(u)) + o, 0, top)
        assert torch.equal(qt.to(torch.uint8), codes[..., t, :])  # same kernel: integer codes from the same float64 steps
        d = qt - o + (0.5 if levels == "midrise" else 0.0)
        sat = (qt == 0) | (qt == top)
        z = z + eta_z * d * s  # = z + eta_z (x_hat - z)
        s = torch.maximum(s * ((1 - eta_s) + eta_s * gamma * d.abs() / o) * torch.where(sat, 1.5, 1.0), s_min)


# ------------------------------------------------------------------------ checkpoints (spec step 7)
@pytest.mark.parametrize("every", [1, 7, 32, 64, 500])
def test_checkpointed_decode_is_bit_identical(every):
    x = drift_stream(T=203, seed=4)
    plain = ADKVQuantizer(16, ADKVConfig(bits=3))
    q = ADKVQuantizer(16, ADKVConfig(bits=3, checkpoint_every=every))
    s0 = q.init_state(x[..., :16, :])
    c1, e1 = q.encode(x[..., :90, :], s0)  # checkpoints accumulate across encode calls
    c2, e2 = q.encode(x[..., 90:, :], e1)
    codes = torch.cat([c1, c2], -2)
    ref_codes, _ = plain.encode(x, s0)
    assert torch.equal(codes, ref_codes)  # same kernel: integer codes; checkpointing changes nothing in the stream
    n_ck = 202 // every
    assert (e2.checkpoints is None) if n_ck == 0 else e2.checkpoints.shape == (2, 3, n_ck, 3, 16)
    chunked = q.decode(codes, 203, s0, e2.checkpoints)
    assert torch.equal(chunked, q.decode(codes, 203, s0)) and torch.equal(chunked, plain.simulate(x, s0))  # same kernel: elementwise float64 scan, sums restart from the exact checkpointed sums
    if n_ck:
        with pytest.raises(ValueError, match="checkpoints"):
            q.decode(codes, 203, s0, e2.checkpoints[..., :-1, :, :] if n_ck > 0 else None)


@settings(max_examples=25, deadline=None)
@given(
    T=st.integers(1, 70),
    every=st.integers(1, 40),
    split=st.integers(0, 70),
    bits=st.sampled_from([1, 2, 4]),
    seed=st.integers(0, 10_000),
)
def test_checkpoints_property_any_length_split_and_period(T, every, split, bits, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, T, 3, generator=g).cumsum(-2)
    q = ADKVQuantizer(3, ADKVConfig(bits=bits, checkpoint_every=every))
    s0 = q.init_state(x[..., :16, :])
    split = min(split, T)
    c1, e1 = q.encode(x[..., :split, :], s0)
    c2, e2 = q.encode(x[..., split:, :], e1)
    assert e2.t == T and (0 if e2.checkpoints is None else e2.checkpoints.shape[-3]) == (T - 1) // every
    codes = torch.cat([c1, c2], -2)
    assert torch.equal(q.decode(codes, T, s0, e2.checkpoints), q.decode(codes, T, s0))  # same kernel: elementwise float64 scan, sums restart from the exact checkpointed sums


@settings(max_examples=25, deadline=None)
@given(head_dim=st.integers(2, 600), heads=st.integers(1, 4), data=st.data())
def test_outlier_index_packing_roundtrip(head_dim, heads, data):
    n = data.draw(st.integers(1, min(head_dim - 1, 5)))
    idx = torch.stack([torch.randperm(head_dim)[:n] for _ in range(heads)])
    w = index_bits(head_dim)
    assert 2 ** (w - 1) < head_dim <= 2**w or head_dim == 1
    packed = _pack_indices(idx, w)
    assert packed.dtype == torch.uint8 and packed.numel() == math.ceil(heads * n * w / 8)
    assert torch.equal(_unpack_indices(packed, w, idx.shape), idx)  # same kernel: integer indices


@pytest.mark.parametrize(
    ("n_out", "every", "residual", "storage"),
    [(0, 8, 0, "packed"), (2, None, 0, "packed"), (3, 5, 4, "packed"), (1, 16, 0, "simulated")],
)
def test_outliers_and_checkpoints_memory_formula_equals_measured(n_out, every, residual, storage):
    model = tiny_model()
    ids = torch.randint(1, 64, (2, 40), generator=torch.Generator().manual_seed(10))
    cfg = ADKVConfig(
        bits=3, n_outliers=n_out, checkpoint_every=every, residual_length=residual, storage=storage
    )
    cache = ADKVCache(model.config, cfg)
    with torch.no_grad():
        model(ids[:, :30], cache=cache)
        model(ids[:, 30:33], cache=cache)
        model(ids[:, 33:34], cache=cache)
    formula = adkv_memory_formula(
        34, 2, 2, 16, 3, residual, 2, n_outliers=n_out, checkpoint_every=every, sink_tokens=1
    )
    for layer in cache.layers:
        assert layer.memory_bytes(2) == {**formula, "elements": 2 * 2 * 2 * 16 * 34}
    bits = metadata_bits(
        "adkv", 34, 16, 2, 2, residual_length=residual, batch=2, n_outliers=n_out, checkpoint_every=every,
        sink_tokens=1,
    )
    assert cache.memory_bytes(2)["metadata"] * 8 == bits  # 2 * 2 heads * n * 4 bits: whole bytes
    t_q = 34 - residual - 1  # one sink token
    ck_bits = 2 * 2 * 2 * 2 * ((t_q - 1) // every) * 3 * 64 * (16 - n_out) if every else 0
    base = metadata_bits("adkv", 34, 16, 2, 2, residual_length=residual, batch=2)
    assert bits == base - 2 * 2 * 2 * n_out * (2 * 2 + 3) * 16 + 2 * 2 * 2 * n_out * index_bits(16) + ck_bits


def test_checkpointed_cache_generates_identically():
    model = tiny_model()
    ids = torch.randint(1, 64, (2, 21), generator=torch.Generator().manual_seed(11))
    kw = dict(max_new_tokens=12, do_sample=False, output_scores=True, return_dict_in_generate=True)
    outs = [
        model.generate(
            ids, cache=ADKVCache(model.config, ADKVConfig(bits=2, n_outliers=1, checkpoint_every=c)), **kw
        )
        for c in (None, 4)
    ]
    assert torch.equal(outs[0].sequences, outs[1].sequences)  # same kernel: same dequantised bits with or without checkpoints, then the same forward
    assert all(torch.equal(a, b) for a, b in zip(outs[0].scores, outs[1].scores))  # same kernel: same dequantised bits with or without checkpoints, then the same forward


# ---------------------------------------------------------------------- outlier channels (spec step 4)
def test_select_outlier_channels_finds_planted_channels():
    g = torch.Generator().manual_seed(12)
    x = torch.randn(3, 2, 40, 16, generator=g)
    x[:, 0, :, 5] *= 20
    x[:, 0, :, 11] += 30
    x[:, 1, :, 2] *= 15
    x[:, 1, :, 9] *= 12
    idx = select_outlier_channels(x, 2, pool_dims=(0,))
    assert idx.tolist() == [[5, 11], [2, 9]]
    assert index_bits(16) == 4 and index_bits(64) == 6 and index_bits(1) == 1


def _outlier_states(seed=13):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(48, dtype=torch.float32)
    k = 0.3 * torch.randn(2, 2, 48, 16, generator=g)
    k[:, 0, :, 3] += 40 * torch.cos(0.9 * t)  # fast, large oscillation: hard for a 2-bit EMA coder
    k[:, 1, :, 12] += 25 * torch.sin(1.3 * t)
    v = torch.randn(2, 2, 48, 16, generator=g)
    return k, v


def test_outlier_channels_are_exact_fp16_and_reduce_error():
    k, v = _outlier_states()
    errs = {}
    for n in (0, 1):
        layer = ADKVLayer(ADKVConfig(bits=2, n_outliers=n, sink_tokens=0))
        layer.update(k, v)
        kh, vh = layer.dequantized_states()
        errs[n] = float((kh - k).pow(2).mean())
        if n:
            assert layer.outliers[0].tolist() == [[3], [12]]  # keys: chosen from the first 16 tokens
            assert torch.equal(kh[:, 0, :, 3], k[:, 0, :, 3].half().float())  # same kernel: outlier channels are the fp16 cast of the same values
            assert torch.equal(kh[:, 1, :, 12], k[:, 1, :, 12].half().float())  # same kernel: outlier channels are the fp16 cast of the same values
            assert layer.key_outlier_values.shape == (2, 2, 48, 1)
            assert layer.key_outlier_values.dtype == torch.float16
            assert layer.key_codes.shape == (2, 48, math.ceil(2 * 15 * 2 / 8))
    assert errs[1] < errs[0] / 10


def test_given_outliers_are_used_and_packed_equals_simulated_and_bulk_prefill():
    model = tiny_model()
    g = torch.Generator().manual_seed(14)
    kv = [(torch.randn(2, 2, 20, 16, generator=g), torch.randn(2, 2, 20, 16, generator=g)) for _ in range(2)]
    given = {
        0: {"key_outliers": torch.tensor([[1, 7], [0, 15]]), "value_outliers": torch.tensor([[2, 3], [4, 5]])}
    }
    new = torch.randn(2, 2, 1, 16, generator=g)
    states = {}
    for storage in ("packed", "simulated"):
        cfg = ADKVConfig(bits=3, n_outliers=2, checkpoint_every=6, residual_length=3, storage=storage)
        a, b = ADKVCache(model.config, cfg, params=given), ADKVCache(model.config, cfg, params=given)
        for i, (k, v) in enumerate(kv):
            a.update(k, v, i)
        b.bulk_prefill(kv)
        assert a.layers[0].outliers.tolist() == [[[1, 7], [0, 15]], [[2, 3], [4, 5]]]
        assert b.layers[1].outliers.shape == (2, 2, 2)  # layer 1: chosen from its first tokens
        for la, lb in zip(a.layers, b.layers):
            assert torch.equal(la.key_codes, lb.key_codes) and torch.equal(la.value_codes, lb.value_codes)  # same kernel: integer codes
            assert torch.equal(la.key_outlier_values, lb.key_outlier_values)  # same kernel: fp16 copies of the same values
            assert torch.equal(la.stream_state.checkpoints, lb.stream_state.checkpoints)  # same kernel: checkpoints of the same per-token recurrence
        assert a.memory_bytes() == b.memory_bytes()
        states[storage] = a.update(new, new, 0)
        assert torch.allclose(b.update(new, new, 0)[0], states[storage][0], rtol=0, atol=1e-6)
    assert torch.allclose(states["packed"][0], states["simulated"][0], rtol=0, atol=1e-6)
    assert torch.allclose(states["packed"][1], states["simulated"][1], rtol=0, atol=1e-6)


def test_new_option_errors():
    with pytest.raises(ValueError, match="n_outliers"):
        ADKVConfig(n_outliers=-1)
    with pytest.raises(ValueError, match="checkpoint_every"):
        ADKVConfig(checkpoint_every=0)
    with pytest.raises(TypeError, match="checkpoint_every"):
        ADKVConfig(checkpoint_every=2.5)
    model = tiny_model()
    with pytest.raises(ValueError, match=r"n_outliers \(16\) must be smaller than head_dim \(16\)"):
        ADKVCache(model.config, ADKVConfig(n_outliers=16))
    with pytest.raises(ValueError, match="kv_heads, n_outliers"):
        ADKVCache(
            model.config,
            ADKVConfig(n_outliers=2),
            params={0: {"key_outliers": torch.zeros(2, 3, dtype=torch.long)}},
        )
    with pytest.raises(ValueError, match="distinct"):
        ADKVCache(
            model.config,
            ADKVConfig(n_outliers=2),
            params={1: {"value_outliers": torch.tensor([[1, 1], [0, 2]])}},
        )
    with pytest.raises(ValueError, match=r"\[0, 16\)"):
        ADKVCache(
            model.config, ADKVConfig(n_outliers=1), params={1: {"key_outliers": torch.tensor([[1], [16]])}}
        )
    with pytest.raises(ValueError, match="n_outliers"):
        metadata_bits("adkv", 10, 16, 1, 1, n_outliers=16)
    with pytest.raises(ValueError, match="n_outliers"):
        calibrate_streams(*(torch.zeros(1, 1, 1, 4, 4),) * 3, ADKVConfig(n_outliers=4), steps=1)
    layer = ADKVLayer(ADKVConfig(n_outliers=8))
    with pytest.raises(ValueError, match="head_dim"):
        layer.update(torch.zeros(1, 1, 2, 8), torch.zeros(1, 1, 2, 8))


# ------------------------------------------------------------------------- calibration (spec step 8)
def _drift_qkv(n_ly=2, n_seq=4, T=32, d=8, seed=15):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(T, dtype=torch.float32).unsqueeze(-1)
    omega = torch.rand(n_ly, 1, 2, 1, d, generator=g) * 0.3
    amp = 0.5 + torch.rand(n_ly, 1, 2, 1, d, generator=g) * 3
    K = amp * torch.cos(omega * t + torch.rand(n_ly, n_seq, 2, 1, d, generator=g) * 6)
    K = K + 0.1 * torch.randn(n_ly, n_seq, 2, T, d, generator=g)
    V = torch.randn(n_ly, n_seq, 2, T, d, generator=g).cumsum(-2) * 0.2
    Q = 2 * torch.randn(n_ly, n_seq, 4, T, d, generator=g)
    return Q, K, V


def test_50_calibration_steps_reduce_attention_error_on_drift_streams():
    Q, K, V = _drift_qkv()
    cfg = ADKVConfig(bits=2, sink_tokens=0)  # err() below codes every token
    params, outliers = calibrate_streams(Q, K, V, cfg, steps=50, lr=1e-2, bptt=16, batch_size=4, n_query=16)
    assert outliers is None and params.shape == (2, 2, 2, 3, 8)

    def err(p):
        total = 0.0
        for i in range(2):
            xs = []
            for j, x in enumerate((K[i], V[i])):
                q = ADKVQuantizer(8, cfg, None if p is None else p[i, j])
                xs.append(q.simulate(x, q.init_state(x[..., :16, :])))
            ref = _attention(Q[i], K[i], V[i], 16)
            total += float((_attention(Q[i], *xs, 16) - ref).pow(2).mean() / ref.pow(2).mean())
        return total

    # midrise levels: 0.80x (default 0.056 -> 0.045); the midtread levels of the first implementation
    # started from 0.164 (lr 5e-2 overshoots here with either level set: 0.078 with midrise)
    assert err(params) < 0.9 * err(None)


def test_calibration_of_layer_slices_reproduces_joint_run_bitwise():
    Q, K, V = _drift_qkv(n_ly=3, T=24)
    cfg = ADKVConfig(bits=2, n_outliers=1)
    kw = dict(steps=6, lr=5e-2, bptt=8, batch_size=3, n_query=8, seed=3)
    joint, out = calibrate_streams(Q, K, V, cfg, **kw)
    assert out.shape == (3, 2, 2, 1)
    for part in ([0, 2], [1]):
        p, o = calibrate_streams(Q[part], K[part], V[part], cfg, loss_layers=3, **kw)
        assert torch.equal(p, joint[part]) and torch.equal(o, out[part])  # same kernel: per (layer, head) the same GEMM shapes and per-layer reductions; a slice changes only the batch count


def test_calibrated_outliers_reach_the_cache():
    model = tiny_model()
    ids = torch.randint(1, 64, (3, 24), generator=torch.Generator().manual_seed(16))
    cfg = ADKVConfig(bits=2, n_outliers=2)
    params = calibrate_adkv(model, [ids], cfg, steps=2, batch_size=3, n_query=8)
    assert set(params[0]) == {"key", "value", "key_outliers", "value_outliers"}
    assert params[1]["key_outliers"].shape == (2, 2)
    cache = ADKVCache(model.config, cfg, params=params)
    with torch.no_grad():
        model(ids, cache=cache)
    for i, layer in enumerate(cache.layers):
        assert torch.equal(layer.outliers[0], params[i]["key_outliers"])  # same kernel: integer indices
        assert torch.equal(layer.outliers[1], params[i]["value_outliers"])  # same kernel: integer indices


@pytest.mark.parametrize("n_out, every", [(0, None), (1, None), (2, 5)])
def test_head_by_head_decode_equals_one_batched_replay_bitwise(n_out, every):
    k, v = _outlier_states(seed=21)
    layer = ADKVLayer(ADKVConfig(bits=2, n_outliers=n_out, checkpoint_every=every))
    layer.update(k, v)
    q = torch.stack([layer._unpack(layer.key_codes), layer._unpack(layer.value_codes)])
    st = layer.stream_state
    batched = layer.sq._replay(q, st, layer.sq.params, st.checkpoints)
    assert torch.equal(layer._decode_by_head(q, st), batched)  # same kernel: elementwise float64 scan per channel; a head slice changes no element's arithmetic


# ------------------------------------------- regression: the collapse of the first full run (diagnosis)
def _unit_gaussian_stream(T=512, channels=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    mu = 3.0 * torch.randn(1, channels, generator=g)
    return (mu.unsqueeze(-2) + torch.randn(1, T, channels, generator=g)).double()


def test_two_bit_stream_of_a_unit_gaussian_is_near_the_known_optimum():
    """Known answer: the best 2-bit quantiser of N(mu, 1) has MSE 0.1175 (Lloyd-Max), static min-max
    groups of 32 reach ~0.155. The first implementation (mid-tread levels, whose only positive level was an
    overload level, with the spec's rates) settled at MSE 0.41 with 68% of the codes at the prediction: the
    ADKV arm of the first full run scored 0.000 on every item (results/diagnosis/adkv.md)."""
    x = _unit_gaussian_stream()

    def mse(**kw):
        cfg = ADKVConfig(bits=2, **kw)
        q = ADKVQuantizer(x.shape[-1], cfg)
        _, xh, _ = q.encode_raw(x, q.init_state(x[..., :16, :]))
        return float((xh - x)[..., 64:, :].pow(2).mean())

    fixed = mse(eta_s=0.2, gamma=1.0)  # the claim's rates (stationary step = the optimal uniform step)
    assert 0.1175 < fixed < 0.22  # measured 0.178
    assert mse(levels="midtread") > 0.35  # the first implementation: 0.41
    assert mse() < mse(levels="midtread")  # mid-rise levels alone: 0.34


def test_sink_token_is_stored_exactly_and_the_stream_starts_after_it():
    g = torch.Generator().manual_seed(21)
    k = torch.randn(2, 2, 40, 16, generator=g)
    v = torch.randn(2, 2, 40, 16, generator=g)
    k[..., 0, :] += 30.0  # an attention-sink-like first token
    v[..., 0, :] -= 20.0
    errs = {}
    for ns in (0, 1):
        for storage in ("packed", "simulated"):
            layer = ADKVLayer(ADKVConfig(bits=2, sink_tokens=ns, storage=storage))
            layer.update(k[..., :25, :], v[..., :25, :])
            out_k, out_v = layer.update(k[..., 25:, :], v[..., 25:, :])
            kh, vh = layer.dequantized_states()
            assert torch.equal(out_k[..., :25, :], kh[..., :25, :].to(out_k.dtype))  # same kernel: the new tokens are returned as given; the new 15 come in exact
            errs[ns, storage] = float((kh[..., 0, :] - k[..., 0, :]).abs().max())
            if ns:
                assert torch.equal(kh[..., 0, :], k[..., 0, :].half().float())  # same kernel: the sink token is the fp16 cast of the same values
                assert torch.equal(vh[..., 0, :], v[..., 0, :].half().float())  # same kernel: the sink token is the fp16 cast of the same values
                assert layer.key_sink.shape == (2, 2, 1, 16) and layer.key_codes.shape[1] == 39
    assert errs[0, "packed"] == errs[0, "simulated"] > 1.0 and errs[1, "packed"] < 0.02

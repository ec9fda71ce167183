"""Attention on the codes (issue 37, item 1) equals dequantise-then-SDPA within the stated bound.

The bound is :func:`neurips26.inference.quant.attention.equality_bound` (derived from the float32
unit roundoff, the head size ``d``, the number of keys ``T`` and the value group ``G_v``). It is checked
on every cache (KIVI 1/2/3/4/8 bits, AdaKVQ with mixed and key-bonus bit-widths, 16-bit blocks), head
layout (MHA, GQA 2 and 3 query heads per KV head), with and without padding masks, for one and several
query tokens, with the C++ kernel and with the torch path, and inside ``model.generate`` on every layer
and step.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from neurips26.inference.adakvq import AdaKVQCache, AdaKVQConfig
from neurips26.inference.quant import KIVICache, KIVILayer, attention, kernels
from neurips26.inference.quant.attention import (
    HANDLE_KEY,
    attend_codes,
    equality_bound,
    register_codes_attention,
)
from neurips26.inference.quant.store import BlockStore
from neurips26.inference.quant.tensors import quantize_asym

NAME = register_codes_attention("kv_codes_test")


def tiny_model(kv_heads=2, heads=4, layers=2, seed=0):
    cfg = LlamaConfig(
        vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=256, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).eval()


def _store_abs(store: BlockStore, levels_of) -> float:
    """max over stored groups of |z| + s (L - 1) (16-bit blocks: max |x|)."""
    out = 0.0
    for bits, buf in store.bufs.items():
        n = buf["n"]
        if not n:
            continue
        if "data" in buf:
            out = max(out, float(buf["data"][:, :n].abs().max()))
        else:
            s, z = buf["scale"][:, :n].float(), buf["zero"][:, :n].float()
            out = max(out, float((z.abs() + s * levels_of(bits)).max()))
    return out


def _bound(query, scaling, layer, window_k, window_v, ref_v, dtype=torch.float32) -> float:
    d = query.shape[-1]
    q_l1 = float((query.float() * scaling).abs().sum(-1).max())
    key_abs = max(_store_abs(layer._kstore, lambda b: (1 << b) - 1), float(window_k.abs().max()))
    value_abs = float(ref_v.abs().max())
    total = ref_v.shape[-2]
    vg = layer.value_group_size
    return equality_bound(q_l1, key_abs, value_abs, d, total, vg, dtype)


def _reference(query, k, v, mask, scaling, q_len):
    """Dequantised K, V through SDPA (GQA by repeating the KV heads), ``[B, Q, H_q, d]``."""
    g = query.shape[1] // k.shape[1]
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    if mask is None and q_len > 1:
        out = F.scaled_dot_product_attention(query, k, v, is_causal=False, scale=scaling,
                                             attn_mask=attention._mask_bias(None, q_len, k.shape[-2], k.device))  # fmt: skip
    else:
        out = F.scaled_dot_product_attention(query, k, v, attn_mask=mask, scale=scaling)
    return out.transpose(1, 2)


def _layer_case(layer, batch, kv_heads, q_heads, d, prefill, q_len, seed, dtype=torch.float32, pad=0):
    g = torch.Generator().manual_seed(seed)
    k0 = torch.randn(batch, kv_heads, prefill, d, generator=g).to(dtype) * 1.5
    v0 = torch.randn(batch, kv_heads, prefill, d, generator=g).to(dtype)
    layer.update(k0, v0)
    kn = torch.randn(batch, kv_heads, q_len, d, generator=g).to(dtype)
    vn = torch.randn(batch, kv_heads, q_len, d, generator=g).to(dtype)
    query = torch.randn(batch, q_heads, q_len, d, generator=g).to(dtype)
    attn_kwargs: dict = {}
    layer.codes_attention, layer.codes_max_query = "always", 64
    wk, wv = layer.update(kn, vn, kwargs=attn_kwargs)
    handle = attn_kwargs[HANDLE_KEY]
    assert wk.shape[-2] == handle.window_k.shape[-2] and handle.length == prefill + q_len
    tq = handle.stored.length
    dk, dv = layer.dequantized_states()
    ref_k = torch.cat([dk[..., :tq, :], handle.window_k], dim=-2)
    ref_v = torch.cat([dv[..., :tq, :], handle.window_v], dim=-2)
    total = ref_k.shape[-2]
    mask = None
    if pad or q_len > 1:  # bool [B, 1, Q, T]: causal over the last q_len tokens, row 0 left-padded by `pad`
        t = torch.arange(total)
        i = torch.arange(q_len).unsqueeze(-1)
        mask = (t <= total - q_len + i).expand(batch, 1, q_len, total).clone()
        if pad:
            mask[0, :, :, :pad] = False
    return query, handle, mask, ref_k, ref_v


CASES = [
    # (name, layer factory, kv_heads, q_heads, head_dim)
    ("kivi2_mha", lambda: KIVILayer(2, 8, 4), 2, 2, 32),
    ("kivi2_gqa2", lambda: KIVILayer(2, 8, 4), 2, 4, 32),
    ("kivi2_gqa3", lambda: KIVILayer(2, 32, 32), 3, 9, 64),
    ("kivi1", lambda: KIVILayer(1, 8, 4, value_group_size=8), 2, 4, 16),
    ("kivi3", lambda: KIVILayer(3, 8, 4), 2, 4, 32),
    ("kivi3_unaligned", lambda: KIVILayer(3, 5, 2, value_group_size=4), 1, 3, 12),
    ("kivi4", lambda: KIVILayer(4, 8, 4, value_group_size=16), 2, 6, 32),
    ("kivi8", lambda: KIVILayer(8, 8, 4), 1, 2, 16),
    ("kivi2_odd_group", lambda: KIVILayer(2, 6, 3, value_group_size=4), 2, 4, 12),
]


@pytest.mark.parametrize("name,make,kv_heads,q_heads,d", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("q_len,pad", [(1, 0), (1, 3), (5, 0), (4, 2)])
@pytest.mark.parametrize("torch_path", [False, True])
def test_codes_attention_within_bound_of_dequantise_then_sdpa(
    name, make, kv_heads, q_heads, d, q_len, pad, torch_path, monkeypatch
):
    if torch_path:
        monkeypatch.setattr(kernels, "load", lambda: False)
    layer = make()
    prefill = max(45, 2 * (layer.group_size + layer.residual_length) + 7)
    query, handle, mask, ref_k, ref_v = _layer_case(
        layer, 3, kv_heads, q_heads, d, prefill, q_len, seed=7, pad=pad
    )
    scaling = d**-0.5
    out = attend_codes(query, handle, mask, scaling)
    ref = _reference(query, ref_k, ref_v, mask, scaling, q_len)
    bound = _bound(query, scaling, layer, handle.window_k, handle.window_v, ref_v)
    err = float((out - ref).abs().max())
    assert out.shape == ref.shape == (3, q_len, q_heads, d)
    assert err <= bound, (err, bound)
    assert bound < 1e-2 * float(ref_v.abs().max())  # far below the 2-8-bit quantisation error itself


@pytest.mark.parametrize("bits", [(2, 3, 4), (1, 2, 4)])
@pytest.mark.parametrize("key_bonus", [0, 1])
def test_mixed_bit_blocks_within_bound(bits, key_bonus):
    """AdaKVQ layers hold blocks of several widths (one buffer per width, interleaved positions)."""
    model = tiny_model(kv_heads=1)
    quant = AdaKVQConfig(bits=bits, avg_bits=2.5 if 3 in bits else 2.0, group_size=4, residual_length=3,
                         key_bonus=key_bonus, online=False)  # fmt: skip
    cache = AdaKVQCache(model.config, quant, base_bits=[bits[0], bits[-1]])
    layer = cache.layers[1]
    # force alternating widths to interleave the buffers
    seq = iter([(bits[-1], bits[0]), (bits[0], bits[1]), (bits[1], bits[-1])] * 20)
    layer._next_block_kv_bits = lambda: next(seq)
    query, handle, mask, ref_k, ref_v = _layer_case(layer, 2, 1, 3, 16, 40, 1, seed=3, pad=2)
    assert len({b for b, _ in layer._kstore.order}) >= 2
    out = attend_codes(query, handle, mask, 0.25)
    ref = _reference(query, ref_k, ref_v, mask, 0.25, 1)
    bound = _bound(query, 0.25, layer, handle.window_k, handle.window_v, ref_v)
    assert float((out - ref).abs().max()) <= bound


def test_sixteen_bit_blocks_within_bound():
    layer = KIVILayer(2, 4, 2)
    seq = iter([(16, 16), (2, 2)] * 30)
    layer._next_block_kv_bits = lambda: next(seq)
    query, handle, mask, ref_k, ref_v = _layer_case(layer, 2, 2, 4, 16, 30, 1, seed=5)
    assert 16 in layer._kstore.bufs
    out = attend_codes(query, handle, mask, 0.25)
    ref = _reference(query, ref_k, ref_v, mask, 0.25, 1)
    assert float((out - ref).abs().max()) <= _bound(
        query, 0.25, layer, handle.window_k, handle.window_v, ref_v
    )


def test_bfloat16_model_dtype_within_bound_plus_one_ulp():
    layer = KIVILayer(2, 8, 4)
    query, handle, mask, ref_k, ref_v = _layer_case(layer, 2, 2, 4, 32, 40, 1, seed=1, dtype=torch.bfloat16)
    out = attend_codes(query, handle, mask, 32**-0.5)
    ref = _reference(query.float(), ref_k.float(), ref_v.float(), mask, 32**-0.5, 1)
    bound = _bound(query, 32**-0.5, layer, handle.window_k.float(), handle.window_v.float(), ref_v.float())
    bound += torch.finfo(torch.bfloat16).eps * float(ref.abs().max())
    assert out.dtype == torch.bfloat16
    assert float((out.float() - ref).abs().max()) <= bound


def test_fully_masked_row_gives_zero():
    layer = KIVILayer(2, 4, 2)
    query, handle, mask, *_ = _layer_case(layer, 2, 1, 2, 8, 20, 1, seed=0, pad=1)
    mask[1] = False
    out = attend_codes(query, handle, mask, 0.3)
    assert torch.all(out[1] == 0) and torch.isfinite(out).all()


def test_kernel_equals_torch_path_on_random_buffers():
    """The C++ operator and the torch formulas agree within float32 reassociation (``gamma_{d G}``)."""
    if not kernels.available():
        pytest.skip("no C++ toolchain: the torch path is the only one")
    g = torch.Generator().manual_seed(0)
    for bits, G, H, D, vg in [(1, 8, 2, 16, 8), (2, 32, 3, 64, 32), (3, 8, 2, 32, 32), (3, 5, 1, 12, 4),
                              (4, 8, 2, 32, 16), (8, 4, 1, 8, 8)]:  # fmt: skip
        ks, vs = BlockStore("key"), BlockStore("value")
        for i in range(6):
            x = torch.randn(2, H, G, D, generator=g)
            ks.append(quantize_asym(x, bits, G, axis=-2), 6 - i)
            vs.append(quantize_asym(torch.randn(2, H, G, D, generator=g), bits, vg, axis=-1), 6 - i)
        (kp,), (vp,) = ks.parts(), vs.parts()
        q = torch.randn(2, H, 5, D, generator=g)
        out_c = torch.zeros(2, H, 5, 6 * G)
        out_t = torch.zeros(2, H, 5, 6 * G)
        args = (kp["codes"], kp["scale"], kp["zero"], kp["pos"], kp["n"], bits, G)
        torch.ops.neurips26_kv.key_scores(q, *args, out_c)
        kernels._key_scores_torch(q, *args, out_t)
        kabs = float((kp["zero"].float().abs() + kp["scale"].float() * ((1 << bits) - 1)).max())
        tol = 4 * (D + 2) * 2**-24 * float(q.abs().sum(-1).max()) * kabs
        assert float((out_c - out_t).abs().max()) <= tol
        p = torch.softmax(torch.randn(2, H, 5, 6 * G, generator=g), -1)
        acc_c = torch.zeros(2, H, 5, D)
        acc_t = torch.zeros(2, H, 5, D)
        vargs = (vp["codes"], vp["scale"], vp["zero"], vp["pos"], vp["n"], bits, G)
        torch.ops.neurips26_kv.value_accum(p, *vargs, acc_c)
        kernels._value_accum_torch(p, *vargs, acc_t)
        vmax = float((vp["zero"].float().abs() + vp["scale"].float() * ((1 << bits) - 1)).max())
        assert float((acc_c - acc_t).abs().max()) <= 4 * (6 * G + vg + 2) * 2**-24 * vmax


# ------------------------------------------------------------------------------- model.generate
def _checking_attention(cache, seen):
    """An attention function that runs the codes path and checks it against the dequantised reference."""

    def fn(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        handle = kwargs.get(HANDLE_KEY)
        if handle is None:
            return attention.codes_attention_forward(
                module, query, key, value, attention_mask, scaling, dropout, **kwargs
            )
        layer = cache.layers[module.layer_idx]
        tq = handle.stored.length
        dk, dv = layer.dequantized_states()
        ref_k = torch.cat([dk[..., :tq, :], handle.window_k], dim=-2)
        ref_v = torch.cat([dv[..., :tq, :], handle.window_v], dim=-2)
        q_len = query.shape[-2]
        out = attend_codes(query, handle, attention_mask, scaling)
        ref = _reference(query, ref_k, ref_v, attention_mask, scaling, q_len)
        bound = _bound(query, scaling, layer, handle.window_k, handle.window_v, ref_v)
        rows = torch.ones(query.shape[0], dtype=torch.bool)
        if attention_mask is not None:  # rows whose every key is masked: SDPA gives NaN, we give 0
            rows = attention_mask.any(-1).all(-1).view(-1)
        err = float((out[rows] - ref[rows]).abs().max())
        assert err <= bound, (module.layer_idx, err, bound)
        seen.append(module.layer_idx)
        return out, None

    return fn


CACHES = {
    "kivi2": lambda cfg: KIVICache(cfg, 2, 4, 3),
    "kivi4_vg8": lambda cfg: KIVICache(cfg, 4, 8, 5, value_group_size=8),
    "adakvq": lambda cfg: AdaKVQCache(
        cfg, AdaKVQConfig(online=False, group_size=4, residual_length=3), base_bits=[2, 4]
    ),
    "adakvq_kb": lambda cfg: AdaKVQCache(
        cfg,
        AdaKVQConfig(
            bits=(1, 2, 4), avg_bits=2.0, key_bonus=1, online=False, group_size=4, residual_length=3
        ),
        base_bits=[1, 2],
    ),  # fmt: skip
}


@pytest.mark.parametrize("cache_name", list(CACHES))
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_generate_every_layer_and_step_within_bound_with_padding(cache_name, kv_heads):
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    model = tiny_model(kv_heads=kv_heads)
    cache = CACHES[cache_name](model.config)
    seen: list[int] = []
    name = f"kv_codes_check_{cache_name}_{kv_heads}"
    AttentionInterface.register(name, _checking_attention(cache, seen))
    AttentionMaskInterface.register(name, sdpa_mask)
    attention.CODES_ATTENTION_NAMES.add(name)
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(1, 64, (2, 21), generator=g)
    mask = torch.ones_like(ids)
    ids[0, :6], mask[0, :6] = 0, 0  # left padding
    model.set_attn_implementation(name)
    try:
        out = model.generate(ids, attention_mask=mask, cache=cache, max_new_tokens=14, do_sample=False,
                             pad_token_id=0, output_scores=True, return_dict_in_generate=True)  # fmt: skip
    finally:
        model.set_attn_implementation("sdpa")
        attention.CODES_ATTENTION_NAMES.discard(name)
    assert len(seen) == 2 * 13  # every layer at every decode step (the prefill has no stored block yet)
    ref = model.generate(ids, attention_mask=mask, cache=CACHES[cache_name](model.config), max_new_tokens=14,
                         do_sample=False, pad_token_id=0, output_scores=True, return_dict_in_generate=True)  # fmt: skip
    for a, b in zip(out.scores, ref.scores):  # logits through two layers: the bound, times the layers' gain
        assert float((a - b).abs().max()) < 1e-4


def test_registered_attention_decodes_on_codes_and_leaves_other_caches_alone(monkeypatch):
    model = tiny_model(kv_heads=2)
    ids = torch.randint(1, 64, (2, 17), generator=torch.Generator().manual_seed(4))
    kw = dict(max_new_tokens=10, do_sample=False, pad_token_id=0)
    calls = []
    real = attention.attend_codes
    monkeypatch.setattr(attention, "attend_codes", lambda *a, **k: calls.append(1) or real(*a, **k))
    ref_dyn = model.generate(ids, cache=DynamicCache(config=model.config), **kw)
    scored = dict(kw, output_scores=True, return_dict_in_generate=True)
    ref_out = model.generate(ids, cache=KIVICache(model.config, 4, 4, 2), **scored)
    ref_kivi = ref_out.sequences
    # The codes attention sums the scores in another order than SDPA on the dequantised keys: its logits
    # agree to the bound of the test above (1e-4 through two layers), so the integer tokens are portable
    # only where every greedy choice of the reference clears twice that bound.
    top2 = torch.stack(ref_out.scores).topk(2, dim=-1).values
    assert ((top2[..., 0] - top2[..., 1]) > 2e-4).all()
    assert not calls
    model.set_attn_implementation(NAME)
    try:
        dyn = model.generate(ids, cache=DynamicCache(config=model.config), **kw)
        assert not calls and torch.equal(dyn, ref_dyn)  # same kernel: plain SDPA for a DynamicCache, both times
        kivi = model.generate(ids, cache=KIVICache(model.config, 4, 4, 2), **scored)
        assert len(calls) == 2 * 9
        for a, b in zip(kivi.scores, ref_out.scores):  # other summation order: the bound of the test above
            assert float((a - b).abs().max()) < 1e-4
        assert torch.equal(kivi.sequences, ref_kivi)  # same kernel: integer tokens, margins > 2x the bound (above)
        calls.clear()
        mirror = model.generate(ids, cache=KIVICache(model.config, 4, 4, 2, decode_mode="mirror"), **kw)
        assert not calls and torch.equal(mirror, ref_kivi)  # same kernel: the mirror gives the same dequantised bits, then the same SDPA; the mirror keeps its dequantised path
        never = KIVICache(model.config, 4, 4, 2)
        for layer in never.layers:
            layer.codes_attention = "never"
        model.generate(ids, cache=never, **kw)
        assert not calls
    finally:
        model.set_attn_implementation("sdpa")


def test_long_update_takes_the_dequantised_path():
    layer = KIVILayer(2, 4, 2)
    layer.codes_attention = "always"
    g = torch.Generator().manual_seed(0)
    layer.update(torch.randn(1, 1, 20, 8, generator=g), torch.randn(1, 1, 20, 8, generator=g))
    kw: dict = {HANDLE_KEY: "stale"}
    k, _ = layer.update(
        torch.randn(1, 1, 17, 8, generator=g), torch.randn(1, 1, 17, 8, generator=g), kwargs=kw
    )
    assert (
        HANDLE_KEY not in kw and k.shape[-2] == 37
    )  # > codes_max_query: the whole sequence, stale key dropped
    k, _ = layer.update(torch.randn(1, 1, 1, 8, generator=g), torch.randn(1, 1, 1, 8, generator=g), kwargs=kw)
    assert HANDLE_KEY in kw and k.shape[-2] == kw[HANDLE_KEY].window_k.shape[-2] < 38


def test_equality_bound_errors_and_scaling():
    with pytest.raises(ValueError):
        equality_bound(1.0, 1.0, 1.0, 0, 10, 4)
    a = equality_bound(1.0, 1.0, 1.0, 64, 1000, 32)
    assert equality_bound(1.0, 1.0, 1.0, 64, 2000, 32) > a > 0
    assert equality_bound(1.0, 1.0, 1.0, 64, 1000, 32, torch.float64) < a * 1e-8
    with pytest.raises(ValueError):
        register_codes_attention("")

"""Tests of the shared KV quantisation primitives and the KIVI cache."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from neurips26.inference.quant import (
    KIVICache,
    KIVILayer,
    dequantize_asym,
    kivi_memory_formula,
    pack_bits,
    quantize_asym,
    quantized_nbytes,
    unpack_bits,
)


def tiny_model(seed=0, layers=2, kv_heads=2):
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        max_position_embeddings=256,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).eval()


def _scale_full(qt, shape):
    """Per-element step of a QuantizedTensor, broadcast to the tensor's shape."""
    s = qt.scale.float().repeat_interleave(qt.group_size, dim=-1)
    n = shape[qt.axis]
    s = s[..., :n]
    return torch.movedim(s, -1, qt.axis)


# ------------------------------------------------------------------------------------------ packing
@pytest.mark.parametrize("bits", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("n", [1, 5, 7, 8, 13, 64])
def test_pack_roundtrip_any_length(bits, n):
    g = torch.Generator().manual_seed(bits * 100 + n)
    codes = torch.randint(0, 2**bits, (3, n), generator=g, dtype=torch.uint8)
    packed = pack_bits(codes, bits)
    assert packed.shape == (3, math.ceil(n * bits / 8))
    assert packed.dtype == torch.uint8
    assert torch.equal(unpack_bits(packed, bits, n), codes)  # same kernel: integer codes


def test_pack_hand_computed():
    # 2-bit codes 1, 2, 3, 0 -> 0b00_11_10_01 = 57 (little-endian fields)
    assert pack_bits(torch.tensor([1, 2, 3, 0], dtype=torch.uint8), 2).tolist() == [57]
    # 3-bit codes 5, 3, 7 -> bits 101|110|111 little-endian: 0b11_011_101 = 221, then 0b1 = 1
    assert pack_bits(torch.tensor([5, 3, 7], dtype=torch.uint8), 3).tolist() == [221, 1]


def test_pack_errors():
    with pytest.raises(ValueError, match="bits must be one of"):
        pack_bits(torch.zeros(4, dtype=torch.uint8), 5)
    with pytest.raises(TypeError, match="uint8"):
        pack_bits(torch.zeros(4, dtype=torch.int64), 2)
    with pytest.raises(ValueError, match="expected ceil"):
        unpack_bits(torch.zeros(3, dtype=torch.uint8), 2, 4)


# ------------------------------------------------------------------------------------ quantisation
@settings(max_examples=40, deadline=None)
@given(
    bits=st.sampled_from([1, 2, 3, 4, 8]),
    group=st.integers(1, 9),
    axis=st.sampled_from([0, 1, -1]),
    scale=st.floats(1e-3, 1e3),
    seed=st.integers(0, 1000),
)
def test_error_within_half_step(bits, group, axis, scale, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 5, 11, generator=g) * scale + 0.3 * scale
    qt = quantize_asym(x, bits, group, axis=axis)
    xh = qt.dequantize()
    assert xh.shape == x.shape and xh.dtype == x.dtype
    bound = _scale_full(qt, x.shape) / 2 + 1e-6 * (1 + x.abs())
    assert bool(((x - xh).abs() <= bound).all())


def test_exact_on_grid_values():
    # group of 4 values on the grid {0, 0.5, 1, 1.5} (representable in fp16) round-trips exactly
    x = torch.tensor([[0.0, 0.5, 1.0, 1.5, 1.5, 0.0, 0.5, 1.0]])
    qt = quantize_asym(x, 2, 4, axis=-1)
    assert torch.equal(dequantize_asym(qt), x)  # same kernel: grid values are exact in fp16 and in zero + q * scale
    assert qt.scale.tolist() == [[0.5, 0.5]] and qt.zero.tolist() == [[0.0, 0.0]]


def test_partial_group_and_constant_group():
    x = torch.cat([torch.full((2, 3), 0.3), torch.randn(2, 4)], dim=1)
    qt = quantize_asym(x, 4, 3, axis=-1)  # groups: [const], [4 random split 3 + 1]
    xh = qt.dequantize()
    assert (x - xh).abs().max() <= _scale_full(qt, x.shape).max() / 2 + 1e-6


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("axis,group", [(-2, 16), (-1, 8), (1, 2), (0, 2)])
def test_nbytes_formula_equals_measured(bits, axis, group):
    x = torch.randn(2, 3, 37, 16)
    qt = quantize_asym(x, bits, group, axis=axis)
    f = quantized_nbytes(x.shape, bits, group, axis)
    assert f["payload"] == qt.payload_nbytes
    assert f["metadata"] == qt.metadata_nbytes
    assert f["total"] == qt.nbytes


def test_quantize_errors():
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match="bits must be one of"):
        quantize_asym(x, 6, 4)
    with pytest.raises(ValueError, match="group_size"):
        quantize_asym(x, 2, 0)
    with pytest.raises(ValueError, match="axis"):
        quantize_asym(x, 2, 4, axis=2)
    with pytest.raises(TypeError, match="floating"):
        quantize_asym(torch.ones(3, dtype=torch.long), 2, 4)
    with pytest.raises(ValueError, match="non-finite"):
        quantize_asym(torch.tensor([1.0, float("nan")]), 2, 2)


def test_batch_ops_on_packed_codes_are_exact():
    x = torch.randn(3, 2, 16, 8)
    qt = quantize_asym(x, 3, 16, axis=-2)
    idx = torch.tensor([2, 0])
    assert torch.equal(qt.index_select(idx).dequantize(), qt.dequantize()[idx])  # same kernel: the same elementwise dequantisation of the selected rows
    assert torch.equal(qt.repeat_interleave(2).dequantize(), qt.dequantize().repeat_interleave(2, 0))  # same kernel: the same elementwise dequantisation of the repeated rows


# ------------------------------------------------------------------------------------------- cache
def test_kivi16_generate_equals_dynamic_bitwise():
    model = tiny_model()
    ids = torch.randint(1, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    kw = dict(max_new_tokens=20, do_sample=False, output_scores=True, return_dict_in_generate=True)
    ref = model.generate(ids, cache=DynamicCache(config=model.config), **kw)
    out = model.generate(ids, cache=KIVICache(model.config, nbits=16), **kw)
    assert torch.equal(ref.sequences, out.sequences)  # same kernel: the 16-bit cache returns the same key/value tensors: same forward
    assert all(torch.equal(a, b) for a, b in zip(ref.scores, out.scores))  # same kernel: the 16-bit cache returns the same key/value tensors: same forward


def test_kivi_padded_batch_rows_are_independent():
    model = tiny_model(kv_heads=1)  # GQA: 4 query heads, 1 kv head
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(1, 64, (2, 20), generator=g)
    mask = torch.ones_like(ids)
    ids[0, :5], mask[0, :5] = 0, 0  # left padding
    kw = dict(max_new_tokens=12, do_sample=False, pad_token_id=0)
    # batch 2 vs batch 1 run different GEMMs: compared in float64, where their rounding difference (~1e-16
    # relative) would have to land a value on a quantisation boundary to flip a code
    model64 = tiny_model(kv_heads=1).double()
    both = model64.generate(ids, attention_mask=mask, cache=KIVICache(model64.config, 4, 8, 8), **kw)
    for row in range(2):
        single = model64.generate(
            ids[row : row + 1],
            attention_mask=mask[row : row + 1],
            cache=KIVICache(model64.config, 4, 8, 8),
            **kw,
        )
        assert torch.equal(both[row], single[0])  # same kernel: integer tokens; float64 (see above)
    ref = model.generate(ids, attention_mask=mask, cache=DynamicCache(config=model.config), **kw)
    out16 = model.generate(ids, attention_mask=mask, cache=KIVICache(model.config, 16), **kw)
    assert torch.equal(ref, out16)  # same kernel: integer tokens; the 16-bit cache returns the same tensors: same forward


def test_kivi_layer_flush_lengths_shapes_and_memory():
    layer = KIVILayer(nbits=2, group_size=4, residual_length=3, value_group_size=4)
    g = torch.Generator().manual_seed(3)
    seen = 0
    for n in (9, 1, 1, 1, 5, 1, 2):
        k, v = torch.randn(2, 3, n, 8, generator=g), torch.randn(2, 3, n, 8, generator=g)
        ko, vo = layer.update(k, v)
        seen += n
        assert ko.shape == vo.shape == (2, 3, seen, 8)
        assert layer.get_seq_length() == seen
        assert torch.equal(ko[..., -n:, :], k)  # same kernel: current tokens returned as given, in full precision
        n_blocks = max(0, (seen - 3) // 4)
        assert len(layer.key_blocks) == n_blocks
        assert layer.keys.shape[-2] == seen - 4 * n_blocks
        measured = layer.memory_bytes(fp_itemsize=2)
        formula = kivi_memory_formula(2, 3, seen, 8, 2, 4, 3, 4, fp_itemsize=2)
        for key in ("payload", "metadata", "residual", "total"):
            assert measured[key] == formula[key]


def test_kivi_memory_hand_computed():
    # 1 batch, 1 head, head_dim 4, 8 tokens, 2 bits, G=4, R=0, Gv=4: two blocks
    f = kivi_memory_formula(1, 1, 8, 4, 2, 4, 0, 4, fp_itemsize=2, meta_itemsize=2)
    # keys: 16 codes * 2 bits = 4 bytes per block; 4 channel groups * 2 * 2 bytes = 16 bytes
    # values: 4 bytes codes; 4 token groups * 2 * 2 = 16 bytes
    assert f == {"payload": 2 * 8, "metadata": 2 * 32, "residual": 0, "total": 80}


def test_kivi_reorder_and_crop():
    layer = KIVILayer(nbits=4, group_size=4, residual_length=2, value_group_size=8)
    g = torch.Generator().manual_seed(4)
    k, v = torch.randn(3, 2, 11, 8, generator=g), torch.randn(3, 2, 11, 8, generator=g)
    layer.update(k, v)
    ko, vo = layer.update(k[..., :1, :], v[..., :1, :])
    # reorder: identical to reordering the returned states
    beam = torch.tensor([2, 2, 0])
    layer.reorder_cache(beam)
    k2, v2 = layer.update(k[beam][..., :1, :], v[beam][..., :1, :])
    assert torch.equal(k2[..., :-1, :], ko[beam]) and torch.equal(v2[..., :-1, :], vo[beam])  # same kernel: reorder is a gather of the same values
    # crop inside the residual and inside a quantised block keeps the returned prefix
    before_k, before_v = layer.dequantized_states()
    full_k = torch.cat([before_k, layer.keys], -2)
    for remove in (1, 4):
        layer.crop(-remove)
        n = layer.get_seq_length()
        new = torch.zeros(3, 2, 1, 8)
        kk, _ = layer.update(new, new)
        assert kk.shape[-2] == n + 1
        assert torch.equal(kk[..., :n, :], full_k[..., :n, :])  # same kernel: the kept blocks, dequantised by the same elementwise formula
        layer.crop(-1)
        full_k = full_k[..., :n, :]
    with pytest.raises(ValueError, match="positive"):
        layer.crop(2)


def test_kivi_cache_crop_like_dynamic_when_unquantised():
    model = tiny_model()
    ids = torch.randint(1, 64, (1, 10))
    c, d = KIVICache(model.config, nbits=16), DynamicCache(config=model.config)
    model(ids, cache=c)
    model(ids, cache=d)
    c.crop(-3)
    d.crop(-3)
    assert c.get_seq_length() == d.get_seq_length() == 7
    assert torch.equal(c.layers[0].keys, d.layers[0].keys)  # same kernel: copies of the same keys
    assert c.is_croppable


def test_kivi_errors():
    cfg = tiny_model().config
    with pytest.raises(ValueError, match="nbits must be one of"):
        KIVICache(cfg, nbits=5)
    with pytest.raises(ValueError, match="group_size"):
        KIVICache(cfg, nbits=2, group_size=0)
    with pytest.raises(ValueError, match="must divide head_dim"):
        KIVICache(cfg, nbits=2, value_group_size=5)
    with pytest.raises(ValueError, match="residual_length"):
        KIVICache(cfg, nbits=2, residual_length=-1)

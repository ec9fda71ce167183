"""Fast decode paths of the quantised KV caches give the reference path's bits (issue 22, item 2).

Every mode of :class:`~neurips26.inference.quant.KIVILayer` (``stream``, ``mirror``) and of
ADKV (vectorised packed replay, growable mirror) must return exactly the tensors, and so the model
logits, of the eager per-block reference, over a prefill and decode steps that cross block boundaries
and grow the buffers past their first capacity; batch operations keep working on the buffers.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.common.models import build_tiny_lm
from neurips26.inference.adakvq import AdaKVQCache, AdaKVQConfig
from neurips26.inference.quant import KIVICache, KIVILayer
from neurips26.inference.quant.packing import pack_bits, unpack_bits
from neurips26.inference.quant.store import BlockStore, unpack_float
from neurips26.inference.quant.tensors import quantize_asym

_MODEL = {}


def _model():
    if "m" not in _MODEL:
        _MODEL["m"] = build_tiny_lm("llama", vocab_size=64, seed=0).eval()
    return _MODEL["m"]


def _kivi(mode, nbits=2):
    return lambda cfg: KIVICache(cfg, nbits=nbits, group_size=4, residual_length=3, decode_mode=mode)


def _run(make, ids, steps=9, seed=0):
    """Prefill ``ids`` then decode ``steps`` greedy tokens; returns the logits of every step and the cache."""
    model = _model()
    cache = make(model.config)
    logits = []
    with torch.no_grad():
        out = model(ids, cache=cache, use_cache=True)
        logits.append(out.logits)
        for _ in range(steps):
            nxt = out.logits[:, -1:].argmax(-1)
            out = model(nxt, cache=cache, use_cache=True)
            logits.append(out.logits)
    return logits, cache


def _ids(batch=2, length=13, seed=0):
    return torch.randint(0, 64, (batch, length), generator=torch.Generator().manual_seed(seed))


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x, y)  # same kernel: every mode dequantises by the same elementwise formula, then the same forward


@pytest.mark.parametrize("nbits", [2, 4, 3])
@pytest.mark.parametrize("mode", ["stream", "mirror"])
def test_kivi_modes_bit_identical_logits(nbits, mode):
    ids = _ids()
    ref, cref = _run(_kivi("reference", nbits), ids)
    fast, cfast = _run(_kivi(mode, nbits), ids)
    _same(ref, fast)
    for la, lb in zip(cref.layers, cfast.layers):
        assert len(la.key_blocks) == len(lb.key_blocks) > 3  # grew past the prefill's exact capacity
        for x, y in zip((*la.key_blocks, *la.value_blocks), (*lb.key_blocks, *lb.value_blocks)):
            assert (
                torch.equal(x.codes, y.codes)  # same kernel: integer codes
                and torch.equal(x.scale, y.scale)  # same kernel: min/max and elementwise quantisation: exact in any order
                and torch.equal(x.zero, y.zero)  # same kernel: min/max and elementwise quantisation: exact in any order
            )
        assert torch.equal(la.keys, lb.keys) and torch.equal(la.values, lb.values)  # same kernel: full-precision residual, copies


@pytest.mark.parametrize("mode", ["stream", "mirror"])
def test_adakvq_mixed_bits_bit_identical(mode):
    """Mixed key/value widths (ladder with a key bonus) and a 16-bit rung: one buffer per width."""
    quant = AdaKVQConfig(bits=(2, 4, 16), avg_bits=4, group_size=4, residual_length=3, key_bonus=1)

    def make(m):
        return lambda cfg: AdaKVQCache(cfg, quant, base_bits=[2, 16], decode_mode=m)

    ids = _ids()
    ref, cref = _run(make("reference"), ids)
    fast, cfast = _run(make(mode), ids)
    _same(ref, fast)
    assert cfast.kv_bits_log() == cref.kv_bits_log()
    widths = {b for layer in cfast.layers for b in (*layer.block_bits, *layer.key_block_bits)}
    assert len(widths) >= 2


def test_stored_blocks_match_fresh_quantisation():
    """Blocks read back from the buffers equal ``quantize_asym`` of the flushed tokens."""
    g = torch.Generator().manual_seed(1)
    layer = KIVILayer(nbits=2, group_size=4, residual_length=2)
    k, v = torch.randn(2, 3, 23, 8, generator=g), torch.randn(2, 3, 23, 8, generator=g)
    layer.update(k[..., :9, :], v[..., :9, :])
    for t in range(9, 23):
        layer.update(k[..., t : t + 1, :], v[..., t : t + 1, :])
    assert len(layer.key_blocks) == (23 - 2) // 4
    for i, (kb, vb) in enumerate(zip(layer.key_blocks, layer.value_blocks)):
        sl = slice(4 * i, 4 * i + 4)
        ek, ev = quantize_asym(k[..., sl, :], 2, 4, axis=-2), quantize_asym(v[..., sl, :], 2, 8, axis=-1)
        assert torch.equal(kb.codes, ek.codes) and torch.equal(kb.scale, ek.scale)  # same kernel: min/max and elementwise quantisation: exact in any order
        assert torch.equal(vb.codes, ev.codes) and torch.equal(vb.zero, ev.zero)  # same kernel: min/max and elementwise quantisation: exact in any order


@pytest.mark.parametrize("mode", ["stream", "mirror"])
def test_batch_operations_on_buffers(mode):
    g = torch.Generator().manual_seed(2)
    k, v = torch.randn(3, 2, 21, 8, generator=g), torch.randn(3, 2, 21, 8, generator=g)
    layers = {m: KIVILayer(2, 4, 2, decode_mode=m) for m in ("reference", mode)}
    for layer in layers.values():
        layer.update(k, v)
        layer.reorder_cache(torch.tensor([2, 0, 1]))
        layer.batch_repeat_interleave(2)
        layer.batch_select_indices(torch.tensor([0, 3, 5]))
    new = torch.randn(3, 2, 6, 8, generator=g)
    outs = {
        m: [layer.update(new[..., t : t + 1, :], new[..., t : t + 1, :]) for t in range(6)]
        for m, layer in layers.items()
    }
    for (a, b), (c, d) in zip(outs["reference"], outs[mode]):
        assert torch.equal(a, c) and torch.equal(b, d)  # same kernel: the same elementwise dequantisation, gathered rows
    # the batch operation equals running the selected rows alone
    solo = KIVILayer(2, 4, 2, decode_mode=mode)
    solo.update(k[[2, 0, 1]], v[[2, 0, 1]])
    for t in range(6):
        ka, va = solo.update(new[..., t : t + 1, :], new[..., t : t + 1, :])
    assert torch.equal(ka, outs[mode][-1][0]) and torch.equal(va, outs[mode][-1][1])  # same kernel: the same elementwise dequantisation, gathered rows


@pytest.mark.parametrize("mode", ["stream", "mirror"])
def test_crop_then_decode_matches_reference(mode):
    g = torch.Generator().manual_seed(3)
    k, v = torch.randn(1, 2, 30, 8, generator=g), torch.randn(1, 2, 30, 8, generator=g)
    res = {}
    for m in ("reference", mode):
        layer = KIVILayer(4, 4, 2, decode_mode=m)
        layer.update(k[..., :25, :], v[..., :25, :])
        layer.crop(-7)  # cuts into a block
        res[m] = [layer.update(k[..., t : t + 1, :], v[..., t : t + 1, :]) for t in range(25, 30)]
    for (a, b), (c, d) in zip(res["reference"], res[mode]):
        assert torch.equal(a, c) and torch.equal(b, d)  # same kernel: the same elementwise dequantisation of the kept blocks


def test_buffers_grow_and_report_their_capacity():
    layer = KIVILayer(2, 4, 0)
    g = torch.Generator().manual_seed(4)
    layer.update(torch.randn(1, 2, 8, 8, generator=g), torch.randn(1, 2, 8, 8, generator=g))
    store = layer._kstore
    assert store._capacity(2) == 2  # the prefill reserves exactly its blocks
    for _ in range(12):
        layer.update(torch.randn(1, 2, 1, 8, generator=g), torch.randn(1, 2, 1, 8, generator=g))
    assert len(store) == 5 and store._capacity(2) >= 5
    held = {id(t) for _, t in layer.held_tensors()}
    assert all(id(b) in held for b in store.bufs[2].values() if isinstance(b, torch.Tensor))
    # the storage model counts used blocks only, the report the whole buffers
    assert layer.memory_bytes(2)["payload"] == sum(
        b.payload_nbytes for b in (*layer.key_blocks, *layer.value_blocks)
    )
    assert layer.memory_report()["codes"] >= layer.memory_bytes(2)["payload"]


def test_mirror_is_reported_as_dequantized():
    g = torch.Generator().manual_seed(5)
    layer = KIVILayer(2, 4, 2, decode_mode="mirror")
    layer.update(torch.randn(1, 2, 20, 8, generator=g), torch.randn(1, 2, 20, 8, generator=g))
    rep = layer.memory_report()
    assert rep["dequantized"] >= 2 * 1 * 2 * 16 * 8 * 4
    assert KIVILayer(2, 4, 2).memory_report()["dequantized"] == 0


def test_unpack_float_equals_unpack_bits():
    g = torch.Generator().manual_seed(6)
    for bits in (1, 2, 3, 4, 8):
        n = 37
        codes = torch.randint(0, 1 << bits, (3, 5, n), generator=g, dtype=torch.int64).to(torch.uint8)
        packed = pack_bits(codes, bits)
        assert torch.equal(unpack_float(packed, bits, n, torch.float32), unpack_bits(packed, bits, n).float())  # same kernel: small integers are exact in float32
        assert torch.equal(unpack_float(packed, bits, n, torch.float64), codes.double())  # same kernel: small integers are exact in float64


def test_decode_mode_errors():
    with pytest.raises(ValueError, match="decode_mode"):
        KIVILayer(2, decode_mode="fast")
    with pytest.raises(ValueError, match="keep_dequantized"):
        KIVILayer(2, keep_dequantized=True, decode_mode="stream")
    with pytest.raises(ValueError, match="kind"):
        BlockStore("query")
    assert KIVILayer(2, keep_dequantized=True).decode_mode == "mirror"


# ------------------------------------------------------------------------------------------------ ADKV
def _adkv(**kw):
    from neurips26.inference.adkv import ADKVCache, ADKVConfig

    return lambda cfg: ADKVCache(cfg, ADKVConfig(**kw))


ADKV_SETTINGS = {
    "window0": {"bits": 2},
    "window3_3bit": {"bits": 3, "residual_length": 3},
    "outliers_checkpoints": {"bits": 2, "residual_length": 2, "n_outliers": 2, "checkpoint_every": 4},
    "per_token_values": {"bits": 4, "residual_length": 2, "value_mode": "per_token", "value_group_size": 8},
}


@pytest.mark.parametrize("name", sorted(ADKV_SETTINGS))
@pytest.mark.parametrize("storage", ["packed", "simulated"])
def test_adkv_fast_paths_bit_identical_logits(name, storage):
    kw = ADKV_SETTINGS[name]
    ids = _ids()
    ref, cref = _run(_adkv(**kw, storage="packed", decode_mode="reference"), ids)
    fast, cfast = _run(_adkv(**kw, storage=storage), ids)
    _same(ref, fast)
    for la, lb in zip(cref.layers, cfast.layers):
        assert la.encoded_length == lb.encoded_length > 0
        assert torch.equal(la.key_codes, lb.key_codes)  # same kernel: integer codes
        if la.value_codes is not None:
            assert torch.equal(la.value_codes, lb.value_codes)  # same kernel: integer codes
        assert torch.equal(la.keys, lb.keys)  # same kernel: full-precision residual, copies
        ka, va = la.dequantized_states()
        kb, vb = lb.dequantized_states()
        assert torch.equal(ka, kb) and torch.equal(va, vb)  # same kernel: the same float64 elementwise scan (contiguous exp/log) in both modes


def test_adkv_log_gain_table_matches_the_logarithm():
    from neurips26.inference.adkv import ADKVConfig, ADKVQuantizer

    g = torch.Generator().manual_seed(7)
    for bits in (1, 2, 3, 8):
        cfg = ADKVConfig(bits=bits)
        params = torch.stack([torch.rand(3, 5, generator=g) * 0.8 + 0.1 for _ in range(2)])
        quant = ADKVQuantizer(5, cfg, params)
        codes = torch.randint(0, 1 << bits, (2, 4, 40, 5), generator=g).to(torch.uint8)
        x = torch.randn(2, 4, 6, 5, generator=g)
        st = quant.init_state(x)
        b = quant._replay(codes, st, params.unsqueeze(1), table=quant.log_gain_table(params.unsqueeze(1)))
        c = quant._replay(codes, st, params.unsqueeze(1))
        assert torch.equal(b, c)  # same kernel: the table holds the same float64 log of the same values


def test_adkv_batch_operations_and_growth():
    g = torch.Generator().manual_seed(8)
    k, v = torch.randn(3, 2, 20, 16, generator=g), torch.randn(3, 2, 20, 16, generator=g)
    new = torch.randn(3, 2, 12, 16, generator=g)
    outs = {}
    for mode in ("reference", "stream"):
        from neurips26.inference.adkv import ADKVConfig
        from neurips26.inference.adkv.cache import ADKVLayer

        layer = ADKVLayer(ADKVConfig(bits=2, residual_length=2, decode_mode=mode))
        layer.update(k, v)
        cap = layer._bufs["key_codes"].buf.shape[1]
        layer.reorder_cache(torch.tensor([2, 0, 1]))
        layer.batch_repeat_interleave(2)
        layer.batch_select_indices(torch.tensor([0, 3, 5]))
        outs[mode] = [layer.update(new[..., t : t + 1, :], new[..., t : t + 1, :]) for t in range(12)]
        ns = layer.config.sink_tokens  # the first tokens are stored exactly (fp16), not coded
        assert ns == layer.sink_length == 1
        # grew past the exact prefill capacity (20 tokens - residual 2 - sink 1)
        assert layer._bufs["key_codes"].buf.shape[1] > cap == 18 - ns
        assert layer.encoded_length == 30 and layer.key_codes.shape[1] == 30 - ns
    for (a, b), (c, d) in zip(outs["reference"], outs["stream"]):
        assert torch.equal(a, c) and torch.equal(b, d)  # same kernel: the same elementwise decode, gathered rows


def test_adkv_decode_mode_error():
    from neurips26.inference.adkv import ADKVConfig

    with pytest.raises(ValueError, match="decode_mode"):
        ADKVConfig(decode_mode="mirror")


# ------------------------------------------------------------------------------ property: any chunking
@settings(max_examples=20, deadline=None)
@given(
    bits=st.sampled_from([1, 2, 3, 4, 8]),
    group=st.integers(1, 6),
    residual=st.integers(0, 5),
    vg=st.sampled_from([2, 4, 8]),
    chunks=st.lists(st.integers(1, 9), min_size=1, max_size=8),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
    seed=st.integers(0, 2**16),
)
def test_stream_and_mirror_equal_reference_for_any_chunking(bits, group, residual, vg, chunks, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    layers = {
        m: KIVILayer(bits, group, residual, vg, decode_mode=m) for m in ("reference", "stream", "mirror")
    }
    for t in chunks:
        k = torch.randn(2, 2, t, 8, generator=g).to(dtype)
        v = torch.randn(2, 2, t, 8, generator=g).to(dtype)
        ref = layers["reference"].update(k, v)
        for m in ("stream", "mirror"):
            out = layers[m].update(k, v)
            assert out[0].dtype == dtype
            assert torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1])  # same kernel: every mode dequantises by the same elementwise formula


@settings(max_examples=10, deadline=None)
@given(
    bits=st.sampled_from([(2, 4), (4, 2), (16, 2), (3, 16)]),
    chunks=st.lists(st.integers(1, 7), min_size=1, max_size=6),
    seed=st.integers(0, 2**16),
)
def test_mixed_widths_in_one_layer(bits, chunks, seed):
    """Alternating key/value widths per block (as AdaKVQ's controller may choose) in one layer."""

    class Alternating(KIVILayer):
        def _next_block_kv_bits(self):
            return bits if len(self.block_bits) % 2 == 0 else bits[::-1]

    g = torch.Generator().manual_seed(seed)
    layers = {m: Alternating(2, 3, 1, 4, decode_mode=m) for m in ("reference", "stream", "mirror")}
    for t in chunks:
        k, v = torch.randn(1, 2, t, 8, generator=g), torch.randn(1, 2, t, 8, generator=g)
        ref = layers["reference"].update(k, v)
        for m in ("stream", "mirror"):
            out = layers[m].update(k, v)
            assert torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1])  # same kernel: every mode dequantises by the same elementwise formula
    assert [b.bits for b in layers["stream"].key_blocks] == [b.bits for b in layers["reference"].key_blocks]


@pytest.mark.parametrize("bits", [2, 3, 16])
def test_bulk_flush_stores_the_bits_of_block_by_block_flushes(bits):
    """A long update quantises its blocks in runs (one call per run of equal widths); every group sees the
    same elementwise operations (min/max, IEEE division and rounding), so the stored bits are identical
    to flushing the same tokens one block at a time, buffers, capacities and memory report included."""
    g = torch.Generator().manual_seed(3)
    k, v = torch.randn(2, 3, 47, 8, generator=g), torch.randn(2, 3, 47, 8, generator=g)
    bulk, single = KIVILayer(min(bits, 8), 4, 3), KIVILayer(min(bits, 8), 4, 3)
    if bits == 16:  # 16-bit blocks in a quantising layer (as AdaKVQ may store them)
        for layer in (bulk, single):
            layer._next_block_kv_bits = lambda: (16, 16)
    bulk.update(k, v)
    single.update(k[..., :7, :], v[..., :7, :])
    for t in range(7, 47):
        single.update(k[..., t : t + 1, :], v[..., t : t + 1, :])
    assert len(bulk.key_blocks) == len(single.key_blocks) == (47 - 3) // 4
    for a, b in zip((*bulk.key_blocks, *bulk.value_blocks), (*single.key_blocks, *single.value_blocks)):
        if bits == 16:
            assert torch.equal(a.data, b.data)  # same kernel: 16-bit blocks store the given values
        else:
            assert (
                torch.equal(a.codes, b.codes)  # same kernel: integer codes
                and torch.equal(a.scale, b.scale)  # same kernel: min/max and elementwise quantisation: exact in any order
                and torch.equal(a.zero, b.zero)  # same kernel: min/max and elementwise quantisation: exact in any order
            )
    assert torch.equal(bulk.dequantized_states()[0], single.dequantized_states()[0])  # same kernel: the same blocks, the same elementwise dequantisation


def test_bulk_flush_of_mixed_widths_follows_the_controller_block_by_block():
    model = _model()
    quant = AdaKVQConfig(online=False, group_size=4, residual_length=3)
    g = torch.Generator().manual_seed(4)
    k, v = torch.randn(1, 2, 40, 16, generator=g), torch.randn(1, 2, 40, 16, generator=g)
    widths = [(4, 4), (4, 4), (2, 2), (3, 3), (3, 3), (3, 3), (2, 2)] * 3
    layers = []
    for chunked in (False, True):
        layer = AdaKVQCache(model.config, quant).layers[0]
        it = iter(widths)
        layer._next_block_kv_bits = lambda it=it: next(it)
        if chunked:
            for t in range(40):
                layer.update(k[..., t : t + 1, :], v[..., t : t + 1, :])
        else:
            layer.update(k, v)
        layers.append(layer)
    a, b = layers
    assert [w for w, _ in a._kstore.order] == [w for w, _ in b._kstore.order] == [w for w, _ in widths[:9]]
    for x, y in zip((*a.key_blocks, *a.value_blocks), (*b.key_blocks, *b.value_blocks)):
        assert torch.equal(x.codes, y.codes) and torch.equal(x.scale, y.scale) and torch.equal(x.zero, y.zero)  # same kernel: integer codes; min/max and elementwise quantisation: exact in any order
    assert torch.equal(a.dequantized_states()[1], b.dequantized_states()[1])  # same kernel: the same blocks, the same elementwise dequantisation

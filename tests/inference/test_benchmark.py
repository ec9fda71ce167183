"""Tests of the KV-cache decode benchmark (stored bytes, profiler peak memory, ratios)."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from neurips26.common.models import build_tiny_lm
from neurips26.inference.benchmark import (
    cache_tensor_bytes,
    decode_benchmark,
    random_kv_states,
)
from neurips26.inference.quant import KIVICache


def tiny_model(layers: int = 2):
    """Tiny Llama: 4 query heads, 2 KV heads, head_dim 16."""
    return build_tiny_lm(
        "llama",
        vocab_size=64,
        seed=0,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    ).eval()


def test_cache_tensor_bytes_counts_shared_storage_once():
    base = torch.zeros(100)  # 400 bytes
    holder = {"a": base, "b": [base[:10], base.view(10, 10)], "c": (torch.zeros(5, dtype=torch.int8),)}
    assert cache_tensor_bytes(holder) == 400 + 5


def test_cache_tensor_bytes_of_dynamic_cache_equals_keys_plus_values():
    model = tiny_model()
    cache = DynamicCache(config=model.config)
    for i, (k, v) in enumerate(random_kv_states(model.config, 7, seed=0)):
        cache.update(k, v, i)
    expected = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    assert expected == 2 * 2 * (1 * 2 * 7 * 16) * 4
    assert cache_tensor_bytes(cache) == expected


def test_random_kv_states_are_seeded_and_shaped():
    cfg = tiny_model().config
    a = random_kv_states(cfg, 5, seed=1)
    b = random_kv_states(cfg, 5, seed=1)
    assert len(a) == cfg.num_hidden_layers
    assert a[0][0].shape == (1, 2, 5, 16)
    assert all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b))  # same kernel: rerun, same shapes and seed
    with pytest.raises(ValueError, match="T"):
        random_kv_states(cfg, 0, seed=1)
    with pytest.raises(ValueError, match="seed"):
        random_kv_states(cfg, 4, seed=-1)
    with pytest.raises(TypeError, match="PretrainedConfig"):
        random_kv_states(object(), 4, seed=1)


def test_decode_benchmark_reports_ratios_against_dynamic_cache():
    model = tiny_model(layers=6)

    def caches():
        return {
            "kivi2": KIVICache(model.config, nbits=2, group_size=16, residual_length=16),
            "full": DynamicCache(config=model.config),
        }

    report = decode_benchmark(model, caches, contexts=(128,), steps=2)
    row = report["T=128"]
    assert set(row) == {"kivi2", "full"}
    full, kivi = row["full"], row["kivi2"]
    assert full["latency_ratio_vs_dynamic"] == full["kv_bytes_ratio_vs_dynamic"] == 1.0
    assert full["peak_memory_ratio_vs_dynamic"] == 1.0
    # 128 + 2 decoded tokens in fp32: 6 layers x (K, V) x 2 heads x 130 x 16 x 4 bytes
    assert full["kv_bytes"] == 6 * 2 * 2 * 130 * 16 * 4
    # the profiled step starts from the stored cache and adds at least the new token's K/V
    assert full["peak_bytes"] >= full["kv_bytes"] + 6 * 2 * 2 * 16 * 4
    assert kivi["kv_bytes_ratio_vs_dynamic"] < 0.5
    # KIVI dequantises one layer at a time: its peak is far below a cache that stores every layer
    assert kivi["peak_memory_ratio_vs_dynamic"] < 0.75
    assert all(v > 0 for r in row.values() for v in r.values())


def test_decode_benchmark_stored_and_peak_bytes_are_deterministic():
    model = tiny_model()

    def caches():
        return {
            "kivi2": KIVICache(model.config, nbits=2, group_size=16, residual_length=16),
            "full": DynamicCache(config=model.config),
        }

    a = decode_benchmark(model, caches, contexts=(64,), steps=1)["T=64"]
    b = decode_benchmark(model, caches, contexts=(64,), steps=1)["T=64"]
    for arm in a:
        assert a[arm]["kv_bytes"] == b[arm]["kv_bytes"]
        assert a[arm]["peak_bytes"] == b[arm]["peak_bytes"]


def test_decode_benchmark_enters_arm_contexts():
    model = tiny_model()
    entered = []

    class Marker:
        def __enter__(self):
            entered.append(True)

        def __exit__(self, *exc):
            return False

    decode_benchmark(
        model,
        lambda: {"full": DynamicCache(config=model.config)},
        (8,),
        steps=1,
        arm_context={"full": Marker},
    )
    assert entered == [True]


def test_decode_benchmark_errors():
    model = tiny_model()
    with pytest.raises(ValueError, match="reference arm 'full'"):
        decode_benchmark(model, lambda: {"x": DynamicCache(config=model.config)}, (8,), steps=1)
    with pytest.raises(ValueError, match="steps"):
        decode_benchmark(model, lambda: {}, (8,), steps=0)
    with pytest.raises(ValueError, match="contexts"):
        decode_benchmark(model, lambda: {}, (), steps=1)
    with pytest.raises(ValueError, match="contexts"):
        decode_benchmark(model, lambda: {}, (8, 0), steps=1)
    with pytest.raises(TypeError, match="make_caches must be callable"):
        decode_benchmark(model, {"full": None}, (8,), steps=1)

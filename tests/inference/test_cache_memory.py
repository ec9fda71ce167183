"""Held memory of every quantised KV cache equals its report, at every step (issue 23, defect 3).

The measured side walks every tensor reachable from the cache object and adds the real size of each
distinct storage (``untyped_storage().nbytes()``, deduplicated by storage pointer), exactly what
:func:`neurips26.inference.benchmark.cache_tensor_bytes` does for the decode benchmark. The reported
side is :meth:`memory_report`, which adds the logical bytes of the tensors each cache says it holds.
The two agree only when no held tensor is a view into a larger buffer (the residual window used to be
a slice of the whole concatenated prefill) and no held tensor is left out of the report (ADKV's
float64 encoder state used to be).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pytest
import torch
from transformers import DynamicCache, LlamaConfig

from neurips26.inference.adakvq import AADProfile, AADTracker, AdaKVQCache, AdaKVQConfig
from neurips26.inference.adkv import ADKVCache, ADKVConfig, GroupwiseStaticCache
from neurips26.inference.benchmark import cache_tensor_bytes
from neurips26.inference.quant import MEMORY_CATEGORIES, KIVICache

CFG = LlamaConfig(
    vocab_size=64,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
    pad_token_id=0,
)


def _tracker():
    tracker = AADTracker()
    for layer in range(2):
        tracker.record(layer, torch.rand(8, generator=torch.Generator().manual_seed(layer)))
    return tracker


CACHES = {
    "kivi": lambda: KIVICache(CFG, nbits=2, group_size=8, residual_length=8),
    "kivi_keep_dequantized": lambda: KIVICache(
        CFG, nbits=4, group_size=8, residual_length=4, keep_dequantized=True
    ),
    "kivi_16bit": lambda: KIVICache(CFG, nbits=16, group_size=8, residual_length=8),
    "static": lambda: GroupwiseStaticCache(CFG, bits=2, group_size=8, value_group_size=8),
    "adkv": lambda: ADKVCache(CFG, ADKVConfig(bits=2, residual_length=8)),
    "adkv_window0": lambda: ADKVCache(CFG, ADKVConfig(bits=3)),
    "adkv_simulated_outliers_checkpoints": lambda: ADKVCache(
        CFG, ADKVConfig(bits=2, residual_length=8, storage="simulated", n_outliers=2, checkpoint_every=8)
    ),
    "adkv_per_token": lambda: ADKVCache(
        CFG, ADKVConfig(bits=2, residual_length=8, value_mode="per_token", value_group_size=8, n_outliers=1)
    ),
    "adakvq": lambda: AdaKVQCache(
        CFG, AdaKVQConfig(bits=(2, 4, 16), avg_bits=4, group_size=8, residual_length=8)
    ),
    "adakvq_profile_tracker": lambda: AdaKVQCache(
        CFG,
        AdaKVQConfig(bits=(2, 4), avg_bits=3, group_size=8, residual_length=4),
        AADProfile(torch.tensor([0.2, 0.6]), torch.tensor([0.1, 0.1])),
        _tracker(),
        keep_dequantized=True,
    ),
}


def _storages(obj) -> dict[tuple[int, str], int]:
    """``{(storage pointer, device): storage bytes}`` of every tensor reachable from ``obj``."""
    seen: set[int] = set()
    out: dict[tuple[int, str], int] = {}
    stack = [obj]
    while stack:
        item = stack.pop()
        if id(item) in seen or item is None or isinstance(item, (str, bytes, int, float, bool)):
            continue
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            st = item.untyped_storage()
            if st.nbytes():
                out[(st.data_ptr(), str(item.device))] = st.nbytes()
        elif isinstance(item, torch.nn.Module):
            continue
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            stack.extend(getattr(item, f.name) for f in dataclasses.fields(item))
        elif hasattr(item, "__dict__") and not isinstance(item, type):
            stack.extend(vars(item).values())
    return out


def _check(cache, where: str) -> dict[str, int]:
    held = _storages(cache)
    report = cache.memory_report()
    assert set(report) == {*MEMORY_CATEGORIES, "total"}
    assert sum(held.values()) == cache_tensor_bytes(cache)
    assert sum(held.values()) == report["total"], (
        f"{where}: held {sum(held.values())} B (live storages) but reported {report['total']} B ({report})"
    )
    reported = {(t.untyped_storage().data_ptr(), str(t.device)) for _, t in cache.held_tensors() if t.numel()}
    assert reported == set(held), f"{where}: tensors held but not reported: {set(held) - reported}"
    assert cache.memory_bytes()["total"] == report["total"]
    return report


def _kv(g, batch, tokens, dtype=torch.float32):
    shape = (batch, 2, tokens, 16)
    return torch.randn(shape, generator=g, dtype=dtype), torch.randn(shape, generator=g, dtype=dtype)


def _step(cache, g, batch, tokens, dtype=torch.float32):
    for layer in range(2):
        cache.update(*_kv(g, batch, tokens, dtype), layer)


@pytest.mark.parametrize("name", sorted(CACHES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_held_bytes_equal_reported_bytes_at_every_step(name, dtype):
    g = torch.Generator().manual_seed(0)
    cache = CACHES[name]()
    _step(cache, g, 2, 40, dtype)  # prefill
    _check(cache, "prefill")
    for i in range(11):  # decode, crossing block boundaries
        _step(cache, g, 2, 1, dtype)
        _check(cache, f"decode step {i}")
    _step(cache, g, 2, 5, dtype)  # a chunk
    _check(cache, "chunk")
    cache.reorder_cache(torch.tensor([1, 0]))
    _check(cache, "reorder_cache")
    cache.batch_repeat_interleave(2)
    _check(cache, "batch_repeat_interleave")
    cache.batch_select_indices(torch.tensor([0, 3]))
    _check(cache, "batch_select_indices")
    if all(layer.is_croppable for layer in cache.layers) or name.startswith("kivi"):
        cache.crop(-3)  # remove 3 tokens (negative = count, DynamicLayer rule)
        _check(cache, "crop")
    elif name.startswith("adkv") and name != "adkv_window0":
        cache.crop(-2)  # inside the residual window
        _check(cache, "crop")
    _step(cache, g, 2, 1, dtype)
    _check(cache, "decode after batch operations")


@pytest.mark.parametrize("name", ["adkv", "adkv_simulated_outliers_checkpoints"])
def test_bulk_prefill_holds_what_it_reports(name):
    g = torch.Generator().manual_seed(1)
    cache = CACHES[name]()
    cache.bulk_prefill([_kv(g, 2, 40) for _ in range(2)])
    _check(cache, "bulk prefill")
    _step(cache, g, 2, 1)
    _check(cache, "decode after bulk prefill")


def test_prefill_is_released_and_caches_hold_less_than_dynamic_cache():
    """After a 512-token fp32 prefill every quantised cache (without kept reconstructions) holds less
    than ``DynamicCache``; its window no longer pins the prefill."""
    kv = [_kv(torch.Generator().manual_seed(2), 1, 512) for _ in range(2)]
    dynamic = DynamicCache(config=CFG)
    for layer, (k, v) in enumerate(kv):
        dynamic.update(k.clone(), v.clone(), layer)
    full = cache_tensor_bytes(dynamic)
    assert full == 2 * 2 * 2 * 512 * 16 * 4
    for name in ("kivi", "static", "adkv", "adkv_window0", "adakvq"):
        cache = CACHES[name]()
        for layer, (k, v) in enumerate(kv):
            cache.update(k.clone(), v.clone(), layer)
        report = _check(cache, f"{name} 512-token prefill")
        assert report["total"] < 0.5 * full, (name, report["total"], full)
        assert report["window"] <= 2 * 2 * 2 * 8 * 16 * 4  # at most residual_length tokens per layer


def test_adkv_reports_its_float64_encoder_state():
    g = torch.Generator().manual_seed(3)
    cache = CACHES["adkv"]()
    _step(cache, g, 2, 40)
    report = _check(cache, "prefill")
    # per layer: log_acc, cmax, dsum, float64 [streams=2, batch=2, heads=2, head_dim=16]
    accumulators = 2 * 3 * (2 * 2 * 2 * 16) * 8
    # plus the calibrated parameters as given: key_params, value_params float32 [heads, 3, head_dim]
    params = 2 * 2 * (2 * 3 * 16) * 4
    assert report["encoder_state"] == accumulators + params
    assert cache.memory_bytes(2)["total"] < report["total"]  # the storage model omits working state


def test_storage_model_is_unchanged_by_the_report():
    """``memory_bytes(fp_itemsize)`` (the claims' storage model) is the deployable storage only."""
    g = torch.Generator().manual_seed(4)
    cache = CACHES["kivi_keep_dequantized"]()
    _step(cache, g, 1, 20)
    m = cache.memory_bytes(2)
    assert set(m) == {"payload", "metadata", "residual", "total", "elements", "quantized_elements"}
    assert m["total"] == m["payload"] + m["metadata"] + m["residual"]
    assert (
        cache.memory_report()["dequantized"] == 2 * 2 * (1 * 2 * 16 * 16) * 4
    )  # 2 blocks of 8 tokens, K and V


def test_generate_takes_the_cache_through_the_non_deprecated_argument():
    """``generate(cache=...)`` (README usage) fills our cache and warns about nothing; ``past_key_values=``
    gives the same tokens (deprecated since transformers 5.24, removed for ``generate`` in 6.0)."""
    import warnings

    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(CFG).eval()
    ids = torch.randint(1, 64, (1, 20), generator=torch.Generator().manual_seed(5))
    outs = {}
    for kw in ("cache", "past_key_values"):
        cache = CACHES["adkv"]()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            outs[kw] = model.generate(ids, max_new_tokens=4, do_sample=False, **{kw: cache})
        assert cache.get_seq_length() == 23  # prompt + 3 fed-back tokens: the cache was used
        deprecations = [w for w in caught if "past_key_values" in str(w.message)]
        if kw == "cache":
            assert not deprecations
    assert torch.equal(outs["cache"], outs["past_key_values"])  # same kernel: the same generate call, only the argument name differs

"""Decode-step benchmark for KV caches: latency and peak memory against ``DynamicCache``.

Shared by the KV-cache claim checks (ADKV, AdaKVQ). Every cache under test is filled with the same
random key/value states of a model's shape at context length ``T`` and then decodes ``steps`` single
tokens; the full-precision ``transformers.DynamicCache`` is the reference arm.

Measured quantities, per arm and context length:

* ``decode_step_s``: median wall time of one ``model(token, cache=cache)`` call;
* ``kv_bytes``: bytes of every tensor reachable from the cache object after decoding (unique
  storages; codes, scales, zero-points, residual windows, calibrated parameters and any dequantised
  copy the cache keeps), i.e. what the cache actually holds, not a formula;
* ``peak_bytes``: the peak of live bytes during one more decode step, counted from an empty cache: a
  fresh cache is filled and decoded ``steps`` times under the PyTorch profiler, then the next step is
  measured. It is the stored cache plus the step's transient allocations (activations, dequantised
  K/V copies, the growing copy ``torch.cat`` makes); model weights are excluded (identical for every
  arm);
* ratios of each against the reference arm.

On CPU PyTorch has no allocator statistics, hence the profiler; its ``[memory]`` events record every
allocation and free of the CPU allocator with a timestamp, so the running sum of their sizes is the
live-bytes curve of the step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from neurips26.common.checks import check_int
from neurips26.common.profiling import peak_allocated_bytes

__all__ = ["cache_tensor_bytes", "decode_benchmark", "peak_allocated_bytes", "random_kv_states"]


def cache_tensor_bytes(obj: Any) -> int:
    """Bytes of all distinct tensor storages reachable from ``obj``.

    Walks attributes, dataclass fields, lists, tuples, sets and dict values, and the inner tensors of
    wrapper tensor subclasses (``__tensor_flatten__``, e.g. optimum-quanto's packed tensors); a storage
    shared by several tensors (views) is counted once.

    Parameters
    ----------
    obj : Any
        A cache (or any object holding tensors).

    Returns
    -------
    int
    """
    seen_objects: set[int] = set()
    seen_storages: dict[tuple[int, str], int] = {}
    stack = [obj]
    while stack:
        item = stack.pop()
        if id(item) in seen_objects or item is None or isinstance(item, (str, bytes, int, float, bool)):
            continue
        seen_objects.add(id(item))
        if isinstance(item, torch.Tensor):
            if type(item) is not torch.Tensor and hasattr(item, "__tensor_flatten__"):
                # a wrapper subclass (e.g. optimum-quanto's packed QTensor): its inner tensors hold the bytes
                names, _ = item.__tensor_flatten__()
                stack.extend(getattr(item, n) for n in names)
                continue
            storage = item.untyped_storage()
            seen_storages[(storage.data_ptr(), str(item.device))] = storage.nbytes()
        elif isinstance(item, torch.nn.Module):
            continue  # never walk into a model that a cache might reference
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            stack.extend(getattr(item, f.name) for f in dataclasses.fields(item))
        elif hasattr(item, "__dict__") and not isinstance(item, type):
            stack.extend(vars(item).values())
    return sum(seen_storages.values())


def _head_dim(config: Any) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def random_kv_states(config: Any, T: int, seed: int, dtype: torch.dtype = torch.float32):
    """Per-layer ``(keys, values)``, each ``Tensor[1, kv_heads, T, head_dim]`` standard normal."""
    check_int("T", T, low=1)
    check_int("seed", seed, low=0)
    for name in ("num_hidden_layers", "num_key_value_heads"):
        if not hasattr(config, name):
            raise TypeError(f"config must be a transformers PretrainedConfig with {name}")
    g = torch.Generator().manual_seed(seed)
    shape = (1, config.num_key_value_heads, T, _head_dim(config))
    return [
        (torch.randn(shape, generator=g).to(dtype), torch.randn(shape, generator=g).to(dtype))
        for _ in range(config.num_hidden_layers)
    ]


def _fill(cache: Any, kv: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
    if hasattr(cache, "bulk_prefill"):
        cache.bulk_prefill(kv)
        return
    for layer_idx, (k, v) in enumerate(kv):
        cache.update(k, v, layer_idx)


def decode_benchmark(
    model: torch.nn.Module,
    make_caches: Callable[[], Mapping[str, Any]],
    contexts: Sequence[int],
    steps: int = 3,
    seed: int = 0,
    reference: str = "full",
    arm_context: Mapping[str, Callable[[], contextlib.AbstractContextManager]] | None = None,
) -> dict[str, dict[str, dict[str, float]]]:
    """Decode latency, stored bytes and peak memory of each cache against a reference cache.

    Parameters
    ----------
    model : transformers causal LM
        Its config gives the K/V shapes; its parameter dtype is the dtype of the random states.
    make_caches : callable
        Returns fresh ``{arm: cache}`` (called once per context length); must contain ``reference``.
    contexts : sequence of int
        Context lengths ``T`` to fill before decoding.
    steps : int
        Timed decode steps per arm (the median is reported); a fresh cache then repeats them and one
        more step is profiled for memory.
    seed : int
        Seed of the random cached states (identical for every arm).
    reference : str
        The arm the ratios are taken against (a ``DynamicCache``).
    arm_context : mapping, optional
        ``{arm: factory}`` of context managers entered around that arm's decode steps (for example
        an attention tracker that must be active).

    Returns
    -------
    dict
        ``{"T=<T>": {arm: {decode_step_s, kv_bytes, peak_bytes, latency_ratio_vs_dynamic,
        kv_bytes_ratio_vs_dynamic, peak_memory_ratio_vs_dynamic}}}``.
    """
    check_int("steps", steps, low=1)
    if not callable(make_caches):
        raise TypeError(f"make_caches must be callable, got {type(make_caches).__name__}")
    if isinstance(contexts, (str, bytes)) or not contexts:
        raise ValueError("contexts must name at least one context length")
    for T in contexts:
        check_int("contexts", T, low=1)
    dtype = next(model.parameters()).dtype
    arm_context = dict(arm_context or {})
    report: dict[str, dict[str, dict[str, float]]] = {}
    for T in contexts:
        kv = random_kv_states(model.config, T, seed, dtype)
        caches = dict(make_caches())
        if reference not in caches:
            raise ValueError(
                f"make_caches() must return the reference arm {reference!r}; got {sorted(caches)}"
            )
        row = {
            arm: _measure_arm(model, _factory(make_caches, arm), kv, steps, arm_context.get(arm))
            for arm in caches
        }
        ref = row[reference]
        for r in row.values():
            r["latency_ratio_vs_dynamic"] = r["decode_step_s"] / ref["decode_step_s"]
            r["kv_bytes_ratio_vs_dynamic"] = r["kv_bytes"] / ref["kv_bytes"]
            r["peak_memory_ratio_vs_dynamic"] = r["peak_bytes"] / ref["peak_bytes"]
        report[f"T={T}"] = row
    return report


def _factory(make_caches: Callable[[], Mapping[str, Any]], arm: str) -> Callable[[], Any]:
    return lambda: make_caches()[arm]


def _measure_arm(model, make_cache, kv, steps: int, context_factory) -> dict[str, float]:
    token = torch.zeros(1, 1, dtype=torch.long)
    enter = context_factory or contextlib.nullcontext
    with torch.no_grad(), enter():
        cache = make_cache()
        _fill(cache, kv)
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            model(token, cache=cache, use_cache=True)
            times.append(time.perf_counter() - start)
        stored = cache_tensor_bytes(cache)
        del cache
        holder: dict[str, Any] = {}

        def fill_fresh() -> None:  # clones: the cache may keep its inputs, and their frees must be seen
            holder["cache"] = make_cache()
            _fill(holder["cache"], [(k.clone(), v.clone()) for k, v in kv])
            for _ in range(steps):
                model(token, cache=holder["cache"], use_cache=True)

        peak = peak_allocated_bytes(
            lambda: model(token, cache=holder["cache"], use_cache=True), setup=fill_fresh
        )
    return {"decode_step_s": statistics.median(times), "kv_bytes": float(stored), "peak_bytes": float(peak)}

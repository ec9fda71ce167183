"""Memory of a call on CPU: the profiler's allocator peak, and the bytes autograd saves for backward.

PyTorch keeps no allocator statistics for CPU tensors, but the profiler with ``profile_memory=True``
records every allocation and free of the CPU allocator as a ``[memory]`` event with a timestamp and a
signed size. The running sum of those sizes is the live-bytes curve of the profiled region, and its
maximum over a call is the call's peak memory (relative to what was live when the profile started).

:func:`saved_tensor_bytes` is the deterministic training-memory probe the graph claims use: the bytes
of the distinct tensor storages autograd saves for the backward pass of a call (the activation memory
that dominates training), independent of allocator timing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["peak_allocated_bytes", "saved_tensor_bytes"]


@contextlib.contextmanager
def _silence_fd2() -> Iterator[None]:
    """Redirect the process's stderr file descriptor (kineto prints start/stop lines there)."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def peak_allocated_bytes(fn: Callable[[], Any], setup: Callable[[], Any] | None = None) -> int:
    """Peak live bytes allocated on CPU while ``fn()`` runs, counted from before ``setup()``.

    Both calls run under the PyTorch profiler with ``profile_memory=True``. The live-bytes curve is
    the running sum of the allocator events (allocations positive, frees negative) from the start of
    the profile, so whatever ``setup`` allocates and keeps (a filled cache) is part of the level that
    ``fn``'s transient allocations add to. Memory allocated before the profile is invisible, and so
    are its frees: build everything whose frees matter inside ``setup``.

    Parameters
    ----------
    fn : callable
        The measured call (no arguments).
    setup : callable, optional
        Called first (no arguments); its return value is passed to nothing and kept alive until
        ``fn`` returns.

    Returns
    -------
    int
        ``max`` of the live-bytes curve over the events of ``fn`` (and its level when ``fn`` starts).
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if setup is not None and not callable(setup):
        raise TypeError(f"setup must be callable or None, got {type(setup).__name__}")
    from torch.profiler import ProfilerActivity, profile, record_function

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with _silence_fd2():
        prof.start()
    try:
        kept = setup() if setup is not None else None
        with record_function(_MEASURED):
            fn()
        del kept
    finally:
        with _silence_fd2():
            prof.stop()
    events = prof.profiler.kineto_results.events()
    window = next(e for e in events if e.name() == _MEASURED)
    start, end = window.start_ns(), window.start_ns() + window.duration_ns()
    memory = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    live = sum(n for t, n in memory if t < start)
    peak = live
    for t, nbytes in memory:
        if start <= t <= end:
            live += nbytes
            peak = max(peak, live)
    return max(peak, 0)


_MEASURED = "neurips26::measured"


def saved_tensor_bytes(fn: Callable[[], Any]) -> tuple[Any, int]:
    """Run ``fn()`` and return ``(its result, bytes of the tensors autograd saved for backward)``.

    Storages are deduplicated by address (views of one storage count once, at the storage's full
    size), and every saved tensor is kept alive until ``fn`` returns, so a freed address cannot be
    reused and counted twice. Deterministic for a fixed model and input.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    import torch

    seen: dict[int, int] = {}
    alive: list[Any] = []

    def pack(t: Any) -> Any:
        alive.append(t)
        try:
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = max(seen.get(storage.data_ptr(), 0), storage.nbytes())
        except (RuntimeError, NotImplementedError):
            seen[id(t)] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, int(sum(seen.values()))

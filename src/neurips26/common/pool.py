"""Process-pool plumbing for the areas' one-machine scale-out paths.

Several specs declare the same testable scale-out step: split an evaluation into contiguous index spans,
run the spans in worker processes of ``concurrent.futures.ProcessPoolExecutor``, and get exactly the
single-process result back. This module holds the parts every such path shares, written once:

- :func:`resolve_start_method`: ``"fork"`` where the platform has it (workers inherit models, closures and
  fitted objects without pickling), else ``"spawn"``; a named method is checked against the platform's.
- :func:`check_picklable`: a clear ``TypeError`` before any process starts when a non-fork start method
  would have to pickle something that cannot be pickled.
- :func:`contiguous_spans`: ``parts`` near-equal ``[start, stop)`` spans of ``range(n)``, none empty.
- :func:`map_spans`: ``[block_fn(payload, span) for span in spans]`` over a pool whose workers receive the
  payload once (initializer) and pin their thread counts (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and
  ``torch.set_num_threads`` when torch is loaded), in span order.

Shapes
------
``contiguous_spans(n, parts)`` -> ``min(n, parts)`` pairs ``(start, stop)`` covering ``0..n`` in order.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from neurips26.common.checks import check_choice, check_int

_WORKER: dict[str, Any] = {}


def resolve_start_method(start_method: str | None) -> str:
    """The multiprocessing start method to use: ``"fork"`` by default where available, else ``"spawn"``."""
    methods = multiprocessing.get_all_start_methods()
    if start_method is None:
        return "fork" if "fork" in methods else "spawn"
    return check_choice("start_method", start_method, tuple(methods))


def check_picklable(payload: Any, method: str, what: str) -> None:
    """Raise ``TypeError`` naming ``what`` when ``method`` is not fork and ``payload`` cannot be pickled."""
    if method == "fork":
        return
    try:
        pickle.dumps(payload)
    except Exception as err:  # PicklingError, AttributeError or TypeError depending on the object
        raise TypeError(
            f"start_method={method!r} pickles {what}, and they are not picklable "
            f"({type(err).__name__}: {err}); use start_method='fork' or module-level callables"
        ) from None


def contiguous_spans(n: int, parts: int) -> list[tuple[int, int]]:
    """``min(n, parts)`` contiguous, non-empty, near-equal ``[start, stop)`` spans of ``range(n)``."""
    n, parts = check_int("n", n, low=1), check_int("parts", parts, low=1)
    edges = np.linspace(0, n, min(n, parts) + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def _init_worker(block_fn: Callable[..., Any], payload: Mapping[str, Any], threads: int) -> None:
    """Runs once in every worker: keep the block function and payload, pin the thread counts."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["MKL_NUM_THREADS"] = str(threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    _WORKER.clear()
    _WORKER.update(fn=block_fn, payload=payload)


def _run_span(span: tuple[int, int]) -> Any:
    return _WORKER["fn"](_WORKER["payload"], span)


def map_spans(
    block_fn: Callable[[Mapping[str, Any], tuple[int, int]], Any],
    spans: Sequence[tuple[int, int]],
    payload: Mapping[str, Any],
    *,
    workers: int,
    threads: int,
    start_method: str | None = None,
    what: str = "the payload",
) -> list[Any]:
    """``[block_fn(payload, span) for span in spans]``, computed in ``workers`` processes, in span order.

    ``block_fn`` must be a module-level function for start methods other than fork. The payload is sent
    once per worker (inherited under fork), not once per span.
    """
    if not callable(block_fn):
        raise TypeError(f"block_fn must be callable, got {type(block_fn).__name__}")
    workers = check_int("workers", workers, low=1)
    threads = check_int("threads", threads, low=1)
    spans = list(spans)
    if not spans:
        raise ValueError("spans must not be empty (nothing to run)")
    method = resolve_start_method(start_method)
    check_picklable((block_fn, dict(payload)), method, what)
    ctx = multiprocessing.get_context(method)
    with ProcessPoolExecutor(
        max_workers=min(workers, len(spans)),
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(block_fn, payload, threads),
    ) as pool:
        return list(pool.map(_run_span, spans))


__all__ = ["check_picklable", "contiguous_spans", "map_spans", "resolve_start_method"]

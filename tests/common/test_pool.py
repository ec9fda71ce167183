"""The shared process-pool plumbing: span cover, order, thread pinning, picklability and errors."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.common.pool import check_picklable, contiguous_spans, map_spans, resolve_start_method


@given(n=st.integers(1, 200), parts=st.integers(1, 40))
def test_spans_cover_range_in_order_without_empties(n, parts):
    spans = contiguous_spans(n, parts)
    assert len(spans) == min(n, parts)
    assert spans[0][0] == 0 and spans[-1][1] == n
    assert all(a < b for a, b in spans)
    assert all(prev[1] == nxt[0] for prev, nxt in zip(spans, spans[1:]))
    sizes = [b - a for a, b in spans]
    assert max(sizes) - min(sizes) <= 1


def _block_sum(payload, span):
    a, b = span
    return sum(payload["xs"][a:b]) * payload["scale"], os.getpid(), os.environ["OMP_NUM_THREADS"]


def _torch_threads(_payload, _span):
    import torch

    return torch.get_num_threads()


@settings(max_examples=5, deadline=None)
@given(n=st.integers(2, 30), workers=st.integers(2, 3))
def test_map_spans_equals_sequential_in_span_order(n, workers):
    xs = list(range(n))
    spans = contiguous_spans(n, 2 * workers)
    got = map_spans(_block_sum, spans, {"xs": xs, "scale": 3}, workers=workers, threads=1)
    assert [g[0] for g in got] == [sum(xs[a:b]) * 3 for a, b in spans]
    assert all(g[1] != os.getpid() for g in got)  # really computed in worker processes
    assert {g[2] for g in got} == {"1"}


def test_workers_pin_torch_threads():
    import torch  # noqa: F401  (loaded in the parent, so forked workers pin it)

    got = map_spans(_torch_threads, [(0, 1), (1, 2)], {}, workers=2, threads=1)
    assert got == [1, 1]


def test_start_method_default_and_errors():
    assert resolve_start_method(None) in ("fork", "spawn")
    with pytest.raises(ValueError, match="start_method"):
        resolve_start_method("teleport")
    check_picklable(lambda: 0, "fork", "fn")  # fork pickles nothing
    with pytest.raises(TypeError, match="pickles fn"):
        check_picklable(lambda: 0, "spawn", "fn")
    with pytest.raises(TypeError, match="picklable"):
        map_spans(lambda p, s: 0, [(0, 1)], {}, workers=2, threads=1, start_method="spawn")
    with pytest.raises(ValueError, match="spans"):
        map_spans(_block_sum, [], {}, workers=2, threads=1)
    with pytest.raises(ValueError, match="workers"):
        map_spans(_block_sum, [(0, 1)], {}, workers=0, threads=1)
    with pytest.raises(TypeError, match="block_fn"):
        map_spans(3, [(0, 1)], {}, workers=2, threads=1)
    with pytest.raises(ValueError, match="n"):
        contiguous_spans(0, 2)

"""Tests of the profiler-based CPU peak-memory measurement."""

from __future__ import annotations

import pytest
import torch

from neurips26.common.profiling import peak_allocated_bytes


def test_peak_allocated_bytes_tracks_transient_allocations():
    def work():
        a = torch.empty(1000)  # 4000 bytes
        b = torch.empty(500)  # + 2000 -> 6000 live
        del a
        c = torch.empty(250)  # 3000 live
        return b, c

    assert peak_allocated_bytes(work) == 6000
    assert peak_allocated_bytes(lambda: None) == 0


def test_peak_allocated_bytes_rejects_non_callables():
    with pytest.raises(TypeError, match="fn must be callable"):
        peak_allocated_bytes(3)


def test_peak_counts_what_setup_keeps_and_the_frees_it_sees():
    held = {}

    def setup():
        held["a"] = torch.empty(1000)  # 4000 bytes, live when fn starts

    def fn():
        b = torch.empty(250)  # +1000 -> 5000
        del held["a"]  # -4000 (allocated inside the profile, so its free is seen)
        return b

    assert peak_allocated_bytes(fn, setup=setup) == 5000
    with pytest.raises(TypeError, match="setup must be callable"):
        peak_allocated_bytes(fn, setup=1)

"""Aggregation rules against closed forms on hand-built updates."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.federated.robust import (
    AGGREGATORS,
    aggregate,
    coordinate_median,
    fedavg,
    krum,
    krum_scores,
    krum_select,
    multi_krum,
    trimmed_mean,
)

U = torch.tensor([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0], [100.0, -100.0]])


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: one intra-op thread avoids oversubscription on shared CPUs."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def test_fedavg_closed_form():
    assert torch.allclose(fedavg(U[:2]), torch.tensor([1.5, 15.0]))
    w = torch.tensor([1.0, 3.0])
    assert torch.allclose(fedavg(U[:2], w), torch.tensor([1.75, 17.5]))


def test_median_odd_and_even():
    assert torch.equal(coordinate_median(U), torch.tensor([3.0, 20.0]))
    # even n: mean of the two middle values
    assert torch.equal(coordinate_median(U[:4]), torch.tensor([2.5, 25.0]))


def test_trimmed_mean_closed_form():
    # n=5, beta=0.2 -> drop one from each end per coordinate
    assert torch.allclose(trimmed_mean(U, 0.2), torch.tensor([3.0, 20.0]))
    assert torch.allclose(trimmed_mean(U, 0.0), U.mean(0))
    with pytest.raises(ValueError, match="beta"):
        trimmed_mean(U, 0.5)


def test_krum_scores_and_benign_pick():
    # n=5, f=1: each score sums the n-f-2 = 2 closest squared distances
    x = torch.tensor([[0.0], [1.0], [2.0], [3.0], [50.0]])
    scores = krum_scores(x, 1)
    assert torch.allclose(
        scores, torch.tensor([1 + 4, 1 + 1, 1 + 1, 1 + 4, 47**2 + 48**2], dtype=scores.dtype)
    )
    assert krum_select(x, 1).tolist() == [1]  # tie 1 vs 2 broken by index
    assert torch.equal(krum(x, 1), torch.tensor([1.0]))
    assert torch.allclose(multi_krum(x, 1), torch.tensor([1.5]))  # mean of the n-f=4 best: 0,1,2,3
    assert 4 not in krum_select(U, 1, multi=4).tolist()  # the far-away update is excluded


def test_krum_assumption():
    with pytest.raises(ValueError, match="n > 2"):
        krum(U[:4], 1)


def test_unknown_rule_and_empty_set():
    with pytest.raises(ValueError, match="unknown aggregation rule"):
        aggregate("mean-of-everything", U)
    with pytest.raises(ValueError, match="empty client set"):
        fedavg(torch.zeros(0, 3))
    with pytest.raises(ValueError, match=r"shape \(n, d\)"):
        coordinate_median(torch.zeros(3))
    with pytest.raises(ValueError, match="weights"):
        fedavg(U, torch.tensor([1.0, -1.0, 1.0, 1.0, 1.0]))


def test_registry_of_rules():
    assert set(AGGREGATORS) == {"fedavg", "median", "trimmed_mean", "krum", "multi_krum"}
    for name in AGGREGATORS:
        out = aggregate(name, U, num_malicious=1)
        assert out.shape == (2,) and torch.isfinite(out).all()


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(5, 9),
    d=st.integers(1, 6),
    seed=st.integers(0, 10_000),
    rule=st.sampled_from(sorted(AGGREGATORS)),
)
def test_permutation_invariance(n, d, seed, rule):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    perm = torch.randperm(n, generator=g)
    a = aggregate(rule, x, num_malicious=1)
    b = aggregate(rule, x[perm], num_malicious=1)
    assert torch.allclose(a, b, atol=1e-10)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 8), seed=st.integers(0, 10_000))
def test_identical_updates_are_fixed_points(n, seed):
    v = torch.randn(4, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    x = v.repeat(n, 1)
    for rule in ("fedavg", "median", "trimmed_mean"):
        assert torch.allclose(aggregate(rule, x), v)

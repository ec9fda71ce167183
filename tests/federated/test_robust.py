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
    filter_nonfinite,
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
    assert torch.equal(coordinate_median(U), torch.tensor([3.0, 20.0]))  # same kernel: a median selects an input value
    # even n: mean of the two middle values
    assert torch.equal(coordinate_median(U[:4]), torch.tensor([2.5, 25.0]))  # same kernel: (2 + 3) / 2 and (20 + 30) / 2 are exact


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
    assert torch.equal(krum(x, 1), torch.tensor([1.0]))  # same kernel: krum selects an input row
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
    assert set(AGGREGATORS) == {
        "fedavg",
        "median",
        "trimmed_mean",
        "krum",
        "multikrum",
        "multi_krum",
        "bulyan",
    }
    for name in AGGREGATORS:
        out = aggregate(name, U, num_malicious=0 if name == "bulyan" else 1)
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
    f = 0 if rule == "bulyan" and n < 7 else 1
    a = aggregate(rule, x, num_malicious=f)
    b = aggregate(rule, x[perm], num_malicious=f)
    assert torch.allclose(a, b, atol=1e-10)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 8), seed=st.integers(0, 10_000))
def test_identical_updates_are_fixed_points(n, seed):
    v = torch.randn(4, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    x = v.repeat(n, 1)
    for rule in ("fedavg", "median", "trimmed_mean"):
        assert torch.allclose(aggregate(rule, x), v)


# --- non-finite updates (issue 23, defect 1) -------------------------------------------------------
NONFINITE_RULES = ("fedavg", "median", "trimmed_mean", "krum", "multi_krum", "bulyan")


def _nine_with_one_bad(value: float, row: int = 4, seed: int = 0) -> torch.Tensor:
    x = torch.randn(9, 5, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    x[row, 2] = value
    return x


@pytest.mark.parametrize("rule", NONFINITE_RULES)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_nonfinite_update_is_rejected_by_default(rule, value):
    x = _nine_with_one_bad(value)
    with pytest.raises(ValueError, match=r"clients \[4\].*NaN or infinite"):
        aggregate(rule, x, num_malicious=1)


@pytest.mark.parametrize("rule", NONFINITE_RULES)
@pytest.mark.parametrize("row", [0, 4, 8])
def test_drop_policy_equals_the_rule_on_the_finite_clients(rule, row, caplog):
    x = _nine_with_one_bad(float("nan"), row=row)
    clean = torch.cat([x[:row], x[row + 1 :]])
    with caplog.at_level("WARNING", logger="neurips26.federated.robust"):
        out = aggregate(rule, x, num_malicious=1, nonfinite="drop")
    assert torch.isfinite(out).all()
    assert torch.allclose(out, aggregate(rule, clean, num_malicious=1), atol=1e-12)
    assert any("dropped 1 of 9" in r.getMessage() and f"[{row}]" in r.getMessage() for r in caplog.records)


def test_fedavg_drop_filters_weights_too():
    x = _nine_with_one_bad(float("nan"), row=0)
    w = torch.arange(1.0, 10.0, dtype=torch.float64)
    assert torch.allclose(fedavg(x, w, nonfinite="drop"), fedavg(x[1:], w[1:]))


def test_filter_nonfinite_counts_and_errors():
    x = _nine_with_one_bad(float("nan"), row=3)
    x[7, 0] = float("inf")
    res = filter_nonfinite(x, nonfinite="drop")
    assert res.dropped.tolist() == [3, 7] and res.kept.tolist() == [0, 1, 2, 4, 5, 6, 8]
    assert res.updates.shape == (7, 5)
    with pytest.raises(ValueError, match="every one of the 2"):
        filter_nonfinite(torch.full((2, 3), float("nan")), nonfinite="drop")
    with pytest.raises(ValueError, match="nonfinite must be one of"):
        fedavg(x, nonfinite="ignore")


def test_krum_never_selects_a_nonfinite_client():
    # Before the fix a NaN score made Python's sorted() order arbitrary: Krum could pick the NaN client.
    for row in range(9):
        x = _nine_with_one_bad(float("nan"), row=row, seed=row)
        idx = krum_select(x, 1, multi=7, nonfinite="drop")
        assert row not in idx.tolist() and len(idx) == 7
        assert torch.isfinite(krum_scores(x, 1, nonfinite="drop")).sum() == 8
        assert krum_scores(x, 1, nonfinite="drop")[row] == float("inf")
        assert torch.isfinite(multi_krum(x, 1, nonfinite="drop")).all()


def test_krum_scores_of_huge_finite_updates_rank_without_nan():
    # |a|^2 + |b|^2 - 2ab would give inf - inf = NaN here; the direct distances give +inf at worst.
    x = torch.randn(9, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    x[2] = 1e200
    x[5] = -1e200
    scores = krum_scores(x, 1)
    assert not torch.isnan(scores).any()
    assert set(krum_select(x, 1, multi=7).tolist()) == {0, 1, 3, 4, 6, 7, 8}


def test_meta_empty_and_low_precision_updates():
    with pytest.raises(ValueError, match="meta"):
        fedavg(torch.zeros(3, 2, device="meta"))
    with pytest.raises(ValueError, match="at least one coordinate"):
        coordinate_median(torch.zeros(3, 0))
    half = U.to(torch.float16)
    for rule in AGGREGATORS:
        out = aggregate(rule, half, num_malicious=0 if rule == "bulyan" else 1)
        assert out.dtype == torch.float16 and torch.isfinite(out).all()


@settings(max_examples=20, deadline=None)
@given(
    n=st.integers(7, 12),
    seed=st.integers(0, 10_000),
    dtype=st.sampled_from([torch.float16, torch.float32, torch.float64]),
    rule=st.sampled_from(sorted(AGGREGATORS)),
)
def test_finite_updates_of_extreme_magnitude_give_finite_results(n, seed, dtype, rule):
    """Sums near the dtype's largest value must not overflow (the mean of finite values is finite)."""
    big = torch.finfo(dtype).max
    g = torch.Generator().manual_seed(seed)
    x = ((torch.rand(n, 3, generator=g, dtype=torch.float64) * 2 - 1) * big).to(dtype)
    x[0] = big  # every coordinate at the top of the range
    w = torch.rand(n, generator=g, dtype=torch.float64).to(dtype) + 0.5
    out = aggregate(rule, x, weights=w, num_malicious=1)
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert (out.double().abs() <= big).all()

"""Criterion and verdict logic on hand-made numbers."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from neurips26.claims.base import (
    INCONCLUSIVE,
    NOT_REPRODUCED,
    REPRODUCED,
    AtLeast,
    AtMost,
    Better,
    Claim,
    Exact,
    Profile,
    RatioAtLeast,
    SeedResult,
    Within,
    combine,
    criterion_from_dict,
)


def m(**arms):
    return {"acc": {k: list(v) for k, v in arms.items()}}


def test_better_reproduced_when_every_seed_clearly_wins():
    j = Better("acc", baseline="b", margin=0.01).judge(m(a=[0.9, 0.91, 0.92], b=[0.8, 0.8, 0.81]), "a")
    assert j.verdict == REPRODUCED
    assert j.numbers["mean"] == pytest.approx(0.1066666, abs=1e-6)
    assert j.numbers["lower_bound"] > 0.01


def test_better_not_reproduced_when_mean_difference_below_margin():
    j = Better("acc", baseline="b", margin=0.05).judge(m(a=[0.82, 0.83, 0.81], b=[0.8, 0.8, 0.8]), "a")
    assert j.verdict == NOT_REPRODUCED


def test_better_inconclusive_when_spread_straddles_margin():
    j = Better("acc", baseline="b").judge(m(a=[0.9, 0.7, 0.95], b=[0.8, 0.8, 0.8]), "a")
    assert j.numbers["mean"] > 0
    assert j.verdict == INCONCLUSIVE


def test_better_inconclusive_with_too_few_seeds():
    j = Better("acc", baseline="b", min_seeds=2).judge(m(a=[0.9], b=[0.1]), "a")
    assert j.verdict == INCONCLUSIVE


def test_better_lower_is_better_flips_sign():
    j = Better("acc", baseline="b", higher_is_better=False).judge(
        m(a=[1.0, 1.1, 1.0], b=[2.0, 2.1, 2.05]), "a"
    )
    assert j.verdict == REPRODUCED
    assert "lower is better" in j.rule


def test_better_rejects_unpaired_seeds_and_nan():
    with pytest.raises(ValueError, match="seeds"):
        Better("acc", baseline="b").judge(m(a=[1.0, 2.0], b=[1.0]), "a")
    with pytest.raises(ValueError, match="NaN"):
        Better("acc", baseline="b").judge(m(a=[math.nan, 1.0], b=[1.0, 1.0]), "a")
    with pytest.raises(KeyError, match="arm"):
        Better("acc", baseline="zzz").judge(m(a=[1.0]), "a")


def test_ratio_at_least_with_and_without_baseline():
    assert RatioAtLeast("acc", ratio=2.0).judge(m(a=[2.5, 2.6, 2.55]), "a").verdict == REPRODUCED
    assert RatioAtLeast("acc", ratio=2.0).judge(m(a=[1.5, 1.6]), "a").verdict == NOT_REPRODUCED
    j = RatioAtLeast("acc", ratio=1.9, baseline="raw").judge(m(a=[1.0, 1.0], raw=[2.0, 2.0]), "a")
    assert j.verdict == NOT_REPRODUCED and j.numbers["mean_ratio"] == 0.5
    assert RatioAtLeast("acc", ratio=2.0).judge(m(a=[2.0, 2.0]), "a").verdict == REPRODUCED


def test_within_tolerance_cases():
    ok = Within("acc", baseline="fp", tolerance=0.02).judge(
        m(a=[0.80, 0.81, 0.80], fp=[0.81, 0.81, 0.805]), "a"
    )
    assert ok.verdict == REPRODUCED
    bad = Within("acc", baseline="fp", tolerance=0.02).judge(m(a=[0.5, 0.5, 0.5], fp=[0.8, 0.8, 0.8]), "a")
    assert bad.verdict == NOT_REPRODUCED
    noisy = Within("acc", baseline="fp", tolerance=0.02).judge(
        m(a=[0.79, 0.83, 0.80], fp=[0.8, 0.8, 0.8]), "a"
    )
    assert noisy.verdict == INCONCLUSIVE


def test_exact_at_least_at_most():
    assert Exact("acc").judge(m(a=[1.0, 1.0]), "a").verdict == REPRODUCED
    assert Exact("acc").judge(m(a=[1.0, 0.0]), "a").verdict == NOT_REPRODUCED
    assert AtLeast("acc", threshold=0.5).judge(m(a=[0.9, 0.95, 0.92]), "a").verdict == REPRODUCED
    assert AtMost("acc", threshold=0.5).judge(m(a=[0.9, 0.95]), "a").verdict == NOT_REPRODUCED
    assert AtMost("acc", threshold=1.0, arm="b").judge(m(a=[9.0], b=[0.2, 0.3]), "a").verdict == REPRODUCED


def test_combine_rules():
    assert combine([REPRODUCED, REPRODUCED]) == REPRODUCED
    assert combine([REPRODUCED, INCONCLUSIVE]) == INCONCLUSIVE
    assert combine([INCONCLUSIVE, NOT_REPRODUCED]) == NOT_REPRODUCED
    assert combine([]) == INCONCLUSIVE


def test_criterion_round_trip_and_unknown_type():
    crit = Better("acc", baseline="b", margin=0.1, higher_is_better=False)
    assert criterion_from_dict(crit.to_dict()) == crit
    with pytest.raises(ValueError, match="criterion type"):
        criterion_from_dict({"type": "Nope", "metric": "x"})


@given(
    st.lists(st.integers(-8000, 8000).map(lambda v: v / 8), min_size=2, max_size=8),
    st.integers(0, 10),
)
def test_better_verdict_is_invariant_to_a_common_shift(values, shift):
    # dyadic values keep the shifted differences exact in floating point
    base = [0.0] * len(values)
    j1 = Better("acc", baseline="b").judge(m(a=values, b=base), "a")
    j2 = Better("acc", baseline="b").judge(m(a=[v + shift for v in values], b=[shift] * len(values)), "a")
    assert j1.verdict == j2.verdict


@given(st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=6))
def test_method_equal_to_baseline_is_never_reproduced(values):
    assert Better("acc", baseline="b").judge(m(a=values, b=values), "a").verdict == NOT_REPRODUCED


def test_profile_parse_and_budgets():
    assert Profile.parse("quick").budget_s == 60.0
    assert Profile.parse(Profile.FULL).budget_s == 600.0
    with pytest.raises(ValueError, match="profile must be one of"):
        Profile.parse("huge")


def test_seed_result_validation():
    with pytest.raises(ValueError, match="non-empty"):
        SeedResult(metrics={})
    with pytest.raises(TypeError, match="number"):
        SeedResult(metrics={"acc": {"a": "high"}})
    assert SeedResult(metrics={"ok": {"a": True}}).metrics["ok"]["a"] == 1.0


def _noop(config, seed):
    return SeedResult(metrics={"acc": {"a": 1.0}})


def test_claim_validation():
    configs = {"smoke": {}, "quick": {}, "full": {}}
    with pytest.raises(ValueError, match="criteria"):
        Claim("x", "c", "a", ("b",), (), _noop, configs)
    with pytest.raises(ValueError, match="configs lacks"):
        Claim("x", "c", "a", ("b",), (Exact("acc"),), _noop, {"smoke": {}})
    with pytest.raises(ValueError, match="also listed"):
        Claim("x", "c", "a", ("a",), (Exact("acc"),), _noop, configs)
    with pytest.raises(TypeError, match="Criterion"):
        Claim("x", "c", "a", ("b",), ("acc > b",), _noop, configs)

"""Criterion and verdict logic on hand-made numbers."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from neurips26.claims.base import (
    ERROR,
    INCONCLUSIVE,
    NOT_REPRODUCED,
    REPRODUCED,
    AtLeast,
    AtMost,
    Better,
    Claim,
    Exact,
    Headline,
    Profile,
    RatioAtLeast,
    SeedResult,
    Within,
    bounds,
    combine,
    criterion_from_dict,
    judge_claim,
    sweep_record,
)


def m(**arms):
    return {"acc": {k: list(v) for k, v in arms.items()}}


def test_better_reproduced_when_every_seed_clearly_wins():
    j = Better("acc", baseline="b", margin=0.01).judge(m(a=[0.9, 0.91, 0.92], b=[0.8, 0.8, 0.81]), "a")
    assert j.verdict == REPRODUCED
    assert j.numbers["mean"] == pytest.approx(0.1066666, abs=1e-6)
    assert j.numbers["lower_bound"] > 0.01


def test_better_not_reproduced_only_when_the_upper_bound_misses_the_margin():
    # clear loss: every seed below the margin with little spread
    j = Better("acc", baseline="b", margin=0.05).judge(m(a=[0.82, 0.83, 0.81], b=[0.8, 0.8, 0.8]), "a")
    assert j.verdict == NOT_REPRODUCED and j.numbers["upper_bound"] <= 0.05
    # a noisy miss (mean below the margin, upper bound above it) is not a refutation
    noisy = Better("acc", baseline="b", margin=0.05).judge(m(a=[0.80, 0.95, 0.78], b=[0.8, 0.8, 0.8]), "a")
    assert noisy.numbers["mean"] < 0.05 < noisy.numbers["upper_bound"]
    assert noisy.verdict == INCONCLUSIVE


def test_exact_tie_with_zero_spread_is_not_reproduced_for_better():
    j = Better("acc", baseline="b").judge(m(a=[0.5, 0.5, 0.5], b=[0.5, 0.5, 0.5]), "a")
    assert j.verdict == NOT_REPRODUCED
    assert j.numbers["lower_bound"] == j.numbers["upper_bound"] == 0.0


def test_judgement_reports_both_bounds_n_mean_std_and_mde():
    j = Better("acc", baseline="b").judge(m(a=[0.9, 0.8, 0.85, 0.95], b=[0.8, 0.8, 0.8, 0.8]), "a")
    for key in ("n", "mean", "std", "lower_bound", "upper_bound", "mde", "method_mean", "baseline_mean"):
        assert key in j.numbers, key
    assert j.numbers["lower_bound"] < j.numbers["mean"] < j.numbers["upper_bound"]
    assert j.numbers["mde"] > j.numbers["upper_bound"] - j.numbers["mean"] > 0  # power term adds to the t term


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


def test_better_rejects_unpaired_seeds_and_unknown_arms():
    with pytest.raises(ValueError, match="seeds"):
        Better("acc", baseline="b").judge(m(a=[1.0, 2.0], b=[1.0]), "a")
    with pytest.raises(KeyError, match="arm"):
        Better("acc", baseline="zzz").judge(m(a=[1.0]), "a")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_counts_as_the_worst_value(bad):
    # a diverged method loses, whatever the sign of the non-finite value
    lose = Better("acc", baseline="b").judge(m(a=[bad, 0.9, 0.9], b=[0.5, 0.5, 0.5]), "a")
    assert lose.verdict == NOT_REPRODUCED
    lower = Better("loss", baseline="b", higher_is_better=False).judge(
        {"loss": {"a": [bad, 0.1, 0.1], "b": [1.0, 1.0, 1.0]}}, "a"
    )
    assert lower.verdict == NOT_REPRODUCED
    # a diverged baseline loses too
    win = Better("acc", baseline="b").judge(m(a=[0.9, 0.9, 0.9], b=[bad, bad, bad]), "a")
    assert win.verdict == REPRODUCED
    assert AtLeast("acc", threshold=0.1).judge(m(a=[bad, 0.9]), "a").verdict == NOT_REPRODUCED
    assert AtMost("acc", threshold=10.0).judge(m(a=[bad, 0.9]), "a").verdict == NOT_REPRODUCED
    assert Within("acc", baseline="b", tolerance=1.0).judge(m(a=[bad, 0.9], b=[0.9, 0.9]), "a").verdict == NOT_REPRODUCED


def test_zero_seeds_is_inconclusive_not_a_crash():
    assert Better("acc", baseline="b").judge(m(a=[], b=[]), "a").verdict == INCONCLUSIVE
    assert AtLeast("acc", threshold=0.0).judge(m(a=[]), "a").verdict == INCONCLUSIVE
    assert Within("acc", baseline="b", tolerance=0.1).judge(m(a=[], b=[]), "a").verdict == INCONCLUSIVE
    assert bounds([])["n"] == 0.0


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
    # not reproduced only when the lower bound of |d| exceeds the tolerance
    far_noisy = Within("acc", baseline="fp", tolerance=0.02).judge(m(a=[0.7, 0.85, 0.76], fp=[0.8, 0.8, 0.8]), "a")
    assert abs(far_noisy.numbers["mean_diff"]) > 0.02 >= far_noisy.numbers["lower_abs"]
    assert far_noisy.verdict == INCONCLUSIVE


def test_exact_at_least_at_most():
    assert Exact("acc").kind == "design" and Better("acc", baseline="b").kind == "evidence"
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


@given(st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=2, max_size=6))
def test_method_equal_to_baseline_is_never_reproduced(values):
    assert Better("acc", baseline="b").judge(m(a=values, b=values), "a").verdict == NOT_REPRODUCED


@given(
    st.lists(st.integers(-800, 800).map(lambda v: v / 8), min_size=2, max_size=8),
    st.lists(st.integers(-800, 800).map(lambda v: v / 8), min_size=2, max_size=8),
)
def test_the_rule_is_symmetric_under_swapping_method_and_baseline(a, b):
    n = min(len(a), len(b))
    a, b = a[:n], b[:n]
    forward = Better("acc", baseline="b").judge(m(a=a, b=b), "a").verdict
    backward = Better("acc", baseline="a").judge(m(a=a, b=b), "b").verdict
    if forward == REPRODUCED:
        assert backward == NOT_REPRODUCED
    if backward == REPRODUCED:
        assert forward == NOT_REPRODUCED


@given(st.lists(st.floats(-5, 5, allow_nan=False), min_size=2, max_size=8))
def test_bounds_bracket_the_mean(values):
    b = bounds(values)
    assert b["lower_bound"] <= b["mean"] + 1e-12 and b["mean"] <= b["upper_bound"] + 1e-12


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


CONFIGS = {"smoke": {}, "quick": {}, "full": {}}
EVIDENCE = Better("acc", baseline="b", label="acc_vs_b")


def test_claim_validation():
    configs = CONFIGS
    with pytest.raises(ValueError, match="criteria"):
        Claim("x", "c", "a", ("b",), (), _noop, configs)
    with pytest.raises(ValueError, match="configs lacks"):
        Claim("x", "c", "a", ("b",), (EVIDENCE,), _noop, {"smoke": {}})
    with pytest.raises(ValueError, match="also listed"):
        Claim("x", "c", "a", ("a",), (EVIDENCE,), _noop, configs)
    with pytest.raises(TypeError, match="Criterion"):
        Claim("x", "c", "a", ("b",), ("acc > b",), _noop, configs)
    with pytest.raises(ValueError, match="evidence"):
        Claim("x", "c", "a", ("b",), (Exact("acc"),), _noop, configs)
    with pytest.raises(ValueError, match="unknown criterion labels"):
        Claim("x", "c", "a", ("b",), (EVIDENCE,), _noop, configs, headlines=(Headline("h", criteria=("nope",)),))
    with pytest.raises(ValueError, match="unique"):
        Claim("x", "c", "a", ("b",), (EVIDENCE, EVIDENCE), _noop, configs)
    with pytest.raises(ValueError, match="not method, baselines or references"):
        Claim("x", "c", "a", ("b",), (EVIDENCE,), _noop, configs, premises=(AtLeast("acc", arm="sft"),))
    ok = Claim("x", "c", "a", ("b",), (EVIDENCE,), _noop, configs, premises=(AtLeast("acc", arm="sft"),), references=("sft",))
    assert ok.arms == ("a", "b", "sft")


def test_headline_needs_exactly_one_of_criteria_and_untested():
    with pytest.raises(ValueError, match="either"):
        Headline("h")
    with pytest.raises(ValueError, match="either"):
        Headline("h", criteria=("x",), untested="why")
    with pytest.raises(TypeError, match="tuple"):
        Headline("h", criteria="x")


def test_power_check_rejects_a_margin_finer_than_the_metric_granularity():
    coarse = Better("acc", baseline="b", margin=0.05, label="acc_vs_b")
    with pytest.raises(ValueError, match="steps of 1/6"):
        Claim("x", "c", "a", ("b",), (coarse,), _noop, CONFIGS, items={"acc": {"full": 6}})
    with pytest.raises(ValueError, match="steps of 1/10"):
        Claim("x", "c", "a", ("b",), (Within("acc", baseline="b", tolerance=0.05),), _noop, CONFIGS, items={"acc": {"full": 10}})
    claim = Claim("x", "c", "a", ("b",), (coarse,), _noop, CONFIGS, items={"acc": {"quick": 6, "full": 100}})
    assert claim.granularity("acc", "full") == 0.01


def _claim(premises=(), criteria=(EVIDENCE,), headlines=()):
    return Claim(
        "x", "c", "a", ("b",), criteria, _noop, CONFIGS, premises=premises, headlines=headlines, references=("sft",)
    )


WIN = {"acc": {"a": [0.9, 0.91, 0.92], "b": [0.5, 0.52, 0.5], "sft": [0.1, 0.1, 0.12]}}
LOSS = {"acc": {"a": [0.5, 0.51, 0.5], "b": [0.9, 0.91, 0.92], "sft": [0.1, 0.1, 0.12]}}
STRADDLE = {"acc": {"a": [0.9, 0.4, 0.8], "b": [0.6, 0.6, 0.6], "sft": [0.1, 0.1, 0.12]}}


def test_claim_verdicts_on_hand_made_numbers():
    premise = AtLeast("acc", arm="b", threshold=0.3, label="baseline_learns")
    assert judge_claim(_claim((premise,)), WIN)["verdict"] == REPRODUCED
    assert judge_claim(_claim((premise,)), LOSS)["verdict"] == NOT_REPRODUCED
    straddle = judge_claim(_claim((premise,)), STRADDLE)
    assert straddle["verdict"] == INCONCLUSIVE and straddle["verdict_reason"] == "spread"


def test_a_failing_premise_makes_the_claim_inconclusive_testbed():
    premise = AtLeast("acc", arm="sft", threshold=0.5, label="sft_is_competent")
    judged = judge_claim(_claim((premise,)), LOSS)  # the comparison loses, but the testbed is broken
    assert judged["verdict"] == INCONCLUSIVE
    assert judged["verdict_reason"] == "testbed" and judged["deciding"] == "sft_is_competent"
    assert judged["premises"][0]["verdict"] == NOT_REPRODUCED


def test_a_criterion_that_errors_is_recorded_as_error():
    broken = Better("missing_metric", baseline="b", label="broken")
    judged = judge_claim(_claim(criteria=(EVIDENCE, broken)), WIN)
    entry = judged["criteria"][1]
    assert entry["verdict"] == ERROR and "missing_metric" in entry["error"]
    assert judged["verdict"] == INCONCLUSIVE and judged["verdict_reason"] == "error"


def test_unequal_seed_counts_across_arms_raise():
    with pytest.raises(ValueError, match="unequal seed counts"):
        judge_claim(_claim(), {"acc": {"a": [0.9, 0.9], "b": [0.5], "sft": [0.1, 0.1]}})


def test_design_only_success_is_not_reproduced_and_deciding_is_weakest():
    design = Exact("flag", label="identity")
    weak = Better("acc", baseline="b", margin=0.3, label="weak")
    metrics = {**WIN, "flag": {"a": [1.0] * 3, "b": [1.0] * 3, "sft": [1.0] * 3}}
    judged = judge_claim(_claim(criteria=(EVIDENCE, weak, design)), metrics)
    assert judged["verdict"] == REPRODUCED and judged["deciding"] == "weak"
    assert [c["kind"] for c in judged["criteria"]] == ["evidence", "evidence", "design"]


def test_headlines_carry_the_verdicts_of_their_criteria():
    heads = (Headline("beats b", criteria=("acc_vs_b",)), Headline("16 GPUs", untested="needs 16 GPUs"))
    judged = judge_claim(_claim(headlines=heads), WIN)
    assert judged["headlines"][0]["status"] == REPRODUCED
    assert judged["headlines"][0]["verdicts"] == {"acc_vs_b": REPRODUCED}
    assert judged["headlines"][1]["status"] == "untested"


def test_sweep_record_flags_the_grid_edge():
    assert sweep_record([1e-3, 1e-2, 1e-1], 1e-2)["at_edge"] is False
    assert sweep_record([1e-3, 1e-2, 1e-1], 1e-1)["at_edge"] is True
    with pytest.raises(ValueError, match="grid values"):
        sweep_record([1e-3, 1e-2], 5.0)


def test_criterion_arguments_are_validated():
    with pytest.raises(ValueError, match="kind must be one of"):
        Better("acc", baseline="b", kind="vibes")
    with pytest.raises(ValueError, match="min_seeds must be an int >= 1"):
        Better("acc", baseline="b", min_seeds=0)
    with pytest.raises(ValueError, match="confidence"):
        AtLeast("acc", confidence=1.5)
    with pytest.raises(ValueError, match="baseline must name an arm"):
        Within("acc", tolerance=0.1)
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        Within("acc", baseline="b", tolerance=-1.0)
    with pytest.raises(ValueError, match="grid must not be empty"):
        sweep_record([], 1.0)


# ------------------------------------------------------------------ claims-v3: headlines, Holm, floors, cost
def _v3(criteria, headlines=(), premises=(), baselines=("b", "c"), **kw):
    return Claim("x", "c", "a", baselines, criteria, _noop, CONFIGS, premises=premises, headlines=headlines, **kw)


def test_holm_step_down_on_hand_computed_p_values():
    """n = 2 seeds: t has 1 dof (Cauchy), so p = 1/2 + atan(t)/pi is exact by hand.

    Differences a - b = [-0.9, -1.1]: t = -10, p = 0.5 - atan(10)/pi = 0.031726; a - c = [-1.0, -1.5]:
    t = -5, p = 0.5 - atan(5)/pi = 0.062833. Both are "not reproduced" on their own (p <= 0.1).
    Holm with k = 2: 0.031726 <= 0.1/2 refutes, then 0.062833 <= 0.1/1 refutes too.
    """
    vs_b, vs_c = Better("acc", baseline="b", label="vs_b"), Better("acc", baseline="c", label="vs_c")
    metrics = {"acc": {"a": [0.5, 0.5], "b": [1.4, 1.6], "c": [1.5, 2.0]}}
    judged = judge_claim(_v3((vs_b, vs_c), (Headline("h", criteria=("vs_b", "vs_c")),)), metrics)
    p_b = 0.5 + math.atan(-10) / math.pi
    p_c = 0.5 + math.atan(-5) / math.pi
    assert [c["verdict"] for c in judged["criteria"]] == [NOT_REPRODUCED, NOT_REPRODUCED]
    holm = judged["headlines"][0]["holm"]
    assert holm["vs_b"]["p_refute"] == pytest.approx(p_b, abs=1e-9) and holm["vs_b"]["threshold"] == pytest.approx(0.05)
    assert holm["vs_c"]["p_refute"] == pytest.approx(p_c, abs=1e-9) and holm["vs_c"]["threshold"] == pytest.approx(0.1)
    assert holm["vs_b"]["refuted"] and holm["vs_c"]["refuted"]
    assert (judged["verdict"], judged["verdict_reason"], judged["deciding"]) == (NOT_REPRODUCED, "criteria", "vs_b")


def test_holm_keeps_two_marginal_refutations_inconclusive():
    """Both comparisons at p = 0.062833 (t = -5): each alone is "not reproduced", but the smaller of the two
    must clear 0.1/2 = 0.05 under Holm and does not, so the step-down stops: the headline is inconclusive."""
    vs_b, vs_c = Better("acc", baseline="b", label="vs_b"), Better("acc", baseline="c", label="vs_c")
    metrics = {"acc": {"a": [0.5, 0.5], "b": [1.5, 2.0], "c": [1.5, 2.0]}}
    judged = judge_claim(_v3((vs_b, vs_c), (Headline("h", criteria=("vs_b", "vs_c")),)), metrics)
    assert [c["verdict"] for c in judged["criteria"]] == [NOT_REPRODUCED, NOT_REPRODUCED]
    assert not any(v["refuted"] for v in judged["headlines"][0]["holm"].values())
    assert (judged["verdict"], judged["verdict_reason"]) == (INCONCLUSIVE, "spread")
    alone = judge_claim(_v3((vs_b,), (Headline("h", criteria=("vs_b",)),)), metrics)  # k = 1: 0.0628 <= 0.1
    assert alone["verdict"] == NOT_REPRODUCED


def test_the_primary_headline_decides_and_secondary_headlines_keep_their_own_verdicts():
    win, lose = Better("acc", baseline="b", label="win"), Better("acc", baseline="c", label="lose")
    metrics = {"acc": {"a": [0.9, 0.91, 0.92], "b": [0.5, 0.52, 0.5], "c": [0.95, 0.97, 0.99]}}
    heads = (Headline("main", criteria=("win",)), Headline("side", criteria=("lose",)))
    judged = judge_claim(_v3((win, lose), heads), metrics)  # default primary: the first tested headline
    assert (judged["verdict"], judged["deciding"], judged["primary"]) == (REPRODUCED, "win", ["main"])
    assert [h["verdict"] for h in judged["headlines"]] == [REPRODUCED, NOT_REPRODUCED]
    assert [h["primary"] for h in judged["headlines"]] == [True, False]
    heads = (Headline("main", criteria=("win",)), Headline("side", criteria=("lose",), primary=True))
    judged = judge_claim(_v3((win, lose), heads), metrics)
    assert (judged["verdict"], judged["deciding"], judged["primary"]) == (NOT_REPRODUCED, "lose", ["side"])
    both = (Headline("main", criteria=("win",), primary=True), Headline("side", criteria=("lose",), primary=True))
    assert judge_claim(_v3((win, lose), both), metrics)["verdict"] == NOT_REPRODUCED
    with pytest.raises(ValueError, match="untested headline cannot be primary"):
        Headline("h", untested="why", primary=True)
    with pytest.raises(ValueError, match="no evidence criterion"):
        _v3((win, Exact("flag", label="d")), (Headline("h", criteria=("d",), primary=True),))


def test_default_primary_skips_headlines_without_evidence():
    design, win = Exact("flag", label="identity"), Better("acc", baseline="b", label="win")
    metrics = {"acc": {"a": [0.9, 0.91, 0.92], "b": [0.5, 0.52, 0.5], "c": [0.1] * 3}, "flag": {"a": [0.0] * 3}}
    heads = (Headline("exact", criteria=("identity",)), Headline("beats b", criteria=("win",)))
    judged = judge_claim(_v3((design, win), heads), metrics)
    assert judged["primary"] == ["beats b"] and judged["verdict"] == REPRODUCED
    assert (judged["headlines"][0]["verdict"], judged["headlines"][0]["reason"]) == (INCONCLUSIVE, "evidence")


def test_a_failed_design_check_makes_its_headline_inconclusive_never_not_reproduced():
    design, win = Exact("flag", label="identity"), Better("acc", baseline="b", label="win")
    metrics = {"acc": {"a": [0.9, 0.91, 0.92], "b": [0.5, 0.52, 0.5], "c": [0.1] * 3}, "flag": {"a": [1.0, 0.0, 1.0]}}
    judged = judge_claim(_v3((design, win), (Headline("h", criteria=("win", "identity")),)), metrics)
    assert judged["criteria"][0]["verdict"] == NOT_REPRODUCED
    assert (judged["verdict"], judged["verdict_reason"], judged["deciding"]) == (INCONCLUSIVE, "design", "identity")


def test_cost_never_decides_unless_it_opts_in_with_a_reason():
    win = Better("acc", baseline="b", label="win")
    slow = AtMost("step_ratio", threshold=1.0, kind="cost", label="slow")
    metrics = {"acc": {"a": [0.9, 0.91, 0.92], "b": [0.5, 0.52, 0.5], "c": [0.1] * 3}, "step_ratio": {"a": [2.0, 2.1, 2.2]}}
    head = (Headline("h", criteria=("win", "slow")),)
    judged = judge_claim(_v3((win, slow), head), metrics)
    assert judged["criteria"][1]["verdict"] == NOT_REPRODUCED and judged["criteria"][1]["kind"] == "cost"
    assert (judged["verdict"], judged["deciding"]) == (REPRODUCED, "win")
    opted = AtMost("step_ratio", threshold=1.0, kind="cost", label="slow", cost_decides="the headline is our kernel's")
    judged = judge_claim(_v3((win, opted), head), metrics)
    assert (judged["verdict"], judged["deciding"]) == (NOT_REPRODUCED, "slow")
    only_cost = judge_claim(_v3((slow,), (Headline("h", criteria=("slow",)),)), metrics)
    assert (only_cost["verdict"], only_cost["verdict_reason"]) == (INCONCLUSIVE, "evidence")
    with pytest.raises(ValueError, match="only for kind='cost'"):
        AtMost("step_ratio", threshold=1.0, cost_decides="why")
    with pytest.raises(ValueError, match="kind must be one of"):
        AtMost("step_ratio", threshold=1.0, kind="speed")


def test_a_tie_at_a_floor_or_sentinel_on_every_seed_is_inconclusive_testbed_floor():
    tie = Better("acc", baseline="b", label="tie")
    judged = judge_claim(_v3((tie,)), {"acc": {"a": [0.0, 0.0, 0.0], "b": [0.0, 0.0, 0.0], "c": [0.3] * 3}})
    entry = judged["criteria"][0]
    assert (entry["verdict"], entry["stat_verdict"], entry["reason"]) == (INCONCLUSIVE, NOT_REPRODUCED, "testbed: floor")
    assert (judged["verdict"], judged["verdict_reason"], judged["deciding"]) == (INCONCLUSIVE, "testbed: floor", "tie")
    ceiling = judge_claim(_v3((tie,)), {"acc": {"a": [1.0, 1.0], "b": [1.0, 1.0], "c": [0.3] * 2}})
    assert ceiling["verdict_reason"] == "testbed: floor"
    # a step horizon is a sentinel only where declared; otherwise the tie is a constant that cannot fail
    steps = {"steps": {"a": [320.0] * 3, "b": [320.0] * 3, "c": [1.0] * 3}}
    horizon = Better("steps", baseline="b", higher_is_better=False, sentinels=(320,), label="tie")
    assert judge_claim(_v3((horizon,)), steps)["verdict_reason"] == "testbed: floor"
    plain = Better("steps", baseline="b", higher_is_better=False, label="tie")
    assert judge_claim(_v3((plain,)), steps)["verdict_reason"] == "constant"
    # a ratio of two zeros is a floor tie, not an error
    ratio = RatioAtLeast("acc", baseline="b", ratio=1.0, label="tie")
    assert judge_claim(_v3((ratio,)), {"acc": {"a": [0.0] * 2, "b": [0.0] * 2, "c": [1.0] * 2}})["verdict_reason"] == "testbed: floor"
    # ties on some seeds only are ordinary numbers
    some = judge_claim(_v3((tie,)), {"acc": {"a": [0.0, 0.5, 0.6], "b": [0.0, 0.1, 0.1], "c": [0.3] * 3}})
    assert some["criteria"][0]["reason"] == ""


def test_a_method_arm_at_its_floor_is_error_suspect_until_a_diagnosis_is_declared():
    collapse = Within("acc", baseline="b", tolerance=0.05, label="matches_b")
    metrics = {"acc": {"a": [0.0, 0.0, 0.0], "b": [0.47, 0.59, 0.47], "c": [0.9] * 3}}
    judged = judge_claim(_v3((collapse,)), metrics)
    entry = judged["criteria"][0]
    assert (entry["verdict"], entry["stat_verdict"], entry["reason"]) == (INCONCLUSIVE, NOT_REPRODUCED, "error-suspect")
    assert (judged["verdict"], judged["verdict_reason"], judged["deciding"]) == (INCONCLUSIVE, "error-suspect", "matches_b")
    # a collapse in a secondary headline still holds the claim: the arm is suspect everywhere
    win = Better("acc", baseline="c", margin=-1.0, label="win")
    heads = (Headline("main", criteria=("win",)), Headline("side", criteria=("matches_b",)))
    assert judge_claim(_v3((win, collapse), heads), metrics)["verdict_reason"] == "error-suspect"
    diagnosed = _v3((collapse,), diagnoses={"matches_b": "tests/x.py: the quantiser's scale underflows"})
    judged = judge_claim(diagnosed, metrics)
    assert judged["criteria"][0]["diagnosis"].startswith("tests/x.py")
    assert (judged["verdict"], judged["deciding"]) == (NOT_REPRODUCED, "matches_b")
    # lower is better: the floor is +inf (never reached); "none" declares that the metric has no floor
    never = Better("steps", baseline="b", higher_is_better=False, label="never")
    inf = {"steps": {"a": [math.inf] * 3, "b": [10.0, 12.0, 11.0], "c": [1.0] * 3}}
    assert judge_claim(_v3((never,)), inf)["verdict_reason"] == "error-suspect"
    free = Within("acc", baseline="b", tolerance=0.05, floor="none", label="matches_b")
    assert judge_claim(_v3((free,)), metrics)["verdict"] == NOT_REPRODUCED
    with pytest.raises(ValueError, match="unknown criterion labels"):
        _v3((collapse,), diagnoses={"nope": "x"})


def test_a_criterion_comparing_an_arm_with_itself_is_rejected_and_equal_constants_are_flagged():
    with pytest.raises(ValueError, match="with itself"):
        _v3((Better("acc", baseline="b", arm="b", label="self"),))
    bits = Within("bits", baseline="b", tolerance=0.1, kind="design", label="bits_matched")
    win = Better("acc", baseline="b", label="win")
    metrics = {"acc": {"a": [0.9, 0.91, 0.92], "b": [0.5, 0.52, 0.5], "c": [0.1] * 3}, "bits": {"a": [2.0] * 3, "b": [2.0] * 3}}
    judged = judge_claim(_v3((win, bits), (Headline("h", criteria=("win", "bits_matched")),)), metrics)
    assert judged["criteria"][1]["reason"] == "constant" and judged["criteria"][1]["stat_verdict"] == REPRODUCED
    assert (judged["verdict"], judged["verdict_reason"]) == (INCONCLUSIVE, "constant")
    one_seed = {k: {a: v[:1] for a, v in arms.items()} for k, arms in metrics.items()}
    assert judge_claim(_v3((win, bits)), one_seed)["criteria"][1]["reason"] == ""  # one seed proves nothing


def test_rejudge_recomputes_a_stored_result_by_the_current_rule():
    from neurips26.claims.base import RULE_VERSION, rejudge

    win, lose = Better("acc", baseline="b", label="win"), Better("acc", baseline="c", label="lose")
    metrics = {"acc": {"a": [0.9, 0.91, 0.92], "b": [0.5, 0.52, 0.5], "c": [0.95, 0.97, 0.99]}}
    heads = (Headline("main", criteria=("win",)), Headline("side", criteria=("lose",)))
    stored = {  # as an older rule wrote it: any failing criterion refuted the claim
        "slug": "x", "method": "a", "metrics": metrics, "verdict": NOT_REPRODUCED, "verdict_reason": "criteria",
        "deciding": "lose", "premises": [],
        "criteria": [{"key": c.label, "kind": "evidence", "data": {k: v for k, v in c.to_dict().items() if k not in ("floor", "sentinels", "cost_decides")}} for c in (win, lose)],
        "headlines": [{"text": h.text, "criteria": list(h.criteria), "untested": ""} for h in heads],
    }  # fmt: skip
    again = rejudge(stored, claim=None)
    assert (again["verdict"], again["deciding"], again["rule_version"]) == (REPRODUCED, "win", RULE_VERSION)
    assert again["recorded"] == {"verdict": NOT_REPRODUCED, "verdict_reason": "criteria", "deciding": "lose", "rule_version": 2}
    # the current claim's declarations (kind, primary headline) apply to the recorded comparisons
    current = _v3((win, Better("acc", baseline="c", label="lose", kind="cost")), heads)
    assert rejudge(stored, claim=current)["headlines"][1]["verdict"] == INCONCLUSIVE
    assert rejudge({"slug": "x", "verdict": "reproduced"}) == {"slug": "x", "verdict": "reproduced"}  # schema 1

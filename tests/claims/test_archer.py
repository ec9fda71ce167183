"""Archer claim check: structure (arms incl. the SFT reference, premises, headlines, budget);
loss-overhead benchmark. Generic smoke checks (finiteness, determinism, glossary, plot): test_conformance.py."""

from __future__ import annotations

from neurips26.claims.archer import ARMS, CLAIM, REFERENCE, loss_overhead, run


def test_smoke_structure_and_budget(smoke_result):
    first = smoke_result("archer")
    assert set(CLAIM.arms) == {*ARMS, REFERENCE}
    for name in ("pass@1", "pass@8", "arith_correct", "final_entropy"):
        assert set(first["metrics"][name]) == {*ARMS, REFERENCE}, name
    for name in ("reward_gain", "reasoning_frac"):
        assert set(first["metrics"][name]) == set(ARMS), name
    for name in ("pass@1", "pass@8", "arith_correct"):
        assert all(0.0 <= v <= 1.0 for vals in first["metrics"][name].values() for v in vals)
    info = first["info"][0]
    assert all(info["arms"][arm]["finite"] for arm in ARMS)
    assert 0.05 <= info["arms"]["archer"]["mean_reasoning_frac"] <= 0.35
    assert info["arms"]["grpo"]["mean_reasoning_frac"] == 0.0  # split disabled
    assert info["arms"]["archer"]["rollout_tokens_per_s"] > 0
    assert set(first["curves"]["entropy"]) == set(ARMS)
    # every RL arm gets the same budget
    budgets = info["budget"]
    assert set(budgets) == set(ARMS)
    assert len({tuple(sorted((k, str(v)) for k, v in b.items())) for b in budgets.values()}) == 1


def test_parallel_arms_match_sequential():
    config = dict(CLAIM.configs["smoke"], arms=("archer", "dapo"))
    seq = run(dict(config, workers=1), 0)
    par = run(dict(config, workers=2), 0)
    assert seq.metrics == par.metrics
    assert seq.curves == par.curves


def test_declarations():
    labels = {c.label for c in (*CLAIM.premises, *CLAIM.criteria)}
    assert all(c.label for c in (*CLAIM.premises, *CLAIM.criteria))
    assert {"sft_not_too_weak", "sft_not_too_strong", "grpo_learns"} <= {p.label for p in CLAIM.premises}
    assert any(c.kind == "evidence" for c in CLAIM.criteria)
    assert CLAIM.headlines and all(set(h.criteria) <= labels for h in CLAIM.headlines)
    assert {c.metric for c in CLAIM.criteria} <= set(CLAIM.glossary)
    assert len(CLAIM.seeds["full"]) >= 3
    full = CLAIM.configs["full"]
    assert full["n_eval"] == CLAIM.items["pass@1"]["full"]
    for profile in ("smoke", "quick", "full"):
        assert CLAIM.configs[profile]["n_eval"] == CLAIM.items["pass@1"][profile]


def test_loss_overhead_benchmark_runs():
    out = loss_overhead(batch=8, length=6, vocab=10, repeats=2)
    assert out["archer_loss_s"] > 0 and out["grpo_loss_s"] > 0 and out["archer_over_grpo"] > 0

"""Archer claim check: smoke profile structure, finiteness, determinism; loss-overhead benchmark."""

from __future__ import annotations

import math

from neurips26.claims.archer import ARMS, CLAIM, loss_overhead
from neurips26.claims.runner import run_claim


def test_smoke_structure_and_determinism(tmp_path):
    first = run_claim("archer", "smoke", out=tmp_path / "a", force=True)
    second = run_claim("archer", "smoke", out=tmp_path / "b", force=True)
    assert first["metrics"] == second["metrics"]
    assert set(CLAIM.arms) == set(ARMS)
    for crit in CLAIM.criteria:
        assert crit.metric in first["metrics"]
    for name, arms in first["metrics"].items():
        assert set(arms) == set(ARMS), name
        for arm, values in arms.items():
            assert all(math.isfinite(v) for v in values), (name, arm)
    for name in ("pass@1", "pass@8", "arith_correct"):
        assert all(0.0 <= v <= 1.0 for arm in ARMS for v in first["metrics"][name][arm])
    info = first["info"][0]
    assert all(info["arms"][arm]["finite"] for arm in ARMS)
    assert 0.05 <= info["arms"]["archer"]["mean_reasoning_frac"] <= 0.35
    assert info["arms"]["grpo"]["mean_reasoning_frac"] == 0.0  # split disabled
    assert info["arms"]["archer"]["rollout_tokens_per_s"] > 0
    assert set(first["curves"]["entropy"]) == set(ARMS)
    assert first["verdict"] in ("reproduced", "not reproduced", "inconclusive")


def test_glossary_covers_metrics_and_criteria_declared():
    assert {c.metric for c in CLAIM.criteria} <= set(CLAIM.glossary)
    assert len(CLAIM.seeds["full"]) >= 3


def test_loss_overhead_benchmark_runs():
    out = loss_overhead(batch=8, length=6, vocab=10, repeats=2)
    assert out["archer_loss_s"] > 0 and out["grpo_loss_s"] > 0 and out["archer_over_grpo"] > 0

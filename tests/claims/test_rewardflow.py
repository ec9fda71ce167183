"""Smoke profile of the RewardFlow claim check: structure, arms, finiteness, determinism, equal budgets."""

import math

from neurips26.claims.rewardflow import CLAIM
from neurips26.claims.runner import run_claim


def test_smoke_structure_determinism_and_budget(tmp_path):
    a = run_claim("rewardflow", "smoke", out=tmp_path / "a", force=True)
    b = run_claim("rewardflow", "smoke", out=tmp_path / "b", force=True)
    for crit in (*CLAIM.criteria, *CLAIM.premises):
        for arm in crit.arms_used(CLAIM.method):
            assert arm in a["metrics"][crit.metric], (crit.label, arm)
    assert set(a["metrics"]["train_success"]) == set(CLAIM.arms)
    for name, arms in a["metrics"].items():
        for values in arms.values():
            assert all(math.isfinite(v) for v in values), name
    assert a["metrics"] == b["metrics"]
    assert set(CLAIM.glossary) == set(a["metrics"])
    info = a["info"][0]
    budgets = {arm: rec["env_step_budget"] for arm, rec in info["budget"].items()}
    assert set(budgets) == {"rewardflow", "grpo", "gigpo"} and len(set(budgets.values())) == 1
    assert all(rec["env_steps_used"] >= rec["env_step_budget"] for rec in info["budget"].values())
    # GRPO has no step-level term by construction; the graph arm's unique-state ratio is a fraction
    assert a["metrics"]["step_adv_nonzero"]["grpo"] == [0.0]
    assert 0 < a["metrics"]["unique_state_ratio"]["rewardflow"][0] <= 1

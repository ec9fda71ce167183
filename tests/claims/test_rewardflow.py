"""Smoke profile of the RewardFlow claim check: structure, arms, equal budgets. Generic smoke checks (finiteness,
determinism, glossary, plot): test_conformance.py."""

from neurips26.claims.rewardflow import CLAIM


def test_smoke_arms_and_budget(smoke_result):
    a = smoke_result("rewardflow")
    assert set(a["metrics"]["train_success"]) == set(CLAIM.arms)
    assert set(CLAIM.glossary) == set(a["metrics"])
    info = a["info"][0]
    budgets = {arm: rec["env_step_budget"] for arm, rec in info["budget"].items()}
    assert set(budgets) == {"rewardflow", "grpo", "gigpo"} and len(set(budgets.values())) == 1
    assert all(rec["env_steps_used"] >= rec["env_step_budget"] for rec in info["budget"].values())
    # GRPO has no step-level term by construction; the graph arm's unique-state ratio is a fraction
    assert a["metrics"]["step_adv_nonzero"]["grpo"] == [0.0]
    assert 0 < a["metrics"]["unique_state_ratio"]["rewardflow"][0] <= 1

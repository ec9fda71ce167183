"""Smoke profile of the AEM claim check: structure, arms, equal budgets. Generic smoke checks (finiteness,
determinism, glossary, plot): test_conformance.py."""

from neurips26.claims.aem import CLAIM


def test_smoke_arms_and_budget(smoke_result):
    a = smoke_result("aem")
    assert set(a["metrics"]["curve_area"]) == {"grpo", "grpo_aem", "gigpo", "gigpo_aem"}
    assert set(CLAIM.glossary) == set(a["metrics"])
    info = a["info"][0]
    budgets = {arm: rec["env_step_budget"] for arm, rec in info["budget"].items()}
    assert len(budgets) == 4 and len(set(budgets.values())) == 1
    # the bandit check is part of every profile and its mechanism holds even on 20 draws
    assert a["metrics"]["bandit_direction_neg"]["grpo_aem"][0] >= 0.8

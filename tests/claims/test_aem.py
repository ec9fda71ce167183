"""Smoke profile of the AEM claim check: structure, arms, finiteness, determinism, equal budgets."""

import math

from neurips26.claims.aem import CLAIM
from neurips26.claims.runner import run_claim


def test_smoke_structure_determinism_and_budget(tmp_path):
    a = run_claim("aem", "smoke", out=tmp_path / "a", force=True)
    b = run_claim("aem", "smoke", out=tmp_path / "b", force=True)
    for crit in (*CLAIM.criteria, *CLAIM.premises):
        for arm in crit.arms_used(CLAIM.method):
            assert arm in a["metrics"][crit.metric], (crit.label, arm)
    assert set(a["metrics"]["curve_area"]) == {"grpo", "grpo_aem", "gigpo", "gigpo_aem"}
    for name, arms in a["metrics"].items():
        for values in arms.values():
            assert all(math.isfinite(v) for v in values), name
    assert a["metrics"] == b["metrics"]
    assert set(CLAIM.glossary) == set(a["metrics"])
    info = a["info"][0]
    budgets = {arm: rec["env_step_budget"] for arm, rec in info["budget"].items()}
    assert len(budgets) == 4 and len(set(budgets.values())) == 1
    # the bandit check is part of every profile and its mechanism holds even on 20 draws
    assert a["metrics"]["bandit_direction_neg"]["grpo_aem"][0] >= 0.8

"""Smoke profile of the RecPo claim check: structure, arms, equal budgets. Generic smoke checks (finiteness,
determinism, glossary, plot): test_conformance.py."""

import pytest

pytest.importorskip(
    "gymnasium_robotics", reason="the claim runs the kitchen built from gymnasium_robotics (robotics extra)"
)

from neurips26.claims.recpo import ARMS, CLAIM  # noqa: E402


def test_smoke_arms_budget_and_scope(smoke_result):
    a = smoke_result("recpo")
    for name in ("heldout_completion", "heldout_success", "heldout_skills", "train_completion"):
        assert set(a["metrics"][name]) == set(ARMS) == set(CLAIM.arms), name
    for arm in ARMS:
        assert 0.0 <= a["metrics"]["heldout_completion"][arm][0] <= 1.0
    info = a["info"][0]
    assert info["budget"]["same_training_demonstrations_for_every_arm"] is True
    assert info["budget"]["training_demonstrations"] == 24 * CLAIM.configs["smoke"]["demos_per_composition"]
    assert set(info["planning_time_per_task"]) == set(ARMS)
    assert all(v["mean_ms"] >= 0 for v in info["planning_time_per_task"].values())
    assert "symbolic kitchen" in info["scope"] and "not robot-level" in info["scope"]
    assert len(info["per_task_completion"]["recpo"]) == CLAIM.configs["smoke"]["tasks"]
    # the oracle solves every generated task (the generator checks it)
    assert a["metrics"]["heldout_completion"]["oracle"][0] == 1.0


def test_every_headline_is_mapped():
    texts = [h.text for h in CLAIM.headlines]
    assert any("91.7%" in t for t in texts)
    assert all(h.criteria or h.untested for h in CLAIM.headlines)

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


def test_full_profile_runs_textworld_and_a_tiny_textworld_seed_runs_end_to_end():
    """The full profile's TextWorld path (games, BC, rank-mode RL for every arm, evaluation) at toy size."""
    import math

    from neurips26.claims import rewardflow
    from neurips26.testbeds.agent_games import SMOKE, SMOKE_MODEL

    full, quick = CLAIM.configs["full"], CLAIM.configs["quick"]
    assert full["env"] == "textworld" and quick.get("env", "keydoor") == "keydoor"
    cfg = {
        **full,
        **SMOKE,
        "textworld": {**full["textworld"], "n_train": 4, "n_test": 1, "games_seed": 0, "max_steps": 4},
        "model": {**SMOKE_MODEL, "max_position_embeddings": 128},
        "env_step_budget": 12,
        "measure_ray": False,
        "throughput": {"episodes_per_task": 1, "steps": 2},
    }
    res = rewardflow.run(cfg, 0)
    assert set(res.metrics) == set(CLAIM.glossary)
    assert set(res.metrics["train_success"]) == {"bc", *CLAIM.arms}
    assert all(math.isfinite(v) for arms in res.metrics.values() for v in arms.values())
    budget = res.info["budget"]
    assert {rec["environment"] for rec in budget.values()} == {"textworld"}
    assert all(rec["env_steps_used"] >= rec["env_step_budget"] == 12 for rec in budget.values())
    assert res.info["arms"]["rewardflow"]["invalid_rate"] == 0.0  # ranking only takes admissible commands

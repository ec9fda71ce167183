"""Smoke profile of the AHPA claim check: structure, arms, equal budgets. Generic smoke checks (finiteness,
determinism, glossary, plot): test_conformance.py."""

from neurips26.claims.ahpa import CLAIM, TRAINED


def test_smoke_structure_determinism_and_budgets(smoke_result, smoke_rerun):
    a, again = smoke_result("ahpa"), smoke_rerun("ahpa")
    for name in ("fd_final", "fd_auc", "class_acc", "held_loss", "steps_to_target"):
        assert set(a["metrics"][name]) == set(TRAINED), name
    assert {arm: runs[0] for arm, runs in a["curves"]["fd"].items()} == again["curves"]["fd"]
    assert set(CLAIM.glossary) == set(a["metrics"])
    info = a["info"][0]
    budgets = info["budget"]
    assert set(budgets) == set(TRAINED)
    for key in ("steps", "batch", "lr", "dit_params"):
        assert len({rec[key] for rec in budgets.values()}) == 1, key
    assert budgets["vanilla"]["aux_params"] == 0 and budgets["ahpa"]["aux_params"] > 0
    # the sampled model is the bare DiT in every arm
    assert a["metrics"]["inference_params_ratio"]["ahpa"] == [1.0]
    # router weights on the simplex at every t
    levels = [a["curves"][f"router_level{i}"]["ahpa"][0] for i in range(4)]
    assert all(abs(sum(col) - 1.0) < 1e-5 for col in zip(*levels))

"""Smoke profile of the AHPA claim check: structure, arms, finiteness, determinism, equal budgets."""

import math

from neurips26.claims.ahpa import CLAIM, TRAINED
from neurips26.claims.runner import run_claim


def test_smoke_structure_determinism_and_budgets(tmp_path):
    a = run_claim("ahpa", "smoke", out=tmp_path / "a", force=True)
    b = run_claim("ahpa", "smoke", out=tmp_path / "b", force=True)
    for crit in (*CLAIM.criteria, *CLAIM.premises):
        for arm in crit.arms_used(CLAIM.method):
            assert arm in a["metrics"][crit.metric], (crit.label, arm)
    for name in ("fd_final", "fd_auc", "class_acc", "held_loss", "steps_to_target"):
        assert set(a["metrics"][name]) == set(TRAINED), name
    for name, arms in a["metrics"].items():
        for values in arms.values():
            assert all(math.isfinite(v) for v in values), name
    assert a["metrics"] == b["metrics"]
    assert a["curves"]["fd"] == b["curves"]["fd"]
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

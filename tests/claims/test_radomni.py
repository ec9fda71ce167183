"""Smoke profile of the RadOmni claim check: structure, arms, finiteness, determinism, equal budgets."""

import math

import pytest

from neurips26.claims.radomni import ARMS, CLAIM, OBJECTIVES, _schedule
from neurips26.claims.runner import run_claim


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    base = tmp_path_factory.mktemp("radomni")
    return run_claim("radomni", "smoke", out=base / "a", force=True), run_claim(
        "radomni", "smoke", out=base / "b", force=True
    )


def test_smoke_structure_determinism_and_budget(smoke):
    a, b = smoke
    for crit in (*CLAIM.criteria, *CLAIM.premises):
        for arm in crit.arms_used(CLAIM.method):
            assert arm in a["metrics"][crit.metric], (crit.label, arm)
    for name in ("auroc_malignant_A", "auroc_malignant_B", "acc_T_A", "acc_type_A", "mean_downstream"):
        assert set(a["metrics"][name]) == set(ARMS), name
    for name, arms in a["metrics"].items():
        for values in arms.values():
            assert all(math.isfinite(v) for v in values), name
    assert a["metrics"] == b["metrics"]
    assert set(CLAIM.glossary) == set(a["metrics"])
    budget = a["info"][0]["budget"]
    assert set(budget) == set(ARMS) - {"random_init"}
    assert len({rec["steps"] for rec in budget.values()}) == 1
    assert budget["radomni"]["steps"] == 4 * CLAIM.configs["smoke"]["stage_steps"]
    assert len({rec["encoder_params"] for rec in budget.values()}) == 1
    logs = a["info"][0]["logs"]
    assert [lg["active"] for lg in logs["radomni"]][-1] == list(OBJECTIVES)
    assert [lg["freeze"] for lg in logs["radomni"]] == list(CLAIM.configs["smoke"]["freeze"])
    assert [lg["active"] for lg in logs["no_retention"]] == [[o] for o in OBJECTIVES]
    assert logs["joint"][0]["active"] == list(OBJECTIVES)


def test_arm_schedules():
    cfg = CLAIM.configs["quick"]
    for arm in ("radomni", "no_retention"):
        sched, _ = _schedule(arm, cfg)
        assert sched.retain == (arm == "radomni")
        assert sum(s.steps for s in sched.stages) == 4 * cfg["stage_steps"]
    assert [s.freeze_blocks for s in _schedule("no_retention", cfg)[0].stages] == [0, 0, 0, 0]
    assert _schedule("mim_only", cfg)[0].stages[0].objectives == ["mim"]

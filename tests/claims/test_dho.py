"""Smoke profile of the DHO claim check: structure, arms, finiteness, determinism."""

import math

from neurips26.claims.dho import CLAIM
from neurips26.claims.runner import run_claim


def test_smoke_structure_and_determinism(tmp_path):
    a = run_claim("dho", "smoke", out=tmp_path / "a", force=True)
    b = run_claim("dho", "smoke", out=tmp_path / "b", force=True)
    for crit in (*CLAIM.criteria, *CLAIM.premises):
        for arm in crit.arms_used(CLAIM.method):
            assert arm in a["metrics"][crit.metric], (crit.label, arm)
    for name in ("acc_digits_k2", "acc_digits_k5", "acc_mnist_k2", "acc_mnist_k5"):
        assert set(a["metrics"][name]) == set(CLAIM.arms), name
    for name, arms in a["metrics"].items():
        for values in arms.values():
            assert all(math.isfinite(v) for v in values), name
    assert a["metrics"] == b["metrics"]
    assert set(CLAIM.glossary) == set(a["metrics"])
    info = a["info"][0]
    assert len(info["per_setting"]) == 4
    steps = {arm: rec["steps"] for arm, rec in info["budget"].items()}
    assert set(steps) == {"dho", "single_head_kd", "ce_only"} and len(set(steps.values())) == 1
    # the dual-head student only adds one d x K head
    assert 0 < a["metrics"]["param_overhead"]["dho"][0] < 0.1

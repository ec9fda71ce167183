"""Smoke profile of the DHO claim check: structure, arms. Generic smoke checks (finiteness, determinism,
glossary, plot): test_conformance.py."""

from neurips26.claims.dho import CLAIM


def test_smoke_arms_and_budget(smoke_result):
    a = smoke_result("dho")
    for name in ("acc_digits_k2", "acc_digits_k5", "acc_mnist_k2", "acc_mnist_k5"):
        assert set(a["metrics"][name]) == set(CLAIM.arms), name
    assert set(CLAIM.glossary) == set(a["metrics"])
    info = a["info"][0]
    assert len(info["per_setting"]) == 4
    steps = {arm: rec["steps"] for arm, rec in info["budget"].items()}
    assert set(steps) == {"dho", "single_head_kd", "ce_only"} and len(set(steps.values())) == 1
    # the dual-head student only adds one d x K head
    assert 0 < a["metrics"]["param_overhead"]["dho"][0] < 0.1

"""Smoke profile of the InvGNN-WM claim check: structure, arms, finiteness, determinism."""

from __future__ import annotations

import math

from neurips26.claims.base import judge_claim
from neurips26.claims.invgnn_wm import CLAIM, CRITERION_ATTACKS
from neurips26.claims.runner import run_claim


def test_smoke_structure_and_determinism(tmp_path):
    first = run_claim("invgnn_wm", "smoke", out=tmp_path / "a", force=True)
    second = run_claim("invgnn_wm", "smoke", out=tmp_path / "b", force=True)
    assert first["metrics"] == second["metrics"]
    # the recorded verdict is the one the declared premises and criteria give on the recorded numbers
    assert first["verdict"] == judge_claim(CLAIM, first["metrics"])["verdict"]
    assert [p["key"] for p in first["premises"]] == [p.label for p in CLAIM.premises]
    metrics = first["metrics"]
    for crit in CLAIM.criteria:
        assert crit.metric in metrics
        assert CLAIM.method in metrics[crit.metric]
        baseline = getattr(crit, "baseline", None)
        if baseline:
            assert baseline in metrics[crit.metric]
    for attack in CRITERION_ATTACKS:
        for arm in (CLAIM.method, "backdoor"):
            for name in (f"wm_acc_{attack}", f"owned_{attack}", f"margin_{attack}"):
                assert arm in metrics[name]
    for arm in CLAIM.arms:
        assert arm in metrics["clean_acc"]
    for arms in metrics.values():
        for values in arms.values():
            assert all(math.isfinite(v) for v in values)
    for name in ("owned_none", "owned_finetune", "fpr"):
        assert all(v in (0.0, 1.0) or 0.0 <= v <= 1.0 for v in metrics[name][CLAIM.method])
    info = first["info"][0]
    for key in ("sec_per_epoch", "peak_step_memory_bytes"):
        assert set(info[key]) == set(CLAIM.arms) and all(v > 0 for v in info[key].values())
    assert len(info["null_matches"][CLAIM.method]) == CLAIM.configs["smoke"]["num_null"]
    assert "none" in info["attack_table"] and "kdwm" in info["attack_table"]
    assert len(first["curves"]["acc_vs_prune"][CLAIM.method][0]) == 1 + len(
        CLAIM.configs["smoke"]["prune_grid"]
    )

    paths = CLAIM.plot(first, tmp_path / "plots")
    assert paths and all(p.exists() and p.stat().st_size > 0 for p in paths)

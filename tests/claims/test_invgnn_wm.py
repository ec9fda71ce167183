"""Smoke profile of the InvGNN-WM claim check: structure, arms. Generic smoke checks (finiteness, determinism,
glossary, plot): test_conformance.py."""

from __future__ import annotations

from neurips26.claims.invgnn_wm import CLAIM, CRITERION_ATTACKS


def test_smoke_arms_attacks_and_null_models(smoke_result):
    first = smoke_result("invgnn_wm")
    metrics = first["metrics"]
    for attack in CRITERION_ATTACKS:
        for arm in (CLAIM.method, "backdoor"):
            for name in (f"wm_acc_{attack}", f"owned_{attack}", f"margin_{attack}"):
                assert arm in metrics[name]
    for arm in CLAIM.arms:
        assert arm in metrics["clean_acc"]
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

"""Smoke profile of the SGNNBench claim check: structure, arms. Generic smoke checks (finiteness, determinism,
glossary, plot): test_conformance.py."""

from neurips26.claims.sgnnbench import ARMS, CLAIM


def test_smoke_arms_and_energy_model(smoke_result):
    a = smoke_result("sgnnbench")
    for name, arms in a["metrics"].items():
        assert set(arms) == set(CLAIM.arms) == set(ARMS), name
    assert a["metrics"]["float_share"]["gcn"] == [1.0]
    for arm in ARMS:
        assert 0.0 <= a["metrics"]["float_share"][arm][0] <= 1.0
    info = a["info"][0]
    assert {(r["dataset"], r["model"]) for r in info["table"]} == {
        (d, m) for d in ("h0.7", "karate") for m in ARMS
    }
    assert info["encoder_cache"]["recomputed_uj"] > info["encoder_cache"]["cached_uj"]
    assert info["datasets"]["karate"] == {
        "num_nodes": 34,
        "num_undirected_edges": 78,
        "num_classes": 2,
        "test_nodes": 8,
    }
    assert set(info["not_built"]) == {"MSG", "SiGNN"}


def test_every_criterion_arm_runs_in_every_profile():
    for profile, cfg in CLAIM.configs.items():
        for crit in (*CLAIM.criteria, *CLAIM.premises):
            for arm in crit.arms_used(CLAIM.method):
                assert arm in cfg["models"], (profile, crit.label, arm)

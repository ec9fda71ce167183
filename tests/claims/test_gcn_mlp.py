"""Smoke profile of the GCN-MLP claim check: structure, arms. Generic smoke checks (finiteness, determinism,
glossary, plot): test_conformance.py."""

from neurips26.claims.gcn_mlp import CLAIM


def test_smoke_arms_and_benchmark(smoke_result):
    a = smoke_result("gcn_mlp")
    for name, arms in a["metrics"].items():
        assert set(arms) == set(CLAIM.arms), name
    info = a["info"][0]
    assert len(info["per_graph"]) == 2 and set(info["benchmark"]) >= {"seconds_per_epoch", "memory_mb"}
    assert set(CLAIM.glossary) == set(a["metrics"])


def test_info_only_parts_change_no_judged_number():
    """The h = 0.5 graph and extra robustness levels (dropped from full for time) are info only: with or
    without them, the accuracies, memory and every judged graph's probe results are identical."""
    from neurips26.claims.gcn_mlp import run

    base = {
        **CLAIM.configs["smoke"],
        "low_h": [0.1],
        "high_h": [0.75],
        "arms_high": ["gcn_mlp_concat", "gcn_mlp_gcn", "grace", "bgrl", "dgi"],
        "view_ablation": True,
        "robustness_h": [0.75],
        "robustness_fracs": [0.1],
    }
    extra = {**base, "mid_h": [0.5], "arms_mid": ["gcn_mlp_concat", "grace"], "robustness_fracs": [0.05, 0.1]}
    lean, full = run(base, 0), run(extra, 0)
    for metric in ("acc_low_h", "acc_high_h", "memory_mb"):
        assert lean.metrics[metric] == full.metrics[metric], metric
    rows = {r["h_target"]: r for r in full.info["per_graph"]}
    assert set(rows) == {0.1, 0.5, 0.75}
    for row in lean.info["per_graph"]:
        other = rows[row["h_target"]]
        for arm in ("raw_features", "gcn_mlp_concat", "grace", "bgrl", "dgi"):
            assert row[arm]["acc"] == other[arm]["acc"], (row["h_target"], arm)
    rob = rows[0.75]["robustness_add_and_remove"]
    assert lean.info["per_graph"][-1]["robustness_add_and_remove"]["0.1"] == rob["0.1"] and "0.05" in rob

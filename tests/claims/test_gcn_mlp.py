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

"""Smoke profile of the SGNNBench claim check: structure, arms. Generic smoke checks (finiteness, determinism,
glossary, plot): test_conformance.py."""

from neurips26.claims.sgnnbench import CLAIM


def test_smoke_arms_and_energy_model(smoke_result):
    a = smoke_result("sgnnbench")
    for name, arms in a["metrics"].items():
        assert set(arms) == set(CLAIM.arms), name
    assert a["metrics"]["float_share"]["gcn"] == [1.0]
    assert 0.0 <= a["metrics"]["float_share"]["spikinggcn"][0] <= 1.0
    info = a["info"][0]
    assert {r["model"] for r in info["table"]} == {"gcn", "sgc", "spikinggcn"}
    assert info["encoder_cache"]["recomputed_uj"] > info["encoder_cache"]["cached_uj"]

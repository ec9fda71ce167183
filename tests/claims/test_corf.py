"""Smoke profile of the CoRF claim check: structure, arms, exactness. Generic smoke checks
(finiteness, determinism, glossary, plot): test_conformance.py."""

from neurips26.claims.corf import CLAIM


def test_smoke_structure_and_exactness(smoke_result):
    a = smoke_result("corf")
    assert set(a["metrics"]["queries_per_s"]) == {"corf", "per_query", "full_graph"}
    # scores are exact, so accuracy is identical across executors and runs
    assert a["metrics"]["exact"]["corf"] == [1.0]
    assert a["metrics"]["mrr"]["corf"] == a["metrics"]["mrr"]["per_query"]
    assert set(CLAIM.glossary) == set(a["metrics"])
    assert {r["graph"] for r in a["info"][0]["per_setting"]} == {"synthetic_n300", "umls", "kinships"}

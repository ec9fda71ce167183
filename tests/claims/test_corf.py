"""Smoke profile of the CoRF claim check: structure, arms, finiteness, exactness, determinism."""

import math

from neurips26.claims.corf import CLAIM
from neurips26.claims.runner import run_claim


def test_smoke_structure_and_determinism(tmp_path):
    a = run_claim("corf", "smoke", out=tmp_path / "a", force=True)
    b = run_claim("corf", "smoke", out=tmp_path / "b", force=True)
    for crit in (*CLAIM.criteria, *CLAIM.premises):
        for arm in crit.arms_used(CLAIM.method):
            assert arm in a["metrics"][crit.metric], (crit.label, arm)
    for name, arms in a["metrics"].items():
        assert set(arms) <= set(CLAIM.arms), name
        for values in arms.values():
            assert all(math.isfinite(v) for v in values), name
    assert set(a["metrics"]["queries_per_s"]) == {"corf", "per_query", "full_graph"}
    # scores are exact, so accuracy is identical across executors and runs
    assert a["metrics"]["exact"]["corf"] == [1.0]
    for key in ("mrr", "mrr_umls", "mrr_kinships", "rho", "exact"):
        assert a["metrics"][key] == b["metrics"][key], key
    assert a["metrics"]["mrr"]["corf"] == a["metrics"]["mrr"]["per_query"]
    assert a["verdict"] in ("reproduced", "not reproduced", "inconclusive")
    assert set(CLAIM.glossary) == set(a["metrics"])
    assert {r["graph"] for r in a["info"][0]["per_setting"]} == {"synthetic_n300", "umls", "kinships"}

"""Smoke profile of the cross-lingual edit claim check: structure, arms, finiteness, determinism."""

import math

from neurips26.claims.crosslingual_edit import CLAIM
from neurips26.claims.runner import run_claim


def test_smoke_structure_and_determinism(tmp_path):
    a = run_claim("crosslingual_edit", "smoke", out=tmp_path / "a", force=True)
    b = run_claim("crosslingual_edit", "smoke", out=tmp_path / "b", force=True)
    assert a["verdict"] in ("reproduced", "not reproduced", "inconclusive")
    for crit in (*CLAIM.premises, *CLAIM.criteria):
        for arm in crit.arms_used(CLAIM.method):
            assert arm in a["metrics"][crit.metric], (crit.metric, arm)
    for name in ("efficacy", "transfer", "locality", "alpha", "f_orth"):
        assert set(a["metrics"][name]) == {"rome", "memit", "alphaedit", "rome_aligned", "memit_aligned", "alphaedit_aligned"}
    for arms in a["metrics"].values():
        for values in arms.values():
            assert all(math.isfinite(v) for v in values)
    # the decomposition identity and bit-exact revert hold on every run
    assert all(v == [1.0] for v in a["metrics"]["decomposition_exact"].values())
    assert a["metrics"]["revert_exact"]["rome"] == [1.0]
    for key in ("efficacy", "transfer", "f_orth", "alpha", "barrier_r2"):
        assert a["metrics"][key] == b["metrics"][key]
    assert set(CLAIM.glossary) >= set(a["metrics"])
    perf = a["info"][0]["performance"]
    assert perf["covariance_s"] > 0 and perf["rome_edit_s_per_fact"] > 0

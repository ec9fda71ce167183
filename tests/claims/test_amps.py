"""Smoke profile of the AMPS claim check: structure, arms, finiteness, determinism."""

import math

from neurips26.claims.amps import CLAIM
from neurips26.claims.runner import run_claim


def test_smoke_structure_and_determinism(tmp_path):
    a = run_claim("amps", "smoke", out=tmp_path / "a", force=True)
    b = run_claim("amps", "smoke", out=tmp_path / "b", force=True)
    assert a["verdict"] in ("reproduced", "not reproduced", "inconclusive")
    for name in ("pref_at_collapse5", "consistent_acc"):
        assert set(a["metrics"][name]) == {CLAIM.method, *CLAIM.baselines}
    for arms in a["metrics"].values():
        for values in arms.values():
            assert all(math.isfinite(v) for v in values)
    assert a["metrics"] == b["metrics"]
    assert 0.0 <= a["metrics"]["mcr_mean"]["amps"][0] <= 1.0
    assert set(a["curves"]["pref_vs_alpha"]) == {"amps", "uniform"}
    assert set(CLAIM.glossary) >= set(a["metrics"])

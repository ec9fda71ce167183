"""Smoke profile of the AMPS claim check: structure, arms. Generic smoke checks (finiteness, determinism,
glossary, plot): test_conformance.py."""

from neurips26.claims.amps import CLAIM


def test_smoke_arms_and_ranges(smoke_result):
    a = smoke_result("amps")
    for name in ("pref_at_collapse5", "consistent_acc"):
        assert set(a["metrics"][name]) == {CLAIM.method, *CLAIM.baselines}
    assert 0.0 <= a["metrics"]["mcr_mean"]["amps"][0] <= 1.0
    assert set(a["curves"]["pref_vs_alpha"]) == {"amps", "uniform"}

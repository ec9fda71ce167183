"""Smoke profile of the AMARIS claim check: structure, arms. Generic smoke checks (finiteness, determinism,
glossary, plot): test_conformance.py."""

from neurips26.claims.amaris import CLAIM


def test_smoke_arms_and_budget(smoke_result):
    a = smoke_result("amaris")
    for name in ("hypervolume", "core_at_spec90"):
        assert set(a["metrics"][name]) == {CLAIM.method, *CLAIM.baselines}
    for arms in a["metrics"].values():
        for values in arms.values():
            assert all(v >= 0 for v in values)
    info = a["info"][0]
    assert set(info["budget"]["grid_points"].values()) == {4}  # equal grid size for every arm
    assert set(info["sweeps"]) == {CLAIM.method, *CLAIM.baselines}

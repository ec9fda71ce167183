"""Smoke profile of the AMARIS claim check: structure, arms, finiteness, determinism."""

import math

from neurips26.claims.amaris import CLAIM
from neurips26.claims.runner import run_claim


def test_smoke_structure_and_determinism(tmp_path):
    a = run_claim("amaris", "smoke", out=tmp_path / "a", force=True)
    b = run_claim("amaris", "smoke", out=tmp_path / "b", force=True)
    assert a["verdict"] in ("reproduced", "not reproduced", "inconclusive")
    for name in ("hypervolume", "core_at_spec90"):
        assert set(a["metrics"][name]) == {CLAIM.method, *CLAIM.baselines}
        assert a["metrics"][name] == b["metrics"][name]
    for arms in a["metrics"].values():
        for values in arms.values():
            assert all(math.isfinite(v) and v >= 0 for v in values)
    info = a["info"][0]
    assert set(info["budget"]["grid_points"].values()) == {4}  # equal grid size for every arm
    assert set(info["sweeps"]) == {CLAIM.method, *CLAIM.baselines}
    assert set(CLAIM.glossary) >= set(a["metrics"])

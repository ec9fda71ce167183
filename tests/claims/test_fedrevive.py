"""Smoke profile of the fedrevive claim check: structure, every arm and metric, finiteness, determinism."""

from __future__ import annotations

import json
import math

from neurips26.claims.fedrevive import CLAIM
from neurips26.claims.runner import run_claim


def test_smoke_structure_and_determinism(tmp_path):
    first = run_claim("fedrevive", "smoke", out=tmp_path / "a", force=True)
    second = run_claim("fedrevive", "smoke", out=tmp_path / "b", force=True)
    assert first["slug"] == "fedrevive" and first["verdict"] in (
        "reproduced",
        "not reproduced",
        "inconclusive",
    )
    used = {c.metric for c in CLAIM.criteria}
    for metric in used:
        assert set(first["metrics"][metric]) >= set(CLAIM.arms)
        for arm in CLAIM.arms:
            values = first["metrics"][metric][arm]
            assert len(values) == len(CLAIM.seeds["smoke"])
            assert all(math.isfinite(v) for v in values)
    assert first["metrics"] == second["metrics"]
    assert set(CLAIM.glossary) >= used
    json.dumps(first)  # the result is plain JSON
    paths = CLAIM.plot(first, tmp_path / "plots")
    assert paths and all(p.exists() for p in paths)

"""Smoke-profile test of the ANCRe claim check."""

from __future__ import annotations

import json
import math

from neurips26.claims.ancre import CLAIM
from neurips26.claims.runner import run_claim


def test_smoke_profile_structure_and_determinism(tmp_path):
    run_claim("ancre", "smoke", out=tmp_path, force=True)
    data = json.loads((tmp_path / "smoke" / "ancre.json").read_text())
    for crit in CLAIM.criteria:
        assert crit.metric in data["metrics"]
    for metric, arms in data["metrics"].items():
        assert set(arms) == set(CLAIM.arms), metric
        assert all(math.isfinite(v) for values in arms.values() for v in values), metric
    info = data["info"][0]
    assert info["e2_ancre_param_overhead"]["extra"] == 3  # K(K-1)/2 with K = 3
    assert set(info["e2_step_time_ratio_vs_plain"]) == set(CLAIM.arms)
    # plain and uniform-dense have identical parameter counts; ANCRe adds only the logits
    assert info["e2_params"]["ancre"] - info["e2_params"]["plain"] == 3
    again = CLAIM.run(dict(CLAIM.configs["smoke"]), 0)
    for metric, arms in again.metrics.items():
        for arm, value in arms.items():
            assert value == data["metrics"][metric][arm][0], (metric, arm)

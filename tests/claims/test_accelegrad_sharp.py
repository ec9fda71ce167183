"""Smoke-profile test of the AcceleGrad# claim check."""

from __future__ import annotations

import json
import math

from neurips26.claims.accelegrad_sharp import CLAIM
from neurips26.claims.runner import run_claim


def test_smoke_profile_structure_and_determinism(tmp_path):
    run_claim("accelegrad_sharp", "smoke", out=tmp_path / "a", force=True)
    data = json.loads((tmp_path / "a" / "smoke" / "accelegrad_sharp.json").read_text())
    for crit in CLAIM.criteria:
        assert crit.metric in data["metrics"]
    for metric, arms in data["metrics"].items():
        assert set(arms) == set(CLAIM.arms), metric
        assert all(math.isfinite(v) for values in arms.values() for v in values), metric
    assert data["info"][0]["reference_max_abs_diff"] < 1e-10
    assert set(data["info"][0]["mnist_opt_step_ratio_vs_adamw"]) == set(CLAIM.arms)
    # the method's scalar/Euclidean configuration is AcceleGrad itself: identical rate
    assert data["metrics"]["rate_slope"]["accelegrad_sharp"] == data["metrics"]["rate_slope"]["accelegrad"]
    result = CLAIM.run(dict(CLAIM.configs["smoke"]), 0)  # determinism: a second run gives identical metrics
    assert set(result.metrics) == set(data["metrics"])
    for m in result.metrics:
        for a in result.metrics[m]:
            assert result.metrics[m][a] == data["metrics"][m][a][0]

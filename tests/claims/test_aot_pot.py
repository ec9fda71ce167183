"""Smoke-profile test of the AOT-POT claim check."""

from __future__ import annotations

import json
import math

from neurips26.claims.aot_pot import CLAIM
from neurips26.claims.runner import run_claim


def test_smoke_profile_structure_and_determinism(tmp_path):
    run_claim("aot_pot", "smoke", out=tmp_path, force=True)
    data = json.loads((tmp_path / "smoke" / "aot_pot.json").read_text())
    for crit in CLAIM.criteria:
        assert crit.metric in data["metrics"]
    for metric, arms in data["metrics"].items():
        assert set(arms) == set(CLAIM.arms), metric
        assert all(math.isfinite(v) for values in arms.values() for v in values), metric
    info = data["info"][0]
    assert info["params"]["dpot_wide"] >= info["params"]["aot_pot"] > info["params"]["dpot"]
    assert set(info["per_family_one_step"]["aot_pot"]) == set(CLAIM.configs["smoke"]["families"])
    assert "kdv_finetune_rel_l2" in data["metrics"]
    assert info["step_time_ratio_vs_dpot"]["dpot"] == 1.0
    again = CLAIM.run(dict(CLAIM.configs["smoke"]), 0)
    for metric, arms in again.metrics.items():
        for arm, value in arms.items():
            assert value == data["metrics"][metric][arm][0], (metric, arm)

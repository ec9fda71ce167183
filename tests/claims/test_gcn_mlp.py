"""Smoke profile of the GCN-MLP claim check: structure, arms, finiteness, determinism."""

import math

from neurips26.claims.base import judge_claim
from neurips26.claims.gcn_mlp import CLAIM
from neurips26.claims.runner import run_claim


def test_smoke_structure_and_determinism(tmp_path):
    a = run_claim("gcn_mlp", "smoke", out=tmp_path / "a", force=True)
    b = run_claim("gcn_mlp", "smoke", out=tmp_path / "b", force=True)
    for crit in CLAIM.criteria:
        arms = a["metrics"][crit.metric]
        assert CLAIM.method in arms and crit.baseline in arms
    for name, arms in a["metrics"].items():
        assert set(arms) == set(CLAIM.arms), name
        for values in arms.values():
            assert all(math.isfinite(v) for v in values)
    acc_keys = ("acc_low_h", "acc_high_h")
    assert {k: a["metrics"][k] for k in acc_keys} == {k: b["metrics"][k] for k in acc_keys}
    # the recorded verdict is the one the declared premises and criteria give on the recorded numbers
    assert a["verdict"] == judge_claim(CLAIM, a["metrics"])["verdict"]
    assert [p["key"] for p in a["premises"]] == [p.label for p in CLAIM.premises]
    info = a["info"][0]
    assert len(info["per_graph"]) == 2 and set(info["benchmark"]) >= {"seconds_per_epoch", "memory_mb"}
    assert a["metrics"]["memory_mb"] == b["metrics"]["memory_mb"]  # memory accounting is deterministic
    assert set(CLAIM.glossary) == set(a["metrics"])

"""Smoke profile of the SGNNBench claim check: structure, arms, finiteness, determinism."""

import math

from neurips26.claims.base import judge_claim
from neurips26.claims.runner import run_claim
from neurips26.claims.sgnnbench import CLAIM


def test_smoke_structure_and_determinism(tmp_path):
    a = run_claim("sgnnbench", "smoke", out=tmp_path / "a", force=True)
    b = run_claim("sgnnbench", "smoke", out=tmp_path / "b", force=True)
    for crit in CLAIM.criteria:
        assert crit.metric in a["metrics"]
    for name, arms in a["metrics"].items():
        assert set(arms) == set(CLAIM.arms), name
        assert name in CLAIM.glossary
        for values in arms.values():
            assert all(math.isfinite(v) for v in values)
    deterministic = ("acc_h07", "energy_uj", "float_share", "spike_energy_vs_gcn", "memory_mb", "params")
    assert {k: a["metrics"][k] for k in deterministic} == {k: b["metrics"][k] for k in deterministic}
    # the recorded verdict is the one the declared premises and criteria give on the recorded numbers
    assert a["verdict"] == judge_claim(CLAIM, a["metrics"])["verdict"]
    assert [p["key"] for p in a["premises"]] == [p.label for p in CLAIM.premises]
    assert a["metrics"]["float_share"]["gcn"] == [1.0]
    assert 0.0 <= a["metrics"]["float_share"]["spikinggcn"][0] <= 1.0
    info = a["info"][0]
    assert {r["model"] for r in info["table"]} == {"gcn", "sgc", "spikinggcn"}
    assert info["encoder_cache"]["recomputed_uj"] > info["encoder_cache"]["cached_uj"]

"""Smoke-profile run of the AdaKVQ claim check."""

from __future__ import annotations

import math

from neurips26.claims.adakvq import CLAIM, arithmetic_prompts
from neurips26.claims.runner import run_claim


def test_arithmetic_prompts_are_correct_and_seeded():
    a = arithmetic_prompts(3, seed=1, shots=2)
    assert a == arithmetic_prompts(3, seed=1, shots=2) and a != arithmetic_prompts(3, seed=2, shots=2)
    for prompt, answer in a:
        for line in prompt.splitlines()[:-1]:
            expr, result = line[3:].split(" = ? A: ")
            assert eval(expr) == int(result)  # noqa: S307 - generated "a + b - c"
        assert prompt.endswith("A:") and answer.lstrip("-").isdigit()


def test_adakvq_smoke(tmp_path):
    res = run_claim("adakvq", "smoke", out=tmp_path, force=True)
    assert res["verdict"] in ("reproduced", "not reproduced", "inconclusive")
    arms = set(CLAIM.arms)
    for metric in ("exact_match", "nll_gap", "avg_bits", "bits_per_element", "kv_bytes_per_token"):
        assert set(res["metrics"][metric]) == arms
        assert all(math.isfinite(v) for vals in res["metrics"][metric].values() for v in vals)
    assert res["metrics"]["avg_bits"]["kivi2"] == [2.0] and res["metrics"]["avg_bits"]["full"] == [16.0]
    assert res["metrics"]["avg_bits"]["adakvq"][0] <= 2.5 + 0.05 + 1e-9
    bits = {arm: v[0] for arm, v in res["metrics"]["avg_bits"].items()}
    assert bits["kivi1"] == 1.0 and bits["static_mixed_extreme"] <= 2.0 + 1e-9
    assert bits["adakvq_extreme"] <= 2.05 + 1e-9 and bits["adakvq_extreme_kb"] <= 2.05 + 1e-9
    info = res["info"][0]
    ext = info["extreme_setting"]
    assert ext["bits"] == [1, 2, 4] and ext["avg_bits"] == 2.0
    assert sum(ext["base_bits"]) / 3 <= 2.0 and all(b in (1, 2, 4) for b in ext["base_bits"])
    kb = ext["base_bits_key_bonus"]
    assert sum(kb["keys"]) + sum(kb["values"]) <= 2 * 3 * 2.0 and all(
        k > v for k, v in zip(kb["keys"], kb["values"])
    )
    assert ext["avg_key_bits_key_bonus"] > ext["avg_value_bits_key_bonus"]
    assert sum(ext["online_bits_histogram"].values()) > 0
    assert len(info["aad_mean_by_layer"]) == 3 and all(0 <= v <= 1 for v in info["aad_mean_by_layer"])
    assert sum(info["base_bits"]) / 3 <= 2.5
    assert [p.name for p in CLAIM.plot(res, tmp_path / "plots")] == ["adakvq_aad_profile.png"]
    again = run_claim("adakvq", "smoke", out=tmp_path / "again", force=True)
    assert again["metrics"] == res["metrics"]

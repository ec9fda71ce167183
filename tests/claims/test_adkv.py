"""Smoke-profile run of the ADKV claim check."""

from __future__ import annotations

import math

from neurips26.claims.adkv import CLAIM
from neurips26.claims.runner import run_claim


def test_adkv_smoke(tmp_path):
    res = run_claim("adkv", "smoke", out=tmp_path, force=True)
    assert res["verdict"] in ("reproduced", "not reproduced", "inconclusive")
    arms = set(CLAIM.arms)
    for metric in (
        "exact_match",
        "nll_gap",
        "kv_bytes_per_token",
        "metadata_bytes",
        "metadata_reduction_vs_g32",
    ):
        assert set(res["metrics"][metric]) == arms
        assert all(math.isfinite(v) for vals in res["metrics"][metric].values() for v in vals)
    assert res["metrics"]["nll_gap"]["full"] == [0.0]
    # ADKV's metadata does not depend on the codes: identical for calibrated and default parameters
    assert res["metrics"]["metadata_bytes"]["adkv"] == res["metrics"]["metadata_bytes"]["adkv_uncalibrated"]
    bench = res["info"][0]["decode_benchmark"]["T=64"]
    assert (
        bench["full"]["kv_bytes_ratio_vs_dynamic"] == 1.0 and bench["adkv"]["kv_bytes_ratio_vs_dynamic"] < 1.0
    )
    again = run_claim("adkv", "smoke", out=tmp_path / "again", force=True)
    assert again["metrics"] == res["metrics"]

"""Smoke-profile run of the AdaKVQ claim check on RULER items. Generic smoke checks (finiteness, determinism,
glossary, plot): test_conformance.py."""

from __future__ import annotations

from neurips26.claims.adakvq import CLAIM, TASKS


def test_adakvq_declares_premises_headlines_and_power():
    assert {"full", "adakvq_extreme"} <= set(CLAIM.references)
    labels = {p.label for p in CLAIM.premises}
    assert {f"full_solves_{t}" for t in TASKS} | {"uniform_2bit_degrades"} == labels
    kinds = {c.label: c.kind for c in CLAIM.criteria}
    assert kinds["bits_matched_extreme"] == kinds["bits_matched_default"] == "design"
    assert kinds["extreme_beats_uniform"] == kinds["near_full"] == "evidence"
    # issue 24: >= 100 items per (task, length) cell in the full profile, counted over its seeds
    assert len(CLAIM.seeds["full"]) >= 3
    for task in TASKS:
        assert CLAIM.items[f"acc_{task}"]["full"] * len(CLAIM.seeds["full"]) >= 100, task
    assert len(CLAIM.seeds["full"]) >= 3
    assert all(h.criteria or h.untested for h in CLAIM.headlines)


def test_adakvq_extreme_collapse_is_diagnosed_and_full_profile_batches_per_task():
    """Issue 32 items 3 and 9: the extreme arm's 0.000 carries the committed diagnosis; the full profile
    runs each task's items as one batch and leaves the decode benchmark to bench/kv_decode."""
    from pathlib import Path

    note = CLAIM.diagnoses["extreme_beats_uniform"]
    assert note.startswith("results/diagnosis/adakvq.md")
    assert (Path(__file__).resolve().parents[2] / "results" / "diagnosis" / "adakvq.md").is_file()
    full = CLAIM.configs["full"]
    assert full["batch_size"] >= full["n_per_task"] and not full.get("benchmark")


def test_adakvq_smoke(smoke_result, tmp_path):
    res = smoke_result("adakvq")
    arms = set(CLAIM.arms)
    for metric in ("accuracy", "avg_bits", "bits_per_element", "gen_tokens"):
        assert set(res["metrics"][metric]) == arms
    bits = {arm: v[0] for arm, v in res["metrics"]["avg_bits"].items()}
    assert bits["kivi2"] == 2.0 and bits["full"] == 16.0
    assert bits["adakvq"] <= 2.5 + 0.05 + 1e-9 and bits["adakvq_extreme"] <= 2.0 + 0.05 + 1e-9
    assert bits["static_mixed_extreme"] <= 2.0 + 1e-9
    info = res["info"][0]
    assert info["n_items"] == 2 and set(info["budget"]) == arms
    assert sum(info["base_bits_extreme"]) / len(info["base_bits_extreme"]) <= 2.0
    assert all(0 <= v <= 1 for v in info["aad_mean_by_layer"])
    assert [p.name for p in CLAIM.plot(res, tmp_path / "plots")] == ["adakvq_aad_profile.png"]

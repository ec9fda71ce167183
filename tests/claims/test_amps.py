"""Smoke profile of the AMPS claim check: structure, arms, the training-health premise. Generic smoke checks
(finiteness, determinism, glossary, plot): test_conformance.py."""

import math

import pytest

from neurips26.claims.amps import CLAIM, HEALTH, _lr_factor
from neurips26.claims.base import judge_claim


def test_smoke_arms_and_ranges(smoke_result):
    a = smoke_result("amps")
    for name in ("pref_at_collapse5", "consistent_acc"):
        assert set(a["metrics"][name]) == {CLAIM.method, *CLAIM.baselines}
    assert 0.0 <= a["metrics"]["mcr_mean"]["amps"][0] <= 1.0
    assert set(a["curves"]["pref_vs_alpha"]) == {"amps", "uniform"}


def test_smoke_health_flag_follows_the_declared_bars(smoke_result):
    a = smoke_result("amps")
    h = a["info"][0]["health"]
    assert h["bars"] == HEALTH
    expected = (
        h["collapse"] <= HEALTH["max_collapse"]
        and h["consistent_acc"] >= HEALTH["min_consistent_acc"]
        and h["hedged_vision_pref"] >= HEALTH["min_hedged_vision_pref"]
        and h["calib_follow_image"] > 0
        and h["calib_follow_text"] > 0
    )
    assert a["metrics"]["base_trained"]["unsteered"] == [float(expected)]
    assert h["healthy"] is expected
    assert a["metrics"]["base_consistent_acc"]["unsteered"] == [h["consistent_acc"]]
    assert a["metrics"]["hedged_vision_pref"]["unsteered"] == [h["hedged_vision_pref"]]
    t = a["info"][0]["training"]
    cfg = CLAIM.configs["smoke"]
    assert (t["lr"], t["warmup"], t["clip_grad_norm"], t["steps"]) == (
        cfg["lr"],
        cfg["warmup"],
        cfg["clip"],
        cfg["steps"],
    )
    assert math.isfinite(t["final_loss"])


def test_lr_schedule_warms_up_then_decays_to_zero():
    f = [_lr_factor(t, 10, 100) for t in range(100)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)
    assert all(a < b for a, b in zip(f[:10], f[1:10]))  # linear warmup
    assert all(a >= b for a, b in zip(f[9:], f[10:]))  # cosine decay
    assert 0.0 < f[-1] < 1e-2 and _lr_factor(100, 10, 100) == pytest.approx(0.0)


def _metrics(base_trained):
    n = len(base_trained)
    return {
        "base_trained": {"unsteered": list(base_trained)},
        "changed_at_max": {"uniform": [0.8] * n},
        "pref_at_collapse5": {"amps": [0.3, 0.32, 0.31][:n], "uniform": [0.1, 0.12, 0.11][:n]},
        "consistent_acc": {"amps": [0.9] * n, "uniform": [0.9] * n},
    }


def test_one_untrained_seed_is_a_premise_failure_not_a_method_result():
    judged = judge_claim(CLAIM, _metrics([1.0, 0.0, 1.0]))
    assert (judged["verdict"], judged["verdict_reason"], judged["deciding"]) == (
        "inconclusive",
        "testbed",
        "base_model_trained",
    )
    judged = judge_claim(CLAIM, _metrics([1.0, 1.0, 1.0]))
    assert judged["premises"][0]["verdict"] == "reproduced"
    assert judged["verdict"] == "reproduced"

"""Smoke profile of the AMPS claim check: structure, arms, the training-health premise. Generic smoke checks
(finiteness, determinism, glossary, plot): test_conformance.py."""

import math

import pytest

from neurips26.claims import amps as amps_claim
from neurips26.claims.amps import ARMS, CLAIM, HEALTH, _lr_factor
from neurips26.claims.base import judge_claim
from neurips26.editing.amps import AdaptiveScaleNet


def test_smoke_arms_and_ranges(smoke_result):
    a = smoke_result("amps")
    for name in ("pref_at_collapse5", "consistent_acc"):
        assert set(a["metrics"][name]) == {CLAIM.method, *CLAIM.baselines}
    assert 0.0 <= a["metrics"]["mcr_mean"]["amps_mcr"][0] <= 1.0
    assert set(a["curves"]["pref_vs_alpha"]) == set(ARMS) == {"amps_learned", "amps_mcr", "uniform"}
    assert CLAIM.method == "amps_learned"
    module = a["info"][0]["budget"]["scale_module"]
    cfg = CLAIM.configs["smoke"]
    assert module["class"] == "AdaptiveScaleNet"
    assert (module["steps"], module["lr"], module["hidden"]) == (
        cfg["module_steps"],
        cfg["module_lr"],
        cfg["module_hidden"],
    )
    assert module["train_items"] + module["holdout_items"] == 2 * cfg["n_calib"]
    primary = [h for h in CLAIM.headlines if h.primary]
    assert len(primary) == 1 and primary[0].criteria == ("pref_vs_uniform",)
    assert {c.label: c.kind for c in CLAIM.criteria}["module_faster_than_mcr"] == "cost"


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
        "collapse_at_max": {"uniform": [1.0] * n},
        "module_r2": {"amps_learned": [0.6, 0.55, 0.7][:n]},
        "scale_speedup": {"amps_learned": [30.0] * n},
        "pref_at_collapse5": {
            "amps_learned": [0.3, 0.32, 0.31][:n],
            "amps_mcr": [0.3, 0.31, 0.3][:n],
            "uniform": [0.1, 0.12, 0.11][:n],
        },
        "consistent_acc": {"amps_learned": [0.9] * n, "amps_mcr": [0.9] * n, "uniform": [0.9] * n},
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


def test_the_learned_module_is_on_the_judged_path(monkeypatch):
    """The judged arm's alphas come from AdaptiveScaleNet: a spy sees it fitted on the calibration items
    and applied to every evaluated item, and a module forced to 0 leaves the judged arm unsteered."""
    cfg = dict(CLAIM.configs["smoke"], n_train=200, steps=5, warmup=2, n_calib=20, n_eval=24, module_steps=5)
    calls = {"fit": [], "forward": []}
    real_fit, real_forward = AdaptiveScaleNet.fit, AdaptiveScaleNet.forward

    def spy_fit(self, h, t, **kw):
        calls["fit"].append(len(h))
        return real_fit(self, h, t, **kw)

    def spy_forward(self, h):
        out = real_forward(self, h)
        calls["forward"].append((len(h), out.detach().clone()))
        return out

    monkeypatch.setattr(AdaptiveScaleNet, "fit", spy_fit)
    monkeypatch.setattr(AdaptiveScaleNet, "forward", spy_forward)
    res = amps_claim.run(cfg, 0)
    assert calls["fit"] == [2 * cfg["n_calib"] - round(0.2 * 2 * cfg["n_calib"])]
    applied = [out for n, out in calls["forward"] if n == cfg["n_eval"]]
    assert len(applied) == 2  # evaluated conflicts, then the consistent set
    mean = float(applied[0].double().mean())
    assert abs(res.metrics["mean_scale"]["amps_learned"] - mean) < 1e-6

    monkeypatch.setattr(AdaptiveScaleNet, "forward", lambda self, h: real_forward(self, h) * 0.0)
    res0 = amps_claim.run(cfg, 0)
    base = res0.metrics["vision_pref"]["unsteered"]
    assert res0.curves["pref_vs_alpha"]["amps_learned"] == [base] * len(cfg["alphas"])
    assert res0.curves["collapse_vs_alpha"]["amps_learned"] == [res0.metrics["collapse"]["unsteered"]] * len(
        cfg["alphas"]
    )
    # the uniform arm does not go through the module
    assert res0.curves["pref_vs_alpha"]["uniform"] == res.curves["pref_vs_alpha"]["uniform"]

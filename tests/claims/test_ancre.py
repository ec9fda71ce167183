"""Smoke-profile test of the ANCRe claim check. Generic smoke checks (finiteness, determinism, glossary, plot):
test_conformance.py."""

from __future__ import annotations

import pytest

from neurips26.claims.ancre import CLAIM, _connector, residual_init_logit


def test_declaration():
    labels = {c.label for c in (*CLAIM.premises, *CLAIM.criteria)}
    assert CLAIM.premises and all(c.label for c in (*CLAIM.premises, *CLAIM.criteria))
    assert {"residual_init_is_residual", "compute_overhead", "param_overhead"} <= labels
    assert CLAIM.references == ("init",)
    assert any(h.untested for h in CLAIM.headlines)
    for h in CLAIM.headlines:
        assert set(h.criteria) <= labels


@pytest.mark.parametrize("k", [3, 12, 24, 32])
def test_residual_init_is_residual(k):
    config = CLAIM.configs["full"]
    w = _connector("ancre", k, config).topology()
    pred = w[range(k), range(k)]
    assert float(pred.min()) >= config["init_pred_weight"] - 1e-6
    assert float(pred.min()) >= 0.95
    assert residual_init_logit(k, config) > 0


def test_smoke_profile_arms_and_overheads(smoke_result):
    data = smoke_result("ancre")
    for metric in ("e2_loss_auc", "e2_test_acc", "e1_steps_to_target"):
        assert set(data["metrics"][metric]) == {CLAIM.method, *CLAIM.baselines}, metric
    assert set(data["metrics"]["e1_log10_final_loss"]) == set(CLAIM.arms)
    info = data["info"][0]
    assert info["e2_ancre_param_overhead"]["extra"] == 3  # K(K-1)/2 with K = 3
    assert data["metrics"]["e2_step_time_ratio"]["plain"] == [1.0]
    assert data["metrics"]["init_pred_weight_min"]["plain"] == [1.0]
    assert info["e2_params"]["ancre"] - info["e2_params"]["plain"] == 3
    assert set(info["budget"]) == {CLAIM.method, *CLAIM.baselines}

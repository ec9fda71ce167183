"""Smoke-profile test of the AOT-POT claim check. Generic smoke checks (finiteness, determinism, glossary, plot):
test_conformance.py."""

from __future__ import annotations

import numpy as np

from neurips26.claims.aot_pot import CLAIM, _model, _persistence
from neurips26.common.pde import generate


def test_declaration():
    labels = {c.label for c in (*CLAIM.premises, *CLAIM.criteria)}
    assert CLAIM.premises and all(c.label for c in (*CLAIM.premises, *CLAIM.criteria))
    assert {"stream_maps_move", "dpot_beats_persistence", "wide_param_matched"} <= labels
    assert CLAIM.references == ("persistence",)
    for h in CLAIM.headlines:
        assert set(h.criteria) <= labels
    assert len(CLAIM.seeds["full"]) >= 3
    for profile in ("smoke", "quick", "full"):  # the fine-tuning criterion needs KdV in every profile
        assert CLAIM.configs[profile]["finetune_steps"] > 0


def test_cyclic_stream_init_breaks_symmetry():
    config = dict(CLAIM.configs["smoke"])
    model = _model("aot_pot", config, 0, {})
    n = config["n_streams"]
    for i, layer in enumerate(model.layers):
        assert int(layer.b_pre.argmax()) == i % n


def test_persistence_is_zero_on_constant_frames():
    u = generate("advection", 2, seed=0, nx=16, nt=8, cache=False).u
    u = np.repeat(u[:, :1], u.shape[1], axis=1)  # every frame equals the first
    one, roll = _persistence(u, {"t_in": 4, "rollout_steps": 3})
    assert one == 0.0 and roll == 0.0


def test_smoke_profile_arms_and_budget(smoke_result):
    data = smoke_result("aot_pot")
    assert set(data["metrics"]["one_step_rel_l2"]) == set(CLAIM.arms)
    assert set(data["metrics"]["rollout_rel_l2"]) == set(CLAIM.arms)
    assert set(data["metrics"]["stream_map_shift"]) == {"aot_pot"}
    info = data["info"][0]
    assert info["params"]["dpot_wide"] >= info["params"]["aot_pot"] > info["params"]["dpot"]
    assert set(info["budget"]) == {CLAIM.method, *CLAIM.baselines}
    assert set(info["per_family_one_step"]["aot_pot"]) == set(CLAIM.configs["smoke"]["families"])
    assert info["step_time_ratio_vs_dpot"]["dpot"] == 1.0

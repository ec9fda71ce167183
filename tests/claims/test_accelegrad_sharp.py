"""AcceleGrad# claim check: declaration, the smoke run's arms and budgets (generic checks: test_conformance.py),
the optimizer against the numpy transcription, and the accelerated rate."""

from __future__ import annotations

import numpy as np
import torch

from neurips26.claims.accelegrad_sharp import (
    CLAIM,
    _fit_slope,
    _log_marks,
    _quadratic_run,
    accelegrad_numpy,
    quadratic,
)
from neurips26.optim.accelegrad_sharp import AcceleGrad, AcceleGradSharp


def test_declaration():
    assert CLAIM.premises and all(p.label for p in (*CLAIM.premises, *CLAIM.criteria))
    assert set(CLAIM.references) == {"init", "adagrad_norm_gd"}
    labels = {c.label for c in (*CLAIM.premises, *CLAIM.criteria)}
    assert {"step_time_mnist", "step_time_lm", "rate_accelerated"} <= labels
    assert len(CLAIM.headlines) == 5 and any(h.untested for h in CLAIM.headlines)
    for h in CLAIM.headlines:
        assert set(h.criteria) <= labels
    # quick and smoke build no sweep cache; the full profile sweeps the same grid size for every arm
    assert CLAIM.configs["quick"]["fixed_lr"] and CLAIM.configs["smoke"]["fixed_lr"]
    assert "fixed_lr" not in CLAIM.configs["full"]
    assert len(CLAIM.seeds["full"]) >= 5


def test_smoke_profile_arms_budget_and_reference(smoke_result):
    data = smoke_result("accelegrad_sharp")
    assert [p["data"]["label"] for p in data["premises"]] == [p.label for p in CLAIM.premises]
    for metric in ("mnist_val_loss", "lm_val_loss"):
        assert set(data["metrics"][metric]) == {*CLAIM.arms} - {"adagrad_norm_gd"}
    assert set(data["metrics"]["rate_slope"]) == {*CLAIM.arms} - {"init"}
    info = data["info"][0]
    assert info["reference_max_abs_diff"] < 1e-10
    assert data["metrics"]["mnist_step_ratio_vs_spectral"]["spectral"] == [1.0]
    assert set(info["budget"]) == {CLAIM.method, *CLAIM.baselines}
    assert all(len(b["lr_grid"]["mnist"]) == 1 for b in info["budget"].values())  # fixed_lr: no sweep
    # the method's scalar/Euclidean configuration is AcceleGrad itself: identical rate
    assert data["metrics"]["rate_slope"]["accelegrad_sharp"] == data["metrics"]["rate_slope"]["accelegrad"]


# The optimizer against the claim's numpy transcription of AcceleGrad and its rate harness (these use
# the claim's helpers, so they live with the claim's tests, not with the optimizer's).
def test_matches_numpy_transcription_of_accelegrad():
    a, b, x_star = quadratic(20, 1e-3, seed=3)
    lr = 2 * float(np.linalg.norm(x_star))
    ref, ybar = accelegrad_numpy(a, b, np.zeros(20), lr, 50)
    x = torch.zeros(20, dtype=torch.float64, requires_grad=True)
    opt = AcceleGrad([x], lr=lr)
    a_t, b_t = torch.tensor(a), torch.tensor(b)
    for k in range(50):
        np.testing.assert_allclose(x.detach().numpy(), ref[k], atol=1e-10, rtol=0)
        x.grad = a_t @ x.detach() - b_t
        opt.step()
    np.testing.assert_allclose(x.detach().numpy(), ref[50], atol=1e-10, rtol=0)
    with opt.evaluation_params("avg"):
        np.testing.assert_allclose(x.detach().numpy(), ybar, atol=1e-10, rtol=0)


def test_accelerated_rate_slope_on_convex_quadratic():
    d, steps = 50, 1000
    a, b, x_star = quadratic(d, 1e-6, seed=0)
    fstar = float(0.5 * x_star @ a @ x_star - b @ x_star)
    lr = 2 * float(np.linalg.norm(x_star))
    marks = _log_marks(steps, 30)
    gaps = _quadratic_run(lambda x: AcceleGrad([x], lr=lr), a, b, fstar, steps, (d,), marks, "avg")
    gd = _quadratic_run(
        lambda x: AcceleGradSharp(
            [x], lr=lr, anchor="scalar", geometry="euclidean", alpha_schedule="constant"
        ),
        a,
        b,
        fstar,
        steps,
        (d,),
        marks,
        "x",
    )
    assert _fit_slope(gaps, 100, steps, marks) <= -1.6
    assert _fit_slope(gd, 100, steps, marks) > -1.3  # non-accelerated AdaGrad-norm GD is slower


def test_sweep_runs_equal_fresh_seed0_runs():
    """The full profile reuses the sweep's chosen seed-0 runs as the seed-0 evaluation runs: exactly equal."""
    from neurips26.claims.accelegrad_sharp import SWEEP_SEED, _mnist, _sweep, _train

    config = {**CLAIM.configs["smoke"], "mnist_steps": 6, "mnist_lr_multipliers": (1.0, 10.0)}
    del config["fixed_lr"]
    data = _mnist(SWEEP_SEED)
    sweep = _sweep("mnist", config, data)
    assert set(sweep["lr"]) == set(sweep["runs"]) == set(CLAIM.arms) - {"init", "adagrad_norm_gd"}
    for arm, lr in sweep["lr"].items():
        fresh = _train(arm, "mnist", lr, 6, config, SWEEP_SEED, data)
        reused = sweep["runs"][arm]
        drop = ("step_ms",)  # wall-clock time: measured, not computed
        np.testing.assert_equal(
            {k: v for k, v in reused.items() if k not in drop},
            {k: v for k, v in fresh.items() if k not in drop},
        )

"""Tests for AcceleGrad# (neurips26.optim.accelegrad_sharp)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.optim.accelegrad_sharp import (
    AcceleGrad,
    AcceleGradSharp,
    dual_norm,
    lmo,
    muon_with_adamw,
    polar_newton_schulz,
    sharp,
)


def _set_grad(p, g):
    p.grad = torch.as_tensor(g, dtype=p.dtype).reshape(p.shape).clone()


def test_hand_computed_scalar_euclidean_on_2d_quadratic():
    # f(x) = 1/2 (x1^2 + 4 x2^2), x0 = (1, 1), lr = 1.
    x = torch.tensor([1.0, 1.0], dtype=torch.float64, requires_grad=True)
    opt = AcceleGradSharp([x], lr=1.0, anchor="scalar", geometry="euclidean", G=1e-12)
    grad = lambda v: torch.stack([v[0], 4 * v[1]])  # noqa: E731
    # step t=0: g = (1, 4), alpha = 1, S = 17, eta = 1/sqrt(17); z1 = y1 = x0 - eta g; tau_1 = 1 -> x2 = z1
    x.grad = grad(x.detach())
    opt.step()
    e0 = 1 / math.sqrt(17)
    expected = torch.tensor([1 - e0, 1 - 4 * e0], dtype=torch.float64)
    assert torch.allclose(x.detach(), expected, atol=1e-14)
    # step t=1: g = (x1, 4 x2) at x2, alpha = 1, S = 17 + |g|^2
    g1 = grad(expected)
    e1 = 1 / math.sqrt(17 + float(g1 @ g1))
    z2 = expected - e1 * g1
    x.grad = grad(x.detach())
    opt.step()
    assert torch.allclose(x.detach(), z2, atol=1e-14)
    assert torch.allclose(opt.state[x]["y"], expected - e1 * g1, atol=1e-14)


def test_hand_computed_diag_clipped_lmo_step():
    x = torch.tensor([1.0, 1.0], dtype=torch.float64, requires_grad=True)
    opt = AcceleGradSharp([x], lr=1.0, G=1e-12, anchor="diag", geometry="clipped_lmo", norm="l2", radius=1.0)
    _set_grad(x, [1.0, 4.0])
    opt.step()
    # diag anchor: eta = (1, 1/4) -> z1 = x0 - eta * g = (0, 0); x2 = z1 (tau_1 = 1)
    assert torch.allclose(x.detach(), torch.zeros(2, dtype=torch.float64), atol=1e-12)
    # branch: ||g||_2 = sqrt(17) > rho = 1 -> y1 = x0 + (1/sqrt 17) * 1 * (-g/sqrt 17) = x0 - g/17
    assert torch.allclose(
        opt.state[x]["y"], torch.tensor([16 / 17, 13 / 17], dtype=torch.float64), atol=1e-12
    )


def test_coupling_weights():
    assert [AcceleGradSharp.alpha_at(t) for t in range(6)] == [1.0, 1.0, 1.0, 1.0, 1.25, 1.5]
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    opt = AcceleGradSharp([x], lr=0.5, anchor="scalar", geometry="euclidean")
    for t in range(6):
        x.grad = torch.randn(5, dtype=torch.float64)
        opt.step()
        st_ = opt.state[x]
        tau = 1.0 / AcceleGradSharp.alpha_at(t + 1)
        assert torch.allclose(x.detach(), tau * st_["z"] + (1 - tau) * st_["y"], atol=1e-14)
        if t <= 1:
            assert torch.equal(x.detach(), st_["z"])  # same kernel: tau = 1 at t <= 1: tau * z + 0 * y is z exactly
    assert 1.0 / AcceleGradSharp.alpha_at(9) == pytest.approx(4 / 10)


def _svd_polar(g):
    u, _, vh = torch.linalg.svd(g, full_matrices=False)
    return u @ vh


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (5, 5)])
def test_spectral_lmo_matches_svd(shape):
    gen = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(shape[0], shape[0], dtype=torch.float64, generator=gen))
    v, _ = torch.linalg.qr(torch.randn(shape[1], shape[1], dtype=torch.float64, generator=gen))
    k = min(shape)
    s = torch.linspace(1.0, 0.5, k, dtype=torch.float64)  # well conditioned
    g = u[:, :k] @ torch.diag(s) @ v[:, :k].T
    scale = math.sqrt(shape[0] / shape[1])
    exact = -scale * _svd_polar(g)
    assert torch.allclose(lmo(g, "spectral", ns_steps=30, coefficients="cubic"), exact, atol=1e-8)
    approx = lmo(g, "spectral", ns_steps=5)  # Muon's quintic: approximately orthogonal
    cos = (approx * exact).sum() / (approx.norm() * exact.norm())
    assert cos > 0.95
    assert float(dual_norm(g, "spectral", ns_steps=30, coefficients="cubic")) == pytest.approx(
        scale * float(s.sum()), rel=1e-8
    )


def _primal_norm(v, norm):
    if norm == "sign":
        return float(v.abs().max())
    if norm == "l2":
        return float(v.norm())
    m = v.reshape(v.shape[0], -1)
    if norm == "rownorm":
        return float(m.norm(dim=1).max())
    if norm == "colnorm":
        return float(m.norm(dim=0).max())
    return math.sqrt(m.shape[1] / m.shape[0]) * float(torch.linalg.matrix_norm(m, ord=2))


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    rows=st.integers(2, 6),
    cols=st.integers(2, 6),
    norm=st.sampled_from(["sign", "l2", "rownorm", "colnorm", "spectral"]),
)
def test_oracle_identities(seed, rows, cols, norm):
    g = torch.randn(rows, cols, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    kw = {"ns_steps": 40, "coefficients": "cubic"}
    d = dual_norm(g, norm, **kw)
    v = lmo(g, norm, **kw)
    assert float((g * v).sum()) == pytest.approx(-float(d), rel=1e-9)
    assert _primal_norm(v, norm) == pytest.approx(1.0, rel=1e-6)
    s = sharp(g, norm, **kw)
    assert float((g * s).sum()) == pytest.approx(float(d) ** 2, rel=1e-9)
    assert _primal_norm(s, norm) == pytest.approx(float(d), rel=1e-6)
    assert torch.allclose(lmo(g, norm, radius=2.5, **kw), 2.5 * v)


def _one_step(geometry, g, radius=1.0, lr_y=0.3):
    x = torch.zeros(4, 3, dtype=torch.float64, requires_grad=True)
    opt = AcceleGradSharp(
        [x],
        lr=1.0,
        lr_y=lr_y,
        anchor="diag",
        geometry=geometry,
        norm="spectral",
        radius=radius,
        ns_steps=40,
        ns_coefficients="cubic",
        G=1e-12,
    )
    x.grad = g.clone()
    opt.step()
    return opt.state[x]["y"].clone()


def test_clipped_lmo_equals_sharp_below_radius_and_has_length_eta_rho_above():
    g = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    dual = float(dual_norm(g, "spectral", ns_steps=40, coefficients="cubic"))
    small = g / (2 * dual)  # dual norm 0.5 <= rho = 1
    assert torch.allclose(_one_step("clipped_lmo", small), _one_step("sharp", small), atol=1e-12)
    big = 5 * g / dual  # dual norm 5 > rho = 1: length eta_bar * rho with eta_bar = lr_y / 5
    step = _one_step("clipped_lmo", big, radius=1.0, lr_y=0.3)
    assert _primal_norm(step, "spectral") == pytest.approx(0.3 / 5 * 1.0, rel=1e-6)
    assert not torch.allclose(step, _one_step("sharp", big))


def test_mirror_with_p2_equals_sharp_l2():
    g = torch.randn(7, dtype=torch.float64)
    outs = []
    for geometry, kw in (("mirror", {"mirror_p": 2.0}), ("sharp", {"norm": "l2"})):
        x = torch.ones(7, dtype=torch.float64, requires_grad=True)
        opt = AcceleGradSharp([x], lr=0.7, anchor="diag", geometry=geometry, **kw)
        for _ in range(3):
            x.grad = g.clone()
            opt.step()
        outs.append(x.detach().clone())
    assert torch.allclose(outs[0], outs[1], atol=1e-12)
    x = torch.ones(7, dtype=torch.float64, requires_grad=True)
    opt = AcceleGradSharp([x], lr=0.7, geometry="mirror", mirror_p=1.3)
    x.grad = g.clone()
    opt.step()
    assert torch.isfinite(x).all() and not torch.equal(x.detach(), torch.ones(7, dtype=torch.float64))  # same kernel: n/a, asserts a difference


@pytest.mark.parametrize("geometry", ["euclidean", "sharp", "mirror", "lmo", "clipped_lmo"])
@pytest.mark.parametrize("anchor", ["scalar", "diag"])
def test_zero_gradient_gives_no_nan_and_no_movement(geometry, anchor):
    x = torch.randn(3, 4, requires_grad=True)
    start = x.detach().clone()
    norm = "l2" if geometry == "mirror" else "auto"
    opt = AcceleGradSharp([x], anchor=anchor, geometry=geometry, norm=norm)
    for _ in range(3):
        x.grad = torch.zeros_like(x)
        opt.step()
    assert torch.isfinite(x).all()
    assert torch.equal(opt.state[x]["y"], start)  # same kernel: a zero gradient leaves the start value
    assert torch.equal(x.detach(), start)  # same kernel: a zero gradient leaves the start value


def _mixed_model():
    torch.manual_seed(0)
    return torch.nn.ModuleDict(
        {"emb": torch.nn.Embedding(10, 6), "lin": torch.nn.Linear(6, 5), "head": torch.nn.Linear(5, 3)}
    )


def _loss(model, idx):
    return model["head"](torch.relu(model["lin"](model["emb"](idx)))).pow(2).mean()


def test_mixed_param_groups_auto_and_parameters_without_grad_are_skipped():
    model = _mixed_model()
    unused = torch.nn.Parameter(torch.randn(4))
    groups = [
        {"params": [model["lin"].weight, model["lin"].bias, model["head"].bias, unused]},
        {"params": [model["emb"].weight, model["head"].weight], "norm": "sign", "radius": 2.0},
    ]
    opt = AcceleGradSharp(groups, lr=0.1)
    before = unused.detach().clone()
    idx = torch.tensor([1, 2, 3])
    first = float(_loss(model, idx))
    for _ in range(20):
        opt.zero_grad()
        _loss(model, idx).backward()
        opt.step()
    assert torch.equal(unused.detach(), before) and unused not in opt.state  # same kernel: untouched parameters, no arithmetic
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert float(_loss(model, idx)) < first


def test_state_dict_round_trip_gives_identical_next_step():
    model = _mixed_model()
    idx = torch.tensor([0, 4, 7, 9])
    opt = AcceleGradSharp(model.parameters(), lr=0.2, eval_point="avg")
    for _ in range(4):
        opt.zero_grad()
        _loss(model, idx).backward()
        opt.step()
    clone = copy.deepcopy(model)
    opt2 = AcceleGradSharp(clone.parameters(), lr=0.2, eval_point="avg")
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))
    for m, o in ((model, opt), (clone, opt2)):
        o.zero_grad()
        _loss(m, idx).backward()
        o.step()
    for p, q in zip(model.parameters(), clone.parameters()):
        assert torch.equal(p, q)  # same kernel: restored state, same step
        for key in opt.state[p]:
            assert torch.equal(opt.state[p][key], opt2.state[q][key])  # same kernel


def test_evaluation_params_swaps_and_restores():
    x = torch.randn(3, requires_grad=True)
    opt = AcceleGradSharp([x], lr=0.5, eval_point="avg", anchor="scalar", geometry="euclidean")
    for _ in range(5):
        x.grad = torch.randn(3)
        opt.step()
    current = x.detach().clone()
    with opt.evaluation_params("y"):
        assert torch.equal(x.detach(), opt.state[x]["y"])  # same kernel: a swapped-in copy
    with opt.evaluation_params():
        assert torch.equal(x.detach(), opt.state[x]["y_avg"])  # same kernel: a swapped-in copy
    assert torch.equal(x.detach(), current)  # same kernel: restored copy
    opt_y = AcceleGradSharp([torch.nn.Parameter(torch.ones(2))])
    with pytest.raises(ValueError, match="point"):
        with opt_y.evaluation_params("mid"):
            pass


def test_muon_with_adamw_baseline_trains():
    model = _mixed_model()
    opt = muon_with_adamw(model.named_parameters(), lr=0.02, exclude=("emb", "head"))
    assert len(opt.optimizers) == 2 and isinstance(opt.optimizers[0], torch.optim.Muon)
    idx = torch.tensor([1, 2])
    first = float(_loss(model, idx))
    for _ in range(10):
        opt.zero_grad()
        _loss(model, idx).backward()
        opt.step()
    assert float(_loss(model, idx)) < first
    opt.load_state_dict(opt.state_dict())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": -1.0}, "lr"),
        ({"lr_y": 0.0}, "lr_y"),
        ({"radius": -0.5}, "radius"),
        ({"norm": "nuclear"}, "norm"),
        ({"geometry": "newton"}, "geometry"),
        ({"anchor": "full"}, "anchor"),
        ({"G": 0.0}, "G"),
        ({"mirror_p": 2.5}, "mirror_p"),
        ({"alpha_schedule": "cosine"}, "alpha_schedule"),
        ({"ns_steps": 0}, "ns_steps"),
        ({"eval_point": "z"}, "eval_point"),
        ({"weight_decay": -1e-3}, "weight_decay"),
    ],
)
def test_bad_hyperparameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AcceleGradSharp([torch.nn.Parameter(torch.ones(2))], **kwargs)


def test_bad_group_hyperparameter_and_shapes():
    with pytest.raises(ValueError, match="radius"):
        AcceleGradSharp([{"params": [torch.nn.Parameter(torch.ones(2))], "radius": -1.0}])
    with pytest.raises(ValueError, match="ndim >= 2"):
        lmo(torch.ones(4), "spectral")
    x = torch.nn.Parameter(torch.ones(4))
    opt = AcceleGradSharp([x], norm="spectral")
    x.grad = torch.ones(4)
    with pytest.raises(ValueError, match="ndim >= 2"):
        opt.step()
    with pytest.raises(ValueError, match="2-D"):
        polar_newton_schulz(torch.ones(2, 2, 2))
    with pytest.raises(TypeError, match="fixes"):
        AcceleGrad([x], geometry="sharp")


def test_sparse_gradients_raise():
    emb = torch.nn.Embedding(5, 3, sparse=True)
    opt = AcceleGradSharp(emb.parameters())
    emb(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(RuntimeError, match="sparse"):
        opt.step()


def test_polar_step_precision_follows_the_cpu(monkeypatch):
    from neurips26.common import precision
    from neurips26.optim.accelegrad_sharp import polar_newton_schulz

    monkeypatch.delenv(precision.ENV_VAR, raising=False)
    g = torch.randn(8, 5, generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(precision, "cpu_bf16_matmul", lambda: True)
    bf16 = polar_newton_schulz(g)
    assert torch.equal(bf16, polar_newton_schulz(g, dtype=torch.bfloat16))  # same kernel: same dtype chosen
    monkeypatch.setattr(precision, "cpu_bf16_matmul", lambda: False)  # an AVX2-only CPU
    fp32 = polar_newton_schulz(g)
    assert torch.equal(fp32, polar_newton_schulz(g, dtype=torch.float32)) and not torch.equal(fp32, bf16)  # same kernel: same dtype chosen; the second half asserts a difference
    assert polar_newton_schulz(g.double()).dtype == torch.float64  # float64 stays float64

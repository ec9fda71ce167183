"""ASAP: controller on a synthetic plant, Fourier estimate, attacks, metrics and errors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.federated.asap import (
    LIE,
    ASAPAttack,
    ASMCController,
    AttackContext,
    FedSALite,
    FourierEstimator,
    MinMax,
    MinSum,
    NoAttack,
    attack_direction,
    lie_z_max,
    make_attack,
    minmax_bound,
    minsum_bound,
    round_complexity,
    target_deviation,
)


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: one intra-op thread avoids oversubscription on shared CPUs."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _plant(ctrl: ASMCController, b: float, c0: float, c1: float, rounds: int = 150, period: int = 100):
    """y_{t+1} = y_t - b alpha_t + c0 + c1 sin(2 pi t / P), y_0 = 0.95."""
    y, es, ss = 0.95, [], []
    for t in range(rounds):
        alpha = ctrl.step(y, t)
        es.append(y - ctrl.target)
        ss.append(ctrl.history[-1]["s"])
        y = y - b * alpha + c0 + c1 * math.sin(2 * math.pi * t / period)
    return es, ss


@pytest.mark.parametrize("b", [0.02, 0.1, 0.5])
@pytest.mark.parametrize(("c0", "c1"), [(0.01, 0.0), (0.01, 0.01), (0.02, 0.02)])
def test_controller_reaches_surface_in_finite_time_then_tracks(b, c0, c1):
    ctrl = ASMCController(target=0.5, alpha_min=-25.0, alpha_max=50.0)
    es, ss = _plant(ctrl, b, c0, c1)
    reach = next(i for i, s in enumerate(ss) if abs(s) <= ctrl.boundary)
    assert reach <= 15
    assert max(abs(e) for e in es[40:]) < 0.05
    assert max(abs(e) for e in es[100:]) < 0.02  # exponential-type convergence of the tracking error


def test_fedsa_lite_has_larger_error_when_gain_is_misestimated():
    for b, c0, c1 in [(0.02, 0.01, 0.01), (0.5, 0.01, 0.0)]:
        asap = ASMCController(target=0.5, alpha_min=-25.0, alpha_max=50.0)
        fedsa = ASMCController(
            target=0.5, alpha_min=-25.0, alpha_max=50.0, fourier_order=None, adaptive=False
        )
        e_asap, _ = _plant(asap, b, c0, c1)
        e_fedsa, _ = _plant(fedsa, b, c0, c1)
        rms = lambda e: math.sqrt(sum(v * v for v in e[60:]) / len(e[60:]))  # noqa: E731
        assert rms(e_fedsa) > 3 * rms(e_asap)


def test_fourier_estimator_recovers_coefficients():
    est = FourierEstimator(order=2, period=50, gain=0.5)
    truth = [0.3, 0.2, 0.0, 0.0, -0.1]
    for t in range(3000):
        est.update(t, sum(a * p for a, p in zip(truth, est.basis(t))))
    assert all(abs(a - b) < 0.01 for a, b in zip(est.theta, truth))


@settings(max_examples=40, deadline=None)
@given(ys=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30), hi=st.floats(0.1, 5.0))
def test_alpha_always_within_bounds(ys, hi):
    ctrl = ASMCController(target=0.4)
    for t, y in enumerate(ys):
        alpha = ctrl.step(y, t, alpha_min=-hi / 2, alpha_max=hi)
        assert -hi / 2 - 1e-12 <= alpha <= hi + 1e-12


def test_target_equal_to_current_accuracy_is_a_no_op():
    ctrl = ASMCController(target=0.73)
    assert ctrl.step(0.73, 0) == 0.0


def test_controller_state_round_trip():
    a = ASMCController(target=0.5, alpha_min=-5, alpha_max=5)
    for t, y in enumerate([0.9, 0.8, 0.7]):
        a.step(y, t)
    b = ASMCController(target=0.5, alpha_min=-5, alpha_max=5)
    b.load_state_dict(a.state_dict())
    for t, y in enumerate([0.65, 0.6, 0.55], start=3):
        assert a.step(y, t) == b.step(y, t)


def test_minmax_and_minsum_bounds_closed_form():
    honest = torch.tensor([[0.0, 0.0], [2.0, 0.0]])
    v = attack_direction(honest, "unit")
    assert torch.allclose(v, torch.tensor([-1.0, 0.0]))
    # u = (1 - g, 0): max distance 1 + g <= 2 and sum of squares 2 + 2 g^2 <= 4 both give g = 1
    assert minmax_bound(honest, v) == pytest.approx(1.0, abs=1e-6)
    assert minsum_bound(honest, v) == pytest.approx(1.0, abs=1e-6)


def test_lie_z_max():
    # n=10, m=2: s = floor(6) - 2 = 4, z = Phi^-1(6/10)
    assert lie_z_max(10, 2) == pytest.approx(0.2533, abs=1e-3)


def _ctx(m=3, d=20, seed=0, observe=None):
    g = torch.Generator().manual_seed(seed)
    honest = torch.randn(m, d, generator=g) * 0.1 + 0.05
    return AttackContext(1, torch.zeros(d), honest, observe=observe, num_clients=10)


def test_asap_updates_stay_within_minmax_distance_bound():
    ctx = _ctx(observe=lambda p: 0.9)
    attack = ASAPAttack(target=0.5)
    u = attack.craft(ctx)
    limit = float(torch.cdist(ctx.honest_updates, ctx.honest_updates).max())
    assert float((ctx.honest_updates - u[0]).norm(dim=1).max()) <= limit + 1e-5
    assert 0.0 < attack.alphas[-1] <= attack.bounds[-1]
    assert torch.equal(u[0], u[1])  # same kernel: the same crafted row for every attacker


@pytest.mark.parametrize("name", ["none", "LIE", "MinMax", "MinSum", "FedSA-lite", "ASAP"])
def test_attacks_shapes_finite_and_deterministic(name):
    out1 = make_attack(name, 0.5).craft(_ctx(observe=lambda p: 0.8))
    out2 = make_attack(name, 0.5).craft(_ctx(observe=lambda p: 0.8))
    assert out1.shape == (3, 20) and torch.isfinite(out1).all()
    assert torch.equal(out1, out2)  # same kernel: rerun, same shapes and seed


def test_attack_classes():
    assert isinstance(make_attack("LIE"), LIE) and isinstance(make_attack("MinMax"), MinMax)
    assert isinstance(make_attack("MinSum"), MinSum) and isinstance(make_attack("FedSA-lite", 0.5), FedSALite)
    assert isinstance(make_attack("none"), NoAttack)
    ctx = _ctx()
    # MinMax goes at least as far along v as LIE's small z for n=10, m=3
    v = attack_direction(ctx.honest_updates)
    mu = ctx.honest_updates.mean(0)
    far = lambda u: float((u[0] - mu) @ v / (v @ v))  # noqa: E731
    assert far(MinMax().craft(ctx)) >= far(LIE().craft(ctx)) - 1e-6


def test_round_complexity_and_deviation_on_handcrafted_traces():
    trace = [0.9, 0.7, 0.52, 0.49, 0.51, 0.5, 0.3]
    assert round_complexity(trace, 0.5, eps=0.05, window=3) == 2
    assert round_complexity(trace, 0.5, eps=0.05, window=3, start=1) == 1
    assert math.isinf(round_complexity(trace, 0.5, eps=0.05, window=5))
    assert math.isinf(round_complexity([0.9, 0.9], 0.2))
    assert target_deviation([0.6, 0.4, 0.5], 0.5) == pytest.approx(0.2 / 3)
    assert target_deviation(trace, 0.5, start=5) == pytest.approx(0.1)


def test_bad_inputs():
    with pytest.raises(ValueError, match="target"):
        ASAPAttack(target=1.5)
    with pytest.raises(ValueError, match="eps"):
        round_complexity([0.5], 0.5, eps=-0.1)
    with pytest.raises(ValueError, match="window"):
        round_complexity([0.5], 0.5, window=0)
    with pytest.raises(ValueError, match="global_params"):
        AttackContext(0, torch.zeros(3), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="num_malicious"):
        lie_z_max(4, 4)
    with pytest.raises(ValueError, match="unknown attack"):
        make_attack("Fang")
    with pytest.raises(ValueError, match="alpha_min"):
        ASMCController(target=0.5).step(0.9, 0, alpha_min=1.0, alpha_max=0.0)
    with pytest.raises(ValueError, match="direction"):
        MinMax(direction="up")
    with pytest.raises(ValueError, match="observe"):
        ASAPAttack(0.5).craft(_ctx())

"""Fang et al.'s Krum and trimmed-mean attacks and FMPA satisfy their own constraints."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.federated.asap import ATTACKS, make_attack
from neurips26.federated.attacks import (
    FMPA,
    AttackContext,
    FangKrum,
    FangTrimmedMean,
    fang_krum_lambda_max,
    minmax_bound,
)
from neurips26.federated.robust import krum_select, trimmed_mean


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _benign(k: int, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(d, generator=g) * 0.2
    return mean + 0.05 * torch.randn(k, d, generator=g)


@settings(max_examples=20, deadline=None)
@given(c=st.integers(2, 5), extra=st.integers(1, 8), d=st.integers(10, 40), seed=st.integers(0, 10_000))
def test_fang_krum_update_is_selected_by_krum_full_knowledge(c, extra, d, seed):
    """Fang et al.'s construction: the crafted update, sent by all c attackers, wins Krum (f = c).

    The paper's regime: benign updates dominated by their stochastic spread (a weak mean direction
    in many dimensions), so a small step against that direction lies nearer to the benign updates
    than they lie to each other, and the ``c - 1`` identical copies add zero distances.
    """
    n = 2 * c + 2 + extra  # Krum's assumption n > 2c + 2
    g = torch.Generator().manual_seed(seed)
    mu = 0.1 * torch.randn(d, generator=g)
    benign = mu + torch.randn(n - c, d, generator=g)
    honest = mu + torch.randn(c, d, generator=g)
    ctx = AttackContext(0, torch.zeros(d), honest, num_clients=n, benign_updates=benign)
    attack = FangKrum()
    crafted = attack.craft(ctx)
    lam = attack.lambdas[-1]
    assert crafted.shape == (c, d) and torch.isfinite(crafted).all()
    assert 0 < lam <= fang_krum_lambda_max(benign, n, c)
    s = torch.sign(benign.mean(0))
    assert torch.allclose(crafted[0].double(), -lam * s.double(), atol=1e-6)  # against the benign direction
    everyone = torch.cat([crafted.double(), benign.double()])
    assert krum_select(everyone, c).item() < c  # Krum selects a crafted update


def test_fang_krum_partial_knowledge_and_bound():
    honest = _benign(4, 6, 0)
    ctx = AttackContext(3, torch.zeros(6), honest, num_clients=20)
    out = FangKrum().craft(ctx)
    assert out.shape == (4, 6) and torch.equal(out[0], out[3])  # same kernel: the same crafted row for every attacker
    lam = fang_krum_lambda_max(honest, 20, 4)
    # bound = min neighbour-distance sum / ((n - 2c - 1) sqrt d) + max norm / sqrt d, by hand
    dist = torch.cdist(honest.double(), honest.double())
    dist.fill_diagonal_(float("inf"))
    first = torch.sort(dist, 1).values[:, :3].sum(1).min() / (11 * math.sqrt(6))
    assert lam == pytest.approx(float(first + honest.double().norm(dim=1).max() / math.sqrt(6)))
    with pytest.raises(ValueError, match="num_clients"):
        fang_krum_lambda_max(honest, 9, 4)


@settings(max_examples=20, deadline=None)
@given(c=st.integers(2, 6), d=st.integers(1, 10), seed=st.integers(0, 10_000), rnd=st.integers(0, 50))
def test_fang_trim_partial_knowledge_intervals(c, d, seed, rnd):
    honest = _benign(c, d, seed).double()
    ctx = AttackContext(rnd, torch.zeros(d), honest.float(), num_clients=20)
    out = FangTrimmedMean(seed=7).craft(ctx).double()
    mu, sd = honest.float().double().mean(0), honest.float().double().std(0)
    s = torch.sign(mu)
    up = s < 0  # benign coordinate expected to decrease: pushed up, to [mu + 3 sd, mu + 4 sd]
    tol = 1e-5
    assert (out[:, up] >= (mu + 3 * sd)[up] - tol).all() and (out[:, up] <= (mu + 4 * sd)[up] + tol).all()
    down = ~up
    assert (out[:, down] >= (mu - 4 * sd)[down] - tol).all() and (
        out[:, down] <= (mu - 3 * sd)[down] + tol
    ).all()
    again = FangTrimmedMean(seed=7).craft(ctx)
    assert torch.equal(again, out.float())  # same kernel: rerun, same shapes and seed; colluders on other nodes craft the same updates


def test_fang_trim_full_knowledge_moves_the_trimmed_mean_against_the_benign_direction():
    benign = _benign(14, 8, 3)
    honest = _benign(6, 8, 4)
    ctx = AttackContext(0, torch.zeros(8), honest, num_clients=20, benign_updates=benign)
    attack = FangTrimmedMean()
    low, high = attack.intervals(ctx)
    out = attack.craft(ctx).double()
    assert ((out >= low - 1e-6) & (out <= high + 1e-6)).all()
    s = torch.sign(benign.mean(0)).double()
    # beyond the benign extremes, on the side opposite to the benign change
    assert (out[:, s < 0] >= benign.max(0).values.double()[s < 0] - 1e-6).all()
    assert (out[:, s > 0] <= benign.min(0).values.double()[s > 0] + 1e-6).all()
    clean = trimmed_mean(benign.double(), 0.2)
    attacked = trimmed_mean(torch.cat([benign.double(), out]), 0.2)
    assert ((attacked - clean) * s <= 1e-12).all()


def _observe_factory(direction: torch.Tensor, acc0: float = 0.9, scale: float = 0.5):
    """A synthetic objective: accuracy falls linearly with the movement along ``direction``, in [0, 1]."""

    def observe(w: torch.Tensor) -> float:
        return float(min(1.0, max(0.0, acc0 - scale * float(w.double() @ direction.double()))))

    return observe


def test_fmpa_hits_the_target_within_the_stealth_bound():
    honest = _benign(5, 6, 0)
    delta = honest.double().mean(0)
    v = -delta / delta.norm()
    observe = _observe_factory(v)
    attack = FMPA(target=0.6, iters=30)
    ctx = AttackContext(0, torch.zeros(6), honest, observe=observe, num_clients=20)
    out = attack.craft(ctx).double()
    gamma, cap = attack.gammas[-1], attack.bounds[-1]
    assert cap == pytest.approx(minmax_bound(honest, v, base=delta))
    assert 0 <= gamma <= cap
    assert torch.allclose(out[0], delta + gamma * v, atol=1e-6)
    reached = observe(out[0])
    if gamma < cap:  # the target is reachable inside the bound: bisection lands on it
        assert reached <= 0.6 and reached > 0.6 - 0.01
    else:
        assert reached > 0.6
    # target at or above the current accuracy: gamma = 0, the benign prediction is sent (a no-op)
    idle = FMPA(target=1.0)
    out0 = idle.craft(AttackContext(0, torch.zeros(6), honest, observe=observe, num_clients=20))
    assert idle.gammas == [0.0] and torch.allclose(out0[0].double(), delta, atol=1e-6)


def test_fmpa_predictor_uses_the_global_history_and_persists():
    honest = _benign(3, 4, 1)
    observe = _observe_factory(torch.ones(4) / 2.0)
    a = FMPA(target=0.5, history_decay=0.0)
    w0, w1 = torch.zeros(4), torch.tensor([0.1, -0.2, 0.3, 0.0])
    a.craft(AttackContext(0, w0, honest, observe=observe))
    state = a.state_dict()
    b = FMPA(target=0.5, history_decay=0.0)
    b.load_state_dict(state)
    assert torch.allclose(b.predicted_step(AttackContext(1, w1, honest)), (w1 - w0).double())
    with pytest.raises(ValueError, match="observe"):
        FMPA(target=0.5).craft(AttackContext(0, w0, honest))
    with pytest.raises(ValueError, match="target"):
        FMPA(target=1.5)


def test_make_attack_names_and_errors():
    assert {"Fang-Krum", "Fang-Trim", "FMPA", "LIE", "MinMax", "MinSum", "FedSA-lite", "ASAP"} <= set(ATTACKS)
    honest = _benign(3, 5, 2)
    observe = _observe_factory(torch.ones(5))
    for name in ATTACKS:
        out = make_attack(name, 0.5).craft(
            AttackContext(2, torch.zeros(5), honest, observe=observe, num_clients=10)
        )
        assert out.shape == (3, 5) and torch.isfinite(out).all(), name
    with pytest.raises(ValueError, match="unknown attack"):
        make_attack("Fang-Bulyan")
    with pytest.raises(ValueError, match="benign_updates"):
        AttackContext(0, torch.zeros(5), honest, benign_updates=torch.zeros(4, 3))


def test_attack_context_rejects_bad_tensors():
    honest = _benign(3, 5, 0)
    with pytest.raises(TypeError, match="honest_updates must be a torch.Tensor"):
        AttackContext(0, torch.zeros(5), honest.tolist())
    with pytest.raises(TypeError, match="global_params must be floating point"):
        AttackContext(0, torch.zeros(5, dtype=torch.long), honest)
    bad = honest.clone()
    bad[1, 2] = float("nan")
    with pytest.raises(ValueError, match="honest_updates holds NaN"):
        AttackContext(0, torch.zeros(5), bad)
    with pytest.raises(ValueError, match="global_params holds NaN"):
        AttackContext(0, torch.full((5,), float("inf")), honest)
    with pytest.raises(ValueError, match="meta"):
        AttackContext(0, torch.zeros(5, device="meta"), honest)

"""FedRevive, FedBuff, FedAsync and the simulated-clock runner."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from neurips26.federated.fedrevive import (
    AsyncSimulator,
    ClientSpeedModel,
    ClientUpdate,
    ConditionalGenerator,
    FedAsync,
    FedBuff,
    FedRevive,
    LocalTransport,
    SyncFedAvg,
    revival_weight,
    staleness_weight,
)


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: one intra-op thread avoids oversubscription on shared CPUs."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


def _delta(model: nn.Module, scale: float, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        k: scale * torch.randn(v.shape, generator=g)
        for k, v in model.state_dict().items()
        if v.is_floating_point()
    }


def _revive(**kw) -> FedRevive:
    kw.setdefault("buffer_size", 2)
    return FedRevive(3, (4,), inner_steps=2, kd_steps=3, batch_size=16, **kw)


@settings(max_examples=50, deadline=None)
@given(t1=st.integers(0, 100), t2=st.integers(0, 100), a=st.floats(0.0, 3.0), bmax=st.floats(0.0, 1.0))
def test_weights_properties(t1, t2, a, bmax):
    lo, hi = sorted((t1, t2))
    assert float(staleness_weight(0, a)) == 1.0
    assert float(staleness_weight(hi, a)) <= float(staleness_weight(lo, a))
    assert float(revival_weight(0, bmax, 1.0)) == 0.0
    assert float(revival_weight(lo, bmax, 1.0)) <= float(revival_weight(hi, bmax, 1.0)) <= bmax


def test_zero_staleness_equals_fedbuff_bit_for_bit():
    m1, m2 = _model(), _model()
    fb, fr = FedBuff(buffer_size=2), _revive()
    for s in (fb, fr):
        s.on_version(0, m1.state_dict())
    ups = [ClientUpdate(i, _delta(m1, 0.1, i), 0, 10 + i) for i in range(2)]
    assert fb.on_update(ups[0], m1, 0) is False and fr.on_update(ups[0], m2, 0) is False
    assert fb.on_update(ups[1], m1, 0) and fr.on_update(ups[1], m2, 0)
    for k, v in m1.state_dict().items():
        assert torch.equal(v, m2.state_dict()[k]), k  # same kernel: beta_bar = 0 runs FedBuff's step
    assert fr.kd_steps_done == 0


def test_teacher_reconstruction_and_versions_not_mutated():
    model = _model()
    fr = _revive(version_window=5)
    fr.on_version(0, model.state_dict())
    base = {k: v.clone() for k, v in model.state_dict().items()}
    client = _model(seed=3)
    client_state = client.state_dict()
    delta = {k: client_state[k] - base[k] for k in base if base[k].is_floating_point()}
    update = ClientUpdate(0, delta, 0, 5)
    # the server moves on; the stored version must not follow the live model
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    teacher = fr.reconstruct_teacher(update, model)
    for k, v in teacher.state_dict().items():
        if v.is_floating_point():
            assert torch.allclose(v, client_state[k], atol=1e-6), k
    for k, v in fr.versions[0].items():
        assert torch.equal(v, base[k])  # same kernel: stored versions are copies, never written


def test_data_free_api():
    params = list(inspect.signature(FedRevive.distill).parameters)
    assert params == ["self", "teachers", "weights", "student"]
    fr = _revive()
    data = torch.randn(50, 4)
    for value in vars(fr).values():
        assert not isinstance(value, torch.utils.data.Dataset)
        assert value is not data


def _kl_on_fresh(fr, teachers, weights, student, n=256):
    g = torch.Generator().manual_seed(123)
    z = torch.randn(n, fr.z_dim, generator=g)
    y = torch.randint(0, 3, (n,), generator=g)
    with torch.no_grad():
        x = fr.generator.train()(z, y)
        ens = sum(w * t(x) for w, t in zip(weights, teachers))
        return float(F.kl_div(F.log_softmax(student(x) / 3, 1), F.softmax(ens / 3, 1), reduction="batchmean"))


def test_distillation_reduces_kl_and_loss_decreases():
    teachers = [_model(seed=s).eval() for s in (1, 2)]
    student = _model(seed=9).eval()
    fr = FedRevive(3, (4,), inner_steps=3, kd_steps=60, kd_lr=0.5, batch_size=64, seed=0)
    weights = torch.tensor([0.5, 0.5])
    fr.synthesize(teachers, weights.double(), student)  # warm the generator once
    before = _kl_on_fresh(fr, teachers, weights, student)
    delta = fr.distill(teachers, weights, student)
    after = _kl_on_fresh(fr, teachers, weights, student)
    assert after < before
    kd = [r["kd_loss"] for r in fr.log if "kd_loss" in r]
    assert sum(kd[-10:]) < sum(kd[:10])
    assert all(float(v.abs().max()) == 0.0 for k, v in delta.items() if "running" in k)


@pytest.mark.parametrize(
    ("shape", "conv"), [((64,), False), ((1, 28, 28), True), ((1, 8, 8), True), ((3, 5, 5), False)]
)
def test_generator_shapes(shape, conv):
    gen = ConditionalGenerator(10, shape, z_dim=8, hidden=16)
    z, y = gen.sample(5, torch.Generator().manual_seed(0))
    x = gen(z, y)
    assert x.shape == (5, *shape) and gen.conv is conv
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    with pytest.raises(ValueError, match="z must have shape"):
        gen(torch.zeros(5, 3), y)


class _TableSpeed(ClientSpeedModel):
    def __init__(self, durations):
        super().__init__(len(durations), sigma=0.0)
        self.durations = durations

    def sample_duration(self, client_id):
        return self.durations[client_id]


def _train_fn(client_id, state, version, job):
    model = _model()
    delta = {k: torch.full_like(v, 0.01 * (client_id + 1)) for k, v in state.items() if v.is_floating_point()}
    del model
    return ClientUpdate(client_id, delta, version, 10)


def test_simulator_order_and_staleness_on_a_hand_built_schedule():
    sim = AsyncSimulator(LocalTransport(_train_fn), _TableSpeed([1.0, 2.5]))
    hist = sim.run(FedAsync(), _model(), lambda m: {"x": 0.0}, max_server_steps=5)
    assert [(t, c, s) for t, c, s, _ in hist.arrivals] == [(1.0, 0, 0), (2.0, 0, 0), (2.5, 1, 2), (3.0, 0, 1),
                                                           (4.0, 0, 0)]  # fmt: skip
    assert [v for _, v, _ in hist.evals] == [0, 1, 2, 3, 4, 5]


def test_processed_updates_equal_steps_times_buffer_plus_residual():
    speed = ClientSpeedModel(6, sigma=1.0, seed=1)
    fb = FedBuff(buffer_size=4)
    hist = AsyncSimulator(LocalTransport(_train_fn), speed).run(fb, _model(), lambda m: {}, time_budget=20.0)
    assert fb.processed == fb.server_steps * 4 + len(fb.buffer) == len(hist.arrivals)


def test_sync_fedavg_has_zero_staleness():
    hist = AsyncSimulator(LocalTransport(_train_fn), ClientSpeedModel(4, seed=0)).run(
        SyncFedAvg(4), _model(), lambda m: {}, max_server_steps=3
    )
    assert set(hist.staleness) == {0} and len(hist.arrivals) == 12


def test_reproducible_histories():
    def run():
        speed = ClientSpeedModel(5, sigma=1.0, seed=3)
        strat = _revive(buffer_size=2, seed=1)
        model = _model()
        hist = AsyncSimulator(LocalTransport(_train_fn), speed, seed=3).run(
            strat, model, lambda m: {"w": float(next(m.parameters()).sum())}, max_server_steps=4
        )
        return hist, model.state_dict()

    (h1, s1), (h2, s2) = run(), run()
    assert h1.arrivals == h2.arrivals and h1.evals == h2.evals
    assert all(torch.equal(s1[k], s2[k]) for k in s1)  # same kernel: rerun, same shapes and seed


def test_bad_input():
    model = _model()
    fb = FedBuff(buffer_size=2)
    fb.on_version(0, model.state_dict())
    good = _delta(model, 0.1, 0)
    with pytest.raises(ValueError, match="names differ"):
        fb.on_update(ClientUpdate(0, {"0.weight": good["0.weight"]}, 0, 5), model, 0)
    bad = dict(good)
    bad["0.weight"] = torch.zeros(2, 2)
    with pytest.raises(ValueError, match="shape"):
        fb.on_update(ClientUpdate(0, bad, 0, 5), model, 0)
    with pytest.raises(ValueError, match="newer than the server version"):
        fb.on_update(ClientUpdate(0, good, 3, 5), model, 1)
    with pytest.raises(ValueError, match="buffer_size"):
        FedBuff(buffer_size=0)
    with pytest.raises(ValueError, match="beta_max"):
        _revive(beta_max=1.5)
    with pytest.raises(ValueError, match="num_samples"):
        ClientUpdate(0, good, 0, 0)


def test_updates_older_than_window_are_raw_only_and_counted():
    model = _model()
    fr = _revive(version_window=0, buffer_size=2)
    fr.on_version(0, model.state_dict())
    fr.on_version(1, model.state_dict())
    fr.on_version(2, model.state_dict())
    ups = [ClientUpdate(i, _delta(model, 0.05, i), 0, 5) for i in range(2)]
    fr.on_update(ups[0], model, 2)
    with pytest.warns(UserWarning, match="version window"):
        assert fr.on_update(ups[1], model, 2)
    assert fr.outside_window == 2 and fr.kd_steps_done == 0

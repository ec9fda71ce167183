"""Flower glue: ArrayRecord conversion, strategies on fabricated replies, grids, real Flower runs."""

from __future__ import annotations

import logging

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from torch import nn

from neurips26.federated.asap import make_attack
from neurips26.federated.fedrevive import (
    AsyncSimulator,
    ClientSpeedModel,
    ClientUpdate,
    FedBuff,
    LocalTransport,
)
from neurips26.federated.fedrevive.flower import AsyncFedAvg, run_async
from neurips26.federated.flower import (
    ClientSetup,
    LocalGrid,
    RobustFedAvg,
    flatten_state,
    from_arrayrecord,
    local_identity,
    make_client_app,
    malicious_clients,
    quiet_flower,
    run_rounds,
    to_arrayrecord,
    unflatten_state,
)


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: one intra-op thread avoids oversubscription on shared CPUs."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _model() -> nn.Module:
    return nn.Linear(3, 2)


def _partitions(n: int, size: int = 12) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        x = torch.randn(size, 3, generator=g)
        out.append((x, (x[:, 0] > 0).long()))
    return out


def _state(value: float) -> dict[str, torch.Tensor]:
    return {"weight": torch.full((2, 3), value), "bias": torch.full((2,), value)}


def test_arrayrecord_round_trip_and_flatten():
    state = _model().state_dict()
    rec = to_arrayrecord(state)
    assert isinstance(rec, ArrayRecord)
    back = from_arrayrecord(rec)
    assert all(torch.equal(state[k], back[k]) for k in state)  # same kernel: serialisation round trip
    flat = flatten_state(state)
    assert flat.shape == (8,)
    again = unflatten_state(flat, state)
    assert all(torch.equal(state[k], again[k]) for k in state)  # same kernel: flatten/unflatten round trip
    with pytest.raises(ValueError, match="flat must have shape"):
        unflatten_state(torch.zeros(3), state)
    with pytest.raises(TypeError, match="ArrayRecord"):
        from_arrayrecord(state)


def _replies(strategy, grid, global_value: float, client_values, base_version: int = 0):
    msgs = list(strategy.configure_train(1, to_arrayrecord(_state(global_value)), ConfigRecord(), grid))
    msgs.sort(key=lambda m: m.metadata.dst_node_id)
    out = []
    for i, (msg, v) in enumerate(zip(msgs, client_values)):
        metrics = MetricRecord(
            {"num-examples": 10, "client-id": i, "base-version": base_version, "malicious": 0.0}
        )
        content = RecordDict({"arrays": to_arrayrecord(_state(v)), "metrics": metrics})
        out.append(Message(content, reply_to=msg))
    return out


def test_robust_strategy_accepts_and_returns_arrayrecords():
    app = make_client_app(ClientSetup(_model, _partitions(5)))
    with local_identity():
        grid = LocalGrid(app, 5)
        for rule, expected in [("fedavg", 5.8), ("median", 2.5), ("krum", 2.0), ("trimmed_mean", 2.5)]:
            strat = RobustFedAvg(rule, num_malicious=1, min_train_nodes=5, min_available_nodes=5)
            replies = _replies(strat, grid, 1.0, [1.5, 2.0, 2.5, 3.0, 20.0])
            arrays, metrics = strat.aggregate_train(1, replies)
            assert isinstance(arrays, ArrayRecord) and isinstance(metrics, MetricRecord)
            out = from_arrayrecord(arrays)
            assert torch.allclose(out["weight"], torch.full((2, 3), expected), atol=1e-5), rule
            if rule == "krum":
                assert strat.selected == [[1]] and strat.malicious_selected == [0.0]


def test_async_strategy_semi_async_adapter():
    app = make_client_app(ClientSetup(_model, _partitions(2)))
    with local_identity():
        grid = LocalGrid(app, 2)
        strat = AsyncFedAvg(FedBuff(buffer_size=2, staleness_exp=0.0), _model, initial_state=_state(1.0),
                            min_train_nodes=2, min_available_nodes=2)  # fmt: skip
        replies = _replies(strat, grid, 1.0, [2.0, 4.0])
        arrays, _ = strat.aggregate_train(1, replies)
        assert torch.allclose(from_arrayrecord(arrays)["bias"], torch.full((2,), 3.0))  # 1 + mean(1, 3)
        assert strat.version == 1
        with pytest.raises(ValueError, match="empty client set"):
            strat.aggregate_train(2, [])


def test_bad_configuration_errors():
    with pytest.raises(ValueError, match="unknown aggregation rule"):
        RobustFedAvg("geomedian")
    with pytest.raises(ValueError, match="malicious fraction"):
        malicious_clients(10, 0.6)
    with pytest.raises(ValueError, match="malicious fraction"):
        malicious_clients(10, -0.1)
    with pytest.raises(ValueError, match="malicious fraction"):
        ClientSetup(_model, _partitions(4), malicious=(0, 1), attack_fn=lambda: make_attack("LIE"))
    with pytest.raises(ValueError, match="empty client set"):
        ClientSetup(_model, [])
    with pytest.raises(ValueError, match="empty client set"):
        LocalGrid(make_client_app(ClientSetup(_model, _partitions(2))), 0)
    with pytest.raises(ValueError, match="attack_fn"):
        ClientSetup(_model, _partitions(5), malicious=(0,))
    with local_identity():
        strat = RobustFedAvg("median")
        strat._global = _state(0.0)
        with pytest.raises(ValueError, match="empty client set"):
            strat.aggregate_train(1, [])
    assert malicious_clients(10, 0.2, seed=1) == malicious_clients(10, 0.2, seed=1)
    assert len(malicious_clients(10, 0.2)) == 2


def _eval(_r, state):
    m = _model()
    m.load_state_dict(state)
    x, y = _partitions(1, 50)[0]
    with torch.no_grad():
        return {"accuracy": float((m(x).argmax(1) == y).float().mean())}


def test_inprocess_rounds_with_colluding_malicious_clients_keep_state():
    setup = ClientSetup(_model, _partitions(7), lr=0.1, malicious=(0, 1), attack_fn=lambda: make_attack("ASAP", 0.5),
                        holdout=_partitions(1, 20)[0])  # fmt: skip
    app = make_client_app(setup)
    with local_identity():
        grid = LocalGrid(app, 7)
        strat = RobustFedAvg("median", num_malicious=2, min_train_nodes=7, min_available_nodes=7)
        state = _model().state_dict()
        for rnd in (1, 2, 3):
            msgs = strat.configure_train(rnd, to_arrayrecord(state), ConfigRecord(), grid)
            arrays, _ = strat.aggregate_train(rnd, grid.send_and_receive(msgs))
            state = from_arrayrecord(arrays)
    for nid in (1000, 1001):  # the controller state persists in each malicious node's context
        assert "attack" in grid._contexts[nid].state
    assert "attack" not in grid._contexts[1002].state
    assert all(torch.isfinite(v).all() for v in state.values())


def test_flower_async_path_equals_local_transport():
    """The algorithm exists once: Flower messages over LocalGrid == direct in-process training."""
    setup = ClientSetup(_model, _partitions(4), lr=0.1, seed=3)
    torch.manual_seed(0)
    init = _model().state_dict()

    strat = AsyncFedAvg(FedBuff(buffer_size=2), _model, initial_state=init)
    hist_flower = run_async(strat, make_client_app(setup), ClientSpeedModel(4, seed=5), lambda m: {},
                            max_server_steps=4, seed=5)  # fmt: skip

    def train_fn(c, state, version, job):
        model, _ = setup.honest_update(c, state, job)
        new = model.state_dict()
        delta = {k: new[k].float() - state[k].float() for k in state if state[k].is_floating_point()}
        return ClientUpdate(c, delta, version, setup.partitions[c][0].shape[0])

    model = _model()
    model.load_state_dict(init)
    hist_local = AsyncSimulator(LocalTransport(train_fn), ClientSpeedModel(4, seed=5), seed=5).run(
        FedBuff(buffer_size=2), model, lambda m: {}, max_server_steps=4
    )
    assert hist_flower.arrivals == hist_local.arrivals
    a, b = strat.model.state_dict(), model.state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_run_rounds_inprocess_learns():
    setup = ClientSetup(_model, _partitions(3, 40), lr=0.5)
    strat = RobustFedAvg("fedavg", min_train_nodes=3, min_available_nodes=3)
    torch.manual_seed(0)
    res = run_rounds(strat, make_client_app(setup), 3, 5, _model().state_dict(), _eval)
    assert len(res.metrics) == 6
    assert res.metrics[-1]["accuracy"] > res.metrics[0]["accuracy"]


def test_real_flower_simulation_engine_two_clients():
    """A real Flower run on the simulation engine (Ray): 2 clients, 2 rounds, equal to the in-process run."""
    setup = ClientSetup(_model, _partitions(2, 20), lr=0.2, seed=1)
    torch.manual_seed(0)
    init = _model().state_dict()
    results = {}
    for engine in ("simulation", "inprocess"):
        strat = RobustFedAvg("median", min_train_nodes=2, min_available_nodes=2)
        results[engine] = run_rounds(
            strat, make_client_app(setup), 2, 2, init, _eval, engine=engine, num_cpus=1
        )
    a, b = results["simulation"].state, results["inprocess"].state
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert len(results["simulation"].metrics) == 3


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_quiet_flower_drops_only_the_central_evaluation_notice():
    logger = logging.getLogger("flwr")
    handler = _Records()
    logger.addHandler(handler)
    try:
        RobustFedAvg("median")  # fraction_evaluate defaults to 0.0: no notice
        with quiet_flower():
            logger.warning("fraction_evaluate is set to 0.0. Federated evaluation will be skipped.")
            logger.warning("something else")
        logger.warning("fraction_evaluate is set to 0.0. again, outside")
    finally:
        logger.removeHandler(handler)
    assert not any(m.startswith("fraction_evaluate") and "outside" not in m for m in handler.messages)
    assert "something else" in handler.messages
    assert "fraction_evaluate is set to 0.0. again, outside" in handler.messages


def test_async_wiring_old_path_warns_and_resolves_to_the_new_one():
    import neurips26.federated.fedrevive.flower as new
    import neurips26.federated.flower as old

    for name in ("AsyncFedAvg", "GridTransport", "run_async"):
        with pytest.warns(DeprecationWarning, match=f"{name} moved to neurips26.federated.fedrevive.flower"):
            assert getattr(old, name) is getattr(new, name)
    with pytest.raises(AttributeError):
        old.no_such_name  # noqa: B018


def test_run_on_engine_rejects_unknown_engine_before_running():
    from neurips26.federated.flower import run_on_engine

    calls = []
    with pytest.raises(ValueError, match="engine"):
        run_on_engine(lambda grid: calls.append(grid), None, 2, "threads")
    assert calls == []

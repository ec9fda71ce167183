"""Byzantine and fault scenarios through Flower's Message API (issue 23, item 3).

The federations are built as the ASAP claim (``make_defence`` + ``run_rounds``, ASAP attackers among
the clients) and the FedRevive claim (``AsyncFedAvg`` + ``run_async``) build theirs, with one client
sending non-finite parameters and one client crashing mid-run (:mod:`neurips26.federated.faults`).
Under ``nonfinite="drop"`` each run must equal, parameter for parameter, the run in which the faulty
clients never took part in the faulty rounds/jobs; the default policy must raise a ``ValueError``
naming the client.
"""

from __future__ import annotations

import logging
import math

import pytest
import torch
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from torch import nn

from neurips26.federated.asap import make_attack
from neurips26.federated.faults import InjectedCrash, crashing_client, nonfinite_client, split_failed
from neurips26.federated.fedrevive import ClientSpeedModel, FedBuff, FedRevive, SyncFedAvg
from neurips26.federated.fedrevive.flower import AsyncFedAvg, GridTransport, run_async
from neurips26.federated.flower import (
    ClientSetup,
    LocalGrid,
    RobustFedAvg,
    local_identity,
    make_client_app,
    run_rounds,
)
from neurips26.federated.flower_defences import DEFENCES, make_defence

N = 9
ATTACKER = 0  # ASAP attacker (colluding, its own adaptive state in the node's context)
NAN_CLIENT = 7  # non-finite parameters in every round
CRASH_CLIENT = 8  # crashes in round 2 only (mid-run)
ROUNDS = 3


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _model() -> nn.Module:
    return nn.Linear(4, 3)


def _bn_model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


def _partitions(n: int, size: int = 16, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        x = torch.randn(size, 4, generator=g)
        out.append((x, (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()))
    return out


def _init(model_fn=_model) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return model_fn().state_dict()


def _asap_setup() -> ClientSetup:
    return ClientSetup(_model, _partitions(N), lr=0.2, seed=4, malicious=(ATTACKER,),
                       attack_fn=lambda: make_attack("ASAP", 0.5), holdout=_partitions(1, 30, seed=9)[0])  # fmt: skip


def _faulty_app(setup: ClientSetup, crash_mode: str = "raise"):
    app = make_client_app(setup)
    app = nonfinite_client(app, NAN_CLIENT)
    return crashing_client(app, CRASH_CLIENT, rounds=2, mode=crash_mode)


def _defence(rule: str, nonfinite: str = "drop"):
    return make_defence(
        rule, num_malicious=1, nonfinite=nonfinite, min_train_nodes=N - 2, min_available_nodes=N
    )


def _without(strategy, skip: dict[int, set[int]]):
    """Reference: ``strategy`` never sends a train message to partition ``c`` in rounds ``skip[c]``.

    On :class:`LocalGrid` partition ``c`` is node ``1000 + c``.
    """
    configure = strategy.configure_train

    def configure_train(rnd, arrays, config, grid):
        msgs = list(configure(rnd, arrays, config, grid))
        return [m for m in msgs if rnd not in skip.get(int(m.metadata.dst_node_id) - 1000, set())]

    strategy.configure_train = configure_train
    return strategy


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # same kernel: the same clients' updates, aggregated in the same order


def _finite(state: dict[str, torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(v).all()) for v in state.values() if v.is_floating_point())


# --------------------------------------------------------------------------------------------
# ASAP-style round-based federations (Flower's robust strategies)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rule", DEFENCES)
def test_round_based_drop_equals_run_without_faulty_clients(rule, caplog):
    setup = _asap_setup()
    init = _init()
    strat = _defence(rule)
    with caplog.at_level(logging.WARNING, logger="neurips26.federated"):
        faulty = run_rounds(strat, _faulty_app(setup), N, ROUNDS, init)
    ref_strat = _without(_defence(rule), {NAN_CLIENT: {1, 2, 3}, CRASH_CLIENT: {2}})
    ref = run_rounds(ref_strat, make_client_app(_asap_setup()), N, ROUNDS, init)

    assert _finite(faulty.state)
    assert _equal(faulty.state, ref.state)  # nothing else changes, parameter for parameter
    assert not _equal(faulty.state, init)
    assert strat.dropped == [[NAN_CLIENT]] * ROUNDS and ref_strat.dropped == [[]] * ROUNDS
    assert strat.crashed == [[], [1000 + CRASH_CLIENT], []] and ref_strat.crashed == [[]] * ROUNDS
    if rule in ("krum", "multikrum", "bulyan"):
        assert strat.selected == ref_strat.selected and all(NAN_CLIENT not in s for s in strat.selected)
    if rule == "fedavg":  # not vacuous: the faulty clients' honest participation would change the result
        full = run_rounds(_defence(rule), make_client_app(_asap_setup()), N, ROUNDS, init)
        assert not _equal(full.state, ref.state)
    logs = [r.getMessage() for r in caplog.records]
    assert sum(f"(clients [{NAN_CLIENT}])" in m and "dropped 1 of" in m for m in logs) == ROUNDS
    crash_logs = [m for m in logs if "skipped 1 of 9 client replies that failed" in m]
    assert len(crash_logs) == 1 and f"injected crash of client {CRASH_CLIENT} in round 2" in crash_logs[0]


@pytest.mark.parametrize("rule", ["median", "krum"])
def test_round_based_default_policy_raises_naming_the_client(rule):
    setup = _asap_setup()
    with pytest.raises(ValueError, match=rf"clients \[{NAN_CLIENT}\] hold NaN or infinite"):
        run_rounds(_defence(rule, nonfinite="raise"), _faulty_app(setup), N, ROUNDS, _init())
    strat = make_defence(rule, num_malicious=1, min_train_nodes=N, min_available_nodes=N)
    assert strat.nonfinite == "raise"  # the default
    with pytest.raises(ValueError, match=rf"clients \[{NAN_CLIENT}\]"):
        run_rounds(
            strat, nonfinite_client(make_client_app(setup), NAN_CLIENT, value=-math.inf), N, 1, _init()
        )


@pytest.mark.parametrize("mode", ["raise", "error"])
def test_crash_modes_are_skipped_not_fatal(mode, caplog):
    """A ClientApp that raises and a node that answers with an error Message are the same to the server."""
    setup = ClientSetup(_model, _partitions(5), lr=0.2, seed=1)
    init = _init()
    strat = make_defence("trimmed_mean", beta=0.2, min_train_nodes=4, min_available_nodes=5)
    app = crashing_client(make_client_app(setup), [1], rounds=[2, 3], mode=mode)
    with caplog.at_level(logging.WARNING, logger="neurips26.federated"):
        res = run_rounds(strat, app, 5, ROUNDS, init)
    ref_strat = _without(
        make_defence("trimmed_mean", beta=0.2, min_train_nodes=4, min_available_nodes=5), {1: {2, 3}}
    )
    ref = run_rounds(ref_strat, make_client_app(setup), 5, ROUNDS, init)
    assert _equal(res.state, ref.state) and strat.crashed == [[], [1001], [1001]]
    assert sum("injected crash of client 1" in r.getMessage() for r in caplog.records) >= 2


def test_robust_fedavg_rules_survive_both_faults(caplog):
    """The tensor rules behind RobustFedAvg (robust.py) under the same two faults."""
    setup = ClientSetup(_model, _partitions(N), lr=0.2, seed=2)
    init = _init()
    for rule in ("fedavg", "median", "multi_krum"):
        strat = RobustFedAvg(
            rule, num_malicious=1, nonfinite="drop", min_train_nodes=N - 2, min_available_nodes=N
        )
        with caplog.at_level(logging.WARNING, logger="neurips26.federated"):
            res = run_rounds(strat, _faulty_app(setup), N, ROUNDS, init)
        ref_strat = _without(
            RobustFedAvg(rule, num_malicious=1, min_train_nodes=N - 2, min_available_nodes=N),
            {NAN_CLIENT: {1, 2, 3}, CRASH_CLIENT: {2}},
        )
        ref = run_rounds(ref_strat, make_client_app(setup), N, ROUNDS, init)
        assert _finite(res.state) and _equal(res.state, ref.state)
        assert strat.dropped == [[NAN_CLIENT]] * ROUNDS and strat.crashed == [[], [1000 + CRASH_CLIENT], []]
        with pytest.raises(ValueError, match=rf"clients \[{NAN_CLIENT}\]"):
            run_rounds(RobustFedAvg(rule, num_malicious=1, min_train_nodes=N - 2, min_available_nodes=N),
                       _faulty_app(setup), N, 1, init)  # fmt: skip
    assert any(f"drops clients [{NAN_CLIENT}]" in r.getMessage() for r in caplog.records)


def test_every_client_crashing_is_a_clear_error():
    setup = ClientSetup(_model, _partitions(3), lr=0.2)
    app = crashing_client(make_client_app(setup), [0, 1, 2], rounds=1)
    with pytest.raises(ValueError, match=r"every reply failed .*injected crash of client 0 in round 1"):
        run_rounds(make_defence("median", min_train_nodes=3, min_available_nodes=3), app, 3, 2, _init())
    with pytest.raises(ValueError, match="every reply failed"):
        run_rounds(RobustFedAvg("median", min_train_nodes=3, min_available_nodes=3), app, 3, 2, _init())


def test_every_client_nonfinite_under_drop_is_a_clear_error():
    setup = ClientSetup(_model, _partitions(3), lr=0.2)
    app = nonfinite_client(make_client_app(setup), [0, 1, 2], entries="all")
    strat = make_defence("fedavg", nonfinite="drop", min_train_nodes=3, min_available_nodes=3)
    with pytest.raises(ValueError, match="every client reply holds NaN or infinite"):
        run_rounds(strat, app, 3, 1, _init())


# --------------------------------------------------------------------------------------------
# FedRevive-style asynchronous federations (AsyncFedAvg + GridTransport + AsyncSimulator)
# --------------------------------------------------------------------------------------------
A_N = 5
A_NAN = 3  # non-finite in every job
A_CRASH = 1  # crashes on the jobs it starts from version 1 (mid-run)


def _fedrevive(seed: int = 0) -> FedRevive:
    return FedRevive(3, (4,), buffer_size=2, inner_steps=2, kd_steps=3, batch_size=16, seed=seed)


def _async_run(app, rule, nonfinite="drop", steps=5, engine="inprocess", concurrency=4):
    strat = AsyncFedAvg(rule, _bn_model, initial_state=_init(_bn_model), nonfinite=nonfinite)
    hist = run_async(strat, app, ClientSpeedModel(A_N, sigma=1.0, seed=3), lambda m: {}, max_server_steps=steps,
                     concurrency=concurrency, seed=3, engine=engine, num_cpus=1)  # fmt: skip
    return hist, strat


def _async_faulty_app(setup: ClientSetup):
    return crashing_client(nonfinite_client(make_client_app(setup), A_NAN), A_CRASH, rounds=range(1, 100))


def _ignoring(rule, ignore):
    """Reference rule: updates for which ``ignore(update)`` holds are received but never used."""
    on_update = rule.on_update

    def patched(update, model, version):
        return False if ignore(update) else on_update(update, model, version)

    rule.on_update = patched
    return rule


@pytest.mark.parametrize(
    "rule_fn", [_fedrevive, lambda: FedBuff(buffer_size=2)], ids=["FedRevive", "FedBuff"]
)
def test_async_drop_equals_run_that_ignores_the_faulty_jobs(rule_fn, caplog):
    setup = ClientSetup(_bn_model, _partitions(A_N), lr=0.1, seed=5)
    with caplog.at_level(logging.WARNING, logger="neurips26.federated"):
        hist, strat = _async_run(_async_faulty_app(setup), rule_fn())
    ignore = lambda u: u.client_id == A_NAN or (u.client_id == A_CRASH and u.base_version >= 1)  # noqa: E731
    ref_hist, ref = _async_run(make_client_app(setup), _ignoring(rule_fn(), ignore))

    assert _finite(strat.model.state_dict())
    assert _equal(strat.model.state_dict(), ref.model.state_dict())
    assert hist.evals == ref_hist.evals
    skipped = [(t, c) for t, c, _, b in ref_hist.arrivals if c == A_NAN or (c == A_CRASH and b >= 1)]
    assert hist.failed == skipped and len(skipped) >= 2
    assert hist.arrivals == [a for a in ref_hist.arrivals if (a[0], a[1]) not in skipped]
    assert {c for c, _ in strat.dropped} == {A_NAN} and len(strat.dropped) == sum(
        c == A_NAN for _, c in skipped
    )
    assert [c for c, _ in strat.crashed] == [c for _, c in skipped if c == A_CRASH] and strat.crashed
    assert all("injected crash of client 1" in reason for _, reason in strat.crashed)
    assert strat.rule.processed == ref.rule.processed and strat.rule.staleness == ref.rule.staleness
    _, full = _async_run(make_client_app(setup), rule_fn())  # not vacuous: the skipped jobs would matter
    assert not _equal(full.model.state_dict(), ref.model.state_dict())
    logs = [r.getMessage() for r in caplog.records]
    assert sum(f"dropped the update of client {A_NAN}" in m for m in logs) == len(strat.dropped)
    assert sum("skipped 1 of 1 client replies that failed" in m for m in logs) == len(strat.crashed)


def test_async_default_policy_raises_naming_the_client():
    setup = ClientSetup(_bn_model, _partitions(A_N), lr=0.1, seed=5)
    with pytest.raises(ValueError, match=rf"reply of client {A_NAN} .* NaN or infinite"):
        _async_run(_async_faulty_app(setup), _fedrevive(), nonfinite="raise")
    assert AsyncFedAvg(FedBuff(), _bn_model).nonfinite == "raise"


def test_async_all_clients_failing_and_synchronous_rule_are_clear_errors():
    setup = ClientSetup(_bn_model, _partitions(A_N), lr=0.1, seed=5)
    everyone = crashing_client(make_client_app(setup), range(A_N))
    with pytest.raises(ValueError, match=f"every one of the {A_N} clients failed"):
        _async_run(everyone, FedBuff(buffer_size=2))
    with pytest.raises(ValueError, match="synchronous strategy cannot complete the round"):
        _async_run(_async_faulty_app(setup), SyncFedAvg(A_N), concurrency=A_N)


class _LosingGrid(LocalGrid):
    """A LocalGrid whose node ``lost`` never answers train messages (a missing reply)."""

    def __init__(self, app, n, lost):
        super().__init__(app, n)
        self.lost = lost

    def pull_messages(self, message_ids):
        ids = list(message_ids)
        keep = [m for m in ids if not (m in self._pending and self._pending[m].metadata.dst_node_id == self.lost
                                       and self._pending[m].metadata.message_type == MessageType.TRAIN)]  # fmt: skip
        return super().pull_messages(keep)


def test_async_missing_reply_is_skipped_after_the_timeout(caplog):
    from neurips26.federated.fedrevive import AsyncSimulator

    setup = ClientSetup(_bn_model, _partitions(A_N), lr=0.1, seed=5)
    strat = AsyncFedAvg(FedBuff(buffer_size=2), _bn_model, initial_state=_init(_bn_model))
    with local_identity(), caplog.at_level(logging.WARNING, logger="neurips26.federated"):
        transport = GridTransport(
            _LosingGrid(make_client_app(setup), A_N, 1000), strat, timeout=0.01, poll=0.001
        )
        hist = AsyncSimulator(transport, ClientSpeedModel(A_N, seed=3), seed=3).run(
            strat.rule, strat.model, lambda m: {}, max_server_steps=3
        )
    assert hist.failed and {c for _, c in hist.failed} == {0} and all(c != 0 for _, c, _, _ in hist.arrivals)
    assert strat.crashed and all(r.startswith("no reply within") for _, r in strat.crashed)
    assert any("skipped the job of client 0" in r.getMessage() for r in caplog.records)
    assert _finite(strat.model.state_dict()) and len(hist.evals) == 4


# --------------------------------------------------------------------------------------------
# the simulation engine (Ray), as used by the FedRevive and ASAP engine checks
# --------------------------------------------------------------------------------------------
def test_simulation_engine_survives_both_faults_like_the_inprocess_grid():
    """FedRevive on Flower's simulation engine: the ClientApp's exception becomes Flower's own error
    reply, the NaN reply is dropped, and the run equals the in-process one."""
    setup = ClientSetup(_bn_model, _partitions(A_N), lr=0.1, seed=5)
    hist_sim, strat_sim = _async_run(_async_faulty_app(setup), _fedrevive(), steps=3, engine="simulation")
    hist_loc, strat_loc = _async_run(_async_faulty_app(setup), _fedrevive(), steps=3)
    assert hist_sim.failed == hist_loc.failed and hist_sim.arrivals == hist_loc.arrivals and hist_sim.failed
    assert strat_sim.dropped == strat_loc.dropped and len(strat_sim.crashed) == len(strat_loc.crashed)
    assert all("InjectedCrash" in r and "injected crash of client 1" in r for _, r in strat_sim.crashed)
    a, b = strat_sim.model.state_dict(), strat_loc.model.state_dict()
    assert _finite(a) and all(torch.allclose(a[k].float(), b[k].float(), atol=1e-6) for k in a)


@pytest.mark.slow
def test_simulation_engine_round_based_drop_and_raise():
    """The ASAP engine-check path (round-based defence on Ray): drop equals the in-process run; the
    default policy's ValueError reaches the caller from the ServerApp thread, naming the client."""
    setup = _asap_setup()
    init = _init()
    sim = _defence("median")
    res_sim = run_rounds(sim, _faulty_app(setup), N, 2, init, engine="simulation", num_cpus=1)
    loc = _defence("median")
    res_loc = run_rounds(loc, _faulty_app(_asap_setup()), N, 2, init)
    assert sim.dropped == loc.dropped == [[NAN_CLIENT]] * 2 and [len(c) for c in sim.crashed] == [0, 1]
    a, b = res_sim.state, res_loc.state
    assert _finite(a) and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    with pytest.raises(ValueError, match=rf"clients \[{NAN_CLIENT}\] hold NaN or infinite"):
        run_rounds(_defence("median", nonfinite="raise"), _faulty_app(setup), N, 2, init, engine="simulation",
                   num_cpus=1)  # fmt: skip


# --------------------------------------------------------------------------------------------
# the wrappers themselves
# --------------------------------------------------------------------------------------------
def _train_msg(rnd: int) -> Message:
    from neurips26.federated.flower import to_arrayrecord

    content = RecordDict({"arrays": to_arrayrecord(_init()), "config": ConfigRecord({"server-round": rnd})})
    return Message(content, message_type=MessageType.TRAIN, dst_node_id=1000)


def _ctx(pid: int) -> Context:
    return Context(run_id=0, node_id=1000 + pid, node_config={"partition-id": pid, "num-partitions": 3},
                   state=RecordDict(), run_config={})  # fmt: skip


def test_wrappers_change_only_the_chosen_clients_and_rounds():
    setup = ClientSetup(_model, _partitions(3), lr=0.2)
    app = make_client_app(setup)
    with local_identity():
        honest = {rnd: app(_train_msg(rnd), _ctx(1)) for rnd in (2, 3)}
        for value in (math.nan, math.inf, -math.inf):
            for entries in ("one", "all"):
                bad = nonfinite_client(app, [1], rounds=[2], value=value, entries=entries)
                r = bad(_train_msg(2), _ctx(1)).content["arrays"]
                arrs = [a.numpy() for a in r.values()]
                n_bad = sum(int((~torch.isfinite(torch.from_numpy(a))).sum()) for a in arrs)
                assert n_bad == (1 if entries == "one" else sum(a.size for a in arrs))
                same = bad(_train_msg(3), _ctx(1)).content["arrays"]  # other round: untouched
                assert all((same[k].numpy() == honest[3].content["arrays"][k].numpy()).all() for k in same)
                other = bad(_train_msg(2), _ctx(0)).content["arrays"]  # other client: untouched
                assert all(torch.isfinite(torch.from_numpy(other[k].numpy())).all() for k in other)
        crash = crashing_client(app, 1, rounds=2)
        with pytest.raises(InjectedCrash, match="injected crash of client 1 in round 2"):
            crash(_train_msg(2), _ctx(1))
        assert not crash(_train_msg(1), _ctx(1)).has_error()
        err = crashing_client(app, 1, mode="error")(_train_msg(5), _ctx(1))
        assert err.has_error() and "client 1 in round 5" in err.error.reason
        valid, failed = split_failed([honest[2], err], "test")
        assert valid == [honest[2]] and failed == [err]


def test_wrapper_argument_errors():
    app = make_client_app(ClientSetup(_model, _partitions(2)))
    with pytest.raises(ValueError, match="value must be NaN or"):
        nonfinite_client(app, 0, value=1.0)
    with pytest.raises(ValueError, match="entries must be one of"):
        nonfinite_client(app, 0, entries="some")
    with pytest.raises(ValueError, match="mode must be one of"):
        crashing_client(app, 0, mode="hang")
    with pytest.raises(ValueError, match="clients must not be empty"):
        crashing_client(app, [])
    with pytest.raises(ValueError, match="clients must hold non-negative ints"):
        crashing_client(app, [-1])
    with pytest.raises(TypeError, match="rounds must be an int or an iterable"):
        crashing_client(app, 0, rounds=2.5)
    with pytest.raises(TypeError, match="app must be a flwr ClientApp"):
        crashing_client(lambda m, c: m, 0)


def test_local_grid_can_still_raise_client_errors_for_debugging():
    setup = ClientSetup(_model, _partitions(3), lr=0.2)
    app = crashing_client(make_client_app(setup), 0)
    strat = make_defence("median", min_train_nodes=3, min_available_nodes=3)
    with local_identity():
        grid = LocalGrid(app, 3, client_errors="raise")
        from neurips26.federated.flower import to_arrayrecord

        msgs = strat.configure_train(1, to_arrayrecord(_init()), ConfigRecord(), grid)
        with pytest.raises(RuntimeError, match="ClientApp failed on node 1000: injected crash"):
            grid.send_and_receive(msgs)
    with pytest.raises(ValueError, match="client_errors must be one of"):
        LocalGrid(app, 3, client_errors="ignore")

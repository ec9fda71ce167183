"""Flower glue shared by the federated methods: records, ClientApps, strategies, grids and runners.

Everything that touches ``flwr`` (verified against flwr 1.42's Message API) lives here, so the
method modules (:mod:`~neurips26.federated.fedrevive`, :mod:`~neurips26.federated.asap`,
:mod:`~neurips26.federated.robust`) stay framework free.

* Records: :func:`to_arrayrecord` / :func:`from_arrayrecord` (``state_dict`` <-> ``ArrayRecord``),
  :func:`flatten_state` / :func:`unflatten_state` (floating entries <-> one ``(d,)`` vector).
* Clients: :func:`make_client_app` builds a Flower ``ClientApp`` whose ``train`` handler runs local
  SGD on its partition (``context.node_config["partition-id"]``) and returns the trained model,
  the sample count and its base version. Clients listed as malicious instead run a colluding
  :class:`~neurips26.federated.asap.Attack`: each malicious node recomputes the honest updates of
  every malicious client with the same per-(round, client) seeds, so all of them craft the same
  update without a shared object (works in one process and across Ray actors); the attack's
  adaptive state lives in ``context.state`` (a ``ConfigRecord``) and persists across rounds.
* Strategies (subclasses of ``flwr.serverapp.strategy.FedAvg``): :class:`RobustFedAvg` applies an
  aggregation rule of :data:`~neurips26.federated.robust.AGGREGATORS` to the clients' updates;
  :class:`AsyncFedAvg` wraps an asynchronous server rule (FedAsync, FedBuff, FedRevive) -- its
  ``aggregate_train`` is the semi-asynchronous adapter (replies may carry older base versions),
  and :class:`GridTransport` drives the same rule truly asynchronously through the Grid's message
  API: ``push_messages`` a job to one node, ``pull_messages`` its reply when the simulated clock of
  :class:`~neurips26.federated.fedrevive.AsyncSimulator` says it has arrived, push the next job to
  that node while the others keep training on older versions.
* Faults (:mod:`~neurips26.federated.faults` injects them): an error reply (a crashed client; a
  raising ``ClientApp`` becomes one on every grid, as on Flower's simulation engine) or a missing
  one is skipped, logged at WARNING level and recorded in the strategy's ``crashed``; a reply holding
  NaN/inf follows the strategy's ``nonfinite`` policy (``"raise"``: ``ValueError`` naming the client;
  ``"drop"``: skipped, logged, recorded in ``dropped``). Errors raised by the server on the
  simulation engine reach the caller of :func:`run_rounds` / :func:`run_async` unchanged.
* Grids and runners: :class:`LocalGrid` is an in-process ``Grid`` that executes the ``ClientApp``
  when a reply is pulled (smoke/quick profiles, tests); :func:`run_rounds` and :func:`run_async`
  run either on :class:`LocalGrid` (``engine="inprocess"``) or on Flower's simulation engine
  (``engine="simulation"``, Ray backend) with the very same strategy and client objects.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Error, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from flwr.supercore.task_identity import TaskIdentity
from torch import Tensor, nn

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.federated.asap import Attack, AttackContext
from neurips26.federated.faults import no_valid_replies, split_failed
from neurips26.federated.fedrevive import (
    AsyncSimulator,
    AsyncStrategy,
    ClientSpeedModel,
    ClientUpdate,
    History,
)
from neurips26.federated.robust import AGGREGATORS, NONFINITE_POLICIES, aggregate, bulyan_select, krum_select

__all__ = [
    "AsyncFedAvg",
    "ClientSetup",
    "GridTransport",
    "LocalGrid",
    "RobustFedAvg",
    "flatten_state",
    "from_arrayrecord",
    "local_identity",
    "local_sgd",
    "make_client_app",
    "malicious_clients",
    "quiet_flower",
    "run_async",
    "run_rounds",
    "to_arrayrecord",
    "unflatten_state",
]

StateDict = dict[str, Tensor]
ENGINES = ("inprocess", "simulation")
CLIENT_ERRORS = ("reply", "raise")

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# records
# --------------------------------------------------------------------------------------------
def to_arrayrecord(state: StateDict) -> ArrayRecord:
    """A model ``state_dict`` as a Flower ``ArrayRecord`` (copied, CPU)."""
    if not isinstance(state, dict) or not state:
        raise ValueError("state must be a non-empty dict name -> tensor")
    return ArrayRecord(OrderedDict((k, v.detach().cpu().clone()) for k, v in state.items()))


def from_arrayrecord(record: ArrayRecord) -> StateDict:
    """An ``ArrayRecord`` back to a ``state_dict`` of tensors."""
    if not isinstance(record, ArrayRecord):
        raise TypeError(f"record must be a flwr ArrayRecord, got {type(record).__name__}")
    return dict(record.to_torch_state_dict())


def _float_keys(state: StateDict) -> list[str]:
    return [k for k, v in state.items() if torch.is_floating_point(v)]


def flatten_state(state: StateDict) -> Tensor:
    """Concatenate the floating-point entries (``state_dict`` order) into a float32 ``(d,)`` vector."""
    return torch.cat([state[k].detach().reshape(-1).float() for k in _float_keys(state)])


def unflatten_state(flat: Tensor, like: StateDict) -> StateDict:
    """Inverse of :func:`flatten_state`; non-float entries are copied from ``like``."""
    out, i = {}, 0
    d = sum(like[k].numel() for k in _float_keys(like))
    if flat.shape != (d,):
        raise ValueError(f"flat must have shape ({d},), got {tuple(flat.shape)}")
    for k, v in like.items():
        if torch.is_floating_point(v):
            out[k] = flat[i : i + v.numel()].reshape(v.shape).to(v.dtype).clone()
            i += v.numel()
        else:
            out[k] = v.clone()
    return out


@contextlib.contextmanager
def local_identity(run_id: int = 0) -> Iterator[None]:
    """Set Flower's process task identity for in-process use (messages need a run and node id)."""
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    if TaskIdentity._run_id is None:
        TaskIdentity.run_id = run_id
    if TaskIdentity._node_id is None:
        TaskIdentity.node_id = 1  # the SuperLink's node id
    if TaskIdentity._task_id is None:
        TaskIdentity.task_id = 0
    try:
        yield
    finally:
        TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


class _DropNotices(logging.Filter):
    """Drops Flower's per-round notices about settings these runs choose on purpose."""

    NOTICES = ("fraction_evaluate is set to 0.0",)  # evaluation is centralised (evaluate_fn) by design

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(self.NOTICES)


@contextlib.contextmanager
def quiet_flower(level: int = logging.WARNING) -> Iterator[None]:
    """Lower Flower's per-round INFO logging for the duration of a run.

    Also drops the per-round "fraction_evaluate is set to 0.0" warning: the strategies here evaluate
    centrally through ``evaluate_fn`` and never ask clients to evaluate, so that notice carries no
    information. Every other warning still shows.
    """
    logger = logging.getLogger("flwr")
    old = logger.level
    notices = _DropNotices()
    logger.setLevel(level)
    logger.addFilter(notices)
    try:
        yield
    finally:
        logger.removeFilter(notices)
        logger.setLevel(old)


# --------------------------------------------------------------------------------------------
# clients
# --------------------------------------------------------------------------------------------
def local_sgd(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    epochs: int = 1,
    lr: float = 0.05,
    batch_size: int = 32,
    seed: int = 0,
) -> float:
    """Plain mini-batch SGD with cross-entropy, in place; returns the mean training loss.

    Shapes: ``x`` ``(n, *input_shape)``, ``y`` ``(n,)`` int64.
    """
    check_int("epochs", epochs, low=0)
    check_float("lr", lr, 0.0, low_open=True)
    check_int("batch_size", batch_size, low=1)
    if x.shape[0] != y.shape[0] or x.shape[0] == 0:
        raise ValueError(
            f"x and y must hold the same positive number of examples, got {x.shape[0]} and {y.shape[0]}"
        )
    gen = torch.Generator().manual_seed(int(seed) % (2**63))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    total, count = 0.0, 0
    for _ in range(epochs):
        perm = torch.randperm(x.shape[0], generator=gen)
        for start in range(0, x.shape[0], batch_size):
            idx = perm[start : start + batch_size]
            if idx.numel() < 2 and any(
                isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()
            ):
                continue
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * idx.numel()
            count += idx.numel()
    return total / max(count, 1)


def malicious_clients(num_clients: int, fraction: float, seed: int = 0) -> tuple[int, ...]:
    """Pick ``round(fraction * n)`` malicious client ids (seeded); ``fraction`` must lie in ``[0, 0.5)``."""
    check_int("num_clients", num_clients, low=1)
    check_float("malicious fraction", fraction, 0.0, 0.5, high_open=True)
    m = int(round(fraction * num_clients))
    return tuple(sorted(int(i) for i in np.random.default_rng(seed).permutation(num_clients)[:m]))


@dataclass
class ClientSetup:
    """Everything a client node needs (pickled into Ray actors on the simulation engine).

    Parameters
    ----------
    model_fn : callable
        ``() -> nn.Module``; identical architecture on every node.
    partitions : list of (Tensor, Tensor)
        ``(x, y)`` of every client; node ``partition-id`` trains on ``partitions[partition-id]``.
    lr, epochs, batch_size : local SGD settings.
    seed : int
        Base seed; a job's seed is derived from (seed, client, round/job).
    malicious : tuple of int
        Malicious partition ids (colluding).
    attack_fn : callable, optional
        ``() -> Attack``; required when ``malicious`` is non-empty.
    holdout : (Tensor, Tensor), optional
        The attackers' held-out data ``D_att`` for ``observe`` (accuracy).
    """

    model_fn: Callable[[], nn.Module]
    partitions: list[tuple[Tensor, Tensor]]
    lr: float = 0.05
    epochs: int = 1
    batch_size: int = 32
    seed: int = 0
    malicious: tuple[int, ...] = ()
    attack_fn: Callable[[], Attack] | None = None
    holdout: tuple[Tensor, Tensor] | None = None
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.partitions:
            raise ValueError("partitions must not be empty (empty client set)")
        n = len(self.partitions)
        for i in self.malicious:
            check_int("malicious id", i, low=0, high=n - 1)
        if len(self.malicious) >= n / 2 and self.malicious:
            raise ValueError(f"malicious fraction must be < 0.5, got {len(self.malicious)}/{n}")
        if self.malicious and self.attack_fn is None:
            raise ValueError("malicious clients need an attack_fn")
        check_float("lr", self.lr, 0.0, low_open=True)
        check_int("epochs", self.epochs, low=0)
        check_int("batch_size", self.batch_size, low=1)

    def job_seed(self, client: int, job: int) -> int:
        return (self.seed * 1_000_003 + client * 10_007 + job * 101) % (2**31)

    def honest_update(self, client: int, state: StateDict, job: int) -> tuple[nn.Module, float]:
        model = self.model_fn()
        model.load_state_dict(state)
        x, y = self.partitions[client]
        loss = local_sgd(model, x, y, self.epochs, self.lr, self.batch_size, self.job_seed(client, job))
        return model, loss


def _accuracy(model: nn.Module, x: Tensor, y: Tensor) -> float:
    model.eval()
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def _attack_state_to_record(state: dict[str, Any]) -> ConfigRecord:
    rec = {}
    for k, v in state.items():
        if isinstance(v, list):
            if v:
                rec[k] = [float(a) for a in v]
        elif isinstance(v, bool):
            rec[k] = v
        else:
            rec[k] = float(v)
    return ConfigRecord(rec)


def _attack_state_from_record(rec: ConfigRecord) -> dict[str, Any]:
    out = dict(rec)
    out.setdefault("theta", [])
    return out


def make_client_app(setup: ClientSetup) -> ClientApp:
    """A Flower ``ClientApp`` running :class:`ClientSetup`'s local training (or its attack).

    Train message content: ``"arrays"`` (``ArrayRecord`` of the global model) and ``"config"``
    (``ConfigRecord`` with ``server-round``, optional ``job`` and ``base-version``). Reply:
    ``"arrays"`` (trained or crafted model) and ``"metrics"`` (``num-examples``, ``client-id``,
    ``base-version``, ``train-loss``, ``malicious``).
    """
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        state = from_arrayrecord(msg.content["arrays"])
        config = msg.content["config"]
        pid = int(context.node_config["partition-id"])
        rnd = int(config.get("server-round", 0))
        job = int(config.get("job", rnd))
        version = int(config.get("base-version", rnd))
        metrics = {
            "client-id": pid,
            "base-version": version,
            "malicious": 0.0,
            "alpha": 0.0,
            "alpha-max": 0.0,
        }
        if pid in setup.malicious:
            new_state, extra = _malicious_train(setup, pid, state, rnd, job, context)
            metrics.update(extra)
            metrics["malicious"] = 1.0
            loss = 0.0
        else:
            model, loss = setup.honest_update(pid, state, job)
            new_state = model.state_dict()
        metrics.update({"num-examples": int(setup.partitions[pid][0].shape[0]), "train-loss": float(loss)})
        content = RecordDict({"arrays": to_arrayrecord(new_state), "metrics": MetricRecord(metrics)})
        return Message(content, reply_to=msg)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        pid = int(context.node_config["partition-id"])
        return Message(RecordDict({"metrics": MetricRecord({"partition-id": pid})}), reply_to=msg)

    return app


def _malicious_train(
    setup: ClientSetup, pid: int, state: StateDict, rnd: int, job: int, context: Context
) -> tuple[StateDict, dict[str, float]]:
    global_flat = flatten_state(state)
    prior = _attack_state_from_record(context.state["attack"]) if "attack" in context.state else None
    # Colluders with identical inputs craft identical updates: memoise within a process (exact).
    key = hashlib.sha256(
        global_flat.numpy().tobytes() + json.dumps([rnd, job, prior], sort_keys=True, default=str).encode()
    ).hexdigest()
    if key not in setup.memo:
        setup.memo.clear()
        setup.memo[key] = _craft(setup, state, global_flat, rnd, job, prior)
    crafted, sd, extra = setup.memo[key]
    if sd:
        context.state["attack"] = _attack_state_to_record(sd)
    u = crafted[setup.malicious.index(pid)]
    return unflatten_state(global_flat + u, state), dict(extra)


def _craft(setup: ClientSetup, state: StateDict, global_flat: Tensor, rnd: int, job: int, prior: Any):
    honest = []
    for j in setup.malicious:
        model, _ = setup.honest_update(j, state, job)
        honest.append(flatten_state(model.state_dict()) - global_flat)
    honest_t = torch.stack(honest)
    attack = setup.attack_fn()
    if prior is not None:
        attack.load_state_dict(prior)

    def observe(params: Tensor) -> float:
        if setup.holdout is None:
            raise ValueError("the attack observes accuracy on D_att: give ClientSetup.holdout")
        model = setup.model_fn()
        model.load_state_dict(unflatten_state(params, state))
        return _accuracy(model, *setup.holdout)

    ctx = AttackContext(rnd, global_flat, honest_t, observe=observe, num_clients=len(setup.partitions))
    crafted = attack.craft(ctx)
    extra = {}
    if getattr(attack, "alphas", None):
        extra = {"alpha": float(attack.alphas[-1]), "alpha-max": float(attack.bounds[-1])}
    return crafted, attack.state_dict(), extra


# --------------------------------------------------------------------------------------------
# strategies
# --------------------------------------------------------------------------------------------
def _sorted_valid(
    strategy: FedAvg, replies: Iterable[Message], who: str
) -> tuple[list[Message], list[Message]]:
    """Replies without error, sorted by ``client-id``, and the failed ones (logged, skipped)."""
    ok, failed = split_failed(list(replies), who)
    valid, _ = strategy._check_and_log_replies(ok, is_train=True)
    if not valid:
        raise no_valid_replies(who, failed)
    valid = sorted(
        valid, key=lambda m: (float(m.content["metrics"].get("client-id", 0)), m.metadata.src_node_id)
    )
    return valid, failed


class RobustFedAvg(FedAvg):
    """``FedAvg`` whose server step applies a robust aggregation rule to the client updates.

    ``w_{t+1} = w_t + server_lr * AGR({w_i - w_t})`` with ``AGR`` one of
    :data:`~neurips26.federated.robust.AGGREGATORS` (``fedavg`` weighs by ``num-examples``).

    Parameters
    ----------
    The robust rules equal Flower's own strategies (``tests/federated/test_robust_flower.py``);
    :func:`~neurips26.federated.flower_defences.make_defence` runs those strategies directly.

    rule : str
        A name of :data:`~neurips26.federated.robust.AGGREGATORS` (``"fedavg"``, ``"median"``,
        ``"trimmed_mean"``, ``"krum"``, ``"multikrum"``/``"multi_krum"``, ``"bulyan"``).
    num_malicious : int
        Byzantine count assumed by Krum-type rules and Bulyan.
    beta : float
        Trim fraction of ``trimmed_mean``.
    server_lr : float
        Server learning rate.
    nonfinite : {"raise", "drop"}
        Policy for client updates holding NaN/inf: ``"raise"`` is a ``ValueError`` naming the
        clients (by ``client-id``); with ``"drop"`` their ids are logged and recorded in ``dropped``.
    **kwargs
        Passed to ``flwr.serverapp.strategy.FedAvg``.

    Error replies (crashed clients) are skipped, logged at WARNING level and their node ids
    recorded per round in ``crashed``.
    """

    def __init__(self, rule: str = "fedavg", num_malicious: int = 0, beta: float = 0.2, server_lr: float = 1.0,
                 nonfinite: str = "raise", **kwargs: Any) -> None:  # fmt: skip
        if rule not in AGGREGATORS:
            raise ValueError(f"unknown aggregation rule {rule!r}; choose one of {sorted(AGGREGATORS)}")
        kwargs.setdefault("fraction_evaluate", 0.0)
        with quiet_flower():  # the default (central evaluation) is deliberate: no notice
            super().__init__(**kwargs)
        self.rule = rule
        self.num_malicious = check_int("num_malicious", num_malicious, low=0)
        self.beta = check_float("beta", beta, 0.0, 0.5, high_open=True)
        self.server_lr = check_float("server_lr", server_lr, 0.0, low_open=True)
        self.nonfinite = check_choice("nonfinite", nonfinite, NONFINITE_POLICIES)
        self._global: StateDict | None = None
        self.selected: list[list[int]] = []
        self.malicious_selected: list[float] = []
        self.dropped: list[list[int]] = []
        self.crashed: list[list[int]] = []

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid):
        self._global = from_arrayrecord(arrays)
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        if self._global is None:
            raise RuntimeError("aggregate_train called before configure_train")
        valid, failed = _sorted_valid(self, replies, f"RobustFedAvg({self.rule})")
        self.crashed.append([int(m.metadata.src_node_id) for m in failed])
        contents = [m.content for m in valid]
        gflat = flatten_state(self._global)
        updates = torch.stack([flatten_state(from_arrayrecord(c["arrays"])) - gflat for c in contents])
        weights = torch.tensor([float(c["metrics"][self.weighted_by_key]) for c in contents])
        ids = [int(c["metrics"].get("client-id", i)) for i, c in enumerate(contents)]
        bad = (~torch.isfinite(updates).all(dim=1)).nonzero().flatten().tolist()
        if bad:
            names = [ids[i] for i in bad]
            if self.nonfinite == "raise":
                raise ValueError(
                    f"RobustFedAvg({self.rule}): replies of clients {names} hold NaN or infinite parameters; "
                    "use nonfinite='drop' to drop such clients instead"
                )
            logger.warning("RobustFedAvg(%s): round %d drops clients %s (NaN or infinite parameters)",
                           self.rule, server_round, names)  # fmt: skip
        agg = aggregate(self.rule, updates, weights, self.num_malicious, self.beta, self.nonfinite)
        mal = [float(c["metrics"].get("malicious", 0.0)) for c in contents]
        self.dropped.append([ids[i] for i in bad])
        if self.rule in ("krum", "multikrum", "multi_krum", "bulyan"):
            k = updates.shape[0] - len(bad)
            if self.rule == "bulyan":
                idx = bulyan_select(updates, self.num_malicious, "krum", self.nonfinite).tolist()
            else:
                multi = 1 if self.rule == "krum" else k - self.num_malicious
                idx = krum_select(updates, self.num_malicious, multi, self.nonfinite).tolist()
            self.selected.append(idx)
            self.malicious_selected.append(sum(mal[i] for i in idx) / len(idx))
        new = unflatten_state(gflat + self.server_lr * agg, self._global)
        metrics = self.train_metrics_aggr_fn(contents, self.weighted_by_key)
        return to_arrayrecord(new), metrics


class AsyncFedAvg(FedAvg):
    """``FedAvg`` carrying an asynchronous server rule (FedAsync, FedBuff, FedRevive, SyncFedAvg).

    Round-based use (``strategy.start``): ``aggregate_train`` feeds every reply, in order of the
    ``sim-time`` metric when present (else client id), to ``rule.on_update`` -- the
    semi-asynchronous adapter, where a reply's ``base-version`` may be older than the server's.
    Asynchronous use: :class:`GridTransport` + :class:`~neurips26.federated.fedrevive.AsyncSimulator`.

    Parameters
    ----------
    rule : AsyncStrategy
    model_fn : callable
        ``() -> nn.Module`` building the global model.
    initial_state : dict, optional
        Starting weights (default: ``model_fn()``'s).
    nonfinite : {"raise", "drop"}
        Policy for a reply holding NaN/inf parameters: ``"raise"`` is a ``ValueError`` naming the
        client; ``"drop"`` skips it (the rule never sees it), logs it at WARNING level and appends
        ``(client_id, base_version)`` to ``dropped``.
    **kwargs
        Passed to ``FedAvg``.

    Error replies (crashed clients) and replies that never arrive (:class:`GridTransport`'s
    timeout) are skipped, logged at WARNING level and recorded in ``crashed``; the rule never sees
    them and the client is free for its next job.
    """

    def __init__(self, rule: AsyncStrategy, model_fn: Callable[[], nn.Module],
                 initial_state: StateDict | None = None, nonfinite: str = "raise",
                 **kwargs: Any) -> None:  # fmt: skip
        if not isinstance(rule, AsyncStrategy):
            raise TypeError(f"rule must be an AsyncStrategy, got {type(rule).__name__}")
        self.nonfinite = check_choice("nonfinite", nonfinite, NONFINITE_POLICIES)
        self.dropped: list[tuple[int, int]] = []
        self.crashed: list[tuple[int | None, str]] = []
        kwargs.setdefault("fraction_evaluate", 0.0)
        with quiet_flower():  # the default (central evaluation) is deliberate: no notice
            super().__init__(**kwargs)
        self.rule = rule
        self.model = model_fn()
        if initial_state is not None:
            self.model.load_state_dict(initial_state)
        self.version = 0
        self.sent: dict[int, StateDict] = {0: {k: v.clone() for k, v in self.model.state_dict().items()}}
        rule.on_version(0, self.model.state_dict())

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid):
        config["base-version"] = self.version
        self.sent[self.version] = from_arrayrecord(arrays)
        return super().configure_train(server_round, arrays, config, grid)

    def train_message(self, node_id: int, state: StateDict, version: int, job: int) -> Message:
        """One asynchronous training job for ``node_id`` (a Flower TRAIN message)."""
        config = ConfigRecord({"server-round": int(version), "job": int(job), "base-version": int(version)})
        content = RecordDict({self.arrayrecord_key: to_arrayrecord(state), self.configrecord_key: config})
        return Message(content=content, message_type=MessageType.TRAIN, dst_node_id=int(node_id))

    def reply_to_update(
        self, reply: Message, base_state: StateDict, client_id: int | None = None
    ) -> ClientUpdate | None:
        """Turn a reply into a :class:`ClientUpdate` (``delta = returned model - base_state``).

        Returns ``None`` for a reply to skip: an error reply (a crashed client; logged, recorded in
        ``crashed``) or, under ``nonfinite="drop"``, one holding NaN/inf (logged, in ``dropped``).
        """
        if reply.has_error():
            who = "AsyncFedAvg" if client_id is None else f"AsyncFedAvg: client {client_id}"
            split_failed([reply], who)
            self.crashed.append((client_id, str(reply.error.reason)))
            return None
        state = from_arrayrecord(reply.content[self.arrayrecord_key])
        metrics = reply.content["metrics"]
        keys = _float_keys(base_state)
        if set(keys) - set(state):
            raise ValueError(f"reply misses parameters {sorted(set(keys) - set(state))}")
        delta = {k: state[k].float() - base_state[k].float() for k in keys}
        cid = int(metrics.get("client-id", 0)) if client_id is None else client_id
        bad = [k for k in keys if not bool(torch.isfinite(delta[k]).all())]
        if bad:
            base = int(metrics["base-version"])
            if self.nonfinite == "raise":
                raise ValueError(
                    f"AsyncFedAvg: the reply of client {cid} (base version {base}) holds NaN or infinite "
                    f"parameters in {bad}; use nonfinite='drop' to drop such clients instead"
                )
            logger.warning("AsyncFedAvg: dropped the update of client %d (base version %d): NaN or infinite "
                           "parameters in %s", cid, base, bad)  # fmt: skip
            self.dropped.append((cid, base))
            return None
        return ClientUpdate(cid, delta, int(metrics["base-version"]), int(metrics[self.weighted_by_key]),
                            {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))})  # fmt: skip

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        valid, failed = _sorted_valid(self, replies, "AsyncFedAvg")
        self.crashed.extend((None, str(m.error.reason)) for m in failed)
        valid.sort(key=lambda m: float(m.content["metrics"].get("sim-time", 0.0)))
        for msg in valid:
            v = int(msg.content["metrics"]["base-version"])
            if v not in self.sent:
                raise ValueError(f"reply claims base-version {v}, which this server never sent")
            update = self.reply_to_update(msg, self.sent[v])
            if update is None:
                continue
            if self.rule.on_update(update, self.model, self.version):
                self.version += 1
                self.rule.on_version(self.version, self.model.state_dict())
        metrics = self.train_metrics_aggr_fn([m.content for m in valid], self.weighted_by_key)
        return to_arrayrecord(self.model.state_dict()), metrics


class GridTransport:
    """Asynchronous transport over a Flower ``Grid``: one pushed message per job, pulled on arrival.

    ``dispatch`` pushes a TRAIN message to the node of client ``c`` immediately (so the node starts
    computing while others still train); ``collect`` pulls that message's reply, polling until it
    is there. A reply that does not come within ``timeout`` seconds, an error reply and (under
    ``nonfinite="drop"``) a non-finite one make ``collect`` return ``None``: the job is skipped
    (logged; :class:`~neurips26.federated.fedrevive.AsyncSimulator` frees the client). Client ``c`` is the node whose ClientApp reports ``partition-id == c`` (asked once
    with a QUERY message), so the simulated clock and the data agree on every engine.
    """

    def __init__(
        self, grid: Grid, strategy: AsyncFedAvg, timeout: float = 600.0, poll: float = 0.005
    ) -> None:
        self.grid = grid
        self.strategy = strategy
        nodes = sorted(int(n) for n in grid.get_node_ids())
        if not nodes:
            raise ValueError("the grid has no nodes (empty client set)")
        self.timeout = check_float("timeout", timeout, 0.0, low_open=True)
        self.poll = poll
        self.node_ids = self._by_partition(nodes)

    def _by_partition(self, nodes: list[int]) -> list[int]:
        """Order nodes by the ``partition-id`` they report (QUERY message); node order otherwise."""
        msgs = [Message(RecordDict({"config": ConfigRecord({})}), message_type=MessageType.QUERY, dst_node_id=n)
                for n in nodes]  # fmt: skip
        found = {}
        for reply in self.grid.send_and_receive(msgs, timeout=self.timeout):
            if not reply.has_error() and "metrics" in reply.content:
                found[int(reply.content["metrics"]["partition-id"])] = int(reply.metadata.src_node_id)
        if sorted(found) != list(range(len(nodes))):
            return nodes
        return [found[i] for i in range(len(nodes))]

    def dispatch(self, client_id: int, state: StateDict, version: int, job: int) -> Any:
        msg = self.strategy.train_message(self.node_ids[client_id], state, version, job)
        (msg_id,) = list(self.grid.push_messages([msg]))
        return msg_id, client_id, {k: v.detach().clone() for k, v in state.items()}

    def collect(self, handle: Any) -> ClientUpdate | None:
        msg_id, client_id, base = handle
        deadline = time.time() + self.timeout
        while True:
            replies = list(self.grid.pull_messages([msg_id]))
            if replies:
                return self.strategy.reply_to_update(replies[0], base, client_id=client_id)
            if time.time() > deadline:
                reason = f"no reply within {self.timeout} s"
                logger.warning("GridTransport: skipped the job of client %d: %s", client_id, reason)
                self.strategy.crashed.append((client_id, reason))
                return None
            time.sleep(self.poll)


# --------------------------------------------------------------------------------------------
# grids and runners
# --------------------------------------------------------------------------------------------
class LocalGrid(Grid):
    """In-process Flower ``Grid``: pushed messages are executed by the ``ClientApp`` when pulled.

    Node ``i`` (``node_id = 1000 + i``) has ``node_config = {"partition-id": i, "num-partitions": n}``
    and a persistent ``Context`` (its ``state`` survives across rounds, as on Flower's engines).

    ``client_errors="reply"`` (default) treats a ``ClientApp`` that raises as Flower's simulation
    engine does: the reply is an error ``Message`` (code ``CLIENT_APP_RAISED_EXCEPTION``, reason
    ``"<class>:<'message'>"``), logged at WARNING level, which the strategies skip;
    ``"raise"`` re-raises it as a ``RuntimeError`` naming the node (for debugging a client).
    """

    def __init__(self, client_app: ClientApp, num_nodes: int, run_id: int = 0,
                 client_errors: str = "reply") -> None:  # fmt: skip
        if check_int("num_nodes", num_nodes, low=0) == 0:
            raise ValueError("num_nodes must be >= 1 (empty client set)")
        self.client_errors = check_choice("client_errors", client_errors, CLIENT_ERRORS)
        self.client_app = client_app
        self.run_id = run_id
        self._nodes = {1000 + i: i for i in range(num_nodes)}
        self._contexts = {
            nid: Context(
                run_id=run_id,
                node_id=nid,
                node_config={"partition-id": i, "num-partitions": num_nodes},
                state=RecordDict(),
                run_config={},
            )  # fmt: skip
            for nid, i in self._nodes.items()
        }
        self._pending: dict[str, Message] = {}
        self._run = None

    def set_run(self, run_id: int) -> None:
        self.run_id = run_id

    @property
    def run(self) -> Any:
        return self._run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:  # fmt: skip
        return Message(
            content=content, message_type=message_type, dst_node_id=dst_node_id, group_id=group_id, ttl=ttl
        )

    def get_node_ids(self) -> Iterable[int]:
        return list(self._nodes)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            if msg.metadata.dst_node_id not in self._nodes:
                raise ValueError(f"unknown destination node {msg.metadata.dst_node_id}")
            mid = uuid.uuid4().hex
            msg.metadata.__dict__["_message_id"] = mid
            self._pending[mid] = msg
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        out = []
        for mid in message_ids:
            msg = self._pending.pop(mid, None)
            if msg is None:
                continue
            ctx = self._contexts[msg.metadata.dst_node_id]
            try:
                reply = self.client_app(msg, ctx)
            except Exception as err:
                if self.client_errors == "raise":
                    raise RuntimeError(f"ClientApp failed on node {msg.metadata.dst_node_id}: {err}") from err
                logger.warning(
                    "LocalGrid: the ClientApp raised on node %d: %r", msg.metadata.dst_node_id, err
                )
                reason = str(type(err)) + ":<'" + str(err) + "'>"  # the simulation engine's format
                reply = Message(
                    Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=msg
                )
            out.append(reply)
        return out

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        return self.pull_messages(list(self.push_messages(messages)))


def _backend_config(num_cpus: int) -> dict[str, Any]:
    return {"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {"num_cpus": num_cpus, "include_dashboard": False, "log_to_driver": False}}  # fmt: skip


def _simulate(
    server_main: Callable[[Grid], None], client_app: ClientApp, num_nodes: int, num_cpus: int
) -> None:
    from flwr.simulation import run_simulation

    server = ServerApp()
    raised: list[BaseException] = []

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        deadline = time.time() + 120
        while len(list(grid.get_node_ids())) < num_nodes and time.time() < deadline:
            time.sleep(0.1)
        try:
            server_main(grid)
        except Exception as err:  # re-raised below: the caller gets the server's own error
            raised.append(err)

    run_simulation(server, client_app, num_supernodes=num_nodes, backend_config=_backend_config(num_cpus))
    if raised:
        raise raised[0]


@dataclass
class RoundsResult:
    """Outcome of :func:`run_rounds`: final weights and the centralised metrics of every round."""

    state: StateDict
    metrics: list[dict[str, float]]


def run_rounds(
    strategy: FedAvg,
    client_app: ClientApp,
    num_nodes: int,
    num_rounds: int,
    initial_state: StateDict,
    evaluate_fn: Callable[[int, StateDict], dict[str, float]] | None = None,
    engine: str = "inprocess",
    num_cpus: int = 2,
) -> RoundsResult:
    """Round-based Flower training with ``strategy.start`` on an in-process or simulated grid.

    Parameters
    ----------
    strategy : FedAvg
        E.g. :class:`RobustFedAvg` (its ``min_*_nodes`` should not exceed ``num_nodes``).
    client_app : ClientApp
    num_nodes : int
    num_rounds : int
    initial_state : dict
    evaluate_fn : callable, optional
        ``(round, state) -> metrics``; called before round 1 and after every round.
    engine : {"inprocess", "simulation"}
    num_cpus : int
        Ray CPUs for the simulation engine.
    """
    check_choice("engine", engine, ENGINES)
    check_int("num_nodes", num_nodes, low=1)
    check_int("num_rounds", num_rounds, low=1)
    rows: list[dict[str, float]] = []
    out: dict[str, Any] = {}

    def eval_cb(rnd: int, arrays: ArrayRecord) -> MetricRecord | None:
        if evaluate_fn is None:
            return None
        m = {k: float(v) for k, v in evaluate_fn(rnd, from_arrayrecord(arrays)).items()}
        rows.append(m)
        return MetricRecord(m)

    def main(grid: Grid) -> None:
        res = strategy.start(grid=grid, initial_arrays=to_arrayrecord(initial_state), num_rounds=num_rounds,
                             evaluate_fn=eval_cb)  # fmt: skip
        out["state"] = from_arrayrecord(res.arrays)

    with quiet_flower():
        if engine == "inprocess":
            with local_identity():
                main(LocalGrid(client_app, num_nodes))
        else:
            _simulate(main, client_app, num_nodes, num_cpus)
    if "state" not in out:
        raise RuntimeError("the Flower run ended without a result (see the Flower log)")
    return RoundsResult(out["state"], rows)


def run_async(
    strategy: AsyncFedAvg,
    client_app: ClientApp,
    speed: ClientSpeedModel,
    eval_fn: Callable[[nn.Module], dict[str, float]],
    max_server_steps: int | None = None,
    time_budget: float = math.inf,
    concurrency: int | None = None,
    seed: int = 0,
    engine: str = "inprocess",
    num_cpus: int = 2,
) -> History:
    """Asynchronous FL through Flower's message API, ordered by the simulated clock.

    The same :class:`~neurips26.federated.fedrevive.AsyncSimulator` drives a
    :class:`GridTransport` over a :class:`LocalGrid` or over the simulation engine's grid; the
    server rule is ``strategy.rule`` acting on ``strategy.model``.
    """
    check_choice("engine", engine, ENGINES)
    out: dict[str, History] = {}
    num_nodes = speed.num_clients

    def main(grid: Grid) -> None:
        sim = AsyncSimulator(GridTransport(grid, strategy), speed, concurrency=concurrency, seed=seed)
        out["history"] = sim.run(strategy.rule, strategy.model, eval_fn, time_budget, max_server_steps)

    with quiet_flower():
        if engine == "inprocess":
            with local_identity():
                main(LocalGrid(client_app, num_nodes))
        else:
            _simulate(main, client_app, num_nodes, num_cpus)
    if "history" not in out:
        raise RuntimeError("the Flower run ended without a result (see the Flower log)")
    return out["history"]

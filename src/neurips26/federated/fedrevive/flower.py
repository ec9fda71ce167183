r"""FedRevive's Flower wiring: the asynchronous server rules of this package on Flower's message API.

:class:`AsyncFedAvg` wraps an :class:`~neurips26.federated.fedrevive.AsyncStrategy` (FedAsync, FedBuff,
FedRevive) as a ``flwr`` strategy -- its ``aggregate_train`` is the semi-asynchronous adapter (replies
may carry older base versions) -- and :class:`GridTransport` drives the same rule truly asynchronously
through the Grid's message API (``push_messages`` one job, ``pull_messages`` its reply when the
simulated clock of :class:`~neurips26.federated.fedrevive.AsyncSimulator` says it has arrived).
:func:`run_async` runs it on the in-process grid or on Flower's simulation engine. The shared Flower
glue (records, ClientApps, grids) is :mod:`neurips26.federated.flower`; the package's ``__init__`` does
not import this module, so ``import neurips26.federated.fedrevive`` stays Flower free.

Shapes
------
- Models are classifiers: inputs ``[B, *input_shape]`` -> logits ``[B, num_classes]``; client replies
  carry ``state_dict`` deltas shaped like the global model's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg
from torch import nn

from neurips26.common.checks import check_choice, check_float
from neurips26.federated.faults import split_failed
from neurips26.federated.fedrevive.simulate import AsyncSimulator, History
from neurips26.federated.fedrevive.strategies import AsyncStrategy
from neurips26.federated.fedrevive.updates import ClientSpeedModel, ClientUpdate
from neurips26.federated.flower.grid import ENGINES, run_on_engine
from neurips26.federated.flower.records import (
    StateDict,
    _float_keys,
    from_arrayrecord,
    logger,
    quiet_flower,
    to_arrayrecord,
)
from neurips26.federated.flower.robust import _sorted_valid
from neurips26.federated.robust import NONFINITE_POLICIES

__all__ = ["AsyncFedAvg", "GridTransport", "run_async"]


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

    run_on_engine(main, client_app, num_nodes, engine, num_cpus)
    if "history" not in out:
        raise RuntimeError("the Flower run ended without a result (see the Flower log)")
    return out["history"]

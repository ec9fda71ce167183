"""The Flower ``ClientApp``: local SGD for honest clients, colluding ASAP attacks for malicious ones."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch import Tensor, nn

from neurips26.common.checks import check_float, check_int
from neurips26.federated.asap import Attack, AttackContext
from neurips26.federated.flower.records import (
    StateDict,
    flatten_state,
    from_arrayrecord,
    to_arrayrecord,
    unflatten_state,
)

CLIENT_ERRORS = ("reply", "raise")


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

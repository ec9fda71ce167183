"""The simulated-clock asynchronous runner, its transports and the run history."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from torch import nn

from neurips26.common.checks import check_int
from neurips26.federated.fedrevive.strategies import AsyncStrategy
from neurips26.federated.fedrevive.updates import ClientSpeedModel, ClientUpdate, StateDict, _clone_state


# simulated-clock asynchronous runner
# --------------------------------------------------------------------------------------------
class Transport(Protocol):
    """How the runner reaches clients: in-process (:class:`LocalTransport`) or Flower messages."""

    def dispatch(self, client_id: int, state: StateDict, version: int, job: int) -> Any: ...

    def collect(self, handle: Any) -> ClientUpdate | None: ...


class LocalTransport:
    """In-process transport: ``train_fn(client_id, state, version, job) -> ClientUpdate`` runs at collect."""

    def __init__(self, train_fn: Callable[[int, StateDict, int, int], ClientUpdate]) -> None:
        self.train_fn = train_fn

    def dispatch(self, client_id: int, state: StateDict, version: int, job: int) -> Any:
        return (client_id, _clone_state(state), version, job)

    def collect(self, handle: Any) -> ClientUpdate:
        return self.train_fn(*handle)


@dataclass
class History:
    """Records of one asynchronous run.

    ``evals``: ``(time, version, metrics)`` after every server step (and at time 0);
    ``arrivals``: ``(time, client_id, staleness, base_version)`` of every processed update;
    ``failed``: ``(time, client_id)`` of every job the transport skipped (a crashed client, a
    missing or a dropped non-finite reply).
    """

    evals: list[tuple[float, int, dict[str, float]]] = field(default_factory=list)
    arrivals: list[tuple[float, int, int, int]] = field(default_factory=list)
    failed: list[tuple[float, int]] = field(default_factory=list)

    def series(self, key: str) -> tuple[list[float], list[float]]:
        return [t for t, _, _ in self.evals], [m[key] for _, _, m in self.evals]

    @property
    def staleness(self) -> list[int]:
        return [s for _, _, s, _ in self.arrivals]


def time_to_target(times: Sequence[float], values: Sequence[float], target: float) -> float:
    """First time with ``value >= target`` (``inf`` if never)."""
    for t, v in zip(times, values):
        if v >= target:
            return float(t)
    return math.inf


class AsyncSimulator:
    """Event-queue replay of asynchronous FL on a simulated clock.

    Each dispatched job gets a completion time ``now + duration`` from :class:`ClientSpeedModel`;
    jobs are collected in completion order, so the order (hence staleness) is set by the simulated
    clock whatever the transport's real timing. With ``concurrency < num_clients`` a finished
    client's slot goes to a uniformly drawn idle client. A synchronous strategy re-dispatches only
    after a server step.

    A job whose ``transport.collect`` returns ``None`` (a crashed client, a reply that never came,
    a dropped non-finite update) is skipped: the strategy never sees it, the client becomes idle
    and the free slot is refilled as after any arrival; it is recorded in ``History.failed``. A
    synchronous strategy cannot complete its round without the client (``ValueError``), nor can
    any run once every client has failed since the last update that arrived.

    Parameters
    ----------
    transport : Transport
    speed : ClientSpeedModel
    concurrency : int, optional
        Clients training at once (default all).
    seed : int
    """

    def __init__(self, transport: Transport, speed: ClientSpeedModel, concurrency: int | None = None,
                 seed: int = 0) -> None:  # fmt: skip
        self.transport = transport
        self.speed = speed
        n = speed.num_clients
        self.concurrency = n if concurrency is None else check_int("concurrency", concurrency, low=1, high=n)
        self.rng = np.random.default_rng(seed)

    def run(
        self,
        strategy: AsyncStrategy,
        model: nn.Module,
        eval_fn: Callable[[nn.Module], dict[str, float]],
        time_budget: float = math.inf,
        max_server_steps: int | None = None,
    ) -> History:
        """Run until ``time_budget`` simulated time or ``max_server_steps`` server steps."""
        if math.isinf(time_budget) and max_server_steps is None:
            raise ValueError("give a finite time_budget or max_server_steps")
        n = self.speed.num_clients
        hist = History()
        version, now, job = 0, 0.0, 0
        strategy.on_version(version, model.state_dict())
        hist.evals.append((0.0, 0, eval_fn(model)))
        queue: list[tuple[float, int, int, Any]] = []
        idle = list(range(n))
        failing: set[int] = set()  # clients that failed since the last update that arrived

        def dispatch(c: int) -> None:
            nonlocal job
            idle.remove(c)
            handle = self.transport.dispatch(c, model.state_dict(), version, job)
            heapq.heappush(queue, (now + self.speed.sample_duration(c), job, c, handle))
            job += 1

        def fill() -> None:
            while idle and len(queue) < self.concurrency:
                dispatch(int(idle[int(self.rng.integers(len(idle)))]) if self.concurrency < n else idle[0])

        fill()
        while queue:
            finish, _, c, handle = heapq.heappop(queue)
            if finish > time_budget:
                break
            now = finish
            update = self.transport.collect(handle)
            if update is None:
                hist.failed.append((now, c))
                idle.append(c)
                failing.add(c)
                if strategy.synchronous:
                    raise ValueError(f"client {c} failed; a synchronous strategy cannot complete the round")
                if len(failing) == n:
                    raise ValueError(
                        f"every one of the {n} clients failed since the last update that arrived"
                    )
                fill()
                continue
            failing.clear()
            if update.client_id != c:
                raise ValueError(f"transport returned client {update.client_id} for a job of client {c}")
            hist.arrivals.append((now, c, version - update.base_version, update.base_version))
            idle.append(c)
            changed = strategy.on_update(update, model, version)
            if changed:
                version += 1
                strategy.on_version(version, model.state_dict())
                hist.evals.append((now, version, eval_fn(model)))
                if max_server_steps is not None and version >= max_server_steps:
                    break
            if not strategy.synchronous or (changed and not queue):
                fill()
        return hist

"""The round-based runner on either engine."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flwr.app import ArrayRecord, MetricRecord
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from neurips26.common.checks import check_choice, check_int
from neurips26.federated.flower.grid import ENGINES, run_on_engine
from neurips26.federated.flower.records import (
    StateDict,
    from_arrayrecord,
    to_arrayrecord,
)


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

    run_on_engine(main, client_app, num_nodes, engine, num_cpus)
    if "state" not in out:
        raise RuntimeError("the Flower run ended without a result (see the Flower log)")
    return RoundsResult(out["state"], rows)

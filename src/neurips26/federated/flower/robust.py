"""Robust aggregation as a Flower strategy (:class:`RobustFedAvg`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.federated.faults import no_valid_replies, split_failed
from neurips26.federated.flower.records import (
    StateDict,
    flatten_state,
    from_arrayrecord,
    logger,
    quiet_flower,
    to_arrayrecord,
    unflatten_state,
)
from neurips26.federated.robust import AGGREGATORS, NONFINITE_POLICIES, aggregate, bulyan_select, krum_select


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

"""Flower's own Byzantine-robust strategies, chosen by name, with the checks and records attacks need.

The defences an attack is evaluated against are the ones Flower users deploy: the Message-API
strategies of ``flwr.serverapp.strategy`` (flwr 1.42). :func:`make_defence` builds one by name

================  ===========================================  ==============================================
name              Flower strategy                              paper
================  ===========================================  ==============================================
``fedavg``        ``FedAvg`` (mean weighted by num-examples)   McMahan et al., 2017
``krum``          ``Krum``                                     Blanchard et al., 2017
``multikrum``     ``MultiKrum`` (``n - f`` selected)           Blanchard et al., 2017
``median``        ``FedMedian``                                Yin et al., 2018 (coordinate-wise median)
``trimmed_mean``  ``FedTrimmedAvg`` (``beta``)                 Yin et al., 2018 (coordinate-wise trimmed mean)
``bulyan``        ``Bulyan``                                   El Mhamdi et al., 2018
================  ===========================================  ==============================================

and subclasses it with a thin layer that leaves Flower's aggregation untouched and adds only:

* clear errors where Flower is silent: an empty round, an unknown name, ``n <= 2f + 2`` for
  Krum/Multi-Krum (Flower then clamps the neighbour count to 1), ``n < 4f + 3`` for Bulyan (Flower
  skips the round with a warning and keeps the old model);
* the non-finite policy of :mod:`~neurips26.federated.robust` (``"raise"`` by default; ``"drop"``
  removes the replies holding NaN/inf before Flower sees them, logs and counts them in
  :attr:`dropped`);
* crashed clients (error replies, as Flower's engines turn a raising ``ClientApp`` into) are
  skipped, logged at WARNING level and recorded per round in :attr:`crashed` (Flower itself only
  logs them at INFO); a round in which every reply failed is a ``ValueError`` naming the reasons;
* a deterministic reply order (by the ``client-id`` metric, then node id), so float sums do not
  depend on the order in which replies arrive;
* the record of which clients Krum, Multi-Krum and Bulyan selected (:attr:`selected`,
  :attr:`malicious_selected`), computed with Flower's own ``select_multikrum`` on the same replies.

How Flower's rules differ from their papers is documented (and tested) in
:mod:`~neurips26.federated.robust`, whose tensor functions equal these strategies on the same
updates. Flower aggregates client *models* ``w_i = w_t + u_i``; with a unit server learning rate
this is the same as aggregating the updates ``u_i``.

The strategies run on any Flower grid: the in-process :class:`~neurips26.federated.flower.LocalGrid`
or the simulation engine (Ray), through :func:`~neurips26.federated.flower.run_rounds`.

Shapes
------
Replies carry an ``ArrayRecord`` of the model (``d`` parameters in all) and a ``MetricRecord`` with
``num-examples``, ``client-id`` and ``malicious`` (0/1).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import types
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord
from flwr.app.message import arrayrecord as _flwr_arrayrecord
from flwr.serverapp.strategy import Bulyan, FedAvg, FedMedian, FedTrimmedAvg, Krum, MultiKrum
from flwr.serverapp.strategy.multikrum import select_multikrum

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.federated.faults import no_valid_replies, split_failed
from neurips26.federated.robust import NONFINITE_POLICIES

__all__ = ["DEFENCES", "FLOWER_STRATEGIES", "DefenceMixin", "make_defence", "max_tolerated"]

logger = logging.getLogger(__name__)

FLOWER_STRATEGIES: dict[str, type[FedAvg]] = {
    "fedavg": FedAvg,
    "krum": Krum,
    "multikrum": MultiKrum,
    "median": FedMedian,
    "trimmed_mean": FedTrimmedAvg,
    "bulyan": Bulyan,
}
"""Defence name -> the ``flwr.serverapp.strategy`` class it runs."""

DEFENCES = tuple(FLOWER_STRATEGIES)


def max_tolerated(rule: str, num_clients: int) -> int | None:
    """Largest Byzantine count ``f`` the rule's assumption allows for ``n`` clients (``None``: no bound).

    Krum/Multi-Krum: ``n > 2f + 2``; Bulyan: ``n >= 4f + 3``; the others have no count parameter.
    """
    check_choice("rule", rule, DEFENCES)
    n = check_int("num_clients", num_clients, low=1)
    if rule in ("krum", "multikrum"):
        return max((n - 3) // 2, -1) if n >= 3 else -1
    if rule == "bulyan":
        return (n - 3) // 4 if n >= 3 else -1
    return None


def _client_key(msg: Message) -> tuple[float, int]:
    metrics = msg.content.metric_records
    first = next(iter(metrics.values()), {}) if metrics else {}
    return float(first.get("client-id", 0)), int(msg.metadata.src_node_id)


def _metric(content: Any, key: str, default: float) -> float:
    for rec in content.metric_records.values():
        if key in rec:
            return float(rec[key])
    return default


def _finite(content: Any) -> bool:
    for rec in content.array_records.values():
        for arr in rec.values():
            if not np.isfinite(arr.numpy()).all():
                return False
    return True


class DefenceMixin:
    """The layer :func:`make_defence` puts on a Flower strategy (see the module docstring).

    Attributes
    ----------
    rule : str
        Defence name.
    num_malicious : int
        Assumed Byzantine count ``f`` (Krum, Multi-Krum, Bulyan).
    nonfinite : {"raise", "drop"}
    selected : list of list of int
        Per round, the ``client-id`` of every selected reply (Krum-type rules).
    malicious_selected : list of float
        Per round, the fraction of selected replies that carried ``malicious = 1``.
    dropped : list of list of int
        Per round, the ``client-id`` of replies dropped for non-finite parameters.
    crashed : list of list of int
        Per round, the node id of every error reply (a client that crashed); such replies are
        skipped and logged at WARNING level (:func:`~neurips26.federated.faults.split_failed`),
        never fatal while one valid reply is left.
    """

    rule: str
    num_malicious: int
    nonfinite: str
    auto_select: bool
    selected: list[list[int]]
    malicious_selected: list[float]
    dropped: list[list[int]]
    crashed: list[list[int]]

    def _init_defence(self, rule: str, num_malicious: int, nonfinite: str, auto_select: bool) -> None:
        self.rule = rule
        self.num_malicious = num_malicious
        self.nonfinite = nonfinite
        self.auto_select = auto_select
        self.selected, self.malicious_selected, self.dropped, self.crashed = [], [], [], []

    def _screen(self, replies: Iterable[Message]) -> list[Message]:
        valid, failed = split_failed(replies, self.rule)
        self.crashed.append([int(m.metadata.src_node_id) for m in failed])
        if not valid:
            if failed:
                raise no_valid_replies(self.rule, failed)
            raise ValueError(f"{self.rule}: no valid client replies to aggregate (empty round)")
        valid.sort(key=_client_key)
        finite = [_finite(m.content) for m in valid]
        if not all(finite):
            bad = [int(_client_key(m)[0]) for m, ok in zip(valid, finite) if not ok]
            if self.nonfinite == "raise":
                raise ValueError(
                    f"{self.rule}: replies of clients {bad} hold NaN or infinite parameters; use "
                    "nonfinite='drop' to drop such clients instead"
                )
            valid = [m for m, ok in zip(valid, finite) if ok]
            if not valid:
                raise ValueError(f"{self.rule}: every client reply holds NaN or infinite parameters")
            logger.warning(
                "%s: dropped %d of %d client replies holding NaN or infinite parameters (clients %s)",
                self.rule, len(bad), len(bad) + len(valid), bad,
            )  # fmt: skip
            self.dropped.append(bad)
        else:
            self.dropped.append([])
        return valid

    def _check_count(self, n: int) -> None:
        f = self.num_malicious
        if self.rule in ("krum", "multikrum") and n <= 2 * f + 2:
            raise ValueError(
                f"{self.rule} needs n > 2 * num_malicious + 2 replies, got n={n}, num_malicious={f}"
            )
        if self.rule == "bulyan" and n < 4 * f + 3:
            raise ValueError(f"bulyan needs n >= 4 * num_malicious + 3 replies, got n={n}, num_malicious={f}")

    def _record_selection(self, valid: list[Message]) -> None:
        if self.rule not in ("krum", "multikrum", "bulyan"):
            return
        contents = [m.content for m in valid]
        n, f = len(contents), self.num_malicious
        if self.rule == "multikrum" and self.auto_select:
            self.num_nodes_to_select = n - f  # Blanchard et al.'s m = n - f
        count = {"krum": 1, "multikrum": getattr(self, "num_nodes_to_select", 1), "bulyan": n - 2 * f}[
            self.rule
        ]
        chosen = select_multikrum(contents, f, count)
        ids = [int(_metric(c, "client-id", -1)) for c in chosen]
        self.selected.append(ids)
        self.malicious_selected.append(float(np.mean([_metric(c, "malicious", 0.0) for c in chosen])))

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        valid = self._screen(replies)
        self._check_count(len(valid))
        self._record_selection(valid)
        with _young_generation_gc():
            arrays, metrics = super().aggregate_train(server_round, valid)  # type: ignore[misc]
        if arrays is None:
            raise RuntimeError(
                f"{self.rule}: Flower's strategy returned no aggregate for {len(valid)} replies"
            )
        return arrays, metrics


@contextlib.contextmanager
def _young_generation_gc() -> Iterator[None]:
    """Make Flower's forced ``gc.collect()`` in ``ArrayRecord.to_numpy_ndarrays(keep_input=False)`` cheap.

    Flower's ``Bulyan`` unpacks every reply with ``keep_input=False``, and that path runs a full
    ``gc.collect()`` per reply to free serialised buffers early. In a process that holds torch, Ray and
    Flower, a full collection takes about 0.1 s, so 20 replies cost about 2.4 s a round: 50x the round
    itself for a 650-parameter model. Within the aggregation call only, the collection is limited to the
    youngest generation (``gc.collect(0)``), which still frees the buffers just dropped. The aggregate is
    unchanged: garbage collection never alters values.
    """
    shim = types.SimpleNamespace(**{k: getattr(gc, k) for k in dir(gc) if not k.startswith("__")})
    shim.collect = lambda generation=0: gc.collect(0)
    original = _flwr_arrayrecord.gc
    _flwr_arrayrecord.gc = shim
    try:
        yield
    finally:
        _flwr_arrayrecord.gc = original


_CLASSES: dict[str, type] = {}


def _defence_class(rule: str) -> type:
    if rule not in _CLASSES:
        base = FLOWER_STRATEGIES[rule]
        _CLASSES[rule] = type(f"Defended{base.__name__}", (DefenceMixin, base), {"__module__": __name__})
    return _CLASSES[rule]


def make_defence(
    rule: str,
    num_malicious: int = 0,
    beta: float = 0.2,
    nonfinite: str = "raise",
    num_to_select: int | None = None,
    **kwargs: Any,
) -> FedAvg:
    """Flower's robust strategy named ``rule``, wrapped by :class:`DefenceMixin`.

    Parameters
    ----------
    rule : {"fedavg", "krum", "multikrum", "median", "trimmed_mean", "bulyan"}
    num_malicious : int
        Assumed Byzantine count ``f`` (Flower's ``num_malicious_nodes``) of Krum, Multi-Krum and
        Bulyan; must be 0 for the other rules' purposes (ignored there).
    beta : float
        ``FedTrimmedAvg``'s trim fraction in ``[0, 0.5)``.
    nonfinite : {"raise", "drop"}
        Policy for replies holding NaN/inf parameters.
    num_to_select : int, optional
        Multi-Krum's ``m``; default ``n - f`` of each round.
    **kwargs
        Passed to the Flower strategy (``min_train_nodes``, ``min_available_nodes``, ...);
        ``fraction_evaluate`` defaults to 0 (evaluation is centralised).

    Returns
    -------
    flwr.serverapp.strategy.FedAvg
        An instance of a subclass of the named Flower strategy.
    """
    if not isinstance(rule, str) or rule not in FLOWER_STRATEGIES:
        raise ValueError(f"unknown aggregation rule {rule!r}; choose one of {list(DEFENCES)}")
    check_int("num_malicious", num_malicious, low=0)
    check_float("beta", beta, 0.0, 0.5, high_open=True)
    check_choice("nonfinite", nonfinite, NONFINITE_POLICIES)
    if num_to_select is not None:
        check_int("num_to_select", num_to_select, low=1)
    kwargs.setdefault("fraction_evaluate", 0.0)
    if rule in ("krum", "multikrum", "bulyan"):
        kwargs["num_malicious_nodes"] = num_malicious
    if rule == "multikrum":
        kwargs["num_nodes_to_select"] = num_to_select or 1
    if rule == "trimmed_mean":
        kwargs["beta"] = beta
    from neurips26.federated.flower import quiet_flower

    with quiet_flower():  # central evaluation is deliberate: no notice about fraction_evaluate
        strategy = _defence_class(rule)(**kwargs)
    strategy._init_defence(rule, num_malicious, nonfinite, auto_select=num_to_select is None)
    return strategy

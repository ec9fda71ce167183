r"""Flower glue shared by the federated methods: records, ClientApps, strategies, grids and runners.

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
  aggregation rule of :data:`~neurips26.federated.robust.AGGREGATORS` to the clients' updates. The
  asynchronous server rules have their Flower wiring next to them, in
  :mod:`neurips26.federated.fedrevive.flower`: ``AsyncFedAvg`` (the semi-asynchronous strategy
  adapter), ``GridTransport`` (truly asynchronous jobs through the Grid's message API) and
  ``run_async``. Their old names here still resolve, with a ``DeprecationWarning``.
* Faults (:mod:`~neurips26.federated.faults` injects them): an error reply (a crashed client; a
  raising ``ClientApp`` becomes one on every grid, as on Flower's simulation engine) or a missing
  one is skipped, logged at WARNING level and recorded in the strategy's ``crashed``; a reply holding
  NaN/inf follows the strategy's ``nonfinite`` policy (``"raise"``: ``ValueError`` naming the client;
  ``"drop"``: skipped, logged, recorded in ``dropped``). Errors raised by the server on the
  simulation engine reach the caller of :func:`run_rounds` /
  :func:`~neurips26.federated.fedrevive.flower.run_async` unchanged.
* Grids and runners: :class:`LocalGrid` is an in-process ``Grid`` that executes the ``ClientApp``
  when a reply is pulled (smoke/quick profiles, tests); :func:`run_rounds` and
  :func:`~neurips26.federated.fedrevive.flower.run_async`
  run either on :class:`LocalGrid` (``engine="inprocess"``) or on Flower's simulation engine
  (``engine="simulation"``, Ray backend) with the very same strategy and client objects.

Shapes
------
- :func:`flatten_state`: the floating-point entries of a ``state_dict`` -> one float32 ``(d,)`` vector;
  :func:`unflatten_state` inverts it given a template ``state_dict``.
- :func:`to_arrayrecord` / :func:`from_arrayrecord`: a ``state_dict`` <-> an ``ArrayRecord`` (copied
  to CPU, same keys and shapes).

Modules
-------
- :mod:`.records`: :func:`to_arrayrecord`, :func:`from_arrayrecord`, :func:`flatten_state`,
  :func:`unflatten_state`, :func:`local_identity`, :func:`quiet_flower`.
- :mod:`.client`: :func:`local_sgd`, :func:`malicious_clients`, :class:`ClientSetup`,
  :func:`make_client_app`.
- :mod:`.robust`: :class:`RobustFedAvg`.
- :mod:`.grid`: :class:`LocalGrid` and the simulation-engine launcher.
- :mod:`.runners`: :func:`run_rounds`; :func:`run_on_engine` (in :mod:`.grid`) runs any server main on either engine.
"""

from neurips26.federated.flower.client import ClientSetup, local_sgd, make_client_app, malicious_clients
from neurips26.federated.flower.grid import LocalGrid, run_on_engine
from neurips26.federated.flower.records import (
    flatten_state,
    from_arrayrecord,
    local_identity,
    quiet_flower,
    to_arrayrecord,
    unflatten_state,
)
from neurips26.federated.flower.robust import RobustFedAvg
from neurips26.federated.flower.runners import run_rounds

__all__ = [
    "ClientSetup",
    "LocalGrid",
    "run_on_engine",
    "RobustFedAvg",
    "flatten_state",
    "from_arrayrecord",
    "local_identity",
    "local_sgd",
    "make_client_app",
    "malicious_clients",
    "quiet_flower",
    "run_rounds",
    "to_arrayrecord",
    "unflatten_state",
]

_MOVED = {
    name: "neurips26.federated.fedrevive.flower" for name in ("AsyncFedAvg", "GridTransport", "run_async")
}


def __getattr__(name: str):
    """Old import path of the asynchronous wiring (moved next to its strategies); warns once per use."""
    if name in _MOVED:
        import importlib
        import warnings

        warnings.warn(
            f"neurips26.federated.flower.{name} moved to {_MOVED[name]}.{name}; the old path goes in a later release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

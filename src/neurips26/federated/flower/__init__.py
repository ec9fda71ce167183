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
- :mod:`.asynchronous`: :class:`AsyncFedAvg`, :class:`GridTransport`.
- :mod:`.grid`: :class:`LocalGrid` and the simulation-engine launcher.
- :mod:`.runners`: :func:`run_rounds`, :func:`run_async`.
"""

from neurips26.federated.flower.asynchronous import AsyncFedAvg, GridTransport
from neurips26.federated.flower.client import ClientSetup, local_sgd, make_client_app, malicious_clients
from neurips26.federated.flower.grid import LocalGrid
from neurips26.federated.flower.records import (
    flatten_state,
    from_arrayrecord,
    local_identity,
    quiet_flower,
    to_arrayrecord,
    unflatten_state,
)
from neurips26.federated.flower.robust import RobustFedAvg
from neurips26.federated.flower.runners import run_async, run_rounds

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

"""The in-process Flower ``Grid`` and the simulation-engine (Ray) launcher."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid, ServerApp

from neurips26.common.checks import check_choice, check_int
from neurips26.federated.flower.client import CLIENT_ERRORS
from neurips26.federated.flower.records import local_identity, logger, quiet_flower

ENGINES = ("inprocess", "simulation")


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


def run_on_engine(
    server_main: Callable[[Grid], None], client_app: ClientApp, num_nodes: int, engine: str, num_cpus: int = 2
) -> None:
    """Run ``server_main(grid)`` against ``num_nodes`` copies of ``client_app`` on the chosen engine.

    ``"inprocess"``: a :class:`LocalGrid` in this process (deterministic, no Ray); ``"simulation"``: Flower's
    simulation engine (Ray actors, ``num_cpus`` CPUs). Flower's INFO logging is silenced either way.
    """
    check_choice("engine", engine, ENGINES)
    with quiet_flower():
        if engine == "inprocess":
            with local_identity():
                server_main(LocalGrid(client_app, num_nodes))
        else:
            _simulate(server_main, client_app, num_nodes, num_cpus)

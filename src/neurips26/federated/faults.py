r"""Fault-injecting Flower ``ClientApp`` wrappers: Byzantine non-finite updates and crashing clients.

A federation under attack or under ordinary failures sees two kinds of bad replies that the
robust rules of :mod:`~neurips26.federated.robust` and the strategies of
:mod:`~neurips26.federated.flower_defences` / :mod:`~neurips26.federated.flower` must survive:

* **non-finite updates** -- a (Byzantine or broken) client returns a model holding NaN or
  :math:`\pm\infty`; one such entry poisons a mean, a median or a Krum score. The server's policy
  ``nonfinite="raise"`` (default) stops with a :class:`ValueError` naming the client(s);
  ``nonfinite="drop"`` removes them before aggregation, logs and records them.
* **crashes** -- a client fails mid-round. On Flower's simulation engine a ``ClientApp`` that
  raises becomes an *error reply* (``Message`` with an ``Error`` of code
  ``CLIENT_APP_RAISED_EXCEPTION``); a node may also answer with an error itself or not answer at
  all. The servers here skip such replies, log them at WARNING level and record them (never fatal
  unless no client is left).

Both wrappers take any ``ClientApp`` (e.g. :func:`~neurips26.federated.flower.make_client_app`)
and return a new one that behaves identically except on the chosen clients (by
``node_config["partition-id"]``) in the chosen rounds (the ``server-round`` entry of the train
message's config; for asynchronous jobs that is the job's base version). They are plain closures,
so they pickle into Ray actors and run on the in-process ``LocalGrid`` and on the simulation engine
alike.

.. math::

    \tilde w_i^{(t)} =
    \begin{cases} w_i^{(t)} \text{ with entries set to } v \in \{\mathrm{NaN}, \pm\infty\}
                  & i \in F,\ t \in R \\
                  w_i^{(t)} & \text{otherwise} \end{cases}

Shapes
------
Replies keep the wrapped app's ``ArrayRecord`` (same names and shapes); a non-finite fault changes
only values (``entries="one"``: the first element of the first floating array; ``"all"``: every
element of every floating array).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode

from neurips26.common.checks import check_choice

__all__ = [
    "CRASH_MODES",
    "NONFINITE_ENTRIES",
    "InjectedCrash",
    "crashing_client",
    "describe_failure",
    "no_valid_replies",
    "nonfinite_client",
    "split_failed",
]

logger = logging.getLogger(__name__)

CRASH_MODES = ("raise", "error")
NONFINITE_ENTRIES = ("one", "all")


class InjectedCrash(RuntimeError):
    """The exception a :func:`crashing_client` raises (``mode="raise"``)."""


def _ids(name: str, values: Iterable[int] | int | None, allow_none: bool) -> frozenset[int] | None:
    if values is None:
        if allow_none:
            return None
        raise ValueError(f"{name} must be given (an int or an iterable of ints)")
    if isinstance(values, (int, np.integer)) and not isinstance(values, bool):
        values = [int(values)]
    try:
        out = [v for v in values]  # type: ignore[union-attr]
    except TypeError:
        raise TypeError(
            f"{name} must be an int or an iterable of ints, got {type(values).__name__}"
        ) from None
    for v in out:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < 0:
            raise ValueError(f"{name} must hold non-negative ints, got {v!r}")
    if not out:
        raise ValueError(f"{name} must not be empty (no client/round would be faulty)")
    return frozenset(int(v) for v in out)


def _check_app(app: ClientApp) -> ClientApp:
    if not isinstance(app, ClientApp):
        raise TypeError(f"app must be a flwr ClientApp, got {type(app).__name__}")
    return app


def _fires(msg: Message, context: Context, clients: frozenset[int], rounds: frozenset[int] | None):
    pid = int(context.node_config["partition-id"])
    config = msg.content.config_records
    cfg = next(iter(config.values()), {}) if config else {}
    rnd = int(cfg.get("server-round", 0))
    return pid in clients and (rounds is None or rnd in rounds), pid, rnd


def _poison(record: ArrayRecord, value: float, entries: str) -> ArrayRecord:
    out = ArrayRecord()
    first = True
    for name, arr in record.items():
        x = arr.numpy().copy()
        if np.issubdtype(x.dtype, np.floating) and x.size and (entries == "all" or first):
            if entries == "all":
                x[...] = value
            else:
                x.reshape(-1)[0] = value
            first = False
        out[name] = Array(x)
    if first:
        raise ValueError("the reply holds no floating-point array to make non-finite")
    return out


def nonfinite_client(
    app: ClientApp,
    clients: Iterable[int] | int,
    rounds: Iterable[int] | int | None = None,
    value: float = math.nan,
    entries: str = "one",
) -> ClientApp:
    """``app``, except that ``clients`` reply with non-finite parameters in ``rounds``.

    The faulty client still runs ``app``'s training (so its node state evolves as usual) and then
    overwrites values of its reply's ``ArrayRecord``s.

    Parameters
    ----------
    app : ClientApp
        The honest client application.
    clients : int or iterable of int
        Faulty partition ids.
    rounds : int or iterable of int, optional
        Server rounds (``server-round`` of the train config) in which the fault fires; every round
        when omitted.
    value : float
        NaN, ``inf`` or ``-inf``.
    entries : {"one", "all"}
        Poison one element (the first of the first floating array) or every floating element.

    Returns
    -------
    ClientApp
    """
    _check_app(app)
    bad = _ids("clients", clients, allow_none=False)
    when = _ids("rounds", rounds, allow_none=True)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isfinite(value):
        raise ValueError(f"value must be NaN or +-inf, got {value!r}")
    check_choice("entries", entries, NONFINITE_ENTRIES)
    value = float(value)
    out = ClientApp()

    @out.train()
    def train(msg: Message, context: Context) -> Message:
        reply = app(msg, context)
        fires, _, _ = _fires(msg, context, bad, when)  # type: ignore[arg-type]
        if not fires or reply.has_error():
            return reply
        content = RecordDict()
        for key, rec in reply.content.items():
            content[key] = _poison(rec, value, entries) if isinstance(rec, ArrayRecord) else rec
        return Message(content, reply_to=msg)

    @out.query()
    def query(msg: Message, context: Context) -> Message:
        return app(msg, context)

    return out


def crashing_client(
    app: ClientApp,
    clients: Iterable[int] | int,
    rounds: Iterable[int] | int | None = None,
    mode: str = "raise",
) -> ClientApp:
    """``app``, except that ``clients`` crash on their train message in ``rounds``.

    Parameters
    ----------
    app : ClientApp
    clients : int or iterable of int
        Crashing partition ids.
    rounds : int or iterable of int, optional
        Server rounds in which they crash (every round when omitted).
    mode : {"raise", "error"}
        ``"raise"``: the ``ClientApp`` raises :class:`InjectedCrash` (Flower's engines turn that
        into an error reply with code ``CLIENT_APP_RAISED_EXCEPTION``, as does
        :class:`~neurips26.federated.flower.LocalGrid`); ``"error"``: the node answers with an
        error ``Message`` itself.

    Returns
    -------
    ClientApp
    """
    _check_app(app)
    bad = _ids("clients", clients, allow_none=False)
    when = _ids("rounds", rounds, allow_none=True)
    check_choice("mode", mode, CRASH_MODES)
    out = ClientApp()

    @out.train()
    def train(msg: Message, context: Context) -> Message:
        fires, pid, rnd = _fires(msg, context, bad, when)  # type: ignore[arg-type]
        if not fires:
            return app(msg, context)
        reason = f"injected crash of client {pid} in round {rnd}"
        if mode == "raise":
            raise InjectedCrash(reason)
        return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=msg)

    @out.query()
    def query(msg: Message, context: Context) -> Message:
        return app(msg, context)

    return out


# --------------------------------------------------------------------------------------------
# server side
# --------------------------------------------------------------------------------------------
def describe_failure(msg: Message) -> str:
    """``"node <id>: <reason>"`` for an error reply."""
    reason = msg.error.reason if msg.has_error() else "no error"
    return f"node {int(msg.metadata.src_node_id)}: {reason}"


def split_failed(replies: Iterable[Message], who: str) -> tuple[list[Message], list[Message]]:
    """Separate error replies (crashed clients) from the others; log the failures at WARNING.

    Parameters
    ----------
    replies : iterable of Message
    who : str
        Name of the caller, used in the log line.

    Returns
    -------
    (valid, failed) : lists of Message
        The replies without and with an error, each in the order received.
    """
    valid: list[Message] = []
    failed: list[Message] = []
    for msg in replies:
        (failed if msg.has_error() else valid).append(msg)
    if failed:
        logger.warning(
            "%s: skipped %d of %d client replies that failed (%s)",
            who, len(failed), len(failed) + len(valid), "; ".join(describe_failure(m) for m in failed),
        )  # fmt: skip
    return valid, failed


def no_valid_replies(who: str, failed: list[Message]) -> ValueError:
    """The error for a round without a single usable reply (names the failures, if any)."""
    if failed:
        reasons = "; ".join(describe_failure(m) for m in failed)
        return ValueError(f"{who}: no valid client replies to aggregate; every reply failed ({reasons})")
    return ValueError(f"{who}: no valid client replies to aggregate (empty client set)")

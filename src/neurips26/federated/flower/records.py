"""Flower records: ``state_dict`` <-> ``ArrayRecord``, state flattening, and the shared logger."""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import Iterator

import torch
from flwr.app import ArrayRecord
from flwr.supercore.task_identity import TaskIdentity
from torch import Tensor

StateDict = dict[str, Tensor]


# The package keeps the logger name of the former single module.
logger = logging.getLogger("neurips26.federated.flower")


# records
# --------------------------------------------------------------------------------------------
def to_arrayrecord(state: StateDict) -> ArrayRecord:
    """A model ``state_dict`` as a Flower ``ArrayRecord`` (copied, CPU)."""
    if not isinstance(state, dict) or not state:
        raise ValueError("state must be a non-empty dict name -> tensor")
    return ArrayRecord(OrderedDict((k, v.detach().cpu().clone()) for k, v in state.items()))


def from_arrayrecord(record: ArrayRecord) -> StateDict:
    """An ``ArrayRecord`` back to a ``state_dict`` of tensors."""
    if not isinstance(record, ArrayRecord):
        raise TypeError(f"record must be a flwr ArrayRecord, got {type(record).__name__}")
    return dict(record.to_torch_state_dict())


def _float_keys(state: StateDict) -> list[str]:
    return [k for k, v in state.items() if torch.is_floating_point(v)]


def flatten_state(state: StateDict) -> Tensor:
    """Concatenate the floating-point entries (``state_dict`` order) into a float32 ``(d,)`` vector."""
    return torch.cat([state[k].detach().reshape(-1).float() for k in _float_keys(state)])


def unflatten_state(flat: Tensor, like: StateDict) -> StateDict:
    """Inverse of :func:`flatten_state`; non-float entries are copied from ``like``."""
    out, i = {}, 0
    d = sum(like[k].numel() for k in _float_keys(like))
    if flat.shape != (d,):
        raise ValueError(f"flat must have shape ({d},), got {tuple(flat.shape)}")
    for k, v in like.items():
        if torch.is_floating_point(v):
            out[k] = flat[i : i + v.numel()].reshape(v.shape).to(v.dtype).clone()
            i += v.numel()
        else:
            out[k] = v.clone()
    return out


@contextlib.contextmanager
def local_identity(run_id: int = 0) -> Iterator[None]:
    """Set Flower's process task identity for in-process use (messages need a run and node id)."""
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    if TaskIdentity._run_id is None:
        TaskIdentity.run_id = run_id
    if TaskIdentity._node_id is None:
        TaskIdentity.node_id = 1  # the SuperLink's node id
    if TaskIdentity._task_id is None:
        TaskIdentity.task_id = 0
    try:
        yield
    finally:
        TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


class _DropNotices(logging.Filter):
    """Drops Flower's per-round notices about settings these runs choose on purpose."""

    NOTICES = ("fraction_evaluate is set to 0.0",)  # evaluation is centralised (evaluate_fn) by design

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(self.NOTICES)


@contextlib.contextmanager
def quiet_flower(level: int = logging.WARNING) -> Iterator[None]:
    """Lower Flower's per-round INFO logging for the duration of a run.

    Also drops the per-round "fraction_evaluate is set to 0.0" warning: the strategies here evaluate
    centrally through ``evaluate_fn`` and never ask clients to evaluate, so that notice carries no
    information. Every other warning still shows.
    """
    logger = logging.getLogger("flwr")
    old = logger.level
    notices = _DropNotices()
    logger.setLevel(level)
    logger.addFilter(notices)
    try:
        yield
    finally:
        logger.removeFilter(notices)
        logger.setLevel(old)

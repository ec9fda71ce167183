"""Operation recording shared by the layers and the energy counter (internal).

Layers call :func:`record` for every propagation hop; :mod:`.energy` installs a recorder with
:func:`recording` and adds forward hooks for linear and normalisation layers. Without an active
recorder :func:`record` is a no-op, so training pays nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from torch import Tensor, nn

_ACTIVE: list[Callable[[nn.Module, str, float, Tensor], None]] = []


def is_recording() -> bool:
    return bool(_ACTIVE)


def record(module: nn.Module, kind: str, ops: float, x: Tensor) -> None:
    """Report ``ops`` dense operations of ``kind`` performed by ``module`` on input ``x``."""
    if _ACTIVE:
        _ACTIVE[-1](module, kind, float(ops), x)


@contextmanager
def recording(fn: Callable[[nn.Module, str, float, Tensor], None]) -> Iterator[None]:
    _ACTIVE.append(fn)
    try:
        yield
    finally:
        _ACTIVE.pop()

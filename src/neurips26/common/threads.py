"""Scoped control of torch's intra-op thread count."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from neurips26.common.checks import check_int


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the body with ``torch.set_num_threads(n)`` and restore the previous count afterwards.

    ``None`` leaves the count as it is (and still restores it, so a body that changes it cannot leak
    the change). Tiny models run faster on one thread than on two when the cores are shared.
    """
    previous = torch.get_num_threads()
    if n is not None:
        check_int("threads", n, low=1)
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)

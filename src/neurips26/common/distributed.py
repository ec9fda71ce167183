"""Local multi-process launching for ``torch.distributed`` (gloo) runs on one machine.

Two launch styles are used in this project: ``torch.multiprocessing.spawn`` of a function (the
claims) and separate interpreter processes running a script (tests, where a worker defined in a test
module cannot be imported by the children). Both need a free rendezvous port; the second also needs
the ``RANK``/``WORLD_SIZE``/``MASTER_*`` environment that ``init_process_group("gloo", ...)`` reads.

The module also holds the small communication layer that sharded all-gathers use (AdERA and its
baselines): :class:`ThreadGroup` emulates ``P`` ranks inside one process (one thread per virtual rank,
collectives meet on a barrier), :class:`Communicator` gives rank, size and the collectives over a
``torch.distributed`` process group, a :class:`ThreadGroup` or a single process, and
:class:`DoneWork` is the work handle of an operation that has finished (or finishes on ``wait``).

Shapes
------
- ``ThreadGroup.all_gather(out, inp)`` / ``Communicator.all_gather(out, inp)``: ``inp [m]``, ``out [P * m]``.
- ``Communicator.reduce_scatter_sum(out, inp)``: ``inp [P * m]``, ``out [m]``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from neurips26.common.checks import check_int

__all__ = ["Communicator", "DoneWork", "ThreadGroup", "free_port", "run_script_workers"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago (bind to port 0, read, release)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def run_script_workers(
    script: str | Path, world: int, env: Mapping[str, str] | None = None, timeout: float = 120.0
) -> None:
    """Run ``python script`` once per rank, with the environment of a local gloo process group.

    Each process gets ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR=127.0.0.1``, a fresh ``MASTER_PORT``
    and ``OMP_NUM_THREADS=1`` on top of the current environment and ``env``.

    Parameters
    ----------
    script : str or Path
        An existing Python file; it calls ``torch.distributed.init_process_group("gloo", ...)``.
    world : int
        Number of processes (>= 1).
    env : mapping, optional
        Extra environment variables (strings), e.g. where the workers write their results.
    timeout : float
        Seconds to wait for each process.

    Raises
    ------
    RuntimeError
        If any rank exits with a non-zero status (its stderr is included).
    """
    script = Path(script)
    if not script.is_file():
        raise ValueError(f"script must be an existing file, got {str(script)!r}")
    check_int("world", world, low=1)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    extra = dict(env or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in extra.items()):
        raise TypeError("env must map strings to strings")
    base = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": str(world),
        "OMP_NUM_THREADS": "1",
        **extra,
    }
    procs = [
        subprocess.Popen(
            [sys.executable, str(script)], env={**base, "RANK": str(rank)}, stderr=subprocess.PIPE
        )
        for rank in range(world)
    ]
    failed = []
    for rank, proc in enumerate(procs):
        try:
            err = proc.communicate(timeout=timeout)[1].decode(errors="replace")
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise RuntimeError(f"rank {rank} did not finish within {timeout} s") from None
        if proc.returncode != 0:
            failed.append(f"rank {rank} exited with {proc.returncode}:\n{err[-4000:]}")
    if failed:
        raise RuntimeError("\n".join(failed))


class DoneWork:
    """Work handle of an already finished operation."""

    def __init__(self, fn: Callable[[], None] | None = None) -> None:
        self._fn = fn
        self._done = fn is None

    def wait(self, timeout: Any = None) -> bool:
        if not self._done:
            self._done = True
            self._fn()
        return True

    def is_completed(self) -> bool:
        return self._done


class _ThreadShared:
    """Barrier and one slot per rank, shared by the members of one :class:`ThreadGroup`."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.barrier = threading.Barrier(world_size)
        self.slots: list[Any] = [None] * world_size


class ThreadGroup:
    """One member of an in-process group of ``world_size`` virtual ranks (one thread per rank).

    Collectives block on a barrier until every member has called them; use :meth:`create` to build
    the members and :func:`neurips26.distributed.adera.emulate_all_gather` (or your own threads) to drive
    them.
    """

    def __init__(self, shared: _ThreadShared, rank: int) -> None:
        self._shared = shared
        self.rank = rank
        self.world_size = shared.world_size

    @classmethod
    def create(cls, world_size: int) -> list[ThreadGroup]:
        check_int("world_size", world_size, low=1)
        shared = _ThreadShared(world_size)
        return [cls(shared, r) for r in range(world_size)]

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor) -> None:
        sh = self._shared
        sh.barrier.wait()
        sh.slots[self.rank] = inp
        sh.barrier.wait()
        n = inp.numel()
        for r, t in enumerate(sh.slots):
            if t.numel() != n:
                raise ValueError("all-gather inputs differ in size across ranks (uneven shards)")
            out[r * n : (r + 1) * n].copy_(t)
        sh.barrier.wait()

    def all_reduce_max(self, t: torch.Tensor) -> None:
        sh = self._shared
        sh.barrier.wait()
        sh.slots[self.rank] = t.clone()
        sh.barrier.wait()
        t.copy_(torch.stack(list(sh.slots)).amax(dim=0))
        sh.barrier.wait()

    def all_reduce_sum(self, t: torch.Tensor) -> None:
        sh = self._shared
        sh.barrier.wait()
        sh.slots[self.rank] = t.clone()
        sh.barrier.wait()
        acc = sh.slots[0].clone()
        for s in sh.slots[1:]:
            acc += s
        t.copy_(acc)
        sh.barrier.wait()


class Communicator:
    """Rank, size and a few collectives over a ProcessGroup, a :class:`ThreadGroup` or no group at all.

    With no initialised process group (and no ThreadGroup) it is a world of one rank: the collectives
    copy or return their input. ``all_gather`` uses ``all_gather_single`` where torch has it, else
    ``all_gather_into_tensor``; ``reduce_scatter_sum`` likewise.
    """

    def __init__(self, group: Any) -> None:
        self.group = group
        if isinstance(group, ThreadGroup):
            self.rank, self.world_size, self.thread = group.rank, group.world_size, True
        elif dist.is_available() and dist.is_initialized():
            self.rank, self.world_size, self.thread = dist.get_rank(group), dist.get_world_size(group), False
        else:
            self.rank, self.world_size, self.thread = 0, 1, False

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, async_op: bool = False) -> Any:
        if self.world_size == 1:
            out.reshape(-1).copy_(inp.reshape(-1))
            return DoneWork()
        if self.thread:
            self.group.all_gather(out.reshape(-1), inp.reshape(-1))
            return DoneWork()
        fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        work = fn(out, inp, group=self.group, async_op=async_op)
        return work if async_op else DoneWork()

    def all_reduce_max(self, t: torch.Tensor) -> torch.Tensor:
        if self.world_size == 1:
            return t
        if self.thread:
            self.group.all_reduce_max(t)
        else:
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return t

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        if self.world_size == 1:
            return t
        if self.thread:
            self.group.all_reduce_sum(t)
        else:
            dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.group)
        return t

    def reduce_scatter_sum(self, out: torch.Tensor, inp: torch.Tensor) -> None:
        if self.world_size == 1:
            out.copy_(inp)
        elif self.thread:
            full = inp.clone()
            self.group.all_reduce_sum(full)
            n = out.numel()
            out.copy_(full[self.rank * n : (self.rank + 1) * n])
        else:
            fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
            fn(out, inp, group=self.group)

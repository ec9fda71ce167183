"""Local multi-process launching for ``torch.distributed`` (gloo) runs on one machine.

Two launch styles are used in this project: ``torch.multiprocessing.spawn`` of a function (the
claims) and separate interpreter processes running a script (tests, where a worker defined in a test
module cannot be imported by the children). Both need a free rendezvous port; the second also needs
the ``RANK``/``WORLD_SIZE``/``MASTER_*`` environment that ``init_process_group("gloo", ...)`` reads.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from neurips26.common.checks import check_int

__all__ = ["free_port", "run_script_workers"]


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

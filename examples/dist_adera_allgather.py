"""A ``torch.distributed`` collective from a paper: AdERA's lossless all-gather on gloo, 2 processes.

Paper: *AdERA: lossless exponent-reuse all-gather for sharded MoE training* (NeurIPS 2026 submission;
registry slug ``adera``). With ZeRO-3/FSDP every rank all-gathers each layer's weights before using
them; after a short warm-up almost every bf16 exponent equals the previous iteration's, so AdERA keeps
the exponents it last received from every rank and sends only sign + mantissa plus the few changed
exponents. The receiver rebuilds the weights bit for bit.

What it shows: ``adera_all_gather(output, input, state=...)`` used as a drop-in for
``torch.distributed.all_gather_into_tensor`` (``all_gather_single`` since torch 2.14) in two processes
started with ``torch.multiprocessing.spawn`` on the gloo backend (CPU). Each rank owns a bf16 shard of
a weight vector that drifts a little every iteration (as weights do under small optimizer steps); both
collectives gather it every iteration. The result must equal, bit for bit, the plain all-gather and the
single-process reference (the concatenation of both shards, recomputed in the parent from the same
seed): tolerance 0. The bytes AdERA sent, against the raw bf16 bytes, show the compression after
warm-up.

Run: ``python examples/dist_adera_allgather.py``.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from neurips26.distributed.adera import AdERAConfig, AdERAState, adera_all_gather

WORLD = 2
SHARD = 4096  # bf16 elements per rank
ITERS = 8
STEP = 1e-4  # size of the per-iteration drift (relative to weights of size ~0.02)


def weights(seed: int, iteration: int) -> torch.Tensor:
    """The full fp32 weight vector ``[WORLD * SHARD]`` at ``iteration`` (the same on every process)."""
    g = torch.Generator().manual_seed(seed)
    w = 0.02 * torch.randn(WORLD * SHARD, generator=g)
    for _ in range(iteration + 1):
        w = w + STEP * torch.randn(WORLD * SHARD, generator=g)
    return w


def plain_all_gather(output: torch.Tensor, shard: torch.Tensor) -> None:
    """torch's own all-gather into one tensor (``all_gather_single`` in torch >= 2.14, else the old name)."""
    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(output, shard)


def worker(rank: int, seed: int, port: int, out_dir: str) -> None:
    """One rank: gather its drifting bf16 shard with AdERA and with the plain all-gather ``ITERS`` times."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        # compress from the third call on, always (adaptive=False: no cost model; a real run keeps it on)
        config = AdERAConfig(warmup_iters=2, warmup="fixed", adaptive=False, verify=True)
        state = AdERAState(config, SHARD, torch.bfloat16, WORLD)  # one state per gathered parameter
        adera_out, plain_out = [], []
        for it in range(ITERS):
            shard = weights(seed, it).to(torch.bfloat16)[rank * SHARD : (rank + 1) * SHARD].contiguous()
            out = torch.empty(WORLD * SHARD, dtype=torch.bfloat16)
            adera_all_gather(out, shard, state=state)
            ref = torch.empty_like(out)
            plain_all_gather(ref, shard)
            adera_out.append(out)
            plain_out.append(ref)
        torch.save(
            {
                "adera": torch.stack(adera_out),
                "plain": torch.stack(plain_out),
                "bytes_raw": state.bytes_raw,
                "bytes_sent": state.bytes_sent,
                "modes": list(state.mode_history),
            },
            Path(out_dir) / f"rank{rank}.pt",
        )
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16)


def main(seed: int = 0) -> dict:
    """Spawn ``WORLD`` gloo processes; compare AdERA's gathers with the plain and single-process results.

    Returns
    -------
    dict
        ``world_size``, ``iterations``, ``bitwise_equal_plain`` and ``bitwise_equal_reference`` (every
        rank, every iteration), ``max_abs_diff_reference`` (0.0 when lossless), ``modes`` (wire mode of
        rank 0 per call), ``bytes_sent``/``bytes_raw`` (rank 0, all calls) and ``compression``
        (``bytes_raw / bytes_sent``).
    """
    # Spawned children unpickle ``worker`` by importing this file's module by name: make the folder
    # importable for them (a no-op when run as a script, whose folder is already on sys.path).
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(seed, free_port(), tmp), nprocs=WORLD, join=True)
        ranks = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(WORLD)]
    # the single-process result: every iteration's full bf16 vector, [ITERS, WORLD * SHARD]
    reference = torch.stack([weights(seed, it).to(torch.bfloat16) for it in range(ITERS)])
    eq_plain = all(torch.equal(bits(r["adera"]), bits(r["plain"])) for r in ranks)
    eq_ref = all(torch.equal(bits(r["adera"]), bits(reference)) for r in ranks)
    max_diff = max(float((r["adera"].float() - reference.float()).abs().max()) for r in ranks)
    r0 = ranks[0]
    result = {
        "world_size": WORLD,
        "iterations": ITERS,
        "bitwise_equal_plain": eq_plain,
        "bitwise_equal_reference": eq_ref,
        "max_abs_diff_reference": max_diff,
        "modes": r0["modes"],
        "bytes_sent": int(r0["bytes_sent"]),
        "bytes_raw": int(r0["bytes_raw"]),
        "compression": r0["bytes_raw"] / r0["bytes_sent"],
    }
    print(f"{WORLD} gloo ranks, {ITERS} all-gathers of {SHARD} bf16 elements per rank")
    print(f"AdERA == all_gather_into_tensor bit for bit: {eq_plain}; == single-process concat: {eq_ref}")
    print(f"wire modes of rank 0: {r0['modes']}")
    print(
        f"rank 0 sent {result['bytes_sent']} bytes for {result['bytes_raw']} raw ({result['compression']:.2f}x)"
    )
    return result


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()

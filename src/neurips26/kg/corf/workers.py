"""Load balancing run on real worker processes: supports assigned by cost, executed on a gloo group.

:func:`balanced_run` spawns ``num_workers`` processes (``torch.multiprocessing.spawn``), joins them
in a ``torch.distributed`` gloo group and, for every named assignment (e.g. LPT on the cost model and
round-robin), lets each rank execute the jobs (supports, plus the residual set as one more job)
assigned to it. Between barriers each rank times its own work; the makespan of a round is the time
from the opening barrier until the last rank has finished (a closing barrier), measured on rank 0.
One untimed warm-up round runs first; assignments alternate their order across repeats so that
machine load affects them alike. The
ranks' score rows of the first assignment's first round are written back and compared by the
caller against a single-process run.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import replace

import torch
from torch import Tensor
from torch_geometric.data import Data

from neurips26.common.checks import check_int
from neurips26.common.distributed import free_port
from neurips26.kg.corf.executor import CoRFExecutor
from neurips26.kg.corf.planner import Support

__all__ = ["balanced_run", "job_costs", "run_jobs"]


def job_costs(supports: list[Support], residual: Tensor, num_edges: int, num_hops: int) -> list[float]:
    """Cost-model estimates of the jobs: each support's cost, then the residual set (if any) as
    ``|residual| * E * L`` (its queries run on their own subgraphs, bounded by the whole graph)."""
    costs = [float(s.cost) for s in supports]
    if residual.numel():
        costs.append(float(residual.numel() * num_edges * num_hops))
    return costs


def run_jobs(
    executor: CoRFExecutor,
    queries: Tensor,
    graph: Data,
    supports: list[Support],
    residual: Tensor,
    jobs: list[int],
) -> tuple[Tensor, Tensor]:
    """Execute the given jobs (support indices; ``len(supports)`` is the residual job).

    Returns the positions of the queries these jobs own in ``queries`` and their scores ``[k, N]``.
    """
    own = [supports[j] for j in jobs if j < len(supports)]
    res = residual if len(supports) in jobs else residual[:0]
    idx = torch.cat([s.query_idx for s in own] + [res])
    if idx.numel() == 0:
        return idx, torch.zeros(0, graph.num_nodes)
    pos = torch.full((queries.shape[0],), -1, dtype=torch.long)
    pos[idx] = torch.arange(idx.numel())
    local = [replace(s, query_idx=pos[s.query_idx]) for s in own]
    return idx, executor.scores(queries[idx], graph, plan=(local, pos[res]))


def _worker(rank: int, world: int, port: int, path: str) -> None:
    import torch.distributed as dist

    payload = torch.load(path, weights_only=False)
    torch.set_num_threads(payload["threads"])  # a spawned process: its own thread setting
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        ex = payload["executor"]
        names = list(payload["assignments"])
        rounds = []
        with torch.no_grad():
            run_jobs(ex, payload["queries"], payload["graph"], payload["supports"], payload["residual"],
                     payload["assignments"][names[0]][rank])  # fmt: skip  # warm-up round, not timed
            for rep in range(payload["repeats"]):
                for name in names if rep % 2 == 0 else names[::-1]:
                    jobs = payload["assignments"][name][rank]
                    dist.barrier()
                    t0 = time.perf_counter()
                    c0 = time.process_time()
                    idx, sc = run_jobs(ex, payload["queries"], payload["graph"], payload["supports"],
                                       payload["residual"], jobs)  # fmt: skip
                    load, cpu = time.perf_counter() - t0, time.process_time() - c0
                    dist.barrier()
                    span = time.perf_counter() - t0
                    loads = [None] * world
                    dist.all_gather_object(loads, (load, cpu, len(jobs)))
                    rounds.append({"assignment": name, "repeat": rep, "makespan_s": span,
                                   "load_s": [x[0] for x in loads], "cpu_s": [x[1] for x in loads],
                                   "jobs": [x[2] for x in loads]})  # fmt: skip
                    if rep == 0 and name == names[0]:
                        torch.save({"idx": idx, "scores": sc}, f"{path}.rank{rank}")
        if rank == 0:
            torch.save(rounds, f"{path}.rounds")
    finally:
        dist.destroy_process_group()


def balanced_run(
    executor: CoRFExecutor,
    queries: Tensor,
    graph: Data,
    supports: list[Support],
    residual: Tensor,
    assignments: dict[str, list[list[int]]],
    repeats: int = 1,
    threads: int = 1,
) -> dict:
    """Run the jobs of each assignment on ``len(assignment)`` real gloo worker processes.

    Returns ``{"rounds": [...], "scores": [B, N]}``: per round the assignment's name, the measured
    makespan (rank 0, barrier to barrier), each rank's own work time ``load_s``, process CPU time
    and job count; ``scores`` gathers the ranks' rows of the first assignment's first round.
    """
    if not isinstance(assignments, dict) or not assignments:
        raise ValueError("assignments must be a non-empty dict name -> jobs per worker")
    worlds = {len(a) for a in assignments.values()}
    if len(worlds) != 1:
        raise ValueError(f"assignments must all have the same number of workers, got {sorted(worlds)}")
    world = check_int("num_workers", worlds.pop(), low=1)
    n_jobs = len(supports) + (1 if residual.numel() else 0)
    for name, a in assignments.items():
        if sorted(j for w in a for j in w) != list(range(n_jobs)):
            raise ValueError(f"assignments[{name!r}] must assign each of the {n_jobs} jobs exactly once")
    check_int("repeats", repeats, low=1)
    check_int("threads", threads, low=1)
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "payload.pt")
        torch.save(
            {"executor": executor, "queries": queries, "graph": graph, "supports": supports, "residual": residual,
             "assignments": assignments, "repeats": repeats, "threads": threads},
            path,
        )  # fmt: skip
        mp.spawn(_worker, args=(world, free_port(), path), nprocs=world)
        rounds = torch.load(f"{path}.rounds", weights_only=False)
        scores = torch.zeros(queries.shape[0], graph.num_nodes)
        for rank in range(world):
            part = torch.load(f"{path}.rank{rank}")
            scores[part["idx"]] = part["scores"]
    return {"rounds": rounds, "scores": scores}

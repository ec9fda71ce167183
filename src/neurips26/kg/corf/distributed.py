"""Balancing supports over workers (LPT) and scoring on a ``torch.distributed`` group."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import torch
from torch import Tensor
from torch_geometric.data import Data

from neurips26.common.checks import check_int
from neurips26.kg.corf.executor import CoRFExecutor


def lpt_assign(costs: Sequence[float], num_workers: int) -> list[list[int]]:
    """Longest-processing-time-first assignment of jobs to workers.

    Jobs are sorted by cost (descending, ties by index) and each goes to the currently least-loaded
    worker (ties: lowest rank). Makespan :math:`\\le (4/3 - 1/(3W))\\,\\mathrm{OPT}` (Graham, 1969).

    Returns
    -------
    list of list of int
        Job indices per worker.
    """
    check_int("num_workers", num_workers, low=1)
    costs = [float(c) for c in costs]
    if any(c < 0 or c != c for c in costs):
        raise ValueError("costs must be non-negative numbers")
    heap = [(0.0, w) for w in range(num_workers)]
    out: list[list[int]] = [[] for _ in range(num_workers)]
    for j in sorted(range(len(costs)), key=lambda j: (-costs[j], j)):
        load, w = heapq.heappop(heap)
        out[w].append(j)
        heapq.heappush(heap, (load + costs[j], w))
    return out


def round_robin_assign(num_jobs: int, num_workers: int) -> list[list[int]]:
    """Job ``j`` to worker ``j mod W`` (the load-balancing baseline)."""
    check_int("num_jobs", num_jobs, low=0)
    check_int("num_workers", num_workers, low=1)
    return [list(range(w, num_jobs, num_workers)) for w in range(num_workers)]


def makespan(costs: Sequence[float], assignment: Sequence[Sequence[int]]) -> float:
    """Largest per-worker total cost."""
    return max((sum(costs[j] for j in jobs) for jobs in assignment), default=0.0)


def distributed_scores(executor: CoRFExecutor, queries: Tensor, graph: Data, group=None) -> Tensor:
    """Run CoRF on a ``torch.distributed`` group: LPT-assigned supports per rank, scores all-reduced.

    Every rank plans the same supports (deterministic), runs the supports LPT assigns to it (the
    residual queries count as one more job), writes its rows into a zero ``[B, N]`` tensor and the
    tensors are summed; each row is owned by exactly one rank, so the sum equals the single-process
    scores exactly.
    """
    import torch.distributed as dist

    if not dist.is_initialized():
        raise RuntimeError("distributed_scores needs an initialised torch.distributed process group")
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    supports, residual = executor.plan(queries, graph)
    costs = [s.cost for s in supports] + [float(residual.numel() * graph.edge_index.shape[1])]
    mine = set(lpt_assign(costs, world)[rank])
    local_sup = [s for j, s in enumerate(supports) if j in mine]
    local_res = residual if len(supports) in mine else residual[:0]
    full = executor.scores(queries, graph, plan=(local_sup, local_res))
    owned = torch.zeros(queries.shape[0], dtype=torch.bool)
    for s in local_sup:
        owned[s.query_idx] = True
    owned[local_res] = True
    out = torch.where(owned.unsqueeze(1), full, torch.zeros_like(full))
    dist.all_reduce(out, group=group)
    return out

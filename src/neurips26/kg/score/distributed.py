"""Sharding query answering over ``torch.distributed`` ranks (spec: scale-out path). Part of :mod:`neurips26.kg.score`.

Queries are independent, so rank ``r`` of ``W`` answers the sessions ``i`` with ``i mod W = r`` with
its own copy of the fuzzy adjacency and writes them into an otherwise zero ``[B, N]`` buffer; one
``all_reduce`` (sum) then gives every rank all rows. Each row has exactly one non-zero contributor, and
adding exact zeros leaves a float unchanged, so the result equals the single-process scores bitwise.

Shapes
------
- output: ``[B, N]`` scores, row ``i`` for ``sessions[i]``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from neurips26.kg.score.adjust import SCORE
from neurips26.kg.score.executor import QTOExecutor
from neurips26.kg.score.metrics import Session

__all__ = ["distributed_session_scores"]


def distributed_session_scores(
    executor: QTOExecutor, sessions: list[Session], score: SCORE | None = None, group=None
) -> Tensor:
    """Scores ``[B, N]`` of ``sessions`` computed in shards across the ranks of ``group``.

    With ``score=None`` the unconstrained ranking, else :meth:`SCORE.session_scores` (examples at each
    session's variable). Without an initialised process group it runs in one process.
    """
    if not isinstance(executor, QTOExecutor):
        raise TypeError(f"executor must be a QTOExecutor, got {type(executor).__name__}")
    if score is not None and not isinstance(score, SCORE):
        raise TypeError(f"score must be a SCORE instance or None, got {type(score).__name__}")
    if not sessions:
        raise ValueError("sessions must not be empty")
    ready = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank(group) if ready else 0
    world = dist.get_world_size(group) if ready else 1
    dtype = executor.adjacency.dtype  # the executor's dtype, promoted with SCORE's similarity dtype
    if score is not None:
        emb = score.embeddings
        emb_dtype = emb.real.dtype if emb.is_complex() else emb.dtype
        dtype = torch.promote_types(dtype, emb_dtype if emb_dtype.is_floating_point else dtype)
    out = torch.zeros(len(sessions), executor.adjacency.num_entities, dtype=dtype)
    for i in range(rank, len(sessions), world):
        s = sessions[i]
        if score is None:
            out[i] = executor(s.structure, s.anchors, s.relations)
        else:
            out[i] = score.session_scores(executor, s)
    if ready and world > 1:
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
    return out

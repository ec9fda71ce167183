"""Training the shared CMP model on a knowledge graph."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data

from neurips26.common.checks import check_choice, check_float, check_int


@dataclass
class _TrainLog:
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0


def train_cmp(
    executor,
    triples: Tensor,
    graph: Data,
    num_relations: int,
    *,
    steps: int = 200,
    batch_queries: int = 16,
    num_negatives: int = 32,
    lr: float = 5e-3,
    seed: int = 0,
    loss: str = "bce",
) -> dict:
    """Train the executor's model with binary cross-entropy (NBFNet training), through the executor.

    Each step draws ``batch_queries`` training triples, asks tail prediction for ``(h, r)`` and, with
    probability 1/2 per triple, head prediction as ``(t, r + R)``; the loss is BCE on the true entity
    against ``num_negatives`` uniformly drawn entities (``loss="bce"``), or cross-entropy of the true
    entity against all ``N`` entities (``loss="softmax"``; ``num_negatives`` is then unused). Uniform
    negatives on a large sparse graph are almost always outside the query's receptive field, where
    every entity has the same closed-form score, so BCE mostly teaches "reached beats unreached"; the
    full softmax also contrasts the true entity with every reached one. Exactness makes the gradients
    identical for every exact executor.

    Returns
    -------
    dict
        ``{"losses": [...], "seconds": float, "steps": int}``.
    """
    check_int("steps", steps, low=0)
    check_int("batch_queries", batch_queries, low=1)
    check_int("num_negatives", num_negatives, low=1)
    check_float("lr", lr, 0.0, low_open=True)
    check_choice("loss", loss, ("bce", "softmax"))
    gen = torch.Generator().manual_seed(check_int("seed", seed, low=0))
    model = executor.model
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    n = graph.num_nodes
    log = _TrainLog()
    t0 = time.perf_counter()
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, triples.shape[0], (batch_queries,), generator=gen)
        h, r, t = triples[idx].t()
        flip = torch.rand(batch_queries, generator=gen) < 0.5
        heads = torch.where(flip, t, h)
        rels = torch.where(flip, r + num_relations, r)
        tails = torch.where(flip, h, t)
        scores = executor.scores(torch.stack([heads, rels], 1), graph)
        if loss == "softmax":
            value = F.cross_entropy(scores, tails)
        else:
            neg = torch.randint(0, n, (batch_queries, num_negatives), generator=gen)
            pos_s = scores.gather(1, tails.unsqueeze(1))
            neg_s = scores.gather(1, neg)
            value = F.binary_cross_entropy_with_logits(
                pos_s, torch.ones_like(pos_s)
            ) + F.binary_cross_entropy_with_logits(neg_s, torch.zeros_like(neg_s))
        opt.zero_grad()
        value.backward()
        opt.step()
        log.losses.append(float(value.detach()))
    model.eval()
    log.seconds = time.perf_counter() - t0
    return {"losses": log.losses, "seconds": log.seconds, "steps": steps}

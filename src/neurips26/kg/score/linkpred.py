"""The base link predictor: ComplEx with reciprocal relations (scores equal PyKEEN's). Part of :mod:`neurips26.kg.score` (see its docstring for the paper and the math)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from neurips26.common.checks import check_float, check_int


def complex_tail_scores(model, heads: Tensor, relation: int) -> Tensor:
    """``[B, N]`` scores of every tail under a PyG :class:`~torch_geometric.nn.kge.ComplEx` model.

    :math:`\\mathrm{Re}\\langle e_h, w_r, \\bar e_t\\rangle` for all ``t``, equal to ``model(h, r, t)``.
    """
    h_re, h_im = model.node_emb(heads), model.node_emb_im(heads)
    r = torch.full_like(heads, relation)
    r_re, r_im = model.rel_emb(r), model.rel_emb_im(r)
    a = h_re * r_re - h_im * r_im
    b = h_re * r_im + h_im * r_re
    return a @ model.node_emb.weight.t() + b @ model.node_emb_im.weight.t()


@dataclass
class ComplExEmbeddings:
    """A trained ComplEx link predictor with reciprocal relations.

    Attributes
    ----------
    entity : Tensor
        ``[N, k]`` complex entity embeddings.
    relation : Tensor
        ``[2R, k]`` complex relation embeddings; ``r + R`` is the inverse of ``r``.
    losses : list of float
        Mean training loss per epoch.
    """

    entity: Tensor
    relation: Tensor
    losses: list

    def tail_scores(self, heads: Tensor, relation: int) -> Tensor:
        """``[B, N]``: :math:`\\mathrm{Re}\\langle e_h, w_r, \\bar e_t\\rangle` for every tail ``t``."""
        nr = self.relation.shape[0]
        if not 0 <= int(relation) < nr:
            raise ValueError(f"relation id {relation} outside [0, {nr})")
        heads = torch.as_tensor(heads).flatten()
        q = self.entity[heads] * self.relation[int(relation)]
        return (q @ self.entity.conj().t()).real


def train_complex(
    triples: Tensor,
    num_entities: int,
    num_relations: int,
    *,
    rank: int = 32,
    epochs: int = 100,
    batch_size: int = 512,
    lr: float = 0.1,
    n3: float = 0.05,
    init_scale: float = 1e-3,
    seed: int = 0,
) -> ComplExEmbeddings:
    """Train ComplEx with reciprocal relations, 1-vs-all cross entropy, N3 and Adagrad (kbc recipe).

    Every triple ``(h, r, t)`` is also trained as ``(t, r + R, h)``. The per-batch loss is
    :math:`\\mathrm{CE}(\\phi(h, r, \\cdot), t) + \\lambda \\tfrac{1}{B}\\sum (|e_h|^3 + |w_r|^3 + |e_t|^3)`.
    The score function equals PyKEEN's ``ComplExInteraction`` (tested).

    Parameters
    ----------
    triples : Tensor
        ``[T, 3]`` long training triples with relation ids in ``[0, R)``.
    num_entities, num_relations : int
        ``N`` and ``R`` (without inverses).
    rank, epochs, batch_size : int
        Embedding size ``k``, passes over the ``2T`` training rows, rows per step.
    lr, n3, init_scale : float
        Adagrad learning rate, N3 weight, standard deviation of the initial embeddings.
    seed : int
        Initialisation and shuffling seed.
    """
    check_int("num_entities", num_entities, low=1)
    check_int("num_relations", num_relations, low=1)
    if (
        not isinstance(triples, Tensor)
        or triples.dim() != 2
        or triples.shape[1] != 3
        or triples.dtype != torch.long
    ):
        raise ValueError("triples must be a [T, 3] long tensor of (head, relation, tail)")
    if ((triples[:, [0, 2]] < 0) | (triples[:, [0, 2]] >= num_entities)).any():
        raise ValueError(f"triples: entity ids must lie in [0, {num_entities})")
    if ((triples[:, 1] < 0) | (triples[:, 1] >= num_relations)).any():
        raise ValueError(f"triples: unknown relation id; ids must lie in [0, {num_relations})")
    for name, value in (("rank", rank), ("epochs", epochs), ("batch_size", batch_size)):
        check_int(name, value, low=1)
    check_float("lr", lr, 0.0, low_open=True)
    check_float("n3", n3, 0.0)
    check_float("init_scale", init_scale, 0.0, low_open=True)
    gen = torch.Generator().manual_seed(check_int("seed", seed, low=0))
    h, r, t = triples.t()
    rows = torch.cat([torch.stack([h, r, t], 1), torch.stack([t, r + num_relations, h], 1)])
    ent = torch.nn.Parameter(torch.randn(num_entities, 2 * rank, generator=gen) * init_scale)
    rel = torch.nn.Parameter(torch.randn(2 * num_relations, 2 * rank, generator=gen) * init_scale)
    opt = torch.optim.Adagrad([ent, rel], lr=lr)
    losses = []
    for _ in range(epochs):
        perm = torch.randperm(rows.shape[0], generator=gen)
        total, count = 0.0, 0
        for s in range(0, rows.shape[0], batch_size):
            b = rows[perm[s : s + batch_size]]
            lhs, w, rhs = ent[b[:, 0]], rel[b[:, 1]], ent[b[:, 2]]
            lr_, li = lhs[:, :rank], lhs[:, rank:]
            wr, wi = w[:, :rank], w[:, rank:]
            qr, qi = lr_ * wr - li * wi, lr_ * wi + li * wr
            scores = qr @ ent[:, :rank].t() + qi @ ent[:, rank:].t()
            reg = (
                sum((x[:, :rank] ** 2 + x[:, rank:] ** 2).sqrt().pow(3).sum() for x in (lhs, w, rhs))
                / b.shape[0]
            )
            loss = torch.nn.functional.cross_entropy(scores, b[:, 2]) + n3 * reg
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * b.shape[0]
            count += b.shape[0]
        losses.append(total / count)
    e = ent.detach()
    w = rel.detach()
    return ComplExEmbeddings(
        torch.complex(e[:, :rank], e[:, rank:]), torch.complex(w[:, :rank], w[:, rank:]), losses
    )

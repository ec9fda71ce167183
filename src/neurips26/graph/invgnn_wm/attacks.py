r"""Removal attacks on a watermarked model: pruning, fine-tuning, fake quantisation, distillation.

.. math::
    L_{KD} = T^2\,\mathrm{KL}(\mathrm{softmax}(z_t / T) \,\|\, \mathrm{softmax}(z_s / T))

Every attack returns a new model (``distill`` trains the given student in place and returns it).

Shapes
------
Models in, models out; the same ``(x, edge_index[, batch])`` signature as :func:`make_gnn`.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Data

from neurips26.common.checks import check_float, check_int
from neurips26.common.gnn import _graph_batches, _is_graph_data, fit


def _weight_tensors(model: nn.Module) -> list[tuple[nn.Module, str]]:
    out = []
    for module in model.modules():
        w = module._parameters.get("weight") if hasattr(module, "_parameters") else None
        if isinstance(w, nn.Parameter) and w.dim() >= 2:
            out.append((module, "weight"))
    return out


def weight_sparsity(model: nn.Module) -> float:
    """Fraction of exactly-zero entries over all weight matrices (dim >= 2)."""
    ws = [getattr(m, n) for m, n in _weight_tensors(model)]
    total = sum(w.numel() for w in ws)
    return float(sum(int((w == 0).sum()) for w in ws) / max(total, 1))


def prune_global(model: nn.Module, amount: float) -> nn.Module:
    """Global unstructured L1 magnitude pruning of all weight matrices (returns a pruned copy).

    Uses ``torch.nn.utils.prune.global_unstructured`` then makes the masks permanent, so the copy
    is an ordinary module whose smallest ``amount`` fraction of weights (globally) are zero.
    """
    from torch.nn.utils import prune

    check_float("amount", amount, 0.0, 1.0)
    pruned = copy.deepcopy(model)
    targets = _weight_tensors(pruned)
    if not targets:
        raise ValueError("model has no weight matrices to prune")
    if amount > 0:
        prune.global_unstructured(targets, pruning_method=prune.L1Unstructured, amount=amount)
        for module, name in targets:
            prune.remove(module, name)
    return pruned


def fake_quantize(model: nn.Module, bits: int = 8) -> nn.Module:
    r"""Post-training symmetric per-tensor weight fake-quantisation (returns a copy).

    For each weight matrix ``W``: ``s = max|W| / (2^{b-1} - 1)``,
    ``W_q = s \cdot \mathrm{clamp}(\mathrm{round}(W / s), -(2^{b-1}-1), 2^{b-1}-1)``; at most
    ``2^b - 1`` distinct values per tensor. Biases stay in float (as in int8 PTQ with fp32 bias).
    """
    check_int("bits", bits, low=2, high=16)
    q = copy.deepcopy(model)
    qmax = 2 ** (bits - 1) - 1
    with torch.no_grad():
        for module, name in _weight_tensors(q):
            w = getattr(module, name)
            scale = w.abs().max()
            if scale == 0:
                continue
            scale = scale / qmax
            w.copy_(torch.clamp(torch.round(w / scale), -qmax, qmax) * scale)
    return q


def _reinit_last(model: nn.Module) -> None:
    """Re-initialise the outermost resettable layer that owns the model's last parameter."""
    names = [n for n, _ in model.named_parameters()]
    if not names:
        raise ValueError("model has no parameters to re-initialise")
    parts = names[-1].split(".")[:-1]
    modules = dict(model.named_modules())
    for i in range(1, len(parts) + 1):
        module = modules[".".join(parts[:i])]
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
            return
    raise ValueError("model has no resettable layer owning its last parameter")


def finetune(
    model: nn.Module,
    data: Data | Sequence[Data],
    epochs: int,
    lr: float,
    reinit_last: bool = False,
    *,
    seed: int = 0,
) -> nn.Module:
    """Fine-tuning attack: a copy trained ``epochs`` more epochs on clean task data (Adam, ``lr``).

    ``reinit_last=True`` first re-initialises the last layer (a stronger removal attempt).
    """
    tuned = copy.deepcopy(model)
    if reinit_last:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            _reinit_last(tuned)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fit(tuned, data, epochs, lr, seed=seed)
    return tuned


def distill(
    teacher: nn.Module,
    student: nn.Module,
    data: Data | Sequence[Data],
    epochs: int,
    temperature: float = 4.0,
    watermark: Any = None,
    *,
    lr: float = 1e-2,
    weight_decay: float = 5e-4,
    seed: int = 0,
) -> nn.Module:
    r"""Knowledge distillation: train ``student`` (in place, also returned) on the teacher's softened logits.

    .. math:: L = T^2\,\mathrm{KL}(\mathrm{softmax}(z_t / T) \,\|\, \mathrm{softmax}(z_s / T))
              \; [+ L_{wm}(\text{student})]

    over every node of the task graph (node task: the attacker can query all nodes) or every
    training graph (graph task). With ``watermark`` (KD+WM, the owner's recovery path) its loss is
    added each step with the watermark's head frozen, so the original key still verifies.
    """
    check_int("epochs", epochs, low=0)
    t = check_float("temperature", temperature, 0.0, low_open=True)
    graph = _is_graph_data(data)
    teacher.eval()
    frozen = []
    if watermark is not None and hasattr(watermark, "parameters"):
        frozen = [p for p in watermark.parameters() if p.requires_grad]
        for p in frozen:
            p.requires_grad_(False)
    opt = torch.optim.Adam(student.parameters(), lr=lr, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(seed)
    student.train()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for _ in range(epochs):
                batches = _graph_batches(data, 64, gen) if graph else [data]
                for b in batches:
                    args = (b.x, b.edge_index, b.batch) if graph else (b.x, b.edge_index)
                    with torch.no_grad():
                        zt = teacher(*args)
                    zs = student(*args)
                    loss = (
                        F.kl_div(
                            F.log_softmax(zs / t, -1),
                            F.log_softmax(zt / t, -1),
                            log_target=True,
                            reduction="batchmean",
                        )
                        * t
                        * t
                    )
                    if watermark is not None:
                        loss = loss + watermark.watermark_loss(student)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
    finally:
        for p in frozen:
            p.requires_grad_(True)
    student.eval()
    return student

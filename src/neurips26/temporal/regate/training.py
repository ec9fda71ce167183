"""REGATE training, scoring and calibration helpers (see :mod:`neurips26.temporal.regate`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor, nn

from neurips26.common.checks import check_int
from neurips26.temporal.regate.tokens import TokenStore


def expected_calibration_error(probs: Tensor, labels: Tensor, n_bins: int = 15) -> float:
    """Binary ECE with ``n_bins`` equal-width bins on the positive-class probability:
    :math:`\\sum_b \\frac{n_b}{N} |\\bar y_b - \\bar p_b|` (bin ``b`` = ``[b/n, (b+1)/n)``, last bin closed)."""
    check_int("n_bins", n_bins, low=1)
    p, y = probs.detach().double().flatten(), labels.detach().double().flatten()
    if p.numel() != y.numel() or p.numel() == 0:
        raise ValueError(
            f"probs and labels must be non-empty and of one length, got {p.numel()} and {y.numel()}"
        )
    if not torch.isfinite(p).all() or (p < 0).any() or (p > 1).any():
        raise ValueError("probs must be finite and lie in [0, 1]")
    b = (p * n_bins).floor().clamp(max=n_bins - 1).long()
    total = 0.0
    for i in range(n_bins):
        sel = b == i
        if sel.any():
            total += float(sel.sum()) / p.numel() * abs(float(y[sel].mean() - p[sel].mean()))
    return total


# ------------------------------------------------------------------------------------ training and scoring
def train_risk_epoch(
    model: nn.Module,
    data,
    labels: Tensor,
    store: TokenStore | None,
    optimizer: torch.optim.Optimizer,
    batch_size: int = 200,
    pos_weight: float = 1.0,
) -> float:
    """One chronological pass: per batch, risk logits of the senders (state before the batch), class-weighted
    BCE, a step, then ``observe``. Returns the mean loss."""
    from neurips26.common.temporal import temporal_loader

    check_int("batch_size", batch_size, low=1)
    model.train()
    model.reset_state()
    losses, start = [], 0
    pw = torch.tensor(float(pos_weight))
    for b in temporal_loader(data, batch_size):
        y = labels[start : start + b.num_events]
        start += b.num_events
        optimizer.zero_grad()
        logits = model(b.src, b.t, store)
        loss = nn.functional.binary_cross_entropy_with_logits(logits, y, pos_weight=pw)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        with torch.no_grad():
            model.observe(b.src, b.dst, b.t, b.msg)
        if hasattr(model, "detach"):
            model.detach()
    return float(np.mean(losses))


@torch.no_grad()
def stream_risk_scores(
    model: nn.Module, parts: Sequence, store: TokenStore | None, batch_size: int = 200
) -> list[Tensor]:
    """Reset the state, then for every part (e.g. train, val, test) score each batch's senders before
    observing the batch. Returns one logit tensor per part."""
    from neurips26.common.temporal import temporal_loader

    model.eval()
    model.reset_state()
    out = []
    for part in parts:
        scores = []
        for b in temporal_loader(part, batch_size):
            scores.append(model(b.src, b.t, store))
            model.observe(b.src, b.dst, b.t, b.msg)
        out.append(torch.cat(scores) if scores else torch.zeros(0))
    return out


def fit_temperature(
    logits: Tensor, labels: Tensor, grid: Sequence[float] = tuple(np.geomspace(0.05, 20, 60))
) -> float:
    """Temperature minimising the NLL of ``sigmoid(logits / T)`` over a log grid (temperature scaling)."""
    best, best_t = math.inf, 1.0
    for temp in grid:
        nll = float(nn.functional.binary_cross_entropy_with_logits(logits / temp, labels))
        if nll < best:
            best, best_t = nll, float(temp)
    return best_t

"""A ``torch.optim.Optimizer`` from a paper: AcceleGrad# training a small MLP with mini-batches.

Paper: *AcceleGrad#* (NeurIPS 2026 submission; registry slug ``accelegrad_sharp``): an accelerated
linear coupling of an adaptive (AdaGrad) anchor with a norm-aware geometry step (a clipped
linear-minimisation-oracle step: spectral norm for matrices, l2 for vectors, Scion-style).

What it shows: ``AcceleGradSharp`` drops into the ordinary PyTorch loop (``zero_grad``, ``backward``,
``step``) on a two-layer MLP classifying a generated data set (labels from a random nonlinear rule); its
``evaluation_params()`` context loads the point to evaluate (the last geometry iterate ``y``; the
parameters hold the coupling point ``x`` between steps); its ``state_dict`` round trip resumes training
exactly, as a checkpoint would. ``torch.optim.AdamW`` runs the same loop for reference.

Run: ``python examples/optim_accelegrad_sharp.py``.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from neurips26.optim import AcceleGradSharp

EPOCHS = 4
BATCH = 64


def make_data(seed: int) -> tuple[torch.Tensor, ...]:
    """1024 train and 512 test points in 8 dimensions; label = sign of a random sine feature."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1536, 8, generator=g)
    w = torch.randn(8, 2, generator=g)
    y = (torch.sin(x @ w).sum(1) > 0).long()
    return x[:1024], y[:1024], x[1024:], y[1024:]


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 2))


def train(
    model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, seed: int, epochs: int
):
    """Mini-batch training; returns the mean training loss of every epoch."""
    g = torch.Generator().manual_seed(seed)
    curve = []
    for _ in range(epochs):
        perm, total = torch.randperm(len(x), generator=g), 0.0
        for i in range(0, len(x), BATCH):
            idx = perm[i : i + BATCH]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        curve.append(total / len(x))
    return curve


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    logits = model(x)
    return float(nn.functional.cross_entropy(logits, y)), float((logits.argmax(1) == y).float().mean())


def main(seed: int = 0) -> dict:
    """Train with AcceleGrad# and AdamW; check that a saved optimizer state resumes identically.

    Returns
    -------
    dict
        ``initial_loss`` (test loss before training), ``train_curve`` (AcceleGrad# mean train loss per
        epoch), ``test_loss``/``test_acc`` (at the evaluation point), ``adamw_test_loss``/``adamw_test_acc``,
        ``resume_max_diff`` (largest weight difference between an uninterrupted run and one resumed from a
        ``state_dict`` checkpoint; 0.0 means identical).
    """
    xtr, ytr, xte, yte = make_data(seed)
    model = make_model(seed)
    initial_loss, _ = evaluate(model, xte, yte)
    opt = AcceleGradSharp(model.parameters(), lr=0.1)  # norm="auto": spectral for matrices, l2 for biases
    curve = train(model, opt, xtr, ytr, seed, EPOCHS)
    with opt.evaluation_params():  # evaluate at y (the parameters hold the coupling point x)
        test_loss, test_acc = evaluate(model, xte, yte)

    baseline = make_model(seed)
    adamw = torch.optim.AdamW(baseline.parameters(), lr=3e-3)
    train(baseline, adamw, xtr, ytr, seed, EPOCHS)
    adamw_loss, adamw_acc = evaluate(baseline, xte, yte)

    # checkpoint after 2 epochs, restore into fresh objects, train 1 more: equals 3 uninterrupted epochs
    straight = make_model(seed)
    opt_s = AcceleGradSharp(straight.parameters(), lr=0.1)
    train(straight, opt_s, xtr, ytr, seed, 2)
    ckpt = copy.deepcopy({"model": straight.state_dict(), "opt": opt_s.state_dict()})  # as torch.save would
    train(straight, opt_s, xtr, ytr, seed + 1, 1)
    resumed = make_model(seed + 100)  # different initial weights, overwritten by the checkpoint
    resumed.load_state_dict(ckpt["model"])
    opt_r = AcceleGradSharp(resumed.parameters(), lr=0.1)
    opt_r.load_state_dict(ckpt["opt"])
    train(resumed, opt_r, xtr, ytr, seed + 1, 1)
    resume_diff = max(
        float((a - b).detach().abs().max()) for a, b in zip(straight.parameters(), resumed.parameters())
    )

    print(f"test loss before {initial_loss:.3f}")
    print("AcceleGrad# train loss per epoch: " + ", ".join(f"{v:.3f}" for v in curve))
    print(f"AcceleGrad# test loss {test_loss:.3f}, accuracy {test_acc:.3f}")
    print(f"AdamW       test loss {adamw_loss:.3f}, accuracy {adamw_acc:.3f}")
    print(f"resumed from a state_dict checkpoint: max weight difference {resume_diff:.1e}")
    return {
        "initial_loss": initial_loss,
        "train_curve": curve,
        "test_loss": test_loss,
        "test_acc": test_acc,
        "adamw_test_loss": adamw_loss,
        "adamw_test_acc": adamw_acc,
        "resume_max_diff": resume_diff,
    }


if __name__ == "__main__":
    torch.set_num_threads(1)  # a small model runs fastest on one thread
    main()

"""Claim check for ANCRe: learned shortcut sources converge faster than plain and uniform-dense residuals.

E1 (mechanism): a deep linear residual network fitted by full-batch gradient descent; iterations to a
target loss. E2 (practical): a deep pre-norm MLP-ResNet on scikit-learn's digits trained with AdamW;
area under the training-loss curve, steps to a target loss, test accuracy and per-step overhead.
All arms share blocks (same seeded initialisation), data, batches and optimiser.

ANCRe's residual initialisation puts the logit ``tau * log(p (n_max - 1) / (1 - p))`` on every
block's predecessor, so that each block starts with at least weight ``p`` (``init_pred_weight``) on
its predecessor however many sources it has: at initialisation ANCRe is (nearly) the plain residual
network, as the paper's residual initialisation intends.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Headline, SeedResult
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.nn.ancre import ANCReConnector, ANCReSequential, parameter_overhead, uniform_dense_connector
from neurips26.testbeds.residual_mlp import ConnectedResMLP

METHOD = "ancre"
BASELINES = ("plain", "uniform_dense")
ARMS = (METHOD, *BASELINES)
REFERENCES = ("init",)


def residual_init_logit(num_blocks: int, config: dict) -> float:
    """Predecessor logit giving weight >= ``init_pred_weight`` to the predecessor in every block.

    Block ``k >= 2`` has ``k - 1`` sources; the softmax weight of the predecessor with logit ``c`` (others
    0) is ``e^{c/tau} / (e^{c/tau} + k - 2)``, smallest for the last block.
    """
    p, others = config["init_pred_weight"], max(1, num_blocks - 2)
    return config["tau"] * math.log(p * others / (1.0 - p))


def _connector(arm: str, k: int, config: dict) -> ANCReConnector:
    if arm == "plain":
        return ANCReConnector.fixed_residual(k)
    if arm == "uniform_dense":
        return uniform_dense_connector(k)
    return ANCReConnector(k, tau=config["tau"], init="residual", init_logit=residual_init_logit(k, config))


def _param_groups(model: nn.Module, lr: float, config: dict) -> list[dict]:
    """Connector logits get ``logit_lr_mult`` x the blocks' learning rate (the paper's schedule for c is not public)."""
    logits = [p for n, p in model.named_parameters() if n.endswith("logits")]
    rest = [p for n, p in model.named_parameters() if not n.endswith("logits")]
    return [{"params": rest}] + ([{"params": logits, "lr": lr * config["logit_lr_mult"]}] if logits else [])


def _pred_weight_min(connector: ANCReConnector) -> float:
    """Smallest weight any block puts on its predecessor (1 for the plain residual network)."""
    w = connector.topology()
    k = w.shape[0]
    return float(w[torch.arange(k), torch.arange(k)].min())


def _steps_to(curve: list[float], target: float, window: int = 1) -> int:
    """First 1-based step whose trailing mean over ``window`` steps is <= target; len+1 if never."""
    arr = np.asarray(curve, dtype=float)
    if window > 1:
        arr = np.convolve(arr, np.ones(window) / window, mode="valid")
        offset = window - 1
    else:
        offset = 0
    hits = np.flatnonzero(arr <= target)
    return int(hits[0] + 1 + offset) if hits.size else len(curve) + 1


# ----------------------------------------------------------------------------- E1
def _e1(arm: str, config: dict, seed: int) -> dict[str, Any]:
    d, k, n = config["e1_dim"], config["e1_blocks"], config["e1_samples"]
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen)
    u, _ = torch.linalg.qr(torch.randn(d, d, generator=gen))
    v, _ = torch.linalg.qr(torch.randn(d, d, generator=gen))
    s = torch.linspace(config["e1_sigma"][0], config["e1_sigma"][1], d)
    m = u @ torch.diag(s) @ v.T
    y = x @ m.T
    blocks = nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(k))
    for b in blocks:
        nn.init.zeros_(b.weight)
    model = ANCReSequential(blocks, _connector(arm, k, config))
    pred_w0 = _pred_weight_min(model.connector)
    with torch.no_grad():
        init_loss = float((model(x) - y).pow(2).mean())
    opt = torch.optim.SGD(_param_groups(model, config["e1_lr"], config), lr=config["e1_lr"], foreach=True)
    losses = []
    for _ in range(config["e1_iters"]):
        opt.zero_grad()
        loss = (model(x) - y).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if not math.isfinite(losses[-1]) or losses[-1] < config["e1_target"] * 1e-3:
            break
    losses += [losses[-1]] * (config["e1_iters"] - len(losses))
    return {
        "steps": _steps_to(losses, config["e1_target"]),
        "final": losses[-1],
        "init_loss": init_loss,
        "pred_w0": pred_w0,
        "curve": losses,
        "topology": model.topology().tolist(),
    }


# ----------------------------------------------------------------------------- E2
def _e2(arm: str, config: dict, seed: int, data) -> dict[str, Any]:
    xtr, ytr, xte, yte = data
    k = config["e2_blocks"]
    model = ConnectedResMLP(
        _connector(arm, k, config), width=config["e2_width"], hidden=config["e2_hidden"], blocks=k, seed=seed
    )
    pred_w0 = _pred_weight_min(model.body.connector)
    with torch.no_grad():
        init_loss = float(nn.functional.cross_entropy(model(xtr), ytr))
    opt = torch.optim.AdamW(
        _param_groups(model, config["e2_lr"], config), lr=config["e2_lr"], weight_decay=0.0, foreach=True
    )
    gen = torch.Generator().manual_seed(seed + 1)
    losses, times = [], []
    for _ in range(config["e2_steps"]):
        idx = torch.randint(0, len(ytr), (config["e2_batch"],), generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xtr[idx]), ytr[idx])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
    with torch.no_grad():
        acc = float((model(xte).argmax(1) == yte).float().mean())
    return {
        "auc": float(np.mean(losses)),
        "final_loss": float(np.mean(losses[-max(1, len(losses) // 10) :])),
        "init_loss": init_loss,
        "pred_w0": pred_w0,
        "steps": _steps_to(losses, config["e2_target"], window=20),
        "acc": acc,
        "curve": losses,
        "step_ms": 1e3 * float(np.median(times[len(times) // 5 :])),
        "params": sum(p.numel() for p in model.parameters()),
        "overhead": parameter_overhead(model),
        "topology": model.body.topology().tolist(),
    }


def _digits():
    from neurips26.common.datasets import load_digits, train_test_split

    x, y = load_digits()
    tr, te = train_test_split(len(y), 597 / 1797, seed=0, labels=y)
    return x[tr], y[tr], x[te], y[te]


def run(config: dict[str, Any], seed: int) -> SeedResult:
    e1 = {arm: _e1(arm, config, seed) for arm in ARMS}
    data = _digits()
    e2 = {arm: _e2(arm, config, seed, data) for arm in ARMS}
    metrics = {
        "e1_steps_to_target": {a: float(r["steps"]) for a, r in e1.items()},
        "e1_log10_final_loss": {a: math.log10(max(r["final"], 1e-30)) for a, r in e1.items()},
        "e2_loss_auc": {a: r["auc"] for a, r in e2.items()},
        "e2_final_train_loss": {a: r["final_loss"] for a, r in e2.items()},
        "e2_steps_to_target": {a: float(r["steps"]) for a, r in e2.items()},
        "e2_test_acc": {a: r["acc"] for a, r in e2.items()},
        "e2_step_time_ratio": {a: r["step_ms"] / e2["plain"]["step_ms"] for a, r in e2.items()},
        "init_pred_weight_min": {a: min(e1[a]["pred_w0"], e2[a]["pred_w0"]) for a in ARMS},
        "e2_param_overhead": {METHOD: e2[METHOD]["overhead"]["fraction"]},
    }
    # the untrained networks (identical for every arm up to the connector; plain's is the reference)
    metrics["e1_log10_final_loss"]["init"] = math.log10(max(e1["plain"]["init_loss"], 1e-30))
    metrics["e2_final_train_loss"]["init"] = e2["plain"]["init_loss"]
    stride = max(1, config["e1_iters"] // 200)
    curves = {
        "e1_train_loss": {a: r["curve"][::stride] for a, r in e1.items()},
        "e2_train_loss": {a: r["curve"][:: max(1, config["e2_steps"] // 200)] for a, r in e2.items()},
    }
    info = {
        "e2_step_ms": {a: r["step_ms"] for a, r in e2.items()},
        "e2_step_time_ratio_vs_plain": {a: r["step_ms"] / e2["plain"]["step_ms"] for a, r in e2.items()},
        "init_loss": {
            "e1": {a: r["init_loss"] for a, r in e1.items()},
            "e2": {a: r["init_loss"] for a, r in e2.items()},
        },
        "budget": {
            a: {
                "params": e2[a]["params"],
                "steps": {"e1": config["e1_iters"], "e2": config["e2_steps"]},
                "lr_grid": {"e1": [config["e1_lr"]], "e2": [config["e2_lr"]]},
            }
            for a in ARMS
        },
        "e2_params": {a: r["params"] for a, r in e2.items()},
        "e2_ancre_param_overhead": e2[METHOD]["overhead"],
        "e1_learned_topology": e1[METHOD]["topology"],
        "e2_learned_topology": e2[METHOD]["topology"],
    }
    return SeedResult(metrics=metrics, curves=curves, info=info)


def plot(result: dict, folder: Path) -> list[Path]:
    plt = pyplot()
    paths = []
    for name, arms in result.get("curves", {}).items():
        fig, ax = plt.subplots(figsize=(5, 3.5))
        for arm, runs in arms.items():
            ax.plot(np.asarray(runs[0], dtype=float), label=arm)
        ax.set_yscale("log")
        ax.set_title(name)
        ax.legend()
        paths.append(save_figure(fig, folder, f"ancre_{name}", dpi=100))
    for key in ("e1_learned_topology", "e2_learned_topology"):
        w = np.asarray(result["info"][0][key])
        fig, ax = plt.subplots(figsize=(4, 4))
        ax.imshow(w, cmap="viridis")
        ax.set_xlabel("source state j")
        ax.set_ylabel("block k")
        ax.set_title(key)
        paths.append(save_figure(fig, folder, f"ancre_{key}", dpi=100))
    return paths


_COMMON = dict(
    threads=1,
    tau=1.0,
    init_pred_weight=0.96,
    logit_lr_mult=10.0,
    e1_dim=16,
    e1_samples=2048,
    e1_sigma=(0.5, 2.0),
    e1_lr=0.05,
    e1_target=1e-3,
    e2_width=64,
    e2_hidden=128,
    e2_lr=1e-3,
    e2_batch=128,
    e2_target=0.05,
)

CLAIM = Claim(
    slug="ancre",
    claim=(
        "Learning where residual shortcuts come from (softmax mixtures over earlier layers, K(K-1)/2 scalars, "
        "initialised at the plain residual network) accelerates convergence compared with standard residual "
        "connections and a fixed uniform-dense connector, at under 1% parameter overhead and a small compute overhead."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        # ANCRe's residual initialisation really is residual: every block starts with >= 0.95 on its predecessor.
        AtLeast("init_pred_weight_min", threshold=0.95, kind="design", label="residual_init_is_residual"),
        # The plain residual network learns both testbeds by a declared amount.
        Better(
            "e1_log10_final_loss",
            arm="plain",
            baseline="init",
            margin=1.0,
            higher_is_better=False,
            label="plain_learns_e1",
        ),
        Better(
            "e2_final_train_loss",
            arm="plain",
            baseline="init",
            margin=1.0,
            higher_is_better=False,
            label="plain_learns_e2",
        ),
    ),
    criteria=(
        Better("e1_log10_final_loss", baseline="plain", higher_is_better=False, label="e1_vs_plain"),
        Better("e2_loss_auc", baseline="plain", higher_is_better=False, label="e2_auc_vs_plain"),
        Better(
            "e2_loss_auc", baseline="uniform_dense", higher_is_better=False, label="e2_auc_vs_uniform_dense"
        ),
        Better("e2_test_acc", baseline="plain", margin=-0.01, label="e2_acc_vs_plain"),
        AtMost("e2_step_time_ratio", threshold=1.05, min_seeds=2, kind="cost", label="compute_overhead"),
        AtMost("e2_param_overhead", threshold=0.01, kind="design", label="param_overhead"),
    ),
    headlines=(
        Headline(
            "Residual-connection layout can induce an exponential gap in convergence rate (deep linear example); "
            "ANCRe attains linear convergence there",
            criteria=("e1_vs_plain",),
        ),
        Headline(
            "Consistently accelerated convergence and better performance (LLM pre-training, diffusion, deep ResNets)",
            criteria=("e2_auc_vs_plain", "e2_auc_vs_uniform_dense", "e2_acc_vs_plain"),
            primary=True,  # the paper's main empirical result; the first headline is the theory's toy case
        ),
        Headline("Overhead < 1% compute and memory", criteria=("compute_overhead", "param_overhead")),
        Headline(
            "Parameterisation: coefficients c_ij, softmax routing with temperature tau, K(K-1)/2 added parameters",
            criteria=("param_overhead",),
        ),
        Headline(
            "Perplexity and FID gains (no numeric values found in accessible sources)",
            untested="LLM pre-training and diffusion models are beyond a CPU budget and there are no numbers to "
            "compare against; the digits MLP-ResNet (E2) stands in for the deep-ResNet setting",
        ),
    ),
    items={"e2_test_acc": {"smoke": 597, "quick": 597, "full": 597}},
    run=run,
    configs={
        "smoke": {
            **_COMMON,
            "e1_blocks": 4,
            "e1_iters": 30,
            "e1_samples": 256,
            "e2_blocks": 3,
            "e2_steps": 10,
        },
        "quick": {
            **_COMMON,
            "e1_blocks": 12,
            "e1_iters": 300,
            "e1_samples": 512,
            "e2_blocks": 12,
            "e2_steps": 200,
        },
        "full": {**_COMMON, "e1_blocks": 24, "e1_iters": 800, "e2_blocks": 32, "e2_steps": 500},
    },
    seeds={"smoke": (0,), "quick": (0, 1, 2), "full": (0, 1, 2)},
    implemented=(
        "ANCReConnector / ANCReSequential (learned softmax shortcut sources, tau 1, residual init with weight >= "
        "0.96 on every block's predecessor) vs the exact plain residual (fixed one-hot connector) and a fixed "
        "uniform dense connector, same blocks. E1: deep linear residual net (d=16, zero-initialised blocks, target "
        "with singular values in [0.5, 2]), full-batch SGD lr 0.05. E2: pre-norm MLP-ResNet (width 64, hidden 128) "
        "on digits, AdamW 1e-3, batch 128. Connector logits use 10x the blocks' learning rate in both. Per-step "
        "time (forward + backward + step, median over the last 80% of steps) is measured in the same run and "
        "reported as a ratio to plain's. References: the untrained network's loss (init)."
    ),
    differences=(
        "The paper's experiments (LLM pre-training, diffusion, deep ResNets on images) are replaced by CPU-scale "
        "E1/E2 from the spec. Full profile: E1 800 iterations (spec 3,000) and E2 500 steps (spec 3,000), 3 seeds "
        "(spec 5: 5 seeds do not fit the 10-minute budget on 2 shared cores); quick: E1 K=12 with 512 samples and "
        "300 iterations, E2 K=12, 200 steps. The schema-1 run initialised the predecessor logit at 3, which with "
        "up to 31 sources gave the predecessor only ~0.4 of the weight, so ANCRe started far from the residual "
        "network; the predecessor logit now scales with the number of sources (premise residual_init_is_residual). "
        "E1's criterion uses the final log10 loss (the spec's loss-vs-iteration curve) because iterations-to-1e-3 "
        "hit the cap for every arm in a trial run; iterations-to-target is still reported. The connector's "
        "logits use 10x the blocks' learning rate (the paper's schedule for c is not public): with a saturated "
        "softmax at initialisation their gradients are small. The compute-overhead bound is the spec's CPU "
        "prediction (< 5% per step), not the paper's < 1% at GPU scale; step time is wall-clock on a shared CPU."
    ),
    data="Synthetic Gaussian inputs and a seeded random linear target (E1); scikit-learn digits, 1,200/597 split (E2).",
    glossary={
        "e1_steps_to_target": "first full-batch GD iteration whose MSE <= 1e-3 (iterations + 1 if never reached)",
        "e1_log10_final_loss": "log10 of the E1 training MSE after the last iteration; init = the untrained network",
        "e2_loss_auc": "mean mini-batch training cross-entropy over all E2 steps (area under the loss curve / steps)",
        "e2_final_train_loss": "mean mini-batch training cross-entropy over the last 10% of E2 steps; init = full "
        "training-set cross-entropy of the untrained network",
        "e2_steps_to_target": "first step whose 20-step trailing mean training loss <= 0.05 (steps + 1 if never)",
        "e2_test_acc": "top-1 accuracy on the 597 held-out digits after training",
        "e2_step_time_ratio": "median E2 training-step wall time (forward, backward, optimizer) of the arm / plain's, "
        "same seed and run",
        "init_pred_weight_min": "smallest weight any block puts on its predecessor at initialisation, over E1 and E2",
        "e2_param_overhead": "ANCRe's connection scalars / all other parameters of the E2 network",
    },
    plot=plot,
)

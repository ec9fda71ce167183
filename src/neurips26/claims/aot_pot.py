"""Claim check for AOT-POT: multi-stream Sinkhorn residuals vs single-stream and parameter-matched operators.

Multi-PDE pre-training on the library's own seeded 1-D solvers (advection, diffusion, viscous Burgers,
Allen-Cahn; the family coefficient is hidden from the model), one-step and 10-step rollout relative
L2 per family on held-out trajectories, the mHC stability diagnostic, and fine-tuning on the unseen
KdV family. A persistence arm (the last input frame as the prediction) is the floor every trained
model must beat; how far the stream maps move from their initialisation is measured on probe windows.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Headline, RatioAtLeast, SeedResult
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.pde import generate, relative_l2
from neurips26.nn.aot_pot import (
    OperatorTransformer,
    ar_denoising_loss,
    composite_amax_gain,
    expand_streams,
    match_width,
)

METHOD = "aot_pot"
BASELINES = ("dpot", "dpot_wide")
ARMS = (METHOD, *BASELINES)
REFERENCES = ("persistence",)
#: Parameters of the multi-stream maps (trained with ``map_lr_mult`` x the base learning rate).
MAP_PARAMS = ("b_pre", "b_post", "b_res", "phi", "alpha")


def _windows(u: np.ndarray, t_in: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All (t_in past frames -> next frame) pairs: ``(M, t_in, 1, X)`` and ``(M, 1, X)``."""
    n, nt, nx = u.shape
    xs = np.stack([u[:, i : i + t_in] for i in range(nt - t_in)], axis=1).reshape(-1, t_in, 1, nx)
    ys = np.stack([u[:, i + t_in] for i in range(nt - t_in)], axis=1).reshape(-1, 1, nx)
    return torch.from_numpy(xs).float(), torch.from_numpy(ys).float()


def _model(arm: str, config: dict, seed: int, dims: dict[str, int]) -> OperatorTransformer:
    kw = dict(
        in_channels=1,
        out_channels=1,
        t_in=config["t_in"],
        patch=config["patch"],
        depth=config["depth"],
        modes=config["modes"],
    )
    torch.manual_seed(seed)
    if arm == METHOD:
        return OperatorTransformer(
            dim=config["dim"],
            residual="aot",
            n_streams=config["n_streams"],
            alpha_init=config["alpha_init"],
            stream_init=config["stream_init"],
            **kw,
        )
    return OperatorTransformer(dim=dims[arm], residual="standard", **kw)


def _train(model, xs, ys, steps: int, config: dict, seed: int) -> tuple[list[float], float]:
    named = list(model.named_parameters())
    maps = [p for n, p in named if n.rsplit(".", 1)[-1] in MAP_PARAMS]
    rest = [p for n, p in named if n.rsplit(".", 1)[-1] not in MAP_PARAMS]
    groups = [{"params": rest}] + (
        [{"params": maps, "lr": config["lr"] * config["map_lr_mult"]}] if maps else []
    )
    opt = torch.optim.AdamW(groups, lr=config["lr"], weight_decay=1e-4, foreach=True)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    gen = torch.Generator().manual_seed(seed + 7)
    losses, times = [], []
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, len(ys), (config["batch"],), generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = ar_denoising_loss(model, xs[idx], ys[idx], noise=config["noise"], generator=gen)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config["clip"])
        opt.step()
        sched.step()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
    return losses, 1e3 * float(np.median(times[len(times) // 5 :]))


@torch.no_grad()
def _evaluate(model, u: np.ndarray, config: dict) -> tuple[float, float]:
    model.eval()
    xs, ys = _windows(u, config["t_in"])
    one = float(relative_l2(model(xs), ys))
    start = torch.from_numpy(u[:, : config["t_in"]]).float().unsqueeze(2)
    horizon = min(config["rollout_steps"], u.shape[1] - config["t_in"])
    pred = model.rollout(start, horizon)
    target = torch.from_numpy(u[:, config["t_in"] : config["t_in"] + horizon]).float().unsqueeze(2)
    return one, float(relative_l2(pred, target))


@torch.no_grad()
def _stream_maps(model: OperatorTransformer, probe: torch.Tensor) -> list[torch.Tensor]:
    """Every sub-layer's (H_pre, H_post, H_res) on ``probe`` windows, flattened per sub-layer."""
    b, t, c, x = probe.shape
    h = expand_streams(model.embed(probe.reshape(b, t * c, x)).transpose(1, 2), model.n_streams)
    out = []
    for layer in model.layers:
        h, maps = layer(h, return_maps=True)
        out.append(torch.cat([maps[k].flatten() for k in ("pre", "post", "res")]))
    return out


@torch.no_grad()
def _persistence(u: np.ndarray, config: dict) -> tuple[float, float]:
    """One-step and rollout relative L2 of predicting the last input frame (the same windows as _evaluate)."""
    xs, ys = _windows(u, config["t_in"])
    one = float(relative_l2(xs[:, -1], ys))
    horizon = min(config["rollout_steps"], u.shape[1] - config["t_in"])
    last = torch.from_numpy(u[:, config["t_in"] - 1 : config["t_in"]]).float().unsqueeze(2)
    target = torch.from_numpy(u[:, config["t_in"] : config["t_in"] + horizon]).float().unsqueeze(2)
    return one, float(relative_l2(last.expand_as(target), target))


def run(config: dict[str, Any], seed: int) -> SeedResult:
    return _run(config, seed)


def _run(config: dict[str, Any], seed: int) -> SeedResult:
    fams = config["families"]
    gen_kw = dict(nx=config["nx"], nt=config["nt"])
    train = {f: generate(f, config["n_train"], seed=seed, **gen_kw).u for f in fams}
    test = {f: generate(f, config["n_test"], seed=10_000 + seed, **gen_kw).u for f in fams}
    pairs = [_windows(train[f], config["t_in"]) for f in fams]
    xs = torch.cat([p[0] for p in pairs])
    ys = torch.cat([p[1] for p in pairs])
    method_params = sum(p.numel() for p in _model(METHOD, config, seed, {}).parameters())
    arch = {k: config[k] for k in ("t_in", "patch", "depth", "modes")}
    dims = {
        "dpot": config["dim"],
        "dpot_wide": match_width(method_params, in_channels=1, out_channels=1, **arch),
    }
    metrics: dict[str, dict[str, float]] = {
        "one_step_rel_l2": {},
        "rollout_rel_l2": {},
        "amax_gain_deviation": {},
        "params": {},
    }
    curves: dict[str, dict[str, list[float]]] = {"train_loss": {}}
    info: dict[str, Any] = {
        "per_family_one_step": {},
        "per_family_rollout": {},
        "params": {},
        "step_ms": {},
        "width": {**dims, METHOD: config["dim"]},
        "amax_gain": {},
        "budget": {},
    }
    per_one, per_roll = {}, {}
    for f in fams:
        per_one[f], per_roll[f] = _persistence(test[f], config)
    metrics["one_step_rel_l2"]["persistence"] = float(np.mean(list(per_one.values())))
    metrics["rollout_rel_l2"]["persistence"] = float(np.mean(list(per_roll.values())))
    info["per_family_one_step"]["persistence"] = per_one
    info["per_family_rollout"]["persistence"] = per_roll
    probe = torch.cat([_windows(test[f][:4], config["t_in"])[0] for f in fams])
    models = {}
    for arm in ARMS:
        model = _model(arm, config, seed, dims)
        if arm == METHOD:
            maps_init = _stream_maps(model, probe)
        losses, step_ms = _train(model, xs, ys, config["steps"], config, seed)
        models[arm] = model
        per_one, per_roll = {}, {}
        for f in fams:
            per_one[f], per_roll[f] = _evaluate(model, test[f], config)
        metrics["one_step_rel_l2"][arm] = float(np.mean(list(per_one.values())))
        metrics["rollout_rel_l2"][arm] = float(np.mean(list(per_roll.values())))
        info["per_family_one_step"][arm] = per_one
        info["per_family_rollout"][arm] = per_roll
        n_params = sum(p.numel() for p in model.parameters())
        info["params"][arm] = n_params
        metrics["params"][arm] = float(n_params)
        info["step_ms"][arm] = step_ms
        lr_grid = [config["lr"]]
        info["budget"][arm] = {"params": n_params, "steps": config["steps"], "lr_grid": lr_grid}
        curves["train_loss"][arm] = losses[:: max(1, len(losses) // 200)]
        if arm == METHOD:
            maps_end = _stream_maps(model, probe)
            shifts = [float((a - b).abs().mean()) for a, b in zip(maps_end, maps_init)]
            metrics["stream_map_shift"] = {METHOD: float(np.mean(shifts))}
            info["stream_map_shift_per_layer"] = shifts
            with torch.no_grad():
                _, maps = model(probe[:8], return_maps=True)
            fwd, bwd = composite_amax_gain(maps)
            info["amax_gain"][arm] = {"forward": fwd, "backward": bwd}
            metrics["amax_gain_deviation"][arm] = max(abs(fwd - 1.0), abs(bwd - 1.0))
        else:
            metrics["amax_gain_deviation"][arm] = 0.0  # single stream: the residual map is exactly 1
    if config["finetune_steps"]:
        kdv_train = generate("kdv", config["kdv_train"], seed=seed, **gen_kw).u
        kdv_test = generate("kdv", config["kdv_test"], seed=10_000 + seed, **gen_kw).u
        kx, ky = _windows(kdv_train, config["t_in"])
        metrics["kdv_finetune_rel_l2"], metrics["kdv_finetune_rollout_rel_l2"] = {}, {}
        pers = _persistence(kdv_test, config)
        (
            metrics["kdv_finetune_rel_l2"]["persistence"],
            metrics["kdv_finetune_rollout_rel_l2"]["persistence"],
        ) = pers
        info["kdv_zero_shot_rel_l2"] = {}
        for arm, model in models.items():
            info["kdv_zero_shot_rel_l2"][arm] = _evaluate(model, kdv_test, config)[0]
            _train(model, kx, ky, config["finetune_steps"], {**config, "lr": config["finetune_lr"]}, seed + 1)
            one, roll = _evaluate(model, kdv_test, config)
            metrics["kdv_finetune_rel_l2"][arm] = one
            metrics["kdv_finetune_rollout_rel_l2"][arm] = roll
    base = metrics["one_step_rel_l2"]["dpot"]
    info["relative_reduction_vs_dpot"] = (
        1.0 - metrics["one_step_rel_l2"][METHOD] / base if base > 0 else math.nan
    )
    info["param_overhead_vs_dpot"] = info["params"][METHOD] / info["params"]["dpot"] - 1.0
    info["step_time_ratio_vs_dpot"] = {a: info["step_ms"][a] / info["step_ms"]["dpot"] for a in ARMS}
    return SeedResult(metrics=metrics, curves=curves, info=info)


def plot(result: dict, folder: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for arm, runs in result["curves"]["train_loss"].items():
        ax.plot(np.asarray(runs[0], dtype=float), label=arm)
    ax.set_yscale("log")
    ax.set_title("training relative L2 (seed 0)")
    ax.legend()
    paths = [save_figure(fig, folder, "aot_pot_train_loss", dpi=100)]
    per = result["info"][0]["per_family_one_step"]
    fams = list(next(iter(per.values())))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    width = 0.8 / len(per)
    for i, (arm, vals) in enumerate(per.items()):
        ax.bar(np.arange(len(fams)) + i * width, [vals[f] for f in fams], width, label=arm)
    ax.set_xticks(np.arange(len(fams)) + 0.4 - width / 2)
    ax.set_xticklabels(fams)
    ax.set_ylabel("one-step relative L2")
    ax.legend()
    paths.append(save_figure(fig, folder, "aot_pot_per_family", dpi=100))
    return paths


_COMMON = dict(
    threads=1,
    clip=1.0,
    nx=64,
    nt=20,
    t_in=4,
    patch=4,
    dim=48,
    depth=4,
    modes=8,
    n_streams=4,
    alpha_init=0.01,
    stream_init="cyclic",
    map_lr_mult=10.0,
    batch=64,
    lr=1e-3,
    noise=1e-2,
    rollout_steps=10,
    finetune_lr=5e-4,
    kdv_train=32,
    kdv_test=32,
)

_FAMILIES = ("advection", "diffusion", "burgers", "allen_cahn")


def _items(families: int, n_test: int, nt: int, t_in: int = 4) -> tuple[int, int]:
    """Evaluation items per seed: (one-step windows, rollout trajectories)."""
    return families * n_test * (nt - t_in), families * n_test


CLAIM = Claim(
    slug="aot_pot",
    claim=(
        "Widening the residual stream into n Sinkhorn-mixed streams with input-dependent aggregation and "
        "redistribution (AOT-POT) lowers the relative L2 error of a multi-PDE pre-trained operator transformer "
        "compared with the single-stream model and a parameter-matched wider model, also after fine-tuning on an "
        "unseen PDE, while the composite stream map stays non-expansive."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        # The multi-stream maps (H_pre, H_post, H_res) leave their initialisation during training.
        AtLeast("stream_map_shift", threshold=0.05, label="stream_maps_move"),
        # The single-stream baseline learns: one-step error at most half of persistence's, rollout below it.
        RatioAtLeast(
            "one_step_rel_l2", arm="persistence", baseline="dpot", ratio=2.0, label="dpot_beats_persistence"
        ),
        Better(
            "rollout_rel_l2",
            arm="dpot",
            baseline="persistence",
            higher_is_better=False,
            label="dpot_rollout_beats_persistence",
        ),
    ),
    criteria=(
        Better("one_step_rel_l2", baseline="dpot", higher_is_better=False, label="one_step_vs_dpot"),
        Better(
            "one_step_rel_l2", baseline="dpot_wide", higher_is_better=False, label="one_step_vs_dpot_wide"
        ),
        Better("rollout_rel_l2", baseline="dpot", higher_is_better=False, label="rollout_vs_dpot"),
        Better("rollout_rel_l2", baseline="dpot_wide", higher_is_better=False, label="rollout_vs_dpot_wide"),
        Better("kdv_finetune_rel_l2", baseline="dpot", higher_is_better=False, label="kdv_finetune_vs_dpot"),
        AtMost("amax_gain_deviation", threshold=1e-2, kind="design", label="amax_gain"),
        RatioAtLeast(
            "params", arm="dpot_wide", baseline=METHOD, ratio=1.0, kind="design", label="wide_param_matched"
        ),
    ),
    headlines=(
        Headline(
            "State of the art on 12 PDE benchmarks with 3% additional parameters; relative L2 reduced by up to "
            "77.6% and by 40.9% on average",
            criteria=(
                "one_step_vs_dpot",
                "one_step_vs_dpot_wide",
                "rollout_vs_dpot",
                "rollout_vs_dpot_wide",
                "wide_param_matched",
            ),
        ),
        Headline(
            "Fine-tuning reduces L2 error by up to 92% in-domain and 89% on PDE types unseen in pre-training",
            criteria=("kdv_finetune_vs_dpot",),
        ),
        Headline(
            "Sinkhorn projection onto the Birkhoff polytope (t_max = 20, n = 4) keeps the composite stream map "
            "non-expansive",
            criteria=("amax_gain",),
        ),
        Headline(
            "6.7% time overhead at LLM scale",
            untested="an LLM-scale measurement; at d=48 the stream maps are a large share of the compute, so the "
            "step-time ratio (info.step_time_ratio_vs_dpot) is reported but says nothing about LLM scale",
        ),
    ),
    items={
        "one_step_rel_l2": {
            "smoke": _items(2, 4, 8)[0],
            "quick": _items(3, 8, 20)[0],
            "full": _items(4, 16, 20)[0],
        },
        "rollout_rel_l2": {
            "smoke": _items(2, 4, 8)[1],
            "quick": _items(3, 8, 20)[1],
            "full": _items(4, 16, 20)[1],
        },
        "kdv_finetune_rel_l2": {"smoke": 2 * 4, "quick": 8 * 16, "full": 16 * 16},
    },
    run=run,
    configs={
        "smoke": {
            **_COMMON,
            "families": ("advection", "diffusion"),
            "n_train": 4,
            "n_test": 4,
            "nt": 8,
            "dim": 16,
            "depth": 1,
            "steps": 3,
            "batch": 8,
            "rollout_steps": 3,
            "finetune_steps": 2,
            "kdv_train": 2,
            "kdv_test": 2,
        },
        "quick": {
            **_COMMON,
            "families": ("advection", "diffusion", "burgers"),
            "n_train": 32,
            "n_test": 8,
            "dim": 32,
            "depth": 2,
            "batch": 32,
            "steps": 80,
            "finetune_steps": 10,
            "kdv_train": 8,
            "kdv_test": 8,
        },
        "full": {
            **_COMMON,
            "families": _FAMILIES,
            "n_train": 64,
            "n_test": 16,
            "batch": 32,
            "steps": 400,
            "finetune_steps": 60,
            "kdv_train": 16,
            "kdv_test": 16,
        },
    },
    seeds={"smoke": (0,), "quick": (0, 1, 2), "full": (0, 1, 2)},
    implemented=(
        "MultiStreamResidual (mHC maps: dynamic pre/post sigmoid gates, log-space Sinkhorn-Knopp H_res, 20 "
        "iterations, n=4) around every sub-layer of a DPOT-style 1-D OperatorTransformer (patch 4 -> 16 tokens, "
        "d=48, 4 blocks = 8 sub-layers of AFNO-like Fourier mixing + channel MLP, pre-norm, predicts the increment "
        "over the last frame); baselines: the same transformer with standard residuals (d=48) and a standard one "
        "widened until it has at least AOT-POT's parameters; reference: persistence (the last input frame). "
        "Auto-regressive denoising loss (noise 1e-2 std), relative L2, AdamW 1e-3 with cosine decay, gradient-norm "
        "clipping at 1; the stream-map parameters (b_pre, b_post, b_res, phi, alpha) use 10x the base learning "
        "rate, and sub-layer l initially reads stream l mod n (hyper-connections' initialisation; b_pre = "
        "2(2 e_k - 1)); KdV fine-tuning (lr 5e-4) from each pre-trained model."
    ),
    differences=(
        "Paper: 12 PDE benchmarks (2-D/3-D), large DPOT backbones, ~3% parameter overhead. Here: 1-D periodic "
        "families generated by our solvers at nx=64, tiny models where the stream maps add ~43% parameters (hence "
        "the parameter-matched column). Full profile: 64 training trajectories per family, batch 32 and 400 steps "
        "(spec: 256, 64 and 2,500), 60 KdV fine-tuning steps on 16 trajectories (spec: 300 on 32), 3 seeds (5 "
        "seeds fit the 10-minute budget only at ~240 steps, and the premise asks for the longest training that "
        "fits; AOT-POT's step costs ~4x DPOT's on a CPU, mostly the 20 Sinkhorn iterations per sub-layer); quick: "
        "3 families x 32 trajectories, d=32, 2 blocks, 80 steps, 10 KdV steps on 8 trajectories, 3 seeds. These "
        "budgets are far below convergence. In the schema-1 run (mean-read initialisation, one learning rate, 200 "
        "steps) the replicated streams stayed identical and the maps did not move, so AOT-POT was DPOT in "
        "disguise; the cyclic read initialisation breaks the streams' symmetry and the 10x map learning rate lets "
        "the maps move inside the CPU budget (the paper's schedule for the maps is not public). The premise "
        "stream_maps_move checks that they did. H_pre is 2/n * sigmoid (mean aggregation at zero bias) rather "
        "than mHC's plain sigmoid; no positional embedding (translation-equivariant problems). Data seeds follow "
        "the model seed."
    ),
    data="Generated by neurips26.common.pde (seeded, cached): advection, diffusion, viscous Burgers, Allen-Cahn; KdV "
    "held out for fine-tuning.",
    glossary={
        "one_step_rel_l2": "mean over families of the mean per-window relative L2 ||pred - u_next|| / ||u_next|| "
        "(neuraloperator LpLoss p=2) on held-out trajectories, all (4 frames -> next) windows; persistence "
        "predicts the last input frame",
        "rollout_rel_l2": "mean over families of the per-trajectory relative L2 of a 10-step autoregressive "
        "rollout from the first 4 frames (norms over all rolled-out frames); persistence repeats frame 4",
        "amax_gain_deviation": "max(|forward gain - 1|, |backward gain - 1|) of the composite product of the "
        "H_res maps (max abs row / column sum, max over probe tokens); 0 for single-stream models",
        "params": "trainable parameters of the arm's model",
        "stream_map_shift": "mean over sub-layers of the mean absolute change of the entries of (H_pre, H_post, "
        "H_res) between initialisation and the end of pre-training, on the same probe windows (4 held-out "
        "trajectories per family)",
        "kdv_finetune_rel_l2": "one-step relative L2 on held-out KdV after fine-tuning each pre-trained model",
        "kdv_finetune_rollout_rel_l2": "10-step rollout relative L2 on held-out KdV after fine-tuning",
    },
    plot=plot,
)

"""Claim check for FedRevive: faster time-to-accuracy and higher final accuracy than FedBuff/FedAsync.

Harness: scikit-learn digits, Dirichlet(0.3) label skew over ``N`` Flower ``ClientApp`` clients,
MLP 64-128(BN)-64(BN)-10, heterogeneous LogNormal job times (20% of clients 5x slower). Every arm
is an :class:`~neurips26.federated.flower.AsyncFedAvg` strategy driven through Flower's message API
(:class:`~neurips26.federated.flower.GridTransport` over the in-process ``LocalGrid``) by the same
simulated-clock :class:`~neurips26.federated.fedrevive.AsyncSimulator`. Client job durations and
seeds depend only on the dispatch order, which is identical across asynchronous arms, so all arms
see the same arrival schedule and differ only in the server rule. The time budget is the simulated
time FedBuff needs for ``server_steps`` steps.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from neurips26.claims.base import Better, Claim, SeedResult
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.cache import cached_object
from neurips26.common.datasets import dirichlet_partition, load_digits, train_test_split
from neurips26.common.threads import torch_threads
from neurips26.federated.fedrevive import (
    ClientSpeedModel,
    FedAsync,
    FedBuff,
    FedRevive,
    SyncFedAvg,
    time_to_target,
)
from neurips26.federated.flower import AsyncFedAvg, ClientSetup, local_sgd, make_client_app, run_async

METHOD = "FedRevive"
BASELINES = ("FedBuff", "FedAsync")


def _model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(64, 128), nn.BatchNorm1d(128), nn.ReLU(),
        nn.Linear(128, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 10),
    )  # fmt: skip


def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def _central_accuracy(seed: int, xtr, ytr, xte, yte, epochs: int) -> float:
    def build() -> float:
        torch.manual_seed(seed)
        m = _model()
        for e in range(epochs):
            local_sgd(m, xtr, ytr, epochs=1, lr=0.05, batch_size=32, seed=seed * 1000 + e)
        return _accuracy(m, xte, yte)

    return float(cached_object("fedrevive-central", {"seed": seed, "epochs": epochs, "v": 1}, build))


def _rule(name: str, config: dict[str, Any], seed: int):
    k = config["buffer_size"]
    if name == "FedBuff":
        return FedBuff(buffer_size=k)
    if name == "FedAsync":
        return FedAsync(alpha=0.6, staleness_exp=0.5)
    if name == "FedAvg-sync":
        return SyncFedAvg(config["num_clients"])
    kw = dict(buffer_size=k, inner_steps=config["inner_steps"], kd_steps=config["kd_steps"], seed=seed,
              batch_size=config["kd_batch"])  # fmt: skip
    if name == "FedRevive-beta-const":
        kw["beta_mode"] = "constant"
    if name == "FedRevive-no-meta":
        kw["meta"] = False
    return FedRevive(10, (64,), **kw)


def _one(name, config, seed, sigma, partitions, test, init, steps=None, budget=math.inf, engine="inprocess"):
    setup = ClientSetup(_model, partitions, lr=config["lr"], batch_size=32, seed=seed)
    strategy = AsyncFedAvg(_rule(name, config, seed), _model, initial_state=init)
    speed = ClientSpeedModel(len(partitions), sigma=sigma, seed=seed)
    xte, yte = test

    def evaluate(model: nn.Module) -> dict[str, float]:
        return {"accuracy": _accuracy(model, xte, yte)}

    hist = run_async(strategy, make_client_app(setup), speed, evaluate, max_server_steps=steps, time_budget=budget,
                     seed=seed, engine=engine)  # fmt: skip
    return hist, strategy


def _summ(hist, target: float, budget: float) -> dict[str, float]:
    times, accs = hist.series("accuracy")
    ttt = time_to_target(times, accs, target)
    final = accs[-1]
    # area under the accuracy-time step curve on [0, budget], normalised by the budget
    edges = [*times, budget]
    auc = (
        sum(a * max(0.0, min(edges[i + 1], budget) - t) for i, (t, a) in enumerate(zip(times, accs))) / budget
    )
    st = hist.staleness
    return {"ttt": ttt if math.isfinite(ttt) else None, "ttt_frac": min(ttt, budget) / budget, "final": final, "auc": auc,
            "mean_staleness": float(np.mean(st)) if st else 0.0, "max_staleness": float(max(st, default=0)),
            "steps": float(hist.evals[-1][1])}  # fmt: skip


def _run(config: dict[str, Any], seed: int) -> SeedResult:
    with torch_threads(1):
        return _run_inner(config, seed)


def _run_inner(config: dict[str, Any], seed: int) -> SeedResult:
    x, y = load_digits()
    tr, te = train_test_split(len(y), 0.2, seed=seed, labels=y)
    xtr, ytr, xte, yte = x[tr], y[tr], x[te], y[te]
    parts = dirichlet_partition(
        ytr.numpy(), config["num_clients"], config["dirichlet_alpha"], seed=seed, min_size=8
    )
    partitions = [(xtr[p], ytr[p]) for p in parts]
    central = _central_accuracy(seed, xtr, ytr, xte, yte, config["central_epochs"])
    target = 0.9 * central
    torch.manual_seed(seed)
    init = {k: v.clone() for k, v in _model().state_dict().items()}
    arms = (METHOD, *BASELINES)
    per: dict[str, dict[str, list[float]]] = {}
    table: dict[str, Any] = {}
    curves: dict[str, dict[str, list[float]]] = {}
    revive_stats: dict[str, Any] = {}
    for sigma in config["sigmas"]:
        key = f"sigma={sigma:g}"
        hist_fb, _ = _one(
            "FedBuff", config, seed, sigma, partitions, (xte, yte), init, steps=config["server_steps"]
        )
        budget = hist_fb.evals[-1][0]
        runs = {"FedBuff": hist_fb}
        extra = [a for a in config.get("ablations", []) if sigma in config.get("ablation_sigmas", [])]
        for name in (METHOD, "FedAsync", *extra):
            hist, strat = _one(name, config, seed, sigma, partitions, (xte, yte), init, budget=budget)
            runs[name] = hist
            if name == METHOD:
                kd = [r["kd_loss"] for r in strat.rule.log if "kd_loss" in r]
                revive_stats[key] = {"outside_window": strat.rule.outside_window, "kd_steps": strat.rule.kd_steps_done,
                                     "kd_loss_first": kd[0] if kd else None, "kd_loss_last": kd[-1] if kd else None}  # fmt: skip
        table[key] = {name: _summ(h, target, budget) for name, h in runs.items()}
        table[key]["budget"] = budget
        for name, h in runs.items():
            t, a = h.series("accuracy")
            curves.setdefault(f"accuracy vs time {key}", {})[name] = [float(v) for v in a]
            curves.setdefault(f"time {key}", {})[name] = [float(v) for v in t]
        for arm in arms:
            s = table[key][arm]
            for metric, value in (("final_accuracy", s["final"]), ("time_to_target", s["ttt_frac"]),
                                  ("auc", s["auc"]), ("mean_staleness", s["mean_staleness"])):  # fmt: skip
                per.setdefault(metric, {}).setdefault(arm, []).append(value)
                per.setdefault(f"{metric}@{key}", {}).setdefault(arm, []).append(value)
    metrics = {m: {a: float(np.mean(v)) for a, v in arms_.items()} for m, arms_ in per.items()}
    info: dict[str, Any] = {"central_accuracy": central, "target_accuracy": target, "per_sigma": table,
                            "fedrevive_stats": revive_stats}  # fmt: skip
    if config.get("engine_check"):
        info["engine_check"] = _engine_check(config, seed, partitions, (xte, yte), init)
    return SeedResult(metrics=metrics, curves=curves, info=info)


def _engine_check(config, seed, partitions, test, init) -> dict[str, Any]:
    """FedRevive, 4 clients, 3 server steps: in-process LocalGrid vs Flower's simulation engine."""
    cfg = {**config, "buffer_size": 2, "num_clients": 4}
    small = partitions[:4]
    out = {}
    for engine in ("inprocess", "simulation"):
        t = time.time()
        hist, strat = _one(METHOD, cfg, seed, 1.0, small, test, init, steps=3, engine=engine)
        out[engine] = (hist, strat.model.state_dict(), time.time() - t)
    a, b = out["inprocess"][1], out["simulation"][1]
    diff = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
    return {"max_abs_param_diff": diff, "simulation_wall_s": out["simulation"][2],
            "inprocess_staleness": out["inprocess"][0].staleness, "simulation_staleness": out["simulation"][0].staleness}  # fmt: skip


def _plot(result: dict[str, Any], folder: Path) -> list[Path]:
    plt = pyplot()
    curves = result.get("curves", {})
    keys = [k for k in curves if k.startswith("accuracy vs time")]
    if not keys:
        return []
    fig, axes = plt.subplots(1, len(keys), figsize=(4.5 * len(keys), 3.3), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        tkey = key.replace("accuracy vs time", "time")
        for arm, runs in curves[key].items():
            acc = runs[0] if runs and isinstance(runs[0], list) else runs
            tt = curves[tkey][arm][0] if isinstance(curves[tkey][arm][0], list) else curves[tkey][arm]
            ax.step(tt, acc, where="post", label=arm)
        ax.set_title(key.replace("accuracy vs time ", ""), fontsize=9)
        ax.set_xlabel("simulated time")
        ax.set_ylabel("test accuracy")
    axes.flat[0].legend(fontsize=7)
    return [save_figure(fig, folder, "fedrevive_accuracy_time", dpi=110)]


_COMMON = {"dirichlet_alpha": 0.3, "lr": 0.05, "central_epochs": 30}

CLAIM = Claim(
    slug="fedrevive",
    claim=(
        "FedRevive trains faster (simulated time to a target accuracy) and reaches a higher final accuracy than "
        "asynchronous baselines (FedBuff, FedAsync), by up to 29.7% and 11.4 points, more so as staleness grows."
    ),
    method=METHOD,
    baselines=BASELINES,
    criteria=(
        Better("final_accuracy", baseline="FedBuff"),
        Better("final_accuracy", baseline="FedAsync"),
        Better("time_to_target", baseline="FedBuff", higher_is_better=False),
        Better("time_to_target", baseline="FedAsync", higher_is_better=False),
    ),
    run=_run,
    configs={
        "smoke": {
            **_COMMON,
            "num_clients": 5,
            "buffer_size": 2,
            "server_steps": 6,
            "sigmas": [1.0],
            "inner_steps": 1,
            "kd_steps": 2,
            "kd_batch": 32,
            "central_epochs": 5,
        },
        "quick": {
            **_COMMON,
            "num_clients": 10,
            "buffer_size": 3,
            "server_steps": 60,
            "sigmas": [1.0],
            "inner_steps": 2,
            "kd_steps": 5,
            "kd_batch": 128,
        },
        "full": {
            **_COMMON,
            "num_clients": 20,
            "buffer_size": 5,
            "server_steps": 80,
            "sigmas": [0.5, 1.5],
            "inner_steps": 2,
            "kd_steps": 5,
            "kd_batch": 128,
            "ablations": ["FedRevive-beta-const", "FedAvg-sync"],
            "ablation_sigmas": [1.5],
            "engine_check": True,
        },
    },  # fmt: skip
    seeds={"smoke": (0,), "quick": (0,), "full": (0, 1, 2)},
    implemented=(
        "FedRevive server rule (FedBuff buffer, staleness weights, version window, teacher reconstruction, "
        "meta-learned conditional generator with CE + BN-statistics + adversarial loss, multi-teacher KD, "
        "staleness-dependent hybrid weight), FedBuff, FedAsync and synchronous FedAvg; all driven asynchronously "
        "through Flower's message API (push one TRAIN message per job, pull its reply when the simulated clock "
        "says it arrived) by one simulated-clock runner; clients are Flower ClientApps."
    ),
    differences=(
        "Digits + a 64-128-64-10 BN MLP instead of the paper's vision/text benchmarks; Dirichlet(0.3) split; "
        "N = 20 (full), 80 server steps (spec: 300, and N = 50 not run), sigma in {0.5, 1.5} (spec: also 1.0); "
        "generator inner steps 2 and KD steps 5 (spec: 5 and 20) for the CPU budget; ablations (constant beta, "
        "sync FedAvg) at sigma = 1.5 only, the no-meta-learning ablation is implemented (meta=False) but not run. Revival weight form, "
        "generator loss weights and meta step are inferred (the paper's exact values were not retrieved). "
        "time_to_target is normalised by the simulated time budget (FedBuff's time for the step budget)."
    ),
    data="scikit-learn load_digits (1,797 real 8x8 digits), stratified 80/20 split per seed, Dirichlet(0.3) clients.",
    plot=_plot,
    glossary={
        "final_accuracy": "server test accuracy at the end of the simulated time budget; mean over sigmas.",
        "time_to_target": "first simulated time at which server test accuracy >= 0.9 x centralised accuracy, "
        "divided by the time budget (1.0 = never within budget); mean over sigmas.",
        "auc": "area under the accuracy-vs-simulated-time step curve on [0, budget] / budget; mean over sigmas.",
        "mean_staleness": "mean tau = server version - base version over processed updates.",
    },
)

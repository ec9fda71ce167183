"""Claim check for GCN-MLP ("Less is More: Towards Simple Graph Contrastive Learning", arXiv 2509.25742).

Contextual SBM graphs (5 classes, 100 Gaussian features, average degree 10) at several edge
homophily levels; heterophilic graphs keep informative structure (cyclic class-mixing matrix).
Every self-supervised method (GCN-MLP, GRACE, BGRL, DGI) is trained with the same encoder widths,
optimiser, learning rate and epoch budget on the same graph, then frozen embeddings go through the
same linear probe over the same random splits. Time per epoch and training-step memory are measured
in the same run.

Full-profile budget: about 77% of a seed's CPU time is the linear probe (L-BFGS fits, 5 splits x 4 C
values per embedding), so the full profile dropped two info-only parts that no criterion or premise
reads (and that change no judged number: every graph and model has its own seed): the h = 0.5 graph
(5 trainings + 8 probes per seed, reported in info only) and the 5% edge-perturbation level of the
robustness diagnostic (5 probes per seed; 10% and 20% stay). Every arm keeps the same epochs, widths,
graphs and probe; the judged graphs (low h 0.05/0.2, high h 0.65/0.75) and seeds are unchanged.
The previous full run took 607 s CPU (3 seeds) on the 600 s budget; this saves about a fifth.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from neurips26.claims.base import AtMost, Better, Claim, Headline, SeedResult
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.graphs import csbm, edge_homophily, linear_probe, perturb_edges, random_splits
from neurips26.graph.gcn_mlp import (
    BGRL,
    GCNMLP,
    GRACE,
    dgi,
    embed_nodes,
    train_unsupervised,
    view_noise_correlation,
)

METHOD = "gcn_mlp"
BASELINES = ("grace", "bgrl", "dgi", "raw_features")
SSL = ("grace", "bgrl", "dgi")


def _makers(cfg: dict, in_dim: int) -> dict:
    hid, out = cfg["hidden"], cfg["out"]
    return {
        "gcn_mlp_concat": lambda: GCNMLP(in_dim, hidden_channels=hid, out_channels=out, variant="concat"),
        "gcn_mlp_gcn": lambda: GCNMLP(
            in_dim, hidden_channels=hid, out_channels=out, variant="gcn", propagation_k=cfg["propagation_k"]
        ),
        "grace": lambda: GRACE(in_dim, hid, out),
        "bgrl": lambda: BGRL(in_dim, hid, out),
        "dgi": lambda: dgi(in_dim, hid, out),
        "cosine_ablation": lambda: GCNMLP(in_dim, hidden_channels=hid, out_channels=out, loss="cosine"),
        "structural_input": lambda: GCNMLP(
            in_dim, hidden_channels=hid, out_channels=out, gcn_input="structural", structural_dim=32
        ),
        "features_plus_structural": lambda: GCNMLP(
            in_dim, hidden_channels=hid, out_channels=out, gcn_input="both"
        ),
    }


def _train_probe(name, maker, data, splits, cfg, seed):
    torch.manual_seed(seed)
    model = maker()
    t0 = time.perf_counter()
    out = train_unsupervised(model, data, epochs=cfg["epochs"], lr=cfg["lr"], weight_decay=1e-5, seed=seed)
    train_s = time.perf_counter() - t0
    probe = linear_probe(embed_nodes(model, data.x, data.edge_index), data.y, splits)
    return model, {
        "acc": probe["mean"],
        "acc_std_over_splits": probe["std"],
        "seconds_per_epoch": out["seconds_per_epoch"],
        "memory_mb": out["memory_bytes"] / 2**20,
        "epochs": out["epochs"],
        "train_s": train_s,
        "final_loss": out["losses"][-1],
        "losses": out["losses"],
    }


def run(config: dict, seed: int) -> SeedResult:
    return _run_inner(config, seed)


def _run_inner(cfg: dict, seed: int) -> SeedResult:
    low, high, mid = tuple(cfg["low_h"]), tuple(cfg["high_h"]), tuple(cfg.get("mid_h", ()))
    table: list[dict] = []
    curves: dict[str, dict[str, list[float]]] = {}
    info: dict = {"per_graph": table}
    acc: dict[str, dict[str, list[float]]] = {"low": {}, "high": {}}
    spe: dict[str, list[float]] = {}
    mem: dict[str, list[float]] = {}
    for h in low + mid + high:
        regime = "low" if h in low else ("high" if h in high else "mid")
        data = csbm(
            cfg["num_nodes"],
            cfg["num_classes"],
            h,
            cfg["feature_dim"],
            cfg.get("mu_high", cfg["mu"]) if regime == "high" else cfg["mu"],
            cfg["avg_degree"],
            seed=seed,
        )
        splits = random_splits(data.y, cfg["num_splits"], 0.48, 0.32, seed=seed)
        makers = _makers(cfg, data.num_features)
        wanted = list(
            cfg["arms_low"] if regime == "low" else cfg["arms_high"] if regime == "high" else cfg["arms_mid"]
        )
        row = {"h_target": h, "h_realised": edge_homophily(data.edge_index, data.y), "regime": regime}
        raw = linear_probe(data.x, data.y, splits)
        row["raw_features"] = {"acc": raw["mean"], "seconds_per_epoch": 0.0, "memory_mb": 0.0}
        models = {}
        for name in wanted:
            models[name], res = _train_probe(name, makers[name], data, splits, cfg, seed)
            curves.setdefault(f"loss_h{h}", {})[name] = res.pop("losses")
            row[name] = res
        for name in ("gcn_mlp_concat", "cosine_ablation"):
            if name in models and cfg.get("view_ablation", False):
                for view in ("gcn", "mlp"):
                    emb = models[name].embed(data.x, data.edge_index, view=view)
                    row[name][f"acc_{view}_only"] = linear_probe(emb, data.y, splits)["mean"]
                row[name]["min_dim_std"] = float(models[name].embed(data.x, data.edge_index).std(0).min())
        if "gcn_mlp_concat" in models and cfg.get("noise_diagnostic", False):
            row["noise_correlation"] = view_noise_correlation(
                models["gcn_mlp_concat"], data.x, data.class_means[data.y], data.edge_index
            )
        if h in tuple(cfg.get("robustness_h", ())):
            rob = {}
            for frac in cfg["robustness_fracs"]:
                ei = perturb_edges(data.edge_index, data.num_nodes, frac, frac, seed=seed + 1)
                rob[str(frac)] = {
                    name: linear_probe(embed_nodes(m, data.x, ei), data.y, splits)["mean"]
                    for name, m in models.items()
                    if name in ("gcn_mlp_concat", "gcn_mlp_gcn", *SSL)
                }
            row["robustness_add_and_remove"] = rob
        table.append(row)
        # the method arm: the paper's heterophilic recipe (concat) at low h, its homophilic variant at high h
        method_key = "gcn_mlp_concat" if regime == "low" else "gcn_mlp_gcn"
        if regime in ("low", "high"):
            arms = {METHOD: row[method_key]["acc"], "raw_features": raw["mean"]}
            arms.update({b: row[b]["acc"] for b in SSL})
            for arm, v in arms.items():
                acc[regime].setdefault(arm, []).append(v)
            for arm, key in ((METHOD, method_key), *((b, b) for b in SSL), ("raw_features", "raw_features")):
                spe.setdefault(arm, []).append(row[key]["seconds_per_epoch"])
                mem.setdefault(arm, []).append(row[key]["memory_mb"])
    metrics = {
        "acc_low_h": {a: float(np.mean(v)) for a, v in acc["low"].items()},
        "acc_high_h": {a: float(np.mean(v)) for a, v in acc["high"].items()},
        "sec_per_epoch": {a: float(np.mean(v)) for a, v in spe.items()},
        "memory_mb": {a: float(np.mean(v)) for a, v in mem.items()},
    }
    info["benchmark"] = {
        "seconds_per_epoch": metrics["sec_per_epoch"],
        "memory_mb": metrics["memory_mb"],
        "note": "measured in this run, torch.set_num_threads(1), CPU; memory = autograd-saved tensors + params, "
        "grads and Adam state of one training step (neurips26.graph.gcn_mlp.step_memory_bytes)",
    }
    return SeedResult(metrics=metrics, curves=curves, info=info)


def plot(result: dict, folder: Path) -> list[Path]:
    plt = pyplot()
    rows: dict[float, dict[str, list[float]]] = {}
    for seed_info in result.get("info", []):
        for row in seed_info.get("per_graph", []):
            for arm in ("gcn_mlp_concat", "gcn_mlp_gcn", *SSL, "raw_features"):
                if arm in row:
                    rows.setdefault(row["h_target"], {}).setdefault(arm, []).append(row[arm]["acc"])
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    hs = sorted(rows)
    for arm in ("gcn_mlp_concat", "gcn_mlp_gcn", *SSL, "raw_features"):
        xs = [h for h in hs if arm in rows[h]]
        ax[0].plot(xs, [np.mean(rows[h][arm]) for h in xs], marker="o", label=arm)
    ax[0].set_xlabel("edge homophily h")
    ax[0].set_ylabel("linear-probe accuracy")
    ax[0].legend(fontsize=7)
    spe = result["metrics"]["sec_per_epoch"]
    mem = result["metrics"]["memory_mb"]
    for arm in spe:
        if arm != "raw_features":
            ax[1].scatter(np.mean(spe[arm]), np.mean(mem[arm]), label=arm)
    ax[1].set_xlabel("seconds per epoch")
    ax[1].set_ylabel("training-step memory (MB)")
    ax[1].legend(fontsize=7)
    return [save_figure(fig, folder, "gcn_mlp_accuracy_efficiency", dpi=100)]


# mu_high: feature scale on the high-homophily graphs. At mu = 1.75 and h >= 0.8 every SSL method sits at
# 0.99+ probe accuracy (structure alone separates the classes), a ceiling where a non-inferiority check
# says nothing; h in 0.65-0.75 with mu = 0.5 keeps the baselines below 0.9.
# threads: intra-op threads of the run (set by the runner): tiny models, shared CPU
_COMMON = {
    "threads": 1,
    "num_classes": 5,
    "feature_dim": 100,
    "mu": 1.75,
    "mu_high": 0.5,
    "avg_degree": 10.0,
    "lr": 1e-3,
}

CLAIM = Claim(
    slug="gcn_mlp",
    claim=(
        "Contrasting a GCN view with an MLP view, without augmentation or negatives, gives node embeddings "
        "that match or beat GRACE/BGRL/DGI on heterophilic graphs (and, with the homophilic variant, stay "
        "competitive on homophilic graphs) at lower time per epoch and memory."
    ),
    method=METHOD,
    baselines=BASELINES,
    premises=(
        Better("acc_low_h", arm="grace", baseline="raw_features", margin=0.0, label="ssl_uses_structure"),
        AtMost("acc_low_h", arm="grace", threshold=0.97, label="low_h_below_ceiling_grace"),
        AtMost("acc_high_h", arm="grace", threshold=0.97, label="high_h_below_ceiling_grace"),
        AtMost("acc_high_h", arm="bgrl", threshold=0.97, label="high_h_below_ceiling_bgrl"),
        AtMost("acc_high_h", arm="dgi", threshold=0.97, label="high_h_below_ceiling_dgi"),
    ),
    criteria=(
        Better("acc_low_h", baseline="grace", margin=0.0, label="low_h_vs_grace"),
        Better("acc_low_h", baseline="bgrl", margin=0.0, label="low_h_vs_bgrl"),
        Better("acc_low_h", baseline="dgi", margin=0.0, label="low_h_vs_dgi"),
        Better("acc_low_h", baseline="raw_features", margin=0.0, label="low_h_vs_raw"),
        Better("acc_high_h", baseline="grace", margin=-0.02, label="high_h_near_grace"),
        Better("acc_high_h", baseline="bgrl", margin=-0.02, label="high_h_near_bgrl"),
        Better("acc_high_h", baseline="dgi", margin=-0.02, label="high_h_near_dgi"),
        Better("sec_per_epoch", baseline="grace", higher_is_better=False, kind="cost", label="faster_than_grace"),
        Better("sec_per_epoch", baseline="bgrl", higher_is_better=False, kind="cost", label="faster_than_bgrl"),
        Better("sec_per_epoch", baseline="dgi", higher_is_better=False, kind="cost", label="faster_than_dgi"),
        Better("memory_mb", baseline="grace", higher_is_better=False, kind="cost", label="less_memory_than_grace"),
        Better("memory_mb", baseline="bgrl", higher_is_better=False, kind="cost", label="less_memory_than_bgrl"),
        Better("memory_mb", baseline="dgi", higher_is_better=False, kind="cost", label="less_memory_than_dgi"),
    ),
    headlines=(
        Headline(
            "state of the art on heterophilic graphs with minimal computation and memory",
            criteria=(
                "low_h_vs_grace",
                "low_h_vs_bgrl",
                "low_h_vs_dgi",
                "faster_than_grace",
                "faster_than_bgrl",
                "faster_than_dgi",
                "less_memory_than_grace",
                "less_memory_than_bgrl",
                "less_memory_than_dgi",
            ),
        ),
        Headline(
            "a variant is state of the art on homophilic graphs",
            criteria=("high_h_near_grace", "high_h_near_bgrl", "high_h_near_dgi"),
        ),
        Headline(
            "robust to black-box and white-box adversarial attacks",
            untested="black-box edge perturbation is reported in info (full profile, h = 0.75) without a declared "
            "criterion; white-box attacks are not run",
        ),
        Headline(
            "theoretical justification: weakly correlated noise across the two views",
            untested="the views' noise-correlation diagnostic is reported in info; the theory gives no number to check",
        ),
        Headline(
            "Chameleon 46.01, Wisconsin 85.29, Citeseer 70.12, Pubmed 79.0 (third-party leaderboard, unverified)",
            untested="none of these datasets ships offline; the graphs here are synthetic CSBMs",
        ),
    ),
    items={
        "acc_low_h": {"smoke": 30, "quick": 200, "full": 200},
        "acc_high_h": {"smoke": 30, "quick": 200, "full": 200},
    },
    run=run,
    configs={
        "smoke": {
            **_COMMON,
            "num_nodes": 150,
            "hidden": 32,
            "out": 16,
            "epochs": 4,
            "num_splits": 2,
            "propagation_k": 2,
            "low_h": [0.1],
            "high_h": [0.9],
            "arms_low": ["gcn_mlp_concat", *SSL],
            "arms_high": ["gcn_mlp_gcn", *SSL],
        },
        "quick": {
            **_COMMON,
            "num_nodes": 1000,
            "hidden": 256,
            "out": 128,
            "epochs": 25,
            "num_splits": 1,
            "propagation_k": 2,
            "low_h": [0.1],
            "high_h": [0.7],
            "arms_low": ["gcn_mlp_concat", *SSL],
            "arms_high": ["gcn_mlp_gcn", *SSL],
        },
        "full": {
            **_COMMON,
            "num_nodes": 1000,
            "hidden": 256,
            "out": 128,
            "epochs": 50,
            "num_splits": 5,
            "propagation_k": 2,
            "low_h": [0.05, 0.2],
            "high_h": [0.65, 0.75],
            "arms_low": ["gcn_mlp_concat", "gcn_mlp_gcn", *SSL, "cosine_ablation", "structural_input"],
            "arms_high": ["gcn_mlp_concat", "gcn_mlp_gcn", *SSL],
            "view_ablation": True,
            "noise_diagnostic": True,
            "robustness_h": [0.75],
            "robustness_fracs": [0.1, 0.2],
        },
    },
    seeds={"smoke": (0,), "quick": (0, 1, 2), "full": (0, 1, 2)},
    implemented=(
        "GCNMLP (neurips26.graph.gcn_mlp): 2-layer GCN view (PyG GCN, PReLU) and 2-layer MLP view (PyG MLP), "
        "per-dimension standardisation, CCA-style invariance + decorrelation loss (lambda 1e-3), no augmentation, "
        "no negatives; heterophilic embedding [Z_G || Z_M], homophilic variant Z_G after SGC-style A_hat^2 X "
        "propagation (PyG APPNP with alpha=0). Baselines in the same harness: GRACE (edge dropping 0.2/0.4, "
        "feature masking 0.3/0.4, InfoNCE tau 0.5 with intra- and inter-view negatives), BGRL (EMA 0.99, "
        "predictor, batch-norm GCN), DGI (PyG DeepGraphInfomax around the same 2-layer GCN), raw features. "
        "All encoders 256 hidden / 128 out, Adam lr 1e-3, weight decay 1e-5, same epoch budget; frozen "
        "embeddings -> L2 logistic regression probe (C from {0.01, 0.1, 1, 10} on validation), 48/32/20 splits. "
        "Full profile adds: the cosine-only collapse ablation and structural-input (SVD) GCN view at low h, "
        "GCN-only / MLP-only embeddings of the trained model, the views' noise-correlation diagnostic, and "
        "black-box robustness (10/20% random edges removed and added) at h = 0.75 (in info)."
    ),
    differences=(
        "Synthetic CSBM instead of the paper's Chameleon/Wisconsin/Citeseer/Pubmed; N = 1000 nodes (spec: 3000) "
        "and 50 epochs (spec default 100) and 5 probe splits (spec 10) so the full profile fits the CPU budget; "
        "the paper's exact anti-collapse objective and homophilic variant are not public (CCA-style loss and "
        "SGC pre-propagation are inferred instantiations, propagation k = 2 fixed a priori); GCA, MVGRL, "
        "CCA-SSG, PolyGCL, GraphACL and white-box attacks are not run; the concat embedding is 256-d while "
        "baselines output 128-d (as in the paper's design). CPU memory is an autograd-saved-tensor account, "
        "not an allocator high-water mark. Quick uses 3 seeds, one graph per regime, 25 epochs and one probe "
        "split (to fit 60 s on 2 cores). Full "
        "uses 3 seeds (about 165 s CPU each, so 5 do not fit 600 s); the h = 0.5 graph and the 5% robustness "
        "level were dropped from full (info only, no judged number) to fit the budget. The high-homophily graphs "
        "use h = 0.65/0.75 "
        "and feature scale 0.5 (spec: h = 0.8/0.95) so that the baselines are below the accuracy ceiling."
    ),
    data=(
        "neurips26.common.graphs.csbm: 5 balanced classes, 100-d Gaussian features around random unit class "
        "means scaled by mu = 1.75 (raw-feature probe ~60-65%), average degree 10, edge homophily h; cross-class "
        "edges follow a cyclic class-mixing matrix so heterophilic structure is informative. Low h: quick {0.1}, "
        "full {0.05, 0.2}; high h (features scaled by 0.5): quick {0.7}, full {0.65, 0.75}."
    ),
    plot=plot,
    glossary={
        "acc_low_h": "mean over the low-homophily graphs of the linear-probe test accuracy (mean over splits); "
        "the gcn_mlp arm is the heterophilic recipe (variant='concat')",
        "acc_high_h": "same over the high-homophily graphs; the gcn_mlp arm is the homophilic variant "
        "(variant='gcn', propagation_k=2), as the paper uses a variant for homophilic graphs",
        "sec_per_epoch": "mean wall seconds of one full-batch optimiser step (forward, loss, backward, Adam, EMA "
        "where applicable), first epoch excluded, averaged over the low- and high-h graphs; raw_features = 0",
        "memory_mb": "training-step memory in MiB: bytes of tensors saved by autograd for backward (deduplicated "
        "by storage) + 4x parameter bytes (weights, grads, two Adam moments); raw_features = 0",
    },
)

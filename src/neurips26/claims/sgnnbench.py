"""Claim check for SGNNBench (arXiv 2509.21342): SGNN accuracy next to energy and memory vs GCN/SGC.

Contextual SBM graphs (3 classes, 64 Gaussian features, average degree 10) at edge homophily 0.7
(and 0.9, 0.1 in the full profile). SpikingGCN, SpikeNet-lite and the ANN baselines GCN and SGC
are trained with one protocol (Adam, early stopping on validation accuracy) on the same graphs and
seeds; each trained model then gets an analytic energy report (operation counts x measured firing
rates x 45 nm energy per operation), a parameter count, the memory of one training step and wall
times, measured in the same run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Headline, SeedResult
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.graphs import csbm
from neurips26.graph.sgnnbench import (
    GCN,
    SGC,
    design_space_sweep,
    energy_report,
    factor_average_ranks,
    peak_memory,
    run_benchmark,
    spikenet_lite,
    spiking_gcn,
)

METHOD = "spikinggcn"
BASELINES = ("gcn", "sgc")


def _builders(hidden: int, T: int) -> dict:
    return {
        "gcn": lambda f, c: GCN(f, hidden, c),
        "sgc": lambda f, c: SGC(f, c, K=2),
        "spikinggcn": lambda f, c: spiking_gcn(f, hidden, c, T=T),
        "spikenet_lite": lambda f, c: spikenet_lite(f, hidden, c, T=T),
    }


def _scaling(sizes, hidden: int, T: int, seed: int) -> list[dict]:
    """Energy and training-step memory on PyG FakeDataset graphs (accuracy meaningless there)."""
    from torch_geometric.datasets import FakeDataset

    out = []
    for n in sizes:
        torch.manual_seed(seed)
        data = FakeDataset(1, avg_num_nodes=n, avg_degree=10, num_channels=64, num_classes=3)[0]
        for name, build in (
            ("gcn", _builders(hidden, T)["gcn"]),
            ("spikinggcn", _builders(hidden, T)["spikinggcn"]),
        ):
            torch.manual_seed(seed)
            model = build(64, 3)
            rep = energy_report(model, data)
            model.train()
            mem = peak_memory(lambda m=model, d=data: m(d.x, d.edge_index).sum().backward())
            out.append(
                {
                    "num_nodes": int(data.num_nodes),
                    "model": name,
                    "energy_uj": rep.total_joules * 1e6,
                    "float_share": rep.float_share,
                    "memory_mb": mem / 2**20,
                }
            )
    return out


def run(config: dict, seed: int) -> SeedResult:
    return _run_inner(config, seed)


def _run_inner(cfg: dict, seed: int) -> SeedResult:
    builders = _builders(cfg["hidden"], cfg["T"])
    models = {k: builders[k] for k in cfg["models"]}
    bench_kw = {
        "epochs": cfg["epochs"],
        "patience": cfg["patience"],
        "eval_every": cfg["eval_every"],
        "lr": cfg["lr"],
        "weight_decay": cfg["weight_decay"],
    }
    datasets = {
        f"h{h}": csbm(cfg["num_nodes"], 3, h, 64, cfg["mu"], 10.0, seed=seed) for h in cfg["homophily"]
    }
    rows = run_benchmark(models, datasets, seeds=(seed,), **bench_kw)
    by = {(r["dataset"], r["model"]): r for r in rows}
    metrics: dict[str, dict[str, float]] = {}
    arms = (METHOD, *BASELINES)
    for h in cfg["homophily"]:
        metrics[f"acc_h{h}".replace(".", "")] = {a: by[(f"h{h}", a)]["acc_mean"] for a in arms}
    ref = f"h{cfg['homophily'][0]}"
    gcn_energy = by[(ref, "gcn")]["energy_uj"]
    metrics["energy_uj"] = {a: by[(ref, a)]["energy_uj"] for a in arms}
    metrics["float_share"] = {a: by[(ref, a)]["float_share"] for a in arms}
    metrics["spike_energy_vs_gcn"] = {a: by[(ref, a)]["ac_energy_uj"] / gcn_energy for a in arms}
    metrics["memory_mb"] = {a: by[(ref, a)]["memory_bytes"] / 2**20 for a in arms}
    metrics["sec_per_epoch"] = {a: by[(ref, a)]["sec_per_epoch"] for a in arms}
    metrics["params"] = {a: float(by[(ref, a)]["params"]) for a in arms}

    # Same trained SpikingGCN weights with the encoder cached instead of recomputed per step.
    torch.manual_seed(seed)
    probe_model = builders["spikinggcn"](64, 3)
    cached_model = builders["spikinggcn"](64, 3)
    cached_model.load_state_dict(probe_model.state_dict())
    cached_model.cache_encoder = True
    encoder_table = {
        "recomputed_uj": energy_report(probe_model, datasets[ref]).total_joules * 1e6,
        "cached_uj": energy_report(cached_model, datasets[ref]).total_joules * 1e6,
        "note": f"untrained SpikingGCN weights (seeded), same weights both ways; T = {cfg['T']}",
    }
    info: dict = {
        "table": [{k: v for k, v in r.items() if k != "per_layer"} for r in rows],
        "energy_breakdown": {r["model"]: r["per_layer"] for r in rows if r["dataset"] == ref},
        "encoder_cache": encoder_table,
        "benchmark": {
            "sec_per_epoch": {r["model"]: r["sec_per_epoch"] for r in rows if r["dataset"] == ref},
            "memory_mb": {r["model"]: r["memory_bytes"] / 2**20 for r in rows if r["dataset"] == ref},
            "infer_s": {r["model"]: r["infer_s"] for r in rows if r["dataset"] == ref},
            "note": "measured in this run on the first graph, torch.set_num_threads(1), CPU; memory = tensors saved "
            "for backward in one training step + outputs (sgnnbench.peak_memory)",
        },
    }
    extras = seed == cfg.get("extras_seed", seed)  # sweep and scaling once, on the first seed
    if cfg.get("sweep") and extras:
        grid = {k: list(v) for k, v in cfg["sweep"].items()}
        sweep_kw = {**bench_kw, "epochs": cfg["sweep_epochs"]}
        base = {
            "num_layers": 1,
            "conv": "gcn",
            "K": 2,
            "precompute": True,
            "encoding": "direct",
            "cache_encoder": False,
            "v_threshold": 0.5,
        }
        sweep = design_space_sweep(
            datasets[ref], grid, seeds=(seed,), base=base, hidden_channels=cfg["hidden"], **sweep_kw
        )
        info["design_sweep"] = [{k: v for k, v in r.items() if k not in ("model",)} for r in sweep]
        info["design_ranks_acc"] = factor_average_ranks(sweep, list(grid), "acc_mean")
        info["design_ranks_energy"] = factor_average_ranks(
            sweep, list(grid), "energy_uj", higher_is_better=False
        )
    if cfg.get("scaling_sizes") and extras:
        info["scaling"] = _scaling(cfg["scaling_sizes"], cfg["hidden"], cfg["T"], seed)
    return SeedResult(metrics=metrics, info=info)


def plot(result: dict, folder: Path) -> list[Path]:
    plt = pyplot()
    acc = result["metrics"].get("acc_h07") or result["metrics"]["acc_h09"]  # h09: results before v2
    energy = result["metrics"]["energy_uj"]
    share = result["metrics"]["float_share"]
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    for arm in acc:
        ax[0].scatter(np.mean(energy[arm]), np.mean(acc[arm]), label=arm)
    ax[0].set_xscale("log")
    ax[0].set_xlabel("theoretical energy per full-graph inference (uJ)")
    ax[0].set_ylabel("test accuracy, h = 0.7")
    ax[0].legend(fontsize=8)
    ax[1].bar(list(share), [np.mean(share[a]) for a in share])
    ax[1].set_ylabel("float_share (real-valued op energy / total)")
    return [save_figure(fig, folder, "sgnnbench_accuracy_energy", dpi=100)]


# threads: intra-op threads of the run (set by the runner): tiny models, shared CPU
_COMMON = {"threads": 1, "mu": 0.5, "lr": 1e-2, "weight_decay": 1e-4, "T": 5}

CLAIM = Claim(
    slug="sgnnbench",
    claim=(
        "Spiking GNNs reach accuracy comparable to (a little below) ANN GNNs on homophilic graphs while their "
        "spike-driven operations cost several times less energy than the ANN, but the real-valued parts "
        "(encoder / pre-linear, float propagation, readout) dominate their theoretical energy: the often "
        "overlooked bottleneck."
    ),
    method=METHOD,
    baselines=BASELINES,
    premises=(
        AtLeast("acc_h07", arm="gcn", threshold=0.6, label="gcn_learns"),
        AtMost("acc_h07", arm="gcn", threshold=0.97, label="gcn_below_ceiling"),
    ),
    criteria=(
        Better("acc_h07", baseline="gcn", margin=-0.05, label="acc_near_gcn"),
        Better("acc_h07", baseline="sgc", margin=-0.05, label="acc_near_sgc"),
        AtMost("spike_energy_vs_gcn", threshold=1.0 / 3.0, label="spike_ops_cheap"),
        AtLeast("float_share", threshold=0.5, label="float_path_dominates"),
    ),
    run=run,
    configs={
        "smoke": {
            **_COMMON,
            "num_nodes": 120,
            "hidden": 16,
            "homophily": [0.7],
            "epochs": 6,
            "eval_every": 3,
            "patience": 2,
            "models": ["gcn", "sgc", "spikinggcn"],
            "T": 2,
        },
        "quick": {
            **_COMMON,
            "num_nodes": 500,
            "hidden": 128,
            "homophily": [0.7],
            "epochs": 60,
            "eval_every": 10,
            "patience": 5,
            "models": ["gcn", "sgc", "spikinggcn", "spikenet_lite"],
        },
        "full": {
            **_COMMON,
            "num_nodes": 1000,
            "hidden": 128,
            "homophily": [0.7, 0.9, 0.1],
            "epochs": 100,
            "eval_every": 10,
            "patience": 5,
            "models": ["gcn", "sgc", "spikinggcn", "spikenet_lite"],
            "sweep": {"neuron": ["IF", "LIF", "PLIF"], "T": [1, 5, 10], "norm": ["none", "bn"]},
            "sweep_epochs": 60,
            "scaling_sizes": [5000, 10000, 20000],
            "extras_seed": 0,
        },
    },
    seeds={"smoke": (0,), "quick": (0,), "full": (0, 1, 2, 3, 4)},
    headlines=(
        Headline(
            "9 SGNNs evaluated on 18-20 datasets",
            untested="2 of the 9 SGNNs are built and the graphs are synthetic CSBMs (no benchmark datasets ship offline)",
        ),
        Headline("SGNN accuracy comparable to ANN GNNs", criteria=("acc_near_gcn", "acc_near_sgc")),
        Headline(
            "model size, memory and theoretical energy reveal the often-overlooked energy bottlenecks "
            "(read here as: spike ops are cheap, the real-valued path dominates)",
            criteria=("spike_ops_cheap", "float_path_dominates"),
        ),
        Headline(
            "design-space investigation towards a general SGNN paradigm",
            untested="the neuron x T x norm sweep is reported in info (average ranks, seed 0) but the abstract "
            "states no comparison to check",
        ),
    ),
    items={"acc_h07": {"smoke": 24, "quick": 100, "full": 200}},
    implemented=(
        "neurips26.graph.sgnnbench: IF/LIF/PLIF neurons with five surrogate gradients and hard reset; "
        "SpikingGCNConv / SpikingSAGEConv (PyG MessagePassing); SGNN with direct/poisson encoding, cached or "
        "per-step encoder, K-hop or precomputed propagation, BN, residual, JK, rate-averaged readout, BPTT; "
        "reference SpikingGCN (precomputed A_hat^2 x, real-valued input linear recomputed at every step as in the "
        "public code, LIF, BN, T = 5, threshold 0.5) and SpikeNet-lite (2 spiking SAGE layers); ANN GCN (PyG, "
        "2 layers, 128 hidden, dropout 0.5) and SGC (PyG SGConv, K = 2). Analytic energy from forward hooks: "
        "E_AC (0.9 pJ) x firing rate x ops for spike inputs, E_MAC (4.6 pJ) x ops for real inputs, per call. "
        "Same protocol for all: Adam lr 1e-2, weight decay 1e-4, eval every 10 epochs, early stop after 5 "
        "evaluations without validation gain. Full adds h = 0.5 / 0.1 graphs, a neuron x T x norm sweep "
        "(3 x 3 x 2, 60 epochs, average ranks, seed 0) and FakeDataset scaling of energy and memory (in info)."
    ),
    differences=(
        "Synthetic CSBM graphs (n = 500 quick, 1000 full; spec full n = 2000, reduced for the CPU budget) instead "
        "of the benchmark's 18-20 real datasets; only 2 of the 9 SGNNs (SpikingGCN, SpikeNet-lite; GC-SNN/STFN "
        "and the others not built) and GCN/SGC of the ANN baselines (no GraphSAGE/GAT); lr 1e-2 for every model "
        "(spec: 1e-3) so all converge within the epoch budget; max 100 epochs (spec 200); the design sweep and FakeDataset scaling run on seed 0 only; no link prediction; "
        "CPU memory is an autograd-saved-tensor account, not an RSS high-water mark; quick uses one seed, so "
        "paired criteria are inconclusive there. Full: 5 seeds. The criteria graph is h = 0.7 with feature "
        "scale mu = 0.5 (at h = 0.9, mu = 1.0 every model sits at 0.99 accuracy, a ceiling where a "
        "non-inferiority check says nothing); h = 0.9 and 0.1 are reported in the full profile. The benchmark's named bottleneck was not retrievable; the "
        "float-path reading is the spec's (inferred) hypothesis, stated before running."
    ),
    data=(
        "neurips26.common.graphs.csbm: 3 balanced classes, 64-d Gaussian features (mu = 0.5), average degree 10, "
        "edge homophily 0.7 (criteria) and 0.9 / 0.1 (full, reported); 60/20/20 stratified masks from the seed. "
        "PyG FakeDataset (5k-20k nodes) for energy/memory scaling only."
    ),
    plot=plot,
    glossary={
        "acc_h07": "test accuracy (test_mask) at the best validation evaluation, CSBM h = 0.7",
        "acc_h09": "same at h = 0.9 (full profile)",
        "acc_h01": "same at h = 0.1 (full profile)",
        "energy_uj": "theoretical energy of one full-graph inference in microjoules on the h = 0.7 graph: "
        "sum over op calls of 0.9 pJ x input firing rate x dense ops (binary-spike inputs) or 4.6 pJ x dense ops "
        "(real inputs); linear ops = rows x in x out, propagation = nnz(A_hat) x channels per hop, norm = elements",
        "float_share": "energy of real-valued-input ops / total energy (1.0 for an ANN)",
        "spike_energy_vs_gcn": "energy of the arm's spike-input (accumulate) ops / total energy of the ANN GCN "
        "on the same graph and seed (0 for ANNs)",
        "memory_mb": "MiB of tensors saved for backward in one training step plus its outputs",
        "sec_per_epoch": "mean wall seconds per training epoch (forward, backward, Adam), single thread",
        "params": "number of trainable parameters",
    },
)

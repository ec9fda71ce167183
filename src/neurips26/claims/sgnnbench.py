"""Claim check for SGNNBench (arXiv 2509.21342): SGNN accuracy next to energy and memory vs GCN/SGC.

Seven spiking GNNs of the benchmark's list (SpikingGCN, SpikeNet-lite, GC-SNN, GA-SNN, DRSGNN,
SpikeGCL, SpikeGraphormer-lite) and the ANN baselines GCN and SGC are trained with one protocol
(Adam, early stopping on validation accuracy, the same epochs, seeds and splits) on

- the real labelled graphs that ship offline: polblogs, polbooks and football from Debian's
  ``python3-graph-tool`` collection (read with :mod:`neurips26.common.graphdata_gt`) and Zachary's
  karate club (networkx, 2 factions); featureless, so every model gets the same seeded 64-d Gaussian
  node features (a random projection of the one-hot identity);
- contextual SBM graphs (3 classes, 64 Gaussian features, average degree 10) at edge homophily 0.7
  (all models) and 0.9, 0.1 (the four original arms, full profile).

Each trained model then gets an analytic energy report (operation counts x measured firing rates x
45 nm energy per operation), a parameter count, the memory of one training step and wall times,
measured in the same run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Headline, SeedResult
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.graphs import csbm, split_masks
from neurips26.graph.sgnnbench import (
    DRSGNN,
    GCN,
    SGC,
    SpikeGCL,
    SpikeGraphormer,
    design_space_sweep,
    energy_report,
    factor_average_ranks,
    ga_snn,
    gc_snn,
    peak_memory,
    run_benchmark,
    spikenet_lite,
    spiking_gcn,
)

METHOD = "spikinggcn"
BASELINES = ("gcn", "sgc")
OTHER_SGNNS = ("spikenet_lite", "gc_snn", "ga_snn", "drsgnn", "spikegcl", "spikegraphormer")
ARMS = (METHOD, *BASELINES, *OTHER_SGNNS)
# The paper's model list (its public code) and what happened to each here.
NOT_BUILT = {
    "MSG": "spiking GNN on Riemannian manifolds (manifold-valued spikes and a differentiable exponential map "
    "training scheme): not built in the time available",
    "SiGNN": "spiking GNN for dynamic (temporal) graphs; no temporal graph ships offline and the benchmark's "
    "static-graph protocol does not exercise it",
}
PAPER_DATASETS_MISSING = (
    "Cora, CiteSeer, PubMed, ogbn-arxiv, ogbn-products, ogbn-mag, Amazon Photo/Computers, Coauthor CS/Physics, "
    "Flickr, Reddit, the heterophilic sets (Chameleon, Squirrel, Actor, Texas, Wisconsin, Cornell) and the "
    "link-prediction and dynamic-graph sets: none ships inside a PyPI or Debian package (PyG, OGB, DGL and the "
    "'graph-datasets' / 'graphsets' wheels only hold download code; checked on this machine), and nothing can be "
    "downloaded here"
)
REAL_FILES = ("polblogs", "polbooks", "football")


def _builders(hidden: int, T: int) -> dict:
    return {
        "gcn": lambda f, c: GCN(f, hidden, c),
        "sgc": lambda f, c: SGC(f, c, K=2),
        "spikinggcn": lambda f, c: spiking_gcn(f, hidden, c, T=T),
        "spikenet_lite": lambda f, c: spikenet_lite(f, hidden, c, T=T),
        "gc_snn": lambda f, c: gc_snn(f, hidden, c, T=T),
        "ga_snn": lambda f, c: ga_snn(f, hidden, c, T=T),
        "drsgnn": lambda f, c: DRSGNN(f, hidden, c, T=T),
        "spikegcl": lambda f, c: SpikeGCL(f, hidden, c, T=T),
        "spikegraphormer": lambda f, c: SpikeGraphormer(f, hidden, c, T=T),
    }


def real_graph(name: str, seed: int, num_features: int = 64):
    """A real labelled graph with seeded Gaussian features ``[N, num_features]`` and 60/20/20 stratified masks.

    ``karate``: networkx's karate club (2 factions); the others: graph-tool collection files.
    """
    if name == "karate":
        from neurips26.common.graphs import karate_club

        data = karate_club()
    else:
        from neurips26.common.graphdata_gt import load_collection

        data = load_collection(name, features=None)
    gen = torch.Generator().manual_seed(int(seed) * 1009 + sum(map(ord, name)))
    data.x = torch.randn(data.num_nodes, num_features, generator=gen)
    data.train_mask, data.val_mask, data.test_mask = split_masks(data.num_nodes, 0.6, 0.2, seed, data.y)
    data.num_classes = int(data.y.max()) + 1
    return data


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
    arms = [a for a in ARMS if a in cfg["models"]]
    bench_kw = {
        "epochs": cfg["epochs"],
        "patience": cfg["patience"],
        "eval_every": cfg["eval_every"],
        "lr": cfg["lr"],
        "weight_decay": cfg["weight_decay"],
    }
    h0, *h_rest = cfg["homophily"]
    csbm_graphs = {
        f"h{h}": csbm(cfg["num_nodes"], 3, h, 64, cfg["mu"], 10.0, seed=seed) for h in cfg["homophily"]
    }
    real = {name: real_graph(name, seed) for name in cfg["real"]}
    rows = run_benchmark(
        {a: builders[a] for a in arms}, {f"h{h0}": csbm_graphs[f"h{h0}"], **real}, seeds=(seed,), **bench_kw
    )
    if h_rest:
        sweep_arms = [a for a in ARMS if a in cfg["homophily_models"]]
        rows += run_benchmark(
            {a: builders[a] for a in sweep_arms},
            {f"h{h}": csbm_graphs[f"h{h}"] for h in h_rest},
            seeds=(seed,),
            **bench_kw,
        )
    by = {(r["dataset"], r["model"]): r for r in rows}
    metrics: dict[str, dict[str, float]] = {}
    for h in cfg["homophily"]:
        metrics[f"acc_h{h}".replace(".", "")] = {
            a: by[(f"h{h}", a)]["acc_mean"] for a in ARMS if (f"h{h}", a) in by
        }
    for name in cfg["real"]:
        metrics[f"acc_{name}"] = {a: by[(name, a)]["acc_mean"] for a in arms}
    metrics["acc_real"] = {
        a: float(np.mean([by[(n, a)]["acc_mean"] for n in cfg["real_mean"]])) for a in arms
    }
    ref = f"h{h0}"
    gcn_energy = by[(ref, "gcn")]["energy_uj"]
    metrics["energy_uj"] = {a: by[(ref, a)]["energy_uj"] for a in arms}
    metrics["float_share"] = {a: by[(ref, a)]["float_share"] for a in arms}
    metrics["spike_energy_vs_gcn"] = {a: by[(ref, a)]["ac_energy_uj"] / gcn_energy for a in arms}
    big = cfg["real_mean"][0]
    metrics[f"energy_uj_{big}"] = {a: by[(big, a)]["energy_uj"] for a in arms}
    metrics[f"float_share_{big}"] = {a: by[(big, a)]["float_share"] for a in arms}
    metrics["memory_mb"] = {a: by[(ref, a)]["memory_bytes"] / 2**20 for a in arms}
    metrics["sec_per_epoch"] = {a: by[(ref, a)]["sec_per_epoch"] for a in arms}
    metrics["params"] = {a: float(by[(ref, a)]["params"]) for a in arms}

    # Same untrained SpikingGCN weights with the encoder cached instead of recomputed per step.
    torch.manual_seed(seed)
    probe_model = builders["spikinggcn"](64, 3)
    cached_model = builders["spikinggcn"](64, 3)
    cached_model.load_state_dict(probe_model.state_dict())
    cached_model.cache_encoder = True
    encoder_table = {
        "recomputed_uj": energy_report(probe_model, csbm_graphs[ref]).total_joules * 1e6,
        "cached_uj": energy_report(cached_model, csbm_graphs[ref]).total_joules * 1e6,
        "note": f"untrained SpikingGCN weights (seeded), same weights both ways; T = {cfg['T']}",
    }
    info: dict = {
        "table": [{k: v for k, v in r.items() if k != "per_layer"} for r in rows],
        "energy_breakdown": {r["model"]: r["per_layer"] for r in rows if r["dataset"] == ref},
        "encoder_cache": encoder_table,
        "datasets": {
            name: {
                "num_nodes": int(d.num_nodes),
                "num_undirected_edges": int(d.edge_index.size(1) // 2),
                "num_classes": int(d.num_classes),
                "test_nodes": int(d.test_mask.sum()),
            }
            for name, d in {**real, **csbm_graphs}.items()
        },
        "not_built": NOT_BUILT,
        "paper_datasets_missing": PAPER_DATASETS_MISSING,
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
            csbm_graphs[ref], grid, seeds=(seed,), base=base, hidden_channels=cfg["hidden"], **sweep_kw
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
    m = result["metrics"]
    acc = m.get("acc_h07") or m["acc_h09"]  # h09: results before v2
    energy, share = m["energy_uj"], m["float_share"]
    real = m.get("acc_real", {})
    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    for arm in acc:
        if arm in energy:
            ax[0].scatter(np.mean(energy[arm]), np.mean(acc[arm]), label=arm)
    ax[0].set_xscale("log")
    ax[0].set_xlabel("theoretical energy per full-graph inference (uJ), CSBM h = 0.7")
    ax[0].set_ylabel("test accuracy, h = 0.7")
    ax[0].legend(fontsize=7)
    ax[1].bar(list(share), [np.mean(share[a]) for a in share])
    ax[1].set_ylabel("float_share (real-valued op energy / total)")
    ax[1].tick_params(axis="x", rotation=60, labelsize=7)
    if real:
        ax[2].bar(list(real), [np.mean(real[a]) for a in real], yerr=[np.std(real[a]) for a in real])
        ax[2].set_ylabel("mean test accuracy, real graphs")
        ax[2].tick_params(axis="x", rotation=60, labelsize=7)
    fig.tight_layout()
    return [save_figure(fig, folder, "sgnnbench_accuracy_energy", dpi=100)]


# threads: intra-op threads of the run (set by the runner): tiny models, shared CPU
_COMMON = {"threads": 1, "mu": 0.5, "lr": 1e-2, "weight_decay": 1e-4, "T": 5}
_NEAR = -0.05  # non-inferiority margin of every accuracy criterion (declared before the full run)

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
    references=OTHER_SGNNS,
    premises=(
        AtLeast("acc_h07", arm="gcn", threshold=0.6, label="gcn_learns"),
        AtMost("acc_h07", arm="gcn", threshold=0.97, label="gcn_below_ceiling"),
        AtLeast("acc_real", arm="gcn", threshold=0.6, label="gcn_learns_real"),
        AtMost("acc_real", arm="gcn", threshold=0.97, label="gcn_below_ceiling_real"),
    ),
    criteria=(
        Better("acc_h07", baseline="gcn", margin=_NEAR, label="acc_near_gcn"),
        Better("acc_h07", baseline="sgc", margin=_NEAR, label="acc_near_sgc"),
        Better("acc_real", baseline="gcn", margin=_NEAR, label="acc_near_gcn_real"),
        Better("acc_real", baseline="sgc", margin=_NEAR, label="acc_near_sgc_real"),
        AtMost("spike_energy_vs_gcn", threshold=1.0 / 3.0, label="spike_ops_cheap"),
        AtLeast("float_share", threshold=0.5, label="float_path_dominates"),
        *(
            Better("acc_real", baseline="gcn", arm=a, margin=_NEAR, label=f"{a}_near_gcn_real")
            for a in OTHER_SGNNS
        ),
    ),
    run=run,
    configs={
        "smoke": {
            **_COMMON,
            "num_nodes": 120,
            "hidden": 16,
            "homophily": [0.7],
            "real": ["karate"],
            "real_mean": ["karate"],
            "epochs": 6,
            "eval_every": 3,
            "patience": 2,
            "models": list(ARMS),
            "homophily_models": [],
            "T": 2,
        },
        "quick": {
            **_COMMON,
            "num_nodes": 300,
            "hidden": 64,
            "homophily": [0.7],
            "real": ["polbooks", "football", "karate"],
            "real_mean": ["polbooks", "football"],
            "epochs": 40,
            "eval_every": 10,
            "patience": 3,
            "models": list(ARMS),
            "homophily_models": [],
        },
        "full": {
            **_COMMON,
            "num_nodes": 600,
            "hidden": 64,
            "homophily": [0.7, 0.9, 0.1],
            "real": ["polblogs", "polbooks", "football", "karate"],
            "real_mean": ["polblogs", "polbooks", "football"],
            "epochs": 40,
            "eval_every": 5,
            "patience": 4,
            "models": list(ARMS),
            "homophily_models": ["gcn", "sgc", "spikinggcn", "spikenet_lite"],
            "sweep": {"neuron": ["IF", "LIF", "PLIF"], "T": [1, 5, 10], "norm": ["none", "bn"]},
            "sweep_epochs": 30,
            "scaling_sizes": [5000, 10000, 20000],
            "extras_seed": 0,
        },
    },
    seeds={"smoke": (0,), "quick": (0, 1, 2), "full": (0, 1, 2, 3, 4)},
    headlines=(
        Headline(
            "9 SGNNs evaluated on 18-20 datasets",
            untested="7 of the 9 SGNNs are built (MSG and SiGNN are not: "
            + "; ".join(f"{k}: {v}" for k, v in NOT_BUILT.items())
            + "); none of the paper's datasets ships offline, so 4 real labelled graphs that do (polblogs, "
            "polbooks, football, karate club) and 3 synthetic CSBMs stand in",
        ),
        Headline(
            "SGNN accuracy comparable to ANN GNNs",
            criteria=("acc_near_gcn", "acc_near_sgc", "acc_near_gcn_real", "acc_near_sgc_real"),
        ),
        Headline(
            "the benchmark's other SGNNs are also comparable to the ANN GCN (real graphs)",
            criteria=tuple(f"{a}_near_gcn_real" for a in OTHER_SGNNS),
        ),
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
    items={
        "acc_h07": {"smoke": 24, "quick": 60, "full": 120},
        "acc_real": {"smoke": 8, "quick": 43, "full": 341},
    },
    implemented=(
        "neurips26.graph.sgnnbench: IF/LIF/PLIF neurons with five surrogate gradients, hard reset and optional "
        "dynamic threshold; SpikingGCNConv / SpikingSAGEConv / SpikingGATConv (PyG MessagePassing), STFN and "
        "spike-driven linear attention; SGNN with direct/poisson encoding, cached or per-step encoder, K-hop or "
        "precomputed propagation, BN/STFN, residual, JK, rate-averaged readout, BPTT. Seven SGNNs of the "
        "benchmark's list: SpikingGCN (precomputed A_hat^2 x, real-valued input linear recomputed at every step "
        "as in the public code, LIF, BN, T = 5, threshold 0.5), SpikeNet-lite (2 spiking SAGE layers), GC-SNN "
        "(2 spiking GCN layers, STFN), GA-SNN (2 spiking GAT layers, 4 heads, STFN), DRSGNN (SpikingGCN with "
        "8-step random-walk positional encodings and dynamic-threshold neurons), SpikeGCL (feature groups as "
        "time steps, PLIF, 1-bit T x H representation, supervised readout) and SpikeGraphormer-lite (GCN branch "
        "+ spike-driven all-pair linear attention); ANN GCN (PyG, 2 layers, dropout 0.5) and SGC (PyG SGConv, "
        "K = 2); hidden 64, T = 5 for all (full). Analytic energy from forward hooks and layer records: E_AC (0.9 pJ) "
        "x firing rate x ops for spike inputs, E_MAC (4.6 pJ) x ops for real inputs, per call. Same protocol "
        "for all: Adam lr 1e-2, weight decay 1e-4, best validation state kept (full: eval every 5 epochs, stop "
        "after 4 evaluations without gain, max 40 epochs). Full adds "
        "h = 0.9 / 0.1 CSBM graphs (the four original arms), a neuron x T x norm sweep (3 x 3 x 2, 30 epochs, "
        "average ranks, seed 0) and FakeDataset scaling of "
        "energy and memory (in info)."
    ),
    differences=(
        "Datasets: none of the paper's 18-20 datasets can be had offline (" + PAPER_DATASETS_MISSING + "). "
        "Stand-ins: 4 real labelled graphs that ship in packages (polblogs 1,490 nodes / 2 classes, polbooks 105 / "
        "3, football 115 / 12 conferences from Debian python3-graph-tool; karate club 34 / 2 factions from "
        "networkx), all featureless, so every model gets seeded 64-d Gaussian node features; 60/20/20 stratified "
        "splits per seed; polblogs keeps all 1,490 nodes (including isolated ones, so no model reaches 1.0); "
        "karate's 8 test nodes are reported but left out of acc_real. Synthetic CSBM graphs n = 600 (spec: 2000). "
        "Models: 7 of the 9 SGNNs (MSG, SiGNN not built); SpikeNet is its static-graph lite form; GC-SNN's STFN "
        "pools statistics per time step (the paper pools over time too); SpikeGCL is trained supervised end to "
        "end (the paper pre-trains contrastively, then fits a linear probe); SpikeGraphormer is a one-layer lite "
        "form; only GCN and SGC of the ANN baselines (no GraphSAGE/GAT). Budget for 9 arms x 7 graphs x 5 seeds "
        "in 10 CPU minutes: hidden 64 (spec 128), max 40 epochs (spec 200), evaluation every 5 epochs with "
        "patience 4 (spec: every 10, patience 5), the same for every arm; lr 1e-2 for every model (spec: 1e-3) so all converge within it; the design sweep and FakeDataset "
        "scaling run on seed 0 only; the h = 0.9 / 0.1 graphs run the four original arms only (CPU budget); no "
        "link prediction; CPU memory is an autograd-saved-tensor account, not an RSS high-water mark; quick uses "
        "one seed (n = 300, hidden 64, 40 epochs, polbooks + football), so paired criteria are inconclusive "
        "there. Full: 5 seeds. The CSBM criteria graph is h = 0.7 with mu = 0.5 (at h = 0.9, mu = 1.0 every "
        "model sits at 0.99). The benchmark's named bottleneck was not retrievable; the float-path reading is "
        "the spec's (inferred) hypothesis, stated before running."
    ),
    data=(
        "Real: polblogs, polbooks, football (graph-tool's collection files shipped by Debian python3-graph-tool, "
        "read by neurips26.common.graphdata_gt from the Debian location or ~/.cache/neurips26/graph_tool_collection, "
        "where `apt-get download python3-graph-tool` + `dpkg-deb -x` puts them without installing graph-tool; "
        "labels = vertex property 'value': leaning, leaning c/l/n, conference) and networkx's karate club (2 factions); undirected, self-loops dropped; seeded 64-d "
        "N(0, 1) features; 60/20/20 stratified masks from the seed. Synthetic: neurips26.common.graphs.csbm, 3 "
        "balanced classes, 64-d Gaussian features (mu = 0.5), average degree 10, edge homophily 0.7 (all arms) "
        "and 0.9 / 0.1 (full, four arms). PyG FakeDataset (5k-20k nodes) for energy/memory scaling only."
    ),
    plot=plot,
    display_names={
        "gcn": "GCN",
        "sgc": "SGC",
        "spikinggcn": "SpikingGCN",
        "spikenet_lite": "SpikeNet-lite",
        "gc_snn": "GC-SNN",
        "ga_snn": "GA-SNN",
        "drsgnn": "DRSGNN",
        "spikegcl": "SpikeGCL",
        "spikegraphormer": "SpikeGraphormer-lite",
    },
    glossary={
        "acc_h07": "test accuracy (test_mask) at the best validation evaluation, CSBM h = 0.7",
        "acc_h09": "same at h = 0.9 (full profile, four arms)",
        "acc_h01": "same at h = 0.1 (full profile, four arms)",
        "acc_polblogs": "test accuracy on polblogs (1,490 blogs, 2 leanings; graph-tool collection)",
        "acc_polbooks": "test accuracy on polbooks (105 books, 3 leanings)",
        "acc_football": "test accuracy on football (115 teams, 12 conferences)",
        "acc_karate": "test accuracy on the karate club (34 members, 2 factions; 8 test nodes)",
        "acc_real": "mean test accuracy over the profile's labelled real graphs (full: polblogs, polbooks, "
        "football; quick: polbooks, football; smoke: karate)",
        "energy_uj": "theoretical energy of one full-graph inference in microjoules on the h = 0.7 graph: "
        "sum over op calls of 0.9 pJ x input firing rate x dense ops (binary-spike inputs) or 4.6 pJ x dense ops "
        "(real inputs); linear ops = rows x in x out, propagation = nnz(A_hat) x channels per hop, norm = elements",
        "energy_uj_polblogs": "same on polblogs (full profile)",
        "energy_uj_polbooks": "same on polbooks (quick profile)",
        "energy_uj_karate": "same on the karate club (smoke profile)",
        "float_share": "energy of real-valued-input ops / total energy (1.0 for an ANN), h = 0.7 graph",
        "float_share_polblogs": "same on polblogs",
        "float_share_polbooks": "same on polbooks",
        "float_share_karate": "same on the karate club",
        "spike_energy_vs_gcn": "energy of the arm's spike-input (accumulate) ops / total energy of the ANN GCN "
        "on the same graph and seed (0 for ANNs)",
        "memory_mb": "MiB of tensors saved for backward in one training step plus its outputs",
        "sec_per_epoch": "mean wall seconds per training epoch (forward, backward, Adam), single thread",
        "params": "number of trainable parameters",
    },
)

"""Claim check for CoRF (coupled receptive fields for batched conditional message passing on KGs).

One NBFNet-lite model (progressive, zero-preserving CMP) is trained briefly through the CoRF executor
(exactness makes training executor-agnostic; full-entity softmax loss) and then the same Zipf-headed query batch is answered by
four executors sharing its weights: the full graph (timed on a subset), per-query L-hop subgraphs
(PyG ``k_hop_subgraph``, batched as a disjoint union), per-query PPR top-k subgraphs (push-based
approximate PPR, the one-shot-subgraph baseline) and CoRF. On the largest synthetic graph the same
supports are also executed by 2 spawned gloo worker processes, assigned by LPT on the cost model or
round-robin (measured makespan and per-worker loads). Measured: throughput (queries/s),
profiler peak memory of a ``batch_size``-query workload, filtered MRR, and the largest score
difference against the full graph, on learnable synthetic community KGs
(:func:`neurips26.kg.corf.synthetic.rule_community_kg`: paired, symmetric and composition-rule relations,
so held-out triples are implied by short paths) and on PyKEEN's UMLS and Kinships.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

from neurips26.claims.base import AtLeast, Better, Claim, Exact, Headline, RatioAtLeast, SeedResult, Within
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.kg import (
    filtered_ranks,
    in_degree,
    known_tails,
    load_pykeen_dataset,
    positive_mask,
    pykeen_mrr_tolerance,
    pykeen_ranking_metrics,
    ranking_metrics,
    zipf_queries,
)
from neurips26.common.profiling import peak_allocated_bytes
from neurips26.kg.corf import (
    CoRFExecutor,
    FullGraphExecutor,
    NBFNetLite,
    ReceptiveSupportPlanner,
    SubgraphExecutor,
    lpt_assign,
    makespan,
    round_robin_assign,
    train_cmp,
)
from neurips26.kg.corf.ppr import PPRSampler, PPRSubgraphExecutor
from neurips26.kg.corf.synthetic import rule_community_kg
from neurips26.kg.corf.workers import balanced_run, job_costs

METHOD = "corf"
BASELINES = ("per_query", "full_graph", "ppr")
TIMED = ("per_query", "ppr", "corf")
REFERENCES = ("random", "round_robin")


def _graph(kg) -> Data:
    ei, et = kg.graph("train")
    g = Data(edge_index=ei, edge_type=et, num_nodes=kg.num_entities)
    g.in_degree = in_degree(ei, kg.num_entities)
    return g


def _executors(model, cfg, batch_size, ppr_top_k):
    planner = ReceptiveSupportPlanner(cfg["num_layers"], node_budget=cfg["node_budget"], redundancy=False)
    sampler = PPRSampler(ppr_top_k, alpha=cfg["ppr_alpha"], eps=cfg["ppr_eps"])
    return {
        "corf": CoRFExecutor(model, planner, batch_size=batch_size),
        "per_query": SubgraphExecutor(model, batch_size=batch_size),
        "ppr": PPRSubgraphExecutor(model, sampler, batch_size=batch_size),
        "full_graph": FullGraphExecutor(model, batch_size=batch_size),
    }


def _load_balancing(ex, queries, graph, cfg) -> dict:
    """LPT (cost model) vs round-robin assignment of the same supports, run on real gloo workers."""
    supports, residual = ex.plan(queries, graph)
    costs = job_costs(supports, residual, graph.edge_index.shape[1], cfg["num_layers"])
    w = cfg["workers"]
    assignments = {"corf": lpt_assign(costs, w), "round_robin": round_robin_assign(len(costs), w)}
    out = balanced_run(ex, queries, graph, supports, residual, assignments, repeats=cfg["lb_repeats"])
    single = ex.scores(queries, graph)
    res: dict = {
        "jobs": len(costs),
        "distributed_max_abs_diff": float((out["scores"] - single).abs().max()),
        "rounds": out["rounds"],
    }
    for arm, a in assignments.items():
        rounds = [r for r in out["rounds"] if r["assignment"] == arm]
        res[arm] = {
            "makespan_s": statistics.median(r["makespan_s"] for r in rounds),
            "imbalance": statistics.median(
                max(r["load_s"]) / max(statistics.mean(r["load_s"]), 1e-12) for r in rounds
            ),
            "model_makespan_share": makespan(costs, a) / max(sum(costs), 1e-12),
        }
    return res


def _timed(executor, queries, graph, repeats):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = executor.scores(queries, graph)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _evaluate(model, kg, graph, cfg, seed, batch_size, tag, full_eval: bool, num_queries: int) -> dict:
    """Time, memory, exactness and filtered MRR of the three executors on one graph."""
    queries, targets = zipf_queries(
        kg.test, kg.num_relations, num_queries, pool_fraction=cfg["pool_fraction"], seed=seed + 11
    )
    # redundancy ratio of the whole batch (diagnostic, not timed); its median receptive field sets PPR's top-k
    rho_planner = ReceptiveSupportPlanner(cfg["num_layers"], node_budget=cfg["node_budget"])
    rho_planner.plan(queries, graph.edge_index, graph.edge_type, kg.num_entities)
    top_k = max(1, round(cfg["ppr_top_k_ratio"] * rho_planner.last_stats["median_field_nodes"]))
    ex = _executors(model, cfg, batch_size, top_k)
    row: dict = {
        "graph": tag,
        "num_entities": kg.num_entities,
        "edges": int(graph.edge_index.shape[1]),
        "batch_size": batch_size,
        "num_queries": int(queries.shape[0]),
        "ppr_top_k": top_k,
        "rho": rho_planner.last_stats["rho"],
        "num_supports": rho_planner.last_stats["num_supports"],
        "unique_heads": rho_planner.last_stats["unique_heads"],
    }
    sub = queries[: cfg["full_graph_queries"]]
    with torch.no_grad():
        scores = {}
        for arm in TIMED:
            sec, scores[arm] = _timed(ex[arm], queries, graph, cfg["repeats"])
            row[arm] = {
                "seconds": sec,
                "queries_per_s": queries.shape[0] / sec,
                **{k: v for k, v in ex[arm].last_stats.items() if isinstance(v, (int, float, bool))},
            }
        sec, full = _timed(ex["full_graph"], sub, graph, cfg["repeats"])
        row["full_graph"] = {
            "seconds": sec,
            "queries_per_s": sub.shape[0] / sec,
            "timed_queries": int(sub.shape[0]),
        }
        for arm in TIMED:
            row[arm]["max_abs_diff"] = float((scores[arm][: sub.shape[0]] - full).abs().max())
        # peak memory of one batch_size-query workload (first batch), profiler allocator events
        mem_q = queries[:batch_size]
        for arm in (*TIMED, "full_graph"):
            row[arm]["peak_mb"] = peak_allocated_bytes(lambda a=arm: ex[a].scores(mem_q, graph)) / 2**20
        if full_eval:
            known = known_tails(kg.train, kg.valid, kg.test, num_relations=kg.num_relations)
            mask = positive_mask(queries, known, kg.num_entities)
            # judged MRR: PyKEEN's RankBasedEvaluator on our scores and filter (realistic rank); our
            # filtered_ranks is the cross-check, equal within pykeen_mrr_tolerance (recorded per row)
            gen = torch.Generator().manual_seed(seed + 5)
            rand = torch.rand(queries.shape[0], kg.num_entities, generator=gen)
            diffs = []
            for arm, sc in (*((a, scores[a]) for a in TIMED), ("random", rand)):
                judged = pykeen_ranking_metrics(sc, targets, mask)["mrr"]
                ours = ranking_metrics(filtered_ranks(sc, targets, mask))["mrr"]
                diffs.append(abs(judged - ours))
                if arm == "random":
                    row["random_mrr"] = judged
                else:
                    row[arm]["mrr"] = judged
            row["mrr_crosscheck"] = {
                "max_abs_diff": max(diffs),
                "tolerance": pykeen_mrr_tolerance(queries.shape[0]),
            }
        if full_eval and tag.startswith("synthetic"):
            # load balancing: the same supports on real worker processes, LPT vs round-robin
            row["load_balancing"] = _load_balancing(ex["corf"], queries, graph, cfg)
    return row


def _train(kg, graph, cfg, seed, steps):
    torch.manual_seed(seed)
    model = NBFNetLite(2 * kg.num_relations, hidden=cfg["hidden"], num_layers=cfg["num_layers"])
    ex = CoRFExecutor(
        model,
        ReceptiveSupportPlanner(cfg["num_layers"], node_budget=cfg["node_budget"], redundancy=False),
        batch_size=cfg["train_queries"],
    )
    log = train_cmp(
        ex,
        kg.train,
        graph,
        kg.num_relations,
        steps=steps,
        batch_queries=cfg["train_queries"],
        num_negatives=32,
        lr=cfg["lr"],
        seed=seed,
        loss=cfg["loss"],
    )
    model.eval()
    return model, log


def run(cfg: dict, seed: int) -> SeedResult:
    return _run_inner(cfg, seed)


def _run_inner(cfg: dict, seed: int) -> SeedResult:
    rows, curves, budget = [], {}, {}
    sizes = list(cfg["graph_sizes"])
    main = sizes[-1]
    for n in sizes:
        kg = rule_community_kg(n, num_relations=cfg["num_relations"], seed=seed)
        graph = _graph(kg)
        steps = cfg["steps"] if n == main else 0
        model, log = _train(kg, graph, cfg, seed, steps)
        if steps:
            curves["train_loss_synthetic"] = {METHOD: log["losses"]}
            budget = {
                arm: {
                    "train_steps": steps,
                    "train_executor": "corf (exact: identical gradients)",
                    "params": sum(p.numel() for p in model.parameters()),
                    "lr_grid": [cfg["lr"]],
                    "loss": cfg["loss"],
                }
                for arm in (METHOD, *BASELINES)
            }
        for bs in cfg["batch_sizes"]:
            rows.append(
                _evaluate(
                    model,
                    kg,
                    graph,
                    cfg,
                    seed,
                    bs,
                    f"synthetic_n{n}",
                    full_eval=(n == main and bs == cfg["batch_sizes"][0]),
                    num_queries=cfg["num_queries"],
                )
            )
    for name in cfg["real"]:
        kg = load_pykeen_dataset(name)
        graph = _graph(kg)
        model, log = _train(kg, graph, cfg, seed, cfg["steps_real"])
        curves[f"train_loss_{name}"] = {METHOD: log["losses"]}
        rows.append(
            _evaluate(
                model,
                kg,
                graph,
                cfg,
                seed,
                cfg["batch_sizes"][0],
                name,
                full_eval=True,
                num_queries=cfg["num_queries_real"],
            )
        )

    def pick(tag, bs=cfg["batch_sizes"][0]):
        return next(r for r in rows if r["graph"] == tag and r["batch_size"] == bs)

    syn = pick(f"synthetic_n{main}")
    lb = syn["load_balancing"]
    metrics = {
        "mrr": {
            METHOD: syn["corf"]["mrr"],
            "per_query": syn["per_query"]["mrr"],
            "ppr": syn["ppr"]["mrr"],
            "random": syn["random_mrr"],
        },
        "queries_per_s": {a: syn[a]["queries_per_s"] for a in (*TIMED, "full_graph")},
        "peak_mb": {a: syn[a]["peak_mb"] for a in (*TIMED, "full_graph")},
        "max_abs_diff": {a: max(r[a]["max_abs_diff"] for r in rows) for a in TIMED},
        "exact": {METHOD: float(max(r["corf"]["max_abs_diff"] for r in rows) < 1e-5)},
        "rho": {METHOD: syn["rho"]},
        "max_speedup": {METHOD: max(r["per_query"]["seconds"] / r["corf"]["seconds"] for r in rows)},
        "max_memory_reduction": {
            METHOD: max(r["per_query"]["peak_mb"] / max(r["corf"]["peak_mb"], 1e-9) for r in rows)
        },
        "makespan_s": {a: lb[a]["makespan_s"] for a in (METHOD, "round_robin")},
        "distributed_exact": {METHOD: float(lb["distributed_max_abs_diff"] < 1e-5)},
    }
    for name in cfg["real"]:
        r = pick(name)
        metrics[f"queries_per_s_{name}"] = {
            a: r[a]["queries_per_s"] for a in (*TIMED, "full_graph")
        }
        metrics[f"peak_mb_{name}"] = {a: r[a]["peak_mb"] for a in (*TIMED, "full_graph")}
        metrics[f"mrr_{name}"] = {
            METHOD: r["corf"]["mrr"],
            "per_query": r["per_query"]["mrr"],
            "ppr": r["ppr"]["mrr"],
            "random": r["random_mrr"],
        }
    return SeedResult(metrics=metrics, curves=curves, info={"per_setting": rows, "budget": budget})


def plot(result: dict, folder: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    pts: dict[str, dict[tuple, list]] = {}
    for seed_info in result.get("info", []):
        for r in seed_info.get("per_setting", []):
            work = r["num_queries"] * r["edges"] / r["num_entities"]
            for arm in (a for a in (*TIMED, "full_graph") if a in r):  # older results have no ppr arm
                pts.setdefault(arm, {}).setdefault((r["graph"], r["batch_size"], work), []).append(
                    (r[arm]["seconds"] / (r[arm].get("timed_queries") or r["num_queries"]), r[arm]["peak_mb"])
                )
    for arm, by in pts.items():
        keys = sorted(by, key=lambda k: k[2])
        ax[0].plot(
            [k[2] for k in keys], [1e3 * np.mean([v[0] for v in by[k]]) for k in keys], "o-", label=arm
        )
        ax[1].plot([k[2] for k in keys], [np.mean([v[1] for v in by[k]]) for k in keys], "o-", label=arm)
    for a, lab in zip(ax, ("ms per query", "peak MiB (one batch)")):
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_xlabel("queries x average degree (work)")
        a.set_ylabel(lab)
        a.legend(fontsize=7)
    return [save_figure(fig, folder, "corf_cost_scaling", dpi=100)]


_COMMON = {
    "threads": 1,  # intra-op threads of the run (set by the runner): tiny models, shared CPU
    "num_relations": 20,
    "node_budget": 4.0,
    "pool_fraction": 0.1,
    "train_queries": 16,
    "lr": 5e-3,
    "loss": "softmax",
    "workers": 2,
    "repeats": 1,
    # PPR top-k sampler (one-shot-subgraph baseline): k = ratio x median receptive-field size of the batch
    # (the exact extractor's typical node count), restart 0.15, push threshold 1e-4 per unit degree
    "ppr_top_k_ratio": 1.0,
    "ppr_alpha": 0.15,
    "ppr_eps": 1e-4,
}

CLAIM = Claim(
    slug="corf",
    claim=(
        "Planning shared, boundary-padded receptive supports lets conditional message passing answer batches of "
        "KG queries up to 5.9x faster and with up to 10x less memory than per-query subgraphs, with identical scores."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    # premise bars declared before the rebuilt testbed's first run (model_learns unchanged from the
    # earlier testbed, where it failed at +0.024; the real-KG bars are the same 0.05 over random)
    premises=(
        Better("mrr", arm="per_query", baseline="random", margin=0.05, min_seeds=1, label="model_learns"),
        Better(
            "mrr_umls",
            arm="per_query",
            baseline="random",
            margin=0.05,
            min_seeds=1,
            label="model_learns_umls",
        ),
        Better(
            "mrr_kinships",
            arm="per_query",
            baseline="random",
            margin=0.05,
            min_seeds=1,
            label="model_learns_kinships",
        ),
        AtLeast("rho", threshold=2.0, label="overlap_regime"),
    ),
    criteria=(
        Exact("exact", expected=1.0, kind="design", label="exact_scores"),
        Within("mrr", baseline="per_query", tolerance=1e-3, min_seeds=1, kind="design", label="equal_mrr"),
        Within(
            "mrr_umls",
            baseline="per_query",
            tolerance=0.01,
            min_seeds=1,
            kind="design",
            label="equal_mrr_umls",
        ),
        Within(
            "mrr_kinships",
            baseline="per_query",
            tolerance=0.01,
            min_seeds=1,
            kind="design",
            label="equal_mrr_kinships",
        ),
        Better("queries_per_s", baseline="per_query", kind="cost", label="faster_synthetic"),
        Better("queries_per_s_umls", baseline="per_query", kind="cost", label="faster_umls"),
        Better("queries_per_s_kinships", baseline="per_query", kind="cost", label="faster_kinships"),
        Better("queries_per_s", baseline="full_graph", kind="cost", label="faster_than_full_graph"),
        RatioAtLeast("max_speedup", ratio=5.9, kind="cost", label="speedup_5_9x"),
        Better("peak_mb", baseline="per_query", higher_is_better=False, kind="cost", label="less_memory_synthetic"),
        Better("peak_mb_umls", baseline="per_query", higher_is_better=False, kind="cost", label="less_memory_umls"),
        Better(
            "peak_mb_kinships", baseline="per_query", higher_is_better=False, kind="cost", label="less_memory_kinships"
        ),
        Better("peak_mb", baseline="full_graph", higher_is_better=False, kind="cost", label="less_memory_than_full_graph"),
        RatioAtLeast("max_memory_reduction", ratio=10.0, kind="cost", label="memory_10x"),
        Better("makespan_s", baseline="round_robin", higher_is_better=False, kind="cost", label="lpt_beats_round_robin"),
        # declared before the first run with the PPR sampler and the real-worker balancing (issue 35 item 9)
        Better("queries_per_s", baseline="ppr", kind="cost", label="faster_than_ppr"),
        Better("mrr", baseline="ppr", kind="evidence", label="more_accurate_than_ppr"),
        Exact("distributed_exact", expected=1.0, kind="design", label="distributed_scores_exact"),
    ),
    headlines=(
        Headline(
            "Up to 5.9x speed-up on state-of-the-art CMP models without compromising reasoning accuracy",
            criteria=(
                "speedup_5_9x",
                "faster_synthetic",
                "faster_umls",
                "faster_kinships",
                "faster_than_ppr",
                "exact_scores",
                "equal_mrr",
                "equal_mrr_umls",
                "equal_mrr_kinships",
            ),
        ),
        Headline(
            "Up to 10.0x memory reduction",
            criteria=("memory_10x", "less_memory_synthetic", "less_memory_umls", "less_memory_kinships"),
        ),
        Headline(
            "Cost-aware load balancing improves distributed efficiency",
            criteria=("lpt_beats_round_robin", "distributed_scores_exact"),
        ),
        Headline(
            "Coupled supports keep the full L-hop receptive field, so no accuracy is traded for locality as with "
            "sampled per-query subgraphs (PPR top-k, the one-shot-subgraph baseline; contrast inferred from the "
            "abstract)",
            criteria=("more_accurate_than_ppr",),
        ),
    ),
    items={
        "mrr": {"smoke": 48, "quick": 256, "full": 1024},
        "mrr_umls": {"smoke": 32, "quick": 64, "full": 128},
        "mrr_kinships": {"smoke": 32, "quick": 64, "full": 128},
    },
    run=run,
    configs={
        "smoke": {
            **_COMMON,
            "graph_sizes": [300],
            "num_queries": 48,
            "num_layers": 2,
            "hidden": 8,
            "steps": 2,
            "steps_real": 1,
            "num_queries_real": 32,
            "batch_sizes": [16],
            "lb_repeats": 1,
            "full_graph_queries": 16,
            "real": ["umls", "kinships"],
        },
        "quick": {
            **_COMMON,
            "graph_sizes": [3000],
            "num_queries": 256,
            "num_layers": 3,
            "hidden": 16,
            "steps": 60,
            "steps_real": 10,
            "num_queries_real": 64,
            "batch_sizes": [32],
            "lb_repeats": 3,
            "full_graph_queries": 32,
            "real": ["umls", "kinships"],
        },
        "full": {
            **_COMMON,
            "graph_sizes": [5000, 20000],
            "num_queries": 1024,
            "num_layers": 3,
            "hidden": 32,
            "steps": 100,
            "steps_real": 40,
            "num_queries_real": 128,
            "batch_sizes": [64],
            "lb_repeats": 5,
            "full_graph_queries": 32,
            "real": ["umls", "kinships"],
        },
    },
    seeds={"smoke": (0,), "quick": (0,), "full": (0, 1, 2)},
    implemented=(
        "neurips26.kg.corf: NBFNetLite (progressive DistMult CMP with query-conditioned relation vectors, "
        "full-graph in-degree normalisation, reached-set masking; PyG MessagePassing), ReceptiveSupportPlanner "
        "(identical-head grouping, BFS locality order, greedy merging under a node budget of 4x the median "
        "receptive field with overlap >= 0.3, boundary padding to the full L-hop fields with full-graph degrees, "
        "residual compensation), PPRSampler/PPRSubgraphExecutor (push-based approximate PPR, top-k "
        "neighbourhood, one-shot-subgraph baseline), balanced_run (LPT vs round-robin supports executed on "
        "spawned gloo worker processes), CoRFExecutor (supports extracted once with PyG subgraph and copied per query "
        "by index offsets, packed batch_size queries per propagation), SubgraphExecutor (PyG k_hop_subgraph per "
        "query, disjoint-union batches), FullGraphExecutor, LPT load balancing. One model per graph, trained "
        "100 steps x 16 queries (quick 60; real KGs 40, quick 10; full-entity softmax cross-entropy, Adam lr 5e-3) "
        "through CoRF, shared by all executors. Filtered MRR: PyKEEN's RankBasedEvaluator (process_scores_/finalize "
        "on our scores with PyKEEN's filter_scores_, realistic rank; neurips26.common.kg.PykeenRanking), cross-checked "
        "against neurips26.common.kg.filtered_ranks within (ceil(log2 n) + 4) eps32 (info per_setting mrr_crosscheck)."
    ),
    differences=(
        "No paper text or code is public: the planner is the spec's inferred greedy algorithm; the overlap test "
        "is the overlap coefficient |S n R|/|R| instead of Jaccard (Jaccard against a growing support rejects "
        "fields the support already contains). Only NBFNet-lite is used (no A*Net/RED-GNN/AdaProp), L = 3 only "
        "(spec also L = 4), no budget sweep, one batch size (64; quick 32), 1024 queries "
        "(spec 2048, to fit the 10-minute budget) and 100 training steps (spec 200); 3 seeds and one timing repeat per setting to fit the CPU "
        "budget; the full-graph executor is timed on the first 32 queries and its throughput extrapolated. The "
        "quick profile has one seed and a 3000-entity graph, so its paired criteria are inconclusive. Peak memory is the PyTorch profiler's allocator high-water mark for one batch_size-query "
        "workload (not RSS in a fresh process). Testbed change after the first full run (premise model_learns "
        "failed at +0.024 MRR over random): the synthetic KG's base triples had uniformly random tails inside a "
        "community, which no model can predict, and BCE with uniform negatives almost never contrasted the true "
        "tail with a reached entity; the KG is now rule_community_kg (every held-out triple implied by a 1- or "
        "2-hop path of paired, symmetric or composition-rule relations) and the loss the full-entity softmax "
        "(NBFNet's alternative). The premise bar (0.05 over random) is unchanged and was declared before the run. "
        "PPR baseline: our push-based approximate PPR (Andersen-Chung-Lang, synchronous rounds, restart 0.15, "
        "threshold 1e-4 x degree) with top-k = the batch's median receptive-field size, then the same NBFNet-lite on "
        "the induced subgraph with full-graph in-degrees; one-shot-subgraph reasoning's trained sampler and its "
        "own GNN are not reproduced, and k was declared before the run, not tuned. Load balancing runs on 2 real "
        "processes (torch.multiprocessing.spawn, gloo group) on the 2 shared CPU cores of this machine, one "
        "thread each, on the largest synthetic graph only: both assignments execute the same supports, one "
        "untimed warm-up round, then 5 rounds (quick 3) in alternating order; W = 2 only (the paper's clusters "
        "are larger), no splitting of over-sized groups, and the scores are gathered through files rather than "
        "a collective. Wall-clock makespan of our CPU code is a cost criterion. Single CPU thread otherwise."
    ),
    data=(
        "Learnable synthetic community KGs (neurips26.kg.corf.synthetic.rule_community_kg: communities of 100, "
        "95% intra-community triples, 20 relations = 6 base relations with 6 paired partners ((h, b, t) comes with "
        "(t, b', h)), 4 symmetric relations and 4 composition rules r_c = r_a o r_b instantiated on two-hop base "
        "paths; about 2.75 triples per entity; 5%/5% valid/test), full profile N in {5000, 20000}; PyKEEN's UMLS (135 entities) and Kinships (104) read from the wheel. Queries: "
        "1024 (quick 256; real KGs 128, quick 64) test triples (and inverses) whose heads follow a Zipf law (exponent 1.1) over 10% of "
        "the test heads (neurips26.common.kg.zipf_queries)."
    ),
    plot=plot,
    glossary={
        "mrr": "filtered MRR computed by PyKEEN's RankBasedEvaluator (realistic rank, all splits filtered) from the "
        "trained model's scores on the Zipf query batch of the largest synthetic graph; random = uniformly random "
        "scores; ppr = the same model on per-query PPR top-k subgraphs",
        "mrr_umls": "same on UMLS",
        "mrr_kinships": "same on Kinships",
        "queries_per_s": "queries answered per wall second (planning/extraction included) on the largest synthetic "
        "graph at the first batch size; full_graph is timed on a prefix of the batch",
        "queries_per_s_umls": "same on UMLS",
        "queries_per_s_kinships": "same on Kinships",
        "peak_mb": "profiler peak allocated MiB while answering the first batch_size queries (largest synthetic graph)",
        "peak_mb_umls": "same on UMLS",
        "peak_mb_kinships": "same on Kinships",
        "max_abs_diff": "largest |score - full-graph score| over all settings on the full-graph-timed prefix",
        "exact": "1 if CoRF's max_abs_diff < 1e-5 on every setting, else 0",
        "rho": "redundancy ratio sum_q |E(R_L(q))| / |union_q E(R_L(q))| of the query batch (largest synthetic graph)",
        "max_speedup": "max over settings (graph, batch size, real KG) of per_query seconds / CoRF seconds",
        "max_memory_reduction": "max over settings of per_query peak_mb / CoRF peak_mb",
        "makespan_s": "measured makespan (median over rounds, seconds from the opening to the closing barrier on "
        "rank 0) of 2 spawned gloo worker processes executing the same CoRF supports, assigned by LPT on the cost "
        "model (corf) or round-robin in planning order; per-worker loads, CPU times and the max/mean load "
        "imbalance are in info per_setting load_balancing",
        "distributed_exact": "1 if the scores gathered from the worker processes equal the single-process CoRF "
        "scores within 1e-5, else 0",
    },
)

"""Claim check for AIQL and A²IQL: offline RL for ranking consolidation moves, and adaptation to a new objective.

Single domain: logs of a noisy greedy heuristic in :class:`~neurips26.rl.aiql.WarehouseConsolidationEnv`
(a Minari dataset recorded with ``DataCollector``), then AIQL, standard IQL (a flat, order-dependent
critic over the selected rows) and behaviour cloning trained on them; every policy is rolled out
greedily and scored by the true throughput (inbound units stored / arrived). Adaptation: the target
objective values near-dock frees 3x and charges travel; with 30x fewer target logs than source logs,
A²IQL (source critic frozen, Bayesian reward bonus in the actor's advantage) is compared with
source-only AIQL, pooling (AIQL on both logs, each with its own reward) and the point estimate
(A²IQL with kappa = 0). The logs are shared by all seeds (seeds vary training and evaluation), as
in offline-RL benchmarks.
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neurips26.claims.base import Better, Claim, Headline, SeedResult, Within
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.cache import cache_key, cache_root
from neurips26.rl.aiql import (
    A2IQL,
    F_DIM,
    G_DIM,
    BayesianRewardPredictor,
    BehaviourCloning,
    OfflineRankingDataset,
    RandomFourierFeatures,
    actor_policy,
    aggregate_features,
    collect_minari,
    evaluate,
    evaluate_planner,
    make_aiql,
    make_env,
    oracle_planner,
)
from neurips26.rl.aiql.evaluate import behaviour, heuristic

METHOD = "aiql"
BASELINES = ("heuristic", "bc", "iql", "source_only", "pooling", "point_estimate")
REFERENCES = ("a2iql", "oracle_planner")
SINGLE = ("heuristic", "bc", "iql", "aiql")
ADAPT = ("a2iql", "source_only", "pooling", "point_estimate")


def _env_kwargs(config: dict) -> dict[str, Any]:
    return dict(
        n_locations=config["n_locations"],
        n_skus=config["n_skus"],
        budget=config["budget"],
        max_candidates=config["max_candidates"],
        horizon=config["horizon"],
    )


def _logs(config: dict, kind: str, episodes: int, seed: int) -> OfflineRankingDataset:
    """The Minari dataset of the behaviour policy (built once per configuration, then loaded)."""
    import minari

    kwargs = _env_kwargs(config)
    key = cache_key(
        {"kind": kind, "episodes": episodes, "seed": seed, "env": kwargs, "policy": "behaviour-T0.5-eps0.1"}
    )
    dataset_id = f"neurips26/warehouse/{kind}-{key[:12]}-v0"
    previous = os.environ.get("MINARI_DATASETS_PATH")
    if previous is None:  # the library's cache, unless the user points Minari elsewhere
        os.environ["MINARI_DATASETS_PATH"] = str(cache_root() / "minari")
    try:
        if dataset_id in minari.list_local_datasets():
            data = minari.load_dataset(dataset_id)
        else:
            data = collect_minari(dataset_id, behaviour(config["budget"]), episodes, seed, env_kwargs=kwargs)
        return OfflineRankingDataset.from_minari(data, env_spec=make_env(**kwargs).spec)
    finally:
        if previous is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)


def _train(agent_update, data: OfflineRankingDataset, updates: int, batch: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(updates):
        agent_update(data.sample(batch, gen))


def _eval(policy, config: dict, seed: int) -> dict[str, Any]:
    return evaluate(policy, _env_kwargs(config), config["eval_episodes"], 100_000 + 1_000 * seed)


def _single_job(payload: dict[str, Any], span: tuple[int, int]) -> Any:
    """One independent job of a seed's first stage (for :func:`~neurips26.common.pool.map_spans`)."""
    config, seed, job = payload["config"], payload["seed"], payload["jobs"][span[0]]
    source, target_logs = payload["source"], payload["target_logs"]
    B, hidden, batch, updates = config["budget"], config["hidden"], config["batch"], config["updates"]
    if job == "heuristic":
        small = dict(config, **config["small"])
        planner = evaluate_planner(
            oracle_planner(B, config["planner_lookahead"], config["planner_samples"]),
            _env_kwargs(small),
            config["small"]["eval_episodes"],
            200_000 + seed,
        )
        small_heur = evaluate(
            heuristic(B), _env_kwargs(small), config["small"]["eval_episodes"], 200_000 + seed
        )
        return _eval(heuristic(B), config, seed), planner, small_heur
    if job == "bc":
        bc = BehaviourCloning(make_aiql(G_DIM, F_DIM, B, hidden=hidden, seed=seed).actor, lr=config["lr"])
        _train(bc.update, source, updates, batch, seed)
        return _eval(actor_policy(bc.actor, B), config, seed)
    if job in ("iql", "aiql"):
        agent = make_aiql(
            G_DIM,
            F_DIM,
            B,
            hidden=hidden,
            critic="flat" if job == "iql" else "aggregate",
            seed=seed,
            lr=config["lr"],
            gamma=config["gamma"],
        )
        _train(agent.update, source, updates, batch, seed)
        result = _eval(actor_policy(agent.actor, B), config, seed)
        return (result, agent) if job == "aiql" else result
    if job == "pooling":
        pooled = make_aiql(G_DIM, F_DIM, B, hidden=hidden, seed=seed, lr=config["lr"], gamma=config["gamma"])
        _train(pooled.update, OfflineRankingDataset.concat([source, target_logs]), updates, batch, seed)
        return _eval(actor_policy(pooled.actor, B), config, seed)
    raise ValueError(f"unknown job {job!r}")


def _adapt_job(payload: dict[str, Any], span: tuple[int, int]) -> Any:
    """One A²IQL re-extraction (kappa > 0, or the point estimate) from the trained source AIQL."""
    config, seed = payload["config"], payload["seed"]
    arm, kappa = payload["jobs"][span[0]]
    agent = A2IQL(payload["aiql"], payload["brm"], kappa=kappa, eta=config["eta"])
    calibration = agent.calibrate(payload["calib"])
    _train(agent.update_actor, payload["both"], config["adapt_updates"], config["batch"], seed + 1)
    return calibration, _eval(actor_policy(agent.actor, config["budget"]), config, seed)


def _map(fn, payload: dict[str, Any], config: dict[str, Any]) -> list[Any]:
    """``[fn(payload, (i, i + 1)) for each job]`` in ``config["workers"]`` processes (here, in turn, when 1).

    Every job seeds its own networks, batches and evaluation episodes (no global random state is read), so
    the numbers do not depend on where or in which order the jobs run.
    """
    spans = [(i, i + 1) for i in range(len(payload["jobs"]))]
    workers = int(config.get("workers", 1))
    if workers > 1 and not multiprocessing.current_process().daemon:  # a daemon may not start processes
        from neurips26.common.pool import map_spans

        return map_spans(fn, spans, payload, workers=workers, threads=config["threads"], what="AIQL jobs")
    return [fn(payload, span) for span in spans]


def run(config: dict[str, Any], seed: int) -> SeedResult:
    source = _logs(config, "source", config["source_episodes"], 0)
    target_logs = _logs(config, "target", config["target_episodes"], 50_000).with_reward("target_reward")
    updates, batch, hidden = config["updates"], config["batch"], config["hidden"]
    results: dict[str, dict[str, Any]] = {}

    # ---------------------------------------------------------------- single domain, pooling, the premise's planner
    jobs = ["aiql", "pooling", "iql", "bc", "heuristic"]  # the longest first
    payload = {"config": config, "seed": seed, "source": source, "target_logs": target_logs, "jobs": jobs}
    outs = dict(zip(jobs, _map(_single_job, payload, config)))
    results["aiql"], aiql = outs["aiql"]
    results["heuristic"], planner, small_heur = outs["heuristic"]
    for arm in ("bc", "iql", "pooling"):
        results[arm] = outs[arm]
    results["source_only"] = results["aiql"]  # the same policy, scored under the target objective too

    # ---------------------------------------------------------------- adaptation (30:1)
    both = OfflineRankingDataset.concat([source, target_logs])
    gen = torch.Generator().manual_seed(seed)
    tb = OfflineRankingDataset.collate([target_logs[i] for i in range(len(target_logs))])
    x_t = torch.cat([tb["global"], aggregate_features(tb["candidates"], tb["mask"], tb["action"])], 1)
    rff = RandomFourierFeatures(
        x_t.shape[1], config["rff_width"], lengthscale=config["rff_lengthscale"], seed=seed
    )
    brm = BayesianRewardPredictor(rff, prior_precision=1.0).fit(x_t, tb["reward"])
    calib = [both.sample(256, gen) for _ in range(4)]
    adapt_jobs = [("a2iql", config["kappa"]), ("point_estimate", 0.0)]
    payload = {
        "config": config,
        "seed": seed,
        "aiql": aiql,
        "brm": brm,
        "calib": calib,
        "both": both,
        "jobs": adapt_jobs,
    }
    adapt_info = {}
    for (arm, _), (calibration, result) in zip(adapt_jobs, _map(_adapt_job, payload, config)):
        adapt_info[arm], results[arm] = calibration, result

    metrics = {
        "throughput": {
            arm: results[arm]["throughput"]
            for arm in (*SINGLE, "pooling", "a2iql", "point_estimate", "source_only")
        },
        "target_return": {
            arm: results[arm]["target_return"] for arm in (*ADAPT, "heuristic", "bc", "iql", "aiql")
        },
        "small_throughput": {"oracle_planner": planner["throughput"], "heuristic": small_heur["throughput"]},
    }
    info = {
        "per_episode": {arm: r["per_episode"] for arm, r in results.items()},
        "data": {
            "source_epochs": len(source),
            "target_epochs": len(target_logs),
            "ratio": len(source) / max(1, len(target_logs)),
            "mean_candidates": float(np.mean([len(c) for c in source.records["candidates"]])),
            "max_candidates": int(max(len(c) for c in source.records["candidates"])),
        },
        "brm": {"noise_precision": brm.beta},
        "adapt_calibration": adapt_info,
        "relative_throughput_vs_heuristic": {
            arm: results[arm]["throughput"] / results["heuristic"]["throughput"] for arm in SINGLE
        },
        "budget": {
            "updates": updates,
            "adapt_updates": config["adapt_updates"],
            "batch": batch,
            "hidden": hidden,
        },
    }
    return SeedResult(metrics=metrics, info=info)


def plot(result: dict, folder: Path) -> list[Path]:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, (metric, arms) in zip(axes, (("throughput", SINGLE), ("target_return", ADAPT))):
        values = result["metrics"][metric]
        means = [np.mean(values[a]) for a in arms]
        stds = [np.std(values[a]) for a in arms]
        ax.bar(range(len(arms)), means, yerr=stds, color="tab:blue")
        ax.set_xticks(range(len(arms)), arms, rotation=20)
        ax.set_title(metric)
        lo = min(m - s for m, s in zip(means, stds))
        ax.set_ylim(lo - 0.1 * abs(lo), None)
    return [save_figure(fig, folder, "aiql_results", dpi=100)]


_COMMON = dict(
    threads=1,
    # a seed's independent trainings and evaluations run in this many processes: the same numbers as running
    # them in turn (each seeds its own networks, batches and episodes), on both cores of a 2-core machine
    workers=2,
    budget=5,
    horizon=40,
    lr=3e-4,
    gamma=0.9,
    kappa=1.0,
    eta=1.0,
    rff_width=256,
    rff_lengthscale=1.0,
    planner_lookahead=10,
    planner_samples=8,
    small={"n_locations": 40, "n_skus": 8, "max_candidates": 64, "horizon": 20, "eval_episodes": 4},
)

CONFIGS = {
    "smoke": {
        **_COMMON,
        "workers": 1,
        "n_locations": 40,
        "n_skus": 8,
        "max_candidates": 64,
        "horizon": 10,
        "source_episodes": 6,
        "target_episodes": 1,
        "hidden": 16,
        "batch": 16,
        "updates": 5,
        "adapt_updates": 3,
        "eval_episodes": 1,
        "small": {"n_locations": 30, "n_skus": 6, "max_candidates": 64, "horizon": 4, "eval_episodes": 1},
        "planner_lookahead": 2,
        "planner_samples": 3,
    },
    "quick": {
        **_COMMON,
        "n_locations": 60,
        "n_skus": 15,
        "max_candidates": 128,
        "source_episodes": 20,
        "target_episodes": 1,
        "hidden": 64,
        "batch": 32,
        "updates": 200,
        "adapt_updates": 100,
        "eval_episodes": 3,
        "small": {"n_locations": 40, "n_skus": 8, "max_candidates": 64, "horizon": 20, "eval_episodes": 1},
    },
    "full": {
        **_COMMON,
        "n_locations": 200,
        "n_skus": 40,
        "max_candidates": 384,
        "source_episodes": 150,
        "target_episodes": 5,
        "hidden": 64,
        "batch": 32,
        "updates": 1000,
        "adapt_updates": 500,
        "eval_episodes": 20,
    },
}

CLAIM = Claim(
    slug="aiql",
    claim=(
        "Asymmetric IQL (per-candidate actor, aggregate-statistic critic) learned from logs alone improves true "
        "throughput over the logging heuristic, and A²IQL adapts to a new objective from 30x less target data better "
        "than source-only training, pooling or a point-estimate bonus."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        Better(
            "small_throughput",
            arm="oracle_planner",
            baseline="heuristic",
            margin=0.0,
            label="heuristic_leaves_room",
        ),
        Within("throughput", arm="bc", baseline="heuristic", tolerance=0.05, label="logs_are_learnable"),
    ),
    criteria=(
        Better("throughput", baseline="heuristic", margin=0.0, label="aiql_beats_heuristic"),
        Better("throughput", baseline="bc", margin=0.0, label="aiql_beats_bc"),
        Better("throughput", baseline="iql", margin=0.0, label="aiql_beats_iql"),
        Better(
            "target_return", arm="a2iql", baseline="source_only", margin=0.0, label="a2iql_beats_source_only"
        ),
        Better("target_return", arm="a2iql", baseline="pooling", margin=0.0, label="a2iql_beats_pooling"),
        Better(
            "target_return",
            arm="a2iql",
            baseline="point_estimate",
            margin=0.0,
            label="a2iql_beats_point_estimate",
        ),
    ),
    headlines=(
        Headline(
            "AIQL improves throughput over a heuristic baseline using offline data alone",
            criteria=("aiql_beats_heuristic", "aiql_beats_bc"),
        ),
        Headline(
            "... by 20%",
            untested="the size of the gain is a property of the simulator (ours is written for the library, not the "
            "paper's warehouse); the measured ratio is in info['relative_throughput_vs_heuristic']",
        ),
        Headline(
            "A²IQL beats source-only training, data pooling and off-dynamics baselines at a 30:1 source-to-target ratio",
            criteria=("a2iql_beats_source_only", "a2iql_beats_pooling", "a2iql_beats_point_estimate"),
        ),
        Headline(
            "... by up to 23%, with the lowest variance across all methods",
            untested="the size is simulator-specific, and 5 seeds cannot rank variances with confidence (per-seed "
            "returns are in metrics and info['per_episode']); no off-dynamics (DARA) baseline is run",
        ),
    ),
    run=run,
    configs=CONFIGS,
    seeds={"smoke": (0,), "quick": (0,), "full": (0, 1, 2, 3, 4)},
    implemented=(
        "WarehouseConsolidationEnv (Gymnasium, registered; masked-Box candidates; near-dock putaway crew with a time "
        "budget, seasonal inbound waves) and Minari logs of the noisy greedy heuristic (softmax T = 0.5 + 10% random). "
        "AIQL = CandidateScoringActor (per-candidate MLP with mean/max set pooling, Plackett-Luce) + twin critics "
        "Q(g, z) on an order-free aggregate z + V(g), expectile 0.7, beta 3, gamma 0.9, Polyak 0.005, w_max 100; "
        "standard IQL = the same with a flat critic over the selected rows in order; BC = unweighted Plackett-Luce "
        "likelihood. A²IQL: Bayesian linear regression on 256 random Fourier features of [g, z] (prior precision 1, "
        "noise precision by evidence maximisation), bonus mu - kappa sigma (kappa = 1), a ridge state baseline and a "
        "scale that matches the source advantage's std (eta = 1); actor re-extracted on source + target logs from the "
        "source actor, critic frozen. The oracle planner simulates a copy of the environment (future randomness "
        "included) 10 epochs ahead for 8 candidate actions."
    ),
    differences=(
        "The paper's warehouse and logs are not public: the simulator is ours, so effect sizes are not comparable to the "
        "paper's +20% / +23%. Full profile: 150 source episodes (spec 300), 5 target episodes (30:1), 1,000 updates "
        "(spec 4,000) and 500 re-extraction updates (spec 2,000) with hidden 64 and batch 32 (spec 2x128, 64), 20 "
        "evaluation episodes (spec 30), 5 seeds; logs are shared by the seeds. No DARA-style off-dynamics baseline. "
        "Seeds: 3 while a full run took 1,394 s; 5 (issue 12's rule: at least 5 wherever the 10-minute budget "
        "allows) once the exact speed-ups brought 3 seeds to 213 s, with every metric of seeds 0-2 unchanged."
    ),
    data="Generated by the library's simulator; logs are Minari datasets in $NEURIPS26_CACHE/minari (never downloaded).",
    glossary={
        "throughput": "inbound units stored / inbound units arrived over a 40-epoch episode, mean over the evaluation "
        "episodes (greedy top-B policies)",
        "target_return": "episode sum of the target reward 3 x near-dock frees + other frees - 0.05 x travel, mean over "
        "the evaluation episodes",
        "small_throughput": "throughput on a small instance (40 locations, 8 SKUs, 20 epochs) for the oracle lookahead "
        "planner and the heuristic",
    },
    plot=plot,
)

"""Claim check for channel-coded reliability with a cost-aware semantic router ("A Communication-Theoretic
Framework for LLM Agents: Cost-Aware Adaptive Reliability", arXiv 2605.09121).

Per seed: items of several task families are split into train/test; every fixed arm
(channel x operator x budget) is run on every item (common random numbers across arms); the
:class:`~neurips26.agents.channel_router.SemanticKNNRouter` is fitted on the train split's quality
and cost matrices and swept over a lambda grid on the test split. The router's (cost, quality) curve
is compared with the fixed arms' points: Pareto occupancy, cost at the strongest fixed arm's quality,
quality at its cost, quality at the best single-shot arm's cost. The two closed-form criteria are
checked against Monte Carlo as design criteria.

Testbeds
--------
``sim`` (smoke, quick): six families x ``n_per_family`` items with a latent difficulty; three
simulated channels (small / medium / large, prices 1 : 3 : 10) with logistic accuracy, family-specific
confusion (an "attractor" wrong answer for some families, diffuse errors for others), a noisy judge
and a critic; the large channel over-corrects under refinement (gamma kappa > 2). Embedder: hashed
character n-grams.

``lm`` (full): reasoning-gym items (basic_arithmetic, chain_sum with 2-3 and with 4-5 terms, and a
multiple-choice arithmetic family built from basic_arithmetic items), 150 per family; channels
SmolLM2-135M-Instruct at two temperatures and a character-level tiny Llama trained from scratch on arithmetic
expressions; judge = a separately trained verifier LM scoring the answer's likelihood (it never sees the
reference answer), critic = the same verifier rejecting answers it scores below a threshold ("the answer X is
likely wrong"). Generations are drawn once into per-prompt pools (cached on disk) and every seed re-splits the
items and re-orders the pools. Embedder: all-MiniLM-L6-v2 (sentence-transformers, offline package).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from neurips26.agents.channel_router import (
    Arm,
    Channel,
    Critic,
    HashingEmbedder,
    Judge,
    SemanticKNNRouter,
    SimulatedChannel,
    Task,
    averaging_mse,
    empirical_crossover,
    estimate_contraction,
    evaluate_arms,
    matched_cost_quality_gain,
    matched_quality_cost_reduction,
    pareto_frontier,
    pareto_occupancy,
    simulate_averaging_mse,
    simulate_refinement,
    strongest_fixed,
    time_decisions,
    uniform_vs_weighted_threshold,
)
from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Headline, SeedResult, sweep_record
from neurips26.claims.channel_router.lm_testbed import PoolChannel as PoolChannel
from neurips26.claims.channel_router.lm_testbed import _expression as _expression
from neurips26.claims.channel_router.lm_testbed import _lm_parse as _lm_parse
from neurips26.claims.channel_router.lm_testbed import _lm_testbed, judge_auroc
from neurips26.claims.plotting import pyplot, save_figure

METHOD = "router"
BASELINES = ("strongest_fixed", "single_shot", "random_arm")
REFERENCES = ("oracle_family", "testbed", "theory")
LAMBDAS = [0.0, *np.round(np.logspace(-3, math.log10(50.0), 24), 6).tolist()]


# ============================================================================== simulated testbed
#: family -> (prompt template, family skill offset (logit), attractor probability, judge noise sd,
#: mean output tokens, prompt tokens, vocabulary). Fixed before any run; seeds change the items only.
SIM_FAMILIES: dict[str, tuple[str, float, float, float, int, int, tuple[str, ...]]] = {
    "arith": (
        "Compute the total of the following quantities and report one number:",
        0.8,
        0.05,
        0.25,
        60,
        80,
        ("apples", "crates", "boxes", "coins", "marbles", "pencils"),
    ),
    "trap": (
        "Answer the trick riddle about these objects carefully:",
        -0.3,
        0.85,
        0.35,
        30,
        60,
        ("mirror", "shadow", "candle", "river", "echo", "clock"),
    ),
    "facts": (
        "Recall the capital city of the following country:",
        2.2,
        0.3,
        0.3,
        10,
        30,
        ("kingdom", "republic", "island", "federation", "duchy", "state"),
    ),
    "logic": (
        "Decide which statement follows logically from the premises:",
        -0.6,
        0.4,
        0.1,
        80,
        120,
        ("all", "some", "none", "implies", "therefore", "unless"),
    ),
    "code": (
        "Write the exact output printed by the following short program:",
        -1.0,
        0.1,
        0.45,
        120,
        160,
        ("print", "loop", "range", "append", "return", "lambda"),
    ),
    "hard": (
        "Prove or disprove the following combinatorial identity:",
        -2.2,
        0.2,
        0.5,
        200,
        140,
        ("binomial", "partition", "sum", "bijection", "graph", "permutation"),
    ),
}
#: channel -> (skill logit, price_in, price_out, gamma, kappa, per-family skill bonus)
SIM_CHANNELS: dict[str, tuple[float, float, float, float, float, dict[str, float]]] = {
    "small": (0.0, 0.2, 1.0, 0.8, 0.3, {"facts": 0.5}),
    "medium": (1.0, 0.6, 3.0, 1.0, 0.5, {"code": 1.2}),
    "large": (2.2, 2.0, 10.0, 2.6, 0.9, {"trap": 1.0}),
}
SIM_OPERATORS: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = (
    ("single", ()),
    ("retry", (("max_rounds", 5),)),
    ("sc", (("n", 3),)),
    ("sc", (("n", 5),)),
    ("bon", (("n", 5),)),
    ("refine", (("rounds", 3),)),
    ("rateless", (("n_max", 8), ("rule", "either"))),
    ("fec", (("rate", 0.5),)),
)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _sim_tasks(n_per_family: int, seed: int) -> list[Task]:
    rng = np.random.default_rng([seed, 101])
    tasks = []
    for fam, (template, *_, vocab) in SIM_FAMILIES.items():
        for i in range(n_per_family):
            words = " ".join(rng.choice(vocab, size=4))
            nums = " ".join(str(int(x)) for x in rng.integers(1, 100, size=3))
            truth = str(int(rng.integers(100, 10_000)))
            d = float(rng.uniform(0, 1))
            tasks.append(Task(f"{template} {words} {nums} (item {i})", truth, fam, {"difficulty": d}))
    return tasks


def _sim_channels() -> dict[str, Channel]:
    out = {}
    for name, (skill, p_in, p_out, gamma, kappa, bonus) in SIM_CHANNELS.items():

        def acc(task: Task, skill=skill, bonus=bonus) -> float:
            fam = SIM_FAMILIES[task.family]
            return _sigmoid(
                0.3 + skill + fam[1] + bonus.get(task.family, 0.0) - 3.5 * task.meta["difficulty"]
            )

        def confusion(task: Task, rng: np.random.Generator) -> str:
            if rng.random() < SIM_FAMILIES[task.family][2]:
                return str(int(task.answer) + 1)  # the family's attractor: one fixed wrong answer
            return str(int(task.answer) + int(rng.integers(2, 40)))

        def tokens(task: Task, rng: np.random.Generator) -> tuple[int, int]:
            fam = SIM_FAMILIES[task.family]
            return fam[5], max(5, int(rng.normal(fam[4], 0.25 * fam[4])))

        out[name] = SimulatedChannel(
            acc, confusion, tokens, (p_in, p_out), name=name, gamma=gamma, kappa=kappa
        )
    return out


def _sim_judge(cost: float) -> Judge:
    def score(task: Task, answer: str, rng: np.random.Generator | None = None) -> float:
        noise = SIM_FAMILIES[task.family][3] * float(rng.standard_normal()) if rng is not None else 0.0
        return float(answer == task.answer) + noise

    return Judge(score, cost=cost)


def _sim_critic(cost: float) -> Critic:
    def critique(task: Task, answer: str, rng: np.random.Generator | None = None) -> str | None:
        right = answer == task.answer
        flip = rng is not None and rng.random() < 0.1
        return None if right != flip else "the result does not check out"

    return Critic(critique, cost=cost)


def _sim_judge_auroc(tasks: Sequence[Task], channels: dict[str, Channel], judge: Judge, seed: int) -> float:
    """The noisy judge's AUROC on one sample per channel and test item (its own rng stream)."""
    rng = np.random.default_rng([seed, 606])
    scores, labels = [], []
    for task in tasks:
        for ch in channels.values():
            answer = ch.sample(task, 1, rng=rng)[0].answer
            scores.append(judge(task, answer, rng=rng))
            labels.append(answer == task.answer)
    return judge_auroc(scores, labels)


def _sim_testbed(cfg: dict[str, Any], seed: int) -> dict[str, Any]:
    tasks = _sim_tasks(cfg["n_per_family"], seed)
    rng = np.random.default_rng([seed, 202])
    train, test = [], []
    for fam in SIM_FAMILIES:
        items = [t for t in tasks if t.family == fam]
        order = rng.permutation(len(items))
        half = len(items) // 2
        train += [items[i] for i in order[:half]]
        test += [items[i] for i in order[half:]]
    channels = _sim_channels()
    arms = [Arm(c, op, budget) for c in channels for op, budget in SIM_OPERATORS]
    return {
        "train": train,
        "test": test,
        "channels": channels,
        "arms": arms,
        "judge": _sim_judge(cfg["judge_cost"]),
        "critic": _sim_critic(cfg["critic_cost"]),
        "embedder": HashingEmbedder(dim=512),
        "reference": "small",
        "judge_auroc": _sim_judge_auroc(test, channels, _sim_judge(cfg["judge_cost"]), seed),
        "info": {"families": list(SIM_FAMILIES), "channels": {k: v[:5] for k, v in SIM_CHANNELS.items()}},
    }


# ==================================================================================== LM testbed
def _theory(cfg: dict[str, Any], seed: int) -> dict[str, float]:
    rng = np.random.default_rng([seed, 404])
    n_draws = cfg["mc_draws"]
    mse_err, cross_dev = 0.0, 0.0
    for _ in range(3):
        v = rng.uniform(0.2, 5.0, size=5)
        t = uniform_vs_weighted_threshold(v)
        for tau2 in (0.5 * t, 2.0 * t):
            mc, cf = simulate_averaging_mse(v, tau2, n_draws=n_draws, rng=rng), averaging_mse(v, tau2)
            mse_err = max(mse_err, abs(mc[0] / cf[0] - 1), abs(mc[1] / cf[1] - 1))
        x = empirical_crossover(v, list(np.linspace(0.4 * t, 1.6 * t, 25)), n_draws=n_draws, rng=rng)
        cross_dev = max(cross_dev, abs(x / t - 1))
    rho_err, correct, total = 0.0, 0, 0
    for gk in (-0.5, -0.2, 0.3, 0.6, 1.0, 1.4, 1.7, 2.3, 2.6, 3.0):
        rho = 1.0 - gk
        trs = [simulate_refinement(rho, 1.0, 8, noise=0.05, rng=rng) for _ in range(40)]
        if abs(rho) < 1.5:
            rho_err = max(rho_err, abs(estimate_contraction(trs) - rho))
        diverged = np.mean([abs(tr[-1]) > 1.0 for tr in trs]) > 0.5
        correct += int(diverged == (not 0 < gk < 2))
        total += 1
    return {
        "mse_rel_err": mse_err,
        "crossover_dev": cross_dev,
        "rho_err": rho_err,
        "boundary_acc": correct / total,
    }


# ======================================================================================== run
def _family_best(Q: np.ndarray, tasks: Sequence[Task], arms: Sequence[Arm]) -> dict[str, str]:
    out = {}
    for fam in dict.fromkeys(t.family for t in tasks):
        rows = [i for i, t in enumerate(tasks) if t.family == fam]
        out[fam] = arms[int(np.argmax(Q[rows].mean(0)))].name
    return out


def run(config: dict[str, Any], seed: int) -> SeedResult:
    """One seed: evaluate every fixed arm on train and test, fit the router, sweep lambda, score."""
    cfg = config
    bed = _sim_testbed(cfg, seed) if cfg["testbed"] == "sim" else _lm_testbed(cfg, seed)
    arms, chans = bed["arms"], bed["channels"]
    t0 = time.perf_counter()
    kw = dict(judge=bed["judge"], critic=bed["critic"], reference_channel=bed["reference"])
    Q_tr, C_tr = evaluate_arms(bed["train"], arms, chans, seed=2 * seed, **kw)
    Q_te, C_te = evaluate_arms(bed["test"], arms, chans, seed=2 * seed + 1, **kw)
    for ch in chans.values():
        if hasattr(ch, "reset"):
            ch.reset()
    eval_s = time.perf_counter() - t0

    # router settings (k, weighting) chosen by leave-one-out quality on the train split only
    train_prompts, prompts = [t.prompt for t in bed["train"]], [t.prompt for t in bed["test"]]
    m_train = len(train_prompts)
    k_grid = [k for k in cfg["k_grid"] if k <= m_train - 1] or [max(1, m_train - 1)]
    k_default = min(cfg["k"], max(1, m_train - 1))
    router = SemanticKNNRouter(bed["embedder"], k=k_default, weighting="softmax", temperature=cfg["tau_w"])
    router.fit(train_prompts, arms, Q_tr, C_tr)
    loo = {}
    for k in k_grid:
        for weighting in ("softmax", "uniform"):
            router.k, router.weighting = k, weighting
            loo[f"{weighting}_k{k}"] = router.loo_quality(0.0)
    chosen = max(loo, key=lambda key: (loo[key], -list(loo).index(key)))
    default = f"softmax_k{k_default}"
    rows = np.arange(len(prompts))
    fixed = np.stack([C_te.mean(0), Q_te.mean(0)], axis=1)
    best = strongest_fixed(fixed)
    singles = [j for j, a in enumerate(arms) if a.operator == "single"]
    single = max(singles, key=lambda j: (fixed[j, 1], -fixed[j, 0]))

    def sweep(setting: str) -> dict[str, Any]:
        weighting, k = setting.split("_k")
        router.k, router.weighting = int(k), weighting
        picks = router.route_curve(prompts, LAMBDAS)
        curve = np.array(
            [[lam, C_te[rows, p].mean(), Q_te[rows, p].mean()] for lam, p in zip(LAMBDAS, picks)]
        )
        return {
            "curve": curve,
            "mq": matched_quality_cost_reduction(curve, fixed, best),
            "mc": matched_cost_quality_gain(curve, fixed, best),
            "ms": matched_cost_quality_gain(curve, fixed, single),
            "occupancy": pareto_occupancy(curve[:, 1:], fixed),
        }

    spec_default = sweep(default)
    main = sweep(chosen)
    curve, mq, mc, ms, occupancy = main["curve"], main["mq"], main["mc"], main["ms"], main["occupancy"]
    latency = time_decisions(router, prompts[: cfg["latency_queries"]], lam=1.0)

    rng = np.random.default_rng([seed, 505])
    rand = rng.integers(0, len(arms), size=len(prompts))
    fam_best_test = _family_best(Q_te, bed["test"], arms)
    fam_idx = {f: [a.name for a in arms].index(n) for f, n in fam_best_test.items()}
    oracle = np.array([fam_idx[t.family] for t in bed["test"]])
    fam_best_train = _family_best(Q_tr, bed["train"], arms)
    theory = _theory(cfg, seed)

    metrics = {
        "cost_at_matched_quality": {
            METHOD: mq["router_cost"] if mq["matched"] else math.inf,
            "strongest_fixed": float(fixed[best, 0]),
        },
        "cost_reduction": {METHOD: mq["reduction"] if mq["matched"] else -math.inf},
        "quality_at_matched_cost": {
            METHOD: mc["router_quality"] if mc["matched"] else -math.inf,
            "strongest_fixed": float(fixed[best, 1]),
        },
        "quality_at_single_cost": {
            METHOD: ms["router_quality"] if ms["matched"] else -math.inf,
            "single_shot": float(fixed[single, 1]),
        },
        "pareto_occupancy": {METHOD: occupancy},
        "quality": {
            METHOD: float(curve[0, 2]),
            "strongest_fixed": float(fixed[best, 1]),
            "single_shot": float(fixed[single, 1]),
            "random_arm": float(Q_te[rows, rand].mean()),
            "oracle_family": float(Q_te[rows, oracle].mean()),
        },
        "cost": {
            METHOD: float(curve[0, 1]),
            "strongest_fixed": float(fixed[best, 0]),
            "single_shot": float(fixed[single, 0]),
            "random_arm": float(C_te[rows, rand].mean()),
            "oracle_family": float(C_te[rows, oracle].mean()),
        },
        "n_family_best": {"testbed": float(len(set(fam_best_test.values())))},
        "judge_auroc": {"testbed": float(bed["judge_auroc"])},
        "decision_ms": {METHOD: latency["median_ms"]},
        **{name: {"theory": value} for name, value in theory.items()},
    }
    budget = {a.name: dict(a.budget) for a in arms}
    info = {
        "testbed": cfg["testbed"],
        **bed["info"],
        "n_train": len(bed["train"]),
        "n_test": len(bed["test"]),
        "arms": [a.name for a in arms],
        "fixed_points": fixed.tolist(),
        "router_curve": curve.tolist(),
        "frontier": pareto_frontier(np.vstack([curve[:, 1:], fixed])).tolist(),
        "strongest_fixed": arms[best].name,
        "single_shot_arm": arms[single].name,
        "matched_quality": mq,
        "matched_cost": mc,
        "matched_single_cost": ms,
        "family_best_test": fam_best_test,
        "family_best_train": fam_best_train,
        "latency": latency,
        "eval_s": eval_s,
        "arm_budget": budget,
        "router": {
            "chosen": chosen,
            "tau_w": cfg["tau_w"],
            "lambdas": LAMBDAS,
            "loo_quality": loo,
            "embedder": type(bed["embedder"]).__name__,
        },
        "sweeps": {"router_k": sweep_record(k_grid, int(chosen.split("_k")[1]))},
        "router_spec_default": {
            "setting": default,
            "curve": spec_default["curve"].tolist(),
            "matched_quality": spec_default["mq"],
            "matched_cost": spec_default["mc"],
            "matched_single_cost": spec_default["ms"],
            "pareto_occupancy": spec_default["occupancy"],
        },
        "live_generations": {k: getattr(c, "live", 0) for k, c in chans.items()},
        "note": "lambda* is picked on the test curve as the spec's metric defines it (largest lambda whose router "
        "quality reaches the strongest fixed arm's); every fixed arm runs on the same items with the same rng "
        "stream per item (common random numbers).",
    }
    curves = {"router_cost": {METHOD: curve[:, 1].tolist()}, "router_quality": {METHOD: curve[:, 2].tolist()}}
    return SeedResult(metrics=metrics, curves=curves, info=info)


def plot(result: dict[str, Any], folder: Path) -> list[Path]:
    """Quality-cost plane of the first seed: fixed arms, the router's lambda sweep, the frontier."""
    plt = pyplot()
    info = result["info"][0]
    fixed = np.array(info["fixed_points"])
    curve = np.array(info["router_curve"])
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    ax.scatter(fixed[:, 0], fixed[:, 1], s=18, c="gray", label="fixed arms")
    ax.plot(curve[:, 1], curve[:, 2], "o-", ms=3, c="C0", label="router (lambda sweep)")
    best = info["arms"].index(info["strongest_fixed"])
    ax.scatter(
        [fixed[best, 0]],
        [fixed[best, 1]],
        s=60,
        marker="*",
        c="C3",
        label=f"strongest: {info['strongest_fixed']}",
    )
    ax.set_xscale("log")
    ax.set_xlabel("mean normalised cost (single shot on the reference channel = 1)")
    ax.set_ylabel("mean quality (test)")
    ax.legend(fontsize=7)
    ax.set_title(f"channel_router ({info['testbed']} testbed, seed 0)")
    return [save_figure(fig, folder, "channel_router_frontier", dpi=110)]


_SIM = {
    "testbed": "sim",
    "judge_cost": 30.0,
    "critic_cost": 30.0,
    "k": 10,
    "k_grid": [5, 10, 20, 40],
    "tau_w": 0.05,
    "latency_queries": 50,
    "threads": 1,
}
_LM = {
    "testbed": "lm",
    "n_per_family": 150,
    "data_seed": 0,
    "refine_rounds": 1,
    "refine_channels": ["smol_t02", "tiny"],
    "smol_temperatures": [0.2, 0.8],
    "max_new_tokens": 10,
    "batch_size": 160,
    "pool": 5,
    "tiny_temperature": 0.7,
    "tiny_hidden": 96,
    "tiny_layers": 2,
    "tiny_steps": 800,
    "tiny_examples": 6000,
    "verifier_hidden": 128,
    "verifier_layers": 2,
    "verifier_steps": 1000,
    "verifier_examples": 9000,
    "judge_cost": 10.0,
    "critic_cost": 10.0,
    "critic_threshold": 0.5,
    "k": 10,
    "k_grid": [5, 10, 20, 40],
    "tau_w": 0.05,
    "latency_queries": 50,
    "mc_draws": 200_000,
    "threads": 2,
}

CLAIM = Claim(
    slug="channel_router",
    claim=(
        "No fixed (channel, technique, budget) arm is best on every task family, and a semantic kNN router over "
        "arms with one cost weight lambda traces a quality-cost curve that occupies the empirical Pareto frontier, "
        "costs less than the strongest fixed technique at its quality and beats it at its cost."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        AtLeast("n_family_best", threshold=2.0, arm="testbed", label="no_dominant_arm"),
        AtLeast("quality", threshold=0.05, arm="single_shot", label="single_not_at_floor"),
        AtMost("quality", threshold=0.95, arm="strongest_fixed", label="not_at_ceiling"),
        # the paper's judge is informative; a judge at chance turns judge-driven arms into noise
        AtLeast("judge_auroc", threshold=0.6, arm="testbed", label="judge_informative"),
    ),
    criteria=(
        AtLeast("pareto_occupancy", threshold=0.8, label="pareto_occupancy"),
        Better(
            "cost_at_matched_quality",
            baseline="strongest_fixed",
            margin=0.0,
            higher_is_better=False,
            min_seeds=3,
            label="cheaper_at_matched_quality",
        ),
        AtLeast("cost_reduction", threshold=0.2, min_seeds=3, label="cost_reduction"),
        Better(
            "quality_at_matched_cost",
            baseline="strongest_fixed",
            margin=0.0,
            min_seeds=3,
            label="better_at_matched_cost",
        ),
        Better(
            "quality_at_single_cost",
            baseline="single_shot",
            margin=0.0,
            min_seeds=3,
            label="better_than_single",
        ),
        AtMost("mse_rel_err", threshold=0.02, arm="theory", kind="design", label="mse_closed_form"),
        AtMost("crossover_dev", threshold=0.1, arm="theory", kind="design", label="averaging_threshold"),
        AtMost("rho_err", threshold=0.05, arm="theory", kind="design", label="rho_recovery"),
        AtLeast("boundary_acc", threshold=1.0, arm="theory", kind="design", label="contraction_boundary"),
    ),
    headlines=(
        Headline(
            "Across six channel configurations on 69 hard tasks no fixed model-technique-budget choice dominates",
            criteria=("no_dominant_arm",),
        ),
        Headline(
            "On a 300-item hard split the router occupies the full empirical Pareto frontier",
            criteria=("pareto_occupancy",),
        ),
        Headline(
            "At matched quality the router's normalized cost is about 56% lower than the strongest fixed technique",
            criteria=("cheaper_at_matched_quality", "cost_reduction"),
        ),
        Headline(
            "At matched normalized cost quality is about 7% higher than the strongest fixed technique",
            criteria=("better_at_matched_cost",),
        ),
        Headline("Quality is 26% higher than single-shot decoding", criteria=("better_than_single",)),
        Headline(
            "Closed forms: a noise threshold above which uniform averaging beats quality weighting, and a "
            "contraction criterion for generator-critic refinement",
            criteria=("mse_closed_form", "averaging_threshold", "rho_recovery", "contraction_boundary"),
        ),
        Headline(
            "A contractive-to-divergent transition in generator-critic refinement occurs between 3B and 14B models",
            untested="no 3B or 14B models offline on 2 CPU cores; only the criterion itself is checked (design) and "
            "the sim testbed builds one over-correcting channel in by construction",
        ),
        Headline(
            "lambda = 3 gives higher quality at matched cost and lambda = 38 about 56% cost reduction; 29 "
            "dispatchable techniques",
            untested="the paper says these values are lineup-specific; our lambda* is reported in info but the "
            "arm set (24 arms: 3 channels x 8 techniques) differs",
        ),
        Headline(
            "Evaluated on MMLU, GSM8K and HumanEval with local and cloud models",
            untested="no such models or data sets offline; the full profile uses reasoning-gym items and SmolLM2",
        ),
    ),
    items={
        "quality_at_matched_cost": {"smoke": 60, "quick": 300, "full": 300},
        "quality_at_single_cost": {"smoke": 60, "quick": 300, "full": 300},
    },
    run=run,
    configs={
        "smoke": {**_SIM, "n_per_family": 20, "mc_draws": 200_000},
        "quick": {**_SIM, "n_per_family": 100, "mc_draws": 200_000},
        "full": _LM,
    },
    seeds={"smoke": (0,), "quick": (0, 1, 2), "full": (0, 1, 2)},
    implemented=(
        "neurips26.agents.channel_router: Channel over any sampler (prompt, n, temperature) -> completions, "
        "SimulatedChannel, HFChannel (transformers generate), Judge, Critic; operators O1 diversity_combining "
        "(majority / best-of-N / weighted vote), O2 hybrid_retransmission (retry, Chase, incremental redundancy), "
        "O3 generator_critic (critic-accept, plateau and contraction stops), O4 rateless_sampling (margin and "
        "Dirichlet-posterior stops), O5 redundant_verification (code rates 0.75 / 0.5 / 0.33), O6 adaptive_routing "
        "(pilot -> difficulty table); closed forms uniform_vs_weighted_threshold / averaging_mse and "
        "contraction_factor / estimate_contraction; SemanticKNNRouter (top-k cosine, softmax weights, "
        "argmax q_hat - lambda c_hat, ties to lower cost, arm mask, npz save/load) with HashingEmbedder and "
        "SentenceEmbedder (all-MiniLM-L6-v2). Arms: every channel x {single, retry, sc-3, sc-5, bon-5, refine, "
        "rateless, fec-0.5}; every arm runs every item with the same per-item rng (common random numbers) and "
        "the same judge/critic prices."
    ),
    differences=(
        "Quick profile: simulated channels (heterogeneity designed in, so it checks the mechanism and the metric "
        "code, not the paper's 56%/7%). Full profile: SmolLM2-135M-Instruct at T = 0.2 and 0.8 plus one "
        "character-level 2-layer tiny Llama trained from scratch on arithmetic (the spec's 2-3 tiny models cut to "
        "one for the 10-minute budget); 150 items per family x 4 arithmetic families (600 items), half train / half "
        "test (the spec's 300/300). The spec's MMLU/GSM8K/HumanEval mix is not offline; gsm_symbolic, used before, "
        "was dropped because SmolLM2-135M sat at the floor on it and its long prompts cost most of the generation "
        "budget. Generations are pooled once (5 per prompt per channel, max 10 new tokens, plus one refinement "
        "round whose critique prompts are generated for every distinct pooled answer the critic rejects) and the "
        "three seeds re-split the items and re-order the pools, so seeds are not independent generations (the "
        "judge is deterministic). Refinement runs on SmolLM2 T = 0.2 and the tiny model only (budget); the tiny "
        "model ignores feedback text, so its revision is a fresh sample. Judge: a separately trained "
        "character-level verifier Llama (2 layers, hidden 128, trained on other reasoning-gym draws with every "
        "evaluated expression removed) scoring the geometric-mean likelihood of the answer; critic: the same "
        "verifier rejecting answers it scores below 0.5. Neither sees the reference answer (before this, the judge "
        "was the exact checker plus noise and the critic the checker's hint). SmolLM2-135M itself as an LLM judge "
        "is measured by scripts/channel-router-judge-pilot (results/diagnosis/channel_router_judge.md: reference "
        "answers vs near-miss wrong answers, offsets of 1, 2 or 10): P(yes) to 'Is the proposed answer correct?' "
        "is at chance there, and its answer likelihood is about as weak as the verifier's on those hard "
        "negatives; the verifier was chosen before either was measured, for cost (one batched pass of a "
        "0.3M-parameter model instead of a 135M-parameter forward pass per (item, answer)). On the claim's own "
        "pooled answers the judge's discrimination is the judge_auroc metric, and the judge_informative premise "
        "(AUROC >= 0.6) guards the regime. Judge and critic calls are priced as 10 "
        "SmolLM2 tokens each (an API-judge price, not the verifier's size). LM cost counts generated tokens x "
        "model size (SmolLM2 = 1 per token, tiny = its parameter share). Cost is normalised by the single-shot "
        "cost of a reference channel (the cheapest simulated channel; SmolLM2 at T = 0.2) on the same item, not "
        "per channel (per-channel normalisation would erase the price differences between channels). The "
        "router's k and weighting are chosen by leave-one-out quality on the train split from k in {5, 10, 20, "
        "40} x {softmax (tau_w = 0.05), uniform}; the spec's default (k = 10, softmax) is reported in "
        "info['router_spec_default']. lambda* is read off the test curve (as the spec's metric defines it), and "
        "the strongest fixed arm is also picked on test; the other criteria compare at the fixed arm's cost or "
        "quality by interpolation along the router curve. Pareto occupancy counts every lambda point of the "
        "router, so a dense lambda grid raises it; the matched-cost and matched-quality criteria are the stricter "
        "tests."
    ),
    data=(
        "sim: 6 families x n items generated per seed (prompt = family template + family words + numbers; latent "
        "difficulty U(0, 1)), half train / half test per family. lm: reasoning-gym basic_arithmetic "
        "(2-3 terms, <= 2 digits), chain_sum (2-3 terms and 4-5 terms, <= 2 digits) and a 4-option multiple-choice "
        "family built from basic_arithmetic items, 150 each; the tiny channel (6,000) and the verifier (9,000) are "
        "trained on reasoning-gym expressions of the same three generators drawn with other seeds, every "
        "expression of an evaluated item removed."
    ),
    plot=plot,
    glossary={
        "cost_at_matched_quality": "router: normalised test cost at the largest lambda whose router quality reaches "
        "the strongest fixed arm's quality (linear interpolation toward the next lambda; inf if never reached); "
        "strongest_fixed: that arm's mean normalised cost",
        "cost_reduction": "1 - router cost_at_matched_quality / strongest fixed arm's cost (-inf if unmatched)",
        "quality_at_matched_cost": "router: best router quality at cost <= the strongest fixed arm's cost "
        "(upper envelope, linear interpolation); strongest_fixed: its mean test quality",
        "quality_at_single_cost": "as quality_at_matched_cost, at the cost of the best single-shot arm",
        "pareto_occupancy": "share of the joint (router lambda points + fixed arms) Pareto frontier on (mean cost, "
        "mean quality) that are router points",
        "quality": "mean test quality: router at lambda = 0, the strongest fixed arm, the best single-shot arm, a "
        "uniformly random arm per query, and the per-family best fixed arm chosen on test (oracle upper bound)",
        "cost": "mean normalised test cost of the same arms (single-shot on the reference channel = 1 per item)",
        "n_family_best": "number of distinct arms that are best (mean test quality) in some task family",
        "judge_auroc": "AUROC of the judge's score for correct vs wrong answers: lm, every distinct pooled (test item, "
        "answer) pair of every channel; sim, one sample per channel and test item (judge noise included)",
        "decision_ms": "median wall time of one routing decision (embedding + kNN + argmax), ms",
        "mse_rel_err": "max relative error of the closed-form MSEs (weighted, uniform) vs Monte Carlo, 3 random "
        "variance profiles (N = 5) x tau^2 in {0.5, 2} tau*^2",
        "crossover_dev": "max |empirical crossover / tau*^2 - 1| over the 3 profiles",
        "rho_err": "max |rho_hat - rho| over a gamma*kappa grid (|rho| < 1.5; 40 AR(1) trajectories of 8 rounds)",
        "boundary_acc": "share of gamma*kappa grid points where simulated refinement diverges (|e_8| > e_0) iff "
        "gamma*kappa is outside (0, 2)",
    },
)

"""Claim check for ASAP: reach and hold a target accuracy in fewer rounds, with a smaller deviation.

Harness: scikit-learn digits, multinomial logistic regression (650 parameters), ``n`` Flower
``ClientApp`` clients of which ``m`` collude, a :class:`~neurips26.federated.flower.RobustFedAvg`
server strategy per aggregation rule, run on the in-process :class:`LocalGrid` (the full profile
also replays one short configuration on Flower's simulation engine and reports the difference).
Every arm starts from the same benign warm-up checkpoint and sees the same data, seeds and rounds.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from neurips26.claims.base import AtLeast, Better, Claim, Headline, SeedResult
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.datasets import dirichlet_partition, iid_partition, load_digits, train_test_split
from neurips26.common.threads import torch_threads
from neurips26.federated.asap import make_attack, round_complexity, target_deviation
from neurips26.federated.flower import (
    ClientSetup,
    RobustFedAvg,
    make_client_app,
    malicious_clients,
    run_rounds,
)

METHOD = "ASAP"
BASELINES = ("LIE", "MinMax", "MinSum", "FedSA-lite")
NO_ATTACK = "no-attack"
LIE_OR_MINMAX = "LIE-or-MinMax"


def _model() -> nn.Module:
    return nn.Linear(64, 10)


def _data(config: dict[str, Any], seed: int):
    x, y = load_digits()
    tr, te = train_test_split(len(y), 0.2, seed=seed, labels=y)
    xtr, ytr = x[tr], y[tr]
    n = config["num_clients"]
    mal = malicious_clients(n, config["num_malicious"] / n, seed=seed)
    if config.get("holdout", "clients") == "pool":
        # D_att: a small stratified sample of the training split that no client trains on (the
        # attacker's own held-out set; unbiased under label skew, unlike the attackers' skewed data)
        keep, hold = train_test_split(len(ytr), config["holdout_fraction"], seed=seed + 17, labels=ytr)
        holdout = (xtr[hold], ytr[hold])
        xtr, ytr = xtr[keep], ytr[keep]
    if config["partition"] == "iid":
        parts = iid_partition(len(ytr), n, seed=seed)
    else:
        parts = dirichlet_partition(ytr.numpy(), n, config["dirichlet_alpha"], seed=seed, min_size=10)
    partitions = [(xtr[p], ytr[p]) for p in parts]
    if config.get("holdout", "clients") != "pool":
        hx, hy = [], []
        for i in mal:  # D_att: 20% of every malicious client's data, held out from its training
            px, py = partitions[i]
            k = max(1, int(0.2 * len(py)))
            hx.append(px[:k])
            hy.append(py[:k])
            partitions[i] = (px[k:], py[k:])
        holdout = (torch.cat(hx), torch.cat(hy))
    return partitions, mal, holdout, (x[te], y[te])


def _evaluator(test):
    xte, yte = test

    def evaluate(_round: int, state: dict[str, torch.Tensor]) -> dict[str, float]:
        m = _model()
        m.load_state_dict(state)
        with torch.no_grad():
            return {"accuracy": float((m(xte).argmax(1) == yte).float().mean())}

    return evaluate


def _fl(
    config,
    seed,
    partitions,
    mal,
    holdout,
    test,
    rule,
    attack,
    target,
    state,
    rounds,
    engine="inprocess",
    **attack_kw,
):
    if attack in ("MinMax", "MinSum", "ASAP", "FedSA-lite") and "direction" in config:
        attack_kw.setdefault("direction", config["direction"])  # LIE keeps its own (std) direction
    setup = ClientSetup(
        _model, partitions, lr=config["lr"], batch_size=config["batch_size"], seed=seed,
        malicious=mal if attack != "none" else (),
        attack_fn=(lambda: make_attack(attack, target, **attack_kw)) if attack != "none" else None, holdout=holdout,
    )  # fmt: skip
    n = len(partitions)
    strategy = RobustFedAvg(rule, num_malicious=len(mal), beta=config["trim_beta"], min_train_nodes=n,
                            min_available_nodes=n)  # fmt: skip
    res = run_rounds(strategy, make_client_app(setup), n, rounds, state, _evaluator(test), engine=engine)
    return [r["accuracy"] for r in res.metrics], res.state, strategy


def _run(config: dict[str, Any], seed: int) -> SeedResult:
    with torch_threads(1):
        return _run_inner(config, seed)


def _run_inner(config: dict[str, Any], seed: int) -> SeedResult:
    partitions, mal, holdout, test = _data(config, seed)
    torch.manual_seed(seed)
    init = _model().state_dict()
    warm_trace, warm, _ = _fl(config, seed, partitions, mal, holdout, test, "fedavg", "none", 0.5, init,
                              config["warmup_rounds"])  # fmt: skip
    horizon = config["attack_rounds"]
    eps, window = config["eps"], config["window"]
    penalty = float(horizon + 1)
    arms = (METHOD, *BASELINES)
    per: dict[str, dict[str, list[float]]] = {k: {a: [] for a in arms} for k in ("R", "D", "H", "final", "gap")}
    either_reached: list[float] = []
    table: dict[str, dict[str, Any]] = {}
    curves: dict[str, dict[str, list[float]]] = {}
    selection: dict[str, dict[str, float]] = {}
    clean: dict[str, list[float]] = {}
    for rule in config["rules"]:
        clean[rule], _, _ = _fl(config, seed, partitions, mal, holdout, test, rule, "none", 0.5, warm, horizon)
        untargeted = {}
        for attack in ("LIE", "MinMax", "MinSum"):
            untargeted[attack] = _fl(
                config, seed, partitions, mal, holdout, test, rule, attack, 0.5, warm, horizon
            )
        for target in config["targets"]:
            traces = {}
            for arm in arms:
                if arm in untargeted:
                    trace, _, strat = untargeted[arm]
                else:
                    trace, _, strat = _fl(
                        config, seed, partitions, mal, holdout, test, rule, arm, target, warm, horizon
                    )
                traces[arm] = trace
                r = round_complexity(trace, target, eps=eps, window=window, start=0)
                reached = not math.isinf(r)
                d_all = target_deviation(trace, target, start=1)
                d_hold = target_deviation(trace, target, start=int(r)) if reached else d_all
                key = f"{rule}@{target:g}"
                per["R"][arm].append(r if reached else penalty)
                per["D"][arm].append(d_all)
                per["H"][arm].append(d_hold)
                per["final"][arm].append(trace[-1])
                table.setdefault(key, {})[arm] = {"rounds": r if reached else None, "deviation": d_all,
                                                  "hold_deviation": d_hold, "final": trace[-1]}  # fmt: skip
                curves.setdefault(f"accuracy {key}", {})[arm] = trace
                if strat.malicious_selected:
                    selection.setdefault(key, {})[arm] = float(np.mean(strat.malicious_selected))
            for arm in arms:
                per["gap"][arm].append(float(np.mean(np.abs(np.subtract(traces[arm][1:], traces["MinMax"][1:])))))
            either_reached.append(float(table[key]["LIE"]["rounds"] is not None or table[key]["MinMax"]["rounds"] is not None))
    clean_final = float(np.mean([t[-1] for t in clean.values()]))
    metrics = {
        "rounds_to_target": {a: float(np.mean(per["R"][a])) for a in arms},
        "target_deviation": {a: float(np.mean(per["D"][a])) for a in arms},
        "hold_deviation": {a: float(np.mean(per["H"][a])) for a in arms},
        "final_accuracy": {**{a: float(np.mean(per["final"][a])) for a in arms}, NO_ATTACK: clean_final},
        "reached_fraction": {**{a: float(np.mean([v < penalty for v in per["R"][a]])) for a in arms},
                             LIE_OR_MINMAX: float(np.mean(either_reached))},  # fmt: skip
        "gap_to_minmax": {a: float(np.mean(per["gap"][a])) for a in arms},
    }
    local_steps = int(np.mean([math.ceil(len(p[1]) / config["batch_size"]) for p in partitions]))
    arm_budget = {"warmup_rounds": config["warmup_rounds"], "attack_rounds": horizon, "clients": len(partitions),
                  "malicious": len(mal), "local_epochs": 1, "mean_local_steps": local_steps,
                  "rules": list(config["rules"]), "targets": list(config["targets"])}  # fmt: skip
    info: dict[str, Any] = {
        "per_rule_target": table,
        "krum_malicious_selection_rate": selection,
        "clean_final_accuracy": {r: t[-1] for r, t in clean.items()},
        "warmup_final_accuracy": warm_trace[-1],
        "malicious_ids": list(mal),
        "attacker_holdout_size": int(len(holdout[1])),
        "penalty_rounds_if_never": penalty,
        "budget": {a: dict(arm_budget) for a in (*arms, NO_ATTACK)},
    }
    for rule, t in clean.items():
        curves.setdefault(f"accuracy {rule}@clean", {})[NO_ATTACK] = t
    if config.get("unbounded_diagnostic"):
        # Not a criterion: do the controllers track y* when the stealth bound is lifted (fedavg)?
        diag = {}
        for arm in (METHOD, "FedSA-lite"):
            trace, _, _ = _fl(config, seed, partitions, mal, holdout, test, "fedavg", arm, 0.5, warm, horizon,
                              alpha_max=20.0, alpha_min=-10.0)  # fmt: skip
            r = round_complexity(trace, 0.5, eps=eps, window=window)
            diag[arm] = {"rounds": None if math.isinf(r) else r, "deviation": target_deviation(trace, 0.5, start=1),
                         "trace": trace}  # fmt: skip
        info["unbounded_fedavg_alpha_max_20"] = diag
    if config.get("engine_check") and seed == config.get("engine_check_seed", 0):
        info["engine_check"] = _engine_check(config, seed, partitions, mal, holdout, test, warm)
    return SeedResult(metrics=metrics, curves=curves, info=info)


def _engine_check(config, seed, partitions, mal, holdout, test, warm) -> dict[str, Any]:
    """Same ASAP configuration (2 rounds, median) on LocalGrid and on Flower's simulation engine."""
    import time

    out = {}
    for engine in ("inprocess", "simulation"):
        t = time.time()
        trace, state, _ = _fl(
            config, seed, partitions, mal, holdout, test, "median", METHOD, 0.5, warm, 2, engine
        )
        out[engine] = {"trace": trace, "wall_s": time.time() - t, "state": state}
    diff = max(float((out["inprocess"]["state"][k] - out["simulation"]["state"][k]).abs().max())
               for k in out["inprocess"]["state"])  # fmt: skip
    return {"max_abs_param_diff": diff, "inprocess_trace": out["inprocess"]["trace"],
            "simulation_trace": out["simulation"]["trace"], "simulation_wall_s": out["simulation"]["wall_s"]}  # fmt: skip


def _plot(result: dict[str, Any], folder: Path) -> list[Path]:
    plt = pyplot()
    paths = []
    curves = result.get("curves", {})
    keys = [k for k in curves if "@clean" not in k]
    if not keys:
        return paths
    cols = min(3, len(keys))
    rows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        for arm, runs in curves[key].items():
            run = np.asarray(runs[0] if runs and isinstance(runs[0], list) else runs, dtype=float)
            ax.plot(run, label=arm)
        target = float(key.split("@")[1])
        ax.axhline(target, color="k", ls="--", lw=0.8)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("attacked round")
        ax.set_ylabel("test accuracy")
    axes.flat[0].legend(fontsize=7)
    paths.append(save_figure(fig, folder, "asap_traces", dpi=110))
    return paths


_COMMON = {
    "partition": "dirichlet",
    "dirichlet_alpha": 0.3,
    "holdout": "pool",
    "holdout_fraction": 0.1,
    "direction": "unit",
    "lr": 0.1,
    "batch_size": 32,
    "trim_beta": 0.2,
    "eps": 0.05,
}
_TEST_ITEMS = 360  # digits test split (20% of 1,797), the server accuracy behind every trace


def _vs(metric: str, baseline: str, tag: str) -> Better:
    return Better(metric, baseline=baseline, higher_is_better=False, min_seeds=3, label=f"{tag}_vs_{baseline}")


CLAIM = Claim(
    slug="asap",
    claim=(
        "ASAP reaches a specified degradation objective in fewer communication rounds and keeps a smaller "
        "target deviation than existing model-poisoning attacks, across aggregation rules."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=(NO_ATTACK, LIE_OR_MINMAX),
    premises=(
        AtLeast("final_accuracy", arm=NO_ATTACK, threshold=0.75, label="clean_model_learns"),
        AtLeast("reached_fraction", arm=LIE_OR_MINMAX, threshold=0.2, label="some_attack_reaches"),
        AtLeast("gap_to_minmax", arm=METHOD, threshold=0.02, label="asap_not_saturated"),
    ),
    criteria=(
        *(_vs("rounds_to_target", b, "rounds") for b in BASELINES),
        *(_vs("target_deviation", b, "deviation") for b in BASELINES),
    ),
    headlines=(
        Headline(
            "ASAP reaches specified degradation objectives in fewer communication rounds than existing "
            "model-poisoning attacks, across aggregation rules",
            criteria=tuple(f"rounds_vs_{b}" for b in BASELINES),
        ),
        Headline(
            "ASAP keeps a smaller target deviation than existing model-poisoning attacks",
            criteria=tuple(f"deviation_vs_{b}" for b in BASELINES),
        ),
        Headline(
            "Across datasets and models",
            untested="one dataset (digits) and one model (logistic regression) at CPU scale",
        ),
        Headline(
            "Finite-time reaching of the sliding surface and exponential tracking-error convergence are proved",
            untested="a proof; tests/federated/test_asap.py checks both on a synthetic scalar plant",
        ),
        Headline(
            "Predecessor (FedSA): sliding-mode poisoning sets the global accuracy to a preset level with few "
            "malicious clients and an adjustable rate",
            untested="the predecessor's claim; FedSA-lite is a baseline here, its reached_fraction is reported",
        ),
    ),
    items={"final_accuracy": {"smoke": _TEST_ITEMS, "quick": _TEST_ITEMS, "full": _TEST_ITEMS}},
    run=_run,
    configs={
        "smoke": {
            **_COMMON,
            "num_clients": 7,
            "num_malicious": 2,
            "rules": ["median"],
            "targets": [0.6],
            "warmup_rounds": 2,
            "attack_rounds": 4,
            "window": 2,
        },
        "quick": {
            **_COMMON,
            "num_clients": 20,
            "num_malicious": 6,
            "rules": ["fedavg", "median"],
            "targets": [0.6],
            "warmup_rounds": 15,
            "attack_rounds": 20,
            "window": 8,
        },
        "full": {
            **_COMMON,
            "num_clients": 20,
            "num_malicious": 6,
            "rules": ["fedavg", "median", "trimmed_mean"],
            "targets": [0.6],
            "warmup_rounds": 15,
            "attack_rounds": 25,
            "window": 10,
            "engine_check": True,
        },
    },  # fmt: skip
    seeds={"smoke": (0,), "quick": (0,), "full": (0, 1, 2, 3, 4)},
    implemented=(
        "ASAPAttack (adaptive sliding-mode controller ASMCController with a PI sliding surface, reaching law with "
        "boundary layer, normalised-LMS finite Fourier-basis disturbance estimate, projected gain adaptation, "
        "MinMax stealth bound on the control input); baselines LIE, MinMax, MinSum and FedSA-lite (same law, fixed "
        "gain, no disturbance estimate); robust AGRs fedavg, coordinate median, trimmed mean (beta=0.2), Krum, "
        "Multi-Krum as a Flower FedAvg strategy; malicious Flower ClientApps colluding by deterministic replication. "
        "References: no-attack (the same rounds with every client honest) and LIE-or-MinMax (whether LIE or MinMax "
        "reached and held the target)."
    ),
    differences=(
        "The paper's exact equations are not public: the scalar plant, the PI surface, the adaptive laws and the "
        "anti-windup are reconstructed from the abstract and the FedSA predecessor. Digits + logistic regression "
        "instead of the paper's datasets/models. Testbed (issue 12, where under IID clients, 20% attackers and the "
        "std direction no attack moved accuracy below 0.79 and ASAP saturated into MinMax): Dirichlet(0.3) label "
        "skew, 6 of 20 clients malicious (30%; spec 20%), the inverse-unit direction -mu/|mu| of Shejwalkar & "
        "Houmansadr for MinMax, MinSum, ASAP and FedSA-lite (LIE keeps its std direction by definition), and "
        "D_att = a stratified 10% of the training split that no client trains on (the attackers' skewed own data "
        "made ASAP track its own classes' accuracy, not the server's). 15 benign fedavg warm-up rounds shared by "
        "all arms, then 25 attacked rounds (spec: 20 + 80), one target y* = 0.6 (spec 0.5 and 0.2: on this testbed "
        "no stealthy attack holds 0.5 under fedavg and 0.2 is beyond every attack), AGRs fedavg, median and trimmed "
        "mean (Krum and Multi-Krum are implemented but not run: CPU budget, and Krum collapses without attack under "
        "label skew). Full profile: 5 seeds; quick: 1 seed, fedavg and median, 20 attacked rounds, hold window 8. Rounds-to-target uses the server's "
        "clean test accuracy; a target never reached and held counts as horizon + 1 rounds. LIE/MinMax/MinSum use "
        "only the attackers' own honest updates (AGR-agnostic, partial knowledge). Fang et al. and FMPA are not "
        "implemented."
    ),
    data=(
        "scikit-learn load_digits (1,797 real 8x8 digits), stratified 80/20 split per seed; 10% of the training "
        "split (stratified) is the attackers' D_att; the rest is split over 20 clients by Dirichlet(0.3)."
    ),
    plot=_plot,
    glossary={
        "rounds_to_target": "R_0.05: first attacked round r with |acc_{r+j} - y*| <= 0.05 for j = 0..W-1 (W = 10; "
        "acc = server test accuracy, r = 0 is the warm-up checkpoint); horizon + 1 when never; mean over AGRs "
        "and targets.",
        "target_deviation": "mean |acc_t - y*| over all attacked rounds t = 1..horizon; mean over AGRs and targets.",
        "hold_deviation": "mean |acc_t - y*| from round R_0.05 on (all attacked rounds if never reached).",
        "final_accuracy": "server test accuracy after the last attacked round; mean over AGRs and targets "
        "(no-attack: the same rounds without attackers).",
        "reached_fraction": "fraction of (AGR, target) pairs in which the target was reached and held "
        "(LIE-or-MinMax: either of the two reached it).",
        "gap_to_minmax": "mean over attacked rounds of |acc_t(arm) - acc_t(MinMax)|; mean over AGRs and targets "
        "(0 when an arm saturates into MinMax).",
    },
)

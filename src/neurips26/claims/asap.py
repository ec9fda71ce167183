"""Claim check for ASAP: reach and hold a target accuracy in fewer rounds, with a smaller deviation.

Harness: scikit-learn digits, multinomial logistic regression (650 parameters), ``n`` Flower
``ClientApp`` clients of which ``m`` collude. The server runs Flower's own robust strategies, chosen
by name through :func:`~neurips26.federated.flower_defences.make_defence` (``FedAvg``, ``Krum``,
``MultiKrum``, ``FedMedian``, ``FedTrimmedAvg``, ``Bulyan`` of ``flwr.serverapp.strategy``), on the
in-process :class:`LocalGrid` (the full profile also replays one short configuration on Flower's
simulation engine and reports the difference). Every arm starts from the same benign warm-up
checkpoint and sees the same data, seeds and rounds. The result's info holds a (rule x attack)
table; :func:`plot` draws it as heatmaps next to the accuracy traces.

Arms are snake_case in the metrics (``asap``, ``lie``, ``minmax``, ``minsum``, ``fang_krum``,
``fang_trim``, ``fmpa``, ``fedsa_lite``; references ``no_attack``, ``any_baseline_fedavg``,
``lie_or_minmax``); :data:`DISPLAY_NAMES` gives the paper's names, which the plots show.

Cost (issue 21). The six-seed full profile took 831 s (load ~2) as the pooled seed check; one seed is
6 rules x 15 federations x 25 rounds x 20 clients. Half of that time was ``local_sgd``'s autograd and
optimizer overhead on a 650-parameter model, much of the rest Flower's per-array record (de)serialisation.
The same computation is now cheaper, with no item, round, rule, target or seed cut: honest clients train
with :func:`logreg_sgd` (the kernels autograd and ``torch.optim.SGD`` call, written out; equal to
``local_sgd`` within float32 rounding, per step ``lr (B + 65) eps32 max|x|``, tested: bit-identical on the
developers' AVX-512 Xeon, a few ulps apart on an AVX2 AMD EPYC, where other kernels are picked) and the
model keeps its weight and bias in one flat parameter (``nn.Linear``'s kernel on two views), so every
Flower record holds one array instead of two. On that Xeon the quick profile gives the same 916 numbers
as before (elsewhere they may differ in the last bits, as two CPUs' runs of ``local_sgd`` may) in 0.47x
the CPU time (20.7 s against 44.0 s, machine loaded, load ~7).

Shapes
------
Model parameters: one ``(650,)`` vector (``W`` ``(10, 64)`` row-major, then ``b`` ``(10,)``); client
data ``x`` ``(n_i, 64)`` float32, ``y`` ``(n_i,)`` int64; traces: one accuracy per round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from neurips26.claims.base import AtLeast, Better, Claim, Headline, SeedResult
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.datasets import dirichlet_partition, iid_partition, load_digits, train_test_split
from neurips26.federated.asap import make_attack, round_complexity, target_deviation
from neurips26.federated.flower import ClientSetup, make_client_app, malicious_clients, run_rounds
from neurips26.federated.flower_defences import FLOWER_STRATEGIES, make_defence, max_tolerated

METHOD = "asap"
BASELINES = ("lie", "minmax", "minsum", "fang_krum", "fang_trim", "fmpa", "fedsa_lite")
NO_ATTACK = "no_attack"
ANY_UNDER_FEDAVG = "any_baseline_fedavg"
LIE_OR_MINMAX = "lie_or_minmax"
# the attacks that ignore y*: one run per rule serves every target
UNTARGETED = ("lie", "minmax", "minsum", "fang_krum", "fang_trim")
ATTACKS = {"asap": "ASAP", "lie": "LIE", "minmax": "MinMax", "minsum": "MinSum", "fang_krum": "Fang-Krum",
           "fang_trim": "Fang-Trim", "fmpa": "FMPA", "fedsa_lite": "FedSA-lite", "none": "none"}  # fmt: skip
"""Arm name -> the :func:`~neurips26.federated.asap.make_attack` name it runs."""
DISPLAY_NAMES = {**{a: n for a, n in ATTACKS.items() if a != "none"}, NO_ATTACK: "no attack",
                 ANY_UNDER_FEDAVG: "any baseline under FedAvg", LIE_OR_MINMAX: "LIE or MinMax"}  # fmt: skip
"""Arm name (snake_case, as in the metrics) -> the name the paper and the plots use."""


_IN, _OUT = 64, 10


class _LogReg(nn.Module):
    """Multinomial logistic regression ``64 -> 10``: ``nn.Linear``'s computation on one flat parameter.

    ``W = params[:640].view(10, 64)`` and ``b = params[640:]``, so ``forward`` is ``F.linear(x, W, b)``, the
    kernel ``nn.Linear`` runs, and the gradient of each view lands in its own slice of ``params``. The state
    is one array (``flatten_state`` order: ``W`` row-major, then ``b``, as for ``nn.Linear``), so every
    Flower record a client sends or the server unpacks holds one array instead of two.
    """

    def __init__(self, params: torch.Tensor) -> None:
        super().__init__()
        self.params = nn.Parameter(params)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _logits(self.params, x)


def _logits(params: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return nn.functional.linear(x, params[: _IN * _OUT].view(_OUT, _IN), params[_IN * _OUT :])


def _model() -> nn.Module:
    """The initial model: ``nn.Linear(64, 10)``'s initialisation (the same random draws), flattened."""
    lin = nn.Linear(_IN, _OUT)
    return _LogReg(torch.cat([lin.weight.detach().reshape(-1), lin.bias.detach()]))


def _blank_model() -> nn.Module:
    """A model whose parameters are about to be overwritten by ``load_state_dict`` (no initialisation)."""
    return _LogReg(torch.empty(_IN * _OUT + _OUT))


def logreg_sgd(
    params: torch.Tensor, x: torch.Tensor, y: torch.Tensor, epochs: int, lr: float, batch_size: int, seed: int
) -> tuple[torch.Tensor, float]:
    r"""``local_sgd`` for :class:`_LogReg`, with the gradient written out: the same update, without autograd.

    :func:`~neurips26.federated.flower.local_sgd` on this model runs, per mini-batch ``B``, ``F.linear``,
    ``cross_entropy`` (= ``log_softmax`` + ``nll_loss``), autograd and ``torch.optim.SGD`` (single-tensor
    ``p.add_(grad, alpha=-lr)`` on CPU). Here the backward pass calls the kernels autograd calls for those
    nodes, in the same order and on the same layouts:

    .. math::

        z = \log\mathrm{softmax}(x W^\top + b), \qquad
        g = \mathrm{logsoftmax\_backward}\big(-\tfrac{1}{|B|}\,\mathrm{onehot}(y),\ z\big), \qquad
        \nabla W = (x^\top g)^\top, \qquad \nabla b = \textstyle\sum_i g_i,

    with the same batches (``randperm`` from a generator seeded with ``seed``, one permutation per epoch).
    ``tests/claims/test_asap.py`` checks parameters and loss against ``local_sgd`` within the rounding bound
    ``(steps lr (B + 65) eps32 max|x| + eps32 max|p|) G`` (``G``: the SGD map's measured growth of a
    perturbation); the two need not agree bit for bit, since autograd's ``mm`` layouts and these may
    dispatch to different CPU kernels (they do on an AVX2 AMD EPYC). About ten
    times faster: most of ``local_sgd``'s time on a 650-parameter model is autograd and optimizer overhead.

    Shapes: ``params`` ``(650,)``; ``x`` ``(n, 64)``; ``y`` ``(n,)`` int64. Returns the new ``(650,)``
    parameters (a new tensor) and the mean training loss.
    """
    gen = torch.Generator().manual_seed(int(seed) % (2**63))
    p = params.detach().clone()
    total, count = 0.0, 0
    with torch.no_grad():
        for _ in range(epochs):
            perm = torch.randperm(x.shape[0], generator=gen)
            for start in range(0, x.shape[0], batch_size):
                idx = perm[start : start + batch_size]
                xb, yb = x[idx], y[idx]
                logp = torch.log_softmax(_logits(p, xb), 1)
                loss = nn.functional.nll_loss(logp, yb)
                g = torch.zeros_like(logp)
                g[torch.arange(len(yb)), yb] = -1.0 / len(yb)
                g = torch._log_softmax_backward_data(g, logp, 1, logp.dtype)
                p.add_(torch.cat([xb.t().mm(g).t().reshape(-1), g.sum(0)]), alpha=-lr)
                total += float(loss) * idx.numel()
                count += idx.numel()
    return p, total / max(count, 1)


@dataclass
class _LogRegSetup(ClientSetup):
    """:class:`ClientSetup` whose honest clients train :class:`_LogReg` with :func:`logreg_sgd`.

    The same update as the parent's ``local_sgd`` within float32 rounding (see :func:`logreg_sgd`), computed
    cheaper.
    """

    def honest_update(self, client: int, state: dict[str, torch.Tensor], job: int) -> tuple[nn.Module, float]:
        x, y = self.partitions[client]
        params, loss = logreg_sgd(
            state["params"], x, y, self.epochs, self.lr, self.batch_size, self.job_seed(client, job)
        )
        return _LogReg(params), loss


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
        with torch.no_grad():
            return {"accuracy": float((_logits(state["params"], xte).argmax(1) == yte).float().mean())}

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
    """One federation: ``rounds`` rounds of ``rule`` with the arm ``attack`` (or ``"none"``) from ``state``."""
    if attack in ("minmax", "minsum", "asap", "fedsa_lite") and "direction" in config:
        attack_kw.setdefault("direction", config["direction"])  # LIE keeps its own (std) direction
    name = ATTACKS[attack]
    setup = _LogRegSetup(
        _blank_model, partitions, lr=config["lr"], batch_size=config["batch_size"], seed=seed,
        malicious=mal if attack != "none" else (),
        attack_fn=(lambda: make_attack(name, target, **attack_kw)) if attack != "none" else None, holdout=holdout,
    )  # fmt: skip
    n = len(partitions)
    strategy = make_defence(rule, num_malicious=_assumed_f(rule, n, len(mal)), beta=config["trim_beta"],
                            min_train_nodes=n, min_available_nodes=n)  # fmt: skip
    res = run_rounds(strategy, make_client_app(setup), n, rounds, state, _evaluator(test), engine=engine)
    return [r["accuracy"] for r in res.metrics], res.state, strategy


def _assumed_f(rule: str, n: int, m: int) -> int:
    """The server's assumed Byzantine count: the true ``m``, capped at what the rule tolerates for ``n``."""
    limit = max_tolerated(rule, n)
    return m if limit is None else max(0, min(m, limit))


def run(config: dict[str, Any], seed: int) -> SeedResult:
    """One seed of the claim (the runner applies ``config["threads"]``)."""
    partitions, mal, holdout, test = _data(config, seed)
    torch.manual_seed(seed)
    init = _model().state_dict()
    warm_trace, warm, _ = _fl(config, seed, partitions, mal, holdout, test, "fedavg", "none", 0.5, init,
                              config["warmup_rounds"])  # fmt: skip
    horizon = config["attack_rounds"]
    eps, window = config["eps"], config["window"]
    penalty = float(horizon + 1)
    arms = (METHOD, *BASELINES)
    per: dict[str, dict[str, list[float]]] = {
        k: {a: [] for a in arms} for k in ("R", "D", "H", "final", "gap")
    }
    any_fedavg: list[float] = []  # per target: did some baseline reach and hold it under FedAvg
    either_reached: list[float] = []
    table: dict[str, dict[str, dict[str, Any]]] = {}
    curves: dict[str, dict[str, list[float]]] = {}
    clean: dict[str, list[float]] = {}
    trivial: list[str] = []
    cells: list[tuple[str, float, dict[str, list[float]]]] = []
    for rule in config["rules"]:
        clean[rule], _, _ = _fl(
            config, seed, partitions, mal, holdout, test, rule, "none", 0.5, warm, horizon
        )
        untargeted = {
            a: _fl(config, seed, partitions, mal, holdout, test, rule, a, 0.5, warm, horizon)
            for a in UNTARGETED
        }
        for target in config["targets"]:
            key = f"{rule}@{target:g}"
            traces = {}
            for arm in arms:
                if arm in untargeted:
                    trace, _, strat = untargeted[arm]
                else:
                    trace, _, strat = _fl(config, seed, partitions, mal, holdout, test, rule, arm, target, warm,
                                          horizon)  # fmt: skip
                traces[arm] = trace
                r = round_complexity(trace, target, eps=eps, window=window, start=0)
                reached = not math.isinf(r)
                d_all = target_deviation(trace, target, start=1)
                d_hold = target_deviation(trace, target, start=int(r)) if reached else d_all
                sel = float(np.mean(strat.malicious_selected)) if strat.malicious_selected else None
                table.setdefault(key, {})[arm] = {"rounds": r if reached else None, "deviation": d_all,
                                                  "hold_deviation": d_hold, "final": trace[-1],
                                                  "malicious_selected": sel}  # fmt: skip
                curves.setdefault(f"accuracy {key}", {})[arm] = trace
            r_clean = round_complexity(clean[rule], target, eps=eps, window=window, start=0)
            table[key][NO_ATTACK] = {"rounds": None if math.isinf(r_clean) else r_clean,
                                     "deviation": target_deviation(clean[rule], target, start=1),
                                     "final": clean[rule][-1]}  # fmt: skip
            if not math.isinf(r_clean) or clean[rule][-1] <= target + eps:
                # the target is reached without any attack, or the clean model ends at or below it (no
                # degradation is needed to get there): the cell says nothing about attacks
                trivial.append(key)
            cells.append((key, target, traces))
            if rule == "fedavg":
                any_fedavg.append(float(any(table[key][b]["rounds"] is not None for b in BASELINES)))
            either_reached.append(float(table[key]["lie"]["rounds"] is not None
                                        or table[key]["minmax"]["rounds"] is not None))  # fmt: skip
    scored = [c for c in cells if c[0] not in trivial] or cells  # every cell trivial: score them all
    for key, _target, traces in scored:
        for arm in arms:
            row = table[key][arm]
            per["R"][arm].append(row["rounds"] if row["rounds"] is not None else penalty)
            per["D"][arm].append(row["deviation"])
            per["H"][arm].append(row["hold_deviation"])
            per["final"][arm].append(row["final"])
            per["gap"][arm].append(float(np.mean(np.abs(np.subtract(traces[arm][1:], traces["minmax"][1:])))))
    metrics = {
        "rounds_to_target": {a: float(np.mean(per["R"][a])) for a in arms},
        "target_deviation": {a: float(np.mean(per["D"][a])) for a in arms},
        "hold_deviation": {a: float(np.mean(per["H"][a])) for a in arms},
        "final_accuracy": {
            **{a: float(np.mean(per["final"][a])) for a in arms},
            NO_ATTACK: float(
                clean["fedavg"][-1] if "fedavg" in clean else np.mean([t[-1] for t in clean.values()])
            ),
        },  # fmt: skip
        "reached_fraction": {
            **{a: float(np.mean([v < penalty for v in per["R"][a]])) for a in arms},
            ANY_UNDER_FEDAVG: float(np.mean(any_fedavg)) if any_fedavg else 0.0,
            LIE_OR_MINMAX: float(np.mean(either_reached)),
        },  # fmt: skip
        "target_reachable": {ANY_UNDER_FEDAVG: float(any(any_fedavg))},
        "gap_to_minmax": {a: float(np.mean(per["gap"][a])) for a in arms},
    }
    local_steps = int(np.mean([math.ceil(len(p[1]) / config["batch_size"]) for p in partitions]))
    n = len(partitions)
    arm_budget = {"warmup_rounds": config["warmup_rounds"], "attack_rounds": horizon, "clients": n,
                  "malicious": len(mal), "local_epochs": 1, "mean_local_steps": local_steps,
                  "rules": list(config["rules"]), "targets": list(config["targets"])}  # fmt: skip
    info: dict[str, Any] = {
        "rule_attack_table": table,
        "trivial_cells": trivial,
        "scored_cells": [c[0] for c in scored],
        "assumed_byzantine_count": {r: _assumed_f(r, n, len(mal)) for r in config["rules"]},
        "flower_strategies": {r: FLOWER_STRATEGIES[r].__name__ for r in config["rules"]},
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
        for arm in (METHOD, "fedsa_lite"):
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


def _table_grid(result: dict[str, Any], field: str, penalty_key: str = "penalty_rounds_if_never"):
    """(rule@target rows, attack columns, seed-mean matrix) of one field of the rule x attack table."""
    infos = result.get("info", [])
    infos = infos if isinstance(infos, list) else [infos]
    tables = [i["rule_attack_table"] for i in infos if i.get("rule_attack_table")]
    if not tables:
        return [], [], np.zeros((0, 0))
    rows = list(tables[0])
    cols = [a for a in (METHOD, *BASELINES, NO_ATTACK) if a in tables[0][rows[0]]]
    grid = np.full((len(rows), len(cols)), np.nan)
    for i, row in enumerate(rows):
        for j, col in enumerate(cols):
            vals = []
            for info, table in zip(infos, tables):
                v = table.get(row, {}).get(col, {}).get(field)
                vals.append(float(info.get(penalty_key, np.nan)) if v is None and field == "rounds" else v)
            vals = [v for v in vals if v is not None]
            grid[i, j] = float(np.mean(vals)) if vals else np.nan
    return rows, cols, grid


def plot(result: dict[str, Any], folder: Path) -> list[Path]:
    plt = pyplot()
    paths = []
    curves = result.get("curves", {})
    keys = [k for k in curves if "@clean" not in k]
    if keys:
        cols = min(3, len(keys))
        rows = math.ceil(len(keys) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
        for ax, key in zip(axes.flat, keys):
            for arm, runs in curves[key].items():
                run = np.asarray(runs[0] if runs and isinstance(runs[0], list) else runs, dtype=float)
                ax.plot(run, label=DISPLAY_NAMES.get(arm, arm))
            target = float(key.split("@")[1])
            ax.axhline(target, color="k", ls="--", lw=0.8)
            ax.set_title(key, fontsize=9)
            ax.set_xlabel("attacked round")
            ax.set_ylabel("test accuracy")
        axes.flat[0].legend(fontsize=6)
        paths.append(save_figure(fig, folder, "asap_traces", dpi=110))
    rows_r, cols_r, rounds = _table_grid(result, "rounds")
    if rows_r:
        _, _, dev = _table_grid(result, "deviation")
        fig, axes = plt.subplots(1, 2, figsize=(1.0 * len(cols_r) * 2 + 3, 0.55 * len(rows_r) + 2.2))
        for ax, grid, title, cmap in ((axes[0], rounds, "rounds to reach and hold y* (never = horizon + 1)", "viridis_r"),
                                      (axes[1], dev, "target deviation mean |acc - y*|", "magma_r")):  # fmt: skip
            im = ax.imshow(grid, cmap=cmap, aspect="auto")
            ax.set_xticks(range(len(cols_r)), [DISPLAY_NAMES.get(c, c) for c in cols_r], rotation=45, ha="right",
                          fontsize=7)  # fmt: skip
            ax.set_yticks(range(len(rows_r)), rows_r, fontsize=7)
            for i in range(grid.shape[0]):
                for j in range(grid.shape[1]):
                    if np.isfinite(grid[i, j]):
                        ax.text(j, i, f"{grid[i, j]:.2g}", ha="center", va="center", fontsize=6, color="w")
            ax.set_title(title, fontsize=8)
            fig.colorbar(im, ax=ax, fraction=0.04)
        paths.append(save_figure(fig, folder, "asap_rule_attack_heatmap", dpi=110))
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
    return Better(
        metric, baseline=baseline, higher_is_better=False, min_seeds=3, label=f"{tag}_vs_{baseline}"
    )


CLAIM = Claim(
    slug="asap",
    claim=(
        "ASAP reaches a specified degradation objective in fewer communication rounds and keeps a smaller "
        "target deviation than existing model-poisoning attacks, across aggregation rules."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=(NO_ATTACK, ANY_UNDER_FEDAVG, LIE_OR_MINMAX),
    premises=(
        AtLeast("final_accuracy", arm=NO_ATTACK, threshold=0.75, label="clean_model_learns"),
        AtLeast(
            "target_reachable", arm=ANY_UNDER_FEDAVG, threshold=0.5, label="baseline_reaches_under_fedavg"
        ),
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
    run=run,
    configs={
        "smoke": {
            **_COMMON,
            "num_clients": 7,
            "num_malicious": 2,
            "rules": ["fedavg", "krum"],
            "targets": [0.6],
            "threads": 1,
            "warmup_rounds": 2,
            "attack_rounds": 4,
            "window": 2,
        },
        "quick": {
            **_COMMON,
            "num_clients": 20,
            "num_malicious": 6,
            "rules": ["fedavg", "median", "krum"],
            "targets": [0.6],
            "threads": 1,
            "warmup_rounds": 15,
            "attack_rounds": 20,
            "window": 8,
        },
        "full": {
            **_COMMON,
            "num_clients": 20,
            "num_malicious": 6,
            "rules": ["fedavg", "krum", "multikrum", "median", "trimmed_mean", "bulyan"],
            "targets": [0.5, 0.6, 0.7],
            "threads": 1,
            "warmup_rounds": 15,
            "attack_rounds": 25,
            "window": 10,
            "engine_check": True,
        },
    },  # fmt: skip
    seeds={"smoke": (0,), "quick": (0,), "full": (0, 1, 2, 5, 6, 7)},
    implemented=(
        "ASAPAttack (adaptive sliding-mode controller ASMCController with a PI sliding surface, reaching law with "
        "boundary layer, normalised-LMS finite Fourier-basis disturbance estimate, projected gain adaptation, "
        "MinMax stealth bound on the control input); baselines LIE, MinMax, MinSum, Fang et al.'s Krum and "
        "trimmed-mean attacks (partial knowledge), FMPA (reconstructed: EMA predictor of the next global model, "
        "bisection to the target accuracy under the MinMax bound) and FedSA-lite (same law, fixed gain, no "
        "disturbance estimate). Defences are Flower's own strategies chosen by name (flwr.serverapp.strategy "
        "FedAvg, Krum, MultiKrum, FedMedian, FedTrimmedAvg beta=0.2, Bulyan) with clear errors, a non-finite "
        "policy and selection records added around them; malicious Flower ClientApps collude by deterministic "
        "replication. References: no_attack (the same rounds with every client honest), any_baseline_fedavg "
        "(whether some baseline attack reached and held the target under FedAvg) and lie_or_minmax. Arms are "
        "snake_case in the metrics (asap, lie, minmax, minsum, fang_krum, fang_trim, fmpa, fedsa_lite); "
        "DISPLAY_NAMES maps them to the paper's names, which the plots show."
    ),
    differences=(
        "The paper's exact equations are not public: the scalar plant, the PI surface, the adaptive laws and the "
        "anti-windup are reconstructed from the abstract and the FedSA predecessor. Digits + logistic regression "
        "instead of the paper's datasets/models. Testbed (issue 12, where under IID clients, 20% attackers and the "
        "std direction no attack moved accuracy below 0.79 and ASAP saturated into MinMax): Dirichlet(0.3) label "
        "skew, 6 of 20 clients malicious (30%; spec 20%), the inverse-unit direction -mu/|mu| of Shejwalkar & "
        "Houmansadr for MinMax, MinSum, ASAP and FedSA-lite (LIE keeps its std direction by definition), and "
        "D_att = a stratified 10% of the training split that no client trains on (the attackers' skewed own data "
        "made ASAP track its own classes' accuracy, not the server's). 15 benign FedAvg warm-up rounds shared by "
        "all arms, then 25 attacked rounds (spec: 20 + 80). Targets y* in {0.5, 0.6, 0.7} in the full profile (spec: "
        "0.5 and 0.2; 0.2 is beyond every attack here, Fang's attacks bottom out near 0.3-0.45 under FedAvg). The "
        "first full run (5 seeds, y* = 0.6 only) was inconclusive on its testbed premise: some baseline reached and "
        "held 0.6 under FedAvg in only 3 of 5 seeds, because where an untargeted attack settles varies from seed to "
        "seed. A calibration of the baselines alone under FedAvg (seeds 0-4, m in {6, 8}, y* in {0.5, 0.6, 0.7}; "
        "ASAP not run) found that with m = 6 some baseline reaches and holds one of the three levels in every seed, "
        "while a larger malicious fraction (m = 8) did not make any single level reliably reachable; so the grid "
        "of three levels (not a stronger attacker) is the change, declared before the second full run, which uses 3 "
        "seeds (0-2) to fit the 10-minute budget (each seed is 6 rules x 15 federations); the verdict of those 3 seeds "
        "flipped on the unseen seeds 5-7 (results/seedcheck: LIE's rounds-to-target), so the full profile is now the "
        "two splits pooled, seeds 0, 1, 2, 5, 6, 7 (issue 21; made to fit the budget by a cheaper harness with the same "
        "numbers, see the module docstring, not by cutting). Defences (issue 25): Flower's "
        "strategies; the server assumes the true m = 6 Byzantine clients for Krum and Multi-Krum (n = 20 > 2m + 2) "
        "and m capped at 4 for Bulyan (n >= 4f + 3 allows at most 4 of 20; 6 exceeds Bulyan's guarantee). Flower's "
        "Multi-Krum averages weighted by sample count and Flower's Bulyan selects by one-shot Multi-Krum instead "
        "of the paper's recursive Krum (documented and tested in neurips26.federated.robust). Scoring (declared "
        "with issue 25, before its numbers): a (rule, target) cell whose no-attack run already reaches and holds "
        "the target, or ends at or below target + eps (added by the integrator before the full run: under Krum "
        "with label skew the clean model ends near 0.55, so 'reaching 0.6' there is no degradation), says "
        "nothing about attacks and is left out of the criteria (listed in info.trivial_cells; "
        "if every cell is trivial all are scored); the clean-learning premise reads the no-attack FedAvg run; the "
        "reachability premise asks, per seed, that some baseline attack reaches and holds some target of the "
        "grid under FedAvg (issue 25; target_reachable), replacing 'LIE or MinMax reaches it in >= 20% of cells', "
        "which stays reported, as does the per-target fraction (reached_fraction of any_baseline_fedavg). Full "
        "profile: 6 seeds, all six rules, three targets; quick: 1 seed, fedavg, median and krum, 20 attacked rounds, hold window 8. "
        "Rounds-to-target uses the server's clean test accuracy; a target never reached and held counts as "
        "horizon + 1 rounds. LIE/MinMax/MinSum/Fang/FMPA use only the attackers' own honest updates and global "
        "models (partial knowledge); Fang-Krum and Fang-Trim are AGR-tailored by design and run against every "
        "rule, like every attack."
    ),
    data=(
        "scikit-learn load_digits (1,797 real 8x8 digits), stratified 80/20 split per seed; 10% of the training "
        "split (stratified) is the attackers' D_att; the rest is split over 20 clients by Dirichlet(0.3)."
    ),
    plot=plot,
    display_names=DISPLAY_NAMES,
    glossary={
        "rounds_to_target": "R_0.05: first attacked round r with |acc_{r+j} - y*| <= 0.05 for j = 0..W-1 (W = 10; "
        "acc = server test accuracy, r = 0 is the warm-up checkpoint); horizon + 1 when never; mean over the "
        "scored (rule, target) cells.",
        "target_deviation": "mean |acc_t - y*| over all attacked rounds t = 1..horizon; mean over the scored cells.",
        "hold_deviation": "mean |acc_t - y*| from round R_0.05 on (all attacked rounds if never reached).",
        "final_accuracy": "server test accuracy after the last attacked round; mean over the scored cells "
        "(no_attack: the same rounds without attackers under FedAvg).",
        "reached_fraction": "fraction of scored (rule, target) cells in which the target was reached and held "
        "(any_baseline_fedavg: fraction of targets some baseline attack reached and held under FedAvg; "
        "lie_or_minmax: fraction of all cells either of the two reached).",
        "target_reachable": "1 if some baseline attack reached and held some target of the grid under FedAvg in "
        "this seed, else 0 (the testbed premise: a target level can be reached and held at all).",
        "gap_to_minmax": "mean over attacked rounds of |acc_t(arm) - acc_t(minmax)|; mean over the scored cells "
        "(0 when an arm saturates into MinMax).",
    },
)

"""Benchmark runner of SGNNBench: one protocol for every (dataset, model, seed).

Protocol (spec step 10): full-batch Adam, cross entropy on ``train_mask``; every ``eval_every``
epochs the validation accuracy is measured and the best state kept; training stops after
``patience`` evaluations without improvement or at ``epochs``; the test accuracy of the best
validation state is reported together with the energy report, firing rates, parameters, the memory
of one training step and wall times per epoch and per inference.
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Data

from neurips26.common.checks import check_int
from neurips26.common.gnn import masked_accuracy
from neurips26.graph.sgnnbench.energy import count_parameters, energy_report, peak_memory
from neurips26.graph.sgnnbench.models import SGNN

__all__ = ["train_node_classifier", "run_benchmark", "design_space_sweep", "factor_average_ranks", "ROW_KEYS"]

ModelBuilder = Callable[[int, int], nn.Module]  # (in_channels, num_classes) -> model

ROW_KEYS = (
    "dataset",
    "model",
    "acc_mean",
    "acc_std",
    "accs",
    "energy_uj",
    "ac_energy_uj",
    "mac_energy_uj",
    "float_share",
    "firing_rate",
    "params",
    "memory_bytes",
    "sec_per_epoch",
    "infer_s",
    "epochs",
)


def train_node_classifier(
    model: nn.Module,
    data: Data,
    epochs: int = 200,
    lr: float = 1e-2,
    weight_decay: float = 1e-4,
    patience: int = 5,
    eval_every: int = 10,
) -> dict:
    """Train with early stopping on validation accuracy; return test accuracy of the best state.

    Returns
    -------
    dict
        ``test_acc``, ``val_acc``, ``epochs``, ``sec_per_epoch``, ``val_curve`` (per evaluation),
        ``memory_bytes`` (:func:`~.energy.peak_memory` of one training step).
    """
    check_int("epochs", epochs, low=1)
    check_int("patience", patience, low=1)
    check_int("eval_every", eval_every, low=1)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    x, ei, y = data.x, data.edge_index, data.y

    def step() -> torch.Tensor:
        model.train()
        opt.zero_grad()
        loss = F.cross_entropy(model(x, ei)[data.train_mask], y[data.train_mask])
        loss.backward()
        opt.step()
        return loss

    memory = peak_memory(step)  # counts as the first epoch
    best = (-1.0, copy.deepcopy(model.state_dict()))
    curve, bad, times, epoch = [], 0, [], 1
    for epoch in range(2, epochs + 1):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
        if epoch % eval_every == 0 or epoch == epochs:
            model.eval()
            with torch.no_grad():
                val = masked_accuracy(model(x, ei), y, data.val_mask)
            curve.append(val)
            if val > best[0]:
                best, bad = (val, copy.deepcopy(model.state_dict())), 0
            else:
                bad += 1
                if bad >= patience:
                    break
    model.load_state_dict(best[1])
    model.eval()
    with torch.no_grad():
        test = masked_accuracy(model(x, ei), y, data.test_mask)
    return {
        "test_acc": test,
        "val_acc": best[0],
        "epochs": epoch,
        "sec_per_epoch": float(np.mean(times)) if times else 0.0,
        "val_curve": curve,
        "memory_bytes": memory,
    }


def _evaluate(builder: ModelBuilder, data: Data, seed: int, train_kw: dict) -> dict:
    torch.manual_seed(seed)
    num_classes = int(data.y.max()) + 1
    model = builder(data.num_features, num_classes)
    out = train_node_classifier(model, data, **train_kw)
    torch.manual_seed(seed)  # poisson encoding samples: same draws for every call with this seed
    report = energy_report(model, data)
    t0 = time.perf_counter()
    with torch.no_grad():
        model.eval()
        model(data.x, data.edge_index)
    infer = time.perf_counter() - t0
    rates = list(report.firing_rates.values())
    return {
        "acc": out["test_acc"],
        "energy_uj": report.total_joules * 1e6,
        "ac_energy_uj": report.ac_joules * 1e6,
        "mac_energy_uj": report.mac_joules * 1e6,
        "float_share": report.float_share,
        "firing_rate": float(np.mean(rates)) if rates else None,
        "params": count_parameters(model),
        "memory_bytes": out["memory_bytes"],
        "sec_per_epoch": out["sec_per_epoch"],
        "infer_s": infer,
        "epochs": out["epochs"],
        "per_layer": report.per_layer,
    }


def run_benchmark(
    models: Mapping[str, ModelBuilder],
    datasets: Mapping[str, Data],
    seeds: Sequence[int] = (0, 1, 2),
    epochs: int = 200,
    patience: int = 5,
    eval_every: int = 10,
    lr: float = 1e-2,
    weight_decay: float = 1e-4,
) -> list[dict]:
    """One row per (dataset, model) with mean/std test accuracy and the efficiency columns (:data:`ROW_KEYS`).

    ``models`` maps a name to ``builder(in_channels, num_classes) -> nn.Module``. Every model gets
    the same data, seeds, optimiser and early-stopping budget. Energy, firing rate, parameters and
    memory are averaged over seeds; ``per_layer`` holds the energy breakdown of the first seed.
    """
    if not models or not datasets:
        raise ValueError("models and datasets must be non-empty")
    train_kw = {
        "epochs": epochs,
        "patience": patience,
        "eval_every": eval_every,
        "lr": lr,
        "weight_decay": weight_decay,
    }
    rows = []
    for dname, data in datasets.items():
        for mname, builder in models.items():
            runs = [_evaluate(builder, data, s, train_kw) for s in seeds]
            accs = [r["acc"] for r in runs]

            def avg(key: str, runs=runs):
                vals = [r[key] for r in runs if r[key] is not None]
                return float(np.mean(vals)) if vals else None

            rows.append(
                {
                    "dataset": dname,
                    "model": mname,
                    "acc_mean": float(np.mean(accs)),
                    "acc_std": float(np.std(accs)),
                    "accs": accs,
                    **{
                        k: avg(k)
                        for k in (
                            "energy_uj",
                            "ac_energy_uj",
                            "mac_energy_uj",
                            "float_share",
                            "firing_rate",
                            "memory_bytes",
                            "sec_per_epoch",
                            "infer_s",
                            "epochs",
                        )
                    },
                    "params": runs[0]["params"],
                    "per_layer": runs[0]["per_layer"],
                }
            )
    return rows


def design_space_sweep(
    dataset: Data,
    grid: Mapping[str, Sequence],
    seeds: Sequence[int] = (0,),
    base: Mapping | None = None,
    hidden_channels: int = 128,
    **bench_kw,
) -> list[dict]:
    """Train :class:`SGNN` at every point of ``grid`` (keys are ``SGNN`` arguments) on one dataset.

    Returns one :func:`run_benchmark` row per grid point with the grid values as extra columns.
    """
    if not grid:
        raise ValueError("grid must name at least one SGNN argument")
    keys = list(grid)
    rows = []
    for values in itertools.product(*(grid[k] for k in keys)):
        cfg = {**(base or {}), **dict(zip(keys, values))}

        def builder(f: int, c: int, cfg=cfg) -> SGNN:
            return SGNN(f, hidden_channels, c, **cfg)

        row = run_benchmark({str(cfg): builder}, {"data": dataset}, seeds=seeds, **bench_kw)[0]
        row.pop("per_layer")
        row.update({k: cfg[k] for k in keys})
        rows.append(row)
    return rows


def factor_average_ranks(
    rows: Sequence[dict], factors: Sequence[str], metric: str = "acc_mean", higher_is_better: bool = True
) -> dict[str, dict[str, float]]:
    """For each factor value: its average rank (1 = best) among rows that differ only in that factor."""
    out: dict[str, dict[str, float]] = {}
    for f in factors:
        others = [g for g in factors if g != f]
        groups: dict[tuple, list[dict]] = {}
        for r in rows:
            groups.setdefault(tuple(str(r[g]) for g in others), []).append(r)
        ranks: dict[str, list[float]] = {}
        for members in groups.values():
            order = sorted(members, key=lambda r: r[metric], reverse=higher_is_better)
            for rank, r in enumerate(order, 1):
                ranks.setdefault(str(r[f]), []).append(rank)
        out[f] = {k: float(np.mean(v)) for k, v in ranks.items()}
    return out

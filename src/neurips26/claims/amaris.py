"""Claim check for AMARIS (seed 004_01f475bc147a144d, "Domain specialization of large language models").

A tiny Llama base learns core digit tasks (copy, reverse); a specialist is the base fine-tuned on a
"price arithmetic" task only (every digit + 3 mod 10), with no replay, so it forgets core skills. The
specialist is merged back into the base by AMARIS and by peft's task arithmetic, TIES and DARE
(``peft.utils.merge_utils``) over the same tensors (every linear weight of the decoder blocks; the
specialist only trains those) and equally sized hyperparameter grids. Each merge is scored by
specialist retention and core retention; the frontier's hypervolume and the best core retention at
>= 90 % specialist retention are compared.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
import torch

from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Headline, SeedResult, sweep_record
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.models import BOS_ID, EOS_ID, build_tiny_lm
from neurips26.common.training import collate, load_checkpoint, train_or_load
from neurips26.editing.amaris import (
    AmarisConfig,
    amaris_merge,
    collect_activation_moments,
    dare_merge,
    task_arithmetic_merge,
    ties_merge,
)

METHOD = "amaris"
BASELINES = ("task_arithmetic", "ties", "dare")
REFERENCES = ("base", "specialist")
DIGIT0 = 4
TOK = {name: 14 + i for i, name in enumerate(("C", "R", "P", ";", ">"))}
VOCAB = 19


def _example(task: str, rng: random.Random, n_digits: int) -> tuple[list[int], list[int]]:
    if task == "spec":  # "price update": every digit + 3 (mod 10); collides with copy's digit circuits
        x = [rng.randrange(10) for _ in range(rng.randint(4, n_digits))]
        prompt = [TOK["P"], *[DIGIT0 + d for d in x], TOK[">"]]
        answer = [DIGIT0 + (d + 3) % 10 for d in x]
    else:
        x = [rng.randrange(10) for _ in range(rng.randint(4, n_digits))]
        prompt = [TOK["C" if task == "copy" else "R"], *[DIGIT0 + d for d in x], TOK[">"]]
        answer = [DIGIT0 + d for d in (x if task == "copy" else x[::-1])]
    return [BOS_ID, *prompt], answer


def _dataset(tasks: tuple[str, ...], n: int, seed: int, n_digits: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p, a = _example(tasks[i % len(tasks)], rng, n_digits)
        ids = p + a + [EOS_ID]
        out.append({"input_ids": ids, "loss_mask": [0] * len(p) + [1] * (len(a) + 1)})
    return out


def _accuracy(model, data: list[dict]) -> float:
    """Exact match of the whole answer; teacher-forced argmax == greedy decoding for exact match."""
    batch = collate(data, 0)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    pred = logits[:, :-1].argmax(-1)
    labels = batch["labels"][:, 1:]
    ok = ((pred == labels) | (labels == -100)).all(1)
    return float(ok.double().mean())


def _models(cfg: dict):
    arch = dict(hidden_size=cfg["hidden"], intermediate_size=cfg["intermediate"], num_hidden_layers=cfg["layers"],
                num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=32)
    core = ("copy", "reverse")
    base, hb = train_or_load(
        "amaris-base", {"arch": arch, "n": cfg["n_core"], "digits": cfg["digits"], "seed": cfg["train_seed"]},
        lambda: build_tiny_lm("llama", vocab_size=VOCAB, seed=cfg["train_seed"], **arch),
        lambda: _dataset(core, cfg["n_core"], 1, cfg["digits"]),
        steps=cfg["base_steps"], batch_size=64, lr=3e-3, warmup=20, seed=cfg["train_seed"],
    )

    def make_spec():
        model = load_checkpoint(hb["folder"])
        for name, p in model.named_parameters():
            p.requires_grad_(".layers." in name and p.dim() == 2)  # only block linear weights move
        return model

    spec, hs = train_or_load(
        "amaris-specialist", {"base": hb["folder"], "n": cfg["n_spec"], "seed": cfg["train_seed"], "task": "shift3"},
        make_spec, lambda: _dataset(("spec",), cfg["n_spec"], 2, cfg["digits"]),
        steps=cfg["spec_steps"], batch_size=64, lr=2e-3, warmup=10, weight_decay=0.0, seed=cfg["train_seed"],
    )
    return base, spec, {"base": hb, "specialist": hs}


def _hypervolume(points: list[tuple[float, float]]) -> float:
    """Area dominated by the points in [0, 1]^2 w.r.t. (0, 0) (retentions clipped to 1)."""
    pts = sorted(((min(max(a, 0), 1), min(max(b, 0), 1)) for a, b in points), reverse=True)
    area, best_b = 0.0, 0.0
    for a, b in pts:  # sweep by decreasing specialist retention
        if b > best_b:
            area += a * (b - best_b)
            best_b = b
    return area


def _frontier(points):
    pts = sorted(points, key=lambda p: (-p[0], -p[1]))
    out, best = [], -np.inf
    for a, b in pts:
        if b > best:
            out.append((a, b))
            best = b
    return out


def _run(config: dict, seed: int) -> SeedResult:
    cfg = config
    start = time.perf_counter()
    base, spec, hist = _models(cfg)
    core_eval = _dataset(("copy", "reverse"), cfg["n_eval"], 100 + seed, cfg["digits"])
    spec_eval = _dataset(("spec",), cfg["n_eval"], 200 + seed, cfg["digits"])
    acc = {name: (_accuracy(m, core_eval), _accuracy(m, spec_eval)) for name, m in (("base", base), ("specialist", spec))}
    base_sd, spec_sd = base.state_dict(), spec.state_dict()
    keys = [k for k in base_sd if ".layers." in k and base_sd[k].dim() == 2]
    modules = [k[: -len(".weight")] for k in keys]
    calib = lambda tasks, s: [  # noqa: E731
        {k: v for k, v in collate(_dataset(tasks, cfg["n_calib"], s, cfg["digits"]), 0).items() if k != "labels"}]
    t0 = time.perf_counter()
    ms = collect_activation_moments(base, calib(("spec",), 300 + seed), modules)
    mb = collect_activation_moments(base, calib(("copy", "reverse"), 400 + seed), modules)
    calib_s = time.perf_counter() - t0
    grids = {
        "task_arithmetic": [{"alpha": a} for a in cfg["alphas"]],
        "ties": [{"density": d, "alpha": a} for d in cfg["densities"] for a in cfg["merge_alphas"]],
        "dare": [{"drop_p": p, "alpha": a} for p in cfg["drops"] for a in cfg["merge_alphas"]],
        METHOD: [{"budget": b} for b in cfg["budgets"]],
    }
    points: dict[str, list[tuple[float, float]]] = {}
    times: dict[str, float] = {}
    model = load_checkpoint(hist["base"]["folder"])
    for arm, grid in grids.items():
        points[arm] = []
        t0 = time.perf_counter()
        for hp in grid:
            if arm == "task_arithmetic":
                sd = task_arithmetic_merge(base_sd, [spec_sd], [hp["alpha"]], keys=keys)
            elif arm == "ties":
                sd = ties_merge(base_sd, [spec_sd], hp["density"], hp["alpha"], keys=keys)
            elif arm == "dare":
                reps = []
                for s in range(cfg["dare_masks"]):
                    model.load_state_dict(dare_merge(base_sd, [spec_sd], hp["drop_p"], hp["alpha"], seed=1000 * seed + s, keys=keys))
                    reps.append((_accuracy(model, spec_eval), _accuracy(model, core_eval)))
                a_s, a_c = np.mean([r[0] for r in reps]), np.mean([r[1] for r in reps])
                points[arm].append((float(a_s) / max(acc["specialist"][1], 1e-9), float(a_c) / max(acc["base"][0], 1e-9)))
                continue
            else:
                sd, _ = amaris_merge(base_sd, spec_sd, ms, mb, AmarisConfig(budget=hp["budget"], max_rank_frac=cfg["max_rank_frac"]))
            model.load_state_dict(sd)
            points[arm].append((_accuracy(model, spec_eval) / max(acc["specialist"][1], 1e-9),
                                _accuracy(model, core_eval) / max(acc["base"][0], 1e-9)))
        times[arm] = (time.perf_counter() - t0) / len(grid)

    metrics: dict[str, dict[str, float]] = {k: {} for k in ("hypervolume", "core_at_spec90", "acc_core", "acc_spec",
                                                            "core_retention", "spec_retention_max")}
    sweeps = {}
    for arm, pts in points.items():
        metrics["hypervolume"][arm] = _hypervolume(pts)
        ok = [b for a, b in pts if a >= 0.9]
        metrics["core_at_spec90"][arm] = max(ok) if ok else 0.0
        metrics["spec_retention_max"][arm] = max(a for a, _ in pts)
        best = max(range(len(pts)), key=lambda i: pts[i][1] if pts[i][0] >= 0.9 else -1 + pts[i][0])
        hp = grids[arm][best]
        sweeps[arm] = {k: sweep_record(sorted({g[k] for g in grids[arm]}), v) for k, v in hp.items()}
    for name in REFERENCES:
        metrics["acc_core"][name], metrics["acc_spec"][name] = acc[name]
    metrics["core_retention"]["specialist"] = acc["specialist"][0] / max(acc["base"][0], 1e-9)
    curves = {"frontier_spec": {a: [p[0] for p in _frontier(v)] for a, v in points.items()},
              "frontier_core": {a: [p[1] for p in _frontier(v)] for a, v in points.items()}}
    info = {
        "budget": {"grid_points": {a: len(g) for a, g in grids.items()}, "merged_tensors": len(keys),
                   "eval_items": cfg["n_eval"], "dare_masks_per_point": cfg["dare_masks"]},
        "sweeps": sweeps,
        "points": {a: [list(p) for p in v] for a, v in points.items()},
        "grids": grids,
        "training": {k: {"final_loss": v.get("final_loss"), "cached": v.get("cached")} for k, v in hist.items()},
        "performance": {"calibration_s": calib_s, **{f"merge_s_{a}": t for a, t in times.items()}},
        "wall_s": time.perf_counter() - start,
    }
    return SeedResult(metrics=metrics, curves=curves, info=info)


def plot(result: dict, folder: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 4))
    pts = result["info"][0]["points"]
    for arm, values in pts.items():
        v = np.array(values)
        ax.scatter(v[:, 0], v[:, 1], label=arm, s=14)
    ax.set_xlabel("specialist retention")
    ax.set_ylabel("core retention")
    ax.axvline(0.9, color="grey", lw=0.5)
    ax.legend(fontsize=7)
    ax.set_title("merge frontiers (seed 0)")
    return [save_figure(fig, folder, "amaris_frontier")]


_BASE = dict(train_seed=0, digits=6, threads=1, dare_masks=2, max_rank_frac=1.0,
             alphas=[0.25, 0.5, 0.75, 1.0], densities=[0.2, 0.5], merge_alphas=[0.5, 1.0], drops=[0.5, 0.9],
             budgets=[0.05, 0.2, 0.5, 0.9])
CONFIGS = {
    "smoke": dict(_BASE, hidden=32, intermediate=64, layers=2, n_core=2000, n_spec=1000, base_steps=60, spec_steps=30,
                  n_eval=40, n_calib=32, dare_masks=1),
    "quick": dict(_BASE, hidden=64, intermediate=128, layers=2, n_core=8000, n_spec=4000, base_steps=700, spec_steps=300,
                  n_eval=200, n_calib=64),
    "full": dict(_BASE, hidden=96, intermediate=192, layers=3, n_core=12000, n_spec=6000, base_steps=1000,
                 spec_steps=400, n_eval=400, n_calib=64, dare_masks=3),
}

GLOSSARY = {
    "hypervolume": "area of [0,1]^2 dominated by the arm's merge points (specialist retention, core retention), retentions clipped to 1",
    "core_at_spec90": "best core retention among the arm's merge points with specialist retention >= 0.9 (0 when none reaches it)",
    "spec_retention_max": "largest specialist retention over the arm's grid",
    "acc_core": "exact-match accuracy on held-out copy/reverse items (whole answer, greedy)",
    "acc_spec": "exact-match accuracy on held-out specialist (digit + 3 mod 10) items",
    "core_retention": "acc_core of the model / acc_core of the base (specialist arm: the forgetting premise)",
}

CLAIM = Claim(
    slug="amaris",
    claim=("Merging a specialist along ranked inherited subspaces (AMARIS) gives a better specialist-vs-core "
           "retention frontier than task arithmetic, TIES and DARE at matched specialist retention."),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        AtLeast("acc_core", threshold=0.9, arm="base", label="base_learns_core"),
        AtLeast("acc_spec", threshold=0.9, arm="specialist", label="specialist_learns_task"),
        AtMost("core_retention", threshold=0.8, arm="specialist", label="specialist_forgets"),
    ),
    criteria=(
        Better("core_at_spec90", baseline="task_arithmetic", margin=0.02, min_seeds=3, label="core90_vs_ta"),
        Better("core_at_spec90", baseline="ties", margin=0.02, min_seeds=3, label="core90_vs_ties"),
        Better("core_at_spec90", baseline="dare", margin=0.02, min_seeds=3, label="core90_vs_dare"),
        Better("hypervolume", baseline="ties", margin=-0.02, min_seeds=3, label="hv_vs_ties"),
        Better("hypervolume", baseline="dare", margin=-0.02, min_seeds=3, label="hv_vs_dare"),
    ),
    headlines=(
        Headline("Pareto operating points competitive with strong training-free baselines",
                 criteria=("hv_vs_ties", "hv_vs_dare", "core90_vs_ta", "core90_vs_ties", "core90_vs_dare")),
        Headline("finance: 98.37% specialist retention with 95.76% core retention (Qwen3 8B/32B)",
                 untested="Qwen3-8B/32B and the finance benchmarks are out of reach on 2 CPU cores; the toy task's "
                          "core_at_spec90 is the analogous operating point"),
        Headline("instruction following: 103.49% core retention with 90.28% specialist retention",
                 untested="no instruction-following specialist at CPU scale"),
        Headline("multilingual SEA: 93.69% specialist retention with 99.77% core retention",
                 untested="no multilingual specialist at CPU scale"),
    ),
    items={"core_at_spec90": {"smoke": 40, "quick": 200, "full": 400}, "hypervolume": {"smoke": 40, "quick": 200, "full": 400}},
    run=_run,
    configs=CONFIGS,
    seeds={"smoke": (0,), "quick": (0, 1, 2), "full": (0, 1, 2, 3, 4)},
    implemented=("AMARIS (budgeted greedy selection of generalized eigendirections of the update-induced specialist "
                 "vs base activation-shift covariances, row-space path, projection gate) on every block linear layer; "
                 "baselines are peft.utils.merge_utils.task_arithmetic, ties (per-tensor trimming, 'total' sign "
                 "election, peft's convention) and dare_linear (density = 1 - drop rate), through one state-dict wrapper."),
    differences=("Tiny Llama on synthetic digit tasks instead of Qwen3-8B/32B on finance/instruction/SEA benchmarks; one "
                 "trained base/specialist pair (train_seed 0), seeds resample the calibration and evaluation items and "
                 "DARE's masks, so the spread reflects evaluation sampling, not training. Grids: 4 points per arm "
                 "(TIES and DARE 2 densities x 2 scales); AMARIS budgets {0.05, 0.2, 0.5, 0.9} with max_rank_frac 1 so that the "
                 "budget is its only knob and its grid reaches the specialist end like the baselines' scales. The "
                 "LoRA-specialist SmolLM2 arm was not run (amaris_merge_lora is implemented and tested)."),
    data="Generated digit tasks: copy and reverse (core), every digit of a 4-6 digit string + 3 mod 10 (specialist).",
    plot=plot,
    glossary=GLOSSARY,
)


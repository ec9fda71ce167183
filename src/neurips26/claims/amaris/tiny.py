"""AMARIS claim: the tiny digit-task world (base learns copy/reverse, specialist learns price arithmetic) and its arm."""

from __future__ import annotations

import random
import time

import numpy as np
import torch

from neurips26.claims.amaris.shared import METHOD, REFERENCES, _frontier, _hypervolume
from neurips26.claims.base import sweep_record
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


def model_seed(cfg: dict, seed: int) -> int:
    """The training seed of run seed ``seed``: every seed trains its own base (initialisation and batch
    order) and its own specialist from that base (batch order), ``cfg["train_seed"] + seed``. The training
    sets are fixed."""
    return int(cfg["train_seed"]) + int(seed)


def _models(cfg: dict, seed: int):
    """The base and specialist that run seed ``seed`` trains (cached per training seed)."""
    train_seed = model_seed(cfg, seed)
    arch = dict(
        hidden_size=cfg["hidden"],
        intermediate_size=cfg["intermediate"],
        num_hidden_layers=cfg["layers"],
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=32,
    )
    core = ("copy", "reverse")
    base, hb = train_or_load(
        "amaris-base",
        {"arch": arch, "n": cfg["n_core"], "digits": cfg["digits"], "seed": train_seed},
        lambda: build_tiny_lm("llama", vocab_size=VOCAB, seed=train_seed, **arch),
        lambda: _dataset(core, cfg["n_core"], 1, cfg["digits"]),
        steps=cfg["base_steps"],
        batch_size=64,
        lr=3e-3,
        warmup=20,
        seed=train_seed,
    )

    def make_spec():
        model = load_checkpoint(hb["folder"])
        for name, p in model.named_parameters():
            p.requires_grad_(".layers." in name and p.dim() == 2)  # only block linear weights move
        return model

    spec, hs = train_or_load(
        "amaris-specialist",
        {"base": hb["folder"], "n": cfg["n_spec"], "seed": train_seed, "task": "shift3"},
        make_spec,
        lambda: _dataset(("spec",), cfg["n_spec"], 2, cfg["digits"]),
        steps=cfg["spec_steps"],
        batch_size=64,
        lr=2e-3,
        warmup=10,
        weight_decay=0.0,
        seed=train_seed,
    )
    return base, spec, {"base": hb, "specialist": hs}


def _tiny_arm(cfg: dict, seed: int) -> tuple[dict, dict, dict]:
    """The tiny digit-task arm: metrics, curves and info for one seed."""
    start = time.perf_counter()
    base, spec, hist = _models(cfg, seed)  # every seed trains its own base and specialist
    core_eval = _dataset(("copy", "reverse"), cfg["n_eval"], 100 + seed, cfg["digits"])
    spec_eval = _dataset(("spec",), cfg["n_eval"], 200 + seed, cfg["digits"])
    acc = {
        name: (_accuracy(m, core_eval), _accuracy(m, spec_eval))
        for name, m in (("base", base), ("specialist", spec))
    }
    base_sd, spec_sd = base.state_dict(), spec.state_dict()
    keys = [k for k in base_sd if ".layers." in k and base_sd[k].dim() == 2]
    modules = [k[: -len(".weight")] for k in keys]
    calib = lambda tasks, s: [  # noqa: E731
        {
            k: v
            for k, v in collate(_dataset(tasks, cfg["n_calib"], s, cfg["digits"]), 0).items()
            if k != "labels"
        }
    ]
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
                    model.load_state_dict(
                        dare_merge(
                            base_sd, [spec_sd], hp["drop_p"], hp["alpha"], seed=1000 * seed + s, keys=keys
                        )
                    )
                    reps.append((_accuracy(model, spec_eval), _accuracy(model, core_eval)))
                a_s, a_c = np.mean([r[0] for r in reps]), np.mean([r[1] for r in reps])
                points[arm].append(
                    (float(a_s) / max(acc["specialist"][1], 1e-9), float(a_c) / max(acc["base"][0], 1e-9))
                )
                continue
            else:
                sd, _ = amaris_merge(
                    base_sd,
                    spec_sd,
                    ms,
                    mb,
                    AmarisConfig(budget=hp["budget"], max_rank_frac=cfg["max_rank_frac"]),
                )
            model.load_state_dict(sd)
            points[arm].append(
                (
                    _accuracy(model, spec_eval) / max(acc["specialist"][1], 1e-9),
                    _accuracy(model, core_eval) / max(acc["base"][0], 1e-9),
                )
            )
        times[arm] = (time.perf_counter() - t0) / len(grid)

    metrics: dict[str, dict[str, float]] = {
        k: {}
        for k in (
            "hypervolume",
            "core_at_spec90",
            "acc_core",
            "acc_spec",
            "core_retention",
            "spec_retention_max",
        )
    }
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
    curves = {
        "frontier_spec": {a: [p[0] for p in _frontier(v)] for a, v in points.items()},
        "frontier_core": {a: [p[1] for p in _frontier(v)] for a, v in points.items()},
    }
    info = {
        "budget": {
            "grid_points": {a: len(g) for a, g in grids.items()},
            "merged_tensors": len(keys),
            "eval_items": cfg["n_eval"],
            "dare_masks_per_point": cfg["dare_masks"],
        },
        "sweeps": sweeps,
        "points": {a: [list(p) for p in v] for a, v in points.items()},
        "grids": grids,
        "training": {
            "train_seed": model_seed(cfg, seed),
            **{k: {"final_loss": v.get("final_loss"), "cached": v.get("cached")} for k, v in hist.items()},
        },
        "performance": {"calibration_s": calib_s, **{f"merge_s_{a}": t for a, t in times.items()}},
        "wall_s": time.perf_counter() - start,
    }
    return metrics, curves, info

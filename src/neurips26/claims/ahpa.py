"""Claim check for AHPA ("Adaptive Hierarchical Prior Alignment", arXiv 2605.03317) against REPA-style
alignment and a vanilla DiT, at equal step budgets.

Data: scikit-learn's 1,797 8x8 digits, bilinearly upsampled to 16x16 and scaled to [-1, 1]; one fixed
stratified split (1,500 train / 297 held-out) shared by every seed (seeds vary the DiT, the heads, the
batches and the noise). Frozen parts trained here first and cached: a tiny diffusers ``AutoencoderKL``
(16x16x1 -> 4x4x4 latent), the evaluation CNN (its penultimate features define FD-digits), and REPA's external
encoder: a small timm ``VisionTransformer`` (``timm.create_model(..., pretrained=False)``, DINOv2's token layout:
class token + 4x4 patch tokens, final LayerNorm) trained here as a digit classifier (DINOv2 weights cannot be
downloaded). ``config["repa_encoder"] = "cnn"`` selects the earlier stand-in, a second digit CNN.

Arms (same DiT init, batches, noise, optimiser, lr and steps):
``vanilla`` (no alignment); ``repa`` (one fixed target at every t: the external ViT's final normed patch tokens);
``single_level`` (the spec's static single-level VAE supervisor: the pre-latent VAE feature at every t);
``uniform`` (all four VAE levels, equal fixed weights); ``ahpa`` (all four levels, learned router).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from neurips26.claims.base import AtLeast, Better, Claim, Exact, Headline, SeedResult
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.cache import cached_object
from neurips26.common.datasets import load_digits
from neurips26.common.models import count_parameters
from neurips26.vision.ahpa import (
    AHPAAlignmentLoss,
    HierarchicalFeatureExtractor,
    TimestepRouter,
    ahpa_training_step,
    build_dit,
    build_vae,
    frechet_distance,
    sample_ode,
)

METHOD = "ahpa"
BASELINES = ("vanilla", "repa", "single_level", "uniform")
REFERENCES = ("classifier",)
TRAINED = (METHOD, *BASELINES)
VAE_LEVELS = ("down_blocks.0.resnets.0", "down_blocks.0", "down_blocks.1", "mid_block")  # fine -> coarse
REPA_LEVELS = {
    "vit": ("patch_map",),  # the external ViT's final normed patch tokens (64 x 4x4), as DINOv2's
    "cnn": ("features.3",),  # the earlier stand-in: a digit CNN's second conv after its ReLU (64 x 8x8)
}
ROUTERS = {"ahpa": "learned", "single_level": f"single:{len(VAE_LEVELS) - 1}", "uniform": "uniform"}
N_TRAIN, N_HELD = 1500, 297


# ------------------------------------------------------------------------------------------ data
def _shift_views(x: torch.Tensor, views: int) -> torch.Tensor:
    """``(V, n, 1, H, W)``: the identity first, then the other +-1 px translations (zero = -1 fill)."""
    offsets = [(0, 0)] + [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0)]
    pad = F.pad(x, (1, 1, 1, 1), value=-1.0)
    h, w = x.shape[-2:]
    return torch.stack([pad[..., 1 + dy : 1 + dy + h, 1 + dx : 1 + dx + w] for dy, dx in offsets[:views]])


def _digits(n_train: int = N_TRAIN) -> dict[str, torch.Tensor]:
    """16x16 digits in [-1, 1] and the fixed stratified split (private image helper; see module doc)."""
    x8, y = load_digits(flatten=False)
    x = F.interpolate(x8, size=(16, 16), mode="bilinear", align_corners=False) * 2 - 1
    rng = np.random.default_rng(0)
    held: list[int] = []
    for c in range(10):
        idx = rng.permutation(np.flatnonzero(y.numpy() == c))
        held.extend(idx[: round(N_HELD * len(idx) / len(y))])
    held_idx = np.sort(np.array(held[:N_HELD]))
    train_idx = np.setdiff1d(np.arange(len(y)), held_idx)[:N_TRAIN][:n_train]
    return {"x": x[train_idx], "y": y[train_idx], "x_held": x[held_idx], "y_held": y[held_idx]}


def _random_shift(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    views = _shift_views(x, 9)
    pick = torch.randint(0, 9, (x.shape[0],), generator=gen)
    return views[pick, torch.arange(x.shape[0])]


# ------------------------------------------------------------------------------------------ frozen parts
class _DigitCNN(nn.Module):
    """conv 32 -> pool -> conv 64 -> pool -> linear 128 (penultimate features) -> linear 10."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3, padding=1, stride=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(64 * 16, 128),
            nn.ReLU(),
        )
        self.head = nn.Linear(128, 10)

    def forward(self, x):
        return self.head(self.features(x))


class _ReferenceViT(nn.Module):
    """REPA's external encoder at CPU scale: timm's ``VisionTransformer`` from ``timm.create_model(...,
    pretrained=False)`` with DINOv2's token layout (class token + patch tokens, final LayerNorm), configured to
    the 16x16x1 digits: patch 4 (4x4 patch tokens, the DiT's token grid), d = 64, depth 4, 4 heads, class-token
    head with 10 classes. ``patch_map`` (an identity, the hook point for
    :class:`~neurips26.vision.ahpa.HierarchicalFeatureExtractor`) sees the final normed patch tokens as a
    ``(B, d, 4, 4)`` map: REPA's target (DINOv2's ``x_norm_patchtokens``). ``forward`` returns class logits."""

    def __init__(self):
        super().__init__()
        import timm

        self.vit = timm.create_model(
            "vit_tiny_patch16_224",
            pretrained=False,
            img_size=16,
            patch_size=4,
            in_chans=1,
            embed_dim=64,
            depth=4,
            num_heads=4,
            mlp_ratio=4.0,
            num_classes=10,
            global_pool="token",
        )
        self.patch_map = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = self.vit.forward_features(x)  # (B, 1 + 16, 64), final LayerNorm applied
        patches = feats[:, self.vit.num_prefix_tokens :]
        self.patch_map(patches.transpose(1, 2).reshape(x.shape[0], -1, *self.vit.patch_embed.grid_size))
        return self.vit.forward_head(feats)


def _train_cnn(cfg: dict, seed: int, kind: str = "cnn") -> dict:
    """Train a digit classifier (``kind``: the evaluation/stand-in CNN or the REPA ViT) with one recipe."""
    data = _digits()
    torch.manual_seed(seed)
    net = _ReferenceViT() if kind == "vit" else _DigitCNN()
    gen = torch.Generator().manual_seed(seed + 1)
    opt = torch.optim.AdamW(net.parameters(), lr=2e-3)
    for _ in range(cfg["repa_steps"] if kind == "vit" else cfg["cls_steps"]):
        idx = torch.randint(0, N_TRAIN, (cfg["cls_batch"],), generator=gen)
        loss = F.cross_entropy(net(_random_shift(data["x"][idx], gen)), data["y"][idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def _cnn(cfg: dict, seed: int, kind: str = "cnn") -> nn.Module:
    """The frozen digit classifier ``kind`` ("cnn": :class:`_DigitCNN`, "vit": :class:`_ReferenceViT`), cached."""
    if kind not in REPA_LEVELS:
        raise ValueError(f"classifier kind must be one of {sorted(REPA_LEVELS)}, got {kind!r}")
    key = {"steps": cfg["cls_steps"], "batch": cfg["cls_batch"], "seed": seed, "v": 2}
    state = cached_object(
        "ahpa-cnn" if kind == "cnn" else "ahpa-repa-vit",
        key
        if kind == "cnn"
        else {**key, "steps": cfg["repa_steps"], "arch": "timm vit_tiny 16/4 d64 x4", "v": 1},
        lambda: _train_cnn(cfg, seed, kind),
    )
    net = _ReferenceViT() if kind == "vit" else _DigitCNN()
    net.load_state_dict(state)
    return net.eval().requires_grad_(False)


def _vae_config(cfg: dict) -> dict:
    return {
        "block_out_channels": list(cfg["vae_channels"]),
        "steps": cfg["vae_steps"],
        "batch": cfg["vae_batch"],
        "kl": 1e-3,
        "v": 2,
    }


def _train_vae(cfg: dict) -> dict:
    data = _digits()
    torch.manual_seed(0)
    vae = build_vae(block_out_channels=tuple(cfg["vae_channels"]))
    gen = torch.Generator().manual_seed(1)
    opt = torch.optim.AdamW(vae.parameters(), lr=2e-3)
    for _ in range(cfg["vae_steps"]):
        idx = torch.randint(0, N_TRAIN, (cfg["vae_batch"],), generator=gen)
        x = _random_shift(data["x"][idx], gen)
        post = vae.encode(x).latent_dist
        rec = vae.decode(post.mean + post.std * torch.randn(post.mean.shape, generator=gen)).sample
        loss = F.mse_loss(rec, x) + 1e-3 * post.kl().mean() / x[0].numel()
        opt.zero_grad()
        loss.backward()
        opt.step()
    vae.eval()
    with torch.no_grad():
        z = vae.encode(data["x"]).latent_dist.mean
        rec = vae.decode(vae.encode(data["x_held"]).latent_dist.mean).sample
    return {
        "state": {k: v.detach().clone() for k, v in vae.state_dict().items()},
        "shift": float(z.mean()),
        "scale": float(z.std()),
        "recon_mse_held": float(F.mse_loss(rec, data["x_held"])),
    }


def _vae(cfg: dict) -> tuple[nn.Module, dict]:
    rec = cached_object("ahpa-vae", _vae_config(cfg), lambda: _train_vae(cfg))
    vae = build_vae(block_out_channels=tuple(cfg["vae_channels"]))
    vae.load_state_dict(rec["state"])
    return vae.eval().requires_grad_(False), rec


# ------------------------------------------------------------------------------------------ one arm
def _evaluate(dit, decode, classifier, held_feats, cfg, seed) -> dict[str, float]:
    labels = torch.arange(cfg["n_samples"]) % 10
    imgs = sample_ode(
        dit,
        decode,
        labels,
        steps=cfg["ode_steps"],
        cfg_scale=cfg["cfg_scale"],
        generator=torch.Generator().manual_seed(seed + 4),
    )
    with torch.no_grad():
        imgs = imgs.clamp(-1, 1)
        feats = classifier.features(imgs)
        acc = float((classifier.head(feats).argmax(-1) == labels).float().mean())
    return {"fd": frechet_distance(feats, held_feats), "class_acc": acc}


def _held_loss(dit, z_held, y_held, seed) -> float:
    gen = torch.Generator().manual_seed(seed + 5)
    with torch.no_grad():
        out = ahpa_training_step(
            dit, None, None, None, {"z": z_held, "y": y_held}, label_dropout=0.0, generator=gen
        )
    return float(out["diffusion"])


def _train_arm(arm: str, prep: dict, cfg: dict, seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    dit = build_dit(hidden=cfg["hidden"], depth=cfg["depth"], heads=cfg["heads"])
    torch.manual_seed(seed + 1)
    aligner, targets_all = None, None
    if arm == "repa":
        targets_all = prep["repa_targets"]
        router = TimestepRouter(1, mode="single:0")
    elif arm != "vanilla":
        targets_all = prep["vae_targets"]
        router = TimestepRouter(
            len(VAE_LEVELS), mode=ROUTERS[arm], hidden=cfg["router_hidden"], t_embed_dim=cfg["router_embed"]
        )
    if targets_all is not None:
        aligner = AHPAAlignmentLoss(
            cfg["hidden"], [t.shape[-1] for t in targets_all], router, proj_hidden=cfg["proj_hidden"]
        )
    params = list(dit.parameters()) + (list(aligner.parameters()) if aligner is not None else [])
    opt = torch.optim.AdamW(params, lr=cfg["lr"])
    batch_gen = torch.Generator().manual_seed(seed + 2)
    noise_gen = torch.Generator().manual_seed(seed + 3)
    z_all, views = prep["z"], prep["z"].shape[0]
    curve = {"step": [], "fd": [], "class_acc": [], "held_loss": []}
    train_s = 0.0
    for step in range(1, cfg["steps"] + 1):
        t0 = time.process_time()
        idx = torch.randint(0, prep["y"].shape[0], (cfg["batch"],), generator=batch_gen)
        view = torch.randint(0, views, (cfg["batch"],), generator=batch_gen)
        batch = {"z": z_all[view, idx], "y": prep["y"][idx]}
        if targets_all is not None:
            batch["targets"] = [t[view, idx] for t in targets_all]
        out = ahpa_training_step(
            dit,
            None,
            aligner,
            None,
            batch,
            lam=cfg["lam"],
            align_block=cfg["align_block"],
            generator=noise_gen,
        )
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
        train_s += time.process_time() - t0
        if step % cfg["eval_every"] == 0 or step == cfg["steps"]:
            ev = _evaluate(dit, prep["decode"], prep["classifier"], prep["held_feats"], cfg, seed)
            curve["step"].append(step)
            curve["fd"].append(ev["fd"])
            curve["class_acc"].append(ev["class_acc"])
            curve["held_loss"].append(_held_loss(dit, prep["z_held"], prep["y_held"], seed))
    t0 = time.process_time()
    sample_ode(
        dit, None, torch.arange(50) % 10, steps=cfg["ode_steps"], generator=torch.Generator().manual_seed(0)
    )
    sample_s = time.process_time() - t0
    rec: dict[str, Any] = {
        "curve": curve,
        "train_s": train_s,
        "sample_s": sample_s,
        "dit_params": count_parameters(dit),
        "aux_params": count_parameters(aligner) if aligner is not None else 0,
    }
    if arm == METHOD:
        t = torch.linspace(0, 1, 21)
        with torch.no_grad():
            rec["router_t"] = t.tolist()
            rec["router_weights"] = aligner.router(t).T.tolist()  # (L, 21)
            learned = torch.softmax(aligner.router.logits(t), -1)  # the learned part without the prior bias
        pos = torch.arange(len(VAE_LEVELS), dtype=torch.float32)
        mean_level = (learned * pos).sum(-1)
        rec["router_learned_shift"] = float(mean_level[t >= 0.8].mean() - mean_level[t <= 0.2].mean())
    return rec


_PREPARED: dict[str, dict[str, Any]] = {}  # per-process memo: seeds of one run share the frozen features


def _prepare(cfg: dict) -> dict[str, Any]:
    keys = (
        "n_train",
        "vae_channels",
        "vae_steps",
        "vae_batch",
        "cls_steps",
        "cls_batch",
        "repa_encoder",
        "repa_steps",
        "views",
        "n_samples",
    )
    key = json.dumps({k: cfg.get(k) for k in keys}, sort_keys=True)
    if key not in _PREPARED:
        _PREPARED.clear()  # keep at most one set of features in memory
        _PREPARED[key] = _prepare_uncached(cfg)
    return _PREPARED[key]


def _prepare_uncached(cfg: dict) -> dict[str, Any]:
    data = _digits(cfg.get("n_train", N_TRAIN))  # the smoke profile trains on a prefix of the split
    n_train = data["y"].shape[0]
    vae, vrec = _vae(cfg)
    classifier = _cnn(cfg, 1000)
    repa_kind = cfg.get("repa_encoder", "vit")
    repa_net = _cnn(cfg, 2000, repa_kind)
    shift, scale = vrec["shift"], vrec["scale"]
    views = _shift_views(data["x"], cfg["views"])  # (V, n, 1, 16, 16)
    flat = views.reshape(-1, *views.shape[2:])
    with HierarchicalFeatureExtractor(vae.encoder, VAE_LEVELS, (4, 4)) as ex, torch.no_grad():
        vae_targets = ex.extract(flat)
        z = torch.cat([vae.encode(flat[i : i + 512]).latent_dist.mean for i in range(0, len(flat), 512)])
        z_held = vae.encode(data["x_held"]).latent_dist.mean
    with HierarchicalFeatureExtractor(repa_net, REPA_LEVELS[repa_kind], (4, 4)) as ex:
        repa_targets = ex.extract(flat)
    with torch.no_grad():
        repa_acc = float((repa_net(data["x_held"]).argmax(-1) == data["y_held"]).float().mean())
    V = views.shape[0]
    with torch.no_grad():
        held_feats = classifier.features(data["x_held"])
        held_acc = float((classifier.head(held_feats).argmax(-1) == data["y_held"]).float().mean())
        real = classifier.features(data["x"][: cfg["n_samples"]])
    return {
        "z": ((z - shift) / scale).reshape(V, n_train, *z.shape[1:]),
        "vae_targets": [t.reshape(V, n_train, *t.shape[1:]) for t in vae_targets],
        "repa_targets": [t.reshape(V, n_train, *t.shape[1:]) for t in repa_targets],
        "y": data["y"],
        "z_held": (z_held - shift) / scale,
        "y_held": data["y_held"],
        "decode": lambda lat: vae.decode(lat * scale + shift).sample,
        "classifier": classifier,
        "held_feats": held_feats,
        "classifier_acc": held_acc,
        "repa_encoder": {
            "kind": repa_kind,
            "class": f"{type(repa_net.vit if repa_kind == 'vit' else repa_net).__module__}."
            f"{type(repa_net.vit if repa_kind == 'vit' else repa_net).__qualname__}",
            "params": count_parameters(repa_net),
            "held_acc": repa_acc,
            "target_dim": int(repa_targets[0].shape[-1]),
        },
        "fd_real": frechet_distance(real, held_feats),
        "vae_recon_mse": vrec["recon_mse_held"],
    }


def run(config: dict[str, Any], seed: int) -> SeedResult:
    """One seed: prepare the frozen parts (cached), train every arm at the same budget, evaluate."""
    return _run(config, seed)


def _run(cfg: dict, seed: int) -> SeedResult:
    prep = _prepare(cfg)
    recs = {arm: _train_arm(arm, prep, cfg, seed) for arm in TRAINED}
    van = recs["vanilla"]["curve"]
    target = cfg["target_factor"] * van["fd"][-1]
    miss = cfg["steps"] + cfg["eval_every"]

    def steps_to(curve):
        return float(next((s for s, f in zip(curve["step"], curve["fd"]) if f <= target), miss))

    metrics = {
        "fd_final": {a: r["curve"]["fd"][-1] for a, r in recs.items()},
        "fd_auc": {a: float(np.mean(r["curve"]["fd"])) for a, r in recs.items()},
        "class_acc": {a: r["curve"]["class_acc"][-1] for a, r in recs.items()},
        "held_loss": {a: r["curve"]["held_loss"][-1] for a, r in recs.items()},
        "steps_to_target": {a: steps_to(r["curve"]) for a, r in recs.items()},
        "fd_gain": {"vanilla": van["fd"][0] / max(van["fd"][-1], 1e-12)},
        "headroom": {"vanilla": van["fd"][-1] / max(prep["fd_real"], 1e-12)},
        "classifier_acc": {"classifier": prep["classifier_acc"]},
        "router_learned_shift": {METHOD: recs[METHOD]["router_learned_shift"]},
        "inference_params_ratio": {METHOD: recs[METHOD]["dit_params"] / recs["vanilla"]["dit_params"]},
    }
    curves = {
        "fd": {a: r["curve"]["fd"] for a, r in recs.items()},
        "class_acc": {a: r["curve"]["class_acc"] for a, r in recs.items()},
        "steps": {a: [float(s) for s in r["curve"]["step"]] for a, r in recs.items()},
        **{f"router_level{i}": {METHOD: w} for i, w in enumerate(recs[METHOD]["router_weights"])},
        "router_t": {METHOD: recs[METHOD]["router_t"]},
    }
    van_s = recs["vanilla"]["train_s"] / cfg["steps"]
    info = {
        "budget": {
            a: {
                "steps": cfg["steps"],
                "batch": cfg["batch"],
                "lr": cfg["lr"],
                "lr_grid": [cfg["lr"]],
                "dit_params": r["dit_params"],
                "aux_params": r["aux_params"],
            }
            for a, r in recs.items()
        },
        "perf": {
            a: {
                "train_images_per_s": cfg["batch"] * cfg["steps"] / r["train_s"],
                "step_overhead_vs_vanilla": r["train_s"] / cfg["steps"] / van_s - 1.0,
                "sample_s_50": r["sample_s"],
            }
            for a, r in recs.items()
        },
        "fd_real_floor": prep["fd_real"],
        "fd_target": target,
        "vae_recon_mse_held": prep["vae_recon_mse"],
        "repa_encoder": prep["repa_encoder"],
        "curves_held_loss": {a: r["curve"]["held_loss"] for a, r in recs.items()},
    }
    return SeedResult(metrics=metrics, curves=curves, info=info)


def plot(result: dict, folder: Path) -> list[Path]:
    """FD-digits over training per arm (seed mean) and the learned router's r(t) (first seed)."""
    plt = pyplot()
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    curves = result["curves"]
    for arm in TRAINED:
        fd = np.mean(np.array(curves["fd"][arm], dtype=float), axis=0)
        ax[0].plot(curves["steps"][arm][0], fd, marker="o", label=arm)
    ax[0].set_xlabel("DiT step")
    ax[0].set_ylabel("FD-digits (lower is better)")
    ax[0].legend(fontsize=7)
    t = curves["router_t"][METHOD][0]
    for i, name in enumerate(VAE_LEVELS):
        ax[1].plot(t, curves[f"router_level{i}"][METHOD][0], label=f"level {i}: {name}")
    ax[1].set_xlabel("t (1 = pure noise)")
    ax[1].set_ylabel("router weight r_l(t)")
    ax[1].legend(fontsize=7)
    return [save_figure(fig, folder, "ahpa_fd_router", dpi=100)]


_COMMON = {
    "threads": 1,
    "lam": 0.5,
    "lr": 5e-4,
    "heads": 4,
    "align_block": 1,
    "proj_hidden": 128,
    "router_hidden": 64,
    "router_embed": 64,
    "cfg_scale": 1.5,
    "target_factor": 1.1,
    "vae_channels": [16, 32, 32],
    "vae_steps": 200,
    "vae_batch": 32,
    "cls_steps": 200,
    "cls_batch": 64,
    "repa_encoder": "vit",  # REPA's external encoder: timm ViT ("cnn": the earlier digit-CNN stand-in)
    "repa_steps": 1000,  # the ViT's classifier steps (batch cls_batch): 400 -> 80%, 800 -> 91%, 1200 -> 94% held out
    "hidden": 64,
    "depth": 4,
}


def _lower(metric: str, baseline: str, label: str) -> Better:
    return Better(metric, baseline=baseline, margin=0.0, higher_is_better=False, min_seeds=3, label=label)


CLAIM = Claim(
    slug="ahpa",
    claim=(
        "Aligning an early DiT block to multi-level frozen-VAE-encoder features, weighted per timestep by a "
        "learned router, gives lower FD and faster convergence than a vanilla DiT, REPA-style single-target "
        "alignment and timestep-agnostic multi-level alignment at the same step budget, with no inference cost."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        AtLeast("fd_gain", threshold=1.1, arm="vanilla", min_seeds=1, label="vanilla_learns"),
        AtLeast("headroom", threshold=1.5, arm="vanilla", min_seeds=1, label="not_at_ceiling"),
        AtLeast("classifier_acc", threshold=0.97, arm="classifier", min_seeds=1, label="classifier_accurate"),
    ),
    criteria=(
        _lower("fd_final", "vanilla", "fd_vs_vanilla"),
        _lower("fd_final", "repa", "fd_vs_repa"),
        _lower("fd_final", "single_level", "fd_vs_single_level"),
        _lower("fd_final", "uniform", "fd_vs_uniform"),
        _lower("fd_auc", "vanilla", "convergence_vs_vanilla"),
        _lower("fd_auc", "repa", "convergence_vs_repa"),
        # reached only at the last evaluated step of the full profile (320) or never (320 + eval_every 80): a
        # tie there is the horizon, not evidence either way (issue 32 item 2; rule version 3 screens sentinels)
        Better(
            "steps_to_target",
            baseline="vanilla",
            margin=0.0,
            higher_is_better=False,
            min_seeds=3,
            sentinels=(320, 400),
            label="steps_vs_vanilla",
        ),
        Better("class_acc", baseline="vanilla", margin=0.0, min_seeds=3, label="class_acc_vs_vanilla"),
        AtLeast("router_learned_shift", threshold=0.05, min_seeds=3, label="router_snr_order"),
        Exact("inference_params_ratio", expected=1.0, label="no_inference_cost"),
    ),
    headlines=(
        Headline(
            "AHPA improves convergence and generation quality over baselines (vanilla SiT, REPA, SRA)",
            criteria=(
                "fd_vs_vanilla",
                "fd_vs_repa",
                "fd_vs_single_level",
                "convergence_vs_vanilla",
                "convergence_vs_repa",
                "steps_vs_vanilla",
                "class_acc_vs_vanilla",
            ),
        ),
        Headline(
            "Timestep-agnostic (static single-level) alignment is suboptimal; routing the granularity with the "
            "SNR (coarse at high noise, fine at low noise) is better",
            criteria=("fd_vs_uniform", "fd_vs_single_level", "router_snr_order"),
        ),
        Headline("AHPA incurs no additional inference cost", criteria=("no_inference_cost",)),
        Headline(
            "AHPA avoids external encoder supervision during training",
            criteria=("fd_vs_repa", "convergence_vs_repa"),
        ),
        Headline(
            "SRA (self-representation alignment) as a baseline",
            untested="not implemented here (needs an EMA teacher DiT; out of the CPU budget)",
        ),
        Headline(
            "REPA: >17.5x faster SiT training and FID 1.42 on ImageNet 256 (context from the baseline paper)",
            untested="no ImageNet, no DINOv2 and no Inception weights offline; CPU-scale digits only",
        ),
    ),
    items={"class_acc": {"smoke": 20, "quick": 100, "full": 300}},
    run=run,
    configs={
        "smoke": {
            **_COMMON,
            "n_train": 64,
            "vae_steps": 4,
            "cls_steps": 4,
            "repa_steps": 4,
            "views": 1,
            "hidden": 32,
            "depth": 2,
            "batch": 16,
            "steps": 4,
            "eval_every": 2,
            "n_samples": 20,
            "ode_steps": 2,
            "router_hidden": 16,
            "router_embed": 16,
            "proj_hidden": 32,
        },
        "quick": {
            **_COMMON,
            "views": 1,
            "batch": 32,
            "steps": 100,
            "eval_every": 50,
            "n_samples": 100,
            "ode_steps": 10,
        },
        "full": {
            **_COMMON,
            "views": 9,
            "batch": 64,
            "steps": 320,
            "eval_every": 80,
            "n_samples": 300,
            "ode_steps": 15,
        },
    },
    seeds={"smoke": (0,), "quick": (0,), "full": (0, 1, 2)},
    implemented=(
        "neurips26.vision.ahpa: HierarchicalFeatureExtractor (forward hooks on a frozen encoder, levels "
        "resampled to the DiT token grid, no grad, hooks removable), TimestepRouter (learned MLP on the "
        "sinusoidal t embedding + optional SNR prior bias; fixed_snr / uniform / single:<l>; top-k), "
        "AHPAAlignmentLoss (MLP projectors d -> h -> h -> C_l with SiLU, per-level negative patch cosine, routed "
        "with detached weights; router objective on EMA-standardised detached losses with an entropy bonus), "
        "ahpa_training_step (SiT interpolant, velocity loss, one label drop per sample, L_diff + lambda "
        "(L_align + L_router)), sample_ode (diffusers FlowMatchEulerDiscreteScheduler Euler ODE with CFG; only "
        "the DiT runs). DiT: diffusers DiTTransformer2DModel (patch 1 on the 4x4x4 latent, 16 tokens, adaLN-Zero, "
        "class-conditional), hidden state after block 1 by a forward hook. VAE: diffusers AutoencoderKL from config "
        "(levels: down_blocks.0.resnets.0 16x16, down_blocks.0 8x8, down_blocks.1 4x4, mid_block 4x4 pre-latent). "
        "All alignment arms share lambda 0.5, the projector shape and the optimiser."
    ),
    differences=(
        "REPA's external encoder (DINOv2 ViT-B/14, self-supervised on LVD-142M) is a small timm VisionTransformer "
        "(timm.create_model('vit_tiny_patch16_224', pretrained=False) at 16x16x1, patch 4, d = 64, depth 4, class "
        "token, DINOv2's token layout) trained here as a supervised digit classifier with the evaluation CNN's "
        "recipe but 1,000 instead of 200 steps of batch 64 (seed 2000; a ViT learns slower: 62% held-out accuracy "
        "after 200 steps, 91% after 800, measured before any AHPA run with it); its final normed patch tokens (64 x 4x4) are the single fixed "
        "target, as REPA aligns to DINOv2's patch tokens. What remains simplified: a tiny supervised ViT on the "
        "same 1,500 digits instead of a large self-supervised one on web images; it is trained on the data the "
        "FD extractor is trained on, which favours REPA (at scale DINOv2 and Inception are also both ImageNet-"
        "family encoders). Until issue 34 the REPA target was a second digit CNN (seed 2000, the evaluation "
        "CNN's architecture, 8x8 conv map), still selectable with repa_encoder = 'cnn'. FID is "
        "replaced by FD-digits (Frechet distance of the evaluation CNN's penultimate 128-d features of decoded "
        "samples vs the 297 held-out digits): no Inception weights offline. The VAE is smaller than the spec's "
        "(channels 16/32/32 instead of 32/64/64, 200 steps of batch 32 instead of 1,500) and the DiT is far "
        "smaller and shorter-trained than the spec's: d = 64 (spec 96), depth 4, batch 32 (quick) / 64 (full), "
        "100 / 320 steps per arm (spec 300 / 3,000 with batch 128), block k = 1, projector hidden 128, router MLP "
        "hidden 64, to fit 5 arms x 3 seeds into 10 CPU minutes. Evaluation: quick 2 points x 100 samples x 10 "
        "Euler steps, full 4 points x 300 samples x 15 steps (spec every 500 steps, 1,000 samples, 25 steps). "
        "The router rule (EMA-standardised losses, entropy 1e-2, SNR prior bias scale 2) is the spec's inferred "
        "rule, not the paper's (unpublished). Latents are the posterior mean, standardised by one scalar "
        "shift/scale. Quick uses only unshifted images; full pre-extracts latents and targets for all 9 +-1 px "
        "shifts (the official recipe caches VAE "
        "features). SRA and the MNIST setting of the issue are not run."
    ),
    data=(
        "scikit-learn load_digits (1,797 8x8 digits) upsampled bilinearly to 16x16 and scaled to [-1, 1]; a fixed "
        "stratified split of 1,500 training and 297 held-out digits shared by all seeds."
    ),
    plot=plot,
    glossary={
        "fd_final": "FD-digits after the last step: Frechet distance between the evaluation CNN's penultimate "
        "features of n_samples class-balanced samples (Euler ODE, CFG 1.5, decoded by the frozen VAE, clamped "
        "to [-1, 1]) and of the 297 held-out digits",
        "fd_auc": "mean FD-digits over the evaluation points (every eval_every steps): lower = faster convergence",
        "class_acc": "fraction of the final samples that the evaluation CNN labels with the conditioning class",
        "held_loss": "velocity MSE of the final DiT on the held-out latents (fixed t and noise per seed)",
        "steps_to_target": "first evaluated step whose FD-digits <= 1.1 x vanilla's final FD of the same seed "
        "(steps + eval_every when never reached)",
        "fd_gain": "vanilla's FD-digits at the first evaluation / at the last",
        "headroom": "vanilla's final FD-digits / FD-digits of n_samples real training digits vs held-out",
        "classifier_acc": "held-out accuracy of the evaluation CNN",
        "router_learned_shift": "mean level index (0 = finest) under softmax of the router's learned logits "
        "alone (SNR prior bias removed), averaged over t >= 0.8 minus over t <= 0.2; > 0 means the training "
        "moved weight to coarser levels at high noise",
        "inference_params_ratio": "parameters of the DiT used for sampling, AHPA arm / vanilla arm",
    },
)

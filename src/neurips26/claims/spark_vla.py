"""Claim check for SPARK-VLA (spatial attention distillation from a frozen 3-D expert into a LoRA branch).

Generated ``TabletopScenes`` (spheres/cubes on a gridded table, pinhole camera); instruction "reach
<colour> <shape>", action = the referenced object's normalised 3-D position, success = error < 0.15.
Per seed: a generic 2-D timm ViT is pre-trained on dense 2-D recognition (per-patch colour/shape presence) and a
same-size RGB-D 3-D expert ViT (image + rendered depth map) on per-patch depth and point maps (both cached). Then
every arm trains the same small causal language-model policy (``LanguagePolicy``: a transformers Llama from config,
over the instruction words and the visual tokens; same init, batches, steps, lr) on a low-data demonstration set:

- ``spark``: frozen base (2-D path) + peft LoRA path distilled to the expert's attention + gradient-supervised
  router (keep 25% of 2N tokens);
- ``two_d_only``: frozen base, all N tokens, no branch, no router;
- ``implicit_align``: Spatial-Forcing-style, the single backbone is fine-tuned with the action loss + 0.5 x
  cosine alignment of its layer-L/2 tokens (through BN + 2-layer MLP) to the expert's tokens;
- ``explicit_depth``: frozen base tokens + a trained linear embedding of the depth patches (RGB-D tokens),
  evaluated on clean depth and (``explicit_depth_corrupt``) on depth with noise and 30% dropped pixels;
- ablations (full profile, seed 0 only, in ``info["ablations"]``): ``spark_no_route_sup`` (straight-through
  only), ``spark_no_distill``; ``spark_no_router`` (all 2N tokens) runs in every profile and seed for the
  router-efficiency criterion.

Frozen parts (the base's 2-D tokens, the expert's tokens and attention) are computed once per training image
and fed to every arm (the spec's offline-expert path, tested equal to the online path).
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Headline, SeedResult, Within
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.cache import cached_object
from neurips26.robotics.spark_vla import (
    AttentionDistillationLoss,
    ExpertAttention,
    KnowledgeRouter,
    LanguagePolicy,
    SparkVLA,
    SpatialLoRABranch,
    TabletopScenes,
    build_vit,
    patch_tokens,
    rgbd,
)

METHOD = "spark"
BASELINES = ("two_d_only", "implicit_align", "explicit_depth")
ABLATIONS = ("spark_no_route_sup", "spark_no_distill")  # full profile, one seed, reported in info
REFERENCES = ("explicit_depth_corrupt", "mean_action", "expert", "spark_no_router")
SUCCESS_RADIUS = 0.15
PAPER_TRAINABLE_RATIO = 50e6 / 0.5e9


# ------------------------------------------------------------------------------------------ pre-training
def _vit(cfg: dict, channels: int = 3) -> nn.Module:
    """timm ViT of the testbed: the 2-D backbone reads RGB (3 channels), the 3-D expert RGB-D (4)."""
    return build_vit(cfg["image_size"], cfg["patch"], cfg["dim"], cfg["layers"], cfg["heads"], channels)


def _patch_targets(scenes: dict, patch: int) -> torch.Tensor:
    """Per-patch (depth, x, y) means, normalised: (B, N, 3)."""
    d = F.avg_pool2d(scenes["depth"][:, None], patch).flatten(2).transpose(1, 2)
    p = F.avg_pool2d(scenes["points"][:, :2], patch).flatten(2).transpose(1, 2)
    return torch.cat([(d - 5.0) / 2.0, p / 3.0], dim=-1)


def _patch_labels(scenes: dict, patch: int) -> torch.Tensor:
    """Per-patch 2-D recognition labels: which of the 5 colours and 2 shapes appear in each patch, (B, N, 7)."""
    ids = scenes["ids"]
    onehot = torch.stack(
        [(ids >= 0) & (ids // 2 == c) for c in range(5)] + [(ids >= 0) & (ids % 2 == k) for k in range(2)], 1
    )
    return F.max_pool2d(onehot.float(), patch).flatten(2).transpose(1, 2)


def _pretrain(cfg: dict, seed: int, kind: str) -> dict:
    """``kind="backbone"``: per-patch colour/shape presence (BCE, dense 2-D recognition); ``"expert"``: per-patch
    depth/points (MSE)."""
    torch.manual_seed(100 + seed if kind == "backbone" else 200 + seed)
    data = TabletopScenes(cfg["n_pretrain"], cfg["image_size"], seed=10_000 + seed)
    channels = 3 if kind == "backbone" else 4
    vit = _vit(cfg, channels)
    inputs = data["rgb"] if kind == "backbone" else rgbd(data["rgb"], data["depth"])
    head = nn.Linear(cfg["dim"], 7 if kind == "backbone" else 3)
    opt = torch.optim.AdamW([*vit.parameters(), *head.parameters()], lr=cfg["pre_lr"])
    gen = torch.Generator().manual_seed(seed)
    targets = _patch_labels(data, cfg["patch"]) if kind == "backbone" else _patch_targets(data, cfg["patch"])
    for _ in range(cfg["pre_steps"]):
        idx = torch.randint(0, len(data["rgb"]), (cfg["batch"],), generator=gen)
        tok = patch_tokens(vit, inputs[idx])
        if kind == "backbone":
            loss = F.binary_cross_entropy_with_logits(head(tok), targets[idx])
        else:
            loss = F.mse_loss(head(tok), targets[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {"vit": vit.state_dict(), "head": head.state_dict()}


def _load(cfg: dict, seed: int, kind: str) -> tuple[nn.Module, nn.Module]:
    keys = ("image_size", "patch", "dim", "layers", "heads", "n_pretrain", "pre_steps", "pre_lr", "batch")
    state = cached_object(
        f"spark_vla-{kind}",
        {**{k: cfg[k] for k in keys}, "seed": seed, "v": 3, "arch": "timm-vit", "expert_input": "rgbd"},
        lambda: _pretrain(cfg, seed, kind),
    )
    vit = _vit(cfg, 3 if kind == "backbone" else 4)
    vit.load_state_dict(state["vit"])
    head = nn.Linear(cfg["dim"], 7 if kind == "backbone" else 3)
    head.load_state_dict(state["head"])
    for p in [*vit.parameters(), *head.parameters()]:
        p.requires_grad_(False)
    return vit.eval(), head


def _expert_depth_r2(expert: nn.Module, head: nn.Module, test: dict, patch: int) -> float:
    """R^2 of the expert's per-patch depth on test scenes against the per-position mean (chance = 0).

    The chance predictor knows each patch's mean depth over the test scenes (table geometry), so only depth
    read from the scene's content (object placement) counts.
    """
    with torch.no_grad():
        pred = head(patch_tokens(expert, rgbd(test["rgb"], test["depth"])))[..., 0]
    true = _patch_targets(test, patch)[..., 0]
    chance = true.mean(0, keepdim=True)
    return float(1 - F.mse_loss(pred, true) / F.mse_loss(chance.expand_as(true), true))


def _probe_acc(vit: nn.Module, train: dict, test: dict) -> float:
    """2-D retention: linear probe (logistic regression per label) on mean-pooled tokens -> presence accuracy."""
    from sklearn.linear_model import LogisticRegression

    with torch.no_grad():
        ftr = patch_tokens(vit, train["rgb"]).mean(1).numpy()
        fte = patch_tokens(vit, test["rgb"]).mean(1).numpy()
    accs = []
    for j in range(7):
        y = train["presence"][:, j].numpy()
        clf = LogisticRegression(max_iter=500).fit(ftr, y)
        accs.append(float((clf.predict(fte) == test["presence"][:, j].numpy()).mean()))
    return float(np.mean(accs))


# ------------------------------------------------------------------------------------------------- arms
class _TwoD(nn.Module):
    """2-D-only VLA, explicit-depth VLA (``depth=True``) or implicit alignment (``align=True``)."""

    def __init__(self, vit, policy, patch: int, depth: bool = False, expert=None, align_weight: float = 0.0):
        super().__init__()
        self.vit, self.policy, self.patch = vit, policy, patch
        self.depth_embed = nn.Linear(patch * patch, vit.embed_dim) if depth else None
        self.expert = [expert]
        self.align_weight = align_weight
        d = vit.embed_dim
        self.align = (
            nn.Sequential(nn.BatchNorm1d(d), nn.Linear(d, d), nn.GELU(), nn.Linear(d, d))
            if align_weight
            else None
        )

    def _tokens(self, rgb, depth=None, cached=None):
        mid = None
        if cached is not None and self.align is None:  # frozen backbone: precomputed tokens are exact
            tok = cached
        elif self.align is None:
            tok = patch_tokens(self.vit, rgb)
        else:  # the aligned layer: output of block L/2 (patch tokens, before the final norm)
            out, (mid,) = self.vit.forward_intermediates(
                rgb, indices=[len(self.vit.blocks) // 2 - 1], norm=False, output_fmt="NLC"
            )
            tok = out[:, self.vit.num_prefix_tokens :]
        if self.depth_embed is not None:
            patches = F.unfold(((depth - 5.0) / 2.0)[:, None], self.patch, stride=self.patch).transpose(1, 2)
            tok = tok + self.depth_embed(patches)
        return tok, mid

    def _act(self, tok, instruction):
        pos = torch.arange(tok.shape[1]).expand(tok.shape[0], -1)
        return self.policy(instruction, tok, pos)

    def training_step(self, batch):
        tok, mid = self._tokens(batch["rgb"], batch["depth"], batch.get("tokens_2d"))
        loss = F.l1_loss(self._act(tok, batch["instruction"]), batch["action"])
        align = loss.new_zeros(())
        if self.align is not None:
            target = batch["expert_tokens"]
            b, n, d = mid.shape
            proj = self.align(mid.reshape(b * n, d)).reshape(b, n, d)
            align = (1 - F.cosine_similarity(proj, target, dim=-1)).mean()
        return {"loss": loss + self.align_weight * align, "action": loss.detach(), "align": align.detach()}

    @torch.no_grad()
    def predict(self, batch, depth=None):
        tok, _ = self._tokens(batch["rgb"], batch["depth"] if depth is None else depth)
        return self._act(tok, batch["instruction"])

    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


def _corrupt(depth: torch.Tensor, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    noisy = depth + 0.5 * torch.randn(depth.shape, generator=g)
    drop = torch.rand(depth.shape, generator=g) < 0.3
    return torch.where(drop, torch.zeros_like(depth), noisy)


def _build(arm: str, cfg: dict, base: nn.Module, expert: nn.Module, seed: int) -> nn.Module:
    torch.manual_seed(seed)  # same policy init for every arm
    n = (cfg["image_size"] // cfg["patch"]) ** 2
    policy = LanguagePolicy(
        cfg["dim"], 2 * n, dim=cfg["dim"], layers=cfg["policy_layers"], heads=cfg["heads"]
    )
    if arm in ("two_d_only", "explicit_depth"):
        return _TwoD(copy.deepcopy(base), policy, cfg["patch"], depth=arm == "explicit_depth")
    if arm == "implicit_align":
        vit = copy.deepcopy(base).train()
        for p in vit.parameters():
            p.requires_grad_(True)
        return _TwoD(vit, policy, cfg["patch"], expert=expert, align_weight=cfg["align_weight"])
    from peft import LoraConfig

    last = _last_attn(cfg)
    lora = LoraConfig(
        r=cfg["lora_r"],
        lora_alpha=2 * cfg["lora_r"],
        lora_dropout=0.05,
        target_modules=LORA_TARGETS,
    )
    branch = SpatialLoRABranch(copy.deepcopy(base), lora, last)
    distill = (
        None
        if arm == "spark_no_distill"
        else AttentionDistillationLoss(list(zip(last, last)), cfg["heads"], cfg["heads"])
    )
    return SparkVLA(
        branch,
        KnowledgeRouter(cfg["dim"], cfg["keep_ratio"], cond_dim=cfg["dim"]),
        policy,
        None if distill is None else ExpertAttention(expert, last),
        distill,
        lambda_srd=cfg["lambda_srd"],
        lambda_route=cfg["lambda_route"],
        use_router=arm != "spark_no_router",
        route_supervision=arm != "spark_no_route_sup",
    )


def _last_attn(cfg: dict) -> list[str]:
    """The distilled layer pairs: the last 2 attention modules of student and expert."""
    return [f"blocks.{i}.attn" for i in range(cfg["layers"] - 2, cfg["layers"])]


LORA_TARGETS = r".*blocks\.\d+\.attn\.(qkv|proj)"  # timm's fused q/k/v and output projection, every layer


def _predict(model, batch, depth=None):
    if isinstance(model, SparkVLA):
        return model.predict_action(batch["rgb"], batch["instruction"])
    return model.predict(batch, depth)


def _evaluate(pred: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
    err = (pred - target).norm(dim=-1)
    return {
        "success": float((err < SUCCESS_RADIUS).float().mean()),
        "success_loose": float((err < 2 * SUCCESS_RADIUS).float().mean()),
        "err3d": float(err.mean()),
        "depth_err": float((pred[:, 2] - target[:, 2]).abs().mean()),
    }


def _batch(train: dict, attn: dict, idx: torch.Tensor) -> dict:
    batch = {k: v[idx] for k, v in train.items()}
    batch["expert_attn"] = {k: v[idx] for k, v in attn.items()}
    return batch


def _train_arm(arm, cfg, base, expert, train, attn, test, seed):
    model = _build(arm, cfg, base, expert, seed)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg["lr"])
    gen = torch.Generator().manual_seed(seed + 7)  # same batches for every arm
    t0 = time.perf_counter()
    model.train()
    for _ in range(cfg["steps"]):
        idx = torch.randint(0, len(train["rgb"]), (cfg["batch"],), generator=gen)
        out = model.training_step(_batch(train, attn, idx))
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
    train_s = time.perf_counter() - t0
    model.eval()
    rows = {arm: _evaluate(_predict(model, test), test["action"])}
    if arm == "explicit_depth":
        rows["explicit_depth_corrupt"] = _evaluate(
            _predict(model, test, _corrupt(test["depth"], seed + 99)), test["action"]
        )
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    budget = {
        "steps": cfg["steps"],
        "batch": cfg["batch"],
        "lr_grid": [cfg["lr"]],
        "trainable": sum(p.numel() for p in params),
        "frozen_in_model": frozen,
        "train_s": round(train_s, 2),
    }
    return model, rows, budget


# ------------------------------------------------------------------------------------------------- run
def run(config: dict, seed: int) -> SeedResult:
    """One seed: pre-train (cached) backbone and expert, train every arm, evaluate on held-out scenes."""
    return _run(config, seed)


def _run(cfg: dict, seed: int) -> SeedResult:
    t0 = time.perf_counter()
    base, _ = _load(cfg, seed, "backbone")
    expert, ehead = _load(cfg, seed, "expert")
    pre_s = time.perf_counter() - t0
    train = TabletopScenes(cfg["n_train"], cfg["image_size"], cfg["max_objects"], seed=20_000 + seed)
    test = TabletopScenes(cfg["n_test"], cfg["image_size"], cfg["max_objects"], seed=30_000 + seed)
    probe_train = TabletopScenes(cfg["n_probe"], cfg["image_size"], cfg["max_objects"], seed=40_000 + seed)
    rows: dict[str, dict[str, float]] = {}
    budget, tokens, models = {}, {}, {}
    last = _last_attn(cfg)
    with torch.no_grad():  # frozen parts run once per image (the spec's offline-expert path)
        train["tokens_2d"] = patch_tokens(base, train["rgb"])
        train["expert_tokens"] = patch_tokens(expert, rgbd(train["rgb"], train["depth"]))
        attn = ExpertAttention(expert, last)(train["rgb"], train["depth"])
    mean = train["action"].mean(0, keepdim=True).expand_as(test["action"])
    rows["mean_action"] = _evaluate(mean, test["action"])
    n = (cfg["image_size"] // cfg["patch"]) ** 2
    ablations = cfg["ablations"] if seed == cfg["ablation_seed"] else []
    for arm in [*cfg["arms"], *ablations]:
        model, arm_rows, budget[arm] = _train_arm(arm, cfg, base, expert, train, attn, test, seed)
        rows.update(arm_rows)
        models[arm] = model
        if isinstance(model, SparkVLA):
            tokens[arm] = model.router.budget(2 * n) if model.use_router else 2 * n
        else:
            tokens[arm] = n
    probe_before = _probe_acc(base, probe_train, test)
    drop = {}
    for arm in ("spark", "implicit_align"):
        m = models[arm]
        vit = m.visual if isinstance(m, SparkVLA) else m.vit
        if isinstance(m, SparkVLA):
            with vit.peft.disable_adapter():  # the 2-D path SPARK forwards
                after = _probe_acc(vit.base, probe_train, test)
        else:
            after = _probe_acc(vit.eval(), probe_train, test)
        drop[arm] = probe_before - after
    arms_eval = [a for a in rows if a not in ablations]
    metrics = {
        key: {a: rows[a][key] for a in arms_eval}
        for key in ("success", "success_loose", "err3d", "depth_err")
    }
    metrics["expert_depth_r2"] = {"expert": _expert_depth_r2(expert, ehead, test, cfg["patch"])}
    metrics["probe_drop"] = drop
    metrics["tokens_forwarded"] = {a: float(t) for a, t in tokens.items() if a not in ablations}
    metrics["token_fraction"] = {"spark": tokens["spark"] / (2 * n)}
    spark = models["spark"]
    base_params = sum(p.numel() for p in base.parameters())
    trainable = spark.trainable_parameters()
    metrics["trainable_fraction"] = {"spark": trainable / (trainable + base_params)}
    info = {
        "budget": budget,
        "probe_acc_before": probe_before,
        "pretrain_s": round(pre_s, 2),
        "candidates_2n": 2 * n,
        "performance": {
            "spark_trainable_params": trainable,
            "frozen_base_vit_params": base_params,
            "trainable_fraction": trainable / (trainable + base_params),
            "paper_trainable_ratio_50M_over_0.5B": PAPER_TRAINABLE_RATIO,
            "note": "our policy is trained from scratch (no pre-trained LM), so its parameters count as trainable; "
            "the paper's 0.5B LM is a frozen/adapted pre-trained backbone",
        },
        "per_arm": rows,
        "ablations": {a: {**rows[a], "tokens_forwarded": float(tokens[a])} for a in ablations},
    }
    return SeedResult(metrics=metrics, info=info)


def plot(result: dict, folder: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for j, key in enumerate(("success", "depth_err")):
        arms = list(result["metrics"][key])
        ax[j].bar(
            range(len(arms)),
            [np.mean(result["metrics"][key][a]) for a in arms],
            yerr=[np.std(result["metrics"][key][a]) for a in arms],
        )
        ax[j].set_xticks(range(len(arms)), arms, rotation=40, ha="right", fontsize=7)
        ax[j].set_ylabel(key)
    fig.tight_layout()
    return [save_figure(fig, folder, "spark_vla_success", dpi=100)]


_COMMON = {
    "max_objects": 2,
    "ablations": [],
    "ablation_seed": 0,
    "patch": 4,
    "dim": 64,
    "layers": 4,
    "heads": 4,
    "policy_layers": 2,
    "batch": 32,
    "lr": 1e-3,
    "pre_lr": 1e-3,
    "lora_r": 8,
    "keep_ratio": 0.25,
    "lambda_srd": 0.5,
    "lambda_route": 0.1,
    "align_weight": 0.5,
    "n_probe": 300,
    "threads": 1,
}
_MAIN = ["spark", "two_d_only", "implicit_align", "explicit_depth", "spark_no_router"]
_ITEMS = {"smoke": 40, "quick": 300, "full": 500}

CLAIM = Claim(
    slug="spark_vla",
    claim=(
        "In a low-data regime, distilling a frozen 3-D expert's attention into a LoRA branch of a frozen 2-D ViT "
        "(with a gradient-supervised token router) raises VLA task success over a 2-D-only VLA and matches "
        "implicit alignment into the main pathway, while keeping the 2-D representation intact."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        AtLeast("expert_depth_r2", threshold=0.2, arm="expert", label="expert_beats_chance"),
        Better(
            "success",
            arm="two_d_only",
            baseline="mean_action",
            margin=0.0,
            min_seeds=1,
            label="baseline_learns",
        ),
        AtMost("success", arm="two_d_only", threshold=0.9, label="not_at_ceiling"),
    ),
    criteria=(
        Better("success", baseline="two_d_only", margin=0.0, min_seeds=3, label="spark_vs_2d"),
        Better("depth_err", baseline="two_d_only", higher_is_better=False, min_seeds=3, label="depth_gain"),
        Better("success", baseline="implicit_align", margin=-0.02, min_seeds=3, label="spark_vs_implicit"),
        Better(
            "success", baseline="explicit_depth_corrupt", margin=0.0, min_seeds=3, label="robust_vs_bad_depth"
        ),
        Better(
            "probe_drop", baseline="implicit_align", higher_is_better=False, min_seeds=3, label="retention"
        ),
        AtMost("probe_drop", threshold=0.0, kind="design", label="spark_2d_path_intact"),
        Within("success", baseline="spark_no_router", tolerance=0.02, min_seeds=3, label="router_efficiency"),
        AtMost("token_fraction", threshold=0.25, kind="design", label="router_budget"),
    ),
    headlines=(
        Headline(
            "With a 0.5B language backbone and 50M trainable parameters, SPARK-VLA matches or beats substantially "
            "larger VLAs in simulation and real-world experiments",
            untested="no larger VLA, robot or simulator benchmark offline; the CPU-scale stand-in checks the "
            "mechanism against same-size baselines (spark_vs_2d, spark_vs_implicit)",
        ),
        Headline(
            "Attention distillation from a 3-D expert adds spatial knowledge without distorting the 2-D pathway",
            criteria=("spark_vs_2d", "depth_gain", "retention", "spark_2d_path_intact"),
        ),
        Headline(
            "SPARK is competitive with implicit alignment (Spatial Forcing) and robust where explicit depth input "
            "is brittle",
            criteria=("spark_vs_implicit", "robust_vs_bad_depth"),
        ),
        Headline(
            "The knowledge router forwards a fraction of the tokens at little cost",
            criteria=("router_efficiency", "router_budget"),
        ),
        Headline(
            "Spatial Forcing (context) reports up to 3.8x faster training",
            untested="a baseline paper's training-speed claim at scale; not a SPARK-VLA claim",
        ),
    ),
    items={"success": _ITEMS, "depth_err": _ITEMS},
    run=run,
    configs={
        "smoke": {
            **_COMMON,
            "image_size": 16,
            "n_pretrain": 200,
            "pre_steps": 5,
            "n_train": 64,
            "n_test": 40,
            "n_probe": 60,
            "steps": 3,
            "batch": 8,
            "dim": 32,
            "layers": 2,
            "arms": _MAIN,
        },
        "quick": {
            **_COMMON,
            "image_size": 16,
            "n_pretrain": 1000,
            "pre_steps": 100,
            "n_train": 200,
            "n_test": 300,
            "steps": 100,
            "arms": _MAIN,
        },
        "full": {
            **_COMMON,
            "image_size": 16,
            "n_pretrain": 2000,
            "pre_steps": 400,
            "n_train": 600,
            "n_test": 500,
            "steps": 500,
            "arms": _MAIN,
            "ablations": list(ABLATIONS),
        },
    },
    seeds={"smoke": (0,), "quick": (0,), "full": (0, 1, 2)},
    implemented=(
        "neurips26.robotics.spark_vla: SpatialLoRABranch (timm VisionTransformer from timm.create_model(..., "
        "pretrained=False) + peft LoRA r=8, alpha 16, dropout 0.05 on the fused qkv and output proj Linear layers "
        "of every block; 2-D pass inside disable_adapter), AttentionRecorder hooks (timm eager attention, "
        "probabilities at attn_drop), a frozen RGB-D 3-D expert (timm ViT reading the rendered depth map with the "
        "image, training only), AttentionDistillationLoss (KL teacher||student on patch attention of the last 2 "
        "layers, learned row-stochastic head mixing), KnowledgeRouter (MLP on [token; pooled instruction "
        "embedding], top ceil(0.25 * 2N), straight-through gate), action_gradient_targets (top-k of "
        "|t * dL/dt|_1 from a dense pass, every step) with BCE, LanguagePolicy (a 2-layer causal language model, "
        "transformers LlamaModel from a LlamaConfig, over [instruction words; routed visual tokens; action "
        "query], MLP action head, L1). Baselines share the backbone, the LM policy, its init, batches, steps "
        "and lr."
    ),
    differences=(
        "Mechanism change (issues 34/35) before this full run: the backbone and expert are timm ViTs (were "
        "transformers.ViTModel), the expert reads RGB + rendered depth (was RGB only, trained to infer depth), "
        "and the policy is a transformers causal LM (was an nn.TransformerEncoder); premises and criteria are "
        "unchanged. What remains simplified: the language model is a 2-layer, 64-wide Llama built from config "
        "and trained from its random init together with the action head (no language pre-training: the "
        "instruction language has 8 words; SmolLM2-135M would cost ~0.3 s per step on 2 cores, ~45 min for the "
        "arms' 9,000 policy steps, far over the 10 min budget), so the trainable fraction is not comparable to "
        "the paper's 50M/0.5B. The 3-D expert is a same-size timm ViT trained here on per-patch depth and point "
        "maps from RGB-D input, a stand-in for VGGT (which infers geometry from RGB alone): it sees the true "
        "rendered depth, a privileged training-time signal; neither SPARK nor implicit alignment sees depth at "
        "inference. LoRA sits on timm's fused qkv projection (rank 8 over q, k and v jointly; the spec's "
        "separate q/k/v adapters would have rank 8 each). Testbed fixes after the first quick runs, made before "
        "any full run (every arm at chance, the 2-D-only policy's train L1 stayed at the mean-action value even "
        "with 2,000 demos): (1) the generic 2-D backbone is pre-trained on per-patch colour/shape presence (dense "
        "2-D recognition) instead of image-level presence + count from mean-pooled tokens, whose tokens carried "
        "no usable per-object information; (2) the policy's action query is a learned vector plus the pooled "
        "instruction embedding (shared by every arm). Scenes hold 2 objects (spec 2-4) of radius 0.5, so a far "
        "object still covers ~1.3 px at 16x16: with 2-4 objects of radius 0.35 not even a policy on raw pixels "
        "learned the referring task in 600 steps. Images are 16x16 (N = 16 patches) in every profile to fit the "
        "CPU budget (spec full: 32x32). Implicit alignment aligns the block-L/2 tokens to the expert's final "
        "tokens. Full: 500 policy steps (spec 1,000, cut to fit 10 min) and 400 pre-training steps; ablations "
        "run on seed 0 only. Quick (100 steps, 1 seed) is a pipeline check: its paired criteria are "
        "inconclusive by design (min_seeds=3)."
    ),
    data="Generated TabletopScenes (neurips26.robotics.spark_vla): separate seeded pre-training, demonstration, "
    "probe and test sets per seed.",
    plot=plot,
    glossary={
        "success": "fraction of test scenes with ||a_hat - a*|| < 0.15 (normalised action units)",
        "success_loose": "fraction of test scenes with error < 0.30 (reported only, no criterion: success at 0.15 sits "
        "near the floor at CPU scale)",
        "err3d": "mean 3-D error of the predicted target position",
        "depth_err": "mean absolute error on the depth (z) axis of the action",
        "expert_depth_r2": "R^2 of the frozen expert's per-patch depth on test scenes against the per-position mean "
        "depth (0 = chance)",
        "probe_drop": "2-D linear-probe presence accuracy of the base path before training minus after",
        "tokens_forwarded": "visual tokens the policy sees per image",
        "token_fraction": "tokens SPARK forwards / its 2N candidates (router budget rho = 0.25)",
        "trainable_fraction": "SPARK trainable parameters / (trainable + frozen base ViT); paper ~50M/0.5B = 0.1",
    },
)

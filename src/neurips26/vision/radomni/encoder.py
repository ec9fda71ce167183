"""RadOmni encoder substrate: the ViT (transformers, from config), freezing, patchify, MAE masking and the light decoder."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from neurips26.common.checks import check_int, check_tensor

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

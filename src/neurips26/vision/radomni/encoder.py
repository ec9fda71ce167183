"""RadOmni encoder substrate: the ViT (timm, or transformers as an ablation; from config), freezing, patchify,
MAE masking and the light decoder."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from neurips26.common.checks import check_int, check_tensor

HU_WINDOW = (-160.0, 240.0)


# --------------------------------------------------------------------------------------------------- encoder
ENCODER_BACKENDS = ("timm", "transformers")
"""Libraries :class:`NCCTViT` can build its ViT from; ``"timm"`` is the default and the judged claim's."""

_TIMM_ARCH = "vit_tiny_patch16_224"  # timm's registered pre-norm ViT; every size argument is overridden


def build_timm_vit(image_size: int, patch_size: int, dim: int, depth: int, heads: int) -> nn.Module:
    """timm's ``VisionTransformer`` configured to the testbed, random init (``pretrained=False``, nothing
    downloaded): 1 input channel, no class token, learned position embeddings for the ``(H / p)(W / p)``
    patches only, MLP ratio 4, no dropout, no head or pooling (``forward_features`` gives ``(B, N, d)``)."""
    try:
        import timm
    except ImportError as exc:  # pragma: no cover - timm is in the vision extra
        raise ImportError("NCCTViT(backend='timm') needs timm: pip install 'neurips26[vision]'") from exc
    return timm.create_model(
        _TIMM_ARCH,
        pretrained=False,
        img_size=image_size,
        patch_size=patch_size,
        in_chans=1,
        embed_dim=dim,
        depth=depth,
        num_heads=heads,
        mlp_ratio=4.0,
        class_token=False,
        global_pool="",
        num_classes=0,
        drop_rate=0.0,
        pos_drop_rate=0.0,
        proj_drop_rate=0.0,
        attn_drop_rate=0.0,
        drop_path_rate=0.0,
    )


def build_transformers_vit(image_size: int, patch_size: int, dim: int, depth: int, heads: int) -> nn.Module:
    """``transformers.ViTModel`` from a ``ViTConfig`` of the same shape (random init, eager attention, no
    pooler); its class-token embedding exists but :class:`NCCTViT` never uses it."""
    from transformers import ViTConfig, ViTModel

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
    return ViTModel(cfg, add_pooling_layer=False)


class _TimmEmbedding(nn.Module):
    """timm's patch embedding and its (class-token-free) position embedding as one module, so that
    :func:`freeze_early_blocks` freezes both: ``x (B, 1, H, W) -> patch_embed(x) + pos_embed (B, N, d)``."""

    def __init__(self, patch_embed: nn.Module, pos_embed: nn.Parameter):
        super().__init__()
        self.patch_embed = patch_embed
        self.pos_embed = pos_embed

    def forward(self, x: Tensor) -> Tensor:
        return self.patch_embed(x) + self.pos_embed


class NCCTViT(nn.Module):
    """A ViT image encoder (random init) that can encode a subset of patches (MAE style), built from timm's
    ``VisionTransformer`` (``backend="timm"``, default, :func:`build_timm_vit`) or from
    ``transformers.ViTModel`` (``backend="transformers"``, :func:`build_transformers_vit`, kept as an
    ablation). Both are the same pre-norm ViT (:func:`copy_vit_weights` maps one onto the other); they differ
    in initialisation (timm: PyTorch default init of the patch projection, truncated normal 0.02 elsewhere;
    transformers: truncated normal 0.02 everywhere), LayerNorm eps (1e-6 vs 1e-12) and the unused class token.

    ``blocks`` are the ViT blocks and ``embed`` the patch + position embedding, so
    :func:`freeze_early_blocks` works on it. ``forward(x, keep_idx)`` returns the final-layer-normed tokens
    ``(B, N_keep, d)`` of the patches in ``keep_idx`` ``(B, N_keep)`` (all patches when ``None``); with
    ``keep_idx=None`` and the timm backend this is timm's ``forward_features``.
    """

    def __init__(
        self,
        image_size: int = 64,
        patch_size: int = 8,
        dim: int = 96,
        depth: int = 4,
        heads: int = 4,
        backend: str = "timm",
    ):
        super().__init__()
        if backend not in ENCODER_BACKENDS:
            raise ValueError(f"backend must be one of {ENCODER_BACKENDS}, got {backend!r}")
        check_int("patch_size", patch_size, 1)
        check_int("image_size", image_size, patch_size)
        if image_size % patch_size:
            raise ValueError(f"image_size ({image_size}) must be a multiple of patch_size ({patch_size})")
        check_int("depth", depth, 1)
        check_int("heads", heads, 1)
        if check_int("dim", dim, 1) % heads:
            raise ValueError(f"dim ({dim}) must be divisible by heads ({heads})")
        self.backend = backend
        if backend == "timm":
            vit = build_timm_vit(image_size, patch_size, dim, depth, heads)
            for name in ("patch_drop", "norm_pre"):  # forward below skips them: they must be no-ops
                if not isinstance(getattr(vit, name), nn.Identity):
                    raise RuntimeError(
                        f"timm ViT's {name} is {type(getattr(vit, name)).__name__}, not Identity"
                    )
            if vit.cls_token is not None or vit.reg_token is not None or vit.pos_drop.p != 0.0:
                raise RuntimeError("timm ViT must have no class/register token and no position dropout")
            self.embed = _TimmEmbedding(vit.patch_embed, vit.pos_embed)
            self.blocks = vit.blocks
            self.norm = vit.norm
        else:
            vit = build_transformers_vit(image_size, patch_size, dim, depth, heads)
            self.embed = vit.embeddings
            self.blocks = vit.layers
            self.norm = vit.layernorm
        self.image_size, self.patch_size, self.dim, self.depth = image_size, patch_size, dim, depth
        self.num_patches = (image_size // patch_size) ** 2

    def patch_tokens(self, x: Tensor) -> Tensor:
        """Patch + position embeddings of every patch ``(B, N, d)`` (before any block)."""
        if self.backend == "timm":
            return self.embed(x)
        return self.embed.patch_embeddings(x) + self.embed.position_embeddings[:, 1:]

    def forward(self, x: Tensor, keep_idx: Tensor | None = None) -> Tensor:
        check_tensor("x", x, like=self)
        if (
            x.dim() != 4
            or x.shape[1] != 1
            or x.shape[-1] != self.image_size
            or x.shape[-2] != self.image_size
        ):
            raise ValueError(f"x must be (B, 1, {self.image_size}, {self.image_size}), got {tuple(x.shape)}")
        tok = self.patch_tokens(x)
        if keep_idx is not None:
            if (
                not isinstance(keep_idx, Tensor)
                or keep_idx.dtype != torch.long
                or keep_idx.dim() != 2
                or keep_idx.shape[0] != x.shape[0]
            ):
                raise ValueError(f"keep_idx must be a (B = {x.shape[0]}, N_keep) long tensor")
            if keep_idx.numel() and (int(keep_idx.min()) < 0 or int(keep_idx.max()) >= self.num_patches):
                raise ValueError(f"keep_idx must index patches in [0, {self.num_patches})")
            tok = torch.gather(tok, 1, keep_idx.unsqueeze(-1).expand(-1, -1, tok.shape[-1]))
        for blk in self.blocks:
            tok = blk(tok)
        return self.norm(tok)

    def embed_global(self, x: Tensor) -> Tensor:
        """Mean-pooled token embedding ``g`` ``(B, d)``."""
        return self(x).mean(1)


def _vit_named_tensors(enc: NCCTViT) -> dict[str, Tensor]:
    """The encoder's weights under backend-neutral names (q, k, v split; the class token left out)."""
    out: dict[str, Tensor] = {}
    if enc.backend == "timm":
        out["patch.weight"] = enc.embed.patch_embed.proj.weight
        out["patch.bias"] = enc.embed.patch_embed.proj.bias
        out["pos"] = enc.embed.pos_embed[0]
        for i, b in enumerate(enc.blocks):
            d = enc.dim
            for j, n in enumerate("qkv"):
                out[f"{i}.{n}.weight"] = b.attn.qkv.weight[j * d : (j + 1) * d]
                out[f"{i}.{n}.bias"] = b.attn.qkv.bias[j * d : (j + 1) * d]
            pairs = {"o": b.attn.proj, "ln1": b.norm1, "ln2": b.norm2, "fc1": b.mlp.fc1, "fc2": b.mlp.fc2}
            for n, m in pairs.items():
                out[f"{i}.{n}.weight"], out[f"{i}.{n}.bias"] = m.weight, m.bias
    else:
        out["patch.weight"] = enc.embed.patch_embeddings.projection.weight
        out["patch.bias"] = enc.embed.patch_embeddings.projection.bias
        out["pos"] = enc.embed.position_embeddings[0, 1:]
        for i, b in enumerate(enc.blocks):
            a = b.attention
            pairs = {
                "q": a.q_proj, "k": a.k_proj, "v": a.v_proj, "o": a.o_proj,
                "ln1": b.layernorm_before, "ln2": b.layernorm_after, "fc1": b.mlp.fc1, "fc2": b.mlp.fc2,
            }  # fmt: skip
            for n, m in pairs.items():
                out[f"{i}.{n}.weight"], out[f"{i}.{n}.bias"] = m.weight, m.bias
    out["norm.weight"], out["norm.bias"] = enc.norm.weight, enc.norm.bias
    return out


def copy_vit_weights(src: NCCTViT, dst: NCCTViT) -> NCCTViT:
    """Copy ``src``'s weights into ``dst`` (same shape, either backend to either backend) in place and return
    ``dst``: afterwards both compute the same function up to their LayerNorm eps. Shows the two backends are
    the same architecture; the claim never copies weights between arms."""
    if not isinstance(src, NCCTViT) or not isinstance(dst, NCCTViT):
        raise TypeError("copy_vit_weights needs two NCCTViT encoders")
    shape = ("image_size", "patch_size", "dim", "depth")
    if any(getattr(src, k) != getattr(dst, k) for k in shape) or len(src.blocks) != len(dst.blocks):
        raise ValueError(
            "encoders differ in shape: "
            f"{[getattr(src, k) for k in shape]} vs {[getattr(dst, k) for k in shape]} (image, patch, dim, depth)"
        )
    a, b = _vit_named_tensors(src), _vit_named_tensors(dst)
    with torch.no_grad():
        for k, t in b.items():
            t.copy_(a[k])
    return dst


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

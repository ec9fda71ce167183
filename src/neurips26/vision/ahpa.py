"""AHPA: timestep-routed alignment of a diffusion transformer to the frozen VAE encoder's feature hierarchy.

Paper
-----
"Adaptive Hierarchical Prior Alignment" (AHPA), arXiv 2605.03317; seed file ``004_01f475bc147a144d.txt``,
abstract beginning "Representation alignment has recently emerged as". Reference code: github.com/UIOSN/AHPA
(README only: built on SiT + REPA; code pending), so the router's training rule below is the spec's
inferred rule, not the paper's.

REPA-style methods pull an early hidden state of a Diffusion Transformer towards one fixed target
representation at every noise level. AHPA instead reads ``L`` intermediate feature maps of the frozen VAE
encoder that the latent diffusion model already uses (fine, local levels to coarse, pre-latent levels),
projects the DiT hidden state to each of them, and lets a small timestep-conditioned Dynamic Router weight
the per-level alignment losses. Nothing of it runs at sampling.

Building blocks are diffusers' :class:`~diffusers.DiTTransformer2DModel` (adaLN-Zero, class-conditional; the
hidden state after block ``k`` is read by a forward hook on ``transformer_blocks[k]``), a diffusers
:class:`~diffusers.AutoencoderKL` (its encoder's intermediate maps, read by forward hooks, are the priors) and
diffusers' :class:`~diffusers.FlowMatchEulerDiscreteScheduler` (the Euler ODE sampler of the SiT interpolant).

Math
----
SiT interpolant with ``t ~ U(0, 1)``, ``eps ~ N(0, I)`` and latent ``z``:

.. math::

    x_t = (1 - t) z + t \\epsilon, \\qquad v = \\epsilon - z, \\qquad
    \\mathcal L_{diff} = \\lVert D_\\theta(x_t, t, y) - v \\rVert^2 .

Per level ``l`` with target ``F_l`` (stop-gradient) and projector ``P_l``, per sample ``b``:

.. math::

    \\mathcal L_l(b) = -\\frac1N \\sum_n \\cos\\big(F_l[b, n], P_l(H_k[b, n])\\big), \\qquad
    r(t) = \\operatorname{softmax}\\big((g_\\psi(\\operatorname{emb}(t)) + \\beta(t)) / T_r\\big),

    \\mathcal L_{align} = \\frac1B \\sum_b \\sum_l \\operatorname{sg}(r_l(t_b)) \\, \\mathcal L_l(b), \\qquad
    \\mathcal L_{router} = \\frac1B \\sum_b \\Big[\\sum_l r_l(t_b) \\operatorname{sg}(\\hat{\\mathcal L}_l(b))
    - \\lambda_H H(r(t_b))\\Big],

with ``hat L_l = (L_l - mu_l) / sigma_l`` standardised by EMA statistics and the optional SNR prior bias
``beta_l(t) = s (2t - 1)(2l / (L - 1) - 1)`` (levels ordered fine -> coarse, so coarse levels gain weight as
``t -> 1``). The total objective is ``L_diff + lambda (L_align + L_router)``; the two alignment terms have
disjoint gradients (DiT and projectors vs. router), and ``lambda = 0`` is exactly the plain diffusion loss.

Shapes
------
- images ``x``: ``(B, C_img, H, W)``; latents ``z``: ``(B, C_lat, h_lat, w_lat)``.
- DiT hidden state after block ``k``: ``(B, N, d)`` with ``N = (h_lat / p) (w_lat / p)`` tokens.
- targets: a list of ``L`` tensors ``(B, N, C_l)``; router weights ``r``: ``(B, L)``; ``t``: ``(B,)``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from neurips26.common.checks import check_choice, check_float, check_int, check_tensor

__all__ = [
    "AHPAAlignmentLoss",
    "HierarchicalFeatureExtractor",
    "TimestepRouter",
    "ahpa_training_step",
    "build_dit",
    "build_vae",
    "cosine_alignment",
    "dit_forward",
    "frechet_distance",
    "interpolant",
    "sample_ode",
]

RESAMPLE = ("avg", "bilinear", "nearest")
ROUTER_MODES = ("learned", "fixed_snr", "uniform")
TIMESTEP_SCALE = 1000.0  # diffusers' DiT embeds timesteps on the 0..1000 scale


# ------------------------------------------------------------------------------------------ builders
def build_dit(
    latent_channels: int = 4,
    latent_size: int = 4,
    hidden: int = 96,
    depth: int = 6,
    heads: int = 4,
    num_classes: int = 10,
    patch_size: int = 1,
):
    """A tiny class-conditional diffusers ``DiTTransformer2DModel`` (adaLN-Zero) built from config.

    diffusers draws the classifier-free-guidance label dropout independently inside every block's
    label embedder; here it is switched off and :func:`ahpa_training_step` drops each sample's label once
    (DiT/SiT convention) with an explicit generator. The null label is ``num_classes``.
    """
    from diffusers import DiTTransformer2DModel

    check_int("latent_channels", latent_channels, low=1)
    check_int("latent_size", latent_size, low=1)
    check_int("heads", heads, low=1)
    check_int("hidden", hidden, low=heads)
    check_int("depth", depth, low=1)
    check_int("num_classes", num_classes, low=1)
    check_int("patch_size", patch_size, low=1)
    if hidden % heads:
        raise ValueError(f"hidden must be divisible by heads, got hidden={hidden}, heads={heads}")
    if latent_size % patch_size:
        raise ValueError(f"latent_size must be divisible by patch_size, got {latent_size} and {patch_size}")
    model = DiTTransformer2DModel(
        num_attention_heads=heads,
        attention_head_dim=hidden // heads,
        in_channels=latent_channels,
        out_channels=latent_channels,
        num_layers=depth,
        sample_size=latent_size,
        patch_size=patch_size,
        num_embeds_ada_norm=num_classes,
        norm_num_groups=1,
    )
    for block in model.transformer_blocks:
        block.norm1.emb.class_embedder.dropout_prob = 0.0  # the table keeps its null row
    return model


def build_vae(
    in_channels: int = 1,
    block_out_channels: Sequence[int] = (32, 64, 64),
    latent_channels: int = 4,
    sample_size: int = 16,
    norm_num_groups: int = 8,
):
    """A tiny diffusers ``AutoencoderKL`` from config: one down stage per entry of ``block_out_channels``
    (all but the last halve the resolution), one ResNet per stage, no mid-block attention."""
    from diffusers import AutoencoderKL

    check_int("in_channels", in_channels, low=1)
    check_int("latent_channels", latent_channels, low=1)
    chans = tuple(block_out_channels)
    if not chans or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in chans):
        raise ValueError(f"block_out_channels must be positive ints, got {block_out_channels!r}")
    if any(c % norm_num_groups for c in chans):
        raise ValueError(
            f"every block_out_channels entry must be divisible by norm_num_groups={norm_num_groups}"
        )
    n = len(chans)
    return AutoencoderKL(
        in_channels=in_channels,
        out_channels=in_channels,
        down_block_types=("DownEncoderBlock2D",) * n,
        up_block_types=("UpDecoderBlock2D",) * n,
        block_out_channels=chans,
        layers_per_block=1,
        latent_channels=latent_channels,
        norm_num_groups=norm_num_groups,
        sample_size=sample_size,
        mid_block_add_attention=False,
    )


# ------------------------------------------------------------------------------------------ DiT
def _check_t(t: Any, batch: int | None = None) -> Tensor:
    check_tensor("t", t)
    if t.dim() != 1:
        raise ValueError(f"t must be one-dimensional (B,), got shape {tuple(t.shape)}")
    if batch is not None and t.shape[0] != batch:
        raise ValueError(f"t must have one entry per sample ({batch}), got {t.shape[0]}")
    if t.numel() and (bool((t < 0).any()) or bool((t > 1).any())):
        raise ValueError("t must lie in [0, 1]")
    return t


def dit_forward(model: nn.Module, x_t: Tensor, t: Tensor, y: Tensor, return_hidden: int | None = None):
    """Run a diffusers DiT on ``x_t`` at times ``t`` in [0, 1] with labels ``y``.

    Returns the prediction ``(B, C, h, w)``, or ``(prediction, hidden)`` with the ``(B, N, d)`` output of
    ``transformer_blocks[return_hidden]``, read by a forward hook that is removed before returning.
    """
    check_tensor("x_t", x_t, like=model)
    if x_t.dim() != 4:
        raise ValueError(f"x_t must have shape (B, C, h, w), got {tuple(x_t.shape)}")
    cfg = model.config
    if x_t.shape[1] != cfg.in_channels:
        raise ValueError(f"x_t must have {cfg.in_channels} channels, got {x_t.shape[1]}")
    if x_t.shape[-2] % cfg.patch_size or x_t.shape[-1] % cfg.patch_size:
        raise ValueError(
            f"x_t's spatial size {tuple(x_t.shape[-2:])} must be divisible by patch {cfg.patch_size}"
        )
    _check_t(t, x_t.shape[0])
    if not isinstance(y, Tensor) or y.dtype != torch.long or y.shape != (x_t.shape[0],):
        raise TypeError(
            f"y must be an int64 tensor of shape ({x_t.shape[0]},), got {getattr(y, 'shape', y)!r}"
        )
    if y.numel() and (int(y.min()) < 0 or int(y.max()) > cfg.num_embeds_ada_norm):
        raise ValueError(f"y must lie in [0, {cfg.num_embeds_ada_norm}] (the last is the null label)")
    store: dict[str, Tensor] = {}
    handle = None
    if return_hidden is not None:
        check_int("return_hidden", return_hidden, low=0, high=len(model.transformer_blocks) - 1)
        handle = model.transformer_blocks[return_hidden].register_forward_hook(
            lambda _m, _i, out: store.__setitem__("h", out)
        )
    try:
        out = model(x_t, timestep=t * TIMESTEP_SCALE, class_labels=y).sample
    finally:
        if handle is not None:
            handle.remove()
    return (out, store["h"]) if return_hidden is not None else out


def interpolant(z: Tensor, eps: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
    """SiT interpolant: ``x_t = (1 - t) z + t eps`` and velocity target ``v = eps - z`` (shapes of ``z``)."""
    check_tensor("z", z)
    check_tensor("eps", eps)
    if eps.shape != z.shape:
        raise ValueError(f"eps must have z's shape {tuple(z.shape)}, got {tuple(eps.shape)}")
    _check_t(t, z.shape[0])
    tt = t.reshape(-1, *([1] * (z.dim() - 1))).to(z.dtype)
    return (1 - tt) * z + tt * eps, eps - z


# ------------------------------------------------------------------------------------------ priors
class HierarchicalFeatureExtractor(nn.Module):
    """Frozen encoder + forward hooks -> a list of ``(B, N, C_l)`` targets on a ``token_grid``.

    Parameters
    ----------
    encoder : nn.Module
        Frozen feature encoder (e.g. ``AutoencoderKL.encoder``); its parameters are set to
        ``requires_grad=False`` and it is kept in ``eval()``.
    layer_names : sequence of str
        Submodule names (``encoder.get_submodule``) whose outputs are the levels, fine -> coarse.
    token_grid : (h, w)
        The DiT token grid. Finer maps are average-pooled (``resample="avg"``, sizes must be multiples of
        the grid), coarser ones nearest-upsampled; ``"bilinear"``/``"nearest"`` interpolate every level.
    global_level : bool
        Pool the last (coarsest) level to one vector and broadcast it to every token.
    """

    def __init__(
        self,
        encoder: nn.Module,
        layer_names: Sequence[str],
        token_grid: tuple[int, int],
        resample: str = "avg",
        global_level: bool = False,
    ):
        super().__init__()
        if not isinstance(encoder, nn.Module):
            raise TypeError(f"encoder must be an nn.Module, got {type(encoder).__name__}")
        names = [layer_names] if isinstance(layer_names, str) else list(layer_names)
        if not names or not all(isinstance(n, str) for n in names):
            raise ValueError(
                f"layer_names must be a non-empty sequence of submodule names, got {layer_names!r}"
            )
        grid = tuple(token_grid) if isinstance(token_grid, (tuple, list)) else ()
        if len(grid) != 2:
            raise ValueError(f"token_grid must be (h, w), got {token_grid!r}")
        for g in grid:
            check_int("token_grid", g, low=1)
        self.resample = check_choice("resample", resample, RESAMPLE)
        if not isinstance(global_level, bool):
            raise TypeError(f"global_level must be a bool, got {type(global_level).__name__}")
        self.encoder, self.layer_names, self.token_grid, self.global_level = (
            encoder,
            names,
            grid,
            global_level,
        )
        self.encoder.requires_grad_(False)
        self.encoder.eval()
        self._store: dict[str, Tensor] = {}
        self._handles = []
        for name in names:
            try:
                module = encoder.get_submodule(name)
            except AttributeError as err:
                raise ValueError(f"layer_names: encoder has no submodule {name!r}") from err
            self._handles.append(module.register_forward_hook(self._hook(name)))

    def _hook(self, name: str) -> Callable:
        def fn(_module, _inputs, output):
            self._store[name] = output[0] if isinstance(output, tuple) else output

        return fn

    def train(self, mode: bool = True) -> HierarchicalFeatureExtractor:  # the encoder stays in eval()
        super().train(mode)
        self.encoder.eval()
        return self

    def _to_grid(self, feat: Tensor, name: str) -> Tensor:
        if feat.dim() != 4:
            raise ValueError(f"layer {name!r} must output (B, C, H, W) maps, got shape {tuple(feat.shape)}")
        (h, w), (hh, ww) = self.token_grid, feat.shape[-2:]
        if self.resample == "avg":
            if hh >= h and ww >= w:
                if hh % h or ww % w:
                    raise ValueError(
                        f"resample='avg' needs layer {name!r}'s map {hh}x{ww} to be a multiple of token_grid {h}x{w}"
                    )
                feat = F.adaptive_avg_pool2d(feat, (h, w))
            else:
                feat = F.interpolate(feat, size=(h, w), mode="nearest")
        elif self.resample == "bilinear":
            feat = F.interpolate(feat, size=(h, w), mode="bilinear", align_corners=False)
        else:
            feat = F.interpolate(feat, size=(h, w), mode="nearest")
        return feat.flatten(2).transpose(1, 2)  # (B, N, C)

    @torch.no_grad()
    def forward(self, x: Tensor) -> list[Tensor]:
        """The ``L`` levels of ``x`` (``(B, ...)``, the encoder's input) as ``(B, N, C_l)`` tensors."""
        if not self._handles:
            raise RuntimeError("the extractor was closed; build a new one")
        check_tensor("x", x, like=self.encoder)
        if x.dim() < 2 or x.shape[0] == 0:
            raise ValueError(f"x must be a non-empty batch (B, ...), got shape {tuple(x.shape)}")
        self.encoder.eval()
        self._store.clear()
        try:
            self.encoder(x)
        except (RuntimeError, IndexError) as err:
            raise ValueError(f"x of shape {tuple(x.shape)} does not fit the encoder: {err}") from err
        out = []
        for i, name in enumerate(self.layer_names):
            if name not in self._store:
                raise RuntimeError(f"layer {name!r} did not run in the encoder's forward")
            feat = self._store[name].detach()
            if feat.dim() != 4:
                raise ValueError(
                    f"x of shape {tuple(x.shape)} gave layer {name!r} a map of shape "
                    f"{tuple(feat.shape)}; expected (B, C, H, W)"
                )
            if not bool(torch.isfinite(feat).all()):
                raise ValueError(f"x gave non-finite features at layer {name!r} (input magnitude too large?)")
            if self.global_level and i == len(self.layer_names) - 1:
                n = self.token_grid[0] * self.token_grid[1]
                out.append(feat.flatten(2).mean(-1)[:, None, :].expand(-1, n, -1).contiguous())
            else:
                out.append(self._to_grid(feat, name))
        self._store.clear()
        return out

    def level_dims(self, example: Tensor) -> list[int]:
        """Channel count ``C_l`` of every level, found by one forward pass on ``example``."""
        return [f.shape[-1] for f in self(example)]

    @torch.no_grad()
    def extract(self, x: Tensor, batch_size: int = 256) -> list[Tensor]:
        """Pre-extract the levels of a whole data set (the official recipe caches them before training)."""
        check_int("batch_size", batch_size, low=1)
        parts = [self(x[i : i + batch_size]) for i in range(0, x.shape[0], batch_size)]
        return [torch.cat([p[level] for p in parts]) for level in range(len(self.layer_names))]

    def close(self) -> None:
        """Remove the hooks from the encoder (idempotent)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def __enter__(self) -> HierarchicalFeatureExtractor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ------------------------------------------------------------------------------------------ router
class TimestepRouter(nn.Module):
    """Dynamic Router: timestep -> weights ``r(t)`` on the simplex over ``L`` levels (fine -> coarse).

    ``mode``: ``"learned"`` (2-layer MLP on the sinusoidal embedding of ``t``, plus the SNR prior bias when
    ``snr_prior``), ``"fixed_snr"`` (the prior bias alone), ``"uniform"`` (``1/L``) or ``"single:<l>"``
    (one-hot on level ``l``: a static single-level supervisor, REPA's granularity). ``top_k`` keeps the
    ``k`` largest weights per row and renormalises. The learned MLP's last layer starts at zero, so a new
    router equals ``fixed_snr`` (or ``uniform`` without the prior).
    """

    def __init__(
        self,
        num_levels: int,
        t_embed_dim: int = 128,
        hidden: int = 256,
        temperature: float = 1.0,
        top_k: int | None = None,
        mode: str = "learned",
        entropy_weight: float = 1e-2,
        snr_prior: bool = True,
        prior_scale: float = 2.0,
    ):
        super().__init__()
        self.num_levels = check_int("num_levels", num_levels, low=1)
        check_int("t_embed_dim", t_embed_dim, low=2)
        if t_embed_dim % 2:
            raise ValueError(f"t_embed_dim must be even, got {t_embed_dim}")
        check_int("hidden", hidden, low=1)
        self.temperature = check_float("temperature", temperature, 0.0, low_open=True)
        if not math.isfinite(self.temperature):
            raise ValueError("temperature must be finite")
        if top_k is not None:
            check_int("top_k", top_k, low=1, high=num_levels)
        self.top_k = top_k
        if not isinstance(mode, str):
            raise TypeError(f"mode must be a str, got {type(mode).__name__}")
        self.single: int | None = None
        if mode.startswith("single:"):
            try:
                level = int(mode.split(":", 1)[1])
            except ValueError as err:
                raise ValueError(f"mode 'single:<l>' needs an integer level, got {mode!r}") from err
            if not 0 <= level < num_levels:
                raise ValueError(f"mode {mode!r}: level must lie in [0, {num_levels - 1}]")
            self.single = level
        else:
            check_choice("mode", mode, ROUTER_MODES)
        self.mode = mode
        self.entropy_weight = check_float("entropy_weight", entropy_weight, 0.0)
        if not isinstance(snr_prior, bool):
            raise TypeError(f"snr_prior must be a bool, got {type(snr_prior).__name__}")
        self.snr_prior = snr_prior
        self.prior_scale = check_float("prior_scale", prior_scale, 0.0)
        self.t_embed_dim = t_embed_dim
        self.mlp = None
        if mode == "learned":
            self.mlp = nn.Sequential(nn.Linear(t_embed_dim, hidden), nn.SiLU(), nn.Linear(hidden, num_levels))
            nn.init.zeros_(self.mlp[-1].weight)
            nn.init.zeros_(self.mlp[-1].bias)

    @property
    def learnable(self) -> bool:
        return self.mlp is not None

    def prior_bias(self, t: Tensor) -> Tensor:
        """``s (2t - 1)(2l/(L-1) - 1)``: ``(B, L)``, favouring coarse levels as ``t -> 1``."""
        L = self.num_levels
        pos = torch.linspace(-1.0, 1.0, L, dtype=t.dtype, device=t.device) if L > 1 else t.new_zeros(1)
        return self.prior_scale * (2 * t[:, None] - 1) * pos[None, :]

    def logits(self, t: Tensor) -> Tensor:
        """The learned part ``g(emb(t))`` alone, ``(B, L)`` (zeros for the fixed modes)."""
        if self.mlp is None:
            return t.new_zeros(t.shape[0], self.num_levels)
        from diffusers.models.embeddings import get_timestep_embedding

        emb = get_timestep_embedding(
            t * TIMESTEP_SCALE, self.t_embed_dim, flip_sin_to_cos=True, downscale_freq_shift=0
        )
        return self.mlp(emb.to(self.mlp[0].weight.dtype))

    def forward(self, t: Tensor) -> Tensor:
        """Weights ``(B, L)``: non-negative, each row sums to 1."""
        _check_t(t)
        B, L = t.shape[0], self.num_levels
        if self.single is not None:
            w = t.new_zeros(B, L)
            w[:, self.single] = 1.0
            return w
        if self.mode == "uniform":
            w = t.new_full((B, L), 1.0 / L)
        else:
            z = self.logits(t)
            if self.mode == "fixed_snr" or self.snr_prior:
                z = z + self.prior_bias(t).to(z.dtype)
            w = torch.softmax(z / self.temperature, dim=-1)
        if self.top_k is not None and self.top_k < L:
            idx = w.topk(self.top_k, dim=-1).indices
            mask = torch.zeros_like(w).scatter_(-1, idx, 1.0)
            w = w * mask
            w = w / w.sum(-1, keepdim=True)
        return w

    def objective(self, weights: Tensor, standardized: Tensor) -> Tensor:
        """Router loss ``mean_b [sum_l r_l sg(hat L_l) - lambda_H H(r)]`` (gradient only into the router)."""
        ent = -(weights * weights.clamp_min(1e-12).log()).sum(-1)
        return ((weights * standardized.detach()).sum(-1) - self.entropy_weight * ent).mean()


# ------------------------------------------------------------------------------------------ alignment
def cosine_alignment(pred: Tensor, target: Tensor) -> Tensor:
    """Per-sample negative patch-wise cosine ``-(1/N) sum_n cos(target_n, pred_n)``: ``(B, N, C) -> (B,)``."""
    if pred.shape != target.shape or pred.dim() != 3:
        raise ValueError(
            f"pred and target must share a (B, N, C) shape, got {tuple(pred.shape)} and {tuple(target.shape)}"
        )
    return -F.cosine_similarity(pred, target, dim=-1, eps=1e-8).mean(-1)


def _projector(d: int, hidden: int, out: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(d, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, out)
    )


class AHPAAlignmentLoss(nn.Module):
    """Projection heads + routed per-level cosine alignment + the router's own objective.

    ``forward(hidden, targets, t)`` returns ``(loss, info)`` with ``loss = L_align + L_router``: the first
    term (router weights detached) trains the DiT and heads, the second (standardised losses detached)
    trains only the router. ``info``: ``per_level`` ``(B, L)``, ``weights`` ``(B, L)``, ``standardized``
    ``(B, L)``, ``align`` and ``router`` scalars. In training mode the EMA statistics of the per-level
    losses (mean ``mu_l``, variance ``sigma_l^2``) are updated with momentum ``ema`` after use.
    """

    def __init__(
        self,
        hidden_dim: int,
        level_dims: Sequence[int],
        router: TimestepRouter,
        proj_hidden: int = 2048,
        standardize: bool = True,
        ema: float = 0.99,
        sigma_floor: float = 1e-4,
    ):
        super().__init__()
        check_int("hidden_dim", hidden_dim, low=1)
        dims = list(level_dims) if isinstance(level_dims, (list, tuple)) else None
        if not dims or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in dims):
            raise ValueError(f"level_dims must be a non-empty sequence of positive ints, got {level_dims!r}")
        if not isinstance(router, TimestepRouter):
            raise TypeError(f"router must be a TimestepRouter, got {type(router).__name__}")
        if router.num_levels != len(dims):
            raise ValueError(f"router has {router.num_levels} levels but level_dims has {len(dims)}")
        check_int("proj_hidden", proj_hidden, low=1)
        self.ema = check_float("ema", ema, 0.0, 1.0, high_open=True)
        self.sigma_floor = check_float("sigma_floor", sigma_floor, 0.0, low_open=True)
        if not isinstance(standardize, bool):
            raise TypeError(f"standardize must be a bool, got {type(standardize).__name__}")
        self.hidden_dim, self.level_dims, self.standardize = hidden_dim, dims, standardize
        self.router = router
        self.heads = nn.ModuleList(_projector(hidden_dim, proj_hidden, c) for c in dims)
        self.register_buffer("mu", torch.zeros(len(dims)))
        self.register_buffer("var", torch.ones(len(dims)))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    @property
    def sigma(self) -> Tensor:
        return self.var.sqrt().clamp_min(self.sigma_floor)

    def standardized(self, per_level: Tensor) -> Tensor:
        """``(L_l - mu_l) / sigma_l`` with the current (frozen) statistics; identity when ``standardize=False``."""
        if not self.standardize:
            return per_level
        return (per_level - self.mu) / self.sigma

    @torch.no_grad()
    def update_stats(self, per_level: Tensor) -> None:
        mean = per_level.mean(0)
        var = per_level.var(0, unbiased=False) if per_level.shape[0] > 1 else torch.zeros_like(mean)
        if int(self.count) == 0:
            self.mu.copy_(mean)
            self.var.copy_(var.clamp_min(self.sigma_floor**2))
        else:
            self.mu.mul_(self.ema).add_((1 - self.ema) * mean)
            self.var.mul_(self.ema).add_((1 - self.ema) * var)
        self.count += 1

    def per_level(self, hidden: Tensor, targets: Sequence[Tensor]) -> Tensor:
        """``L_l(b)`` for every level: ``(B, L)``, values in ``[-1, 1]``."""
        check_tensor("hidden", hidden, like=self.heads)
        if hidden.dim() != 3 or hidden.shape[-1] != self.hidden_dim:
            raise ValueError(f"hidden must have shape (B, N, {self.hidden_dim}), got {tuple(hidden.shape)}")
        if not isinstance(targets, (list, tuple)) or len(targets) != len(self.level_dims):
            raise ValueError(f"targets must be a list of {len(self.level_dims)} tensors (B, N, C_l)")
        cols = []
        for level, (head, target, c) in enumerate(zip(self.heads, targets, self.level_dims)):
            check_tensor(f"targets[{level}]", target, like=self.heads)
            if tuple(target.shape) != (*hidden.shape[:2], c):
                raise ValueError(
                    f"targets[{level}] must have shape {(*hidden.shape[:2], c)}, got {tuple(target.shape)}"
                )
            cols.append(cosine_alignment(head(hidden), target.detach()))
        return torch.stack(cols, dim=-1)

    def forward(self, hidden: Tensor, targets: Sequence[Tensor], t: Tensor) -> tuple[Tensor, dict]:
        per_level = self.per_level(hidden, targets)
        _check_t(t, hidden.shape[0])
        weights = self.router(t.to(hidden.dtype))
        align = (weights.detach() * per_level).sum(-1).mean()
        std = self.standardized(per_level.detach())
        router = self.router.objective(weights, std) if self.router.learnable else align.new_zeros(())
        if self.training and self.standardize:
            self.update_stats(per_level.detach())
        info = {
            "per_level": per_level.detach(),
            "weights": weights.detach(),
            "standardized": std,
            "align": align.detach(),
            "router": router.detach(),
        }
        return align + router, info


# ------------------------------------------------------------------------------------------ training
def ahpa_training_step(
    model: nn.Module,
    extractor: HierarchicalFeatureExtractor | None,
    aligner: AHPAAlignmentLoss | None,
    vae_encode: Callable[[Tensor], Tensor] | None,
    batch: dict,
    lam: float = 0.5,
    objective: str = "velocity",
    align_block: int = 0,
    label_dropout: float = 0.1,
    generator: torch.Generator | None = None,
) -> dict[str, Tensor]:
    """One loss evaluation ``L_diff + lam (L_align + L_router)`` (no backward, no optimiser step).

    ``batch`` holds labels ``"y"`` ``(B,)`` and either images ``"x"`` (encoded by ``vae_encode`` into
    latents, levels read by ``extractor``) or pre-extracted ``"z"`` ``(B, C, h, w)`` and ``"targets"``
    (a list of ``(B, N, C_l)``). ``aligner=None`` is the vanilla DiT. The random draws (``t``, noise, label
    dropout) come from ``generator`` in a fixed order before any alignment work, so ``lam = 0`` gives the
    vanilla loss and gradients exactly. Returns ``loss``, ``diffusion``, ``align``, ``router``.
    """
    lam = check_float("lam", lam, 0.0)
    if not math.isfinite(lam):
        raise ValueError("lam must be finite")
    check_choice("objective", objective, ("velocity",))
    check_probability_ = check_float("label_dropout", label_dropout, 0.0, 1.0)
    if not isinstance(batch, dict) or "y" not in batch:
        raise TypeError("batch must be a dict with labels 'y' and either 'x' or 'z' (+ 'targets')")
    y = batch["y"]
    if "z" in batch:
        z = batch["z"]
        targets = batch.get("targets")
    elif "x" in batch:
        if vae_encode is None:
            raise ValueError("vae_encode is needed when batch holds images 'x'")
        with torch.no_grad():
            z = vae_encode(batch["x"])
        targets = None
    else:
        raise TypeError("batch must hold 'x' (images) or 'z' (latents)")
    check_tensor("z", z, like=model)
    B = z.shape[0]
    t = torch.rand(B, generator=generator, dtype=z.dtype)
    eps = torch.randn(z.shape, generator=generator, dtype=z.dtype)
    drop = torch.rand(B, generator=generator) < check_probability_
    null = model.config.num_embeds_ada_norm
    y_in = torch.where(drop, torch.full_like(y, null), y) if isinstance(y, Tensor) else y
    x_t, v = interpolant(z, eps, t)
    use_align = aligner is not None
    if use_align:
        pred, hidden = dit_forward(model, x_t, t, y_in, return_hidden=align_block)
    else:
        pred = dit_forward(model, x_t, t, y_in)
    diffusion = ((pred - v) ** 2).mean()
    zero = diffusion.new_zeros(())
    out = {"diffusion": diffusion, "align": zero, "router": zero}
    if use_align:
        if targets is None:
            if extractor is None:
                raise ValueError("an extractor (or batch['targets']) is needed when an aligner is given")
            targets = extractor(batch["x"])
        loss_align, info = aligner(hidden, targets, t)
        out.update(align=info["align"], router=info["router"], weights=info["weights"])
        out["loss"] = diffusion + lam * loss_align
    else:
        out["loss"] = diffusion
    return out


@torch.no_grad()
def sample_ode(
    model: nn.Module,
    vae_decode: Callable[[Tensor], Tensor] | None,
    labels: Tensor,
    steps: int = 25,
    cfg_scale: float = 1.5,
    generator: torch.Generator | None = None,
    batch_size: int = 500,
) -> Tensor:
    """Euler ODE sampling (diffusers ``FlowMatchEulerDiscreteScheduler``) with classifier-free guidance.

    Starts from ``eps`` at ``t = 1`` and integrates ``dx/dt = v`` to ``t = 0`` using
    ``v = v_null + cfg_scale (v_cond - v_null)``. Returns ``vae_decode(z)`` (or the latents ``z`` when
    ``vae_decode`` is None). Only the DiT runs: heads, router and hooks take no part.
    """
    from diffusers import FlowMatchEulerDiscreteScheduler

    check_int("steps", steps, low=1)
    cfg_scale = check_float("cfg_scale", cfg_scale, 0.0)
    check_int("batch_size", batch_size, low=1)
    if not isinstance(labels, Tensor) or labels.dtype != torch.long or labels.dim() != 1:
        raise TypeError("labels must be a 1-D int64 tensor")
    cfg = model.config
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= cfg.num_embeds_ada_norm):
        raise ValueError(f"labels must lie in [0, {cfg.num_embeds_ada_norm - 1}]")
    was_training = model.training
    model.eval()
    dtype = next(model.parameters()).dtype
    shape = (cfg.in_channels, cfg.sample_size, cfg.sample_size)
    noise = torch.randn((labels.shape[0], *shape), generator=generator, dtype=dtype)
    outs = []
    for s in range(0, labels.shape[0], batch_size):
        y, x = labels[s : s + batch_size], noise[s : s + batch_size]
        sched = FlowMatchEulerDiscreteScheduler(num_train_timesteps=int(TIMESTEP_SCALE), shift=1.0)
        sched.set_timesteps(steps)
        null = torch.full_like(y, cfg.num_embeds_ada_norm)
        for ts in sched.timesteps:
            t = (ts / TIMESTEP_SCALE).to(dtype).expand(x.shape[0])
            if cfg_scale == 1.0:
                v = dit_forward(model, x, t, y)
            else:
                both = dit_forward(model, torch.cat([x, x]), torch.cat([t, t]), torch.cat([y, null]))
                cond, unc = both.chunk(2)
                v = unc + cfg_scale * (cond - unc)
            x = sched.step(v, ts, x).prev_sample
        outs.append(x)
    model.train(was_training)
    z = torch.cat(outs) if outs else noise
    return vae_decode(z) if vae_decode is not None else z


# ------------------------------------------------------------------------------------------ metric
def frechet_distance(feats_a: Any, feats_b: Any) -> float:
    """Fréchet distance between Gaussians fitted to two feature sets ``(n_a, D)`` and ``(n_b, D)``:
    ``|mu_a - mu_b|^2 + tr(S_a + S_b - 2 (S_a S_b)^{1/2})`` (the FID formula on any features)."""
    from scipy import linalg

    a = np.asarray(feats_a.detach().cpu() if isinstance(feats_a, Tensor) else feats_a, dtype=np.float64)
    b = np.asarray(feats_b.detach().cpu() if isinstance(feats_b, Tensor) else feats_b, dtype=np.float64)
    for name, arr in (("feats_a", a), ("feats_b", b)):
        if arr.ndim != 2 or arr.shape[0] < 2:
            raise ValueError(f"{name} must have shape (n >= 2, D), got {arr.shape}")
        if not np.isfinite(arr).all():
            raise ValueError(f"{name} contains NaN or inf")
    if a.shape[1] != b.shape[1]:
        raise ValueError(
            f"feats_a and feats_b must share the feature dimension, got {a.shape[1]} and {b.shape[1]}"
        )
    mu_a, mu_b = a.mean(0), b.mean(0)
    cov_a, cov_b = np.atleast_2d(np.cov(a, rowvar=False)), np.atleast_2d(np.cov(b, rowvar=False))
    with warnings.catch_warnings():  # singular covariances (few samples, many features) are expected
        warnings.simplefilter("ignore", linalg.LinAlgWarning)
        covmean = np.real(linalg.sqrtm(cov_a @ cov_b))
    if not np.isfinite(covmean).all():  # the usual FID fallback: a small diagonal offset
        offset = np.eye(a.shape[1]) * 1e-6
        covmean = np.real(linalg.sqrtm((cov_a + offset) @ (cov_b + offset)))
    value = float(((mu_a - mu_b) ** 2).sum() + np.trace(cov_a) + np.trace(cov_b) - 2 * np.trace(covmean))
    return max(value, 0.0)

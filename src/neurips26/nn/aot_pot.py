r"""AOT-POT: multi-stream residual operator transformer with Sinkhorn-projected stream mixing.

Paper
-----
*AOT-POT: Adaptive Operator-Transformation for Pre-training Operator Transformers* (arXiv 2605.15793;
seed file ``004_01f475bc147a144d.txt``, paragraph 8, abstract beginning "Pre-training neural operators
on diverse PDE"). The mechanism is the manifold-constrained hyper-connection (mHC, arXiv 2512.24880)
placed in a DPOT-style operator transformer (arXiv 2403.03542).

Math
----
Every token carries ``n`` residual streams :math:`x_l \in \mathbb{R}^{n \times d}`. Around each
sub-layer :math:`F_l` (Fourier token mixer or channel MLP, each with its own pre-norm), with
:math:`\tilde x = \mathrm{RMSNorm}(\mathrm{vec}(x_l)) \in \mathbb{R}^{nd}`:

.. math::

    H_{pre} &= \tfrac{2}{n}\,\sigma(\alpha_{pre}\,\tilde x\,\phi_{pre} + b_{pre}) \in \mathbb{R}^{n},\qquad
    H_{post} = 2\,\sigma(\alpha_{post}\,\tilde x\,\phi_{post} + b_{post}) \in \mathbb{R}^{n}\\
    H_{res} &= \mathrm{SinkhornKnopp}(\alpha_{res}\,\mathrm{mat}(\tilde x\,\phi_{res}) + b_{res})
             \in \mathbb{R}^{n \times n}\\
    x_{l+1} &= H_{res}\, x_l + H_{post}^\top F_l(H_{pre}\, x_l).

With :math:`b = 0` the aggregation is the stream mean (:math:`H_{pre} = 1/n`) and the write-back
weight is 1; :math:`b_{res} = s I` makes :math:`H_{res}` nearly the identity. Sinkhorn--Knopp runs in
log space: alternately subtract the column and the row log-sum-exp (``n_iters`` times, ending on
rows), so rows sum to 1 exactly and columns approximately; the result is doubly stochastic
(non-negative, spectral norm <= 1, closed under products). Parameters per sub-layer:
:math:`nd(n^2 + 2n) + n^2 + 2n + 3` (:func:`stream_overhead`).

Shapes
------
Streams: ``(B, N, n, d)`` (batch, tokens, streams, width). The operator transformer maps
``u_past`` of shape ``(B, T_in, C, X)`` to the next frame ``(B, C, X)`` (``(B, C, *spatial)`` layout,
1-D space; ``X`` divisible by ``patch``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from neurips26.common.checks import check_choice, check_float, check_int, check_tensor
from neurips26.common.pde import relative_l2

__all__ = [
    "FourierMixer1d",
    "MultiStreamResidual",
    "OperatorTransformer",
    "ar_denoising_loss",
    "collapse_streams",
    "composite_amax_gain",
    "expand_streams",
    "match_width",
    "relative_l2",
    "sinkhorn_knopp",
    "stream_overhead",
]

CONSTRAINTS = ("sinkhorn", "none", "identity")
RESIDUALS = ("standard", "aot", "hc", "static")


def sinkhorn_knopp(logits: Tensor, n_iters: int = 20, log_space: bool = True) -> Tensor:
    r"""Project ``exp(logits)`` towards the doubly stochastic matrices by Sinkhorn--Knopp iterations.

    Parameters
    ----------
    logits : Tensor
        Shape ``(..., n, n)``.
    n_iters : int, default 20
        Column-then-row normalisation rounds (>= 1); differentiable through the unrolled loop.
    log_space : bool, default True
        Normalise with log-sum-exp (stable for logits of any magnitude); ``False`` exponentiates
        (after subtracting the maximum) and divides.

    Returns
    -------
    Tensor
        Shape ``(..., n, n)``, non-negative, rows summing to 1 exactly, columns approximately.
    """
    check_int("n_iters", n_iters, low=1)
    check_tensor("logits", logits)
    if logits.ndim < 2 or logits.shape[-1] != logits.shape[-2]:
        raise ValueError(f"logits must have shape (..., n, n), got {tuple(logits.shape)}")
    return _sinkhorn(logits, n_iters, log_space)


def _sinkhorn(logits: Tensor, n_iters: int, log_space: bool = True) -> Tensor:
    """:func:`sinkhorn_knopp` without the argument checks (for callers that validated their input)."""
    if log_space:
        z = logits
        for _ in range(n_iters):
            z = z - torch.logsumexp(z, dim=-2, keepdim=True)
            z = z - torch.logsumexp(z, dim=-1, keepdim=True)
        return z.exp()
    m = torch.exp(logits - logits.amax(dim=(-2, -1), keepdim=True))
    for _ in range(n_iters):
        m = m / m.sum(dim=-2, keepdim=True).clamp_min(1e-30)
        m = m / m.sum(dim=-1, keepdim=True).clamp_min(1e-30)
    return m


def expand_streams(x: Tensor, n: int) -> Tensor:
    """Replicate a token sequence into ``n`` streams: ``(B, N, d) -> (B, N, n, d)``."""
    check_int("n", n, low=1)
    if x.ndim != 3:
        raise ValueError(f"x must have shape (B, N, d), got {tuple(x.shape)}")
    return x.unsqueeze(2).expand(-1, -1, n, -1).contiguous()


def collapse_streams(x: Tensor, reduce: str = "sum") -> Tensor:
    """Merge streams: ``(B, N, n, d) -> (B, N, d)`` by ``"sum"`` (HC/mHC convention) or ``"mean"``."""
    check_choice("reduce", reduce, ("sum", "mean"))
    if x.ndim != 4:
        raise ValueError(f"x must have shape (B, N, n, d), got {tuple(x.shape)}")
    return x.sum(2) if reduce == "sum" else x.mean(2)


def composite_amax_gain(res_maps: Sequence[Tensor]) -> tuple[float, float]:
    r"""mHC's stability diagnostic for the composite map :math:`\prod_l H_{res,l}` (last layer on the left).

    Parameters
    ----------
    res_maps : sequence of Tensor
        Per-layer maps, each ``(..., n, n)`` with identical leading dims (e.g. per token).

    Returns
    -------
    (forward, backward) : tuple of float
        Largest absolute row sum (forward gain) and largest absolute column sum (backward gain) of
        the composite, maximised over the leading dims. Doubly stochastic maps give (1, 1).
    """
    if len(res_maps) == 0:
        raise ValueError("res_maps must not be empty")
    total = res_maps[0]
    for m in res_maps[1:]:
        total = m @ total
    fwd = total.abs().sum(-1).amax()
    bwd = total.abs().sum(-2).amax()
    return float(fwd), float(bwd)


def stream_overhead(dim: int, n: int, dynamic: bool = True) -> int:
    """Mapping parameters of one :class:`MultiStreamResidual`: ``nd(n^2 + 2n) + n^2 + 2n + 3`` (dynamic)."""
    check_int("dim", dim, low=1)
    check_int("n", n, low=1)
    static = n * n + 2 * n
    return (n * dim * (n * n + 2 * n) + static + 3) if dynamic else static


class MultiStreamResidual(nn.Module):
    r"""Replaces ``x = x + F(x)`` when ``x`` carries ``n`` residual streams (mHC / AOT-POT block).

    Parameters
    ----------
    sublayer : nn.Module
        Maps ``(B, N, d) -> (B, N, d)`` (holds its own pre-norm).
    dim : int
        Stream width ``d``.
    n_streams : int, default 4
        Expansion rate ``n >= 1``.
    dynamic : bool, default True
        Input-dependent maps (the :math:`\phi` terms); ``False`` keeps only the static biases.
    constraint : {"sinkhorn", "none", "identity"}
        ``"sinkhorn"``: doubly stochastic :math:`H_{res}` (mHC); ``"none"``: unconstrained
        hyper-connections (``tanh`` dynamic terms, :math:`H_{res} = b_{res} + \alpha\tanh(\cdot)`);
        ``"identity"``: :math:`H_{res} = I` (no stream mixing).
    sinkhorn_iters : int, default 20
    alpha_init : float, default 0.01
        Initial gates :math:`\alpha_*` of the dynamic terms.
    res_diag_init : float, default 4.0
        :math:`b_{res} = s I` (Sinkhorn) so that :math:`H_{res}` starts close to the identity.

    Shapes
    ------
    ``x``: ``(B, N, n, d)`` -> ``(B, N, n, d)``.
    """

    def __init__(
        self,
        sublayer: nn.Module,
        dim: int,
        n_streams: int = 4,
        dynamic: bool = True,
        constraint: str = "sinkhorn",
        sinkhorn_iters: int = 20,
        alpha_init: float = 0.01,
        res_diag_init: float = 4.0,
    ) -> None:
        super().__init__()
        self.sublayer = sublayer
        self.dim = check_int("dim", dim, low=1)
        self.n = check_int("n_streams", n_streams, low=1)
        self.dynamic = bool(dynamic)
        self.constraint = check_choice("constraint", constraint, CONSTRAINTS)
        self.sinkhorn_iters = check_int("sinkhorn_iters", sinkhorn_iters, low=1)
        check_float("alpha_init", alpha_init)
        check_float("res_diag_init", res_diag_init)
        n, nd = self.n, self.n * self.dim
        self.b_pre = nn.Parameter(torch.zeros(n))
        self.b_post = nn.Parameter(torch.zeros(n))
        if self.constraint == "sinkhorn":
            self.b_res = nn.Parameter(res_diag_init * torch.eye(n))
        elif self.constraint == "none":
            self.b_res = nn.Parameter(torch.eye(n))
        else:
            self.register_parameter("b_res", None)
        if self.dynamic:
            self.norm = nn.RMSNorm(nd, elementwise_affine=False)
            n_res = n * n if self.constraint != "identity" else 0
            self.phi = nn.Parameter(torch.randn(nd, 2 * n + n_res) / math.sqrt(nd))
            self.alpha = nn.Parameter(torch.full((3,), float(alpha_init)))
        self._fixed: dict[str, Tensor] | None = None

    @classmethod
    def fixed(cls, sublayer: nn.Module, dim: int, n_streams: int, pre, post, res) -> MultiStreamResidual:
        """A block with constant maps ``pre (n,)``, ``post (n,)``, ``res (n, n)`` (for tests and ablations)."""
        block = cls(sublayer, dim, n_streams, dynamic=False, constraint="identity")
        block.set_fixed_maps(pre, post, res)
        return block

    def set_fixed_maps(self, pre, post, res) -> None:
        """Freeze the maps to constants (``pre (n,)``, ``post (n,)``, ``res (n, n)``)."""
        n = self.n
        pre = torch.as_tensor(pre, dtype=torch.float32).expand(n).clone()
        post = torch.as_tensor(post, dtype=torch.float32).expand(n).clone()
        res = torch.as_tensor(res, dtype=torch.float32)
        if res.shape != (n, n):
            raise ValueError(f"res must have shape ({n}, {n}), got {tuple(res.shape)}")
        self._fixed = {"pre": pre, "post": post, "res": res}

    def maps(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(H_pre (B, N, n), H_post (B, N, n), H_res (B, N, n, n))`` for streams ``x (B, N, n, d)``."""
        b, t, n, _ = x.shape
        if self._fixed is not None:
            f = {k: v.to(x.dtype) for k, v in self._fixed.items()}
            return (f["pre"].expand(b, t, n), f["post"].expand(b, t, n), f["res"].expand(b, t, n, n))
        pre_l = self.b_pre.expand(b, t, n)
        post_l = self.b_post.expand(b, t, n)
        res_l = None if self.b_res is None else self.b_res.expand(b, t, n, n)
        if self.dynamic:
            proj = self.norm(x.reshape(b, t, n * self.dim)) @ self.phi
            if self.constraint == "none":
                proj = torch.tanh(proj)
            pre_l = pre_l + self.alpha[0] * proj[..., :n]
            post_l = post_l + self.alpha[1] * proj[..., n : 2 * n]
            if res_l is not None:
                res_l = res_l + self.alpha[2] * proj[..., 2 * n :].reshape(b, t, n, n)
        if self.constraint == "none":
            h_pre = pre_l + 1.0 / n
            h_post = post_l + 1.0
            h_res = res_l
        else:
            h_pre = (2.0 / n) * torch.sigmoid(pre_l)
            h_post = 2.0 * torch.sigmoid(post_l)
            if self.constraint == "sinkhorn":
                h_res = _sinkhorn(res_l, self.sinkhorn_iters)
            else:
                h_res = torch.eye(n, dtype=x.dtype, device=x.device).expand(b, t, n, n)
        return h_pre, h_post, h_res

    def forward(self, x: Tensor, return_maps: bool = False):
        check_tensor("x", x, like=self)
        if x.ndim != 4 or x.shape[2] != self.n or x.shape[3] != self.dim:
            raise ValueError(
                f"x must have shape (B, N, {self.n}, {self.dim}) = (batch, tokens, n_streams, dim), "
                f"got {tuple(x.shape)}"
            )
        return self._forward(x, return_maps)

    def _forward(self, x: Tensor, return_maps: bool = False):
        """:meth:`forward` without the input checks (the operator transformer validates its own input)."""
        h_pre, h_post, h_res = self.maps(x)
        y = self.sublayer(torch.einsum("btn,btnd->btd", h_pre, x))
        if y.shape != x.shape[:2] + (self.dim,):
            raise ValueError(f"sublayer must return (B, N, {self.dim}), got {tuple(y.shape)}")
        if self._fixed is not None and torch.equal(self._fixed["res"], torch.eye(self.n)):
            mixed = x  # identity mixing, kept exact
        elif self.constraint == "identity" and self._fixed is None:
            mixed = x
        else:
            mixed = torch.einsum("btij,btjd->btid", h_res, x)
        out = mixed + h_post.unsqueeze(-1) * y.unsqueeze(2)
        if return_maps:
            return out, {"pre": h_pre, "post": h_post, "res": h_res}
        return out


class FourierMixer1d(nn.Module):
    r"""AFNO-style token mixer ("Fourier attention") over a 1-D token grid.

    ``rfft`` over tokens, keep the lowest ``modes`` frequencies, apply a block-diagonal two-layer complex
    MLP on channels (GELU on real and imaginary parts), soft-shrink, inverse ``rfft``.

    Shapes
    ------
    ``(B, N, d) -> (B, N, d)``.
    """

    def __init__(
        self, dim: int, modes: int, num_blocks: int = 4, hidden_factor: int = 1, shrink: float = 0.01
    ):
        super().__init__()
        self.dim = check_int("dim", dim, low=1)
        self.modes = check_int("modes", modes, low=1)
        self.num_blocks = check_int("num_blocks", num_blocks, low=1)
        if dim % num_blocks:
            raise ValueError(f"dim ({dim}) must be divisible by num_blocks ({num_blocks})")
        bs = dim // num_blocks
        hid = bs * check_int("hidden_factor", hidden_factor, low=1)
        scale = 0.02
        self.w1 = nn.Parameter(scale * torch.randn(2, num_blocks, bs, hid))
        self.b1 = nn.Parameter(torch.zeros(2, num_blocks, hid))
        self.w2 = nn.Parameter(scale * torch.randn(2, num_blocks, hid, bs))
        self.b2 = nn.Parameter(torch.zeros(2, num_blocks, bs))
        self.shrink = float(shrink)

    def forward(self, x: Tensor) -> Tensor:
        b, n, d = x.shape
        xf = torch.fft.rfft(x, dim=1, norm="ortho")
        m = min(self.modes, xf.shape[1])
        z = xf[:, :m].reshape(b, m, self.num_blocks, d // self.num_blocks)
        w1 = torch.complex(self.w1[0], self.w1[1])
        w2 = torch.complex(self.w2[0], self.w2[1])
        h = torch.einsum("bmki,kio->bmko", z, w1) + torch.complex(self.b1[0], self.b1[1])
        h = torch.complex(nn.functional.gelu(h.real), nn.functional.gelu(h.imag))
        o = torch.einsum("bmko,koi->bmki", h, w2) + torch.complex(self.b2[0], self.b2[1])
        o = torch.complex(
            nn.functional.softshrink(o.real, self.shrink), nn.functional.softshrink(o.imag, self.shrink)
        )
        out = torch.zeros_like(xf)
        out[:, :m] = o.reshape(b, m, d)
        return torch.fft.irfft(out, n=n, dim=1, norm="ortho")


class _PreNorm(nn.Module):
    def __init__(self, dim: int, fn: nn.Module) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x):
        return self.fn(self.norm(x))


class _Residual(nn.Module):
    """Plain single-stream residual ``x + F(x)`` on ``(B, N, d)``."""

    def __init__(self, sublayer: nn.Module) -> None:
        super().__init__()
        self.sublayer = sublayer

    def forward(self, x):
        return x + self.sublayer(x)


class OperatorTransformer(nn.Module):
    r"""Small DPOT-style operator transformer with standard or multi-stream (AOT-POT) residuals.

    Patchify space (patch ``p``) with the ``T_in`` past frames folded into channels (a learned temporal
    mixing), ``depth`` blocks of [Fourier mixer, channel MLP d->4d->d] each with pre-norm, final norm,
    linear head back to ``C x p`` values per token. The network predicts the increment over the last
    input frame. No positional embedding: every layer is translation-equivariant, as the periodic
    PDEs are.

    Parameters
    ----------
    in_channels, out_channels : int
        Physical channels ``C`` of the input and output frames.
    t_in : int
        Number of past frames.
    patch : int
        Spatial patch size (``X % patch == 0``).
    dim, depth, modes : int
        Width, number of blocks (2 sub-layers each), Fourier modes kept.
    residual : {"standard", "aot", "hc", "static"}
        ``"aot"``: Sinkhorn-constrained dynamic multi-stream residual; ``"hc"``: unconstrained
        hyper-connections; ``"static"``: Sinkhorn with static maps only; ``"standard"``: ``x + F(x)``.
    n_streams : int, default 4
    spatial_dims : int, default 1
        Only 1 is implemented.
    alpha_init : float, default 0.01
        Initial gates of the dynamic stream maps (mHC's small value; see :class:`MultiStreamResidual`).
    stream_init : {"mean", "cyclic"}, default "mean"
        ``"mean"``: every sub-layer reads the stream mean at initialisation (``b_pre = 0``).
        ``"cyclic"``: sub-layer ``l`` reads mostly stream ``l mod n`` (``b_pre = 2 (2 e_{l mod n} - 1)``,
        the hyper-connections initialisation), so the backward pass differs across streams and the
        replicated streams can diverge during training.

    Shapes
    ------
    ``forward``: ``(B, T_in, C, X) -> (B, C, X)``; ``rollout``: ``-> (B, steps, C, X)``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        t_in: int,
        patch: int,
        dim: int,
        depth: int,
        modes: int,
        residual: str = "standard",
        n_streams: int = 4,
        spatial_dims: int = 1,
        mlp_ratio: int = 4,
        num_blocks: int = 4,
        sinkhorn_iters: int = 20,
        alpha_init: float = 0.01,
        stream_init: str = "mean",
    ) -> None:
        super().__init__()
        check_choice("stream_init", stream_init, ("mean", "cyclic"))
        self.in_channels = check_int("in_channels", in_channels, low=1)
        self.out_channels = check_int("out_channels", out_channels, low=1)
        self.t_in = check_int("t_in", t_in, low=1)
        self.patch = check_int("patch", patch, low=1)
        self.dim = check_int("dim", dim, low=1)
        self.depth = check_int("depth", depth, low=1)
        self.residual = check_choice("residual", residual, RESIDUALS)
        self.n_streams = check_int("n_streams", n_streams, low=1) if residual != "standard" else 1
        if check_int("spatial_dims", spatial_dims, low=1) != 1:
            raise NotImplementedError("OperatorTransformer implements 1-D space only (spatial_dims=1)")
        if in_channels != out_channels:
            raise ValueError("in_channels must equal out_channels (the model predicts an increment)")
        self.embed = nn.Conv1d(t_in * in_channels, dim, kernel_size=patch, stride=patch)
        sublayers = []
        for _ in range(depth):
            sublayers.append(_PreNorm(dim, FourierMixer1d(dim, modes, num_blocks)))
            sublayers.append(
                _PreNorm(
                    dim,
                    nn.Sequential(
                        nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim)
                    ),
                )
            )
        self.final_norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, out_channels * patch)
        # Stream maps are created after every other weight, so a standard and an AOT model built from
        # the same seed share all sub-layer, embedding and head weights.
        if residual == "standard":
            self.layers = nn.ModuleList(_Residual(s) for s in sublayers)
        else:
            kw = {
                "aot": dict(constraint="sinkhorn", dynamic=True),
                "hc": dict(constraint="none", dynamic=True),
                "static": dict(constraint="sinkhorn", dynamic=False),
            }[residual]
            self.layers = nn.ModuleList(
                MultiStreamResidual(
                    s, dim, n_streams, sinkhorn_iters=sinkhorn_iters, alpha_init=alpha_init, **kw
                )
                for s in sublayers
            )
            if stream_init == "cyclic":
                with torch.no_grad():
                    for i, layer in enumerate(self.layers):
                        layer.b_pre.copy_(
                            2.0
                            * (
                                2.0
                                * nn.functional.one_hot(
                                    torch.tensor(i % self.n_streams), self.n_streams
                                ).float()
                                - 1.0
                            )
                        )

    def _check(self, u_past: Tensor) -> None:
        check_tensor("u_past", u_past, like=self)
        if (
            u_past.ndim != 4
            or u_past.shape[0] == 0
            or u_past.shape[1] != self.t_in
            or u_past.shape[2] != self.in_channels
        ):
            raise ValueError(
                f"u_past must have shape (B, {self.t_in}, {self.in_channels}, X) = (batch, t_in, channels, space), "
                f"got {tuple(u_past.shape)}"
            )
        if u_past.shape[-1] % self.patch:
            raise ValueError(f"spatial size {u_past.shape[-1]} must be divisible by patch={self.patch}")

    def forward(self, u_past: Tensor, return_maps: bool = False):
        self._check(u_past)
        b, t, c, x = u_past.shape
        tokens = self.embed(u_past.reshape(b, t * c, x)).transpose(1, 2)  # (B, N, d)
        res_maps = []
        if self.residual == "standard":
            h = tokens
            for layer in self.layers:
                h = layer(h)
        else:
            h = expand_streams(tokens, self.n_streams)
            for layer in self.layers:
                h, maps = layer._forward(h, return_maps=True)
                res_maps.append(maps["res"])
            h = collapse_streams(h, "sum")
        delta = self.head(self.final_norm(h))  # (B, N, C * p)
        delta = delta.reshape(b, -1, c, self.patch).permute(0, 2, 1, 3).reshape(b, c, x)
        out = u_past[:, -1] + delta
        if not bool(torch.isfinite(out).all()):
            raise ValueError(
                f"the forward pass produced NaN/inf: u_past is too large for {out.dtype} or the weights are not finite"
            )
        return (out, res_maps) if return_maps else out

    @torch.no_grad()
    def rollout(self, u_past: Tensor, steps: int) -> Tensor:
        """Autoregressive prediction of ``steps`` frames: ``(B, T_in, C, X) -> (B, steps, C, X)``."""
        check_int("steps", steps, low=1)
        self._check(u_past)
        window, frames = u_past, []
        for _ in range(steps):
            nxt = self(window)
            frames.append(nxt)
            window = torch.cat([window[:, 1:], nxt.unsqueeze(1)], dim=1)
        return torch.stack(frames, dim=1)


def ar_denoising_loss(
    model: nn.Module,
    u_past: Tensor,
    u_next: Tensor,
    noise: float = 1e-2,
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""DPOT's auto-regressive denoising objective: relative L2 of the next frame from noised inputs.

    Gaussian noise of scale ``noise * std(u_past)`` (per sample) is added to the input frames.
    """
    check_float("noise", noise, 0.0)
    if noise > 0:
        std = u_past.flatten(1).std(dim=1).view(-1, 1, 1, 1)
        eps = torch.randn(u_past.shape, generator=generator, dtype=u_past.dtype)
        u_past = u_past + noise * std * eps
    return relative_l2(model(u_past), u_next)


def match_width(target_params: int, step: int = 4, **kwargs) -> int:
    """Smallest width (a multiple of ``step``) whose standard :class:`OperatorTransformer` has at least
    ``target_params`` parameters (the parameter-matched wider baseline)."""
    check_int("target_params", target_params, low=1)
    dim = kwargs.pop("dim", step)
    kwargs["residual"] = "standard"
    while True:
        n = sum(p.numel() for p in OperatorTransformer(dim=dim, **kwargs).parameters())
        if n >= target_params:
            return dim
        dim += step

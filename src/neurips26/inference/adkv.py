"""ADKV: adaptive delta quantisation of the KV cache with EMA-tracked, stream-embedded metadata.

Paper: "ADKV" (NeurIPS 2026 submission; seed file ``004_01f475bc147a144d.txt``, paragraph beginning
"The KV cache is a major"). Static group-wise KV quantisation stores a zero-point and a scale for every
group, so its metadata grows with the context length. ADKV quantises each channel of the key and value
streams like adaptive differential PCM: a per-channel prediction (zero-point) and step (scale) are
updated from the *reconstructed* values, so the decoder regenerates them from the codes alone and only
a constant-size initial state plus per-channel parameters are stored. The encoder/decoder is an RNN
whose rates are calibrated by SGD (straight-through rounding) to minimise attention-output error.

Math (per layer, head and channel; ``b`` bits, ``L = 2**b`` levels, offset ``o = L / 2``)
--------------------------------------------------------------------------------------------------
Initial state from the first ``B0`` tokens: ``z_1 = mean(x)``, ``a_1 = mean|x - z_1|`` (both stored in
fp16), ``s_1 = max(gamma * a_1 / o, 1e-6)``, ``s_min = s_min_rel * s_1``. For ``t = 1..T``::

    q_t     = clamp(round((x_t - z_t) / s_t) + o, 0, L - 1)           # packed codes
    d_t     = q_t - o ;  x_hat_t = z_t + d_t * s_t                    # |x_t - x_hat_t| <= s_t / 2 unless saturated
    z_{t+1} = z_t + eta_z * (x_hat_t - z_t)                           # EMA prediction (zero-point)
    s_{t+1} = max(s_t * [(1 - eta_s) + eta_s * gamma * |d_t| / o] * omega**sat_t, s_min)

The step update is the EMA of the reconstructed magnitude ``a_{t+1} = (1 - eta_s) a_t + eta_s |x_hat_t -
z_t|`` with ``s = gamma a / o`` written multiplicatively (Jayant/ADPCM step adaptation), with overload
recovery ``omega`` when a code saturates (``sat_t = 1`` if ``q_t`` is ``0`` or ``L - 1``). Because
``s -> max(alpha s, beta)`` maps compose associatively, the decoder is a parallel scan::

    m_t = log((1 - eta_s) + eta_s gamma |d_t| / o) + sat_t log(omega),   L_t = sum_{k<t} m_k
    log s_t = L_t + cummax_t(c),  c_1 = log s_1,  c_k = log s_min - L_k (k >= 2)
    z_t = z_1 + eta_z * sum_{k<t} d_k s_k

The encoder runs the same arithmetic sequentially in float64, so ``decode(encode(x)) == simulate(x)``
bit for bit. Metadata per head and stream: ``(2 + 3) * 16 * d`` bits (``z_1, a_1, eta_z, eta_s,
gamma``), independent of the context length ``T``; static group-wise keys need ``2 * 16 * d *
ceil(T / G)`` bits and per-token values ``2 * 16 * T * ceil(d / G_v)``.

Outlier channels (``n_outliers = n``): per layer, KV head and ADKV stream (keys, and values when they
are ADKV-coded) the ``n`` channels of largest mean square ``mean_t x_{t,c}^2`` are kept exactly in
fp16 and the other ``d' = d - n`` channels are ADKV-coded. The indices are static: chosen by the
calibration from the recorded keys/values (pooled over sequences and tokens), or, without
calibration, from the first ``B0`` tokens of the first prefill pooled over the batch. They cost
``n * ceil(log2 d)`` metadata bits per head and stream (stored bit-packed); the fp16 outlier values
are payload (``16 * n`` bits per token). Metadata then is ``(2 + 3) * 16 * d' + n ceil(log2 d)``.

Decoder checkpoints (``checkpoint_every = C``): the encoder stores its exact float64 accumulators
``(L_t, cmax_t, sum_{k<t} d_k s_k)`` before tokens ``t = C, 2C, ...``; chunk ``j`` then starts its
running sums from checkpoint ``j`` instead of from the start, so the ``ceil(T / C)`` chunks are
scanned in one vectorised pass with the same left-to-right float64 operations, i.e. with bit-identical
output. Cost: ``(T_q - 1) // C`` checkpoints of ``3 * 64 * d'`` bits per head, stream and batch row
(metadata that again grows with ``T``, by ``192 / C`` bits per channel and token).

Calibration treats the quantiser as an RNN: parameters ``eta = sigmoid(.)``, ``gamma = softplus(.)``,
straight-through rounding, truncated BPTT, Adam; loss = relative MSE between causal attention outputs
computed with reconstructed and exact keys/values recorded through a registered
``transformers.AttentionInterface`` function (outlier channels enter the loss exactly). Layers do not
interact, so the calibration splits over worker processes with bit-identical results.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AttentionInterface, Cache
from transformers.cache_utils import BaseQuantizedLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from neurips26.common.checks import check_choice, check_float, check_int, check_tensor
from neurips26.inference.quant import (
    FULL_PRECISION_BITS,
    KIVICache,
    QuantizedKVCacheMixin,
    QuantizedTensor,
    _measured,
    check_kv_states,
    held_bytes_report,
    pack_bits,
    quantize_asym,
    text_config,
    unpack_bits,
)

__all__ = [
    "ADKVConfig",
    "ADKVState",
    "ADKVQuantizer",
    "ADKVLayer",
    "ADKVCache",
    "GroupwiseStaticCache",
    "calibrate_adkv",
    "calibrate_streams",
    "record_qkv",
    "metadata_bits",
    "adkv_memory_formula",
    "select_outlier_channels",
    "index_bits",
]

_META = torch.float16


@dataclass
class ADKVConfig:
    """Configuration of the ADKV quantiser and cache.

    Parameters
    ----------
    bits : int
        Code bit-width, 1..8; 16 disables quantisation (identity path, exact ``DynamicCache``).
    init_tokens : int
        ``B0``: tokens of the first update used for the initial state (all if fewer).
    eta_z, eta_s : float in (0, 1)
        Default EMA rates of the zero-point and of the magnitude (before calibration).
    gamma : float > 0
        Default scale gain: ``s = gamma * a / o``.
    overload_up : float >= 1
        ``omega``, step multiplier after a saturated code (ADPCM overload recovery).
    s_min_rel : float in (0, 1)
        Step floor relative to the initial step.
    value_mode : {"adkv", "per_token"}
        Values quantised by the same EMA scheme, or by static per-token groups (metadata grows with T).
    value_group_size : int
        Channels per group in ``per_token`` value mode.
    residual_length : int
        Most recent tokens kept in full precision (0 = pure ADKV).
    storage : {"packed", "simulated"}
        ``packed`` replays the decoder over the stored codes at every step; ``simulated`` also keeps the
        reconstruction in full precision for speed (identical outputs; memory always measured on codes).
    n_outliers : int >= 0
        Channels per (layer, KV head, stream) kept exactly in fp16 instead of being ADKV-coded: the
        ``n_outliers`` channels of largest mean square, chosen once (by :func:`calibrate_adkv` from the
        calibration keys/values, else from the first ``init_tokens`` tokens of the first prefill, pooled
        over the batch, so uncalibrated rows of one batch share their indices). Their indices are
        static per head. Must be ``< head_dim`` (checked when the head size is known). 0 (default) = no
        outliers (the behaviour of caches without this option, bit for bit).
    checkpoint_every : int >= 1 or None
        ``C``: store the exact decoder state every ``C`` encoded tokens so the packed decoder replays
        the ``ceil(T / C)`` chunks in parallel. Outputs are bit-identical to ``None`` (no checkpoints);
        metadata grows by ``(T - 1) // C`` states of ``3 * 64`` bits per channel.
    """

    bits: int = 2
    init_tokens: int = 16
    eta_z: float = 0.1
    eta_s: float = 0.1
    gamma: float = 2.0
    overload_up: float = 1.5
    s_min_rel: float = 1e-3
    value_mode: str = "adkv"
    value_group_size: int = 32
    residual_length: int = 0
    storage: str = "packed"
    n_outliers: int = 0
    checkpoint_every: int | None = None

    def __post_init__(self) -> None:
        check_int("bits", self.bits)
        if not (1 <= self.bits <= 8 or self.bits == FULL_PRECISION_BITS):
            raise ValueError(f"bits must lie in [1, 8] or be 16 (no quantisation), got {self.bits}")
        check_int("init_tokens", self.init_tokens, low=1)
        check_float("eta_z", self.eta_z, 0.0, 1.0, low_open=True, high_open=True)
        check_float("eta_s", self.eta_s, 0.0, 1.0, low_open=True, high_open=True)
        check_float("gamma", self.gamma, 0.0, low_open=True)
        check_float("overload_up", self.overload_up, 1.0)
        check_float("s_min_rel", self.s_min_rel, 0.0, 1.0, low_open=True, high_open=True)
        check_choice("value_mode", self.value_mode, ("adkv", "per_token"))
        check_int("value_group_size", self.value_group_size, low=1)
        check_int("residual_length", self.residual_length, low=0)
        check_choice("storage", self.storage, ("packed", "simulated"))
        check_int("n_outliers", self.n_outliers, low=0)
        if self.checkpoint_every is not None:
            check_int("checkpoint_every", self.checkpoint_every, low=1)

    def check_head_dim(self, head_dim: int) -> None:
        """Raise ``ValueError`` unless ``n_outliers < head_dim``."""
        if self.n_outliers >= head_dim:
            raise ValueError(f"n_outliers ({self.n_outliers}) must be smaller than head_dim ({head_dim})")

    @property
    def offset(self) -> int:
        return (1 << self.bits) // 2

    def default_params(self, num_channels: int, lead: Sequence[int] = ()) -> torch.Tensor:
        """Default parameters ``Tensor[*lead, 3, num_channels]`` = (eta_z, eta_s, gamma)."""
        base = torch.tensor([self.eta_z, self.eta_s, self.gamma], dtype=torch.float32)
        return base.view(*([1] * len(lead)), 3, 1).expand(*lead, 3, num_channels).clone()


@dataclass
class ADKVState:
    """Decoder/encoder state of a stream of shape ``[..., T, D]``.

    ``z1``, ``a1`` (``Tensor[..., D]``, fp16) are the stored initial state; ``log_acc``, ``cmax``,
    ``dsum`` (float64) and ``t`` (tokens encoded so far) are the encoder's running accumulators (not
    stored: recomputable from the codes). ``checkpoints`` (``Tensor[..., K, 3, D]`` float64, only with
    ``checkpoint_every = C``) holds the exact accumulators ``(log_acc, cmax, dsum)`` before tokens
    ``C, 2C, ..., K C`` (0-based): these are stored metadata.
    """

    z1: torch.Tensor
    a1: torch.Tensor
    log_acc: torch.Tensor | None = None
    cmax: torch.Tensor | None = None
    dsum: torch.Tensor | None = None
    t: int = 0
    checkpoints: torch.Tensor | None = None

    def _fields(self, fn) -> ADKVState:
        f = lambda v: None if v is None else fn(v)  # noqa: E731
        return ADKVState(
            f(self.z1),
            f(self.a1),
            f(self.log_acc),
            f(self.cmax),
            f(self.dsum),
            self.t,
            f(self.checkpoints),
        )

    def index_select(self, index: torch.Tensor, dim: int = 0) -> ADKVState:
        """Select along the batch dimension ``dim`` of every field."""
        return self._fields(lambda v: v.index_select(dim, index.to(v.device)))

    def repeat_interleave(self, repeats: int, dim: int = 0) -> ADKVState:
        """Repeat along the batch dimension ``dim`` of every field."""
        return self._fields(lambda v: v.repeat_interleave(repeats, dim=dim))

    def select(self, i: int) -> ADKVState:
        """The state of entry ``i`` of the leading dimension of every field."""
        return self._fields(lambda v: v[i])


def _ste_round(u: torch.Tensor) -> torch.Tensor:
    return u + (torch.round(u) - u).detach()


def _check_fp16_range(key_states: torch.Tensor, value_states: torch.Tensor) -> None:
    """ADKV stores its initial states in fp16: |K|, |V| above 65504 cannot be represented."""
    limit = torch.finfo(_META).max
    for name, t in (("key_states", key_states), ("value_states", value_states)):
        if bool((t.abs() > limit).any()):
            raise ValueError(f"{name} exceeds the {_META} range of ADKV's stored state (|x| > {limit:g})")


class ADKVQuantizer:
    """Per-channel adaptive delta quantiser of a stream ``x: Tensor[..., T, D]``.

    Parameters
    ----------
    num_channels : int
        ``D``.
    config : ADKVConfig
        ``bits`` must lie in [1, 8].
    params : Tensor[..., 3, D], optional
        Per-channel ``(eta_z, eta_s, gamma)`` broadcastable against the stream's leading dimensions
        (e.g. ``[heads, 3, D]`` for ``[batch, heads, T, D]`` streams). Rounded to fp16 (stored form)
        unless ``differentiable=True`` is used in :meth:`simulate`. Defaults from ``config``.
    """

    def __init__(self, num_channels: int, config: ADKVConfig, params: torch.Tensor | None = None):
        self.num_channels = check_int("num_channels", num_channels, low=1)
        if not isinstance(config, ADKVConfig):
            raise TypeError(f"config must be an ADKVConfig, got {type(config).__name__}")
        if not 1 <= config.bits <= 8:
            raise ValueError(f"ADKVQuantizer needs bits in [1, 8], got {config.bits}")
        self.config = config
        if params is None:
            params = config.default_params(num_channels)
        if not isinstance(params, torch.Tensor) or params.dim() < 2 or params.shape[-2] != 3:
            raise ValueError("params must be a Tensor[..., 3, D] of (eta_z, eta_s, gamma)")
        if params.shape[-1] != num_channels:
            raise ValueError(f"params have {params.shape[-1]} channels but num_channels is {num_channels}")
        self.params = params
        if not params.requires_grad:
            self._check_params(params)

    @staticmethod
    def _check_params(params: torch.Tensor) -> None:
        eta = params[..., :2, :]
        if not bool(((eta > 0) & (eta < 1)).all()):
            raise ValueError("eta_z and eta_s in params must lie in (0, 1)")
        if not bool((params[..., 2, :] > 0).all()):
            raise ValueError("gamma in params must be > 0")

    # -- parameters ---------------------------------------------------------------------------
    def _split(self, params: torch.Tensor, dtype: torch.dtype, stored: bool):
        p = params.to(_META).to(dtype) if stored else params.to(dtype)
        return p[..., 0, :], p[..., 1, :], p[..., 2, :]

    # -- state --------------------------------------------------------------------------------
    def init_state(self, x_prefix: torch.Tensor) -> ADKVState:
        """Initial state from the first tokens ``x_prefix: Tensor[..., T0, D]`` (fp16 z_1 and a_1)."""
        check_tensor("x_prefix", x_prefix)
        if x_prefix.dim() < 2 or x_prefix.shape[-1] != self.num_channels or x_prefix.shape[-2] < 1:
            raise ValueError(
                f"x_prefix must be [..., T0 >= 1, {self.num_channels}], got {tuple(x_prefix.shape)}"
            )
        if bool((x_prefix.abs() > torch.finfo(_META).max).any()):
            raise ValueError(f"x_prefix exceeds the {_META} range of the stored initial state (|x| > 65504)")
        xp = x_prefix.detach().to(torch.float64)
        z1 = xp.mean(-2)
        a1 = (xp - z1.unsqueeze(-2)).abs().mean(-2)
        return ADKVState(z1.to(_META), a1.to(_META))

    def _start(
        self, state: ADKVState, gamma: torch.Tensor, dtype: torch.dtype, a1: torch.Tensor | None = None
    ):
        o = self.config.offset
        a = state.a1.to(dtype) if a1 is None else a1
        s1 = torch.clamp(gamma * a / o, min=1e-6)
        log_smin = torch.log(s1 * self.config.s_min_rel)
        return s1, log_smin

    # -- core recurrence ----------------------------------------------------------------------
    def _run(
        self,
        x: torch.Tensor,
        state: ADKVState,
        params: torch.Tensor,
        dtype: torch.dtype,
        stored: bool,
        ste: bool = False,
        bptt: int | None = None,
        z1a1: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, ADKVState]:
        """Sequential encoder; returns codes ``uint8 [..., T, D]``, ``x_hat [..., T, D]`` and end state."""
        cfg = self.config
        o = cfg.offset
        top = (1 << cfg.bits) - 1
        eta_z, eta_s, gamma = self._split(params, dtype, stored)
        z1 = state.z1.to(dtype) if z1a1 is None else z1a1[0]
        s1, log_smin = self._start(state, gamma, dtype, None if z1a1 is None else z1a1[1])
        shape = torch.broadcast_shapes(x.shape[:-2] + x.shape[-1:], z1.shape, eta_z.shape)
        zeros = torch.zeros(shape, dtype=dtype, device=x.device)
        if state.log_acc is None:
            log_acc, cmax, dsum = zeros, (zeros + torch.log(s1)), zeros
        else:
            log_acc, cmax, dsum = (v.to(dtype) for v in (state.log_acc, state.cmax, state.dsum))
        log_omega = math.log(cfg.overload_up)
        keep = 1.0 - eta_s
        gain = eta_s * gamma / o
        xs = x.to(dtype)
        codes, recon, ckpts = [], [], []
        every = cfg.checkpoint_every if not ste else None
        for t in range(xs.shape[-2]):
            if bptt and t and t % bptt == 0:
                log_acc, cmax, dsum = log_acc.detach(), cmax.detach(), dsum.detach()
            if every and (state.t + t) and (state.t + t) % every == 0:
                ckpts.append(torch.stack([log_acc, cmax, dsum], -2).detach())
            s = torch.exp(log_acc + cmax)
            z = z1 + eta_z * dsum
            u = (xs[..., t, :] - z) / s
            r = _ste_round(u) if ste else torch.round(u)
            q = torch.clamp(r + o, 0, top)
            d = q - o
            ds = d * s
            recon.append(z + ds)
            codes.append(q.detach())
            dsum = dsum + ds
            sat = ((q.detach() == 0) | (q.detach() == top)).to(dtype)
            log_acc = log_acc + (torch.log(keep + gain * d.abs()) + sat * log_omega)
            cmax = torch.maximum(cmax, log_smin - log_acc)
        checkpoints = state.checkpoints
        if ckpts:
            new_ck = torch.stack(ckpts, -3)  # [..., K_new, 3, D]
            checkpoints = new_ck if checkpoints is None else torch.cat([checkpoints.to(dtype), new_ck], -3)
        end = ADKVState(
            state.z1,
            state.a1,
            log_acc.detach(),
            cmax.detach(),
            dsum.detach(),
            state.t + xs.shape[-2],
            checkpoints,
        )
        q_all = torch.stack(codes, -2).to(torch.uint8) if codes else torch.zeros_like(xs, dtype=torch.uint8)
        xh = torch.stack(recon, -2) if recon else xs.clone()
        return q_all, xh, end

    def _scan(
        self,
        codes: torch.Tensor,
        state: ADKVState,
        params: torch.Tensor,
        checkpoints: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Chunked parallel-scan decoder over ``codes: uint8 [..., T, D]`` (float64).

        Returns ``(z, s, d)`` per token (zero-point, step, signed code). Without ``checkpoints`` the
        whole stream is one chunk scanned from the initial state; with them (``Tensor[..., K, 3, D]``
        exact accumulators before tokens ``C, 2C, ...``) the ``ceil(T / C)`` chunks are scanned at once
        (vectorised over a chunk dimension). Both follow the encoder's left-to-right float64 operation
        order (a chunk's running sums start from the checkpointed sums), hence identical bits.
        """
        cfg = self.config
        dtype = torch.float64
        o = cfg.offset
        top = (1 << cfg.bits) - 1
        eta_z, eta_s, gamma = self._split(params, dtype, True)
        z1 = state.z1.to(dtype)
        s1, log_smin = self._start(state, gamma, dtype)
        T, D = codes.shape[-2], codes.shape[-1]
        lead = torch.broadcast_shapes(codes.shape[:-2], z1.shape[:-1], eta_z.shape[:-1])
        if T == 0:
            empty = torch.zeros(*lead, 0, D, dtype=dtype, device=codes.device)
            return empty, empty, empty
        size = T
        if checkpoints is not None and cfg.checkpoint_every:
            size = cfg.checkpoint_every
        n = math.ceil(T / size)
        if n > 1 and checkpoints.shape[-3] < n - 1:
            raise ValueError(
                f"decoding {T} tokens in chunks of {size} needs {n - 1} checkpoints, got {checkpoints.shape[-3]}"
            )
        d = codes.to(dtype) - o
        sat = ((codes == 0) | (codes == top)).to(dtype)
        pad = n * size - T
        if pad:
            d = torch.nn.functional.pad(d, (0, 0, 0, pad))
            sat = torch.nn.functional.pad(sat, (0, 0, 0, pad))
        full = (*lead, n, size, D)
        d = d.reshape(*d.shape[:-2], n, size, D).expand(full)
        sat = sat.reshape(*sat.shape[:-2], n, size, D).expand(full)
        keep = (1.0 - eta_s)[..., None, None, :]
        gain = (eta_s * gamma / o)[..., None, None, :]
        m = torch.log(keep + gain * d.abs())
        m = m + sat * math.log(cfg.overload_up)
        first = (*lead, 1, 1, D)
        zero = torch.zeros(first, dtype=dtype, device=codes.device)
        acc0, cmax0, dsum0 = zero, torch.log(s1).expand(*lead, D).reshape(first), zero
        if n > 1:
            ck = checkpoints[..., : n - 1, :, :].to(dtype).unsqueeze(-2)  # [..., n-1, 3, 1, D]
            rest = (*lead, n - 1, 1, D)
            acc0 = torch.cat([acc0, ck[..., 0, :, :].expand(rest)], -3)
            cmax0 = torch.cat([cmax0, ck[..., 1, :, :].expand(rest)], -3)
            dsum0 = torch.cat([dsum0, ck[..., 2, :, :].expand(rest)], -3)
        log_acc = torch.cumsum(torch.cat([acc0, m[..., : size - 1, :]], -2), -2)
        c = log_smin[..., None, None, :] - log_acc
        c = torch.cat([cmax0, c[..., 1:, :]], -2)
        cmax = torch.cummax(c, dim=-2).values
        s = torch.exp(log_acc + cmax)
        ds = d * s
        dsum = torch.cumsum(torch.cat([dsum0, ds[..., : size - 1, :]], -2), -2)
        z = z1[..., None, None, :] + eta_z[..., None, None, :] * dsum
        flat = lambda v: v.reshape(*lead, n * size, D)[..., :T, :]  # noqa: E731
        return flat(z), flat(s), flat(d)

    def _replay(
        self,
        codes: torch.Tensor,
        state: ADKVState,
        params: torch.Tensor,
        checkpoints: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Reconstruction ``z_t + d_t s_t`` (float64) of unpacked ``codes: uint8 [..., T, D]``."""
        z, s, d = self._scan(codes, state, params, checkpoints)
        return z + d * s

    # -- public API ---------------------------------------------------------------------------
    def encode(self, x: torch.Tensor, state: ADKVState) -> tuple[torch.Tensor, ADKVState]:
        """Encode ``x: Tensor[..., T, D]`` from ``state``.

        Returns
        -------
        codes : Tensor[..., T, ceil(D * bits / 8)] uint8 (bit-packed per token)
        end_state : ADKVState (continue encoding from here)
        """
        self._check_stream(x, state)
        q, _, end = self._run(x, state, self.params, torch.float64, stored=True)
        return pack_bits(q, self.config.bits), end

    def decode(
        self,
        codes: torch.Tensor,
        T: int,
        init_state: ADKVState | None,
        checkpoints: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Reconstruct ``Tensor[..., T, D]`` (float64 -> float32) from packed codes and the initial state.

        ``codes`` must start at the token the initial state was built for. ``checkpoints``
        (``end_state.checkpoints`` of an encoder with ``checkpoint_every``) switch to chunk-parallel
        replay with bit-identical output.
        """
        if init_state is None:
            raise RuntimeError("decode needs the initial state (init_state) the stream was encoded from")
        check_int("T", T, low=0)
        q = unpack_bits(codes, self.config.bits, self.num_channels)
        if q.shape[-2] != T:
            raise ValueError(f"codes hold {q.shape[-2]} tokens, T is {T}")
        return self._replay(q, init_state, self.params, checkpoints).to(torch.float32)

    def decode_codes(
        self, q: torch.Tensor, init_state: ADKVState | None, checkpoints: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Reconstruct from unpacked codes ``uint8 [..., T, D]`` (float64)."""
        if init_state is None:
            raise RuntimeError("decode needs the initial state (init_state) the stream was encoded from")
        return self._replay(q, init_state, self.params, checkpoints)

    def decode_states(
        self, q: torch.Tensor, init_state: ADKVState | None, checkpoints: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The decoder's zero-points ``z_t`` and steps ``s_t`` (float64 ``[..., T, D]`` each), regenerated
        from unpacked codes ``uint8 [..., T, D]`` and the initial state alone."""
        if init_state is None:
            raise RuntimeError("decode needs the initial state (init_state) the stream was encoded from")
        z, s, _ = self._scan(q, init_state, self.params, checkpoints)
        return z, s

    def simulate(
        self,
        x: torch.Tensor,
        state: ADKVState,
        differentiable: bool = False,
        bptt: int | None = None,
    ) -> torch.Tensor:
        """Encode then reconstruct in one pass; returns ``x_hat: Tensor[..., T, D]`` in ``x.dtype``.

        With ``differentiable=False`` the arithmetic (float64, fp16-rounded parameters) is identical to
        ``decode(encode(x))``. With ``differentiable=True`` rounding uses a straight-through estimator,
        parameters are used unrounded in ``x.dtype`` and gradients flow to ``self.params`` (and ``x``);
        ``bptt`` truncates backpropagation through time every ``bptt`` tokens.
        """
        self._check_stream(x, state)
        if differentiable:
            _, xh, _ = self._run(x, state, self.params, x.dtype, stored=False, ste=True, bptt=bptt)
            return xh
        _, xh, _ = self._run(x, state, self.params, torch.float64, stored=True)
        return xh.to(x.dtype)

    def encode_raw(self, x: torch.Tensor, state: ADKVState):
        """Unpacked codes ``uint8 [..., T, D]``, reconstruction (float64) and end state."""
        return self._run(x, state, self.params, torch.float64, stored=True)

    def _check_stream(self, x: torch.Tensor, state: ADKVState | None) -> None:
        if state is None:
            raise RuntimeError("an initial ADKVState is required (use init_state)")
        check_tensor("x", x)
        if x.dim() < 2 or x.shape[-1] != self.num_channels:
            raise ValueError(f"x must be [..., T, {self.num_channels}], got {tuple(x.shape)}")


# ----------------------------------------------------------------------------------------- outliers
def index_bits(head_dim: int) -> int:
    """Bits of one stored outlier channel index: ``ceil(log2(head_dim))`` (at least 1)."""
    return max(1, math.ceil(math.log2(check_int("head_dim", head_dim, low=1))))


def select_outlier_channels(x: torch.Tensor, n_outliers: int, pool_dims: Sequence[int] = ()) -> torch.Tensor:
    """Indices of the ``n_outliers`` channels of largest mean square of ``x: Tensor[..., T, D]``.

    The mean runs over the token axis and the (leading) ``pool_dims``, e.g. the batch and sequence
    dimensions; the result has the remaining leading shape plus ``n_outliers`` (ascending indices).
    """
    check_int("n_outliers", n_outliers, low=0)
    if n_outliers >= x.shape[-1]:
        raise ValueError(f"n_outliers ({n_outliers}) must be smaller than head_dim ({x.shape[-1]})")
    score = x.detach().to(torch.float64).pow(2).mean(-2)
    dims = sorted({d % x.dim() for d in pool_dims})
    if dims:
        score = score.mean(dim=tuple(dims))
    return torch.sort(torch.topk(score, n_outliers, dim=-1).indices, dim=-1).values


def _pack_indices(idx: torch.Tensor, width: int) -> torch.Tensor:
    """Pack non-negative integers (any shape) into a flat uint8 bit stream of ``width`` bits each."""
    bits = (idx.reshape(-1, 1) >> torch.arange(width, device=idx.device)) & 1
    stream = bits.reshape(-1).to(torch.uint8)
    pad = (-stream.numel()) % 8
    stream = torch.nn.functional.pad(stream, (0, pad)).reshape(-1, 8).to(torch.int32)
    return (stream << torch.arange(8, dtype=torch.int32, device=idx.device)).sum(-1).to(torch.uint8)


def _unpack_indices(packed: torch.Tensor, width: int, shape: Sequence[int]) -> torch.Tensor:
    n = math.prod(shape)
    bits = (packed.to(torch.int64).unsqueeze(-1) >> torch.arange(8, device=packed.device)) & 1
    bits = bits.reshape(-1)[: n * width].reshape(n, width)
    return (bits << torch.arange(width, device=packed.device)).sum(-1).reshape(*shape)


def _complement(outliers: torch.Tensor, d: int) -> torch.Tensor:
    """Ascending indices of the channels not in ``outliers: Long[..., n]``: ``Long[..., d - n]``."""
    keep = torch.ones(*outliers.shape[:-1], d, dtype=torch.int8, device=outliers.device)
    keep.scatter_(-1, outliers, 0)
    order = torch.argsort(keep, dim=-1, descending=True, stable=True)
    return order[..., : d - outliers.shape[-1]]


def _check_outlier_indices(name: str, idx: torch.Tensor, kv_heads: int, head_dim: int, n: int) -> None:
    if not isinstance(idx, torch.Tensor) or tuple(idx.shape) != (kv_heads, n):
        shape = tuple(idx.shape) if isinstance(idx, torch.Tensor) else type(idx).__name__
        raise ValueError(f"{name} must have shape ({kv_heads}, {n}) (kv_heads, n_outliers), got {shape}")
    if idx.dtype.is_floating_point or idx.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor, got {idx.dtype}")
    if n and (int(idx.min()) < 0 or int(idx.max()) >= head_dim):
        raise ValueError(
            f"{name} must lie in [0, {head_dim}), got values in [{int(idx.min())}, {int(idx.max())}]"
        )
    if n and bool((torch.sort(idx, -1).values.diff(dim=-1) == 0).any()):
        raise ValueError(f"{name} must hold distinct channels per head")


# -------------------------------------------------------------------------------------------- cache
class ADKVLayer(BaseQuantizedLayer):
    """One decoder layer's ADKV cache (a ``transformers.cache_utils`` quantised layer).

    Keys (and values in ``value_mode="adkv"``) are encoded token by token as they leave the
    full-precision residual window; codes are bit-packed per token (``[batch, T, ceil(H*D*b/8)]``
    bytes). The initial state is taken from the first ``init_tokens`` tokens of the first update. With
    ``bits == 16`` the layer stores full precision and behaves exactly like ``DynamicLayer``.

    With ``n_outliers = n > 0`` each ADKV-coded stream (keys, and values in ``value_mode="adkv"``)
    keeps ``n`` channels per head exactly in fp16 (``key_outlier_values``/``value_outlier_values``,
    ``[batch, kv_heads, T, n]``, payload); the remaining ``head_dim - n`` channels are ADKV-coded. The
    indices (``outliers``: ``Long[S, kv_heads, n]``) are stored once, bit-packed at
    ``ceil(log2(head_dim))`` bits each (``outlier_index_codes``, metadata). With ``checkpoint_every``
    the decoder state is checkpointed every ``C`` tokens (``stream_state.checkpoints``, metadata) and
    the packed decoder replays chunks in parallel.

    Parameters
    ----------
    config : ADKVConfig
    key_params, value_params : Tensor[kv_heads, 3, head_dim], optional
        Calibrated per-channel parameters (defaults from ``config``).
    key_outliers, value_outliers : LongTensor[kv_heads, n_outliers], optional
        Calibrated outlier channels (otherwise chosen from the first prefill's initial tokens).
    """

    def __init__(
        self,
        config: ADKVConfig,
        key_params: torch.Tensor | None = None,
        value_params: torch.Tensor | None = None,
        key_outliers: torch.Tensor | None = None,
        value_outliers: torch.Tensor | None = None,
    ):
        super().__init__()
        self.config = config
        self.key_params = key_params
        self.value_params = value_params
        self.key_outliers = key_outliers
        self.value_outliers = value_outliers
        self._clear()

    def _clear(self) -> None:
        self.key_codes: torch.Tensor | None = None  # [B, Tq, nbytes]
        self.value_codes: torch.Tensor | None = None
        self.value_blocks: list[QuantizedTensor] = []  # per_token value mode
        self.stream_state: ADKVState | None = None  # fields [S, B, H, D']; S = 2 (K, V) or 1 (K)
        self._sim_k: torch.Tensor | None = None
        self._sim_v: torch.Tensor | None = None
        self._deq_v_tok: torch.Tensor | None = None
        self.key_outlier_values: torch.Tensor | None = None  # [B, H, Tq, n] fp16
        self.value_outlier_values: torch.Tensor | None = None
        self.outliers: torch.Tensor | None = None  # [S, H, n] (long), set when the streams start
        self.outlier_index_codes: torch.Tensor | None = None  # packed indices (stored form)
        self._normal: torch.Tensor | None = None  # [S, H, D - n]
        self.encoded_length = 0

    @property
    def n_streams(self) -> int:
        return 2 if self.config.value_mode == "adkv" else 1

    @property
    def is_croppable(self) -> bool:  # type: ignore[override]
        return self.encoded_length == 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        if key_states.dim() != 4:
            raise ValueError("key_states must be [batch, kv_heads, seq, head_dim]")
        _, h, _, d = key_states.shape
        for name, p in (("key_params", self.key_params), ("value_params", self.value_params)):
            if p is not None and tuple(p.shape) != (h, 3, d):
                raise ValueError(
                    f"{name} must have shape ({h}, 3, {d}) (kv_heads, 3, head_dim), got {tuple(p.shape)}"
                )
        self.config.check_head_dim(d)
        for name, o in (("key_outliers", self.key_outliers), ("value_outliers", self.value_outliers)):
            if o is not None:
                _check_outlier_indices(name, o, h, d, self.config.n_outliers)
        if self.config.value_mode == "per_token" and d % self.config.value_group_size:
            raise ValueError(f"value_group_size ({self.config.value_group_size}) must divide head_dim ({d})")
        if self.key_params is None:
            self.key_params = self.config.default_params(d, (h,))
        if self.value_params is None:
            self.value_params = self.config.default_params(d, (h,))
        self.device, self.dtype = key_states.device, key_states.dtype
        self.num_heads, self.head_dim = h, d
        self.keys = key_states[..., :0, :].clone()
        self.values = value_states[..., :0, :].clone()
        if self.config.bits != FULL_PRECISION_BITS:
            given = [self.key_outliers, self.value_outliers][: self.n_streams]
            if self.config.n_outliers == 0:
                self._build_quantizer(None)
            elif all(o is not None for o in given):
                self._build_quantizer(torch.stack([o.to(torch.long) for o in given]))
        self.is_initialized = True

    def _build_quantizer(self, outliers: torch.Tensor | None) -> None:
        """Quantiser of the ADKV-coded channels; ``outliers: Long[S, H, n]`` or ``None`` (no outliers)."""
        d = self.head_dim
        streams = [self.key_params] + ([self.value_params] if self.config.value_mode == "adkv" else [])
        params = torch.stack(streams).unsqueeze(1).to(self.device)  # [S, 1, H, 3, D]
        if outliers is None:
            self.sq = ADKVQuantizer(d, self.config, params)
            return
        width = index_bits(d)
        self.outlier_index_codes = _pack_indices(outliers.to(self.device), width)
        self.outliers = _unpack_indices(self.outlier_index_codes, width, outliers.shape).to(params.device)
        self._normal = _complement(self.outliers, d).clone()  # own storage (a slice of the argsort)
        s, h, m = self._normal.shape
        params = params.gather(-1, self._normal[:, None, :, None, :].expand(s, 1, h, 3, m))
        self.sq = ADKVQuantizer(m, self.config, params)  # [S, 1, H, 3, D - n]

    def _start_streams(self, x: torch.Tensor) -> None:
        """Choose outlier channels (if needed) from the first tokens of ``x: [S, B, H, T, D]``."""
        if self.config.n_outliers and self.outliers is None:
            n0 = min(self.config.init_tokens, x.shape[-2])
            given = [self.key_outliers, self.value_outliers][: self.n_streams]
            chosen = select_outlier_channels(x[..., :n0, :], self.config.n_outliers, pool_dims=(1,))
            picks = [chosen[i] if o is None else o.to(chosen) for i, o in enumerate(given)]
            self._build_quantizer(torch.stack(picks))

    def _split_channels(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x: [S, B, H, T, D]`` -> (ADKV-coded channels ``[S, B, H, T, D - n]``, outliers or ``None``)."""
        if self._normal is None:
            return x, None
        s, b, h, t, _ = x.shape
        take = lambda idx: x.gather(-1, idx[:, None, :, None, :].expand(s, b, h, t, idx.shape[-1]))  # noqa: E731
        return take(self._normal), take(self.outliers)

    def _merge_channels(self, xh: torch.Tensor, xo: torch.Tensor | None) -> torch.Tensor:
        """Inverse of :meth:`_split_channels` (outliers cast to ``xh.dtype``)."""
        if xo is None:
            return xh
        s, b, h, t, _ = xh.shape
        out = xh.new_empty(s, b, h, t, self.head_dim)
        out.scatter_(-1, self._normal[:, None, :, None, :].expand_as(xh), xh)
        out.scatter_(-1, self.outliers[:, None, :, None, :].expand(s, b, h, t, xo.shape[-1]), xo.to(xh.dtype))
        return out

    def _outlier_stack(self) -> torch.Tensor | None:
        if self.key_outlier_values is None:
            return None
        return torch.stack([self.key_outlier_values, self.value_outlier_values][: self.n_streams])

    def _append_outliers(self, xo: torch.Tensor) -> None:
        xo = xo.to(_META)
        # a first chunk is copied: xo[0] and xo[1] are views of one stacked buffer
        cat = lambda old, new: new.clone() if old is None else torch.cat([old, new], dim=-2)  # noqa: E731
        self.key_outlier_values = cat(self.key_outlier_values, xo[0])
        if xo.shape[0] > 1:
            self.value_outlier_values = cat(self.value_outlier_values, xo[1])

    def _quantize(self, tensor, *args, **kwargs):  # the encode path is `_encode`
        raise NotImplementedError("ADKVLayer encodes streams with `_encode`")

    def _dequantize(self, q_tensor):
        raise NotImplementedError("ADKVLayer decodes streams with `dequantized_states`")

    def _pack(self, q: torch.Tensor) -> torch.Tensor:
        b, h, t, d = q.shape
        return pack_bits(q.permute(0, 2, 1, 3).reshape(b, t, h * d).contiguous(), self.config.bits)

    def _unpack(self, codes: torch.Tensor) -> torch.Tensor:
        b, t, _ = codes.shape
        d = self.sq.num_channels  # coded channels (head_dim - n_outliers)
        q = unpack_bits(codes, self.config.bits, self.num_heads * d)
        return q.reshape(b, t, self.num_heads, d).permute(0, 2, 1, 3)

    def _encode(self, k: torch.Tensor, v: torch.Tensor) -> None:
        joint = self.config.value_mode == "adkv"
        x = torch.stack([k, v]) if joint else k.unsqueeze(0)  # [S, B, H, T, D]
        if self.stream_state is None:
            self._start_streams(x)
        x, xo = self._split_channels(x)
        if self.stream_state is None:
            n0 = min(self.config.init_tokens, k.shape[-2])
            self.stream_state = self.sq.init_state(x[..., :n0, :])
        q, xh, self.stream_state = self.sq.encode_raw(x, self.stream_state)
        self._store(q, xh, xo, v)

    def _store(self, q: torch.Tensor, xh: torch.Tensor, xo: torch.Tensor | None, v: torch.Tensor) -> None:
        """Append codes ``[S, B, H, T, D']``, outliers and (simulated) reconstructions of a new chunk."""
        joint = self.config.value_mode == "adkv"
        if xo is not None:
            self._append_outliers(xo)
            xh = self._merge_channels(xh, xo.to(_META))
        codes = self._pack(q[0])
        self.key_codes = codes if self.key_codes is None else torch.cat([self.key_codes, codes], dim=1)
        xk = xh[0]
        if joint:
            vcodes = self._pack(q[1])
            self.value_codes = (
                vcodes if self.value_codes is None else torch.cat([self.value_codes, vcodes], dim=1)
            )
            xv = xh[1]
        else:
            blk = quantize_asym(v, self.config.bits, self.config.value_group_size, axis=-1)
            self.value_blocks.append(blk)
            xv = blk.dequantize()
            self._deq_v_tok = xv if self._deq_v_tok is None else torch.cat([self._deq_v_tok, xv], dim=-2)
        if self.config.storage == "simulated":  # copies: xh[0] and xh[1] are views of one buffer
            xk = xk.to(self.dtype, copy=True)
            self._sim_k = xk if self._sim_k is None else torch.cat([self._sim_k, xk], dim=-2)
            if joint:
                xv = xv.to(self.dtype, copy=True)
                self._sim_v = xv if self._sim_v is None else torch.cat([self._sim_v, xv], dim=-2)
        self.encoded_length += q.shape[-2]

    def dequantized_states(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Reconstruction of all encoded tokens, ``[batch, kv_heads, encoded_len, head_dim]`` each."""
        if self.encoded_length == 0:
            return self.keys[..., :0, :], self.values[..., :0, :]
        if self.config.storage == "simulated":
            k = self._sim_k
            v = self._sim_v if self.config.value_mode == "adkv" else self._deq_v_tok
            return k, v
        st = self.stream_state
        if self.config.value_mode == "adkv":
            q = torch.stack([self._unpack(self.key_codes), self._unpack(self.value_codes)])
        else:
            q = self._unpack(self.key_codes).unsqueeze(0)
        xh = self._decode_by_head(q, st)
        xo = self._outlier_stack()
        xh = self._merge_channels(xh, xo).to(self.dtype)
        if self.config.value_mode == "adkv":
            return xh[0], xh[1]
        v = torch.cat([b.dequantize() for b in self.value_blocks], dim=-2)
        return xh[0], v

    def _decode_by_head(self, q: torch.Tensor, st: ADKVState) -> torch.Tensor:
        """Replay ``q: uint8 [S, B, H, T, D']`` one (stream, KV head) at a time (float64 result).

        The recurrence is independent per channel, so slicing the leading dimensions gives exactly
        the values of one batched replay while bounding the float64 scan temporaries to one head's
        ``[B, T, D']`` instead of the whole layer's (peak decode memory).
        """
        params = self.sq.params  # [S, 1, H, 3, D']
        out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
        for i in range(q.shape[0]):
            stream = st.select(i)
            for h in range(q.shape[2]):
                head = stream._fields(lambda v, h=h: v[:, h : h + 1])
                p = params[i, :, h : h + 1] if params.shape[2] > 1 else params[i]
                out[i, :, h : h + 1] = self.sq._replay(q[i, :, h : h + 1], head, p, head.checkpoints)
        return out

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Append ``[batch, kv_heads, new, head_dim]`` states; return the whole sequence's states.

        The incoming tokens are returned in full precision for the current pass (as in KIVI); tokens
        beyond the residual window are encoded and returned as reconstructions afterwards.
        """
        check_kv_states(key_states, value_states, self)
        _check_fp16_range(key_states, value_states)
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.cumulative_length += key_states.shape[-2]
        res_k = torch.cat([self.keys, key_states], dim=-2)
        res_v = torch.cat([self.values, value_states], dim=-2)
        if self.encoded_length:
            dk, dv = self.dequantized_states()
            out_k, out_v = torch.cat([dk, res_k], dim=-2), torch.cat([dv, res_v], dim=-2)
        else:
            out_k, out_v = res_k, res_v
        if self.config.bits != FULL_PRECISION_BITS:
            n_enc = res_k.shape[-2] - self.config.residual_length
            if n_enc > 0:
                self._encode(res_k[..., :n_enc, :], res_v[..., :n_enc, :])
                # copy the window out: a view would keep the whole concatenation (the prefill) alive
                res_k, res_v = res_k[..., n_enc:, :].clone(), res_v[..., n_enc:, :].clone()
        self.keys, self.values = res_k, res_v
        return out_k, out_v

    def get_seq_length(self) -> int:
        return self.cumulative_length

    def reset(self) -> None:
        super().reset()
        self._clear()

    def _map(self, fn_tensor, fn_state, fn_block) -> None:
        self.keys, self.values = fn_tensor(self.keys), fn_tensor(self.values)
        names = ("key_codes", "value_codes", "_sim_k", "_sim_v", "_deq_v_tok")
        for name in names + ("key_outlier_values", "value_outlier_values"):
            v = getattr(self, name)
            if v is not None:
                setattr(self, name, fn_tensor(v))
        if self.stream_state is not None:
            self.stream_state = fn_state(self.stream_state)
        self.value_blocks = [fn_block(b) for b in self.value_blocks]

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Exact batch reordering of codes, states and residual (no re-quantisation)."""
        if not self.is_initialized:
            return
        idx = beam_idx.to(self.keys.device)
        self._map(
            lambda t: t.index_select(0, idx),
            lambda s: s.index_select(idx, dim=1),
            lambda b: b.index_select(idx),
        )

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if indices.dtype == torch.bool:
            indices = indices.nonzero().flatten()
        self.reorder_cache(torch.as_tensor(indices))

    def batch_repeat_interleave(self, repeats: int) -> None:
        if not self.is_initialized:
            return
        self._map(
            lambda t: t.repeat_interleave(repeats, dim=0),
            lambda s: s.repeat_interleave(repeats, dim=1),
            lambda b: b.repeat_interleave(repeats),
        )

    def crop(self, tokens_to_remove: int) -> None:
        """Remove the last ``-tokens_to_remove`` tokens from the residual window (``DynamicLayer`` rule).

        Encoded tokens cannot be removed without re-encoding (the recurrent state moved past them), so
        cropping into the encoded stream raises ``ValueError``.
        """
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative number of tokens to remove (DynamicLayer convention)")
        remove = -tokens_to_remove
        if remove == 0 or not self.is_initialized:
            return
        if remove > self.keys.shape[-2]:
            raise ValueError(
                f"cannot crop {remove} tokens: only the {self.keys.shape[-2]} residual tokens can be removed "
                "from an ADKV stream (raise residual_length to allow rollbacks)"
            )
        r = self.keys.shape[-2] - remove
        self.keys, self.values = self.keys[..., :r, :].clone(), self.values[..., :r, :].clone()
        self.cumulative_length -= remove

    # -- accounting -----------------------------------------------------------------------------
    def held_tensors(self) -> list[tuple[str, torch.Tensor]]:
        """Every tensor this layer holds, with its :data:`~neurips26.inference.quant.MEMORY_CATEGORIES`
        category: codes and fp16 outlier channels (``codes``); initial states, quantiser parameters,
        packed outlier indices, checkpoints and per-token value metadata (``group_params``); the
        residual (``window``); the float64 accumulators, the calibrated parameters as given and the
        unpacked channel indices (``encoder_state``); simulated / per-token reconstructions
        (``dequantized``)."""
        out: list[tuple[str, torch.Tensor | None]] = []
        if self.is_initialized:
            out += [("window", self.keys), ("window", self.values)]
        for name in ("key_codes", "value_codes", "key_outlier_values", "value_outlier_values"):
            out.append(("codes", getattr(self, name)))
        for b in self.value_blocks:
            out += [("codes", b.codes), ("group_params", b.scale), ("group_params", b.zero)]
        st = self.stream_state
        if st is not None:
            out += [("group_params", st.z1), ("group_params", st.a1), ("group_params", st.checkpoints)]
            out += [("encoder_state", st.log_acc), ("encoder_state", st.cmax), ("encoder_state", st.dsum)]
        sq = getattr(self, "sq", None)
        if sq is not None:
            out.append(("group_params", sq.params))
        out.append(("group_params", self.outlier_index_codes))
        for name in ("key_params", "value_params", "key_outliers", "value_outliers", "outliers", "_normal"):
            out.append(("encoder_state", getattr(self, name)))
        for name in ("_sim_k", "_sim_v", "_deq_v_tok"):
            out.append(("dequantized", getattr(self, name)))
        return [(c, t) for c, t in out if t is not None]

    def memory_report(self) -> dict[str, int]:
        """Held bytes of this layer by category, measured on its tensors."""
        return held_bytes_report(self.held_tensors())

    def memory_bytes(self, fp_itemsize: int | None = None) -> dict[str, int]:
        """Stored bytes: measured (``fp_itemsize=None``, ``total == memory_report()["total"]``) or the
        storage model (an int: ``payload`` = codes + fp16 outlier channels, ``metadata`` = initial
        states, parameters, packed outlier indices, decoder checkpoints, per-token value metadata at
        their stored widths, ``residual`` at ``fp_itemsize`` bytes per element). Also ``total`` and
        ``elements``."""
        payload = metadata = 0
        if self.key_codes is not None:
            payload += self.key_codes.numel()
            if self.value_codes is not None:
                payload += self.value_codes.numel()
            for o in (self.key_outlier_values, self.value_outlier_values):
                if o is not None:
                    payload += o.numel() * o.element_size()
            st = self.stream_state
            p = self.sq.params.to(_META)
            metadata += (st.z1.numel() + st.a1.numel()) * 2 + p.numel() * p.element_size()
            if self.outlier_index_codes is not None:
                metadata += self.outlier_index_codes.numel()
            if st.checkpoints is not None:
                metadata += st.checkpoints.numel() * st.checkpoints.element_size()
        for b in self.value_blocks:
            payload += b.payload_nbytes
            metadata += b.metadata_nbytes
        residual = elements = 0
        if self.is_initialized:
            item = self.keys.element_size() if fp_itemsize is None else fp_itemsize
            residual = (self.keys.numel() + self.values.numel()) * item
            b = self.keys.shape[0]
            elements = 2 * b * self.num_heads * self.head_dim * self.cumulative_length
        if fp_itemsize is None:
            return {**_measured(self.memory_report()), "elements": elements}
        return {
            "payload": payload,
            "metadata": metadata,
            "residual": residual,
            "total": payload + metadata + residual,
            "elements": elements,
        }


class ADKVCache(QuantizedKVCacheMixin, Cache):
    """ADKV cache: a ``transformers.Cache`` of :class:`ADKVLayer`, one per decoder layer.

    Usable as ``model.generate(input_ids, cache=ADKVCache(model.config, ADKVConfig(bits=2)))``
    and in manual incremental forward passes.

    Parameters
    ----------
    config : PretrainedConfig
    adkv : ADKVConfig
    params : dict, optional
        ``{layer_idx: {"key": Tensor[kv_heads, 3, head_dim], "value": Tensor[...]}}`` from
        :func:`calibrate_adkv`; missing layers use the defaults. With ``adkv.n_outliers > 0`` the
        entries may also hold ``"key_outliers"``/``"value_outliers"``: ``LongTensor[kv_heads,
        n_outliers]`` (otherwise chosen from the first prefill).
    """

    def __init__(self, config: Any, adkv: ADKVConfig | None = None, params: dict | None = None):
        config = text_config(config)
        adkv = ADKVConfig() if adkv is None else adkv
        if not isinstance(adkv, ADKVConfig):
            raise TypeError(f"adkv must be an ADKVConfig, got {type(adkv).__name__}")
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        adkv.check_head_dim(head_dim)
        params = params or {}
        layers = []
        for i in range(config.num_hidden_layers):
            p = params.get(i, {})
            for name in ("key", "value"):
                t = p.get(name)
                if t is not None and tuple(t.shape) != (kv_heads, 3, head_dim):
                    raise ValueError(
                        f"params[{i}][{name!r}] must have shape ({kv_heads}, 3, {head_dim}) "
                        f"(kv_heads, 3, head_dim), got {tuple(t.shape)}"
                    )
                o = p.get(f"{name}_outliers")
                if o is not None:
                    _check_outlier_indices(
                        f"params[{i}]['{name}_outliers']", o, kv_heads, head_dim, adkv.n_outliers
                    )
            layers.append(
                ADKVLayer(adkv, p.get("key"), p.get("value"), p.get("key_outliers"), p.get("value_outliers"))
            )
        self.adkv = adkv
        super().__init__(layers=layers)

    def bulk_prefill(self, key_value_states: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Store a prefill of every layer at once, encoding all layers' streams in one vectorised pass.

        Equivalent to ``cache.update(k, v, layer_idx)`` for each layer on an empty cache (the same
        codes, states and stored tensors), but runs the sequential encoder once for all layers instead
        of once per layer.

        Parameters
        ----------
        key_value_states : sequence of ``(Tensor[B, kv_heads, T, head_dim], Tensor[B, kv_heads, T, head_dim])``
            One pair per layer, all of the same shape.
        """
        if len(key_value_states) != len(self.layers):
            raise ValueError(
                f"need one (key, value) pair per layer ({len(self.layers)}), got {len(key_value_states)}"
            )
        if any(layer.is_initialized for layer in self.layers):
            raise RuntimeError("bulk_prefill needs an empty cache")
        for k, v in key_value_states:
            check_kv_states(k, v)
            _check_fp16_range(k, v)
        cfg = self.adkv
        if cfg.bits == FULL_PRECISION_BITS or cfg.value_mode != "adkv":
            for i, (k, v) in enumerate(key_value_states):
                self.update(k, v, i)
            return
        shapes = {tuple(k.shape) for k, _ in key_value_states} | {tuple(v.shape) for _, v in key_value_states}
        if len(shapes) != 1:
            raise ValueError(f"all layers' states must share one shape, got {sorted(shapes)}")
        for layer, (k, v) in zip(self.layers, key_value_states):
            layer.lazy_initialization(k, v)
            layer.cumulative_length = k.shape[-2]
        T = key_value_states[0][0].shape[-2]
        n_enc = T - cfg.residual_length
        if n_enc <= 0:
            for layer, (k, v) in zip(self.layers, key_value_states):
                layer.keys, layer.values = k.clone(), v.clone()
            return
        parts, outs = [], []
        for layer, (k, v) in zip(self.layers, key_value_states):
            xl = torch.stack([k[..., :n_enc, :], v[..., :n_enc, :]])
            layer._start_streams(xl)
            xn, xo = layer._split_channels(xl)
            parts.append(xn)
            outs.append(xo)
        x = torch.stack(parts)  # [L, 2, B, H, n_enc, D']
        params = torch.stack([layer.sq.params for layer in self.layers])  # [L, 2, 1, H, 3, D']
        quant = ADKVQuantizer(x.shape[-1], cfg, params)
        n0 = min(cfg.init_tokens, n_enc)
        state = quant.init_state(x[..., :n0, :])
        q, xh, end = quant.encode_raw(x, state)
        for i, (layer, (k, v)) in enumerate(zip(self.layers, key_value_states)):
            layer.stream_state = end.select(i)._fields(torch.clone)  # own storage, not a slice of all layers
            layer._store(q[i], xh[i], outs[i], v)
            layer.keys, layer.values = k[..., n_enc:, :].clone(), v[..., n_enc:, :].clone()


class GroupwiseStaticCache(KIVICache):
    """Static group-wise baseline in the KIVI layout (keys per channel over ``group_size``-token blocks,
    values per token over ``value_group_size`` channels) with ``residual_length=0`` by default."""

    def __init__(
        self,
        config: Any,
        bits: int = 2,
        group_size: int = 128,
        residual_length: int = 0,
        value_group_size: int | None = 32,
        keep_dequantized: bool = False,
    ):
        config = text_config(config)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        if value_group_size is not None:
            value_group_size = min(value_group_size, head_dim)
        super().__init__(config, bits, group_size, residual_length, value_group_size, keep_dequantized)


def _num_checkpoints(t_q: int, checkpoint_every: int | None) -> int:
    return (t_q - 1) // checkpoint_every if checkpoint_every and t_q > 0 else 0


def metadata_bits(
    method: str,
    T: int,
    head_dim: int,
    n_heads: int,
    n_layers: int,
    group_size: int | None = None,
    value_group_size: int | None = None,
    residual_length: int = 0,
    batch: int = 1,
    value_mode: str = "adkv",
    n_outliers: int = 0,
    checkpoint_every: int | None = None,
) -> int:
    """Metadata bits of a whole cache after ``T`` tokens (16-bit metadata), as the caches store it.

    ``method="adkv"`` with ``d' = d - n_out`` coded channels and ``T_q = T - R`` encoded tokens, per KV
    head and ADKV stream (keys, and values in ``value_mode="adkv"``): ``2 * 16 * d'`` per batch row
    (``z_1``, ``a_1``) + ``3 * 16 * d'`` parameters + ``n_out * ceil(log2 d)`` outlier-index bits,
    independent of ``T``; with decoder checkpoints every ``C`` tokens add ``(T_q - 1) // C`` states of
    ``3 * 64 * d'`` bits per batch row. Values in ``per_token`` mode add ``2 * 16 * T_q * ceil(d /
    G_v)``. (The outlier channels themselves are payload: 16 bits per token and channel.) The caches
    pack each layer's index bits into whole bytes, so measured bytes are ``ceil(index bits / 8)`` per
    layer. ``method="static"`` (KIVI layout, blocks of ``G`` tokens flushed once ``R + G`` tokens wait):
    with ``n_b = (T - R) // G`` blocks, keys ``2 * 16 * d * n_b`` and values ``2 * 16 * n_b * G *
    ceil(d / G_v)`` per head.
    """
    check_choice("method", method, ("adkv", "static"))
    check_int("T", T, low=0)
    check_int("head_dim", head_dim, low=1)
    check_int("n_heads", n_heads, low=1)
    check_int("n_layers", n_layers, low=1)
    check_int("n_outliers", n_outliers, low=0, high=head_dim - 1)
    if checkpoint_every is not None:
        check_int("checkpoint_every", checkpoint_every, low=1)
    per_head = 0
    if method == "adkv":
        check_choice("value_mode", value_mode, ("adkv", "per_token"))
        t_q = max(T - residual_length, 0)
        if t_q == 0:
            return 0
        dq = head_dim - n_outliers
        per_head = (2 * batch + 3) * 16 * dq + n_outliers * index_bits(head_dim)
        per_head += batch * _num_checkpoints(t_q, checkpoint_every) * 3 * 64 * dq
        if value_mode == "adkv":
            per_head *= 2
        else:
            gv = check_int("value_group_size", value_group_size or 32, low=1)
            per_head += batch * 2 * 16 * t_q * math.ceil(head_dim / gv)
    else:
        g = check_int("group_size", group_size if group_size is not None else 0, low=1)
        gv = check_int("value_group_size", value_group_size or min(head_dim, 32), low=1)
        n_b = max(0, (T - residual_length) // g)
        per_head = batch * (2 * 16 * head_dim * n_b + 2 * 16 * n_b * g * math.ceil(head_dim / gv))
    return per_head * n_heads * n_layers


def adkv_memory_formula(
    T: int,
    batch: int,
    kv_heads: int,
    head_dim: int,
    bits: int,
    residual_length: int = 0,
    fp_itemsize: int = 2,
    n_outliers: int = 0,
    checkpoint_every: int | None = None,
) -> dict[str, int]:
    """Closed-form bytes of one :class:`ADKVLayer` (``value_mode="adkv"``) after ``T`` tokens.

    ``payload = 2 B T_q (ceil(H d' b / 8) + 2 H n_out)`` (codes + fp16 outlier channels);
    ``metadata = 2 H d' (4 B + 6 + 24 B K) + ceil(2 H n_out ceil(log2 d) / 8)`` with ``K = (T_q - 1)
    // C`` checkpoints; ``residual = 2 B H (T - T_q) d * fp_itemsize``.
    """
    t_q = max(T - residual_length, 0)
    dq = head_dim - n_outliers
    payload = 2 * batch * t_q * (math.ceil(kv_heads * dq * bits / 8) + 2 * kv_heads * n_outliers)
    metadata = 0
    if t_q:
        k = _num_checkpoints(t_q, checkpoint_every)
        metadata = 2 * kv_heads * dq * (4 * batch + 6 + 24 * batch * k)
        metadata += math.ceil(2 * kv_heads * n_outliers * index_bits(head_dim) / 8)
    residual = 2 * batch * kv_heads * (T - t_q) * head_dim * fp_itemsize
    return {
        "payload": payload,
        "metadata": metadata,
        "residual": residual,
        "total": payload + metadata + residual,
    }


# -------------------------------------------------------------------------------------- calibration
_RECORDER: dict[str, Any] = {"store": None}


def _record_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    store = _RECORDER["store"]
    if store is not None:
        store.setdefault(module.layer_idx, []).append((query.detach(), key.detach(), value.detach()))
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
    )


_RECORD_NAME = "neurips26_adkv_record"


@contextmanager
def record_qkv(model: torch.nn.Module):
    """Record post-RoPE ``(query, key, value)`` per layer through a registered attention function.

    Yields a dict ``layer_idx -> list[(Tensor[B, Hq, T, D], Tensor[B, Hkv, T, D], Tensor[B, Hkv, T, D])]``;
    the model's attention implementation is restored afterwards.
    """
    AttentionInterface.register(_RECORD_NAME, _record_attention)
    AttentionMaskInterface.register(_RECORD_NAME, sdpa_mask)
    previous = model.config._attn_implementation
    store: dict[int, list] = {}
    _RECORDER["store"] = store
    model.set_attn_implementation(_RECORD_NAME)
    try:
        yield store
    finally:
        _RECORDER["store"] = None
        model.set_attn_implementation(previous)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n_query: int) -> torch.Tensor:
    """Causal attention outputs of the last ``n_query`` queries; q ``[..., Hq, T, D]``, k/v ``[..., Hkv, T, D]``."""
    hq, hk = q.shape[-3], k.shape[-3]
    rep = hq // hk
    if rep > 1:
        k = k.repeat_interleave(rep, dim=-3)
        v = v.repeat_interleave(rep, dim=-3)
    T = q.shape[-2]
    qs = q[..., T - n_query :, :]
    scores = qs @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    pos_q = torch.arange(T - n_query, T, device=q.device).unsqueeze(-1)
    mask = torch.arange(T, device=q.device).unsqueeze(0) > pos_q
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def calibrate_streams(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    config: ADKVConfig,
    steps: int = 200,
    lr: float = 1e-2,
    bptt: int = 64,
    batch_size: int = 8,
    n_query: int = 32,
    seed: int = 0,
    loss_layers: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """SGD calibration of ADKV parameters on recorded streams (the tensor core of :func:`calibrate_adkv`).

    Parameters
    ----------
    Q : Tensor[Ly, N, Hq, T, D]
        Post-RoPE queries of ``Ly`` layers on ``N`` calibration sequences.
    K, V : Tensor[Ly, N, Hkv, T, D]
        Post-RoPE keys and values (``Hq`` a multiple of ``Hkv``).
    config : ADKVConfig
        ``bits`` in [1, 8]; ``n_outliers`` channels per (layer, stream, head) of largest mean square
        over all sequences and tokens are kept exact (fp16) and excluded from the loss's quantisation.
    steps, lr, bptt, batch_size, n_query, seed : optimisation settings (Adam; the same random
        mini-batches of sequences for every layer).
    loss_layers : int, optional
        Number of layers the loss is averaged over (default ``Ly``). Layers do not interact, so
        calibrating a slice of the layers with ``loss_layers`` = the total reproduces the joint run
        for that slice (the basis of ``calibrate_adkv(..., workers > 1)``).

    Returns
    -------
    params : Tensor[Ly, 2, Hkv, 3, D]
        ``(eta_z, eta_s, gamma)`` per layer, stream (key, value), head and channel.
    outliers : LongTensor[Ly, 2, Hkv, n_outliers] or None (``n_outliers == 0``)
    """
    if not 1 <= config.bits <= 8:
        raise ValueError(f"calibration needs bits in [1, 8], got {config.bits}")
    check_int("steps", steps, low=0)
    check_float("lr", lr, 0.0, low_open=True)
    check_int("bptt", bptt, low=1)
    check_int("batch_size", batch_size, low=1)
    check_int("n_query", n_query, low=1)
    if K.dim() != 5 or V.shape != K.shape or Q.dim() != 5 or Q.shape[:2] != K.shape[:2]:
        raise ValueError(
            f"need Q [Ly, N, Hq, T, D] and K, V [Ly, N, Hkv, T, D]; got {tuple(Q.shape)}, {tuple(K.shape)}, "
            f"{tuple(V.shape)}"
        )
    n_ly, n_seq, hk, T, d = K.shape
    config.check_head_dim(d)
    n_norm = n_ly if loss_layers is None else check_int("loss_layers", loss_layers, low=n_ly)
    Q, K, V = Q.float(), K.float(), V.float()
    n_query = min(n_query, T)
    KV = torch.stack([K, V], 1)  # [Ly, 2, N, Hkv, T, D]
    outliers = mask = None
    if config.n_outliers:
        outliers = select_outlier_channels(KV, config.n_outliers, pool_dims=(2,))  # [Ly, 2, Hkv, n]
        mask = torch.zeros(n_ly, 2, 1, hk, 1, d, dtype=torch.bool)
        mask.scatter_(-1, outliers[:, :, None, :, None, :], True)
        exact = KV.to(_META).float()
    init = config.default_params(d, (n_ly, 2, hk))  # [Ly, 2, Hkv, 3, D]
    raw = torch.empty_like(init)
    raw[..., :2, :] = torch.logit(init[..., :2, :])
    raw[..., 2, :] = init[..., 2, :] + torch.log(-torch.expm1(-init[..., 2, :]))  # softplus^-1
    raw = raw.requires_grad_(True)
    opt = torch.optim.Adam([raw], lr=lr)
    gen = torch.Generator().manual_seed(seed)
    n0 = min(config.init_tokens, T)
    xp = KV[..., :n0, :].double()
    z1 = xp.mean(-2).to(_META).float()  # [Ly, 2, N, Hkv, D]
    a1 = (xp - xp.mean(-2, keepdim=True)).abs().mean(-2).to(_META).float()

    def params_from(raw_t: torch.Tensor) -> torch.Tensor:
        eta = torch.sigmoid(raw_t[..., :2, :])
        gamma = torch.nn.functional.softplus(raw_t[..., 2:, :])
        return torch.cat([eta, gamma], dim=-2)

    with torch.no_grad():
        ref = _attention(Q, K, V, n_query)
        ref_pow = ref.pow(2).mean(dim=(1, 2, 3, 4), keepdim=True).clamp_min(1e-12)
    for _ in range(steps):
        idx = torch.randperm(n_seq, generator=gen)[: min(batch_size, n_seq)]
        p = params_from(raw).unsqueeze(2)  # [Ly, 2, 1, Hkv, 3, D]
        quant = ADKVQuantizer(d, config, p)
        state = ADKVState(z1[:, :, idx], a1[:, :, idx])
        xh = quant._run(KV[:, :, idx], state, p, torch.float32, stored=False, ste=True, bptt=bptt)[1]
        if mask is not None:
            xh = torch.where(mask, exact[:, :, idx], xh)
        out = _attention(Q[:, idx], xh[:, 0], xh[:, 1], n_query)
        terms = (out - ref[:, idx]).pow(2).mean(dim=(1, 2, 3, 4), keepdim=True) / ref_pow
        loss = terms.mean() if n_norm == n_ly else terms.sum() / n_norm
        opt.zero_grad()
        loss.backward()
        opt.step()
    return params_from(raw.detach()), outliers


def _calibrate_worker(args: tuple) -> tuple[torch.Tensor, torch.Tensor | None]:
    Q, K, V, config, kwargs, threads = args
    torch.set_num_threads(threads)  # a spawned worker process: its own global state
    return calibrate_streams(Q, K, V, config, **kwargs)


def calibrate_adkv(
    model: torch.nn.Module,
    calib_batches: Iterable[torch.Tensor],
    config: ADKVConfig,
    steps: int = 200,
    lr: float = 1e-2,
    bptt: int = 64,
    batch_size: int = 8,
    n_query: int = 32,
    seed: int = 0,
    workers: int = 1,
) -> dict[int, dict[str, torch.Tensor]]:
    """Calibrate per-channel ``(eta_z, eta_s, gamma)`` of every layer by SGD on attention-output error.

    The quantiser is unrolled as an RNN over the recorded key/value streams (all layers at once,
    independently), rounding uses a straight-through estimator, ``eta = sigmoid(.)`` and ``gamma =
    softplus(.)``. Loss: mean over layers of the relative MSE between causal attention outputs (last
    ``n_query`` queries) with reconstructed and exact keys/values. See :func:`calibrate_streams`.

    Parameters
    ----------
    model : transformers causal LM (Llama-style attention with ``layer_idx``).
    calib_batches : iterable of LongTensor[B, T]
        Token ids; every batch must have the same length ``T``.
    config : ADKVConfig (bits in [1, 8]).
    steps, lr, bptt, batch_size, n_query, seed : optimisation settings.
    workers : int
        ``> 1`` splits the layers round-robin over that many spawned processes
        (``torch.multiprocessing``, each with the caller's intra-op thread count); layers are
        independent and every worker draws the same mini-batches, so the result equals ``workers=1``
        bit for bit (tested on tiny models and on 30 layers x 3 heads x 64 channels; torch's
        intra-op parallel reductions could in principle split differently for different layer
        counts, which would only change the last float bits).

    Returns
    -------
    dict ``layer_idx -> {"key": Tensor[kv_heads, 3, head_dim], "value": Tensor[kv_heads, 3, head_dim]}``,
    plus ``"key_outliers"``/``"value_outliers"`` (``LongTensor[kv_heads, n_outliers]``) when
    ``config.n_outliers > 0``.
    """
    if not 1 <= config.bits <= 8:
        raise ValueError(f"calibration needs bits in [1, 8], got {config.bits}")
    check_int("workers", workers, low=1)
    kwargs = dict(steps=steps, lr=lr, bptt=bptt, batch_size=batch_size, n_query=n_query, seed=seed)
    check_int("steps", steps, low=0)
    check_float("lr", lr, 0.0, low_open=True)
    check_int("bptt", bptt, low=1)
    check_int("batch_size", batch_size, low=1)
    check_int("n_query", n_query, low=1)
    batches = list(calib_batches)
    if not batches:
        raise ValueError("calib_batches must not be empty")
    with torch.no_grad(), record_qkv(model) as store:
        for ids in batches:
            model(input_ids=ids, use_cache=False)
    layers = sorted(store)
    Q = torch.stack([torch.cat([r[0] for r in store[i]], 0) for i in layers]).float()  # [Ly, N, Hq, T, D]
    K = torch.stack([torch.cat([r[1] for r in store[i]], 0) for i in layers]).float()
    V = torch.stack([torch.cat([r[2] for r in store[i]], 0) for i in layers]).float()
    n_ly = len(layers)
    workers = min(workers, n_ly)
    if workers == 1:
        params, outliers = calibrate_streams(Q, K, V, config, **kwargs)
    else:
        parts = [list(range(w, n_ly, workers)) for w in range(workers)]
        jobs = [
            (Q[p], K[p], V[p], config, {**kwargs, "loss_layers": n_ly}, torch.get_num_threads())
            for p in parts
        ]
        ctx = torch.multiprocessing.get_context("spawn")
        with ctx.Pool(workers) as pool:
            results = pool.map(_calibrate_worker, jobs)
        params = torch.empty(n_ly, *results[0][0].shape[1:])
        outliers = (
            None if results[0][1] is None else torch.empty(n_ly, *results[0][1].shape[1:], dtype=torch.long)
        )
        for p, (prm, out) in zip(parts, results):
            params[p] = prm
            if outliers is not None:
                outliers[p] = out
    result: dict[int, dict[str, torch.Tensor]] = {}
    for i, layer in enumerate(layers):
        entry = {"key": params[i, 0].clone(), "value": params[i, 1].clone()}
        if outliers is not None:
            entry["key_outliers"] = outliers[i, 0].clone()
            entry["value_outliers"] = outliers[i, 1].clone()
        result[layer] = entry
    return result

r"""The ADKV quantiser: settings, per-channel state, and the ADPCM-style encoder/decoder.

:class:`ADKVConfig` holds bits, calibration and outlier settings; :class:`ADKVState` is the per-stream
decoder state; :class:`ADKVQuantizer` encodes sequentially in float64 and decodes with a parallel scan
that is bit-identical to the sequential simulation (optionally from stored checkpoints).

.. math::
    q_t = \mathrm{clamp}(\mathrm{round}((x_t - z_t)/s_t) + o, 0, L - 1),\quad
    \hat x_t = z_t + (q_t - o) s_t,\quad z_{t+1} = z_t + \eta_z(\hat x_t - z_t),

    s_{t+1} = \max\big(s_t [(1 - \eta_s) + \eta_s \gamma |d_t| / o]\, \omega^{sat_t},\ s_{min}\big)

Shapes
------
- ``x``: ``[..., T, d]`` (channels last); codes ``[..., T, d]`` in ``[0, 2^b)``; per-channel
  parameters ``eta_z, eta_s, gamma``: ``[d]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from neurips26.common.checks import check_choice, check_float, check_int, check_tensor
from neurips26.inference.quant import (
    FULL_PRECISION_BITS,
    pack_bits,
    unpack_bits,
)

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
    levels : {"midrise", "midtread"}
        Reconstruction levels of the ``L = 2**b`` codes. ``"midrise"`` (default): ``d = q - o + 1/2`` in
        ``{-(o - 1/2), ..., o - 1/2}``, symmetric around the prediction (the level set of ADPCM with an
        even number of levels), encoded with ``floor``; the outer pair ``q = 0, L - 1`` is the overload
        (at ``b = 1`` there is no inner level, so no overload). ``"midtread"``: ``d = q - o`` in
        ``{-o, ..., o - 1}`` (rounding), the level set of the first implementation: at ``b = 2`` its only
        positive level ``+1`` is also an overload level, so every positive residual multiplies the step
        by ``omega`` and the step settles where most codes are 0 (``results/diagnosis/adkv.md``).
    sink_tokens : int >= 0
        The first ``sink_tokens`` tokens of every stream (the attention sink) are stored exactly in fp16
        (payload of fixed size, independent of ``T``) and the ADKV stream, its initial state included,
        starts after them. 0 = the first implementation (the sink token is delta-coded from an initial
        state that it dominates).
    decode_mode : {"stream", "reference"}
        How a ``packed`` cache rebuilds the encoded tokens at every step (same bits either way):
        ``"stream"`` (default) replays each (stream, KV head) with the per-code log-gain looked up in a
        table (:meth:`ADKVQuantizer.log_gain_table`) and writes straight into the attention input;
        ``"reference"`` is the eager replay (:meth:`ADKVQuantizer._scan` as written) followed by a merge
        and a concatenation. ``storage="simulated"`` is the dequantised mirror (the fastest, at the memory
        cost of the reconstruction).
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
    decode_mode: str = "stream"
    levels: str = "midrise"
    sink_tokens: int = 1

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
        check_choice("decode_mode", self.decode_mode, ("stream", "reference"))
        check_choice("levels", self.levels, ("midrise", "midtread"))
        check_int("sink_tokens", self.sink_tokens, low=0)

    def check_head_dim(self, head_dim: int) -> None:
        """Raise ``ValueError`` unless ``n_outliers < head_dim``."""
        if self.n_outliers >= head_dim:
            raise ValueError(f"n_outliers ({self.n_outliers}) must be smaller than head_dim ({head_dim})")

    @property
    def offset(self) -> int:
        return (1 << self.bits) // 2

    @property
    def half(self) -> float:
        """Level shift: ``d = q - o + half`` (1/2 for ``midrise``, 0 for ``midtread``)."""
        return 0.5 if self.levels == "midrise" else 0.0

    @property
    def overload(self) -> bool:
        """Whether the outer codes ``0, L - 1`` multiply the next step by ``omega``."""
        return self.levels == "midtread" or self.bits >= 2

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


def _ste_floor(u: torch.Tensor) -> torch.Tensor:
    return u + (torch.floor(u) - u).detach()


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

    def log_gain_table(self, params: torch.Tensor | None = None) -> torch.Tensor:
        """``m(q) = log((1 - eta_s) + eta_s gamma |q - o| / o) + sat(q) log(omega)`` for every code ``q``.

        The step recursion's log-increment depends on the code only, so the decoder looks it up instead
        of evaluating a logarithm per token; the table is computed with the decoder's own float64 operation
        order (bit-identical entries). ``params: Tensor[..., 3, D]`` (default :attr:`params`); returns
        ``float64 [..., 2**bits, D]``.
        """
        cfg = self.config
        params = self.params if params is None else params
        dtype = torch.float64
        o = cfg.offset
        top = (1 << cfg.bits) - 1
        _, eta_s, gamma = self._split(params, dtype, True)
        levels = torch.arange(1 << cfg.bits, dtype=dtype, device=params.device)
        d = (levels - o + cfg.half).unsqueeze(-1)  # [L, 1]
        sat = ((levels == 0) | (levels == top)).to(dtype).unsqueeze(-1) * float(cfg.overload)
        keep = (1.0 - eta_s).unsqueeze(-2)
        gain = (eta_s * gamma / o).unsqueeze(-2)
        m = torch.log(keep + gain * d.abs())
        return m + sat * math.log(cfg.overload_up)

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
        midrise, half, overload = cfg.levels == "midrise", cfg.half, float(cfg.overload)
        for t in range(xs.shape[-2]):
            if bptt and t and t % bptt == 0:
                log_acc, cmax, dsum = log_acc.detach(), cmax.detach(), dsum.detach()
            if every and (state.t + t) and (state.t + t) % every == 0:
                ckpts.append(torch.stack([log_acc, cmax, dsum], -2).detach())
            s = torch.exp(log_acc + cmax)
            z = z1 + eta_z * dsum
            u = (xs[..., t, :] - z) / s
            if midrise:
                r = _ste_floor(u) if ste else torch.floor(u)
            else:
                r = _ste_round(u) if ste else torch.round(u)
            q = torch.clamp(r + o, 0, top)
            d = q - o + half
            ds = d * s
            recon.append(z + ds)
            codes.append(q.detach())
            dsum = dsum + ds
            sat = ((q.detach() == 0) | (q.detach() == top)).to(dtype) * overload
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
        table: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Chunked parallel-scan decoder over ``codes: uint8 [..., T, D]`` (float64).

        ``table`` (:meth:`log_gain_table` of ``params``, ``[..., 2**bits, D]``) replaces the per-token
        logarithm by a look-up with identical values.

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
        d = codes.to(dtype) - o + cfg.half
        pad = n * size - T
        full = (*lead, n, size, D)
        if table is not None:
            tl = torch.broadcast_shapes(lead, table.shape[:-2])
            idx = codes.long().expand(*tl, T, D)
            m = table.expand(*tl, *table.shape[-2:]).gather(-2, idx)
            if pad:
                m = torch.nn.functional.pad(m, (0, 0, 0, pad))
            m = m.reshape(*m.shape[:-2], n, size, D).expand(full)
        else:
            sat = ((codes == 0) | (codes == top)).to(dtype) * float(cfg.overload)
            if pad:
                sat = torch.nn.functional.pad(sat, (0, 0, 0, pad))
            sat = sat.reshape(*sat.shape[:-2], n, size, D).expand(full)
        if pad:
            d = torch.nn.functional.pad(d, (0, 0, 0, pad))
        d = d.reshape(*d.shape[:-2], n, size, D).expand(full)
        if table is None:
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
        table: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Reconstruction ``z_t + d_t s_t`` (float64) of unpacked ``codes: uint8 [..., T, D]``."""
        z, s, d = self._scan(codes, state, params, checkpoints, table)
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

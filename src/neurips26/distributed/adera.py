"""AdERA: Adaptive Exponent Reuse Allgather, lossless all-gather compression for sharded MoE training.

Paper: *AdERA: lossless exponent-reuse all-gather for sharded MoE training* (registry slug ``adera``;
seed file ``004_01f475bc147a144d.txt``, paragraph beginning "In training Mixture-of-Experts models,
sharded data"). With ZeRO-3 / FSDP every rank all-gathers each layer's full weights before using
them. After a short warm-up the exponent field of almost every bf16 weight equals the one of the
previous iteration, so AdERA keeps, on every rank, the exponents it last received from every other
rank and sends only sign + mantissa plus a small list of changed exponents. The receiver recombines
cached exponents and received bits and obtains the weights bit for bit.

Bit fields
----------
For a float of ``B`` bits with ``E`` exponent and ``M`` mantissa bits, viewed as an unsigned
integer ``u``::

    s = u >> (B - 1),   e = (u >> M) & (2**E - 1),   f = u & (2**M - 1)

bf16 (E=8, M=7): the 16-bit word is rotated left by one bit, ``w = e << 8 | f << 1 | s``, so the
exponent is the high byte and ``sm = f << 1 | s`` the low byte: the wire carries 8 of 16 bits.
fp16 (E=5, M=10): 11 sign+mantissa bits, sent as the low mantissa byte plus three bit planes
``(s, f9, f8)`` (11/16 of the raw size). fp32 (E=8, M=23): the 32-bit word rotated the same way;
three sign+mantissa bytes per element (24 of 32 bits). Every operation is a vectorised integer op
on int16/int32/uint8 views of the tensor (no Python loop over elements), so NaN payloads, +-0, +-inf
and subnormals survive unchanged. The implementation assumes a little-endian host (checked at import).

Wire modes (one per shard and call, the smallest payload wins)
--------------------------------------------------------------
With ``m`` elements, ``S`` sign+mantissa bytes (``m`` for bf16), ``n_c`` changed exponents,
``n_b = ceil(m / Bk)`` blocks of which ``n_cb`` contain a change (``L_cb`` exponents in them)::

    RAW     itemsize * m
    SPARSE  S + 4 n_c (int32 indices) + n_c (new exponents)
    BITMAP  S + ceil(m / 8) + n_c
    BLOCK   S + ceil(n_b / 8) + L_cb

plus a 24-byte header (mode, dtype, flags, CRC32 of the shard when ``verify=True``, ``numel``,
``n_c``). With zero changes a bf16 shard costs ``m + 24`` bytes: a ratio ``2m / (m + 24)``.

Collective
----------
*Two-phase* (default): phase 1 all-gathers every rank's payload length (one int64 each); phase 2
all-gathers the payloads padded to the longest one (``all_gather_single`` /
``all_gather_into_tensor`` on ``uint8``). *Fixed capacity* (``capacity_frac=c``): a single
collective of capacity ``header + S + 5 ceil(c m)`` bytes; a rank whose payload does not fit flags
an overflow in its header and all ranks then run one extra raw collective for that call.

Adaptive enable
---------------
``T_raw = alpha + s N (P-1) / (P BW)`` and ``T_ada = t_enc + t_dec + 2 alpha + N w(rho) (P-1)/(P BW)``
with ``N`` gathered elements, ``s`` the item size, ``w(rho)`` the expected wire bytes per element at
change rate ``rho``; compress iff ``T_ada < (1 - margin) T_raw``. ``alpha``/``BW`` come from
:meth:`CostModel.measure`, ``t_enc``/``t_dec`` are timed per shard and max-reduced over ranks so that
every rank takes the same decision.

Other parts: chunked encode/communicate/decode pipeline with ``async_op`` work handles, a
ZeRO-3-style :class:`ShardedMoEWrapper`, the lossless baseline :func:`lossless_zlib_all_gather`
(zlib over the byte-grouped exponent stream), the lossy baseline :func:`int8_block_all_gather`
(ZeRO++ qwZ-style block int8), and the trace-driven :func:`simulate`.

Everything runs with ``torch.distributed`` (gloo on CPU, NCCL on GPU: tensors stay on the input's
device; headers are read on the host). :class:`ThreadGroup` emulates ``P`` ranks inside one process
(one thread per virtual rank) with the same code path, for tests and single-machine studies.
"""

from __future__ import annotations

import json
import math
import os
import struct
import sys
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.common.distributed import free_port

if sys.byteorder != "little":  # pragma: no cover - every supported platform is little-endian
    raise ImportError("neurips26.distributed.adera assumes a little-endian host")

__all__ = [
    "AdERAAllGather",
    "AdERAConfig",
    "AdERAState",
    "CostModel",
    "GatherStats",
    "LayerSpec",
    "MODES",
    "Network",
    "Payload",
    "ShardedMoEWrapper",
    "ThreadGroup",
    "adera_all_gather",
    "decode_payload",
    "emulate_all_gather",
    "encode_shard",
    "gloo_self_check",
    "int8_block_all_gather",
    "lossless_zlib_all_gather",
    "payload_size",
    "raw_all_gather",
    "simulate",
]

MODES = ("raw", "sparse", "bitmap", "block")
_MODE_CODE = {name: i for i, name in enumerate(MODES)}
_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_DTYPE_CODE = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}
_CODE_DTYPE = {v: k for k, v in _DTYPE_CODE.items()}
HEADER_BYTES = 24
_HEADER = struct.Struct("<BBBBIqq")
_FLAG_CRC, _FLAG_OVERFLOW = 1, 2


# --------------------------------------------------------------------------------------------
# configuration and checks
# --------------------------------------------------------------------------------------------
@dataclass
class AdERAConfig:
    """Settings of the AdERA all-gather.

    Parameters
    ----------
    warmup_iters : int
        ``W``: calls sent RAW before compression may start (default 50).
    warmup_rate : float
        ``rho_warm``: with ``warmup="ema"`` compression starts only once the EMA of the global
        exponent-change rate is below this (default 0.02).
    warmup : {"ema", "fixed"}
        ``"fixed"`` ends warm-up after exactly ``warmup_iters`` calls.
    ema_decay : float
        Decay of the change-rate EMA (default 0.9).
    block_size : int
        ``Bk`` of the BLOCK mode (default 256).
    modes : tuple of str
        Candidate wire modes after warm-up; the smallest payload among them is sent.
    capacity_frac : float or None
        ``c_max``: enables the fixed-capacity single-collective mode.
    chunks : int
        ``C``: pipeline chunks per gather (encode chunk c+1 while chunk c is in flight).
    verify : bool
        Send a CRC32 of each shard; receivers raise ``RuntimeError`` on mismatch (stale cache).
    adaptive : bool
        Use the cost model to decide per shape whether compressing saves time.
    margin : float
        Compress iff ``T_ada < (1 - margin) T_raw``.
    reeval_every : int
        Re-evaluate the adaptive decision every this many calls.
    force_codec : bool
        In the single-process fallback still run encode -> decode on the local shard.
    """

    warmup_iters: int = 50
    warmup_rate: float = 0.02
    warmup: str = "ema"
    ema_decay: float = 0.9
    block_size: int = 256
    modes: tuple[str, ...] = MODES
    capacity_frac: float | None = None
    chunks: int = 4
    verify: bool = False
    adaptive: bool = True
    margin: float = 0.05
    reeval_every: int = 100
    force_codec: bool = False

    def __post_init__(self) -> None:
        check_int("warmup_iters", self.warmup_iters, low=0)
        check_float("warmup_rate", self.warmup_rate, 0.0, 1.0)
        check_choice("warmup", self.warmup, ("ema", "fixed"))
        check_float("ema_decay", self.ema_decay, 0.0, 1.0, high_open=True)
        check_int("block_size", self.block_size, low=8)
        if self.block_size % 8:
            raise ValueError(f"block_size must be a multiple of 8, got {self.block_size}")
        self.modes = tuple(self.modes)
        if not self.modes:
            raise ValueError("modes must name at least one of " + str(list(MODES)))
        for mode in self.modes:
            check_choice("modes entry", mode, MODES)
        if self.capacity_frac is not None:
            check_float("capacity_frac", self.capacity_frac, 0.0, 1.0, low_open=True)
        check_int("chunks", self.chunks, low=1)
        check_float("margin", self.margin, 0.0, 1.0, high_open=True)
        check_int("reeval_every", self.reeval_every, low=1)
        for name in ("verify", "adaptive", "force_codec"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")


def _check_float_tensor(name: str, x: Any) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _DTYPES:
        raise TypeError(
            f"{name} must have dtype bfloat16, float16 or float32 (AdERA splits float bit fields), got {x.dtype}"
        )
    return x


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1) if x.is_contiguous() else x.contiguous().reshape(-1)


# --------------------------------------------------------------------------------------------
# bit fields (vectorised uint8 ops on byte views; no Python loop over elements)
# --------------------------------------------------------------------------------------------
def sm_stream_bytes(numel: int, dtype: torch.dtype) -> int:
    """Bytes of the sign+mantissa stream of ``numel`` elements of ``dtype``."""
    if dtype == torch.bfloat16:
        return numel
    if dtype == torch.float16:
        return numel + 3 * ((numel + 7) // 8)
    return 3 * numel


def _packbits(bits: torch.Tensor) -> torch.Tensor:
    """bool/0-1 tensor [n] -> uint8 [ceil(n/8)], little bit order."""
    n = bits.numel()
    nb = (n + 7) // 8
    padded = torch.zeros(nb * 8, dtype=torch.uint8, device=bits.device)
    padded[:n] = bits.to(torch.uint8)
    weights = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8, device=bits.device)
    return (padded.view(nb, 8) * weights).sum(dim=1, dtype=torch.int32).to(torch.uint8)


def _unpackbits(packed: torch.Tensor, n: int) -> torch.Tensor:
    """uint8 [ceil(n/8)] -> bool [n] (inverse of :func:`_packbits`)."""
    shifts = torch.arange(8, dtype=torch.uint8, device=packed.device)
    return ((packed.unsqueeze(1) >> shifts) & 1).reshape(-1)[:n].bool()


def split_fields(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a float tensor into its exponent stream and sign+mantissa byte stream.

    bf16 words (fp32 words) are rotated left by one bit, ``s e7..e0 f.. -> e7..e0 f.. s``; the
    exponent is then the top byte and the sign+mantissa stream the remaining bytes. Only contiguous
    integer ops are used (strided byte ops are several times slower on CPU).

    Parameters
    ----------
    x : Tensor, bfloat16 / float16 / float32, any shape (flattened)

    Returns
    -------
    e : Tensor, uint8 [m]
        Biased exponent field of every element.
    sm : Tensor, uint8 [sm_stream_bytes(m, dtype)]
        bf16: ``f6..f0 s`` per element; fp32: three bytes ``f22..f0 s`` per element (little-endian);
        fp16: the low mantissa byte per element, then three bit planes of ``(s, f9, f8)``.
    """
    _check_float_tensor("x", x)
    flat = _flat(x)
    m = flat.numel()
    if flat.dtype == torch.float16:
        u = flat.view(torch.int16)
        e = ((u >> 10) & 0x1F).to(torch.uint8)
        hi = (u >> 8).to(torch.uint8)
        t3 = ((hi >> 5) & 0x4) | (hi & 0x3)
        planes = [_packbits((t3 >> j) & 1) for j in range(3)]
        return e, torch.cat([u.to(torch.uint8), *planes])
    if flat.dtype == torch.float32:
        u = flat.view(torch.int32)
        w = (u << 1) - (u >> 31)
        return (w >> 24).to(torch.uint8), w.view(torch.uint8).view(m, 4)[:, :3].reshape(-1)
    u = flat.view(torch.int16)
    w = (u << 1) - (u >> 15)  # u >> 15 is 0 or -1: subtracting it moves the sign into bit 0
    return (w >> 8).to(torch.uint8), w.to(torch.uint8)


def join_fields(
    e: torch.Tensor, sm: torch.Tensor, dtype: torch.dtype, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Inverse of :func:`split_fields`: rebuild ``m = e.numel()`` elements of ``dtype``.

    bf16: ``u = e << 7 | sm >> 1 | sm << 15`` on int16 (seven passes). ``out`` (contiguous,
    ``dtype``, ``m`` elements) is written in place when given.
    """
    m = e.numel()
    if out is None:
        out = torch.empty(m, dtype=dtype, device=e.device)
    if dtype == torch.float16:
        nb = (m + 7) // 8
        t3 = torch.zeros(m, dtype=torch.int16, device=e.device)
        for j in range(3):
            t3 |= _unpackbits(sm[m + j * nb : m + (j + 1) * nb], m).to(torch.int16) << j
        hi = ((t3 & 0x4) << 13) | (e.to(torch.int16) << 10) | ((t3 & 0x3) << 8)
        torch.bitwise_or(hi, sm[:m].to(torch.int16), out=out.view(torch.int16))
        return out
    if dtype == torch.float32:
        wb = torch.cat([sm.view(m, 3), e.view(m, 1)], dim=1).view(torch.int32).view(m)
        torch.bitwise_or((wb >> 1) & 0x7FFFFFFF, wb << 31, out=out.view(torch.int32))
        return out
    smi = sm.to(torch.int16)
    u = (e.to(torch.int16) << 7).bitwise_or_(smi >> 1)
    torch.bitwise_or(u, smi << 15, out=out.view(torch.int16))
    return out


def exponents(x: torch.Tensor) -> torch.Tensor:
    """Exponent field of every element of ``x`` as a contiguous uint8 [m]."""
    _check_float_tensor("x", x)
    flat = _flat(x)
    if flat.dtype == torch.float16:
        return ((flat.view(torch.int16) >> 10) & 0x1F).to(torch.uint8)
    if flat.dtype == torch.float32:
        return (flat.view(torch.int32) >> 23).to(torch.uint8)
    return (flat.view(torch.int16) >> 7).to(torch.uint8)


def _crc(x: torch.Tensor) -> int:
    return zlib.crc32(_flat(x).view(torch.uint8).cpu().numpy().tobytes()) & 0xFFFFFFFF


# --------------------------------------------------------------------------------------------
# payloads
# --------------------------------------------------------------------------------------------
def payload_size(
    mode: str,
    numel: int,
    dtype: torch.dtype,
    n_changed: int,
    *,
    block_size: int = 256,
    changed_block_elems: int = 0,
) -> int:
    """Body size in bytes of a payload (header excluded), per the formulas of the module docstring."""
    check_choice("mode", mode, MODES)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    s = sm_stream_bytes(numel, dtype)
    if mode == "raw":
        return itemsize * numel
    if mode == "sparse":
        return s + 5 * n_changed
    if mode == "bitmap":
        return s + (numel + 7) // 8 + n_changed
    nb = (numel + block_size - 1) // block_size
    return s + (nb + 7) // 8 + changed_block_elems


@dataclass
class Payload:
    """One encoded shard: header fields plus the body bytes.

    Attributes
    ----------
    mode : str
        One of :data:`MODES`.
    dtype : torch.dtype
    numel : int
        Elements of the shard ``m``.
    n_changed : int
        Exponents that differ from the sender's cache (-1: unknown, first call).
    body : Tensor, uint8 [payload_size(...)]
    crc : int or None
        CRC32 of the shard's bytes when ``verify=True``.
    block_size : int
    overflow : bool
        Fixed-capacity mode: the payload did not fit; the shard travels in a raw fallback collective.
    exponents : Tensor or None
        The sender's new exponents (uint8 [m]); local only, never serialised.
    """

    mode: str
    dtype: torch.dtype
    numel: int
    n_changed: int
    body: torch.Tensor
    crc: int | None = None
    block_size: int = 256
    overflow: bool = False
    exponents: torch.Tensor | None = field(default=None, repr=False)

    @property
    def nbytes(self) -> int:
        """Header plus body bytes."""
        return HEADER_BYTES + self.body.numel()

    def to_bytes(self) -> torch.Tensor:
        """Serialise header + body into one uint8 tensor on the body's device."""
        flags = (_FLAG_CRC if self.crc is not None else 0) | (_FLAG_OVERFLOW if self.overflow else 0)
        log_block = int(math.log2(self.block_size))
        header = _HEADER.pack(
            _MODE_CODE[self.mode],
            _DTYPE_CODE[self.dtype],
            flags,
            log_block,
            self.crc or 0,
            self.numel,
            self.n_changed,
        )
        head = torch.frombuffer(bytearray(header), dtype=torch.uint8).to(self.body.device)
        return torch.cat([head, self.body])

    @classmethod
    def from_bytes(cls, buf: torch.Tensor) -> Payload:
        """Parse :meth:`to_bytes` output (trailing padding is ignored)."""
        if buf.dtype != torch.uint8 or buf.dim() != 1 or buf.numel() < HEADER_BYTES:
            raise ValueError("payload buffer must be a 1-D uint8 tensor holding at least a header")
        mode, dcode, flags, log_block, crc, numel, n_c = _HEADER.unpack(
            bytes(buf[:HEADER_BYTES].cpu().tolist())
        )
        if mode >= len(MODES) or dcode not in _CODE_DTYPE:
            raise ValueError(f"corrupt payload header (mode={mode}, dtype code={dcode})")
        dtype = _CODE_DTYPE[dcode]
        block_size = 1 << log_block
        overflow = bool(flags & _FLAG_OVERFLOW)
        mode_name = MODES[mode]
        if overflow:
            size = 0
        elif mode_name == "block":
            size = None  # needs the flags; computed below
        else:
            size = payload_size(mode_name, numel, dtype, n_c)
        if size is None:
            s = sm_stream_bytes(numel, dtype)
            nb = (numel + block_size - 1) // block_size
            fl = _unpackbits(buf[HEADER_BYTES + s : HEADER_BYTES + s + (nb + 7) // 8], nb)
            size = s + (nb + 7) // 8 + _block_elems(fl, numel, block_size)
        body = buf[HEADER_BYTES : HEADER_BYTES + size]
        if body.numel() != size:
            raise ValueError(f"payload truncated: body needs {size} bytes, buffer holds {body.numel()}")
        return cls(
            mode_name, dtype, numel, n_c, body, crc if flags & _FLAG_CRC else None, block_size, overflow
        )


def _block_elems(flags: torch.Tensor, numel: int, block_size: int) -> int:
    n_cb = int(flags.sum().item())
    if n_cb == 0:
        return 0
    last = numel - (flags.numel() - 1) * block_size
    return n_cb * block_size - (block_size - last if bool(flags[-1]) else 0)


def encode_shard(
    x: torch.Tensor, cache: torch.Tensor | None, config: AdERAConfig | None = None, *, mode: str | None = None
) -> Payload:
    """Encode one shard against the sender's exponent cache (pure: no communication, cache untouched).

    Parameters
    ----------
    x : Tensor, bfloat16 / float16 / float32, ``m`` elements
    cache : Tensor uint8 [m] or None
        Exponents the receivers hold for this shard; ``None`` (no cache yet) forces RAW.
    config : AdERAConfig, optional
        Candidate modes, block size and ``verify``.
    mode : str, optional
        Force one mode (RAW is used anyway when ``cache`` is ``None``).

    Returns
    -------
    Payload
        The smallest payload among ``config.modes`` (ties go to the earlier of sparse, bitmap, block, raw).
    """
    config = config or AdERAConfig()
    if not isinstance(config, AdERAConfig):
        raise TypeError(f"config must be an AdERAConfig, got {type(config).__name__}")
    _check_float_tensor("x", x)
    flat = _flat(x)
    m = flat.numel()
    if cache is not None:
        if not isinstance(cache, torch.Tensor) or cache.dtype != torch.uint8 or cache.numel() != m:
            raise ValueError(f"cache must be a uint8 tensor with {m} elements (one exponent per element)")
    if mode is not None:
        check_choice("mode", mode, MODES)
    e, sm = split_fields(flat)
    crc = _crc(flat) if config.verify else None
    bk = config.block_size
    if cache is None:
        return Payload("raw", flat.dtype, m, -1, flat.view(torch.uint8).clone(), crc, bk, exponents=e)
    changed = e != cache
    n_c = int(torch.count_nonzero(changed).item())
    candidates = (
        (mode,)
        if mode is not None
        else tuple(c for c in ("sparse", "bitmap", "block", "raw") if c in config.modes)
    )
    if m >= 2**31 - 1:
        candidates = tuple(c for c in candidates if c != "sparse") or ("bitmap",)
    block_flags = idx_all = None
    block_elems = 0
    sizes = {c: payload_size(c, m, flat.dtype, n_c) for c in candidates if c != "block"}
    if "block" in candidates:
        nb = (m + bk - 1) // bk
        # lower bound of the BLOCK payload (every changed exponent sits in a changed block): skip the
        # block-flag pass when even the bound cannot beat the best other mode
        bound = sm.numel() + (nb + 7) // 8 + n_c
        if not sizes or bound < min(sizes.values()):
            idx_all = changed.nonzero().reshape(-1)
            block_flags = torch.zeros(nb, dtype=torch.bool, device=flat.device)
            block_flags[idx_all // bk] = True
            block_elems = _block_elems(block_flags, m, bk)
            sizes["block"] = payload_size(
                "block", m, flat.dtype, n_c, block_size=bk, changed_block_elems=block_elems
            )
    order = ("sparse", "bitmap", "block", "raw")
    candidates = tuple(c for c in order if c in sizes)
    best = min(candidates, key=lambda c: sizes[c])
    if best == "raw":
        body = flat.view(torch.uint8).clone()
    elif best == "sparse":
        idx = (changed.nonzero().reshape(-1) if idx_all is None else idx_all).to(torch.int32)
        body = torch.cat([sm, idx.view(torch.uint8), e[idx.long()]])
    elif best == "bitmap":
        body = torch.cat([sm, _packbits(changed), e[changed]])
    else:
        nb = block_flags.numel()
        e_pad = torch.zeros(nb * bk, dtype=torch.uint8, device=flat.device)
        e_pad[:m] = e
        exps = e_pad.view(nb, bk)[block_flags].reshape(-1)[:block_elems]
        body = torch.cat([sm, _packbits(block_flags), exps])
    return Payload(best, flat.dtype, m, n_c, body, crc, bk, exponents=e)


def decode_payload(
    payload: Payload, cache: torch.Tensor | None, *, out: torch.Tensor | None = None, verify: bool = True
) -> torch.Tensor:
    """Rebuild a shard from a payload and the receiver's exponent cache; updates ``cache`` in place.

    Parameters
    ----------
    payload : Payload
    cache : Tensor uint8 [m] or None
        Receiver's cached exponents of this sender's shard; required unless the payload is RAW.
        Overwritten with the shard's new exponents.
    out : Tensor, optional
        Contiguous destination with ``m`` elements of the payload's dtype.
    verify : bool
        Check the payload's CRC32 (when it carries one); ``RuntimeError`` on mismatch.

    Returns
    -------
    Tensor [m] of ``payload.dtype``, bitwise equal to the encoded shard.
    """
    if not isinstance(payload, Payload):
        raise TypeError(f"payload must be a Payload, got {type(payload).__name__}")
    if payload.overflow:
        raise ValueError(
            "an overflow payload carries no data; the shard comes from the raw fallback collective"
        )
    m, dtype, body = payload.numel, payload.dtype, payload.body
    if not isinstance(body, torch.Tensor) or body.is_meta or body.dtype != torch.uint8 or body.dim() != 1:
        raise ValueError(
            f"payload.body must be a 1-D uint8 tensor with data, got {getattr(body, 'shape', body)}"
        )
    if payload.mode == "raw" and body.numel() != m * torch.empty((), dtype=dtype).element_size():
        raise ValueError(
            f"payload.body of a raw payload must hold {m} {dtype} elements, got {body.numel()} bytes"
        )
    if out is None:
        out = torch.empty(m, dtype=dtype, device=body.device)
    if payload.mode == "raw":
        out.view(torch.uint8).copy_(body)
        if cache is not None:
            cache.copy_(exponents(out))
    else:
        if cache is None or cache.numel() != m or cache.dtype != torch.uint8:
            raise ValueError(
                f"decoding a {payload.mode!r} payload needs the receiver's uint8 exponent cache of {m} elements"
            )
        s = sm_stream_bytes(m, dtype)
        sm, rest = body[:s], body[s:]
        e = cache  # updated in place: only the changed exponents are written
        n_c = payload.n_changed
        if payload.mode == "sparse":
            idx = rest[: 4 * n_c].clone().view(torch.int32).long()  # clone: int32 alignment
            e[idx] = rest[4 * n_c : 5 * n_c]
        elif payload.mode == "bitmap":
            nbytes = (m + 7) // 8
            mask = _unpackbits(rest[:nbytes], m)
            e[mask] = rest[nbytes : nbytes + n_c]
        else:
            bk = payload.block_size
            nb = (m + bk - 1) // bk
            flags = _unpackbits(rest[: (nb + 7) // 8], nb)
            exps = rest[(nb + 7) // 8 :]
            n_cb = int(flags.sum().item())
            if n_cb:
                full = torch.zeros(n_cb * bk, dtype=torch.uint8, device=e.device)
                full[: exps.numel()] = exps
                idx = (flags.nonzero().reshape(-1, 1) * bk + torch.arange(bk, device=e.device)).reshape(-1)
                keep = idx < m
                e[idx[keep]] = full[keep]
        join_fields(e, sm, dtype, out=out)
    if verify and payload.crc is not None and _crc(out) != payload.crc:
        raise RuntimeError(
            "AdERA verify failed: the reconstructed shard's CRC32 does not match the sender's; "
            "the receiver's exponent cache is out of sync with the sender"
        )
    return out


# --------------------------------------------------------------------------------------------
# communication adapters: torch.distributed process groups and in-process thread groups
# --------------------------------------------------------------------------------------------
class _DoneWork:
    """Work handle of an already finished operation."""

    def __init__(self, fn: Callable[[], None] | None = None) -> None:
        self._fn = fn
        self._done = fn is None

    def wait(self, timeout: Any = None) -> bool:
        if not self._done:
            self._done = True
            self._fn()
        return True

    def is_completed(self) -> bool:
        return self._done


class _ThreadShared:
    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.barrier = threading.Barrier(world_size)
        self.slots: list[Any] = [None] * world_size


class ThreadGroup:
    """One member of an in-process group of ``world_size`` virtual ranks (one thread per rank).

    Collectives block on a barrier until every member has called them; use :meth:`create` to build
    the members and :func:`emulate_all_gather` (or your own threads) to drive them.
    """

    def __init__(self, shared: _ThreadShared, rank: int) -> None:
        self._shared = shared
        self.rank = rank
        self.world_size = shared.world_size

    @classmethod
    def create(cls, world_size: int) -> list[ThreadGroup]:
        check_int("world_size", world_size, low=1)
        shared = _ThreadShared(world_size)
        return [cls(shared, r) for r in range(world_size)]

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor) -> None:
        sh = self._shared
        sh.barrier.wait()
        sh.slots[self.rank] = inp
        sh.barrier.wait()
        n = inp.numel()
        for r, t in enumerate(sh.slots):
            if t.numel() != n:
                raise ValueError("all-gather inputs differ in size across ranks (uneven shards)")
            out[r * n : (r + 1) * n].copy_(t)
        sh.barrier.wait()

    def all_reduce_max(self, t: torch.Tensor) -> None:
        sh = self._shared
        sh.barrier.wait()
        sh.slots[self.rank] = t.clone()
        sh.barrier.wait()
        t.copy_(torch.stack(list(sh.slots)).amax(dim=0))
        sh.barrier.wait()

    def all_reduce_sum(self, t: torch.Tensor) -> None:
        sh = self._shared
        sh.barrier.wait()
        sh.slots[self.rank] = t.clone()
        sh.barrier.wait()
        acc = sh.slots[0].clone()
        for s in sh.slots[1:]:
            acc += s
        t.copy_(acc)
        sh.barrier.wait()


class _Comm:
    """Rank, size and the few collectives AdERA needs, over a ProcessGroup or a ThreadGroup."""

    def __init__(self, group: Any) -> None:
        self.group = group
        if isinstance(group, ThreadGroup):
            self.rank, self.world_size, self.thread = group.rank, group.world_size, True
        elif dist.is_available() and dist.is_initialized():
            self.rank, self.world_size, self.thread = dist.get_rank(group), dist.get_world_size(group), False
        else:
            self.rank, self.world_size, self.thread = 0, 1, False

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, async_op: bool = False) -> Any:
        if self.world_size == 1:
            out.reshape(-1).copy_(inp.reshape(-1))
            return _DoneWork()
        if self.thread:
            self.group.all_gather(out.reshape(-1), inp.reshape(-1))
            return _DoneWork()
        fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        work = fn(out, inp, group=self.group, async_op=async_op)
        return work if async_op else _DoneWork()

    def all_reduce_max(self, t: torch.Tensor) -> torch.Tensor:
        if self.world_size == 1:
            return t
        if self.thread:
            self.group.all_reduce_max(t)
        else:
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return t

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        if self.world_size == 1:
            return t
        if self.thread:
            self.group.all_reduce_sum(t)
        else:
            dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.group)
        return t

    def reduce_scatter_sum(self, out: torch.Tensor, inp: torch.Tensor) -> None:
        if self.world_size == 1:
            out.copy_(inp)
        elif self.thread:
            full = inp.clone()
            self.group.all_reduce_sum(full)
            n = out.numel()
            out.copy_(full[self.rank * n : (self.rank + 1) * n])
        else:
            fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
            fn(out, inp, group=self.group)


def _check_gather_args(output_tensor: torch.Tensor, input_tensor: torch.Tensor, world: int) -> None:
    _check_float_tensor("input_tensor", input_tensor)
    if not isinstance(output_tensor, torch.Tensor):
        raise TypeError(f"output_tensor must be a torch.Tensor, got {type(output_tensor).__name__}")
    if output_tensor.dtype != input_tensor.dtype:
        raise TypeError(
            f"output_tensor dtype {output_tensor.dtype} differs from input_tensor dtype {input_tensor.dtype}"
        )
    if not output_tensor.is_contiguous():
        raise ValueError("output_tensor must be contiguous")
    if output_tensor.numel() != world * input_tensor.numel():
        raise ValueError(
            f"uneven or unpadded shards: output_tensor has {output_tensor.numel()} elements, expected "
            f"world_size * input numel = {world} * {input_tensor.numel()}; pad every shard to the same length"
        )


def _check_even(comm: _Comm, numel: int, device: torch.device) -> None:
    """One small collective: every rank's shard length must be equal."""
    t = torch.tensor([numel], dtype=torch.int64, device=device)
    out = torch.empty(comm.world_size, dtype=torch.int64, device=device)
    comm.all_gather(out, t)
    sizes = out.cpu().tolist()
    if len(set(sizes)) != 1:
        raise ValueError(
            f"uneven shards across ranks: shard lengths {sizes}; pad every shard to the same length"
        )


# --------------------------------------------------------------------------------------------
# stats, cost model, state
# --------------------------------------------------------------------------------------------
@dataclass
class GatherStats:
    """Byte and time counters of one gathered parameter (per rank).

    ``bytes_raw``: bytes an uncompressed all-gather would contribute from this rank (shard bytes);
    ``bytes_sent``: payload bytes this rank produced (header included, unpadded);
    ``bytes_wire``: bytes this rank contributed to the collectives (padding to the longest
    payload, length exchange and fallback collectives included).
    """

    bytes_raw: int = 0
    bytes_sent: int = 0
    bytes_wire: int = 0
    time_encode: float = 0.0
    time_decode: float = 0.0
    calls: int = 0


@dataclass
class CostModel:
    """Latency/bandwidth model of the all-gather used by the adaptive switch.

    Parameters
    ----------
    alpha : float
        Per-collective latency in seconds.
    bandwidth : float
        Bus bandwidth in bytes/s (ring all-gather: ``(P-1)/P`` of the gathered bytes cross each link).
    margin : float
        Compress iff ``T_ada < (1 - margin) T_raw``.
    """

    alpha: float = 10e-6
    bandwidth: float = 25e9
    margin: float = 0.05

    def __post_init__(self) -> None:
        check_float("alpha", self.alpha, 0.0)
        check_float("bandwidth", self.bandwidth, 0.0, low_open=True)
        check_float("margin", self.margin, 0.0, 1.0, high_open=True)

    @classmethod
    def measure(
        cls,
        group: Any = None,
        sizes: Sequence[int] = (2**16, 2**20, 2**22),
        *,
        repeats: int = 3,
        margin: float = 0.05,
        device: str | torch.device = "cpu",
    ) -> CostModel:
        """Fit ``alpha`` and ``bandwidth`` from all-gathers of ``sizes`` bytes per rank.

        The minimum over ``repeats`` is max-reduced over ranks so that every rank gets the same model.
        Needs at least 2 ranks.
        """
        comm = _Comm(group)
        if comm.world_size < 2:
            raise ValueError("CostModel.measure needs an initialised process group with at least 2 ranks")
        p = comm.world_size
        times = []
        for size in sizes:
            check_int("sizes entry", size, low=1)
            inp = torch.zeros(size, dtype=torch.uint8, device=device)
            out = torch.empty(size * p, dtype=torch.uint8, device=device)
            comm.all_gather(out, inp)
            best = math.inf
            for _ in range(repeats):
                t0 = time.perf_counter()
                comm.all_gather(out, inp)
                best = min(best, time.perf_counter() - t0)
            times.append(best)
        t = comm.all_reduce_max(torch.tensor(times, dtype=torch.float64))
        x = torch.tensor([s * p * (p - 1) / p for s in sizes], dtype=torch.float64)
        a = torch.stack([torch.ones_like(x), x], dim=1)
        sol = torch.linalg.lstsq(a, t.unsqueeze(1)).solution.reshape(-1)
        alpha = max(float(sol[0]), 0.0)
        inv_bw = float(sol[1])
        if inv_bw <= 0:
            inv_bw = float(t.max()) / float(x.max())
        return cls(alpha=alpha, bandwidth=1.0 / inv_bw, margin=margin)

    def t_raw(self, numel: int, world_size: int, itemsize: int = 2) -> float:
        """Seconds of an uncompressed all-gather of ``numel`` gathered elements."""
        p = world_size
        return self.alpha + itemsize * numel * (p - 1) / (p * self.bandwidth)

    def t_adera(
        self,
        numel: int,
        world_size: int,
        change_rate: float,
        t_enc: float,
        t_dec: float,
        dtype: torch.dtype = torch.bfloat16,
    ) -> float:
        """Seconds of the two-phase AdERA gather (codec times included)."""
        p = world_size
        per_elem = expected_wire_bytes_per_element(dtype, change_rate)
        return t_enc + t_dec + 2 * self.alpha + numel * per_elem * (p - 1) / (p * self.bandwidth)

    def should_compress(
        self,
        numel: int,
        change_rate: float,
        t_enc: float,
        t_dec: float,
        *,
        world_size: int = 2,
        dtype: torch.dtype = torch.bfloat16,
    ) -> bool:
        """``T_ada < (1 - margin) T_raw`` for ``numel`` gathered elements (all ranks together)."""
        check_int("numel", numel, low=0)
        check_float("change_rate", change_rate, 0.0, 1.0)
        check_float("t_enc", t_enc, 0.0)
        check_float("t_dec", t_dec, 0.0)
        check_int("world_size", world_size, low=1)
        if world_size == 1:
            return False
        itemsize = torch.empty(0, dtype=dtype).element_size()
        t_raw = self.t_raw(numel, world_size, itemsize)
        return self.t_adera(numel, world_size, change_rate, t_enc, t_dec, dtype) < (1 - self.margin) * t_raw


def expected_wire_bytes_per_element(dtype: torch.dtype, change_rate: float) -> float:
    """Bytes per element of the best of SPARSE / BITMAP / RAW at change rate ``rho`` (large shards)."""
    itemsize = torch.empty(0, dtype=dtype).element_size()
    s = sm_stream_bytes(8, dtype) / 8
    return min(s + 5 * change_rate, s + 0.125 + change_rate, float(itemsize))


class AdERAState:
    """Persistent per-parameter state of the AdERA all-gather on one rank.

    Parameters
    ----------
    config : AdERAConfig
    numel : int
        Shard length ``m`` (equal on every rank).
    dtype : torch.dtype
        bfloat16, float16 or float32.
    world_size : int
        ``P``.
    cost_model : CostModel, optional
        Used when ``config.adaptive``; defaults to ``CostModel()`` (GPU-like alpha=10 us, BW=25 GB/s).
    device : torch.device or str

    Attributes
    ----------
    caches : Tensor uint8 [P, m]
        Exponents of every rank's shard as last delivered; row ``rank`` is the sender's reference.
    iteration : int
        Calls so far.
    ema_rate : float or None
        EMA of the global exponent-change rate.
    in_warmup : bool
    compress : bool or None
        Adaptive decision (``None`` before the first decision).
    bytes_raw, bytes_sent, bytes_wire : int
    change_rate_history : list of float
        Global change rate of every call (NaN on the first call).
    mode_history : list of str
        Mode this rank sent on each call (``"raw"`` during warm-up; the largest chunk's mode otherwise).
    time_encode, time_decode, time_decision : float
        Seconds spent encoding, decoding, and deciding.
    """

    def __init__(
        self,
        config: AdERAConfig,
        numel: int,
        dtype: torch.dtype,
        world_size: int,
        *,
        cost_model: CostModel | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        if not isinstance(config, AdERAConfig):
            raise TypeError(f"config must be an AdERAConfig, got {type(config).__name__}")
        check_int("numel", numel, low=1)
        if dtype not in _DTYPES:
            raise TypeError(f"dtype must be bfloat16, float16 or float32, got {dtype}")
        check_int("world_size", world_size, low=1)
        self.config = config
        self.numel = numel
        self.dtype = dtype
        self.world_size = world_size
        self.cost_model = cost_model or CostModel(margin=config.margin)
        self.caches = torch.zeros(world_size, numel, dtype=torch.uint8, device=device)
        self.cache_valid = False
        self.iteration = 0
        self.ema_rate: float | None = None
        self.in_warmup = True
        self.warmup_end: int | None = None
        self.compress: bool | None = None
        self.last_decision: int | None = None
        self.t_enc = 0.0
        self.t_dec = 0.0
        self.bytes_raw = 0
        self.bytes_sent = 0
        self.bytes_wire = 0
        self.time_encode = 0.0
        self.time_decode = 0.0
        self.time_decision = 0.0
        self.change_rate_history: list[float] = []
        self.mode_history: list[str] = []

    @property
    def itemsize(self) -> int:
        return torch.empty(0, dtype=self.dtype).element_size()

    def _record_rate(self, rate: float | None) -> None:
        self.change_rate_history.append(math.nan if rate is None else rate)
        if rate is None:
            return
        d = self.config.ema_decay
        self.ema_rate = rate if self.ema_rate is None else d * self.ema_rate + (1 - d) * rate

    def _update_warmup(self) -> None:
        """Called at the start of a call: leave warm-up when the rule allows (identical on all ranks)."""
        cfg = self.config
        if not self.in_warmup:
            return
        if self.iteration >= max(cfg.warmup_iters, 1) and self.cache_valid:
            if cfg.warmup == "fixed" or (self.ema_rate is not None and self.ema_rate < cfg.warmup_rate):
                self.in_warmup = False
                self.warmup_end = self.iteration

    def _decide(self, comm: _Comm, x: torch.Tensor) -> None:
        """Adaptive decision at warm-up end and every ``reeval_every`` calls (collective when P > 1)."""
        cfg = self.config
        if not cfg.adaptive or comm.world_size == 1:  # P = 1 only reaches here with force_codec
            self.compress = True
            return
        due = self.last_decision is None or self.iteration - self.last_decision >= cfg.reeval_every
        if not due:
            return
        start = time.perf_counter()
        own = self.caches[comm.rank]
        t0 = time.perf_counter()
        payload = encode_shard(x, own, cfg)
        t_enc = time.perf_counter() - t0
        scratch = own.clone()
        t0 = time.perf_counter()
        decode_payload(payload, scratch, verify=False)
        t_dec = (time.perf_counter() - t0) * comm.world_size
        times = comm.all_reduce_max(torch.tensor([t_enc, t_dec], dtype=torch.float64))
        self.t_enc, self.t_dec = float(times[0]), float(times[1])
        self.compress = self.cost_model.should_compress(
            self.numel * comm.world_size,
            min(max(self.ema_rate or 0.0, 0.0), 1.0),
            self.t_enc,
            self.t_dec,
            world_size=comm.world_size,
            dtype=self.dtype,
        )
        self.last_decision = self.iteration
        self.time_decision += time.perf_counter() - start

    def summary(self) -> dict[str, Any]:
        """JSON-friendly counters."""
        return {
            "iteration": self.iteration,
            "warmup_end": self.warmup_end,
            "compress": self.compress,
            "ema_rate": self.ema_rate,
            "bytes_raw": self.bytes_raw,
            "bytes_sent": self.bytes_sent,
            "bytes_wire": self.bytes_wire,
            "time_encode": self.time_encode,
            "time_decode": self.time_decode,
            "time_decision": self.time_decision,
        }


# --------------------------------------------------------------------------------------------
# the AdERA all-gather
# --------------------------------------------------------------------------------------------
def _chunk_bounds(m: int, chunks: int) -> list[tuple[int, int]]:
    c = max(1, min(chunks, m))
    step = (m + c - 1) // c
    return [(s, min(s + step, m)) for s in range(0, m, step)]


def _capacity(m: int, dtype: torch.dtype, frac: float) -> int:
    return HEADER_BYTES + sm_stream_bytes(m, dtype) + 5 * math.ceil(frac * m)


class _Pending:
    """Chunks launched but not yet decoded."""

    def __init__(self) -> None:
        self.items: list[Callable[[], None]] = []

    def run_one(self) -> None:
        self.items.pop(0)()

    def run_all(self) -> None:
        while self.items:
            self.run_one()


def adera_all_gather(
    output_tensor: torch.Tensor,
    input_tensor: torch.Tensor,
    group: Any = None,
    *,
    state: AdERAState,
    async_op: bool = False,
) -> Any:
    """Lossless AdERA all-gather; drop-in for ``torch.distributed.all_gather_into_tensor``.

    Parameters
    ----------
    output_tensor : Tensor [P * m] (contiguous), same dtype as ``input_tensor``
        Receives ``concat(x_0, ..., x_{P-1})`` bit for bit.
    input_tensor : Tensor [m], bfloat16 / float16 / float32
        This rank's shard (every rank's shard has the same length ``m``).
    group : ProcessGroup, ThreadGroup or None
        ``None`` uses the default process group; with no initialised process group the call is a
        single-process fallback (copy, or encode -> decode when ``config.force_codec``).
    state : AdERAState
        This parameter's persistent state on this rank.
    async_op : bool
        Return a work handle; decoding of the chunks still in flight happens in ``wait()``.

    Returns
    -------
    None, or a work handle with ``wait()`` when ``async_op``.
    """
    if not isinstance(state, AdERAState):
        raise TypeError(f"state must be an AdERAState, got {type(state).__name__}")
    comm = _Comm(group)
    _check_gather_args(output_tensor, input_tensor, comm.world_size)
    x = _flat(input_tensor)
    out = output_tensor.view(-1)
    if state.numel != x.numel() or state.dtype != x.dtype or state.world_size != comm.world_size:
        raise ValueError(
            f"state was built for numel={state.numel}, dtype={state.dtype}, world_size={state.world_size}; "
            f"got numel={x.numel()}, dtype={x.dtype}, world_size={comm.world_size}"
        )
    if state.caches.device != x.device:
        state.caches = state.caches.to(x.device)
    if comm.world_size == 1 and not state.config.force_codec:
        out.copy_(x)
        state.bytes_raw += x.numel() * x.element_size()
        state.bytes_sent += x.numel() * x.element_size()
        state.iteration += 1
        return _DoneWork() if async_op else None
    if state.iteration == 0 and comm.world_size > 1:
        _check_even(comm, x.numel(), x.device)
    state._update_warmup()
    if not state.in_warmup:
        state._decide(comm, x)
    use_codec = (not state.in_warmup) and bool(state.compress)
    if not use_codec:
        pending = _raw_path(comm, out, x, state, async_op)
    else:
        pending = _codec_path(comm, out, x, state, async_op)
    state.iteration += 1
    if async_op:
        return _DoneWork(pending.run_all)
    pending.run_all()
    return None


def _raw_path(comm: _Comm, out: torch.Tensor, x: torch.Tensor, state: AdERAState, async_op: bool) -> _Pending:
    """Plain all-gather; the global change rate is measured on the gathered tensor (warm-up)."""
    m, p = x.numel(), comm.world_size
    work = comm.all_gather(out, x, async_op=async_op)
    pending = _Pending()

    def finish() -> None:
        work.wait()
        t0 = time.perf_counter()
        e_all = exponents(out).view(p, m)
        rate = int(torch.count_nonzero(e_all != state.caches)) / (p * m) if state.cache_valid else None
        state.caches.copy_(e_all)
        state.cache_valid = True
        state.time_decode += time.perf_counter() - t0
        state._record_rate(rate)
        nbytes = m * x.element_size()
        state.bytes_raw += nbytes
        state.bytes_sent += nbytes
        state.bytes_wire += nbytes
        state.mode_history.append("raw")

    pending.items.append(finish)
    return pending


def _codec_path(
    comm: _Comm, out: torch.Tensor, x: torch.Tensor, state: AdERAState, async_op: bool
) -> _Pending:
    cfg = state.config
    m, p, r = x.numel(), comm.world_size, comm.rank
    dev = x.device
    bounds = _chunk_bounds(m, cfg.chunks)
    pending = _Pending()
    totals = {"n_c": 0, "sizes": {}}
    n_chunks = len(bounds)

    for ci, (s, e) in enumerate(bounds):
        t0 = time.perf_counter()
        payload = encode_shard(x[s:e], state.caches[r, s:e], cfg)
        buf = payload.to_bytes()
        state.time_encode += time.perf_counter() - t0
        totals["sizes"][payload.mode] = totals["sizes"].get(payload.mode, 0) + (e - s)
        state.bytes_sent += buf.numel()
        if cfg.capacity_frac is not None:
            cap = _capacity(e - s, x.dtype, cfg.capacity_frac)
            if buf.numel() > cap:
                ov = Payload(
                    payload.mode,
                    x.dtype,
                    e - s,
                    payload.n_changed,
                    torch.empty(0, dtype=torch.uint8, device=dev),
                    None,
                    cfg.block_size,
                    overflow=True,
                )
                buf = ov.to_bytes()
            send = torch.zeros(cap, dtype=torch.uint8, device=dev)
            send[: buf.numel()] = buf
            length = cap
            state.bytes_wire += cap
        else:
            ln = torch.tensor([buf.numel()], dtype=torch.int64, device=dev)
            lens = torch.empty(p, dtype=torch.int64, device=dev)
            comm.all_gather(lens, ln)
            length = int(lens.max().item())
            send = torch.zeros(length, dtype=torch.uint8, device=dev)
            send[: buf.numel()] = buf
            state.bytes_wire += length + 8
        recv = torch.empty(p * length, dtype=torch.uint8, device=dev)
        work = comm.all_gather(recv, send, async_op=async_op or ci + 1 < n_chunks)

        def finish(work=work, recv=recv, length=length, s=s, e=e, payload=payload) -> None:
            work.wait()
            t0 = time.perf_counter()
            parsed = [Payload.from_bytes(recv[k * length : (k + 1) * length]) for k in range(p)]
            for k, pl in enumerate(parsed):
                if pl.numel != e - s or pl.dtype != x.dtype:
                    raise ValueError(
                        f"uneven shards: rank {k} sent a chunk of {pl.numel} {pl.dtype} elements, "
                        f"expected {e - s} {x.dtype}"
                    )
            overflow = [k for k, pl in enumerate(parsed) if pl.overflow]
            raw_all = None
            if overflow:
                raw_all = torch.empty(p * (e - s), dtype=x.dtype, device=dev)
                comm.all_gather(raw_all, x[s:e].contiguous())
                state.bytes_wire += (e - s) * x.element_size()
            for k, pl in enumerate(parsed):
                dst = out[k * m + s : k * m + e]
                if k == r:
                    dst.copy_(x[s:e])
                    state.caches[r, s:e] = payload.exponents
                elif pl.overflow:
                    dst.copy_(raw_all[k * (e - s) : (k + 1) * (e - s)])
                    state.caches[k, s:e] = exponents(dst)
                else:
                    decode_payload(pl, state.caches[k, s:e], out=dst, verify=cfg.verify)
            totals["n_c"] += sum(max(pl.n_changed, 0) for pl in parsed)
            state.time_decode += time.perf_counter() - t0

        pending.items.append(finish)
        if not async_op and len(pending.items) > 1:
            pending.run_one()  # decode chunk c-1 while chunk c is in flight

    def record() -> None:
        state._record_rate(totals["n_c"] / (p * m))
        state.bytes_raw += m * x.element_size()
        sizes = totals["sizes"]
        state.mode_history.append(max(sizes, key=sizes.get))

    pending.items.append(record)
    return pending


def emulate_all_gather(
    shards: Sequence[torch.Tensor],
    states: Sequence[Any],
    gather_fn: Callable[..., Any] | None = None,
    groups: Sequence[ThreadGroup] | None = None,
) -> list[torch.Tensor]:
    """Run one all-gather over ``P = len(shards)`` virtual ranks inside this process (one thread each).

    Parameters
    ----------
    shards : sequence of Tensor [m]
        Shard of each virtual rank.
    states : sequence
        Per-rank state passed as ``state=`` to ``gather_fn`` (AdERAState for AdERA, GatherStats for
        the baselines).
    gather_fn : callable, optional
        ``fn(output, input, group, *, state)``; default :func:`adera_all_gather`.
    groups : sequence of ThreadGroup, optional
        Reuse members across calls (built fresh when omitted).

    Returns
    -------
    list of Tensor [P * m], one gathered output per virtual rank.
    """
    p = len(shards)
    if len(states) != p:
        raise ValueError(f"states must have one entry per shard ({p}), got {len(states)}")
    gather_fn = gather_fn or adera_all_gather
    groups = list(groups) if groups is not None else ThreadGroup.create(p)
    outs = [torch.empty(p * s.numel(), dtype=s.dtype, device=s.device) for s in shards]
    if p == 1:
        gather_fn(outs[0], shards[0], groups[0], state=states[0])
        return outs
    with ThreadPoolExecutor(max_workers=p) as pool:
        futures = [pool.submit(gather_fn, outs[r], shards[r], groups[r], state=states[r]) for r in range(p)]
        errors = []
        for f in futures:
            try:
                f.result(timeout=600)
            except Exception as err:  # noqa: BLE001 - re-raised below
                errors.append(err)
                groups[0]._shared.barrier.abort()
        if errors:
            real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
            raise (real or errors)[0]
    return outs


try:  # FSDP2's pluggable all-gather (torch >= 2.8); private module path, so guarded
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather as _FSDPAllGather
except ImportError:  # pragma: no cover - older torch
    _FSDPAllGather = object


class AdERAAllGather(_FSDPAllGather):
    """AdERA as FSDP2's all-gather: ``fsdp_module.set_custom_all_gather(AdERAAllGather())``.

    FSDP2 (``torch.distributed.fsdp.fully_shard``) gathers each FSDP module's parameters as one flat
    buffer (``output [P * m]``, ``input [m]`` aliasing this rank's slot of the output); one instance
    per FSDP module keeps that buffer's :class:`AdERAState`. Buffers that are not bf16/fp16/fp32
    (FSDP byte-views mixed-dtype groups as uint8) fall back to the plain all-gather. Forward and
    backward re-gathers (``reshard_after_forward=True``) both go through AdERA; the backward one sees
    unchanged exponents.

    Parameters
    ----------
    config : AdERAConfig, optional
    cost_model : CostModel, optional
    """

    def __init__(self, config: AdERAConfig | None = None, cost_model: CostModel | None = None) -> None:
        self.config = config or AdERAConfig()
        self.cost_model = cost_model
        self.state: AdERAState | None = None

    def allocate(self, size: Sequence[int], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(
        self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any, async_op: bool = False
    ) -> Any:
        if input_tensor.dtype not in _DTYPES:  # FSDP's uint8 view of mixed-dtype groups: plain gather
            work = _Comm(group).all_gather(output_tensor, input_tensor, async_op=async_op)
            return work if async_op else None
        world = _Comm(group).world_size
        st = self.state
        if st is None or st.numel != input_tensor.numel() or st.dtype != input_tensor.dtype:
            st = self.state = AdERAState(
                self.config,
                input_tensor.numel(),
                input_tensor.dtype,
                world,
                cost_model=self.cost_model,
                device=input_tensor.device,
            )
        return adera_all_gather(output_tensor, input_tensor, group, state=st, async_op=async_op)


def _fsdp2_losses(use_adera: bool, steps: int, seed: int) -> tuple[list[float], dict[str, Any]]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 16))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    gathers = []
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh, mp_policy=policy)
        if use_adera:
            ag = AdERAAllGather(AdERAConfig(warmup_iters=1, warmup="fixed", adaptive=False, verify=True))
            layer.set_custom_all_gather(ag)
            gathers.append(ag)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(seed + dist.get_rank())
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 16, generator=g)
        loss = (model(x).float() - x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        t = loss.detach().clone()
        dist.all_reduce(t)
        losses.append(float(t))
    modes = [ag.state.mode_history for ag in gathers if ag.state is not None]
    return losses, {"modes": modes}


def _self_check_worker(rank: int, world_size: int, port: int, spec: dict[str, Any], path: str) -> None:
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        m, dtype = spec["numel"], getattr(torch, spec["dtype"])
        cfg = AdERAConfig(**spec["config"])
        state = AdERAState(cfg, m, dtype, world_size)
        g = torch.Generator().manual_seed(spec["seed"])
        full = torch.randn(world_size * m, generator=g) * 0.02
        exact = []
        for it in range(spec["iters"]):
            full = full + torch.randn(world_size * m, generator=g) * spec["step"]
            low = full.to(dtype)
            mine = low[rank * m : (rank + 1) * m]
            out = torch.empty(world_size * m, dtype=dtype)
            ref = torch.empty(world_size * m, dtype=dtype)
            handle = adera_all_gather(out, mine, state=state, async_op=it % 2 == 1)
            if handle is not None:
                handle.wait()
            dist.all_gather_into_tensor(ref, mine)
            exact.append(_bitwise_equal(out, ref) and _bitwise_equal(out, low))
        result = {
            "exact": exact,
            "modes": state.mode_history,
            "bytes_wire": state.bytes_wire,
            "bytes_raw": state.bytes_raw,
            "change_rate": state.change_rate_history,
        }
        if spec["fsdp2_steps"]:
            plain, _ = _fsdp2_losses(False, spec["fsdp2_steps"], spec["seed"])
            ada, extra = _fsdp2_losses(True, spec["fsdp2_steps"], spec["seed"])
            result["fsdp2"] = {"plain_losses": plain, "adera_losses": ada, **extra}
        if rank == 0:
            with open(path, "w") as f:
                json.dump(result, f)
    finally:
        dist.destroy_process_group()


def gloo_self_check(
    world_size: int = 2,
    numel: int = 700,
    iters: int = 5,
    *,
    dtype: str = "bfloat16",
    config: dict[str, Any] | None = None,
    step: float = 1e-3,
    seed: int = 0,
    fsdp2_steps: int = 0,
) -> dict[str, Any]:
    """Spawn ``world_size`` gloo processes on 127.0.0.1 and compare AdERA with ``all_gather_into_tensor``.

    Each of ``iters`` calls perturbs an fp32 master vector by ``N(0, step^2)``, casts it to ``dtype``
    and gathers each rank's shard of ``numel`` elements both ways (every other call with
    ``async_op=True``). With ``fsdp2_steps > 0`` it also trains a 2-layer MLP with FSDP2
    (``fully_shard``, bf16 params) for that many steps twice, with the default all-gather and with
    :class:`AdERAAllGather`, and returns both loss curves under ``"fsdp2"``. Returns rank 0's
    ``{"exact": [bool per call], "modes", "bytes_wire", "bytes_raw", "change_rate"[, "fsdp2"]}``.
    """
    import tempfile

    import torch.multiprocessing as mp

    check_int("world_size", world_size, low=2)
    check_int("numel", numel, low=1)
    check_int("iters", iters, low=1)
    check_choice("dtype", dtype, ("bfloat16", "float16", "float32"))
    cfg = {
        "warmup_iters": 2,
        "warmup": "fixed",
        "adaptive": False,
        "verify": True,
        "chunks": 3,
        **(config or {}),
    }
    AdERAConfig(**cfg)  # validate before spawning
    check_int("fsdp2_steps", fsdp2_steps, low=0)
    spec = {
        "numel": numel,
        "dtype": dtype,
        "config": cfg,
        "iters": iters,
        "step": step,
        "seed": seed,
        "fsdp2_steps": fsdp2_steps,
    }
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "result.json")
        mp.spawn(_self_check_worker, args=(world_size, port, spec, path), nprocs=world_size)
        with open(path) as f:
            return json.load(f)


# --------------------------------------------------------------------------------------------
# baselines
# --------------------------------------------------------------------------------------------
def raw_all_gather(
    output_tensor: torch.Tensor,
    input_tensor: torch.Tensor,
    group: Any = None,
    *,
    state: GatherStats | None = None,
    async_op: bool = False,
) -> Any:
    """Uncompressed all-gather (what FSDP does) with byte accounting; same signature as the others."""
    comm = _Comm(group)
    if input_tensor.dtype != output_tensor.dtype:
        raise TypeError("output_tensor and input_tensor must share a dtype")
    if output_tensor.numel() != comm.world_size * input_tensor.numel():
        raise ValueError("uneven or unpadded shards: output numel must be world_size * input numel")
    work = comm.all_gather(output_tensor.view(-1), _flat(input_tensor), async_op=async_op)
    if state is not None:
        n = input_tensor.numel() * input_tensor.element_size()
        state.bytes_raw += n
        state.bytes_sent += n
        state.bytes_wire += n
        state.calls += 1
    return work if async_op else None


def _gather_var(comm: _Comm, buf: torch.Tensor) -> tuple[list[torch.Tensor], int]:
    """Two-phase variable-size all-gather of uint8 buffers; returns per-rank buffers and padded length."""
    p, dev = comm.world_size, buf.device
    lens = torch.empty(p, dtype=torch.int64, device=dev)
    comm.all_gather(lens, torch.tensor([buf.numel()], dtype=torch.int64, device=dev))
    sizes = lens.cpu().tolist()
    length = max(sizes)
    send = torch.zeros(length, dtype=torch.uint8, device=dev)
    send[: buf.numel()] = buf
    recv = torch.empty(p * length, dtype=torch.uint8, device=dev)
    comm.all_gather(recv, send)
    return [recv[k * length : k * length + sizes[k]] for k in range(p)], length


def zlib_encode(x: torch.Tensor, level: int = 1) -> bytes:
    """Lossless baseline codec: zlib over the byte-grouped exponent stream (ZipNN-style).

    The exponent stream and the sign+mantissa stream are compressed separately (each stored raw when
    zlib does not shrink it). Format: ``<B dtype><q numel><B flags><q len_e><q len_sm>`` + streams.
    """
    _check_float_tensor("x", x)
    e, sm = split_fields(x)
    streams, flags = [], 0
    for bit, data in enumerate((e.cpu().numpy().tobytes(), sm.cpu().numpy().tobytes())):
        comp = zlib.compress(data, level)
        if len(comp) < len(data):
            streams.append(comp)
            flags |= 1 << bit
        else:
            streams.append(data)
    head = struct.pack("<BqBqq", _DTYPE_CODE[x.dtype], x.numel(), flags, len(streams[0]), len(streams[1]))
    return head + streams[0] + streams[1]


def zlib_decode(blob: bytes, device: str | torch.device = "cpu") -> torch.Tensor:
    """Inverse of :func:`zlib_encode`."""
    hsize = struct.calcsize("<BqBqq")
    dcode, numel, flags, le, ls = struct.unpack("<BqBqq", blob[:hsize])
    parts = [blob[hsize : hsize + le], blob[hsize + le : hsize + le + ls]]
    data = [zlib.decompress(b) if flags & (1 << i) else b for i, b in enumerate(parts)]
    e = torch.frombuffer(bytearray(data[0]), dtype=torch.uint8).to(device)
    sm = torch.frombuffer(bytearray(data[1]), dtype=torch.uint8).to(device)
    if e.numel() != numel:
        raise ValueError("corrupt zlib payload")
    return join_fields(e, sm, _CODE_DTYPE[dcode])


def lossless_zlib_all_gather(
    output_tensor: torch.Tensor,
    input_tensor: torch.Tensor,
    group: Any = None,
    *,
    state: GatherStats | None = None,
    level: int = 1,
) -> None:
    """Lossless baseline all-gather: zlib (level 1) over the byte-grouped exponent stream, two-phase.

    Same argument order as ``all_gather_into_tensor``; bit-exact.
    """
    comm = _Comm(group)
    _check_gather_args(output_tensor, input_tensor, comm.world_size)
    x = _flat(input_tensor)
    t0 = time.perf_counter()
    blob = zlib_encode(x, level)
    t_enc = time.perf_counter() - t0
    buf = torch.frombuffer(bytearray(blob), dtype=torch.uint8).to(x.device)
    parts, length = _gather_var(comm, buf)
    t0 = time.perf_counter()
    out = output_tensor.view(-1)
    m = x.numel()
    for k, part in enumerate(parts):
        out[k * m : (k + 1) * m] = (
            zlib_decode(part.cpu().numpy().tobytes(), x.device) if k != comm.rank else x
        )
    if state is not None:
        state.bytes_raw += m * x.element_size()
        state.bytes_sent += len(blob)
        state.bytes_wire += length + 8
        state.time_encode += t_enc
        state.time_decode += time.perf_counter() - t0
        state.calls += 1


def int8_quantize(x: torch.Tensor, block_size: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-wise symmetric int8 quantisation (ZeRO++ qwZ style).

    Returns ``q`` int8 [m] and per-block fp32 scales [ceil(m / block_size)] with
    ``scale = max|x_block| / 127`` (1 for an all-zero block). Needs finite input.
    """
    _check_float_tensor("x", x)
    flat = _flat(x).float()
    if not bool(torch.isfinite(flat).all()):
        raise ValueError("int8 block quantisation needs finite input (inf/NaN cannot be represented)")
    m = flat.numel()
    nb = (m + block_size - 1) // block_size
    padded = torch.zeros(nb * block_size, dtype=torch.float32, device=flat.device)
    padded[:m] = flat
    blocks = padded.view(nb, block_size)
    scale = blocks.abs().amax(dim=1) / 127.0
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(blocks / scale[:, None]).clamp_(-127, 127).to(torch.int8).reshape(-1)[:m]
    return q, scale


def int8_dequantize(
    q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype, block_size: int = 256
) -> torch.Tensor:
    """Inverse of :func:`int8_quantize` (lossy): ``x ~ q * scale`` cast to ``dtype``."""
    m = q.numel()
    nb = scale.numel()
    padded = torch.zeros(nb * block_size, dtype=torch.float32, device=q.device)
    padded[:m] = q.float()
    return (padded.view(nb, block_size) * scale[:, None]).reshape(-1)[:m].to(dtype)


def int8_block_all_gather(
    output_tensor: torch.Tensor,
    input_tensor: torch.Tensor,
    group: Any = None,
    *,
    state: GatherStats | None = None,
    block_size: int = 256,
) -> None:
    """Lossy baseline all-gather: int8 values + one fp32 scale per block of 256, one fixed-size collective.

    Same argument order as ``all_gather_into_tensor``; the result differs from the input by at most
    half a quantisation step per element (plus the rounding of the output dtype).
    """
    comm = _Comm(group)
    _check_gather_args(output_tensor, input_tensor, comm.world_size)
    x = _flat(input_tensor)
    m, p = x.numel(), comm.world_size
    t0 = time.perf_counter()
    q, scale = int8_quantize(x, block_size)
    buf = torch.cat([q.view(torch.uint8), scale.view(torch.uint8)])
    t_enc = time.perf_counter() - t0
    recv = torch.empty(p * buf.numel(), dtype=torch.uint8, device=x.device)
    comm.all_gather(recv, buf)
    t0 = time.perf_counter()
    out = output_tensor.view(-1)
    n = buf.numel()
    for k in range(p):
        part = recv[k * n : (k + 1) * n]
        out[k * m : (k + 1) * m] = int8_dequantize(
            part[:m].view(torch.int8), part[m:].clone().view(torch.float32), x.dtype, block_size
        )
    if state is not None:
        state.bytes_raw += m * x.element_size()
        state.bytes_sent += n
        state.bytes_wire += n
        state.time_encode += t_enc
        state.time_decode += time.perf_counter() - t0
        state.calls += 1


# --------------------------------------------------------------------------------------------
# ZeRO-3-style sharded wrapper
# --------------------------------------------------------------------------------------------
GATHER_FNS = {
    "raw": raw_all_gather,
    "adera": adera_all_gather,
    "zlib": lossless_zlib_all_gather,
    "int8": int8_block_all_gather,
}


class _GatheredParam(torch.autograd.Function):
    """Forward: all-gather the (mixed-precision) shards into the full weight.

    Backward: park the full-weight gradient on the wrapper; :meth:`ShardedMoEWrapper.sync_gradients`
    reduce-scatters it later in a fixed order (collectives inside autograd would run in a
    data-dependent order and could pair up differently on different ranks).
    """

    @staticmethod
    def forward(ctx, shard, wrapper, name):  # noqa: D102
        ctx.wrapper, ctx.name = wrapper, name
        return wrapper._gather_full(name, shard)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        pending = ctx.wrapper._pending_grads
        pending[ctx.name] = grad.detach().clone() if ctx.name not in pending else pending[ctx.name] + grad
        return None, None, None


class ShardedMoEWrapper(nn.Module):
    """Minimal ZeRO-3-style sharding with a pluggable weight all-gather (for AdERA and its baselines).

    Every selected parameter is flattened, padded to a multiple of ``P`` and replaced by this
    rank's fp32 master shard ``[ceil(numel / P)]``. Before a module's forward its full weights are
    rebuilt by casting the shards to ``gather_dtype`` (the mixed-precision copy), all-gathering them
    with ``gather_fn`` and upcasting to the compute dtype. After ``loss.backward()`` call
    :meth:`sync_gradients`: gradients of the full weights are reduce-scattered (averaged over ranks)
    into the shards' ``.grad`` and gradients of replicated parameters are all-reduced (averaged), in
    a fixed order on every rank. The full weights stay referenced by autograd until backward (FSDP
    ``reshard_after_forward=False`` behaviour; no re-gather in backward; optional forward prefetch).

    Shapes: a sharded parameter of ``n`` elements becomes ``shards[name]`` of ``ceil(n / P)``
    fp32 elements; the gathered buffer has ``P * ceil(n / P)`` elements of ``gather_dtype``.

    Parameters
    ----------
    model : nn.Module
    group : ProcessGroup, ThreadGroup or None
    gather_fn : {"raw", "adera", "zlib", "int8"} or callable
        ``fn(output, input, group, *, state)``.
    shard : {"experts", "all"} or callable
        Which parameters to shard: names containing ``"experts"``, every parameter, or a predicate on
        the parameter name.
    config : AdERAConfig, optional
        For AdERA gathers.
    gather_dtype : torch.dtype
        Dtype of the all-gathered copy (default bfloat16).
    cost_model : CostModel, optional
    check_exact : bool
        After every gather also run a plain all-gather and count bitwise mismatches (``mismatches``).
    prefetch : bool
        When a module's pre-hook runs, launch the next sharded module's gather with ``async_op=True``
        (AdERA and raw gathers; others run synchronously) so that it overlaps this module's compute;
        a prefetched buffer whose shard changed in between is discarded and gathered again.
    """

    def __init__(
        self,
        model: nn.Module,
        group: Any = None,
        gather_fn: str | Callable[..., Any] = "raw",
        *,
        shard: str | Callable[[str], bool] = "experts",
        config: AdERAConfig | None = None,
        gather_dtype: torch.dtype = torch.bfloat16,
        cost_model: CostModel | None = None,
        check_exact: bool = False,
        prefetch: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
        if isinstance(gather_fn, str):
            check_choice("gather_fn", gather_fn, GATHER_FNS)
            gather_fn = GATHER_FNS[gather_fn]
        elif not callable(gather_fn):
            raise TypeError("gather_fn must be 'raw', 'adera', 'zlib', 'int8' or a callable")
        if gather_dtype not in _DTYPES:
            raise TypeError(f"gather_dtype must be bfloat16, float16 or float32, got {gather_dtype}")
        if isinstance(shard, str):
            check_choice("shard", shard, ("experts", "all"))
            pred = (lambda n: "experts" in n) if shard == "experts" else (lambda n: True)
        elif callable(shard):
            pred = shard
        else:
            raise TypeError("shard must be 'experts', 'all' or a callable on parameter names")
        self.module = model
        self.group = group
        self.comm = _Comm(group)
        self.gather_fn = gather_fn
        self.config = config or AdERAConfig()
        self.gather_dtype = gather_dtype
        self.cost_model = cost_model
        self.check_exact = check_exact
        if not isinstance(prefetch, bool):
            raise TypeError(f"prefetch must be a bool, got {prefetch!r}")
        self.prefetch = prefetch
        self.prefetched = 0
        self._prefetched: dict[str, tuple[torch.Tensor, Any, torch.Tensor, int]] = {}
        self._groups: list[list[str]] = []
        self.mismatches = 0
        self.gathers = 0
        self.shards = nn.ParameterDict()
        self.states: dict[str, Any] = {}
        self._meta: dict[str, tuple[nn.Module, str, torch.Size, int]] = {}
        p, r = self.comm.world_size, self.comm.rank
        names = [n for n, _ in model.named_parameters()]
        for name in names:
            if not pred(name):
                continue
            mod_name, _, pname = name.rpartition(".")
            mod = model.get_submodule(mod_name) if mod_name else model
            param = mod._parameters[pname]
            numel = param.numel()
            m = (numel + p - 1) // p
            flat = torch.zeros(m * p, dtype=torch.float32, device=param.device)
            flat[:numel] = param.detach().reshape(-1).float()
            key = name.replace(".", "__")
            self.shards[key] = nn.Parameter(flat[r * m : (r + 1) * m].clone())
            del mod._parameters[pname]
            self._meta[key] = (mod, pname, param.shape, numel)
            if gather_fn is adera_all_gather:
                self.states[key] = AdERAState(
                    self.config, m, gather_dtype, p, cost_model=cost_model, device=param.device
                )
            else:
                self.states[key] = GatherStats()
        hooked: dict[int, list[str]] = {}
        for key, (mod, _, _, _) in self._meta.items():
            hooked.setdefault(id(mod), []).append(key)
        for mod, _, _, _ in self._meta.values():
            if hooked.get(id(mod)):
                keys = hooked.pop(id(mod))
                mod.register_forward_pre_hook(self._make_pre_hook(len(self._groups), keys))
                self._groups.append(keys)
        self._pending_grads: dict[str, torch.Tensor] = {}

    def _make_pre_hook(self, index: int, keys: list[str]) -> Callable[..., None]:
        def hook(mod: nn.Module, args: Any) -> None:
            for key in keys:
                _, pname, _, _ = self._meta[key]
                setattr(mod, pname, _GatheredParam.apply(self.shards[key], self, key))
            if self.prefetch and index + 1 < len(self._groups):
                for key in self._groups[index + 1]:  # next module's gather overlaps this module's compute
                    if key not in self._prefetched:
                        self._prefetched[key] = self._launch(key, async_op=True)

        return hook

    def _launch(self, key: str, async_op: bool) -> tuple[torch.Tensor, Any, torch.Tensor, int]:
        shard = self.shards[key]
        low = shard.detach().to(self.gather_dtype)
        out = torch.empty(self.comm.world_size * low.numel(), dtype=self.gather_dtype, device=shard.device)
        handle = None
        if async_op and self.gather_fn in (adera_all_gather, raw_all_gather):
            handle = self.gather_fn(out, low, self.group, state=self.states[key], async_op=True)
        else:
            self.gather_fn(out, low, self.group, state=self.states[key])
        return out, handle, low, shard._version

    def sync_gradients(self) -> None:
        """Reduce-scatter sharded gradients and all-reduce replicated ones (averaged over ranks).

        Call after ``loss.backward()`` and before ``optimizer.step()`` on every rank.
        """
        for key, shard in self.shards.items():
            grad = self._pending_grads.pop(key, None)
            if grad is None:
                grad = torch.zeros(self._meta[key][2], dtype=torch.float32, device=shard.device)
            g = self._reduce_scatter(key, grad)
            shard.grad = g if shard.grad is None else shard.grad + g
        self._pending_grads.clear()
        p = self.comm.world_size
        if p > 1:
            for param in self.module.parameters():
                if param.requires_grad:
                    if param.grad is None:
                        param.grad = torch.zeros_like(param)
                    self.comm.all_reduce_sum(param.grad)
                    param.grad.div_(p)

    def _gather_full(self, key: str, shard: torch.Tensor) -> torch.Tensor:
        _, _, shape, numel = self._meta[key]
        entry = self._prefetched.pop(key, None)
        if entry is not None:
            out, handle, low, version = entry
            if handle is not None:
                handle.wait()
            if version != shard._version:  # the shard changed since the prefetch: gather again
                entry = None
            else:
                self.prefetched += 1
        if entry is None:
            out, _, low, _ = self._launch(key, async_op=False)
        self.gathers += 1
        if self.check_exact:
            ref = torch.empty_like(out)
            self.comm.all_gather(ref, low)
            if not _bitwise_equal(ref, out):
                self.mismatches += 1
        return out[:numel].view(shape).to(shard.dtype)

    def _reduce_scatter(self, key: str, grad: torch.Tensor) -> torch.Tensor:
        _, _, _, numel = self._meta[key]
        p = self.comm.world_size
        m = self.shards[key].numel()
        flat = torch.zeros(m * p, dtype=torch.float32, device=grad.device)
        flat[:numel] = grad.reshape(-1)
        out = torch.empty(m, dtype=torch.float32, device=grad.device)
        self.comm.reduce_scatter_sum(out, flat)
        return out.div_(p)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def gathered_bf16(self) -> dict[str, torch.Tensor]:
        """Current mixed-precision copies of this rank's shards (what the next gather sends)."""
        return {k: v.detach().to(self.gather_dtype) for k, v in self.shards.items()}


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and torch.equal(_flat(a).view(torch.uint8), _flat(b).view(torch.uint8))
    )


# --------------------------------------------------------------------------------------------
# trace-driven simulator
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LayerSpec:
    """One layer of the simulated model: ``numel`` gathered parameters, ``compute_s`` seconds of
    forward+backward compute per iteration, ``itemsize`` bytes per element (2 for bf16)."""

    numel: int
    compute_s: float
    itemsize: int = 2

    def __post_init__(self) -> None:
        check_int("numel", self.numel, low=1)
        check_float("compute_s", self.compute_s, 0.0)
        check_choice("itemsize", self.itemsize, (2, 4))


@dataclass(frozen=True)
class Network:
    """Ring all-gather network: per-collective latency ``alpha`` (s) and per-GPU bandwidth (B/s)."""

    alpha: float = 10e-6
    bandwidth: float = 25e9

    def __post_init__(self) -> None:
        check_float("alpha", self.alpha, 0.0)
        check_float("bandwidth", self.bandwidth, 0.0, low_open=True)

    def all_gather_s(self, total_bytes: float, world_size: int, collectives: int = 1) -> float:
        p = world_size
        return collectives * self.alpha + total_bytes * (p - 1) / (p * self.bandwidth)


DEFAULT_CODECS = {
    "adera_tput": 400e9,  # B/s of raw data through encode or decode (memory-bound elementwise kernels)
    "entropy_tput": 30e9,  # B/s of the entropy coder (lossless baseline)
    "entropy_ratio": 1.4,  # raw / lossless bytes
    "quant_tput": 300e9,  # B/s of int8 quantise / dequantise
    "quant_ratio": 2 / (1 + 4 / 256),  # bf16 -> int8 + fp32 scale per 256
    "chunks": 4,
    "gathers_per_iter": 2,  # ZeRO-3 gathers each layer in forward and again in backward
}


def simulate(
    layers: Sequence[LayerSpec],
    P: int,
    network: Network,
    codecs: dict[str, float] | None = None,
    change_rate: float | Sequence[float] = 0.01,
    overlap: bool = True,
) -> dict[str, float]:
    """Per-iteration time of RAW, lossless-entropy, lossy-int8 and AdERA weight all-gathers.

    Model (every number an assumption, see :data:`DEFAULT_CODECS`): a layer of ``B`` raw bytes
    costs ``alpha + B (P-1) / (P BW)`` uncompressed; a codec with throughput ``T`` adds
    ``B / (P T)`` to encode the local shard and ``B / T`` to decode all shards and shrinks the
    bytes by its ratio; AdERA's ratio is ``itemsize / w(rho)`` with :func:`expected_wire_bytes_per_element`
    and it pays two collectives (length exchange). With ``overlap`` the codec and the transfer
    are pipelined over ``chunks`` (``max + (sum - max) / chunks``) and layer ``l+1``'s gather is
    prefetched under layer ``l``'s compute; without it, every stage is serial.

    Parameters
    ----------
    layers : sequence of LayerSpec
    P : int
        Ranks (>= 2).
    network : Network
    codecs : dict, optional
        Overrides of :data:`DEFAULT_CODECS`.
    change_rate : float or sequence of float
        Exponent-change rate (per iteration when a sequence; times are averaged over it).
    overlap : bool

    Returns
    -------
    dict
        ``{"raw", "lossless", "lossy", "adera"}`` seconds per iteration plus ``"speedup_vs_raw"``,
        ``"speedup_vs_lossless"``, ``"speedup_vs_lossy"`` of AdERA.
    """
    check_int("P", P, low=2)
    if not layers:
        raise ValueError("layers must not be empty")
    if not isinstance(network, Network):
        raise TypeError(f"network must be a Network, got {type(network).__name__}")
    cod = {**DEFAULT_CODECS, **(codecs or {})}
    unknown = set(cod) - set(DEFAULT_CODECS)
    if unknown:
        raise ValueError(f"unknown codec parameters {sorted(unknown)}; known: {sorted(DEFAULT_CODECS)}")
    rates = [float(change_rate)] if isinstance(change_rate, (int, float)) else [float(r) for r in change_rate]
    if not rates or any(not 0.0 <= r <= 1.0 for r in rates):
        raise ValueError("change_rate must be in [0, 1] (or a non-empty sequence of such)")
    chunks = max(1, int(cod["chunks"]))
    gpi = int(cod["gathers_per_iter"])

    def stage_time(enc: float, comm: float, dec: float) -> float:
        if not overlap:
            return enc + comm + dec
        parts = (enc, comm, dec)
        return max(parts) + (sum(parts) - max(parts)) / chunks

    def iteration(kind: str, rho: float) -> float:
        gathers, computes = [], []
        for layer in layers:
            raw = layer.numel * layer.itemsize
            if kind == "raw":
                g = network.all_gather_s(raw, P)
            elif kind == "lossless":
                t = cod["entropy_tput"]
                g = stage_time(raw / (P * t), network.all_gather_s(raw / cod["entropy_ratio"], P, 2), raw / t)
            elif kind == "lossy":
                t = cod["quant_tput"]
                g = stage_time(raw / (P * t), network.all_gather_s(raw / cod["quant_ratio"], P), raw / t)
            else:
                t = cod["adera_tput"]
                dtype = torch.bfloat16 if layer.itemsize == 2 else torch.float32
                wire = layer.numel * expected_wire_bytes_per_element(dtype, rho)
                g = stage_time(raw / (P * t), network.all_gather_s(wire, P, 2), raw / t)
            gathers.append(g)
            computes.append(layer.compute_s)
        if gpi == 0:
            return sum(computes)
        share = [c / gpi for c in computes]  # compute of one pass (forward or backward) per layer
        total = 0.0
        for _ in range(gpi):
            if overlap:
                total += gathers[0] + sum(max(c, g) for c, g in zip(share, gathers[1:] + [0.0]))
            else:
                total += sum(gathers) + sum(share)
        return total

    res = {k: sum(iteration(k, r) for r in rates) / len(rates) for k in ("raw", "lossless", "lossy", "adera")}
    res["speedup_vs_raw"] = res["raw"] / res["adera"]
    res["speedup_vs_lossless"] = res["lossless"] / res["adera"]
    res["speedup_vs_lossy"] = res["lossy"] / res["adera"]
    return res

r"""AdERA codec: settings, bf16/fp16/fp32 bit fields, wire payloads, shard encode and decode.

:class:`AdERAConfig` holds the all-gather settings. :func:`split_fields` / :func:`join_fields` separate a
float tensor into its exponent bytes and its sign+mantissa stream (vectorised integer ops on byte views,
so NaN payloads, +-0, +-inf and subnormals survive). :func:`encode_shard` writes one shard as the
smallest of the RAW, SPARSE, BITMAP and BLOCK payloads against the receiver's exponent cache;
:func:`decode_payload` rebuilds it bit for bit.

On CPU the hot path runs as whole-shard numpy passes over zero-copy views of the tensors (bit fields via
shifts with a truncating ``uint8`` output, ``packbits``/``unpackbits`` for the bitmaps, ``flatnonzero`` and
``take`` for the changed exponents) and writes straight into a preallocated payload body; every other
device, and CPU with :data:`NUMPY_CPU` off, runs the torch reference path. Both produce the same bytes.

.. math::

    \mathrm{bytes}_{\mathrm{SPARSE}} = S + 5 n_c,\quad
    \mathrm{bytes}_{\mathrm{BITMAP}} = S + \lceil m/8 \rceil + n_c,\quad
    \mathrm{bytes}_{\mathrm{BLOCK}} = S + \lceil n_b/8 \rceil + L_{cb}

Shapes
------
- shard ``x``: ``[m]`` (any shape is flattened), bfloat16 / float16 / float32.
- exponent cache: ``[m]`` uint8; sign+mantissa stream: ``[S]`` uint8 with ``S = sm_stream_bytes(m, dtype)``.
"""

from __future__ import annotations

import math
import struct
import sys
import threading
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from neurips26.common.checks import check_choice, check_float, check_int

if sys.byteorder != "little":  # pragma: no cover - every supported platform is little-endian
    raise ImportError("neurips26.distributed.adera assumes a little-endian host")
MODES = ("raw", "sparse", "bitmap", "block")
_MODE_CODE = {name: i for i, name in enumerate(MODES)}
_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_DTYPE_CODE = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}
_CODE_DTYPE = {v: k for k, v in _DTYPE_CODE.items()}
HEADER_BYTES = 24
_HEADER = struct.Struct("<BBBBIqq")
_FLAG_CRC, _FLAG_OVERFLOW = 1, 2
NUMPY_CPU = True
"""CPU tensors take the numpy kernels (set ``False`` to run the torch reference path on CPU as well)."""


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
        ``Bk`` of the BLOCK mode (default 256); a power of two >= 8 (the header stores its log2).
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
        if self.block_size & (self.block_size - 1):  # the payload header stores log2(block_size)
            raise ValueError(f"block_size must be a power of two (>= 8), got {self.block_size}")
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
# CPU kernels: one numpy pass per step over zero-copy views, outputs written in place
# --------------------------------------------------------------------------------------------
_NP_WORD = {
    torch.bfloat16: (torch.int16, np.uint16, 7),
    torch.float16: (torch.int16, np.uint16, 10),
    torch.float32: (torch.int32, np.uint32, 23),
}


_SCRATCH = threading.local()


def _scratch(nbytes: int) -> np.ndarray:
    """This thread's reusable uint8 scratch of ``nbytes`` (kept between calls, grown to the largest request):
    the big temporaries of encode and join skip the page faults of a fresh allocation."""
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.size < nbytes:
        buf = _SCRATCH.buf = np.empty(nbytes, dtype=np.uint8)
    return buf[:nbytes]


def _numpy_ok(*tensors: torch.Tensor | None) -> bool:
    return NUMPY_CPU and all(t is None or (t.device.type == "cpu" and t.is_contiguous()) for t in tensors)


def _np_words(x: torch.Tensor) -> np.ndarray:
    """Unsigned-integer numpy view of a contiguous CPU float tensor (no copy)."""
    iv, nv, _ = _NP_WORD[x.dtype]
    return x.detach().view(iv).numpy().view(nv)


def _np_exponents(words: np.ndarray, dtype: torch.dtype, out: np.ndarray) -> np.ndarray:
    """Biased exponents into ``out`` (uint8 [m]): one shift whose uint8 output drops the sign bit."""
    np.right_shift(words, _NP_WORD[dtype][2], out=out, casting="unsafe")
    if dtype == torch.float16:
        np.bitwise_and(out, 0x1F, out=out)
    return out


def _np_bf16_sm(words: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> None:
    """bf16 sign+mantissa bytes ``f6..f0 s`` into ``out`` (uint8 [m]); ``scratch``: uint8 [m]."""
    np.left_shift(words, 1, out=out, casting="unsafe")
    np.right_shift(words, 15, out=scratch, casting="unsafe")
    np.bitwise_or(out, scratch, out=out)


def _np_bf16_join(e: np.ndarray, sm: np.ndarray, out: np.ndarray) -> None:
    """bf16 words into ``out`` (uint16 [m]): ``w = e << 8 | sm`` rotated right by one bit."""
    np.left_shift(e, 8, out=out, dtype=np.uint16)
    np.bitwise_or(out, sm, out=out)
    low = np.left_shift(
        out, 15, out=_scratch(2 * out.size).view(np.uint16)
    )  # bit 0 of w (the sign) -> bit 15
    np.right_shift(out, 1, out=out)
    np.bitwise_or(out, low, out=out)


def _np_positions(packed: np.ndarray, n_set: int, m: int, bits: np.ndarray | None = None) -> np.ndarray:
    """Ascending indices (int64 [n_set]) of the set bits of a packed little-order bitmap of ``m`` bits.

    Sparse bitmaps (at most 10% set, where numpy's ``nonzero`` walks the zeros with ``memchr``) go in two
    dense steps: the non-zero bytes, then the set bits among their 8 bits; denser ones use ``flatnonzero``
    over the unpacked bits (``bits``, when the caller has them)."""
    if n_set * 10 > m:
        if bits is None:
            bits = np.unpackbits(packed, count=m, bitorder="little").view(np.bool_)
        return np.flatnonzero(bits)
    nz = np.flatnonzero(packed != 0)
    j = np.flatnonzero(np.unpackbits(packed[nz], bitorder="little").view(np.bool_))
    pos = nz[j >> 3]
    pos <<= 3
    pos |= j & 7
    return pos[pos < m] if pos.size and pos[-1] >= m else pos  # padding bits of a foreign bitmap


def _np_block_flags(packed: np.ndarray, m: int, block_size: int) -> np.ndarray:
    """Changed-block flags (bool [ceil(m / Bk)]) from the packed change bitmap."""
    nb, per = (m + block_size - 1) // block_size, block_size // 8
    padded = np.zeros(nb * per, dtype=np.uint8)
    padded[: packed.size] = packed
    if per % 8 == 0:
        return (padded.view(np.uint64).reshape(nb, per // 8) != 0).any(axis=1)
    return (padded.reshape(nb, per) != 0).any(axis=1)


def _np_block_elems(flags: np.ndarray, m: int, block_size: int) -> int:
    n_cb = int(np.count_nonzero(flags))
    if n_cb == 0:
        return 0
    return n_cb * block_size - (flags.size * block_size - m if flags[-1] else 0)


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
    if flat.dtype == torch.bfloat16 and _numpy_ok(flat):
        e, sm = torch.empty(m, dtype=torch.uint8), torch.empty(m, dtype=torch.uint8)
        words = _np_words(flat)
        _np_exponents(words, flat.dtype, e.numpy())
        _np_bf16_sm(words, sm.numpy(), _scratch(m))
        return e, sm
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
    if dtype == torch.bfloat16 and _numpy_ok(e, sm, out):
        _np_bf16_join(e.numpy(), sm.numpy(), _np_words(out))
        return out
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
    if _numpy_ok(flat):
        out = torch.empty(flat.numel(), dtype=torch.uint8)
        _np_exponents(_np_words(flat), flat.dtype, out.numpy())
        return out
    if flat.dtype == torch.float16:
        return ((flat.view(torch.int16) >> 10) & 0x1F).to(torch.uint8)
    if flat.dtype == torch.float32:
        return (flat.view(torch.int32) >> 23).to(torch.uint8)
    return (flat.view(torch.int16) >> 7).to(torch.uint8)


def _crc(x: torch.Tensor) -> int:
    return zlib.crc32(_flat(x).detach().view(torch.uint8).cpu().numpy()) & 0xFFFFFFFF


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
        if self.block_size < 1 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of two to be serialised, got {self.block_size}")
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
    crc = _crc(flat) if config.verify else None
    bk = config.block_size
    candidates = (
        (mode,)
        if mode is not None
        else tuple(c for c in ("sparse", "bitmap", "block", "raw") if c in config.modes)
    )
    if m >= 2**31 - 1:
        candidates = tuple(c for c in candidates if c != "sparse") or ("bitmap",)
    if _numpy_ok(flat, cache):
        return _encode_numpy(flat, cache, candidates, crc, bk)
    e, sm = split_fields(flat)
    if cache is None:
        return Payload("raw", flat.dtype, m, -1, flat.view(torch.uint8).clone(), crc, bk, exponents=e)
    changed = e != cache
    n_c = int(torch.count_nonzero(changed).item())
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


def _pick(sizes: dict[str, int]) -> str:
    """Smallest payload; ties go to the earlier of sparse, bitmap, block, raw."""
    return min((c for c in ("sparse", "bitmap", "block", "raw") if c in sizes), key=lambda c: sizes[c])


def _encode_numpy(
    flat: torch.Tensor, cache: torch.Tensor | None, candidates: tuple[str, ...], crc: int | None, bk: int
) -> Payload:
    """CPU :func:`encode_shard`: same mode choice and bytes as the torch path, whole-shard numpy passes."""
    m, dtype = flat.numel(), flat.dtype
    words = _np_words(flat)
    e = torch.empty(m, dtype=torch.uint8)
    en = _np_exponents(words, dtype, e.numpy())
    if cache is None:
        return Payload("raw", dtype, m, -1, flat.view(torch.uint8).clone(), crc, bk, exponents=e)
    changed = np.not_equal(en, cache.numpy(), out=_scratch(m).view(np.bool_))
    n_c = int(np.count_nonzero(changed))
    sizes = {c: payload_size(c, m, dtype, n_c) for c in candidates if c != "block"}
    s, nb = sm_stream_bytes(m, dtype), (m + bk - 1) // bk
    packed = flags = None
    if "block" in candidates and (not sizes or s + (nb + 7) // 8 + n_c < min(sizes.values())):
        packed = np.packbits(changed, bitorder="little")
        flags = _np_block_flags(packed, m, bk)
        elems = _np_block_elems(flags, m, bk)
        sizes["block"] = payload_size("block", m, dtype, n_c, block_size=bk, changed_block_elems=elems)
    best = _pick(sizes)
    if best == "raw":
        return Payload("raw", dtype, m, n_c, flat.view(torch.uint8).clone(), crc, bk, exponents=e)
    body = torch.empty(sizes[best], dtype=torch.uint8)
    bn = body.numpy()
    rest = bn[s:]
    if best in ("sparse", "bitmap"):
        if packed is None:
            packed = np.packbits(changed, bitorder="little")
        idx = _np_positions(packed, n_c, m, changed)
    if best == "sparse":
        rest[: 4 * n_c] = idx.astype("<i4").view(np.uint8)
        np.take(en, idx, out=rest[4 * n_c :], mode="clip")
    elif best == "bitmap":
        nbytes = (m + 7) // 8
        rest[:nbytes] = packed
        np.take(en, idx, out=rest[nbytes:], mode="clip")
    else:
        fb, nf = (nb + 7) // 8, m // bk
        rest[:fb] = np.packbits(flags, bitorder="little")
        rows = np.flatnonzero(flags[:nf])
        k = rows.size
        np.take(
            en[: nf * bk].reshape(nf, bk),
            rows,
            axis=0,
            out=rest[fb : fb + k * bk].reshape(k, bk),
            mode="clip",
        )
        if nb > nf and flags[-1]:
            rest[fb + k * bk :] = en[nf * bk :]
    if dtype == torch.bfloat16:
        _np_bf16_sm(words, bn[:s], changed.view(np.uint8))  # the change mask is spent: reuse it as scratch
    else:
        bn[:s] = split_fields(flat)[1].numpy()
    return Payload(best, dtype, m, n_c, body, crc, bk, exponents=e)


def _decode_numpy(payload: Payload, cache: torch.Tensor | None, out: torch.Tensor) -> None:
    """CPU :func:`decode_payload` (arguments already checked): cache update, then one join pass into ``out``."""
    m, dtype, bn = payload.numel, payload.dtype, payload.body.numpy()
    if payload.mode == "raw":
        out.view(torch.uint8).copy_(payload.body)
        if cache is not None:
            _np_exponents(_np_words(out), dtype, cache.numpy())
        return
    if cache is None:
        raise ValueError(
            f"decoding a {payload.mode!r} payload needs the receiver's uint8 exponent cache of {m} elements"
        )
    s, n_c, cn = sm_stream_bytes(m, dtype), payload.n_changed, cache.numpy()
    rest = bn[s:]
    if payload.mode == "sparse":
        cn[rest[: 4 * n_c].copy().view("<i4")] = rest[4 * n_c : 5 * n_c]
    elif payload.mode == "bitmap":
        nbytes = (m + 7) // 8
        cn[_np_positions(rest[:nbytes], n_c, m)] = rest[nbytes : nbytes + n_c]
    else:
        bk = payload.block_size
        nb, nf = (m + bk - 1) // bk, m // bk
        fb = (nb + 7) // 8
        flags = np.unpackbits(rest[:fb], count=nb, bitorder="little").view(bool)
        exps = rest[fb:]
        rows = np.flatnonzero(flags[:nf])
        k = rows.size
        cn[: nf * bk].reshape(nf, bk)[rows] = exps[: k * bk].reshape(k, bk)
        if nb > nf and flags[-1]:
            cn[nf * bk :] = exps[k * bk : k * bk + m - nf * bk]
    if dtype == torch.bfloat16:
        _np_bf16_join(cn, bn[:s], _np_words(out))
    else:
        join_fields(cache, payload.body[:s], dtype, out=out)


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
    if _numpy_ok(body, cache, out) and (cache is None or cache.numel() == m and cache.dtype == torch.uint8):
        _decode_numpy(payload, cache, out)
    elif payload.mode == "raw":
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

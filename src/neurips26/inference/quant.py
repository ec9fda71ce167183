"""Shared KV-cache quantisation primitives and the KIVI baseline cache.

Used by :mod:`neurips26.inference.adkv` and :mod:`neurips26.inference.adakvq` (seed file
``004_01f475bc147a144d.txt``); the baseline layout follows KIVI ("KIVI: A Tuning-Free Asymmetric 2bit
Quantization for KV Cache", Liu et al., ICML 2024): keys are quantised per channel with groups running
along tokens, values per token with groups running along channels, and the most recent tokens stay in
full precision.

Math
----
Asymmetric uniform ``b``-bit quantisation of a group ``g`` (``L = 2**b`` levels)::

    m = min(g)  (stored rounded *down* to the metadata dtype)
    s = max((max(g) - m) / (L - 1), tiny)  (stored rounded *up*)
    q = clamp(round((x - m) / s), 0, L - 1)        # uint codes, bit-packed
    x_hat = m + q * s                              # |x - x_hat| <= s / 2

Rounding the zero down and the step up guarantees that ``[m, m + (L - 1) s]`` covers the group after
the metadata has been stored in fp16, so the half-step error bound holds for the stored step.

Memory (bytes, exact): payload ``rows * ceil(elements_per_row * b / 8)`` (codes are packed per index
of the leading dimension so that beam reordering never unpacks them) plus metadata
``2 * n_groups * itemsize(meta_dtype)``.

Held memory: every cache reports what it actually holds with ``memory_report()``, bytes by category
(:data:`MEMORY_CATEGORIES`: packed ``codes``, ``group_params``, the full-precision ``window``,
``encoder_state``, ``dequantized`` copies kept for speed, ``controller`` state), measured on the live
tensors; each held tensor owns its storage (the window is copied out of the prefill, never a view of
it), so the report equals the bytes of the distinct storages reachable from the cache
(:func:`neurips26.inference.benchmark.cache_tensor_bytes`) at every step.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import Cache
from transformers.cache_utils import BaseQuantizedLayer

from neurips26.common.checks import check_choice, check_int

__all__ = [
    "SUPPORTED_BITS",
    "FULL_PRECISION_BITS",
    "check_bits",
    "pack_bits",
    "unpack_bits",
    "QuantizedTensor",
    "FullPrecisionBlock",
    "quantize_asym",
    "dequantize_asym",
    "quantized_nbytes",
    "KIVILayer",
    "KIVICache",
    "kivi_memory_formula",
    "text_config",
    "MEMORY_CATEGORIES",
    "held_bytes_report",
    "check_kv_states",
]

SUPPORTED_BITS = (1, 2, 3, 4, 8)
FULL_PRECISION_BITS = 16


MEMORY_CATEGORIES = ("codes", "group_params", "window", "encoder_state", "dequantized", "controller")


def held_bytes_report(tensors: Iterable[tuple[str, torch.Tensor | None]]) -> dict[str, int]:
    """Bytes by category of ``(category, tensor)`` pairs, each storage counted once; adds ``total``.

    A tensor counts ``numel * element_size`` (its logical bytes); a second tensor on an already
    counted storage adds nothing. The result equals the storages' real size only when every held
    tensor owns its whole storage, which is what the caches guarantee (no view of a larger buffer).
    """
    out = dict.fromkeys(MEMORY_CATEGORIES, 0)
    seen: set[tuple[int, str]] = set()
    for category, t in tensors:
        if category not in out:
            raise ValueError(f"category must be one of {MEMORY_CATEGORIES}, got {category!r}")
        if t is None or t.numel() == 0:
            continue
        key = (t.untyped_storage().data_ptr(), str(t.device))
        if key in seen:
            continue
        seen.add(key)
        out[category] += t.numel() * t.element_size()
    out["total"] = sum(out[c] for c in MEMORY_CATEGORIES)
    return out


def check_kv_states(key_states: Any, value_states: Any, layer: Any = None) -> None:
    """Validate one ``update`` of a KV-cache layer; raise ``TypeError``/``ValueError`` naming the argument.

    Both must be finite floating-point ``[batch >= 1, kv_heads, new_tokens, head_dim]`` tensors of one
    shape on a real (non-meta) device; once ``layer`` is initialised they must also match its dtype,
    device, batch, heads and head size.
    """
    for name, t in (("key_states", key_states), ("value_states", value_states)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.is_meta:
            raise ValueError(f"{name} is a meta tensor (no data); pass a materialised tensor")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")
        if t.dim() != 4 or t.shape[0] == 0 or t.shape[1] == 0 or t.shape[3] == 0:
            raise ValueError(
                f"{name} must be [batch >= 1, kv_heads, new_tokens, head_dim], got {tuple(t.shape)}"
            )
    if key_states.shape != value_states.shape or key_states.dtype != value_states.dtype:
        raise ValueError(
            f"key_states and value_states must share shape and dtype, got {tuple(key_states.shape)} "
            f"{key_states.dtype} and {tuple(value_states.shape)} {value_states.dtype}"
        )
    if key_states.device != value_states.device:
        raise ValueError(
            f"key_states and value_states must share a device, got {key_states.device}, {value_states.device}"
        )
    for name, t in (("key_states", key_states), ("value_states", value_states)):
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name} contains NaN or inf")
    if layer is not None and getattr(layer, "is_initialized", False):
        ref = layer.keys
        if key_states.dtype != ref.dtype or key_states.device != ref.device:
            raise ValueError(
                f"key_states must have the cache's dtype {ref.dtype} on {ref.device}, got {key_states.dtype} "
                f"on {key_states.device}"
            )
        want = (ref.shape[0], ref.shape[1], ref.shape[3])
        got = (key_states.shape[0], key_states.shape[1], key_states.shape[3])
        if got != want:
            raise ValueError(
                f"key_states must be [{want[0]}, {want[1]}, new_tokens, {want[2]}] like the cache, got {tuple(key_states.shape)}"
            )


def _measured(report: dict[str, int]) -> dict[str, int]:
    """:meth:`memory_bytes` keys of a held-bytes report (``fp_itemsize=None``)."""
    return {
        "payload": report["codes"],
        "metadata": report["group_params"],
        "residual": report["window"],
        "encoder_state": report["encoder_state"],
        "dequantized": report["dequantized"],
        "controller": report["controller"],
        "total": report["total"],
    }


def check_bits(name: str, bits: Any, allow_full: bool = True) -> int:
    """Validate a bit-width: one of :data:`SUPPORTED_BITS` (or 16 = keep full precision)."""
    if isinstance(bits, bool) or not isinstance(bits, int):
        raise TypeError(f"{name} must be an int, got {type(bits).__name__} ({bits!r})")
    allowed = SUPPORTED_BITS + ((FULL_PRECISION_BITS,) if allow_full else ())
    if bits not in allowed:
        raise ValueError(f"{name} must be one of {list(allowed)}, got {bits}")
    return bits


# ----------------------------------------------------------------------------------------- bit packing
def pack_bits(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack unsigned ``bits``-bit codes along the last dimension into bytes (little-endian bit order).

    Parameters
    ----------
    codes : Tensor[..., n] (uint8), values in ``[0, 2**bits)``.
    bits : int, one of ``1, 2, 3, 4, 8``.

    Returns
    -------
    Tensor[..., ceil(n * bits / 8)] (uint8)
    """
    check_bits("bits", bits, allow_full=False)
    if codes.dtype != torch.uint8:
        raise TypeError(f"codes must be uint8, got {codes.dtype}")
    n = codes.shape[-1]
    lead = codes.shape[:-1]
    nbytes = math.ceil(n * bits / 8)
    if bits == 8:
        return codes.clone()
    if 8 % bits == 0:
        per = 8 // bits
        pad = nbytes * per - n
        c = torch.nn.functional.pad(codes, (0, pad)) if pad else codes
        c = c.reshape(*lead, nbytes, per).to(torch.int32)
        shifts = torch.arange(per, dtype=torch.int32, device=codes.device) * bits
        return (c << shifts).sum(-1).to(torch.uint8)
    # general width (3 bits): expand to a bit stream, regroup by 8
    shifts = torch.arange(bits, dtype=torch.uint8, device=codes.device)
    stream = ((codes.unsqueeze(-1) >> shifts) & 1).reshape(*lead, n * bits)
    pad = nbytes * 8 - n * bits
    if pad:
        stream = torch.nn.functional.pad(stream, (0, pad))
    stream = stream.reshape(*lead, nbytes, 8).to(torch.int32)
    weights = torch.arange(8, dtype=torch.int32, device=codes.device)
    return (stream << weights).sum(-1).to(torch.uint8)


def unpack_bits(packed: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """Inverse of :func:`pack_bits`: ``Tensor[..., ceil(n*bits/8)] -> Tensor[..., n]`` (uint8)."""
    check_bits("bits", bits, allow_full=False)
    check_int("n", n, low=0)
    if packed.shape[-1] != math.ceil(n * bits / 8):
        raise ValueError(f"packed has {packed.shape[-1]} bytes, expected ceil({n} * {bits} / 8)")
    lead = packed.shape[:-1]
    if bits == 8:
        return packed.clone()
    mask = (1 << bits) - 1
    if 8 % bits == 0:
        per = 8 // bits
        shifts = torch.arange(per, dtype=torch.uint8, device=packed.device) * bits
        out = (packed.unsqueeze(-1) >> shifts) & mask
        return out.reshape(*lead, -1)[..., :n]
    shifts = torch.arange(8, dtype=torch.uint8, device=packed.device)
    stream = ((packed.unsqueeze(-1) >> shifts) & 1).reshape(*lead, -1)[..., : n * bits]
    stream = stream.reshape(*lead, n, bits)
    weights = torch.arange(bits, dtype=torch.uint8, device=packed.device)
    return (stream << weights).sum(-1, dtype=torch.uint8)


# ------------------------------------------------------------------------------- group quantisation
def _round_down(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    y = x.to(dtype)
    if dtype == x.dtype:
        return y
    low = y.to(x.dtype) > x
    if low.any():
        y = torch.where(low, torch.nextafter(y, torch.full_like(y, -math.inf)), y)
    return y


def _round_up(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    y = x.to(dtype)
    if dtype == x.dtype:
        return y
    high = y.to(x.dtype) < x
    if high.any():
        y = torch.where(high, torch.nextafter(y, torch.full_like(y, math.inf)), y)
    return y


@dataclass
class QuantizedTensor:
    """A tensor stored as bit-packed asymmetric group-wise codes plus per-group (scale, zero).

    Attributes
    ----------
    codes : Tensor[rows, ceil(row_elems * bits / 8)] uint8
        Packed codes, in the layout of the tensor with ``axis`` moved last; one row per index of the
        leading dimension of that layout (the batch dimension for KV tensors).
    scale, zero : Tensor[*lead, n_groups] in ``meta_dtype``
        Step and minimum of each group of ``group_size`` consecutive elements along ``axis``.
    shape : tuple of int
        Shape of the original tensor.
    axis, group_size, bits : int
    dtype : torch.dtype
        Dtype returned by :meth:`dequantize`.
    """

    codes: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor
    shape: tuple[int, ...]
    axis: int
    group_size: int
    bits: int
    dtype: torch.dtype

    @property
    def payload_nbytes(self) -> int:
        """Measured bytes of the packed codes."""
        return self.codes.numel() * self.codes.element_size()

    @property
    def metadata_nbytes(self) -> int:
        """Measured bytes of scales and zeros."""
        return self.scale.numel() * self.scale.element_size() + self.zero.numel() * self.zero.element_size()

    @property
    def nbytes(self) -> int:
        return self.payload_nbytes + self.metadata_nbytes

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def dequantize(self) -> torch.Tensor:
        """Reconstruct ``x_hat = zero + q * scale``; ``Tensor[shape]`` in :attr:`dtype`."""
        return dequantize_asym(self)

    # batch-dimension operations (dimension 0 of the original tensor; exact, codes stay packed)
    def _check_batch_ops(self) -> None:
        if self.axis == 0 or len(self.shape) < 2:
            raise ValueError("batch operations need axis != 0 and a tensor with at least 2 dimensions")

    def index_select(self, index: torch.Tensor) -> QuantizedTensor:
        """Select batch rows (dimension 0) without unpacking."""
        self._check_batch_ops()
        index = index.to(self.codes.device)
        return QuantizedTensor(
            self.codes.index_select(0, index),
            self.scale.index_select(0, index),
            self.zero.index_select(0, index),
            (int(index.numel()), *self.shape[1:]),
            self.axis,
            self.group_size,
            self.bits,
            self.dtype,
        )

    def repeat_interleave(self, repeats: int) -> QuantizedTensor:
        """Repeat batch rows (dimension 0) without unpacking."""
        self._check_batch_ops()
        return QuantizedTensor(
            self.codes.repeat_interleave(repeats, dim=0),
            self.scale.repeat_interleave(repeats, dim=0),
            self.zero.repeat_interleave(repeats, dim=0),
            (self.shape[0] * repeats, *self.shape[1:]),
            self.axis,
            self.group_size,
            self.bits,
            self.dtype,
        )


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _moved_shape(shape: Sequence[int], axis: int) -> tuple[int, ...]:
    rest = [s for i, s in enumerate(shape) if i != axis]
    return (*rest, shape[axis])


def quantize_asym(
    x: torch.Tensor,
    bits: int,
    group_size: int,
    axis: int = -1,
    meta_dtype: torch.dtype = torch.float16,
) -> QuantizedTensor:
    """Asymmetric uniform group-wise quantisation along ``axis`` with real bit packing.

    Parameters
    ----------
    x : Tensor[...], floating point, at least 1-D, finite.
    bits : int, one of :data:`SUPPORTED_BITS`.
    group_size : int >= 1
        Consecutive elements along ``axis`` sharing one (scale, zero). A last partial group is allowed.
    axis : int
        Dimension along which groups run (e.g. ``-2`` = tokens for per-channel keys, ``-1`` = channels
        for per-token values of a ``[batch, heads, seq, head_dim]`` tensor).
    meta_dtype : torch.dtype
        Storage dtype of scale and zero (fp16 by default, as in KIVI).

    Returns
    -------
    QuantizedTensor
    """
    check_bits("bits", bits, allow_full=False)
    check_int("group_size", group_size, low=1)
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError("x must be a floating-point tensor")
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension")
    if not -x.dim() <= axis < x.dim():
        raise ValueError(f"axis must lie in [{-x.dim()}, {x.dim() - 1}] for a {x.dim()}-D tensor, got {axis}")
    if not torch.isfinite(x).all():
        raise ValueError("x contains non-finite values")
    axis = axis % x.dim()
    comp = _compute_dtype(x.dtype)
    levels = (1 << bits) - 1
    xm = torch.movedim(x.to(comp), axis, -1)
    n = xm.shape[-1]
    n_groups = math.ceil(n / group_size)
    pad = n_groups * group_size - n
    if pad:
        xm_p = torch.cat([xm, xm[..., -1:].expand(*xm.shape[:-1], pad)], dim=-1)
    else:
        xm_p = xm
    g = xm_p.reshape(*xm.shape[:-1], n_groups, group_size)
    zero = _round_down(g.amin(-1), meta_dtype)
    zf = zero.to(comp)
    step = ((g.amax(-1) - zf) / levels).clamp_min(1e-8)
    scale = _round_up(step, meta_dtype)
    scale = torch.where(scale.to(comp) > 0, scale, torch.full_like(scale, torch.finfo(meta_dtype).tiny))
    sf = scale.to(comp)
    q = torch.clamp(torch.round((g - zf.unsqueeze(-1)) / sf.unsqueeze(-1)), 0, levels).to(torch.uint8)
    q = q.reshape(*xm.shape[:-1], n_groups * group_size)[..., :n]
    rows = xm.shape[0] if xm.dim() >= 2 else 1
    codes = pack_bits(q.reshape(rows, -1).contiguous(), bits)
    return QuantizedTensor(codes, scale, zero, tuple(x.shape), axis, group_size, bits, x.dtype)


def dequantize_asym(qt: QuantizedTensor) -> torch.Tensor:
    """Reconstruct a :class:`QuantizedTensor`; returns ``Tensor[qt.shape]`` in ``qt.dtype``."""
    comp = _compute_dtype(qt.dtype)
    moved = _moved_shape(qt.shape, qt.axis)
    rows = qt.codes.shape[0]
    n = moved[-1]
    q = unpack_bits(qt.codes, qt.bits, math.prod(moved) // rows).reshape(moved)
    n_groups = qt.scale.shape[-1]
    pad = n_groups * qt.group_size - n
    if pad:
        q = torch.nn.functional.pad(q, (0, pad))
    g = q.reshape(*moved[:-1], n_groups, qt.group_size).to(comp)
    xh = qt.zero.to(comp).unsqueeze(-1) + g * qt.scale.to(comp).unsqueeze(-1)
    xh = xh.reshape(*moved[:-1], n_groups * qt.group_size)[..., :n]
    return torch.movedim(xh, -1, qt.axis).to(qt.dtype)


def quantized_nbytes(
    shape: Sequence[int], bits: int, group_size: int, axis: int = -1, meta_itemsize: int = 2
) -> dict[str, int]:
    """Closed-form bytes of :func:`quantize_asym` on a tensor of ``shape``.

    Returns
    -------
    dict with ``payload`` (packed codes), ``metadata`` (scale + zero) and ``total``.
    """
    shape = tuple(int(s) for s in shape)
    axis = axis % len(shape)
    moved = _moved_shape(shape, axis)
    rows = moved[0] if len(moved) >= 2 else 1
    numel = math.prod(shape)
    payload = rows * math.ceil((numel // rows) * bits / 8) if rows else 0
    n_groups = (numel // shape[axis]) * math.ceil(shape[axis] / group_size) if shape[axis] else 0
    metadata = 2 * n_groups * meta_itemsize
    return {"payload": payload, "metadata": metadata, "total": payload + metadata}


@dataclass
class FullPrecisionBlock:
    """A block kept unquantised (16-bit request); same interface as :class:`QuantizedTensor`."""

    data: torch.Tensor
    bits: int = FULL_PRECISION_BITS

    @property
    def payload_nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()

    metadata_nbytes = 0

    @property
    def nbytes(self) -> int:
        return self.payload_nbytes

    @property
    def numel(self) -> int:
        return self.data.numel()

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    def dequantize(self) -> torch.Tensor:
        return self.data

    def index_select(self, index: torch.Tensor) -> FullPrecisionBlock:
        return FullPrecisionBlock(self.data.index_select(0, index.to(self.data.device)))

    def repeat_interleave(self, repeats: int) -> FullPrecisionBlock:
        return FullPrecisionBlock(self.data.repeat_interleave(repeats, dim=0))


# ------------------------------------------------------------------------------------- KIVI cache
class KIVILayer(BaseQuantizedLayer):
    """One decoder layer's KIVI-layout quantised KV cache (block-appendable, full-precision residual).

    Keys are quantised per channel over blocks of ``group_size`` tokens (one (scale, zero) per channel
    per block); values per token over groups of ``value_group_size`` channels. New tokens enter a
    full-precision residual window; when it holds ``residual_length + group_size`` tokens the oldest
    ``group_size`` tokens are quantised as one block, which is never re-quantised. ``nbits == 16``
    disables quantisation (the layer then behaves exactly like ``DynamicLayer``).

    The states returned by :meth:`update` for the current forward pass include the incoming tokens in
    full precision (as in KIVI and ``transformers.QuantizedLayer``); later passes see their quantised
    reconstruction.

    Parameters
    ----------
    nbits : int
        1, 2, 3, 4, 8 or 16.
    group_size : int
        Tokens per key block (``G``).
    residual_length : int
        Full-precision window ``R`` (>= 0).
    value_group_size : int or None
        Channels per value group; ``None`` -> ``min(head_dim, 32)``. Must divide ``head_dim``.
    keep_dequantized : bool
        Keep a dequantised copy of the blocks to avoid unpacking at every step (faster; the memory
        reports still measure the packed storage only).
    meta_dtype : torch.dtype
        Dtype of scales and zeros.

    Shapes
    ------
    ``key_states``/``value_states``: ``[batch, kv_heads, new_tokens, head_dim]``; returned states
    ``[batch, kv_heads, seq_len, head_dim]``.
    """

    def __init__(
        self,
        nbits: int = 2,
        group_size: int = 32,
        residual_length: int = 32,
        value_group_size: int | None = None,
        keep_dequantized: bool = False,
        meta_dtype: torch.dtype = torch.float16,
    ):
        super().__init__()
        self.nbits = check_bits("nbits", nbits)
        self.group_size = check_int("group_size", group_size, low=1)
        self.residual_length = check_int("residual_length", residual_length, low=0)
        if value_group_size is not None:
            check_int("value_group_size", value_group_size, low=1)
        self.value_group_size = value_group_size
        self.keep_dequantized = bool(keep_dequantized)
        self.meta_dtype = meta_dtype
        self.key_blocks: list[Any] = []
        self.value_blocks: list[Any] = []
        self.block_bits: list[int] = []
        self._deq_keys: torch.Tensor | None = None
        self._deq_values: torch.Tensor | None = None

    # -- transformers API -----------------------------------------------------------------------
    @property
    def is_croppable(self) -> bool:  # type: ignore[override]
        """Cropping restores the returned states exactly only when nothing is quantised."""
        return not self.key_blocks

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        if key_states.dim() != 4 or value_states.dim() != 4:
            raise ValueError("key_states and value_states must be [batch, kv_heads, seq, head_dim]")
        head_dim = value_states.shape[-1]
        if self.value_group_size is None:
            self.value_group_size = min(head_dim, 32)
        if head_dim % self.value_group_size:
            raise ValueError(f"value_group_size ({self.value_group_size}) must divide head_dim ({head_dim})")
        self.device = key_states.device
        self.dtype = key_states.dtype
        self.keys = key_states[..., :0, :].clone()
        self.values = value_states[..., :0, :].clone()
        self.is_initialized = True

    def _quantize(self, tensor: torch.Tensor, axis: int = -1, bits: int | None = None, group_size: int = 32):
        bits = self.nbits if bits is None else bits
        if bits == FULL_PRECISION_BITS:  # a copy: the block must not keep the (larger) source alive
            return FullPrecisionBlock(tensor.clone(memory_format=torch.contiguous_format))
        return quantize_asym(tensor, bits, group_size, axis=axis, meta_dtype=self.meta_dtype)

    def _dequantize(self, q_tensor) -> torch.Tensor:
        return q_tensor.dequantize()

    def _next_block_bits(self) -> int:
        """Bit-width of the block about to be flushed (hook for mixed-precision subclasses)."""
        return self.nbits

    def _next_block_kv_bits(self) -> tuple[int, int]:
        """``(key bits, value bits)`` of the block about to be flushed; both :meth:`_next_block_bits`
        unless a subclass allocates keys and values separately."""
        bits = self._next_block_bits()
        return bits, bits

    def _flush_block(self, k: torch.Tensor, v: torch.Tensor) -> None:
        kbits, vbits = self._next_block_kv_bits()
        kq = self._quantize(k, axis=-2, bits=kbits, group_size=self.group_size)
        vq = self._quantize(v, axis=-1, bits=vbits, group_size=self.value_group_size)
        self.key_blocks.append(kq)
        self.value_blocks.append(vq)
        self.block_bits.append(vbits)
        if self.keep_dequantized:
            kd, vd = kq.dequantize(), vq.dequantize()
            self._deq_keys = kd if self._deq_keys is None else torch.cat([self._deq_keys, kd], dim=-2)
            self._deq_values = vd if self._deq_values is None else torch.cat([self._deq_values, vd], dim=-2)

    def dequantized_states(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Concatenation of all stored blocks, ``[batch, kv_heads, quantized_len, head_dim]`` each."""
        if not self.key_blocks:
            return self.keys[..., :0, :], self.values[..., :0, :]
        if self.keep_dequantized and self._deq_keys is not None:
            return self._deq_keys, self._deq_values
        k = torch.cat([b.dequantize() for b in self.key_blocks], dim=-2)
        v = torch.cat([b.dequantize() for b in self.value_blocks], dim=-2)
        return k, v

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Append new states, return ``(keys, values)`` covering the whole sequence (see class doc)."""
        check_kv_states(key_states, value_states, self)
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.cumulative_length += key_states.shape[-2]
        res_k = torch.cat([self.keys, key_states], dim=-2)
        res_v = torch.cat([self.values, value_states], dim=-2)
        if self.key_blocks:
            dk, dv = self.dequantized_states()
            out_k, out_v = torch.cat([dk, res_k], dim=-2), torch.cat([dv, res_v], dim=-2)
        else:
            out_k, out_v = res_k, res_v
        if self.nbits != FULL_PRECISION_BITS:
            start = 0
            while res_k.shape[-2] - start >= self.residual_length + self.group_size:
                stop = start + self.group_size
                self._flush_block(res_k[..., start:stop, :], res_v[..., start:stop, :])
                start = stop
            if start:  # copy the window out: a view would keep the whole concatenation (the prefill) alive
                res_k, res_v = res_k[..., start:, :].clone(), res_v[..., start:, :].clone()
        self.keys, self.values = res_k, res_v
        return out_k, out_v

    def get_seq_length(self) -> int:
        return self.cumulative_length

    def reset(self) -> None:
        super().reset()
        self.key_blocks, self.value_blocks, self.block_bits = [], [], []
        self._deq_keys = self._deq_values = None

    def _map_blocks(self, fn) -> None:
        self.key_blocks = [fn(b) for b in self.key_blocks]
        self.value_blocks = [fn(b) for b in self.value_blocks]
        if self._deq_keys is not None:
            self._deq_keys, self._deq_values = (
                fn(FullPrecisionBlock(self._deq_keys)).data,
                fn(FullPrecisionBlock(self._deq_values)).data,
            )

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Reorder the batch (beam search); exact, the packed codes are permuted without unpacking."""
        if not self.is_initialized:
            return
        self.keys = self.keys.index_select(0, beam_idx.to(self.keys.device))
        self.values = self.values.index_select(0, beam_idx.to(self.values.device))
        self._map_blocks(lambda b: b.index_select(beam_idx))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if not self.is_initialized:
            return
        if indices.dtype == torch.bool:
            indices = indices.nonzero().flatten()
        indices = torch.as_tensor(indices, device=self.keys.device)
        self.reorder_cache(indices)

    def batch_repeat_interleave(self, repeats: int) -> None:
        if not self.is_initialized:
            return
        self.keys = self.keys.repeat_interleave(repeats, dim=0)
        self.values = self.values.repeat_interleave(repeats, dim=0)
        self._map_blocks(lambda b: b.repeat_interleave(repeats))

    def crop(self, tokens_to_remove: int) -> None:
        """Remove the last ``-tokens_to_remove`` tokens (``DynamicLayer.crop`` convention).

        Tokens removed from the residual window disappear exactly. When the cut falls inside a quantised
        block, the kept part of that block moves back to the residual window as its dequantised values,
        so the states returned afterwards equal the prefix of those returned before.
        """
        if tokens_to_remove > 0:
            raise ValueError(
                f"Calling `crop` with a positive value (`{tokens_to_remove}`) is not supported; pass a negative "
                "number of tokens to remove"
            )
        remove = -tokens_to_remove
        if remove == 0 or not self.is_initialized:
            return
        remove = min(remove, self.cumulative_length)
        self.cumulative_length -= remove
        r = self.keys.shape[-2]
        if remove <= r:
            self.keys, self.values = (
                self.keys[..., : r - remove, :].clone(),
                self.values[..., : r - remove, :].clone(),
            )
            return
        remove -= r
        self.keys, self.values = self.keys[..., :0, :], self.values[..., :0, :]
        while remove > 0 and self.key_blocks:
            kb, vb = self.key_blocks.pop(), self.value_blocks.pop()
            self.block_bits.pop()
            n = kb.shape[-2]
            if remove < n:
                keep = n - remove
                self.keys = kb.dequantize()[..., :keep, :].clone()
                self.values = vb.dequantize()[..., :keep, :].clone()
                remove = 0
            else:
                remove -= n
        if self.keep_dequantized and self._deq_keys is not None:
            q_len = sum(b.shape[-2] for b in self.key_blocks)
            self._deq_keys = self._deq_keys[..., :q_len, :].clone() if q_len else None
            self._deq_values = self._deq_values[..., :q_len, :].clone() if q_len else None

    # -- accounting -----------------------------------------------------------------------------
    def held_tensors(self) -> list[tuple[str, torch.Tensor]]:
        """Every tensor this layer holds, with its :data:`MEMORY_CATEGORIES` category."""
        out: list[tuple[str, torch.Tensor]] = []
        if self.is_initialized:
            out += [("window", self.keys), ("window", self.values)]
        for b in (*self.key_blocks, *self.value_blocks):
            if isinstance(b, FullPrecisionBlock):
                out.append(("codes", b.data))
            else:
                out += [("codes", b.codes), ("group_params", b.scale), ("group_params", b.zero)]
        for t in (self._deq_keys, self._deq_values):
            if t is not None:
                out.append(("dequantized", t))
        return out

    def memory_report(self) -> dict[str, int]:
        """Held bytes of this layer by category (:func:`held_bytes_report`), measured on its tensors."""
        return held_bytes_report(self.held_tensors())

    def memory_bytes(self, fp_itemsize: int | None = None) -> dict[str, int]:
        """Stored bytes of this layer: measured (``fp_itemsize=None``) or the storage model.

        Parameters
        ----------
        fp_itemsize : int or None
            ``None``: what the layer holds, measured on its tensors in their real dtypes (``total``
            equals ``memory_report()["total"]``; the extra keys ``encoder_state``, ``dequantized``,
            ``controller`` give the non-stored categories). An int: the deployable storage model with
            that many bytes per full-precision element for the residual (and 16-bit blocks): codes,
            scales/zeros and window only (the quantity the claim checks compare).

        Returns
        -------
        dict with ``payload``, ``metadata``, ``residual``, ``total`` (bytes), ``elements`` (number of
        K and V scalars represented) and ``quantized_elements``.
        """
        payload = metadata = q_elems = 0
        for b in (*self.key_blocks, *self.value_blocks):
            if isinstance(b, FullPrecisionBlock):
                item = b.data.element_size() if fp_itemsize is None else fp_itemsize
                payload += b.numel * item
            else:
                payload += b.payload_nbytes
                metadata += b.metadata_nbytes
                q_elems += b.numel
        residual = 0
        if self.is_initialized:
            item = self.keys.element_size() if fp_itemsize is None else fp_itemsize
            residual = (self.keys.numel() + self.values.numel()) * item
        elements = q_elems + sum(b.numel for b in (*self.key_blocks, *self.value_blocks) if b.bits == 16)
        elements += (self.keys.numel() + self.values.numel()) if self.is_initialized else 0
        counts = {"elements": elements, "quantized_elements": q_elems}
        if fp_itemsize is None:
            return {**_measured(self.memory_report()), **counts}
        return {
            "payload": payload,
            "metadata": metadata,
            "residual": residual,
            "total": payload + metadata + residual,
            **counts,
        }


def kivi_memory_formula(
    batch: int,
    kv_heads: int,
    seq_len: int,
    head_dim: int,
    nbits: int,
    group_size: int,
    residual_length: int,
    value_group_size: int | None = None,
    fp_itemsize: int = 2,
    meta_itemsize: int = 2,
) -> dict[str, int]:
    """Closed-form storage of one :class:`KIVILayer` after ``seq_len`` tokens (any update chunking).

    The number of quantised blocks is ``n_b = max(0, (seq_len - residual_length) // group_size)``
    (0 when ``nbits == 16``); each block costs ``quantized_nbytes`` of a ``[batch, kv_heads,
    group_size, head_dim]`` tensor for keys (groups along tokens) and values (groups of
    ``value_group_size`` channels). The rest is residual at ``fp_itemsize`` bytes per element.
    """
    vg = min(head_dim, 32) if value_group_size is None else value_group_size
    n_blocks = 0 if nbits == FULL_PRECISION_BITS else max(0, (seq_len - residual_length) // group_size)
    shape = (batch, kv_heads, group_size, head_dim)
    kb = (
        quantized_nbytes(shape, nbits, group_size, axis=-2, meta_itemsize=meta_itemsize) if n_blocks else None
    )
    vb = quantized_nbytes(shape, nbits, vg, axis=-1, meta_itemsize=meta_itemsize) if n_blocks else None
    payload = n_blocks * (kb["payload"] + vb["payload"]) if n_blocks else 0
    metadata = n_blocks * (kb["metadata"] + vb["metadata"]) if n_blocks else 0
    res_tokens = seq_len - n_blocks * group_size
    residual = 2 * batch * kv_heads * res_tokens * head_dim * fp_itemsize
    return {
        "payload": payload,
        "metadata": metadata,
        "residual": residual,
        "total": payload + metadata + residual,
    }


def text_config(config: Any) -> Any:
    """The decoder text config of a (possibly multimodal) ``PretrainedConfig``; full attention only."""
    if hasattr(config, "get_text_config"):
        config = config.get_text_config(decoder=True)
    for name in ("num_hidden_layers",):
        if not hasattr(config, name):
            raise TypeError(f"config must be a transformers PretrainedConfig with {name}")
    layer_types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    bad = set(layer_types) - {"full_attention"}
    if bad:
        raise ValueError(f"only full-attention models are supported; found layer types {sorted(bad)}")
    return config


class QuantizedKVCacheMixin:
    """Aggregated accounting over the layers of a quantised cache container."""

    layers: list

    def held_tensors(self) -> list[tuple[str, torch.Tensor]]:
        """Every tensor the cache holds (all layers, plus cache-level state), with its category."""
        return [pair for layer in self.layers for pair in layer.held_tensors()]

    def memory_report(self) -> dict[str, int]:
        """Held bytes by category (:data:`MEMORY_CATEGORIES`) and ``total``, measured on the live tensors.

        ``codes``: packed codes (and full-precision blocks / outlier channels); ``group_params``:
        per-group scales and zeros and other stored quantiser metadata; ``window``: the
        full-precision residual; ``encoder_state``: working state of a recurrent encoder (ADKV's
        float64 accumulators, unpacked indices, parameter copies); ``dequantized``: reconstructions
        kept for speed; ``controller``: bit-allocation state (AdaKVQ's profile and tracker). The
        total equals the bytes of the distinct storages reachable from the cache at every step.
        """
        return held_bytes_report(self.held_tensors())

    def memory_bytes(self, fp_itemsize: int | None = None) -> dict[str, int]:
        """Sum of the layers' :meth:`~KIVILayer.memory_bytes`.

        ``fp_itemsize=None`` measures what the cache holds (``total == memory_report()["total"]``);
        an int gives the deployable storage model (codes, stored metadata, window) at that many bytes
        per full-precision element.
        """
        total: dict[str, int] = {}
        for layer in self.layers:
            for k, v in layer.memory_bytes(fp_itemsize).items():
                total[k] = total.get(k, 0) + v
        if fp_itemsize is None:
            total.update(_measured(self.memory_report()))
        return total

    def bits_per_element(self, fp_itemsize: int = 2) -> float:
        """Total stored bits (payload + metadata + residual) per K/V scalar."""
        m = self.memory_bytes(fp_itemsize)
        return 8.0 * m["total"] / max(m["elements"], 1)

    def average_bits(self) -> float:
        """Element-weighted mean code bit-width of the quantised blocks (metadata excluded)."""
        num = den = 0
        for layer in self.layers:
            for kb, vb, b in zip(layer.key_blocks, layer.value_blocks, layer.block_bits):
                n = kb.numel + vb.numel
                num += b * n
                den += n
        return num / den if den else float("nan")


class KIVICache(QuantizedKVCacheMixin, Cache):
    """KIVI baseline: a ``transformers.Cache`` of :class:`KIVILayer`, one per decoder layer.

    Usable as ``model.generate(input_ids, cache=KIVICache(model.config, nbits=2))`` (``past_key_values=`` is
    deprecated in transformers 5.24 and removed for ``generate`` in 6.0).

    Parameters
    ----------
    config : PretrainedConfig
        The model config (``num_hidden_layers``; full-attention layers only).
    nbits, group_size, residual_length, value_group_size, keep_dequantized, meta_dtype
        See :class:`KIVILayer`.
    """

    def __init__(
        self,
        config: Any,
        nbits: int = 2,
        group_size: int = 32,
        residual_length: int = 32,
        value_group_size: int | None = None,
        keep_dequantized: bool = False,
        meta_dtype: torch.dtype = torch.float16,
    ):
        config = text_config(config)
        check_choice("meta_dtype", meta_dtype, (torch.float16, torch.bfloat16, torch.float32))
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        if value_group_size is not None:
            check_int("value_group_size", value_group_size, low=1)
            if head_dim % value_group_size:
                raise ValueError(f"value_group_size ({value_group_size}) must divide head_dim ({head_dim})")
        layers = [
            KIVILayer(nbits, group_size, residual_length, value_group_size, keep_dequantized, meta_dtype)
            for _ in range(config.num_hidden_layers)
        ]
        super().__init__(layers=layers)

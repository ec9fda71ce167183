"""Asymmetric group-wise quantised tensors, their exact byte count, and full-precision blocks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from neurips26.common.checks import check_int
from neurips26.inference.quant.packing import FULL_PRECISION_BITS, check_bits, pack_bits, unpack_bits


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

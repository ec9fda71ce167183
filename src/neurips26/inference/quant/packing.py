"""Bit-width checks and packing of ``b``-bit codes into bytes."""

from __future__ import annotations

import math
from typing import Any

import torch

from neurips26.common.checks import check_int

SUPPORTED_BITS = (1, 2, 3, 4, 8)


FULL_PRECISION_BITS = 16


def check_bits(name: str, bits: Any, allow_full: bool = True) -> int:
    """Validate a bit-width: one of :data:`SUPPORTED_BITS` (or 16 = keep full precision)."""
    if isinstance(bits, bool) or not isinstance(bits, int):
        raise TypeError(f"{name} must be an int, got {type(bits).__name__} ({bits!r})")
    allowed = SUPPORTED_BITS + ((FULL_PRECISION_BITS,) if allow_full else ())
    if bits not in allowed:
        raise ValueError(f"{name} must be one of {list(allowed)}, got {bits}")
    return bits


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

r"""Static outlier channels of ADKV: selection by mean square and bit-packed channel indices.

.. math::
    \mathcal{O} = \operatorname{top-}n_c\ \tfrac1T \sum_t x_{t,c}^2,\qquad
    \mathrm{bits} = n \lceil \log_2 d \rceil

Shapes
------
- :func:`select_outlier_channels`: ``x [..., T, d]`` pooled over ``pool_dims`` -> indices ``[..., n]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from neurips26.common.checks import check_int


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

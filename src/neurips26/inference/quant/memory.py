"""Held-memory reports by category and KIVI's exact memory formula."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from neurips26.inference.quant.packing import FULL_PRECISION_BITS
from neurips26.inference.quant.tensors import quantized_nbytes

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

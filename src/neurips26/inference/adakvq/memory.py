"""Exact memory (bytes) of an AdaKVQ cache."""

from __future__ import annotations

from collections.abc import Sequence

from neurips26.inference.quant import FULL_PRECISION_BITS, check_bits, quantized_nbytes


def adakvq_memory_formula(
    batch: int,
    kv_heads: int,
    seq_len: int,
    head_dim: int,
    block_bits: Sequence[tuple[int, int]],
    group_size: int,
    residual_length: int,
    value_group_size: int | None = None,
    fp_itemsize: int = 2,
    meta_itemsize: int = 2,
) -> dict[str, int]:
    """Closed-form storage of one :class:`AdaKVQLayer` after ``seq_len`` tokens.

    Parameters
    ----------
    batch, kv_heads, seq_len, head_dim : int
        Cached states are ``[batch, kv_heads, seq_len, head_dim]`` for keys and for values.
    block_bits : sequence of (key_bits, value_bits)
        Bit-widths of the flushed blocks, oldest first (``AdaKVQCache.kv_bits_log()`` of the layer). A
        quantising layer holds ``max(0, (seq_len - residual_length) // group_size)`` of them.
    group_size, residual_length, value_group_size : int
        ``G``, ``R`` and ``G_v`` (``None`` -> ``min(head_dim, 32)``).
    fp_itemsize, meta_itemsize : int
        Bytes per full-precision element (residual, 16-bit blocks) and per scale/zero.

    Returns
    -------
    dict with ``payload``, ``metadata``, ``residual`` and ``total`` (bytes)::

        block (kb, vb): payload = ceil(kv_heads G head_dim kb / 8) + ceil(kv_heads G head_dim vb / 8)
                        (per batch row), metadata = 2 meta_itemsize batch kv_heads (head_dim
                        + G head_dim / G_v); a 16-bit half costs fp_itemsize per element, no metadata
        residual = 2 batch kv_heads (seq_len - G n_blocks) head_dim fp_itemsize
    """
    vg = min(head_dim, 32) if value_group_size is None else value_group_size
    n_blocks = len(block_bits)
    if n_blocks * group_size > seq_len:
        raise ValueError(f"{n_blocks} blocks of {group_size} tokens do not fit in seq_len={seq_len}")
    shape = (batch, kv_heads, group_size, head_dim)
    numel = batch * kv_heads * group_size * head_dim
    payload = metadata = 0
    for kbits, vbits in block_bits:
        for b, gs, axis in ((kbits, group_size, -2), (vbits, vg, -1)):
            if check_bits("block_bits", int(b)) == FULL_PRECISION_BITS:
                payload += numel * fp_itemsize
            else:
                nb = quantized_nbytes(shape, b, gs, axis=axis, meta_itemsize=meta_itemsize)
                payload += nb["payload"]
                metadata += nb["metadata"]
    residual = 2 * batch * kv_heads * (seq_len - n_blocks * group_size) * head_dim * fp_itemsize
    return {
        "payload": payload,
        "metadata": metadata,
        "residual": residual,
        "total": payload + metadata + residual,
    }

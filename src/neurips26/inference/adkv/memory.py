r"""ADKV metadata and memory accounting: bits per head and stream, and the closed-form memory model.

.. math::
    \mathrm{meta}_{ADKV} = (2 + 3)\cdot 16\, d' + n \lceil \log_2 d \rceil\ (+\ 3 \cdot 64\, d' \lfloor (T_q - 1)/C \rfloor),
    \qquad \mathrm{meta}_{static} = 2 \cdot 16\, d \lceil T / G \rceil

Shapes
------
Scalars only (bits and bytes as Python ints/floats).
"""

from __future__ import annotations

import math

from neurips26.common.checks import check_choice, check_int
from neurips26.inference.adkv.outliers import index_bits


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
    sink_tokens: int = 0,
) -> int:
    """Metadata bits of a whole cache after ``T`` tokens (16-bit metadata), as the caches store it.

    ``method="adkv"`` with ``d' = d - n_out`` coded channels and ``T_q = T - R`` encoded tokens, per KV
    head and ADKV stream (keys, and values in ``value_mode="adkv"``): ``2 * 16 * d'`` per batch row
    (``z_1``, ``a_1``) + ``3 * 16 * d'`` parameters + ``n_out * ceil(log2 d)`` outlier-index bits,
    independent of ``T`` (the ``sink_tokens`` exact fp16 tokens are payload, not metadata, and are not
    ADKV-coded: ``T_q = T - R - n_sink``); with decoder checkpoints every ``C`` tokens add ``(T_q - 1) // C`` states of
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
        check_int("sink_tokens", sink_tokens, low=0)
        t_q = max(T - residual_length, 0)
        t_q -= min(sink_tokens, t_q)
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
    sink_tokens: int = 0,
) -> dict[str, int]:
    """Closed-form bytes of one :class:`ADKVLayer` (``value_mode="adkv"``) after ``T`` tokens.

    ``payload = 2 B T_q (ceil(H d' b / 8) + 2 H n_out) + 4 B H n_sink d`` (codes, fp16 outlier channels and
    the fp16 sink tokens, ``T_q = T - R - n_sink`` coded tokens);
    ``metadata = 2 H d' (4 B + 6 + 24 B K) + ceil(2 H n_out ceil(log2 d) / 8)`` with ``K = (T_q - 1)
    // C`` checkpoints; ``residual = 2 B H (T - T_q) d * fp_itemsize``.
    """
    t_q = max(T - residual_length, 0)
    n_sink = min(sink_tokens, t_q)
    t_q -= n_sink
    dq = head_dim - n_outliers
    payload = 2 * batch * t_q * (math.ceil(kv_heads * dq * bits / 8) + 2 * kv_heads * n_outliers)
    payload += 4 * batch * kv_heads * n_sink * head_dim
    metadata = 0
    if t_q:
        k = _num_checkpoints(t_q, checkpoint_every)
        metadata = 2 * kv_heads * dq * (4 * batch + 6 + 24 * batch * k)
        metadata += math.ceil(2 * kv_heads * n_outliers * index_bits(head_dim) / 8)
    residual = 2 * batch * kv_heads * (T - t_q - n_sink) * head_dim * fp_itemsize
    return {
        "payload": payload,
        "metadata": metadata,
        "residual": residual,
        "total": payload + metadata + residual,
    }

r"""The static group-wise KV-cache baseline of the ADKV claim (KIVI layout, per-group zero-point and scale).

Part of ADKV (see :mod:`neurips26.inference.adkv`): static group-wise quantisation stores one fp16
zero-point and scale per group of ``G`` elements, so its metadata grows with the context:

.. math::
    \hat x = z_g + s_g\, q, \qquad s_g = \frac{\max_g x - \min_g x}{2^b - 1}, \qquad
    \text{metadata bits per element} = \frac{2 \cdot 16}{G}

Shapes
------
``update(key_states, value_states, layer_idx)``: ``[batch, kv_heads, new, head_dim]`` in; the layer's full
``[batch, kv_heads, T, head_dim]`` keys and values out.
"""

from __future__ import annotations

from typing import Any

from neurips26.inference.quant import KIVICache, text_config


class GroupwiseStaticCache(KIVICache):
    """Static group-wise baseline in the KIVI layout (keys per channel over ``group_size``-token blocks,
    values per token over ``value_group_size`` channels) with ``residual_length=0`` by default.

    Shapes
    ------
    ``update(key_states, value_states, layer_idx)``: ``[batch, kv_heads, new, head_dim]`` in; the layer's
    full ``[batch, kv_heads, T, head_dim]`` keys and values out.
    """

    def __init__(
        self,
        config: Any,
        bits: int = 2,
        group_size: int = 128,
        residual_length: int = 0,
        value_group_size: int | None = 32,
        keep_dequantized: bool = False,
    ):
        config = text_config(config)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        if value_group_size is not None:
            value_group_size = min(value_group_size, head_dim)
        super().__init__(config, bits, group_size, residual_length, value_group_size, keep_dequantized)

"""The KIVI baseline cache and the mixin shared by the quantised caches."""

from __future__ import annotations

from typing import Any

import torch
from transformers import Cache

from neurips26.common.checks import check_choice, check_int
from neurips26.inference.quant.layer import KIVILayer, resolve_decode_mode
from neurips26.inference.quant.memory import _measured, held_bytes_report


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

    def bind_attention_config(self, config: Any) -> None:
        """Let every layer follow ``config._attn_implementation``: when it names an attention registered by
        :func:`~neurips26.inference.quant.attention.register_codes_attention`, layers that support it
        decode on their codes (``codes_attention="auto"``)."""
        for layer in self.layers:
            layer._attn_config = config

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
    nbits, group_size, residual_length, value_group_size, keep_dequantized, meta_dtype, decode_mode
        See :class:`KIVILayer` (``decode_mode``: ``"stream"`` default, ``"mirror"``, ``"reference"``; all return the same bits).
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
        decode_mode: str | None = None,
    ):
        config = text_config(config)
        resolve_decode_mode(decode_mode, keep_dequantized)
        check_choice("meta_dtype", meta_dtype, (torch.float16, torch.bfloat16, torch.float32))
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        if value_group_size is not None:
            check_int("value_group_size", value_group_size, low=1)
            if head_dim % value_group_size:
                raise ValueError(f"value_group_size ({value_group_size}) must divide head_dim ({head_dim})")
        layers = [
            KIVILayer(
                nbits,
                group_size,
                residual_length,
                value_group_size,
                keep_dequantized,
                meta_dtype,
                decode_mode,
            )
            for _ in range(config.num_hidden_layers)
        ]
        super().__init__(layers=layers)
        self.bind_attention_config(config)

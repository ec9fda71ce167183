"""The AdaKVQ cache: KIVI layers whose flushed blocks take the controller's bit-widths."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import Cache

from neurips26.common.checks import check_choice
from neurips26.inference.adakvq.aad import AADProfile, AADTracker
from neurips26.inference.adakvq.allocate import BitController, allocate_kv_bits
from neurips26.inference.adakvq.config import AdaKVQConfig, _rung_cost
from neurips26.inference.adakvq.memory import adakvq_memory_formula
from neurips26.inference.quant import KIVILayer, QuantizedKVCacheMixin, check_bits, text_config
from neurips26.inference.quant.layer import resolve_decode_mode


class AdaKVQLayer(KIVILayer):
    """KIVI-layout layer whose block bit-widths (keys and values separately) come from a shared
    :class:`BitController`.

    Shapes as in :class:`~neurips26.inference.quant.KIVILayer`. ``block_bits`` holds the value bits of
    each block; :attr:`key_block_bits` the key bits.
    """

    def __init__(
        self,
        layer_idx: int,
        controller: BitController,
        config: AdaKVQConfig,
        keep_dequantized: bool = False,
        decode_mode: str | None = None,
    ):
        base = controller.base_bits[layer_idx]
        super().__init__(
            base,
            config.group_size,
            config.residual_length,
            config.value_group_size,
            keep_dequantized,
            decode_mode=decode_mode,
        )
        self.layer_idx = layer_idx
        self.controller = controller

    @property
    def key_block_bits(self) -> list[int]:
        return [kb.bits for kb in self.key_blocks]

    def _next_block_bits(self) -> int:
        return self._next_block_kv_bits()[1]

    def _next_block_kv_bits(self) -> tuple[int, int]:
        n = 2 * self.keys.shape[0] * self.keys.shape[1] * self.group_size * self.keys.shape[-1]
        return self.controller.choose_kv(self.layer_idx, n, len(self.block_bits))

    def crop(self, tokens_to_remove: int) -> None:
        before = list(zip(self.key_blocks, self.value_blocks))
        super().crop(tokens_to_remove)
        for kb, vb in before[len(self.key_blocks) :]:
            n = kb.numel + vb.numel
            self.controller.release(self.layer_idx, (kb.bits * kb.numel + vb.bits * vb.numel) / n, n)


class AdaKVQCache(QuantizedKVCacheMixin, Cache):
    """AdaKVQ cache: a ``transformers.Cache`` of :class:`AdaKVQLayer`, one per decoder layer.

    Usable as ``model.generate(input_ids, cache=cache)``; for online modulation, select the
    registered AAD attention (:func:`register_aad_attention`) and run inside ``tracker.active()``.

    Parameters
    ----------
    config : PretrainedConfig
    quant : AdaKVQConfig
    profile : AADProfile, optional
        Calibration profile; without it every layer gets the highest rung whose cost is ``<= avg_bits``.
    tracker : AADTracker, optional
        Online nAAD source; without it the static allocation is used (one warning).
    base_bits : list of int, optional
        Override of the static allocation (value bit-widths; keys follow the ladder).
    keep_dequantized : bool
        See :class:`~neurips26.inference.quant.KIVILayer`.
    decode_mode : {"stream", "mirror", "reference"} or None
        See :class:`~neurips26.inference.quant.KIVILayer`: blocks of mixed bit-widths live in one
        contiguous buffer per bit-width and are dequantised in one pass per bit-width; every mode returns
        the same bits.
    """

    def __init__(
        self,
        config: Any,
        quant: AdaKVQConfig | None = None,
        profile: AADProfile | None = None,
        tracker: AADTracker | None = None,
        base_bits: Sequence[int] | None = None,
        keep_dequantized: bool = False,
        decode_mode: str | None = None,
    ):
        config = text_config(config)
        resolve_decode_mode(decode_mode, keep_dequantized)
        quant = AdaKVQConfig() if quant is None else quant
        if not isinstance(quant, AdaKVQConfig):
            raise TypeError(f"quant must be an AdaKVQConfig, got {type(quant).__name__}")
        n_layers = config.num_hidden_layers
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        if quant.value_group_size is not None and head_dim % quant.value_group_size:
            raise ValueError(f"value_group_size ({quant.value_group_size}) must divide head_dim ({head_dim})")
        if profile is not None and len(profile.mean) != n_layers:
            raise ValueError(f"profile has {len(profile.mean)} layers, the model {n_layers}")
        ladder = quant.ladder
        if base_bits is None:
            if profile is not None:
                _, base_bits = allocate_kv_bits(
                    profile, quant.bits, quant.avg_bits, quant.kappa, quant.key_bonus
                )
            else:
                rung = max(r for r, kv in enumerate(ladder) if _rung_cost(kv) <= quant.avg_bits)
                base_bits = [ladder[rung][1]] * n_layers
        base_bits = [check_bits("base_bits", int(b)) for b in base_bits]
        if len(base_bits) != n_layers or any(b not in quant.bits for b in base_bits):
            raise ValueError(f"base_bits must hold {n_layers} values from {quant.bits}")
        self.quant = quant
        self.controller = BitController(quant, base_bits, profile, tracker)
        layers = [
            AdaKVQLayer(i, self.controller, quant, keep_dequantized, decode_mode) for i in range(n_layers)
        ]
        super().__init__(layers=layers)
        self.bind_attention_config(config)

    def held_tensors(self) -> list[tuple[str, torch.Tensor]]:
        """The layers' tensors plus the controller's (profile and tracker series, category
        ``controller``), see :meth:`~neurips26.inference.quant.QuantizedKVCacheMixin.memory_report`."""
        out = super().held_tensors()
        profile, tracker = self.controller.profile, self.controller.tracker
        if profile is not None:
            out += [("controller", t) for t in (profile.mean, profile.std, *profile.series)]
        if tracker is not None:
            out += [("controller", t) for series in tracker.series.values() for t in series]
        return out

    @property
    def base_bits(self) -> list[int]:
        """Static value bit-width per layer."""
        return list(self.controller.base_bits)

    @property
    def base_key_bits(self) -> list[int]:
        """Static key bit-width per layer (= :attr:`base_bits` when ``key_bonus = 0``)."""
        return list(self.controller.base_key_bits)

    def bits_log(self) -> list[tuple[int, int, int]]:
        """``(layer, block_index, value_bits)`` for every block flushed so far (value = key bits when
        ``key_bonus = 0``)."""
        return list(self.controller.log)

    def kv_bits_log(self) -> list[tuple[int, int, int, int]]:
        """``(layer, block_index, key_bits, value_bits)`` for every block flushed so far."""
        return list(self.controller.kv_log)

    def average_bits(self, which: str = "kv") -> float:
        """Element-weighted mean code bits of the stored blocks (metadata excluded).

        ``which``: ``"kv"`` (keys and values together), ``"keys"`` or ``"values"``.
        """
        check_choice("which", which, ("kv", "keys", "values"))
        num = den = 0
        for layer in self.layers:
            for kb, vb in zip(layer.key_blocks, layer.value_blocks):
                for blk, kind in ((kb, "keys"), (vb, "values")):
                    if which in ("kv", kind):
                        num += blk.bits * blk.numel
                        den += blk.numel
        return num / den if den else float("nan")

    def memory_formula(self, fp_itemsize: int = 2, meta_itemsize: int = 2) -> dict[str, int]:
        """:func:`adakvq_memory_formula` summed over layers, from the current shapes and the chosen bits."""
        total = {"payload": 0, "metadata": 0, "residual": 0, "total": 0}
        for layer in self.layers:
            if not layer.is_initialized:
                continue
            b, h, _, d = layer.keys.shape
            f = adakvq_memory_formula(
                b,
                h,
                layer.get_seq_length(),
                d,
                list(zip(layer.key_block_bits, layer.block_bits)),
                layer.group_size,
                layer.residual_length,
                layer.value_group_size,
                fp_itemsize,
                meta_itemsize,
            )
            for k in total:
                total[k] += f[k]
        return total

r"""Shared KV-cache quantisation primitives and the KIVI baseline cache.

Paper
-----
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

In one line (:math:`L = 2^b`):

.. math::
    q = \mathrm{clamp}\big(\mathrm{round}((x - m) / s),\ 0,\ L - 1\big),\qquad \hat x = m + q\,s,\qquad
    |x - \hat x| \le s / 2

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
(:func:`neurips26.inference.benchmark.cache_tensor_bytes`) at every step. Codes, group parameters and
mirrors live in growable buffers (x1.5), so the report counts their whole capacity (up to 1.5x the used
codes); the storage model ``memory_bytes(fp_itemsize)`` counts the used blocks only.

Decode paths (``decode_mode``): ``"stream"`` (default) dequantises every stored block in one vectorised
pass per bit-width straight into the attention input; ``"mirror"`` (= ``keep_dequantized``) keeps the
flushed blocks' reconstruction (appended once per flush, reported as ``dequantized``); ``"reference"`` is
the eager per-block path. All three return identical bits.

Attention on the codes (issue 37): with the attention registered by
:func:`~neurips26.inference.quant.attention.register_codes_attention` selected on the model
(``model.set_attn_implementation(name)``), a ``"stream"`` layer no longer dequantises: ``update`` returns
the full-precision window and hands the stored blocks to the attention, which computes
``q . K_t = (q * s) . c_t + q . z`` and ``sum_t p_t V_t = sum_t (p_t s_t) c_t + sum_t p_t z_t`` from the
unpacked codes (a C++ CPU operator, :mod:`.kernels`), within a stated float32 bound of
dequantise-then-SDPA (:func:`~neurips26.inference.quant.attention.equality_bound`).

Shapes
------
- :meth:`KIVICache.update` / :meth:`KIVILayer.update`: ``key_states``, ``value_states``
  ``[B, H_kv, T_new, d]`` in; the full ``[B, H_kv, T, d]`` keys and values out.
- :func:`quantize_asym`: ``x [...]`` with groups of ``group_size`` along ``axis`` -> a
  :class:`QuantizedTensor` with ``codes [rows, ceil(row_elems * b / 8)]`` (uint8, ``axis`` moved last,
  one row per index of the leading dimension) and ``scale``, ``zero`` ``[*lead, n_groups]``;
  :func:`dequantize_asym` restores ``x``'s shape.
- :func:`pack_bits` / :func:`unpack_bits`: ``[..., n]`` codes <-> ``[..., ceil(n * b / 8)]`` uint8.

Modules
-------
- :mod:`.packing`: :func:`check_bits`, :func:`pack_bits`, :func:`unpack_bits`.
- :mod:`.tensors`: :class:`QuantizedTensor`, :func:`quantize_asym`, :func:`dequantize_asym`,
  :func:`quantized_nbytes`, :class:`FullPrecisionBlock`.
- :mod:`.memory`: :data:`MEMORY_CATEGORIES`, :func:`held_bytes_report`, :func:`kivi_memory_formula`.
- :mod:`.store`: :class:`~.store.BlockStore` (flushed blocks in contiguous growable buffers, one per
  bit-width, dequantised in one vectorised pass), :class:`~.store.GrowableSequence` (mirrors, ADKV codes).
- :mod:`.layer`: :func:`check_kv_states`, :class:`ResidualWindowLayer` (the residual-window protocol), :class:`KIVILayer`.
- :mod:`.cache`: :func:`text_config`, :class:`QuantizedKVCacheMixin`, :class:`KIVICache`.
- :mod:`.kernels`: ``key_scores``/``value_accum`` on the codes (C++ operator, torch fallback).
- :mod:`.attention`: :func:`~.attention.register_codes_attention`, :func:`~.attention.attend_codes`, the
  :class:`~.attention.StoredAttention` hook, :func:`~.attention.equality_bound`.
"""

from neurips26.inference.quant.cache import KIVICache, QuantizedKVCacheMixin, text_config
from neurips26.inference.quant.layer import KIVILayer, ResidualWindowLayer, check_kv_states
from neurips26.inference.quant.memory import MEMORY_CATEGORIES, held_bytes_report, kivi_memory_formula

# Private, kept importable for neurips26.inference.adkv.cache (imports it from here); the helper
# itself lives in .memory.
from neurips26.inference.quant.packing import (
    FULL_PRECISION_BITS,
    SUPPORTED_BITS,
    check_bits,
    pack_bits,
    unpack_bits,
)
from neurips26.inference.quant.tensors import (
    FullPrecisionBlock,
    QuantizedTensor,
    dequantize_asym,
    quantize_asym,
    quantized_nbytes,
)

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
    "ResidualWindowLayer",
    "KIVICache",
    "kivi_memory_formula",
    "text_config",
    "MEMORY_CATEGORIES",
    "held_bytes_report",
    "check_kv_states",
    "QuantizedKVCacheMixin",
]

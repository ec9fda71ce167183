"""The KIVI-layout quantised layer: block-appendable codes plus a full-precision residual window."""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import BaseQuantizedLayer

from neurips26.common.checks import check_int, check_tensor
from neurips26.inference.quant import attention as _codes
from neurips26.inference.quant.memory import _measured, held_bytes_report
from neurips26.inference.quant.packing import FULL_PRECISION_BITS, check_bits
from neurips26.inference.quant.store import BlockStore, GrowableSequence
from neurips26.inference.quant.tensors import FullPrecisionBlock, quantize_asym

DECODE_MODES = ("stream", "mirror", "reference")


def check_kv_states(key_states: Any, value_states: Any, layer: Any = None) -> None:
    """Validate one ``update`` of a KV-cache layer; raise ``TypeError``/``ValueError`` naming the argument.

    Both must be finite floating-point ``[batch >= 1, kv_heads, new_tokens, head_dim]`` tensors of one
    shape on a real (non-meta) device; once ``layer`` is initialised they must also match its dtype,
    device, batch, heads and head size.
    """
    for name, t in (("key_states", key_states), ("value_states", value_states)):
        check_tensor(name, t, finite=False)
        if t.dim() != 4 or t.shape[0] == 0 or t.shape[1] == 0 or t.shape[3] == 0:
            raise ValueError(
                f"{name} must be [batch >= 1, kv_heads, new_tokens, head_dim], got {tuple(t.shape)}"
            )
    if key_states.shape != value_states.shape or key_states.dtype != value_states.dtype:
        raise ValueError(
            f"key_states and value_states must share shape and dtype, got {tuple(key_states.shape)} "
            f"{key_states.dtype} and {tuple(value_states.shape)} {value_states.dtype}"
        )
    if key_states.device != value_states.device:
        raise ValueError(
            f"key_states and value_states must share a device, got {key_states.device}, {value_states.device}"
        )
    for name, t in (("key_states", key_states), ("value_states", value_states)):
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name} contains NaN or inf")
    if layer is not None and getattr(layer, "is_initialized", False):
        ref = layer.keys
        if key_states.dtype != ref.dtype or key_states.device != ref.device:
            raise ValueError(
                f"key_states must have the cache's dtype {ref.dtype} on {ref.device}, got {key_states.dtype} "
                f"on {key_states.device}"
            )
        want = (ref.shape[0], ref.shape[1], ref.shape[3])
        got = (key_states.shape[0], key_states.shape[1], key_states.shape[3])
        if got != want:
            raise ValueError(
                f"key_states must be [{want[0]}, {want[1]}, new_tokens, {want[2]}] like the cache, got {tuple(key_states.shape)}"
            )


class ResidualWindowLayer(BaseQuantizedLayer):
    """The residual-window protocol shared by the quantised layers (KIVI, AdaKVQ, ADKV).

    Incoming tokens join a full-precision window (``self.keys``/``self.values``,
    ``[batch, kv_heads, window, head_dim]``) and are returned exactly for the current pass; tokens that
    leave the front of the window go to the subclass's quantised store. ``update`` returns the whole
    sequence: the store's reconstruction followed by the window. Subclasses say how a flush works:

    - :meth:`_quantizing`: whether anything is ever moved out of the window (False at full precision);
    - :meth:`_has_encoded`: whether the store holds any token yet;
    - :meth:`_flush`: move a prefix of the given window into the store, return its length (0 for none);
    - :meth:`_check_update`: argument checks of one ``update`` (default :func:`check_kv_states`).

    ``get_seq_length`` counts every token seen; ``batch_select_indices`` reuses the subclass's
    ``reorder_cache``.

    Attention on the codes (:mod:`neurips26.inference.quant.attention`): a subclass whose
    :meth:`_stored_attention` returns a :class:`~neurips26.inference.quant.attention.StoredAttention`
    hands it to the registered codes attention instead of dequantising its store, and ``update`` then
    returns only the window. ``codes_attention``: ``"auto"`` (when the bound config's
    ``_attn_implementation`` is a registered codes attention), ``"always"`` or ``"never"``;
    ``codes_max_query``: the most incoming tokens for which it is used (a longer prefill takes SDPA).
    """

    codes_attention: str = "auto"
    codes_max_query: int = 16
    _attn_config: Any = None

    def _stored_attention(self) -> Any:
        """The stored part for the codes attention (``None``: not supported, dequantise instead)."""
        return None

    def _codes_handle(self, res_k: torch.Tensor, res_v: torch.Tensor, new_tokens: int, kwargs: dict) -> Any:
        """Put a :class:`~neurips26.inference.quant.attention.CodesHandle` into the model's attention kwargs
        (``kwargs["kwargs"]``, passed by ``cache.update(..., kwargs=kwargs)``) when the codes attention will
        read it (see :mod:`neurips26.inference.quant.attention`); return it, or ``None``."""
        attn_kwargs = kwargs.get("kwargs")
        if not isinstance(attn_kwargs, dict):
            return None
        attn_kwargs.pop(_codes.HANDLE_KEY, None)
        mode = self.codes_attention
        if mode == "never" or new_tokens > self.codes_max_query or not self._has_encoded():
            return None
        if mode != "always":
            name = getattr(self._attn_config, "_attn_implementation", None)
            if name not in _codes.CODES_ATTENTION_NAMES:
                return None
        stored = self._stored_attention()
        if stored is None:
            return None
        handle = _codes.CodesHandle(stored, res_k, res_v)
        attn_kwargs[_codes.HANDLE_KEY] = handle
        return handle

    def _quantizing(self) -> bool:
        raise NotImplementedError

    def _has_encoded(self) -> bool:
        raise NotImplementedError

    def _flush(self, res_k: torch.Tensor, res_v: torch.Tensor) -> int:
        raise NotImplementedError

    def _check_update(self, key_states: Any, value_states: Any) -> None:
        check_kv_states(key_states, value_states, self)

    def _output(self, res_k: torch.Tensor, res_v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole sequence for attention: the store's reconstruction followed by the window ``res``."""
        if not self._has_encoded():
            return res_k, res_v
        dk, dv = self.dequantized_states()
        return torch.cat([dk, res_k], dim=-2), torch.cat([dv, res_v], dim=-2)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Append ``[batch, kv_heads, new, head_dim]`` states; return the whole sequence's ``(keys, values)``.

        The incoming tokens are returned in full precision for the current pass (as in KIVI); tokens that
        leave the residual window are quantised and returned as reconstructions afterwards.
        """
        self._check_update(key_states, value_states)
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.cumulative_length += key_states.shape[-2]
        res_k = torch.cat([self.keys, key_states], dim=-2)
        res_v = torch.cat([self.values, value_states], dim=-2)
        if self._codes_handle(res_k, res_v, key_states.shape[-2], kwargs) is not None:
            out_k, out_v = res_k, res_v  # the stored part travels in the handle
        else:
            out_k, out_v = self._output(res_k, res_v)
        if self._quantizing():
            start = self._flush(res_k, res_v)
            if start:  # copy the window out: a view would keep the whole concatenation (the prefill) alive
                res_k, res_v = res_k[..., start:, :].clone(), res_v[..., start:, :].clone()
        self.keys, self.values = res_k, res_v
        return out_k, out_v

    def get_seq_length(self) -> int:
        return self.cumulative_length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if not self.is_initialized:
            return
        if indices.dtype == torch.bool:
            indices = indices.nonzero().flatten()
        self.reorder_cache(torch.as_tensor(indices, device=self.keys.device))


def resolve_decode_mode(decode_mode: Any, keep_dequantized: bool) -> str:
    """The decode mode of a KIVI-layout layer: ``decode_mode`` or, when ``None``, ``"mirror"`` if
    ``keep_dequantized`` else ``"stream"``; raise ``ValueError`` on an unknown or contradictory choice."""
    if decode_mode is None:
        return "mirror" if keep_dequantized else "stream"
    if decode_mode not in DECODE_MODES:
        raise ValueError(f"decode_mode must be one of {list(DECODE_MODES)}, got {decode_mode!r}")
    if keep_dequantized and decode_mode != "mirror":
        raise ValueError(f"keep_dequantized=True means decode_mode='mirror', got decode_mode={decode_mode!r}")
    return decode_mode


class KIVILayer(ResidualWindowLayer):
    """One decoder layer's KIVI-layout quantised KV cache (block-appendable, full-precision residual).

    Keys are quantised per channel over blocks of ``group_size`` tokens (one (scale, zero) per channel
    per block); values per token over groups of ``value_group_size`` channels. New tokens enter a
    full-precision residual window; when it holds ``residual_length + group_size`` tokens the oldest
    ``group_size`` tokens are quantised as one block, which is never re-quantised. ``nbits == 16``
    disables quantisation (the layer then behaves exactly like ``DynamicLayer``).

    The states returned by :meth:`update` for the current forward pass include the incoming tokens in
    full precision (as in KIVI and ``transformers.QuantizedLayer``); later passes see their quantised
    reconstruction.

    Parameters
    ----------
    nbits : int
        1, 2, 3, 4, 8 or 16.
    group_size : int
        Tokens per key block (``G``).
    residual_length : int
        Full-precision window ``R`` (>= 0).
    value_group_size : int or None
        Channels per value group; ``None`` -> ``min(head_dim, 32)``. Must divide ``head_dim``.
    keep_dequantized : bool
        Keep a dequantised copy of the blocks to avoid unpacking at every step (faster; the memory
        reports still measure the packed storage only). Same as ``decode_mode="mirror"``.
    meta_dtype : torch.dtype
        Dtype of scales and zeros.
    decode_mode : {"stream", "mirror", "reference"} or None
        How :meth:`update` rebuilds the quantised part at every step; every mode returns the same bits.
        The blocks always live in contiguous growable buffers (:class:`~neurips26.inference.quant.store.BlockStore`).

        - ``"stream"`` (default): one vectorised eager dequantisation pass per bit-width, written straight
          into the returned tensor (no intermediate concatenation); memory-frugal.
        - ``"mirror"`` (= ``keep_dequantized=True``): keep a dequantised copy of the flushed blocks in a
          growable buffer, appended once per flush (the codes never change); fastest, but the copy costs
          ``B H T d`` elements of the model dtype, counted as ``dequantized`` by :meth:`memory_report`
          (not by the storage model of ``memory_bytes(fp_itemsize)``).
        - ``"reference"``: the eager per-block reference (dequantise each block, concatenate).

    Shapes
    ------
    ``key_states``/``value_states``: ``[batch, kv_heads, new_tokens, head_dim]``; returned states
    ``[batch, kv_heads, seq_len, head_dim]``.
    """

    def __init__(
        self,
        nbits: int = 2,
        group_size: int = 32,
        residual_length: int = 32,
        value_group_size: int | None = None,
        keep_dequantized: bool = False,
        meta_dtype: torch.dtype = torch.float16,
        decode_mode: str | None = None,
    ):
        super().__init__()
        decode_mode = resolve_decode_mode(decode_mode, keep_dequantized)
        self.nbits = check_bits("nbits", nbits)
        self.group_size = check_int("group_size", group_size, low=1)
        self.residual_length = check_int("residual_length", residual_length, low=0)
        if value_group_size is not None:
            check_int("value_group_size", value_group_size, low=1)
        self.value_group_size = value_group_size
        self.decode_mode = decode_mode
        self.keep_dequantized = decode_mode == "mirror"
        self.meta_dtype = meta_dtype
        self._clear_store()

    def _clear_store(self) -> None:
        self._kstore, self._vstore = BlockStore("key"), BlockStore("value")
        self.block_bits: list[int] = []
        self._mirror_k, self._mirror_v = GrowableSequence(), GrowableSequence()

    @property
    def key_blocks(self) -> list[Any]:
        """The stored key blocks, oldest first (views of the contiguous buffers)."""
        return self._kstore.blocks

    @property
    def value_blocks(self) -> list[Any]:
        """The stored value blocks, oldest first (views of the contiguous buffers)."""
        return self._vstore.blocks

    @property
    def _deq_keys(self) -> torch.Tensor | None:
        return self._mirror_k.view()

    @property
    def _deq_values(self) -> torch.Tensor | None:
        return self._mirror_v.view()

    # -- transformers API -----------------------------------------------------------------------
    @property
    def is_croppable(self) -> bool:  # type: ignore[override]
        """Cropping restores the returned states exactly only when nothing is quantised."""
        return not self.key_blocks

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        if key_states.dim() != 4 or value_states.dim() != 4:
            raise ValueError("key_states and value_states must be [batch, kv_heads, seq, head_dim]")
        head_dim = value_states.shape[-1]
        if self.value_group_size is None:
            self.value_group_size = min(head_dim, 32)
        if head_dim % self.value_group_size:
            raise ValueError(f"value_group_size ({self.value_group_size}) must divide head_dim ({head_dim})")
        self.device = key_states.device
        self.dtype = key_states.dtype
        self.keys = key_states[..., :0, :].clone()
        self.values = value_states[..., :0, :].clone()
        self.is_initialized = True

    def _quantize(self, tensor: torch.Tensor, axis: int = -1, bits: int | None = None, group_size: int = 32):
        bits = self.nbits if bits is None else bits
        if bits == FULL_PRECISION_BITS:  # a copy: the block must not keep the (larger) source alive
            return FullPrecisionBlock(tensor.clone(memory_format=torch.contiguous_format))
        return quantize_asym(tensor, bits, group_size, axis=axis, meta_dtype=self.meta_dtype)

    def _dequantize(self, q_tensor) -> torch.Tensor:
        return q_tensor.dequantize()

    def _next_block_bits(self) -> int:
        """Bit-width of the block about to be flushed (hook for mixed-precision subclasses)."""
        return self.nbits

    def _next_block_kv_bits(self) -> tuple[int, int]:
        """``(key bits, value bits)`` of the block about to be flushed; both :meth:`_next_block_bits`
        unless a subclass allocates keys and values separately."""
        bits = self._next_block_bits()
        return bits, bits

    def _flush_block(self, k: torch.Tensor, v: torch.Tensor, reserve: int = 1) -> None:
        kbits, vbits = self._next_block_kv_bits()
        kq = self._quantize(k, axis=-2, bits=kbits, group_size=self.group_size)
        vq = self._quantize(v, axis=-1, bits=vbits, group_size=self.value_group_size)
        self._kstore.append(kq, reserve)
        self._vstore.append(vq, reserve)
        self.block_bits.append(vbits)
        if self.keep_dequantized:
            self._mirror_k.append(kq.dequantize())
            self._mirror_v.append(vq.dequantize())

    def _flush_runs(self, res_k: torch.Tensor, res_v: torch.Tensor, n_new: int) -> int:
        """Flush ``n_new`` blocks at once: each run of consecutive blocks of equal bit-widths is quantised in
        one call on the stacked blocks ``[B * m, H, G, D]``. Every group sees the same elementwise
        operations as in :meth:`_flush_block`, so the stored codes and parameters are the same bits (tested);
        the bit-widths are chosen block by block in order, as before."""
        bits = []
        for _ in range(n_new):
            kv = self._next_block_kv_bits()
            bits.append(kv)
            self.block_bits.append(kv[1])
        b, h, _, d = res_k.shape
        g = self.group_size
        i = 0
        while i < n_new:
            j = i
            while j < n_new and bits[j] == bits[i]:
                j += 1
            m = j - i
            kbits, vbits = bits[i]
            for src, store, axis, bw, gs in ((res_k, self._kstore, -2, kbits, g),
                                             (res_v, self._vstore, -1, vbits, self.value_group_size)):  # fmt: skip
                run = (
                    src[..., i * g : j * g, :].reshape(b, h, m, g, d).transpose(1, 2).reshape(b * m, h, g, d)
                )
                store.append_run(self._quantize(run, axis=axis, bits=bw, group_size=gs), b, m, n_new - i)
            i = j
        return n_new * g

    def _quantized_length(self) -> int:
        return len(self._kstore) * self.group_size

    def dequantized_states(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Reconstruction of all stored blocks, ``[batch, kv_heads, quantized_len, head_dim]`` each
        (the reference per-block path; :meth:`update` writes the same bits through ``decode_mode``)."""
        if not self.key_blocks:
            return self.keys[..., :0, :], self.values[..., :0, :]
        if self.keep_dequantized and self._mirror_k.n:
            return self._mirror_k.view(), self._mirror_v.view()
        k = torch.cat([b.dequantize() for b in self.key_blocks], dim=-2)
        v = torch.cat([b.dequantize() for b in self.value_blocks], dim=-2)
        return k, v

    def _output(self, res_k: torch.Tensor, res_v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Preallocate ``[B, H, T_q + window, d]`` and fill it: the quantised part by ``decode_mode``
        (straight into the output, no intermediate concatenation), then the window."""
        if not self._has_encoded() or self.decode_mode == "reference":
            return super()._output(res_k, res_v)
        tq = self._quantized_length()
        b, h, r, d = res_k.shape
        outs = []
        for store, mirror, res in (
            (self._kstore, self._mirror_k, res_k),
            (self._vstore, self._mirror_v, res_v),
        ):
            out = res.new_empty((b, h, tq + r, d))
            if self.decode_mode == "mirror":
                out[..., :tq, :] = mirror.view()
            else:
                part = out[..., :tq, :].view(b, h, len(store), self.group_size, d)
                store.dequantize_into(part)
            out[..., tq:, :] = res
            outs.append(out)
        return outs[0], outs[1]

    def _stored_attention(self) -> Any:
        """The stored blocks for the codes attention (``decode_mode="stream"`` only; the mirror and the
        reference modes keep returning their reconstruction)."""
        if self.decode_mode != "stream":
            return None
        return _codes.KIVIStored(self._kstore, self._vstore, self.group_size)

    def _quantizing(self) -> bool:
        return self.nbits != FULL_PRECISION_BITS

    def _has_encoded(self) -> bool:
        return bool(self.key_blocks)

    def _flush(self, res_k: torch.Tensor, res_v: torch.Tensor) -> int:
        """Flush whole ``group_size`` blocks while the window would still keep ``residual_length`` tokens."""
        start = 0
        n_new = max(0, (res_k.shape[-2] - self.residual_length) // self.group_size)
        if n_new > 1 and not self.keep_dequantized and type(self)._flush_block is KIVILayer._flush_block:
            return self._flush_runs(res_k, res_v, n_new)
        while res_k.shape[-2] - start >= self.residual_length + self.group_size:
            stop = start + self.group_size
            self._flush_block(
                res_k[..., start:stop, :], res_v[..., start:stop, :], n_new - start // self.group_size
            )
            start = stop
        return start

    def reset(self) -> None:
        super().reset()
        self._clear_store()

    def _map_blocks(self, fn) -> None:
        """Apply a batch-dimension tensor operation to every buffer (codes stay packed)."""
        for part in (self._kstore, self._vstore, self._mirror_k, self._mirror_v):
            part.map_batch(fn)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Reorder the batch (beam search); exact, the packed codes are permuted without unpacking."""
        if not self.is_initialized:
            return
        idx = beam_idx.to(self.keys.device)
        self.keys = self.keys.index_select(0, idx)
        self.values = self.values.index_select(0, idx)
        self._map_blocks(lambda t: t.index_select(0, idx))

    def batch_repeat_interleave(self, repeats: int) -> None:
        if not self.is_initialized:
            return
        self.keys = self.keys.repeat_interleave(repeats, dim=0)
        self.values = self.values.repeat_interleave(repeats, dim=0)
        self._map_blocks(lambda t: t.repeat_interleave(repeats, dim=0))

    def crop(self, tokens_to_remove: int) -> None:
        """Remove the last ``-tokens_to_remove`` tokens (``DynamicLayer.crop`` convention).

        Tokens removed from the residual window disappear exactly. When the cut falls inside a quantised
        block, the kept part of that block moves back to the residual window as its dequantised values,
        so the states returned afterwards equal the prefix of those returned before.
        """
        if tokens_to_remove > 0:
            raise ValueError(
                f"Calling `crop` with a positive value (`{tokens_to_remove}`) is not supported; pass a negative "
                "number of tokens to remove"
            )
        remove = -tokens_to_remove
        if remove == 0 or not self.is_initialized:
            return
        remove = min(remove, self.cumulative_length)
        self.cumulative_length -= remove
        r = self.keys.shape[-2]
        if remove <= r:
            self.keys, self.values = (
                self.keys[..., : r - remove, :].clone(),
                self.values[..., : r - remove, :].clone(),
            )
            return
        remove -= r
        self.keys, self.values = self.keys[..., :0, :], self.values[..., :0, :]
        n_blocks = len(self._kstore)
        while remove > 0 and n_blocks:
            n_blocks -= 1
            kb, vb = self.key_blocks[n_blocks], self.value_blocks[n_blocks]
            n = kb.shape[-2]
            if remove < n:
                keep = n - remove
                self.keys = kb.dequantize()[..., :keep, :].clone()
                self.values = vb.dequantize()[..., :keep, :].clone()
                remove = 0
            else:
                remove -= n
        self._kstore.truncate(n_blocks)
        self._vstore.truncate(n_blocks)
        self.block_bits = self.block_bits[:n_blocks]
        for mirror in (self._mirror_k, self._mirror_v):
            mirror.truncate(n_blocks * self.group_size)

    # -- accounting -----------------------------------------------------------------------------
    def held_tensors(self) -> list[tuple[str, torch.Tensor]]:
        """Every tensor this layer holds, with its :data:`MEMORY_CATEGORIES` category."""
        out: list[tuple[str, torch.Tensor]] = []
        if self.is_initialized:
            out += [("window", self.keys), ("window", self.values)]
        out += self._kstore.held_tensors() + self._vstore.held_tensors()
        for mirror in (self._mirror_k, self._mirror_v):
            if mirror.held() is not None:
                out.append(("dequantized", mirror.held()))
        return out

    def memory_report(self) -> dict[str, int]:
        """Held bytes of this layer by category (:func:`held_bytes_report`), measured on its tensors."""
        return held_bytes_report(self.held_tensors())

    def memory_bytes(self, fp_itemsize: int | None = None) -> dict[str, int]:
        """Stored bytes of this layer: measured (``fp_itemsize=None``) or the storage model.

        Parameters
        ----------
        fp_itemsize : int or None
            ``None``: what the layer holds, measured on its tensors in their real dtypes (``total``
            equals ``memory_report()["total"]``; the extra keys ``encoder_state``, ``dequantized``,
            ``controller`` give the non-stored categories). An int: the deployable storage model with
            that many bytes per full-precision element for the residual (and 16-bit blocks): codes,
            scales/zeros and window only (the quantity the claim checks compare).

        Returns
        -------
        dict with ``payload``, ``metadata``, ``residual``, ``total`` (bytes), ``elements`` (number of
        K and V scalars represented) and ``quantized_elements``.
        """
        payload = metadata = q_elems = 0
        for b in (*self.key_blocks, *self.value_blocks):
            if isinstance(b, FullPrecisionBlock):
                item = b.data.element_size() if fp_itemsize is None else fp_itemsize
                payload += b.numel * item
            else:
                payload += b.payload_nbytes
                metadata += b.metadata_nbytes
                q_elems += b.numel
        residual = 0
        if self.is_initialized:
            item = self.keys.element_size() if fp_itemsize is None else fp_itemsize
            residual = (self.keys.numel() + self.values.numel()) * item
        elements = q_elems + sum(b.numel for b in (*self.key_blocks, *self.value_blocks) if b.bits == 16)
        elements += (self.keys.numel() + self.values.numel()) if self.is_initialized else 0
        counts = {"elements": elements, "quantized_elements": q_elems}
        if fp_itemsize is None:
            return {**_measured(self.memory_report()), **counts}
        return {
            "payload": payload,
            "metadata": metadata,
            "residual": residual,
            "total": payload + metadata + residual,
            **counts,
        }

r"""ADKV as a ``transformers`` KV cache: :class:`ADKVLayer` and :class:`ADKVCache`.

:class:`ADKVLayer` keeps a full-precision residual window and ADKV-codes flushed blocks of keys (and
values), with outlier channels stored exactly in fp16. The codes attention over the stored tokens is
:class:`~neurips26.inference.adkv.stored.ADKVStored`; the static group-wise baseline is
:class:`~neurips26.inference.adkv.baseline.GroupwiseStaticCache`.

.. math::
    \hat K = \mathrm{decode}(\mathrm{codes}_K; z_1, a_1, \eta_z, \eta_s, \gamma)
    \ \cup\ K_{\mathcal{O}}\ \cup\ K_{\mathrm{residual}}

Shapes
------
- ``update(key_states, value_states, layer_idx)``: ``[B, H_kv, T_new, d]`` each; returns the full
  ``[B, H_kv, T, d]`` keys and values for attention.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import Cache

from neurips26.inference.adkv.outliers import (
    _check_outlier_indices,
    _complement,
    _pack_indices,
    _unpack_indices,
    index_bits,
    select_outlier_channels,
)
from neurips26.inference.adkv.quantizer import _META, ADKVConfig, ADKVQuantizer, ADKVState, _check_fp16_range
from neurips26.inference.quant import (
    FULL_PRECISION_BITS,
    QuantizedKVCacheMixin,
    QuantizedTensor,
    ResidualWindowLayer,
    check_kv_states,
    held_bytes_report,
    pack_bits,
    quantize_asym,
    text_config,
    unpack_bits,
)
from neurips26.inference.quant.memory import _measured
from neurips26.inference.quant.store import GrowableSequence


class ADKVLayer(ResidualWindowLayer):
    """One decoder layer's ADKV cache (a ``transformers.cache_utils`` quantised layer).

    Keys (and values in ``value_mode="adkv"``) are encoded token by token as they leave the
    full-precision residual window; codes are bit-packed per token (``[batch, T, ceil(H*D*b/8)]``
    bytes). The initial state is taken from the first ``init_tokens`` tokens of the first update. With
    ``bits == 16`` the layer stores full precision and behaves exactly like ``DynamicLayer``.

    With ``n_outliers = n > 0`` each ADKV-coded stream (keys, and values in ``value_mode="adkv"``)
    keeps ``n`` channels per head exactly in fp16 (``key_outlier_values``/``value_outlier_values``,
    ``[batch, kv_heads, T, n]``, payload); the remaining ``head_dim - n`` channels are ADKV-coded. The
    indices (``outliers``: ``Long[S, kv_heads, n]``) are stored once, bit-packed at
    ``ceil(log2(head_dim))`` bits each (``outlier_index_codes``, metadata). With ``checkpoint_every``
    the decoder state is checkpointed every ``C`` tokens (``stream_state.checkpoints``, metadata) and
    the packed decoder replays chunks in parallel.

    Codes, outlier channels and the ``simulated`` reconstruction live in contiguous growable buffers
    (x1.5; appending copies only the new tokens; ``memory_report`` counts the whole capacity). At each
    step a ``packed`` layer (``decode_mode="stream"``) replays each (stream, KV head) with the per-code
    log-gain table and writes the result straight into the returned keys/values; ``simulated`` copies
    its mirror. Both give the bits of ``decode_mode="reference"`` (the per-head replay, merge and
    concatenation); the replay is still O(T) float64 work per step, so only the mirror is fast.

    Parameters
    ----------
    config : ADKVConfig
    key_params, value_params : Tensor[kv_heads, 3, head_dim], optional
        Calibrated per-channel parameters (defaults from ``config``).
    key_outliers, value_outliers : LongTensor[kv_heads, n_outliers], optional
        Calibrated outlier channels (otherwise chosen from the first prefill's initial tokens).

    Shapes
    ------
    :meth:`update`: ``key_states``, ``value_states`` ``[batch, kv_heads, new, head_dim]`` in; the whole
    sequence's keys and values ``[batch, kv_heads, T, head_dim]`` out.
    """

    def __init__(
        self,
        config: ADKVConfig,
        key_params: torch.Tensor | None = None,
        value_params: torch.Tensor | None = None,
        key_outliers: torch.Tensor | None = None,
        value_outliers: torch.Tensor | None = None,
    ):
        super().__init__()
        self.config = config
        self.key_params = key_params
        self.value_params = value_params
        self.key_outliers = key_outliers
        self.value_outliers = value_outliers
        self._clear()

    def _clear(self) -> None:
        # contiguous growable buffers (x1.5): appending copies only the new tokens
        self._bufs = {
            "key_codes": GrowableSequence(1),  # [B, Tq, nbytes]
            "value_codes": GrowableSequence(1),
            "_sim_k": GrowableSequence(),  # [B, H, Tq, D] (storage="simulated")
            "_sim_v": GrowableSequence(),
            "_deq_v_tok": GrowableSequence(),
            "key_outlier_values": GrowableSequence(),  # [B, H, Tq, n] fp16
            "value_outlier_values": GrowableSequence(),
            "key_sink": GrowableSequence(),  # [B, H, n_sink, D] fp16 (the first tokens, exact)
            "value_sink": GrowableSequence(),
        }
        self.value_blocks: list[QuantizedTensor] = []  # per_token value mode
        self.stream_state: ADKVState | None = None  # fields [S, B, H, D']; S = 2 (K, V) or 1 (K)
        self.outliers: torch.Tensor | None = None  # [S, H, n] (long), set when the streams start
        self.outlier_index_codes: torch.Tensor | None = None  # packed indices (stored form)
        self._normal: torch.Tensor | None = None  # [S, H, D - n]
        self.encoded_length = 0  # tokens out of the window: sink + ADKV-coded
        self.sink_length = 0
        self._replay_consts = None  # decoder constants of the codes attention (ADKVStored)

    key_codes = property(
        lambda self: self._bufs["key_codes"].view(), doc="Packed key codes ``[B, Tq, nbytes]``."
    )
    value_codes = property(lambda self: self._bufs["value_codes"].view(), doc="Packed value codes.")
    key_outlier_values = property(
        lambda self: self._bufs["key_outlier_values"].view(),
        doc="fp16 key outlier channels ``[B, H, Tq, n]``.",
    )
    value_outlier_values = property(lambda self: self._bufs["value_outlier_values"].view())
    key_sink = property(
        lambda self: self._bufs["key_sink"].view(), doc="fp16 sink tokens ``[B, H, n_sink, D]``."
    )
    value_sink = property(lambda self: self._bufs["value_sink"].view())
    _sim_k = property(lambda self: self._bufs["_sim_k"].view())
    _sim_v = property(lambda self: self._bufs["_sim_v"].view())
    _deq_v_tok = property(lambda self: self._bufs["_deq_v_tok"].view())

    @property
    def n_streams(self) -> int:
        return 2 if self.config.value_mode == "adkv" else 1

    @property
    def is_croppable(self) -> bool:  # type: ignore[override]
        return self.encoded_length == 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        if key_states.dim() != 4:
            raise ValueError("key_states must be [batch, kv_heads, seq, head_dim]")
        _, h, _, d = key_states.shape
        for name, p in (("key_params", self.key_params), ("value_params", self.value_params)):
            if p is not None and tuple(p.shape) != (h, 3, d):
                raise ValueError(
                    f"{name} must have shape ({h}, 3, {d}) (kv_heads, 3, head_dim), got {tuple(p.shape)}"
                )
        self.config.check_head_dim(d)
        for name, o in (("key_outliers", self.key_outliers), ("value_outliers", self.value_outliers)):
            if o is not None:
                _check_outlier_indices(name, o, h, d, self.config.n_outliers)
        if self.config.value_mode == "per_token" and d % self.config.value_group_size:
            raise ValueError(f"value_group_size ({self.config.value_group_size}) must divide head_dim ({d})")
        if self.key_params is None:
            self.key_params = self.config.default_params(d, (h,))
        if self.value_params is None:
            self.value_params = self.config.default_params(d, (h,))
        self.device, self.dtype = key_states.device, key_states.dtype
        self.num_heads, self.head_dim = h, d
        self.keys = key_states[..., :0, :].clone()
        self.values = value_states[..., :0, :].clone()
        if self.config.bits != FULL_PRECISION_BITS:
            given = [self.key_outliers, self.value_outliers][: self.n_streams]
            if self.config.n_outliers == 0:
                self._build_quantizer(None)
            elif all(o is not None for o in given):
                self._build_quantizer(torch.stack([o.to(torch.long) for o in given]))
        self.is_initialized = True

    def _build_quantizer(self, outliers: torch.Tensor | None) -> None:
        """Quantiser of the ADKV-coded channels; ``outliers: Long[S, H, n]`` or ``None`` (no outliers)."""
        d = self.head_dim
        streams = [self.key_params] + ([self.value_params] if self.config.value_mode == "adkv" else [])
        params = torch.stack(streams).unsqueeze(1).to(self.device)  # [S, 1, H, 3, D]
        if outliers is None:
            self.sq = ADKVQuantizer(d, self.config, params)
            return
        width = index_bits(d)
        self.outlier_index_codes = _pack_indices(outliers.to(self.device), width)
        self.outliers = _unpack_indices(self.outlier_index_codes, width, outliers.shape).to(params.device)
        self._normal = _complement(self.outliers, d).clone()  # own storage (a slice of the argsort)
        s, h, m = self._normal.shape
        params = params.gather(-1, self._normal[:, None, :, None, :].expand(s, 1, h, 3, m))
        self.sq = ADKVQuantizer(m, self.config, params)  # [S, 1, H, 3, D - n]

    def _start_streams(self, x: torch.Tensor) -> None:
        """Choose outlier channels (if needed) from the first tokens of ``x: [S, B, H, T, D]``."""
        if self.config.n_outliers and self.outliers is None:
            n0 = min(self.config.init_tokens, x.shape[-2])
            given = [self.key_outliers, self.value_outliers][: self.n_streams]
            chosen = select_outlier_channels(x[..., :n0, :], self.config.n_outliers, pool_dims=(1,))
            picks = [chosen[i] if o is None else o.to(chosen) for i, o in enumerate(given)]
            self._build_quantizer(torch.stack(picks))

    def _split_channels(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x: [S, B, H, T, D]`` -> (ADKV-coded channels ``[S, B, H, T, D - n]``, outliers or ``None``)."""
        if self._normal is None:
            return x, None
        s, b, h, t, _ = x.shape
        take = lambda idx: x.gather(-1, idx[:, None, :, None, :].expand(s, b, h, t, idx.shape[-1]))  # noqa: E731
        return take(self._normal), take(self.outliers)

    def _merge_channels(self, xh: torch.Tensor, xo: torch.Tensor | None) -> torch.Tensor:
        """Inverse of :meth:`_split_channels` (outliers cast to ``xh.dtype``)."""
        if xo is None:
            return xh
        s, b, h, t, _ = xh.shape
        out = xh.new_empty(s, b, h, t, self.head_dim)
        out.scatter_(-1, self._normal[:, None, :, None, :].expand_as(xh), xh)
        out.scatter_(-1, self.outliers[:, None, :, None, :].expand(s, b, h, t, xo.shape[-1]), xo.to(xh.dtype))
        return out

    def _outlier_stack(self) -> torch.Tensor | None:
        if self.key_outlier_values is None:
            return None
        return torch.stack([self.key_outlier_values, self.value_outlier_values][: self.n_streams])

    def _append_outliers(self, xo: torch.Tensor) -> None:
        xo = xo.to(_META)
        self._bufs["key_outlier_values"].append(xo[0])  # copies: xo[0] and xo[1] view one stacked buffer
        if xo.shape[0] > 1:
            self._bufs["value_outlier_values"].append(xo[1])

    def _quantize(self, tensor, *args, **kwargs):  # the encode path is `_encode`
        raise NotImplementedError("ADKVLayer encodes streams with `_encode`")

    def _dequantize(self, q_tensor):
        raise NotImplementedError("ADKVLayer decodes streams with `dequantized_states`")

    def _pack(self, q: torch.Tensor) -> torch.Tensor:
        b, h, t, d = q.shape
        return pack_bits(q.permute(0, 2, 1, 3).reshape(b, t, h * d).contiguous(), self.config.bits)

    def _unpack(self, codes: torch.Tensor) -> torch.Tensor:
        b, t, _ = codes.shape
        d = self.sq.num_channels  # coded channels (head_dim - n_outliers)
        q = unpack_bits(codes, self.config.bits, self.num_heads * d)
        return q.reshape(b, t, self.num_heads, d).permute(0, 2, 1, 3)

    def _take_sink(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the first tokens (up to ``sink_tokens`` in all) exactly in fp16; return the rest."""
        take = min(self.config.sink_tokens - self.sink_length, k.shape[-2])
        if take <= 0:
            return k, v
        self._bufs["key_sink"].append(k[..., :take, :].to(_META))
        self._bufs["value_sink"].append(v[..., :take, :].to(_META))
        self.sink_length += take
        self.encoded_length += take
        return k[..., take:, :], v[..., take:, :]

    def _encode(self, k: torch.Tensor, v: torch.Tensor) -> None:
        k, v = self._take_sink(k, v)
        if k.shape[-2] == 0:
            return
        joint = self.config.value_mode == "adkv"
        x = torch.stack([k, v]) if joint else k.unsqueeze(0)  # [S, B, H, T, D]
        if self.stream_state is None:
            self._start_streams(x)
        x, xo = self._split_channels(x)
        if self.stream_state is None:
            n0 = min(self.config.init_tokens, k.shape[-2])
            self.stream_state = self.sq.init_state(x[..., :n0, :])
        q, xh, self.stream_state = self.sq.encode_raw(x, self.stream_state)
        self._store(q, xh, xo, v)

    def _store(self, q: torch.Tensor, xh: torch.Tensor, xo: torch.Tensor | None, v: torch.Tensor) -> None:
        """Append codes ``[S, B, H, T, D']``, outliers and (simulated) reconstructions of a new chunk."""
        joint = self.config.value_mode == "adkv"
        if xo is not None:
            self._append_outliers(xo)
            xh = self._merge_channels(xh, xo.to(_META))
        self._bufs["key_codes"].append(self._pack(q[0]))
        xk = xh[0]
        if joint:
            self._bufs["value_codes"].append(self._pack(q[1]))
            xv = xh[1]
        else:
            blk = quantize_asym(v, self.config.bits, self.config.value_group_size, axis=-1)
            self.value_blocks.append(blk)
            xv = blk.dequantize()
            self._bufs["_deq_v_tok"].append(xv)
        if self.config.storage == "simulated":  # the buffers copy: xh[0] and xh[1] view one tensor
            self._bufs["_sim_k"].append(xk.to(self.dtype))
            if joint:
                self._bufs["_sim_v"].append(xv.to(self.dtype))
        self.encoded_length += q.shape[-2]

    def dequantized_states(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Reconstruction of all encoded tokens, ``[batch, kv_heads, encoded_len, head_dim]`` each."""
        if self.encoded_length == 0:
            return self.keys[..., :0, :], self.values[..., :0, :]
        k, v = self._coded_states()
        if self.sink_length:
            sk, sv = self.key_sink.to(self.dtype), self.value_sink.to(self.dtype)
            if k is None:
                return sk, sv
            return torch.cat([sk, k], -2), torch.cat([sv, v], -2)
        return k, v

    def _coded_states(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Reconstruction of the ADKV-coded tokens (after the sink), or ``(None, None)`` if there are none."""
        if self.stream_state is None:
            return None, None
        if self.config.storage == "simulated":
            k = self._sim_k
            v = self._sim_v if self.config.value_mode == "adkv" else self._deq_v_tok
            return k, v
        st = self.stream_state
        if self.config.value_mode == "adkv":
            q = torch.stack([self._unpack(self.key_codes), self._unpack(self.value_codes)])
        else:
            q = self._unpack(self.key_codes).unsqueeze(0)
        xh = self._decode_by_head(q, st)
        xo = self._outlier_stack()
        xh = self._merge_channels(xh, xo).to(self.dtype)
        if self.config.value_mode == "adkv":
            return xh[0], xh[1]
        v = torch.cat([b.dequantize() for b in self.value_blocks], dim=-2)
        return xh[0], v

    def _output(self, res_k: torch.Tensor, res_v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Preallocate ``[B, H, T_enc + window, d]`` and fill it: the mirror (``simulated``) or the
        per-head replay (``packed``, ``decode_mode="stream"``) straight into it, then the window."""
        if not self._has_encoded() or self.config.decode_mode == "reference":
            return super()._output(res_k, res_v)
        tq, ns = self.encoded_length, self.sink_length
        b, h, r, d = res_k.shape
        out_k, out_v = res_k.new_empty((b, h, tq + r, d)), res_v.new_empty((b, h, tq + r, d))
        joint = self.config.value_mode == "adkv"
        if ns:
            out_k[..., :ns, :] = self.key_sink
            out_v[..., :ns, :] = self.value_sink
        if self.stream_state is None:
            pass
        elif self.config.storage == "simulated":
            out_k[..., ns:tq, :] = self._sim_k
            out_v[..., ns:tq, :] = self._sim_v if joint else self._deq_v_tok
        else:
            self._replay_into([out_k, out_v] if joint else [out_k], ns, tq)
            if not joint:  # per-token values: the reconstruction kept with the blocks (same bits)
                out_v[..., ns:tq, :] = self._deq_v_tok
        out_k[..., tq:, :] = res_k
        out_v[..., tq:, :] = res_v
        return out_k, out_v

    def _stored_attention(self) -> Any:
        """The stored part for the codes attention (:mod:`neurips26.inference.adkv.kernel`): the fp16 sink
        and the packed streams, replayed inside the two attention reductions. Only ``storage="packed"``,
        ``decode_mode="stream"``, ``value_mode="adkv"`` and no outlier channels; otherwise ``None`` (the
        layer returns its reconstruction as before)."""
        cfg = self.config
        if (
            cfg.storage != "packed"
            or cfg.decode_mode != "stream"
            or cfg.value_mode != "adkv"
            or self._normal is not None
            or cfg.n_outliers
        ):
            return None
        from neurips26.inference.adkv.stored import ADKVStored

        return ADKVStored(self)

    def _replay_into(self, outs: list[torch.Tensor], ns: int, tq: int) -> None:
        """Replay the packed streams one (stream, KV head) at a time into ``outs[i][..., ns:tq, :]``.

        Same float64 operations as :meth:`_decode_by_head` except that the per-code log-gain is looked up
        (:meth:`ADKVQuantizer.log_gain_table`); each head's reconstruction is cast and written (or
        scattered, with outlier channels) straight into the output, so no ``[S, B, H, T, D]`` float64
        buffer, merge or concatenation is built.
        """
        st = self.stream_state
        params = self.sq.params  # [S, 1, H, 3, D']
        table = self.sq.log_gain_table(params)  # [S, 1, H, L, D']
        codes = [self.key_codes, self.value_codes][: len(outs)]
        xo = self._outlier_stack()
        for i, out in enumerate(outs):
            q = self._unpack(codes[i])
            stream = st.select(i)
            for h in range(q.shape[1]):
                head = stream._fields(lambda v, h=h: v[:, h : h + 1])
                one = params.shape[2] > 1
                p = params[i, :, h : h + 1] if one else params[i]
                tb = table[i, :, h : h + 1] if one else table[i]
                xh = self.sq._replay(q[:, h : h + 1], head, p, head.checkpoints, tb)  # [B, 1, T, D']
                dst = out[:, h : h + 1, ns:tq, :]
                if xo is None:
                    dst.copy_(xh)
                else:
                    b, _, t, m = xh.shape
                    normal = self._normal[i, h][None, None, None, :].expand(b, 1, t, m)
                    dst.scatter_(-1, normal, xh.to(out.dtype))
                    idx = self.outliers[i, h][None, None, None, :].expand(b, 1, t, self.outliers.shape[-1])
                    dst.scatter_(-1, idx, xo[i][:, h : h + 1].to(out.dtype))

    def _decode_by_head(self, q: torch.Tensor, st: ADKVState) -> torch.Tensor:
        """Replay ``q: uint8 [S, B, H, T, D']`` one (stream, KV head) at a time (float64 result).

        The recurrence is independent per channel, so slicing the leading dimensions gives exactly
        the values of one batched replay while bounding the float64 scan temporaries to one head's
        ``[B, T, D']`` instead of the whole layer's (peak decode memory).
        """
        params = self.sq.params  # [S, 1, H, 3, D']
        out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
        for i in range(q.shape[0]):
            stream = st.select(i)
            for h in range(q.shape[2]):
                head = stream._fields(lambda v, h=h: v[:, h : h + 1])
                p = params[i, :, h : h + 1] if params.shape[2] > 1 else params[i]
                out[i, :, h : h + 1] = self.sq._replay(q[i, :, h : h + 1], head, p, head.checkpoints)
        return out

    def _check_update(self, key_states: Any, value_states: Any) -> None:
        check_kv_states(key_states, value_states, self)
        _check_fp16_range(key_states, value_states)

    def _quantizing(self) -> bool:
        return self.config.bits != FULL_PRECISION_BITS

    def _has_encoded(self) -> bool:
        return bool(self.encoded_length)

    def _flush(self, res_k: torch.Tensor, res_v: torch.Tensor) -> int:
        """Encode every token beyond the last ``residual_length`` (the recurrent stream moves on by them)."""
        n_enc = res_k.shape[-2] - self.config.residual_length
        if n_enc <= 0:
            return 0
        self._encode(res_k[..., :n_enc, :], res_v[..., :n_enc, :])
        return n_enc

    def reset(self) -> None:
        super().reset()
        self._clear()

    def _map(self, fn_tensor, fn_state, fn_block) -> None:
        self.keys, self.values = fn_tensor(self.keys), fn_tensor(self.values)
        for buf in self._bufs.values():
            buf.map_batch(fn_tensor)
        if self.stream_state is not None:
            self.stream_state = fn_state(self.stream_state)
        self.value_blocks = [fn_block(b) for b in self.value_blocks]

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Exact batch reordering of codes, states and residual (no re-quantisation)."""
        if not self.is_initialized:
            return
        idx = beam_idx.to(self.keys.device)
        self._map(
            lambda t: t.index_select(0, idx),
            lambda s: s.index_select(idx, dim=1),
            lambda b: b.index_select(idx),
        )

    def batch_repeat_interleave(self, repeats: int) -> None:
        if not self.is_initialized:
            return
        self._map(
            lambda t: t.repeat_interleave(repeats, dim=0),
            lambda s: s.repeat_interleave(repeats, dim=1),
            lambda b: b.repeat_interleave(repeats),
        )

    def crop(self, tokens_to_remove: int) -> None:
        """Remove the last ``-tokens_to_remove`` tokens from the residual window (``DynamicLayer`` rule).

        Encoded tokens cannot be removed without re-encoding (the recurrent state moved past them), so
        cropping into the encoded stream raises ``ValueError``.
        """
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative number of tokens to remove (DynamicLayer convention)")
        remove = -tokens_to_remove
        if remove == 0 or not self.is_initialized:
            return
        if remove > self.keys.shape[-2]:
            raise ValueError(
                f"cannot crop {remove} tokens: only the {self.keys.shape[-2]} residual tokens can be removed "
                "from an ADKV stream (raise residual_length to allow rollbacks)"
            )
        r = self.keys.shape[-2] - remove
        self.keys, self.values = self.keys[..., :r, :].clone(), self.values[..., :r, :].clone()
        self.cumulative_length -= remove

    # -- accounting -----------------------------------------------------------------------------
    def held_tensors(self) -> list[tuple[str, torch.Tensor]]:
        """Every tensor this layer holds, with its :data:`~neurips26.inference.quant.MEMORY_CATEGORIES`
        category: codes and fp16 outlier channels (``codes``); initial states, quantiser parameters,
        packed outlier indices, checkpoints and per-token value metadata (``group_params``); the
        residual (``window``); the float64 accumulators, the calibrated parameters as given and the
        unpacked channel indices (``encoder_state``); simulated / per-token reconstructions
        (``dequantized``)."""
        out: list[tuple[str, torch.Tensor | None]] = []
        if self.is_initialized:
            out += [("window", self.keys), ("window", self.values)]
        for name in (
            "key_codes",
            "value_codes",
            "key_outlier_values",
            "value_outlier_values",
            "key_sink",
            "value_sink",
        ):
            out.append(("codes", self._bufs[name].held()))
        for b in self.value_blocks:
            out += [("codes", b.codes), ("group_params", b.scale), ("group_params", b.zero)]
        st = self.stream_state
        if st is not None:
            out += [("group_params", st.z1), ("group_params", st.a1), ("group_params", st.checkpoints)]
            out += [("encoder_state", st.log_acc), ("encoder_state", st.cmax), ("encoder_state", st.dsum)]
        sq = getattr(self, "sq", None)
        if sq is not None:
            out.append(("group_params", sq.params))
        out.append(("group_params", self.outlier_index_codes))
        for name in ("key_params", "value_params", "key_outliers", "value_outliers", "outliers", "_normal"):
            out.append(("encoder_state", getattr(self, name)))
        for name in ("_sim_k", "_sim_v", "_deq_v_tok"):
            out.append(("dequantized", self._bufs[name].held()))
        if self._replay_consts is not None:  # decoder constants of the codes attention (ADKVStored)
            for c in self._replay_consts[2]:
                out += [("encoder_state", c[k]) for k in ("gain", "level", "z1", "s1", "smin", "eta_z")]
        return [(c, t) for c, t in out if t is not None]

    def memory_report(self) -> dict[str, int]:
        """Held bytes of this layer by category, measured on its tensors."""
        return held_bytes_report(self.held_tensors())

    def memory_bytes(self, fp_itemsize: int | None = None) -> dict[str, int]:
        """Stored bytes: measured (``fp_itemsize=None``, ``total == memory_report()["total"]``) or the
        storage model (an int: ``payload`` = codes + fp16 outlier channels, ``metadata`` = initial
        states, parameters, packed outlier indices, decoder checkpoints, per-token value metadata at
        their stored widths, ``residual`` at ``fp_itemsize`` bytes per element). Also ``total`` and
        ``elements``."""
        payload = metadata = 0
        for sink in (self.key_sink, self.value_sink):
            if sink is not None:
                payload += sink.numel() * sink.element_size()
        if self.key_codes is not None:
            payload += self.key_codes.numel()
            if self.value_codes is not None:
                payload += self.value_codes.numel()
            for o in (self.key_outlier_values, self.value_outlier_values):
                if o is not None:
                    payload += o.numel() * o.element_size()
            st = self.stream_state
            p = self.sq.params.to(_META)
            metadata += (st.z1.numel() + st.a1.numel()) * 2 + p.numel() * p.element_size()
            if self.outlier_index_codes is not None:
                metadata += self.outlier_index_codes.numel()
            if st.checkpoints is not None:
                metadata += st.checkpoints.numel() * st.checkpoints.element_size()
        for b in self.value_blocks:
            payload += b.payload_nbytes
            metadata += b.metadata_nbytes
        residual = elements = 0
        if self.is_initialized:
            item = self.keys.element_size() if fp_itemsize is None else fp_itemsize
            residual = (self.keys.numel() + self.values.numel()) * item
            b = self.keys.shape[0]
            elements = 2 * b * self.num_heads * self.head_dim * self.cumulative_length
        if fp_itemsize is None:
            return {**_measured(self.memory_report()), "elements": elements}
        return {
            "payload": payload,
            "metadata": metadata,
            "residual": residual,
            "total": payload + metadata + residual,
            "elements": elements,
        }


class ADKVCache(QuantizedKVCacheMixin, Cache):
    """ADKV cache: a ``transformers.Cache`` of :class:`ADKVLayer`, one per decoder layer.

    Usable as ``model.generate(input_ids, cache=ADKVCache(model.config, ADKVConfig(bits=2)))``
    and in manual incremental forward passes.

    Parameters
    ----------
    config : PretrainedConfig
    adkv : ADKVConfig
    params : dict, optional
        ``{layer_idx: {"key": Tensor[kv_heads, 3, head_dim], "value": Tensor[...]}}`` from
        :func:`calibrate_adkv`; missing layers use the defaults. With ``adkv.n_outliers > 0`` the
        entries may also hold ``"key_outliers"``/``"value_outliers"``: ``LongTensor[kv_heads,
        n_outliers]`` (otherwise chosen from the first prefill).

    Shapes
    ------
    ``update(key_states, value_states, layer_idx)``: ``[batch, kv_heads, new, head_dim]`` in; the layer's
    full ``[batch, kv_heads, T, head_dim]`` keys and values out.
    """

    def __init__(self, config: Any, adkv: ADKVConfig | None = None, params: dict | None = None):
        config = text_config(config)
        adkv = ADKVConfig() if adkv is None else adkv
        if not isinstance(adkv, ADKVConfig):
            raise TypeError(f"adkv must be an ADKVConfig, got {type(adkv).__name__}")
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        adkv.check_head_dim(head_dim)
        params = params or {}
        layers = []
        for i in range(config.num_hidden_layers):
            p = params.get(i, {})
            for name in ("key", "value"):
                t = p.get(name)
                if t is not None and tuple(t.shape) != (kv_heads, 3, head_dim):
                    raise ValueError(
                        f"params[{i}][{name!r}] must have shape ({kv_heads}, 3, {head_dim}) "
                        f"(kv_heads, 3, head_dim), got {tuple(t.shape)}"
                    )
                o = p.get(f"{name}_outliers")
                if o is not None:
                    _check_outlier_indices(
                        f"params[{i}]['{name}_outliers']", o, kv_heads, head_dim, adkv.n_outliers
                    )
            layers.append(
                ADKVLayer(adkv, p.get("key"), p.get("value"), p.get("key_outliers"), p.get("value_outliers"))
            )
        self.adkv = adkv
        super().__init__(layers=layers)
        self.bind_attention_config(config)

    def bulk_prefill(
        self,
        key_value_states: Sequence[tuple[torch.Tensor, torch.Tensor]],
        max_chunk_elements: int = 1 << 25,
    ) -> None:
        """Store a prefill of every layer at once, encoding the layers' streams in vectorised passes.

        Equivalent to ``cache.update(k, v, layer_idx)`` for each layer on an empty cache (the same
        codes, states and stored tensors), but runs the sequential encoder once per chunk of layers
        instead of once per layer. The streams of different layers never interact, so the chunking
        changes memory, not results.

        Parameters
        ----------
        key_value_states : sequence of ``(Tensor[B, kv_heads, T, head_dim], Tensor[B, kv_heads, T, head_dim])``
            One pair per layer, all of the same shape.
        max_chunk_elements : int
            Upper bound on the encoded elements (keys and values) stacked into one pass; at least one layer
            goes into every pass. The encoder's temporaries are a small multiple of this (about 6x for
            the stacked input, codes and reconstruction), so the default ``2**25`` keeps a pass near 1 GB
            of fp32 where one pass over all of SmolLM2's 30 layers at 4K tokens and batch 8 needed 18 GB.
        """
        if isinstance(max_chunk_elements, bool) or not isinstance(max_chunk_elements, int):
            raise TypeError(f"max_chunk_elements must be an int, got {type(max_chunk_elements).__name__}")
        if max_chunk_elements < 1:
            raise ValueError(f"max_chunk_elements must be >= 1, got {max_chunk_elements}")
        if len(key_value_states) != len(self.layers):
            raise ValueError(
                f"need one (key, value) pair per layer ({len(self.layers)}), got {len(key_value_states)}"
            )
        if any(layer.is_initialized for layer in self.layers):
            raise RuntimeError("bulk_prefill needs an empty cache")
        for k, v in key_value_states:
            check_kv_states(k, v)
            _check_fp16_range(k, v)
        cfg = self.adkv
        if cfg.bits == FULL_PRECISION_BITS or cfg.value_mode != "adkv":
            for i, (k, v) in enumerate(key_value_states):
                self.update(k, v, i)
            return
        shapes = {tuple(k.shape) for k, _ in key_value_states} | {tuple(v.shape) for _, v in key_value_states}
        if len(shapes) != 1:
            raise ValueError(f"all layers' states must share one shape, got {sorted(shapes)}")
        for layer, (k, v) in zip(self.layers, key_value_states):
            layer.lazy_initialization(k, v)
            layer.cumulative_length = k.shape[-2]
        T = key_value_states[0][0].shape[-2]
        n_enc = T - cfg.residual_length
        if n_enc <= 0:
            for layer, (k, v) in zip(self.layers, key_value_states):
                layer.keys, layer.values = k.clone(), v.clone()
            return
        ns = min(cfg.sink_tokens, n_enc)
        for layer, (k, v) in zip(self.layers, key_value_states):
            layer._take_sink(k[..., :ns, :], v[..., :ns, :])
            layer.keys, layer.values = k[..., n_enc:, :].clone(), v[..., n_enc:, :].clone()
        if n_enc == ns:
            return
        per_layer = 2 * key_value_states[0][0][..., ns:n_enc, :].numel()
        step = max(1, max_chunk_elements // per_layer)
        pairs = list(zip(self.layers, key_value_states))
        for lo in range(0, len(pairs), step):
            self._bulk_encode(pairs[lo : lo + step], ns, n_enc)

    def _bulk_encode(self, pairs: list, ns: int, n_enc: int) -> None:
        """One vectorised encoder pass over tokens ``ns .. n_enc - 1`` of the given layers."""
        cfg = self.adkv
        parts, outs = [], []
        for layer, (k, v) in pairs:
            xl = torch.stack([k[..., ns:n_enc, :], v[..., ns:n_enc, :]])
            layer._start_streams(xl)
            xn, xo = layer._split_channels(xl)
            parts.append(xn)
            outs.append(xo)
        x = torch.stack(parts)  # [L, 2, B, H, n_enc, D']
        del parts
        params = torch.stack([layer.sq.params for layer, _ in pairs])  # [L, 2, 1, H, 3, D']
        quant = ADKVQuantizer(x.shape[-1], cfg, params)
        n0 = min(cfg.init_tokens, n_enc - ns)
        state = quant.init_state(x[..., :n0, :])
        q, xh, end = quant.encode_raw(x, state)
        del x
        for i, (layer, (_k, v)) in enumerate(pairs):
            layer.stream_state = end.select(i)._fields(torch.clone)  # own storage, not a slice of all layers
            layer._store(q[i], xh[i], outs[i], v[..., ns:n_enc, :])

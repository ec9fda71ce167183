r"""ADKV's stored tokens for attention computed on the codes (no dequantised key or value tensor).

Part of ADKV (see :mod:`neurips26.inference.adkv`). The scores of the stored keys and the weighted sum
of the stored values are computed while the ADKV decoder replays the code streams
(:func:`neurips26.inference.adkv.kernel.replay_attend`), so the reconstruction of a token lives only
in registers:

.. math::
    s_t = q \cdot \hat K_t, \qquad o = \sum_t p_t \hat V_t, \qquad
    \hat x_t = z_t + d_t s_t \ \text{(regenerated from the codes, never stored)}

The first ``n_sink`` tokens are kept in fp16 and attended exactly.

Shapes
------
- :meth:`ADKVStored.scores`: ``q [B, H, R, d]`` float32 (scale applied) into ``out [B, H, R, length]``.
- :meth:`ADKVStored.values`: ``p [B, H, R, length]`` accumulated into ``out [B, H, R, d]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from neurips26.inference.adkv.quantizer import ADKVState

if TYPE_CHECKING:
    from neurips26.inference.adkv.cache import ADKVLayer


class ADKVStored:
    """An :class:`ADKVLayer`'s stored tokens for the codes attention, as of one update: the fp16 sink
    tokens (attended exactly) and the key/value code streams (replayed by
    :func:`neurips26.inference.adkv.kernel.replay_attend` inside the scores and the weighted value sum)."""

    def __init__(self, layer: ADKVLayer):
        self.length = layer.encoded_length
        self.ns = layer.sink_length
        self.key_sink, self.value_sink = layer.key_sink, layer.value_sink
        self.streams = []
        st = layer.stream_state
        if st is None:
            return
        # the decoder constants (initial steps, floors, gains) are fixed once the streams start: kept on the
        # layer while its initial state and parameters are the same tensors (a reorder or repeat replaces them)
        key = getattr(layer, "_replay_consts", None)
        if key is None or key[0] is not st.z1 or key[1] is not layer.sq.params:
            layer._replay_consts = (st.z1, layer.sq.params, self._constants(layer, st))
        consts = layer._replay_consts[2]
        for codes, c in zip((layer.key_codes, layer.value_codes), consts):
            self.streams.append(dict(codes=codes if codes.stride(-1) == 1 else codes.contiguous(), **c))

    @staticmethod
    def _constants(layer: ADKVLayer, st: ADKVState) -> list[dict[str, Any]]:
        sq, cfg = layer.sq, layer.config
        params = sq.params  # [S, 1, H, 3, D]
        eta_z, _, gamma = sq._split(params, torch.float64, True)  # [S, 1, H, D] each
        gain = sq.log_gain_table(params).exp()  # [S, 1, H, L, D]
        level = torch.arange(1 << cfg.bits, dtype=torch.float64, device=params.device) - cfg.offset + cfg.half
        out = []
        for i in range(2):
            z1 = st.z1[i].to(torch.float64)  # [B, H, D]
            s1, _ = sq._start(st.select(i), gamma[i], torch.float64)
            s1 = s1.expand_as(z1).contiguous()
            smin = (s1 * cfg.s_min_rel).contiguous()
            out.append(
                dict(
                    gain=gain[i, 0].contiguous(),
                    level=level,
                    z1=z1.contiguous(),
                    s1=s1,
                    smin=smin,
                    eta_z=eta_z[i, 0].contiguous(),
                    bits=cfg.bits,
                )
            )
        return out

    def scores(self, q: torch.Tensor, out: torch.Tensor) -> None:
        """``out[..., t] = q . K_t`` for the stored tokens (``q [B, H, R, d]`` float32, scale applied)."""
        from neurips26.inference.adkv import kernel

        ns = self.ns
        if ns:
            out[..., :ns] = torch.matmul(q, self.key_sink.to(q.dtype).transpose(-1, -2))
        if self.streams:
            kernel.replay_attend(q.float().contiguous(), mode=0, out=out[..., ns:], **self.streams[0])

    def values(self, p: torch.Tensor, out: torch.Tensor) -> None:
        """``out += sum_t p_t V_t`` over the stored tokens (``p [B, H, R, length]``, ``out [B, H, R, d]``)."""
        from neurips26.inference.adkv import kernel

        ns = self.ns
        if ns:
            out += torch.matmul(p[..., :ns], self.value_sink.to(p.dtype))
        if self.streams:
            kernel.replay_attend(p[..., ns:].float().contiguous(), mode=1, out=out, **self.streams[1])

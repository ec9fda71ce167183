r"""Attention computed on the stored codes, plugged into transformers' attention interface.

A quantised cache layer normally rebuilds its whole stored sequence in full precision at every step
(``update`` returns dequantised ``K``, ``V``; SDPA reads them). With the attention registered by
:func:`register_codes_attention` selected on the model (``model.set_attn_implementation(name)``), a layer
that supports it returns only its full-precision window from ``update`` and hands the attention a
:class:`CodesHandle` for the stored part; the attention then computes the scores and the output from
the codes (:mod:`~neurips26.inference.quant.kernels`), and the window exactly:

.. math::
    s_t = \tau\, q \cdot \hat K_t \;(t < T_q, \text{ from the codes}),\quad
    s_t = \tau\, q \cdot K_t \;(\text{window}),\quad
    p = \mathrm{softmax}(s + m),\quad
    o = \sum_{t < T_q} p_t \hat V_t + \sum_{t \ge T_q} p_t V_t

with ``tau`` the softmax scale and ``m`` the attention mask (0 / -inf, or additive). Masks, padding,
GQA and several query tokens are handled; a row whose every key is masked gives 0.

Equality bound
--------------
Against dequantise-then-SDPA on the same stored blocks, in float32 (unit roundoff
``u = 2^-24``, ``gamma_n = n u / (1 - n u)``): each score differs by at most
``eps_s = 2 gamma_{d+2} sum_c |tau q_c| (|z_c| + s_c (L - 1))`` (both sides are length-``d`` dot products
of the same operands, grouped differently, each within ``gamma_{d+2}`` of the exact value), so the
probabilities by at most ``|dp|_1 <= 2 eps_s`` (softmax is 1-Lipschitz from the max norm to ``l_1``
after the factor 2 for the normalisation), and every output channel by

.. math::
    |o - o_{ref}| \le \max_t |\hat V_t| \,\big(2\,\varepsilon_s + 2\,\gamma_{T + G_v + 2}\big)

(the second term: both sides sum ``T`` weighted values, and ours adds the ``z`` terms of ``G_v``-channel
groups separately). :func:`equality_bound` evaluates it; tests/inference/test_codes_attention.py checks
it on every cache, layer and head layout, masks and padding. In a lower-precision model dtype the
output is rounded once more to that dtype: add one ulp of it (``finfo(dtype).eps * max|o|``).

When it is used
---------------
A layer hands a handle when (i) its ``codes_attention`` setting is ``"auto"`` and the bound model config
names a registered codes attention, or it is ``"always"``; (ii) the model passed its attention kwargs to
``cache.update(..., kwargs=kwargs)`` (transformers' decoder models do; the handle travels in that dict);
(iii) it stores at least one block; (iv) the update brings at most ``max_query`` tokens (decode: one;
a long prefill is faster through SDPA on the dequantised blocks); (v) the layer implements
:meth:`~neurips26.inference.quant.ResidualWindowLayer._stored_attention` (KIVI and AdaKVQ in
``decode_mode="stream"``). Otherwise ``update`` returns the dequantised sequence as before and the
registered attention is plain SDPA.

Generic hook
------------
Any :class:`~neurips26.inference.quant.ResidualWindowLayer` subclass joins by returning, from
``_stored_attention()``, an object with ``length`` (stored tokens) and two methods (the
:class:`StoredAttention` protocol): ``scores(q, out)`` writing ``q . K_t`` of its stored tokens into
``out [B, H_kv, R, length]`` for ``q [B, H_kv, R, d]`` (float32, scale applied), and ``values(p, out)``
adding ``sum_t p_t V_t`` into ``out [B, H_kv, R, d]``; and its cache calls
:meth:`~neurips26.inference.quant.QuantizedKVCacheMixin.bind_attention_config`.

Shapes
------
- attention function: ``query [B, H_q, Q, d]``, ``key``/``value`` the window ``[B, H_kv, R, d]``, mask
  ``[B, 1, Q, T]`` (bool or additive) or ``None``; returns ``([B, Q, H_q, d], None)`` like SDPA's.
- :func:`attend_codes`: the same, with the handle.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from neurips26.common.checks import check_int
from neurips26.inference.quant import kernels
from neurips26.inference.quant.packing import FULL_PRECISION_BITS

__all__ = [
    "CODES_ATTENTION_NAMES",
    "HANDLE_KEY",
    "CodesHandle",
    "KIVIStored",
    "StoredAttention",
    "attend_codes",
    "codes_attention_forward",
    "equality_bound",
    "register_codes_attention",
]

#: the key under which a layer's :class:`CodesHandle` travels in the attention kwargs
HANDLE_KEY = "kv_codes_handle"

#: names registered by :func:`register_codes_attention` (a layer in ``"auto"`` mode looks them up)
CODES_ATTENTION_NAMES: set[str] = set()


class StoredAttention(Protocol):
    """What a layer hands the codes attention for its stored (compressed) tokens."""

    length: int

    def scores(self, q: torch.Tensor, out: torch.Tensor) -> None: ...

    def values(self, p: torch.Tensor, out: torch.Tensor) -> None: ...


@dataclasses.dataclass
class CodesHandle:
    """One layer's keys and values for one forward pass: the stored part (a :class:`StoredAttention`)
    followed by the full-precision window ``[B, H_kv, R, d]`` (which includes the incoming tokens)."""

    stored: Any
    window_k: torch.Tensor
    window_v: torch.Tensor

    @property
    def length(self) -> int:
        return int(self.stored.length) + self.window_k.shape[-2]


class KIVIStored:
    """The stored blocks of a KIVI-layout layer (two :class:`~neurips26.inference.quant.store.BlockStore`)
    as of one update: scores and weighted values straight from their codes (:mod:`.kernels`)."""

    def __init__(self, kstore: Any, vstore: Any, group_size: int):
        self.kparts = kstore.parts()
        self.vparts = vstore.parts()
        self.group = group_size
        self.length = len(kstore) * group_size

    def scores(self, q: torch.Tensor, out: torch.Tensor) -> None:
        for part in self.kparts:
            if part["bits"] == FULL_PRECISION_BITS:
                kernels.full_precision_scores(q, part["data"], part["pos"], part["n"], self.group, out)
            else:
                kernels.key_scores(q, part["codes"], part["scale"], part["zero"], part["pos"], part["n"],
                                   part["bits"], self.group, out)  # fmt: skip

    def values(self, p: torch.Tensor, out: torch.Tensor) -> None:
        for part in self.vparts:
            if part["bits"] == FULL_PRECISION_BITS:
                kernels.full_precision_values(p, part["data"], part["pos"], part["n"], self.group, out)
            else:
                kernels.value_accum(p, part["codes"], part["scale"], part["zero"], part["pos"], part["n"],
                                    part["bits"], self.group, out)  # fmt: skip


def _mask_bias(attention_mask: torch.Tensor | None, q_len: int, total: int, device) -> torch.Tensor | None:
    """``[B or 1, 1, Q, T]`` additive float mask (0 / -inf), or ``None`` for no mask."""
    if attention_mask is None:
        if q_len == 1:
            return None
        # causal over the last q_len positions: query i sees keys t <= total - q_len + i
        t = torch.arange(total, device=device)
        i = torch.arange(q_len, device=device).unsqueeze(-1)
        allowed = t <= total - q_len + i
        return torch.zeros(q_len, total, device=device).masked_fill_(~allowed, float("-inf"))[None, None]
    m = attention_mask[..., :total]
    if m.dtype == torch.bool:
        return torch.zeros(m.shape, device=m.device).masked_fill_(~m, float("-inf"))
    return m.float()


def attend_codes(
    query: torch.Tensor,
    handle: CodesHandle,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
) -> torch.Tensor:
    """Attention of ``query [B, H_q, Q, d]`` over ``handle``'s stored codes and window; ``[B, Q, H_q, d]``
    in the query's dtype (computed in float32, float64 for float64 queries)."""
    b, hq, q_len, d = query.shape
    wk, wv = handle.window_k, handle.window_v
    hk = wk.shape[1]
    if hq % hk:
        raise ValueError(f"query heads ({hq}) must be a multiple of the KV heads ({hk})")
    g = hq // hk
    comp = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = d**-0.5 if scaling is None else scaling
    q = (query.to(comp) * scale).reshape(b, hk, g * q_len, d)  # rows (j, i): query head h g + j, token i
    tq = int(handle.stored.length)
    total = tq + wk.shape[-2]
    scores = torch.empty(b, hk, g * q_len, total, dtype=comp, device=query.device)
    handle.stored.scores(q, scores[..., :tq])
    scores[..., tq:] = torch.matmul(q, wk.to(comp).transpose(-1, -2))
    bias = _mask_bias(attention_mask, q_len, total, query.device)
    if bias is not None:
        s5 = scores.view(b, hk, g, q_len, total)
        s5 += bias.to(comp).unsqueeze(2)  # [B, 1, 1, Q, T] over (H_kv, g)
    top = scores.amax(-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))  # fully masked rows: p = 0
    p = torch.exp(scores - top)
    denom = p.sum(-1, keepdim=True)
    p /= torch.where(denom > 0, denom, torch.ones_like(denom))
    out = torch.matmul(p[..., tq:], wv.to(comp))
    handle.stored.values(p[..., :tq], out)
    return out.view(b, hk, g, q_len, d).reshape(b, hq, q_len, d).transpose(1, 2).to(query.dtype)


def codes_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """``AttentionInterface`` function: attention on the codes when the layer handed a :class:`CodesHandle`
    (``kwargs[HANDLE_KEY]``), else transformers' SDPA attention unchanged."""
    handle = kwargs.pop(HANDLE_KEY, None)
    if handle is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    if dropout and module.training:
        raise ValueError("the codes attention is an inference path; dropout is not supported")
    return attend_codes(query, handle, attention_mask, scaling), None


def register_codes_attention(name: str = "kv_codes") -> str:
    """Register :func:`codes_attention_forward` (and SDPA's padding-aware masks) under ``name``.

    Select it with ``model.set_attn_implementation(name)``; quantised caches bound to the model's config
    (KIVI, AdaKVQ) then decode on their codes, every other cache runs SDPA as before. Returns ``name``.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty str, got {name!r}")
    AttentionInterface.register(name, codes_attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)
    CODES_ATTENTION_NAMES.add(name)
    return name


def equality_bound(
    q_l1: float, key_abs: float, value_abs: float, head_dim: int, length: int, value_group: int,
    dtype: torch.dtype = torch.float32,
) -> float:  # fmt: skip
    """The bound of the module docstring on ``|o - o_ref|`` (per element).

    Parameters
    ----------
    q_l1 : float
        ``max`` over query rows of ``sum_c |tau q_c|`` (scale applied).
    key_abs : float
        ``max`` over stored key channels of ``|z_c| + s_c (L - 1)`` (and ``max |K|`` of the window).
    value_abs : float
        ``max_t |V_t|`` over stored reconstructions and window.
    head_dim, length, value_group : int
        ``d``, the total keys ``T`` and the value group ``G_v``.
    dtype : torch.dtype
        The accumulation dtype (float32 or float64).
    """
    for name, v in (("head_dim", head_dim), ("length", length), ("value_group", value_group)):
        check_int(name, v, low=1)
    u = torch.finfo(dtype).eps / 2

    def gamma(n: int) -> float:
        return n * u / (1 - n * u)

    eps_s = 2 * gamma(head_dim + 2) * q_l1 * key_abs
    return value_abs * (2 * eps_s + 2 * gamma(length + value_group + 2))

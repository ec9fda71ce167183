r"""Block-sparse prefill attention: exact masked SDPA (reference), gathered blocks, and ``flex_attention``.

.. math::
    O = \mathrm{softmax}(Q K^\top s + M_{block} + M_{causal} + M_{pad})\, V

Shapes
------
- ``q``: ``[b, h, n, d]``; ``k``, ``v``: ``[b, h_kv, n, d]``; ``block_mask``: ``[b, h, n_b, n_b]``;
  output ``[b, h, n, d]``.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
import torch.nn.functional as F

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.inference.adacal.probe import _causal_blocks, _check_finite, _check_qk, _expand_kv, _n_blocks


def sparse_prefill_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_mask: torch.Tensor,
    block_size: int,
    scale: float | None = None,
    attention_mask: torch.Tensor | None = None,
    backend: str = "masked",
) -> torch.Tensor:
    """Exact causal attention restricted to the selected key blocks.

    Parameters
    ----------
    q : Tensor ``[b, h, n, d]``
    k, v : Tensor ``[b, h_kv, n, d]``
    block_mask : BoolTensor ``[nb, nb]``, ``[h, nb, nb]`` or ``[b, h, nb, nb]``
        Selected blocks; entries above the diagonal are ignored (causality is always enforced).
    block_size : int
    scale : float, optional
        Logit scale (default ``d ** -0.5``).
    attention_mask : Tensor ``[b, 1, n, n]``, optional
        ``transformers`` 4-D mask: bool (True = attend) or additive float.
    backend : {"masked", "gather", "flex", "flex_compiled"}
        ``"masked"`` (default): expand the block mask to tokens and make one masked SDPA call (dense
        cost, exact; the fastest pure-torch option on CPU; without a padding mask the token mask is
        additive in the query dtype, which CPU SDPA runs about 3x faster than a boolean one). ``"gather"``: per query block, gather
        the selected key blocks and attend to them, so the arithmetic scales with the density
        (slower on CPU because of the Python loop and gathers; the shape a block-sparse kernel
        takes). ``"flex"``: ``torch.nn.attention.flex_attention`` with the ``BlockMask`` of
        :func:`flex_block_mask` (GQA through ``enable_gqa``, a short tail block handled by
        ``seq_lengths``); compiled with ``torch.compile`` on CUDA, where only the selected blocks are
        computed; eager on other devices (exact, unfused: it materialises the full score matrix).
        ``"flex_compiled"``: the same, compiled with ``torch.compile`` on every device, CPU included
        (inductor generates a C++ block-sparse kernel that visits only the selected blocks). The first
        call in a process compiles (minutes on a small CPU; inductor caches the kernel on disk for later
        processes); without a padding mask, the ``BlockMask``'s ``mask_mod`` is the causal rule alone
        (the block lists already hold exactly the selected blocks), so a new plan of the same shape
        reuses the compiled kernel.

    Returns
    -------
    Tensor ``[b, n, h, d]`` (the layout ``transformers`` attention functions return), dtype of ``q``.

    Notes
    -----
    The diagonal block is always computed (a causal query always sees itself). A query row that
    would see no key (e.g. a left-padding query) attends to itself only, so no NaN is produced; such
    rows are padding and their values are not used.
    """
    b, h, n, d = _check_qk(q, k)
    check_int("block_size", block_size, low=1)
    _check_finite("v", v)
    if v.dim() != 4 or v.shape[:3] != k.shape[:3]:
        raise ValueError(
            f"v must have shape [b, h_kv, n, d_v] matching k {tuple(k.shape)}, got {tuple(v.shape)}"
        )
    if v.dtype != q.dtype or v.device != q.device:
        raise ValueError(
            f"v must have q's dtype {q.dtype} and device {q.device}, got {v.dtype} on {v.device}"
        )
    if not isinstance(block_mask, torch.Tensor) or block_mask.dtype != torch.bool:
        raise TypeError("block_mask must be a bool tensor")
    if block_mask.device != q.device:
        raise ValueError(f"block_mask must be on q's device {q.device}, got {block_mask.device}")
    nb = _n_blocks(n, block_size)
    if block_mask.shape[-2:] != (nb, nb):
        raise ValueError(
            f"block_mask must end with ({nb}, {nb}) for n={n}, block_size={block_size}; got {tuple(block_mask.shape)}"
        )
    check_choice("backend", backend, ("gather", "masked", "flex", "flex_compiled"))
    scale = (
        d**-0.5
        if scale is None
        else check_float("scale", scale, 0.0, low_open=True, high=math.inf, high_open=True)
    )
    while block_mask.dim() < 4:
        block_mask = block_mask.unsqueeze(0)
    for dim in (0, 1):  # keep a plan broadcast over the batch / heads broadcast (no per-row copies)
        if block_mask.shape[dim] > 1 and block_mask.stride(dim) == 0:
            block_mask = block_mask.narrow(dim, 0, 1)
    block_mask = (block_mask | torch.eye(nb, dtype=torch.bool, device=q.device)).expand(b, h, nb, nb)
    allowed_tok, additive = None, None
    if attention_mask is not None:
        am = attention_mask[..., -n:, -n:]
        if am.dtype == torch.bool:
            allowed_tok = am
        else:
            allowed_tok = am > torch.finfo(am.dtype).min / 2
            additive = torch.where(allowed_tok, am, torch.zeros_like(am)).to(q.dtype)
    if backend in ("flex", "flex_compiled"):
        compiled = backend == "flex_compiled" or q.device.type == "cuda"
        return _flex_attention(q, k, v, block_mask, block_size, scale, allowed_tok, additive, compiled)
    ke, ve = _expand_kv(k, h), _expand_kv(v, h)
    if backend == "masked":
        return _masked_attention(q, ke, ve, block_mask, block_size, scale, allowed_tok, additive)
    return _gather_attention(q, ke, ve, block_mask, block_size, scale, allowed_tok, additive)


def _finish_mask(allowed: torch.Tensor, self_pos: torch.Tensor, additive: torch.Tensor | None, dtype):
    """Let a query with no visible key attend to itself (padding rows); build the SDPA mask."""
    empty = ~allowed.any(-1, keepdim=True)
    if bool(empty.any()):
        allowed = allowed | (empty & self_pos)
    if additive is None:
        return allowed
    neg = torch.tensor(float("-inf"), dtype=dtype, device=allowed.device)
    return torch.where(allowed, additive, neg)


def _additive_block_mask(
    block_mask: torch.Tensor, block_size: int, n: int, dtype: torch.dtype
) -> torch.Tensor:
    """Additive SDPA mask ``[b', h', n, n]`` (0 = attend, ``-inf`` = masked) of a causal block plan.

    Built at block level (``[b', h', nb, nb]``), expanded to tokens once, plus the token-causal
    ``-inf`` triangle in place. A block plan broadcast over the batch or the heads (stride 0, e.g.
    A-shape) stays broadcast (``b' = 1`` / ``h' = 1``). The same attention pattern as the boolean mask
    ``tokens(block_mask) & tril``; CPU SDPA takes a float mask of the query dtype on its fused path,
    about 3x faster than a boolean mask, which it converts per call.
    """
    if block_mask.stride(0) == 0:
        block_mask = block_mask[:1]
    if block_mask.stride(1) == 0:
        block_mask = block_mask[:, :1]
    b, h, nb, _ = block_mask.shape
    zero = torch.zeros((), dtype=dtype, device=block_mask.device)
    neg = torch.full((), float("-inf"), dtype=dtype, device=block_mask.device)
    add = torch.where(block_mask, zero, neg)
    add = add[:, :, :, None, :, None].expand(b, h, nb, block_size, nb, block_size)
    add = add.reshape(b, h, nb * block_size, nb * block_size)[..., :n, :n]
    if add.shape[-1] != nb * block_size:
        add = add.contiguous()
    upper = torch.ones(n, n, dtype=torch.bool, device=block_mask.device).triu(1)
    return add.masked_fill_(upper, float("-inf"))


def _masked_attention(q, ke, ve, block_mask, block_size, scale, allowed_tok, additive):
    """Token-expanded mask over the whole sequence + one SDPA call (dense cost, exact)."""
    b, h, n, _ = q.shape
    nb = block_mask.shape[-1]
    B = block_size
    if allowed_tok is None:  # the diagonal is forced on: no query row is empty
        mask = _additive_block_mask(block_mask, B, n, q.dtype)
        return (
            F.scaled_dot_product_attention(q, ke, ve, attn_mask=mask, scale=scale)
            .transpose(1, 2)
            .contiguous()
        )
    tok = block_mask[:, :, :, None, :, None].expand(b, h, nb, B, nb, B).reshape(b, h, nb * B, nb * B)
    allowed = tok[..., :n, :n] & torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    allowed = allowed & allowed_tok
    eye = torch.eye(n, dtype=torch.bool, device=q.device)
    mask = _finish_mask(allowed, eye, None if additive is None else additive.expand_as(allowed), q.dtype)
    out = F.scaled_dot_product_attention(q, ke, ve, attn_mask=mask, scale=scale)
    return out.transpose(1, 2).contiguous()


def _gather_attention(q, ke, ve, block_mask, block_size, scale, allowed_tok, additive):
    """Per query block, gather only the selected key blocks and attend to them (sparse cost)."""
    b, h, n, d = q.shape
    dv = ve.shape[-1]
    B = block_size
    nb = _n_blocks(n, B)
    pad = nb * B - n
    kp = F.pad(ke, (0, 0, 0, pad)).reshape(b, h, nb, B, d)
    vp = F.pad(ve, (0, 0, 0, pad)).reshape(b, h, nb, B, dv)
    pos = torch.arange(nb * B, device=q.device).reshape(nb, B)
    if allowed_tok is not None:
        allowed_tok = F.pad(allowed_tok, (0, pad), value=False)
        if additive is not None:
            additive = F.pad(additive, (0, pad))
    out = torch.empty(b, h, n, dv, dtype=q.dtype, device=q.device)
    for i in range(nb):
        q0, q1 = i * B, min((i + 1) * B, n)
        sel = block_mask[:, :, i, : i + 1]
        cnt = int(sel.sum(-1).max())
        idx = sel.to(torch.float32).topk(cnt, dim=-1).indices  # [b, h, cnt]
        valid = sel.gather(-1, idx)
        kk = kp.gather(2, idx[..., None, None].expand(b, h, cnt, B, d)).reshape(b, h, cnt * B, d)
        vv = vp.gather(2, idx[..., None, None].expand(b, h, cnt, B, dv)).reshape(b, h, cnt * B, dv)
        kpos = pos[idx].reshape(b, h, 1, cnt * B)
        qpos = torch.arange(q0, q1, device=q.device)[:, None]
        allowed = (valid[..., None].expand(b, h, cnt, B).reshape(b, h, 1, cnt * B)) & (kpos <= qpos)
        add = None
        if allowed_tok is not None:
            cols = kpos.expand(b, h, q1 - q0, cnt * B)
            rows = allowed_tok[:, :, q0:q1].expand(b, h, q1 - q0, nb * B)
            allowed = allowed & rows.gather(-1, cols)
            if additive is not None:
                add = additive[:, :, q0:q1].expand(b, h, q1 - q0, nb * B).gather(-1, cols)
        mask = _finish_mask(allowed, kpos == qpos, add, q.dtype)
        out[:, :, q0:q1] = F.scaled_dot_product_attention(q[:, :, q0:q1], kk, vv, attn_mask=mask, scale=scale)
    return out.transpose(1, 2).contiguous()


def flex_block_mask(
    block_mask: torch.Tensor,
    block_size: int,
    n: int,
    attention_mask: torch.Tensor | None = None,
    *,
    lookup: bool = True,
):
    """Translate a block plan into a ``torch.nn.attention.flex_attention.BlockMask``.

    The ``BlockMask`` lists, per query block, the selected key blocks (``kv_num_blocks`` /
    ``kv_indices``, ascending); blocks strictly below the diagonal are marked *full* (no mask
    evaluation inside the kernel) when there is no padding mask, the diagonal block is *partial*.
    Its ``mask_mod`` is the token-level rule
    ``kv <= q and block_mask[b, h, q // B, kv // B] and attention_mask[b, 0, q, kv]``, plus the
    self position for a query row that would otherwise see nothing (left padding), as in the
    reference path. Eager (uncompiled) ``flex_attention`` only evaluates ``mask_mod``, so the block
    lookup inside it keeps both execution modes exact.

    Parameters
    ----------
    block_mask : BoolTensor ``[nb, nb]``, ``[h, nb, nb]`` or ``[b, h, nb, nb]``
        Selected blocks (entries above the diagonal are ignored; the diagonal is forced on).
    block_size : int
        Block edge ``B`` (the ``BlockMask``'s ``BLOCK_SIZE`` for queries and keys).
    n : int
        Sequence length (``nb = ceil(n / B)``; a short tail block is allowed).
    attention_mask : Tensor ``[b, 1, n, n]``, optional
        ``transformers`` 4-D mask (bool, True = attend; or additive float, where entries at or
        below ``finfo.min / 2`` count as masked).
    lookup : bool
        ``True`` (default): ``mask_mod`` also looks the block up (exact in eager mode, which evaluates
        ``mask_mod`` everywhere). ``False``, without ``attention_mask``: ``mask_mod`` is the causal rule
        alone, exact for a compiled kernel (which visits only the listed blocks) and free of captured
        tensors, so one compiled kernel serves every plan of the same shape.

    Returns
    -------
    torch.nn.attention.flex_attention.BlockMask
        Shape ``(b, h, n, n)`` (``b`` or ``h`` are 1 where ``block_mask`` has no such dim).
    """
    from torch.nn.attention.flex_attention import BlockMask

    check_int("block_size", block_size, low=1)
    check_int("n", n, low=1)
    if not isinstance(block_mask, torch.Tensor) or block_mask.dtype != torch.bool:
        raise TypeError("block_mask must be a bool tensor")
    nb = _n_blocks(n, block_size)
    if block_mask.dim() < 2 or block_mask.dim() > 4 or block_mask.shape[-2:] != (nb, nb):
        raise ValueError(
            f"block_mask must be [.., {nb}, {nb}] for n={n}, block_size={block_size}; got {tuple(block_mask.shape)}"
        )
    while block_mask.dim() < 4:
        block_mask = block_mask.unsqueeze(0)
    dev = block_mask.device
    causal = _causal_blocks(nb, dev)
    eye = torch.eye(nb, dtype=torch.bool, device=dev)
    bm = (block_mask | eye) & causal
    allowed_tok = None
    if attention_mask is not None:
        am = attention_mask[..., -n:, -n:]
        allowed_tok = am if am.dtype == torch.bool else am > torch.finfo(am.dtype).min / 2
        allowed_tok = allowed_tok[:, 0].to(dev)  # [b, n, n]
        if bm.shape[0] == 1 and allowed_tok.shape[0] > 1:
            bm = bm.expand(allowed_tok.shape[0], *bm.shape[1:])
    bm = bm.contiguous()

    def kv_lists(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        counts = m.sum(-1).to(torch.int32)
        order = torch.argsort((~m).to(torch.int8), dim=-1, stable=True).to(torch.int32)
        return counts, order

    tokens = torch.arange(n, device=dev)
    per_b, per_h = bm.shape[0] > 1, bm.shape[1] > 1  # size-1 dims broadcast over the batch / heads

    def lookup_block(b, h, q_idx, kv_idx):
        return bm[b if per_b else 0, h if per_h else 0, q_idx // block_size, kv_idx // block_size]

    if allowed_tok is None:
        partial_n, partial_i = kv_lists(bm & eye)
        full_n, full_i = kv_lists(bm & ~eye)

        if lookup:

            def mask_mod(b, h, q_idx, kv_idx):
                return (kv_idx <= q_idx) & lookup_block(b, h, q_idx, kv_idx)

        else:
            mask_mod = _causal_mask_mod

    else:
        partial_n, partial_i = kv_lists(bm)
        full_n = full_i = None
        tok_bm = bm[..., :, None, :, None].expand(*bm.shape[:2], nb, block_size, nb, block_size)
        tok_bm = tok_bm.reshape(*bm.shape[:2], nb * block_size, nb * block_size)[..., :n, :n]
        allowed_full = tok_bm & (tokens[None, :] <= tokens[:, None]) & allowed_tok[:, None]
        empty = ~allowed_full.any(-1)  # [b, h, n]: rows that see no key attend to themselves
        per_ab, per_eb = allowed_tok.shape[0] > 1, empty.shape[0] > 1

        def mask_mod(b, h, q_idx, kv_idx):
            ab = b if per_ab else 0
            ok = (kv_idx <= q_idx) & lookup_block(b, h, q_idx, kv_idx) & allowed_tok[ab, q_idx, kv_idx]
            return ok | (empty[b if per_eb else 0, h if per_h else 0, q_idx] & (kv_idx == q_idx))

    return BlockMask.from_kv_blocks(
        partial_n, partial_i, full_n, full_i, BLOCK_SIZE=block_size, mask_mod=mask_mod, seq_lengths=(n, n)
    )


def _causal_mask_mod(b, h, q_idx, kv_idx):
    return kv_idx <= q_idx


_COMPILED_FLEX: dict[str, Any] = {}


def _flex_fn(compiled: bool):
    """``flex_attention``, compiled once per process (fused block-sparse kernel) or eager."""
    from torch.nn.attention.flex_attention import flex_attention

    if not compiled:
        return flex_attention
    if "compiled" not in _COMPILED_FLEX:
        _COMPILED_FLEX["compiled"] = torch.compile(flex_attention, dynamic=False)
    return _COMPILED_FLEX["compiled"]


def _flex_attention(q, k, v, block_mask, block_size, scale, allowed_tok, additive, compiled):
    """Flex-attention path of :func:`sparse_prefill_attention` (``q [b,h,n,d]``, ``k, v [b,h_kv,n,d]``)."""
    b, h, n, _ = q.shape
    mask4 = None if allowed_tok is None else allowed_tok.expand(b, 1, n, n)
    bmask = flex_block_mask(block_mask, block_size, n, mask4, lookup=not compiled)
    score_mod = None
    if additive is not None:
        add = additive.expand(b, 1, n, n)[:, 0].to(torch.float32)

        def score_mod(score, bi, hi, q_idx, kv_idx):
            return score + add[bi, q_idx, kv_idx]

    with warnings.catch_warnings():
        # eager flex_attention warns that it is unfused; that is the documented CPU behaviour here
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
        out = _flex_fn(compiled)(
            q,
            k,
            v,
            score_mod=score_mod,
            block_mask=bmask,
            scale=scale,
            enable_gqa=k.shape[1] != h,
        )
    return out.transpose(1, 2).contiguous()

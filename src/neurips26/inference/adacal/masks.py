r"""Block masks of the baselines: A-shape (sink + local window) and FlexPrefill-like, plus block density.

:func:`flexprefill_mask` chooses per head, by the Jensen-Shannon distance between the estimated and
the probe distribution, between a query-aware pattern and a vertical-slash pattern, each selected to a
cumulative mass ``gamma``.

.. math::
    S = \mathrm{softmax}(\bar Q \bar K^\top s + M_{causal\,blocks}),\qquad
    \mathrm{density} = \frac{|\mathrm{selected}|}{n_b (n_b + 1) / 2}

Shapes
------
- block masks: ``[n_b, n_b]`` (A-shape) or ``[b, h, n_b, n_b]`` bool, lower-triangular.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from neurips26.common.checks import check_float, check_int
from neurips26.inference.adacal.probe import (
    _block_mean,
    _block_pool_sum,
    _causal_blocks,
    _check_qk,
    _cumulative_select,
    _expand_kv,
    _n_blocks,
    _probe_attention,
)


def a_shape_mask(n: int, block_size: int, sink_blocks: int = 1, local_blocks: int = 2) -> torch.Tensor:
    """Static sink + local-window block mask ("A-shape", StreamingLLM-style).

    Query block ``i`` keeps key blocks ``j < sink_blocks`` and ``i - local_blocks <= j <= i``.

    Returns
    -------
    BoolTensor ``[nb, nb]`` (lower triangular).
    """
    check_int("n", n, low=1)
    check_int("block_size", block_size, low=1)
    check_int("sink_blocks", sink_blocks, low=0)
    check_int("local_blocks", local_blocks, low=0)
    nb = _n_blocks(n, block_size)
    i = torch.arange(nb)[:, None]
    j = torch.arange(nb)[None, :]
    return (j <= i) & ((j < sink_blocks) | (j >= i - local_blocks))


def estimated_block_scores(
    q: torch.Tensor, k: torch.Tensor, block_size: int, scale: float | None = None
) -> torch.Tensor:
    """FlexPrefill-style block estimate ``softmax(pool(Q) pool(K)^T * scale)`` over causal blocks.

    Returns fp32 ``[b, h, nb, nb]``; rows sum to 1 over ``j <= i``, zero above the diagonal.
    """
    b, h, n, d = _check_qk(q, k)
    scale = (
        d**-0.5
        if scale is None
        else check_float("scale", scale, 0.0, low_open=True, high=math.inf, high_open=True)
    )
    nb = _n_blocks(n, block_size)
    qp = _block_mean(q.float(), block_size, nb)
    kp = _block_mean(_expand_kv(k, h).float(), block_size, nb)
    logits = torch.einsum("bhid,bhjd->bhij", qp, kp) * scale
    logits = logits.masked_fill(~_causal_blocks(nb, q.device), float("-inf"))
    return torch.softmax(logits, dim=-1)


def _js_distance(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    m = 0.5 * (p + q)

    def kl(a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch.where(
            a > 0, a * (a.clamp_min(1e-30).log() - c.clamp_min(1e-30).log()), torch.zeros_like(a)
        ).sum(-1)

    return (0.5 * kl(p, m) + 0.5 * kl(q, m)).clamp_min(0).sqrt()


def flexprefill_mask(
    q: torch.Tensor,
    k: torch.Tensor,
    block_size: int,
    gamma: float = 0.9,
    tau: float = 0.1,
    probe_queries: int | None = None,
    scale: float | None = None,
    key_valid: torch.Tensor | None = None,
    return_pattern: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """FlexPrefill-like dynamic block mask (simplified, no kernels).

    Per head: the true block distribution of the last query block :math:`\\bar a` (the probe) is
    compared with the estimate :math:`\\hat a` from the mean-pooled last-block query; if the
    Jensen-Shannon distance :math:`\\sqrt{JSD(\\bar a, \\hat a)} < \\tau` the head is *query-aware*
    (per query block, the blocks covering ``gamma`` of the estimated scores), otherwise
    *vertical-slash* (key columns and diagonals covering ``gamma`` of the probe's vertical and slash
    mass, mapped to the blocks containing them). Diagonal blocks are always kept.

    Parameters
    ----------
    q : Tensor ``[b, h, n, d]``
    k : Tensor ``[b, h_kv, n, d]``
    block_size : int
    gamma : float
        Cumulative attention threshold in ``(0, 1]``.
    tau : float
        JS-distance threshold in ``[0, 1]``.
    probe_queries : int, optional
        Last queries used for the true distribution (default ``block_size``).
    scale : float, optional
    key_valid : BoolTensor ``[b, n]``, optional
    return_pattern : bool
        Also return ``query_aware`` (BoolTensor ``[b, h]``).

    Returns
    -------
    BoolTensor ``[b, h, nb, nb]`` (and the pattern choice when asked).
    """
    b, h, n, d = _check_qk(q, k)
    check_int("block_size", block_size, low=1)
    check_float("gamma", gamma, 0.0, 1.0, low_open=True)
    check_float("tau", tau, 0.0, 1.0)
    probe_queries = block_size if probe_queries is None else check_int("probe_queries", probe_queries, low=1)
    scale = (
        d**-0.5
        if scale is None
        else check_float("scale", scale, 0.0, low_open=True, high=math.inf, high_open=True)
    )
    nb = _n_blocks(n, block_size)
    dev = q.device
    attn, pos = _probe_attention(q, k, probe_queries, scale, key_valid)  # [b,h,nq,n]
    true_dist = _block_pool_sum(attn, block_size, nb).mean(2)
    true_dist = true_dist / true_dist.sum(-1, keepdim=True).clamp_min(1e-30)
    # estimate from the pooled last-block query against all keys
    ke = _expand_kv(k, h).float()
    q_hat = q[:, :, n - attn.shape[2] :].float().mean(2)  # [b, h, d]
    est_logits = torch.einsum("bhd,bhkd->bhk", q_hat, ke) * scale
    if key_valid is not None:
        est_logits = est_logits.masked_fill(~key_valid[:, None, :], float("-inf"))
    est_dist = _block_pool_sum(torch.softmax(est_logits, -1), block_size, nb)
    query_aware = _js_distance(true_dist, est_dist) < tau  # [b, h]
    causal = _causal_blocks(nb, dev)
    # query-aware pattern
    scores = estimated_block_scores(q, k, block_size, scale)
    qa_mask = _cumulative_select(scores, gamma, causal)
    # vertical-slash pattern from the probe
    vertical = attn.sum(2)  # [b, h, n]
    offsets = torch.arange(n, device=dev)
    key_idx = pos[:, None] - offsets[None, :]  # [nq, n]: key of offset o for probe row r
    ok = key_idx >= 0
    gathered = attn.gather(-1, key_idx.clamp_min(0)[None, None].expand(b, h, -1, -1)) * ok
    slash = gathered.sum(2)  # [b, h, n] mass per offset
    v_sel = _cumulative_select(vertical, gamma, torch.ones_like(vertical, dtype=torch.bool))
    s_sel = _cumulative_select(slash, gamma, torch.ones_like(slash, dtype=torch.bool))
    col_blocks = _block_pool_sum(v_sel.float(), block_size, nb) > 0  # [b, h, nb]
    # block diagonal distance D = i - j covers offsets [D*B - (B-1), D*B + (B-1)]
    csum = F.pad(s_sel.float().cumsum(-1), (1, 0))  # csum[o] = count of offsets < o
    dist_ids = torch.arange(nb, device=dev)
    lo = (dist_ids * block_size - (block_size - 1)).clamp(0, n)
    hi = (dist_ids * block_size + block_size).clamp(0, n)
    diag_sel = (csum[..., hi] - csum[..., lo]) > 0  # [b, h, nb] by block distance
    i = torch.arange(nb, device=dev)[:, None]
    j = torch.arange(nb, device=dev)[None, :]
    vs_mask = col_blocks[:, :, None, :] | diag_sel[:, :, (i - j).clamp_min(0)]
    vs_mask = vs_mask & causal
    mask = torch.where(query_aware[:, :, None, None], qa_mask, vs_mask)
    mask = mask | torch.eye(nb, dtype=torch.bool, device=dev)
    return (mask, query_aware) if return_pattern else mask


def block_density(mask: torch.Tensor) -> torch.Tensor:
    """Selected causal blocks / causal blocks ``nb (nb + 1) / 2`` over the last two dims.

    In torch's default dtype (float32 unless changed).
    """
    nb = mask.shape[-1]
    causal = _causal_blocks(nb, mask.device)
    return (mask & causal).sum((-1, -2)).to(torch.get_default_dtype()) / (nb * (nb + 1) / 2)

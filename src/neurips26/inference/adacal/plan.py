r"""AdaCal planning: head activation (static / dense / dynamic) and the per-head block mask.

.. math::
    \text{static if } M_h < \theta_{mid};\quad \text{dense if } H_h > \theta_H \text{ (within quota)};\quad
    \text{else the smallest } \gamma\text{-cover of } S_i \text{, capped at } \lceil \beta_{max}(i+1) \rceil

Shapes
------
- :func:`plan_blocks`: ``q [b, h, n, d]``, ``k [b, h_kv, n, d]`` -> :class:`BlockPlan` with
  ``block_mask [b, h, n_b, n_b]`` and ``head_kind [b, h]``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch

from neurips26.common.checks import check_choice, check_float
from neurips26.inference.adacal.config import HEAD_DENSE, HEAD_DYNAMIC, HEAD_STATIC, TASKS, AdaCalConfig
from neurips26.inference.adacal.masks import a_shape_mask, block_density, estimated_block_scores
from neurips26.inference.adacal.probe import (
    _causal_blocks,
    _check_qk,
    _cumulative_select,
    _n_blocks,
    _zones,
    probe_metrics,
)


@dataclass
class BlockPlan:
    """Output of :func:`plan_blocks`.

    Attributes
    ----------
    mask : BoolTensor ``[b, h, nb, nb]``
        Selected key blocks per query block (lower triangular, diagonal on).
    head_type : LongTensor ``[b, h]``
        ``HEAD_STATIC`` (0), ``HEAD_DYNAMIC`` (1) or ``HEAD_DENSE`` (2).
    density : Tensor ``[b, h]``
        Selected / causal blocks.
    metrics : dict
        :func:`probe_metrics` output.
    task : str
        The task whose policy was applied.
    augment_mask : BoolTensor ``[b, h, nb, nb]``
        Blocks that augmentation contributed (before the budget cap).
    """

    mask: torch.Tensor
    head_type: torch.Tensor
    density: torch.Tensor
    metrics: dict[str, torch.Tensor]
    task: str
    augment_mask: torch.Tensor


def plan_blocks(
    q: torch.Tensor,
    k: torch.Tensor,
    config: AdaCalConfig,
    task: str | None = None,
    scale: float | None = None,
    key_valid: torch.Tensor | None = None,
) -> BlockPlan:
    """Plan AdaCal's per-head block mask for one layer's prefill.

    Parameters
    ----------
    q : Tensor ``[b, h, n, d]``
    k : Tensor ``[b, h_kv, n, d]``
    config : AdaCalConfig
    task : {"structure", "mixed", "retrieval"}, optional
        Policy to apply (default ``config.default_task``).
    scale : float, optional
        Logit scale (default ``d ** -0.5``).
    key_valid : BoolTensor ``[b, n]``, optional
        ``False`` for padding keys (excluded from the probe).

    Returns
    -------
    BlockPlan
        When ``sink_blocks + local_blocks + 1 >= nb`` every causal block is selected (dense) and a
        ``UserWarning`` says so.
    """
    if not isinstance(config, AdaCalConfig):
        raise TypeError(f"config must be an AdaCalConfig, got {type(config).__name__}")
    task = config.default_task if task is None else task
    check_choice("task", task, TASKS)
    b, h, n, d = _check_qk(q, k)
    B = config.block_size
    nb = _n_blocks(n, B)
    dev = q.device
    scale = (
        d**-0.5
        if scale is None
        else check_float("scale", scale, 0.0, low_open=True, high=math.inf, high_open=True)
    )
    pol = config.policies[task]
    causal = _causal_blocks(nb, dev)
    metrics = probe_metrics(
        q, k, B, config.probe_queries or B, config.sink_blocks, config.local_blocks, scale, key_valid
    )
    if config.sink_blocks + config.local_blocks + 1 >= nb:
        warnings.warn(
            f"AdaCal: sink_blocks + local_blocks + 1 = {config.sink_blocks + config.local_blocks + 1} >= "
            f"{nb} blocks; the whole causal mask is used (dense)",
            UserWarning,
            stacklevel=2,
        )
        mask = causal.expand(b, h, nb, nb).clone()
        head_type = torch.full((b, h), HEAD_DENSE, dtype=torch.long, device=dev)
        return BlockPlan(mask, head_type, block_density(mask), metrics, task, torch.zeros_like(mask))

    ent, mid, dist = metrics["entropy"], metrics["mid_coverage"], metrics["probe_dist"]
    static_m = a_shape_mask(n, B, config.sink_blocks, config.local_blocks).to(dev)
    # head activation
    is_static = mid < pol.theta_mid
    dense_cand = (~is_static) & (ent > pol.theta_h)
    quota = int(round(config.dense_quota * h))
    is_dense = torch.zeros_like(dense_cand)
    if quota > 0 and bool(dense_cand.any()):
        ranked = torch.where(dense_cand, ent, torch.full_like(ent, -1.0))
        top = ranked.topk(min(quota, h), dim=-1).indices
        is_dense.scatter_(-1, top, True)
        is_dense &= dense_cand
    head_type = torch.full((b, h), HEAD_DYNAMIC, dtype=torch.long, device=dev)
    head_type[is_static] = HEAD_STATIC
    head_type[is_dense] = HEAD_DENSE

    # dynamic selection with priorities: mandatory 4, top-m 3 + p, stride 2, gamma-cover S in [0, 1]
    scores = estimated_block_scores(q, k, B, scale)
    cover = _cumulative_select(scores, pol.gamma, causal)
    prio = torch.where(cover, scores, torch.full_like(scores, -1.0))
    i = torch.arange(nb, device=dev)[:, None]
    j = torch.arange(nb, device=dev)[None, :]
    augment = torch.zeros(b, h, nb, nb, dtype=torch.bool, device=dev)
    if pol.augment != "off" and config.augment_top_m > 0:
        mid_last = _zones(nb, config.sink_blocks, config.local_blocks, dev)
        mid_dist = torch.where(mid_last, dist, torch.full_like(dist, -1.0))
        m = min(config.augment_top_m, int(mid_last.sum()))
        if m > 0:
            top_vals, top_idx = mid_dist.topk(m, dim=-1)
            chosen = torch.zeros(b, h, nb, dtype=torch.bool, device=dev)
            chosen.scatter_(-1, top_idx, top_vals > 0)
            topm = chosen[:, :, None, :] & causal
            augment |= topm
            prio = torch.where(topm, 3.0 + dist[:, :, None, :].expand_as(prio), prio)
    if pol.augment == "topm+stride":
        row_mid = (j >= config.sink_blocks) & (j < i - config.local_blocks)
        stride = row_mid & ((j - config.sink_blocks) % config.augment_stride == 0)
        augment |= stride.expand(b, h, nb, nb) & ~(prio >= 3.0)
        prio = torch.where(stride & (prio < 2.0), torch.full_like(prio, 2.0), prio)
    prio = torch.where(static_m, torch.full_like(prio, 4.0), prio)
    prio = prio.masked_fill(~causal, -1.0)
    n_mand = static_m.sum(-1)  # [nb]
    cap = torch.maximum(torch.ceil(pol.beta_max * (torch.arange(nb, device=dev) + 1)).long(), n_mand)
    order = torch.argsort(prio, dim=-1, descending=True, stable=True)
    rank = torch.empty_like(order).scatter_(-1, order, torch.arange(nb, device=dev).expand_as(order))
    dyn_mask = (rank < cap[:, None]) & (prio >= 0)

    ht = head_type[:, :, None, None]
    mask = torch.where(ht == HEAD_STATIC, static_m.expand(b, h, nb, nb), dyn_mask)
    mask = torch.where(ht == HEAD_DENSE, causal.expand(b, h, nb, nb), mask)
    augment = augment & (ht == HEAD_DYNAMIC)
    return BlockPlan(mask, head_type, block_density(mask), metrics, task, augment)

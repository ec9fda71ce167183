r"""Policy-loss building blocks for RL with verifiable rewards (GRPO, DAPO and relatives).

Pure functions over per-token tensors, so any trainer (TRL, verl, a hand-written loop) can call
them (shapes below).

Group-normalised advantage (GRPO, Shao et al. 2024) for response ``i`` of a group of ``G``:

.. math::  A_i = \frac{r_i - \mathrm{mean}_g(r)}{\mathrm{std}_g(r) + \epsilon}

(``norm_std=False``: only centring, as in Dr. GRPO). Clipped surrogate (PPO) per token with
ratio :math:`\rho = \exp(\log\pi_\theta - \log\pi_{old})`:

.. math::  \ell = \max\big(-A\rho,\; -A\,\mathrm{clip}(\rho, 1-\epsilon_{low}, 1+\epsilon_{high})\big),
           \quad\text{dual clip } (A<0):\ \ell \leftarrow \min(\ell, -A c).

KL estimators of :math:`KL(\pi_\theta\,\|\,\pi_{ref})` per token, with
:math:`d = \log\pi_{ref} - \log\pi_\theta` (Schulman, "Approximating KL divergence"):

.. math::  k_1 = -d, \qquad k_2 = \tfrac12 d^2, \qquad k_3 = e^d - d - 1.

Aggregations of a per-token loss :math:`L` under mask :math:`M`: ``"token-mean"`` over the whole batch
(DAPO, TRL ``dapo``/``bnpo`` on one process), ``"seq-mean-token-mean"`` (original GRPO, TRL ``grpo``)
and ``"seq-mean-token-sum"``:

.. math::

    \frac{\sum_{b,t} L_{b,t} M_{b,t}}{\sum_{b,t} M_{b,t}}, \qquad
    \frac1B \sum_b \frac{\sum_t L_{b,t} M_{b,t}}{\sum_t M_{b,t}}, \qquad
    \frac1B \sum_b \sum_t L_{b,t} M_{b,t}.

:func:`grpo_loss` and :func:`dapo_loss` equal TRL's ``GRPOTrainer`` loss with ``loss_type="grpo"``
and ``"dapo"`` on identical tensors (tested).

Shapes
------
``B`` responses, ``T`` padded response length: per-token tensors (log-probs, masks, KL, losses)
``[B, T]``; rewards and per-response advantages ``[B]`` (advantages may also be ``[B, T]``); the
aggregated losses are scalars.
"""

from __future__ import annotations

from typing import Literal

import torch

from neurips26.common.checks import check_choice, check_float, check_int

LOSS_AGGS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
KL_ESTIMATORS = ("k1", "k2", "k3")
LOG_RATIO_CLAMP = 20.0

LossAgg = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]


def as_mask(name: str, mask: torch.Tensor) -> torch.Tensor:
    """Return ``mask`` as a bool tensor; a non-bool mask is accepted only if all entries are 0 or 1."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype == torch.bool:
        return mask
    if mask.is_floating_point() or mask.dtype in (
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint8,
    ):
        if not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError(f"{name} must be boolean or contain only 0/1 values")
        return mask.bool()
    raise TypeError(f"{name} has unsupported dtype {mask.dtype}")


def check_token_tensors(**tensors: torch.Tensor | None) -> tuple[int, int]:
    """Check that every non-None tensor is 2-D ``(B, T)`` with one common shape; return ``(B, T)``."""
    shape = None
    for name, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.is_meta:
            raise ValueError(f"{name} is a meta tensor (no data); pass a materialised tensor")
        if not name.endswith("mask") and not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")
        if t.ndim != 2:
            raise ValueError(f"{name} must have shape (B, T), got {tuple(t.shape)}")
        if shape is None:
            shape, first, device = tuple(t.shape), name, t.device
        elif t.device != device:
            raise ValueError(f"device mismatch: {first} is on {device} but {name} is on {t.device}")
        elif tuple(t.shape) != shape:
            raise ValueError(f"shape mismatch: {first} is {shape} but {name} is {tuple(t.shape)}")
    if shape is None:
        raise ValueError("no tensors given")
    return shape


def group_advantages(
    rewards: torch.Tensor,
    group_size: int,
    *,
    norm_std: bool = True,
    eps: float = 1e-6,
    unbiased: bool = True,
) -> torch.Tensor:
    """Group-normalised advantages, one per response.

    Parameters
    ----------
    rewards : Tensor ``(B,)``
        Rewards; rows ``g*G .. g*G+G-1`` belong to group ``g``. ``B`` must be a multiple of ``G``.
    group_size : int
        ``G >= 1``.
    norm_std : bool
        Divide by the group standard deviation (GRPO); False only centres (Dr. GRPO).
    eps : float
        Added to the standard deviation.
    unbiased : bool
        Sample (n-1) standard deviation, as ``torch.std`` (TRL, verl); False = population std.

    Returns
    -------
    Tensor ``(B,)`` float32. A group with identical rewards gets zero advantages.
    """
    check_int("group_size", group_size, low=1)
    check_float("eps", eps, 0.0)
    if not isinstance(rewards, torch.Tensor) or rewards.ndim != 1:
        raise ValueError(f"rewards must be a 1-D tensor (B,), got {getattr(rewards, 'shape', type(rewards))}")
    if rewards.numel() % group_size:
        raise ValueError(
            f"number of rewards ({rewards.numel()}) must be a multiple of group_size ({group_size})"
        )
    grouped = rewards.float().view(-1, group_size)
    centred = grouped - grouped.mean(1, keepdim=True)
    if norm_std:
        std = (
            grouped.std(1, keepdim=True, unbiased=unbiased)
            if group_size > 1
            else torch.zeros_like(grouped[:, :1])
        )
        denom = std + eps
        # A group with identical rewards has zero centred rewards; keep its advantages at exactly 0
        # even when eps = 0 (0 / 0 would be NaN).
        centred = torch.where(denom > 0, centred / denom.clamp(min=torch.finfo(centred.dtype).tiny), 0.0)
    return centred.reshape(-1)


def masked_aggregate(values: torch.Tensor, mask: torch.Tensor, loss_agg: str = "token-mean") -> torch.Tensor:
    """Aggregate a per-token ``(B, T)`` quantity over ``mask`` (see module docstring).

    Empty masks contribute zero (denominators are clamped to 1), so an all-padding row or batch
    gives a finite 0 instead of NaN. Values at padded tokens never reach the result, even NaN or inf
    ones, and receive zero gradient.
    """
    check_choice("loss_agg", loss_agg, LOSS_AGGS)
    m = mask.to(values.dtype)
    # zero the padding before weighting: NaN/inf at a padded token must not reach the sum (NaN * 0 = NaN)
    masked = values.masked_fill(m == 0, 0.0) * m
    if loss_agg == "token-mean":
        return masked.sum() / m.sum().clamp(min=1.0)
    per_row = masked.sum(-1)
    if loss_agg == "seq-mean-token-mean":
        per_row = per_row / m.sum(-1).clamp(min=1.0)
    return per_row.mean()


def kl_penalty(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k3", clamp: float | None = None
) -> torch.Tensor:
    """Per-token estimate of ``KL(pi_theta || pi_ref)`` from sampled-token log-probs.

    Parameters
    ----------
    logprobs, ref_logprobs : Tensor ``(B, T)``
    estimator : {"k1", "k2", "k3"}
        ``k1 = logp - ref`` (unbiased, high variance, can be negative); ``k2 = (logp - ref)^2 / 2``;
        ``k3 = exp(ref - logp) - (ref - logp) - 1`` (unbiased, non-negative; GRPO's choice).
    clamp : float, optional
        Clamp the estimate to ``[-clamp, clamp]`` (verl uses 10 for k3).
    """
    check_choice("estimator", estimator, KL_ESTIMATORS)
    d = ref_logprobs.float() - logprobs.float()
    if estimator == "k1":
        kl = -d
    elif estimator == "k2":
        kl = 0.5 * d.square()
    else:
        kl = torch.exp(d) - d - 1.0
    if clamp is not None:
        kl = kl.clamp(-clamp, clamp)
    return kl


def clipped_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    eps_low: float | torch.Tensor = 0.2,
    eps_high: float | torch.Tensor = 0.2,
    dual_clip_c: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token PPO clipped surrogate loss (to be minimised).

    Parameters
    ----------
    logprobs : Tensor ``(B, T)``
        Current policy log-probs (carry the gradient).
    old_logprobs : Tensor ``(B, T)``
        Behaviour policy log-probs (treated as constants).
    advantages : Tensor ``(B, T)`` or ``(B,)``
        Per-token or per-response advantages.
    eps_low, eps_high : float or Tensor broadcastable to ``(B, T)``
        Clip range ``[1 - eps_low, 1 + eps_high]``; tensors give per-token ranges (Archer).
    dual_clip_c : float, optional
        For ``A < 0`` cap the loss at ``-A * c`` (dual-clip PPO, Ye et al. 2020); ``c > 1``.

    Returns
    -------
    (loss, ratio, clipped)
        ``loss`` ``(B, T)``; ``ratio`` ``(B, T)`` detached; ``clipped`` ``(B, T)`` bool: tokens whose
        gradient is cut by the clip (clip branch active: ``A > 0, rho > 1 + eps_high`` or
        ``A < 0, rho < 1 - eps_low``) or by the dual clip.
    """
    if advantages.ndim == 1:
        advantages = advantages.unsqueeze(1)
    adv = advantages.float()
    log_ratio = (logprobs.float() - old_logprobs.float().detach()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    low = 1.0 - torch.as_tensor(eps_low, dtype=ratio.dtype)
    high = 1.0 + torch.as_tensor(eps_high, dtype=ratio.dtype)
    clipped_ratio = torch.minimum(torch.maximum(ratio, low), high)
    loss1 = -adv * ratio
    loss2 = -adv * clipped_ratio
    loss = torch.maximum(loss1, loss2)
    r = ratio.detach()
    clipped = ((adv > 0) & (r > high)) | ((adv < 0) & (r < low))
    if dual_clip_c is not None:
        check_float("dual_clip_c", dual_clip_c, 1.0, low_open=True)
        cap = -adv * dual_clip_c
        dual = (adv < 0) & (loss > cap)
        loss = torch.where(adv < 0, torch.minimum(loss, cap), loss)
        clipped = clipped | dual
    return loss, r, clipped


def check_finite_tokens(mask: torch.Tensor, **tensors: torch.Tensor | None) -> None:
    """Raise ``ValueError`` naming the tensor if it holds NaN/inf at a valid (``mask``) token.

    Entries at masked-out tokens (padding) are ignored: they never reach the loss.
    """
    for name, t in tensors.items():
        if t is not None and not bool(torch.isfinite(t[mask]).all()):
            raise ValueError(f"{name} contains NaN or inf at valid (response_mask) tokens")


def check_policy_inputs(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    ref_logprobs: torch.Tensor | None = None,
    **extra: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Check the token inputs of a policy loss; return ``(advantages as (B, T), response_mask as bool)``.

    ``(B,)`` advantages must have one row per ``logprobs`` row and are broadcast over tokens. Every
    tensor (``extra`` ones too, e.g. ``entropy=``) must be ``(B, T)`` on one device
    (:func:`check_token_tensors`) and finite at valid tokens (:func:`check_finite_tokens`).
    """
    adv = advantages
    if isinstance(adv, torch.Tensor) and adv.ndim == 1:
        if adv.shape[0] != logprobs.shape[0]:
            raise ValueError(f"advantages has {adv.shape[0]} rows but logprobs has {logprobs.shape[0]}")
        adv = adv.unsqueeze(1).expand_as(logprobs)
    values = dict(logprobs=logprobs, old_logprobs=old_logprobs, advantages=adv)
    check_token_tensors(**values, response_mask=response_mask, **extra, ref_logprobs=ref_logprobs)
    mask = as_mask("response_mask", response_mask)
    check_finite_tokens(mask, **values, **extra, ref_logprobs=ref_logprobs)
    return adv, mask


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    ref_logprobs: torch.Tensor | None = None,
    beta: float = 0.0,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    loss_agg: str = "token-mean",
    kl_estimator: str = "k3",
    dual_clip_c: float | None = None,
    token_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Generic clipped-surrogate + KL policy loss; GRPO and DAPO are presets of it.

    Per token ``ℓ = clipped surrogate + beta * KL``, then aggregated with ``loss_agg`` over
    ``response_mask`` (as TRL does: the KL is added per token before aggregation).

    Parameters
    ----------
    logprobs, old_logprobs, response_mask : Tensor ``(B, T)``
    advantages : Tensor ``(B,)`` or ``(B, T)``
    ref_logprobs : Tensor ``(B, T)``, optional
        Needed when ``beta > 0``.
    beta : float
        KL coefficient (>= 0).
    eps_low, eps_high : float
        Clip range.
    loss_agg : str
        One of :data:`LOSS_AGGS`.
    kl_estimator : str
        One of :data:`KL_ESTIMATORS`.
    dual_clip_c : float, optional
        Dual-clip constant for negative advantages.
    token_mask : Tensor ``(B, T)``, optional
        Multiplies the policy-gradient term only (e.g. a high-entropy mask, as TRL's
        ``top_entropy_quantile``); the normaliser stays ``response_mask``.

    Returns
    -------
    (loss, metrics)
        Scalar loss; ``metrics`` with ``clipfrac``, ``approx_kl`` (mean k1 old->new), ``kl``
        (mean estimator vs reference, when given), ``ratio_mean``.
    """
    check_float("beta", beta, 0.0)
    check_float("eps_low", eps_low, 0.0, 1.0)
    check_float("eps_high", eps_high, 0.0)
    check_choice("loss_agg", loss_agg, LOSS_AGGS)
    if beta > 0 and ref_logprobs is None:
        raise ValueError("ref_logprobs is required when beta > 0")
    adv, mask = check_policy_inputs(logprobs, old_logprobs, advantages, response_mask, ref_logprobs)
    pg, ratio, clipped = clipped_surrogate(logprobs, old_logprobs, adv, eps_low, eps_high, dual_clip_c)
    if token_mask is not None:
        check_token_tensors(logprobs=logprobs, token_mask=token_mask)
        pg = pg * as_mask("token_mask", token_mask).float()
    per_token = pg
    kl_mean = None
    if ref_logprobs is not None:
        kl = kl_penalty(logprobs, ref_logprobs, kl_estimator)
        kl_mean = float(masked_aggregate(kl.detach(), mask))
        if beta > 0:
            per_token = per_token + beta * kl
    loss = masked_aggregate(per_token, mask, loss_agg)
    m = mask.float()
    metrics = {
        "clipfrac": float(masked_aggregate(clipped.float(), mask)),
        "approx_kl": float(masked_aggregate((old_logprobs.float() - logprobs.float()).detach(), mask)),
        "ratio_mean": float(masked_aggregate(ratio, mask)),
        "tokens": float(m.sum()),
    }
    if kl_mean is not None:
        metrics["kl"] = kl_mean
    return loss, metrics


def grpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    ref_logprobs: torch.Tensor | None = None,
    beta: float = 0.0,
    eps: float = 0.2,
    loss_agg: str = "seq-mean-token-mean",
    kl_estimator: str = "k3",
) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO loss (Shao et al. 2024): symmetric clip ``eps``, k3 KL with weight ``beta``, sequence-mean
    of token-means (TRL ``loss_type="grpo"``). See :func:`policy_loss`."""
    return policy_loss(
        logprobs,
        old_logprobs,
        advantages,
        response_mask,
        ref_logprobs=ref_logprobs,
        beta=beta,
        eps_low=eps,
        eps_high=eps,
        loss_agg=loss_agg,
        kl_estimator=kl_estimator,
    )


def dapo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    ref_logprobs: torch.Tensor | None = None,
    beta: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DAPO loss (Yu et al. 2025, arXiv 2503.14476): clip-higher ``(0.2, 0.28)``, no KL by default,
    token-level mean over the batch (TRL ``loss_type="dapo"`` on one process). Dynamic sampling
    and overlong shaping act on the data, not the loss (see :func:`dynamic_sampling_mask`)."""
    return policy_loss(
        logprobs,
        old_logprobs,
        advantages,
        response_mask,
        ref_logprobs=ref_logprobs,
        beta=beta,
        eps_low=eps_low,
        eps_high=eps_high,
        loss_agg="token-mean",
    )


def dynamic_sampling_mask(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """DAPO dynamic sampling: ``(B,)`` bool, False for every row of a group whose rewards are all equal
    (such groups have zero advantage and carry no gradient)."""
    check_int("group_size", group_size, low=1)
    grouped = rewards.view(-1, group_size)
    keep = grouped.max(1).values != grouped.min(1).values
    return keep.repeat_interleave(group_size)


__all__ = [
    "LOSS_AGGS",
    "KL_ESTIMATORS",
    "as_mask",
    "check_token_tensors",
    "check_policy_inputs",
    "group_advantages",
    "masked_aggregate",
    "kl_penalty",
    "clipped_surrogate",
    "policy_loss",
    "grpo_loss",
    "dapo_loss",
    "dynamic_sampling_mask",
]

r"""Archer: entropy-aware RLVR with dual-token constraints.

Paper
-----
*Stabilizing Knowledge, Promoting Reasoning: Dual-Token Constraints for RLVR* (Archer, arXiv
2507.15778); seed file ``000_f8b4140a0e3b5d84.txt``, paragraph beginning "Reinforcement Learning with
Verifiable Rewards (RLVR)". Public: the paper and the reference code (github.com/wizard-III/ArcherCodeR),
which fix the per-response quantile split, the clip ranges, the KL coefficients and the dual clip.
Inferred (spec ``shared/specs/archer.md``): the ``entropy_source="old"`` option for trainers that do
not recompute logits, and the optional entropy bonus.

Archer replaces the token-level policy loss of GRPO/DAPO. Inside each response it splits tokens by
policy entropy at a *per-response* quantile, then applies a wide clip range and (almost) no KL to
the high-entropy "reasoning" tokens and the usual tight clip plus a KL penalty to the low-entropy
"knowledge" tokens. All tokens are updated in the same backward pass.

Math
----
``B`` responses, padded length ``T``, vocabulary ``V``; :math:`M` the response mask, :math:`A` the
advantages, :math:`\mathrm{agg}(x, S)` the configured aggregation of :math:`x` over the tokens in :math:`S`.

1. Entropy (detached) and the per-response threshold (``q = 0.8``, linear interpolation):

.. math::

    H_{i,t} = -\sum_{v=1}^{V} p_\theta(v \mid q, o_{<t}) \log p_\theta(v \mid q, o_{<t}), \qquad
    \tau_i = \mathrm{quantile}_q \{H_{i,t} : M_{i,t}\},

.. math::

    R = M \wedge (H > \tau), \qquad K = M \wedge (H \le \tau).

2. Ratio and per-token clip range :math:`(\epsilon^-, \epsilon^+) = (0.5, 0.5)` on :math:`R` and
   :math:`(0.2, 0.2)` on :math:`K`; for :math:`A < 0` the dual clip with :math:`c = 10`:

.. math::

    \rho = \exp\big(\mathrm{clamp}(\log\pi_\theta - \log\pi_{old}, -20, 20)\big), \qquad
    \ell^{pg} = \max\big(-A\rho,\ -A\,\mathrm{clip}(\rho, 1-\epsilon^-, 1+\epsilon^+)\big),

.. math::

    \ell^{pg} \leftarrow \min(\ell^{pg}, -A c) \quad \text{where } A < 0.

3. KL (k3 by default) against the reference policy, aggregated per class, with
   :math:`\beta_K = 10^{-3}` and :math:`\beta_R = 0`, and the total loss (entropy bonus
   :math:`\lambda_H = 0` by default; since :math:`H` is detached it is reported, not optimised, unless a
   trainer passes differentiable entropies):

.. math::

    L_{KL} = \beta_K\,\mathrm{agg}(kl, K) + \beta_R\,\mathrm{agg}(kl, R), \qquad
    L = \mathrm{agg}(\ell^{pg}, M) + L_{KL} - \lambda_H\,\mathrm{agg}(H, M).

Baselines as presets of the same loss (:meth:`ArcherConfig.grpo`, :meth:`ArcherConfig.dapo`) and the
"train only high-entropy tokens" isolation baseline (:func:`high_entropy_only_loss`, arXiv
2506.01939).

Shapes
------
- :func:`entropy_from_logits`: ``logits [B, T, V]`` (any leading shape) -> ``[B, T]``.
- :func:`classify_tokens`: ``entropy [B, T]``, ``response_mask [B, T]`` -> reasoning and knowledge
  masks ``[B, T]`` (bool).
- :func:`archer_policy_loss`, :func:`high_entropy_only_loss`: ``logprobs``, ``old_logprobs``,
  ``response_mask``, ``entropy``, ``ref_logprobs`` ``[B, T]``; ``advantages`` ``[B, T]`` or ``[B]``
  -> scalar loss and a metrics dict.
- :func:`verl_compute_policy_loss`: the same with ``high_entropy_mask [B, T]`` in place of ``entropy``.
- :func:`grpo_advantages`: ``rewards [B]`` (``B`` a multiple of ``group_size``) -> ``[B]``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

import torch

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.common.precision import at_least_float32
from neurips26.rl.losses import (
    KL_ESTIMATORS,
    LOSS_AGGS,
    as_mask,
    check_policy_inputs,
    check_token_tensors,
    clipped_surrogate,
    group_advantages,
    kl_penalty,
    masked_aggregate,
)

KL_CLAMP = 10.0
KL_AGGS = ("per-class", "union")


@dataclass
class ArcherConfig:
    """Hyperparameters of the Archer loss (defaults = the paper's reference setting).

    Parameters
    ----------
    quantile : float
        Per-response entropy quantile ``q`` in (0, 1); tokens above it are "reasoning" (~``1-q``).
    clip_knowledge : (float, float)
        ``(eps_low, eps_high)`` for low-entropy (knowledge) tokens.
    clip_reasoning : (float, float)
        ``(eps_low, eps_high)`` for high-entropy (reasoning) tokens.
    kl_coef_knowledge, kl_coef_reasoning : float
        KL weights per class (>= 0).
    kl_estimator : {"k1", "k2", "k3"}
        Per-token KL estimator (clamped to [-10, 10] as in the reference code).
    dual_clip_c : float or None
        Dual-clip constant for negative advantages (> 1); None disables.
    loss_agg : {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum"}
        Aggregation of the policy-gradient term (and of each KL term over its class).
    entropy_source : {"current", "old"}
        Classify by the entropy of the current forward pass or by rollout-time entropies.
    entropy_bonus : float
        Coefficient of an optional entropy bonus (>= 0).
    kl_agg : {"per-class", "union"}
        ``"per-class"`` (reference): each KL term is a mean over its own class. ``"union"``: both
        terms are normalised by the whole response mask, so equal coefficients reduce exactly to a
        uniform KL penalty (used by the GRPO preset).
    split : bool
        False disables the entropy split (every token is treated as knowledge).
    """

    quantile: float = 0.8
    clip_knowledge: tuple[float, float] = (0.2, 0.2)
    clip_reasoning: tuple[float, float] = (0.5, 0.5)
    kl_coef_knowledge: float = 1e-3
    kl_coef_reasoning: float = 0.0
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    dual_clip_c: float | None = 10.0
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    entropy_source: Literal["current", "old"] = "current"
    entropy_bonus: float = 0.0
    kl_agg: Literal["per-class", "union"] = "per-class"
    split: bool = True

    def __post_init__(self) -> None:
        check_float("quantile", self.quantile, 0.0, 1.0, low_open=True, high_open=True)
        for name in ("clip_knowledge", "clip_reasoning"):
            value = getattr(self, name)
            if not isinstance(value, (tuple, list)) or len(value) != 2:
                raise ValueError(f"{name} must be a pair (eps_low, eps_high), got {value!r}")
            low, high = (check_float(f"{name}[{i}]", v, 0.0) for i, v in enumerate(value))
            if low >= 1.0:
                raise ValueError(
                    f"{name}[0] (eps_low) must be < 1 so that the lower bound stays positive, got {low}"
                )
            setattr(self, name, (low, high))
        check_float("kl_coef_knowledge", self.kl_coef_knowledge, 0.0)
        check_float("kl_coef_reasoning", self.kl_coef_reasoning, 0.0)
        check_choice("kl_estimator", self.kl_estimator, KL_ESTIMATORS)
        if self.dual_clip_c is not None:
            check_float("dual_clip_c", self.dual_clip_c, 1.0, low_open=True)
        check_choice("loss_agg", self.loss_agg, LOSS_AGGS)
        check_choice("entropy_source", self.entropy_source, ("current", "old"))
        check_float("entropy_bonus", self.entropy_bonus, 0.0)
        check_choice("kl_agg", self.kl_agg, KL_AGGS)
        if not isinstance(self.split, bool):
            raise TypeError(f"split must be a bool, got {type(self.split).__name__}")

    @property
    def uses_kl(self) -> bool:
        return self.kl_coef_knowledge > 0 or (self.split and self.kl_coef_reasoning > 0)

    @classmethod
    def grpo(cls, **overrides: Any) -> ArcherConfig:
        """GRPO baseline: one clip range (0.2, 0.2) and one KL weight 1e-3 on every token."""
        base = dict(
            clip_knowledge=(0.2, 0.2),
            clip_reasoning=(0.2, 0.2),
            kl_coef_knowledge=1e-3,
            kl_coef_reasoning=1e-3,
            kl_agg="union",
            split=False,
        )
        return cls(**{**base, **overrides})

    @classmethod
    def dapo(cls, **overrides: Any) -> ArcherConfig:
        """DAPO-lite baseline: clip-higher (0.2, 0.28) on every token, no KL, token-mean."""
        base = dict(
            clip_knowledge=(0.2, 0.28),
            clip_reasoning=(0.2, 0.28),
            kl_coef_knowledge=0.0,
            kl_coef_reasoning=0.0,
            kl_agg="union",
            split=False,
            dual_clip_c=None,
        )
        return cls(**{**base, **overrides})

    def with_(self, **changes: Any) -> ArcherConfig:
        """A validated copy with ``changes`` applied."""
        return replace(self, **changes)


def entropy_from_logits(logits: torch.Tensor, chunk_size: int | None = None) -> torch.Tensor:
    """Shannon entropy (nats) of ``softmax(logits)`` over the last axis, without gradient.

    Parameters
    ----------
    logits : Tensor ``(B, T, V)`` (any leading shape works)
        Unnormalised scores; ``-inf`` entries (banned tokens) are handled (``0 log 0 = 0``).
    chunk_size : int, optional
        Process this many rows of the first axis at a time to bound the ``(chunk, T, V)`` fp32
        temporaries (long responses, big vocabularies).

    Returns
    -------
    Tensor ``(B, T)`` float32, detached.
    """
    if not isinstance(logits, torch.Tensor) or logits.ndim < 1:
        raise ValueError("logits must be a tensor with a vocabulary axis")
    if chunk_size is not None:
        check_int("chunk_size", chunk_size, low=1)
    with torch.no_grad():
        flat = logits.detach()
        step = chunk_size or max(1, flat.shape[0])
        parts = []
        for start in range(0, flat.shape[0], step):
            probs = torch.softmax(flat[start : start + step].float(), dim=-1)
            parts.append(torch.special.entr(probs).sum(-1))
        return torch.cat(parts, 0) if parts else flat.new_zeros(flat.shape[:-1], dtype=torch.float32)


def classify_tokens(
    entropy: torch.Tensor, response_mask: torch.Tensor, quantile: float = 0.8
) -> tuple[torch.Tensor, torch.Tensor]:
    """Split response tokens into reasoning (high-entropy) and knowledge (low-entropy) tokens.

    The threshold is the ``quantile`` of each response's own valid-token entropies (NaN-aware,
    linear interpolation); reasoning = ``entropy > threshold``. A response with constant entropy
    therefore has no reasoning tokens; padding is never classified.

    Parameters
    ----------
    entropy : Tensor ``(B, T)``
        Token entropies (any float dtype; used without gradient).
    response_mask : Tensor ``(B, T)``
        Bool (or 0/1) valid-token mask.
    quantile : float
        In (0, 1).

    Returns
    -------
    (reasoning_mask, knowledge_mask)
        Both ``(B, T)`` bool, disjoint, with union equal to ``response_mask``.
    """
    check_float("quantile", quantile, 0.0, 1.0, low_open=True, high_open=True)
    check_token_tensors(entropy=entropy, response_mask=response_mask)
    mask = as_mask("response_mask", response_mask)
    h = entropy.detach().float()
    masked = torch.where(mask, h, torch.full_like(h, float("nan")))
    tau = torch.nanquantile(masked, quantile, dim=1, keepdim=True, interpolation="linear")
    reasoning = mask & (h > tau)  # NaN threshold (empty row) compares False
    knowledge = mask & ~reasoning
    return reasoning, knowledge


def _class_kl(
    kl: torch.Tensor, cls_mask: torch.Tensor, mask: torch.Tensor, config: ArcherConfig
) -> torch.Tensor:
    if config.kl_agg == "union":
        return masked_aggregate(kl * cls_mask.float(), mask, config.loss_agg)
    return masked_aggregate(kl, cls_mask, config.loss_agg)


def _loss_metrics(
    losses: tuple[torch.Tensor, torch.Tensor],
    clips: tuple[torch.Tensor, torch.Tensor],
    split: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    kl: torch.Tensor | None,
    ratio: torch.Tensor,
    h: torch.Tensor,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
) -> dict[str, float]:
    """The metrics of :func:`archer_policy_loss` and :func:`high_entropy_only_loss`.

    ``losses`` is ``(pg_loss, kl_loss)``; ``clips`` is ``(clipped, counted)``: the bool ``(B, T)``
    clipped tokens and the subset of them that ``clipfrac`` counts (over the valid tokens);
    ``split`` is ``(reasoning, knowledge, response mask)``; ``kl`` the per-token KL estimate to the
    reference (``None``: no reference, class KLs NaN); ``h`` the token entropies.
    """
    (pg_loss, kl_loss), (clipped, counted), (reasoning, knowledge, mask) = losses, clips, split
    kl_r = kl_k = float("nan")
    if kl is not None:
        kl_r = float(masked_aggregate(kl.detach(), reasoning)) if reasoning.any() else 0.0
        kl_k = float(masked_aggregate(kl.detach(), knowledge)) if knowledge.any() else 0.0
    n_valid = mask.sum().clamp(min=1)
    return {
        "pg_loss": float(pg_loss.detach()),
        "kl_loss": float(kl_loss.detach()),
        "clipfrac_reasoning": float((clipped & reasoning).sum() / reasoning.sum().clamp(min=1)),
        "clipfrac_knowledge": float((clipped & knowledge).sum() / knowledge.sum().clamp(min=1)),
        "clipfrac": float(counted.sum() / n_valid),
        "kl_reasoning": kl_r,
        "kl_knowledge": kl_k,
        "reasoning_frac": float(reasoning.sum() / n_valid),
        "approx_kl": float(masked_aggregate((old_logprobs.float() - logprobs.float()).detach(), mask)),
        "entropy": float(masked_aggregate(h, mask)),
        "ratio_mean": float(masked_aggregate(ratio, mask)),
    }


def archer_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    entropy: torch.Tensor,
    ref_logprobs: torch.Tensor | None = None,
    config: ArcherConfig | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The Archer token-level policy loss with dual clip ranges and dual KL.

    Parameters
    ----------
    logprobs : Tensor ``(B, T)``
        Current-policy log-probs of the sampled tokens (carry the gradient).
    old_logprobs : Tensor ``(B, T)``
        Behaviour-policy log-probs (constants).
    advantages : Tensor ``(B, T)`` or ``(B,)``
        Advantages (e.g. :func:`grpo_advantages` broadcast over tokens).
    response_mask : Tensor ``(B, T)``
        Bool or 0/1 valid-token mask.
    entropy : Tensor ``(B, T)``
        Token entropies (current forward pass or rollout time, see ``config.entropy_source``);
        detached internally.
    ref_logprobs : Tensor ``(B, T)``, optional
        Reference-policy log-probs; required when a KL coefficient is positive.
    config : ArcherConfig, optional
        Defaults to ``ArcherConfig()``.

    Returns
    -------
    (loss, metrics)
        Scalar loss; ``metrics``: ``pg_loss``, ``kl_loss``, ``clipfrac_reasoning``,
        ``clipfrac_knowledge``, ``kl_reasoning``, ``kl_knowledge`` (mean KL estimate per class),
        ``reasoning_frac``, ``approx_kl`` (mean ``old - new`` log-prob), ``entropy``.

    Notes
    -----
    bf16/fp16 inputs are upcast to fp32. An all-padding row contributes zero.

    Data parallelism needs no extra communication (the entropy quantile is per response). With
    equal rows per rank, ``seq-mean-*`` aggregations decompose: DDP's gradient average equals the
    single-process gradient. For ``token-mean`` scale each rank's loss by
    ``world_size * local_tokens / global_tokens`` (normalising by the global token count, as verl
    does; KL terms off, since their class denominators stay local).
    """
    config = ArcherConfig() if config is None else config
    if not isinstance(config, ArcherConfig):
        raise TypeError(f"config must be an ArcherConfig, got {type(config).__name__}")
    adv, mask = check_policy_inputs(
        logprobs, old_logprobs, advantages, response_mask, ref_logprobs, entropy=entropy
    )
    if config.uses_kl and ref_logprobs is None:
        raise ValueError(
            "ref_logprobs is None but a KL coefficient is positive; pass reference log-probs or set "
            "kl_coef_knowledge = kl_coef_reasoning = 0"
        )
    logprobs = at_least_float32(logprobs)  # float64 input stays float64
    old_logprobs = at_least_float32(old_logprobs).detach()
    adv = at_least_float32(adv).detach()
    h = at_least_float32(entropy.detach())

    if config.split:
        reasoning, knowledge = classify_tokens(h, mask, config.quantile)
    else:
        reasoning, knowledge = torch.zeros_like(mask), mask.clone()

    (k_low, k_high), (r_low, r_high) = config.clip_knowledge, config.clip_reasoning
    eps_low = torch.where(reasoning, torch.tensor(r_low), torch.tensor(k_low))
    eps_high = torch.where(reasoning, torch.tensor(r_high), torch.tensor(k_high))
    pg, ratio, clipped = clipped_surrogate(logprobs, old_logprobs, adv, eps_low, eps_high, config.dual_clip_c)
    pg_loss = masked_aggregate(pg, mask, config.loss_agg)

    kl_loss, kl = logprobs.new_zeros(()), None
    if ref_logprobs is not None:
        kl = kl_penalty(logprobs, ref_logprobs.float().detach(), config.kl_estimator, clamp=KL_CLAMP)
        if config.kl_coef_knowledge > 0:
            kl_loss = kl_loss + config.kl_coef_knowledge * _class_kl(kl, knowledge, mask, config)
        if config.kl_coef_reasoning > 0 and config.split:
            kl_loss = kl_loss + config.kl_coef_reasoning * _class_kl(kl, reasoning, mask, config)

    loss = pg_loss + kl_loss
    if config.entropy_bonus > 0:
        loss = loss - config.entropy_bonus * masked_aggregate(entropy.float(), mask, config.loss_agg)
    split, counted = (reasoning, knowledge, mask), clipped & mask
    metrics = _loss_metrics(
        (pg_loss, kl_loss), (clipped, counted), split, kl, ratio, h, logprobs, old_logprobs
    )
    metrics.update(_regime_metrics(ratio, adv, h, reasoning, knowledge, config))
    return loss, metrics


def _regime_metrics(
    ratio: torch.Tensor,
    adv: torch.Tensor,
    h: torch.Tensor,
    reasoning: torch.Tensor,
    knowledge: torch.Tensor,
    config: ArcherConfig,
) -> dict[str, float]:
    """Whether the dual constraints act: entropy per class and the widened-clip fraction.

    ``clip_widened_frac``: the fraction of reasoning tokens whose surrogate keeps a gradient under the
    reasoning clip range but would be clipped (zero gradient) under the knowledge range, i.e. the
    tokens on which Archer's wider range changes the update (advantage > 0 with
    ``1 + eps_k+ < rho <= 1 + eps_r+``, or advantage < 0 with ``1 - eps_r- <= rho < 1 - eps_k-``).
    """
    (k_low, k_high), (r_low, r_high) = config.clip_knowledge, config.clip_reasoning
    rho = ratio.detach()
    widened = ((adv > 0) & (rho > 1 + k_high) & (rho <= 1 + r_high)) | (
        (adv < 0) & (rho < 1 - k_low) & (rho >= 1 - r_low)
    )
    n_r, n_k = reasoning.sum().clamp(min=1), knowledge.sum().clamp(min=1)
    return {
        "clip_widened_frac": float((widened & reasoning).sum() / n_r),
        "entropy_reasoning": float((h * reasoning).sum() / n_r),
        "entropy_knowledge": float((h * knowledge).sum() / n_k),
    }


def high_entropy_only_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    entropy: torch.Tensor,
    ref_logprobs: torch.Tensor | None = None,
    *,
    quantile: float = 0.8,
    clip: tuple[float, float] = (0.2, 0.28),
    kl_coef: float = 0.0,
    loss_agg: str = "token-mean",
    per_response: bool = True,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Isolation baseline: policy gradient only on high-entropy tokens (Wang et al., arXiv 2506.01939).

    The clipped surrogate (DAPO clip-higher by default) is multiplied by the reasoning mask, so
    knowledge tokens receive no policy gradient; normalisation still counts every valid token (as
    TRL's ``top_entropy_quantile``). ``per_response=True`` uses Archer's per-response quantile
    (same token split as Archer, so the comparison isolates "mask" versus "constrain");
    False uses one batch-level quantile as the original paper and TRL do.

    Returns the same metric keys as :func:`archer_policy_loss`.
    """
    check_float("quantile", quantile, 0.0, 1.0, low_open=True, high_open=True)
    check_float("kl_coef", kl_coef, 0.0)
    adv, mask = check_policy_inputs(
        logprobs, old_logprobs, advantages, response_mask, ref_logprobs, entropy=entropy
    )
    if kl_coef > 0 and ref_logprobs is None:
        raise ValueError("ref_logprobs is required when kl_coef > 0")
    h = entropy.detach().float()
    if per_response:
        reasoning, knowledge = classify_tokens(h, mask, quantile)
    else:
        valid = h[mask]
        tau = torch.quantile(valid, quantile) if valid.numel() else torch.tensor(float("inf"))
        reasoning = mask & (h > tau)
        knowledge = mask & ~reasoning
    pg, ratio, clipped = clipped_surrogate(
        logprobs.float(), old_logprobs.float(), adv.float().detach(), *clip
    )
    pg_loss = masked_aggregate(pg * reasoning.float(), mask, loss_agg)
    kl_loss, kl = logprobs.new_zeros((), dtype=torch.float32), None
    if ref_logprobs is not None:
        kl = kl_penalty(logprobs.float(), ref_logprobs.float(), "k3", clamp=KL_CLAMP)
        if kl_coef > 0:
            kl_loss = kl_coef * masked_aggregate(kl, mask, loss_agg)
    # clipfrac counts only the reasoning tokens: the others receive no policy gradient here
    split, counted = (reasoning, knowledge, mask), clipped & reasoning
    metrics = _loss_metrics(
        (pg_loss, kl_loss), (clipped, counted), split, kl, ratio, h, logprobs, old_logprobs
    )
    return pg_loss + kl_loss, metrics


def grpo_advantages(
    rewards: torch.Tensor, group_size: int, norm_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """``(B,)`` group-normalised advantages (see :func:`neurips26.rl.losses.group_advantages`)."""
    return group_advantages(rewards, group_size, norm_std=norm_std, eps=eps)


def verl_compute_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    high_entropy_mask: torch.Tensor,
    ref_log_prob: torch.Tensor | None = None,
    config: ArcherConfig | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl-style adapter: verl's ``compute_policy_loss`` argument order plus a precomputed
    high-entropy mask (as Archer's patched ``dp_actor`` passes it). Returns ``(loss, metrics)``.

    The mask replaces the internal classification: reasoning = ``high_entropy_mask & response_mask``.
    """
    config = ArcherConfig() if config is None else config
    check_token_tensors(
        log_prob=log_prob,
        old_log_prob=old_log_prob,
        high_entropy_mask=high_entropy_mask,
        response_mask=response_mask,
        ref_log_prob=ref_log_prob,
    )
    reasoning = as_mask("high_entropy_mask", high_entropy_mask) & as_mask("response_mask", response_mask)
    return _loss_with_masks(
        log_prob, old_log_prob, advantages, response_mask, reasoning, ref_log_prob, config
    )


def _loss_with_masks(logprobs, old_logprobs, advantages, response_mask, reasoning, ref_logprobs, config):
    mask = as_mask("response_mask", response_mask)
    knowledge = mask & ~reasoning
    adv = advantages.unsqueeze(1).expand_as(logprobs) if advantages.ndim == 1 else advantages
    if config.uses_kl and ref_logprobs is None:
        raise ValueError("ref_logprobs is None but a KL coefficient is positive")
    (k_low, k_high), (r_low, r_high) = config.clip_knowledge, config.clip_reasoning
    eps_low = torch.where(reasoning, torch.tensor(r_low), torch.tensor(k_low))
    eps_high = torch.where(reasoning, torch.tensor(r_high), torch.tensor(k_high))
    pg, _, clipped = clipped_surrogate(
        logprobs.float(), old_logprobs.float(), adv.float(), eps_low, eps_high, config.dual_clip_c
    )
    loss = masked_aggregate(pg, mask, config.loss_agg)
    if ref_logprobs is not None:
        kl = kl_penalty(logprobs.float(), ref_logprobs.float(), config.kl_estimator, clamp=KL_CLAMP)
        if config.kl_coef_knowledge > 0:
            loss = loss + config.kl_coef_knowledge * _class_kl(kl, knowledge, mask, config)
        if config.kl_coef_reasoning > 0:
            loss = loss + config.kl_coef_reasoning * _class_kl(kl, reasoning, mask, config)
    metrics = {
        "clipfrac_reasoning": float((clipped & reasoning).sum() / reasoning.sum().clamp(min=1)),
        "clipfrac_knowledge": float((clipped & knowledge).sum() / knowledge.sum().clamp(min=1)),
        "reasoning_frac": float(reasoning.sum() / mask.sum().clamp(min=1)),
    }
    return loss, metrics


def _make_trainer_class():
    from neurips26.common.optional import require

    GRPOTrainer = require("trl", "llm").GRPOTrainer

    class ArcherGRPOTrainer(GRPOTrainer):
        """``trl.GRPOTrainer`` whose policy loss is :func:`archer_policy_loss`.

        Use exactly like ``GRPOTrainer``, plus ``archer_config=ArcherConfig(...)``. Generation,
        rewards, group advantages, reference model and PPO iterations (``num_iterations``) are
        TRL's; only ``_compute_loss`` changes. When the Archer config needs a KL term and
        ``args.beta == 0``, ``args.beta`` is set to ``max(kl_coef_knowledge, kl_coef_reasoning)`` so
        that TRL builds the reference model and computes reference log-probs; the value of
        ``beta`` itself is not used by the loss (the Archer coefficients are).

        ``policy_loss="trl"`` keeps TRL's own loss (``args.loss_type``, ``args.epsilon``,
        ``args.epsilon_high``, ``args.beta``, ``args.top_entropy_quantile``): the GRPO/DAPO baselines
        then run through the same class and loop as Archer, differing only in the loss.

        Parameters
        ----------
        *args, **kwargs
            As ``trl.GRPOTrainer``.
        archer_config : ArcherConfig, optional
            Defaults to ``ArcherConfig()`` (ignored with ``policy_loss="trl"``).
        policy_loss : {"archer", "trl"}
            Which token-level loss ``_compute_loss`` uses.

        Attributes
        ----------
        loss_calls : int
            Number of ``_compute_loss`` calls (a trace that the loss ran in the loop).
        """

        def __init__(
            self,
            *args: Any,
            archer_config: ArcherConfig | None = None,
            policy_loss: Literal["archer", "trl"] = "archer",
            **kwargs: Any,
        ) -> None:
            check_choice("policy_loss", policy_loss, ("archer", "trl"))
            self.policy_loss = policy_loss
            self.loss_calls = 0
            self.archer_config = ArcherConfig() if archer_config is None else archer_config
            if not isinstance(self.archer_config, ArcherConfig):
                raise TypeError(
                    f"archer_config must be an ArcherConfig, got {type(self.archer_config).__name__}"
                )
            uses_kl = policy_loss == "archer" and self.archer_config.uses_kl
            training_args = kwargs.get("args", args[2] if len(args) > 2 else None)
            if training_args is not None and uses_kl and training_args.beta == 0.0:
                training_args.beta = max(
                    self.archer_config.kl_coef_knowledge, self.archer_config.kl_coef_reasoning
                )
            super().__init__(*args, **kwargs)
            if uses_kl and self.beta == 0.0:
                raise ValueError(
                    "the Archer config uses a KL term but the trainer has beta == 0 (no reference model)"
                )

        def _compute_loss(self, model, inputs):
            self.loss_calls += 1
            if self.policy_loss == "trl":
                return super()._compute_loss(model, inputs)
            prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
            completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
            input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
            attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
            logits_to_keep = completion_ids.size(1)
            mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
            per_token_logps, entropies, _ = self._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, compute_entropy=True
            )
            old = inputs.get("old_per_token_logps")
            old = per_token_logps.detach() if old is None else old
            if self.archer_config.entropy_source == "old" and inputs.get("old_entropies") is not None:
                entropies = inputs["old_entropies"]
            advantages = inputs["advantages"]
            if advantages.dim() == 1:
                advantages = advantages.unsqueeze(1).expand_as(per_token_logps)
            ref = inputs.get("ref_per_token_logps") if self.archer_config.uses_kl else None
            loss, metrics = archer_policy_loss(
                per_token_logps, old, advantages, mask, entropies, ref, self.archer_config
            )
            mode = "train" if self.model.training else "eval"
            if mode == "train":
                loss = loss / self.current_gradient_accumulation_steps
            for key in (
                "clipfrac_reasoning",
                "clipfrac_knowledge",
                "kl_reasoning",
                "kl_knowledge",
                "reasoning_frac",
                "entropy",
                "clip_widened_frac",
                "entropy_reasoning",
                "entropy_knowledge",
            ):
                value = metrics[key]
                if value == value:  # skip NaN (no reference log-probs)
                    self._metrics[mode][f"archer/{key}"].append(value)
            return loss

    ArcherGRPOTrainer.__module__ = __name__
    ArcherGRPOTrainer.__qualname__ = "ArcherGRPOTrainer"
    return ArcherGRPOTrainer


def __getattr__(name: str) -> Any:
    # ArcherGRPOTrainer is built on first access so that importing this module does not import trl.
    if name == "ArcherGRPOTrainer":
        cls = _make_trainer_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ArcherConfig",
    "entropy_from_logits",
    "classify_tokens",
    "archer_policy_loss",
    "high_entropy_only_loss",
    "grpo_advantages",
    "verl_compute_policy_loss",
    "ArcherGRPOTrainer",  # noqa: F822 (built lazily by __getattr__)
]

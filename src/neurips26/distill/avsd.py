"""AVSD: adaptive-view self-distillation from several privileged-information teachers.

Paper: "Adaptive-View Self-Distillation" (AVSD), arXiv 2605.20643; seed file
``004_01f475bc147a144d.txt``, abstract beginning "Self-distillation enables language models to learn".
Reference code: github.com/duykhuongnguyen/AVSD (``src/avsd/common/multiview_distill.py``,
sampled-token gate mode ``"avsd"``).

The student samples a completion ``y``; the same model shown ``M`` privileged views (full
solution, partial solution, final answer) scores every sampled token. With student log-probs
:math:`\\ell_S` and view log-probs :math:`\\ell_m` of the sampled tokens:

.. math::

    \\log q_G = \\tfrac{1}{M}\\sum_m \\ell_m, \\qquad
    \\log q_A = \\operatorname{logsumexp}_m \\ell_m - \\log M, \\qquad
    J = \\max(\\log q_A - \\log q_G, 0),

    \\delta_m = \\ell_m - \\ell_S,\\; c = \\tfrac{1}{M}\\sum_m \\delta_m,\\;
    \\kappa = \\frac{|c|}{\\tfrac1M\\sum_m|\\delta_m| + \\epsilon},\\;
    g = \\kappa\\,\\frac{|c|}{|c| + J + \\epsilon} \\in [0, 1],

    \\log q^* = \\log q_G + g\\,J, \\qquad
    \\mathcal{L} = -\\frac{1}{|\\mathrm{mask}|}\\sum_{b,t} \\operatorname{sg}(\\log q^* - \\ell_S)\\,\\ell_S .

With one view the target is that view's log-prob and the loss is exactly TRL SDFT's
``sampled_token`` (reverse-KL) self-distillation loss (``trl.experimental.sdft.loss_utils``), the
single-view baseline.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from neurips26.common.checks import check_choice, check_float

__all__ = [
    "AVSDConfig",
    "GATES",
    "MODES",
    "VIEW_BUILDERS",
    "avsd_loss",
    "multiview_sampled_target",
    "partial_solution_view",
]

MODES = ("avsd", "consensus", "arithmetic", "single")
GATES = ("avsd", "consistency_exp")
LOSS_AGGS = ("token_mean", "seq_mean")


@dataclass
class AVSDConfig:
    """Hyperparameters of AVSD (reference defaults).

    Parameters
    ----------
    views : tuple of str
        Names of the privileged views, keys of :data:`VIEW_BUILDERS`.
    partial_ratio : float
        Fraction of solution segments kept by the partial view, in (0, 1).
    mode : {"avsd", "consensus", "arithmetic", "single"}
        Target: gated (AVSD), geometric mean, arithmetic mean, or the one view (needs M = 1).
    gate : {"avsd", "consistency_exp"}
        ``"avsd"`` is the reference gate; ``"consistency_exp"`` is ``kappa * exp(-J / (|c| + eps))``
        (inferred form).
    loss_agg : {"token_mean", "seq_mean"}
        Token mean over the batch (reference) or TRL SDFT's mean of per-sequence means.
    eps : float
    """

    views: tuple[str, ...] = ("full_solution", "partial_solution", "answer_only")
    partial_ratio: float = 0.5
    mode: str = "avsd"
    gate: str = "avsd"
    loss_agg: str = "token_mean"
    eps: float = 1e-8

    def __post_init__(self) -> None:
        if not self.views:
            raise ValueError("views must name at least one view")
        check_choice("mode", self.mode, MODES)
        check_choice("gate", self.gate, GATES)
        check_choice("loss_agg", self.loss_agg, LOSS_AGGS)
        check_float("partial_ratio", self.partial_ratio, 0.0, 1.0, low_open=True, high_open=True)
        check_float("eps", self.eps, 0.0, low_open=True)


def _check_inputs(student_logprobs: Any, view_logprobs: Any) -> tuple[int, int, int]:
    if not isinstance(student_logprobs, Tensor) or student_logprobs.dim() != 2:
        raise ValueError("student_logprobs must be a tensor of shape (B, T)")
    if not isinstance(view_logprobs, Tensor) or view_logprobs.dim() != 3:
        shape = tuple(view_logprobs.shape) if isinstance(view_logprobs, Tensor) else type(view_logprobs).__name__
        raise ValueError(f"view_logprobs must be a tensor of shape (B, M, T), got {shape}")
    b, m, t = view_logprobs.shape
    if m == 0:
        raise ValueError("view_logprobs must hold at least one view (M >= 1), got M = 0")
    if student_logprobs.shape != (b, t):
        raise ValueError(
            f"student_logprobs must have shape (B, T) = ({b}, {t}) to match view_logprobs, "
            f"got {tuple(student_logprobs.shape)}"
        )
    return b, m, t


def multiview_sampled_target(
    student_logprobs: Tensor,
    view_logprobs: Tensor,
    mode: str = "avsd",
    gate: str = "avsd",
    eps: float = 1e-8,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token AVSD target log-probability from ``M`` view-teachers (sampled-token mode).

    Parameters
    ----------
    student_logprobs : Tensor
        :math:`\\ell_S` (B, T), log-probs of the sampled tokens under the student (detached inside).
    view_logprobs : Tensor
        :math:`\\ell_m` (B, M, T) under each view-teacher. Non-finite entries are replaced by 0 here;
        :func:`avsd_loss` masks those tokens out.
    mode, gate, eps
        See :class:`AVSDConfig`.

    Returns
    -------
    target : Tensor (B, T)
        :math:`\\log q^*` (detached).
    aux : dict
        ``gate``, ``jensen_gap``, ``log_q_g``, ``log_q_a``, ``consensus_adv``, ``agreement`` (each (B, T)).
    """
    _, m, _ = _check_inputs(student_logprobs, view_logprobs)
    check_choice("mode", mode, MODES)
    check_choice("gate", gate, GATES)
    if mode == "single" and m != 1:
        raise ValueError(f"mode='single' needs exactly one view, got M = {m}")
    ls = student_logprobs.detach()
    lv = view_logprobs.detach()
    lv = torch.where(torch.isfinite(lv), lv, torch.zeros_like(lv))
    log_q_g = lv.mean(1)
    log_q_a = torch.logsumexp(lv, dim=1) - math.log(m)
    jensen = (log_q_a - log_q_g).clamp_min(0.0)
    delta = lv - ls.unsqueeze(1)
    c = delta.mean(1)
    agreement = c.abs() / (delta.abs().mean(1) + eps)
    if gate == "avsd":
        g = agreement * c.abs() / (c.abs() + jensen + eps)
    else:
        g = agreement * torch.exp(-jensen / (c.abs() + eps))
    g = g.clamp(0.0, 1.0)
    if mode == "avsd":
        target = log_q_g + g * jensen
    elif mode == "consensus":
        target = log_q_g
    elif mode == "arithmetic":
        target = log_q_a
    else:
        target = lv[:, 0]
    aux = {"gate": g, "jensen_gap": jensen, "log_q_g": log_q_g, "log_q_a": log_q_a, "consensus_adv": c,
           "agreement": agreement}
    return target, aux


def avsd_loss(
    student_logprobs: Tensor,
    view_logprobs: Tensor,
    completion_mask: Tensor,
    config: AVSDConfig | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Sampled-token AVSD loss :math:`-\\operatorname{mean}_{mask}\\, \\operatorname{sg}(\\log q^* - \\ell_S)\\,\\ell_S`.

    Gradients flow only through ``student_logprobs``. Tokens where any view log-prob is not finite
    are masked out; an all-masked batch gives a zero loss that still backpropagates (zeros).

    Shapes
    ------
    ``student_logprobs``: (B, T); ``view_logprobs``: (B, M, T); ``completion_mask``: (B, T).

    Returns
    -------
    (loss, metrics) with metrics ``gate_mean``, ``jensen_mean``, ``sign_disagreement`` (fraction of
    tokens whose per-view advantages do not all share a sign) and ``tokens``.
    """
    config = AVSDConfig() if config is None else config
    b, m, t = _check_inputs(student_logprobs, view_logprobs)
    if completion_mask.shape != (b, t):
        raise ValueError(f"completion_mask must have shape ({b}, {t}), got {tuple(completion_mask.shape)}")
    mask = completion_mask.bool() & torch.isfinite(view_logprobs).all(1) & torch.isfinite(student_logprobs)
    target, aux = multiview_sampled_target(student_logprobs, view_logprobs, config.mode, config.gate, config.eps)
    ls = torch.where(mask, student_logprobs, torch.zeros_like(student_logprobs))
    adv = (target - ls.detach()) * mask
    per_token = -adv * ls
    if config.loss_agg == "token_mean":
        loss = per_token.sum() / mask.sum().clamp_min(1)
    else:
        loss = (per_token.sum(-1) / mask.sum(-1).clamp_min(1)).mean()
    n = mask.sum().clamp_min(1)
    delta = view_logprobs.detach() - student_logprobs.detach().unsqueeze(1)
    same_sign = (delta > 0).all(1) | (delta < 0).all(1)
    metrics = {
        "gate_mean": float((aux["gate"] * mask).sum() / n),
        "jensen_mean": float((aux["jensen_gap"] * mask).sum() / n),
        "sign_disagreement": float(((~same_sign) & mask).sum() / n),
        "tokens": float(mask.sum()),
    }
    return loss, metrics


def partial_solution_view(solution: str, ratio: float = 0.5, sep: str = ";") -> str:
    """First ``ceil(ratio * n)`` of the ``n`` segments of ``solution`` (never all of them when n > 1).

    The final segment, which carries the answer, is always dropped when there is more than one
    segment, so the partial view never states the final answer.
    """
    ratio = check_float("ratio", ratio, 0.0, 1.0, low_open=True, high_open=True)
    parts = [p for p in solution.split(sep) if p]
    if len(parts) <= 1:
        return ""
    keep = min(len(parts) - 1, max(1, math.ceil(ratio * len(parts))))
    return sep.join(parts[:keep]) + sep + " (incomplete)"


VIEW_BUILDERS: dict[str, Callable[[dict], str]] = {
    "full_solution": lambda ex: ex["solution"],
    "partial_solution": lambda ex: partial_solution_view(ex["solution"], ex.get("partial_ratio", 0.5)),
    "answer_only": lambda ex: str(ex["answer"]),
}
"""Example dict (``solution``, ``answer``) -> privileged text for each named view."""

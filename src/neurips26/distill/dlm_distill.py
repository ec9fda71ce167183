r"""DLM-Distill: data-free distillation of masked diffusion language models.

Paper
-----
Data-free knowledge distillation for discrete (masked) diffusion LMs (title not public); seed file
``000_f8b4140a0e3b5d84.txt``, abstract beginning "Discrete diffusion language models (DLMs) offer".
Only the abstract is public: an off-policy phase on a pool of teacher samples, then on-policy
trajectory distillation on the partially-masked states the student's own reverse process visits,
reweighted by teacher confidence and anchored by a trust region; an alpha-beta divergence replaces
forward KL for small students. Functional forms the abstract does not give are marked (inferred).

Math
----
Masked diffusion background (MDLM, Sahoo et al. 2024, linear schedule :math:`\alpha_t = 1 - t`):
each token of :math:`x \in V^L` is replaced by the mask token with probability ``t`` and the
denoiser (SUBS parameterisation) is trained with

.. math::

    \mathcal{L}_{MDLM} = \mathbb{E}_{t \sim U(\epsilon, 1)}\, \mathbb{E}_{z_t}\Big[
        \frac{1}{t}\sum_{l: z_t^l = m} -\log p_\theta(x^l \mid z_t) \Big] / L .

On-policy objective at a student state ``z`` with masked set :math:`M(z)`:

.. math::

    \mathcal{L}_{traj} = \frac{1}{|M|}\sum_{l \in M} w_l\, D(p_T^l \,\|\, p_S^l), \quad
    w_l = \frac{c_T(l)}{\mathrm{mean}_{l' \in M} c_T(l')}, \qquad
    \mathcal{L}_{on} = \mathcal{L}_{traj} + \lambda_{TR}\,\mathrm{KL}(p_S \,\|\, p_{S}^{anchor})
        + \lambda_{replay}\,\mathcal{L}_{off}.

Shapes
------
- Models: any module mapping ``input_ids`` ``[B, L]`` to logits ``[B, L, V]`` (a HF ``*ForMaskedLM``
  output with ``.logits`` or a plain tensor), e.g. ``transformers.BertForMaskedLM`` built from config;
  :func:`model_logits` returns those ``[B, L, V]`` logits.
- :func:`subs_logits`: ``logits [B, L, V]``, ``z [B, L]`` -> ``[B, L, V]``.
- :func:`mdlm_loss`: ``x0 [B, L]`` clean ids, ``t [B]`` mask rates, ``attention_mask [B, L]`` -> scalar.
- :func:`mdlm_sample` -> ids ``[B, L]`` (and, on request, the trajectory of ``[B, L]`` states).
- :func:`alpha_beta_divergence`: ``teacher_logits``, ``student_logits`` ``[..., V]`` -> ``[...]``.
- :func:`confidence_weights`: ``teacher_logits [B, L, V]``, ``mask [B, L]`` -> ``[B, L]``.
- :func:`masked_divergence`: logits ``[B, L, V]``, ``mask`` and ``weights`` ``[B, L]`` -> scalar.
- :class:`DLMDistiller`: pool and on-policy states ``[B, L]``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from neurips26.common.checks import check_choice, check_float, check_int

__all__ = [
    "DIVERGENCES",
    "DLMDistillConfig",
    "DLMDistiller",
    "alpha_beta_divergence",
    "confidence_weights",
    "masked_divergence",
    "mdlm_loss",
    "mdlm_sample",
    "model_logits",
    "subs_logits",
]

DIVERGENCES = ("fkl", "rkl", "ab")
CONFIDENCES = ("maxprob", "entropy", "none")
_LOG_FLOOR = -60.0  # log-probabilities are floored here in the branches that take log p directly


def _check_ids(name: str, ids: Any) -> Tensor:
    if not isinstance(ids, Tensor):
        raise TypeError(f"{name} must be a torch.LongTensor (B, L), got {type(ids).__name__}")
    if ids.dtype != torch.long:
        raise TypeError(f"{name} must hold int64 token ids, got dtype {ids.dtype}")
    if ids.dim() != 2 or ids.shape[0] == 0:
        raise ValueError(f"{name} must have shape (B >= 1, L), got {tuple(ids.shape)}")
    if ids.is_meta:
        raise ValueError(f"{name} is a meta tensor (no data); pass a materialised tensor")
    return ids


def model_logits(model: Callable, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """Logits (B, L, V) of ``model(input_ids=..)``; accepts HF outputs with ``.logits`` or a tensor."""
    kwargs = {"input_ids": input_ids}
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    out = model(**kwargs)
    logits = out.logits if hasattr(out, "logits") else out
    if not isinstance(logits, Tensor) or logits.dim() != 3 or logits.shape[:2] != input_ids.shape:
        shape = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(
            f"model must return logits of shape (B, L, V) for input {tuple(input_ids.shape)}, got {shape}"
        )
    return logits


def _check_mask_id(model: Any, mask_token_id: Any) -> int:
    """``mask_token_id`` is an int >= 0, and inside ``model.config.vocab_size`` when the model has one."""
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    return check_int("mask_token_id", mask_token_id, 0, None if vocab is None else vocab - 1)


def subs_logits(logits: Tensor, z: Tensor, mask_token_id: int) -> Tensor:
    """SUBS parameterisation: the mask token gets :math:`-\\infty`; unmasked positions copy their input.

    At a masked position the result is the input logits with the mask logit set to ``-inf``; at an
    unmasked position it is 0 for the input token and ``-inf`` elsewhere (a point mass).

    Shapes
    ------
    ``logits``: (B, L, V); ``z``: (B, L) -> (B, L, V).
    """
    _check_ids("z", z)
    v = logits.shape[-1]
    check_int("mask_token_id", mask_token_id, 0, v - 1)
    out = logits.clone()
    out[..., mask_token_id] = -math.inf
    unmasked = z != mask_token_id
    if unmasked.any():
        point = torch.full_like(out, -math.inf)
        point.scatter_(-1, z.unsqueeze(-1), 0.0)
        out = torch.where(unmasked.unsqueeze(-1), point, out)
    return out


def mdlm_loss(
    model: Callable,
    x0: Tensor,
    mask_token_id: int,
    t: Tensor | None = None,
    t_eps: float = 1e-3,
    attention_mask: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """MDLM NELBO (linear schedule) of clean sequences ``x0``, one Monte-Carlo draw of ``(t, z_t)``.

    .. math:: \\frac{1}{B}\\sum_b \\frac{1}{t_b}\\,\\frac{1}{L_b}\\sum_{l: z^l = m} -\\log p_\\theta(x_0^l \\mid z_t)

    Parameters
    ----------
    model : callable
        ``input_ids -> logits`` (B, L, V).
    x0 : LongTensor
        Clean tokens (B, L), none equal to ``mask_token_id``.
    t : Tensor, optional
        Mask rates (B,) in (0, 1]; default ``U(t_eps, 1)``. With ``t = 1`` every token is masked and
        the loss is the mean cross-entropy over all positions.
    attention_mask : Tensor, optional
        (B, L), 1 for real tokens; padding is never masked nor counted (``L_b`` = real tokens).

    Returns
    -------
    Scalar tensor.
    """
    _check_ids("x0", x0)
    b, length = x0.shape
    check_float("t_eps", t_eps, 0.0, 1.0, low_open=True, high_open=True)
    if t is None:
        t = t_eps + (1 - t_eps) * torch.rand(b, generator=generator, device=x0.device)
    if not isinstance(t, Tensor) or t.shape != (b,):
        raise ValueError(f"t must be a tensor of shape ({b},)")
    if t.is_meta or t.device != x0.device:
        raise ValueError(f"t must hold data on x0's device {x0.device}, got {t.device}")
    if not t.is_floating_point():
        raise TypeError(f"t must be a floating-point tensor of mask rates, got {t.dtype}")
    if not bool(torch.isfinite(t).all()) or (t <= 0).any() or (t > 1).any():
        raise ValueError(f"t must lie in (0, 1], got min {float(t.min())}, max {float(t.max())}")
    _check_mask_id(model, mask_token_id)
    real = torch.ones_like(x0, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    if (x0[real] == mask_token_id).any():
        raise ValueError("x0 must not contain mask_token_id")
    masked = (torch.rand(b, length, generator=generator, device=x0.device) < t[:, None]) & real
    z = torch.where(masked, torch.full_like(x0, mask_token_id), x0)
    logits = model_logits(model, z, attention_mask)
    check_int("mask_token_id", mask_token_id, 0, logits.shape[-1] - 1)
    logp = F.log_softmax(
        subs_logits(logits, z, mask_token_id).masked_fill(~masked.unsqueeze(-1), 0.0), dim=-1
    )
    nll = -logp.gather(-1, x0.unsqueeze(-1)).squeeze(-1) * masked
    per_seq = nll.sum(-1) / real.sum(-1).clamp_min(1) / t
    return per_seq.mean()


@torch.no_grad()
def mdlm_sample(
    model: Callable,
    batch_size: int,
    seq_len: int,
    num_steps: int,
    mask_token_id: int,
    temperature: float = 1.0,
    return_trajectory: bool = False,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> Tensor | tuple[Tensor, list[Tensor]]:
    """Ancestral unmasking sampler of MDLM over ``num_steps`` steps ``t_k = k / K``.

    From all-mask, at step ``k = K..1`` every still-masked position is unmasked with probability
    :math:`(t_k - t_{k-1}) / t_k = 1/k` and its token drawn from
    :math:`\\mathrm{softmax}(f_\\theta(z) / \\tau)` with the mask token excluded. The last step
    unmasks everything.

    Returns
    -------
    LongTensor (B, L) without mask tokens; with ``return_trajectory`` also the list of the
    ``num_steps`` states entering each step (``z^{(K)}`` = all-mask first).
    """
    check_int("batch_size", batch_size, low=1)
    check_int("seq_len", seq_len, low=1)
    check_int("num_steps", num_steps, low=1)
    check_float("temperature", temperature, 0.0, low_open=True)
    _check_mask_id(model, mask_token_id)
    z = torch.full((batch_size, seq_len), mask_token_id, dtype=torch.long, device=device)
    trajectory = []
    for k in range(num_steps, 0, -1):
        trajectory.append(z.clone())
        masked = z == mask_token_id
        logits = model_logits(model, z)
        if k == num_steps:
            check_int("mask_token_id", mask_token_id, 0, logits.shape[-1] - 1)
        logits = logits.float() / temperature
        logits[..., mask_token_id] = -math.inf
        probs = logits.softmax(-1).reshape(-1, logits.shape[-1])
        draw = torch.multinomial(probs, 1, generator=generator).reshape(z.shape)
        unmask = (torch.rand(z.shape, generator=generator, device=z.device) < 1.0 / k) & masked
        z = torch.where(unmask, draw, z)
    return (z, trajectory) if return_trajectory else z


def _phi(x: Tensor) -> Tensor:
    """:math:`\\varphi(x) = (e^x - 1 - x)/x^2`, stable at 0 (series below |x| = 1e-3) with finite gradients."""
    small = x.abs() < 1e-3
    x_safe = torch.where(small, torch.ones_like(x), x)
    direct = (torch.expm1(x_safe) - x_safe) / x_safe**2
    series = 0.5 + x / 6 + x**2 / 24 + x**3 / 120
    return torch.where(small, series, direct)


def alpha_beta_divergence(
    teacher_logits: Tensor, student_logits: Tensor, alpha: float, beta: float, temperature: float = 1.0
) -> Tensor:
    """Alpha-beta divergence :math:`D_{\\alpha,\\beta}(p_T \\| p_S)` (ABKD; Cichocki, Cruces and Amari 2011).

    .. math::

        D_{\\alpha,\\beta}(p\\|q) = -\\frac{1}{\\alpha\\beta}\\sum_v \\Big[p_v^\\alpha q_v^\\beta
            - \\frac{\\alpha}{\\alpha+\\beta} p_v^{\\alpha+\\beta} - \\frac{\\beta}{\\alpha+\\beta} q_v^{\\alpha+\\beta}\\Big]

    with the analytic limits: :math:`\\beta = 0`:
    :math:`\\alpha^{-2}\\sum_v [p^\\alpha \\log(p^\\alpha/q^\\alpha) - p^\\alpha + q^\\alpha]` ((1, 0) = forward KL);
    :math:`\\alpha = 0`: the same with ``p`` and ``q`` swapped ((0, 1) = reverse KL);
    :math:`\\alpha = -\\beta`: :math:`\\alpha^{-2}\\sum_v [\\log(q^\\alpha/p^\\alpha) + p^\\alpha/q^\\alpha - 1]`;
    :math:`\\alpha = \\beta = 0`: :math:`\\tfrac12\\sum_v (\\log p_v - \\log q_v)^2`.

    Parameters
    ----------
    teacher_logits, student_logits : Tensor
        (..., V). Entries of ``-inf`` (e.g. the SUBS mask logit) are zero-probability classes.
    alpha, beta : float
    temperature : float
        Both distributions are ``softmax(logits / temperature)``.

    Returns
    -------
    Tensor (...), >= 0, zero iff the distributions are equal.
    """
    alpha = check_float("alpha", alpha)
    beta = check_float("beta", beta)
    temperature = check_float("temperature", temperature, 0.0, low_open=True)
    if teacher_logits.shape != student_logits.shape:
        raise ValueError(
            f"teacher_logits and student_logits must share one shape (vocabulary sizes must match), got "
            f"{tuple(teacher_logits.shape)} and {tuple(student_logits.shape)}"
        )
    dtype = torch.promote_types(teacher_logits.dtype, student_logits.dtype)
    # float64 inside: the general branch cancels badly in float32 near alpha + beta = 0
    lp = F.log_softmax(teacher_logits.double() / temperature, dim=-1)
    lq = F.log_softmax(student_logits.double() / temperature, dim=-1)
    both_zero = torch.isinf(lp) & torch.isinf(lq)  # classes excluded from both (e.g. the mask token)
    lp_f, lq_f = lp.clamp_min(_LOG_FLOOR), lq.clamp_min(_LOG_FLOOR)
    # Limits are taken where the general formula loses precision to cancellation (float64, errors
    # O(eps_single) and O(eps_both) relative); each limit is written as d^2 * phi(x) with a stable phi.
    eps_single, eps_both = 1e-6, 1e-5
    if abs(alpha) < eps_both and abs(beta) < eps_both:
        terms = (lp_f - lq_f) ** 2 * _phi(torch.zeros((), dtype=lp_f.dtype))
    elif abs(beta) < eps_single:
        d = lp_f - lq_f
        terms = torch.exp(alpha * lp_f) * d**2 * _phi(-alpha * d)
    elif abs(alpha) < eps_single:
        e = lq_f - lp_f
        terms = torch.exp(beta * lq_f) * e**2 * _phi(-beta * e)
    elif abs(alpha + beta) < eps_single:
        d = lp_f - lq_f
        terms = d**2 * _phi(alpha * d)
    else:
        s = alpha + beta
        terms = -(
            torch.exp(alpha * lp_f + beta * lq_f)
            - alpha / s * torch.exp(s * lp_f)
            - beta / s * torch.exp(s * lq_f)
        ) / (alpha * beta)
    terms = terms.masked_fill(both_zero, 0.0)
    return terms.sum(-1).to(dtype)


def confidence_weights(
    teacher_logits: Tensor, mask: Tensor, kind: str = "maxprob", power: float = 1.0
) -> Tensor:
    """Teacher-confidence weights with mean 1 over the masked positions of each sequence (inferred form).

    :math:`c_l = \\max_v p_T^l(v)` (``"maxprob"``) or :math:`1 - H(p_T^l)/\\log|V|` (``"entropy"``),
    sharpened :math:`c^\\kappa`; :math:`w_l = c_l / \\mathrm{mean}_{l' \\in M} c_{l'}`; 0 off the mask.
    ``"none"`` gives 1 on every masked position.

    Shapes
    ------
    ``teacher_logits``: (B, L, V); ``mask``: (B, L) bool -> (B, L).
    """
    check_choice("kind", kind, CONFIDENCES)
    power = check_float("power", power, 0.0)
    if mask.shape != teacher_logits.shape[:-1]:
        raise ValueError(f"mask must have shape {tuple(teacher_logits.shape[:-1])}, got {tuple(mask.shape)}")
    mask = mask.bool()
    p = teacher_logits.detach().float().softmax(-1)
    if kind == "none":
        c = torch.ones(mask.shape, device=p.device)
    elif kind == "maxprob":
        c = p.max(-1).values
    else:
        support = torch.isfinite(teacher_logits.detach()).sum(-1).clamp_min(2).float()
        ent = -(p * p.clamp_min(1e-30).log()).sum(-1)
        c = (1.0 - ent / support.log()).clamp_min(0.0)
    c = (c.clamp_min(1e-12) ** power) * mask
    mean = c.sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp_min(1)
    return torch.where(mask, c / mean.clamp_min(1e-12), torch.zeros_like(c))


def masked_divergence(
    teacher_logits: Tensor,
    student_logits: Tensor,
    mask: Tensor,
    divergence: str = "fkl",
    alpha: float = 0.5,
    beta: float = 0.5,
    temperature: float = 1.0,
    weights: Tensor | None = None,
) -> Tensor:
    """Token-mean of a per-position divergence over the masked positions, optionally weighted.

    :math:`\\sum_{l\\in M} w_l D(p_T^l\\|p_S^l) / |M|` over the whole batch; 0 (with grad) when
    ``M`` is empty. ``divergence`` is ``"fkl"`` (KL(T||S)), ``"rkl"`` (KL(S||T)) or ``"ab"``.
    """
    check_choice("divergence", divergence, DIVERGENCES)
    a, b = {"fkl": (1.0, 0.0), "rkl": (0.0, 1.0), "ab": (alpha, beta)}[divergence]
    d = alpha_beta_divergence(teacher_logits.detach(), student_logits, a, b, temperature)
    mask = mask.bool()
    w = mask.float() if weights is None else weights * mask
    return (d * w).sum() / mask.sum().clamp_min(1)


@dataclass
class DLMDistillConfig:
    """Hyperparameters of the DLM-Distill framework (defaults: spec; (inferred) where the abstract is silent).

    Parameters
    ----------
    pool_size : int
        Teacher samples in the off-policy pool.
    teacher_sampling_steps, student_sampling_steps : int
        Reverse-process steps for the pool and for on-policy rollouts.
    off_policy_steps, on_policy_steps : int
        Optimiser steps of each phase.
    batch_size : int
        Sequences per step (pool batch and on-policy rollouts).
    denoise_coef : float
        Weight of the MDLM denoising loss on pool samples in the off-policy phase (1 = the abstract's
        denoise-on-pool; 0 with ``lambda_kd = 1`` = the FKL-on-pool baseline).
    lambda_kd : float
        Weight of the teacher-matching term on pool states in the off-policy phase.
    off_policy_divergence : {"fkl", "rkl", "ab"}
        Divergence of that term (FKL for the classic baseline).
    divergence : {"fkl", "rkl", "ab"}
        On-policy divergence; ``"ab"`` with ``ab_alpha``, ``ab_beta``.
    kd_temperature : float
        Temperature on both distributions inside divergences.
    confidence : {"maxprob", "entropy", "none"}, confidence_power : float
        Confidence reweighting of the on-policy loss.
    states_per_rollout : int
        Trajectory states scored per rollout (<= student_sampling_steps).
    trust_region_coef : float
        ``lambda_TR`` of KL(p_S || p_anchor).
    anchor : {"ema", "frozen"}
        EMA of the student (``ema_decay``) or the student frozen at the end of the off-policy phase.
    replay_coef : float
        Weight of the off-policy loss on pool samples during the on-policy phase.
    t_eps : float
        Lower bound of ``t`` in the MDLM loss.
    lr : float
        AdamW learning rate of the default optimiser.
    """

    pool_size: int = 1024
    teacher_sampling_steps: int = 32
    student_sampling_steps: int = 32
    off_policy_steps: int = 150
    on_policy_steps: int = 100
    batch_size: int = 32
    denoise_coef: float = 1.0
    lambda_kd: float = 0.0
    off_policy_divergence: str = "fkl"
    divergence: str = "ab"
    ab_alpha: float = 0.5
    ab_beta: float = 0.5
    kd_temperature: float = 1.0
    confidence: str = "maxprob"
    confidence_power: float = 1.0
    states_per_rollout: int = 4
    trust_region_coef: float = 0.1
    anchor: str = "ema"
    ema_decay: float = 0.99
    replay_coef: float = 0.1
    t_eps: float = 1e-3
    lr: float = 1e-3

    def __post_init__(self) -> None:
        for name in (
            "pool_size",
            "teacher_sampling_steps",
            "student_sampling_steps",
            "batch_size",
            "states_per_rollout",
        ):
            check_int(name, getattr(self, name), low=1)
        for name in ("off_policy_steps", "on_policy_steps"):
            check_int(name, getattr(self, name), low=0)
        for name in ("denoise_coef", "lambda_kd", "trust_region_coef", "replay_coef", "confidence_power"):
            check_float(name, getattr(self, name), 0.0)
        check_choice("divergence", self.divergence, DIVERGENCES)
        check_choice("off_policy_divergence", self.off_policy_divergence, DIVERGENCES)
        check_choice("confidence", self.confidence, CONFIDENCES)
        check_choice("anchor", self.anchor, ("ema", "frozen"))
        check_float("ab_alpha", self.ab_alpha)
        check_float("ab_beta", self.ab_beta)
        check_float("kd_temperature", self.kd_temperature, 0.0, low_open=True)
        check_float("ema_decay", self.ema_decay, 0.0, 1.0)
        check_float("t_eps", self.t_eps, 0.0, 1.0, low_open=True, high_open=True)
        check_float("lr", self.lr, 0.0, low_open=True)
        if self.states_per_rollout > self.student_sampling_steps:
            raise ValueError(
                f"states_per_rollout ({self.states_per_rollout}) must be <= student_sampling_steps "
                f"({self.student_sampling_steps})"
            )
        if self.denoise_coef == 0 and self.lambda_kd == 0 and self.off_policy_steps > 0:
            raise ValueError("denoise_coef and lambda_kd are both 0: the off-policy phase would have no loss")


class DLMDistiller:
    """Off-policy warm start on teacher samples, then on-policy trajectory distillation (DLM-Distill).

    Parameters
    ----------
    teacher, student : nn.Module
        ``input_ids (B, L) -> logits (B, L, V)`` with the same ``V``; the teacher is frozen.
    mask_token_id : int
        The [MASK] id, inside the vocabulary.
    config : DLMDistillConfig
    optimizer : torch.optim.Optimizer, optional
        Default AdamW(student, ``config.lr``).
    generator : torch.Generator, optional
        Drives every random draw (pool, masks, rollouts, state choice); seed it for determinism.
    """

    def __init__(
        self,
        teacher: nn.Module,
        student: nn.Module,
        mask_token_id: int,
        config: DLMDistillConfig | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        generator: torch.Generator | None = None,
    ):
        self.config = DLMDistillConfig() if config is None else config
        if not isinstance(self.config, DLMDistillConfig):
            raise TypeError(f"config must be a DLMDistillConfig, got {type(self.config).__name__}")
        self.teacher, self.student = teacher, student
        _check_mask_id(teacher, mask_token_id)
        _check_mask_id(student, mask_token_id)
        probe = torch.zeros(1, 2, dtype=torch.long)
        with torch.no_grad():
            vt = model_logits(teacher, probe).shape[-1]
            vs = model_logits(student, probe).shape[-1]
        if vt != vs:
            raise ValueError(f"teacher and student vocabularies differ: teacher V = {vt}, student V = {vs}")
        self.vocab_size = vt
        self.mask_token_id = check_int("mask_token_id", mask_token_id, 0, vt - 1)
        for p in teacher.parameters():
            p.requires_grad_(False)
        teacher.eval()
        self.optimizer = optimizer or torch.optim.AdamW(student.parameters(), lr=self.config.lr)
        self.generator = generator if generator is not None else torch.Generator().manual_seed(0)
        self.anchor: nn.Module | None = None
        self.pool: Tensor | None = None
        self.counters = {"teacher_forward_sequences": 0, "student_sampling_steps": 0}

    # ------------------------------------------------------------------ pool
    @torch.no_grad()
    def build_pool(self, n: int, seq_len: int, batch: int = 256) -> Tensor:
        """Draw ``n`` teacher samples (``teacher_sampling_steps`` steps); stored in ``self.pool``."""
        check_int("n", n, low=1)
        check_int("seq_len", seq_len, low=1)
        out = []
        for start in range(0, n, batch):
            b = min(batch, n - start)
            out.append(
                mdlm_sample(
                    self.teacher,
                    b,
                    seq_len,
                    self.config.teacher_sampling_steps,
                    self.mask_token_id,
                    generator=self.generator,
                )
            )
            self.counters["teacher_forward_sequences"] += b * self.config.teacher_sampling_steps
        self.pool = torch.cat(out)
        return self.pool

    def _pool_batch(self) -> Tensor:
        if self.pool is None:
            raise RuntimeError("build_pool must run before off-policy steps")
        idx = torch.randint(0, self.pool.shape[0], (self.config.batch_size,), generator=self.generator)
        return self.pool[idx]

    # ------------------------------------------------------------- off-policy
    def off_policy_loss(self, x: Tensor) -> tuple[Tensor, dict]:
        """Denoising + optional teacher matching on pool sequences ``x`` (B, L) (step 3)."""
        _check_ids("x_pool_batch", x)
        cfg = self.config
        b, length = x.shape
        t = cfg.t_eps + (1 - cfg.t_eps) * torch.rand(b, generator=self.generator)
        masked = torch.rand(b, length, generator=self.generator) < t[:, None]
        z = torch.where(masked, torch.full_like(x, self.mask_token_id), x)
        s_logits = model_logits(self.student, z)
        logp = F.log_softmax(
            subs_logits(s_logits, z, self.mask_token_id).masked_fill(~masked.unsqueeze(-1), 0.0), -1
        )
        nll = (-logp.gather(-1, x.unsqueeze(-1)).squeeze(-1) * masked).sum(-1) / length / t
        loss = cfg.denoise_coef * nll.mean()
        stats = {"denoise": nll.mean().item()}
        if cfg.lambda_kd > 0:
            with torch.no_grad():
                t_logits = model_logits(self.teacher, z)
            self.counters["teacher_forward_sequences"] += b
            d = alpha_beta_divergence(
                subs_logits(t_logits, z, self.mask_token_id).masked_fill(~masked.unsqueeze(-1), 0.0),
                subs_logits(s_logits, z, self.mask_token_id).masked_fill(~masked.unsqueeze(-1), 0.0),
                *{"fkl": (1.0, 0.0), "rkl": (0.0, 1.0), "ab": (cfg.ab_alpha, cfg.ab_beta)}[
                    cfg.off_policy_divergence
                ],
                temperature=cfg.kd_temperature,
            )
            kd = ((d * masked).sum(-1) / length / t).mean()
            loss = loss + cfg.lambda_kd * kd
            stats["kd"] = kd.item()
        return loss, stats

    def off_policy_step(self, x_pool_batch: Tensor | None = None) -> dict:
        """One optimiser step of the off-policy phase; ``x_pool_batch`` defaults to a random pool batch."""
        x = self._pool_batch() if x_pool_batch is None else x_pool_batch
        loss, stats = self.off_policy_loss(x)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.item(), **stats}

    # -------------------------------------------------------------- on-policy
    def init_anchor(self) -> None:
        """Copy the student into the trust-region anchor (end of the off-policy phase)."""
        self.anchor = copy.deepcopy(self.student)
        for p in self.anchor.parameters():
            p.requires_grad_(False)
        self.anchor.eval()

    @torch.no_grad()
    def update_anchor(self) -> None:
        """EMA update :math:`\\theta_a \\leftarrow d\\,\\theta_a + (1-d)\\,\\theta` (no-op for a frozen anchor)."""
        if self.anchor is None or self.config.anchor != "ema":
            return
        d = self.config.ema_decay
        for pa, ps in zip(self.anchor.parameters(), self.student.parameters()):
            pa.mul_(d).add_(ps.detach(), alpha=1 - d)

    def rollout_states(self, batch_size: int, seq_len: int) -> list[Tensor]:
        """The student's own reverse process; ``states_per_rollout`` states drawn from its trajectory."""
        cfg = self.config
        was_training = self.student.training
        self.student.eval()
        _, traj = mdlm_sample(
            self.student,
            batch_size,
            seq_len,
            cfg.student_sampling_steps,
            self.mask_token_id,
            return_trajectory=True,
            generator=self.generator,
        )
        self.student.train(was_training)
        self.counters["student_sampling_steps"] += cfg.student_sampling_steps
        pick = torch.randperm(len(traj), generator=self.generator)[: cfg.states_per_rollout]
        return [traj[int(i)] for i in sorted(pick.tolist())]

    def on_policy_loss(self, states: Sequence[Tensor]) -> tuple[Tensor, dict]:
        """Trajectory loss (steps 4-8) on given partially-masked states, each (B, L)."""
        cfg = self.config
        traj_terms, tr_terms, wmeans = [], [], []
        for z in states:
            _check_ids("state", z)
            mask = z == self.mask_token_id
            with torch.no_grad():
                t_logits = subs_logits(model_logits(self.teacher, z), z, self.mask_token_id)
            self.counters["teacher_forward_sequences"] += z.shape[0]
            s_logits = subs_logits(model_logits(self.student, z), z, self.mask_token_id)
            w = confidence_weights(t_logits, mask, cfg.confidence, cfg.confidence_power)
            if mask.any():
                wmeans.append(float(w[mask].mean()))
            traj_terms.append(
                masked_divergence(
                    t_logits,
                    s_logits,
                    mask,
                    cfg.divergence,
                    cfg.ab_alpha,
                    cfg.ab_beta,
                    cfg.kd_temperature,
                    weights=w,
                )
            )
            if cfg.trust_region_coef > 0:
                if self.anchor is None:
                    raise RuntimeError("init_anchor must run before an on-policy step with a trust region")
                with torch.no_grad():
                    a_logits = subs_logits(model_logits(self.anchor, z), z, self.mask_token_id)
                tr_terms.append(_kl_student_anchor(s_logits, a_logits, mask))
        traj = torch.stack(traj_terms).mean()
        loss = traj
        stats = {"traj": traj.item(), "weight_mean": float(sum(wmeans) / max(1, len(wmeans)))}
        if tr_terms:
            tr = torch.stack(tr_terms).mean()
            loss = loss + cfg.trust_region_coef * tr
            stats["trust_region"] = tr.item()
        return loss, stats

    def on_policy_step(self, batch_size: int | None = None, seq_len: int | None = None) -> dict:
        """Rollout -> teacher/student scoring -> loss (+ replay) -> optimiser step -> anchor update."""
        cfg = self.config
        batch_size = cfg.batch_size if batch_size is None else batch_size
        if seq_len is None:
            if self.pool is None:
                raise ValueError("seq_len is required when no pool has been built")
            seq_len = self.pool.shape[1]
        states = self.rollout_states(batch_size, seq_len)
        loss, stats = self.on_policy_loss(states)
        if cfg.replay_coef > 0 and self.pool is not None:
            replay, _ = self.off_policy_loss(self._pool_batch())
            loss = loss + cfg.replay_coef * replay
            stats["replay"] = replay.item()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.update_anchor()
        return {"loss": loss.item(), **stats}

    def fit(self, seq_len: int, callbacks: Sequence[Callable[[str, int, dict], None]] = ()) -> dict:
        """Build the pool (if needed), run the off-policy phase, then the on-policy phase.

        ``callbacks`` are called as ``cb(phase, step, stats)``. Returns per-step loss lists.
        """
        cfg = self.config
        self.student.train()
        if self.pool is None and (cfg.off_policy_steps > 0 or cfg.replay_coef > 0):
            self.build_pool(cfg.pool_size, seq_len)
        history: dict[str, list[float]] = {"off_policy": [], "on_policy": []}
        for step in range(cfg.off_policy_steps):
            stats = self.off_policy_step()
            history["off_policy"].append(stats["loss"])
            for cb in callbacks:
                cb("off_policy", step, stats)
        if cfg.on_policy_steps > 0:
            self.init_anchor()
        for step in range(cfg.on_policy_steps):
            stats = self.on_policy_step(cfg.batch_size, seq_len)
            history["on_policy"].append(stats["loss"])
            for cb in callbacks:
                cb("on_policy", step, stats)
        self.student.eval()
        losses = history["off_policy"] + history["on_policy"]
        if any(not math.isfinite(v) for v in losses):
            raise FloatingPointError("DLMDistiller.fit: a loss became NaN/inf; lower the learning rate")
        return history


def _kl_student_anchor(student_logits: Tensor, anchor_logits: Tensor, mask: Tensor) -> Tensor:
    """Token-mean of KL(p_S || p_anchor) over the masked positions (gradient through the student)."""
    d = alpha_beta_divergence(anchor_logits.detach(), student_logits, 0.0, 1.0)
    return (d * mask).sum() / mask.sum().clamp_min(1)

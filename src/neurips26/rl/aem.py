r"""AEM: adaptive entropy modulation of advantages for multi-turn agent RL.

Paper
-----
"AEM: supervision-free credit assignment for multi-turn agent RL by rescaling advantages with
a response-level surprisal proxy" (arXiv 2605.00425; seed ``004_01f475bc147a144d.txt``, paragraph
beginning "Reinforcement learning (RL) has substantially improved"). The paper's method section and
code were not retrievable; the entropy-dynamics statement is the standard first-order result the
abstract describes, and the weighting function below is a reconstruction (marked *inferred* in the
spec). It replaces step 3 behind the same API if the exact proxy becomes available.

Math
----
AEM is an advantage transform on top of any group estimator (GRPO, GiGPO, RewardFlow). For a batch of
``B`` agent responses with behaviour log-probs :math:`\ell_{b,t}` under mask :math:`M`:

.. math::

    s_b = -\frac{1}{n_b}\sum_t M_{b,t}\,\ell_{b,t}, \qquad
    u_b = s_b - \bar s_{\text{scope}}, \qquad
    \tilde u_b = \mathrm{clip}\Big(\frac{u_b}{\mathrm{std}_{\text{scope}}(u) + 10^{-6}}, -c, c\Big),

.. math::

    w_b = \frac{e^{-\lambda \tilde u_b}}{\mathrm{mean}_{b'} e^{-\lambda \tilde u_{b'}}}, \qquad A'_b = w_b A_b.

Theory (first order, softmax policy over responses, natural-gradient step :math:`\eta`, which for
a categorical policy is :math:`\theta \leftarrow \theta + \eta A`):

.. math::  \Delta H \approx -\eta\,\mathrm{Cov}_{y\sim\pi}(\log\pi(y), A(y)) = \eta\,\mathbb E_\pi[A(y)(s(y) - H)].

Up-weighting typical responses (:math:`u < 0`) therefore raises entropy while negative advantages
dominate and lowers it once positive ones dominate: the exploration-to-exploitation schedule.

Shapes
------
``logprobs``, ``response_mask``: ``(B, T)``; ``advantages``: ``(B,)`` or ``(B, T)``; surprisal and
weights: ``(B,)``; bandit helpers: ``probs``/``logits``/``advantages`` ``(K,)``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from neurips26.common.checks import check_choice, check_float, check_int, check_probability
from neurips26.rl.losses import as_mask

NORMALIZE = ("mean", "sum")
SCOPES = ("batch", "group")


@dataclass
class AEMConfig:
    """AEM hyperparameters.

    Parameters
    ----------
    lam : float
        Modulation strength ``lambda >= 0``; 0 disables AEM (advantages returned unchanged).
    clip : float
        ``c > 0``: the standardised relative surprisal is clipped to ``[-c, c]``.
    normalize : {"mean", "sum"}
        Length-normalised (default) or summed response surprisal.
    scope : {"batch", "group"}
        Where the reference surprisal mean (and std) is taken.
    renormalize : bool
        Rescale the weights to mean 1 over the batch.
    standardize : bool
        Divide the relative surprisal by its std before clipping.
    """

    lam: float = 1.0
    clip: float = 3.0
    normalize: Literal["mean", "sum"] = "mean"
    scope: Literal["batch", "group"] = "batch"
    renormalize: bool = True
    standardize: bool = True

    def __post_init__(self) -> None:
        check_float("lam", self.lam, 0.0)
        check_float("clip", self.clip, 0.0, low_open=True)
        check_choice("normalize", self.normalize, NORMALIZE)
        check_choice("scope", self.scope, SCOPES)


def _check_real(name: str, x: torch.Tensor, ndims: tuple[int, ...], shape_text: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.is_meta:
        raise ValueError(f"{name} must hold data, got a meta tensor")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
    if x.ndim not in ndims or x.numel() == 0:
        raise ValueError(f"{name} must be a non-empty {shape_text} tensor, got shape {tuple(x.shape)}")


def response_surprisal(
    logprobs: torch.Tensor, response_mask: torch.Tensor, normalize: str = "mean", *, name: str = "logprobs"
) -> torch.Tensor:
    """Per-response surprisal ``(B,)`` from behaviour token log-probs (no gradient).

    ``name`` is the argument name used in error messages.
    """
    check_choice("normalize", normalize, NORMALIZE)
    _check_real(name, logprobs, (2,), "(B, T)")
    if isinstance(response_mask, torch.Tensor) and response_mask.is_meta:
        raise ValueError("response_mask must hold data, got a meta tensor")
    mask = as_mask("response_mask", response_mask)
    if tuple(mask.shape) != tuple(logprobs.shape):
        raise ValueError(
            f"shape mismatch: {name} is {tuple(logprobs.shape)} but response_mask is {tuple(mask.shape)}"
        )
    lengths = mask.sum(1)
    if (lengths == 0).any():
        rows = torch.nonzero(lengths == 0).flatten().tolist()
        raise ValueError(f"empty response (no valid token) in rows {rows[:8]}")
    lp = logprobs.detach().float()
    if not torch.isfinite(lp[mask]).all():
        raise ValueError(f"{name} contain NaN or inf at valid (masked-in) positions")
    total = -(lp * mask).sum(1)
    return total / lengths if normalize == "mean" else total


def _scope_index(n: int, config: AEMConfig, group_ids: Sequence[Hashable] | None) -> list[torch.Tensor]:
    if config.scope == "batch":
        return [torch.arange(n)]
    if group_ids is None or len(group_ids) != n:
        raise ValueError(
            f"scope='group' needs group_ids of length {n}, got {None if group_ids is None else len(group_ids)}"
        )
    members: dict[Hashable, list[int]] = {}
    for i, g in enumerate(group_ids):
        members.setdefault(g, []).append(i)
    return [torch.tensor(v) for v in members.values()]


def relative_surprisal(
    surprisal: torch.Tensor, config: AEMConfig | None = None, group_ids: Sequence[Hashable] | None = None
) -> torch.Tensor:
    """``u`` (or the clipped standardised ``u~`` when ``config.standardize``), ``(B,)``."""
    config = config or AEMConfig()
    if not isinstance(surprisal, torch.Tensor) or surprisal.ndim != 1 or surprisal.numel() == 0:
        raise ValueError("surprisal must be a non-empty 1-D tensor (B,)")
    if not torch.isfinite(surprisal).all():
        raise ValueError("surprisal contains NaN or inf")
    s = surprisal.double()
    u = torch.zeros_like(s)
    for idx in _scope_index(s.numel(), config, group_ids):
        part = s[idx] - s[idx].mean()
        if config.standardize:
            std = part.std(unbiased=False) if idx.numel() > 1 else torch.zeros((), dtype=s.dtype)
            part = (part / (std + 1e-6)).clamp(-config.clip, config.clip)
        u[idx] = part
    return u.to(surprisal.dtype)


def aem_weights(
    surprisal: torch.Tensor, config: AEMConfig | None = None, group_ids: Sequence[Hashable] | None = None
) -> torch.Tensor:
    """AEM weights ``w > 0`` ``(B,)`` (module docstring); all ones when ``lam = 0``."""
    config = config or AEMConfig()
    u = relative_surprisal(surprisal, config, group_ids)
    if config.lam == 0.0:
        return torch.ones_like(u)
    w = torch.exp(-config.lam * u.double())
    if config.renormalize:
        w = w / w.mean()
    return w.to(surprisal.dtype)


def aem_rescale_advantages(
    advantages: torch.Tensor,
    old_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    config: AEMConfig | None = None,
    group_ids: Sequence[Hashable] | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``A' = w * A`` (broadcast over tokens for ``(B, T)`` advantages) plus diagnostics.

    Diagnostics: ``surprisal_mean`` (response-level entropy proxy), ``pos_adv_frac``,
    ``predicted_drift`` (``mean_b A'_b u_b``: sign of the predicted entropy change),
    ``weight_dev`` (mean ``|w - 1|``).
    """
    config = config or AEMConfig()
    if not isinstance(config, AEMConfig):
        raise TypeError(f"config must be an AEMConfig, got {type(config).__name__}")
    _check_real("advantages", advantages, (1, 2), "(B,) or (B, T)")
    surprisal = response_surprisal(old_logprobs, response_mask, config.normalize, name="old_logprobs")
    if advantages.shape[0] != surprisal.shape[0] or (
        advantages.ndim == 2 and tuple(advantages.shape) != tuple(old_logprobs.shape)
    ):
        raise ValueError(
            f"shape mismatch: advantages {tuple(advantages.shape)} vs old_logprobs {tuple(old_logprobs.shape)}"
        )
    if not torch.isfinite(advantages).all():
        raise ValueError("advantages contain NaN or inf")
    per_row = advantages if advantages.ndim == 1 else advantages[:, 0]
    u_raw = surprisal - surprisal.mean()
    diag = {
        "surprisal_mean": float(surprisal.mean()),
        "pos_adv_frac": float((per_row > 0).float().mean()),
    }
    if config.lam == 0.0:
        diag.update(predicted_drift=float((per_row.float() * u_raw).mean()), weight_dev=0.0)
        return advantages.clone(), diag
    w = aem_weights(surprisal, config, group_ids).to(advantages.dtype)
    out = advantages * (w if advantages.ndim == 1 else w.unsqueeze(1))
    diag.update(
        predicted_drift=float((per_row.float() * w.float() * u_raw).mean()),
        weight_dev=float((w - 1).abs().mean()),
    )
    return out, diag


def aem_advantages(
    advantages: torch.Tensor,
    old_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    config: AEMConfig | None = None,
    group_ids: Sequence[Hashable] | None = None,
) -> torch.Tensor:
    """:func:`aem_rescale_advantages` without the diagnostics."""
    return aem_rescale_advantages(advantages, old_logprobs, response_mask, config, group_ids)[0]


def aem_transform(config: AEMConfig | None = None):
    """A ``transform(advantages, batch)`` for :func:`neurips26.common.agents.train_agent` (scope from config)."""
    config = config or AEMConfig()

    def transform(advantages: torch.Tensor, batch) -> torch.Tensor:
        return aem_advantages(advantages, batch.logprobs, batch.response_mask, config, batch.group_ids)

    return transform


# ----------------------------------------------------------------------------------------------
# Bandit theory
# ----------------------------------------------------------------------------------------------


def categorical_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of ``softmax(logits)`` (nats), over the last dimension."""
    logp = torch.log_softmax(logits.double(), -1)
    return -(logp.exp() * logp).sum(-1)


def natural_gradient_step(logits: torch.Tensor, advantages: torch.Tensor, lr: float) -> torch.Tensor:
    """Exact natural-gradient step of a softmax policy on ``J = E_pi[A]``: ``theta + lr * A`` (``(K,)``).

    (Fisher ``diag(pi) - pi pi^T``; its pseudo-inverse applied to the gradient ``pi (A - E_pi A)``
    gives ``A`` up to a constant shift, which the softmax ignores.)
    """
    check_float("lr", lr, 0.0)
    if logits.shape != advantages.shape or logits.ndim != 1:
        raise ValueError(
            f"logits and advantages must be (K,), got {tuple(logits.shape)}, {tuple(advantages.shape)}"
        )
    return logits.double() + lr * advantages.double()


def entropy_drift_first_order(probs: torch.Tensor, advantages: torch.Tensor, lr: float) -> torch.Tensor:
    """Predicted ``Delta H = lr * sum_k pi_k A_k (s_k - H)`` with ``s_k = -log pi_k`` (scalar)."""
    check_float("lr", lr, 0.0)
    if not isinstance(probs, torch.Tensor) or probs.ndim != 1 or probs.shape != advantages.shape:
        raise ValueError("probs and advantages must be 1-D tensors of one length (K,)")
    p = probs.double()
    if (p < 0).any() or not math.isclose(float(p.sum()), 1.0, rel_tol=0, abs_tol=1e-6):
        raise ValueError("probs must be a probability vector (non-negative, sums to 1)")
    s = -torch.log(p.clamp(min=1e-300))
    h = (p * s).sum()
    return lr * (p * advantages.double() * (s - h)).sum()


def bandit_entropy_check(
    n_draws: int = 200,
    *,
    n_responses: int = 10,
    batch: int = 32,
    frac_positive: float = 0.2,
    lr: float = 1e-3,
    config: AEMConfig | None = None,
    logit_scale: float = 1.5,
    seed: int = 0,
) -> dict[str, float]:
    """Bandit sanity check of AEM's mechanism on random categorical policies.

    Each draw: logits ``~ N(0, logit_scale^2)`` over ``n_responses``; ``batch`` responses sampled
    from the policy; advantages ``+1`` with probability ``frac_positive`` else ``-1``; the batch
    estimate ``A^_k = sum_b w_b A_b [y_b = k] / (batch * pi_k)`` drives one exact natural-gradient
    step, once with AEM weights (from the responses' surprisal) and once with ``w = 1``.

    Returns
    -------
    dict
        ``sign_agreement``: fraction of (draw, arm) updates whose measured ``Delta H`` has the sign of
        the first-order prediction; ``aem_direction``: fraction of draws where
        ``Delta H_aem - Delta H_plain`` has the predicted sign (> 0 when ``frac_positive < 0.5``,
        < 0 when ``> 0.5``); ``mean_dh_aem``, ``mean_dh_plain``.
    """
    check_int("n_draws", n_draws, low=1)
    check_int("n_responses", n_responses, low=2)
    check_int("batch", batch, low=2)
    check_probability("frac_positive", frac_positive)
    if frac_positive == 0.5:
        raise ValueError("frac_positive must differ from 0.5 (the predicted direction is undefined there)")
    check_float("lr", lr, 0.0, low_open=True)
    config = config or AEMConfig()
    if config.lam == 0:
        raise ValueError("config.lam must be > 0 for the bandit check")
    rng = np.random.default_rng(seed)
    expected = 1.0 if frac_positive < 0.5 else -1.0
    agree = direction = 0
    dh_aem, dh_plain = [], []
    for _ in range(n_draws):
        logits = torch.tensor(rng.normal(0.0, logit_scale, n_responses))
        probs = torch.softmax(logits, -1)
        ys = torch.tensor(rng.choice(n_responses, size=batch, p=probs.numpy()))
        adv = torch.tensor(np.where(rng.random(batch) < frac_positive, 1.0, -1.0))
        surprisal = -torch.log(probs[ys])
        h0 = categorical_entropy(logits)
        out = {}
        for arm, w in (
            ("aem", aem_weights(surprisal, config)),
            ("plain", torch.ones(batch, dtype=torch.float64)),
        ):
            est = torch.zeros(n_responses, dtype=torch.float64).index_add_(0, ys, w * adv) / (batch * probs)
            measured = float(categorical_entropy(natural_gradient_step(logits, est, lr)) - h0)
            predicted = float(entropy_drift_first_order(probs, est, lr))
            agree += int(np.sign(measured) == np.sign(predicted))
            out[arm] = measured
        dh_aem.append(out["aem"])
        dh_plain.append(out["plain"])
        direction += int(np.sign(out["aem"] - out["plain"]) == expected)
    return {
        "sign_agreement": agree / (2 * n_draws),
        "aem_direction": direction / n_draws,
        "mean_dh_aem": float(np.mean(dh_aem)),
        "mean_dh_plain": float(np.mean(dh_plain)),
    }


__all__ = [
    "AEMConfig",
    "aem_advantages",
    "aem_rescale_advantages",
    "aem_transform",
    "aem_weights",
    "bandit_entropy_check",
    "categorical_entropy",
    "entropy_drift_first_order",
    "natural_gradient_step",
    "relative_surprisal",
    "response_surprisal",
]

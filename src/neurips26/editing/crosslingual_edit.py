r"""The cross-lingual edit propagation gap: closed-form decomposition, residual-prediction barrier and
contrastive key-space realignment.

Paper
-----
Cross-lingual edit propagation gap (NeurIPS 2026 submission; title not public); seed file
``000_f8b4140a0e3b5d84.txt``, abstract beginning "Transformer-based autoregressive multilingual language
models (LMs)". Claims of the abstract: locate-then-edit updates written from a source-language prompt fail to carry over
to other languages; the gap splits exactly into key-space propagation, parallel residual mismatch and
an orthogonal residual that dominates; predicting the target residual from source statistics faces a
barrier; contrastive alignment of source/target keys improves key-space propagation but only partly
improves transfer. Public: only the abstract (no version of the paper was found). Inferred (spec
``shared/specs/crosslingual_edit.md``): the exact form of the decomposition below, the ridge predictor of
the barrier and the InfoNCE form of the realignment.

Math
----
For an editor update :math:`\Delta W = R_s \Phi` (ROME, MEMIT, AlphaEdit in
:mod:`neurips26.editing.editors`), request :math:`i` with source key :math:`k_s`, target key
:math:`k_t`, source residual :math:`r_s` and the residual the target language needs :math:`r_t`,
let :math:`U` be an orthonormal basis of :math:`\mathrm{span}(R_s)` and

.. math::
    g = r_t - \Delta W k_t = \underbrace{(r_s - \Delta W k_t)}_{e_{key}}
      + \underbrace{(U U^\top r_t - r_s)}_{e_{par}}
      + \underbrace{(I - U U^\top) r_t}_{e_{orth}},
    \qquad \lVert g\rVert^2 = \lVert e_{key} + e_{par}\rVert^2 + \lVert e_{orth}\rVert^2 .

:math:`e_{key} = e_{fit} + e_{prop}` with :math:`e_{fit} = r_s - \Delta W k_s` (source under-fit)
and :math:`e_{prop} = \Delta W (k_s - k_t)` (propagation loss).

Shapes
------
- :func:`decompose_gaps`: keys ``K_s``, ``K_t`` ``[d_k, n]``; residuals ``R_t``, ``R_s`` ``[d_v, n]``;
  ``C0`` ``[d_k, d_k]`` -> :class:`GapDecomposition`: vector terms ``[d_v, n]``, scalar fields ``[n]``.
- :func:`decompose_gap`: ``k_s``, ``k_t`` ``[d_k]``, ``r_t`` ``[d_v]`` for one request -> vector terms
  ``[d_v]``, scalars.
- :func:`residual_prediction_barrier`: ``R_s_train``, ``R_t_train`` ``[d_v, n_train]``, ``R_s_test``,
  ``R_t_test`` ``[d_v, n_test]`` -> ``M [d_v, d_v]``, ``b [d_v]``, ``R_t_hat [d_v, n_test]`` and scores.
- :func:`contrastive_align`: normalised keys ``Z_s``, ``Z_t`` ``[n_batch, d_k]`` at the edit site
  (columns of ``K`` above, transposed); per-step loss lists out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.editing.editors import (
    EditRequest,
    EditSite,
    EditUpdate,
    TokenizedRequest,
    alphaedit_update,
    apply_update,
    compute_keys,
    compute_target_values,
    edit_metrics,
    estimate_key_moment,
    memit_multilayer,
    memit_update,
    null_space_projector,
    rome_update,
    tokenize_request,
)

__all__ = [
    "EditRequest",
    "CrossLingualPair",
    "EditSite",
    "EditUpdate",
    "estimate_key_moment",
    "compute_keys",
    "compute_target_values",
    "rome_update",
    "memit_update",
    "memit_multilayer",
    "alphaedit_update",
    "null_space_projector",
    "apply_update",
    "edit_metrics",
    "GapDecomposition",
    "decompose_gap",
    "decompose_gaps",
    "residual_prediction_barrier",
    "contrastive_align",
]


@dataclass(frozen=True)
class CrossLingualPair:
    """A request and its translation (translated prompt, subject and objects)."""

    source: EditRequest | TokenizedRequest
    target: EditRequest | TokenizedRequest


@dataclass
class GapDecomposition:
    """The exact split of the target-language gap (see the module docstring).

    Vector fields have shape (d_v, n) (or (d_v,) from :func:`decompose_gap`); scalar fields (n,).

    Attributes
    ----------
    gap : target gap :math:`g = r_t - \\Delta W k_t`
    e_key, e_fit, e_prop, e_par, e_orth : the terms; ``e_key + e_par + e_orth == gap``
    alpha : :math:`\\langle \\delta_t, \\delta_s\\rangle / \\lVert\\delta_s\\rVert^2`, key-space propagation (1 = perfect)
    cos_C : :math:`k_s^\\top C_0^{-1} k_t / \\sqrt{k_s^\\top C_0^{-1} k_s\\,k_t^\\top C_0^{-1} k_t}` (NaN without C0)
    f_orth, f_inspan : :math:`\\lVert e_{orth}\\rVert^2/\\lVert g\\rVert^2` and :math:`\\lVert e_{key}+e_{par}\\rVert^2/\\lVert g\\rVert^2`
    gap_norm2 : :math:`\\lVert g\\rVert^2`
    rel_residual_mismatch : :math:`\\lVert e_{par} + e_{orth}\\rVert / \\lVert r_t\\rVert`
    identity_error : :math:`\\lVert g - (e_{key}+e_{par}+e_{orth})\\rVert / \\lVert g\\rVert`
    """

    gap: torch.Tensor
    e_key: torch.Tensor
    e_fit: torch.Tensor
    e_prop: torch.Tensor
    e_par: torch.Tensor
    e_orth: torch.Tensor
    alpha: torch.Tensor
    cos_C: torch.Tensor
    f_orth: torch.Tensor
    f_inspan: torch.Tensor
    gap_norm2: torch.Tensor
    rel_residual_mismatch: torch.Tensor
    identity_error: torch.Tensor

    def column(self, i: int) -> GapDecomposition:
        return GapDecomposition(**{k: (v[:, i] if v.dim() == 2 else v[i]) for k, v in vars(self).items()})


def _span_basis(R: torch.Tensor, rtol: float = 1e-6) -> torch.Tensor:
    U, S, _ = torch.linalg.svd(R, full_matrices=False)
    if S.numel() == 0 or S[0] == 0:
        return U[:, :0]
    return U[:, S > rtol * S[0]]


def decompose_gaps(
    update: EditUpdate,
    K_s: torch.Tensor,
    K_t: torch.Tensor,
    R_t: torch.Tensor,
    C0: torch.Tensor | None = None,
    R_s: torch.Tensor | None = None,
) -> GapDecomposition:
    """Decompose the target-language gap of every request of ``update`` (float64).

    Parameters
    ----------
    update : EditUpdate
        An editor's update, :math:`\\Delta W = R_s \\Phi`.
    K_s, K_t : Tensor, shape (d_k, n)
        Source and target keys of the same requests.
    R_t : Tensor, shape (d_v, n)
        Residuals the target language needs (translated prompt and object).
    C0 : Tensor, shape (d_k, d_k), optional
        Key second moment, for ``cos_C``.
    R_s : Tensor, shape (d_v, n), optional
        Source residuals (default ``update.R_s``). ``span(R_s)`` must contain the update's column space
        for the Pythagorean split to hold.

    Returns
    -------
    GapDecomposition
    """
    R_s = update.R_s if R_s is None else R_s
    dW = update.delta_W.double()
    K_s, K_t, R_t, R_s = (x.double() if x.dim() == 2 else x.double()[:, None] for x in (K_s, K_t, R_t, R_s))
    d_v, d_k = dW.shape
    n = K_s.shape[1]
    for name, x, rows in (("K_s", K_s, d_k), ("K_t", K_t, d_k), ("R_t", R_t, d_v), ("R_s", R_s, d_v)):
        if x.shape != (rows, n):
            raise ValueError(f"{name} must have shape ({rows}, {n}), got {tuple(x.shape)}")
    delta_s, delta_t = dW @ K_s, dW @ K_t
    U = _span_basis(R_s)
    par_t = U @ (U.T @ R_t)
    e_fit = R_s - delta_s
    e_prop = delta_s - delta_t
    e_key = R_s - delta_t
    e_par = par_t - R_s
    e_orth = R_t - par_t
    gap = R_t - delta_t
    gap_norm2 = gap.pow(2).sum(0)
    tiny = torch.finfo(torch.float64).tiny
    alpha = (delta_t * delta_s).sum(0) / delta_s.pow(2).sum(0).clamp_min(tiny)
    f_orth = e_orth.pow(2).sum(0) / gap_norm2.clamp_min(tiny)
    f_inspan = (e_key + e_par).pow(2).sum(0) / gap_norm2.clamp_min(tiny)
    rel = (e_par + e_orth).norm(dim=0) / R_t.norm(dim=0).clamp_min(tiny)
    ident = (gap - (e_key + e_par + e_orth)).norm(dim=0) / gap.norm(dim=0).clamp_min(tiny)
    if C0 is not None:
        C0 = C0.double()
        L, info = torch.linalg.cholesky_ex(C0 + 1e-6 * torch.trace(C0) / d_k * torch.eye(d_k, dtype=C0.dtype))
        if int(info) != 0:
            raise ValueError("C0 must be symmetric positive definite")
        a, b = torch.cholesky_solve(K_s, L), torch.cholesky_solve(K_t, L)
        cos_C = (K_s * b).sum(0) / ((K_s * a).sum(0) * (K_t * b).sum(0)).sqrt()
    else:
        cos_C = torch.full((n,), float("nan"), dtype=torch.float64)
    return GapDecomposition(
        gap, e_key, e_fit, e_prop, e_par, e_orth, alpha, cos_C, f_orth, f_inspan, gap_norm2, rel, ident
    )


def decompose_gap(
    update: EditUpdate,
    i: int,
    k_s: torch.Tensor,
    k_t: torch.Tensor,
    r_t: torch.Tensor,
    C0: torch.Tensor | None = None,
) -> GapDecomposition:
    """Decomposition for request ``i`` of ``update`` (its column of ``update.R_s``); vectors (d_v,)."""
    if not isinstance(update, EditUpdate):
        raise TypeError(f"update must be an EditUpdate, got {type(update).__name__}")
    n = update.R_s.shape[1]
    check_int("i", i, 0, n - 1)
    d_v, d_k = update.delta_W.shape
    for name, x, size in (("k_s", k_s, d_k), ("k_t", k_t, d_k), ("r_t", r_t, d_v)):
        if not isinstance(x, torch.Tensor) or x.is_meta:
            raise ValueError(
                f"{name} must be a tensor with data, got {getattr(x, 'device', type(x).__name__)}"
            )
        if x.dtype == torch.bool or x.is_complex():
            raise TypeError(f"{name} must be a real-valued tensor, got {x.dtype}")
        if tuple(x.shape) != (size,):
            raise ValueError(f"{name} must have shape ({size},), got {tuple(x.shape)}")
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name} contains NaN or inf")
    if C0 is not None:
        if not isinstance(C0, torch.Tensor) or C0.is_meta or tuple(C0.shape) != (d_k, d_k):
            raise ValueError(f"C0 must be a ({d_k}, {d_k}) tensor with data, got {getattr(C0, 'shape', C0)}")
        if C0.dtype == torch.bool or not bool(torch.isfinite(C0).all()):
            raise ValueError("C0 must be a finite real-valued matrix")
    K_s = update.K_s.double().clone()
    K_t = K_s.clone()
    R_t = update.R_s.double().clone()
    K_s[:, i], K_t[:, i], R_t[:, i] = k_s.double(), k_t.double(), r_t.double()
    return decompose_gaps(update, K_s, K_t, R_t, C0).column(i)


def residual_prediction_barrier(
    R_s_train: torch.Tensor,
    R_t_train: torch.Tensor,
    R_s_test: torch.Tensor,
    R_t_test: torch.Tensor,
    ridge: float | None = None,
) -> dict[str, Any]:
    """How well source-only residual statistics predict the target residuals.

    Fits :math:`\\hat r_t = M r_s + b` by ridge regression on training requests,
    :math:`\\mu = 10^{-2}\\,\\mathrm{tr}(R_s R_s^\\top)/d_v` by default, and scores held-out requests:

    .. math:: R^2 = 1 - \\frac{\\sum_i \\lVert r_{t,i} - \\hat r_{t,i}\\rVert^2}{\\sum_i \\lVert r_{t,i} - \\bar r_t\\rVert^2}

    ``r2_orth`` is the same on the part of :math:`r_t` orthogonal to its own :math:`r_s` (the
    per-request e_orth of a rank-one edit), predicted as the same projection of :math:`\\hat r_t`.

    Parameters
    ----------
    R_s_train, R_t_train : Tensor, shape (d_v, n_train)
    R_s_test, R_t_test : Tensor, shape (d_v, n_test)

    Returns
    -------
    dict with ``r2``, ``r2_orth``, ``rel_err`` (:math:`\\lVert r_t - \\hat r_t\\rVert/\\lVert r_t\\rVert`, mean),
    ``M`` (d_v, d_v), ``b`` (d_v,), ``R_t_hat`` (d_v, n_test).
    """
    mats = [x.double() for x in (R_s_train, R_t_train, R_s_test, R_t_test)]
    Rs, Rt, Ss, St = mats
    d_v = Rs.shape[0]
    if Rs.shape != Rt.shape or Ss.shape != St.shape or Ss.shape[0] != d_v or Rs.dim() != 2:
        raise ValueError(
            "train and test residuals must be (d_v, n) with matching source/target shapes, got "
            f"{[tuple(x.shape) for x in mats]}"
        )
    if Rs.shape[1] < 2 or Ss.shape[1] < 1:
        raise ValueError("need at least 2 training and 1 test request")
    mu_s, mu_t = Rs.mean(1, keepdim=True), Rt.mean(1, keepdim=True)
    Xs, Xt = Rs - mu_s, Rt - mu_t
    if ridge is None:
        ridge = 1e-2 * float((Rs * Rs).sum()) / d_v
    check_float("ridge", ridge, 0.0)
    A = Xs @ Xs.T + ridge * torch.eye(d_v, dtype=torch.float64)
    M = torch.linalg.solve(A, Xs @ Xt.T).T
    b = (mu_t - M @ mu_s)[:, 0]
    pred = M @ Ss + b[:, None]

    def r2(y, yhat):
        den = (y - y.mean(1, keepdim=True)).pow(2).sum()
        return float(1 - (y - yhat).pow(2).sum() / den.clamp_min(torch.finfo(torch.float64).tiny))

    u = Ss / Ss.norm(dim=0, keepdim=True).clamp_min(1e-300)
    orth = St - u * (u * St).sum(0)
    orth_hat = pred - u * (u * pred).sum(0)
    rel = float(((St - pred).norm(dim=0) / St.norm(dim=0).clamp_min(1e-300)).mean())
    return {
        "r2": r2(St, pred),
        "r2_orth": r2(orth, orth_hat),
        "rel_err": rel,
        "M": M,
        "b": b,
        "R_t_hat": pred,
    }


def contrastive_align(
    model: torch.nn.Module,
    pairs: Sequence[CrossLingualPair],
    site: EditSite,
    tau: float = 0.07,
    keep_batches: Sequence[dict] | None = None,
    beta: float = 1.0,
    steps: int = 300,
    lr: float = 1e-4,
    trainable: str = "up_to_layer",
    batch_size: int = 32,
    seed: int = 0,
    tokenizer: Any = None,
) -> dict[str, list[float]]:
    """Targeted contrastive alignment of source/target keys at the edit site (in place).

    With :math:`z = k / \\lVert k \\rVert` the site's input at the last subject token,

    .. math:: \\mathcal{L} = \\tfrac12\\big(\\mathrm{CE}(Z_s Z_t^\\top/\\tau, I) + \\mathrm{CE}(Z_t Z_s^\\top/\\tau, I)\\big)
              + \\beta\\,\\mathcal{L}_{keep},

    :math:`\\mathcal{L}_{keep}` the next-token loss on ``keep_batches`` (dicts with ``input_ids``,
    ``attention_mask``, ``labels``), cycled. Only the parameters of blocks ``0..layer`` are trained
    (``trainable="up_to_layer"``) or all parameters (``"all"``). AdamW, a seeded batch order.

    Returns
    -------
    dict with lists ``infonce``, ``keep`` and ``paired_cos`` (mean cosine of positives) per step.
    """
    check_float("tau", tau, 0.0, low_open=True)
    check_float("beta", beta, 0.0)
    check_int("steps", steps, low=1)
    check_float("lr", lr, 0.0, low_open=True)
    check_int("batch_size", batch_size, low=2)
    check_choice("trainable", trainable, ("up_to_layer", "all"))
    if len(pairs) < 2:
        raise ValueError("contrastive_align needs at least 2 pairs (negatives come from the batch)")
    src = [tokenize_request(p.source, tokenizer) for p in pairs]
    tgt = [tokenize_request(p.target, tokenizer) for p in pairs]
    head = site.module_template.split("{}")[0]
    allowed = tuple(f"{head}{i}." for i in range(site.layer + 1))
    named = list(model.named_parameters())
    flags = {n: p.requires_grad for n, p in named}
    train = [p for n, p in named if trainable == "all" or n.startswith(allowed)]
    for n, p in named:
        p.requires_grad_(trainable == "all" or n.startswith(allowed))
    opt = torch.optim.AdamW(train, lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    hist: dict[str, list[float]] = {"infonce": [], "keep": [], "paired_cos": []}
    from neurips26.editing.editors.requests import _batch

    def keys_of(reqs):
        ids, mask = _batch([r.prompt_ids for r in reqs])
        pos = torch.tensor([r.subject_last for r in reqs], device=device)
        keys = site.keys_of(input_ids=ids.to(device), attention_mask=mask.to(device))
        return torch.nn.functional.normalize(
            keys[torch.arange(len(reqs), device=device), pos].float(), dim=-1
        )

    was_training = model.training
    model.train()
    try:
        for step in range(steps):
            idx = torch.randperm(len(pairs), generator=gen)[: min(batch_size, len(pairs))].tolist()
            zs, zt = keys_of([src[i] for i in idx]), keys_of([tgt[i] for i in idx])
            logits = zs @ zt.T / tau
            labels = torch.arange(len(idx), device=device)
            nce = 0.5 * (
                torch.nn.functional.cross_entropy(logits, labels)
                + torch.nn.functional.cross_entropy(logits.T, labels)
            )
            loss = nce
            keep = torch.zeros(())
            if keep_batches and beta > 0:
                kb = keep_batches[step % len(keep_batches)]
                keep = model(**{k: v.to(device) for k, v in kb.items()}).loss
                loss = loss + beta * keep
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            hist["infonce"].append(float(nce.detach()))
            hist["keep"].append(float(keep.detach()))
            hist["paired_cos"].append(float((zs * zt).sum(-1).mean().detach()))
    finally:
        for n, p in named:
            p.requires_grad_(flags[n])
        model.train(was_training)
    return hist

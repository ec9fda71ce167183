"""ABC-Align losses, the bias-corrected objective, its correction-strength estimator and the baselines.

All objectives here combine three per-example loss vectors into one scalar,

.. math::

    L = w_P \\,\\overline{\\ell(z, \\hat p)}_{D_P} + w_H \\,\\overline{\\ell(z, h)}_{D_H}
        + w_{HP} \\,\\overline{\\ell(z, \\hat p)}_{D_H},

with :math:`\\ell` the soft-label logistic loss on a preference margin. The methods differ only in
the weights :math:`(w_P, w_H, w_{HP})`:

=================  ==================================  ===============================================
objective          weights                             strength
=================  ==================================  ===============================================
ABC-Align          ``(1, c, -c)``                      ``c`` in [0, 1] minimising the estimated MSE
pseudo-only        ``(1, 0, 0)``                       RLAIF on judge labels
human-only         ``(0, 1, 0)``                       the human subset alone
PPI (rectified)    ``(1, 1, -1)``                      = ABC with ``c = 1``
PPI++              ``(λ, 1, -λ)``                      power-tuned plug-in ``λ`` (Angelopoulos 2023)
pooled             ``(N, n, 0) / (N + n)``             naive pooling of both sets
=================  ==================================  ===============================================

The correction :math:`\\Delta = \\overline{\\ell(z,h) - \\ell(z,\\hat p)}_{D_H}` is linear in the margin:
since :math:`\\log\\sigma(m) - \\log\\sigma(-m) = m`,
:math:`\\ell(m, h) - \\ell(m, \\hat p) = (\\hat p - h)\\, m`, so its per-example gradient on a probe
:math:`\\psi` is :math:`d_i = (\\hat p_i - h_i)\\, \\nabla_\\psi m_i`. With :math:`\\mu = E[d]` and
:math:`\\Sigma = \\mathrm{Cov}(d)`, the corrected gradient has

.. math::  \\mathrm{MSE}(c) \\approx (1-c)^2 \\lVert\\mu\\rVert^2 + c^2\\,\\mathrm{tr}(\\Sigma)/n,
           \\qquad c^* = \\frac{\\lVert\\mu\\rVert^2}{\\lVert\\mu\\rVert^2 + \\mathrm{tr}(\\Sigma)/n}.

The plug-in uses the last ``W`` human examples: :math:`\\hat b^2 = \\max(\\lVert\\hat\\mu\\rVert^2 -
\\mathrm{tr}(\\hat\\Sigma)/W, 0)` (the debiased bias energy), :math:`\\hat c = \\hat b^2 / (\\hat b^2 +
\\mathrm{tr}(\\hat\\Sigma)/n)`, clipped to ``[c_min, c_max]`` and smoothed by an EMA.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F

from neurips26.common.checks import (
    check_choice,
    check_finite,
    check_float,
    check_int,
    check_same_shape,
    check_tensor,
)
from neurips26.rl.abc_align.estimators import (
    RowWindow,
    _as_rows,
    _ppi_pp_lambda,
    _statistics,
    correction_from_statistics,
    correction_statistics,
    estimate_correction_strength,
    ppi_pp_lambda,
)

SPACES = ("grad", "loss")
PROBES = ("head", "all")


# ----------------------------------------------------------------------------- per-example losses
def _check_real(name: str, t: Any, ndim: int | None = None) -> torch.Tensor:
    """A finite floating-point tensor with data (not meta) of ``ndim`` dimensions; raise naming ``name``."""
    check_tensor(name, t, finite=False)
    if ndim is not None and t.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(t.shape)}")
    return check_finite(name, t)


def _check_labels(name: str, label: torch.Tensor) -> None:
    if not isinstance(label, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(label).__name__}")
    if label.is_meta:
        raise ValueError(f"{name} is a meta tensor (no data); pass a materialised tensor")
    if label.numel() and (not bool(torch.isfinite(label).all()) or label.min() < 0 or label.max() > 1):
        raise ValueError(f"{name} must lie in [0, 1] (probability that the first response is preferred)")


def soft_logistic_loss(margin: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """Per-example soft-label Bradley-Terry (logistic) loss on a preference margin.

    .. math::  \\ell(m, q) = -q \\log\\sigma(m) - (1 - q)\\log\\sigma(-m)

    ``q = 1`` is the usual DPO / reward-model loss ``-log σ(m)``. Swapping the two responses
    (``m -> -m``) and using ``1 - q`` gives the same value.

    Parameters
    ----------
    margin : Tensor ``(..., B)``
        ``m`` = score of response 1 minus score of response 2 (reward margin or DPO margin).
    label : Tensor ``(..., B)``
        Probability in [0, 1] that response 1 is preferred (broadcast against ``margin``).

    Returns
    -------
    Tensor, the broadcast shape of ``margin`` and ``label``: the per-example losses.
    """
    _check_real("margin", margin)
    _check_labels("label", label)
    if label.device != margin.device:
        raise ValueError(f"label must be on margin's device {margin.device}, got {label.device}")
    try:
        torch.broadcast_shapes(margin.shape, label.shape)
    except RuntimeError:
        raise ValueError(
            f"margin {tuple(margin.shape)} and label {tuple(label.shape)} must broadcast against each other"
        ) from None
    return _soft_logistic(margin, label)


def _soft_logistic(margin: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """:func:`soft_logistic_loss` without input checks (hot loops whose labels were checked once)."""
    label = label.to(margin.dtype)
    return -(label * F.logsigmoid(margin) + (1 - label) * F.logsigmoid(-margin))


def dpo_margin(
    policy_logps_1: torch.Tensor,
    policy_logps_2: torch.Tensor,
    ref_logps_1: torch.Tensor,
    ref_logps_2: torch.Tensor,
    beta: float = 0.1,
) -> torch.Tensor:
    """DPO implicit-reward margin of response 1 over response 2.

    .. math::  m = \\beta\\big[(\\log\\pi_\\theta(y^1|x) - \\log\\pi_{ref}(y^1|x))
                             - (\\log\\pi_\\theta(y^2|x) - \\log\\pi_{ref}(y^2|x))\\big]

    Positive when the policy raised response 1 relative to response 2 (TRL's ``beta * (chosen_logratios
    - rejected_logratios)`` with response 1 = chosen).

    Parameters
    ----------
    policy_logps_1, policy_logps_2, ref_logps_1, ref_logps_2 : Tensor ``(B,)``
        Summed completion log-probabilities under the policy and the frozen reference.
    beta : float
        KL strength (> 0); 0.1 by default as in TRL.

    Returns
    -------
    Tensor ``(B,)``
    """
    check_float("beta", beta, 0.0, low_open=True, high=math.inf, high_open=True)
    named = {
        "policy_logps_1": policy_logps_1,
        "policy_logps_2": policy_logps_2,
        "ref_logps_1": ref_logps_1,
        "ref_logps_2": ref_logps_2,
    }
    for name, t in named.items():
        _check_real(name, t)
    if len({t.device for t in named.values()}) != 1:
        raise ValueError(
            f"log-prob tensors must share one device, got { {k: str(t.device) for k, t in named.items()} }"
        )
    check_same_shape(**named)
    return beta * ((policy_logps_1 - ref_logps_1) - (policy_logps_2 - ref_logps_2))


def preference_margin_rm(reward_model, x, y1, y2) -> torch.Tensor:
    """Reward-model margin ``r(x, y1) - r(x, y2)``.

    Parameters
    ----------
    reward_model : callable
        ``reward_model(x, y)`` or, when ``x`` is None, ``reward_model(y)``; returns rewards
        ``(B,)`` (or ``(R, B)`` for an ensemble of ``R`` reward models trained in lockstep).
    x : Tensor or None
        Prompts (any batch-first input the model accepts).
    y1, y2 : Tensor
        The two responses of each pair, batch first.

    Returns
    -------
    Tensor ``(B,)`` or ``(R, B)``.
    """
    if x is None:
        return reward_model(y1) - reward_model(y2)
    return reward_model(x, y1) - reward_model(x, y2)


# ----------------------------------------------------------------------------- objectives
@dataclass
class ABCConfig:
    """Hyperparameters of the ABC-Align objective (defaults from the spec; "inferred" where the paper is silent).

    Parameters
    ----------
    correction : "adaptive" or float
        ``"adaptive"`` re-estimates ``c`` during training; a float in [0, 1] fixes it (0 = pseudo-only
        RLAIF, 1 = the PPI-rectified loss).
    update_every : int
        Steps ``K`` between re-estimates of ``c``.
    window : int
        Number ``W`` of most recent human examples whose corrections ``d_i`` enter the estimate.
    ema : float
        Smoothing in [0, 1): ``c <- ema * c + (1 - ema) * ĉ``.
    c_min, c_max : float
        Clip range of ``ĉ`` inside [0, 1].
    c_init : float
        ``c`` before the first estimate (warm start at full correction, inferred).
    space : {"grad", "loss"}
        ``d_i`` as probe gradients (default) or as scalar loss differences (cheaper).
    probe : {"head", "all"}
        Parameters the gradient-space ``d_i`` live on: the output head (reward head, LM head or LoRA
        B matrices, found by the trainer) or every trainable parameter.
    include_pseudo_var : bool
        Add the pseudo pool's term ``tr Σ_P / N`` to the reported MSE. It does not move ``c*``,
        because the pseudo pool and the human set are independent; it is a diagnostic.
    human_batch, pseudo_batch : int
        Human and pseudo pairs in every mini-batch.
    beta : float
        DPO KL strength.
    """

    correction: Literal["adaptive"] | float = "adaptive"
    update_every: int = 10
    window: int = 256
    ema: float = 0.9
    c_min: float = 0.0
    c_max: float = 1.0
    c_init: float = 1.0
    space: Literal["grad", "loss"] = "grad"
    probe: Literal["head", "all"] = "head"
    include_pseudo_var: bool = False
    human_batch: int = 16
    pseudo_batch: int = 64
    beta: float = 0.1

    def __post_init__(self) -> None:
        if isinstance(self.correction, str):
            check_choice("correction", self.correction, ("adaptive",))
        else:
            self.correction = check_float("correction", self.correction, 0.0, 1.0)
        check_int("update_every", self.update_every, low=1)
        check_int("window", self.window, low=2)
        check_float("ema", self.ema, 0.0, 1.0, high_open=True)
        check_float("c_min", self.c_min, 0.0, 1.0)
        check_float("c_max", self.c_max, 0.0, 1.0)
        if self.c_min > self.c_max:
            raise ValueError(f"c_min ({self.c_min}) must not exceed c_max ({self.c_max})")
        check_float("c_init", self.c_init, self.c_min, self.c_max)
        check_choice("space", self.space, SPACES)
        check_choice("probe", self.probe, PROBES)
        if not isinstance(self.include_pseudo_var, bool):
            raise TypeError("include_pseudo_var must be a bool")
        check_int("human_batch", self.human_batch, low=1)
        check_int("pseudo_batch", self.pseudo_batch, low=1)
        check_float("beta", self.beta, 0.0, low_open=True)

    @property
    def adaptive(self) -> bool:
        return self.correction == "adaptive"


@dataclass
class MarginBatch:
    """What an objective may observe about one mini-batch (all detached).

    Shapes: human side ``(R, m)`` margins and labels and ``(R, m, dim)`` probe gradients of the
    margins; pseudo side ``(R, k)`` and ``(R, k, dim)``. ``R`` is the number of lockstep replicas
    (1 for a single model); an objective reads its own replica ``r``. Gradients may be None when no
    objective asked for them.
    """

    human_margins: torch.Tensor
    human_labels: torch.Tensor
    human_pseudo_labels: torch.Tensor
    pseudo_margins: torch.Tensor
    pseudo_labels: torch.Tensor
    human_grads: torch.Tensor | None = None
    pseudo_grads: torch.Tensor | None = None
    human_ids: torch.Tensor | None = None
    pseudo_ids: torch.Tensor | None = None


def _check_loss_vectors(
    objective: str, loss_pseudo, loss_human_true, loss_human_pseudo, need_human, need_pseudo
):
    for name, t in (
        ("loss_pseudo", loss_pseudo),
        ("loss_human_true", loss_human_true),
        ("loss_human_pseudo", loss_human_pseudo),
    ):
        if not isinstance(t, torch.Tensor) or t.ndim != 1:
            raise ValueError(
                f"{name} must be a 1-D tensor of per-example losses, got {getattr(t, 'shape', t)!r}"
            )
        _check_real(name, t)
    if loss_human_true.shape != loss_human_pseudo.shape:
        raise ValueError(
            f"loss_human_true {tuple(loss_human_true.shape)} and loss_human_pseudo "
            f"{tuple(loss_human_pseudo.shape)} must have the same length (one entry per human pair)"
        )
    if need_human and loss_human_true.numel() == 0:
        raise ValueError(
            f"{objective}: the human batch is empty (loss_human_true has no entries); every mini-batch needs human pairs"
        )
    if need_pseudo and loss_pseudo.numel() == 0:
        raise ValueError(
            f"{objective}: the pseudo batch is empty (loss_pseudo has no entries); every mini-batch needs pseudo pairs"
        )


class RectifiedObjective:
    """Base class: ``L = w_P mean(ℓ_P) + w_H mean(ℓ_H^h) + w_HP mean(ℓ_H^p̂)`` with weights from :meth:`weights`.

    Subclasses set the weights; those with plug-in estimates implement :meth:`observe_batch` and
    :meth:`update_correction`. ``needs`` says which per-example probe gradients the trainer must
    compute: ``()``, ``("human",)`` or ``("human", "pseudo")``.
    """

    name = "rectified"
    needs: tuple[str, ...] = ()
    space: str = "grad"

    def weights(self) -> tuple[float, float, float]:
        raise NotImplementedError

    def __call__(
        self, loss_pseudo: torch.Tensor, loss_human_true: torch.Tensor, loss_human_pseudo: torch.Tensor
    ) -> torch.Tensor:
        """Per-example loss vectors ``(k,)``, ``(m,)``, ``(m,)`` in; the scalar objective out."""
        w_p, w_h, w_hp = self.weights()
        _check_loss_vectors(
            self.name, loss_pseudo, loss_human_true, loss_human_pseudo, w_h != 0 or w_hp != 0, w_p != 0
        )
        total = loss_pseudo.new_zeros(()) if loss_pseudo.numel() else loss_human_true.new_zeros(())
        if w_p != 0:
            total = total + w_p * loss_pseudo.mean()
        if w_h != 0:
            total = total + w_h * loss_human_true.mean()
        if w_hp != 0:
            total = total + w_hp * loss_human_pseudo.mean()
        return total

    def observe_batch(self, batch: MarginBatch, replica: int = 0) -> None:  # noqa: B027 - optional hook
        """Record plug-in statistics from one mini-batch (no-op for fixed-weight objectives)."""

    def update_correction(self) -> float:
        """Re-estimate the strength parameter from the recorded window; return it (NaN if none)."""
        return math.nan

    def diagnostics(self) -> dict[str, float]:
        return {}


class PseudoOnlyObjective(RectifiedObjective):
    """RLAIF baseline: train on judge labels only, ``L = mean_P ℓ(z, p̂)``."""

    name = "pseudo_only"

    def weights(self):
        return 1.0, 0.0, 0.0


class HumanOnlyObjective(RectifiedObjective):
    """Baseline: train on the human subset only, ``L = mean_H ℓ(z, h)``."""

    name = "human_only"

    def weights(self):
        return 0.0, 1.0, 0.0


class PooledObjective(RectifiedObjective):
    """Naive pooling: every pair weighted equally, ``L = (N mean_P ℓ(p̂) + n mean_H ℓ(h)) / (N + n)``."""

    name = "pooled"

    def __init__(self, n_human_total: int, n_pseudo_total: int) -> None:
        self.n = check_int("n_human_total", n_human_total, low=1)
        self.N = check_int("n_pseudo_total", n_pseudo_total, low=1)

    def weights(self):
        total = self.n + self.N
        return self.N / total, self.n / total, 0.0


class ABCAlignObjective(RectifiedObjective):
    """ABC-Align: pseudo-label loss plus an MSE-tuned fraction ``c`` of the human-set correction.

    Paper: "ABC-Align" (seed ``004_01f475bc147a144d.txt``, abstract beginning "Language model
    post-training is often bottlenecked"); estimator details inferred, see the package docstring.

    .. math::  L_{ABC} = \\overline{\\ell(z,\\hat p)}_{D_P} + c\\,\\overline{\\ell(z,h) - \\ell(z,\\hat p)}_{D_H}

    Parameters
    ----------
    config : ABCConfig
    n_human_total, n_pseudo_total : int
        Sizes ``n`` and ``N`` of the whole human set and pseudo pool.
    probe_params : sequence of Parameter, optional
        Recorded for trainers that compute gradient-space ``d_i``; not used by the objective itself.

    Shapes
    ------
    ``__call__``: ``(k,), (m,), (m,) -> ()``; :meth:`observe`: ``(m, dim)`` or ``(m,)``.
    """

    name = "abc"

    def __init__(
        self,
        config: ABCConfig | None = None,
        n_human_total: int = 2,
        n_pseudo_total: int = 1,
        probe_params: Sequence[torch.nn.Parameter] | None = None,
    ) -> None:
        self.config = config = ABCConfig() if config is None else config
        if not isinstance(config, ABCConfig):
            raise TypeError(f"config must be an ABCConfig, got {type(config).__name__}")
        self.n = check_int("n_human_total", n_human_total, low=1)
        self.N = check_int("n_pseudo_total", n_pseudo_total, low=1)
        if config.adaptive and n_human_total < 2:
            raise ValueError(
                f"adaptive correction needs n_human_total >= 2 to estimate a variance, got {n_human_total}"
            )
        self.probe_params = list(probe_params) if probe_params is not None else None
        self.space = config.space
        self.needs = ("human",) if config.adaptive and config.space == "grad" else ()
        self._c = float(config.c_init if config.adaptive else config.correction)
        self._window = RowWindow(config.window)
        self._pseudo_trace: float | None = None
        self._diag: dict[str, float] = {}
        self.history: list[float] = [self._c]

    @property
    def c(self) -> float:
        """Current correction strength in [0, 1]."""
        return self._c

    def weights(self):
        return 1.0, self._c, -self._c

    def observe(
        self, correction_grads: torch.Tensor, ids: torch.Tensor | Sequence[int] | None = None
    ) -> None:
        """Add per-example corrections ``d_i`` ``(m, dim)`` (or ``(m,)``) to the window of the last ``W`` examples.

        ``ids`` ``(m,)`` name the human examples; a revisited example replaces its older row.
        """
        if not self.config.adaptive:
            return
        d = _as_rows("correction_grads", correction_grads)
        if self._window.dim is not None and d.shape[1] != self._window.dim:
            raise ValueError(
                f"correction_grads has dim {d.shape[1]}, the window holds dim {self._window.dim}"
            )
        self._window._push(d, ids)

    def observe_pseudo(self, pseudo_grads: torch.Tensor) -> None:
        """Record the pseudo pool's per-example gradient trace (``include_pseudo_var`` diagnostic only)."""
        g = _as_rows("pseudo_grads", pseudo_grads)
        if g.shape[0] >= 2:
            self._pseudo_trace = float((g - g.mean(0)).pow(2).sum() / (g.shape[0] - 1))

    def observe_batch(self, batch: MarginBatch, replica: int = 0) -> None:
        """Corrections of one mini-batch: ``d_i = (p̂_i - h_i) ∇ψ m_i`` (grad) or ``(p̂_i - h_i) m_i`` (loss)."""
        if not self.config.adaptive:
            return
        diff = batch.human_pseudo_labels[replica] - batch.human_labels[replica]
        if self.space == "loss":
            self.observe(diff * batch.human_margins[replica], batch.human_ids)
            return
        if batch.human_grads is None:
            raise ValueError("space='grad' needs per-example probe gradients of the human margins")
        self.observe(diff.unsqueeze(-1) * batch.human_grads[replica], batch.human_ids)
        if self.config.include_pseudo_var and batch.pseudo_grads is not None:
            resid = torch.sigmoid(batch.pseudo_margins[replica]) - batch.pseudo_labels[replica]
            self.observe_pseudo(resid.unsqueeze(-1) * batch.pseudo_grads[replica])

    def statistics(self) -> tuple[int, torch.Tensor, float]:
        """Sufficient statistics of the current window (for an all-reduce across ranks)."""
        if len(self._window) == 0:
            raise ValueError("no corrections observed yet")
        return _statistics(self._window.rows())  # rows were checked when they entered the window

    def update_correction(self, statistics: tuple[int, torch.Tensor, float] | None = None) -> float:
        """Recompute ``ĉ`` from the window (or from given, e.g. all-reduced, statistics) and smooth ``c``.

        ``c <- ema * c + (1 - ema) * ĉ``. Fixed corrections and windows with fewer than 2 rows leave
        ``c`` unchanged. Returns the new ``c``.
        """
        if not self.config.adaptive:
            return self._c
        if statistics is None:
            if len(self._window) < 2:
                return self._c
            statistics = self.statistics()
        count, total, total_sq = statistics
        if count < 2:
            return self._c
        cfg = self.config
        diag = correction_from_statistics(count, total, total_sq, self.n, cfg.c_min, cfg.c_max)
        self._c = cfg.ema * self._c + (1 - cfg.ema) * diag["c_hat"]
        self._c = min(max(self._c, cfg.c_min), cfg.c_max)
        mse = (1 - self._c) ** 2 * diag["bias_sq"] + self._c**2 * diag["var_term"]
        if cfg.include_pseudo_var and self._pseudo_trace is not None:
            diag["pseudo_var_term"] = self._pseudo_trace / self.N
            mse += diag["pseudo_var_term"]
        diag["mse"] = mse
        diag["c"] = self._c
        self._diag = diag
        self.history.append(self._c)
        return self._c

    def diagnostics(self) -> dict[str, float]:
        """Last estimate: ``c``, ``c_hat``, ``mu_sq``, ``bias_sq``, ``trace``, ``var_term``, ``mse``, ``window``."""
        return dict(self._diag) if self._diag else {"c": self._c}


class PPIPlusPlusObjective(RectifiedObjective):
    """PPI++ baseline on the training loss: ``L = mean_H ℓ(h) + λ [mean_P ℓ(p̂) - mean_H ℓ(p̂)]``.

    ``λ`` is re-estimated every call of :meth:`update_correction` with :func:`ppi_pp_lambda` from the
    last ``window`` human and pseudo examples (no smoothing, as in PPI++). ``lam=1`` fixed gives the
    plain PPI-rectified loss. Gradients of ``ℓ(m, q)`` are ``(σ(m) - q) ∇ψ m``.

    Parameters
    ----------
    n_human_total, n_pseudo_total : int
    window : int
        Examples of each kind kept for the estimate.
    lam_init : float
        ``λ`` before the first estimate.
    adaptive : bool
        False keeps ``λ = lam_init``.
    clip : bool
        Clip ``λ̂`` to [0, 1].
    """

    name = "ppi_pp"

    def __init__(
        self,
        n_human_total: int,
        n_pseudo_total: int,
        window: int = 256,
        lam_init: float = 1.0,
        adaptive: bool = True,
        clip: bool = True,
    ) -> None:
        self.n = check_int("n_human_total", n_human_total, low=1)
        self.N = check_int("n_pseudo_total", n_pseudo_total, low=1)
        if adaptive and n_human_total < 2:
            raise ValueError(f"adaptive PPI++ needs n_human_total >= 2, got {n_human_total}")
        self.window = check_int("window", window, low=2)
        self.lam = check_float("lam_init", lam_init)
        self.adaptive, self.clip = adaptive, clip
        self.needs = ("human", "pseudo") if adaptive else ()
        self._gt, self._gh, self._gp = RowWindow(window), RowWindow(window), RowWindow(window)
        self.history: list[float] = [self.lam]

    @property
    def c(self) -> float:
        return self.lam

    def weights(self):
        return self.lam, 1.0, -self.lam

    def observe_batch(self, batch: MarginBatch, replica: int = 0) -> None:
        if not self.adaptive:
            return
        if batch.human_grads is None or batch.pseudo_grads is None:
            raise ValueError("PPI++ needs per-example probe gradients of human and pseudo margins")
        sh = torch.sigmoid(batch.human_margins[replica]).unsqueeze(-1)
        gh = batch.human_grads[replica]
        self._gt.push((sh - batch.human_labels[replica].unsqueeze(-1)) * gh, batch.human_ids)
        self._gh.push((sh - batch.human_pseudo_labels[replica].unsqueeze(-1)) * gh, batch.human_ids)
        sp = torch.sigmoid(batch.pseudo_margins[replica]).unsqueeze(-1)
        self._gp.push(
            (sp - batch.pseudo_labels[replica].unsqueeze(-1)) * batch.pseudo_grads[replica], batch.pseudo_ids
        )

    def update_correction(self) -> float:
        if not self.adaptive or len(self._gt) < 2:
            return self.lam
        gt, gh, gp = self._gt.rows(), self._gh.rows(), self._gp.rows()
        if gt.shape != gh.shape:  # (rows were checked when they entered the windows)
            raise ValueError(f"the human windows hold {tuple(gt.shape)} and {tuple(gh.shape)} rows")
        if len(self._gp) == 0:
            gp = gh.new_zeros(0, gh.shape[1])
        self.lam = _ppi_pp_lambda(gt, gh, gp, self.n, self.N, self.clip)
        self.history.append(self.lam)
        return self.lam

    def diagnostics(self) -> dict[str, float]:
        return {"lambda": self.lam}


OBJECTIVES = ("abc", "ppi", "ppi_pp", "pseudo_only", "human_only", "pooled", "fixed")


def make_objective(
    name: str,
    n_human_total: int,
    n_pseudo_total: int,
    config: ABCConfig | None = None,
    c: float | None = None,
) -> RectifiedObjective:
    """Build an objective by name: ``"abc"`` (adaptive c), ``"fixed"`` (ABC with fixed ``c``), ``"ppi"``
    (c = 1), ``"ppi_pp"``, ``"pseudo_only"``, ``"human_only"`` or ``"pooled"``.

    ``config`` supplies the window and update settings (its ``correction`` is overridden for
    ``"abc"``, ``"fixed"`` and ``"ppi"``).
    """
    check_choice("name", name, OBJECTIVES)
    config = ABCConfig() if config is None else config
    if name == "abc":
        cfg = ABCConfig(**{**config.__dict__, "correction": "adaptive"})
        return ABCAlignObjective(cfg, n_human_total, n_pseudo_total)
    if name in ("fixed", "ppi"):
        value = 1.0 if name == "ppi" else c
        if value is None:
            raise ValueError("name='fixed' needs the correction strength c")
        cfg = ABCConfig(**{**config.__dict__, "correction": float(value)})
        obj = ABCAlignObjective(cfg, n_human_total, n_pseudo_total)
        obj.name = "ppi" if name == "ppi" else f"fixed_c{value:g}"
        return obj
    if name == "ppi_pp":
        return PPIPlusPlusObjective(n_human_total, n_pseudo_total, window=config.window)
    if name == "pooled":
        return PooledObjective(n_human_total, n_pseudo_total)
    return PseudoOnlyObjective() if name == "pseudo_only" else HumanOnlyObjective()


def rectified_loss_from_margins(
    margin: torch.Tensor,
    human_labels: torch.Tensor,
    pseudo_labels: torch.Tensor,
    is_human: torch.Tensor,
    objective: RectifiedObjective,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Split a mixed batch by ``is_human`` and apply ``objective`` to its per-example losses.

    Parameters
    ----------
    margin : Tensor ``(B,)``
        Score of response 1 minus response 2 for every pair.
    human_labels : Tensor ``(B,)``
        Human probability that response 1 wins (read on human rows only).
    pseudo_labels : Tensor ``(B,)``
        Judge probability that response 1 wins (every row).
    is_human : Tensor ``(B,)`` bool
    objective : RectifiedObjective

    Returns
    -------
    (loss, parts) with ``parts`` the per-example loss vectors ``loss_pseudo``, ``loss_human_true``,
    ``loss_human_pseudo``.
    """
    if not isinstance(objective, RectifiedObjective):
        raise TypeError(
            f"objective must be a RectifiedObjective (e.g. ABCAlignObjective), got {type(objective).__name__}"
        )
    _check_real("margin", margin, ndim=1)
    for name, t in (("human_labels", human_labels), ("pseudo_labels", pseudo_labels), ("is_human", is_human)):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(margin.shape):
            raise ValueError(
                f"{name} must have the margin's shape {tuple(margin.shape)}, got {tuple(getattr(t, 'shape', ()))}"
            )
        if t.is_meta or t.device != margin.device:
            raise ValueError(f"{name} must hold data on the margin's device {margin.device}, got {t.device}")
    _check_labels("pseudo_labels", pseudo_labels)
    human = is_human.bool()
    _check_labels("human_labels", human_labels[human])
    parts = {
        "loss_pseudo": soft_logistic_loss(margin[~human], pseudo_labels[~human]),
        "loss_human_true": soft_logistic_loss(margin[human], human_labels[human]),
        "loss_human_pseudo": soft_logistic_loss(margin[human], pseudo_labels[human]),
    }
    return objective(**parts), parts


__all__ = [
    "ABCConfig",
    "ABCAlignObjective",
    "HumanOnlyObjective",
    "MarginBatch",
    "OBJECTIVES",
    "PPIPlusPlusObjective",
    "PooledObjective",
    "PseudoOnlyObjective",
    "RectifiedObjective",
    "correction_from_statistics",
    "correction_statistics",
    "dpo_margin",
    "estimate_correction_strength",
    "make_objective",
    "ppi_pp_lambda",
    "preference_margin_rm",
    "rectified_loss_from_margins",
    "soft_logistic_loss",
]

"""Spiking neurons with surrogate gradients (IF, LIF, PLIF) for SGNNBench.

Discrete-time dynamics per node and channel, input current :math:`I_t`, membrane :math:`v`,
threshold :math:`\\theta`, reset value :math:`v_r`:

.. math::
    \\text{IF:}\\quad v \\leftarrow v + I_t, \\qquad
    \\text{LIF:}\\quad v \\leftarrow v + \\frac{I_t - (v - v_r)}{\\tau}, \\qquad
    s_t = H(v - \\theta), \\qquad v \\leftarrow v (1 - s_t) + s_t v_r .

PLIF learns :math:`\\tau = 1 + \\mathrm{softplus}(w)` (so :math:`\\tau > 1`; parametrisation
inferred). The optional adaptive threshold raises the threshold after each spike and lets the raise
decay, :math:`b \\leftarrow \\kappa b + \\gamma s_t`, :math:`\\theta_t = \\theta_0 + b` (gamma 0.2,
kappa 0.7; the benchmark code's rule written as an increment over the base threshold so that it does
not decay to zero). The Heaviside step :math:`H` is exact in the forward pass; its derivative is
replaced by a surrogate ``g'(x)`` (``x = v - theta``) chosen by name:

==============  ====================================================================  ==========
name            surrogate derivative :math:`g'(x)`                                    default a
==============  ====================================================================  ==========
``sigmoid``     :math:`a\\,\\sigma(a x)(1 - \\sigma(a x))`                                 1
``triangle``    :math:`a \\max(0, 1 - a|x|)`                                             1
``arctan``      :math:`\\frac{a}{2}\\,\\frac{1}{1 + (\\frac{\\pi}{2} a x)^2}`                  10
``superspike``  :math:`(1 + a|x|)^{-2}`                                                 10
``multigauss``  :math:`1.15\\,\\mathcal N(x; 0, \\sigma) - 0.15\\,\\mathcal N(x; \\pm 6\\sigma, 6\\sigma)`,
                :math:`\\sigma = 0.5 / a`                                                1
==============  ====================================================================  ==========

Membrane states persist across calls (time steps) until :meth:`IF.reset`; spike statistics for
firing rates are kept separately and cleared by :meth:`IF.reset_stats`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from neurips26.common.checks import check_choice, check_float

__all__ = [
    "SURROGATES",
    "DEFAULT_ALPHA",
    "surrogate_grad",
    "surrogate_spike",
    "IF",
    "LIF",
    "PLIF",
    "make_neuron",
]

SURROGATES = ("sigmoid", "triangle", "arctan", "superspike", "multigauss")
DEFAULT_ALPHA = {"sigmoid": 1.0, "triangle": 1.0, "arctan": 10.0, "superspike": 10.0, "multigauss": 1.0}


def _gauss(x: Tensor, mu: float, sigma: float) -> Tensor:
    return torch.exp(-((x - mu) ** 2) / (2 * sigma**2)) / (math.sqrt(2 * math.pi) * sigma)


def surrogate_grad(x: Tensor, name: str, alpha: float) -> Tensor:
    """Closed-form surrogate derivative ``g'(x)`` of the table in the module docstring."""
    check_choice("surrogate", name, SURROGATES)
    if name == "sigmoid":
        s = torch.sigmoid(alpha * x)
        return alpha * s * (1 - s)
    if name == "triangle":
        return alpha * (1 - alpha * x.abs()).clamp_min(0)
    if name == "arctan":
        return alpha / 2 / (1 + (math.pi / 2 * alpha * x) ** 2)
    if name == "superspike":
        return 1.0 / (1 + alpha * x.abs()) ** 2
    sigma = 0.5 / alpha
    return (
        1.15 * _gauss(x, 0.0, sigma)
        - 0.15 * _gauss(x, 6 * sigma, 6 * sigma)
        - 0.15 * _gauss(x, -6 * sigma, 6 * sigma)
    )


class _Spike(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, name: str, alpha: float) -> Tensor:
        ctx.save_for_backward(x)
        ctx.name, ctx.alpha = name, alpha
        return (x >= 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        (x,) = ctx.saved_tensors
        return grad_out * surrogate_grad(x, ctx.name, ctx.alpha), None, None


def surrogate_spike(x: Tensor, name: str = "sigmoid", alpha: float | None = None) -> Tensor:
    """Heaviside ``H(x) = 1[x >= 0]`` forward, surrogate derivative backward.

    Shapes: any -> same shape, values in ``{0, 1}``.
    """
    check_choice("surrogate", name, SURROGATES)
    a = DEFAULT_ALPHA[name] if alpha is None else check_float("alpha", alpha, 0.0, low_open=True)
    return _Spike.apply(x, name, a)


class IF(nn.Module):
    """Integrate-and-fire neuron: :math:`v \\leftarrow v + I_t`, spike at threshold, hard reset.

    Parameters
    ----------
    v_threshold : float
        Base threshold :math:`\\theta_0`.
    v_reset : float
        Reset (and initial) membrane value :math:`v_r`.
    surrogate : str
        One of :data:`SURROGATES`.
    alpha : float, optional
        Surrogate sharpness (default per name, :data:`DEFAULT_ALPHA`).
    adaptive_threshold : bool
        Enable :math:`b \\leftarrow \\kappa b + \\gamma s`, :math:`\\theta = \\theta_0 + b`.
    gamma, kappa : float
        Adaptive-threshold constants (0.2, 0.7).
    detach_reset : bool
        Stop gradients through the reset term (common SNN trick; off by default).

    Shapes
    ------
    ``current [*]`` -> spikes ``[*]`` in ``{0, 1}`` (same dtype); the state keeps that shape.
    """

    def __init__(
        self,
        v_threshold: float = 1.0,
        v_reset: float = 0.0,
        surrogate: str = "sigmoid",
        alpha: float | None = None,
        adaptive_threshold: bool = False,
        gamma: float = 0.2,
        kappa: float = 0.7,
        detach_reset: bool = False,
    ) -> None:
        super().__init__()
        self.v_threshold = check_float("v_threshold", v_threshold)
        self.v_reset = check_float("v_reset", v_reset)
        if self.v_reset >= self.v_threshold:
            raise ValueError(f"v_reset ({v_reset}) must be below v_threshold ({v_threshold})")
        self.surrogate = check_choice("surrogate", surrogate, SURROGATES)
        self.alpha = (
            DEFAULT_ALPHA[surrogate] if alpha is None else check_float("alpha", alpha, 0.0, low_open=True)
        )
        self.adaptive_threshold = bool(adaptive_threshold)
        self.gamma = check_float("gamma", gamma, 0.0)
        self.kappa = check_float("kappa", kappa, 0.0, 1.0)
        self.detach_reset = bool(detach_reset)
        self.v: Tensor | None = None
        self.b: Tensor | None = None
        self.reset_stats()

    def extra_repr(self) -> str:
        return f"v_threshold={self.v_threshold}, v_reset={self.v_reset}, surrogate={self.surrogate}, alpha={self.alpha}"

    def charge(self, v: Tensor, current: Tensor) -> Tensor:
        """Membrane update before the spike (IF: pure integration)."""
        return v + current

    def forward(self, current: Tensor) -> Tensor:
        if not isinstance(current, Tensor) or not torch.is_floating_point(current):
            raise TypeError("current must be a floating-point tensor")
        if current.is_meta:  # (no finiteness scan here: this runs T times per layer in the training loop)
            raise ValueError("current is a meta tensor (no data); pass a materialised tensor")
        if self.v is None or self.v.shape != current.shape:
            if self.v is not None:
                raise ValueError(
                    f"current shape {tuple(current.shape)} differs from the state {tuple(self.v.shape)}; call reset()"
                )
            self.v = torch.full_like(current, self.v_reset)
            self.b = torch.zeros_like(current)
        v = self.charge(self.v, current)
        theta = self.v_threshold + self.b if self.adaptive_threshold else self.v_threshold
        spike = _Spike.apply(v - theta, self.surrogate, self.alpha)
        s_reset = spike.detach() if self.detach_reset else spike
        self.v = v * (1 - s_reset) + s_reset * self.v_reset
        if self.adaptive_threshold:
            self.b = self.kappa * self.b + self.gamma * spike.detach()
        self.spike_sum += float(spike.detach().sum())
        self.num_seen += spike.numel()
        return spike

    def reset(self) -> None:
        """Clear the membrane (and adaptive-threshold) state; the next call starts from ``v_reset``."""
        self.v = None
        self.b = None

    def reset_stats(self) -> None:
        """Clear the firing-rate counters."""
        self.spike_sum = 0.0
        self.num_seen = 0

    @property
    def firing_rate(self) -> float:
        """Mean spike probability over every element and step since :meth:`reset_stats` (0 if none)."""
        return self.spike_sum / self.num_seen if self.num_seen else 0.0


class LIF(IF):
    """Leaky integrate-and-fire: :math:`v \\leftarrow v + (I_t - (v - v_r))/\\tau`; ``tau = 1`` is memoryless.

    Parameters as :class:`IF` plus ``tau >= 1`` (default 2.0).

    Shapes
    ------
    ``current [*]`` -> spikes ``[*]`` in ``{0, 1}`` (same dtype), as :class:`IF`.
    """

    def __init__(self, tau: float = 2.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.tau = check_float("tau", tau, 1.0)

    def _tau(self) -> Tensor | float:
        return self.tau

    def charge(self, v: Tensor, current: Tensor) -> Tensor:
        return v + (current - (v - self.v_reset)) / self._tau()


class PLIF(LIF):
    """Parametric LIF: learnable :math:`\\tau = 1 + \\mathrm{softplus}(w)`, initialised at ``tau``.

    ``w`` is a scalar parameter shared by all nodes and channels.

    Shapes
    ------
    ``current [*]`` -> spikes ``[*]`` in ``{0, 1}`` (same dtype), as :class:`IF`.
    """

    def __init__(self, tau: float = 2.0, **kwargs) -> None:
        super().__init__(tau=check_float("tau", tau, 1.0, low_open=True), **kwargs)
        self.w = nn.Parameter(torch.tensor(math.log(math.expm1(tau - 1.0))))

    def _tau(self) -> Tensor:
        return 1.0 + F.softplus(self.w)

    @property
    def learned_tau(self) -> float:
        return float(self._tau().detach())


NEURONS = {"IF": IF, "LIF": LIF, "PLIF": PLIF}


def make_neuron(name: str, **kwargs) -> IF:
    """Build a neuron by name (``"IF"``, ``"LIF"``, ``"PLIF"``); ``tau`` is dropped for IF."""
    check_choice("neuron", name, tuple(NEURONS))
    if name == "IF":
        kwargs.pop("tau", None)
    return NEURONS[name](**kwargs)

r"""ASAP: adaptive sliding-mode, aggregation-rule-agnostic model poisoning to a target degradation.

Paper
-----
*ASAP* (NeurIPS 2026; seed file ``004_01f475bc147a144d.txt``, paragraph 7, abstract beginning "Federated
Learning (FL) is vulnerable to"). A research tool for evaluating defences: instead of maximising damage, the
colluding malicious clients steer the global model's accuracy ``y_t`` to a chosen level ``y*`` and hold it
there, without knowing the server's aggregation rule (AGR). Public: only the abstract. Inferred: the scalar
control model, the adaptation laws and the anti-windup below (the paper's exact equations are not public).

Math
----
Control view (scalar plant, reconstructed): :math:`\alpha_t` is the attack magnitude, :math:`b_t > 0` an
unknown gain and :math:`d_t` the unknown, time-varying benign-training drift;

.. math::

    y_{t+1} = y_t - b_t \alpha_t + d_t, \qquad e_t = y_t - y^*, \qquad
    s_t = e_t + \lambda_I \sum_{j<t} e_j \quad (\text{PI sliding surface}),

.. math::

    \phi(t) = \big[1, \cos(2\pi t/P), \sin(2\pi t/P), \dots, \cos(2\pi K t/P), \sin(2\pi K t/P)\big],
    \qquad \hat d_t = \theta_t^\top \phi(t) \quad (\text{finite Fourier-basis estimate}),

.. math::

    \alpha_t = \mathrm{clip}\Big(\frac{q s_t + \varepsilon\,\mathrm{sat}(s_t/\Phi) + \lambda_I e_t + \hat d_t}
        {\hat b_t},\ \alpha_{min},\ \alpha_{max}\Big),

so that the predicted surface follows the reaching law
:math:`s_{t+1} = (1 - q) s_t - \varepsilon\,\mathrm{sat}(s_t/\Phi)`. After observing :math:`y_{t+1}` the
realised disturbance :math:`r_t = (y_{t+1} - y_t) + \hat b_t \alpha_t` drives the normalised LMS law
(projected onto :math:`\|\theta\| \le \theta_{max}`) and the gain law:

.. math::

    \theta \leftarrow \theta + \Gamma \phi\, \frac{r_t - \theta^\top \phi}{1 + \|\phi\|^2}, \qquad
    \hat b \leftarrow \mathrm{Proj}_{[b_{min}, b_{max}]}\Big(\hat b - \gamma_b\, \alpha\,
        \frac{y_{t+1} - y_t + \hat b \alpha - \hat d}{1 + \alpha^2}\Big).

Anti-windup (inferred): the integral of ``e`` is frozen while ``alpha`` sits on a bound.

Malicious update (AGR agnostic): from the attackers' own honest updates ``g_j`` (``m x d``),
``mu = mean_j g_j``, ``sigma = std_j g_j`` and a direction ``v`` (``"std"``: ``-sigma * sign(mu)``,
``"unit"``: ``-mu/|mu|``, ``"sign"``: ``-sign(mu)``); every malicious client sends

.. math::

    u_t = \mu + \alpha_t v, \qquad \mu = \frac1m \sum_j g_j, \qquad \sigma = \mathrm{std}_j\, g_j .

``alpha_max`` is the MinMax stealth bound, the largest :math:`\alpha` with
:math:`\max_j \|u - g_j\| \le \max_{i,j} \|g_i - g_j\|`; ``alpha_min = -alpha_max / 2`` lets the attacker push
accuracy back up after an overshoot.

Baselines (same direction conventions, same honest estimates): LIE (Baruch et al., 2019:
``u = mu + z_max v`` with ``z_max = Phi^{-1}((n - s)/n)``, ``s = floor(n/2 + 1) - m``), MinMax and
MinSum (Shejwalkar & Houmansadr, NDSS 2021: the largest ``gamma`` keeping ``u`` within the maximum
pairwise distance / the maximum sum of squared distances of the honest updates), and FedSA-lite
(the same sliding-mode law with a fixed gain and no disturbance estimate).

Metrics: attack round complexity
``R_eps = min{r : |y_{t0+r+j} - y*| <= eps for j = 0..W-1}`` (``inf`` if never) and target deviation
(mean ``|y_t - y*|`` from ``t0 + R_eps`` on, or over all attacked rounds).

The attack interface and the baselines (LIE, MinMax, MinSum, Fang et al.'s Krum and trimmed-mean
attacks, FMPA) live in :mod:`neurips26.federated.attacks` and are re-exported here.

AGR agnosticism: :class:`ASAPAttack` and :class:`ASMCController` read only the round, the global
model, the attackers' own honest updates and the objective on ``D_att``
(:class:`~neurips26.federated.attacks.AttackContext` carries nothing about the server's rule);
``tests/federated/test_asap_agnostic.py`` checks this.

Nothing here imports Flower; :mod:`neurips26.federated.flower` wraps these attacks in a malicious
``ClientApp``.

Shapes
------
``honest_updates``: ``(m, d)``; ``global_params``: ``(d,)``; ``craft`` returns ``(m, d)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.federated.attacks import (
    DIRECTIONS,
    FMPA,
    LIE,
    Attack,
    AttackContext,
    FangKrum,
    FangTrimmedMean,
    MinMax,
    MinSum,
    NoAttack,
    attack_direction,
    fang_krum_lambda_max,
    lie_z_max,
    minmax_bound,
    minsum_bound,
)

__all__ = [
    "ATTACKS",
    "ASAPAttack",
    "ASMCController",
    "Attack",
    "AttackContext",
    "FMPA",
    "FangKrum",
    "FangTrimmedMean",
    "FedSALite",
    "FourierEstimator",
    "LIE",
    "MinMax",
    "MinSum",
    "NoAttack",
    "attack_direction",
    "fang_krum_lambda_max",
    "lie_z_max",
    "make_attack",
    "minmax_bound",
    "minsum_bound",
    "round_complexity",
    "target_deviation",
]


def _sat(x: float) -> float:
    return max(-1.0, min(1.0, x))


class FourierEstimator:
    """Finite Fourier-basis estimate ``d^(t) = theta^T phi(t)`` with a projected normalised LMS law.

    Parameters
    ----------
    order : int
        Number of harmonics ``K`` (basis size ``2K + 1``); 0 gives a constant-offset estimate.
    period : float
        Period ``P`` of the basis.
    gain : float
        Adaptation gain ``Gamma`` in ``(0, 2)`` (normalised LMS is stable there).
    theta_max : float
        Projection radius of ``theta``.
    """

    def __init__(self, order: int = 3, period: float = 100.0, gain: float = 0.5, theta_max: float = 1.0):
        self.order = check_int("order", order, low=0)
        self.period = check_float("period", period, 0.0, low_open=True)
        self.gain = check_float("gain", gain, 0.0, 2.0, high_open=True)
        self.theta_max = check_float("theta_max", theta_max, 0.0, low_open=True)
        self.theta = [0.0] * (2 * self.order + 1)

    def basis(self, t: float) -> list[float]:
        """``phi(t)``, length ``2K + 1``."""
        out = [1.0]
        for k in range(1, self.order + 1):
            w = 2.0 * math.pi * k * t / self.period
            out += [math.cos(w), math.sin(w)]
        return out

    def predict(self, t: float) -> float:
        """``theta^T phi(t)``."""
        return sum(a * b for a, b in zip(self.theta, self.basis(t)))

    def update(self, t: float, target: float) -> None:
        """One projected normalised-LMS step towards ``target`` observed at time ``t``."""
        phi = self.basis(t)
        err = target - sum(a * b for a, b in zip(self.theta, phi))
        norm = 1.0 + sum(p * p for p in phi)
        self.theta = [a + self.gain * p * err / norm for a, p in zip(self.theta, phi)]
        size = math.sqrt(sum(a * a for a in self.theta))
        if size > self.theta_max:
            self.theta = [a * self.theta_max / size for a in self.theta]


@dataclass
class ASMCController:
    """Adaptive sliding-mode controller of a scalar output (framework free).

    Call :meth:`step` with the current output ``y_t`` to get ``alpha_t``, then :meth:`observe` with
    ``y_{t+1}`` to adapt the disturbance and gain estimates. ``adaptive=False`` and
    ``fourier_order=None`` turn it into the non-adaptive FedSA-style law.

    Parameters
    ----------
    target : float
        Set point ``y*``.
    q : float
        Reaching-law contraction in ``(0, 1]``.
    eps : float
        Reaching-law switching gain (>= 0).
    boundary : float
        Boundary-layer width ``Phi`` (> 0) of the saturation replacing ``sign``.
    lambda_i : float
        Integral weight of the PI surface (>= 0; 0 gives ``s = e``).
    fourier_order : int or None
        Harmonics ``K`` of the disturbance estimate; ``None`` disables the estimate (``d^ = 0``).
    period : float
        Fourier period ``P`` in rounds.
    gamma_theta, gamma_b : float
        Adaptation gains of ``theta`` and ``b^``.
    b_init : float
        Initial gain estimate ``b^_0`` (> 0).
    b_bounds : tuple of float
        Projection interval ``[b_min, b_max]`` of ``b^``.
    theta_max : float
        Projection radius of ``theta``.
    adaptive : bool
        Adapt ``b^`` (and ``theta``) from observations.
    alpha_min, alpha_max : float or None
        Default control bounds, overridable per :meth:`step`.
    anti_windup : bool
        Freeze the integral while ``alpha`` is saturated.
    """

    target: float
    q: float = 0.5
    eps: float = 0.02
    boundary: float = 0.02
    lambda_i: float = 0.1
    fourier_order: int | None = 3
    period: float = 100.0
    gamma_theta: float = 0.5
    gamma_b: float = 0.5
    b_init: float = 0.05
    b_bounds: tuple[float, float] = (1e-3, 10.0)
    theta_max: float = 1.0
    adaptive: bool = True
    alpha_min: float | None = None
    alpha_max: float | None = None
    anti_windup: bool = True
    history: list[dict[str, float]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        check_float("target", self.target)
        check_float("q", self.q, 0.0, 1.0, low_open=True)
        check_float("eps", self.eps, 0.0)
        check_float("boundary", self.boundary, 0.0, low_open=True)
        check_float("lambda_i", self.lambda_i, 0.0)
        check_float("period", self.period, 0.0, low_open=True)
        check_float("gamma_b", self.gamma_b, 0.0)
        check_float("gamma_theta", self.gamma_theta, 0.0, 2.0, high_open=True)  # the Fourier estimator's gain
        lo, hi = self.b_bounds
        check_float("b_bounds[0]", lo, 0.0, low_open=True)
        check_float("b_bounds[1]", hi, lo)
        check_float("b_init", self.b_init, lo, hi)
        if self.alpha_min is not None and self.alpha_max is not None and self.alpha_min > self.alpha_max:
            raise ValueError(f"alpha_min={self.alpha_min} must not exceed alpha_max={self.alpha_max}")
        self.fourier = (
            None
            if self.fourier_order is None
            else FourierEstimator(self.fourier_order, self.period, self.gamma_theta, self.theta_max)
        )
        self.b_hat = float(self.b_init)
        self.integral = 0.0
        self.t0: int | None = None
        self._pending: dict[str, float] | None = None

    # --- quantities -------------------------------------------------------------------------
    def sliding(self, y: float) -> float:
        """Sliding variable ``s = e + lambda_I * integral`` for output ``y``."""
        return (y - self.target) + self.lambda_i * self.integral

    def disturbance(self, t: int) -> float:
        """Current estimate ``d^_t`` (0 without a Fourier estimator)."""
        if self.fourier is None or self.t0 is None:
            return 0.0
        return self.fourier.predict(t - self.t0)

    # --- control ----------------------------------------------------------------------------
    def step(self, y: float, t: int, alpha_min: float | None = None, alpha_max: float | None = None) -> float:
        """Control input ``alpha_t`` for output ``y`` at round ``t``.

        If a previous step is still waiting for its outcome, ``y`` is first used as that outcome
        (so a loop may call only :meth:`step` every round).
        """
        y = check_float("y", y)
        check_int("t", t)
        if self._pending is not None:
            self.observe(y)
        if self.t0 is None:
            self.t0 = t
        lo = self.alpha_min if alpha_min is None else alpha_min
        hi = self.alpha_max if alpha_max is None else alpha_max
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"alpha_min={lo} must not exceed alpha_max={hi}")
        e = y - self.target
        s = self.sliding(y)
        d_hat = self.disturbance(t)
        raw = (self.q * s + self.eps * _sat(s / self.boundary) + self.lambda_i * e + d_hat) / self.b_hat
        alpha = raw
        if hi is not None:
            alpha = min(alpha, hi)
        if lo is not None:
            alpha = max(alpha, lo)
        saturated = alpha != raw
        if not (self.anti_windup and saturated):
            self.integral += e
        self._pending = {"y": y, "t": float(t), "alpha": alpha, "d_hat": d_hat}
        self.history.append(
            {"t": float(t), "y": y, "e": e, "s": s, "alpha": alpha, "b_hat": self.b_hat, "d_hat": d_hat}
        )
        return alpha

    def observe(self, y_next: float) -> None:
        """Adapt ``theta`` and ``b^`` from the outcome ``y_{t+1}`` of the last :meth:`step`."""
        y_next = check_float("y_next", y_next)
        if self._pending is None:
            return
        p, self._pending = self._pending, None
        if not self.adaptive:
            return
        dy = y_next - p["y"]
        if self.fourier is not None and self.t0 is not None:
            self.fourier.update(p["t"] - self.t0, dy + self.b_hat * p["alpha"])
        err = dy + self.b_hat * p["alpha"] - p["d_hat"]
        b_new = self.b_hat - self.gamma_b * p["alpha"] * err / (1.0 + p["alpha"] ** 2)
        self.b_hat = min(max(b_new, self.b_bounds[0]), self.b_bounds[1])

    # --- persistence (Flower ClientApp context.state) ----------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Adapted state as plain floats/lists (fits a Flower ``ConfigRecord``)."""
        pend = self._pending or {}
        return {
            "b_hat": self.b_hat,
            "integral": self.integral,
            "t0": -1 if self.t0 is None else int(self.t0),
            "theta": list(self.fourier.theta) if self.fourier is not None else [],
            "pending": [pend.get(k, 0.0) for k in ("y", "t", "alpha", "d_hat")],
            "has_pending": self._pending is not None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        self.b_hat = float(state["b_hat"])
        self.integral = float(state["integral"])
        self.t0 = None if int(state["t0"]) < 0 else int(state["t0"])
        if self.fourier is not None:
            self.fourier.theta = [float(v) for v in state["theta"]]
        if state["has_pending"]:
            y, t, a, d = (float(v) for v in state["pending"])
            self._pending = {"y": y, "t": t, "alpha": a, "d_hat": d}
        else:
            self._pending = None


class ASAPAttack(Attack):
    """ASAP: adaptive sliding-mode control of the global model's accuracy to ``target``.

    Each round: observe ``y_t`` on ``D_att`` (through ``ctx.observe``), let :class:`ASMCController`
    pick ``alpha_t`` within the MinMax stealth bound ``[alpha_min, alpha_max]`` and send
    ``u_t = mu + alpha_t v`` from every malicious client.

    Parameters
    ----------
    target : float
        Accuracy objective ``y*`` in ``[0, 1]``.
    q, eps, boundary, lambda_i, fourier_order, period, gamma_theta, gamma_b, b_init, b_bounds
        Controller parameters (see :class:`ASMCController`).
    direction : {"std", "unit", "sign"}
        Perturbation direction.
    alpha_max, alpha_min : float, optional
        Fixed bounds; by default ``alpha_max`` is the per-round MinMax bound and
        ``alpha_min = -alpha_max / 2``.
    adaptive : bool
        ``False`` (with ``fourier_order=None``) gives FedSA-lite.
    """

    name = "ASAP"

    def __init__(
        self,
        target: float,
        q: float = 0.5,
        eps: float = 0.02,
        boundary: float = 0.02,
        lambda_i: float = 0.1,
        fourier_order: int | None = 3,
        period: int = 100,
        gamma_theta: float = 0.5,
        gamma_b: float = 0.5,
        b_init: float = 0.05,
        b_bounds: tuple[float, float] = (1e-3, 10.0),
        direction: str = "std",
        alpha_max: float | None = None,
        alpha_min: float | None = None,
        adaptive: bool = True,
    ) -> None:
        check_float("target", target, 0.0, 1.0)
        self.direction = check_choice("direction", direction, DIRECTIONS)
        self.fixed_alpha_max = alpha_max
        self.fixed_alpha_min = alpha_min
        self.controller = ASMCController(
            target=target, q=q, eps=eps, boundary=boundary, lambda_i=lambda_i, fourier_order=fourier_order,
            period=period, gamma_theta=gamma_theta, gamma_b=gamma_b, b_init=b_init, b_bounds=b_bounds,
            adaptive=adaptive,
        )  # fmt: skip
        self.alphas: list[float] = []
        self.bounds: list[float] = []

    @property
    def target(self) -> float:
        return self.controller.target

    def craft(self, ctx: AttackContext) -> torch.Tensor:
        if ctx.observe is None:
            raise ValueError("ASAPAttack needs ctx.observe (the objective on the attacker's held-out data)")
        m = ctx.honest_updates.shape[0]
        v = attack_direction(ctx.honest_updates, self.direction)
        hi = self.fixed_alpha_max if self.fixed_alpha_max is not None else minmax_bound(ctx.honest_updates, v)
        lo = self.fixed_alpha_min if self.fixed_alpha_min is not None else -hi / 2.0
        y = float(ctx.observe(ctx.global_params))
        alpha = self.controller.step(y, ctx.round, alpha_min=lo, alpha_max=hi)
        self.alphas.append(alpha)
        self.bounds.append(hi)
        return self._repeat(ctx.honest_updates.mean(dim=0) + alpha * v, m)

    def feedback(self, y_next: float) -> None:
        self.controller.observe(y_next)

    def state_dict(self) -> dict[str, Any]:
        return self.controller.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.controller.load_state_dict(state)


class FedSALite(ASAPAttack):
    """FedSA-lite: the same sliding-mode law with a fixed gain ``b_init`` and no disturbance estimate."""

    name = "FedSA-lite"

    def __init__(self, target: float, **kwargs: Any) -> None:
        kwargs.setdefault("fourier_order", None)
        kwargs.setdefault("adaptive", False)
        super().__init__(target, **kwargs)


ATTACKS = ("none", "LIE", "MinMax", "MinSum", "Fang-Krum", "Fang-Trim", "FMPA", "FedSA-lite", "ASAP")
"""Attack names :func:`make_attack` accepts."""


def make_attack(name: str, target: float = 0.5, **kwargs: Any) -> Attack:
    """Build an attack by name (one of :data:`ATTACKS`); ``target`` goes to the target-tracking ones.

    ``FedSA-lite``, ``ASAP`` and ``FMPA`` track ``target``; the others ignore it.
    """
    table: dict[str, Callable[[], Attack]] = {
        "none": lambda: NoAttack(),
        "LIE": lambda: LIE(**kwargs),
        "MinMax": lambda: MinMax(**kwargs),
        "MinSum": lambda: MinSum(**kwargs),
        "Fang-Krum": lambda: FangKrum(**kwargs),
        "Fang-Trim": lambda: FangTrimmedMean(**kwargs),
        "FMPA": lambda: FMPA(target, **kwargs),
        "FedSA-lite": lambda: FedSALite(target, **kwargs),
        "ASAP": lambda: ASAPAttack(target, **kwargs),
    }
    if not isinstance(name, str) or name not in table:
        raise ValueError(f"unknown attack {name!r}; choose one of {list(ATTACKS)}")
    return table[name]()


# --------------------------------------------------------------------------------------------
# metrics
# --------------------------------------------------------------------------------------------
def round_complexity(
    trace: Sequence[float], target: float, eps: float = 0.05, window: int = 10, start: int = 0
) -> float:
    """Attack round complexity ``R_eps``: first ``r`` with ``|y_{start+r+j} - y*| <= eps`` for ``j < W``.

    Parameters
    ----------
    trace : sequence of float
        ``y_t`` for every round ``t`` (index = round).
    target : float
        ``y*``.
    eps : float
        Tolerance (>= 0).
    window : int
        Hold length ``W`` (>= 1); the whole window must lie inside the trace.
    start : int
        Attack start ``t0``.

    Returns
    -------
    float
        ``R_eps`` in rounds, or ``inf`` if the target is never reached and held.
    """
    check_float("eps", eps, 0.0)
    check_int("window", window, low=1)
    check_int("start", start, low=0)
    y = [float(v) for v in trace]
    inside = [abs(v - target) <= eps for v in y]
    for r in range(0, len(y) - start - window + 1):
        if all(inside[start + r : start + r + window]):
            return float(r)
    return math.inf


def target_deviation(trace: Sequence[float], target: float, start: int = 0) -> float:
    """Mean ``|y_t - y*|`` over ``t >= start`` (``nan`` never returned: empty range -> ``inf``)."""
    check_int("start", start, low=0)
    tail = [abs(float(v) - target) for v in list(trace)[start:]]
    return sum(tail) / len(tail) if tail else math.inf

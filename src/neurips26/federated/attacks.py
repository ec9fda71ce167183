r"""Model-poisoning attacks on federated learning: the attack interface and the baselines ASAP is compared to.

Papers: the baselines of *ASAP* (NeurIPS 2026; seed ``004_01f475bc147a144d.txt``, paragraph 7,
abstract beginning "Federated Learning (FL) is vulnerable to"): LIE (Baruch et al., 2019, "A Little
Is Enough"), MinMax and MinSum (Shejwalkar & Houmansadr, NDSS 2021), Fang et al. (USENIX Security
2020, "Local Model Poisoning Attacks to Byzantine-Robust Federated Learning", the Krum and
trimmed-mean variants) and FMPA (Zhang et al., IJCAI 2023, "Denial-of-Service or Fine-Grained
Control: Towards Flexible Model Poisoning Attacks on Federated Learning"). ASAP itself lives in
:mod:`neurips26.federated.asap`, which re-exports everything here.

Notation: ``m`` colluding malicious clients hold honest updates ``g_j`` (``m x d``) on the global
model ``w_t``; ``mu = mean_j g_j``, ``sigma = std_j g_j``; ``n`` clients in all; every attack
returns ``m`` malicious updates.

.. math::

    \text{LIE: } u = \mu + z_{max} v, \quad z_{max} = \Phi^{-1}\big((n - s)/n\big),\;
    s = \lfloor n/2 + 1 \rfloor - m

    \text{MinMax: } u = \mu + \gamma^* v, \quad \gamma^* = \max\{\gamma : \max_j \lVert u - g_j \rVert
    \le \max_{i,j} \lVert g_i - g_j \rVert\}

    \text{Fang-Krum: } u = -\lambda\, s, \quad s = \operatorname{sign}(\bar g), \quad
    \lambda \le \frac{\min_i \sum_{l \in \Gamma_i} \lVert g_l - g_i \rVert}{(n - 2m - 1)\sqrt d}
    + \frac{\max_i \lVert g_i \rVert}{\sqrt d}, \text{ halved until Krum selects } u

    \text{Fang-Trim: } u_k \sim U[\mu_k + 3\sigma_k, \mu_k + 4\sigma_k] \text{ if } s_k < 0, \;
    U[\mu_k - 4\sigma_k, \mu_k - 3\sigma_k] \text{ if } s_k > 0

    \text{FMPA: } \hat w_{t+1} = w_t + \hat\Delta_t, \quad
    u = \hat\Delta_t - \gamma \hat\Delta_t / \lVert \hat\Delta_t \rVert, \;
    \gamma = \min\{\gamma : \mathrm{acc}(w_t + u) \le y^*\} \wedge \gamma_{max}

Fang et al. (reconstructed from the paper's Sections 3-4, in update space ``u = w' - w_t``):

* **Fang-Krum** (:class:`FangKrum`). Direction ``s = sign`` of the estimated benign change; the
  crafted update ``u = -lambda s`` is sent by all ``m`` attackers (identical copies make Krum's
  score of the copies small). ``lambda`` starts at the paper's upper bound, with ``Gamma_i`` the
  ``n - m - 2`` benign updates nearest to ``g_i`` (capped at the benign updates available), and is
  halved until Krum (``f = m``), run on the copies plus the known benign updates, selects the crafted
  update, or ``lambda < 1e-5`` (then ``lambda = 0``: a zero update). Full knowledge:
  ``ctx.benign_updates``; partial knowledge: the attackers' own honest updates stand for the benign
  ones (Fang et al.'s partial-knowledge setting; the identical copies then win the simulated Krum
  at once, so ``lambda`` stays at its bound).
* **Fang-Trim** (:class:`FangTrimmedMean`, also Fang et al.'s attack on the median). Partial
  knowledge: every attacker samples each coordinate uniformly from ``[mu + 3 sigma, mu + 4 sigma]``
  where the benign coordinate is expected to decrease (``s_k < 0``) and from
  ``[mu - 4 sigma, mu - 3 sigma]`` where it is expected to increase. Full knowledge
  (``ctx.benign_updates``): with ``b = 2`` and ``u_max, u_min`` the benign extremes, sample from
  ``[u_max, b u_max]`` (``u_max > 0``) or ``[u_max, u_max / b]`` where ``s_k < 0``, and from
  ``[u_min / b, u_min]`` (``u_min > 0``) or ``[b u_min, u_min]`` where ``s_k > 0``. Sampling uses a
  generator seeded by ``(seed, round)``, so colluders on different nodes craft the same updates.

FMPA (reconstructed from the abstract and Section 4 of Zhang et al.; their code is not used): the
attacker keeps the global models it has received and predicts the next benign step
``Delta^_t`` as an exponential moving average (decay ``history_decay``) of the past global steps
``w_t - w_{t-1}`` (the attackers' mean honest update before any history exists). The benign
reference ``w^_{t+1} = w_t + Delta^_t`` is then moved against the predicted step by the smallest
``gamma`` whose model reaches the target accuracy ``y*`` on the attackers' held-out data
(fine-grained control; bisection on ``ctx.observe``), capped by the MinMax stealth bound (the
largest ``gamma`` keeping ``u`` within the honest updates' maximum pairwise distance). It needs no
knowledge of the aggregation rule or of benign updates. Differences from the paper: the paper's
estimator and its fine-tuning of the reference model by optimisation are replaced by this EMA
predictor and a one-dimensional search along the inverse predicted step.

Shapes
------
``honest_updates``: ``(m, d)``; ``global_params``: ``(d,)``; ``benign_updates``: ``(n - m, d)``;
``craft`` returns ``(m, d)`` float32.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from neurips26.common.checks import check_choice, check_float, check_int

__all__ = [
    "DIRECTIONS",
    "LIE",
    "Attack",
    "AttackContext",
    "FMPA",
    "FangKrum",
    "FangTrimmedMean",
    "MinMax",
    "MinSum",
    "NoAttack",
    "attack_direction",
    "fang_krum_lambda_max",
    "lie_z_max",
    "minmax_bound",
    "minsum_bound",
]

DIRECTIONS = ("std", "unit", "sign")


# --------------------------------------------------------------------------------------------
# malicious update construction
# --------------------------------------------------------------------------------------------
def attack_direction(honest: torch.Tensor, mode: str = "std") -> torch.Tensor:
    """Perturbation direction ``v`` from the attackers' honest updates ``(m, d)``, shape ``(d,)``."""
    check_choice("direction", mode, DIRECTIONS)
    mu = honest.mean(dim=0)
    if mode == "std":
        sigma = honest.std(dim=0, unbiased=True) if honest.shape[0] > 1 else mu.abs()
        return -sigma * torch.sign(mu)
    if mode == "unit":
        return -mu / mu.norm().clamp_min(1e-12)
    return -torch.sign(mu)


def _bisect(ok: Callable[[float], bool], hi: float = 10.0, iters: int = 40) -> float:
    """Largest ``gamma >= 0`` with ``ok(gamma)`` (monotone), by expansion then bisection."""
    if not ok(0.0):
        return 0.0
    while ok(hi) and hi < 1e6:
        hi *= 2.0
    lo = 0.0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def minmax_bound(honest: torch.Tensor, direction: torch.Tensor, base: torch.Tensor | None = None) -> float:
    """Largest ``gamma`` with ``max_j |b + gamma v - g_j| <= max_{i,j} |g_i - g_j|`` (MinMax).

    ``b`` is ``base`` (default ``mu``, the mean honest update).
    """
    honest = honest.double()
    v = direction.double()
    mu = honest.mean(dim=0) if base is None else base.double()
    limit = float(torch.cdist(honest, honest).max())
    return _bisect(lambda g: float((honest - (mu + g * v)).norm(dim=1).max()) <= limit + 1e-12)


def minsum_bound(honest: torch.Tensor, direction: torch.Tensor) -> float:
    """Largest ``gamma`` with ``sum_j |u - g_j|^2 <= max_i sum_j |g_i - g_j|^2`` (MinSum)."""
    honest = honest.double()
    v = direction.double()
    mu = honest.mean(dim=0)
    limit = float(torch.cdist(honest, honest).pow(2).sum(dim=1).max())
    return _bisect(lambda g: float((honest - (mu + g * v)).pow(2).sum()) <= limit + 1e-12)


def lie_z_max(num_clients: int, num_malicious: int) -> float:
    """LIE's ``z_max = Phi^{-1}((n - s) / n)`` with ``s = floor(n/2 + 1) - m`` supporters needed."""
    check_int("num_clients", num_clients, low=2)
    check_int("num_malicious", num_malicious, low=1, high=num_clients - 1)
    s = math.floor(num_clients / 2 + 1) - num_malicious
    p = (num_clients - s) / num_clients
    p = min(max(p, 1e-6), 1 - 1e-6)
    return float(torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(p)))


@dataclass
class AttackContext:
    """What the colluding attackers know in one round.

    Attributes
    ----------
    round : int
        Server round ``t``.
    global_params : torch.Tensor, shape (d,)
        Flattened global model ``w_t`` the attackers received.
    honest_updates : torch.Tensor, shape (m, d)
        The malicious clients' own honest updates on ``w_t``.
    observe : callable, optional
        ``observe(params (d,)) -> float``: the objective (accuracy on ``D_att``) of a parameter vector.
    num_clients : int
        Total clients ``n`` in the round (LIE and Fang need it).
    benign_updates : torch.Tensor, shape (n - m, d), optional
        The benign clients' updates (full knowledge; Fang et al.'s strongest threat model, used in
        tests). ``None`` (partial knowledge): attacks estimate them from ``honest_updates``.

    Nothing here describes the server's aggregation rule: an AGR-agnostic attack cannot read it.
    """

    round: int
    global_params: torch.Tensor
    honest_updates: torch.Tensor
    observe: Callable[[torch.Tensor], float] | None = None
    num_clients: int = 0
    benign_updates: torch.Tensor | None = None

    def __post_init__(self) -> None:
        for name in ("global_params", "honest_updates", "benign_updates"):
            t = getattr(self, name)
            if t is None and name == "benign_updates":
                continue
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if not torch.is_floating_point(t):
                raise TypeError(f"{name} must be floating point, got {t.dtype}")
            if t.device.type == "meta":
                raise ValueError(f"{name} must hold data (a meta tensor has none)")
            if t.numel() and not bool(torch.isfinite(t).all()):
                raise ValueError(f"{name} holds NaN or infinite entries")
        if self.honest_updates.ndim != 2 or self.honest_updates.shape[0] < 1:
            raise ValueError(
                f"honest_updates must have shape (m>=1, d), got {tuple(self.honest_updates.shape)}"
            )
        if self.global_params.ndim != 1 or self.global_params.shape[0] != self.honest_updates.shape[1]:
            raise ValueError(
                f"global_params must have shape ({self.honest_updates.shape[1]},), got {tuple(self.global_params.shape)}"
            )
        if self.benign_updates is not None and (
            self.benign_updates.ndim != 2 or self.benign_updates.shape[1] != self.honest_updates.shape[1]
        ):
            raise ValueError(
                f"benign_updates must have shape (k, {self.honest_updates.shape[1]}), got "
                f"{tuple(self.benign_updates.shape)}"
            )


class Attack(ABC):
    """A colluding model-poisoning attack: crafts the ``m`` malicious updates of a round."""

    name = "attack"

    @abstractmethod
    def craft(self, ctx: AttackContext) -> torch.Tensor:
        """Malicious updates, shape ``(m, d)``."""

    def feedback(self, y_next: float) -> None:  # noqa: B027 - optional hook
        """Outcome of the last round (used by adaptive attacks)."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027
        """Restore :meth:`state_dict` output."""

    @staticmethod
    def _repeat(u: torch.Tensor, m: int) -> torch.Tensor:
        """``m`` copies of ``u``, in float32 or float64 (the updates' dtype; narrower ones go to float32)."""
        return u.to(torch.promote_types(u.dtype, torch.float32)).unsqueeze(0).repeat(m, 1)


class NoAttack(Attack):
    """Malicious clients behave honestly (the clean reference)."""

    name = "none"

    def craft(self, ctx: AttackContext) -> torch.Tensor:
        return ctx.honest_updates.clone()


@dataclass
class LIE(Attack):
    """ "A little is enough": ``u = mu + z_max v`` (``v`` from :func:`attack_direction`)."""

    direction: str = "std"
    z: float | None = None
    name = "LIE"

    def __post_init__(self) -> None:
        check_choice("direction", self.direction, DIRECTIONS)

    def craft(self, ctx: AttackContext) -> torch.Tensor:
        m = ctx.honest_updates.shape[0]
        z = self.z if self.z is not None else lie_z_max(max(ctx.num_clients, m + 1), m)
        u = ctx.honest_updates.mean(dim=0) + z * attack_direction(ctx.honest_updates, self.direction)
        return self._repeat(u, m)


@dataclass
class MinMax(Attack):
    """MinMax (NDSS 2021): the farthest ``mu + gamma v`` within the honest updates' max pairwise distance."""

    direction: str = "std"
    name = "MinMax"

    def __post_init__(self) -> None:
        check_choice("direction", self.direction, DIRECTIONS)

    def craft(self, ctx: AttackContext) -> torch.Tensor:
        v = attack_direction(ctx.honest_updates, self.direction)
        gamma = minmax_bound(ctx.honest_updates, v)
        return self._repeat(ctx.honest_updates.mean(dim=0) + gamma * v, ctx.honest_updates.shape[0])


@dataclass
class MinSum(Attack):
    """MinSum (NDSS 2021): the farthest ``mu + gamma v`` within the honest updates' max sum of squares."""

    direction: str = "std"
    name = "MinSum"

    def __post_init__(self) -> None:
        check_choice("direction", self.direction, DIRECTIONS)

    def craft(self, ctx: AttackContext) -> torch.Tensor:
        v = attack_direction(ctx.honest_updates, self.direction)
        gamma = minsum_bound(ctx.honest_updates, v)
        return self._repeat(ctx.honest_updates.mean(dim=0) + gamma * v, ctx.honest_updates.shape[0])


# --------------------------------------------------------------------------------------------
# Fang et al. (AGR-tailored)
# --------------------------------------------------------------------------------------------
def _benign(ctx: AttackContext) -> torch.Tensor:
    return (ctx.benign_updates if ctx.benign_updates is not None else ctx.honest_updates).double()


def _change_sign(ctx: AttackContext) -> torch.Tensor:
    """``s``: sign of the estimated benign change of every coordinate (``+1`` at exact zeros)."""
    s = torch.sign(_benign(ctx).mean(dim=0))
    return torch.where(s == 0, torch.ones_like(s), s)


def fang_krum_lambda_max(benign: torch.Tensor, num_clients: int, num_malicious: int) -> float:
    """Fang et al.'s upper bound on ``lambda`` for the Krum attack, in update space.

    ``min_i sum_{l in Gamma_i} |g_l - g_i| / ((n - 2m - 1) sqrt d) + max_i |g_i| / sqrt d`` with
    ``Gamma_i`` the ``min(n - m - 2, k - 1)`` nearest other benign updates (``k`` benign updates).
    """
    check_int("num_malicious", num_malicious, low=1)
    check_int("num_clients", num_clients, low=2 * num_malicious + 2)
    g = benign.double()
    k, d = g.shape
    dist = torch.cdist(g, g, compute_mode="donot_use_mm_for_euclid_dist")
    dist.fill_diagonal_(float("inf"))
    near = max(1, min(num_clients - num_malicious - 2, k - 1))
    first = torch.sort(dist, dim=1).values[:, :near].sum(dim=1).min() if k > 1 else torch.tensor(0.0)
    first = float(first) / ((num_clients - 2 * num_malicious - 1) * math.sqrt(d))
    return first + float(g.norm(dim=1).max()) / math.sqrt(d)


def _krum_pick(updates: torch.Tensor, f: int) -> int:
    """Index Krum selects among ``updates`` (``max(1, n - f - 2)`` neighbours, ties by index)."""
    x = updates.double()
    n = x.shape[0]
    dist = torch.cdist(x, x, compute_mode="donot_use_mm_for_euclid_dist").pow(2)
    dist.fill_diagonal_(float("inf"))
    scores = torch.sort(dist, dim=1).values[:, : max(1, n - f - 2)].sum(dim=1)
    return int(torch.argsort(scores, stable=True)[0])


@dataclass
class FangKrum(Attack):
    """Fang et al.'s local model poisoning attack tailored to Krum (see the module docstring).

    Parameters
    ----------
    threshold : float
        Stop halving ``lambda`` below this (the paper's ``epsilon = 1e-5``).
    """

    threshold: float = 1e-5
    name = "Fang-Krum"

    def __post_init__(self) -> None:
        check_float("threshold", self.threshold, 0.0, low_open=True)
        self.lambdas: list[float] = []

    def craft(self, ctx: AttackContext) -> torch.Tensor:
        m = ctx.honest_updates.shape[0]
        n = max(ctx.num_clients, 2 * m + 3)
        benign = _benign(ctx)
        s = _change_sign(ctx)
        lam = fang_krum_lambda_max(benign, n, m)
        while lam >= self.threshold:
            crafted = (-lam * s).unsqueeze(0).repeat(m, 1)
            if _krum_pick(torch.cat([crafted, benign]), m) < m:
                break
            lam /= 2.0
        else:
            lam = 0.0
        self.lambdas.append(lam)
        return self._repeat(-lam * s, m)


@dataclass
class FangTrimmedMean(Attack):
    """Fang et al.'s attack tailored to the trimmed mean and the median (see the module docstring).

    Parameters
    ----------
    b : float
        Full-knowledge scaling (> 1; the paper's ``b = 2``).
    seed : int
        Base seed of the per-round sampling.
    """

    b: float = 2.0
    seed: int = 0
    name = "Fang-Trim"

    def __post_init__(self) -> None:
        check_float("b", self.b, 1.0, low_open=True)
        check_int("seed", self.seed)

    def intervals(self, ctx: AttackContext) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-coordinate sampling interval ``(low, high)``, each ``(d,)`` float64."""
        s = _change_sign(ctx)
        if ctx.benign_updates is None:
            g = ctx.honest_updates.double()
            mu = g.mean(dim=0)
            sd = g.std(dim=0, unbiased=True) if g.shape[0] > 1 else mu.abs()
            low = torch.where(s < 0, mu + 3 * sd, mu - 4 * sd)
            high = torch.where(s < 0, mu + 4 * sd, mu - 3 * sd)
            return low, high
        g = ctx.benign_updates.double()
        hi, lo = g.max(dim=0).values, g.min(dim=0).values
        up_low, up_high = hi, torch.where(hi > 0, self.b * hi, hi / self.b)
        down_low, down_high = torch.where(lo > 0, lo / self.b, self.b * lo), lo
        return torch.where(s < 0, up_low, down_low), torch.where(s < 0, up_high, down_high)

    def craft(self, ctx: AttackContext) -> torch.Tensor:
        m = ctx.honest_updates.shape[0]
        low, high = self.intervals(ctx)
        gen = torch.Generator().manual_seed((self.seed * 1_000_003 + int(ctx.round)) % (2**63))
        r = torch.rand(m, low.shape[0], generator=gen, dtype=torch.float64)
        return (low + r * (high - low)).to(torch.float32)


# --------------------------------------------------------------------------------------------
# FMPA (fine-grained controllable)
# --------------------------------------------------------------------------------------------
class FMPA(Attack):
    """FMPA's fine-grained controllable attack (reconstructed; see the module docstring).

    Parameters
    ----------
    target : float
        Accuracy objective ``y*`` in ``[0, 1]``.
    history_decay : float
        EMA decay in ``[0, 1)`` of the global-step predictor (0: the last global step).
    iters : int
        Bisection steps of the search for ``gamma``.
    """

    name = "FMPA"

    def __init__(self, target: float, history_decay: float = 0.5, iters: int = 12) -> None:
        self.target = check_float("target", target, 0.0, 1.0)
        self.history_decay = check_float("history_decay", history_decay, 0.0, 1.0, high_open=True)
        self.iters = check_int("iters", iters, low=1)
        self.prev: torch.Tensor | None = None
        self.step_ema: torch.Tensor | None = None
        self.gammas: list[float] = []
        self.bounds: list[float] = []

    def predicted_step(self, ctx: AttackContext) -> torch.Tensor:
        """``Delta^_t`` (``(d,)``, float64), updating the history with ``w_t``."""
        w = ctx.global_params.double()
        if self.prev is not None and self.prev.shape == w.shape:
            step = w - self.prev
            a = self.history_decay
            self.step_ema = step if self.step_ema is None else a * self.step_ema + (1 - a) * step
        self.prev = w.clone()
        if self.step_ema is None or float(self.step_ema.norm()) == 0.0:
            return ctx.honest_updates.double().mean(dim=0)
        return self.step_ema

    def craft(self, ctx: AttackContext) -> torch.Tensor:
        if ctx.observe is None:
            raise ValueError("FMPA needs ctx.observe (the objective on the attacker's held-out data)")
        m = ctx.honest_updates.shape[0]
        delta = self.predicted_step(ctx)
        v = -delta / delta.norm().clamp_min(1e-12)
        cap = minmax_bound(ctx.honest_updates, v, base=delta)
        w = ctx.global_params.double()

        def acc(gamma: float) -> float:
            return float(ctx.observe((w + delta + gamma * v).to(ctx.global_params.dtype)))

        if acc(0.0) <= self.target:
            gamma = 0.0
        elif acc(cap) > self.target:
            gamma = cap
        else:
            lo, hi = 0.0, cap
            for _ in range(self.iters):
                mid = 0.5 * (lo + hi)
                lo, hi = (lo, mid) if acc(mid) <= self.target else (mid, hi)
            gamma = hi
        self.gammas.append(gamma)
        self.bounds.append(cap)
        return self._repeat(delta + gamma * v, m)

    def state_dict(self) -> dict[str, Any]:
        return {
            "prev": [] if self.prev is None else self.prev.tolist(),
            "step_ema": [] if self.step_ema is None else self.step_ema.tolist(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        prev, ema = state.get("prev", []), state.get("step_ema", [])
        self.prev = torch.tensor(prev, dtype=torch.float64) if len(prev) else None
        self.step_ema = torch.tensor(ema, dtype=torch.float64) if len(ema) else None

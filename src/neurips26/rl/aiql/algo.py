"""AIQL (asymmetric implicit Q-learning), behaviour cloning, the Bayesian reward predictor and A²IQL.

IQL (Kostrikov, Nair, Levine 2021, arXiv 2110.06169) with the asymmetric split of AIQL: the actor
scores candidates one by one, the critics see only ``(g, z(s, a))``:

.. math::

    L_V = E\\big[|\\tau - 1(u < 0)|\\,u^2\\big],\\; u = \\min_k \\bar Q_k(g, z) - V(g); \\quad
    L_Q = \\sum_k E\\big[(r + \\gamma(1 - d) V(g') - Q_k(g, z))^2\\big]; \\quad
    L_\\pi = -E\\big[\\min(e^{\\beta A}, w_{max}) \\log\\pi(a\\mid s)\\big],\\; A = \\min_k \\bar Q_k - V.

A²IQL adds, inside the actor's advantage only, a conservative bonus from a Bayesian reward model of
the target objective: :math:`A' = A_{src} + \\eta (b - \\bar b(g))`, :math:`b = \\mu_T - \\kappa\\sigma_T`.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from neurips26.common.checks import check_choice, check_float, check_int, check_tensor
from neurips26.rl.aiql.nets import (
    CandidateScoringActor,
    StateActionCritic,
    StateValue,
    aggregate_features,
    flat_action_features,
)

Batch = Mapping[str, torch.Tensor]
BATCH_KEYS = ("global", "candidates", "mask", "action", "reward", "next_global", "done")


def expectile_loss(diff: torch.Tensor, tau: float) -> torch.Tensor:
    """Asymmetric squared (expectile) loss, mean over elements.

    .. math::  L_\\tau(u) = |\\tau - 1(u < 0)|\\, u^2

    ``τ = 0.5`` gives ``0.5 × MSE``; positive residuals are weighted ``τ``, negative ones ``1 - τ``.

    Parameters
    ----------
    diff : Tensor
        Residuals ``u = target - prediction``.
    tau : float
        Expectile in the open interval (0, 1).
    """
    check_float("tau", tau, 0.0, 1.0, low_open=True, high_open=True)
    check_tensor("diff", diff)
    if diff.numel() == 0:
        raise ValueError("diff is empty: the mean of no residuals is undefined")
    weight = torch.where(diff < 0, 1.0 - tau, tau)
    loss = (weight * diff.pow(2)).mean()
    if not bool(torch.isfinite(loss)):
        raise ValueError(f"diff is too large: its squared residuals overflow {diff.dtype}")
    return loss


def _check_batch(batch: Batch) -> None:
    missing = [k for k in BATCH_KEYS if k not in batch]
    if missing:
        raise ValueError(f"batch lacks {missing}; an offline batch needs {list(BATCH_KEYS)}")


def parameter_hash(*modules: nn.Module) -> str:
    """SHA-256 of the modules' parameters and buffers (to prove that something was not updated)."""
    h = hashlib.sha256()
    for module in modules:
        for name, t in sorted(module.state_dict().items()):
            h.update(name.encode())
            h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class AIQL:
    """Asymmetric IQL: a per-candidate actor and an aggregate-statistic critic, trained from logs.

    Parameters
    ----------
    actor : CandidateScoringActor
    critic_factory : callable
        ``critic_factory() -> nn.Module`` mapping ``(g, z)`` to ``Q``; called twice (twin critics).
    value_net : nn.Module
        ``V(g)``.
    expectile : float
        ``τ`` in (0, 1), 0.7 by default.
    beta : float
        Inverse temperature of the advantage weights (>= 0; 0 is behaviour cloning).
    gamma : float
        Discount in [0, 1).
    polyak : float
        Target-critic averaging rate in (0, 1].
    max_weight : float
        Clip ``w_max`` of ``exp(β A)``.
    lr : float
        Adam learning rate of all three optimisers.
    action_features : callable
        ``z = f(cand_feats, mask, selected)``; :func:`aggregate_features` (AIQL) or
        :func:`flat_action_features` (standard IQL).

    Shapes
    ------
    A batch holds ``global (E, G)``, ``candidates (E, N, F)``, ``mask (E, N)``, ``action (E, K)``
    (``-1`` for unused slots), ``reward (E,)``, ``next_global (E, G)``, ``done (E,)``.
    """

    def __init__(
        self,
        actor: CandidateScoringActor,
        critic_factory: Callable[[], nn.Module],
        value_net: nn.Module,
        expectile: float = 0.7,
        beta: float = 3.0,
        gamma: float = 0.9,
        polyak: float = 0.005,
        max_weight: float = 100.0,
        lr: float = 3e-4,
        action_features: Callable[..., torch.Tensor] = aggregate_features,
    ) -> None:
        self.expectile = check_float("expectile", expectile, 0.0, 1.0, low_open=True, high_open=True)
        self.beta = check_float("beta", beta, 0.0)
        self.gamma = check_float("gamma", gamma, 0.0, 1.0, high_open=True)
        self.polyak = check_float("polyak", polyak, 0.0, 1.0, low_open=True)
        self.max_weight = check_float("max_weight", max_weight, 0.0, low_open=True)
        check_float("lr", lr, 0.0, low_open=True)
        self.actor, self.value = actor, value_net
        self.critics = nn.ModuleList([critic_factory(), critic_factory()])
        self.targets = copy.deepcopy(self.critics).requires_grad_(False)
        self.action_features = action_features
        self.actor_opt = torch.optim.Adam(actor.parameters(), lr=lr, foreach=True)
        self.critic_opt = torch.optim.Adam(self.critics.parameters(), lr=lr, foreach=True)
        self.value_opt = torch.optim.Adam(value_net.parameters(), lr=lr, foreach=True)
        self.lr = lr

    def z(self, batch: Batch) -> torch.Tensor:
        return self.action_features(batch["candidates"], batch["mask"], batch["action"])

    @torch.no_grad()
    def advantage(self, batch: Batch) -> torch.Tensor:
        """``A(s, a) = min_k Q̄_k(g, z) - V(g)`` with the target critics. Shapes: ``(E,)``."""
        z = self.z(batch)
        q = torch.minimum(*(t(batch["global"], z) for t in self.targets))
        return q - self.value(batch["global"])

    def value_step(self, batch: Batch) -> float:
        with torch.no_grad():
            z = self.z(batch)
            q = torch.minimum(*(t(batch["global"], z) for t in self.targets))
        loss = expectile_loss(q - self.value(batch["global"]), self.expectile)
        self.value_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.value_opt.step()
        return float(loss.detach())

    def critic_step(self, batch: Batch) -> float:
        z = self.z(batch)
        with torch.no_grad():
            target = batch["reward"] + self.gamma * (1.0 - batch["done"].float()) * self.value(
                batch["next_global"]
            )
        loss = sum(((c(batch["global"], z) - target) ** 2).mean() for c in self.critics)
        self.critic_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.critic_opt.step()
        with torch.no_grad():
            for t, c in zip(self.targets.parameters(), self.critics.parameters()):
                t.lerp_(c, self.polyak)
        return float(loss.detach())

    def actor_loss(self, batch: Batch, advantage: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Advantage-weighted Plackett-Luce likelihood; returns (loss, weights)."""
        weights = torch.exp(self.beta * advantage).clamp(max=self.max_weight)
        scores = self.actor(batch["global"], batch["candidates"], batch["mask"])
        logp = CandidateScoringActor.log_prob(scores, batch["mask"], batch["action"])
        return -(weights * logp).mean(), weights

    def actor_step(self, batch: Batch, advantage: torch.Tensor | None = None) -> float:
        """One advantage-weighted extraction step with the current (frozen) critic and value."""
        adv = self.advantage(batch) if advantage is None else advantage
        loss, _ = self.actor_loss(batch, adv)
        self.actor_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.actor_opt.step()
        return float(loss.detach())

    def update(self, batch: Batch) -> dict[str, float]:
        """One IQL update: value (expectile), twin critics (TD with V), then the actor."""
        _check_batch(batch)
        v = self.value_step(batch)
        q = self.critic_step(batch)
        pi = self.actor_step(batch)
        return {"value_loss": v, "critic_loss": q, "actor_loss": pi}


class BehaviourCloning:
    """Behaviour cloning of the logs with the same actor: maximise the Plackett-Luce likelihood (unweighted)."""

    def __init__(self, actor: CandidateScoringActor, lr: float = 3e-4) -> None:
        self.actor = actor
        self.opt = torch.optim.Adam(
            actor.parameters(), lr=check_float("lr", lr, 0.0, low_open=True), foreach=True
        )

    def update(self, batch: Batch) -> dict[str, float]:
        scores = self.actor(batch["global"], batch["candidates"], batch["mask"])
        loss = -CandidateScoringActor.log_prob(scores, batch["mask"], batch["action"]).mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return {"actor_loss": float(loss.detach())}


def make_aiql(
    global_dim: int,
    cand_dim: int,
    budget: int,
    hidden: int = 128,
    critic: str = "aggregate",
    seed: int = 0,
    **kwargs: Any,
) -> AIQL:
    """Build AIQL (``critic="aggregate"``) or standard IQL (``critic="flat"``) with seeded networks."""
    check_choice("critic", critic, ("aggregate", "flat"))
    feats = aggregate_features if critic == "aggregate" else flat_action_features
    z_dim = 2 * cand_dim + 3 if critic == "aggregate" else budget * cand_dim
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        actor = CandidateScoringActor(global_dim, cand_dim, hidden=hidden)
        value = StateValue(global_dim, hidden)
        agent = AIQL(
            actor,
            lambda: StateActionCritic(global_dim, z_dim, hidden),
            value,
            action_features=feats,
            **kwargs,
        )
    return agent


# ----------------------------------------------------------------------------- A²IQL
class RandomFourierFeatures:
    """``ϕ(x) = sqrt(2 / D) cos(W x + b)``, ``W ~ N(0, 1 / ℓ²)``, ``b ~ U[0, 2π)`` (fixed by ``seed``).

    Shapes: ``(M, d) -> (M, D)``.
    """

    def __init__(self, in_dim: int, width: int = 256, lengthscale: float = 1.0, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.W = torch.randn(in_dim, width, generator=g, dtype=torch.float64) / lengthscale
        self.b = torch.rand(width, generator=g, dtype=torch.float64) * 2 * torch.pi
        self.scale = (2.0 / width) ** 0.5

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * torch.cos(x.double() @ self.W + self.b)


class BayesianRewardPredictor:
    """Bayesian linear regression on features ``ϕ(x)`` with evidence-maximised noise precision.

    .. math::  S = (\\alpha I + \\beta \\Phi^T\\Phi)^{-1},\\; m = \\beta S \\Phi^T y,\\;
               \\mu(x) = \\phi^T m,\\; \\sigma^2(x) = 1/\\beta + \\phi^T S \\phi

    ``α`` is the prior precision (fixed); ``β`` is fitted by MacKay's fixed-point evidence updates
    unless ``noise_precision`` is given. ``backend="ensemble"`` fits ``M`` BLR means on bootstrap
    resamples and reports their spread (plus the noise) as the std.

    Parameters
    ----------
    feature_map : callable, optional
        ``ϕ``; identity with a bias column by default.
    prior_precision : float
        ``α > 0``.
    backend : {"blr", "ensemble"}
    noise_precision : float, optional
        Fix ``β`` instead of fitting it.
    members : int
        Ensemble size for ``backend="ensemble"``.

    Shapes
    ------
    ``fit``: ``(M, d), (M,)``; ``predict``: ``(M', d) -> ((M',), (M',))``.
    """

    def __init__(
        self,
        feature_map: Callable[[torch.Tensor], torch.Tensor] | None = None,
        prior_precision: float = 1.0,
        backend: str = "blr",
        noise_precision: float | None = None,
        members: int = 5,
        seed: int = 0,
    ) -> None:
        self.feature_map = feature_map
        self.alpha = check_float("prior_precision", prior_precision, 0.0, low_open=True)
        self.backend = check_choice("backend", backend, ("blr", "ensemble"))
        self.fixed_beta = (
            None
            if noise_precision is None
            else check_float("noise_precision", noise_precision, 0.0, low_open=True)
        )
        self.members = check_int("members", members, low=2)
        self.seed = seed
        self.fitted = False

    def _phi(self, X: torch.Tensor) -> torch.Tensor:
        if self.feature_map is None:
            X = X.double()
            return torch.cat([X, torch.ones(X.shape[0], 1, dtype=torch.float64)], 1)
        return self.feature_map(X).double()

    def _blr(self, P: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
        D = P.shape[1]
        PtP, Pty = P.T @ P, P.T @ y
        eig = torch.linalg.eigvalsh(PtP).clamp(min=0)
        beta = self.fixed_beta if self.fixed_beta is not None else 1.0 / max(float(y.var()), 1e-6)
        for _ in range(100 if self.fixed_beta is None else 1):
            A = self.alpha * torch.eye(D, dtype=torch.float64) + beta * PtP
            S = torch.linalg.inv(A)
            m = beta * S @ Pty
            if self.fixed_beta is not None:
                break
            gamma = float((beta * eig / (self.alpha + beta * eig)).sum())
            resid = float(((y - P @ m) ** 2).sum())
            new = (len(y) - gamma) / max(resid, 1e-12)
            if abs(new - beta) <= 1e-8 * beta:
                beta = new
                break
            beta = new
        A = self.alpha * torch.eye(D, dtype=torch.float64) + beta * PtP
        S = torch.linalg.inv(A)
        return beta * S @ Pty, S, float(beta)

    def fit(self, X: torch.Tensor, y: torch.Tensor) -> BayesianRewardPredictor:
        """Fit on inputs ``X`` ``(M, d)`` and targets ``y`` ``(M,)``; returns ``self``."""
        check_tensor("X", X)
        check_tensor("y", y)
        if X.ndim != 2 or y.ndim != 1 or X.shape[0] != y.shape[0] or X.shape[0] == 0:
            raise ValueError(
                f"fit needs X (M, d) and y (M,) with M >= 1, got {tuple(X.shape)}, {tuple(y.shape)}"
            )
        P, y = self._phi(X), y.double()
        self.mean_w, self.cov, self.beta = self._blr(P, y)
        if self.backend == "ensemble":
            g = torch.Generator().manual_seed(self.seed)
            self.ensemble = []
            for _ in range(self.members):
                idx = torch.randint(0, len(y), (len(y),), generator=g)
                self.ensemble.append(self._blr(P[idx], y[idx])[0])
        self.fitted = True
        return self

    def predict(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Predictive mean and standard deviation ``(M',)``, ``(M',)`` (float64)."""
        if not self.fitted:
            raise RuntimeError("call fit() before predict()")
        check_tensor("X", X)
        P = self._phi(X)
        if self.backend == "ensemble":
            preds = torch.stack([P @ w for w in self.ensemble])
            return preds.mean(0), (preds.var(0, unbiased=True) + 1.0 / self.beta).sqrt()
        mean = P @ self.mean_w
        var = 1.0 / self.beta + ((P @ self.cov) * P).sum(1)
        return mean, var.sqrt()


class A2IQL:
    """A²IQL: re-extract the actor with a conservative target-reward bonus; the source critic stays frozen.

    .. math::  A'(s, a) = A_{src}(s, a) + \\eta\\, c\\, (b(s, a) - \\bar b(g)),\\quad b = \\mu_T - \\kappa\\sigma_T

    where ``c = std(A_src) / std(b - b̄)`` on calibration batches (so ``η = 1`` means "as large as the
    source advantage"), and ``b̄(g)`` is a ridge regression of the bonus of logged actions on ``g``.
    The actor starts from a copy of the source actor and has its own optimiser; the source AIQL is
    never modified.

    Parameters
    ----------
    source : AIQL
        Trained source agent (its critics, targets and value are only read).
    reward_model : BayesianRewardPredictor, fitted
        On target data, input ``[g, z]``.
    kappa : float
        Uncertainty penalty (0 = point estimate).
    eta : float
        Bonus scale after normalisation (0 = source-only extraction).
    lr : float, optional
        Actor learning rate (default the source's).
    """

    def __init__(
        self,
        source: AIQL,
        reward_model: BayesianRewardPredictor | None,
        kappa: float = 1.0,
        eta: float = 1.0,
        lr: float | None = None,
    ) -> None:
        self.source = source
        self.reward_model = reward_model
        self.kappa = check_float("kappa", kappa, 0.0)
        self.eta = check_float("eta", eta, 0.0)
        if self.eta > 0 and (reward_model is None or not reward_model.fitted):
            raise ValueError("eta > 0 needs a fitted reward_model")
        self.actor = copy.deepcopy(source.actor)
        self.actor_opt = torch.optim.Adam(
            self.actor.parameters(), lr=lr if lr is not None else source.lr, foreach=True
        )
        self.baseline_w: torch.Tensor | None = None
        self.scale = 1.0

    def bonus(self, batch: Batch) -> torch.Tensor:
        """``b(s, a) = μ_T(g, z) - κ σ_T(g, z)`` for the logged actions. Shapes: ``(E,)``."""
        if self.reward_model is None:
            return torch.zeros(batch["global"].shape[0])
        x = torch.cat(
            [batch["global"], aggregate_features(batch["candidates"], batch["mask"], batch["action"])], 1
        )
        mean, std = self.reward_model.predict(x)
        return (mean - self.kappa * std).float()

    def _baseline(self, g: torch.Tensor) -> torch.Tensor:
        if self.baseline_w is None:
            return torch.zeros(g.shape[0])
        X = torch.cat([g.double(), torch.ones(g.shape[0], 1, dtype=torch.float64)], 1)
        return (X @ self.baseline_w).float()

    def calibrate(self, batches: list[Batch], ridge: float = 1e-3) -> dict[str, float]:
        """Fit the state baseline ``b̄(g)`` and the scale ``std(A_src) / std(b - b̄)`` on logged batches."""
        g = torch.cat([b["global"] for b in batches])
        bonus = torch.cat([self.bonus(b) for b in batches]).double()
        adv = torch.cat([self.source.advantage(b) for b in batches]).double()
        X = torch.cat([g.double(), torch.ones(g.shape[0], 1, dtype=torch.float64)], 1)
        self.baseline_w = torch.linalg.solve(
            X.T @ X + ridge * torch.eye(X.shape[1], dtype=torch.float64), X.T @ bonus
        )
        centred = bonus - X @ self.baseline_w
        spread = float(centred.std()) if centred.numel() > 1 else 0.0
        self.scale = float(adv.std()) / spread if spread > 1e-12 else 0.0
        return {"adv_std": float(adv.std()), "bonus_std": spread, "scale": self.scale}

    def adapted_advantage(self, batch: Batch) -> torch.Tensor:
        adv = self.source.advantage(batch)
        if self.eta == 0:
            return adv
        return adv + self.eta * self.scale * (self.bonus(batch) - self._baseline(batch["global"]))

    def update_actor(self, batch: Batch) -> dict[str, float]:
        """One re-extraction step of the adapted actor (critic and value are read, never written)."""
        _check_batch(batch)
        adv = self.adapted_advantage(batch)
        weights = torch.exp(self.source.beta * adv).clamp(max=self.source.max_weight)
        scores = self.actor(batch["global"], batch["candidates"], batch["mask"])
        logp = CandidateScoringActor.log_prob(scores, batch["mask"], batch["action"])
        loss = -(weights * logp).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.actor_opt.step()
        return {"actor_loss": float(loss.detach()), "mean_weight": float(weights.mean())}


__all__ = [
    "A2IQL",
    "AIQL",
    "BayesianRewardPredictor",
    "BehaviourCloning",
    "RandomFourierFeatures",
    "expectile_loss",
    "make_aiql",
    "parameter_hash",
]

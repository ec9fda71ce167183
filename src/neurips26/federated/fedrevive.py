"""FedRevive: asynchronous FL that revives stale updates with server-side data-free distillation.

Paper: *FedRevive* (NeurIPS 2026; seed file ``000_f8b4140a0e3b5d84.txt``, paragraph 13, abstract
beginning "Federated learning (FL) enables collaborative model"; arXiv 2511.00655).

Asynchronous system model: client ``i`` receives the global model ``w^(v)`` (version ``v``), trains
locally and returns ``Delta_i = w_i - w^(v)``; the server is at version ``t`` when it arrives, so the
update is ``tau_i = t - v`` versions stale. Job durations are LogNormal(``mu_i``, ``sigma``) per
client (:class:`ClientSpeedModel`); :class:`AsyncSimulator` replays the resulting event order on a
simulated clock, through a *transport* that either trains in-process or sends Flower messages
(:class:`neurips26.federated.flower.GridTransport`), so the runner exists once.

Server rules (all :class:`AsyncStrategy`):

* :class:`FedAsync` -- ``w <- (1 - a_t) w + a_t (w^(v) + Delta)``, ``a_t = alpha * s(tau)``.
* :class:`FedBuff` -- buffer ``K`` updates, then
  ``w <- w + eta_g Delta_raw``, ``Delta_raw = sum_i p_i s(tau_i) Delta_i / sum_i p_i s(tau_i)``,
  ``p_i ~ n_i``, staleness weight ``s(tau) = (1 + tau)^(-a)``.
* :class:`FedRevive` -- FedBuff plus data-free distillation: teachers ``theta_i = w^(v_i) + Delta_i``
  (versions kept for a window of ``W``), a meta-learned conditional generator ``G_phi(z, y)``
  (Reptile: ``k`` inner Adam steps on
  ``L_G = CE(ens(x), y) + lambda_bn * L_BN - lambda_adv * KL(ens/T || student/T)``, then
  ``phi <- phi + epsilon (phi' - phi)``), multi-teacher KD of the current model for ``S`` steps on
  ``T^2 KL(softmax(sum_i pi_i z_i / T) || softmax(z_s / T))`` giving ``Delta_KD``, and the hybrid step
  ``w <- w + eta_g [(1 - beta_bar) Delta_raw + beta_bar Delta_KD]`` with revival weight
  ``beta(tau) = beta_max (1 - (1 + tau)^(-b))`` averaged over the buffer (``p_i`` weights). With
  every ``tau = 0``, ``beta_bar = 0``: the step is FedBuff's, bit for bit.
* :class:`SyncFedAvg` -- synchronous FedAvg reference: waits for all dispatched clients.

No server-side data: :meth:`FedRevive.distill` takes models, weights and the generator only.
This module never imports Flower.
"""

from __future__ import annotations

import copy
import heapq
import math
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from neurips26.common.checks import check_float, check_int, check_tensor

__all__ = [
    "AsyncSimulator",
    "AsyncStrategy",
    "ClientSpeedModel",
    "ClientUpdate",
    "ConditionalGenerator",
    "FedAsync",
    "FedBuff",
    "FedRevive",
    "History",
    "LocalTransport",
    "SyncFedAvg",
    "revival_weight",
    "staleness_weight",
    "time_to_target",
]

StateDict = dict[str, Tensor]


def staleness_weight(tau: Tensor | float, a: float = 0.5) -> Tensor:
    """Polynomial staleness weight ``s(tau) = (1 + tau)^(-a)``: 1 at ``tau = 0``, non-increasing."""
    check_float("a", a, 0.0)
    tau = torch.as_tensor(tau, dtype=torch.float64)
    if (tau < 0).any():
        raise ValueError("staleness tau must be >= 0")
    return (1.0 + tau).pow(-a)


def revival_weight(tau: Tensor | float, beta_max: float = 0.5, b: float = 1.0) -> Tensor:
    """Revival weight ``beta(tau) = beta_max (1 - (1 + tau)^(-b))``: 0 at ``tau = 0``, <= ``beta_max``."""
    check_float("beta_max", beta_max, 0.0, 1.0)
    check_float("b", b, 0.0)
    tau = torch.as_tensor(tau, dtype=torch.float64)
    if (tau < 0).any():
        raise ValueError("staleness tau must be >= 0")
    return beta_max * (1.0 - (1.0 + tau).pow(-b))


def _clone_state(state: StateDict) -> StateDict:
    return {k: v.detach().clone() for k, v in state.items()}


def _is_float(t: Tensor) -> bool:
    return torch.is_floating_point(t)


@dataclass
class ClientUpdate:
    """One client's asynchronous contribution.

    Attributes
    ----------
    client_id : int
    delta : dict of str -> Tensor
        ``w_i - w^(v)`` for every floating-point entry of the model's ``state_dict`` (same shapes).
    base_version : int
        Version ``v`` of the global model the client started from.
    num_samples : int
        Local training examples ``n_i`` (> 0).
    metrics : dict
        Anything the client reports (loss, duration).
    """

    client_id: int
    delta: StateDict
    base_version: int
    num_samples: int
    metrics: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_int("client_id", self.client_id, low=0)
        check_int("base_version", self.base_version, low=0)
        check_int("num_samples", self.num_samples, low=1)
        if not isinstance(self.delta, dict) or not self.delta:
            raise ValueError("delta must be a non-empty dict name -> tensor")


class ClientSpeedModel:
    """Heterogeneous job durations: ``LogNormal(mu_i, sigma)``; a ``slow_fraction`` of clients has
    ``mu_i = log(slow_factor)`` (5x slower in the median), the others ``mu_i = 0``.

    Parameters
    ----------
    num_clients : int
    sigma : float
        Log-scale spread (>= 0); larger means more staleness.
    slow_fraction : float
        Fraction of slow clients in ``[0, 1]``.
    slow_factor : float
        Median slowdown (>= 1).
    seed : int
    """

    def __init__(
        self,
        num_clients: int,
        sigma: float = 1.0,
        slow_fraction: float = 0.2,
        slow_factor: float = 5.0,
        seed: int = 0,
    ) -> None:
        self.num_clients = check_int("num_clients", num_clients, low=1)
        self.sigma = check_float("sigma", sigma, 0.0)
        check_float("slow_fraction", slow_fraction, 0.0, 1.0)
        check_float("slow_factor", slow_factor, 1.0)
        rng = np.random.default_rng(seed)
        n_slow = int(round(slow_fraction * num_clients))
        slow = rng.permutation(num_clients)[:n_slow]
        self.mu = np.zeros(num_clients)
        self.mu[slow] = math.log(slow_factor)
        self._rng = np.random.default_rng(seed + 7919)

    def sample_duration(self, client_id: int) -> float:
        """One job's duration for ``client_id`` (> 0)."""
        check_int("client_id", client_id, low=0, high=self.num_clients - 1)
        return (
            float(self._rng.lognormal(self.mu[client_id], self.sigma))
            if self.sigma > 0
            else math.exp(self.mu[client_id])
        )


# --------------------------------------------------------------------------------------------
# server rules
# --------------------------------------------------------------------------------------------
class AsyncStrategy:
    """Base of the asynchronous server rules.

    The runner calls :meth:`on_version` whenever the global model gets a new version (and once at
    the start) and :meth:`on_update` for every arriving update; ``on_update`` changes the model in
    place and returns ``True`` when it did (a new version).
    """

    name = "async"
    synchronous = False
    keep_versions: int | None = None

    def __init__(self) -> None:
        self.versions: OrderedDict[int, StateDict] = OrderedDict()
        self.server_steps = 0
        self.processed = 0
        self.staleness: list[int] = []

    def on_version(self, version: int, state: StateDict) -> None:
        """Store a copy of global version ``version`` (the last ``keep_versions`` are kept)."""
        self.versions[version] = _clone_state(state)
        while self.keep_versions is not None and len(self.versions) > self.keep_versions:
            self.versions.popitem(last=False)

    def _validate(self, update: ClientUpdate, model: nn.Module, version: int) -> int:
        if update.base_version > version:
            raise ValueError(
                f"update base_version={update.base_version} is newer than the server version {version}"
            )
        state = model.state_dict()
        expected = {k for k, v in state.items() if _is_float(v)}
        if set(update.delta) != expected:
            raise ValueError(
                f"update parameter names differ from the global model: missing {sorted(expected - set(update.delta))}, "
                f"unexpected {sorted(set(update.delta) - expected)}"
            )
        for k, v in update.delta.items():
            if tuple(v.shape) != tuple(state[k].shape):
                raise ValueError(
                    f"update {k!r} has shape {tuple(v.shape)}, global model has {tuple(state[k].shape)}"
                )
            if not torch.isfinite(v).all():
                raise ValueError(f"update {k!r} contains NaN or inf")
        tau = version - update.base_version
        self.processed += 1
        self.staleness.append(tau)
        return tau

    def on_update(self, update: ClientUpdate, model: nn.Module, version: int) -> bool:
        raise NotImplementedError

    @staticmethod
    @torch.no_grad()
    def sanitize_bn(model: nn.Module, floor: float = 1e-5) -> None:
        """Clamp BatchNorm running variances to ``>= floor``.

        Adding deltas computed on different (stale) base versions can drive a running variance
        below zero, which would make every later forward pass NaN.
        """
        for mod in model.modules():
            if isinstance(mod, nn.modules.batchnorm._BatchNorm) and mod.running_var is not None:
                mod.running_var.clamp_(min=floor)


class FedAsync(AsyncStrategy):
    """FedAsync (Xie et al., 2019): mix every arriving client model into the global one.

    ``w <- (1 - a_t) w + a_t (w^(v) + Delta)`` with ``a_t = alpha (1 + tau)^(-a)``.
    """

    name = "FedAsync"

    def __init__(self, alpha: float = 0.6, staleness_exp: float = 0.5) -> None:
        super().__init__()
        self.alpha = check_float("alpha", alpha, 0.0, 1.0, low_open=True)
        self.staleness_exp = check_float("staleness_exp", staleness_exp, 0.0)

    @torch.no_grad()
    def on_update(self, update: ClientUpdate, model: nn.Module, version: int) -> bool:
        tau = self._validate(update, model, version)
        if update.base_version not in self.versions:
            raise ValueError(
                f"base version {update.base_version} is not stored; call on_version for every version"
            )
        base = self.versions[update.base_version]
        a_t = self.alpha * float(staleness_weight(tau, self.staleness_exp))
        state = model.state_dict()
        for k, d in update.delta.items():
            client = base[k] + d
            state[k].mul_(1.0 - a_t).add_(client, alpha=a_t)
        self.sanitize_bn(model)
        self.server_steps += 1
        return True


class FedBuff(AsyncStrategy):
    """FedBuff (Nguyen et al., 2022) with polynomial staleness weights.

    Parameters
    ----------
    buffer_size : int
        Updates ``K`` collected per server step (>= 1).
    server_lr : float
        ``eta_g`` (> 0).
    staleness_exp : float
        ``a`` of ``s(tau) = (1 + tau)^(-a)``.
    """

    name = "FedBuff"

    def __init__(self, buffer_size: int = 5, server_lr: float = 1.0, staleness_exp: float = 0.5) -> None:
        super().__init__()
        self.buffer_size = check_int("buffer_size", buffer_size, low=1)
        self.server_lr = check_float("server_lr", server_lr, 0.0, low_open=True)
        self.staleness_exp = check_float("staleness_exp", staleness_exp, 0.0)
        self.buffer: list[tuple[ClientUpdate, int]] = []

    def raw_update(self, buffer: Sequence[tuple[ClientUpdate, int]]) -> StateDict:
        """``Delta_raw``: staleness- and size-weighted mean of the buffered deltas."""
        w = torch.tensor([u.num_samples * float(staleness_weight(t, self.staleness_exp)) for u, t in buffer])
        w = w / w.sum()
        keys = buffer[0][0].delta.keys()
        return {k: sum(float(wi) * u.delta[k] for wi, (u, _) in zip(w, buffer)) for k in keys}

    @torch.no_grad()
    def _apply(self, model: nn.Module, delta: StateDict, scale: float) -> None:
        state = model.state_dict()
        for k, d in delta.items():
            state[k].add_(d.to(state[k].dtype), alpha=scale)
        self.sanitize_bn(model)

    @torch.no_grad()
    def set_bn_statistics(
        self, buffer: Sequence[tuple[ClientUpdate, int]], model: nn.Module, before: StateDict
    ) -> None:
        """Set BatchNorm running statistics to the weighted mean of the clients' *values*.

        Statistics are not trained parameters: adding deltas taken from different stale bases can
        make a variance negative, so (as FedAvg does) the buffered clients' own statistics
        ``w^(v_i) + Delta_i`` are averaged with the raw-update weights, over the updates whose base
        version is still stored; if none is, the statistics ``before`` the step are kept.
        """
        keys = _bn_stat_keys(model)
        if not keys:
            return
        state = model.state_dict()
        usable = [(u, t) for u, t in buffer if u.base_version in self.versions]
        if not usable:
            for k in keys:
                state[k].copy_(before[k])
            return
        w = torch.tensor([u.num_samples * float(staleness_weight(t, self.staleness_exp)) for u, t in usable])
        w = w / w.sum()
        for k in keys:
            value = sum(
                float(wi) * (self.versions[u.base_version][k] + u.delta[k]) for wi, (u, _) in zip(w, usable)
            )
            state[k].copy_(value)
        self.sanitize_bn(model)

    def on_update(self, update: ClientUpdate, model: nn.Module, version: int) -> bool:
        tau = self._validate(update, model, version)
        self.buffer.append((update, tau))
        if len(self.buffer) < self.buffer_size:
            return False
        buffer, self.buffer = self.buffer, []
        before = {k: model.state_dict()[k].clone() for k in _bn_stat_keys(model)}
        self.server_step(buffer, model, version)
        self.set_bn_statistics(buffer, model, before)
        self.server_steps += 1
        return True

    def server_step(self, buffer: list[tuple[ClientUpdate, int]], model: nn.Module, version: int) -> None:
        self._apply(model, self.raw_update(buffer), self.server_lr)


class SyncFedAvg(FedBuff):
    """Synchronous FedAvg: the runner waits for all ``num_clients`` jobs, then averages (``tau = 0``)."""

    name = "FedAvg (sync)"
    synchronous = True

    def __init__(self, num_clients: int, server_lr: float = 1.0) -> None:
        super().__init__(buffer_size=num_clients, server_lr=server_lr, staleness_exp=0.0)


class ConditionalGenerator(nn.Module):
    """Conditional generator ``G_phi(z, y)`` of pseudo-samples in ``[0, 1]``.

    Vector outputs (``len(out_shape) == 1``, or images whose sides are not multiples of 4): an MLP
    ``[z, onehot(y)] -> hidden (BN, ReLU) -> hidden (BN, ReLU) -> prod(out_shape)`` with a sigmoid.
    Images ``(C, H, W)`` with ``H, W`` multiples of 4: linear to ``(hidden, H/4, W/4)`` then two
    (upsample x2, conv 3x3, BN, LeakyReLU) blocks and a sigmoid conv to ``C`` channels.

    Parameters
    ----------
    num_classes : int
    out_shape : tuple of int
        Shape of one sample, e.g. ``(64,)`` or ``(1, 28, 28)``.
    z_dim : int
        Noise size ``d_z``.
    hidden : int
        Width.

    Shapes
    ------
    ``z``: ``(B, z_dim)``, ``y``: ``(B,)`` int64 -> ``(B, *out_shape)``.
    """

    def __init__(
        self, num_classes: int, out_shape: tuple[int, ...], z_dim: int = 32, hidden: int = 128
    ) -> None:
        super().__init__()
        self.num_classes = check_int("num_classes", num_classes, low=2)
        self.out_shape = tuple(int(s) for s in out_shape)
        if not self.out_shape or any(s < 1 for s in self.out_shape):
            raise ValueError(f"out_shape must be a non-empty tuple of positive ints, got {out_shape!r}")
        self.z_dim = check_int("z_dim", z_dim, low=1)
        self.hidden = check_int("hidden", hidden, low=1)
        inp = z_dim + num_classes
        self.conv = len(self.out_shape) == 3 and self.out_shape[1] % 4 == 0 and self.out_shape[2] % 4 == 0
        if self.conv:
            c, h, w = self.out_shape
            self.init_hw = (h // 4, w // 4)
            self.fc = nn.Sequential(
                nn.Linear(inp, hidden * self.init_hw[0] * self.init_hw[1]),
                nn.BatchNorm1d(hidden * self.init_hw[0] * self.init_hw[1]),
            )
            self.body = nn.Sequential(
                nn.Upsample(scale_factor=2), nn.Conv2d(hidden, hidden, 3, padding=1), nn.BatchNorm2d(hidden),
                nn.LeakyReLU(0.2), nn.Upsample(scale_factor=2), nn.Conv2d(hidden, hidden // 2, 3, padding=1),
                nn.BatchNorm2d(hidden // 2), nn.LeakyReLU(0.2), nn.Conv2d(hidden // 2, c, 3, padding=1),
            )  # fmt: skip
        else:
            out = int(np.prod(self.out_shape))
            self.net = nn.Sequential(
                nn.Linear(inp, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, out),
            )  # fmt: skip

    def forward(self, z: Tensor, y: Tensor) -> Tensor:
        check_tensor("z", z, like=self)
        if z.ndim != 2 or z.shape[0] == 0 or z.shape[1] != self.z_dim:
            raise ValueError(f"z must have shape (B >= 1, {self.z_dim}), got {tuple(z.shape)}")
        if not isinstance(y, Tensor) or y.is_meta or y.device != z.device:
            raise ValueError(f"y must be a tensor with data on z's device {z.device}")
        if y.shape != (z.shape[0],):
            raise ValueError(f"y must have shape ({z.shape[0]},), got {tuple(y.shape)}")
        h = torch.cat([z, F.one_hot(y.long(), self.num_classes).to(z.dtype)], dim=1)
        if self.conv:
            h = self.fc(h).view(z.shape[0], self.hidden, *self.init_hw)
            return torch.sigmoid(self.body(h))
        return torch.sigmoid(self.net(h)).view(z.shape[0], *self.out_shape)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Draw ``(z, y)``: ``z ~ N(0, I)``, ``y`` uniform over classes."""
        z = torch.randn(batch_size, self.z_dim, generator=generator)
        y = torch.randint(0, self.num_classes, (batch_size,), generator=generator)
        return z, y


class _BNStats:
    """Forward hooks measuring ``||mean(a) - mu_BN||^2 + ||var(a) - sigma^2_BN||^2`` per BN layer."""

    def __init__(self, models: Sequence[nn.Module]) -> None:
        self.losses: list[Tensor] = []
        self.handles = []
        for m in models:
            for mod in m.modules():
                if isinstance(mod, nn.modules.batchnorm._BatchNorm) and mod.running_mean is not None:
                    self.handles.append(mod.register_forward_hook(self._hook))

    def _hook(self, mod: nn.Module, inputs: tuple[Tensor, ...], _out: Tensor) -> None:
        x = inputs[0]
        dims = [0] + list(range(2, x.ndim))
        mean, var = x.mean(dim=dims), x.var(dim=dims, unbiased=False)
        self.losses.append((mean - mod.running_mean).pow(2).sum() + (var - mod.running_var).pow(2).sum())

    def pop(self) -> Tensor:
        out = torch.stack(self.losses).sum() if self.losses else torch.zeros(())
        self.losses = []
        return out

    def remove(self) -> None:
        for h in self.handles:
            h.remove()

    @property
    def active(self) -> bool:
        return bool(self.handles)


def _ensemble_logits(teachers: Sequence[nn.Module], weights: Tensor, x: Tensor) -> Tensor:
    return sum(float(w) * t(x) for w, t in zip(weights, teachers))


class FedRevive(FedBuff):
    """FedRevive: FedBuff whose server step mixes in a data-free multi-teacher distillation update.

    Parameters
    ----------
    num_classes : int
    input_shape : tuple of int
        Shape of one model input, e.g. ``(64,)``.
    buffer_size, server_lr, staleness_exp
        As :class:`FedBuff`.
    version_window : int
        ``W``: global versions kept; older updates are applied raw only (counted in ``outside_window``).
    beta_max, beta_exp : float
        Revival weight ``beta(tau) = beta_max (1 - (1 + tau)^(-beta_exp))``; ``beta_max`` in ``[0, 1]``.
    beta_mode : {"staleness", "constant"}
        ``"constant"`` uses ``beta_bar = beta_max`` whenever some update is stale (ablation).
    generator : nn.Module, optional
        Defaults to :class:`ConditionalGenerator`.
    z_dim, inner_steps, meta_step, gen_lr
        Generator size, inner Adam steps ``k``, Reptile step ``epsilon``, Adam learning rate.
    meta : bool
        ``False`` re-initialises the generator every server step (no meta-learning ablation).
    kd_steps, kd_lr, temperature
        Distillation steps ``S``, SGD learning rate, temperature ``T``.
    bn_weight, adv_weight : float
        ``lambda_bn``, ``lambda_adv`` of the generator loss.
    batch_size : int
        Pseudo-samples per step.
    seed : int
    """

    name = "FedRevive"

    def __init__(
        self,
        num_classes: int,
        input_shape: tuple[int, ...],
        buffer_size: int = 5,
        server_lr: float = 1.0,
        staleness_exp: float = 0.5,
        version_window: int = 20,
        beta_max: float = 0.5,
        beta_exp: float = 1.0,
        beta_mode: str = "staleness",
        generator: nn.Module | None = None,
        z_dim: int = 32,
        inner_steps: int = 5,
        meta_step: float = 0.5,
        gen_lr: float = 1e-3,
        meta: bool = True,
        kd_steps: int = 20,
        kd_lr: float = 0.01,
        temperature: float = 3.0,
        bn_weight: float = 1.0,
        adv_weight: float = 1.0,
        batch_size: int = 128,
        seed: int = 0,
    ) -> None:
        super().__init__(buffer_size, server_lr, staleness_exp)
        self.num_classes = check_int("num_classes", num_classes, low=2)
        self.input_shape = tuple(input_shape)
        if not self.input_shape or any(
            isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in self.input_shape
        ):
            raise ValueError(f"input_shape must be a non-empty tuple of positive ints, got {input_shape!r}")
        self.version_window = check_int("version_window", version_window, low=0)
        self.keep_versions = version_window + 1
        self.beta_max = check_float("beta_max", beta_max, 0.0, 1.0)
        self.beta_exp = check_float("beta_exp", beta_exp, 0.0)
        if beta_mode not in ("staleness", "constant"):
            raise ValueError(f"beta_mode must be 'staleness' or 'constant', got {beta_mode!r}")
        self.beta_mode = beta_mode
        self.z_dim = check_int("z_dim", z_dim, low=1)
        self.inner_steps = check_int("inner_steps", inner_steps, low=0)
        self.meta_step = check_float("meta_step", meta_step, 0.0, 1.0)
        self.gen_lr = check_float("gen_lr", gen_lr, 0.0, low_open=True)
        self.meta = bool(meta)
        self.kd_steps = check_int("kd_steps", kd_steps, low=0)
        self.kd_lr = check_float("kd_lr", kd_lr, 0.0, low_open=True)
        self.temperature = check_float("temperature", temperature, 0.0, low_open=True)
        self.bn_weight = check_float("bn_weight", bn_weight, 0.0)
        self.adv_weight = check_float("adv_weight", adv_weight, 0.0)
        self.batch_size = check_int("batch_size", batch_size, low=2)
        self.seed = check_int("seed", seed, low=0)
        self._rng = torch.Generator().manual_seed(seed)
        torch_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        self.generator = (
            generator if generator is not None else ConditionalGenerator(num_classes, self.input_shape, z_dim)
        )
        torch.random.set_rng_state(torch_state)
        self._gen_init = copy.deepcopy(self.generator.state_dict())
        self.outside_window = 0
        self.kd_steps_done = 0
        self.log: list[dict[str, float]] = []

    # --- the paper's pieces -------------------------------------------------------------------
    def beta_bar(self, buffer: Sequence[tuple[ClientUpdate, int]]) -> float:
        """Sample-weighted mean revival weight of a buffer."""
        n = torch.tensor([float(u.num_samples) for u, _ in buffer], dtype=torch.float64)
        tau = torch.tensor([float(t) for _, t in buffer], dtype=torch.float64)
        if self.beta_mode == "constant":
            return self.beta_max if bool((tau > 0).any()) else 0.0
        return float((n * revival_weight(tau, self.beta_max, self.beta_exp)).sum() / n.sum())

    def reconstruct_teacher(self, update: ClientUpdate, model: nn.Module) -> nn.Module | None:
        """``theta_i = w^(v_i) + Delta_i`` as a model, or ``None`` when ``v_i`` left the window."""
        base = self.versions.get(update.base_version)
        if base is None:
            return None
        teacher = copy.deepcopy(model)
        state = {k: (base[k] + update.delta[k]) if k in update.delta else base[k].clone() for k in base}
        teacher.load_state_dict(state)
        return teacher.eval()

    def _sample_y(self, n: int) -> tuple[Tensor, Tensor]:
        z = torch.randn(n, self.z_dim, generator=self._rng)
        y = torch.randint(0, self.num_classes, (n,), generator=self._rng)
        return z, y

    def _kl(self, target_logits: Tensor, student_logits: Tensor) -> Tensor:
        t = self.temperature
        return F.kl_div(
            F.log_softmax(student_logits / t, 1), F.softmax(target_logits / t, 1), reduction="batchmean"
        )

    def synthesize(self, teachers: Sequence[nn.Module], weights: Tensor, student: nn.Module) -> nn.Module:
        """Meta-learned generator update; returns the adapted generator ``G_phi'``."""
        if not self.meta:
            self.generator.load_state_dict(self._gen_init)
        fast = copy.deepcopy(self.generator).train()
        opt = torch.optim.Adam(fast.parameters(), lr=self.gen_lr)
        hooks = _BNStats(teachers)
        for p in [*student.parameters(), *(q for t in teachers for q in t.parameters())]:
            p.requires_grad_(False)
        try:
            for _ in range(self.inner_steps):
                z, y = self._sample_y(self.batch_size)
                x = fast(z, y)
                ens = _ensemble_logits(teachers, weights, x)
                loss = F.cross_entropy(ens, y)
                bn = hooks.pop()
                if hooks.active and self.bn_weight > 0:
                    loss = loss + self.bn_weight * bn
                if self.adv_weight > 0:
                    loss = loss - self.adv_weight * self._kl(ens, student(x))
                opt.zero_grad()
                loss.backward()
                opt.step()
                self.log.append({"gen_loss": float(loss.detach())})
        finally:
            hooks.remove()
            for p in [*student.parameters(), *(q for t in teachers for q in t.parameters())]:
                p.requires_grad_(True)
        with torch.no_grad():
            slow, new = self.generator.state_dict(), fast.state_dict()
            for k, v in slow.items():
                if torch.is_floating_point(v):
                    v.add_(new[k] - v, alpha=self.meta_step)
                else:
                    v.copy_(new[k])
        return fast

    def distill(self, teachers: Sequence[nn.Module], weights: Tensor, student: nn.Module) -> StateDict:
        """Multi-teacher data-free distillation of ``student`` (in place); returns ``Delta_KD``.

        Parameters
        ----------
        teachers : sequence of nn.Module
            Reconstructed client models (kept in eval mode).
        weights : Tensor, shape (len(teachers),)
            Non-negative ensemble weights ``pi_i`` (normalised here).
        student : nn.Module
            Copy of the current global model; trained in eval mode (BN statistics untouched).

        Returns
        -------
        dict of str -> Tensor
            ``student_after - student_before`` for every floating-point state entry (zero for BN buffers).
        """
        if not teachers:
            raise ValueError("distill needs at least one teacher")
        weights = torch.as_tensor(weights, dtype=torch.float64)
        if weights.shape != (len(teachers),) or (weights < 0).any() or float(weights.sum()) <= 0:
            raise ValueError("weights must be non-negative, one per teacher, with a positive sum")
        weights = weights / weights.sum()
        for t in teachers:
            t.eval()
        student.eval()
        before = _clone_state(student.state_dict())
        gen = self.synthesize(teachers, weights, student)
        opt = torch.optim.SGD(student.parameters(), lr=self.kd_lr)
        gen.train()  # generator BN uses batch statistics; no gradient reaches it below
        for _ in range(self.kd_steps):
            z, y = self._sample_y(self.batch_size)
            with torch.no_grad():
                x = gen(z, y)
                target = _ensemble_logits(teachers, weights, x)
            loss = self.temperature**2 * self._kl(target, student(x))
            opt.zero_grad()
            loss.backward()
            opt.step()
            self.log.append({"kd_loss": float(loss.detach())})
        self.kd_steps_done += self.kd_steps
        after = student.state_dict()
        return {k: (after[k] - before[k]) for k in before if _is_float(before[k])}

    def server_step(self, buffer: list[tuple[ClientUpdate, int]], model: nn.Module, version: int) -> None:
        raw = self.raw_update(buffer)
        beta = self.beta_bar(buffer)
        if beta <= 0.0:
            self._apply(model, raw, self.server_lr)
            return
        teachers, pis = [], []
        for u, tau in buffer:
            if tau > self.version_window:
                self.outside_window += 1
                continue
            teacher = self.reconstruct_teacher(u, model)
            if teacher is None:
                self.outside_window += 1
                continue
            teachers.append(teacher)
            pis.append(u.num_samples * float(staleness_weight(tau, self.staleness_exp)))
        if not teachers:
            warnings.warn(
                "FedRevive: no buffered update inside the version window; raw step only", stacklevel=2
            )
            self._apply(model, raw, self.server_lr)
            return
        student = copy.deepcopy(model)
        kd = self.distill(teachers, torch.tensor(pis), student)
        mixed = {k: (1.0 - beta) * raw[k] + beta * kd[k] for k in raw}
        self._apply(model, mixed, self.server_lr)


def _bn_stat_keys(model: nn.Module) -> list[str]:
    keys = []
    for name, mod in model.named_modules():
        if isinstance(mod, nn.modules.batchnorm._BatchNorm) and mod.running_mean is not None:
            prefix = f"{name}." if name else ""
            keys += [f"{prefix}running_mean", f"{prefix}running_var"]
    return keys


# --------------------------------------------------------------------------------------------
# simulated-clock asynchronous runner
# --------------------------------------------------------------------------------------------
class Transport(Protocol):
    """How the runner reaches clients: in-process (:class:`LocalTransport`) or Flower messages."""

    def dispatch(self, client_id: int, state: StateDict, version: int, job: int) -> Any: ...

    def collect(self, handle: Any) -> ClientUpdate | None: ...


class LocalTransport:
    """In-process transport: ``train_fn(client_id, state, version, job) -> ClientUpdate`` runs at collect."""

    def __init__(self, train_fn: Callable[[int, StateDict, int, int], ClientUpdate]) -> None:
        self.train_fn = train_fn

    def dispatch(self, client_id: int, state: StateDict, version: int, job: int) -> Any:
        return (client_id, _clone_state(state), version, job)

    def collect(self, handle: Any) -> ClientUpdate:
        return self.train_fn(*handle)


@dataclass
class History:
    """Records of one asynchronous run.

    ``evals``: ``(time, version, metrics)`` after every server step (and at time 0);
    ``arrivals``: ``(time, client_id, staleness, base_version)`` of every processed update;
    ``failed``: ``(time, client_id)`` of every job the transport skipped (a crashed client, a
    missing or a dropped non-finite reply).
    """

    evals: list[tuple[float, int, dict[str, float]]] = field(default_factory=list)
    arrivals: list[tuple[float, int, int, int]] = field(default_factory=list)
    failed: list[tuple[float, int]] = field(default_factory=list)

    def series(self, key: str) -> tuple[list[float], list[float]]:
        return [t for t, _, _ in self.evals], [m[key] for _, _, m in self.evals]

    @property
    def staleness(self) -> list[int]:
        return [s for _, _, s, _ in self.arrivals]


def time_to_target(times: Sequence[float], values: Sequence[float], target: float) -> float:
    """First time with ``value >= target`` (``inf`` if never)."""
    for t, v in zip(times, values):
        if v >= target:
            return float(t)
    return math.inf


class AsyncSimulator:
    """Event-queue replay of asynchronous FL on a simulated clock.

    Each dispatched job gets a completion time ``now + duration`` from :class:`ClientSpeedModel`;
    jobs are collected in completion order, so the order (hence staleness) is set by the simulated
    clock whatever the transport's real timing. With ``concurrency < num_clients`` a finished
    client's slot goes to a uniformly drawn idle client. A synchronous strategy re-dispatches only
    after a server step.

    A job whose ``transport.collect`` returns ``None`` (a crashed client, a reply that never came,
    a dropped non-finite update) is skipped: the strategy never sees it, the client becomes idle
    and the free slot is refilled as after any arrival; it is recorded in ``History.failed``. A
    synchronous strategy cannot complete its round without the client (``ValueError``), nor can
    any run once every client has failed since the last update that arrived.

    Parameters
    ----------
    transport : Transport
    speed : ClientSpeedModel
    concurrency : int, optional
        Clients training at once (default all).
    seed : int
    """

    def __init__(self, transport: Transport, speed: ClientSpeedModel, concurrency: int | None = None,
                 seed: int = 0) -> None:  # fmt: skip
        self.transport = transport
        self.speed = speed
        n = speed.num_clients
        self.concurrency = n if concurrency is None else check_int("concurrency", concurrency, low=1, high=n)
        self.rng = np.random.default_rng(seed)

    def run(
        self,
        strategy: AsyncStrategy,
        model: nn.Module,
        eval_fn: Callable[[nn.Module], dict[str, float]],
        time_budget: float = math.inf,
        max_server_steps: int | None = None,
    ) -> History:
        """Run until ``time_budget`` simulated time or ``max_server_steps`` server steps."""
        if math.isinf(time_budget) and max_server_steps is None:
            raise ValueError("give a finite time_budget or max_server_steps")
        n = self.speed.num_clients
        hist = History()
        version, now, job = 0, 0.0, 0
        strategy.on_version(version, model.state_dict())
        hist.evals.append((0.0, 0, eval_fn(model)))
        queue: list[tuple[float, int, int, Any]] = []
        idle = list(range(n))
        failing: set[int] = set()  # clients that failed since the last update that arrived

        def dispatch(c: int) -> None:
            nonlocal job
            idle.remove(c)
            handle = self.transport.dispatch(c, model.state_dict(), version, job)
            heapq.heappush(queue, (now + self.speed.sample_duration(c), job, c, handle))
            job += 1

        def fill() -> None:
            while idle and len(queue) < self.concurrency:
                dispatch(int(idle[int(self.rng.integers(len(idle)))]) if self.concurrency < n else idle[0])

        fill()
        while queue:
            finish, _, c, handle = heapq.heappop(queue)
            if finish > time_budget:
                break
            now = finish
            update = self.transport.collect(handle)
            if update is None:
                hist.failed.append((now, c))
                idle.append(c)
                failing.add(c)
                if strategy.synchronous:
                    raise ValueError(f"client {c} failed; a synchronous strategy cannot complete the round")
                if len(failing) == n:
                    raise ValueError(
                        f"every one of the {n} clients failed since the last update that arrived"
                    )
                fill()
                continue
            failing.clear()
            if update.client_id != c:
                raise ValueError(f"transport returned client {update.client_id} for a job of client {c}")
            hist.arrivals.append((now, c, version - update.base_version, update.base_version))
            idle.append(c)
            changed = strategy.on_update(update, model, version)
            if changed:
                version += 1
                strategy.on_version(version, model.state_dict())
                hist.evals.append((now, version, eval_fn(model)))
                if max_server_steps is not None and version >= max_server_steps:
                    break
            if not strategy.synchronous or (changed and not queue):
                fill()
        return hist

"""Client updates, staleness and revival weights, and the client speed model."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from neurips26.common.checks import check_float, check_int

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


def _bn_stat_keys(model: nn.Module) -> list[str]:
    keys = []
    for name, mod in model.named_modules():
        if isinstance(mod, nn.modules.batchnorm._BatchNorm) and mod.running_mean is not None:
            prefix = f"{name}." if name else ""
            keys += [f"{prefix}running_mean", f"{prefix}running_var"]
    return keys

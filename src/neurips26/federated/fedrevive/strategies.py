"""Asynchronous server rules without distillation: the strategy base, FedAsync, FedBuff and synchronous FedAvg."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import torch
from torch import nn

from neurips26.common.checks import check_float, check_int
from neurips26.federated.fedrevive.updates import (
    ClientUpdate,
    StateDict,
    _bn_stat_keys,
    _clone_state,
    _is_float,
    staleness_weight,
)


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

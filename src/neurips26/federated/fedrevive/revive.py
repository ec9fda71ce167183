"""FedRevive: FedBuff plus server-side data-free multi-teacher distillation of stale updates."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from neurips26.common.checks import check_float, check_int
from neurips26.federated.fedrevive.generator import ConditionalGenerator, _BNStats, _ensemble_logits
from neurips26.federated.fedrevive.strategies import FedBuff
from neurips26.federated.fedrevive.updates import (
    ClientUpdate,
    StateDict,
    _clone_state,
    _is_float,
    revival_weight,
    staleness_weight,
)


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

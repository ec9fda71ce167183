"""The conditional generator and the teacher-ensemble helpers of data-free distillation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from neurips26.common.checks import check_int, check_tensor


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

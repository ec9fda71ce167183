r"""Edit updates :math:`\Delta W = R\,\Phi`, applying them in place and reverting them bit-exactly."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from neurips26.common.checks import check_float
from neurips26.editing.editors.site import EditSite


@dataclass
class EditUpdate:
    """A closed-form edit :math:`\\Delta W = R\\,\\Phi`.

    Attributes
    ----------
    delta_W : Tensor, shape (d_v, d_k), float64
    R_s : Tensor, shape (d_v, n)
        Source residuals the update was computed from.
    Phi : Tensor, shape (n, d_k)
        Key-side factor; ``delta_W == R_s @ Phi`` up to rounding.
    K_s : Tensor, shape (d_k, n)
        The keys it was computed for.
    method : str
    """

    delta_W: torch.Tensor
    R_s: torch.Tensor
    Phi: torch.Tensor
    K_s: torch.Tensor
    method: str
    info: dict = field(default_factory=dict)


def _check_kr(K: torch.Tensor, R: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(K, torch.Tensor) or not isinstance(R, torch.Tensor):
        raise TypeError("K and R must be tensors")
    if K.dim() == 1:
        K = K[:, None]
    if R.dim() == 1:
        R = R[:, None]
    if K.dim() != 2 or R.dim() != 2 or K.shape[1] != R.shape[1]:
        raise ValueError(
            f"K (d_k, n) and R (d_v, n) must share n, got K {tuple(K.shape)} and R {tuple(R.shape)}"
        )
    return K.double(), R.double()


class UndoHandle:
    """Restores the edited weight bit-exactly (a saved copy, not a subtraction)."""

    def __init__(self, site: EditSite, saved: torch.Tensor):
        self.site, self._saved, self.active = site, saved, True

    def revert(self) -> None:
        if self.active:
            with torch.no_grad():
                self.site.module.weight.copy_(self._saved)
            self.active = False

    def __enter__(self) -> UndoHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.revert()


def apply_update(site: EditSite, update: EditUpdate | torch.Tensor, alpha: float = 1.0) -> UndoHandle:
    """Add ``alpha * delta_W`` to the site's weight in place; return an :class:`UndoHandle`."""
    check_float("alpha", alpha)
    delta = update.delta_W if isinstance(update, EditUpdate) else update
    if tuple(delta.shape) != (site.d_v, site.d_k):
        raise ValueError(
            f"delta_W must be ({site.d_v}, {site.d_k}) for {site.path}, got {tuple(delta.shape)}"
        )
    saved = site.module.weight.detach().clone()
    with torch.no_grad():
        w = site.weight
        w.add_((alpha * delta).to(dtype=w.dtype, device=w.device))
    return UndoHandle(site, saved)

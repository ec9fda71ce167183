"""ROME: the rank-one closed-form update of one fact at one layer."""

from __future__ import annotations

import torch

from neurips26.common.checks import check_float
from neurips26.editing.editors.covariance import _check_c0, _chol
from neurips26.editing.editors.update import EditUpdate, _check_kr


def rome_update(k: torch.Tensor, r: torch.Tensor, C0: torch.Tensor, jitter: float = 1e-6) -> EditUpdate:
    """ROME's rank-one update.

    .. math:: u = \\frac{C_0^{-1} k}{k^\\top C_0^{-1} k}, \\qquad \\Delta W = r\\,u^\\top,

    so that :math:`(W + \\Delta W) k = W k + r` exactly and the update is minimal in the
    :math:`C_0`-weighted norm.

    Parameters
    ----------
    k : Tensor, shape (d_k,)
    r : Tensor, shape (d_v,)
    C0 : Tensor, shape (d_k, d_k)
    jitter : float
        Cholesky jitter relative to ``tr(C0)/d_k`` (``0`` allowed when C0 is definite).
    """
    check_float("jitter", jitter, 0.0)
    K, R = _check_kr(k, r)
    if K.shape[1] != 1:
        raise ValueError(f"rome_update edits one fact: k must be (d_k,), got {tuple(k.shape)}")
    C0 = _check_c0(C0, K.shape[0])
    L = _chol(C0, jitter)
    c_inv_k = torch.cholesky_solve(K, L)  # (d_k, 1)
    denom = float(K[:, 0] @ c_inv_k[:, 0])
    if denom <= 0:
        raise ValueError("k must be non-zero")
    Phi = (c_inv_k / denom).T
    return EditUpdate(R @ Phi, R, Phi, K, "rome")

"""AlphaEdit: the MEMIT update projected onto the null space of the preserved keys."""

from __future__ import annotations

import torch

from neurips26.common.checks import check_float
from neurips26.editing.editors.covariance import _check_c0
from neurips26.editing.editors.update import EditUpdate, _check_kr


def null_space_projector(C0: torch.Tensor, eps: float = 1e-2) -> torch.Tensor:
    """AlphaEdit's projector onto the (approximate) null space of preserved keys.

    .. math:: C_0 = U \\Lambda U^\\top,\\quad P = \\hat U \\hat U^\\top,\\quad
              \\hat U = \\{u_i : \\lambda_i < \\varepsilon\\,\\lambda_{\\max}\\}

    Returns
    -------
    Tensor, shape (d_k, d_k), float64; an orthogonal projector.
    """
    check_float("eps", eps, 0.0)
    if not isinstance(C0, torch.Tensor) or C0.dim() != 2:
        raise ValueError("C0 must be a square (d_k, d_k) tensor")
    C0 = _check_c0(C0, C0.shape[0])
    evals, evecs = torch.linalg.eigh(0.5 * (C0 + C0.T))
    keep = evals < eps * evals.max()
    U = evecs[:, keep]
    return U @ U.T


def alphaedit_update(
    K: torch.Tensor,
    R: torch.Tensor,
    C0: torch.Tensor | None = None,
    K_prev: torch.Tensor | None = None,
    eps: float = 1e-2,
    l2: float = 1.0,
    P: torch.Tensor | None = None,
) -> EditUpdate:
    """AlphaEdit's null-space constrained update.

    .. math:: \\Delta W = R K^\\top P\\,\\big((K_p K_p^\\top + K K^\\top) P + \\lambda_2 I\\big)^{-1}

    with :math:`P` from :func:`null_space_projector`. For every key :math:`k_0` with
    :math:`P k_0 = 0` (the preserved-key subspace) :math:`\\Delta W k_0 = 0` exactly.

    Parameters
    ----------
    K : Tensor, shape (d_k, n)
    R : Tensor, shape (d_v, n)
    C0 : Tensor, shape (d_k, d_k), optional
        Needed when ``P`` is not given.
    K_prev : Tensor, shape (d_k, m), optional
        Keys of previously applied edits (sequential editing).
    eps : float
        Relative eigenvalue threshold of the null space.
    l2 : float
        Ridge term (AlphaEdit's ``L2``; > 0).
    P : Tensor, shape (d_k, d_k), optional
        Precomputed projector.
    """
    check_float("l2", l2, 0.0, low_open=True)
    K, R = _check_kr(K, R)
    d_k = K.shape[0]
    if P is None:
        if C0 is None:
            raise ValueError("alphaedit_update needs C0 or P")
        P = null_space_projector(_check_c0(C0, d_k), eps)
    elif P.shape != (d_k, d_k):
        raise ValueError(f"P must be ({d_k}, {d_k}), got {tuple(P.shape)}")
    P = P.double()
    A = K @ K.T
    if K_prev is not None:
        Kp = K_prev.double()
        if Kp.dim() != 2 or Kp.shape[0] != d_k:
            raise ValueError(f"K_prev must be ({d_k}, m), got {tuple(K_prev.shape)}")
        A = A + Kp @ Kp.T
    M = A @ P + l2 * torch.eye(d_k, dtype=K.dtype)
    # Phi = K^T P M^{-1}  <=>  M^T Phi^T = P K
    Phi = torch.linalg.solve(M.T, P @ K).T
    return EditUpdate(R @ Phi, R, Phi, K, "alphaedit", {"null_dim": int(round(float(torch.trace(P))))})

"""MEMIT: the batched least-squares update, at one layer and spread over several layers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from neurips26.common.checks import check_float
from neurips26.editing.editors.covariance import _check_c0, _chol
from neurips26.editing.editors.requests import TokenizedRequest, _batch, tokenize_request
from neurips26.editing.editors.site import (
    EditSite,
    _device,
    _prefix_list,
    _prefixed_rows,
    compute_keys,
    compute_target_values,
)
from neurips26.editing.editors.update import EditUpdate, UndoHandle, _check_kr, apply_update


def memit_update(
    K: torch.Tensor, R: torch.Tensor, C0: torch.Tensor, lam: float = 1e2, jitter: float = 1e-6
) -> EditUpdate:
    """MEMIT's batch update at one layer.

    .. math:: \\Delta W = R K^\\top (\\lambda C_0 + K K^\\top)^{-1}
              = R\\,(\\lambda I + K^\\top C_0^{-1} K)^{-1} K^\\top C_0^{-1}

    (the right form, by the Woodbury identity, solves an n x n system and also holds at
    :math:`\\lambda = 0`, where one fact gives exactly ROME's update).

    Parameters
    ----------
    K : Tensor, shape (d_k, n)
    R : Tensor, shape (d_v, n)
    C0 : Tensor, shape (d_k, d_k)
    lam : float
        ``mom2_update_weight`` (>= 0).
    """
    check_float("lam", lam, 0.0)
    check_float("jitter", jitter, 0.0)
    K, R = _check_kr(K, R)
    C0 = _check_c0(C0, K.shape[0])
    L = _chol(C0, jitter)
    c_inv_K = torch.cholesky_solve(K, L)  # (d_k, n)
    gram = K.T @ c_inv_K
    gram = 0.5 * (gram + gram.T) + lam * torch.eye(K.shape[1], dtype=K.dtype)
    Phi = torch.linalg.solve(gram, c_inv_K.T)  # (n, d_k)
    return EditUpdate(R @ Phi, R, Phi, K, "memit", {"lam": lam})


def _stream_at(model, block_path: str, requests, prefixes) -> torch.Tensor:
    """Residual stream (block output) at the last subject token, mean over prefixes: (d_v, n)."""
    block = model.get_submodule(block_path)
    pre = _prefix_list(prefixes)
    rows, pos = _prefixed_rows(requests, pre)
    store = []
    handle = block.register_forward_hook(
        lambda _m, _a, out: store.append(out[0] if isinstance(out, tuple) else out)
    )
    ids, mask = _batch(rows)
    try:
        with torch.no_grad():
            model(input_ids=ids.to(_device(model)), attention_mask=mask.to(_device(model)))
    finally:
        handle.remove()
    h = store[0][torch.arange(len(rows)), torch.tensor(pos)].double().cpu()
    return h.view(len(requests), len(pre), -1).mean(1).T


def memit_multilayer(
    model: torch.nn.Module,
    requests: Sequence[TokenizedRequest],
    layers: Sequence[int],
    C0s: dict[int, torch.Tensor],
    module_template: str = "model.layers.{}.mlp.down_proj",
    lam: float = 1e2,
    prefixes: Sequence[Sequence[int]] | None = None,
    residuals: torch.Tensor | None = None,
    **value_kwargs: Any,
) -> tuple[list[tuple[EditSite, EditUpdate]], list[UndoHandle]]:
    """MEMIT spread over several layers (applied in place, in layer order).

    The target :math:`z_i = h_L(x_i) + \\delta_i` is optimised at the last layer :math:`L`; at layer
    :math:`\\ell` (the j-th of m) the residual is :math:`(z_i - h_L^{cur}(x_i)) / (m - j)` where
    :math:`h_L^{cur}` is the residual stream at the last layer's output with the earlier layers
    already edited. With one layer this is :func:`memit_update`.

    Returns
    -------
    (updates, handles)
        ``[(site, update)]`` per layer and the undo handles (revert in reverse order).
    """
    layers = list(layers)
    if not layers or sorted(set(layers)) != layers:
        raise ValueError(f"layers must be a non-empty strictly increasing list, got {layers}")
    requests = [tokenize_request(r) for r in requests]
    missing = [ell for ell in layers if ell not in C0s]
    if missing:
        raise KeyError(f"C0s lacks layers {missing}")
    last_site = EditSite(model, layers[-1], module_template)
    block_path = last_site.block_prefix.rstrip(".")
    if residuals is None:
        _, residuals = compute_target_values(last_site, requests, prefixes, **value_kwargs)
    z = _stream_at(model, block_path, requests, prefixes) + residuals.double()
    updates, handles = [], []
    try:
        for j, ell in enumerate(layers):
            site = EditSite(model, ell, module_template)
            cur = _stream_at(model, block_path, requests, prefixes)
            R = (z - cur) / (len(layers) - j)
            K = compute_keys(site, requests, prefixes)
            upd = memit_update(K, R, C0s[ell], lam=lam)
            handles.append(apply_update(site, upd))
            updates.append((site, upd))
    except BaseException:
        for h in reversed(handles):
            h.revert()
        raise
    return updates, handles

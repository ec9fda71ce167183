"""The uncentred key second moment :math:`C_0 = \\mathbb{E}[k k^\top]` and its checked Cholesky factor."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from neurips26.common.checks import check_int
from neurips26.editing.editors.site import EditSite, _device


def estimate_key_moment(site: EditSite, batches: Iterable[dict], max_tokens: int = 100_000) -> torch.Tensor:
    """Uncentred second moment of the site's keys over real tokens.

    .. math:: C_0 = \\frac{1}{N}\\sum_{t=1}^{N} k_t k_t^\\top

    accumulated in float64 over the non-padding positions of ``batches`` (each a dict with
    ``input_ids`` and optional ``attention_mask``), stopping after ``max_tokens`` tokens.

    Returns
    -------
    Tensor, shape (d_k, d_k), float64
        Symmetric PSD; the mean, not the sum (so two halves average to the one-shot estimate).
    """
    check_int("max_tokens", max_tokens, low=1)
    total = torch.zeros(site.d_k, site.d_k, dtype=torch.float64)
    count = 0
    device = _device(site.model)
    with torch.no_grad():
        for batch in batches:
            if count >= max_tokens:
                break
            ids = batch["input_ids"].to(device)
            mask = batch.get("attention_mask")
            mask = torch.ones_like(ids) if mask is None else mask.to(device)
            keys = site.keys_of(input_ids=ids, attention_mask=mask)[mask.bool()].double().cpu()
            keys = keys[: max_tokens - count]
            total += keys.T @ keys
            count += keys.shape[0]
    if count == 0:
        raise ValueError("batches held no tokens")
    return total / count


def _check_c0(C0: torch.Tensor, d_k: int) -> torch.Tensor:
    if not isinstance(C0, torch.Tensor) or C0.shape != (d_k, d_k):
        got = tuple(C0.shape) if isinstance(C0, torch.Tensor) else type(C0).__name__
        raise ValueError(f"C0 must be a ({d_k}, {d_k}) tensor, got {got}")
    C0 = C0.double()
    if not torch.allclose(C0, C0.T, rtol=1e-8, atol=1e-10 * float(C0.abs().max().clamp_min(1e-300))):
        raise ValueError("C0 must be symmetric")
    return C0


def _chol(C0: torch.Tensor, jitter: float) -> torch.Tensor:
    d = C0.shape[0]
    eps = jitter * float(torch.trace(C0)) / d
    L, info = torch.linalg.cholesky_ex(C0 + eps * torch.eye(d, dtype=C0.dtype))
    if int(info) != 0 or not torch.isfinite(L).all():
        raise ValueError(
            "C0 must be positive definite (after jitter); got a non-PSD or singular matrix (raise jitter)"
        )
    return L

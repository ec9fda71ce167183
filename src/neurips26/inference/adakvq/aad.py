"""Average Attention Distance: the AAD statistic, its profile, and the probing attention function."""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from neurips26.common.checks import check_float, check_int


def aad_from_probs(
    probs: torch.Tensor, query_index: torch.Tensor, visible: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """AAD and nAAD from attention probabilities.

    Parameters
    ----------
    probs : Tensor[..., Q, K]
        Attention probabilities of ``Q`` queries over ``K`` cache positions.
    query_index : LongTensor[Q]
        Cache index ``t`` of each query.
    visible : BoolTensor[..., Q, K], optional
        Visible keys (default: causal, ``j <= t``).

    Returns
    -------
    aad, naad : Tensor[..., Q]
    """
    K = probs.shape[-1]
    j = torch.arange(K, device=probs.device)
    dist = (query_index.to(probs.device).unsqueeze(-1) - j).to(probs.dtype)  # [Q, K]
    if visible is None:
        visible = dist >= 0
    aad = (probs * dist.clamp_min(0)).sum(-1)
    n_vis = visible.sum(-1).to(probs.dtype)
    naad = aad / (n_vis - 1).clamp_min(1)
    return aad, naad


@dataclass
class AADProfile:
    """Per-layer calibration profile: ``mean``/``std`` ``Tensor[L]`` of nAAD and the raw per-position series."""

    mean: torch.Tensor
    std: torch.Tensor
    series: list[torch.Tensor] = field(default_factory=list)

    def demand(self, kappa: float = 1.0) -> torch.Tensor:
        """Per-layer demand ``D_l = mu_l + kappa sigma_l``, ``Tensor[L]``."""
        return self.mean + kappa * self.std

    @classmethod
    def from_stats(cls, stats: torch.Tensor) -> AADProfile:
        """Profile from per-layer sufficient statistics ``Tensor[L, 3]`` = (count, sum, sum of squares)
        of nAAD (population std; layers without samples get 0). The series is left empty."""
        if stats.dim() != 2 or stats.shape[1] != 3:
            raise ValueError(
                f"stats must be [layers, 3] (count, sum, sum of squares), got {tuple(stats.shape)}"
            )
        s = stats.double()
        n = s[:, 0].clamp_min(1)
        mean = torch.where(s[:, 0] > 0, s[:, 1] / n, torch.zeros_like(n))
        var = torch.where(s[:, 0] > 1, s[:, 2] / n - mean**2, torch.zeros_like(n)).clamp_min(0)
        return cls(mean.float(), var.sqrt().float(), [])


_ACTIVE: dict[str, Any] = {"tracker": None}


class AADTracker:
    """Collects per-layer nAAD from the registered attention function.

    ``with tracker.active(): model(...)`` makes it the target. Keeps, per layer, the raw per-position
    series (``series[l]``: list of ``Tensor[n_probe]``) and an EMA ``d_l`` (factor ``ema``).
    """

    def __init__(self, ema: float = 0.9):
        self.ema = check_float("ema", ema, 0.0, 1.0, high_open=True)
        self.reset()

    def reset(self) -> None:
        self.series: dict[int, list[torch.Tensor]] = {}
        self._ema: dict[int, float] = {}
        self.calls = 0

    @contextmanager
    def active(self):
        previous = _ACTIVE["tracker"]
        _ACTIVE["tracker"] = self
        try:
            yield self
        finally:
            _ACTIVE["tracker"] = previous

    def record(self, layer_idx: int, naad: torch.Tensor) -> None:
        """Record per-query nAAD values ``Tensor[Q]`` (already averaged over heads and batch)."""
        naad = naad.detach().float().cpu()
        naad = naad[torch.isfinite(naad)]
        if naad.numel() == 0:
            return
        self.series.setdefault(layer_idx, []).append(naad)
        value = float(naad.mean())
        prev = self._ema.get(layer_idx)
        self._ema[layer_idx] = value if prev is None else self.ema * prev + (1 - self.ema) * value
        self.calls += 1

    def layer_demand(self, layer_idx: int) -> float | None:
        """Current EMA of the layer's nAAD (``None`` before any measurement)."""
        return self._ema.get(layer_idx)

    def layer_series(self, layer_idx: int) -> torch.Tensor:
        s = self.series.get(layer_idx, [])
        return torch.cat(s) if s else torch.zeros(0)

    def stats(self, num_layers: int | None = None) -> torch.Tensor:
        """Per-layer sufficient statistics ``Tensor[L, 3]`` (float64): count, sum and sum of squares of
        the recorded nAAD values (``L`` = ``num_layers`` or the highest recorded layer + 1)."""
        n = (max(self.series) + 1 if self.series else 0) if num_layers is None else num_layers
        check_int("num_layers", n, low=0)
        out = torch.zeros(n, 3, dtype=torch.float64)
        for i in range(n):
            s = self.layer_series(i).double()
            out[i] = torch.stack(
                [torch.tensor(float(s.numel()), dtype=torch.float64), s.sum(), (s * s).sum()]
            )
        return out

    def profile(self) -> AADProfile:
        """Per-layer mean/std of everything recorded (``RuntimeError`` if nothing was)."""
        layers = sorted(self.series)
        if not layers:
            raise RuntimeError(
                "no AAD recorded: run the model with the registered attention inside tracker.active()"
            )
        n = max(layers) + 1
        series = [self.layer_series(i) for i in range(n)]
        mean = torch.tensor([float(s.mean()) if s.numel() else 0.0 for s in series])
        std = torch.tensor([float(s.std(unbiased=False)) if s.numel() > 1 else 0.0 for s in series])
        return AADProfile(mean, std, series)


def _probe_aad(module, query, key, attention_mask, scaling, n_probe):
    b, hq, q_len, d = query.shape
    hk, kv_len = key.shape[1], key.shape[2]
    n_p = min(n_probe, q_len)
    q = query[:, :, q_len - n_p :, :].float()
    kt = key.float().transpose(-1, -2)  # [B, Hk, d, K]
    scale = scaling if scaling is not None else 1.0 / math.sqrt(d)
    if hq != hk:
        # grouped query heads: query head h reads key head h // g. One matmul per position j in the group
        # (query heads j, g + j, ...) against the shared keys, instead of repeating the keys g times: the
        # same [n_p, d] x [d, K] products per (batch, head), so the same bits, without copying K g times.
        g = hq // hk
        qg = q.view(b, hk, g, n_p, d)
        scores = torch.stack([qg[:, :, j] @ kt for j in range(g)], dim=2).view(b, hq, n_p, kv_len) * scale
    else:
        scores = (q @ kt) * scale  # [B, Hq, n_p, K]
    qidx = torch.arange(kv_len - n_p, kv_len, device=query.device)
    if attention_mask is None:
        visible = (torch.arange(kv_len, device=query.device) <= qidx.unsqueeze(-1)).expand(b, 1, n_p, kv_len)
    else:
        m = attention_mask[:, :, q_len - n_p :, :kv_len]
        visible = m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2
        visible = visible.expand(b, 1, n_p, kv_len)
    scores = scores.masked_fill(~visible, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    _, naad = aad_from_probs(probs, qidx, visible)  # [B, Hq, n_p]
    ok = visible.any(-1).expand_as(naad)
    naad = torch.where(ok, naad, torch.full_like(naad, float("nan")))
    return torch.nanmean(naad, dim=(0, 1))


def register_aad_attention(name: str = "adakvq_sdpa", n_probe: int = 32) -> str:
    """Register an SDPA attention function that also measures nAAD for the active :class:`AADTracker`.

    The function follows the ``AttentionInterface`` signature ``(module, query, key, value,
    attention_mask, scaling=None, dropout=0.0, **kwargs) -> (attn_output, None)`` and uses
    ``module.layer_idx``. Select it with ``model.set_attn_implementation(name)``.
    """
    check_int("n_probe", n_probe, low=1)

    def aad_sdpa(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        tracker = _ACTIVE["tracker"]
        if tracker is not None:
            with torch.no_grad():
                tracker.record(
                    module.layer_idx, _probe_aad(module, query, key, attention_mask, scaling, n_probe)
                )
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )

    AttentionInterface.register(name, aad_sdpa)
    AttentionMaskInterface.register(name, sdpa_mask)  # same (padding-aware) masks as SDPA
    return name

"""AdaKVQ: mixed-precision KV-cache quantisation driven by Average Attention Distance (AAD).

Paper: "AdaKVQ" (NeurIPS 2026 submission; seed file ``004_01f475bc147a144d.txt``, paragraph beginning
"Large Reasoning Models (LRMs) rely on"). Static low-bit KV quantisation gives every layer the same
bits at every moment. AdaKVQ measures how far back each layer reads with the Average Attention
Distance and gives more bits to layers with a high long-range retrieval demand (a static allocation
from a calibration profile), then modulates the bits of newly quantised KV blocks online when a
layer's current AAD surges or drops, under a global average-bit budget.

Math
----
For a query at cache index ``t`` with attention probabilities ``a_{t,j}`` over visible keys ``j``::

    AAD(t)  = sum_j a_{t,j} (t - j)
    nAAD(t) = AAD(t) / max(n_visible(t) - 1, 1)   in [0, 1]   (= AAD / t without padding)

averaged over heads and batch rows. Calibration gives per-layer ``mu_l``, ``sigma_l``; demand
``D_l = mu_l + kappa sigma_l``. Static allocation: start at ``min(B)``, repeatedly raise the
highest-demand layer by one step of ``B`` while the mean stays ``<= avg_bits`` and no layer ends with
more bits than a layer of higher demand (ties -> deeper layer). Online: ``d_l`` = EMA (rate
``1 - ema``) of the layer's nAAD; at each block flush the block gets the next higher bit-width if
``d_l > mu_l + kappa_hi sigma_l``, the next lower if ``d_l < mu_l - kappa_lo sigma_l``, else the base;
the choice is lowered step by step while the token-weighted mean bits of all stored blocks would
exceed ``avg_bits + budget_slack`` (``min(B)`` is always allowed, so the invariant holds).

AAD is measured by an attention function registered with ``transformers.AttentionInterface`` that
runs SDPA and additionally scores the last ``n_probe`` queries (``O(n_probe * T * d)`` extra work).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AttentionInterface, Cache
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from neurips26.common.checks import check_float, check_int
from neurips26.inference.quant import (
    KIVICache,
    KIVILayer,
    QuantizedKVCacheMixin,
    check_bits,
    kivi_memory_formula,
    text_config,
)

__all__ = [
    "AdaKVQConfig",
    "AADTracker",
    "AADProfile",
    "aad_from_probs",
    "register_aad_attention",
    "calibrate_aad",
    "allocate_bits",
    "BitController",
    "AdaKVQLayer",
    "AdaKVQCache",
    "KIVICache",
    "kivi_memory_formula",
]


@dataclass
class AdaKVQConfig:
    """Configuration of AdaKVQ.

    Parameters
    ----------
    bits : tuple of int
        Allowed bit-widths ``B`` (each in 1, 2, 3, 4, 8 or 16), e.g. ``(2, 3, 4)``; extreme ``(1, 2, 4)``.
    avg_bits : float
        Target average code bits ``b_bar``, within ``[min(B), max(B)]``.
    kappa, kappa_hi, kappa_lo : float >= 0
        Demand ``mu + kappa sigma``; online thresholds ``mu +/- kappa_hi/lo sigma``.
    ema : float in [0, 1)
        EMA factor of the online nAAD (``d <- ema d + (1 - ema) nAAD``).
    group_size, residual_length : int
        KIVI-layout block size ``G`` (tokens) and full-precision window ``R``.
    value_group_size : int or None
        Channels per value group (``None`` -> ``min(head_dim, 32)``); must divide ``head_dim``.
    budget_slack : float >= 0
        ``epsilon``: the running mean may not exceed ``avg_bits + budget_slack``.
    online : bool
        Online modulation (False = static mixed precision, the ablation).
    """

    bits: tuple[int, ...] = (2, 3, 4)
    avg_bits: float = 2.5
    kappa: float = 1.0
    kappa_hi: float = 1.0
    kappa_lo: float = 1.0
    ema: float = 0.9
    group_size: int = 32
    residual_length: int = 32
    value_group_size: int | None = None
    budget_slack: float = 0.05
    online: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.bits, int) or not isinstance(self.bits, Sequence) or not self.bits:
            raise TypeError(f"bits must be a non-empty tuple of ints, got {self.bits!r}")
        self.bits = tuple(sorted({check_bits("bits", b) for b in self.bits}))
        check_float("avg_bits", self.avg_bits)
        if not min(self.bits) <= self.avg_bits <= max(self.bits):
            raise ValueError(
                f"avg_bits must lie in [min(bits), max(bits)] = [{min(self.bits)}, {max(self.bits)}]"
            )
        for name in ("kappa", "kappa_hi", "kappa_lo", "budget_slack"):
            check_float(name, getattr(self, name), 0.0)
        check_float("ema", self.ema, 0.0, 1.0, high_open=True)
        check_int("group_size", self.group_size, low=1)
        check_int("residual_length", self.residual_length, low=0)
        if self.value_group_size is not None:
            check_int("value_group_size", self.value_group_size, low=1)


# ------------------------------------------------------------------------------------------- AAD
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
        return self.mean + kappa * self.std


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

    def profile(self) -> AADProfile:
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
    k = key.float()
    if hq != hk:
        k = k.repeat_interleave(hq // hk, dim=1)
    scale = scaling if scaling is not None else 1.0 / math.sqrt(d)
    scores = (q @ k.transpose(-1, -2)) * scale  # [B, Hq, n_p, K]
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


def calibrate_aad(
    model: torch.nn.Module,
    input_ids_list: Iterable[torch.Tensor],
    tracker: AADTracker | None = None,
    max_new_tokens: int = 64,
    n_probe: int = 32,
) -> AADProfile:
    """Per-layer nAAD profile over calibration prompts, including greedy decoding positions.

    Temporarily switches the model to the registered AAD attention; restores it afterwards.
    ``input_ids_list``: iterable of ``LongTensor[1, T]`` (or ``[B, T]`` without padding).
    """
    check_int("max_new_tokens", max_new_tokens, low=0)
    tracker = tracker or AADTracker()
    name = register_aad_attention("adakvq_sdpa", n_probe)
    previous = model.config._attn_implementation
    model.set_attn_implementation(name)
    try:
        with torch.no_grad(), tracker.active():
            for ids in input_ids_list:
                if max_new_tokens:
                    model.generate(
                        ids,
                        attention_mask=torch.ones_like(ids),
                        max_new_tokens=max_new_tokens,
                        do_sample=False,
                        pad_token_id=getattr(model.config, "eos_token_id", None) or 0,
                    )
                else:
                    model(input_ids=ids)
    finally:
        model.set_attn_implementation(previous)
    return tracker.profile()


# ------------------------------------------------------------------------------------ allocation
def allocate_bits(
    profile: AADProfile | torch.Tensor | Sequence[float],
    bits: Sequence[int] = (2, 3, 4),
    avg_bits: float = 2.5,
    kappa: float = 1.0,
) -> list[int]:
    """Static per-layer bit allocation from the AAD demand under a mean-bit budget.

    Parameters
    ----------
    profile : AADProfile, or per-layer demands ``D_l``
    bits : allowed bit-widths ``B``
    avg_bits : budget on the mean bits (``min(B) <= avg_bits <= max(B)``)
    kappa : demand ``mu + kappa sigma`` (AADProfile only)

    Returns
    -------
    list of int, one per layer; mean <= ``avg_bits``; monotone in the demand.
    """
    levels = sorted({check_bits("bits", b) for b in bits})
    check_float("avg_bits", avg_bits)
    if not levels[0] <= avg_bits <= levels[-1]:
        raise ValueError(f"avg_bits must lie in [min(bits), max(bits)] = [{levels[0]}, {levels[-1]}]")
    check_float("kappa", kappa, 0.0)
    demand = (
        profile.demand(kappa)
        if isinstance(profile, AADProfile)
        else torch.as_tensor(profile, dtype=torch.float64)
    )
    demand = [float(v) for v in demand]
    n = len(demand)
    if n == 0:
        raise ValueError("profile has no layers")
    order = sorted(range(n), key=lambda i: (-demand[i], -i))
    level = [0] * n
    budget = avg_bits * n + 1e-9
    while True:
        total = sum(levels[v] for v in level)
        for rank, i in enumerate(order):
            if level[i] + 1 >= len(levels):
                continue
            new = levels[level[i] + 1]
            if total - levels[level[i]] + new > budget:
                continue
            if rank and any(levels[level[j]] < new for j in order[:rank]):
                continue
            level[i] += 1
            break
        else:
            break
    return [levels[v] for v in level]


class BitController:
    """Chooses the bit-width of each flushed block (online modulation + global budget).

    Parameters
    ----------
    config : AdaKVQConfig
    base_bits : list of int
        Static allocation per layer.
    profile : AADProfile or None
        Needed for online modulation thresholds.
    tracker : AADTracker or None
        Source of the online nAAD; without it the static allocation is used (warned once).
    """

    def __init__(
        self,
        config: AdaKVQConfig,
        base_bits: Sequence[int],
        profile: AADProfile | None,
        tracker: AADTracker | None,
    ):
        self.config = config
        self.base_bits = list(base_bits)
        self.profile = profile
        self.tracker = tracker
        self.levels = list(config.bits)
        n = len(self.base_bits)
        self.bit_elems = [0.0] * n
        self.elems = [0] * n
        self.log: list[tuple[int, int, int]] = []
        self._warned = False

    def _layer_mean(self, i: int, extra_bits: float = 0.0, extra_elems: int = 0) -> float:
        elems = self.elems[i] + extra_elems
        if elems == 0:
            return float(self.base_bits[i])
        return (self.bit_elems[i] + extra_bits) / elems

    def running_mean(self, layer_idx: int | None = None, bits: int = 0, n_elems: int = 0) -> float:
        """Layer-averaged mean code bits (layers without blocks count at their base bits), optionally
        with a prospective block of ``n_elems`` scalars at ``bits`` added to ``layer_idx``."""
        means = [
            self._layer_mean(i, bits * n_elems, n_elems) if i == layer_idx else self._layer_mean(i)
            for i in range(len(self.base_bits))
        ]
        return sum(means) / len(means)

    def token_mean(self) -> float:
        """Token-weighted mean code bits of all stored blocks."""
        e = sum(self.elems)
        return sum(self.bit_elems) / e if e else float("nan")

    def desired(self, layer_idx: int) -> int:
        base = self.base_bits[layer_idx]
        if not self.config.online or self.profile is None:
            return base
        if self.tracker is None:
            if not self._warned:
                warnings.warn("AdaKVQCache has no AADTracker: using the static allocation", stacklevel=3)
                self._warned = True
            return base
        d = self.tracker.layer_demand(layer_idx)
        if d is None:
            return base
        mu, sigma = float(self.profile.mean[layer_idx]), float(self.profile.std[layer_idx])
        i = self.levels.index(base) if base in self.levels else 0
        if d > mu + self.config.kappa_hi * sigma and i + 1 < len(self.levels):
            return self.levels[i + 1]
        if d < mu - self.config.kappa_lo * sigma and i > 0:
            return self.levels[i - 1]
        return base

    def choose(self, layer_idx: int, n_elems: int, block_index: int = -1) -> int:
        """Bits for a block of ``n_elems`` K+V scalars of layer ``layer_idx`` (and account for it).

        The desired width is lowered step by step while the layer-averaged mean would exceed
        ``avg_bits + budget_slack``; ``min(B)`` never raises the mean, so the bound always holds.
        """
        bits = self.desired(layer_idx)
        limit = self.config.avg_bits + self.config.budget_slack
        i = self.levels.index(bits)
        while i > 0 and self.running_mean(layer_idx, self.levels[i], n_elems) > limit + 1e-12:
            i -= 1
        bits = self.levels[i]
        self.bit_elems[layer_idx] += bits * n_elems
        self.elems[layer_idx] += n_elems
        self.log.append((layer_idx, block_index, bits))
        return bits

    def release(self, layer_idx: int, bits: int, n_elems: int) -> None:
        """Forget a removed block (crop)."""
        self.bit_elems[layer_idx] -= bits * n_elems
        self.elems[layer_idx] -= n_elems


class AdaKVQLayer(KIVILayer):
    """KIVI-layout layer whose block bit-widths come from a shared :class:`BitController`."""

    def __init__(
        self, layer_idx: int, controller: BitController, config: AdaKVQConfig, keep_dequantized: bool = False
    ):
        base = controller.base_bits[layer_idx]
        super().__init__(
            base, config.group_size, config.residual_length, config.value_group_size, keep_dequantized
        )
        self.layer_idx = layer_idx
        self.controller = controller

    def _next_block_bits(self) -> int:
        n = 2 * self.keys.shape[0] * self.keys.shape[1] * self.group_size * self.keys.shape[-1]
        return self.controller.choose(self.layer_idx, n, len(self.block_bits))

    def crop(self, tokens_to_remove: int) -> None:
        before = list(zip(self.key_blocks, self.block_bits))
        super().crop(tokens_to_remove)
        for kb, b in before[len(self.key_blocks) :]:
            self.controller.release(self.layer_idx, b, 2 * kb.numel)


class AdaKVQCache(QuantizedKVCacheMixin, Cache):
    """AdaKVQ cache: a ``transformers.Cache`` of :class:`AdaKVQLayer`, one per decoder layer.

    Usable as ``model.generate(input_ids, past_key_values=cache)``; for online modulation, select the
    registered AAD attention (:func:`register_aad_attention`) and run inside ``tracker.active()``.

    Parameters
    ----------
    config : PretrainedConfig
    quant : AdaKVQConfig
    profile : AADProfile, optional
        Calibration profile; without it every layer gets the largest ``b <= avg_bits`` of ``B``.
    tracker : AADTracker, optional
        Online nAAD source; without it the static allocation is used (one warning).
    base_bits : list of int, optional
        Override of the static allocation.
    keep_dequantized : bool
        See :class:`~neurips26.inference.quant.KIVILayer`.
    """

    def __init__(
        self,
        config: Any,
        quant: AdaKVQConfig | None = None,
        profile: AADProfile | None = None,
        tracker: AADTracker | None = None,
        base_bits: Sequence[int] | None = None,
        keep_dequantized: bool = False,
    ):
        config = text_config(config)
        quant = AdaKVQConfig() if quant is None else quant
        if not isinstance(quant, AdaKVQConfig):
            raise TypeError(f"quant must be an AdaKVQConfig, got {type(quant).__name__}")
        n_layers = config.num_hidden_layers
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        if quant.value_group_size is not None and head_dim % quant.value_group_size:
            raise ValueError(f"value_group_size ({quant.value_group_size}) must divide head_dim ({head_dim})")
        if profile is not None and len(profile.mean) != n_layers:
            raise ValueError(f"profile has {len(profile.mean)} layers, the model {n_layers}")
        if base_bits is None:
            if profile is not None:
                base_bits = allocate_bits(profile, quant.bits, quant.avg_bits, quant.kappa)
            else:
                base_bits = [max(b for b in quant.bits if b <= quant.avg_bits)] * n_layers
        base_bits = [check_bits("base_bits", int(b)) for b in base_bits]
        if len(base_bits) != n_layers or any(b not in quant.bits for b in base_bits):
            raise ValueError(f"base_bits must hold {n_layers} values from {quant.bits}")
        self.quant = quant
        self.controller = BitController(quant, base_bits, profile, tracker)
        layers = [AdaKVQLayer(i, self.controller, quant, keep_dequantized) for i in range(n_layers)]
        super().__init__(layers=layers)

    @property
    def base_bits(self) -> list[int]:
        return list(self.controller.base_bits)

    def bits_log(self) -> list[tuple[int, int, int]]:
        """``(layer, block_index, bits)`` for every block flushed so far."""
        return list(self.controller.log)

    def average_bits(self) -> float:
        """Token-weighted mean code bits of the stored blocks (metadata excluded)."""
        return super().average_bits()

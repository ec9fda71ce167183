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
``D_l = mu_l + kappa sigma_l``. Keys and values get separate bit-widths from a per-layer *ladder* of
rungs ``r = 0 .. |B| - 1`` with value bits ``B_r`` and key bits ``B_min(r + key_bonus, |B| - 1)``
(``key_bonus = 0``: the same bits for K and V; ``key_bonus = 1``: keys one step higher, capped at
``max(B)``). A rung costs ``c_r = (kbits_r + vbits_r) / 2`` bits per K/V scalar (K and V blocks hold
the same number of scalars). Static allocation: start every layer at rung 0, repeatedly raise the
highest-demand layer by one rung while ``mean_l c_{r_l} <= avg_bits`` and no layer ends on a higher rung
than a layer of higher demand (ties -> deeper layer). Online: ``d_l`` = EMA (rate ``1 - ema``) of the
layer's nAAD; at each block flush the block gets the next higher rung if
``d_l > mu_l + kappa_hi sigma_l``, the next lower if ``d_l < mu_l - kappa_lo sigma_l``, else the base;
the choice is lowered rung by rung while the mean bits (keys and values counted separately; layers
averaged) would exceed ``avg_bits + budget_slack`` (rung 0 never raises the mean, so the invariant
holds).

Memory (bytes, exact): for each flushed block of ``G`` tokens, the packed codes and fp16 (scale,
zero) of the keys (per-channel groups of ``G`` tokens, ``kbits``) and of the values (per-token groups
of ``G_v`` channels, ``vbits``), plus the full-precision residual (:func:`adakvq_memory_formula`).

AAD is measured by an attention function registered with ``transformers.AttentionInterface`` that
runs SDPA and additionally scores the last ``n_probe`` queries (``O(n_probe * T * d)`` extra work).
Calibration is data-parallel: :func:`all_reduce_profile` sums every rank's per-layer (count, sum, sum
of squares) of nAAD with ``torch.distributed.all_reduce``.
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

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.inference.quant import (
    FULL_PRECISION_BITS,
    KIVICache,
    KIVILayer,
    QuantizedKVCacheMixin,
    check_bits,
    kivi_memory_formula,
    quantized_nbytes,
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
    "allocate_kv_bits",
    "kv_ladder",
    "BitController",
    "AdaKVQLayer",
    "AdaKVQCache",
    "KIVICache",
    "kivi_memory_formula",
    "adakvq_memory_formula",
    "all_reduce_profile",
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
    key_bonus : int >= 0
        Steps of ``B`` by which keys sit above values (capped at ``max(B)``); see :func:`kv_ladder`.
        The budget counts keys and values separately, so ``avg_bits`` must be at least the cost of the
        lowest rung, ``(B_min(key_bonus, |B|-1) + min(B)) / 2``.
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
    key_bonus: int = 0

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
        check_int("key_bonus", self.key_bonus, low=0)
        floor = _rung_cost(kv_ladder(self.bits, self.key_bonus)[0])
        if self.avg_bits < floor:
            raise ValueError(
                f"avg_bits ({self.avg_bits}) is below the cheapest rung with key_bonus={self.key_bonus}: "
                f"(key + value bits) / 2 = {floor}"
            )

    @property
    def ladder(self) -> list[tuple[int, int]]:
        """``(key_bits, value_bits)`` per rung, see :func:`kv_ladder`."""
        return kv_ladder(self.bits, self.key_bonus)


def kv_ladder(bits: Sequence[int], key_bonus: int = 0) -> list[tuple[int, int]]:
    """Rungs ``(key_bits, value_bits)`` of the per-layer bit ladder.

    Rung ``r`` has value bits ``B_r`` (``B`` sorted) and key bits ``B_min(r + key_bonus, |B| - 1)``.

    Examples
    --------
    >>> kv_ladder((2, 3, 4), 1)
    [(3, 2), (4, 3), (4, 4)]
    """
    levels = sorted({check_bits("bits", b) for b in bits})
    if not levels:
        raise ValueError("bits must name at least one bit-width")
    check_int("key_bonus", key_bonus, low=0)
    top = len(levels) - 1
    return [(levels[min(r + key_bonus, top)], levels[r]) for r in range(len(levels))]


def _rung_cost(rung: tuple[int, int]) -> float:
    return (rung[0] + rung[1]) / 2


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


def all_reduce_profile(tracker: AADTracker, num_layers: int | None = None, group: Any = None) -> AADProfile:
    """Data-parallel calibration: all-reduce the per-layer nAAD statistics of every rank's tracker.

    Each rank calibrates on its own prompts; the (count, sum, sum of squares) per layer are summed with
    ``torch.distributed.all_reduce`` (gloo on CPU, NCCL on GPU), so every rank gets the profile of the
    union of the prompts (up to float rounding). Without an initialised process group the local
    profile (computed the same way) is returned.

    Parameters
    ----------
    tracker : AADTracker
    num_layers : int, optional
        Number of layers; by default the highest layer recorded on any rank + 1.
    group : ProcessGroup, optional

    Returns
    -------
    AADProfile with ``mean``/``std`` ``Tensor[L]`` and an empty ``series``.
    """
    import torch.distributed as dist

    distributed = dist.is_available() and dist.is_initialized()
    if num_layers is None:
        n = torch.tensor([max(tracker.series) + 1 if tracker.series else 0], dtype=torch.int64)
        if distributed:
            dist.all_reduce(n, op=dist.ReduceOp.MAX, group=group)
        num_layers = int(n)
    stats = tracker.stats(num_layers)
    if distributed:
        dist.all_reduce(stats, group=group)
    return AADProfile.from_stats(stats)


# ------------------------------------------------------------------------------------ allocation
def _demands(profile: AADProfile | torch.Tensor | Sequence[float], kappa: float) -> list[float]:
    check_float("kappa", kappa, 0.0)
    if isinstance(profile, torch.Tensor) and (profile.is_meta or profile.dtype == torch.bool):
        raise TypeError(
            f"profile must be a real-valued tensor with data, got {profile.dtype} on {profile.device}"
        )
    demand = (
        profile.demand(kappa)
        if isinstance(profile, AADProfile)
        else torch.as_tensor(profile, dtype=torch.float64)
    )
    demand = [float(v) for v in demand.reshape(-1)]
    if not demand:
        raise ValueError("profile has no layers")
    if not all(math.isfinite(v) for v in demand):
        raise ValueError("profile contains NaN or inf demands")
    return demand


def allocate_kv_bits(
    profile: AADProfile | torch.Tensor | Sequence[float],
    bits: Sequence[int] = (2, 3, 4),
    avg_bits: float = 2.5,
    kappa: float = 1.0,
    key_bonus: int = 0,
) -> tuple[list[int], list[int]]:
    """Static per-layer key and value bit allocation from the AAD demand under a mean-bit budget.

    Every layer starts on rung 0 of :func:`kv_ladder`; the highest-demand layer that can move up one
    rung without breaking the budget or the monotonicity (no layer above a layer of higher demand;
    ties -> deeper layer) is raised, until none can. The budget counts keys and values separately:
    ``mean_l (key_bits_l + value_bits_l) / 2 <= avg_bits``.

    Parameters
    ----------
    profile : AADProfile, or per-layer demands ``D_l``
    bits : allowed bit-widths ``B``
    avg_bits : budget on the mean bits; at least the cost of rung 0 and at most ``max(B)``
    kappa : demand ``mu + kappa sigma`` (AADProfile only)
    key_bonus : int >= 0, steps of ``B`` by which keys sit above values (capped at ``max(B)``)

    Returns
    -------
    (key_bits, value_bits) : two lists of int, one entry per layer; both monotone in the demand.
    """
    ladder = kv_ladder(bits, key_bonus)
    check_float("avg_bits", avg_bits)
    lo, hi = ladder[0][1], ladder[-1][1]
    if not lo <= avg_bits <= hi:
        raise ValueError(f"avg_bits must lie in [min(bits), max(bits)] = [{lo}, {hi}]")
    cost = [_rung_cost(r) for r in ladder]
    if avg_bits < cost[0]:
        raise ValueError(
            f"avg_bits ({avg_bits}) is below the cheapest rung with key_bonus={key_bonus}: {cost[0]}"
        )
    demand = _demands(profile, kappa)
    n = len(demand)
    order = sorted(range(n), key=lambda i: (-demand[i], -i))
    rung = [0] * n
    budget = avg_bits * n + 1e-9
    while True:
        total = sum(cost[r] for r in rung)
        for rank, i in enumerate(order):
            new = rung[i] + 1
            if new >= len(ladder):
                continue
            if total - cost[rung[i]] + cost[new] > budget:
                continue
            if rank and any(rung[j] < new for j in order[:rank]):
                continue
            rung[i] = new
            break
        else:
            break
    return [ladder[r][0] for r in rung], [ladder[r][1] for r in rung]


def allocate_bits(
    profile: AADProfile | torch.Tensor | Sequence[float],
    bits: Sequence[int] = (2, 3, 4),
    avg_bits: float = 2.5,
    kappa: float = 1.0,
) -> list[int]:
    """Static per-layer bit allocation (same bits for keys and values) under a mean-bit budget.

    Start every layer at ``min(B)``; repeatedly upgrade the highest-demand layer by one step of ``B``
    while the mean stays ``<= avg_bits`` and no layer ends with more bits than a layer of higher
    demand (ties -> deeper layer). Equals ``allocate_kv_bits(..., key_bonus=0)[1]``.

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
    return allocate_kv_bits(profile, bits, avg_bits, kappa, key_bonus=0)[1]


class BitController:
    """Chooses the key and value bit-widths of each flushed block (online modulation + global budget).

    The controller works on the rungs of ``config.ladder`` (:func:`kv_ladder`); with
    ``key_bonus = 0`` a rung is simply a bit-width of ``B`` shared by keys and values.

    Parameters
    ----------
    config : AdaKVQConfig
    base_bits : list of int
        Static allocation per layer, as *value* bit-widths (keys follow the ladder).
    profile : AADProfile or None
        Needed for online modulation thresholds.
    tracker : AADTracker or None
        Source of the online nAAD; without it the static allocation is used (warned once).

    Attributes
    ----------
    bit_elems, elems : list
        Per layer: sum of ``bits * scalars`` and number of K/V scalars over the stored blocks (keys and
        values counted separately).
    log : list of (layer, block_index, value_bits)
    kv_log : list of (layer, block_index, key_bits, value_bits)
    """

    def __init__(
        self,
        config: AdaKVQConfig,
        base_bits: Sequence[int],
        profile: AADProfile | None,
        tracker: AADTracker | None,
    ):
        self.config = config
        self.ladder = config.ladder
        self.levels = list(config.bits)
        values = [v for _, v in self.ladder]
        base_bits = [int(b) for b in base_bits]
        bad = [b for b in base_bits if b not in values]
        if bad:
            raise ValueError(f"base_bits must come from {tuple(values)}, got {bad}")
        self.base_rungs = [values.index(b) for b in base_bits]
        self.base_bits = base_bits
        self.base_key_bits = [self.ladder[r][0] for r in self.base_rungs]
        self.profile = profile
        self.tracker = tracker
        n = len(self.base_bits)
        self.bit_elems = [0.0] * n
        self.elems = [0] * n
        self.log: list[tuple[int, int, int]] = []
        self.kv_log: list[tuple[int, int, int, int]] = []
        self._warned = False

    def _cost(self, rung: int) -> float:
        return _rung_cost(self.ladder[rung])

    def _layer_mean(self, i: int, extra_bits: float = 0.0, extra_elems: int = 0) -> float:
        elems = self.elems[i] + extra_elems
        if elems == 0:
            return self._cost(self.base_rungs[i])
        return (self.bit_elems[i] + extra_bits) / elems

    def running_mean(self, layer_idx: int | None = None, bits: float = 0, n_elems: int = 0) -> float:
        """Layer-averaged mean code bits per K/V scalar (layers without blocks count at their base rung),
        optionally with a prospective block of ``n_elems`` scalars at mean ``bits`` added to ``layer_idx``."""
        means = [
            self._layer_mean(i, bits * n_elems, n_elems) if i == layer_idx else self._layer_mean(i)
            for i in range(len(self.base_bits))
        ]
        return sum(means) / len(means)

    def token_mean(self) -> float:
        """Token-weighted mean code bits of all stored blocks."""
        e = sum(self.elems)
        return sum(self.bit_elems) / e if e else float("nan")

    def desired_rung(self, layer_idx: int) -> int:
        """Rung asked for by the online rule (the base rung when static or without measurements)."""
        base = self.base_rungs[layer_idx]
        if not self.config.online or self.profile is None:
            return base
        if self.tracker is None:
            if not self._warned:
                warnings.warn("AdaKVQCache has no AADTracker: using the static allocation", stacklevel=4)
                self._warned = True
            return base
        d = self.tracker.layer_demand(layer_idx)
        if d is None:
            return base
        mu, sigma = float(self.profile.mean[layer_idx]), float(self.profile.std[layer_idx])
        if d > mu + self.config.kappa_hi * sigma and base + 1 < len(self.ladder):
            return base + 1
        if d < mu - self.config.kappa_lo * sigma and base > 0:
            return base - 1
        return base

    def desired(self, layer_idx: int) -> int:
        """Value bit-width asked for by the online rule (see :meth:`desired_rung`)."""
        return self.ladder[self.desired_rung(layer_idx)][1]

    def choose_kv(self, layer_idx: int, n_elems: int, block_index: int = -1) -> tuple[int, int]:
        """``(key_bits, value_bits)`` for a block of ``n_elems`` K+V scalars (half keys, half values)
        of layer ``layer_idx``, accounted for.

        The desired rung is lowered step by step while the layer-averaged mean would exceed
        ``avg_bits + budget_slack``; rung 0 never raises the mean, so the bound always holds.
        """
        rung = self.desired_rung(layer_idx)
        limit = self.config.avg_bits + self.config.budget_slack
        while rung > 0 and self.running_mean(layer_idx, self._cost(rung), n_elems) > limit + 1e-12:
            rung -= 1
        kbits, vbits = self.ladder[rung]
        self.bit_elems[layer_idx] += self._cost(rung) * n_elems
        self.elems[layer_idx] += n_elems
        self.log.append((layer_idx, block_index, vbits))
        self.kv_log.append((layer_idx, block_index, kbits, vbits))
        return kbits, vbits

    def choose(self, layer_idx: int, n_elems: int, block_index: int = -1) -> int:
        """Like :meth:`choose_kv` but returns the value bit-width only (= key bits when ``key_bonus = 0``)."""
        return self.choose_kv(layer_idx, n_elems, block_index)[1]

    def release(self, layer_idx: int, bits: float, n_elems: int) -> None:
        """Forget a removed block of ``n_elems`` scalars at mean ``bits`` (crop)."""
        self.bit_elems[layer_idx] -= bits * n_elems
        self.elems[layer_idx] -= n_elems


class AdaKVQLayer(KIVILayer):
    """KIVI-layout layer whose block bit-widths (keys and values separately) come from a shared
    :class:`BitController`.

    Shapes as in :class:`~neurips26.inference.quant.KIVILayer`. ``block_bits`` holds the value bits of
    each block; :attr:`key_block_bits` the key bits.
    """

    def __init__(
        self, layer_idx: int, controller: BitController, config: AdaKVQConfig, keep_dequantized: bool = False
    ):
        base = controller.base_bits[layer_idx]
        super().__init__(
            base, config.group_size, config.residual_length, config.value_group_size, keep_dequantized
        )
        self.layer_idx = layer_idx
        self.controller = controller

    @property
    def key_block_bits(self) -> list[int]:
        return [kb.bits for kb in self.key_blocks]

    def _next_block_bits(self) -> int:
        return self._next_block_kv_bits()[1]

    def _next_block_kv_bits(self) -> tuple[int, int]:
        n = 2 * self.keys.shape[0] * self.keys.shape[1] * self.group_size * self.keys.shape[-1]
        return self.controller.choose_kv(self.layer_idx, n, len(self.block_bits))

    def crop(self, tokens_to_remove: int) -> None:
        before = list(zip(self.key_blocks, self.value_blocks))
        super().crop(tokens_to_remove)
        for kb, vb in before[len(self.key_blocks) :]:
            n = kb.numel + vb.numel
            self.controller.release(self.layer_idx, (kb.bits * kb.numel + vb.bits * vb.numel) / n, n)


def adakvq_memory_formula(
    batch: int,
    kv_heads: int,
    seq_len: int,
    head_dim: int,
    block_bits: Sequence[tuple[int, int]],
    group_size: int,
    residual_length: int,
    value_group_size: int | None = None,
    fp_itemsize: int = 2,
    meta_itemsize: int = 2,
) -> dict[str, int]:
    """Closed-form storage of one :class:`AdaKVQLayer` after ``seq_len`` tokens.

    Parameters
    ----------
    batch, kv_heads, seq_len, head_dim : int
        Cached states are ``[batch, kv_heads, seq_len, head_dim]`` for keys and for values.
    block_bits : sequence of (key_bits, value_bits)
        Bit-widths of the flushed blocks, oldest first (``AdaKVQCache.kv_bits_log()`` of the layer). A
        quantising layer holds ``max(0, (seq_len - residual_length) // group_size)`` of them.
    group_size, residual_length, value_group_size : int
        ``G``, ``R`` and ``G_v`` (``None`` -> ``min(head_dim, 32)``).
    fp_itemsize, meta_itemsize : int
        Bytes per full-precision element (residual, 16-bit blocks) and per scale/zero.

    Returns
    -------
    dict with ``payload``, ``metadata``, ``residual`` and ``total`` (bytes)::

        block (kb, vb): payload = ceil(kv_heads G head_dim kb / 8) + ceil(kv_heads G head_dim vb / 8)
                        (per batch row), metadata = 2 meta_itemsize batch kv_heads (head_dim
                        + G head_dim / G_v); a 16-bit half costs fp_itemsize per element, no metadata
        residual = 2 batch kv_heads (seq_len - G n_blocks) head_dim fp_itemsize
    """
    vg = min(head_dim, 32) if value_group_size is None else value_group_size
    n_blocks = len(block_bits)
    if n_blocks * group_size > seq_len:
        raise ValueError(f"{n_blocks} blocks of {group_size} tokens do not fit in seq_len={seq_len}")
    shape = (batch, kv_heads, group_size, head_dim)
    numel = batch * kv_heads * group_size * head_dim
    payload = metadata = 0
    for kbits, vbits in block_bits:
        for b, gs, axis in ((kbits, group_size, -2), (vbits, vg, -1)):
            if check_bits("block_bits", int(b)) == FULL_PRECISION_BITS:
                payload += numel * fp_itemsize
            else:
                nb = quantized_nbytes(shape, b, gs, axis=axis, meta_itemsize=meta_itemsize)
                payload += nb["payload"]
                metadata += nb["metadata"]
    residual = 2 * batch * kv_heads * (seq_len - n_blocks * group_size) * head_dim * fp_itemsize
    return {
        "payload": payload,
        "metadata": metadata,
        "residual": residual,
        "total": payload + metadata + residual,
    }


class AdaKVQCache(QuantizedKVCacheMixin, Cache):
    """AdaKVQ cache: a ``transformers.Cache`` of :class:`AdaKVQLayer`, one per decoder layer.

    Usable as ``model.generate(input_ids, cache=cache)``; for online modulation, select the
    registered AAD attention (:func:`register_aad_attention`) and run inside ``tracker.active()``.

    Parameters
    ----------
    config : PretrainedConfig
    quant : AdaKVQConfig
    profile : AADProfile, optional
        Calibration profile; without it every layer gets the highest rung whose cost is ``<= avg_bits``.
    tracker : AADTracker, optional
        Online nAAD source; without it the static allocation is used (one warning).
    base_bits : list of int, optional
        Override of the static allocation (value bit-widths; keys follow the ladder).
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
        ladder = quant.ladder
        if base_bits is None:
            if profile is not None:
                _, base_bits = allocate_kv_bits(
                    profile, quant.bits, quant.avg_bits, quant.kappa, quant.key_bonus
                )
            else:
                rung = max(r for r, kv in enumerate(ladder) if _rung_cost(kv) <= quant.avg_bits)
                base_bits = [ladder[rung][1]] * n_layers
        base_bits = [check_bits("base_bits", int(b)) for b in base_bits]
        if len(base_bits) != n_layers or any(b not in quant.bits for b in base_bits):
            raise ValueError(f"base_bits must hold {n_layers} values from {quant.bits}")
        self.quant = quant
        self.controller = BitController(quant, base_bits, profile, tracker)
        layers = [AdaKVQLayer(i, self.controller, quant, keep_dequantized) for i in range(n_layers)]
        super().__init__(layers=layers)

    def held_tensors(self) -> list[tuple[str, torch.Tensor]]:
        """The layers' tensors plus the controller's (profile and tracker series, category
        ``controller``), see :meth:`~neurips26.inference.quant.QuantizedKVCacheMixin.memory_report`."""
        out = super().held_tensors()
        profile, tracker = self.controller.profile, self.controller.tracker
        if profile is not None:
            out += [("controller", t) for t in (profile.mean, profile.std, *profile.series)]
        if tracker is not None:
            out += [("controller", t) for series in tracker.series.values() for t in series]
        return out

    @property
    def base_bits(self) -> list[int]:
        """Static value bit-width per layer."""
        return list(self.controller.base_bits)

    @property
    def base_key_bits(self) -> list[int]:
        """Static key bit-width per layer (= :attr:`base_bits` when ``key_bonus = 0``)."""
        return list(self.controller.base_key_bits)

    def bits_log(self) -> list[tuple[int, int, int]]:
        """``(layer, block_index, value_bits)`` for every block flushed so far (value = key bits when
        ``key_bonus = 0``)."""
        return list(self.controller.log)

    def kv_bits_log(self) -> list[tuple[int, int, int, int]]:
        """``(layer, block_index, key_bits, value_bits)`` for every block flushed so far."""
        return list(self.controller.kv_log)

    def average_bits(self, which: str = "kv") -> float:
        """Element-weighted mean code bits of the stored blocks (metadata excluded).

        ``which``: ``"kv"`` (keys and values together), ``"keys"`` or ``"values"``.
        """
        check_choice("which", which, ("kv", "keys", "values"))
        num = den = 0
        for layer in self.layers:
            for kb, vb in zip(layer.key_blocks, layer.value_blocks):
                for blk, kind in ((kb, "keys"), (vb, "values")):
                    if which in ("kv", kind):
                        num += blk.bits * blk.numel
                        den += blk.numel
        return num / den if den else float("nan")

    def memory_formula(self, fp_itemsize: int = 2, meta_itemsize: int = 2) -> dict[str, int]:
        """:func:`adakvq_memory_formula` summed over layers, from the current shapes and the chosen bits."""
        total = {"payload": 0, "metadata": 0, "residual": 0, "total": 0}
        for layer in self.layers:
            if not layer.is_initialized:
                continue
            b, h, _, d = layer.keys.shape
            f = adakvq_memory_formula(
                b,
                h,
                layer.get_seq_length(),
                d,
                list(zip(layer.key_block_bits, layer.block_bits)),
                layer.group_size,
                layer.residual_length,
                layer.value_group_size,
                fp_itemsize,
                meta_itemsize,
            )
            for k in total:
                total[k] += f[k]
        return total

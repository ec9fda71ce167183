r"""AdERA accounting and adaptive switch: byte/time counters, the cost model, and the per-parameter state.

:class:`CostModel` compares an uncompressed ring all-gather with the two-phase AdERA gather and
decides per shape whether compressing saves time; :class:`AdERAState` keeps one rank's exponent
caches, warm-up status and counters for one gathered parameter.

.. math::

    T_{\mathrm{raw}} = \alpha + \frac{s N (P-1)}{P\,BW},\qquad
    T_{\mathrm{ada}} = t_{\mathrm{enc}} + t_{\mathrm{dec}} + 2\alpha + \frac{N w(\rho) (P-1)}{P\,BW}

Shapes
------
- :attr:`AdERAState.caches`: ``[P, m]`` uint8 (exponents of every rank's shard as last delivered).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from neurips26.common.checks import check_float, check_int
from neurips26.common.distributed import Communicator
from neurips26.distributed.adera.codec import (
    _DTYPES,
    AdERAConfig,
    decode_payload,
    encode_shard,
    sm_stream_bytes,
)


@dataclass
class GatherStats:
    """Byte and time counters of one gathered parameter (per rank).

    ``bytes_raw``: bytes an uncompressed all-gather would contribute from this rank (shard bytes);
    ``bytes_sent``: payload bytes this rank produced (header included, unpadded);
    ``bytes_wire``: bytes this rank contributed to the collectives (padding to the longest
    payload, length exchange and fallback collectives included).
    """

    bytes_raw: int = 0
    bytes_sent: int = 0
    bytes_wire: int = 0
    time_encode: float = 0.0
    time_decode: float = 0.0
    calls: int = 0


@dataclass
class CostModel:
    """Latency/bandwidth model of the all-gather used by the adaptive switch.

    Parameters
    ----------
    alpha : float
        Per-collective latency in seconds.
    bandwidth : float
        Bus bandwidth in bytes/s (ring all-gather: ``(P-1)/P`` of the gathered bytes cross each link).
    margin : float
        Compress iff ``T_ada < (1 - margin) T_raw``.
    """

    alpha: float = 10e-6
    bandwidth: float = 25e9
    margin: float = 0.05

    def __post_init__(self) -> None:
        check_float("alpha", self.alpha, 0.0)
        check_float("bandwidth", self.bandwidth, 0.0, low_open=True)
        check_float("margin", self.margin, 0.0, 1.0, high_open=True)

    @classmethod
    def measure(
        cls,
        group: Any = None,
        sizes: Sequence[int] = (2**16, 2**20, 2**22),
        *,
        repeats: int = 3,
        margin: float = 0.05,
        device: str | torch.device = "cpu",
    ) -> CostModel:
        """Fit ``alpha`` and ``bandwidth`` from all-gathers of ``sizes`` bytes per rank.

        The minimum over ``repeats`` is max-reduced over ranks so that every rank gets the same model.
        Needs at least 2 ranks.
        """
        comm = Communicator(group)
        if comm.world_size < 2:
            raise ValueError("CostModel.measure needs an initialised process group with at least 2 ranks")
        p = comm.world_size
        times = []
        for size in sizes:
            check_int("sizes entry", size, low=1)
            inp = torch.zeros(size, dtype=torch.uint8, device=device)
            out = torch.empty(size * p, dtype=torch.uint8, device=device)
            comm.all_gather(out, inp)
            best = math.inf
            for _ in range(repeats):
                t0 = time.perf_counter()
                comm.all_gather(out, inp)
                best = min(best, time.perf_counter() - t0)
            times.append(best)
        t = comm.all_reduce_max(torch.tensor(times, dtype=torch.float64))
        x = torch.tensor([s * p * (p - 1) / p for s in sizes], dtype=torch.float64)
        a = torch.stack([torch.ones_like(x), x], dim=1)
        sol = torch.linalg.lstsq(a, t.unsqueeze(1)).solution.reshape(-1)
        alpha = max(float(sol[0]), 0.0)
        inv_bw = float(sol[1])
        if inv_bw <= 0:
            inv_bw = float(t.max()) / float(x.max())
        return cls(alpha=alpha, bandwidth=1.0 / inv_bw, margin=margin)

    def t_raw(self, numel: int, world_size: int, itemsize: int = 2) -> float:
        """Seconds of an uncompressed all-gather of ``numel`` gathered elements."""
        p = world_size
        return self.alpha + itemsize * numel * (p - 1) / (p * self.bandwidth)

    def t_adera(
        self,
        numel: int,
        world_size: int,
        change_rate: float,
        t_enc: float,
        t_dec: float,
        dtype: torch.dtype = torch.bfloat16,
    ) -> float:
        """Seconds of the two-phase AdERA gather (codec times included)."""
        p = world_size
        per_elem = expected_wire_bytes_per_element(dtype, change_rate)
        return t_enc + t_dec + 2 * self.alpha + numel * per_elem * (p - 1) / (p * self.bandwidth)

    def should_compress(
        self,
        numel: int,
        change_rate: float,
        t_enc: float,
        t_dec: float,
        *,
        world_size: int = 2,
        dtype: torch.dtype = torch.bfloat16,
    ) -> bool:
        """``T_ada < (1 - margin) T_raw`` for ``numel`` gathered elements (all ranks together)."""
        check_int("numel", numel, low=0)
        check_float("change_rate", change_rate, 0.0, 1.0)
        check_float("t_enc", t_enc, 0.0)
        check_float("t_dec", t_dec, 0.0)
        check_int("world_size", world_size, low=1)
        if world_size == 1:
            return False
        itemsize = torch.empty(0, dtype=dtype).element_size()
        t_raw = self.t_raw(numel, world_size, itemsize)
        return self.t_adera(numel, world_size, change_rate, t_enc, t_dec, dtype) < (1 - self.margin) * t_raw


def expected_wire_bytes_per_element(dtype: torch.dtype, change_rate: float) -> float:
    """Bytes per element of the best of SPARSE / BITMAP / RAW at change rate ``rho`` (large shards)."""
    itemsize = torch.empty(0, dtype=dtype).element_size()
    s = sm_stream_bytes(8, dtype) / 8
    return min(s + 5 * change_rate, s + 0.125 + change_rate, float(itemsize))


class AdERAState:
    """Persistent per-parameter state of the AdERA all-gather on one rank.

    Parameters
    ----------
    config : AdERAConfig
    numel : int
        Shard length ``m`` (equal on every rank).
    dtype : torch.dtype
        bfloat16, float16 or float32.
    world_size : int
        ``P``.
    cost_model : CostModel, optional
        Used when ``config.adaptive``; defaults to ``CostModel()`` (GPU-like alpha=10 us, BW=25 GB/s).
    device : torch.device or str

    Attributes
    ----------
    caches : Tensor uint8 [P, m]
        Exponents of every rank's shard as last delivered; row ``rank`` is the sender's reference.
    iteration : int
        Calls so far.
    ema_rate : float or None
        EMA of the global exponent-change rate.
    in_warmup : bool
    compress : bool or None
        Adaptive decision (``None`` before the first decision).
    bytes_raw, bytes_sent, bytes_wire : int
    change_rate_history : list of float
        Global change rate of every call (NaN on the first call).
    mode_history : list of str
        Mode this rank sent on each call (``"raw"`` during warm-up; the largest chunk's mode otherwise).
    time_encode, time_decode, time_decision : float
        Seconds spent encoding, decoding, and deciding.
    decision_history : list of dict
        One entry per adaptive decision (the cost model's choice and its inputs): ``iteration``,
        ``compress``, ``change_rate``, measured ``t_enc`` / ``t_dec`` (max over ranks) and the modelled
        ``t_raw`` / ``t_adera`` seconds of the gathered tensor.
    """

    def __init__(
        self,
        config: AdERAConfig,
        numel: int,
        dtype: torch.dtype,
        world_size: int,
        *,
        cost_model: CostModel | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        if not isinstance(config, AdERAConfig):
            raise TypeError(f"config must be an AdERAConfig, got {type(config).__name__}")
        check_int("numel", numel, low=1)
        if dtype not in _DTYPES:
            raise TypeError(f"dtype must be bfloat16, float16 or float32, got {dtype}")
        check_int("world_size", world_size, low=1)
        self.config = config
        self.numel = numel
        self.dtype = dtype
        self.world_size = world_size
        self.cost_model = cost_model or CostModel(margin=config.margin)
        self.caches = torch.zeros(world_size, numel, dtype=torch.uint8, device=device)
        self.cache_valid = False
        self.iteration = 0
        self.ema_rate: float | None = None
        self.in_warmup = True
        self.warmup_end: int | None = None
        self.compress: bool | None = None
        self.last_decision: int | None = None
        self.t_enc = 0.0
        self.t_dec = 0.0
        self.bytes_raw = 0
        self.bytes_sent = 0
        self.bytes_wire = 0
        self.time_encode = 0.0
        self.time_decode = 0.0
        self.time_decision = 0.0
        self.change_rate_history: list[float] = []
        self.mode_history: list[str] = []
        self.decision_history: list[dict[str, Any]] = []

    @property
    def itemsize(self) -> int:
        return torch.empty(0, dtype=self.dtype).element_size()

    def _record_rate(self, rate: float | None) -> None:
        self.change_rate_history.append(math.nan if rate is None else rate)
        if rate is None:
            return
        d = self.config.ema_decay
        self.ema_rate = rate if self.ema_rate is None else d * self.ema_rate + (1 - d) * rate

    def _update_warmup(self) -> None:
        """Called at the start of a call: leave warm-up when the rule allows (identical on all ranks)."""
        cfg = self.config
        if not self.in_warmup:
            return
        if self.iteration >= max(cfg.warmup_iters, 1) and self.cache_valid:
            if cfg.warmup == "fixed" or (self.ema_rate is not None and self.ema_rate < cfg.warmup_rate):
                self.in_warmup = False
                self.warmup_end = self.iteration

    def _decide(self, comm: Communicator, x: torch.Tensor) -> None:
        """Adaptive decision at warm-up end and every ``reeval_every`` calls (collective when P > 1)."""
        cfg = self.config
        if not cfg.adaptive or comm.world_size == 1:  # P = 1 only reaches here with force_codec
            self.compress = True
            return
        due = self.last_decision is None or self.iteration - self.last_decision >= cfg.reeval_every
        if not due:
            return
        start = time.perf_counter()
        own = self.caches[comm.rank]
        t0 = time.perf_counter()
        payload = encode_shard(x, own, cfg)
        t_enc = time.perf_counter() - t0
        scratch = own.clone()
        t0 = time.perf_counter()
        decode_payload(payload, scratch, verify=False)
        t_dec = (time.perf_counter() - t0) * comm.world_size
        times = comm.all_reduce_max(torch.tensor([t_enc, t_dec], dtype=torch.float64))
        self.t_enc, self.t_dec = float(times[0]), float(times[1])
        rate = min(max(self.ema_rate or 0.0, 0.0), 1.0)
        total, p, model = self.numel * comm.world_size, comm.world_size, self.cost_model
        self.compress = model.should_compress(
            total, rate, self.t_enc, self.t_dec, world_size=p, dtype=self.dtype
        )
        self.decision_history.append(
            {
                "iteration": self.iteration,
                "compress": self.compress,
                "change_rate": rate,
                "t_enc": self.t_enc,
                "t_dec": self.t_dec,
                "t_raw": model.t_raw(total, p, self.itemsize),
                "t_adera": model.t_adera(total, p, rate, self.t_enc, self.t_dec, self.dtype),
            }
        )
        self.last_decision = self.iteration
        self.time_decision += time.perf_counter() - start

    def summary(self) -> dict[str, Any]:
        """JSON-friendly counters."""
        return {
            "iteration": self.iteration,
            "warmup_end": self.warmup_end,
            "compress": self.compress,
            "ema_rate": self.ema_rate,
            "bytes_raw": self.bytes_raw,
            "bytes_sent": self.bytes_sent,
            "bytes_wire": self.bytes_wire,
            "time_encode": self.time_encode,
            "time_decode": self.time_decode,
            "time_decision": self.time_decision,
            "decisions": list(self.decision_history),
        }

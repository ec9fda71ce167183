r"""Trace-driven simulator of per-iteration time with RAW, lossless, lossy and AdERA weight all-gathers.

Every constant is an assumption (:data:`DEFAULT_CODECS`); :func:`simulate` pipelines codec and
transfer over chunks and prefetches layer ``l+1``'s gather under layer ``l``'s compute.

.. math::

    t_{\mathrm{gather}} = \alpha + \frac{B (P-1)}{P\,BW},\qquad
    t_{\mathrm{stage}} = \max(t_e, t_c, t_d) + \frac{t_e + t_c + t_d - \max(t_e, t_c, t_d)}{C}

Shapes
------
Scalars only: a list of :class:`LayerSpec` (``numel``, ``compute_s``, ``itemsize``) in, seconds out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.distributed.adera.cost import expected_wire_bytes_per_element


@dataclass(frozen=True)
class LayerSpec:
    """One layer of the simulated model: ``numel`` gathered parameters, ``compute_s`` seconds of
    forward+backward compute per iteration, ``itemsize`` bytes per element (2 for bf16)."""

    numel: int
    compute_s: float
    itemsize: int = 2

    def __post_init__(self) -> None:
        check_int("numel", self.numel, low=1)
        check_float("compute_s", self.compute_s, 0.0)
        check_choice("itemsize", self.itemsize, (2, 4))


@dataclass(frozen=True)
class Network:
    """Ring all-gather network: per-collective latency ``alpha`` (s) and per-GPU bandwidth (B/s)."""

    alpha: float = 10e-6
    bandwidth: float = 25e9

    def __post_init__(self) -> None:
        check_float("alpha", self.alpha, 0.0)
        check_float("bandwidth", self.bandwidth, 0.0, low_open=True)

    def all_gather_s(self, total_bytes: float, world_size: int, collectives: int = 1) -> float:
        p = world_size
        return collectives * self.alpha + total_bytes * (p - 1) / (p * self.bandwidth)


DEFAULT_CODECS = {
    "adera_tput": 400e9,  # B/s of raw data through encode or decode (memory-bound elementwise kernels)
    "entropy_tput": 30e9,  # B/s of the entropy coder (lossless baseline)
    "entropy_ratio": 1.4,  # raw / lossless bytes
    "quant_tput": 300e9,  # B/s of int8 quantise / dequantise
    "quant_ratio": 2 / (1 + 4 / 256),  # bf16 -> int8 + fp32 scale per 256
    "chunks": 4,
    "gathers_per_iter": 2,  # ZeRO-3 gathers each layer in forward and again in backward
}


def simulate(
    layers: Sequence[LayerSpec],
    P: int,
    network: Network,
    codecs: dict[str, float] | None = None,
    change_rate: float | Sequence[float] = 0.01,
    overlap: bool = True,
) -> dict[str, float]:
    """Per-iteration time of RAW, lossless-entropy, lossy-int8 and AdERA weight all-gathers.

    Model (every number an assumption, see :data:`DEFAULT_CODECS`): a layer of ``B`` raw bytes
    costs ``alpha + B (P-1) / (P BW)`` uncompressed; a codec with throughput ``T`` adds
    ``B / (P T)`` to encode the local shard and ``B / T`` to decode all shards and shrinks the
    bytes by its ratio; AdERA's ratio is ``itemsize / w(rho)`` with :func:`expected_wire_bytes_per_element`
    and it pays two collectives (length exchange). With ``overlap`` the codec and the transfer
    are pipelined over ``chunks`` (``max + (sum - max) / chunks``) and layer ``l+1``'s gather is
    prefetched under layer ``l``'s compute; without it, every stage is serial.

    Parameters
    ----------
    layers : sequence of LayerSpec
    P : int
        Ranks (>= 2).
    network : Network
    codecs : dict, optional
        Overrides of :data:`DEFAULT_CODECS`.
    change_rate : float or sequence of float
        Exponent-change rate (per iteration when a sequence; times are averaged over it).
    overlap : bool

    Returns
    -------
    dict
        ``{"raw", "lossless", "lossy", "adera"}`` seconds per iteration plus ``"speedup_vs_raw"``,
        ``"speedup_vs_lossless"``, ``"speedup_vs_lossy"`` of AdERA.
    """
    check_int("P", P, low=2)
    if not layers:
        raise ValueError("layers must not be empty")
    if not isinstance(network, Network):
        raise TypeError(f"network must be a Network, got {type(network).__name__}")
    cod = {**DEFAULT_CODECS, **(codecs or {})}
    unknown = set(cod) - set(DEFAULT_CODECS)
    if unknown:
        raise ValueError(f"unknown codec parameters {sorted(unknown)}; known: {sorted(DEFAULT_CODECS)}")
    rates = [float(change_rate)] if isinstance(change_rate, (int, float)) else [float(r) for r in change_rate]
    if not rates or any(not 0.0 <= r <= 1.0 for r in rates):
        raise ValueError("change_rate must be in [0, 1] (or a non-empty sequence of such)")
    chunks = max(1, int(cod["chunks"]))
    gpi = int(cod["gathers_per_iter"])

    def stage_time(enc: float, comm: float, dec: float) -> float:
        if not overlap:
            return enc + comm + dec
        parts = (enc, comm, dec)
        return max(parts) + (sum(parts) - max(parts)) / chunks

    def iteration(kind: str, rho: float) -> float:
        gathers, computes = [], []
        for layer in layers:
            raw = layer.numel * layer.itemsize
            if kind == "raw":
                g = network.all_gather_s(raw, P)
            elif kind == "lossless":
                t = cod["entropy_tput"]
                g = stage_time(raw / (P * t), network.all_gather_s(raw / cod["entropy_ratio"], P, 2), raw / t)
            elif kind == "lossy":
                t = cod["quant_tput"]
                g = stage_time(raw / (P * t), network.all_gather_s(raw / cod["quant_ratio"], P), raw / t)
            else:
                t = cod["adera_tput"]
                dtype = torch.bfloat16 if layer.itemsize == 2 else torch.float32
                wire = layer.numel * expected_wire_bytes_per_element(dtype, rho)
                g = stage_time(raw / (P * t), network.all_gather_s(wire, P, 2), raw / t)
            gathers.append(g)
            computes.append(layer.compute_s)
        if gpi == 0:
            return sum(computes)
        share = [c / gpi for c in computes]  # compute of one pass (forward or backward) per layer
        total = 0.0
        for _ in range(gpi):
            if overlap:
                total += gathers[0] + sum(max(c, g) for c, g in zip(share, gathers[1:] + [0.0]))
            else:
                total += sum(gathers) + sum(share)
        return total

    res = {k: sum(iteration(k, r) for r in rates) / len(rates) for k in ("raw", "lossless", "lossy", "adera")}
    res["speedup_vs_raw"] = res["raw"] / res["adera"]
    res["speedup_vs_lossless"] = res["lossless"] / res["adera"]
    res["speedup_vs_lossy"] = res["lossy"] / res["adera"]
    return res

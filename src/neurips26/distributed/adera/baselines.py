r"""Baseline all-gathers with byte accounting: raw, lossless zlib over exponent bytes, lossy block int8.

:func:`raw_all_gather` is what FSDP does; :func:`lossless_zlib_all_gather` entropy-codes the
byte-grouped stream (:func:`zlib_encode` / :func:`zlib_decode`); :func:`int8_block_all_gather` is
ZeRO++ qwZ-style block quantisation (:func:`int8_quantize` / :func:`int8_dequantize`).

.. math::

    q_i = \mathrm{round}(x_i / s_b),\quad s_b = \max_{i \in b} |x_i| / 127

Shapes
------
- ``input_tensor``: ``[m]``; ``output_tensor``: ``[P * m]``; int8 scales: ``[ceil(m / block_size)]``.
"""

from __future__ import annotations

import struct
import time
import zlib
from typing import Any

import torch

from neurips26.common.distributed import Communicator
from neurips26.distributed.adera.allgather import _check_gather_args
from neurips26.distributed.adera.codec import (
    _CODE_DTYPE,
    _DTYPE_CODE,
    _check_float_tensor,
    _flat,
    join_fields,
    split_fields,
)
from neurips26.distributed.adera.cost import GatherStats


def raw_all_gather(
    output_tensor: torch.Tensor,
    input_tensor: torch.Tensor,
    group: Any = None,
    *,
    state: GatherStats | None = None,
    async_op: bool = False,
) -> Any:
    """Uncompressed all-gather (what FSDP does) with byte accounting; same signature as the others."""
    comm = Communicator(group)
    if input_tensor.dtype != output_tensor.dtype:
        raise TypeError("output_tensor and input_tensor must share a dtype")
    if output_tensor.numel() != comm.world_size * input_tensor.numel():
        raise ValueError("uneven or unpadded shards: output numel must be world_size * input numel")
    work = comm.all_gather(output_tensor.view(-1), _flat(input_tensor), async_op=async_op)
    if state is not None:
        n = input_tensor.numel() * input_tensor.element_size()
        state.bytes_raw += n
        state.bytes_sent += n
        state.bytes_wire += n
        state.calls += 1
    return work if async_op else None


def _gather_var(comm: Communicator, buf: torch.Tensor) -> tuple[list[torch.Tensor], int]:
    """Two-phase variable-size all-gather of uint8 buffers; returns per-rank buffers and padded length."""
    p, dev = comm.world_size, buf.device
    lens = torch.empty(p, dtype=torch.int64, device=dev)
    comm.all_gather(lens, torch.tensor([buf.numel()], dtype=torch.int64, device=dev))
    sizes = lens.cpu().tolist()
    length = max(sizes)
    send = torch.zeros(length, dtype=torch.uint8, device=dev)
    send[: buf.numel()] = buf
    recv = torch.empty(p * length, dtype=torch.uint8, device=dev)
    comm.all_gather(recv, send)
    return [recv[k * length : k * length + sizes[k]] for k in range(p)], length


def zlib_encode(x: torch.Tensor, level: int = 1) -> bytes:
    """Lossless baseline codec: zlib over the byte-grouped exponent stream (ZipNN-style).

    The exponent stream and the sign+mantissa stream are compressed separately (each stored raw when
    zlib does not shrink it). Format: ``<B dtype><q numel><B flags><q len_e><q len_sm>`` + streams.
    """
    _check_float_tensor("x", x)
    e, sm = split_fields(x)
    streams, flags = [], 0
    for bit, data in enumerate((e.cpu().numpy().tobytes(), sm.cpu().numpy().tobytes())):
        comp = zlib.compress(data, level)
        if len(comp) < len(data):
            streams.append(comp)
            flags |= 1 << bit
        else:
            streams.append(data)
    head = struct.pack("<BqBqq", _DTYPE_CODE[x.dtype], x.numel(), flags, len(streams[0]), len(streams[1]))
    return head + streams[0] + streams[1]


def zlib_decode(blob: bytes, device: str | torch.device = "cpu") -> torch.Tensor:
    """Inverse of :func:`zlib_encode`."""
    hsize = struct.calcsize("<BqBqq")
    dcode, numel, flags, le, ls = struct.unpack("<BqBqq", blob[:hsize])
    parts = [blob[hsize : hsize + le], blob[hsize + le : hsize + le + ls]]
    data = [zlib.decompress(b) if flags & (1 << i) else b for i, b in enumerate(parts)]
    e = torch.frombuffer(bytearray(data[0]), dtype=torch.uint8).to(device)
    sm = torch.frombuffer(bytearray(data[1]), dtype=torch.uint8).to(device)
    if e.numel() != numel:
        raise ValueError("corrupt zlib payload")
    return join_fields(e, sm, _CODE_DTYPE[dcode])


def lossless_zlib_all_gather(
    output_tensor: torch.Tensor,
    input_tensor: torch.Tensor,
    group: Any = None,
    *,
    state: GatherStats | None = None,
    level: int = 1,
) -> None:
    """Lossless baseline all-gather: zlib (level 1) over the byte-grouped exponent stream, two-phase.

    Same argument order as ``all_gather_into_tensor``; bit-exact.
    """
    comm = Communicator(group)
    _check_gather_args(output_tensor, input_tensor, comm.world_size)
    x = _flat(input_tensor)
    t0 = time.perf_counter()
    blob = zlib_encode(x, level)
    t_enc = time.perf_counter() - t0
    buf = torch.frombuffer(bytearray(blob), dtype=torch.uint8).to(x.device)
    parts, length = _gather_var(comm, buf)
    t0 = time.perf_counter()
    out = output_tensor.view(-1)
    m = x.numel()
    for k, part in enumerate(parts):
        out[k * m : (k + 1) * m] = (
            zlib_decode(part.cpu().numpy().tobytes(), x.device) if k != comm.rank else x
        )
    if state is not None:
        state.bytes_raw += m * x.element_size()
        state.bytes_sent += len(blob)
        state.bytes_wire += length + 8
        state.time_encode += t_enc
        state.time_decode += time.perf_counter() - t0
        state.calls += 1


def int8_quantize(x: torch.Tensor, block_size: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-wise symmetric int8 quantisation (ZeRO++ qwZ style).

    Returns ``q`` int8 [m] and per-block fp32 scales [ceil(m / block_size)] with
    ``scale = max|x_block| / 127`` (1 for an all-zero block). Needs finite input.
    """
    _check_float_tensor("x", x)
    flat = _flat(x).float()
    if not bool(torch.isfinite(flat).all()):
        raise ValueError("int8 block quantisation needs finite input (inf/NaN cannot be represented)")
    m = flat.numel()
    nb = (m + block_size - 1) // block_size
    padded = torch.zeros(nb * block_size, dtype=torch.float32, device=flat.device)
    padded[:m] = flat
    blocks = padded.view(nb, block_size)
    scale = blocks.abs().amax(dim=1) / 127.0
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(blocks / scale[:, None]).clamp_(-127, 127).to(torch.int8).reshape(-1)[:m]
    return q, scale


def int8_dequantize(
    q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype, block_size: int = 256
) -> torch.Tensor:
    """Inverse of :func:`int8_quantize` (lossy): ``x ~ q * scale`` cast to ``dtype``."""
    m = q.numel()
    nb = scale.numel()
    padded = torch.zeros(nb * block_size, dtype=torch.float32, device=q.device)
    padded[:m] = q.float()
    return (padded.view(nb, block_size) * scale[:, None]).reshape(-1)[:m].to(dtype)


def int8_block_all_gather(
    output_tensor: torch.Tensor,
    input_tensor: torch.Tensor,
    group: Any = None,
    *,
    state: GatherStats | None = None,
    block_size: int = 256,
) -> None:
    """Lossy baseline all-gather: int8 values + one fp32 scale per block of 256, one fixed-size collective.

    Same argument order as ``all_gather_into_tensor``; the result differs from the input by at most
    half a quantisation step per element (plus the rounding of the output dtype).
    """
    comm = Communicator(group)
    _check_gather_args(output_tensor, input_tensor, comm.world_size)
    x = _flat(input_tensor)
    m, p = x.numel(), comm.world_size
    t0 = time.perf_counter()
    q, scale = int8_quantize(x, block_size)
    buf = torch.cat([q.view(torch.uint8), scale.view(torch.uint8)])
    t_enc = time.perf_counter() - t0
    recv = torch.empty(p * buf.numel(), dtype=torch.uint8, device=x.device)
    comm.all_gather(recv, buf)
    t0 = time.perf_counter()
    out = output_tensor.view(-1)
    n = buf.numel()
    for k in range(p):
        part = recv[k * n : (k + 1) * n]
        out[k * m : (k + 1) * m] = int8_dequantize(
            part[:m].view(torch.int8), part[m:].clone().view(torch.float32), x.dtype, block_size
        )
    if state is not None:
        state.bytes_raw += m * x.element_size()
        state.bytes_sent += n
        state.bytes_wire += n
        state.time_encode += t_enc
        state.time_decode += time.perf_counter() - t0
        state.calls += 1

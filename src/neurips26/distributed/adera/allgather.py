r"""The AdERA all-gather: two-phase or fixed-capacity collective, chunk pipeline, FSDP2 hook.

:func:`adera_all_gather` is a drop-in for ``torch.distributed.all_gather_into_tensor`` over a
process group or an in-process :class:`~neurips26.common.distributed.ThreadGroup`;
:func:`emulate_all_gather` drives ``P`` virtual ranks in one process; :class:`AdERAAllGather` plugs
AdERA into FSDP2 (``set_custom_all_gather``).

.. math::

    \mathrm{out} = \mathrm{concat}(x_0, \dots, x_{P-1})\ \text{bit for bit}

Shapes
------
- ``input_tensor``: ``[m]``; ``output_tensor``: ``[P * m]`` (contiguous, same dtype).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from neurips26.common.distributed import Communicator, DoneWork, ThreadGroup
from neurips26.distributed.adera.codec import (
    _DTYPES,
    HEADER_BYTES,
    AdERAConfig,
    Payload,
    _check_float_tensor,
    _flat,
    decode_payload,
    encode_shard,
    exponents,
    sm_stream_bytes,
)
from neurips26.distributed.adera.cost import AdERAState, CostModel


def _check_gather_args(output_tensor: torch.Tensor, input_tensor: torch.Tensor, world: int) -> None:
    _check_float_tensor("input_tensor", input_tensor)
    if not isinstance(output_tensor, torch.Tensor):
        raise TypeError(f"output_tensor must be a torch.Tensor, got {type(output_tensor).__name__}")
    if output_tensor.dtype != input_tensor.dtype:
        raise TypeError(
            f"output_tensor dtype {output_tensor.dtype} differs from input_tensor dtype {input_tensor.dtype}"
        )
    if not output_tensor.is_contiguous():
        raise ValueError("output_tensor must be contiguous")
    if output_tensor.numel() != world * input_tensor.numel():
        raise ValueError(
            f"uneven or unpadded shards: output_tensor has {output_tensor.numel()} elements, expected "
            f"world_size * input numel = {world} * {input_tensor.numel()}; pad every shard to the same length"
        )


def _check_even(comm: Communicator, numel: int, device: torch.device) -> None:
    """One small collective: every rank's shard length must be equal."""
    t = torch.tensor([numel], dtype=torch.int64, device=device)
    out = torch.empty(comm.world_size, dtype=torch.int64, device=device)
    comm.all_gather(out, t)
    sizes = out.cpu().tolist()
    if len(set(sizes)) != 1:
        raise ValueError(
            f"uneven shards across ranks: shard lengths {sizes}; pad every shard to the same length"
        )


# --------------------------------------------------------------------------------------------
# the AdERA all-gather
# --------------------------------------------------------------------------------------------
def _chunk_bounds(m: int, chunks: int) -> list[tuple[int, int]]:
    c = max(1, min(chunks, m))
    step = (m + c - 1) // c
    return [(s, min(s + step, m)) for s in range(0, m, step)]


def _capacity(m: int, dtype: torch.dtype, frac: float) -> int:
    return HEADER_BYTES + sm_stream_bytes(m, dtype) + 5 * math.ceil(frac * m)


class _Pending:
    """Chunks launched but not yet decoded."""

    def __init__(self) -> None:
        self.items: list[Callable[[], None]] = []

    def run_one(self) -> None:
        self.items.pop(0)()

    def run_all(self) -> None:
        while self.items:
            self.run_one()


def adera_all_gather(
    output_tensor: torch.Tensor,
    input_tensor: torch.Tensor,
    group: Any = None,
    *,
    state: AdERAState,
    async_op: bool = False,
) -> Any:
    """Lossless AdERA all-gather; drop-in for ``torch.distributed.all_gather_into_tensor``.

    Parameters
    ----------
    output_tensor : Tensor [P * m] (contiguous), same dtype as ``input_tensor``
        Receives ``concat(x_0, ..., x_{P-1})`` bit for bit.
    input_tensor : Tensor [m], bfloat16 / float16 / float32
        This rank's shard (every rank's shard has the same length ``m``).
    group : ProcessGroup, ThreadGroup or None
        ``None`` uses the default process group; with no initialised process group the call is a
        single-process fallback (copy, or encode -> decode when ``config.force_codec``).
    state : AdERAState
        This parameter's persistent state on this rank.
    async_op : bool
        Return a work handle; decoding of the chunks still in flight happens in ``wait()``.

    Returns
    -------
    None, or a work handle with ``wait()`` when ``async_op``.
    """
    if not isinstance(state, AdERAState):
        raise TypeError(f"state must be an AdERAState, got {type(state).__name__}")
    comm = Communicator(group)
    _check_gather_args(output_tensor, input_tensor, comm.world_size)
    x = _flat(input_tensor)
    out = output_tensor.view(-1)
    if state.numel != x.numel() or state.dtype != x.dtype or state.world_size != comm.world_size:
        raise ValueError(
            f"state was built for numel={state.numel}, dtype={state.dtype}, world_size={state.world_size}; "
            f"got numel={x.numel()}, dtype={x.dtype}, world_size={comm.world_size}"
        )
    if state.caches.device != x.device:
        state.caches = state.caches.to(x.device)
    if comm.world_size == 1 and not state.config.force_codec:
        out.copy_(x)
        state.bytes_raw += x.numel() * x.element_size()
        state.bytes_sent += x.numel() * x.element_size()
        state.iteration += 1
        return DoneWork() if async_op else None
    if state.iteration == 0 and comm.world_size > 1:
        _check_even(comm, x.numel(), x.device)
    state._update_warmup()
    if not state.in_warmup:
        state._decide(comm, x)
    use_codec = (not state.in_warmup) and bool(state.compress)
    if not use_codec:
        pending = _raw_path(comm, out, x, state, async_op)
    else:
        pending = _codec_path(comm, out, x, state, async_op)
    state.iteration += 1
    if async_op:
        return DoneWork(pending.run_all)
    pending.run_all()
    return None


def _raw_path(
    comm: Communicator, out: torch.Tensor, x: torch.Tensor, state: AdERAState, async_op: bool
) -> _Pending:
    """Plain all-gather; the global change rate is measured on the gathered tensor (warm-up)."""
    m, p = x.numel(), comm.world_size
    work = comm.all_gather(out, x, async_op=async_op)
    pending = _Pending()

    def finish() -> None:
        work.wait()
        t0 = time.perf_counter()
        e_all = exponents(out).view(p, m)
        rate = int(torch.count_nonzero(e_all != state.caches)) / (p * m) if state.cache_valid else None
        state.caches.copy_(e_all)
        state.cache_valid = True
        state.time_decode += time.perf_counter() - t0
        state._record_rate(rate)
        nbytes = m * x.element_size()
        state.bytes_raw += nbytes
        state.bytes_sent += nbytes
        state.bytes_wire += nbytes
        state.mode_history.append("raw")

    pending.items.append(finish)
    return pending


def _codec_path(
    comm: Communicator, out: torch.Tensor, x: torch.Tensor, state: AdERAState, async_op: bool
) -> _Pending:
    cfg = state.config
    m, p, r = x.numel(), comm.world_size, comm.rank
    dev = x.device
    bounds = _chunk_bounds(m, cfg.chunks)
    pending = _Pending()
    totals = {"n_c": 0, "sizes": {}}
    n_chunks = len(bounds)

    for ci, (s, e) in enumerate(bounds):
        t0 = time.perf_counter()
        payload = encode_shard(x[s:e], state.caches[r, s:e], cfg)
        buf = payload.to_bytes()
        state.time_encode += time.perf_counter() - t0
        totals["sizes"][payload.mode] = totals["sizes"].get(payload.mode, 0) + (e - s)
        state.bytes_sent += buf.numel()
        if cfg.capacity_frac is not None:
            cap = _capacity(e - s, x.dtype, cfg.capacity_frac)
            if buf.numel() > cap:
                ov = Payload(
                    payload.mode,
                    x.dtype,
                    e - s,
                    payload.n_changed,
                    torch.empty(0, dtype=torch.uint8, device=dev),
                    None,
                    cfg.block_size,
                    overflow=True,
                )
                buf = ov.to_bytes()
            send = torch.zeros(cap, dtype=torch.uint8, device=dev)
            send[: buf.numel()] = buf
            length = cap
            state.bytes_wire += cap
        else:
            ln = torch.tensor([buf.numel()], dtype=torch.int64, device=dev)
            lens = torch.empty(p, dtype=torch.int64, device=dev)
            comm.all_gather(lens, ln)
            length = int(lens.max().item())
            send = torch.zeros(length, dtype=torch.uint8, device=dev)
            send[: buf.numel()] = buf
            state.bytes_wire += length + 8
        recv = torch.empty(p * length, dtype=torch.uint8, device=dev)
        work = comm.all_gather(recv, send, async_op=async_op or ci + 1 < n_chunks)

        def finish(work=work, recv=recv, length=length, s=s, e=e, payload=payload) -> None:
            work.wait()
            t0 = time.perf_counter()
            parsed = [Payload.from_bytes(recv[k * length : (k + 1) * length]) for k in range(p)]
            for k, pl in enumerate(parsed):
                if pl.numel != e - s or pl.dtype != x.dtype:
                    raise ValueError(
                        f"uneven shards: rank {k} sent a chunk of {pl.numel} {pl.dtype} elements, "
                        f"expected {e - s} {x.dtype}"
                    )
            overflow = [k for k, pl in enumerate(parsed) if pl.overflow]
            raw_all = None
            if overflow:
                raw_all = torch.empty(p * (e - s), dtype=x.dtype, device=dev)
                comm.all_gather(raw_all, x[s:e].contiguous())
                state.bytes_wire += (e - s) * x.element_size()
            for k, pl in enumerate(parsed):
                dst = out[k * m + s : k * m + e]
                if k == r:
                    dst.copy_(x[s:e])
                    state.caches[r, s:e] = payload.exponents
                elif pl.overflow:
                    dst.copy_(raw_all[k * (e - s) : (k + 1) * (e - s)])
                    state.caches[k, s:e] = exponents(dst)
                else:
                    decode_payload(pl, state.caches[k, s:e], out=dst, verify=cfg.verify)
            totals["n_c"] += sum(max(pl.n_changed, 0) for pl in parsed)
            state.time_decode += time.perf_counter() - t0

        pending.items.append(finish)
        if not async_op and len(pending.items) > 1:
            pending.run_one()  # decode chunk c-1 while chunk c is in flight

    def record() -> None:
        state._record_rate(totals["n_c"] / (p * m))
        state.bytes_raw += m * x.element_size()
        sizes = totals["sizes"]
        state.mode_history.append(max(sizes, key=sizes.get))

    pending.items.append(record)
    return pending


def emulate_all_gather(
    shards: Sequence[torch.Tensor],
    states: Sequence[Any],
    gather_fn: Callable[..., Any] | None = None,
    groups: Sequence[ThreadGroup] | None = None,
) -> list[torch.Tensor]:
    """Run one all-gather over ``P = len(shards)`` virtual ranks inside this process (one thread each).

    Parameters
    ----------
    shards : sequence of Tensor [m]
        Shard of each virtual rank.
    states : sequence
        Per-rank state passed as ``state=`` to ``gather_fn`` (AdERAState for AdERA, GatherStats for
        the baselines).
    gather_fn : callable, optional
        ``fn(output, input, group, *, state)``; default :func:`adera_all_gather`.
    groups : sequence of ThreadGroup, optional
        Reuse members across calls (built fresh when omitted).

    Returns
    -------
    list of Tensor [P * m], one gathered output per virtual rank.
    """
    p = len(shards)
    if len(states) != p:
        raise ValueError(f"states must have one entry per shard ({p}), got {len(states)}")
    gather_fn = gather_fn or adera_all_gather
    groups = list(groups) if groups is not None else ThreadGroup.create(p)
    outs = [torch.empty(p * s.numel(), dtype=s.dtype, device=s.device) for s in shards]
    if p == 1:
        gather_fn(outs[0], shards[0], groups[0], state=states[0])
        return outs
    with ThreadPoolExecutor(max_workers=p) as pool:
        futures = [pool.submit(gather_fn, outs[r], shards[r], groups[r], state=states[r]) for r in range(p)]
        errors = []
        for f in futures:
            try:
                f.result(timeout=600)
            except Exception as err:  # noqa: BLE001 - re-raised below
                errors.append(err)
                groups[0]._shared.barrier.abort()
        if errors:
            real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
            raise (real or errors)[0]
    return outs


try:  # FSDP2's pluggable all-gather (torch >= 2.8); private module path, so guarded
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather as _FSDPAllGather
except ImportError:  # pragma: no cover - older torch
    _FSDPAllGather = object


class AdERAAllGather(_FSDPAllGather):
    """AdERA as FSDP2's all-gather: ``fsdp_module.set_custom_all_gather(AdERAAllGather())``.

    FSDP2 (``torch.distributed.fsdp.fully_shard``) gathers each FSDP module's parameters as one flat
    buffer (``output [P * m]``, ``input [m]`` aliasing this rank's slot of the output); one instance
    per FSDP module keeps that buffer's :class:`AdERAState`. Buffers that are not bf16/fp16/fp32
    (FSDP byte-views mixed-dtype groups as uint8) fall back to the plain all-gather. Forward and
    backward re-gathers (``reshard_after_forward=True``) both go through AdERA; the backward one sees
    unchanged exponents.

    Parameters
    ----------
    config : AdERAConfig, optional
    cost_model : CostModel, optional
    """

    def __init__(self, config: AdERAConfig | None = None, cost_model: CostModel | None = None) -> None:
        self.config = config or AdERAConfig()
        self.cost_model = cost_model
        self.state: AdERAState | None = None

    def allocate(self, size: Sequence[int], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(
        self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any, async_op: bool = False
    ) -> Any:
        if input_tensor.dtype not in _DTYPES:  # FSDP's uint8 view of mixed-dtype groups: plain gather
            work = Communicator(group).all_gather(output_tensor, input_tensor, async_op=async_op)
            return work if async_op else None
        world = Communicator(group).world_size
        st = self.state
        if st is None or st.numel != input_tensor.numel() or st.dtype != input_tensor.dtype:
            st = self.state = AdERAState(
                self.config,
                input_tensor.numel(),
                input_tensor.dtype,
                world,
                cost_model=self.cost_model,
                device=input_tensor.device,
            )
        return adera_all_gather(output_tensor, input_tensor, group, state=st, async_op=async_op)

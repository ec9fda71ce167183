r"""Contiguous, growable storage of KIVI-layout blocks and their one-pass dequantisation.

A :class:`BlockStore` keeps every flushed block of one kind (keys or values) of one layer in a few
preallocated buffers, one set per bit-width, instead of one small tensor per block: packed codes
``uint8 [B, capacity, bytes_per_row]``, scales and zeros ``[B, capacity, *group_shape]`` (16-bit blocks:
``[B, capacity, H, G, D]`` in the model dtype). Buffers grow geometrically (x1.5) along the block axis,
so appending a block copies only that block, and the whole store is dequantised in one vectorised pass
per bit-width (:meth:`BlockStore.dequantize_into`) that writes straight into the attention input.

The per-block objects (:attr:`BlockStore.blocks`, :class:`~neurips26.inference.quant.QuantizedTensor` or
:class:`~neurips26.inference.quant.FullPrecisionBlock`) are *views* of the buffers: the reference path
dequantises them one by one exactly as before, and the fast path gives the same bits because it
evaluates the same elementwise formula (codes to float, times scale, plus zero, then a cast to the model
dtype) on the same operands:

.. math::
    \hat x = m + q\,s \quad\text{(per group; } q \text{ from the packed codes)}

Shapes
------
- keys (groups along tokens, one group per channel and block): codes ``[B, n, ceil(H D G b / 8)]``,
  scale/zero ``[B, n, H, D, 1]``; values (groups of ``G_v`` channels per token): codes
  ``[B, n, ceil(H G D b / 8)]``, scale/zero ``[B, n, H, G, D / G_v]``.
- :meth:`BlockStore.dequantize_into`: ``out [B, H, n_blocks, G, D]`` (a view of the layer's output).

Memory: :meth:`BlockStore.held_tensors` lists the whole buffers (capacity included), so a layer's
``memory_report`` equals the bytes it really holds; the storage model (``memory_bytes(fp_itemsize)``)
still counts the used blocks only.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from neurips26.inference.quant.packing import FULL_PRECISION_BITS, unpack_bits
from neurips26.inference.quant.tensors import FullPrecisionBlock, QuantizedTensor, _compute_dtype

GROWTH = 1.5

_TABLES: dict[tuple[int, torch.dtype, str], torch.Tensor] = {}


def _code_table(bits: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``Tensor[256, 8 // bits]``: the codes of every byte value as floats (little-endian order)."""
    key = (bits, dtype, str(device))
    if key not in _TABLES:
        per = 8 // bits
        v = torch.arange(256, dtype=torch.int64).unsqueeze(-1)
        shifts = torch.arange(per, dtype=torch.int64) * bits
        _TABLES[key] = ((v >> shifts) & ((1 << bits) - 1)).to(dtype=dtype, device=device)
    return _TABLES[key]


def unpack_float(codes: torch.Tensor, bits: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """``uint8 [..., ceil(n b / 8)] -> dtype [..., n]``: unpacked codes as floats (exact integers).

    Equal to ``unpack_bits(codes, bits, n).to(dtype)``; widths dividing 8 use one table look-up per byte.
    """
    if bits == 8:
        return codes.to(dtype)
    if 8 % bits:
        return unpack_bits(codes, bits, n).to(dtype)
    table = _code_table(bits, dtype, codes.device)
    out = torch.nn.functional.embedding(codes.long(), table)  # [..., nbytes, per]
    out = out.reshape(*codes.shape[:-1], -1)
    return out if out.shape[-1] == n else out[..., :n]


def _dequantize_groups(
    codes, scale, zero, bits: int, lead: tuple[int, ...], group: int, comp
) -> torch.Tensor:
    """``zero + q * scale`` of stacked blocks: codes ``[B, n, nbytes]``, scale/zero ``[B, n, *lead, n_g]``;
    returns ``comp [B, n, *lead, n_g, group]``."""
    b, n = codes.shape[:2]
    n_g = scale.shape[-1]
    q = unpack_float(codes, bits, math.prod(lead) * n_g * group, comp).view(b, n, *lead, n_g, group)
    q.mul_(scale.to(comp).unsqueeze(-1))
    return q.add_(zero.to(comp).unsqueeze(-1))


class BlockStore:
    """Every flushed block of one kind (``"key"``: groups along tokens, ``"value"``: along channels).

    Parameters
    ----------
    kind : {"key", "value"}

    Attributes
    ----------
    blocks : list
        One view object per block, oldest first (:class:`QuantizedTensor` or :class:`FullPrecisionBlock`).
    order : list of (bits, slot)
        Where block ``i`` lives: the bit-width's buffer and its index there.
    """

    def __init__(self, kind: str):
        if kind not in ("key", "value"):
            raise ValueError(f"kind must be 'key' or 'value', got {kind!r}")
        self.kind = kind
        self.bufs: dict[int, dict[str, Any]] = {}
        self.order: list[tuple[int, int]] = []
        self.blocks: list[Any] = []
        self._pos: dict[int, torch.Tensor] = {}  # bits -> positions of its slots (cached, see positions)

    def __len__(self) -> int:
        return len(self.order)

    # -- appending ------------------------------------------------------------------------------
    def _new_buffers(self, block: Any, capacity: int) -> dict[str, Any]:
        if isinstance(block, FullPrecisionBlock):
            d = block.data
            return {"data": d.new_empty((d.shape[0], capacity, *d.shape[1:])), "n": 0}
        c, s, z = block.codes, block.scale, block.zero
        return {
            "codes": c.new_empty((c.shape[0], capacity, *c.shape[1:])),
            "scale": s.new_empty((s.shape[0], capacity, *s.shape[1:])),
            "zero": z.new_empty((z.shape[0], capacity, *z.shape[1:])),
            "n": 0,
            "bits": block.bits,
            "meta": (tuple(block.shape), block.axis, block.group_size, block.dtype),
        }

    def _grow(self, bits: int, need: int) -> None:
        buf = self.bufs[bits]
        for name, t in list(buf.items()):
            if isinstance(t, torch.Tensor):
                new = t.new_empty((t.shape[0], need, *t.shape[2:]))
                new[:, : buf["n"]] = t[:, : buf["n"]]
                buf[name] = new
        self._rebuild()

    def reserve(self, extra: int, block: Any) -> None:
        """Make room for ``extra`` more blocks like ``block`` (exact room when a buffer is created)."""
        bits = block.bits
        if bits not in self.bufs:
            self.bufs[bits] = self._new_buffers(block, max(1, extra))
            return
        buf = self.bufs[bits]
        cap = self._capacity(bits)
        if buf["n"] + extra > cap:
            self._grow(bits, max(buf["n"] + extra, math.ceil(cap * GROWTH)))

    def _capacity(self, bits: int) -> int:
        buf = self.bufs[bits]
        return (buf["data"] if "data" in buf else buf["codes"]).shape[1]

    def append(self, block: Any, reserve: int = 1) -> None:
        """Copy ``block`` (a fresh quantised or 16-bit block) into the buffers; ``reserve``: blocks about to
        be appended in a row (sizes the first allocation exactly)."""
        self.reserve(max(1, reserve), block)
        bits = block.bits
        buf = self.bufs[bits]
        slot = buf["n"]
        if bits == FULL_PRECISION_BITS:
            buf["data"][:, slot] = block.data
        else:
            buf["codes"][:, slot] = block.codes
            buf["scale"][:, slot] = block.scale
            buf["zero"][:, slot] = block.zero
        buf["n"] = slot + 1
        self.order.append((bits, slot))
        self.blocks.append(self._view(bits, slot))
        self._pos.pop(bits, None)

    def append_run(self, run: Any, batch: int, m: int, reserve: int = 1) -> None:
        """Append ``m`` blocks quantised together: ``run`` is the block object of the stacked blocks
        ``[batch * m, H, G, D]`` (rows ordered batch-major), the same bits as ``m`` single appends."""
        if isinstance(run, FullPrecisionBlock):
            data = run.data.reshape(batch, m, *run.data.shape[1:])
            first = FullPrecisionBlock(data[:, 0])
            parts = {"data": data}
        else:
            codes = run.codes.reshape(batch, m, -1)
            scale = run.scale.reshape(batch, m, *run.scale.shape[1:])
            zero = run.zero.reshape(batch, m, *run.zero.shape[1:])
            first = QuantizedTensor(codes[:, 0], scale[:, 0], zero[:, 0], (batch, *run.shape[1:]), run.axis,
                                    run.group_size, run.bits, run.dtype)  # fmt: skip
            parts = {"codes": codes, "scale": scale, "zero": zero}
        self.reserve(max(m, reserve), first)
        bits = run.bits
        buf = self.bufs[bits]
        slot = buf["n"]
        for name, t in parts.items():
            buf[name][:, slot : slot + m] = t
        buf["n"] = slot + m
        for s in range(slot, slot + m):
            self.order.append((bits, s))
            self.blocks.append(self._view(bits, s))
        self._pos.pop(bits, None)

    def _view(self, bits: int, slot: int) -> Any:
        buf = self.bufs[bits]
        if bits == FULL_PRECISION_BITS:
            return FullPrecisionBlock(buf["data"][:, slot])
        shape, axis, group_size, dtype = buf["meta"]
        return QuantizedTensor(
            buf["codes"][:, slot],
            buf["scale"][:, slot],
            buf["zero"][:, slot],
            shape,
            axis,
            group_size,
            bits,
            dtype,
        )

    def _rebuild(self) -> None:
        self.blocks = [self._view(b, s) for b, s in self.order]

    # -- batch operations and truncation --------------------------------------------------------
    def map_batch(self, fn) -> None:
        """Apply ``fn`` (a batch-dimension operation: ``index_select``, ``repeat_interleave``) to every buffer."""
        for buf in self.bufs.values():
            for name, t in list(buf.items()):
                if isinstance(t, torch.Tensor):
                    buf[name] = fn(t)
            if "meta" in buf:
                shape, axis, group_size, dtype = buf["meta"]
                rows = (buf["codes"]).shape[0]
                buf["meta"] = ((rows, *shape[1:]), axis, group_size, dtype)
        self._rebuild()

    def truncate(self, n_blocks: int) -> None:
        """Keep the first ``n_blocks`` blocks (the buffers keep their capacity)."""
        self.order = self.order[:n_blocks]
        self.blocks = self.blocks[:n_blocks]
        self._pos.clear()
        for bits, buf in self.bufs.items():
            buf["n"] = sum(1 for b, _ in self.order if b == bits)

    def held_tensors(self) -> list[tuple[str, torch.Tensor]]:
        """The buffers (whole capacity) with their memory category."""
        out: list[tuple[str, torch.Tensor]] = []
        for buf in self.bufs.values():
            if "data" in buf:
                out.append(("codes", buf["data"]))
            else:
                out += [
                    ("codes", buf["codes"]),
                    ("group_params", buf["scale"]),
                    ("group_params", buf["zero"]),
                ]
        return out

    # -- decoding -------------------------------------------------------------------------------
    def positions(self, bits: int) -> torch.Tensor:
        """``int64 [n]``: the position among all stored blocks of each used slot of ``bits``'s buffer."""
        if bits not in self._pos:
            pos = [i for i, (b, _) in enumerate(self.order) if b == bits]
            device = next(t for t in self.bufs[bits].values() if isinstance(t, torch.Tensor)).device
            self._pos[bits] = torch.tensor(pos, dtype=torch.long, device=device)
        return self._pos[bits]

    def parts(self) -> list[dict[str, Any]]:
        """The used part of every buffer as of now: ``{"bits", "n", "pos", and the buffers}`` (the whole
        buffers, of which slots ``0 .. n - 1`` are used; later appends write only past them, and a growth
        replaces the buffers, so a list taken before an append still describes the blocks it saw)."""
        out = []
        for bits, buf in self.bufs.items():
            if buf["n"]:
                out.append({**buf, "bits": bits, "pos": self.positions(bits)})
        return out

    def dequantize_into(self, out: torch.Tensor) -> None:
        """Write every block's reconstruction into ``out [B, H, n_blocks, G, D]`` (one pass per bit-width),
        the bits of ``block.dequantize()`` for every block."""
        for bits, buf in self.bufs.items():
            n = buf["n"]
            if n == 0:
                continue
            if len(self.bufs) == 1 or all(b == bits for b, _ in self.order):
                target = None  # every block, in order
            else:
                pos = [i for i, (b, _) in enumerate(self.order) if b == bits]
                target = torch.tensor(pos, dtype=torch.long, device=out.device)
            if bits == FULL_PRECISION_BITS:
                src = buf["data"][:, :n].transpose(1, 2)  # [B, H, n, G, D]
            else:
                src = self._dequantized(buf, n)
            if target is None:
                out.copy_(src)
            else:
                out.index_copy_(2, target, src.to(out.dtype))

    def _dequantized(self, buf: dict[str, Any], n: int) -> torch.Tensor:
        shape, _, group_size, qdtype = buf["meta"]
        comp = _compute_dtype(qdtype)
        codes, scale, zero = buf["codes"][:, :n], buf["scale"][:, :n], buf["zero"][:, :n]
        b, h, g, d = shape  # the block's [B, H, G, D]
        if self.kind == "key":  # moved layout [B, H, D, G]: one group of G tokens per channel
            lead, group = (h, d), group_size
        else:  # [B, H, G, D]: groups of G_v channels
            lead, group = (h, g), group_size
        x = _dequantize_groups(codes, scale, zero, buf["bits"], lead, group, comp)
        if self.kind == "key":
            return x.squeeze(-2).permute(0, 2, 1, 4, 3)  # [B, n, H, D, G] -> [B, H, n, G, D]
        return x.reshape(b, n, h, g, d).permute(0, 2, 1, 3, 4)


class GrowableSequence:
    """A buffer filled along one dimension (``dim``, default the sequence axis ``-2`` of ``[B, H, T, D]``).

    ``append`` copies only the new entries; ``view()`` is the filled part (a view of the buffer: the
    caller uses it within one forward pass or copies it). Capacity grows x1.5; :meth:`held` is the whole
    buffer (what a memory report must count).
    """

    def __init__(self, dim: int = -2):
        self.dim = dim
        self.buf: torch.Tensor | None = None
        self.n = 0

    def append(self, x: torch.Tensor) -> None:
        dim = self.dim % x.dim()
        t = x.shape[dim]
        if self.buf is None:
            self.buf = torch.empty_like(x, memory_format=torch.contiguous_format)
        elif self.n + t > self.buf.shape[dim]:
            cap = max(self.n + t, math.ceil(self.buf.shape[dim] * GROWTH))
            shape = list(self.buf.shape)
            shape[dim] = cap
            new = self.buf.new_empty(shape)
            new.narrow(dim, 0, self.n).copy_(self.buf.narrow(dim, 0, self.n))
            self.buf = new
        self.buf.narrow(dim, self.n, t).copy_(x)
        self.n += t

    def view(self) -> torch.Tensor | None:
        return None if self.buf is None else self.buf.narrow(self.dim % self.buf.dim(), 0, self.n)

    def truncate(self, n: int) -> None:
        self.n = min(self.n, n)
        if self.n == 0:
            self.buf = None

    def map_batch(self, fn) -> None:
        if self.buf is not None:
            self.buf = fn(self.buf)

    def held(self) -> torch.Tensor | None:
        return self.buf

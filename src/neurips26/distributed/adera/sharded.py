r"""ZeRO-3-style sharded wrapper with a pluggable weight all-gather (AdERA or a baseline).

:class:`ShardedMoEWrapper` replaces selected parameters with fp32 master shards, rebuilds the full
weights before each module's forward through ``gather_fn`` and reduce-scatters gradients in a fixed
order in :meth:`ShardedMoEWrapper.sync_gradients`.

.. math::

    W = \mathrm{upcast}\big(\mathrm{allgather}(\mathrm{cast}_{\mathrm{bf16}}(w_0), \dots,
    \mathrm{cast}_{\mathrm{bf16}}(w_{P-1}))\big)

Shapes
------
- a sharded parameter of ``n`` elements becomes ``shards[name]`` of ``ceil(n / P)`` fp32 elements;
  the gathered buffer has ``P * ceil(n / P)`` elements of ``gather_dtype``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from neurips26.common.checks import check_choice
from neurips26.common.distributed import Communicator
from neurips26.distributed.adera.allgather import adera_all_gather
from neurips26.distributed.adera.baselines import (
    int8_block_all_gather,
    lossless_zlib_all_gather,
    raw_all_gather,
)
from neurips26.distributed.adera.codec import _DTYPES, AdERAConfig, _flat
from neurips26.distributed.adera.cost import AdERAState, CostModel, GatherStats

GATHER_FNS = {
    "raw": raw_all_gather,
    "adera": adera_all_gather,
    "zlib": lossless_zlib_all_gather,
    "int8": int8_block_all_gather,
}


class _GatheredParam(torch.autograd.Function):
    """Forward: all-gather the (mixed-precision) shards into the full weight.

    Backward: park the full-weight gradient on the wrapper; :meth:`ShardedMoEWrapper.sync_gradients`
    reduce-scatters it later in a fixed order (collectives inside autograd would run in a
    data-dependent order and could pair up differently on different ranks).
    """

    @staticmethod
    def forward(ctx, shard, wrapper, name):  # noqa: D102
        ctx.wrapper, ctx.name = wrapper, name
        return wrapper._gather_full(name, shard)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        pending = ctx.wrapper._pending_grads
        pending[ctx.name] = grad.detach().clone() if ctx.name not in pending else pending[ctx.name] + grad
        return None, None, None


class ShardedMoEWrapper(nn.Module):
    """Minimal ZeRO-3-style sharding with a pluggable weight all-gather (for AdERA and its baselines).

    Every selected parameter is flattened, padded to a multiple of ``P`` and replaced by this
    rank's fp32 master shard ``[ceil(numel / P)]``. Before a module's forward its full weights are
    rebuilt by casting the shards to ``gather_dtype`` (the mixed-precision copy), all-gathering them
    with ``gather_fn`` and upcasting to the compute dtype. After ``loss.backward()`` call
    :meth:`sync_gradients`: gradients of the full weights are reduce-scattered (averaged over ranks)
    into the shards' ``.grad`` and gradients of replicated parameters are all-reduced (averaged), in
    a fixed order on every rank. The full weights stay referenced by autograd until backward (FSDP
    ``reshard_after_forward=False`` behaviour; no re-gather in backward; optional forward prefetch).

    Shapes
    ------
    A sharded parameter of ``n`` elements becomes ``shards[name]`` ``[ceil(n / P)]`` (fp32); the gathered
    buffer is ``[P * ceil(n / P)]`` in ``gather_dtype``. ``forward`` takes and returns what the wrapped
    model does.

    Parameters
    ----------
    model : nn.Module
    group : ProcessGroup, ThreadGroup or None
    gather_fn : {"raw", "adera", "zlib", "int8"} or callable
        ``fn(output, input, group, *, state)``.
    shard : {"experts", "all"} or callable
        Which parameters to shard: names containing ``"experts"``, every parameter, or a predicate on
        the parameter name.
    config : AdERAConfig, optional
        For AdERA gathers.
    gather_dtype : torch.dtype
        Dtype of the all-gathered copy (default bfloat16).
    cost_model : CostModel, optional
    check_exact : bool
        After every gather also run a plain all-gather and count bitwise mismatches (``mismatches``).
    prefetch : bool
        When a module's pre-hook runs, launch the next sharded module's gather with ``async_op=True``
        (AdERA and raw gathers; others run synchronously) so that it overlaps this module's compute;
        a prefetched buffer whose shard changed in between is discarded and gathered again.
    """

    def __init__(
        self,
        model: nn.Module,
        group: Any = None,
        gather_fn: str | Callable[..., Any] = "raw",
        *,
        shard: str | Callable[[str], bool] = "experts",
        config: AdERAConfig | None = None,
        gather_dtype: torch.dtype = torch.bfloat16,
        cost_model: CostModel | None = None,
        check_exact: bool = False,
        prefetch: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
        if isinstance(gather_fn, str):
            check_choice("gather_fn", gather_fn, GATHER_FNS)
            gather_fn = GATHER_FNS[gather_fn]
        elif not callable(gather_fn):
            raise TypeError("gather_fn must be 'raw', 'adera', 'zlib', 'int8' or a callable")
        if gather_dtype not in _DTYPES:
            raise TypeError(f"gather_dtype must be bfloat16, float16 or float32, got {gather_dtype}")
        if isinstance(shard, str):
            check_choice("shard", shard, ("experts", "all"))
            pred = (lambda n: "experts" in n) if shard == "experts" else (lambda n: True)
        elif callable(shard):
            pred = shard
        else:
            raise TypeError("shard must be 'experts', 'all' or a callable on parameter names")
        self.module = model
        self.group = group
        self.comm = Communicator(group)
        self.gather_fn = gather_fn
        self.config = config or AdERAConfig()
        self.gather_dtype = gather_dtype
        self.cost_model = cost_model
        self.check_exact = check_exact
        if not isinstance(prefetch, bool):
            raise TypeError(f"prefetch must be a bool, got {prefetch!r}")
        self.prefetch = prefetch
        self.prefetched = 0
        self._prefetched: dict[str, tuple[torch.Tensor, Any, torch.Tensor, int]] = {}
        self._groups: list[list[str]] = []
        self.mismatches = 0
        self.gathers = 0
        self.shards = nn.ParameterDict()
        self.states: dict[str, Any] = {}
        self._meta: dict[str, tuple[nn.Module, str, torch.Size, int]] = {}
        p, r = self.comm.world_size, self.comm.rank
        names = [n for n, _ in model.named_parameters()]
        for name in names:
            if not pred(name):
                continue
            mod_name, _, pname = name.rpartition(".")
            mod = model.get_submodule(mod_name) if mod_name else model
            param = mod._parameters[pname]
            numel = param.numel()
            m = (numel + p - 1) // p
            flat = torch.zeros(m * p, dtype=torch.float32, device=param.device)
            flat[:numel] = param.detach().reshape(-1).float()
            key = name.replace(".", "__")
            self.shards[key] = nn.Parameter(flat[r * m : (r + 1) * m].clone())
            del mod._parameters[pname]
            self._meta[key] = (mod, pname, param.shape, numel)
            if gather_fn is adera_all_gather:
                self.states[key] = AdERAState(
                    self.config, m, gather_dtype, p, cost_model=cost_model, device=param.device
                )
            else:
                self.states[key] = GatherStats()
        hooked: dict[int, list[str]] = {}
        for key, (mod, _, _, _) in self._meta.items():
            hooked.setdefault(id(mod), []).append(key)
        for mod, _, _, _ in self._meta.values():
            if hooked.get(id(mod)):
                keys = hooked.pop(id(mod))
                mod.register_forward_pre_hook(self._make_pre_hook(len(self._groups), keys))
                self._groups.append(keys)
        self._pending_grads: dict[str, torch.Tensor] = {}

    def _make_pre_hook(self, index: int, keys: list[str]) -> Callable[..., None]:
        def hook(mod: nn.Module, args: Any) -> None:
            for key in keys:
                _, pname, _, _ = self._meta[key]
                setattr(mod, pname, _GatheredParam.apply(self.shards[key], self, key))
            if self.prefetch and index + 1 < len(self._groups):
                for key in self._groups[index + 1]:  # next module's gather overlaps this module's compute
                    if key not in self._prefetched:
                        self._prefetched[key] = self._launch(key, async_op=True)

        return hook

    def _launch(self, key: str, async_op: bool) -> tuple[torch.Tensor, Any, torch.Tensor, int]:
        shard = self.shards[key]
        low = shard.detach().to(self.gather_dtype)
        out = torch.empty(self.comm.world_size * low.numel(), dtype=self.gather_dtype, device=shard.device)
        handle = None
        if async_op and self.gather_fn in (adera_all_gather, raw_all_gather):
            handle = self.gather_fn(out, low, self.group, state=self.states[key], async_op=True)
        else:
            self.gather_fn(out, low, self.group, state=self.states[key])
        return out, handle, low, shard._version

    def sync_gradients(self) -> None:
        """Reduce-scatter sharded gradients and all-reduce replicated ones (averaged over ranks).

        Call after ``loss.backward()`` and before ``optimizer.step()`` on every rank.
        """
        for key, shard in self.shards.items():
            grad = self._pending_grads.pop(key, None)
            if grad is None:
                grad = torch.zeros(self._meta[key][2], dtype=torch.float32, device=shard.device)
            g = self._reduce_scatter(key, grad)
            shard.grad = g if shard.grad is None else shard.grad + g
        self._pending_grads.clear()
        p = self.comm.world_size
        if p > 1:
            for param in self.module.parameters():
                if param.requires_grad:
                    if param.grad is None:
                        param.grad = torch.zeros_like(param)
                    self.comm.all_reduce_sum(param.grad)
                    param.grad.div_(p)

    def _gather_full(self, key: str, shard: torch.Tensor) -> torch.Tensor:
        _, _, shape, numel = self._meta[key]
        entry = self._prefetched.pop(key, None)
        if entry is not None:
            out, handle, low, version = entry
            if handle is not None:
                handle.wait()
            if version != shard._version:  # the shard changed since the prefetch: gather again
                entry = None
            else:
                self.prefetched += 1
        if entry is None:
            out, _, low, _ = self._launch(key, async_op=False)
        self.gathers += 1
        if self.check_exact:
            ref = torch.empty_like(out)
            self.comm.all_gather(ref, low)
            if not _bitwise_equal(ref, out):
                self.mismatches += 1
        return out[:numel].view(shape).to(shard.dtype)

    def _reduce_scatter(self, key: str, grad: torch.Tensor) -> torch.Tensor:
        _, _, _, numel = self._meta[key]
        p = self.comm.world_size
        m = self.shards[key].numel()
        flat = torch.zeros(m * p, dtype=torch.float32, device=grad.device)
        flat[:numel] = grad.reshape(-1)
        out = torch.empty(m, dtype=torch.float32, device=grad.device)
        self.comm.reduce_scatter_sum(out, flat)
        return out.div_(p)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def gathered_bf16(self) -> dict[str, torch.Tensor]:
        """Current mixed-precision copies of this rank's shards (what the next gather sends)."""
        return {k: v.detach().to(self.gather_dtype) for k, v in self.shards.items()}


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and torch.equal(_flat(a).view(torch.uint8), _flat(b).view(torch.uint8))
    )

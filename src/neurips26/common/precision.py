"""Working precision chosen by the CPU: bfloat16 matrix products only where the hardware has them.

On CPUs with AVX512-BF16 or AMX tiles a bfloat16 matmul chain is faster than float32; on CPUs with
only AVX2 it is emulated and about 17x slower (45 ms against 2.6 ms for a 256 x 784 Newton-Schulz
chain, measured on an AVX2-only AMD EPYC). :func:`matmul_dtype` returns the dtype a low-precision
matrix iteration (Muon's and AcceleGrad#'s Newton-Schulz polar step) should run in on this machine,
``NEURIPS26_MATMUL_DTYPE`` (``bfloat16`` / ``float32``) overrides it, and :func:`precision_info`
is recorded in every claim result's environment.

:class:`MuonAtPrecision` is ``torch.optim.Muon`` with its Newton-Schulz step at a chosen dtype:
torch 2.13's Muon hard-codes bfloat16, so a baseline compared against a method running in float32
would otherwise run at a different precision (and speed) than the method.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

ENV_VAR = "NEURIPS26_MATMUL_DTYPE"
_NAMES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float32": torch.float32, "fp32": torch.float32}


def at_least_float32(t: Tensor) -> Tensor:
    """``t`` upcast to float32 when it is narrower (float16, bfloat16, integer, bool), else unchanged.

    The ``.float()`` a numerically sensitive step applies to low-precision activations, without
    rounding float64 input down to float32 (issue 33: components keep their input's dtype).
    """
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


def cpu_bf16_matmul() -> bool:
    """Whether this CPU has bfloat16 matrix units (AVX512-BF16 or AMX tiles), as torch reports them."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


def matmul_dtype(default: torch.dtype | None = None) -> torch.dtype:
    """The working dtype for low-precision matrix iterations on this machine.

    ``NEURIPS26_MATMUL_DTYPE`` wins when set; then ``default`` when given; else ``bfloat16`` where the
    CPU has bf16 matrix units and ``float32`` where it does not.
    """
    env = os.environ.get(ENV_VAR, "").strip().lower()
    if env:
        if env not in _NAMES:
            raise ValueError(f"{ENV_VAR} must be one of {sorted(_NAMES)}, got {env!r}")
        return _NAMES[env]
    if default is not None:
        if default not in (torch.bfloat16, torch.float32, torch.float64):
            raise ValueError(f"default must be torch.bfloat16, torch.float32 or torch.float64, got {default}")
        return default
    return torch.bfloat16 if cpu_bf16_matmul() else torch.float32


def precision_info() -> dict[str, Any]:
    """The CPU's relevant capabilities and the chosen working dtype (recorded in result envs)."""
    flags = {}
    for name in ("avx2", "avx512", "avx512_bf16", "amx_tile", "amx_fp16"):
        probe = getattr(torch.cpu, f"_is_{name}_supported", None)
        flags[name] = bool(probe()) if probe is not None else None
    return {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "flags": flags,
        "matmul_dtype": str(matmul_dtype()).removeprefix("torch."),
        "override": os.environ.get(ENV_VAR) or None,
    }


def newton_schulz(grad: Tensor, ns_coefficients: tuple[float, float, float], ns_steps: int, eps: float,
                  dtype: torch.dtype) -> Tensor:  # fmt: skip
    """torch.optim.Muon's quintic Newton-Schulz orthogonalisation, run in ``dtype``.

    The same operations in the same order as torch 2.13's ``_zeropower_via_newtonschulz`` (which
    fixes ``dtype`` to bfloat16), so ``dtype=torch.bfloat16`` reproduces it bit for bit.

    Shapes: ``grad`` (m, n) -> (m, n) in ``dtype``.
    """
    if grad.ndim != 2:
        raise ValueError(f"grad must be a 2-D matrix, got shape {tuple(grad.shape)}")
    a, b, c = ns_coefficients
    x = grad.to(dtype)
    if grad.size(0) > grad.size(1):
        x = x.T
    x = x.div(x.norm().clamp(min=eps))
    for _ in range(ns_steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    if grad.size(0) > grad.size(1):
        x = x.T
    return x


_PATCH_LOCK = threading.Lock()


@contextmanager
def _muon_precision(dtype: torch.dtype):
    import torch.optim._muon as muon_module

    original = muon_module._zeropower_via_newtonschulz

    def at_dtype(grad, ns_coefficients, ns_steps, eps):
        return newton_schulz(grad, ns_coefficients, ns_steps, eps, dtype)

    with _PATCH_LOCK:
        muon_module._zeropower_via_newtonschulz = at_dtype
        try:
            yield
        finally:
            muon_module._zeropower_via_newtonschulz = original


class MuonAtPrecision(torch.optim.Muon):
    """``torch.optim.Muon`` whose Newton-Schulz step runs in ``matmul_dtype`` (default: :func:`matmul_dtype`).

    Everything else (momentum, Nesterov, learning-rate adjustment, weight decay, state) is torch's own.
    With ``matmul_dtype=torch.bfloat16`` it equals ``torch.optim.Muon`` bit for bit.
    """

    def __init__(self, params: Any, *args: Any, matmul_dtype: torch.dtype | None = None, **kwargs: Any) -> None:
        import torch.optim._muon as muon_module

        if not hasattr(muon_module, "_zeropower_via_newtonschulz"):
            raise RuntimeError("this torch's Muon has no _zeropower_via_newtonschulz to run at another precision")
        dtype = globals()["matmul_dtype"](matmul_dtype)
        super().__init__(params, *args, **kwargs)
        self.matmul_dtype = dtype

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        with _muon_precision(self.matmul_dtype):
            return super().step(closure)

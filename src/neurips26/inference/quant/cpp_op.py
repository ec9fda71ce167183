"""Build-once loading of a small C++ CPU operator registered with ``TORCH_LIBRARY``.

The KV-code kernels (:mod:`neurips26.inference.quant.kernels`, :mod:`neurips26.inference.adkv.kernel`) are
C++ sources compiled on first use with ``torch.utils.cpp_extension.load_inline`` (cached under
``$TORCH_EXTENSIONS_DIR``, so later processes only load the shared object). :class:`InlineCppOp` holds one
such operator: it builds it at most once per process (thread-safe), reports whether it is available, and
falls back (with one ``RuntimeWarning``) where it cannot be built: no compiler, no headers, or
``NEURIPS26_KV_KERNEL=0``. Callers then take their torch-ops path, which computes the same formulas.
"""

from __future__ import annotations

import os
import threading
import warnings

import torch

__all__ = ["InlineCppOp"]


class InlineCppOp:
    """One ``TORCH_LIBRARY`` operator namespace built from inline C++ source.

    Args:
        name: the extension's build name (change it when the source changes, to rebuild).
        source: the C++ source (defines and registers the operators under ``namespace``).
        namespace: the ``torch.ops`` namespace the source registers.
        probe: one operator name in ``namespace``; if it is already registered nothing is built.
        label: how the warning of a failed build names the kernel.
    """

    def __init__(self, name: str, source: str, namespace: str, probe: str, label: str):
        for arg, value in (("name", name), ("source", source), ("namespace", namespace), ("probe", probe)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{arg} must be a non-empty string, got {value!r}")
        self.name, self.source, self.namespace, self.probe, self.label = name, source, namespace, probe, label
        self.tried = False
        self.ok = False
        self.error: str | None = None
        self._lock = threading.Lock()

    def _registered(self) -> bool:
        return hasattr(torch.ops, self.namespace) and hasattr(getattr(torch.ops, self.namespace), self.probe)

    def load(self) -> bool:
        """Build (first time, then cached) and load the operator; ``False`` where it cannot be built.

        ``NEURIPS26_KV_KERNEL=0`` disables it. A failed build is warned about once and not retried in this
        process.
        """
        if os.environ.get("NEURIPS26_KV_KERNEL", "1") == "0":
            return False
        if self.tried:
            return self.ok
        with self._lock:
            if self.tried:
                return self.ok
            try:
                if not self._registered():
                    from torch.utils.cpp_extension import load_inline

                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        load_inline(
                            name=self.name,
                            cpp_sources=[self.source],
                            extra_cflags=["-O3", "-fopenmp"],
                            extra_ldflags=["-fopenmp"],
                            is_python_module=False,
                            with_cuda=False,
                            verbose=False,
                        )
                self.ok = True
            except Exception as exc:  # no compiler, no headers: the caller's torch path serves
                self.error = f"{type(exc).__name__}: {exc}"
                warnings.warn(
                    f"neurips26 {self.label} unavailable, using torch ops ({self.error[:200]})",
                    RuntimeWarning,
                    stacklevel=3,
                )
            self.tried = True
        return self.ok

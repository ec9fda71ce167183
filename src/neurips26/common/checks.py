"""Argument checks whose error messages name the argument and the accepted range.

Every public function of the library validates its inputs with these helpers, so a bad argument
raises ``ValueError``/``TypeError`` at the call site instead of a stack trace from inside torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any


def _fmt_range(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    left = "(" if low_open else "["
    right = ")" if high_open else "]"
    lo = "-inf" if low is None else repr(low)
    hi = "inf" if high is None else repr(high)
    return f"{left}{lo}, {hi}{right}"


def check_int(name: str, value: Any, low: int | None = None, high: int | None = None) -> int:
    """Return ``value`` if it is an int (not bool) inside ``[low, high]``; raise otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must lie in {_fmt_range(low, high, False, False)}, got {value}")
    return value


def check_float(
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Return ``float(value)`` if it is a real number, not NaN, in the given range; raise otherwise.

    Infinities pass when the range allows them (e.g. SSD's threshold ``inf``); callers that need a
    finite value check ``math.isfinite`` or give finite bounds.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} ({value!r})")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name} must not be NaN")
    bad_low = low is not None and (value <= low if low_open else value < low)
    bad_high = high is not None and (value >= high if high_open else value > high)
    if bad_low or bad_high:
        raise ValueError(f"{name} must lie in {_fmt_range(low, high, low_open, high_open)}, got {value}")
    return value


def check_probability(name: str, value: Any) -> float:
    """A float in ``[0, 1]``."""
    return check_float(name, value, 0.0, 1.0)


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """Return ``value`` if it is one of ``choices``; raise ``ValueError`` listing them otherwise."""
    options = list(choices)
    if value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value


def check_shape(name: str, tensor: Any, shape: Sequence[int | None]) -> Any:
    """Check a tensor's shape; ``None`` entries match any size.

    Raises ``TypeError`` if ``tensor`` has no shape and ``ValueError`` on a mismatch.
    """
    if not hasattr(tensor, "shape"):
        raise TypeError(f"{name} must be a tensor, got {type(tensor).__name__}")
    actual = tuple(tensor.shape)
    if len(actual) != len(shape) or any(e is not None and e != a for e, a in zip(shape, actual)):
        expected = "(" + ", ".join("*" if e is None else str(e) for e in shape) + ")"
        raise ValueError(f"{name} must have shape {expected}, got {actual}")
    return tensor


def check_same_shape(**tensors: Any) -> None:
    """All keyword tensors share one shape; the message names every argument and its shape."""
    shapes = {k: tuple(v.shape) for k, v in tensors.items()}
    if len(set(shapes.values())) > 1:
        detail = ", ".join(f"{k}={s}" for k, s in shapes.items())
        raise ValueError(f"arguments must share one shape, got {detail}")


def check_finite(name: str, tensor: Any) -> Any:
    """Raise ``ValueError`` if a tensor holds NaN or inf."""
    import torch

    if not torch.isfinite(tensor).all():
        raise ValueError(f"{name} contains NaN or inf")
    return tensor


def check_tensor(
    name: str, x: Any, *, floating: bool = True, finite: bool = True, like: Any = None, like_name: str = "module"
) -> Any:
    """Return ``x`` if it is a tensor holding data (not meta), floating point (``floating``), finite
    (``finite``) and, when ``like`` (an ``nn.Module`` or a tensor) is given, in ``like``'s parameter dtype
    and device; raise ``TypeError``/``ValueError`` naming ``name`` otherwise."""
    import torch

    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.is_meta:
        raise ValueError(f"{name} is a meta tensor (no data); pass a materialised tensor")
    if floating and not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
    ref = next(like.parameters(), None) if isinstance(like, torch.nn.Module) else like
    if ref is not None and (x.dtype != ref.dtype or x.device != ref.device):
        raise TypeError(f"{name} is {x.dtype} on {x.device} but the {like_name}'s parameters are {ref.dtype} on {ref.device}")
    if finite and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains NaN or inf")
    return x

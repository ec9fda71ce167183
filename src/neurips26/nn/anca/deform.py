r"""Deformable 2-D convolution: torchvision's kernel and a pure-PyTorch ``grid_sample`` reference.

Both compute DCNv1/DCNv2 (arXiv 1703.06211, 1811.11168) with torchvision's conventions
(``torchvision.ops.deform_conv2d``):

.. math::

    y_o(p) = b_o + \sum_{c} \sum_{k=1}^{K} w_{o,c,k}\; m_{g(c),k}(p)\;
             \mathrm{bilin}\!\big(x_c,\; p\,s - \mathrm{pad} + d\,p_k + \Delta_{g(c),k}(p)\big)

for output position :math:`p`, kernel point :math:`p_k = (i, j)` (:math:`k = i\,k_w + j`), stride
:math:`s`, dilation :math:`d`, offset group :math:`g(c) = \lfloor c\,G / C \rfloor` (channels split into
``G`` contiguous groups) and :math:`\mathrm{bilin}` the bilinear interpolation with zeros outside the
image. Offsets are laid out as ``(B, 2 G K, H_out, W_out)`` with channel ``g 2K + 2k`` the **row (y)**
and ``g 2K + 2k + 1`` the **column (x)** displacement of kernel point ``k`` in group ``g``; the mask as
``(B, G K, H_out, W_out)`` with channel ``g K + k``. Without a mask it is DCNv1 (:math:`m = 1`).
Convolution groups (``weight.shape[1] = C / groups``) are supported by both backends.

The reference backend samples every kernel point of every offset group with one
``F.grid_sample(mode="bilinear", padding_mode="zeros", align_corners=False)`` call, whose
unnormalisation :math:`((g + 1) W - 1) / 2` maps the normalised coordinate
:math:`g = (2x + 1)/W - 1` back to pixel :math:`x` for any ``W >= 1``. Bilinear weights with zero
padding agree with torchvision's ``bilinear_interpolate`` (which returns 0 when
:math:`y \le -1`, :math:`y \ge H`, :math:`x \le -1` or :math:`x \ge W`: there all four corners lie
outside anyway), so values and gradients agree up to rounding, except on the measure-zero set where a
sampling coordinate is an exact integer and the two kernels pick different one-sided derivatives for
the offset gradient.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from neurips26.common.checks import check_choice, check_int, check_tensor

__all__ = ["BACKENDS", "deform_conv2d", "deform_conv2d_reference", "torchvision_available"]

BACKENDS = ("auto", "torchvision", "reference")


def torchvision_available() -> bool:
    """Whether ``torchvision.ops.deform_conv2d`` imports (the CUDA wheel runs on CPU too)."""
    try:
        from torchvision.ops import deform_conv2d as _  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "not available"
        return False
    return True


def _pair(name: str, value, low: int) -> tuple[int, int]:
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")
        return check_int(name, value[0], low=low), check_int(name, value[1], low=low)
    v = check_int(name, value, low=low)
    return v, v


def _check(
    input: Tensor, offset: Tensor, weight: Tensor, bias, stride, padding, dilation, mask
) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], int, int, int, int]:
    """Validate arguments; return stride, padding, dilation, offset groups, conv groups, H_out, W_out."""
    for name, t in (("input", input), ("offset", offset), ("weight", weight)):
        check_tensor(name, t)  # a floating, finite tensor holding data (not meta)
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D, got shape {tuple(t.shape)}")
        if t.numel() == 0:
            raise ValueError(f"{name} must not be empty, got shape {tuple(t.shape)}")
    for name, t in (("mask", mask), ("bias", bias)):
        if isinstance(t, Tensor):
            check_tensor(name, t)
    devices = {t.device for t in (input, offset, weight, mask, bias) if isinstance(t, Tensor)}
    if len(devices) > 1:
        raise ValueError(
            f"input, offset, weight, mask and bias must share one device, got {sorted(map(str, devices))}"
        )
    sh, sw = _pair("stride", stride, 1)
    ph, pw = _pair("padding", padding, 0)
    dh, dw = _pair("dilation", dilation, 1)
    b, c, h, w = input.shape
    o, cg, kh, kw = weight.shape
    if cg < 1 or c % cg:
        raise ValueError(f"weight.shape[1]={cg} must divide the input channels {c} (conv groups)")
    groups = c // cg
    if o % groups:
        raise ValueError(f"weight.shape[0]={o} must be divisible by the conv groups {groups}")
    h_out = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    w_out = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    if h_out < 1 or w_out < 1:
        raise ValueError(
            f"input of size {h}x{w} is too small for the kernel/padding (output {h_out}x{w_out})"
        )
    k = kh * kw
    if offset.shape[0] != b or offset.shape[1] % (2 * k) or offset.shape[1] == 0:
        raise ValueError(
            f"offset must have shape (B={b}, 2*G*{k}, {h_out}, {w_out}) for some offset_groups G >= 1, "
            f"got {tuple(offset.shape)}"
        )
    g = offset.shape[1] // (2 * k)
    if tuple(offset.shape[2:]) != (h_out, w_out):
        raise ValueError(f"offset must have spatial size ({h_out}, {w_out}), got {tuple(offset.shape[2:])}")
    if c % g:
        raise ValueError(f"offset_groups={g} (from offset.shape[1]) must divide the input channels {c}")
    if mask is not None:
        if not isinstance(mask, Tensor):
            raise TypeError(f"mask must be a torch.Tensor or None, got {type(mask).__name__}")
        if tuple(mask.shape) != (b, g * k, h_out, w_out):
            raise ValueError(f"mask must have shape {(b, g * k, h_out, w_out)}, got {tuple(mask.shape)}")
    if bias is not None:
        if not isinstance(bias, Tensor):
            raise TypeError(f"bias must be a torch.Tensor or None, got {type(bias).__name__}")
        if tuple(bias.shape) != (o,):
            raise ValueError(f"bias must have shape ({o},), got {tuple(bias.shape)}")
    dtypes = {t.dtype for t in (input, offset, weight, mask, bias) if t is not None}
    if len(dtypes) > 1:
        raise TypeError(
            f"input, offset, weight, mask and bias must share one dtype, got {sorted(map(str, dtypes))}"
        )
    return (sh, sw), (ph, pw), (dh, dw), g, groups, h_out, w_out


def deform_conv2d_reference(
    input: Tensor,
    offset: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    mask: Tensor | None = None,
) -> Tensor:
    """Deformable convolution in pure PyTorch (one bilinear ``grid_sample`` + one ``einsum``).

    Same signature, layouts and result as ``torchvision.ops.deform_conv2d`` (module docstring); it runs
    wherever PyTorch runs, is differentiable with respect to every tensor argument, and on CPU it is
    several times faster than torchvision's kernel for the small grids of the aNCA claim check.

    Parameters
    ----------
    input : Tensor
        ``(B, C, H, W)``.
    offset : Tensor
        ``(B, 2 G K, H_out, W_out)``, ``K = kh * kw``; (y, x) pairs per kernel point and offset group.
    weight : Tensor
        ``(O, C / groups, kh, kw)``.
    bias : Tensor, optional
        ``(O,)``.
    stride, padding, dilation : int or (int, int)
        As in ``torch.nn.functional.conv2d``; padding is zero padding.
    mask : Tensor, optional
        ``(B, G K, H_out, W_out)`` modulation (DCNv2); ``None`` is DCNv1.

    Returns
    -------
    Tensor
        ``(B, O, H_out, W_out)``.
    """
    (sh, sw), (ph, pw), (dh, dw), g, groups, h_out, w_out = _check(
        input, offset, weight, bias, stride, padding, dilation, mask
    )
    b, c, h, w = input.shape
    o, cg, kh, kw = weight.shape
    k = kh * kw
    dt, dev = input.dtype, input.device
    ys = torch.arange(h_out, dtype=dt, device=dev) * sh - ph
    xs = torch.arange(w_out, dtype=dt, device=dev) * sw - pw
    ki = (torch.arange(kh, dtype=dt, device=dev) * dh).repeat_interleave(kw)  # row of kernel point k
    kj = (torch.arange(kw, dtype=dt, device=dev) * dw).repeat(kh)  # column of kernel point k
    off = offset.view(b, g, k, 2, h_out, w_out)
    py = ys.view(1, 1, 1, h_out, 1) + ki.view(1, 1, k, 1, 1) + off[:, :, :, 0]  # (B, G, K, H_out, W_out)
    px = xs.view(1, 1, 1, 1, w_out) + kj.view(1, 1, k, 1, 1) + off[:, :, :, 1]
    grid = torch.stack(((2 * px + 1) / w - 1, (2 * py + 1) / h - 1), dim=-1).view(b * g, k * h_out, w_out, 2)
    cols = F.grid_sample(
        input.reshape(b * g, c // g, h, w), grid, mode="bilinear", padding_mode="zeros", align_corners=False
    ).view(b, g, c // g, k, h_out, w_out)
    if mask is not None:
        cols = cols * mask.view(b, g, 1, k, h_out, w_out)
    cols = cols.reshape(b, groups, cg * k, h_out * w_out)
    out = torch.einsum("gok,bgkl->bgol", weight.reshape(groups, o // groups, cg * k), cols)
    out = out.reshape(b, o, h_out, w_out)
    if bias is not None:
        out = out + bias.view(1, o, 1, 1)
    return out


def deform_conv2d(
    input: Tensor,
    offset: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    mask: Tensor | None = None,
    backend: str = "auto",
) -> Tensor:
    """Deformable convolution through ``backend`` (``"torchvision"``, ``"reference"`` or ``"auto"``).

    ``"auto"`` uses ``torchvision.ops.deform_conv2d`` on CUDA tensors when torchvision imports, and the
    reference (:func:`deform_conv2d_reference`) otherwise: on CPU the reference is faster (measured
    ~6x for the forward + backward of the claim's 9x9 to 21x21 grids, torch 2.14.1 / torchvision
    0.29.1). Arguments, layouts and shapes as in :func:`deform_conv2d_reference`; both backends are
    validated identically here. ``"torchvision"`` without torchvision raises ``ImportError``.
    """
    check_choice("backend", backend, BACKENDS)
    stride_, padding_, dilation_, *_ = _check(input, offset, weight, bias, stride, padding, dilation, mask)
    if backend == "auto":
        backend = "torchvision" if input.is_cuda and torchvision_available() else "reference"
    if backend == "reference":
        return deform_conv2d_reference(input, offset, weight, bias, stride_, padding_, dilation_, mask)
    try:
        from torchvision.ops import deform_conv2d as tv_deform_conv2d
    except Exception as err:  # noqa: BLE001
        raise ImportError(
            "backend='torchvision' needs torchvision (`pip install torchvision`, matching your torch); "
            "backend='reference' needs nothing beyond torch"
        ) from err
    return tv_deform_conv2d(
        input, offset, weight, bias, stride=stride_, padding=padding_, dilation=dilation_, mask=mask
    )

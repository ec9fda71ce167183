r"""aNCA modules: deformable perception, the regular-convolution baselines and the NCA rollout.

See :mod:`neurips26.nn.anca` for the paper, the update rule and the shapes.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint as _checkpoint

from neurips26.common.checks import check_choice, check_float, check_int, check_probability, check_tensor
from neurips26.nn.anca.deform import BACKENDS, deform_conv2d

__all__ = [
    "PERCEPTIONS",
    "AdaptiveNCA",
    "DeformablePerception",
    "NCAPerception",
    "matched_update_hidden",
    "offset_magnitude",
]

PERCEPTIONS = ("deformable", "conv", "sobel", "conv5", "dilated")
MODULATIONS = ("sigmoid", "softmax")


def _check_kernel(kernel_size: int) -> int:
    check_int("kernel_size", kernel_size, low=1)
    if kernel_size % 2 == 0:
        raise ValueError(f"kernel_size must be odd (a cell-centred neighbourhood), got {kernel_size}")
    return kernel_size


class DeformablePerception(nn.Module):
    r"""Deformable-convolution perception: every cell predicts where its ``k x k`` sampling points go.

    An offset network (a 3x3 convolution of the state, zero-initialised) predicts per cell and per
    offset group one (y, x) displacement per kernel point and, when ``modulated``, one modulation
    weight per kernel point; the perception is the deformable convolution of the state at the
    displaced points (DCNv2; DCNv1 without modulation):

    .. math::

        (O, \tilde M) = \mathrm{Conv}_{3\times3}(S), \quad
        O \leftarrow c \tanh(O / c) \text{ if } c = \text{max\_offset}, \quad
        m = 2\,\sigma(\tilde M) \;\text{or}\; m = K\,\mathrm{softmax}_k(\tilde M), \quad
        P = \mathrm{DeformConv}_W(S; O, m).

    Both modulations equal 1 at the zero initialisation, so the untrained module is exactly the
    regular ``k x k`` convolution with zero padding ``k // 2`` (``"softmax"`` makes the kernel points
    compete for a fixed total weight: an attention over sampling points).

    Parameters
    ----------
    in_channels, out_channels : int
        State channels ``C`` and perception channels ``C_p``.
    kernel_size : int, default 3
        Odd ``k``; ``K = k * k`` sampling points per cell and offset group.
    offset_groups : int, default 1
        ``G``, must divide ``in_channels``; each group of ``C / G`` contiguous channels has its own offsets.
    modulated : bool, default True
        DCNv2 modulation (``False``: DCNv1, no mask).
    max_offset : float, optional
        Soft bound on every offset component (``c tanh(O / c)``); ``None`` leaves offsets unbounded.
    modulation : {"sigmoid", "softmax"}, default "sigmoid"
        ``2 sigmoid`` per point, or ``K softmax`` over the ``K`` points of a group.
    bias : bool, default True
        Learnable bias of the perception.
    backend : {"auto", "torchvision", "reference"}, default "auto"
        See :func:`neurips26.nn.anca.deform_conv2d`.

    Shapes
    ------
    ``forward``: state ``(B, C, H, W)`` -> perception ``(B, C_p, H, W)``, offsets ``(B, 2 G K, H, W)``
    [, mask ``(B, G K, H, W)`` with ``return_mask=True``; ``None`` when not modulated].
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 3,
        offset_groups: int = 1,
        modulated: bool = True,
        max_offset: float | None = None,
        modulation: str = "sigmoid",
        bias: bool = True,
        backend: str = "auto",
    ) -> None:
        super().__init__()
        self.in_channels = check_int("in_channels", in_channels, low=1)
        self.out_channels = check_int("out_channels", out_channels, low=1)
        self.kernel_size = _check_kernel(kernel_size)
        self.offset_groups = check_int("offset_groups", offset_groups, low=1)
        if in_channels % offset_groups:
            raise ValueError(f"offset_groups={offset_groups} must divide in_channels={in_channels}")
        if max_offset is not None:
            max_offset = check_float("max_offset", max_offset, 0.0, low_open=True)
        self.max_offset = max_offset
        self.modulated = bool(modulated)
        self.modulation = check_choice("modulation", modulation, MODULATIONS)
        self.backend = check_choice("backend", backend, BACKENDS)
        k = self.kernel_size**2
        self.num_points = k
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, kernel_size, kernel_size))
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))  # nn.Conv2d's default
        if self.bias is not None:
            bound = 1.0 / math.sqrt(in_channels * k)
            nn.init.uniform_(self.bias, -bound, bound)
        n_out = (3 if self.modulated else 2) * offset_groups * k
        self.offset_net = nn.Conv2d(in_channels, n_out, 3, padding=1)
        nn.init.zeros_(self.offset_net.weight)
        nn.init.zeros_(self.offset_net.bias)

    def offsets_and_mask(self, state: Tensor) -> tuple[Tensor, Tensor | None]:
        """Offsets ``(B, 2 G K, H, W)`` and modulation mask ``(B, G K, H, W)`` (``None`` if unmodulated)."""
        raw = self.offset_net(state)
        n_off = 2 * self.offset_groups * self.num_points
        offsets = raw[:, :n_off]
        if self.max_offset is not None:
            offsets = self.max_offset * torch.tanh(offsets / self.max_offset)
        if not self.modulated:
            return offsets, None
        logits = raw[:, n_off:]
        if self.modulation == "sigmoid":
            return offsets, 2.0 * torch.sigmoid(logits)
        b, _, h, w = logits.shape
        g, k = self.offset_groups, self.num_points
        mask = k * torch.softmax(logits.view(b, g, k, h, w), dim=2)
        return offsets, mask.view(b, g * k, h, w)

    def forward(self, state: Tensor, return_mask: bool = False):
        check_tensor("state", state, like=self, like_name="perception")
        if state.dim() != 4 or state.shape[1] != self.in_channels:
            raise ValueError(f"state must have shape (B, {self.in_channels}, H, W), got {tuple(state.shape)}")
        if state.numel() == 0:
            raise ValueError(f"state must not be empty, got shape {tuple(state.shape)}")
        out, offsets, mask = self._compute(state)
        return (out, offsets, mask) if return_mask else (out, offsets)

    def _compute(self, state: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        """The forward without argument checks (the automaton checks its inputs once per rollout)."""
        offsets, mask = self.offsets_and_mask(state)
        p = self.kernel_size // 2
        out = deform_conv2d(
            state, offsets, self.weight, self.bias, padding=p, mask=mask, backend=self.backend
        )
        return out, offsets, mask


class NCAPerception(nn.Module):
    r"""Regular NCA perception: a learned ``k x k`` convolution, or Growing NCA's fixed Sobel filters.

    ``kind="conv"``: :math:`P = W * S` (learned, ``dilation`` optional; ``k = 5`` or ``dilation = 2``
    give the receptive-field-matched baselines). ``kind="sobel"``: :math:`P = [S, K_x * S, K_y * S]`
    per channel with the 3x3 Sobel kernels (no parameters, ``out_channels = 3 C``), as in Growing NCA
    (Mordvintsev et al., Distill 2020).

    Parameters
    ----------
    in_channels, out_channels : int
        ``C`` and ``C_p`` (``kind="sobel"`` requires ``C_p = 3 C``).
    kind : {"conv", "sobel"}, default "conv"
    kernel_size : int, default 3
        Odd; ``"sobel"`` needs 3.
    dilation : int, default 1
    padding_mode : {"zeros", "circular"}, default "zeros"
        ``"circular"`` makes the perception exactly translation-equivariant on a torus.
    bias : bool, default True

    Shapes
    ------
    ``forward``: state ``(B, C, H, W)`` -> ``(B, C_p, H, W)``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kind: str = "conv",
        kernel_size: int = 3,
        dilation: int = 1,
        padding_mode: str = "zeros",
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.in_channels = check_int("in_channels", in_channels, low=1)
        self.out_channels = check_int("out_channels", out_channels, low=1)
        self.kind = check_choice("kind", kind, ("conv", "sobel"))
        self.kernel_size = _check_kernel(kernel_size)
        self.dilation = check_int("dilation", dilation, low=1)
        self.padding_mode = check_choice("padding_mode", padding_mode, ("zeros", "circular"))
        self.pad = self.dilation * (self.kernel_size // 2)
        if self.kind == "sobel":
            if kernel_size != 3 or out_channels != 3 * in_channels:
                raise ValueError(
                    f"kind='sobel' needs kernel_size=3 and out_channels=3*in_channels={3 * in_channels}, "
                    f"got kernel_size={kernel_size}, out_channels={out_channels}"
                )
            ident = torch.zeros(3, 3)
            ident[1, 1] = 1.0
            sx = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]]) / 8.0
            kernels = torch.stack([ident, sx, sx.t()])  # (3, 3, 3)
            self.register_buffer("filters", kernels.repeat(in_channels, 1, 1).unsqueeze(1))  # (3C, 1, 3, 3)
            self.conv = None
        else:
            self.conv = nn.Conv2d(
                in_channels, out_channels, kernel_size, padding=0, dilation=self.dilation, bias=bias
            )

    def forward(self, state: Tensor) -> Tensor:
        check_tensor("state", state, like=self, like_name="perception")
        if state.dim() != 4 or state.shape[1] != self.in_channels:
            shape = tuple(state.shape) if isinstance(state, Tensor) else type(state).__name__
            raise ValueError(f"state must have shape (B, {self.in_channels}, H, W), got {shape}")
        mode = "constant" if self.padding_mode == "zeros" else "circular"
        x = F.pad(state, (self.pad,) * 4, mode=mode)
        if self.conv is None:
            return F.conv2d(x, self.filters.to(state.dtype), groups=self.in_channels)
        return self.conv(x)


class AdaptiveNCA(nn.Module):
    r"""Adaptive neural cellular automaton (aNCA): one shared update rule iterated on every cell of a grid.

    The state :math:`S \in \mathbb{R}^{B \times C \times H \times W}` has ``C_in`` input channels (the
    puzzle encoding :math:`X`, re-imposed every step), ``C_h`` hidden and ``C_out`` output channels
    (per-cell logits). One step:

    .. math::

        P_t &= \mathrm{Perceive}(S_t) \quad (\text{deformable: } P_t = \mathrm{DeformConv}(S_t; O_t, m_t)),\\
        \Delta S_t &= W_2\, \mathrm{ReLU}(W_1 [P_t, S_t] + b_1) + b_2 \quad (1 \times 1 \text{ convolutions},
                      W_2, b_2 = 0 \text{ at init}),\\
        S_{t+1} &= \mathrm{clip}_{[-c, c]}\big(S_t + f_t \odot \Delta S_t\big), \qquad
        S_{t+1}[:C_{in}] = X,

    with :math:`f_t \sim \mathrm{Bernoulli}(p_{fire})` per cell in training (all ones in evaluation
    unless ``stochastic_eval``). :math:`S_0 = [X, 0, 0]`. The logits are :math:`S_T[C_{in} + C_h:]`.
    ``perception="deformable"`` is aNCA; ``"conv"`` (learned 3x3), ``"sobel"`` (Growing NCA),
    ``"conv5"`` (learned 5x5) and ``"dilated"`` (3x3, dilation 2) are the regular NCA baselines.

    Parameters
    ----------
    input_channels, hidden_channels, output_channels : int
        ``C_in >= 1``, ``C_h >= 0``, ``C_out >= 1``.
    update_hidden : int, default 128
        Width of the 1x1 update MLP.
    perception : {"deformable", "conv", "sobel", "conv5", "dilated"}, default "deformable"
    fire_rate : float, default 0.5
        Probability that a cell applies its update in a training step.
    clamp : float or None, default 10.0
        Bound ``c`` of the state (``None``: no clamp).
    perception_channels : int, optional
        ``C_p``; default ``3 C`` (``"sobel"`` requires ``3 C``).
    stochastic_eval : bool, default False
        Keep asynchronous firing in evaluation mode.
    padding_mode : {"zeros", "circular"}, default "zeros"
        Regular perceptions only (the deformable one samples with zeros outside the grid).
    **perception_kwargs
        Passed to :class:`DeformablePerception` (``kernel_size``, ``offset_groups``, ``modulated``,
        ``max_offset``, ``modulation``, ``backend``) or :class:`NCAPerception`.

    Shapes
    ------
    ``forward(inputs (B, C_in, H, W), steps)`` -> logits ``(B, C_out, H, W)``; with
    ``return_trajectory=True`` also the ``steps + 1`` states ``(B, C, H, W)`` (``S_0 .. S_T``) and the
    ``steps`` offsets ``(B, 2 G K, H, W)`` (empty for regular perceptions).
    """

    def __init__(
        self,
        input_channels: int,
        hidden_channels: int,
        output_channels: int,
        update_hidden: int = 128,
        perception: str = "deformable",
        fire_rate: float = 0.5,
        clamp: float | None = 10.0,
        perception_channels: int | None = None,
        stochastic_eval: bool = False,
        padding_mode: str = "zeros",
        **perception_kwargs,
    ) -> None:
        super().__init__()
        self.input_channels = check_int("input_channels", input_channels, low=1)
        self.hidden_channels = check_int("hidden_channels", hidden_channels, low=0)
        self.output_channels = check_int("output_channels", output_channels, low=1)
        self.update_hidden = check_int("update_hidden", update_hidden, low=1)
        self.perception_kind = check_choice("perception", perception, PERCEPTIONS)
        self.fire_rate = check_probability("fire_rate", fire_rate)
        if clamp is not None:
            clamp = check_float("clamp", clamp, 0.0, low_open=True)
        self.clamp = clamp
        self.stochastic_eval = bool(stochastic_eval)
        c = self.channels = input_channels + hidden_channels + output_channels
        if perception_channels is None:
            perception_channels = 3 * c
        self.perception_channels = check_int("perception_channels", perception_channels, low=1)
        if perception == "deformable":
            if padding_mode != "zeros":
                raise ValueError("padding_mode must be 'zeros' for perception='deformable'")
            self.perception = DeformablePerception(c, perception_channels, **perception_kwargs)
        else:
            kw = dict(perception_kwargs)
            if perception == "conv5":
                kw.setdefault("kernel_size", 5)
            elif perception == "dilated":
                kw.setdefault("dilation", 2)
            kind = "sobel" if perception == "sobel" else "conv"
            self.perception = NCAPerception(
                c, perception_channels, kind=kind, padding_mode=padding_mode, **kw
            )
        self.update_in = nn.Conv2d(perception_channels + c, update_hidden, 1)
        self.update_out = nn.Conv2d(update_hidden, c, 1)
        nn.init.zeros_(self.update_out.weight)
        nn.init.zeros_(self.update_out.bias)

    @property
    def output_slice(self) -> slice:
        """Channels of the state that hold the logits."""
        return slice(self.input_channels + self.hidden_channels, self.channels)

    def initial_state(self, inputs: Tensor) -> Tensor:
        """``S_0 = [inputs, 0, 0]``, shape ``(B, C, H, W)``."""
        b, _, h, w = inputs.shape
        return torch.cat([inputs, inputs.new_zeros(b, self.channels - self.input_channels, h, w)], dim=1)

    def _perceive(self, state: Tensor) -> tuple[Tensor, Tensor | None]:
        if isinstance(self.perception, DeformablePerception):
            out, offsets, _ = self.perception._compute(state)
            return out, offsets
        return self.perception(state), None

    def _step(self, state: Tensor, inputs: Tensor, fire: Tensor | None) -> tuple[Tensor, Tensor]:
        p, offsets = self._perceive(state)
        delta = self.update_out(torch.relu(self.update_in(torch.cat([p, state], dim=1))))
        if fire is not None:
            delta = delta * fire
        new = state + delta
        if self.clamp is not None:
            new = new.clamp(-self.clamp, self.clamp)
        new = torch.cat([inputs, new[:, self.input_channels :]], dim=1)
        return new, (offsets if offsets is not None else new.new_zeros(0))

    def forward(
        self,
        inputs: Tensor,
        steps: int,
        return_trajectory: bool = False,
        checkpoint: bool = False,
        generator: torch.Generator | None = None,
    ):
        """Roll the automaton out for ``steps`` steps (see the class docstring for shapes).

        ``checkpoint=True`` recomputes each step in the backward pass (``torch.utils.checkpoint``):
        same values and gradients, memory independent of ``steps``. ``generator`` draws the firing masks.
        """
        check_tensor("inputs", inputs, like=self, like_name="automaton")
        if inputs.dim() != 4 or inputs.shape[1] != self.input_channels:
            raise ValueError(
                f"inputs must have shape (B, input_channels={self.input_channels}, H, W), got {tuple(inputs.shape)}"
            )
        if inputs.numel() == 0:
            raise ValueError(f"inputs must not be empty, got shape {tuple(inputs.shape)}")
        check_int("steps", steps, low=1)
        state = self.initial_state(inputs)
        states, offsets = [state], []
        stochastic = self.fire_rate < 1.0 and (self.training or self.stochastic_eval)
        b, _, h, w = inputs.shape
        for _ in range(steps):
            fire = None
            if stochastic:
                u = torch.rand((b, 1, h, w), generator=generator, device=inputs.device, dtype=inputs.dtype)
                fire = (u < self.fire_rate).to(inputs.dtype)
            if checkpoint and torch.is_grad_enabled():
                state, off = _checkpoint(self._step, state, inputs, fire, use_reentrant=False)
            else:
                state, off = self._step(state, inputs, fire)
            if return_trajectory:
                states.append(state)
                if off.numel():
                    offsets.append(off)
        logits = state[:, self.output_slice]
        return (logits, states, offsets) if return_trajectory else logits


def offset_magnitude(offsets: Tensor) -> Tensor:
    """Mean Euclidean length (in cells) of the (y, x) offsets ``(B, 2 G K, H, W)``, a 0-d tensor."""
    if not isinstance(offsets, Tensor) or offsets.dim() != 4 or offsets.shape[1] % 2:
        raise ValueError("offsets must have shape (B, 2 G K, H, W)")
    b, n, h, w = offsets.shape
    pairs = offsets.view(b, n // 2, 2, h, w)
    return pairs.pow(2).sum(2).sqrt().mean()


def matched_update_hidden(target_params: int, **nca_kwargs) -> int:
    """``update_hidden`` whose :class:`AdaptiveNCA` (other arguments ``nca_kwargs``) has the parameter
    count closest to ``target_params``: the matched-budget baselines of the claim check."""
    check_int("target_params", target_params, low=1)
    nca_kwargs.pop("update_hidden", None)

    def count(width: int) -> int:
        with torch.device("meta"):
            return sum(p.numel() for p in AdaptiveNCA(update_hidden=width, **nca_kwargs).parameters())

    base, slope = count(1), count(2) - count(1)  # the count is affine in the width
    width = max(1, round((target_params - base) / slope) + 1)
    return min(
        (w for w in (width - 1, width, width + 1) if w >= 1), key=lambda w: abs(count(w) - target_params)
    )

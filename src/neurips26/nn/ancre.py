r"""ANCRe: residual connections whose shortcut sources are learned softmax mixtures of earlier layers.

Paper
-----
*ANCRe: Adaptive Neural Connection Reassignment* (arXiv 2602.09009; seed file
``004_01f475bc147a144d.txt``, paragraph 9, abstract beginning "Scaling network depth has been a").
The authors prove on a deep linear example that where shortcuts come from can change convergence
speed exponentially, and learn the shortcut sources with a temperature softmax over earlier states.

Math
----
For ``K`` shape-preserving blocks :math:`f_1, \dots, f_K` and :math:`h_0` = the stack's input,

.. math::

    h_k = f_k(h_{k-1}) + \sum_{j \in S_k} w_{k,j}\, h_j, \qquad
    w_{k,\cdot} = \mathrm{softmax}(c_k / \tau) \text{ over } S_k,

with sources :math:`S_1 = \{0\}` (block 1 reads the stem) and :math:`S_k = \{1, \dots, k-1\}` for
:math:`k \ge 2` (``include_stem=True`` adds 0 to every :math:`S_k`; ``max_source_distance=m`` keeps
only :math:`j \ge k-m`). The standard residual network is the one-hot choice
:math:`w_{k,k-1} = 1`. Learnable scalars: :math:`K(K-1)/2` (default). ``init="residual"`` puts
``init_logit`` on the predecessor and 0 elsewhere; ``init="uniform"`` starts from equal weights.
``mix_input=True`` also feeds the mixture to the block: :math:`m_k = \sum_j w_{k,j} h_j`,
:math:`h_k = f_k(m_k) + m_k`.

Shapes
------
Any layout ``(B, *)`` as long as every block maps a tensor to the same shape.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from neurips26.common.checks import check_choice, check_float, check_int, check_tensor

__all__ = [
    "ANCReConnector",
    "ANCReSequential",
    "ancre_param_groups",
    "parameter_overhead",
    "uniform_dense_connector",
]


class _BufferedMix(torch.autograd.Function):
    r""":math:`\sum_s w_s\, b_s` over a slice ``b (S, *)`` of the state buffer, with gradients to ``sources``.

    ``sources`` are the autograd-tracked states whose detached copies fill ``b``; the forward is the same
    ``tensordot`` as over ``torch.stack(sources)`` and the backward the same two ``mm`` products as
    ``tensordot``'s, so values and gradients equal the stacked computation within float32 rounding
    (``K (K + 1 + 4d) eps32`` of the output's scale over K blocks of width d, tested; bit for bit on the
    developers' Xeon, but BLAS kernels may depend on layout and alignment, so not promised on every
    CPU). ``b``'s rows are never rewritten once read (the buffer is append-only), so it is kept without
    a version check.
    """

    @staticmethod
    def forward(ctx, w: Tensor, b: Tensor, *sources: Tensor) -> Tensor:
        ctx.b = b
        ctx.save_for_backward(w)
        return torch.tensordot(w, b, dims=1)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (w,) = ctx.saved_tensors
        b, s = ctx.b, ctx.b.shape[0]
        g = grad.reshape(1, -1)
        gw = g.mm(b.reshape(s, -1).t()).reshape(s) if ctx.needs_input_grad[0] else None
        gb = w.reshape(1, s).t().mm(g).reshape(b.shape)
        return (gw, None, *gb.unbind(0))


class ANCReConnector(nn.Module):
    r"""Learned shortcut sources for a stack of ``K`` same-shape blocks (optionally holding the blocks).

    Use it as a drop-in replacement of ``for f in blocks: h = h + f(h)``::

        stack = ANCReConnector(blocks)          # learned connectivity around existing blocks
        out = stack(h0)

    or give only ``num_blocks`` and call ``forward(h0, blocks)``.

    Parameters
    ----------
    num_blocks : int or sequence of nn.Module
        ``K >= 1``, or the blocks themselves (stored in ``self.blocks``).
    tau : float, default 1.0
        Softmax temperature, > 0.
    init : {"residual", "uniform"}
        ``"residual"``: logit ``init_logit`` on the predecessor, 0 elsewhere; ``"uniform"``: all 0.
    init_logit : float, default 3.0
        Predecessor logit for ``init="residual"``.
    include_stem : bool, default False
        Add :math:`h_0` as a source of every block (``K(K+1)/2 - 1`` scalars).
    learnable : bool, default True
        ``False`` stores the logits as a buffer (fixed connectivity).
    mix_input : bool, default False
        Feed the mixture (instead of :math:`h_{k-1}`) to the block as well.
    max_source_distance : int, optional
        Keep only sources ``j >= k - max_source_distance`` (pipeline-friendly window).

    Shapes
    ------
    ``forward``: ``h0 [B, *]`` -> ``h_K [B, *]`` (same shape; every block must preserve it).
    """

    def __init__(
        self,
        num_blocks: int | Sequence[nn.Module],
        tau: float = 1.0,
        init: str = "residual",
        init_logit: float = 3.0,
        include_stem: bool = False,
        learnable: bool = True,
        mix_input: bool = False,
        max_source_distance: int | None = None,
    ) -> None:
        super().__init__()
        blocks = None
        if not isinstance(num_blocks, int) or isinstance(num_blocks, bool):
            if isinstance(num_blocks, nn.Module) and not isinstance(
                num_blocks, (nn.ModuleList, nn.Sequential)
            ):
                raise TypeError("num_blocks must be an int or a sequence of blocks, got a single module")
            blocks = nn.ModuleList(list(num_blocks))
            num_blocks = len(blocks)
        self.num_blocks = check_int("num_blocks", num_blocks, low=1)
        self.tau = check_float("tau", tau, 0.0, low_open=True)
        self.init = check_choice("init", init, ("residual", "uniform"))
        self.init_logit = check_float("init_logit", init_logit)
        self.include_stem = bool(include_stem)
        self.mix_input = bool(mix_input)
        if max_source_distance is not None:
            check_int("max_source_distance", max_source_distance, low=1)
        self.max_source_distance = max_source_distance
        self.blocks = blocks
        rows, cols = [], []
        for k in range(2, self.num_blocks + 1):  # block index k (1-based); row k-1 of the matrix
            first = 0 if self.include_stem else 1
            for j in range(first, k):
                if max_source_distance is not None and j < k - max_source_distance:
                    continue
                rows.append(k - 1)
                cols.append(j)
        self.register_buffer("_rows", torch.tensor(rows, dtype=torch.long), persistent=False)
        self.register_buffer("_cols", torch.tensor(cols, dtype=torch.long), persistent=False)
        init_values = torch.zeros(len(rows))
        if self.init == "residual":
            for i, (r, c) in enumerate(zip(rows, cols)):
                if c == r:  # block k = r + 1, predecessor h_{k-1} = h_r
                    init_values[i] = self.init_logit
        if learnable:
            self.logits = nn.Parameter(init_values)
        else:
            self.register_buffer("logits", init_values)
        self._exact_residual = False

    @classmethod
    def fixed_residual(cls, num_blocks: int | Sequence[nn.Module]) -> ANCReConnector:
        """A non-learnable one-hot assignment that reproduces the standard residual network exactly."""
        conn = cls(num_blocks, learnable=False)
        conn._exact_residual = True
        return conn

    @property
    def num_learnable(self) -> int:
        """Number of learnable connection scalars (``K(K-1)/2`` by default)."""
        return self.logits.numel() if isinstance(self.logits, nn.Parameter) else 0

    def weights(self) -> Tensor:
        """Row-stochastic routing matrix, shape ``(K, K+1)``; row ``k-1`` = weights of block ``k`` over ``h_0..h_K``.

        Entries outside each block's sources (in particular ``j >= k``) are exactly zero.
        """
        k = self.num_blocks
        device = self.logits.device
        if self._exact_residual:
            w = torch.zeros(k, k + 1, device=device, dtype=self.logits.dtype)
            w[torch.arange(k), torch.arange(k)] = 1.0
            return w
        full = torch.full((k, k + 1), float("-inf"), device=device, dtype=self.logits.dtype)
        full[0, 0] = 0.0  # block 1 reads the stem
        full = full.index_put((self._rows, self._cols), self.logits / self.tau)
        return torch.softmax(full, dim=1)

    def shortcut(self, k: int, states: Sequence[Tensor], weights: Tensor | None = None) -> Tensor:
        r"""Shortcut of block ``k`` (1-based): :math:`\sum_j w_{k,j} h_j` over ``states = [h_0, ..., h_{k-1}]``."""
        check_int("k", k, 1, self.num_blocks)
        if len(states) < k:
            raise ValueError(f"block {k} needs states h_0..h_{k - 1}, got {len(states)}")
        if self._exact_residual:
            return states[k - 1]
        w = self.weights() if weights is None else weights
        first = 0 if (k == 1 or self.include_stem) else 1
        if k > 1 and self.max_source_distance is not None:
            first = max(first, k - self.max_source_distance)
        sources = states[first:k]
        if len(sources) == 1:
            return w[k - 1, first] * sources[0]
        # one fused weighted sum over the stacked sources: (S,) x (S, *) -> (*)
        return torch.tensordot(w[k - 1, first:k].to(sources[0].dtype), torch.stack(sources), dims=1)

    def forward(self, h0: Tensor, blocks: Sequence[nn.Module] | None = None) -> Tensor:
        """Run the stack: ``h0`` of shape ``(B, *)`` -> ``h_K`` of the same shape."""
        blocks = self.blocks if blocks is None else blocks
        if blocks is None:
            raise ValueError("no blocks: build the connector from blocks or pass blocks=...")
        check_tensor("h0", h0, like=self, like_name="connector")
        if len(blocks) != self.num_blocks:
            raise ValueError(
                f"connector has num_blocks={self.num_blocks} but {len(blocks)} blocks were given"
            )
        w = None if self._exact_residual else self.weights()
        states = [h0]
        # append-only copy of h_0..h_K: a block's sources are one contiguous slice, so the shortcut
        # needs no per-block torch.stack (the O(K^2) copies dominated the cost of deep stacks)
        buf = None if self._exact_residual else h0.new_empty((self.num_blocks + 1, *h0.shape))
        if buf is not None:
            buf[0] = h0.detach()
        for k, block in enumerate(blocks, start=1):
            if buf is None:
                short = self.shortcut(k, states, w)
            else:
                first = self._first_source(k)
                if k - first == 1:
                    short = w[k - 1, first] * states[first]
                else:
                    short = _BufferedMix.apply(
                        w[k - 1, first:k].to(states[first].dtype), buf[first:k], *states[first:k]
                    )
            inp = short if self.mix_input else states[-1]
            out = block(inp)
            if out.shape != inp.shape:
                raise ValueError(
                    f"block {k} (index {k - 1}) changed the tensor shape from {tuple(inp.shape)} to "
                    f"{tuple(out.shape)}; ANCRe needs shape-preserving blocks"
                )
            states.append(out + short)
            if buf is not None and k < self.num_blocks:
                buf[k] = states[-1].detach()
        return states[-1]

    def _first_source(self, k: int) -> int:
        first = 0 if (k == 1 or self.include_stem) else 1
        if k > 1 and self.max_source_distance is not None:
            first = max(first, k - self.max_source_distance)
        return first

    def topology(self) -> Tensor:
        """Detached :meth:`weights`, for plotting."""
        return self.weights().detach().clone()


class ANCReSequential(nn.Module):
    """Drop-in replacement for ``for f in blocks: h = h + f(h)`` (blocks + an :class:`ANCReConnector`).

    Parameters
    ----------
    blocks : sequence of nn.Module
        Shape-preserving blocks (transformer sub-layers keep their own pre-norm).
    connector : ANCReConnector, optional
        Defaults to ``ANCReConnector(len(blocks), **connector_kwargs)``.

    Shapes
    ------
    ``forward``: ``h0 [B, *]`` -> ``[B, *]`` (same shape).
    """

    def __init__(
        self, blocks: Sequence[nn.Module], connector: ANCReConnector | None = None, **connector_kwargs
    ):
        super().__init__()
        self.blocks = nn.ModuleList(list(blocks))
        if connector is None:
            connector = ANCReConnector(len(self.blocks), **connector_kwargs)
        elif connector_kwargs:
            raise ValueError("give either connector or connector keyword arguments, not both")
        if connector.num_blocks != len(self.blocks):
            raise ValueError(
                f"connector has num_blocks={connector.num_blocks} but {len(self.blocks)} blocks were given"
            )
        self.connector = connector

    def forward(self, h0: Tensor) -> Tensor:
        return self.connector(h0, self.blocks)

    def topology(self) -> Tensor:
        return self.connector.topology()


def uniform_dense_connector(num_blocks: int, **kwargs) -> ANCReConnector:
    """Baseline: every block's shortcut is the equal-weight average of its sources (fixed, DenseFormer-like)."""
    return ANCReConnector(num_blocks, init="uniform", learnable=False, **kwargs)


def ancre_param_groups(model: nn.Module, base_lr: float, weight_decay: float) -> list[dict]:
    """Two param groups: connection logits without weight decay, every other parameter with it."""
    check_float("base_lr", base_lr, 0.0, low_open=True)
    check_float("weight_decay", weight_decay, 0.0)
    logits = {id(m.logits) for m in model.modules() if isinstance(m, ANCReConnector) and m.num_learnable}
    conn = [p for p in model.parameters() if id(p) in logits]
    rest = [p for p in model.parameters() if id(p) not in logits]
    return [
        {"params": rest, "lr": base_lr, "weight_decay": weight_decay},
        {"params": conn, "lr": base_lr, "weight_decay": 0.0},
    ]


def parameter_overhead(model: nn.Module) -> dict[str, float]:
    """Connection scalars, other parameters and their ratio (the paper reports < 1%)."""
    logits = {id(m.logits) for m in model.modules() if isinstance(m, ANCReConnector) and m.num_learnable}
    extra = sum(p.numel() for p in model.parameters() if id(p) in logits)
    base = sum(p.numel() for p in model.parameters() if id(p) not in logits)
    return {"extra": float(extra), "base": float(base), "fraction": extra / max(base, 1)}

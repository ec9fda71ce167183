r"""AcceleGrad#: accelerated linear coupling of an adaptive anchor with a norm-aware geometry step.

Paper
-----
*AcceleGrad#* (NeurIPS 2026 submission; seed file ``004_01f475bc147a144d.txt``, paragraph 5, abstract
beginning "Modern neural-network optimizers occupy a three-way"). Only the abstract is public; the
template follows AcceleGrad (Levy, Yurtsever & Cevher, NeurIPS 2018) and the Scion / uSCG papers
(Pethick et al. 2025, arXiv 2502.07529) on linear-minimisation oracles (LMOs); the coupling below, the
step-size rules and the norm choices are therefore inferred from those templates.

Math
----
Per parameter tensor the optimizer keeps a *geometry* iterate :math:`y`, an *anchor* iterate
:math:`z` and AdaGrad accumulators; the parameter itself always holds the query point :math:`x`.
With :math:`\alpha_t = 1` for :math:`t \le 2`, :math:`\alpha_t = (t+1)/4` afterwards and
:math:`\tau_t = 1/\alpha_t` (``alpha_schedule="accelegrad"``; ``"constant"`` uses
:math:`\alpha_t \equiv` ``alpha``), step :math:`t = 0, 1, \dots` reads
:math:`g_t = \nabla f(x_{t+1})` and does

.. math::

    S_t &= S_{t-1} + \alpha_t^2 g_t^2 \quad(\text{diag, elementwise}) \quad\text{or}\quad
          S_{t-1} + \alpha_t^2 \|g_t\|_2^2 \quad(\text{scalar, summed over the group})\\
    \eta_t &= \mathrm{lr} / \sqrt{G^2 + S_t}, \qquad z_{t+1} = z_t - \alpha_t \eta_t \odot g_t \\
    \bar\eta_t &= \mathrm{lr}_y / \sqrt{G^2 + \textstyle\sum_{s \le t} \alpha_s^2 \|g_s\|_*^2} \\
    y_{t+1} &= \begin{cases}
        x_{t+1} - \eta_t \odot g_t & \text{euclidean (AcceleGrad)}\\
        x_{t+1} - \bar\eta_t\, g_t^\sharp & \text{sharp, } g^\sharp = -\|g\|_*\,\mathrm{lmo}(g)\\
        \nabla\psi^*(\nabla\psi(x_{t+1}) - \bar\eta_t g_t) & \text{mirror, } \psi = \tfrac12\|\cdot\|_p^2\\
        x_{t+1} + \bar\eta_t\, \rho\, \mathrm{lmo}(g_t) & \text{lmo (uSCG step)}\\
        x_{t+1} + \bar\eta_t \min(\|g_t\|_*, \rho)\, \mathrm{lmo}(g_t) & \text{clipped\_lmo}
    \end{cases}\\
    x_{t+2} &= \tau_{t+1} z_{t+1} + (1 - \tau_{t+1})\, y_{t+1}

with :math:`\mathrm{lmo}(g) = \arg\min_{\|v\| \le 1} \langle g, v\rangle` for the per-tensor norm,
so :math:`\langle g, \mathrm{lmo}(g)\rangle = -\|g\|_*`. Norms (``norm=``):

* ``"spectral"``: :math:`\|W\| = \sqrt{d_\mathrm{in}/d_\mathrm{out}}\,\|W\|_{op}` for
  ``W`` of shape ``(d_out, d_in, *)`` (trailing dims flattened into ``d_in``);
  :math:`\mathrm{lmo}(g) = -\sqrt{d_\mathrm{out}/d_\mathrm{in}}\, UV^\top` with the polar factor
  :math:`UV^\top` computed by Newton--Schulz (no SVD); dual norm
  :math:`\sqrt{d_\mathrm{out}/d_\mathrm{in}}\,\langle g, UV^\top\rangle` (scaled nuclear norm).
* ``"sign"``: :math:`\ell_\infty`; lmo :math:`-\mathrm{sign}(g)`, dual :math:`\ell_1`.
* ``"l2"``: lmo :math:`-g/\|g\|_2`, dual :math:`\|g\|_2`.
* ``"rownorm"`` / ``"colnorm"``: max over rows (columns) of the row (column) :math:`\ell_2` norm; lmo
  normalises every row (column); dual = sum of row (column) norms.
* ``"auto"`` (Scion-style): tensors with ``ndim >= 2`` use ``"spectral"``, others ``"l2"``. Put
  embeddings and output heads in their own param group with ``norm="sign"`` or ``"rownorm"``.

The deep-learning variant (defaults) uses the diagonal anchor and the clipped LMO and feeds the raw
stochastic gradient into the oracle (no momentum buffer: the anchor already averages gradients).
State: ``y``, ``z``, the anchor accumulator and a scalar dual-norm accumulator per tensor.

:class:`AcceleGrad` is the preset ``anchor="scalar", geometry="euclidean"`` (the 2018 algorithm,
``lr = 2D``). The spectral baseline is :class:`torch.optim.Muon` (present in torch >= 2.9), combined
with AdamW for non-matrix parameters by :func:`muon_with_adamw`.

Shapes
------
- :class:`AcceleGradSharp`, :class:`AcceleGrad`: any parameter shapes; the state ``y``, ``z`` and the
  diagonal accumulator have the parameter's shape, the scalar accumulators are ``[]``. ``"spectral"``,
  ``"rownorm"`` and ``"colnorm"`` need ``W [d_out, d_in, *]`` (trailing dimensions flattened into
  ``d_in``).
- :func:`polar_newton_schulz`: ``g [m, n]`` (2-D only) -> ``[m, n]``.
- :func:`lmo`, :func:`sharp`: ``g [*]`` -> ``[*]`` (same shape); :func:`dual_norm`: ``g [*]`` -> ``[]``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.common.precision import MuonAtPrecision, matmul_dtype

__all__ = [
    "ANCHORS",
    "GEOMETRIES",
    "NORMS",
    "AcceleGrad",
    "AcceleGradSharp",
    "dual_norm",
    "lmo",
    "muon_with_adamw",
    "polar_newton_schulz",
    "sharp",
]

ANCHORS = ("scalar", "diag")
GEOMETRIES = ("euclidean", "sharp", "mirror", "lmo", "clipped_lmo")
NORMS = ("auto", "spectral", "sign", "l2", "rownorm", "colnorm")
ALPHA_SCHEDULES = ("accelegrad", "constant")
EVAL_POINTS = ("y", "avg", "x")
_MUON_COEFFS = (3.4445, -4.7750, 2.0315)
_CUBIC_COEFFS = (1.5, -0.5, 0.0)


def polar_newton_schulz(
    g: Tensor, steps: int = 5, coefficients: str | tuple = "muon", dtype: torch.dtype | None = None
) -> Tensor:
    r"""Approximate polar factor :math:`UV^\top` of a matrix by Newton--Schulz iterations.

    The matrix is scaled by its Frobenius norm (so all singular values are in ``(0, 1]``), then
    ``X <- a X + b (X X^T) X + c (X X^T)^2 X`` is applied ``steps`` times on the short side.

    Parameters
    ----------
    g : Tensor
        Shape ``(m, n)``. Any floating dtype (see ``dtype``).
    steps : int, default 5
        Number of iterations (>= 1).
    coefficients : {"muon", "cubic"} or tuple of 3 floats
        ``"muon"``: the quintic (3.4445, -4.7750, 2.0315) of Muon/Scion, fast but only approximately
        orthogonal (singular values end in roughly [0.7, 1.2]); ``"cubic"``: the classical
        (1.5, -0.5, 0) iteration, which converges to the exact polar factor (needs more steps).
    dtype : torch.dtype, optional
        Working precision. Default: float64 inputs stay float64; everything else runs in
        :func:`neurips26.common.precision.matmul_dtype`: bfloat16 (as Muon does; ~3x faster) on CPUs
        with bf16 matrix units, float32 on CPUs without them (where bf16 matmul is ~17x slower).

    Returns
    -------
    Tensor
        Shape ``(m, n)``, same dtype as ``g``.
    """
    check_int("steps", steps, low=1)
    if g.ndim != 2:
        raise ValueError(f"polar_newton_schulz needs a 2-D tensor, got shape {tuple(g.shape)}")
    if isinstance(coefficients, str):
        coefficients = {"muon": _MUON_COEFFS, "cubic": _CUBIC_COEFFS}[
            check_choice("coefficients", coefficients, ("muon", "cubic"))
        ]
    a, b, c = (float(v) for v in coefficients)
    if dtype is None:
        dtype = torch.float64 if g.dtype == torch.float64 else matmul_dtype()
    x = g.to(dtype)
    transposed = x.shape[0] > x.shape[1]
    if transposed:
        x = x.T
    x = x / (x.norm() + 1e-7)
    for _ in range(steps):
        gram = x @ x.T
        poly = b * gram + c * (gram @ gram) if c != 0.0 else b * gram
        x = a * x + poly @ x
    if transposed:
        x = x.T
    return x.to(g.dtype)


def _as_matrix(g: Tensor) -> Tensor:
    if g.ndim < 2:
        raise ValueError(
            f"norm 'spectral'/'rownorm'/'colnorm' needs a tensor with ndim >= 2, got shape {tuple(g.shape)}; "
            "use norm='l2' or 'sign' (or 'auto') for vectors"
        )
    return g.reshape(g.shape[0], -1)


def _resolve_norm(norm: str, g: Tensor) -> str:
    check_choice("norm", norm, NORMS)
    if norm == "auto":
        return "spectral" if g.ndim >= 2 else "l2"
    return norm


def _lmo_and_dual(g: Tensor, norm: str, ns_steps: int = 5, coefficients="muon") -> tuple[Tensor, Tensor]:
    """Unit-ball LMO direction (radius 1) and dual norm of ``g`` in one pass."""
    norm = _resolve_norm(norm, g)
    tiny = torch.finfo(g.dtype).tiny
    if norm == "spectral":
        m = _as_matrix(g)
        d_out, d_in = m.shape
        scale = math.sqrt(d_out / d_in)
        polar = polar_newton_schulz(m, ns_steps, coefficients)
        dual = scale * (m * polar).sum()
        return (-scale * polar).reshape(g.shape), dual
    if norm == "sign":
        return -torch.sign(g), g.abs().sum()
    if norm == "l2":
        n = g.norm()
        return -g / n.clamp_min(tiny), n
    m = _as_matrix(g)
    dim = 1 if norm == "rownorm" else 0
    parts = m.norm(dim=dim, keepdim=True)
    return (-m / parts.clamp_min(tiny)).reshape(g.shape), parts.sum()


def lmo(g: Tensor, norm: str, radius: float = 1.0, ns_steps: int = 5, coefficients="muon") -> Tensor:
    r"""Linear-minimisation oracle :math:`\arg\min_{\|v\| \le \rho} \langle g, v\rangle`.

    Parameters
    ----------
    g : Tensor
        Gradient, any shape (``ndim >= 2`` for ``"spectral"``, ``"rownorm"``, ``"colnorm"``).
    norm : str
        One of :data:`NORMS`.
    radius : float, default 1.0
        Ball radius :math:`\rho \ge 0`.
    ns_steps : int, default 5
        Newton--Schulz iterations for the spectral norm.

    Returns
    -------
    Tensor
        Same shape as ``g``; :math:`\langle g, \mathrm{lmo}(g)\rangle = -\rho \|g\|_*`.
    """
    check_float("radius", radius, 0.0)
    direction, _ = _lmo_and_dual(g, norm, ns_steps, coefficients)
    return radius * direction


def dual_norm(g: Tensor, norm: str, ns_steps: int = 5, coefficients="muon") -> Tensor:
    r"""Dual norm :math:`\|g\|_* = -\langle g, \mathrm{lmo}(g)\rangle` (a 0-d tensor)."""
    return _lmo_and_dual(g, norm, ns_steps, coefficients)[1]


def sharp(g: Tensor, norm: str, ns_steps: int = 5, coefficients="muon") -> Tensor:
    r"""Sharp operator :math:`g^\sharp = \arg\max_v \langle g, v\rangle - \tfrac12\|v\|^2 = -\|g\|_*\,\mathrm{lmo}(g)`.

    Satisfies :math:`\langle g, g^\sharp\rangle = \|g\|_*^2` and :math:`\|g^\sharp\| = \|g\|_*`.
    """
    direction, dual = _lmo_and_dual(g, norm, ns_steps, coefficients)
    return -dual * direction


def _mirror_map(x: Tensor, p: float) -> Tensor:
    r""":math:`\nabla(\tfrac12\|x\|_p^2)_i = \|x\|_p^{2-p}\,\mathrm{sign}(x_i)|x_i|^{p-1}`."""
    n = x.abs().pow(p).sum().pow(1.0 / p)
    if n == 0:
        return torch.zeros_like(x)
    return n.pow(2.0 - p) * torch.sign(x) * x.abs().pow(p - 1.0)


class AcceleGradSharp(torch.optim.Optimizer):
    r"""AcceleGrad# optimizer: adaptive anchor + norm-aware geometry step + Nesterov-type coupling.

    See the module docstring for the update. Every hyperparameter below may also be set per param
    group (``torch.optim`` conventions).

    Parameters
    ----------
    params : iterable
        Parameters or param-group dicts.
    lr : float, default 1.0
        Anchor step size (AcceleGrad's :math:`2D`), > 0.
    lr_y : float, optional
        Geometry-branch step size; defaults to ``lr``.
    anchor : {"diag", "scalar"}
        Diagonal AdaGrad or scalar AdaGrad-norm (summed over the group) anchor.
    geometry : {"clipped_lmo", "euclidean", "sharp", "mirror", "lmo"}
        Geometry branch for the ``y`` iterate.
    norm : {"auto", "spectral", "sign", "l2", "rownorm", "colnorm"}
        Per-tensor norm of the non-Euclidean branches.
    radius : float, default 1.0
        LMO radius :math:`\rho \ge 0` (``lmo``) and clipping level (``clipped_lmo``).
    G : float, default 1e-8
        AdaGrad offset (acts as eps), > 0.
    alpha_schedule : {"accelegrad", "constant"}
        Coupling weights; ``"constant"`` uses ``alpha`` at every step.
    alpha : float, default 1.0
        Constant weight for ``alpha_schedule="constant"`` (>= 1; ``alpha = 1`` means x = z).
    ns_steps : int, default 5
        Newton--Schulz iterations for the spectral oracle.
    ns_coefficients : {"muon", "cubic"}
        Newton--Schulz polynomial (see :func:`polar_newton_schulz`).
    weight_decay : float, default 0.0
        Decoupled decay: :math:`z \leftarrow (1-\mathrm{lr}\,\lambda) z` and the branch starts from
        :math:`(1-\mathrm{lr}_y\lambda) x`.
    eval_point : {"y", "avg", "x"}
        Point loaded by :meth:`evaluation_params`; ``"avg"`` keeps the extra buffer
        :math:`\bar y \propto \sum_t \alpha_t y_{t+1}`.
    mirror_p : float, default 1.5
        :math:`p \in (1, 2]` of the mirror map.
    """

    def __init__(
        self,
        params,
        lr: float = 1.0,
        lr_y: float | None = None,
        anchor: str = "diag",
        geometry: str = "clipped_lmo",
        norm: str = "auto",
        radius: float = 1.0,
        G: float = 1e-8,
        alpha_schedule: str = "accelegrad",
        alpha: float = 1.0,
        ns_steps: int = 5,
        ns_coefficients: str = "muon",
        weight_decay: float = 0.0,
        eval_point: str = "y",
        mirror_p: float = 1.5,
    ) -> None:
        defaults = dict(
            lr=lr,
            lr_y=lr if lr_y is None else lr_y,
            anchor=anchor,
            geometry=geometry,
            norm=norm,
            radius=radius,
            G=G,
            alpha_schedule=alpha_schedule,
            alpha=alpha,
            ns_steps=ns_steps,
            ns_coefficients=ns_coefficients,
            weight_decay=weight_decay,
            eval_point=eval_point,
            mirror_p=mirror_p,
        )
        self._validate(defaults)
        super().__init__(params, defaults)
        for group in self.param_groups:
            self._validate(group)

    @staticmethod
    def _validate(group: dict) -> None:
        check_float("lr", group["lr"], 0.0, low_open=True)
        check_float("lr_y", group["lr_y"], 0.0, low_open=True)
        check_choice("anchor", group["anchor"], ANCHORS)
        check_choice("geometry", group["geometry"], GEOMETRIES)
        check_choice("norm", group["norm"], NORMS)
        check_float("radius", group["radius"], 0.0)
        check_float("G", group["G"], 0.0, low_open=True)
        check_choice("alpha_schedule", group["alpha_schedule"], ALPHA_SCHEDULES)
        check_float("alpha", group["alpha"], 1.0)
        check_int("ns_steps", group["ns_steps"], low=1)
        check_choice("ns_coefficients", group["ns_coefficients"], ("muon", "cubic"))
        check_float("weight_decay", group["weight_decay"], 0.0)
        check_choice("eval_point", group["eval_point"], EVAL_POINTS)
        check_float("mirror_p", group["mirror_p"], 1.0, 2.0, low_open=True)

    @staticmethod
    def alpha_at(t: int, schedule: str = "accelegrad", alpha: float = 1.0) -> float:
        r"""Coupling weight :math:`\alpha_t` (``t`` counts from 0); :math:`\tau_t = 1/\alpha_t`."""
        if schedule == "constant":
            return float(alpha)
        return 1.0 if t <= 2 else (t + 1) / 4.0

    def _init_state(self, p: Tensor, group: dict) -> dict:
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float64)
            state["y"] = p.detach().clone()
            state["z"] = p.detach().clone()
            if group["anchor"] == "diag":
                state["anchor_sum"] = torch.zeros_like(p)
            else:
                state["anchor_sum"] = torch.zeros((), dtype=p.dtype)
            # scalar accumulators use the parameter's dtype so that load_state_dict (which casts
            # floating state to the parameter's dtype) round-trips them exactly
            state["dual_sum"] = torch.zeros((), dtype=p.dtype)
            if group["eval_point"] == "avg":
                state["y_avg"] = p.detach().clone()
                state["avg_weight"] = torch.zeros((), dtype=p.dtype)
        return state

    @torch.no_grad()
    def step(self, closure=None):
        """Perform one AcceleGrad# step; ``closure`` re-evaluates the loss (optional)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            for p in params:
                if p.grad.is_sparse:
                    raise RuntimeError("AcceleGradSharp does not support sparse gradients")
            # one fused norm pass (~1% of a step): a finite norm proves every entry finite; only when it is
            # not (NaN/inf, or finite entries whose norm overflows) are the entries checked one by one
            grads = [p.grad for p in params]
            norms = torch._foreach_norm(grads)
            devices = {n.device for n in norms}
            finite_norms = all(
                bool(torch.isfinite(torch.stack([n.float() for n in norms if n.device == d])).all())
                for d in devices
            )
            if not finite_norms and not all(bool(torch.isfinite(g).all()) for g in grads):
                raise ValueError(
                    "a parameter's grad contains NaN or inf; skip this step (e.g. torch.amp.GradScaler does)"
                )
            states = [self._init_state(p, group) for p in params]
            t = int(states[0]["step"].item())
            a_t = self.alpha_at(t, group["alpha_schedule"], group["alpha"])
            a_next = self.alpha_at(t + 1, group["alpha_schedule"], group["alpha"])
            tau_next = 1.0 / a_next
            lr, lr_y, G = group["lr"], group["lr_y"], group["G"]
            wd, geometry = group["weight_decay"], group["geometry"]
            if group["anchor"] == "scalar":
                sq = sum(float(p.grad.double().pow(2).sum()) for p in params)
                total = float(states[0]["anchor_sum"]) + a_t * a_t * sq
                for st in states:
                    st["anchor_sum"].fill_(total)
                eta_scalar = lr / math.sqrt(G * G + total)
            for p, st in zip(params, states):
                g = p.grad
                if group["anchor"] == "diag":
                    st["anchor_sum"].addcmul_(g, g, value=a_t * a_t)
                    eta = lr / (st["anchor_sum"] + G * G).sqrt()
                else:
                    eta = eta_scalar
                x = p.detach()
                z = st["z"]
                if wd:
                    z.mul_(1.0 - lr * wd)
                z.sub_(a_t * eta * g)
                base = x * (1.0 - lr_y * wd) if wd else x
                if geometry == "euclidean":
                    y_new = base - eta * g
                else:
                    norm = _resolve_norm(group["norm"], g)
                    if geometry == "mirror":
                        dual = (
                            g.double()
                            .abs()
                            .pow(group["mirror_p"] / (group["mirror_p"] - 1))
                            .sum()
                            .pow((group["mirror_p"] - 1) / group["mirror_p"])
                        )
                    else:
                        direction, dual = _lmo_and_dual(g, norm, group["ns_steps"], group["ns_coefficients"])
                    st["dual_sum"].add_(a_t * a_t * float(dual) ** 2)
                    eta_bar = lr_y / math.sqrt(G * G + float(st["dual_sum"]))
                    if float(dual) == 0.0:
                        y_new = base.clone()
                    elif geometry == "sharp":
                        y_new = base + (eta_bar * float(dual)) * direction
                    elif geometry == "lmo":
                        y_new = base + (eta_bar * group["radius"]) * direction
                    elif geometry == "clipped_lmo":
                        y_new = base + (eta_bar * min(float(dual), group["radius"])) * direction
                    else:  # mirror: psi = 1/2 ||.||_p^2, psi* = 1/2 ||.||_q^2 with 1/p + 1/q = 1
                        pp = group["mirror_p"]
                        q = pp / (pp - 1.0)
                        y_new = _mirror_map(_mirror_map(base, pp) - eta_bar * g, q)
                st["y"].copy_(y_new)
                if "y_avg" in st:
                    st["avg_weight"].add_(a_t)
                    st["y_avg"].add_((st["y"] - st["y_avg"]) * (a_t / float(st["avg_weight"])))
                p.copy_(tau_next * z + (1.0 - tau_next) * st["y"])
                st["step"].add_(1)
        return loss

    def _point(self, p: Tensor, point: str) -> Tensor | None:
        st = self.state.get(p)
        if not st:
            return None
        if point == "y":
            return st["y"]
        if point == "avg":
            if "y_avg" not in st:
                raise ValueError("eval point 'avg' needs the optimizer built with eval_point='avg'")
            return st["y_avg"]
        return None

    @contextmanager
    def evaluation_params(self, point: str | None = None) -> Iterator[None]:
        """Temporarily load ``y`` (last geometry iterate), ``avg`` or ``x`` into the parameters.

        Parameters
        ----------
        point : {"y", "avg", "x"}, optional
            Defaults to each group's ``eval_point``. Parameters are restored on exit.
        """
        saved: list[tuple[Tensor, Tensor]] = []
        try:
            with torch.no_grad():
                for group in self.param_groups:
                    which = check_choice("point", point or group["eval_point"], EVAL_POINTS)
                    for p in group["params"]:
                        target = self._point(p, which)
                        if target is not None:
                            saved.append((p, p.detach().clone()))
                            p.copy_(target)
            yield
        finally:
            with torch.no_grad():
                for p, value in saved:
                    p.copy_(value)


class AcceleGrad(AcceleGradSharp):
    """AcceleGrad (Levy, Yurtsever & Cevher 2018): scalar AdaGrad-norm anchor, Euclidean branch.

    ``lr`` is the paper's :math:`2D`. Output point defaults to the weighted average ``"avg"``
    (the paper's guarantee); other keyword arguments as in :class:`AcceleGradSharp`.
    """

    def __init__(self, params, lr: float = 1.0, G: float = 1e-8, eval_point: str = "avg", **kwargs) -> None:
        for key in ("anchor", "geometry"):
            if key in kwargs:
                raise TypeError(f"AcceleGrad fixes {key!r}; use AcceleGradSharp to change it")
        super().__init__(
            params, lr=lr, anchor="scalar", geometry="euclidean", G=G, eval_point=eval_point, **kwargs
        )


class _Combined(torch.optim.Optimizer):
    """Steps several optimizers as one (Muon on matrices + AdamW on the rest)."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self.optimizers = optimizers
        self.param_groups = [g for o in optimizers for g in o.param_groups]
        self.defaults = {}
        self.state = {}

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for opt in self.optimizers:
            opt.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return {"optimizers": [o.state_dict() for o in self.optimizers]}

    def load_state_dict(self, state_dict) -> None:
        for o, s in zip(self.optimizers, state_dict["optimizers"]):
            o.load_state_dict(s)


def muon_with_adamw(
    named_params,
    lr: float = 0.02,
    adamw_lr: float = 1e-3,
    weight_decay: float = 0.0,
    exclude: tuple[str, ...] = ("embed", "lm_head", "head"),
) -> torch.optim.Optimizer:
    """The spectral baseline: :class:`torch.optim.Muon` for hidden 2-D weights, AdamW for the rest.

    Parameters
    ----------
    named_params : iterable of (str, Parameter)
        ``model.named_parameters()``.
    lr : float, default 0.02
        Muon learning rate (with ``adjust_lr_fn="match_rms_adamw"`` so that one ``lr`` scale fits
        all shapes).
    adamw_lr : float, default 1e-3
        AdamW learning rate for vectors, embeddings and the output head.
    exclude : tuple of str
        Name fragments of 2-D weights kept on AdamW (embeddings and heads, as in Muon's recipe).
    """
    check_float("lr", lr, 0.0, low_open=True)
    check_float("adamw_lr", adamw_lr, 0.0, low_open=True)
    matrices, others = [], []
    for name, p in named_params:
        if not p.requires_grad:
            continue
        (matrices if p.ndim == 2 and not any(e in name for e in exclude) else others).append(p)
    opts: list[torch.optim.Optimizer] = []
    if matrices:
        opts.append(
            # torch's Muon with its Newton-Schulz step at the same working precision as AcceleGrad#'s
            MuonAtPrecision(matrices, lr=lr, weight_decay=weight_decay, adjust_lr_fn="match_rms_adamw")
        )
    if others:
        opts.append(torch.optim.AdamW(others, lr=adamw_lr, weight_decay=weight_decay))
    return _Combined(opts)

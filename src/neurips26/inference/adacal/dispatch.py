r"""Coarse task dispatch: the explicit task tag (:func:`task`) and the learned :class:`TaskDispatcher`.

The dispatcher is a multinomial logistic regression on the head-averaged layer-0 probe metrics plus
prompt statistics (:func:`prompt_features`, :func:`dispatch_features`).

.. math::
    P(\tau \mid f) = \mathrm{softmax}(W f + b)_\tau

Shapes
------
- :func:`dispatch_features`: probe metrics ``[h, 3]`` (or head-averaged ``[3]``) and prompt features
  -> ``[len(FEATURE_NAMES)]``; :meth:`TaskDispatcher.fit`: ``X [N, F]``, labels ``[N]``.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.inference.adacal.config import TASKS

_TASK: contextvars.ContextVar[str | None] = contextvars.ContextVar("adacal_task", default=None)
_INPUT_IDS: contextvars.ContextVar[Any] = contextvars.ContextVar("adacal_input_ids", default=None)


@contextlib.contextmanager
def task(name: str | None = None, *, input_ids: Any = None) -> Iterator[None]:
    """Context manager: tag the prompts of the enclosed forward passes with a task type.

    Parameters
    ----------
    name : {"structure", "mixed", "retrieval"} or None
        Explicit task tag (highest priority). ``None`` leaves the decision to the dispatcher.
    input_ids : LongTensor ``[b, n]``, optional
        Token ids of the prompt, for the dispatcher's prompt statistics.
    """
    if name is not None:
        check_choice("task", name, TASKS)
    tok_t = _TASK.set(name)
    tok_i = _INPUT_IDS.set(input_ids)
    try:
        yield
    finally:
        _TASK.reset(tok_t)
        _INPUT_IDS.reset(tok_i)


# --------------------------------------------------------------------------------------------
# task dispatcher
# --------------------------------------------------------------------------------------------
FEATURE_NAMES = (
    "mean_entropy",
    "mean_concentration",
    "mean_mid_coverage",
    "std_mid_coverage",
    "bigram_repetition",
    "distinct_fraction",
    "query_marker",
)


def prompt_features(input_ids: Any, query_marker_ids: Sequence[int] = ()) -> np.ndarray:
    """Prompt statistics ``[b, 3]``: bigram repetition ratio, distinct-token fraction, marker presence.

    ``bigram_repetition`` = share of bigrams that occurred earlier in the prompt;
    ``distinct_fraction`` = unique tokens / tokens; ``query_marker`` = 1 if any id of
    ``query_marker_ids`` occurs, else 0.
    """
    ids = torch.as_tensor(input_ids)
    if ids.dim() == 1:
        ids = ids[None]
    if ids.dim() != 2:
        raise ValueError(f"input_ids must be [b, n] or [n], got shape {tuple(ids.shape)}")
    markers = set(int(m) for m in query_marker_ids)
    out = np.zeros((ids.shape[0], 3))
    for r, row in enumerate(ids.tolist()):
        seen, rep = set(), 0
        for a, c in zip(row[:-1], row[1:]):
            rep += (a, c) in seen
            seen.add((a, c))
        out[r, 0] = rep / max(len(row) - 1, 1)
        out[r, 1] = len(set(row)) / max(len(row), 1)
        out[r, 2] = float(bool(markers & set(row)))
    return out


def dispatch_features(
    metrics: Mapping[str, torch.Tensor], input_ids: Any = None, query_marker_ids: Sequence[int] = ()
) -> np.ndarray:
    """Dispatcher features ``[b, 7]`` (see :data:`FEATURE_NAMES`) from probe metrics and the prompt.

    Without ``input_ids`` the prompt statistics are zeros.
    """
    ent, conc, mid = (metrics[key].float() for key in ("entropy", "concentration", "mid_coverage"))
    probe = torch.stack([ent.mean(-1), conc.mean(-1), mid.mean(-1), mid.std(-1, unbiased=False)], -1)
    probe = probe.detach().cpu().double().numpy()
    stats = (
        np.zeros((probe.shape[0], 3)) if input_ids is None else prompt_features(input_ids, query_marker_ids)
    )
    if stats.shape[0] != probe.shape[0]:
        raise ValueError(
            f"input_ids batch ({stats.shape[0]}) differs from the metrics batch ({probe.shape[0]})"
        )
    return np.concatenate([probe, stats], axis=1)


class TaskDispatcher:
    """Coarse task classifier: multinomial logistic regression in numpy (L2, full-batch GD).

    Parameters
    ----------
    l2 : float
        Ridge penalty on the weights.
    steps : int
        Gradient steps.
    lr : float
        Step size.
    query_marker_ids : sequence of int
        Token ids whose presence is a feature (e.g. the tokens of "Question").
    """

    def __init__(
        self, l2: float = 1e-2, steps: int = 500, lr: float = 0.5, query_marker_ids: Sequence[int] = ()
    ) -> None:
        self.l2 = check_float("l2", l2, 0.0)
        self.steps = check_int("steps", steps, low=1)
        self.lr = check_float("lr", lr, 0.0, low_open=True)
        self.query_marker_ids = tuple(int(t) for t in query_marker_ids)
        self.classes_: tuple[str, ...] = ()
        self.mean_: np.ndarray | None = None
        self.std_: np.ndarray | None = None
        self.weights_: np.ndarray | None = None

    def fit(self, features: Any, labels: Sequence[str]) -> TaskDispatcher:
        """Fit on ``features [m, f]`` and task labels (each in :data:`TASKS`)."""
        x = np.asarray(features, dtype=np.float64)
        if x.ndim != 2 or x.shape[0] != len(labels) or x.shape[0] == 0:
            raise ValueError(
                f"features must be [m, f] with m = len(labels) > 0, got {x.shape} and {len(labels)} labels"
            )
        for lab in labels:
            check_choice("labels", lab, TASKS)
        self.classes_ = tuple(t for t in TASKS if t in set(labels))
        y = np.array([self.classes_.index(lab) for lab in labels])
        self.mean_ = x.mean(0)
        self.std_ = x.std(0) + 1e-6
        z = np.concatenate([(x - self.mean_) / self.std_, np.ones((len(x), 1))], 1)
        w = np.zeros((z.shape[1], len(self.classes_)))
        onehot = np.eye(len(self.classes_))[y]
        for _ in range(self.steps):
            logits = z @ w
            logits -= logits.max(1, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(1, keepdims=True)
            grad = z.T @ (p - onehot) / len(z)
            grad[:-1] += self.l2 * w[:-1]
            w -= self.lr * grad
        self.weights_ = w
        return self

    def predict_proba(self, features: Any) -> np.ndarray:
        """Class probabilities ``[m, len(classes_)]``."""
        if self.weights_ is None:
            raise RuntimeError("TaskDispatcher is not fitted; call fit() or load() first")
        x = np.atleast_2d(np.asarray(features, dtype=np.float64))
        if x.shape[1] != self.mean_.shape[0]:
            raise ValueError(f"features must have {self.mean_.shape[0]} columns, got {x.shape[1]}")
        z = np.concatenate([(x - self.mean_) / self.std_, np.ones((len(x), 1))], 1)
        logits = z @ self.weights_
        logits -= logits.max(1, keepdims=True)
        p = np.exp(logits)
        return p / p.sum(1, keepdims=True)

    def predict(self, features: Any) -> list[str]:
        """Predicted task names, one per row."""
        return [self.classes_[i] for i in self.predict_proba(features).argmax(1)]

    def save(self, path: str | Path) -> None:
        """Write the fitted dispatcher as JSON."""
        if self.weights_ is None:
            raise RuntimeError("TaskDispatcher is not fitted")
        data = {
            "l2": self.l2, "steps": self.steps, "lr": self.lr, "query_marker_ids": list(self.query_marker_ids),
            "classes": list(self.classes_), "mean": self.mean_.tolist(), "std": self.std_.tolist(),
            "weights": self.weights_.tolist(),
        }  # fmt: skip
        Path(path).write_text(json.dumps(data))

    @classmethod
    def load(cls, path: str | Path) -> TaskDispatcher:
        """Read a dispatcher written by :meth:`save`."""
        data = json.loads(Path(path).read_text())
        out = cls(data["l2"], data["steps"], data["lr"], data["query_marker_ids"])
        out.classes_ = tuple(data["classes"])
        out.mean_, out.std_ = np.array(data["mean"]), np.array(data["std"])
        out.weights_ = np.array(data["weights"])
        return out

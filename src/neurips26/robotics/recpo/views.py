"""Procedure views: discrete, entity-local readings of a continuous kitchen observation.

A view :math:`v` maps an observation :math:`o \\in \\mathbb{R}^{30}` to a discrete state over its entities,
:math:`\\phi_v(o): \\mathcal{E}_v \\to \\mathcal{V}`, and :meth:`ProcedureView.diff` returns the set of local
changes :math:`\\Delta_v = \\{(v, e, \\phi_v(o)_e, \\phi_v(o')_e) : \\phi_v(o)_e \\ne \\phi_v(o')_e\\}`. Three
hand-built views (thresholds from FrankaKitchen's ``BONUS_THRESH``) and a learned wrapper:

- :class:`ObjectStateView`: articulation state per articulated element (off/on, closed/open, ``mid``);
- :class:`SpatialRelationView`: the kettle's place and whether the path to each kettle place is clear
  (the slide cabinet door blocks the top-left burner);
- :class:`InterfaceView`: the interaction interface each element offers (knob twist, switch slide, handle
  slide, handle pull, pick-place), or ``blocked`` (the open microwave door blocks the hinge cabinet);
- :class:`LearnedView`: one multinomial logistic regression per entity on the entity's own joints, fitted
  on noisy observations labelled by a base view.

Shapes
------
- ``encode(obs)``: ``obs`` ``(30,)`` -> ``{entity: value}``.
- ``encode_batch(obs)``: ``obs`` ``(T, 30)`` -> ``{entity: array of T values}``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from neurips26.robotics.recpo.kitchen import (
    DOORS,
    ELEMENTS,
    KETTLE_PLACES,
    OBS_DIM,
    SWITCHES,
    TRANSIENT,
    _anchors,
    element_indices,
    franka_constants,
)


@dataclass(frozen=True, order=True)
class Change:
    """One local change ``entity: before -> after`` in view ``view``."""

    view: str
    entity: str
    before: Hashable
    after: Hashable

    @property
    def key(self) -> tuple[str, str]:
        return self.view, self.entity


def as_observations(name: str, obs: Any, batch: bool) -> np.ndarray:
    """Validate observation input: ``(30,)`` (``batch=False``) or ``(T, 30)``; finite real numbers."""
    if type(obs).__module__.startswith("torch"):  # a torch tensor (torch is not imported otherwise)
        if getattr(obs, "is_meta", False):
            raise TypeError(f"{name} is a meta tensor (no data)")
        obs = obs.detach().cpu().double().numpy()
    if not isinstance(obs, (np.ndarray, list, tuple)):
        raise TypeError(f"{name} must be an array of observations, got {type(obs).__name__}")
    arr = np.asarray(obs)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    want = (None, OBS_DIM) if batch else (OBS_DIM,)
    if arr.ndim != len(want) or arr.shape[-1] != OBS_DIM or (batch and arr.shape[0] == 0):
        shape = "(T >= 1, 30)" if batch else "(30,)"
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or inf")
    return arr


class ProcedureView:
    """A procedure view: ``encode`` an observation into discrete entity states and ``diff`` two encodings.

    Subclasses set :attr:`name`, list :meth:`entities` with the observation dimensions each depends on
    (:meth:`dims`) and implement :meth:`_encode_batch` on clean-or-noisy ``(T, 30)`` arrays. Values in
    :attr:`transient` (``"mid"``) mark an entity in motion; they never enter a change.
    """

    name: str = "view"
    transient: frozenset = frozenset({TRANSIENT})

    def entities(self) -> tuple[str, ...]:
        raise NotImplementedError

    def dims(self, entity: str) -> np.ndarray:
        raise NotImplementedError

    def _encode_batch(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def encode_batch(self, obs: Any) -> dict[str, np.ndarray]:
        """Encode ``(T, 30)`` observations: ``{entity: (T,) array of values}``."""
        return self._encode_batch(as_observations("obs", obs, batch=True))

    def encode(self, obs: Any) -> dict[str, Hashable]:
        """Encode one ``(30,)`` observation (a ``(k, 30)`` stack is averaged first)."""
        arr = np.asarray(obs) if not hasattr(obs, "is_meta") else obs
        if getattr(arr, "ndim", 1) == 2:
            arr = as_observations("obs", arr, batch=True).mean(0)
        arr = as_observations("obs", arr, batch=False)
        return {e: v[0] for e, v in self._encode_batch(arr[None]).items()}

    def diff(self, before: Mapping[str, Hashable], after: Mapping[str, Hashable]) -> frozenset[Change]:
        """Local changes between two encodings of this view (transient values excluded)."""
        for name, enc in (("before", before), ("after", after)):
            if not isinstance(enc, Mapping):
                raise TypeError(
                    f"{name} must be an encoding (mapping entity -> value), got {type(enc).__name__}"
                )
        out = set()
        for e in before:
            if e not in after:
                raise ValueError(f"after lacks entity {e!r} of view {self.name!r}")
            b, a = before[e], after[e]
            if b != a and b not in self.transient and a not in self.transient:
                out.add(Change(self.name, e, b, a))
        return frozenset(out)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def _nearest_value(q: np.ndarray, element: str, values: Sequence[str], goal_first: str | None) -> np.ndarray:
    """Vectorised :func:`~neurips26.robotics.recpo.kitchen.element_value` over ``q`` ``(T, d)``."""
    thresh = franka_constants()[0]
    anchors = _anchors()
    d = np.stack([np.linalg.norm(q - anchors[element, v][None], axis=1) for v in values], 1)
    out = np.where(d.min(1) < thresh, np.asarray(values, dtype=object)[d.argmin(1)], TRANSIENT).astype(object)
    if goal_first is not None:  # FrankaKitchen's predicate decides the goal value first
        out[d[:, list(values).index(goal_first)] < thresh] = goal_first
    return out


class ObjectStateView(ProcedureView):
    """Articulation state of the six articulated elements: ``off/on``, ``closed/open`` or ``mid``."""

    name = "object"

    def entities(self):
        return (*SWITCHES, *DOORS)

    def dims(self, entity):
        return element_indices(entity)

    def _encode_batch(self, obs):
        out = {}
        for e in SWITCHES:
            out[e] = _nearest_value(obs[:, element_indices(e)], e, ("off", "on"), "on")
        for e in DOORS:
            out[e] = _nearest_value(obs[:, element_indices(e)], e, ("closed", "open"), "open")
        return out


class SpatialRelationView(ProcedureView):
    """The kettle's place (``bottom_left``/``top_left``/``bottom_right`` or ``mid``) and, per kettle place,
    whether its path is ``clear`` or ``blocked`` (the open slide cabinet door blocks ``top_left``)."""

    name = "spatial"

    def entities(self):
        return ("kettle", *(f"path:{p}" for p in KETTLE_PLACES))

    def dims(self, entity):
        if entity == "kettle":
            return element_indices("kettle")
        if entity == "path:top_left":
            return element_indices("slide cabinet")
        return np.zeros(0, dtype=np.int64)

    def _encode_batch(self, obs):
        T = obs.shape[0]
        out = {"kettle": _nearest_value(obs[:, element_indices("kettle")], "kettle", KETTLE_PLACES, None)}
        slide = _nearest_value(
            obs[:, element_indices("slide cabinet")], "slide cabinet", ("closed", "open"), "open"
        )
        for p in KETTLE_PLACES:
            out[f"path:{p}"] = np.full(T, "clear", dtype=object)
        out["path:top_left"] = np.where(
            slide == "closed", "clear", np.where(slide == "open", "blocked", TRANSIENT)
        )
        out["path:top_left"] = out["path:top_left"].astype(object)
        return out


INTERFACES = {
    "bottom burner": "knob_twist",
    "top burner": "knob_twist",
    "light switch": "switch_slide",
    "slide cabinet": "handle_slide",
    "hinge cabinet": "handle_pull",
    "microwave": "handle_pull",
    "kettle": "pick_place",
}


class InterfaceView(ProcedureView):
    """The interaction interface each element offers, read from its type; ``blocked`` when unreachable
    (the hinge cabinet while the microwave door is not closed)."""

    name = "interface"

    def entities(self):
        return ELEMENTS

    def dims(self, entity):
        if entity == "hinge cabinet":
            return element_indices("microwave")
        return np.zeros(0, dtype=np.int64)

    def _encode_batch(self, obs):
        T = obs.shape[0]
        out = {e: np.full(T, INTERFACES[e], dtype=object) for e in ELEMENTS}
        micro = _nearest_value(obs[:, element_indices("microwave")], "microwave", ("closed", "open"), "open")
        out["hinge cabinet"] = np.where(micro == "closed", "handle_pull", "blocked").astype(object)
        return out


def default_views() -> tuple[ProcedureView, ...]:
    """The three hand-threshold views, in resolution order."""
    return ObjectStateView(), SpatialRelationView(), InterfaceView()


class LearnedView(ProcedureView):
    """A view whose per-entity values are predicted by multinomial logistic regression on the entity's own
    observation dimensions (``base.dims(entity)``), fitted on labelled noisy observations.

    .. math::

        \\hat v_e(o) = \\arg\\max_c \\; w_{e,c}^\\top o_{D_e} + b_{e,c}

    Parameters
    ----------
    base : ProcedureView
        Supplies the name, entities, dimensions and (by default) the labels.
    C : float
        Inverse L2 regularisation strength of scikit-learn's ``LogisticRegression``.
    """

    def __init__(self, base: ProcedureView, C: float = 10.0) -> None:
        if not isinstance(base, ProcedureView):
            raise TypeError(f"base must be a ProcedureView, got {type(base).__name__}")
        self.base = base
        self.name = base.name
        self.C = float(C)
        self._models: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

    def entities(self):
        return self.base.entities()

    def dims(self, entity):
        return self.base.dims(entity)

    def fit(self, observations: Any, labels: Sequence[Mapping[str, Hashable]] | None = None) -> LearnedView:
        """Fit on ``observations`` ``(N, 30)`` with ``labels`` (one encoding per row; default: the base
        view's encoding of the same rows, which should then be clean)."""
        from sklearn.linear_model import LogisticRegression

        obs = as_observations("observations", observations, batch=True)
        if labels is None:
            by_entity = self.base.encode_batch(obs)
        else:
            if len(labels) != len(obs):
                raise ValueError(
                    f"labels must have one encoding per observation ({len(obs)}), got {len(labels)}"
                )
            by_entity = {e: np.asarray([lab[e] for lab in labels], dtype=object) for e in self.entities()}
        models = {}
        for e in self.entities():
            y = by_entity[e].astype(str)
            classes = np.unique(y)
            d = self.dims(e)
            if len(classes) == 1 or len(d) == 0:
                values, counts = np.unique(y, return_counts=True)
                models[e] = (
                    np.zeros((1, len(d))),
                    np.zeros(1),
                    np.asarray([values[counts.argmax()]], dtype=object),
                )
                continue
            clf = LogisticRegression(C=self.C, max_iter=1000).fit(obs[:, d], y)
            coef, icpt = clf.coef_, clf.intercept_
            if len(clf.classes_) == 2:  # binary: sklearn keeps one row (class 1 vs 0)
                coef, icpt = np.concatenate([-coef, coef]) / 2, np.concatenate([-icpt, icpt]) / 2
            models[e] = (coef, icpt, clf.classes_.astype(object))
        self._models = models
        return self

    def _encode_batch(self, obs):
        if self._models is None:
            raise RuntimeError("LearnedView.fit must be called before encode")
        out = {}
        for e, (coef, icpt, classes) in self._models.items():
            if len(classes) == 1:
                out[e] = np.full(len(obs), classes[0], dtype=object)
            else:
                out[e] = classes[(obs[:, self.dims(e)] @ coef.T + icpt).argmax(1)]
        return out

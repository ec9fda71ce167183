"""Scale-out path of the CoT pathology diagnostics: multiprocess surgery, encoding and detector evaluation.

Paper
-----
"CoT pathology diagnostics" (NeurIPS 2026; title and full text not found, abstract only): seed file
``000_f8b4140a0e3b5d84.txt``, paragraph 18, abstract beginning "Long chain-of-thought (CoT) reasoning in
large language models often fails in recurring ways". This module implements the spec's "Scale-out
path" (``shared/specs/cot_pathology.md``): the evaluation split across worker processes, reproducing the
single-process results exactly with fixed seeds. It adds no method of its own; it moves existing
functions (:func:`~.surgery.inject`, :meth:`~.trajectory.LatentStateModel.encode`,
:func:`~.detectors.detect_all`, :func:`~.surgery.evaluate_detectors`) onto a process pool.

Method
------
Exactness comes from making every item's computation independent of which process runs it and of the
other items:

* randomness is per item: item ``i`` of a run seeded ``s`` draws from its own ``random.Random`` seeded
  by ``SeedSequence([s, i])`` (:func:`item_rng`), never from a stream shared across items;
* torch runs with the same thread count (``threads``, default 1) in the workers and in the
  single-process path, so the hidden-state passes reduce in the same order;
* results are gathered in item order (``Executor.map``), and aggregates are computed afterwards by the
  same code as the sequential path.

.. math::

    r_i = f(x_i, \\mathrm{rng}_i), \\quad \\mathrm{rng}_i = \\mathrm{Random}(\\mathrm{SeedSequence}([s, i]))
    \\qquad\\Rightarrow\\qquad (r_1, \\dots, r_N)_{\\text{2 workers}} = (r_1, \\dots, r_N)_{\\text{1 process}}

:func:`parallel_evaluate_detectors` splits by pathology: each worker runs ``evaluate_detectors`` on the
clean traces and one pathology's injected traces (exactly what the sequential loop does for that
pathology), and the per-phase means are taken over the gathered rows in the same order.

Start method: ``"fork"`` (default on Linux) passes the function, the items, the reference model and a
loaded LM to the workers through the fork, with no pickling (closures and models work) and no
re-import; ``"spawn"`` pickles them (module-level functions only), checked before any process starts.
Each worker calls ``torch.set_num_threads(threads)``.

Shapes
------
``parallel_map(fn, items)`` -> list of ``len(items)`` results, in order. ``surgery_set(task, problems,
seed)`` -> ``len(problems)`` :class:`SurgeryItem` (clean ids ``(T,)``, one ``(ids, onset)`` per
pathology, trajectories when an encoder is given). ``parallel_detect_all`` -> one
``{pathology: DetectorResult}`` per trajectory. ``parallel_evaluate_detectors`` -> the dict of
``evaluate_detectors``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from neurips26.common.checks import check_int, check_probability
from neurips26.common.pool import contiguous_spans, map_spans, resolve_start_method
from neurips26.common.threads import torch_threads

from .detectors import DetectorConfig, DetectorResult, detect_all
from .surgery import evaluate_detectors, inject
from .synthetic import ArithmeticProblem, SyntheticArithmetic
from .trajectory import LatentStateModel, Pathology, StepSegmenter, Trajectory


def item_rng(seed: int, index: int) -> random.Random:
    """The ``random.Random`` of item ``index`` in a run seeded ``seed`` (``SeedSequence([seed, index])``)."""
    seed, index = check_int("seed", seed, low=0), check_int("index", index, low=0)
    words = np.random.SeedSequence([seed, index]).generate_state(4, np.uint32)
    return random.Random(int.from_bytes(words.tobytes(), "little"))


# ----------------------------------------------------------------------------------- process pool plumbing
def _run_chunk(w: Mapping[str, Any], bounds: tuple[int, int]) -> list[Any]:
    fn, items, seed = w["fn"], w["items"], w["seed"]
    start, stop = bounds
    if seed is None:
        return [fn(items[i]) for i in range(start, stop)]
    return [fn(items[i], item_rng(seed, i)) for i in range(start, stop)]


def parallel_map(
    fn: Callable[..., Any],
    items: Sequence[Any],
    *,
    seed: int | None = None,
    workers: int = 2,
    chunks: int | None = None,
    start_method: str | None = None,
    threads: int = 1,
) -> list[Any]:
    """``[fn(item) ...]`` (or ``[fn(item, item_rng(seed, i)) ...]`` when ``seed`` is given) over processes.

    Parameters
    ----------
    fn : callable
        Applied to every item; with ``seed`` it also receives the item's ``random.Random``.
    items : sequence
        The work list (non-empty).
    seed : int, optional
        Base seed of the per-item generators (>= 0).
    workers : int
        Worker processes (>= 1); ``1`` runs in this process (the single-process reference).
    chunks : int, optional
        Contiguous index chunks handed out (default ``4 * workers``, at most ``len(items)``).
    start_method : {"fork", "spawn", "forkserver"}, optional
        Default ``"fork"`` where available.
    threads : int
        ``torch`` intra-op threads in every worker and in the single-process path (>= 1).
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise TypeError(f"items must be a sequence, got {type(items).__name__}")
    items = list(items)
    if not items:
        raise ValueError("items must not be empty (nothing to evaluate)")
    workers = check_int("workers", workers, low=1)
    threads = check_int("threads", threads, low=1)
    if seed is not None:
        seed = check_int("seed", seed, low=0)
    method = resolve_start_method(start_method)
    n_chunks = min(len(items), 4 * workers if chunks is None else check_int("chunks", chunks, low=1))
    payload = {"fn": fn, "items": items, "seed": seed}
    if workers == 1 or len(items) == 1:
        with torch_threads(threads):
            if seed is None:
                return [fn(x) for x in items]
            return [fn(x, item_rng(seed, i)) for i, x in enumerate(items)]
    bounds = contiguous_spans(len(items), n_chunks)
    chunks_out = map_spans(
        _run_chunk,
        bounds,
        payload,
        workers=workers,
        threads=threads,
        start_method=method,
        what="fn and items",
    )
    return [r for chunk in chunks_out for r in chunk]


# -------------------------------------------------------------------------------------------- surgery set
@dataclass(frozen=True)
class SurgeryItem:
    """One problem's clean chain of thought and its injected variants.

    ``injected`` holds ``(pathology, ids, onset_step)`` per pathology; ``clean_traj`` and
    ``injected_trajs`` are the encoded trajectories (``None`` / empty without an encoder).
    """

    index: int
    clean_ids: tuple[int, ...]
    injected: tuple[tuple[Pathology, tuple[int, ...], int], ...]
    clean_traj: Trajectory | None = None
    injected_trajs: tuple[Trajectory, ...] = ()


def _surgery_one(
    task: SyntheticArithmetic,
    pathologies: tuple[Pathology, ...],
    paraphrase_prob: float,
    encoder: Callable[[list[int], list[int]], Trajectory] | None,
    item: tuple[int, ArithmeticProblem],
    rng: random.Random,
) -> SurgeryItem:
    index, prob = item
    clean = [t for st in task.clean_steps(prob, rng, paraphrase_prob) for t in st]
    spans = StepSegmenter([task.delimiter]).split(clean)
    templates = task.templates()
    injected = []
    for p in pathologies:
        new, onset = inject(clean, spans, p, rng, templates, task.extract_answer)
        injected.append((p, tuple(new), int(onset)))
    if encoder is None:
        return SurgeryItem(index, tuple(clean), tuple(injected))
    prompt = [task.stoi["<bos>"], *task.prompt(prob)]
    clean_traj = encoder(prompt, clean)
    trajs = tuple(encoder(prompt, list(ids)) for _, ids, _ in injected)
    return SurgeryItem(index, tuple(clean), tuple(injected), clean_traj, trajs)


class _Bound:
    """A picklable partial application for :func:`_surgery_one` (keeps ``spawn`` usable)."""

    def __init__(self, *args: Any):
        self.args = args

    def __call__(self, item: Any, rng: random.Random) -> SurgeryItem:
        return _surgery_one(*self.args, item, rng)


def surgery_set(
    task: SyntheticArithmetic,
    problems: Sequence[ArithmeticProblem],
    seed: int,
    *,
    pathologies: Sequence[Any] | None = None,
    paraphrase_prob: float = 0.5,
    encoder: Callable[[list[int], list[int]], Trajectory] | None = None,
    workers: int = 2,
    start_method: str | None = None,
    threads: int = 1,
) -> list[SurgeryItem]:
    """Gold clean traces of ``problems`` with every pathology injected, optionally encoded, over processes.

    Item ``i`` draws its paraphrases and every surgery choice from :func:`item_rng` ``(seed, i)`` (first
    the clean trace, then the pathologies in order), so the set is the same for any ``workers``.
    ``encoder(prompt_ids, cot_ids) -> Trajectory`` (e.g. ``lambda p, c: ref.encode(model, p, c, seg,
    task.extract_answer)``) runs the hidden-state pass inside the workers.
    """
    if not isinstance(task, SyntheticArithmetic):
        raise TypeError(f"task must be a SyntheticArithmetic, got {type(task).__name__}")
    problems = list(problems)
    if not problems:
        raise ValueError("problems must not be empty")
    for i, p in enumerate(problems):
        if not isinstance(p, ArithmeticProblem):
            raise TypeError(f"problems[{i}] must be an ArithmeticProblem, got {type(p).__name__}")
    paths = tuple(Pathology) if pathologies is None else tuple(Pathology.parse(p) for p in pathologies)
    if not paths:
        raise ValueError("pathologies must not be empty (None means all six)")
    paraphrase_prob = check_probability("paraphrase_prob", paraphrase_prob)
    if encoder is not None and not callable(encoder):
        raise TypeError(
            f"encoder must be callable (prompt_ids, cot_ids) -> Trajectory, got {type(encoder).__name__}"
        )
    fn = _Bound(task, paths, paraphrase_prob, encoder)
    return parallel_map(
        fn,
        list(enumerate(problems)),
        seed=seed,
        workers=workers,
        start_method=start_method,
        threads=threads,
    )


def detector_inputs(
    items: Sequence[SurgeryItem],
) -> tuple[list[Trajectory], dict[Pathology, list[tuple[Trajectory, int]]]]:
    """``(clean, injected)`` for :func:`~.surgery.evaluate_detectors` from encoded surgery items."""
    clean: list[Trajectory] = []
    injected: dict[Pathology, list[tuple[Trajectory, int]]] = {}
    for it in items:
        if it.clean_traj is None:
            raise ValueError(f"surgery item {it.index} has no trajectories; build the set with an encoder")
        clean.append(it.clean_traj)
        for (p, _, onset), traj in zip(it.injected, it.injected_trajs):
            injected.setdefault(p, []).append((traj, onset))
    return clean, injected


# ------------------------------------------------------------------------------------------ detection
class _DetectAll:
    def __init__(self, ref: LatentStateModel, graph_aware: bool, config: Any, verifier: Any):
        self.args = (ref, graph_aware, config, verifier)

    def __call__(self, traj: Trajectory) -> dict[Any, DetectorResult]:
        return detect_all(traj, *self.args)


def parallel_detect_all(
    trajectories: Sequence[Trajectory],
    ref: LatentStateModel,
    graph_aware: bool = True,
    config: DetectorConfig | None = None,
    verifier: Callable[[str], bool] | None = None,
    *,
    workers: int = 2,
    start_method: str | None = None,
) -> list[dict[Any, DetectorResult]]:
    """:func:`~.detectors.detect_all` on every trajectory, split over processes, in input order."""
    trajectories = list(trajectories)
    if not trajectories:
        raise ValueError("trajectories must not be empty")
    for i, t in enumerate(trajectories):
        if not isinstance(t, Trajectory):
            raise TypeError(f"trajectories[{i}] must be a Trajectory, got {type(t).__name__}")
    detect_all(trajectories[0], ref, graph_aware, config, verifier)  # input checks here, not in a worker
    return parallel_map(
        _DetectAll(ref, graph_aware, config, verifier),
        trajectories,
        workers=workers,
        start_method=start_method,
    )


class _EvaluateOne:
    def __init__(self, clean, injected, ref, graph_aware, config, verifier):
        self.clean, self.injected = clean, injected
        self.args = (ref, graph_aware, config, verifier)

    def __call__(self, key: Any) -> dict[str, float]:
        out = evaluate_detectors(self.clean, {key: self.injected[key]}, *self.args)
        return out["per_pathology"][Pathology.parse(key).value]


def parallel_evaluate_detectors(
    clean: Sequence[Trajectory],
    injected: Mapping[Any, Sequence[tuple[Trajectory, int]]],
    ref: LatentStateModel,
    graph_aware: bool = True,
    config: DetectorConfig | None = None,
    verifier: Callable[[str], bool] | None = None,
    *,
    workers: int = 2,
    start_method: str | None = None,
) -> dict[str, Any]:
    """:func:`~.surgery.evaluate_detectors` with one pathology per work unit; the same dict, exactly."""
    clean = list(clean)
    if not clean:
        raise ValueError("clean must hold at least one trajectory")
    if not isinstance(injected, Mapping):
        raise TypeError(
            f"injected must map pathology -> [(trajectory, onset)], got {type(injected).__name__}"
        )
    keys = list(injected)
    for key in keys:
        Pathology.parse(key)
        if not injected[key]:
            raise ValueError(f"injected[{Pathology.parse(key).value}] is empty")
    if not keys:
        return evaluate_detectors(clean, injected, ref, graph_aware, config, verifier)
    rows = parallel_map(
        _EvaluateOne(clean, dict(injected), ref, graph_aware, config, verifier),
        keys,
        workers=workers,
        chunks=len(keys),
        start_method=start_method,
    )
    per: dict[str, dict[str, float]] = {}
    for key, row in zip(keys, rows):
        per[Pathology.parse(key).value] = row
    phase: dict[str, list[float]] = {}
    for name, row in per.items():
        phase.setdefault(Pathology(name).phase.value, []).append(row["auroc"])
    return {"per_pathology": per, "per_phase": {k: float(np.mean(v)) for k, v in phase.items()}}


__all__ = [
    "SurgeryItem",
    "detector_inputs",
    "item_rng",
    "parallel_detect_all",
    "parallel_evaluate_detectors",
    "parallel_map",
    "surgery_set",
]

"""``neurips26 bench``: each efficiency component timed against its reference in one process.

A claim check asks whether a paper's effect shows; a benchmark asks what a component costs next to
the thing a user would otherwise run (``DynamicCache``, ``tensor.clone()``, dense SDPA, the GRPO loss,
AdamW). Both arms run in the same process, on the same inputs, interleaved: repeat ``r`` calls every
arm once, in an order rotated by ``r``, so that drift in the machine's load (other processes, thermal
state, caches) falls on every arm alike. The report is the median of the repeats with min and max,
and the ratio of medians against the reference arm, with one intra-op thread and with two.

Speed on a shared CPU is noisy, so only ratios measured in one run are reported, never absolute
times from different runs side by side.

Every benchmark writes ``results/bench/<name>.json`` with the environment and the commit (as a claim
result does) and, where issue 22 set one, the target ratio next to the measured one.

.. math::

    \\rho_{a}(c, t) = \\frac{\\operatorname{median}_r\\, T_{a,r}(c, t)}{\\operatorname{median}_r\\, T_{\\mathrm{ref},r}(c, t)}

for arm ``a``, case ``c`` (a context length, a shard size) and thread count ``t``.

Shapes
------
Each benchmark states its own (see :mod:`neurips26.bench.suites`).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from neurips26.common.checks import check_int

__all__ = ["BENCHMARKS", "Benchmark", "run_bench", "time_interleaved"]


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """One benchmark: a reference arm and the arms measured against it over a list of cases.

    Attributes
    ----------
    name : str
        File name of the result (``results/bench/<name>.json``).
    title : str
    reference : str
        The arm every ratio is taken against.
    cases : callable ``(quick: bool) -> list[dict]``
        The cases (e.g. ``{"context": 1024, "batch": 1}``); the quick list is a subset.
    setup : callable ``(case: dict, seed: int) -> (arms, extra)``
        ``arms`` maps arm name to a no-argument callable (one timed call); ``extra`` is a dict of
        measured quantities that are not times (stored bytes, density, ...), recorded with the case.
    x : str
        The case key that the report plots the ratio against.
    targets : mapping of str to (float, value[, conditions]) or a list of them
        ``{arm: (r, at)}``: the target ``ratio <= r`` at the case whose ``x`` equals ``at`` (the largest
        such case by batch and threads is judged), where one was set (issues 22 and 37). ``conditions``
        ``{extra_key: limit}`` adds ``extra[extra_key][arm] <= limit`` (e.g. stored bytes against the
        reference). A list gives several targets of one arm; the JSON keys the first ``arm`` and the
        others ``arm@at``.
    repeats : tuple of int
        Timed repeats (quick, full).
    warmup : int
        Untimed calls of every arm before the timed ones (0 when ``setup`` already ran each arm).
    notes : str
        What is and is not measured, said plainly.
    """

    name: str
    title: str
    reference: str
    cases: Callable[[bool], list[dict[str, Any]]]
    setup: Callable[[dict[str, Any], int], tuple[dict[str, Callable[[], Any]], dict[str, Any]]]
    x: str
    targets: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    repeats: tuple[int, int] = (5, 9)
    notes: str = ""
    warmup: int = 1


def time_interleaved(
    arms: Mapping[str, Callable[[], Any]], repeats: int, warmup: int = 1
) -> dict[str, dict[str, float]]:
    """Time every arm ``repeats`` times, interleaved, after ``warmup`` untimed calls each.

    Parameters
    ----------
    arms : mapping of str to callable
        No-argument callables, one timed call each.
    repeats : int
        Timed calls per arm; repeat ``r`` runs the arms in their order rotated by ``r``.
    warmup : int
        Untimed calls per arm first (lazy initialisation, compilation, allocator warm-up).

    Returns
    -------
    dict
        ``{arm: {"median_s", "min_s", "max_s", "repeats"}}``.
    """
    if not isinstance(arms, Mapping) or not arms:
        raise ValueError("arms must be a non-empty mapping of name -> callable")
    for name, fn in arms.items():
        if not callable(fn):
            raise TypeError(f"arms[{name!r}] must be callable, got {type(fn).__name__}")
    check_int("repeats", repeats, low=1)
    check_int("warmup", warmup, low=0)
    names = list(arms)
    for name in names:
        for _ in range(warmup):
            arms[name]()
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            start = time.perf_counter()
            arms[name]()
            times[name].append(time.perf_counter() - start)
    return {
        n: {"median_s": statistics.median(t), "min_s": min(t), "max_s": max(t), "repeats": len(t)}
        for n, t in times.items()
    }


def _default_out() -> Path:
    return Path(os.environ.get("NEURIPS26_RESULTS", "results"))


def run_bench(
    name: str,
    *,
    quick: bool = False,
    threads: Sequence[int] = (1, 2),
    seed: int = 0,
    out: Path | str | None = None,
    write: bool = True,
    repeats: int | None = None,
    where: Mapping[str, Sequence[Any]] | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run one benchmark under each thread count and (optionally) write its JSON.

    Parameters
    ----------
    name : str
        A key of :data:`BENCHMARKS`.
    quick : bool
        The quick case list and repeat count.
    threads : sequence of int
        Intra-op thread counts; every case runs under each.
    seed : int
        Seed of the random inputs (identical for every arm).
    out : path, optional
        Results folder (default ``$NEURIPS26_RESULTS`` or ``results``); the JSON goes to
        ``<out>/bench/<name>.json``.
    write : bool
        Write the JSON (tests pass ``False``).
    repeats : int, optional
        Overrides the benchmark's repeat count.
    where : mapping of str to sequence, optional
        Keep only the cases whose ``case[key]`` is one of the given values, for every key (e.g.
        ``{"context": [4096]}``): a subset of the full list when all of it does not fit the time at hand.
        The JSON records the filter, and a target whose case was filtered out is reported as not measured.

    Returns
    -------
    dict
        ``{"name", "title", "reference", "quick", "rows": [...], "targets", "env", "provenance", ...}``;
        one row per (threads, case) with ``timing`` per arm and ``ratio`` per arm.
    """
    from neurips26.bench.suites import BENCHMARKS
    from neurips26.claims.runner import _git_commit, capture_env
    from neurips26.common.threads import torch_threads

    if name not in BENCHMARKS:
        raise ValueError(f"name must be one of {sorted(BENCHMARKS)}, got {name!r}")
    if isinstance(threads, (str, bytes)) or not threads:
        raise ValueError("threads must be a non-empty sequence of positive ints")
    for t in threads:
        check_int("threads", t, low=1)
    check_int("seed", seed, low=0)
    bench = BENCHMARKS[name]
    reps = bench.repeats[0 if quick else 1] if repeats is None else check_int("repeats", repeats, low=1)
    cases = [dict(c) for c in bench.cases(quick)]
    if where is not None:
        if not isinstance(where, Mapping):
            raise TypeError(
                f"where must be a mapping of case key to allowed values, got {type(where).__name__}"
            )
        known = set().union(*(c.keys() for c in cases)) if cases else set()
        for key, allowed in where.items():
            if key not in known:
                raise ValueError(
                    f"where: unknown case key {key!r} for {name!r}; its cases have {sorted(known)}"
                )
            if isinstance(allowed, (str, bytes)) or not isinstance(allowed, Sequence) or not allowed:
                raise ValueError(f"where[{key!r}] must be a non-empty sequence of values, got {allowed!r}")
        cases = [c for c in cases if all(c[k] in tuple(v) for k, v in where.items())]
        if not cases:
            raise ValueError(f"where={dict(where)!r} leaves no case of {name!r}")
    rows = []
    start = time.perf_counter()
    for t in threads:
        with torch_threads(t):
            for case in cases:
                arms, extra = bench.setup(dict(case), seed)
                if bench.reference not in arms:
                    raise RuntimeError(
                        f"benchmark {name!r}: setup returned no reference arm {bench.reference!r}"
                    )
                timing = time_interleaved(arms, reps, warmup=bench.warmup)
                ref = timing[bench.reference]["median_s"]
                ratio = {a: v["median_s"] / ref for a, v in timing.items()}
                rows.append(
                    {"threads": t, "case": dict(case), "timing": timing, "ratio": ratio, "extra": extra}
                )
                if log is not None:
                    shown = ", ".join(f"{a} {r:.2f}x" for a, r in ratio.items() if a != bench.reference)
                    log(f"{name} threads={t} {case}: {shown}")
                del arms
    result = {
        "schema": 1,
        "name": name,
        "title": bench.title,
        "reference": bench.reference,
        "quick": quick,
        "where": None if where is None else {k: list(v) for k, v in where.items()},
        "x": bench.x,
        "repeats": reps,
        "seed": seed,
        "threads": list(threads),
        "rows": rows,
        "targets": _targets(rows, bench),
        "notes": bench.notes,
        "wall_s": time.perf_counter() - start,
        "env": capture_env(),
        "provenance": {
            **_git_commit(),
            "captured": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        },
    }
    if write:
        path = Path(out) if out is not None else _default_out()
        path = path / "bench" / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result, indent=1, default=str))
        tmp.replace(path)
        result["path"] = str(path)
    return result


def _targets(rows: list[dict], bench: Benchmark) -> dict[str, Any]:
    """Every target of ``bench`` with its status (see :class:`Benchmark`)."""
    out: dict[str, Any] = {}
    for arm, spec in bench.targets.items():
        specs = spec if isinstance(spec, list) else [spec]
        for i, t in enumerate(specs):
            r, at = t[0], t[1]
            cond = dict(t[2]) if len(t) > 2 else {}
            key = arm if i == 0 else f"{arm}@{at}"
            entry = {"arm": arm, "max_ratio": r, bench.x: at}
            if cond:
                entry["conditions"] = cond
            out[key] = {**entry, **_target_status(rows, bench, arm, r, at, cond)}
    return out


def _target_status(
    rows: list[dict],
    bench: Benchmark,
    arm: str,
    limit: float,
    at: Any,
    conditions: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The measured ratio at the target's case (largest batch, most threads), and whether it is ``<= limit``
    (and every ``extra[key][arm] <= conditions[key]``).

    ``met`` is ``None`` when the run did not include that case (the quick list is a subset)."""
    mine = [r for r in rows if arm in r["ratio"] and r["case"].get(bench.x) == at]
    if not mine:
        return {"measured": None, "met": None, "at": None}
    top = max(mine, key=lambda r: (r["case"].get("batch", 0), r["threads"]))
    met = bool(top["ratio"][arm] <= limit)
    out = {"measured": top["ratio"][arm], "at": {"threads": top["threads"], **top["case"]}}
    for key, lim in (conditions or {}).items():
        value = top.get("extra", {}).get(key)
        value = value.get(arm) if isinstance(value, dict) else value
        out[f"measured_{key}"] = value
        met = met and value is not None and value <= lim
    out["met"] = met
    return out


def __getattr__(name: str) -> Any:
    if name == "BENCHMARKS":
        from neurips26.bench.suites import BENCHMARKS

        return BENCHMARKS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Run claim checks: seeds, timing, environment capture, idempotent atomic JSON results, executors.

Layout on disk (``out`` defaults to ``results/``)::

    results/<profile>/<slug>.json                  final result (schema below)
    results/.partial/<profile>/<slug>/seed-<n>.json  one file per finished seed, for resuming

A final result that exists is reused unless ``force=True``. An interrupted run resumes from its
finished seeds. Every file is written to a temporary name and renamed into place.

Result schema (version 2)
-------------------------
``schema``: 2; ``slug``; ``title``; ``paper`` (seed file and paragraph); ``claim`` (text);
``profile``; ``seeds`` (list); ``method``; ``baselines``; ``references``; ``verdict`` (the primary
headline's, rule version 3: :mod:`neurips26.claims.base`); ``verdict_reason`` (``testbed``, ``error``,
``error-suspect``, ``criteria``, ``spread``, ``evidence``, ``design``, ``testbed: floor``, ``constant``);
``deciding`` (key of the deciding criterion); ``rule_version``; ``primary`` (texts of the primary
headlines); ``premises`` and ``criteria`` (lists of ``{key, kind, text, data, verdict, numbers, reason[,
stat_verdict, reason_detail, diagnosis, error]}``); ``headlines`` (``{text, criteria, untested, primary,
verdicts, status, verdict, reason, deciding, holm}``); ``implicit_headline``;
``items`` (evaluation items per seed behind a metric, this profile); ``metrics``
(``name -> arm -> [per-seed]``); ``curves`` (``name -> arm -> [per-seed list]``); ``info``
(``[per-seed dict]``); ``wall_s`` (this run) and ``cold_wall_s`` (this run plus the recorded build
time of every cache entry it found on disk: what a cold cache costs); ``seed_wall_s``;
``seed_cold_wall_s``; ``cpu_s`` and ``seed_cpu_s`` (user + system CPU seconds of the process and its
finished children: on a loaded machine, the better guide to the 2-core budget); ``budget_s``; ``over_budget`` (``cold_wall_s > budget_s``);
``provenance`` (``commit``, ``dirty`` with untracked files, ``claim_hash``, ``config_hash``,
captured when the run starts, with the 1-minute load average); ``load_avg_1m_end``; ``warnings``
(dirty, a loaded machine, over budget, sweeps at a grid edge, criteria that errored); ``config``; ``env``; ``created``; ``implemented``; ``differences``; ``data``;
``glossary``; ``command``.

Per-seed partials carry the provenance hashes; a partial written by other claim code or another
config is discarded, never mixed into a result. ``claim_hash`` covers the claim's static import closure
(:func:`module_closure`) plus the decision rule; a reused result is re-judged by the current rule
(:func:`neurips26.claims.base.rejudge`, which keeps the file's own verdict under ``recorded``);
``command`` names the seeds, so it regenerates the result exactly.
"""

from __future__ import annotations

import ast
import datetime as _dt
import functools
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from neurips26.claims.base import Claim, Profile, SeedResult, judge_claim, rejudge
from neurips26.common.cache import atomic_write_text, hit_build_seconds, reset_build_clock

SCHEMA_VERSION = 2
EXECUTORS = ("local", "ray")
_VERSIONED = (
    "torch",
    "numpy",
    "scipy",
    "transformers",
    "trl",
    "peft",
    "torch_geometric",
    "flwr",
    "ray",
    "neurips26",
)


def default_out() -> Path:
    return Path(os.environ.get("NEURIPS26_RESULTS", "results"))


def _git_commit(root: Path | None = None) -> dict[str, Any]:
    """HEAD of the checkout at ``root`` (default: this package's) and whether it differs from HEAD:
    modified or untracked files anywhere but ``results/`` (rewritten by the runs themselves)."""
    root = Path(__file__).resolve().parents[3] if root is None else Path(root)
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(  # results/ is what the runs write: not a change of the code that ran
            ["git", "status", "--porcelain", "--untracked-files=all", "--", ".", ":(exclude)results"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit or None, "dirty": bool(dirty)}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def capture_env() -> dict[str, Any]:
    """Package versions, git commit, CPU model and torch threads."""
    versions = {}
    for name in _VERSIONED:
        dist = {"torch_geometric": "torch-geometric"}.get(name, name)
        try:
            versions[name] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[name] = None
    import torch

    from neurips26.common.precision import precision_info

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "precision": precision_info(),
        "versions": versions,
        "git": _git_commit(),
    }


SRC_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the neurips26 package
# Harness modules: they run, report or register claims but compute no metric, so they are not hashed
# (the decision rule, claims/criteria.py, is hashed explicitly; a stored result is re-judged on load).
HARNESS = frozenset(
    {
        "neurips26",
        "neurips26.__main__",
        "neurips26.cli",
        "neurips26.readme",
        "neurips26.registry",
        "neurips26.claims",
        "neurips26.claims.base",
        "neurips26.claims.runner",
        "neurips26.claims.report",
        "neurips26.claims.plotting",
    }
)
RULE_MODULE = "neurips26.claims.criteria"


def _module_file(name: str, root: Path) -> Path | None:
    """The source file of module ``name`` under ``root`` (a package's ``__init__.py``), or None."""
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _is_package(name: str, root: Path) -> bool:
    return (root.joinpath(*name.split(".")) / "__init__.py").is_file()


@functools.cache
def _defined_names(package: str, root: Path) -> dict[str, str]:
    """``{top-level name: defining module}`` for every module under a package (for lazy area exports)."""
    out: dict[str, str] = {}
    folder = root.joinpath(*package.split("."))
    for path in sorted(folder.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        mod = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        try:
            tree = ast.parse(path.read_text(), filename=str(path))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        for node in tree.body:
            names: list[str] = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            for n in names:
                out.setdefault(n, mod)
    return out


@functools.cache
def _bound_names(package: str, root: Path) -> frozenset[str]:
    """Names a package's ``__init__`` binds at top level itself (definitions, assignments, imports)."""
    path = _module_file(package, root)
    names: set[str] = set()
    if path is None:
        return frozenset()
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                elts = target.elts if isinstance(target, ast.Tuple) else [target]
                names.update(t.id for t in elts if isinstance(t, ast.Name))
    return frozenset(names)


def _imported_modules(path: Path, module: str | None, root: Path) -> set[str]:
    """``neurips26`` modules a source file imports anywhere (module level or inside functions).

    ``from pkg import name`` counts ``pkg.name`` when that is a module, else ``pkg`` and, for a package
    whose ``__init__`` defines nothing by that name (lazy area exports), the module under ``pkg`` that
    defines ``name``. Relative imports are resolved against ``module``.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "neurips26")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if module is None:
                    continue
                parts = module.split(".") if is_pkg else module.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base.split(".")[0] != "neurips26":
                continue
            found.add(base)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if _module_file(sub, root) is not None:
                    found.add(sub)
                elif alias.name != "*" and _is_package(base, root) and alias.name not in _bound_names(base, root):
                    owner = _defined_names(base, root).get(alias.name)  # a lazy export of an area
                    if owner:
                        found.add(owner)
    return found


@functools.cache
def module_closure(start: tuple[str, ...], root: Path = SRC_ROOT) -> tuple[Path, ...]:
    """Source files of the ``neurips26`` modules ``start`` imports, transitively, plus the decision rule.

    Follows imports statically (:mod:`ast`, no import is executed), through the parent packages of every
    module, skipping the harness modules (``HARNESS``: runner, report, plotting, registry, CLI); a claim
    package contributes every file it holds. Always includes ``claims/criteria.py``. Deterministic and
    cached per process: the files' contents are read by :func:`claim_hash` on every call.
    """
    seen: set[str] = set()
    files: set[Path] = set()
    todo = [*start, RULE_MODULE]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(2, len(parts))]  # parent packages run on import
        if name in HARNESS and name != RULE_MODULE:
            continue
        path = _module_file(name, root)
        if path is None:
            continue
        files.add(path)
        if path.name == "__init__.py" and name.startswith("neurips26.claims."):
            for extra in sorted(path.parent.rglob("*.py")):  # every file of a claim package
                rel = extra.relative_to(root).with_suffix("")
                todo.append(".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts))
        todo += sorted(_imported_modules(path, name, root))
    return tuple(sorted(files))


def _module_of(path: Path, root: Path) -> str | None:
    try:
        rel = Path(path).resolve().relative_to(root).with_suffix("")
    except ValueError:
        return None
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def claim_modules(claim: Claim, root: Path = SRC_ROOT) -> tuple[str, ...]:
    """Where a claim's code starts: the module of its ``run``, its claim module and its method module.

    A ``run`` defined outside the package (a test's toy claim) contributes the ``neurips26`` modules its
    file imports.
    """
    import inspect

    from neurips26.registry import method_info

    start: set[str] = set()
    try:
        source = Path(inspect.getsourcefile(claim.run) or "")
    except TypeError:
        source = None
    if source is not None and source.is_file():
        module = _module_of(source, root)
        if module is not None:
            start.add(module)
        else:
            start.update(_imported_modules(source, None, root))
    info = method_info(claim.slug)
    if info is not None:
        start.update({info.module, info.claim_module})
    return tuple(sorted(start))


def claim_hash(claim: Claim, root: Path = SRC_ROOT) -> str:
    """SHA-256 (16 hex digits) of every source file in the claim's :func:`module_closure`.

    Each file contributes its path relative to ``root`` and its bytes, in sorted order.
    """
    digest = hashlib.sha256()
    for path in module_closure(claim_modules(claim, root), root):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def config_hash(config: dict[str, Any]) -> str:
    blob = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _load_avg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def provenance(claim: Claim, profile: Profile) -> dict[str, Any]:
    """Commit, dirty flag (untracked files included), claim-source and config hashes: taken at the start."""
    git = _git_commit()
    return {
        "commit": git["commit"],
        "dirty": git["dirty"],
        "load_avg_1m": _load_avg(),
        "claim_hash": claim_hash(claim),
        "config_hash": config_hash(claim.configs[profile.value]),
        "captured": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def config_threads(claim: Claim, profile: Profile) -> int:
    """The ``threads`` entry of ``claim``'s config for ``profile``: an int >= 1, else :class:`ValueError`.

    Every profile config declares the intra-op torch thread count its run uses; the runner sets it
    around each seed, so no claim sets thread counts itself and numbers do not depend on the machine's
    default.
    """
    threads = claim.configs[profile.value].get("threads")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(
            f"claim {claim.slug!r}: configs[{profile.value!r}] must set 'threads' (the intra-op torch threads "
            f"of a seed's run) to an int >= 1, got {threads!r}"
        )
    return threads


def run_seed(claim: Claim, profile: Profile, seed: int) -> tuple[SeedResult, float]:
    """Seed everything, run one seed under the config's ``threads``, return result and wall time.

    :func:`last_cold_wall` then gives the wall time plus the recorded build time of every cache entry
    the seed found on disk.
    """
    global _last_cold, _last_cpu
    reset_build_clock()
    cpu0 = _cpu_seconds()
    from neurips26.common.seeding import seed_everything
    from neurips26.common.threads import torch_threads

    threads = config_threads(claim, profile)
    seed_everything(seed)
    config = dict(claim.configs[profile.value])
    start = time.perf_counter()
    with torch_threads(threads):
        result = claim.run(config, seed)
    if not isinstance(result, SeedResult):
        raise TypeError(f"claim {claim.slug!r}: run() must return SeedResult, got {type(result).__name__}")
    reported = {arm for arms in result.metrics.values() for arm in arms}
    unknown = reported - set(claim.arms)
    if unknown:
        raise ValueError(f"claim {claim.slug!r}: run() reported unknown arms {sorted(unknown)}")
    wall = time.perf_counter() - start
    _last_cold = wall + hit_build_seconds()
    _last_cpu = _cpu_seconds() - cpu0
    return result, wall


_last_cold = 0.0
_last_cpu = 0.0


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children (e.g. gloo ranks)."""
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def last_cpu_seconds() -> float:
    """CPU seconds of the last :func:`run_seed` in this process (its own and its children's)."""
    return _last_cpu


def last_cold_wall() -> float:
    """Cold-cache wall time of the last :func:`run_seed` in this process."""
    return _last_cold


def _ray_run_seed(claim: Claim, profile: str, seed: int) -> tuple[dict[str, Any], float, float, float]:
    result, wall = run_seed(claim, Profile(profile), seed)
    return result.to_dict(), wall, last_cold_wall(), last_cpu_seconds()


def _paths(out: Path, slug: str, profile: Profile) -> tuple[Path, Path]:
    return out / profile.value / f"{slug}.json", out / ".partial" / profile.value / slug


def _warnings(data: dict[str, Any]) -> list[str]:
    out = []
    prov = data["provenance"]
    if prov.get("dirty"):
        out.append("dirty: the checkout had uncommitted or untracked changes when the run started")
    if prov.get("commit") is None:
        out.append("no git commit recorded")
    cores = os.cpu_count() or 1
    loads = [x for x in (prov.get("load_avg_1m"), data.get("load_avg_1m_end")) if x is not None]
    if loads and max(loads) > cores + 0.5:
        out.append(
            f"loaded machine: 1-minute load average up to {max(loads):.1f} on {cores} cores, so wall times "
            "and timing metrics are inflated"
        )
    if data["over_budget"]:
        out.append(f"over budget: {data['cold_wall_s']:.0f} s cold > {data['budget_s']:.0f} s")
    for judged in (*data["premises"], *data["criteria"]):
        if judged.get("error"):
            out.append(f"criterion {judged['key']} errored: {judged['error']}")
    edges = set()
    for info in data["info"]:
        for name, sweep in ((info or {}).get("sweeps") or {}).items():
            if isinstance(sweep, dict) and sweep.get("at_edge"):
                edges.add(f"sweep {name!r} chose {sweep.get('chosen')} at the edge of its grid {sweep.get('grid')}")
    out += sorted(edges)
    return out


def aggregate(
    claim: Claim,
    profile: Profile,
    seeds: Sequence[int],
    per_seed: dict[int, dict],
    walls: dict[int, float],
    colds: dict[int, float] | None = None,
    prov: dict[str, Any] | None = None,
    env: dict[str, Any] | None = None,
    cpus: dict[int, float] | None = None,
) -> dict[str, Any]:
    """Build the result dict (schema above) from per-seed results."""
    from neurips26.registry import method_info

    colds = colds or walls
    cpus = cpus or {}
    metrics: dict[str, dict[str, list[float]]] = {}
    curves: dict[str, dict[str, list[list[float]]]] = {}
    for seed in seeds:
        for name, arms in per_seed[seed]["metrics"].items():
            for arm, value in arms.items():
                metrics.setdefault(name, {}).setdefault(arm, []).append(float(value))
        for name, arms in per_seed[seed].get("curves", {}).items():
            for arm, values in arms.items():
                curves.setdefault(name, {}).setdefault(arm, []).append([float(v) for v in values])
    judged = judge_claim(claim, metrics)
    info = method_info(claim.slug)
    wall = sum(walls[s] for s in seeds)
    cold = sum(colds.get(s, walls[s]) for s in seeds)
    data = {
        "schema": SCHEMA_VERSION,
        "slug": claim.slug,
        "title": f"{info.name}: {info.title}" if info else claim.slug,
        "paper": {"seed": info.seed, "paragraph": info.paragraph, "starts": info.seed_start} if info else {},
        "claim": claim.claim,
        "profile": profile.value,
        "seeds": list(seeds),
        "method": claim.method,
        "baselines": list(claim.baselines),
        "references": list(claim.references),
        **judged,
        "items": {m: n[profile.value] for m, n in claim.items.items() if profile.value in n},
        "metrics": metrics,
        "curves": curves,
        "info": [per_seed[s].get("info", {}) for s in seeds],
        "wall_s": wall,
        "cold_wall_s": cold,
        "seed_wall_s": [walls[s] for s in seeds],
        "seed_cold_wall_s": [colds.get(s, walls[s]) for s in seeds],
        "cpu_s": sum(cpus.get(s, math.nan) for s in seeds),
        "seed_cpu_s": [cpus.get(s) for s in seeds],
        "budget_s": profile.budget_s,
        "over_budget": cold > profile.budget_s,
        "provenance": prov if prov is not None else provenance(claim, profile),
        "load_avg_1m_end": _load_avg(),
        "config": claim.configs[profile.value],
        "env": env if env is not None else capture_env(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "implemented": claim.implemented,
        "differences": claim.differences,
        "data": claim.data,
        "glossary": claim.glossary,
        "display_names": dict(claim.display_names),
        "command": rerun_command(claim.slug, profile, seeds),
    }
    data["warnings"] = _warnings(data)
    for judged_list in (data["premises"], data["criteria"]):
        for entry in judged_list:
            entry["numbers"] = {k: _finite_or_text(v) for k, v in entry["numbers"].items()}
    return data


def rerun_command(slug: str, profile: Profile, seeds: Sequence[int]) -> str:
    """The command that regenerates a result exactly: profile and seeds (always given explicitly)."""
    return f"neurips26 check {slug} --profile {profile.value} --force --seeds {','.join(str(s) for s in seeds)}"


def _finite_or_text(value: Any) -> Any:
    """Strict JSON has no inf/NaN: write them as the strings ``"inf"``, ``"-inf"``, ``"nan"``."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def run_claim(
    slug: str | Claim,
    profile: str | Profile = Profile.QUICK,
    *,
    seeds: Sequence[int] | None = None,
    out: Path | None = None,
    force: bool = False,
    executor: str = "local",
    on_seed: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Run (or reuse) one claim check and return its result dict.

    Parameters
    ----------
    slug : str or Claim
        Registry slug, whose ``neurips26.claims.<slug>.CLAIM`` is run, or a ``Claim`` object.
    profile : {"smoke", "quick", "full"}
    seeds : sequence of int, optional
        Overrides the claim's seeds for the profile.
    out : Path, optional
        Results folder (default ``$NEURIPS26_RESULTS`` or ``results``).
    force : bool
        Rerun even if a final result or per-seed partials exist.
    executor : {"local", "ray"}
        ``ray`` submits each seed as a Ray task (``pip install 'neurips26[ray]'``; honours ``RAY_ADDRESS``).
    """
    from neurips26.registry import load_claim

    profile = Profile.parse(profile)
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {list(EXECUTORS)}, got {executor!r}")
    claim = slug if isinstance(slug, Claim) else load_claim(slug)
    slug = claim.slug
    config_threads(claim, profile)  # fail before any seed runs
    seeds = tuple(claim.seeds[profile.value] if seeds is None else seeds)
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds):
        raise ValueError(f"seeds must be a non-empty sequence of non-negative ints, got {seeds!r}")
    out = Path(out) if out is not None else default_out()
    final, partial = _paths(out, slug, profile)
    prov = provenance(claim, profile)  # at the start: the code and config that run
    env = capture_env()
    hashes = {"claim_hash": prov["claim_hash"], "config_hash": prov["config_hash"]}
    existing = _read_json(final, "result") if final.exists() and not force else None
    if existing is not None:
        same = all(existing.get("provenance", {}).get(k) == v for k, v in hashes.items())
        if existing.get("seeds") == list(seeds) and existing.get("schema") == SCHEMA_VERSION and same:
            return rejudge(existing, claim)  # the stored metrics, judged by the current rule
    per_seed: dict[int, dict] = {}
    walls: dict[int, float] = {}
    colds: dict[int, float] = {}
    cpus: dict[int, float] = {}
    reset_build_clock(new_run=True)
    for seed in seeds:
        path = partial / f"seed-{seed}.json"
        saved = _read_json(path, "partial seed result") if path.exists() and not force else None
        if saved is not None:
            if saved.get("provenance") != hashes:  # other code or config: never mix it in
                path.unlink(missing_ok=True)
                continue
            per_seed[seed], walls[seed] = saved["result"], saved["wall_s"]
            colds[seed] = saved.get("cold_wall_s", saved["wall_s"])
            if saved.get("cpu_s") is not None:
                cpus[seed] = saved["cpu_s"]
    todo = [s for s in seeds if s not in per_seed]

    def _store(seed: int, result: dict, wall: float, cold: float, cpu: float) -> None:
        per_seed[seed], walls[seed], colds[seed], cpus[seed] = result, wall, cold, cpu
        record = {"result": result, "wall_s": wall, "cold_wall_s": cold, "cpu_s": cpu, "provenance": hashes}
        _write(partial / f"seed-{seed}.json", json.dumps(record, default=_json_default))
        if on_seed is not None:
            on_seed(seed)

    if executor == "ray" and todo:
        from neurips26.common.optional import require

        ray = require("ray", "ray")
        if not ray.is_initialized():
            ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False)
        remote = ray.remote(_ray_run_seed)
        refs = {seed: remote.remote(claim, profile.value, seed) for seed in todo}
        for seed, ref in refs.items():
            result, wall, cold, cpu = ray.get(ref)
            _store(seed, result, wall, cold, cpu)
    else:
        for seed in todo:
            result, wall = run_seed(claim, profile, seed)
            _store(seed, result.to_dict(), wall, last_cold_wall(), last_cpu_seconds())
    data = aggregate(claim, profile, seeds, per_seed, walls, colds, prov, env, cpus)
    _write(final, json.dumps(data, indent=1, sort_keys=False, default=_json_default))
    return data


def _read_json(path: Path, what: str) -> dict[str, Any] | None:
    """A stored result, or None (with a warning, the file removed) when it is not a readable JSON object.

    A run killed by the operating system can never leave a half-written file (every write is a temp
    file plus a rename), but a file edited or damaged by other means must not stop a rerun.
    """
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        reason = f"{type(err).__name__}: {err}"
    else:
        if isinstance(data, dict):
            return data
        reason = f"a JSON {type(data).__name__}, not an object"
    _line(f"warning: {what} {path} is unreadable ({reason}); it is discarded and recomputed")
    path.unlink(missing_ok=True)
    return None


def _write(path: Path, text: str) -> None:
    """Atomic write with a clear error (a full disk leaves no partial file: the temp file is removed)."""
    try:
        atomic_write_text(path, text)
    except OSError as err:
        raise OSError(
            err.errno, f"could not write {path}: {err.strerror or err} (nothing was written; free space and rerun)"
        ) from err


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def _line(text: str) -> None:
    """One plain line per claim start and end, on stderr, so that a long run is never silent."""
    print(text, file=sys.stderr, flush=True)


def run_many(slugs: Iterable[str], profile: str | Profile, **kwargs: Any) -> list[dict[str, Any]]:
    """Run several claims with a rich progress bar; failures are reported and re-raised at the end."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    slugs = list(slugs)
    results, errors = [], []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        transient=False,
    ) as progress:
        task = progress.add_task("claims", total=len(slugs))
        name = Profile.parse(profile).value
        for slug in slugs:
            progress.update(task, description=f"{slug} ({name})")
            _line(f"[neurips26] start {slug} ({name})")
            start = time.perf_counter()
            try:
                result = run_claim(slug, profile, **kwargs)
                results.append(result)
                _line(
                    f"[neurips26] end   {slug} ({name}): {result['verdict']}"
                    + (f" ({result.get('verdict_reason')})" if result.get("verdict") == "inconclusive" else "")
                    + f", {time.perf_counter() - start:.1f} s here, recorded wall {result['wall_s']:.1f} s, "
                    f"cold {result.get('cold_wall_s', result['wall_s']):.1f} s"
                    + ("  OVER BUDGET" if result.get("over_budget") else "")
                )
            except Exception as err:  # noqa: BLE001 - keep going, report at the end
                errors.append((slug, err))
                _line(f"[neurips26] end   {slug} ({name}): FAILED {type(err).__name__}: {err}")
            progress.advance(task)
    if errors:
        names = ", ".join(s for s, _ in errors)
        raise RuntimeError(f"{len(errors)} claim check(s) failed: {names}") from errors[0][1]
    return results

"""Run claim checks: seeds, timing, environment capture, idempotent atomic JSON results, executors.

Layout on disk (``out`` defaults to ``results/``)::

    results/<profile>/<slug>.json                  final result (schema below)
    results/.partial/<profile>/<slug>/seed-<n>.json  one file per finished seed, for resuming

A final result that exists is reused unless ``force=True``. An interrupted run resumes from its
finished seeds. Every file is written to a temporary name and renamed into place.

Result schema (version 1)
-------------------------
``schema``: 1; ``slug``; ``title``; ``paper`` (seed file and paragraph); ``claim`` (text);
``profile``; ``seeds`` (list); ``method``; ``baselines``; ``criteria`` (list of
``{text, data, verdict, numbers}``); ``verdict``; ``metrics`` (``name -> arm -> [per-seed]``);
``curves`` (``name -> arm -> [per-seed list]``); ``info`` (``[per-seed dict]``); ``wall_s``;
``seed_wall_s``; ``budget_s``; ``over_budget``; ``config``; ``env``; ``created``;
``implemented``; ``differences``; ``data``; ``glossary``; ``command``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from neurips26.claims.base import Claim, Profile, SeedResult, judge_claim
from neurips26.common.cache import atomic_write_text

SCHEMA_VERSION = 1
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
    """HEAD of the checkout at ``root`` (default: this package's) and whether its tracked files differ,
    ignoring ``results/`` (rewritten by the runs themselves)."""
    root = Path(__file__).resolve().parents[3] if root is None else Path(root)
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(  # results/ is what the runs write: not a change of the code that ran
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results"],
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

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "versions": versions,
        "git": _git_commit(),
    }


def run_seed(claim: Claim, profile: Profile, seed: int) -> tuple[SeedResult, float]:
    """Seed everything, run one seed under the config's ``threads`` (if given), return result and wall time."""
    from neurips26.common.seeding import seed_everything
    from neurips26.common.threads import torch_threads

    seed_everything(seed)
    config = dict(claim.configs[profile.value])
    start = time.perf_counter()
    with torch_threads(config.get("threads")):
        result = claim.run(config, seed)
    if not isinstance(result, SeedResult):
        raise TypeError(f"claim {claim.slug!r}: run() must return SeedResult, got {type(result).__name__}")
    reported = {arm for arms in result.metrics.values() for arm in arms}
    unknown = reported - set(claim.arms)
    if unknown:
        raise ValueError(f"claim {claim.slug!r}: run() reported unknown arms {sorted(unknown)}")
    return result, time.perf_counter() - start


def _ray_run_seed(claim: Claim, profile: str, seed: int) -> tuple[dict[str, Any], float]:
    result, wall = run_seed(claim, Profile(profile), seed)
    return result.to_dict(), wall


def _paths(out: Path, slug: str, profile: Profile) -> tuple[Path, Path]:
    return out / profile.value / f"{slug}.json", out / ".partial" / profile.value / slug


def aggregate(
    claim: Claim, profile: Profile, seeds: Sequence[int], per_seed: dict[int, dict], walls: dict[int, float]
) -> dict[str, Any]:
    """Build the result dict (schema above) from per-seed results."""
    from neurips26.registry import BY_SLUG

    metrics: dict[str, dict[str, list[float]]] = {}
    curves: dict[str, dict[str, list[list[float]]]] = {}
    for seed in seeds:
        for name, arms in per_seed[seed]["metrics"].items():
            for arm, value in arms.items():
                metrics.setdefault(name, {}).setdefault(arm, []).append(float(value))
        for name, arms in per_seed[seed].get("curves", {}).items():
            for arm, values in arms.items():
                curves.setdefault(name, {}).setdefault(arm, []).append([float(v) for v in values])
    verdict, judged = judge_claim(claim, metrics)
    info = BY_SLUG.get(claim.slug)
    wall = sum(walls[s] for s in seeds)
    return {
        "schema": SCHEMA_VERSION,
        "slug": claim.slug,
        "title": f"{info.name}: {info.title}" if info else claim.slug,
        "paper": {"seed": info.seed, "paragraph": info.paragraph, "starts": info.seed_start} if info else {},
        "claim": claim.claim,
        "profile": profile.value,
        "seeds": list(seeds),
        "method": claim.method,
        "baselines": list(claim.baselines),
        "criteria": judged,
        "verdict": verdict,
        "metrics": metrics,
        "curves": curves,
        "info": [per_seed[s].get("info", {}) for s in seeds],
        "wall_s": wall,
        "seed_wall_s": [walls[s] for s in seeds],
        "budget_s": profile.budget_s,
        "over_budget": wall > profile.budget_s,
        "config": claim.configs[profile.value],
        "env": capture_env(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "implemented": claim.implemented,
        "differences": claim.differences,
        "data": claim.data,
        "glossary": claim.glossary,
        "command": f"neurips26 check {claim.slug} --profile {profile.value} --force",
    }


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
    seeds = tuple(claim.seeds[profile.value] if seeds is None else seeds)
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds):
        raise ValueError(f"seeds must be a non-empty sequence of non-negative ints, got {seeds!r}")
    out = Path(out) if out is not None else default_out()
    final, partial = _paths(out, slug, profile)
    if final.exists() and not force:
        existing = json.loads(final.read_text())
        if existing.get("seeds") == list(seeds):
            return existing
    per_seed: dict[int, dict] = {}
    walls: dict[int, float] = {}
    for seed in seeds:
        path = partial / f"seed-{seed}.json"
        if path.exists() and not force:
            saved = json.loads(path.read_text())
            per_seed[seed], walls[seed] = saved["result"], saved["wall_s"]
    todo = [s for s in seeds if s not in per_seed]

    def _store(seed: int, result: dict, wall: float) -> None:
        per_seed[seed], walls[seed] = result, wall
        atomic_write_text(partial / f"seed-{seed}.json", json.dumps({"result": result, "wall_s": wall}))
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
            result, wall = ray.get(ref)
            _store(seed, result, wall)
    else:
        for seed in todo:
            result, wall = run_seed(claim, profile, seed)
            _store(seed, result.to_dict(), wall)
    data = aggregate(claim, profile, seeds, per_seed, walls)
    atomic_write_text(final, json.dumps(data, indent=1, sort_keys=False, default=_json_default))
    return data


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


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
        for slug in slugs:
            progress.update(task, description=f"{slug} ({Profile.parse(profile).value})")
            try:
                results.append(run_claim(slug, profile, **kwargs))
            except Exception as err:  # noqa: BLE001 - keep going, report at the end
                errors.append((slug, err))
                progress.console.print(f"[red]{slug} failed: {type(err).__name__}: {err}")
            progress.advance(task)
    if errors:
        names = ", ".join(s for s, _ in errors)
        raise RuntimeError(f"{len(errors)} claim check(s) failed: {names}") from errors[0][1]
    return results

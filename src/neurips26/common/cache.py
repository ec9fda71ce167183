"""On-disk cache for trained models and generated data.

Entries live under ``$NEURIPS26_CACHE`` (default ``~/.cache/neurips26``) in
``<namespace>/<key>/``, where the key hashes the JSON-serialised config (which should include the
seed) and a code version. Each entry is built in a temporary folder and renamed into place, so a
reader never sees half an entry. A ``MANIFEST.json`` records the SHA-256 of every file; an entry whose
files do not match it is treated as corrupt and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from neurips26 import __version__

MANIFEST = "MANIFEST.json"

# Seconds that the cache entries served from disk took to build when they were made: the runner
# adds them to a claim's wall time to report what the run would cost on a cold cache. Each entry
# counts at most once per run, and not at all when this run built it (its build is in the wall time).
_hit_build_s = 0.0
_counted: set[str] = set()


def reset_build_clock(new_run: bool = False) -> None:
    """Start counting the recorded build time of cache hits from zero.

    ``new_run=True`` also forgets which entries this run already counted or built.
    """
    global _hit_build_s
    _hit_build_s = 0.0
    if new_run:
        _counted.clear()


def hit_build_seconds() -> float:
    """Recorded build time of every cache entry served from disk since :func:`reset_build_clock`."""
    return _hit_build_s


def cache_root() -> Path:
    """The cache folder: ``$NEURIPS26_CACHE`` or ``~/.cache/neurips26``."""
    root = os.environ.get("NEURIPS26_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "neurips26"


def cache_key(config: dict[str, Any], code_version: str = __version__) -> str:
    """Stable 16-hex-digit key from a JSON-serialisable config and a code version."""
    if not isinstance(config, dict):
        raise TypeError(f"config must be a dict, got {type(config).__name__}")
    try:
        blob = json.dumps({"config": config, "code": code_version}, sort_keys=True, default=str)
    except (TypeError, ValueError) as err:
        raise ValueError(f"config must be JSON-serialisable: {err}") from err
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_manifest(folder: Path, config: dict[str, Any], build_s: float | None = None) -> None:
    files = {str(p.relative_to(folder)): _sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}
    record = {"config": config, "files": files, "build_s": build_s}
    (folder / MANIFEST).write_text(json.dumps(record, default=str, indent=1))


def _recorded_build_s(folder: Path) -> float:
    try:
        value = json.loads((folder / MANIFEST).read_text()).get("build_s")
    except (OSError, ValueError):
        return 0.0
    return float(value) if isinstance(value, (int, float)) else 0.0


def entry_is_valid(folder: Path) -> bool:
    """True when ``folder`` holds a manifest and every listed file matches its checksum."""
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return False
    try:
        files = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError):
        return False
    return all(
        (folder / name).is_file() and _sha256(folder / name) == digest for name, digest in files.items()
    )


def cached_dir(
    namespace: str,
    config: dict[str, Any],
    build: Callable[[Path], None],
    *,
    code_version: str = __version__,
) -> Path:
    """Return the folder of a valid cache entry, building it with ``build(tmp_folder)`` if needed.

    Parameters
    ----------
    namespace : str
        Kind of entry, e.g. ``"tiny-lm"``; a plain folder name.
    config : dict
        Everything the entry depends on, seed included.
    build : callable
        Writes the entry's files into the folder it is given.
    code_version : str
        Bump to invalidate entries when the building code changes.
    """
    if not isinstance(namespace, str) or not namespace or "/" in namespace:
        raise ValueError(f"namespace must be a non-empty folder name, got {namespace!r}")
    target = cache_root() / namespace / cache_key(config, code_version)
    global _hit_build_s
    if entry_is_valid(target):
        if str(target) not in _counted:
            _counted.add(str(target))
            _hit_build_s += _recorded_build_s(target)
        return target
    if target.exists():
        warnings.warn(
            f"cache entry {target} is incomplete or damaged (missing manifest or a checksum mismatch); rebuilding it",
            RuntimeWarning,
            stacklevel=2,
        )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    except OSError as err:
        raise OSError(err.errno, f"could not create the cache folder {target.parent}: {err.strerror or err}") from err
    try:
        start = time.perf_counter()
        build(tmp)
        _write_manifest(tmp, config, build_s=time.perf_counter() - start)
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
        _counted.add(str(target))
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise OSError(
            err.errno,
            f"could not write the cache entry {target}: {err.strerror or err} (nothing was kept; free space "
            "or point NEURIPS26_CACHE elsewhere)",
        ) from err
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def cached_object(
    namespace: str,
    config: dict[str, Any],
    build: Callable[[], Any],
    *,
    code_version: str = __version__,
) -> Any:
    """Cache any ``torch.save``-able object (tensors, dicts of tensors, lists, numbers)."""
    import torch

    def _build(folder: Path) -> None:
        torch.save(build(), folder / "object.pt")

    folder = cached_dir(namespace, config, _build, code_version=code_version)
    return torch.load(folder / "object.pt", weights_only=False)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

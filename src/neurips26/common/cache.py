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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from neurips26 import __version__

MANIFEST = "MANIFEST.json"


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


def _write_manifest(folder: Path, config: dict[str, Any]) -> None:
    files = {str(p.relative_to(folder)): _sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}
    (folder / MANIFEST).write_text(json.dumps({"config": config, "files": files}, default=str, indent=1))


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
    if entry_is_valid(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        build(tmp)
        _write_manifest(tmp, config)
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
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

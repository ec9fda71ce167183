"""Result files for the report: load them, re-judge them by the current rule, say whether they are fresh.

Freshness compares the claim hash a result recorded with today's
:func:`~neurips26.claims.runner.claim_hash` and the torch it ran on with the installed one.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any


def load_results(folder: Path) -> list[dict[str, Any]]:
    """Every ``*.json`` result in ``folder`` (sorted by slug); files that are not results are skipped."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    results = []
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("schema") in (1, 2) and "slug" in data:
            results.append(data)
    return sorted(results, key=lambda r: r["slug"])


def rejudged(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` re-judged from its metrics by the current rule (:func:`neurips26.claims.base.rejudge`).

    Schema-1 results are returned as they are; a result that cannot be re-judged keeps its recorded
    verdict with a warning saying so.
    """
    if result.get("schema") != 2:
        return result
    from neurips26.claims.base import rejudge

    try:
        return rejudge(result)
    except Exception as err:  # noqa: BLE001 - shown, never hidden
        out = dict(result)
        out["warnings"] = [*result.get("warnings", []), f"not re-judged: {type(err).__name__}: {err}"]
        return out


@functools.cache
def _current_hash(slug: str) -> str | None:
    try:
        from neurips26.claims.runner import claim_hash
        from neurips26.registry import load_claim

        return claim_hash(load_claim(slug))
    except Exception:  # noqa: BLE001 - an unknown or broken claim: unknown
        return None


@functools.cache
def current_torch() -> str | None:
    """The installed torch version without its local part (``2.14.1`` for ``2.14.1+cpu``)."""
    from importlib import metadata

    try:
        return metadata.version("torch").split("+")[0]
    except metadata.PackageNotFoundError:
        return None


def freshness(result: dict[str, Any]) -> dict[str, Any]:
    """Whether a result rests on today's code and stack.

    ``hash``: ``current`` (recorded claim hash = today's :func:`~neurips26.claims.runner.claim_hash`),
    ``stale`` or ``unknown`` (the claim does not load); ``torch``: the recorded version;
    ``torch_current``: whether it equals the installed one (local parts such as ``+cpu`` ignored).
    """
    recorded = (result.get("provenance") or {}).get("claim_hash")
    now = _current_hash(str(result.get("slug", "")))
    state = "unknown" if now is None or not recorded else ("current" if recorded == now else "stale")
    torch = ((result.get("env") or {}).get("versions") or {}).get("torch")
    here = current_torch()
    same = torch is not None and here is not None and str(torch).split("+")[0] == here
    return {"hash": state, "recorded_hash": recorded, "current_hash": now, "torch": torch, "torch_current": same}

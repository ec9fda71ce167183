"""One table cell of the report as text: mean +- sd, numbers, display names, the deciding criterion,
verdict and wall-time text, warnings, and a Markdown table from rows of such cells."""

from __future__ import annotations

import functools
import math
from typing import Any


def mean_std(values: list[float]) -> tuple[float, float]:
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean, std


def fmt(values: list[float] | None) -> str:
    if not values:
        return "n/a"
    mean, std = mean_std(values)
    magnitude = max(abs(mean), std)
    digits = 3 if magnitude < 100 else 1
    return f"{mean:.{digits}f} ± {std:.{digits}f}" if len(values) > 1 else f"{mean:.{digits}f}"


def _num(value: Any, digits: int = 3) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "-"
    if not math.isfinite(value):
        return str(value)
    return (
        _fmt_number(value)
        if value != 0 and (abs(value) >= 1e4 or abs(value) < 1e-3)
        else f"{value:.{digits}f}"
    )


def _fmt_number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "" if value is None else str(value)
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.3g}"
    return f"{value:.4g}"


def _find(result: dict[str, Any], key: str | None) -> dict[str, Any] | None:
    for entry in (*result.get("premises", []), *result.get("criteria", [])):
        if entry.get("key") == key:
            return entry
    return None


def deciding(result: dict[str, Any]) -> dict[str, Any] | None:
    """The criterion (or premise) that decided the verdict; for schema-1 results, the first failing one."""
    found = _find(result, result.get("deciding"))
    if found is not None:
        return found
    crits = result.get("criteria", [])
    failing = [c for c in crits if c.get("verdict") != "reproduced"]
    return (failing or crits or [None])[0]


def display_name(result: dict[str, Any], arm: str) -> str:
    """The arm as the paper writes it: the result's ``display_names`` (older results: the claim's), else ``arm``."""
    names = result.get("display_names")
    if names is None:
        names = _claim_display_names(str(result.get("slug", "")))
    return names.get(arm, arm)


@functools.cache
def _claim_display_names(slug: str) -> dict[str, str]:
    try:
        from neurips26.registry import load_claim

        return dict(load_claim(slug).display_names)
    except Exception:  # an unknown slug or a claim that does not import: print the arm names
        return {}


def describe_numbers(result: dict[str, Any], entry: dict[str, Any] | None) -> str:
    """``metric: arm m ± s vs baseline m ± s (L=.., margin ..)`` for one judged criterion."""
    if entry is None:
        return "-"
    data, nums = entry.get("data", {}), entry.get("numbers", {})
    metric = data.get("metric", "?")
    arm = data.get("arm") or result.get("method")
    arms = result.get("metrics", {}).get(metric, {})
    text = f"{entry.get('key', '')} [{metric}]: {display_name(result, arm)} {fmt(arms.get(arm))}"
    if data.get("baseline"):
        text += f" vs {display_name(result, data['baseline'])} {fmt(arms.get(data['baseline']))}"
    if entry.get("error"):
        return text + f" (error: {entry['error']})"
    if data.get("type") == "Within":
        text += f"; |d| bounds [{_num(nums.get('lower_abs'))}, {_num(nums.get('upper_abs'))}] vs tol {_num(nums.get('tolerance'))}"
    elif data.get("type") == "Exact":
        text += f"; min {_num(nums.get('min'))}, max {_num(nums.get('max'))}, expected {_num(nums.get('expected'))}"
    elif "lower_bound" in nums:
        target = nums.get("margin", nums.get("threshold"))
        what = {"Better": "d", "RatioAtLeast": "ratio"}.get(data.get("type"), "value")
        text += (
            f"; {what} L={_num(nums.get('lower_bound'))} U={_num(nums.get('upper_bound'))} vs {_num(target)}"
        )
    return text


def verdict_text(result: dict[str, Any]) -> str:
    verdict = result.get("verdict", "?")
    reason = result.get("verdict_reason")
    if verdict == "inconclusive" and reason:
        return f"{verdict} ({reason})"
    return verdict


def wall_text(result: dict[str, Any]) -> str:
    warm = result.get("wall_s", math.nan)
    cold = result.get("cold_wall_s", warm)
    return f"{warm:.0f} s" if abs(cold - warm) < 0.5 else f"{warm:.0f} s (cold {cold:.0f} s)"


def warnings_of(result: dict[str, Any]) -> list[str]:
    out = list(result.get("warnings", []))
    if result.get("schema") == 1:
        out.insert(0, "schema 1: not rerun under the v2 rules (no premises, asymmetric decision)")
        if result.get("over_budget"):
            out.append("over budget")
    prov = result.get("provenance") or {}
    if prov.get("dirty") and not any(w.startswith("dirty") for w in out):
        out.append("dirty")
    return out


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    def clean(cell: str) -> str:
        return str(cell).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(clean(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)

"""AMARIS claim: arm names, the paper's operating point and the retention-frontier measures both arms use."""

from __future__ import annotations

import numpy as np

METHOD = "amaris"
BASELINES = ("task_arithmetic", "ties", "dare")
REFERENCES = ("base", "specialist")
#: The paper's finance operating point: 98.37 % specialist retention with 95.76 % core retention.
HEADLINE_SPEC, HEADLINE_CORE = 0.9837, 0.9576


def _hypervolume(points: list[tuple[float, float]]) -> float:
    """Area dominated by the points in [0, 1]^2 w.r.t. (0, 0) (retentions clipped to 1)."""
    pts = sorted(((min(max(a, 0), 1), min(max(b, 0), 1)) for a, b in points), reverse=True)
    area, best_b = 0.0, 0.0
    for a, b in pts:  # sweep by decreasing specialist retention
        if b > best_b:
            area += a * (b - best_b)
            best_b = b
    return area


def _frontier(points):
    pts = sorted(points, key=lambda p: (-p[0], -p[1]))
    out, best = [], -np.inf
    for a, b in pts:
        if b > best:
            out.append((a, b))
            best = b
    return out

"""Claim checks: one module per paper, each defining ``CLAIM`` (a :class:`~neurips26.claims.base.Claim`)."""

from neurips26.claims.base import (
    AtLeast,
    AtMost,
    Better,
    Claim,
    ClaimResult,
    Criterion,
    Exact,
    Profile,
    RatioAtLeast,
    SeedResult,
    Within,
)

__all__ = [
    "AtLeast",
    "AtMost",
    "Better",
    "Claim",
    "ClaimResult",
    "Criterion",
    "Exact",
    "Profile",
    "RatioAtLeast",
    "SeedResult",
    "Within",
]

"""One seeding function for python, numpy and torch."""

from __future__ import annotations

import random

import numpy as np
import torch

from neurips26.common.checks import check_int


def seed_everything(seed: int) -> torch.Generator:
    """Seed ``random``, ``numpy`` and ``torch`` and return a fresh ``torch.Generator`` with that seed.

    Parameters
    ----------
    seed : int
        Non-negative integer seed.

    Returns
    -------
    torch.Generator
        A CPU generator seeded with ``seed``, for code that prefers explicit generators.
    """
    check_int("seed", seed, low=0)
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator

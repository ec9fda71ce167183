"""DLM-Distill claim check: the exact oracle of the Markov source, and the smoke profile's structure. Generic
smoke checks (finiteness, determinism, glossary, plot): test_conformance.py."""

import itertools
import math

import numpy as np
import torch

from neurips26.claims.dlm_distill import CLAIM, MarkovSource


def _three_token_source():
    pi = [0.5, 0.3, 0.2]
    p1 = [[0.1, 0.6, 0.3], [0.2, 0.2, 0.6], [0.7, 0.2, 0.1]]
    p2 = np.full((3, 3, 3), 1.0 / 3)
    p2[0, 1] = [0.8, 0.1, 0.1]
    p2[1, 2] = [0.05, 0.05, 0.9]
    return MarkovSource(3, tables=(pi, p1, p2))


def test_oracle_nll_exact_on_three_token_source():
    src = _three_token_source()
    # hand-computed: x = (0, 1, 2, 0): pi(0) p1(1|0) p2(2|0,1) p2(0|1,2)
    expected = -math.log(0.5 * 0.6 * 0.1 * 0.05) / 4
    assert src.nll(torch.tensor([[0, 1, 2, 0]]))[0] == np.float64(expected) or math.isclose(
        src.nll(torch.tensor([[0, 1, 2, 0]]))[0], expected, rel_tol=1e-12
    )
    # the likelihoods of all 3^4 sequences sum to one
    seqs = torch.tensor(list(itertools.product(range(3), repeat=4)))
    total = np.exp(-4 * src.nll(seqs)).sum()
    assert math.isclose(total, 1.0, rel_tol=1e-12)
    # sampling follows the tables: empirical mean NLL matches the exact entropy of length-4 sequences
    probs = np.exp(-4 * src.nll(seqs))
    entropy = float(-(probs * np.log(probs)).sum() / 4)
    emp = src.nll(src.sample(20_000, 4, seed=0)).mean()
    assert abs(emp - entropy) < 0.02


def test_smoke_arms_and_budget(smoke_result):
    a = smoke_result("dlm_distill")
    assert set(a["metrics"]["oracle_nll"]) == set(CLAIM.arms)
    assert set(CLAIM.glossary) == set(a["metrics"])
    assert a["metrics"]["mask_free_samples"]["dlm_distill"] == [1.0]
    budget = a["info"][0]["budget"]
    assert len({rec["steps"] for rec in budget.values()}) == 1  # equal student-update budgets

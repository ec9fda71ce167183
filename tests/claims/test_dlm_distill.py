"""DLM-Distill claim check: the KJV character data, the Kneser-Ney evaluator, the transformer denoiser on the
judged path, the arms' equal budgets and the smoke profile's structure. Generic smoke checks (finiteness,
same seed -> same metrics, glossary, plot): test_conformance.py."""

import math

import numpy as np
import pytest
import torch

from neurips26.claims import dlm_distill as claim
from neurips26.claims.dlm_distill import CLAIM
from neurips26.testbeds.text_diffusion import (
    ALPHABET,
    MASK_ID,
    VOCAB,
    CharKneserNey,
    TransformerDenoiser,
    decode,
    encode,
    normalize_text,
)


def test_kneser_ney_hand_computed_and_normalised():
    # text "abab", order 2, D = 0.5: bigram counts ab:2, ba:1; continuation counts a:1, b:1
    lm = CharKneserNey("abab", alphabet="ab", order=2, discount=0.5)
    p_a = (0.5 + 0.5 * 2 * 0.5) / 2  # unigram level: (max(1 - D, 0) + D * 2 types * 1/V) / 2
    assert math.isclose(lm.prob("a", ""), p_a)
    p_b_a = (1.5 + 0.5 * 1 * lm.prob("b", "")) / 2
    assert math.isclose(lm.prob("b", "a"), p_b_a)
    assert math.isclose(lm.prob("a", "a"), 0.5 * 1 * lm.prob("a", "") / 2)
    assert math.isclose(lm.nll(["ab"])[0], -(math.log(p_a) + math.log(p_b_a)) / 2)
    big = CharKneserNey("the lord said unto moses, and the people. ", order=4)
    for ctx in ("", "th", "the lo", "zzzzz", "q"):
        assert math.isclose(sum(big.prob(c, ctx) for c in ALPHABET), 1.0, rel_tol=1e-12)
    # a fluent string scores better than the same characters shuffled
    rng = np.random.default_rng(0)
    s = "and the people said"
    assert big.nll([s])[0] < big.nll(["".join(rng.permutation(list(s)))])[0]


def test_kneser_ney_bad_input():
    with pytest.raises(ValueError, match="order"):
        CharKneserNey("ab", alphabet="ab", order=0)
    with pytest.raises(ValueError, match="discount"):
        CharKneserNey("ab", alphabet="ab", discount=1.0)
    with pytest.raises(ValueError, match="outside the alphabet"):
        CharKneserNey("abc", alphabet="ab")
    with pytest.raises(ValueError, match="non-empty"):
        CharKneserNey("ab", alphabet="ab").nll([""])


def test_text_normalisation_and_codec():
    assert (
        normalize_text("In the Beginning (God)  created-the\nheaven.")
        == "in the beginning god created the heaven."
    )
    ids = encode("And God said, Let there be light!")
    assert ids.dtype == np.int64 and ids.max() < VOCAB
    assert decode(ids) == "and god said, let there be light!"
    assert decode([0, MASK_ID, 1]) == "a_b"
    with pytest.raises(TypeError, match="text"):
        normalize_text(3)


def test_kjv_splits_are_disjoint_real_text():
    splits = claim.kjv_splits()
    assert (
        len(splits["train"]) > 2_000_000 and len(splits["eval"]) > 500_000 and len(splits["test"]) > 200_000
    )
    assert set("".join(splits.values())) <= set(ALPHABET)
    # no 200-character passage of the test split occurs in the teacher's training text
    test = splits["test"]
    for start in (1_000, 100_000, 300_000):
        assert test[start : start + 200] not in splits["train"]
    g = torch.Generator().manual_seed(0)
    w = claim.text_windows("test", 5, 32, g)
    assert w.shape == (5, 32) and w.dtype == torch.long and w.max() < VOCAB


def test_transformer_denoiser_is_bidirectional_and_deterministic():
    m = TransformerDenoiser(2, 32, seed=3)
    x = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    out = m(x)
    assert out.shape == (2, 12, VOCAB + 1)
    y = x.clone()
    y[:, -1] = (y[:, -1] + 1) % VOCAB
    assert (m(y)[:, 0] - out[:, 0]).abs().max() > 1e-6  # the first position sees the last: non-causal
    bias = m.attention_bias(6)
    assert bias.shape == (2, 6, 6)
    assert (bias.diagonal(dim1=1, dim2=2) == 0).all() and (bias < 0).sum() == 2 * 30
    # two-sided: head 0 decays twice as fast to the right (keys after the query) as to the left; head 1 mirrors it
    assert bias[0, 2, 3].item() == -2.0 and bias[0, 2, 1].item() == -1.0
    torch.testing.assert_close(bias[1], bias[0].T)
    # the model tells left from right: reversing the input does not just reverse the output
    rev = m(x.flip(1)).flip(1)
    assert (rev - out).abs().max() > 1e-4
    m.eval()
    with torch.no_grad():  # eval (inference) output equals train output: no fast-path divergence
        torch.testing.assert_close(m(x), out.detach())
    torch.testing.assert_close(TransformerDenoiser(2, 32, seed=3)(x), out)
    with pytest.raises(ValueError, match="hidden"):
        TransformerDenoiser(1, 40)
    with pytest.raises(ValueError, match="layers"):
        TransformerDenoiser(0, 32)


def test_arm_configs_share_the_budget():
    cfg = CLAIM.configs["full"]
    totals = {
        arm: claim._arm_config(arm, cfg, 64) for arm in (claim.METHOD, *claim.BASELINES, *claim.ABLATIONS)
    }
    steps = {a: c.off_policy_steps + c.on_policy_steps for a, c in totals.items()}
    assert len(set(steps.values())) == 1
    assert {c.lr for c in totals.values()} == {cfg["lr"]} and {c.batch_size for c in totals.values()} == {
        cfg["batch"]
    }
    assert totals["fkl_pool"].denoise_coef == 0 and totals["fkl_pool"].lambda_kd == 1
    assert totals["denoise_pool"].lambda_kd == 0 and totals["denoise_pool"].on_policy_steps == 0
    assert totals[claim.METHOD].on_policy_steps > 0 and totals[claim.METHOD].divergence == "ab"
    with pytest.raises(ValueError, match="arm"):
        claim._arm_config("bogus", cfg, 64)


def test_judged_arms_distil_transformer_denoisers(monkeypatch):
    """The run's method and baseline arms train TransformerDenoiser students against a TransformerDenoiser teacher."""
    seen = []

    class Spy(claim.DLMDistiller):
        def __init__(self, teacher, student, *args, **kwargs):
            seen.append((type(teacher), type(student)))
            super().__init__(teacher, student, *args, **kwargs)

    monkeypatch.setattr(claim, "DLMDistiller", Spy)
    cfg = CLAIM.configs["smoke"]
    teacher = TransformerDenoiser(1, 32, seed=0).eval()
    pool = torch.randint(0, VOCAB, (8, cfg["seq_len"]), generator=torch.Generator().manual_seed(0))
    for arm in (claim.METHOD, *claim.BASELINES):
        student, extra, _ = claim._distil(arm, teacher, cfg, 0, pool)
        assert isinstance(student, TransformerDenoiser) and extra["denoiser"] == "TransformerDenoiser"
    assert seen == [(TransformerDenoiser, TransformerDenoiser)] * 3


def test_smoke_arms_budget_and_denoiser(smoke_result):
    a = smoke_result("dlm_distill")
    assert set(a["metrics"]["gen_nll"]) == set(CLAIM.arms)
    assert set(CLAIM.glossary) == set(a["metrics"])
    assert a["metrics"]["mask_free_samples"]["dlm_distill"] == [1.0]
    info = a["info"][0]
    assert info["denoiser"] == {"teacher": "TransformerDenoiser", "student": "TransformerDenoiser"}
    assert {info["per_arm"][arm]["denoiser"] for arm in (claim.METHOD, *claim.BASELINES)} == {
        "TransformerDenoiser"
    }
    budget = info["budget"]
    assert len({rec["steps"] for rec in budget.values()}) == 1  # equal student-update budgets
    assert len({rec["params"] for rec in budget.values()}) == 1  # the same student

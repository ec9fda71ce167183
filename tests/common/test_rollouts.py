"""Rollouts: masks and log-probs under left padding, group sampling, unbiased pass@k."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.common.models import build_tiny_lm
from neurips26.common.rollouts import (
    completion_mask_from_ids,
    mean_pass_at_k,
    pass_at_k,
    position_ids_from_mask,
    sample,
    sample_groups,
    score_completions,
)
from neurips26.common.tokenizers import ARITHMETIC_ALPHABET, char_tokenizer


@pytest.fixture(scope="module")
def lm():
    tok = char_tokenizer(ARITHMETIC_ALPHABET)
    model = build_tiny_lm("llama", vocab_size=len(tok), seed=0, hidden_size=32, intermediate_size=64)
    model.eval()
    return model, tok


PROMPTS = ["1 2 3>6:", "9>1:", "4 4 4 4 4 4>1:"]


def test_completion_mask_includes_first_eos():
    ids = torch.tensor([[5, 2, 7, 2], [5, 6, 7, 8], [2, 0, 0, 0]])
    assert completion_mask_from_ids(ids, 2).int().tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    assert position_ids_from_mask(torch.tensor([[0, 0, 1, 1, 1]])).tolist() == [[0, 0, 0, 1, 2]]


def test_sample_logprobs_match_teacher_forcing_and_unpadded_rows(lm):
    model, tok = lm
    roll = sample(model, tok, PROMPTS, max_new_tokens=10, temperature=0.8, seed=0)
    assert roll.prompt_mask[0].tolist()[:4] == [0, 0, 0, 0]  # left padding
    mask = roll.completion_mask
    assert mask.dtype == torch.bool and (roll.completion_ids[~mask] == tok.pad_token_id).all()
    scored = score_completions(
        model, roll.prompt_ids, roll.prompt_mask, roll.completion_ids, mask, temperature=0.8
    )
    torch.testing.assert_close(scored["logprobs"][mask], roll.logprobs[mask], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(scored["entropy"][mask], roll.entropy[mask], atol=1e-5, rtol=1e-5)
    for i, prompt in enumerate(PROMPTS):  # each row alone, without padding
        alone = tok([prompt], return_tensors="pt")
        single = score_completions(
            model,
            alone["input_ids"],
            alone["attention_mask"],
            roll.completion_ids[i : i + 1],
            mask[i : i + 1],
            temperature=0.8,
        )
        torch.testing.assert_close(
            single["logprobs"][0][mask[i]], roll.logprobs[i][mask[i]], atol=1e-5, rtol=1e-5
        )
    # integer tokens from padded vs single-row greedy passes (different shapes, logits equal to rounding):
    # portable because every greedy step's top-2 logit gap is checked to exceed twice the rounding bound
    # bound: L * (d + d_ff + T) * eps32 * max|logit|
    cfg = model.config
    greedy = sample(model, tok, PROMPTS, max_new_tokens=10, do_sample=False)
    for i, prompt in enumerate(PROMPTS):
        one = sample(model, tok, [prompt], max_new_tokens=10, do_sample=False)
        new = one.completion_ids[0][one.completion_mask[0].bool()]
        ids = torch.cat([one.prompt_ids[0][one.prompt_mask[0].bool()], new])[None]
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, -len(new) - 1 : -1]  # the steps that chose `new`
        n = cfg.num_hidden_layers * (cfg.hidden_size + cfg.intermediate_size + ids.shape[1])
        top2 = logits.topk(2, dim=-1).values
        assert (top2[:, 0] - top2[:, 1]).min() > 2 * n * torch.finfo(torch.float32).eps * logits.abs().max()
        assert one.texts[0] == greedy.texts[i]
        assert torch.equal(one.completion_mask[0], greedy.completion_mask[i])  # same kernel: integer mask; tokens guarded by the margin check above


def test_sample_is_seeded_and_leaves_global_rng(lm):
    model, tok = lm
    torch.manual_seed(1)
    expected = torch.rand(2)
    torch.manual_seed(1)
    a = sample(model, tok, PROMPTS, max_new_tokens=8, seed=5)
    assert torch.equal(torch.rand(2), expected)  # same kernel: the global RNG stream, untouched
    b = sample(model, tok, PROMPTS, max_new_tokens=8, seed=5)
    assert torch.equal(a.completion_ids, b.completion_ids) and a.texts == b.texts  # same kernel: integer ids, rerun, same shapes and seed
    assert a.stats["tokens_per_s"] > 0 and a.stats["new_tokens"] == float(a.completion_mask.sum())


def test_top_p_restricts_draws(lm):
    model, tok = lm
    greedy = sample(model, tok, PROMPTS, max_new_tokens=6, do_sample=False)
    tiny_p = sample(model, tok, PROMPTS, max_new_tokens=6, top_p=1e-6, seed=0)
    assert tiny_p.texts == greedy.texts


def test_sample_groups_rewards_and_layout(lm):
    model, tok = lm
    roll = sample_groups(
        model, tok, PROMPTS[:2], lambda i, text: float(i), group_size=3, max_new_tokens=4, seed=0
    )
    assert len(roll) == 6 and roll.group.tolist() == [0, 0, 0, 1, 1, 1]
    assert roll.rewards.tolist() == [0.0] * 3 + [1.0] * 3
    with pytest.raises(ValueError, match="NaN"):
        sample_groups(model, tok, PROMPTS[:1], lambda i, t: math.nan, group_size=2, max_new_tokens=2)


def test_bad_sampling_arguments(lm):
    model, tok = lm
    with pytest.raises(ValueError, match="temperature"):
        sample(model, tok, PROMPTS, temperature=0.0)
    with pytest.raises(ValueError, match="top_p"):
        sample(model, tok, PROMPTS, top_p=1.5)
    with pytest.raises(ValueError, match="prompts"):
        sample(model, tok, "single string")


def _brute_pass_at_k(n, c, k):
    outcomes = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 10).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_matches_enumeration(args):
    n, c, k = args
    assert pass_at_k(n, c, k) == pytest.approx(_brute_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_hand_values_and_errors():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(8, 0, 8) == 0.0 and pass_at_k(8, 1, 8) == 1.0
    assert mean_pass_at_k([[1, 0, 0, 0], [0, 0, 0, 0]], 1) == pytest.approx(0.125)
    with pytest.raises(ValueError, match="k"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="c"):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError, match="2-D"):
        mean_pass_at_k([1, 0], 1)

"""Tests for SSD: divergences, intervention masks, draft/verify, reductions to on-/off-policy, loss = TRL's."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.common.models import build_tiny_lm
from neurips26.distill.ssd import (
    SSDConfig,
    completion_logits,
    speculative_mixed_rollout,
    ssd_loss,
    token_divergence,
)

V = 12


class ToyLM(torch.nn.Module):
    """Deterministic one-hot next-token logits: response index r -> table.get(r, default)."""

    def __init__(self, prompt_len, table, default=1, vocab=V):
        super().__init__()
        self.prompt_len, self.table, self.default, self.vocab = prompt_len, table, default, vocab
        self.dummy = torch.nn.Parameter(torch.zeros(()))

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        b, length = input_ids.shape
        logits = torch.full((b, length, self.vocab), -20.0)
        for i in range(length):
            r = i - self.prompt_len + 1
            logits[:, i, self.table.get(r, self.default)] = 20.0
        return logits + self.dummy


@pytest.fixture(scope="module")
def lm():
    return build_tiny_lm("llama", vocab_size=V, seed=0, hidden_size=16, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, intermediate_size=32).eval()


def _assert_greedy_choices_clear(lm, prompts, roll, threshold):
    """Each greedy choice and each intervention decision of ``roll`` clears the float32 rounding bound.

    Another computation of the same rollout (other lengths or batch shapes) gives logits equal up to
    ``L (d + d_ff + T) eps32 max|logit|``; its greedy tokens and its divergence-vs-threshold decisions are then
    the same integers if every top-2 logit gap and every ``|divergence - threshold|`` exceeds twice that bound.
    ``prompts``: the unpadded student and teacher prompts ``[B, P]``; ``roll``: its ``sequences`` ``[B, T]``.
    """
    cfg = lm.config
    for prompt in prompts:
        ids = torch.cat([prompt, roll.sequences], 1)
        with torch.no_grad():
            logits = lm(input_ids=ids).logits[:, prompt.shape[1] - 1 : -1].float()  # the steps that chose them
        n = cfg.num_hidden_layers * (cfg.hidden_size + cfg.intermediate_size + ids.shape[1])
        bound = 2 * n * torch.finfo(torch.float32).eps * logits.abs().max()
        top2 = logits.topk(2, dim=-1).values
        assert (top2[..., 0] - top2[..., 1]).min() > bound
    assert ((roll.divergence - threshold).abs() > bound).all()


def test_divergence_properties():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(6, V, generator=g) * 2, torch.randn(6, V, generator=g) * 2
    tv = token_divergence(a, b, "tv")
    assert ((tv >= 0) & (tv <= 1)).all()
    torch.testing.assert_close(tv, token_divergence(b, a, "tv"))
    assert token_divergence(a, a, "tv").abs().max() < 1e-6 and (tv > 0).all()
    assert (token_divergence(a, b, "kl") >= 0).all()
    jsd = token_divergence(a, b, "jsd")
    assert (jsd >= 0).all() and (jsd <= math.log(2) + 1e-6).all()


def test_loss_beta_limits_are_forward_and_reverse_kl():
    g = torch.Generator().manual_seed(1)
    s, t = torch.randn(2, 3, V, generator=g), torch.randn(2, 3, V, generator=g)
    m = torch.ones(2, 3)
    fkl = (t.softmax(-1) * (t.log_softmax(-1) - s.log_softmax(-1))).sum(-1).mean()
    rkl = (s.softmax(-1) * (s.log_softmax(-1) - t.log_softmax(-1))).sum(-1).mean()
    torch.testing.assert_close(ssd_loss(s, t, m, m, "jsd", 0.0)[0], fkl)
    torch.testing.assert_close(ssd_loss(s, t, m, m, "jsd", 1.0)[0], rkl)
    torch.testing.assert_close(ssd_loss(s, t, m, m, "fkl")[0], fkl)
    torch.testing.assert_close(ssd_loss(s, t, m, m, "rkl")[0], rkl)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 1000), beta=st.sampled_from([0.0, 0.3, 0.5, 1.0]))
def test_supervise_all_equals_trl_gkd_and_sdft_objective(seed, beta):
    from trl.experimental.gkd import GKDTrainer
    from trl.experimental.sdft.loss_utils import compute_full_logit_self_distillation_loss

    g = torch.Generator().manual_seed(seed)
    s = torch.randn(2, 5, V, generator=g, requires_grad=True)
    t = torch.randn(2, 5, V, generator=g)
    resp = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]])
    ours, _ = ssd_loss(s, t, resp, torch.ones_like(resp), "jsd", beta)
    labels = torch.where(resp.bool(), torch.zeros_like(resp), torch.full_like(resp, -100))
    gkd = GKDTrainer.generalized_jsd_loss(s, t, labels=labels, beta=beta)
    torch.testing.assert_close(ours, gkd, atol=1e-6, rtol=1e-5)
    per_token = compute_full_logit_self_distillation_loss(s, t, distillation_alpha=beta)
    sdft_token_mean = (per_token * resp).sum() / resp.sum()
    torch.testing.assert_close(ours, sdft_token_mean, atol=1e-6, rtol=1e-5)
    (g1,) = torch.autograd.grad(ours, s)
    (g2,) = torch.autograd.grad(gkd, s)
    torch.testing.assert_close(g1, g2, atol=1e-6, rtol=1e-5)


def test_gradients_only_on_supervised_positions_and_empty_set():
    g = torch.Generator().manual_seed(2)
    s = torch.randn(1, 4, V, generator=g, requires_grad=True)
    t = torch.randn(1, 4, V, generator=g, requires_grad=True)
    sup = torch.tensor([[0, 1, 0, 1]])
    loss, stats = ssd_loss(s, t, torch.ones(1, 4), sup)
    loss.backward()
    assert t.grad is None
    assert (s.grad[0, [0, 2]] == 0).all() and (s.grad[0, [1, 3]] != 0).any()
    assert stats["supervised_tokens"] == 2
    zero, _ = ssd_loss(s, t.detach(), torch.ones(1, 4), torch.zeros(1, 4))
    assert zero.item() == 0.0 and zero.requires_grad
    (gz,) = torch.autograd.grad(zero, s)
    assert (gz == 0).all()


def test_intervention_mask_marks_exactly_the_divergent_positions():
    sp, tp = torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 5, dtype=torch.long)
    student = ToyLM(3, {}, default=1)
    teacher = ToyLM(5, {1: 2, 3: 4}, default=1)
    for draft_len in (1, 2, 4):
        cfg = SSDConfig(threshold=0.3, draft_len=draft_len, max_new_tokens=6, teacher_sampling="greedy",
                        student_sampling="greedy")
        roll = speculative_mixed_rollout(student, sp, tp, cfg, teacher=teacher)
        expected_mask = torch.tensor([[0, 1, 0, 1, 0, 0]] * 2, dtype=torch.bool)
        assert torch.equal(roll.intervention_mask, expected_mask), draft_len  # same kernel: bool mask against its literal
        assert roll.sequences.tolist() == [[1, 2, 1, 4, 1, 1]] * 2
        assert roll.n_supervised_tokens == 4 and roll.n_student_tokens == 8


def test_draft_verify_equals_per_token_with_fewer_teacher_calls(lm):
    g = torch.Generator().manual_seed(0)
    sp = torch.randint(4, V, (3, 4), generator=g)
    tp = torch.randint(4, V, (3, 7), generator=g)
    base = dict(threshold=0.05, teacher_sampling="greedy", student_sampling="greedy", max_new_tokens=8)
    # integer tokens from greedy passes of different lengths (logits equal to rounding): portable because
    # every top-2 logit gap and every divergence-threshold distance is checked to exceed the rounding bound
    one = speculative_mixed_rollout(lm, sp, tp, SSDConfig(**base, draft_len=1))
    four = speculative_mixed_rollout(lm, sp, tp, SSDConfig(**base, draft_len=4))
    _assert_greedy_choices_clear(lm, (sp, tp), one, base["threshold"])
    assert torch.equal(one.sequences, four.sequences)  # same kernel: integer tokens (draft 1 vs 4: other shapes), every choice clears the bound above
    assert torch.equal(one.intervention_mask, four.intervention_mask)  # same kernel: bool mask, decided by the same guarded choices
    assert four.n_teacher_calls <= one.n_teacher_calls
    never = SSDConfig(**{**base, "threshold": 0.99}, draft_len=4)
    assert speculative_mixed_rollout(lm, sp, tp, never).n_teacher_calls == 2  # 8 tokens in blocks of 4


def _plain_sample(model, prompt, steps, gen):
    y = prompt.new_zeros((prompt.shape[0], 0))
    for _ in range(steps):
        ids = torch.cat([prompt, y], 1)
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[:, -1].float()
        tok = torch.multinomial(logits.softmax(-1), 1, generator=gen)
        y = torch.cat([y, tok], 1)
    return y


def test_reductions_on_policy_and_off_policy(lm):
    g = torch.Generator().manual_seed(1)
    sp = torch.randint(4, V, (2, 3), generator=g)
    tp = torch.randint(4, V, (2, 6), generator=g)
    on = speculative_mixed_rollout(lm, sp, tp, SSDConfig(threshold=math.inf, supervise="all", max_new_tokens=6),
                                   generator=torch.Generator().manual_seed(5))
    # integer draws from the same generator over probabilities equal to rounding (other forward shapes):
    # a draw flips only if it lands within ~n eps32 of a CDF boundary (odds ~1e-6 per token)
    assert torch.equal(on.sequences, _plain_sample(lm, sp, 6, torch.Generator().manual_seed(5)))  # same kernel: integer draws, see the odds above
    assert on.intervention_mask.sum() == 0 and on.n_supervised_tokens == 12
    off = speculative_mixed_rollout(
        lm, sp, tp, SSDConfig(threshold=-1.0, always_intervene=True, supervise="all", max_new_tokens=6),
        generator=torch.Generator().manual_seed(5))
    assert torch.equal(off.sequences, _plain_sample(lm, tp, 6, torch.Generator().manual_seed(5)))  # same kernel: integer draws, see the odds above
    assert off.intervention_mask.all()


def test_eos_stops_and_left_padding_matches_unbatched(lm):
    a = torch.tensor([[5, 6, 7, 8]])
    b = torch.tensor([[9, 10]])
    ta, tb = torch.tensor([[4, 5, 6, 7, 8]]), torch.tensor([[11, 9, 10]])
    cfg = SSDConfig(threshold=0.05, teacher_sampling="greedy", student_sampling="greedy", max_new_tokens=6)
    ra = speculative_mixed_rollout(lm, a, ta, cfg)
    rb = speculative_mixed_rollout(lm, b, tb, cfg)
    sp = torch.tensor([[5, 6, 7, 8], [0, 0, 9, 10]])
    sm = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])
    tp = torch.tensor([[4, 5, 6, 7, 8], [0, 0, 11, 9, 10]])
    tm = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    both = speculative_mixed_rollout(lm, sp, tp, cfg, student_attention_mask=sm, teacher_attention_mask=tm)
    # padded vs single-row passes: token equality is portable because every decision clears the bound
    _assert_greedy_choices_clear(lm, (a, ta), ra, cfg.threshold)
    _assert_greedy_choices_clear(lm, (b, tb), rb, cfg.threshold)
    assert torch.equal(both.sequences[0], ra.sequences[0]) and torch.equal(both.sequences[1], rb.sequences[0])  # same kernel: integer tokens, guarded by the margin checks above
    assert torch.equal(both.intervention_mask[1], rb.intervention_mask[0])  # same kernel: bool mask, guarded by the margin checks above
    # EOS: with the first generated token as EOS, nothing after it is generated or supervised
    eos = int(ra.sequences[0, 0])
    r = speculative_mixed_rollout(lm, a, ta, SSDConfig(**{**cfg.__dict__, "supervise": "all"}), eos_token_id=eos)
    assert r.response_mask.sum() == 1 and (r.sequences[0, 1:] == 0).all()
    assert r.intervention_mask[0, 1:].sum() == 0


def test_completion_logits_align_with_generation(lm):
    sp = torch.tensor([[5, 6, 7]])
    y = torch.tensor([[8, 9]])
    logits = completion_logits(lm, sp, None, y)
    direct = lm(input_ids=torch.tensor([[5, 6, 7, 8]])).logits[:, -1]
    torch.testing.assert_close(logits[:, 1], direct, atol=1e-5, rtol=1e-5)


def test_bad_input(lm):
    with pytest.raises(ValueError, match="always_intervene"):
        SSDConfig(threshold=-0.1)
    with pytest.raises(ValueError, match="draft_len"):
        SSDConfig(draft_len=0)
    with pytest.raises(ValueError, match="divergence"):
        SSDConfig(divergence="l2")
    sp, tp = torch.zeros(2, 3, dtype=torch.long), torch.zeros(3, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="batch sizes differ"):
        speculative_mixed_rollout(lm, sp, tp, SSDConfig())
    with pytest.raises(ValueError, match="vocabularies differ"):
        speculative_mixed_rollout(ToyLM(3, {}), sp, sp, SSDConfig(), teacher=ToyLM(3, {}, vocab=V + 1))
    with pytest.raises(ValueError, match="same vocabulary"):
        ssd_loss(torch.zeros(1, 2, V), torch.zeros(1, 2, V + 1), torch.ones(1, 2), torch.ones(1, 2))
    with pytest.raises(TypeError, match="int64"):
        speculative_mixed_rollout(lm, sp.float(), sp, SSDConfig())


def test_trainer_step_counts_and_frozen_teacher():
    from neurips26.common.tokenizers import char_tokenizer
    from neurips26.distill.ssd import SSDTrainer

    tok = char_tokenizer("abcdefgh ?:")
    model = build_tiny_lm("llama", vocab_size=len(tok), seed=0, hidden_size=16, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=1, intermediate_size=32)
    sup = {}
    for mode, supervise in (("frozen", "intervened"), ("self", "all")):
        cfg = SSDConfig(threshold=0.01, max_new_tokens=4, teacher_mode=mode, supervise=supervise)
        trainer = SSDTrainer(model, tok, cfg, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                             generator=torch.Generator().manual_seed(0))
        before = [p.clone() for p in trainer.teacher.parameters()]
        out = trainer.step(["abc", "defg"], ["a?", "bcd?"])
        assert math.isfinite(out["loss"]) and out["response_tokens"] == 8
        sup[supervise] = trainer.totals["supervised_tokens"]
        if mode == "frozen":
            assert all(torch.equal(a, b) for a, b in zip(before, trainer.teacher.parameters()))  # same kernel: untouched parameters, no arithmetic
    assert sup["all"] == 8 and sup["intervened"] <= 8
    with pytest.raises(ValueError, match="differ in length"):
        trainer.build_inputs(["a"], ["a", "b"])

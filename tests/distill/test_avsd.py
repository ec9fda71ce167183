"""Tests for AVSD's multi-view sampled-token target and loss."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.distill.avsd import (
    VIEW_BUILDERS,
    AVSDConfig,
    avsd_loss,
    build_views,
    multiview_sampled_target,
    partial_solution_view,
    sampled_token_logprobs,
)


def _lp(seed, b=3, m=3, t=5):
    g = torch.Generator().manual_seed(seed)
    ls = -torch.rand(b, t, generator=g) * 4
    lv = -torch.rand(b, m, t, generator=g) * 4
    return ls, lv


def test_single_view_equals_trl_sdft_sampled_token_loss():
    from trl.experimental.sdft.loss_utils import compute_sampled_token_self_distillation_loss

    g = torch.Generator().manual_seed(0)
    s_logits = torch.randn(2, 4, 7, generator=g, requires_grad=True)
    t_logits = torch.randn(2, 4, 7, generator=g)
    ids = torch.randint(0, 7, (2, 4), generator=g)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    ls = s_logits.log_softmax(-1).gather(-1, ids[..., None]).squeeze(-1)
    lt = t_logits.log_softmax(-1).gather(-1, ids[..., None]).squeeze(-1)
    ours, _ = avsd_loss(ls, lt[:, None], mask, AVSDConfig(views=("full_solution",), loss_agg="seq_mean"))
    per_token = compute_sampled_token_self_distillation_loss(s_logits, t_logits, ids, distillation_alpha=1.0)
    trl = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()  # SDFTTrainer's aggregation
    torch.testing.assert_close(ours, trl)
    (g1,) = torch.autograd.grad(ours, s_logits)
    (g2,) = torch.autograd.grad(trl, s_logits)
    torch.testing.assert_close(g1, g2)
    # every mode gives the same target with one view
    for mode in ("avsd", "consensus", "arithmetic", "single"):
        target, aux = multiview_sampled_target(ls, lt[:, None], mode=mode)
        torch.testing.assert_close(target, lt)
        assert (aux["jensen_gap"] == 0).all()


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(1, 4))
def test_bounds_gate_in_unit_interval_and_ordering(seed, m):
    ls, lv = _lp(seed, m=m)
    target, aux = multiview_sampled_target(ls, lv)
    assert (aux["jensen_gap"] >= 0).all()
    assert (aux["gate"] >= 0).all() and (aux["gate"] <= 1).all()
    assert (aux["log_q_g"] <= target + 1e-6).all() and (target <= aux["log_q_a"] + 1e-6).all()
    _, aux2 = multiview_sampled_target(ls, lv, gate="consistency_exp")
    assert (aux2["gate"] >= 0).all() and (aux2["gate"] <= 1).all()


def test_identical_views_give_that_view():
    ls, lv = _lp(1, m=1)
    same = lv.expand(-1, 3, -1).clone()
    for gate in ("avsd", "consistency_exp"):
        target, aux = multiview_sampled_target(ls, same, gate=gate)
        torch.testing.assert_close(target, lv[:, 0])
        assert aux["jensen_gap"].abs().max() < 1e-6


def test_opposite_views_close_the_gate():
    ls = torch.full((1, 4), -2.0)
    d = torch.tensor([0.5, 1.0, 0.3, 2.0])
    lv = torch.stack([ls[0] + d, ls[0] - d])[None]
    target, aux = multiview_sampled_target(ls, lv)
    assert aux["gate"].abs().max() < 1e-6
    torch.testing.assert_close(target, aux["log_q_g"])


def test_modes_return_means():
    ls, lv = _lp(2)
    tg, aux = multiview_sampled_target(ls, lv, mode="consensus")
    torch.testing.assert_close(tg, lv.mean(1))
    ta, _ = multiview_sampled_target(ls, lv, mode="arithmetic")
    torch.testing.assert_close(ta, torch.log(lv.exp().mean(1)))


def test_hand_computed_gate():
    ls = torch.tensor([[-2.0]])
    lv = torch.tensor([[[-1.0], [-1.5]]])  # both views above the student: kappa = 1
    target, aux = multiview_sampled_target(ls, lv)
    c = 0.75
    jensen = math.log((math.exp(-1.0) + math.exp(-1.5)) / 2) + 1.25
    g = c / (c + jensen)
    assert aux["agreement"].item() == pytest.approx(1.0, abs=1e-6)
    assert aux["gate"].item() == pytest.approx(g, rel=1e-5)
    assert target.item() == pytest.approx(-1.25 + g * jensen, rel=1e-5)


def test_gradients_masks_and_nonfinite():
    ls, lv = _lp(3)
    ls.requires_grad_(True)
    lv.requires_grad_(True)
    mask = torch.ones(3, 5)
    mask[0, 2:] = 0
    lv_bad = lv.detach().clone()
    lv_bad[1, 0, 3] = -math.inf
    loss, metrics = avsd_loss(ls, lv_bad, mask)
    (g,) = torch.autograd.grad(loss, ls)
    assert (g[0, 2:] == 0).all() and g[1, 3] == 0
    assert torch.isfinite(loss) and metrics["tokens"] == 11  # 12 unmasked minus the -inf token
    loss2, _ = avsd_loss(ls, lv, mask)
    loss2.backward()
    assert lv.grad is None
    zero, _ = avsd_loss(ls, lv.detach(), torch.zeros(3, 5))
    assert zero.item() == 0.0 and zero.requires_grad
    (gz,) = torch.autograd.grad(zero, ls)
    assert torch.isfinite(gz).all() and (gz == 0).all()


def test_partial_view_never_contains_the_answer():
    sol = "7+5=12;12*3=36;36-4=32"
    part = partial_solution_view(sol, 0.5)
    assert part.startswith("7+5=12;12*3=36;") and "32" not in part.replace("36-4", "")
    assert "36-4=32" not in part
    assert partial_solution_view(sol, 0.99).count("=") == 2  # the last segment is always dropped
    ex = {"solution": sol, "answer": 32}
    assert VIEW_BUILDERS["answer_only"](ex) == "32" and VIEW_BUILDERS["full_solution"](ex) == sol


def test_bad_input():
    ls, lv = _lp(4)
    with pytest.raises(ValueError, match=r"\(B, M, T\)"):
        multiview_sampled_target(ls, lv[:, 0])
    with pytest.raises(ValueError, match="M = 0"):
        multiview_sampled_target(ls, lv[:, :0])
    with pytest.raises(ValueError, match="mode"):
        multiview_sampled_target(ls, lv, mode="median")
    with pytest.raises(ValueError, match="gate"):
        multiview_sampled_target(ls, lv, gate="bogus")
    with pytest.raises(ValueError, match="student_logprobs must have shape"):
        multiview_sampled_target(ls[:, :3], lv)
    with pytest.raises(ValueError, match="exactly one view"):
        multiview_sampled_target(ls, lv, mode="single")
    with pytest.raises(ValueError, match="views"):
        AVSDConfig(views=())


# --- views, vocabulary, and TRL's SDFTTrainer --------------------------------------------------


def test_build_views_and_errors():
    rec = {"solution": "7+5=12;12*3=36;36-4=32", "answer": "32"}
    full, part, ans = build_views(rec, ("full_solution", "partial_solution", "answer_only"))
    assert full == rec["solution"] and ans == "32" and part.startswith("7+5=12;12*3=36;")
    with pytest.raises(ValueError, match="non-empty"):
        build_views(rec, ())
    with pytest.raises(ValueError, match="unknown view"):
        build_views(rec, ("hint",))
    with pytest.raises(ValueError, match="'answer'"):
        build_views({"solution": "1+1=2"}, ("answer_only",))
    with pytest.raises(TypeError, match="mapping"):
        build_views("7+5", ("full_solution",))


def test_sampled_token_logprobs_and_vocab_mismatch():
    g = torch.Generator().manual_seed(5)
    s = torch.randn(2, 3, 6, generator=g, requires_grad=True)
    v = torch.randn(2, 4, 3, 6, generator=g)
    ids = torch.randint(0, 6, (2, 3), generator=g)
    ls, lv = sampled_token_logprobs(s, v, ids)
    torch.testing.assert_close(ls, s.log_softmax(-1).gather(-1, ids[..., None]).squeeze(-1))
    torch.testing.assert_close(lv[:, 2], v[:, 2].log_softmax(-1).gather(-1, ids[..., None]).squeeze(-1))
    assert ls.requires_grad and not lv.requires_grad
    with pytest.raises(ValueError, match="vocabularies differ"):
        sampled_token_logprobs(s, torch.randn(2, 4, 3, 7), ids)
    with pytest.raises(ValueError, match="M = 0"):
        sampled_token_logprobs(s, v[:, :0], ids)
    with pytest.raises(ValueError, match="vocabulary"):
        sampled_token_logprobs(s, v, ids + 6)
    with pytest.raises(ValueError, match="completion_mask"):
        avsd_loss(ls, lv, torch.ones(2, 4))


def _sdft_pair(tmp_path, views, mode="avsd"):
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from trl.experimental.sdft import SDFTConfig, SDFTTrainer

    from neurips26.common.models import build_tiny_lm
    from neurips26.common.tokenizers import char_tokenizer
    from neurips26.distill.avsd import AVSDTrainer

    tok = char_tokenizer("0123456789+-*=;()QAR: \nincomplet")
    model = build_tiny_lm("llama", vocab_size=len(tok), seed=0, hidden_size=32)
    model.save_pretrained(tmp_path / "base")  # SDFT's fixed ("base") teacher is rebuilt from the path
    from transformers import LlamaForCausalLM

    recs = [{"solution": "7+5=12;12*3=36", "answer": "36"}, {"solution": "2*4=8;8-1=7", "answer": "7"}]
    prompts = ["Q:(7+5)*3\nA:", "Q:(2*4)-1\nA:"]

    def args(name):
        return SDFTConfig(
            output_dir=str(tmp_path / name),
            distillation_mode="sampled_token",
            distillation_alpha=1.0,
            per_device_train_batch_size=2,
            num_generations=1,
            max_steps=1,
            report_to="none",
            use_cpu=True,
            save_strategy="no",
            seed=0,
            teacher_prompt_template="R:{privileged_context}\n{prompt}",
            disable_tqdm=True,
            temperature=0.7,
        )

    sdft_data = Dataset.from_list(
        [{"prompt": p, "privileged_context": r["solution"]} for p, r in zip(prompts, recs)]
    )
    avsd_data = Dataset.from_list([{"prompt": p, "privileged_context": r} for p, r in zip(prompts, recs)])
    sdft = SDFTTrainer(
        LlamaForCausalLM.from_pretrained(tmp_path / "base"),
        args=args("sdft"),
        train_dataset=sdft_data,
        processing_class=tok,
    )
    avsd = AVSDTrainer(
        LlamaForCausalLM.from_pretrained(tmp_path / "base"),
        args=args("avsd"),
        avsd_config=AVSDConfig(views=views, mode=mode, loss_agg="seq_mean"),
        train_dataset=avsd_data,
        processing_class=tok,
    )
    # one fixed batch: the same prompts and completions (no sampling) for both trainers
    enc = tok(prompts, return_tensors="pt", padding=True)
    comp = tok(
        ["7+5=12;12*3=36", "2*4=8;8-1=70"], add_special_tokens=False, return_tensors="pt", padding=True
    )
    c_ids = torch.cat([comp["input_ids"], torch.full((2, 1), tok.eos_token_id)], 1)
    c_mask = torch.cat([comp["attention_mask"], torch.ones(2, 1, dtype=torch.long)], 1)
    c_mask[0, -2:] = 0  # a ragged row
    base = {
        "prompt_ids": enc["input_ids"],
        "prompt_mask": enc["attention_mask"],
        "completion_ids": c_ids,
        "completion_mask": c_mask,
    }
    t_in = sdft.teacher_context_builder.build(prompts, [r["solution"] for r in recs], c_ids, c_mask)
    sdft_batch = {**base, **t_in}
    avsd_batch = {**base, **avsd.build_view_inputs(prompts, recs, c_ids, c_mask)}
    return sdft, avsd, sdft_batch, avsd_batch


def _loss_and_grads(trainer, batch):
    trainer.model.zero_grad(set_to_none=True)
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    return loss.detach(), {
        n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None
    }


def test_single_full_view_equals_trl_sdft_trainer(tmp_path):
    """AVSD with one full-solution view is SDFT's sampled-token objective, through SDFTTrainer itself."""
    sdft, avsd, sb, ab = _sdft_pair(tmp_path, ("full_solution",))
    torch.testing.assert_close(ab["view_input_ids"][:, 0], sb["teacher_input_ids"], rtol=0, atol=0)  # same kernel: integer token ids
    l1, g1 = _loss_and_grads(sdft, sb)
    l2, g2 = _loss_and_grads(avsd, ab)
    assert l1.item() != 0.0
    torch.testing.assert_close(l2, l1, rtol=1e-5, atol=1e-7)
    assert g1.keys() == g2.keys() and len(g1) > 0
    for name in g1:
        torch.testing.assert_close(g2[name], g1[name], rtol=1e-4, atol=1e-7)


def test_trainer_three_views_differs_and_bad_config(tmp_path):
    from trl.experimental.sdft import SDFTConfig

    from neurips26.distill.avsd import AVSDTrainer

    sdft, avsd, sb, ab = _sdft_pair(tmp_path, ("full_solution", "partial_solution", "answer_only"))
    assert ab["view_input_ids"].shape[:2] == (2, 3)
    l1, _ = _loss_and_grads(sdft, sb)
    l3, g3 = _loss_and_grads(avsd, ab)
    assert torch.isfinite(l3) and l3.item() != l1.item()
    assert all(torch.isfinite(g).all() for g in g3.values())
    gate = avsd._metrics["eval"]["avsd/gate_mean"][-1] if avsd._metrics["eval"]["avsd/gate_mean"] else None
    assert gate is not None and 0.0 <= gate <= 1.0
    bad = SDFTConfig(
        output_dir=str(tmp_path / "x"), distillation_mode="full_logits", report_to="none", use_cpu=True
    )
    with pytest.raises(ValueError, match="sampled_token"):
        AVSDTrainer(avsd.model, args=bad, train_dataset=[{"prompt": "Q:", "privileged_context": {}}])
    with pytest.raises(TypeError, match="SDFTConfig"):
        AVSDTrainer(avsd.model, args=None)
    ok = avsd.args
    with pytest.raises(ValueError, match="unknown view"):
        AVSDTrainer(avsd.model, args=ok, avsd_config=AVSDConfig(views=("hint",)))

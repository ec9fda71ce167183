"""Archer loss: reduction to GRPO, per-class clipping, dual clip, KL routing, classification, edge cases."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.rl.archer import (
    ArcherConfig,
    archer_policy_loss,
    classify_tokens,
    entropy_from_logits,
    grpo_advantages,
    high_entropy_only_loss,
    verl_compute_policy_loss,
)
from neurips26.rl.losses import clipped_surrogate, kl_penalty, masked_aggregate


def _batch(seed=0, B=5, T=9):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g) * 2
    logp = old + 0.5 * torch.randn(B, T, generator=g)
    ref = old + 0.3 * torch.randn(B, T, generator=g)
    adv = torch.randn(B, T, generator=g)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
    ent = torch.rand(B, T, generator=g) * 3
    return logp, old, ref, adv, mask, ent


def _grad(config, logp, old, adv, mask, ent, ref):
    leaf = logp.clone().requires_grad_(True)
    loss, metrics = archer_policy_loss(leaf, old, adv, mask, ent, ref, config)
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss, grad, metrics


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("seed", [0, 1])
def test_reduces_to_plain_grpo(agg, seed):
    logp, old, ref, adv, mask, ent = _batch(seed)
    cfg = ArcherConfig(
        clip_reasoning=(0.2, 0.2),
        clip_knowledge=(0.2, 0.2),
        kl_coef_knowledge=0.01,
        kl_coef_reasoning=0.01,
        kl_agg="union",
        loss_agg=agg,
        dual_clip_c=None,
    )
    loss, grad, _ = _grad(cfg, logp, old, adv, mask, ent, ref)

    leaf = logp.clone().requires_grad_(True)  # reference: plain clipped surrogate + uniform KL
    ratio = torch.exp(leaf - old)
    pg = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.2))
    kl = torch.exp(ref - leaf) - (ref - leaf) - 1
    ref_loss = masked_aggregate(pg, mask, agg) + 0.01 * masked_aggregate(kl, mask, agg)
    (ref_grad,) = torch.autograd.grad(ref_loss, leaf)
    torch.testing.assert_close(loss, ref_loss, atol=1e-6, rtol=0)
    torch.testing.assert_close(grad, ref_grad, atol=1e-6, rtol=0)
    # the GRPO preset is the same loss irrespective of the split
    grpo_loss, grpo_grad, _ = _grad(
        ArcherConfig.grpo(kl_coef_knowledge=0.01, kl_coef_reasoning=0.01, loss_agg=agg, dual_clip_c=None),
        logp,
        old,
        adv,
        mask,
        ent,
        ref,
    )
    torch.testing.assert_close(grpo_loss, ref_loss, atol=1e-6, rtol=0)


def test_per_class_kl_aggregation_matches_reference_definition():
    logp, old, ref, adv, mask, ent = _batch(3)
    cfg = ArcherConfig(kl_coef_knowledge=0.1, kl_coef_reasoning=0.05)
    loss, _, m = _grad(cfg, logp, old, adv, mask, ent, ref)
    R, K = classify_tokens(ent, mask, 0.8)
    eps_low = torch.where(R, 0.5, 0.2)
    pg, _, _ = clipped_surrogate(logp, old, adv, eps_low, eps_low, 10.0)
    kl = kl_penalty(logp, ref, "k3", clamp=10.0)
    expected = masked_aggregate(pg, mask) + 0.1 * masked_aggregate(kl, K) + 0.05 * masked_aggregate(kl, R)
    torch.testing.assert_close(loss, expected, atol=1e-6, rtol=0)
    assert m["kl_knowledge"] == pytest.approx(float(masked_aggregate(kl, K)), abs=1e-6)


def _two_tokens(ratio, adv_sign):
    # token 0 high entropy (reasoning), token 1 low entropy (knowledge); quantile 0.5 splits them
    old = torch.zeros(1, 2)
    logp = torch.full((1, 2), float(torch.log(torch.tensor(ratio))))
    adv = torch.full((1, 2), adv_sign)
    mask = torch.ones(1, 2, dtype=torch.bool)
    ent = torch.tensor([[2.0, 0.1]])
    cfg = ArcherConfig(quantile=0.5, kl_coef_knowledge=0.0)
    return _grad(cfg, logp, old, adv, mask, ent, None)


def test_per_class_clipping_positive_advantage():
    _, grad, m = _two_tokens(1.3, 1.0)
    assert grad[0, 0] != 0  # reasoning: 1.3 < 1.5, still inside its range
    assert grad[0, 1] == 0  # knowledge: clipped at 1.2
    assert m["clipfrac_knowledge"] == 1.0 and m["clipfrac_reasoning"] == 0.0 and m["reasoning_frac"] == 0.5


def test_per_class_clipping_negative_advantage():
    _, grad, m = _two_tokens(0.7, -1.0)
    assert grad[0, 0] != 0  # reasoning: 0.7 > 0.5
    assert grad[0, 1] == 0  # knowledge: below 0.8, clipped
    assert m["clipfrac_knowledge"] == 1.0


def test_dual_clip_caps_negative_advantage_loss():
    logp = torch.log(torch.tensor([[50.0]]))
    cfg = ArcherConfig(kl_coef_knowledge=0.0)
    loss, grad, _ = _grad(
        cfg,
        logp,
        torch.zeros(1, 1),
        torch.tensor([[-2.0]]),
        torch.ones(1, 1, dtype=torch.bool),
        torch.ones(1, 1),
        None,
    )
    assert loss.item() == pytest.approx(2.0 * 10.0)
    assert grad.item() == 0.0
    uncapped, _, _ = _grad(
        cfg.with_(dual_clip_c=None),
        logp,
        torch.zeros(1, 1),
        torch.tensor([[-2.0]]),
        torch.ones(1, 1, dtype=torch.bool),
        torch.ones(1, 1),
        None,
    )
    assert uncapped.item() == pytest.approx(100.0, rel=1e-5)


def test_kl_routing_zero_on_reasoning_tokens():
    logp, old, ref, _, mask, ent = _batch(4)
    zero_adv = torch.zeros_like(logp)  # isolate the KL term
    cfg = ArcherConfig(kl_coef_knowledge=0.1, kl_coef_reasoning=0.0)
    _, grad, _ = _grad(cfg, logp, old, zero_adv, mask, ent, ref)
    R, K = classify_tokens(ent, mask, cfg.quantile)
    assert R.any() and K.any()
    assert (grad[R] == 0).all()
    differs = (logp - ref).abs() > 1e-4
    assert (grad[K & differs] != 0).all()


def test_synchronous_update_vs_masking_baseline():
    logp, old, ref, adv, mask, ent = _batch(5)
    R, K = classify_tokens(ent, mask, 0.8)
    # ratios close to 1 so that no token is clipped
    near = old + 0.01 * torch.tanh(logp - old)
    _, grad, _ = _grad(ArcherConfig(), near, old, adv, mask, ent, ref)
    assert (grad[R] != 0).all() and (grad[K] != 0).all()
    leaf = near.clone().requires_grad_(True)
    loss, _ = high_entropy_only_loss(leaf, old, adv, mask, ent, ref)
    (g2,) = torch.autograd.grad(loss, leaf)
    assert (g2[K] == 0).all() and (g2[R] != 0).all()


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 60), st.integers(0, 10_000), st.floats(0.05, 0.95))
def test_reasoning_fraction_per_response(length, seed, q):
    ent = torch.rand(1, length, generator=torch.Generator().manual_seed(seed))
    mask = torch.ones(1, length, dtype=torch.bool)
    R, K = classify_tokens(ent, mask, q)
    assert not (R & K).any() and torch.equal(R | K, mask)  # same kernel: bool mask
    assert abs(int(R.sum()) - (1 - q) * length) <= 1.0 + 1e-9


def test_classification_ties_padding_detach():
    ent = torch.tensor([[0.7, 0.7, 0.7, 0.7], [0.1, 5.0, 9.0, 9.0], [3.0, 1.0, 2.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    R, K = classify_tokens(ent, mask, 0.8)
    assert not R[0].any() and K[0].all()  # constant entropy -> all knowledge
    assert R[1].tolist() == [False, True, False, False]  # padding (9.0) never classified
    assert not (R[2] | K[2]).any()
    assert not R.requires_grad and not K.requires_grad
    out = entropy_from_logits(torch.randn(2, 3, 5, requires_grad=True))
    assert not out.requires_grad


def test_entropy_detached_inside_loss():
    logp, old, ref, adv, mask, _ = _batch(6)
    ent = (torch.rand_like(logp) * 2).requires_grad_(True)
    loss, _ = archer_policy_loss(logp.requires_grad_(True), old, adv, mask, ent, ref)
    loss.backward()
    assert ent.grad is None


def test_entropy_matches_categorical_and_chunks():
    logits = torch.randn(5, 4, 11, generator=torch.Generator().manual_seed(0)) * 3
    expected = torch.distributions.Categorical(logits=logits).entropy()
    torch.testing.assert_close(entropy_from_logits(logits), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy_from_logits(logits, chunk_size=2), expected, atol=1e-5, rtol=1e-5)
    banned = logits.clone()
    banned[..., 0] = float("-inf")
    assert torch.isfinite(entropy_from_logits(banned)).all()
    assert entropy_from_logits(logits.bfloat16()).dtype == torch.float32


def test_edge_cases_length_one_padding_row_bf16():
    logp, old, ref, adv, mask, ent = _batch(7, B=3, T=4)
    mask = torch.tensor([[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    leaf = logp.clone().requires_grad_(True)
    loss, metrics = archer_policy_loss(leaf, old, adv, mask, ent, ref)
    loss.backward()
    assert torch.isfinite(loss) and all(v == v for k, v in metrics.items())
    assert (leaf.grad[1] == 0).all() and (leaf.grad[~mask] == 0).all()
    all_pad, _ = archer_policy_loss(logp, old, adv, torch.zeros_like(mask), ent, ref)
    assert all_pad.item() == 0.0
    bf, _ = archer_policy_loss(
        logp.bfloat16(), old.bfloat16(), adv.bfloat16(), mask, ent.bfloat16(), ref.bfloat16()
    )
    assert bf.dtype == torch.float32
    fp, _ = archer_policy_loss(
        logp.bfloat16().float(),
        old.bfloat16().float(),
        adv.bfloat16().float(),
        mask,
        ent.bfloat16().float(),
        ref.bfloat16().float(),
    )
    torch.testing.assert_close(bf, fp)


def test_advantages_broadcast_and_mask_dtypes():
    logp, old, ref, _, mask, ent = _batch(8)
    adv_row = torch.randn(logp.shape[0])
    a, _ = archer_policy_loss(logp, old, adv_row, mask, ent, ref)
    b, _ = archer_policy_loss(logp, old, adv_row[:, None].expand_as(logp), mask.float(), ent, ref)
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(
        grpo_advantages(torch.tensor([1.0, 0.0]), 2), torch.tensor([1.0, -1.0]) / 2**0.5, atol=1e-5, rtol=0
    )


def test_bad_inputs():
    logp, old, ref, adv, mask, ent = _batch(9)
    with pytest.raises(ValueError, match="shape mismatch"):
        archer_policy_loss(logp, old[:, :4], adv, mask, ent, ref)
    with pytest.raises(ValueError, match="ref_logprobs is None"):
        archer_policy_loss(logp, old, adv, mask, ent, None)
    with pytest.raises(ValueError, match="0/1"):
        archer_policy_loss(logp, old, adv, mask.float() * 2, ent, ref)
    with pytest.raises(ValueError, match="quantile"):
        ArcherConfig(quantile=1.0)
    with pytest.raises(ValueError, match="quantile"):
        classify_tokens(ent, mask, 0.0)
    with pytest.raises(ValueError, match="clip_reasoning"):
        ArcherConfig(clip_reasoning=(-0.1, 0.5))
    with pytest.raises(ValueError, match="clip_knowledge"):
        ArcherConfig(clip_knowledge=(0.2,))
    with pytest.raises(ValueError, match="kl_estimator"):
        ArcherConfig(kl_estimator="k5")
    with pytest.raises(ValueError, match="loss_agg"):
        ArcherConfig(loss_agg="mean")
    with pytest.raises(ValueError, match="dual_clip_c"):
        ArcherConfig(dual_clip_c=0.5)
    with pytest.raises(TypeError, match="config"):
        archer_policy_loss(logp, old, adv, mask, ent, ref, config={"quantile": 0.8})


def test_archer_and_isolation_baseline_share_input_checks():
    """Both losses validate through rl.losses.check_policy_inputs: row count, shapes, entropy, NaN."""
    logp, old, ref, adv, mask, ent = _batch(11)
    for loss in (archer_policy_loss, high_entropy_only_loss):
        with pytest.raises(ValueError, match="advantages has 4 rows but logprobs has 5"):
            loss(logp, old, adv[:4, 0], mask, ent, ref)
        with pytest.raises(ValueError, match="shape mismatch: logprobs is .* but entropy is"):
            loss(logp, old, adv, mask, ent[:, :4], ref)
        bad = ent.clone()
        bad[0, 0] = float("nan")  # token 0 of every row is valid (lengths >= 1)
        with pytest.raises(ValueError, match="entropy contains NaN or inf at valid"):
            loss(logp, old, adv, mask, bad, ref)


def test_verl_adapter_equals_functional_loss():
    logp, old, ref, adv, mask, ent = _batch(10)
    R, _ = classify_tokens(ent, mask, 0.8)
    a, _ = archer_policy_loss(logp, old, adv, mask, ent, ref)
    b, m = verl_compute_policy_loss(old, logp, adv, mask, R, ref)
    torch.testing.assert_close(a, b)
    assert m["reasoning_frac"] == pytest.approx(float(R.sum() / mask.sum()))


@pytest.mark.parametrize(
    "estimator, per_token",
    [
        # d = ref - logp = (-0.5, 1, 0) on the three valid tokens (the fourth is padding)
        ("k1", (0.5, -1.0, 0.0)),  # -d
        ("k2", (0.125, 0.5, 0.0)),  # d^2 / 2
        ("k3", (math.exp(-0.5) - 0.5, math.e - 2.0, 0.0)),  # e^d - d - 1
    ],
)
def test_kl_estimators_selectable_hand_computed(estimator, per_token):
    """The chosen estimator reaches the loss: with zero advantages the loss is coef * token-mean KL."""
    logp = torch.tensor([[-1.0, -2.0, -0.3, -0.7]])
    ref = torch.tensor([[-1.5, -1.0, -0.3, 5.0]])  # a wild value at the padding must not count
    mask = torch.tensor([[True, True, True, False]])
    adv, ent = torch.zeros(1, 4), torch.ones(1, 4)
    cfg = ArcherConfig(kl_estimator=estimator, kl_coef_knowledge=0.5, split=False)
    loss, m = archer_policy_loss(logp, logp, adv, mask, ent, ref, cfg)
    mean = sum(per_token) / 3
    assert m["kl_knowledge"] == pytest.approx(mean, rel=1e-6, abs=1e-7)
    assert float(loss) == pytest.approx(0.5 * mean, rel=1e-6, abs=1e-7)


def test_trl_trainer_trains_tiny_model(tmp_path):
    datasets = pytest.importorskip("datasets")
    from trl import GRPOConfig

    from neurips26.common.models import build_tiny_lm
    from neurips26.common.tokenizers import char_tokenizer
    from neurips26.rl.archer import ArcherGRPOTrainer

    tok = char_tokenizer("0123456789+= ")
    model = build_tiny_lm("llama", vocab_size=len(tok), seed=0, hidden_size=32, intermediate_size=64)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model.save_pretrained(tmp_path / "init")  # TRL builds the reference model from the checkpoint path
    model.config._name_or_path = str(tmp_path / "init")
    data = datasets.Dataset.from_dict({"prompt": [f"{i}+{i}=" for i in range(8)]})

    def reward(completions, **kwargs):
        return [float(c.count("1")) for c in completions]

    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        max_steps=2,
        learning_rate=1e-3,
        num_iterations=2,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=0,
        beta=0.0,
        temperature=1.0,
        disable_tqdm=True,
    )
    trainer = ArcherGRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=data,
        processing_class=tok,
        archer_config=ArcherConfig(),
    )
    assert trainer.beta == pytest.approx(1e-3)  # set so that TRL keeps a reference model
    trainer.train()
    logs = [h for h in trainer.state.log_history if "archer/reasoning_frac" in h]
    assert logs and all(0.0 <= h["archer/reasoning_frac"] <= 0.5 for h in logs)
    changed = any(not torch.equal(p.detach(), before[n]) for n, p in trainer.model.named_parameters())  # same kernel: n/a, asserts a difference
    assert changed


def _tiny_trainer(tmp_path, name, *, policy_loss, archer_config=None, **grpo_fields):
    """An ArcherGRPOTrainer on a tiny config-built Llama (same weights for every call)."""
    datasets = pytest.importorskip("datasets")
    from trl import GRPOConfig

    from neurips26.common.models import build_tiny_lm
    from neurips26.common.tokenizers import char_tokenizer
    from neurips26.rl.archer import ArcherGRPOTrainer

    tok = char_tokenizer("0123456789+= ")
    model = build_tiny_lm("llama", vocab_size=len(tok), seed=0, hidden_size=32, intermediate_size=64)
    model.save_pretrained(tmp_path / "init")
    model.config._name_or_path = str(tmp_path / "init")
    args = GRPOConfig(
        output_dir=str(tmp_path / name),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        max_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=0,
        bf16=False,  # TRL defaults to bf16 autocast; compare in fp32
        use_bias_correction_kl=False,  # TRL's default multiplies the k3 KL by the ratio; GRPO's k3 does not
        gradient_checkpointing=False,
        disable_tqdm=True,
        **grpo_fields,
    )
    data = datasets.Dataset.from_dict({"prompt": ["1+1=", "2+2="]})
    return ArcherGRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **_: [0.0] * len(completions),
        args=args,
        train_dataset=data,
        processing_class=tok,
        archer_config=archer_config,
        policy_loss=policy_loss,
    )


def _trainer_inputs(seed=0, B=6, P=4, T=7, vocab=17):
    """A hand-made GRPO micro-batch: ratios away from 1 (clipping acts), varied lengths, a reference."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([T, T - 2, 1, T - 1, 3, T])[:B]
    completion_mask = (torch.arange(T)[None] < lengths[:, None]).long()
    return {
        "prompt_ids": torch.randint(4, vocab, (B, P), generator=g),
        "prompt_mask": torch.ones(B, P, dtype=torch.long),
        "completion_ids": torch.randint(4, vocab, (B, T), generator=g),
        "completion_mask": completion_mask,
        "advantages": torch.randn(B, generator=g),
        "num_items_in_batch": completion_mask.sum(),
        "_noise": (0.4 * torch.randn(B, T, generator=g), 0.3 * torch.randn(B, T, generator=g)),
    }


def _loss_and_grads(trainer, inputs):
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train() otherwise
    with torch.no_grad():  # behaviour and reference log-probs: the current policy plus fixed noise
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
        att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, att, inputs["completion_ids"].size(1)
        )
    old_noise, ref_noise = inputs["_noise"]
    batch = {k: v for k, v in inputs.items() if k != "_noise"}
    batch.update(old_per_token_logps=logps + old_noise, ref_per_token_logps=logps + ref_noise)
    trainer.model.zero_grad(set_to_none=True)
    loss = trainer._compute_loss(trainer.model, batch)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


@pytest.mark.parametrize(
    ("preset", "trl_fields"),
    [
        ("grpo", dict(loss_type="bnpo", beta=1e-3, epsilon=0.2, epsilon_high=0.2)),
        ("dapo", dict(loss_type="dapo", beta=0.0, epsilon=0.2, epsilon_high=0.28)),
    ],
)
def test_trainer_with_extra_terms_off_equals_trl_loss(tmp_path, preset, trl_fields):
    """ArcherGRPOTrainer with the Archer terms off (no entropy split, one clip range, uniform KL,
    no dual clip, token-mean) gives TRL's own loss (policy_loss="trl", same class; k3 KL without
    TRL's ratio correction, as the claim's arms run) on the same micro-batch: loss and every
    parameter gradient.

    Bound: both are fp32 sums over <= 42 tokens of O(1) terms, computed in a different order
    (Archer upcasts and clamps the log-ratio at +-20 and the KL at +-10, neither binding here), so they
    differ by a few fp32 ulps: atol 1e-6 on the loss and on gradients (|g| <= ~1), rtol 1e-5."""
    config = getattr(ArcherConfig, preset)(dual_clip_c=None, loss_agg="token-mean")
    archer = _tiny_trainer(tmp_path, "archer", policy_loss="archer", archer_config=config, **trl_fields)
    trl = _tiny_trainer(tmp_path, "trl", policy_loss="trl", **trl_fields)
    assert archer.beta == trl.beta == trl_fields["beta"]
    inputs = _trainer_inputs(seed=1)  # a batch where the widened clip acts on some reasoning tokens
    loss_a, grads_a = _loss_and_grads(archer, inputs)
    loss_t, grads_t = _loss_and_grads(trl, inputs)
    assert archer.loss_calls == trl.loss_calls == 1
    torch.testing.assert_close(loss_a, loss_t, atol=1e-6, rtol=1e-5)
    assert grads_a.keys() == grads_t.keys() and grads_a
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_t[name], atol=1e-6, rtol=1e-5, msg=name)
    # the full Archer loss differs on the same batch (the constraints act)
    full = _tiny_trainer(tmp_path, "full", policy_loss="archer", archer_config=ArcherConfig(), **trl_fields)
    _, grads_f = _loss_and_grads(full, inputs)
    diff = sum(float((grads_f[n] - grads_t[n]).norm() ** 2) for n in grads_t) ** 0.5
    norm = sum(float(grads_t[n].norm() ** 2) for n in grads_t) ** 0.5
    assert full._metrics["train"]["archer/clip_widened_frac"][-1] > 0
    assert full.loss_calls == 1 and diff > 1e-2 * norm, (diff, norm)


def test_trainer_rejects_unknown_policy_loss(tmp_path):
    with pytest.raises(ValueError, match="policy_loss"):
        _tiny_trainer(tmp_path, "bad", policy_loss="ppo")

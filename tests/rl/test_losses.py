"""Policy-loss building blocks, checked by hand and against TRL's GRPOTrainer loss on identical tensors."""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.rl.losses import (
    as_mask,
    check_policy_inputs,
    clipped_surrogate,
    dapo_loss,
    dynamic_sampling_mask,
    group_advantages,
    grpo_loss,
    kl_penalty,
    masked_aggregate,
    policy_loss,
)


@pytest.fixture
def trl():
    """TRL, the reference implementation (llm extra); only the tests that compare against it need it."""
    return pytest.importorskip("trl", reason="TRL (the llm extra) is the reference these tests compare with")


def _batch(seed=0, B=6, T=7):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g) * 3
    logp = (old + 0.4 * torch.randn(B, T, generator=g)).clamp(max=0)
    ref = (old + 0.2 * torch.randn(B, T, generator=g)).clamp(max=0)
    adv = torch.randn(B, generator=g)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
    ent = torch.rand(B, T, generator=g) * 2
    return logp, old, ref, adv, mask, ent


class _Accel:
    num_processes = 1
    sync_gradients = True

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x

    def pad_across_processes(self, x, dim=0, pad_index=0):
        return x


def _trl_loss(
    trl, loss_type, logp, old, ref, adv, mask, ent, *, beta, eps_low, eps_high, top_entropy_quantile=1.0
):
    """Run TRL's own GRPOTrainer._compute_loss on given per-token tensors (model forward stubbed out)."""
    leaf = logp.clone().requires_grad_(True)
    fake = SimpleNamespace(
        loss_type=loss_type,
        epsilon_low=eps_low,
        epsilon_high=eps_high,
        beta=beta,
        top_entropy_quantile=top_entropy_quantile,
        off_policy_mask_threshold=None,
        importance_sampling_level="token",
        use_vllm=False,
        aux_loss_enabled=False,
        _entropy_bonus_enabled=False,
        current_gradient_accumulation_steps=1,
        model=SimpleNamespace(training=True),
        accelerator=_Accel(),
        args=SimpleNamespace(delta=None, use_bias_correction_kl=False, steps_per_generation=1),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
    )
    fake._get_per_token_logps_and_entropies = lambda *a, **k: (leaf, ent, None)
    fake.get_high_entropy_mask = lambda e, m, t: trl.GRPOTrainer.get_high_entropy_mask(fake, e, m, t)
    B, T = logp.shape
    inputs = {
        "prompt_ids": torch.zeros(B, 2, dtype=torch.long),
        "prompt_mask": torch.ones(B, 2, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": mask.long(),
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": mask.sum().float(),
    }
    loss = trl.GRPOTrainer._compute_loss(fake, None, inputs)
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), grad, fake


def _ours(fn, logp, *args, **kwargs):
    leaf = logp.clone().requires_grad_(True)
    loss, metrics = fn(leaf, *args, **kwargs)
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), grad, metrics


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_grpo_loss_matches_trl(trl, seed, beta):
    logp, old, ref, adv, mask, ent = _batch(seed)
    trl_loss, trl_grad, _ = _trl_loss(
        trl, "grpo", logp, old, ref, adv, mask, ent, beta=beta, eps_low=0.2, eps_high=0.2
    )
    loss, grad, _ = _ours(grpo_loss, logp, old, adv, mask, ref_logprobs=ref, beta=beta, eps=0.2)
    torch.testing.assert_close(loss, trl_loss, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(grad, trl_grad, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("seed", [0, 3])
def test_dapo_loss_matches_trl(trl, seed):
    logp, old, ref, adv, mask, ent = _batch(seed)
    trl_loss, trl_grad, fake = _trl_loss(
        trl, "dapo", logp, old, ref, adv, mask, ent, beta=0.0, eps_low=0.2, eps_high=0.28
    )
    loss, grad, metrics = _ours(dapo_loss, logp, old, adv, mask)
    torch.testing.assert_close(loss, trl_loss, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(grad, trl_grad, atol=1e-7, rtol=1e-5)
    # TRL's clip metric = low-clipped + high-clipped fraction, same definition as ours
    assert metrics["clipfrac"] == pytest.approx(fake._metrics["train"]["clip_ratio/region_mean"][0], abs=1e-6)


def test_bnpo_equals_token_mean_and_entropy_mask_matches_trl(trl):
    logp, old, ref, adv, mask, ent = _batch(5)
    trl_loss, trl_grad, fake = _trl_loss(
        trl,
        "bnpo",
        logp,
        old,
        ref,
        adv,
        mask,
        ent,
        beta=0.0,
        eps_low=0.2,
        eps_high=0.2,
        top_entropy_quantile=0.2,
    )
    trl_mask = trl.GRPOTrainer.get_high_entropy_mask(fake, ent, mask.long(), 0.8)
    loss, grad, _ = _ours(policy_loss, logp, old, adv, mask, loss_agg="token-mean", token_mask=trl_mask)
    torch.testing.assert_close(loss, trl_loss, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(grad, trl_grad, atol=1e-7, rtol=1e-5)
    assert (grad[~trl_mask] == 0).all()


def test_group_advantages_hand_computed():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    adv = group_advantages(r, 4, eps=0.0)
    std = math.sqrt(1 / 3)  # unbiased std of (1, 0, 0, 1)
    torch.testing.assert_close(adv[:4], torch.tensor([0.5, -0.5, -0.5, 0.5]) / std)
    assert (adv[4:] == 0).all()  # identical rewards -> no signal
    centred = group_advantages(r, 4, norm_std=False)
    torch.testing.assert_close(centred[:4], torch.tensor([0.5, -0.5, -0.5, 0.5]))
    pop = group_advantages(r, 4, eps=0.0, unbiased=False)
    torch.testing.assert_close(pop[:4], torch.tensor([1.0, -1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match="multiple of group_size"):
        group_advantages(torch.ones(5), 4)
    with pytest.raises(ValueError, match="1-D"):
        group_advantages(torch.ones(2, 4), 4)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0, 1, allow_nan=False), min_size=8, max_size=8))
def test_group_advantages_zero_mean_per_group(rewards):
    adv = group_advantages(torch.tensor(rewards), 4)
    assert torch.allclose(adv.view(2, 4).sum(1), torch.zeros(2), atol=1e-4)


def test_kl_estimators_hand_computed():
    logp, ref = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]])
    d = ref - logp  # (-0.5, 1.0)
    torch.testing.assert_close(kl_penalty(logp, ref, "k1"), -d)
    torch.testing.assert_close(kl_penalty(logp, ref, "k2"), 0.5 * d**2)
    torch.testing.assert_close(kl_penalty(logp, ref, "k3"), torch.exp(d) - d - 1)
    assert (kl_penalty(logp, ref, "k3") >= 0).all()
    assert kl_penalty(torch.tensor([[0.0]]), torch.tensor([[-50.0]]), "k3", clamp=10.0).item() == 10.0
    with pytest.raises(ValueError, match="estimator"):
        kl_penalty(logp, ref, "k4")


def test_k3_is_unbiased_for_true_kl():
    # Sample from pi; E[k3] = KL(pi || ref) exactly in expectation.
    pi = torch.tensor([0.5, 0.3, 0.2])
    ref = torch.tensor([0.2, 0.5, 0.3])
    exact = float((pi * (pi / ref).log()).sum())
    expectation = float((pi * kl_penalty(pi.log()[None], ref.log()[None], "k3")[0]).sum())
    assert expectation == pytest.approx(exact, abs=1e-6)


def test_aggregations_hand_computed():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    assert masked_aggregate(values, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert masked_aggregate(values, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert masked_aggregate(values, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    assert masked_aggregate(values, torch.zeros_like(mask), "token-mean").item() == 0.0
    with pytest.raises(ValueError, match="loss_agg"):
        masked_aggregate(values, mask, "sum")


def test_clipped_surrogate_and_dual_clip():
    logp = torch.log(torch.tensor([[1.5, 0.5, 50.0]]))
    old = torch.zeros(1, 3)
    adv = torch.tensor([[1.0, -1.0, -2.0]])
    loss, ratio, clipped = clipped_surrogate(logp, old, adv, 0.2, 0.2)
    torch.testing.assert_close(loss, torch.tensor([[-1.2, 0.8, 100.0]]))
    assert clipped.tolist() == [[True, True, False]]
    loss, _, clipped = clipped_surrogate(logp, old, adv, 0.2, 0.2, dual_clip_c=3.0)
    assert loss[0, 2].item() == pytest.approx(6.0) and clipped[0, 2]


def test_dynamic_sampling_mask_and_as_mask():
    keep = dynamic_sampling_mask(torch.tensor([1.0, 1.0, 0.0, 1.0]), 2)
    assert keep.tolist() == [False, False, True, True]
    assert as_mask("m", torch.tensor([0.0, 1.0])).dtype == torch.bool
    with pytest.raises(ValueError, match="0/1"):
        as_mask("m", torch.tensor([0.0, 0.5]))


def test_check_policy_inputs_broadcasts_and_checks_extra_tensors():
    logp, old, ref, adv, mask, ent = _batch(3)
    a, m = check_policy_inputs(logp, old, adv, mask.long(), ref, entropy=ent)
    assert a.shape == logp.shape and torch.equal(a[:, 0], adv) and torch.equal(a[:, -1], adv)  # same kernel: broadcast copies
    assert m.dtype == torch.bool and torch.equal(m, mask)  # same kernel: bool mask
    a2, _ = check_policy_inputs(logp, old, a, mask)  # (B, T) advantages pass through unchanged
    assert a2 is a
    with pytest.raises(ValueError, match="advantages has 5 rows but logprobs has 6"):
        check_policy_inputs(logp, old, adv[:5], mask)
    with pytest.raises(ValueError, match="but entropy is"):
        check_policy_inputs(logp, old, adv, mask, ref, entropy=ent[:, :3])
    bad = ref.clone()
    bad[0, 0] = float("inf")
    with pytest.raises(ValueError, match="ref_logprobs contains NaN or inf"):
        check_policy_inputs(logp, old, adv, mask, bad)
    bad[0, 0], bad[~mask] = 0.0, float("nan")  # padding is never checked
    check_policy_inputs(logp, old, adv, mask, bad)


def test_policy_loss_errors():
    logp, old, ref, adv, mask, _ = _batch()
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss(logp, old, adv, mask, beta=0.1)
    with pytest.raises(ValueError, match="shape mismatch"):
        policy_loss(logp, old[:, :3], adv, mask)
    with pytest.raises(ValueError, match="rows"):
        policy_loss(logp, old, adv[:2], mask)


@pytest.mark.parametrize("loss_agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_masked_aggregate_ignores_non_finite_values_at_padding(loss_agg, bad):
    g = torch.Generator().manual_seed(0)
    values = torch.randn(3, 5, generator=g)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[0, 3:] = False
    mask[2, :] = False  # an all-padding row
    clean = values.clone().requires_grad_(True)
    dirty = values.masked_fill(~mask, bad).requires_grad_(True)
    a, b = masked_aggregate(clean, mask, loss_agg), masked_aggregate(dirty, mask, loss_agg)
    assert torch.isfinite(b) and torch.equal(a, b)  # same kernel: masked values never enter
    a.backward()
    b.backward()
    assert torch.equal(clean.grad, dirty.grad) and bool((dirty.grad[~mask] == 0).all())  # same kernel

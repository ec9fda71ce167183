"""AEM advantage transform: reductions, invariants, theory helper, bandit behaviour, errors."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.rl.aem import (
    AEMConfig,
    aem_advantages,
    aem_rescale_advantages,
    aem_weights,
    bandit_entropy_check,
    categorical_entropy,
    entropy_drift_first_order,
    natural_gradient_step,
    response_surprisal,
)


def batch(seed=0, b=12, t=5):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(b, t, generator=g) * 3
    mask = torch.ones(b, t, dtype=torch.bool)
    mask[::3, 3:] = False
    adv = torch.randn(b, generator=g)
    return adv, logp, mask


def test_lam_zero_is_identity_exactly():
    adv, logp, mask = batch()
    out, diag = aem_rescale_advantages(adv, logp, mask, AEMConfig(lam=0.0))
    assert torch.equal(out, adv) and diag["weight_dev"] == 0.0  # same kernel
    adv2 = adv.unsqueeze(1).expand_as(logp).clone()
    assert torch.equal(aem_advantages(adv2, logp, mask, AEMConfig(lam=0.0)), adv2)  # same kernel


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.1, 3.0), st.sampled_from(["batch", "group"]))
def test_weights_positive_mean_one_sign_preserved_and_monotone(seed, lam, scope):
    adv, logp, mask = batch(seed)
    groups = [i % 3 for i in range(len(adv))]
    cfg = AEMConfig(lam=lam, scope=scope)
    s = response_surprisal(logp, mask)
    w = aem_weights(s, cfg, groups)
    assert (w > 0).all()
    assert float(w.mean()) == pytest.approx(1.0, abs=1e-5)
    out = aem_advantages(adv, logp, mask, cfg, groups)
    assert torch.equal(torch.sign(out), torch.sign(adv))  # same kernel: signs: a positive weight times adv keeps the sign exactly
    for g in set(groups):
        idx = (
            [i for i in range(len(groups)) if groups[i] == g]
            if scope == "group"
            else list(range(len(groups)))
        )
        order = sorted(idx, key=lambda i: float(s[i]))
        ws = [float(w[i]) for i in order]
        assert all(a >= b - 1e-9 for a, b in zip(ws, ws[1:]))  # lower surprisal -> larger weight


def test_length_normalisation_excludes_padding():
    logp = torch.tensor([[-1.0, -1.0, 0.0, 0.0], [-1.0, -1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]]).bool()
    logp_padded = logp.clone()
    logp_padded[0, 2:] = -50.0  # garbage at padding must not matter
    s = response_surprisal(logp_padded, mask)
    assert torch.allclose(s, torch.tensor([1.0, 1.0]))
    assert torch.allclose(response_surprisal(logp, mask, "sum"), torch.tensor([2.0, 4.0]))


def test_token_broadcast_matches_row_advantages():
    adv, logp, mask = batch(3)
    cfg = AEMConfig(lam=0.7)
    rows = aem_advantages(adv, logp, mask, cfg)
    tokens = aem_advantages(adv.unsqueeze(1).expand_as(logp).clone(), logp, mask, cfg)
    assert torch.allclose(tokens, rows.unsqueeze(1).expand_as(logp))


def test_group_scope_uses_group_means():
    s = torch.tensor([1.0, 3.0, 10.0, 12.0])
    cfg = AEMConfig(scope="group", standardize=False, renormalize=False)
    w = aem_weights(s, cfg, ["a", "a", "b", "b"])
    assert torch.allclose(w, torch.exp(-torch.tensor([-1.0, 1.0, -1.0, 1.0])))
    wb = aem_weights(s, AEMConfig(standardize=False, renormalize=False))
    assert torch.allclose(wb, torch.exp(-(s - s.mean())))


def test_entropy_drift_matches_finite_difference_of_natural_gradient_step():
    g = torch.Generator().manual_seed(0)
    for _ in range(10):
        logits = torch.randn(10, generator=g, dtype=torch.float64) * 1.5
        adv = torch.randn(10, generator=g, dtype=torch.float64)
        lr = 1e-4
        measured = categorical_entropy(natural_gradient_step(logits, adv, lr)) - categorical_entropy(logits)
        predicted = entropy_drift_first_order(torch.softmax(logits, -1), adv, lr)
        assert float(measured) == pytest.approx(float(predicted), rel=1e-2)


def test_bandit_aem_raises_entropy_when_negatives_dominate_and_lowers_it_when_positives_do():
    neg = bandit_entropy_check(200, frac_positive=0.2, seed=1)
    pos = bandit_entropy_check(200, frac_positive=0.8, seed=1)
    assert neg["sign_agreement"] >= 0.9 and pos["sign_agreement"] >= 0.9
    assert neg["aem_direction"] >= 0.9 and pos["aem_direction"] >= 0.9
    assert neg["mean_dh_aem"] > neg["mean_dh_plain"]
    assert pos["mean_dh_aem"] < pos["mean_dh_plain"]


def test_bandit_is_deterministic():
    assert bandit_entropy_check(20, seed=5) == bandit_entropy_check(20, seed=5)


def test_bad_inputs():
    adv, logp, mask = batch()
    with pytest.raises(ValueError, match="shape mismatch"):
        response_surprisal(logp, mask[:, :3])
    empty = mask.clone()
    empty[2] = False
    with pytest.raises(ValueError, match="empty response"):
        aem_advantages(adv, logp, empty)
    nan = logp.clone()
    nan[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        aem_advantages(adv, nan, mask)
    with pytest.raises(ValueError, match="lam"):
        AEMConfig(lam=-0.1)
    with pytest.raises(ValueError, match="scope"):
        AEMConfig(scope="token")
    with pytest.raises(ValueError, match="group_ids"):
        aem_weights(response_surprisal(logp, mask), AEMConfig(scope="group"))
    with pytest.raises(ValueError, match="shape mismatch"):
        aem_advantages(adv[:5], logp, mask)
    with pytest.raises(ValueError, match="probability"):
        entropy_drift_first_order(torch.tensor([0.5, 0.6]), torch.zeros(2), 0.1)


def test_numpy_free_of_side_effects_on_inputs():
    adv, logp, mask = batch()
    before = (adv.clone(), logp.clone())
    aem_advantages(adv, logp, mask)
    assert torch.equal(adv, before[0]) and torch.equal(logp, before[1])  # same kernel: inputs untouched
    assert np.isfinite(adv.numpy()).all()

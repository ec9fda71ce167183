"""Tests for the cross-lingual gap decomposition, the residual-prediction barrier and contrastive alignment."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.common.models import build_tiny_lm
from neurips26.editing.crosslingual_edit import (
    CrossLingualPair,
    EditRequest,
    EditSite,
    EditUpdate,
    alphaedit_update,
    contrastive_align,
    decompose_gap,
    decompose_gaps,
    memit_update,
    residual_prediction_barrier,
    rome_update,
)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _C0(d, seed):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(300, d, dtype=torch.float64, generator=g)
    return X.T @ X / 300


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 5), d_v=st.integers(6, 12), seed=st.integers(0, 10_000))
def test_identity_and_pythagoras_random_update(n, d_v, seed):
    g = torch.Generator().manual_seed(seed)
    d_k = 9
    R_s = torch.randn(d_v, n, dtype=torch.float64, generator=g)
    Phi = torch.randn(n, d_k, dtype=torch.float64, generator=g)
    K_s, K_t = (torch.randn(d_k, n, dtype=torch.float64, generator=g) for _ in range(2))
    R_t = torch.randn(d_v, n, dtype=torch.float64, generator=g)
    upd = EditUpdate(R_s @ Phi, R_s, Phi, K_s, "random")
    dec = decompose_gaps(upd, K_s, K_t, R_t)
    assert torch.allclose(dec.e_key + dec.e_par + dec.e_orth, R_t - upd.delta_W @ K_t, rtol=0, atol=1e-10)
    assert torch.allclose(dec.e_key, dec.e_fit + dec.e_prop, atol=1e-12)
    assert dec.identity_error.max() < 1e-12
    Q, _ = torch.linalg.qr(R_s)
    assert (Q.T @ dec.e_orth).abs().max() < 1e-10  # e_orth is orthogonal to span(R_s)
    lhs = dec.gap_norm2
    rhs = (dec.e_key + dec.e_par).pow(2).sum(0) + dec.e_orth.pow(2).sum(0)
    assert torch.allclose(lhs, rhs, rtol=1e-10)
    assert torch.allclose(dec.f_orth + dec.f_inspan, torch.ones(n, dtype=torch.float64), atol=1e-10)


def test_degenerate_rome_same_key_same_residual():
    d_k, d_v = 8, 5
    C0 = _C0(d_k, 0)
    g = torch.Generator().manual_seed(1)
    k, r = torch.randn(d_k, dtype=torch.float64, generator=g), torch.randn(d_v, dtype=torch.float64, generator=g)
    upd = rome_update(k, r, C0, jitter=0.0)
    dec = decompose_gap(upd, 0, k, k, r, C0)
    assert dec.gap.norm() < 1e-10 * r.norm()
    assert abs(float(dec.alpha) - 1.0) < 1e-10
    assert abs(float(dec.cos_C) - 1.0) < 1e-10


def test_degenerate_target_residual_orthogonal():
    d_k, d_v = 8, 5
    C0 = _C0(d_k, 2)
    g = torch.Generator().manual_seed(3)
    k_s, k_t = (torch.randn(d_k, dtype=torch.float64, generator=g) for _ in range(2))
    r_s = torch.zeros(d_v, dtype=torch.float64)
    r_s[0] = 2.0
    r_t = torch.zeros(d_v, dtype=torch.float64)
    r_t[1:3] = torch.tensor([1.0, -3.0], dtype=torch.float64)
    dec = decompose_gap(rome_update(k_s, r_s, C0), 0, k_s, k_t, r_t)
    assert torch.allclose(dec.e_orth, r_t, atol=1e-12)
    assert torch.allclose(dec.e_par, -r_s, atol=1e-12)
    assert float(dec.f_orth) > 0


@pytest.mark.parametrize("editor", ["rome", "memit", "alphaedit"])
def test_identity_holds_for_every_editor(editor):
    d_k, d_v, n = 12, 6, 3
    C0 = _C0(d_k, 4)
    g = torch.Generator().manual_seed(5)
    K_s, K_t = (torch.randn(d_k, n, dtype=torch.float64, generator=g) for _ in range(2))
    R_s, R_t = (torch.randn(d_v, n, dtype=torch.float64, generator=g) for _ in range(2))
    if editor == "rome":
        upd = rome_update(K_s[:, 0], R_s[:, 0], C0)
        K_s, K_t, R_t = K_s[:, :1], K_t[:, :1], R_t[:, :1]
    elif editor == "memit":
        upd = memit_update(K_s, R_s, C0, lam=1.0)
    else:
        upd = alphaedit_update(K_s, R_s, C0, eps=0.5, l2=0.1)
    dec = decompose_gaps(upd, K_s, K_t, R_t, C0)
    assert dec.identity_error.max() < 1e-12
    assert torch.allclose(dec.gap_norm2, (dec.e_key + dec.e_par).pow(2).sum(0) + dec.e_orth.pow(2).sum(0), rtol=1e-10)


def test_decompose_shape_errors():
    upd = rome_update(torch.randn(4, dtype=torch.float64), torch.randn(3, dtype=torch.float64), torch.eye(4))
    with pytest.raises(ValueError, match="K_t"):
        decompose_gaps(upd, torch.randn(4, 1), torch.randn(5, 1), torch.randn(3, 1))
    with pytest.raises(ValueError, match="i must lie"):
        decompose_gap(upd, 3, torch.randn(4), torch.randn(4), torch.randn(3))


def test_barrier_linear_relation_r2_one():
    g = torch.Generator().manual_seed(0)
    d = 6
    M = torch.randn(d, d, dtype=torch.float64, generator=g)
    Rs = torch.randn(d, 400, dtype=torch.float64, generator=g)
    Rt = M @ Rs + 0.5
    out = residual_prediction_barrier(Rs[:, :300], Rt[:, :300], Rs[:, 300:], Rt[:, 300:], ridge=1e-8)
    assert out["r2"] > 0.999 and out["r2_orth"] > 0.99
    assert torch.allclose(out["M"], M, atol=1e-5)


def test_barrier_independent_r2_zero():
    g = torch.Generator().manual_seed(1)
    Rs = torch.randn(4, 2000, dtype=torch.float64, generator=g)
    Rt = torch.randn(4, 2000, dtype=torch.float64, generator=g)
    out = residual_prediction_barrier(Rs[:, :1000], Rt[:, :1000], Rs[:, 1000:], Rt[:, 1000:])
    assert abs(out["r2"]) < 0.1
    with pytest.raises(ValueError, match="d_v, n"):
        residual_prediction_barrier(Rs[:3], Rt, Rs, Rt)


def test_contrastive_align_raises_paired_cosine():
    torch.manual_seed(0)
    model = build_tiny_lm("llama", vocab_size=60, seed=0, hidden_size=32, intermediate_size=64,
                          num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2)
    site = EditSite(model, 0)
    pairs = []
    for i in range(12):
        a, b = 4 + 2 * i, 30 + 2 * i
        pairs.append(CrossLingualPair(EditRequest([1, a, a + 1, 5], (1, 3), 6), EditRequest([1, 7, b, b + 1], (2, 4), 8)))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    hist = contrastive_align(model, pairs, site, steps=50, lr=5e-3, batch_size=8, seed=0)
    assert hist["infonce"][-5:] and sum(hist["infonce"][-5:]) / 5 < sum(hist["infonce"][:5]) / 5
    assert sum(hist["paired_cos"][-5:]) / 5 > sum(hist["paired_cos"][:5]) / 5
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]  # same kernel: n/a, asserts a difference
    assert changed and all(k.startswith("model.layers.0.") for k in changed)
    assert all(p.requires_grad for p in model.parameters())  # flags restored
    with pytest.raises(ValueError, match="at least 2 pairs"):
        contrastive_align(model, pairs[:1], site, steps=1)
    with pytest.raises(ValueError, match="trainable"):
        contrastive_align(model, pairs, site, steps=1, trainable="lora")


def test_cldr_facts_every_language_and_subject_in_prompt():
    from neurips26.common.multilingual import LANGUAGES, capital_facts, currency_facts

    caps = capital_facts()
    assert len(caps) >= 30
    assert caps["AT"]["de"].object == "Wien" and caps["AT"]["en"].object == "Vienna"
    for row in list(caps.values()) + list(currency_facts(("en", "es")).values()):
        for fact in row.values():
            assert fact.subject in fact.prompt and fact.object
    assert set(caps["FR"]) == set(LANGUAGES)
    with pytest.raises(ValueError, match="language"):
        capital_facts(("en", "xx"))

"""Tests for AMARIS (ranked inherited subspaces) against peft's merge utilities."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from peft.utils.merge_utils import task_arithmetic

from neurips26.common.models import build_tiny_lm
from neurips26.editing.amaris import (
    AmarisConfig,
    amaris,
    amaris_gate,
    amaris_merge,
    amaris_merge_lora,
    collect_activation_moments,
    dare_merge,
    task_arithmetic_merge,
    ties_merge,
)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _psd(d, seed, scale=None):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(200, d, dtype=torch.float64, generator=g)
    if scale is not None:
        X = X * scale
    return X.T @ X / 200


def _tiny(seed):
    return build_tiny_lm(
        "llama",
        vocab_size=30,
        seed=seed,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )


@pytest.fixture(scope="module")
def pair():
    base, spec = _tiny(0), _tiny(1)
    g = torch.Generator().manual_seed(0)
    batches = [{"input_ids": torch.randint(4, 30, (4, 8), generator=g)}]
    mb = collect_activation_moments(base, batches)
    ms = collect_activation_moments(base, [{"input_ids": torch.randint(4, 30, (4, 8), generator=g)}])
    return base.state_dict(), spec.state_dict(), ms, mb


def test_gate_is_projector_within_budget_and_capture_monotone():
    g = torch.Generator().manual_seed(0)
    dW = torch.randn(12, 10, dtype=torch.float64, generator=g)
    Cs, Cb = _psd(10, 1), _psd(10, 2)
    caps = []
    for budget in (0.05, 0.2, 0.5, 1.0):
        Q, st_ = amaris_gate(dW, Cs, Cb, budget=budget)
        G = Q @ Q.T
        assert torch.allclose(G @ G, G, atol=1e-10) and torch.allclose(G, G.T)
        assert torch.linalg.matrix_rank(G) == Q.shape[1] == st_["k"]
        B = dW @ Cb @ dW.T
        assert float(torch.trace(Q.T @ B @ Q) / torch.trace(B)) <= budget + 1e-9
        caps.append(st_["capture"])
    assert all(a <= b + 1e-12 for a, b in zip(caps, caps[1:]))


def test_generalized_eigen_residual_and_paths_agree():
    g = torch.Generator().manual_seed(3)
    dW = torch.randn(6, 4, dtype=torch.float64, generator=g) @ torch.randn(
        4, 9, dtype=torch.float64, generator=g
    )
    Cs, Cb = _psd(9, 4), _psd(9, 5)
    Q_row, s_row = amaris_gate(dW, Cs, Cb, budget=0.3, path="rowspace")
    Q_full, s_full = amaris_gate(dW, Cs, Cb, budget=0.3, path="full")
    assert s_row["rank"] == 4
    lam_full = torch.tensor(s_full["all_lambdas"][:4])
    assert torch.allclose(torch.tensor(s_row["all_lambdas"]), lam_full, rtol=1e-6, atol=1e-8)
    assert torch.allclose(Q_row @ Q_row.T, Q_full @ Q_full.T, atol=1e-6)
    # the eigenvalues are those of S u = lambda (B + eps I) u (scipy's generalized solver as reference)
    import scipy.linalg

    S, B = dW @ Cs @ dW.T, dW @ Cb @ dW.T
    Bm = B + 1e-3 * torch.trace(B) / 6 * torch.eye(6, dtype=torch.float64)
    ref_lam, ref_vec = scipy.linalg.eigh(S.numpy(), Bm.numpy())
    assert abs(ref_lam[-1] - s_full["all_lambdas"][0]) < 1e-6 * abs(ref_lam[-1])
    u = torch.from_numpy(ref_vec[:, -1])
    assert (S @ u - float(ref_lam[-1]) * Bm @ u).norm() < 1e-8 * S.norm()


def test_full_budget_equals_peft_task_arithmetic_and_zero_is_base():
    g = torch.Generator().manual_seed(7)
    taus = [torch.randn(8, 5, dtype=torch.float64, generator=g) for _ in range(2)]
    w = torch.tensor([0.7, 0.4], dtype=torch.float64)
    Cs, Cb = _psd(5, 8), _psd(5, 9)
    full = amaris(taus, w, Cs, Cb, budget=1.0, eps_rel=1e-12)
    assert torch.allclose(full, task_arithmetic([t.clone() for t in taus], w.clone()), atol=1e-8)
    assert torch.equal(amaris(taus, w, Cs, Cb, budget=0.0), torch.zeros(8, 5, dtype=torch.float64))  # same kernel: budget 0 returns the constant zeros
    assert torch.equal(  # same kernel: rank 0 returns the constant zeros
        amaris(taus, w, Cs, Cb, budget=1.0, max_rank=0), torch.zeros(8, 5, dtype=torch.float64)
    )


def test_state_dict_merge_endpoints(pair):
    base, spec, ms, mb = pair
    m0, rep0 = amaris_merge(base, spec, ms, mb, AmarisConfig(budget=0.0))
    assert all(torch.equal(m0[k], base[k]) for k in base)  # same kernel: budget 0 adds nothing
    m1, _ = amaris_merge(base, spec, ms, mb, AmarisConfig(budget=1.0, max_rank_frac=1.0, eps_rel=1e-12))
    for name in ms:
        assert torch.allclose(m1[f"{name}.weight"], spec[f"{name}.weight"], atol=1e-5)
    assert set(m1) == set(base) and all(
        m1[k].dtype == base[k].dtype and m1[k].shape == base[k].shape for k in base
    )
    assert torch.equal(m1["model.embed_tokens.weight"], base["model.embed_tokens.weight"])  # same kernel: copied from base; other="base"


def test_constructed_case_full_capture_zero_deviation():
    # base inputs live in the first 4 input coordinates, specialist inputs in the last 4;
    # the update writes output dims 0-2 from specialist inputs and output dims 3-5 from base inputs.
    Cb = torch.diag(torch.tensor([1.0] * 4 + [0.0] * 4, dtype=torch.float64))
    Cs = torch.diag(torch.tensor([0.0] * 4 + [1.0] * 4, dtype=torch.float64))
    g = torch.Generator().manual_seed(0)
    dW = torch.zeros(6, 8, dtype=torch.float64)
    dW[:3, 4:] = torch.randn(3, 4, dtype=torch.float64, generator=g)
    dW[3:, :4] = 0.2 * torch.randn(3, 4, dtype=torch.float64, generator=g)
    Q, s = amaris_gate(dW, Cs, Cb, budget=0.01)
    assert s["capture"] > 0.999 and s["deviation"] < 1e-6
    # interpolation at any alpha inherits a base deviation proportional to alpha^2 * tr(B)
    B = dW @ Cb @ dW.T
    for a in (0.5, 1.0):
        assert float(torch.trace((a * dW) @ Cb @ (a * dW).T) / torch.trace(B)) >= 0.25


def test_moments_two_halves_equal_one_pass():
    model = _tiny(0)
    g = torch.Generator().manual_seed(1)
    b1, b2 = ({"input_ids": torch.randint(4, 30, (2, 6), generator=g)} for _ in range(2))
    one = collect_activation_moments(model, [b1, b2])
    halves = [collect_activation_moments(model, [b]) for b in (b1, b2)]
    for k, v in one.items():
        assert torch.allclose(v, 0.5 * (halves[0][k] + halves[1][k]), atol=1e-12)
        assert torch.allclose(v, v.T) and torch.linalg.eigvalsh(v).min() > -1e-10
    assert "lm_head" not in one


def test_baselines_dare_unbiased_ties_density_one(pair):
    base, spec, _, _ = pair
    key = "model.layers.0.mlp.down_proj.weight"
    ta = task_arithmetic_merge(base, [spec], [0.8], keys=[key])
    delta = spec[key] - base[key]
    assert torch.allclose(ta[key], base[key] + 0.8 * delta, atol=1e-6)
    ti = ties_merge(base, [spec], density=1.0, alpha=0.8, keys=[key])
    assert torch.allclose(ti[key], ta[key], atol=1e-6)
    mean = sum(dare_merge(base, [spec], 0.5, 0.8, seed=s, keys=[key])[key] for s in range(200)) / 200
    assert (mean - ta[key]).abs().mean() < 0.1 * (0.8 * delta).abs().mean()
    a, b = (
        dare_merge(base, [spec], 0.5, 0.8, seed=3, keys=[key]),
        dare_merge(base, [spec], 0.5, 0.8, seed=3, keys=[key]),
    )
    assert torch.equal(a[key], b[key])  # same kernel: rerun, same shapes and seed


def test_lora_full_budget_equals_merge_and_unload():
    from peft import LoraConfig, get_peft_model

    base = _tiny(0)
    g = torch.Generator().manual_seed(2)
    batches = [{"input_ids": torch.randint(4, 30, (3, 7), generator=g)}]
    targets = ["q_proj", "v_proj"]
    names = [n for n, _ in base.named_modules() if n.endswith(tuple(targets))]
    moments = collect_activation_moments(base, batches, modules=names)
    ref_sd = {k: v.clone() for k, v in base.state_dict().items()}
    peft_model = get_peft_model(
        base, LoraConfig(r=2, lora_alpha=4, target_modules=targets, init_lora_weights=False)
    )
    merged, rep = amaris_merge_lora(
        peft_model, moments, moments, AmarisConfig(budget=1.0, max_rank_frac=1.0, eps_rel=1e-12)
    )
    unloaded = peft_model.merge_and_unload().state_dict()
    for k, v in merged.items():
        assert torch.allclose(v, unloaded[k], atol=1e-5), k
        assert not torch.allclose(v, ref_sd[k])
    assert set(rep.layers) == set(names)


def test_errors(pair):
    base, spec, ms, mb = pair
    bad = dict(spec)
    bad["model.norm.weight"] = torch.ones(17)
    with pytest.raises(ValueError, match="model.norm.weight"):
        amaris_merge(base, bad, ms, mb)
    missing = {k: v for k, v in spec.items() if k != "model.norm.weight"}
    with pytest.raises(KeyError):
        amaris_merge(base, missing, ms, mb)
    with pytest.raises(KeyError, match="moments"):
        amaris_merge(base, spec, ms, mb, AmarisConfig(modules=["model.layers.0.mlp.nope"]))
    with pytest.raises(ValueError, match="budget"):
        AmarisConfig(budget=1.5)
    with pytest.raises(ValueError, match="max_rank"):
        amaris_gate(torch.randn(4, 3), torch.eye(3), torch.eye(3), max_rank=5)
    with pytest.raises(ValueError, match="C_s"):
        amaris_gate(torch.randn(4, 3), torch.eye(2), torch.eye(3))
    with pytest.raises(ValueError, match="global_lambda"):
        AmarisConfig(mode="global")
    with pytest.raises(ValueError, match="share one shape"):
        amaris([torch.randn(3, 2), torch.randn(2, 2)], torch.ones(2), torch.eye(2), torch.eye(2))


@settings(max_examples=20, deadline=None)
@given(budget=st.floats(0.0, 1.0), seed=st.integers(0, 1000))
def test_budget_respected_property(budget, seed):
    g = torch.Generator().manual_seed(seed)
    dW = torch.randn(7, 6, dtype=torch.float64, generator=g)
    Cs, Cb = _psd(6, seed), _psd(6, seed + 1)
    Q, s = amaris_gate(dW, Cs, Cb, budget=budget)
    assert s["deviation"] <= budget + 1e-9
    assert torch.allclose(Q.T @ Q, torch.eye(Q.shape[1], dtype=torch.float64), atol=1e-8)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 1000), r=st.integers(1, 5), budget=st.floats(0.0, 1.0))
def test_factored_svd_path_equals_dense(seed, r, budget):
    g = torch.Generator().manual_seed(seed)
    F = torch.randn(9, r, dtype=torch.float64, generator=g)
    G = torch.randn(r, 7, dtype=torch.float64, generator=g)
    Cs, Cb = _psd(7, seed), _psd(7, seed + 1)
    Q_d, s_d = amaris_gate(F @ G, Cs, Cb, budget=budget)
    Q_f, s_f = amaris_gate(F @ G, Cs, Cb, budget=budget, factors=(F, G))
    assert s_d["k"] == s_f["k"] and s_d["rank"] == s_f["rank"] == r
    assert torch.allclose(Q_d @ Q_d.T, Q_f @ Q_f.T, atol=1e-8)
    assert abs(s_d["deviation"] - s_f["deviation"]) < 1e-9 and abs(s_d["capture"] - s_f["capture"]) < 1e-9
    # the row-space path's deviation is that of the full output space
    B = (F @ G) @ Cb @ (F @ G).T
    if Q_f.shape[1]:
        assert abs(float(torch.trace(Q_f.T @ B @ Q_f) / torch.trace(B)) - s_f["deviation"]) < 1e-9
    with pytest.raises(ValueError, match="factors"):
        amaris_gate(F @ G, Cs, Cb, factors=(F, G.T))


def test_lora_factored_merge_equals_dense_merge():
    from peft import LoraConfig, get_peft_model

    base = _tiny(0)
    g = torch.Generator().manual_seed(5)
    targets = ["q_proj", "up_proj", "down_proj"]
    names = [n for n, _ in base.named_modules() if n.endswith(tuple(targets))]
    ms = collect_activation_moments(
        base, [{"input_ids": torch.randint(4, 30, (3, 7), generator=g)}], modules=names
    )
    mb = collect_activation_moments(
        base, [{"input_ids": torch.randint(4, 30, (3, 7), generator=g)}], modules=names
    )
    torch.manual_seed(0)
    pm = get_peft_model(base, LoraConfig(r=2, lora_alpha=8, target_modules=targets, init_lora_weights=False))
    for budget in (0.0, 0.3, 1.0):
        cfg = AmarisConfig(budget=budget, max_rank_frac=1.0)
        fast, rep_f = amaris_merge_lora(pm, ms, mb, cfg)
        slow, rep_s = amaris_merge_lora(pm, ms, mb, cfg, use_factors=False)
        assert set(fast) == set(slow) == {f"{n}.weight" for n in names}
        for k in fast:
            assert torch.allclose(fast[k], slow[k], atol=1e-6), k
        assert [v["k"] for v in rep_f.layers.values()] == [v["k"] for v in rep_s.layers.values()]


def test_moments_from_inputs_embeds_equal_input_ids():
    model = _tiny(0)
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(4, 30, (2, 6), generator=g)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    a = collect_activation_moments(model, [{"input_ids": ids, "attention_mask": mask}])
    with torch.no_grad():
        embeds = model.get_input_embeddings()(ids)
    b = collect_activation_moments(model, [{"inputs_embeds": embeds, "attention_mask": mask}])
    assert set(a) == set(b)
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-10), k


def test_shared_dominant_direction_is_passed_over_below_its_share():
    """Diagnosis of the SmolLM2 AMARIS arm (results/diagnosis/amaris_smollm2.md), exact and small: when both
    calibration sets excite one input direction far more than any other (a shared mean, like a massive
    activation), the update's component along it carries most of the capture tr(S) *and* most of the
    deviation tr(B) (ratio ~1). Any budget below its deviation share passes it over, so the gated update
    keeps almost none of the specialist's effect on typical inputs; only budget 1 takes it."""
    d_out, d_in = 6, 8
    g = torch.Generator().manual_seed(0)
    U, _ = torch.linalg.qr(torch.randn(d_out, 3, dtype=torch.float64, generator=g))
    V = torch.eye(d_in, dtype=torch.float64)[:, :3]  # row space: e0 (the shared direction), e1, e2
    dW = U @ V.T
    mu = torch.zeros(d_in, dtype=torch.float64)
    mu[0] = 10.0
    C_b = torch.eye(d_in, dtype=torch.float64) + torch.outer(mu, mu)
    C_s = C_b.clone()
    C_s[1, 1] = 4.0  # the specialist inputs also excite e1 more: the one cheap, specialist-specific direction
    # shares of tr(S) = 106 and tr(B) = 103 per direction: e0 (101, 101), e1 (4, 1), e2 (1, 1)
    Q, st = amaris_gate(dW, C_s, C_b, budget=0.9)
    assert st["k"] == 2 and st["rank"] == 3
    assert abs(st["deviation"] - 2 / 103) < 1e-9 and abs(st["capture"] - 5 / 106) < 1e-9
    assert len(st["skipped_deviation"]) == 1
    assert (
        abs(st["skipped_deviation"][0] - 101 / 103) < 1e-9
        and abs(st["skipped_capture"][0] - 101 / 106) < 1e-9
    )
    # the merged update leaves the mean input's shift out entirely (float64, 6x3 products: 1e-12 is loose)
    shift = dW @ mu
    assert float((Q @ (Q.T @ shift)).norm()) < 1e-12 * float(shift.norm())
    # 0.99 is still below what it needs (its share plus the cheaper e1 kept first); budget 1 takes everything
    assert amaris_gate(dW, C_s, C_b, budget=0.99)[1]["k"] == 2
    Q1, st1 = amaris_gate(dW, C_s, C_b, budget=1.0)
    assert st1["k"] == 3 and abs(st1["capture"] - 1) < 1e-9 and st1["skipped_deviation"] == []
    assert torch.allclose(Q1 @ (Q1.T @ dW), dW, atol=1e-12)

"""ABC-Align: reductions, the plug-in correction strength, PPI++ λ, losses, per-example gradients, bad input,
the minimal reward trainer and the TRL DPO trainer (c = 0 is TRL's DPO loss on pseudo pairs, c = 1 is PPI)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from neurips26.rl.abc_align import (
    ABCAlignObjective,
    ABCConfig,
    ABCRewardTrainer,
    HumanOnlyObjective,
    MarginBatch,
    PooledObjective,
    PPIPlusPlusObjective,
    PreferencePairs,
    PseudoOnlyObjective,
    StratifiedPairSampler,
    abc_dpo_loss,
    abc_reward_loss,
    correction_from_statistics,
    correction_statistics,
    dpo_margin,
    estimate_correction_strength,
    make_objective,
    per_example_margin_grads,
    ppi_pp_lambda,
    preference_margin_rm,
    soft_logistic_loss,
)


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: one intra-op thread is faster and avoids spin-waiting on a shared CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _losses(seed=0, k=12, m=5):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(k, generator=g), torch.rand(m, generator=g), torch.rand(m, generator=g)


# ----------------------------------------------------------------------------- reductions
def test_c0_is_pseudo_only_and_c1_is_ppi_rectified():
    lp, lh, lhp = _losses()
    zero = ABCAlignObjective(ABCConfig(correction=0.0), 5, 12)
    one = ABCAlignObjective(ABCConfig(correction=1.0), 5, 12)
    assert torch.equal(zero(lp, lh, lhp), PseudoOnlyObjective()(lp, lh, lhp))  # same kernel
    assert torch.allclose(zero(lp, lh, lhp), lp.mean())
    assert torch.allclose(one(lp, lh, lhp), lp.mean() + lh.mean() - lhp.mean())
    assert torch.allclose(make_objective("ppi", 5, 12)(lp, lh, lhp), one(lp, lh, lhp))
    half = ABCAlignObjective(ABCConfig(correction=0.5), 5, 12)
    assert torch.allclose(half(lp, lh, lhp), lp.mean() + 0.5 * (lh.mean() - lhp.mean()))
    assert torch.allclose(HumanOnlyObjective()(lp, lh, lhp), lh.mean())
    assert torch.allclose(PooledObjective(5, 12)(lp, lh, lhp), (12 * lp.mean() + 5 * lh.mean()) / 17)
    ppi_pp = PPIPlusPlusObjective(5, 12, lam_init=0.3, adaptive=False)
    assert torch.allclose(ppi_pp(lp, lh, lhp), lh.mean() + 0.3 * (lp.mean() - lhp.mean()))


def test_c1_objective_is_unbiased_for_the_human_loss():
    """Monte Carlo: with a known expected human loss, E[L_ABC(c=1)] equals it within 3 standard errors
    although the pseudo labels are biased (their loss has a different expectation)."""
    g = torch.Generator().manual_seed(0)
    objective = ABCAlignObjective(ABCConfig(correction=1.0), 20, 200)
    reps, n, N = 2000, 20, 200
    # margins of a fixed model on random pairs (m ~ N(1, 1)); human label ~ Bernoulli(0.7), judge biased: 0.95
    m_h = 1 + torch.randn(reps, n, generator=g)
    m_p = 1 + torch.randn(reps, N, generator=g)
    h = (torch.rand(reps, n, generator=g) < 0.7).float()
    values = torch.stack(
        [
            objective(
                soft_logistic_loss(m_p[r], torch.full((N,), 0.95)),
                soft_logistic_loss(m_h[r], h[r]),
                soft_logistic_loss(m_h[r], torch.full((n,), 0.95)),
            )
            for r in range(reps)
        ]
    )
    # E[ℓ(m, h)] = 0.7 E[-log σ(m)] + 0.3 E[-log σ(-m)], m ~ N(1, 1), by a large Monte-Carlo sample
    big = 1 + torch.randn(2_000_000, generator=g)
    truth = float(soft_logistic_loss(big, torch.tensor(0.7)).mean())
    pseudo_only = float(soft_logistic_loss(m_p[:200].reshape(-1), torch.tensor(0.95)).mean())
    se = float(values.std() / math.sqrt(reps))
    assert abs(float(values.mean()) - truth) < 3 * se + 1e-3
    assert abs(pseudo_only - truth) > 10 * se  # the uncorrected pseudo loss is biased here


# ----------------------------------------------------------------------------- plug-in c
def test_identical_labels_give_zero_correction_and_c_decays():
    cfg = ABCConfig(update_every=1, window=64, ema=0.5)
    obj = ABCAlignObjective(cfg, 100, 1000)
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        labels = torch.rand(16, generator=g)
        batch = MarginBatch(
            torch.randn(1, 16, generator=g),
            labels[None],
            labels[None],
            torch.randn(1, 8),
            torch.rand(1, 8),
            human_grads=torch.randn(1, 16, 5, generator=g),
        )
        obj.observe_batch(batch)
        obj.update_correction()
    assert obj.diagnostics()["c_hat"] == 0.0
    assert obj.c < 1e-5  # 0.5 ** 20


def test_large_constant_bias_with_tiny_variance_gives_c_near_one():
    d = torch.ones(64, 3) * 2.0 + 1e-4 * torch.randn(64, 3, generator=torch.Generator().manual_seed(0))
    assert estimate_correction_strength(d, n_human_total=50) > 0.999


@pytest.mark.parametrize("mu,sigma,n", [(0.3, 1.0, 50), (0.1, 2.0, 400), (1.0, 0.5, 10), (0.0, 1.0, 100)])
def test_c_hat_matches_the_closed_form_optimum_on_gaussian_corrections(mu, sigma, n):
    """d_i ~ N(μ 1, σ² I) in 4 dimensions: ĉ -> c* = ||μ||² / (||μ||² + tr Σ / n) for a large window."""
    dim, W = 4, 400_000
    g = torch.Generator().manual_seed(1)
    d = mu + sigma * torch.randn(W, dim, generator=g)
    mu_sq, trace = dim * mu**2, dim * sigma**2
    c_star = mu_sq / (mu_sq + trace / n)
    assert estimate_correction_strength(d, n) == pytest.approx(c_star, abs=0.02)


@settings(max_examples=40, deadline=None)
@given(
    mu=st.floats(-2, 2),
    sigma=st.floats(0.01, 3),
    n=st.integers(2, 500),
    m=st.integers(2, 60),
    lo=st.floats(0, 0.5),
    width=st.floats(0, 0.5),
    seed=st.integers(0, 1000),
)
def test_c_hat_minimises_the_estimated_mse_and_stays_in_range(mu, sigma, n, m, lo, width, seed):
    d = mu + sigma * torch.randn(m, 3, generator=torch.Generator().manual_seed(seed))
    hi = lo + width
    c = estimate_correction_strength(d, n, c_min=lo, c_max=hi)
    assert lo <= c <= hi
    diag = correction_from_statistics(*correction_statistics(d), n, lo, hi)
    grid = torch.linspace(lo, hi, 201, dtype=torch.float64)
    mse = (1 - grid) ** 2 * diag["bias_sq"] + grid**2 * diag["var_term"]
    best = float(mse.min())
    at_c = (1 - c) ** 2 * diag["bias_sq"] + c**2 * diag["var_term"]
    assert at_c <= best + 1e-9 * max(1.0, best)


def test_ema_update_and_window():
    cfg = ABCConfig(update_every=1, window=32, ema=0.9, c_init=1.0)
    obj = ABCAlignObjective(cfg, 50, 1000)
    d = torch.randn(40, 2, generator=torch.Generator().manual_seed(0)) + 0.5
    obj.observe(d[:20])
    obj.observe(d[20:])
    count, total, total_sq = obj.statistics()
    assert count == 32 and torch.allclose(total, d[8:].double().sum(0))  # the last W rows are kept
    c_hat = estimate_correction_strength(d[8:], 50)
    assert obj.update_correction() == pytest.approx(0.9 * 1.0 + 0.1 * c_hat)
    c1 = obj.c
    assert obj.update_correction() == pytest.approx(0.9 * c1 + 0.1 * c_hat)


def test_fixed_correction_never_moves_and_statistics_are_additive():
    obj = ABCAlignObjective(ABCConfig(correction=0.3), 2, 10)
    obj.observe(torch.randn(10, 2))
    assert obj.update_correction() == 0.3 and obj.c == 0.3
    d = torch.randn(30, 4, generator=torch.Generator().manual_seed(0))
    a, b = correction_statistics(d[:11]), correction_statistics(d[11:])
    whole = correction_statistics(d)
    # what ranks all-reduce: sums of the per-rank statistics equal the pooled statistics
    assert a[0] + b[0] == whole[0]
    assert torch.allclose(a[1] + b[1], whole[1])
    assert a[2] + b[2] == pytest.approx(whole[2])
    obj2 = ABCAlignObjective(ABCConfig(update_every=1, ema=0.0), 40, 100)
    obj2.update_correction((a[0] + b[0], a[1] + b[1], a[2] + b[2]))
    assert obj2.c == pytest.approx(estimate_correction_strength(d, 40))


# ----------------------------------------------------------------------------- PPI++
def test_ppi_pp_lambda_equals_the_mean_estimation_closed_form():
    """Mean estimation: ℓ(θ; y) = (θ - y)²/2, gradient θ - y, so λ = Cov(Y, F) / ((1 + n/N) Var(F))."""
    g = torch.Generator().manual_seed(0)
    n, N, theta = 50, 400, 0.3
    y = torch.randn(n, generator=g, dtype=torch.float64)
    f_h = 0.8 * y + 0.3 * torch.randn(n, generator=g, dtype=torch.float64)
    f_p = 0.8 * torch.randn(N, generator=g, dtype=torch.float64) + 0.3 * torch.randn(
        N, generator=g, dtype=torch.float64
    )
    lam = ppi_pp_lambda(theta - y, theta - f_h, theta - f_p, n, N, clip=False)
    cov = float(((y - y.mean()) * (f_h - f_h.mean())).sum() / (n - 1))
    f_all = torch.cat([f_h, f_p])
    var = float(f_all.var())
    assert lam == pytest.approx(cov / ((1 + n / N) * var), rel=1e-9)
    assert 0 <= ppi_pp_lambda(theta - y, theta - f_h, theta - f_p, n, N) <= 1


# ----------------------------------------------------------------------------- losses
def test_soft_labels_swap_symmetry_and_hard_label_reduction():
    g = torch.Generator().manual_seed(0)
    m, q = torch.randn(20, generator=g), torch.rand(20, generator=g)
    assert torch.allclose(soft_logistic_loss(m, q), soft_logistic_loss(-m, 1 - q))
    assert torch.allclose(soft_logistic_loss(m, torch.ones(20)), -torch.nn.functional.logsigmoid(m))
    mixed = 0.3 * soft_logistic_loss(m, torch.ones(20)) + 0.7 * soft_logistic_loss(m, torch.zeros(20))
    assert torch.allclose(soft_logistic_loss(m, torch.full((20,), 0.3)), mixed)
    # correction is linear in the margin: ℓ(m, h) - ℓ(m, p̂) = (p̂ - h) m
    h, p = torch.rand(20, generator=g), torch.rand(20, generator=g)
    assert torch.allclose(soft_logistic_loss(m, h) - soft_logistic_loss(m, p), (p - h) * m, atol=1e-6)


def test_dpo_margin_sign_convention():
    # the policy raised response 1 and lowered response 2 relative to the reference: positive margin
    m = dpo_margin(
        torch.tensor([-1.0]), torch.tensor([-5.0]), torch.tensor([-2.0]), torch.tensor([-4.0]), beta=0.1
    )
    assert m.item() == pytest.approx(0.1 * ((-1 + 2) - (-5 + 4)))
    assert m.item() > 0
    assert torch.allclose(
        dpo_margin(torch.tensor([-5.0]), torch.tensor([-1.0]), torch.tensor([-4.0]), torch.tensor([-2.0])), -m
    )


def test_rm_margin_and_mixed_batch_losses():
    model = nn.Linear(3, 1)
    y1, y2 = torch.randn(6, 3), torch.randn(6, 3)
    rm = lambda y: model(y).squeeze(-1)  # noqa: E731
    margin = preference_margin_rm(rm, None, y1, y2)
    assert torch.allclose(margin, rm(y1) - rm(y2))
    is_human = torch.tensor([0, 0, 0, 0, 1, 1], dtype=torch.bool)
    h = torch.tensor([0, 0, 0, 0, 1.0, 0.0])
    p = torch.tensor([1, 1, 0.5, 1, 0.9, 0.8])
    obj = ABCAlignObjective(ABCConfig(correction=0.4), 2, 4)
    loss = abc_reward_loss(rm(y1), rm(y2), is_human, h, p, obj)
    ref = soft_logistic_loss(margin[:4], p[:4]).mean() + 0.4 * (
        soft_logistic_loss(margin[4:], h[4:]).mean() - soft_logistic_loss(margin[4:], p[4:]).mean()
    )
    assert torch.allclose(loss, ref)
    lp = torch.randn(6)
    dloss = abc_dpo_loss(lp, lp * 0.5, lp * 0.1, lp * 0.2, h, p, is_human, obj, beta=0.2)
    dm = dpo_margin(lp, lp * 0.5, lp * 0.1, lp * 0.2, 0.2)
    ref = soft_logistic_loss(dm[:4], p[:4]).mean() + 0.4 * (dm[4:] * (p[4:] - h[4:])).mean()
    assert torch.allclose(dloss, ref, atol=1e-6)


# ----------------------------------------------------------------------------- per-example gradients
class _Ensemble(nn.Module):
    def __init__(self, R=3, d=5, h=7):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.W1 = nn.Parameter(torch.randn(R, d, h, generator=g) / d**0.5)
        self.w2 = nn.Parameter(torch.randn(R, h, generator=g) / h**0.5)

    def features(self, x):
        return torch.tanh(torch.einsum("bi,rih->rbh", x, self.W1))

    def forward(self, x):
        return torch.einsum("rbh,rh->rb", self.features(x), self.w2)

    def head_grads(self, a, b):
        return self.features(a) - self.features(b)


@pytest.mark.parametrize("replicas", [1, 3])
def test_vmap_probe_gradients_equal_per_example_loops(replicas):
    torch.manual_seed(0)
    if replicas == 1:
        model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 1), nn.Flatten(0))
        names = ["2.weight", "2.bias"]
    else:
        model = _Ensemble(R=replicas)
        names = ["w2", "W1"]
    a, b = torch.randn(6, 5), torch.randn(6, 5)
    fast = per_example_margin_grads(model, names, a, b, replicas)
    params = dict(model.named_parameters())
    for i in range(6):
        margin = model(a[i : i + 1]) - model(b[i : i + 1])
        for r in range(replicas):
            grads = torch.autograd.grad(
                margin.reshape(replicas, -1)[r].sum(), [params[n] for n in names], retain_graph=True
            )
            loop = torch.cat([(g[r] if replicas > 1 else g).reshape(-1) for g in grads])
            assert torch.allclose(fast[r, i], loop, atol=1e-6)
    if replicas > 1:  # the closed form of a linear head agrees too
        assert torch.allclose(
            per_example_margin_grads(model, ["w2"], a, b, replicas), model.head_grads(a, b), atol=1e-6
        )


# ----------------------------------------------------------------------------- bad input
def test_bad_input_raises_clear_errors():
    obj = ABCAlignObjective(ABCConfig(), 10, 100)
    lp, lh, lhp = _losses()
    with pytest.raises(ValueError, match="human batch is empty"):
        obj(lp, torch.empty(0), torch.empty(0))
    with pytest.raises(ValueError, match="same length"):
        obj(lp, lh, lhp[:-1])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        soft_logistic_loss(torch.zeros(3), torch.tensor([0.2, 1.5, 0.1]))
    with pytest.raises(ValueError, match="n_human_total >= 2"):
        ABCAlignObjective(ABCConfig(), 1, 100)
    ABCAlignObjective(ABCConfig(correction=0.5), 1, 100)  # a fixed c needs no variance
    with pytest.raises(ValueError, match="at least 2"):
        estimate_correction_strength(torch.ones(1, 3), 10)
    with pytest.raises(ValueError, match="correction"):
        ABCConfig(correction=1.5)
    with pytest.raises(ValueError, match="correction"):
        ABCConfig(correction="sometimes")
    with pytest.raises(ValueError, match="NaN"):
        obj.observe(torch.tensor([[1.0], [float("nan")]]))
    with pytest.raises(ValueError, match="labels"):
        abc_reward_loss(
            torch.zeros(3), torch.zeros(3), torch.ones(3, dtype=torch.bool), torch.ones(2), torch.ones(3), obj
        )
    with pytest.raises(ValueError, match="pseudo_label"):
        PreferencePairs(torch.zeros(4, 2), torch.zeros(4, 2), torch.ones(4), torch.full((4,), 2.0))
    with pytest.raises(ValueError, match="must match"):  # mismatched pair lengths
        PreferencePairs(torch.zeros(4, 2), torch.zeros(3, 2), torch.ones(4))
    with pytest.raises(ValueError, match="label"):
        PreferencePairs(torch.zeros(4, 2), torch.zeros(4, 2), torch.ones(3))
    empty = PreferencePairs(torch.zeros(0, 2), torch.zeros(0, 2), torch.ones(0), torch.ones(0))
    pool = PreferencePairs(torch.zeros(5, 2), torch.zeros(5, 2), torch.ones(5))
    with pytest.raises(ValueError, match="human set is empty"):
        ABCRewardTrainer(nn.Linear(2, 1), obj, empty, pool)


# ----------------------------------------------------------------------------- minimal trainer
def _pairs(seed, n, N, d=5, bias=0.0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(d, generator=g)
    x1, x2 = torch.randn(n + N, d, generator=g), torch.randn(n + N, d, generator=g)
    u = (x1 - x2) @ w
    judge = u + bias * (x1[:, 0] - x2[:, 0])
    h = (torch.rand(n + N, generator=g) < torch.sigmoid(u)).float()
    p = torch.sigmoid(judge)
    human = PreferencePairs(x1[:n], x2[:n], h[:n], p[:n])
    pseudo = PreferencePairs(x1[n:], x2[n:], p[n:])
    return human, pseudo, w


def test_reward_trainer_lockstep_replicas_match_separate_runs():
    human, pseudo, _ = _pairs(0, 40, 400)
    ens = _Ensemble(R=2)
    objs = [make_objective("abc", 40, 400, ABCConfig(update_every=2)), make_objective("pseudo_only", 40, 400)]
    trainer = ABCRewardTrainer(
        ens,
        objs,
        human,
        pseudo,
        lr=1e-2,
        human_batch=8,
        pseudo_batch=16,
        update_every=2,
        probe=ens.head_grads,
        seed=3,
    )
    trainer.train(6)
    for r, name in enumerate(("abc", "pseudo_only")):
        single = _Ensemble(R=2)
        with torch.no_grad():  # replica r alone, as a one-replica model
            W1, w2 = single.W1[r : r + 1].clone(), single.w2[r : r + 1].clone()
        solo = _Ensemble(R=1)
        solo.W1, solo.w2 = nn.Parameter(W1), nn.Parameter(w2)
        obj = make_objective(name, 40, 400, ABCConfig(update_every=2))
        ABCRewardTrainer(
            solo,
            obj,
            human,
            pseudo,
            lr=1e-2,
            human_batch=8,
            pseudo_batch=16,
            update_every=2,
            probe=["w2"],
            seed=3,
        ).train(6)
        assert torch.allclose(solo.w2[0], ens.w2[r], atol=1e-5)
        assert torch.allclose(solo.W1[0], ens.W1[r], atol=1e-5)
        if name == "abc":
            assert obj.c == pytest.approx(objs[0].c, abs=1e-6)


def test_reward_trainer_learns_and_c_shrinks_without_bias():
    human, pseudo, w = _pairs(1, 100, 2000, bias=0.0)
    model = nn.Sequential(nn.Linear(5, 1), nn.Flatten(0))
    obj = make_objective("abc", 100, 2000, ABCConfig(update_every=5))
    ABCRewardTrainer(model, obj, human, pseudo, lr=3e-2, update_every=5).train(200)
    cos = torch.nn.functional.cosine_similarity(model[0].weight[0], w, dim=0)
    assert cos > 0.95
    assert obj.c < 0.5  # pseudo labels are unbiased here: little correction is worth its variance
    human_b, pseudo_b, _ = _pairs(1, 100, 2000, bias=4.0)
    model_b = nn.Sequential(nn.Linear(5, 1), nn.Flatten(0))
    obj_b = make_objective("abc", 100, 2000, ABCConfig(update_every=5))
    ABCRewardTrainer(model_b, obj_b, human_b, pseudo_b, lr=3e-2, update_every=5).train(200)
    assert obj_b.c > obj.c + 0.3  # a strongly biased judge calls for more correction


# ----------------------------------------------------------------------------- TRL DPO trainer
def test_stratified_sampler_blocks():
    is_human = [0] * 10 + [1] * 3
    sampler = StratifiedPairSampler(is_human, human_batch=2, pseudo_batch=4, seed=0)
    order = list(sampler)
    assert len(order) == len(sampler) == 3 * 6
    for block in range(3):
        chunk = order[block * 6 : (block + 1) * 6]
        assert [is_human[i] for i in chunk] == [0, 0, 0, 0, 1, 1]
    assert sorted((order[:4] + order[6:10] + order[12:16])[:10]) == list(range(10))  # one pass over pseudo
    with pytest.raises(ValueError, match="non-empty"):
        StratifiedPairSampler([0, 0], 1, 1)


def _dpo_setup(tmp_path, correction, human_size=6, pseudo_size=10, objective="abc"):
    trl = pytest.importorskip("trl")
    from datasets import Dataset

    from neurips26.common.models import build_tiny_lm
    from neurips26.common.tokenizers import char_tokenizer
    from neurips26.rl.abc_align import ABCDPOTrainer

    tok = char_tokenizer("abcdef:", padding_side="right")
    model = build_tiny_lm("llama", vocab_size=len(tok), seed=0, hidden_size=32, intermediate_size=64)
    g = torch.Generator().manual_seed(0)

    def strings(k):
        out = []
        for _ in range(k):
            length = int(torch.randint(1, 6, (1,), generator=g))
            out.append("".join("abcdef"[int(i)] for i in torch.randint(0, 6, (length,), generator=g)))
        return out

    human = Dataset.from_dict(
        {
            "prompt": ["a:"] * human_size,
            "chosen": strings(human_size),
            "rejected": strings(human_size),
            "pseudo_label": torch.rand(human_size, generator=g).tolist(),
            "label": [1.0, 0.8, 1.0, 0.6, 1.0, 0.9][:human_size],
        }
    )
    pseudo = Dataset.from_dict(
        {"prompt": ["b:"] * pseudo_size, "chosen": strings(pseudo_size), "rejected": strings(pseudo_size)}
    )
    args = trl.DPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=pseudo_size + human_size,
        max_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        beta=0.1,
        seed=0,
        disable_tqdm=True,
    )
    cfg = ABCConfig(correction=correction, human_batch=human_size, pseudo_batch=pseudo_size)
    trainer = ABCDPOTrainer(
        model,
        ref_model=copy.deepcopy(model),
        args=args,
        human_dataset=human,
        pseudo_dataset=pseudo,
        processing_class=tok,
        abc_config=cfg,
        objective=objective,
    )
    return trl, trainer, human, pseudo, args, tok


def _loss_and_grads(trainer, batch):
    trainer.model.zero_grad(set_to_none=True)
    loss = trainer.compute_loss(trainer.model, dict(batch))
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params)
    return loss.detach(), grads


def _first_batch(trainer):
    """The first training batch, built from the stratified sampler's indices, and its rows."""
    size = trainer.args.per_device_train_batch_size
    rows = [dict(trainer.train_dataset[i]) for i in list(trainer._get_train_sampler())[:size]]
    keep = (
        "prompt_ids",
        "chosen_ids",
        "rejected_ids",
        "abc_is_human",
        "abc_label",
        "abc_pseudo_label",
        "abc_index",
    )
    rows = [{k: r[k] for k in keep} for r in rows]
    return trainer.data_collator([dict(r) for r in rows]), rows


def test_abc_dpo_trainer_c0_equals_trl_dpo_on_pseudo_pairs(tmp_path):
    trl, trainer, human, pseudo, args, tok = _dpo_setup(tmp_path / "abc", 0.0)
    batch, rows = _first_batch(trainer)
    assert batch["abc_is_human"].tolist() == [False] * 10 + [True] * 6  # 10 pseudo then 6 human pairs
    loss, grads = _loss_and_grads(trainer, batch)

    plain_args = copy.deepcopy(args)
    plain_args.per_device_train_batch_size = 10
    plain = trl.DPOTrainer(
        copy.deepcopy(trainer.model),
        ref_model=copy.deepcopy(trainer.ref_model),
        args=plain_args,
        train_dataset=pseudo,
        processing_class=tok,
    )
    # TRL's own loss on the same 10 pseudo pairs, collated by TRL's own collator
    plain_batch = plain.data_collator(
        [{k: r[k] for k in ("prompt_ids", "chosen_ids", "rejected_ids")} for r in rows[:10]]
    )
    plain_loss, plain_grads = _loss_and_grads(plain, plain_batch)
    assert torch.allclose(loss, plain_loss, atol=1e-6)
    for a, b in zip(grads, plain_grads):  # batches padded to different widths: fp32 rounding only
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)


def test_abc_dpo_trainer_c1_equals_the_ppi_rectified_loss(tmp_path):
    _, trainer, *_ = _dpo_setup(tmp_path, 1.0)
    batch, _ = _first_batch(trainer)
    loss, grads = _loss_and_grads(trainer, batch)

    # by hand: summed completion log-probs of policy and reference, DPO margins, PPI combination
    def logps(model):
        mask = batch["completion_mask"]
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
        lp = torch.log_softmax(logits.float(), -1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
        return (lp * mask[:, 1:]).sum(1).chunk(2)

    with torch.no_grad():
        ref_c, ref_r = logps(trainer.ref_model)
    pol_c, pol_r = logps(trainer.model)
    m = 0.1 * ((pol_c - ref_c) - (pol_r - ref_r))
    hum = batch["abc_is_human"]
    h, p = batch["abc_label"], batch["abc_pseudo_label"]
    manual = (
        soft_logistic_loss(m[~hum], p[~hum]).mean()
        + soft_logistic_loss(m[hum], h[hum]).mean()
        - soft_logistic_loss(m[hum], p[hum]).mean()
    )
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    manual_grads = torch.autograd.grad(manual, params)
    assert torch.allclose(loss, manual.detach(), atol=1e-5)
    for a, b in zip(grads, manual_grads):
        assert torch.allclose(a, b, atol=1e-5)


def test_abc_dpo_trainer_trains_adaptively_and_validates(tmp_path):
    from datasets import Dataset

    _, trainer, human, pseudo, args, tok = _dpo_setup(tmp_path, "adaptive")
    trainer.abc_config.update_every = 1
    trainer.args.max_steps = 3
    trainer.train()
    logs = [log for log in trainer.state.log_history if "abc/c" in log]
    assert logs and all(0.0 <= log["abc/c"] <= 1.0 for log in logs)
    assert len(trainer.objective.history) >= 2  # c was re-estimated during training
    from neurips26.rl.abc_align import ABCDPOTrainer

    with pytest.raises(ValueError, match="pseudo_label"):
        ABCDPOTrainer(
            trainer.model,
            args=args,
            human_dataset=pseudo,
            pseudo_dataset=pseudo,
            processing_class=tok,
            abc_config=ABCConfig(human_batch=6, pseudo_batch=10),
        )
    with pytest.raises(ValueError, match="per_device_train_batch_size"):
        ABCDPOTrainer(
            trainer.model,
            args=args,
            human_dataset=human,
            pseudo_dataset=pseudo,
            processing_class=tok,
            abc_config=ABCConfig(human_batch=4, pseudo_batch=10),
        )
    with pytest.raises(ValueError, match="empty"):
        ABCDPOTrainer(
            trainer.model,
            args=args,
            human_dataset=human.select([]),
            pseudo_dataset=pseudo,
            processing_class=tok,
            abc_config=ABCConfig(human_batch=6, pseudo_batch=10),
        )
    bad = Dataset.from_dict({**human.to_dict(), "pseudo_label": [1.5] * len(human)})
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        ABCDPOTrainer(
            trainer.model,
            args=args,
            human_dataset=bad,
            pseudo_dataset=pseudo,
            processing_class=tok,
            abc_config=ABCConfig(human_batch=6, pseudo_batch=10),
        )


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(2, 12),
    pushes=st.lists(st.tuples(st.integers(1, 16), st.booleans()), min_size=1, max_size=6),
    seed=st.integers(0, 1000),
)
def test_row_window_keeps_the_latest_row_per_example(size, pushes, seed):
    """RowWindow against a plain reference: the last row of each example, the newest ``size`` examples."""
    from neurips26.rl.abc_align.estimators import RowWindow

    g = torch.Generator().manual_seed(seed)
    window, reference = RowWindow(size), []  # reference: list of (key, row), oldest first
    auto = 0
    for count, with_ids in pushes:
        rows = torch.randn(count, 3, generator=g, dtype=torch.float64)
        if with_ids:
            ids = torch.randperm(20, generator=g)[:count]
            keys = ids.tolist()
        else:
            ids, keys = None, [-1 - k for k in range(auto, auto + count)]
            auto += count
        window.push(rows, ids)
        reference = [(k, r) for k, r in reference if k not in keys] + list(zip(keys, rows))
        reference = reference[-size:]
        assert len(window) == len(reference)
        expected = torch.stack([r for _, r in reference])
        assert torch.equal(window.rows(), expected)  # same kernel: copies of the same values


def test_reward_trainer_adam_is_the_per_tensor_adam():
    """The trainer's foreach Adam gives torch's per-tensor Adam's parameters, up to float32 rounding."""
    torch.manual_seed(0)
    a = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1), nn.Flatten(0))
    b = copy.deepcopy(a)
    g = torch.Generator().manual_seed(1)
    n, N = 12, 40
    human = PreferencePairs(
        torch.randn(n, 4, generator=g),
        torch.randn(n, 4, generator=g),
        torch.rand(n, generator=g),
        torch.rand(n, generator=g),
    )
    pseudo = PreferencePairs(
        torch.randn(N, 4, generator=g), torch.randn(N, 4, generator=g), torch.rand(N, generator=g)
    )
    trainer = ABCRewardTrainer(
        a, make_objective("ppi", n, N), human, pseudo, human_batch=4, pseudo_batch=8, seed=0
    )
    reference = ABCRewardTrainer(
        b, make_objective("ppi", n, N), human, pseudo, human_batch=4, pseudo_batch=8, seed=0
    )
    assert trainer.optimizer.defaults["foreach"] is True
    reference.optimizer = torch.optim.Adam(b.parameters(), lr=1e-3, foreach=False)
    trainer.train(25)
    reference.train(25)
    # foreach and per-tensor Adam are different kernels (equal on the developers' Xeon, not promised on
    # every CPU). Per step each coordinate rounds in the update (~8 operations, |update| <= lr) and in
    # p - update; doubled for the gradient's response to earlier differences:
    # bound: |p - q| <= 2 * steps * (max|p| + 8 lr) * eps32
    eps = torch.finfo(torch.float32).eps
    for p, q in zip(a.parameters(), b.parameters()):
        bound = 2 * 25 * (float(q.abs().max()) + 8 * 1e-3) * eps
        torch.testing.assert_close(p, q, rtol=0.0, atol=bound)

"""AHPA components: router simplex, routed cosine alignment, frozen hierarchical priors, gradient separation,
reduction to the vanilla DiT loss at lambda = 0, sampling without the alignment path, error paths."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.vision.ahpa import (
    AHPAAlignmentLoss,
    HierarchicalFeatureExtractor,
    TimestepRouter,
    ahpa_training_step,
    build_dit,
    build_vae,
    cosine_alignment,
    dit_forward,
    frechet_distance,
    interpolant,
    sample_ode,
)

LEVELS = ["down_blocks.0.resnets.0", "down_blocks.0", "down_blocks.1", "mid_block"]


@pytest.fixture(scope="module")
def parts():
    torch.manual_seed(0)
    vae = build_vae(block_out_channels=(8, 16, 16))
    dit = build_dit(hidden=32, depth=2, heads=2)
    return vae, dit


def _enc(vae):
    return lambda x: vae.encode(x).latent_dist.mean


# ------------------------------------------------------------------------------------------ router
@settings(max_examples=30, deadline=None)
@given(
    t=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8),
    levels=st.integers(1, 5),
    mode=st.sampled_from(["learned", "fixed_snr", "uniform"]),
    temp=st.floats(0.1, 5.0),
    seed=st.integers(0, 100),
)
def test_router_on_simplex(t, levels, mode, temp, seed):
    torch.manual_seed(seed)
    router = TimestepRouter(levels, t_embed_dim=16, hidden=8, mode=mode, temperature=temp)
    if router.mlp is not None:  # random last layer so the learned part is non-trivial
        torch.nn.init.normal_(router.mlp[-1].weight)
    w = router(torch.tensor(t))
    assert w.shape == (len(t), levels)
    assert (w >= 0).all()
    assert torch.allclose(w.sum(-1), torch.ones(len(t)), atol=1e-6)


@settings(max_examples=20, deadline=None)
@given(levels=st.integers(2, 6), k=st.integers(1, 6), seed=st.integers(0, 50))
def test_router_top_k_exactly_k_nonzeros(levels, k, seed):
    k = min(k, levels)
    torch.manual_seed(seed)
    router = TimestepRouter(levels, t_embed_dim=16, hidden=8, top_k=k)
    torch.nn.init.normal_(router.mlp[-1].weight)
    w = router(torch.rand(7))
    assert ((w > 0).sum(-1) == k).all()
    assert torch.allclose(w.sum(-1), torch.ones(7), atol=1e-6)


def test_router_modes_uniform_single_and_timestep_conditioning():
    t = torch.linspace(0, 1, 11)
    assert torch.allclose(TimestepRouter(4, mode="uniform")(t), torch.full((11, 4), 0.25))
    single = TimestepRouter(4, mode="single:2")(t)
    assert torch.equal(single, torch.nn.functional.one_hot(torch.full((11,), 2), 4).float())  # same kernel: the constant one-hot
    # the SNR prior makes r(t) depend on t: coarse levels gain weight as t -> 1, fine levels as t -> 0
    w = TimestepRouter(4, mode="fixed_snr")(t)
    assert w[-1, 3] > w[0, 3] and w[0, 0] > w[-1, 0]
    assert torch.allclose(w[5], torch.full((4,), 0.25), atol=1e-6)  # t = 0.5: no preference
    # a fresh learned router (zero last layer) equals fixed_snr, and uniform without the prior
    assert torch.allclose(TimestepRouter(4)(t), w, atol=1e-6)
    assert torch.allclose(TimestepRouter(4, snr_prior=False)(t), torch.full((11, 4), 0.25), atol=1e-6)


@pytest.mark.parametrize(
    "bad_t",
    [torch.tensor([1.5]), torch.tensor([-0.1]), torch.rand(2, 3), torch.tensor(0.5), torch.tensor([1, 0])],
)
def test_router_rejects_bad_t(bad_t):
    with pytest.raises((ValueError, TypeError), match="t"):
        TimestepRouter(3)(bad_t)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_levels": 0}, "num_levels"),
        ({"num_levels": 3, "top_k": 4}, "top_k"),
        ({"num_levels": 3, "mode": "bogus"}, "mode"),
        ({"num_levels": 3, "mode": "single:3"}, "single"),
        ({"num_levels": 3, "mode": "single:x"}, "single"),
        ({"num_levels": 3, "temperature": 0.0}, "temperature"),
        ({"num_levels": 3, "entropy_weight": -1.0}, "entropy_weight"),
        ({"num_levels": 3, "t_embed_dim": 7}, "t_embed_dim"),
    ],
)
def test_router_bad_hyperparameters(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        TimestepRouter(**kwargs)


# ------------------------------------------------------------------------------------------ alignment
@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 4), n=st.integers(1, 6), c=st.integers(1, 8), seed=st.integers(0, 100))
def test_cosine_loss_range_and_minus_one_on_aligned(b, n, c, seed):
    g = torch.Generator().manual_seed(seed)
    target = torch.randn(b, n, c, generator=g)
    pred = torch.randn(b, n, c, generator=g)
    loss = cosine_alignment(pred, target)
    assert loss.shape == (b,)
    assert (loss >= -1 - 1e-6).all() and (loss <= 1 + 1e-6).all()
    scale = torch.rand(b, n, 1, generator=g) + 0.1
    assert torch.allclose(cosine_alignment(target * scale, target), torch.full((b,), -1.0), atol=1e-5)


def test_identical_levels_make_loss_independent_of_router():
    torch.manual_seed(0)
    hidden, target = torch.randn(3, 5, 8), torch.randn(3, 5, 6)
    losses = []
    for mode in ("uniform", "single:0", "single:2", "fixed_snr", "learned"):
        al = AHPAAlignmentLoss(
            8, [6, 6, 6], TimestepRouter(3, mode=mode, t_embed_dim=8, hidden=4), proj_hidden=16
        )
        torch.manual_seed(1)
        ref = AHPAAlignmentLoss(8, [6], TimestepRouter(1), proj_hidden=16).heads[0]
        for h in al.heads:  # identical heads, the same for every router
            h.load_state_dict(ref.state_dict())
        al.eval()
        _, info = al(hidden, [target, target, target], torch.rand(3))
        losses.append(float(info["align"]))
    assert np.allclose(losses, losses[0], atol=1e-6)


def test_gradient_separation_between_router_and_dit_heads():
    torch.manual_seed(0)
    router = TimestepRouter(3, t_embed_dim=8, hidden=8)
    al = AHPAAlignmentLoss(8, [4, 5, 6], router, proj_hidden=16)
    hidden = torch.randn(4, 5, 8, requires_grad=True)
    targets = [torch.randn(4, 5, c) for c in (4, 5, 6)]
    t = torch.rand(4)
    al(hidden, targets, t)  # first call initialises the EMA statistics
    _, info = al(hidden, targets, t)
    per_level = al.per_level(hidden, targets)
    w = router(t)
    align = (w.detach() * per_level).sum(-1).mean()
    align.backward()
    assert hidden.grad is not None and hidden.grad.abs().sum() > 0
    assert all(p.grad is None or p.grad.abs().sum() == 0 for p in router.parameters())
    hidden.grad = None
    al.zero_grad()
    robj = router.objective(router(t), al.standardized(al.per_level(hidden, targets).detach()))
    robj.backward()
    assert hidden.grad is None
    assert all(p.grad is None for h in al.heads for p in h.parameters())
    assert router.mlp[-1].weight.grad.abs().sum() > 0


def test_standardisation_shift_by_constant():
    al = AHPAAlignmentLoss(4, [2, 2, 2], TimestepRouter(3), proj_hidden=4)
    al.update_stats(torch.randn(16, 3))
    al.update_stats(torch.randn(16, 3))
    al.eval()  # frozen statistics
    base = torch.randn(5, 3)
    c, level = 0.37, 1
    shifted = base.clone()
    shifted[:, level] += c
    diff = al.standardized(shifted) - al.standardized(base)
    assert torch.allclose(diff[:, level], torch.full((5,), c) / al.sigma[level], atol=1e-6)
    assert torch.allclose(diff[:, [0, 2]], torch.zeros(5, 2), atol=1e-7)


def test_alignment_bad_inputs():
    router = TimestepRouter(2)
    with pytest.raises(ValueError, match="level_dims"):
        AHPAAlignmentLoss(8, [], router)
    with pytest.raises(ValueError, match="levels"):
        AHPAAlignmentLoss(8, [3, 3, 3], router)
    with pytest.raises(TypeError, match="router"):
        AHPAAlignmentLoss(8, [3, 3], "router")
    al = AHPAAlignmentLoss(8, [3, 3], router, proj_hidden=4)
    with pytest.raises(ValueError, match="hidden"):
        al(torch.randn(2, 4, 7), [torch.randn(2, 4, 3)] * 2, torch.rand(2))
    with pytest.raises(ValueError, match=r"targets\[1\]"):
        al(torch.randn(2, 4, 8), [torch.randn(2, 4, 3), torch.randn(2, 4, 5)], torch.rand(2))
    with pytest.raises(ValueError, match="targets"):
        al(torch.randn(2, 4, 8), [torch.randn(2, 4, 3)], torch.rand(2))
    with pytest.raises(ValueError, match="hidden"):
        al(torch.full((2, 4, 8), float("nan")), [torch.randn(2, 4, 3)] * 2, torch.rand(2))


# ------------------------------------------------------------------------------------------ priors
def test_extractor_frozen_hooks_removed_and_shapes(parts):
    vae, dit = parts
    x = torch.randn(3, 1, 16, 16)
    before = {k: v.clone() for k, v in vae.encoder.state_dict().items()}
    ex = HierarchicalFeatureExtractor(vae.encoder, LEVELS, (4, 4))
    targets = ex(x)
    assert [tuple(t.shape) for t in targets] == [(3, 16, 8), (3, 16, 8), (3, 16, 16), (3, 16, 16)]
    assert all(not t.requires_grad for t in targets)
    assert all(not p.requires_grad for p in vae.encoder.parameters())
    # a training step of DiT + heads leaves the encoder untouched and without gradient
    al = AHPAAlignmentLoss(32, ex.level_dims(x), TimestepRouter(4), proj_hidden=16)
    ex.train()
    assert not vae.encoder.training
    opt = torch.optim.AdamW([*dit.parameters(), *al.parameters()], lr=1e-2)
    out = ahpa_training_step(
        dit,
        ex,
        al,
        _enc(vae),
        {"x": x, "y": torch.tensor([0, 1, 2])},
        align_block=0,
        generator=torch.Generator().manual_seed(0),
    )
    out["loss"].backward()
    opt.step()
    assert all(p.grad is None for p in vae.encoder.parameters())
    assert all(torch.equal(before[k], v) for k, v in vae.encoder.state_dict().items())  # same kernel: untouched parameters, no arithmetic
    modules = [vae.encoder.get_submodule(n) for n in LEVELS]
    assert all(len(m._forward_hooks) == 1 for m in modules)
    ex.close()
    assert all(len(m._forward_hooks) == 0 for m in modules)
    with pytest.raises(RuntimeError, match="closed"):
        ex(x)
    with HierarchicalFeatureExtractor(vae.encoder, LEVELS[:1], (4, 4)):
        pass
    assert all(len(m._forward_hooks) == 0 for m in modules)
    vae.encoder.requires_grad_(True)


def test_extractor_cached_equals_online_and_global_level(parts):
    vae, _ = parts
    x = torch.randn(7, 1, 16, 16)
    with HierarchicalFeatureExtractor(vae.encoder, LEVELS, (4, 4)) as ex:
        online = ex(x)
        cached = ex.extract(x, batch_size=3)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(online, cached))
    with HierarchicalFeatureExtractor(vae.encoder, LEVELS, (4, 4), global_level=True) as ex:
        glob = ex(x)[-1]
    assert torch.allclose(glob, glob[:, :1].expand_as(glob))
    assert torch.allclose(glob[:, 0], online[-1].mean(1), atol=1e-6)
    vae.encoder.requires_grad_(True)


def test_extractor_bad_inputs(parts):
    vae, _ = parts
    with pytest.raises(ValueError, match="multiple of token_grid"):
        HierarchicalFeatureExtractor(vae.encoder, LEVELS[:1], (3, 3))(torch.randn(2, 1, 16, 16))
    with pytest.raises(ValueError, match="layer_names"):
        HierarchicalFeatureExtractor(vae.encoder, ["nope"], (4, 4))
    with pytest.raises(ValueError, match="layer_names"):
        HierarchicalFeatureExtractor(vae.encoder, [], (4, 4))
    with pytest.raises(ValueError, match="resample"):
        HierarchicalFeatureExtractor(vae.encoder, LEVELS, (4, 4), resample="max")
    with pytest.raises(ValueError, match="token_grid"):
        HierarchicalFeatureExtractor(vae.encoder, LEVELS, (4,))
    with pytest.raises(TypeError, match="encoder"):
        HierarchicalFeatureExtractor("vae", LEVELS, (4, 4))
    with HierarchicalFeatureExtractor(vae.encoder, LEVELS, (4, 4)) as ex:
        with pytest.raises(ValueError, match="x"):
            ex(torch.randn(2, 3, 16, 16))  # 3 channels into a 1-channel encoder
        with pytest.raises(TypeError, match="x"):
            ex(torch.zeros(2, 1, 16, 16, dtype=torch.long))
    vae.encoder.requires_grad_(True)


# ------------------------------------------------------------------------------------------ DiT
def test_interpolant_endpoints():
    z, eps = torch.randn(3, 4, 4, 4), torch.randn(3, 4, 4, 4)
    x0, v = interpolant(z, eps, torch.zeros(3))
    x1, _ = interpolant(z, eps, torch.ones(3))
    assert torch.equal(x0, z) and torch.equal(x1, eps)  # same kernel: t in {0, 1} multiplies one endpoint by 0 and the other by 1
    assert v.shape == z.shape and torch.equal(v, eps - z)  # same kernel: the same subtraction eps - z
    with pytest.raises(ValueError, match="eps"):
        interpolant(z, eps[:, :2], torch.zeros(3))


def test_hook_returns_intended_block(parts):
    _, dit = parts
    x, t, y = torch.randn(2, 4, 4, 4), torch.rand(2), torch.tensor([3, 4])
    seen = {}
    handles = [
        b.register_forward_hook(lambda _m, _i, o, k=k: seen.__setitem__(k, o))
        for k, b in enumerate(dit.transformer_blocks)
    ]
    try:
        out, hidden = dit_forward(dit, x, t, y, return_hidden=1)
    finally:
        for h in handles:
            h.remove()
    assert hidden.shape == (2, 16, 32)
    assert torch.equal(hidden, seen[1]) and not torch.equal(hidden, seen[0])  # same kernel: the hooked block's own output; the second half asserts a difference
    assert torch.equal(out, dit_forward(dit, x, t, y))  # same kernel
    assert all(len(b._forward_hooks) == 0 for b in dit.transformer_blocks)


def _grads(module):
    return {
        n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p))
        for n, p in module.named_parameters()
    }


def test_lambda_zero_equals_vanilla_loss_and_grads(parts):
    vae, dit = parts
    x, y = torch.randn(4, 1, 16, 16), torch.tensor([0, 1, 2, 3])
    with HierarchicalFeatureExtractor(vae.encoder, LEVELS, (4, 4)) as ex:
        al = AHPAAlignmentLoss(32, ex.level_dims(x), TimestepRouter(4), proj_hidden=16)
        dit.zero_grad()
        van = ahpa_training_step(
            dit, None, None, _enc(vae), {"x": x, "y": y}, generator=torch.Generator().manual_seed(3)
        )
        van["loss"].backward()
        g_van = _grads(dit)
        dit.zero_grad()
        ah = ahpa_training_step(
            dit,
            ex,
            al,
            _enc(vae),
            {"x": x, "y": y},
            lam=0.0,
            align_block=1,
            generator=torch.Generator().manual_seed(3),
        )
        ah["loss"].backward()
        g_ah = _grads(dit)
        assert torch.equal(van["loss"], ah["loss"])  # same kernel: lam = 0 adds 0
        assert all(torch.equal(g_van[n], g_ah[n]) for n in g_van)  # same kernel
        # and with lambda > 0 the alignment really changes the DiT's gradient
        dit.zero_grad()
        ahpa_training_step(
            dit,
            ex,
            al,
            _enc(vae),
            {"x": x, "y": y},
            lam=0.5,
            align_block=1,
            generator=torch.Generator().manual_seed(3),
        )["loss"].backward()
        assert any(not torch.equal(g_van[n], p.grad) for n, p in dit.named_parameters() if p.grad is not None)  # same kernel: n/a, asserts a difference
    dit.zero_grad()
    vae.encoder.requires_grad_(True)


def test_training_step_bad_inputs(parts):
    vae, dit = parts
    batch = {"z": torch.randn(2, 4, 4, 4), "y": torch.tensor([0, 1])}
    with pytest.raises(ValueError, match="lam"):
        ahpa_training_step(dit, None, None, None, batch, lam=-0.1)
    with pytest.raises(ValueError, match="objective"):
        ahpa_training_step(dit, None, None, None, batch, objective="x0")
    with pytest.raises(TypeError, match="batch"):
        ahpa_training_step(dit, None, None, None, {"y": batch["y"]})
    with pytest.raises(ValueError, match="return_hidden"):
        dit_forward(dit, batch["z"], torch.rand(2), batch["y"], return_hidden=5)
    with pytest.raises(ValueError, match="divisible"):
        build_dit(latent_size=5, patch_size=2)
    with pytest.raises(ValueError, match="x_t"):
        dit_forward(dit, torch.randn(2, 3, 4, 4), torch.rand(2), batch["y"])
    with pytest.raises(ValueError, match="y"):
        dit_forward(dit, batch["z"], torch.rand(2), torch.tensor([0, 11]))


def test_sampling_identical_with_and_without_aligner(parts):
    vae, dit = parts
    labels = torch.tensor([0, 5, 9])
    a = sample_ode(dit, None, labels, steps=3, generator=torch.Generator().manual_seed(0))
    with HierarchicalFeatureExtractor(vae.encoder, LEVELS, (4, 4)) as ex:
        al = AHPAAlignmentLoss(
            32, ex.level_dims(torch.randn(2, 1, 16, 16)), TimestepRouter(4), proj_hidden=16
        )
        dit.aligner = al  # attach the heads and router to the model: sampling must not use them
        b = sample_ode(dit, None, labels, steps=3, generator=torch.Generator().manual_seed(0))
        del dit.aligner
    assert torch.equal(a, b)  # same kernel: the aligner is not called
    assert a.shape == (3, 4, 4, 4) and torch.isfinite(a).all()
    dec = sample_ode(
        dit, lambda z: vae.decode(z).sample, labels, steps=2, generator=torch.Generator().manual_seed(0)
    )
    assert dec.shape == (3, 1, 16, 16)
    vae.encoder.requires_grad_(True)


def test_sampling_one_step_is_one_euler_step(parts):
    _, dit = parts
    labels = torch.tensor([1, 2])
    out = sample_ode(dit, None, labels, steps=1, cfg_scale=1.0, generator=torch.Generator().manual_seed(0))
    noise = torch.randn((2, 4, 4, 4), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        v = dit_forward(dit.eval(), noise, torch.ones(2), labels)
    assert torch.allclose(out, noise - v, atol=1e-5)  # x_0 = x_1 + (0 - 1) v


# ------------------------------------------------------------------------------------------ metric
@settings(max_examples=15, deadline=None)
@given(n=st.integers(5, 40), d=st.integers(1, 4), seed=st.integers(0, 100))
def test_frechet_distance_zero_on_self_and_symmetric(n, d, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(n, d)), rng.normal(1.0, 2.0, size=(n + 3, d))
    assert frechet_distance(a, a) == pytest.approx(0.0, abs=1e-6)
    assert frechet_distance(a, b) == pytest.approx(frechet_distance(b, a), rel=1e-6, abs=1e-8)
    assert frechet_distance(a, b) > 0


def test_frechet_distance_closed_form_and_errors():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(4000, 2))
    b = a + np.array([3.0, 4.0])  # pure mean shift: FD = 25
    assert frechet_distance(a, b) == pytest.approx(25.0, rel=1e-6)
    with pytest.raises(ValueError, match="feats_a"):
        frechet_distance(np.ones(4), b)
    with pytest.raises(ValueError, match="feature dimension"):
        frechet_distance(a, a[:, :1])
    with pytest.raises(ValueError, match="feats_b"):
        frechet_distance(a, np.full((3, 2), math.nan))


def test_router_objective_learns_snr_dependent_preference():
    # standardised losses where coarse levels are relatively cheaper at high noise and fine ones at low noise:
    # minimising the router objective must move weight to coarse levels as t -> 1 (no prior bias involved)
    torch.manual_seed(0)
    router = TimestepRouter(4, t_embed_dim=16, hidden=16, snr_prior=False)
    opt = torch.optim.Adam(router.parameters(), lr=1e-2)
    pos = torch.linspace(-1, 1, 4)
    g = torch.Generator().manual_seed(0)
    for _ in range(150):
        t = torch.rand(32, generator=g)
        std = -(2 * t[:, None] - 1) * pos[None, :]
        loss = router.objective(router(t), std)
        opt.zero_grad()
        loss.backward()
        opt.step()
    w = router(torch.tensor([0.05, 0.95]))
    assert w[1, 3] > 0.5 > w[0, 3] and w[0, 0] > 0.5 > w[1, 0]

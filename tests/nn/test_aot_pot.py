"""Tests for AOT-POT multi-stream residuals and the operator transformer (neurips26.nn.aot_pot)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from neurips26.nn.aot_pot import (
    MultiStreamResidual,
    OperatorTransformer,
    collapse_streams,
    composite_amax_gain,
    expand_streams,
    match_width,
    sinkhorn_knopp,
    stream_overhead,
)

KW = dict(in_channels=1, out_channels=1, t_in=3, patch=4, dim=16, depth=2, modes=4)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_sinkhorn_doubly_stochastic(n):
    logits = torch.randn(32, n, n, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
    s = sinkhorn_knopp(logits, 20)
    assert (s >= 0).all()
    assert torch.allclose(s.sum(-1), torch.ones(32, n, dtype=torch.float64), atol=1e-5)
    assert torch.allclose(s.sum(-2), torch.ones(32, n, dtype=torch.float64), atol=1e-3)
    s200 = sinkhorn_knopp(logits, 200)
    assert torch.allclose(s200.sum(-2), torch.ones(32, n, dtype=torch.float64), atol=1e-6)
    assert torch.linalg.matrix_norm(s200, ord=2).max() <= 1 + 1e-4
    plain = sinkhorn_knopp(logits, 200, log_space=False)
    assert torch.allclose(plain, s200, atol=1e-8)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 6))
def test_sinkhorn_permutation_equivariance(seed, n):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, n, generator=gen, dtype=torch.float64)
    p = torch.eye(n, dtype=torch.float64)[torch.randperm(n, generator=gen)]
    q = torch.eye(n, dtype=torch.float64)[torch.randperm(n, generator=gen)]
    assert torch.allclose(sinkhorn_knopp(p @ x @ q.T, 50), p @ sinkhorn_knopp(x, 50) @ q.T, atol=1e-10)


def test_sinkhorn_large_logits_finite_and_fixed_point_and_products():
    logits = (1e4 * torch.randn(4, 4)).requires_grad_(True)
    out = sinkhorn_knopp(logits)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(logits.grad).all()
    d = sinkhorn_knopp(torch.randn(4, 4, dtype=torch.float64), 500)  # doubly stochastic D
    assert torch.allclose(sinkhorn_knopp(d.log(), 20), d, atol=1e-8)
    mats = sinkhorn_knopp(torch.randn(12, 4, 4), 20)
    prod = mats[0]
    for m in mats[1:]:
        prod = m @ prod
    assert torch.allclose(prod.sum(-1), torch.ones(4), atol=1e-3)
    assert torch.allclose(prod.sum(-2), torch.ones(4), atol=1e-3)


def _mlp(d=8):
    torch.manual_seed(0)
    return nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))


@pytest.mark.parametrize("n", [1, 2, 4])
def test_fixed_identity_maps_give_standard_residual_in_every_stream(n):
    f = _mlp()
    x = torch.randn(2, 5, 8)
    block = MultiStreamResidual.fixed(f, 8, n, pre=1.0 / n, post=1.0, res=torch.eye(n))
    out = block(expand_streams(x, n))
    ref = x + f(x)
    for i in range(n):
        assert torch.allclose(out[:, :, i], ref, atol=1e-6)


def test_single_stream_identity_block_is_exactly_standard_residual():
    f = _mlp()
    x = torch.randn(3, 7, 8)
    block = MultiStreamResidual(f, 8, n_streams=1, constraint="identity", dynamic=False)
    assert torch.equal(block(expand_streams(x, 1))[:, :, 0], x + f(x))  # same kernel: 1x1 identity maps


def test_operator_transformer_single_stream_aot_equals_standard():
    torch.manual_seed(3)
    std = OperatorTransformer(residual="standard", **KW)
    torch.manual_seed(3)
    aot = OperatorTransformer(residual="aot", n_streams=1, **KW)
    for layer in aot.layers:
        layer.set_fixed_maps(1.0, 1.0, torch.eye(1))
    u = torch.randn(2, 3, 1, 32)
    assert torch.equal(aot(u), std(u))  # same kernel: 1x1 identity maps


def test_dynamic_maps_depend_on_input_and_are_doubly_stochastic():
    block = MultiStreamResidual(_mlp(), 8, n_streams=4, alpha_init=0.5)
    x = torch.randn(2, 3, 4, 8)
    out, maps = block(x, return_maps=True)
    assert out.shape == x.shape
    res = maps["res"]
    assert res.shape == (2, 3, 4, 4)
    assert torch.allclose(res.sum(-1), torch.ones(2, 3, 4), atol=1e-5)
    # near-identity logits (b_res = 4 I) converge slowly: 20 iterations leave ~5e-3 column error
    assert torch.allclose(res.sum(-2), torch.ones(2, 3, 4), atol=2e-2)
    assert not torch.allclose(res[0, 0], res[1, 2])  # input dependent
    static = MultiStreamResidual(_mlp(), 8, n_streams=4, dynamic=False)
    _, smaps = static(x, return_maps=True)
    assert torch.allclose(smaps["res"][0, 0], smaps["res"][1, 2])
    assert torch.allclose(smaps["pre"], torch.full_like(smaps["pre"], 0.25))  # b = 0 -> stream mean


def test_amax_gain_diagnostic():
    maps = [sinkhorn_knopp(torch.randn(5, 4, 4), 50) for _ in range(8)]
    fwd, bwd = composite_amax_gain(maps)
    assert fwd == pytest.approx(1.0, abs=1e-4) and bwd == pytest.approx(1.0, abs=1e-4)
    wild = [torch.eye(4) + 0.3 * torch.rand(4, 4) for _ in range(8)]
    fwd, bwd = composite_amax_gain(wild)
    assert fwd > 1.5 and bwd > 1.5


def test_parameter_overhead_formula():
    for n, d in ((4, 48), (2, 16), (1, 8)):
        block = MultiStreamResidual(nn.Identity(), d, n_streams=n)
        assert (
            sum(p.numel() for p in block.parameters())
            == stream_overhead(d, n)
            == n * d * (n * n + 2 * n) + n * n + 2 * n + 3
        )
    std = sum(p.numel() for p in OperatorTransformer(residual="standard", **KW).parameters())
    aot = sum(p.numel() for p in OperatorTransformer(residual="aot", n_streams=4, **KW).parameters())
    assert aot - std == 2 * KW["depth"] * stream_overhead(KW["dim"], 4)
    wide = match_width(aot, **{k: v for k, v in KW.items() if k != "dim"})
    assert (
        sum(p.numel() for p in OperatorTransformer(residual="standard", **{**KW, "dim": wide}).parameters())
        >= aot
    )
    assert (
        sum(
            p.numel()
            for p in OperatorTransformer(residual="standard", **{**KW, "dim": wide - 4}).parameters()
        )
        < aot
    )


@pytest.mark.parametrize("residual", ["standard", "aot", "hc", "static"])
def test_operator_transformer_shapes_rollout_and_gradients(residual):
    model = OperatorTransformer(residual=residual, n_streams=3, **KW)
    u = torch.randn(2, 3, 1, 32)
    out = model(u)
    assert out.shape == (2, 1, 32)
    out.pow(2).mean().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    roll = model.rollout(u, 4)
    assert roll.shape == (2, 4, 1, 32)
    assert torch.allclose(roll[:, 0], model(u), atol=1e-6)


def test_stream_helpers_and_bad_shapes():
    x = torch.randn(2, 3, 8)
    s = expand_streams(x, 4)
    assert torch.allclose(collapse_streams(s, "mean"), x) and torch.allclose(collapse_streams(s), 4 * x)
    block = MultiStreamResidual(_mlp(), 8, n_streams=4)
    with pytest.raises(ValueError, match=r"\(B, N, 4, 8\)"):
        block(torch.randn(2, 3, 3, 8))
    with pytest.raises(ValueError, match=r"\(B, N, 4, 8\)"):
        block(torch.randn(2, 3, 4, 6))
    with pytest.raises(ValueError, match="n_streams"):
        MultiStreamResidual(_mlp(), 8, n_streams=0)
    with pytest.raises(ValueError, match=r"res must have shape \(2, 2\)"):
        MultiStreamResidual.fixed(_mlp(), 8, 2, 0.5, 1.0, torch.eye(3))
    with pytest.raises(ValueError, match=r"\(\.\.\., n, n\)"):
        sinkhorn_knopp(torch.randn(3, 4))
    with pytest.raises(ValueError, match="constraint"):
        MultiStreamResidual(_mlp(), 8, constraint="softmax")
    model = OperatorTransformer(**KW)
    with pytest.raises(ValueError, match=r"\(B, 3, 1, X\)"):
        model(torch.randn(2, 4, 1, 32))
    with pytest.raises(ValueError, match="divisible by patch"):
        model(torch.randn(2, 3, 1, 30))
    with pytest.raises(ValueError, match="residual"):
        OperatorTransformer(residual="dense", **KW)
    with pytest.raises(NotImplementedError, match="1-D"):
        OperatorTransformer(spatial_dims=2, **KW)


def test_stream_init_and_alpha_init_options():
    import pytest as _pytest

    from neurips26.nn.aot_pot import OperatorTransformer as _OT

    kw = dict(
        in_channels=1, out_channels=1, t_in=2, patch=4, dim=8, depth=2, modes=2, residual="aot", n_streams=3
    )
    mean = _OT(**kw)
    assert all(float(layer.b_pre.abs().max()) == 0.0 for layer in mean.layers)
    cyc = _OT(stream_init="cyclic", alpha_init=0.2, **kw)
    for i, layer in enumerate(cyc.layers):
        assert int(layer.b_pre.argmax()) == i % 3
        assert float(layer.alpha[0]) == _pytest.approx(0.2)
    with _pytest.raises(ValueError):
        _OT(stream_init="bogus", **kw)


def test_unchecked_layer_path_equals_public_forward_and_errors_still_raised():
    torch.manual_seed(0)
    model = OperatorTransformer(residual="aot", n_streams=4, stream_init="cyclic", **KW)
    u = torch.randn(2, 3, 1, 16)
    out, maps = model(u, return_maps=True)
    b, t, c, x = u.shape
    h = expand_streams(model.embed(u.reshape(b, t * c, x)).transpose(1, 2), 4)
    ref_maps = []
    for layer in model.layers:
        h, m = layer(h, return_maps=True)  # the public, checked forward
        ref_maps.append(m["res"])
    ref = u[:, -1] + model.head(model.final_norm(collapse_streams(h))).reshape(b, -1, c, 4).permute(
        0, 2, 1, 3
    ).reshape(b, c, x)
    assert torch.equal(out, ref)  # same kernel: the public forward
    assert all(torch.equal(a, r) for a, r in zip(maps, ref_maps))  # same kernel
    with pytest.raises(ValueError, match="NaN"):
        model(torch.full((2, 3, 1, 16), float("nan")))
    with pytest.raises(ValueError, match="NaN"):
        model.layers[0](torch.full((1, 4, 4, 16), float("nan")))

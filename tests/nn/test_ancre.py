"""Tests for ANCRe learned residual connections (neurips26.nn.ancre)."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from neurips26.nn.ancre import (
    ANCReConnector,
    ANCReSequential,
    ancre_param_groups,
    parameter_overhead,
    uniform_dense_connector,
)


def _blocks(k, d=8, seed=0):
    torch.manual_seed(seed)
    return nn.ModuleList(
        nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d)) for _ in range(k)
    )


def _plain(blocks, h):
    for f in blocks:
        h = h + f(h)
    return h


@pytest.mark.parametrize("k", [1, 2, 5])
def test_fixed_residual_is_bit_identical_to_plain_loop_with_equal_gradients(k):
    blocks = _blocks(k)
    x = torch.randn(4, 8)
    ref = _plain(blocks, x)
    grads_ref = torch.autograd.grad(ref.pow(2).sum(), list(blocks.parameters()))
    for model in (
        ANCReSequential(blocks, ANCReConnector.fixed_residual(k)),
        ANCReConnector.fixed_residual(blocks),
    ):
        out = model(x)
        # the fixed residual returns h_{k-1} as the shortcut: the plain loop's operations, in its order
        assert torch.equal(out, ref)  # same kernel
        grads = torch.autograd.grad(out.pow(2).sum(), list(blocks.parameters()))
        assert all(torch.equal(a, b) for a, b in zip(grads, grads_ref))  # same kernel
    assert ANCReConnector.fixed_residual(k).num_learnable == 0


def test_residual_init_with_large_logit_matches_plain_residual():
    blocks = _blocks(6)
    x = torch.randn(3, 8)
    out = ANCReSequential(blocks, init="residual", init_logit=30.0)(x)
    assert torch.allclose(out, _plain(blocks, x), atol=1e-5)


@pytest.mark.parametrize("include_stem", [False, True])
@pytest.mark.parametrize("k", [1, 2, 4, 7])
def test_weights_row_stochastic_lower_triangular_and_parameter_count(k, include_stem):
    conn = ANCReConnector(k, init="uniform", include_stem=include_stem)
    nn.init.normal_(conn.logits)
    w = conn.weights()
    assert w.shape == (k, k + 1)
    assert (w >= 0).all()
    assert torch.allclose(w.sum(1), torch.ones(k), atol=1e-6)
    assert torch.equal(torch.triu(w, diagonal=1), torch.zeros_like(w))  # same kernel: masked entries are the constant 0; row k-1 uses only h_0..h_{k-1}
    assert w[0, 0] == 1.0
    if not include_stem and k > 1:
        assert (w[1:, 0] == 0).all()
        assert conn.num_learnable == k * (k - 1) // 2
    elif include_stem:
        assert conn.num_learnable == max(k * (k + 1) // 2 - 1, 0)


def test_uniform_dense_weights_and_small_tau_is_one_hot():
    w = uniform_dense_connector(4).weights()
    assert torch.allclose(w[3, 1:4], torch.full((3,), 1 / 3))
    assert uniform_dense_connector(4).num_learnable == 0
    conn = ANCReConnector(4, init="uniform", tau=1e-4)
    with torch.no_grad():
        conn.logits.copy_(torch.tensor([0.3, 0.1, 0.5, 0.2, 0.1, 0.4]))
    w = conn.weights()
    assert torch.allclose(w[2, 1:3], torch.tensor([0.0, 1.0]))  # block 3: sources h1 (0.1), h2 (0.5)
    assert torch.allclose(w[3, 1:4], torch.tensor([0.0, 0.0, 1.0]))


@settings(max_examples=20, deadline=None)
@given(k=st.integers(2, 6), seed=st.integers(0, 1000), tau=st.floats(0.1, 5.0))
def test_shortcut_equals_explicit_weighted_sum(k, seed, tau):
    gen = torch.Generator().manual_seed(seed)
    conn = ANCReConnector(k, tau=tau, init="uniform")
    with torch.no_grad():
        conn.logits.copy_(torch.randn(conn.logits.shape, generator=gen))
    states = [torch.randn(2, 3, generator=gen) for _ in range(k)]
    w = conn.weights()
    expected = sum(w[k - 1, j] * states[j] for j in range(k))
    assert torch.allclose(conn.shortcut(k, states), expected, atol=1e-6)


def test_max_source_distance_equals_masked_weights():
    conn = ANCReConnector(6, init="uniform", max_source_distance=2)
    w = conn.weights()
    for k in range(3, 7):
        assert torch.allclose(w[k - 1, k - 2 : k], torch.full((2,), 0.5))
        assert w[k - 1, : k - 2].sum() == 0
    assert conn.num_learnable == 1 + 2 * 4


def test_gradient_reaches_every_connection_coefficient():
    blocks = _blocks(5)
    model = ANCReSequential(blocks, init_logit=1.0)
    model(torch.randn(16, 8)).pow(2).mean().backward()
    grad = model.connector.logits.grad
    # block 2 has the single source h_1, so its one logit is inert (softmax of one entry); all others learn
    assert grad[0] == 0 and (grad[1:] != 0).all()
    stem = ANCReSequential(blocks, init_logit=1.0, include_stem=True)
    stem(torch.randn(16, 8)).pow(2).mean().backward()
    assert (stem.connector.logits.grad != 0).all()


def test_mix_input_fixed_residual_is_plain_and_learned_mix_differs():
    blocks = _blocks(4)
    x = torch.randn(3, 8)
    fixed = ANCReSequential(blocks, ANCReConnector.fixed_residual(4))(x)
    assert torch.equal(fixed, _plain(blocks, x))  # same kernel: the shortcut is h_{k-1} itself
    fixed_mix = ANCReConnector.fixed_residual(4)
    fixed_mix.mix_input = True
    assert torch.equal(fixed_mix(x, blocks), _plain(blocks, x))  # same kernel
    a = ANCReSequential(blocks, init="uniform")(x)
    b = ANCReSequential(blocks, init="uniform", mix_input=True)(x)
    assert not torch.allclose(a, b)


def test_state_dict_round_trip_and_functional_call():
    model = ANCReSequential(_blocks(4), init="uniform")
    with torch.no_grad():
        model.connector.logits.normal_()
    x = torch.randn(5, 8)
    clone = ANCReSequential(_blocks(4, seed=1), init="residual")
    clone.load_state_dict(copy.deepcopy(model.state_dict()))
    assert torch.equal(clone(x), model(x))  # same kernel: the same weights, loaded
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    params["connector.logits"] = torch.zeros_like(params["connector.logits"])
    out = torch.func.functional_call(model, params, (x,))
    uniform = ANCReSequential(model.blocks, uniform_dense_connector(4))(x)
    assert torch.allclose(out, uniform, atol=1e-6)


def test_param_groups_and_overhead():
    model = nn.Sequential(nn.Linear(64, 64), ANCReSequential(_blocks(32, d=64)), nn.Linear(64, 10))
    groups = ancre_param_groups(model, 1e-3, 0.1)
    assert groups[1]["weight_decay"] == 0.0 and groups[1]["params"][0].numel() == 32 * 31 // 2
    ov = parameter_overhead(model)
    assert ov["extra"] == 496 and ov["fraction"] < 0.01


def test_bad_arguments_and_shape_changing_block():
    with pytest.raises(ValueError, match="tau"):
        ANCReConnector(3, tau=0.0)
    with pytest.raises(ValueError, match="num_blocks"):
        ANCReConnector(0)
    with pytest.raises(ValueError, match="init"):
        ANCReConnector(3, init="dense")
    with pytest.raises(ValueError, match="num_blocks=3 but 2 blocks"):
        ANCReSequential(_blocks(2), ANCReConnector(3))
    with pytest.raises(ValueError, match="num_blocks=3 but 2 blocks"):
        ANCReConnector(3)(torch.randn(2, 8), _blocks(2))
    with pytest.raises(ValueError, match="no blocks"):
        ANCReConnector(3)(torch.randn(2, 8))
    blocks = list(_blocks(3))
    blocks[1] = nn.Linear(8, 4)
    with pytest.raises(ValueError, match="block 2 \\(index 1\\) changed the tensor shape"):
        ANCReConnector(blocks)(torch.randn(2, 8))
    with pytest.raises(TypeError, match="single module"):
        ANCReConnector(nn.Linear(2, 2))


def test_torch_compile_traces_the_connector():
    """Dynamo traces the connector (the buffered autograd.Function included); a failure is a regression.

    ``backend="eager"`` needs no C compiler, so nothing here depends on the platform: any exception from
    tracing fails the test instead of skipping it.
    """
    model = ANCReSequential(_blocks(3), init="uniform")
    x = torch.randn(2, 8, requires_grad=True)
    compiled = torch.compile(model, backend="eager", fullgraph=False)
    out = compiled(x)
    ref = model(x)
    # the eager backend replays the traced ops, but graph breaks may regroup them:
    # bound: K * (K + 1 + 4 d) * eps32 * max|ref| (K = 3 blocks of width d = 8), as for the buffered mix
    rel = 3 * (3 + 1 + 4 * 8) * torch.finfo(torch.float32).eps
    torch.testing.assert_close(out, ref, rtol=0.0, atol=rel * float(ref.abs().max()))
    (g,) = torch.autograd.grad(out.sum(), x)
    (g_ref,) = torch.autograd.grad(ref.sum(), x)
    torch.testing.assert_close(g, g_ref, rtol=0.0, atol=rel * float(g_ref.abs().max()))


def _stacked_forward(conn, blocks, h0):
    """The reference stack: every shortcut through ``shortcut`` (a torch.stack of the sources)."""
    w = None if conn._exact_residual else conn.weights()
    states = [h0]
    for k, f in enumerate(blocks, start=1):
        short = conn.shortcut(k, states, w)
        states.append(f(short if conn.mix_input else states[-1]) + short)
    return states[-1]


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(init="residual", init_logit=2.0),
        dict(init="uniform", learnable=False),
        dict(include_stem=True),
        dict(max_source_distance=2),
        dict(mix_input=True, init="uniform"),
    ],
)
def test_buffered_forward_equals_stacked_shortcuts_with_gradients_within_rounding(kwargs):
    blocks = _blocks(6)
    conn = ANCReConnector(6, **kwargs)
    if isinstance(conn.logits, nn.Parameter):
        with torch.no_grad():
            conn.logits.add_(torch.randn(conn.logits.shape, generator=torch.Generator().manual_seed(1)))
    x = torch.randn(5, 8, requires_grad=True)
    params = [x, *blocks.parameters()] + ([conn.logits] if conn.num_learnable else [])
    out = conn(x, blocks)
    ref = _stacked_forward(conn, blocks, x)
    # The buffer runs the same tensordot as torch.stack, but on another tensor (a slice of a preallocated
    # buffer), and its backward writes tensordot's two mm products out: equal on one CPU, not promised
    # on all (BLAS kernels may depend on layout and alignment). Each of the K blocks mixes <= K + 1
    # sources and runs LayerNorm (d terms) and two Linears (d and 2d terms):
    # bound: |out - ref| <= K * (K + 1 + 4 d) * eps32 * max|ref|, the same for each gradient on its scale
    K, d = len(blocks), x.shape[-1]
    rel = K * (K + 1 + 4 * d) * torch.finfo(torch.float32).eps
    torch.testing.assert_close(out, ref, rtol=0.0, atol=rel * float(ref.abs().max()))
    g_out = torch.autograd.grad(out.pow(2).sum(), params)
    g_ref = torch.autograd.grad(ref.pow(2).sum(), params)
    for a, b in zip(g_out, g_ref):
        torch.testing.assert_close(a, b, rtol=0.0, atol=rel * float(b.abs().max()))


def test_buffered_forward_without_grad_and_repeated_calls():
    blocks = _blocks(4)
    conn = ANCReConnector(4, init="uniform")
    x = torch.randn(3, 8)
    with torch.no_grad():
        first = conn(x, blocks)
    assert torch.equal(first, conn(x, blocks).detach())  # same kernel: no_grad only skips the tape
    ref = _stacked_forward(conn, blocks, x).detach()
    # bound: K * (K + 1 + 4 d) * eps32 * max|ref|, as for the buffered vs stacked test above
    rel = 4 * (4 + 1 + 4 * 8) * torch.finfo(torch.float32).eps
    torch.testing.assert_close(first, ref, rtol=0.0, atol=rel * float(ref.abs().max()))

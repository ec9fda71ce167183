"""ADKV decode on the codes (the recurrence replayed inside the attention reductions) and the per-channel
validation selection of calibrated rates."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from neurips26.inference.adkv import ADKVCache, ADKVConfig, calibrate_adkv, kernel
from neurips26.inference.adkv.calibrate import select_on_validation, validation_errors
from neurips26.inference.adkv.stored import ADKVStored
from neurips26.inference.quant.attention import register_codes_attention

F32 = torch.finfo(torch.float32).eps


def _filled_layer(bits, B=2, H=3, T=300, D=64, seed=0, **kw):
    cfg = LlamaConfig(num_hidden_layers=1, hidden_size=D * 2 * H, num_attention_heads=2 * H, num_key_value_heads=H,
                      head_dim=D)  # fmt: skip
    cache = ADKVCache(cfg, ADKVConfig(bits=bits, storage="packed", eta_s=0.2, gamma=1.0, **kw))
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(B, H, T, D, generator=g) * 2 + 1
    v = torch.randn(B, H, T, D, generator=g)
    k[..., 0, :] += 10.0  # a sink-like first token
    cache.update(k, v, 0)
    return cache.layers[0]


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("path", ["cpp", "torch"])
def test_scores_and_values_on_the_codes_equal_the_reference_decode(bits, path, monkeypatch):
    """Scores and weighted values from the codes vs the reference decode (float64 log-domain scan, cast to
    float32) followed by float32 products. Bound per score: the float32 dot products differ by at most
    2 gamma_{d+2} sum_c |q_c| |K_c| (equality_bound's score term) plus one float32 rounding of each K entry
    (the float64 replays may round to neighbouring float32 values): sum_c |q_c| |K_c| eps32. Per value
    output: sum_t p_t |V_t| (2 gamma_{T+2} + eps32)."""
    if path == "torch":
        monkeypatch.setattr(kernel, "load", lambda: False)
    elif not kernel.available():
        pytest.skip("no C++ toolchain")
    lay = _filled_layer(bits)
    dk, dv = (x.float() for x in lay.dequantized_states())
    stored = lay._stored_attention()
    assert isinstance(stored, ADKVStored) and stored.length == dk.shape[-2] and stored.ns == 1
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 3, 4, 64, generator=g) * 0.125
    T = stored.length
    out = torch.full((2, 3, 4, T + 3), float("nan"))
    stored.scores(q, out[..., :T])
    ref = q @ dk.transpose(-1, -2)
    d = q.shape[-1]
    gam = lambda n: n * F32 / 2 / (1 - n * F32 / 2)  # noqa: E731
    bound = (q.abs() @ dk.abs().transpose(-1, -2)) * (2 * gam(d + 2) + F32)
    assert bool(((out[..., :T] - ref).abs() <= bound + 1e-30).all())
    assert bool(out[..., T:].isnan().all())  # nothing written past the stored tokens
    p = torch.softmax(torch.randn(2, 3, 4, T, generator=g), -1)
    o = torch.ones(2, 3, 4, 64)
    stored.values(p, o)
    vref = 1.0 + p @ dv
    vbound = (p @ dv.abs()) * (2 * gam(T + 2) + F32) + 2 * F32
    assert bool(((o - vref).abs() <= vbound).all())


def test_cpp_operator_matches_its_torch_oracle():
    """Same float64 recurrence in both (only the float32 dot-product grouping differs): bound as above."""
    if not kernel.available():
        pytest.skip("no C++ toolchain")
    lay = _filled_layer(2, T=130, seed=3)
    st = lay._stored_attention().streams[0]
    q = torch.randn(2, 3, 3, 64) * 0.1
    a, b = torch.zeros(2, 3, 3, 129), torch.zeros(2, 3, 3, 129)
    kernel.replay_attend(q, mode=0, out=a, **st)
    kernel.replay_attend_reference(q, mode=0, out=b, **st)
    dk = lay.dequantized_states()[0].float()[..., 1:, :]
    bound = (q.abs() @ dk.abs().transpose(-1, -2)) * 2 * 66 * F32 + 1e-30
    assert bool(((a - b).abs() <= bound).all())


def test_stored_attention_only_for_the_packed_stream_layout():
    assert _filled_layer(2)._stored_attention() is not None
    for kw in ({"n_outliers": 2}, {"value_mode": "per_token"}, {"decode_mode": "reference"}):
        assert _filled_layer(2, **kw)._stored_attention() is None
    cfg = LlamaConfig(
        num_hidden_layers=1, hidden_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=32
    )
    sim = ADKVCache(cfg, ADKVConfig(storage="simulated"))
    sim.update(torch.randn(1, 1, 40, 32), torch.randn(1, 1, 40, 32), 0)
    assert sim.layers[0]._stored_attention() is None


def _tiny_model(kv_heads=2):
    cfg = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=kv_heads, max_position_embeddings=256, pad_token_id=0)  # fmt: skip
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_decode_through_codes_attention_matches_sdpa_decode(kv_heads):
    """Teacher-forced decode of 12 tokens after a 60-token prefill, window 4: the codes attention (ADKV
    handing a handle) vs SDPA on the reconstruction. Logits within 1e-4 relative to max|logit| (float32
    score/value bounds above, propagated through two small layers; observed ~1e-6)."""
    model = _tiny_model(kv_heads)
    name = register_codes_attention()
    ids = torch.randint(1, 64, (2, 72), generator=torch.Generator().manual_seed(0))
    logits = {}
    for attn in ("sdpa", name):
        cache = ADKVCache(model.config, ADKVConfig(bits=2, residual_length=4, eta_s=0.2, gamma=1.0))
        model.set_attn_implementation(attn)
        try:
            with torch.no_grad():
                model(ids[:, :60], cache=cache, use_cache=True)
                steps = [model(ids[:, t : t + 1], cache=cache, use_cache=True).logits for t in range(60, 72)]
        finally:
            model.set_attn_implementation("sdpa")
        logits[attn] = torch.cat(steps, 1)
    a, b = logits["sdpa"], logits[name]
    assert float((a - b).abs().max()) <= 1e-4 * float(a.abs().max())


def test_codes_path_is_taken_and_returns_only_the_window():
    model = _tiny_model(2)
    name = register_codes_attention()
    cache = ADKVCache(model.config, ADKVConfig(bits=2, residual_length=3))
    with torch.no_grad():
        model(torch.randint(1, 64, (1, 20)), cache=cache, use_cache=True)
    model.set_attn_implementation(name)
    try:
        kw: dict = {}
        k = torch.zeros(1, 2, 1, 16)
        out_k, _ = cache.layers[0].update(k, k, kwargs=kw)
    finally:
        model.set_attn_implementation("sdpa")
    assert out_k.shape[-2] == 4  # window (3) + the new token; the 17 stored tokens travel in the handle
    assert kw["kv_codes_handle"].stored.length == 17


# ------------------------------------------------------------------------------ validation selection
def _streams(T=96, Ly=2, N=2, H=2, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(T, dtype=torch.float32).unsqueeze(-1)
    K = torch.cos(0.05 * t + torch.rand(Ly, N, H, 1, D, generator=g) * 6) * 3 + 0.3 * torch.randn(
        Ly, N, H, T, D, generator=g
    )
    V = torch.randn(Ly, N, H, T, D, generator=g)
    return K, V


def test_selection_reverts_channels_whose_calibrated_rates_hurt_held_out_reconstruction():
    """Regression (results/diagnosis/adkv.md, section 4): rates that reconstruct worse than the defaults on
    held-out streams must not reach the cache. Channels with a ruinous gamma (0.05: the step collapses to
    its floor, constant overload) revert to the defaults; channels given the defaults stay as they are."""
    cfg = ADKVConfig(bits=2, eta_s=0.2, gamma=1.0)
    K, V = _streams()
    default = cfg.default_params(8, (2, 2, 2))
    bad = default.clone()
    bad[..., 2, :4] = 0.05  # channels 0-3 of every (layer, stream, head) ruined
    chosen, rep = select_on_validation(bad, K, V, cfg)
    e_bad = validation_errors(K, V, bad, cfg)
    e_def = validation_errors(K, V, default, cfg)
    assert bool((e_bad[..., :4] > e_def[..., :4]).all())  # the premise: these channels are worse
    assert torch.equal(chosen, default)  # same kernel: torch.where copies the default values
    assert rep["kept_share"] == 0.0
    assert rep["val_rel_mse_selected"] <= rep["val_rel_mse_default"] + 1e-15
    assert rep["val_rel_mse_calibrated"] > rep["val_rel_mse_default"]
    # per channel, the selected error is the smaller of the two
    e_sel = validation_errors(K, V, chosen, cfg)
    assert bool((e_sel <= torch.minimum(e_def, e_bad)).all())


def test_selection_keeps_channels_that_improve():
    cfg = ADKVConfig(bits=2, eta_s=0.2, gamma=1.0)
    K, V = _streams(seed=1)
    default = cfg.default_params(8, (2, 2, 2))
    better = default.clone()
    better[..., 0, :] = 0.02  # a slower zero-point: better on some channels, worse on others
    e_def, e_b = validation_errors(K, V, default, cfg), validation_errors(K, V, better, cfg)
    chosen, rep = select_on_validation(better, K, V, cfg)
    keep = e_b < e_def
    assert abs(rep["kept_share"] - float(keep.double().mean())) < 1e-12
    assert bool((chosen[..., 0, :][keep] == 0.02).all()) and bool(
        (chosen[..., 0, :][~keep] == cfg.eta_z).all()
    )


def test_calibrate_adkv_with_validation_never_worse_on_validation_and_checks_input():
    model = _tiny_model(2)
    g = torch.Generator().manual_seed(0)
    calib = [torch.randint(1, 64, (4, 24), generator=g)]
    val = torch.randint(1, 64, (2, 80), generator=g)
    cfg = ADKVConfig(bits=2, eta_s=0.2, gamma=1.0)
    rep: dict = {}
    params = calibrate_adkv(
        model, calib, cfg, steps=5, lr=5e-2, bptt=8, batch_size=4, n_query=8, validation=val, report=rep
    )
    assert set(params) == {0, 1} and params[0]["key"].shape == (2, 3, 16)
    assert 0.0 <= rep["kept_share"] <= 1.0
    assert (
        rep["val_rel_mse_selected"] <= min(rep["val_rel_mse_default"], rep["val_rel_mse_calibrated"]) + 1e-15
    )
    with pytest.raises(ValueError, match="validation"):
        calibrate_adkv(model, calib, cfg, steps=1, validation=val.float())
    with pytest.raises(ValueError, match="n_outliers"):
        calibrate_adkv(model, calib, ADKVConfig(bits=2, n_outliers=1), steps=1, validation=val)

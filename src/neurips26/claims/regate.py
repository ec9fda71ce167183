"""Claim check for REGATE (time-causal, confidence-gated fusion of policy documents into temporal GNNs).

Seed abstract "Risk assessment and anomaly detection in" (no public paper or code). The spec's template
world (``neurips26.temporal.regate.transaction_world``) generates a transaction stream with two regime
shifts: at each, a fraction of one exchange group's accounts turn illicit with licit-looking behaviour while
the old fan-out pattern fades, and an enforcement document naming that group is published shortly before.
Documents (with distractors, a hedged rumour, a late retroactive report and an unknown alias) are embedded
by the real all-MiniLM-L6-v2 and turned into policy tokens by the rule-based extractor. The first shift
falls in the training window (first 55% of events), the second (at 75%) inside the test window (last 30%),
so post-shift test metrics measure whether a model uses a *new* document it has never seen. Task: risk that an event's
sender is illicit, scored before the event is observed. Every arm has the same backbone width, epochs,
batch, learning rate and class weighting; temperature scaling is fitted on the pre-shift validation window.
Calibration is judged by ECE (15 equal-width bins) over 8 seeds in the full profile; Brier and NLL (no
binning) are reported beside it. A retrieval-budget run distils the trained REGATE's routing attention into
a document scorer and extracts only 20% of the test window's documents (learned choice vs random).
"""

from __future__ import annotations

import copy
import itertools
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import average_precision_score, roc_auc_score
from torch import nn

from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Exact, Headline, SeedResult
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.temporal import TGNLinkPredictor, temporal_loader
from neurips26.temporal.regate import (
    REGATE,
    BoundedPolicyGate,
    GraphMixerLite,
    NaiveTextInjection,
    NoisyExtractor,
    PolicyToken,
    RetrievalAdapter,
    RuleBasedExtractor,
    TokenStore,
    attention_mass,
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
NOISY = "regate_noisy"  # REGATE trained and scored on tokens from a noisy extractor (full profile)
REFERENCES = ("naive_leaky", "timestamps_only", "tgn_regate", NOISY, "learned", "random", "all_documents")
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
        "nll": float(torch.nn.functional.binary_cross_entropy_with_logits(logits / temp, y)),
    }


def run(config: dict, seed: int) -> SeedResult:
    """One seed: generate the world, extract and embed documents, train and score every arm."""
    return _run_inner(config, seed)


def _run_inner(cfg: dict, seed: int) -> SeedResult:
    world = transaction_world(
        cfg["num_accounts"], cfg["num_events"], cfg["num_groups"], shifts=tuple(cfg["shifts"]), seed=seed
    )
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
    if NOISY in cfg["arms"]:
        noisy = NoisyExtractor(ex, cfg["num_groups"], cfg["noise"], cfg["noise"], seed=seed + 5)
        noisy_tokens = [t for d in world.documents for t in noisy.extract(d)]
        stores[NOISY] = TokenStore(group_of, doc_embeddings=emb)
        stores[NOISY].add(noisy_tokens)
        extraction["noisy_corrupted_tokens"] = noisy.corrupted
    stated = stated_effective_dates(world.documents)  # the leaky arm aligns by these, unclamped
    ntr, nva = int(cfg["split"][0] * E), int(cfg["split"][1] * E)
    parts = (data[:ntr], data[ntr:nva], data[nva:])
    ys = (labels[:ntr], labels[ntr:nva], labels[nva:])
    test = parts[2]
    post = test.t >= world.shift_times[-1]
    if post.all() or (~post).all() or ys[2][post].sum() == 0:
        raise RuntimeError("the test window must contain both sides of the last shift and positives after it")
    if int(parts[1].t[-1]) >= world.shift_times[-1]:
        raise RuntimeError("the validation window (temperature fit) must end before the last shift")
    horizon = float(data.t[-1])
    tau_s = horizon * cfg["tau_frac"]
    pos_weight = float((1 - ys[0].mean()) / ys[0].mean().clamp(min=1e-6))
    cut = float(world.shift_times[-1])
    edited = _future_edited_store(store, group_of, cut, cfg["num_groups"], seed + 7)
    pre_cut = test.t < cut
    metrics: dict[str, dict[str, float]] = {
        k: {}
        for k in (
            "ap_post",
            "auc_post",
            "ece_post",
            "brier_post",
            "nll_post",
            "ap_pre",
            "causality_violation",
            "leak_detected",
        )
    }
    budget, perf, per_arm, models = {}, {}, {}, {}
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
        for k in ("ap", "auc", "ece", "brier", "nll"):
            metrics[f"{k}_post"][arm] = m_post[k]
        metrics["ap_pre"][arm] = m_pre["ap"]
        if arm in (METHOD, "naive_causal", "naive_leaky", "tgn_regate"):
            _, _, s_edit = stream_risk_scores(model, parts, edited, cfg["batch_size"])
            viol = float((s_edit[pre_cut] - raw_test[pre_cut]).abs().max())
            metrics["causality_violation"][arm] = viol
            metrics["leak_detected"][arm] = float(viol > 1e-6)
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
        if arm == METHOD:
            models[arm], per_arm[arm]["raw_test"] = model, raw_test
    metrics["ap_drop"] = {"backbone": metrics["ap_pre"]["backbone"] - metrics["ap_post"]["backbone"]}
    info = {
        "budget": budget,
        "performance": perf,
        "per_arm": {a: {k: v for k, v in r.items() if k != "raw_test"} for a, r in per_arm.items()},
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
    if cfg.get("retrieval_budget"):
        t_start = time.perf_counter()
        rec = _retrieval_budget(
            models[METHOD],
            parts,
            post,
            ys[2],
            world,
            tokens,
            emb,
            store,
            cfg,
            seed,
            per_arm[METHOD]["raw_test"],
        )
        rec["seconds"] = time.perf_counter() - t_start
        metrics["ap_post_budget"] = {k: rec.pop(f"ap_{k}") for k in ("learned", "random", "all_documents")}
        info["retrieval"] = rec
    return SeedResult(metrics=metrics, info=info)


def _retrieval_budget(model, parts, post, y_test, world, tokens, emb, store, cfg, seed, raw_test) -> dict:
    """Closed-loop retrieval under a document budget (spec step 7), scored with the trained REGATE.

    Distillation: the train and validation events are scored window by window (``retrieval_window``
    events) with every document published so far extracted; after each window the adapter takes one KL
    step towards the routing-attention mass each document's tokens received in it. Budget: of the
    documents published during the test window only ``max(1, round(budget * n))`` are extracted, chosen
    by the adapter (top ``k - k_explore`` plus ``k_explore = round(0.1 k)`` random ones) or uniformly at
    random (every subset when there are at most 6, else 6 seeded draws, averaged). Documents published
    before the test window are all extracted in both arms; the model is the same trained REGATE.
    """
    test_start = float(parts[2].t[0])
    aliases = tuple(world.group_index)
    adapter = RetrievalAdapter(num_buckets=cfg["retrieval_buckets"], lr=cfg["retrieval_lr"], aliases=aliases)
    model.eval()
    model.reset_state()
    mass: dict[str, float] = {}
    seen, losses = 0, []
    with torch.no_grad():
        for part in parts[:2]:
            for b in temporal_loader(part, cfg["batch_size"]):
                model(b.src, b.t, store)
                for d, m in attention_mass(store, model.last_token_index, model.last_attention).items():
                    mass[d] = mass.get(d, 0.0) + m
                model.observe(b.src, b.dst, b.t, b.msg)
                seen += b.num_events
                if seen >= cfg["retrieval_window"]:
                    now = float(b.t[-1])
                    docs = [d for d in world.documents if d.publish_time < now]
                    if docs and mass:
                        losses.append(adapter.update(docs, mass))
                    mass, seen = {}, 0
    snapshot = copy.deepcopy(model)  # the state after every train and validation event
    before = {d.doc_id for d in world.documents if d.publish_time < test_start}
    cands = [d for d in world.documents if d.publish_time >= test_start]
    k = max(1, round(cfg["retrieval_budget"] * len(cands)))

    def post_ap(selected) -> tuple[float, torch.Tensor]:
        keep = before | set(selected)
        sel_store = TokenStore(world.group_of, doc_embeddings=emb)
        sel_store.add([t for t in tokens if t.doc_id in keep])
        m = copy.deepcopy(snapshot)
        scores = []
        with torch.no_grad():
            for b in temporal_loader(parts[2], cfg["batch_size"]):
                scores.append(m(b.src, b.t, sel_store))
                m.observe(b.src, b.dst, b.t, b.msg)
        s = torch.cat(scores)
        return float(average_precision_score(y_test[post].numpy(), s[post].numpy())), s

    learned = adapter.select(cands, k, explore=0.1, seed=seed)
    ap_learned, _ = post_ap(learned)
    subsets = list(itertools.combinations([d.doc_id for d in cands], k))
    if len(subsets) > 6:
        rng = np.random.default_rng(seed + 13)
        subsets = [tuple(rng.permutation([d.doc_id for d in cands])[:k]) for _ in range(6)]
    ap_random = [post_ap(sub)[0] for sub in subsets]
    ap_all, s_all = post_ap([d.doc_id for d in cands])
    return {
        "ap_learned": ap_learned,
        "ap_random": float(np.mean(ap_random)),
        "ap_all_documents": ap_all,
        "random_subsets": [list(x) for x in subsets],
        "random_aps": ap_random,
        "learned_selection": learned,
        "candidates": [d.doc_id for d in cands],
        "budget_documents": k,
        "ranking": adapter.rank(cands),
        "kl_losses": losses,
        "all_documents_equals_stream_scores": bool(torch.equal(s_all, raw_test)),
    }


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
    "shifts": (0.3, 0.75),
    "split": (0.55, 0.7),  # train | validation (temperature fit, before the last shift) | test
    "noise": 0.3,
    "retrieval_budget": 0.2,
    "retrieval_window": 1000,
    "retrieval_buckets": 4096,
    "retrieval_lr": 1.0,
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
        Exact("leak_detected", arm="naive_leaky", expected=1.0, label="leaky_arm_flagged"),
        Better(
            "ap_post_budget", arm="learned", baseline="random", margin=0.0, label="retrieval_beats_random"
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
            "a closed-loop retrieval module distils the model's token-routing attention into a document scorer, "
            "so the system learns which documents to extract next without relevance labels",
            criteria=("retrieval_beats_random",),
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
            "retrieval_window": 300,
            "arms": list(ARMS),
        },
        "quick": {**_COMMON, "num_accounts": 500, "num_events": 5000, "epochs": 3, "arms": list(ARMS)},
        "full": {
            **_COMMON,
            "num_accounts": 1250,
            "num_events": 15000,
            "epochs": 4,
            "arms": [*ARMS, NOISY],
        },
    },
    seeds={"smoke": (0,), "quick": (0, 1), "full": (0, 1, 2, 3, 4, 5, 6, 7)},
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
        "Synthetic template world instead of Elliptic; two backbones (GraphMixer-lite, TGN) instead of six. "
        "Calibration design (declared before the run, after a 3-seed run whose ECE verdict flipped between seeds "
        "0-2 and 3-5): the full profile uses 8 seeds on a smaller world (1,250 accounts, 15,000 events, 4 epochs; "
        "before: 3 seeds, 2,000 accounts, 30,000 events, 5 epochs) and a longer post-shift window (last shift at "
        "75% of the events, split 55/15/30, so 25% of the events are post-shift; before 80% and 60/15/25); ECE "
        "keeps the standard 15 equal-width bins and decides the calibration headline; Brier and NLL are reported "
        "without a criterion. The no_priors/unbounded_gate ablations are no longer run in the full profile (they "
        "exist as gate flags and are unit-tested); regate_noisy (one extractor-noise level, 0.3: a corrupted "
        "token gets a random group, type and direction, every confidence is jittered by U(-0.3, 0.3)) is a "
        "reference arm, not a sweep; the distractor-ratio sweep and the extractor quality-cost comparison are not "
        "run. Retrieval: a 20% budget applies only to the documents published in the test window (documents "
        "before it are all extracted), with the trained REGATE fixed; the scorer is distilled by one KL step per "
        "1,000 events of the train and validation windows; random selection is averaged over every subset (at "
        "most 6, else 6 draws). The gate's token embedding adds the document's MiniLM embedding (the issue asks "
        "for MiniLM-embedded documents; the spec's default leaves raw text out); the backbone scores the sender "
        "from its own past events only; quick uses 5,000 events, 3 epochs (spec 2) and 2 seeds (spec 1)."
    ),
    data=(
        "neurips26.temporal.regate.transaction_world: 8 exchange groups, 70% in-group transfers, 5% illicit "
        "accounts with fan-out bursts of large transfers; shifts at 30% and 75% of the events, each turning 30% "
        "of one group's accounts illicit with licit-looking behaviour while the old pattern fades to 40%; one "
        "enforcement document per shift published 2% of the horizon earlier, 10 distractors, a hedged rumour, a "
        "retroactive report published at 90% of the horizon, an unknown alias. Split 55/15/30 by event order "
        "(the validation window, used for temperature scaling, ends before the last shift)."
    ),
    plot=plot,
    glossary={
        "ap_post": "average precision of sender-illicit risk on test events at or after the last shift",
        "auc_post": "AUC-ROC on the same events",
        "ece_post": "expected calibration error (15 equal-width bins of the positive-class probability) after "
        "the class-weight prior correction (logit - log pos_weight) and temperature scaling fitted on the "
        "validation window",
        "brier_post": "mean squared error of the temperature-scaled probability on post-shift test events "
        "(binning-free; reported, no criterion)",
        "nll_post": "mean negative log-likelihood (binary cross-entropy) of the temperature-scaled probability on "
        "post-shift test events (binning-free; reported, no criterion)",
        "ap_pre": "AP on the validation window (after the first shift, before the last)",
        "ap_drop": "backbone ap_pre minus ap_post (the testbed premise)",
        "causality_violation": "max |logit change| on test events before the last shift when every document "
        "published at or after it is edited",
        "leak_detected": "1 when causality_violation > 1e-6 (the edited future moved a past score), else 0",
        "ap_post_budget": "post-shift AP of the trained REGATE when only 20% of the documents published in the "
        "test window are extracted: chosen by the attention-distilled retrieval scorer (learned), uniformly at "
        "random (random; mean over subsets), or all of them (all_documents)",
    },
)

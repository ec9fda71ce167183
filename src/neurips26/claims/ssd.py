"""Claim check for SSD (speculative self-distillation for knowledge injection; abstract only).

A synthetic biography world: entities named by two syllables, four attributes each (city, employer,
pet, birth year) stated in a shuffled document. A tiny Llama is first fine-tuned (base SFT) on *old*
entities to answer questions with the document in context (open book) and without it (closed book,
from memory). Knowledge injection then targets *new* entities: the same network reading the document
is the teacher, the closed-book model is the student. SSD, on-policy and off-policy self-distillation
start from the same base checkpoint and run the same number of optimiser steps on the same questions
(templates 1-2); accuracy is closed-book exact match on the held-out template 3 (and on 1-2).
"""

from __future__ import annotations

import copy
import random
import time
from pathlib import Path

import numpy as np
import torch

from neurips26.claims.base import AtMost, Better, Claim, Headline, SeedResult
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.cache import cached_dir
from neurips26.common.models import build_tiny_lm, count_parameters
from neurips26.common.training import train_lm
from neurips26.distill.ssd import SSDConfig, SSDTrainer

METHOD = "ssd"
BASELINES = ("on_policy", "off_policy")
REFERENCES = ("base", "teacher_open_book")
SYLLABLES = ("ka", "mo", "ri", "te", "lu", "sa", "ne", "po", "vi", "da", "fe", "zo")
VALUES = {
    "city": tuple(f"city{i}" for i in range(8)),
    "employer": tuple(f"firm{i}" for i in range(8)),
    "pet": ("cat", "dog", "owl", "fox", "eel", "yak"),
    "year": tuple(f"y{i}" for i in range(10)),
}
SENTENCE = {
    "city": "{n} lives in {v} .",
    "employer": "{n} works at {v} .",
    "pet": "{n} owns a {v} .",
    "year": "{n} was born in {v} .",
}
QUESTIONS = {
    "city": ("where does {n} live ?", "which city is home to {n} ?", "in what city does {n} live ?"),
    "employer": ("where does {n} work ?", "who employs {n} ?", "which firm does {n} work for ?"),
    "pet": ("what pet does {n} own ?", "which animal does {n} keep ?", "what animal does {n} own ?"),
    "year": ("when was {n} born ?", "what year was {n} born ?", "in which year was {n} born ?"),
}


def _vocab() -> list[str]:
    words = set(SYLLABLES)
    for vals in VALUES.values():
        words |= set(vals)
    for text in list(SENTENCE.values()) + [q for qs in QUESTIONS.values() for q in qs]:
        words |= {w for w in text.split() if w not in ("{n}", "{v}")}
    return ["<pad>", "<s>", "</s>", "<unk>", *sorted(words)]


def word_tokenizer():
    """Whitespace word-level ``PreTrainedTokenizerFast`` over the closed vocabulary (pad 0, bos 1, eos 2)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(_vocab())}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", padding_side="left", clean_up_tokenization_spaces=False)


def _entity(name: str, rng: random.Random) -> dict:
    attrs = {k: rng.choice(v) for k, v in VALUES.items()}
    sents = [SENTENCE[k].format(n=name, v=v) for k, v in attrs.items()]
    rng.shuffle(sents)
    return {"name": name, "attrs": attrs, "doc": " ".join(sents)}


def world(n_old: int, n_new: int, seed: int, n_read: int = 0) -> dict:
    """Old and new entities (distinct names) plus ``n_read`` reading-practice entities.

    Reading entities reuse random names with random attributes and appear only with their document
    in context, so the base model must learn to read rather than recall.
    """
    rng = random.Random(seed)
    names = [f"{a} {b}" for a in SYLLABLES for b in SYLLABLES if a != b]
    rng.shuffle(names)
    ents = [_entity(name, rng) for name in names[: n_old + n_new]]
    read = [_entity(rng.choice(names), rng) for _ in range(n_read)]
    return {"old": ents[:n_old], "new": ents[n_old:], "read": read}


def qa(ent: dict, attr: str, template: int) -> tuple[str, str]:
    return QUESTIONS[attr][template].format(n=ent["name"]), SENTENCE[attr].format(n=ent["name"], v=ent["attrs"][attr])


def _sft_examples(tok, old: list[dict], read: list[dict] = ()) -> list[dict]:
    """Closed- and open-book QA on old entities, open-book QA on reading entities (answer tokens only)."""
    out = []
    for ent in [*old, *read]:
        closed = any(ent is o for o in old)
        for attr in VALUES:
            for tpl in range(3):
                q, a = qa(ent, attr, tpl)
                for prompt in ((q, f"{ent['doc']} {q}") if closed else (f"{ent['doc']} {q}",)):
                    p_ids = tok(prompt)["input_ids"]
                    a_ids = tok(a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
                    out.append({"input_ids": p_ids + a_ids, "loss_mask": [0] * len(p_ids) + [1] * len(a_ids)})
    return out


def _base_model(cfg: dict, tok, w: dict, seed: int):
    key = {k: cfg[k] for k in ("n_old", "n_new", "n_read", "hidden", "layers", "sft_steps", "sft_lr", "batch")}

    def build(folder: Path) -> None:
        model = build_tiny_lm("llama", vocab_size=len(tok), seed=seed, hidden_size=cfg["hidden"],
                              num_hidden_layers=cfg["layers"], num_attention_heads=4, num_key_value_heads=2,
                              intermediate_size=2 * cfg["hidden"], max_position_embeddings=128)
        train_lm(model, _sft_examples(tok, w["old"], w["read"]), steps=cfg["sft_steps"], batch_size=cfg["batch"],
                 lr=cfg["sft_lr"], warmup=20, seed=seed)
        model.save_pretrained(folder)

    folder = cached_dir("ssd-base", {**key, "seed": seed, "v": 1}, build)
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(folder).eval()


@torch.no_grad()
def _accuracy(model, tok, ents: list[dict], templates: tuple[int, ...], open_book: bool = False) -> float:
    prompts, answers = [], []
    for ent in ents:
        for attr in VALUES:
            for tpl in templates:
                q, a = qa(ent, attr, tpl)
                prompts.append(f"{ent['doc']} {q}" if open_book else q)
                answers.append(a)
    tok.padding_side = "left"
    enc = tok(prompts, return_tensors="pt", padding=True)
    out = model.generate(**enc, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id,
                         eos_token_id=tok.eos_token_id)
    texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return float(np.mean([t.strip() == a for t, a in zip(texts, answers)]))


def _arm_config(arm: str, cfg: dict) -> SSDConfig:
    common = {"max_new_tokens": 8, "teacher_mode": "frozen", "loss": "jsd", "beta": 0.5}
    if arm == METHOD:
        return SSDConfig(threshold=cfg["threshold"], supervise="intervened", **common)
    if arm == "on_policy":
        return SSDConfig(threshold=float("inf"), supervise="all", **common)
    return SSDConfig(threshold=-1.0, always_intervene=True, supervise="all", **common)


def run(config: dict, seed: int) -> SeedResult:
    return _run_inner(config, seed)


def _run_inner(cfg: dict, seed: int) -> SeedResult:
    tok = word_tokenizer()
    w = world(cfg["n_old"], cfg["n_new"], seed, cfg["n_read"])
    base = _base_model(cfg, tok, w, seed)
    new = w["new"]
    rows: dict[str, dict] = {}
    rows["base"] = {"acc_heldout": _accuracy(base, tok, new, (2,)), "acc_train_template": _accuracy(base, tok, new, (0, 1))}
    rows["teacher_open_book"] = {"acc_heldout": _accuracy(base, tok, new, (2,), open_book=True),
                                 "acc_train_template": _accuracy(base, tok, new, (0, 1), open_book=True)}
    pairs = [(ent["doc"], qa(ent, attr, tpl)[0]) for ent in new for attr in VALUES for tpl in (0, 1)]
    budget, curves = {}, {}
    for arm in (METHOD, *BASELINES):
        model = copy.deepcopy(base)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"])
        trainer = SSDTrainer(model, tok, _arm_config(arm, cfg), optimizer=opt, teacher=copy.deepcopy(base).eval(),
                             generator=torch.Generator().manual_seed(seed + 1))
        order = np.random.default_rng(seed + 2)
        losses = []
        t0 = time.perf_counter()
        for _ in range(cfg["steps"]):
            idx = order.choice(len(pairs), cfg["batch"], replace=False)
            out = trainer.step([pairs[i][0] for i in idx], [pairs[i][1] for i in idx])
            losses.append(out["loss"])
        train_s = time.perf_counter() - t0
        model.eval()
        rows[arm] = {
            "acc_heldout": _accuracy(model, tok, new, (2,)),
            "acc_train_template": _accuracy(model, tok, new, (0, 1)),
            "supervised_tokens": float(trainer.totals["supervised_tokens"]),
            "response_tokens": float(trainer.totals["response_tokens"]),
            "teacher_forward_tokens": float(trainer.totals["teacher_forward_tokens"]),
            "teacher_calls": float(trainer.totals["teacher_calls"]),
            "train_s": train_s,
        }
        budget[arm] = {"steps": cfg["steps"], "params": count_parameters(model), "lr_grid": [cfg["lr"]],
                       "batch": cfg["batch"]}
        curves[f"loss_{arm}"] = {arm: losses}
    dist = (METHOD, *BASELINES)
    metrics = {
        "acc_heldout": {a: rows[a]["acc_heldout"] for a in (*dist, *REFERENCES)},
        "acc_train_template": {a: rows[a]["acc_train_template"] for a in (*dist, *REFERENCES)},
        "supervised_tokens": {a: rows[a]["supervised_tokens"] for a in dist},
        "supervised_fraction": {METHOD: rows[METHOD]["supervised_tokens"] / max(1.0, rows["on_policy"]["supervised_tokens"])},
        "teacher_forward_tokens": {a: rows[a]["teacher_forward_tokens"] for a in dist},
        "train_s": {a: rows[a]["train_s"] for a in dist},
    }
    info = {"per_arm": rows, "budget": budget, "n_new_entities": len(new), "train_pairs": len(pairs)}
    return SeedResult(metrics=metrics, curves=curves, info=info)


def plot(result: dict, folder: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    m = result["metrics"]
    for arm in (METHOD, *BASELINES):
        ax[0].scatter(np.mean(m["supervised_tokens"][arm]), np.mean(m["acc_heldout"][arm]), label=arm)
        ax[1].scatter(np.mean(m["supervised_tokens"][arm]), np.mean(m["acc_train_template"][arm]), label=arm)
    for a, name in ((ax[0], "held-out template"), (ax[1], "training templates")):
        a.set_xlabel("supervised tokens (total)")
        a.set_ylabel(f"closed-book EM, new facts, {name}")
        a.legend(fontsize=7)
    return [save_figure(fig, folder, "ssd_pareto", dpi=100)]


# threads: intra-op threads of the run (set by the runner): tiny models, shared CPU
_COMMON = {"threads": 1, "hidden": 64, "layers": 2, "sft_lr": 3e-3, "lr": 1e-3, "threshold": 0.3}

CLAIM = Claim(
    slug="ssd",
    claim=(
        "Self-distillation where a context-conditioned teacher intervenes only at divergent positions of the "
        "student's rollout matches on-policy self-distillation accuracy on new facts while supervising far fewer "
        "tokens, and beats off-policy distillation on held-out questions."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        Better("acc_train_template", arm="teacher_open_book", baseline="base", margin=0.3, min_seeds=3,
               label="teacher_knows_more"),
        Better("acc_train_template", arm="on_policy", baseline="base", margin=0.0, min_seeds=3,
               label="on_policy_learns"),
    ),
    criteria=(
        Better("acc_train_template", baseline="on_policy", margin=-0.05, min_seeds=3, label="matches_on_policy"),
        Better("acc_heldout", baseline="on_policy", margin=-0.05, min_seeds=3, label="matches_on_policy_heldout"),
        AtMost("supervised_fraction", threshold=0.6, min_seeds=3, label="fewer_supervised_tokens"),
        Better("acc_heldout", baseline="off_policy", margin=0.0, min_seeds=3, label="beats_off_policy"),
    ),
    headlines=(
        Headline(
            "SSD matches on-policy distillation accuracy while supervising 45% fewer tokens on average",
            criteria=("matches_on_policy", "matches_on_policy_heldout", "fewer_supervised_tokens"),
        ),
        Headline("SSD consistently outperforms off-policy distillation on the held-out test set",
                 criteria=("beats_off_policy",)),
        Headline(
            "Results hold on three closed-book QA benchmarks (fact recall, knowledge updates, skill acquisition)",
            untested="only fact recall (task A) is run; knowledge updates and skill acquisition are not built",
        ),
    ),
    items={
        "acc_heldout": {"smoke": 16, "quick": 96, "full": 160},
        "acc_train_template": {"smoke": 32, "quick": 192, "full": 320},
    },
    run=run,
    configs={
        "smoke": {**_COMMON, "hidden": 32, "n_old": 6, "n_new": 4, "n_read": 8, "sft_steps": 20, "batch": 8, "steps": 2},
        "quick": {**_COMMON, "n_old": 40, "n_new": 24, "n_read": 400, "sft_steps": 1200, "batch": 16, "steps": 30},
        "full": {**_COMMON, "n_old": 60, "n_new": 40, "n_read": 600, "sft_steps": 2000, "batch": 16, "steps": 80},
    },
    seeds={"smoke": (0,), "quick": (0, 1, 2), "full": (0, 1, 2)},
    implemented=(
        "neurips26.distill.ssd: speculative_mixed_rollout (per-token student/teacher test with TV divergence, "
        "threshold 0.3, teacher token sampled at interventions), ssd_loss (GKD generalised JSD beta 0.5 through "
        "TRL SDFT's compute_divergence, token mean over the supervised positions), SSDTrainer. Arms from the "
        "same base checkpoint with the same steps, batch, questions, AdamW lr and frozen teacher (the base model "
        "reading the document): ssd (supervise intervened positions), on_policy (threshold inf, every response "
        "token supervised = SDFT's full-logit objective), off_policy (always intervene: the teacher writes the "
        "answer, every token supervised). References: base (no distillation), teacher_open_book."
    ),
    differences=(
        "Only the abstract is public; the mechanics are the spec's reconstruction. Task A (fact recall) only; "
        "knowledge updates and skill acquisition are not built. World: 2-syllable names, 4 attributes, answers "
        "are full sentences ('ka mo lives in city3 .'), so most answer tokens are copyable from the question and "
        "only the attribute value diverges. Model: Llama 2 layers x 64 (spec 3 x 128), word tokenizer; base SFT "
        "sees all three templates for old entities (so the phrasing itself is known) and new entities only via "
        "templates 1-2 during distillation. Base SFT also reads documents of 'reading' entities (random names "
        "and attributes, open book only; quick 400, full 600): without them the base model memorised the old "
        "entities and never learned to read (open-book accuracy on new entities ~12%). Teacher mode 'frozen' (spec default 'self') for every arm. 3 seeds; "
        "one threshold (0.3). Rollouts recompute prefixes (no KV cache), so teacher_forward_tokens counts "
        "recomputed prefix tokens."
    ),
    data=(
        "Generated per seed by neurips26.claims.ssd.world: quick 40 old / 24 new / 400 reading entities, full "
        "60 old / 40 new / 600 reading entities; 12 syllables give 132 two-syllable names."
    ),
    plot=plot,
    glossary={
        "acc_heldout": "closed-book greedy exact match of the full answer sentence for the new entities on the "
        "held-out question template 3 (4 attributes per entity)",
        "acc_train_template": "the same on templates 1-2 (the distillation questions)",
        "supervised_tokens": "total response positions that entered the loss over all distillation steps",
        "supervised_fraction": "ssd's supervised tokens / on_policy's supervised tokens (same steps)",
        "teacher_forward_tokens": "tokens processed by teacher forward passes (rollout verification and re-scoring)",
        "train_s": "wall seconds of the arm's distillation loop",
    },
)

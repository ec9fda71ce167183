"""Claim check for SSD (speculative self-distillation for knowledge injection; abstract only).

The spec's three closed-book tasks, generated per seed. A biography world: entities named by two
syllables, four attributes each (city, employer, pet, birth year) stated in a shuffled document; and
named operators ``x OP y = x + k * y`` defined in one sentence. A tiny Llama is first fine-tuned (base
SFT) on *old* entities and operators to answer with the source in context (open book) and without it
(closed book, from memory), plus open-book reading practice. Knowledge injection then targets
(A) fact recall: new entities; (B) knowledge update: old entities whose document now states changed
values; (C) skill acquisition: new operators, tested on operand pairs never distilled on. The same
network reading the source is the teacher, the closed-book model is the student. Per task, SSD,
on-policy and off-policy self-distillation start from the same base checkpoint and run the same number
of optimiser steps on the same questions; accuracy is closed-book exact match on held-out questions.
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
    words |= {a + b for a in SYLLABLES for b in SYLLABLES if a != b} | set(NUMBERS)  # operator task
    for text in (OP_DEF, OP_ANSWER, *OP_QUESTIONS):
        words |= {w for w in text.split() if not w.startswith("{")}
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


# ---- task C, skill acquisition: an operator defined in the context, x OP y = x + k * y (the spec's a # b = a + 2b) ----
OPERANDS = tuple(range(5))
K_VALUES = (1, 2, 3, 4)
NUMBERS = tuple(str(i) for i in range(max(OPERANDS) * (1 + max(K_VALUES)) + 1))
OP_DEF = "x {op} y = x + {k} * y ."
OP_QUESTIONS = ("what is {a} {op} {b} ?", "compute {a} {op} {b} ?", "evaluate {a} {op} {b} ?")
OP_ANSWER = "{a} {op} {b} = {r} ."
TASKS = ("fact", "update", "skill")


def op_answer(k: int, a: int, b: int) -> int:
    """The operator's value ``a + k * b``."""
    return a + k * b


def operators(n_old: int, n_new: int, seed: int, n_read: int = 0, n_train_pairs: int = 15) -> dict:
    """Named operators ``x OP y = x + k y`` (operands in ``OPERANDS``, k in ``K_VALUES``); names are one-word syllable pairs.

    Old operators are learned in base SFT (open and closed book); new ones are the distillation target,
    each with ``n_train_pairs`` of the 25 operand pairs for distillation and the rest held out. Reading
    operators reuse random names with random k and appear only with their definition in context.
    """
    n_pairs = len(OPERANDS) ** 2
    if not 1 <= n_train_pairs < n_pairs:
        raise ValueError(f"n_train_pairs must be in [1, {n_pairs - 1}], got {n_train_pairs}")
    rng = random.Random(seed + 7919)
    names = [a + b for a in SYLLABLES for b in SYLLABLES if a != b]
    rng.shuffle(names)
    pairs = [(a, b) for a in OPERANDS for b in OPERANDS]

    def make(name: str) -> dict:
        k = rng.choice(K_VALUES)
        order = pairs[:]
        rng.shuffle(order)
        return {"name": name, "k": k, "doc": OP_DEF.format(op=name, k=k), "train": order[:n_train_pairs],
                "heldout": order[n_train_pairs:]}

    ops = [make(name) for name in names[: n_old + n_new]]
    read = [make(rng.choice(names)) for _ in range(n_read)]
    return {"old": ops[:n_old], "new": ops[n_old:], "read": read}


def op_qa(op: dict, a: int, b: int, template: int) -> tuple[str, str]:
    q = OP_QUESTIONS[template].format(a=a, op=op["name"], b=b)
    return q, OP_ANSWER.format(a=a, op=op["name"], b=b, r=op_answer(op["k"], a, b))


# ---- task B, knowledge update: old entities whose document now states changed values ----
def updates(old: list[dict], n_update: int, seed: int, n_changed: int = 2) -> list[dict]:
    """Copies of the first ``n_update`` old entities with ``n_changed`` attributes set to a different value.

    Each copy keeps ``changed`` (the attributes whose value moved) and a re-shuffled document stating the
    new values; the base model has the old values in its weights.
    """
    if not 1 <= n_update <= len(old):
        raise ValueError(f"n_update must be in [1, {len(old)}] (the old entities), got {n_update}")
    if not 1 <= n_changed <= len(VALUES):
        raise ValueError(f"n_changed must be in [1, {len(VALUES)}], got {n_changed}")
    rng = random.Random(seed + 104729)
    out = []
    for ent in old[:n_update]:
        attrs = dict(ent["attrs"])
        changed = sorted(rng.sample(sorted(VALUES), n_changed))
        for key in changed:
            attrs[key] = rng.choice([v for v in VALUES[key] if v != attrs[key]])
        sents = [SENTENCE[k].format(n=ent["name"], v=v) for k, v in attrs.items()]
        rng.shuffle(sents)
        out.append({"name": ent["name"], "attrs": attrs, "doc": " ".join(sents), "changed": changed})
    return out


def task_items(task: str, w: dict, ops: dict, upd: list[dict]) -> dict[str, list[tuple[str, str, str]]]:
    """(source, question, answer) triples per split: ``train`` (distillation questions) and ``heldout``."""
    if task == "fact":
        def items(tpls):
            return [(e["doc"], *qa(e, a, t)) for e in w["new"] for a in VALUES for t in tpls]
        return {"train": items((0, 1)), "heldout": items((2,))}
    if task == "update":
        def items(tpls):
            return [(e["doc"], *qa(e, a, t)) for e in upd for a in e["changed"] for t in tpls]
        return {"train": items((0, 1)), "heldout": items((2,))}
    if task == "skill":
        train = [(op["doc"], *op_qa(op, a, b, t)) for op in ops["new"] for a, b in op["train"] for t in (0, 1)]
        held = [(op["doc"], *op_qa(op, a, b, 2)) for op in ops["new"] for a, b in op["heldout"]]
        return {"train": train, "heldout": held}
    raise ValueError(f"task must be one of {TASKS}, got {task!r}")


def _example(tok, prompt: str, answer: str) -> dict:
    p_ids = tok(prompt)["input_ids"]
    a_ids = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    return {"input_ids": p_ids + a_ids, "loss_mask": [0] * len(p_ids) + [1] * len(a_ids)}


def _sft_examples(tok, old: list[dict], read: list[dict] = (), ops: dict | None = None,
                  op_read_samples: int = 10, seed: int = 0) -> list[dict]:
    """Closed- and open-book QA on old entities, open-book QA on reading entities (answer tokens only).

    With ``ops``: closed- and open-book questions on every operand pair of the old operators and
    ``op_read_samples`` random open-book questions per reading operator.
    """
    out = []
    for ent in [*old, *read]:
        closed = any(ent is o for o in old)
        for attr in VALUES:
            for tpl in range(3):
                q, a = qa(ent, attr, tpl)
                for prompt in ((q, f"{ent['doc']} {q}") if closed else (f"{ent['doc']} {q}",)):
                    out.append(_example(tok, prompt, a))
    if ops is not None:
        rng = random.Random(seed + 31)
        for op in ops["old"]:
            for a, b in op["train"] + op["heldout"]:
                q, ans = op_qa(op, a, b, rng.randrange(3))
                out.append(_example(tok, q, ans))
                out.append(_example(tok, f"{op['doc']} {q}", ans))
        for op in ops["read"]:
            for _ in range(op_read_samples):
                q, ans = op_qa(op, rng.choice(OPERANDS), rng.choice(OPERANDS), rng.randrange(3))
                out.append(_example(tok, f"{op['doc']} {q}", ans))
    return out


_BASE_KEYS = ("n_old", "n_new", "n_read", "hidden", "layers", "sft_steps", "sft_lr", "batch", "n_old_ops",
              "n_new_ops", "n_read_ops", "op_read_samples", "n_train_pairs")


def _base_model(cfg: dict, tok, w: dict, ops: dict, seed: int):
    key = {k: cfg[k] for k in _BASE_KEYS}

    def build(folder: Path) -> None:
        model = build_tiny_lm("llama", vocab_size=len(tok), seed=seed, hidden_size=cfg["hidden"],
                              num_hidden_layers=cfg["layers"], num_attention_heads=4, num_key_value_heads=2,
                              intermediate_size=2 * cfg["hidden"], max_position_embeddings=128)
        examples = _sft_examples(tok, w["old"], w["read"], ops, cfg["op_read_samples"], seed)
        train_lm(model, examples, steps=cfg["sft_steps"], batch_size=cfg["batch"], lr=cfg["sft_lr"], warmup=20,
                 seed=seed)
        model.save_pretrained(folder)

    folder = cached_dir("ssd-base", {**key, "seed": seed, "v": 2}, build)
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(folder).eval()


@torch.no_grad()
def _accuracy(model, tok, items: list[tuple[str, str, str]], open_book: bool = False) -> float:
    """Greedy exact match of the answer; closed book (question only) unless ``open_book``."""
    prompts = [f"{src} {q}" if open_book else q for src, q, _ in items]
    tok.padding_side = "left"
    enc = tok(prompts, return_tensors="pt", padding=True)
    out = model.generate(**enc, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id,
                         eos_token_id=tok.eos_token_id)
    texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return float(np.mean([t.strip() == a for t, (_, _, a) in zip(texts, items)]))


def _arm_config(arm: str, cfg: dict) -> SSDConfig:
    common = {"max_new_tokens": 8, "teacher_mode": "frozen", "loss": "jsd", "beta": 0.5}
    if arm == METHOD:
        return SSDConfig(threshold=cfg["threshold"], supervise="intervened", **common)
    if arm == "on_policy":
        return SSDConfig(threshold=float("inf"), supervise="all", **common)
    return SSDConfig(threshold=-1.0, always_intervene=True, supervise="all", **common)


def _distill(arm: str, base, tok, cfg: dict, pairs: list[tuple[str, str]], seed: int):
    """One arm from the base checkpoint: ``cfg['steps']`` steps of ``cfg['batch']`` questions (same order per arm)."""
    model = copy.deepcopy(base)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"])
    trainer = SSDTrainer(model, tok, _arm_config(arm, cfg), optimizer=opt, teacher=copy.deepcopy(base).eval(),
                         generator=torch.Generator().manual_seed(seed + 1))
    order = np.random.default_rng(seed + 2)
    losses = []
    t0 = time.perf_counter()
    for _ in range(cfg["steps"]):
        idx = order.choice(len(pairs), min(cfg["batch"], len(pairs)), replace=False)
        out = trainer.step([pairs[i][0] for i in idx], [pairs[i][1] for i in idx])
        losses.append(out["loss"])
    model.eval()
    return model, trainer.totals, losses, time.perf_counter() - t0


def run(config: dict, seed: int) -> SeedResult:
    return _run_inner(config, seed)


def _run_inner(cfg: dict, seed: int) -> SeedResult:
    tok = word_tokenizer()
    w = world(cfg["n_old"], cfg["n_new"], seed, cfg["n_read"])
    ops = operators(cfg["n_old_ops"], cfg["n_new_ops"], seed, cfg["n_read_ops"], cfg["n_train_pairs"])
    upd = updates(w["old"], cfg["n_update"], seed)
    base = _base_model(cfg, tok, w, ops, seed)
    dist = (METHOD, *BASELINES)
    metrics: dict[str, dict[str, float]] = {}
    curves, per_task, budget = {}, {}, {}
    for task in TASKS:
        items = task_items(task, w, ops, upd)
        rows = {
            "base": {s: _accuracy(base, tok, items[s]) for s in ("train", "heldout")},
            "teacher_open_book": {s: _accuracy(base, tok, items[s], open_book=True) for s in ("train", "heldout")},
        }
        pairs = [(src, q) for src, q, _ in items["train"]]
        for arm in dist:
            model, totals, losses, train_s = _distill(arm, base, tok, cfg, pairs, seed)
            rows[arm] = {"train": _accuracy(model, tok, items["train"]), "heldout": _accuracy(model, tok, items["heldout"]),
                         **{k: float(v) for k, v in totals.items()}, "train_s": train_s}
            budget[f"{task}/{arm}"] = {"steps": cfg["steps"], "params": count_parameters(model), "lr_grid": [cfg["lr"]],
                                       "batch": cfg["batch"]}
            curves[f"loss_{task}_{arm}"] = {arm: losses}
        metrics[f"acc_heldout_{task}"] = {a: rows[a]["heldout"] for a in (*dist, *REFERENCES)}
        metrics[f"acc_train_template_{task}"] = {a: rows[a]["train"] for a in (*dist, *REFERENCES)}
        metrics[f"supervised_tokens_{task}"] = {a: rows[a]["supervised_tokens"] for a in dist}
        metrics[f"supervised_fraction_{task}"] = {
            METHOD: rows[METHOD]["supervised_tokens"] / max(1.0, rows["on_policy"]["supervised_tokens"])}
        per_task[task] = {"per_arm": rows, "train_items": len(items["train"]), "heldout_items": len(items["heldout"])}
    metrics["train_s"] = {a: sum(per_task[t]["per_arm"][a]["train_s"] for t in TASKS) for a in dist}
    metrics["supervised_fraction"] = {METHOD: float(np.mean([metrics[f"supervised_fraction_{t}"][METHOD] for t in TASKS]))}
    return SeedResult(metrics=metrics, curves=curves, info={"tasks": per_task, "budget": budget})


def plot(result: dict, folder: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(1, len(TASKS), figsize=(4 * len(TASKS), 4))
    m = result["metrics"]
    for a, task in zip(ax, TASKS):
        for arm in (METHOD, *BASELINES):
            a.scatter(np.mean(m[f"supervised_tokens_{task}"][arm]), np.mean(m[f"acc_heldout_{task}"][arm]), label=arm)
        a.set_xlabel("supervised tokens (total)")
        a.set_ylabel(f"closed-book EM, held-out ({task})")
        a.legend(fontsize=7)
    return [save_figure(fig, folder, "ssd_pareto", dpi=100)]


def _premises() -> tuple:
    out = []
    for t in TASKS:
        out += [
            Better(f"acc_train_template_{t}", arm="teacher_open_book", baseline="base", margin=0.3, min_seeds=3,
                   label=f"teacher_knows_more_{t}"),
            Better(f"acc_train_template_{t}", arm="on_policy", baseline="base", margin=0.1, min_seeds=3,
                   label=f"on_policy_learns_{t}"),
            AtMost(f"acc_heldout_{t}", arm="on_policy", threshold=0.95, min_seeds=3, label=f"not_at_ceiling_{t}"),
        ]
    return tuple(out)


def _criteria() -> tuple:
    out = []
    for t in TASKS:
        out += [
            Better(f"acc_heldout_{t}", baseline="on_policy", margin=-0.05, min_seeds=3,
                   label=f"matches_on_policy_heldout_{t}"),
            Better(f"acc_train_template_{t}", baseline="on_policy", margin=-0.05, min_seeds=3,
                   label=f"matches_on_policy_{t}"),
            Better(f"acc_heldout_{t}", baseline="off_policy", margin=0.0, min_seeds=3, label=f"beats_off_policy_{t}"),
        ]
    out.append(AtMost("supervised_fraction", threshold=0.6, min_seeds=3, label="fewer_supervised_tokens"))
    return tuple(out)


def _items(profile_sizes: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Evaluation items per accuracy metric and profile, from the profile configs."""
    out = {}
    for name, c in profile_sizes.items():
        n = {"fact": (c["n_new"] * 4, c["n_new"] * 8), "update": (c["n_update"] * 2, c["n_update"] * 4),
             "skill": (c["n_new_ops"] * (25 - c["n_train_pairs"]), c["n_new_ops"] * c["n_train_pairs"] * 2)}
        for t, (held, train) in n.items():
            out.setdefault(f"acc_heldout_{t}", {})[name] = held
            out.setdefault(f"acc_train_template_{t}", {})[name] = train
    return out


# threads: intra-op threads of the run (set by the runner): tiny models, shared CPU
_COMMON = {"threads": 1, "hidden": 64, "layers": 2, "sft_lr": 3e-3, "lr": 1e-3, "threshold": 0.3, "n_old_ops": 12,
           "op_read_samples": 10, "n_train_pairs": 15}
_CONFIGS = {
    "smoke": {**_COMMON, "hidden": 32, "n_old": 6, "n_new": 4, "n_read": 8, "n_update": 4, "n_new_ops": 2,
              "n_read_ops": 8, "sft_steps": 20, "batch": 8, "steps": 2},
    "quick": {**_COMMON, "n_old": 40, "n_new": 24, "n_read": 400, "n_update": 24, "n_new_ops": 6, "n_read_ops": 400,
              "sft_steps": 800, "batch": 16, "steps": 20},
    "full": {**_COMMON, "n_old": 60, "n_new": 40, "n_read": 600, "n_update": 40, "n_new_ops": 10, "n_read_ops": 600,
             "sft_steps": 2000, "batch": 16, "steps": 80},
}
_TASK_GLOSSARY = {
    "acc_heldout_{t}": "closed-book greedy exact match of the full answer on the held-out questions of task {t} "
    "(fact/update: question template 3; skill: the operand pairs never used in distillation, template 3)",
    "acc_train_template_{t}": "the same on the distillation questions of task {t} (templates 1-2)",
    "supervised_tokens_{t}": "total response positions that entered the loss over all distillation steps of task {t}",
    "supervised_fraction_{t}": "ssd's supervised tokens / on_policy's supervised tokens on task {t} (same steps)",
}

CLAIM = Claim(
    slug="ssd",
    claim=(
        "Self-distillation where a context-conditioned teacher intervenes only at divergent positions of the "
        "student's rollout matches on-policy self-distillation accuracy on fact recall, knowledge updates and skill "
        "acquisition while supervising far fewer tokens, and beats off-policy distillation on held-out questions."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=_premises(),
    criteria=_criteria(),
    headlines=(
        Headline(
            "On three closed-book QA benchmarks (fact recall, knowledge updates, skill acquisition) SSD matches "
            "on-policy distillation with 45% fewer supervised tokens on average",
            criteria=(*(f"matches_on_policy_heldout_{t}" for t in TASKS), *(f"matches_on_policy_{t}" for t in TASKS),
                      "fewer_supervised_tokens"),
            primary=True,
        ),
        Headline("SSD consistently outperforms off-policy distillation on the held-out test set",
                 criteria=tuple(f"beats_off_policy_{t}" for t in TASKS)),
        Headline("SSD establishes a new accuracy-efficiency Pareto frontier for self-distillation",
                 untested="a single threshold (0.3) is run, so no frontier is traced; the two headlines above are "
                 "its two ends (on-policy accuracy at fewer tokens, above off-policy)"),
    ),
    items=_items(_CONFIGS),
    run=run,
    configs=_CONFIGS,
    seeds={"smoke": (0,), "quick": (0,), "full": (0, 1, 2)},  # quick: one seed fits 60 s (3 seeds x 3 tasks: ~90 s)
    implemented=(
        "neurips26.distill.ssd: speculative_mixed_rollout (per-token student/teacher test with TV divergence, "
        "threshold 0.3, teacher token sampled at interventions), ssd_loss (GKD generalised JSD beta 0.5 through "
        "TRL SDFT's compute_divergence, token mean over the supervised positions), SSDTrainer. One base model per "
        "seed serves the spec's three tasks: A fact recall (new entities), B knowledge update (old entities whose "
        "document now states 2 changed values; the base model holds the old ones), C skill acquisition (a new "
        "operator 'x OP y = x + k * y' defined in the context, held-out operand pairs). Per task, arms from the "
        "same base checkpoint with the same steps, batch, questions, AdamW lr and frozen teacher (the base model "
        "reading the source): ssd (supervise intervened positions), on_policy (threshold inf, every response "
        "token supervised = SDFT's full-logit objective), off_policy (always intervene: the teacher writes the "
        "answer, every token supervised). References: base (no distillation), teacher_open_book."
    ),
    differences=(
        "Only the abstract is public; the mechanics are the spec's reconstruction, and the paper's three benchmarks "
        "are unnamed, so the spec's generated stand-ins are used for all three (no offline data set fits better: "
        "they need documents absent from pretraining, which generated worlds guarantee). Fact recall and knowledge "
        "update: 2-syllable names, 4 attributes, answers are full sentences ('ka mo lives in city3 .'), so most "
        "answer tokens are copyable from the question and only the attribute value diverges. Skill acquisition: "
        "operands 0-4, k in 1-4 (results 0-20), 15 of 25 operand pairs for distillation, 10 held out; 12 old "
        "operators and 600 reading operators (random k, definition in context) in base SFT, which therefore learns "
        "to apply a definition it reads (the spec's 'a # b = a + 2b'; a mod-10 version with operands 0-9 was "
        "tried first and the 2-layer model did not learn its table in base SFT: open-book 0.45 on old operators). "
        "Model: Llama 2 layers x 64 (spec 3 x 128), word tokenizer; base SFT sees all three templates for old "
        "entities (so the phrasing itself is known) and new entities only via templates 1-2 during distillation. "
        "Base SFT also reads documents of 'reading' entities (random names and attributes, open book only; quick "
        "400, full 600): without them the base model memorised the old entities and never learned to read "
        "(open-book accuracy on new entities ~12%). Teacher mode 'frozen' (spec default 'self') for every arm. "
        "3 seeds, each with its own base model and data; one threshold (0.3; spec: 0.1/0.3/0.5 in full). Rollouts "
        "recompute prefixes (no KV cache), so teacher_forward_tokens counts recomputed prefix tokens. "
        "Quick profile: one seed (three seeds of the three tasks take ~90 s), so it checks mechanics, not the verdict."
    ),
    data=(
        "Generated per seed by neurips26.claims.ssd (world, updates, operators): quick 40 old / 24 new / 400 reading "
        "entities, 24 updated, 6 new operators; full 60 old / 40 new / 600 reading entities, 40 updated, 12 old / 10 "
        "new / 600 reading operators; 12 syllables give 132 names."
    ),
    plot=plot,
    glossary={
        **{k.format(t=t): v.format(t=t) for k, v in _TASK_GLOSSARY.items() for t in TASKS},
        "supervised_fraction": "ssd's supervised tokens / on_policy's, averaged over the three tasks (paper: 0.55)",
        "train_s": "wall seconds of the arm's distillation loops, summed over the three tasks (per task: info)",
    },
)

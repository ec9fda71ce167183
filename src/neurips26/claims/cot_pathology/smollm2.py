"""SmolLM2-135M's own chain-of-thought traces for the CoT-pathology claim (full profile, reported in info)."""

from __future__ import annotations

import random
import re
import time
from typing import Any

import numpy as np
import torch

from neurips26.agents.cot_pathology import (
    LatentStateModel,
    Pathology,
    StepSegmenter,
    SurgeryTemplates,
    detect,
    evaluate_detectors,
    inject,
)
from neurips26.common.cache import cached_object

#: Which pathologies belong to which phase of a chain of thought.
PHASES = {
    "early": ("premature_commitment", "unstable_branching"),
    "progression": ("looping", "drift"),
    "termination": ("overrun", "reversal"),
}


# ----------------------------------------------------------------------------------- SmolLM2
#: Declared rate at which SmolLM2's first answer must be right for its traces to count as a testbed.
SMOLLM_ANSWER_RATE = 0.2

_SMOL_FEWSHOT = (
    "Question: 2 + 5 - 1 =\n2 + 5 = 7\n7 - 1 = 6\nAnswer: 6\n\n"
    "Question: 8 - 3 + 4 =\n8 - 3 = 5\n5 + 4 = 9\nAnswer: 9\n\n"
    "Question: {q}\n"
)
_ANSWER_RE = re.compile(r"answer\s*(?:is|:)?\s*:?\s*\$?(-?\d+)", re.IGNORECASE)


def _smollm_task(cfg: dict, seed: int):
    from neurips26.common.tasks import ReasoningGymTask

    return ReasoningGymTask(
        "chain_sum",
        n_train=0,
        n_test=cfg["smollm_problems"],
        seed=seed,
        min_terms=2,
        max_terms=3,
        min_digits=1,
        max_digits=1,
    )


def _smollm_generate(cfg: dict, seed: int) -> dict:
    """SmolLM2's own chains of thought (few-shot, T = 0.7), cut at the first blank line (stop sequence)."""
    from neurips26.common.models import load_pretrained

    model, tok = load_pretrained("smollm2-135m")
    task = _smollm_task(cfg, seed)
    tok.padding_side = "left"
    prompts, cots, cut = [], [], 0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for s in range(0, len(task.test), 8):
            chunk = task.test[s : s + 8]
            texts = [_SMOL_FEWSHOT.format(q=p.prompt.split(": ", 1)[-1]) for p in chunk]
            enc = tok(texts, return_tensors="pt", padding=True)
            with torch.no_grad():
                out = model.generate(
                    **enc,
                    max_new_tokens=cfg["smollm_max_new"],
                    do_sample=True,
                    temperature=0.7,
                    top_k=0,
                    top_p=1.0,
                    pad_token_id=tok.pad_token_id,
                    stop_strings=["\n\n"],
                    tokenizer=tok,
                )
            width = enc.input_ids.shape[1]
            for r, p in enumerate(chunk):
                # re-encoding context: the question line only (3x cheaper than the few-shot prompt)
                prompts.append(
                    tok.encode("Question: " + p.prompt.split(": ", 1)[-1] + "\n", add_special_tokens=False)
                )
                cot = []
                for t in out[r, width:].tolist():
                    if t in (tok.eos_token_id, tok.pad_token_id):
                        break
                    if "\n\n" in tok.decode([*cot, t]):
                        cut += 1
                        break
                    cot.append(t)
                cots.append(cot)
    return {"prompts": prompts, "cots": cots, "cut_at_blank_line": cut}


def _smollm(cfg: dict, seed: int) -> dict[str, Any]:
    from neurips26.common.models import load_pretrained

    t0 = time.perf_counter()
    key = {"n": cfg["smollm_problems"], "max_new": cfg["smollm_max_new"], "seed": seed, "T": 0.7, "v": 3}
    data = cached_object("cot-pathology-smollm", key, lambda: _smollm_generate(cfg, seed))
    model, tok = load_pretrained("smollm2-135m")
    task = _smollm_task(cfg, seed)
    delims = [i for t, i in tok.get_vocab().items() if "\u010a" in t]
    seg = StepSegmenter(delims)

    def extract(step) -> str | None:
        m = _ANSWER_RE.search(tok.decode(step))
        return m.group(1) if m else None

    def restate(prompt, step) -> bool:
        ps = set(prompt)
        content = [t for t in step if t not in seg.delimiter_ids]
        return bool(content) and sum(t in ps for t in content) / len(content) >= 0.8

    steps = [[c[a:b] for a, b in seg.split(c)] for c in data["cots"]]
    answers = [[extract(st) for st in ss] for ss in steps]
    first = [next((a for a in ans if a is not None), None) for ans in answers]
    rewards = [task.reward(p, f or "") for p, f in zip(task.test, first)]
    # well-formed traces take the surgery: derivation before one final answer step, no repeated step
    clean = [
        i
        for i, (ss, ans) in enumerate(zip(steps, answers))
        if ans
        and ans[-1] is not None
        and sum(a is not None for a in ans) == 1
        and len(ss) >= 2
        and len({tuple(x) for x in ss}) == len(ss)
    ]
    info: dict[str, Any] = {
        "n_problems": len(rewards),
        "answer_rate": float(np.mean(rewards)),
        "n_well_formed": len(clean),
        "cut_at_blank_line": data["cut_at_blank_line"],
        # the claim's premise for real traces, reported here because SmolLM2 runs on one seed of one profile
        "premise_answer_rate": {
            "declared": SMOLLM_ANSWER_RATE,
            "holds": bool(np.mean(rewards) >= SMOLLM_ANSWER_RATE),
        },
        "examples": [tok.decode(c) for c in data["cots"][:4]],
    }
    n_rows = sum(1 for i in clean for a in answers[i] if a is None)  # non-answer steps: what k-means fits
    k = min(cfg["smollm_states"], max(1, n_rows // 3))
    if len(clean) < 4 or n_rows < 2:
        info["skipped"] = (
            f"only {len(clean)} well-formed traces with {n_rows} derivation steps: too few to fit states"
        )
        return info
    ref = LatentStateModel(n_states=k, seed=seed)
    ref.fit(
        model, [data["prompts"][i] for i in clean], [data["cots"][i] for i in clean], seg, extract, restate
    )
    rng = random.Random(80_000 + seed)
    nl = tok.encode("\n", add_special_tokens=False)

    def line(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False) + nl

    templates = SurgeryTemplates(
        answer_step=lambda v: line(f"Answer: {v}"),
        wrong_value=lambda v, r: str(int(v) + r.choice([-3, -2, -1, 1, 2, 3])),
        branch_step=lambda r: line(
            r.choice(
                ["Alternatively, maybe we should multiply first.", "Or perhaps start from the last number."]
            )
        ),
        offtask_step=lambda r: line(
            r.choice(
                [
                    "The weather is nice and the sky is blue today.",
                    "Bananas are yellow and grow in warm places.",
                    "A triangle has three sides and three corners.",
                ]
            )
        ),
        check_step=lambda r: line("Let me double-check this once more."),
    )
    clean_t, injected = [], {p: [] for p in Pathology}
    with torch.no_grad():
        for i in clean:
            cot, prompt = data["cots"][i], data["prompts"][i]
            clean_t.append(ref.encode(model, prompt, cot, seg, extract))
            for p in Pathology:
                new, onset = inject(cot, seg.split(cot), p, rng, templates, extract)
                injected[p].append((ref.encode(model, prompt, new, seg, extract), onset))
        all_t = [
            ref.encode(model, data["prompts"][i], c, seg, extract) for i, c in enumerate(data["cots"]) if c
        ]
    ev = evaluate_detectors(clean_t, injected, ref, True)
    info["auroc_by_phase"] = {
        ph: float(np.mean([ev["per_pathology"][n]["auroc"] for n in ns])) for ph, ns in PHASES.items()
    }
    natural = {p.value: float(np.mean([detect(t, p, ref).fired for t in all_t])) for p in Pathology}
    info.update(detection=ev, natural_fire_rate=natural, n_states=k, seconds=time.perf_counter() - t0)
    return info

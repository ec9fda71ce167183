"""AVSD claim check: the arithmetic task and the smoke profile's structure and budgets. Generic smoke checks
(finiteness, determinism, glossary, plot): test_conformance.py."""

import re

import pytest

from neurips26.claims.avsd import (
    BASELINES,
    CLAIM,
    METHOD,
    TEMPLATE,
    VIEWS,
    _sft_examples,
    distill_prompts,
    final_answer,
    problems,
    sft_stop,
    step_accuracy,
    tokenizer,
)
from neurips26.distill.avsd import build_views


def test_problems_checker_and_views():
    splits = problems(300, 40, seed=3)
    train, val, test = splits["train"], splits["val"], splits["test"]
    prompts = [{p["prompt"] for p in part} for part in (train, val, test)]
    assert not prompts[0] & prompts[1] and not prompts[0] & prompts[2] and not prompts[1] & prompts[2]
    assert len(test) == 40 and problems(300, 200, seed=3)["train"] == train  # train does not depend on n_test
    assert all(p["n_ops"] == 3 for p in val)
    assert all(p["n_ops"] == 3 for p in test) and {p["n_ops"] for p in train} == {2, 3}
    tok = tokenizer()
    for p in train[:50] + test:
        steps = p["solution"].split(";")
        assert len(steps) == p["n_ops"] and final_answer(p["solution"]) == p["answer"]
        assert step_accuracy(p, p["solution"]) == 1.0
        prev = None
        for step in steps:  # every step is exact and chains on the previous result
            x, op, y, r = re.fullmatch(r"(\d+)([+\-*])(\d)=(\d+)", step).groups()
            assert int(r) == {"+": int(x) + int(y), "-": int(x) - int(y), "*": int(x) * int(y)}[op]
            assert prev is None or x == prev
            prev = r
        full, part, ans = build_views(p, VIEWS)
        assert ans == p["answer"] and full == p["solution"]
        assert steps[-1] not in part  # the partial view never states the last step
        for text in (p["prompt"], full, part):
            ids = tok(text, add_special_tokens=False)["input_ids"]
            assert tok.unk_token_id not in ids and tok.decode(ids) == text
    assert final_answer("1+2=3;3*4=12") == "12" and final_answer("garbage") is None
    assert step_accuracy(test[0], "") == 0.0
    with pytest.raises(ValueError, match="n_test"):
        problems(10, 0, seed=0)


def test_smoke_structure_and_budget(smoke_result):
    a = smoke_result("avsd")
    assert set(a["metrics"]["avg8"]) == set(CLAIM.arms)
    assert set(CLAIM.glossary) == set(a["metrics"])
    assert a["metrics"]["mechanics_ok"][METHOD] == [1.0]
    assert (
        0.0 <= a["metrics"]["gate_mean"][METHOD][0] <= 1.0 and a["metrics"]["jensen_mean"][METHOD][0] >= 0.0
    )
    info = a["info"][0]
    budget = info["budget"]
    assert set(budget) == {METHOD, *BASELINES}
    for key in ("steps", "batch", "lr_grid", "rollouts_per_prompt", "params", "distill_prompts"):
        assert len({str(rec[key]) for rec in budget.values()}) == 1, key
    assert budget[METHOD]["steps"] == CLAIM.configs["smoke"]["steps"]
    best = info["best_single_view"]
    assert a["metrics"]["avg8"]["best_single_view"] == a["metrics"]["avg8"][best]
    assert info["n_distill"] == CLAIM.configs["smoke"]["n_distill"] and info["sft_cache_entry"]
    assert [c[0] for c in info["sft"]["val_checks"]] == [5, 10]  # checks every 5 steps from step 5 (smoke)


def test_sft_examples_one_student_and_one_teacher_copy_per_view():
    tok = tokenizer()
    train = problems(30, 4, seed=1)["train"]
    ex = _sft_examples(tok, train)
    assert len(ex) == (1 + len(VIEWS)) * len(train)
    for i, prob in enumerate(train):
        rows = ex[i * (1 + len(VIEWS)) : (i + 1) * (1 + len(VIEWS))]
        views = build_views(prob, VIEWS)
        prompts = [prob["prompt"]] + [
            TEMPLATE.format(privileged_context=v, prompt=prob["prompt"]) for v in views
        ]
        for row, prompt in zip(rows, prompts):
            ids, mask = row["input_ids"], row["loss_mask"]
            assert len(ids) == len(mask)
            n_prompt = len(tok(prompt)["input_ids"])
            assert mask == [0] * n_prompt + [1] * (len(ids) - n_prompt)  # loss on the completion only
            assert tok.decode(ids[n_prompt:-1]) == prob["solution"] and ids[-1] == tok.eos_token_id
            assert tok.decode(ids[:n_prompt], skip_special_tokens=True) == prompt


def test_sft_stop_rule_needs_both_thresholds():
    cfg = {"sft_stop_acc": 0.25, "sft_teacher_acc": 0.6}
    assert sft_stop(0.25, 0.6, cfg) and sft_stop(0.4, 0.9, cfg)
    assert not sft_stop(0.24, 0.99, cfg)  # student below the regime
    assert not sft_stop(0.3, 0.59, cfg)  # the view does not help the teacher enough yet
    assert not sft_stop(0.3, float("nan"), cfg)  # teacher not measured


def test_distill_prompts_seeded_subset():
    train = problems(300, 4, seed=1)["train"]
    a, b = distill_prompts(train, 50, 0), distill_prompts(train, 50, 1)
    assert a == distill_prompts(train, 50, 0) and a != b
    keys = {p["prompt"] for p in train}
    assert len({p["prompt"] for p in a}) == 50 and {p["prompt"] for p in a} <= keys
    for bad in (0, 301):
        with pytest.raises(ValueError, match="distillation prompts"):
            distill_prompts(train, bad, 0)


def test_every_profile_shares_one_sft_seed():
    # the SFT model and the task draw come from sft_seed, never from the run seed
    assert {cfg["sft_seed"] for name, cfg in CLAIM.configs.items() if name != "smoke"} == {1}
    assert len(CLAIM.seeds["full"]) == 5

"""AVSD claim check: the arithmetic task and the smoke profile's structure and budgets. Generic smoke checks
(finiteness, determinism, glossary, plot): test_conformance.py."""

import re

import pytest

from neurips26.claims.avsd import (
    BASELINES,
    CLAIM,
    METHOD,
    VIEWS,
    final_answer,
    problems,
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

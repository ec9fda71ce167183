"""Verifiable tasks: exact verifiers, seeded disjoint splits, reasoning_gym wrapper."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.common.tasks import (
    DigitAddition,
    MiniCountdown,
    ReasoningGymTask,
    addition_trace,
    check_countdown,
    countdown_solutions,
)


@pytest.fixture(scope="module")
def countdown():
    return MiniCountdown(400, 64, seed=0)


def test_countdown_verifier_hand_cases():
    assert check_countdown((4, 3, 5), 7, "4*3=12;12-5=7").solved
    assert check_countdown((4, 3, 5), 7, " 4*3=12;12-5=7\n").solved
    assert check_countdown((4, 3, 5), 7, "3*4=12;12-5=7").solved  # operand order is free
    bad_arith = check_countdown((4, 3, 5), 7, "4*3=13;13-5=8")
    assert not bad_arith.solved and bad_arith.correct_equations == 2 - 1 and bad_arith.equations == 2
    wrong_target = check_countdown((4, 3, 5), 7, "4+3=7;7+5=12")
    assert wrong_target.well_formed and wrong_target.correct_equations == 2 and not wrong_target.solved
    reuse = check_countdown((4, 3, 5), 7, "4*4=16;16-9=7")
    assert not reuse.uses_numbers and not reuse.solved
    assert not check_countdown((4, 3, 5), 7, "4*3=12").well_formed
    assert not check_countdown((4, 3, 5), 7, "4*3=12;12-5=7;7+0=7").solved
    neg = check_countdown((2, 5, 3), -6, "2-5=-3;-3*2=-6")
    assert neg.correct_equations == 2 and not neg.uses_numbers  # 2 used twice, 3 unused
    assert check_countdown((2, 5, 3), -9, "2-5=-3;-3*3=-9").solved
    assert check_countdown((2, 5, 3), 9, "2-5=-3;3*-3=-9").correct_equations == 2


def test_every_listed_solution_verifies(countdown):
    for problem in countdown.train[:100]:
        sols = problem.meta["solutions"]
        assert sols and problem.answer in sols
        assert all(countdown.reward(problem, s) == 1.0 for s in sols)


@settings(max_examples=50, deadline=None)
@given(st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9)), st.integers(-100, 800))
def test_solution_enumeration_is_exact(numbers, target):
    sols = countdown_solutions(numbers, target)
    # brute force over every well-formed two-equation string reaching the target
    assert all(check_countdown(numbers, target, s).solved for s in sols)
    reachable = {int(s.rsplit("=", 1)[1]) for s in countdown_solutions(numbers)}
    assert bool(sols) == (target in reachable)


def test_splits_disjoint_seeded(countdown):
    train = {(p.meta["numbers"], p.meta["target"]) for p in countdown.train}
    test = {(p.meta["numbers"], p.meta["target"]) for p in countdown.test}
    assert len(train) == 400 and len(test) == 64 and not train & test
    again = MiniCountdown(400, 64, seed=0)
    assert [p.prompt for p in again.test] == [p.prompt for p in countdown.test]
    other = MiniCountdown(400, 64, seed=1)
    assert [p.prompt for p in other.test] != [p.prompt for p in countdown.test]
    with pytest.raises(ValueError, match="exceeds"):
        MiniCountdown(10**6, 1, seed=0)


def test_sft_completion_wrong_choices_are_arithmetically_correct(countdown):
    rng = random.Random(0)
    outs = [(p, countdown.sft_completion(p, rng, 0.5)) for p in countdown.train[:200]]
    rewards = [countdown.reward(p, c) for p, c in outs]
    assert 0.3 < sum(rewards) / len(rewards) < 0.7
    for p, c in outs:
        check = countdown.check(p, c)
        assert check.well_formed and check.correct_equations == 2 and check.uses_numbers
    with pytest.raises(ValueError, match="wrong_prob"):
        countdown.sft_completion(countdown.train[0], rng, 1.5)


def test_addition_trace_and_reward():
    assert addition_trace(57, 68) == "7+8+0=15;5+6+1=12;>125"
    assert addition_trace(5, 0) == "5+0+0=5;>5"
    task = DigitAddition(3, 50, 10, seed=0)
    assert not {p.prompt for p in task.train} & {p.prompt for p in task.test}
    p = task.test[0]
    assert task.reward(p, p.answer) == 1.0
    assert task.reward(p, p.answer.rsplit(">", 1)[0] + f">{p.meta['sum'] + 1}") == 0.0
    assert task.reward(p, "no answer") == 0.0
    assert task.trace_accuracy(p, p.answer) == 1.0
    with pytest.raises(ValueError, match="non-negative"):
        addition_trace(-1, 2)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 10**6))
def test_addition_trace_final_answer_exact(x, y):
    assert DigitAddition.final_answer(addition_trace(x, y)) == x + y


def test_reasoning_gym_wrapper():
    task = ReasoningGymTask("chain_sum", 12, 5, seed=3)
    assert len(task.train) == 12 and len(task.test) == 5
    assert not {p.prompt for p in task.train} & {p.prompt for p in task.test}
    p = task.test[0]
    assert task.reward(p, p.answer) == 1.0
    assert task.reward(p, str(int(p.answer) + 1)) == 0.0
    gsm = ReasoningGymTask("gsm_symbolic", 2, 1, seed=0)
    assert gsm.reward(gsm.test[0], gsm.test[0].answer) == 1.0

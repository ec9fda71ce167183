"""Verifiable reasoning tasks with exact verifiers and seeded, disjoint train/test splits.

Every task exposes the same small interface (:class:`VerifiableTask`): lists of :class:`Problem`
(``prompt``, reference ``answer``, ``meta``) in ``train`` and ``test``, and ``reward(problem,
completion) -> float`` in ``[0, 1]`` computed by an exact verifier (no model, no fuzzy matching).
Splits are disjoint by construction (sampled without replacement from one seeded pool of
distinct problems).

Tasks
-----
:class:`MiniCountdown`
    Three integers ``a, b, c`` in ``[low, high]`` and a target ``T`` reachable with two binary
    operations from ``{+, -, *}`` using each number exactly once. The answer is a two-equation trace
    such as ``4*3=12;12-5=7``. The intermediate results are determined by the chosen operands and
    operator (low-entropy "knowledge" tokens); the operand/operator choices are the forks
    (high-entropy "reasoning" tokens). Prompt format: ``"4 3 5>7:"``.
:class:`DigitAddition`
    Multi-digit addition with a column-by-column trace (``digit+digit+carry=sum`` from the least
    significant column), e.g. ``"57+68="`` -> ``"7+8+0=15;5+6+1=12;>125"``. Reward 1 iff the final
    answer after ``>`` is exact; :meth:`DigitAddition.trace_accuracy` scores the steps.
:class:`ReasoningGymTask`
    Wraps a ``reasoning_gym`` generator (``gsm_symbolic``, ``basic_arithmetic``, ``chain_sum``, ...)
    and its own ``score_answer`` verifier.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from neurips26.common.checks import check_int, check_probability

OPS = ("+", "-", "*")
_EQ = re.compile(r"^(-?\d+)([+\-*])(-?\d+)=(-?\d+)$")


@dataclass(frozen=True)
class Problem:
    """One task instance: the prompt, a reference answer (one valid completion) and metadata."""

    prompt: str
    answer: str
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


class VerifiableTask(Protocol):
    """What every task offers: seeded disjoint splits and an exact reward."""

    name: str
    train: list[Problem]
    test: list[Problem]

    def reward(self, problem: Problem, completion: str) -> float: ...


def _apply(x: int, op: str, y: int) -> int:
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    raise ValueError(f"op must be one of {OPS}, got {op!r}")


def _split(pool: list[Any], n_train: int, n_test: int, seed: int, what: str) -> tuple[list[Any], list[Any]]:
    if n_train + n_test > len(pool):
        raise ValueError(
            f"n_train + n_test = {n_train + n_test} exceeds the {len(pool)} distinct {what} available"
        )
    rng = random.Random(seed)
    chosen = rng.sample(pool, n_train + n_test)
    return chosen[n_test:], chosen[:n_test]


# ---------------------------------------------------------------------------------------------
# Mini-countdown
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EquationCheck:
    """Verification of a countdown completion.

    ``well_formed``: the text is exactly ``eq;eq`` with ``eq = int op int = int``;
    ``equations`` / ``correct_equations``: how many ``x op y = z`` substrings were parsed / had
    ``z == x op y`` (counted even when the trace is malformed, as a knowledge-integrity proxy);
    ``uses_numbers``: the operands are the three given numbers once each and the first result
    once; ``solved``: all of the above and the final value equals the target.
    """

    well_formed: bool
    equations: int
    correct_equations: int
    uses_numbers: bool
    solved: bool


def countdown_solutions(numbers: Sequence[int], target: int | None = None) -> list[str]:
    """All two-step traces over ``numbers`` (three ints), optionally only those reaching ``target``.

    The first equation combines two of the numbers (ordered pair, any op); the second combines its
    result with the remaining number, with the result first or second.
    """
    if len(numbers) != 3:
        raise ValueError(f"numbers must hold exactly 3 integers, got {list(numbers)}")
    out = []
    for i, j in itertools.permutations(range(3), 2):
        k = 3 - i - j
        x, y, z = numbers[i], numbers[j], numbers[k]
        for op1 in OPS:
            r1 = _apply(x, op1, y)
            first = f"{x}{op1}{y}={r1}"
            for op2 in OPS:
                for left, right in ((r1, z), (z, r1)):
                    r2 = _apply(left, op2, right)
                    if target is None or r2 == target:
                        out.append(f"{first};{left}{op2}{right}={r2}")
    return sorted(set(out))


def check_countdown(numbers: Sequence[int], target: int, completion: str) -> EquationCheck:
    """Exact verifier of a mini-countdown completion (see :class:`EquationCheck`).

    Text after the first end-of-sequence marker is ignored by the caller; surrounding whitespace
    is stripped here.
    """
    text = completion.strip()
    parts = text.split(";")
    parsed = [_EQ.match(p) for p in parts]
    eqs = [m for m in parsed if m is not None]
    correct = sum(int(m.group(4)) == _apply(int(m.group(1)), m.group(2), int(m.group(3))) for m in eqs)
    well_formed = len(parts) == 2 and all(m is not None for m in parsed)
    uses = False
    solved = False
    if well_formed:
        (x, _, y, r1), (u, _, v, r2) = (tuple(m.groups()) for m in parsed)
        x, y, r1, u, v, r2 = (int(t) for t in (x, y, r1, u, v, r2))
        remaining = list(numbers)
        uses = True
        for operand in (x, y):
            if operand in remaining:
                remaining.remove(operand)
            else:
                uses = False
        if uses:
            z = remaining[0]
            uses = sorted([u, v]) == sorted([r1, z]) and (u == r1 or v == r1)
        solved = uses and correct == 2 and r2 == target
    return EquationCheck(well_formed, len(eqs), int(correct), uses, solved)


class MiniCountdown:
    """Seeded mini-countdown task (see the module docstring).

    Parameters
    ----------
    n_train, n_test : int
        Sizes of the disjoint splits (distinct ``(a, b, c, T)`` tuples).
    seed : int
        Fixes the pool order and hence both splits.
    low, high : int
        Range of the three numbers (inclusive).

    Attributes
    ----------
    train, test : list of Problem
        ``meta`` holds ``numbers`` (tuple), ``target`` and ``solutions`` (all valid traces).
    """

    name = "mini-countdown"

    def __init__(self, n_train: int = 4000, n_test: int = 256, *, seed: int = 0, low: int = 1, high: int = 9):
        check_int("n_train", n_train, low=0)
        check_int("n_test", n_test, low=0)
        check_int("seed", seed, low=0)
        check_int("low", low, low=0)
        check_int("high", high, low=low)
        self.low, self.high, self.seed = low, high, seed
        pool = []
        for numbers in itertools.product(range(low, high + 1), repeat=3):
            targets = {int(s.rsplit("=", 1)[1]) for s in countdown_solutions(numbers)}
            pool.extend((numbers, t) for t in sorted(targets))
        train, test = _split(pool, n_train, n_test, seed, "(a, b, c, T) tuples")
        self.train = [self._problem(n, t) for n, t in train]
        self.test = [self._problem(n, t) for n, t in test]

    @staticmethod
    def prompt(numbers: Sequence[int], target: int) -> str:
        return f"{' '.join(str(n) for n in numbers)}>{target}:"

    def _problem(self, numbers: tuple[int, ...], target: int) -> Problem:
        sols = countdown_solutions(numbers, target)
        return Problem(
            self.prompt(numbers, target),
            sols[0],
            {"numbers": tuple(numbers), "target": target, "solutions": tuple(sols)},
        )

    def check(self, problem: Problem, completion: str) -> EquationCheck:
        return check_countdown(problem.meta["numbers"], problem.meta["target"], completion)

    def reward(self, problem: Problem, completion: str) -> float:
        """1.0 iff the completion is a well-formed, arithmetically correct trace reaching the target."""
        return float(self.check(problem, completion).solved)

    def sft_completion(self, problem: Problem, rng: random.Random, wrong_prob: float = 0.0) -> str:
        """A training trace: a random valid solution, or with probability ``wrong_prob`` an
        arithmetically correct trace over the same numbers that misses the target (one wrong
        operator/operand choice)."""
        check_probability("wrong_prob", wrong_prob)
        if wrong_prob > 0 and rng.random() < wrong_prob:
            wrong = [
                s for s in countdown_solutions(problem.meta["numbers"]) if s not in problem.meta["solutions"]
            ]
            if wrong:
                return rng.choice(wrong)
        return rng.choice(problem.meta["solutions"])


# ---------------------------------------------------------------------------------------------
# Multi-digit addition with a column trace
# ---------------------------------------------------------------------------------------------


def addition_trace(x: int, y: int) -> str:
    """Column-by-column trace of ``x + y`` for non-negative ints: ``"d+e+c=s;...;>total"``."""
    if x < 0 or y < 0:
        raise ValueError(f"addition_trace needs non-negative ints, got {x}, {y}")
    xs, ys = str(x)[::-1], str(y)[::-1]
    carry, steps = 0, []
    for i in range(max(len(xs), len(ys))):
        d = int(xs[i]) if i < len(xs) else 0
        e = int(ys[i]) if i < len(ys) else 0
        s = d + e + carry
        steps.append(f"{d}+{e}+{carry}={s}")
        carry = s // 10
    return ";".join(steps) + f";>{x + y}"


class DigitAddition:
    """Multi-digit addition with step-by-step traces and an exact verifier.

    Parameters
    ----------
    n_digits : int
        Both operands have exactly this many digits (>= 1).
    n_train, n_test : int
        Disjoint split sizes (distinct ordered pairs).
    seed : int
        Fixes the splits.
    """

    name = "digit-addition"

    def __init__(self, n_digits: int = 3, n_train: int = 2000, n_test: int = 200, *, seed: int = 0):
        check_int("n_digits", n_digits, low=1, high=12)
        check_int("n_train", n_train, low=0)
        check_int("n_test", n_test, low=0)
        check_int("seed", seed, low=0)
        lo, hi = (10 ** (n_digits - 1) if n_digits > 1 else 0), 10**n_digits - 1
        size = (hi - lo + 1) ** 2
        if n_train + n_test > size:
            raise ValueError(f"n_train + n_test = {n_train + n_test} exceeds the {size} distinct pairs")
        rng = random.Random(seed)
        pairs: set[tuple[int, int]] = set()
        ordered: list[tuple[int, int]] = []
        while len(ordered) < n_train + n_test:
            pair = (rng.randint(lo, hi), rng.randint(lo, hi))
            if pair not in pairs:
                pairs.add(pair)
                ordered.append(pair)
        self.n_digits = n_digits
        self.test = [self._problem(*p) for p in ordered[:n_test]]
        self.train = [self._problem(*p) for p in ordered[n_test:]]

    @staticmethod
    def _problem(x: int, y: int) -> Problem:
        return Problem(f"{x}+{y}=", addition_trace(x, y), {"x": x, "y": y, "sum": x + y})

    @staticmethod
    def final_answer(completion: str) -> int | None:
        """The integer after the last ``>``, or ``None`` if absent/malformed."""
        if ">" not in completion:
            return None
        tail = completion.rsplit(">", 1)[1].strip()
        return int(tail) if re.fullmatch(r"-?\d+", tail) else None

    def reward(self, problem: Problem, completion: str) -> float:
        return float(self.final_answer(completion) == problem.meta["sum"])

    @staticmethod
    def trace_accuracy(problem: Problem, completion: str) -> float:
        """Fraction of the reference trace's steps reproduced exactly, position by position."""
        ref = problem.answer.split(";")
        got = completion.strip().split(";")
        return sum(a == b for a, b in zip(ref, got)) / len(ref)


# ---------------------------------------------------------------------------------------------
# reasoning_gym
# ---------------------------------------------------------------------------------------------


class ReasoningGymTask:
    """A ``reasoning_gym`` generator with its own verifier, split into disjoint train/test sets.

    Parameters
    ----------
    dataset : str
        A ``reasoning_gym`` dataset name, e.g. ``"gsm_symbolic"``, ``"basic_arithmetic"``,
        ``"chain_sum"``.
    n_train, n_test : int
        Split sizes. Items are generated with ``seed`` and de-duplicated by question text, so the
        splits never share a question.
    seed : int
        Generator seed.
    **kwargs
        Dataset options passed to ``reasoning_gym.create_dataset`` (e.g. ``num_terms=3``).
    """

    def __init__(self, dataset: str, n_train: int = 200, n_test: int = 50, *, seed: int = 0, **kwargs: Any):
        from neurips26.common.optional import require

        rg = require("reasoning_gym", "llm")
        check_int("n_train", n_train, low=0)
        check_int("n_test", n_test, low=0)
        check_int("seed", seed, low=0)
        self.name = dataset
        want = n_train + n_test
        size = max(2 * want, 16)
        self._dataset = rg.create_dataset(dataset, size=size, seed=seed, **kwargs)
        seen, items = set(), []
        for i in range(size):
            entry = self._dataset[i]
            if entry["question"] in seen:
                continue
            seen.add(entry["question"])
            items.append(entry)
            if len(items) == want:
                break
        if len(items) < want:
            raise ValueError(f"{dataset!r} produced only {len(items)} distinct questions, {want} requested")
        self._entries = {}
        problems = []
        for entry in items:
            problem = Problem(entry["question"], str(entry["answer"]), dict(entry.get("metadata", {})))
            self._entries[entry["question"]] = entry
            problems.append(problem)
        self.test, self.train = problems[:n_test], problems[n_test:]

    def reward(self, problem: Problem, completion: str) -> float:
        """The generator's own ``score_answer`` on the stripped completion (1.0 = exact)."""
        entry = self._entries.get(problem.prompt)
        if entry is None:
            raise ValueError("problem does not belong to this task")
        return float(self._dataset.score_answer(completion.strip(), entry))


__all__ = [
    "OPS",
    "Problem",
    "VerifiableTask",
    "EquationCheck",
    "countdown_solutions",
    "check_countdown",
    "MiniCountdown",
    "addition_trace",
    "DigitAddition",
    "ReasoningGymTask",
]

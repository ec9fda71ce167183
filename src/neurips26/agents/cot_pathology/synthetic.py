"""Synthetic multi-step arithmetic chains of thought with known pathologies and paraphrases.

A problem ``Q a1 + a2 - a3 ? ;`` is solved by steps ``S r + a = r' ;`` (or the paraphrase
``S r plus a gives r' ;``) and an answer step ``A r ;``, then ``<eos>``. Numbers are single tokens
in ``[0, max_value]`` and every running value stays in that range. A training mix adds natural
pathologies (a repeated step, post-answer check steps ``C ... ;``, an early guessed answer that is
later corrected, an irrelevant step) so that a model trained on it emits them when sampled.

Shapes
------
prompt ids ``(2 k + 2,)`` for ``k`` operands; chain-of-thought ids ``(6 (k - 1) + 3,)`` when clean.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from neurips26.common.checks import check_int, check_probability
from neurips26.common.models import BOS_ID, EOS_ID, PAD_ID, UNK_ID

from .surgery import SurgeryTemplates

WORDS = ("Q", "?", ";", "S", "A", "C", "+", "-", "=", "plus", "minus", "gives", "try", "maybe", "no")


@dataclass(frozen=True)
class ArithmeticProblem:
    """Operands, operators (``"+"``/``"-"``), the running values and the answer."""

    operands: tuple[int, ...]
    ops: tuple[str, ...]
    values: tuple[int, ...]

    @property
    def answer(self) -> int:
        return self.values[-1]


class SyntheticArithmetic:
    """Vocabulary, problem sampler, trace writer, answer extractor and surgery templates.

    Parameters
    ----------
    max_value : int
        Largest number token (numbers ``0..max_value``).
    min_operands, max_operands : int
        Operands per problem.
    """

    def __init__(self, max_value: int = 19, min_operands: int = 3, max_operands: int = 5):
        self.max_value = check_int("max_value", max_value, low=2, high=999)
        self.min_operands = check_int("min_operands", min_operands, low=2)
        self.max_operands = check_int("max_operands", max_operands, low=min_operands)
        self.itos = ["<pad>", "<bos>", "<eos>", "<unk>", *WORDS, *(str(v) for v in range(max_value + 1))]
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        assert (self.stoi["<pad>"], self.stoi["<bos>"], self.stoi["<eos>"], self.stoi["<unk>"]) == (
            PAD_ID,
            BOS_ID,
            EOS_ID,
            UNK_ID,
        )
        self.eos, self.pad = EOS_ID, PAD_ID
        self.delimiter = self.stoi[";"]
        self.answer_marker = self.stoi["A"]
        self.check_marker = self.stoi["C"]

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        return [self.stoi[w] for w in text.split()]

    def decode(self, ids) -> str:
        return " ".join(self.itos[int(i)] for i in ids)

    # ------------------------------------------------------------------ problems and traces
    def sample(self, rng: random.Random) -> ArithmeticProblem:
        k = rng.randint(self.min_operands, self.max_operands)
        r = rng.randint(0, self.max_value)
        operands, ops, values = [r], [], [r]
        for _ in range(k - 1):
            op = rng.choice("+-")
            if op == "+" and r == self.max_value:
                op = "-"
            if op == "-" and r == 0:
                op = "+"
            a = rng.randint(0, self.max_value - r) if op == "+" else rng.randint(0, r)
            r = r + a if op == "+" else r - a
            operands.append(a)
            ops.append(op)
            values.append(r)
        return ArithmeticProblem(tuple(operands), tuple(ops), tuple(values))

    def prompt(self, prob: ArithmeticProblem) -> list[int]:
        words = ["Q", str(prob.operands[0])]
        for op, a in zip(prob.ops, prob.operands[1:]):
            words += [op, str(a)]
        return self.encode(" ".join(words + ["?", ";"]))

    def step(
        self, left: int, op: str, right: int, result: int, paraphrase: bool = False, marker: str = "S"
    ) -> list[int]:
        if paraphrase:
            word = "plus" if op == "+" else "minus"
            return self.encode(f"{marker} {left} {word} {right} gives {result} ;")
        return self.encode(f"{marker} {left} {op} {right} = {result} ;")

    def answer_step(self, value: str | int) -> list[int]:
        return self.encode(f"A {value} ;")

    def clean_steps(
        self, prob: ArithmeticProblem, rng: random.Random | None = None, paraphrase_prob: float = 0.0
    ) -> list[list[int]]:
        """Derivation steps and the answer step (each ending with ``;``), without EOS."""
        check_probability("paraphrase_prob", paraphrase_prob)
        steps = []
        for i, (op, a) in enumerate(zip(prob.ops, prob.operands[1:])):
            para = rng is not None and rng.random() < paraphrase_prob
            steps.append(self.step(prob.values[i], op, a, prob.values[i + 1], para))
        steps.append(self.answer_step(prob.answer))
        return steps

    def training_cot(
        self,
        prob: ArithmeticProblem,
        rng: random.Random,
        pathology_prob: float = 0.2,
        paraphrase_prob: float = 0.5,
    ) -> list[int]:
        """A training chain of thought (+ EOS): clean, or with one natural pathology."""
        check_probability("pathology_prob", pathology_prob)
        steps = self.clean_steps(prob, rng, paraphrase_prob)
        if rng.random() < pathology_prob:
            kind = rng.choice(("repeat", "check", "early_guess", "irrelevant"))
            n_deriv = len(steps) - 1
            if kind == "repeat":
                i = rng.randrange(n_deriv)
                steps.insert(i + 1, list(steps[i]))
            elif kind == "check":
                for _ in range(rng.randint(1, 3)):
                    i = rng.randrange(n_deriv)
                    op, a = prob.ops[i], prob.operands[i + 1]
                    steps.append(
                        self.step(prob.values[i], op, a, prob.values[i + 1], rng.random() < 0.5, "C")
                    )
                steps.append(self.answer_step(prob.answer))
            elif kind == "early_guess":
                steps.insert(0, self.answer_step(self.wrong_value(str(prob.answer), rng)))
            else:
                steps.insert(rng.randint(1, n_deriv), self.offtask_step(rng))
        return [t for st in steps for t in st] + [self.eos]

    # ------------------------------------------------------------------ extraction and checks
    def extract_answer(self, step_ids) -> str | None:
        """The number after a leading ``A`` marker, else ``None``."""
        ids = [int(t) for t in step_ids]
        if len(ids) >= 2 and ids[0] == self.answer_marker and self.itos[ids[1]].isdigit():
            return self.itos[ids[1]]
        return None

    def final_answer(self, cot_ids) -> str | None:
        ids = [int(t) for t in cot_ids]
        answers = [
            self.extract_answer(ids[i : i + 2]) for i in range(len(ids)) if ids[i] == self.answer_marker
        ]
        answers = [a for a in answers if a is not None]
        return answers[-1] if answers else None

    def strip(self, cot_ids) -> list[int]:
        """Generated ids up to (excluding) the first EOS or PAD."""
        out = []
        for t in cot_ids:
            t = int(t)
            if t in (self.eos, self.pad):
                break
            out.append(t)
        return out

    def is_clean(self, prob: ArithmeticProblem, cot_ids) -> bool:
        """Exactly the reference derivation (either surface form per step) and the correct answer."""
        ids = self.strip(cot_ids)
        ref = self.clean_steps(prob)
        steps = [ids[s:e] for s, e in _split(ids, self.delimiter)]
        if len(steps) != len(ref):
            return False
        for i, (got, want) in enumerate(zip(steps, ref)):
            if got == want:
                continue
            if i < len(ref) - 1:
                alt = self.step(prob.values[i], prob.ops[i], prob.operands[i + 1], prob.values[i + 1], True)
                if got == alt:
                    continue
            return False
        return True

    # ------------------------------------------------------------------ edits
    def wrong_value(self, value: str, rng: random.Random) -> str:
        v = int(value)
        choices = [x for x in range(self.max_value + 1) if x != v]
        return str(rng.choice(choices))

    def branch_step(self, rng: random.Random) -> list[int]:
        a, b = rng.randint(0, self.max_value), rng.randint(0, self.max_value)
        return self.encode(f"S try {a} maybe {b} no ;")

    def offtask_step(self, rng: random.Random) -> list[int]:
        a, b = rng.randint(0, self.max_value), rng.randint(0, self.max_value)
        c = rng.randint(0, self.max_value)
        return self.encode(f"S {a} {rng.choice('+-')} {b} = {c} ;")

    def check_step(self, rng: random.Random) -> list[int]:
        a = rng.randint(0, self.max_value)
        return self.encode(f"C {a} = {a} ;")

    def paraphrase(self, step_ids) -> list[int]:
        """Swap the surface form of a derivation step (``a + b = c`` <-> ``a plus b gives c``)."""
        w = [self.itos[int(t)] for t in step_ids]
        if len(w) == 7 and w[0] in ("S", "C") and w[2] in ("+", "-") and w[4] == "=" and w[6] == ";":
            return self.encode(f"{w[0]} {w[1]} {'plus' if w[2] == '+' else 'minus'} {w[3]} gives {w[5]} ;")
        if (
            len(w) == 7
            and w[0] in ("S", "C")
            and w[2] in ("plus", "minus")
            and w[4] == "gives"
            and w[6] == ";"
        ):
            return self.encode(f"{w[0]} {w[1]} {'+' if w[2] == 'plus' else '-'} {w[3]} = {w[5]} ;")
        return [int(t) for t in step_ids]

    def templates(self) -> SurgeryTemplates:
        return SurgeryTemplates(
            answer_step=self.answer_step,
            wrong_value=self.wrong_value,
            branch_step=self.branch_step,
            offtask_step=self.offtask_step,
            check_step=self.check_step,
        )


def _split(ids: list[int], delimiter: int) -> list[tuple[int, int]]:
    spans, start = [], 0
    for t, tok in enumerate(ids):
        if tok == delimiter:
            spans.append((start, t + 1))
            start = t + 1
    if start < len(ids):
        spans.append((start, len(ids)))
    return spans

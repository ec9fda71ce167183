"""Generic controls and the surface baseline compared against the matched controllers.

Paper: "CoT pathology diagnostics" (NeurIPS 2026, abstract only; seed file ``000_f8b4140a0e3b5d84.txt``,
paragraph 18). The abstract compares detector-timed control with generic interventions; the spec's
controls, all ``transformers`` generation hooks (:mod:`.controllers` holds the matched controllers):

=================  ==========================================================================
control            what it does
=================  ==========================================================================
g1 budget          a fixed ``max_new_tokens`` budget (truncation; no hook needed)
g2 no-repeat       ``transformers``' ``NoRepeatNGramLogitsProcessor``, always on
g3 random timing   the matched controllers at random steps (:func:`random_schedule` gives each
                   row the same number of interventions as a detector-timed run)
g4 verify cue      :class:`VerifyCue`: a verification cue forced at the start of every
                   ``k``-th step
surface baseline   :class:`AnswerRegexStop`: a ``StoppingCriteria`` on the decoded text
=================  ==========================================================================

.. math::

    \\text{g3: } S_i^{(p)} \\subset \\{0, \\dots, H - 1\\}, \\; |S_i^{(p)}| = c_i^{(p)}, \\qquad
    \\text{g4: } \\tilde z_{t,v} = -\\infty \\;\\; \\forall v \\ne \\text{cue}_j
    \\text{ while the cue of step } k, 2k, \\dots \\text{ is emitted}

Shapes
------
input_ids : ``(B, T)``; scores : ``(B, V)``; :class:`AnswerRegexStop` returns ``(B,)`` booleans.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from transformers import LogitsProcessor, StoppingCriteria

from neurips26.common.checks import check_int

from .trajectory import Pathology, as_id_list

__all__ = ["GENERIC_CONTROLS", "AnswerRegexStop", "VerifyCue", "random_schedule"]

#: The generic controls compared against detector-timed control (names used in the claim).
GENERIC_CONTROLS: dict[str, str] = {
    "g1_budget": "fixed max_new_tokens budget (truncation)",
    "g2_no_repeat": "transformers NoRepeatNGramLogitsProcessor, always on",
    "g3_random": "the same controllers at random steps, same number of interventions per problem",
    "g4_verify_cue": "VerifyCue: a verification cue forced at the start of every k-th step",
}


def random_schedule(
    counts: Sequence[Mapping[Any, int]], horizon: int, generator: torch.Generator
) -> list[dict[Pathology, list[int]]]:
    """Random intervention steps with the same per-row, per-controller counts (generic control g3).

    ``counts[i][p]`` interventions of controller ``p`` for row ``i`` are placed at distinct random
    steps in ``[0, horizon)`` drawn with ``generator``.
    """
    check_int("horizon", horizon, low=1)
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    out = []
    for row in counts:
        sched = {}
        for key, c in sorted(row.items(), key=lambda kv: str(kv[0])):
            p = Pathology.parse(key)
            c = min(check_int(f"counts[{p.value}]", c, low=0), horizon)
            steps = torch.randperm(horizon, generator=generator)[:c].tolist() if c else []
            sched[p] = sorted(steps)
        out.append(sched)
    return out


class VerifyCue(LogitsProcessor):
    """Generic control g4: force ``cue_ids`` at the start of every ``every``-th step.

    Parameters
    ----------
    cue_ids : sequence of int
    every : int
        Steps between cues (counted in generated delimiters).
    delimiter_ids : iterable of int
    eos_token_id : int
    stop_after_ids : iterable of int
        Once one of these tokens (e.g. the answer marker) was generated, no further cue is forced, so
        that the cue cannot keep a finished chain of thought from ending.
    """

    def __init__(
        self,
        cue_ids: Sequence[int],
        every: int,
        delimiter_ids: Iterable[int],
        eos_token_id: int,
        stop_after_ids: Iterable[int] = (),
    ):
        self.cue = as_id_list("cue_ids", cue_ids)
        if not self.cue:
            raise ValueError("cue_ids must hold at least one token")
        self.every = check_int("every", every, low=1)
        self.delims = frozenset(as_id_list("delimiter_ids", list(delimiter_ids)))
        self.eos = check_int("eos_token_id", eos_token_id, low=0)
        self.stop_after = frozenset(as_id_list("stop_after_ids", list(stop_after_ids)))
        self._last_len: int | None = None
        self.count: list[int] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        b, t = input_ids.shape
        if self._last_len is None or t != self._last_len + 1 or len(self.count) != b:
            self._start, self._steps, self._pos, self._done = t, [0] * b, [None] * b, [False] * b
            self.count = [0] * b
        self._last_len = t
        out = scores
        for i in range(b):
            if t > self._start:
                tok = int(input_ids[i, -1])
                if tok == self.eos or tok in self.stop_after:
                    self._done[i] = True
                if self._pos[i] is not None:
                    self._pos[i] = self._pos[i] + 1 if self._pos[i] + 1 < len(self.cue) else None
                elif tok in self.delims:
                    self._steps[i] += 1
                    if self._steps[i] % self.every == 0:
                        self._pos[i] = 0
                        self.count[i] += 1
            if self._done[i] or self._pos[i] is None:
                continue
            if out is scores:
                out = scores.clone()
            tok = self.cue[self._pos[i]]
            out[i].fill_(-math.inf)
            out[i, tok] = 0.0
        return out


class AnswerRegexStop(StoppingCriteria):
    """Surface baseline (overthinking): stop a row once its decoded continuation matches ``pattern``.

    Parameters
    ----------
    decode : callable
        ``decode(token_ids: list[int]) -> str`` for the generated part.
    pattern : str
        Regular expression searched in the decoded continuation.
    prompt_length : int
        Number of prompt tokens (left-padded prompts share it).
    """

    def __init__(self, decode: Callable[[list[int]], str], pattern: str, prompt_length: int):
        if not callable(decode):
            raise TypeError("decode must be callable: token ids -> str")
        if not isinstance(pattern, str) or not pattern:
            raise ValueError("pattern must be a non-empty regular expression string")
        self.decode, self.regex = decode, re.compile(pattern)
        self.prompt_length = check_int("prompt_length", prompt_length, low=0)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        out = [bool(self.regex.search(self.decode(row[self.prompt_length :].tolist()))) for row in input_ids]
        return torch.tensor(out, dtype=torch.bool, device=input_ids.device)

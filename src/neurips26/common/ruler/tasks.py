"""RULER task table, prompt templates and the :class:`RulerItem` record."""

from __future__ import annotations

from dataclasses import dataclass

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."


DEPTH_GRID = tuple(round(i / 39, 4) for i in range(40))  # RULER: np.linspace(0, 100, 40)


@dataclass(frozen=True)
class _Spec:
    family: str  # niah, vt, cwe, fwe
    haystack: str = "noise"  # noise, kjv, needle
    key: str = "words"
    value: str = "numbers"
    n_keys: int = 1  # needles with distinct keys (multikey distractors included)
    n_values: int = 1  # values of the queried key
    n_queries: int = 1
    max_new_tokens: int = 16


TASKS: dict[str, _Spec] = {
    "niah_single_1": _Spec("niah", "noise", max_new_tokens=16),
    "niah_single_2": _Spec("niah", "kjv", max_new_tokens=16),
    "niah_single_3": _Spec("niah", "kjv", value="uuids", max_new_tokens=40),
    "niah_multikey_1": _Spec("niah", "kjv", n_keys=4, max_new_tokens=16),
    "niah_multikey_2": _Spec("niah", "needle", max_new_tokens=16),
    "niah_multikey_3": _Spec("niah", "needle", key="uuids", value="uuids", max_new_tokens=40),
    "niah_multivalue": _Spec("niah", "kjv", n_values=4, max_new_tokens=56),
    "niah_multiquery": _Spec("niah", "kjv", n_keys=4, n_queries=4, max_new_tokens=56),
    "vt": _Spec("vt", "noise", max_new_tokens=32),
    "cwe": _Spec("cwe", max_new_tokens=56),
    "fwe": _Spec("fwe", max_new_tokens=24),
}


@dataclass(frozen=True)
class RulerItem:
    """One generated prompt.

    Attributes
    ----------
    task, length, index : the cell and the item's index in it.
    input_ids : tuple of int
        The prompt in tokens (no BOS is added by the tokenizer here; chat templates add their own).
    prompt : str
        ``tokenizer.decode(input_ids)``.
    answers : tuple of str
        RULER's references; ``string_match_all`` scores the fraction found in the prediction.
    depth : float or None
        Relative depth of the (first) queried needle in the context; None for ``cwe``/``fwe``.
    needle_positions : tuple of int
        Token index in ``input_ids`` where each planted needle starts (queried needles first).
    context_start, context_end : int
        Token span of the context; the question follows ``context_end``.
    max_new_tokens : int
        Tokens to generate for this task.
    """

    task: str
    length: int
    index: int
    input_ids: tuple[int, ...]
    prompt: str
    answers: tuple[str, ...]
    depth: float | None
    needle_positions: tuple[int, ...]
    context_start: int
    context_end: int
    max_new_tokens: int
    metric: str = "all"

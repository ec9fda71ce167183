"""Item generators for every RULER task (NIAH variants, variable tracking, CWE, FWE)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.common.ruler.haystacks import (
    _NEEDLE,
    _depth_of,
    _enc,
    _fill_list,
    _haystack_ids,
    _insert,
    _key,
    _kind,
    _kjv_words,
    _render,
    _value,
)
from neurips26.common.ruler.tasks import DEPTH_GRID, TASKS, RulerItem, _Spec

_NIAH_TEMPLATE = (
    "Some special magic {kind} are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {kind} afterwards.\n{context}\n"
    "What are all the special magic {kind} for {query} mentioned in the provided text?"
)


_NIAH_PREFIX = " The special magic {kind} for {query} mentioned in the provided text are"


_VT_TEMPLATE = (
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\n"
    "Question: Find all variables that are assigned the value {query} in the text above."
)


_VT_PREFIX = (
    " Answer: According to the chain(s) of variable assignment in the text above, {n} variables are "
    "assigned the value {query}, they are: "
)


_CWE_TEMPLATE = (
    "Below is a numbered list of words. In these words, some appear more often than others. Memorize the "
    "ones that appear most often.\n{context}\nQuestion: What are the {n} most common words in the above list?"
)


_CWE_PREFIX = " Answer: The top {n} words that appear most often in the list are:"


_FWE_TEMPLATE = (
    "Read the following coded text and track the frequency of each coded word. Find the three most "
    "frequently appeared coded words. {context}\nQuestion: Do not provide any explanation. Please ignore "
    "the dots '....'. What are the three most frequently appeared words in the above coded text?"
)


_FWE_PREFIX = " Answer: According to the coded text above, the three most frequently appeared words are:"


def _niah(tok, spec: _Spec, length: int, rng: random.Random, depth: float | None, template: str):
    kind = _kind(spec)
    n_keys = max(spec.n_keys, spec.n_queries)
    keys: list[str] = []
    while len(keys) < n_keys:
        k = _key(rng, spec.key)
        if k not in keys:
            keys.append(k)
    values = {
        k: [_value(rng, spec.value) for _ in range(spec.n_values if i == 0 else 1)]
        for i, k in enumerate(keys)
    }
    queried = keys[: spec.n_queries]
    query = ", ".join(queried[:-1]) + f", and {queried[-1]}" if len(queried) > 1 else queried[0]
    head, tail = _render(
        tok, _NIAH_TEMPLATE, _NIAH_PREFIX.format(kind=kind, query=query), template, kind=kind, query=query
    )
    needles, answers, needle_depths = [], [], []
    for _i, k in enumerate(keys):
        for v in values[k]:
            needles.append(_enc(tok, " " + _NEEDLE.format(kind=kind, key=k, value=v)))
            if k in queried:
                answers.append(v)
            first = not needle_depths
            needle_depths.append(depth if (first and depth is not None) else rng.choice(DEPTH_GRID))
    budget = length - len(head) - len(tail) - sum(map(len, needles))
    if budget < 1:
        raise ValueError(
            f"length {length} is shorter than the prompt without haystack ({length - budget + 1} tokens)"
        )
    hay = _haystack_ids(tok, spec.haystack, budget, rng, spec)
    ctx, starts = _insert(tok, hay, needles, needle_depths)
    real_depth = _depth_of(starts[0], needles, starts, len(hay))
    return head, ctx, tail, tuple(answers), real_depth, starts


def _vt(tok, spec: _Spec, length: int, rng: random.Random, depth: float | None, template: str, hops: int = 4):
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    names: list[str] = []
    while len(names) < hops + 1:
        name = "".join(rng.choice(letters) for _ in range(5))
        if name not in names:
            names.append(name)
    value = str(rng.randrange(10_000, 100_000))
    lines = [f"VAR {names[0]} = {value}."] + [
        f"VAR {names[i]} = VAR {names[i - 1]}." for i in range(1, hops + 1)
    ]
    head, tail = _render(tok, _VT_TEMPLATE, _VT_PREFIX.format(n=hops + 1, query=value), template, query=value)
    needles = [_enc(tok, " " + line) for line in lines]
    budget = length - len(head) - len(tail) - sum(map(len, needles))
    if budget < 1:
        raise ValueError(
            f"length {length} is shorter than the prompt without haystack ({length - budget + 1} tokens)"
        )
    hay = _haystack_ids(tok, "noise", budget, rng, spec)
    start = 0.0 if depth is None else depth
    span = 1.0 - start
    depths = [start + span * i / (hops + 1) for i in range(hops + 1)]  # RULER: evenly spaced chain
    ctx, starts = _insert(tok, hay, needles, depths)
    real_depth = _depth_of(starts[0], needles, starts, len(hay))
    return head, ctx, tail, tuple(names), real_depth, starts


def _cwe(
    tok, spec: _Spec, length: int, rng: random.Random, depth: float | None, template: str, num_cw: int = 10
):
    head, tail = _render(tok, _CWE_TEMPLATE, _CWE_PREFIX.format(n=num_cw), template, n=num_cw)
    budget = length - len(head) - len(tail)
    entry_tokens = 4
    n_entries = budget // entry_tokens
    if n_entries < 3 * num_cw:
        raise ValueError(f"length {length} is too short for {num_cw} common words")
    freq_cw = max(3, min(30, n_entries // (3 * num_cw)))  # RULER: 30 (long contexts); scaled down to fit
    words = list(rng.sample(_kjv_words(), num_cw + n_entries))
    common, rare = words[:num_cw], words[num_cw:]
    seq = common * freq_cw + rare[: max(0, n_entries - num_cw * freq_cw)]
    rng.shuffle(seq)
    entries = [f" {i + 1}. {w}" for i, w in enumerate(seq)]
    extra = rare[len(seq) :] + ["a", "of"]
    fillers = [f" {len(entries) + 1}. {w}" for w in extra] + [" ."] * 8
    ids = _fill_list(tok, entries, fillers, budget)
    return head, ids, tail, tuple(common), None, ()


def _fwe(
    tok, spec: _Spec, length: int, rng: random.Random, depth: float | None, template: str, alpha: float = 2.0
):
    head, tail = _render(tok, _FWE_TEMPLATE, _FWE_PREFIX, template)
    budget = length - len(head) - len(tail)
    if budget < 40:
        raise ValueError(f"length {length} is too short for fwe")
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab: list[str] = []
    while len(vocab) < 200:
        w = "".join(rng.choice(letters) for _ in range(rng.randint(4, 6)))
        if w not in vocab:
            vocab.append(w)
    weights = [1.0 / (r + 1) ** alpha for r in range(len(vocab))]
    words = rng.choices(vocab, weights=weights, k=budget)  # more words than fit
    counts = Counter()
    ids: list[int] = []
    for i, w in enumerate(words):
        piece = _enc(tok, (" ...." if i % 10 == 9 else "") + " " + w)
        if len(ids) + len(piece) > budget:
            break
        ids += piece
        counts[w] += 1
    # fill the gap with dots, which are not words
    while len(ids) < budget:
        ids += _enc(tok, " .")[: budget - len(ids)]
    top = [w for w, _ in counts.most_common()]
    answers = tuple(top[:3])
    return head, ids, tail, answers, None, ()


_GENERATORS: dict[str, Callable[..., Any]] = {"niah": _niah, "vt": _vt, "cwe": _cwe, "fwe": _fwe}


def generate(
    task: str,
    tokenizer: Any,
    length: int,
    n: int,
    seed: int = 0,
    depth: float | None = None,
    *,
    template: str = "chat",
) -> list[RulerItem]:
    """``n`` seeded prompts of ``task`` with ``length`` tokens each.

    Parameters
    ----------
    task : str
        One of :data:`TASKS`.
    tokenizer : Hugging Face tokenizer
        Lengths are counted in its tokens.
    length : int
        Target prompt length in tokens (chat template and answer prefix included).
    n : int
        Number of prompts (>= 1).
    seed : int
        The same (task, length, n, seed, depth, tokenizer) always gives the same prompts; item ``i``
        does not depend on ``n``.
    depth : float in [0, 1] or None
        Relative depth of the queried needle (``vt``: of the first assignment); None = RULER's random
        depth from a 40-point grid. Ignored by ``cwe``/``fwe``.
    template : {"chat", "base"}
        Wrap in the tokenizer's chat template (falls back to plain text without one) or not.

    Raises
    ------
    ValueError
        Unknown task, ``n <= 0``, ``depth`` outside [0, 1], or a length too short for the needles.
    """
    check_choice("task", task, TASKS)
    check_int("length", length, low=1)
    check_int("n", n, low=1)
    check_int("seed", seed, low=0)
    check_choice("template", template, ("chat", "base"))
    if depth is not None:
        depth = check_float("depth", depth, 0.0, 1.0)
    spec = TASKS[task]
    items = []
    for i in range(n):
        rng = random.Random(f"ruler|{task}|{length}|{seed}|{i}|{depth}")
        head, ctx, tail, answers, real_depth, starts = _GENERATORS[spec.family](
            tokenizer, spec, length, rng, depth, template
        )
        ids = tuple(head + ctx + tail)
        items.append(
            RulerItem(
                task=task,
                length=length,
                index=i,
                input_ids=ids,
                prompt=tokenizer.decode(list(ids)),
                answers=tuple(answers),
                depth=None if real_depth is None else float(real_depth),
                needle_positions=tuple(len(head) + s for s in starts),
                context_start=len(head),
                context_end=len(head) + len(ctx),
                max_new_tokens=spec.max_new_tokens,
            )
        )
    return items


def generate_suite(
    tokenizer: Any, tasks: Sequence[str], lengths: Sequence[int], n: int, seed: int = 0, **kwargs: Any
) -> list[RulerItem]:
    """:func:`generate` over every (task, length) cell, in that order."""
    return [it for t in tasks for L in lengths for it in generate(t, tokenizer, L, n, seed, **kwargs)]


def items_to_json(items: Sequence[RulerItem]) -> list[dict[str, Any]]:
    """JSON-serialisable form of items (for caching or inspection)."""
    return [{**asdict(it), "input_ids": list(it.input_ids)} for it in items]

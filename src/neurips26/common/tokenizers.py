"""Character-level tokenizers that are real ``transformers.PreTrainedTokenizerFast`` objects.

Tiny models trained from scratch on synthetic tasks need a tiny vocabulary. :func:`char_tokenizer`
builds one from an alphabet with the ``tokenizers`` library (a ``WordLevel`` model over single
characters), wrapped in ``PreTrainedTokenizerFast`` so that everything downstream (``model.generate``,
TRL trainers, ``DataCollatorWithPadding``, ``save_pretrained``) treats it like any Hub tokenizer.

Special tokens and ids (shared with :mod:`neurips26.common.models`): ``<pad>`` = 0, ``<s>`` (bos) = 1,
``</s>`` (eos) = 2, ``<unk>`` = 3; characters follow in alphabet order from id 4.
"""

from __future__ import annotations

from collections.abc import Iterable

from neurips26.common.checks import check_choice

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)

#: Alphabet of the arithmetic / countdown tasks in :mod:`neurips26.common.tasks`.
ARITHMETIC_ALPHABET = "0123456789+-*=;:>?, \nTQA"


def char_tokenizer(
    alphabet: str | Iterable[str],
    *,
    add_bos: bool = True,
    padding_side: str = "left",
    model_max_length: int = 1024,
):
    """Build a character-level ``PreTrainedTokenizerFast``.

    Parameters
    ----------
    alphabet : str or iterable of str
        The characters (each of length 1, no duplicates). Characters outside it map to ``<unk>``.
    add_bos : bool
        Prepend ``<s>`` when encoding (through a ``TemplateProcessing`` post-processor, so
        ``add_special_tokens=False`` turns it off).
    padding_side : {"left", "right"}
        Left is what batched generation needs; training code may switch to right.
    model_max_length : int
        Stored on the tokenizer for truncation.

    Returns
    -------
    transformers.PreTrainedTokenizerFast
        ``len(tok) == 4 + len(alphabet)``; ``tok.decode(tok.encode(s), skip_special_tokens=True) == s``
        for every string ``s`` over the alphabet.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    chars = list(alphabet)
    if not chars:
        raise ValueError("alphabet must not be empty")
    for ch in chars:
        if not isinstance(ch, str) or len(ch) != 1:
            raise ValueError(f"alphabet entries must be single characters, got {ch!r}")
    if len(set(chars)) != len(chars):
        dupes = sorted({c for c in chars if chars.count(c) > 1})
        raise ValueError(f"alphabet has duplicate characters: {dupes!r}")
    check_choice("padding_side", padding_side, ("left", "right"))

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in chars:
        vocab[ch] = len(vocab)
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    if add_bos:
        backend.post_processor = processors.TemplateProcessing(
            single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
        )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        padding_side=padding_side,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
    return tok


__all__ = ["char_tokenizer", "ARITHMETIC_ALPHABET", "SPECIAL_TOKENS", "PAD", "BOS", "EOS", "UNK"]

"""Edit requests and their tokenisation (EasyEdit vocabulary)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class EditRequest:
    """One fact edit in EasyEdit's vocabulary.

    Parameters
    ----------
    prompt : str or sequence of int
        The text (or token ids) whose continuation should become ``target_new``; it contains the subject.
    subject : str or (int, int)
        The subject as a substring of ``prompt``, or as a half-open token span ``(start, end)`` when
        ``prompt`` is token ids.
    target_new : str, int or sequence of int
        The new object. Strings get a leading space when the prompt does not end in one (as ROME does).
    ground_truth : str, int, sequence of int, optional
        The old object (used by the ``p(new) > p(old)`` metric).
    """

    prompt: str | Sequence[int]
    subject: str | tuple[int, int]
    target_new: str | int | Sequence[int]
    ground_truth: str | int | Sequence[int] | None = None


@dataclass(frozen=True)
class TokenizedRequest:
    """A request in token ids: ``prompt_ids``, index ``subject_last`` of the last subject token in it,
    ``target_ids`` (new object) and ``truth_ids`` (old object, may be empty)."""

    prompt_ids: tuple[int, ...]
    subject_last: int
    target_ids: tuple[int, ...]
    truth_ids: tuple[int, ...] = ()


def _encode(tokenizer: Any, text: str, bos: bool) -> list[int]:
    if tokenizer is None:
        raise ValueError("tokenizer is required when a request holds strings")
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    bos_id = getattr(tokenizer, "bos_token_id", None)
    if bos and bos_id is not None:
        ids = [bos_id, *ids]
    return ids


def _as_ids(name: str, value: Any, tokenizer: Any, prompt: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, bool):
        raise TypeError(f"{name} must be str, int or a sequence of int, got bool")
    if isinstance(value, int):
        return (value,)
    if isinstance(value, str):
        text = (
            value
            if (isinstance(prompt, str) and prompt.endswith(" ")) or value.startswith(" ")
            else " " + value
        )
        ids = _encode(tokenizer, text, bos=False)
        if not ids:
            raise ValueError(f"{name} {value!r} tokenizes to nothing")
        return tuple(ids)
    ids = tuple(int(t) for t in value)
    if not ids:
        raise ValueError(f"{name} must not be empty")
    return ids


def tokenize_request(request: EditRequest | TokenizedRequest, tokenizer: Any = None) -> TokenizedRequest:
    """Turn an :class:`EditRequest` into token ids and locate the last subject token.

    For string prompts the subject's last token is the last token of ``tokenize(prompt[:end of
    subject])`` (ROME's convention); a BOS token is prepended when the tokenizer has one.

    Raises
    ------
    ValueError
        When the subject does not occur in the prompt, or the span lies outside the prompt.
    """
    if isinstance(request, TokenizedRequest):
        return request
    if not isinstance(request, EditRequest):
        raise TypeError(f"request must be an EditRequest, got {type(request).__name__}")
    prompt, subject = request.prompt, request.subject
    if isinstance(prompt, str):
        if not isinstance(subject, str):
            raise TypeError("subject must be a str when prompt is a str")
        at = prompt.find(subject)
        if not subject or at < 0:
            raise ValueError(f"subject {subject!r} not found in prompt {prompt!r}")
        prompt_ids = _encode(tokenizer, prompt, bos=True)
        head = _encode(tokenizer, prompt[: at + len(subject)], bos=True)
        last = len(head) - 1
    else:
        prompt_ids = [int(t) for t in prompt]
        if not (isinstance(subject, tuple) and len(subject) == 2):
            raise TypeError("subject must be a (start, end) token span when prompt is token ids")
        start, end = subject
        if not (0 <= start < end <= len(prompt_ids)):
            raise ValueError(f"subject span {subject} not found in a prompt of {len(prompt_ids)} tokens")
        last = end - 1
    if not 0 <= last < len(prompt_ids):
        raise ValueError(f"subject {subject!r} not found in prompt {prompt!r}")
    return TokenizedRequest(
        tuple(prompt_ids),
        last,
        _as_ids("target_new", request.target_new, tokenizer, prompt),
        _as_ids("ground_truth", request.ground_truth, tokenizer, prompt),
    )


def _batch(rows: Sequence[Sequence[int]], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(list(r), dtype=torch.long)
        mask[i, : len(r)] = 1
    return ids, mask

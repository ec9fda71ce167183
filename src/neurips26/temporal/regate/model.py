"""REGATE model parts: the bounded policy gate, GraphMixer-lite backbone, REGATE wrapper, naive text
injection and the closed-loop retrieval adapter (see :mod:`neurips26.temporal.regate`)."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor, nn

from neurips26.common.checks import check_float, check_int
from neurips26.common.temporal import check_event_batch, check_float32_model, check_timestamps, time_encoding
from neurips26.temporal.regate.tokens import POLICY_TYPES, Document, TokenBatch, TokenStore


class BoundedPolicyGate(nn.Module):
    """Routing attention over visible tokens and the bounded gated residual (module docstring).

    Ablations: ``priors=False`` drops the log(c w) attention priors, ``bounded=False`` replaces
    :math:`\\rho\\, g \\odot \\tanh(m)` by the unbounded :math:`g \\odot m`.

    Shapes
    ------
    ``h [B, hidden]``, ``tb``: :class:`TokenBatch` of ``[B, k_max]`` tensors (``text [B, k_max, text_dim]``),
    ``t [B]`` -> ``(h_tilde [B, hidden], attn [B, k_max])``.
    """

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
        bounded: bool = True,
    ):
        super().__init__()
        self.hidden = check_int("hidden", hidden, low=1)
        self.rho = check_float("rho", rho, 0.0, low_open=True)
        self.tau_s = check_float("tau_s", tau_s, 0.0, low_open=True)
        self.k_max = check_int("k_max", k_max, low=1)
        self.time_dim = check_int("time_dim", time_dim, low=1)
        self.text_dim = check_int("text_dim", text_dim, low=0)
        self.evidence_gate, self.priors, self.bounded = bool(evidence_gate), bool(priors), bool(bounded)
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
        upd = self.rho * g * torch.tanh(m) if self.bounded else g * m  # bounded=False: the no-bound ablation
        if self.evidence_gate:
            upd = upd * (1 - torch.exp(-(tb.conf * tb.stale * mask).sum(1)))[:, None]
        upd = torch.where(has[:, None], upd, torch.zeros_like(upd))
        return h + upd, attn


class GraphMixerLite(nn.Module):
    """GraphMixer-style node encoder: an MLP-Mixer over each node's last ``k`` events (sent or received).

    Token ``[msg, cos time encoding of t - t_i, sent flag]``; one token-mixing and one channel-mixing block,
    masked mean, plus ``[log1p #events, log1p(t - t_last)]``. State comes from ``observe`` only.

    Shapes
    ------
    - :meth:`observe`: ``src``, ``dst``, ``t`` ``[B]``, ``msg [B, msg_dim]``.
    - :meth:`embed`: ``nodes [B]``, ``t [B]`` -> ``[B, hidden]``.
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
        check_event_batch(src, dst, t, msg, num_nodes=self.num_nodes, msg_dim=self.msg_dim)
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
        check_event_batch(nodes, None, t, num_nodes=self.num_nodes)
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

    Shapes
    ------
    ``src [B]`` (nodes), ``t [B]``, a :class:`TokenStore` -> risk logits ``[B]``; :meth:`observe` as the backbone's.
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
        """Risk logits; in float32 (the backbone's history and the token features are float32): float64
        parameters raise ``TypeError``."""
        check_float32_model(self, "REGATE")
        check_event_batch(src, None, t, num_nodes=getattr(self.backbone, "num_nodes", None))
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

    Shapes
    ------
    ``src [B]`` (nodes), ``t [B]``, a :class:`TokenStore` with document embeddings ``[text_dim]`` -> logits ``[B]``.
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
        with torch.enable_grad():  # callable from inside a no_grad scoring loop
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

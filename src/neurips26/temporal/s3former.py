r"""S3Former: sequence, shared pair-subgraph and online statistics for continuous-time dynamic link prediction.

Paper
-----
S3Former (NeurIPS 2026 submission; full title not public); seed file ``000_f8b4140a0e3b5d84.txt``, abstract
beginning "Continuous-time dynamic graphs model evolving systems". Public: only the abstract (no paper text
or code). The forms below follow the spec (``shared/specs/s3former.md``), which fills the gaps with
DyGFormer, EdgeBank and SEAL-style labelling (marked *inferred* there).

Math
----
A candidate ``(u, v, t)`` is scored from state built only from events observed before the batch
(:class:`CausalHistory`, :class:`OnlineStatMemory`); the batch's events are inserted afterwards.

1. **Sequences.** For :math:`x \in \{u, v\}` the last :math:`L_{long}` and :math:`L_{short}` events
   :math:`(w_i, t_i, e_i)`. Token :math:`[\mathrm{msg}_{e_i}, \phi(t - t_i), \mathrm{MLP}(c_u(w_i), c_v(w_i))]`
   with :math:`\phi` the fixed cosine encoder and :math:`c_x(w)` DyGFormer's co-occurrence counts of
   :math:`w` in :math:`S(x)`. Long sequences are patched (``patch_size`` tokens per patch). One Transformer
   encoder runs over ``[long(u); short(u); long(v); short(v)]``; masked means give
   :math:`h^{long}_x, h^{short}_x \in \mathbb R^d`.
2. **Shared pair subgraph.** :math:`V_{uv} = \{u, v\} \cup N_K(u) \cup N_K(v)` (K most recent distinct
   neighbours), edge weights :math:`w_{ab} = \log(1 + c_{ab}) e^{-(t - \tau_{ab}) / T}`; node labels
   ``[is_u, is_v, log1p c(u,.), log1p c(v,.), common, hop_u one-hot(4), hop_v one-hot(4)]``; two dense GIN
   layers (PyG ``DenseGINConv``); readout ``[mean over common neighbours, mean over all, h_u, h_v]`` plus
   ``log1p`` #common neighbours, ``log1p`` #3-paths u-a-b-v and a decayed Adamic-Adar, mapped to
   :math:`z_{uv}`.
3. **Online statistics.** Node: ``log1p degree, log1p #distinct, log1p(t - t_last), two EMA rates, repeat
   ratio, never-seen flag``; pair: ``log1p c_uv, seen flag, log1p(t - t_last(u,v)), EMA intensity,
   c_uv / deg_u, c_uv / deg_v``; standardised with running moments fitted in training mode, then MLPs
   give :math:`m_x, m_{uv}`.
4. **NodeCCF.** :math:`\alpha_x = \mathrm{softmax}(W_c [m_x, m_{uv}])` over
   :math:`\{h^{long}_x, h^{short}_x, m_x\}`, :math:`r_x = \mathrm{LN}(\sum_k \alpha_{x,k} P_k s_k + P_0 h^{long}_x)`.
5. **PairCCF.** :math:`l_0 = \mathrm{MLP}([r_u \odot r_v, |r_u - r_v|, r_u + r_v])`,
   :math:`\Delta = \mathrm{MLP}([z_{uv}, m_{uv}, r_u \odot r_v])`, :math:`g = \sigma(w^\top [m_{uv}, z_{uv}] + b)`,

   .. math::
       l = l_0 + g\, \Delta.

``fusion="concat"`` replaces 4-5 by one MLP (the hierarchical-fusion ablation); ``fusion="none"`` with
both extra branches off is DyGFormer-lite (step 1 + the :math:`l_0` decoder, :func:`dygformer_lite`).

Shapes
------
- ``score(src [B], dst [B], t [B]) -> [B]`` logits.
- Sequence tokens ``[B, L, F_e + time_dim + d]``; pair subgraph ``x [B, M, 13]``, ``adj [B, M, M]`` with
  ``M = 2 K + 2``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn
from torch_geometric.data import TemporalData
from torch_geometric.nn import DenseGINConv

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.common.temporal import check_event_batch, check_float32_model, check_timestamps, time_encoding

__all__ = [
    "CausalHistory",
    "OnlineStatMemory",
    "SharedPairSubgraph",
    "S3Former",
    "dygformer_lite",
    "default_time_scales",
    "NODE_STATS",
    "PAIR_STATS",
]

NODE_STATS = (
    "log_degree",
    "log_distinct",
    "log_dt_last",
    "ema_short",
    "ema_long",
    "repeat_ratio",
    "never_seen",
)
PAIR_STATS = ("log_count", "seen", "log_dt_last", "ema", "count_over_deg_u", "count_over_deg_v")
_NEVER_DT = 1e9


class CausalHistory:
    """Append-only per-node event buffers (last ``max_per_node`` events) and dense pair counters.

    Pair counters are undirected ``[N, N]`` arrays (count and last time), fine up to a few thousand
    nodes; a hash map replaces them at scale.
    """

    def __init__(self, num_nodes: int, max_per_node: int = 64):
        self.num_nodes = check_int("num_nodes", num_nodes, low=1)
        self.max_per_node = check_int("max_per_node", max_per_node, low=1)
        self.reset()

    def reset(self) -> None:
        n, L = self.num_nodes, self.max_per_node
        self.nbr = np.full((n, L), -1, np.int64)
        self.time = np.zeros((n, L), np.int64)
        self.eid = np.full((n, L), -1, np.int64)
        self.count = np.zeros(n, np.int64)
        self.pair_c = np.zeros((n, n), np.float32)
        self.pair_last = np.full((n, n), -1, np.int64)
        self.last_time = -1
        self.num_events = 0

    def _push(self, x: int, w: int, t: int, e: int) -> None:
        for arr, val in ((self.nbr, w), (self.time, t), (self.eid, e)):
            arr[x, :-1] = arr[x, 1:]
            arr[x, -1] = val
        self.count[x] += 1

    def insert(self, src: Tensor, dst: Tensor, t: Tensor) -> Tensor:
        """Insert events (after they were scored); returns their event ids. Raises if time goes back."""
        t = check_timestamps(t)
        if t.numel() and int(t[0]) < self.last_time:
            raise ValueError(f"t must not decrease across inserts: got {int(t[0])} after {self.last_time}")
        if src.numel() and max(int(src.max()), int(dst.max())) >= self.num_nodes:
            raise ValueError(f"node id >= num_nodes={self.num_nodes}")
        start = self.num_events
        for i, (u, v, tt) in enumerate(zip(src.tolist(), dst.tolist(), t.tolist())):
            e = start + i
            self._push(u, v, tt, e)
            self._push(v, u, tt, e)
            self.pair_c[u, v] += 1
            self.pair_c[v, u] += 1 if u != v else 0
            self.pair_last[u, v] = self.pair_last[v, u] = tt
        self.num_events += src.numel()
        if t.numel():
            self.last_time = int(t[-1])
        return torch.arange(start, self.num_events)

    def recent(self, nodes: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Last ``k`` events of each node, oldest first: ``nbr, t, eid [B, k]`` and ``mask [B, k]``."""
        check_int("k", k, low=1, high=self.max_per_node)
        idx = nodes.numpy()
        nbr, tm, eid = self.nbr[idx, -k:], self.time[idx, -k:], self.eid[idx, -k:]
        valid = np.arange(k)[None, :] >= (k - np.minimum(self.count[idx], k))[:, None]
        return (
            torch.from_numpy(nbr.copy()),
            torch.from_numpy(tm.copy()),
            torch.from_numpy(eid.copy()),
            torch.from_numpy(valid),
        )

    def recent_distinct(self, node: int, k: int) -> list[int]:
        """Up to ``k`` most recent distinct neighbours of ``node`` (most recent first)."""
        out: list[int] = []
        n = min(int(self.count[node]), self.max_per_node)
        for w in self.nbr[node, ::-1][:n].tolist():
            if w not in out:
                out.append(w)
                if len(out) == k:
                    break
        return out

    def pair_count(self, u: Tensor, v: Tensor) -> Tensor:
        return torch.from_numpy(self.pair_c[u.numpy(), v.numpy()].copy())


class OnlineStatMemory:
    """Causal node and pair statistics (past events only), see the module docstring for the features."""

    def __init__(self, num_nodes: int, time_scales: tuple[float, float] = (100.0, 1000.0)):
        self.num_nodes = check_int("num_nodes", num_nodes, low=1)
        if len(time_scales) != 2:
            raise ValueError(f"time_scales must hold two positive floats, got {time_scales!r}")
        self.scales = np.array([check_float("time_scales", s, 0.0, low_open=True) for s in time_scales])
        self.reset()

    def reset(self) -> None:
        n = self.num_nodes
        self.degree = np.zeros(n)
        self.distinct = np.zeros(n)
        self.repeats = np.zeros(n)
        self.t_last = np.full(n, -1, np.int64)
        self.ema = np.zeros((n, 2))
        self.pair_c = np.zeros((n, n), np.float32)
        self.pair_last = np.full((n, n), -1, np.int64)
        self.pair_ema = np.zeros((n, n), np.float32)

    def update(self, src: Tensor, dst: Tensor, t: Tensor) -> None:
        for u, v, tt in zip(src.tolist(), dst.tolist(), t.tolist()):
            rep = self.pair_c[u, v] > 0
            for x in (u, v):
                if self.t_last[x] >= 0:
                    self.ema[x] *= np.exp(-(tt - self.t_last[x]) / self.scales)
                self.ema[x] += 1.0
                self.t_last[x] = tt
                self.degree[x] += 1
                self.repeats[x] += rep
                self.distinct[x] += not rep
            last = self.pair_last[u, v]
            decay = np.exp(-(tt - last) / self.scales[0]) if last >= 0 else 0.0
            val = self.pair_ema[u, v] * decay + 1.0
            self.pair_ema[u, v] = self.pair_ema[v, u] = val
            self.pair_c[u, v] += 1
            if u != v:
                self.pair_c[v, u] += 1
            self.pair_last[u, v] = self.pair_last[v, u] = tt

    def node_stats(self, nodes: Tensor, t: Tensor) -> Tensor:
        """``[B, 7]`` features of :data:`NODE_STATS` at query times ``t``."""
        x, tt = nodes.numpy(), t.numpy()
        seen = self.t_last[x] >= 0
        dt = np.where(seen, tt - self.t_last[x], _NEVER_DT).astype(np.float64)
        ema = self.ema[x] * np.exp(-np.where(seen, dt, 0.0)[:, None] / self.scales)
        out = np.stack(
            [
                np.log1p(self.degree[x]),
                np.log1p(self.distinct[x]),
                np.log1p(dt),
                ema[:, 0],
                ema[:, 1],
                self.repeats[x] / np.maximum(self.degree[x], 1),
                (~seen).astype(np.float64),
            ],
            1,
        )
        return torch.from_numpy(out).float()

    def pair_stats(self, u: Tensor, v: Tensor, t: Tensor) -> Tensor:
        """``[B, 6]`` features of :data:`PAIR_STATS` at query times ``t``."""
        a, b, tt = u.numpy(), v.numpy(), t.numpy()
        c = self.pair_c[a, b].astype(np.float64)
        last = self.pair_last[a, b]
        seen = last >= 0
        dt = np.where(seen, tt - last, _NEVER_DT).astype(np.float64)
        ema = self.pair_ema[a, b] * np.exp(-np.where(seen, dt, 0.0) / self.scales[0])
        out = np.stack(
            [
                np.log1p(c),
                seen.astype(np.float64),
                np.log1p(dt),
                ema,
                c / np.maximum(self.degree[a], 1),
                c / np.maximum(self.degree[b], 1),
            ],
            1,
        )
        return torch.from_numpy(out).float()


class SharedPairSubgraph:
    """History-induced pair subgraph around each candidate, as dense padded tensors.

    ``build`` returns ``x [B, M, 13]`` node labels, ``adj [B, M, M]`` decayed weights, ``mask [B, M]``,
    ``common [B, M]`` (common-neighbour flag) and ``scalars [B, 3]`` (#CN, #3-paths, decayed Adamic-Adar).
    """

    def __init__(self, k: int = 16, t_decay: float = 1000.0):
        self.k = check_int("k", k, low=1)
        self.t_decay = check_float("t_decay", t_decay, 0.0, low_open=True)

    @property
    def size(self) -> int:
        return 2 * self.k + 2

    def build(
        self, u: Tensor, v: Tensor, t: Tensor, history: CausalHistory, degree: np.ndarray | None = None
    ):
        k, M, B = self.k, self.size, u.numel()
        cache: dict[int, list[int]] = {}
        nodes = np.full((B, M), -1, np.int64)
        for b, (a, c) in enumerate(zip(u.tolist(), v.tolist())):
            row = [a, c]
            for x in (a, c):
                if x not in cache:
                    cache[x] = history.recent_distinct(x, k)
                row += cache[x] + [-1] * (k - len(cache[x]))
            nodes[b] = row
        nodes_t = torch.from_numpy(nodes)
        valid = nodes_t >= 0
        same = nodes_t[:, :, None] == nodes_t[:, None, :]
        earlier = torch.tril(torch.ones(M, M, dtype=torch.bool), diagonal=-1)
        dup = (same & earlier[None]).any(-1)  # the node already occupies an earlier slot
        dup[:, :2] = False
        valid &= ~dup
        safe = nodes.clip(0)
        cnt = torch.from_numpy(history.pair_c[safe[:, :, None], safe[:, None, :]])
        last = torch.from_numpy(history.pair_last[safe[:, :, None], safe[:, None, :]])
        pair_mask = valid[:, :, None] & valid[:, None, :] & (cnt > 0)
        pair_mask &= ~torch.eye(M, dtype=torch.bool)[None]
        dt = (t[:, None, None] - last).float().clamp(min=0)
        w = torch.where(pair_mask, torch.log1p(cnt) * torch.exp(-dt / self.t_decay), torch.zeros(()))
        a_bin = pair_mask.float()
        reach2 = (a_bin @ a_bin) > 0

        def hops(i: int) -> Tensor:
            h = torch.full((B, M), 3, dtype=torch.long)
            h = torch.where(reach2[:, i], torch.full_like(h, 2), h)
            h = torch.where(pair_mask[:, i], torch.ones_like(h), h)
            h[:, i] = 0
            return torch.nn.functional.one_hot(h, 4).float()

        common = pair_mask[:, 0] & pair_mask[:, 1]
        x = (
            torch.cat(
                [
                    torch.nn.functional.one_hot(torch.zeros(B, dtype=torch.long), M).float()[:, :, None],
                    torch.nn.functional.one_hot(torch.ones(B, dtype=torch.long), M).float()[:, :, None],
                    torch.log1p(cnt[:, 0])[:, :, None] * valid[:, :, None],
                    torch.log1p(cnt[:, 1])[:, :, None] * valid[:, :, None],
                    common.float()[:, :, None],
                    hops(0),
                    hops(1),
                ],
                -1,
            )
            * valid[:, :, None]
        )
        a3 = (a_bin @ a_bin @ a_bin)[:, 0, 1]
        deg = torch.from_numpy(
            np.asarray(degree if degree is not None else history.count, np.float64)[safe]
        ).float()
        last_cn = torch.maximum(last[:, 0], last[:, 1]).float()
        aa = (
            common.float()
            * torch.exp(-(t[:, None] - last_cn).clamp(min=0) / self.t_decay)
            / torch.log(2 + deg)
        ).sum(1)
        scalars = torch.stack([torch.log1p(common.sum(1).float()), torch.log1p(a3), aa], 1)
        return x, w, valid, common, scalars


def default_time_scales(data: TemporalData) -> dict[str, float]:
    """Median inter-event time ``g`` of ``data`` -> ``{"time_scales": (10 g, 100 g), "t_decay": 100 g}``."""
    gaps = (data.t[1:] - data.t[:-1]).float()
    g = float(gaps[gaps > 0].median()) if (gaps > 0).any() else 1.0
    return {"time_scales": (10.0 * g, 100.0 * g), "t_decay": 100.0 * g}


def _mlp(i: int, h: int, o: int, dropout: float = 0.0) -> nn.Sequential:
    return nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Dropout(dropout), nn.Linear(h, o))


class _Standardizer(nn.Module):
    """Running mean/std (updated in training mode only, so evaluation uses the training-prefix moments)."""

    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("n", torch.zeros(()))
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("m2", torch.zeros(dim))

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        if x.numel():
            nb = float(x.size(0))
            bm = x.mean(0)
            bv = ((x - bm) ** 2).sum(0)
            tot = self.n + nb
            delta = bm - self.mean
            self.mean += delta * nb / tot
            self.m2 += bv + delta**2 * self.n * nb / tot
            self.n.fill_(tot)

    def forward(self, x: Tensor) -> Tensor:
        if float(self.n) < 2:  # not fitted yet: identity
            return x
        std = (self.m2 / self.n.clamp(min=1)).sqrt().clamp(min=1e-3)
        return ((x - self.mean) / std).clamp(-10.0, 10.0)  # unseen ranges at test time stay bounded


class S3Former(nn.Module):
    """S3Former link predictor following :class:`neurips26.common.temporal.StreamModel` (module docstring).

    Parameters
    ----------
    num_nodes : int
    edge_feat_dim : int
        Width of ``msg``.
    hidden, time_dim, long_len, short_len, patch_size, k_sub, num_layers, num_heads, dropout
        As in the spec (defaults: 64, 32, 64, 8, 8, 16, 2, 2, 0.1).
    use_pair_subgraph, use_stats, use_short : bool
        Ablation switches; a switched-off branch has no parameters and feeds zeros to the fusion.
    fusion : {"ccf", "concat", "none"}
        ``none`` uses only the sequence branch and the :math:`l_0` decoder (DyGFormer-lite when the
        other branches are off).
    time_scales, t_decay
        EMA time scales and subgraph decay in the stream's time units (:func:`default_time_scales`).

    Shapes
    ------
    - :meth:`score`: ``src [B]``, ``dst [B]``, ``t [B]`` -> logits ``[B]``.
    - :meth:`observe`: ``src``, ``dst``, ``t`` ``[B]``, ``msg [B, edge_feat_dim]``.
    """

    def __init__(
        self,
        num_nodes: int,
        edge_feat_dim: int,
        hidden: int = 64,
        time_dim: int = 32,
        long_len: int = 64,
        short_len: int = 8,
        patch_size: int = 8,
        k_sub: int = 16,
        num_layers: int = 2,
        num_heads: int = 2,
        dropout: float = 0.1,
        use_pair_subgraph: bool = True,
        use_stats: bool = True,
        use_short: bool = True,
        fusion: str = "ccf",
        time_scales: tuple[float, float] = (100.0, 1000.0),
        t_decay: float = 1000.0,
    ):
        super().__init__()
        check_int("num_nodes", num_nodes, low=1)
        check_int("edge_feat_dim", edge_feat_dim, low=1)
        check_int("hidden", hidden, low=2)
        check_int("time_dim", time_dim, low=1)
        check_int("patch_size", patch_size, low=1)
        check_int("long_len", long_len, low=patch_size)
        if long_len % patch_size:
            raise ValueError(f"long_len ({long_len}) must be a multiple of patch_size ({patch_size})")
        check_int("short_len", short_len, low=1, high=long_len)
        check_int("num_heads", num_heads, low=1)
        if hidden % num_heads:
            raise ValueError(f"hidden ({hidden}) must be divisible by num_heads ({num_heads})")
        check_float("dropout", dropout, 0.0, 1.0, high_open=True)
        self.fusion = check_choice("fusion", fusion, ("ccf", "concat", "none"))
        self.num_nodes, self.edge_feat_dim, self.hidden, self.time_dim = (
            num_nodes,
            edge_feat_dim,
            hidden,
            time_dim,
        )
        self.long_len, self.short_len, self.patch = long_len, short_len, patch_size
        self.use_pair, self.use_stats, self.use_short = (
            bool(use_pair_subgraph),
            bool(use_stats),
            bool(use_short),
        )
        self.history = CausalHistory(num_nodes, max_per_node=long_len)
        self.stats = OnlineStatMemory(num_nodes, time_scales)
        self.subgraph = SharedPairSubgraph(k_sub, t_decay)
        d = hidden
        # sequence branch (DyGFormer-style channels)
        self.cooc = _mlp(2, d, d)
        tok = edge_feat_dim + time_dim + d
        self.long_proj = nn.Linear(tok * patch_size, d)
        self.short_proj = nn.Linear(tok, d) if self.use_short else None
        self.segment = nn.Embedding(4, d)
        layer = nn.TransformerEncoderLayer(d, num_heads, 2 * d, dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        # decoder l0 (shared by every fusion)
        self.base = _mlp(3 * d, d, 1, dropout)
        if self.fusion == "none":
            self.node_out = nn.Linear(2 * d, d)
            return
        if self.use_stats:  # a switched-off branch has no parameters
            self.node_std, self.pair_std = _Standardizer(len(NODE_STATS)), _Standardizer(len(PAIR_STATS))
            self.node_mlp = _mlp(len(NODE_STATS), d, d)
            self.pair_mlp = _mlp(len(PAIR_STATS), d, d)
        if self.use_pair:
            self.sub_in = nn.Linear(13, d)
            self.gin = nn.ModuleList([DenseGINConv(_mlp(d, d, d), train_eps=True) for _ in range(2)])
            self.sub_out = _mlp(4 * d + 3, d, d)
        if self.fusion == "ccf":
            self.gate_c = nn.Linear(2 * d, 3)
            self.proj = nn.ModuleList([nn.Linear(d, d) for _ in range(4)])  # P_0, P_long, P_short, P_m
            self.norm = nn.LayerNorm(d)
            self.delta = _mlp(3 * d, d, 1, dropout)
            self.pair_gate = nn.Linear(2 * d, 1)
        else:
            self.node_cat = _mlp(3 * d, d, d, dropout)
            self.cat_out = _mlp(4 * d, d, 1, dropout)

    # ---------------------------------------------------------------------------------------- state
    def reset_state(self) -> None:
        self.history.reset()
        self.stats.reset()
        self.event_msg = torch.zeros(1, self.edge_feat_dim)  # row 0: padding (event id -1)

    def observe(self, src: Tensor, dst: Tensor, t: Tensor, msg: Tensor) -> None:
        """Append events ``(src, dst, t, msg)`` (``[B]``, ``[B]``, ``[B]``, ``[B, edge_feat_dim]``) to the state."""
        if not hasattr(self, "event_msg"):
            self.reset_state()
        check_event_batch(src, dst, t, msg, num_nodes=self.num_nodes, msg_dim=self.edge_feat_dim)
        self.history.insert(src, dst, t)
        self.stats.update(src, dst, t)
        self.event_msg = torch.cat([self.event_msg, msg.detach().float()])

    # ------------------------------------------------------------------------------------- branches
    def _tokens(self, x, own, other, t: Tensor, length: int):
        nbr, tm, eid, valid = self.history.recent(x, length)
        msg = self.event_msg[eid + 1] * valid[..., None]
        te = time_encoding((t[:, None] - tm).clamp(min=0), self.time_dim) * valid[..., None]
        (own_nbr, own_valid), (other_nbr, other_valid) = own, other
        c_own = ((nbr[:, :, None] == own_nbr[:, None, :]) & own_valid[:, None, :]).sum(-1)
        c_oth = ((nbr[:, :, None] == other_nbr[:, None, :]) & other_valid[:, None, :]).sum(-1)
        cooc = self.cooc(torch.stack([c_own, c_oth], -1).float()) * valid[..., None]
        return torch.cat([msg, te, cooc], -1), valid

    def _sequence(self, u: Tensor, v: Tensor, t: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        L, Ls, p = self.long_len, self.short_len, self.patch
        nu, _, _, mu = self.history.recent(u, L)
        nv, _, _, mv = self.history.recent(v, L)
        segs, pools = [], []
        for i, (x, own, oth) in enumerate(((u, (nu, mu), (nv, mv)), (v, (nv, mv), (nu, mu)))):
            tok, valid = self._tokens(x, own, oth, t, L)
            B = tok.size(0)
            patches = self.long_proj(tok.view(B, L // p, p * tok.size(-1)))
            pvalid = valid.view(B, L // p, p).any(-1)
            segs.append(patches + self.segment.weight[2 * i])
            pools.append(pvalid)
            if self.use_short:
                stok, svalid = self._tokens(x, own, oth, t, Ls)
                segs.append(self.short_proj(stok) + self.segment.weight[2 * i + 1])
                pools.append(svalid)
        h = self.encoder(torch.cat(segs, 1))
        outs, start = [], 0
        for seg, mask in zip(segs, pools):
            part = h[:, start : start + seg.size(1)]
            start += seg.size(1)
            m = mask.float()[..., None]
            outs.append((part * m).sum(1) / m.sum(1).clamp(min=1.0))
        if not self.use_short:
            zero = torch.zeros_like(outs[0])
            outs = [outs[0], zero, outs[1], zero]
        return outs[0], outs[1], outs[2], outs[3]

    def _pair_branch(self, u: Tensor, v: Tensor, t: Tensor) -> Tensor:
        if not self.use_pair:
            return torch.zeros(u.numel(), self.hidden)
        x, adj, mask, common, scalars = self.subgraph.build(u, v, t, self.history, self.stats.degree)
        h = self.sub_in(x)
        for conv in self.gin:
            h = conv(h, adj, mask).relu()
        cm = common.float()[..., None]
        vm = mask.float()[..., None]
        read = torch.cat(
            [
                (h * cm).sum(1) / cm.sum(1).clamp(min=1),
                (h * vm).sum(1) / vm.sum(1).clamp(min=1),
                h[:, 0],
                h[:, 1],
            ],
            -1,
        )
        return self.sub_out(torch.cat([read, scalars], -1))

    def score(self, src: Tensor, dst: Tensor, t: Tensor) -> Tensor:
        """Logits ``[B]`` for candidates ``(src, dst, t)`` from state observed before the call.

        The model computes in float32 (its event history is float32): float64 parameters raise ``TypeError``.
        """
        if not hasattr(self, "event_msg"):
            self.reset_state()
        check_float32_model(self, "S3Former")
        check_event_batch(src, dst, t, num_nodes=self.num_nodes)
        if t.numel() and int(t.min()) < self.history.last_time:
            raise ValueError(
                f"query time {int(t.min())} precedes observed events (last {self.history.last_time}): not causal"
            )
        hl_u, hs_u, hl_v, hs_v = self._sequence(src, dst, t)
        if self.fusion == "none":
            r_u, r_v = self.node_out(torch.cat([hl_u, hs_u], -1)), self.node_out(torch.cat([hl_v, hs_v], -1))
            return self.base(torch.cat([r_u * r_v, (r_u - r_v).abs(), r_u + r_v], -1)).squeeze(-1)
        if self.use_stats:
            ns_u, ns_v = self.stats.node_stats(src, t), self.stats.node_stats(dst, t)
            ps = self.stats.pair_stats(src, dst, t)
            if self.training:  # moments are fitted on training candidates only
                self.node_std.update(torch.cat([ns_u, ns_v]))
                self.pair_std.update(ps)
            m_u, m_v = self.node_mlp(self.node_std(ns_u)), self.node_mlp(self.node_std(ns_v))
            m_uv = self.pair_mlp(self.pair_std(ps))
        else:
            m_u = m_v = m_uv = torch.zeros(src.numel(), self.hidden)
        z = self._pair_branch(src, dst, t)
        if self.fusion == "concat":
            r_u = self.node_cat(torch.cat([hl_u, hs_u, m_u], -1))
            r_v = self.node_cat(torch.cat([hl_v, hs_v, m_v], -1))
            return self.cat_out(torch.cat([r_u, r_v, z, m_uv], -1)).squeeze(-1)
        r = []
        for hl, hs, m in ((hl_u, hs_u, m_u), (hl_v, hs_v, m_v)):
            alpha = torch.softmax(self.gate_c(torch.cat([m, m_uv], -1)), -1)
            mix = sum(alpha[:, k : k + 1] * self.proj[k + 1](s) for k, s in enumerate((hl, hs, m)))
            r.append(self.norm(mix + self.proj[0](hl)))
        r_u, r_v = r
        l0 = self.base(torch.cat([r_u * r_v, (r_u - r_v).abs(), r_u + r_v], -1)).squeeze(-1)
        delta = self.delta(torch.cat([z, m_uv, r_u * r_v], -1)).squeeze(-1)
        g = torch.sigmoid(self.pair_gate(torch.cat([m_uv, z], -1))).squeeze(-1)
        return l0 + g * delta


def dygformer_lite(num_nodes: int, edge_feat_dim: int, **kwargs) -> S3Former:
    """DyGFormer-lite: S3Former's sequence branch with the :math:`l_0` MLP decoder (steps 3-6 removed)."""
    return S3Former(
        num_nodes, edge_feat_dim, use_pair_subgraph=False, use_stats=False, fusion="none", **kwargs
    )

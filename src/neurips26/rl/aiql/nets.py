"""Networks of AIQL: the per-candidate scoring actor (Plackett-Luce ranking policy), action aggregates and critics.

Notation: a batch of ``E`` epochs, each with global features ``g`` ``(E, G)``, up to ``N`` candidate
rows ``x`` ``(E, N, F)`` with a validity ``mask`` ``(E, N)``, and an ordered selection of ``K``
candidate indices ``(E, K)`` where ``-1`` (or any index ``>= N``) marks an unused slot.
"""

from __future__ import annotations

import torch
from torch import nn

from neurips26.common.checks import check_int

NEG_INF = float("-inf")


def mlp(sizes: list[int], activation: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    """``Linear -> act -> ... -> Linear`` with the given layer sizes."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


def _check_batch(global_feats: torch.Tensor, cand_feats: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    if global_feats.ndim != 2 or cand_feats.ndim != 3 or mask.ndim != 2:
        raise ValueError(
            "expected global_feats (E, G), cand_feats (E, N, F), mask (E, N); got "
            f"{tuple(global_feats.shape)}, {tuple(cand_feats.shape)}, {tuple(mask.shape)}"
        )
    if cand_feats.shape[:2] != mask.shape or global_feats.shape[0] != mask.shape[0]:
        raise ValueError(
            f"batch shapes disagree: global {tuple(global_feats.shape)}, candidates {tuple(cand_feats.shape)}, "
            f"mask {tuple(mask.shape)}"
        )
    return mask.bool()


def _valid_slots(selected: torch.Tensor, n: int) -> torch.Tensor:
    return (selected >= 0) & (selected < n)


class CandidateScoringActor(nn.Module):
    """Per-candidate scoring actor with a permutation-invariant set summary (AIQL's actor).

    .. math::  e_i = \\mathrm{ReLU}(W_e x_i), \\quad p = [\\mathrm{mean}_i e_i, \\max_i e_i], \\quad
               s_i = \\mathrm{MLP}_\\theta([g, x_i, p])

    Shared weights over candidates make the scores permutation-equivariant and the cost linear in
    the number of candidates; padded candidates get ``-inf``.

    Parameters
    ----------
    global_dim, cand_dim : int
        ``G`` and ``F``.
    hidden : int
        Width of the scoring MLP (two hidden layers).
    pool_dim : int
        Width of the candidate embedding that is pooled.

    Shapes
    ------
    ``forward``: ``(E, G), (E, N, F), (E, N) -> (E, N)`` scores.
    """

    def __init__(self, global_dim: int, cand_dim: int, hidden: int = 128, pool_dim: int = 32) -> None:
        super().__init__()
        for name, v in (
            ("global_dim", global_dim),
            ("cand_dim", cand_dim),
            ("hidden", hidden),
            ("pool_dim", pool_dim),
        ):
            check_int(name, v, low=1)
        self.embed = nn.Linear(cand_dim, pool_dim)
        self.score = mlp([global_dim + cand_dim + 2 * pool_dim, hidden, hidden, 1])

    def forward(
        self, global_feats: torch.Tensor, cand_feats: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        m = _check_batch(global_feats, cand_feats, mask)
        e = torch.relu(self.embed(cand_feats))  # (E, N, P)
        w = m.unsqueeze(-1).to(e.dtype)
        count = w.sum(1).clamp(min=1.0)
        mean = (e * w).sum(1) / count
        mx = e.masked_fill(~m.unsqueeze(-1), 0.0).amax(1)  # e >= 0, so 0 is neutral for max
        pool = torch.cat([mean, mx], -1)
        N = cand_feats.shape[1]
        inp = torch.cat(
            [global_feats.unsqueeze(1).expand(-1, N, -1), cand_feats, pool.unsqueeze(1).expand(-1, N, -1)], -1
        )
        scores = self.score(inp).squeeze(-1)
        return scores.masked_fill(~m, NEG_INF)

    @staticmethod
    def log_prob(scores: torch.Tensor, mask: torch.Tensor, selected: torch.Tensor) -> torch.Tensor:
        """Plackett-Luce log-probability of an ordered selection.

        .. math::  \\log\\pi(a\\mid s) = \\sum_{b} \\big[s_{a_b} - \\log\\sum_{j \\in C \\setminus \\{a_1..a_{b-1}\\}} e^{s_j}\\big]

        Slots with ``-1`` (or an index ``>= N``) are unused and contribute nothing; an unused slot must
        not precede a used one. Selecting a masked candidate or one twice raises ``ValueError``.

        Shapes: ``(E, N), (E, N), (E, K) -> (E,)``.
        """
        m = mask.bool()
        if selected.ndim != 2 or selected.shape[0] != scores.shape[0]:
            raise ValueError(f"selected must have shape (E, K), got {tuple(selected.shape)}")
        N = scores.shape[1]
        used = _valid_slots(selected, N)
        if bool((~used[:, :-1] & used[:, 1:]).any()):
            raise ValueError("unused slots (-1) must come after the used ones in each selection")
        idx = selected.clamp(0, N - 1)
        picked_valid = m.gather(1, idx)
        if bool((used & ~picked_valid).any()):
            raise ValueError("selected includes a masked (padded or infeasible) candidate")
        remaining = m.clone()
        total = scores.new_zeros(scores.shape[0])
        for b in range(selected.shape[1]):
            u = used[:, b]
            if not bool(u.any()):
                break
            col = idx[:, b]
            if bool((u & ~remaining.gather(1, col[:, None]).squeeze(1)).any()):
                raise ValueError("selected includes the same candidate twice")
            logits = scores.masked_fill(~remaining, NEG_INF)
            lse = torch.logsumexp(logits, 1)
            term = logits.gather(1, col[:, None]).squeeze(1) - lse
            total = total + torch.where(u, term, torch.zeros_like(term))
            remaining = remaining.scatter(1, col[:, None], remaining.gather(1, col[:, None]) & ~u[:, None])
        return total

    @staticmethod
    def select(
        scores: torch.Tensor,
        mask: torch.Tensor,
        k: int,
        greedy: bool = True,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Top-``k`` (greedy) or Gumbel-top-``k`` (a Plackett-Luce sample) ordered selection.

        Raises ``ValueError`` if a row has fewer than ``k`` valid candidates (use
        :func:`select_padded` to fill the rest with ``-1``).

        Shapes: ``(E, N), (E, N) -> (E, k)`` long.
        """
        check_int("k", k, low=1)
        m = mask.bool()
        counts = m.sum(1)
        if bool((counts < k).any()):
            raise ValueError(
                f"k={k} exceeds the number of valid candidates ({int(counts.min())}) in some row"
            )
        keys = scores.detach()
        if not greedy:
            u = torch.rand(scores.shape, generator=generator).clamp(1e-12, 1 - 1e-12)
            keys = keys - torch.log(-torch.log(u))
        keys = keys.masked_fill(~m, NEG_INF)
        return keys.topk(k, dim=1).indices


def select_padded(
    scores: torch.Tensor,
    mask: torch.Tensor,
    k: int,
    greedy: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Like :meth:`CandidateScoringActor.select` but rows with fewer than ``k`` candidates are padded with ``-1``."""
    m = mask.bool()
    keys = scores.detach()
    if not greedy:
        u = torch.rand(scores.shape, generator=generator).clamp(1e-12, 1 - 1e-12)
        keys = keys - torch.log(-torch.log(u))
    keys = keys.masked_fill(~m, NEG_INF)
    kk = min(k, scores.shape[1])
    top = keys.topk(kk, dim=1)
    out = torch.where(torch.isfinite(top.values), top.indices, torch.full_like(top.indices, -1))
    if kk < k:
        out = torch.cat([out, out.new_full((out.shape[0], k - kk), -1)], 1)
    return out


def aggregate_features(
    cand_feats: torch.Tensor, mask: torch.Tensor, selected: torch.Tensor, extra: dict | None = None
) -> torch.Tensor:
    """Fixed-size, order-free summary ``z(s, a)`` of a selected candidate set (the AIQL critic's input).

    ``[count / K, sum(x) / K, max(x), near-dock frees / K, travel / K]`` over the selected rows,
    with the warehouse's feature layout (feature 7 = source in the near zone, feature 4 = signed
    normalised distance); ``extra`` ``{name: (E,) tensor}`` entries are appended as columns.

    Invariant to the order of the selection, of the candidates and of the padding.

    Shapes: ``(E, N, F), (E, N), (E, K) -> (E, 2F + 3 + len(extra))``.
    """
    for name, t, ndim in (("cand_feats", cand_feats, 3), ("mask", mask, 2), ("selected", selected, 2)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.is_meta or t.device != cand_feats.device:
            raise ValueError(
                f"{name} must hold data on cand_feats' device {cand_feats.device}, got {t.device}"
            )
        if t.ndim != ndim:
            raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    if not cand_feats.is_floating_point():
        raise TypeError(f"cand_feats must be a floating-point tensor, got {cand_feats.dtype}")
    if selected.is_floating_point() or selected.dtype == torch.bool:
        raise TypeError(f"selected must be an integer index tensor, got {selected.dtype}")
    E, N, F = cand_feats.shape
    if E == 0 or N == 0 or mask.shape != (E, N) or selected.shape[0] != E:
        raise ValueError(
            f"cand_feats (E, N, F) = {tuple(cand_feats.shape)} (E, N >= 1), mask (E, N) = {tuple(mask.shape)} and "
            f"selected (E, K) = {tuple(selected.shape)} must agree"
        )
    K = selected.shape[1]
    used = _valid_slots(selected, N) & mask.bool().gather(1, selected.clamp(0, N - 1))
    rows = cand_feats.gather(1, selected.clamp(0, N - 1).unsqueeze(-1).expand(-1, -1, F))  # (E, K, F)
    if not bool(torch.isfinite(rows[used]).all()):
        raise ValueError("cand_feats contains NaN or inf in a selected candidate row")
    rows = torch.where(used.unsqueeze(-1), rows, torch.zeros_like(rows))  # padding never reaches the sums
    for name, v in (extra or {}).items():
        if not isinstance(v, torch.Tensor) or v.numel() != E:
            raise TypeError(f"extra[{name!r}] must be a tensor of E = {E} values, got {type(v).__name__}")
    w = used.unsqueeze(-1).to(rows.dtype)
    count = w.sum(1)
    total = (rows * w).sum(1)
    mx = torch.where(used.unsqueeze(-1), rows, rows.new_full((), -1.0)).amax(1)
    mx = torch.where(count > 0, mx, torch.zeros_like(mx))
    near = total[:, 7:8] if F > 7 else torch.zeros_like(count)
    travel = ((rows[..., 4:5].abs() * 10 + 1) * w).sum(1) / 10.0 if F > 4 else torch.zeros_like(count)
    parts = [count / K, total / K, mx, near / K, travel / K]
    if extra:
        parts += [v.reshape(-1, 1).to(rows.dtype) for v in extra.values()]
    return torch.cat(parts, -1)


def flat_action_features(
    cand_feats: torch.Tensor, mask: torch.Tensor, selected: torch.Tensor, extra=None
) -> torch.Tensor:
    """The "standard IQL" action encoding: the selected rows' features concatenated in order (zeros for unused slots).

    Order-dependent and without domain aggregates (the symmetric baseline to AIQL's aggregate critic).

    Shapes: ``(E, N, F), (E, N), (E, K) -> (E, K * F)``.
    """
    N, F = cand_feats.shape[1], cand_feats.shape[2]
    used = _valid_slots(selected, N) & mask.bool().gather(1, selected.clamp(0, N - 1))
    rows = cand_feats.gather(1, selected.clamp(0, N - 1).unsqueeze(-1).expand(-1, -1, F))
    return (rows * used.unsqueeze(-1).to(rows.dtype)).reshape(rows.shape[0], -1)


class StateActionCritic(nn.Module):
    """``Q(g, z)``: an MLP on the global features and a fixed-size action summary.

    Shapes
    ------
    ``forward``: ``global_feats (E, G)``, ``action_feats (E, Z)`` -> ``(E,)``.
    """

    def __init__(self, global_dim: int, action_dim: int, hidden: int = 128) -> None:
        super().__init__()
        self.net = mlp([global_dim + action_dim, hidden, hidden, 1])

    def forward(self, global_feats: torch.Tensor, action_feats: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([global_feats, action_feats], -1)).squeeze(-1)


class StateValue(nn.Module):
    """``V(g)``: an MLP on the global features.

    Shapes
    ------
    ``forward``: ``global_feats (E, G)`` -> ``(E,)``.
    """

    def __init__(self, global_dim: int, hidden: int = 128) -> None:
        super().__init__()
        self.net = mlp([global_dim, hidden, hidden, 1])

    def forward(self, global_feats: torch.Tensor) -> torch.Tensor:
        return self.net(global_feats).squeeze(-1)


__all__ = [
    "CandidateScoringActor",
    "StateActionCritic",
    "StateValue",
    "aggregate_features",
    "flat_action_features",
    "mlp",
    "select_padded",
]

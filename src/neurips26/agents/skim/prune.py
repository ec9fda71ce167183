"""Role-wise activation statistics and saliency pruning (SKIM, Wanda, magnitude).

For a linear layer ``y = x W^T`` with ``W: [d_out, d_in]``, calibration tokens of role :math:`c`
(context, decision, format) give counts :math:`n_c` and per-input-channel sums of squares
:math:`S_c[j] = \\sum_{t \\in c} x_{t,j}^2`. The saliencies are

.. math::

    \\text{magnitude: } |W_{ij}|, \\qquad
    \\text{Wanda: } |W_{ij}| \\sqrt{\\textstyle\\sum_c S_c[j]} = |W_{ij}| \\, \\lVert X_{:,j} \\rVert_2, \\qquad
    \\text{SKIM: } |W_{ij}| \\sqrt{\\textstyle\\sum_c w_c S_c[j] / n_c}

(SKIM's per-role means can be switched off with ``normalize=False``; then uniform weights give
Wanda exactly). Within every output row the :math:`\\lfloor s \\, d_{in} \\rfloor` lowest scores are
zeroed (Wanda's per-output comparison group), or 2 of every 4 consecutive inputs (``pattern="2:4"``).

Shapes
------
``RoleStats.sumsq``: ``[3, d_in]``; ``RoleStats.counts``: ``[3]``; saliencies and masks: ``[d_out, d_in]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from neurips26.agents.skim.grammar import role_weight_vector
from neurips26.common.checks import check_choice, check_float, check_int, check_tensor

#: Default role weights of the saliency (spec, inferred): decision 1.0, context 0.3, format 0.05.
SALIENCY_WEIGHTS = {"decision": 1.0, "context": 0.3, "format": 0.05}
PRUNE_METHODS = ("skim", "wanda", "magnitude")


@dataclass
class RoleStats:
    """Per-role token counts and per-input-channel sums of squares of one linear layer's inputs (fp64)."""

    counts: torch.Tensor
    sumsq: torch.Tensor

    @classmethod
    def zeros(cls, d_in: int) -> RoleStats:
        return cls(
            torch.zeros(3, dtype=torch.float64),
            torch.zeros(3, check_int("d_in", d_in, low=1), dtype=torch.float64),
        )

    def add(self, x: torch.Tensor, roles: torch.Tensor) -> None:
        """Accumulate inputs ``x: [N, d_in]`` with roles ``[N]`` (negative roles are skipped)."""
        x = x.detach().reshape(-1, x.shape[-1]).to(torch.float64)
        roles = roles.reshape(-1)
        for c in range(3):
            sel = roles == c
            if sel.any():
                xs = x[sel]
                self.counts[c] += xs.shape[0]
                self.sumsq[c] += (xs * xs).sum(0)

    def merge(self, other: RoleStats) -> RoleStats:
        """Sum of two statistics (the data sets are disjoint halves of one calibration set)."""
        if self.sumsq.shape != other.sumsq.shape:
            raise ValueError(f"cannot merge stats of widths {self.sumsq.shape[1]} and {other.sumsq.shape[1]}")
        return RoleStats(self.counts + other.counts, self.sumsq + other.sumsq)

    def all_reduce(self, group=None) -> RoleStats:
        """Sum the statistics over a ``torch.distributed`` process group in place; returns ``self``."""
        import torch.distributed as dist

        dist.all_reduce(self.counts, group=group)
        dist.all_reduce(self.sumsq, group=group)
        return self


def find_prunable(model: nn.Module) -> list[str]:
    """Names of the ``nn.Linear`` modules inside the decoder blocks (``...layers.<i>...``), in order."""
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and ".layers." in f".{n}"]
    if not names:
        raise ValueError("model has no nn.Linear inside decoder blocks (module names containing 'layers.')")
    return names


@torch.no_grad()
def collect_role_stats(
    model: nn.Module,
    input_ids: torch.Tensor,
    roles: torch.Tensor,
    *,
    attention_mask: torch.Tensor | None = None,
    modules: Sequence[str] | None = None,
    batch_size: int = 32,
) -> dict[str, RoleStats]:
    """Run ``model`` on calibration sequences and accumulate :class:`RoleStats` for every prunable linear.

    Parameters
    ----------
    input_ids, roles : LongTensor[B, L]
        Right-padded sequences and their roles (``IGNORE`` = -1 positions are not counted).
    attention_mask : LongTensor[B, L], optional
    modules : sequence of str, optional
        Module names (default :func:`find_prunable`).
    """
    if input_ids.shape != roles.shape or input_ids.dim() != 2:
        raise ValueError(
            f"input_ids and roles must both be [B, L], got {tuple(input_ids.shape)}, {tuple(roles.shape)}"
        )
    check_int("batch_size", batch_size, low=1)
    names = list(modules) if modules is not None else find_prunable(model)
    table = dict(model.named_modules())
    missing = [n for n in names if not isinstance(table.get(n), nn.Linear)]
    if missing:
        raise ValueError(f"modules are not nn.Linear in the model: {missing[:5]}")
    stats = {n: RoleStats.zeros(table[n].in_features) for n in names}
    current: dict[str, torch.Tensor] = {}
    hooks = []
    for n in names:
        hooks.append(
            table[n].register_forward_pre_hook(lambda mod, args, n=n: stats[n].add(args[0], current["roles"]))
        )
    mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
    was_training = model.training
    model.eval()
    try:
        for s in range(0, input_ids.shape[0], batch_size):
            current["roles"] = roles[s : s + batch_size]
            model(input_ids=input_ids[s : s + batch_size], attention_mask=mask[s : s + batch_size])
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    return stats


def _check_weight(weight: torch.Tensor, name: str = "weight") -> None:
    check_tensor(name, weight)
    if weight.dim() != 2:
        raise ValueError(f"{name} must be a 2-D tensor [d_out, d_in], got shape {tuple(weight.shape)}")


def _check_stats(weight: torch.Tensor, stats: RoleStats) -> None:
    if not isinstance(stats, RoleStats):
        raise TypeError(f"stats must be RoleStats, got {type(stats).__name__}")
    if stats.sumsq.shape[1] != weight.shape[1]:
        raise ValueError(f"stats have {stats.sumsq.shape[1]} input channels, weight has {weight.shape[1]}")


def magnitude_saliency(weight: torch.Tensor) -> torch.Tensor:
    """``|W|``, shape ``[d_out, d_in]``."""
    _check_weight(weight)
    return weight.detach().abs().to(torch.float64)


def wanda_saliency(weight: torch.Tensor, stats: RoleStats) -> torch.Tensor:
    """Wanda: ``|W_ij| * ||X_j||_2`` over all calibration tokens (roles pooled, unweighted)."""
    _check_weight(weight)
    _check_stats(weight, stats)
    norm = stats.sumsq.sum(0).sqrt()
    return weight.detach().abs().to(torch.float64) * norm[None, :]


def skim_saliency(
    weight: torch.Tensor,
    stats: RoleStats,
    role_weights: dict[str, float] | None = None,
    *,
    normalize: bool = True,
) -> torch.Tensor:
    """SKIM: ``|W_ij| * sqrt(sum_c w_c S_c[j] / n_c)``; ``normalize=False`` drops the ``/ n_c``.

    Roles with no calibration tokens contribute nothing.
    """
    _check_weight(weight)
    _check_stats(weight, stats)
    w = role_weight_vector(role_weights, SALIENCY_WEIGHTS)
    if normalize:
        denom = stats.counts.clamp_min(1.0)
        per_role = stats.sumsq / denom[:, None]
    else:
        per_role = stats.sumsq
    norm = (w[:, None] * per_role).sum(0).sqrt()
    return weight.detach().abs().to(torch.float64) * norm[None, :]


def saliency_mask(scores: torch.Tensor, sparsity: float, pattern: str | None = None) -> torch.Tensor:
    """Keep-mask ``BoolTensor[d_out, d_in]``: per row the ``floor(s d_in)`` lowest scores are dropped.

    Ties are broken by column index (lower index dropped first). ``pattern="2:4"`` keeps the 2 highest
    of every 4 consecutive columns (needs ``sparsity == 0.5`` and ``d_in % 4 == 0``).
    """
    sparsity = check_float("sparsity", sparsity, 0.0, 1.0, high_open=True)
    _check_weight(scores, "scores")
    d_out, d_in = scores.shape
    if pattern is not None:
        check_choice("pattern", pattern, ("2:4",))
        if sparsity != 0.5:
            raise ValueError(f"pattern '2:4' fixes sparsity at 0.5, got sparsity={sparsity}")
        if d_in % 4:
            raise ValueError(f"pattern '2:4' needs d_in divisible by 4, got {d_in}")
        groups = scores.reshape(d_out, d_in // 4, 4)
        order = torch.sort(groups, dim=-1, stable=True).indices
        keep = torch.ones_like(groups, dtype=torch.bool)
        keep.scatter_(-1, order[..., :2], False)
        return keep.reshape(d_out, d_in)
    k = math.floor(sparsity * d_in)
    if not k:
        return torch.ones(d_out, d_in, dtype=torch.bool)
    # selection instead of a full sort: drop everything below the k-th smallest score, then the
    # first (by column) of the entries tied with it until exactly k are dropped
    kth = scores.kthvalue(k, dim=1, keepdim=True).values
    drop = scores < kth
    tied = scores == kth
    need = k - drop.sum(1, keepdim=True)
    drop |= tied & (tied.cumsum(1) <= need)
    return ~drop


@dataclass
class PruneResult:
    """Keep-masks (``True`` = weight kept) and achieved sparsity per pruned module."""

    masks: dict[str, torch.Tensor]
    sparsity: dict[str, float] = field(default_factory=dict)
    method: str = ""

    @torch.no_grad()
    def reapply(self, model: nn.Module) -> None:
        """Zero the pruned weights again (after an optimiser step)."""
        table = dict(model.named_modules())
        for name, keep in self.masks.items():
            weight = table[name].weight
            weight.mul_(keep.to(weight.dtype))

    @property
    def overall(self) -> float:
        """Fraction of pruned weights over all pruned modules."""
        total = sum(m.numel() for m in self.masks.values())
        return sum(float((~m).sum()) for m in self.masks.values()) / max(total, 1)


@torch.no_grad()
def prune_model(
    model: nn.Module,
    stats: dict[str, RoleStats] | None,
    sparsity: float,
    method: str = "skim",
    *,
    pattern: str | None = None,
    role_weights: dict[str, float] | None = None,
    modules: Sequence[str] | None = None,
) -> PruneResult:
    """Prune the decoder-block linears of ``model`` in place (one shot, from the dense statistics).

    Parameters
    ----------
    model : nn.Module
    stats : dict name -> RoleStats
        From :func:`collect_role_stats` (may be ``None`` for ``method="magnitude"``).
    sparsity : float in [0, 1)
    method : {"skim", "wanda", "magnitude"}
    pattern : None or "2:4"
    role_weights : dict, optional
        SKIM's role weights (keys ``context``, ``decision``, ``format``).
    modules : sequence of str, optional
        Default: every module in ``stats`` (or :func:`find_prunable` for magnitude).
    """
    sparsity = check_float("sparsity", sparsity, 0.0, 1.0, high_open=True)
    check_choice("method", method, PRUNE_METHODS)
    if method != "magnitude" and not isinstance(stats, dict):
        raise TypeError(f"method {method!r} needs stats (dict name -> RoleStats) from collect_role_stats")
    if role_weights is not None:
        role_weight_vector(role_weights, SALIENCY_WEIGHTS)
    names = list(modules) if modules is not None else (list(stats) if stats else find_prunable(model))
    table = dict(model.named_modules())
    result = PruneResult(masks={}, method=method)
    for name in names:
        layer = table.get(name)
        if not isinstance(layer, nn.Linear):
            raise ValueError(f"module {name!r} is not an nn.Linear of the model")
        if method == "magnitude":
            scores = magnitude_saliency(layer.weight)
        elif name not in stats:
            raise KeyError(f"no statistics for module {name!r}")
        elif method == "wanda":
            scores = wanda_saliency(layer.weight, stats[name])
        else:
            scores = skim_saliency(layer.weight, stats[name], role_weights)
        keep = saliency_mask(scores, sparsity, pattern)
        layer.weight.mul_(keep.to(layer.weight.dtype))
        result.masks[name] = keep
        result.sparsity[name] = float((~keep).sum()) / keep.numel()
    return result


__all__ = [
    "SALIENCY_WEIGHTS",
    "PRUNE_METHODS",
    "RoleStats",
    "find_prunable",
    "collect_role_stats",
    "magnitude_saliency",
    "wanda_saliency",
    "skim_saliency",
    "saliency_mask",
    "PruneResult",
    "prune_model",
]

"""The baselines: target-only cosine reranking and NQR-lite. Part of :mod:`neurips26.kg.score` (see its docstring for the paper and the math)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.kg.score.metrics import Session, _mean_metrics, _select, session_metrics


class CosineReranker:
    """Target-only "Cosine" baseline of the precursor paper (arXiv 2508.13663).

    .. math::
        s' = \\alpha s + (1 - \\alpha)\\Big[\\tfrac{1 + \\beta}{2} \\overline{\\mathrm{sim}}_{+}
             - \\tfrac{1 - \\beta}{2} \\overline{\\mathrm{sim}}_{-}\\Big]
    """

    def __init__(self, alpha: float = 0.25, beta: float = 0.5):
        self.alpha = check_float("alpha", alpha, 0.0, 1.0)
        self.beta = check_float("beta", beta, -1.0, 1.0)

    def __call__(self, scores: Tensor, pref_sim: Tensor, labels: Tensor) -> Tensor:
        labels = torch.as_tensor(labels)
        zero = torch.zeros(scores.shape[-1], dtype=pref_sim.dtype)
        pos = pref_sim[labels == 1].mean(0) if (labels == 1).any() else zero
        neg = pref_sim[labels == 0].mean(0) if (labels == 0).any() else zero
        bonus = (1 + self.beta) / 2 * pos - (1 - self.beta) / 2 * neg
        return self.alpha * scores + (1 - self.alpha) * bonus

    def fit(
        self,
        bases: list[Tensor],
        sims: list[Tensor],
        valid_sessions: list[Session],
        grid=((0.25, 0.5, 0.75, 0.9), (0.0, 0.5, 0.75, 1.0)),
        metric: str = "ndcg",
    ) -> tuple[float, float]:
        """Grid-search ``(alpha, beta)`` on validation sessions given their base scores and example similarities."""
        check_choice("metric", metric, ("ndcg", "pref_mrr", "pairwise", "mrr_all"))
        if not valid_sessions or not (len(bases) == len(sims) == len(valid_sessions)):
            raise ValueError("bases, sims and valid_sessions must be non-empty and of equal length")
        results = []
        for alpha in grid[0]:
            for beta in grid[1]:
                self.alpha, self.beta = (
                    check_float("alpha", alpha, 0.0, 1.0),
                    check_float("beta", beta, -1.0, 1.0),
                )
                rows = [
                    session_metrics(self(b, sim, s.pref_labels), s)
                    for b, sim, s in zip(bases, sims, valid_sessions)
                ]
                results.append(((float(alpha), float(beta)), _mean_metrics(rows)))
        self.alpha, self.beta = _select(results, metric)
        return self.alpha, self.beta


class NQRLite(torch.nn.Module):
    """Learned neural reranker baseline ("NQR-lite", precursor arXiv 2508.13663), target only.

    An MLP maps per-entity features ``[logit(base score), mean positive sim, mean negative sim,
    entity embedding]`` to an additive delta: :math:`s'_e = \\mathrm{logit}(s_e) + \\mathrm{MLP}(x_e)`.

    Args:
        embedding_dim (int): size of the (real view of the) entity embeddings.
        hidden (int, optional): hidden width. (default: ``32``)

    Shapes:
        - **input:** base scores ``[N]``, similarities ``[P, N]``, labels ``[P]``, embeddings ``[N, D]``
        - **output:** reranked scores ``[N]``
    """

    def __init__(self, embedding_dim: int, hidden: int = 32):
        super().__init__()
        check_int("embedding_dim", embedding_dim, low=1)
        check_int("hidden", hidden, low=1)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(embedding_dim + 3, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
        )

    @staticmethod
    def features(
        scores: Tensor, pref_sim: Tensor, labels: Tensor, embeddings: Tensor, eps: float = 1e-6
    ) -> Tensor:
        """``[N, D + 3]`` features of every entity."""
        labels = torch.as_tensor(labels)
        n = scores.shape[-1]
        zero = torch.zeros(n, dtype=pref_sim.dtype)
        pos = pref_sim[labels == 1].mean(0) if (labels == 1).any() else zero
        neg = pref_sim[labels == 0].mean(0) if (labels == 0).any() else zero
        base = torch.logit(scores.clamp(eps, 1 - eps)) / 10.0
        return torch.cat([torch.stack([base, pos, neg], 1), embeddings], 1)

    def forward(self, features: Tensor) -> Tensor:
        """Reranked scores ``[..., N]`` from features ``[..., N, D + 3]``."""
        return features[..., 0] * 10.0 + self.mlp(features).squeeze(-1)


def train_nqr(
    model: NQRLite,
    features: list[Tensor],
    sessions: list[Session],
    *,
    steps: int = 200,
    lr: float = 1e-2,
    margin: float = 1.0,
    negatives: int = 16,
    seed: int = 0,
    valid_features: list[Tensor] | None = None,
    valid_sessions: list[Session] | None = None,
    metric: str = "ndcg",
    eval_every: int = 10,
) -> list[float]:
    """Train :class:`NQRLite` full-batch with a pairwise hinge loss on training sessions.

    The loss averages :math:`\\max(0, m - (s'_a - s'_b))` over all pairs (preferred answer, other hard
    answer) of all sessions, plus the same over pairs (hard answer, one of ``negatives`` sampled
    non-answers of its session). Adam. With ``valid_sessions`` (and their ``valid_features``) the
    validation ``metric`` is computed every ``eval_every`` steps and at the end, and the best state is
    restored (early stopping, the learned baseline's counterpart of SCORE's grid search).
    Returns the loss per step.
    """
    check_int("steps", steps, low=1)
    check_float("lr", lr, 0.0, low_open=True)
    check_float("margin", margin, 0.0)
    if not sessions or len(features) != len(sessions):
        raise ValueError("features and sessions must be non-empty and of equal length")
    check_choice("metric", metric, ("ndcg", "pref_mrr", "pairwise", "mrr_all"))
    check_int("eval_every", eval_every, low=1)
    if bool(valid_sessions) != bool(valid_features) or len(valid_sessions or []) != len(valid_features or []):
        raise ValueError("valid_features and valid_sessions must be given together, with equal lengths")
    torch.manual_seed(check_int("seed", seed, low=0))
    for p in model.parameters():  # seeded re-initialisation: the result depends on ``seed`` only
        if p.dim() > 1:
            torch.nn.init.kaiming_uniform_(p, a=math.sqrt(5))
        else:
            torch.nn.init.uniform_(p, -0.05, 0.05)
    x = torch.stack(features)  # [S, N, F]
    gen = torch.Generator().manual_seed(seed)
    po, hn = [], []  # (session, better, worse) index triples
    for i, s in enumerate(sessions):
        pref, oth = s.preferred.tolist(), s.other.tolist()
        po += [(i, a, b) for a in pref for b in oth]
        non = torch.ones(x.shape[1], dtype=torch.bool)
        non[s.preferred] = non[s.other] = non[s.easy] = False
        non_ids = non.nonzero().flatten()
        non_ids = non_ids[torch.randperm(non_ids.numel(), generator=gen)[:negatives]].tolist()
        hn += [(i, a, b) for a in pref + oth for b in non_ids]
    groups = [torch.tensor(g, dtype=torch.long).view(-1, 3) for g in (po, hn)]
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    best = (-math.inf, None)

    def validate(step: int) -> None:
        nonlocal best
        with torch.no_grad():
            out = model(torch.stack(valid_features))
            value = sum(session_metrics(o, s)[metric] for o, s in zip(out, valid_sessions)) / len(
                valid_sessions
            )
        if value > best[0]:
            best = (value, {k: v.detach().clone() for k, v in model.state_dict().items()})

    for step in range(steps):
        if valid_sessions and step % eval_every == 0:
            validate(step)
        out = model(x)
        loss = sum(
            (margin - (out[g[:, 0], g[:, 1]] - out[g[:, 0], g[:, 2]])).clamp(min=0).mean()
            for g in groups
            if g.numel()
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    if valid_sessions:
        validate(steps)
        model.load_state_dict(best[1])
    model.eval()
    return losses

r"""The InvGNN-WM watermark: readout head, private key, black-box queries and :class:`InvGNNWatermark`.

.. math::
    L_{wm} = \lambda_{wm}\Big[\tfrac1K \sum_k (h_k - t_k)^2
             + \mu \tfrac1K \sum_k \max(0,\, m - s_k (h_k - c))\Big], \quad s_k = 2 b_k - 1

with ``h_k = h_psi(R(f_theta(G_k)))``; decoding ``\hat b_k = 1[h_k > c]``.

Shapes
------
- node-task query: ``Data -> logits [n, C]``; graph-task query: ``Data -> [1, C]``.
- :class:`InvariantHead`: readout ``[C]`` (mean) or ``[2C]`` (mean and std) -> ``[1]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Batch, Data
from torch_geometric.utils import scatter

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.graph.invgnn_wm.carriers import CarrierSet, _sampler_from_state
from neurips26.graph.invgnn_wm.verify import Verification, _verification

TASKS = ("node", "graph")
READOUTS = ("mean", "meanstd", "graph")


# ============================================================================================ head
class InvariantHead(nn.Module):
    r"""Private scalar head ``h_psi``: reads a carrier's invariant from the model's output on it.

    ``readout="mean"``: mean over the carrier's node logits (``R`` has ``C`` dims);
    ``"meanstd"``: mean and std (``2C`` dims); ``"graph"``: the model already returns one logit row per
    graph (``C`` dims). Then ``Linear(R, hidden) - ReLU - Linear(hidden, 1)``. The readouts are
    invariant to node order, so decoded bits do not depend on how a carrier's nodes are labelled.

    Parameters
    ----------
    in_dim : int
        ``C``, the model's output dimension.
    hidden : int
        Hidden width (16 in the spec).
    readout : {"mean", "meanstd", "graph"}

    Shapes
    ------
    ``out [N, C]`` node logits with ``batch [N]`` (or None for one graph) -> ``[B]``;
    ``readout="graph"``: ``out [B, C]`` (or ``[C]``) -> ``[B]``.
    """

    def __init__(self, in_dim: int, hidden: int = 16, readout: str = "mean") -> None:
        super().__init__()
        check_int("in_dim", in_dim, low=1)
        check_int("hidden", hidden, low=1)
        check_choice("readout", readout, READOUTS)
        self.in_dim, self.hidden, self.readout = in_dim, hidden, readout
        feat = 2 * in_dim if readout == "meanstd" else in_dim
        self.mlp = nn.Sequential(nn.Linear(feat, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def features(self, out: Tensor, batch: Tensor | None = None) -> Tensor:
        """The readout ``R``: ``[B, C]`` or ``[B, 2C]``."""
        if not isinstance(out, Tensor):
            raise TypeError(f"model output must be a Tensor, got {type(out).__name__}")
        if out.dim() == 1:
            out = out.unsqueeze(0)
        if out.dim() != 2:
            raise ValueError(f"model output must be [N, C], got shape {tuple(out.shape)}")
        if out.size(-1) != self.in_dim:
            raise ValueError(
                f"head input dimension {self.in_dim} differs from the model's output dimension {out.size(-1)}"
            )
        if self.readout == "graph":
            return out
        if batch is None:
            batch = torch.zeros(out.size(0), dtype=torch.long, device=out.device)
        mean = scatter(out, batch, dim=0, reduce="mean")
        if self.readout == "mean":
            return mean
        sq = scatter(out * out, batch, dim=0, reduce="mean")
        std = (sq - mean * mean).clamp_min(0.0).add(1e-8).sqrt()
        return torch.cat([mean, std], dim=-1)

    def forward(self, out: Tensor, batch: Tensor | None = None) -> Tensor:
        return self.mlp(self.features(out, batch)).squeeze(-1)


# ============================================================================================ key
@dataclass
class WatermarkKey:
    """Everything the owner keeps private to re-run verification later.

    The carriers themselves are not stored: they are regenerated from ``seed`` and the generation
    config (``families``, ``n_range``, ``feature_sampler``), so the key is small.
    """

    seed: int
    num_carriers: int
    families: tuple[str, ...]
    n_range: tuple[int, int]
    reference: float
    key_bits: Tensor | None
    head_state: dict
    out_dim: int = 0
    task: str = "node"
    readout: str = "meanstd"
    hidden: int = 16
    normalization: str = "sym"
    feature_sampler: dict | None = None
    min_gap: float = 1e-6
    loss: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_int("seed", self.seed, low=0)
        check_int("num_carriers", self.num_carriers, low=8)
        check_float("reference", self.reference, 0.0, 1.0)  # a normalised algebraic connectivity
        check_choice("task", self.task, TASKS)
        self.families = tuple(self.families)
        self.n_range = (int(self.n_range[0]), int(self.n_range[1]))

    def save(self, path: str | Path) -> None:
        """Write the key with ``torch.save`` (tensors and plain containers only; loads with weights_only)."""
        blob = {k: getattr(self, k) for k in self.__dataclass_fields__}
        blob["families"] = list(self.families)
        blob["n_range"] = list(self.n_range)
        torch.save(blob, Path(path))

    @classmethod
    def load(cls, path: str | Path) -> WatermarkKey:
        blob = torch.load(Path(path), weights_only=True)
        return cls(**blob)


# ============================================================================================ watermark
def node_query(model: nn.Module) -> Callable[[Data], Tensor]:
    """Black-box query for a node-level model: ``Data -> logits [n, C]`` (eval mode, no grad)."""

    def query(g: Data) -> Tensor:
        was = model.training
        model.eval()
        with torch.no_grad():
            out = model(g.x, g.edge_index)
        model.train(was)
        return out

    return query


def graph_query(model: nn.Module) -> Callable[[Data], Tensor]:
    """Black-box query for a graph-level model: ``Data -> logits [1, C]`` (eval mode, no grad)."""

    def query(g: Data) -> Tensor:
        was = model.training
        model.eval()
        with torch.no_grad():
            out = model(g.x, g.edge_index, torch.zeros(g.num_nodes, dtype=torch.long))
        model.train(was)
        return out

    return query


class InvGNNWatermark:
    """InvGNN-WM embedding and verification for one owner key.

    Parameters
    ----------
    carriers : CarrierSet
        The private carriers.
    out_dim : int
        ``C``, the protected model's output dimension.
    task : {"node", "graph"}
        Node task: the model maps ``(x, edge_index) -> [N, C]`` and the head reads mean/std over a
        carrier's nodes. Graph task: ``(x, edge_index, batch) -> [B, C]``, read directly.
    lambda_wm, mu, margin : float
        Loss weights and hinge margin (1.0, 1.0, 0.05 in the spec).
    use_key_bits : bool
        Draw secret key bits ``kappa`` (from the carrier seed) and reflect the targets; the owner bits
        become an exactly balanced random string unrelated to the honest invariant ordering.
    hidden : int
        Head width.
    readout : str, optional
        Head readout; default ``"meanstd"`` (node) or ``"graph"`` (graph).

    Notes
    -----
    The head is trained jointly with the model during embedding: pass ``[*model.parameters(),
    *wm.parameters()]`` to the optimiser and add :meth:`watermark_loss` to the task loss.
    """

    def __init__(
        self,
        carriers: CarrierSet,
        out_dim: int,
        task: str = "node",
        lambda_wm: float = 1.0,
        mu: float = 1.0,
        margin: float = 0.05,
        use_key_bits: bool = False,
        *,
        hidden: int = 16,
        readout: str | None = None,
        null_weight: float = 1.0,
    ) -> None:
        if not isinstance(carriers, CarrierSet):
            raise TypeError(f"carriers must be a CarrierSet, got {type(carriers).__name__}")
        check_int("out_dim", out_dim, low=1)
        check_choice("task", task, TASKS)
        self.lambda_wm = check_float("lambda_wm", lambda_wm, 0.0)
        self.mu = check_float("mu", mu, 0.0)
        self.margin = check_float("margin", margin, 0.0)
        if readout is None:
            readout = "meanstd" if task == "node" else "graph"
        check_choice("readout", readout, READOUTS)
        if (task == "graph") != (readout == "graph"):
            raise ValueError(
                f"readout {readout!r} does not fit task {task!r} (graph task <-> 'graph' readout)"
            )
        self.null_weight = check_float("null_weight", null_weight, 0.0)
        self.carriers, self.out_dim, self.task = carriers, out_dim, task
        self._reference_outputs: list[Tensor] = []
        seed = carriers.seed if carriers.seed is not None else 0
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 104729)
            self.head = InvariantHead(out_dim, hidden, readout)
        k = len(carriers)
        if use_key_bits:
            gen = torch.Generator().manual_seed(seed + 15485863)
            target_bits = torch.zeros(k, dtype=torch.long)
            target_bits[torch.randperm(k, generator=gen)[: k // 2]] = 1
            self.key_bits: Tensor | None = target_bits ^ carriers.bits
        else:
            self.key_bits = None
        self._set_targets()
        # decoy string for reference models: agrees with the owner bits on exactly floor(K/2) carriers
        gen = torch.Generator().manual_seed(seed + 32452843)
        agree = torch.zeros(k, dtype=torch.bool)
        agree[torch.randperm(k, generator=gen)[: k // 2]] = True
        self.decoy_signs = torch.where(agree, self.signs, -self.signs)
        self._batch = Batch.from_data_list(
            [Data(x=g.x, edge_index=g.edge_index, num_nodes=g.num_nodes) for g in carriers.graphs]
        )

    def _set_targets(self) -> None:
        a, c = self.carriers.invariants.float(), self.carriers.reference
        kappa = self.key_bits if self.key_bits is not None else torch.zeros_like(self.carriers.bits)
        self.targets = torch.where(kappa.bool(), 2 * c - a, a)
        self.bits = self.carriers.bits ^ kappa
        self.signs = (2 * self.bits - 1).float()

    @property
    def num_bits(self) -> int:
        return len(self.carriers)

    @property
    def reference(self) -> float:
        return self.carriers.reference

    def parameters(self):
        """The private head's parameters (train them jointly with the model during embedding)."""
        return self.head.parameters()

    def head_outputs(self, model: nn.Module) -> Tensor:
        """``h_k`` for all carriers in one batched forward (differentiable). Shape ``[K]``."""
        out = self._carrier_outputs(model)
        return self.head(out, self._batch.batch if self.task == "node" else None)

    def _carrier_outputs(self, model: nn.Module) -> Tensor:
        b = self._batch
        out = model(b.x, b.edge_index) if self.task == "node" else model(b.x, b.edge_index, b.batch)
        if not isinstance(out, Tensor):
            raise TypeError(f"model must return a Tensor, got {type(out).__name__}")
        expect = b.num_nodes if self.task == "node" else len(self.carriers)
        if out.dim() != 2 or out.size(0) != expect:
            raise ValueError(f"model output on the carriers must be [{expect}, C], got {tuple(out.shape)}")
        return out

    def set_reference_models(self, models: Sequence[nn.Module]) -> None:
        """Register owner-trained non-watermarked reference models for the null-contrast term.

        Their carrier outputs are computed once (eval mode, no grad) and stored; during embedding the
        hinge ``null_weight * mean_r mean_k max(0, m - s'_k (h_psi(R(f_r(G_k))) - c))`` is added, where
        ``s'`` is a secret *decoy* sign string agreeing with the owner bits on exactly ``floor(K/2)``
        carriers. The head must then decode the decoy from the task's natural output variation (which
        every model trained on the same task shares), so a non-watermarked model matches the owner bits
        at chance and the mark has to live in the protected model itself (our addition: without it a
        jointly trained head can fit the bits from natural variation and independent models pass).
        """
        outs = []
        for m in models:
            was = m.training
            m.eval()
            with torch.no_grad():
                outs.append(self._carrier_outputs(m).detach())
            m.train(was)
        self._reference_outputs = outs

    def watermark_loss(self, model: nn.Module) -> Tensor:
        """``L_wm`` (scalar, differentiable in the model and the head) to add to the task loss."""
        h = self.head_outputs(model)
        mse = (h - self.targets).pow(2).mean()
        hinge = F.relu(self.margin - self.signs * (h - self.reference)).mean()
        loss = mse + self.mu * hinge
        if self._reference_outputs and self.null_weight > 0:
            batch = self._batch.batch if self.task == "node" else None
            null = torch.stack(
                [
                    F.relu(self.margin - self.decoy_signs * (self.head(o, batch) - self.reference)).mean()
                    for o in self._reference_outputs
                ]
            )
            loss = loss + self.null_weight * null.mean()
        return self.lambda_wm * loss

    def scores(self, query_fn: Callable[[Data], Tensor]) -> Tensor:
        """Head outputs ``h_k`` from K black-box queries, ``[K]`` (no gradient)."""
        if not callable(query_fn):
            raise TypeError("query_fn must be callable: Data -> model output")
        was = self.head.training
        self.head.eval()
        out = []
        with torch.no_grad():
            for g in self.carriers.graphs:
                y = query_fn(g)
                out.append(self.head(y).reshape(-1)[0])
        self.head.train(was)
        return torch.stack(out)

    def decode(self, query_fn: Callable[[Data], Tensor]) -> Tensor:
        """Decoded bits ``1[h_k > c]``, int64 ``[K]``; ``query_fn`` maps a carrier ``Data`` to the model output."""
        return (self.scores(query_fn) > self.reference).long()

    def matches(self, query_fn: Callable[[Data], Tensor]) -> int:
        return int((self.decode(query_fn) == self.bits).sum())

    def verify(
        self, query_fn: Callable[[Data], Tensor], alpha: float = 1e-3, empirical_null: Tensor | None = None
    ) -> Verification:
        """Ownership test at false-positive rate ``alpha`` (binomial, raised by an empirical null if given)."""
        check_float("alpha", alpha, 0.0, 1.0, low_open=True, high_open=True)
        return _verification(self.matches(query_fn), self.num_bits, alpha, 0.5, empirical_null)

    def key(self) -> WatermarkKey:
        cfg = self.carriers.config
        if self.carriers.seed is None or "n_range" not in cfg:
            raise ValueError("only carriers made by CarrierSet.generate can be turned into a regenerable key")
        return WatermarkKey(
            seed=int(self.carriers.seed),
            num_carriers=len(self.carriers),
            families=tuple(cfg["families"]),
            n_range=tuple(cfg["n_range"]),
            reference=float(self.reference),
            key_bits=None if self.key_bits is None else self.key_bits.clone(),
            head_state={k: v.detach().clone() for k, v in self.head.state_dict().items()},
            out_dim=self.out_dim,
            task=self.task,
            readout=self.head.readout,
            hidden=self.head.hidden,
            normalization=self.carriers.normalization,
            feature_sampler=cfg.get("feature_sampler"),
            min_gap=float(cfg.get("min_gap", 1e-6)),
            loss={
                "lambda_wm": self.lambda_wm,
                "mu": self.mu,
                "margin": self.margin,
                "null_weight": self.null_weight,
            },
        )

    @classmethod
    def from_key(cls, key: WatermarkKey) -> InvGNNWatermark:
        """Regenerate the carriers from the key and restore the private head."""
        sampler = _sampler_from_state(key.feature_sampler)
        if sampler is None:
            raise ValueError("key has no feature sampler state; cannot regenerate carrier features")
        carriers = CarrierSet.generate(
            key.seed,
            key.num_carriers,
            key.n_range,
            key.families,
            sampler,
            normalization=key.normalization,
            min_gap=key.min_gap,
        )
        if not math.isclose(carriers.reference, key.reference, rel_tol=0, abs_tol=1e-9):
            raise ValueError("regenerated carriers do not reproduce the key's reference level")
        wm = cls(
            carriers,
            key.out_dim,
            key.task,
            use_key_bits=False,
            hidden=key.hidden,
            readout=key.readout,
            **key.loss,
        )
        wm.key_bits = None if key.key_bits is None else key.key_bits.clone().long()
        wm._set_targets()
        wm.head.load_state_dict(key.head_state)
        return wm

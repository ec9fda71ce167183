r"""Baseline: backdoor-trigger GNN watermark (Xu et al. 2021, arXiv 2110.11024 style).

A fixed random Erdos-Renyi trigger is attached to key inputs relabelled to a target class; ownership
is the trigger accuracy against a binomial null.

.. math::
    M = \sum_{j=1}^{N_{key}} 1[\arg\max f(G_j^{trig}) = y_t], \qquad M \sim \mathrm{Bin}(N_{key}, 1/C)
    \text{ under } H_0

Shapes
------
- node task: one key graph with ``key_index [N_key]``; graph task: ``N_key`` key graphs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Batch, Data

from neurips26.common.checks import check_float, check_int
from neurips26.common.gnn import _is_graph_data, fit
from neurips26.graph.invgnn_wm.carriers import GaussianFeatureSampler, _nx_to_edge_index
from neurips26.graph.invgnn_wm.verify import Verification, _verification


class BackdoorWatermark:
    """Backdoor-trigger GNN watermark (baseline, Xu et al. 2021, arXiv 2110.11024 style).

    A fixed random Erdos-Renyi trigger subgraph (``trigger_size`` nodes, edge probability
    ``trigger_p``, fixed random Gaussian features with the task features' per-dimension mean/std) is
    attached to ``num_keys`` key inputs, which are relabelled to ``target_class``. Node task: each
    key node (a non-test node whose label is not the target) gets its own copy of the trigger wired
    to it; the triggered graph is one ``Data``. Graph task: the trigger is attached by one edge to a random node of each key graph
    (training graphs whose label is not the target). Training adds ``lambda_wm * CE(key -> target)``
    to the task loss; ownership is claimed when the number of key inputs classified as the target
    reaches a binomial threshold with chance ``1/C`` (raised by an empirical null if given).

    Parameters
    ----------
    data : Data or list of Data
        The task data the keys are drawn from.
    num_classes : int
        ``C``.
    num_keys : int
        Number of key inputs (``>= 8``).
    trigger_size : int
        Trigger nodes (``>= 2``).
    target_class : int
    trigger_p : float
        Edge probability of the ER trigger (a connected draw is kept).
    seed : int
    lambda_wm : float
    """

    def __init__(
        self,
        data: Data | Sequence[Data],
        num_classes: int,
        num_keys: int = 32,
        trigger_size: int = 4,
        target_class: int = 0,
        trigger_p: float = 0.8,
        seed: int = 0,
        lambda_wm: float = 1.0,
    ) -> None:
        import networkx as nx

        check_int("num_classes", num_classes, low=2)
        check_int("num_keys", num_keys)
        if num_keys < 8:
            raise ValueError(f"num_keys must be >= 8, got {num_keys}")
        check_int("trigger_size", trigger_size, low=2)
        check_int("target_class", target_class, low=0, high=num_classes - 1)
        check_float("trigger_p", trigger_p, 0.0, 1.0, low_open=True)
        self.lambda_wm = check_float("lambda_wm", lambda_wm, 0.0)
        self.num_classes, self.num_keys, self.target_class = num_classes, num_keys, target_class
        self.task = "graph" if _is_graph_data(data) else "node"
        rng = np.random.default_rng([seed, 2110])
        gen = torch.Generator().manual_seed(seed + 11024)
        for _ in range(100):
            tg = nx.gnp_random_graph(trigger_size, trigger_p, seed=int(rng.integers(0, 2**31 - 1)))
            if nx.is_connected(tg):
                break
        t_ei, _ = _nx_to_edge_index(tg)
        if self.task == "node":
            bank = data.x
            eligible = torch.nonzero((~data.test_mask) & (data.y != target_class)).view(-1)
        else:
            bank = torch.cat([g.x for g in data], 0)
            eligible = torch.tensor([i for i, g in enumerate(data) if int(g.y.view(-1)[0]) != target_class])
        if eligible.numel() < num_keys:
            raise ValueError(f"only {eligible.numel()} eligible key inputs, need num_keys={num_keys}")
        # random trigger features with the data's per-dimension mean/std (no class signal), as in Xu et al.
        t_x = GaussianFeatureSampler.from_features(bank)(trigger_size, gen)
        self.trigger_x, self.trigger_edge_index = t_x, t_ei
        keys = eligible[torch.randperm(eligible.numel(), generator=gen)[:num_keys]]
        self.keys = keys
        if self.task == "node":
            self.key_graph = self._trigger_node_graph(data, keys)
            self._key_batch = self.key_graph
        else:
            self.key_graphs = [self._trigger_graph(data[int(i)], rng) for i in keys]
            self._key_batch = Batch.from_data_list(self.key_graphs)

    def _trigger_node_graph(self, data: Data, keys: Tensor) -> Data:
        n, s = data.num_nodes, self.trigger_x.size(0)
        xs, eis = [data.x], [data.edge_index]
        for j, v in enumerate(keys.tolist()):
            base = n + j * s
            eis.append(self.trigger_edge_index + base)
            wire = torch.stack([torch.full((s,), v, dtype=torch.long), torch.arange(base, base + s)])
            eis.append(torch.cat([wire, wire.flip(0)], 1))
            xs.append(self.trigger_x)
        y = data.y.clone()
        y[keys] = self.target_class
        y = torch.cat([y, torch.full((len(keys) * s,), -1, dtype=torch.long)])
        return Data(
            x=torch.cat(xs, 0),
            edge_index=torch.cat(eis, 1),
            y=y,
            key_index=keys.clone(),
            num_nodes=n + len(keys) * s,
        )

    def _trigger_graph(self, g: Data, rng: np.random.Generator) -> Data:
        n, s = g.num_nodes, self.trigger_x.size(0)
        v = int(rng.integers(0, n))
        wire = torch.tensor([[v, n], [n, v]], dtype=torch.long)
        ei = torch.cat([g.edge_index, self.trigger_edge_index + n, wire], 1)
        return Data(
            x=torch.cat([g.x, self.trigger_x], 0),
            edge_index=ei,
            y=torch.tensor([self.target_class]),
            num_nodes=n + s,
        )

    def parameters(self):
        return iter(())

    def watermark_loss(self, model: nn.Module) -> Tensor:
        """``lambda_wm * CE(model(key inputs), target)`` (scalar, differentiable)."""
        b = self._key_batch
        if self.task == "node":
            out = model(b.x, b.edge_index)[b.key_index]
        else:
            out = model(b.x, b.edge_index, b.batch)
        target = torch.full((out.size(0),), self.target_class, dtype=torch.long)
        return self.lambda_wm * F.cross_entropy(out, target)

    def embed(
        self, model: nn.Module, data: Data | Sequence[Data], epochs: int, lr: float = 1e-2, seed: int = 0
    ) -> dict[str, Any]:
        """Train ``model`` in place on the task plus the trigger set; returns :func:`fit`'s stats."""
        return fit(model, data, epochs, lr, watermark=self, seed=seed)

    def matches(self, query_fn: Callable[[Data], Tensor]) -> int:
        """Number of key inputs the suspect classifies as the target (black-box queries)."""
        with torch.no_grad():
            if self.task == "node":
                pred = query_fn(self.key_graph)[self.key_graph.key_index].argmax(-1)
            else:
                pred = torch.stack(
                    [query_fn(g).reshape(-1, self.num_classes)[0] for g in self.key_graphs]
                ).argmax(-1)
        return int((pred == self.target_class).sum())

    def verify(
        self, query_fn: Callable[[Data], Tensor], alpha: float = 1e-3, empirical_null: Tensor | None = None
    ) -> Verification:
        """Ownership test: trigger accuracy against a binomial(``num_keys``, ``1/C``) null."""
        check_float("alpha", alpha, 0.0, 1.0, low_open=True, high_open=True)
        return _verification(
            self.matches(query_fn), self.num_keys, alpha, 1.0 / self.num_classes, empirical_null
        )

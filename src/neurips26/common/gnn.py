r"""Small PyG GNNs, their training loop and accuracy, shared by the graph methods.

Used by :mod:`neurips26.graph.invgnn_wm` (the watermarked models, the attacks and the claim) and
:mod:`neurips26.graph.sgnnbench` (node-classification accuracy). :func:`make_gnn` builds a GCN/SAGE
node classifier or a GIN/GCN/SAGE + mean-pool graph classifier; :func:`fit` trains it with Adam on the
task's cross-entropy (plus an optional extra loss such as a watermark loss); :func:`accuracy` and
:func:`masked_accuracy` score it.

.. math::
    L = \mathrm{CE}(f_\theta(x, A)_{\mathrm{train}}, y_{\mathrm{train}}) \; [+ L_{extra}],\qquad
    \mathrm{acc}_M = \frac{1}{|M|} \sum_{v \in M} \mathbb 1[\arg\max_c f_\theta(x, A)_{v,c} = y_v]

Shapes
------
- node task: ``(x [N, F], edge_index [2, E]) -> [N, C]``;
- graph task: ``(x [N, F], edge_index [2, E], batch [N]) -> [B, C]``;
- :func:`masked_accuracy`: logits ``[N, C]``, labels ``[N]``, mask ``[N]`` (bool) -> a float.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GCNConv, GINConv, SAGEConv, global_mean_pool

from neurips26.common.checks import check_choice, check_float, check_int

__all__ = ["TASKS", "make_gnn", "fit", "accuracy", "masked_accuracy"]

TASKS = ("node", "graph")


def masked_accuracy(logits: Tensor, y: Tensor, mask: Tensor) -> float:
    """Fraction of the nodes in ``mask`` whose arg-max logit is their label."""
    return float((logits[mask].argmax(-1) == y[mask]).float().mean())


class _NodeGNN(nn.Module):
    def __init__(self, conv: str, in_dim: int, hidden: int, out_dim: int, num_layers: int, dropout: float):
        super().__init__()
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        make = {"gcn": lambda i, o: GCNConv(i, o), "sage": lambda i, o: SAGEConv(i, o)}[conv]
        self.convs = nn.ModuleList(make(i, o) for i, o in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = F.dropout(x, self.dropout, self.training)
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.relu(x)
        return x


class _GraphGNN(nn.Module):
    def __init__(self, conv: str, in_dim: int, hidden: int, out_dim: int, num_layers: int, dropout: float):
        super().__init__()
        self.convs = nn.ModuleList()
        for i in range(num_layers):
            d = in_dim if i == 0 else hidden
            if conv == "gin":
                mlp = nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
                self.convs.append(GINConv(mlp))
            elif conv == "gcn":
                self.convs.append(GCNConv(d, hidden))
            else:
                self.convs.append(SAGEConv(d, hidden))
        self.lin = nn.Linear(hidden, out_dim)
        self.dropout = dropout

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        if batch is None:
            batch = torch.zeros(x.size(0), dtype=torch.long, device=x.device)
        for conv in self.convs:
            x = F.relu(conv(x, edge_index))
        x = global_mean_pool(x, batch)
        return self.lin(F.dropout(x, self.dropout, self.training))


def make_gnn(
    arch: str,
    in_dim: int,
    out_dim: int,
    hidden: int = 64,
    num_layers: int = 2,
    task: str = "node",
    dropout: float = 0.5,
) -> nn.Module:
    """A small PyG model: ``arch`` in {"gcn", "sage"} (node) or {"gin", "gcn", "sage"} + mean pool (graph).

    Shapes: node task ``(x [N, F], edge_index [2, E]) -> [N, C]``; graph task
    ``(x [N, F], edge_index [2, E], batch [N]) -> [B, C]``.
    """
    check_choice("task", task, TASKS)
    check_choice("arch", arch, ("gcn", "sage") if task == "node" else ("gin", "gcn", "sage"))
    check_int("in_dim", in_dim, low=1)
    check_int("out_dim", out_dim, low=1)
    check_int("hidden", hidden, low=1)
    check_int("num_layers", num_layers, low=1)
    check_float("dropout", dropout, 0.0, 1.0, high_open=True)
    cls = _NodeGNN if task == "node" else _GraphGNN
    return cls(arch, in_dim, hidden, out_dim, num_layers, dropout)


def _is_graph_data(data: Any) -> bool:
    if isinstance(data, Data):
        return False
    if isinstance(data, (list, tuple)) and data and all(isinstance(g, Data) for g in data):
        return True
    raise TypeError(
        "data must be a Data with train_mask (node task) or a non-empty list of Data graphs (graph task)"
    )


def _graph_batches(graphs: Sequence[Data], batch_size: int, gen: torch.Generator | None) -> list[Batch]:
    order = torch.randperm(len(graphs), generator=gen) if gen is not None else torch.arange(len(graphs))
    return [
        Batch.from_data_list([graphs[int(i)] for i in order[s : s + batch_size]])
        for s in range(0, len(graphs), batch_size)
    ]


def _task_loss(model: nn.Module, batch: Data, graph: bool) -> Tensor:
    if graph:
        return F.cross_entropy(model(batch.x, batch.edge_index, batch.batch), batch.y.view(-1))
    out = model(batch.x, batch.edge_index)
    return F.cross_entropy(out[batch.train_mask], batch.y[batch.train_mask])


def fit(
    model: nn.Module,
    data: Data | Sequence[Data],
    epochs: int,
    lr: float = 1e-2,
    *,
    weight_decay: float = 5e-4,
    watermark: Any = None,
    train_watermark_head: bool = True,
    batch_size: int = 64,
    seed: int = 0,
) -> dict[str, Any]:
    """Train ``model`` in place with Adam on the task loss (+ ``watermark.watermark_loss(model)``).

    Node task: full-batch cross-entropy on ``data.train_mask``. Graph task: ``data`` is a list of
    graphs with ``y [1]``; mini-batches of ``batch_size`` shuffled by a generator seeded with ``seed``;
    the watermark loss is added once per mini-batch step.

    Returns
    -------
    dict
        ``loss`` (per-epoch mean), ``sec_per_epoch``.
    """
    check_int("epochs", epochs, low=0)
    check_float("lr", lr, 0.0, low_open=True)
    graph = _is_graph_data(data)
    params = list(model.parameters())
    if watermark is not None and train_watermark_head and hasattr(watermark, "parameters"):
        params += list(watermark.parameters())
    opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    start = time.perf_counter()
    for _ in range(epochs):
        batches = _graph_batches(data, batch_size, gen) if graph else [data]
        total = 0.0
        for b in batches:
            opt.zero_grad()
            loss = _task_loss(model, b, graph)
            if watermark is not None:
                loss = loss + watermark.watermark_loss(model)
            loss.backward()
            opt.step()
            total += float(loss.detach())
        losses.append(total / len(batches))
    elapsed = time.perf_counter() - start
    model.eval()
    return {"loss": losses, "sec_per_epoch": elapsed / max(epochs, 1)}


def accuracy(model: nn.Module, data: Data | Sequence[Data], mask: str = "test_mask") -> float:
    """Test accuracy: node task on ``data[mask]``; graph task over the given list of graphs."""
    model.eval()
    with torch.no_grad():
        if _is_graph_data(data):
            b = Batch.from_data_list(list(data))
            return float((model(b.x, b.edge_index, b.batch).argmax(-1) == b.y.view(-1)).float().mean())
        return masked_accuracy(model(data.x, data.edge_index), data.y, getattr(data, mask))

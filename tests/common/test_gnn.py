import pytest
import torch
from torch_geometric.data import Data

from neurips26.common.gnn import accuracy, fit, make_gnn, masked_accuracy


def _node_data(seed=0, n=12, f=5, c=3):
    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, 30), generator=gen)
    y = torch.randint(0, c, (n,), generator=gen)
    train = torch.zeros(n, dtype=torch.bool)
    train[: n // 2] = True
    return Data(x=torch.randn(n, f, generator=gen), edge_index=ei, y=y, train_mask=train, test_mask=~train)


def test_masked_accuracy_counts_only_the_mask():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0], [0.0, 5.0]])
    y = torch.tensor([0, 0, 1, 1])
    assert masked_accuracy(logits, y, torch.tensor([True, True, False, False])) == 0.5
    assert masked_accuracy(logits, y, torch.tensor([True, False, False, True])) == 1.0
    assert masked_accuracy(logits, y, torch.tensor([False, True, True, False])) == 0.0


def test_shapes_node_equivariance_and_graph_invariance():
    torch.manual_seed(0)
    data = _node_data()
    eps = torch.finfo(torch.float32).eps
    node = make_gnn("gcn", 5, 3).eval()
    out = node(data.x, data.edge_index)
    assert out.shape == (12, 3)
    # relabelling the nodes permutes the rows: the message sums run in another order, so
    # bound: layers * (max_deg + 1 + F + hidden) * eps32 * max|out| (2 layers, F = 5, hidden = 64)
    max_deg = int(torch.bincount(data.edge_index[1], minlength=12).max())
    bound = 2 * (max_deg + 1 + 5 + 64) * eps * float(out.abs().max())
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(1))
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(12)
    torch.testing.assert_close(node(data.x[perm], inv[data.edge_index]), out[perm], rtol=0.0, atol=bound)
    g = make_gnn("gin", 5, 4, task="graph").eval()
    # two graphs (the edges are kept inside each half), mean-pooled per graph
    ei = data.edge_index[:, (data.edge_index < 6).all(0) | (data.edge_index >= 6).all(0)]
    batch = torch.tensor([0] * 6 + [1] * 6)
    pooled = g(data.x, ei, batch)
    assert pooled.shape == (2, 4)
    # each graph's output is its own: the first graph alone gives row 0, whatever the other graph holds
    alone = g(data.x[:6], ei[:, (ei < 6).all(0)], torch.zeros(6, dtype=torch.long))
    bound = 2 * (12 + 5 + 64) * eps * float(pooled.abs().max())
    torch.testing.assert_close(alone[0], pooled[0], rtol=0.0, atol=bound)
    assert not torch.allclose(pooled[0], pooled[1])  # and the two graphs differ


def test_fit_is_seeded_and_accuracy_is_the_masked_accuracy():
    data = _node_data()
    runs = []
    for _ in range(2):
        torch.manual_seed(1)
        model = make_gnn("sage", 5, 3, dropout=0.0)
        runs.append((fit(model, data, epochs=3, seed=0)["loss"], model))
    assert runs[0][0] == runs[1][0] and len(runs[0][0]) == 3
    model = runs[0][1]
    with torch.no_grad():
        expected = masked_accuracy(model(data.x, data.edge_index), data.y, data.test_mask)
    assert accuracy(model, data) == expected


def test_bad_arguments():
    with pytest.raises(ValueError, match="arch"):
        make_gnn("gin", 5, 3, task="node")
    with pytest.raises(TypeError, match="data"):
        fit(make_gnn("gcn", 5, 3), "not data", epochs=1)


def test_invgnn_wm_uses_the_shared_helpers():
    from neurips26.common import gnn
    from neurips26.graph.invgnn_wm import training

    assert training.fit is gnn.fit and training.make_gnn is gnn.make_gnn and training.accuracy is gnn.accuracy

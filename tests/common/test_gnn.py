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


def test_shapes_node_and_graph():
    torch.manual_seed(0)
    data = _node_data()
    assert make_gnn("gcn", 5, 3)(data.x, data.edge_index).shape == (12, 3)
    g = make_gnn("gin", 5, 4, task="graph")
    batch = torch.tensor([0] * 6 + [1] * 6)
    assert g(data.x, data.edge_index, batch).shape == (2, 4)


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

"""Graph caches must never serve a stale graph (issue 23, defect 2).

A degree-preserving rewiring (double edge swap) keeps the node count, the edge count, every
node's degree and every degree-weighted index sum the old cache keys were built from; the cached
layers must still return the new graph's output, exactly as an uncached layer does. Normalisation
runs in the input's dtype, so a float64 model stays float64 end to end.
"""

import pytest
import torch
from torch_geometric.nn import GCNConv
from torch_geometric.utils import to_torch_coo_tensor

from neurips26.graph.gcn_mlp import GCNMLP, structural_features
from neurips26.graph.sgnnbench import GCNPropagation, SpikingGCNConv


def _rewired_pair():
    """Two undirected graphs on 8 nodes with the same degree sequence and index sums, different edges.

    Swap (0-1, 2-3) -> (0-3, 2-1): node degrees are unchanged, and so are the sums of source and
    target ids (each id appears equally often), which the old fingerprints were built from.
    """
    base = [(0, 1), (2, 3), (4, 5), (6, 7), (1, 4), (3, 6), (5, 0), (7, 2)]
    swap = [(0, 3), (2, 1), (4, 5), (6, 7), (1, 4), (3, 6), (5, 0), (7, 2)]

    def und(pairs):
        src = [a for a, b in pairs] + [b for a, b in pairs]
        dst = [b for a, b in pairs] + [a for a, b in pairs]
        return torch.tensor([src, dst])

    a, b = und(base), und(swap)
    assert not torch.equal(a, b)  # same kernel: n/a, asserts a difference
    assert torch.equal(torch.bincount(a[0], minlength=8), torch.bincount(b[0], minlength=8))  # same kernel: integer counts
    return a, b


def _gcn_reference(x, edge_index, K):
    conv = GCNConv(x.size(1), x.size(1), bias=False, cached=False).to(x.dtype)
    with torch.no_grad():
        conv.lin.weight.copy_(torch.eye(x.size(1), dtype=x.dtype))
    for _ in range(K):
        x = conv(x, edge_index)
    return x


def test_propagation_cache_follows_a_degree_preserving_rewiring():
    a, b = _rewired_pair()
    x = torch.randn(8, 3, generator=torch.Generator().manual_seed(0))
    prop = GCNPropagation(K=2, cached=True)
    out_a = prop(x, a)
    out_b = prop(x, b)  # same node count, edge count, degrees and index sums as a
    fresh_b = GCNPropagation(K=2, cached=False)(x, b)
    assert (out_b - fresh_b).abs().max().item() == 0.0  # same kernel: cached normalisation
    assert (out_a - out_b).abs().max().item() > 1e-3  # the rewiring really changes the output
    torch.testing.assert_close(out_b, _gcn_reference(x, b, 2))
    # back to a and an in-place rewrite of the same tensor object
    assert torch.equal(prop(x, a), out_a)  # same kernel
    c = a.clone()
    prop(x, c)
    c.copy_(b)
    assert torch.equal(prop(x, c), fresh_b)  # same kernel


def test_propagation_cache_keys_on_edge_weights():
    a, _ = _rewired_pair()
    x = torch.randn(8, 3, generator=torch.Generator().manual_seed(1))
    prop = GCNPropagation(K=1, cached=True)
    w1 = torch.rand(a.size(1), generator=torch.Generator().manual_seed(2))
    w2 = w1.flip(0)
    prop(x, a, w1)
    assert torch.equal(prop(x, a, w2), GCNPropagation(K=1, cached=False)(x, a, w2))  # same kernel
    assert torch.equal(prop(x, a), GCNPropagation(K=1, cached=False)(x, a))  # same kernel


def test_spiking_gcn_conv_cache_follows_rewiring():
    a, b = _rewired_pair()
    x = torch.rand(8, 4, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(0)
    layer = SpikingGCNConv(4, 16, K=2, neuron="IF", norm="none", v_threshold=0.05)
    torch.manual_seed(0)
    fresh = SpikingGCNConv(4, 16, K=2, neuron="IF", norm="none", v_threshold=0.05, cached=False)
    layer(x, a)
    layer.reset()
    s_b, ref_b = layer(x, b), fresh(x, b)
    assert torch.equal(s_b, ref_b)  # same kernel: cache rebuilt


@pytest.mark.parametrize("sparse", [False, True])
def test_propagation_runs_in_float64(sparse):
    a, _ = _rewired_pair()
    x = torch.randn(8, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    adj = to_torch_coo_tensor(a, size=8).to(torch.float64) if sparse else a
    out = GCNPropagation(K=3, cached=True)(x, adj)
    assert out.dtype == torch.float64
    ref = _gcn_reference(x, a, 3)
    assert (out - ref).abs().max().item() < 1e-12  # float32 normalisation would leave ~1e-8


def test_gcn_mlp_structural_cache_follows_rewiring():
    a, b = _rewired_pair()
    x = torch.randn(8, 5, generator=torch.Generator().manual_seed(5))
    kw = {"hidden_channels": 8, "out_channels": 4, "gcn_input": "structural", "structural_dim": 4}
    torch.manual_seed(0)
    model = GCNMLP(5, **kw)
    model.embed(x, a)
    got = model.embed(x, b)
    torch.manual_seed(0)
    ref = GCNMLP(5, **kw).embed(x, b)
    assert (got - ref).abs().max().item() == 0.0  # same kernel: cache rebuilt
    assert torch.equal(model.gcn_input(x, b), structural_features(b, 8, 4))  # same kernel


def test_gcn_mlp_structural_features_float64():
    a, _ = _rewired_pair()
    f64 = structural_features(a, 8, 4, dtype=torch.float64)
    assert f64.dtype == torch.float64
    x = torch.randn(8, 5, dtype=torch.float64)
    model = GCNMLP(5, hidden_channels=8, out_channels=4, gcn_input="structural", structural_dim=4).double()
    assert torch.equal(model.gcn_input(x, a), f64)  # same kernel

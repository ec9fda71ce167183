"""The residual MLP testbed: shapes, seeded initialisation independent of the connector, clear errors."""

import pytest
import torch

from neurips26.nn.ancre import ANCReConnector
from neurips26.testbeds.residual_mlp import ConnectedResMLP, MLPBlock

pytestmark = pytest.mark.unit


def test_shapes_and_seeded_init_shared_by_every_connector():
    a = ConnectedResMLP(ANCReConnector.fixed_residual(3), width=16, hidden=8, blocks=3, seed=1)
    b = ConnectedResMLP(ANCReConnector(3, init="residual"), width=16, hidden=8, blocks=3, seed=1)
    x = torch.randn(5, 64)
    assert a(x).shape == (5, 10)
    # stem, blocks, norm and head come from the seed alone (the connector is the only difference)
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        if "connector" not in name:
            assert torch.equal(pa, pb), name  # same kernel: a copy of one seeded initialisation
    before = torch.random.get_rng_state()
    ConnectedResMLP(ANCReConnector.fixed_residual(2), width=8, hidden=4, blocks=2, seed=0)
    assert torch.equal(torch.random.get_rng_state(), before)  # same kernel: the caller's RNG is untouched
    assert MLPBlock(8, 4)(torch.randn(2, 8)).shape == (2, 8)


def test_bad_arguments_raise_clear_errors():
    conn = ANCReConnector.fixed_residual(2)
    with pytest.raises(TypeError, match="connector"):
        ConnectedResMLP(object(), width=8, hidden=4, blocks=2, seed=0)
    with pytest.raises(ValueError, match="width"):
        ConnectedResMLP(conn, width=0, hidden=4, blocks=2, seed=0)
    with pytest.raises(ValueError, match="seed"):
        ConnectedResMLP(conn, width=8, hidden=4, blocks=2, seed=-1)
    with pytest.raises((TypeError, ValueError), match="hidden"):
        MLPBlock(8, 2.5)

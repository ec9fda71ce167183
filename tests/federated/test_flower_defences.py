"""Flower's defence strategies drive the same attack on the in-process grid and on the simulation engine (Ray)."""

from __future__ import annotations

import torch
from torch import nn

from neurips26.federated.asap import make_attack
from neurips26.federated.flower import ClientSetup, make_client_app, run_rounds
from neurips26.federated.flower_defences import make_defence


def _model() -> nn.Module:
    return nn.Linear(3, 2)


def _partitions(n: int, size: int = 20):
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        x = torch.randn(size, 3, generator=g)
        out.append((x, (x[:, 0] > 0).long()))
    return out


def _eval(_round, state):
    m = _model()
    m.load_state_dict(state)
    x, y = _partitions(1, 64)[0]
    with torch.no_grad():
        return {"accuracy": float((m(x).argmax(1) == y).float().mean())}


def test_attacked_flower_defence_equal_on_both_engines():
    """Stateful FMPA (its history lives in the node's Context) against Flower's Krum, 3 rounds, both engines."""
    parts = _partitions(7)
    setup = ClientSetup(_model, parts, lr=0.2, seed=1, malicious=(1, 4), holdout=parts[0],
                        attack_fn=lambda: make_attack("FMPA", 0.4))  # fmt: skip
    torch.manual_seed(0)
    init = _model().state_dict()
    results, strategies = {}, {}
    for engine in ("simulation", "inprocess"):
        strategies[engine] = make_defence("krum", num_malicious=2, min_train_nodes=7, min_available_nodes=7)
        results[engine] = run_rounds(strategies[engine], make_client_app(setup), 7, 3, init, _eval, engine=engine,
                                     num_cpus=1)  # fmt: skip
    a, b = results["simulation"].state, results["inprocess"].state
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert [m["accuracy"] for m in results["simulation"].metrics] == [
        m["accuracy"] for m in results["inprocess"].metrics
    ]
    assert strategies["simulation"].selected == strategies["inprocess"].selected
    assert len(strategies["inprocess"].selected) == 3

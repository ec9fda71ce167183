"""ASAP is aggregation-rule agnostic: its code never reads the rule's name or parameters."""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest
import torch
from flwr.app import ConfigRecord
from torch import nn

from neurips26.federated import asap as asap_module
from neurips26.federated import attacks as attacks_module
from neurips26.federated.asap import ASAPAttack, ASMCController, FourierEstimator, make_attack
from neurips26.federated.attacks import AttackContext
from neurips26.federated.flower import (
    ClientSetup,
    LocalGrid,
    flatten_state,
    from_arrayrecord,
    local_identity,
    make_client_app,
    to_arrayrecord,
)
from neurips26.federated.flower_defences import DEFENCES, make_defence

FORBIDDEN = ("rule", "aggregat", "agr", "krum", "median", "trim", "bulyan", "fedavg", "num_malicious", "strategy",
             "defence", "robust", "beta", "selected")  # fmt: skip


def _identifiers(obj) -> set[str]:
    """Every name, attribute and argument the code of ``obj`` uses (docstrings and comments excluded)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            out.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(a.name for a in node.names)
            if isinstance(node, ast.ImportFrom) and node.module:
                out.add(node.module)
    return out


@pytest.mark.parametrize(
    "obj",
    [ASAPAttack, ASMCController, FourierEstimator, attacks_module.attack_direction, attacks_module.minmax_bound,
     attacks_module._bisect, AttackContext],
)  # fmt: skip
def test_asap_code_never_names_the_rule(obj):
    names = {n.lower() for n in _identifiers(obj)}
    hits = sorted(n for n in names for bad in FORBIDDEN if bad in n)
    assert not hits, f"{obj.__name__} reads {hits}"


def test_asap_modules_do_not_import_the_aggregators():
    for mod in (asap_module, attacks_module):
        imported = _identifiers(mod)
        assert not any("robust" in n or "flower" in n or "flwr" in n for n in imported), mod.__name__


class _Spy(AttackContext):
    """An AttackContext that records which of its fields are read."""

    def __getattribute__(self, name):
        reads = self.__dict__.get("_reads") if name != "__dict__" else None
        if reads is not None and not name.startswith("_"):
            reads.add(name)
        return object.__getattribute__(self, name)


def test_asap_reads_only_the_round_the_model_its_updates_and_the_objective():
    honest = torch.randn(3, 6, generator=torch.Generator().manual_seed(0))
    attack = ASAPAttack(target=0.5)
    ctx = _Spy(4, torch.zeros(6), honest, observe=lambda w: 0.8, num_clients=10)
    object.__setattr__(ctx, "_reads", set())
    attack.craft(ctx)
    assert (
        {"honest_updates", "observe", "round"}
        <= ctx._reads
        <= {"round", "global_params", "honest_updates", "observe"}
    )


def _model() -> nn.Module:
    return nn.Linear(3, 2)


def _partitions(n: int):
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        x = torch.randn(16, 3, generator=g)
        out.append((x, (x[:, 0] > 0).long()))
    return out


def test_asap_crafts_the_same_update_under_every_flower_defence():
    """Flower's TRAIN messages carry no rule information, so ASAP's first update is rule independent."""
    n, mal = 11, (2, 7)
    parts = _partitions(n)
    holdout = parts[0]
    init = _model().state_dict()
    crafted = {}
    with local_identity():
        for rule in DEFENCES:
            setup = ClientSetup(_model, parts, malicious=mal, attack_fn=lambda: make_attack("ASAP", 0.3),
                                holdout=holdout, seed=3)  # fmt: skip
            grid = LocalGrid(make_client_app(setup), n)
            strategy = make_defence(rule, num_malicious=2, min_train_nodes=n, min_available_nodes=n)
            msgs = list(strategy.configure_train(1, to_arrayrecord(init), ConfigRecord(), grid))
            for m in msgs:
                assert set(m.content["config"].keys()) == {"server-round"}, rule
            replies = {int(r.content["metrics"]["client-id"]): r for r in grid.send_and_receive(msgs)}
            crafted[rule] = flatten_state(from_arrayrecord(replies[mal[0]].content["arrays"]))
    first = crafted[DEFENCES[0]]
    assert not torch.equal(first, flatten_state(init))  # same kernel: n/a, asserts a difference
    for rule, vec in crafted.items():
        assert torch.equal(vec, first), rule  # same kernel

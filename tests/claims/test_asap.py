"""Smoke profile of the asap claim check: declaration, references, the (rule x attack) table, the
reachability premise and the heatmap. Generic smoke checks (finiteness, determinism, glossary, plot):
test_conformance.py."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.claims.asap import ANY_UNDER_FEDAVG, BASELINES, CLAIM, NO_ATTACK, logreg_sgd
from neurips26.federated.flower import local_sgd


def test_declaration_has_premises_headlines_and_labels():
    assert CLAIM.premises and all(p.label for p in CLAIM.premises)
    assert all(c.label for c in CLAIM.criteria)
    assert any(c.kind == "evidence" for c in CLAIM.criteria)
    assert CLAIM.headlines and any(h.criteria for h in CLAIM.headlines)
    assert CLAIM.references
    assert len(CLAIM.seeds["full"]) >= 3
    assert len(CLAIM.configs["full"]["targets"]) >= 2
    assert set(CLAIM.configs["full"]["rules"]) == {
        "fedavg",
        "krum",
        "multikrum",
        "median",
        "trimmed_mean",
        "bulyan",
    }


def test_smoke_table_references_and_reachability(smoke_result, tmp_path):
    first = smoke_result("asap")
    assert [p["key"] for p in first["premises"]] == [p.label for p in CLAIM.premises]
    for metric in {c.metric for c in CLAIM.criteria}:
        assert set(first["metrics"][metric]) >= {CLAIM.method, *CLAIM.baselines}
    for ref in CLAIM.references:
        assert any(ref in arms for arms in first["metrics"].values())
    info = first["info"][0]
    assert set(info["budget"]) >= {CLAIM.method, *CLAIM.baselines}
    assert len({str(b) for b in info["budget"].values()}) == 1  # every arm: the same rounds and clients
    rules = CLAIM.configs["smoke"]["rules"]
    table = info["rule_attack_table"]
    assert set(table) == {f"{r}@{t:g}" for r in rules for t in CLAIM.configs["smoke"]["targets"]}
    for row in table.values():
        assert set(row) == {CLAIM.method, *CLAIM.baselines, NO_ATTACK}
        assert all(math.isfinite(v["deviation"]) for v in row.values())
    assert info["flower_strategies"] == {"fedavg": "FedAvg", "krum": "Krum"}
    assert all(
        row[CLAIM.method]["malicious_selected"] is not None
        for k, row in table.items()
        if k.startswith("krum")
    )
    # the premise's metric is recomputed from the table: some baseline reached some target under FedAvg
    reached = any(
        table[k][b]["rounds"] is not None for k in table if k.startswith("fedavg@") for b in BASELINES
    )
    assert first["metrics"]["target_reachable"][ANY_UNDER_FEDAVG] == [float(reached)]
    paths = CLAIM.plot(first, tmp_path / "plots")
    assert any("heatmap" in p.name for p in paths)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 90),
    batch=st.integers(1, 40),
    epochs=st.integers(0, 2),
    lr=st.sampled_from([0.01, 0.1, 0.5]),
    seed=st.integers(0, 2**31 - 1),
)
def test_logreg_sgd_equals_local_sgd_on_nn_linear_within_rounding(n, batch, epochs, lr, seed):
    """The claim's cheap honest update is Flower's local_sgd on nn.Linear(64, 10), up to float32 rounding.

    Both run the same batches and the same arithmetic, but through different kernels (autograd's
    ``mm`` layouts vs the written-out ones): equal on one CPU, a few ulps apart on another (an AVX2
    AMD EPYC differs at n=2, batch=2, epochs=1, lr=0.01, seed=3).
    """
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 64, generator=gen) * 16
    y = torch.randint(0, 10, (n,), generator=gen)
    torch.manual_seed(seed)
    lin = torch.nn.Linear(64, 10)
    flat = torch.cat([lin.weight.detach().reshape(-1), lin.bias.detach()])
    loss = local_sgd(lin, x, y, epochs=epochs, lr=lr, batch_size=batch, seed=seed + 1)
    params, loss2 = logreg_sgd(flat, x, y, epochs, lr, batch, seed + 1)
    ref = torch.cat([lin.weight.detach().reshape(-1), lin.bias.detach()])
    # bound: per step, the gradient sums over the batch (B terms, |g| <= 1/B each) and the logits
    # (65 terms) round to within (B + 65) * eps32 * max|x|, moved by lr; the SGD map then carries a
    # difference on by at most its growth G, measured here as the growth of an 8-ulp perturbation of the
    # start (G is 1-3 on these problems; float32 vs float64 runs stay within 0.17 of this bound):
    # |params - ref| <= (steps * lr * (B + 65) * eps32 * max|x| + eps32 * max|p|) * max(1, G)
    eps = torch.finfo(torch.float32).eps
    steps = epochs * -(-n // batch)
    delta = flat * (8 * eps)
    moved, _ = logreg_sgd(flat + delta, x, y, epochs, lr, batch, seed + 1)
    growth = max(1.0, float((moved - params).abs().max()) / float(delta.abs().max()))
    step_bound = steps * lr * (min(batch, n) + 65) * eps * float(x.abs().max())
    bound = (step_bound + eps * float(ref.abs().max())) * growth
    torch.testing.assert_close(params, ref, rtol=0.0, atol=bound)
    # the mean loss: log-softmax over 10 classes after the 65-term logits, averaged over B
    # bound: steps * (B + 75) * eps32 * max(1, |loss|) * max(1, G)
    loss_bound = max(steps, 1) * (min(batch, n) + 75) * eps * max(1.0, abs(loss)) * growth
    assert loss2 == pytest.approx(loss, rel=0.0, abs=loss_bound)
    assert not torch.equal(params, flat) or epochs == 0  # same kernel: n/a, asserts a difference; it trained (and left its input alone)


def test_logreg_sgd_leaves_its_input_unchanged():
    flat = torch.zeros(650)
    x, y = torch.ones(4, 64), torch.tensor([0, 1, 2, 3])
    params, _ = logreg_sgd(flat, x, y, 1, 0.1, 2, 0)
    assert torch.equal(flat, torch.zeros(650)) and not torch.equal(params, flat)  # same kernel: input left at the zeros it was set to; the rest asserts a difference

"""ABC-Align claim: the smoke run's arms and strengths (generic checks: test_conformance.py) and Part B (DPO
through ABCDPOTrainer) on a tiny run."""

from __future__ import annotations

import math

import pytest
import torch

from neurips26.claims.abc_align import CLAIM, EnsembleRewardMLP, run_part_b

pytestmark = pytest.mark.usefixtures("one_thread")


def test_smoke_arms_and_judgement(smoke_result):
    a = smoke_result("abc_align")
    for name, arms in a["metrics"].items():
        if name != "c_gap":
            assert set(arms) == {CLAIM.method, *CLAIM.baselines, *CLAIM.references}, name
    info = a["info"][0]
    for cell, strengths in info["strength"].items():
        assert 0.0 <= strengths["abc"] <= 1.0 and 0.0 <= strengths["ppi_pp"] <= 1.0, cell
    assert all(c in (0.0, 0.5, 1.0) for cs in info["fixed_c_oracle_choice"].values() for c in cs)
    # pseudo-only never sees human labels: its accuracy does not depend on the human set
    n = CLAIM.configs["smoke"]["n_human"][0]
    assert a["metrics"]["acc_std_small_n"]["pseudo_only"][0] >= 0.0
    assert a["metrics"][f"acc_n{n}_b0"]["pseudo_only"][0] > 0.5  # an unbiased judge teaches something


def test_ensemble_replicas_are_independent_models():
    model = EnsembleRewardMLP([3, 3, 4], dim=5, hidden=7)
    x = torch.randn(6, 5)
    out = model(x)
    assert out.shape == (3, 6)
    assert torch.allclose(out[0], out[1]) and not torch.allclose(out[0], out[2])
    loss = out[0].sum()
    loss.backward()
    assert model.W1.grad[1:].abs().sum() == 0  # replica 0's loss touches replica 0 only
    grads = model.head_grads(x[:3], x[3:])
    assert grads.shape == (3, 3, 7)


def test_part_b_runs_dpo_through_the_trl_trainer(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURIPS26_CACHE", str(tmp_path / "cache"))
    config = dict(
        CLAIM.configs["full"],
        b_sft_examples=300,
        b_sft_steps=20,
        b_n_human=12,
        b_n_pseudo=40,
        b_eval_samples=16,
        b_steps=2,
        b_pseudo_batch=4,
        b_human_batch=2,
        b_output_dir=str(tmp_path / "dpo"),
    )
    out = run_part_b(config, 0)
    for arm in config["b_arms"]:
        assert math.isfinite(out[arm]["utility"]) and 0.0 <= out[arm]["win_rate"] <= 1.0
    assert 0.0 <= out["abc"]["strength"] <= 1.0
    assert 0.0 <= out["judge_agreement"] <= 1.0


def test_workers_give_the_same_numbers_as_one_process():
    """Running a seed's human sets in 2 worker processes changes nothing but the wall time."""
    from neurips26.claims.abc_align import run

    config = dict(CLAIM.configs["smoke"], steps=12)
    one = run(dict(config, workers=1), 0)
    two = run(dict(config, workers=2), 0)
    assert one.metrics == two.metrics
    assert one.curves == two.curves
    assert one.info == two.info


def test_human_only_is_trained_once_and_shared_across_bias_levels():
    """human_only reads no judge label, so its replica is the same computation at every bias: a separate
    replica per bias (what the ensemble did before) gives exactly the shared replica's numbers."""
    from neurips26.claims import abc_align as m

    config = dict(CLAIM.configs["smoke"], steps=15)
    u_net = m._true_utility(config["dim"])
    pool = m._part_a_pool(config, 0, u_net)
    out = m._part_a_cell(config, 0, config["n_human"][0], 0, pool, u_net)
    first, *rest = config["biases"]
    assert rest and all(out[(b, "human_only")] == out[(first, "human_only")] for b in rest)
    # the shared replica equals a human_only replica trained alone at the largest bias
    alone = dict(config, biases=[rest[-1]])
    solo = m._part_a_cell(alone, 0, config["n_human"][0], 0, pool, u_net)
    assert solo[(rest[-1], "human_only")] == out[(rest[-1], "human_only")]


def test_feature_memo_follows_the_weights():
    """The no-grad feature memo serves the same input at the same weights only; an optimiser step clears it."""
    model = EnsembleRewardMLP([1, 2], dim=4, hidden=5)
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    with torch.no_grad():
        m1 = model(a) - model(b)
    g1 = model.head_grads(a, b)
    assert torch.equal(g1, model.features(a).detach() - model.features(b).detach())  # same kernel
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(a).sum().backward()
    opt.step()
    with torch.no_grad():
        m2 = model(a) - model(b)
    assert not torch.equal(m1, m2)  # same kernel: n/a, asserts a difference
    fresh = (model.features(a) - model.features(b)).detach()
    assert torch.equal(model.head_grads(a, b), fresh)  # same kernel

"""Smoke-profile test of the aNCA claim check. Generic smoke checks (finiteness, determinism, glossary, plot):
test_conformance.py."""

from __future__ import annotations

import torch

from neurips26.claims.anca import ARMS, CLAIM, build_arm, run


def test_declaration():
    labels = {c.label for c in (*CLAIM.premises, *CLAIM.criteria)}
    assert {"nca_learns_sudoku", "nca_learns_maze", "sudoku_acc_vs_nca", "maze_ood_f1_vs_nca"} <= labels
    assert CLAIM.references == ("chance",)
    assert any(h.untested for h in CLAIM.headlines)
    for h in CLAIM.headlines:
        assert set(h.criteria) <= labels
    # floor metrics (solve rate, exact match) are reported, never judged
    judged = {c.metric for c in (*CLAIM.premises, *CLAIM.criteria)}
    assert not judged & {"sudoku_solve_rate", "maze_exact", "maze_ood_exact"}
    for profile in ("smoke", "quick", "full"):
        assert CLAIM.configs[profile]["threads"] == 1


def test_arms_have_matched_parameters_and_start_equal():
    config = CLAIM.configs["full"]
    for task in ("sudoku", "maze"):
        a, b = (build_arm(arm, task, config, seed=5) for arm in ARMS)
        pa, pb = (sum(p.numel() for p in m.parameters()) for m in (a, b))
        assert abs(pa - pb) / pa < 0.01, (task, pa, pb)
        assert a.perception_kind == "deformable" and b.perception_kind == "conv"
        # zero-initialised offset net and update output: both arms start with zero logits
        a.eval(), b.eval()
        x = torch.zeros(1, a.input_channels, 7, 7)
        assert torch.count_nonzero(a(x, 2)) == 0 and torch.count_nonzero(b(x, 2)) == 0


def test_smoke_profile_arms_budget_and_determinism(smoke_result, one_thread):
    data = smoke_result("anca")
    for metric in ("sudoku_blank_acc", "maze_f1", "maze_ood_f1", "sudoku_hard_blank_acc"):
        assert {CLAIM.method, *CLAIM.baselines} <= set(data["metrics"][metric]), metric
    info = data["info"][0]
    for task in ("sudoku", "maze"):
        budget = info["budget"][task]
        assert set(budget) == set(ARMS)
        assert budget["anca"]["train_steps"] == budget["nca"]["train_steps"]
        assert budget["anca"]["lr_grid"] == budget["nca"]["lr_grid"]
    assert info["param_ratio_max"] < 1.01
    again = run(dict(CLAIM.configs["smoke"]), data["seeds"][0])  # same seed, same (one) thread: same numbers
    for name, arms in again.metrics.items():
        for arm, value in arms.items():
            assert value == data["metrics"][name][arm][0], (name, arm)

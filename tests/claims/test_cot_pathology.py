"""Smoke profile of the CoT pathology claim check: structure, arms, budgets. Generic smoke checks (finiteness,
determinism, glossary, plot): test_conformance.py."""

import math

import torch

from neurips26.claims.cot_pathology import CLAIM, CONFIGS, LOOP_ARMS, METHOD


def test_smoke_structure_and_budget(smoke_result):
    a = smoke_result("cot_pathology")
    assert set(a["metrics"]["accuracy"]) == set(LOOP_ARMS)
    assert set(a["metrics"]["auroc_looping"]) == {METHOD, "latent_no_graph", "surface_ngram"}
    for arm in a["metrics"]["accuracy"]:
        assert 0.0 <= a["metrics"]["accuracy"][arm][0] <= 1.0
    assert set(a["metrics"]) == set(CLAIM.glossary)
    assert "smollm2" not in a["info"][0]  # SmolLM2 runs in the full profile only
    info = a["info"][0]
    budgets = info["budget"]
    assert set(budgets) == set(LOOP_ARMS)
    assert len({b["problems"] for b in budgets.values()}) == 1
    assert {b["max_new_tokens"] for arm, b in budgets.items() if arm != "g1_budget"} == {
        CONFIGS["smoke"]["max_new_tokens"]
    }
    assert budgets["g1_budget"]["max_new_tokens"] <= CONFIGS["smoke"]["max_new_tokens"]
    # the thresholds-at-infinity controller is a pure monitor: identical greedy tokens
    assert a["metrics"]["inf_threshold_identical"][METHOD] == [1.0]
    perf = info["performance"]
    assert perf["tokens"] > 0 and math.isfinite(perf["monitor_overhead_us_per_token"])
    assert a["metrics"]["gen_tokens"]["g1_budget"][0] <= budgets["g1_budget"]["max_new_tokens"]


def test_claim_declares_headlines_and_premises():
    labels = {c.label for c in (*CLAIM.criteria, *CLAIM.premises)}
    assert {"model_reaches_answer", "pathologies_occur"} <= labels
    assert all(h.untested or set(h.criteria) <= labels for h in CLAIM.headlines)
    assert CONFIGS["full"]["smollm_problems"] > 0 and CONFIGS["quick"]["smollm_problems"] == 0
    assert CONFIGS["full"]["smollm_seeds"] == (0,)


def test_judged_closed_loop_rolls_back(monkeypatch):
    """Issue 35 item 7: the judged arm runs the step loop, and C1-C3 roll back generated steps in it
    (a spy on PathologyController._rollback sees every rollback the claim reports)."""
    import neurips26.agents.cot_pathology.controllers as ctl
    from neurips26.claims.cot_pathology import run

    calls = []
    original = ctl.PathologyController._rollback

    def spy(self, r):
        row = self.rows[r]
        calls.append((self.timing, row.pending["to_step"], len(row.tokens)))
        cut = original(self, r)
        assert cut <= calls[-1][2] and len(row.tokens) == cut  # tokens really removed, prompt untouched
        return cut

    monkeypatch.setattr(ctl.PathologyController, "_rollback", spy)
    res = run(CONFIGS["smoke"], 0)
    rb = res.info["closed_loop"]["rollbacks"]
    assert rb[METHOD]["rollbacks"] > 0 and rb[METHOD]["discarded_tokens"] > 0
    # every rollback of the run is accounted for: the closed-loop arms plus the greedy timing run
    assert (
        len(calls)
        == sum(v["rollbacks"] for v in rb.values()) + res.info["performance"]["controllers_rollbacks"]
    )
    assert set(rb) == {METHOD, "g3_random", *(a for a in LOOP_ARMS if a.startswith("c"))}
    detector_timed = sum(v["rollbacks"] for arm, v in rb.items() if arm != "g3_random")
    perf = res.info["performance"]["controllers_rollbacks"]
    assert sum(t == "detector" for t, _, _ in calls) == detector_timed + perf


def test_each_seed_trains_its_own_model(smoke_result):
    """Issue 32 item 7: the trained model is seed-specific (model seed = model_seed + seed)."""
    from neurips26.claims.cot_pathology import _load_model, _model_seed

    a = smoke_result("cot_pathology")
    assert a["info"][0]["train"]["model_seed"] == _model_seed(CONFIGS["smoke"], a["seeds"][0])
    m0, _, _ = _load_model(CONFIGS["smoke"], 0)
    m1, _, _ = _load_model(CONFIGS["smoke"], 1)
    w0, w1 = m0.state_dict(), m1.state_dict()
    assert any(not torch.allclose(w0[k], w1[k]) for k in w0)  # different training runs

"""Smoke profile of the CoT pathology claim check: structure, arms, budgets. Generic smoke checks (finiteness,
determinism, glossary, plot): test_conformance.py."""

import math

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

"""Smoke profile of the REGATE claim check: structure, arms, budgets, causality design checks. Generic smoke
checks (finiteness, determinism, glossary, plot): test_conformance.py."""

import math

from neurips26.claims.regate import ARMS, CLAIM

QUALITY = ("ap_post", "auc_post", "ece_post", "brier_post", "nll_post", "ap_pre")


def test_smoke_structure_budget_and_causality(smoke_result):
    a = smoke_result("regate")
    for name in QUALITY:
        assert set(a["metrics"][name]) == set(ARMS), name
        for values in a["metrics"][name].values():
            assert all(0 <= v <= (math.inf if name == "nll_post" else 1) for v in values), name
    assert set(CLAIM.glossary) == set(a["metrics"])
    # REGATE (both backbones) and causal naive injection never move on edited future documents; leaky does
    viol = a["metrics"]["causality_violation"]
    assert viol["regate"] == [0.0] and viol["tgn_regate"] == [0.0] and viol["naive_causal"] == [0.0]
    assert viol["naive_leaky"][0] > 0
    assert a["metrics"]["leak_detected"] == {
        "regate": [0.0],
        "naive_causal": [0.0],
        "naive_leaky": [1.0],
        "tgn_regate": [0.0],
    }
    info = a["info"][0]
    for key in ("epochs", "batch_size", "lr", "hidden", "pos_weight"):
        assert len({rec[key] for rec in info["budget"].values()}) == 1, key
    assert set(info["performance"]) == set(ARMS)
    assert all(
        r["train_events_per_s"] > 0 and r["inference_events_per_s"] > 0 for r in info["performance"].values()
    )
    ext = info["extraction"]
    assert ext["recall"] == 1.0 and ext["unknown_aliases"] == 1
    ap = a["metrics"]["ap_pre"]["backbone"][0] - a["metrics"]["ap_post"]["backbone"][0]
    assert a["metrics"]["ap_drop"]["backbone"][0] == ap
    # retrieval budget: the "all documents" replay reproduces REGATE's own test scores exactly
    ret = info["retrieval"]
    assert ret["all_documents_equals_stream_scores"] is True
    assert ret["budget_documents"] == max(1, round(0.2 * len(ret["candidates"])))
    assert len(ret["learned_selection"]) == ret["budget_documents"]
    assert set(ret["learned_selection"]) <= set(ret["candidates"])
    budget = a["metrics"]["ap_post_budget"]
    assert set(budget) == {"learned", "random", "all_documents"}
    assert all(0 <= v[0] <= 1 for v in budget.values())

"""Smoke profile of the SCORE claim check: structure, arms, equal budgets. Generic smoke checks (finiteness,
determinism, glossary, plot): test_conformance.py."""

import pytest

from neurips26.claims.score import ARMS_BY_POSITION, CLAIM, DATASETS, POSITIONS


def test_smoke_arms_sessions_and_budget(smoke_result):
    a = smoke_result("score")
    for n in DATASETS:
        for p in POSITIONS:
            for m in ("pref_mrr", "mrr_all", "ndcg", "pairwise"):
                assert set(a["metrics"][f"{m}_{n}_{p}"]) == set(ARMS_BY_POSITION[p])
            sessions = a["info"][0][n][f"sessions_{p}"]
            assert sessions == {
                "dev": CLAIM.configs["smoke"]["dev_sessions"],
                "test": CLAIM.configs["smoke"]["test_sessions"],
            }
    assert set(CLAIM.glossary) == set(a["metrics"])
    info = a["info"][0]
    # one link predictor and the same candidate sets and examples for every arm; grids of equal size
    budget = info["budget"]
    assert set(budget) == set(CLAIM.arms)
    assert len({v["link_predictor"] for v in budget.values()}) == 1
    assert len({v["candidates"] for v in budget.values()}) == 1
    assert len({v["examples_per_session"] for v in budget.values()}) == 1
    for key, sweep in info["sweeps"].items():
        assert len(sweep["score_w_p"]["grid"]) * len(sweep["score_w_n"]["grid"]) == len(
            sweep["cosine_alpha"]["grid"]
        ) * len(sweep["cosine_beta"]["grid"]), key
    # the per-variable breakdown covers intermediate variables of multi-hop queries
    inter = [r for r in info["breakdown"] if r["position"] == "inter"]
    assert inter and all(
        r["variable"] < 2 and r["type"] in ("2p", "3p", "pi", "ip", "up", "inp", "pin") for r in inter
    )
    # union and negation structures are sampled
    assert {r["type"] for r in info["breakdown"]} & {"2u", "up", "2in", "3in", "inp", "pin", "pni"}
    # interactive sessions: one curve point per step (2 + 2 examples), unconstrained flat over the steps
    for n in DATASETS:
        for p in POSITIONS:
            curve = a["curves"][f"pref_mrr_by_step_{n}_{p}"]
            assert set(curve) == {"score", "unconstrained", "cosine", "nqr_lite"}
            assert all(len(v[0]) == 2 * CLAIM.configs["smoke"]["examples"] for v in curve.values())
            flat = curve["unconstrained"][0]
            assert max(flat) - min(flat) < 1e-12
            assert a["metrics"][f"pref_mrr_session_{n}_{p}"]["unconstrained"][0] == pytest.approx(
                a["metrics"][f"pref_mrr_{n}_{p}"]["unconstrained"][0], abs=1e-12
            )
            # the last step holds all examples: SCORE's final point is its full-session preference MRR
            assert curve["score"][0][-1] == pytest.approx(
                a["metrics"][f"pref_mrr_{n}_{p}"]["score"][0], abs=1e-12
            )


def test_claim_declares_items_that_resolve_every_margin():
    for crit in (*CLAIM.criteria, *CLAIM.premises):
        full = CLAIM.items.get(crit.metric, {}).get("full")
        if getattr(crit, "margin", 0) > 0:
            assert full is not None and 1.0 / full < crit.margin, crit.label  # one query cannot flip it
    assert len(CLAIM.seeds["full"]) >= 3


def test_smoke_judged_mrrs_equal_our_cross_check(smoke_result):
    """pref_mrr / mrr_all / link_mrr are PyKEEN's; the mean of answer_mrr agrees within the stated bound."""
    info = smoke_result("score")["info"][0]
    for n in DATASETS:
        check = info[n]["mrr_crosscheck"]
        assert check["max_abs_diff"] <= check["tolerance"] < 3e-6

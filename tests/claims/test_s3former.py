"""Smoke profile of the S3Former claim check: structure, arms, budgets, and the testbed premise. Generic smoke
checks (finiteness, determinism, glossary, plot): test_conformance.py."""

from neurips26.claims.base import judge_claim
from neurips26.claims.s3former import CLAIM, LEARNED, METHOD, run

ACCURACY = ("ap_random", "ap_historical", "auc_random", "mrr", "ap_inductive")


def test_smoke_structure_and_budget(smoke_result):
    a = smoke_result("s3former")
    for name in ACCURACY:
        assert set(a["metrics"][name]) == {CLAIM.method, *CLAIM.baselines}, name
        for values in a["metrics"][name].values():
            assert all(0 <= v <= 1 for v in values), name
    assert set(CLAIM.glossary) == set(a["metrics"])
    info = a["info"][0]
    budget = info["budget"]
    assert set(budget) == {METHOD, *LEARNED}
    for key in ("epochs", "batch_size", "lr", "hidden", "negatives_per_positive"):
        assert len({rec[key] for rec in budget.values()}) == 1, key
    perf = info["performance"]
    assert set(perf) == {CLAIM.method, *CLAIM.baselines}
    for rec in perf.values():
        assert rec["train_events_per_s"] > 0 and rec["inference_events_per_s"] > 0
    gap = a["metrics"]["learned_minus_edgebank_ap"]["best_learned_baseline"][0]
    best = max(a["metrics"]["ap_random"][x][0] for x in LEARNED)
    bank = max(a["metrics"]["ap_random"][x][0] for x in ("edgebank", "edgebank_tw"))
    assert gap == best - bank


def test_pure_memorisation_stream_makes_the_verdict_inconclusive_testbed():
    cfg = dict(CLAIM.configs["smoke"], p_repeat=1.0, p_triangle=0.0)
    res = run(cfg, 0)
    assert res.info["test_repeat_fraction"] > 0.9
    metrics = {k: {arm: [v] for arm, v in arms.items()} for k, arms in res.metrics.items()}
    verdict = judge_claim(CLAIM, metrics)
    assert (verdict["verdict"], verdict["verdict_reason"], verdict["deciding"]) == (
        "inconclusive",
        "testbed",
        "not_pure_memorisation",
    )

"""PyKEEN's RankBasedEvaluator computes the judged filtered MRR of CoRF and SCORE (issue 35 item 13a).

:class:`neurips26.common.kg.PykeenRanking` drives ``RankBasedEvaluator.process_scores_`` / ``finalize``
with our scores and filter; our :func:`filtered_ranks` is the cross-check. Rank variant: PyKEEN's
*realistic* rank (mean of optimistic and pessimistic) equals ours; the optimistic and pessimistic ranks
do not once ties occur (checked below). Bound: :func:`pykeen_mrr_tolerance` (``(ceil(log2 n) + 4)
eps32``: PyKEEN's float32 harmonic mean vs our float64 mean of the same ranks); Hits@k use the same
ranks, so they differ only by float64 summation order (``n eps64``); the macro (per-group) path
averages float64 reciprocals on both sides (``n eps64``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from neurips26.common.kg import (
    PYKEEN_RANK_TYPE,
    PykeenRanking,
    filtered_ranks,
    pykeen_mrr_tolerance,
    pykeen_ranking_metrics,
    ranking_metrics,
)

EPS64 = float(torch.finfo(torch.float64).eps)


@pytest.fixture(autouse=True)
def _pystow(tmp_path, monkeypatch):
    monkeypatch.setenv("PYSTOW_HOME", str(tmp_path / "pystow"))


def _tied(n, num_entities, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    scores = ((torch.randn(n, num_entities, generator=g) * 2).round() / 2).to(dtype)  # many ties
    targets = torch.randint(0, num_entities, (n,), generator=g)
    mask = torch.rand(n, num_entities, generator=g) < 0.1
    return scores, targets, mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("n", "num_entities"), [(1, 5), (200, 135), (1500, 104)])
def test_pykeen_metrics_equal_ours_within_the_bound(n, num_entities, dtype):
    scores, targets, mask = _tied(n, num_entities, seed=n, dtype=dtype)
    judged = pykeen_ranking_metrics(scores, targets, mask)
    ours = ranking_metrics(filtered_ranks(scores, targets, mask))
    assert judged["count"] == n
    assert abs(judged["mrr"] - ours["mrr"]) <= pykeen_mrr_tolerance(n)
    for k in (1, 3, 10):
        assert abs(judged[f"hits@{k}"] - ours[f"hits@{k}"]) <= n * EPS64
    # unfiltered: the same
    judged = pykeen_ranking_metrics(scores, targets)
    assert abs(judged["mrr"] - ranking_metrics(filtered_ranks(scores, targets))["mrr"]) <= pykeen_mrr_tolerance(n)


def test_realistic_is_the_variant_that_matches_ours():
    """With ties, PyKEEN's optimistic and pessimistic MRRs bracket ours; the realistic one equals it."""
    from pykeen.evaluation import RankBasedEvaluator

    assert PYKEEN_RANK_TYPE == "realistic"
    scores, targets, mask = _tied(300, 50, seed=7)
    ours = ranking_metrics(filtered_ranks(scores, targets, mask))["mrr"]
    ranking = PykeenRanking()
    assert isinstance(ranking.evaluator, RankBasedEvaluator)
    ranking.add(scores, targets, mask)
    res = ranking.evaluator.finalize()
    got = {kind: res.get_metric(f"tail.{kind}.inverse_harmonic_mean_rank") for kind in ("optimistic", "realistic", "pessimistic")}
    tol = pykeen_mrr_tolerance(300)
    assert abs(got["realistic"] - ours) <= tol
    assert got["optimistic"] > ours + 100 * tol and got["pessimistic"] < ours - 100 * tol


def test_filtering_by_hand():
    # entities 0..3, true tail 2, entity 1 is another known tail: filtered rank 1 + 0 + 0.5 (tie with 3)
    scores = torch.tensor([[0.1, 0.9, 0.5, 0.5]])
    mask = torch.tensor([[False, True, True, False]])
    assert pykeen_ranking_metrics(scores, torch.tensor([2]), mask)["mrr"] == pytest.approx(1 / 1.5, abs=1e-7)
    assert pykeen_ranking_metrics(scores, torch.tensor([2]))["mrr"] == pytest.approx(1 / 2.5, abs=1e-7)


def test_macro_is_the_mean_over_groups_of_answer_mrr():
    from neurips26.kg.score import add_answer_ranks, answer_mrr

    g = torch.Generator().manual_seed(1)
    ranking = PykeenRanking(macro=True)
    per_group = []
    for group in range(40):
        n = 60
        scores = (torch.randn(n, generator=g) * 2).round() / 2
        perm = torch.randperm(n, generator=g)
        answers, exclude = perm[: int(torch.randint(1, 6, (1,), generator=g))], perm[10:14]
        add_answer_ranks(ranking, scores, answers, exclude, group)
        per_group.append(answer_mrr(scores, answers, exclude))
    out = ranking.finalize()
    assert abs(out["mrr"] - float(np.mean(per_group))) <= 200 * EPS64
    # micro (row) average differs from the group mean: the macro evaluator is what the claim needs
    assert out["count"] > 40


def test_errors():
    with pytest.raises(ValueError, match="group"):
        PykeenRanking(macro=True).add(torch.zeros(1, 3), torch.tensor([0]))
    with pytest.raises(ValueError, match="NaN"):
        pykeen_ranking_metrics(torch.tensor([[float("nan"), 0.0]]), torch.tensor([0]))
    with pytest.raises(ValueError, match="targets"):
        pykeen_ranking_metrics(torch.zeros(1, 3), torch.tensor([3]))
    with pytest.raises(ValueError, match="no ranks"):
        PykeenRanking().finalize()
    with pytest.raises(ValueError, match="num_ranks"):
        pykeen_mrr_tolerance(0)


class _Spy:
    """Records every RankBasedEvaluator (and MacroRankBasedEvaluator) finalize's realistic MRR."""

    def __init__(self, monkeypatch):
        from pykeen.evaluation import MacroRankBasedEvaluator, RankBasedEvaluator

        self.processed = 0
        self.mrrs: list[float] = []
        spy = self
        proc = RankBasedEvaluator.process_scores_

        def process(self_, *args, **kwargs):
            spy.processed += 1
            return proc(self_, *args, **kwargs)

        monkeypatch.setattr(RankBasedEvaluator, "process_scores_", process)  # Macro calls it through super()
        for cls in (RankBasedEvaluator, MacroRankBasedEvaluator):
            orig = cls.finalize

            def fin(self_, _orig=orig):
                res = _orig(self_)
                spy.mrrs.append(res.get_metric("tail.realistic.inverse_harmonic_mean_rank"))
                return res

            monkeypatch.setattr(cls, "finalize", fin)


@pytest.mark.claims
def test_corf_judged_mrr_comes_from_rank_based_evaluator(monkeypatch):
    from neurips26.claims.corf import CLAIM

    spy = _Spy(monkeypatch)
    cfg = {**CLAIM.configs["smoke"], "real": ["kinships"]}
    res = CLAIM.run(cfg, 0)
    m = res.metrics
    judged = [m["mrr"]["corf"], m["mrr"]["per_query"], m["mrr"]["random"], *m["mrr_kinships"].values()]
    assert spy.processed >= 6 and len(spy.mrrs) >= 6
    for v in judged:
        assert any(v == x for x in spy.mrrs), v  # the claim's number is the evaluator's own
    for row in res.info["per_setting"]:
        if "mrr_crosscheck" in row:
            assert row["mrr_crosscheck"]["max_abs_diff"] <= row["mrr_crosscheck"]["tolerance"]


@pytest.mark.claims
def test_score_judged_mrrs_come_from_rank_based_evaluator(monkeypatch):
    from neurips26.claims.score import ARMS_BY_POSITION, CLAIM, POSITIONS

    spy = _Spy(monkeypatch)
    cfg = {**CLAIM.configs["smoke"], "datasets": ["kinships"], "dev_sessions": 4, "test_sessions": 4}
    res = CLAIM.run(cfg, 0)
    m = res.metrics
    assert any(m["link_mrr_kinships"]["unconstrained"] == x for x in spy.mrrs)
    for p in POSITIONS:
        for key in ("pref_mrr", "mrr_all"):
            for arm in ARMS_BY_POSITION[p]:
                v = m[f"{key}_kinships_{p}"][arm]
                assert any(v == x for x in spy.mrrs), (key, p, arm)
    check = res.info["kinships"]["mrr_crosscheck"]
    assert check["max_abs_diff"] <= check["tolerance"]

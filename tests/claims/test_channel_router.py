"""Smoke profile of the channel_router claim check: structure, arms, budgets. Generic smoke checks (finiteness,
determinism, glossary, plot): test_conformance.py."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.claims.channel_router import CLAIM, LAMBDAS, _expression, _lm_parse

MAY_BE_UNMATCHED = {
    "cost_at_matched_quality",
    "cost_reduction",
    "quality_at_matched_cost",
    "quality_at_single_cost",
}


def test_smoke_structure_determinism_and_budget(smoke_result, smoke_rerun):
    a, again = smoke_result("channel_router"), smoke_rerun("channel_router")
    assert set(CLAIM.glossary) == set(a["metrics"])
    info = a["info"][0]
    for name, arms in a["metrics"].items():
        for arm, values in arms.items():
            if name in MAY_BE_UNMATCHED and arm == "router":
                # -inf/inf only when the router curve never reaches the fixed arm's quality/cost
                key = {
                    "quality_at_single_cost": "matched_single_cost",
                    "quality_at_matched_cost": "matched_cost",
                }
                flag = info[key.get(name, "matched_quality")]["matched"]
                assert all(math.isfinite(v) for v in values) == flag, name
    # the router curve and fixed points are deterministic too (metrics: test_conformance.py)
    assert info["router_curve"] == again["info"]["router_curve"]
    # same techniques and budgets on every channel; same train/test items for every arm
    per_channel = {}
    for name in info["arm_budget"]:
        channel, rest = name.split("/", 1)
        per_channel.setdefault(channel, []).append(rest)
    assert len({tuple(v) for v in per_channel.values()}) == 1 and len(per_channel) == 3
    assert info["n_train"] == info["n_test"] == 60
    curve = np.array(info["router_curve"])
    assert curve.shape == (len(LAMBDAS), 3)
    # the lambda sweep trades quality for cost: the largest lambda is the cheapest point on the curve
    assert curve[-1, 1] == curve[:, 1].min()
    assert 0 <= a["metrics"]["pareto_occupancy"]["router"][0] <= 1
    assert a["metrics"]["decision_ms"]["router"][0] > 0


def test_lm_helpers_parse_prompts():
    assert (
        _expression("State the final answer to the following arithmetic problem: 57 + 87 + 70 =")
        == "57+87+70"
    )
    assert _expression("Calculate ( 56 + -33 ) - 84.\nReply with the final answer only.") == "(56+-33)-84"
    assert _expression("Martha is knitting 3 hats.") is None
    prompt = "Which option equals 2 + 3?\nOptions: A) 4  B) 5  C) 15  D) 3\nReply with the letter"
    assert _lm_parse(prompt, "B") == "5" and _lm_parse(prompt, "The answer is 15") == "15"


class _FakeLM:
    """generate_batch stub: completion i of a prompt is the number i (counts calls)."""

    temperature, price_in, price_out = 0.5, 0.0, 2.0

    def __init__(self):
        self.calls = 0

    def generate_batch(self, prompts, *, seed, n=1):
        from neurips26.agents.channel_router import Sample

        self.calls += 1
        return [Sample(str(i), str(i), None, 3, 1) for _ in prompts for i in range(n)]


def test_pool_channel_serves_without_replacement_then_live(tmp_path, monkeypatch):
    from neurips26.agents.channel_router import Task
    from neurips26.claims.channel_router import PoolChannel

    monkeypatch.setenv("NEURIPS26_CACHE", str(tmp_path))
    base = _FakeLM()
    ch = PoolChannel(base, name="fake", cache_tag={"test": 1})
    ch.warm(["q"], 4)
    task = Task("q")
    rng = np.random.default_rng(0)
    got = [ch.sample(task, 1, rng=rng)[0].answer for _ in range(4)]
    assert sorted(got) == ["0", "1", "2", "3"] and ch.live == 0  # a permutation of the pool
    again = [ch.sample(task, 1, rng=np.random.default_rng(0))[0].answer]
    assert again[0] == got[0]  # same rng seed, same order (common random numbers across arms)
    ch.sample(task, 1, rng=rng)  # pool exhausted for this rng: generated live
    assert ch.live == 1 and all(s.cost == 2.0 for s in ch.sample(task, 2, rng=np.random.default_rng(1)))


def test_expression_parses_multiple_choice_and_division():
    mc = "Which option equals -33 / 11 + -22?\nOptions: A) -25  B) -24\nReply with the letter of the correct option only."
    assert _expression(mc) == "-33/11+-22"
    assert _expression("Calculate 7 * ( 2 - 5 ).\nReply with the final answer only.") == "7*(2-5)"
    assert _expression("Calculate 2.5 + 1.\nReply with the final answer only.") is None  # no decimals


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=2, max_size=30).filter(
        lambda rows: len({y for _, y in rows}) == 2
    )
)
def test_judge_auroc_equals_sklearn(rows):
    from sklearn.metrics import roc_auc_score

    from neurips26.claims.channel_router.lm_testbed import judge_auroc

    scores, labels = [float(s) for s, _ in rows], [y for _, y in rows]
    assert judge_auroc(scores, labels) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)


def test_judge_auroc_edges():
    from neurips26.claims.channel_router.lm_testbed import judge_auroc

    assert judge_auroc([0.9, 0.8, 0.1], [True, True, False]) == 1.0
    assert judge_auroc([0.1, 0.8, 0.9], [True, False, False]) == 0.0
    assert judge_auroc([0.5, 0.5], [True, False]) == 0.5
    assert math.isnan(judge_auroc([0.5, 0.7], [True, True]))


class _FakeVerifierLM:
    """answer_logprob stub: log(0.9) for the true value of the expression, log(0.1) otherwise (counts calls)."""

    def __init__(self):
        self.calls, self.pairs = 0, []

    def answer_logprob(self, pairs):
        self.calls += 1
        self.pairs += list(pairs)
        return [math.log(0.9 if str(eval(e)) == a else 0.1) for e, a in pairs]  # noqa: S307 - digits and + - only


def test_verifier_judge_and_critic_never_read_the_reference():
    from neurips26.agents.channel_router import Task
    from neurips26.claims.channel_router.lm_testbed import VerifierJudge, verifier_critic

    lm = _FakeVerifierLM()
    judge = VerifierJudge(lm)
    # the reference answer is deliberately wrong: a judge that read it would prefer "99"
    task = Task("Calculate 2 + 3.\nReply with the final answer only.", "99", "arith")
    judge.prefetch([(task, "5"), (task, "4"), (task, "5"), (task, "x")])
    assert lm.calls == 1 and sorted(lm.pairs) == [
        ("2+3", "4"),
        ("2+3", "5"),
    ]  # distinct integer answers, batched
    assert judge.score(task, "5") == pytest.approx(0.9) and judge.score(task, "4") == pytest.approx(0.1)
    assert judge.score(task, "99") == pytest.approx(0.1) and judge.calls == 1  # a live call, memoised after
    assert judge.score(task, "x") == 0.0 and judge.score(task, "") == 0.0  # not an integer
    assert judge.score(Task("Martha is knitting 3 hats."), "3") == 0.5  # no expression: the judge abstains
    critic = verifier_critic(judge, cost=10.0, threshold=0.5)
    assert critic(task, "5") is None
    hint = critic(task, "4")
    assert hint == "The answer 4 is likely wrong." and "99" not in hint
    assert critic.cost == 10.0
    with pytest.raises(ValueError, match="role"):
        from neurips26.claims.channel_router.lm_testbed import TinyArithmeticLM

        TinyArithmeticLM({}, 1.0, 0.0, role="judge")


def test_tiny_lm_answer_logprob_batched_equals_one_by_one(tmp_path, monkeypatch):
    from neurips26.claims.channel_router.lm_testbed import TinyArithmeticLM

    monkeypatch.setenv("NEURIPS26_CACHE", str(tmp_path))
    cfg = {
        "data_seed": 0,
        "verifier_hidden": 32,
        "verifier_layers": 1,
        "verifier_steps": 3,
        "verifier_examples": 60,
    }
    lm = TinyArithmeticLM(cfg, 1.0, 0.0, role="verifier", exclude=frozenset({"1+2"}))
    pairs = [("1+2", "3"), ("12-40+7", "-21"), ("(3*4)", "12"), ("9", "9")]
    batched = lm.answer_logprob(pairs, batch_size=3)
    single = [lm.answer_logprob([p])[0] for p in pairs]
    # different padded widths run different matmul shapes: equal within float32 rounding of a short sum
    assert batched == pytest.approx(single, abs=1e-5)
    assert all(v < 0 for v in batched)
    # by hand for one pair: mean log-probability of the answer characters and the end token
    import torch

    ids = lm.tok("1+2=3")["input_ids"] + [lm.tok.eos_token_id]
    with torch.no_grad():
        logp = lm.model(input_ids=torch.tensor([ids])).logits.float().log_softmax(-1)[0]
    head = len(lm.tok("1+2=")["input_ids"])
    manual = float(torch.stack([logp[t - 1, ids[t]] for t in range(head, len(ids))]).mean())
    assert batched[0] == pytest.approx(manual, abs=1e-5)
    # training expressions that occur among the evaluated items are dropped
    examples = lm._examples(cfg)()
    first = lm.tok.decode(examples[0]["input_ids"], skip_special_tokens=True).split("=")[0]
    lm._exclude = frozenset({first})
    kept = [
        lm.tok.decode(e["input_ids"], skip_special_tokens=True).split("=")[0] for e in lm._examples(cfg)()
    ]
    assert first not in kept and len(kept) < len(examples)
    with pytest.raises(TypeError, match="pairs"):
        lm.answer_logprob([("1+2", 3)])
    with pytest.raises(ValueError, match="batch_size"):
        lm.answer_logprob(pairs, batch_size=0)


@pytest.mark.integration
def test_judged_lm_profile_runs_the_verifier_judge_and_critic(monkeypatch):
    """The full profile's testbed, shrunk (2 items per family, 2-step models, 1 new token): every judge call
    and every critic verdict goes through the verifier's score, on SmolLM2 and tiny-LM channels."""
    from neurips26.claims.channel_router import lm_testbed
    from neurips26.claims.channel_router.lm_testbed import VerifierJudge

    assert CLAIM.configs["full"]["testbed"] == "lm" and CLAIM.configs["full"]["n_per_family"] * 4 >= 600
    calls = []
    real = VerifierJudge.score

    def spy(self, task, answer):
        calls.append((task.prompt, answer))
        return real(self, task, answer)

    monkeypatch.setattr(VerifierJudge, "score", spy)
    critics = []
    real_critic = lm_testbed.verifier_critic

    def critic_spy(verifier, cost, threshold):
        critics.append((verifier, threshold))
        return real_critic(verifier, cost, threshold)

    monkeypatch.setattr(lm_testbed, "verifier_critic", critic_spy)
    cfg = {
        **CLAIM.configs["full"],
        "n_per_family": 2,
        "pool": 5,
        "max_new_tokens": 1,
        "batch_size": 8,
        "tiny_steps": 2,
        "tiny_examples": 60,
        "tiny_hidden": 32,
        "verifier_steps": 2,
        "verifier_examples": 60,
        "verifier_hidden": 32,
        "k_grid": [1, 2],
        "k": 1,
        "latency_queries": 2,
        "mc_draws": 2000,
    }
    result = CLAIM.run(cfg, 0)
    # one critic, built on the verifier with the declared threshold; the judge's scores come from it too
    assert len(critics) == 1 and isinstance(critics[0][0], VerifierJudge) and critics[0][1] == 0.5
    assert len(calls) > 0 and result.info["judge_pairs"] > 0
    auroc = result.metrics["judge_auroc"]["testbed"]
    assert math.isnan(auroc) or 0.0 <= auroc <= 1.0  # nan only when a tiny pool holds no right answer
    assert set(result.info["pool_prompts"]) == {"smol_t02", "smol_t08", "tiny"}
    # the pools cover every arm: nothing is generated live
    assert result.info["live_generations"] == {"smol_t02": 0, "smol_t08": 0, "tiny": 0}


def test_testbed_helpers_reject_bad_input():
    from neurips26.claims.channel_router.lm_testbed import VerifierJudge, judge_auroc, verifier_critic

    with pytest.raises(ValueError, match="one length"):
        judge_auroc([0.1, 0.2], [True])
    with pytest.raises(ValueError, match="finite"):
        judge_auroc([0.1, float("nan")], [True, False])
    with pytest.raises(ValueError, match="labels"):
        judge_auroc([0.1, 0.2], [2, 0])
    with pytest.raises(TypeError, match="answer_logprob"):
        VerifierJudge(object())
    judge = VerifierJudge(_FakeVerifierLM())
    with pytest.raises(TypeError, match="VerifierJudge"):
        verifier_critic(object(), cost=1.0, threshold=0.5)
    with pytest.raises(ValueError, match="threshold"):
        verifier_critic(judge, cost=1.0, threshold=1.5)

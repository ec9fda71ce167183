"""Tests of neurips26.agents.channel_router: operators, closed forms, router, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.agents.channel_router import (
    OPERATORS,
    Arm,
    Channel,
    Critic,
    HashingEmbedder,
    Judge,
    SemanticKNNRouter,
    SimulatedChannel,
    Task,
    adaptive_routing,
    averaging_mse,
    best_of_n,
    contraction_factor,
    diversity_combining,
    empirical_crossover,
    estimate_contraction,
    evaluate_arms,
    generator_critic,
    hybrid_retransmission,
    is_contractive,
    matched_cost_quality_gain,
    matched_quality_cost_reduction,
    pareto_frontier,
    pareto_occupancy,
    plurality_vote,
    rateless_sampling,
    redundant_verification,
    simulate_averaging_mse,
    simulate_refinement,
    single_shot,
    uniform_beats_weighted,
    uniform_vs_weighted_threshold,
    weighted_vote,
)

TASK = Task("What is 2 + 3?", answer="5", family="arith")


def scripted(answers, price_out=1.0, name="s"):
    """A channel whose sampler returns the scripted answers in order (one word each)."""
    queue = list(answers)
    calls = []

    def sampler(prompt, n, temperature):
        calls.append(prompt)
        return [queue.pop(0) for _ in range(n)]

    ch = Channel(sampler, name=name, price_in=0.5, price_out=price_out)
    ch.calls = calls
    return ch


def exact_judge(task, answer):
    return float(answer == task.answer)


RNG = np.random.default_rng


# ------------------------------------------------------------------------------------------ combiners
def test_plurality_vote_ties_go_to_earliest():
    assert plurality_vote(["a", "b", "b", "a"]) == ("a", 0)
    assert plurality_vote(["x", "y", "z"]) == ("x", 0)
    assert plurality_vote(["x", "y", "y"]) == ("y", 1)
    assert plurality_vote(["b", "a", "b", "a"]) == plurality_vote(["b", "a", "b", "a"])


@given(st.lists(st.sampled_from("abcd"), min_size=1, max_size=12), st.floats(0.1, 10))
@settings(max_examples=60, deadline=None)
def test_weighted_vote_with_equal_weights_is_plurality(answers, w):
    assert weighted_vote(answers, [w] * len(answers)) == plurality_vote(answers)


@given(st.lists(st.floats(0, 1), min_size=1, max_size=10))
@settings(max_examples=60, deadline=None)
def test_best_of_n_returns_max_score_earliest(scores):
    answers = [str(i) for i in range(len(scores))]
    ans, i = best_of_n(answers, scores)
    assert scores[i] == max(scores) and i == scores.index(max(scores)) and ans == answers[i]


def test_diversity_combining_modes_and_cost():
    ch = scripted(["4", "5", "4", "6", "5"])
    res = diversity_combining(TASK, [ch], rng=RNG(0), n=5, combine="majority")
    assert res.answer == "4" and res.n_calls == 5
    tin = len(TASK.prompt.split())
    assert res.cost == pytest.approx(
        5 * (0.5 * tin + 1.0)
    )  # sum over calls of tokens_in*p_in + tokens_out*p_out
    ch = scripted(["4", "5", "4", "6", "5"])
    judge = Judge(exact_judge, cost=0.25)
    res = diversity_combining(TASK, [ch], judge=judge, rng=RNG(0), n=5, combine="best")
    assert res.answer == "5"
    assert res.cost == pytest.approx(5 * (0.5 * tin + 1.0) + 5 * 0.25)
    ch = scripted(["4", "5", "4", "6", "5"])
    assert diversity_combining(TASK, [ch], judge=judge, rng=RNG(0), n=5, combine="weighted").answer == "5"


def test_spatial_diversity_round_robin():
    a, b = scripted(["1", "1"], name="a"), scripted(["2"], name="b")
    res = diversity_combining(TASK, [a, b], rng=RNG(0), n=3)
    assert [t["channel"] for t in res.trace if t["event"] == "sample"] == ["a", "b", "a"]
    assert res.answer == "1"


# ------------------------------------------------------------------------------------------ HARQ
def test_harq_stops_at_first_accepted_round():
    ch = scripted(["1", "2", "5", "7", "8"])
    res = hybrid_retransmission(TASK, [ch], judge=exact_judge, rng=RNG(0), max_rounds=5, mode="retry")
    assert res.answer == "5" and res.n_calls == 3


def test_harq_without_acceptance_chase_votes_retry_keeps_last():
    ans = ["1", "2", "1", "3", "4"]
    res = hybrid_retransmission(TASK, [scripted(ans)], judge=exact_judge, rng=RNG(0), mode="chase")
    assert res.answer == "1" and res.n_calls == 5
    res = hybrid_retransmission(TASK, [scripted(ans)], judge=exact_judge, rng=RNG(0), mode="retry")
    assert res.answer == "4"


def test_harq_ir_appends_critic_feedback():
    ch = scripted(["1", "5"])
    critic = Critic(lambda t, a: "too small", cost=0.5)
    res = hybrid_retransmission(TASK, [ch], judge=exact_judge, critic=critic, rng=RNG(0), mode="ir")
    assert res.answer == "5" and "too small" in ch.calls[1] and ch.calls[0] == TASK.prompt
    assert res.cost == pytest.approx(sum(t.get("cost", 0) for t in res.trace) + 0.5)


# ------------------------------------------------------------------------------------------ refine
def test_generator_critic_stops_when_critic_accepts():
    ch = scripted(["1", "3", "5", "9", "9", "9"])
    critic = Critic(lambda t, a: None if a == t.answer else "wrong")
    res = generator_critic(TASK, [ch], critic=critic, rng=RNG(0), rounds=5)
    assert res.answer == "5" and res.n_calls == 3


def test_generator_critic_plateau_stop():
    ch = scripted(["1"] * 10)
    res = generator_critic(TASK, [ch], judge=exact_judge, critic=lambda t, a: "no", rng=RNG(0), rounds=8)
    assert res.n_calls == 3  # scores 0, 0, 0: two flat steps


def test_generator_critic_contraction_stop_returns_best():
    scores = iter([0.5, 0.6, 0.3, 0.1, 0.0, 0.0])
    ch = scripted(["a", "b", "c", "d", "e", "f"])
    judge = Judge(lambda t, a: next(scores))
    res = generator_critic(TASK, [ch], judge=judge, critic=lambda t, a: "no", rng=RNG(0), rounds=5)
    stops = [t for t in res.trace if t["event"] == "stop"]
    assert stops and stops[0]["why"] == "non-contractive" and res.answer == "b"


# ------------------------------------------------------------------------------------------ rateless
@given(st.lists(st.sampled_from("abc"), min_size=12, max_size=12), st.integers(1, 4), st.integers(1, 10))
@settings(max_examples=80, deadline=None)
def test_rateless_stops_exactly_at_margin_and_never_exceeds_n_max(stream, margin, n_max):
    res = rateless_sampling(TASK, [scripted(stream)], rng=RNG(0), margin=margin, n_max=n_max, rule="margin")
    n = res.n_calls
    assert 1 <= n <= n_max

    def lead(prefix):
        counts = sorted((prefix.count(x) for x in set(prefix)), reverse=True) + [0]
        return counts[0] - counts[1]

    first = next((i + 1 for i in range(n_max) if lead(stream[: i + 1]) >= margin), n_max)
    assert n == first
    assert res.answer == plurality_vote(stream[:n])[0]


def test_rateless_posterior_rule_needs_three_agreeing():
    res = rateless_sampling(TASK, [scripted(["5"] * 8)], rng=RNG(0), rule="posterior", delta=0.1)
    assert res.n_calls == 3 and res.answer == "5"


# ------------------------------------------------------------------------------------------ FEC, ACM
def test_fec_rates():
    res = redundant_verification(TASK, [scripted(["4", "5", "5"])], judge=exact_judge, rng=RNG(0), rate=1 / 3)
    assert res.answer == "5" and res.n_calls == 3
    res = redundant_verification(TASK, [scripted(["4", "5"])], judge=exact_judge, rng=RNG(0), rate=0.5)
    assert res.answer == "5" and res.n_calls == 2  # tie broken by the judge
    res = redundant_verification(TASK, [scripted(["5", "yes"])], rng=RNG(0), rate=0.75)
    assert res.answer == "5" and res.n_calls == 2


def test_acm_accepts_easy_pilot_and_escalates_hard():
    res = adaptive_routing(TASK, [scripted(["5"])], judge=exact_judge, rng=RNG(0))
    assert res.answer == "5" and res.n_calls == 1
    big = scripted(["5", "5", "5", "1", "1"], price_out=10, name="big")
    res = adaptive_routing(TASK, [scripted(["1"]), big], judge=exact_judge, rng=RNG(0))
    assert res.answer == "5" and res.n_calls == 6


def test_operator_table_shares_signature():
    sim = _sim_channel()
    judge = Judge(exact_judge)
    critic = Critic(lambda t, a: None if a == t.answer else "check")
    for name, op in OPERATORS.items():
        r1 = op(TASK, [sim], judge=judge, critic=critic, rng=RNG(3))
        r2 = op(TASK, [sim], judge=judge, critic=critic, rng=RNG(3))
        assert r1.answer == r2.answer and r1.cost == r2.cost, name
        assert r1.cost == pytest.approx(sum(t.get("cost", 0.0) for t in r1.trace)), name


def _sim_channel(p=0.6, gamma=1.0, kappa=0.5, price=1.0, name="sim"):
    return SimulatedChannel(
        lambda t: p,
        lambda t, rng: str(int(rng.integers(0, 4))),
        lambda t, rng: (10, 5),
        (0.0, price),
        name=name,
        gamma=gamma,
        kappa=kappa,
    )


def test_simulated_refinement_follows_contraction():
    good, bad = _sim_channel(0.4, 1.0, 0.8), _sim_channel(0.4, 3.0, 0.9)  # rho 0.2 vs -1.7
    from neurips26.agents.channel_router import Feedback

    assert good.p_correct(TASK, Feedback("critique", "1", round=2)) > 0.9
    assert bad.p_correct(TASK, Feedback("critique", "1", round=1)) == 0.0


# ------------------------------------------------------------------------------------------ closed forms
def test_threshold_zero_for_equal_positive_otherwise():
    assert uniform_vs_weighted_threshold([2.0] * 5) == pytest.approx(0.0, abs=1e-15)
    assert uniform_vs_weighted_threshold([1.0, 2.0, 4.0]) > 0


@given(st.lists(st.floats(0.05, 20), min_size=2, max_size=8), st.floats(0, 1))
@settings(max_examples=80, deadline=None)
def test_threshold_is_where_closed_forms_cross(v, scale):
    t = uniform_vs_weighted_threshold(v)
    assert t >= 0
    w, u = averaging_mse(v, t)
    assert w == pytest.approx(u, rel=1e-9, abs=1e-12)
    tau2 = t * (1 + scale) + 1e-6
    assert uniform_beats_weighted(v, tau2)


@pytest.mark.parametrize("v", [[0.5, 1.0, 2.0, 4.0, 8.0], [1.0, 1.0, 1.0, 3.0, 9.0]])
def test_closed_form_mse_matches_monte_carlo(v):
    t = uniform_vs_weighted_threshold(v)
    for tau2 in (0.0, 0.5 * t, 2 * t):
        mc = simulate_averaging_mse(v, tau2, n_draws=200_000, rng=RNG(7))
        cf = averaging_mse(v, tau2)
        assert mc[0] == pytest.approx(cf[0], rel=0.02) and mc[1] == pytest.approx(cf[1], rel=0.02)


def test_empirical_crossover_within_ten_percent():
    rng = RNG(11)
    for _ in range(3):
        v = rng.uniform(0.2, 5.0, size=5)
        t = uniform_vs_weighted_threshold(v)
        x = empirical_crossover(v, list(np.linspace(0.4 * t, 1.6 * t, 25)), n_draws=200_000, rng=rng)
        assert 0.9 * t <= x <= 1.1 * t


def test_contraction_factor_and_estimate():
    assert contraction_factor(0.8, 0.5) == pytest.approx(0.6)
    assert is_contractive(1.0, 0.5) and not is_contractive(3.0, 0.9) and not is_contractive(1.0, -0.2)
    for rho in (-0.8, 0.2, 0.6, 1.1):
        rng = RNG(1)
        trs = [simulate_refinement(rho, 1.0, 8, noise=0.05, rng=rng) for _ in range(60)]
        assert abs(estimate_contraction(trs) - rho) < 0.05


# ------------------------------------------------------------------------------------------ router
FAMILIES = ["add the numbers", "translate the word", "sort the list", "count the letters"]


def _index(m_per=6, arms=4, seed=0):
    rng = RNG(seed)
    prompts = [f"{f} item {i} {rng.integers(1000)}" for f in FAMILIES for i in range(m_per)]
    Q = rng.uniform(0, 1, size=(len(prompts), arms))
    C = rng.uniform(0.5, 5, size=(len(prompts), arms))
    return prompts, [Arm(f"c{a}", "single") for a in range(arms)], Q, C


def test_hashing_embedder_deterministic_unit_norm():
    e1 = HashingEmbedder(64).embed(["hello world", "abc"])
    e2 = HashingEmbedder(64).embed(["hello world", "abc"])
    assert np.array_equal(e1, e2) and np.allclose(np.linalg.norm(e1, axis=1), 1.0)  # same kernel: rerun, same inputs


def test_router_lambda_zero_picks_highest_q_and_large_lambda_cheapest():
    prompts, arms, Q, C = _index()
    r = SemanticKNNRouter(HashingEmbedder(128), k=5).fit(prompts, arms, Q, C)
    for p in ["add the numbers item 99", "sort the list item x"]:
        q, c = r.estimates(p)
        assert r.route(p, lam=0.0) == arms[int(np.argmax(q))]
        assert r.route(p, lam=1e6) == arms[int(np.argmin(c))]


def test_router_k_all_uniform_lambda_zero_picks_global_best():
    prompts, arms, Q, C = _index()
    r = SemanticKNNRouter(HashingEmbedder(128), k=len(prompts), weighting="uniform").fit(prompts, arms, Q, C)
    best = arms[int(np.argmax(Q.mean(0)))]
    assert all(a == best for a in r.predict(["anything at all", "add the numbers"], lam=0.0))


def test_router_cost_non_increasing_in_lambda():
    prompts, arms, Q, C = _index(seed=3)
    r = SemanticKNNRouter(HashingEmbedder(128), k=3).fit(prompts, arms, Q, C)
    test = [f"{f} query {i}" for f in FAMILIES for i in range(3)]
    lams = [0, 0.01, 0.05, 0.1, 0.3, 1, 3, 10]
    picks = r.route_curve(test, lams)
    chat = np.array([r.estimates(p)[1] for p in test])
    costs = [chat[np.arange(len(test)), row].mean() for row in picks]
    assert all(b <= a + 1e-12 for a, b in zip(costs, costs[1:]))


def test_router_mask_and_k1_exact_row():
    prompts, arms, Q, C = _index()
    mask = np.array([True, False, True, False])
    r = SemanticKNNRouter(HashingEmbedder(128), k=1).fit(prompts, arms, Q, C, mask=mask)
    for i in (0, 7, 20):
        q, c = r.estimates(prompts[i])
        assert np.array_equal(q, Q[i]) and np.array_equal(c, C[i])  # same kernel (k = 1: weight 1.0)
    for lam in (0, 0.1, 1, 100):
        assert all(a in (arms[0], arms[2]) for a in r.predict(prompts, lam=lam))


def test_router_save_load_roundtrip(tmp_path):
    prompts, arms, Q, C = _index()
    r = SemanticKNNRouter(HashingEmbedder(128), k=3, lam=0.2).fit(prompts, arms, Q, C)
    path = r.save(tmp_path / "idx.npz")
    r2 = SemanticKNNRouter.load(path)
    for p in ["sort the list item 3", "count"]:
        assert all(np.array_equal(a, b) for a, b in zip(r.estimates(p), r2.estimates(p)))  # same kernel: save/load round trip
        assert r.route(p) == r2.route(p)
    assert r2.arms == arms and r2.lam == 0.2


def test_router_errors():
    prompts, arms, Q, C = _index()
    with pytest.raises(ValueError, match="lam"):
        SemanticKNNRouter(lam=-1.0)
    r = SemanticKNNRouter(HashingEmbedder(64), k=3).fit(prompts, arms, Q, C)
    with pytest.raises(ValueError, match="lam"):
        r.route("x", lam=-0.5)
    with pytest.raises(ValueError, match="k"):
        SemanticKNNRouter(k=0)
    with pytest.raises(ValueError, match="k must lie"):
        SemanticKNNRouter(HashingEmbedder(64), k=len(prompts) + 1).fit(prompts, arms, Q, C)
    with pytest.raises(ValueError, match="arms must not be empty"):
        SemanticKNNRouter(HashingEmbedder(64)).fit(prompts, [], Q[:, :0], C[:, :0])
    with pytest.raises(ValueError, match="Q must have shape"):
        SemanticKNNRouter(HashingEmbedder(64), k=3).fit(prompts, arms, Q[:-1], C)
    with pytest.raises(ValueError, match="C must have shape"):
        SemanticKNNRouter(HashingEmbedder(64), k=3).fit(prompts, arms, Q, C[:, :2])
    with pytest.raises(RuntimeError, match="not fitted"):
        SemanticKNNRouter().route("x")


def test_operator_errors():
    with pytest.raises(TypeError, match="sampler must be callable"):
        Channel("not a function")
    with pytest.raises(ValueError, match="channels"):
        single_shot(TASK, [], rng=RNG(0))
    with pytest.raises(TypeError, match="rng"):
        single_shot(TASK, [scripted(["1"])], rng=0)
    with pytest.raises(ValueError, match="n must lie"):
        diversity_combining(TASK, [scripted(["1"])], rng=RNG(0), n=0)
    with pytest.raises(ValueError, match="judge"):
        hybrid_retransmission(TASK, [scripted(["1"])], rng=RNG(0))
    with pytest.raises(ValueError, match="combine"):
        diversity_combining(TASK, [scripted(["1"])], rng=RNG(0), combine="mean")
    with pytest.raises(ValueError, match="variances"):
        uniform_vs_weighted_threshold([1.0, -1.0])
    with pytest.raises(ValueError, match="kappa"):
        contraction_factor(1.0, 2.0)


# ------------------------------------------------------------------------------------------ frontier
def test_pareto_frontier_and_occupancy():
    pts = np.array([[1, 0.5], [2, 0.7], [2, 0.6], [3, 0.7], [0.5, 0.2]])
    assert pareto_frontier(pts).tolist() == [4, 0, 1]
    assert pareto_occupancy(pts[:2], pts[2:]) == pytest.approx(2 / 3)


def test_matched_metrics_hand_computed():
    curve = np.array([[0.0, 4.0, 0.9], [1.0, 2.0, 0.8], [2.0, 1.0, 0.6]])
    fixed = np.array([[5.0, 0.7], [1.0, 0.5]])
    mq = matched_quality_cost_reduction(curve, fixed)
    # lam* = 1 (quality 0.8 >= 0.7), next falls to 0.6: interpolate cost at 0.7 -> 1.5
    assert mq["matched"] and mq["lam_star"] == 1.0 and mq["router_cost"] == pytest.approx(1.5)
    assert mq["reduction"] == pytest.approx(0.7)
    mc = matched_cost_quality_gain(curve, fixed)
    assert mc["router_quality"] == pytest.approx(0.9) and mc["gain"] == pytest.approx(0.2)
    assert not matched_quality_cost_reduction(curve, np.array([[5.0, 0.95]]))["matched"]


def test_evaluate_arms_deterministic_and_masks_names():
    small, big = _sim_channel(0.4, name="small"), _sim_channel(0.9, price=10, name="big")
    chans = {"small": small, "big": big}
    tasks = [Task(f"q{i}", answer=str(i % 4)) for i in range(6)]
    arms = [Arm("small", "single"), Arm("small", "sc", (("n", 3),)), Arm("big", "single")]
    Q1, C1 = evaluate_arms(tasks, arms, chans, judge=exact_judge, seed=0)
    Q2, C2 = evaluate_arms(tasks, arms, chans, judge=exact_judge, seed=0)
    assert np.array_equal(Q1, Q2) and np.array_equal(C1, C2)  # same kernel: rerun, same seed
    assert np.allclose(C1[:, 0], 1.0) and np.allclose(C1[:, 1], 3.0) and np.allclose(C1[:, 2], 10.0)
    with pytest.raises(ValueError, match="channel"):
        evaluate_arms(tasks, [Arm("nope", "single")], chans)
    assert math.isfinite(Q1.mean())


def test_router_leave_one_out_excludes_self():
    prompts, arms, Q, C = _index()
    r = SemanticKNNRouter(HashingEmbedder(128), k=1).fit(prompts, arms, Q, C)
    q, c = r.loo_estimates()
    sims = r.E @ r.E.T
    np.fill_diagonal(sims, -np.inf)
    nn = sims.argmax(1)
    assert np.array_equal(q, Q[nn]) and np.array_equal(c, C[nn])  # same kernel (k = 1: weight 1.0)
    assert 0.0 <= r.loo_quality(0.0) <= 1.0
    with pytest.raises(ValueError, match="leave-one-out"):
        SemanticKNNRouter(HashingEmbedder(64), k=len(prompts)).fit(prompts, arms, Q, C).loo_estimates()


def test_hf_channel_shared_prefix_sampling_equals_independent_prompts():
    """Prefilling once and repeating the KV cache gives the same greedy completions as n separate prompts."""
    from neurips26.agents.channel_router import HFChannel
    from neurips26.common.models import build_tiny_lm
    from neurips26.common.tokenizers import char_tokenizer

    tok = char_tokenizer("0123456789+-=() abcdefghijklmnopqrstuvwxyz")
    model = build_tiny_lm("llama", vocab_size=len(tok), seed=0).eval()
    ch = HFChannel(model, tok, max_new_tokens=5, temperature=0.0, chat=False, batch_size=8, name="tiny")
    prompts = ["1=", "abcdefghij klmnop qrstuv 123456 (7)", "9 9 9="]  # left padding in the shared batch
    shared = ch.generate_batch(prompts, seed=0, n=3)
    separate = [ch.generate_batch([p], seed=0, n=1)[0] for p in prompts for _ in range(3)]
    assert [(s.text, s.tokens_in, s.tokens_out) for s in shared] == [
        (s.text, s.tokens_in, s.tokens_out) for s in separate
    ]
    ch.price_in = 0.5
    s = ch.sample(Task("12+3="), 2, rng=RNG(0))
    assert len(s) == 2 and all(x.cost == pytest.approx(0.5 * x.tokens_in + x.tokens_out) for x in s)
    assert s[0].tokens_in == len(tok("12+3=")["input_ids"])

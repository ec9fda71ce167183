"""AIQL / A²IQL: expectile loss, Plackett-Luce actor, aggregate critic invariances, A²IQL reductions, the Bayesian
reward predictor, the Gymnasium warehouse (check_env, constraints, determinism) and the Minari round trip."""

from __future__ import annotations

import copy
import itertools
import math

import numpy as np
import pytest
import torch

# the package registers its environment with gymnasium on import, so every test here needs it; Minari is
# needed only by the tests that write or read a dataset (per test, below)
gym = pytest.importorskip("gymnasium", reason="neurips26.rl.aiql registers a gymnasium env (envs extra)")

from neurips26.rl.aiql import (  # noqa: E402
    A2IQL,
    ENV_ID,
    F_DIM,
    G_DIM,
    BayesianRewardPredictor,
    BehaviourCloning,
    CandidateScoringActor,
    OfflineRankingDataset,
    RandomFourierFeatures,
    WarehouseConsolidationEnv,
    aggregate_features,
    behaviour_policy,
    check_same_env,
    collect_minari,
    expectile_loss,
    heuristic_policy,
    make_aiql,
    make_env,
    parameter_hash,
)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def minari_root(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    return tmp_path / "minari"


def _batch(seed=0, E=4, N=6, K=2):
    g = torch.Generator().manual_seed(seed)
    counts = [N, N - 2, 3, N - 1][:E]
    mask = torch.zeros(E, N, dtype=torch.bool)
    for i, c in enumerate(counts):
        mask[i, :c] = True
    cand = torch.rand(E, N, F_DIM, generator=g) * mask.unsqueeze(-1)
    action = torch.stack([torch.randperm(c, generator=g)[:K] for c in counts])
    return {
        "global": torch.rand(E, G_DIM, generator=g),
        "candidates": cand,
        "mask": mask,
        "action": action,
        "reward": torch.rand(E, generator=g),
        "next_global": torch.rand(E, G_DIM, generator=g),
        "done": torch.zeros(E),
    }


# ----------------------------------------------------------------------------- expectile
def test_expectile_loss_reduces_to_half_mse_and_weights_signs():
    u = torch.tensor([-2.0, -0.5, 0.0, 1.0, 3.0])
    assert torch.allclose(expectile_loss(u, 0.5), 0.5 * (u**2).mean())
    tau = 0.7
    expected = torch.tensor([0.3 * 4, 0.3 * 0.25, 0.0, 0.7 * 1, 0.7 * 9]).mean()
    assert torch.allclose(expectile_loss(u, tau), expected)
    for bad in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="tau"):
            expectile_loss(u, bad)


# ----------------------------------------------------------------------------- actor
def test_plackett_luce_sums_to_one_over_all_ordered_selections():
    scores = torch.tensor([[0.3, -1.2, 2.0, 0.7]])
    mask = torch.tensor([[True, True, True, False]])
    total = 0.0
    for a, b in itertools.permutations(range(3), 2):
        total += math.exp(float(CandidateScoringActor.log_prob(scores, mask, torch.tensor([[a, b]]))))
    assert total == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError, match="masked"):
        CandidateScoringActor.log_prob(scores, mask, torch.tensor([[3, 0]]))
    with pytest.raises(ValueError, match="twice"):
        CandidateScoringActor.log_prob(scores, mask, torch.tensor([[1, 1]]))
    # an unused slot (-1) contributes nothing: P(first = 2) alone
    one = CandidateScoringActor.log_prob(scores, mask, torch.tensor([[2, -1]]))
    assert torch.allclose(one, scores[0, 2] - torch.logsumexp(scores[0, :3], 0))


def test_masked_candidates_get_no_probability_and_are_never_selected():
    torch.manual_seed(0)
    actor = CandidateScoringActor(G_DIM, F_DIM, hidden=16, pool_dim=8)
    b = _batch()
    scores = actor(b["global"], b["candidates"], b["mask"])
    assert torch.isneginf(scores[~b["mask"]]).all() and torch.isfinite(scores[b["mask"]]).all()
    gen = torch.Generator().manual_seed(1)
    for _ in range(50):
        sel = CandidateScoringActor.select(scores, b["mask"], 3, greedy=False, generator=gen)
        assert b["mask"].gather(1, sel).all()
    with pytest.raises(ValueError, match="exceeds"):
        CandidateScoringActor.select(scores, b["mask"], 4)  # row 2 has only 3 valid candidates


def test_actor_is_permutation_equivariant_and_pool_ignores_padding():
    torch.manual_seed(0)
    actor = CandidateScoringActor(G_DIM, F_DIM, hidden=16, pool_dim=8)
    b = _batch(E=1, N=6)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    s = actor(b["global"], b["candidates"], b["mask"])
    sp = actor(b["global"], b["candidates"][:, perm], b["mask"][:, perm])
    assert torch.allclose(sp, s[:, perm], atol=1e-6)
    # more padding (with garbage features) changes nothing on the real rows
    pad = torch.cat([b["candidates"], 5 * torch.ones(1, 3, F_DIM)], 1)
    mpad = torch.cat([b["mask"], torch.zeros(1, 3, dtype=torch.bool)], 1)
    assert torch.allclose(actor(b["global"], pad, mpad)[:, :6], s, atol=1e-6)


def test_aggregate_features_and_critic_are_permutation_invariant():
    agent = make_aiql(G_DIM, F_DIM, 2, hidden=16)
    b = _batch(E=1, N=6)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    inv = torch.argsort(perm)
    z = aggregate_features(b["candidates"], b["mask"], b["action"])
    z_perm = aggregate_features(b["candidates"][:, perm], b["mask"][:, perm], inv[b["action"]])
    z_swap = aggregate_features(b["candidates"], b["mask"], b["action"].flip(1))
    pad = torch.cat([b["candidates"], torch.ones(1, 4, F_DIM)], 1)
    z_pad = aggregate_features(
        pad, torch.cat([b["mask"], torch.zeros(1, 4, dtype=torch.bool)], 1), b["action"]
    )
    for other in (z_perm, z_swap, z_pad):
        assert torch.allclose(z, other, atol=1e-6)
    q = agent.critics[0](b["global"], z)
    assert torch.allclose(q, agent.critics[0](b["global"], z_perm), atol=1e-6)


# ----------------------------------------------------------------------------- AIQL / A²IQL
def test_aiql_update_runs_and_bc_is_beta_zero():
    b = _batch()
    agent = make_aiql(G_DIM, F_DIM, 2, hidden=16, seed=0, beta=0.0)
    bc = BehaviourCloning(copy.deepcopy(agent.actor), lr=agent.lr)
    logs = agent.update(b)
    assert all(math.isfinite(v) for v in logs.values())
    bc.update(b)  # β = 0: weights are 1, so the actor step equals behaviour cloning
    for p, q in zip(agent.actor.parameters(), bc.actor.parameters()):
        assert torch.allclose(p, q, atol=1e-7)


def test_a2iql_with_zero_bonus_equals_aiql_extraction_and_never_touches_the_critic():
    b = _batch()
    source = make_aiql(G_DIM, F_DIM, 2, hidden=16, seed=0)
    for _ in range(3):
        source.update(b)
    reference = copy.deepcopy(source)
    reference.actor_opt = torch.optim.Adam(reference.actor.parameters(), lr=source.lr)  # fresh, like A²IQL's
    frozen = parameter_hash(source.critics, source.targets, source.value)
    adapted = A2IQL(source, None, kappa=0.0, eta=0.0)
    for _ in range(3):
        adapted.update_actor(b)
        reference.actor_step(b)
    # the same loss, but A²IQL's Adam is foreach and the reference's per-tensor (different kernels):
    # bound: |p - q| <= 2 * steps * (max|p| + 8 lr) * eps32 (see test_abc_align's Adam test)
    eps = torch.finfo(torch.float32).eps
    for p, q in zip(adapted.actor.parameters(), reference.actor.parameters()):
        bound = 2 * 3 * (float(q.abs().max()) + 8 * source.lr) * eps
        torch.testing.assert_close(p, q, rtol=0.0, atol=bound)
    assert parameter_hash(source.critics, source.targets, source.value) == frozen
    # with a bonus the critic is still never changed, and the actor moves differently
    X = torch.cat([b["global"], aggregate_features(b["candidates"], b["mask"], b["action"])], 1)
    brm = BayesianRewardPredictor(RandomFourierFeatures(X.shape[1], 32)).fit(X, torch.randn(X.shape[0]))
    bonus = A2IQL(source, brm, kappa=1.0, eta=1.0)
    bonus.calibrate([b])
    bonus.update_actor(b)
    assert parameter_hash(source.critics, source.targets, source.value) == frozen
    with pytest.raises(ValueError, match="fitted"):
        A2IQL(source, None, eta=1.0)


def test_bayesian_reward_predictor_matches_the_closed_form_and_is_uncertain_far_away():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(30, 1, generator=g, dtype=torch.float64) * 2 - 1
    y = 0.7 * x[:, 0] - 0.2 + 0.1 * torch.randn(30, generator=g, dtype=torch.float64)
    alpha, beta = 2.0, 100.0
    model = BayesianRewardPredictor(prior_precision=alpha, noise_precision=beta).fit(x, y)
    Phi = torch.cat([x, torch.ones(30, 1, dtype=torch.float64)], 1)
    S = torch.linalg.inv(alpha * torch.eye(2, dtype=torch.float64) + beta * Phi.T @ Phi)
    m = beta * S @ Phi.T @ y
    xq = torch.tensor([[0.3], [2.5]], dtype=torch.float64)
    P = torch.cat([xq, torch.ones(2, 1, dtype=torch.float64)], 1)
    mean, std = model.predict(xq)
    assert torch.allclose(mean, P @ m)
    assert torch.allclose(std, (1 / beta + ((P @ S) * P).sum(1)).sqrt())
    assert std[1] > std[0]  # larger far from the data (x in [-1, 1])
    fitted = BayesianRewardPredictor(prior_precision=alpha).fit(x, y)  # evidence-maximised noise
    assert 30 < fitted.beta < 300  # the true noise precision is 1 / 0.1² = 100
    # more data near a point shrinks the predictive std there
    rff = RandomFourierFeatures(1, 64, lengthscale=0.5, seed=1)
    few = BayesianRewardPredictor(rff, noise_precision=100.0).fit(x[:5], y[:5])
    many = BayesianRewardPredictor(rff, noise_precision=100.0).fit(
        torch.cat([x, torch.full((20, 1), 0.3, dtype=torch.float64)]),
        torch.cat([y, torch.full((20,), 0.01, dtype=torch.float64)]),
    )
    assert many.predict(xq[:1])[1] < few.predict(xq[:1])[1]
    ens = BayesianRewardPredictor(rff, backend="ensemble").fit(x, y)
    assert ens.predict(xq)[1].shape == (2,)


# ----------------------------------------------------------------------------- environment
def _small(**kw):
    return dict(dict(n_locations=40, n_skus=8, max_candidates=64, horizon=8), **kw)


def test_env_is_registered_and_passes_check_env():
    from gymnasium.utils.env_checker import check_env

    env = gym.make(ENV_ID, **_small())
    check_env(env.unwrapped)
    assert isinstance(env.unwrapped, WarehouseConsolidationEnv)


def test_env_constraints_variable_candidates_determinism_and_invalid_actions():
    env = WarehouseConsolidationEnv(**_small(invalid_action="raise"))
    rng = np.random.default_rng(0)
    counts, traj = set(), []
    obs, _ = env.reset(seed=3)
    for _ in range(8):
        n = int(obs["mask"].sum())
        counts.add(n)
        assert not obs["mask"][n:].any() and not obs["candidates"][n:].any()  # padding after the real rows
        action = behaviour_policy(obs, env.B, rng, epsilon=0.5)
        obs, r, term, trunc, info = env.step(action)
        traj.append((r, info["throughput"], obs["global"].tobytes()))
        assert (env.qty <= env.capacity).all() and (env.qty >= 0).all()
        assert ((env.sku < 0) == (env.qty == 0)).all()  # empty locations hold no SKU, and vice versa
        for s, d in env.candidate_moves():
            assert env.sku[s] == env.sku[d] and env.qty[s] + env.qty[d] <= env.capacity
    assert len(counts) > 1  # the candidate set changes size from epoch to epoch
    again = WarehouseConsolidationEnv(**_small(invalid_action="raise"))
    obs, _ = again.reset(seed=3)
    rng = np.random.default_rng(0)
    for i in range(8):
        obs, r, _, _, info = again.step(behaviour_policy(obs, again.B, rng, epsilon=0.5))
        assert (r, info["throughput"], obs["global"].tobytes()) == traj[i]
    # a masked index is an error in strict mode, skipped (and counted) in the registered default
    obs, _ = env.reset(seed=1)
    n = int(obs["mask"].sum())
    with pytest.raises(ValueError, match="not candidates"):
        env.step(np.array([n] + [env.C] * (env.B - 1)))
    lenient = WarehouseConsolidationEnv(**_small())
    obs, _ = lenient.reset(seed=1)
    _, _, _, _, info = lenient.step(np.array([int(obs["mask"].sum())] + [lenient.C] * (lenient.B - 1)))
    assert info["invalid"] == 1 and info["moves"] == 0


def test_heuristic_prefers_short_moves_and_pads():
    obs = {"candidates": np.zeros((4, F_DIM), np.float32), "mask": np.array([1, 1, 1, 0], np.int8)}
    obs["candidates"][:3, 4] = [0.5, 0.1, -0.3]  # signed normalised distance
    assert heuristic_policy(obs, 5).tolist() == [1, 2, 0, 4, 4]


# ----------------------------------------------------------------------------- data
def test_minari_dataset_round_trip_and_collation(minari_root):
    minari = pytest.importorskip("minari")
    kwargs = _small()
    data = collect_minari(
        "neurips26/warehouse/test-v0", lambda o, r: behaviour_policy(o, 5, r), 3, seed=0, env_kwargs=kwargs
    )
    assert (minari_root / "neurips26").exists()
    loaded = minari.load_dataset("neurips26/warehouse/test-v0")
    assert loaded.total_episodes == 3 and loaded.total_steps == 3 * kwargs["horizon"]
    env = make_env(**kwargs)
    ds = OfflineRankingDataset.from_minari(loaded, env_spec=env.spec)
    assert len(ds) == data.total_steps
    ep = next(loaded.iterate_episodes())
    assert np.allclose(ds.records["global"][0].numpy(), ep.observations["global"][0])
    assert ds.records["reward"][0] == pytest.approx(ep.rewards[0])
    n0 = int(ep.observations["mask"][0].sum())
    assert ds.records["candidates"][0].shape == (n0, F_DIM)
    items = [ds[i] for i in range(4)]
    batch = OfflineRankingDataset.collate(items)
    width = max(int(it["candidates"].shape[0]) for it in items)
    assert batch["candidates"].shape == (4, width, F_DIM)
    for j, it in enumerate(items):
        n = it["candidates"].shape[0]
        assert batch["mask"][j, :n].all() and not batch["mask"][j, n:].any()
        assert torch.equal(batch["candidates"][j, :n], it["candidates"])  # same kernel: collation copies
    # sample() gathers the columns at once: the same batch as collating the drawn items one by one
    idx = torch.randint(0, len(ds), (7,), generator=torch.Generator().manual_seed(3))
    fast = ds.sample(7, torch.Generator().manual_seed(3))
    slow = OfflineRankingDataset.collate([ds[int(i)] for i in idx])
    assert list(fast) == list(slow)
    for k in slow:
        assert fast[k].dtype == slow[k].dtype and torch.equal(fast[k], slow[k]), k  # same kernel: collation copies
    with pytest.raises(IndexError, match="indices"):
        ds.gather(torch.tensor([len(ds)]))
    with pytest.raises(ValueError, match="empty"):
        ds.gather(torch.tensor([], dtype=torch.long))
    target = ds.with_reward("target_reward")
    assert torch.equal(target.records["reward"], ds.records["target_reward"])  # same kernel: a copied column
    other = make_env(**_small(n_locations=48))
    with pytest.raises(ValueError, match="another environment spec"):
        check_same_env(loaded, other.spec)
    with pytest.raises(ValueError, match="exists"):
        collect_minari(
            "neurips26/warehouse/test-v0", lambda o, r: heuristic_policy(o, 5), 1, seed=0, env_kwargs=kwargs
        )

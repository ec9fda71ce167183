"""RewardFlow, GiGPO and GRPO advantages: exact small graphs, reductions, properties, errors."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.rl.losses import group_advantages
from neurips26.rl.rewardflow import (
    RewardFlowConfig,
    StateGraph,
    Trajectory,
    gigpo_step_rewards,
    propagate_values,
    rewardflow_rewards,
    trajectory_advantages,
    two_level_advantages,
    unique_state_ratio,
)

G = 0.9


def chain():
    return Trajectory("task", ["s0", "s1", "s2", "goal"], ["a", "a", "a"], [0.0, 0.0, 10.0])


def test_chain_graph_values_and_telescoping():
    graph = StateGraph.from_trajectories([chain()])
    v = propagate_values(graph, gamma=G)
    order = [graph.nodes[k] for k in ("s0", "s1", "s2", "goal")]
    np.testing.assert_allclose(v[order], [10 * G**3, 10 * G**2, 10 * G, 10.0])
    (r,), (vals,) = rewardflow_rewards([chain()], RewardFlowConfig(gamma=G), return_values=True)
    np.testing.assert_allclose(r, [10 * G**2 - 10 * G**3, 10 * G - 10 * G**2, 10 - 10 * G])
    assert r.sum() == pytest.approx(vals[-1] - vals[0])


def test_merging_credits_failed_trajectory_on_successful_path_and_not_dead_ends():
    success = Trajectory("g", ["A", "B", "C", "goal"], ["x", "x", "x"], [0, 0, 10])
    failed = Trajectory("g", ["D", "B", "E"], ["x", "x"], [0, 0])  # passes through B, then a dead end E
    graph = StateGraph.from_trajectories([success, failed])
    v = propagate_values(graph, gamma=G)
    assert v[graph.nodes["B"]] == pytest.approx(10 * G**2)
    assert v[graph.nodes["D"]] == pytest.approx(10 * G**3)  # only visited by the failed rollout
    assert v[graph.nodes["E"]] == 0.0
    rewards = rewardflow_rewards([success, failed], RewardFlowConfig(gamma=G))
    assert rewards[1][0] > 0  # D -> B moves towards success
    assert rewards[1][1] < 0  # B -> E leaves the successful path


def test_multiple_successes_take_the_max_and_cycles_converge_without_self_loops():
    t1 = Trajectory("g", ["A", "B", "win5"], ["x", "x"], [0, 5])
    t2 = Trajectory("g", ["A", "C", "D", "win10"], ["x", "x", "x"], [0, 0, 10])
    t3 = Trajectory("g", ["A", "A", "B", "A", "C"], ["x", "x", "x", "x"], [0, 0, 0, 0])  # self-loop and cycle
    graph = StateGraph.from_trajectories([t1, t2, t3])
    assert all(u != v for u, v in graph.edges)
    for method in ("decay", "iterative"):
        v = propagate_values(graph, gamma=G, method=method)
        # A reaches win5 in 2 hops (4.05) and win10 in 3 hops (7.29): the max wins
        assert v[graph.nodes["A"]] == pytest.approx(max(5 * G**2, 10 * G**3))
        assert v[graph.nodes["B"]] == pytest.approx(max(5 * G, 10 * G**4))  # B -> A -> C -> D -> win10


@st.composite
def random_graphs(draw):
    n_traj = draw(st.integers(1, 5))
    trajs = []
    for _ in range(n_traj):
        length = draw(st.integers(1, 8))
        obs = draw(st.lists(st.integers(0, 6), min_size=length + 1, max_size=length + 1))
        rewards = draw(
            st.lists(st.sampled_from([0.0, 0.0, 0.0, 1.0, 10.0]), min_size=length, max_size=length)
        )
        trajs.append(Trajectory("g", obs, ["a"] * length, rewards))
    return trajs, draw(st.floats(0.05, 1.0))


@settings(max_examples=60, deadline=None)
@given(random_graphs())
def test_bfs_equals_iterative_on_random_graphs(case):
    trajs, gamma = case
    graph = StateGraph.from_trajectories(trajs)
    a = propagate_values(graph, gamma=gamma, method="decay")
    b = propagate_values(graph, gamma=gamma, method="iterative")
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    assert (a >= graph.node_reward - 1e-12).all()


def test_ppr_values_are_high_near_success_and_zero_without_success():
    graph = StateGraph.from_trajectories([chain()])
    v = propagate_values(graph, method="ppr")
    order = [graph.nodes[k] for k in ("s0", "s1", "s2", "goal")]
    assert np.all(np.diff(v[order]) > 0) and v.max() == pytest.approx(10.0)
    fail = Trajectory("t", ["a", "b"], ["x"], [0.0])
    assert propagate_values(StateGraph.from_trajectories([fail]), method="ppr").tolist() == [0.0, 0.0]


def test_fuzzy_merging_joins_near_identical_text_states():
    t1 = Trajectory("g", ["room one door", "room two", "goal room"], ["x", "x"], [0, 10])
    t2 = Trajectory("g", ["room one door.", "dead end"], ["x"], [0])
    exact = StateGraph.from_trajectories([t1, t2])
    fuzzy = StateGraph.from_trajectories([t1, t2], similarity=0.9)
    assert len(exact) == 5 and len(fuzzy) == 4
    assert fuzzy.assignment[0][0] == fuzzy.assignment[1][0]


def _grpo_mean_norm(trajs):
    """GRPO mean-norm episode advantages broadcast over steps, mean over step rows."""
    out = []
    for g in dict.fromkeys(t.group_id for t in trajs):
        members = [t for t in trajs if t.group_id == g]
        pool = np.concatenate([[t.episode_return] * len(t) for t in members])
        out.append(pool - pool.mean())
    return np.concatenate(out)


def test_no_success_group_reduces_to_grpo_and_step_weight_zero_is_grpo():
    fail = [Trajectory("f", ["a", "b", "c"], ["x", "y"], [0, 0]), Trajectory("f", ["a", "c"], ["z"], [0])]
    win = [
        Trajectory("w", ["a", "b", "g"], ["x", "y"], [0, 10]),
        Trajectory("w", ["a", "d", "e"], ["x", "y"], [0, 0]),
    ]
    _, values = rewardflow_rewards(fail + win, return_values=True)
    assert all((v == 0).all() for v in values[:2])
    rf = trajectory_advantages(fail + win, "rewardflow")
    grpo = trajectory_advantages(fail + win, "grpo")
    np.testing.assert_array_equal(rf[:3], grpo[:3])  # same kernel; the failed group's rows
    np.testing.assert_array_equal(grpo, _grpo_mean_norm(fail + win))  # same kernel: same numpy ops
    off = trajectory_advantages(fail + win, "rewardflow", RewardFlowConfig(step_weight=0.0))
    np.testing.assert_array_equal(off, grpo)  # same kernel: GRPO is step_weight = 0
    assert not np.array_equal(rf[3:], grpo[3:])


def test_grpo_over_trajectories_equals_library_group_advantages():
    trajs = [
        Trajectory("g", ["a"] * (k + 2), ["x"] * (k + 1), [0] * k + [r]) for k, r in enumerate([10, 0, 0, 10])
    ]
    cfg = RewardFlowConfig(episode_mean_over="trajectories", mode="mean_std_norm")
    adv = trajectory_advantages(trajs, "grpo", cfg)
    ref = group_advantages(torch.tensor([10.0, 0, 0, 10]), 4, eps=1e-6).numpy()
    expected = np.concatenate([[ref[i]] * (i + 1) for i in range(4)])
    np.testing.assert_allclose(adv, expected, rtol=1e-5)


def test_episode_mean_over_steps_vs_trajectories_by_hand():
    ret = np.array([10.0, 10.0, 0.0, 0.0, 0.0])  # traj 0 has 2 steps, traj 1 has 3 steps
    keys = ["a", "b", "c", "d", "e"]  # all singleton step groups -> step advantage 0
    kw = dict(anchor_keys=keys, group_ids=["g"] * 5, traj_ids=[0, 0, 1, 1, 1])
    steps = two_level_advantages(ret, np.ones(5), **kw, episode_mean_over="steps")
    trajs = two_level_advantages(ret, np.ones(5), **kw, episode_mean_over="trajectories")
    np.testing.assert_allclose(steps, [6, 6, -4, -4, -4])  # mean over rows = 4
    np.testing.assert_allclose(trajs, [5, 5, -5, -5, -5])  # mean over trajectories = 5


def test_step_groups_by_anchor_state_and_singletons_give_zero():
    ret = np.zeros(4)
    adv = two_level_advantages(
        ret, np.array([1.0, 3.0, 5.0, 7.0]), ["s", "s", "t", "u"], ["g"] * 4, [0, 1, 0, 1], step_weight=0.5
    )
    np.testing.assert_allclose(adv, [-0.5, 0.5, 0.0, 0.0])


def test_gigpo_discounted_returns():
    (r,) = gigpo_step_rewards([chain()], gamma=0.5)
    np.testing.assert_allclose(r, [2.5, 5.0, 10.0])
    adv = trajectory_advantages([chain(), Trajectory("task", ["s0", "x"], ["b"], [0])], "gigpo")
    assert adv[0] != adv[3]  # both start in s0: step group of two with different returns


def test_unique_state_ratio():
    assert unique_state_ratio([chain(), chain()]) == pytest.approx(4 / 8)


def test_bad_inputs():
    with pytest.raises(ValueError, match="one group_id"):
        StateGraph.from_trajectories([chain(), Trajectory("other", ["a", "b"], ["x"], [0])])
    with pytest.raises(TypeError, match="not hashable"):
        StateGraph.from_trajectories([Trajectory("g", [object.__new__(_Unhashable), "b"], ["x"], [0])])
    with pytest.raises(ValueError, match="gamma"):
        RewardFlowConfig(gamma=0.0)
    with pytest.raises(ValueError, match="gamma"):
        propagate_values(StateGraph.from_trajectories([chain()]), gamma=1.5)
    neg = Trajectory("g", ["a", "b"], ["x"], [-1.0])
    with pytest.raises(ValueError, match="shift"):
        rewardflow_rewards([neg])
    with pytest.raises(ValueError, match="lengths disagree"):
        Trajectory("g", ["a", "b", "c"], ["x"], [0])
    bad = chain()
    bad.actions.append("extra")
    with pytest.raises(ValueError, match="lengths disagree"):
        rewardflow_rewards([bad])
    with pytest.raises(ValueError, match="length N"):
        two_level_advantages(np.zeros(3), np.zeros(2), ["a"] * 3, ["g"] * 3, [0] * 3)
    with pytest.raises(ValueError, match="method"):
        RewardFlowConfig(method="bfs")
    with pytest.raises(TypeError, match="text"):
        StateGraph.from_trajectories([Trajectory("g", [1, 2], ["x"], [0])], similarity=0.9)


class _Unhashable:
    __hash__ = None

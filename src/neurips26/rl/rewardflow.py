r"""RewardFlow: state-level rewards for multi-turn agent RL by propagating success over a state graph.

Paper
-----
"RewardFlow: annotation-free state-level rewards for agentic RL by propagating success over a
state graph merged from a group of rollouts" (arXiv 2603.18859; seed ``000_f8b4140a0e3b5d84.txt``,
paragraph beginning "Reinforcement learning (RL) shows promise for"). Reference code:
github.com/tmlr-group/RewardFlow. Baselines in the same module: GiGPO (Feng et al., arXiv 2505.10978:
anchor-state step groups with discounted-return step rewards) and GRPO (episode level only).
Public: the paper and the reference code; the ``"ppr"`` propagation's semantics are inferred (spec
``shared/specs/rewardflow.md``).

Math
----
For one task group ``g`` with trajectories :math:`\tau_i = (s_{i,0}, a_{i,0}, \dots, s_{i,T_i})` and
rewards :math:`\rho_{i,t}` (received on entering :math:`s_{i,t+1}`):

1. Merge identical anchor states (exact key, or greedy fuzzy clusters with ``difflib`` ratio
   :math:`\ge` ``similarity``) into a directed graph; edges are the observed transitions, self-loops
   dropped; :math:`R(v)` is the reward observed on first entering :math:`v`.
2. Propagate (``method="decay"``, exact for :math:`R \ge 0`):

   .. math::  V(v) = \max_{u \text{ reachable from } v} \gamma^{d(v,u)} R(u)

   computed by a multi-source best-first search on the reversed graph (a BFS when all success
   rewards are equal); ``"iterative"`` is the reference fixed point
   :math:`V^{k+1}(v) = \max(V^k(v), \max_{u\in succ(v)} \gamma V^k(u))`; ``"ppr"`` is personalised
   PageRank on the reversed graph with teleport mass on success nodes (inferred semantics).
3. Difference step rewards :math:`\tilde r_{i,t} = V(s_{i,t+1}) - V(s_{i,t})` (they telescope).
4. Two-level advantages (shared with GiGPO):

   .. math::  A_{i,t} = \underbrace{R_i - \mathrm{mean}_g R}_{A^E_i}
              + w\,\underbrace{(\tilde r_{i,t} - \mathrm{mean}_{\{(j,k): s_{j,k} = s_{i,t}\}} \tilde r)}_{A^S_{i,t}}

   (``mode="mean_std_norm"`` divides each term by its group's std + 1e-6); GiGPO replaces
   :math:`\tilde r` with the discounted return :math:`\sum_{k\ge t}\gamma^{k-t}\rho_{i,k}`; GRPO is
   ``step_weight = 0``.

Shapes
------
Per-trajectory step rewards: list of ``(T_i,)`` arrays. Per-row inputs of
:func:`two_level_advantages`: ``(N,)`` with ``N = sum_i T_i``. :func:`agent_advantages` returns a
``(N,)`` float32 tensor aligned with a :class:`neurips26.common.agents.RolloutBatch`.
"""

from __future__ import annotations

import difflib
import heapq
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from neurips26.common.agents import RolloutBatch, Trajectory, to_hashable
from neurips26.common.checks import check_choice, check_float, check_int

METHODS = ("decay", "iterative", "ppr")
MODES = ("mean_norm", "mean_std_norm")
MEAN_OVER = ("steps", "trajectories")
ESTIMATORS = ("grpo", "gigpo", "rewardflow")


def _check_gamma(gamma: float) -> float:
    return check_float("gamma", gamma, 0.0, 1.0, low_open=True)


@dataclass
class RewardFlowConfig:
    """RewardFlow hyperparameters (defaults: the reference ALFWorld setting).

    Parameters
    ----------
    gamma : float
        Per-hop decay in (0, 1].
    method : {"decay", "iterative", "ppr"}
        Propagation: multi-source search (default), its iterative reference, or personalised PageRank.
    max_iter : int
        Iteration cap of ``"iterative"`` and ``"ppr"``.
    step_weight : float
        ``w`` on the step-level advantage (0 gives GRPO).
    mode : {"mean_norm", "mean_std_norm"}
        Centre only, or centre and divide by std + 1e-6, both levels.
    similarity : float or None
        Fuzzy merging threshold in (0, 1] for text observations; None = exact keys only.
    episode_mean_over : {"steps", "trajectories"}
        Episode-level group mean over step rows (reference parity) or over trajectories.
    ppr_alpha : float
        Probability of following a reversed edge in personalised PageRank (0, 1).
    """

    gamma: float = 0.9
    method: Literal["decay", "iterative", "ppr"] = "decay"
    max_iter: int = 1000
    step_weight: float = 1.0
    mode: Literal["mean_norm", "mean_std_norm"] = "mean_norm"
    similarity: float | None = None
    episode_mean_over: Literal["steps", "trajectories"] = "steps"
    ppr_alpha: float = 0.35

    def __post_init__(self) -> None:
        _check_gamma(self.gamma)
        check_choice("method", self.method, METHODS)
        check_int("max_iter", self.max_iter, low=1)
        check_float("step_weight", self.step_weight, 0.0)
        check_choice("mode", self.mode, MODES)
        if self.similarity is not None:
            check_float("similarity", self.similarity, 0.0, 1.0, low_open=True)
        check_choice("episode_mean_over", self.episode_mean_over, MEAN_OVER)
        check_float("ppr_alpha", self.ppr_alpha, 0.0, 1.0, low_open=True, high_open=True)


def _check_trajectories(trajs: Sequence[Trajectory], single_group: bool) -> list[Trajectory]:
    if isinstance(trajs, Trajectory) or not isinstance(trajs, Sequence) or len(trajs) == 0:
        raise ValueError("trajs must be a non-empty sequence of Trajectory")
    for i, t in enumerate(trajs):
        if not isinstance(t, Trajectory):
            raise TypeError(f"trajs[{i}] must be a Trajectory, got {type(t).__name__}")
        if len(t.observations) != len(t.actions) + 1 or len(t.rewards) != len(t.actions):
            raise ValueError(
                f"trajs[{i}]: lengths disagree (observations {len(t.observations)}, actions {len(t.actions)}, "
                f"rewards {len(t.rewards)}); need len(observations) == len(actions) + 1 == len(rewards) + 1"
            )
    if single_group:
        ids = list(dict.fromkeys(t.group_id for t in trajs))
        if len(ids) > 1:
            raise ValueError(
                f"trajectories of one graph must share one group_id, got {len(ids)} groups ({ids[:4]}...); "
                "use rewardflow_rewards to handle several groups"
            )
    return list(trajs)


class StateGraph:
    """Directed graph of the anchor states visited by one group of trajectories.

    Attributes
    ----------
    nodes : dict
        Canonical key -> node index.
    edges : set of (int, int)
        Observed transitions ``u -> v`` (deduplicated, no self-loops).
    node_reward : ndarray (V,)
        Reward observed on first entering each node (0 for states only seen as initial states).
    assignment : list of list of int
        ``assignment[i][t]`` = node of ``trajs[i].observations[t]``.
    """

    def __init__(self, nodes, edges, node_reward, assignment):
        self.nodes: dict[Hashable, int] = nodes
        self.edges: set[tuple[int, int]] = edges
        self.node_reward: np.ndarray = node_reward
        self.assignment: list[list[int]] = assignment
        self._succ: list[list[int]] = [[] for _ in range(len(nodes))]
        for u, v in sorted(edges):
            self._succ[u].append(v)

    def __len__(self) -> int:
        return len(self.nodes)

    def successors(self, v: int) -> list[int]:
        return list(self._succ[v])

    @classmethod
    def from_trajectories(
        cls,
        trajs: Sequence[Trajectory],
        key_fn: Callable[[Any], Hashable] = to_hashable,
        similarity: float | None = None,
    ) -> StateGraph:
        """Merge the states of one group (one ``group_id``) into a graph.

        ``similarity`` (0, 1]: greedy fuzzy clustering of *text* keys; a key joins the first
        cluster whose first member has ``SequenceMatcher.ratio() >= similarity``.
        """
        trajs = _check_trajectories(trajs, single_group=True)
        if not callable(key_fn):
            raise TypeError(f"key_fn must be a callable obs -> hashable key, got {type(key_fn).__name__}")
        if similarity is not None:
            check_float("similarity", similarity, 0.0, 1.0, low_open=True)
        keys = []
        for i, t in enumerate(trajs):
            row = []
            for j, obs in enumerate(t.observations):
                key = key_fn(obs)
                try:
                    hash(key)
                except TypeError as err:
                    raise TypeError(
                        f"trajs[{i}].observations[{j}]: key_fn returned an unhashable {type(key).__name__}"
                    ) from err
                row.append(key)
            keys.append(row)
        canon: dict[Hashable, Hashable] = {}
        if similarity is not None:
            heads: list[str] = []
            for row in keys:
                for key in row:
                    if key in canon:
                        continue
                    if not isinstance(key, str):
                        raise TypeError(f"fuzzy merging needs text observations, got {type(key).__name__}")
                    match = next(
                        (h for h in heads if difflib.SequenceMatcher(None, h, key).ratio() >= similarity),
                        None,
                    )
                    if match is None:
                        heads.append(key)
                        match = key
                    canon[key] = match
        nodes: dict[Hashable, int] = {}
        assignment = []
        for row in keys:
            assignment.append([nodes.setdefault(canon.get(k, k), len(nodes)) for k in row])
        reward = np.zeros(len(nodes))
        seen_entry = np.zeros(len(nodes), dtype=bool)
        edges: set[tuple[int, int]] = set()
        for t, row in zip(trajs, assignment):
            for step in range(len(t.actions)):
                u, v = row[step], row[step + 1]
                if u != v:
                    edges.add((u, v))
                if not seen_entry[v]:
                    seen_entry[v] = True
                    reward[v] = t.rewards[step]
        return cls(nodes, edges, reward, assignment)


def _propagate_decay(graph: StateGraph, gamma: float) -> np.ndarray:
    preds: list[list[int]] = [[] for _ in range(len(graph))]
    for u, v in graph.edges:
        preds[v].append(u)
    value = graph.node_reward.astype(float).copy()
    heap = [(-value[v], v) for v in range(len(graph)) if value[v] > 0]
    heapq.heapify(heap)
    done = np.zeros(len(graph), dtype=bool)
    while heap:
        neg, v = heapq.heappop(heap)
        if done[v] or -neg < value[v]:
            continue
        done[v] = True
        for u in preds[v]:
            cand = gamma * value[v]
            if cand > value[u]:
                value[u] = cand
                heapq.heappush(heap, (-cand, u))
    return value


def _propagate_iterative(graph: StateGraph, gamma: float, max_iter: int) -> np.ndarray:
    value = graph.node_reward.astype(float).copy()
    for _ in range(max_iter):
        new = value.copy()
        for u, v in graph.edges:
            new[u] = max(new[u], gamma * value[v])
        if np.array_equal(new, value):
            return value
        value = new
    return value


def _propagate_ppr(graph: StateGraph, alpha: float, max_iter: int, tol: float = 1e-12) -> np.ndarray:
    n = len(graph)
    reward = np.clip(graph.node_reward.astype(float), 0.0, None)
    if reward.sum() <= 0:
        return np.zeros(n)
    teleport = reward / reward.sum()
    preds: list[list[int]] = [[] for _ in range(n)]
    for u, v in graph.edges:
        preds[v].append(u)  # reversed graph: v -> u
    p = teleport.copy()
    for _ in range(max_iter):
        new = (1.0 - alpha) * teleport
        dangling = 0.0
        for v in range(n):
            if preds[v]:
                share = alpha * p[v] / len(preds[v])
                for u in preds[v]:
                    new[u] += share
            else:
                dangling += alpha * p[v]
        new += dangling * teleport
        if np.abs(new - p).sum() < tol:
            p = new
            break
        p = new
    return p / p.max() * reward.max()


def propagate_values(
    graph: StateGraph,
    gamma: float = 0.9,
    method: str = "decay",
    max_iter: int = 1000,
    ppr_alpha: float = 0.35,
) -> np.ndarray:
    """State values ``(V,)`` from the node rewards of ``graph`` (module docstring, step 2).

    ``"decay"``/``"iterative"`` need non-negative node rewards (max-propagation); shift rewards
    first otherwise. ``"ppr"`` values are scaled so that the largest equals the largest reward.
    """
    _check_gamma(gamma)
    check_choice("method", method, METHODS)
    check_int("max_iter", max_iter, low=1)
    if not isinstance(graph, StateGraph):
        raise TypeError(f"graph must be a StateGraph, got {type(graph).__name__}")
    if method in ("decay", "iterative") and (graph.node_reward < 0).any():
        raise ValueError(
            f"method={method!r} propagates maxima and needs non-negative rewards (min "
            f"{graph.node_reward.min():g}); shift the rewards so that failure is 0, or use method='ppr'"
        )
    if method == "decay":
        return _propagate_decay(graph, gamma)
    if method == "iterative":
        return _propagate_iterative(graph, gamma, max_iter)
    check_float("ppr_alpha", ppr_alpha, 0.0, 1.0, low_open=True, high_open=True)
    return _propagate_ppr(graph, ppr_alpha, max_iter)


def _groups(trajs: Sequence[Trajectory]) -> dict[Hashable, list[int]]:
    out: dict[Hashable, list[int]] = {}
    for i, t in enumerate(trajs):
        out.setdefault(t.group_id, []).append(i)
    return out


def rewardflow_rewards(
    trajs: Sequence[Trajectory],
    config: RewardFlowConfig | None = None,
    key_fn: Callable[[Any], Hashable] = to_hashable,
    return_values: bool = False,
) -> list[np.ndarray] | tuple[list[np.ndarray], list[np.ndarray]]:
    """RewardFlow difference step rewards ``r~_{i,t} = V(s_{i,t+1}) - V(s_{i,t})``, one graph per group.

    Returns a list of ``(T_i,)`` arrays in ``trajs`` order (and, with ``return_values``, the
    ``(T_i + 1,)`` state values along each trajectory).
    """
    config = config or RewardFlowConfig()
    if not isinstance(config, RewardFlowConfig):
        raise TypeError(f"config must be a RewardFlowConfig, got {type(config).__name__}")
    trajs = _check_trajectories(trajs, single_group=False)
    rewards: list[np.ndarray] = [np.zeros(0)] * len(trajs)
    values: list[np.ndarray] = [np.zeros(0)] * len(trajs)
    for members in _groups(trajs).values():
        group = [trajs[i] for i in members]
        graph = StateGraph.from_trajectories(group, key_fn=key_fn, similarity=config.similarity)
        v = propagate_values(graph, config.gamma, config.method, config.max_iter, config.ppr_alpha)
        for i, row in zip(members, graph.assignment):
            vals = v[np.asarray(row)]
            values[i] = vals
            rewards[i] = vals[1:] - vals[:-1]
    return (rewards, values) if return_values else rewards


#: Alias with the spec's name.
rewardflow_step_rewards = rewardflow_rewards


def gigpo_step_rewards(trajs: Sequence[Trajectory], gamma: float = 0.95) -> list[np.ndarray]:
    """GiGPO step rewards: the trajectory's own discounted return ``sum_{k>=t} gamma^(k-t) rho_k``."""
    _check_gamma(gamma)
    trajs = _check_trajectories(trajs, single_group=False)
    out = []
    for t in trajs:
        ret, acc = np.zeros(len(t.rewards)), 0.0
        for k in range(len(t.rewards) - 1, -1, -1):
            acc = t.rewards[k] + gamma * acc
            ret[k] = acc
        out.append(ret)
    return out


def _normalise(values: np.ndarray, members: list[np.ndarray], mode: str, eps: float = 1e-6) -> np.ndarray:
    """Centre (and standardise) ``values`` within each index set of ``members``."""
    out = np.zeros_like(values, dtype=float)
    for idx in members:
        x = values[idx]
        if len(idx) < 2:
            continue  # singleton groups give 0
        centred = x - x.mean()
        if mode == "mean_std_norm":
            centred = centred / (x.std(ddof=1) + eps)
        out[idx] = centred
    return out


def two_level_advantages(
    episode_returns: np.ndarray,
    step_rewards: np.ndarray,
    anchor_keys: Sequence[Hashable],
    group_ids: Sequence[Hashable],
    traj_ids: Sequence[Hashable],
    step_weight: float = 1.0,
    mode: str = "mean_norm",
    episode_mean_over: str = "steps",
) -> np.ndarray:
    """One advantage per step row, ``A = A^E + w A^S`` (module docstring, step 4).

    Parameters
    ----------
    episode_returns : (N,)
        The return of each row's trajectory (repeated over its rows).
    step_rewards : (N,)
        The row's step reward (RewardFlow difference reward, GiGPO discounted return).
    anchor_keys, group_ids, traj_ids : sequences of length N
    step_weight : float
    mode : {"mean_norm", "mean_std_norm"}
    episode_mean_over : {"steps", "trajectories"}

    Returns
    -------
    ndarray (N,) float64
    """
    check_float("step_weight", step_weight, 0.0)
    check_choice("mode", mode, MODES)
    check_choice("episode_mean_over", episode_mean_over, MEAN_OVER)
    ret = np.asarray(episode_returns, dtype=float)
    step = np.asarray(step_rewards, dtype=float)
    n = ret.shape[0]
    if ret.ndim != 1 or step.shape != (n,) or not (len(anchor_keys) == len(group_ids) == len(traj_ids) == n):
        raise ValueError(
            f"per-row inputs must all have length N: episode_returns {ret.shape}, step_rewards {step.shape}, "
            f"anchor_keys {len(anchor_keys)}, group_ids {len(group_ids)}, traj_ids {len(traj_ids)}"
        )
    if not (np.isfinite(ret).all() and np.isfinite(step).all()):
        raise ValueError("episode_returns and step_rewards must be finite")
    by_group: dict[Hashable, list[int]] = {}
    by_state: dict[tuple, list[int]] = {}
    for row, (g, key) in enumerate(zip(group_ids, anchor_keys)):
        by_group.setdefault(g, []).append(row)
        by_state.setdefault((g, key), []).append(row)
    for (g, tid), ret_rows in _rows_by(group_ids, traj_ids).items():
        if np.ptp(ret[ret_rows]) > 0:
            raise ValueError(f"episode_returns differ within trajectory {tid!r} of group {g!r}")
    episode = np.zeros(n)
    for rows in by_group.values():
        rows = np.asarray(rows)
        if episode_mean_over == "steps":
            pool = ret[rows]
        else:
            firsts = {}
            for r in rows:
                firsts.setdefault(traj_ids[r], r)
            pool = ret[np.asarray(list(firsts.values()))]
        centred = ret[rows] - pool.mean()
        if mode == "mean_std_norm":
            std = pool.std(ddof=1) if len(pool) > 1 else 0.0
            centred = centred / (std + 1e-6)
        episode[rows] = centred
    if step_weight == 0.0:
        return episode
    step_adv = _normalise(step, [np.asarray(r) for r in by_state.values()], mode)
    return episode + step_weight * step_adv


def _rows_by(group_ids, traj_ids) -> dict[tuple, list[int]]:
    out: dict[tuple, list[int]] = {}
    for row, (g, t) in enumerate(zip(group_ids, traj_ids)):
        out.setdefault((g, t), []).append(row)
    return out


def _flatten(trajs: Sequence[Trajectory], per_traj: list[np.ndarray]):
    returns, steps, keys, groups, tids = [], [], [], [], []
    for i, (t, r) in enumerate(zip(trajs, per_traj)):
        returns += [t.episode_return] * len(t.actions)
        steps += list(r)
        keys += [to_hashable(o) for o in t.observations[:-1]]
        groups += [t.group_id] * len(t.actions)
        tids += [i] * len(t.actions)
    return np.array(returns), np.array(steps), keys, groups, tids


def trajectory_advantages(
    trajs: Sequence[Trajectory],
    estimator: str = "rewardflow",
    config: RewardFlowConfig | None = None,
    gigpo_gamma: float = 0.95,
) -> np.ndarray:
    """Per-step advantages ``(N,)`` (trajectory-major) for ``"grpo"``, ``"gigpo"`` or ``"rewardflow"``.

    All three share :func:`two_level_advantages` with ``config``'s ``mode``/``episode_mean_over``;
    GRPO uses ``step_weight = 0``.
    """
    check_choice("estimator", estimator, ESTIMATORS)
    config = config or RewardFlowConfig()
    trajs = _check_trajectories(trajs, single_group=False)
    if estimator == "rewardflow":
        per_traj = rewardflow_rewards(trajs, config)
    elif estimator == "gigpo":
        per_traj = gigpo_step_rewards(trajs, gigpo_gamma)
    else:
        per_traj = [np.zeros(len(t.actions)) for t in trajs]
    ret, step, keys, groups, tids = _flatten(trajs, per_traj)
    weight = 0.0 if estimator == "grpo" else config.step_weight
    return two_level_advantages(ret, step, keys, groups, tids, weight, config.mode, config.episode_mean_over)


def agent_advantages(
    batch: RolloutBatch,
    estimator: str = "rewardflow",
    config: RewardFlowConfig | None = None,
    gigpo_gamma: float = 0.95,
) -> torch.Tensor:
    """:func:`trajectory_advantages` for a :class:`~neurips26.common.agents.RolloutBatch`: ``(N,)`` float32."""
    if not isinstance(batch, RolloutBatch):
        raise TypeError(f"batch must be a RolloutBatch, got {type(batch).__name__}")
    adv = trajectory_advantages(batch.trajectories, estimator, config, gigpo_gamma)
    if adv.shape[0] != len(batch):
        raise ValueError(f"{adv.shape[0]} advantages for {len(batch)} step rows")
    return torch.as_tensor(adv, dtype=torch.float32)


def make_estimator(
    estimator: str = "rewardflow", config: RewardFlowConfig | None = None, gigpo_gamma: float = 0.95
) -> Callable[[RolloutBatch], torch.Tensor]:
    """An ``estimator(batch) -> (N,)`` callable for :func:`neurips26.common.agents.train_agent`."""
    check_choice("estimator", estimator, ESTIMATORS)
    config = config or RewardFlowConfig()
    return lambda batch: agent_advantages(batch, estimator, config, gigpo_gamma)


def unique_state_ratio(trajs: Sequence[Trajectory], key_fn: Callable[[Any], Hashable] = to_hashable) -> float:
    """Mean over groups of (unique anchor states) / (state visits): the paper's premise is that it is small."""
    trajs = _check_trajectories(trajs, single_group=False)
    ratios = []
    for members in _groups(trajs).values():
        keys = [key_fn(o) for i in members for o in trajs[i].observations]
        ratios.append(len(set(keys)) / len(keys))
    return float(np.mean(ratios))


def value_sparsity(step_advantages: np.ndarray | torch.Tensor, tol: float = 1e-8) -> float:
    """Fraction of step rows whose advantage is non-zero (|A| > tol)."""
    a = np.asarray(step_advantages, dtype=float)
    return float((np.abs(a) > tol).mean()) if a.size else math.nan


__all__ = [
    "METHODS",
    "MODES",
    "ESTIMATORS",
    "RewardFlowConfig",
    "StateGraph",
    "Trajectory",
    "agent_advantages",
    "gigpo_step_rewards",
    "make_estimator",
    "propagate_values",
    "rewardflow_rewards",
    "rewardflow_step_rewards",
    "to_hashable",
    "trajectory_advantages",
    "two_level_advantages",
    "unique_state_ratio",
    "value_sparsity",
]

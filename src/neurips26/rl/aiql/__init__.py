"""AIQL and A²IQL: offline RL for ranking variable-size candidate sets, with an adaptive cross-domain extension.

Paper
-----
"AIQL / A²IQL" (NeurIPS 2026 submission; registry seed ``004_01f475bc147a144d.txt``, paragraph
beginning "We apply offline reinforcement learning to"). No public version was found; the IQL
losses and defaults follow Kostrikov, Nair and Levine, "Offline Reinforcement Learning with
Implicit Q-Learning" (arXiv 2110.06169). Choices the abstract leaves open are marked *inferred* in
the docstrings.

Method
------
At every decision epoch a policy ranks a variable set of candidate moves. AIQL splits IQL
asymmetrically: the actor scores each candidate with one shared network (Plackett-Luce over the
set, masked padding), while the critics see only the state and a fixed-size aggregate of the
chosen set, :math:`Q(g, z(s, a))`, so value estimation stays small and inside the logs' support:

.. math::

    L_V = E[|\\tau - 1(u<0)|u^2],\\ u = \\min_k \\bar Q_k(g, z) - V(g);\\quad
    L_Q = \\textstyle\\sum_k E[(r + \\gamma V(g') - Q_k(g, z))^2];\\quad
    L_\\pi = -E[\\min(e^{\\beta A}, w_{max}) \\log \\pi(a|s)].

A²IQL adapts to a new objective with a little target data: a Bayesian reward model gives
:math:`b = \\mu_T - \\kappa\\sigma_T`, and only the actor is re-extracted with
:math:`A' = A_{src} + \\eta(b - \\bar b(g))`; the source critic is never changed.

Modules
-------
- :mod:`.env`: :class:`WarehouseConsolidationEnv` (registered as ``neurips26/WarehouseConsolidation-v0``),
  :func:`heuristic_policy`, :func:`behaviour_policy`.
- :mod:`.nets`: :class:`CandidateScoringActor`, :func:`aggregate_features`, :func:`flat_action_features`,
  :class:`StateActionCritic`, :class:`StateValue`.
- :mod:`.algo`: :func:`expectile_loss`, :class:`AIQL` (``critic="flat"`` in :func:`make_aiql` is the
  standard-IQL baseline), :class:`BehaviourCloning`, :class:`BayesianRewardPredictor`, :class:`A2IQL`.
- :mod:`.data`: :func:`collect_minari` (Minari ``DataCollector``), :class:`OfflineRankingDataset`.
- :mod:`.evaluate`: :func:`evaluate`, :func:`actor_policy`, :func:`oracle_planner`.

Shapes
------
Batches: ``global (E, G)``, ``candidates (E, N, F)`` with ``mask (E, N)``, ``action (E, K)``
(``-1`` = unused slot); actor scores ``(E, N)``; aggregates ``(E, 2F + 3)``.
"""

from neurips26.rl.aiql.algo import (
    A2IQL,
    AIQL,
    BayesianRewardPredictor,
    BehaviourCloning,
    RandomFourierFeatures,
    expectile_loss,
    make_aiql,
    parameter_hash,
)
from neurips26.rl.aiql.data import INFO_KEYS, OfflineRankingDataset, check_same_env, collect_minari, make_env
from neurips26.rl.aiql.env import (
    ENV_ID,
    F_DIM,
    G_DIM,
    WarehouseConsolidationEnv,
    behaviour_policy,
    heuristic_policy,
    heuristic_scores,
)
from neurips26.rl.aiql.evaluate import actor_policy, evaluate, evaluate_planner, oracle_planner
from neurips26.rl.aiql.nets import (
    CandidateScoringActor,
    StateActionCritic,
    StateValue,
    aggregate_features,
    flat_action_features,
    select_padded,
)

__all__ = [
    "A2IQL",
    "AIQL",
    "BayesianRewardPredictor",
    "BehaviourCloning",
    "CandidateScoringActor",
    "ENV_ID",
    "F_DIM",
    "G_DIM",
    "INFO_KEYS",
    "OfflineRankingDataset",
    "RandomFourierFeatures",
    "StateActionCritic",
    "StateValue",
    "WarehouseConsolidationEnv",
    "actor_policy",
    "aggregate_features",
    "behaviour_policy",
    "check_same_env",
    "collect_minari",
    "evaluate",
    "evaluate_planner",
    "expectile_loss",
    "flat_action_features",
    "heuristic_policy",
    "heuristic_scores",
    "make_aiql",
    "make_env",
    "oracle_planner",
    "parameter_hash",
    "select_padded",
]

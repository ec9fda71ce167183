"""Multi-turn text-agent substrate: environments, a causal-LM rollout loop and a step-level PPO trainer.

Shared by the multi-turn agent-RL methods (:mod:`neurips26.rl.rewardflow`, :mod:`neurips26.rl.aem`)
and later agent work. Pieces:

* :class:`TextEnv`, a Gymnasium-style protocol for text games: ``reset(seed=, options=) -> (obs, info)``
  and ``step(action) -> (obs, reward, terminated, truncated, info)``; ``info`` always carries
  ``admissible_commands`` (list of str), ``anchor_obs`` (hashable canonical state: the raw environment
  text, not the prompt with history), ``score`` and ``won``.
* :class:`KeyDoorGrid`, a 5x5 text grid world (fetch the key, then reach the door; reward 10 on
  opening it), a ``gymnasium.Env`` registered as ``neurips26/KeyDoorGrid-v0``, with seeded layout
  sets (:func:`keydoor_layouts`) checked solvable by BFS within the horizon.
* :class:`TextWorldEnv`, an adapter over ``textworld.start`` with ``EnvInfos`` (feedback-text or compact
  fact-based observations), :func:`generate_textworld_games` (seeded, cached under ``$NEURIPS26_CACHE``;
  Inform 7's side effects go to a scratch HOME inside the cache, never the user's HOME), a pooled
  env factory, a word vocabulary and walkthrough-plus-noise behaviour-cloning data.
* :func:`collect_rollouts`: groups of ``N`` multi-turn rollouts per task with a causal-LM policy.
  The prompt of step ``t`` is the observation plus the previous action; the response is an action
  phrase, either generated freely (``action_mode="generate"``; text outside the admissible commands
  is an *invalid action*: no environment step, state unchanged) or chosen among the admissible
  commands by their sequence log-probability (``action_mode="rank"``, ALFWorld-style candidate
  ranking). Per-step ids, log-probs, entropies and masks are kept.
* Environment workers (:mod:`neurips26.common.agents.workers`): in-process or sharded over Ray actors
  (``executor="ray"``), with identical trajectories for identical seeds.
* :func:`ppo_update` / :func:`train_agent`: the step-level PPO-clip loop. Every agent step is one
  training row with its own prompt; a per-step advantage ``A_{i,t}`` (from any estimator callable)
  is broadcast to the tokens of the response. The loss is :func:`neurips26.rl.losses.policy_loss`
  (clipped surrogate, token-mean, k3 KL to a frozen reference) unless a ``loss_fn`` is given.

.. math::

    \\mathcal{L} = \\frac{1}{\\sum M}\\sum_{n,k} M_{n,k}\\Big[\\max\\big(-\\tilde A_n\\rho_{n,k},
    -\\tilde A_n\\,\\mathrm{clip}(\\rho_{n,k}, 1-\\epsilon, 1+\\epsilon)\\big)
    + \\beta\\,\\mathrm{KL}_{k3}\\Big], \\qquad \\tilde A_n = A_n - c\\,[\\text{step } n \\text{ invalid}]

Shapes
------
A rollout batch has ``N`` step rows (all steps of all trajectories, trajectory-major), prompts
left-padded to ``P`` tokens and responses right-padded to ``T`` tokens: ``prompt_ids (N, P)``,
``response_ids/response_mask/logprobs/entropy (N, T)``, ``rewards/invalid (N,)``.
"""

from __future__ import annotations

from neurips26.common.agents.envs import (
    ACTIONS,
    ENV_ID,
    PHRASES,
    SUCCESS_REWARD,
    GridLayout,
    KeyDoorGrid,
    TextEnv,
    Trajectory,
    keydoor_expert_action,
    keydoor_layouts,
    keydoor_splits,
    keydoor_vocabulary,
    register_envs,
    to_hashable,
)
from neurips26.common.agents.rollout import (
    RolloutBatch,
    collect_rollouts,
    evaluate_agent,
    format_prompt,
    keydoor_bc_examples,
    keydoor_env_factory,
    word_tokenizer,
)
from neurips26.common.agents.textworld import (
    TEXTWORLD_DIFFICULTY,
    TextWorldEnv,
    anonymize_text,
    entity_placeholders,
    generate_textworld_games,
    normalize_text,
    placeholder_words,
    textworld_bc_examples,
    textworld_env_factory,
    textworld_game_sets,
    textworld_vocabulary,
)
from neurips26.common.agents.training import (
    AgentPPOConfig,
    Estimator,
    LossFn,
    Transform,
    ppo_update,
    train_agent,
)
from neurips26.common.agents.workers import EnvBatch, RayEnvBatch, env_steps_per_second, make_env_batch

__all__ = [
    "EnvBatch",
    "RayEnvBatch",
    "env_steps_per_second",
    "make_env_batch",
    "SUCCESS_REWARD",
    "Estimator",
    "LossFn",
    "Transform",
    "ACTIONS",
    "PHRASES",
    "ENV_ID",
    "TEXTWORLD_DIFFICULTY",
    "AgentPPOConfig",
    "GridLayout",
    "KeyDoorGrid",
    "RolloutBatch",
    "TextEnv",
    "TextWorldEnv",
    "anonymize_text",
    "entity_placeholders",
    "placeholder_words",
    "Trajectory",
    "collect_rollouts",
    "evaluate_agent",
    "format_prompt",
    "generate_textworld_games",
    "keydoor_bc_examples",
    "keydoor_env_factory",
    "keydoor_expert_action",
    "keydoor_layouts",
    "keydoor_splits",
    "keydoor_vocabulary",
    "ppo_update",
    "register_envs",
    "normalize_text",
    "textworld_bc_examples",
    "textworld_env_factory",
    "textworld_game_sets",
    "textworld_vocabulary",
    "to_hashable",
    "train_agent",
    "word_tokenizer",
]

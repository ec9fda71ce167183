"""Claim check for RewardFlow (state-graph reward propagation) on text games with a tiny Llama.

Two environment families share one protocol (:func:`~neurips26.testbeds.agent_games.setup_env`,
:func:`~neurips26.testbeds.agent_games.run_arm` in the testbed :mod:`neurips26.testbeds.agent_games`, which
the AEM claim uses too): KeyDoorGrid (smoke and quick profiles) and generated TextWorld games (full profile).

KeyDoorGrid protocol (per seed): (a) 64 training and 64 held-out layouts (5x5, key then door, horizon
12, shortest solution 3-``max_solution`` actions) are generated from the seed. (b) A 2-layer Llama
(hidden 128, word vocabulary) is behaviour-cloned on random admissible moves mixed with shortest-path
moves (``expert_prob`` per step: walkthrough plus noise) on the 64 training layouts; the checkpoint is
cached, shared by every arm and reported as the reference arm ``bc``. (c) Each arm runs step-level
PPO-clip from that checkpoint with the identical environment-step budget on the same task schedule
(``n_rl_layouts`` training layouts, 4 per iteration, N = 8 rollouts each, 2 epochs x 2 mini-batches,
Adam lr 3e-4, k3 KL 0.01 to the BC start, invalid-action penalty 0.1), actions generated freely.
Arms differ only in the advantage estimator: GRPO (episode level, mean-norm), GiGPO (anchor-state
step groups, discounted returns, gamma 0.95) and RewardFlow (graph propagation, gamma 0.9, step
weight 1).

TextWorld protocol (full profile, :data:`~neurips26.testbeds.agent_games.TEXTWORLD`): 16 training and 8 held-out games generated
offline with TextWorld's bundled Inform 7 from the same generator settings (3 rooms, quest length 2,
4 objects; one cached set shared by all seeds, held-out games never trained on); the observation is
a compact normalised text (goal words, current room, inventory, previous command) with every entity
name replaced by a type-lettered placeholder (``take o1 from s1``; the same in the admissible
commands) and the anchor state the game's sorted logical facts; the action space is ranking of the
admissible commands (ALFWorld-style); the BC start is cloned from walkthrough-plus-noise episodes
(``expert_prob`` 0.35) on the 16 training games and RL runs on all 16 of them, 10 turns per
episode, with the same PPO settings and equal environment-step budgets.

Testbed revision (issue 13, declared before the rerun): the first full run (commit 01ad714, named
entities, ``expert_prob`` 0.5, RL on 8 games) was inconclusive: the BC start solved 58/85/88% of the
RL games (mean 0.77, premise ``bc_not_ceiling`` failed), every arm reached 98-100% there, and
held-out success stayed at 0-12.5% for every arm (BC 0/64 on all seeds): a word-level LM trained
from scratch has no embedding for the entity names of unseen games, so it memorised its training
games. Changes, chosen on pilot seeds 100-101 (never used by a profile) with GRPO only: entity
placeholders (a stand-in for a pretrained LM's lexical knowledge), RL on all 16 training games,
``expert_prob`` 0.35. Pilot numbers (BC -> GRPO after 1,600 env steps; train = the 16 RL games x 4
episodes, held-out = 8 games x 8 episodes): placeholders with ``expert_prob`` 0.5 gave train
0.69 -> 0.92 and held-out 0.25 -> 0.52 (seed 100), 0.77 -> 0.94 and 0.42 -> 0.67 (seed 101):
held-out success moves but the BC start sits at the 0.8 ceiling bar; ``expert_prob`` 0.35 gave
train 0.41 -> 0.83 and held-out 0.16 -> 0.58 (seed 100), 0.44 -> 0.88 and 0.23 -> 0.48 (seed
101). A 32-game training pool (``expert_prob`` 0.5, seed 100: train 0.36 -> 0.72, held-out
0.31 -> 0.55) was not kept: generating its 48 games took ~150 s under load, a quarter of the 600 s
cold budget, against ~36 s recorded for the cached 24-game set.

Premises: the BC start is neither at 0 nor at ceiling on the RL tasks; GRPO raises their success by
a declared margin over the start; GRPO raises held-out success by the same margin over the start
(``grpo_generalises``, added with the testbed revision: the issue's premise that held-out success
can move); the rollout groups revisit states (unique-state ratio <= 0.5). On KeyDoorGrid GRPO does
not move held-out success (see the differences; the quick run after the revision: 0.27 -> 0.27,
seed 0), so the quick profile is inconclusive (testbed) by ``grpo_generalises``; it remains the fast
mechanics check.
Evaluation: success at temperature 1 on the RL tasks (``train_success``) and on the held-out tasks
(``heldout_success``, ``heldout_score``), learning-curve area (rollout success weighted by env
steps), and the credit-assignment diagnostics (fraction of steps with a non-zero step-level
advantage).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Headline, SeedResult
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.models import count_parameters
from neurips26.testbeds.agent_games import (
    EVAL_ITEMS,
    EVAL_METRICS,
    HELDOUT_ITEMS,
    KEYDOOR,
    QUICK_EVAL,
    SMOKE,
    TEXTWORLD,
    TW_BUDGET,
    env_throughput,
    evaluate_policy,
    run_arm,
    run_jobs,
    setup_env,
)

METHOD = "rewardflow"
BASELINES = ("grpo", "gigpo")
REFERENCE = "bc"


# ----------------------------------------------------------------------------------------------
# RewardFlow claim
# ----------------------------------------------------------------------------------------------


def run(config: dict[str, Any], seed: int) -> SeedResult:
    """One seed of the RewardFlow claim check (see the module docstring)."""
    return _run(config, seed)


def _run(config: dict[str, Any], seed: int) -> SeedResult:
    start = time.perf_counter()
    setup = setup_env(config, seed)
    bc_eval = evaluate_policy(setup["bc"], setup, config, seed)
    arms = config["arms"]
    jobs = [lambda arm=arm: run_arm(arm, setup, config, seed, estimator=arm) for arm in arms]
    results = dict(zip(arms, run_jobs(jobs, config.get("workers", 1), config["threads"])))
    metrics: dict[str, dict[str, float]] = {k: {REFERENCE: bc_eval[k]} for k in EVAL_METRICS}
    metrics.update({"curve_area": {}, "step_adv_nonzero": {}, "unique_state_ratio": {}})
    curves: dict[str, dict[str, list[float]]] = {}
    info: dict[str, Any] = {
        "bc": {**bc_eval, "cached": setup["bc_history"]["cached"], "loss": setup["bc_history"]["final_loss"]},
        "params": count_parameters(setup["bc"]),
        "budget": {
            arm: {
                "env_step_budget": config["env_step_budget"],
                "env_steps_used": results[arm]["train"]["env_steps"],
                "iterations": results[arm]["train"]["iterations"],
                "group_size": config["group_size"],
                "tasks_per_iteration": 4,
                "environment": config.get("env", "keydoor"),
                "lr_grid": [config["rl_lr"]],
            }
            for arm in arms
        },
        "arms": {},
    }
    for arm, res in results.items():
        for k in EVAL_METRICS:
            metrics[k][arm] = res["eval"][k]
        metrics["curve_area"][arm] = res["curve_area"]
        metrics["step_adv_nonzero"][arm] = float(np.mean(res["curves"]["step_adv_nonzero"]))
        metrics["unique_state_ratio"][arm] = float(np.mean(res["curves"]["unique_ratio"]))
        for name in ("success", "entropy", "step_adv_nonzero", "unique_ratio"):
            curves.setdefault(name, {})[arm] = res["curves"][name]
        tr = res["train"]
        info["arms"][arm] = {
            **res["eval"],
            "rollout_s": tr["rollout_s"],
            "update_s": tr["update_s"],
            "advantage_s": tr["advantage_s"],
            "rollout_tokens_per_s": tr["tokens_per_s"],
            "env_steps_per_s_in_process": tr["env_steps_per_s"],
            "graph_s_per_group": float(np.mean(res["curves"]["graph_s"])),
            "policy_forward_s_per_iteration": tr["policy_s"] / max(tr["iterations"], 1),
        }
    info["env_steps_per_s"] = env_throughput(setup, config, seed)
    info["wall_s"] = time.perf_counter() - start
    return SeedResult(metrics=metrics, curves=curves, info=info)


def plot(result: dict[str, Any], folder: Path) -> list[Path]:
    """Rollout success and step-advantage density against iterations, per arm (mean over seeds)."""
    plt = pyplot()
    paths = []
    for name in ("success", "step_adv_nonzero", "entropy"):
        arms = result.get("curves", {}).get(name, {})
        if not arms:
            continue
        fig, ax = plt.subplots(figsize=(5, 3.2))
        for arm, runs in arms.items():
            width = min(len(r) for r in runs)
            mean = np.mean([r[:width] for r in runs], axis=0)
            ax.plot(mean, label=arm)
        ax.set_xlabel("RL iteration")
        ax.set_ylabel(name)
        ax.legend(fontsize=7)
        paths.append(save_figure(fig, folder, f"{CLAIM.slug}_{name}", dpi=110))
    return paths


COMMON = dict(KEYDOOR, arms=(METHOD, *BASELINES))
#: Declared before any run: the BC start must lie in this success band on the RL layouts, and GRPO
#: must raise that success by at least GRPO_GAIN over it (and, since the testbed revision, held-out
#: success by the same margin).
BC_BAND = (0.05, 0.8)
GRPO_GAIN = 0.05
UNIQUE_RATIO_MAX = 0.5
QUICK_BUDGET = 2_000
CLAIM = Claim(
    slug="rewardflow",
    claim=(
        "Propagating terminal success backwards over a state graph merged from a group of rollouts gives dense "
        "state-level rewards that improve multi-turn agent RL over GRPO and GiGPO."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=(REFERENCE,),
    premises=(
        AtLeast("train_success", arm=REFERENCE, threshold=BC_BAND[0], label="bc_not_zero"),
        AtMost("train_success", arm=REFERENCE, threshold=BC_BAND[1], label="bc_not_ceiling"),
        Better(
            "train_success",
            arm="grpo",
            baseline=REFERENCE,
            margin=GRPO_GAIN,
            min_seeds=1,
            label="grpo_learns",
        ),
        Better(
            "heldout_success",
            arm="grpo",
            baseline=REFERENCE,
            margin=GRPO_GAIN,
            min_seeds=1,
            label="grpo_generalises",
        ),
        AtMost("unique_state_ratio", threshold=UNIQUE_RATIO_MAX, label="states_repeat"),
    ),
    criteria=(
        Better("curve_area", baseline="grpo", label="area_vs_grpo"),
        Better("curve_area", baseline="gigpo", label="area_vs_gigpo"),
        Better("train_success", baseline="grpo", label="final_vs_grpo"),
        Better("train_success", baseline="gigpo", label="final_vs_gigpo"),
        Better("heldout_success", baseline="grpo", label="heldout_vs_grpo"),
        Better("heldout_success", baseline="gigpo", label="heldout_vs_gigpo"),
        AtLeast("step_adv_nonzero", threshold=0.05, kind="design", label="dense_step_credit"),
    ),
    headlines=(
        Headline(
            "+6.2% average success over the strongest baseline on text benchmarks (ALFWorld, WebShop), three "
            "model scales (here: generated TextWorld games in the full profile, a text grid world in quick; one "
            "tiny scale)",
            criteria=("final_vs_grpo", "final_vs_gigpo", "heldout_vs_grpo", "heldout_vs_gigpo"),
        ),
        Headline(
            "Better training efficiency than GRPO/GiGPO (sample efficiency: success vs environment steps)",
            criteria=("area_vs_grpo", "area_vs_gigpo"),
        ),
        Headline(
            "Within a rollout group the number of unique states is much smaller than the number of state visits",
            criteria=("states_repeat",),
        ),
        Headline(
            "+29.7% on visual reasoning (Sokoban)",
            untested="needs a vision-language policy on rendered Sokoban frames; no VLM fits the 2-core CPU budget",
        ),
        Headline(
            "More than +10% accuracy on a DeepResearch task",
            untested="needs web search tools and a multi-billion-parameter LLM agent; offline CPU only here",
        ),
    ),
    items={"train_success": EVAL_ITEMS, "heldout_success": HELDOUT_ITEMS},
    run=run,
    configs={
        "smoke": {**COMMON, **SMOKE},
        "quick": {**COMMON, **QUICK_EVAL, "env_step_budget": QUICK_BUDGET},
        "full": {**COMMON, **TEXTWORLD, "env_step_budget": TW_BUDGET, "measure_ray": True},
    },
    seeds={"smoke": (0,), "quick": (0,), "full": (0, 1, 2)},
    implemented=(
        "neurips26.rl.rewardflow: StateGraph (exact keys and greedy difflib fuzzy merging, self-loops dropped, "
        "first-entry node rewards), propagate_values (multi-source best-first search = BFS for equal success "
        "rewards, the iterative fixed point as reference, personalised PageRank), difference step rewards, "
        "two-level (episode + anchor-state) advantages shared with GiGPO, GRPO as step_weight = 0. "
        "neurips26.common.agents: KeyDoorGrid (gymnasium-registered), TextWorld adapter and cached game "
        "generation, multi-turn LM rollouts with per-step log-probs/entropies/masks and invalid-action records, "
        "step-level PPO-clip reusing neurips26.rl.losses.policy_loss."
    ),
    differences=(
        "Paper: Qwen2.5 1.5B-7B agents on ALFWorld, WebShop, Sokoban and DeepResearch, verl-agent with Ray env "
        "workers and vLLM, group size 8, 16 tasks per batch, lr 1e-6, 25 env steps. Here: a ~0.5M-parameter "
        "2-layer Llama (hidden 128) on KeyDoorGrid, a 5x5 text grid world (observation = position, key and door "
        "coordinates, what is on the cell, blocked directions, plus the previous action), horizon 12, shortest "
        "solutions 3-6 actions (5x5 layouts with solutions up to 12 left a random-move BC start at 0-4% success "
        "and GRPO did not move it in pilots). BC start: random admissible moves mixed with shortest-path moves "
        "(p = 0.7 per step; the spec's pure random-move warm-up gave 0-9% success, below the 10-20% it "
        "predicted). RL: 8 training layouts (4 per iteration x 8 rollouts), the same task schedule and "
        f"environment-step budget for every arm ({QUICK_BUDGET} steps in quick), lr 3e-4 (no per-arm "
        "tuning). A pilot of GRPO over all 64 training layouts at lr 1e-3 did not raise held-out success in "
        "61 iterations (35% -> 35%), so the RL layouts are a small fixed subset and the premise is judged on "
        "them; held-out success is reported as a secondary criterion. That is the smoke/quick protocol. The full "
        "profile runs generated TextWorld games instead (issue 13): 16 training and 8 held-out games (3 rooms, "
        "quest length 2, 4 objects; TextWorld seeds 1,000,000+i and 1,010,000+i), one cached set shared by the 3 "
        "seeds (generating a set per seed would cost ~2 s per game of the cold budget); compact observations "
        "(goal words, room, inventory from the game's facts, previous command) because the tiny word-level LM "
        "cannot read TextWorld's full prose within 128 positions, with entity names replaced by type-lettered "
        "placeholders (o1, s1, r2, ...) in observations and commands because a word-level LM trained from "
        "scratch has no embedding for the names of unseen games (a pretrained LLM has); actions by ranking the "
        "admissible commands (ALFWorld-style) because the tiny LM cannot spell commands freely; BC on "
        "walkthrough-plus-noise episodes (expert_prob 0.35, 4 per game, 60 steps) on the 16 training games, RL "
        f"on all 16, {TW_BUDGET} env steps per arm, 10 turns per episode, no per-arm tuning (lr 3e-4 as on "
        "KeyDoorGrid). The first full run (named entities, expert_prob 0.5, RL on 8 of the games) had the BC "
        "start at 0.77 mean success on the RL games (ceiling premise failed) and 0/64 on held-out games for every "
        "seed; the placeholders, RL on all 16 games and expert_prob 0.35 were chosen on pilot seeds 100-101 "
        "(GRPO only; numbers in the module docstring) before the rerun. Ray env workers are implemented "
        "(neurips26.common.agents.workers, executor='ray', tested equal to in-process) but the claim's training "
        "runs in-process; env steps/s in-process and with 2 Ray actors are measured in the full profile (random "
        "admissible commands, 2 episodes per RL game, 6 steps)."
    ),
    data=(
        "Smoke/quick: generated by code (neurips26.common.agents.keydoor_splits): 64 training and 64 held-out 5x5 "
        "layouts per seed (2-6 wall cells; start, key and door distinct; solvable by BFS in 3-6 actions). Full: "
        "TextWorld games generated offline by neurips26.common.agents.generate_textworld_games (TextWorld's "
        "make_game + bundled Inform 7), cached under $NEURIPS26_CACHE/textworld-games."
    ),
    plot=plot,
    glossary={
        "train_success": "fraction of episodes (16 per RL layout / 8 per RL game, temperature 1) that succeed "
        "(open the door in 12 steps / win the TextWorld game in 10 turns) on the 8 layouts or 16 games used for "
        "RL; for 'bc' the behaviour-cloned start",
        "heldout_success": "the same on held-out tasks never trained on (64 layouts x 2 episodes; full: 8 "
        "TextWorld games x 8 episodes)",
        "heldout_greedy": "held-out success with greedy (arg-max) actions, one episode per layout (game)",
        "heldout_score": "held-out normalised score: final score / max score per episode, averaged (KeyDoorGrid: "
        "equals heldout_success)",
        "curve_area": "rollout success during training averaged over environment steps "
        "(sum_i success_i * steps_i / sum_i steps_i)",
        "step_adv_nonzero": "mean over iterations of the fraction of step rows whose advantage differs from the "
        "GRPO episode-level advantage (the step-level term is non-zero)",
        "unique_state_ratio": "mean over iterations and task groups of unique anchor states / state visits",
    },
)

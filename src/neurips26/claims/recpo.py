"""Claim check for RecPo: recomposing known skills from one demonstration on held-out kitchen tasks.

Testbed: :class:`~neurips26.robotics.recpo.ExtendedKitchen`, a symbolic Franka Kitchen whose element layout,
goal values and completion threshold come from gymnasium-robotics' FrankaKitchen-v1, extended with
reversible operations, three kettle places and two physical preconditions. 24 fixed 4-step training
compositions from the canonical state (5 noisy demonstrations each; two skills, ``close(hinge cabinet)`` and
``turn_off(top burner)``, never appear) build RecPo's knowledge base and the retrieval baselines' stores.
Held-out tasks (4-7 steps, unseen orders, reversed operations) are each given as one demonstration recorded
from a different initial state than the robot's. Arms: RecPo (threshold views), RecPo with learned views,
whole-composition retrieval, full-state per-step skill retrieval (the spec's ``(pre, post)`` pair and a
stronger change-only variant), the demonstrated skills replayed, and the oracle planner (upper bound).
This validates the reconfiguration mechanism in a symbolic kitchen, not robot-level performance.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Headline, SeedResult
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.robotics.recpo import (
    ExtendedKitchen,
    FullStateSkillRetrieval,
    LearnedView,
    OraclePlanner,
    ProcedureKnowledgeBase,
    RecPoAgent,
    WholeCompositionRetrieval,
    default_views,
    heldout_tasks,
    oracle_plan,
    record_demonstration,
    replay,
    training_compositions,
    view_training_data,
)
from neurips26.robotics.recpo.bench import HELD_OUT_SKILLS, call_for, replay_fails
from neurips26.robotics.recpo.kitchen import CANONICAL_STATE, label, skill_target, state_labels

METHOD = "recpo"
BASELINES = ("whole_composition", "per_step", "per_step_delta")
REFERENCES = ("oracle", "recpo_learned", "demo_replay")
ARMS = (METHOD, *BASELINES, *REFERENCES)


def _agents(config: dict, sigma: float, seed: int, comps) -> dict[str, Any]:
    """Build every arm's store from the same noisy training demonstrations."""
    views = default_views()
    demos = []
    for i, comp in enumerate(comps):
        for j in range(config["demos_per_composition"]):
            demos.append(record_demonstration(CANONICAL_STATE, comp, sigma, seed=_seed(seed, sigma, 1, i, j)))
    kb = ProcedureKnowledgeBase(views)
    whole = WholeCompositionRetrieval(views, config["min_persistence"])
    pair = FullStateSkillRetrieval(views, config["min_persistence"], feature="pair")
    delta = FullStateSkillRetrieval(views, config["min_persistence"], feature="delta")
    for obs, ep in demos:
        kb.add_demonstration(ep)
        whole.add(obs, ep)
        pair.add(ep)
        delta.add(ep)
    noisy, clean = view_training_data(config["view_observations"], sigma, _seed(seed, sigma, 2))
    learned = [
        LearnedView(v).fit(noisy, [dict(zip(enc, vals)) for vals in zip(*enc.values())])
        for v in default_views()
        for enc in [v.encode_batch(clean)]
    ]
    kb_learned = ProcedureKnowledgeBase(learned)
    for _, ep in demos:
        kb_learned.add_demonstration(ep)
    return {
        "recpo": RecPoAgent(kb, views, config["min_persistence"], config["max_depth"]),
        "recpo_learned": RecPoAgent(kb_learned, learned, config["min_persistence"], config["max_depth"]),
        "whole_composition": whole,
        "per_step": pair,
        "per_step_delta": delta,
        "oracle": OraclePlanner(config["max_depth"]),
        "_kb_size": len(kb),
        "_kb_learned_size": len(kb_learned),
    }


def _seed(*parts) -> int:
    """A 31-bit seed derived from ``parts`` (floats enter as milli-units)."""
    ints = [int(round(p * 1000)) if isinstance(p, float) else int(p) for p in parts]
    return int(np.random.SeedSequence(ints).generate_state(1)[0] >> 1)


def _episode(
    arm: str, agents, task_target, demo_state, robot_state, demo, sigma, env_seed
) -> dict[str, float]:
    env = ExtendedKitchen(noise=sigma)
    env.reset(seed=env_seed, options={"state": robot_state})
    if arm == "oracle":
        result = agents["oracle"].run(env, task_target)
    elif arm == "demo_replay":
        t0 = time.perf_counter()
        calls, s = [], dict(demo_state)
        for t in task_target:
            calls.append(call_for(s, t))
            s[skill_target(calls[-1])[0]] = skill_target(calls[-1])[1]
        elapsed = time.perf_counter() - t0
        result = replay(env, calls)
        result.planning_time_s = elapsed
    else:
        result = agents[arm].run(env, demo)
    c = result.completion(task_target)
    return {
        "completion": c,
        "success": float(c == 1.0),
        "skills": float(len(result.calls)),
        "planning_time_s": result.planning_time_s,
        "replans": float(result.replans),
        "unresolvable": float(bool(result.error)),
    }


def _evaluate(config, seed, sigma, comps, tasks, arms, train_eval: bool) -> dict[str, Any]:
    agents = _agents(config, sigma, seed, comps)
    out: dict[str, Any] = {
        "kb_relations": agents["_kb_size"],
        "kb_learned_relations": agents["_kb_learned_size"],
    }
    rows = {a: [] for a in arms}
    for k, task in enumerate(tasks):
        demo, _ = record_demonstration(task.demo_state, task.target, sigma, seed=_seed(seed, sigma, 3, k))
        for arm in arms:
            rows[arm].append(
                _episode(
                    arm,
                    agents,
                    task.target,
                    task.demo_state,
                    task.robot_state,
                    demo,
                    sigma,
                    _seed(seed, sigma, 4, k),
                )
            )
    out["heldout"] = rows
    if train_eval:
        train = {a: [] for a in arms}
        for i, comp in enumerate(comps[: config["train_eval"]]):
            demo, _ = record_demonstration(CANONICAL_STATE, comp, sigma, seed=_seed(seed, sigma, 5, i))
            for arm in arms:
                train[arm].append(
                    _episode(
                        arm,
                        agents,
                        comp,
                        CANONICAL_STATE,
                        CANONICAL_STATE,
                        demo,
                        sigma,
                        _seed(seed, sigma, 6, i),
                    )
                )
        out["train"] = train
    return out


def _mean(rows, key) -> float:
    return float(np.mean([r[key] for r in rows]))


def run(config: dict[str, Any], seed: int) -> SeedResult:
    t_start = time.perf_counter()
    comps = training_compositions(config["train_compositions"], 4, seed=0)
    tasks = heldout_tasks(config["tasks"], seed=seed, exclude=comps, max_depth=config["max_depth"])
    noises = list(config["noises"])
    main, noisy = noises[0], noises[-1]
    sweep = {}
    for sigma in noises:
        arms = (
            ARMS
            if sigma == main
            else ("recpo", "recpo_learned", "whole_composition", "per_step_delta", "oracle")
        )
        sweep[sigma] = _evaluate(config, seed, sigma, comps, tasks, arms, train_eval=sigma == main)
    res = sweep[main]
    held, train = res["heldout"], res["train"]
    enabling, already, held_skill = [], [], []
    for task in tasks:
        plan = oracle_plan(task.robot_state, task.target, config["max_depth"]) or []
        enabling.append(float(any(label(*skill_target(c)) not in task.target for c in plan)))
        already.append(float(any(t in state_labels(task.robot_state) for t in task.target)))
        held_skill.append(float(any(call_for(task.demo_state, t) in HELD_OUT_SKILLS for t in task.target)))
    regime = [replay_fails(t) for t in tasks]
    by_subset = {
        name: {
            a: float(np.mean([r["completion"] for r, m in zip(held[a], regime) if m == flag] or [np.nan]))
            for a in ARMS
        }
        for name, flag in (("replay_fails", True), ("replay_would_work", False))
    }
    metrics = {
        "heldout_completion": {a: _mean(held[a], "completion") for a in ARMS},
        "heldout_success": {a: _mean(held[a], "success") for a in ARMS},
        "heldout_skills": {a: _mean(held[a], "skills") for a in ARMS},
        "train_completion": {a: _mean(train[a], "completion") for a in ARMS},
        "heldout_completion_noisy": {
            a: _mean(rows, "completion") for a, rows in sweep[noisy]["heldout"].items()
        },
        "enabling_fraction": {"oracle": float(np.mean(enabling))},
    }
    curves = {
        "noise_sweep": {
            a: [_mean(sweep[s]["heldout"][a], "completion") for s in noises] for a in sweep[noisy]["heldout"]
        }
    }
    timing = {
        a: {
            "mean_ms": 1e3 * _mean(held[a], "planning_time_s"),
            "max_ms": 1e3 * max(r["planning_time_s"] for r in held[a]),
        }
        for a in ARMS
    }
    info = {
        "noises": noises,
        "per_task_completion": {a: [r["completion"] for r in held[a]] for a in ARMS},
        "planning_time_per_task": timing,
        "heldout_completion_by_subset": by_subset,
        "replans": {a: _mean(held[a], "replans") for a in ("recpo", "recpo_learned")},
        "unresolvable_fraction": {a: _mean(held[a], "unresolvable") for a in ("recpo", "recpo_learned")},
        "testbed": {
            "tasks": len(tasks),
            "task_lengths": [len(t.target) for t in tasks],
            "enabling_fraction": float(np.mean(enabling)),
            "replay_fails_fraction": float(np.mean(regime)),
            "some_goal_already_satisfied_fraction": float(np.mean(already)),
            "uses_skill_never_in_training_fraction": float(np.mean(held_skill)),
            "kb_relations": res["kb_relations"],
            "kb_learned_relations": res["kb_learned_relations"],
            "training_compositions": [list(c) for c in comps],
        },
        "noise_sweep": {
            str(s): {a: _mean(rows, "completion") for a, rows in sweep[s]["heldout"].items()} for s in noises
        },
        "budget": {
            "training_demonstrations": config["train_compositions"] * config["demos_per_composition"],
            "same_training_demonstrations_for_every_arm": True,
            "view_training_observations": config["view_observations"],
            "max_depth": config["max_depth"],
            "min_persistence": config["min_persistence"],
        },
        "scope": "validates the reconfiguration mechanism in a symbolic kitchen (FrankaKitchen-v1 layout, goals and "
        "threshold), not robot-level performance",
        "wall_s": time.perf_counter() - t_start,
    }
    return SeedResult(metrics=metrics, curves=curves, info=info)


def plot(result: dict, folder: Path) -> list[Path]:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    arms = [a for a in ARMS if a in result["metrics"]["heldout_completion"]]
    x = np.arange(len(arms))
    for offset, metric, name in (
        (-0.2, "train_completion", "training compositions"),
        (0.2, "heldout_completion", "held-out tasks"),
    ):
        vals = result["metrics"][metric]
        axes[0].bar(
            x + offset,
            [np.mean(vals[a]) for a in arms],
            0.4,
            yerr=[np.std(vals[a]) for a in arms],
            label=name,
        )
    axes[0].set_xticks(x, arms, rotation=25, fontsize=8)
    axes[0].set_ylabel("ordered subtask completion")
    axes[0].legend(fontsize=8)
    info = result.get("info") or [{}]
    noises = info[0].get("noises", [])
    for arm, per_seed in (result.get("curves", {}).get("noise_sweep") or {}).items():
        values = np.asarray(per_seed, dtype=float)
        if values.ndim == 2 and values.shape[1] == len(noises):
            name = "recpo (threshold views)" if arm == "recpo" else arm
            axes[1].errorbar(noises, values.mean(0), yerr=values.std(0), marker="o", label=name)
    axes[1].set_xlabel("observation noise sigma")
    axes[1].set_ylabel("held-out completion")
    axes[1].legend(fontsize=7)
    return [save_figure(fig, folder, "recpo_results", dpi=100)]


_COMMON = dict(threads=1, train_compositions=24, max_depth=3, min_persistence=3, train_eval=24)
CONFIGS = {
    "smoke": {
        **_COMMON,
        "demos_per_composition": 1,
        "tasks": 4,
        "view_observations": 400,
        "noises": (0.02, 0.1),
        "train_eval": 3,
    },
    "quick": {
        **_COMMON,
        "demos_per_composition": 2,
        "tasks": 15,
        "view_observations": 1000,
        "noises": (0.02, 0.1),
        "train_eval": 8,
    },
    "full": {
        **_COMMON,
        "demos_per_composition": 5,
        "tasks": 60,
        "view_observations": 2000,
        "noises": (0.02, 0.05, 0.1),
    },
}

CLAIM = Claim(
    slug="recpo",
    claim=(
        "Recomposing stored local transition relations from one demonstration reaches high ordered subtask "
        "completion on held-out long-horizon kitchen tasks, far above skill-retrieval baselines that cannot "
        "recombine, while those baselines do solve the training compositions."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        AtLeast(
            "train_completion",
            arm="whole_composition",
            threshold=0.9,
            label="whole_composition_solves_training",
        ),
        AtLeast("train_completion", arm="per_step", threshold=0.9, label="per_step_solves_training"),
        AtMost("heldout_completion", arm="demo_replay", threshold=0.9, label="replaying_the_demo_fails"),
        AtLeast("enabling_fraction", arm="oracle", threshold=0.2, label="preconditions_must_be_established"),
        AtLeast(
            "heldout_completion", arm="oracle", threshold=0.99, kind="design", label="tasks_are_solvable"
        ),
    ),
    criteria=(
        Better(
            "heldout_completion",
            baseline="whole_composition",
            margin=0.2,
            label="recpo_beats_whole_composition",
        ),
        Better("heldout_completion", baseline="per_step", margin=0.1, label="recpo_beats_per_step"),
        Better(
            "heldout_completion", baseline="per_step_delta", margin=0.1, label="recpo_beats_per_step_delta"
        ),
        AtLeast("heldout_completion", threshold=0.85, label="recpo_level"),
        AtLeast(
            "heldout_completion_noisy", arm="recpo_learned", threshold=0.75, label="graceful_degradation"
        ),
    ),
    headlines=(
        Headline(
            "91.7% ordered subtask completion on held-out long-horizon tasks of an extended Franka Kitchen "
            "benchmark",
            criteria=("recpo_level",),
        ),
        Headline(
            "substantially outperforming non-reconfigurable skill retrieval baselines",
            criteria=("recpo_beats_whole_composition", "recpo_beats_per_step", "recpo_beats_per_step_delta"),
        ),
        Headline(
            "real-robot case studies show adaptation by recomposition without task-specific retraining",
            untested="no robot here: the check runs a symbolic kitchen; the learned-view noise sweep "
            "(graceful_degradation) is the closest proxy for perception errors",
        ),
    ),
    run=run,
    configs=CONFIGS,
    seeds={"smoke": (0,), "quick": (0, 1), "full": (0, 1, 2, 3, 4)},
    items={
        "heldout_completion": {"smoke": 4, "quick": 15, "full": 60},
        "heldout_completion_noisy": {"smoke": 4, "quick": 15, "full": 60},
        "train_completion": {"smoke": 3, "quick": 8, "full": 24},
    },
    implemented=(
        "ExtendedKitchen (Gymnasium, neurips26/ExtendedKitchen-v0; FrankaKitchen-v1's OBS_ELEMENT_INDICES, "
        "OBS_ELEMENT_GOALS and BONUS_THRESH imported from gymnasium-robotics); three procedure views (object "
        "state, spatial relation incl. path blocking, interaction interface) with thresholds or per-entity "
        "logistic regression; a knowledge base of local transition relations with role variables and "
        "view-local preconditions; a debounced demonstration interpreter (>= 3 frames); a resolver with "
        "iterative-deepening precondition sub-goals (depth <= 3) that never undoes achieved goals; closed-loop "
        "execution with re-resolution; whole-composition retrieval (edit distance), full-state k-NN skill "
        "retrieval on (pre, post) and on post - pre, the demonstrated skills replayed, and a BFS oracle."
    ),
    differences=(
        "The paper's extended Franka Kitchen, robot and skills are not public. Here the kitchen is symbolic (skills "
        "move joint values along scripted curves; no contact physics), the extension (reverse operations, three "
        "kettle places, two blocking preconditions) is inferred, observations are the 30-D joint vector with "
        "Gaussian noise, and the retrieval baselines get the same key-frame segmentation as RecPo. Results "
        "validate the reconfiguration mechanism, not robot-level performance. Outside this check, a slow test runs "
        "RecPo's plan [turn_on(light switch), open(microwave)] in MuJoCo FrankaKitchen-v1 with scripted joint-space "
        "primitives (IK waypoints through the env's velocity actions): FrankaKitchen records both tasks complete "
        "and both hold at the end (switch -0.63 rad, door -0.65 rad); in the reverse order the arm's move to the "
        "switch pushes the door back to -0.22 rad, so only its completion event remains. Quick: 2 demos per composition, "
        "15 held-out tasks, noise grid (0.02, 0.1), 2 seeds; full: 5 demos, 60 tasks, (0.02, 0.05, 0.1), 5 seeds."
    ),
    data="Generated: FrankaKitchen-v1 constants from the installed gymnasium-robotics wheel; no download.",
    glossary={
        "heldout_completion": "ordered subtask completion on held-out tasks at sigma = 0.02: the fraction of the "
        "task's target subtasks achieved in order, counting until the first missing or out-of-order one; mean "
        "over tasks",
        "heldout_success": "fraction of held-out tasks with ordered completion 1",
        "heldout_skills": "mean number of skills executed per held-out task",
        "train_completion": "ordered subtask completion on the training compositions, demonstrated and executed "
        "from the canonical state (fresh noisy demonstrations)",
        "heldout_completion_noisy": "held-out ordered completion at the largest noise of the sweep (sigma = 0.1)",
        "enabling_fraction": "fraction of held-out tasks whose oracle plan needs a skill that is not a target "
        "(a precondition must be established)",
    },
    plot=plot,
)

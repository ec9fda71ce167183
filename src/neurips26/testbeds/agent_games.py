"""Multi-turn text-game testbeds for agent RL: KeyDoorGrid and generated TextWorld games, a behaviour-cloned
tiny-Llama start, step-level PPO arms that differ only in the advantage estimator, and their evaluation.

Shared by the RewardFlow and AEM claim checks (:mod:`neurips26.claims.rewardflow`, :mod:`neurips26.claims.aem`);
moved here unchanged from the RewardFlow claim (issue 36 item 1), so neither claim imports the other.

KeyDoorGrid protocol (per seed, :data:`KEYDOOR`): training and held-out layouts (5x5, key then door, horizon
12) are generated from the seed; a 2-layer Llama (hidden 128, word vocabulary) is behaviour-cloned on random
admissible moves mixed with shortest-path moves (``expert_prob`` per step) on the training layouts; the
checkpoint is cached and shared by every arm. :func:`run_arm` runs step-level PPO-clip from that checkpoint
with the identical environment-step budget on the same task schedule (4 tasks per iteration, N rollouts
each), the arms differing only in the advantage estimator (plus an optional transform).

TextWorld protocol (:data:`TEXTWORLD`): training and held-out games generated offline with TextWorld's
bundled Inform 7 (one cached set shared by all seeds), a compact normalised observation with entity names
replaced by type-lettered placeholders, actions ranked among the admissible commands.

The contract: :func:`setup_env` ``(config, seed) -> setup`` (environments, tokenizer, cached BC start),
:func:`run_arm` ``(arm, setup, config, seed, estimator, ...) -> {"eval", "curve_area", "curves", "train"}``,
:func:`evaluate_policy` ``(policy, setup, config, seed) -> metrics``, :func:`run_jobs` to run arms in forked
worker processes, :func:`env_throughput` for environment steps per second.
"""

from __future__ import annotations

import copy
import logging
import time
from typing import Any

import numpy as np
import torch

from neurips26.common.agents import (
    AgentPPOConfig,
    RolloutBatch,
    env_steps_per_second,
    evaluate_agent,
    generate_textworld_games,
    keydoor_bc_examples,
    keydoor_env_factory,
    keydoor_splits,
    keydoor_vocabulary,
    textworld_bc_examples,
    textworld_env_factory,
    textworld_vocabulary,
    train_agent,
    word_tokenizer,
)
from neurips26.common.models import build_tiny_lm
from neurips26.common.rollouts import score_completions
from neurips26.common.training import train_or_load
from neurips26.rl.rewardflow import (
    RewardFlowConfig,
    StateGraph,
    agent_advantages,
    propagate_values,
    unique_state_ratio,
)

#: evaluation metrics shared by the claims on this testbed (train/held-out success, held-out score, greedy)
EVAL_METRICS = ("train_success", "heldout_success", "heldout_score", "heldout_greedy")
LOG = logging.getLogger(__name__)
MODEL = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    max_position_embeddings=64,
)

#: TextWorld prompts (compact goal, room, inventory, previous command) reach ~60 tokens.
MODEL_TW = dict(MODEL, max_position_embeddings=128)

#: The smoke profile only checks mechanics: a much smaller model.
SMOKE_MODEL = dict(MODEL, hidden_size=32, intermediate_size=64)


def setup_env(config: dict[str, Any], seed: int) -> dict[str, Any]:
    """The environment family of ``config["env"]`` (``"keydoor"`` or ``"textworld"``) for one seed."""
    if config.get("env", "keydoor") == "textworld":
        return textworld_setup(config, seed)
    return keydoor_setup(config, seed)


def keydoor_setup(config: dict[str, Any], seed: int) -> dict[str, Any]:
    """Layouts, tokenizer and the cached behaviour-cloned start for one seed."""
    train, test = keydoor_splits(
        config["n_train"], config["n_test"], seed, min_solution=3, horizon=config["max_solution"]
    )
    tok = word_tokenizer(keydoor_vocabulary())
    key = {
        "env": "keydoor-v1",
        "n_train": config["n_train"],
        "max_solution": config["max_solution"],
        "phrasing": config["phrasing"],
        "expert_prob": config["expert_prob"],
        "episodes": config["bc_episodes"],
        "model": config.get("model", MODEL),
        "seed": seed,
    }
    bc, hist = train_or_load(
        "keydoor-bc",
        key,
        lambda: build_tiny_lm("llama", vocab_size=len(tok), seed=seed, **config.get("model", MODEL)),
        lambda: keydoor_bc_examples(
            train,
            tok,
            episodes_per_layout=config["bc_episodes"],
            seed=seed,
            phrasing=config["phrasing"],
            expert_prob=config["expert_prob"],
        ),  # fmt: skip
        steps=config["bc_steps"],
        batch_size=64,
        lr=config["bc_lr"],
        warmup=config["bc_steps"] // 10,
        clip=1.0,
        seed=seed,
        pad_id=tok.pad_token_id,
    )
    phrasing = config["phrasing"]
    return {
        "train": train, "test": test, "tokenizer": tok, "bc": bc, "bc_history": hist,
        "train_env": keydoor_env_factory(train, phrasing=phrasing),
        "test_env": keydoor_env_factory(test, phrasing=phrasing),
        "throughput_env": keydoor_env_factory(train, phrasing=phrasing),
        "n_rl": config["n_rl_layouts"], "n_test": len(test), "max_steps": 12, "action_mode": "generate",
    }  # fmt: skip


def textworld_setup(config: dict[str, Any], seed: int) -> dict[str, Any]:
    """Generated TextWorld games (one cached set shared by all seeds), word tokenizer and the cached
    behaviour-cloned start (walkthrough plus noise on the training games) for one seed."""
    tw = config["textworld"]
    anon = bool(tw.get("anonymize", False))
    train = generate_textworld_games(tw["n_train"], tw["games_seed"], tw["difficulty"])
    test = generate_textworld_games(tw["n_test"], tw["games_seed"] + 1, tw["difficulty"])
    tok = word_tokenizer(textworld_vocabulary(train + test, placeholders=anon), normalize=True)
    model = config.get("model", MODEL_TW)
    key = {
        "env": "textworld-v1", **tw, "expert_prob": config["expert_prob"], "episodes": config["bc_episodes"],
        "model": model, "seed": seed,
    }  # fmt: skip
    bc, hist = train_or_load(
        "textworld-bc",
        key,
        lambda: build_tiny_lm("llama", vocab_size=len(tok), seed=seed, **model),
        lambda: textworld_bc_examples(
            train,
            tok,
            episodes_per_game=config["bc_episodes"],
            seed=seed,
            max_steps=tw["max_steps"],
            expert_prob=config["expert_prob"],
            anonymize=anon,
        ),  # fmt: skip
        steps=config["bc_steps"],
        batch_size=64,
        lr=config["bc_lr"],
        warmup=max(1, config["bc_steps"] // 10),
        clip=1.0,
        seed=seed,
        pad_id=tok.pad_token_id,
    )
    steps = tw["max_steps"]
    return {
        "train": train, "test": test, "tokenizer": tok, "bc": bc, "bc_history": hist,
        "train_env": textworld_env_factory(train, max_steps=steps, anonymize=anon),
        "test_env": textworld_env_factory(test, max_steps=steps, anonymize=anon),
        "throughput_env": textworld_env_factory(train, max_steps=steps, pool=False, anonymize=anon),
        "n_rl": config["n_rl_layouts"], "n_test": len(test), "max_steps": steps, "action_mode": "rank",
    }  # fmt: skip


def evaluate_policy(policy, setup, config, seed) -> dict[str, float]:
    """Success at temperature 1 on the RL tasks and the held-out tasks, held-out score and greedy success."""
    tok = setup["tokenizer"]
    rl_tasks, test_tasks = list(range(setup["n_rl"])), list(range(setup["n_test"]))
    kw = {"max_steps": setup["max_steps"], "action_mode": setup["action_mode"]}
    tr = evaluate_agent(
        policy, tok, setup["train_env"], rl_tasks, episodes_per_task=config["eval_episodes"], greedy=False,
        seed=seed + 17, **kw,
    )  # fmt: skip
    te = evaluate_agent(
        policy, tok, setup["test_env"], test_tasks, episodes_per_task=config["heldout_episodes"],
        greedy=False, seed=seed + 29, **kw,
    )  # fmt: skip
    greedy = evaluate_agent(policy, tok, setup["test_env"], test_tasks, greedy=True, seed=seed, **kw)
    return {
        "train_success": tr["success"],
        "heldout_success": te["success"],
        "heldout_score": te["score"],
        "heldout_greedy": greedy["success"],
        "steps_to_success": te["steps_to_success"],
        "invalid_rate": te["invalid_rate"],
    }


def run_arm(
    arm: str,
    setup: dict[str, Any],
    config: dict[str, Any],
    seed: int,
    estimator: str,
    transform=None,
    diagnostics=None,
) -> dict[str, Any]:
    """Step-level PPO from the BC start with one advantage estimator (+ optional transform); evaluate."""
    policy = copy.deepcopy(setup["bc"])
    for p in policy.parameters():
        p.requires_grad_(True)
    ref = setup["bc"]
    ref.eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    tok = setup["tokenizer"]
    rng = np.random.default_rng(seed + 1)  # same task schedule for every arm
    schedule = [rng.choice(setup["n_rl"], 4, replace=False).tolist() for _ in range(10_000)]
    rf_cfg = RewardFlowConfig()
    per_iter: dict[str, list[float]] = {
        "step_adv_nonzero": [],
        "unique_ratio": [],
        "graph_s": [],
        "entropy_delta": [],
    }

    def estimate(batch: RolloutBatch) -> torch.Tensor:
        adv = agent_advantages(batch, estimator, rf_cfg)
        grpo = agent_advantages(batch, "grpo", rf_cfg)
        per_iter["step_adv_nonzero"].append(float(((adv - grpo).abs() > 1e-8).float().mean()))
        t0 = time.perf_counter()
        groups: dict[Any, list] = {}
        for t in batch.trajectories:
            groups.setdefault(t.group_id, []).append(t)
        for trajs in groups.values():
            propagate_values(StateGraph.from_trajectories(trajs), rf_cfg.gamma)
        per_iter["graph_s"].append((time.perf_counter() - t0) / max(len(groups), 1))
        per_iter["unique_ratio"].append(unique_state_ratio(batch.trajectories))
        return adv

    def callback(it: int, batch: RolloutBatch, stats: dict) -> None:
        with torch.no_grad():
            ent = score_completions(
                policy, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask
            )["entropy"]
        m = batch.response_mask.float()
        per_iter["entropy_delta"].append(float(((ent - batch.entropy) * m).sum() / m.sum()))
        if diagnostics is not None:
            diagnostics(it, batch, stats)

    out = train_agent(
        policy, tok, setup["train_env"], lambda it: schedule[it], estimate, env_step_budget=config["env_step_budget"],
        group_size=config["group_size"], max_steps=setup["max_steps"], lr=config["rl_lr"], ppo=AgentPPOConfig(),
        transform=transform, ref_model=ref, seed=seed, callback=callback, action_mode=setup["action_mode"],
        executor=config.get("env_executor", "inprocess"),
    )  # fmt: skip
    policy.eval()
    ev = evaluate_policy(policy, setup, config, seed)
    curves = out.pop("curves")
    steps = np.diff([0.0, *curves["env_steps"]])
    area = float(np.sum(np.asarray(curves["success"]) * steps) / max(steps.sum(), 1.0))
    LOG.info("%s seed %d: %s area %.3f (%d iterations)", arm, seed, ev, area, out["iterations"])
    return {"eval": ev, "curve_area": area, "curves": {**curves, **per_iter}, "train": out}


def run_jobs(jobs, workers: int, threads: int):
    """Run ``jobs`` in order, in ``workers`` forked processes of ``threads`` intra-op threads each when > 1."""
    if workers > 1 and len(jobs) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        _JOBS.extend(jobs)
        _JOB_CONFIG["threads"] = threads
        try:
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
                return list(pool.map(_job, range(len(jobs))))
        finally:
            _JOBS.clear()
            _JOB_CONFIG.clear()
    return [job() for job in jobs]


_JOBS: list = []
_JOB_CONFIG: dict = {}


def _job(index: int):
    torch.set_num_threads(_JOB_CONFIG["threads"])  # a forked worker: its own thread setting
    return _JOBS[index]()


def env_throughput(setup, config, seed) -> dict[str, Any]:
    """Environment steps per second with random admissible actions: in-process and (full profile) 2 Ray actors."""
    make_env = setup["throughput_env"]
    tasks = list(range(setup["n_rl"]))
    kw = dict(config.get("throughput", {}), seed=seed)
    out: dict[str, Any] = {"inprocess": env_steps_per_second(make_env, tasks, **kw)["env_steps_per_s"]}
    if config.get("measure_ray"):
        try:
            import ray

            started_here = not ray.is_initialized()
            out["ray_2_actors"] = env_steps_per_second(make_env, tasks, executor="ray", num_workers=2, **kw)[
                "env_steps_per_s"
            ]
            if started_here:  # later seeds fork worker processes: do not leave Ray's threads running
                ray.shutdown()
        except Exception as err:  # a diagnostic: Ray missing or unable to start must not fail the claim
            out["ray_2_actors"] = f"not measured: {type(err).__name__}: {err}"
    else:
        out["ray_2_actors"] = "measured in the full profile only (Ray start-up does not fit the quick budget)"
    return out


KEYDOOR = dict(
    n_train=64,
    n_test=64,
    max_solution=6,
    phrasing="word",
    expert_prob=0.7,
    bc_episodes=4,
    bc_steps=600,
    bc_lr=3e-3,
    n_rl_layouts=8,
    group_size=8,
    rl_lr=3e-4,
    eval_episodes=16,
    heldout_episodes=2,
    workers=2,
    threads=1,
    env_executor="inprocess",  # "ray": environment workers on 2 Ray actors (same trajectories)
)
EVAL_ITEMS = {"smoke": 16, "quick": 64, "full": 128}
#: held-out evaluation episodes per profile (full: 8 TextWorld games x 8 episodes)
HELDOUT_ITEMS = {**EVAL_ITEMS, "full": 64}
#: Quick profile: fewer evaluation episodes (8 per RL layout, 1 per held-out layout).
QUICK_EVAL = {"eval_episodes": 8, "heldout_episodes": 1}
#: The full profile's environment: generated TextWorld games (issue 13). One game set (16 training games,
#: all of them RL games, and 8 held-out games from the same generator settings; 3 rooms, quest length 2)
#: is generated once and shared by every seed; seeds vary the BC data noise, initialisation and all
#: sampling. Entity names are replaced by placeholders; actions: ranking of the admissible commands (the
#: tiny LM cannot spell TextWorld commands freely). Testbed revision: see the module docstring.
TEXTWORLD = {
    "env": "textworld",
    "textworld": {
        "n_train": 16,
        "n_test": 8,
        "games_seed": 100,
        "difficulty": 1,
        "max_steps": 10,
        "anonymize": True,
    },  # fmt: skip
    "model": MODEL_TW,
    "expert_prob": 0.35,
    "bc_episodes": 4,
    "bc_steps": 60,
    "n_rl_layouts": 16,
    "eval_episodes": 8,
    "heldout_episodes": 8,
    "throughput": {"episodes_per_task": 2, "steps": 6},
}
TW_BUDGET = 1_600
#: the smoke profile's reductions, shared by the claims on this harness (rewardflow, aem)
SMOKE = {
    "n_train": 8,
    "n_test": 4,
    "bc_steps": 20,
    "bc_episodes": 2,
    "n_rl_layouts": 4,
    "env_step_budget": 40,
    "group_size": 2,
    "model": SMOKE_MODEL,
    "eval_episodes": 4,
    "heldout_episodes": 1,
    "workers": 1,
}


__all__ = [
    "EVAL_ITEMS",
    "EVAL_METRICS",
    "HELDOUT_ITEMS",
    "KEYDOOR",
    "MODEL",
    "MODEL_TW",
    "QUICK_EVAL",
    "SMOKE",
    "SMOKE_MODEL",
    "TEXTWORLD",
    "TW_BUDGET",
    "env_throughput",
    "evaluate_policy",
    "keydoor_setup",
    "run_arm",
    "run_jobs",
    "setup_env",
    "textworld_setup",
]

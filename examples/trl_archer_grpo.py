"""An RL loss inside TRL: Archer's token-level loss in a ``trl.GRPOTrainer`` subclass.

Paper: *Stabilizing Knowledge, Promoting Reasoning: Dual-Token Constraints for RLVR* (Archer, arXiv
2507.15778; registry slug ``archer``). Archer splits each response's tokens at a per-response entropy
quantile: high-entropy "reasoning" tokens get a wide clip range and no KL, low-entropy "knowledge"
tokens the usual tight clip and a KL penalty to the reference policy.

What it shows, in the two ways a practitioner meets the loss:

1. **Inside TRL's loop.** ``ArcherGRPOTrainer`` is used exactly like ``trl.GRPOTrainer`` (a model, a
   dataset of prompts, a reward function, a ``GRPOConfig``) plus ``archer_config=``. Generation, group
   advantages, the reference model and logging stay TRL's; only ``_compute_loss`` changes. The model
   is a tiny Llama built from a config with a character tokenizer built in-process (no download); the
   reward is a rule (the fraction of digit characters in the completion). A few steps run on CPU.
   Archer's KL on knowledge tokens needs a reference model, which TRL loads from the policy's
   checkpoint path, so the initial weights are saved to a temporary folder first.
2. **As a pure function** over per-token log-probs, old log-probs, advantages, the completion mask
   and token entropies (the TRL convention), for a custom loop: ``archer_policy_loss`` returns
   ``(loss, metrics)``; the GRPO preset of the same function is the baseline.

Run: ``python examples/trl_archer_grpo.py``.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import datasets
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from trl import GRPOConfig

from neurips26.common.tokenizers import char_tokenizer
from neurips26.rl import ArcherConfig, ArcherGRPOTrainer, archer_policy_loss
from neurips26.rl.archer import entropy_from_logits

STEPS = 4


def digit_fraction_reward(completions: list[str], **kwargs) -> list[float]:
    """Rule reward: the fraction of the completion's characters that are digits (0 for empty)."""
    return [sum(ch.isdigit() for ch in c) / len(c) if c else 0.0 for c in completions]


def tiny_policy(tokenizer, seed: int) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def loss_on_logprobs(model, tokenizer, seed: int) -> dict:
    """Archer's loss and the GRPO preset on per-token log-probs computed the TRL way."""
    g = torch.Generator().manual_seed(seed)
    prompt = tokenizer(["1+2=", "3+4="], return_tensors="pt")["input_ids"]
    completion = torch.randint(4, len(tokenizer), (2, 6), generator=g)
    completion_mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    ids = torch.cat([prompt, completion], dim=1)
    logits = model(ids).logits[:, prompt.shape[1] - 1 : -1]  # the logits that predict the completion
    logps = torch.log_softmax(logits, dim=-1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)  # [B, T]
    entropy = entropy_from_logits(logits.detach())  # [B, T]
    old = logps.detach() + 0.3 * torch.randn(logps.shape, generator=g)  # behaviour policy of the rollout
    ref = logps.detach() + 0.1 * torch.randn(logps.shape, generator=g)  # reference policy
    advantages = torch.tensor([1.0, -1.0])  # [B], broadcast over tokens
    out = {}
    for name, cfg in (("archer", ArcherConfig()), ("grpo", ArcherConfig.grpo())):
        loss, metrics = archer_policy_loss(logps, old, advantages, completion_mask, entropy, ref, cfg)
        (grad,) = torch.autograd.grad(loss, logps)
        out[name] = {
            "loss": float(loss.detach()),
            "reasoning_frac": metrics["reasoning_frac"],
            "clipfrac": metrics["clipfrac"],  # share of tokens whose ratio was clipped
            # share of reasoning tokens that keep a gradient under Archer's wide clip but not under GRPO's
            "clip_widened_frac": metrics["clip_widened_frac"],
            "grad_finite": bool(torch.isfinite(grad).all()),
            "grad_on_padding": float(grad[completion_mask == 0].abs().sum()),
        }
    return out


def main(seed: int = 0) -> dict:
    """Train ``STEPS`` GRPO steps with Archer's loss, then evaluate the loss function alone.

    Returns
    -------
    dict
        ``steps`` (optimizer steps run), ``loss_calls`` (Archer loss evaluations in TRL's loop),
        ``reward`` (mean reward per step), ``reasoning_frac`` (share of completion tokens treated as
        reasoning tokens, per step), ``kl_knowledge`` (per step), ``max_param_change`` (largest absolute
        weight change), ``loss_fn`` (the pure-function part: ``{"archer": {...}, "grpo": {...}}``).
    """
    tokenizer = char_tokenizer("0123456789+= ")
    model = tiny_policy(tokenizer, seed)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    prompts = datasets.Dataset.from_dict({"prompt": [f"{i}+{(3 * i) % 10}=" for i in range(8)]})
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(Path(tmp) / "init")  # TRL builds the reference model from this path
        model.config._name_or_path = str(Path(tmp) / "init")
        args = GRPOConfig(
            output_dir=str(Path(tmp) / "out"),
            per_device_train_batch_size=4,
            num_generations=4,
            max_completion_length=6,
            max_steps=STEPS,
            learning_rate=1e-2,
            logging_steps=1,
            report_to=[],
            use_cpu=True,
            bf16=False,
            save_strategy="no",
            seed=seed,
            disable_tqdm=True,
        )
        trainer = ArcherGRPOTrainer(
            model=model,
            reward_funcs=digit_fraction_reward,
            args=args,
            train_dataset=prompts,
            processing_class=tokenizer,
            archer_config=ArcherConfig(),  # the paper's defaults: q=0.8, clips 0.2 / 0.5, KL 1e-3 on knowledge
        )
        trainer.train()
    logs = [h for h in trainer.state.log_history if "archer/reasoning_frac" in h]
    result = {
        "steps": int(trainer.state.global_step),
        "loss_calls": int(trainer.loss_calls),
        "reward": [float(h["reward"]) for h in logs],
        "reasoning_frac": [float(h["archer/reasoning_frac"]) for h in logs],
        "kl_knowledge": [float(h["archer/kl_knowledge"]) for h in logs],
        "max_param_change": max(
            float((p.detach() - before[n]).abs().max()) for n, p in trainer.model.named_parameters()
        ),
    }
    trainer.model.eval()
    result["loss_fn"] = loss_on_logprobs(trainer.model, tokenizer, seed)
    for step, (r, f) in enumerate(zip(result["reward"], result["reasoning_frac"]), start=1):
        print(f"step {step}: mean reward {r:.3f}  reasoning-token share {f:.3f}")
    print(
        f"Archer loss ran {result['loss_calls']} times in TRL's loop; max weight change {result['max_param_change']:.2e}"
    )
    for name, m in result["loss_fn"].items():
        loss = m["loss"]
        assert math.isfinite(loss)
        print(
            f"{name:6s} loss on per-token log-probs {loss:+.4f}  reasoning share {m['reasoning_frac']:.3f}  "
            f"clipped share {m['clipfrac']:.3f}"
        )
    return result


if __name__ == "__main__":
    torch.set_num_threads(1)  # a tiny model runs fastest on one thread
    main()

"""Batched sampling from causal LMs with per-token log-probs and entropies, group rollouts, pass@k.

Conventions
-----------
Prompts are **left-padded** (``prompt_ids``, ``prompt_mask``: ``(B, P)``); completions are
**right-padded** (``completion_ids``, ``completion_mask``: ``(B, T)``). A completion ends at the
first end-of-sequence token, which is *included* in the mask (the policy chose to stop); positions
after it are padding. Position ids are always computed from the attention mask
(``cumsum(mask) - 1``), so a left-padded row gets exactly the log-probs it would get unpadded.

Log-probs and entropies are those of the sampling policy at the given ``temperature``:
``log softmax(logits / temperature)``, before any top-p truncation (top-p only restricts which
tokens may be drawn; the RL ratio is taken against the temperature-scaled policy, as in TRL).

.. math::

    \\log\\pi(o_t) = \\log\\mathrm{softmax}(z_t / \\tau)_{o_t}, \\qquad
    H_t = -\\sum_v \\pi(v)\\log\\pi(v), \\qquad
    \\mathrm{pass@}k = 1 - \\binom{n-c}{k} \\Big/ \\binom{n}{k}.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from neurips26.common.checks import check_float, check_int


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """``(B, L)`` 0/1 mask -> ``(B, L)`` position ids counting only real tokens (pads get 0)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def completion_mask_from_ids(
    completion_ids: torch.Tensor, eos_token_id: int | Sequence[int] | None
) -> torch.Tensor:
    """``(B, T)`` bool mask: True up to and including the first eos of each row (all True if none)."""
    if eos_token_id is None:
        return torch.ones_like(completion_ids, dtype=torch.bool)
    eos_ids = torch.as_tensor(
        [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id), device=completion_ids.device
    )
    is_eos = torch.isin(completion_ids, eos_ids)
    T = completion_ids.shape[1]
    first = torch.where(
        is_eos.any(1), is_eos.float().argmax(1), torch.full_like(is_eos[:, 0], T, dtype=torch.long)
    )
    steps = torch.arange(T, device=completion_ids.device).unsqueeze(0)
    return steps <= first.unsqueeze(1)


def _logp_entropy(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
    logp = logp_all.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def score_completions(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    return_logits: bool = False,
) -> dict[str, torch.Tensor]:
    """Teacher-forced per-token log-probs (with grad) and entropies (no grad) of completions.

    Parameters
    ----------
    model : causal LM
    prompt_ids, prompt_mask : Tensor ``(B, P)``
        Left-padded prompts.
    completion_ids, completion_mask : Tensor ``(B, T)``
        Right-padded completions.
    temperature : float
        Logits are divided by it before the softmax.
    return_logits : bool
        Also return the completion logits ``(B, T, V)`` (already divided by the temperature).

    Returns
    -------
    dict
        ``logprobs`` ``(B, T)`` (differentiable), ``entropy`` ``(B, T)`` (detached), optionally
        ``logits``. Values at masked positions are computed but meaningless.
    """
    check_float("temperature", temperature, 0.0, low_open=True)
    if prompt_ids.shape != prompt_mask.shape or completion_ids.shape != completion_mask.shape:
        raise ValueError("ids and masks must have the same shapes")
    if prompt_ids.shape[0] != completion_ids.shape[0]:
        raise ValueError(
            f"batch sizes differ: prompts {prompt_ids.shape[0]}, completions {completion_ids.shape[0]}"
        )
    P, T = prompt_ids.shape[1], completion_ids.shape[1]
    input_ids = torch.cat([prompt_ids, completion_ids], 1)
    mask = torch.cat([prompt_mask.long(), completion_mask.long()], 1)
    out = model(
        input_ids=input_ids, attention_mask=mask, position_ids=position_ids_from_mask(mask), use_cache=False
    )
    logits = out.logits[:, P - 1 : P + T - 1]
    logp, entropy = _logp_entropy(logits, completion_ids, temperature)
    result = {"logprobs": logp, "entropy": entropy}
    if return_logits:
        result["logits"] = logits.float() / temperature
    return result


@dataclass
class Rollout:
    """A batch of sampled completions. Shapes: ``B`` rows, prompt length ``P``, completion ``T``.

    Attributes
    ----------
    prompt_ids, prompt_mask : Tensor (B, P)
        Left-padded prompts (mask long 0/1).
    completion_ids : Tensor (B, T)
        Sampled tokens, padded with ``pad_token_id`` after the first eos.
    completion_mask : Tensor (B, T) bool
        True up to and including the first eos.
    logprobs, entropy : Tensor (B, T)
        Sampling-policy log-probs of the drawn tokens and the policy entropy at each step.
    texts : list of str
        Decoded completions (special tokens skipped).
    rewards : Tensor (B,) or None
        Filled by :func:`sample_groups`.
    group : Tensor (B,) long or None
        Index of the prompt each row belongs to (rows of one group are contiguous).
    stats : dict
        ``seconds``, ``new_tokens`` (masked completion tokens), ``tokens_per_s``.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    logprobs: torch.Tensor
    entropy: torch.Tensor
    texts: list[str]
    rewards: torch.Tensor | None = None
    group: torch.Tensor | None = None
    stats: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return self.completion_ids.shape[0]


@torch.no_grad()
def sample(
    model: torch.nn.Module,
    tokenizer: Any,
    prompts: Sequence[str],
    *,
    max_new_tokens: int = 32,
    temperature: float = 1.0,
    top_p: float = 1.0,
    do_sample: bool = True,
    seed: int | None = None,
) -> Rollout:
    """Sample one completion per prompt with ``model.generate`` (KV cache, left padding).

    Parameters
    ----------
    model : causal LM
    tokenizer : PreTrainedTokenizerBase
        Needs ``pad_token_id`` and ``eos_token_id``; padding side is forced to left here.
    prompts : sequence of str
    max_new_tokens : int
    temperature : float
        > 0. Ignored for the draw when ``do_sample=False`` (greedy), but still used for log-probs.
    top_p : float
        Nucleus sampling mass in (0, 1].
    do_sample : bool
        False = greedy decoding.
    seed : int, optional
        Seeds a forked RNG so the draw is reproducible without touching global state.

    Returns
    -------
    Rollout
    """
    check_int("max_new_tokens", max_new_tokens, low=1)
    check_float("temperature", temperature, 0.0, low_open=True)
    check_float("top_p", top_p, 0.0, 1.0, low_open=True)
    if isinstance(prompts, str) or len(prompts) == 0:
        raise ValueError("prompts must be a non-empty sequence of strings")
    if tokenizer.pad_token_id is None:
        raise ValueError("tokenizer needs a pad token")
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        enc = tokenizer(list(prompts), return_tensors="pt", padding=True)
    finally:
        tokenizer.padding_side = side
    prompt_ids, prompt_mask = enc["input_ids"], enc["attention_mask"]
    was_training = model.training
    model.eval()
    gen_kwargs: dict[str, Any] = dict(
        max_new_tokens=max_new_tokens,
        do_sample=do_sample,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        return_dict_in_generate=True,
        output_logits=True,
    )
    if do_sample:
        gen_kwargs.update(temperature=temperature, top_p=top_p, top_k=0)
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        out = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, **gen_kwargs)
    seconds = time.perf_counter() - start
    if was_training:
        model.train()
    completion_ids = out.sequences[:, prompt_ids.shape[1] :]
    logits = torch.stack(out.logits, 1)  # (B, T, V) raw logits of each step
    logp, entropy = _logp_entropy(logits, completion_ids, temperature)
    mask = completion_mask_from_ids(completion_ids, tokenizer.eos_token_id)
    completion_ids = completion_ids.masked_fill(~mask, tokenizer.pad_token_id)
    logp = logp.masked_fill(~mask, 0.0)
    entropy = entropy.masked_fill(~mask, 0.0)
    texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
    n_tokens = int(mask.sum())
    stats = {"seconds": seconds, "new_tokens": float(n_tokens), "tokens_per_s": n_tokens / max(seconds, 1e-9)}
    return Rollout(prompt_ids, prompt_mask, completion_ids, mask, logp, entropy, texts, stats=stats)


def sample_groups(
    model: torch.nn.Module,
    tokenizer: Any,
    prompts: Sequence[str],
    reward_fn: Callable[[int, str], float],
    *,
    group_size: int,
    **sample_kwargs: Any,
) -> Rollout:
    """Sample ``group_size`` completions per prompt and score them.

    Parameters
    ----------
    prompts : sequence of str
        ``N`` prompts; the rollout has ``N * group_size`` rows, the rows of prompt ``i`` being
        ``i*G .. i*G + G - 1``.
    reward_fn : callable
        ``reward_fn(prompt_index, completion_text) -> float``.
    group_size : int
        ``G >= 1``.
    **sample_kwargs
        Passed to :func:`sample`.
    """
    check_int("group_size", group_size, low=1)
    repeated = [p for p in prompts for _ in range(group_size)]
    rollout = sample(model, tokenizer, repeated, **sample_kwargs)
    group = torch.arange(len(prompts)).repeat_interleave(group_size)
    rewards = [float(reward_fn(int(g), text)) for g, text in zip(group.tolist(), rollout.texts)]
    if any(math.isnan(r) for r in rewards):
        raise ValueError("reward_fn returned NaN")
    rollout.rewards = torch.tensor(rewards, dtype=torch.float32)
    rollout.group = group
    return rollout


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator from ``n`` samples of which ``c`` are correct (Chen et al. 2021).

    ``1 - C(n-c, k) / C(n, k)``, computed as a stable product. Requires ``0 <= c <= n`` and
    ``1 <= k <= n``.
    """
    check_int("n", n, low=1)
    check_int("c", c, low=0, high=n)
    check_int("k", k, low=1, high=n)
    if n - c < k:
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


def mean_pass_at_k(correct: torch.Tensor | Sequence[Sequence[float]], k: int) -> float:
    """Mean unbiased pass@k over problems; ``correct`` is ``(num_problems, n)`` with 0/1 entries."""
    table = torch.as_tensor(correct, dtype=torch.float32)
    if table.ndim != 2:
        raise ValueError(f"correct must be 2-D (num_problems, n), got shape {tuple(table.shape)}")
    n = table.shape[1]
    return float(sum(pass_at_k(n, int(row.sum().item()), k) for row in table) / table.shape[0])


__all__ = [
    "Rollout",
    "position_ids_from_mask",
    "completion_mask_from_ids",
    "score_completions",
    "sample",
    "sample_groups",
    "pass_at_k",
    "mean_pass_at_k",
]

"""Causal-LM multi-turn rollouts (generation or admissible-command ranking), evaluation and BC data.

See :mod:`neurips26.common.agents` for the conventions.

Shapes
------
``prompt_ids/prompt_mask (N, P)`` left-padded, ``response_ids/response_mask/logprobs/entropy (N, T)``
right-padded, ``rewards/invalid (N,)``; ``N`` step rows in trajectory-major order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from neurips26.common.agents.envs import (
    GridLayout,
    KeyDoorGrid,
    Trajectory,
    keydoor_expert_action,
    to_hashable,
)
from neurips26.common.agents.workers import make_env_batch
from neurips26.common.checks import check_choice, check_float, check_int, check_probability

# ----------------------------------------------------------------------------------------------
# Tokenizer, prompts
# ----------------------------------------------------------------------------------------------


def word_tokenizer(words: Sequence[str], model_max_length: int = 256, normalize: bool = False):
    """Whitespace word-level ``PreTrainedTokenizerFast`` (``<pad>``=0, ``<s>``=1, ``</s>``=2, ``<unk>``=3).

    With ``normalize=True`` text is lower-cased and every run of characters outside ``[a-z0-9]``
    becomes a space before splitting (as :func:`neurips26.common.agents.textworld.normalize_text`)."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = list(dict.fromkeys(words))
    if not words or any(not isinstance(w, str) or not w or any(ch.isspace() for ch in w) for w in words):
        raise ValueError("words must be non-empty strings without whitespace")
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    for w in words:
        vocab.setdefault(w, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if normalize:
        backend.normalizer = normalizers.Sequence(
            [normalizers.Lowercase(), normalizers.Replace(Regex("[^a-z0-9]+"), " ")]
        )
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        padding_side="left",
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def format_prompt(observation: str, previous_action: str | None) -> str:
    """Prompt of one step: the observation plus a one-action history."""
    return f"{observation} | prev {previous_action or 'start'}"


# ----------------------------------------------------------------------------------------------
# Rollouts
# ----------------------------------------------------------------------------------------------


@dataclass
class RolloutBatch:
    """All agent steps of one round of group rollouts (trajectory-major rows, see Shapes above).

    Attributes
    ----------
    prompt_ids, prompt_mask : Tensor (N, P)
    response_ids : Tensor (N, T); response_mask : Tensor (N, T) bool (EOS included)
    logprobs, entropy : Tensor (N, T)
        Behaviour-policy token log-probs and entropies (0 at padding).
    rewards : Tensor (N,)
        Environment reward of each step.
    invalid : Tensor (N,) bool
        The response was not an admissible command (no environment step).
    group_ids, traj_ids, step_index, anchor_keys : lists of length N
    trajectories : list of Trajectory
        One per episode, in ``traj_ids`` order; ``trajectories[i].observations`` are anchor states.
    success : Tensor (num_episodes,) bool
    stats : dict
        ``env_steps``, ``episodes``, ``rollout_s``, ``new_tokens``, ``tokens_per_s``, ``env_steps_per_s``.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    logprobs: torch.Tensor
    entropy: torch.Tensor
    rewards: torch.Tensor
    invalid: torch.Tensor
    group_ids: list
    traj_ids: list[int]
    step_index: list[int]
    anchor_keys: list
    trajectories: list[Trajectory]
    success: torch.Tensor
    stats: dict[str, float] = field(default_factory=dict)
    #: final ``info["score"] / info["max_score"]`` per episode (``max_score`` 1 when absent), shape (num_episodes,)
    scores: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.response_ids.shape[0]

    @property
    def episode_returns(self) -> np.ndarray:
        return np.array([t.episode_return for t in self.trajectories])


def bc_example(tokenizer: Any, obs: str, prev: str | None, action: str) -> dict[str, list[int]]:
    """One behaviour-cloning example: the rollout prompt for ``(obs, prev)`` followed by ``action`` and EOS,
    with the loss on the response tokens only (``input_ids`` and ``loss_mask`` of equal length)."""
    prompt = tokenizer(format_prompt(obs, prev))["input_ids"]
    resp = tokenizer(action, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return {"input_ids": prompt + resp, "loss_mask": [0] * len(prompt) + [1] * len(resp)}


def _pad(rows: list[list[int]], pad: int, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if left:
            ids[i, width - len(r) :], mask[i, width - len(r) :] = torch.tensor(r), 1
        elif r:
            ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
    return ids, mask


def _pad_float(rows: list[list[float]], width: int) -> torch.Tensor:
    out = torch.zeros((len(rows), width))
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.float32)
    return out


@torch.no_grad()
def _rank_actions(policy, tokenizer, prompts, candidates, temperature, greedy, generator):
    """Choose among admissible commands by sequence log-prob (command + EOS); returns per row
    (text, token ids, token log-probs, token entropies)."""
    from neurips26.common.rollouts import score_completions

    flat_p, flat_c, owner = [], [], []
    for i, (p, cands) in enumerate(zip(prompts, candidates)):
        for c in cands:
            flat_p.append(p)
            flat_c.append(tokenizer(c, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])
            owner.append(i)
    p_ids, p_mask = _pad([tokenizer(p)["input_ids"] for p in flat_p], tokenizer.pad_token_id, left=True)
    c_ids, c_mask = _pad(flat_c, tokenizer.pad_token_id, left=False)
    out = score_completions(policy, p_ids, p_mask, c_ids, c_mask.bool(), temperature=temperature)
    lp, ent = out["logprobs"].float() * c_mask, out["entropy"].float() * c_mask
    seq = lp.sum(1)
    results, k = [], 0
    for cands in candidates:
        scores = seq[k : k + len(cands)]
        if greedy:
            j = int(scores.argmax())
        else:
            j = int(torch.multinomial(torch.softmax(scores, 0), 1, generator=generator))
        n = int(c_mask[k + j].sum())
        results.append((cands[j], flat_c[k + j], lp[k + j, :n].tolist(), ent[k + j, :n].tolist()))
        k += len(cands)
    return results


@torch.no_grad()
def _generate_actions(policy, tokenizer, prompts, max_new_tokens, temperature, greedy, generator):
    """Sample a short response per prompt token by token (no KV cache: responses are a few tokens).

    Position ids come from the attention mask, so a left-padded row gets the same distribution as
    the unpadded prompt (the training-time scoring of :func:`score_completions` does the same)."""
    from neurips26.common.rollouts import position_ids_from_mask

    p_ids, p_mask = _pad([tokenizer(p)["input_ids"] for p in prompts], tokenizer.pad_token_id, left=True)
    ids, mask = p_ids, p_mask
    eos = tokenizer.eos_token_id
    n = len(prompts)
    out_ids: list[list[int]] = [[] for _ in range(n)]
    out_lp: list[list[float]] = [[] for _ in range(n)]
    out_ent: list[list[float]] = [[] for _ in range(n)]
    alive = torch.ones(n, dtype=torch.bool)
    for _ in range(max_new_tokens):
        logits = policy(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)).logits[
            :, -1
        ]
        logp = torch.log_softmax(logits.float() / temperature, -1)
        if greedy:
            nxt = logp.argmax(-1)
        else:
            nxt = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1)
        ent = -(logp.exp() * logp).sum(-1)
        for i in torch.nonzero(alive).flatten().tolist():
            tok_id = int(nxt[i])
            out_ids[i].append(tok_id)
            out_lp[i].append(float(logp[i, tok_id]))
            out_ent[i].append(float(ent[i]))
            if tok_id == eos:
                alive[i] = False
        if not alive.any():
            break
        nxt = torch.where(alive | (nxt == eos), nxt, torch.full_like(nxt, tokenizer.pad_token_id))
        ids = torch.cat([ids, nxt.unsqueeze(1)], 1)
        mask = torch.cat([mask, torch.ones(n, 1, dtype=mask.dtype)], 1)
    results = []
    for i in range(n):
        text = tokenizer.decode(out_ids[i], skip_special_tokens=True).strip()
        results.append((text, out_ids[i], out_lp[i], out_ent[i]))
    return results, sum(len(r) for r in out_ids)


def _normalised_score(info: dict) -> float:
    max_score = float(info.get("max_score", 1.0) or 1.0)
    return float(info.get("score", 0.0)) / max_score


def _run_episodes(
    policy, tokenizer, envs, episodes, max_steps, temperature, greedy, action_mode, max_new_tokens, seed
):
    """The lock-step turn loop of :func:`collect_rollouts`; fills ``episodes`` in place."""
    was_training = policy.training
    policy.eval()
    generator = torch.Generator().manual_seed(seed)
    new_tokens = env_steps = 0
    policy_s = env_s = 0.0
    for t in range(max_steps):
        active = [e for e, ep in enumerate(episodes) if not ep["done"]]
        if not active:
            break
        prompts = [format_prompt(episodes[e]["obs"], episodes[e]["prev"]) for e in active]
        t0 = time.perf_counter()
        if action_mode == "rank":
            chosen = _rank_actions(
                policy, tokenizer, prompts, [episodes[e]["info"]["admissible_commands"] for e in active], temperature,
                greedy, generator,
            )  # fmt: skip
            new_tokens += sum(len(c[1]) for c in chosen)
        else:
            chosen, n_tok = _generate_actions(
                policy, tokenizer, prompts, max_new_tokens, temperature, greedy, generator
            )
            new_tokens += n_tok
        policy_s += time.perf_counter() - t0
        valid = [text in episodes[e]["info"]["admissible_commands"] for e, (text, *_) in zip(active, chosen)]
        stepped = [e for e, ok in zip(active, valid) if ok]
        t0 = time.perf_counter()
        results = envs.step(stepped, [c[0] for c, ok in zip(chosen, valid) if ok]) if stepped else []
        env_s += time.perf_counter() - t0
        outcome = dict(zip(stepped, results))
        env_steps += len(stepped)
        for e, prompt, (text, ids, lps, ents), ok in zip(active, prompts, chosen, valid):
            ep = episodes[e]
            reward = 0.0
            if ok:
                obs, reward, terminated, truncated, info = outcome[e]
                ep["obs"], ep["info"] = obs, info
                ep["won"] = ep["won"] or bool(info.get("won", False))
                ep["score"] = _normalised_score(info)
                ep["done"] = terminated or truncated
            ep["prev"] = text if ok else "none"
            ep["anchors"].append(to_hashable(ep["info"]["anchor_obs"]))
            ep["actions"].append(text)
            ep["rewards"].append(float(reward))
            ep["steps"].append((prompt, ids, lps, ents, not ok))
            if t + 1 >= max_steps:
                ep["done"] = True
    if was_training:
        policy.train()
    return new_tokens, env_steps, {"policy_s": policy_s, "env_s": env_s}


def collect_rollouts(
    policy: torch.nn.Module,
    tokenizer: Any,
    make_env: Callable[[Hashable], Any],
    tasks: Sequence[Hashable],
    *,
    group_size: int,
    max_steps: int = 12,
    temperature: float = 1.0,
    greedy: bool = False,
    action_mode: str = "generate",
    max_new_tokens: int = 4,
    seed: int = 0,
    env_seed: int | None = None,
    executor: str = "inprocess",
    num_workers: int = 2,
) -> RolloutBatch:
    """Run ``group_size`` episodes per task in lock-step and return every agent step.

    Parameters
    ----------
    policy : causal LM; tokenizer : its tokenizer (pad, eos)
    make_env : callable
        ``make_env(task) -> (env, reset_options)``: a fresh :class:`TextEnv` and the options for
        ``reset`` that select the task (e.g. ``{"layout": 3}``).
    tasks : sequence of hashable
        The task ids; they become the ``group_id`` of their episodes.
    group_size : int
        ``N`` rollouts per task.
    max_steps : int
        Agent turns per episode (invalid actions count).
    temperature, greedy : sampling of actions (greedy = arg-max).
    action_mode : {"generate", "rank"}
        Free generation or ranking of the admissible commands (module docstring).
    max_new_tokens : int
        Response length limit in ``"generate"`` mode.
    seed : int
        Seeds the action sampling (one ``torch.Generator`` for the whole call).
    env_seed : int, optional
        Base seed passed to ``env.reset`` (episode ``e`` gets ``env_seed + e``).
    executor : {"inprocess", "ray"}
        Where the environments live (:mod:`neurips26.common.agents.workers`); trajectories are identical.
    num_workers : int
        Ray actors for ``executor="ray"``.

    Returns
    -------
    RolloutBatch
    """
    check_int("group_size", group_size, low=1)
    check_int("max_steps", max_steps, low=1)
    check_choice("action_mode", action_mode, ("generate", "rank"))
    check_float("temperature", temperature, 0.0, low_open=True)
    if isinstance(tasks, (str, bytes)) or len(tasks) == 0:
        raise ValueError("tasks must be a non-empty sequence of task ids")
    start = time.perf_counter()
    specs = [
        (task, None if env_seed is None else env_seed + k * group_size + j)
        for k, task in enumerate(tasks)
        for j in range(group_size)
    ]
    envs = make_env_batch(make_env, specs, executor, num_workers)
    env_s = 0.0
    episodes = []  # per episode: dict of lists
    try:
        t0 = time.perf_counter()
        states = envs.reset()
        env_s += time.perf_counter() - t0
        for (task, _), (obs, info) in zip(specs, states):
            episodes.append(
                dict(task=task, obs=obs, info=info, prev=None, done=False, anchors=[to_hashable(info["anchor_obs"])],
                     actions=[], rewards=[], steps=[], won=False, score=_normalised_score(info))
            )  # fmt: skip
        new_tokens, env_steps, policy_s = _run_episodes(
            policy,
            tokenizer,
            envs,
            episodes,
            max_steps,
            temperature,
            greedy,
            action_mode,
            max_new_tokens,
            seed,
        )
        env_s += policy_s.pop("env_s")
        policy_s = policy_s["policy_s"]
    finally:
        envs.close()
    rows_p, rows_r, rows_lp, rows_ent = [], [], [], []
    rewards, invalid, group_ids, traj_ids, step_index, anchor_keys, trajs = [], [], [], [], [], [], []
    for e, ep in enumerate(episodes):
        for t, (prompt, ids, lps, ents, bad) in enumerate(ep["steps"]):
            rows_p.append(tokenizer(prompt)["input_ids"])
            rows_r.append(ids)
            rows_lp.append(lps)
            rows_ent.append(ents)
            rewards.append(ep["rewards"][t])
            invalid.append(bad)
            group_ids.append(ep["task"])
            traj_ids.append(e)
            step_index.append(t)
            anchor_keys.append(ep["anchors"][t])
        trajs.append(Trajectory(ep["task"], ep["anchors"], ep["actions"], ep["rewards"]))
    if any(len(r) == 0 for r in rows_r):
        raise RuntimeError("a response has no tokens (max_new_tokens too small?)")
    p_ids, p_mask = _pad(rows_p, tokenizer.pad_token_id, left=True)
    r_ids, r_mask = _pad(rows_r, tokenizer.pad_token_id, left=False)
    seconds = time.perf_counter() - start
    stats = {
        "env_steps": float(env_steps),
        "agent_steps": float(len(rows_r)),
        "episodes": float(len(episodes)),
        "rollout_s": seconds,
        "policy_s": policy_s,
        "new_tokens": float(new_tokens),
        "tokens_per_s": new_tokens / max(policy_s, 1e-9),
        "env_s": env_s,
        "env_steps_per_s": env_steps / max(env_s, 1e-9),
    }
    return RolloutBatch(
        prompt_ids=p_ids,
        prompt_mask=p_mask,
        response_ids=r_ids,
        response_mask=r_mask.bool(),
        logprobs=_pad_float(rows_lp, r_ids.shape[1]),
        entropy=_pad_float(rows_ent, r_ids.shape[1]),
        rewards=torch.tensor(rewards, dtype=torch.float32),
        invalid=torch.tensor(invalid, dtype=torch.bool),
        group_ids=group_ids,
        traj_ids=traj_ids,
        step_index=step_index,
        anchor_keys=anchor_keys,
        trajectories=trajs,
        success=torch.tensor([ep["won"] for ep in episodes], dtype=torch.bool),
        stats=stats,
        scores=torch.tensor([ep["score"] for ep in episodes], dtype=torch.float32),
    )


def keydoor_env_factory(layouts: Sequence[GridLayout], horizon: int = 12, phrasing: str = "word"):
    """``make_env`` for :func:`collect_rollouts` over KeyDoorGrid layouts; tasks are layout indices."""

    def make_env(task: int):
        return KeyDoorGrid(layouts, horizon=horizon, phrasing=phrasing), {"layout": int(task)}

    return make_env


@torch.no_grad()
def evaluate_agent(
    policy: torch.nn.Module,
    tokenizer: Any,
    make_env: Callable[[Hashable], Any],
    tasks: Sequence[Hashable],
    *,
    episodes_per_task: int = 1,
    greedy: bool = True,
    max_steps: int = 12,
    action_mode: str = "generate",
    max_new_tokens: int = 4,
    seed: int = 0,
) -> dict[str, float]:
    """Success rate, normalised score (final ``score / max_score``), mean steps to success and
    invalid-action rate on ``tasks``."""
    batch = collect_rollouts(
        policy, tokenizer, make_env, tasks, group_size=episodes_per_task, max_steps=max_steps, greedy=greedy,
        action_mode=action_mode, max_new_tokens=max_new_tokens, seed=seed,
    )  # fmt: skip
    lengths = np.array([len(t) for t in batch.trajectories])
    won = batch.success.numpy()
    return {
        "success": float(won.mean()),
        "score": float(batch.scores.mean()),
        "steps_to_success": float(lengths[won].mean()) if won.any() else float("nan"),
        "invalid_rate": float(batch.invalid.float().mean()),
    }


def keydoor_bc_examples(
    layouts: Sequence[GridLayout], tokenizer: Any, *, episodes_per_layout: int, seed: int, horizon: int = 12,
    phrasing: str = "word", expert_prob: float = 0.0,
) -> list[dict[str, list[int]]]:  # fmt: skip
    """Behaviour-cloning data: random *admissible* moves (teaches the action format, not the task);
    with probability ``expert_prob`` per step the shortest-path action instead (walkthrough plus noise)."""
    check_probability("expert_prob", expert_prob)
    rng = np.random.default_rng(seed)
    out = []
    for index in range(len(layouts)):
        for _ in range(episodes_per_layout):
            env = KeyDoorGrid(layouts, horizon=horizon, phrasing=phrasing)
            obs, info = env.reset(options={"layout": index})
            prev = None
            for _t in range(horizon):
                cmds = info["admissible_commands"]
                if rng.random() < expert_prob:
                    action = env.command(keydoor_expert_action(env.layout, env.pos, env.has_key))
                else:
                    action = cmds[int(rng.integers(len(cmds)))]
                out.append(bc_example(tokenizer, obs, prev, action))
                obs, _, term, trunc, info = env.step(action)
                prev = action
                if term or trunc:
                    break
    return out

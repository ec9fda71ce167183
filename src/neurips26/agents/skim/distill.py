"""On-policy distillation restricted to grammar-valid tokens, the token-level KD baseline, evaluation.

At an output prediction position :math:`t` with valid set :math:`V_t` the teacher's and the student's
distributions are renormalised over :math:`V_t` only,

.. math::

    \\tilde p_T = \\operatorname{softmax}(z_T[V_t] / \\tau), \\qquad
    \\tilde p_S = \\operatorname{softmax}(z_S[V_t] / \\tau), \\qquad
    \\mathcal L_{KD} = \\frac{\\sum_t w_{r_t} D(\\tilde p_T \\,\\|\\, \\tilde p_S)}{\\sum_t w_{r_t}},

with :math:`D` the forward KL or the generalised JSD
:math:`\\beta\\,KL(\\tilde p_T \\| M) + (1-\\beta)\\,KL(\\tilde p_S \\| M)`, :math:`M = \\beta \\tilde p_T +
(1-\\beta) \\tilde p_S`. A forced position (:math:`|V_t| = 1`) contributes exactly zero. Feature
matching over layers :math:`F` and roles :math:`c`:

.. math::

    \\mathcal L_{feat} = \\sum_{\\ell \\in F} \\sum_c w'_c \\operatorname{mean}_{t \\in c}
    \\lVert h^\\ell_S(t) - h^\\ell_T(t) \\rVert^2 / d, \\qquad \\mathcal L = \\mathcal L_{KD} + \\mu \\mathcal L_{feat}.

The student generates the output under the grammar (on-policy, temperature 1) with probability
``on_policy``; otherwise the teacher's greedy constrained output is used. The baseline (``mode=
"standard"``) is token-level KD: full-vocabulary forward KL on teacher-generated sequences, every output
position weighted equally, no feature term.

Shapes
------
logits ``[B, L, V]``, valid masks ``[B, L, V]``, weights ``[B, L]``, hidden states ``[B, L, d]``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

from neurips26.agents.skim.grammar import (
    IGNORE,
    JsonSchemaGrammar,
    TokenRole,
    constrained_generate,
    role_weight_vector,
)
from neurips26.agents.skim.prune import SALIENCY_WEIGHTS, PruneResult
from neurips26.common.checks import check_choice, check_float, check_int, check_probability, check_tensor

#: Default role weights of the feature-matching term (spec, inferred).
FEATURE_WEIGHTS = {"decision": 1.0, "context": 0.5, "format": 0.0}


def constrained_kl(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    valid_mask: torch.Tensor,
    weights: torch.Tensor,
    temperature: float = 1.0,
    divergence: str = "kl",
    beta: float = 0.5,
) -> torch.Tensor:
    """Weighted divergence between teacher and student renormalised over the valid tokens (scalar).

    Positions with weight 0 are skipped; a positive weight on a position with no valid token raises.
    Returns 0 (with a gradient path) when every weight is 0.
    """
    check_tensor("student_logits", student_logits)
    check_tensor("teacher_logits", teacher_logits, like=student_logits, like_name="student_logits")
    check_tensor("weights", weights)
    if not isinstance(valid_mask, torch.Tensor) or valid_mask.is_meta:
        raise TypeError("valid_mask must be a materialised bool tensor [B, L, V]")
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(
            f"student and teacher logits differ in shape {tuple(student_logits.shape)} vs "
            f"{tuple(teacher_logits.shape)} (vocabulary mismatch?)"
        )
    if student_logits.dim() != 3:
        raise ValueError(f"logits must be [B, L, V], got {tuple(student_logits.shape)}")
    if valid_mask.shape != student_logits.shape or valid_mask.dtype != torch.bool:
        raise ValueError(
            f"valid_mask must be a bool tensor {tuple(student_logits.shape)}, got {valid_mask.dtype} "
            f"{tuple(valid_mask.shape)}"
        )
    if weights.shape != student_logits.shape[:2]:
        raise ValueError(
            f"weights must be [B, L] = {tuple(student_logits.shape[:2])}, got {tuple(weights.shape)}"
        )
    temperature = check_float("temperature", temperature, 0.0, None, low_open=True)
    check_choice("divergence", divergence, ("kl", "jsd"))
    beta = check_probability("beta", beta)
    if bool((weights < 0).any()) or not bool(torch.isfinite(weights).all()):
        raise ValueError("weights must be finite and >= 0")
    sel = weights > 0
    if not bool(sel.any()):
        return student_logits.sum() * 0.0
    zs, zt, valid, w = (
        student_logits[sel],
        teacher_logits[sel],
        valid_mask[sel],
        weights[sel].to(student_logits.dtype),
    )
    if not bool(valid.any(-1).all()):
        raise ValueError("a weighted position has an empty valid set")
    neg = torch.finfo(zs.dtype).min
    ls = torch.log_softmax((zs / temperature).masked_fill(~valid, neg), -1)
    lt = torch.log_softmax((zt.detach() / temperature).masked_fill(~valid, neg), -1)
    pt, ps = lt.exp() * valid, ls.exp() * valid

    def kl(p: torch.Tensor, logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
        return torch.where(valid, p * (logp - logq), torch.zeros_like(p)).sum(-1)

    if divergence == "kl":
        d = kl(pt, lt, ls)
    else:
        m = beta * pt + (1 - beta) * ps
        logm = torch.log(m.clamp_min(torch.finfo(m.dtype).tiny))
        d = beta * kl(pt, lt, logm) + (1 - beta) * kl(ps, ls, logm)
    return (w * d).sum() / w.sum()


def _pad_sequences(prompts: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]], pad: int):
    seqs = [list(p) + list(o) for p, o in zip(prompts, outputs)]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    att = torch.zeros_like(ids)
    for r, s in enumerate(seqs):
        ids[r, : len(s)] = torch.tensor(s, dtype=torch.long)
        att[r, : len(s)] = 1
    return ids, att


def output_masks(
    grammar: JsonSchemaGrammar, prompts: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]], shape
) -> torch.Tensor:
    """``BoolTensor[B, L, V]``: the valid set at every output prediction position, all-true elsewhere."""
    valid = torch.ones(shape, dtype=torch.bool)
    for r, (p, o) in enumerate(zip(prompts, outputs)):
        if o:
            masks, _ = grammar.trace(o)
            valid[r, len(p) - 1 : len(p) - 1 + len(o)] = masks
    return valid


class SKIMDistiller:
    """Recovery of a pruned student by SKIM distillation (or the token-level KD baseline).

    Parameters
    ----------
    student, teacher : transformers causal LMs
        Same vocabulary (``ValueError`` otherwise); the teacher is frozen.
    grammar : JsonSchemaGrammar
    masks : PruneResult
        Re-applied after every optimiser step, so pruned weights stay exactly zero.
    mode : {"skim", "standard"}
        ``"standard"``: full-vocabulary forward KL on teacher outputs, uniform output weights, no
        feature term (the other SKIM options are then ignored).
    role_weights : dict, optional
        KD weights per role (default decision 1.0, context 0.3, format 0.05; only output positions count).
    feat_layers : sequence of int, optional
        Hidden-state indices matched (default every second decoder layer output: 2, 4, ...).
    feat_weights : dict, optional
        Feature weights per role (default decision 1.0, context 0.5, format 0.0).
    mu, temperature, on_policy, lr, grad_clip : float
    feat_scale : {"absolute", "teacher"}
        ``"absolute"`` (the spec): the feature term averages ``||h_S - h_T||^2 / d`` per position.
        ``"teacher"``: each position's squared error is divided by the teacher's ``||h_T||^2 / d`` there
        (relative error), so a few positions with massive activations (pretrained LMs' attention-sink
        tokens reach mean squares ~1e6) cannot dominate the loss.
    max_new_tokens, pad_token_id, seed : int
    teacher_cache : dict, optional
        Shared memo ``prompt tuple -> greedy teacher output`` (arms distilling from one teacher reuse it).
    """

    def __init__(
        self,
        student: nn.Module,
        teacher: nn.Module,
        grammar: JsonSchemaGrammar,
        masks: PruneResult,
        *,
        mode: str = "skim",
        role_weights: dict[str, float] | None = None,
        feat_layers: Sequence[int] | None = None,
        feat_weights: dict[str, float] | None = None,
        mu: float = 0.1,
        temperature: float = 1.0,
        on_policy: float = 1.0,
        lr: float = 1e-4,
        grad_clip: float = 1.0,
        max_new_tokens: int = 32,
        pad_token_id: int = 0,
        seed: int = 0,
        teacher_cache: dict | None = None,
        feat_scale: str = "absolute",
    ):
        self.mode = check_choice("mode", mode, ("skim", "standard"))
        self.feat_scale = check_choice("feat_scale", feat_scale, ("absolute", "teacher"))
        if not isinstance(masks, PruneResult):
            raise TypeError(f"masks must be a PruneResult, got {type(masks).__name__}")
        vs, vt = (
            student.get_output_embeddings().weight.shape[0],
            teacher.get_output_embeddings().weight.shape[0],
        )
        if vs != vt:
            raise ValueError(f"teacher and student vocabularies differ: student {vs}, teacher {vt}")
        if vs < grammar.vocab_size:
            raise ValueError(f"model vocabulary ({vs}) is smaller than the grammar's ({grammar.vocab_size})")
        self.student, self.teacher, self.grammar, self.masks = student, teacher, grammar, masks
        self.kd_w = role_weight_vector(role_weights, SALIENCY_WEIGHTS).float()
        self.feat_w = role_weight_vector(feat_weights, FEATURE_WEIGHTS).float()
        n_layers = student.config.num_hidden_layers
        self.feat_layers = list(feat_layers) if feat_layers is not None else list(range(2, n_layers + 1, 2))
        for ell in self.feat_layers:
            check_int("feat_layers entry", ell, low=0, high=n_layers)
        self.mu = check_float("mu", mu, 0.0, None)
        self.temperature = check_float("temperature", temperature, 0.0, None, low_open=True)
        self.on_policy = check_probability("on_policy", on_policy)
        self.lr = check_float("lr", lr, 0.0, None, low_open=True)
        self.grad_clip = check_float("grad_clip", grad_clip, 0.0, None, low_open=True)
        self.max_new_tokens = check_int("max_new_tokens", max_new_tokens, low=1)
        self.pad = check_int("pad_token_id", pad_token_id, low=0)
        self.seed = check_int("seed", seed, low=0)
        self.rng = random.Random(seed)
        self.calls = 0
        if teacher_cache is not None and not isinstance(teacher_cache, dict):
            raise TypeError(f"teacher_cache must be a dict or None, got {type(teacher_cache).__name__}")
        self._teacher_out: dict[tuple[int, ...], list[int]] = {} if teacher_cache is None else teacher_cache
        teacher.eval()  # frozen: only ever run under no_grad
        params = [p for p in student.parameters() if p.requires_grad]
        if not params:
            raise ValueError("student has no trainable parameters (requires_grad is False everywhere)")
        self.opt = torch.optim.AdamW(params, lr=self.lr)

    def teacher_outputs(self, prompts: Sequence[Sequence[int]]) -> list[list[int]]:
        """Greedy constrained teacher outputs (memoised per prompt)."""
        todo = [list(p) for p in prompts if tuple(p) not in self._teacher_out]
        if todo:
            outs = constrained_generate(
                self.teacher, self.grammar, todo, max_new_tokens=self.max_new_tokens, pad_token_id=self.pad
            )
            for p, o in zip(todo, outs):
                self._teacher_out[tuple(p)] = o
        return [self._teacher_out[tuple(p)] for p in prompts]

    def step(self, prompts: Sequence[Sequence[int]]) -> dict[str, float]:
        """One optimiser step on a batch of prompts; returns the loss terms."""
        if not prompts:
            raise ValueError("prompts must be a non-empty batch of token-id lists")
        self.calls += 1
        on_policy = self.mode == "skim" and self.rng.random() < self.on_policy
        if on_policy:
            outputs = constrained_generate(
                self.student,
                self.grammar,
                prompts,
                max_new_tokens=self.max_new_tokens,
                pad_token_id=self.pad,
                do_sample=True,
                temperature=1.0,
                seed=self.seed * 100_003 + self.calls,
            )
        else:
            outputs = self.teacher_outputs(prompts)
        ids, att = _pad_sequences(prompts, outputs, self.pad)
        plens = [len(p) for p in prompts]
        feats = self.mode == "skim" and self.mu > 0 and bool(self.feat_layers)
        with torch.no_grad():
            t_out = self.teacher(input_ids=ids, attention_mask=att, output_hidden_states=feats)
        self.student.train()
        s_out = self.student(input_ids=ids, attention_mask=att, output_hidden_states=feats)
        v = s_out.logits.shape[-1]
        if self.mode == "standard":
            roles = torch.full(ids.shape, IGNORE, dtype=torch.long)
            weights = torch.zeros(ids.shape)
            for r, (p, o) in enumerate(zip(plens, outputs)):
                weights[r, p - 1 : p - 1 + len(o)] = 1.0
            valid = torch.ones(ids.shape + (v,), dtype=torch.bool)
        else:
            roles = torch.full(ids.shape, IGNORE, dtype=torch.long)
            weights = torch.zeros(ids.shape)
            valid = torch.zeros(ids.shape + (v,), dtype=torch.bool)
            valid[..., : self.grammar.vocab_size] = True
            for r, (p, o) in enumerate(zip(plens, outputs)):
                roles[r, : p - 1] = int(TokenRole.CONTEXT)
                if o:
                    masks, out_roles = self.grammar.trace(o)
                    roles[r, p - 1 : p - 1 + len(o)] = out_roles
                    weights[r, p - 1 : p - 1 + len(o)] = self.kd_w[out_roles]
                    valid[r, p - 1 : p - 1 + len(o), : self.grammar.vocab_size] = masks
        kd = constrained_kl(s_out.logits, t_out.logits, valid, weights, self.temperature)
        feat = torch.zeros(())
        if feats:
            for ell in self.feat_layers:
                diff = (s_out.hidden_states[ell] - t_out.hidden_states[ell]).pow(2).mean(-1)  # [B, L]
                if self.feat_scale == "teacher":
                    diff = diff / t_out.hidden_states[ell].pow(2).mean(-1).clamp_min(1e-12)
                for c in TokenRole:
                    sel = roles == int(c)
                    if self.feat_w[c] > 0 and bool(sel.any()):
                        feat = feat + self.feat_w[c] * diff[sel].mean()
        loss = kd + self.mu * feat if feats else kd
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(
            [p for p in self.student.parameters() if p.requires_grad], self.grad_clip
        )
        self.opt.step()
        self.masks.reapply(self.student)
        n_dec = int(((roles == int(TokenRole.DECISION)) & (weights > 0)).sum())
        return {
            "loss": float(loss.detach()),
            "kd": float(kd.detach()),
            "feat": float(feat.detach()),
            "grad_norm": float(grad_norm),
            "on_policy": float(on_policy),
            "decision_positions": float(n_dec),
        }

    def fit(self, prompt_iter: Iterable[Sequence[Sequence[int]]], steps: int) -> list[dict[str, float]]:
        """``steps`` calls of :meth:`step` on successive batches from ``prompt_iter``."""
        check_int("steps", steps, low=0)
        history, it = [], iter(prompt_iter)
        for _ in range(steps):
            history.append(self.step(next(it)))
        return history


@torch.no_grad()
def greedy_match(
    model: nn.Module,
    grammar: JsonSchemaGrammar,
    prompts: Sequence[Sequence[int]],
    outputs: Sequence[Sequence[int]],
    *,
    pad_token_id: int = 0,
    batch_size: int = 64,
) -> list[list[bool]]:
    """Per output position: does the grammar-restricted argmax, given the reference prefix, pick the reference token?

    Greedy constrained decoding reproduces a reference output exactly iff every entry is ``True``
    (induction over positions), so exact-call accuracy costs one teacher-forced forward pass instead of
    a decoding loop. Ties in the argmax resolve to the lowest token id.
    """
    if len(prompts) != len(outputs):
        raise ValueError(f"{len(prompts)} prompts but {len(outputs)} outputs")
    check_int("batch_size", batch_size, low=1)
    was_training = model.training
    model.eval()
    result: list[list[bool]] = []
    for s in range(0, len(prompts), batch_size):
        ps, os_ = prompts[s : s + batch_size], outputs[s : s + batch_size]
        ids, att = _pad_sequences(ps, os_, pad_token_id)
        logits = model(input_ids=ids, attention_mask=att).logits[..., : grammar.vocab_size]
        for r, (p, o) in enumerate(zip(ps, os_)):
            masks, _ = grammar.trace(o)
            z = logits[r, len(p) - 1 : len(p) - 1 + len(o)].masked_fill(~masks, float("-inf"))
            result.append((z.argmax(-1) == torch.tensor(list(o))).tolist())
    model.train(was_training)
    return result


def evaluate_constrained(
    model: nn.Module,
    grammar: JsonSchemaGrammar,
    prompts: Sequence[Sequence[int]],
    references: Sequence[Any],
    parse_fn: Callable[[dict | None, Any], dict[str, float]] | None = None,
    *,
    max_new_tokens: int = 32,
    pad_token_id: int = 0,
    batch_size: int = 64,
) -> dict[str, Any]:
    """Greedy grammar-constrained decoding and accuracy against reference calls.

    ``parse_fn(call, reference) -> {metric: 0/1}`` scores one parsed call (``None`` when the output did
    not parse); the default scores ``exact`` (call == reference) and ``tool`` (same ``"tool"`` field).

    Returns the mean of each score, ``valid`` (fraction of outputs parsing against the schema),
    ``tokens_per_s`` (generated tokens / generation wall time), ``calls`` and ``outputs``.
    """
    if len(prompts) != len(references):
        raise ValueError(f"{len(prompts)} prompts but {len(references)} references")
    check_int("batch_size", batch_size, low=1)
    if parse_fn is None:

        def parse_fn(call, ref):
            return {
                "exact": float(call == ref),
                "tool": float(
                    call is not None and isinstance(ref, dict) and call.get("tool") == ref.get("tool")
                ),
            }

    outputs, seconds = [], 0.0
    for s in range(0, len(prompts), batch_size):
        t0 = time.perf_counter()
        outputs += constrained_generate(
            model,
            grammar,
            prompts[s : s + batch_size],
            max_new_tokens=max_new_tokens,
            pad_token_id=pad_token_id,
        )
        seconds += time.perf_counter() - t0
    calls = [grammar.parse(grammar.decode(o)) for o in outputs]
    scores = [parse_fn(c, r) for c, r in zip(calls, references)]
    keys = sorted(scores[0]) if scores else []
    result: dict[str, Any] = {k: sum(sc[k] for sc in scores) / len(scores) for k in keys}
    result["valid"] = sum(c is not None for c in calls) / max(len(calls), 1)
    result["tokens_per_s"] = sum(len(o) for o in outputs) / max(seconds, 1e-9)
    result["calls"] = calls
    result["outputs"] = outputs
    return result


__all__ = [
    "FEATURE_WEIGHTS",
    "constrained_kl",
    "output_masks",
    "SKIMDistiller",
    "greedy_match",
    "evaluate_constrained",
]

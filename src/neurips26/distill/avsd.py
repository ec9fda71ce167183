r"""AVSD: adaptive-view self-distillation from several privileged-information teachers.

Paper
-----
"Adaptive-View Self-Distillation" (AVSD), arXiv 2605.20643; seed file
``004_01f475bc147a144d.txt``, abstract beginning "Self-distillation enables language models to learn".
Reference code: github.com/duykhuongnguyen/AVSD (``src/avsd/common/multiview_distill.py``,
sampled-token gate mode ``"avsd"``). Public: the paper abstract and the reference code, which fix the
gate below; the view builders for this package's tasks are ours.

Math
----
The student samples a completion ``y``; the same model shown ``M`` privileged views (full
solution, partial solution, final answer) scores every sampled token. With student log-probs
:math:`\ell_S` and view log-probs :math:`\ell_m` of the sampled tokens:

.. math::

    \log q_G = \tfrac{1}{M}\sum_m \ell_m, \qquad
    \log q_A = \operatorname{logsumexp}_m \ell_m - \log M, \qquad
    J = \max(\log q_A - \log q_G, 0),

    \delta_m = \ell_m - \ell_S,\; c = \tfrac{1}{M}\sum_m \delta_m,\;
    \kappa = \frac{|c|}{\tfrac1M\sum_m|\delta_m| + \epsilon},\;
    g = \kappa\,\frac{|c|}{|c| + J + \epsilon} \in [0, 1],

    \log q^* = \log q_G + g\,J, \qquad
    \mathcal{L} = -\frac{1}{|\mathrm{mask}|}\sum_{b,t} \operatorname{sg}(\log q^* - \ell_S)\,\ell_S .

With one view the target is that view's log-prob and the loss is exactly TRL SDFT's
``sampled_token`` (reverse-KL) self-distillation loss (``trl.experimental.sdft.loss_utils``), the
single-view baseline.

Trainer
-------
``AVSDTrainer`` (loaded lazily from this module, since importing TRL is slow) subclasses TRL's
``trl.experimental.sdft.SDFTTrainer`` rather than re-implementing a loop: rollouts, teacher weights
(fixed initial policy / live / EMA, PEFT adapters disabled for the fixed teacher), skipped tokens,
importance clipping and temperature all stay SDFT's. It overrides only the batch preparation (one
teacher prompt per view, all ``M`` views scored in one batched teacher forward) and the loss. SDFT
exposes its objective only inside ``SDFTTrainer.compute_loss`` (plus the per-token helper
``compute_sampled_token_self_distillation_loss``), so the baseline equality is tested against the
trainer itself: ``AVSDTrainer`` with the single view ``full_solution`` and ``loss_agg="seq_mean"``
gives the same loss and parameter gradients as ``SDFTTrainer.compute_loss`` in ``sampled_token``
mode on a fixed batch (``tests/distill/test_avsd.py``). The privileged record of an example is a
mapping (``solution``, ``answer``); :data:`VIEW_BUILDERS` turn it into the view texts.

Shapes
------
- ``student_logprobs``: (B, T) sampled-token log-probs under the student (with grad).
- ``view_logprobs``: (B, M, T) under each of the ``M`` view-teachers (no grad).
- ``completion_mask``: (B, T); targets and gate statistics: (B, T).
- :func:`sampled_token_logprobs`: student logits (B, T, V), view logits (B, M, T, V), ids (B, T).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from neurips26.common.checks import check_choice, check_float

__all__ = [
    "AVSDConfig",
    "GATES",
    "MODES",
    "VIEW_BUILDERS",
    "avsd_loss",
    "build_views",
    "multiview_sampled_target",
    "partial_solution_view",
    "sampled_token_logprobs",
]

MODES = ("avsd", "consensus", "arithmetic", "single")
GATES = ("avsd", "consistency_exp")
LOSS_AGGS = ("token_mean", "seq_mean")


@dataclass
class AVSDConfig:
    """Hyperparameters of AVSD (reference defaults).

    Parameters
    ----------
    views : tuple of str
        Names of the privileged views, keys of :data:`VIEW_BUILDERS`.
    partial_ratio : float
        Fraction of solution segments kept by the partial view, in (0, 1).
    mode : {"avsd", "consensus", "arithmetic", "single"}
        Target: gated (AVSD), geometric mean, arithmetic mean, or the one view (needs M = 1).
    gate : {"avsd", "consistency_exp"}
        ``"avsd"`` is the reference gate; ``"consistency_exp"`` is ``kappa * exp(-J / (|c| + eps))``
        (inferred form).
    loss_agg : {"token_mean", "seq_mean"}
        Token mean over the batch (reference) or TRL SDFT's mean of per-sequence means.
    eps : float
    """

    views: tuple[str, ...] = ("full_solution", "partial_solution", "answer_only")
    partial_ratio: float = 0.5
    mode: str = "avsd"
    gate: str = "avsd"
    loss_agg: str = "token_mean"
    eps: float = 1e-8

    def __post_init__(self) -> None:
        if not self.views:
            raise ValueError("views must name at least one view")
        check_choice("mode", self.mode, MODES)
        check_choice("gate", self.gate, GATES)
        check_choice("loss_agg", self.loss_agg, LOSS_AGGS)
        check_float("partial_ratio", self.partial_ratio, 0.0, 1.0, low_open=True, high_open=True)
        check_float("eps", self.eps, 0.0, low_open=True)


def _check_inputs(student_logprobs: Any, view_logprobs: Any) -> tuple[int, int, int]:
    for name, x in (("student_logprobs", student_logprobs), ("view_logprobs", view_logprobs)):
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.is_meta:
            raise ValueError(f"{name} is a meta tensor (no data); pass a materialised tensor")
        if not x.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor of log-probs, got {x.dtype}")
    if view_logprobs.device != student_logprobs.device:
        raise ValueError(f"view_logprobs must be on student_logprobs' device {student_logprobs.device}")
    if student_logprobs.dim() != 2:
        raise ValueError("student_logprobs must be a tensor of shape (B, T)")
    if not isinstance(view_logprobs, Tensor) or view_logprobs.dim() != 3:
        shape = (
            tuple(view_logprobs.shape) if isinstance(view_logprobs, Tensor) else type(view_logprobs).__name__
        )
        raise ValueError(f"view_logprobs must be a tensor of shape (B, M, T), got {shape}")
    b, m, t = view_logprobs.shape
    if m == 0:
        raise ValueError("view_logprobs must hold at least one view (M >= 1), got M = 0")
    if student_logprobs.shape != (b, t):
        raise ValueError(
            f"student_logprobs must have shape (B, T) = ({b}, {t}) to match view_logprobs, "
            f"got {tuple(student_logprobs.shape)}"
        )
    return b, m, t


def multiview_sampled_target(
    student_logprobs: Tensor,
    view_logprobs: Tensor,
    mode: str = "avsd",
    gate: str = "avsd",
    eps: float = 1e-8,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token AVSD target log-probability from ``M`` view-teachers (sampled-token mode).

    Parameters
    ----------
    student_logprobs : Tensor
        :math:`\\ell_S` (B, T), log-probs of the sampled tokens under the student (detached inside).
    view_logprobs : Tensor
        :math:`\\ell_m` (B, M, T) under each view-teacher. Non-finite entries are replaced by 0 here;
        :func:`avsd_loss` masks those tokens out.
    mode, gate, eps
        See :class:`AVSDConfig`.

    Returns
    -------
    target : Tensor (B, T)
        :math:`\\log q^*` (detached).
    aux : dict
        ``gate``, ``jensen_gap``, ``log_q_g``, ``log_q_a``, ``consensus_adv``, ``agreement`` (each (B, T)).
    """
    _, m, _ = _check_inputs(student_logprobs, view_logprobs)
    check_choice("mode", mode, MODES)
    check_choice("gate", gate, GATES)
    check_float("eps", eps, 0.0, low_open=True)
    if not bool(torch.isfinite(student_logprobs).all()):
        raise ValueError("student_logprobs contains NaN or inf")
    if mode == "single" and m != 1:
        raise ValueError(f"mode='single' needs exactly one view, got M = {m}")
    ls = student_logprobs.detach()
    lv = view_logprobs.detach()
    lv = torch.where(torch.isfinite(lv), lv, torch.zeros_like(lv))
    log_q_g = lv.mean(1)
    log_q_a = torch.logsumexp(lv, dim=1) - math.log(m)
    jensen = (log_q_a - log_q_g).clamp_min(0.0)
    delta = lv - ls.unsqueeze(1)
    c = delta.mean(1)
    agreement = c.abs() / (delta.abs().mean(1) + eps)
    if gate == "avsd":
        g = agreement * c.abs() / (c.abs() + jensen + eps)
    else:
        g = agreement * torch.exp(-jensen / (c.abs() + eps))
    g = g.clamp(0.0, 1.0)
    if mode == "avsd":
        target = log_q_g + g * jensen
    elif mode == "consensus":
        target = log_q_g
    elif mode == "arithmetic":
        target = log_q_a
    else:
        target = lv[:, 0]
    aux = {
        "gate": g,
        "jensen_gap": jensen,
        "log_q_g": log_q_g,
        "log_q_a": log_q_a,
        "consensus_adv": c,
        "agreement": agreement,
    }
    return target, aux


def avsd_loss(
    student_logprobs: Tensor,
    view_logprobs: Tensor,
    completion_mask: Tensor,
    config: AVSDConfig | None = None,
    token_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Sampled-token AVSD loss, a stop-gradient surrogate of the reverse KL to the AVSD target.

    .. math:: \\mathcal{L} = -\\operatorname{mean}_{mask}\\, \\operatorname{sg}(\\log q^* - \\ell_S)\\,\\ell_S

    Gradients flow only through ``student_logprobs``. Tokens where any view log-prob is not finite
    are masked out; an all-masked batch gives a zero loss that still backpropagates (zeros).

    Parameters
    ----------
    student_logprobs, view_logprobs, completion_mask
        See Shapes.
    config : AVSDConfig, optional
        ``mode``, ``gate``, ``eps`` and ``loss_agg`` are used.
    token_weights : Tensor (B, T), optional
        Detached per-token factors applied before aggregation (e.g. TRL SDFT's clipped importance
        ratio when rollouts are reused).

    Shapes
    ------
    ``student_logprobs``: (B, T); ``view_logprobs``: (B, M, T); ``completion_mask``: (B, T).

    Returns
    -------
    (loss, metrics) with metrics ``gate_mean``, ``jensen_mean``, ``sign_disagreement`` (fraction of
    tokens whose per-view advantages do not all share a sign) and ``tokens``.
    """
    config = AVSDConfig() if config is None else config
    if not isinstance(config, AVSDConfig):
        raise TypeError(f"config must be an AVSDConfig, got {type(config).__name__}")
    b, m, t = _check_inputs(student_logprobs, view_logprobs)
    if not isinstance(completion_mask, Tensor) or completion_mask.shape != (b, t):
        shape = (
            tuple(completion_mask.shape)
            if isinstance(completion_mask, Tensor)
            else type(completion_mask).__name__
        )
        raise ValueError(f"completion_mask must have shape ({b}, {t}), got {shape}")
    if token_weights is not None and (not isinstance(token_weights, Tensor) or token_weights.shape != (b, t)):
        raise ValueError(f"token_weights must be a tensor of shape ({b}, {t})")
    if completion_mask.is_meta or completion_mask.device != student_logprobs.device:
        raise ValueError(
            f"completion_mask must hold data on student_logprobs' device {student_logprobs.device}"
        )
    mask = completion_mask.bool() & torch.isfinite(view_logprobs).all(1) & torch.isfinite(student_logprobs)
    target, aux = multiview_sampled_target(  # non-finite student tokens are masked out (zeroed here)
        torch.where(torch.isfinite(student_logprobs), student_logprobs, torch.zeros_like(student_logprobs)),
        view_logprobs,
        config.mode,
        config.gate,
        config.eps,
    )
    ls = torch.where(mask, student_logprobs, torch.zeros_like(student_logprobs))
    adv = (target - ls.detach()) * mask
    per_token = -adv * ls
    if token_weights is not None:
        per_token = per_token * token_weights.detach()
    if config.loss_agg == "token_mean":
        loss = per_token.sum() / mask.sum().clamp_min(1)
    else:
        loss = (per_token.sum(-1) / mask.sum(-1).clamp_min(1)).mean()
    if not bool(torch.isfinite(loss)):
        raise ValueError("student_logprobs or view_logprobs are too extreme: the AVSD loss is not finite")
    n = mask.sum().clamp_min(1)
    delta = view_logprobs.detach() - student_logprobs.detach().unsqueeze(1)
    same_sign = (delta > 0).all(1) | (delta < 0).all(1)
    metrics = {
        "gate_mean": float((aux["gate"] * mask).sum() / n),
        "jensen_mean": float((aux["jensen_gap"] * mask).sum() / n),
        "sign_disagreement": float(((~same_sign) & mask).sum() / n),
        "tokens": float(mask.sum()),
    }
    return loss, metrics


def partial_solution_view(solution: str, ratio: float = 0.5, sep: str = ";") -> str:
    """First ``ceil(ratio * n)`` of the ``n`` segments of ``solution`` (never all of them when n > 1).

    The final segment, which carries the answer, is always dropped when there is more than one
    segment, so the partial view never states the final answer.
    """
    ratio = check_float("ratio", ratio, 0.0, 1.0, low_open=True, high_open=True)
    parts = [p for p in solution.split(sep) if p]
    if len(parts) <= 1:
        return ""
    keep = min(len(parts) - 1, max(1, math.ceil(ratio * len(parts))))
    return sep.join(parts[:keep]) + sep + " (incomplete)"


VIEW_BUILDERS: dict[str, Callable[[dict], str]] = {
    "full_solution": lambda ex: ex["solution"],
    "partial_solution": lambda ex: partial_solution_view(ex["solution"], ex.get("partial_ratio", 0.5)),
    "answer_only": lambda ex: str(ex["answer"]),
}
"""Example dict (``solution``, ``answer``) -> privileged text for each named view."""


def build_views(
    record: Mapping[str, Any],
    views: Sequence[str],
    view_builders: Mapping[str, Callable[[dict], str]] | None = None,
    partial_ratio: float = 0.5,
) -> list[str]:
    """Privileged texts of one example, one per named view (in ``views`` order).

    Parameters
    ----------
    record : mapping
        The privileged record, e.g. ``{"solution": "7+5=12;12*3=36", "answer": "36"}``.
    views : sequence of str
        Keys of ``view_builders`` (at least one).
    view_builders : mapping, optional
        ``name -> builder(record) -> str``; defaults to :data:`VIEW_BUILDERS`.
    partial_ratio : float
        Passed to the partial-solution builder through the record (unless the record sets it).
    """
    if not isinstance(record, Mapping):
        raise TypeError(
            f"privileged record must be a mapping (e.g. with 'solution' and 'answer'), got {type(record).__name__}"
        )
    if isinstance(views, str) or len(views) == 0:
        raise ValueError("views must be a non-empty sequence of view names")
    builders = VIEW_BUILDERS if view_builders is None else view_builders
    unknown = [v for v in views if v not in builders]
    if unknown:
        raise ValueError(f"unknown view(s) {unknown}; view_builders has {sorted(builders)}")
    rec = {"partial_ratio": partial_ratio, **record}
    out = []
    for name in views:
        try:
            text = builders[name](rec)
        except KeyError as err:
            raise ValueError(f"view {name!r} needs key {err.args[0]!r} in the privileged record") from None
        if not isinstance(text, str):
            raise TypeError(f"view builder {name!r} must return a string, got {type(text).__name__}")
        out.append(text)
    return out


def sampled_token_logprobs(
    student_logits: Tensor, view_logits: Tensor, completion_ids: Tensor
) -> tuple[Tensor, Tensor]:
    """Log-probs of the sampled tokens under the student and under each view-teacher.

    Computed as ``gather(logits) - logsumexp(logits)`` (TRL's ``selective_log_softmax`` in fp32).

    Shapes
    ------
    ``student_logits``: (B, T, V); ``view_logits``: (B, M, T, V); ``completion_ids``: (B, T) ->
    ``(B, T)`` (with grad) and ``(B, M, T)`` (detached).
    """
    if not isinstance(student_logits, Tensor) or student_logits.dim() != 3:
        raise ValueError("student_logits must be a tensor of shape (B, T, V)")
    if not isinstance(view_logits, Tensor) or view_logits.dim() != 4:
        raise ValueError("view_logits must be a tensor of shape (B, M, T, V)")
    b, t, v = student_logits.shape
    if view_logits.shape[1] == 0:
        raise ValueError("view_logits must hold at least one view (M >= 1), got M = 0")
    if view_logits.shape[-1] != v:
        raise ValueError(
            f"teacher and student vocabularies differ: view_logits has V = {view_logits.shape[-1]}, "
            f"student_logits has V = {v}"
        )
    if view_logits.shape[0] != b or view_logits.shape[2] != t:
        raise ValueError(f"view_logits must have shape ({b}, M, {t}, {v}), got {tuple(view_logits.shape)}")
    if (
        not isinstance(completion_ids, Tensor)
        or completion_ids.shape != (b, t)
        or completion_ids.is_floating_point()
    ):
        raise ValueError(f"completion_ids must be an integer tensor of shape ({b}, {t})")
    if completion_ids.numel() and (int(completion_ids.min()) < 0 or int(completion_ids.max()) >= v):
        raise ValueError(f"completion_ids must lie in [0, {v}), the vocabulary")
    idx = completion_ids.unsqueeze(-1)
    ls = student_logits.float().gather(-1, idx).squeeze(-1) - torch.logsumexp(student_logits.float(), -1)
    vl = view_logits.detach().float()
    vidx = idx.unsqueeze(1).expand(-1, vl.shape[1], -1, -1)
    lv = vl.gather(-1, vidx).squeeze(-1) - torch.logsumexp(vl, -1)
    return ls, lv


_TRAINER_CLASS: type | None = None


def _trainer_class() -> type:
    """Build :class:`AVSDTrainer` on first use (importing TRL is slow; the module stays light)."""
    global _TRAINER_CLASS
    if _TRAINER_CLASS is not None:
        return _TRAINER_CLASS
    from trl.experimental.sdft import SDFTConfig, SDFTTrainer
    from trl.experimental.sdft.loss_utils import apply_importance_sampling_clipping

    class AVSDTrainer(SDFTTrainer):
        """TRL's ``SDFTTrainer`` with ``M`` privileged views per rollout and the AVSD target.

        Everything but the teacher inputs and the loss is SDFT's: rollout generation (transformers
        or vLLM), the teacher's weights (``teacher_model_kind``: ``"base"`` = fixed initial policy,
        LoRA adapters disabled for PEFT students; ``"live"``; ``"ema"``), ``num_loss_tokens_to_skip``,
        the clipped importance ratio and the temperature. Each example's ``privileged_context`` is the
        privileged *record* (a mapping such as ``{"solution": ..., "answer": ...}``); the trainer
        builds one teacher prompt per view with ``args.teacher_prompt_template`` and scores the
        rollout under all ``M`` views in one batched teacher forward.

        Parameters
        ----------
        model
            As for ``SDFTTrainer``.
        args : trl.experimental.sdft.SDFTConfig
            ``distillation_mode`` must be ``"sampled_token"`` (the AVSD objective is sampled-token);
            ``generate_from_teacher`` and ``use_teacher_server`` are not supported.
        avsd_config : AVSDConfig, optional
            Views, mode, gate and aggregation. ``loss_agg="seq_mean"`` aggregates like SDFT.
        view_builders : mapping, optional
            ``name -> builder(record) -> str``; defaults to :data:`VIEW_BUILDERS`.
        **kwargs
            Passed to ``SDFTTrainer`` (``train_dataset``, ``processing_class``, ``optimizers``, ...).

        Notes
        -----
        With ``avsd_config.views = ("full_solution",)`` and ``loss_agg="seq_mean"``, ``compute_loss``
        equals ``SDFTTrainer.compute_loss`` (sampled-token mode) with ``privileged_context`` = the
        full solution, in value and gradient (tested).
        """

        _tag_names = ["trl", "sdft", "avsd"]
        _name = "AVSD"

        def __init__(
            self, model, args=None, avsd_config: AVSDConfig | None = None, view_builders=None, **kwargs
        ):
            if not isinstance(args, SDFTConfig):
                raise TypeError(f"args must be a trl.experimental.sdft.SDFTConfig, got {type(args).__name__}")
            if args.distillation_mode != "sampled_token":
                raise ValueError(
                    f"AVSDTrainer needs args.distillation_mode='sampled_token', got {args.distillation_mode!r}"
                )
            if args.generate_from_teacher or args.use_teacher_server:
                raise ValueError("AVSDTrainer supports neither generate_from_teacher nor use_teacher_server")
            avsd_config = AVSDConfig() if avsd_config is None else avsd_config
            if not isinstance(avsd_config, AVSDConfig):
                raise TypeError(f"avsd_config must be an AVSDConfig, got {type(avsd_config).__name__}")
            builders = dict(VIEW_BUILDERS if view_builders is None else view_builders)
            unknown = [v for v in avsd_config.views if v not in builders]
            if unknown:
                raise ValueError(
                    f"avsd_config.views names unknown view(s) {unknown}; view_builders has {sorted(builders)}"
                )
            if avsd_config.mode == "single" and len(avsd_config.views) != 1:
                raise ValueError(f"mode='single' needs exactly one view, got {len(avsd_config.views)}")
            self.avsd_config = avsd_config
            self.view_builders = builders
            super().__init__(model, args=args, **kwargs)

        def build_view_inputs(
            self, prompts, records, completion_ids: Tensor, completion_mask: Tensor
        ) -> dict:
            """Teacher inputs for every (example, view): ``view_input_ids``/``view_attention_mask`` (B, M, L)."""
            cfg = self.avsd_config
            if len(prompts) != len(records) or len(prompts) != completion_ids.shape[0]:
                raise ValueError(
                    f"prompts ({len(prompts)}), records ({len(records)}) and completions "
                    f"({completion_ids.shape[0]}) must have the same length"
                )
            texts = [build_views(r, cfg.views, self.view_builders, cfg.partial_ratio) for r in records]
            b, m = len(prompts), len(cfg.views)
            rows_p = [prompts[i] for i in range(b) for _ in range(m)]  # row i * M + j: example i, view j
            rows_c = [texts[i][j] for i in range(b) for j in range(m)]
            built = self.teacher_context_builder.build(
                rows_p,
                rows_c,
                completion_ids.repeat_interleave(m, 0),
                completion_mask.repeat_interleave(m, 0),
            )
            ids, mask = built["teacher_input_ids"], built["teacher_attention_mask"]
            return {"view_input_ids": ids.reshape(b, m, -1), "view_attention_mask": mask.reshape(b, m, -1)}

        def _prepare_training_batch(self, inputs):
            batch = self.sample_rollouts(inputs)
            mode = "train" if self.model.training else "eval"
            self._record_completion_metrics(mode, batch)
            views = self.build_view_inputs(
                [ex["prompt"] for ex in inputs],
                [ex.get("privileged_context") for ex in inputs],
                batch["completion_ids"],
                batch["completion_mask"],
            )
            batch.update(views)
            # SDFT callbacks read teacher_input_ids: expose the first view's rows
            batch["teacher_input_ids"] = views["view_input_ids"][:, 0]
            batch["teacher_attention_mask"] = views["view_attention_mask"][:, 0]
            self._dispatch_self_distillation_callback(
                "on_self_distillation_batch_prepared",
                old_per_token_logps=batch.get("old_per_token_logps"),
                prompt_ids=batch["prompt_ids"],
                completion_ids=batch["completion_ids"],
                teacher_input_ids=batch["teacher_input_ids"],
                teacher_attention_mask=batch["teacher_attention_mask"],
            )
            return batch

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if return_outputs:
                raise ValueError("The AVSDTrainer does not support returning outputs")
            loss = self._compute_avsd_loss(model, inputs)
            scale = self.current_gradient_accumulation_steps if self.model.training else 1.0
            return loss / scale

        def _compute_avsd_loss(self, model, inputs) -> Tensor:
            completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
            t = completion_ids.size(1)
            loss_mask = completion_mask
            if self.num_loss_tokens_to_skip > 0:
                pos = torch.arange(t, device=completion_mask.device).unsqueeze(0)
                loss_mask = completion_mask * (pos >= self.num_loss_tokens_to_skip).long()
            student_logits = self._forward_logits(
                model,
                torch.cat([inputs["prompt_ids"], completion_ids], 1),
                torch.cat([inputs["prompt_mask"], completion_mask], 1),
                t,
            )
            b, m, length = inputs["view_input_ids"].shape
            with torch.no_grad(), self._get_teacher_context_for_self_distillation():
                view_logits = self._forward_logits(
                    self.teacher_model,
                    inputs["view_input_ids"].reshape(b * m, length),
                    inputs["view_attention_mask"].reshape(b * m, length),
                    t,
                )
            view_logits = view_logits.reshape(b, m, t, -1)
            mode = "train" if model.training else "eval"
            if loss_mask.sum() == 0:
                self._log_self_distillation_metric(mode, 0.0)
                return student_logits.sum() * 0.0
            ls, lv = sampled_token_logprobs(student_logits, view_logits, completion_ids)
            weights = None
            old = inputs.get("old_per_token_logps")
            if self.args.distillation_is_clip is not None and old is not None:
                weights = apply_importance_sampling_clipping(
                    torch.ones_like(ls), ls, old, self.args.distillation_is_clip
                )
            loss, stats = avsd_loss(ls, lv, loss_mask, self.avsd_config, token_weights=weights)
            for key in ("gate_mean", "jensen_mean", "sign_disagreement"):
                self._metrics[mode][f"avsd/{key}"].append(stats[key])
            self._log_self_distillation_metric(mode, loss.item())
            return loss

    AVSDTrainer.__module__ = __name__
    _TRAINER_CLASS = AVSDTrainer
    return AVSDTrainer


def __getattr__(name: str) -> Any:
    if name == "AVSDTrainer":
        return _trainer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

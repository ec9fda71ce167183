r"""SSD: speculative self-distillation with teacher intervention at divergent positions.

Paper
-----
Speculative self-distillation for knowledge injection (title not public); seed file ``000_f8b4140a0e3b5d84.txt``,
abstract beginning "Many practical deployments require language models". Only the abstract is public;
the mechanics follow the spec (reconstructed from the abstract and SKD / OPSD / SDFT), (inferred)
where the abstract is silent.

Math
----
The same causal LM is the closed-book student :math:`\pi_\theta(\cdot\mid x, y_{<t})` and, given
the source ``c`` in context, the teacher :math:`\pi_T(\cdot\mid c, x, y_{<t})`. The student drafts
``draft_len`` tokens; the teacher scores the block in one forward pass; at the first position with

.. math:: d_t = D(p_T, p_S) > \delta \qquad (D = \tfrac12\lVert p_T - p_S\rVert_1 \text{ by default})

the teacher intervenes (its token replaces the draft, the rest of the block is discarded). The
training loss is the generalised JSD of GKD, token-mean over the supervised set ``S``
(``supervise="intervened"``: the intervention positions):

.. math:: \mathcal{L} = \frac{1}{|S|}\sum_{t\in S} \mathrm{JSD}_\beta(p_T^t \,\|\, p_S^t).

Reductions: ``threshold = inf`` with ``supervise="all"`` is on-policy self-distillation (TRL
SDFT's ``full_logits`` objective, whose per-token divergence this module calls); a negative threshold
with ``always_intervene=True`` and ``supervise="all"`` is off-policy distillation on teacher-written
continuations.

Why a thin loop rather than a subclass of ``trl.experimental.sdft.SDFTTrainer``: SDFT generates its
rollouts with ``model.generate``/vLLM and exposes no per-token hook where a second model may replace
the sampled token, which is exactly what SSD changes; the loss itself is SDFT's per-token divergence
(``trl.experimental.sdft.loss_utils.compute_divergence``). Rollouts here recompute the prefix at every
draft block (no KV cache): fine for the tiny models of the claim check, not for scale.

Shapes
------
- :func:`speculative_mixed_rollout`: ``student_input_ids [B, L_s]``, ``teacher_input_ids [B, L_t]``
  (left-padded; masks alike) -> :class:`MixedRollout` with ``sequences``, ``response_mask``,
  ``intervention_mask``, ``divergence`` ``[B, T]``.
- :func:`completion_logits`: ``prompt_ids [B, L]``, ``completion_ids [B, T]`` -> ``[B, T, V]``.
- :func:`token_divergence`: ``teacher_logits``, ``student_logits`` ``[..., V]`` -> ``[...]``.
- :func:`ssd_loss`: ``student_logits``, ``teacher_logits`` ``[B, T, V]``; ``response_mask``,
  ``supervise_mask`` ``[B, T]`` -> scalar loss and a metrics dict.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.common.precision import at_least_float32
from neurips26.common.rollouts import position_ids_from_mask

__all__ = [
    "MixedRollout",
    "SSDConfig",
    "SSDTrainer",
    "completion_logits",
    "speculative_mixed_rollout",
    "ssd_loss",
    "token_divergence",
]

DIVERGENCES = ("tv", "kl", "jsd", "topk")
LOSSES = ("jsd", "fkl", "rkl")


@dataclass
class SSDConfig:
    """Hyperparameters of SSD (spec defaults; (inferred) where the abstract is silent).

    Parameters
    ----------
    threshold : float
        :math:`\\delta`; the teacher intervenes where the divergence exceeds it. ``inf`` never
        intervenes (on-policy). Negative values require ``always_intervene=True``.
    divergence : {"tv", "kl", "jsd", "topk"}
        Per-position test: total variation, KL(T||S), JSD(0.5), or SKD's rule (1 when the student's
        draft token is outside the teacher's top-``topk``, else 0).
    draft_len : int
        Tokens drafted by the student per teacher verification (1 = per-token).
    teacher_sampling, student_sampling : {"sample", "greedy"}
    temperature : float
        Sampling and divergence temperature.
    loss : {"jsd", "fkl", "rkl"}, beta : float
        Training divergence (GKD convention: beta = 0 forward KL, 1 reverse KL).
    supervise : {"intervened", "divergent", "all"}
        Supervised positions: intervention positions, every position with ``d > threshold`` after
        re-scoring, or every response token.
    teacher_mode : {"self", "frozen", "ema"}
        Teacher weights in :class:`SSDTrainer`: the current model, the initial model, or an EMA.
    ema_decay : float
    max_new_tokens : int
    topk : int
    always_intervene : bool
        Intervene at every position (off-policy baseline); required for a negative threshold.
    """

    threshold: float = 0.3
    divergence: str = "tv"
    draft_len: int = 1
    teacher_sampling: str = "sample"
    student_sampling: str = "sample"
    temperature: float = 1.0
    loss: str = "jsd"
    beta: float = 0.5
    supervise: str = "intervened"
    teacher_mode: str = "self"
    ema_decay: float = 0.99
    max_new_tokens: int = 32
    topk: int = 5
    always_intervene: bool = False

    def __post_init__(self) -> None:
        if (
            isinstance(self.threshold, bool)
            or not isinstance(self.threshold, (int, float))
            or math.isnan(self.threshold)
        ):
            raise TypeError(f"threshold must be a real number, got {self.threshold!r}")
        if self.threshold < 0 and not self.always_intervene:
            raise ValueError(
                f"threshold must be >= 0 (got {self.threshold}); a negative threshold means 'always intervene' "
                "and must be requested with always_intervene=True"
            )
        check_choice("divergence", self.divergence, DIVERGENCES)
        check_int("draft_len", self.draft_len, low=1)
        check_choice("teacher_sampling", self.teacher_sampling, ("sample", "greedy"))
        check_choice("student_sampling", self.student_sampling, ("sample", "greedy"))
        check_float("temperature", self.temperature, 0.0, low_open=True)
        check_choice("loss", self.loss, LOSSES)
        check_float("beta", self.beta, 0.0, 1.0)
        check_choice("supervise", self.supervise, ("intervened", "divergent", "all"))
        check_choice("teacher_mode", self.teacher_mode, ("self", "frozen", "ema"))
        check_float("ema_decay", self.ema_decay, 0.0, 1.0)
        check_int("max_new_tokens", self.max_new_tokens, low=1)
        check_int("topk", self.topk, low=1)


def token_divergence(
    teacher_logits: Tensor, student_logits: Tensor, kind: str = "tv", temperature: float = 1.0
) -> Tensor:
    """Per-position divergence between teacher and student next-token distributions.

    ``"tv"``: :math:`\\tfrac12\\sum_v |p_T - p_S|` in [0, 1]; ``"kl"``: KL(p_T || p_S);
    ``"jsd"``: the symmetric Jensen-Shannon divergence (GKD beta = 0.5).

    Shapes
    ------
    (..., V), (..., V) -> (...).
    """
    check_choice("kind", kind, ("tv", "kl", "jsd"))
    temperature = check_float("temperature", temperature, 0.0, low_open=True)
    if teacher_logits.shape[-1] != student_logits.shape[-1]:
        raise ValueError(
            f"teacher and student vocabularies differ: {teacher_logits.shape[-1]} vs {student_logits.shape[-1]}"
        )
    lt = F.log_softmax(at_least_float32(teacher_logits) / temperature, -1)
    ls = F.log_softmax(at_least_float32(student_logits) / temperature, -1)
    if kind == "tv":
        return 0.5 * (lt.exp() - ls.exp()).abs().sum(-1)
    if kind == "kl":
        return F.kl_div(ls, lt, reduction="none", log_target=True).sum(-1)
    return _gkd_divergence(ls, lt, 0.5)


def _gkd_divergence(student_log_probs: Tensor, teacher_log_probs: Tensor, beta: float) -> Tensor:
    """TRL SDFT/GKD per-token generalised JSD (beta = 0: KL(T||S), 1: KL(S||T))."""
    from trl.experimental.sdft.loss_utils import compute_divergence

    return compute_divergence(student_log_probs, teacher_log_probs, beta)


@dataclass
class MixedRollout:
    """Result of :func:`speculative_mixed_rollout`; every tensor is (B, T) over the generated tokens.

    ``sequences`` holds the completion ids (pad after EOS), ``response_mask`` the generated tokens up to
    and including EOS, ``intervention_mask`` the positions whose token came from the teacher,
    ``divergence`` the test value ``d_t`` at accepted positions.
    """

    sequences: Tensor
    response_mask: Tensor
    intervention_mask: Tensor
    divergence: Tensor
    n_supervised_tokens: int
    n_student_tokens: int
    n_teacher_forward_tokens: int
    n_discarded_draft_tokens: int
    n_teacher_calls: int


def _logits(model: Any, ids: Tensor, mask: Tensor) -> Tensor:
    out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask))
    return at_least_float32(out.logits if hasattr(out, "logits") else out)


def _check_prompt(name: str, ids: Any, mask: Any) -> Tensor:
    if not isinstance(ids, Tensor) or ids.dtype != torch.long or ids.dim() != 2:
        raise TypeError(f"{name} must be an int64 tensor of shape (B, L)")
    if mask is None:
        return torch.ones_like(ids)
    if mask.shape != ids.shape:
        raise ValueError(
            f"the attention mask of {name} must have shape {tuple(ids.shape)}, got {tuple(mask.shape)}"
        )
    return mask.long()


def _pick(logits: Tensor, how: str, temperature: float, generator: torch.Generator | None) -> Tensor:
    if how == "greedy":
        return logits.argmax(-1)
    probs = F.softmax(logits / temperature, -1)
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])


@torch.no_grad()
def speculative_mixed_rollout(
    student: Any,
    student_input_ids: Tensor,
    teacher_input_ids: Tensor,
    config: SSDConfig,
    teacher: Any | None = None,
    eos_token_id: int | None = None,
    generator: torch.Generator | None = None,
    student_attention_mask: Tensor | None = None,
    teacher_attention_mask: Tensor | None = None,
    pad_token_id: int = 0,
) -> MixedRollout:
    """Per-token mixed student/teacher rollout with block drafting (spec steps 3-5).

    The batch advances in lock-step: after each block, every row accepts its draft up to the first
    position ``j*`` where *any* row intervenes; a row that intervenes at ``j*`` takes the teacher's
    token there, the others keep their draft token (it passed their own test). This gives each row
    exactly the per-row rule, because a row's later draft tokens are only redrafted, never judged
    differently. Prompts may be left-padded (attention masks and position ids are honoured).

    Parameters
    ----------
    student, teacher : causal LM
        ``teacher=None`` uses the student's weights (self-distillation).
    student_input_ids, teacher_input_ids : LongTensor
        (B, Ls) and (B, Lt), left-padded; the teacher's prompt holds the privileged context.
    config : SSDConfig
    eos_token_id : int, optional
        Rows stop after emitting it; later positions are padded and unsupervised.
    generator : torch.Generator, optional
        Drives every sampling draw.

    Returns
    -------
    MixedRollout
    """
    teacher = student if teacher is None else teacher
    s_mask = _check_prompt("student_input_ids", student_input_ids, student_attention_mask)
    t_mask = _check_prompt("teacher_input_ids", teacher_input_ids, teacher_attention_mask)
    b = student_input_ids.shape[0]
    if teacher_input_ids.shape[0] != b:
        raise ValueError(f"student and teacher batch sizes differ: {b} vs {teacher_input_ids.shape[0]}")
    cfg = config
    y = student_input_ids.new_zeros((b, 0))
    inter, div = [], []
    done = torch.zeros(b, dtype=torch.bool)
    alive_rows = []
    counters = {"teacher_tokens": 0, "discarded": 0, "calls": 0}
    while y.shape[1] < cfg.max_new_tokens and not bool(done.all()):
        k = 1 if cfg.always_intervene else min(cfg.draft_len, cfg.max_new_tokens - y.shape[1])
        cur, drafts, s_logits = y, [], []
        for _ in range(k):
            ids = torch.cat([student_input_ids, cur], 1)
            mask = torch.cat([s_mask, torch.ones_like(cur)], 1)
            sl = _logits(student, ids, mask)[:, -1]
            # always_intervene: no student draw, so the rollout equals teacher-only sampling
            tok = (
                sl.argmax(-1)
                if cfg.always_intervene
                else _pick(sl, cfg.student_sampling, cfg.temperature, generator)
            )
            drafts.append(tok)
            s_logits.append(sl)
            cur = torch.cat([cur, tok[:, None]], 1)
        draft = torch.stack(drafts, 1)
        s_block = torch.stack(s_logits, 1)
        ids = torch.cat([teacher_input_ids, cur[:, :-1]], 1)
        mask = torch.cat([t_mask, torch.ones_like(cur[:, :-1])], 1)
        t_block = _logits(teacher, ids, mask)[:, -k:]
        counters["calls"] += 1
        counters["teacher_tokens"] += int(mask.sum())  # no KV cache: the whole prefix is recomputed
        if t_block.shape[-1] != s_block.shape[-1]:
            raise ValueError(
                f"teacher and student vocabularies differ: {t_block.shape[-1]} vs {s_block.shape[-1]}"
            )
        if cfg.divergence == "topk":
            top = t_block.topk(min(cfg.topk, t_block.shape[-1]), -1).indices
            d = (~(top == draft[..., None]).any(-1)).float()
        else:
            d = token_divergence(t_block, s_block, cfg.divergence, cfg.temperature)
        exceed = torch.ones_like(d, dtype=torch.bool) if cfg.always_intervene else d > cfg.threshold
        exceed &= ~done[:, None]
        any_row = exceed.any(0)
        if bool(any_row.any()):
            j_star = int(any_row.float().argmax())
            intervene_rows = exceed[:, j_star]
            t_tok = _pick(t_block[:, j_star], cfg.teacher_sampling, cfg.temperature, generator)
        else:
            j_star = k - 1
            intervene_rows = torch.zeros(b, dtype=torch.bool)
            t_tok = draft[:, j_star]
        accepted = draft[:, : j_star + 1].clone()
        accepted[:, j_star] = torch.where(intervene_rows, t_tok, draft[:, j_star])
        counters["discarded"] += int((k - j_star - 1) * (~done).sum())
        for j in range(j_star + 1):
            tok = torch.where(done, torch.full_like(accepted[:, j], pad_token_id), accepted[:, j])
            alive_rows.append(~done)
            inter.append(intervene_rows & ~done if j == j_star else torch.zeros(b, dtype=torch.bool))
            div.append(torch.where(done, torch.zeros_like(d[:, j]), d[:, j]))
            y = torch.cat([y, tok[:, None]], 1)
            if eos_token_id is not None:
                done = done | (tok == eos_token_id)
    response = torch.stack(alive_rows, 1) if alive_rows else torch.zeros(b, 0, dtype=torch.bool)
    interventions = torch.stack(inter, 1) if inter else torch.zeros(b, 0, dtype=torch.bool)
    divergence = torch.stack(div, 1) if div else torch.zeros(b, 0)
    n_resp = int(response.sum())
    n_int = int(interventions.sum())
    n_sup = n_resp if cfg.supervise == "all" else n_int
    return MixedRollout(
        sequences=y,
        response_mask=response,
        intervention_mask=interventions,
        divergence=divergence,
        n_supervised_tokens=n_sup,
        n_student_tokens=n_resp - n_int,
        n_teacher_forward_tokens=counters["teacher_tokens"],
        n_discarded_draft_tokens=counters["discarded"],
        n_teacher_calls=counters["calls"],
    )


def completion_logits(
    model: Any, prompt_ids: Tensor, prompt_mask: Tensor | None, completion_ids: Tensor
) -> Tensor:
    """Logits (B, T, V) that predict each completion token given the (left-padded) prompt and prefix."""
    p_mask = _check_prompt("prompt_ids", prompt_ids, prompt_mask)
    t = completion_ids.shape[1]
    ids = torch.cat([prompt_ids, completion_ids], 1)
    mask = torch.cat([p_mask, torch.ones_like(completion_ids)], 1)
    return _logits(model, ids, mask)[:, -t - 1 : -1]


def ssd_loss(
    student_logits: Tensor,
    teacher_logits: Tensor,
    response_mask: Tensor,
    supervise_mask: Tensor,
    loss: str = "jsd",
    beta: float = 0.5,
) -> tuple[Tensor, dict[str, float]]:
    """Token-mean generalised JSD over the supervised response positions (spec step 6).

    Per-token divergence: TRL SDFT's ``compute_divergence`` (GKD convention; ``"fkl"`` = beta 0,
    ``"rkl"`` = beta 1). An empty supervised set returns a zero loss that backpropagates zeros.

    Shapes
    ------
    ``student_logits``, ``teacher_logits``: (B, T, V); masks: (B, T).
    """
    check_choice("loss", loss, LOSSES)
    beta = {"fkl": 0.0, "rkl": 1.0, "jsd": check_float("beta", beta, 0.0, 1.0)}[loss]
    for name, t in (
        ("student_logits", student_logits),
        ("teacher_logits", teacher_logits),
        ("response_mask", response_mask),
        ("supervise_mask", supervise_mask),
    ):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.is_meta or t.device != student_logits.device:
            raise ValueError(
                f"{name} must hold data on student_logits' device {student_logits.device}, got {t.device}"
            )
        if name.endswith("logits") and (not t.is_floating_point() or t.dim() != 3):
            raise TypeError(
                f"{name} must be a floating-point (B, T, V) tensor, got {t.dtype} {tuple(t.shape)}"
            )
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(
            f"student_logits and teacher_logits must share one shape (same vocabulary), got "
            f"{tuple(student_logits.shape)} and {tuple(teacher_logits.shape)}"
        )
    if response_mask.shape != student_logits.shape[:2] or supervise_mask.shape != response_mask.shape:
        raise ValueError("response_mask and supervise_mask must have shape (B, T) matching the logits")
    sup = response_mask.bool() & supervise_mask.bool()
    for name, t in (("student_logits", student_logits), ("teacher_logits", teacher_logits)):
        if not bool(torch.isfinite(t[sup]).all()):
            raise ValueError(f"{name} contains NaN or inf at supervised tokens")
    n = int(sup.sum())
    if n == 0:
        return student_logits.sum() * 0.0, {"supervised_tokens": 0.0, "divergence": 0.0}
    per_token = _gkd_divergence(
        F.log_softmax(at_least_float32(student_logits), -1),
        F.log_softmax(at_least_float32(teacher_logits.detach()), -1),
        beta,
    )
    value = (per_token * sup).sum() / n
    return value, {"supervised_tokens": float(n), "divergence": value.item()}


class SSDTrainer:
    """Thin training loop: mixed rollout -> student/teacher re-scoring -> :func:`ssd_loss` -> step.

    Parameters
    ----------
    model : causal LM
        Student (trained) and, with ``teacher_mode="self"``, teacher.
    tokenizer : PreTrainedTokenizer
        Left padding; its ``eos_token_id`` stops rollouts.
    config : SSDConfig
    optimizer : torch.optim.Optimizer, optional
        Default AdamW(lr=1e-4).
    teacher : causal LM, optional
        Explicit teacher (overrides ``teacher_mode``).
    template : str
        Teacher prompt: ``template.format(source=..., question=...)``; the student sees ``question``.
    generator : torch.Generator, optional
    """

    def __init__(
        self,
        model,
        tokenizer,
        config: SSDConfig,
        optimizer=None,
        teacher=None,
        template: str = "{source} {question}",
        generator: torch.Generator | None = None,
    ):
        if not isinstance(config, SSDConfig):
            raise TypeError(f"config must be an SSDConfig, got {type(config).__name__}")
        self.model, self.tokenizer, self.config, self.template = model, tokenizer, config, template
        self.optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=1e-4)
        self.generator = generator if generator is not None else torch.Generator().manual_seed(0)
        if teacher is not None:
            self.teacher = teacher
        elif config.teacher_mode == "self":
            self.teacher = model
        else:
            self.teacher = copy.deepcopy(model).eval()
            for p in self.teacher.parameters():
                p.requires_grad_(False)
        self.totals = {
            "supervised_tokens": 0,
            "teacher_forward_tokens": 0,
            "teacher_calls": 0,
            "response_tokens": 0,
        }

    def build_inputs(self, sources: Sequence[str], questions: Sequence[str]) -> tuple[dict, dict]:
        """Left-padded student (question) and teacher (source + question) encodings."""
        if len(sources) != len(questions):
            raise ValueError(f"sources and questions differ in length: {len(sources)} vs {len(questions)}")
        self.tokenizer.padding_side = "left"
        s = self.tokenizer(list(questions), return_tensors="pt", padding=True)
        t = self.tokenizer(
            [self.template.format(source=c, question=q) for c, q in zip(sources, questions)],
            return_tensors="pt",
            padding=True,
        )
        return dict(s), dict(t)

    def step(self, sources: Sequence[str], questions: Sequence[str]) -> dict[str, float]:
        s, t = self.build_inputs(sources, questions)
        cfg = self.config
        self.model.eval()
        roll = speculative_mixed_rollout(
            self.model,
            s["input_ids"],
            t["input_ids"],
            cfg,
            teacher=self.teacher,
            eos_token_id=self.tokenizer.eos_token_id,
            generator=self.generator,
            student_attention_mask=s["attention_mask"],
            teacher_attention_mask=t["attention_mask"],
            pad_token_id=self.tokenizer.pad_token_id or 0,
        )
        self.model.train()
        student_logits = completion_logits(self.model, s["input_ids"], s["attention_mask"], roll.sequences)
        with torch.no_grad():
            teacher_logits = completion_logits(
                self.teacher, t["input_ids"], t["attention_mask"], roll.sequences
            )
        if cfg.supervise == "intervened":
            sup = roll.intervention_mask
        elif cfg.supervise == "divergent":
            sup = (
                token_divergence(
                    teacher_logits,
                    student_logits.detach(),
                    "tv" if cfg.divergence == "topk" else cfg.divergence,
                    cfg.temperature,
                )
                > cfg.threshold
            )
        else:
            sup = roll.response_mask
        loss, stats = ssd_loss(student_logits, teacher_logits, roll.response_mask, sup, cfg.loss, cfg.beta)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        if cfg.teacher_mode == "ema" and self.teacher is not self.model:
            with torch.no_grad():
                for pt, ps in zip(self.teacher.parameters(), self.model.parameters()):
                    pt.mul_(cfg.ema_decay).add_(ps.detach(), alpha=1 - cfg.ema_decay)
        self.totals["supervised_tokens"] += int(stats["supervised_tokens"])
        self.totals["teacher_forward_tokens"] += roll.n_teacher_forward_tokens + int(
            t["input_ids"].numel() + roll.sequences.numel()
        )
        self.totals["teacher_calls"] += roll.n_teacher_calls + 1
        self.totals["response_tokens"] += int(roll.response_mask.sum())
        return {
            "loss": loss.item(),
            "supervised_tokens": stats["supervised_tokens"],
            "response_tokens": float(roll.response_mask.sum()),
            "interventions": float(roll.intervention_mask.sum()),
        }

"""Matched inference-time controllers and their step-level rollback loop, as ``transformers`` hooks.

Paper: "CoT pathology diagnostics" (NeurIPS 2026, abstract only; seed file ``000_f8b4140a0e3b5d84.txt``,
paragraph 18); the controller designs below are the spec's inference from the abstract.

The controllers are one :class:`transformers.LogitsProcessor` (:class:`PathologyController`) driven
by a step-level generation loop (:class:`ControlledGenerator`). While the model decodes, a forward
hook on decoder layer ``L`` taps the hidden state of every generated token; when a step delimiter
arrives the step is closed (embedding = mean hidden state, uncertainty = mean next-token entropy of
the raw logits, answer from the extractor), quantised into a latent state, and the detectors run on
the trajectory so far. A firing rule either edits the next-token logits or rolls back:

================  ==========================================================================
controller        action
================  ==========================================================================
C1 premature      an answer step closed with ``m_min - D >= threshold``: **roll back** that
                  step, ban the answer marker for the next ``m_min`` steps, force the cue
C2 branching      **roll back** to the first surprising step (the detector's onset) and
                  resample that step with logits / ``temperature_factor``
C3 looping        **roll back** to the loop start (the detector's onset) and ban the first
                  ``loop_ban_ngram`` tokens of each step of the repeated block as a step
                  prefix, so the looped step cannot be emitted again; resample
C4 drift          force the re-anchoring cue ``cue_ids`` and sharpen the next ``cool_steps`` steps
C5 overrun        after a supported answer with ``post_steps >= threshold``: force EOS
C6 reversal       a new answer step after a supported one is forced to repeat the earliest
                  supported answer; EOS before any answer is banned (abandonment)
================  ==========================================================================

A rollback cannot happen inside one ``generate`` call (a logits processor cannot delete tokens),
so the processor marks the row, its stopping criterion (:attr:`PathologyController.stopping_criteria`)
ends that row at the next token, and :class:`ControlledGenerator` truncates the row's generated
tokens (and the controller's trajectory, hidden states and entropies) to the start of the rolled-back
step, applies the controller's bans / temperature / cue, and calls ``generate`` again on the rolled-back
rows (left-padded) until every row has ended (EOS or its token budget). Prompt tokens are never
removed. Rows that are never rolled back see exactly the tokens of a single ``generate`` call. With
every threshold at ``inf`` the processor returns the scores unchanged, so ``generate`` is
token-identical to plain decoding. Used as a bare processor inside ``model.generate`` (no
:class:`ControlledGenerator`), a controller that would roll back raises ``RuntimeError``.

Generic controls: random-time interventions are this processor with ``timing="random"`` and a
per-row schedule holding the same number of interventions as a detector-timed run
(:func:`~.controls.random_schedule`); the max-token budget, ``transformers``'
``NoRepeatNGramLogitsProcessor`` / ``RepetitionPenaltyLogitsProcessor`` (always on), the cue forced
every ``k`` steps (:class:`~.controls.VerifyCue`) and the surface baseline
(:class:`~.controls.AnswerRegexStop`) are in :mod:`.controls` (and importable from here).

.. math::

    \\tilde z_{t} = z_t / \\tau_{\\text{factor}} \\;(\\text{C2, C4}), \\qquad
    \\tilde z_{t,v} = -\\infty \\;\\; \\forall v \\in \\text{banned}_t, \\qquad
    \\tilde z_{t,v} = -\\infty \\;\\; \\forall v \\ne \\text{forced}_t

Shapes
------
input_ids : ``(B, T)``; scores : ``(B, V)``; tapped hidden state : ``(B, 1, H)`` per decoding step.
Padded batches: left padding only (the prompt part is never read).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import LogitsProcessor, StoppingCriteria

from neurips26.common.checks import check_float, check_int

# the generic controls and the surface baseline live in .controls; importable from here as before
from .controls import GENERIC_CONTROLS, AnswerRegexStop, VerifyCue, random_schedule  # noqa: F401
from .detectors import DetectorConfig, detect
from .trajectory import ANSWER, LatentStateModel, Pathology, StepSegmenter, Trajectory, as_id_list

#: Default thresholds of the matched controllers (``None``: act when the detector fires).
CONTROLLERS: dict[Pathology, float | None] = {
    Pathology.PREMATURE_COMMITMENT: 1.0,
    Pathology.UNSTABLE_BRANCHING: None,
    Pathology.LOOPING: None,
    Pathology.DRIFT: None,
    Pathology.OVERRUN: 0.0,
    Pathology.REVERSAL: 1.0,
}


def _decoder_layers(model) -> Any:
    for path in ("model.layers", "model.decoder.layers", "transformer.h", "gpt_neox.layers"):
        obj = model
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
            return obj
        except AttributeError:
            continue
    raise TypeError(f"cannot find the decoder layers of {type(model).__name__} (expected model.model.layers)")


class HiddenTap:
    """Forward hook that keeps the last output of ``hidden_states[layer]`` (``layer >= 1``)."""

    def __init__(self, model, layer: int):
        layers = _decoder_layers(model)
        check_int("layer", layer, low=1, high=len(layers))
        self.last: torch.Tensor | None = None
        self._handle = layers[layer - 1].register_forward_hook(self._hook)

    def _hook(self, module, args, output) -> None:
        self.last = (output[0] if isinstance(output, tuple) else output).detach()

    def remove(self) -> None:
        self._handle.remove()


@dataclass
class _Row:
    tokens: list[int] = field(default_factory=list)
    hidden: list[torch.Tensor] = field(default_factory=list)
    ent: list[float] = field(default_factory=list)
    start: int = 0
    states: list[int] = field(default_factory=list)
    unc: list[float] = field(default_factory=list)
    answers: list[str | None] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    done: bool = False
    forced: list[int] = field(default_factory=list)
    banned_prefixes: list[tuple[int, ...]] = field(default_factory=list)
    ban_marker_left: int = 0
    cool_left: int = 0
    pending: dict[str, Any] | None = None
    rollbacks: int = 0
    discarded: int = 0
    used: set = field(default_factory=set)  # (pathology, step) of random-timed actions already taken
    counts: Counter = field(default_factory=Counter)
    log: list[dict[str, Any]] = field(default_factory=list)

    def trajectory(self) -> Trajectory:
        return Trajectory(tuple(self.states), tuple(self.unc), tuple(self.answers), tuple(self.spans))


class PathologyController(LogitsProcessor):
    """Detector-timed (or random-timed) matched controllers as one ``LogitsProcessor``.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        The decoder being generated from (a hook taps ``hidden_states[state_model.layer]``).
    state_model : LatentStateModel
        Fitted reference (centroids, transitions, thresholds).
    segmenter : StepSegmenter
    answer_extractor : callable
        ``answer_extractor(step_ids: list[int]) -> str | None``.
    eos_token_id : int
    thresholds : mapping Pathology -> float or None, optional
        Controllers to enable and their thresholds (default :data:`CONTROLLERS`); ``inf`` disables.
    answer_marker_ids : sequence of int
        Tokens that open an answer (banned by C1; watched by C6).
    cue_ids : sequence of int
        Re-anchoring cue forced by C4 (may be empty: then C4 only sharpens).
    loop_ban_ngram : int
        Length of the step prefix banned by C3.
    temperature_factor : float
        C2/C4 multiply the temperature by this factor (logits divided by it).
    cool_steps : int
        Steps that C2/C4 keep the sharper distribution.
    max_interventions : int
        Per row and controller.
    timing : {"detector", "random"}
        ``"random"``: the generic control g3; actions happen at the steps of ``schedule``.
    schedule : sequence of mapping, optional
        For ``timing="random"``: per row, ``{pathology: [step indices]}`` (see :func:`random_schedule`).
    detector_config, graph_aware, verifier
        Passed to :func:`~.detectors.detect`.
    """

    def __init__(
        self,
        model,
        state_model: LatentStateModel,
        segmenter: StepSegmenter,
        answer_extractor: Callable[[list[int]], str | None],
        eos_token_id: int,
        *,
        thresholds: Mapping[Any, float | None] | None = None,
        answer_marker_ids: Sequence[int] = (),
        cue_ids: Sequence[int] = (),
        loop_ban_ngram: int = 2,
        temperature_factor: float = 0.5,
        cool_steps: int = 3,
        max_interventions: int = 2,
        timing: str = "detector",
        schedule: Sequence[Mapping[Any, Sequence[int]]] | None = None,
        detector_config: DetectorConfig | None = None,
        graph_aware: bool = True,
        verifier: Callable[[str], bool] | None = None,
    ):
        if (
            not isinstance(state_model, LatentStateModel)
            or not state_model.fitted
            or state_model.centroids is None
        ):
            raise ValueError(
                "state_model must be a LatentStateModel fitted on embeddings (fit / fit_embeddings)"
            )
        if not isinstance(segmenter, StepSegmenter):
            raise TypeError(f"segmenter must be a StepSegmenter, got {type(segmenter).__name__}")
        if not callable(answer_extractor):
            raise TypeError("answer_extractor must be callable: step_ids -> str | None")
        self.eos = check_int("eos_token_id", eos_token_id, low=0)
        raw = dict(CONTROLLERS if thresholds is None else thresholds)
        self.thresholds: dict[Pathology, float | None] = {}
        for key, value in raw.items():
            p = Pathology.parse(key)
            self.thresholds[p] = None if value is None else check_float(f"thresholds[{p.value}]", value)
        self.marker = as_id_list("answer_marker_ids", answer_marker_ids)
        self.cue = as_id_list("cue_ids", cue_ids)
        self.loop_ban_ngram = check_int("loop_ban_ngram", loop_ban_ngram, low=1)
        self.factor = check_float("temperature_factor", temperature_factor, low=0.0, high=1.0, low_open=True)
        self.cool_steps = check_int("cool_steps", cool_steps, low=0)
        self.max_interventions = check_int("max_interventions", max_interventions, low=1)
        if timing not in ("detector", "random"):
            raise ValueError(f"timing must be 'detector' or 'random', got {timing!r}")
        if timing == "random" and schedule is None:
            raise ValueError("timing='random' needs a schedule (see random_schedule)")
        self.timing = timing
        self.schedule = [{Pathology.parse(k): set(v) for k, v in row.items()} for row in (schedule or [])]
        self.ref, self.segmenter, self.extract = state_model, segmenter, answer_extractor
        self.config = detector_config or DetectorConfig()
        self.graph_aware, self.verifier = graph_aware, verifier
        self.model = model
        self.tap = HiddenTap(model, state_model.layer)
        self.rows: list[_Row] = []
        self._batch: list[_Row] = []
        self._batch_index: list[int] = []
        self._driven = False
        self._round_start = False
        self.stopping_criteria = _RollbackStop(self)
        self._last_len: int | None = None
        self._last_col: torch.Tensor | None = None
        self._prev_ent: torch.Tensor | None = None

    # ------------------------------------------------------------------ public helpers
    @property
    def active(self) -> bool:
        """False when every threshold is ``inf`` and timing is by detector (a pure monitor)."""
        return self.timing == "random" or any(v is None or math.isfinite(v) for v in self.thresholds.values())

    def remove(self) -> None:
        """Remove the hidden-state hook from the model."""
        self.tap.remove()

    def __enter__(self) -> PathologyController:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def trajectories(self) -> list[Trajectory]:
        """The latent trajectory of every row of the last ``generate`` call (closed steps only)."""
        return [r.trajectory() for r in self.rows]

    def intervention_counts(self) -> list[dict[str, int]]:
        return [{p.value: int(c) for p, c in r.counts.items()} for r in self.rows]

    def logs(self) -> list[list[dict[str, Any]]]:
        return [list(r.log) for r in self.rows]

    def rollback_counts(self) -> list[dict[str, int]]:
        """Per row: ``{"rollbacks": n, "discarded_tokens": m}`` of the last driven generation."""
        return [{"rollbacks": r.rollbacks, "discarded_tokens": r.discarded} for r in self.rows]

    # ------------------------------------------------------------------ rollback (ControlledGenerator)
    def _begin(self, n_rows: int) -> None:
        """Start a driven generation of ``n_rows`` fresh rows (rollbacks allowed)."""
        self.rows = [_Row() for _ in range(n_rows)]
        self._driven, self._batch, self._batch_index = True, [], []
        if self.schedule and len(self.schedule) != n_rows:
            raise ValueError(f"schedule has {len(self.schedule)} rows but the batch has {n_rows}")

    def _end(self) -> None:
        self._driven = False
        self._round_start = False
        self._batch = []

    def _round(self, row_indices: Sequence[int]) -> None:
        """The next ``generate`` call decodes ``rows[row_indices]`` (in this batch order)."""
        self._batch = [self.rows[r] for r in row_indices]
        self._batch_index = list(row_indices)
        self._round_start = True

    def _rollback(self, r: int) -> int:
        """Apply row ``r``'s pending rollback; returns the number of generated tokens to keep."""
        row = self.rows[r]
        pend = row.pending
        if pend is None:
            raise RuntimeError(f"row {r} has no pending rollback")
        to = pend["to_step"]
        cut = row.spans[to][0]
        row.discarded += len(row.tokens) + 1 - cut  # + the token sampled after the closing delimiter
        del row.tokens[cut:], row.hidden[cut:], row.ent[cut:]
        del row.states[to:], row.unc[to:], row.answers[to:], row.spans[to:]
        row.start = cut
        row.done, row.pending = False, None
        row.forced = list(pend["forced"])
        row.ban_marker_left = pend["ban_marker_steps"]
        row.cool_left = pend["cool_steps"]
        for seq in pend["ban_prefixes"]:
            if seq not in row.banned_prefixes:
                row.banned_prefixes.append(seq)
        row.rollbacks += 1
        return cut

    def _request_rollback(self, i: int, p: Pathology, to_step: int) -> None:
        row = self._batch[i]
        if not self._driven:
            raise RuntimeError(
                f"the {p.value} controller rolls back generated steps: generate through ControlledGenerator "
                "(a bare LogitsProcessor cannot delete tokens)"
            )
        step = len(row.states) - 1
        to_step = min(max(0, int(to_step)), step)
        pend: dict[str, Any] = {
            "to_step": to_step,
            "forced": [],
            "ban_marker_steps": 0,
            "cool_steps": 0,
            "ban_prefixes": [],
        }
        if p == Pathology.PREMATURE_COMMITMENT:
            pend["ban_marker_steps"] = self.config.m_min
            pend["forced"] = list(self.cue)
        elif p == Pathology.UNSTABLE_BRANCHING:
            pend["cool_steps"] = 1  # resample the branch step at temperature x factor
        else:
            for s, e in row.spans[to_step:]:
                seq = tuple(row.tokens[s:e][: self.loop_ban_ngram])
                if seq and seq not in pend["ban_prefixes"]:
                    pend["ban_prefixes"].append(seq)
        row.pending = pend
        row.done = True  # the stopping criterion ends this row; ControlledGenerator resumes it
        row.counts[p] += 1
        row.log.append({"step": step, "pathology": p.value, "action": "rollback", "to_step": to_step})

    # ------------------------------------------------------------------ processor
    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        b, t = input_ids.shape
        if self._round_start:  # first call of a driven round: every last input token is already recorded
            self._round_start = False
            if len(self._batch) != b:
                raise RuntimeError(f"the round holds {len(self._batch)} rows but the batch has {b}")
            self._last_len, self._last_col = t, input_ids[:, -1].clone()
        else:
            new = not self._driven and (
                self._last_len is None
                or t != self._last_len + 1
                or len(self.rows) != b
                or not torch.equal(input_ids[:, -2], self._last_col)
            )
            self._last_len, self._last_col = t, input_ids[:, -1].clone()
            if new:
                self.rows = [_Row() for _ in range(b)]
                self._batch = self.rows
                if self.schedule and len(self.schedule) != b:
                    raise ValueError(f"schedule has {len(self.schedule)} rows but the batch has {b}")
            else:
                hid = self.tap.last
                if hid is None or hid.shape[0] != b:
                    raise RuntimeError("the hidden-state hook saw no forward pass of this batch")
                toks = input_ids[:, -1].tolist()
                for i, row in enumerate(self._batch):
                    if row.done:
                        continue
                    tok = toks[i]
                    if tok == self.eos:
                        row.done = True
                        self._close_step(i, final=True)
                        continue
                    row.tokens.append(tok)
                    row.hidden.append(hid[i, -1].float())
                    row.ent.append(float(self._prev_ent[i]))
                    if tok in self.segmenter.delimiter_ids:
                        self._close_step(i)
        logp = torch.log_softmax(scores.float(), dim=-1)
        self._prev_ent = -(logp.exp() * torch.nan_to_num(logp, neginf=0.0)).sum(-1)
        if not self.active:
            return scores
        out = scores.clone()
        for i, row in enumerate(self._batch):
            if not row.done:
                self._apply(i, row, out[i], logp[i])
        return out

    # ------------------------------------------------------------------ internals
    def _fires(self, p: Pathology, traj: Trajectory) -> tuple[bool, Any]:
        thr = self.thresholds.get(p, math.inf)
        if thr is not None and not math.isfinite(thr) and thr > 0:
            return False, None
        res = detect(traj, p, self.ref, self.graph_aware, self.config, self.verifier)
        return (res.fired if thr is None else res.score >= thr), res

    def _row_index(self, i: int) -> int:
        return self._batch_index[i] if self._driven else i

    def _scheduled(self, i: int, p: Pathology, step: int) -> bool:
        return self.timing == "random" and step in self.schedule[self._row_index(i)].get(p, ())

    def _take(self, i: int, p: Pathology, step: int) -> bool:
        """Random timing at a step close: each scheduled (controller, step) acts once, even when a
        rollback makes the step index come round again."""
        row = self._batch[i]
        if not self._scheduled(i, p, step) or (p, step) in row.used:
            return False
        row.used.add((p, step))
        return True

    def _note(self, i: int, p: Pathology, action: str) -> None:
        row = self._batch[i]
        row.counts[p] += 1
        row.log.append({"step": len(row.states), "pathology": p.value, "action": action})

    def _supported_answer(self, row: _Row) -> int | None:
        traj = row.trajectory()
        for j, a in enumerate(traj.answers):
            if a is None:
                continue
            if self.verifier is not None:
                if self.verifier(a):
                    return j
            elif (
                sum(1 for s in traj.states[:j] if s != ANSWER and not self.ref.is_restatement(s))
                >= self.config.m_min
            ):
                return j
        return None

    def _close_step(self, i: int, final: bool = False) -> None:
        row = self._batch[i]
        if row.start >= len(row.tokens):
            return
        step = row.tokens[row.start :]
        emb = torch.stack(row.hidden[row.start :]).mean(0)
        answer = self.extract(list(step))
        state = ANSWER if answer is not None else self.ref.assign(emb[None])[0]
        row.states.append(state)
        row.unc.append(sum(row.ent[row.start :]) / len(step))
        row.answers.append(answer)
        row.spans.append((row.start, len(row.tokens)))
        row.start = len(row.tokens)
        if row.cool_left > 0:
            row.cool_left -= 1
        if row.ban_marker_left > 0:
            row.ban_marker_left -= 1
        if not final:
            self._on_step_closed(i)

    def _on_step_closed(self, i: int) -> None:
        row = self._batch[i]
        traj = row.trajectory()
        step = len(traj) - 1
        # C1-C3 roll back (the first that fires wins); C4-C6 act on the logits
        for p in (Pathology.PREMATURE_COMMITMENT, Pathology.LOOPING, Pathology.UNSTABLE_BRANCHING):
            if p not in self.thresholds or row.counts[p] >= self.max_interventions:
                continue
            if self.timing == "random":  # g3: the same rollback at a scheduled step, whatever it holds
                if self._take(i, p, step):
                    self._request_rollback(i, p, step)
                    return
                continue
            if p == Pathology.PREMATURE_COMMITMENT and (not self.marker or traj.answers[step] is None):
                continue  # C1 rolls back the answer step that commits early, when it closes
            fire, res = self._fires(p, traj)
            if fire and res is not None and res.fired and res.onset is not None:
                self._request_rollback(i, p, res.onset)
                return
        p = Pathology.DRIFT
        if p in self.thresholds and row.counts[p] < self.max_interventions:
            if self.timing == "random":
                fire = self._take(i, p, step)
            else:
                fire, _ = self._fires(p, traj)
            if fire:
                row.forced.extend(self.cue)
                row.cool_left = self.cool_steps
                self._note(i, p, "cue_and_sharpen")
        p = Pathology.OVERRUN
        if p in self.thresholds and row.counts[p] < 1:
            if self.timing == "random":
                fire = self._take(i, p, step)
            else:
                thr = self.thresholds[p]
                a = self._supported_answer(row)
                post = len(traj) - 1 - a if a is not None else -1
                fire = a is not None and (post >= (self.config.overrun_steps if thr is None else thr))
            if fire:
                row.forced = [self.eos]
                self._note(i, p, "force_eos")

    def _apply(self, i: int, row: _Row, z: torch.Tensor, logp: torch.Tensor) -> None:
        if row.forced:
            tok = row.forced.pop(0)
            keep = z[tok].clone()
            z.fill_(-math.inf)
            z[tok] = keep if math.isfinite(float(keep)) else 0.0
            return
        partial = row.tokens[row.start :]
        banned: set[int] = set()
        if row.ban_marker_left > 0 and self.marker:
            banned.update(self.marker)
        k = len(partial)
        for seq in row.banned_prefixes:
            if len(seq) == k + 1 and tuple(partial) == seq[:k]:
                banned.add(seq[k])
        p = Pathology.REVERSAL
        if p in self.thresholds and self.marker:
            thr = self.thresholds[p]
            on = thr is None or thr <= 1.0
            timed = self.timing == "random" and self._scheduled(i, p, len(row.states))
            starts_answer = k == 1 and partial[0] in self.marker
            may_abandon = on and not any(x is not None for x in row.answers)
            if (on or timed) and (starts_answer or may_abandon):
                a = self._supported_answer(row) if starts_answer else None
                if a is not None and starts_answer:
                    s, e = row.spans[a]
                    rest = row.tokens[s:e][1:]
                    if rest and row.counts[p] < self.max_interventions:
                        row.forced = list(rest[1:])
                        self._note(i, p, "restore_answer")
                        keep = z[rest[0]].clone()
                        z.fill_(-math.inf)
                        z[rest[0]] = keep if math.isfinite(float(keep)) else 0.0
                        return
                if may_abandon and float(logp[self.eos].exp()) > 0.05:
                    if row.counts[p] < self.max_interventions:
                        self._note(i, p, "ban_eos_force_marker")
                        row.forced = list(self.marker[1:])
                        keep = z[self.marker[0]].clone()
                        z.fill_(-math.inf)
                        z[self.marker[0]] = keep if math.isfinite(float(keep)) else 0.0
                        return
        if banned:
            idx = torch.tensor(sorted(banned))
            allowed = torch.ones(z.shape[0], dtype=torch.bool)
            allowed[idx] = False
            if bool(torch.isfinite(z[allowed]).any()):  # never ban every token
                z[idx] = -math.inf
        if row.cool_left > 0:
            z.div_(self.factor)


class _RollbackStop(StoppingCriteria):
    """Ends the rows of a driven round that wait for a rollback (see :class:`ControlledGenerator`)."""

    def __init__(self, controller: PathologyController):
        self.controller = controller

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        rows = self.controller._batch
        out = [rows[i].pending is not None if i < len(rows) else False for i in range(input_ids.shape[0])]
        return torch.tensor(out, dtype=torch.bool, device=input_ids.device)


class _RowBudget(StoppingCriteria):
    """Ends row ``i`` once it generated ``remaining[i]`` tokens in this round."""

    def __init__(self, prompt_width: int, remaining: Sequence[int]):
        self.width, self.remaining = prompt_width, torch.tensor(list(remaining))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        return (input_ids.shape[1] - self.width >= self.remaining).to(input_ids.device)


class ControlledGenerator:
    """Step-level generation loop: ``model.generate`` with a :class:`PathologyController`, and its rollbacks.

    Each round calls ``model.generate`` on the rows still running, with the controller as logits
    processor and its stopping criterion; a row the controller wants rolled back stops at the next
    token, its generated tokens are cut to the start of the rolled-back step, and the next round
    resumes it from there (left-padded with the other resumed rows). The token budget
    ``max_new_tokens`` holds for the final trace of every row; the tokens discarded by rollbacks are
    counted in the log (``discarded_tokens``). The number of rounds is bounded because each
    controller rolls back at most ``max_interventions`` times per row.

    Parameters
    ----------
    model : transformers.PreTrainedModel
    controller : PathologyController
        Built on the same ``model``.
    max_new_tokens : int

    ``generate(input_ids, attention_mask=None, *, temperature=1.0, seed=None, ...)`` returns
    ``(sequences, log)`` where ``sequences`` has shape ``(B, T_prompt + T_new)`` (prompt tokens are
    never changed; rows end with EOS or ``pad_token_id`` padding) and ``log`` holds, per row, the
    latent trajectory, the intervention counts, the list of actions, the number of rollbacks and of
    discarded tokens. :meth:`generate_ids` returns the generated tokens of each row as lists.
    """

    def __init__(self, model, controller: PathologyController, max_new_tokens: int = 256):
        if not isinstance(controller, PathologyController):
            raise TypeError(f"controller must be a PathologyController, got {type(controller).__name__}")
        if controller.model is not model:
            raise ValueError("controller must be built on the same model")
        self.model, self.controller = model, controller
        self.max_new_tokens = check_int("max_new_tokens", max_new_tokens, low=1)
        self.rounds = 0

    @torch.no_grad()
    def generate_ids(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        temperature: float = 1.0,
        seed: int | None = None,
        logits_processor: Sequence[LogitsProcessor] = (),
        pad_token_id: int | None = None,
    ) -> list[list[int]]:
        """Generated tokens per row (EOS included when generated, no padding).

        ``logits_processor`` runs before the controller (e.g. a bias); ``pad_token_id`` pads the
        resumed rows on the left (default: the model's pad token, else EOS).
        """
        from transformers import LogitsProcessorList, StoppingCriteriaList

        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
            raise ValueError("input_ids must be a (B, T) tensor of token ids")
        temperature = check_float("temperature", temperature, low=0.0)
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        if not isinstance(mask, torch.Tensor) or mask.shape != input_ids.shape:
            raise ValueError("attention_mask must be a tensor shaped like input_ids")
        procs = list(logits_processor)
        if not all(callable(p) for p in procs):
            raise TypeError("logits_processor must hold callables (transformers LogitsProcessor)")
        ctrl = self.controller
        pad = self._pad_id(pad_token_id)
        kwargs: dict[str, Any] = (
            {"do_sample": False}
            if temperature == 0
            else {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
        )
        b = input_ids.shape[0]
        prompts = [input_ids[i][mask[i].bool()].tolist() for i in range(b)]
        gen: list[list[int]] = [[] for _ in range(b)]
        active = list(range(b))
        self.rounds = 0
        ctrl._begin(b)
        try:
            with torch.random.fork_rng(devices=[], enabled=seed is not None):
                if seed is not None:
                    torch.manual_seed(check_int("seed", seed, low=0))
                first = True
                while active:
                    if first:  # the caller's batch as given (a row never rolled back sees plain generate)
                        x, m = input_ids, mask
                    else:
                        seqs = [prompts[r] + gen[r] for r in active]
                        width = max(map(len, seqs))
                        x = torch.tensor([[pad] * (width - len(q)) + q for q in seqs])
                        m = torch.tensor([[0] * (width - len(q)) + [1] * len(q) for q in seqs])
                    remaining = [self.max_new_tokens - len(gen[r]) for r in active]
                    ctrl._round(active)
                    stops = [ctrl.stopping_criteria]
                    if not first:
                        stops.append(_RowBudget(x.shape[1], remaining))
                    out = self.model.generate(
                        input_ids=x,
                        attention_mask=m,
                        max_new_tokens=max(remaining),
                        logits_processor=LogitsProcessorList([*procs, ctrl]),
                        stopping_criteria=StoppingCriteriaList(stops),
                        eos_token_id=ctrl.eos,
                        pad_token_id=pad,
                        **kwargs,
                    )
                    first = False
                    self.rounds += 1
                    resumed = []
                    for k, r in enumerate(active):
                        new = out[k, x.shape[1] :].tolist()
                        if ctrl.rows[r].pending is not None:
                            seen = len(ctrl.rows[r].tokens) - len(gen[r])
                            if (gen[r] + new[:seen]) != ctrl.rows[r].tokens:
                                raise RuntimeError("controller and generate disagree on the generated tokens")
                            ctrl._rollback(r)
                            gen[r] = list(ctrl.rows[r].tokens)  # cut to the start of the rolled-back step
                            resumed.append(r)
                        else:
                            new = new[: remaining[k]]
                            if ctrl.eos in new:
                                new = new[: new.index(ctrl.eos) + 1]
                            gen[r] = gen[r] + new
                    active = resumed
        finally:
            ctrl._end()
        return gen

    def _pad_id(self, pad_token_id: int | None) -> int:
        """The left / right padding token: ``pad_token_id``, else the model's pad token, else EOS."""
        pad = pad_token_id if pad_token_id is not None else self.model.generation_config.pad_token_id
        return self.controller.eos if pad is None else check_int("pad_token_id", pad, low=0)

    @torch.no_grad()
    def generate(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **options: Any
    ) -> tuple[torch.Tensor, list[dict[str, Any]]]:
        """``(sequences, log)``: the prompt, then the rows of :meth:`generate_ids` right-padded; the log.

        ``options`` are the keyword arguments of :meth:`generate_ids` (``temperature``, ``seed``,
        ``logits_processor``, ``pad_token_id``).
        """
        gen = self.generate_ids(input_ids, attention_mask, **options)
        ctrl = self.controller
        pad = self._pad_id(options.get("pad_token_id"))
        width = max(map(len, gen))
        tail = torch.tensor([g + [pad] * (width - len(g)) for g in gen], dtype=input_ids.dtype)
        out = torch.cat([input_ids, tail.reshape(len(gen), width)], dim=1)
        log = [
            {"trajectory": t, "interventions": c, "actions": a, **rb}
            for t, c, a, rb in zip(
                ctrl.trajectories(), ctrl.intervention_counts(), ctrl.logs(), ctrl.rollback_counts()
            )
        ]
        return out, log

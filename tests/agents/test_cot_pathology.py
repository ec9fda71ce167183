"""CoT pathology diagnostics: segmentation, latent states, the six detectors, controllers inside
``generate``, surgery and the counterfactual helpers (tiny models only)."""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteriaList

from neurips26.agents.cot_pathology import (
    ANSWER,
    CONTROLLERS,
    DETECTORS,
    AnswerRegexStop,
    ControlledGenerator,
    LatentStateModel,
    Pathology,
    PathologyController,
    Phase,
    StepSegmenter,
    SyntheticArithmetic,
    Trajectory,
    VerifyCue,
    auroc,
    counterfactual_flip_rate,
    detect,
    detect_all,
    evaluate_detectors,
    inject,
    ngram_repetition,
    path_change_rate,
    phases,
    random_schedule,
)
from neurips26.common.models import BOS_ID, build_tiny_lm

TASK = SyntheticArithmetic(max_value=9, min_operands=3, max_operands=5)
SEG = StepSegmenter([TASK.delimiter])


def _ref(n_states: int = 4, **kw) -> LatentStateModel:
    """Reference chain over states 0..3 that progress 0 -> 1 -> 2 -> 3 -> ANSWER, with uncertainty 1."""
    seqs = [[0, 1, 2, 3, ANSWER], [0, 1, 2, ANSWER], [0, 2, 3, ANSWER], [0, 1, 3, ANSWER]] * 5
    unc = [[1.0 + 0.01 * (i % 7) for i in range(len(s))] for s in seqs]
    return LatentStateModel.from_sequences(seqs, n_states, uncertainties=unc, **kw)


def _traj(states, answers=None, unc=None) -> Trajectory:
    return Trajectory.from_states(states, answers or {}, unc or ())


@pytest.fixture(scope="module")
def lm():
    model = build_tiny_lm("llama", vocab_size=TASK.vocab_size, seed=0, hidden_size=32, intermediate_size=64)
    return model.eval()


def _fitted_on_task(lm, n_states=3, seed=0):
    rng = random.Random(0)
    probs = [TASK.sample(rng) for _ in range(12)]
    prompts = [[BOS_ID, *TASK.prompt(p)] for p in probs]
    cots = [[t for s in TASK.clean_steps(p, rng, 0.5) for t in s] for p in probs]
    ref = LatentStateModel(n_states=n_states, seed=seed)
    ref.fit(lm, prompts, cots, SEG, TASK.extract_answer)
    return ref, probs, prompts, cots


# ------------------------------------------------------------------ segmentation
@given(st.lists(st.integers(0, 30), max_size=40), st.sets(st.integers(0, 30), min_size=1, max_size=4))
def test_segmentation_round_trip(ids, delims):
    spans = StepSegmenter(delims).split(ids)
    assert [t for s, e in spans for t in ids[s:e]] == ids
    for s, e in spans[:-1]:
        assert ids[e - 1] in delims and not any(t in delims for t in ids[s : e - 1])


def test_empty_trace_has_no_steps_and_nothing_fires():
    assert SEG.split([]) == []
    traj = Trajectory(())
    res = detect_all(traj, _ref())
    assert set(res) == set(Pathology) and not any(r.fired for r in res.values())


def test_segmenter_and_trajectory_errors():
    with pytest.raises(ValueError, match="delimiter_ids"):
        StepSegmenter([])
    with pytest.raises(ValueError, match="ids"):
        SEG.split([1, -2])
    with pytest.raises(TypeError, match="ids"):
        SEG.split(torch.zeros(3))
    with pytest.raises(ValueError, match="uncertainty"):
        Trajectory((0, 1), (1.0,))
    with pytest.raises(ValueError, match="ANSWER"):
        Trajectory((0, ANSWER), answers=(None, None))
    with pytest.raises(ValueError, match="states"):
        Trajectory((0, -5))


# ------------------------------------------------------------------ latent states
def test_latent_states_deterministic_and_roundtrip(lm, tmp_path):
    a, _, prompts, cots = _fitted_on_task(lm, seed=3)
    b, *_ = _fitted_on_task(lm, seed=3)
    assert torch.equal(a.centroids, b.centroids) and torch.equal(a.transition_matrix, b.transition_matrix)  # same kernel: rerun, same shapes and seed
    ta = a.encode(lm, prompts[0], cots[0], SEG, TASK.extract_answer)
    tb = b.encode(lm, prompts[0], cots[0], SEG, TASK.extract_answer)
    assert ta == tb and ta.states[-1] == ANSWER and len(ta) == len(SEG.split(cots[0]))
    assert torch.allclose(a.transition_matrix.sum(1), torch.ones(a.n_states + 2, dtype=torch.float64))
    a.save(tmp_path / "ref.pt")
    c = LatentStateModel.load(tmp_path / "ref.pt")
    assert c.encode(lm, prompts[0], cots[0], SEG, TASK.extract_answer) == ta
    assert c.thresholds == a.thresholds


def test_too_many_states_is_a_clear_error(lm):
    with pytest.raises(ValueError, match="n_states = 500 exceeds"):
        _fitted_on_task(lm, n_states=500)
    with pytest.raises(ValueError, match="n_states"):
        LatentStateModel(n_states=0)
    with pytest.raises(ValueError, match="not fitted"):
        detect(_traj([0]), Pathology.LOOPING, LatentStateModel(n_states=2))


def test_progress_decreases_along_the_reference_chain():
    ref = _ref()
    t = [ref.progress(s) for s in (0, 1, 2, 3, ANSWER)]
    assert t == sorted(t, reverse=True) and t[-1] == 0.0
    assert ref.distance[ref.index(3)] == 1 and ref.distance[ref.index(0)] >= 2


# ------------------------------------------------------------------ detectors
CLEAN = _traj([0, 1, 2, 3, ANSWER], {4: "7"})

CANONICAL = {
    Pathology.PREMATURE_COMMITMENT: (_traj([0, ANSWER, 1, 2, ANSWER], {1: "3", 4: "7"}), 1),
    Pathology.UNSTABLE_BRANCHING: (_traj([3, 0, 3, 0, 1, 2, 3, ANSWER], {7: "7"}), 0),
    Pathology.LOOPING: (_traj([0, 1, 2, 1, 2, 3, ANSWER], {6: "7"}), 3),
    Pathology.DRIFT: (_traj([0, 1, 1, 1, 1, 2, 3, ANSWER], {7: "7"}, [1, 1, 5, 5, 5, 1, 1, 1]), 2),
    Pathology.OVERRUN: (_traj([0, 1, 2, ANSWER, 1, 2, 3], {3: "7"}), 4),
    Pathology.REVERSAL: (_traj([0, 1, 2, ANSWER, 3, ANSWER], {3: "7", 5: "9"}), 5),
}


@pytest.mark.parametrize("pathology", list(Pathology))
def test_each_detector_fires_on_its_canonical_trajectory(pathology):
    ref = _ref()
    traj, onset = CANONICAL[pathology]
    res = detect(traj, pathology, ref)
    assert res.fired and res.onset == onset, res
    assert not detect(CLEAN, pathology, ref).fired
    assert detect(traj, pathology, ref).score > detect(CLEAN, pathology, ref).score


def test_phases_and_reversal_abandonment():
    ref = _ref()
    ph = phases(CLEAN, ref)
    assert ph[0] == Phase.EARLY and ph[-1] == Phase.TERMINATION and Phase.PROGRESSION in ph
    res = detect(_traj([0, 1, 2]), Pathology.REVERSAL, ref)
    assert res.fired and res.onset == 2 and res.score == 1.0
    assert Pathology.OVERRUN.phase == Phase.TERMINATION and Pathology("drift") == Pathology.DRIFT


def test_graph_aware_loop_check_uses_progress():
    ref = _ref()
    forward = _traj([0, 1, 0, 1, ANSWER], {4: "7"})  # the loop closes 1 -> 0: away from the answer
    assert detect(forward, Pathology.LOOPING, ref, graph_aware=True).fired
    progressing = _traj([1, 2, 3, 2, 3, ANSWER], {5: "7"})
    no_graph = detect(progressing, Pathology.LOOPING, ref, graph_aware=False)
    assert no_graph.fired
    # 3 -> 2 moves away from ANSWER, so the graph-aware check also fires; a closing transition toward the
    # answer would not count
    closing_forward = _traj([3, 0, 1, 2, 3, 0, 1, ANSWER], {7: "7"})
    assert detect(closing_forward, Pathology.LOOPING, ref, graph_aware=False).fired


def test_detectors_read_states_not_surface():
    """Emission invariance: a trajectory with the same states, answers and uncertainty but different
    spans (a paraphrase that keeps the state) gives identical detector outputs."""
    ref = _ref()
    for traj, _ in CANONICAL.values():
        other = Trajectory(
            traj.states, traj.uncertainty, traj.answers, tuple((3 * i, 3 * i + 3) for i in range(len(traj)))
        )
        assert detect_all(traj, ref) == detect_all(other, ref)
    # the paraphrase table is an involution that keeps the length and the numbers of a step
    step = TASK.step(3, "+", 4, 7)
    para = TASK.paraphrase(step)
    assert para != step and len(para) == len(step) and TASK.paraphrase(para) == step


def test_detect_errors_and_registry():
    ref = _ref()
    with pytest.raises(ValueError, match="pathology"):
        detect(CLEAN, "nonsense", ref)
    with pytest.raises(TypeError, match="traj"):
        detect([0, 1], Pathology.LOOPING, ref)
    with pytest.raises(ValueError, match="outside"):
        detect(_traj([9]), Pathology.LOOPING, ref)
    assert set(DETECTORS) == set(Pathology) and set(CONTROLLERS) == set(Pathology)


def test_surface_ngram_baseline():
    assert not ngram_repetition([1, 2, 3, 4, 5], 2).fired
    res = ngram_repetition([1, 2, 3, 1, 2, 3], 3)
    assert res.fired and res.onset == 3 and res.score == 1.0
    with pytest.raises(ValueError, match="n"):
        ngram_repetition([1, 2], 0)


@given(
    st.lists(st.floats(-5, 5), min_size=1, max_size=20), st.lists(st.floats(-5, 5), min_size=1, max_size=20)
)
def test_auroc_properties(pos, neg):
    a = auroc(pos, neg)
    assert 0.0 <= a <= 1.0 and math.isclose(a + auroc(neg, pos), 1.0)


def test_auroc_and_flip_errors():
    assert auroc([2.0, 3.0], [0.0, 1.0]) == 1.0 and math.isnan(auroc([], [1.0]))
    with pytest.raises(ValueError, match="finite"):
        auroc([math.nan], [1.0])
    with pytest.raises(ValueError, match="pair"):
        counterfactual_flip_rate(lambda t: detect(t, Pathology.LOOPING, _ref()), [CLEAN], [])
    assert path_change_rate([CLEAN], [CLEAN]) == 0.0


# ------------------------------------------------------------------ surgery
@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(list(Pathology)))
def test_inject_declared_onset_and_prefix_untouched(seed, pathology):
    rng = random.Random(seed)
    prob = TASK.sample(rng)
    cot = [t for s in TASK.clean_steps(prob, rng, 0.5) for t in s]
    spans = SEG.split(cot)
    new, onset = inject(cot, spans, pathology, rng, TASK.templates(), TASK.extract_answer)
    new_spans = SEG.split(new)
    assert 0 <= onset < len(new_spans)
    old_steps = [tuple(cot[s:e]) for s, e in spans]
    new_steps = [tuple(new[s:e]) for s, e in new_spans]
    assert new_steps[:onset] == old_steps[:onset]  # nothing changes before the onset
    assert new != cot


def test_inject_then_detect_recovers_answer_pathologies(lm):
    ref, probs, prompts, cots = _fitted_on_task(lm, n_states=3)
    rng = random.Random(1)
    clean = [ref.encode(lm, p, c, SEG, TASK.extract_answer) for p, c in zip(prompts, cots)]
    injected = {}
    for p in (Pathology.PREMATURE_COMMITMENT, Pathology.OVERRUN, Pathology.REVERSAL):
        items = []
        for prompt, cot in zip(prompts, cots):
            new, onset = inject(cot, SEG.split(cot), p, rng, TASK.templates(), TASK.extract_answer)
            items.append((ref.encode(lm, prompt, new, SEG, TASK.extract_answer), onset))
        injected[p] = items
    ev = evaluate_detectors(clean, injected, ref)
    for p in injected:
        row = ev["per_pathology"][p.value]
        assert row["auroc"] == 1.0 and row["fire_rate"] == 1.0 and row["onset_error"] == 0.0, (p, row)
    assert ev["per_phase"]["termination"] == 1.0


def test_inject_errors():
    cot = TASK.encode("S 1 + 2 = 3 ;")
    with pytest.raises(ValueError, match="answer"):
        inject(
            cot, SEG.split(cot), Pathology.LOOPING, random.Random(0), TASK.templates(), TASK.extract_answer
        )
    cot = TASK.encode("S 1 + 2 = 3 ; A 3 ;")
    with pytest.raises(ValueError, match="position"):
        inject(
            cot,
            SEG.split(cot),
            "looping",
            random.Random(0),
            TASK.templates(),
            TASK.extract_answer,
            position=7,
        )
    with pytest.raises(ValueError, match="spans"):
        inject(cot, [(0, 2)], "looping", random.Random(0), TASK.templates(), TASK.extract_answer)
    with pytest.raises(TypeError, match="rng"):
        inject(cot, SEG.split(cot), "looping", 0, TASK.templates(), TASK.extract_answer)


# ------------------------------------------------------------------ controllers inside generate
class _Script(LogitsProcessor):
    """Pushes a fixed token script (by generated position) with a large bias; other tokens stay possible."""

    def __init__(self, script, prompt_len, bias=50.0):
        self.script, self.plen, self.bias = script, prompt_len, bias

    def __call__(self, input_ids, scores):
        pos = input_ids.shape[1] - self.plen
        if pos < len(self.script):
            scores = scores.clone()
            scores[:, self.script[pos]] += self.bias
        return scores


def _one_state_ref(lm) -> LatentStateModel:
    ref = LatentStateModel(n_states=1, seed=0, layer=1)
    emb = [torch.randn(3, lm.config.hidden_size, generator=torch.Generator().manual_seed(0))]
    ref.fit_embeddings(emb + [emb[0][:2]], [[1.0, 1.0, 1.0], [1.0, 1.0]], [[None, None, "4"], [None, "3"]])
    return ref


def _controller(lm, ref, **kw) -> PathologyController:
    """A controller on ``lm`` for the synthetic task (segmenter, answer extractor and EOS of TASK)."""
    return PathologyController(lm, ref, SEG, TASK.extract_answer, TASK.eos, **kw)


def _gen(lm, prompt, procs, max_new=40, stops=()):
    x = torch.tensor([prompt])
    with torch.no_grad():
        out = lm.generate(
            input_ids=x,
            attention_mask=torch.ones_like(x),
            max_new_tokens=max_new,
            do_sample=False,
            logits_processor=LogitsProcessorList(procs),
            stopping_criteria=StoppingCriteriaList(list(stops)),
            eos_token_id=TASK.eos,
            pad_token_id=TASK.pad,
        )
    return out[0].tolist()


def test_infinite_thresholds_leave_generate_unchanged(lm):
    ref, _, prompts, _ = _fitted_on_task(lm)
    x = torch.tensor([p[:8] for p in prompts[:4]])
    kw = dict(
        attention_mask=torch.ones_like(x),
        max_new_tokens=30,
        do_sample=False,
        eos_token_id=TASK.eos,
        pad_token_id=TASK.pad,
    )
    with torch.no_grad():
        plain = lm.generate(input_ids=x, **kw)
        with _controller(
            lm,
            ref,
            thresholds={p: math.inf for p in Pathology},
            answer_marker_ids=[TASK.answer_marker],
        ) as ctrl:
            assert not ctrl.active
            monitored = lm.generate(input_ids=x, logits_processor=LogitsProcessorList([ctrl]), **kw)
    assert torch.equal(plain, monitored)  # same kernel: inf thresholds never intervene
    assert len(ctrl.trajectories()) == 4  # it still monitors


def test_c5_stops_right_after_the_verified_answer(lm):
    ref = _one_state_ref(lm)
    prompt = [BOS_ID, *TASK.encode("Q 1 + 2 + 1 - 1 ? ;")]
    script = TASK.encode("S 1 + 2 = 3 ; S 3 + 1 = 4 ; A 4 ; S 4 - 1 = 3 ; A 3 ;")
    plain = _gen(lm, prompt, [_Script(script, len(prompt))])
    assert TASK.final_answer(plain[len(prompt) :]) == "3"
    with _controller(
        lm,
        ref,
        thresholds={Pathology.OVERRUN: CONTROLLERS[Pathology.OVERRUN]},
    ) as ctrl:
        out = _gen(lm, prompt, [_Script(script, len(prompt)), ctrl])
    assert out[: len(prompt)] == prompt  # never deletes prompt tokens
    cot = out[len(prompt) :]
    assert TASK.decode(cot) == "S 1 + 2 = 3 ; S 3 + 1 = 4 ; A 4 ; <eos>"
    assert ctrl.intervention_counts()[0] == {"overrun": 1}


def _driven(lm, ctrl, prompt, script, max_new=40):
    """Greedy ControlledGenerator run of one prompt with the script bias before the controller."""
    x = torch.tensor([prompt])
    gen = ControlledGenerator(lm, ctrl, max_new_tokens=max_new)
    out, log = gen.generate(
        x, temperature=0.0, logits_processor=[_Script(script, len(prompt))], pad_token_id=TASK.pad
    )
    return out[0].tolist(), log[0], gen


def _steps(cot):
    return [tuple(cot[s:e]) for s, e in SEG.split(cot)]


def test_c3_rolls_back_to_the_loop_start_and_prevents_an_exact_repeat(lm):
    ref = _one_state_ref(lm)
    prompt = [BOS_ID, *TASK.encode("Q 1 + 2 ? ;")]
    looped = tuple(TASK.encode("S 1 + 2 = 3 ;"))
    script = TASK.encode(" ".join(["S 1 + 2 = 3 ;"] * 6))
    plain = _gen(lm, prompt, [_Script(script, len(prompt))], max_new=42)
    assert _steps(plain[len(prompt) :]).count(looped) == 6
    with _controller(lm, ref, thresholds={Pathology.LOOPING: None}) as ctrl:
        out, log, gen = _driven(lm, ctrl, prompt, script, max_new=42)
    assert out[: len(prompt)] == prompt  # rollbacks never delete prompt tokens
    cot = [t for t in out[len(prompt) :] if t != TASK.pad]
    rb = [a for a in log["actions"] if a["action"] == "rollback"]
    assert rb and rb[0]["pathology"] == "looping"
    # one state: the unigram run of 3 closes at step 2 and the loop starts there (the detector's onset)
    assert rb[0]["step"] == 2 and rb[0]["to_step"] == 2
    assert log["rollbacks"] == len(rb) >= 1 and log["discarded_tokens"] >= len(looped)
    assert gen.rounds == 1 + len(rb)
    steps = _steps(cot)
    to = rb[0]["to_step"]
    assert steps[:to] == [looped] * to  # the steps before the loop start are kept
    assert looped not in steps[to:]  # the rolled-back step is resampled and never repeats exactly


def test_c1_rolls_back_the_premature_answer_and_bans_the_marker(lm):
    ref = _one_state_ref(lm)
    prompt = [BOS_ID, *TASK.encode("Q 1 + 2 ? ;")]
    script = TASK.encode("A 3 ; S 1 + 2 = 3 ; A 3 ;")
    with _controller(
        lm,
        ref,
        thresholds={Pathology.PREMATURE_COMMITMENT: 1.0},
        answer_marker_ids=[TASK.answer_marker],
    ) as ctrl:
        out, log, _ = _driven(lm, ctrl, prompt, script, max_new=16)
    assert out[: len(prompt)] == prompt
    rb = [a for a in log["actions"] if a["action"] == "rollback"]
    assert rb[0] == {"step": 0, "pathology": "premature_commitment", "action": "rollback", "to_step": 0}
    assert log["discarded_tokens"] >= 3  # "A 3 ;" (+ the token sampled after it) was removed
    cot = [t for t in out[len(prompt) :] if t != TASK.pad]
    steps = _steps(cot)
    # the marker is banned for the next m_min = 2 steps after the rollback
    assert all(st[0] != TASK.answer_marker for st in steps[:2])
    assert log["interventions"]["premature_commitment"] == len(rb)


def test_c2_rolls_back_to_the_detector_onset_and_resamples_sharper(lm, monkeypatch):
    import neurips26.agents.cot_pathology.controllers as ctl
    from neurips26.agents.cot_pathology.detectors import DetectorResult

    ref = _one_state_ref(lm)
    prompt = [BOS_ID, *TASK.encode("Q 1 + 2 + 1 - 1 ? ;")]
    script = TASK.encode("S 1 + 2 = 3 ; S 3 + 1 = 4 ; S 4 - 1 = 3 ; A 3 ;")
    calls = []

    def fake_detect(traj, p, *args, **kw):  # fires once three steps are closed, onset step 1
        calls.append(len(traj))
        fired = p == Pathology.UNSTABLE_BRANCHING and len(traj) == 3
        return DetectorResult(fired, 1 if fired else None, 1.0 if fired else 0.0)

    monkeypatch.setattr(ctl, "detect", fake_detect)
    with _controller(
        lm,
        ref,
        thresholds={Pathology.UNSTABLE_BRANCHING: None},
        max_interventions=1,
    ) as ctrl:
        out, log, gen = _driven(lm, ctrl, prompt, script, max_new=30)
    rb = [a for a in log["actions"] if a["action"] == "rollback"]
    assert rb == [{"step": 2, "pathology": "unstable_branching", "action": "rollback", "to_step": 1}]
    assert gen.rounds == 2 and 3 in calls
    cot = [t for t in out[len(prompt) :] if t != TASK.pad]
    # step 0 kept; steps 1 and 2 (and the token after) discarded, then resampled
    assert _steps(cot)[0] == tuple(TASK.encode("S 1 + 2 = 3 ;"))
    assert log["discarded_tokens"] == 2 * len(TASK.encode("S 3 + 1 = 4 ;")) + 1


def test_rollback_needs_the_step_loop(lm):
    ref = _one_state_ref(lm)
    prompt = [BOS_ID, *TASK.encode("Q 1 + 2 ? ;")]
    script = TASK.encode(" ".join(["S 1 + 2 = 3 ;"] * 6))
    with _controller(lm, ref, thresholds={"looping": None}) as ctrl:
        with pytest.raises(RuntimeError, match="ControlledGenerator"):
            _gen(lm, prompt, [_Script(script, len(prompt)), ctrl], max_new=42)


def test_controlled_generation_keeps_prompts_and_plain_rows(lm):
    """Sampled batch with every controller: prompts intact (left padding too), budgets held, and with
    every threshold at inf the step loop is token-identical to plain generate."""
    ref, _, prompts, _ = _fitted_on_task(lm)
    width = max(len(p) for p in prompts[:4])
    x = torch.tensor([[TASK.pad] * (width - len(p)) + p for p in prompts[:4]])
    m = (torch.arange(width)[None] >= torch.tensor([width - len(p) for p in prompts[:4]])[:, None]).long()
    with _controller(lm, ref, answer_marker_ids=[TASK.answer_marker]) as ctrl:
        gen = ControlledGenerator(lm, ctrl, max_new_tokens=20)
        out, log = gen.generate(x, m, temperature=1.0, seed=1, pad_token_id=TASK.pad)
        again, _ = gen.generate(x, m, temperature=1.0, seed=1, pad_token_id=TASK.pad)
    assert torch.equal(out, again)  # same kernel: same seed, same calls
    assert torch.equal(out[:, :width], x)  # same kernel: prompt tokens copied
    ids = gen.generate_ids(x, m, temperature=1.0, seed=1, pad_token_id=TASK.pad)
    assert all(len(g) <= 20 for g in ids)
    with _controller(lm, ref, thresholds={p: math.inf for p in Pathology}) as ctrl:
        ids = ControlledGenerator(lm, ctrl, max_new_tokens=20).generate_ids(
            x, m, temperature=0.0, pad_token_id=TASK.pad
        )
    with torch.no_grad():
        plain = lm.generate(
            input_ids=x,
            attention_mask=m,
            max_new_tokens=20,
            do_sample=False,
            eos_token_id=TASK.eos,
            pad_token_id=TASK.pad,
        )
    for i, g in enumerate(ids):
        row = plain[i, width:].tolist()
        row = row[: row.index(TASK.eos) + 1] if TASK.eos in row else row
        assert g == row  # same kernel: the first round is one plain generate call on the same batch


def test_random_timing_is_reproducible(lm):
    ref, _, prompts, _ = _fitted_on_task(lm)
    sched_a = random_schedule([{"overrun": 1, "looping": 1}] * 2, 4, torch.Generator().manual_seed(5))
    sched_b = random_schedule([{"overrun": 1, "looping": 1}] * 2, 4, torch.Generator().manual_seed(5))
    assert sched_a == sched_b
    x = torch.tensor([p[:8] for p in prompts[:2]])
    outs, logs = [], []
    for _ in range(2):
        with _controller(lm, ref, timing="random", schedule=sched_a) as ctrl:
            out, log = ControlledGenerator(lm, ctrl, max_new_tokens=25).generate(x, temperature=1.0, seed=0)
        outs.append(out)
        logs.append(log)
    assert torch.equal(outs[0], outs[1])  # same kernel
    for row, sched in zip(logs[0], sched_a):
        # each scheduled looping step rolls back once (a rolled-back step index does not fire again)
        rb = [a for a in row["actions"] if a["action"] == "rollback"]
        assert all(a["to_step"] == a["step"] and a["step"] in sched[Pathology.LOOPING] for a in rb)
        assert len(rb) <= len(sched[Pathology.LOOPING])
    with pytest.raises(TypeError, match="generator"):
        random_schedule([{}], 3, 0)


def test_verify_cue_and_answer_regex_stop(lm):
    prompt = [BOS_ID, *TASK.encode("Q 1 + 2 ? ;")]
    script = TASK.encode("S 1 + 2 = 3 ; S 3 + 0 = 3 ; S 3 + 0 = 3 ; A 3 ;")
    out = _gen(
        lm,
        prompt,
        [_Script(script, len(prompt)), VerifyCue([TASK.check_marker], 2, [TASK.delimiter], TASK.eos)],
        max_new=20,
    )
    cot = out[len(prompt) :]
    steps = [cot[s:e] for s, e in SEG.split(cot)]
    assert steps[2][0] == TASK.check_marker and steps[0][0] != TASK.check_marker
    stop = AnswerRegexStop(TASK.decode, r"A \d+ ;", len(prompt))
    script = TASK.encode("S 1 + 2 = 3 ; A 3 ; S 3 + 0 = 3 ;")
    out = _gen(lm, prompt, [_Script(script, len(prompt))], stops=[stop])
    assert TASK.decode(out[len(prompt) :]) == "S 1 + 2 = 3 ; A 3 ;"


def test_controller_errors(lm):
    with pytest.raises(ValueError, match="state_model"):
        PathologyController(lm, LatentStateModel(n_states=2), SEG, TASK.extract_answer, TASK.eos)
    ref = _one_state_ref(lm)
    with pytest.raises(ValueError, match="timing"):
        _controller(lm, ref, timing="sometimes")
    with pytest.raises(ValueError, match="schedule"):
        _controller(lm, ref, timing="random")
    with pytest.raises(ValueError, match="pathology"):
        _controller(lm, ref, thresholds={"typo": 1.0})
    with pytest.raises(ValueError, match="temperature_factor"):
        _controller(lm, ref, temperature_factor=0.0)
    with pytest.raises(ValueError, match="every"):
        VerifyCue([5], 0, [TASK.delimiter], TASK.eos)
    with pytest.raises(ValueError, match="pattern"):
        AnswerRegexStop(TASK.decode, "", 3)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-1, 3), max_size=14),
    st.lists(st.floats(0.0, 4.0), min_size=14, max_size=14),
    st.booleans(),
)
def test_detectors_on_random_trajectories(states, unc, graph_aware):
    """Any trajectory: finite scores, onsets inside the trace, and fired => onset (except P3/P4 by run)."""
    ref = _ref()
    traj = Trajectory(
        tuple(states), tuple(unc[: len(states)]), tuple("1" if s == ANSWER else None for s in states)
    )
    for p, res in detect_all(traj, ref, graph_aware=graph_aware).items():
        assert math.isfinite(res.score), p
        if res.fired:
            assert res.onset is not None and 0 <= res.onset < len(states), (p, res)
        else:
            assert res.onset is None, (p, res)
    # P1 and P5 read only answers and states: the graph switch cannot change them
    a, b = detect_all(traj, ref, graph_aware=True), detect_all(traj, ref, graph_aware=False)
    for p in (Pathology.PREMATURE_COMMITMENT, Pathology.OVERRUN, Pathology.REVERSAL):
        assert a[p] == b[p]


def test_controlled_generator_wraps_generate(lm):
    ref = _one_state_ref(lm)
    prompt = torch.tensor([[BOS_ID, *TASK.encode("Q 1 + 2 ? ;")]])
    with _controller(lm, ref) as ctrl:
        gen = ControlledGenerator(lm, ctrl, max_new_tokens=12)
        a, log = gen.generate(prompt, temperature=1.0, seed=3)
        b, _ = gen.generate(prompt, temperature=1.0, seed=3)
    assert torch.equal(a, b) and torch.equal(a[:, : prompt.shape[1]], prompt)  # same kernel
    assert len(log) == 1
    assert set(log[0]) == {"trajectory", "interventions", "actions", "rollbacks", "discarded_tokens"}
    with pytest.raises(ValueError, match="input_ids"):
        gen.generate(prompt[0])
    with pytest.raises(TypeError, match="controller"):
        ControlledGenerator(lm, object())

"""Tests of neurips26.agents.cot_pathology.parallel: 2-worker evaluation equals the single-process one.

Worker processes use the ``fork`` start method on purpose: the tiny LM, the fitted reference model
and the closures below reach the workers through the fork (no pickling, no re-import of torch), which
keeps each pool start in milliseconds. ``spawn`` is exercised on its error path only.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.agents.cot_pathology import (
    LatentStateModel,
    Pathology,
    StepSegmenter,
    SurgeryItem,
    SyntheticArithmetic,
    Trajectory,
    detect_all,
    detector_inputs,
    evaluate_detectors,
    item_rng,
    parallel_detect_all,
    parallel_evaluate_detectors,
    parallel_map,
    surgery_set,
)
from neurips26.common.models import BOS_ID

FORK = "fork"
TASK = SyntheticArithmetic(max_value=9, min_operands=3, max_operands=5)
SEG = StepSegmenter([TASK.delimiter])


class _TinyLM(torch.nn.Module):
    """A two-layer causal torch LM (prefix-mean mixing) with the interface ``step_features`` reads (``config``,
    ``hidden_states``, ``logits``); it avoids importing transformers so the file stays fast."""

    def __init__(self, vocab: int, hidden: int = 16):
        super().__init__()
        torch.manual_seed(0)
        self.config = SimpleNamespace(num_hidden_layers=2, hidden_size=hidden)
        self.emb = torch.nn.Embedding(vocab, hidden)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(hidden, hidden) for _ in range(2)])
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, input_ids, output_hidden_states=True):
        h = self.emb(input_ids)
        hs = [h]
        for layer in self.layers:
            h = torch.tanh(layer(h) + h.cumsum(1) / torch.arange(1, h.shape[1] + 1).view(1, -1, 1))
            hs.append(h)
        return SimpleNamespace(hidden_states=tuple(hs), logits=self.head(h))


@pytest.fixture(scope="module")
def bed():
    lm = _TinyLM(TASK.vocab_size).eval()
    rng = random.Random(0)
    probs = [TASK.sample(rng) for _ in range(12)]
    ref = LatentStateModel(n_states=3, seed=0)
    ref.fit(
        lm,
        [[BOS_ID, *TASK.prompt(p)] for p in probs],
        [[t for s in TASK.clean_steps(p, rng, 0.5) for t in s] for p in probs],
        SEG,
        TASK.extract_answer,
    )

    def encoder(prompt, cot):
        return ref.encode(lm, prompt, cot, SEG, TASK.extract_answer)

    eval_probs = [TASK.sample(rng) for _ in range(6)]
    items = {
        w: surgery_set(TASK, eval_probs, 3, encoder=encoder, workers=w, start_method=FORK) for w in (1, 2)
    }
    return {"ref": ref, "probs": eval_probs, "items": items}


def test_surgery_and_encoding_two_workers_equal_single_process(bed):
    one, two = bed["items"][1], bed["items"][2]
    assert len(one) == len(two) == len(bed["probs"])
    assert all(isinstance(x, SurgeryItem) for x in two)
    assert one == two  # ids, onsets and trajectories (states, float uncertainties) identical, in order
    assert [x.index for x in two] == list(range(len(two)))
    # the set is not degenerate: all six pathologies, varied onsets, encoded states and uncertainties
    assert [p for p, _, _ in two[0].injected] == list(Pathology)
    assert len({onset for x in two for _, _, onset in x.injected}) > 2
    assert all(len(t) > 0 and all(u > 0 for u in t.uncertainty) for x in two for t in x.injected_trajs)
    assert len({s for x in two for t in x.injected_trajs for s in t.states}) > 2


def test_parallel_detector_evaluation_equals_sequential(bed):
    clean, injected = detector_inputs(bed["items"][2])
    assert len(clean) == 6 and set(injected) == set(Pathology)
    for graph_aware in (True, False):
        seq = evaluate_detectors(clean, injected, bed["ref"], graph_aware)
        par = parallel_evaluate_detectors(
            clean, injected, bed["ref"], graph_aware, workers=2, start_method=FORK
        )
        assert repr(par) == repr(seq)  # repr: exact floats, NaN == NaN, same key order
        assert list(par["per_pathology"]) == [p.value for p in Pathology]
    aurocs = [row["auroc"] for row in seq["per_pathology"].values()]
    assert all(0.0 <= a <= 1.0 for a in aurocs) and len(set(aurocs)) > 1  # both sides present, varied
    # a subset of pathologies, keys given as strings
    sub = {"looping": injected[Pathology.LOOPING], "reversal": injected[Pathology.REVERSAL]}
    assert repr(parallel_evaluate_detectors(clean, sub, bed["ref"], workers=2, start_method=FORK)) == repr(
        evaluate_detectors(clean, sub, bed["ref"])
    )


def test_parallel_detect_all_equals_loop_in_order(bed):
    clean, injected = detector_inputs(bed["items"][1])
    trajs = clean + [t for rows in injected.values() for t, _ in rows]
    seq = [detect_all(t, bed["ref"]) for t in trajs]
    par = parallel_detect_all(trajs, bed["ref"], workers=2, start_method=FORK)
    assert par == seq and len(par) == len(trajs)
    assert any(r.fired for d in par for r in d.values()) and not all(r.fired for d in par for r in d.values())


@settings(max_examples=5, deadline=None)
@given(st.integers(0, 2**20), st.integers(1, 9), st.integers(2, 3))
def test_per_item_seeding_makes_worker_count_irrelevant(seed, n, workers):
    rng = random.Random(seed)
    probs = [TASK.sample(rng) for _ in range(n)]
    one = surgery_set(TASK, probs, seed, workers=1)
    many = surgery_set(TASK, probs, seed, workers=workers, start_method=FORK)
    assert one == many
    draws = parallel_map(
        lambda x, r: (x, r.random()), list(range(n)), seed=seed, workers=workers, start_method=FORK
    )
    assert draws == [(i, item_rng(seed, i).random()) for i in range(n)]


def test_item_rng_and_worker_threads():
    assert item_rng(1, 2).random() == item_rng(1, 2).random()
    assert len({item_rng(s, i).random() for s in range(3) for i in range(3)}) == 9
    before = torch.get_num_threads()
    assert parallel_map(lambda _: torch.get_num_threads(), [0] * 4, workers=2, start_method=FORK) == [1] * 4
    assert (
        parallel_map(lambda _: torch.get_num_threads(), [0] * 4, workers=2, threads=2, start_method=FORK)
        == [2] * 4
    )
    assert parallel_map(lambda _: torch.get_num_threads(), [0, 0], workers=1, threads=2) == [2, 2]
    assert torch.get_num_threads() == before


def test_bad_inputs_raise_clear_errors(bed):
    with pytest.raises(ValueError, match="workers"):
        parallel_map(abs, [1, 2], workers=0)
    with pytest.raises(ValueError, match="items must not be empty"):
        parallel_map(abs, [], workers=2)
    with pytest.raises(TypeError, match="fn must be callable"):
        parallel_map(3, [1, 2])
    with pytest.raises(ValueError, match="start_method"):
        parallel_map(abs, [1, 2], start_method="threads")
    with pytest.raises(TypeError, match="picklable"):
        parallel_map(lambda x: x, [1, 2], workers=2, start_method="spawn")
    with pytest.raises(ValueError, match="seed"):
        parallel_map(abs, [1, 2], seed=-1)
    with pytest.raises(ValueError, match="problems must not be empty"):
        surgery_set(TASK, [], 0)
    with pytest.raises(TypeError, match=r"problems\[0\]"):
        surgery_set(TASK, ["Q 1 + 2 ?"], 0)
    with pytest.raises(ValueError, match="pathologies must not be empty"):
        surgery_set(TASK, bed["probs"], 0, pathologies=[])
    with pytest.raises(ValueError, match="pathology must be one of"):
        surgery_set(TASK, bed["probs"], 0, pathologies=["hallucination"])
    with pytest.raises(TypeError, match="encoder"):
        surgery_set(TASK, bed["probs"], 0, encoder="lm")
    with pytest.raises(ValueError, match="has no trajectories"):
        detector_inputs(surgery_set(TASK, bed["probs"][:1], 0, workers=1))
    with pytest.raises(ValueError, match="trajectories must not be empty"):
        parallel_detect_all([], bed["ref"])
    with pytest.raises(TypeError, match=r"trajectories\[0\]"):
        parallel_detect_all([[0, 1]], bed["ref"])
    with pytest.raises(ValueError, match="outside the reference"):
        parallel_detect_all([Trajectory.from_states([0, 7])], bed["ref"], workers=2, start_method=FORK)
    clean, injected = detector_inputs(bed["items"][1])
    with pytest.raises(ValueError, match="clean must hold"):
        parallel_evaluate_detectors([], injected, bed["ref"])
    with pytest.raises(ValueError, match=r"injected\[looping\] is empty"):
        parallel_evaluate_detectors(clean, {"looping": []}, bed["ref"])

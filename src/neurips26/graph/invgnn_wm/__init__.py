r"""InvGNN-WM: a trigger-free GNN ownership watermark read from the model's perception of algebraic connectivity.

Paper
-----
*InvGNN-WM: trigger-free GNN watermarking via perceived algebraic connectivity*
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

:math:`a(K_n) = 1`, :math:`a(C_n) = (1 - \cos(2\pi/n))(n - 1)/n` and :math:`a(G) = 0` iff :math:`G` is
disconnected.

Signature: reference ``c`` = median of ``a(G_k)`` (midpoint of the two middle values), optional
secret key bits ``kappa``; target ``t_k = a_k`` (``kappa_k = 0``) or its reflection ``2c - a_k``
(``kappa_k = 1``); owner bits

.. math::
    b_k = 1[t_k > c] = 1[a_k > c] \oplus \kappa_k .

Head (inferred readout): ``h_k = h_psi(R(f_theta(G_k)))`` with ``R`` the mean (and std) of the node
logits over the carrier's nodes (node task) or the graph logit vector (graph task), and
``h_psi = Linear(R, 16) - ReLU - Linear(16, 1)``.

Embedding loss (added to the task loss every step):

.. math::
    L_{wm} = \lambda_{wm}\Big[\tfrac1K \sum_k (h_k - t_k)^2
             + \mu \tfrac1K \sum_k \max(0,\, m - s_k (h_k - c))\Big], \quad s_k = 2 b_k - 1.

Decoy term (our addition, see :meth:`InvGNNWatermark.set_reference_models`): with owner-trained
non-watermarked reference models :math:`f_r` and :math:`\nu` = ``null_weight``, the loss gains

.. math::
    \lambda_{wm} \nu \tfrac1K \sum_k \max\big(0,\, m - s'_k (h_\psi(R(f_r(G_k))) - c)\big)

with a secret decoy sign string :math:`s'` that agrees with :math:`s` on exactly :math:`\lfloor K/2 \rfloor`
carriers. Without it the jointly trained head can fit the bits from the task's natural
output variation, which every model trained on the same task shares, and independent models pass
verification (observed on a small task); with it they match at chance.

Decoding and verification:

.. math::
    \hat b_k = 1[h_k > c], \qquad M = \sum_k 1[\hat b_k = b_k], \qquad
    \tau(\alpha) = \min\{\tau : P[\mathrm{Bin}(K, 1/2) \ge \tau] \le \alpha\},

the threshold optionally raised to exceed the
``(1 - alpha)`` quantile of ``M`` over independently trained null models; own iff ``M >= tau``.

The paper's theory (imperceptibility/robustness guarantees, NP-completeness of exact removal under
monotone decoders) is documentation only and not tested here.

Also in this package: the attack suite (:func:`prune_global`, :func:`finetune`, :func:`fake_quantize`,
:func:`distill`), the backdoor-trigger baseline :class:`BackdoorWatermark` (Xu et al., arXiv
2110.11024 style), small PyG models (:func:`make_gnn`) and a training loop (:func:`fit`).
Models are ordinary PyG modules taking ``(x, edge_index)`` (node task) or ``(x, edge_index, batch)``
(graph task); the watermark never changes their signature.

Shapes
------
- :func:`normalized_algebraic_connectivity`: ``edge_index [2, E]``, ``num_nodes`` -> float.
- node-task model / query: ``(x [N, F], edge_index [2, E]) -> [N, C]``; graph task:
  ``(x [N, F], edge_index [2, E], batch [N]) -> [B, C]``.
- :class:`CarrierSet`: ``K`` carriers ``Data(x [n_k, F], edge_index [2, E_k])``, invariants ``[K]``, bits ``[K]``.

Modules
-------
- :mod:`.invariant`: :func:`normalized_algebraic_connectivity`, :data:`NORMALIZATIONS`.
- :mod:`.verify`: :func:`binomial_tail`, :func:`binomial_threshold`, :class:`Verification`.
- :mod:`.carriers`: :class:`GaussianFeatureSampler`, :class:`RowFeatureSampler`, :class:`CarrierSet`,
  :data:`FAMILIES`.
- :mod:`.watermark`: :class:`InvariantHead`, :class:`WatermarkKey`, :func:`node_query`, :func:`graph_query`,
  :class:`InvGNNWatermark`.
- :mod:`.training`: :func:`make_gnn`, :func:`fit`, :func:`accuracy`.
- :mod:`.attacks`: :func:`prune_global`, :func:`finetune`, :func:`fake_quantize`, :func:`distill`,
  :func:`weight_sparsity`.
- :mod:`.backdoor`: :class:`BackdoorWatermark`.
"""

from neurips26.graph.invgnn_wm.attacks import distill, fake_quantize, finetune, prune_global, weight_sparsity
from neurips26.graph.invgnn_wm.backdoor import BackdoorWatermark
from neurips26.graph.invgnn_wm.carriers import FAMILIES, CarrierSet, GaussianFeatureSampler, RowFeatureSampler
from neurips26.graph.invgnn_wm.invariant import NORMALIZATIONS, normalized_algebraic_connectivity
from neurips26.graph.invgnn_wm.training import accuracy, fit, make_gnn
from neurips26.graph.invgnn_wm.verify import Verification, binomial_tail, binomial_threshold
from neurips26.graph.invgnn_wm.watermark import (
    READOUTS,
    TASKS,
    InvariantHead,
    InvGNNWatermark,
    WatermarkKey,
    graph_query,
    node_query,
)

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
    "TASKS",
    "READOUTS",
]

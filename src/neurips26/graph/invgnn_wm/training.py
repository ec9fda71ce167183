r"""The task models and training loop of the watermark, the attacks and the claim.

They are the shared GNN helpers of :mod:`neurips26.common.gnn` (also used by
:mod:`neurips26.graph.sgnnbench`); this module keeps their import path inside the package.

.. math::
    L = \mathrm{CE}(f_\theta(x, A)_{\mathrm{train}}, y_{\mathrm{train}}) \; [+ L_{wm}]

Shapes
------
- node task: ``(x [N, F], edge_index [2, E]) -> [N, C]``;
- graph task: ``(x [N, F], edge_index [2, E], batch [N]) -> [B, C]``.
"""

from neurips26.common.gnn import accuracy, fit, make_gnn

__all__ = ["make_gnn", "fit", "accuracy"]

r"""aNCA: neural cellular automata whose perception is a deformable convolution (each cell learns where to look).

Paper
-----
*Adaptive Neural Cellular Automata (aNCA)* (seed file ``004_01f475bc147a144d.txt``, paragraph 18,
abstract beginning "Many modern learning approaches are still struggling with spatial reasoning
tasks"). The authors replace the fixed 3x3 neighbourhood of a neural cellular automaton by a deformable
convolution "to dynamically adapt the perceptive field and iteratively reason over 2D spatial relations
on grid-like data", and report state-of-the-art, comprehensible results with high generalisation on
image-based Sudoku and maze shortest path. No public version or numbers were found; the details below
follow the project spec (``shared/specs/anca.md``), Growing NCA (Distill 2020) and DCNv1/v2
(arXiv 1703.06211, 1811.11168).

Math
----
State :math:`S_t \in \mathbb{R}^{B \times C \times H \times W}`, :math:`C = C_{in} + C_h + C_{out}`.
Per step, every cell predicts offsets :math:`O_t` (one (y, x) pair per kernel point and offset group)
and modulation weights :math:`m_t` (an attention over its sampling points) from its 3x3 neighbourhood,
perceives the state at the displaced points, and applies the shared update:

.. math::

    (O_t, \tilde M_t) &= \mathrm{Conv}_{3\times3}(S_t), \qquad m_t = 2\,\sigma(\tilde M_t),\\
    P_t(p) &= \sum_{k=1}^{K} W_k\, m_{t,k}(p)\, S_t\big(p + p_k + O_{t,k}(p)\big)
              \quad \text{(bilinear, zero outside)},\\
    S_{t+1} &= \mathrm{clip}\big(S_t + f_t \odot \mathrm{MLP}_{1\times1}([P_t, S_t])\big),
    \qquad S_{t+1}[:C_{in}] = X,

with firing mask :math:`f_t \sim \mathrm{Bernoulli}(0.5)` per cell in training. The offset network and
the MLP's last layer start at zero, so the untrained aNCA *is* the regular-convolution NCA (the
direct ablation) and any difference after training comes from learned offsets.

Components
----------
:class:`DeformablePerception`, :class:`NCAPerception`, :class:`AdaptiveNCA`; the deformable convolution
through torchvision (:func:`deform_conv2d`, ``backend="torchvision"``) or the pure-PyTorch
``grid_sample`` reference (:func:`deform_conv2d_reference`), tested equal in values and gradients;
the puzzle generators and metrics of :mod:`neurips26.nn.anca.puzzles`.

Shapes
------
``AdaptiveNCA(inputs (B, C_in, H, W), steps)`` -> logits ``(B, C_out, H, W)``; offsets
``(B, 2 G K, H, W)`` (channel ``2k`` = row/y, ``2k + 1`` = column/x of kernel point ``k`` =
``i * k_w + j``, as ``torchvision.ops.deform_conv2d``); modulation ``(B, G K, H, W)``. Sudoku inputs
``(B, 10, 9, 9)`` (one-hot, 0 = blank) -> 9 logits per cell; maze inputs ``(B, 3, S, S)`` (wall, start,
goal) -> 2 logits per pixel.
"""

from neurips26.nn.anca.deform import deform_conv2d, deform_conv2d_reference, torchvision_available
from neurips26.nn.anca.model import (
    PERCEPTIONS,
    AdaptiveNCA,
    DeformablePerception,
    NCAPerception,
    matched_update_hidden,
    offset_magnitude,
)
from neurips26.nn.anca.puzzles import (
    MazeDataset,
    SudokuDataset,
    bfs_shortest_path,
    make_maze,
    maze_exact_match,
    path_f1,
    sudoku_full_grid,
    sudoku_is_valid,
    sudoku_solve_rate,
)

__all__ = [
    "PERCEPTIONS",
    "AdaptiveNCA",
    "DeformablePerception",
    "MazeDataset",
    "NCAPerception",
    "SudokuDataset",
    "bfs_shortest_path",
    "deform_conv2d",
    "deform_conv2d_reference",
    "make_maze",
    "matched_update_hidden",
    "maze_exact_match",
    "offset_magnitude",
    "path_f1",
    "sudoku_full_grid",
    "sudoku_is_valid",
    "sudoku_solve_rate",
    "torchvision_available",
]

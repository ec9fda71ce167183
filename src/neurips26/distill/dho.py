r"""DHO: dual-head optimisation for semi-supervised distillation from a zero/few-shot teacher.

Paper
-----
"Simple Semi-supervised Knowledge Distillation from Vision-Language Models via Dual-Head
Optimization" (DHO), arXiv 2505.07675; seed file ``000_f8b4140a0e3b5d84.txt``, abstract beginning
"Semi-supervised learning (SSL) has emerged as". Reference code: github.com/erjui/DHO
(``train_others.py``: lambda = 0.5, T = 2, the alpha/beta grids below).
Public: the paper and the reference code, which fix both objectives and the post-hoc head mixing; the
backbones and data of the claim check are ours.

Math
----
Single-head knowledge distillation asks one linear head to fit both the labels and the teacher's
soft labels, so the two gradients reaching the shared feature extractor can conflict. DHO gives the
student two linear heads on the same features :math:`z = g_\theta(x) \in \mathbb{R}^d`:
:math:`h_{CE}(z) = W_c z + b_c` trained only with cross-entropy on labelled data and
:math:`h_{KD}(z) = W_k z + b_k` trained only with distillation on labelled + unlabelled data.

.. math::

    \mathcal{L}_{CE} = \mathrm{CE}(h_{CE}(g(x_l)), y), \qquad
    \mathcal{L}_{KD} = T^2 \sum_{x \in \{x_l, x_u\}}
        \mathrm{KL}\big(\sigma(t(x)/T) \,\|\, \sigma(h_{KD}(g(x))/T)\big),

    \mathcal{L} = \lambda\,\mathcal{L}_{CE} + (1-\lambda)\,\mathcal{L}_{KD}
    \quad(\text{KL with ``batchmean`` reduction}),

and at inference the heads are mixed with weights tuned post hoc on validation data:

.. math::

    p(y\mid x) = \alpha\,\sigma(h_{CE}(z)) + (1-\alpha)\,\sigma(h_{KD}(z)/\beta).

The single-head KD baseline is the same model with the two heads tied (``tie_heads=True``), so the
baseline shares the code path, optimiser and data with the method; :class:`SingleHeadKDLoss` is the
same objective on plain logits. The CE-only baseline is ``DHOLoss(lam=1.0)``.

Shapes
------
- :class:`DualHeadClassifier`: ``x [B, ...]`` (whatever the backbone accepts) -> :class:`DualHeadOutput`
  with ``ce_logits``, ``kd_logits`` ``[B, K]`` and ``features`` ``[B, d]``.
- :class:`DHOLoss`: :class:`DualHeadOutput` for the labelled and unlabelled batches, ``labels [B_l]``,
  ``teacher_logits_labeled [B_l, K]``, ``teacher_logits_unlabeled [B_u, K]`` -> dict of scalars.
- :class:`SingleHeadKDLoss`: the same with plain logits ``[B_l, K]`` and ``[B_u, K]``.
- :func:`mix_heads`: ``ce_logits``, ``kd_logits`` ``[B, K]`` -> probabilities ``[B, K]``;
  :func:`kd_kl_loss`: ``student_logits``, ``teacher_logits`` ``[B, K]`` -> scalar.
- :class:`CachedTeacher`: ``x [B, ...]``, ``index [B]`` -> logits ``[B, K]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from neurips26.common.checks import check_float, check_int, check_probability

__all__ = [
    "ALPHA_GRID",
    "BETA_GRID",
    "CachedTeacher",
    "DHOLoss",
    "DualHeadClassifier",
    "DualHeadOutput",
    "SingleHeadKDLoss",
    "gradient_conflict",
    "kd_kl_loss",
    "mix_heads",
    "train_dho",
    "tune_head_mixing",
]

ALPHA_GRID: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(21))
"""Post-hoc alpha grid of the reference code: 0, 0.05, ..., 1."""
BETA_GRID: tuple[float, ...] = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 4.0)
"""Post-hoc beta (KD-head temperature) grid of the reference code."""


def _check_alpha_beta(alpha: Any, beta: Any) -> tuple[float, float]:
    alpha = check_probability("alpha", alpha)
    beta = check_float("beta", beta, 0.0, low_open=True)
    return alpha, beta


def _check_logits(name: str, logits: Any, num_classes: int | None = None) -> Tensor:
    if not isinstance(logits, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (B, K), got {type(logits).__name__}")
    if logits.is_meta:
        raise ValueError(f"{name} is a meta tensor (no data); pass a materialised tensor")
    if not logits.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {logits.dtype}")
    if logits.dim() != 2 or logits.shape[0] == 0:
        raise ValueError(f"{name} must have shape (B >= 1, K), got {tuple(logits.shape)}")
    if num_classes is not None and logits.shape[1] != num_classes:
        raise ValueError(f"{name} must have K = {num_classes} classes, got shape {tuple(logits.shape)}")
    if not bool(torch.isfinite(logits).all()):
        raise ValueError(f"{name} contains NaN or inf")
    return logits


def mix_heads(ce_logits: Tensor, kd_logits: Tensor, alpha: float = 0.5, beta: float = 1.0) -> Tensor:
    """Blend the two heads' class probabilities (DHO inference, step 6).

    .. math:: p = \\alpha\\,\\mathrm{softmax}(z_{CE}) + (1-\\alpha)\\,\\mathrm{softmax}(z_{KD}/\\beta)

    Parameters
    ----------
    ce_logits, kd_logits : Tensor
        Logits of the CE and KD heads.
    alpha : float
        Weight of the CE head, in [0, 1].
    beta : float
        Temperature of the KD head, > 0.

    Returns
    -------
    Tensor
        Probabilities; every row is non-negative and sums to 1.

    Shapes
    ------
    ``ce_logits``, ``kd_logits``: (B, K) -> (B, K).
    """
    alpha, beta = _check_alpha_beta(alpha, beta)
    _check_logits("ce_logits", ce_logits)
    _check_logits("kd_logits", kd_logits, ce_logits.shape[1])
    if ce_logits.shape != kd_logits.shape:
        raise ValueError(
            f"ce_logits and kd_logits must share one shape, got {tuple(ce_logits.shape)} and {tuple(kd_logits.shape)}"
        )
    return alpha * ce_logits.softmax(-1) + (1.0 - alpha) * (kd_logits / beta).softmax(-1)


class DualHeadOutput(NamedTuple):
    """Output of :class:`DualHeadClassifier`: the two heads' logits (B, K) and the features (B, d)."""

    ce_logits: Tensor
    kd_logits: Tensor
    features: Tensor


class DualHeadClassifier(nn.Module):
    """A feature extractor with two linear heads: one for labels (CE), one for teacher soft labels (KD).

    Parameters
    ----------
    backbone : nn.Module
        Maps inputs to features of shape (B, feature_dim).
    feature_dim : int
        ``d``, the width of the backbone's output.
    num_classes : int
        ``K``.
    tie_heads : bool, default False
        Use one head for both roles. This is the single-head KD baseline in the same code path
        (``kd_head is ce_head``).

    Notes
    -----
    The head-mixing weights ``alpha`` and ``beta`` are buffers, so they travel with ``state_dict``.
    Both heads are used every step when unlabelled data is present, so DDP needs no
    ``find_unused_parameters``.

    Shapes
    ------
    ``x``: whatever the backbone accepts, batch first -> :class:`DualHeadOutput` with (B, K), (B, K), (B, d).
    """

    def __init__(self, backbone: nn.Module, feature_dim: int, num_classes: int, tie_heads: bool = False):
        super().__init__()
        if not isinstance(backbone, nn.Module):
            raise TypeError(f"backbone must be an nn.Module, got {type(backbone).__name__}")
        check_int("feature_dim", feature_dim, low=1)
        check_int("num_classes", num_classes, low=2)
        self.backbone = backbone
        self.feature_dim = feature_dim
        self.num_classes = num_classes
        self.tie_heads = bool(tie_heads)
        self.ce_head = nn.Linear(feature_dim, num_classes)
        self.kd_head = self.ce_head if self.tie_heads else nn.Linear(feature_dim, num_classes)
        self.register_buffer("alpha", torch.tensor(0.5))
        self.register_buffer("beta", torch.tensor(1.0))

    def forward(self, x: Tensor) -> DualHeadOutput:
        z = self.backbone(x)
        if not isinstance(z, Tensor) or z.dim() != 2 or z.shape[1] != self.feature_dim:
            shape = tuple(z.shape) if isinstance(z, Tensor) else type(z).__name__
            raise ValueError(
                f"backbone must return features of shape (B, feature_dim={self.feature_dim}) for x, got {shape}"
            )
        if not bool(torch.isfinite(z).all()):
            raise ValueError("the backbone returned NaN/inf features for x")
        return DualHeadOutput(self.ce_head(z), self.kd_head(z), z)

    def set_mixing(self, alpha: float, beta: float) -> None:
        """Store the inference mixing weights (alpha in [0, 1], beta > 0) in the buffers."""
        alpha, beta = _check_alpha_beta(alpha, beta)
        self.alpha.fill_(alpha)
        self.beta.fill_(beta)

    @torch.no_grad()
    def predict_proba(self, x: Tensor, alpha: float | None = None, beta: float | None = None) -> Tensor:
        """Mixed class probabilities (B, K); defaults to the stored ``alpha``/``beta``."""
        out = self(x)
        a = float(self.alpha) if alpha is None else alpha
        b = float(self.beta) if beta is None else beta
        return mix_heads(out.ce_logits, out.kd_logits, a, b)


def kd_kl_loss(student_logits: Tensor, teacher_logits: Tensor, temperature: float = 2.0) -> Tensor:
    """Hinton distillation term :math:`T^2\\,\\mathrm{KL}(\\sigma(t/T)\\|\\sigma(s/T))`, ``batchmean``.

    Parameters
    ----------
    student_logits, teacher_logits : Tensor
        (B, K) logits; the teacher is detached.
    temperature : float
        ``T`` > 0.

    Returns
    -------
    Tensor
        Scalar; 0 when the logits are equal (up to a per-row constant), >= 0 otherwise.
    """
    temperature = check_float("temperature", temperature, 0.0, low_open=True)
    _check_logits("student_logits", student_logits)
    _check_logits("teacher_logits", teacher_logits, student_logits.shape[1])
    if teacher_logits.shape[0] != student_logits.shape[0]:
        raise ValueError(
            f"teacher_logits must have B = {student_logits.shape[0]} rows, got {teacher_logits.shape[0]}"
        )
    log_s = F.log_softmax(student_logits / temperature, dim=-1)
    log_t = F.log_softmax(teacher_logits.detach() / temperature, dim=-1)
    return F.kl_div(log_s, log_t, reduction="batchmean", log_target=True) * temperature**2


def _dual_objective(
    ce_logits_l: Tensor,
    kd_logits_l: Tensor,
    labels: Tensor,
    kd_logits_u: Tensor | None,
    teacher_l: Tensor,
    teacher_u: Tensor | None,
    lam: float,
    temperature: float,
) -> dict[str, Tensor]:
    k = ce_logits_l.shape[1]
    _check_logits("teacher_logits_labeled", teacher_l, k)
    if not isinstance(labels, Tensor) or labels.dim() != 1 or labels.dtype not in (torch.int64, torch.int32):
        raise ValueError("labels must be an integer tensor of shape (B,)")
    if labels.is_meta or labels.device != ce_logits_l.device:
        raise ValueError(
            f"labels must hold data on the logits' device {ce_logits_l.device}, got {labels.device}"
        )
    if teacher_l.device != ce_logits_l.device:
        raise ValueError("teacher_logits_labeled must be on the logits' device")
    if labels.shape[0] != ce_logits_l.shape[0]:
        raise ValueError(f"labels must have length B = {ce_logits_l.shape[0]}, got {labels.shape[0]}")
    ce = F.cross_entropy(ce_logits_l, labels.long())
    kd_l = kd_kl_loss(kd_logits_l, teacher_l, temperature)
    if kd_logits_u is not None:
        if teacher_u is None:
            raise ValueError("teacher_logits_unlabeled is required when an unlabelled batch is given")
        _check_logits("teacher_logits_unlabeled", teacher_u, k)
        kd_u = kd_kl_loss(kd_logits_u, teacher_u, temperature)
    else:
        kd_u = ce.new_zeros(())
    loss = lam * ce + (1.0 - lam) * (kd_l + kd_u)
    return {"loss": loss, "ce": ce, "kd_labeled": kd_l, "kd_unlabeled": kd_u}


class _KDObjective(nn.Module):
    """The parameters that :class:`DHOLoss` and its baseline :class:`SingleHeadKDLoss` share:
    ``lam`` in [0, 1] and ``temperature`` > 0 of :func:`_dual_objective`."""

    def __init__(self, lam: float = 0.5, temperature: float = 2.0):
        super().__init__()
        self.lam = check_probability("lam", lam)
        self.temperature = check_float("temperature", temperature, 0.0, low_open=True)


class DHOLoss(_KDObjective):
    """The DHO training objective on :class:`DualHeadOutput` (CE on the CE head, KD on the KD head).

    Parameters
    ----------
    lam : float, default 0.5
        ``lambda`` in [0, 1]; 1 trains the CE head only (the CE-only baseline), 0 the KD head only.
    temperature : float, default 2.0
        Distillation temperature ``T`` > 0.

    Returns (``forward``)
    ---------------------
    dict with ``"loss"``, ``"ce"``, ``"kd_labeled"``, ``"kd_unlabeled"`` (scalars).

    Shapes
    ------
    ``out_labeled``: :class:`DualHeadOutput` with ``[B_l, K]`` logits; ``labels``: ``[B_l]``;
    ``out_unlabeled``: ``[B_u, K]`` logits or ``None``; ``teacher_logits_labeled``: ``[B_l, K]``;
    ``teacher_logits_unlabeled``: ``[B_u, K]`` -> scalars.
    """

    def forward(
        self,
        out_labeled: DualHeadOutput,
        labels: Tensor,
        out_unlabeled: DualHeadOutput | None,
        teacher_logits_labeled: Tensor,
        teacher_logits_unlabeled: Tensor | None = None,
    ) -> dict[str, Tensor]:
        if not isinstance(out_labeled, DualHeadOutput):
            raise TypeError(f"out_labeled must be a DualHeadOutput, got {type(out_labeled).__name__}")
        if out_unlabeled is not None and not isinstance(out_unlabeled, DualHeadOutput):
            raise TypeError(
                f"out_unlabeled must be a DualHeadOutput or None, got {type(out_unlabeled).__name__}"
            )
        _check_logits("out_labeled.ce_logits", out_labeled.ce_logits)
        _check_logits("out_labeled.kd_logits", out_labeled.kd_logits, out_labeled.ce_logits.shape[1])
        if out_labeled.kd_logits.shape != out_labeled.ce_logits.shape:
            raise ValueError(
                f"out_labeled.kd_logits {tuple(out_labeled.kd_logits.shape)} must match out_labeled.ce_logits "
                f"{tuple(out_labeled.ce_logits.shape)}"
            )
        if out_labeled.kd_logits.device != out_labeled.ce_logits.device:
            raise ValueError("out_labeled.kd_logits and out_labeled.ce_logits must share a device")
        return _dual_objective(
            out_labeled.ce_logits,
            out_labeled.kd_logits,
            labels,
            None if out_unlabeled is None else out_unlabeled.kd_logits,
            teacher_logits_labeled,
            teacher_logits_unlabeled,
            self.lam,
            self.temperature,
        )


class SingleHeadKDLoss(_KDObjective):
    """Baseline: CE and KD on one head, :math:`\\lambda\\,\\mathrm{CE}(s_l, y) + (1-\\lambda)T^2[\\mathrm{KL}_l + \\mathrm{KL}_u]`.

    Same parameters and return dict as :class:`DHOLoss`, on plain logits (B, K).

    Shapes
    ------
    ``logits_labeled``: ``[B_l, K]``; ``labels``: ``[B_l]``; ``logits_unlabeled``: ``[B_u, K]`` or
    ``None``; ``teacher_logits_labeled``: ``[B_l, K]``; ``teacher_logits_unlabeled``: ``[B_u, K]``
    -> scalars.
    """

    def forward(
        self,
        logits_labeled: Tensor,
        labels: Tensor,
        logits_unlabeled: Tensor | None,
        teacher_logits_labeled: Tensor,
        teacher_logits_unlabeled: Tensor | None = None,
    ) -> dict[str, Tensor]:
        _check_logits("logits_labeled", logits_labeled)
        return _dual_objective(
            logits_labeled,
            logits_labeled,
            labels,
            logits_unlabeled,
            teacher_logits_labeled,
            teacher_logits_unlabeled,
            self.lam,
            self.temperature,
        )


@torch.no_grad()
def tune_head_mixing(
    ce_logits: Tensor,
    kd_logits: Tensor,
    labels: Tensor,
    alphas: Sequence[float] = ALPHA_GRID,
    betas: Sequence[float] = BETA_GRID,
) -> tuple[float, float, float]:
    """Grid-search (alpha, beta) for the best accuracy of :func:`mix_heads` on validation logits.

    Ties are broken towards the first grid point (alphas outer, betas inner), so the result is
    deterministic.

    Returns
    -------
    (alpha, beta, accuracy)

    Shapes
    ------
    ``ce_logits``, ``kd_logits``: (N, K); ``labels``: (N,).
    """
    _check_logits("ce_logits", ce_logits)
    _check_logits("kd_logits", kd_logits, ce_logits.shape[1])
    if labels.shape != (ce_logits.shape[0],):
        raise ValueError(f"labels must have shape ({ce_logits.shape[0]},), got {tuple(labels.shape)}")
    if not alphas or not betas:
        raise ValueError("alphas and betas must be non-empty")
    best = (float(alphas[0]), float(betas[0]), -1.0)
    for a in alphas:
        for b in betas:
            acc = (mix_heads(ce_logits, kd_logits, a, b).argmax(-1) == labels).float().mean().item()
            if acc > best[2]:
                best = (float(a), float(b), acc)
    return best


def gradient_conflict(losses: Mapping[str, Tensor], params: Iterable[nn.Parameter]) -> float:
    """Cosine between the gradients of two losses w.r.t. shared parameters (the diagnostic of step 8).

    .. math:: c = \\cos(\\nabla_\\theta \\mathcal{L}_1, \\nabla_\\theta \\mathcal{L}_2)

    Parameters that a loss does not reach count as zero gradient for that loss.

    Parameters
    ----------
    losses : mapping
        Exactly two scalar losses, e.g. ``{"ce": lam * ce, "kd": (1 - lam) * kd}``.
    params : iterable of Parameter
        The shared parameters (e.g. the backbone's).

    Returns
    -------
    float in [-1, 1]; 1 for identical losses, -1 for a loss and its negation.
    """
    if len(losses) != 2:
        raise ValueError(f"losses must hold exactly two scalar losses, got {len(losses)}")
    params = [p for p in params if p.requires_grad]
    if not params:
        raise ValueError("params must contain at least one parameter that requires grad")
    flat = []
    for name, loss in losses.items():
        if not isinstance(loss, Tensor) or loss.dim() != 0:
            raise ValueError(f"losses[{name!r}] must be a scalar tensor")
        if not loss.requires_grad:
            raise ValueError(f"losses[{name!r}] does not depend on any parameter")
        grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
        if all(g is None for g in grads):
            raise ValueError(f"no parameter receives gradient from losses[{name!r}]")
        flat.append(
            torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(params, grads)])
        )
    n1, n2 = flat[0].norm(), flat[1].norm()
    if n1 == 0 or n2 == 0:
        raise ValueError("a loss has an all-zero gradient on params; the cosine is undefined")
    return float((flat[0] @ flat[1]) / (n1 * n2))


class CachedTeacher:
    """A frozen teacher whose logits are computed once per sample index and then reused.

    Parameters
    ----------
    teacher_fn : callable
        ``x (B, ...) -> logits (B, K)``; called under ``torch.no_grad()``. If it is an ``nn.Module``
        it is put in eval mode and never registered as a submodule of the student.
    num_classes : int
        ``K``; every returned logit row is checked against it.

    ``teacher(x)`` calls the teacher; ``teacher(x, index)`` returns cached logits for the sample
    indices ``index`` (B,) (non-negative integers), calling the teacher only on the rows of ``x``
    whose index is not cached yet, in batch order. The cache is a ``(capacity, K)`` tensor indexed
    by sample index (grown by doubling), so a lookup is one gather, not a Python loop over samples.
    One instance can serve several students trained on the same data (the logits are those of the
    first batch that contained each index).
    """

    def __init__(self, teacher_fn: Callable[[Tensor], Tensor], num_classes: int):
        if not callable(teacher_fn):
            raise TypeError(f"teacher_fn must be callable, got {type(teacher_fn).__name__}")
        self.teacher_fn = teacher_fn
        self.num_classes = check_int("num_classes", num_classes, low=2)
        self._table: Tensor | None = None  # (capacity, K) logits by sample index, created on the first miss
        self._have = torch.zeros(0, dtype=torch.bool)  # (capacity,) which rows of _table are filled
        if isinstance(teacher_fn, nn.Module):
            teacher_fn.eval()

    def _keys(self, index: Any, batch: int) -> Tensor:
        if not isinstance(index, Tensor) or index.dtype not in (
            torch.int64,
            torch.int32,
            torch.int16,
            torch.uint8,
        ):
            got = index.dtype if isinstance(index, Tensor) else type(index).__name__
            raise TypeError(f"index must be an integer tensor of sample indices (B,), got {got}")
        keys = index.reshape(-1).long().cpu()
        if keys.numel() != batch:
            raise ValueError(f"index must have length B = {batch}, got {keys.numel()}")
        if batch == 0:
            raise ValueError("index must hold at least one sample index (B >= 1)")
        if int(keys.min()) < 0:
            raise ValueError(f"index must hold non-negative sample indices, got {int(keys.min())}")
        return keys

    @torch.no_grad()
    def __call__(self, x: Tensor, index: Tensor | None = None) -> Tensor:
        if index is None:
            return _check_logits("teacher logits", self.teacher_fn(x).detach(), self.num_classes)
        keys = self._keys(index, x.shape[0])
        need = int(keys.max()) + 1
        if need > self._have.numel():
            capacity = max(need, 2 * self._have.numel())
            self._have = torch.cat([self._have, self._have.new_zeros(capacity - self._have.numel())])
        missing = (~self._have[keys]).nonzero().reshape(-1)
        if missing.numel():
            logits = _check_logits("teacher logits", self.teacher_fn(x[missing]).detach(), self.num_classes)
            if self._table is None or self._table.shape[0] < self._have.numel():
                grown = logits.new_zeros(self._have.numel(), self.num_classes)
                if self._table is not None:
                    grown[: self._table.shape[0]] = self._table
                self._table = grown
            rows = keys[missing]
            self._table[rows.to(self._table.device)] = logits.to(self._table.dtype)
            self._have[rows] = True
        return self._table[keys.to(self._table.device)]

    def __len__(self) -> int:
        return int(self._have.sum())


def _cycle(loader: Iterable) -> Iterator:
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            raise ValueError("loader yielded no batch")


def _teacher_logits(teacher: Callable, x: Tensor, index: Tensor | None) -> Tensor:
    with torch.no_grad():
        if isinstance(teacher, CachedTeacher):
            return teacher(x, index)
        return teacher(x).detach()


def train_dho(
    model: DualHeadClassifier,
    teacher: Callable[[Tensor], Tensor],
    labeled_loader: Iterable,
    unlabeled_loader: Iterable | None,
    *,
    loss: DHOLoss | None = None,
    steps: int,
    optimizer: torch.optim.Optimizer | None = None,
    lr: float = 1e-3,
    weight_decay: float = 0.01,
    warmup_frac: float = 0.1,
    augment: Callable[[Tensor], Tensor] | None = None,
    conflict_from: float = 0.8,
    conflict_every: int = 10,
) -> dict[str, Any]:
    """Train a (dual- or tied-head) student with :class:`DHOLoss`.

    The optimiser defaults to AdamW (multi-tensor ``foreach`` form) with a linear warm-up over
    ``warmup_frac`` of the steps and a linear decay to 0 (reference defaults). The teacher runs under
    ``torch.no_grad()`` on the *un-augmented* inputs (so cached and online teachers agree); the student
    sees ``augment(x)``. At ``lambda = 1`` (CE only) the unlabelled KD term has weight 0, so the
    student's forward on the unlabelled batch is skipped (the loss and every gradient are unchanged:
    the term only ever added zeros); the unlabelled batch is still drawn, augmented and shown to the
    teacher, so a stateful sampler, augmentation or :class:`CachedTeacher` advances exactly as in the
    other arms.

    Parameters
    ----------
    model : DualHeadClassifier
        ``tie_heads=True`` gives the single-head KD baseline, ``loss=DHOLoss(lam=1)`` the CE-only one.
    teacher : callable or CachedTeacher
        ``x -> logits (B, K)``. A :class:`CachedTeacher` is called with the batch's sample indices.
    labeled_loader : iterable
        Yields ``(x, y)`` or ``(x, y, index)``; cycled.
    unlabeled_loader : iterable or None
        Yields ``x``, ``(x,)`` or ``(x, index)``; cycled. ``None`` distils the labelled batch only.
    loss : DHOLoss
        Default ``DHOLoss()`` (lambda 0.5, T 2).
    steps : int
        Optimiser steps.
    conflict_from, conflict_every : float, int
        From ``conflict_from * steps`` on, every ``conflict_every`` steps, record
        :func:`gradient_conflict` of (lambda CE, (1 - lambda) KD) on the backbone's parameters.

    Returns
    -------
    dict with ``losses`` (per step), ``ce``, ``kd`` (per step) and ``grad_cosine`` (list).
    """
    if not isinstance(model, DualHeadClassifier):
        raise TypeError(f"model must be a DualHeadClassifier, got {type(model).__name__}")
    check_int("steps", steps, low=1)
    check_int("conflict_every", conflict_every, low=1)
    check_probability("conflict_from", conflict_from)
    check_probability("warmup_frac", warmup_frac)
    loss = DHOLoss() if loss is None else loss
    if not isinstance(loss, DHOLoss):
        raise TypeError(f"loss must be a DHOLoss, got {type(loss).__name__}")
    if isinstance(teacher, nn.Module):
        teacher.eval()
    if optimizer is None:
        # foreach: the multi-tensor AdamW, the same update (equal within float32 rounding, tested; bit for
        # bit on the developers' Xeon, not promised on every CPU) with fewer kernel launches
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, foreach=True)
    warm = max(1, int(round(warmup_frac * steps)))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warm if s < warm else max(0.0, (steps - s) / max(1, steps - warm))
    )
    lab_iter = _cycle(labeled_loader)
    unl_iter = _cycle(unlabeled_loader) if unlabeled_loader is not None else None
    backbone_params = [p for p in model.backbone.parameters() if p.requires_grad]
    history: dict[str, list[float]] = {"losses": [], "ce": [], "kd": [], "grad_cosine": []}
    start = min(steps - 1, math.ceil(conflict_from * steps))
    model.train()
    for step in range(steps):
        batch = next(lab_iter)
        x_l, y = batch[0], batch[1]
        idx_l = batch[2] if len(batch) > 2 else None
        t_l = _teacher_logits(teacher, x_l, idx_l)
        out_l = model(augment(x_l) if augment else x_l)
        out_u = t_u = None
        if unl_iter is not None:
            ub = next(unl_iter)
            if isinstance(ub, Tensor):
                x_u, idx_u = ub, None
            else:
                x_u, idx_u = ub[0], (ub[1] if len(ub) > 1 else None)
            # drawn, augmented and shown to the teacher even when unused, so every arm advances the same data,
            # augmentation and teacher-cache streams
            t_u = _teacher_logits(teacher, x_u, idx_u)
            x_u_aug = augment(x_u) if augment else x_u
            if loss.lam < 1.0:  # at lambda = 1 the unlabelled KD term has weight 0: no student forward needed
                out_u = model(x_u_aug)
        parts = loss(out_l, y, out_u, t_l, t_u)
        kd = parts["kd_labeled"] + parts["kd_unlabeled"]
        if step >= start and (step - start) % conflict_every == 0 and 0.0 < loss.lam < 1.0:
            try:
                history["grad_cosine"].append(
                    gradient_conflict(
                        {"ce": loss.lam * parts["ce"], "kd": (1 - loss.lam) * kd}, backbone_params
                    )
                )
            except ValueError:
                pass
        optimizer.zero_grad(set_to_none=True)
        parts["loss"].backward()
        optimizer.step()
        schedule.step()
        history["losses"].append(parts["loss"].item())
        history["ce"].append(parts["ce"].item())
        history["kd"].append(kd.item())
    model.eval()
    if any(not math.isfinite(v) for v in history["losses"]):
        raise FloatingPointError("train_dho: the loss became NaN/inf; lower the learning rate")
    return history

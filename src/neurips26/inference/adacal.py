r"""AdaCal: task-dispatched, probe-calibrated block-sparse prefill attention for ``transformers``.

Paper
-----
*AdaCal: adaptive calibration of sparse prefill attention by coarse task dispatch and head-wise
probe profiling* (seed file ``004_01f475bc147a144d.txt``, abstract beginning "Large language models
face substantial computational"). Only the abstract was available; every formula below that the
abstract does not fix is marked *inferred*.

Method
------
Per layer, with queries :math:`Q\in\mathbb R^{b\times h\times n\times d}`, keys and values
:math:`K,V\in\mathbb R^{b\times h_{kv}\times n\times d}` (expanded to :math:`h` heads for GQA), block
size :math:`B` and :math:`n_b=\lceil n/B\rceil` blocks (the tail block may be short):

1. **Task dispatch** :math:`\tau\in\{\text{structure},\text{mixed},\text{retrieval}\}`: an explicit
   tag (:func:`task`), else a :class:`TaskDispatcher` (multinomial logistic regression on the
   head-averaged layer-0 probe metrics plus prompt statistics), else ``config.default_task``.
2. **Probe** (last-query-block choice inferred): exact causal attention of the last :math:`n_q`
   queries over all keys, :math:`A=\mathrm{softmax}(Q_{last}K^\top s + M_{causal})`, pooled per key
   block: :math:`p_h[j]=\frac1{n_q}\sum_{r}\sum_{t\in\text{block }j}A_{r t}` (sums to 1).
3. **Head metrics** (formulas inferred): entropy :math:`H_h=-\sum_j p_h[j]\log p_h[j]/\log n_b`;
   concentration :math:`C_h` = mass of the top :math:`k=\max(2,\lceil 0.04 n_b\rceil)` blocks;
   mid-zone coverage :math:`M_h` = mass outside the sink zone (first ``sink_blocks`` blocks) and the
   local zone (the ``local_blocks`` blocks before the last query block, and that block itself), i.e.
   the probe mass an A-shape mask would miss.
4. **Head activation** (rules inferred), with the policy :math:`\pi_\tau` of :data:`DEFAULT_POLICIES`:
   *static* (A-shape) if :math:`M_h<\theta_{mid}`; *dense* if :math:`H_h>\theta_H`,
   :math:`M_h\ge\theta_{mid}` and the layer's dense quota (``round(dense_quota * h)`` heads, highest
   entropy first) is not used; otherwise *dynamic*: for each query block keep the smallest set of
   key blocks whose estimated scores
   :math:`S=\mathrm{softmax}(\bar Q\bar K^\top s + M_{causal\,blocks})` (mean-pooled blocks,
   FlexPrefill-style) cover :math:`\gamma` of the row mass, plus sink, local and diagonal blocks,
   capped at :math:`\max(\lceil\beta_{max}(i+1)\rceil, \#\text{mandatory})` blocks for query block
   :math:`i`.
5. **Augmentation** (mechanisms inferred, dynamic heads only): ``"topm"`` adds the top-``m``
   mid-zone blocks of :math:`p_h` to every query block that can see them; ``"topm+stride"`` also adds
   every ``r``-th block of each row's mid zone. Priority under the cap: mandatory, then top-m, then
   stride, then the :math:`\gamma`-cover blocks by estimated score.
6. **Calibration** (optional; spec step 6): :func:`calibrate_policies` grid-searches
   :math:`(\theta_{mid},\gamma)` per task to maximise accuracy on a small labelled set subject to
   a mean-density cap, with a caller-supplied ``evaluate(task, policy) -> (accuracy, density)``
   (model-agnostic); :func:`calibrate_policies_on_model` / :func:`model_evaluator` evaluate the
   candidates with a ``transformers`` model through the registered attention.
7. **Sparse attention**: the block mask is expanded to tokens, intersected with the causal (and
   padding) mask and evaluated exactly (masked SDPA, ``backend="reference"``), or run by
   ``torch.nn.attention.flex_attention`` with a ``BlockMask`` built from the plan
   (``backend="flex"``, :func:`flex_block_mask`; compiled on CUDA, eager and unfused on CPU).
   Decoding (``q_len == 1``) is dense SDPA over the whole cache.

Density of a head = selected blocks / causal blocks (:math:`n_b(n_b+1)/2`); it is the FLOP proxy of
the method (a block-sparse kernel would skip the unselected blocks). The reference CPU path computes
the masked product densely, so it is **not** faster than dense attention on CPU.

Baselines in this module: :func:`a_shape_mask` (sink + local window, StreamingLLM-style) and
:func:`flexprefill_mask` (per head, Jensen-Shannon choice between a query-aware pattern and a
vertical-slash pattern, each selected to a cumulative mass :math:`\gamma`). Dense attention is
``transformers``' own ``sdpa``/``eager``.

Usage
-----
>>> from transformers import AutoModelForCausalLM  # doctest: +SKIP
>>> name = register_adacal_attention(AdaCalConfig(block_size=64))  # doctest: +SKIP
>>> model.set_attn_implementation(name)  # doctest: +SKIP
>>> with task("retrieval"):  # doctest: +SKIP
...     out = model.generate(**inputs, max_new_tokens=8)
>>> last_stats()["density"]  # doctest: +SKIP

Calibrating ``(theta_mid, gamma)`` per task on labelled prompts ``[(input_ids, answer_ids), ...]``
under a density cap, then using the tuned table (``backend="flex"`` runs ``flex_attention``):

>>> pols = calibrate_policies_on_model(model, {"retrieval": examples}, (0.1, 0.25), (0.85, 0.95),
...                                    density_cap=0.5, config=cfg)  # doctest: +SKIP
>>> cfg = dataclasses.replace(cfg, policies=pols, backend="flex")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from neurips26.common.checks import check_choice, check_float, check_int, check_tensor

__all__ = [
    "AUGMENT_MODES",
    "BACKENDS",
    "DEFAULT_POLICIES",
    "HEAD_DENSE",
    "HEAD_DYNAMIC",
    "HEAD_STATIC",
    "METHODS",
    "TASKS",
    "AdaCalConfig",
    "BlockPlan",
    "TaskDispatcher",
    "TaskPolicy",
    "a_shape_mask",
    "block_density",
    "calibrate_policies",
    "calibrate_policies_on_model",
    "dispatch_features",
    "flex_block_mask",
    "flexprefill_mask",
    "last_stats",
    "model_evaluator",
    "plan_blocks",
    "probe_metrics",
    "prompt_features",
    "register_adacal_attention",
    "sparse_prefill_attention",
    "task",
]

TASKS = ("structure", "mixed", "retrieval")
AUGMENT_MODES = ("off", "topm", "topm+stride")
METHODS = ("adacal", "a_shape", "flexprefill", "dense")
BACKENDS = ("reference", "flex")
HEAD_STATIC, HEAD_DYNAMIC, HEAD_DENSE = 0, 1, 2


# --------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskPolicy:
    """Thresholds of one task type (all inferred; see the module docstring).

    Parameters
    ----------
    theta_mid : float
        Heads with mid-zone coverage below it stay static (A-shape), in ``[0, 1]``.
    theta_h : float
        Heads with normalised entropy above it may run dense, in ``[0, 1]``.
    gamma : float
        Cumulative estimated mass a dynamic head keeps per query block, in ``(0, 1]``.
    augment : {"off", "topm", "topm+stride"}
        Long-range augmentation of dynamic heads.
    beta_max : float
        Per-row budget of a dynamic head as a fraction of the causal blocks, in ``(0, 1]``.
    """

    theta_mid: float
    theta_h: float
    gamma: float
    augment: str
    beta_max: float

    def __post_init__(self) -> None:
        check_float("theta_mid", self.theta_mid, 0.0, 1.0)
        check_float("theta_h", self.theta_h, 0.0, 1.0)
        check_float("gamma", self.gamma, 0.0, 1.0, low_open=True)
        check_choice("augment", self.augment, AUGMENT_MODES)
        check_float("beta_max", self.beta_max, 0.0, 1.0, low_open=True)


#: The policy table of the spec (thresholds inferred).
DEFAULT_POLICIES: Mapping[str, TaskPolicy] = {
    "structure": TaskPolicy(theta_mid=0.25, theta_h=0.95, gamma=0.85, augment="off", beta_max=0.15),
    "mixed": TaskPolicy(theta_mid=0.15, theta_h=0.90, gamma=0.90, augment="topm", beta_max=0.30),
    "retrieval": TaskPolicy(theta_mid=0.10, theta_h=0.85, gamma=0.95, augment="topm+stride", beta_max=0.50),
}


@dataclass(frozen=True)
class AdaCalConfig:
    """Configuration of AdaCal sparse prefill.

    Parameters
    ----------
    block_size : int
        Block edge ``B`` in tokens (128 for long contexts; 16-64 for short ones).
    sink_blocks : int
        Leading blocks always kept (attention sinks).
    local_blocks : int
        Blocks before the diagonal always kept (local window).
    probe_queries : int, optional
        Number of last queries in the probe (default ``block_size``).
    policies : mapping of str to TaskPolicy
        One policy per task in :data:`TASKS`.
    dense_quota : float
        At most ``round(dense_quota * h)`` heads per layer run dense.
    augment_top_m : int
        Mid-zone probe blocks added by ``"topm"`` augmentation.
    augment_stride : int
        Stride ``r`` of ``"topm+stride"`` augmentation.
    default_task : str
        Task used when neither a tag nor a dispatcher decides.
    backend : {"reference", "flex"}
        ``"reference"``: token-expanded mask + exact SDPA (pure torch, any device). ``"flex"``:
        ``torch.nn.attention.flex_attention`` with a ``BlockMask`` built from the plan
        (:func:`flex_block_mask`); block-sparse on GPU, eager and unfused (slow, exact) on CPU.
    """

    block_size: int = 128
    sink_blocks: int = 1
    local_blocks: int = 2
    probe_queries: int | None = None
    policies: Mapping[str, TaskPolicy] = field(default_factory=lambda: dict(DEFAULT_POLICIES))
    dense_quota: float = 0.1
    augment_top_m: int = 4
    augment_stride: int = 8
    default_task: str = "mixed"
    backend: str = "reference"

    def __post_init__(self) -> None:
        check_int("block_size", self.block_size, low=1)
        check_int("sink_blocks", self.sink_blocks, low=0)
        check_int("local_blocks", self.local_blocks, low=0)
        if self.probe_queries is not None:
            check_int("probe_queries", self.probe_queries, low=1)
        if not isinstance(self.policies, Mapping):
            raise TypeError(
                f"policies must be a mapping task -> TaskPolicy, got {type(self.policies).__name__}"
            )
        missing = [t for t in TASKS if t not in self.policies]
        if missing:
            raise ValueError(f"policies must define every task {list(TASKS)}; missing {missing}")
        for name, pol in self.policies.items():
            if not isinstance(pol, TaskPolicy):
                raise TypeError(f"policies[{name!r}] must be a TaskPolicy, got {type(pol).__name__}")
        check_float("dense_quota", self.dense_quota, 0.0, 1.0)
        check_int("augment_top_m", self.augment_top_m, low=0)
        check_int("augment_stride", self.augment_stride, low=1)
        check_choice("default_task", self.default_task, TASKS)
        check_choice("backend", self.backend, BACKENDS)


# --------------------------------------------------------------------------------------------
# task tag context
# --------------------------------------------------------------------------------------------
_TASK: contextvars.ContextVar[str | None] = contextvars.ContextVar("adacal_task", default=None)
_INPUT_IDS: contextvars.ContextVar[Any] = contextvars.ContextVar("adacal_input_ids", default=None)


@contextlib.contextmanager
def task(name: str | None = None, *, input_ids: Any = None) -> Iterator[None]:
    """Context manager: tag the prompts of the enclosed forward passes with a task type.

    Parameters
    ----------
    name : {"structure", "mixed", "retrieval"} or None
        Explicit task tag (highest priority). ``None`` leaves the decision to the dispatcher.
    input_ids : LongTensor ``[b, n]``, optional
        Token ids of the prompt, for the dispatcher's prompt statistics.
    """
    if name is not None:
        check_choice("task", name, TASKS)
    tok_t = _TASK.set(name)
    tok_i = _INPUT_IDS.set(input_ids)
    try:
        yield
    finally:
        _TASK.reset(tok_t)
        _INPUT_IDS.reset(tok_i)


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def _check_qk(q: torch.Tensor, k: torch.Tensor) -> tuple[int, int, int, int]:
    check_tensor("q", q)
    check_tensor("k", k)
    if q.dtype != k.dtype or q.device != k.device:
        raise ValueError(
            f"q and k must share dtype and device, got {q.dtype}/{q.device} and {k.dtype}/{k.device}"
        )
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(f"q and k must be 4-D [b, h, n, d], got {tuple(q.shape)} and {tuple(k.shape)}")
    b, h, n, d = q.shape
    if k.shape[0] != b or k.shape[2] != n or k.shape[3] != d:
        raise ValueError(
            f"k must have shape [b, h_kv, n, d] matching q {tuple(q.shape)}, got {tuple(k.shape)}"
        )
    if h % k.shape[1]:
        raise ValueError(f"query heads ({h}) must be a multiple of key heads ({k.shape[1]})")
    if n < 1:
        raise ValueError("sequence length must be >= 1")
    return b, h, n, d


def _expand_kv(x: torch.Tensor, h: int) -> torch.Tensor:
    """``[b, h_kv, n, d] -> [b, h, n, d]``; head ``i`` uses kv head ``i // (h / h_kv)`` (as repeat_kv)."""
    rep = h // x.shape[1]
    return x if rep == 1 else x.repeat_interleave(rep, dim=1)


def _n_blocks(n: int, block_size: int) -> int:
    return -(-n // block_size)


def _block_pool_sum(x: torch.Tensor, block_size: int, nb: int) -> torch.Tensor:
    """Sum the last dim of ``x`` per block: ``[..., n] -> [..., nb]`` (zero padding at the tail)."""
    pad = nb * block_size - x.shape[-1]
    if pad:
        x = F.pad(x, (0, pad))
    return x.reshape(*x.shape[:-1], nb, block_size).sum(-1)


def _block_mean(x: torch.Tensor, block_size: int, nb: int) -> torch.Tensor:
    """Mean-pool tokens per block: ``[b, h, n, d] -> [b, h, nb, d]`` (short tail averaged correctly)."""
    n = x.shape[2]
    pad = nb * block_size - n
    xp = F.pad(x, (0, 0, 0, pad)) if pad else x
    sums = xp.reshape(x.shape[0], x.shape[1], nb, block_size, x.shape[3]).sum(3)
    counts = torch.full((nb,), float(block_size), device=x.device, dtype=sums.dtype)
    counts[-1] = n - (nb - 1) * block_size
    return sums / counts[:, None]


def _causal_blocks(nb: int, device: Any = None) -> torch.Tensor:
    return torch.ones(nb, nb, dtype=torch.bool, device=device).tril()


def _cumulative_select(
    scores: torch.Tensor, gamma: float | torch.Tensor, valid: torch.Tensor
) -> torch.Tensor:
    """Smallest set of entries per row whose mass reaches ``gamma`` of the row's valid mass.

    ``scores`` ``[..., m]`` non-negative, ``valid`` bool broadcastable; returns bool ``[..., m]``.
    """
    s = torch.where(valid, scores, torch.zeros((), dtype=scores.dtype, device=scores.device))
    total = s.sum(-1, keepdim=True)
    vals, idx = s.sort(-1, descending=True)
    before = vals.cumsum(-1) - vals
    if isinstance(gamma, torch.Tensor):
        gamma = gamma.reshape(*gamma.shape, *([1] * (s.dim() - gamma.dim())))
    keep_sorted = (before < gamma * total) & (vals > 0)
    keep = torch.zeros_like(keep_sorted).scatter(-1, idx, keep_sorted)
    return keep & valid


def _probe_attention(
    q: torch.Tensor, k: torch.Tensor, probe_queries: int, scale: float, key_valid: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact causal attention of the last queries: ``A [b, h, n_q, n]`` (fp32) and their positions."""
    b, h, n, _ = q.shape
    n_q = min(probe_queries, n)
    pos = torch.arange(n - n_q, n, device=q.device)
    ke = _expand_kv(k, h).float()
    logits = torch.einsum("bhqd,bhkd->bhqk", q[:, :, n - n_q :].float(), ke) * scale
    allowed = torch.arange(n, device=q.device)[None, :] <= pos[:, None]  # [n_q, n]
    allowed = allowed[None, None]
    if key_valid is not None:
        allowed = allowed & key_valid[:, None, None, :]
    logits = logits.masked_fill(~allowed, float("-inf"))
    attn = torch.softmax(logits, dim=-1)
    return torch.nan_to_num(attn, nan=0.0), pos


def _zones(nb: int, sink_blocks: int, local_blocks: int, device: Any = None) -> torch.Tensor:
    """Mid-zone indicator for the last query block: ``[nb]`` bool (not sink, not local, not diagonal)."""
    j = torch.arange(nb, device=device)
    return (j >= sink_blocks) & (j < nb - 1 - local_blocks)


# --------------------------------------------------------------------------------------------
# probe metrics
# --------------------------------------------------------------------------------------------
def probe_metrics(
    q: torch.Tensor,
    k: torch.Tensor,
    block_size: int,
    probe_queries: int | None = None,
    sink_blocks: int = 1,
    local_blocks: int = 2,
    scale: float | None = None,
    key_valid: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Head-wise physical metrics of the probe pattern (exact last-query-block attention).

    Parameters
    ----------
    q : Tensor ``[b, h, n, d]``
    k : Tensor ``[b, h_kv, n, d]`` (``h`` a multiple of ``h_kv``)
    block_size : int
        Block size ``B``.
    probe_queries : int, optional
        Number of last queries probed (default ``block_size``; clipped to ``n``).
    sink_blocks, local_blocks : int
        Zones excluded from the mid-zone coverage.
    scale : float, optional
        Logit scale (default ``d ** -0.5``).
    key_valid : BoolTensor ``[b, n]``, optional
        ``False`` for padding keys.

    Returns
    -------
    dict
        ``entropy``, ``concentration``, ``mid_coverage`` (each fp32 ``[b, h]``) and ``probe_dist``
        (fp32 ``[b, h, nb]``, rows sum to 1). With ``nb == 1`` the entropy is defined as 0.
    """
    b, h, n, d = _check_qk(q, k)
    check_int("block_size", block_size, low=1)
    check_int("sink_blocks", sink_blocks, low=0)
    check_int("local_blocks", local_blocks, low=0)
    probe_queries = block_size if probe_queries is None else check_int("probe_queries", probe_queries, low=1)
    scale = (
        d**-0.5
        if scale is None
        else check_float("scale", scale, 0.0, low_open=True, high=math.inf, high_open=True)
    )
    nb = _n_blocks(n, block_size)
    attn, _ = _probe_attention(q, k, probe_queries, scale, key_valid)
    dist = _block_pool_sum(attn, block_size, nb).mean(2)  # [b, h, nb]
    dist = dist / dist.sum(-1, keepdim=True).clamp_min(1e-30)
    return {"probe_dist": dist, **metrics_from_distribution(dist, sink_blocks, local_blocks)}


def metrics_from_distribution(
    dist: torch.Tensor, sink_blocks: int = 1, local_blocks: int = 2
) -> dict[str, torch.Tensor]:
    """Entropy, concentration and mid-zone coverage of block distributions ``[..., nb]``.

    See the module docstring for the formulas; exposed so that the metrics can be checked on
    hand-made distributions.
    """
    nb = dist.shape[-1]
    plogp = torch.where(dist > 0, dist * dist.clamp_min(1e-30).log(), torch.zeros_like(dist))
    entropy = -plogp.sum(-1) / math.log(nb) if nb > 1 else torch.zeros(dist.shape[:-1], dtype=dist.dtype)
    top_k = min(nb, max(2, math.ceil(0.04 * nb)))
    concentration = dist.topk(top_k, dim=-1).values.sum(-1)
    mid = _zones(nb, sink_blocks, local_blocks, dist.device)
    mid_coverage = (dist * mid).sum(-1)
    return {
        "entropy": entropy.clamp(0.0, 1.0),
        "concentration": concentration.clamp(0.0, 1.0),
        "mid_coverage": mid_coverage.clamp(0.0, 1.0),
    }


# --------------------------------------------------------------------------------------------
# block masks: A-shape, estimated scores, FlexPrefill-like
# --------------------------------------------------------------------------------------------
def a_shape_mask(n: int, block_size: int, sink_blocks: int = 1, local_blocks: int = 2) -> torch.Tensor:
    """Static sink + local-window block mask ("A-shape", StreamingLLM-style).

    Query block ``i`` keeps key blocks ``j < sink_blocks`` and ``i - local_blocks <= j <= i``.

    Returns
    -------
    BoolTensor ``[nb, nb]`` (lower triangular).
    """
    check_int("n", n, low=1)
    check_int("block_size", block_size, low=1)
    check_int("sink_blocks", sink_blocks, low=0)
    check_int("local_blocks", local_blocks, low=0)
    nb = _n_blocks(n, block_size)
    i = torch.arange(nb)[:, None]
    j = torch.arange(nb)[None, :]
    return (j <= i) & ((j < sink_blocks) | (j >= i - local_blocks))


def estimated_block_scores(
    q: torch.Tensor, k: torch.Tensor, block_size: int, scale: float | None = None
) -> torch.Tensor:
    """FlexPrefill-style block estimate ``softmax(pool(Q) pool(K)^T * scale)`` over causal blocks.

    Returns fp32 ``[b, h, nb, nb]``; rows sum to 1 over ``j <= i``, zero above the diagonal.
    """
    b, h, n, d = _check_qk(q, k)
    scale = (
        d**-0.5
        if scale is None
        else check_float("scale", scale, 0.0, low_open=True, high=math.inf, high_open=True)
    )
    nb = _n_blocks(n, block_size)
    qp = _block_mean(q.float(), block_size, nb)
    kp = _block_mean(_expand_kv(k, h).float(), block_size, nb)
    logits = torch.einsum("bhid,bhjd->bhij", qp, kp) * scale
    logits = logits.masked_fill(~_causal_blocks(nb, q.device), float("-inf"))
    return torch.softmax(logits, dim=-1)


def _js_distance(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    m = 0.5 * (p + q)

    def kl(a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch.where(
            a > 0, a * (a.clamp_min(1e-30).log() - c.clamp_min(1e-30).log()), torch.zeros_like(a)
        ).sum(-1)

    return (0.5 * kl(p, m) + 0.5 * kl(q, m)).clamp_min(0).sqrt()


def flexprefill_mask(
    q: torch.Tensor,
    k: torch.Tensor,
    block_size: int,
    gamma: float = 0.9,
    tau: float = 0.1,
    probe_queries: int | None = None,
    scale: float | None = None,
    key_valid: torch.Tensor | None = None,
    return_pattern: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """FlexPrefill-like dynamic block mask (simplified, no kernels).

    Per head: the true block distribution of the last query block :math:`\\bar a` (the probe) is
    compared with the estimate :math:`\\hat a` from the mean-pooled last-block query; if the
    Jensen-Shannon distance :math:`\\sqrt{JSD(\\bar a, \\hat a)} < \\tau` the head is *query-aware*
    (per query block, the blocks covering ``gamma`` of the estimated scores), otherwise
    *vertical-slash* (key columns and diagonals covering ``gamma`` of the probe's vertical and slash
    mass, mapped to the blocks containing them). Diagonal blocks are always kept.

    Parameters
    ----------
    q : Tensor ``[b, h, n, d]``
    k : Tensor ``[b, h_kv, n, d]``
    block_size : int
    gamma : float
        Cumulative attention threshold in ``(0, 1]``.
    tau : float
        JS-distance threshold in ``[0, 1]``.
    probe_queries : int, optional
        Last queries used for the true distribution (default ``block_size``).
    scale : float, optional
    key_valid : BoolTensor ``[b, n]``, optional
    return_pattern : bool
        Also return ``query_aware`` (BoolTensor ``[b, h]``).

    Returns
    -------
    BoolTensor ``[b, h, nb, nb]`` (and the pattern choice when asked).
    """
    b, h, n, d = _check_qk(q, k)
    check_int("block_size", block_size, low=1)
    check_float("gamma", gamma, 0.0, 1.0, low_open=True)
    check_float("tau", tau, 0.0, 1.0)
    probe_queries = block_size if probe_queries is None else check_int("probe_queries", probe_queries, low=1)
    scale = (
        d**-0.5
        if scale is None
        else check_float("scale", scale, 0.0, low_open=True, high=math.inf, high_open=True)
    )
    nb = _n_blocks(n, block_size)
    dev = q.device
    attn, pos = _probe_attention(q, k, probe_queries, scale, key_valid)  # [b,h,nq,n]
    true_dist = _block_pool_sum(attn, block_size, nb).mean(2)
    true_dist = true_dist / true_dist.sum(-1, keepdim=True).clamp_min(1e-30)
    # estimate from the pooled last-block query against all keys
    ke = _expand_kv(k, h).float()
    q_hat = q[:, :, n - attn.shape[2] :].float().mean(2)  # [b, h, d]
    est_logits = torch.einsum("bhd,bhkd->bhk", q_hat, ke) * scale
    if key_valid is not None:
        est_logits = est_logits.masked_fill(~key_valid[:, None, :], float("-inf"))
    est_dist = _block_pool_sum(torch.softmax(est_logits, -1), block_size, nb)
    query_aware = _js_distance(true_dist, est_dist) < tau  # [b, h]
    causal = _causal_blocks(nb, dev)
    # query-aware pattern
    scores = estimated_block_scores(q, k, block_size, scale)
    qa_mask = _cumulative_select(scores, gamma, causal)
    # vertical-slash pattern from the probe
    vertical = attn.sum(2)  # [b, h, n]
    offsets = torch.arange(n, device=dev)
    key_idx = pos[:, None] - offsets[None, :]  # [nq, n]: key of offset o for probe row r
    ok = key_idx >= 0
    gathered = attn.gather(-1, key_idx.clamp_min(0)[None, None].expand(b, h, -1, -1)) * ok
    slash = gathered.sum(2)  # [b, h, n] mass per offset
    v_sel = _cumulative_select(vertical, gamma, torch.ones_like(vertical, dtype=torch.bool))
    s_sel = _cumulative_select(slash, gamma, torch.ones_like(slash, dtype=torch.bool))
    col_blocks = _block_pool_sum(v_sel.float(), block_size, nb) > 0  # [b, h, nb]
    # block diagonal distance D = i - j covers offsets [D*B - (B-1), D*B + (B-1)]
    csum = F.pad(s_sel.float().cumsum(-1), (1, 0))  # csum[o] = count of offsets < o
    dist_ids = torch.arange(nb, device=dev)
    lo = (dist_ids * block_size - (block_size - 1)).clamp(0, n)
    hi = (dist_ids * block_size + block_size).clamp(0, n)
    diag_sel = (csum[..., hi] - csum[..., lo]) > 0  # [b, h, nb] by block distance
    i = torch.arange(nb, device=dev)[:, None]
    j = torch.arange(nb, device=dev)[None, :]
    vs_mask = col_blocks[:, :, None, :] | diag_sel[:, :, (i - j).clamp_min(0)]
    vs_mask = vs_mask & causal
    mask = torch.where(query_aware[:, :, None, None], qa_mask, vs_mask)
    mask = mask | torch.eye(nb, dtype=torch.bool, device=dev)
    return (mask, query_aware) if return_pattern else mask


def block_density(mask: torch.Tensor) -> torch.Tensor:
    """Selected causal blocks / causal blocks ``nb (nb + 1) / 2`` over the last two dims."""
    nb = mask.shape[-1]
    causal = _causal_blocks(nb, mask.device)
    return (mask & causal).sum((-1, -2)).float() / (nb * (nb + 1) / 2)


# --------------------------------------------------------------------------------------------
# AdaCal planning
# --------------------------------------------------------------------------------------------
@dataclass
class BlockPlan:
    """Output of :func:`plan_blocks`.

    Attributes
    ----------
    mask : BoolTensor ``[b, h, nb, nb]``
        Selected key blocks per query block (lower triangular, diagonal on).
    head_type : LongTensor ``[b, h]``
        ``HEAD_STATIC`` (0), ``HEAD_DYNAMIC`` (1) or ``HEAD_DENSE`` (2).
    density : Tensor ``[b, h]``
        Selected / causal blocks.
    metrics : dict
        :func:`probe_metrics` output.
    task : str
        The task whose policy was applied.
    augment_mask : BoolTensor ``[b, h, nb, nb]``
        Blocks that augmentation contributed (before the budget cap).
    """

    mask: torch.Tensor
    head_type: torch.Tensor
    density: torch.Tensor
    metrics: dict[str, torch.Tensor]
    task: str
    augment_mask: torch.Tensor


def plan_blocks(
    q: torch.Tensor,
    k: torch.Tensor,
    config: AdaCalConfig,
    task: str | None = None,
    scale: float | None = None,
    key_valid: torch.Tensor | None = None,
) -> BlockPlan:
    """Plan AdaCal's per-head block mask for one layer's prefill.

    Parameters
    ----------
    q : Tensor ``[b, h, n, d]``
    k : Tensor ``[b, h_kv, n, d]``
    config : AdaCalConfig
    task : {"structure", "mixed", "retrieval"}, optional
        Policy to apply (default ``config.default_task``).
    scale : float, optional
        Logit scale (default ``d ** -0.5``).
    key_valid : BoolTensor ``[b, n]``, optional
        ``False`` for padding keys (excluded from the probe).

    Returns
    -------
    BlockPlan
        When ``sink_blocks + local_blocks + 1 >= nb`` every causal block is selected (dense) and a
        ``UserWarning`` says so.
    """
    if not isinstance(config, AdaCalConfig):
        raise TypeError(f"config must be an AdaCalConfig, got {type(config).__name__}")
    task = config.default_task if task is None else task
    check_choice("task", task, TASKS)
    b, h, n, d = _check_qk(q, k)
    B = config.block_size
    nb = _n_blocks(n, B)
    dev = q.device
    scale = (
        d**-0.5
        if scale is None
        else check_float("scale", scale, 0.0, low_open=True, high=math.inf, high_open=True)
    )
    pol = config.policies[task]
    causal = _causal_blocks(nb, dev)
    metrics = probe_metrics(
        q, k, B, config.probe_queries or B, config.sink_blocks, config.local_blocks, scale, key_valid
    )
    if config.sink_blocks + config.local_blocks + 1 >= nb:
        warnings.warn(
            f"AdaCal: sink_blocks + local_blocks + 1 = {config.sink_blocks + config.local_blocks + 1} >= "
            f"{nb} blocks; the whole causal mask is used (dense)",
            UserWarning,
            stacklevel=2,
        )
        mask = causal.expand(b, h, nb, nb).clone()
        head_type = torch.full((b, h), HEAD_DENSE, dtype=torch.long, device=dev)
        return BlockPlan(mask, head_type, block_density(mask), metrics, task, torch.zeros_like(mask))

    ent, mid, dist = metrics["entropy"], metrics["mid_coverage"], metrics["probe_dist"]
    static_m = a_shape_mask(n, B, config.sink_blocks, config.local_blocks).to(dev)
    # head activation
    is_static = mid < pol.theta_mid
    dense_cand = (~is_static) & (ent > pol.theta_h)
    quota = int(round(config.dense_quota * h))
    is_dense = torch.zeros_like(dense_cand)
    if quota > 0 and bool(dense_cand.any()):
        ranked = torch.where(dense_cand, ent, torch.full_like(ent, -1.0))
        top = ranked.topk(min(quota, h), dim=-1).indices
        is_dense.scatter_(-1, top, True)
        is_dense &= dense_cand
    head_type = torch.full((b, h), HEAD_DYNAMIC, dtype=torch.long, device=dev)
    head_type[is_static] = HEAD_STATIC
    head_type[is_dense] = HEAD_DENSE

    # dynamic selection with priorities: mandatory 4, top-m 3 + p, stride 2, gamma-cover S in [0, 1]
    scores = estimated_block_scores(q, k, B, scale)
    cover = _cumulative_select(scores, pol.gamma, causal)
    prio = torch.where(cover, scores, torch.full_like(scores, -1.0))
    i = torch.arange(nb, device=dev)[:, None]
    j = torch.arange(nb, device=dev)[None, :]
    augment = torch.zeros(b, h, nb, nb, dtype=torch.bool, device=dev)
    if pol.augment != "off" and config.augment_top_m > 0:
        mid_last = _zones(nb, config.sink_blocks, config.local_blocks, dev)
        mid_dist = torch.where(mid_last, dist, torch.full_like(dist, -1.0))
        m = min(config.augment_top_m, int(mid_last.sum()))
        if m > 0:
            top_vals, top_idx = mid_dist.topk(m, dim=-1)
            chosen = torch.zeros(b, h, nb, dtype=torch.bool, device=dev)
            chosen.scatter_(-1, top_idx, top_vals > 0)
            topm = chosen[:, :, None, :] & causal
            augment |= topm
            prio = torch.where(topm, 3.0 + dist[:, :, None, :].expand_as(prio), prio)
    if pol.augment == "topm+stride":
        row_mid = (j >= config.sink_blocks) & (j < i - config.local_blocks)
        stride = row_mid & ((j - config.sink_blocks) % config.augment_stride == 0)
        augment |= stride.expand(b, h, nb, nb) & ~(prio >= 3.0)
        prio = torch.where(stride & (prio < 2.0), torch.full_like(prio, 2.0), prio)
    prio = torch.where(static_m, torch.full_like(prio, 4.0), prio)
    prio = prio.masked_fill(~causal, -1.0)
    n_mand = static_m.sum(-1)  # [nb]
    cap = torch.maximum(torch.ceil(pol.beta_max * (torch.arange(nb, device=dev) + 1)).long(), n_mand)
    order = torch.argsort(prio, dim=-1, descending=True, stable=True)
    rank = torch.empty_like(order).scatter_(-1, order, torch.arange(nb, device=dev).expand_as(order))
    dyn_mask = (rank < cap[:, None]) & (prio >= 0)

    ht = head_type[:, :, None, None]
    mask = torch.where(ht == HEAD_STATIC, static_m.expand(b, h, nb, nb), dyn_mask)
    mask = torch.where(ht == HEAD_DENSE, causal.expand(b, h, nb, nb), mask)
    augment = augment & (ht == HEAD_DYNAMIC)
    return BlockPlan(mask, head_type, block_density(mask), metrics, task, augment)


# --------------------------------------------------------------------------------------------
# sparse attention
# --------------------------------------------------------------------------------------------
def sparse_prefill_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_mask: torch.Tensor,
    block_size: int,
    scale: float | None = None,
    attention_mask: torch.Tensor | None = None,
    backend: str = "masked",
) -> torch.Tensor:
    """Exact causal attention restricted to the selected key blocks.

    Parameters
    ----------
    q : Tensor ``[b, h, n, d]``
    k, v : Tensor ``[b, h_kv, n, d]``
    block_mask : BoolTensor ``[nb, nb]``, ``[h, nb, nb]`` or ``[b, h, nb, nb]``
        Selected blocks; entries above the diagonal are ignored (causality is always enforced).
    block_size : int
    scale : float, optional
        Logit scale (default ``d ** -0.5``).
    attention_mask : Tensor ``[b, 1, n, n]``, optional
        ``transformers`` 4-D mask: bool (True = attend) or additive float.
    backend : {"masked", "gather", "flex"}
        ``"masked"`` (default): expand the block mask to tokens and make one masked SDPA call (dense
        cost, exact; the fastest pure-torch option on CPU). ``"gather"``: per query block, gather
        the selected key blocks and attend to them, so the arithmetic scales with the density
        (slower on CPU because of the Python loop and gathers; the shape a block-sparse kernel
        takes). ``"flex"``: ``torch.nn.attention.flex_attention`` with the ``BlockMask`` of
        :func:`flex_block_mask` (GQA through ``enable_gqa``, a short tail block handled by
        ``seq_lengths``); compiled with ``torch.compile`` on CUDA, where only the selected blocks are
        computed; eager on other devices (exact, unfused: it materialises the full score matrix).

    Returns
    -------
    Tensor ``[b, n, h, d]`` (the layout ``transformers`` attention functions return), dtype of ``q``.

    Notes
    -----
    The diagonal block is always computed (a causal query always sees itself). A query row that
    would see no key (e.g. a left-padding query) attends to itself only, so no NaN is produced; such
    rows are padding and their values are not used.
    """
    b, h, n, d = _check_qk(q, k)
    check_int("block_size", block_size, low=1)
    check_tensor("v", v)
    if v.dim() != 4 or v.shape[:3] != k.shape[:3]:
        raise ValueError(
            f"v must have shape [b, h_kv, n, d_v] matching k {tuple(k.shape)}, got {tuple(v.shape)}"
        )
    if v.dtype != q.dtype or v.device != q.device:
        raise ValueError(
            f"v must have q's dtype {q.dtype} and device {q.device}, got {v.dtype} on {v.device}"
        )
    if not isinstance(block_mask, torch.Tensor) or block_mask.dtype != torch.bool:
        raise TypeError("block_mask must be a bool tensor")
    if block_mask.device != q.device:
        raise ValueError(f"block_mask must be on q's device {q.device}, got {block_mask.device}")
    nb = _n_blocks(n, block_size)
    if block_mask.shape[-2:] != (nb, nb):
        raise ValueError(
            f"block_mask must end with ({nb}, {nb}) for n={n}, block_size={block_size}; got {tuple(block_mask.shape)}"
        )
    check_choice("backend", backend, ("gather", "masked", "flex"))
    scale = (
        d**-0.5
        if scale is None
        else check_float("scale", scale, 0.0, low_open=True, high=math.inf, high_open=True)
    )
    while block_mask.dim() < 4:
        block_mask = block_mask.unsqueeze(0)
    block_mask = (block_mask | torch.eye(nb, dtype=torch.bool, device=q.device)).expand(b, h, nb, nb)
    allowed_tok, additive = None, None
    if attention_mask is not None:
        am = attention_mask[..., -n:, -n:]
        if am.dtype == torch.bool:
            allowed_tok = am
        else:
            allowed_tok = am > torch.finfo(am.dtype).min / 2
            additive = torch.where(allowed_tok, am, torch.zeros_like(am)).to(q.dtype)
    if backend == "flex":
        return _flex_attention(q, k, v, block_mask, block_size, scale, allowed_tok, additive)
    ke, ve = _expand_kv(k, h), _expand_kv(v, h)
    if backend == "masked":
        return _masked_attention(q, ke, ve, block_mask, block_size, scale, allowed_tok, additive)
    return _gather_attention(q, ke, ve, block_mask, block_size, scale, allowed_tok, additive)


def _finish_mask(allowed: torch.Tensor, self_pos: torch.Tensor, additive: torch.Tensor | None, dtype):
    """Let a query with no visible key attend to itself (padding rows); build the SDPA mask."""
    empty = ~allowed.any(-1, keepdim=True)
    if bool(empty.any()):
        allowed = allowed | (empty & self_pos)
    if additive is None:
        return allowed
    neg = torch.tensor(float("-inf"), dtype=dtype, device=allowed.device)
    return torch.where(allowed, additive, neg)


def _masked_attention(q, ke, ve, block_mask, block_size, scale, allowed_tok, additive):
    """Token-expanded mask over the whole sequence + one SDPA call (dense cost, exact)."""
    b, h, n, _ = q.shape
    nb = block_mask.shape[-1]
    B = block_size
    tok = block_mask[:, :, :, None, :, None].expand(b, h, nb, B, nb, B).reshape(b, h, nb * B, nb * B)
    allowed = tok[..., :n, :n] & torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    if allowed_tok is None:  # the diagonal is forced on: no query row is empty
        return (
            F.scaled_dot_product_attention(q, ke, ve, attn_mask=allowed, scale=scale)
            .transpose(1, 2)
            .contiguous()
        )
    allowed = allowed & allowed_tok
    eye = torch.eye(n, dtype=torch.bool, device=q.device)
    mask = _finish_mask(allowed, eye, None if additive is None else additive.expand_as(allowed), q.dtype)
    out = F.scaled_dot_product_attention(q, ke, ve, attn_mask=mask, scale=scale)
    return out.transpose(1, 2).contiguous()


def _gather_attention(q, ke, ve, block_mask, block_size, scale, allowed_tok, additive):
    """Per query block, gather only the selected key blocks and attend to them (sparse cost)."""
    b, h, n, d = q.shape
    dv = ve.shape[-1]
    B = block_size
    nb = _n_blocks(n, B)
    pad = nb * B - n
    kp = F.pad(ke, (0, 0, 0, pad)).reshape(b, h, nb, B, d)
    vp = F.pad(ve, (0, 0, 0, pad)).reshape(b, h, nb, B, dv)
    pos = torch.arange(nb * B, device=q.device).reshape(nb, B)
    if allowed_tok is not None:
        allowed_tok = F.pad(allowed_tok, (0, pad), value=False)
        if additive is not None:
            additive = F.pad(additive, (0, pad))
    out = torch.empty(b, h, n, dv, dtype=q.dtype, device=q.device)
    for i in range(nb):
        q0, q1 = i * B, min((i + 1) * B, n)
        sel = block_mask[:, :, i, : i + 1]
        cnt = int(sel.sum(-1).max())
        idx = sel.to(torch.float32).topk(cnt, dim=-1).indices  # [b, h, cnt]
        valid = sel.gather(-1, idx)
        kk = kp.gather(2, idx[..., None, None].expand(b, h, cnt, B, d)).reshape(b, h, cnt * B, d)
        vv = vp.gather(2, idx[..., None, None].expand(b, h, cnt, B, dv)).reshape(b, h, cnt * B, dv)
        kpos = pos[idx].reshape(b, h, 1, cnt * B)
        qpos = torch.arange(q0, q1, device=q.device)[:, None]
        allowed = (valid[..., None].expand(b, h, cnt, B).reshape(b, h, 1, cnt * B)) & (kpos <= qpos)
        add = None
        if allowed_tok is not None:
            cols = kpos.expand(b, h, q1 - q0, cnt * B)
            rows = allowed_tok[:, :, q0:q1].expand(b, h, q1 - q0, nb * B)
            allowed = allowed & rows.gather(-1, cols)
            if additive is not None:
                add = additive[:, :, q0:q1].expand(b, h, q1 - q0, nb * B).gather(-1, cols)
        mask = _finish_mask(allowed, kpos == qpos, add, q.dtype)
        out[:, :, q0:q1] = F.scaled_dot_product_attention(q[:, :, q0:q1], kk, vv, attn_mask=mask, scale=scale)
    return out.transpose(1, 2).contiguous()


def flex_block_mask(
    block_mask: torch.Tensor,
    block_size: int,
    n: int,
    attention_mask: torch.Tensor | None = None,
):
    """Translate a block plan into a ``torch.nn.attention.flex_attention.BlockMask``.

    The ``BlockMask`` lists, per query block, the selected key blocks (``kv_num_blocks`` /
    ``kv_indices``, ascending); blocks strictly below the diagonal are marked *full* (no mask
    evaluation inside the kernel) when there is no padding mask, the diagonal block is *partial*.
    Its ``mask_mod`` is the token-level rule
    ``kv <= q and block_mask[b, h, q // B, kv // B] and attention_mask[b, 0, q, kv]``, plus the
    self position for a query row that would otherwise see nothing (left padding), as in the
    reference path. Eager (uncompiled) ``flex_attention`` only evaluates ``mask_mod``, so the block
    lookup inside it keeps both execution modes exact.

    Parameters
    ----------
    block_mask : BoolTensor ``[nb, nb]``, ``[h, nb, nb]`` or ``[b, h, nb, nb]``
        Selected blocks (entries above the diagonal are ignored; the diagonal is forced on).
    block_size : int
        Block edge ``B`` (the ``BlockMask``'s ``BLOCK_SIZE`` for queries and keys).
    n : int
        Sequence length (``nb = ceil(n / B)``; a short tail block is allowed).
    attention_mask : Tensor ``[b, 1, n, n]``, optional
        ``transformers`` 4-D mask (bool, True = attend; or additive float, where entries at or
        below ``finfo.min / 2`` count as masked).

    Returns
    -------
    torch.nn.attention.flex_attention.BlockMask
        Shape ``(b, h, n, n)`` (``b`` or ``h`` are 1 where ``block_mask`` has no such dim).
    """
    from torch.nn.attention.flex_attention import BlockMask

    check_int("block_size", block_size, low=1)
    check_int("n", n, low=1)
    if not isinstance(block_mask, torch.Tensor) or block_mask.dtype != torch.bool:
        raise TypeError("block_mask must be a bool tensor")
    nb = _n_blocks(n, block_size)
    if block_mask.dim() < 2 or block_mask.dim() > 4 or block_mask.shape[-2:] != (nb, nb):
        raise ValueError(
            f"block_mask must be [.., {nb}, {nb}] for n={n}, block_size={block_size}; got {tuple(block_mask.shape)}"
        )
    while block_mask.dim() < 4:
        block_mask = block_mask.unsqueeze(0)
    dev = block_mask.device
    causal = _causal_blocks(nb, dev)
    eye = torch.eye(nb, dtype=torch.bool, device=dev)
    bm = (block_mask | eye) & causal
    allowed_tok = None
    if attention_mask is not None:
        am = attention_mask[..., -n:, -n:]
        allowed_tok = am if am.dtype == torch.bool else am > torch.finfo(am.dtype).min / 2
        allowed_tok = allowed_tok[:, 0].to(dev)  # [b, n, n]
        if bm.shape[0] == 1 and allowed_tok.shape[0] > 1:
            bm = bm.expand(allowed_tok.shape[0], *bm.shape[1:])
    bm = bm.contiguous()

    def kv_lists(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        counts = m.sum(-1).to(torch.int32)
        order = torch.argsort((~m).to(torch.int8), dim=-1, stable=True).to(torch.int32)
        return counts, order

    tokens = torch.arange(n, device=dev)
    per_b, per_h = bm.shape[0] > 1, bm.shape[1] > 1  # size-1 dims broadcast over the batch / heads

    def lookup(b, h, q_idx, kv_idx):
        return bm[b if per_b else 0, h if per_h else 0, q_idx // block_size, kv_idx // block_size]

    if allowed_tok is None:
        partial_n, partial_i = kv_lists(bm & eye)
        full_n, full_i = kv_lists(bm & ~eye)

        def mask_mod(b, h, q_idx, kv_idx):
            return (kv_idx <= q_idx) & lookup(b, h, q_idx, kv_idx)

    else:
        partial_n, partial_i = kv_lists(bm)
        full_n = full_i = None
        tok_bm = bm[..., :, None, :, None].expand(*bm.shape[:2], nb, block_size, nb, block_size)
        tok_bm = tok_bm.reshape(*bm.shape[:2], nb * block_size, nb * block_size)[..., :n, :n]
        allowed_full = tok_bm & (tokens[None, :] <= tokens[:, None]) & allowed_tok[:, None]
        empty = ~allowed_full.any(-1)  # [b, h, n]: rows that see no key attend to themselves
        per_ab, per_eb = allowed_tok.shape[0] > 1, empty.shape[0] > 1

        def mask_mod(b, h, q_idx, kv_idx):
            ab = b if per_ab else 0
            ok = (kv_idx <= q_idx) & lookup(b, h, q_idx, kv_idx) & allowed_tok[ab, q_idx, kv_idx]
            return ok | (empty[b if per_eb else 0, h if per_h else 0, q_idx] & (kv_idx == q_idx))

    return BlockMask.from_kv_blocks(
        partial_n, partial_i, full_n, full_i, BLOCK_SIZE=block_size, mask_mod=mask_mod, seq_lengths=(n, n)
    )


_COMPILED_FLEX: dict[str, Any] = {}


def _flex_fn(device: torch.device):
    """``flex_attention``: compiled once per process on CUDA (fused block-sparse kernel), eager elsewhere."""
    from torch.nn.attention.flex_attention import flex_attention

    if device.type != "cuda":
        return flex_attention
    if "cuda" not in _COMPILED_FLEX:
        _COMPILED_FLEX["cuda"] = torch.compile(flex_attention, dynamic=False)
    return _COMPILED_FLEX["cuda"]


def _flex_attention(q, k, v, block_mask, block_size, scale, allowed_tok, additive):
    """Flex-attention path of :func:`sparse_prefill_attention` (``q [b,h,n,d]``, ``k, v [b,h_kv,n,d]``)."""
    b, h, n, _ = q.shape
    mask4 = None if allowed_tok is None else allowed_tok.expand(b, 1, n, n)
    bmask = flex_block_mask(block_mask, block_size, n, mask4)
    score_mod = None
    if additive is not None:
        add = additive.expand(b, 1, n, n)[:, 0].to(torch.float32)

        def score_mod(score, bi, hi, q_idx, kv_idx):
            return score + add[bi, q_idx, kv_idx]

    with warnings.catch_warnings():
        # eager flex_attention warns that it is unfused; that is the documented CPU behaviour here
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
        out = _flex_fn(q.device)(
            q,
            k,
            v,
            score_mod=score_mod,
            block_mask=bmask,
            scale=scale,
            enable_gqa=k.shape[1] != h,
        )
    return out.transpose(1, 2).contiguous()


# --------------------------------------------------------------------------------------------
# task dispatcher
# --------------------------------------------------------------------------------------------
FEATURE_NAMES = (
    "mean_entropy",
    "mean_concentration",
    "mean_mid_coverage",
    "std_mid_coverage",
    "bigram_repetition",
    "distinct_fraction",
    "query_marker",
)


def prompt_features(input_ids: Any, query_marker_ids: Sequence[int] = ()) -> np.ndarray:
    """Prompt statistics ``[b, 3]``: bigram repetition ratio, distinct-token fraction, marker presence.

    ``bigram_repetition`` = share of bigrams that occurred earlier in the prompt;
    ``distinct_fraction`` = unique tokens / tokens; ``query_marker`` = 1 if any id of
    ``query_marker_ids`` occurs, else 0.
    """
    ids = torch.as_tensor(input_ids)
    if ids.dim() == 1:
        ids = ids[None]
    if ids.dim() != 2:
        raise ValueError(f"input_ids must be [b, n] or [n], got shape {tuple(ids.shape)}")
    markers = set(int(m) for m in query_marker_ids)
    out = np.zeros((ids.shape[0], 3))
    for r, row in enumerate(ids.tolist()):
        seen, rep = set(), 0
        for a, c in zip(row[:-1], row[1:]):
            rep += (a, c) in seen
            seen.add((a, c))
        out[r, 0] = rep / max(len(row) - 1, 1)
        out[r, 1] = len(set(row)) / max(len(row), 1)
        out[r, 2] = float(bool(markers & set(row)))
    return out


def dispatch_features(
    metrics: Mapping[str, torch.Tensor], input_ids: Any = None, query_marker_ids: Sequence[int] = ()
) -> np.ndarray:
    """Dispatcher features ``[b, 7]`` (see :data:`FEATURE_NAMES`) from probe metrics and the prompt.

    Without ``input_ids`` the prompt statistics are zeros.
    """
    ent, conc, mid = (metrics[key].float() for key in ("entropy", "concentration", "mid_coverage"))
    probe = torch.stack([ent.mean(-1), conc.mean(-1), mid.mean(-1), mid.std(-1, unbiased=False)], -1)
    probe = probe.detach().cpu().double().numpy()
    stats = (
        np.zeros((probe.shape[0], 3)) if input_ids is None else prompt_features(input_ids, query_marker_ids)
    )
    if stats.shape[0] != probe.shape[0]:
        raise ValueError(
            f"input_ids batch ({stats.shape[0]}) differs from the metrics batch ({probe.shape[0]})"
        )
    return np.concatenate([probe, stats], axis=1)


class TaskDispatcher:
    """Coarse task classifier: multinomial logistic regression in numpy (L2, full-batch GD).

    Parameters
    ----------
    l2 : float
        Ridge penalty on the weights.
    steps : int
        Gradient steps.
    lr : float
        Step size.
    query_marker_ids : sequence of int
        Token ids whose presence is a feature (e.g. the tokens of "Question").
    """

    def __init__(
        self, l2: float = 1e-2, steps: int = 500, lr: float = 0.5, query_marker_ids: Sequence[int] = ()
    ) -> None:
        self.l2 = check_float("l2", l2, 0.0)
        self.steps = check_int("steps", steps, low=1)
        self.lr = check_float("lr", lr, 0.0, low_open=True)
        self.query_marker_ids = tuple(int(t) for t in query_marker_ids)
        self.classes_: tuple[str, ...] = ()
        self.mean_: np.ndarray | None = None
        self.std_: np.ndarray | None = None
        self.weights_: np.ndarray | None = None

    def fit(self, features: Any, labels: Sequence[str]) -> TaskDispatcher:
        """Fit on ``features [m, f]`` and task labels (each in :data:`TASKS`)."""
        x = np.asarray(features, dtype=np.float64)
        if x.ndim != 2 or x.shape[0] != len(labels) or x.shape[0] == 0:
            raise ValueError(
                f"features must be [m, f] with m = len(labels) > 0, got {x.shape} and {len(labels)} labels"
            )
        for lab in labels:
            check_choice("labels", lab, TASKS)
        self.classes_ = tuple(t for t in TASKS if t in set(labels))
        y = np.array([self.classes_.index(lab) for lab in labels])
        self.mean_ = x.mean(0)
        self.std_ = x.std(0) + 1e-6
        z = np.concatenate([(x - self.mean_) / self.std_, np.ones((len(x), 1))], 1)
        w = np.zeros((z.shape[1], len(self.classes_)))
        onehot = np.eye(len(self.classes_))[y]
        for _ in range(self.steps):
            logits = z @ w
            logits -= logits.max(1, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(1, keepdims=True)
            grad = z.T @ (p - onehot) / len(z)
            grad[:-1] += self.l2 * w[:-1]
            w -= self.lr * grad
        self.weights_ = w
        return self

    def predict_proba(self, features: Any) -> np.ndarray:
        """Class probabilities ``[m, len(classes_)]``."""
        if self.weights_ is None:
            raise RuntimeError("TaskDispatcher is not fitted; call fit() or load() first")
        x = np.atleast_2d(np.asarray(features, dtype=np.float64))
        if x.shape[1] != self.mean_.shape[0]:
            raise ValueError(f"features must have {self.mean_.shape[0]} columns, got {x.shape[1]}")
        z = np.concatenate([(x - self.mean_) / self.std_, np.ones((len(x), 1))], 1)
        logits = z @ self.weights_
        logits -= logits.max(1, keepdims=True)
        p = np.exp(logits)
        return p / p.sum(1, keepdims=True)

    def predict(self, features: Any) -> list[str]:
        """Predicted task names, one per row."""
        return [self.classes_[i] for i in self.predict_proba(features).argmax(1)]

    def save(self, path: str | Path) -> None:
        """Write the fitted dispatcher as JSON."""
        if self.weights_ is None:
            raise RuntimeError("TaskDispatcher is not fitted")
        data = {
            "l2": self.l2, "steps": self.steps, "lr": self.lr, "query_marker_ids": list(self.query_marker_ids),
            "classes": list(self.classes_), "mean": self.mean_.tolist(), "std": self.std_.tolist(),
            "weights": self.weights_.tolist(),
        }  # fmt: skip
        Path(path).write_text(json.dumps(data))

    @classmethod
    def load(cls, path: str | Path) -> TaskDispatcher:
        """Read a dispatcher written by :meth:`save`."""
        data = json.loads(Path(path).read_text())
        out = cls(data["l2"], data["steps"], data["lr"], data["query_marker_ids"])
        out.classes_ = tuple(data["classes"])
        out.mean_, out.std_ = np.array(data["mean"]), np.array(data["std"])
        out.weights_ = np.array(data["weights"])
        return out


# --------------------------------------------------------------------------------------------
# transformers integration
# --------------------------------------------------------------------------------------------
_STATS: dict[str, Any] = {"layers": []}


def last_stats() -> dict[str, Any]:
    """Statistics of the last prefill forward through a registered function.

    Returns ``{"method", "task", "features", "density", "layers"}``: ``density`` is the mean block
    density over layers, heads and batch; ``layers`` lists per-layer dicts with ``density``
    (``[b, h]`` list), ``head_type`` counts and, for AdaCal, the mean metrics.
    """
    layers = _STATS.get("layers", [])
    dens = [float(np.mean(x["density"])) for x in layers]
    return {
        **{k: v for k, v in _STATS.items() if k != "layers"},
        "layers": list(layers),
        "density": float(np.mean(dens)) if dens else float("nan"),
    }


class FeaturesReady(Exception):
    """Raised by the attention function in ``features_only`` mode after layer 0 (caught by callers)."""

    def __init__(self, features: np.ndarray) -> None:
        super().__init__("layer-0 dispatcher features computed")
        self.features = features


_FEATURES_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("adacal_features_only", default=False)


@contextlib.contextmanager
def features_only() -> Iterator[None]:
    """Within this context, a prefill through an ``"adacal"`` function stops after layer 0 by raising
    :class:`FeaturesReady` carrying the dispatcher features ``[b, 7]`` (cheap calibration data)."""
    tok = _FEATURES_ONLY.set(True)
    try:
        yield
    finally:
        _FEATURES_ONLY.reset(tok)


def _key_valid_from_mask(attention_mask: torch.Tensor | None, n: int) -> torch.Tensor | None:
    if attention_mask is None:
        return None
    last = attention_mask[:, 0, -1, -n:]
    valid = last if last.dtype == torch.bool else last > torch.finfo(last.dtype).min / 2
    return None if bool(valid.all()) else valid


def register_adacal_attention(
    config: AdaCalConfig | None = None,
    name: str = "adacal",
    method: str = "adacal",
    dispatcher: TaskDispatcher | None = None,
    flex_gamma: float = 0.9,
    flex_tau: float = 0.1,
) -> str:
    """Register a sparse-prefill attention function with ``transformers.AttentionInterface``.

    Also registers ``transformers``' SDPA mask builder under the same name, so the function
    receives the usual 4-D boolean mask (or ``None`` when plain causal). Select it with
    ``model.set_attn_implementation(name)`` or ``from_pretrained(..., attn_implementation=name)``.

    Parameters
    ----------
    config : AdaCalConfig, optional
        Block size and zones (also used by the baselines).
    name : str
        Registered name.
    method : {"adacal", "a_shape", "flexprefill", "dense"}
        Which block mask the prefill uses; ``"dense"`` = every causal block through the sparse path
        (a harness check that must equal eager attention).
    dispatcher : TaskDispatcher, optional
        Used when no explicit :func:`task` tag is set; fed with layer-0 features.
    flex_gamma, flex_tau : float
        FlexPrefill-like thresholds.

    Returns
    -------
    str
        ``name``.

    Notes
    -----
    Prefill (``q_len == kv_len > 1``) uses the planned sparse path; decode (``q_len == 1``) and
    chunked prefill over an existing cache (``1 < q_len < kv_len``) use dense SDPA.
    """
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    config = AdaCalConfig() if config is None else config
    if not isinstance(config, AdaCalConfig):
        raise TypeError(f"config must be an AdaCalConfig, got {type(config).__name__}")
    check_choice("method", method, METHODS)
    if (
        not isinstance(name, str)
        or not name
        or name in ("sdpa", "eager", "flex_attention")
        or name.startswith("flash")
    ):
        raise ValueError(f"name must be a new non-empty name, got {name!r}")
    check_float("flex_gamma", flex_gamma, 0.0, 1.0, low_open=True)
    check_float("flex_tau", flex_tau, 0.0, 1.0)

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        q_len, kv_len = query.shape[2], key.shape[2]
        if q_len == 1 or q_len != kv_len:
            return sdpa_attention_forward(
                module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
            )
        layer = int(getattr(module, "layer_idx", 0) or 0)
        if layer == 0:
            _STATS.clear()
            _STATS.update({"method": method, "layers": [], "task": None, "features": None})
        b, h, n, d = query.shape
        scale = d**-0.5 if scaling is None else float(scaling)
        key_valid = _key_valid_from_mask(attention_mask, n)
        B = config.block_size
        nb = _n_blocks(n, B)
        entry: dict[str, Any] = {"layer": layer}
        if method == "adacal":
            tag = _TASK.get()
            if tag is None and layer == 0 and (dispatcher is not None or _FEATURES_ONLY.get()):
                metrics = probe_metrics(
                    query,
                    key,
                    B,
                    config.probe_queries or B,
                    config.sink_blocks,
                    config.local_blocks,
                    scale,
                    key_valid,
                )
                marker_ids = dispatcher.query_marker_ids if dispatcher is not None else ()
                feats = dispatch_features(metrics, _INPUT_IDS.get(), marker_ids)
                _STATS["features"] = feats.tolist()
                if _FEATURES_ONLY.get():
                    raise FeaturesReady(feats)
                preds = dispatcher.predict(feats)
                # one task per forward: the most frequent prediction in the batch
                _STATS["task"] = max(set(preds), key=preds.count)
            chosen = tag or _STATS.get("task") or config.default_task
            _STATS["task"] = chosen
            plan = plan_blocks(query, key, config, chosen, scale, key_valid)
            mask = plan.mask
            entry["head_type"] = torch.bincount(plan.head_type.flatten(), minlength=3).tolist()
            entry.update(
                {m: float(plan.metrics[m].mean()) for m in ("entropy", "concentration", "mid_coverage")}
            )
        elif method == "a_shape":
            if config.sink_blocks + config.local_blocks + 1 >= nb:
                mask = _causal_blocks(nb, query.device)
            else:
                mask = a_shape_mask(n, B, config.sink_blocks, config.local_blocks).to(query.device)
            mask = mask.expand(b, h, nb, nb)
        elif method == "flexprefill":
            mask = flexprefill_mask(
                query,
                key,
                B,
                flex_gamma,
                flex_tau,
                config.probe_queries or B,
                scale,
                key_valid,
                return_pattern=True,
            )
            mask, qa = mask
            entry["query_aware"] = int(qa.sum())
        else:
            mask = _causal_blocks(nb, query.device).expand(b, h, nb, nb)
        entry["density"] = block_density(mask).tolist() if mask.dim() == 4 else [[float(block_density(mask))]]
        _STATS["layers"].append(entry)
        backend = "flex" if config.backend == "flex" else "masked"
        out = sparse_prefill_attention(query, key, value, mask, B, scale, attention_mask, backend=backend)
        return out, None

    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, sdpa_mask)
    return name


# --------------------------------------------------------------------------------------------
# policy calibration (grid search)
# --------------------------------------------------------------------------------------------
def _check_grid(name: str, grid: Any, low: float, low_open: bool) -> tuple[float, ...]:
    if isinstance(grid, (str, bytes)) or not isinstance(grid, Sequence) and not isinstance(grid, np.ndarray):
        raise TypeError(f"{name} must be a sequence of floats, got {type(grid).__name__}")
    values = tuple(float(x) for x in grid)
    if not values:
        raise ValueError(f"{name} must not be empty")
    for x in values:
        bad_low = x <= low if low_open else x < low
        if not math.isfinite(x) or bad_low or x > 1.0:
            side = "(" if low_open else "["
            raise ValueError(f"{name} values must lie in {side}{low:g}, 1], got {x!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"{name} has duplicate values: {list(values)}")
    return values


def calibrate_policies(
    evaluate: Callable[[str, TaskPolicy], tuple[float, float]],
    grid_theta_mid: Sequence[float],
    grid_gamma: Sequence[float],
    density_cap: float,
    tasks: Sequence[str] = TASKS,
    base_policies: Mapping[str, TaskPolicy] | None = None,
    return_table: bool = False,
) -> dict[str, TaskPolicy] | tuple[dict[str, TaskPolicy], list[dict[str, Any]]]:
    r"""Tune :math:`(\theta_{mid}, \gamma)` per task by grid search: best accuracy under a density cap.

    For each task ``t`` in ``tasks`` and each grid point, the candidate policy is
    ``base_policies[t]`` with ``theta_mid`` and ``gamma`` replaced (``theta_h``, ``augment`` and
    ``beta_max`` are kept); ``evaluate(t, candidate)`` returns ``(accuracy, density)`` on the
    caller's labelled calibration set. A point is *feasible* when ``density <= density_cap``.

    Selection (deterministic): among feasible points, the highest accuracy; ties broken by the
    lowest density, then by the smallest L1 distance
    :math:`|\theta_{mid}-\theta_{mid}^{0}|+|\gamma-\gamma^{0}|` to the base policy's values
    (rounded to 9 decimals, so float noise does not break a tie), then by grid order
    (``grid_theta_mid`` outer, ``grid_gamma`` inner). When no point is feasible the
    task keeps its base policy and a ``UserWarning`` says so.

    Parameters
    ----------
    evaluate : callable
        ``evaluate(task, policy) -> (accuracy, density)``; both finite, ``density >= 0``. Called
        once per task and grid point (see :func:`model_evaluator` for a ``transformers`` one).
    grid_theta_mid : sequence of float
        Values of ``theta_mid`` in ``[0, 1]`` (non-empty, distinct).
    grid_gamma : sequence of float
        Values of ``gamma`` in ``(0, 1]`` (non-empty, distinct).
    density_cap : float
        Largest admissible mean block density, in ``(0, 1]``.
    tasks : sequence of str
        Tasks to calibrate (distinct names from :data:`TASKS`); the others keep their base policy.
    base_policies : mapping, optional
        Policies to start from (default :data:`DEFAULT_POLICIES`); must define every task.
    return_table : bool
        Also return the evaluated grid: one dict per (task, point) with ``task``, ``theta_mid``,
        ``gamma``, ``accuracy``, ``density``, ``feasible`` and ``chosen``.

    Returns
    -------
    dict of str to TaskPolicy
        A policy for every task in :data:`TASKS`, ready for ``AdaCalConfig(policies=...)`` (and the
        table when ``return_table``).
    """
    if not callable(evaluate):
        raise TypeError(f"evaluate must be callable, got {type(evaluate).__name__}")
    thetas = _check_grid("grid_theta_mid", grid_theta_mid, 0.0, low_open=False)
    gammas = _check_grid("grid_gamma", grid_gamma, 0.0, low_open=True)
    check_float("density_cap", density_cap, 0.0, 1.0, low_open=True)
    if isinstance(tasks, str) or not isinstance(tasks, Sequence) or not tasks:
        raise ValueError(f"tasks must be a non-empty sequence of task names, got {tasks!r}")
    for t in tasks:
        check_choice("tasks", t, TASKS)
    if len(set(tasks)) != len(tasks):
        raise ValueError(f"tasks has duplicates: {list(tasks)}")
    base = dict(DEFAULT_POLICIES if base_policies is None else base_policies)
    missing = [t for t in TASKS if t not in base]
    if missing:
        raise ValueError(f"base_policies must define every task {list(TASKS)}; missing {missing}")
    for name, pol in base.items():
        if not isinstance(pol, TaskPolicy):
            raise TypeError(f"base_policies[{name!r}] must be a TaskPolicy, got {type(pol).__name__}")

    out = dict(base)
    table: list[dict[str, Any]] = []
    for t in tasks:
        b0 = base[t]
        rows = []
        for order, (theta, gamma) in enumerate((x, g) for x in thetas for g in gammas):
            cand = dataclasses.replace(b0, theta_mid=theta, gamma=gamma)
            res = evaluate(t, cand)
            if not isinstance(res, (tuple, list)) or len(res) != 2:
                raise ValueError(f"evaluate must return (accuracy, density), got {res!r}")
            acc, dens = float(res[0]), float(res[1])
            if not (math.isfinite(acc) and math.isfinite(dens)) or dens < 0:
                raise ValueError(f"evaluate returned a non-finite or negative value: ({acc}, {dens})")
            row = {"task": t, "theta_mid": theta, "gamma": gamma, "accuracy": acc, "density": dens}
            row.update(feasible=dens <= density_cap, chosen=False)
            rows.append((row, order, cand))
        feasible = [r for r in rows if r[0]["feasible"]]
        if feasible:
            best = min(
                feasible,
                key=lambda r: (
                    -r[0]["accuracy"],
                    r[0]["density"],
                    round(abs(r[0]["theta_mid"] - b0.theta_mid) + abs(r[0]["gamma"] - b0.gamma), 9),
                    r[1],
                ),
            )
            best[0]["chosen"] = True
            out[t] = best[2]
        else:
            warnings.warn(
                f"AdaCal calibration: no grid point of task {t!r} meets density_cap={density_cap:g} "
                f"(lowest density {min(r[0]['density'] for r in rows):.3f}); keeping the base policy",
                UserWarning,
                stacklevel=2,
            )
        table.extend(r[0] for r in rows)
    return (out, table) if return_table else out


def _default_is_correct(new_ids: list[int], answer: Any) -> bool:
    target = [int(answer)] if isinstance(answer, (int, np.integer)) else [int(a) for a in answer]
    return new_ids[: len(target)] == target


def model_evaluator(
    model: Any,
    examples: Mapping[str, Sequence[tuple[Any, Any]]],
    config: AdaCalConfig | None = None,
    max_new_tokens: int = 1,
    is_correct: Callable[[list[int], Any], bool] | None = None,
    name: str = "adacal_calibration",
) -> Callable[[str, TaskPolicy], tuple[float, float]]:
    """An ``evaluate(task, policy) -> (accuracy, density)`` for :func:`calibrate_policies` on a model.

    For a task and candidate policy it registers AdaCal (``config`` with that task's policy
    replaced) under ``name``, and for every ``(input_ids, answer)`` of ``examples[task]`` runs one
    AdaCal prefill under the explicit tag :func:`task` (the calibration set is labelled) followed
    by ``max_new_tokens - 1`` dense greedy decode steps, one prompt at a time. Accuracy is the mean
    of ``is_correct(new_ids, answer)``; density the mean of :func:`last_stats` ``["density"]``
    over the prompts. The model's attention implementation is restored afterwards.

    Parameters
    ----------
    model : transformers PreTrainedModel
        A causal LM supporting ``set_attn_implementation``.
    examples : mapping of str to sequence of (input_ids, answer)
        Labelled prompts per task; ``input_ids`` LongTensor ``[1, n]`` or ``[n]``.
    config : AdaCalConfig, optional
        Block size, zones and the other tasks' policies (default ``AdaCalConfig()``).
    max_new_tokens : int
        Greedy tokens generated per prompt (>= 1).
    is_correct : callable, optional
        ``is_correct(new_ids: list[int], answer) -> bool``; default: ``answer`` (an int or a
        sequence of ints) is a prefix of the generated ids.
    name : str
        Name under which the candidate attention functions are registered.
    """
    config = AdaCalConfig() if config is None else config
    if not isinstance(config, AdaCalConfig):
        raise TypeError(f"config must be an AdaCalConfig, got {type(config).__name__}")
    if not isinstance(examples, Mapping) or not examples:
        raise ValueError("examples must be a non-empty mapping task -> [(input_ids, answer), ...]")
    for t, rows in examples.items():
        check_choice("examples task", t, TASKS)
        if not rows:
            raise ValueError(f"examples[{t!r}] is empty")
    check_int("max_new_tokens", max_new_tokens, low=1)
    judge = _default_is_correct if is_correct is None else is_correct

    @torch.no_grad()
    def evaluate(task_name: str, policy: TaskPolicy) -> tuple[float, float]:
        from transformers import DynamicCache

        if task_name not in examples:
            raise ValueError(f"no calibration examples for task {task_name!r}")
        cfg = dataclasses.replace(config, policies={**dict(config.policies), task_name: policy})
        register_adacal_attention(cfg, name=name, method="adacal")
        previous = model.config._attn_implementation
        model.set_attn_implementation(name)
        hits, dens = [], []
        try:
            for ids, answer in examples[task_name]:
                ids = torch.as_tensor(ids, dtype=torch.long)
                ids = ids[None] if ids.dim() == 1 else ids
                cache = DynamicCache(config=model.config)
                with task(task_name, input_ids=ids):
                    logits = model(ids, cache=cache, use_cache=True).logits[:, -1]
                dens.append(float(last_stats()["density"]))
                new = []
                for step in range(max_new_tokens):
                    nxt = logits.argmax(-1, keepdim=True)
                    new.append(int(nxt))
                    if step + 1 < max_new_tokens:
                        logits = model(nxt, cache=cache, use_cache=True).logits[:, -1]
                hits.append(bool(judge(new, answer)))
        finally:
            model.set_attn_implementation(previous)
        return float(np.mean(hits)), float(np.mean(dens))

    return evaluate


def calibrate_policies_on_model(
    model: Any,
    examples: Mapping[str, Sequence[tuple[Any, Any]]],
    grid_theta_mid: Sequence[float],
    grid_gamma: Sequence[float],
    density_cap: float,
    config: AdaCalConfig | None = None,
    max_new_tokens: int = 1,
    is_correct: Callable[[list[int], Any], bool] | None = None,
    return_table: bool = False,
) -> dict[str, TaskPolicy] | tuple[dict[str, TaskPolicy], list[dict[str, Any]]]:
    """:func:`calibrate_policies` with :func:`model_evaluator`: tunes the tasks present in ``examples``.

    Returns policies for every task (starting from ``config.policies``), to be used as
    ``dataclasses.replace(config, policies=result)``.
    """
    config = AdaCalConfig() if config is None else config
    evaluate = model_evaluator(model, examples, config, max_new_tokens, is_correct)
    return calibrate_policies(
        evaluate,
        grid_theta_mid,
        grid_gamma,
        density_cap,
        tasks=tuple(examples),
        base_policies=config.policies,
        return_table=return_table,
    )

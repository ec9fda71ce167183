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

In one line, for query block :math:`i` of a dynamic head:

.. math::
    \mathcal S_i = \mathrm{mandatory}_i \cup \mathrm{top}_m(p_h) \cup
    \arg\min_{S:\ \sum_{j \in S} S_{ij} \ge \gamma} |S|,\qquad
    |\mathcal S_i| \le \max(\lceil \beta_{max}(i+1) \rceil, \#\mathrm{mandatory}_i)

Density of a head = selected blocks / causal blocks (:math:`n_b(n_b+1)/2`); it is the FLOP proxy of
the method (a block-sparse kernel would skip the unselected blocks). The reference CPU path computes
the masked product densely, so it is **not** faster than dense attention on CPU.

Baselines in this package: :func:`a_shape_mask` (sink + local window, StreamingLLM-style) and
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

Shapes
------
- ``q``: ``[b, h, n, d]``; ``k``, ``v``: ``[b, h_kv, n, d]`` (``h`` a multiple of ``h_kv``).
- probe distribution ``p``: ``[b, h, n_b]``; head metrics: ``[b, h]`` each.
- block masks: ``[b, h, n_b, n_b]`` bool (lower-triangular); :func:`a_shape_mask`: ``[n_b, n_b]``.
- :func:`sparse_prefill_attention` output: ``[b, h, n, d]``.

Modules
-------
- :mod:`.config`: :class:`TaskPolicy`, :data:`DEFAULT_POLICIES`, :class:`AdaCalConfig`, task/method names.
- :mod:`.dispatch`: :func:`task`, :func:`prompt_features`, :func:`dispatch_features`, :class:`TaskDispatcher`.
- :mod:`.probe`: :func:`probe_metrics`, :func:`metrics_from_distribution` (and the block-pooling helpers).
- :mod:`.masks`: :func:`a_shape_mask`, :func:`estimated_block_scores`, :func:`flexprefill_mask`,
  :func:`block_density`.
- :mod:`.plan`: :class:`BlockPlan`, :func:`plan_blocks`.
- :mod:`.attention`: :func:`sparse_prefill_attention`, :func:`flex_block_mask`.
- :mod:`.integration`: :func:`register_adacal_attention`, :func:`last_stats`, :func:`features_only`,
  :class:`FeaturesReady`.
- :mod:`.calibrate`: :func:`calibrate_policies`, :func:`model_evaluator`, :func:`calibrate_policies_on_model`.
"""

from neurips26.inference.adacal.attention import flex_block_mask, sparse_prefill_attention
from neurips26.inference.adacal.calibrate import (
    calibrate_policies,
    calibrate_policies_on_model,
    model_evaluator,
)
from neurips26.inference.adacal.config import (
    AUGMENT_MODES,
    BACKENDS,
    DEFAULT_POLICIES,
    HEAD_DENSE,
    HEAD_DYNAMIC,
    HEAD_STATIC,
    METHODS,
    TASKS,
    AdaCalConfig,
    TaskPolicy,
)
from neurips26.inference.adacal.dispatch import (
    FEATURE_NAMES,
    TaskDispatcher,
    dispatch_features,
    prompt_features,
    task,
)
from neurips26.inference.adacal.integration import (
    FeaturesReady,
    features_only,
    last_stats,
    register_adacal_attention,
)
from neurips26.inference.adacal.masks import (
    a_shape_mask,
    block_density,
    estimated_block_scores,
    flexprefill_mask,
)
from neurips26.inference.adacal.plan import BlockPlan, plan_blocks
from neurips26.inference.adacal.probe import metrics_from_distribution, probe_metrics

__all__ = [
    "AUGMENT_MODES",
    "BACKENDS",
    "DEFAULT_POLICIES",
    "FEATURE_NAMES",
    "HEAD_DENSE",
    "HEAD_DYNAMIC",
    "HEAD_STATIC",
    "METHODS",
    "TASKS",
    "AdaCalConfig",
    "BlockPlan",
    "FeaturesReady",
    "TaskDispatcher",
    "TaskPolicy",
    "a_shape_mask",
    "block_density",
    "calibrate_policies",
    "calibrate_policies_on_model",
    "dispatch_features",
    "estimated_block_scores",
    "features_only",
    "flex_block_mask",
    "flexprefill_mask",
    "last_stats",
    "metrics_from_distribution",
    "model_evaluator",
    "plan_blocks",
    "probe_metrics",
    "prompt_features",
    "register_adacal_attention",
    "sparse_prefill_attention",
    "task",
]

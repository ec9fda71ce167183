r"""``transformers`` integration: the registered AdaCal attention function and its per-call statistics.

:func:`register_adacal_attention` registers an ``AttentionInterface`` function that runs the probe,
the dispatch, the plan and the sparse attention per layer on prefill and dense SDPA on decode;
:func:`last_stats` returns the densities and head kinds of the last forward; :func:`features_only`
stops a forward once the dispatcher's features are known (:class:`FeaturesReady`).

.. math::
    \mathrm{attn}(Q, K, V) = \begin{cases} \mathrm{SDPA}(Q, K, V) & q_{len} = 1 \\
    \mathrm{sparse}(Q, K, V; \mathrm{plan}_\tau(Q, K)) & \text{prefill} \end{cases}

Shapes
------
Called by ``transformers`` with ``query [b, h, n, d]``, ``key``/``value`` ``[b, h_kv, n, d]``; returns
``([b, n, h, d], None)``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from neurips26.common.checks import check_choice, check_float
from neurips26.inference.adacal.attention import sparse_prefill_attention
from neurips26.inference.adacal.config import METHODS, AdaCalConfig
from neurips26.inference.adacal.dispatch import _INPUT_IDS, _TASK, TaskDispatcher, dispatch_features
from neurips26.inference.adacal.masks import a_shape_mask, block_density, flexprefill_mask
from neurips26.inference.adacal.plan import plan_blocks
from neurips26.inference.adacal.probe import _causal_blocks, _n_blocks, probe_metrics

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

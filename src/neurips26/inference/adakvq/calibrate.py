"""Calibrating the per-layer AAD profile, optionally data-parallel over ``torch.distributed``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from neurips26.common.checks import check_int
from neurips26.inference.adakvq.aad import AADProfile, AADTracker, register_aad_attention


def calibrate_aad(
    model: torch.nn.Module,
    input_ids_list: Iterable[torch.Tensor],
    tracker: AADTracker | None = None,
    max_new_tokens: int = 64,
    n_probe: int = 32,
) -> AADProfile:
    """Per-layer nAAD profile over calibration prompts, including greedy decoding positions.

    Temporarily switches the model to the registered AAD attention; restores it afterwards.
    ``input_ids_list``: iterable of ``LongTensor[1, T]`` (or ``[B, T]`` without padding).
    """
    check_int("max_new_tokens", max_new_tokens, low=0)
    tracker = tracker or AADTracker()
    name = register_aad_attention("adakvq_sdpa", n_probe)
    previous = model.config._attn_implementation
    model.set_attn_implementation(name)
    try:
        with torch.no_grad(), tracker.active():
            for ids in input_ids_list:
                if max_new_tokens:
                    model.generate(
                        ids,
                        attention_mask=torch.ones_like(ids),
                        max_new_tokens=max_new_tokens,
                        do_sample=False,
                        pad_token_id=getattr(model.config, "eos_token_id", None) or 0,
                    )
                else:
                    model(input_ids=ids)
    finally:
        model.set_attn_implementation(previous)
    return tracker.profile()


def all_reduce_profile(tracker: AADTracker, num_layers: int | None = None, group: Any = None) -> AADProfile:
    """Data-parallel calibration: all-reduce the per-layer nAAD statistics of every rank's tracker.

    Each rank calibrates on its own prompts; the (count, sum, sum of squares) per layer are summed with
    ``torch.distributed.all_reduce`` (gloo on CPU, NCCL on GPU), so every rank gets the profile of the
    union of the prompts (up to float rounding). Without an initialised process group the local
    profile (computed the same way) is returned.

    Parameters
    ----------
    tracker : AADTracker
    num_layers : int, optional
        Number of layers; by default the highest layer recorded on any rank + 1.
    group : ProcessGroup, optional

    Returns
    -------
    AADProfile with ``mean``/``std`` ``Tensor[L]`` and an empty ``series``.
    """
    import torch.distributed as dist

    distributed = dist.is_available() and dist.is_initialized()
    if num_layers is None:
        n = torch.tensor([max(tracker.series) + 1 if tracker.series else 0], dtype=torch.int64)
        if distributed:
            dist.all_reduce(n, op=dist.ReduceOp.MAX, group=group)
        num_layers = int(n)
    stats = tracker.stats(num_layers)
    if distributed:
        dist.all_reduce(stats, group=group)
    return AADProfile.from_stats(stats)

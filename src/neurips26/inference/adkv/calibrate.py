r"""Calibration of the ADKV rates as an RNN: recording attention inputs, BPTT on attention-output error.

:func:`record_qkv` captures queries, keys and values through a registered
``transformers.AttentionInterface`` function; :func:`calibrate_streams` fits ``eta_z, eta_s, gamma``
with straight-through rounding, truncated BPTT and Adam; :func:`calibrate_adkv` runs it per layer
(optionally over worker processes, bit-identical).

.. math::
    \mathcal{L} = \frac{\lVert \mathrm{attn}(Q, \hat K, \hat V) - \mathrm{attn}(Q, K, V) \rVert^2}
                       {\lVert \mathrm{attn}(Q, K, V) \rVert^2}

Shapes
------
- recorded ``q``: ``[B, H, T, d]``; ``k, v``: ``[B, H_kv, T, d]``; causal attention over the last
  ``n_query`` queries.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from contextlib import contextmanager
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from neurips26.common.checks import check_float, check_int
from neurips26.inference.adkv.outliers import select_outlier_channels
from neurips26.inference.adkv.quantizer import _META, ADKVConfig, ADKVQuantizer, ADKVState

_RECORDER: dict[str, Any] = {"store": None}


def _record_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    store = _RECORDER["store"]
    if store is not None:
        store.setdefault(module.layer_idx, []).append((query.detach(), key.detach(), value.detach()))
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
    )


_RECORD_NAME = "neurips26_adkv_record"


@contextmanager
def record_qkv(model: torch.nn.Module):
    """Record post-RoPE ``(query, key, value)`` per layer through a registered attention function.

    Yields a dict ``layer_idx -> list[(Tensor[B, Hq, T, D], Tensor[B, Hkv, T, D], Tensor[B, Hkv, T, D])]``;
    the model's attention implementation is restored afterwards.
    """
    AttentionInterface.register(_RECORD_NAME, _record_attention)
    AttentionMaskInterface.register(_RECORD_NAME, sdpa_mask)
    previous = model.config._attn_implementation
    store: dict[int, list] = {}
    _RECORDER["store"] = store
    model.set_attn_implementation(_RECORD_NAME)
    try:
        yield store
    finally:
        _RECORDER["store"] = None
        model.set_attn_implementation(previous)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n_query: int) -> torch.Tensor:
    """Causal attention outputs of the last ``n_query`` queries; q ``[..., Hq, T, D]``, k/v ``[..., Hkv, T, D]``."""
    hq, hk = q.shape[-3], k.shape[-3]
    rep = hq // hk
    if rep > 1:
        k = k.repeat_interleave(rep, dim=-3)
        v = v.repeat_interleave(rep, dim=-3)
    T = q.shape[-2]
    qs = q[..., T - n_query :, :]
    scores = qs @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    pos_q = torch.arange(T - n_query, T, device=q.device).unsqueeze(-1)
    mask = torch.arange(T, device=q.device).unsqueeze(0) > pos_q
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def calibrate_streams(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    config: ADKVConfig,
    steps: int = 200,
    lr: float = 1e-2,
    bptt: int = 64,
    batch_size: int = 8,
    n_query: int = 32,
    seed: int = 0,
    loss_layers: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """SGD calibration of ADKV parameters on recorded streams (the tensor core of :func:`calibrate_adkv`).

    Parameters
    ----------
    Q : Tensor[Ly, N, Hq, T, D]
        Post-RoPE queries of ``Ly`` layers on ``N`` calibration sequences.
    K, V : Tensor[Ly, N, Hkv, T, D]
        Post-RoPE keys and values (``Hq`` a multiple of ``Hkv``).
    config : ADKVConfig
        ``bits`` in [1, 8]; ``n_outliers`` channels per (layer, stream, head) of largest mean square
        over all sequences and tokens are kept exact (fp16) and excluded from the loss's quantisation.
    steps, lr, bptt, batch_size, n_query, seed : optimisation settings (Adam; the same random
        mini-batches of sequences for every layer).
    loss_layers : int, optional
        Number of layers the loss is averaged over (default ``Ly``). Layers do not interact, so
        calibrating a slice of the layers with ``loss_layers`` = the total reproduces the joint run
        for that slice (the basis of ``calibrate_adkv(..., workers > 1)``).

    Returns
    -------
    params : Tensor[Ly, 2, Hkv, 3, D]
        ``(eta_z, eta_s, gamma)`` per layer, stream (key, value), head and channel.
    outliers : LongTensor[Ly, 2, Hkv, n_outliers] or None (``n_outliers == 0``)
    """
    if not 1 <= config.bits <= 8:
        raise ValueError(f"calibration needs bits in [1, 8], got {config.bits}")
    check_int("steps", steps, low=0)
    check_float("lr", lr, 0.0, low_open=True)
    check_int("bptt", bptt, low=1)
    check_int("batch_size", batch_size, low=1)
    check_int("n_query", n_query, low=1)
    if K.dim() != 5 or V.shape != K.shape or Q.dim() != 5 or Q.shape[:2] != K.shape[:2]:
        raise ValueError(
            f"need Q [Ly, N, Hq, T, D] and K, V [Ly, N, Hkv, T, D]; got {tuple(Q.shape)}, {tuple(K.shape)}, "
            f"{tuple(V.shape)}"
        )
    n_ly, n_seq, hk, T, d = K.shape
    config.check_head_dim(d)
    n_norm = n_ly if loss_layers is None else check_int("loss_layers", loss_layers, low=n_ly)
    Q, K, V = Q.float(), K.float(), V.float()
    n_query = min(n_query, T)
    KV = torch.stack([K, V], 1)  # [Ly, 2, N, Hkv, T, D]
    outliers = mask = None
    if config.n_outliers:
        outliers = select_outlier_channels(KV, config.n_outliers, pool_dims=(2,))  # [Ly, 2, Hkv, n]
        mask = torch.zeros(n_ly, 2, 1, hk, 1, d, dtype=torch.bool)
        mask.scatter_(-1, outliers[:, :, None, :, None, :], True)
        exact = KV.to(_META).float()
    init = config.default_params(d, (n_ly, 2, hk))  # [Ly, 2, Hkv, 3, D]
    raw = torch.empty_like(init)
    raw[..., :2, :] = torch.logit(init[..., :2, :])
    raw[..., 2, :] = init[..., 2, :] + torch.log(-torch.expm1(-init[..., 2, :]))  # softplus^-1
    raw = raw.requires_grad_(True)
    opt = torch.optim.Adam([raw], lr=lr)
    gen = torch.Generator().manual_seed(seed)
    ns = min(config.sink_tokens, T - 1)  # the sink tokens are stored exactly (fp16), not ADKV-coded
    sink = KV[..., :ns, :].to(_META).float()
    n0 = min(config.init_tokens, T - ns)
    xp = KV[..., ns : ns + n0, :].double()
    z1 = xp.mean(-2).to(_META).float()  # [Ly, 2, N, Hkv, D]
    a1 = (xp - xp.mean(-2, keepdim=True)).abs().mean(-2).to(_META).float()

    def params_from(raw_t: torch.Tensor) -> torch.Tensor:
        eta = torch.sigmoid(raw_t[..., :2, :])
        gamma = torch.nn.functional.softplus(raw_t[..., 2:, :])
        return torch.cat([eta, gamma], dim=-2)

    with torch.no_grad():
        ref = _attention(Q, K, V, n_query)
        ref_pow = ref.pow(2).mean(dim=(1, 2, 3, 4), keepdim=True).clamp_min(1e-12)
    for _ in range(steps):
        idx = torch.randperm(n_seq, generator=gen)[: min(batch_size, n_seq)]
        p = params_from(raw).unsqueeze(2)  # [Ly, 2, 1, Hkv, 3, D]
        quant = ADKVQuantizer(d, config, p)
        state = ADKVState(z1[:, :, idx], a1[:, :, idx])
        xh = quant._run(KV[:, :, idx, :, ns:], state, p, torch.float32, stored=False, ste=True, bptt=bptt)[1]
        if mask is not None:
            xh = torch.where(mask, exact[:, :, idx, :, ns:], xh)
        if ns:
            xh = torch.cat([sink[:, :, idx], xh], -2)
        out = _attention(Q[:, idx], xh[:, 0], xh[:, 1], n_query)
        terms = (out - ref[:, idx]).pow(2).mean(dim=(1, 2, 3, 4), keepdim=True) / ref_pow
        loss = terms.mean() if n_norm == n_ly else terms.sum() / n_norm
        opt.zero_grad()
        loss.backward()
        opt.step()
    return params_from(raw.detach()), outliers


def validation_errors(K: torch.Tensor, V: torch.Tensor, params: torch.Tensor, config: ADKVConfig) -> torch.Tensor:
    """Per-channel reconstruction MSE of streams encoded exactly as :class:`ADKVCache` stores them.

    ``K, V: Tensor[Ly, N, Hkv, T, D]``; ``params: Tensor[Ly, 2, Hkv, 3, D]``. The first ``sink_tokens``
    tokens are exact (excluded), the initial state comes from the next ``init_tokens`` tokens, parameters
    are fp16-rounded and the encoder runs in float64 (the cache's arithmetic). Returns
    ``float64 [Ly, 2, Hkv, D]`` (mean over sequences and coded tokens).
    """
    ns = min(config.sink_tokens, K.shape[-2] - 1)
    x = torch.stack([K, V], 1)[..., ns:, :].double()  # [Ly, 2, N, Hkv, T', D]
    quant = ADKVQuantizer(x.shape[-1], config, params.unsqueeze(2))
    state = quant.init_state(x[..., : min(config.init_tokens, x.shape[-2]), :])
    _, xh, _ = quant.encode_raw(x, state)
    return (xh - x).pow(2).mean(dim=(2, 4))


def select_on_validation(
    params: torch.Tensor, K: torch.Tensor, V: torch.Tensor, config: ADKVConfig
) -> tuple[torch.Tensor, dict[str, float]]:
    """Keep each channel's calibrated ``(eta_z, eta_s, gamma)`` only where it lowers the channel's
    reconstruction error on held-out calibration streams (:func:`validation_errors`); elsewhere the
    defaults of ``config``. Channels are independent recurrences, so the choice is exact per channel.

    ``params: Tensor[Ly, 2, Hkv, 3, D]``; ``K, V: Tensor[Ly, N, Hkv, T, D]`` (validation sequences, ideally
    as long as the contexts the cache will hold: the calibration loss sees only short windows, and a
    rate that helps there can drift over hundreds of tokens). Returns the selected parameters and a report
    (share of channels keeping calibrated values; mean validation MSE relative to the signal power of
    the defaults, the calibrated and the selected parameters).
    """
    n_ly, _, hk, _, d = params.shape
    default = config.default_params(d, (n_ly, 2, hk)).to(params)
    e_def = validation_errors(K, V, default, config)
    e_cal = validation_errors(K, V, params, config)
    keep = e_cal < e_def  # [Ly, 2, Hkv, D]
    chosen = torch.where(keep.unsqueeze(-2), params, default)
    power = torch.stack([K, V], 1).double().pow(2).mean()
    report = {
        "kept_share": float(keep.double().mean()),
        "kept_share_key": float(keep[:, 0].double().mean()),
        "kept_share_value": float(keep[:, 1].double().mean()),
        "val_rel_mse_default": float(e_def.mean() / power),
        "val_rel_mse_calibrated": float(e_cal.mean() / power),
        "val_rel_mse_selected": float(torch.minimum(e_def, e_cal).mean() / power),
    }
    return chosen, report


def _calibrate_worker(args: tuple) -> tuple[torch.Tensor, torch.Tensor | None]:
    Q, K, V, config, kwargs, threads = args
    torch.set_num_threads(threads)  # a spawned worker process: its own global state
    return calibrate_streams(Q, K, V, config, **kwargs)


def calibrate_adkv(
    model: torch.nn.Module,
    calib_batches: Iterable[torch.Tensor],
    config: ADKVConfig,
    steps: int = 200,
    lr: float = 1e-2,
    bptt: int = 64,
    batch_size: int = 8,
    n_query: int = 32,
    seed: int = 0,
    workers: int = 1,
    validation: torch.Tensor | None = None,
    report: dict | None = None,
) -> dict[int, dict[str, torch.Tensor]]:
    """Calibrate per-channel ``(eta_z, eta_s, gamma)`` of every layer by SGD on attention-output error.

    The quantiser is unrolled as an RNN over the recorded key/value streams (all layers at once,
    independently), rounding uses a straight-through estimator, ``eta = sigmoid(.)`` and ``gamma =
    softplus(.)``. Loss: mean over layers of the relative MSE between causal attention outputs (last
    ``n_query`` queries) with reconstructed and exact keys/values. See :func:`calibrate_streams`.

    Parameters
    ----------
    model : transformers causal LM (Llama-style attention with ``layer_idx``).
    calib_batches : iterable of LongTensor[B, T]
        Token ids; every batch must have the same length ``T``.
    config : ADKVConfig (bits in [1, 8]).
    steps, lr, bptt, batch_size, n_query, seed : optimisation settings.
    validation : LongTensor[N, T_val], optional
        Held-out calibration token ids (not evaluation data). When given, every channel keeps its
        calibrated parameters only where they lower its reconstruction error on these sequences
        (:func:`select_on_validation`; channels without outliers only, ``n_outliers == 0``); elsewhere the
        defaults. Without it the SGD result is returned as is.
    report : dict, optional
        Filled with the validation report of :func:`select_on_validation` (``validation`` given).
    workers : int
        ``> 1`` splits the layers round-robin over that many spawned processes
        (``torch.multiprocessing``, each with the caller's intra-op thread count); layers are
        independent and every worker draws the same mini-batches, so the result equals ``workers=1``
        bit for bit (tested on tiny models and on 30 layers x 3 heads x 64 channels; torch's
        intra-op parallel reductions could in principle split differently for different layer
        counts, which would only change the last float bits).

    Returns
    -------
    dict ``layer_idx -> {"key": Tensor[kv_heads, 3, head_dim], "value": Tensor[kv_heads, 3, head_dim]}``,
    plus ``"key_outliers"``/``"value_outliers"`` (``LongTensor[kv_heads, n_outliers]``) when
    ``config.n_outliers > 0``.
    """
    if not 1 <= config.bits <= 8:
        raise ValueError(f"calibration needs bits in [1, 8], got {config.bits}")
    check_int("workers", workers, low=1)
    kwargs = dict(steps=steps, lr=lr, bptt=bptt, batch_size=batch_size, n_query=n_query, seed=seed)
    check_int("steps", steps, low=0)
    check_float("lr", lr, 0.0, low_open=True)
    check_int("bptt", bptt, low=1)
    check_int("batch_size", batch_size, low=1)
    check_int("n_query", n_query, low=1)
    batches = list(calib_batches)
    if not batches:
        raise ValueError("calib_batches must not be empty")
    with torch.no_grad(), record_qkv(model) as store:
        for ids in batches:
            model(input_ids=ids, use_cache=False)
    layers = sorted(store)
    Q = torch.stack([torch.cat([r[0] for r in store[i]], 0) for i in layers]).float()  # [Ly, N, Hq, T, D]
    K = torch.stack([torch.cat([r[1] for r in store[i]], 0) for i in layers]).float()
    V = torch.stack([torch.cat([r[2] for r in store[i]], 0) for i in layers]).float()
    n_ly = len(layers)
    workers = min(workers, n_ly)
    if workers == 1:
        params, outliers = calibrate_streams(Q, K, V, config, **kwargs)
    else:
        parts = [list(range(w, n_ly, workers)) for w in range(workers)]
        jobs = [
            (Q[p], K[p], V[p], config, {**kwargs, "loss_layers": n_ly}, torch.get_num_threads())
            for p in parts
        ]
        ctx = torch.multiprocessing.get_context("spawn")
        with ctx.Pool(workers) as pool:
            results = pool.map(_calibrate_worker, jobs)
        params = torch.empty(n_ly, *results[0][0].shape[1:])
        outliers = (
            None if results[0][1] is None else torch.empty(n_ly, *results[0][1].shape[1:], dtype=torch.long)
        )
        for p, (prm, out) in zip(parts, results):
            params[p] = prm
            if outliers is not None:
                outliers[p] = out
    if validation is not None:
        if config.n_outliers:
            raise ValueError("validation selection supports n_outliers == 0 only")
        if not isinstance(validation, torch.Tensor) or validation.dim() != 2 or validation.dtype != torch.long:
            raise ValueError("validation must be a LongTensor[N, T] of token ids")
        with torch.no_grad(), record_qkv(model) as vstore:
            model(input_ids=validation, use_cache=False)
        Kv = torch.stack([torch.cat([r[1] for r in vstore[i]], 0) for i in layers]).float()
        Vv = torch.stack([torch.cat([r[2] for r in vstore[i]], 0) for i in layers]).float()
        params, rep = select_on_validation(params, Kv, Vv, config)
        if report is not None:
            report.update(rep)
    result: dict[int, dict[str, torch.Tensor]] = {}
    for i, layer in enumerate(layers):
        entry = {"key": params[i, 0].clone(), "value": params[i, 1].clone()}
        if outliers is not None:
            entry["key_outliers"] = outliers[i, 0].clone()
            entry["value_outliers"] = outliers[i, 1].clone()
        result[layer] = entry
    return result

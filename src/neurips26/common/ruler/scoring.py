"""RULER scoring (``string_match_all`` / ``string_match_part``) and the batched greedy evaluators."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from neurips26.common.checks import check_choice, check_int
from neurips26.common.ruler.generators import generate
from neurips26.common.ruler.tasks import TASKS, RulerItem


def _clean(pred: str) -> str:
    return "".join(ch for ch in str(pred) if ch.isprintable() or ch in "\n\t").strip()


def _mean_score(preds: Sequence[str], refs: Sequence[Sequence[str]], metric: str) -> float:
    """Mean of :func:`score_item` over aligned ``preds`` and ``refs`` (equal, non-zero lengths)."""
    if len(preds) != len(refs):
        raise ValueError(f"preds ({len(preds)}) and refs ({len(refs)}) differ in length")
    if not preds:
        raise ValueError("preds must not be empty")
    return sum(score_item(p, r, metric) for p, r in zip(preds, refs)) / len(preds)


def string_match_all(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> float:
    """RULER's ``string_match_all``: mean over items of the fraction of references found (case-insensitive)."""
    return _mean_score(preds, refs, "all")


def string_match_part(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> float:
    """RULER's ``string_match_part``: mean over items of 1 if any reference is found, else 0."""
    return _mean_score(preds, refs, "part")


def score_item(pred: str, refs: Sequence[str], metric: str = "all") -> float:
    """Score of one prediction: fraction of ``refs`` contained in it (``all``) or any (``part``)."""
    check_choice("metric", metric, ("all", "part"))
    if isinstance(refs, str) or not refs:
        raise ValueError("refs must be a non-empty sequence of strings")
    text = _clean(pred).lower()
    hits = [1.0 if str(r).lower() in text else 0.0 for r in refs]
    return sum(hits) / len(hits) if metric == "all" else max(hits)


def _stop_ids(tokenizer: Any, model: Any) -> set[int]:
    stops = set()
    eos = (
        getattr(model.generation_config, "eos_token_id", None)
        if hasattr(model, "generation_config")
        else None
    )
    for e in eos if isinstance(eos, (list, tuple)) else [eos]:
        if e is not None:
            stops.add(int(e))
    if getattr(tokenizer, "eos_token_id", None) is not None:
        stops.add(int(tokenizer.eos_token_id))
    return stops


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def evaluate_items(
    model: Any,
    tokenizer: Any,
    items: Sequence[RulerItem],
    make_cache: Callable[[], Any] | None = None,
    attention: str | None = None,
    *,
    batch_size: int = 8,
    max_new_tokens: int | None = None,
) -> list[dict[str, Any]]:
    """Greedy generation for ``items`` in batches (left padding), one row per item.

    Each batch runs one prefill through ``make_cache()`` (``DynamicCache`` when None) under the
    attention implementation ``attention`` (the model's own when None), then decodes greedily until
    every row has produced an end-of-sequence token or a newline after some answer text, or
    ``max_new_tokens`` (default: the task's) tokens; the prediction is the text up to that newline. Rows: ``task, length, index, prediction, score, gen_tokens, prefill_s, decode_s``
    (batch times split evenly over its items).
    """
    import torch
    from transformers import DynamicCache

    check_int("batch_size", batch_size, low=1)
    previous = model.config._attn_implementation
    if attention is not None:
        model.set_attn_implementation(attention)
    stops = _stop_ids(tokenizer, model)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    rows: list[dict[str, Any]] = []
    try:
        for batch in _batches(items, batch_size):
            width = max(len(it.input_ids) for it in batch)
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for r, it in enumerate(batch):
                ids[r, width - len(it.input_ids) :] = torch.tensor(it.input_ids)
                mask[r, width - len(it.input_ids) :] = 1
            padded = bool((mask == 0).any())
            cache = make_cache() if make_cache is not None else DynamicCache(config=model.config)
            limit = max_new_tokens or max(it.max_new_tokens for it in batch)
            out, prefill_s, decode_s = _greedy(
                model, ids, mask if padded else None, cache, limit, stops, tokenizer
            )
            rows += _scored_rows(batch, out, tokenizer, prefill_s, decode_s)
    finally:
        if attention is not None:
            model.set_attn_implementation(previous)
    return rows


def _greedy(
    model, ids, mask, cache, max_new: int, stops: set[int], tokenizer
) -> tuple[list[list[int]], float, float]:
    import torch

    with torch.no_grad():
        start = time.perf_counter()
        kwargs: dict[str, Any] = {}
        if mask is not None:  # left padding: positions count real tokens only (as in generate)
            kwargs = {"attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)}
        logits = model(ids, cache=cache, use_cache=True, logits_to_keep=1, **kwargs).logits[:, -1]
        prefill_s = time.perf_counter() - start
        start = time.perf_counter()
        out: list[list[int]] = [[] for _ in range(ids.shape[0])]
        done = [False] * ids.shape[0]
        for step in range(max_new):
            nxt = logits.argmax(-1)
            for r, t in enumerate(nxt.tolist()):
                if done[r]:
                    continue
                if t in stops:
                    done[r] = True
                    continue
                piece = tokenizer.decode([t])
                if "\n" in piece and any(ch.isalnum() for ch in tokenizer.decode(out[r])):
                    done[r] = True  # a newline after some answer text ends it
                out[r].append(t)
            if all(done) or step == max_new - 1:
                break
            if mask is not None:
                mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype)], 1)
                kwargs = {"attention_mask": mask, "position_ids": mask.sum(-1, keepdim=True) - 1}
            logits = model(nxt[:, None], cache=cache, use_cache=True, **kwargs).logits[:, -1]
        decode_s = time.perf_counter() - start
    return out, prefill_s, decode_s


def compare_caches(
    model: Any,
    tokenizer: Any,
    items: Sequence[RulerItem],
    make_caches: Callable[[], dict[str, Any]],
    *,
    batch_size: int = 25,
    tail: int = 1,
    chunk: int | None = None,
    on_prefill_chunk: Callable[[int], None] | None = None,
    on_fill_chunk: Callable[[str, int], None] | None = None,
    arm_context: Callable[[str], Any] | None = None,
    prefill_context: Callable[[], Any] | None = None,
    inspect: Callable[[str, Any], dict[str, float]] | None = None,
    max_new_tokens: int | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Greedy generation of the same items through several KV caches that share one prefill.

    The KIVI protocol: each batch (items of equal length) is prefilled once in full precision through
    a ``DynamicCache`` (in chunks of ``chunk`` tokens, all but the last ``tail`` tokens); every arm's
    fresh cache from ``make_caches()`` is then filled with those key/value states chunk by chunk
    (``cache.update``, exactly what a prefill through that cache stores), and the last ``tail`` prompt
    tokens plus the greedy decode read the arm's (compressed) cache. ``make_caches`` must return the
    arms in the same order every call.

    Hooks: ``on_prefill_chunk(i)`` after prefill chunk ``i``; ``on_fill_chunk(arm, i)`` before chunk
    ``i`` enters the arm's cache (and with ``i`` = number of chunks before the tail); ``arm_context(arm)`` a context manager around the arm's fill and
    decode, ``prefill_context()`` one around each batch's shared prefill; ``inspect(arm, cache)`` extra per-batch numbers (e.g. average bits) copied into its rows.

    Returns
    -------
    dict
        ``arm -> rows`` (one per item, in ``items`` order within each cell) with the fields of
        :func:`evaluate_items` plus ``inspect``'s.
    """
    import contextlib

    import torch
    from transformers import DynamicCache

    check_int("batch_size", batch_size, low=1)
    check_int("tail", tail, low=1)
    stops = _stop_ids(tokenizer, model)
    out: dict[str, list[dict[str, Any]]] = {}
    for batch in _batches(items, batch_size):
        widths = {len(it.input_ids) for it in batch}
        if len(widths) != 1:
            raise ValueError(
                f"compare_caches needs items of equal token length per cell, got {sorted(widths)}"
            )
        ids = torch.tensor([it.input_ids for it in batch], dtype=torch.long)
        split = ids.shape[1] - tail
        step = chunk or split
        bounds = [(s, min(s + step, split)) for s in range(0, split, step)]
        start = time.perf_counter()
        pre = DynamicCache(config=model.config)
        kv: list[list[tuple[torch.Tensor, torch.Tensor]]] = []
        pctx = prefill_context() if prefill_context is not None else contextlib.nullcontext()
        with pctx, torch.no_grad():
            for i, (s, e) in enumerate(bounds):
                model.model(ids[:, s:e], cache=pre, use_cache=True)
                kv.append([(lay.keys[..., s:e, :], lay.values[..., s:e, :]) for lay in pre.layers])
                if on_prefill_chunk is not None:
                    on_prefill_chunk(i)
        prefill_s = time.perf_counter() - start
        for arm, cache in make_caches().items():
            ctx = arm_context(arm) if arm_context is not None else contextlib.nullcontext()
            start = time.perf_counter()
            with ctx, torch.no_grad():
                if hasattr(cache, "bulk_prefill") and len(kv) == 1 and on_fill_chunk is None:
                    cache.bulk_prefill(kv[0])  # same stored state as layer-wise updates
                    kv_iter: list = []
                else:
                    kv_iter = kv
                for i, chunk_kv in enumerate(kv_iter):
                    if on_fill_chunk is not None:
                        on_fill_chunk(arm, i)
                    for layer_idx, (k, v) in enumerate(chunk_kv):
                        cache.update(k, v, layer_idx)
                if on_fill_chunk is not None:
                    on_fill_chunk(arm, len(kv))  # after the last chunk, before the tail
                gen, tail_s, decode_s = _greedy(
                    model,
                    ids[:, split:],
                    None,
                    cache,
                    max_new_tokens or max(it.max_new_tokens for it in batch),
                    stops,
                    tokenizer,
                )
            extra = inspect(arm, cache) if inspect is not None else {}
            arm_s = time.perf_counter() - start
            more = {"arm_s": arm_s / len(batch), **extra}
            out.setdefault(arm, []).extend(_scored_rows(batch, gen, tokenizer, prefill_s, decode_s, more))
    return out


def _batches(items: Sequence[RulerItem], batch_size: int) -> list[list[RulerItem]]:
    """Items grouped into ``(task, length)`` cells (in first-seen order), each cut into batches."""
    groups: dict[tuple[str, int], list[RulerItem]] = {}
    for it in items:
        groups.setdefault((it.task, it.length), []).append(it)
    return [cell[b : b + batch_size] for cell in groups.values() for b in range(0, len(cell), batch_size)]


def _scored_rows(
    batch: Sequence[RulerItem],
    generated: Sequence[Sequence[int]],
    tokenizer: Any,
    prefill_s: float,
    decode_s: float,
    more: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One row per item of a batch: its answer text, score, generated length and per-item share of
    the batch's prefill and decode seconds, then the ``more`` fields."""
    rows = []
    for r, it in enumerate(batch):
        text = _answer_text(tokenizer.decode(generated[r], skip_special_tokens=True))
        row = {
            "task": it.task,
            "length": it.length,
            "index": it.index,
            "prediction": text,
            "score": score_item(text, it.answers, it.metric),
            "gen_tokens": len(generated[r]),
            "prefill_s": prefill_s / len(batch),
            "decode_s": decode_s / len(batch),
        }
        rows.append({**row, **(more or {})})
    return rows


def _answer_text(text: str) -> str:
    """The generated text up to the first newline that follows some answer text."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if any(ch.isalnum() for ch in line):
            return "\n".join(lines[: i + 1]).strip()
    return text.strip()


def summarise(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (task, length) cell: ``n, accuracy, gen_tokens, prefill_s, decode_s, s_per_item``."""
    cells: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["task"], r["length"]), []).append(r)
    out = []
    for (task, length), rs in cells.items():
        n = len(rs)
        out.append(
            {
                "task": task,
                "length": length,
                "n": n,
                "accuracy": sum(r["score"] for r in rs) / n,
                "gen_tokens": sum(r["gen_tokens"] for r in rs) / n,
                "prefill_s": sum(r["prefill_s"] for r in rs),
                "decode_s": sum(r["decode_s"] for r in rs),
                "s_per_item": sum(r["prefill_s"] + r["decode_s"] for r in rs) / n,
            }
        )
    return out


def evaluate(
    model: Any,
    tokenizer: Any,
    make_cache: Callable[[], Any] | None = None,
    attention: str | None = None,
    tasks: Sequence[str] = ("niah_single_1",),
    lengths: Sequence[int] = (1024,),
    n: int = 50,
    seed: int = 0,
    *,
    depth: float | None = None,
    batch_size: int = 8,
    template: str = "chat",
    max_new_tokens: int | None = None,
) -> list[dict[str, Any]]:
    """Generate the suite (untimed), run batched greedy generation, return the per-cell table.

    Returns
    -------
    list of dict
        One row per (task, length): ``task, length, n, accuracy`` (RULER string match, in [0, 1]),
        ``gen_tokens`` (mean generated length), ``prefill_s``/``decode_s`` (total seconds),
        ``s_per_item`` and ``peak_rss_mb`` (process peak resident memory after the cell).
    """
    for t in tasks:
        check_choice("task", t, TASKS)
    if not tasks or not lengths:
        raise ValueError("tasks and lengths must not be empty")
    table = []
    for task in tasks:
        for length in lengths:
            items = generate(task, tokenizer, int(length), n, seed, depth, template=template)
            rows = evaluate_items(
                model,
                tokenizer,
                items,
                make_cache,
                attention,
                batch_size=batch_size,
                max_new_tokens=max_new_tokens,
            )
            cell = summarise(rows)[0]
            cell["peak_rss_mb"] = _peak_rss_mb()
            table.append(cell)
    return table

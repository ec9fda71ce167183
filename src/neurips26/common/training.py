"""A small, seeded language-model training loop and a cache for its checkpoints.

:func:`train_lm` is plain supervised next-token training (AdamW, linear warm-up then cosine decay
from ``transformers.get_cosine_schedule_with_warmup``, global-norm gradient clipping) with a data
order fixed by ``seed``. :func:`train_or_load` wraps it in :func:`neurips26.common.cache.cached_dir`
so that a claim check reuses a trained tiny model (``save_pretrained`` safetensors) instead of
retraining it on every run.

Examples are token-id sequences, optionally with a per-token loss mask (e.g. loss only on the
completion of a prompt/completion pair). Batches are right-padded; padded positions and masked
positions get label ``-100`` (ignored by every ``transformers`` LM head).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from neurips26.common.cache import cached_dir
from neurips26.common.checks import check_float, check_int

Example = Sequence[int] | Mapping[str, Sequence[int]]


def _normalise(example: Example, index: int) -> tuple[list[int], list[int]]:
    if isinstance(example, Mapping):
        if "input_ids" not in example:
            raise ValueError(f"examples[{index}] is a mapping without 'input_ids'")
        ids = [int(t) for t in example["input_ids"]]
        mask = example.get("loss_mask")
        mask = [1] * len(ids) if mask is None else [int(bool(m)) for m in mask]
        if len(mask) != len(ids):
            raise ValueError(f"examples[{index}]: loss_mask has length {len(mask)}, input_ids {len(ids)}")
    else:
        ids = [int(t) for t in example]
        mask = [1] * len(ids)
    if len(ids) < 2:
        raise ValueError(f"examples[{index}] must have at least 2 tokens, got {len(ids)}")
    return ids, mask


def collate(examples: Sequence[Example], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a list of examples into ``input_ids``, ``attention_mask`` and ``labels`` (B, L).

    ``labels`` equals ``input_ids`` where the loss mask is 1 and ``-100`` elsewhere (padding,
    masked prompt tokens). The label of position 0 is never used by a causal LM (labels are
    shifted inside the model).
    """
    rows = [_normalise(e, i) for i, e in enumerate(examples)]
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, (ids, mask) in enumerate(rows):
        n = len(ids)
        input_ids[i, :n] = torch.tensor(ids)
        attention[i, :n] = 1
        keep = torch.tensor(mask, dtype=torch.bool)
        labels[i, :n] = torch.where(keep, torch.tensor(ids), torch.tensor(-100))
    return {"input_ids": input_ids, "attention_mask": attention, "labels": labels}


def train_lm(
    model: torch.nn.Module,
    examples: Sequence[Example],
    *,
    steps: int,
    batch_size: int = 32,
    lr: float = 1e-3,
    warmup: int = 10,
    clip: float | None = 1.0,
    weight_decay: float = 0.01,
    seed: int = 0,
    pad_id: int = 0,
    log_every: int = 10,
    callback: Callable[[int, float], None] | None = None,
) -> dict[str, Any]:
    """Train ``model`` on ``examples`` for ``steps`` optimizer steps; return a history dict.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        Any model whose forward takes ``input_ids, attention_mask, labels`` and returns ``.loss``.
    examples : sequence
        Token-id lists, or mappings with ``input_ids`` and optional ``loss_mask`` (same length).
    steps : int
        Optimizer steps (>= 1). Data is visited in epochs of a seeded permutation.
    batch_size : int
        Examples per step.
    lr, warmup, weight_decay : float, int, float
        AdamW peak learning rate, linear warm-up steps, decoupled weight decay. After warm-up the
        rate follows a half cosine down to 0 at ``steps``.
    clip : float or None
        Max global gradient norm (``None`` disables clipping).
    seed : int
        Seeds the data order (a private ``torch.Generator``) and any dropout (forked global RNG).
    pad_id : int
        Padding id for the collated batches.
    log_every : int
        Record the mean loss of every ``log_every`` steps in ``history["loss"]``.
    callback : callable, optional
        ``callback(step, loss)`` after each step.

    Returns
    -------
    dict
        ``loss`` (list of window means), ``final_loss``, ``steps``, ``seconds``, ``step_s``.
    """
    from transformers import get_cosine_schedule_with_warmup

    check_int("steps", steps, low=1)
    check_int("batch_size", batch_size, low=1)
    check_float("lr", lr, 0.0, low_open=True)
    check_int("warmup", warmup, low=0)
    check_float("weight_decay", weight_decay, 0.0)
    check_int("seed", seed, low=0)
    check_int("log_every", log_every, low=1)
    if clip is not None:
        check_float("clip", clip, 0.0, low_open=True)
    if len(examples) == 0:
        raise ValueError("examples must not be empty")
    data = [_normalise(e, i) for i, e in enumerate(examples)]
    data = [{"input_ids": ids, "loss_mask": mask} for ids, mask in data]

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    scheduler = get_cosine_schedule_with_warmup(optimizer, warmup, steps)
    generator = torch.Generator().manual_seed(seed)
    order: list[int] = []
    history: dict[str, Any] = {"loss": [], "lr": []}
    window: list[float] = []
    model.train()
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for step in range(steps):
            if len(order) < batch_size:
                order += torch.randperm(len(data), generator=generator).tolist()
                while len(order) < batch_size:  # tiny data sets: concatenate more epochs
                    order += torch.randperm(len(data), generator=generator).tolist()
            idx, order = order[:batch_size], order[batch_size:]
            batch = collate([data[i] for i in idx], pad_id)
            loss = model(**batch).loss
            if not torch.isfinite(loss):
                raise FloatingPointError(f"training loss became {loss.item()} at step {step}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(params, clip)
            optimizer.step()
            scheduler.step()
            window.append(loss.item())
            if callback is not None:
                callback(step, window[-1])
            if len(window) == log_every or step == steps - 1:
                history["loss"].append(sum(window) / len(window))
                history["lr"].append(scheduler.get_last_lr()[0])
                window = []
    seconds = time.perf_counter() - start
    model.eval()
    history.update(final_loss=history["loss"][-1], steps=steps, seconds=seconds, step_s=seconds / steps)
    return history


def load_checkpoint(folder: str | Path, dtype: torch.dtype = torch.float32):
    """Load a model saved with ``save_pretrained`` using the class named in its config."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(str(folder))
    architecture = (config.architectures or [None])[0]
    model_cls = getattr(transformers, architecture, None) if architecture else None
    if model_cls is None:
        model_cls = transformers.AutoModelForCausalLM
    model = model_cls.from_pretrained(str(folder), dtype=dtype)
    model.eval()
    return model


def train_or_load(
    namespace: str,
    key: Mapping[str, Any],
    make_model: Callable[[], torch.nn.Module],
    examples: Sequence[Example] | Callable[[], Sequence[Example]],
    **train_kwargs: Any,
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Train a model once and cache it; later calls with the same key load it from disk.

    Parameters
    ----------
    namespace : str
        Cache namespace (folder name), e.g. ``"archer-sft"``.
    key : mapping
        JSON-serialisable description of everything that determines the model and the data
        (preset, sizes, task config, seed). ``train_kwargs`` are added to it automatically.
    make_model : callable
        Returns the untrained model (e.g. ``lambda: build_tiny_lm("llama", ...)``).
    examples : sequence or callable
        Training examples, or a function producing them (only called on a cache miss).
    **train_kwargs
        Passed to :func:`train_lm` (``steps`` required).

    Returns
    -------
    (model, history)
        The model in eval mode loaded from the cache entry and the training history (with
        ``cached`` set to whether this call reused an existing entry).
    """
    if "callback" in train_kwargs:
        raise ValueError("train_or_load does not accept a callback (it would not run on a cache hit)")
    full_key = {"key": dict(key), "train": train_kwargs}
    built = {"flag": False}

    def _build(folder: Path) -> None:
        model = make_model()
        data = examples() if callable(examples) else examples
        history = train_lm(model, data, **train_kwargs)
        model.save_pretrained(folder)
        (folder / "history.json").write_text(json.dumps(history, default=float))
        built["flag"] = True

    folder = cached_dir(namespace, full_key, _build)
    history = json.loads((folder / "history.json").read_text())
    history["cached"] = not built["flag"]
    history["folder"] = str(folder)
    return load_checkpoint(folder), history


def cosine_lr(step: int, *, steps: int, warmup: int, peak: float) -> float:
    """The learning rate :func:`train_lm` uses at ``step`` (for plots and tests)."""
    if step < warmup:
        return peak * step / max(1, warmup)
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


__all__ = ["collate", "train_lm", "train_or_load", "load_checkpoint", "cosine_lr"]

"""AMARIS claim: the SmolLM2-135M + LoRA specialist arm (opt-in claim ``amaris_smollm2``)."""

from __future__ import annotations

import random
import time

import numpy as np
import torch

from neurips26.claims.amaris.shared import HEADLINE_SPEC, METHOD, REFERENCES, _frontier, _hypervolume
from neurips26.common.models import build_tiny_lm
from neurips26.editing.amaris import (
    AmarisConfig,
    amaris_merge_lora,
    collect_activation_moments,
    dare_merge,
    task_arithmetic_merge,
    ties_merge,
)

#: Bump when the SmolLM2 arm's cached sets or LoRA training change.
SMOL_CACHE_VERSION = 1


# ------------------------------------------------------------------------ SmolLM2 + LoRA arm
# Opt-in (``config["smollm2"]``; only :data:`SMOLLM2_CLAIM` sets it). A LoRA specialist is trained on
# the top ``lora_layers`` decoder layers only, so everything below them is the frozen base: the inputs of
# the first LoRA layer are computed once per text (``prefix_hidden``) and every training step, calibration
# pass and merge evaluation runs only the top layers (``TopStack``) and the LM head at scored positions.
# This is exact: the lower layers' outputs do not depend on any merged weight.
class _Stop(Exception):
    """Raised by a forward pre-hook to end a forward pass early."""


def _decoder(lm):
    """The decoder stack (``LlamaModel``-like, with ``.layers``) of a causal LM or a peft wrapper of one."""
    inner = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
    return inner.model


def prefix_hidden(lm, input_ids: torch.Tensor, attention_mask: torch.Tensor, start: int) -> torch.Tensor:
    """Input hidden states ``(B, L, d)`` of decoder layer ``start``, running only the layers below it."""
    dec = _decoder(lm)
    if not 0 < start < len(dec.layers):
        raise ValueError(f"start must be in [1, {len(dec.layers) - 1}], got {start}")
    captured = []

    def hook(_module, args, kwargs):
        captured.append(args[0] if args else kwargs["hidden_states"])
        raise _Stop

    handle = dec.layers[start].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            lm(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    except _Stop:
        pass
    finally:
        handle.remove()
    return captured[0].detach()


class TopStack(torch.nn.Module):
    """Decoder layers ``start..`` and the final norm of ``lm`` (parameters shared) on cached hidden states."""

    def __init__(self, lm, start: int):
        super().__init__()
        self.lm, self.start = lm, start

    def forward(
        self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        dec = _decoder(self.lm)
        full = dec.layers
        dec.layers = torch.nn.ModuleList(list(full)[self.start :])
        try:
            return dec(
                inputs_embeds=inputs_embeds, attention_mask=attention_mask, use_cache=False
            ).last_hidden_state
        finally:
            dec.layers = full


def _lm_head(lm):
    inner = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
    return inner.get_output_embeddings()


def _encode_items(encode, items: list[tuple[str, str]], pad_id: int) -> dict:
    """Prompt/answer pairs -> right-padded ids, mask and the (row, position, target) of every answer token."""
    seqs, rows, pos, tgt = [], [], [], []
    for i, (prompt, answer) in enumerate(items):
        p, a = encode(prompt), encode(answer)
        seqs.append(p + a)
        for j, t in enumerate(a):
            rows.append(i)
            pos.append(len(p) + j - 1)
            tgt.append(t)
    return _pad(seqs, pad_id) | {
        "rows": torch.tensor(rows),
        "pos": torch.tensor(pos),
        "tgt": torch.tensor(tgt),
    }


def _encode_text(encode, texts: list[str], n_tokens: int, pad_id: int) -> dict:
    """Real text -> its first ``n_tokens`` tokens; every next-token position is scored (one item each)."""
    seqs = [encode(t)[:n_tokens] for t in texts]
    rows = [i for i, s in enumerate(seqs) for _ in range(len(s) - 1)]
    pos = [j for s in seqs for j in range(len(s) - 1)]
    tgt = [s[j + 1] for s in seqs for j in range(len(s) - 1)]
    return _pad(seqs, pad_id) | {
        "rows": torch.tensor(rows),
        "pos": torch.tensor(pos),
        "tgt": torch.tensor(tgt),
    }


def _pad(seqs: list[list[int]], pad_id: int) -> dict:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    return {"input_ids": ids, "attention_mask": mask}


def _subset(data: dict, idx: list[int]) -> dict:
    """Rows ``idx`` of an encoded set (hidden states included), positions re-indexed."""
    where = {r: k for k, r in enumerate(idx)}
    keep = torch.tensor([int(r) in where for r in data["rows"]], dtype=torch.bool)
    out = {k: data[k][idx] for k in ("input_ids", "attention_mask", "hidden")}
    out["rows"] = torch.tensor([where[int(r)] for r in data["rows"][keep]], dtype=torch.long)
    out["pos"], out["tgt"] = data["pos"][keep], data["tgt"][keep]
    return out


def _correct(top: TopStack, head, data: dict, chunk: int = 64) -> torch.Tensor:
    """Per scored position: does the argmax of the top stack + head equal the target (teacher forced)."""
    out = []
    with torch.no_grad():
        for lo in range(0, data["hidden"].shape[0], chunk):
            hi = min(lo + chunk, data["hidden"].shape[0])
            sel = (data["rows"] >= lo) & (data["rows"] < hi)
            h = top(data["hidden"][lo:hi], data["attention_mask"][lo:hi])
            logits = head(h[data["rows"][sel] - lo, data["pos"][sel]])
            out.append(logits.argmax(-1) == data["tgt"][sel])
    return torch.cat(out)


def _item_accuracy(top, head, data) -> float:
    """Exact match of every answer token (teacher-forced argmax = greedy decoding for exact match)."""
    ok = _correct(top, head, data)
    n = data["hidden"].shape[0]
    wrong = torch.zeros(n, dtype=torch.long).index_add_(0, data["rows"], (~ok).long())
    return float((wrong == 0).double().mean())


def _token_accuracy(top, head, data) -> float:
    return float(_correct(top, head, data).double().mean())


def _smol_texts(task: str, n: int, seed: int) -> list[tuple[str, str]]:
    import reasoning_gym

    data = reasoning_gym.create_dataset(task, size=n, seed=seed)
    return [(f"{x['question']}\nAnswer:", f" {x['answer']}") for x in data]


def _smol_model(s: dict):
    """``(lm, encode, pad_id)``: SmolLM2-135M-Instruct, or a tiny random Llama with a char tokenizer."""
    if s["model"] == "smollm2-135m":
        from neurips26.common.models import load_pretrained

        lm, tok = load_pretrained("smollm2-135m")
        return lm, (lambda text: tok(text, add_special_tokens=False)["input_ids"]), int(tok.pad_token_id)
    import string

    from neurips26.common.tokenizers import char_tokenizer

    tok = char_tokenizer(string.printable, add_bos=False, padding_side="right")
    lm = build_tiny_lm(
        "llama",
        vocab_size=len(tok),
        seed=s["init_seed"],
        hidden_size=s["hidden"],
        intermediate_size=2 * s["hidden"],
        num_hidden_layers=s["layers"],
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
    )
    lm.eval()
    return lm, (lambda text: tok(text, add_special_tokens=False)["input_ids"]), int(tok.pad_token_id)


def _smol_sets(s: dict, lm, encode, pad_id: int, start: int) -> dict:
    """Encoded training, calibration and evaluation pools with the cached inputs of layer ``start``."""
    from neurips26.common.text import corpus_text

    sets = {
        "train": _encode_items(encode, _smol_texts(s["task"], s["n_train"], 1), pad_id),
        "spec_pool": _encode_items(encode, _smol_texts(s["task"], s["n_pool"], 2), pad_id),
        "core_pool": _encode_text(
            encode,
            [corpus_text(s["text_chars"], 10_000 + i) for i in range(s["n_core_pool"])],
            s["core_tokens"],
            pad_id,
        ),
        "core_calib": _encode_text(
            encode,
            [corpus_text(s["text_chars"], 20_000 + i) for i in range(s["n_calib"])],
            s["core_tokens"],
            pad_id,
        ),
    }
    for data in sets.values():
        data["hidden"] = torch.cat(
            [
                prefix_hidden(lm, data["input_ids"][i : i + 64], data["attention_mask"][i : i + 64], start)
                for i in range(0, data["input_ids"].shape[0], 64)
            ]
        )
    return sets


def _lora_config(s: dict, start: int, n_layers: int):
    from peft import LoraConfig

    return LoraConfig(
        r=s["lora_r"],
        lora_alpha=2 * s["lora_r"],
        lora_dropout=0.0,
        target_modules=list(s["lora_modules"]),
        layers_to_transform=list(range(start, n_layers)),
    )


def lora_seed(s: dict, seed: int) -> int:
    """The fine-tuning seed of run seed ``seed``: every seed trains its own LoRA specialist (LoRA
    initialisation and batch order) from the one pretrained base, ``s["train_seed"] + seed``."""
    return int(s["train_seed"]) + int(seed)


def _train_lora(s: dict, lm, sets: dict, start: int, train_seed: int) -> dict:
    """Train the LoRA specialist from the cached hidden states (LoRA init and batch order from
    ``train_seed``); return its adapter state dict and loss."""
    from peft import get_peft_model, get_peft_model_state_dict

    n_layers = len(_decoder(lm).layers)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(train_seed)
        pm = get_peft_model(lm, _lora_config(s, start, n_layers))
        top, head = TopStack(pm, start), _lm_head(pm)
        params = [p for p in pm.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=s["lr"], weight_decay=0.0)
        g = torch.Generator().manual_seed(train_seed)
        data, losses = sets["train"], []
        n = data["hidden"].shape[0]
        for _ in range(s["steps"]):
            batch = _subset(data, sorted(torch.randperm(n, generator=g)[: s["batch"]].tolist()))
            h = top(batch["hidden"], batch["attention_mask"])
            logits = head(h[batch["rows"], batch["pos"]])
            loss = torch.nn.functional.cross_entropy(logits, batch["tgt"])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            losses.append(loss.item())
    state = {k: v.detach().clone() for k, v in get_peft_model_state_dict(pm).items()}
    pm.unload()  # the plain base model again (LoRA layers removed, weights untouched)
    return {"state": state, "final_loss": float(np.mean(losses[-10:])), "first_loss": losses[0]}


class _weights:
    """Context: write ``{"<module>.weight": W}`` into the (LoRA-wrapped) base layers, restore on exit."""

    def __init__(self, pm, weights: dict):
        self.pm, self.weights, self.saved = pm, weights, {}

    def __enter__(self):
        self.ctx = self.pm.disable_adapter()
        self.ctx.__enter__()
        base = self.pm.get_base_model()
        for key, w in self.weights.items():
            mod = base.get_submodule(key.rsplit(".", 1)[0])
            mod = mod.get_base_layer() if hasattr(mod, "get_base_layer") else mod
            self.saved[key] = mod.weight.data.clone()
            mod.weight.data.copy_(w)
        return self

    def __exit__(self, *exc):
        base = self.pm.get_base_model()
        for key, w in self.saved.items():
            mod = base.get_submodule(key.rsplit(".", 1)[0])
            mod = mod.get_base_layer() if hasattr(mod, "get_base_layer") else mod
            mod.weight.data.copy_(w)
        self.ctx.__exit__(*exc)


def _gate_summary(rep) -> dict[str, float]:
    """Means over the gated modules: kept rank, capture A(k), deviation D(k), and the largest direction the
    budget passed over (its share of tr(B) and of tr(S)); the diagnosis of the AMARIS arm reads these."""
    out = rep.summary()
    big = [
        max(zip(v["skipped_deviation"], v["skipped_capture"]), default=(0.0, 0.0))
        for v in rep.layers.values()
    ]
    out["skipped_max_deviation_mean"] = float(np.mean([d for d, _ in big])) if big else 0.0
    out["skipped_max_capture_mean"] = float(np.mean([c for _, c in big])) if big else 0.0
    out["rank_mean"] = float(np.mean([v["rank"] for v in rep.layers.values()])) if rep.layers else 0.0
    return out


def _smollm2_arm(cfg: dict, seed: int) -> tuple[dict, dict, dict]:
    """The SmolLM2 (+ LoRA specialist) arm: metrics (prefixed ``smol_``), curves and info for one seed."""
    from peft import get_peft_model, set_peft_model_state_dict

    from neurips26.common.cache import cached_object

    s = cfg["smollm2"]
    t_start = time.perf_counter()
    lm, encode, pad_id = _smol_model(s)
    n_layers = len(_decoder(lm).layers)
    start = n_layers - s["lora_layers"]
    load_s = time.perf_counter() - t_start
    # the cached sets and specialist do not depend on the per-seed evaluation subset sizes
    key = {k: v for k, v in s.items() if k not in ("n_eval", "n_core_eval")} | {"code": SMOL_CACHE_VERSION}
    t0 = time.perf_counter()
    sets = cached_object(
        "amaris-smollm2-sets", {**key, "what": "sets"}, lambda: _smol_sets(s, lm, encode, pad_id, start)
    )
    prefix_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    train_seed = lora_seed(s, seed)  # every seed fine-tunes its own specialist
    lora = cached_object(
        "amaris-smollm2-lora",
        {**key, "what": "lora", "lora_seed": train_seed},
        lambda: _train_lora(s, lm, sets, start, train_seed),
    )
    train_s = time.perf_counter() - t0
    pm = get_peft_model(lm, _lora_config(s, start, n_layers))
    set_peft_model_state_dict(pm, lora["state"])
    pm.eval()
    top, head = TopStack(pm, start), _lm_head(pm)
    # seed-dependent: evaluation subsets of the pools and calibration items
    rng = random.Random(7919 * seed + 11)
    spec_eval = _subset(sets["spec_pool"], sorted(rng.sample(range(s["n_pool"]), s["n_eval"])))
    core_eval = _subset(sets["core_pool"], sorted(rng.sample(range(s["n_core_pool"]), s["n_core_eval"])))
    calib_idx = sorted(rng.sample(range(s["n_train"]), s["n_calib"]))
    # LoRA modules, in the base model's naming
    from peft.tuners.lora import LoraLayer

    base_sd, spec_sd = {}, {}
    for name, mod in pm.named_modules():
        if isinstance(mod, LoraLayer) and "default" in getattr(mod, "lora_A", {}):
            plain = name.removeprefix("base_model.model.")
            w = mod.get_base_layer().weight.detach().clone()
            with torch.no_grad():
                base_sd[f"{plain}.weight"] = w
                spec_sd[f"{plain}.weight"] = w + mod.get_delta_weight("default").detach().to(w.dtype)
    modules = sorted(k[: -len(".weight")] for k in base_sd)
    t0 = time.perf_counter()
    plain_top = TopStack(pm.get_base_model(), start)
    names = [f"lm.{m}" for m in modules]
    with pm.disable_adapter():
        calib_spec = _subset(sets["train"], calib_idx)
        ms = collect_activation_moments(
            plain_top,
            [{"inputs_embeds": calib_spec["hidden"], "attention_mask": calib_spec["attention_mask"]}],
            names,
        )
        core_c = sets["core_calib"]
        mb = collect_activation_moments(
            plain_top,
            [{"inputs_embeds": core_c["hidden"], "attention_mask": core_c["attention_mask"]}],
            names,
        )
    ms = {k.removeprefix("lm."): v for k, v in ms.items()}
    mb = {k.removeprefix("lm."): v for k, v in mb.items()}
    calib_s = time.perf_counter() - t0

    def score(weights: dict) -> tuple[float, float]:
        with _weights(pm, weights):
            return _token_accuracy(top, head, core_eval), _item_accuracy(top, head, spec_eval)

    t0 = time.perf_counter()
    acc = {"base": score({}), "specialist": score(spec_sd)}
    grids = {
        "task_arithmetic": [{"alpha": a} for a in cfg["alphas"]],
        "ties": [{"density": d, "alpha": a} for d in cfg["densities"] for a in cfg["merge_alphas"]],
        "dare": [{"drop_p": p, "alpha": a} for p in cfg["drops"] for a in cfg["merge_alphas"]],
        METHOD: [{"budget": b} for b in cfg["budgets"]],
    }
    ref_core, ref_spec = max(acc["base"][0], 1e-9), max(acc["specialist"][1], 1e-9)
    points: dict[str, list[tuple[float, float]]] = {}
    merge_times: dict[str, float] = {}
    gate_stats: dict[
        str, dict[str, float]
    ] = {}  # AMARIS budget -> mean kept rank, capture A(k), deviation D(k)
    eval_times: dict[str, float] = {}
    for arm, grid in grids.items():
        points[arm], merge_times[arm], eval_times[arm] = [], 0.0, 0.0
        for hp in grid:
            reps = []
            for r in range(cfg["dare_masks"] if arm == "dare" else 1):
                tm = time.perf_counter()
                if arm == "task_arithmetic":
                    sd = task_arithmetic_merge(base_sd, [spec_sd], [hp["alpha"]])
                elif arm == "ties":
                    sd = ties_merge(base_sd, [spec_sd], hp["density"], hp["alpha"])
                elif arm == "dare":
                    sd = dare_merge(base_sd, [spec_sd], hp["drop_p"], hp["alpha"], seed=1000 * seed + r)
                else:
                    sd, rep = amaris_merge_lora(
                        pm, ms, mb, AmarisConfig(budget=hp["budget"], max_rank_frac=cfg["max_rank_frac"])
                    )
                    gate_stats[str(hp["budget"])] = _gate_summary(rep)
                te = time.perf_counter()
                merge_times[arm] += te - tm
                reps.append(score(sd))
                eval_times[arm] += time.perf_counter() - te
            a_c, a_s = float(np.mean([x[0] for x in reps])), float(np.mean([x[1] for x in reps]))
            points[arm].append((a_s / ref_spec, a_c / ref_core))
        merge_times[arm] /= len(grid)
        eval_times[arm] /= len(grid)
    merge_s = time.perf_counter() - t0
    pm.unload()
    metrics: dict[str, dict[str, float]] = {
        f"smol_{k}": {}
        for k in (
            "hypervolume",
            "core_at_spec90",
            "core_at_spec98",
            "spec_retention_max",
            "acc_core",
            "acc_spec",
            "core_retention",
            "spec_gain",
        )
    }
    for arm, pts in points.items():
        metrics["smol_hypervolume"][arm] = _hypervolume(pts)
        for thr, name in ((0.9, "smol_core_at_spec90"), (HEADLINE_SPEC, "smol_core_at_spec98")):
            ok = [b for a, b in pts if a >= thr]
            metrics[name][arm] = max(ok) if ok else 0.0
        metrics["smol_spec_retention_max"][arm] = max(a for a, _ in pts)
    for name in REFERENCES:
        metrics["smol_acc_core"][name], metrics["smol_acc_spec"][name] = acc[name]
    metrics["smol_core_retention"]["specialist"] = acc["specialist"][0] / ref_core
    metrics["smol_spec_gain"]["specialist"] = acc["specialist"][1] - acc["base"][1]
    curves = {
        "smol_frontier_spec": {a: [p[0] for p in _frontier(v)] for a, v in points.items()},
        "smol_frontier_core": {a: [p[1] for p in _frontier(v)] for a, v in points.items()},
    }
    info = {
        "model": s["model"],
        "task": s["task"],
        "lora": {k: s[k] for k in ("lora_r", "lora_layers", "lora_modules")},
        "budget": {
            "grid_points": {a: len(g) for a, g in grids.items()},
            "merged_tensors": len(base_sd),
            "spec_eval_items": s["n_eval"],
            "core_eval_tokens": int(core_eval["tgt"].numel()),
            "dare_masks_per_point": cfg["dare_masks"],
            "train_steps": s["steps"],
            "batch": s["batch"],
        },
        "points": {a: [list(p) for p in v] for a, v in points.items()},
        "grids": grids,
        "training": {
            "lora_seed": train_seed,
            "final_loss": lora["final_loss"],
            "first_loss": lora["first_loss"],
        },
        "amaris_gate": gate_stats,
        "performance": {
            "load_s": load_s,
            "prefix_s": prefix_s,
            "train_s": train_s,
            "calibration_s": calib_s,
            "merge_and_eval_s": merge_s,
            **{f"merge_s_{a}": t for a, t in merge_times.items()},
            **{f"eval_s_{a}": t for a, t in eval_times.items()},
        },
        "wall_s": time.perf_counter() - t_start,
    }
    return metrics, curves, info

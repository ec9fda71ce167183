"""Scale-out path of Archer: a 2-process gloo DDP step equals the single-process step.

The Archer loss is per token and its entropy quantile is per response, so data parallelism needs no
extra communication. Two aggregations are checked, each with two ranks holding half of the batch:

* ``seq-mean-token-mean`` (KL terms on): the global loss is the mean of the rank losses, so DDP's
  gradient averaging reproduces the single-process gradient;
* ``token-mean`` (KL off): each rank scales its loss by ``world * local_tokens / global_tokens``
  (normalising by the global token count, as verl does), and the same equality holds.
"""

from __future__ import annotations

import json
import textwrap

import torch

from neurips26.common.distributed import run_script_workers
from neurips26.common.threads import torch_threads

_COMMON = textwrap.dedent(
    """
    import torch
    from neurips26.common.models import build_tiny_lm
    from neurips26.rl.archer import ArcherConfig, archer_policy_loss

    B, T, PROMPT = 4, 12, 4

    def build():
        return build_tiny_lm("llama", vocab_size=32, seed=0, hidden_size=32, intermediate_size=64,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)

    def batch():
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(0, 32, (B, T), generator=g)
        mask = torch.zeros(B, T - 1, dtype=torch.bool)
        for row, length in enumerate((7, 3, 8, 5)):  # response tokens per row
            mask[row, PROMPT - 1 : PROMPT - 1 + length] = True
        old_shift = 0.1 * torch.randn(B, T - 1, generator=g)
        adv = torch.randn(B, generator=g)
        ref_shift = 0.1 * torch.randn(B, T - 1, generator=g)
        return ids, mask, old_shift, adv, ref_shift

    CONFIGS = {
        "seq": ArcherConfig(loss_agg="seq-mean-token-mean", kl_coef_knowledge=0.05, kl_coef_reasoning=0.02),
        "token": ArcherConfig(loss_agg="token-mean", kl_coef_knowledge=0.0, kl_coef_reasoning=0.0),
    }

    def loss_on(model, rows, name):
        ids, mask, old_shift, adv, ref_shift = (x[rows] for x in batch())
        logits = model(ids).logits[:, :-1].float()
        logp_all = torch.log_softmax(logits, -1)
        logprobs = logp_all.gather(-1, ids[:, 1:, None]).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        old = logprobs.detach() + old_shift
        ref = logprobs.detach() + ref_shift
        loss, _ = archer_policy_loss(logprobs, old, adv, mask, entropy, ref, CONFIGS[name])
        return loss, int(mask.sum())
    """
)

_WORKER = textwrap.dedent(
    """
    import json, os
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        out = {}
        for name in CONFIGS:
            model = build()
            ddp = DDP(model)
            rows = torch.arange(rank * B // world, (rank + 1) * B // world)
            loss, local_tokens = loss_on(ddp, rows, name)
            if name == "token":
                total = torch.tensor(float(local_tokens))
                dist.all_reduce(total)
                loss = loss * (world * local_tokens / total)
            loss.backward()
            reduced = loss.detach().clone()
            dist.all_reduce(reduced)
            grads = torch.cat([p.grad.flatten() for p in model.parameters()])
            out[name] = {"loss": float(reduced) / world, "grads": grads.tolist()}
        with open(os.environ["OUT"] + f".{rank}", "w") as f:
            json.dump(out, f)
    finally:
        dist.destroy_process_group()
    """
)


def test_two_process_ddp_step_equals_single_process_step(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(_COMMON + _WORKER)
    run_script_workers(script, 2, env={"OUT": str(tmp_path / "ddp.json")})
    ranks = [json.loads((tmp_path / f"ddp.json.{r}").read_text()) for r in range(2)]

    namespace: dict = {}
    exec(_COMMON, namespace)  # noqa: S102 - the same model, batch and configs as the workers
    for name in ("seq", "token"):
        with torch_threads(1):
            model = namespace["build"]()
            loss, _ = namespace["loss_on"](model, torch.arange(namespace["B"]), name)
            loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        assert float(grads.abs().max()) > 0
        for r in ranks:
            assert abs(r[name]["loss"] - float(loss.detach())) < 1e-6, name
            assert torch.allclose(torch.tensor(r[name]["grads"]), grads, atol=1e-6, rtol=1e-5), name
        with torch.no_grad():  # the shards really differ: half the batch gives another loss
            half, _ = namespace["loss_on"](namespace["build"](), torch.arange(2), name)
        assert abs(float(half) - float(loss.detach())) > 1e-4, name
    assert ranks[0]["seq"]["grads"] == ranks[1]["seq"]["grads"]  # DDP synchronised the gradients

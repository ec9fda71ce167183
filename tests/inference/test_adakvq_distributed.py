"""Scale-out path of AdaKVQ: data-parallel AAD calibration over 2 real gloo processes.

Each rank calibrates on its own share of the prompts and :func:`all_reduce_profile` sums the per-layer
(count, sum, sum of squares) of nAAD; the result must equal the single-process profile over all prompts.
"""

from __future__ import annotations

import json
import textwrap

import torch

from neurips26.common.distributed import run_script_workers
from neurips26.common.threads import torch_threads
from neurips26.inference.adakvq import AADTracker, all_reduce_profile, calibrate_aad

_COMMON = textwrap.dedent(
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    def build():
        cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                          pad_token_id=0)
        torch.manual_seed(0)
        return LlamaForCausalLM(cfg).eval()

    def prompts():
        g = torch.Generator().manual_seed(1)
        return [torch.randint(1, 64, (1, n), generator=g) for n in (9, 14, 11, 20, 7)]
    """
)

_WORKER = textwrap.dedent(
    """
    import json, os
    import torch.distributed as dist
    from neurips26.inference.adakvq import AADTracker, all_reduce_profile, calibrate_aad

    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        tracker = AADTracker()
        calibrate_aad(build(), prompts()[rank::world], tracker, max_new_tokens=3, n_probe=6)
        local = tracker.stats(3)[:, 0].tolist()
        prof = all_reduce_profile(tracker)
        out = {"mean": prof.mean.tolist(), "std": prof.std.tolist(), "local_counts": local}
        with open(os.environ["OUT"] + f".{rank}", "w") as f:
            json.dump(out, f)
    finally:
        dist.destroy_process_group()
    """
)


def test_two_process_gloo_all_reduce_equals_single_process_profile(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(_COMMON + _WORKER)
    run_script_workers(script, 2, env={"OUT": str(tmp_path / "profile.json")})

    namespace: dict = {}
    exec(_COMMON, namespace)  # noqa: S102 - the same model and prompts as the workers
    with torch_threads(1):
        tracker = AADTracker()
        single = calibrate_aad(
            namespace["build"](), namespace["prompts"](), tracker, max_new_tokens=3, n_probe=6
        )
    ranks = [json.loads((tmp_path / f"profile.json.{r}").read_text()) for r in range(2)]
    # the shards really differ (3 and 2 prompts of different lengths) and cover all samples
    assert ranks[0]["local_counts"] != ranks[1]["local_counts"]
    total = [a + b for a, b in zip(ranks[0]["local_counts"], ranks[1]["local_counts"])]
    assert total == tracker.stats(3)[:, 0].tolist()
    for r in ranks:  # every rank gets the global profile
        assert torch.allclose(torch.tensor(r["mean"]), single.mean, atol=1e-5)
        assert torch.allclose(torch.tensor(r["std"]), single.std, atol=1e-5)
    assert torch.allclose(all_reduce_profile(tracker).mean, single.mean, atol=1e-6)
    assert float(single.std.max()) > 0

"""One runnable usage example per area, shipped where the generated API surface lives (issue 36 item 3).

The examples cannot live in the areas' own docstrings: committed claim results are hashed on the bytes
of every area ``__init__.py`` and method module they import (:func:`neurips26.claims.runner.claim_hash`),
so a docstring edited there would make every result of that area stale. This harness module is imported
by no component or claim (only by :func:`neurips26.registry.export_files`), so its text changes no hash.

``neurips26 exports`` writes :data:`USAGE` ``[area]`` into the module docstring of the area's generated
``src/neurips26/<area>/__init__.pyi`` (an IDE shows it on hover over ``neurips26.<area>``) and under the
area's heading of ``API.md``; ``neurips26 exports --check`` fails when either is stale.
``tests/test_usage.py`` runs every example with :mod:`doctest`, on this text and on the docstring parsed
back from the stub.

Each example uses the area's registered components as a practitioner would, on tiny seeded inputs: it
runs in well under 3 s on a CPU, downloads nothing, starts no Ray or Flower simulation, and prints only
shapes, ints, booleans or floats rounded to 3-4 decimals, so the output is the same on any x86-64 CPU.
The text holds no backslash and no triple quote (it is pasted into a docstring verbatim).
"""

from __future__ import annotations

__all__ = ["USAGE"]

USAGE: dict[str, str] = {
    "agents": """\
>>> import numpy as np
>>> from neurips26.agents import SimulatedChannel, Task, diversity_combining, plurality_vote
>>> plurality_vote(["12", "13", "12"])  # equal-gain combining: (answer, first index)
('12', 0)
>>> channel = SimulatedChannel(
...     accuracy_fn=lambda task: 0.6,  # a noisy channel: right 60% of the time
...     confusion=lambda task, rng: str(rng.integers(0, 10)),
...     token_model=lambda task, rng: (20, 5),
...     prices=(1e-6, 4e-6),
... )
>>> task = Task("What is 7 + 5?", answer="12")
>>> wins = [
...     diversity_combining(task, [channel], rng=np.random.default_rng(seed), n=7).answer == "12"
...     for seed in range(50)
... ]
>>> sum(wins)  # majority of 7 samples beats one sample's 60%
45
>>> result = diversity_combining(task, [channel], rng=np.random.default_rng(0), n=7)
>>> result.n_calls, result.tokens, round(result.cost, 6)
(7, 175, 0.00028)
""",
    "distill": """\
>>> import torch
>>> from neurips26.distill import DHOLoss, DualHeadClassifier
>>> _ = torch.manual_seed(0)
>>> model = DualHeadClassifier(torch.nn.Linear(6, 8), feature_dim=8, num_classes=3)
>>> out = model(torch.randn(4, 6))  # a labelled batch of 4
>>> out.ce_logits.shape, out.kd_logits.shape
(torch.Size([4, 3]), torch.Size([4, 3]))
>>> teacher = torch.randn(4, 3)  # e.g. a VLM's zero-shot logits
>>> losses = DHOLoss(lam=0.5, temperature=2.0)(out, torch.tensor([0, 1, 2, 0]), None, teacher, None)
>>> sorted(losses)
['ce', 'kd_labeled', 'kd_unlabeled', 'loss']
>>> losses["loss"].backward()  # trains both heads and the backbone
>>> model.ce_head.weight.grad is not None and model.kd_head.weight.grad is not None
True
""",
    "distributed": """\
>>> import torch
>>> from neurips26.distributed import AdERAConfig, decode_payload, encode_shard, exponents
>>> g = torch.Generator().manual_seed(0)
>>> shard = torch.randn(4096, generator=g).to(torch.bfloat16)  # this rank's shard of an MoE weight
>>> receiver_cache = exponents(shard)  # what the other ranks hold after the previous all-gather
>>> sender_cache = receiver_cache.clone()
>>> shard = (shard.float() * (1 + 1e-3 * torch.randn(4096, generator=g))).to(torch.bfloat16)  # one step
>>> payload = encode_shard(shard, sender_cache, AdERAConfig())
>>> payload.mode, payload.n_changed, payload.body.numel(), shard.numel() * shard.element_size()
('sparse', 2, 4106, 8192)
>>> torch.equal(decode_payload(payload, receiver_cache), shard)  # lossless: bitwise the same shard
True
""",
    "editing": """\
>>> import torch
>>> from neurips26.editing import AmarisConfig, amaris_merge
>>> _ = torch.manual_seed(0)
>>> base = {"proj.weight": torch.randn(8, 8), "proj.bias": torch.zeros(8)}
>>> specialist = {k: v + 0.1 * torch.randn_like(v) for k, v in base.items()}  # fine-tuned copy
>>> x_base, x_spec = torch.randn(256, 8), torch.randn(256, 8) * torch.linspace(0.1, 2, 8)
>>> moments = lambda x: {"proj": (x.T @ x / len(x)).double()}  # input second moments per module
>>> config = AmarisConfig(budget=0.05)  # inherit at most 5% of the update's deviation from the base
>>> merged, report = amaris_merge(base, specialist, moments(x_spec), moments(x_base), config)
>>> sorted(merged) == sorted(base), merged["proj.weight"].shape
(True, torch.Size([8, 8]))
>>> {k: report.layers["proj"][k] for k in ("k", "rank")}  # k of the update's rank-8 directions kept
{'k': 2, 'rank': 8}
""",
    "federated": """\
>>> import torch
>>> from flwr.serverapp.strategy import FedAvg
>>> from neurips26.federated import AsyncFedAvg, FedBuff, staleness_weight
>>> rule = FedBuff(buffer_size=3, server_lr=1.0, staleness_exp=0.5)  # the asynchronous server rule
>>> strategy = AsyncFedAvg(rule, model_fn=lambda: torch.nn.Linear(4, 2), fraction_train=0.5)
>>> isinstance(strategy, FedAvg), strategy.fraction_train, strategy.rule.buffer_size
(True, 0.5, 3)
>>> round(float(staleness_weight(3, a=0.5)), 4)  # weight of an update 3 versions old: (1 + 3) ** -0.5
0.5
""",
    "graph": """\
>>> import torch
>>> from neurips26.graph import SpikingGCNConv
>>> _ = torch.manual_seed(0)
>>> x = torch.randn(4, 8)  # 4 nodes, 8 features
>>> edge_index = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])  # a path 0-1-2-3
>>> conv = SpikingGCNConv(8, 16, K=2, neuron="LIF")
>>> spikes = conv(x, edge_index)
>>> spikes.shape, set(spikes.unique().tolist()) <= {0.0, 1.0}
(torch.Size([4, 16]), True)
""",
    "inference": """\
>>> import torch
>>> from neurips26.common.models import build_tiny_lm
>>> from neurips26.inference import KIVICache, cache_tensor_bytes
>>> model = build_tiny_lm("llama", vocab_size=64, seed=0)  # a seeded 2-layer LlamaForCausalLM
>>> ids = torch.randint(0, 64, (1, 184), generator=torch.Generator().manual_seed(0))
>>> cache = KIVICache(model.config, nbits=2, group_size=32, residual_length=32)
>>> out = model.generate(ids, cache=cache, max_new_tokens=9, min_new_tokens=9, do_sample=False)
>>> out.shape, cache.get_seq_length()
(torch.Size([1, 193]), 192)
>>> c = model.config  # bytes of the same 192 tokens' float32 keys and values in every layer:
>>> dense = 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * 192 * 4
>>> cache_tensor_bytes(cache), dense, round(cache_tensor_bytes(cache) / dense, 3)
(27136, 98304, 0.276)
""",
    "kg": """\
>>> import torch
>>> from torch_geometric.data import Data
>>> from neurips26.kg import CoRF, FullGraphExecutor, NBFNetLite, ReceptiveSupportPlanner
>>> g = torch.Generator().manual_seed(0)
>>> heads, tails = torch.randint(0, 30, (2, 60), generator=g)
>>> rel = torch.randint(0, 2, (60,), generator=g)  # 2 relations; ids 2-3 are their inverses
>>> graph = Data(edge_index=torch.stack([torch.cat([heads, tails]), torch.cat([tails, heads])]),
...              edge_type=torch.cat([rel, rel + 2]), num_nodes=30)
>>> _ = torch.manual_seed(0)
>>> model = NBFNetLite(num_relations=4, hidden=8, num_layers=2).eval()
>>> queries = torch.stack([torch.randint(0, 30, (6,), generator=g),  # (head entity, relation)
...                        torch.randint(0, 4, (6,), generator=g)], 1)
>>> with torch.no_grad():
...     corf = CoRF(model, ReceptiveSupportPlanner(num_hops=2)).scores(queries, graph)
...     full = FullGraphExecutor(model).scores(queries, graph)
>>> corf.shape, torch.allclose(corf, full, atol=1e-5)  # batched on shared supports, yet exact
(torch.Size([6, 30]), True)
""",
    "nn": """\
>>> import torch
>>> from neurips26.nn import ANCReSequential, sinkhorn_knopp
>>> _ = torch.manual_seed(0)
>>> blocks = [torch.nn.Sequential(torch.nn.LayerNorm(16), torch.nn.Linear(16, 16)) for _ in range(4)]
>>> net = ANCReSequential(blocks)  # replaces `for f in blocks: h = h + f(h)` with learned sources
>>> net(torch.randn(2, 16)).shape
torch.Size([2, 16])
>>> mix = sinkhorn_knopp(torch.randn(3, 3))  # AOT-POT's doubly stochastic stream mixing
>>> [round(v, 4) for v in mix.sum(-1).tolist()], [round(v, 2) for v in mix.sum(-2).tolist()]
([1.0, 1.0, 1.0], [1.0, 1.0, 1.0])
""",
    "optim": """\
>>> import torch
>>> from neurips26.optim import AcceleGradSharp
>>> w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
>>> opt = AcceleGradSharp([w], lr=0.5)
>>> for _ in range(100):
...     opt.zero_grad()
...     loss = ((w - torch.tensor([0.5, 0.25])) ** 2).sum()  # minimum at (0.5, 0.25)
...     loss.backward()
...     opt.step()
>>> [round(v, 3) for v in w.tolist()], round(loss.item(), 4)
([0.5, 0.25], 0.0)
""",
    "rl": """\
>>> import torch
>>> from neurips26.rl import ArcherConfig, archer_policy_loss, grpo_advantages, grpo_loss
>>> g = torch.Generator().manual_seed(0)
>>> rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])  # one group of 4 sampled responses
>>> adv = grpo_advantages(rewards, group_size=4)
>>> [round(a, 4) for a in adv.tolist()]
[0.866, -0.866, -0.866, 0.866]
>>> old = -torch.rand(4, 6, generator=g)  # log-probs of 6 response tokens each
>>> new = (old + 0.3 * torch.randn(4, 6, generator=g)).requires_grad_()
>>> mask, entropy = torch.ones(4, 6, dtype=torch.bool), torch.rand(4, 6, generator=g)
>>> loss, metrics = archer_policy_loss(new, old, adv, mask, entropy, ref_logprobs=old)  # paper defaults
>>> round(loss.item(), 4), round(metrics["reasoning_frac"], 4)
(-0.0118, 0.1667)
>>> config = ArcherConfig.grpo(kl_coef_knowledge=0.0, kl_coef_reasoning=0.0, dual_clip_c=None,
...                            loss_agg="seq-mean-token-mean")  # no split: reduces to GRPO
>>> as_grpo, _ = archer_policy_loss(new, old, adv, mask, entropy, config=config)
>>> reference, _ = grpo_loss(new, old, adv, mask)
>>> round(as_grpo.item(), 4), abs(as_grpo.item() - reference.item()) < 1e-6
(0.0026, True)
""",
    "robotics": """\
>>> from neurips26.robotics import heldout_tasks, oracle_plan, ordered_subtask_completion, transition
>>> task = heldout_tasks(1, seed=0)[0]  # target labels in order, from a random kitchen state
>>> plan = oracle_plan(task.robot_state, task.target)
>>> state, achieved = dict(task.robot_state), []
>>> initial = [f"{e}={v}" for e, v in state.items()]  # labels true before the first skill
>>> for call in plan:
...     after, ok = transition(state, call)
...     achieved += [f"{e}={v}" for e, v in after.items() if state[e] != v]
...     state = after
>>> len(task.target), len(plan), ordered_subtask_completion(achieved, task.target, initial)
(5, 3, 1.0)
""",
    "temporal": """\
>>> import torch
>>> from neurips26.common.temporal import interaction_stream, temporal_loader
>>> from neurips26.temporal import S3Former
>>> data = interaction_stream(20, 120, msg_dim=3, seed=0)[0]  # a stream of (src, dst, t, msg) events
>>> _ = torch.manual_seed(0)
>>> model = S3Former(20, 3, hidden=8, time_dim=4, long_len=8, short_len=4, patch_size=4, k_sub=4,
...                  num_layers=1, num_heads=2).eval()
>>> logits = []
>>> with torch.no_grad():
...     for batch in temporal_loader(data, 40):  # score each batch before observing it
...         logits.append(model.score(batch.src, batch.dst, batch.t))
...         model.observe(batch.src, batch.dst, batch.t, batch.msg)
>>> torch.cat(logits).shape
torch.Size([120])
""",
    "vision": """\
>>> import torch
>>> from neurips26.vision import HierarchicalFeatureExtractor, random_masking
>>> _ = torch.manual_seed(0)
>>> conv = torch.nn.Conv2d
>>> encoder = torch.nn.Sequential(conv(3, 8, 3, 2, 1), torch.nn.SiLU(), conv(8, 16, 3, 2, 1))  # e.g. a VAE's
>>> extractor = HierarchicalFeatureExtractor(encoder, ["0", "2"], token_grid=(4, 4))  # frozen, hooked
>>> levels = extractor(torch.randn(2, 3, 32, 32))
>>> [tuple(t.shape) for t in levels]  # AHPA's per-level alignment targets on the DiT token grid
[(2, 16, 8), (2, 16, 16)]
>>> mask, keep = random_masking(2, 16, 0.75, generator=torch.Generator().manual_seed(0))
>>> mask.sum(1).tolist(), keep.shape  # RadOmni's MAE stage: 12 of 16 patches masked
([12, 12], torch.Size([2, 4]))
""",
}

"""Registry-driven fuzz campaign over every public component (issue 23).

For every component that :data:`neurips26.registry.METHODS` lists for an implemented method, a spec
below says how to call it with valid inputs (``tensors``: the tensor arguments by name; ``call``:
the call) and which hyperparameters are out of range (``bad``). The campaign then feeds each tensor
argument wrong shapes (an extra and a missing dimension), wrong dtypes (int64, bool, float16,
float64), an empty tensor, NaN, inf, extreme magnitudes (1e30) and a meta-device tensor, and each
hyperparameter its out-of-range values. A case passes when the component

* raises ``ValueError``/``TypeError`` whose message names the argument (or one of its aliases), or
* returns output whose every tensor/number is finite (meta-device output for a meta input counts:
  the device propagated, nothing was computed).

Anything else fails: a deep torch error (``RuntimeError``, ``IndexError``, ...), an error that does
not name the argument, or a silent NaN/inf. A component without a spec fails
``test_every_registered_component_has_a_spec`` with "add a fuzz spec for X"; a component that
cannot be fuzzed in-process (a trainer around a full model, a collective over a process group) is
listed in ``EXEMPT`` with the reason. ``EXTRA`` adds the robust aggregation rules of
:mod:`neurips26.federated.robust` (shared substrate of the federated strategies, not registry
components): a non-finite client update must raise. A hypothesis test adds random special values at
random positions and random magnitudes on top of the enumerated cases; the number of cases is printed
and asserted in ``test_case_count`` (1761 enumerated cases over 91 components at the time of writing).
A float64 pass (issue 33 item 5) runs every component once more in float64 end to end: it must keep
float64 (no silent float32), or say it needs float32 with a TypeError (``FLOAT32_ONLY``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neurips26.registry import METHODS

ACCEPTED = (ValueError, TypeError)


# ------------------------------------------------------------------------------------------- specs
@dataclasses.dataclass
class Spec:
    """How to call one component: ``call(**tensors(), **overrides)``."""

    call: Callable[..., Any]
    tensors: Callable[[], dict[str, torch.Tensor]] = dict
    bad: Mapping[str, tuple] = dataclasses.field(default_factory=dict)  # hyperparameter -> bad values
    aliases: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)  # arg -> other names
    skip: Mapping[str, str] = dataclasses.field(default_factory=dict)  # "arg:mutation" or "mutation" -> why


def _g(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=_g(seed))


def _rand(*shape, seed=0):
    return torch.rand(*shape, generator=_g(seed))


def _tiny_llama(layers=2):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=32,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=0,
    )


def _cache_update(make):
    """Spec call of a KV cache: build it, then one prefill ``update`` of layer 0."""

    def call(key_states, value_states, **kw):
        cache = make(**kw)
        return cache.update(key_states, value_states, 0)

    return call


def _kv():
    return {"key_states": _randn(1, 2, 12, 16), "value_states": _randn(1, 2, 12, 16, seed=1)}


BAD_PROB = (-0.1, 1.5, float("nan"))
BAD_POS = (0, -1.0, float("nan"), float("inf"))
BAD_INT_POS = (0, -3, 2.5, True)


def _specs() -> dict[str, Spec]:
    from neurips26.distill import avsd, dho, dlm_distill, ssd
    from neurips26.inference import adacal, adakvq, adkv
    from neurips26.rl import abc_align, aiql, archer

    s: dict[str, Spec] = {}

    # ------------------------------------------------------------------ inference
    s["adakvq.AdaKVQConfig"] = Spec(
        lambda **kw: adakvq.AdaKVQConfig(**kw),
        bad={
            "bits": ((5,), (), (2, 0)),
            "avg_bits": (0.5, 99.0, float("nan")),
            "group_size": BAD_INT_POS,
            "residual_length": (-1, 1.5),
            "kappa": (float("nan"), -1.0),
        },
    )
    s["adakvq.AADTracker"] = Spec(
        lambda **kw: adakvq.AADTracker(**kw), bad={"ema": (-0.1, 1.0, float("nan"))}
    )
    s["adakvq.register_aad_attention"] = Spec(
        lambda **kw: adakvq.register_aad_attention(**kw), bad={"n_probe": BAD_INT_POS, "name": ("", 3)}
    )
    s["adakvq.allocate_bits"] = Spec(
        lambda profile, **kw: adakvq.allocate_bits(profile, **kw),
        tensors=lambda: {"profile": _rand(4)},
        bad={"bits": ((), (5,)), "avg_bits": (0.1, 99.0, float("nan")), "kappa": (float("nan"),)},
    )
    s["adakvq.AdaKVQCache"] = Spec(
        _cache_update(
            lambda **kw: adakvq.AdaKVQCache(
                _tiny_llama(), adakvq.AdaKVQConfig(group_size=4, residual_length=4), **kw
            )
        ),
        tensors=_kv,
        bad={"base_bits": ([2], [5, 5], [2.5, 2])},
    )
    s["adakvq.KIVICache"] = Spec(
        _cache_update(
            lambda **kw: adakvq.KIVICache(_tiny_llama(), **{"group_size": 4, "residual_length": 4, **kw})
        ),
        tensors=_kv,
        bad={
            "nbits": (0, 5, 2.0),
            "group_size": BAD_INT_POS,
            "residual_length": (-1,),
            "value_group_size": (0, 5),
            "meta_dtype": (torch.int8,),
        },
    )
    s["adkv.ADKVConfig"] = Spec(
        lambda **kw: adkv.ADKVConfig(**kw),
        bad={
            "bits": (0, 9, 2.0),
            "eta_z": (0.0, 1.0, float("nan")),
            "eta_s": (1.5,),
            "gamma": (0.0, -1.0),
            "init_tokens": (0,),
            "storage": ("disk",),
            "checkpoint_every": (0,),
            "n_outliers": (-1,),
        },
    )
    s["adkv.ADKVQuantizer"] = Spec(
        lambda x, **kw: (lambda q: q.encode(x, q.init_state(x)))(
            adkv.ADKVQuantizer(kw.pop("num_channels", 16), adkv.ADKVConfig(bits=2), **kw)
        ),
        tensors=lambda: {"x": _randn(2, 10, 16)},
        bad={"num_channels": (0, 2.5), "params": (torch.zeros(3, 16), torch.full((3, 16), float("nan")))},
        aliases={"x": ("x_prefix", "stream")},
    )
    s["adkv.ADKVCache"] = Spec(
        _cache_update(lambda **kw: adkv.ADKVCache(_tiny_llama(), **kw)),
        tensors=_kv,
        bad={"adkv": ("2bit", 2), "params": ({0: {"key": torch.zeros(2, 3, 5)}},)},
    )
    s["adacal.AdaCalConfig"] = Spec(
        lambda **kw: adacal.AdaCalConfig(**kw),
        bad={
            "block_size": BAD_INT_POS,
            "sink_blocks": (-1,),
            "dense_quota": (-0.1, 1.5, float("nan")),
            "default_task": ("nope",),
            "backend": ("gpu",),
        },
    )
    qk = lambda: {"q": _randn(1, 2, 16, 8), "k": _randn(1, 2, 16, 8, seed=1)}  # noqa: E731
    s["adacal.probe_metrics"] = Spec(
        lambda q, k, **kw: adacal.probe_metrics(q, k, **{"block_size": 4, **kw}),
        tensors=qk,
        bad={
            "block_size": BAD_INT_POS,
            "probe_queries": (0, -1),
            "sink_blocks": (-1,),
            "scale": (float("nan"), 0.0),
        },
    )
    s["adacal.sparse_prefill_attention"] = Spec(
        lambda q, k, v, block_mask, **kw: adacal.sparse_prefill_attention(
            q, k, v, block_mask, **{"block_size": 4, **kw}
        ),
        tensors=lambda: {
            **qk(),
            "v": _randn(1, 2, 16, 8, seed=2),
            "block_mask": torch.ones(4, 4, dtype=torch.bool),
        },
        bad={"block_size": BAD_INT_POS, "scale": (float("nan"), 0.0), "backend": ("cuda",)},
    )
    s["adacal.plan_blocks"] = Spec(
        lambda q, k, **kw: adacal.plan_blocks(q, k, adacal.AdaCalConfig(block_size=4), **kw),
        tensors=qk,
        bad={"task": ("nope",), "scale": (float("nan"), 0.0)},
    )
    s["adacal.a_shape_mask"] = Spec(
        lambda **kw: adacal.a_shape_mask(**{"n": 16, "block_size": 4, **kw}),
        bad={"n": (0, -1, 2.5), "block_size": BAD_INT_POS, "sink_blocks": (-1,), "local_blocks": (-1,)},
    )
    s["adacal.flexprefill_mask"] = Spec(
        lambda q, k, **kw: adacal.flexprefill_mask(q, k, **{"block_size": 4, **kw}),
        tensors=qk,
        bad={
            "block_size": BAD_INT_POS,
            "gamma": BAD_PROB,
            "tau": (-1.0, float("nan")),
            "scale": (float("nan"),),
        },
    )
    s["adacal.TaskDispatcher"] = Spec(
        lambda **kw: adacal.TaskDispatcher(**kw),
        bad={"l2": (-1.0, float("nan")), "steps": (0, 2.5), "lr": (0.0,)},
    )
    s["adacal.calibrate_policies"] = Spec(
        lambda **kw: adacal.calibrate_policies(
            **{
                "evaluate": lambda task, pol: (1.0, 0.5),
                "grid_theta_mid": [0.5],
                "grid_gamma": [0.9],
                "density_cap": 0.5,
                **kw,
            }
        ),
        bad={
            "density_cap": (0.0, 1.5, float("nan")),
            "grid_theta_mid": ([],),
            "grid_gamma": ([],),
            "evaluate": (None,),
        },
    )

    # ------------------------------------------------------------------ rl
    s["archer.ArcherConfig"] = Spec(
        lambda **kw: archer.ArcherConfig(**kw),
        bad={
            "quantile": BAD_PROB,
            "clip_knowledge": ((-0.1, 0.2), (0.2,)),
            "kl_coef_knowledge": (-1.0, float("nan")),
            "kl_estimator": ("k9",),
            "dual_clip_c": (0.5, float("nan")),
            "loss_agg": ("sum",),
        },
    )
    bt = lambda: {  # noqa: E731
        "logprobs": -_rand(2, 5),
        "old_logprobs": -_rand(2, 5, seed=1),
        "advantages": _randn(2, 5, seed=2),
        "response_mask": torch.ones(2, 5),
        "entropy": _rand(2, 5, seed=3),
        "ref_logprobs": -_rand(2, 5, seed=4),
    }
    s["archer.archer_policy_loss"] = Spec(
        lambda **kw: archer.archer_policy_loss(**kw), tensors=bt, bad={"config": ("archer", 3)}
    )
    s["abc_align.ABCConfig"] = Spec(
        lambda **kw: abc_align.ABCConfig(**kw),
        bad={
            "correction": ("fixed", float("nan"), -0.5),
            "update_every": (0,),
            "window": (0, -1),
            "ema": BAD_PROB,
            "c_min": (float("nan"),),
            "beta": (0.0, -1.0, float("nan")),
            "space": ("x",),
        },
    )
    s["abc_align.ABCAlignObjective"] = Spec(
        lambda loss_pseudo, loss_human_true, loss_human_pseudo, **kw: abc_align.ABCAlignObjective(**kw)(
            loss_pseudo, loss_human_true, loss_human_pseudo
        ),
        tensors=lambda: {
            "loss_pseudo": _rand(6),
            "loss_human_true": _rand(4, seed=1),
            "loss_human_pseudo": _rand(4, seed=2),
        },
        bad={"n_human_total": (0, -1, 2.5), "n_pseudo_total": (0,), "config": ("abc",)},
    )
    s["abc_align.soft_logistic_loss"] = Spec(
        lambda **kw: abc_align.soft_logistic_loss(**kw),
        tensors=lambda: {"margin": _randn(6), "label": _rand(6, seed=1)},
    )

    def lp4():
        return {
            f"{a}_logps_{i}": -_rand(6, seed=3 * i + j)
            for j, a in enumerate(("policy", "ref"))
            for i in (1, 2)
        }

    s["abc_align.dpo_margin"] = Spec(
        lambda **kw: abc_align.dpo_margin(**kw),
        tensors=lp4,
        bad={"beta": (0.0, -1.0, float("nan"), float("inf"))},
    )
    s["abc_align.estimate_correction_strength"] = Spec(
        lambda per_example_corrections, **kw: abc_align.estimate_correction_strength(
            per_example_corrections, **{"n_human_total": 10, **kw}
        ),
        tensors=lambda: {"per_example_corrections": _randn(5, 3)},
        bad={"n_human_total": (0, -1, 2.5), "c_min": (float("nan"), 2.0), "c_max": (-1.0, float("nan"))},
    )
    s["abc_align.ppi_pp_lambda"] = Spec(
        lambda grad_true, grad_pseudo_h, grad_pseudo_p, **kw: abc_align.ppi_pp_lambda(
            grad_true, grad_pseudo_h, grad_pseudo_p, **{"n": 5, "N": 8, **kw}
        ),
        tensors=lambda: {
            "grad_true": _randn(5, 3),
            "grad_pseudo_h": _randn(5, 3, seed=1),
            "grad_pseudo_p": _randn(8, 3, seed=2),
        },
        bad={"n": (0, -1, 2.5), "N": (0, -1)},
    )
    rect = lambda: abc_align.ABCAlignObjective(n_human_total=4, n_pseudo_total=4)  # noqa: E731
    mixed = lambda: {  # noqa: E731
        "is_human": torch.tensor([True, True, False, False, True, False]),
        "human_labels": torch.tensor([1.0, 0.0, 1.0, 1.0, 0.7, 0.0]),
        "pseudo_labels": _rand(6, seed=9),
    }
    s["abc_align.abc_reward_loss"] = Spec(
        lambda **kw: abc_align.abc_reward_loss(**{"objective": rect(), **kw}),
        tensors=lambda: {"rewards_chosen": _randn(6), "rewards_rejected": _randn(6, seed=1), **mixed()},
        bad={"objective": ("abc", None)},
    )
    s["abc_align.abc_dpo_loss"] = Spec(
        lambda **kw: abc_align.abc_dpo_loss(**{"objective": rect(), **kw}),
        tensors=lambda: {**lp4(), **mixed()},
        bad={"objective": ("abc",), "beta": (0.0, float("nan"))},
    )
    s["aiql.aggregate_features"] = Spec(
        lambda **kw: aiql.aggregate_features(**kw),
        tensors=lambda: {
            "cand_feats": _randn(2, 6, 4),
            "mask": torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]], dtype=torch.bool),
            "selected": torch.tensor([[0, 2], [1, 6]]),
        },
        bad={"extra": ({"a": "b"},)},
    )
    s["aiql.expectile_loss"] = Spec(
        lambda diff, **kw: aiql.expectile_loss(diff, **{"tau": 0.7, **kw}),
        tensors=lambda: {"diff": _randn(8)},
        bad={"tau": (0.0, 1.0, -0.5, float("nan"))},
    )
    s["aiql.CandidateScoringActor"] = Spec(
        lambda **kw: aiql.CandidateScoringActor(
            **{"global_dim": 3, "cand_dim": 4, "hidden": 8, "pool_dim": 4, **kw}
        ),
        bad={"global_dim": BAD_INT_POS, "cand_dim": (0,), "hidden": (0, -2), "pool_dim": (0,)},
    )
    s["aiql.BayesianRewardPredictor"] = Spec(
        lambda X, y, **kw: aiql.BayesianRewardPredictor(**kw).fit(X, y).predict(X[:3] if X.dim() else X),
        tensors=lambda: {"X": _randn(10, 3), "y": _randn(10, seed=1)},
        bad={
            "prior_precision": (0.0, -1.0, float("nan")),
            "backend": ("gp",),
            "members": (0, 2.5),
            "noise_precision": (0.0, float("nan")),
        },
    )
    env_obs = aiql.WarehouseConsolidationEnv(n_locations=30, n_skus=5, max_candidates=16, seed=0).reset(
        seed=0
    )[0]
    s["aiql.heuristic_policy"] = Spec(
        lambda **kw: aiql.heuristic_policy(**{"obs": env_obs, "budget": 3, **kw}),
        bad={"obs": ({}, None), "budget": (0, -1, 2.5)},
    )

    # ------------------------------------------------------------------ distill
    s["ssd.SSDConfig"] = Spec(
        lambda **kw: ssd.SSDConfig(**kw),
        bad={
            "threshold": (-0.1, float("nan")),
            "divergence": ("l2",),
            "draft_len": (0, 1.5),
            "temperature": (0.0, -1.0),
            "beta": BAD_PROB,
            "ema_decay": (1.5,),
            "max_new_tokens": (0,),
            "topk": (0,),
        },
    )
    s["ssd.ssd_loss"] = Spec(
        lambda **kw: ssd.ssd_loss(**kw),
        tensors=lambda: {
            "student_logits": _randn(2, 5, 7),
            "teacher_logits": _randn(2, 5, 7, seed=1),
            "response_mask": torch.ones(2, 5),
            "supervise_mask": torch.ones(2, 5),
        },
        bad={"loss": ("mse",), "beta": BAD_PROB},
    )
    s["avsd.AVSDConfig"] = Spec(
        lambda **kw: avsd.AVSDConfig(**kw),
        bad={
            "views": ((), ("nope",)),
            "partial_ratio": BAD_PROB,
            "mode": ("x",),
            "gate": ("x",),
            "eps": (0.0, -1.0),
        },
    )
    s["avsd.multiview_sampled_target"] = Spec(
        lambda **kw: avsd.multiview_sampled_target(**kw),
        tensors=lambda: {"student_logprobs": -_rand(2, 5), "view_logprobs": -_rand(2, 3, 5, seed=1)},
        bad={"mode": ("x",), "gate": ("x",), "eps": (0.0, -1.0, float("nan"))},
        skip={
            "view_logprobs:nan": "documented: non-finite view log-probs are replaced by 0 (avsd_loss masks them)",
            "view_logprobs:inf": "documented: non-finite view log-probs are replaced by 0",
        },
    )
    s["avsd.avsd_loss"] = Spec(
        lambda **kw: avsd.avsd_loss(**kw),
        tensors=lambda: {
            "student_logprobs": -_rand(2, 5),
            "view_logprobs": -_rand(2, 3, 5, seed=1),
            "completion_mask": torch.ones(2, 5),
        },
        bad={"config": ("avsd",)},
    )
    emb = torch.nn.Sequential(torch.nn.Embedding(9, 8), torch.nn.Linear(8, 9))

    def tiny_dlm(input_ids, **_):
        return emb(input_ids)

    tiny_dlm.config = type("Config", (), {"vocab_size": 9})()  # like a transformers model's config

    s["dlm_distill.mdlm_loss"] = Spec(
        lambda x0, **kw: dlm_distill.mdlm_loss(tiny_dlm, x0, **{"mask_token_id": 8, "generator": _g(), **kw}),
        tensors=lambda: {"x0": torch.randint(0, 8, (2, 6), generator=_g()), "t": torch.tensor([0.3, 0.6])},
        bad={"mask_token_id": (-1, 2.5, 3), "t_eps": (0.0, 1.0, float("nan"))},
    )
    s["dlm_distill.mdlm_sample"] = Spec(
        lambda **kw: dlm_distill.mdlm_sample(
            tiny_dlm,
            **{"batch_size": 2, "seq_len": 5, "num_steps": 3, "mask_token_id": 8, "generator": _g(), **kw},
        ),
        bad={
            "batch_size": BAD_INT_POS,
            "seq_len": (0, -1),
            "num_steps": (0, 2.5),
            "mask_token_id": (-1, 9),
            "temperature": (-1.0, float("nan")),
        },
    )
    s["dlm_distill.DLMDistillConfig"] = Spec(
        lambda **kw: dlm_distill.DLMDistillConfig(**kw),
        bad={
            "pool_size": (0,),
            "batch_size": (0, 2.5),
            "divergence": ("x",),
            "ab_alpha": (float("nan"),),
            "kd_temperature": (0.0, -1.0),
            "ema_decay": (1.5, -0.1),
            "t_eps": (0.0, 1.0),
            "lr": (0.0, float("nan")),
        },
    )
    s["dho.DualHeadClassifier"] = Spec(
        lambda x, **kw: dho.DualHeadClassifier(
            torch.nn.Linear(4, 6), **{"feature_dim": 6, "num_classes": 3, **kw}
        )(x),
        tensors=lambda: {"x": _randn(5, 4)},
        bad={"feature_dim": (0, 5, 2.5), "num_classes": (0, 1.5)},
        skip={
            "x:extra_dim": "x goes to the user's backbone unchanged; the backbone's own shape errors surface",
            "x:missing_dim": "x goes to the user's backbone unchanged",
            "x:int64": "x goes to the user's backbone unchanged (a backbone may take token ids)",
            "x:bool": "x goes to the user's backbone unchanged",
            "x:float16": "x goes to the user's backbone unchanged (its weights set the dtype)",
            "x:float64": "x goes to the user's backbone unchanged (its weights set the dtype)",
            "x:meta": "x goes to the user's backbone unchanged (meta propagates through torch modules)",
        },
    )
    dh = lambda: {  # noqa: E731
        "ce_logits": _randn(4, 3),
        "kd_logits": _randn(4, 3, seed=1),
        "teacher_logits_labeled": _randn(4, 3, seed=2),
        "labels": torch.tensor([0, 2, 1, 0]),
    }
    s["dho.DHOLoss"] = Spec(
        lambda ce_logits, kd_logits, teacher_logits_labeled, labels, **kw: dho.DHOLoss(**kw)(
            dho.DualHeadOutput(ce_logits, kd_logits, ce_logits), labels, None, teacher_logits_labeled
        ),
        tensors=dh,
        bad={"lam": (-0.1, 1.5, float("nan")), "temperature": (0.0, -1.0, float("nan"))},
        aliases={"teacher_logits_labeled": ("teacher_logits",)},
    )
    s["dho.SingleHeadKDLoss"] = Spec(
        lambda ce_logits, teacher_logits_labeled, labels, **kw: dho.SingleHeadKDLoss(**kw)(
            ce_logits, labels, None, teacher_logits_labeled
        ),
        tensors=lambda: {k: v for k, v in dh().items() if k != "kd_logits"},
        bad={"lam": (-0.1, 1.5, float("nan")), "temperature": (0.0, -1.0, float("nan"))},
        aliases={"ce_logits": ("logits_labeled",), "teacher_logits_labeled": ("teacher_logits",)},
    )
    return s


def _graph():
    """A 6-node ring (both directions) with 3 features."""
    src = torch.arange(6)
    ring = torch.stack([torch.cat([src, (src + 1) % 6]), torch.cat([(src + 1) % 6, src])])
    return {"x": _rand(6, 3), "edge_index": ring}


def _specs_more() -> dict[str, Spec]:
    from torch_geometric.data import Data

    from neurips26.distributed import adera
    from neurips26.editing import amaris, amps, crosslingual_edit
    from neurips26.federated import asap, fedrevive
    from neurips26.graph import gcn_mlp, invgnn_wm, sgnnbench
    from neurips26.kg import corf, score
    from neurips26.nn import ancre, aot_pot
    from neurips26.optim import accelegrad_sharp
    from neurips26.rl import aiql

    s: dict[str, Spec] = {}

    # ------------------------------------------------------------------ rl (continued)
    s["aiql.WarehouseConsolidationEnv"] = Spec(
        lambda **kw: aiql.WarehouseConsolidationEnv(
            **{"n_locations": 30, "n_skus": 5, "max_candidates": 16, **kw}
        ),
        bad={
            "n_locations": (0, -5, 2.5),
            "n_skus": (0,),
            "budget": (0, -1),
            "max_candidates": (0,),
            "objective": ("profit",),
            "horizon": (0,),
            "capacity": (0,),
            "invalid_action": ("crash",),
        },
    )
    actor = lambda: aiql.CandidateScoringActor(3, 8, hidden=8, pool_dim=4)  # noqa: E731
    critic = lambda: torch.nn.Linear(19, 1)  # noqa: E731
    s["aiql.AIQL"] = Spec(
        lambda **kw: aiql.AIQL(actor(), critic, torch.nn.Linear(3, 1), **kw),
        bad={
            "expectile": (0.0, 1.0, float("nan")),
            "beta": (-1.0, float("nan")),
            "gamma": (1.5, -0.1),
            "polyak": (0.0, 1.5),
            "max_weight": (0.0,),
            "lr": (0.0, -1.0),
        },
    )
    s["aiql.A2IQL"] = Spec(
        lambda **kw: aiql.A2IQL(
            aiql.AIQL(actor(), critic, torch.nn.Linear(3, 1)), **{"reward_model": None, "eta": 0.0, **kw}
        ),
        bad={
            "source": ("aiql", None),
            "kappa": (-1.0, float("nan")),
            "eta": (-1.0, float("nan")),
            "lr": (0.0,),
        },
    )
    s["aiql.OfflineRankingDataset"] = Spec(
        lambda **kw: aiql.OfflineRankingDataset(
            **{"records": {"candidates": [np.zeros((2, 8))], "reward": [1.0]}, **kw}
        ),
        bad={"records": ({}, {"reward": [1.0]}, None), "reward_key": (3,)},
    )

    # ------------------------------------------------------------------ editing
    s["amaris.AmarisConfig"] = Spec(
        lambda **kw: amaris.AmarisConfig(**kw),
        bad={
            "budget": BAD_PROB,
            "alpha": (float("nan"), float("inf")),
            "max_rank_frac": (0.0, 1.5),
            "eps_rel": (-1.0, float("nan")),
            "mode": ("x",),
            "other": ("x",),
            "other_alpha": (float("nan"),),
        },
    )
    lin_sd = lambda seed: {"fc.weight": _randn(4, 3, seed=seed), "fc.bias": _randn(4, seed=seed + 1)}  # noqa: E731
    s["amaris.amaris_merge"] = Spec(
        lambda w, C, **kw: amaris.amaris_merge(
            lin_sd(0),
            {**lin_sd(2), "fc.weight": w},
            {"fc": C},
            {"fc": torch.eye(3, dtype=torch.float64)},
            **kw,
        ),
        tensors=lambda: {"w": _randn(4, 3, seed=5), "C": torch.eye(3, dtype=torch.float64) * 2},
        bad={"config": ("amaris",)},
        aliases={"w": ("specialist", "fc.weight"), "C": ("moment", "spec_moments", "'fc'", "C_s")},
    )
    toy_head = _randn(8, 5, seed=7)
    mllm = lambda emb: emb.mean(1) @ toy_head.to(emb.dtype)  # noqa: E731 - a user model in the input's dtype
    vis = torch.tensor([[True, True, False, False]] * 3)
    s["amps.functional_entropy"] = Spec(
        lambda values, **kw: amps.functional_entropy(values, **kw),
        tensors=lambda: {"values": _rand(3, 6) + 0.1},
        bad={"dim": (5, 1.5), "eps": (-1.0, float("nan"))},
    )
    s["amps.modality_contributions"] = Spec(
        lambda inputs_embeds, **kw: amps.modality_contributions(
            mllm, inputs_embeds, {"vision": vis, "text": ~vis}, **{"num_samples": 4, "generator": _g(), **kw}
        ),
        tensors=lambda: {"inputs_embeds": _randn(3, 4, 8)},
        skip={
            "inputs_embeds:float16": "inputs_embeds goes to the user's forward_fn, whose weights set the dtype",
            "inputs_embeds:float64": "inputs_embeds goes to the user's forward_fn, whose weights set the dtype",
        },
        bad={
            "sigma_rel": (0.0, -1.0, float("nan")),
            "num_samples": (0, 2.5),
            "f": ("logit2",),
            "modality_masks": ({}, {"vision": torch.ones(2, 2, dtype=torch.bool)}),
        },
    )
    s["crosslingual_edit.EditRequest"] = Spec(
        lambda **kw: crosslingual_edit.EditRequest(
            **{"prompt": "The capital of X is", "subject": "X", "target_new": " Y", **kw}
        ),
        bad={"prompt": ("", None, 3.5), "subject": ("Z", (3, 1), None), "target_new": ("", None, [])},
    )
    upd = lambda: crosslingual_edit.EditUpdate(  # noqa: E731
        _randn(4, 3, seed=1).double() @ _randn(3, 5, seed=2).double(),
        _randn(4, 3, seed=1).double(),
        _randn(3, 5, seed=2).double(),
        _randn(5, 3, seed=3).double(),
        "random",
    )
    s["crosslingual_edit.decompose_gap"] = Spec(
        lambda **kw: crosslingual_edit.decompose_gap(**{"update": upd(), "i": 0, **kw}),
        tensors=lambda: {
            "k_s": _randn(5, seed=4).double(),
            "k_t": _randn(5, seed=5).double(),
            "r_t": _randn(4, seed=6).double(),
            "C0": torch.eye(5, dtype=torch.float64) * 2,
        },
        bad={"i": (-1, 3, 1.5), "update": ("rome",)},
    )

    # ------------------------------------------------------------------ graph
    s["gcn_mlp.GCNMLP"] = Spec(
        lambda x, edge_index, **kw: gcn_mlp.GCNMLP(
            3, **{"hidden_channels": 8, "out_channels": 4, **kw}
        ).embed(x, edge_index),
        tensors=_graph,
        bad={
            "hidden_channels": (0, -1),
            "out_channels": (0,),
            "loss": ("mse",),
            "variant": ("x",),
            "lambd": (-1.0, float("nan")),
            "dropout": (1.5, -0.1),
            "propagation_k": (-1,),
        },
    )
    for cls in ("IF", "LIF", "PLIF"):
        s[f"sgnnbench.{cls}"] = Spec(
            lambda current, _cls=cls, **kw: getattr(sgnnbench, _cls)(**kw)(current),
            tensors=lambda: {"current": _randn(4, 5)},
            bad={
                "v_threshold": (0.0, -1.0, float("nan")),
                "surrogate": ("relu",),
                "alpha": (0.0, float("nan")),
                **({"tau": (0.5, float("nan"), 0.0)} if cls != "IF" else {"v_reset": (float("nan"),)}),
            },
        )
    s["sgnnbench.SpikingGCNConv"] = Spec(
        lambda x, edge_index, **kw: sgnnbench.SpikingGCNConv(3, 4, **kw)(x, edge_index),
        tensors=_graph,
        bad={"K": (-1, 1.5), "neuron": ("HH",), "norm": ("ln",), "v_threshold": (0.0, float("nan"))},
    )
    s["sgnnbench.SGNN"] = Spec(
        lambda x, edge_index, **kw: sgnnbench.SGNN(3, 8, 2, **{"T": 2, **kw})(x, edge_index),
        tensors=_graph,
        bad={
            "num_layers": (0, -1),
            "conv": ("cheb",),
            "T": (0, 1.5),
            "encoding": ("rate",),
            "tau": (0.5, float("nan")),
            "v_threshold": (0.0,),
            "K": (-1,),
        },
    )
    s["sgnnbench.STFN"] = Spec(
        lambda z, **kw: sgnnbench.STFN(**{"channels": 5, **kw})(z),
        tensors=lambda: {"z": _randn(4, 5)},
        bad={
            "channels": (0, -1),
            "v_threshold": (0.0, -1.0, float("nan")),
            "eps": (0.0, -1e-5, float("nan")),
        },
    )
    s["sgnnbench.SpikingGATConv"] = Spec(
        lambda x, edge_index, **kw: sgnnbench.SpikingGATConv(3, 4, **kw)(x, edge_index),
        tensors=_graph,
        bad={"heads": (0, -1), "norm": ("ln",), "neuron": ("HH",)},
    )
    for cls, extra in (
        ("DRSGNN", {"pe_steps": (0,)}),
        ("SpikeGCL", {"K": (0,)}),
        ("SpikeGraphormer", {"num_layers": (0,)}),
    ):
        s[f"sgnnbench.{cls}"] = Spec(
            lambda x, edge_index, _cls=cls, **kw: getattr(sgnnbench, _cls)(3, 8, 2, **{"T": 2, **kw})(x, edge_index),
            tensors=_graph,
            bad={"T": (0,), "neuron": ("HH",), **extra},
        )
    s["sgnnbench.energy_report"] = Spec(
        lambda x, edge_index, **kw: sgnnbench.energy_report(
            sgnnbench.SGNN(3, 8, 2, T=2), Data(x=x, edge_index=edge_index), **kw
        ),
        tensors=_graph,
        bad={"e_mac": (-1.0, float("nan")), "e_ac": (-1.0, float("inf")), "model": ("sgnn",)},
        aliases={"x": ("data.x",), "edge_index": ("data.edge_index",)},
    )
    s["invgnn_wm.normalized_algebraic_connectivity"] = Spec(
        lambda edge_index, **kw: invgnn_wm.normalized_algebraic_connectivity(
            edge_index, **{"num_nodes": 6, **kw}
        ),
        tensors=lambda: {"edge_index": _graph()["edge_index"]},
        bad={"num_nodes": (0, -1, 2.5, 3), "normalization": ("none",)},
    )
    s["invgnn_wm.WatermarkKey"] = Spec(
        lambda **kw: invgnn_wm.WatermarkKey(
            **{
                "seed": 0,
                "num_carriers": 8,
                "families": ("er",),
                "n_range": (8, 12),
                "reference": 0.3,
                "key_bits": None,
                "head_state": {},
                **kw,
            }
        ),
        bad={
            "num_carriers": (0, -1),
            "n_range": ((12, 8), (0, 4)),
            "reference": (float("nan"), -1.0),
            "task": ("edge2",),
            "families": ((), ("cube",)),
        },
    )
    carriers = lambda: invgnn_wm.CarrierSet.generate(4, 16, (8, 12), num_features=3)  # noqa: E731
    s["invgnn_wm.InvGNNWatermark"] = Spec(
        lambda **kw: invgnn_wm.InvGNNWatermark(**{"carriers": carriers(), "out_dim": 3, **kw}),
        bad={
            "out_dim": (0, -1),
            "task": ("edge2",),
            "lambda_wm": (-1.0, float("nan")),
            "mu": (float("nan"),),
            "margin": (-0.1, float("nan")),
            "carriers": ("set",),
        },
    )

    # ------------------------------------------------------------------ kg
    def corf_scores(queries, **kw):
        g = Data(
            edge_index=torch.tensor([[0, 1, 2, 3], [1, 0, 3, 2]]),
            edge_type=torch.tensor([0, 3, 1, 4]),
            num_nodes=4,
        )
        torch.manual_seed(0)
        mod = corf.NBFNetLite(6, hidden=8, num_layers=2).eval()
        with torch.no_grad():
            return corf.CoRF(mod, corf.ReceptiveSupportPlanner(2), **kw).scores(queries, g)

    s["corf.CoRF"] = Spec(
        corf_scores,
        tensors=lambda: {"queries": torch.tensor([[0, 2], [1, 0]])},
        bad={"batch_size": (0, -1, 2.5), "residual": ("approx",)},
    )
    s["score.VariableInfo"] = Spec(
        lambda **kw: score.VariableInfo(**{"index": 0, "kind": "continuous", "is_target": False, **kw}),
        bad={"index": (-1, 1.5), "kind": ("graph", 3), "is_target": ("yes",)},
    )

    # ------------------------------------------------------------------ federated
    s["fedrevive.FedRevive"] = Spec(
        lambda **kw: fedrevive.FedRevive(**{"num_classes": 3, "input_shape": (4,), **kw}),
        bad={
            "num_classes": (0, 1, 2.5),
            "input_shape": ((), (0,), (4.5,)),
            "buffer_size": (0,),
            "server_lr": (0.0, -1.0),
            "staleness_exp": (-1.0, float("nan")),
            "beta_max": (1.5, -0.1),
            "beta_mode": ("x",),
            "temperature": (0.0,),
            "kd_steps": (-1,),
            "batch_size": (0,),
        },
    )
    s["fedrevive.ConditionalGenerator"] = Spec(
        lambda z, y, **kw: fedrevive.ConditionalGenerator(
            **{"num_classes": 3, "out_shape": (4,), "z_dim": 5, "hidden": 8, **kw}
        )(z, y),
        tensors=lambda: {"z": _randn(2, 5), "y": torch.tensor([0, 2])},
        bad={"num_classes": (0, 1.5), "out_shape": ((), (0,)), "z_dim": (0,), "hidden": (0,)},
    )

    def asap_craft(honest, **kw):
        from neurips26.federated.attacks import AttackContext

        return asap.ASAPAttack(**{"target": 0.5, **kw}).craft(
            AttackContext(1, torch.zeros(honest.shape[-1]), honest, observe=lambda p: 0.9, num_clients=10)
        )

    s["asap.ASAPAttack"] = Spec(
        asap_craft,
        tensors=lambda: {"honest": _randn(3, 20) * 0.1 + 0.05},
        bad={
            "target": (1.5, -0.1, float("nan")),
            "q": (0.0, 1.5),
            "eps": (-0.1,),
            "period": (0,),
            "gamma_theta": (-1.0,),
            "b_bounds": ((1.0, 0.1),),
            "direction": ("x",),
        },
        aliases={"honest": ("honest_updates",)},
    )
    s["asap.ASMCController"] = Spec(
        lambda **kw: asap.ASMCController(**{"target": 0.5, **kw}).step(0.7, 1),
        bad={
            "target": (1.5, float("nan")),
            "q": (0.0, 1.5),
            "eps": (-0.1,),
            "period": (0.0,),
            "b_bounds": ((1.0, 0.1),),
            "theta_max": (0.0, float("nan")),
        },
    )

    # ------------------------------------------------------------------ distributed
    s["adera.AdERAConfig"] = Spec(
        lambda **kw: adera.AdERAConfig(**kw),
        bad={
            "warmup_iters": (-1, 2.5),
            "warmup_rate": (-0.1, 1.5),
            "warmup": ("x",),
            "ema_decay": (1.5,),
            "block_size": (0, -8),
            "modes": ((), ("zip9",)),
            "capacity_frac": (0.0, 1.5),
            "chunks": (0,),
            "margin": (-1.0,),
        },
    )
    s["adera.AdERAState"] = Spec(
        lambda **kw: adera.AdERAState(
            **{"config": adera.AdERAConfig(), "numel": 64, "dtype": torch.bfloat16, "world_size": 2, **kw}
        ),
        bad={
            "config": ("adera",),
            "numel": (0, -1, 2.5),
            "dtype": (torch.int64, "bf16"),
            "world_size": (0, 1.5),
        },
    )
    s["adera.encode_shard"] = Spec(
        lambda x, **kw: adera.encode_shard(x, **{"cache": None, **kw}),
        tensors=lambda: {"x": _randn(64).bfloat16()},
        bad={"mode": ("zip9",), "config": ("adera",)},
    )
    s["adera.decode_payload"] = Spec(
        lambda body, **kw: adera.decode_payload(
            adera.Payload(mode="raw", dtype=torch.bfloat16, numel=8, n_changed=8, body=body),
            **{"cache": None, **kw},
        ),
        tensors=lambda: {"body": _randn(8).bfloat16().view(torch.uint8)},
        bad={"payload": ("raw",)},
    )
    s["adera.Payload"] = Spec(
        lambda body, **kw: adera.Payload(
            **{"mode": "raw", "dtype": torch.bfloat16, "numel": 8, "n_changed": 8, "body": body, **kw}
        ),
        tensors=lambda: {"body": torch.zeros(16, dtype=torch.uint8)},
        bad={
            "mode": ("zip9",),
            "numel": (-1, 2.5),
            "n_changed": (-1, 9),
            "block_size": (0,),
            "dtype": ("bf16",),
        },
    )
    s["adera.CostModel"] = Spec(
        lambda **kw: adera.CostModel(**kw),
        bad={
            "alpha": (-1.0, float("nan")),
            "bandwidth": (0.0, -1.0, float("nan")),
            "margin": (-0.5, float("nan")),
        },
    )
    s["adera.AdERAAllGather"] = Spec(
        lambda **kw: adera.AdERAAllGather(**kw), bad={"config": ("adera",), "cost_model": ("fast",)}
    )
    s["adera.simulate"] = Spec(
        lambda **kw: adera.simulate(
            **{
                "layers": [adera.LayerSpec(numel=10**6, compute_s=0.001)],
                "P": 4,
                "network": adera.Network(),
                **kw,
            }
        ),
        bad={"P": (0, 1.5), "layers": ([],), "change_rate": (-0.1, 1.5, float("nan")), "network": ("ib",)},
    )

    # ------------------------------------------------------------------ nn, optim
    s["ancre.ANCReConnector"] = Spec(
        lambda h0, **kw: ancre.ANCReConnector([torch.nn.Linear(6, 6) for _ in range(3)], **kw)(h0),
        tensors=lambda: {"h0": _randn(2, 6)},
        skip={"h0:missing_dim": "h0 goes to the user's blocks; any (B, *) shape is legal for the connector"},
        bad={
            "tau": (0.0, -1.0, float("nan")),
            "init": ("zeros",),
            "init_logit": (float("nan"),),
            "max_source_distance": (0, -1),
        },
    )
    s["aot_pot.sinkhorn_knopp"] = Spec(
        lambda logits, **kw: aot_pot.sinkhorn_knopp(logits, **kw),
        tensors=lambda: {"logits": _randn(2, 4, 4)},
        bad={"n_iters": (0, -1, 2.5)},
    )
    s["aot_pot.MultiStreamResidual"] = Spec(
        lambda x, **kw: aot_pot.MultiStreamResidual(
            torch.nn.Linear(8, 8), **{"dim": 8, "n_streams": 2, **kw}
        )(x),
        tensors=lambda: {"x": _randn(2, 3, 2, 8)},
        bad={
            "dim": (0, 7),
            "n_streams": (0, -1),
            "constraint": ("softmax2",),
            "sinkhorn_iters": (0,),
            "alpha_init": (float("nan"),),
        },
    )
    s["aot_pot.OperatorTransformer"] = Spec(
        lambda u_past, **kw: aot_pot.OperatorTransformer(
            **{
                "in_channels": 1,
                "out_channels": 1,
                "t_in": 2,
                "patch": 4,
                "dim": 8,
                "depth": 1,
                "modes": 2,
                **kw,
            }
        )(u_past),
        tensors=lambda: {"u_past": _randn(2, 2, 1, 16)},
        bad={
            "patch": (0, 3),
            "dim": (0,),
            "depth": (0, -1),
            "modes": (0,),
            "residual": ("dense",),
            "n_streams": (0,),
        },
    )

    def accel_step(grad, **kw):
        p = torch.nn.Parameter(_randn(4, 3))
        opt = accelegrad_sharp.AcceleGradSharp([p], **{"lr": 0.1, **kw})
        p.grad = grad
        opt.step()
        return p.detach()

    s["accelegrad_sharp.AcceleGradSharp"] = Spec(
        accel_step,
        tensors=lambda: {"grad": _randn(4, 3, seed=1)},
        bad={
            "lr": (0.0, -1.0, float("nan")),
            "anchor": ("x",),
            "geometry": ("x",),
            "radius": (0.0, float("inf")),
            "G": (-1.0, float("nan")),
            "alpha_schedule": ("x",),
            "ns_steps": (-1,),
            "weight_decay": (-0.1,),
            "mirror_p": (0.5,),
        },
        aliases={"grad": ("gradient", "p.grad", ".grad")},
        skip={
            f"grad:{k}": "torch refuses to assign a gradient of another shape/dtype/device to a parameter"
            for k in ("extra_dim", "missing_dim", "int64", "bool", "float16", "float64", "empty", "meta")
        },
    )
    # ------------------------------------------------------------------ rl: AEM, RewardFlow
    from neurips26.rl import aem, rewardflow

    s["aem.AEMConfig"] = Spec(
        lambda **kw: aem.AEMConfig(**kw),
        bad={
            "lam": (-1.0, float("nan")),
            "clip": (0.0, -1.0, float("nan")),
            "normalize": ("max",),
            "scope": ("x",),
        },
    )
    s["aem.aem_advantages"] = Spec(
        lambda **kw: aem.aem_advantages(**kw),
        tensors=lambda: {
            "advantages": _randn(4),
            "old_logprobs": -_rand(4, 6, seed=1),
            "response_mask": torch.ones(4, 6),
        },
        bad={"config": ("aem",), "group_ids": ([0, 1],)},
    )

    def traj(**kw):
        return rewardflow.Trajectory(
            **{
                "group_id": 0,
                "observations": ["a", "b", "c"],
                "actions": ["x", "y"],
                "rewards": [0.0, 1.0],
                **kw,
            }
        )

    s["rewardflow.Trajectory"] = Spec(
        traj,
        bad={
            "group_id": ([1],),
            "observations": (["a"], []),
            "actions": (["x"],),
            "rewards": ([0.0], [float("nan"), 1.0]),
        },
    )
    s["rewardflow.rewardflow_rewards"] = Spec(
        lambda **kw: rewardflow.rewardflow_rewards(
            **{"trajs": [traj(), traj(observations=["a", "c", "b"])], **kw}
        ),
        bad={"trajs": ([], None, ["traj"]), "config": ("rf",), "key_fn": (None,)},
    )

    # ------------------------------------------------------------------ temporal
    from neurips26.temporal import s3former

    def stream():
        return {
            "src": torch.tensor([0, 1, 2, 3, 1]),
            "dst": torch.tensor([1, 2, 3, 0, 3]),
            "t": torch.tensor([1, 2, 3, 4, 5]),
            "msg": _randn(5, 3),
        }

    def s3(src, dst, t, msg, **kw):
        torch.manual_seed(0)
        small = {"hidden": 8, "time_dim": 4, "long_len": 8, "short_len": 2, "patch_size": 4, "k_sub": 4}
        model = s3former.S3Former(5, 3, **{**small, "num_layers": 1, **kw}).eval()
        model.observe(src, dst, t, msg)
        after = torch.full_like(t, int(t.max()) + 1) if t.numel() else t
        return model.score(src, dst, after)

    s["s3former.S3Former"] = Spec(
        s3,
        tensors=stream,
        bad={
            "num_nodes": (0,),
            "hidden": (1,),
            "dropout": (1.0, -0.1),
            "fusion": ("sum",),
            "long_len": (6,),
            "num_heads": (3,),
        },
    )

    from neurips26.temporal import regate

    def token(**kw):
        fields = {
            "doc_id": "d0", "entity_ids": (1,), "group_ids": (0,), "policy_type": "sanction", "direction": 1,
            "publish_time": 1.0, "effective_time": 2.0, "confidence": 0.8, "evidence": (0, 5), "extractor": "rule",
        }  # fmt: skip
        return regate.PolicyToken(**{**fields, **kw})

    s["regate.PolicyToken"] = Spec(
        token,
        bad={
            "confidence": (-0.1, 1.5, float("nan")),
            "publish_time": (float("nan"), float("inf")),
            "direction": (2, True),
            "evidence": ((5, 1), (-1, 2)),
            "entity_ids": ([1], (-1,)),
        },
    )

    def gated(src, dst, t, msg, **kw):
        torch.manual_seed(0)
        backbone = regate.GraphMixerLite(5, 3, hidden=8, k=4, time_dim=4)
        model = regate.REGATE(
            backbone, regate.BoundedPolicyGate(8, k_max=2, **kw), torch.nn.Linear(8, 1)
        ).eval()
        store = regate.TokenStore(torch.tensor([0, 0, 1, 1, 0]))
        store.add([token(entity_ids=(1,), publish_time=0.0, effective_time=0.0)])
        model.observe(src, dst, t, msg)
        after = torch.full_like(t, int(t.max()) + 1) if t.numel() else t
        return model(src, after, store)

    s["regate.REGATE"] = Spec(gated, tensors=stream, bad={"k_max": (0,), "rho": (-1.0,), "tau_s": (0.0,)})
    return s


def _specs_new() -> dict[str, Spec]:
    """Components of the methods added for issues 17, 19 and 20."""
    from neurips26.agents import channel_router as cr

    s: dict[str, Spec] = {}

    # ------------------------------------------------------------------ agents
    def _cr_router(Q, C, **kw):
        prompts = [f"family {i % 3} item {i}" for i in range(6)]
        arms = [cr.Arm(f"c{j}", "single") for j in range(3)]
        init = {k: kw.pop(k) for k in ("k", "weighting", "temperature", "lam") if k in kw}
        router = cr.SemanticKNNRouter(cr.HashingEmbedder(32), **{"k": 2, **init}).fit(
            prompts, arms, Q, C, **kw
        )
        return router.estimates("family 1 item 9"), router.route("family 1 item 9")

    def _cr_div(**kw):
        answers = iter(["4", "5", "4", "6", "5", "4", "5", "4"] * 4)
        ch = cr.Channel(lambda p, n, t: [next(answers) for _ in range(n)], name="scripted")
        args = {"task": cr.Task("What is 2 + 2?", answer="4"), "channels": [ch], "rng": np.random.default_rng(0),
                "n": 5, "judge": lambda t, a: float(a == t.answer), **kw}  # fmt: skip
        res = cr.diversity_combining(args.pop("task"), args.pop("channels"), **args)
        return {"cost": res.cost, "n_calls": res.n_calls}

    s["channel_router.SemanticKNNRouter"] = Spec(
        _cr_router,
        tensors=lambda: {"Q": _rand(6, 3), "C": _rand(6, 3) + 0.5},
        bad={
            "k": (0, 7, 2.5),
            "lam": (-1.0, float("nan"), float("inf")),
            "temperature": (0.0, -1.0),
            "weighting": ("mean",),
        },  # fmt: skip
    )
    s["channel_router.diversity_combining"] = Spec(
        _cr_div,
        bad={
            "n": (0, -1, 2.5),
            "combine": ("mean",),
            "weights": ("softmax",),
            "channels": ([], [None]),
            "task": ("plain string",),
            "rng": (0,),
            "weight_temperature": (0.0, float("nan")),
        },  # fmt: skip
    )

    from neurips26.agents import cot_pathology as cotp

    def _cotp_ref():
        seqs = [[0, 1, 2, -1], [0, 2, 1, -1], [1, 2, -1]] * 3
        return cotp.LatentStateModel.from_sequences(seqs, 3, uncertainties=[[1.0] * len(q) for q in seqs])

    s["cot_pathology.Pathology"] = Spec(
        lambda **kw: cotp.Pathology.parse(kw.get("value", "looping")),
        bad={"value": ("nope", 3, None)},
        aliases={"value": ("pathology",)},
    )
    s["cot_pathology.detect_all"] = Spec(
        lambda states, uncertainty, **kw: cotp.detect_all(
            cotp.Trajectory(states, uncertainty, answers=(None,) * 5 + ("7",)),
            kw.pop("ref", _cotp_ref()),
            **kw,
        ),
        tensors=lambda: {"states": torch.tensor([0, 1, 2, 1, 2, -1]), "uncertainty": _rand(6)},
        bad={"ref": (None, cotp.LatentStateModel(n_states=2)), "config": ("x", 3), "verifier": (3, "yes")},
        aliases={"states": ("uncertainty", "answers"), "uncertainty": ("answers",)},
    )

    import neurips26.agents.skim as skim

    def _skim_stats(d_in=6):
        st = skim.RoleStats.zeros(d_in)
        st.add(_randn(24, d_in, seed=3), torch.arange(24) % 3)
        return st

    def _skim_lm():
        from neurips26.common.models import build_tiny_lm

        return build_tiny_lm("llama", vocab_size=16, seed=0, hidden_size=16, intermediate_size=32)

    s["skim.TokenRole"] = Spec(
        lambda **kw: skim.TokenRole(**{"value": 1, **kw}),
        bad={"value": (5, -1, "decision", 1.5)},
        aliases={"value": ("TokenRole",)},
    )
    s["skim.skim_saliency"] = Spec(
        lambda weight, **kw: skim.skim_saliency(weight, _skim_stats(), **kw),
        tensors=lambda: {"weight": _randn(4, 6)},
        bad={"role_weights": ({"decisoin": 1.0}, {"decision": -1.0}, {"format": float("nan")}, [1.0])},
    )
    s["skim.prune_model"] = Spec(
        lambda **kw: skim.prune_model(_skim_lm(), None, **{"sparsity": 0.5, "method": "magnitude", **kw}),
        bad={
            "sparsity": (-0.1, 1.0, 1.5, float("nan"), "0.5"),
            "method": ("sparsegpt", 3),
            "pattern": ("3:4", 2),
            "role_weights": ({"decisoin": 1.0},),
            "modules": (["lm_head_missing"],),
        },
        aliases={"modules": ("module",)},
    )

    # ------------------------------------------------------------------ vision
    ahpa_levels = ("down_blocks.0.resnets.0", "down_blocks.0", "down_blocks.1", "mid_block")

    def _ahpa_extract(x, **kw):
        from neurips26.vision import ahpa

        torch.manual_seed(0)
        vae = ahpa.build_vae(block_out_channels=(8, 16, 16))
        kw = {"layer_names": ahpa_levels, "token_grid": (4, 4), **kw}
        with ahpa.HierarchicalFeatureExtractor(vae.encoder, **kw) as ex:
            return ex(x)

    s["ahpa.HierarchicalFeatureExtractor"] = Spec(
        _ahpa_extract,
        tensors=lambda: {"x": _randn(2, 1, 16, 16)},
        bad={
            "token_grid": ((3, 3), (0, 4), "4x4"),
            "resample": ("max",),
            "global_level": ("yes",),
            "layer_names": ((), ("nope",)),
        },  # fmt: skip
    )

    def _radomni(make):
        def call(ncct, cect=None, **kw):
            from neurips26.vision import radomni

            torch.manual_seed(0)
            enc = radomni.NCCTViT(16, 8, 16, 1, 2)
            obj = make(radomni, enc, **kw)
            batch = {"ncct": ncct} if cect is None else {"ncct": ncct, "cect": cect}
            return obj(batch, enc)

        return call

    s["radomni.MaskedImageModeling"] = Spec(
        _radomni(lambda m, enc, **kw: m.MaskedImageModeling(enc, decoder_dim=8, **kw)),
        tensors=lambda: {"ncct": _rand(2, 1, 16, 16)},
        bad={"mask_ratio": (-0.1, 1.0, float("nan")), "decoder_depth": BAD_INT_POS},
    )
    s["radomni.CrossPhaseTransfer"] = Spec(
        _radomni(
            lambda m, enc, **kw: m.CrossPhaseTransfer(
                enc, teacher=m.NCCTViT(16, 8, 16, 1, 2), decoder_dim=8, **kw
            )
        ),
        tensors=lambda: {"ncct": _rand(2, 1, 16, 16), "cect": _rand(2, 1, 16, 16, seed=1)},
        bad={
            "mask_ratio": (-0.1, 1.0, float("nan")),
            "recon_weight": (-1.0, float("nan")),
            "align_weight": (-1.0, float("nan")),
            "teacher": ("teacher",),
        },  # fmt: skip
    )

    # ------------------------------------------------------------------ robotics
    def _spark_branch(r=4):
        from peft import LoraConfig

        from neurips26.robotics import spark_vla

        cfg = LoraConfig(r=r, lora_alpha=8, lora_dropout=0.0, target_modules=["qkv"])
        return spark_vla.SpatialLoRABranch(spark_vla.build_vit(16, 4, 32, 2, 4), cfg, ["blocks.1.attn"])

    def _spark_recorder(**kw):
        from neurips26.robotics import spark_vla

        return spark_vla.AttentionRecorder(
            **{"model": spark_vla.build_vit(16, 4, 32, 2, 4), "layer_names": ["blocks.0.attn"], **kw}
        )

    s["spark_vla.SpatialLoRABranch"] = Spec(
        lambda images, **kw: _spark_branch(**kw)(images),
        tensors=lambda: {"images": _rand(2, 3, 16, 16)},
        bad={"r": (0, -1, 2.5)},
        aliases={"r": ("lora_config.r", "rank")},
    )
    s["spark_vla.AttentionRecorder"] = Spec(
        _spark_recorder, bad={"layer_names": ((), ("blocks.9.attn",)), "model": ("not a module",)}
    )

    def recpo_view(obs):
        from neurips26.robotics import recpo

        return recpo.ObjectStateView().encode(obs)

    s["recpo.ProcedureView"] = Spec(recpo_view, tensors=lambda: {"obs": torch.zeros(30, dtype=torch.float64)})

    # ------------------------------------------------------------------ nn: aNCA
    from neurips26.nn import anca

    def _deform_args():
        return {
            "input": _randn(2, 4, 6, 6),
            "offset": 0.5 * _randn(2, 2 * 9, 6, 6, seed=1),
            "weight": _randn(3, 4, 3, 3, seed=2),
            "mask": _rand(2, 9, 6, 6, seed=3),
        }

    deform_bad = {"stride": (0, -1, 1.5), "padding": (-1,), "dilation": (0,), "bias": ("b", torch.zeros(5))}
    s["anca.deform_conv2d"] = Spec(
        lambda **kw: anca.deform_conv2d(**{"padding": 1, **kw}),
        tensors=_deform_args,
        bad={**deform_bad, "backend": ("cuda", 3)},
    )
    s["anca.deform_conv2d_reference"] = Spec(
        lambda **kw: anca.deform_conv2d_reference(**{"padding": 1, **kw}),
        tensors=_deform_args,
        bad=deform_bad,
    )
    s["anca.DeformablePerception"] = Spec(
        lambda state, **kw: anca.DeformablePerception(4, 6, **kw)(state),
        tensors=lambda: {"state": _randn(2, 4, 5, 5)},
        bad={
            "kernel_size": (0, 2, -3),
            "offset_groups": (0, 3),
            "max_offset": (0.0, -1.0, float("nan")),
            "modulation": ("relu",),
            "backend": ("cuda",),
        },
    )
    s["anca.NCAPerception"] = Spec(
        lambda state, **kw: anca.NCAPerception(4, 12, **kw)(state),
        tensors=lambda: {"state": _randn(2, 4, 5, 5)},
        bad={"kind": ("fft",), "kernel_size": (0, 2), "dilation": (0, -1), "padding_mode": ("reflect",)},
    )
    s["anca.AdaptiveNCA"] = Spec(
        lambda inputs, **kw: anca.AdaptiveNCA(3, 2, 2, update_hidden=8, **kw)(inputs, steps=2),
        tensors=lambda: {"inputs": _rand(2, 3, 5, 5)},
        bad={
            "perception": ("attention",),
            "fire_rate": (-0.1, 1.5, float("nan")),
            "clamp": (0.0, -1.0, float("nan")),
            "update_hidden": (0, -1),
            "hidden_channels": (-1,),
            "padding_mode": ("circular",),
        },
    )
    s["anca.SudokuDataset"] = Spec(
        lambda **kw: anca.SudokuDataset(**{"n": 2, "n_blank": 10, "seed": 0, **kw})[0],
        bad={"n": (0, -1, 1.5), "n_blank": (-1, 82)},
    )
    s["anca.MazeDataset"] = Spec(
        lambda **kw: anca.MazeDataset(**{"n": 2, "cells": 3, "seed": 0, **kw})[1],
        bad={"n": (0, -1), "cells": (0, 1, 2.5)},
    )

    def _sudoku():
        return anca.SudokuDataset(2, 10, seed=0)

    s["anca.sudoku_is_valid"] = Spec(
        lambda **kw: anca.sudoku_is_valid(**{"grid": _sudoku().solutions[0].numpy(), **kw}),
        bad={"grid": (np.ones((9, 8), dtype=np.int64), np.ones(81, dtype=np.int64))},
    )
    s["anca.sudoku_solve_rate"] = Spec(
        lambda **kw: anca.sudoku_solve_rate(
            **{"pred": _sudoku().solutions, "puzzles": _sudoku().puzzles, **kw}
        ),
        bad={"pred": (np.ones((2, 9, 8)), np.ones((0, 9, 9))), "puzzles": (np.ones((3, 9, 9)),)},
    )

    def _maze_walls():
        return anca.MazeDataset(1, 3, seed=0).inputs[0, 0].numpy().astype(bool)

    s["anca.bfs_shortest_path"] = Spec(
        lambda **kw: anca.bfs_shortest_path(
            **{"walls": _maze_walls(), "start": (1, 1), "goal": (5, 5), **kw}
        ),
        bad={
            "start": ((0, 0), (-1, 1), (99, 1)),
            "goal": ((0, 0), (1,)),
            "walls": (np.zeros(7, dtype=bool),),
        },
    )

    def _paths():
        d = anca.MazeDataset(3, 3, seed=0)
        return {"pred_mask": d.targets.clone(), "target_mask": d.targets, "valid": d.open}

    bad_masks = {
        "pred_mask": (torch.zeros(3, 7), torch.zeros(0, 7, 7)),
        "target_mask": (torch.zeros(2, 7, 7),),
        "valid": (torch.ones(3, 7, 6),),
    }
    s["anca.maze_exact_match"] = Spec(lambda **kw: anca.maze_exact_match(**{**_paths(), **kw}), bad=bad_masks)
    s["anca.path_f1"] = Spec(lambda **kw: anca.path_f1(**{**_paths(), **kw}), bad=bad_masks)
    return s


def _aggregator_specs() -> dict[str, Spec]:
    """Robust aggregation rules of :mod:`neurips26.federated.robust` (used by the FedAvg-family strategies;
    not registry components, fuzzed as shared substrate): non-finite client updates must raise."""
    from neurips26.federated import robust

    ups = lambda: {"updates": _randn(9, 6)}  # noqa: E731
    return {
        "robust.fedavg": Spec(
            lambda updates, **kw: robust.fedavg(updates, **kw),
            tensors=ups,
            bad={"nonfinite": ("ignore",), "weights": (torch.zeros(9), -torch.ones(9))},
        ),
        "robust.coordinate_median": Spec(
            lambda updates, **kw: robust.coordinate_median(updates, **kw),
            tensors=ups,
            bad={"nonfinite": ("ignore",)},
        ),
        "robust.trimmed_mean": Spec(
            lambda updates, **kw: robust.trimmed_mean(updates, **kw),
            tensors=ups,
            bad={"beta": (-0.1, 0.5, float("nan")), "nonfinite": ("ignore",)},
        ),
        "robust.krum": Spec(
            lambda updates, **kw: robust.krum(updates, **{"num_malicious": 2, **kw}),
            tensors=ups,
            bad={"num_malicious": (-1, 4, 2.5), "nonfinite": ("ignore",)},
        ),
        "robust.multi_krum": Spec(
            lambda updates, **kw: robust.multi_krum(updates, **{"num_malicious": 2, **kw}),
            tensors=ups,
            bad={"num_malicious": (-1, 4), "nonfinite": ("ignore",)},
        ),
    }


EXTRA: dict[str, Spec] = _aggregator_specs()
SPECS: dict[str, Spec] = {**_specs(), **_specs_more(), **_specs_new(), **EXTRA}

EXEMPT: dict[str, str] = {
    "adakvq.calibrate_aad": "runs generate() on a full language model; its inputs are token ids checked by the model",
    "adkv.calibrate_adkv": "trains the quantiser by BPTT through a full language model (minutes); covered by its own tests",
    "adacal.register_adacal_attention": "registers an attention function with transformers; no tensor inputs",
    "archer.ArcherGRPOTrainer": "a TRL GRPOTrainer around a full model and dataset; its loss is fuzzed as archer_policy_loss",
    "abc_align.ABCRewardTrainer": "a training loop around a reward model; its loss is fuzzed as abc_reward_loss",
    "abc_align.ABCDPOTrainer": "a TRL DPOTrainer around a full model and dataset; its loss is fuzzed as abc_dpo_loss",
    "ssd.speculative_mixed_rollout": "generates with a student and a teacher language model",
    "ssd.SSDTrainer": "a training loop around a language model and tokenizer; its loss is fuzzed as ssd_loss",
    "dlm_distill.DLMDistiller": "a training loop around teacher and student models; its losses are fuzzed via mdlm_loss",
    "dho.train_dho": "a training loop over data loaders; its losses are fuzzed as DHOLoss and SingleHeadKDLoss",
    "crosslingual_edit.contrastive_align": "fine-tunes a full language model on sentence pairs",
    "adera.adera_all_gather": "a torch.distributed collective: needs an initialised process group",
    "adera.ShardedMoEWrapper": "wraps a model's experts for torch.distributed all-gathers (process group)",
    "adera.lossless_zlib_all_gather": "a torch.distributed collective: needs an initialised process group",
    "adera.int8_block_all_gather": "a torch.distributed collective: needs an initialised process group",
}


# ----------------------------------------------------------------------------------------- engine
MUTATIONS = (
    "extra_dim",
    "missing_dim",
    "int64",
    "bool",
    "float16",
    "float64",
    "empty",
    "nan",
    "inf",
    "huge",
    "meta",
)


def _mutate(t: torch.Tensor, kind: str) -> torch.Tensor | None:
    """The mutated tensor, or ``None`` when the mutation does not apply to ``t``."""
    floating = t.is_floating_point()
    if kind == "extra_dim":
        return t.unsqueeze(0)
    if kind == "missing_dim":
        return t.reshape(-1)[0] if t.dim() == 1 else t.reshape(-1) if t.dim() > 1 else None
    if kind == "int64":
        return (t * 3).round().to(torch.int64) if floating else None
    if kind == "bool":
        return t > 0 if t.dtype != torch.bool else None
    if kind == "float16":
        return t.half() if t.dtype != torch.float16 else None
    if kind == "float64":
        return t.double() if t.dtype != torch.float64 else None
    if kind == "empty":
        return t[:0] if t.dim() >= 1 else None
    if kind in ("nan", "inf", "huge"):
        if not floating or t.numel() == 0:
            return None
        out = t.clone()
        if kind == "huge":
            return out * 1e30
        out.view(-1)[-1 if kind == "inf" else 0] = float("nan") if kind == "nan" else float("inf")
        return out
    if kind == "meta":
        return t.to("meta")
    raise AssertionError(kind)


def _finite(obj: Any, meta_ok: bool, depth: int = 0) -> bool:
    if depth > 6 or obj is None or isinstance(obj, (str, bytes, bool, int, torch.dtype, torch.device)):
        return True
    if isinstance(obj, torch.Tensor):
        if obj.is_meta:
            return meta_ok
        if obj.is_sparse:
            obj = obj.coalesce().values()
        return not (obj.is_floating_point() or obj.is_complex()) or bool(torch.isfinite(obj).all())
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, np.ndarray):
        return not np.issubdtype(obj.dtype, np.floating) or bool(np.isfinite(obj).all())
    if isinstance(obj, Mapping):
        return all(_finite(v, meta_ok, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return all(_finite(v, meta_ok, depth + 1) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return all(_finite(getattr(obj, f.name), meta_ok, depth + 1) for f in dataclasses.fields(obj))
    return True  # modules, configs and other objects: nothing numeric to check


def _outcome(spec: Spec, call_kwargs: dict, names: tuple[str, ...], meta_ok: bool) -> str | None:
    """``None`` if the case passes, else a description of the failure."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = spec.call(**call_kwargs)
    except ACCEPTED as e:
        msg = str(e)
        if any(n in msg for n in names):
            return None
        return f"{type(e).__name__} does not name {names[0]!r}: {msg[:200]}"
    except Exception as e:  # noqa: BLE001 - anything else is the failure we look for
        return f"deep {type(e).__name__}: {str(e)[:200]}"
    if not _finite(out, meta_ok):
        return "returned NaN/inf silently"
    return None


def _skip_reason(spec: Spec, arg: str, kind: str) -> str | None:
    return spec.skip.get(f"{arg}:{kind}") or spec.skip.get(kind) or spec.skip.get(arg)


def _cases() -> list[tuple[str, str, str, Any]]:
    """``(component, argument, mutation, value)`` for every enumerated case."""
    out = []
    for comp, spec in SPECS.items():
        for arg, t in spec.tensors().items():
            for kind in MUTATIONS:
                if _mutate(t, kind) is not None and not _skip_reason(spec, arg, kind):
                    out.append((comp, arg, kind, None))
        for arg, values in spec.bad.items():
            for i, v in enumerate(values):
                out.append((comp, arg, f"bad[{i}]={v!r}"[:40], v))
    return out


CASES = _cases()


def _run_case(comp: str, arg: str, kind: str, value: Any) -> str | None:
    spec = SPECS[comp]
    tensors = spec.tensors()
    names = (arg, *spec.aliases.get(arg, ()))
    if kind.startswith("bad["):
        return _outcome(spec, {**tensors, arg: value}, names, meta_ok=False)
    mutated = _mutate(tensors[arg], kind)
    return _outcome(spec, {**tensors, arg: mutated}, names, meta_ok=kind == "meta")


# ------------------------------------------------------------------------------------------ tests
def _implemented_components() -> list[str]:
    out = []
    for m in METHODS:
        try:
            mod = importlib.import_module(m.module)
        except ModuleNotFoundError:
            continue  # planned method: nothing to fuzz yet
        out += [f"{m.slug}.{c}" for c in m.components if hasattr(mod, c)]
    return out


def test_every_registered_component_has_a_spec():
    missing = [c for c in _implemented_components() if c not in SPECS and c not in EXEMPT]
    assert not missing, "add a fuzz spec for " + ", ".join(missing)
    stale = [c for c in (*SPECS, *EXEMPT) if c not in _implemented_components() and c not in EXTRA]
    assert not stale, f"fuzz specs for components the registry does not list: {stale}"


def test_valid_inputs_give_finite_output():
    """Each spec's valid call works (so every failure below is caused by the mutation)."""
    bad = {}
    for comp, spec in SPECS.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = spec.call(**spec.tensors())
        except Exception as e:  # noqa: BLE001
            bad[comp] = f"{type(e).__name__}: {e}"
            continue
        if not _finite(out, meta_ok=False):
            bad[comp] = "non-finite output on valid input"
    assert not bad, bad


@pytest.mark.parametrize("component", sorted(SPECS))
def test_fuzz_component(component):
    failures = []
    for case in (c for c in CASES if c[0] == component):
        problem = _run_case(*case)
        if problem:
            failures.append(f"{case[1]} <- {case[2]}: {problem}")
    assert not failures, f"{component}: {len(failures)} failing cases\n" + "\n".join(failures)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_random_special_values(data):
    """Random position, special value, magnitude and dtype on a random tensor argument."""
    comps = sorted(c for c, s in SPECS.items() if any(t.is_floating_point() for t in s.tensors().values()))
    comp = data.draw(st.sampled_from(comps), label="component")
    spec = SPECS[comp]
    tensors = spec.tensors()
    arg = data.draw(
        st.sampled_from(sorted(a for a, t in tensors.items() if t.is_floating_point())), label="arg"
    )
    t = tensors[arg].clone()
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64, torch.float16]), label="dtype")
    if dtype != torch.float32 and _skip_reason(spec, arg, str(dtype).removeprefix("torch.")):
        dtype = torch.float32
    scale = data.draw(st.sampled_from([1e-30, 1e-3, 1.0, 1e3, 1e30]), label="scale")
    t = (t * scale).to(dtype)
    if t.numel():
        pos = data.draw(st.integers(0, t.numel() - 1), label="pos")
        special = data.draw(
            st.sampled_from([float("nan"), float("inf"), -float("inf"), None]), label="special"
        )
        if special is not None and not _skip_reason(spec, arg, "nan" if math.isnan(special) else "inf"):
            t.view(-1)[pos] = special
    problem = _outcome(spec, {**tensors, arg: t}, (arg, *spec.aliases.get(arg, ())), meta_ok=False)
    assert problem is None, f"{comp}: {arg} ({dtype}, x{scale}): {problem}"


# ------------------------------------------------------------------------------------ float64 pass
# Every component once more in float64 end to end (issue 33 item 5): torch's default dtype is float64 for the
# call (so the modules, parameters and buffers a spec builds are float64) and every floating tensor argument
# is float64 (complex ones complex128). The case passes when the output is finite and every floating tensor
# in it (parameters and buffers of returned modules included) is float64 / complex128: nothing silently
# drops to float32. A component that needs float32 must say so: listed in FLOAT32_ONLY with the reason, it
# must raise a TypeError naming the dtype it needs. OWN_DTYPE lists components whose output dtype is set by
# something other than their floating inputs (a storage format, a declared dtype): they must run in float64
# with finite output, but their output dtype is theirs.
FLOAT32_ONLY: dict[str, str] = {
    "adera.encode_shard": "splits the bit fields of bfloat16/float16/float32 values (the all-gather's wire format)",
    "s3former.S3Former": "keeps its event history in float32 buffers; a float64 model raises a TypeError",
    "regate.REGATE": "its backbone's event history and the token features are float32; float64 raises a TypeError",
}
OWN_DTYPE: dict[str, str] = {
    "adera.decode_payload": "returns the dtype the payload declares (bfloat16 in the spec), whatever the default dtype",
    "adkv.ADKVQuantizer": "stores the quantiser state (z, a) in float16 by the cache's memory format",
    "anca.SudokuDataset": "a data set: its one-hot inputs are float32 by its documented format (cast by the model)",
    "anca.MazeDataset": "a data set: its wall/start/goal planes are float32 by its documented format",
}


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _to64(t: torch.Tensor) -> torch.Tensor:
    if t.is_complex():
        return t.to(torch.complex128)
    return t.double() if t.is_floating_point() else t


def _not_float64(obj: Any, path: str = "out", depth: int = 0, seen: set | None = None) -> list[str]:
    """Paths of the floating tensors in ``obj`` that are not float64/complex128."""
    seen = set() if seen is None else seen
    if depth > 6 or id(obj) in seen or obj is None or isinstance(obj, (str, bytes, bool, int, float)):
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point() and obj.dtype != torch.float64:
            return [f"{path}: {obj.dtype}"]
        if obj.is_complex() and obj.dtype != torch.complex128:
            return [f"{path}: {obj.dtype}"]
        return []
    if isinstance(obj, torch.nn.Module):
        return [
            f"{path}.{name}: {t.dtype}"
            for name, t in (*obj.named_parameters(), *obj.named_buffers())
            if (t.is_floating_point() and t.dtype != torch.float64)
            or (t.is_complex() and t.dtype != torch.complex128)
        ]
    if isinstance(obj, Mapping):
        return [p for k, v in obj.items() for p in _not_float64(v, f"{path}[{k!r}]", depth + 1, seen)]
    if isinstance(obj, (list, tuple)):
        return [p for i, v in enumerate(obj) for p in _not_float64(v, f"{path}[{i}]", depth + 1, seen)]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [
            p
            for f in dataclasses.fields(obj)
            for p in _not_float64(getattr(obj, f.name), f"{path}.{f.name}", depth + 1, seen)
        ]
    return []


def _float64_outcome(comp: str) -> str | None:
    """``None`` if ``comp`` passes the float64 pass, else what went wrong."""
    spec = SPECS[comp]
    with _default_dtype(torch.float64):
        tensors = {k: _to64(v) for k, v in spec.tensors().items()}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = spec.call(**tensors)
        except TypeError as e:
            if comp in FLOAT32_ONLY and ("float32" in str(e) or "dtype" in str(e)):
                return None
            return f"TypeError: {str(e)[:300]}"
        except Exception as e:  # noqa: BLE001 - any failure in float64 is what this pass looks for
            return f"{type(e).__name__}: {str(e)[:300]}"
    if comp in FLOAT32_ONLY:
        return f"listed in FLOAT32_ONLY ({FLOAT32_ONLY[comp]}) but ran in float64 without a TypeError"
    if not _finite(out, meta_ok=False):
        return "non-finite output in float64"
    low = [] if comp in OWN_DTYPE else _not_float64(out)
    return f"output not float64: {', '.join(low[:6])}" if low else None


def test_float64_pass_every_component():
    """Every spec'd component runs in float64 and keeps it (or is FLOAT32_ONLY and raises a TypeError)."""
    failures = {comp: problem for comp in SPECS if (problem := _float64_outcome(comp))}
    assert not failures, f"{len(failures)} components fail the float64 pass:\n" + "\n".join(
        f"{c}: {p}" for c, p in sorted(failures.items())
    )
    assert torch.get_default_dtype() == torch.float32  # the pass restores the default


def test_float32_only_entries_are_components():
    assert set(FLOAT32_ONLY) <= set(SPECS) and set(OWN_DTYPE) <= set(SPECS)
    assert not set(FLOAT32_ONLY) & set(OWN_DTYPE)


def test_case_count(capsys):
    n_components = len(SPECS)
    n_cases = len(CASES)
    with capsys.disabled():
        print(
            f"\n[fuzz] {n_cases} enumerated cases over {n_components} components "
            f"(+60 hypothesis examples); {len(EXEMPT)} components exempt"
        )
    assert n_components >= 85
    assert n_cases >= 1700

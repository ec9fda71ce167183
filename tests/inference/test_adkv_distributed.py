"""Scale-out path of ADKV: per-layer calibration split over 2 worker processes reproduces the
sequential (single-process) calibration exactly with fixed seeds (layers do not interact)."""

from __future__ import annotations

import torch

from neurips26.common.models import build_tiny_lm
from neurips26.inference.adkv import ADKVConfig, calibrate_adkv


def test_two_worker_per_layer_calibration_reproduces_sequential_result():
    model = build_tiny_lm(
        "llama",
        vocab_size=64,
        seed=0,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    ).eval()
    ids = torch.randint(1, 64, (4, 24), generator=torch.Generator().manual_seed(1))
    adkv = ADKVConfig(bits=2, n_outliers=1)
    kw = dict(steps=8, lr=5e-2, bptt=8, batch_size=3, n_query=8, seed=2)
    sequential = calibrate_adkv(model, [ids], adkv, **kw)
    parallel = calibrate_adkv(model, [ids], adkv, workers=2, **kw)
    assert sorted(parallel) == sorted(sequential) == [0, 1, 2]
    for layer, entry in sequential.items():
        assert set(parallel[layer]) == set(entry) == {"key", "value", "key_outliers", "value_outliers"}
        for name, tensor in entry.items():
            assert torch.equal(parallel[layer][name], tensor), (layer, name)  # same kernel: per layer the same GEMM shapes and reductions; a worker's slice changes only the batch count
    # the parameters moved away from the defaults, so the comparison is not vacuous
    default = adkv.default_params(16, (2,))
    assert not torch.allclose(sequential[1]["key"], default)

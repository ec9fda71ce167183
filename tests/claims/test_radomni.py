"""Smoke profile of the RadOmni claim check: structure, arms, equal budgets. Generic smoke checks (finiteness,
determinism, glossary, plot): test_conformance.py."""

import numpy as np
import pytest
import torch

from neurips26.claims.radomni import (
    ABLATION_METRICS,
    ARMS,
    CLAIM,
    OBJECTIVES,
    PROBES,
    _encoder,
    _features,
    _run,
    _schedule,
)


def test_smoke_structure_and_budget(smoke_result):
    a = smoke_result("radomni")
    for name in (*PROBES, "mean_downstream"):
        assert set(a["metrics"][name]) == set(ARMS), name
        assert all(0.0 <= v <= 1.0 for vals in a["metrics"][name].values() for v in vals), name
    for name in (
        "auroc_lesion_A",
        "auroc_lesion_B",
        "auroc_malignant_A",
        "auroc_malignant_B",
        "acc_T_A",
        "acc_type_A",
    ):
        assert set(a["metrics"][name]) == set(ARMS), name
    assert set(CLAIM.glossary) == set(a["metrics"])
    budget = a["info"][0]["budget"]
    assert set(budget) == set(ARMS) - {"random_init"}
    assert len({rec["steps"] for rec in budget.values()}) == 1
    assert budget["radomni"]["steps"] == 4 * CLAIM.configs["smoke"]["stage_steps"]
    assert len({rec["encoder_params"] for rec in budget.values()}) == 1
    logs = a["info"][0]["logs"]
    assert [lg["active"] for lg in logs["radomni"]][-1] == list(OBJECTIVES)
    assert [lg["freeze"] for lg in logs["radomni"]] == list(CLAIM.configs["smoke"]["freeze"])
    assert [lg["active"] for lg in logs["no_retention"]] == [[o] for o in OBJECTIVES]
    assert logs["joint"][0]["active"] == list(OBJECTIVES)


def test_arm_schedules():
    cfg = CLAIM.configs["quick"]
    for arm in ("radomni", "no_retention"):
        sched, _ = _schedule(arm, cfg)
        assert sched.retain == (arm == "radomni")
        assert sum(s.steps for s in sched.stages) == 4 * cfg["stage_steps"]
    assert [s.freeze_blocks for s in _schedule("no_retention", cfg)[0].stages] == [0, 0, 0, 0]
    assert _schedule("mim_only", cfg)[0].stages[0].objectives == ["mim"]


@pytest.mark.parametrize("pool", ["tokens", "mean"])
def test_probe_features(pool):
    cfg = CLAIM.configs["smoke"]
    enc = _encoder(cfg, 0)
    x = torch.rand(5, 1, cfg["size"], cfg["size"])
    f = _features(enc, x, pool)
    with torch.no_grad():
        z = enc.eval()(x)
    ref = z.flatten(1) if pool == "tokens" else z.mean(1)
    assert f.shape == tuple(ref.shape)
    assert np.allclose(f, ref.numpy(), atol=1e-6)


def test_judged_run_uses_the_timm_encoder(smoke_result):
    """Every profile's judged arms (and the CECT teacher) are built on timm's VisionTransformer; the
    transformers ViT only feeds the info-only transformers_<metric> ablation."""
    from timm.models.vision_transformer import Block

    for profile, cfg in CLAIM.configs.items():
        assert cfg["encoder"] == "timm", profile
        assert "timm" not in cfg.get("ablation_encoders", ()), profile
        enc = _encoder(cfg, 0)
        assert enc.backend == "timm" and all(isinstance(b, Block) for b in enc.blocks), profile
    assert CLAIM.configs["full"]["ablation_encoders"] == ("transformers",)
    assert "ablation_encoders" not in CLAIM.configs["quick"]  # the quick budget (60 s) has no room for it
    info = smoke_result("radomni")["info"][0]
    assert info["encoder"]["backend"] == "timm"
    assert info["encoder"]["block_class"] == "timm.models.vision_transformer.Block"
    ab = info["ablation"]["transformers"]
    assert ab["encoder"]["backend"] == "transformers"
    assert ab["encoder"]["block_class"].startswith("transformers.")
    # same steps, batch, lr and objective evaluations per arm; only the parameter count differs
    same = {arm: {**rec, "encoder_params": ab["encoder"]["params"]} for arm, rec in info["budget"].items()}
    assert ab["budget"] == same
    assert ab["encoder"]["params"] != info["encoder"]["params"]  # the unused class token of transformers


def test_ablation_metrics_are_info_only(smoke_result):
    a = smoke_result("radomni")
    judged = {c["data"]["metric"] for c in (*a["premises"], *a["criteria"])}
    for m in ABLATION_METRICS:
        key = f"transformers_{m}"
        assert set(a["metrics"][key]) == set(a["metrics"][m]), key
        assert key not in judged
    assert any(
        a["metrics"][f"transformers_{m}"][arm] != a["metrics"][m][arm] for m in PROBES for arm in ARMS
    )  # a different encoder, not a copy of the judged numbers


def test_bad_encoder_config_raises():
    cfg = CLAIM.configs["smoke"]
    with pytest.raises(ValueError, match="distinct members"):
        _run({**cfg, "encoder": "vit"}, 0)
    with pytest.raises(ValueError, match="distinct members"):
        _run({**cfg, "ablation_encoders": ("timm",)}, 0)

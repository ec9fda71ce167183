"""Smoke profile of the AHPA claim check: structure, arms, equal budgets. Generic smoke checks (finiteness,
determinism, glossary, plot): test_conformance.py."""

from neurips26.claims.ahpa import CLAIM, TRAINED


def test_smoke_structure_determinism_and_budgets(smoke_result, smoke_rerun):
    a, again = smoke_result("ahpa"), smoke_rerun("ahpa")
    for name in ("fd_final", "fd_auc", "class_acc", "held_loss", "steps_to_target"):
        assert set(a["metrics"][name]) == set(TRAINED), name
    assert {arm: runs[0] for arm, runs in a["curves"]["fd"].items()} == again["curves"]["fd"]
    assert set(CLAIM.glossary) == set(a["metrics"])
    info = a["info"][0]
    budgets = info["budget"]
    assert set(budgets) == set(TRAINED)
    for key in ("steps", "batch", "lr", "dit_params"):
        assert len({rec[key] for rec in budgets.values()}) == 1, key
    assert budgets["vanilla"]["aux_params"] == 0 and budgets["ahpa"]["aux_params"] > 0
    # the sampled model is the bare DiT in every arm
    assert a["metrics"]["inference_params_ratio"]["ahpa"] == [1.0]
    # router weights on the simplex at every t
    levels = [a["curves"][f"router_level{i}"]["ahpa"][0] for i in range(4)]
    assert all(abs(sum(col) - 1.0) < 1e-5 for col in zip(*levels))


def test_repa_encoder_is_a_timm_vit_and_its_target_is_the_patch_tokens(smoke_result):
    """REPA's external encoder is timm's VisionTransformer (every profile); the hooked target is exactly its
    final normed patch tokens (class token dropped) on the DiT's 4x4 token grid."""
    import pytest
    import torch
    from timm.models.vision_transformer import VisionTransformer

    from neurips26.claims.ahpa import REPA_LEVELS, _cnn, _ReferenceViT
    from neurips26.vision.ahpa import HierarchicalFeatureExtractor

    assert all(cfg["repa_encoder"] == "vit" for cfg in CLAIM.configs.values())
    rec = smoke_result("ahpa")["info"][0]["repa_encoder"]
    assert rec["kind"] == "vit" and rec["class"] == "timm.models.vision_transformer.VisionTransformer"
    assert rec["target_dim"] == 64 and 0.0 <= rec["held_acc"] <= 1.0
    torch.manual_seed(0)
    net = _ReferenceViT().eval()
    assert isinstance(net.vit, VisionTransformer) and net.vit.num_prefix_tokens == 1
    x = torch.rand(3, 1, 16, 16) * 2 - 1
    with HierarchicalFeatureExtractor(net, REPA_LEVELS["vit"], (4, 4)) as ex, torch.no_grad():
        (target,) = ex(x)
        ref = net.vit.forward_features(x)[:, 1:]
        logits = net(x)
    assert target.shape == (3, 16, 64) and logits.shape == (3, 10)
    assert (target - ref).abs().max() <= 1e-6  # the same tensor, only reshaped twice
    with pytest.raises(ValueError, match="classifier kind"):
        _cnn(CLAIM.configs["smoke"], 0, "dinov2")

"""Smoke profile of the AMARIS claim check: structure, arms. Generic smoke checks (finiteness, determinism,
glossary, plot): test_conformance.py. The opt-in SmolLM2 + LoRA arm (``SMOLLM2_CLAIM``) runs here on its smoke
config, which swaps SmolLM2 for a tiny random Llama: wiring, equal grids, determinism through the cache, and the
exactness of the cached-prefix shortcut it relies on."""

import math

import pytest
import torch

from neurips26.claims.amaris import CLAIM, SMOLLM2_CLAIM, SMOLLM2_CONFIGS, TopStack, prefix_hidden, run


def test_smoke_arms_and_budget(smoke_result):
    a = smoke_result("amaris")
    for name in ("hypervolume", "core_at_spec90"):
        assert set(a["metrics"][name]) == {CLAIM.method, *CLAIM.baselines}
    for arms in a["metrics"].values():
        for values in arms.values():
            assert all(v >= 0 for v in values)
    info = a["info"][0]
    assert set(info["budget"]["grid_points"].values()) == {4}  # equal grid size for every arm
    assert set(info["sweeps"]) == {CLAIM.method, *CLAIM.baselines}
    assert "smollm2" not in info  # the SmolLM2 arm is opt-in


def test_smollm2_arm_is_opt_in_only():
    assert all(not cfg.get("smollm2") for cfg in CLAIM.configs.values())
    assert all(cfg["smollm2"] and cfg["tiny"] is False for cfg in SMOLLM2_CLAIM.configs.values())
    assert SMOLLM2_CLAIM.configs["full"]["smollm2"]["model"] == "smollm2-135m"
    with pytest.raises(ValueError, match="no arm"):
        run({**SMOLLM2_CONFIGS["smoke"], "smollm2": None}, 0)


def _tiny_lm(tiny_llama):
    lm = tiny_llama(seed=0, vocab_size=40, num_hidden_layers=3, hidden_size=32, intermediate_size=48)
    return lm.eval()


def test_cached_prefix_then_top_layers_equals_full_forward(tiny_llama, one_thread):
    from peft import LoraConfig, get_peft_model

    lm = _tiny_lm(tiny_llama)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 40, (3, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0  # right padding
    with torch.no_grad():
        ref = lm(input_ids=ids, attention_mask=mask).logits
    for start in (1, 2):
        h = prefix_hidden(lm, ids, mask, start)
        with torch.no_grad():
            out = lm.lm_head(TopStack(lm, start)(h, mask))
        keep = mask.bool()
        assert torch.allclose(out[keep], ref[keep], atol=1e-5)
    assert len(lm.model.layers) == 3  # the stack is restored
    # with a LoRA specialist on the top layer only
    torch.manual_seed(0)
    pm = get_peft_model(
        lm,
        LoraConfig(
            r=2, target_modules=["up_proj", "q_proj"], layers_to_transform=[2], init_lora_weights=False
        ),
    )
    with torch.no_grad():
        ref = pm(input_ids=ids, attention_mask=mask).logits
        out = pm.get_base_model().lm_head(TopStack(pm, 2)(prefix_hidden(pm, ids, mask, 2), mask))
    assert torch.allclose(out[mask.bool()], ref[mask.bool()], atol=1e-5)
    with pytest.raises(ValueError, match="start"):
        prefix_hidden(lm, ids, mask, 3)


@pytest.fixture(scope="module")
def smol_runs(tmp_path_factory):
    import os

    old = os.environ.get("NEURIPS26_CACHE")
    os.environ["NEURIPS26_CACHE"] = str(tmp_path_factory.mktemp("amaris_cache"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        first = run(SMOLLM2_CONFIGS["smoke"], 0)  # builds the cached sets and LoRA specialist
        second = run(SMOLLM2_CONFIGS["smoke"], 0)  # loads them
        other = run(SMOLLM2_CONFIGS["smoke"], 1)  # reuses the sets, fine-tunes its own LoRA
    finally:
        torch.set_num_threads(threads)
        if old is None:
            os.environ.pop("NEURIPS26_CACHE")
        else:
            os.environ["NEURIPS26_CACHE"] = old
    return first, second, other


def test_smollm2_arm_smoke_structure_and_budget(smol_runs):
    res, _, _ = smol_runs
    arms = {SMOLLM2_CLAIM.method, *SMOLLM2_CLAIM.baselines}
    for name in ("smol_hypervolume", "smol_core_at_spec90", "smol_core_at_spec98", "smol_spec_retention_max"):
        assert set(res.metrics[name]) == arms
    assert set(res.metrics["smol_acc_core"]) == {"base", "specialist"}
    for arms_ in res.metrics.values():
        assert all(math.isfinite(v) for v in arms_.values())
    info = res.info["smollm2"]
    assert set(info["budget"]["grid_points"].values()) == {4}
    assert info["budget"]["merged_tensors"] == 7  # one LoRA layer, seven linear modules
    assert set(info["points"]) == arms and all(len(v) == 4 for v in info["points"].values())
    gates = info["amaris_gate"]  # mean over the LoRA modules of the kept deviation, within each budget
    assert sorted(float(b) for b in gates) == sorted(g["budget"] for g in info["grids"]["amaris"])
    assert all(g["deviation_mean"] <= float(b) + 1e-9 for b, g in gates.items())
    # the diagnosis reads the largest direction each budget passed over (shares in [0, 1]) and the update's rank
    for g in gates.values():
        assert (
            0 <= g["skipped_max_capture_mean"] <= 1 + 1e-9
            and 0 <= g["skipped_max_deviation_mean"] <= 1 + 1e-9
        )
        assert g["rank_mean"] >= g["k_mean"]
    # task arithmetic at alpha = 1 is the specialist itself: its point is (1, specialist core retention)
    ta = dict(zip([g["alpha"] for g in info["grids"]["task_arithmetic"]], info["points"]["task_arithmetic"]))
    spec_acc = res.metrics["smol_acc_spec"]["specialist"]
    if spec_acc > 0:
        assert ta[1.0][0] == pytest.approx(1.0)
    assert ta[1.0][1] == pytest.approx(res.metrics["smol_core_retention"]["specialist"], rel=1e-9)


def test_smollm2_arm_deterministic_through_cache(smol_runs):
    first, second, _ = smol_runs
    assert first.metrics == second.metrics
    assert first.info["smollm2"]["points"] == second.info["smollm2"]["points"]


def test_smollm2_plot_writes_image(smol_runs, tmp_path):
    res, _, _ = smol_runs
    paths = SMOLLM2_CLAIM.plot({"info": [res.info], "seeds": [0]}, tmp_path)
    assert len(paths) == 1 and paths[0].exists() and paths[0].stat().st_size > 0


def test_smollm2_every_seed_fine_tunes_its_own_lora(smol_runs):
    """Issue 32 item 7: the base is the one pretrained model, but seed s trains its own LoRA specialist (LoRA
    initialisation and batch order from train_seed + s)."""
    first, _, other = smol_runs
    t0, t1 = first.info["smollm2"]["training"], other.info["smollm2"]["training"]
    assert (t0["lora_seed"], t1["lora_seed"]) == (0, 1)
    assert t0["final_loss"] != t1["final_loss"]  # another fine-tune, not the same adapter re-evaluated


def test_tiny_every_seed_trains_its_own_base_and_specialist(monkeypatch):
    """Issue 32 item 7: seed s trains its own base (init and batch order) and specialist (batch order) with
    training seed train_seed + s on fixed training sets; the training calls are intercepted."""
    import neurips26.claims.amaris.tiny as tiny

    calls = []

    def fake_train_or_load(namespace, key, make_model, examples, **kw):
        calls.append((namespace, key, kw["seed"]))
        return None, {"folder": f"{namespace}-{kw['seed']}"}

    monkeypatch.setattr(tiny, "train_or_load", fake_train_or_load)
    cfg = CLAIM.configs["smoke"]
    tiny._models(cfg, 0)
    tiny._models(cfg, 3)
    assert [(n, s) for n, _, s in calls] == [
        ("amaris-base", cfg["train_seed"]),
        ("amaris-specialist", cfg["train_seed"]),
        ("amaris-base", cfg["train_seed"] + 3),
        ("amaris-specialist", cfg["train_seed"] + 3),
    ]
    assert calls[0][1] != calls[2][1] and calls[1][1] != calls[3][1]  # own cache entries
    assert calls[3][1]["base"] == "amaris-base-3"  # the specialist starts from its own seed's base

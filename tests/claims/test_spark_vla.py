"""Smoke profile of the SPARK-VLA claim check: structure, arms, equal budgets. Generic smoke checks (finiteness,
determinism, glossary, plot): test_conformance.py."""

from neurips26.claims.spark_vla import ABLATIONS, BASELINES, CLAIM, METHOD, REFERENCES, run


def test_smoke_budget_and_frozen_base(smoke_result):
    a = smoke_result("spark_vla")
    assert set(CLAIM.glossary) == set(a["metrics"])
    info = a["info"][0]
    budget = info["budget"]
    assert {METHOD, *BASELINES} <= set(budget)
    for key in ("steps", "batch", "lr_grid"):
        assert len({str(rec[key]) for rec in budget.values()}) == 1, key
    # SPARK's 2-D path is the frozen base: its probe accuracy cannot move
    assert a["metrics"]["probe_drop"][METHOD] == [0.0]
    assert a["metrics"]["token_fraction"][METHOD] == [0.25]
    # the LoRA branch adds trainable parameters on top of the 2-D-only policy, the frozen base stays frozen
    assert budget[METHOD]["trainable"] > budget["two_d_only"]["trainable"]
    assert budget[METHOD]["frozen_in_model"] == budget["two_d_only"]["frozen_in_model"] > 0
    assert budget["implicit_align"]["frozen_in_model"] == 0
    perf = info["performance"]
    assert 0 < perf["trainable_fraction"] < 1 and perf["paper_trainable_ratio_50M_over_0.5B"] == 0.1


def test_ablation_arms_stay_out_of_metrics():
    # the full profile trains the ablations on its ablation seed; they are reported in info, never as metric arms
    cfg = {**CLAIM.configs["smoke"], "ablations": list(ABLATIONS), "steps": 1}
    res = run(cfg, seed=cfg["ablation_seed"])
    known = {METHOD, *BASELINES, *REFERENCES}
    for name, per_arm in res.metrics.items():
        assert set(per_arm) <= known, name
    assert set(res.info["ablations"]) == set(ABLATIONS)
    assert (
        res.info["ablations"]["spark_no_route_sup"]["tokens_forwarded"]
        == res.metrics["tokens_forwarded"][METHOD]
    )


def test_judged_path_runs_timm_backbone_expert_and_the_language_model(monkeypatch):
    """The claim's run builds timm ViTs (RGB backbone, RGB-D expert) and trains every arm through the
    transformers LM policy: count the calls on the judged path."""
    import timm
    from timm.models.vision_transformer import VisionTransformer
    from transformers import LlamaModel

    import neurips26.claims.spark_vla as claim

    created, lm_calls, vit_calls = [], [0], [0]
    create, lm_forward, vit_forward = (
        timm.create_model,
        LlamaModel.forward,
        VisionTransformer.forward_features,
    )

    def spy_create(*a, **kw):
        created.append(kw.get("in_chans"))
        return create(*a, **kw)

    def spy_lm(self, *a, **kw):
        lm_calls[0] += 1
        return lm_forward(self, *a, **kw)

    def spy_vit(self, *a, **kw):
        vit_calls[0] += 1
        return vit_forward(self, *a, **kw)

    monkeypatch.setattr(timm, "create_model", spy_create)
    monkeypatch.setattr(LlamaModel, "forward", spy_lm)
    monkeypatch.setattr(VisionTransformer, "forward_features", spy_vit)
    cfg = {**CLAIM.configs["smoke"], "steps": 1}
    base, expert = claim._vit(cfg), claim._vit(cfg, 4)
    model = claim._build(METHOD, cfg, base, expert, seed=0)
    assert isinstance(model.visual.base, VisionTransformer) and isinstance(model.policy.lm, LlamaModel)
    assert isinstance(model.expert[0].vit, VisionTransformer) and model.expert[0].channels == 4
    for arm in BASELINES:
        assert isinstance(claim._build(arm, cfg, base, expert, seed=0).policy.lm, LlamaModel)
    created.clear()
    run(cfg, seed=0)
    assert 3 in created and 4 in created  # backbone (RGB) and expert (RGB-D) come from timm.create_model
    assert lm_calls[0] > 0 and vit_calls[0] > 0

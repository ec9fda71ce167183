"""Smoke profile of the SKIM claim check: structure, arms, equal budgets, achieved sparsity, grammar
validity. Generic smoke checks (finiteness, determinism, glossary, plot): test_conformance.py."""

from neurips26.claims.skim import CLAIM, COMBOS, CONFIGS, WordTask, make_requests, tool_schema


def test_smoke_structure_and_budget(smoke_result):
    a = smoke_result("skim")
    for crit in (*CLAIM.criteria, *CLAIM.premises):
        for arm in crit.arms_used(CLAIM.method):
            assert arm in a["metrics"][crit.metric], (crit.label, arm)
    for name in ("acc_low", "acc_high", "tool_high"):
        assert set(a["metrics"][name]) == set(COMBOS) | {"dense"}, name
    assert set(CLAIM.glossary) == set(a["metrics"])
    info = a["info"][0]
    # every recovered arm got the same steps, batch and lr; unrecovered arms none
    budget = info["budget"]
    recovered = {arm for arm, (_, rec) in COMBOS.items() if rec}
    assert len({(budget[a_]["steps"], budget[a_]["batch"], budget[a_]["lr"]) for a_ in recovered}) == 1
    assert budget["skim"]["steps"] == CONFIGS["smoke"]["steps"]
    assert all(budget[a_]["steps"] == 0 for a_ in set(COMBOS) - recovered)
    # the requested sparsity is what every method achieved
    for key, value in info["achieved_sparsity"].items():
        s = float(key.split("@")[1])
        assert abs(value - s) < 0.02, key
    # grammar-constrained decoding always parses, and the forced scoring matches real decoding
    assert a["metrics"]["valid_rate"]["skim"] == [1.0]
    assert a["metrics"]["forced_eval_agrees"]["skim"] == [1.0]
    assert "no speed-up" in info["throughput"]["note"]
    assert set(info["per_sparsity"]) == {str(s) for s in CONFIGS["smoke"]["sparsities"]}


def test_task_references_satisfy_the_schema():
    import jsonschema

    task = WordTask()
    g = task.grammar()
    for words, call in make_requests(50, seed=1):
        jsonschema.validate(call, tool_schema())
        assert 12 <= len(words) <= 20 and call["arg"] in words
        out = task.output(call)
        assert g.parse(g.decode(out)) == call
        masks, roles = g.trace(out)  # the reference is accepted token by token
        assert int((roles == 1).sum()) == 2 and len(out) == 10


def test_teacher_cache_keys_cover_every_teacher_setting():
    from neurips26.claims.skim.teachers import _smollm_keys

    full = CONFIGS["full"]
    keys = _smollm_keys(full)
    assert len(keys) == len(full["teacher_stages"])
    assert keys[1]["init"] == keys[0]  # a later stage's key holds the earlier stages' settings
    for i, stage in enumerate(full["teacher_stages"]):
        for name, value in stage.items():
            other = value * 2 if not isinstance(value, str) else value + "x"
            stages = [dict(st) for st in full["teacher_stages"]]
            stages[i][name] = other
            changed = _smollm_keys({**full, "teacher_stages": stages})
            assert changed[-1] != keys[-1], (i, name)
    assert _smollm_keys({**full, "lora_r": 16})[-1] != keys[-1]


def test_full_profile_design_and_reference_sparsities():
    from neurips26.claims.skim import _arms_at

    full = CONFIGS["full"]
    assert full["sparsities"] == [0.3, 0.5, 0.7]  # the SmolLM2 sparsities
    assert len(CLAIM.seeds["full"]) >= 3
    limited = set(full["reference_arms"])
    assert not limited & {"skim", "wanda_kd"}  # the compared pair runs at every sparsity
    for s in full["sparsities"]:
        arms = set(_arms_at(full, s))
        assert {"skim", "wanda_kd"} <= arms
        in_refs = any(abs(s - r) < 1e-9 for r in full["reference_sparsities"])
        assert arms & limited == (limited & set(full["arms"]) if in_refs else set()), s
    assert max(full["sparsities"]) in full["reference_sparsities"]  # the ablations run where the claim bites


def test_reference_arms_limited_to_reference_sparsities(tmp_path):
    from neurips26.claims.skim import plot, run

    cfg = {**CONFIGS["smoke"], "reference_sparsities": [0.9]}
    res = run(cfg, 0)
    assert "skim_prune_kd" not in res.metrics["acc_low"] and "skim_prune_kd" in res.metrics["acc_high"]
    assert set(res.curves["exact_vs_sparsity"]) == set(COMBOS) - {
        "skim_prune_kd",
        "wanda_skimkd",
        "magnitude_kd",
    }
    budget = res.info["budget"]
    assert budget["skim_prune_kd"]["steps"] == budget["skim"]["steps"] == budget["wanda_kd"]["steps"]
    assert "prune:skim@0.5" in res.info["timings_s"] and "recover:skim@0.9" in res.info["timings_s"]
    result = {"info": [res.info]}
    assert all(p.exists() for p in plot(result, tmp_path))


def test_decode_scoring_equals_forced_scoring_on_the_word_vocabulary():
    from neurips26.claims.skim import _score, _tiny_teacher, _tool_prefix_len

    cfg = CONFIGS["smoke"]
    task = WordTask()
    teacher, _ = _tiny_teacher(cfg, task)
    g = task.grammar()
    data = make_requests(32, seed=20_000)
    prompts = [task.prompt(w) for w, _ in data]
    outputs = [task.output(c) for _, c in data]
    tool_k = [_tool_prefix_len(g, o, c, task.separators) for o, c in zip(outputs, [c for _, c in data])]
    import copy

    from neurips26.agents.skim import prune_model

    for sparsity in (0.0, 0.8):  # the dense teacher and a pruned one that gets some calls wrong
        model = copy.deepcopy(teacher)
        if sparsity:
            prune_model(model, None, sparsity, "magnitude")
        forced = _score(model, g, data, prompts, outputs, tool_k, task.pad, 16, "forced", 16)
        decoded = _score(model, g, data, prompts, outputs, tool_k, task.pad, 16, "decode", 16)
        assert forced == decoded, sparsity  # one tokenization per call: forced scoring is exact
    assert 0.0 < decoded["exact"] < 1.0
    assert CONFIGS["full"]["scoring"] == "decode"  # subword vocabulary: several tokenizations per call


def test_run_passes_the_profiles_feature_scale_to_every_skim_distiller(monkeypatch):
    """The full profile's per-position relative feature term (declared before the 2026-12-06 rerun)
    reaches the distiller on the judged path; standard KD arms carry no feature term."""
    import neurips26.claims.skim as skim_claim

    assert CONFIGS["full"]["feat_scale"] == "teacher"
    seen = []
    real = skim_claim.SKIMDistiller

    class Spy(real):
        def __init__(self, *args, **kwargs):
            seen.append((kwargs["mode"], kwargs["feat_scale"]))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(skim_claim, "SKIMDistiller", Spy)
    cfg = {**CONFIGS["smoke"], "feat_scale": "teacher", "arms": ["skim", "wanda_kd"], "n_test": 8}
    skim_claim.run(cfg, seed=0)
    assert {m for m, _ in seen} == {"skim", "standard"}
    assert all(scale == "teacher" for _, scale in seen)
    assert len(seen) == 2 * len(cfg["sparsities"])

"""Smoke profile of the cross-lingual edit claim check: structure, arms. Generic smoke checks (finiteness,
determinism, glossary, plot): test_conformance.py."""


def test_smoke_arms_and_exactness(smoke_result):
    a = smoke_result("crosslingual_edit")
    for name in ("efficacy", "transfer", "locality", "alpha", "f_orth"):
        assert set(a["metrics"][name]) == {
            "rome",
            "memit",
            "alphaedit",
            "rome_aligned",
            "memit_aligned",
            "alphaedit_aligned",
        }
    # the decomposition identity and bit-exact revert hold on every run
    assert all(v == [1.0] for v in a["metrics"]["decomposition_exact"].values())
    assert a["metrics"]["revert_exact"]["rome"] == [1.0]
    perf = a["info"][0]["performance"]
    assert perf["covariance_s"] > 0 and perf["rome_edit_s_per_fact"] > 0


def test_real_model_round_structure_and_revert():
    """The Gemma arm's per-model-state round, run on a tiny untrained Llama: every editor reports
    efficacy, per-language transfer and an exact decomposition, and the weights come back bit-exactly."""
    import torch

    from neurips26.claims.crosslingual_edit.gemma import _gemma_round
    from neurips26.claims.crosslingual_edit.world import EDITORS, BilingualWorld
    from neurips26.common.models import build_tiny_lm
    from neurips26.editing.crosslingual_edit import EditSite, estimate_key_moment

    world = BilingualWorld(8, 1, 4, seed=0)
    model = build_tiny_lm(
        "llama",
        vocab_size=world.vocab_size,
        seed=0,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
    )
    model.eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    site = EditSite(model, 0)
    new = [(s, (int(world.facts[s, 0]) + 1) % 4) for s in range(3)]
    src = [world.request("A", s, 0, o) for s, o in new]
    tgts = {"B": [world.request("B", s, 0, o) for s, o in new]}
    g = torch.Generator().manual_seed(0)
    C0 = estimate_key_moment(site, [{"input_ids": torch.randint(4, world.vocab_size, (8, 12), generator=g)}])
    unrelated = [list(world.request(lang, s, 0, None).prompt_ids) for s in range(3, 8) for lang in "AB"]
    cfg = dict(
        gemma_value_steps=3,
        value_lr=0.5,
        clamp=4.0,
        alpha_eps=1e-2,
        lam=1e2,
        alpha_l2=1.0,
        gemma_locality_edits=2,
    )
    out = _gemma_round(model, site, cfg, src, tgts, {"B": [0, 2]}, C0, unrelated)
    for e in EDITORS:
        r = out[e]
        assert 0 <= r["efficacy"] <= 1 and 0 <= r["locality"] <= 1
        assert 0 <= r["B"]["transfer"] <= 1 and 0 <= r["B"]["f_orth"] <= 1 + 1e-9
        assert r["B"]["identity_max"] < 1e-10
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # same kernel: revert copies the saved weights back


def test_full_profile_probes_german_and_spanish_with_facts_in_every_language():
    """The full profile's Gemma arm edits in English and probes German and Spanish; every probed language has a
    CLDR capital fact for every country the arm draws from."""
    from neurips26.claims.crosslingual_edit import CONFIGS
    from neurips26.common.multilingual import LANGUAGES, capital_facts

    targets = CONFIGS["full"]["gemma_targets"]
    assert targets == ["de", "es"]
    assert set(targets) <= set(LANGUAGES) - {"en"}
    facts = capital_facts(("en", *targets))
    assert facts and all(set(per_lang) == {"en", *targets} for per_lang in facts.values())


def test_smoke_reports_whether_target_keeps_the_old_object(smoke_result):
    a = smoke_result("crosslingual_edit")
    kept = a["metrics"]["target_old_kept"]
    assert set(kept) == set(a["metrics"]["transfer"])
    # a target prompt cannot give both the new and the old object: transfer + old kept <= 1 per arm and seed
    for arm, values in kept.items():
        assert all(0 <= v <= 1 for v in values)
        assert all(v + t <= 1 + 1e-12 for v, t in zip(values, a["metrics"]["transfer"][arm]))

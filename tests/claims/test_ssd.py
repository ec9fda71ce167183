"""SSD claim check: the synthetic world and the smoke profile's structure. Generic smoke checks (finiteness,
determinism, glossary, plot): test_conformance.py."""


from neurips26.claims.ssd import CLAIM, QUESTIONS, VALUES, qa, word_tokenizer, world


def test_world_and_tokenizer_round_trip():
    tok = word_tokenizer()
    w = world(5, 3, seed=0)
    assert len(w["old"]) == 5 and len(w["new"]) == 3
    names = {e["name"] for e in w["old"] + w["new"]}
    assert len(names) == 8
    for ent in w["new"]:
        for attr in VALUES:
            assert ent["attrs"][attr] in ent["doc"]
            for tpl in range(len(QUESTIONS[attr])):
                q, a = qa(ent, attr, tpl)
                for text in (q, a, ent["doc"]):
                    ids = tok(text, add_special_tokens=False)["input_ids"]
                    assert tok.unk_token_id not in ids
                    assert tok.decode(ids) == text


def test_smoke_arms_and_supervision(smoke_result):
    a = smoke_result("ssd")
    assert set(a["metrics"]["acc_heldout"]) == set(CLAIM.arms)
    assert set(CLAIM.glossary) == set(a["metrics"])
    sup = a["metrics"]["supervised_tokens"]
    # off-policy and on-policy supervise every response token; SSD only its interventions
    assert sup["ssd"][0] <= sup["on_policy"][0]
    budget = a["info"][0]["budget"]
    assert len({rec["steps"] for rec in budget.values()}) == 1

"""SSD claim check: the three generated tasks, determinism per seed, error paths and the smoke profile's
structure. Generic smoke checks (finiteness, determinism, glossary, plot): test_conformance.py."""

import pytest

from neurips26.claims.ssd import (
    CLAIM,
    OPERANDS,
    QUESTIONS,
    TASKS,
    VALUES,
    op_answer,
    op_qa,
    operators,
    qa,
    task_items,
    updates,
    word_tokenizer,
    world,
)


def _no_unk_round_trip(tok, texts):
    for text in texts:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids
        assert tok.decode(ids) == text


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
                _no_unk_round_trip(tok, (*qa(ent, attr, tpl), ent["doc"]))


def test_updates_change_exactly_the_named_attributes():
    w = world(6, 2, seed=3)
    upd = updates(w["old"], 4, seed=3, n_changed=2)
    assert [u["name"] for u in upd] == [e["name"] for e in w["old"][:4]]
    for u, e in zip(upd, w["old"]):
        assert len(u["changed"]) == 2
        for attr in VALUES:
            assert (u["attrs"][attr] != e["attrs"][attr]) == (attr in u["changed"])
            assert u["attrs"][attr] in u["doc"]
    assert updates(w["old"], 4, seed=3) == upd  # deterministic per seed
    assert updates(w["old"], 4, seed=4) != upd


def test_operators_split_and_answers():
    tok = word_tokenizer()
    ops = operators(3, 2, seed=0, n_read=4, n_train_pairs=15)
    assert (len(ops["old"]), len(ops["new"]), len(ops["read"])) == (3, 2, 4)
    assert len({op["name"] for op in ops["old"] + ops["new"]}) == 5
    for op in ops["new"]:
        assert len(op["train"]) == 15 and len(op["heldout"]) == len(OPERANDS) ** 2 - 15
        assert not set(op["train"]) & set(op["heldout"])
        q, a = op_qa(op, 3, 4, 0)
        assert a.split()[-2] == str(3 + op["k"] * 4) == str(op_answer(op["k"], 3, 4))
        _no_unk_round_trip(tok, (q, a, op["doc"]))
    assert operators(3, 2, seed=0, n_read=4) == ops  # deterministic per seed
    assert operators(3, 2, seed=1, n_read=4) != ops


def test_task_items_cover_the_spec_tasks():
    w = world(6, 3, seed=0)
    ops = operators(2, 2, seed=0)
    upd = updates(w["old"], 3, seed=0)
    fact, update, skill = (task_items(t, w, ops, upd) for t in TASKS)
    assert (len(fact["train"]), len(fact["heldout"])) == (3 * 4 * 2, 3 * 4)
    assert (len(update["train"]), len(update["heldout"])) == (3 * 2 * 2, 3 * 2)
    assert (len(skill["train"]), len(skill["heldout"])) == (2 * 15 * 2, 2 * 10)
    # update answers state the new value, which differs from the value the base model memorised
    for u, e in zip(upd, w["old"]):
        for attr in u["changed"]:
            answer = qa(u, attr, 2)[1]
            assert (u["doc"], qa(u, attr, 2)[0], answer) in update["heldout"]
            assert answer != qa(e, attr, 2)[1]
    held_q = {q for _, q, _ in skill["heldout"]}
    assert not held_q & {q for _, q, _ in skill["train"]}


def test_generators_reject_bad_arguments():
    w = world(3, 1, seed=0)
    with pytest.raises(ValueError, match="n_update"):
        updates(w["old"], 4, seed=0)
    with pytest.raises(ValueError, match="n_changed"):
        updates(w["old"], 2, seed=0, n_changed=5)
    with pytest.raises(ValueError, match="n_train_pairs"):
        operators(1, 1, seed=0, n_train_pairs=25)
    with pytest.raises(ValueError, match="task"):
        task_items("translation", w, operators(1, 1, seed=0), [])


def test_smoke_arms_and_supervision(smoke_result):
    a = smoke_result("ssd")
    assert set(a["metrics"]["acc_heldout_fact"]) == set(CLAIM.arms)
    assert set(CLAIM.glossary) == set(a["metrics"])
    for t in TASKS:
        sup = a["metrics"][f"supervised_tokens_{t}"]
        # off-policy and on-policy supervise every response token; SSD only its interventions
        assert sup["ssd"][0] <= sup["on_policy"][0]
    budget = a["info"][0]["budget"]
    assert {k.split("/")[0] for k in budget} == set(TASKS)
    assert len({rec["steps"] for rec in budget.values()}) == 1
    # every headline of the paper that the spec's three tasks test maps to one criterion per task
    primary = next(h for h in CLAIM.headlines if h.primary)
    for t in TASKS:
        assert f"matches_on_policy_heldout_{t}" in primary.criteria

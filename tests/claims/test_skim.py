"""Smoke profile of the SKIM claim check: structure, arms, finiteness, determinism, equal budgets."""

import math

from neurips26.claims.runner import run_claim
from neurips26.claims.skim import CLAIM, COMBOS, CONFIGS, WordTask, make_requests, tool_schema


def test_smoke_structure_determinism_and_budget(tmp_path):
    a = run_claim("skim", "smoke", out=tmp_path / "a", force=True)
    b = run_claim("skim", "smoke", out=tmp_path / "b", force=True)
    for crit in (*CLAIM.criteria, *CLAIM.premises):
        for arm in crit.arms_used(CLAIM.method):
            assert arm in a["metrics"][crit.metric], (crit.label, arm)
    for name in ("acc_low", "acc_high", "tool_high"):
        assert set(a["metrics"][name]) == set(COMBOS) | {"dense"}, name
    for name, arms in a["metrics"].items():
        for values in arms.values():
            assert all(math.isfinite(v) for v in values), name
    assert a["metrics"] == b["metrics"]
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

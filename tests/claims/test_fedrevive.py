"""Smoke profile of the fedrevive claim check: structure, arms incl. references, premises, headlines. Generic
smoke checks (finiteness, determinism, glossary, plot): test_conformance.py."""

from __future__ import annotations

from neurips26.claims.fedrevive import CLAIM


def test_declaration_has_premises_headlines_and_labels():
    assert CLAIM.premises and all(p.label for p in CLAIM.premises)
    assert all(c.label for c in CLAIM.criteria)
    assert any(c.kind == "evidence" for c in CLAIM.criteria)
    assert CLAIM.headlines and any(h.criteria for h in CLAIM.headlines)
    assert CLAIM.references
    assert len(CLAIM.seeds["full"]) >= 5


def test_smoke_arms_references_and_budget(smoke_result):
    first = smoke_result("fedrevive")
    for metric in {c.metric for c in CLAIM.criteria}:
        assert set(first["metrics"][metric]) >= {CLAIM.method, *CLAIM.baselines}
    for ref in CLAIM.references:
        assert any(ref in arms for arms in first["metrics"].values())
    budget = first["info"][0]["budget"] if isinstance(first["info"], list) else first["info"]["budget"]
    assert set(budget) >= {CLAIM.method, *CLAIM.baselines}

"""Smoke profile of the asap claim check: structure, arms incl. references, premises, headlines, determinism."""

from __future__ import annotations

import json
import math

from neurips26.claims.asap import CLAIM
from neurips26.claims.runner import run_claim


def test_declaration_has_premises_headlines_and_labels():
    assert CLAIM.premises and all(p.label for p in CLAIM.premises)
    assert all(c.label for c in CLAIM.criteria)
    assert any(c.kind == "evidence" for c in CLAIM.criteria)
    assert CLAIM.headlines and any(h.criteria for h in CLAIM.headlines)
    assert CLAIM.references
    assert len(CLAIM.seeds["full"]) >= 3
    assert len(CLAIM.configs["full"]["targets"]) >= 2


def test_smoke_structure_and_determinism(tmp_path):
    first = run_claim("asap", "smoke", out=tmp_path / "a", force=True)
    second = run_claim("asap", "smoke", out=tmp_path / "b", force=True)
    assert first["slug"] == "asap"
    assert [p["key"] for p in first["premises"]] == [p.label for p in CLAIM.premises]
    used = {c.metric: c for c in (*CLAIM.criteria, *CLAIM.premises)}
    for metric, crit in used.items():
        for arm in crit.arms_used(CLAIM.method):
            values = first["metrics"][metric][arm]
            assert len(values) == len(CLAIM.seeds["smoke"])
            assert all(math.isfinite(v) for v in values)
    for metric in {c.metric for c in CLAIM.criteria}:
        assert set(first["metrics"][metric]) >= {CLAIM.method, *CLAIM.baselines}
    for ref in CLAIM.references:
        assert any(ref in arms for arms in first["metrics"].values())
    assert first["metrics"] == second["metrics"]
    assert first["verdict"] == second["verdict"]
    assert set(CLAIM.glossary) >= set(used)
    budget = first["info"][0]["budget"] if isinstance(first["info"], list) else first["info"]["budget"]
    assert set(budget) >= {CLAIM.method, *CLAIM.baselines}
    json.dumps(first)  # the result is plain JSON
    info = first["info"][0]
    rules = CLAIM.configs["smoke"]["rules"]
    table = info["rule_attack_table"]
    assert set(table) == {f"{r}@{t:g}" for r in rules for t in CLAIM.configs["smoke"]["targets"]}
    for row in table.values():
        assert set(row) == {CLAIM.method, *CLAIM.baselines, "no-attack"}
        assert all(math.isfinite(v["deviation"]) for v in row.values())
    assert info["flower_strategies"] == {"fedavg": "FedAvg", "krum": "Krum"}
    assert all(
        row[CLAIM.method]["malicious_selected"] is not None
        for k, row in table.items()
        if k.startswith("krum")
    )
    paths = CLAIM.plot(first, tmp_path / "plots")
    assert paths and all(p.exists() for p in paths)
    assert any("heatmap" in p.name for p in paths)

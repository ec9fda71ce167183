"""Smoke profile of the asap claim check: declaration, references, the (rule x attack) table, the
reachability premise and the heatmap. Generic smoke checks (finiteness, determinism, glossary, plot):
test_conformance.py."""

from __future__ import annotations

import math

from neurips26.claims.asap import ANY_UNDER_FEDAVG, BASELINES, CLAIM


def test_declaration_has_premises_headlines_and_labels():
    assert CLAIM.premises and all(p.label for p in CLAIM.premises)
    assert all(c.label for c in CLAIM.criteria)
    assert any(c.kind == "evidence" for c in CLAIM.criteria)
    assert CLAIM.headlines and any(h.criteria for h in CLAIM.headlines)
    assert CLAIM.references
    assert len(CLAIM.seeds["full"]) >= 3
    assert len(CLAIM.configs["full"]["targets"]) >= 2
    assert set(CLAIM.configs["full"]["rules"]) == {
        "fedavg",
        "krum",
        "multikrum",
        "median",
        "trimmed_mean",
        "bulyan",
    }


def test_smoke_table_references_and_reachability(smoke_result, tmp_path):
    first = smoke_result("asap")
    assert [p["key"] for p in first["premises"]] == [p.label for p in CLAIM.premises]
    for metric in {c.metric for c in CLAIM.criteria}:
        assert set(first["metrics"][metric]) >= {CLAIM.method, *CLAIM.baselines}
    for ref in CLAIM.references:
        assert any(ref in arms for arms in first["metrics"].values())
    info = first["info"][0]
    assert set(info["budget"]) >= {CLAIM.method, *CLAIM.baselines}
    assert len({str(b) for b in info["budget"].values()}) == 1  # every arm: the same rounds and clients
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
    # the premise's metric is recomputed from the table: some baseline reached some target under FedAvg
    reached = any(
        table[k][b]["rounds"] is not None for k in table if k.startswith("fedavg@") for b in BASELINES
    )
    assert first["metrics"]["target_reachable"][ANY_UNDER_FEDAVG] == [float(reached)]
    paths = CLAIM.plot(first, tmp_path / "plots")
    assert any("heatmap" in p.name for p in paths)

"""The README's method table is generated from the registry and results/full, and kept in sync."""

from pathlib import Path

import pytest

from neurips26.readme import END, PERF_END, PERF_START, START, performance_table, render

ROOT = Path(__file__).resolve().parents[1]


def test_readme_table_in_sync():
    text = (ROOT / "README.md").read_text()
    assert render(text, ROOT / "results" / "full") == text, "run `neurips26 readme` and commit README.md"


def test_readme_shows_the_two_commands_first():
    text = (ROOT / "README.md").read_text()
    assert text.index("make reproduce") < text.index("## Methods")
    assert text.index("make test") < text.index("## Methods")


def test_render_requires_markers():
    with pytest.raises(ValueError, match="markers"):
        render("no table here")
    assert render(f"a\n{START}\nold\n{END}\nb").startswith("a\n")


def test_readme_usage_avoids_deprecated_generate_argument():
    # transformers 5.24 deprecates generate(past_key_values=...) in favour of cache= (issue 23)
    text = (ROOT / "README.md").read_text()
    assert "past_key_values=" not in text and "generate(..., cache=" in text


def test_performance_table_shows_targets_hit_missed_and_not_run(tmp_path):
    import json

    rows = [{"threads": 1, "case": {"n": n}, "timing": {}, "ratio": {"ref": 1.0, "m": r}, "extra": {}}
            for n, r in ((1, 0.5), (2, 3.0))]  # fmt: skip
    base = {"title": "t", "reference": "ref", "x": "n", "rows": rows}
    for name, quick, target in (("a", False, {"max_ratio": 2.0, "n": 2, "measured": 3.0, "met": False}),
                                ("b", True, {"max_ratio": 2.0, "n": 9, "measured": None, "met": None})):  # fmt: skip
        (tmp_path / f"{name}.json").write_text(
            json.dumps({**base, "name": name, "quick": quick, "targets": {"m": target}})
        )
    table = performance_table(tmp_path)
    assert "| a | full | m | <= 2.0x at n = 2 | 3.00x | missed |" in table
    assert "| b | quick | m | <= 2.0x at n = 9 | - | not in this run |" in table
    assert "| a | full | n=2 | m 3.00x (vs ref) |" in table
    assert "No benchmark results" in performance_table(tmp_path / "none")
    text = f"x\n{START}\n{END}\n{PERF_START}\nold\n{PERF_END}\ny"
    assert "missed" in render(text, tmp_path / "full", bench_dir=tmp_path)


def test_verdict_cell_marks_stale_code_other_torch_and_flips():
    from neurips26.claims.report import current_torch
    from neurips26.claims.runner import claim_hash
    from neurips26.readme import verdict_cell
    from neurips26.registry import load_claim

    now = claim_hash(load_claim("adera"))
    base = {"schema": 2, "slug": "adera", "verdict": "reproduced", "verdict_reason": "criteria", "warnings": []}
    fresh = {**base, "provenance": {"claim_hash": now}, "env": {"versions": {"torch": f"{current_torch()}+cpu"}}}
    assert verdict_cell(fresh) == "reproduced"
    old = {**base, "provenance": {"claim_hash": "0" * 16}, "env": {"versions": {"torch": "2.13.0+cpu"}}}
    assert verdict_cell(old) == "reproduced; stale code, torch 2.13.0+cpu"
    flip = [{"matching": True, "agree": False}]
    assert verdict_cell(fresh, flip) == "inconclusive (spread: flipped on unseen seeds)"
    assert verdict_cell(fresh, [{"matching": False, "agree": False}]) == "reproduced"  # other code: not counted
    testbed = {**fresh, "verdict": "inconclusive", "verdict_reason": "testbed: floor"}
    assert verdict_cell(testbed, flip) == "inconclusive (testbed: floor)"  # not decisive: nothing to flip

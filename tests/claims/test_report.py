"""Report rendering from fixture JSON files alone."""

import json

import pytest

from neurips26.claims.report import benchmark_tables, build_report, fmt, load_results, mean_std


def fixture_result(slug="toy", verdict="reproduced", over=False):
    """A schema-2 result as the runner writes it."""
    return {
        "schema": 2,
        "verdict_reason": "criteria",
        "deciding": "acc_vs_b",
        "references": ["S"],
        "premises": [
            {
                "key": "b_learns",
                "kind": "evidence",
                "text": "acc: B >= 0.5",
                "data": {"type": "AtLeast", "metric": "acc", "arm": "B", "threshold": 0.5},
                "verdict": "reproduced",
                "numbers": {"n": 2, "mean": 0.65, "std": 0.07, "lower_bound": 0.6, "upper_bound": 0.7, "threshold": 0.5},
            }
        ],
        "headlines": [
            {"text": "A beats B", "criteria": ["acc_vs_b"], "untested": "", "verdicts": {"acc_vs_b": verdict}, "status": verdict},
            {"text": "A scales to 1B", "criteria": [], "untested": "needs a GPU", "verdicts": {}, "status": "untested"},
        ],
        "cold_wall_s": 40.0,
        "provenance": {"commit": "abc", "dirty": False, "claim_hash": "h1", "config_hash": "h2"},
        "warnings": ["over budget: 70 s cold > 60 s"] if over else [],
        "slug": slug,
        "title": f"{slug}: a toy",
        "paper": {"seed": "s.txt", "paragraph": 2},
        "claim": "A beats B",
        "profile": "quick",
        "seeds": [0, 1],
        "method": "A",
        "baselines": ["B"],
        "criteria": [
            {
                "key": "acc_vs_b",
                "kind": "evidence",
                "text": "acc: A > B by more than 0",
                "data": {"type": "Better", "metric": "acc", "baseline": "B", "margin": 0.0},
                "verdict": verdict,
                "numbers": {"n": 2, "mean": 0.2, "std": 0.0, "lower_bound": 0.2, "upper_bound": 0.2, "mde": 0.1, "margin": 0.0},
            },
            {
                "key": "roundtrip",
                "kind": "design",
                "text": "exact: A == 1 on every seed",
                "data": {"type": "Exact", "metric": "acc", "expected": 1.0},
                "verdict": "reproduced",
                "numbers": {"n": 2, "min": 1.0, "max": 1.0, "expected": 1.0},
            },
        ],
        "verdict": verdict,
        "metrics": {"acc": {"A": [0.9, 0.8], "B": [0.6, 0.7], "S": [0.1, 0.1]}},
        "curves": {"loss": {"A": [[1, 0.5], [1, 0.4]], "B": [[1, 0.9], [1, 0.8]]}},
        "info": [{}, {}],
        "wall_s": 12.0,
        "seed_wall_s": [6.0, 6.0],
        "budget_s": 60.0,
        "over_budget": over,
        "config": {},
        "env": {"git": {"commit": "abc"}},
        "implemented": "all of it",
        "differences": "smaller",
        "data": "synthetic",
        "glossary": {"acc": "fraction of exact answers"},
        "command": f"neurips26 check {slug} --profile quick --force",
    }


def test_report_md_and_html(tmp_path):
    (tmp_path / "toy.json").write_text(json.dumps(fixture_result()))
    (tmp_path / "slow.json").write_text(json.dumps(fixture_result("slow", "not reproduced", over=True)))
    (tmp_path / "garbage.json").write_text("{not json")
    md, html = build_report(tmp_path)
    text = md.read_text()
    # one short summary line per claim: verdict, deciding criterion with both arms and its bound, seeds, wall
    line = next(x for x in text.splitlines() if x.startswith("| [toy](#toy)"))
    assert "| reproduced | acc_vs_b [acc]: A 0.850 ± 0.071 vs B 0.650 ± 0.071; d L=0.200 U=0.200 vs 0.000 | 2 | 12 s (cold 40 s) | - |" in line
    assert len(line) < 200
    slow = next(x for x in text.splitlines() if x.startswith("| [slow](#slow)"))
    assert "over budget" in slow
    assert "OVER BUDGET" in text
    assert "1 reproduced, 1 not reproduced, 0 inconclusive" in text
    assert "**acc**: fraction of exact answers" in text and "**decision rule**" in text
    assert "neurips26 check toy --profile quick --force" in text
    # premises come first in the section, design checks apart, the headline table with untested reasons
    section = text[text.index("## toy: a toy") :]
    assert section.index("**Premises**") < section.index("**Evidence criteria.**") < section.index("**Design checks**")
    assert "untested: needs a GPU" in section and "acc_vs_b (reproduced)" in section
    page = html.read_text()
    assert page.count("data:image/png;base64,") >= 4
    assert "<script" not in page
    assert "<a href=\"#toy\">toy</a>" in page and "id='toy'" in page


def test_testbed_verdicts_show_their_reason_and_premise(tmp_path):
    result = fixture_result()
    result.update(verdict="inconclusive", verdict_reason="testbed", deciding="b_learns")
    result["premises"][0]["verdict"] = "not reproduced"
    (tmp_path / "toy.json").write_text(json.dumps(result))
    md, _ = build_report(tmp_path)
    line = next(x for x in md.read_text().splitlines() if x.startswith("| [toy](#toy)"))
    assert "inconclusive (testbed)" in line and "b_learns [acc]: B 0.650" in line


def test_budget_table_renders_each_arms_budget(tmp_path):
    result = fixture_result()
    result["info"] = [{"budget": {"A": {"steps": 100, "lr_grid": [0.1, 0.01]}, "B": {"steps": 100, "bits": 2.5}}}, {}]
    (tmp_path / "toy.json").write_text(json.dumps(result))
    md, _ = build_report(tmp_path)
    text = md.read_text()
    assert "| arm | steps | lr_grid | bits |" in text
    assert "| A | 100 | [0.1, 0.01] |  |" in text and "| B | 100 |  | 2.5 |" in text


def test_schema_1_results_are_shown_with_a_warning(tmp_path):
    old = fixture_result()
    for key in ("verdict_reason", "deciding", "premises", "headlines", "provenance", "warnings", "cold_wall_s", "references"):
        old.pop(key)
    old["schema"] = 1
    old["metrics"]["acc"].pop("S")
    (tmp_path / "old.json").write_text(json.dumps(old))
    md, _ = build_report(tmp_path)
    assert "schema 1" in md.read_text()


def test_load_results_skips_non_results(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"hello": 1}))
    assert load_results(tmp_path) == []
    assert load_results(tmp_path / "missing") == []


def test_formatting():
    assert mean_std([1.0, 3.0]) == (2.0, 2**0.5)
    assert fmt([0.5]) == "0.500"
    assert fmt([]) == "n/a"


def test_benchmark_tables_render_the_first_seed_that_has_one(tmp_path):
    result = fixture_result()
    bench = {
        "T=1024": {"q": {"decode_step_s": 0.25, "peak_bytes": 3.0e6}, "full": {"decode_step_s": 0.05}},
        "T=2048": {"q": {"decode_step_s": 0.5, "peak_bytes": 6.0e6}},
    }
    result["info"] = [{"decode_benchmark": bench, "other": {"x": 1}}, {"decode_benchmark": {"T=1": {}}}]
    tables = benchmark_tables(result)
    assert [t[0] for t in tables] == ["decode_benchmark"]
    name, header, rows = tables[0]
    assert header == ["setting", "arm", "decode_step_s", "peak_bytes"]
    assert rows == [
        ["T=1024", "q", "0.25", "3e+06"],
        ["T=1024", "full", "0.05", ""],
        ["T=2048", "q", "0.5", "6e+06"],
    ]
    (tmp_path / "toy.json").write_text(json.dumps(result))
    md, html = build_report(tmp_path)
    assert "| T=2048 | q | 0.5 | 6e+06 |" in md.read_text()
    assert "decode_benchmark" in html.read_text()


def test_benchmark_tables_ignore_non_benchmark_info():
    result = fixture_result()
    result["info"] = [{"timings": {"a": {"b": 1.0}}, "bad_benchmark": [1, 2]}]
    assert benchmark_tables(result) == []


def test_ruler_calibration_section_and_heatmap(tmp_path):
    from neurips26.claims.report import load_ruler, ruler_grid

    results = tmp_path / "results"
    (results / "full").mkdir(parents=True)
    (results / "ruler").mkdir()
    (results / "full" / "toy.json").write_text(json.dumps(fixture_result()))
    table = [
        {"task": "niah_single_1", "length": 512, "accuracy": 0.9},
        {"task": "niah_single_1", "length": 1024, "accuracy": 0.75},
        {"task": "vt", "length": 512, "accuracy": 0.1},
    ]
    cal = {"kind": "ruler", "model": "m", "cache": "dynamic", "n": 20, "seed": 0, "command": "neurips26 ruler x"}
    (results / "ruler" / "m.json").write_text(json.dumps({**cal, "table": table}))
    (results / "ruler" / "other.json").write_text(json.dumps({"kind": "something else"}))
    (data,) = load_ruler(results / "ruler")
    tasks, lengths, grid = ruler_grid(data)
    assert tasks == ["niah_single_1", "vt"] and lengths == [512, 1024]
    assert grid == [[0.9, 0.75], [0.1, None]]  # a missing cell stays missing, never 0
    md, html_path = build_report(results / "full")
    text = md.read_text()
    assert "## RULER calibration" in text and "| vt | 0.10 | - |" in text and "neurips26 ruler x" in text
    assert (results / "full" / "plots" / "ruler_m.png").stat().st_size > 0
    assert "RULER calibration" in html_path.read_text()


def test_report_without_ruler_folder_has_no_ruler_section(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "toy.json").write_text(json.dumps(fixture_result()))
    md, _ = build_report(tmp_path / "full")
    assert "RULER calibration" not in md.read_text()


def test_report_prints_display_names_and_claims_validate_them():
    from neurips26.claims.base import Better, Claim
    from neurips26.claims.report import describe_numbers, display_name

    result = {
        "slug": "x",
        "method": "my_method",
        "display_names": {"my_method": "MyMethod", "base_line": "Base-Line"},
        "metrics": {"acc": {"my_method": [0.5], "base_line": [0.4]}},
    }
    entry = {"key": "k", "data": {"metric": "acc", "baseline": "base_line"}, "numbers": {}}
    text = describe_numbers(result, entry)
    assert "MyMethod" in text and "Base-Line" in text and "my_method" not in text
    assert display_name(result, "other_arm") == "other_arm"
    assert display_name({"slug": "no_such_claim"}, "a_b") == "a_b"
    with pytest.raises(ValueError, match="display_names"):
        Claim(
            slug="x", claim="c", method="m", baselines=("b",), run=lambda c, s: None,
            criteria=(Better("acc", baseline="b", label="l"),),
            configs={p: {} for p in ("smoke", "quick", "full")}, display_names={"m": ""},
        )  # fmt: skip

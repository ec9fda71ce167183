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
                "data": {"type": "AtLeast", "metric": "acc", "arm": "B", "threshold": 0.5, "label": "b_learns", "confidence": 0.5},
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
                "data": {"type": "Better", "metric": "acc", "baseline": "B", "margin": 0.0, "label": "acc_vs_b"},
                "verdict": verdict,
                "numbers": {"n": 2, "mean": 0.2, "std": 0.0, "lower_bound": 0.2, "upper_bound": 0.2, "mde": 0.1, "margin": 0.0},
            },
            {
                "key": "roundtrip",
                "kind": "design",
                "text": "exact: A == 1 on every seed",
                "data": {"type": "Exact", "metric": "acc", "expected": 1.0, "label": "roundtrip"},
                "verdict": "reproduced",
                "numbers": {"n": 2, "min": 1.0, "max": 1.0, "expected": 1.0},
            },
        ],
        "verdict": verdict,
        "metrics": {"acc": {"A": [0.8, 0.9] if verdict == "reproduced" else [0.3, 0.2], "B": [0.6, 0.7], "S": [0.1, 0.1]}},
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
    result["premises"][0]["data"]["threshold"] = 0.9  # re-judged from the metrics: B (0.65) misses it
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


def _seeded(result, seeds, profile="full"):
    out = json.loads(json.dumps(result))
    out.update(seeds=seeds, profile=profile)
    n = len(seeds)
    for arms in out["metrics"].values():
        for arm, values in arms.items():
            arms[arm] = (values * n)[:n]
    return out


def test_report_leads_with_the_committed_table_seed_agreement_and_quick_recheck(tmp_path):
    """results/full leads the quick report: unseen-seed agreement on top, a verdict that flips on unseen
    seeds published as inconclusive (spread) with both runs, and beside each claim the quick re-check."""
    for name in ("full", "seedcheck", "quick"):
        (tmp_path / name).mkdir()
    good, bad = fixture_result("toy"), fixture_result("slow", "not reproduced")
    (tmp_path / "full" / "toy.json").write_text(json.dumps(_seeded(good, [0, 1])))
    (tmp_path / "full" / "slow.json").write_text(json.dumps(_seeded(bad, [0, 1])))
    flipped = _seeded(fixture_result("toy", "not reproduced"), [5, 6])  # same code and config, unseen seeds
    (tmp_path / "seedcheck" / "toy_seeds5-6.json").write_text(json.dumps(flipped))
    held = _seeded(fixture_result("slow", "not reproduced"), [7, 8])
    (tmp_path / "seedcheck" / "slow_seeds7-8.json").write_text(json.dumps(held))
    stale = _seeded(fixture_result("slow", "reproduced"), [3, 4])
    stale["provenance"]["claim_hash"] = "older"
    (tmp_path / "seedcheck" / "slow_seeds3-4.json").write_text(json.dumps(stale))
    (tmp_path / "quick" / "toy.json").write_text(json.dumps(_seeded(good, [0, 1], "quick")))
    broken = _seeded(bad, [0, 1], "quick")
    broken["metrics"]["acc"]["B"] = [0.1, 0.2]  # the baseline does not learn here: the premise fails
    (tmp_path / "quick" / "slow.json").write_text(json.dumps(broken))
    md, html = build_report(tmp_path / "quick")
    text = md.read_text()
    assert text.index("## Committed full-profile verdicts") < text.index("## This run: quick")
    assert "**Unseen-seed agreement: 1/2 (50 %)**" in text
    assert "Flipped, so published as inconclusive (spread): toy." in text
    toy = next(x for x in text.splitlines() if x.startswith("| [toy](#toy) | inconclusive (spread: flipped"))
    assert "not reproduced on [5, 6] (differs)" in toy
    assert "same direction: acc_vs_b effect 0.200 here vs 0.200 committed (reproduced)" in toy
    slow = next(x for x in text.splitlines() if x.startswith("| [slow](#slow) | not reproduced"))
    assert "not reproduced on [7, 8] (agrees) (+1 of other code/config/seeds)" in slow
    assert "quick testbed: premise b_learns does not hold" in slow
    assert "Committed full-profile verdicts" in html.read_text()
    full_md, _ = build_report(tmp_path / "full")  # the full report leads with the same table, no quick column
    assert "quick re-check here" not in full_md.read_text() and "Unseen-seed agreement: 1/2" in full_md.read_text()


def test_sections_show_per_headline_verdicts_cost_and_the_recorded_verdict(tmp_path):
    result = fixture_result()
    result["criteria"].append(
        {"key": "slow_steps", "kind": "cost", "text": "step ratio", "verdict": "not reproduced", "numbers": {},
         "data": {"type": "AtMost", "metric": "acc", "arm": "A", "threshold": 0.1, "label": "slow_steps", "kind": "cost"}}
    )  # fmt: skip
    result["headlines"][0]["criteria"].append("slow_steps")
    result.update(verdict="not reproduced", deciding="slow_steps")  # what an older rule recorded
    (tmp_path / "toy.json").write_text(json.dumps(result))
    text = build_report(tmp_path)[0].read_text()
    assert "| [toy](#toy) | reproduced |" in text
    assert "**Recorded** (rule version 2): not reproduced, deciding slow_steps" in text
    assert "**Cost of our CPU code**" in text and "**Primary headline.** A beats B" in text
    assert "| * A beats B | acc_vs_b (reproduced), slow_steps (not reproduced) | reproduced; deciding acc_vs_b |" in text

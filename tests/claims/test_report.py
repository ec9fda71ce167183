"""Report rendering from fixture JSON files alone."""

import json

from neurips26.claims.report import benchmark_tables, build_report, fmt, load_results, mean_std


def fixture_result(slug="toy", verdict="reproduced", over=False):
    return {
        "schema": 1,
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
                "text": "acc: A > B by more than 0",
                "data": {"type": "Better", "metric": "acc", "baseline": "B"},
                "verdict": verdict,
                "numbers": {"mean": 0.2},
            }
        ],
        "verdict": verdict,
        "metrics": {"acc": {"A": [0.9, 0.8], "B": [0.6, 0.7]}},
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
    assert "| toy | A beats B | acc | B: 0.650 ± 0.071 | A: 0.850 ± 0.071 | 2 |" in text
    assert "OVER BUDGET" in text and "(over budget)" in text
    assert "1 reproduced, 1 not reproduced, 0 inconclusive" in text
    assert "**acc**: fraction of exact answers" in text
    assert "neurips26 check toy --profile quick --force" in text
    page = html.read_text()
    assert page.count("data:image/png;base64,") >= 4
    assert "<script" not in page


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

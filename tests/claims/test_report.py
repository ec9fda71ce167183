"""Report rendering from fixture JSON files alone."""

import json

from neurips26.claims.report import build_report, fmt, load_results, mean_std


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

"""The README's method table is generated from the registry and results/full, and kept in sync."""

from pathlib import Path

import pytest

from neurips26.readme import END, START, render

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

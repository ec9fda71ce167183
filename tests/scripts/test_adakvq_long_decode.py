"""The pure helpers of scripts/adakvq-long-decode (answer extraction, divergence, bit changes, task pick)."""

import importlib.machinery
import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "scripts" / "adakvq-long-decode"


@pytest.fixture(scope="module")
def script():
    loader = importlib.machinery.SourceFileLoader("adakvq_long_decode", str(_PATH))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)  # main() runs only under __main__
    return mod


@pytest.mark.parametrize(
    "text, want",
    [
        ("1. 58 + 98 = 156\nAnswer: 156", "156"),
        ("So, the answer is 176.", "176"),
        ("The answer is 143.33.", "143.33"),
        ("Answer: -1,470", "-1470"),
        ("Answer: 8.0\nThen 9", "8"),
        ("answer is 3, not 4. Answer: 5 and later 7", "5"),
        ("21 * 70 = 1420", "1420"),
        ("The answer is: -4.", "-4"),
        ("the answer is **12**", "12"),
        ("Answer: $12", "12"),
        ("no digits here", None),
    ],
)
def test_extract_answer(script, text, want):
    assert script.extract_answer(text) == want


def test_normalise_number(script):
    assert script.normalise_number(None) is None
    assert script.normalise_number("abc") is None
    assert script.normalise_number("007") == "7"


def test_first_divergence(script):
    assert script.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert script.first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert script.first_divergence([1, 2], [1, 2, 3]) == 2


def test_bit_changes(script):
    assert script.bit_changes([]) == 0
    assert script.bit_changes([2, 3, 3, 2]) == 2
    assert script.bit_changes([4, 4, 4]) == 0


def test_pick_task(script):
    pilot = {"a": {"accuracy": 0.5, "gen_tokens": 10.0}, "b": {"accuracy": 0.5, "gen_tokens": 40.0},
             "c": {"accuracy": 0.25, "gen_tokens": 90.0}}  # fmt: skip
    assert script.pick_task(pilot) == "b"


def test_flush_step(script):
    # G = R = 32, 64-token prompt: block 0 leaves the window during the prefill, block 1 at decode step 32
    assert script.flush_step(0, 64, 32, 32) == 0
    assert script.flush_step(1, 64, 32, 32) == 32
    assert script.flush_step(3, 64, 32, 32) == 96

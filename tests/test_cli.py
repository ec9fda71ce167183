"""Every CLI verb, including bad input."""

import json
import subprocess
import sys

import pytest

from neurips26.cli import main


def test_list_shows_all_36(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert sum(out.count(s) for s in ("planned", "implemented", "partial")) >= 36


def test_list_area_filter_and_bad_area(capsys):
    assert main(["list", "--area", "graph"]) == 0
    out = capsys.readouterr().out
    assert "gcn_mlp" in out and "archer" not in out
    with pytest.raises(SystemExit, match="--area must be one of"):
        main(["list", "--area", "astrology"])


def test_show_and_unknown_slug(capsys):
    assert main(["show", "adera"]) == 0
    out = capsys.readouterr().out
    assert "AdERA" in out and "criterion [design]: bitwise_exact" in out
    # claims-v3: the default primary headline is the first tested by evidence (adera's first tested one is design-only)
    assert "primary headline: after warm-up only sign and mantissa travel" in out
    assert main(["show", "ancre"]) == 0
    assert "criterion [cost]: e2_step_time_ratio" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="did you mean"):
        main(["show", "aderaa"])


def test_check_errors():
    with pytest.raises(SystemExit, match="slugs"):
        main(["check"])
    with pytest.raises(SystemExit, match="profile"):
        main(["check", "--all", "--profile", "huge"])
    with pytest.raises(SystemExit, match="unknown method slug"):
        main(["check", "nope_not_a_method"])
    with pytest.raises(SystemExit, match="seeds"):
        main(["check", "--all", "--seeds", "a,b"])


def test_check_refuses_planned_method(monkeypatch):
    """Every method has a module today, so a planned one is simulated (status is what the CLI reads)."""
    from neurips26 import registry

    real = registry.status
    monkeypatch.setattr(
        registry, "status", lambda slug: ("planned", "no module") if slug == "ancre" else real(slug)
    )
    with pytest.raises(SystemExit, match="ancre has no runnable claim check \\(planned: no module\\)"):
        main(["check", "ancre"])


def test_report_and_env(tmp_path, capsys):
    (tmp_path / "quick").mkdir()
    assert main(["report", "--profile", "quick", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "quick" / "report.md").exists()
    assert main(["env"]) == 0
    assert "torch_threads" in capsys.readouterr().out


def test_env_prints_json():
    out = subprocess.run(
        [sys.executable, "-m", "neurips26", "env"], capture_output=True, text=True, check=True
    )
    assert "versions" in json.loads(out.stdout)


def test_module_entry_point_bad_verb_exits_nonzero():
    proc = subprocess.run([sys.executable, "-m", "neurips26", "frobnicate"], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "invalid choice" in proc.stderr


def test_help_lists_verbs():
    proc = subprocess.run([sys.executable, "-m", "neurips26", "--help"], capture_output=True, text=True)
    for verb in ("list", "show", "check", "report", "env", "readme"):
        assert verb in proc.stdout


def test_ruler_rejects_bad_arguments_with_clear_errors():
    from neurips26.cli import _named_cache, main

    with pytest.raises(SystemExit, match="--lengths must be comma-separated integers"):
        main(["ruler", "--lengths", "5x"])
    with pytest.raises(SystemExit, match="--cache must be dynamic, kivi<bits> or adakvq"):
        _named_cache("zip", None)
    assert _named_cache("dynamic", None) is None


def test_ruler_all_tasks_writes_a_table_with_provenance(tmp_path, monkeypatch):
    import json

    import neurips26.common.models as models
    import neurips26.common.ruler as ruler
    from neurips26.cli import main

    seen = {}

    def fake_evaluate(net, tok, cache, attention, tasks, lengths, n, seed, batch_size):
        seen.update(tasks=tasks, lengths=lengths, n=n, seed=seed)
        return [
            {"task": t, "length": n_tok, "n": n, "accuracy": 0.5, "gen_tokens": 3.0, "s_per_item": 0.1}
            for t in tasks
            for n_tok in lengths
        ]

    from types import SimpleNamespace

    monkeypatch.setattr(models, "load_pretrained", lambda name: (SimpleNamespace(config=None), object()))
    monkeypatch.setattr(ruler, "evaluate", fake_evaluate)
    out = tmp_path / "ruler" / "m.json"
    argv = ["ruler", "--tasks", "all", "--lengths", "256,512", "--n", "3", "--seed", "4", "--out", str(out)]
    assert main(argv) == 0
    assert seen == {"tasks": tuple(ruler.TASKS), "lengths": (256, 512), "n": 3, "seed": 4}
    data = json.loads(out.read_text())
    assert data["kind"] == "ruler" and data["tasks"] == list(ruler.TASKS) and data["lengths"] == [256, 512]
    assert data["command"] == "neurips26 ruler " + " ".join(argv[1:])
    assert "git" in data["env"] and len(data["table"]) == 2 * len(ruler.TASKS)

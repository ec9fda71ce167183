"""Runner: idempotence, resume after an interruption, atomic JSON, determinism, executors."""

import dataclasses
import json
import random

import pytest

from neurips26.claims.base import Better, Claim, SeedResult
from neurips26.claims.runner import SCHEMA_VERSION, capture_env, run_claim

CALLS: list[int] = []
FAIL_ON: list[int] = []  # seeds that simulate a kill, outside the config so a resume has the same config


def _toy_run(config, seed):
    """Deterministic given the seed (the runner seeds python's random)."""
    CALLS.append(seed)
    if config.get("fail_on") == seed or seed in FAIL_ON:
        raise KeyboardInterrupt("simulated kill")
    noise = random.random() * 0.01
    return SeedResult(
        metrics={"acc": {"method": 0.9 + noise, "baseline": 0.5 + noise}},
        curves={"loss": {"method": [1.0, 0.5, 0.2], "baseline": [1.0, 0.8, 0.7]}},
        info={"seed_seen": seed},
    )


def make_claim(**smoke):
    return Claim(
        slug="toy",
        claim="method beats baseline",
        method="method",
        baselines=("baseline",),
        criteria=(Better("acc", baseline="baseline", margin=0.1),),
        run=_toy_run,
        configs={"smoke": {"threads": 1, **smoke}, "quick": {"threads": 1}, "full": {"threads": 1}},
        seeds={"smoke": (0, 1, 2), "quick": (0,), "full": (0,)},
        glossary={"acc": "fraction correct"},
    )


def test_result_schema_and_verdict(tmp_path):
    data = run_claim(make_claim(), "smoke", out=tmp_path)
    assert data["schema"] == SCHEMA_VERSION
    assert data["verdict"] == "reproduced"
    assert data["metrics"]["acc"]["method"][0] > data["metrics"]["acc"]["baseline"][0]
    assert len(data["curves"]["loss"]["method"]) == 3
    assert [i["seed_seen"] for i in data["info"]] == [0, 1, 2]
    for key in ("slug", "profile", "seeds", "criteria", "wall_s", "env", "config", "budget_s", "over_budget"):
        assert key in data
    on_disk = json.loads((tmp_path / "smoke" / "toy.json").read_text())
    assert on_disk == data


def test_existing_result_is_reused_unless_forced(tmp_path):
    run_claim(make_claim(), "smoke", out=tmp_path)
    CALLS.clear()
    run_claim(make_claim(), "smoke", out=tmp_path)
    assert CALLS == []
    run_claim(make_claim(), "smoke", out=tmp_path, force=True)
    assert CALLS == [0, 1, 2]


def test_resume_after_interruption(tmp_path):
    CALLS.clear()
    FAIL_ON[:] = [2]
    try:
        with pytest.raises(KeyboardInterrupt):
            run_claim(make_claim(), "smoke", out=tmp_path)
    finally:
        FAIL_ON.clear()
    assert not (tmp_path / "smoke" / "toy.json").exists()
    assert sorted(p.name for p in (tmp_path / ".partial" / "smoke" / "toy").iterdir()) == [
        "seed-0.json",
        "seed-1.json",
    ]
    CALLS.clear()
    data = run_claim(make_claim(), "smoke", out=tmp_path)
    assert CALLS == [2]
    assert data["seeds"] == [0, 1, 2]


def test_partials_from_another_config_are_discarded(tmp_path):
    CALLS.clear()
    with pytest.raises(KeyboardInterrupt):
        run_claim(make_claim(fail_on=2), "smoke", out=tmp_path)
    CALLS.clear()
    data = run_claim(make_claim(), "smoke", out=tmp_path)
    assert CALLS == [0, 1, 2]  # the partials carried another config hash: rerun, never mixed in
    assert data["provenance"]["config_hash"]


def test_provenance_and_cold_wall_are_recorded(tmp_path):
    from neurips26.common.cache import cached_object

    def run(config, seed):
        cached_object("toy-test", {"root": str(tmp_path), "seed": 0}, lambda: __import__("time").sleep(0.2) or 1)
        return SeedResult(metrics={"acc": {"method": 1.0, "baseline": 0.0}})

    import os

    os.environ["NEURIPS26_CACHE"] = str(tmp_path / "cache")
    try:
        claim = Claim(
            slug="toy",
            claim="c",
            method="method",
            baselines=("baseline",),
            criteria=(Better("acc", baseline="baseline"),),
            run=run,
            configs={"smoke": {"threads": 1}, "quick": {"threads": 1}, "full": {"threads": 1}},
            seeds={"smoke": (0, 1), "quick": (0,), "full": (0,)},
        )
        data = run_claim(claim, "smoke", out=tmp_path / "r")
    finally:
        del os.environ["NEURIPS26_CACHE"]
    # seed 0 built the entry (0.2 s, inside its wall); seed 1 found it, but on a cold cache seed 0 would
    # have built it for seed 1 too: nothing is added
    assert data["seed_cold_wall_s"] == data["seed_wall_s"]
    assert data["cpu_s"] >= 0 and len(data["seed_cpu_s"]) == 2
    # a second run finds the entry on disk: its cold wall adds the recorded build time once, not per seed
    os.environ["NEURIPS26_CACHE"] = str(tmp_path / "cache")
    try:
        again = run_claim(claim, "smoke", out=tmp_path / "r2")
    finally:
        del os.environ["NEURIPS26_CACHE"]
    extra = [c - w for c, w in zip(again["seed_cold_wall_s"], again["seed_wall_s"])]
    assert extra[0] >= 0.19 and extra[1] == 0.0
    prov = data["provenance"]
    assert set(prov) >= {"commit", "dirty", "claim_hash", "config_hash", "captured"}
    assert isinstance(data["warnings"], list)


def test_same_seed_same_numbers(tmp_path):
    a = run_claim(make_claim(), "smoke", out=tmp_path / "a")
    b = run_claim(make_claim(), "smoke", out=tmp_path / "b")
    assert a["metrics"] == b["metrics"]


def test_no_temporary_files_left_behind(tmp_path):
    run_claim(make_claim(), "smoke", out=tmp_path)
    leftovers = [p for p in tmp_path.rglob(".*") if p.is_file()]
    assert leftovers == []


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="executor"):
        run_claim(make_claim(), "smoke", out=tmp_path, executor="spark")
    with pytest.raises(ValueError, match="seeds"):
        run_claim(make_claim(), "smoke", out=tmp_path, seeds=[-1])
    with pytest.raises(ValueError, match="profile"):
        run_claim(make_claim(), "medium", out=tmp_path)


@pytest.mark.parametrize("threads", [None, 0, True, 1.0, "1"])
def test_config_without_int_threads_is_rejected_before_any_seed(tmp_path, threads):
    smoke = {} if threads is None else {"threads": threads}
    claim = dataclasses.replace(make_claim(), configs={**make_claim().configs, "smoke": smoke})
    CALLS.clear()
    with pytest.raises(ValueError, match=r"claim 'toy': configs\['smoke'\] must set 'threads'"):
        run_claim(claim, "smoke", out=tmp_path)
    assert CALLS == [] and not (tmp_path / ".partial").exists()


def test_runner_sets_the_configs_threads_around_each_seed(tmp_path):
    import torch

    seen = []

    def run(config, seed):
        seen.append(torch.get_num_threads())
        return SeedResult(metrics={"acc": {"method": 1.0, "baseline": 0.0}})

    before = torch.get_num_threads()
    claim = dataclasses.replace(make_claim(), run=run, configs={**make_claim().configs, "smoke": {"threads": 2}})
    run_claim(claim, "smoke", out=tmp_path)
    assert seen == [2, 2, 2] and torch.get_num_threads() == before


def test_unknown_arm_is_rejected(tmp_path):
    def bad_run(config, seed):
        return SeedResult(metrics={"acc": {"method": 1.0, "other": 0.0}})

    claim = Claim(
        "toy",
        "c",
        "method",
        ("baseline",),
        (Better("acc", baseline="baseline"),),
        bad_run,
        {"smoke": {"threads": 1}, "quick": {"threads": 1}, "full": {"threads": 1}},
    )
    with pytest.raises(ValueError, match="unknown arms"):
        run_claim(claim, "smoke", out=tmp_path)


def test_env_capture_has_versions_and_commit():
    env = capture_env()
    assert env["versions"]["torch"]
    assert "commit" in env["git"]
    assert env["torch_threads"] >= 1


def test_ray_executor_matches_local(tmp_path):
    ray = pytest.importorskip("ray")
    local = run_claim(make_claim(), "smoke", out=tmp_path / "local")
    try:
        distributed = run_claim(make_claim(), "smoke", out=tmp_path / "ray", executor="ray")
    finally:
        ray.shutdown()
    assert distributed["metrics"] == local["metrics"]


def test_git_dirty_flag_ignores_written_results(tmp_path):
    import subprocess

    from neurips26.claims.runner import _git_commit

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "a.json").write_text("{}")
    git("add", "code.py", "results/a.json")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    clean = _git_commit(tmp_path)
    assert len(clean["commit"]) == 40 and clean["dirty"] is False
    (tmp_path / "results" / "a.json").write_text('{"new": 1}')
    assert _git_commit(tmp_path)["dirty"] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert _git_commit(tmp_path)["dirty"] is True


# ------------------------------------------------------------------------------ claims-v3: hash, command
def _tree(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _digest(files, root):
    import hashlib

    h = hashlib.sha256()
    for path in files:
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def test_module_closure_follows_claim_area_common_and_other_claims_and_adds_the_rule(tmp_path):
    from neurips26.claims.runner import module_closure

    _tree(
        tmp_path,
        {
            "neurips26/__init__.py": "",
            "neurips26/registry.py": "import neurips26.common.unused\n",  # harness: neither hashed nor followed
            "neurips26/claims/__init__.py": "from neurips26.claims.base import Claim\n",
            "neurips26/claims/base.py": "from neurips26.claims.criteria import X\n",
            "neurips26/claims/criteria.py": "X = 1\n",
            "neurips26/claims/other.py": "from neurips26.common import helper\n",
            "neurips26/claims/foo/__init__.py": "from .world import w\nfrom neurips26.claims.base import Claim\n",
            "neurips26/claims/foo/world.py": (
                "def w():\n    from neurips26.area import Lazy\n    from neurips26.claims.other import y\n"
            ),
            "neurips26/claims/foo/extra.py": "",
            "neurips26/area/__init__.py": "from neurips26.registry import area_exports\n",
            "neurips26/area/lazy.py": "from ..common.bar import f\nclass Lazy: ...\n",
            "neurips26/area/unrelated.py": "",
            "neurips26/common/__init__.py": "",
            "neurips26/common/bar.py": "def f(): return 1\n",
            "neurips26/common/helper.py": "",
            "neurips26/common/unused.py": "",
        },
    )
    files = module_closure(("neurips26.claims.foo",), tmp_path)
    rel = sorted(p.relative_to(tmp_path / "neurips26").as_posix() for p in files)
    assert rel == [
        "area/__init__.py", "area/lazy.py", "claims/criteria.py", "claims/foo/__init__.py", "claims/foo/extra.py",
        "claims/foo/world.py", "claims/other.py", "common/__init__.py", "common/bar.py", "common/helper.py",
    ]  # fmt: skip
    before = _digest(files, tmp_path)
    (tmp_path / "neurips26/common/bar.py").write_text("def f(): return 2\n")  # a common/ module it imports
    assert _digest(module_closure(("neurips26.claims.foo",), tmp_path), tmp_path) != before
    (tmp_path / "neurips26/common/bar.py").write_text("def f(): return 1\n")
    (tmp_path / "neurips26/common/unused.py").write_text("changed = True\n")  # not imported: no change
    (tmp_path / "neurips26/claims/base.py").write_text("# harness\nfrom neurips26.claims.criteria import X\n")
    assert _digest(module_closure(("neurips26.claims.foo",), tmp_path), tmp_path) == before


def test_claim_hash_covers_imported_claims_common_and_the_rule():
    from neurips26.claims.runner import SRC_ROOT, claim_hash, claim_modules, module_closure
    from neurips26.registry import load_claim

    claim = load_claim("aem")  # runs the agent-games testbed it shares with rewardflow
    rel = {p.relative_to(SRC_ROOT / "neurips26").as_posix() for p in module_closure(claim_modules(claim))}
    assert {"claims/aem.py", "testbeds/agent_games.py", "claims/criteria.py", "common/checks.py"} <= rel
    assert "rl/rewardflow.py" in rel and "claims/rewardflow.py" not in rel  # no claim-to-claim import left
    assert not rel & {"claims/base.py", "claims/runner.py", "registry.py"}
    assert not [f for f in rel if f.startswith(("claims/report/", "claims/plotting"))]  # harness package
    assert claim_hash(claim) == claim_hash(claim) and len(claim_hash(claim)) == 16


def test_recorded_command_regenerates_the_result_with_its_seeds(tmp_path):
    from neurips26.cli import build_parser

    data = run_claim(make_claim(), "smoke", seeds=(2, 0), out=tmp_path)
    assert data["command"] == "neurips26 check toy --profile smoke --force --seeds 2,0"
    args = build_parser().parse_args(data["command"].split()[1:])
    assert (args.slugs, args.profile, args.force, args.seeds) == (["toy"], "smoke", True, "2,0")


def test_a_reused_result_is_rejudged_by_the_current_rule(tmp_path):
    data = run_claim(make_claim(), "smoke", out=tmp_path)
    path = tmp_path / "smoke" / "toy.json"
    stored = json.loads(path.read_text())
    stored.update(verdict="not reproduced", verdict_reason="criteria", rule_version=2)  # an older rule's verdict
    path.write_text(json.dumps(stored))
    again = run_claim(make_claim(), "smoke", out=tmp_path)
    assert again["verdict"] == data["verdict"] == "reproduced" and again["rule_version"] == 3
    assert again["recorded"]["verdict"] == "not reproduced"

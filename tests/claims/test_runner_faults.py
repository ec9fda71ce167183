"""Results survive faults: SIGKILL mid-seed (local and Ray executors), corrupt result files, a full
disk, and damaged cache entries each give a clear message and never a partial file."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from neurips26.claims.runner import run_claim
from neurips26.common import cache as cache_module

TOY = textwrap.dedent(
    '''
    import os, random, sys, time
    from neurips26.claims.base import Better, Claim, SeedResult

    def _run(config, seed):
        if str(seed) == os.environ.get("TOY_HANG_ON"):
            time.sleep(600)  # the parent kills the process here, mid-seed
        noise = random.random() * 0.01
        return SeedResult(metrics={"acc": {"method": 0.9 + noise, "baseline": 0.5 + noise}})

    CLAIM = Claim(
        slug="toyfault", claim="method beats baseline", method="method", baselines=("baseline",),
        criteria=(Better("acc", baseline="baseline", margin=0.1),), run=_run,
        configs={"smoke": {"threads": 1}, "quick": {"threads": 1}, "full": {"threads": 1}},
        seeds={"smoke": (0, 1, 2), "quick": (0,), "full": (0,)}, glossary={"acc": "fraction correct"},
    )

    if __name__ == "__main__":
        from neurips26.claims.runner import run_claim
        run_claim(CLAIM, "smoke", out=sys.argv[1], executor=sys.argv[2])
    '''
)


def _toy(tmp_path: Path):
    import importlib.util

    path = tmp_path / "toyfault.py"
    path.write_text(TOY)
    spec = importlib.util.spec_from_file_location("toyfault", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module.CLAIM


def _kill_mid_seed(script: Path, out: Path, executor: str) -> None:
    env = {**os.environ, "TOY_HANG_ON": "2", "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(out), executor], env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    partial = out / ".partial" / "smoke" / "toyfault"
    deadline = time.monotonic() + 120
    try:
        while not (partial / "seed-1.json").exists():
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "seeds 0 and 1 never finished"
            time.sleep(0.2)
        time.sleep(0.5)  # well inside seed 2
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole session: Ray's local daemons too
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "smoke" / "toyfault.json").exists()
    assert sorted(p.name for p in partial.iterdir()) == ["seed-0.json", "seed-1.json"]  # no temp files


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_sigkill_mid_seed_then_resume_gives_identical_metrics(tmp_path, executor, capsys):
    if executor == "ray":
        ray = pytest.importorskip("ray")
    script, claim = _toy(tmp_path)
    _kill_mid_seed(script, tmp_path / "killed", executor)
    try:
        resumed = run_claim(claim, "smoke", out=tmp_path / "killed", executor=executor)
        clean = run_claim(claim, "smoke", out=tmp_path / "clean", executor=executor)
    finally:
        if executor == "ray":
            ray.shutdown()
    assert resumed["metrics"] == clean["metrics"] and resumed["seeds"] == [0, 1, 2]


def test_corrupt_result_and_partial_are_discarded_with_a_message(tmp_path, capsys):
    _, claim = _toy(tmp_path)
    first = run_claim(claim, "smoke", out=tmp_path)
    final = tmp_path / "smoke" / "toyfault.json"
    final.write_text(final.read_text()[:40])  # truncated by some other means
    again = run_claim(claim, "smoke", out=tmp_path)
    assert again["metrics"] == first["metrics"]
    assert "is unreadable" in capsys.readouterr().err and json.loads(final.read_text())["seeds"] == [0, 1, 2]
    partial = tmp_path / ".partial" / "smoke" / "toyfault"
    (partial / "seed-1.json").write_text("[1, 2")
    final.unlink()
    third = run_claim(claim, "smoke", out=tmp_path)
    assert third["metrics"] == first["metrics"]
    assert "partial seed result" in capsys.readouterr().err


def test_full_disk_gives_a_clear_error_and_no_partial_file(tmp_path, monkeypatch):
    _, claim = _toy(tmp_path)

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache_module.os, "replace", no_space)
    with pytest.raises(OSError, match="could not write .*seed-0.json: No space left on device"):
        run_claim(claim, "smoke", out=tmp_path)
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "toyfault.py"]
    assert leftovers == []


def test_damaged_cache_entry_is_rebuilt_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURIPS26_CACHE", str(tmp_path / "cache"))
    calls = []

    def build():
        calls.append(1)
        return {"x": list(range(100))}

    assert cache_module.cached_object("faults", {"k": 1}, build) == {"x": list(range(100))}
    (entry,) = (tmp_path / "cache" / "faults").iterdir()
    blob = entry / "object.pt"
    blob.write_bytes(blob.read_bytes()[:20])  # truncated
    with pytest.warns(RuntimeWarning, match="incomplete or damaged"):
        assert cache_module.cached_object("faults", {"k": 1}, build) == {"x": list(range(100))}
    assert len(calls) == 2


def test_cache_build_on_a_full_disk_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURIPS26_CACHE", str(tmp_path / "cache"))

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache_module.os, "replace", no_space)
    with pytest.raises(OSError, match="could not write the cache entry .*No space left on device"):
        cache_module.cached_object("faults", {"k": 2}, lambda: 1)
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []

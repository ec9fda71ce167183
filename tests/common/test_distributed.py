"""Tests of the local gloo launching helpers."""

from __future__ import annotations

import json
import socket

import pytest

from neurips26.common.distributed import free_port, run_script_workers

_ALL_REDUCE = """
import json, os
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
with open(os.environ["OUT"] + "." + os.environ["RANK"], "w") as f:
    json.dump({"sum": float(t), "world": dist.get_world_size()}, f)
dist.destroy_process_group()
"""


def test_free_port_is_bindable():
    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_two_workers_form_a_gloo_group(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(_ALL_REDUCE)
    run_script_workers(script, 2, env={"OUT": str(tmp_path / "out")})
    results = [json.loads((tmp_path / f"out.{r}").read_text()) for r in range(2)]
    assert results == [{"sum": 3.0, "world": 2}] * 2


def test_failing_rank_raises_with_its_stderr(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("import os, sys\nif os.environ['RANK'] == '1':\n    sys.exit('rank one broke')\n")
    with pytest.raises(RuntimeError, match="(?s)rank 1 exited with 1:.*rank one broke"):
        run_script_workers(script, 2)


def test_bad_arguments(tmp_path):
    script = tmp_path / "ok.py"
    script.write_text("")
    with pytest.raises(ValueError, match="script must be an existing file"):
        run_script_workers(tmp_path / "missing.py", 2)
    with pytest.raises(ValueError, match="world"):
        run_script_workers(script, 0)
    with pytest.raises(ValueError, match="timeout"):
        run_script_workers(script, 1, timeout=0)
    with pytest.raises(TypeError, match="env must map strings"):
        run_script_workers(script, 1, env={"A": 1})

"""AIQL claim: smoke structure, determinism, premises, and the Minari logs it trains on."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("minari")

from neurips26.claims.aiql import CLAIM, _logs  # noqa: E402
from neurips26.claims.base import judge_claim  # noqa: E402
from neurips26.claims.runner import run_claim  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURIPS26_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MINARI_DATASETS_PATH", raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_smoke_structure_determinism_and_judgement(tmp_path):
    a = run_claim("aiql", "smoke", out=tmp_path / "a", force=True)
    for crit in (*CLAIM.premises, *CLAIM.criteria):
        assert crit.metric in a["metrics"], crit.metric
        assert crit.baseline in a["metrics"][crit.metric] and (crit.arm or CLAIM.method) in a["metrics"][crit.metric]
    for name, arms in a["metrics"].items():
        assert name in CLAIM.glossary
        assert all(math.isfinite(v) for values in arms.values() for v in values), name
        assert all(0.0 <= v <= 1.0 for v in arms.get("heuristic", [])) or name == "target_return"
    again = CLAIM.run(dict(CLAIM.configs["smoke"]), 0)  # the logs are now loaded from the Minari cache
    for name, arms in again.metrics.items():
        for arm, value in arms.items():
            assert value == a["metrics"][name][arm][0], (name, arm)
    assert a["verdict"] == judge_claim(CLAIM, a["metrics"])["verdict"]
    data = a["info"][0]["data"]
    assert data["ratio"] == pytest.approx(CLAIM.configs["smoke"]["source_episodes"] / CLAIM.configs["smoke"]["target_episodes"])


def test_logs_are_minari_datasets_loadable_by_id(tmp_path, monkeypatch):
    import minari

    config = CLAIM.configs["smoke"]
    ds = _logs(config, "source", 2, 0)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "cache" / "minari"))
    ids = [i for i in minari.list_local_datasets() if i.startswith("neurips26/warehouse/source-")]
    assert len(ids) == 1
    loaded = minari.load_dataset(ids[0])
    assert loaded.total_steps == len(ds) == 2 * config["horizon"]

"""AIQL claim: the smoke run's ranges and data ratio (generic checks: test_conformance.py), and the Minari logs
it trains on."""

from __future__ import annotations

import pytest

pytest.importorskip("minari", reason="the claim trains on Minari logs (envs extra)")

from neurips26.claims.aiql import CLAIM, _logs  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURIPS26_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MINARI_DATASETS_PATH", raising=False)
    yield


def test_smoke_ranges_and_data(smoke_result):
    a = smoke_result("aiql")
    for name, arms in a["metrics"].items():
        assert all(0.0 <= v <= 1.0 for v in arms.get("heuristic", [])) or name == "target_return"
    data = a["info"][0]["data"]
    assert data["ratio"] == pytest.approx(
        CLAIM.configs["smoke"]["source_episodes"] / CLAIM.configs["smoke"]["target_episodes"]
    )


def test_logs_are_minari_datasets_loadable_by_id(tmp_path, monkeypatch):
    import minari

    config = CLAIM.configs["smoke"]
    ds = _logs(config, "source", 2, 0)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "cache" / "minari"))
    ids = [i for i in minari.list_local_datasets() if i.startswith("neurips26/warehouse/source-")]
    assert len(ids) == 1
    loaded = minari.load_dataset(ids[0])
    assert loaded.total_steps == len(ds) == 2 * config["horizon"]


def test_workers_give_the_same_numbers_as_one_process():
    """The seed's independent trainings and evaluations in 2 worker processes: identical results."""
    from neurips26.claims.aiql import run

    config = CLAIM.configs["smoke"]
    one = run(dict(config, workers=1), 0)
    two = run(dict(config, workers=2), 0)
    assert one.metrics == two.metrics
    assert one.info == two.info

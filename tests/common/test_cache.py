"""Disk cache: hit, miss, corrupt entry rebuilt, atomic writes, key stability."""

import pytest

from neurips26.common import cache


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURIPS26_CACHE", str(tmp_path / "cache"))


def test_hit_miss_and_corruption(tmp_path):
    builds = []

    def build(folder):
        builds.append(1)
        (folder / "payload.txt").write_text("hello")

    first = cache.cached_dir("unit", {"seed": 1}, build)
    again = cache.cached_dir("unit", {"seed": 1}, build)
    assert first == again and len(builds) == 1
    cache.cached_dir("unit", {"seed": 2}, build)
    assert len(builds) == 2
    (first / "payload.txt").write_text("tampered")
    assert not cache.entry_is_valid(first)
    rebuilt = cache.cached_dir("unit", {"seed": 1}, build)
    assert len(builds) == 3 and (rebuilt / "payload.txt").read_text() == "hello"


def test_failed_build_leaves_nothing(tmp_path):
    def boom(folder):
        (folder / "half.txt").write_text("x")
        raise RuntimeError("fail")

    with pytest.raises(RuntimeError):
        cache.cached_dir("unit", {"seed": 3}, boom)
    assert not any((cache.cache_root() / "unit").glob("*/half.txt"))
    assert not list((cache.cache_root() / "unit").glob(".build-*"))


def test_cached_object_round_trip():
    import torch

    value = cache.cached_object("obj", {"n": 3}, lambda: {"w": torch.arange(3)})
    again = cache.cached_object("obj", {"n": 3}, lambda: pytest.fail("must not rebuild"))
    assert torch.equal(value["w"], again["w"])  # same kernel: loaded from the cache, integer values


def test_key_depends_on_config_and_code_version():
    assert cache.cache_key({"a": 1}) == cache.cache_key({"a": 1})
    assert cache.cache_key({"a": 1}) != cache.cache_key({"a": 2})
    assert cache.cache_key({"a": 1}, "v1") != cache.cache_key({"a": 1}, "v2")
    with pytest.raises(TypeError, match="config"):
        cache.cache_key([1, 2])
    with pytest.raises(ValueError, match="namespace"):
        cache.cached_dir("a/b", {}, lambda f: None)


def test_atomic_write_text(tmp_path):
    target = tmp_path / "sub" / "x.json"
    cache.atomic_write_text(target, "{}")
    assert target.read_text() == "{}"
    assert [p.name for p in target.parent.iterdir()] == ["x.json"]

"""InlineCppOp: the build-once loader of the KV-code C++ operators."""

from __future__ import annotations

import pytest

from neurips26.inference.quant.cpp_op import InlineCppOp


@pytest.mark.parametrize("arg", ["name", "source", "namespace", "probe"])
def test_empty_arguments_are_rejected_by_name(arg):
    kwargs = dict(name="n", source="s", namespace="ns", probe="p", label="l")
    kwargs[arg] = ""
    with pytest.raises(ValueError, match=arg):
        InlineCppOp(**kwargs)


def test_env_switch_disables_without_building(monkeypatch):
    op = InlineCppOp("neurips26_test_never_built", "not c++", "neurips26_test_none", "f", "test op")
    monkeypatch.setenv("NEURIPS26_KV_KERNEL", "0")
    assert op.load() is False
    assert op.tried is False  # nothing was attempted, so enabling it later still tries


def test_failed_build_warns_once_and_is_not_retried(monkeypatch, tmp_path):
    monkeypatch.setenv("NEURIPS26_KV_KERNEL", "1")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    calls = []
    import torch.utils.cpp_extension as ext

    def failing_load_inline(**kwargs):
        calls.append(kwargs["name"])
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(ext, "load_inline", failing_load_inline)
    op = InlineCppOp("neurips26_test_broken", "int x = ;", "neurips26_test_broken_ns", "f", "test op")
    with pytest.warns(RuntimeWarning, match="test op unavailable"):
        assert op.load() is False
    assert op.load() is False  # no second attempt, no second warning
    assert calls == ["neurips26_test_broken"]
    assert "no compiler here" in op.error


def test_registered_namespace_is_not_rebuilt(monkeypatch):
    import torch.utils.cpp_extension as ext

    from neurips26.inference.quant import kernels

    if not kernels.available():
        pytest.skip("the KV-code operator does not build on this machine (no compiler)")
    monkeypatch.setenv("NEURIPS26_KV_KERNEL", "1")
    monkeypatch.setattr(ext, "load_inline", lambda **kw: pytest.fail("rebuilt a registered operator"))
    op = InlineCppOp("other_name", "unused", "neurips26_kv", "key_scores", "probe op")
    assert op.load() is True

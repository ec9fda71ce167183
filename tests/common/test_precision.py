"""Working precision chosen by the CPU, and Muon at a chosen Newton-Schulz precision."""

import pytest
import torch

from neurips26.common import precision
from neurips26.common.precision import MuonAtPrecision, matmul_dtype, newton_schulz, precision_info


def test_matmul_dtype_follows_cpu_capability(monkeypatch):
    monkeypatch.delenv(precision.ENV_VAR, raising=False)
    monkeypatch.setattr(precision, "cpu_bf16_matmul", lambda: True)
    assert matmul_dtype() == torch.bfloat16
    monkeypatch.setattr(precision, "cpu_bf16_matmul", lambda: False)
    assert matmul_dtype() == torch.float32  # AVX2-only: bf16 matmul is emulated and ~17x slower
    assert matmul_dtype(torch.bfloat16) == torch.bfloat16  # an explicit default wins over the probe


def test_env_override_and_bad_values(monkeypatch):
    monkeypatch.setenv(precision.ENV_VAR, "fp32")
    assert matmul_dtype(torch.bfloat16) == torch.float32
    assert precision_info()["override"] == "fp32" and precision_info()["matmul_dtype"] == "float32"
    monkeypatch.setenv(precision.ENV_VAR, "int8")
    with pytest.raises(ValueError, match="NEURIPS26_MATMUL_DTYPE must be one of"):
        matmul_dtype()
    monkeypatch.delenv(precision.ENV_VAR)
    with pytest.raises(ValueError, match="default must be"):
        matmul_dtype(torch.float16)


def test_newton_schulz_in_bf16_is_torchs_own_bit_for_bit():
    from torch.optim._muon import _zeropower_via_newtonschulz

    g = torch.Generator().manual_seed(0)
    for shape in ((7, 13), (13, 7), (16, 16)):
        x = torch.randn(*shape, generator=g)
        coeffs = (3.4445, -4.775, 2.0315)
        ours = newton_schulz(x, coeffs, 5, 1e-7, torch.bfloat16)
        assert torch.equal(ours, _zeropower_via_newtonschulz(x, coeffs, 5, 1e-7))  # same kernel
        fp32 = newton_schulz(x, coeffs, 5, 1e-7, torch.float32)
        assert fp32.dtype == torch.float32 and (fp32 - ours.float()).abs().max() < 0.05


def _train(opt_cls, steps=4, **kw):
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(6, 5))
    opt = opt_cls([w], lr=0.02, **kw)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        opt.zero_grad()
        (w @ torch.randn(5, 3, generator=g)).pow(2).sum().backward()
        opt.step()
    return w.detach().clone(), opt


def test_muon_at_bf16_equals_torch_muon_and_fp32_differs():
    ref, _ = _train(torch.optim.Muon)
    same, opt = _train(MuonAtPrecision, matmul_dtype=torch.bfloat16)
    assert torch.equal(ref, same) and opt.matmul_dtype == torch.bfloat16  # same kernel: same ops, same order
    fp32, _ = _train(MuonAtPrecision, matmul_dtype=torch.float32)
    assert not torch.equal(ref, fp32) and (ref - fp32).abs().max() < 0.05  # same kernel: n/a, asserts a difference
    import torch.optim._muon as m

    assert m._zeropower_via_newtonschulz.__name__ == "_zeropower_via_newtonschulz"  # restored after step

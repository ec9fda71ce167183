"""Argument checks name the argument and the accepted range."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from neurips26.common import checks
from neurips26.common.optional import require
from neurips26.common.seeding import seed_everything


def test_check_int():
    assert checks.check_int("n", 3, low=0) == 3
    with pytest.raises(TypeError, match="n must be an int"):
        checks.check_int("n", 3.0)
    with pytest.raises(TypeError, match="n must be an int"):
        checks.check_int("n", True)
    with pytest.raises(ValueError, match=r"n must lie in \[0, 5\], got 7"):
        checks.check_int("n", 7, 0, 5)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_check_float_accepts_in_range_and_rejects_outside(x):
    if 0.0 <= x <= 1.0:
        assert checks.check_probability("p", x) == x
    else:
        with pytest.raises(ValueError, match="p must lie in"):
            checks.check_probability("p", x)


def test_check_float_open_bounds_nan_and_type():
    with pytest.raises(ValueError, match=r"lr must lie in \(0.0, inf\]"):
        checks.check_float("lr", 0.0, low=0.0, low_open=True)
    with pytest.raises(ValueError, match="NaN"):
        checks.check_float("lr", float("nan"))
    with pytest.raises(TypeError, match="real number"):
        checks.check_float("lr", "0.1")


def test_choice_shape_same_shape_finite():
    assert checks.check_choice("mode", "a", ["a", "b"]) == "a"
    with pytest.raises(ValueError, match=r"mode must be one of \['a', 'b'\]"):
        checks.check_choice("mode", "c", ["a", "b"])
    checks.check_shape("x", torch.zeros(2, 3), (2, None))
    with pytest.raises(ValueError, match=r"x must have shape \(2, \*, 4\)"):
        checks.check_shape("x", torch.zeros(2, 3), (2, None, 4))
    with pytest.raises(TypeError, match="tensor"):
        checks.check_shape("x", [1, 2], (2,))
    with pytest.raises(ValueError, match="a=\\(2,\\), b=\\(3,\\)"):
        checks.check_same_shape(a=torch.zeros(2), b=torch.zeros(3))
    with pytest.raises(ValueError, match="NaN or inf"):
        checks.check_finite("x", torch.tensor([1.0, float("inf")]))


def test_seed_everything_is_deterministic():
    g = seed_everything(5)
    a = torch.rand(3), torch.rand(2, generator=g)
    g = seed_everything(5)
    b = torch.rand(3), torch.rand(2, generator=g)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])  # same kernel: rerun, same shapes and seed
    with pytest.raises(ValueError, match="seed"):
        seed_everything(-1)


def test_require_names_the_extra():
    assert require("json", "core").dumps([]) == "[]"
    with pytest.raises(ImportError, match=r"neurips26\[graph\]"):
        require("no_such_module_xyz", "graph")


def test_torch_threads_scopes_and_restores():
    from neurips26.common.threads import torch_threads

    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with torch_threads(None):
        torch.set_num_threads(1)
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads"):
        with torch_threads(0):
            pass


def test_check_tensor_names_the_argument_for_each_defect():
    import pytest
    import torch

    from neurips26.common.checks import check_tensor

    x = torch.ones(2, 3)
    assert check_tensor("x", x) is x
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        check_tensor("x", [1.0])
    with pytest.raises(ValueError, match="x is a meta tensor"):
        check_tensor("x", torch.ones(2, device="meta"))
    with pytest.raises(TypeError, match="x must be a floating-point tensor, got torch.int64"):
        check_tensor("x", torch.ones(2, dtype=torch.long))
    assert check_tensor("x", torch.ones(2, dtype=torch.long), floating=False).dtype == torch.long
    with pytest.raises(ValueError, match="x contains NaN or inf"):
        check_tensor("x", torch.tensor([1.0, float("inf")]))
    assert check_tensor("x", torch.tensor([float("nan")]), finite=False).isnan().all()
    layer = torch.nn.Linear(3, 3).double()
    with pytest.raises(TypeError, match="x is torch.float32 on cpu but the connector's parameters are torch.float64"):
        check_tensor("x", x, like=layer, like_name="connector")
    assert check_tensor("x", x.double(), like=layer) is not None

"""The tolerance a configuration's output is judged by against the recorded configuration's (issue 35):
``2 ε(dtype) + 2 ε(fp32) √K``, exact for integers (kbuild/bench/tolerance.py's docstring)."""

from __future__ import annotations

import math

import pytest

from kbuild.bench.tolerance import config_tolerance, element_type, reduction_length


@pytest.mark.parametrize(("dtype", "k", "want"), [
    ("bf16", 4096, 2 * 2**-7 + 2 * 2**-23 * 64),
    ("torch.bfloat16", 1, 2 * 2**-7 + 2 * 2**-23),
    ("fp16", 4096, 2 * 2**-10 + 2 * 2**-23 * 64),
    ("torch.float32", 4096, 2 * 2**-23 + 2 * 2**-23 * 64),
    ("fp32", 1, 4 * 2**-23),
    ("float64", 100, 2 * 2**-52 + 2 * 2**-52 * 10),
])
def test_the_formula_is_the_documented_one(dtype: str, k: int, want: float) -> None:
    assert config_tolerance(dtype, k) == pytest.approx(want, rel=1e-12)


def test_the_documented_worked_values() -> None:
    assert round(config_tolerance("bf16", 4096), 4) == 0.0156
    assert round(config_tolerance("fp16", 4096), 5) == 0.00197
    assert f"{config_tolerance('fp32', 4096):.3g}" == "1.55e-05"
    assert f"{config_tolerance('fp32', 1):.2g}" == "4.8e-07"


@pytest.mark.parametrize("dtype", ["torch.int64", "torch.int32", "i32", "torch.bool", "u1", "torch.uint8"])
def test_integer_and_bool_outputs_are_exact(dtype: str) -> None:
    assert config_tolerance(dtype, 4096) == 0.0


def test_it_grows_with_the_reduction_as_its_square_root_and_narrower_types_get_more() -> None:
    a, b = config_tolerance("fp32", 100), config_tolerance("fp32", 10_000)
    assert (b - 2 * 2**-23) / (a - 2 * 2**-23) == pytest.approx(math.sqrt(100))
    assert config_tolerance("bf16", 512) > config_tolerance("fp16", 512) > config_tolerance("fp32", 512)


def test_unknown_dtypes_and_empty_reductions_are_errors() -> None:
    with pytest.raises(ValueError, match=r"no tolerance is known for dtype 'torch\.complex64'"):
        config_tolerance("torch.complex64", 4)
    with pytest.raises(ValueError, match="at least 1"):
        config_tolerance("fp32", 0)
    assert element_type("torch.float8_e4m3fn") == "fp8e4nv"


def test_the_reduction_length_is_the_largest_dimension_of_any_tensor() -> None:
    assert reduction_length([[8192, 4096], [4096]]) == 8192
    assert reduction_length([]) == 1
    assert reduction_length([[0, 0]]) == 1

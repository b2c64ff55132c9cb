"""Bench specs: every suite spec loads and makes valid inputs on CPU; bad specs get clear errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kbuild.bench.kernels import SUITE
from kbuild.bench.spec import BenchSpecError, load_spec, validate_inputs
from kbuild.errors import UsageError

HERE = str(Path(__file__).parent)


@pytest.mark.parametrize("name", list(SUITE))
def test_suite_specs_make_valid_inputs_on_cpu(name: str) -> None:
    spec = load_spec(SUITE[name], small=True)
    assert spec.name == name and spec.ref == SUITE[name]
    inputs = spec.make_inputs(0, "cpu")
    validate_inputs(spec, inputs)  # includes the reference's output shapes
    again = spec.make_inputs(0, "cpu")
    other = spec.make_inputs(1, "cpu")
    first_ptr = next(n for n, t in spec.signature.items() if t.startswith("*") and n not in spec.outputs)
    assert inputs[first_ptr].equal(again[first_ptr]), "inputs must be seeded"
    assert not inputs[first_ptr].equal(other[first_ptr]), "fresh seeds must give fresh inputs"
    for cfg in spec.configs:
        grid = spec.grid(spec.all_constexprs(cfg))
        assert len(grid) == 3 and all(isinstance(g, int) and g >= 1 for g in grid)
        args = spec.launch_args(inputs, cfg)
        assert len(args) == len(spec.arg_names())
    assert spec.flops >= 0 and spec.bytes_moved > 0


def test_full_size_specs_describe_the_issue_sizes() -> None:
    assert load_spec(SUITE["matmul_leakyrelu_4096"]).flops == 2 * 4096**3
    assert load_spec(SUITE["matmul_leakyrelu_512x512x2048"]).flops == 2 * 512 * 512 * 2048
    assert load_spec(SUITE["tma_matmul_4096"]).archs == (90,)
    for name in ("flash_attn_d64", "flash_attn_d128_causal"):
        spec = load_spec(SUITE[name])
        assert "seq 4096" in spec.description


@pytest.mark.parametrize(("attr", "message"), [
    ("no_outputs", "names no outputs"),
    ("output_not_a_pointer", "output 'n_cols' is not a pointer"),
    ("missing_param", "not covered ['n_cols']"),
    ("bad_type", "signature['n_cols']: 'int32' is not a Triton type"),
    ("empty_space", "configuration space is empty"),
    ("raises", "calling raises() raised RuntimeError: boom"),
    ("not_a_spec", "returned int, not a BenchSpec"),
    ("NOT_CALLABLE", "neither a BenchSpec nor a callable"),
    ("nope", "has no attribute 'nope'"),
])
def test_bad_specs_are_usage_errors_naming_the_spec(attr: str, message: str) -> None:
    with pytest.raises(BenchSpecError) as info:
        load_spec(f"bad_specs:{attr}", python_path=[HERE])
    assert isinstance(info.value, UsageError) and info.value.exit_code == 2
    assert f"bench spec bad_specs:{attr}: " in str(info.value)
    assert message in str(info.value)


def test_spec_that_fails_to_import() -> None:
    with pytest.raises(BenchSpecError, match=re.escape("bench spec fails_to_import:spec: importing 'fails_to_import' "
                                                       "raised ModuleNotFoundError: No module named "
                                                       "'kbuild_no_such_module' (")):
        load_spec("fails_to_import:spec", python_path=[HERE])
    with pytest.raises(BenchSpecError, match=re.escape("expected 'package.module:callable'")):
        load_spec("no_colon")


@pytest.mark.parametrize(("attr", "message"), [
    ("mismatched_shapes", "output 'y_ptr' has shape (16, 256) but the reference gives (16, 512)"),
    ("zeros", "input 'x_ptr' is all zeros"),
    ("wrong_dtype", "input 'x_ptr' has dtype torch.float32, signature says *fp16:16"),
    ("extra_input", "unexpected ['bogus']"),
])
def test_bad_inputs_are_usage_errors(attr: str, message: str) -> None:
    spec = load_spec(f"bad_specs:{attr}", python_path=[HERE])
    with pytest.raises(BenchSpecError) as info:
        validate_inputs(spec, spec.make_inputs(0, "cpu"))
    assert message in str(info.value) and f"bad_specs:{attr}" in str(info.value)


def test_good_user_spec_loads_from_project_path() -> None:
    spec = load_spec("bad_specs:good", python_path=[HERE])
    validate_inputs(spec, spec.make_inputs(3, "cpu"))

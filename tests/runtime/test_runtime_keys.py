"""Key agreement: the key kbuild.runtime computes from Triton's JIT specialisation of a call equals the
baseline key the build computes from the declaration, for the suite kernels and the JIT example."""

from __future__ import annotations

from typing import Any

import pytest

from kbuild.bench.kernels import SUITE
from kbuild.build.resolve import resolve, select_targets
from kbuild.runtime.keys import specialization_for_call
from kbuild.settings.sources import settings_from_table
from kbuild.toolchain import ptxas_version


class FakePtr:
    """A pointer argument: what Triton's specialiser reads from a tensor (``data_ptr()`` and ``dtype``)."""

    def __init__(self, address: int, dtype: Any) -> None:
        self.address = address
        self.dtype = dtype

    def data_ptr(self) -> int:
        return self.address


def build_key(kernel: dict[str, Any], target: str) -> Any:
    settings = settings_from_table({"targets": [target], "kernels": [kernel]})
    (build,) = resolve(settings, settings.kernels, select_targets(settings, None))
    return build


@pytest.mark.parametrize("name", sorted(SUITE))
@pytest.mark.parametrize("cc", [90, 80])
def test_suite_kernel_keys_agree(name: str, cc: int) -> None:
    from kbuild.bench.spec import load_spec

    spec = load_spec(SUITE[name], small=True)
    if cc not in spec.archs:
        pytest.skip(f"{name} does not support sm_{cc}")
    cfg = spec.configs[0]
    consts = spec.all_constexprs(cfg)
    fn = spec.fn
    build = build_key({"name": name, "source": f"{fn.fn.__module__}:{fn.fn.__name__}", "signature": dict(spec.signature),
                       "constexprs": dict(consts), "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}, f"sm_{cc}")
    inputs = spec.make_inputs(0, "cpu")
    # Launch arguments exactly as a user would pass them: runtime values positionally, constexprs by keyword.
    args = [inputs[n] for n in fn.arg_names if n not in consts]
    call = specialization_for_call(fn, *args, cc=cc, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **consts)
    assert call.unsupported is None
    key = call.key(ptxas_version=ptxas_version(), declared=build.spec.signature)
    assert key.components == build.baseline_key.components
    assert key.hex == build.baseline_key.hex


def _matmul_args(torch: Any, m: int = 256, n: int = 128, k: int = 64) -> tuple[list[Any], dict[str, Any]]:
    a = torch.empty((m, k), dtype=torch.float16)
    b = torch.empty((k, n), dtype=torch.float16)
    c = torch.empty((m, n), dtype=torch.float16)
    args = [a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)]
    return args, {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "SLOPE": 0.01, "num_warps": 8,
                  "num_stages": 3}


@pytest.mark.parametrize("target", ["sm_90", "sm_80"])
def test_example_keys_agree_including_specialisation_to_one(jit_settings: Any, target: str) -> None:
    import torch

    builds = {b.spec.name: b for b in resolve(jit_settings, jit_settings.kernels, select_targets(jit_settings, [target]))}
    cc = builds["softmax"].target.cc
    mm = builds["matmul_leaky_relu"]
    args, kwargs = _matmul_args(torch)
    call = specialization_for_call(mm.fn, *args, cc=cc, **kwargs)
    assert set(call.ones) == {"stride_ak", "stride_bn", "stride_cn"}  # unit strides: Triton's constant 1
    assert call.key(ptxas_version=ptxas_version(), declared=mm.spec.signature).hex == mm.baseline_key.hex

    sm = builds["softmax"]
    x = torch.empty((64, 1024), dtype=torch.float16)
    call = specialization_for_call(sm.fn, x, x, 1024, 1024, 1024, BLOCK=1024, num_warps=4, num_stages=3, cc=cc)
    assert call.key(ptxas_version=ptxas_version(), declared=sm.spec.signature).hex == sm.baseline_key.hex


def test_specialisation_mapping(jit_settings: Any) -> None:
    import torch

    (sm,) = resolve(jit_settings, [jit_settings.kernel("softmax")], select_targets(jit_settings, ["sm_90"]))
    aligned, unaligned = FakePtr(4096, torch.float16), FakePtr(4098, torch.float16)
    call = specialization_for_call(sm.fn, aligned, unaligned, 1024, 2**31, 17, BLOCK=1024, cc=90)
    assert call.signature == {"out_ptr": "*fp16:16", "in_ptr": "*fp16", "in_row_stride": "i32:16",
                              "out_row_stride": "i64:16", "n_cols": "i32"}
    assert call.constexprs == {"BLOCK": 1024}
    assert call.options["num_warps"] == 4 and call.options["arch"] == "sm90"
    assert call.function == "kbx_jit.kernels:softmax" and call.name == "softmax"
    assert call.source_hash == str(sm.fn.cache_key)
    # Each of these would compile to different code than the declaration: the key must differ.
    assert call.key(ptxas_version=ptxas_version()).hex != sm.baseline_key.hex


def test_type_of_the_constant_one_comes_from_the_declaration(jit_settings: Any) -> None:
    import torch

    (mm,) = resolve(jit_settings, [jit_settings.kernel("matmul_leaky_relu")], select_targets(jit_settings, ["sm_90"]))
    args, kwargs = _matmul_args(torch)
    call = specialization_for_call(mm.fn, *args, cc=90, **kwargs)
    declared64 = {**mm.spec.signature, "stride_ak": "i64:1"}
    assert call.declaration(declared64)["stride_ak"] == "i64:1"
    assert call.declaration({})["stride_ak"] == "i32:1"
    # A declaration without ":1" for a parameter the call made constant never matches.
    plain = {**mm.spec.signature, "stride_ak": "i32"}
    assert call.declaration(plain)["stride_ak"] == "i32:1"
    # A stride that is not 1 is a runtime integer, which the ":1" declaration does not describe.
    a = torch.empty((64, 256), dtype=torch.float16)[:, ::2]
    args2 = [a, *args[1:6], a.stride(0), a.stride(1), *args[8:]]
    call2 = specialization_for_call(mm.fn, *args2, cc=90, **kwargs)
    assert "stride_ak" not in call2.ones and call2.signature["stride_ak"] == "i32"
    assert call2.key(ptxas_version=ptxas_version(), declared=mm.spec.signature).hex != mm.baseline_key.hex


def test_undeclarable_calls_are_unsupported(jit_settings: Any) -> None:
    import torch
    import triton.language as tl

    (sm,) = resolve(jit_settings, [jit_settings.kernel("softmax")], select_targets(jit_settings, ["sm_90"]))
    x = torch.empty((64, 1024), dtype=torch.float16)
    # Issue 16: an argument passed None and a dtype constexpr are declarable ("none", { dtype = "fp16" }), so
    # they map onto the declaration notation; they are not this declaration, so the key differs.
    none_arg = specialization_for_call(sm.fn, x, None, 1024, 1024, 1024, BLOCK=1024, cc=90)
    assert none_arg.unsupported is None and none_arg.signature["in_ptr"] == "none"
    assert none_arg.key(ptxas_version=ptxas_version(), declared=sm.spec.signature).hex != sm.baseline_key.hex
    dtype_const = specialization_for_call(sm.fn, x, x, 1024, 1024, 1024, BLOCK=tl.float16, cc=90)
    assert dtype_const.unsupported is None and dtype_const.constexprs["BLOCK"] == {"dtype": "fp16"}
    assert dtype_const.key(ptxas_version=ptxas_version(), declared=sm.spec.signature).hex != sm.baseline_key.hex

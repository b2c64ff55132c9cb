"""Bench specs of the two kernels (``bench = "kbx_jit.bench:<kernel>"`` in pyproject.toml).

The tuner uses them on a GPU to make inputs, launch candidate schedules and check them bit for bit
against the baseline. Each spec mirrors the kernel's ``[tool.kbuild]`` declaration exactly
(parameters declared ``:1`` are constexprs equal to 1 here, as Triton's JIT specialises them), so
the spec compiles to the very cubin the build ships (tests/runtime checks this on the CPU).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kbuild.bench.spec import BenchSpec, Config, Constexpr
from kbx_jit import kernels


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def matmul_leaky_relu(small: bool = False) -> BenchSpec:
    """leaky_relu(A @ B), fp16, 4096³ (256×256×128 when ``small``), as ``kbx_jit.matmul_leaky_relu`` calls it."""
    m, n, k = (256, 256, 128) if small else (4096, 4096, 4096)

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        import torch

        g = torch.Generator(device=device).manual_seed(seed)
        a = torch.randn((m, k), generator=g, device=device).to(dtype=torch.float16)
        b = torch.randn((k, n), generator=g, device=device).to(dtype=torch.float16)
        c = torch.empty((m, n), device=device, dtype=torch.float16)
        return {"a_ptr": a, "b_ptr": b, "c_ptr": c, "M": m, "N": n, "K": k,
                "stride_am": k, "stride_bk": n, "stride_cm": n}

    def grid(c: Mapping[str, Constexpr]) -> tuple[int, int, int]:
        return (_cdiv(m, int(c["BLOCK_M"])) * _cdiv(n, int(c["BLOCK_N"])), 1, 1)

    def reference(x: dict[str, Any]) -> dict[str, Any]:
        import torch

        return {"c_ptr": torch.nn.functional.leaky_relu(x["a_ptr"].float() @ x["b_ptr"].float(), 0.01)}

    return BenchSpec(
        name="kbx_jit.matmul_leaky_relu", fn=kernels.matmul_leaky_relu,
        signature={"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "c_ptr": "*fp16:16", "M": "i32:16", "N": "i32:16",
                   "K": "i32:16", "stride_am": "i32:16", "stride_bk": "i32:16", "stride_cm": "i32:16"},
        constexprs={"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "SLOPE": 0.01,
                    "stride_ak": 1, "stride_bn": 1, "stride_cn": 1},
        configs=[Config({}, num_warps=8, num_stages=3)],
        make_inputs=make_inputs, grid=grid, outputs={"c_ptr": None},
        flops=2.0 * m * n * k, bytes_moved=2.0 * (m * k + k * n + m * n), reference=reference,
        description=f"matmul + leaky relu, {m}x{n}x{k} fp16")


def softmax(small: bool = False) -> BenchSpec:
    """Row softmax of an fp16 matrix with 1024 columns, as ``kbx_jit.softmax`` calls it."""
    rows, cols = (64, 1024) if small else (131072, 1024)

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        import torch

        g = torch.Generator(device=device).manual_seed(seed)
        x = (torch.randn((rows, cols), generator=g, device=device) * 3.0).to(dtype=torch.float16)
        out = torch.empty((rows, cols), device=device, dtype=torch.float16)
        return {"out_ptr": out, "in_ptr": x, "in_row_stride": cols, "out_row_stride": cols, "n_cols": cols}

    def grid(c: Mapping[str, Constexpr]) -> tuple[int, int, int]:
        return (rows, 1, 1)

    def reference(x: dict[str, Any]) -> dict[str, Any]:
        import torch

        return {"out_ptr": torch.softmax(x["in_ptr"].float(), dim=-1)}

    return BenchSpec(
        name="kbx_jit.softmax", fn=kernels.softmax,
        signature={"out_ptr": "*fp16:16", "in_ptr": "*fp16:16", "in_row_stride": "i32:16",
                   "out_row_stride": "i32:16", "n_cols": "i32:16"},
        constexprs={"BLOCK": 1024}, configs=[Config({}, num_warps=4, num_stages=3)],
        make_inputs=make_inputs, grid=grid, outputs={"out_ptr": None},
        flops=5.0 * rows * cols, bytes_moved=2.0 * 2 * rows * cols, reference=reference,
        description=f"softmax, {rows}x{cols} fp16")

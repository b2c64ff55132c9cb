"""Bench specs of the three kernels (``bench = "kbx_demo.bench:<kernel>"`` in pyproject.toml).

The tuner uses them on a GPU to make inputs, launch candidate schedules, and check them bit for
bit against the baseline. Each spec mirrors the kernel's ``[tool.kbuild]`` declaration exactly
(parameters declared ``:1`` are constexprs equal to 1 here), so the spec compiles to the very
cubin the build ships (tests/hooks check this on the CPU).

The matmul declares a configuration space (``space`` in pyproject.toml; the build's tuner takes the
points from there, not from this spec): its spec's first config is the declared default, and its
grid is the declaration's grid expression, ``cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)``, computed from
whichever configuration is launched (tests/hooks/test_example_space.py checks both).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kbuild.bench.spec import BenchSpec, Config, Constexpr
from kbx_demo import kernels


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def matmul_leaky_relu(small: bool = False) -> BenchSpec:
    """leaky_relu(A @ B), fp16, 4096³ (256×256×128 when ``small``)."""
    m, n, k = (256, 256, 128) if small else (4096, 4096, 4096)
    # the declared default configuration (pyproject.toml); the tiles vary over the space, the rest is fixed
    default = Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=8, num_stages=3)

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        import torch

        g = torch.Generator(device=device).manual_seed(seed)
        a = torch.randn((m, k), generator=g, device=device).to(device=device, dtype=torch.float16)
        b = torch.randn((k, n), generator=g, device=device).to(device=device, dtype=torch.float16)
        c = torch.empty((m, n), device=device, dtype=torch.float16)
        return {"a_ptr": a, "b_ptr": b, "c_ptr": c, "M": m, "N": n, "K": k,
                "stride_am": k, "stride_bk": n, "stride_cm": n}

    def grid(c: Mapping[str, Constexpr]) -> tuple[int, int, int]:
        return (_cdiv(m, int(c["BLOCK_M"])) * _cdiv(n, int(c["BLOCK_N"])), 1, 1)

    def reference(x: dict[str, Any]) -> dict[str, Any]:
        import torch

        return {"c_ptr": torch.nn.functional.leaky_relu(x["a_ptr"].float() @ x["b_ptr"].float(), 0.01)}

    return BenchSpec(
        name="kbx_demo.matmul_leaky_relu", fn=kernels.matmul_leaky_relu,
        signature={"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "c_ptr": "*fp16:16", "M": "i32", "N": "i32:16",
                   "K": "i32:16", "stride_am": "i32:16", "stride_bk": "i32:16", "stride_cm": "i32:16"},
        constexprs={"GROUP_M": 8, "SLOPE": 0.01, "stride_ak": 1, "stride_bn": 1, "stride_cn": 1},
        configs=[default],
        make_inputs=make_inputs, grid=grid, outputs={"c_ptr": None},
        flops=2.0 * m * n * k, bytes_moved=2.0 * (m * k + k * n + m * n), reference=reference,
        description=f"matmul + leaky relu, {m}x{n}x{k} fp16")


def softmax(small: bool = False) -> BenchSpec:
    """Row softmax of an fp16 matrix with 1024 columns (every output element is written)."""
    rows, cols = (64, 1024) if small else (32768, 1024)

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        import torch

        g = torch.Generator(device=device).manual_seed(seed)
        x = torch.randn((rows, cols), generator=g, device=device).to(device=device, dtype=torch.float16)
        out = torch.empty((rows, cols), device=device, dtype=torch.float16)
        return {"out_ptr": out, "in_ptr": x, "in_row_stride": cols, "out_row_stride": cols, "n_cols": cols}

    def grid(c: Mapping[str, Constexpr]) -> tuple[int, int, int]:
        return (rows, 1, 1)

    def reference(x: dict[str, Any]) -> dict[str, Any]:
        import torch

        return {"out_ptr": torch.softmax(x["in_ptr"].float(), dim=-1)}

    return BenchSpec(
        name="kbx_demo.softmax", fn=kernels.softmax,
        signature={"out_ptr": "*fp16:16", "in_ptr": "*fp16:16", "in_row_stride": "i32:16",
                   "out_row_stride": "i32:16", "n_cols": "i32"},
        constexprs={"BLOCK": 1024}, configs=[Config({}, num_warps=4, num_stages=3)],
        make_inputs=make_inputs, grid=grid, outputs={"out_ptr": None},
        flops=5.0 * rows * cols, bytes_moved=2.0 * 2 * rows * cols, reference=reference,
        description=f"softmax, {rows}x{cols} fp16")


def layernorm(small: bool = False) -> BenchSpec:
    """LayerNorm forward over rows of an fp16 matrix with 768 columns."""
    rows, cols = (64, 768) if small else (32768, 768)

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        import torch

        g = torch.Generator(device=device).manual_seed(seed)

        def half(*shape: int) -> Any:
            return torch.randn(shape, generator=g, device=device).to(device=device, dtype=torch.float16)

        return {"x_ptr": half(rows, cols), "y_ptr": torch.empty((rows, cols), device=device, dtype=torch.float16),
                "w_ptr": half(cols), "b_ptr": half(cols),
                "mean_ptr": torch.empty(rows, device=device, dtype=torch.float32),
                "rstd_ptr": torch.empty(rows, device=device, dtype=torch.float32),
                "stride": cols, "N": cols, "eps": 1e-5}

    def grid(c: Mapping[str, Constexpr]) -> tuple[int, int, int]:
        return (rows, 1, 1)

    def reference(x: dict[str, Any]) -> dict[str, Any]:
        import torch

        v = x["x_ptr"].float()
        y = torch.nn.functional.layer_norm(v, (cols,), x["w_ptr"].float(), x["b_ptr"].float(), 1e-5)
        return {"y_ptr": y, "mean_ptr": v.mean(-1), "rstd_ptr": 1 / torch.sqrt(v.var(-1, unbiased=False) + 1e-5)}

    return BenchSpec(
        name="kbx_demo.layernorm", fn=kernels.layernorm,
        signature={"x_ptr": "*fp16:16", "y_ptr": "*fp16:16", "w_ptr": "*fp16:16", "b_ptr": "*fp16:16",
                   "mean_ptr": "*fp32:16", "rstd_ptr": "*fp32:16", "stride": "i32:16", "N": "i32", "eps": "fp32"},
        constexprs={"BLOCK": 1024}, configs=[Config({}, num_warps=4, num_stages=3)],
        make_inputs=make_inputs, grid=grid, outputs={"y_ptr": None, "mean_ptr": None, "rstd_ptr": None},
        flops=8.0 * rows * cols, bytes_moved=2.0 * 2 * rows * cols, reference=reference,
        description=f"layernorm, {rows}x{cols} fp16")

"""Bench specs of the example's CUDA C++ kernels (:class:`kbuild.bench.cuda.CudaBenchSpec`), for
``[[tool.kbuild.cuda.kernels]].bench = "kbx_cuda_bench:gelu"`` and benchmarks/gpu_cuda_tune.py (a top-level module
beside the package, which imports the built extension): inputs, launch dimensions as the host code
in src/*.cu computes them, outputs and a torch reference. Imports torch only inside the functions."""

from __future__ import annotations

from typing import Any

from kbuild.bench.cuda import CudaBenchSpec
from kbuild.bench.spec import Tolerance

THREADS = 256


def gelu(small: bool = False) -> CudaBenchSpec:
    """``gelu_f16_kernel(const __half* x, __half* y, long long n)``: two elements per thread, bit-exact."""
    n = (1 << 16) if small else (1 << 26)

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        import torch

        g = torch.Generator(device="cpu").manual_seed(seed)
        x = (torch.randn(n, generator=g) * 3).to(torch.float16).to(device)
        return {"x": x, "y": torch.empty_like(x), "n": n}

    def reference(inputs: dict[str, Any]) -> dict[str, Any]:
        import torch

        return {"y": torch.nn.functional.gelu(inputs["x"].float(), approximate="tanh")}

    return CudaBenchSpec(name="gelu_f16", signature={"x": "*fp16", "y": "*fp16", "n": "i64"},
                         make_inputs=make_inputs, grid=(((n + 1) // 2 + THREADS - 1) // THREADS, 1, 1),
                         block=(THREADS, 1, 1), outputs={"y": None}, flops=20.0 * n, bytes_moved=4.0 * n,
                         reference=reference)


def reduce_sum(small: bool = False) -> CudaBenchSpec:
    """``sum_f32_kernel<256>(const float* x, float* out, long long n)``: one atomicAdd per block into a zeroed
    ``out``, so the order of the blocks' additions varies: compared within a tolerance, not bitwise."""
    n = (1 << 16) if small else (1 << 26)
    blocks = max(1, min(1024, (n + THREADS - 1) // THREADS))

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        import torch

        g = torch.Generator(device="cpu").manual_seed(seed)
        return {"x": torch.rand(n, generator=g).to(device), "out": torch.zeros(1, device=device), "n": n}

    def reference(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"out": inputs["x"].double().sum().reshape(1)}

    return CudaBenchSpec(name="sum_f32", signature={"x": "*fp32", "out": "*fp32", "n": "i64"},
                         make_inputs=make_inputs, grid=(blocks, 1, 1), block=(THREADS, 1, 1),
                         outputs={"out": Tolerance(rtol=1e-5)}, accumulate=("out",), flops=float(n),
                         bytes_moved=4.0 * n, reference=reference, reference_tol=1e-4)


def matmul(small: bool = False) -> CudaBenchSpec:
    """``matmul_f16_kernel<64, 64, 32, 2, 2>(A, B, C, M, N, K)`` (tile 0): grid (N/64, M/64), 128 threads."""
    m = n = k = 256 if small else 4096

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        import torch

        g = torch.Generator(device="cpu").manual_seed(seed)
        a = torch.randn(m, k, generator=g).to(torch.float16).to(device)
        b = torch.randn(k, n, generator=g).to(torch.float16).to(device)
        return {"A": a, "B": b, "C": torch.empty(m, n, dtype=torch.float16, device=device), "M": m, "N": n, "K": k}

    def reference(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"C": inputs["A"].float() @ inputs["B"].float()}

    return CudaBenchSpec(name="matmul_f16_64x64", signature={"A": "*fp16", "B": "*fp16", "C": "*fp16", "M": "i32",
                                                             "N": "i32", "K": "i32"},
                         make_inputs=make_inputs, grid=(n // 64, m // 64, 1), block=(128, 1, 1), outputs={"C": None},
                         flops=2.0 * m * n * k, bytes_moved=2.0 * (m * k + k * n + m * n), reference=reference)

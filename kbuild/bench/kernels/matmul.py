"""fp16 matmul + LeakyReLU (C = leaky_relu(A @ B)), fp32 accumulation; and its batched form.

A is M×K, B is K×N, C is M×N, all row-major and contiguous. Programs are ordered in groups of
``GROUP_M`` rows of tiles so that neighbouring programs share B tiles in L2.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import triton
import triton.language as tl

from kbuild.bench.kernels.tiles import grouped_tile
from kbuild.bench.space import grid_space
from kbuild.bench.spec import BenchSpec, Config, Constexpr


@triton.jit
def matmul_leaky_relu(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr, ALPHA: tl.constexpr):
    pid = tl.program_id(0)
    pid_m, pid_n = grouped_tile(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)

    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k0, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k0, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * stride_bk
    acc = tl.where(acc >= 0, acc, acc * ALPHA)
    c = acc.to(tl.float16)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :]
    tl.store(c_ptrs, c, mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def batched_matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_ab, stride_bb, stride_cb,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """C[b] = A[b] @ B[b]; every matrix row-major contiguous (row strides K, N, N)."""
    pid = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)
    pid_m, pid_n = grouped_tile(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)

    a_ptr += batch * stride_ab
    b_ptr += batch * stride_bb
    c_ptr += batch * stride_cb
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * N + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k0, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k0, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + rows[:, None] * N + cols[None, :]
    tl.store(c_ptrs, acc.to(tl.float16), mask=(rows[:, None] < M) & (cols[None, :] < N))


ALPHA = 0.01

#: Configuration spaces: large square problems and small/skinny ones.
LARGE = [
    Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3),
    Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=4, num_stages=4),
    Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3),
    Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=4, num_stages=4),
]
SMALL = [
    Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=4, num_stages=4),
    Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=4, num_stages=4),
    Config({"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8}, num_warps=4, num_stages=3),
    Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=4, num_stages=4),
]

#: Level-1 spaces (issue 15): the neighbourhood of each autotune list. Tiles larger than a small problem are
#: correct (rows and columns wrap, stores are masked); points that run out of shared memory fail at launch.
LARGE_SPACE = grid_space({"BLOCK_M": [64, 128], "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64, 128], "GROUP_M": [8]},
                         num_warps=[4, 8], num_stages=[3, 4], maxnreg=[None, 232])  # 144 points
#: The 512×512×2048 problem has few tiles and a long K: deeper BLOCK_K and register caps pay there
#: (1.216× at BLOCK_K=128, maxnreg=232 on the H200 when issue 15 was filed).
SMALL_SPACE = grid_space({"BLOCK_M": [32, 64, 128], "BLOCK_N": [64, 128], "BLOCK_K": [64, 128, 256], "GROUP_M": [8]},
                         num_warps=[4, 8], num_stages=[3, 4], maxnreg=[None, 128, 168, 232])  # 288 points
BMM_SPACE = grid_space({"BLOCK_M": [64, 128], "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64], "GROUP_M": [8]},
                       num_warps=[4, 8], num_stages=[3, 4], maxnreg=[None, 232])  # 96 points


def _randn(shape: tuple[int, ...], gen: Any, device: Any, scale: float = 1.0) -> Any:
    import torch

    return (torch.randn(shape, generator=gen, dtype=torch.float32, device=device) * scale).to(dtype=torch.float16)


def _generator(seed: int, device: Any) -> Any:
    """Inputs are drawn on the device itself: a seeded CPU draw of a 4096² matrix costs about a second
    per input set, which dominated every GPU evaluation."""
    import torch

    return torch.Generator(device=device).manual_seed(seed)


def matmul_spec(m: int, n: int, k: int, *, name: str, configs: list[Config], space: list[Config] | None = None
                ) -> BenchSpec:
    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        import torch

        g = _generator(seed, device)
        return {"a_ptr": _randn((m, k), g, device), "b_ptr": _randn((k, n), g, device),
                "c_ptr": torch.empty((m, n), dtype=torch.float16, device=device),
                "M": m, "N": n, "K": k, "stride_am": k, "stride_bk": n, "stride_cm": n}

    def grid(c: Mapping[str, Constexpr]) -> tuple[int, int, int]:
        return (triton.cdiv(m, int(c["BLOCK_M"])) * triton.cdiv(n, int(c["BLOCK_N"])), 1, 1)

    def reference(x: dict[str, Any]) -> dict[str, Any]:
        import torch

        out = x["a_ptr"].float() @ x["b_ptr"].float()
        return {"c_ptr": torch.where(out >= 0, out, out * ALPHA)}

    return BenchSpec(
        name=name, fn=matmul_leaky_relu,
        signature={"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "c_ptr": "*fp16:16", "M": "i32:16", "N": "i32:16",
                   "K": "i32:16", "stride_am": "i32:16", "stride_bk": "i32:16", "stride_cm": "i32:16"},
        constexprs={"ALPHA": ALPHA}, configs=configs, space=space or [], make_inputs=make_inputs, grid=grid,
        outputs={"c_ptr": None}, flops=2.0 * m * n * k, bytes_moved=2.0 * (m * k + k * n + m * n),
        reference=reference, description=f"fp16 matmul + LeakyReLU, {m}x{n}x{k}")


def matmul_4096(small: bool = False) -> BenchSpec:
    """Matmul + LeakyReLU at 4096³ (256³ when ``small``)."""
    s = 256 if small else 4096
    return matmul_spec(s, s, s, name="matmul_leakyrelu_4096", configs=LARGE, space=LARGE_SPACE)


def matmul_512x512x2048(small: bool = False) -> BenchSpec:
    """Matmul + LeakyReLU at M=N=512, K=2048 (128×128×256 when ``small``)."""
    m, k = (128, 256) if small else (512, 2048)
    return matmul_spec(m, m, k, name="matmul_leakyrelu_512x512x2048", configs=SMALL, space=SMALL_SPACE)


def bmm(small: bool = False) -> BenchSpec:
    """Batched matmul: 64 products of 1024×1024×1024 (2 of 128³ when ``small``)."""
    b, s = (2, 128) if small else (64, 1024)

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        import torch

        g = _generator(seed, device)
        return {"a_ptr": _randn((b, s, s), g, device), "b_ptr": _randn((b, s, s), g, device),
                "c_ptr": torch.empty((b, s, s), dtype=torch.float16, device=device),
                "M": s, "N": s, "K": s, "stride_ab": s * s, "stride_bb": s * s, "stride_cb": s * s}

    def grid(c: Mapping[str, Constexpr]) -> tuple[int, int, int]:
        return (triton.cdiv(s, int(c["BLOCK_M"])) * triton.cdiv(s, int(c["BLOCK_N"])), b, 1)

    def reference(x: dict[str, Any]) -> dict[str, Any]:
        return {"c_ptr": x["a_ptr"].float() @ x["b_ptr"].float()}

    return BenchSpec(
        name="bmm_64x1024", fn=batched_matmul,
        signature={"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "c_ptr": "*fp16:16", "M": "i32:16", "N": "i32:16",
                   "K": "i32:16", "stride_ab": "i32:16", "stride_bb": "i32:16", "stride_cb": "i32:16"},
        constexprs={}, configs=LARGE, space=BMM_SPACE, make_inputs=make_inputs, grid=grid, outputs={"c_ptr": None},
        flops=2.0 * b * s * s * s, bytes_moved=2.0 * 3 * b * s * s, reference=reference,
        description=f"fp16 batched matmul, {b}x({s}x{s}x{s})")

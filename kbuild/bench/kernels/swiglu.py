"""Fused RMSNorm + SwiGLU feed-forward (gate/up half): H = silu(n(X) @ Wg) * (n(X) @ Wu).

n(X) = X / rms(X) * w. The row scale is a scalar per row, so the kernel accumulates
(X * w) @ Wg and (X * w) @ Wu over K together with Σx², and applies 1/rms at the end: one pass
over X, Wg and Wu, no normalised copy of X in memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import triton
import triton.language as tl

from kbuild.bench.kernels.tiles import grouped_tile
from kbuild.bench.space import grid_space
from kbuild.bench.spec import BenchSpec, Config, Constexpr

EPS = 1e-6


@triton.jit
def rmsnorm_swiglu(x_ptr, nw_ptr, wg_ptr, wu_ptr, h_ptr, M, N, K,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr, EPS: tl.constexpr):
    pid = tl.program_id(0)
    pid_m, pid_n = grouped_tile(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)

    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None] * K + offs_k[None, :]
    g_ptrs = wg_ptr + offs_k[:, None] * N + offs_n[None, :]
    u_ptrs = wu_ptr + offs_k[:, None] * N + offs_n[None, :]
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    ss = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kmask = offs_k < K - k0
        x = tl.load(x_ptrs, mask=kmask[None, :], other=0.0)
        nw = tl.load(nw_ptr + k0 + offs_k, mask=kmask, other=0.0)
        xf = x.to(tl.float32)
        ss += tl.sum(xf * xf, axis=1)
        a = (xf * nw.to(tl.float32)[None, :]).to(tl.float16)
        wg = tl.load(g_ptrs, mask=kmask[:, None], other=0.0)
        wu = tl.load(u_ptrs, mask=kmask[:, None], other=0.0)
        acc_g = tl.dot(a, wg, acc_g)
        acc_u = tl.dot(a, wu, acc_u)
        x_ptrs += BLOCK_K
        g_ptrs += BLOCK_K * N
        u_ptrs += BLOCK_K * N
    rstd = 1.0 / tl.sqrt(ss / K + EPS)
    g = acc_g * rstd[:, None]
    u = acc_u * rstd[:, None]
    h = g * tl.sigmoid(g) * u
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(h_ptr + rows[:, None] * N + cols[None, :], h.to(tl.float16),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


CONFIGS = [
    Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3),
    Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=4, num_stages=4),
    Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=4, num_stages=3),
]

#: Level-1 space (issue 15). Two fp32 accumulators per tile: BLOCK_N=256 would need ~256 registers a thread for
#: the accumulators alone at 128×256, so the tiles stop at 128. N = 11008 = 86·128 (43·256).
SPACE = grid_space({"BLOCK_M": [64, 128], "BLOCK_N": [64, 128], "BLOCK_K": [32, 64, 128], "GROUP_M": [8]},
                   num_warps=[4, 8], num_stages=[2, 3, 4], maxnreg=[None, 232])  # 144 points


def rmsnorm_swiglu_spec(small: bool = False) -> BenchSpec:
    """Tokens M=2048, model dim K=4096, hidden N=11008 (64×128×256 when ``small``)."""
    m, n, k = (64, 128, 256) if small else (2048, 11008, 4096)

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        import torch

        g = torch.Generator(device=device).manual_seed(seed)

        def rnd(shape: tuple[int, ...], scale: float) -> Any:
            return (torch.randn(shape, generator=g, device=device) * scale).to(device=device, dtype=torch.float16)

        return {"x_ptr": rnd((m, k), 1.0), "nw_ptr": (torch.rand((k,), generator=g, device=device) + 0.5).to(device, torch.float16),
                "wg_ptr": rnd((k, n), k ** -0.5), "wu_ptr": rnd((k, n), k ** -0.5),
                "h_ptr": torch.empty((m, n), dtype=torch.float16, device=device), "M": m, "N": n, "K": k}

    def grid(c: Mapping[str, Constexpr]) -> tuple[int, int, int]:
        return (triton.cdiv(m, int(c["BLOCK_M"])) * triton.cdiv(n, int(c["BLOCK_N"])), 1, 1)

    def reference(x: dict[str, Any]) -> dict[str, Any]:
        import torch

        xf = x["x_ptr"].float()
        xn = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * x["nw_ptr"].float()
        g = xn @ x["wg_ptr"].float()
        return {"h_ptr": torch.nn.functional.silu(g) * (xn @ x["wu_ptr"].float())}

    return BenchSpec(
        name="rmsnorm_swiglu", fn=rmsnorm_swiglu,
        signature={"x_ptr": "*fp16:16", "nw_ptr": "*fp16:16", "wg_ptr": "*fp16:16", "wu_ptr": "*fp16:16",
                   "h_ptr": "*fp16:16", "M": "i32:16", "N": "i32:16", "K": "i32:16"},
        constexprs={"EPS": EPS}, configs=CONFIGS, space=SPACE, make_inputs=make_inputs, grid=grid, outputs={"h_ptr": None},
        flops=4.0 * m * n * k, bytes_moved=2.0 * (m * k + k + 2 * k * n + m * n), reference=reference,
        description=f"fused RMSNorm + SwiGLU (gate/up), M={m} K={k} N={n}")

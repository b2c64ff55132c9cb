"""A plain Triton int4 × fp16 GEMM with group-wise scales: dequantise, then ``tl.dot`` (the baseline of issue 20).

``Y = X · W`` with ``W = (q - 8) · s``: ``q`` int4 (0..15) in GPTQ's plain packing, eight consecutive rows of
``K`` per int32 word (``w[k // 8, n]`` holds ``q[k, n]`` in bits ``4 (k % 8)``), and one fp16 scale per
``GROUP`` rows of ``K`` (``s[k // GROUP, n]``). Each program loads its ``BLOCK_K × BLOCK_N`` words (every word
once per row it holds: the cache serves the repeats), shifts and masks, scales, and hands the fp16 tile to
``tl.dot``; Triton picks every layout. This is what the synthesised kernel (:mod:`kbuild.tile.kernels`
``int4_gemm``: weights packed so that they dequantise into the mma operand layout) is measured against, with
torch's dequantise + cuBLAS; it is not part of the tuning suite (:data:`kbuild.bench.kernels.SUITE`).

:func:`problem` makes the seeded inputs both share; :func:`reference` is their torch reference. Runs in
Triton's CPU interpreter (``TRITON_INTERPRET=1``) at small sizes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import triton
import triton.language as tl

from kbuild.bench.spec import BenchSpec, Config, Constexpr

#: the scale group (rows of K per scale)
GROUP = 128
#: the token counts and (N, K) shapes of issue 20: N = K = 4096 and Llama-3-8B's MLP (4096 → 14336, 14336 → 4096)
TOKENS = (1, 16, 64, 256, 4096)
SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336))


@triton.jit
def int4_matmul_kernel(x_ptr, w_ptr, s_ptr, y_ptr, M, N, K,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + offs_k
        a = tl.load(x_ptr + offs_m[:, None].to(tl.int64) * K + ks[None, :], mask=offs_m[:, None] < M, other=0.0)
        words = tl.load(w_ptr + (ks[:, None] // 8).to(tl.int64) * N + offs_n[None, :])
        q = (words >> ((ks[:, None] % 8) * 4)) & 0xF
        scale = tl.load(s_ptr + (k0 // GROUP) * N + offs_n)
        b = (q - 8).to(tl.float16) * scale[None, :]
        acc = tl.dot(a, b, acc)
    tl.store(y_ptr + offs_m[:, None].to(tl.int64) * N + offs_n[None, :], acc.to(tl.float16), mask=offs_m[:, None] < M)


CONFIGS = [
    Config({"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128}, num_warps=4, num_stages=4),
    Config({"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=4, num_stages=4),
    Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=4, num_stages=4),
    Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=8, num_stages=3),
    Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_warps=8, num_stages=3),
]


def problem(seed: int, device: Any, m: int, n: int, k: int, group: int = GROUP) -> dict[str, Any]:
    """Seeded activations ``x`` (M × K fp16), int4 values ``q`` (K × N, int32 0..15) and scales ``s``
    (K / group × N fp16, sized so that Y's entries are of order 1)."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn((m, k), generator=g, device=device).to(torch.float16)
    q = torch.randint(0, 16, (k, n), generator=g, device=device, dtype=torch.int32)
    s = ((torch.rand((k // group, n), generator=g, device=device) + 0.5) / (4.6 * k ** 0.5)).to(torch.float16)
    return {"x": x, "q": q, "s": s}


def dequantise(q: Any, s: Any, group: int = GROUP) -> Any:
    """``(q - 8) · s`` in fp16, one rounding per weight (what both kernels compute before the product)."""
    return (q - 8).to(s.dtype) * s.repeat_interleave(group, dim=0)


def reference(x: Any, q: Any, s: Any, group: int = GROUP) -> Any:
    """``Y = X · W`` in fp32 with W dequantised in fp16."""
    return x.float() @ dequantise(q, s, group).float()


def pack_plain(q: Any) -> Any:
    """GPTQ's plain packing: eight consecutive rows of K per int32 word (``[K / 8, N]``)."""
    import torch

    k, n = q.shape
    shifts = (torch.arange(8, device=q.device, dtype=torch.int64) * 4)[None, :, None]
    words = ((q.to(torch.int64).reshape(k // 8, 8, n) & 0xF) << shifts).sum(1)
    return (words - (words >= 2**31).to(torch.int64) * 2**32).to(torch.int32)


def unpack_plain(w: Any) -> Any:
    """The inverse of :func:`pack_plain` (values 0..15, int32)."""
    import torch

    shifts = (torch.arange(8, device=w.device, dtype=torch.int32) * 4)[None, :, None]
    return ((w[:, None, :] >> shifts) & 0xF).reshape(w.shape[0] * 8, w.shape[1])


def int4_matmul(small: bool = False, m: int = 16, n: int = 4096, k: int = 4096) -> BenchSpec:
    """The plain Triton int4 GEMM at M × N × K (16 × 128 × 256 when ``small``)."""
    if small:
        m, n, k = 16, 128, 256

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        import torch

        p = problem(seed, device, m, n, k)
        return {"x_ptr": p["x"], "w_ptr": pack_plain(p["q"]), "s_ptr": p["s"],
                "y_ptr": torch.empty((m, n), dtype=torch.float16, device=device), "M": m, "N": n, "K": k}

    def grid(c: Mapping[str, Constexpr]) -> tuple[int, int, int]:
        return (triton.cdiv(m, int(c["BLOCK_M"])), triton.cdiv(n, int(c["BLOCK_N"])), 1)

    def ref(x: dict[str, Any]) -> dict[str, Any]:
        return {"y_ptr": reference(x["x_ptr"], unpack_plain(x["w_ptr"]), x["s_ptr"])}

    return BenchSpec(
        name=f"int4_matmul_{m}x{n}x{k}", fn=int4_matmul_kernel,
        signature={"x_ptr": "*fp16:16", "w_ptr": "*i32:16", "s_ptr": "*fp16:16", "y_ptr": "*fp16:16",
                   "M": "i32", "N": "i32:16", "K": "i32:16"},
        constexprs={"GROUP": GROUP}, configs=CONFIGS, make_inputs=make_inputs, grid=grid, outputs={"y_ptr": None},
        flops=2.0 * m * n * k, bytes_moved=n * k / 2 + (k // GROUP) * n * 2 + 2.0 * m * (k + n), reference=ref,
        reference_tol=2e-3, description=f"plain Triton int4 x fp16 GEMM (dequantise, tl.dot), {m}x{n}x{k}, group {GROUP}")


__all__ = ["CONFIGS", "GROUP", "SHAPES", "TOKENS", "dequantise", "int4_matmul", "int4_matmul_kernel", "pack_plain",
           "problem", "reference", "unpack_plain"]

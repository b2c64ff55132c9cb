"""Torch entry points: ordinary @triton.jit launches (Triton compiles them just in time).

The shipped tuned cubins match the calls below for fp16, contiguous, 16-byte aligned tensors with
dimensions that are multiples of 16 (softmax: rows of at most 1024 columns). Other calls are
correct too; they simply run Triton's own cubin.
"""

from __future__ import annotations

from typing import Any

import triton

from . import kernels

BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M = 128, 128, 64, 8


def matmul_leaky_relu(a: Any, b: Any, slope: float = 0.01) -> Any:
    """``leaky_relu(a @ b)`` for fp16 ``a`` (M×K) and ``b`` (K×N)."""
    import torch

    assert a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0], "expected a (M×K) and b (K×N)"
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    kernels.matmul_leaky_relu[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                    c.stride(0), c.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                                    GROUP_M=GROUP_M, SLOPE=slope, num_warps=8, num_stages=3)
    return c


def softmax(x: Any) -> Any:
    """Row-wise softmax of a 2-D fp16 tensor with at most 1024 columns."""
    import torch

    assert x.dim() == 2 and x.shape[1] <= 1024, "expected a 2-D tensor with at most 1024 columns"
    out = torch.empty_like(x)
    kernels.softmax[(x.shape[0],)](out, x, x.stride(0), out.stride(0), x.shape[1], BLOCK=1024,
                                   num_warps=4, num_stages=3)
    return out

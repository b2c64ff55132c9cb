"""Kernels for the recorder's tests (imported by the workload scripts of this folder, which run under
``kbuild record``): an ``@triton.autotune`` kernel under an ``@triton.heuristics`` layer, one with heuristics inside
the autotuner, and a persistent kernel whose launch is sized by the SM count the way Liger-Kernel's RMSNorm
backward is (``grid = (sm_count,)``, ``rows_per_program = ceil(n_rows / sm_count)``)."""

import math

import triton
import triton.language as tl


@triton.heuristics({"EVEN_N": lambda args: args["n"] % 256 == 0})
@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 128}, num_warps=4)],
                 key=["n"])
@triton.jit
def scale(x_ptr, y_ptr, n, factor, BLOCK: tl.constexpr, EVEN_N: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


@triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])
@triton.heuristics({"HALF": lambda args: args["BLOCK"] // 2})
@triton.jit
def shift(x_ptr, n, BLOCK: tl.constexpr, HALF: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + HALF, mask=offs < n)


@triton.jit
def rows(x_ptr, n_rows, n_cols, rows_per_program, BLOCK: tl.constexpr):
    start = tl.program_id(0) * rows_per_program
    cols = tl.arange(0, BLOCK)
    for r in range(start, tl.minimum(start + rows_per_program, n_rows)):
        v = tl.load(x_ptr + r * n_cols + cols, mask=cols < n_cols)
        tl.store(x_ptr + r * n_cols + cols, v * 2, mask=cols < n_cols)


def scale_op(x, factor=2.0):
    import torch

    y = torch.empty_like(x)
    scale[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, x.numel(), factor)
    return y


def shift_op(x):
    shift[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, x.numel())
    return x


def rows_op(x, sm_count):
    """A persistent launch: one program per SM, each doing ``ceil(n_rows / sm_count)`` rows."""
    n_rows, n_cols = x.shape
    rows[(sm_count,)](x, n_rows, n_cols, math.ceil(n_rows / sm_count), BLOCK=triton.next_power_of_2(n_cols))
    return x

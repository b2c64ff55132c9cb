"""Kernels for the tests of specs made from recordings (``tests/bench/workload_capture.py`` launches them under
``kbuild record``): one that reads and writes strided views, and one that gathers rows by an index tensor."""

import triton
import triton.language as tl


@triton.jit
def scale_strided(x_ptr, y_ptr, n_rows, n_cols, sx0, sx1, sy0, sy1, factor, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * sx0 + cols * sx1, mask=mask)
    tl.store(y_ptr + row * sy0 + cols * sy1, x * factor, mask=mask)


@triton.jit
def gather_rows(x_ptr, idx_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    src = tl.load(idx_ptr + row)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    tl.store(out_ptr + row * n_cols + cols, tl.load(x_ptr + src * n_cols + cols, mask=mask), mask=mask)


def scale(x, y, factor=2.0):
    scale_strided[(x.shape[0],)](x, y, x.shape[0], x.shape[1], x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                                 factor, BLOCK=triton.next_power_of_2(x.shape[1]))


def gather(x, idx):
    out = x.new_empty(idx.shape[0], x.shape[1])
    gather_rows[(idx.shape[0],)](x, idx, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return out

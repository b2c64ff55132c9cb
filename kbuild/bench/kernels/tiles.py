"""Tile ordering shared by the suite's matmul-shaped kernels."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Program ``pid`` → tile ``(pid_m, pid_n)``, walking GROUP_M row-tiles per column sweep so that
    neighbouring programs share A rows and B columns in L2 (Triton's matmul tutorial ordering)."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_in_group = GROUP_M * num_pid_n
    first_m = (pid // num_in_group) * GROUP_M
    group_size = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % num_in_group) % group_size)
    pid_n = (pid % num_in_group) // group_size
    return pid_m, pid_n

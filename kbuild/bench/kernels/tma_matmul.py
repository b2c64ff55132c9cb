"""Persistent fp16 matmul on sm_90 through TMA (device-side tensor descriptors) and wgmma.

NUM_SMS programs loop over the output tiles (grouped order); loads and stores go through
``tl.make_tensor_descriptor``. The descriptors live in global scratch memory, so the launcher
needs ``triton.set_allocator`` (the spec says ``needs_allocator=True``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import triton
import triton.language as tl

from kbuild.arch import HOPPER, modelled
from kbuild.bench.space import grid_space
from kbuild.bench.spec import BenchSpec, Config, Constexpr

#: Programs of the persistent grid: the H200's multiprocessor count. Any value is correct.
NUM_SMS = HOPPER.sms


@triton.jit
def matmul_tma_persistent(a_ptr, b_ptr, c_ptr, M, N, K,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    num_in_group = GROUP_M * num_pid_n
    for tile in tl.range(start, num_tiles, NUM_SMS, flatten=True):
        group_id = tile // num_in_group
        first_m = group_id * GROUP_M
        group_size = min(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (tile % group_size)
        pid_n = (tile % num_in_group) // group_size
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for off_k in range(0, K, BLOCK_K):
            a = a_desc.load([off_m, off_k])
            b = b_desc.load([off_k, off_n])
            acc = tl.dot(a, b, acc)
        c_desc.store([off_m, off_n], acc.to(tl.float16))


CONFIGS = [
    Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3),
    Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=4, num_stages=4),
    Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=4),
]

#: Level-1 space (issue 15). NUM_SMS stays fixed (the persistent grid); TMA boxes stay ≤ 256 per dimension and
#: BLOCK_K·2 bytes ≥ 16.
SPACE = grid_space({"BLOCK_M": [64, 128], "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64, 128], "GROUP_M": [8]},
                   num_warps=[4, 8], num_stages=[3, 4])  # 72 points


def tma_matmul(small: bool = False) -> BenchSpec:
    """Persistent TMA matmul at 4096³ (256³ when ``small``); sm_90 only."""
    s = 256 if small else 4096

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        import torch

        g = torch.Generator(device=device).manual_seed(seed)
        a = torch.randn((s, s), generator=g, device=device).to(device=device, dtype=torch.float16)
        b = torch.randn((s, s), generator=g, device=device).to(device=device, dtype=torch.float16)
        return {"a_ptr": a, "b_ptr": b, "c_ptr": torch.empty((s, s), dtype=torch.float16, device=device),
                "M": s, "N": s, "K": s}

    def grid(c: Mapping[str, Constexpr]) -> tuple[int, int, int]:
        tiles = triton.cdiv(s, int(c["BLOCK_M"])) * triton.cdiv(s, int(c["BLOCK_N"]))
        return (min(int(c["NUM_SMS"]), tiles), 1, 1)

    def reference(x: dict[str, Any]) -> dict[str, Any]:
        return {"c_ptr": x["a_ptr"].float() @ x["b_ptr"].float()}

    return BenchSpec(
        name="tma_matmul_4096", fn=matmul_tma_persistent,
        signature={"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "c_ptr": "*fp16:16",
                   "M": "i32:16", "N": "i32:16", "K": "i32:16"},
        constexprs={"NUM_SMS": NUM_SMS}, configs=CONFIGS, space=SPACE, make_inputs=make_inputs, grid=grid,
        outputs={"c_ptr": None}, flops=2.0 * s ** 3, bytes_moved=2.0 * 3 * s * s,
        archs=modelled("wgmma", "tma"),
        reference=reference, needs_allocator=True, description=f"persistent TMA/wgmma matmul, {s}³ fp16, sm_90")

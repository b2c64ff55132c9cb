"""A tiny kernel with deliberately broken variants, for the fault-isolation demo (benchmarks/gpu_bench_run.py).

``fault_demo`` computes y = 2x + 1. Its ``MODE`` constexpr selects a variant with the same
parameters, so every variant's cubin can stand in as a "candidate" for the MODE=0 baseline:

* 0: correct;
* 1: stores 2^40 bytes past ``y``: an illegal address (a sticky CUDA fault);
* 2: spins forever on a volatile load: a hang (the watchdog's case);
* 3: writes y shifted by one element, the last one past the end of ``y``: caught by the guard band;
* 4: computes 2x + 1.5: a plain wrong answer, caught by the bit-exact comparison;
* 5: correct output, but also overwrites its input x: caught by the input comparison.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import triton
import triton.language as tl

from kbuild.bench.spec import BenchSpec, Config, Constexpr

N = 1 << 22
BLOCK = 1024


@triton.jit
def fault_demo(x_ptr, y_ptr, n, BLOCK: tl.constexpr, MODE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = x * 2.0 + 1.0
    if MODE == 1:
        tl.store(y_ptr + offs + (1 << 38), y, mask=mask)
    elif MODE == 2:
        v = tl.load(x_ptr, volatile=True)
        while v == v:
            v = tl.load(x_ptr, volatile=True)
        tl.store(y_ptr + offs, y + v, mask=mask)
    elif MODE == 3:
        # Shifted by 4 elements (16 bytes, so the vector stores stay aligned): the last 4 land past the end.
        # (A shift by one element faulted on the H200 instead: misaligned 16-byte stores.)
        tl.store(y_ptr + offs + 4, y, mask=mask)
    elif MODE == 4:
        tl.store(y_ptr + offs, x * 2.0 + 1.5, mask=mask)
    elif MODE == 5:
        tl.store(y_ptr + offs, y, mask=mask)
        tl.store(x_ptr + offs, y, mask=mask)
    else:
        tl.store(y_ptr + offs, y, mask=mask)


def spec(small: bool = False) -> BenchSpec:
    """4 Mi fp32 elements (16 Ki when ``small``, for Triton's CPU interpreter)."""
    n = (1 << 14) if small else N

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        import torch

        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, generator=g).to(device)
        return {"x_ptr": x, "y_ptr": torch.empty_like(x), "n": n}

    def grid(c: Mapping[str, Constexpr]) -> tuple[int, int, int]:
        return (triton.cdiv(n, BLOCK), 1, 1)

    return BenchSpec(name="fault_demo", fn=fault_demo, signature={"x_ptr": "*fp32:16", "y_ptr": "*fp32:16", "n": "i32"},
                     constexprs={"BLOCK": BLOCK}, configs=[Config({"MODE": m}, num_warps=4, num_stages=1)
                                                           for m in range(6)],
                     make_inputs=make_inputs, grid=grid, outputs={"y_ptr": None}, flops=2.0 * n, bytes_moved=8.0 * n,
                     reference=lambda x: {"y_ptr": x["x_ptr"] * 2.0 + 1.0}, description="fault-isolation demo")

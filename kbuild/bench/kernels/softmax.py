"""Fused row softmax: one program per row, the whole row in registers (fp16 in and out, fp32 math)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import triton
import triton.language as tl

from kbuild.bench.space import grid_space
from kbuild.bench.spec import BenchSpec, Config, Constexpr


@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    y = num / tl.sum(num, axis=0)
    tl.store(y_ptr + row * n_cols + cols, y.to(tl.float16), mask=mask)


#: Level-1 space (issue 15): warps × register cap. BLOCK_N is fixed by the row length and the kernel has no
#: loop, so num_stages changes nothing and is not an axis. At 4096 columns ptxas uses about 150-250 registers
#: per thread at 1 warp and 25-40 at 16 warps, so the caps span both ends (a cap below the need spills).
SPACE = grid_space({}, num_warps=[1, 2, 4, 8, 16, 32], num_stages=[1], maxnreg=[None, 32, 48, 64, 96, 128, 168, 232])


def softmax(small: bool = False) -> BenchSpec:
    """Softmax over rows of a 65536×4096 fp16 matrix (16×512 when ``small``)."""
    m, n = (16, 512) if small else (65536, 4096)

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        import torch

        g = torch.Generator(device=device).manual_seed(seed)
        x = (torch.randn((m, n), generator=g, device=device) * 2.0).to(device=device, dtype=torch.float16)
        return {"x_ptr": x, "y_ptr": torch.empty_like(x), "n_cols": n}

    def grid(c: Mapping[str, Constexpr]) -> tuple[int, int, int]:
        return (m, 1, 1)

    def reference(x: dict[str, Any]) -> dict[str, Any]:
        import torch

        return {"y_ptr": torch.softmax(x["x_ptr"].float(), dim=-1)}

    block = triton.next_power_of_2(n)
    return BenchSpec(
        name="softmax", fn=softmax_rows,
        signature={"x_ptr": "*fp16:16", "y_ptr": "*fp16:16", "n_cols": "i32:16"},
        constexprs={"BLOCK_N": block},
        configs=[Config({}, num_warps=w, num_stages=1) for w in (8, 4, 16)], space=SPACE,
        make_inputs=make_inputs, grid=grid, outputs={"y_ptr": None},
        flops=5.0 * m * n, bytes_moved=2.0 * 2 * m * n, reference=reference,
        description=f"fused softmax, {m}x{n} fp16")

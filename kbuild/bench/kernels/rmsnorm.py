"""RMSNorm forward: y = x / sqrt(mean(x²) + eps) * w, one program per row (fp16, fp32 math)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import triton
import triton.language as tl

from kbuild.bench.space import grid_space
from kbuild.bench.spec import BenchSpec, Config, Constexpr

EPS = 1e-6


@triton.jit
def rmsnorm_fwd(x_ptr, w_ptr, y_ptr, n_cols, BLOCK_N: tl.constexpr, EPS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + EPS)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (x * rstd * w).to(tl.float16), mask=mask)


#: Level-1 space (issue 15): warps × register cap. BLOCK_N is fixed by the row length and the kernel has no
#: loop, so num_stages changes nothing and is not an axis. At 4096 columns ptxas uses about 150-250 registers
#: per thread at 1 warp and 25-40 at 16 warps, so the caps span both ends (a cap below the need spills).
SPACE = grid_space({}, num_warps=[1, 2, 4, 8, 16, 32], num_stages=[1], maxnreg=[None, 32, 48, 64, 96, 128, 168, 232])


def rmsnorm(small: bool = False) -> BenchSpec:
    """RMSNorm over rows of a 32768×4096 fp16 matrix (16×512 when ``small``)."""
    m, n = (16, 512) if small else (32768, 4096)

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        import torch

        g = torch.Generator(device=device).manual_seed(seed)
        x = (torch.randn((m, n), generator=g, device=device) * 2.0).to(device=device, dtype=torch.float16)
        w = (torch.rand((n,), generator=g, device=device) + 0.5).to(device=device, dtype=torch.float16)
        return {"x_ptr": x, "w_ptr": w, "y_ptr": torch.empty_like(x), "n_cols": n}

    def grid(c: Mapping[str, Constexpr]) -> tuple[int, int, int]:
        return (m, 1, 1)

    def reference(x: dict[str, Any]) -> dict[str, Any]:
        import torch

        xf = x["x_ptr"].float()
        return {"y_ptr": xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * x["w_ptr"].float()}

    return BenchSpec(
        name="rmsnorm", fn=rmsnorm_fwd,
        signature={"x_ptr": "*fp16:16", "w_ptr": "*fp16:16", "y_ptr": "*fp16:16", "n_cols": "i32:16"},
        constexprs={"BLOCK_N": triton.next_power_of_2(n), "EPS": EPS},
        configs=[Config({}, num_warps=w, num_stages=1) for w in (8, 4, 16)], space=SPACE,
        make_inputs=make_inputs, grid=grid, outputs={"y_ptr": None},
        flops=4.0 * m * n, bytes_moved=2.0 * (2 * m * n + n), reference=reference,
        description=f"RMSNorm forward, {m}x{n} fp16")

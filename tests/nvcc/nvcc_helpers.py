"""Helpers of the nvcc launcher tests: a small CUDA source and a runner of ``kbuild-nvcc`` in a subprocess with its
own store and step log (``KBUILD_NVCC_LOG``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

KERNEL = r"""
#include <cuda_fp16.h>
namespace { __device__ float twice(float v) { return 2.f * v; } }
static __device__ int hidden_counter;
__global__ void scale(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { y[i] = twice(x[i]); atomicAdd(&hidden_counter, 1); }
}
void launch(float* y, const float* x, int n) { scale<<<(n + 255) / 256, 256>>>(y, x, n); }
"""

ARCHS = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    events: list[dict]

    def count(self, tool: str, action: str) -> int:
        return sum(1 for e in self.events if e["tool"] == tool and e["action"] == action)

    def actions(self) -> Counter:
        return Counter((e["tool"], e["action"]) for e in self.events)


@dataclass
class Runner:
    store: Path
    log: Path

    def __call__(self, *argv: str, cwd: Path, env: dict[str, str] | None = None) -> Result:
        self.log.unlink(missing_ok=True)
        full = dict(os.environ)  # no KBUILD_* setting but those a test sets (conftest.py)
        full.update({"KBUILD_STORE": str(self.store), "KBUILD_NVCC_LOG": str(self.log)})
        full.update(env or {})
        proc = subprocess.run([sys.executable, "-c", "import sys; from kbuild.nvcc.launcher import main; "
                               "sys.exit(main())", *argv], cwd=cwd, env=full, capture_output=True, text=True,
                              check=False)
        events = [json.loads(ln) for ln in self.log.read_text().splitlines()] if self.log.exists() else []
        return Result(proc.returncode, proc.stdout, proc.stderr, events)



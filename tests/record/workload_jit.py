"""A workload for ``kbuild record`` in the tests: examples/jit-package's own entry points on CPU tensors.

``python workload_jit.py [softmax:ROWS | matmul:N ...]`` (default: ``softmax:64 softmax:128 matmul:256``) calls
``kbx_jit.softmax`` on a ROWS×1024 fp16 tensor and ``kbx_jit.matmul_leaky_relu`` on N×128 @ 128×N, the shapes its
``[tool.kbuild.kernels]`` declarations describe (dimensions multiples of 16, contiguous).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "jit-package"))

import kbx_jit
import torch


def main(calls):
    for call in calls:
        what, _, size = call.partition(":")
        n = int(size)
        if what == "softmax":
            kbx_jit.softmax(torch.randn(n, 1024).half())
        elif what == "matmul":
            kbx_jit.matmul_leaky_relu(torch.randn(n, 128).half(), torch.randn(128, n).half())
        else:
            raise SystemExit(f"unknown call {call!r}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["softmax:64", "softmax:128", "matmul:256"])

"""What a user of kbx_jit runs, recorded by ``kbuild record`` into ``kbuild-recording.json``.

``kbuild record --mode cpu --target sm_80,sm_90 --out kbuild-recording.json -- python workload.py`` runs it on
CPU tensors (launches recorded, not run: no GPU needed). The shapes go beyond what the hand-written
``[[tool.kbuild.kernels]]`` declare: softmax over rows of 1,000 columns (``n_cols`` and the row stride are then not
divisible by 16) and a 100 × 120 × 256 matmul (M, K and A's row stride not divisible by 16), besides the declared
64-row softmax and 256 × 128 × 256 matmul. On a GPU
machine, ``kbuild record -- python workload.py --cuda`` records the same calls through Triton's own hooks.
"""

import sys

import kbx_jit
import torch


def main(device: str = "cpu") -> None:
    torch.set_default_device(device)
    for rows, cols in ((64, 1024), (128, 1000)):
        kbx_jit.softmax(torch.randn(rows, cols).half())
    for m, k in ((256, 128), (100, 120)):
        kbx_jit.matmul_leaky_relu(torch.randn(m, k).half(), torch.randn(k, 256).half())


if __name__ == "__main__":
    main("cuda" if "--cuda" in sys.argv[1:] else "cpu")

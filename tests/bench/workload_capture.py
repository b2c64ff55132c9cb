"""A workload for ``kbuild record --capture`` in the tests, on CPU tensors (``--mode cpu``: launches recorded, not
run).

* Liger-Kernel 0.8.5's cross-entropy forward, whose labels (with ``ignore_index`` rows) generated data cannot
  stand for: 12 rows × 40 classes in bf16 twice (labels seeded; rows 2 and 7 ignored with -100), then 24 rows;
  with ``--big``, also 150,000 rows (1.1 MiB of labels: past ``--capture-mib 1``);
* ``recorded_kernels.scale``: a strided input (every other column of a 4 × 6 tensor) into a strided output (3
  columns of a 4 × 5 tensor);
* ``recorded_kernels.gather``: 6 rows gathered from 5 by an int32 index.

The labels and indices come from ``torch.Generator().manual_seed(0)`` in this order (:func:`labels` gives them).
"""

import sys

import recorded_kernels
import torch
from liger_kernel.ops import cross_entropy


def labels(big: bool = False) -> list:
    """The label tensors of the cross-entropy calls and the gather's index, as :func:`main` makes them."""
    return run(big, launch=False)


def run(big: bool, launch: bool = True) -> list:
    gen = torch.Generator().manual_seed(0)
    made = []
    for rows in (12, 12, 24, *((150_000,) if big else ())):
        logits = torch.randn(rows, 40, generator=gen).to(torch.bfloat16)
        target = torch.randint(0, 40, (rows,), generator=gen)
        target[2] = target[7] = -100
        made.append(target)
        if launch:
            cross_entropy.cross_entropy_forward(logits, target, None, -100, 0.0, 0.0, "mean", None, False)
    x = torch.randn(4, 6, generator=gen)[:, ::2]
    y = torch.empty(4, 5)[:, 1:4]
    rows = torch.randn(5, 8, generator=gen)
    idx = torch.tensor([4, 0, 0, 3, 1, 2], dtype=torch.int32)
    made.append(idx)
    if launch:
        recorded_kernels.scale(x, y)
        recorded_kernels.gather(rows, idx)
    return made


if __name__ == "__main__":
    run("--big" in sys.argv[1:])

"""Which NVIDIA GPUs this machine has, asked of the CUDA driver directly.

Asks ``libcuda.so.1`` through kbuild's binding (:mod:`kbuild.device.cuda`; no torch, no CUDA context kept), so
that builds on CPU-only machines can decide "untuned: no sm_90 GPU on this machine" cheaply. Nothing here runs
at import time.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from kbuild.device.cuda import CudaError, driver


@dataclass(frozen=True)
class GPU:
    index: int
    name: str
    cc: int

    @property
    def sm(self) -> str:
        return f"sm_{self.cc}"


@functools.cache
def local_gpus() -> tuple[GPU, ...]:
    """The GPUs the CUDA driver reports; empty when there is no driver or no device."""
    try:
        cuda = driver()
        cuda.init()
        count = cuda.device_count()
    except (OSError, CudaError):
        return ()
    gpus = []
    for i in range(count):
        try:
            dev = cuda.device(i)
            gpus.append(GPU(i, cuda.device_name(dev), cuda.compute_capability(dev)))
        except CudaError:
            continue
    return tuple(gpus)


def has_gpu(cc: int) -> bool:
    return any(g.cc == cc for g in local_gpus())

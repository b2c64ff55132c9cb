"""Which NVIDIA GPUs this machine has, asked of the CUDA driver directly.

Uses ``libcuda.so.1`` through ctypes (no torch, no CUDA context kept), so that builds on
CPU-only machines can decide "untuned: no sm_90 GPU on this machine" cheaply. Nothing here
runs at import time.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


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
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return ()
    if cuda.cuInit(0) != 0:
        return ()
    count = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return ()
    gpus = []
    for i in range(count.value):
        dev = ctypes.c_int(0)
        if cuda.cuDeviceGet(ctypes.byref(dev), i) != 0:
            continue
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        cuda.cuDeviceGetAttribute(ctypes.byref(major), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        cuda.cuDeviceGetAttribute(ctypes.byref(minor), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        name = ctypes.create_string_buffer(256)
        cuda.cuDeviceGetName(name, 256, dev)
        gpus.append(GPU(i, name.value.decode(errors="replace"), major.value * 10 + minor.value))
    return tuple(gpus)


def has_gpu(cc: int) -> bool:
    return any(g.cc == cc for g in local_gpus())

"""nvcc installed from the package index: ``nvidia-cuda-nvcc`` (with ``nvidia-cuda-crt``, ``nvidia-nvvm`` and
``nvidia-cuda-runtime``) puts a whole compiler under ``site-packages/nvidia/cu<N>/``: ``bin/nvcc``, ``bin/ptxas``,
``nvvm/bin/cicc``, ``include/`` (runtime and crt headers) and ``lib/`` (``libcudart``). Its ``bin/nvcc.profile``
names those directories relative to itself, so that nvcc needs no ``CUDA_HOME`` and no system toolkit: CMake
takes it as ``CMAKE_CUDA_COMPILER`` and finds the rest from it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def find_nvcc() -> Path | None:
    """``nvidia/cu*/bin/nvcc`` of the newest CUDA installed from the package index, or None."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return None
    found: list[tuple[int, Path]] = []
    for base in spec.submodule_search_locations:
        for cand in Path(base).glob("cu*/bin/nvcc"):
            major = cand.parent.parent.name[2:]
            if major.isdigit() and cand.is_file():
                found.append((int(major), cand))
    return max(found)[1] if found else None


__all__ = ["find_nvcc"]

"""Running and timing kernels on the GPU through torch, for the measurement worker and ``kbuild bench``.

Imported only where a GPU is used (torch is imported inside the functions).

* :func:`require_gpu`: the device's compute capability, or :class:`GPUUnavailableError`;
* :func:`with_cubin`: a Triton ``CompiledKernel`` that launches other machine code (a rewritten schedule);
* :class:`L2Flush`: overwrite a buffer larger than L2 between timed launches;
* :func:`time_interleaved`: CUDA-event timing of several variants, interleaved launch by launch;
* :func:`device_report`: GPU name, driver, clocks, versions for the record.
"""

from __future__ import annotations

import copy
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

from kbuild.errors import GPUUnavailableError

#: The torch device everything is measured on (a CPU smoke test of the GPU code paths replaces it).
DEVICE = "cuda"


def require_gpu(needed: Sequence[int]) -> int:
    """Compute capability of GPU 0 as major*10+minor; raises when there is none or none of ``needed`` (empty: any
    CUDA GPU). The error names ``needed[0]`` when there is no GPU at all."""
    want = " or ".join(f"sm_{a}" for a in needed) if needed else "CUDA"
    try:
        import torch
    except ImportError:  # pragma: no cover
        raise GPUUnavailableError(f"no {want} GPU here; measurement needs one (torch is not installed)") from None
    if not torch.cuda.is_available():
        first = f"sm_{needed[0]}" if needed else "CUDA"
        raise GPUUnavailableError(f"no {first} GPU here; measurement needs one "
                                  "(torch.cuda.is_available() is False)")
    major, minor = torch.cuda.get_device_capability(0)
    arch = major * 10 + minor
    if needed and arch not in needed:
        raise GPUUnavailableError(f"no {want} GPU here; measurement needs one (found "
                                  f"{torch.cuda.get_device_name(0)}, sm_{arch})")
    return arch


def with_cubin(compiled: Any, cubin: bytes) -> Any:
    """A copy of a Triton 3.6 ``CompiledKernel`` that loads ``cubin`` at its next launch."""
    clone = copy.copy(compiled)
    clone.kernel = cubin
    clone.module = None
    clone.function = None
    clone._run = None
    return clone


def set_scratch_allocator() -> None:
    """Give Triton an allocator for global scratch (device-side TMA descriptors)."""
    import torch
    import triton

    def alloc(size: int, alignment: int, stream: Any) -> Any:
        return torch.empty(size, device=DEVICE, dtype=torch.int8)

    triton.set_allocator(alloc)


class L2Flush:
    """Writes a buffer of twice the L2 size (at least ``MIN_BYTES``), evicting everything useful from L2."""

    MIN_BYTES = 256 << 20

    def __init__(self) -> None:
        import torch

        l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 64 << 20)
        self.buffer = torch.empty(max(2 * l2, self.MIN_BYTES), dtype=torch.int8, device=DEVICE)

    def __call__(self) -> None:
        self.buffer.zero_()


def time_interleaved(variants: Sequence[Callable[[], object]], *, rounds: int, reps: int,
                     flush: Callable[[], None] | None, warmup: int = 2) -> list[list[list[float]]]:
    """Milliseconds per launch, as ``[variant][round][rep]``.

    Inside a round, launch ``i`` runs every variant once, starting with variant ``i mod n``, so each
    variant sees every position equally often and clock or power drift hits all of them alike. The
    L2 flush runs before every launch, outside the timed events."""
    import torch

    for fn in variants:
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    n = len(variants)
    out: list[list[list[float]]] = [[] for _ in range(n)]
    for r in range(rounds):
        events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
                  for _ in range(n)]
        for i in range(reps):
            start = (r * reps + i) % n
            for j in range(n):
                v = (start + j) % n
                if flush is not None:
                    flush()
                begin, end = events[v][i]
                begin.record()
                variants[v]()
                end.record()
        torch.cuda.synchronize()
        for v in range(n):
            out[v].append([b.elapsed_time(e) for b, e in events[v]])
    return out


def _nvidia_smi(fields: str) -> list[str]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        res = subprocess.run([exe, f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [p.strip() for p in res.stdout.strip().split(",")] if res.returncode == 0 else []


def clocks() -> dict[str, str]:
    names = ["clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem", "power.draw", "temperature.gpu"]
    values = _nvidia_smi(",".join(names))
    return dict(zip(names, values)) if len(values) == len(names) else {}


def device_report() -> dict[str, Any]:
    """What the numbers were measured on: GPU, driver, clocks, library versions."""
    import numpy
    import torch
    import triton

    props = torch.cuda.get_device_properties(0)
    driver = _nvidia_smi("driver_version")
    return {
        "gpu": torch.cuda.get_device_name(0),
        "capability": f"sm_{props.major}{props.minor}",
        "multiprocessors": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
        "driver": driver[0] if driver else None,
        "cuda_runtime": torch.version.cuda,
        "clocks": clocks(),
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__, "triton": triton.__version__,
                     "numpy": numpy.__version__, "platform": platform.platform()},
    }

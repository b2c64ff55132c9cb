"""ptxas's own resource report of one compiled kernel: registers, spills, stack, static shared memory, barriers.

Triton runs ptxas with ``-v`` on every compile (``make_cubin`` in ``triton/backends/nvidia/compiler.py``); ptxas
then writes, per function, lines such as::

    ptxas info    : Compiling entry function '_rms_norm_forward_kernel' for 'sm_90a'
    ptxas info    : Function properties for _rms_norm_forward_kernel
        336 bytes stack frame, 452 bytes spill stores, 340 bytes spill loads
    ptxas info    : Used 64 registers, used 1 barriers, 336 bytes cumulative stack size, 16 bytes smem

:func:`kbuild.compile.triton_aot.hermetic_compile` hands that text over (``ptxas_log``); :func:`parse` reads the
entry function's figures from it. Shared memory here is ptxas's *static* shared memory only: Triton's kernels
take theirs dynamically, and Triton's metadata (``shared``) has that. Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")


class PtxasReportError(ValueError):
    """The text holds no resource report of the kernel (not ptxas ``-v`` output, or another function's)."""


@dataclass(frozen=True)
class PtxasReport:
    """The entry function's resources as ptxas reported them."""

    function: str
    registers: int
    """Registers per thread."""
    spill_stores: int
    """Bytes stored to local memory for spilled registers, per thread."""
    spill_loads: int
    stack: int
    """Bytes of stack frame per thread (spills and local arrays)."""
    static_shared: int
    """Bytes of static shared memory (Triton's kernels use dynamic shared memory: 0 for most)."""
    barriers: int

    @property
    def spills(self) -> bool:
        return self.spill_stores > 0 or self.spill_loads > 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse(text: str, function: str | None = None) -> PtxasReport:
    """The report of ``function`` (default: the one entry function compiled) in ptxas ``-v`` output ``text``."""
    lines = text.splitlines()
    entries = [m.group(1) for line in lines if (m := _ENTRY.search(line))]
    name = function if function is not None else (entries[0] if len(entries) == 1 else None)
    if name is None:
        raise PtxasReportError(f"expected one entry function in the ptxas report, found {len(entries)}"
                               + (f" ({', '.join(entries)})" if entries else ""))
    frame: tuple[int, int, int] | None = None
    used: str | None = None
    current = None
    for line in lines:
        if m := _PROPS.search(line):
            current = m.group(1)
        elif m := _ENTRY.search(line):
            current = m.group(1)
        elif current == name and (m := _FRAME.search(line)):
            frame = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif current == name and _USED.search(line):
            used = line
    if frame is None or used is None:
        raise PtxasReportError(f"the ptxas report has no resource usage of {name!r}")
    regs = _USED.search(used)
    assert regs is not None
    barriers = _BARRIERS.search(used)
    smem = _SMEM.search(used)
    return PtxasReport(function=name, registers=int(regs.group(1)), spill_stores=frame[1], spill_loads=frame[2],
                       stack=frame[0], static_shared=int(smem.group(1)) if smem else 0,
                       barriers=int(barriers.group(1)) if barriers else 0)


__all__ = ["PtxasReport", "PtxasReportError", "parse"]

"""How many blocks of a compiled kernel one SM holds at once: registers, warps and shared memory against the SM's
limits (:class:`kbuild.arch.Limits`, read from :mod:`kbuild.arch` only), counted as CUDA's occupancy calculator
(``cuda_occupancy.h``) counts them:

* registers: a warp's come in units of :attr:`~kbuild.arch.Limits.register_unit` from one of the SM's
  :attr:`~kbuild.arch.Limits.sub_partitions` (each holding its share of
  :attr:`~kbuild.arch.Architecture.registers_per_sm`); a block whose warps, rounded up to the sub-partitions, need
  more registers than a block may have does not launch;
* shared memory: a block takes its own (in units of :attr:`~kbuild.arch.Limits.shared_unit`) plus what the
  driver reserves per block;
* at most :attr:`~kbuild.arch.Limits.max_warps_per_sm` warps and :attr:`~kbuild.arch.Limits.max_blocks_per_sm`
  blocks are resident.

A kernel that fits no block on an SM does not launch (Triton raises ``OutOfResources`` when it loads it).
Thread block clusters (``num_ctas`` > 1) also need the cluster's blocks on one GPC at once; that is not counted.
The GPU test (``tests/tune/test_derived_space_gpu.py``) compares these counts with the driver's
``cuOccupancyMaxActiveBlocksPerMultiprocessor``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from kbuild.arch import Architecture


@dataclass(frozen=True)
class Occupancy:
    """Blocks and warps resident per SM, the fraction of the SM's warps, and what limits them."""

    blocks_per_sm: int
    warps_per_sm: int
    fraction: float
    limiter: str
    """``"registers"``, ``"warps"``, ``"shared memory"``, ``"blocks"`` or ``"threads"`` (the block itself is too
    large)."""

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fraction": round(self.fraction, 4)}


def occupancy(row: Architecture, *, registers: int, num_warps: int, shared: int) -> Occupancy | None:
    """The occupancy of a block of ``num_warps`` warps using ``registers`` per thread and ``shared`` bytes of
    shared memory on ``row``; None where the architecture's limits are not modelled."""
    lim = row.limits
    if lim is None:
        return None
    if num_warps * 32 > lim.max_threads_per_block or registers > lim.max_registers_per_thread:
        return Occupancy(0, 0, 0.0, "threads")
    per_warp = math.ceil(max(registers, 1) * 32 / lim.register_unit) * lim.register_unit
    parts = lim.sub_partitions
    if per_warp * math.ceil(num_warps / parts) * parts > row.registers_per_sm:  # the block's own register check
        return Occupancy(0, 0, 0.0, "registers")
    per_block = math.ceil(shared / lim.shared_unit) * lim.shared_unit + lim.shared_reserved_per_block
    by = {
        "registers": (row.registers_per_sm // parts // per_warp) * parts // num_warps,
        "warps": lim.max_warps_per_sm // num_warps,
        "shared memory": lim.shared_per_sm // per_block,
        "blocks": lim.max_blocks_per_sm,
    }
    limiter = min(by, key=lambda k: (by[k], list(by).index(k)))
    blocks = by[limiter]
    return Occupancy(blocks, blocks * num_warps, blocks * num_warps / lim.max_warps_per_sm, limiter)


__all__ = ["Occupancy", "occupancy"]

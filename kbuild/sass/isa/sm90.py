"""Opcode table for the sm_90 family (H100/H200): sm_80's table plus Hopper's asynchronous operations,
which stay pinned until each has a rule tested on the GPU."""

from __future__ import annotations

from . import ArchSpec, OpInfo, freeze
from .sm80 import SPEC as SM80
from .sm80 import TABLE as SM80_TABLE


def _pin(reason: str, latency: str = "fixed", *, tensor: bool = False, polls: bool = False) -> OpInfo:
    return OpInfo(outs="", pinned=reason, latency=latency, tensor=tensor, polls=polls)


TABLE: dict[str, OpInfo] = {
    **SM80_TABLE,
    "HGMMA": _pin("Hopper async (wgmma)", "tensor", tensor=True),
    "QGMMA": _pin("Hopper async (wgmma)", "tensor", tensor=True),
    "IGMMA": _pin("Hopper async (wgmma)", "tensor", tensor=True),
    "BGMMA": _pin("Hopper async (wgmma)", "tensor", tensor=True),
    "WARPGROUP": _pin("Hopper async (warpgroup arrive/depbar)"),
    "SYNCS": _pin("Hopper async (mbarrier)", "barrier", polls=True), "UTMALDG": _pin("Hopper async (TMA)", "global"),
    "UTMASTG": _pin("Hopper async (TMA)", "global"), "UTMAPF": _pin("Hopper async (TMA)"),
    "UTMACCTL": _pin("Hopper async (TMA)"), "UTMACMDFLUSH": _pin("Hopper async (TMA)"),
    "UBLKCP": _pin("Hopper async (bulk copy)", "global"), "UBLKRED": _pin("Hopper async (bulk copy)"),
    "UBLKPF": _pin("Hopper async (bulk copy)"), "ELECT": _pin("Hopper (elect)"),
    "USETMAXREG": _pin("Hopper (register reallocation)"), "ACQBULK": _pin("Hopper async"),
    "FENCE": _pin("fence", "barrier"), "UCGABAR_ARV": _pin("cluster barrier"),
    "UCGABAR_WAIT": _pin("cluster barrier"), "MEMBAR": _pin("fence", "barrier"),
    "STAS": _pin("distributed shared memory"),
}

#: wgmma (``HGMMA``/``QGMMA``/``IGMMA``/``BGMMA``) reads and writes registers asynchronously. PTX ISA, wgmma.mma_async:
#: "accessing the accumulator register or the input registers containing fragments of matrix A of a
#: wgmma.mma_async instruction before wgmma.wait_group ... that waits on a wgmma-group including that instruction
#: is undefined behaviour". In SASS an instruction's operands are ``D, A, B, C`` (``A`` a register or ``gdesc[..]``
#: for shared memory); the group's last instruction carries ``gsb0`` (``wgmma.commit_group``), and
#: ``WARPGROUP.DEPBAR.LE gsb0, N`` (``wgmma.wait_group N``) returns when at most ``N`` groups are in flight.
#: Seen on the H200 (kbuild.tile's int4 GEMM, 2026-12-04): ptxas does not keep an in-flight A fragment's registers
#: out of the next loop iteration's writes, and the products came out wrong and different from run to run.
ASYNC_MMA = frozenset({"HGMMA", "QGMMA", "IGMMA", "BGMMA"})
#: registers of an A fragment per thread: a 64 × K slice over the warpgroup's 128 threads is 16 bytes whatever
#: the type (k16 for 16-bit types, k32 for 8-bit, k256 for 1-bit)
ASYNC_MMA_A_REGS = 4
#: the operand that closes a wgmma group, and the wait's opcode
ASYNC_MMA_COMMIT = "gsb0"
ASYNC_MMA_WAIT = "WARPGROUP.DEPBAR"


def async_mma_acc_regs(opcode: str) -> int:
    """Accumulator registers per thread of a wgmma opcode such as ``HGMMA.64x128x16.F32``: 64 × N over 128
    threads, one element per register for 32-bit accumulators, two for ``F16``."""
    mods = opcode.split(".")[1:]
    shape = next((m for m in mods if m.count("x") == 2), None)
    if shape is None:
        raise ValueError(f"{opcode}: no MxNxK shape")
    n = int(shape.split("x")[1])
    return n // 4 if "F16" in mods[mods.index(shape) + 1:mods.index(shape) + 2] else n // 2


SPEC = ArchSpec(family="sm_90", table=freeze(TABLE), nvinfo=SM80.nvinfo)

"""Opcode table for sm_89 (Ada: L4, L40, RTX 40xx): sm_80's encoding and table, plus Ada's fp8 tensor-core
instruction. Ada has no wgmma, no TMA, no mbarrier transactions and no warpgroups: Hopper's asynchronous
opcodes are absent here, so an sm_89 cubin that carried one would see it pinned as unknown."""

from __future__ import annotations

from . import ArchSpec, OpInfo, freeze
from .sm80 import SPEC as SM80
from .sm80 import TABLE as SM80_TABLE

TABLE: dict[str, OpInfo] = {
    **SM80_TABLE,
    # Seen: Triton 3.6 compiles an fp8 (e4m3) tl.dot for sm_89 to QMMA.16832.F32.E4M3.E4M3. Pinned until a
    # rule for its fragments is tested on an Ada GPU.
    "QMMA": OpInfo(outs="", pinned="tensor core (Ada fp8 MMA; no rule tested on a GPU yet)", latency="tensor",
                   tensor=True),
}

SPEC = ArchSpec(family="sm_89", table=freeze(TABLE), nvinfo=SM80.nvinfo)

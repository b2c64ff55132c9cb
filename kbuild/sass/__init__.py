"""SASS rewriting engine: decode a cubin, know every dependency, move instructions safely, write a
cubin that keeps the original's semantics, and verify it independently.

Public API::

    from kbuild.sass import Schedule, UP, DOWN, Verifier, verify_files

    s = Schedule.from_cubin("k.cubin", kernel="k")      # analyse once (one nvdisasm call)
    mask = s.legal_moves()                               # bool (n, 2): [slot, UP|DOWN]
    s.apply(slot, UP); s.undo(); print(s.diff())
    data = s.to_cubin()                                  # verified, re-decoded bytes

The package knows cubins and instructions only; nothing here touches a GPU.
"""

from __future__ import annotations

from .deps import Analysis, analyze
from .disasm import Instruction, disassemble
from .elf import Cubin, load
from .isa import ArchSpec, arch_spec, supported_sms
from .schedule import DOWN, UP, IllegalMove, Move, Schedule
from .verify import VerificationError, Verifier, check_rewrite, verify_files

__all__ = [
    "DOWN",
    "UP",
    "Analysis",
    "ArchSpec",
    "Cubin",
    "IllegalMove",
    "Instruction",
    "Move",
    "Schedule",
    "VerificationError",
    "Verifier",
    "analyze",
    "arch_spec",
    "check_rewrite",
    "disassemble",
    "load",
    "supported_sms",
    "verify_files",
]

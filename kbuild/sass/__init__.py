"""SASS rewriting engine: decode a cubin, know every dependency, move instructions safely, write a
cubin that keeps the original's semantics, and verify it independently.

Public API::

    from kbuild.sass import Schedule, UP, DOWN, Verifier, verify_files

    s = Schedule.from_cubin("k.cubin", kernel="k")      # analyse once (one nvdisasm call)
    mask = s.legal_moves()                               # bool (n, 2): [slot, UP|DOWN]
    s.apply(slot, UP); s.undo(); print(s.diff())
    data = s.to_cubin()                                  # verified, re-decoded bytes

:mod:`kbuild.sass.hazards` checks a kernel's wgmma register operands for races (an A fragment or accumulator
touched before the wait that retires it), for code kbuild generates and code it is given.

The package knows cubins and instructions only; nothing here touches a GPU.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .deps import Analysis, analyze
    from .disasm import Instruction, disassemble
    from .elf import Cubin, load
    from .isa import ArchSpec, arch_spec, supported_sms
    from .schedule import DOWN, UP, IllegalMove, Move, Schedule
    from .verify import VerificationError, Verifier, check_rewrite, verify_files

#: Public name → the submodule that defines it. Imported on first use (PEP 562), so that importing
#: :mod:`kbuild.sass.cli` (the ``kbuild sass`` parser, built by every ``kbuild`` command) needs no numpy, which
#: the engine needs and only the ``[tune]`` extra installs.
_LAZY = {
    **dict.fromkeys(("Analysis", "analyze"), ".deps"),
    **dict.fromkeys(("Instruction", "disassemble"), ".disasm"),
    **dict.fromkeys(("Cubin", "load"), ".elf"),
    **dict.fromkeys(("ArchSpec", "arch_spec", "supported_sms"), ".isa"),
    **dict.fromkeys(("DOWN", "UP", "IllegalMove", "Move", "Schedule"), ".schedule"),
    **dict.fromkeys(("VerificationError", "Verifier", "check_rewrite", "verify_files"), ".verify"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


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

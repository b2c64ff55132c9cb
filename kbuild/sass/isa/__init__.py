"""Opcode semantics as data, one frozen table per architecture family, in a registry.

Each :class:`OpInfo` says which leading operands an opcode writes (``outs``), the register widths of
its outputs and sources, its implicit operands, its memory space and direction, and whether it is
pinned (never moves, never crossed). An opcode that is not in the table is pinned. The tables are
deliberately *over*-approximating: reading or writing more registers than the hardware does only
forbids more moves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kbuild.errors import UsageError

#: Width derived from modifiers: ``.128`` → 4, ``.64``/``WIDE``/``F64``/``S64``/``U64`` → 2, else 1.
MODS = -1

FIXED_CAP = 16  # cycles; covers the integer/float ALU pipes (latency 4–6, up to ~13 for some)
LONG_CAP = 64  # anything else that might be fixed latency (MMA pipes, conversions, memory WAR)


@dataclass(frozen=True)
class OpInfo:
    """Semantics of one base opcode.

    ``outs`` is a comma-separated pattern over the leading operands: ``R`` one register (R/UR, RZ
    allowed), ``P`` one predicate (P/UP, PT allowed), ``P?`` an optional predicate, ``P*`` up to two
    predicates. Every register token not matched by ``outs`` is read.
    """

    outs: str = "R"
    out_width: int = 1
    src_width: int = 1
    implicit_reads: tuple[str, ...] = ()  # "P*" = all predicates P0–P6, "UP*" likewise
    implicit_writes: tuple[str, ...] = ()
    space: str | None = None  # "global" | "shared" | "local" | "unknown"
    mem_read: bool = False
    mem_write: bool = False
    cap: int = FIXED_CAP
    pinned: str | None = None  # reason
    pin_modifiers: tuple[str, ...] = ()
    special_ok: bool = False  # may name SR_* special registers
    #: Variable latency: results come back through scoreboards, in issue order within a queue. ptxas
    #: relies on that order (seen: only the last of several MUFU.EX2 sets a barrier; the consumer of an
    #: earlier one waits on it), so two variable-latency instructions never swap. Memory operations
    #: are always variable; so is any opcode that carries a barrier anywhere in the kernel.
    variable: bool = False


@dataclass(frozen=True)
class ArchSpec:
    """One architecture family: its name, the SM numbers it covers and its opcode table."""

    family: str
    sms: tuple[int, ...]
    table: Mapping[str, OpInfo] = field(repr=False)
    raw_name: str = ""

    def lookup(self, base: str) -> OpInfo | None:
        return self.table.get(base)


def freeze(table: dict[str, OpInfo]) -> Mapping[str, OpInfo]:
    return MappingProxyType(dict(table))


def _registry() -> dict[int, ArchSpec]:
    from . import sm80, sm90

    reg: dict[int, ArchSpec] = {}
    for spec in (sm80.SPEC, sm90.SPEC):
        for sm in spec.sms:
            reg[sm] = spec
    return reg


_REGISTRY: dict[int, ArchSpec] | None = None


def arch_spec(sm: int) -> ArchSpec:
    """The spec for ``sm`` (80, 86, 87, 89 → sm_80 family; 90 → sm_90); UsageError otherwise."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = _registry()
    spec = _REGISTRY.get(sm)
    if spec is None:
        known = ", ".join(f"sm_{k}" for k in sorted(_REGISTRY))
        raise UsageError(f"no SASS table for sm_{sm}; kbuild can rewrite {known}. Leave this cubin untuned.")
    return spec


def supported_sms() -> list[int]:
    arch_spec(80)
    assert _REGISTRY is not None
    return sorted(_REGISTRY)

"""Opcode semantics as data, one frozen table per architecture family, in a registry.

This package is the only place in kbuild that knows opcodes. Each :class:`OpInfo` says which leading
operands an opcode writes (``outs``), the register widths of its outputs and sources, its implicit
operands (and the predicate field nvdisasm prints for them), its memory space and direction, whether
it is pinned (never moves, never crossed), whether it is control flow (a basic block of its own, a
branch), whether it counts scoreboards (``DEPBAR``), its latency class for the cost model and its
class for the tuner's features. An opcode that is not in the table is pinned. The tables are
deliberately *over*-approximating: reading or writing more registers than the hardware does only
forbids more moves.

Each :class:`ArchSpec` adds the ``.nv.info`` attribute tables of its family (:class:`NvInfoAttrs`). What is
per architecture but not per opcode (the SM numbers a family covers, nvdisasm's arch-specific suffix, the
cycles of each latency class) is the architecture's row in :mod:`kbuild.arch`, which names the module here
that holds its table.

**A new architecture is one module and one row**: a file ``sm<NN>.py`` in this package that defines ``SPEC``,
and the row in :data:`kbuild.arch.TABLE` that names it. The registry finds it through the row; nothing else in
kbuild changes (``sm89.py``, Ada, is the example).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kbuild.arch import architecture, rows
from kbuild.errors import UsageError

#: Width derived from modifiers: ``.128`` → 4, ``.64``/``WIDE``/``F64``/``S64``/``U64`` → 2, else 1.
MODS = -1

FIXED_CAP = 16  # cycles; covers the integer/float ALU pipes (latency 4–6, up to ~13 for some)
LONG_CAP = 64  # anything else that might be fixed latency (MMA pipes, conversions, memory WAR)
# ``OpInfo.cap`` is the table's upper bound on an opcode's fixed latency (FIXED_CAP or LONG_CAP). The
# distance constraints (kbuild.sass.deps) require ``min(ptxas's distance, cap)`` cycles between a producer
# and each consumer; a stall may be *lowered* only while every such constraint still holds, so the proof
# that a lowered stall is safe is "cap ≥ the producer's real latency", the same fact the moves rely on.

#: The cost model's latency classes (:mod:`kbuild.tune.measure.model`). Only an instruction that sets a
#: write scoreboard waits for its class's latency; ``fixed`` work is covered by the stall counts.
LATENCY_CLASSES = ("fixed", "constant", "special", "mufu", "shared", "tensor", "global", "local", "barrier",
                   "control")

#: The tuner's per-instruction classes (:mod:`kbuild.tune.env`), one-hot in its observation.
FEATURE_CLASSES = ("load", "store", "tensor", "alu", "other")


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
    #: The non-guard predicate field nvdisasm prints for the implicit operands (``PR`` on P2R/R2P: the
    #: whole predicate file). Any other predicate field pins the instruction.
    predicate_field: str | None = None
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
    #: Control flow: the instruction is a basic block of its own (it and the slot after it start
    #: blocks), and every 16-byte aligned offset among its immediate operands starts a block too.
    ends_block: bool = False
    #: A relative jump (``BRA``): one that jumps backwards closes a loop.
    branch: bool = False
    #: Control leaves the kernel or the subroutine (``EXIT``, ``RET``): no fall-through unless guarded.
    exits: bool = False
    #: The registers the first operand really gets, from the modifiers, where ``out_width`` over-approximates
    #: for the rewriter (``LDSM``: the table says 4 whatever the matrix count). ``semantics(..., exact=True)``.
    exact_out_width: Callable[[tuple[str, ...]], int] | None = None
    #: ``DEPBAR``: waits until few enough of the scoreboards its operands name are pending, so two
    #: setters of a counted scoreboard keep their order (:func:`counted_scoreboards` reads the operands).
    counts_scoreboards: bool = False
    #: The cost model's latency class (one of :data:`LATENCY_CLASSES`).
    latency: str = "fixed"
    #: A tensor-core operation (the tuner's ``tensor`` feature class).
    tensor: bool = False
    #: Waits for another warp or agent by polling (mbarrier try-wait, ``NANOSLEEP``, the ``YIELD``
    #: instruction). ptxas's yield bits in a loop around one may be what lets the other warps progress,
    #: so the control-code edits never *clear* a yield bit inside such a loop (setting one is allowed).
    polls: bool = False


@dataclass(frozen=True)
class NvInfoAttrs:
    """What a family's ``.nv.info`` attributes hold, by attribute code.

    * ``offset_lists``: a plain little-endian u32 array of instruction offsets (remapped when their
      instructions move);
    * ``offset_records``: instruction offsets inside structured records (not rewritten: every
      instruction such a record could address is pinned instead);
    * ``no_offsets``: known to hold no instruction offsets (parameter layout, sizes, counts, versions);
    * ``branch_targets``: attributes whose offsets are jump targets (they start basic blocks).

    Any attribute in none of the first three is scanned, and every instruction one of its u32 words
    could address is pinned.
    """

    offset_lists: Mapping[int, str]
    offset_records: Mapping[int, str]
    no_offsets: Mapping[int, str]
    branch_targets: frozenset[int] = frozenset()

    def name(self, attr: int) -> str:
        return self.offset_lists.get(attr) or self.offset_records.get(attr) or f"0x{attr:02x}"


@dataclass(frozen=True)
class ArchSpec:
    """One architecture family's SASS: its name, its opcode table and its nv.info attributes. The rows of
    :data:`kbuild.arch.TABLE` that name the family give the SM numbers, nvdisasm's suffix and the latencies."""

    family: str
    table: Mapping[str, OpInfo] = field(repr=False)
    nvinfo: NvInfoAttrs = field(repr=False)

    @property
    def sms(self) -> tuple[int, ...]:
        """The SM numbers whose row (:mod:`kbuild.arch`) names this family's table."""
        return tuple(r.sm for r in rows() if r.isa is not None and r.family == self.family)

    @property
    def latencies(self) -> Mapping[str, int]:
        """Cycles until a variable-latency result is ready, per latency class (every class of
        :data:`LATENCY_CLASSES`): the family's rows' (the registry checks that they agree)."""
        latencies = architecture(self.sms[0]).latencies
        assert latencies is not None  # the registry refuses a row with a table and no latencies
        return latencies

    def lookup(self, base: str) -> OpInfo | None:
        return self.table.get(base)

    def nvdisasm_arch(self, sm: int) -> str:
        """The ``-b`` argument for raw blobs of ``sm_<sm>`` code, e.g. ``SM86`` or ``SM90a`` (the row's
        arch-specific suffix)."""
        return f"SM{sm}{architecture(sm).specific}"

    def latency_class(self, base: str) -> str:
        """The cost model's class of an opcode; ``fixed`` for opcodes the table does not know."""
        info = self.table.get(base)
        return info.latency if info is not None else "fixed"


def freeze(table: Mapping[str, OpInfo]) -> Mapping[str, OpInfo]:
    return MappingProxyType(dict(table))


def frozen_map(values: Mapping[int, str] | Mapping[str, int]) -> Mapping:
    return MappingProxyType(dict(values))


_SB = re.compile(r"SB(\d)")


def counted_scoreboards(operands: tuple[str, ...]) -> int | None:
    """The scoreboards a ``DEPBAR`` names, as a bit mask: ``SB<k>`` operands and the digits of a
    ``{k, ...}`` list. ``None`` when no form matched (then every scoreboard must be assumed)."""
    ops = " ".join(operands)
    found = [int(k) for k in _SB.findall(ops)]
    if "{" in ops:
        found += [int(k) for k in re.findall(r"\d", ops[ops.index("{"):])]
    if not found:
        return None
    mask = 0
    for k in found:
        if 0 <= k < 6:
            mask |= 1 << k
    return mask


def feature_class(info: OpInfo | None, *, mem_read: bool, mem_write: bool, sets_barrier: bool) -> str:
    """The tuner's class (:data:`FEATURE_CLASSES`) of one instruction: memory direction first, then the
    table's tensor flag, then ALU work (no scoreboard) or other."""
    if mem_read and not mem_write:
        return "load"
    if mem_write:
        return "store"
    if info is not None and info.tensor:
        return "tensor"
    return "other" if sets_barrier else "alu"


def _registry() -> dict[int, ArchSpec]:
    """The ``SPEC`` of the module each row of :data:`kbuild.arch.TABLE` names, by SM number."""
    reg: dict[int, ArchSpec] = {}
    for row in rows():
        if row.isa is None:
            continue
        spec: ArchSpec = importlib.import_module(f"{__name__}.{row.isa}").SPEC
        if spec.family != row.family:
            raise RuntimeError(f"{row.name}'s row names the {row.family} family, but {row.isa}.py holds the "
                               f"{spec.family} table")
        if row.latencies is None or set(row.latencies) != set(LATENCY_CLASSES):
            raise RuntimeError(f"{row.name}'s row needs the cycles of every latency class: {LATENCY_CLASSES}")
        kin = [r for r in rows() if r.family == row.family and r.isa is not None]
        if any(r.latencies != row.latencies for r in kin):
            raise RuntimeError(f"the rows of the {row.family} family give it different latencies")
        reg[row.sm] = spec
    return reg


_REGISTRY: dict[int, ArchSpec] | None = None


def _specs() -> dict[int, ArchSpec]:
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = _registry()
    return _REGISTRY


def arch_spec(sm: int, origin: str | None = None) -> ArchSpec:
    """The spec for ``sm`` (80, 86, 87 → sm_80 family; 89 → sm_89; 90 → sm_90); UsageError otherwise,
    naming ``origin`` (the cubin's file) when given."""
    spec = _specs().get(sm)
    if spec is None:
        known = ", ".join(f"sm_{k}" for k in sorted(_specs()))
        where = f"{origin}: " if origin else ""
        raise UsageError(f"{where}no SASS table for sm_{sm}; kbuild can rewrite {known}. Leave this cubin untuned.")
    return spec


def supported_sms() -> list[int]:
    return sorted(_specs())

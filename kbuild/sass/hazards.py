"""Static check of wgmma's asynchronous register operands in SASS (sm_90's: the architectures with wgmma).

A ``HGMMA`` reads its A fragment and reads and writes its accumulator after it issues, until a
``WARPGROUP.DEPBAR`` retires its group (the rule and its history are in :mod:`kbuild.sass.isa.sm90`). This module
walks a kernel's control-flow graph with the groups in flight as the state and reports every instruction that
writes a register of an in-flight A fragment or accumulator, or reads an in-flight accumulator: each such
instruction is a race whose outcome depends on timing, so code that has one is wrong even when a run happens to
produce the right numbers.

    from kbuild.sass.hazards import async_mma_hazards
    for h in async_mma_hazards(instructions):     # kbuild.sass.disasm.disassemble(cubin, kernel)
        print(h)

The analysis is conservative where the SASS does not say: an indirect branch is taken to fall through, a pinned
instruction (one the opcode table does not describe) is taken to write its first operand when that is a plain
register, and at a join the groups in flight are the union of both paths' groups.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from kbuild.arch import DEFAULT_SM, find

from .disasm import Instruction
from .isa import ArchSpec, arch_spec
from .isa.sm90 import ASYNC_MMA, ASYNC_MMA_A_REGS, ASYNC_MMA_COMMIT, ASYNC_MMA_WAIT, async_mma_acc_regs
from .operands import describe, is_plain_reg, reg_bits, registers

_REG = re.compile(r"^R(\d+)$")
#: The Triton issue of the race this module finds in Triton 3.6's code (a pipelined wgmma with a register A operand).
WGMMA_RACE_ISSUE = "triton-lang/triton#9433"
#: Hazards kept where they are recorded (artefact metadata, reports): the first ones say where; the count says more.
RECORDED = 20
#: groups tracked at most; older ones are merged into the oldest (conservative: they retire last)
MAX_GROUPS = 8

Group = tuple[int, int]  # (accumulator registers, A-fragment registers)


@dataclass(frozen=True)
class Hazard:
    """One instruction that touches a register of a wgmma group still in flight."""

    index: int
    instruction: str
    registers: str
    kind: str  # "writes an in-flight A fragment", "writes an in-flight accumulator", "reads an in-flight accumulator"

    def __str__(self) -> str:
        return f"slot {self.index} ({self.instruction}) {self.kind}: {self.registers}"


def mma_operands(ins: Instruction) -> Group:
    """(accumulator, A fragment) register masks of one wgmma instruction (A is 0 when it is read from shared
    memory through a descriptor)."""
    acc = a = 0
    m = _REG.match(ins.operands[0].removesuffix(".reuse")) if ins.operands else None
    if m:
        acc = reg_bits("R", int(m.group(1)), async_mma_acc_regs(ins.opcode))
    if len(ins.operands) > 1:
        m = _REG.match(ins.operands[1].removesuffix(".reuse"))
        if m:
            a = reg_bits("R", int(m.group(1)), ASYNC_MMA_A_REGS)
    return acc, a


def _wait_count(ins: Instruction) -> int | None:
    """N of ``WARPGROUP.DEPBAR.LE gsb0, N``; None for another WARPGROUP instruction."""
    if not ins.opcode.startswith(ASYNC_MMA_WAIT):
        return None
    for op in reversed(ins.operands):
        try:
            return int(op, 0)
        except ValueError:
            continue
    return 0


def _successors(ins: list[Instruction], i: int, spec: ArchSpec) -> list[int]:
    from .deps import branch_targets  # numpy (the tune extra); register_wgmma_hazards' PTX test needs none

    x = ins[i]
    n = len(ins)
    falls = [i + 1] if i + 1 < n else []
    if not x.control_flow:
        return falls
    info = spec.lookup(x.base)
    if info is not None and info.exits:
        return falls if x.guard else []
    targets = branch_targets(x, n)
    if info is not None and info.branch and targets and not x.guard:
        return targets
    return targets + falls  # a guarded branch, or control flow the table does not say more of: both ways


def _join(a: tuple[tuple[Group, ...], Group], b: tuple[tuple[Group, ...], Group]) -> tuple[tuple[Group, ...], Group]:
    qa, oa = a
    qb, ob = b
    n = max(len(qa), len(qb))
    qa = ((0, 0),) * (n - len(qa)) + qa
    qb = ((0, 0),) * (n - len(qb)) + qb
    return tuple((x[0] | y[0], x[1] | y[1]) for x, y in zip(qa, qb)), (oa[0] | ob[0], oa[1] | ob[1])


def _commit(queue: tuple[Group, ...], group: Group) -> tuple[Group, ...]:
    """``queue`` with ``group`` appended; past :data:`MAX_GROUPS`, the two oldest are merged (they retire
    together at the latest)."""
    if len(queue) >= MAX_GROUPS:
        queue = ((queue[0][0] | queue[1][0], queue[0][1] | queue[1][1]), *queue[2:])
    return (*queue, group)


def _writes(x: Instruction, spec: ArchSpec) -> tuple[int, int]:
    """(registers written, registers read) as named; a pinned instruction the table does not describe is taken to
    write its first operand when that is a plain register and to read the others."""
    from .deps import semantics

    sem = semantics(x, spec, exact=True)
    if sem.pinned is None:
        return sem.writes, sem.reads
    reads = 0
    for o in x.operands[1:]:
        reads |= registers(o, 1)
    if x.operands and is_plain_reg(x.operands[0].removesuffix(".reuse")):
        return registers(x.operands[0], 1), reads
    return 0, reads


def async_mma_hazards(ins: Sequence[Instruction], spec: ArchSpec | None = None) -> list[Hazard]:
    """Every instruction of ``ins`` (one kernel, in slot order) that races with a wgmma still in flight; ``spec``:
    the table of the kernel's architecture (default: :data:`kbuild.arch.DEFAULT_SM`'s)."""
    spec = spec or arch_spec(DEFAULT_SM)
    ins = list(ins)
    if not any(x.base in ASYNC_MMA for x in ins):
        return []
    empty: tuple[tuple[Group, ...], Group] = ((), (0, 0))
    state_in: dict[int, tuple[tuple[Group, ...], Group]] = {0: empty}
    work = [0]
    found: dict[tuple[int, str], Hazard] = {}
    while work:
        i = work.pop()
        queue, open_ = state_in[i]
        x = ins[i]
        if x.base in ASYNC_MMA:
            acc, a = mma_operands(x)
            open_ = (open_[0] | acc, open_[1] | a)
            if ASYNC_MMA_COMMIT in x.operands:
                queue = _commit(queue, open_)
                open_ = (0, 0)
        elif (n := _wait_count(x)) is not None:
            queue = queue[len(queue) - n:] if len(queue) > n else queue
        else:
            writes, reads = _writes(x, spec)
            acc_live = open_[0]
            a_live = open_[1]
            for g in queue:
                acc_live |= g[0]
                a_live |= g[1]
            for bits, kind in ((writes & a_live & ~acc_live, "writes an in-flight A fragment"),
                               (writes & acc_live, "writes an in-flight accumulator"),
                               (reads & acc_live, "reads an in-flight accumulator")):
                if bits:
                    found.setdefault((i, kind), Hazard(i, x.text, describe(bits), kind))
        out = (queue, open_)
        for j in _successors(ins, i, spec):
            old = state_in.get(j)
            new = out if old is None else _join(old, out)
            if new != old:
                state_in[j] = new
                work.append(j)
    return sorted(found.values(), key=lambda h: (h.index, h.kind))


def recorded(hazards: Sequence[object]) -> list[str]:
    """``hazards`` as artefact metadata and reports record them: the first :data:`RECORDED`, as text."""
    return [str(h) for h in hazards[:RECORDED]]


def summary(hazards: Sequence[object]) -> str:
    """The first hazard, and how many more: ``slot 572 (LDSM...) writes an in-flight A fragment: R164 (and 16 more)``."""
    more = f" (and {len(hazards) - 1} more)" if len(hazards) > 1 else ""
    return f"{hazards[0]}{more}" if hazards else "none"


def register_races(ins: Sequence[Instruction], spec: ArchSpec | None = None) -> list[Hazard]:
    """The races of one kernel's SASS when it has a register-operand wgmma (:func:`has_register_wgmma`, one scan),
    else ``[]`` without a control-flow walk: the check every tuner and compile runs."""
    return async_mma_hazards(ins, spec) if has_register_wgmma(ins) else []


def has_register_wgmma(ins: Sequence[Instruction]) -> bool:
    """Whether one kernel's SASS has a wgmma whose A operand is in registers (``HGMMA ... R24, R100, gdesc...``): the
    only kind with an A fragment, and what Triton 3.6 pipelines with the race (triton-lang/triton#9433). One scan,
    no control-flow walk: the cheap test before :func:`async_mma_hazards`, as the PTX test below is for a compile."""
    return any(x.base in ASYNC_MMA and mma_operands(x)[1] for x in ins)


def hazard_key(h: Hazard) -> tuple[str, str, str]:
    """A hazard without its slot: the same race in a reordered schedule of the kernel has the same key."""
    return h.instruction, h.kind, h.registers


def new_hazards(before: Sequence[Instruction], after: Sequence[Instruction],
                spec: ArchSpec | None = None) -> list[Hazard]:
    """The hazards of ``after`` (a reordered schedule of one kernel) that ``before`` (its untouched SASS) does not
    have, compared without their slots; ``[]`` without a walk when ``before`` has no wgmma at all."""
    if not any(x.base in ASYNC_MMA for x in before):
        return []
    had = Counter(hazard_key(h) for h in async_mma_hazards(before, spec))
    out = []
    for h in async_mma_hazards(after, spec):
        if had[hazard_key(h)]:
            had[hazard_key(h)] -= 1
        else:
            out.append(h)
    return out


#: a wgmma in PTX whose A operand is a register vector (``{acc...}, {%r..}, desc``): the only kind with an A fragment
_PTX_REGISTER_WGMMA = re.compile(r"wgmma\.mma_async[^\n;]*\}\s*,\s*\{")


def register_wgmma_hazards(cubin: bytes, kernel: str, ptx: str | None = None) -> list[Hazard]:
    """:func:`register_races` of ``kernel`` in ``cubin``: ``[]`` without a disassembly when its ``ptx`` is given and
    has no wgmma with a register A operand (a regular-expression search) or the cubin's architecture has no wgmma
    (its row in :mod:`kbuild.arch`)."""
    if ptx is not None and not _PTX_REGISTER_WGMMA.search(ptx):
        return []
    from .disasm import disassemble
    from .elf import Cubin

    binary = Cubin(cubin, origin=f"the cubin of {kernel}")
    row = find(binary.sm)
    if row is None or not row.wgmma:
        return []
    return register_races(disassemble(binary, kernel), arch_spec(binary.sm, binary.origin))


__all__ = ["MAX_GROUPS", "RECORDED", "WGMMA_RACE_ISSUE", "Hazard", "async_mma_hazards", "has_register_wgmma",
           "hazard_key", "mma_operands", "new_hazards", "recorded", "register_races", "register_wgmma_hazards",
           "summary"]

"""The dependency model of one kernel: what every instruction reads and writes, which ones are pinned,
the basic blocks, and the issue-distance constraints that ptxas's stall counts encode.

Every opcode fact (operands, widths, implicit operands, memory, pins, control flow, DEPBAR forms, nv.info
attributes) comes from the architecture's table in :mod:`kbuild.sass.isa`; this module only applies it.

Rules (each has a mutation test in ``tests/sass/test_sass_rules.py``):

* **pinned** — control flow, barriers, fences, async copies, atomics, Hopper async operations, opcodes
  not in the table, operands we cannot parse, and instructions addressed by relocations or by nv.info
  records we do not rewrite. A pinned instruction never moves and nothing is swapped with it, so
  nothing crosses it.
* **block** — swaps happen inside a basic block only.
* **registers** — two instructions conflict when one writes a register (R/UR/P/UP, with vector widths
  and implicit operands) that the other reads or writes.
* **memory** — a store conflicts with any load or store of the same space; an access of unknown
  space conflicts with every store, and every load conflicts with an unknown store.
* **scoreboard** — an instruction with a non-zero wait mask never moves down (so nothing is hoisted
  above a wait that may guard it); an instruction never crosses a waiter of a barrier it sets; two
  setters of a barrier counted by ``DEPBAR.LE`` never swap; and two variable-latency instructions
  (memory, MUFU, SHFL, S2R, LDC, conversions, anything that carries a barrier in this kernel) never
  swap, because ptxas relies on in-order completion (only the last of several MUFU.EX2 gets a barrier).
* **distance** — the summed stalls between two instructions never drop below ``min(original, cap)``
  for: every fixed-latency RAW and WAW pair; every WAR pair whose reader has no read barrier (seen on
  the H200: a ULDC.64 one cycle after a ULEA reading the same UR clobbered it); a barrier setter and
  its waiter; every instruction and the nearest pinned instruction on each side (seen: an LDS one
  cycle after ``BAR.SYNC.DEFER_BLOCKING`` read stale data); and, across block entry and exit, anything
  that touches a register another block may produce or consume. A shortfall is repaired by raising
  the stall of the instruction issued just before the consumer, to at most 15 (11 with the yield
  bit, which nvdisasm rejects above that); otherwise the move is illegal.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from . import control
from .disasm import Instruction
from .elf import Cubin, NvInfoRecord
from .isa import FIXED_CAP, LONG_CAP, MODS, ArchSpec, OpInfo, counted_scoreboards
from .operands import (
    ALL_P,
    ALL_UP,
    SAFE_SPECIALS,
    is_plain_pred,
    is_plain_reg,
    registers,
    shape,
    width_from_mods,
)

log = logging.getLogger(__name__)

_HEX = re.compile(r"0x[0-9a-fA-F]+")


@dataclass
class Sem:
    """What one instruction does, as far as moving it is concerned."""

    reads: int = 0
    writes: int = 0
    space: str | None = None
    mem_read: bool = False
    mem_write: bool = False
    pinned: str | None = None
    cap: int = FIXED_CAP
    stall: int = 0
    wait: int = 0
    sets: int = 0  # scoreboard bit mask set by wbar/rbar
    variable: bool = False
    wbar: int = control.NO_BARRIER
    rbar: int = control.NO_BARRIER


def _resolve(width: int, mods: tuple[str, ...]) -> int:
    return width_from_mods(mods) if width == MODS else width


def semantics(ins: Instruction, spec: ArchSpec, *, exact: bool = False) -> Sem:
    """Read/write sets, memory class and pin reason of ``ins`` under ``spec``'s table.

    The sets over-approximate where that is the safe side for moving instructions: an address in brackets is
    read as wide as the access, an ``LDSM`` writes four registers. ``exact`` gives the registers really named
    instead (an address its own registers, two with ``.64``; the table's ``exact_out_width``), for checks where
    an extra register is a false report (:mod:`kbuild.sass.hazards`)."""
    sem = Sem()
    info: OpInfo | None = spec.lookup(ins.base)
    if ins.control_flow:
        sem.pinned = "control flow"
        return sem
    if info is None:
        sem.pinned = f"opcode {ins.base} not in the {spec.family} table"
        return sem
    if info.pinned:
        sem.pinned = info.pinned
        return sem
    mods = ins.modifiers
    bad = [m for m in mods if m in info.pin_modifiers]
    if bad:
        sem.pinned = f"{ins.base} with .{'.'.join(bad)}"
        return sem
    if ins.extra and ins.extra != info.predicate_field:
        sem.pinned = f"unexpected predicate field {ins.extra!r}"
        return sem
    ops = list(ins.operands)
    for o in ops:
        sh = shape(o)
        if sh is None:
            sem.pinned = f"cannot parse operand {o!r}"
            return sem
        if sh == "special" and not (info.special_ok and SAFE_SPECIALS.match(o)):
            sem.pinned = f"special register {o}"
            return sem
    # never narrower than the modifiers say (.64/.128/WIDE), whatever the table entry
    out_w = max(_resolve(info.out_width, mods), width_from_mods(mods))
    if exact and info.exact_out_width is not None:
        out_w = info.exact_out_width(mods)
    src_w = max(_resolve(info.src_width, mods), width_from_mods(mods))
    # leading outputs
    i = 0
    pattern = [p for p in info.outs.split(",") if p]
    for p in pattern:
        if p == "R":
            if i >= len(ops) or not is_plain_reg(ops[i]):
                sem.pinned = f"operand {i} of {ins.opcode} is not the register its table entry expects"
                return sem
            sem.writes |= registers(ops[i], out_w)
            i += 1
        elif p == "P":
            if i >= len(ops) or not is_plain_pred(ops[i]):
                sem.pinned = f"operand {i} of {ins.opcode} is not the predicate its table entry expects"
                return sem
            sem.writes |= registers(ops[i], 1)
            i += 1
        elif p in ("P?", "P*"):
            for _ in range(1 if p == "P?" else 2):
                if i < len(ops) and is_plain_pred(ops[i]):
                    sem.writes |= registers(ops[i], 1)
                    i += 1
                else:
                    break
    for o in ops[i:]:
        if exact and "[" in o:
            sem.reads |= registers(o, 1)
        else:
            sem.reads |= registers(o, src_w, bracket_min=2 if info.space else 1)
    if ins.guard:
        sem.reads |= registers(ins.guard.lstrip("@!"), 1)
    for imp in info.implicit_reads:
        sem.reads |= ALL_P if imp == "P*" else ALL_UP
    for imp in info.implicit_writes:
        sem.writes |= ALL_P if imp == "P*" else ALL_UP
    sem.space, sem.mem_read, sem.mem_write, sem.cap = info.space, info.mem_read, info.mem_write, info.cap
    sem.variable = info.variable or info.space is not None
    return sem


def mem_conflict(a: Sem, b: Sem) -> bool:
    if a.space is None or b.space is None:
        return False
    if not (a.mem_write or b.mem_write):
        return False
    return a.space == b.space or a.space == "unknown" or b.space == "unknown"


@dataclass
class Analysis:
    """Static facts about one kernel, derived from the original cubin only."""

    kernel: str
    spec: ArchSpec
    instructions: list[Instruction]
    words: list[int]
    sems: list[Sem]
    block_of: np.ndarray  # original slot → block index
    block_start: np.ndarray  # block index → first slot
    block_end: np.ndarray  # block index → one past the last slot
    depbar_mask: int
    # distance constraints: producer node, consumer node, required cycles.
    # Nodes < n are instructions; n + 2*b is block b's entry, n + 2*b + 1 its exit.
    cons_p: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cons_c: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cons_req: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    offset_records: list[tuple[int, int]] = field(default_factory=list)  # (file offset of u32, attr)
    #: Per instruction: reuse bit → operand index, read from the ``.reuse`` annotations nvdisasm printed on
    #: the original (empty when the bits and the annotations do not pair up one to one).
    reuse_map: list[dict[int, int]] = field(default_factory=list)
    #: Per instruction: inside a loop that holds a polling instruction (``OpInfo.polls``, or a memory access
    #: pinned for its ordering modifiers); its yield bit is never cleared.
    in_poll_loop: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))

    @property
    def n(self) -> int:
        return len(self.instructions)

    def loops(self) -> list[tuple[int, int]]:
        """``(start, end)`` slots of every loop: a backward ``BRA`` at ``end - 1`` that jumps to ``start``."""
        return [(t, i + 1) for i, ins in enumerate(self.instructions) if _is_branch(self.spec, ins)
                for t in branch_targets(ins, self.n) if t <= i]

    @property
    def pinned(self) -> np.ndarray:
        return np.array([s.pinned is not None for s in self.sems], dtype=bool)

    def pinned_fraction(self) -> float:
        return float(self.pinned.mean()) if self.n else 0.0

    def pair_conflict(self, a: int, b: int) -> str | None:
        """Why instructions ``a`` (earlier) and ``b`` (later), adjacent, cannot swap (static rules)."""
        sa, sb = self.sems[a], self.sems[b]
        if sa.pinned or sb.pinned:
            which, s = (a, sa) if sa.pinned else (b, sb)
            return f"pinned: instruction at 0x{16 * which:x} ({s.pinned})"
        if self.block_of[a] != self.block_of[b]:
            return "block: the move would leave a basic block"
        if sa.writes & (sb.reads | sb.writes) or sa.reads & sb.writes:
            return "registers: the two instructions share a register one of them writes"
        if mem_conflict(sa, sb):
            return f"memory: {sa.space}/{sb.space} access order with a store"
        if sa.wait:
            return "scoreboard: an instruction with a wait mask never moves down"
        if sa.variable and sb.variable:
            return "scoreboard: variable-latency instructions keep their order (in-order completion)"
        if sa.sets & sb.wait:
            return "scoreboard: a barrier setter never crosses a waiter on that barrier"
        if sa.sets & sb.sets & self.depbar_mask:
            return "scoreboard: two setters of a DEPBAR-counted barrier keep their order"
        return None


# --- control-code edits -----------------------------------------------------------------------------
#
# The rules for editing control codes in place (kbuild.sass.schedule applies them, kbuild.sass.verify re-checks
# them on the written cubin). Each is stated for instruction ``x`` of the original kernel.


def yield_editable(an: Analysis, x: int, value: bool) -> str | None:
    """Why the yield bit of ``x`` may not become ``value`` (None: it may).

    The yield bit is a hint to the warp scheduler; it changes when other warps issue, never what this
    warp computes. Edits stay off pinned instructions (control flow, barriers, fences, atomics: nothing
    whose meaning we do not model), and a yield bit inside a loop that polls another warp or agent is
    never cleared (ptxas's yield may be what lets the other side progress). Setting it needs a stall
    of at most 11 (:data:`control.MAX_STALL_YIELD`: nvdisasm rejects more with yield); the caller checks
    that against the current stall."""
    sem = an.sems[x]
    if sem.pinned:
        return f"pinned: instruction at 0x{16 * x:x} ({sem.pinned})"
    if not value and len(an.in_poll_loop) and an.in_poll_loop[x]:
        return "yield: never cleared inside a loop that polls another warp (mbarrier wait, atomics, sleep)"
    return None


def stall_lowerable(sem: Sem) -> str | None:
    """Why the stall of an instruction with semantics ``sem`` may never be lowered (None: it may, as far
    as the distance constraints allow).

    A stall is only lowered on fixed-latency work: variable-latency instructions and anything that
    sets or waits on a scoreboard are covered by scoreboards, whose setting and clearing ptxas times with
    these stalls in ways the table does not model; pinned instructions keep everything."""
    if sem.pinned:
        return f"pinned ({sem.pinned})"
    if sem.variable:
        return "variable-latency instruction (its hand-over is the scoreboard's, not the stall's)"
    if sem.sets or sem.wait:
        return "sets or waits on a scoreboard"
    return None


def _reuse_map(ins: Instruction, word: int) -> dict[int, int]:
    flags = control.decode(word).reuse
    annotated = [j for j, o in enumerate(ins.operands) if o.endswith(".reuse")]
    bits = [k for k in range(control.REUSE_BITS) if flags >> k & 1]
    return dict(zip(bits, annotated)) if len(bits) == len(annotated) else {}


def reuse_settable(an: Analysis, x: int, y: int | None) -> int:
    """The reuse bits that may be set on ``x`` when ``y`` is the instruction issued right after it.

    A reuse flag keeps the operand's value in the operand cache for the next instruction. Setting one is
    allowed only where it cannot feed a stale value:

    * only bits ptxas itself set on ``x`` (so we know which operand each one annotates: nvdisasm's
      ``.reuse`` text on the original), on a plain register operand other than RZ/URZ;
    * ``x`` does not write that register (over-approximated as 4 wide) — otherwise the cache would hold
      the value from before the write;
    * ``y`` is in the same basic block, neither is pinned, ``y`` has the same opcode (modifiers included),
      the same number of operands and the same guard as ``x`` (so the operand sits in the same hardware
      slot), and names the very same operand text there (modulo ``.reuse``): the next reader reads it in
      the same slot with no write in between."""
    if y is None or not an.reuse_map or not an.reuse_map[x]:
        return 0
    sx, sy = an.sems[x], an.sems[y]
    if sx.pinned or sy.pinned or an.block_of[x] != an.block_of[y]:
        return 0
    ix, iy = an.instructions[x], an.instructions[y]
    if ix.opcode != iy.opcode or ix.guard != iy.guard or len(ix.operands) != len(iy.operands):
        return 0
    bits = 0
    for k, j in an.reuse_map[x].items():
        op = ix.operands[j].removesuffix(".reuse")
        if not is_plain_reg(op) or op.startswith(("RZ", "URZ")) or "." in op:
            continue
        if iy.operands[j].removesuffix(".reuse") != op:
            continue
        if registers(op, 4) & sx.writes:
            continue
        bits |= 1 << k
    return bits


def branch_targets(ins: Instruction, n: int) -> list[int]:
    """Slots an instruction's immediate operands can jump to (16-byte aligned offsets inside the kernel)."""
    out = []
    for h in _HEX.findall(" ".join(ins.operands)):
        t = int(h, 16)
        if t % 16 == 0 and t // 16 < n:
            out.append(t // 16)
    return out


def _is_branch(spec: ArchSpec, ins: Instruction) -> bool:
    info = spec.lookup(ins.base)
    return info is not None and info.branch


def _ends_block(spec: ArchSpec, ins: Instruction) -> bool:
    """Control flow: nvdisasm says so, or the table does."""
    info = spec.lookup(ins.base)
    return ins.control_flow or (info is not None and info.ends_block)


def _blocks(ins: list[Instruction], spec: ArchSpec, extra_leaders: set[int]) -> tuple[np.ndarray, ...]:
    n = len(ins)
    leaders = {0} | {x for x in extra_leaders if 0 <= x < n}
    for i, x in enumerate(ins):
        if _ends_block(spec, x):
            leaders.add(i)
            leaders.add(i + 1)
            leaders.update(branch_targets(x, n))
    starts = sorted(x for x in leaders if x < n)
    block_of = np.zeros(n, dtype=np.int64)
    ends = []
    for b, s in enumerate(starts):
        e = starts[b + 1] if b + 1 < len(starts) else n
        block_of[s:e] = b
        ends.append(e)
    return block_of, np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64)


def _depbar_mask(ins: Iterable[Instruction], spec: ArchSpec) -> int:
    """Scoreboards that some ``DEPBAR``-like instruction counts (all six when one names none we can read)."""
    mask = 0
    for x in ins:
        info = spec.lookup(x.base)
        if info is not None and info.counts_scoreboards:
            counted = counted_scoreboards(x.operands)
            if counted is None:
                return 0x3F
            mask |= counted
    return mask


def _iter_bits(x: int):
    while x:
        low = x & -x
        yield low.bit_length() - 1
        x ^= low


def analyze(cubin: Cubin, kernel: str, instructions: list[Instruction], spec: ArchSpec) -> Analysis:
    """Derive every static fact about ``kernel`` from the original cubin and its disassembly."""
    text = cubin.text(kernel)
    words = control.words_from_bytes(cubin.section_bytes(text))
    return analyze_parts(kernel, instructions, words, spec, cubin.nvinfo(kernel), cubin.relocation_offsets(kernel))


def analyze_parts(kernel: str, instructions: list[Instruction], words: list[int], spec: ArchSpec,
                  nvinfo: list[NvInfoRecord] | tuple[()] = (), reloc_offsets: list[int] | tuple[()] = ()) -> Analysis:
    """:func:`analyze` from its parts (the tests build synthetic kernels this way)."""
    n = len(words)
    if len(instructions) != n:
        raise ValueError("instructions and words are not aligned")
    sems = [semantics(x, spec) for x in instructions]
    with_barrier: set[str] = set()
    for x, s, w in zip(instructions, sems, words):
        c = control.decode(w)
        s.stall, s.wait, s.sets, s.wbar, s.rbar = c.stall, c.wait, c.barriers_set(), c.wbar, c.rbar
        if s.sets:
            with_barrier.add(x.base)
    for x, s in zip(instructions, sems):
        if x.base in with_barrier:
            s.variable = True
    extra_leaders: set[int] = set()
    offset_records: list[tuple[int, int]] = []
    attrs = spec.nvinfo
    # nv.info: rewrite plain offset lists; pin what anything else might address
    for rec in nvinfo:
        if rec.fmt != 0x04:
            continue
        words32 = [int.from_bytes(rec.value[k:k + 4], "little") for k in range(0, len(rec.value) - 3, 4)]
        if rec.attr in attrs.offset_lists and rec.section == f".nv.info.{kernel}":
            for k, v in enumerate(words32):
                if v % 16 or v // 16 >= n:
                    # an offset we cannot map: pin conservatively by refusing to rewrite this record
                    raise ValueError(f"nv.info {attrs.name(rec.attr)} holds offset 0x{v:x} outside .text.{kernel}")
                offset_records.append((rec.value_offset + 4 * k, rec.attr))
            continue
        if rec.attr in attrs.no_offsets:
            continue
        for v in words32:
            if v % 16 == 0 and v // 16 < n:
                i = v // 16
                if sems[i].pinned is None:
                    sems[i].pinned = f"addressed by nv.info attribute {attrs.name(rec.attr)}"
                if rec.attr in attrs.branch_targets:
                    extra_leaders.add(i)
    for off in reloc_offsets:
        i = off // 16
        if 0 <= i < n and sems[i].pinned is None:
            sems[i].pinned = f"relocation at 0x{off:x}"
    block_of, starts, ends = _blocks(instructions, spec, extra_leaders)
    an = Analysis(kernel, spec, instructions, words, sems, block_of, starts, ends, _depbar_mask(instructions, spec),
                  offset_records=offset_records)
    an.reuse_map = [_reuse_map(x, w) for x, w in zip(instructions, words)]
    an.in_poll_loop = _poll_loops(an)
    _constraints(an)
    return an


def _may_poll(spec: ArchSpec, ins: Instruction, sem: Sem) -> bool:
    info = spec.lookup(ins.base)
    if info is None:
        return True  # unknown: assume the worst
    return info.polls or (info.space is not None and sem.pinned is not None)


def _poll_loops(an: Analysis) -> np.ndarray:
    out = np.zeros(an.n, dtype=bool)
    for s, e in an.loops():
        if any(_may_poll(an.spec, an.instructions[i], an.sems[i]) for i in range(s, e)):
            out[s:e] = True
    return out


# --- distance constraints ---------------------------------------------------------------------------
#
# ptxas's stall counts encode how many cycles each fixed-latency result needs before its consumer may
# issue. A move must never shorten such a distance below what ptxas had (capped at the latency that
# can matter). We record, once, every (producer, consumer, required cycles) triple; the move code and
# the verifier then only compare summed stalls against ``required``.
#
# Each basic block is scanned from top to bottom. For every instruction ``c`` the scan collects
# ``need``: earlier instructions of the block that ``c`` must stay far enough from, each with a cap.
# The steps, in this order (the order only decides the order of the constraint arrays):
#
# 1. ``_pinned_neighbours``: the nearest pinned instruction before ``c``, and, when ``c`` is pinned,
#    everything since the previous pinned one (seen on the H200: an LDS one cycle after
#    ``BAR.SYNC.DEFER_BLOCKING`` read stale data);
# 2. ``_register_hazards``: the last fixed-latency writer of every register ``c`` reads or writes (RAW,
#    WAW), and every reader without a read barrier of a register ``c`` writes (WAR; seen on the H200);
# 3. ``_scoreboard_waits``: every setter of a scoreboard ``c`` waits on.
#
# Steps 2 and 3 also report whether ``c`` depends on something produced *outside* the block (a register
# not touched earlier in the block, or a wait with no setter in it); then ``c`` keeps its distance to the
# block's entry. After the last instruction, ``_block_exit_needs`` lists what must stay far enough from
# the block's exit: live-out fixed-latency results, readers without a read barrier, pending setters.
# Nodes < n are instructions; n + 2*b is block b's entry, n + 2*b + 1 its exit.


@dataclass
class _BlockScan:
    """What the scan of one basic block has seen above the current instruction."""

    start: int
    last_writer: dict[int, int] = field(default_factory=dict)  # register → instruction
    readers: dict[int, list[int]] = field(default_factory=dict)  # register → readers since its last write
    setters: dict[int, list[int]] = field(default_factory=dict)  # scoreboard → setters since its last wait
    touched: int = 0  # registers read or written so far in the block
    pinned_seen: list[int] = field(default_factory=list)

    def record(self, c: int, sem: Sem) -> None:
        """Take instruction ``c`` into the state, after its constraints were collected."""
        self.touched |= sem.reads | sem.writes
        for r in _iter_bits(sem.reads):
            self.readers.setdefault(r, []).append(c)
        for r in _iter_bits(sem.writes):
            self.last_writer[r] = c
            self.readers[r] = []
        for k in _iter_bits(sem.sets):
            self.setters.setdefault(k, []).append(c)


def _need(need: dict[int, int], p: int, cycles: int) -> None:
    need[p] = max(need.get(p, 0), cycles)


def _pinned_neighbours(scan: _BlockScan, c: int, sem: Sem, need: dict[int, int]) -> None:
    # Only the nearest pinned instruction on each side needs a constraint: pinned instructions never
    # move and nothing crosses them, so farther ones are implied.
    if scan.pinned_seen:
        need[scan.pinned_seen[-1]] = LONG_CAP
    if sem.pinned:
        for q in range(scan.pinned_seen[-1] + 1 if scan.pinned_seen else scan.start, c):
            need[q] = LONG_CAP
        scan.pinned_seen.append(c)


def _register_hazards(scan: _BlockScan, sems: list[Sem], c: int, need: dict[int, int]) -> bool:
    """RAW, WAW and WAR distances of ``c``; True when ``c`` touches a register not seen in the block yet."""
    sem = sems[c]
    from_outside = bool((sem.reads | sem.writes) & ~scan.touched)
    for r in _iter_bits(sem.reads):  # RAW: a fixed-latency result must be ready
        p = scan.last_writer.get(r)
        if p is not None and sems[p].wbar == control.NO_BARRIER:
            _need(need, p, sems[p].cap)
    for r in _iter_bits(sem.writes):
        p = scan.last_writer.get(r)  # WAW: the earlier result must not land after ours
        if p is not None and sems[p].wbar == control.NO_BARRIER:
            _need(need, p, sems[p].cap)
        for q in scan.readers.get(r, ()):
            # WAR: seen on the H200, a ULDC.64 issued one cycle after a ULEA that read the same
            # uniform register clobbered it (softmax, illegal address). Every reader without a read
            # barrier keeps its distance to the next writer.
            if sems[q].rbar == control.NO_BARRIER:
                _need(need, q, max(sems[q].cap, sem.cap))
    return from_outside


def _scoreboard_waits(scan: _BlockScan, c: int, sem: Sem, need: dict[int, int]) -> bool:
    """Distances from the setters of every scoreboard ``c`` waits on; True when one has no setter in the block."""
    from_outside = False
    for k in _iter_bits(sem.wait):
        ps = scan.setters.get(k)
        if ps:
            for p in ps:
                _need(need, p, FIXED_CAP)
        else:
            from_outside = True
        scan.setters[k] = []
    return from_outside


def _block_exit_needs(scan: _BlockScan, sems: list[Sem]) -> dict[int, int]:
    """What must keep its distance to the block's exit: live-out fixed-latency results, readers without a
    read barrier (a later block may overwrite their sources), and setters nobody in the block waited on."""
    need: dict[int, int] = {}
    for p in set(scan.last_writer.values()):
        if sems[p].wbar == control.NO_BARRIER:
            _need(need, p, sems[p].cap)
    for rs in scan.readers.values():
        for q in rs:
            if sems[q].rbar == control.NO_BARRIER:
                _need(need, q, sems[q].cap)
    for ps in scan.setters.values():
        for p in ps:
            _need(need, p, FIXED_CAP)
    return need


def _constraints(an: Analysis) -> None:
    """Fill ``an.cons_p``, ``an.cons_c`` and ``an.cons_req`` (see the comment above)."""
    n, sems = an.n, an.sems
    prefix = np.concatenate([[0], np.cumsum([s.stall for s in sems], dtype=np.int64)])
    # a value from another block may come from any fixed-latency producer of the kernel
    fixed_caps = [s.cap for s in sems if s.pinned is None and s.writes and s.wbar == control.NO_BARRIER]
    entry_cap = max([FIXED_CAP, *fixed_caps]) if fixed_caps else FIXED_CAP
    cp: list[int] = []
    cc: list[int] = []
    cr: list[int] = []

    def add(p: int, c: int, cap: int, dist: int) -> None:
        """Producer ``p`` stays ``min(dist, cap)`` cycles before consumer ``c`` (nothing when that is 0)."""
        req = min(dist, cap)
        if req > 0:
            cp.append(p)
            cc.append(c)
            cr.append(req)

    for b, (s, e) in enumerate(zip(an.block_start.tolist(), an.block_end.tolist())):
        entry, exit_ = n + 2 * b, n + 2 * b + 1
        scan = _BlockScan(start=s)
        for c in range(s, e):
            need: dict[int, int] = {}  # earlier instruction → cap on the cycles it keeps before c
            _pinned_neighbours(scan, c, sems[c], need)
            from_outside = _register_hazards(scan, sems, c, need)
            from_outside |= _scoreboard_waits(scan, c, sems[c], need)
            for p, cap in need.items():
                if p != c:
                    add(p, c, cap, int(prefix[c] - prefix[p]))
            if from_outside:
                add(entry, c, entry_cap, int(prefix[c] - prefix[s]))
            scan.record(c, sems[c])
        for p, cap in _block_exit_needs(scan, sems).items():
            add(p, exit_, cap, int(prefix[e] - prefix[p]))
    an.cons_p = np.array(cp, dtype=np.int64)
    an.cons_c = np.array(cc, dtype=np.int64)
    an.cons_req = np.array(cr, dtype=np.int64)

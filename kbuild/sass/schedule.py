"""A mutable schedule over one kernel's instructions: legal moves and control-code edits, apply/undo, diff,
and the cubin.

A move takes the instruction in slot ``t`` one slot up (``UP``) or down (``DOWN``), which is a swap of
two adjacent instructions. Legality = the static pair rules of :meth:`Analysis.pair_conflict` plus
the issue-distance constraints (with stall repair). The mask is computed with numpy from the current
positions and stalls; applying a move updates O(1) slots plus one cumulative sum.

Besides one-slot moves, a schedule takes (issue 15):

* **far moves** (:meth:`Schedule.apply_far`): one instruction ``k`` slots up or down in one step, made of
  ``k`` legal one-slot moves (every rule and stall repair applies at each step); :meth:`Schedule.reach`
  says how far it can go. :meth:`Schedule.undo` undoes the whole far move.
* **control-code edits**: the yield bit (:func:`kbuild.sass.deps.yield_editable`), the reuse flags
  (clearing always; setting only what :func:`kbuild.sass.deps.reuse_settable` proves) and the stall
  (raised up to the field's limit, lowered only while every distance constraint still holds, on
  instructions :func:`kbuild.sass.deps.stall_lowerable` allows).

Every entry of :attr:`Schedule.moves` has a ``record``: a JSON-able tuple that
:meth:`Schedule.apply_edit` replays on a reset schedule:

============================ ====================================================================
record                       meaning
============================ ====================================================================
``(slot, direction)``        one-slot move of the instruction now in ``slot`` (``UP`` 0 / ``DOWN`` 1)
``("far", slot, dir, k)``    the instruction now in ``slot`` moved ``k`` slots in ``dir``
``("yield", instr, 0|1)``    yield bit of instruction ``instr`` (its original slot) cleared / set
``("reuse", instr, flags)``  reuse flags of ``instr`` become ``flags`` (0–15)
``("stall", instr, value)``  stall of ``instr`` becomes ``value``
============================ ====================================================================
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kbuild.errors import UsageError

from . import control, elf
from .deps import Analysis, analyze
from .disasm import Instruction, disassemble
from .isa import arch_spec

if TYPE_CHECKING:
    from .verify import Verifier

UP, DOWN = 0, 1
_DIR_NAME = {UP: "up", DOWN: "down"}


class IllegalMove(UsageError):
    """A move that would break a dependency; the message names the offsets and the rule."""


@dataclass
class Move:
    slot: int  # slot of the moved instruction before the move
    direction: int
    swap: int  # the pair (swap, swap+1) that was exchanged
    upper: int  # instruction originally in slot ``swap``
    lower: int  # instruction originally in slot ``swap + 1``
    repairs: list[tuple[int, int]] = field(default_factory=list)  # (instruction, previous stall)
    cleared: list[int] = field(default_factory=list)  # instructions whose reuse flags this move cleared

    @property
    def moved(self) -> int:
        return self.lower if self.direction == UP else self.upper

    @property
    def record(self) -> tuple[int, int]:
        return (self.slot, self.direction)


@dataclass
class FarMove:
    """``len(steps)`` one-slot moves of one instruction, applied and undone as one."""

    slot: int
    direction: int
    steps: list[Move]

    @property
    def moved(self) -> int:
        return self.steps[0].moved

    @property
    def record(self) -> tuple[str, int, int, int]:
        return ("far", self.slot, self.direction, len(self.steps))


@dataclass
class Edit:
    """A control-code edit of one instruction: ``kind`` is ``yield``, ``reuse`` or ``stall``."""

    kind: str
    instr: int
    value: int
    old: tuple[int, ...]  # what undo restores (per kind)

    @property
    def record(self) -> tuple[str, int, int]:
        return (self.kind, self.instr, self.value)


Entry = Move | FarMove | Edit
EDIT_KINDS = ("yield", "reuse", "stall")


def _parse_record(record: Any) -> tuple[str, tuple[int, ...]]:
    """``(kind, fields)`` of a move record; UsageError naming the record when it is malformed."""
    rec = tuple(record) if isinstance(record, (list, tuple)) else None
    if rec and len(rec) == 2 and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in rec):
        if rec[1] not in (UP, DOWN):
            raise UsageError(f"move record {record!r}: direction must be 0 (up) or 1 (down)")
        return "move", (int(rec[0]), int(rec[1]))
    if rec and isinstance(rec[0], str) and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in rec[1:]):
        kind, vals = rec[0], tuple(int(v) for v in rec[1:])
        if kind == "far" and len(vals) == 3 and vals[1] in (UP, DOWN):
            return kind, vals
        if kind in EDIT_KINDS and len(vals) == 2:
            return kind, vals
    raise UsageError(f"move record {record!r} is not (slot, direction), ('far', slot, direction, k) or "
                     f"('yield'|'reuse'|'stall', instruction, value)")


def _load_cubin(source: bytes | str | os.PathLike[str]) -> elf.Cubin:
    if isinstance(source, (bytes, bytearray)):
        return elf.Cubin(bytes(source))
    return elf.load(source)


class Schedule:
    """The current order of one kernel's instructions, starting from the cubin's own order."""

    def __init__(self, cubin: elf.Cubin | None, analysis: Analysis) -> None:
        self.cubin = cubin
        self.analysis = an = analysis
        self.kernel = an.kernel
        self.n = n = an.n
        self._orig_stall = np.array([s.stall for s in an.sems], dtype=np.int64)
        self._pinned = an.pinned
        self._wait = np.array([s.wait for s in an.sems], dtype=np.int64)
        self._yield0 = np.array([control.decode(w).yield_ for w in an.words], dtype=bool)
        self._reuse0 = np.array([control.decode(w).reuse for w in an.words], dtype=np.int64)
        self._lo, self._hi = control.split_words(control.words_to_bytes(an.words))
        nb = len(an.block_start)
        self._virt_pos = np.empty(2 * nb, dtype=np.int64)
        self._virt_pos[0::2] = an.block_start
        self._virt_pos[1::2] = an.block_end
        self._block_start_of_slot = an.block_start[an.block_of]
        self._by_p: list[list[int]] = [[] for _ in range(n + 2 * nb)]
        self._by_c: list[list[int]] = [[] for _ in range(n + 2 * nb)]
        for k, (p, c) in enumerate(zip(an.cons_p.tolist(), an.cons_c.tolist())):
            self._by_p[p].append(k)
            self._by_c[c].append(k)
        self._real_p = an.cons_p < n
        self._real_c = an.cons_c < n
        self._verifier: Verifier | None = None
        self.reset()

    # --- construction --------------------------------------------------------------------------
    @classmethod
    def from_cubin(cls, source: bytes | str | os.PathLike[str], kernel: str | None = None,
                   *, instructions: list[Instruction] | None = None) -> Schedule:
        """Analyse ``kernel`` of a cubin (bytes or path). Runs nvdisasm once unless ``instructions``
        (from :func:`kbuild.sass.disasm.disassemble`) are given."""
        cubin = _load_cubin(source)
        kernel = cubin.default_kernel(kernel)
        spec = arch_spec(cubin.sm, cubin.origin)
        ins = instructions if instructions is not None else disassemble(cubin, kernel)
        return cls(cubin, analyze(cubin, kernel, ins, spec))

    def reset(self) -> None:
        n = self.n
        self.order = np.arange(n, dtype=np.int64)  # slot → instruction
        self.pos = np.arange(n, dtype=np.int64)  # instruction → slot
        self.stall = self._orig_stall.copy()  # per instruction
        self.reuse_cleared = np.zeros(n, dtype=bool)  # flags dropped by a move next to the instruction
        self.reuse_flags = self._reuse0.copy()  # flags when not dropped (reuse edits change them)
        self.yield_ = self._yield0.copy()
        self._max_stall = np.where(self.yield_, control.MAX_STALL_YIELD, control.MAX_STALL).astype(np.int64)
        self.moves: list[Entry] = []
        self._refresh_prefix()
        if not hasattr(self, "_static0"):
            self._static0 = np.array([self.analysis.pair_conflict(s, s + 1) is None for s in range(n - 1)],
                                     dtype=bool)
        self._static = self._static0.copy()

    def _refresh_prefix(self) -> None:
        self._prefix = np.concatenate([[0], np.cumsum(self.stall[self.order])])

    def _node_pos(self, nodes: np.ndarray) -> np.ndarray:
        n = self.n
        out = np.empty(len(nodes), dtype=np.int64)
        real = nodes < n
        out[real] = self.pos[nodes[real]]
        out[~real] = self._virt_pos[nodes[~real] - n]
        return out

    # --- legality ------------------------------------------------------------------------------
    def legal_moves(self) -> np.ndarray:
        """Bool array of shape ``(n, 2)``: ``[t, UP]`` / ``[t, DOWN]`` is legal for the instruction in slot ``t``."""
        n, an = self.n, self.analysis
        mask = np.zeros((n, 2), dtype=bool)
        if n < 2:
            return mask
        # Every distance constraint in the current schedule: the slots of its producer and consumer
        # (a block's entry or exit for virtual nodes) and how many cycles it has to spare.
        stall_at = self.stall[self.order]  # stall of the instruction in each slot
        headroom_at = self._max_stall[self.order] - stall_at  # how far each slot's stall may still rise
        issued_before = self._prefix  # cycles issued before each slot (cumulative stalls), n + 1 entries
        prod_slot = self._node_pos(an.cons_p)
        cons_slot = self._node_pos(an.cons_c)
        slack = issued_before[cons_slot] - issued_before[prod_slot] - an.cons_req

        # A producer moving DOWN swaps with the slot after it, whose stall then no longer lies between
        # producer and consumer. A shortfall is repaired by raising the stall of the slot just before
        # the consumer (the producer's own stall when it moves into that slot); impossible when the
        # consumer is the instruction it swaps with, or when the stall would exceed its maximum.
        short_down = stall_at[np.minimum(prod_slot + 1, n - 1)] - slack
        repair_slot = np.clip(cons_slot - 1, 0, n - 1)
        repair_room = np.where(cons_slot - 1 == prod_slot + 1, headroom_at[prod_slot], headroom_at[repair_slot])
        blocks_down = self._real_p & (short_down > 0) & ((short_down > repair_room) | (cons_slot == prod_slot + 1))

        # A consumer moving UP swaps with the slot before it, whose stall then no longer counts. The
        # repair raises the stall of the slot just above the consumer's new one; impossible when that
        # slot is outside the block, when the consumer swaps with its own producer, or past the maximum.
        short_up = stall_at[np.maximum(cons_slot - 1, 0)] - slack
        repair_slot_up = cons_slot - 2
        block_start = self._block_start_of_slot[np.clip(cons_slot, 0, n - 1)]
        repair_room_up = headroom_at[np.clip(repair_slot_up, 0, n - 1)]
        blocks_up = self._real_c & (short_up > 0) & (
            (repair_slot_up < block_start) | (short_up > repair_room_up) | (prod_slot == cons_slot - 1))

        # Per instruction: may it move down / up at all? A swap of slots (t, t + 1) is legal when the
        # static pair rules allow it, the upper one may move down and the lower one may move up.
        down_bad = np.zeros(n, dtype=bool)
        up_bad = np.zeros(n, dtype=bool)
        down_bad[an.cons_p[blocks_down]] = True
        up_bad[an.cons_c[blocks_up]] = True
        swap_ok = self._static & ~down_bad[self.order[:-1]] & ~up_bad[self.order[1:]]
        mask[1:, UP] = swap_ok
        mask[:-1, DOWN] = swap_ok
        return mask

    def action_mask(self) -> np.ndarray:
        """Flat ``(2n,)`` mask; action ``2*t + d`` moves slot ``t`` in direction ``d``."""
        return self.legal_moves().reshape(-1)

    def _check_swap(self, s: int) -> tuple[str | None, dict[int, int]]:
        """Why the pair (s, s+1) cannot swap, or the stall repairs the swap needs."""
        n, an = self.n, self.analysis
        if not 0 <= s < n - 1:
            return "block: no instruction to swap with", {}
        a, b = int(self.order[s]), int(self.order[s + 1])
        why = an.pair_conflict(a, b)
        if why:
            return why, {}
        P = self._prefix
        st = self.stall
        repairs: dict[int, int] = {}  # slot (after the swap) → required stall

        def node_pos(x: int) -> int:
            return int(self.pos[x]) if x < n else int(self._virt_pos[x - n])

        new_slot = {s: b, s + 1: a}

        def inst_at(slot: int) -> int:
            return new_slot.get(slot, int(self.order[slot]))

        def stall_at(slot: int) -> int:
            return int(st[inst_at(slot)])

        for k in self._by_p[a]:
            c = int(an.cons_c[k])
            pc = node_pos(c)
            dist = int(P[pc] - P[s]) - int(st[b])
            deficit = int(an.cons_req[k]) - dist
            if deficit > 0:
                r = pc - 1
                if pc == s + 1:
                    return f"distance: 0x{16 * a:x} → 0x{16 * b:x}", {}
                repairs[r] = max(repairs.get(r, stall_at(r)), stall_at(r) + deficit)
        for k in self._by_c[b]:
            p = int(an.cons_p[k])
            pp = node_pos(p)
            dist = int(P[s] - P[pp])
            deficit = int(an.cons_req[k]) - dist
            if deficit > 0:
                r = s - 1
                if pp == s or r < int(self._block_start_of_slot[s]):
                    return (f"distance: moving 0x{16 * b:x} up leaves {dist} of the {int(an.cons_req[k])} cycles "
                            "its producer needs, and no stall in the block can be raised"), {}
                repairs[r] = max(repairs.get(r, stall_at(r)), stall_at(r) + deficit)
        for r, v in repairs.items():
            limit = int(self._max_stall[inst_at(r)])
            if v > limit:
                return (f"distance: keeping the issue distance would need a stall of {v} (> {limit}) at slot "
                        f"{r} (0x{16 * r:x})"), {}
        return None, repairs

    def why_illegal(self, slot: int, direction: int) -> str | None:
        s = slot - 1 if direction == UP else slot
        return self._check_swap(s)[0]

    def is_legal(self, slot: int, direction: int) -> bool:
        return self.why_illegal(slot, direction) is None

    # --- mutation ------------------------------------------------------------------------------
    def apply(self, slot: int, direction: int) -> Move:
        """Move the instruction in ``slot`` one slot ``UP`` or ``DOWN``; IllegalMove if that breaks a rule."""
        if direction not in (UP, DOWN):
            raise ValueError("direction must be UP (0) or DOWN (1)")
        s = slot - 1 if direction == UP else slot
        why, repairs = self._check_swap(s)
        if why:
            which = self.order[slot] if 0 <= slot < self.n else slot
            raise IllegalMove(f"cannot move the instruction at 0x{16 * int(which):x} (slot {slot}) "
                              f"{_DIR_NAME[direction]}: {why}")
        a, b = int(self.order[s]), int(self.order[s + 1])
        mv = Move(slot, direction, s, a, b)
        self.order[s], self.order[s + 1] = b, a
        self.pos[a], self.pos[b] = s + 1, s
        for r, v in repairs.items():
            x = int(self.order[r])
            mv.repairs.append((x, int(self.stall[x])))
            self.stall[x] = v
        for r in (s - 1, s, s + 1):
            if 0 <= r < self.n:
                x = int(self.order[r])
                if not self.reuse_cleared[x]:
                    self.reuse_cleared[x] = True
                    mv.cleared.append(x)
        self._refresh_prefix()
        self._update_static(s)
        self.moves.append(mv)
        return mv

    def apply_action(self, action: int) -> Move:
        return self.apply(action // 2, action % 2)

    # --- far moves -----------------------------------------------------------------------------
    def reach(self, slot: int, direction: int, *, limit: int | None = None,
              bounds: tuple[int, int] | None = None) -> int:
        """How many slots the instruction in ``slot`` can move in ``direction`` by successive legal one-slot
        moves (at most ``limit``; never leaving ``bounds = (start, end)`` slots). The schedule is unchanged."""
        if direction not in (UP, DOWN):
            raise ValueError("direction must be UP (0) or DOWN (1)")
        lo, hi = bounds if bounds is not None else (0, self.n)
        x = int(self.order[slot]) if 0 <= slot < self.n else -1
        if x < 0:
            return 0
        k, depth = 0, len(self.moves)
        try:
            while limit is None or k < limit:
                t = int(self.pos[x])
                if (t - 1 < lo) if direction == UP else (t + 1 >= hi):
                    break
                if self.why_illegal(t, direction) is not None:
                    break
                self.apply(t, direction)
                k += 1
        finally:
            while len(self.moves) > depth:
                self.undo()
        return k

    def apply_far(self, slot: int, direction: int, k: int) -> FarMove:
        """Move the instruction in ``slot`` ``k`` slots ``UP`` or ``DOWN`` as ``k`` legal one-slot moves, recorded
        (and undone) as one entry; IllegalMove, with the schedule unchanged, if any step breaks a rule."""
        if k < 1:
            raise IllegalMove(f"a far move needs k >= 1, got {k}")
        depth = len(self.moves)
        x = int(self.order[slot]) if 0 <= slot < self.n else slot
        steps: list[Move] = []
        try:
            for _ in range(k):
                steps.append(self.apply(int(self.pos[x]) if 0 <= x < self.n else slot, direction))
        except IllegalMove as exc:
            while len(self.moves) > depth:
                self.undo()
            raise IllegalMove(f"far move of slot {slot} {_DIR_NAME.get(direction, direction)} by {k} fails at "
                              f"step {len(steps) + 1}: {exc}") from None
        del self.moves[depth:]
        far = FarMove(slot, direction, steps)
        self.moves.append(far)
        return far

    # --- control-code edits --------------------------------------------------------------------
    def reuse(self) -> np.ndarray:
        """Current reuse flags per instruction (what the written words carry)."""
        return np.where(self.reuse_cleared, 0, self.reuse_flags)

    def next_instruction(self, x: int) -> int | None:
        """The instruction issued right after ``x`` in the current order (None after the last slot)."""
        t = int(self.pos[x]) + 1
        return int(self.order[t]) if t < self.n else None

    def stall_floor(self, x: int) -> int:
        """The lowest stall instruction ``x`` may take now: every distance constraint across its slot keeps
        its required cycles, and never below :data:`control.MIN_STALL_EDIT` (nor above the current stall)."""
        an = self.analysis
        cur = int(self.stall[x])
        if not len(an.cons_p):
            return min(cur, control.MIN_STALL_EDIT)
        t = int(self.pos[x])
        ps, cs = self._node_pos(an.cons_p), self._node_pos(an.cons_c)
        across = (ps <= t) & (t < cs)
        floor = control.MIN_STALL_EDIT
        if across.any():
            slack = self._prefix[cs[across]] - self._prefix[ps[across]] - an.cons_req[across]
            floor = max(floor, cur - int(slack.min()))
        return min(cur, floor)

    def reuse_settable(self, x: int) -> int:
        """Reuse bits of ``x`` that may be set in the current order (:func:`kbuild.sass.deps.reuse_settable`)."""
        from .deps import reuse_settable

        return reuse_settable(self.analysis, x, self.next_instruction(x))

    def why_edit_illegal(self, record: Any) -> str | None:
        """Why ``record`` (see the module docstring) cannot be applied now; None when it can."""
        try:
            kind, rest = _parse_record(record)
        except UsageError as exc:
            return str(exc)
        if kind == "move":
            slot, direction = rest
            return self.why_illegal(slot, direction)
        if kind == "far":
            slot, direction, k = rest
            if not 0 <= slot < self.n:
                return f"slot {slot} outside 0..{self.n - 1}"
            got = self.reach(slot, direction, limit=k)
            return None if got == k else f"far: only {got} of the {k} slots are reachable"
        x, value = rest
        if not 0 <= x < self.n:
            return f"instruction {x} outside 0..{self.n - 1}"
        from .deps import stall_lowerable, yield_editable

        an = self.analysis
        if kind == "yield":
            if value not in (0, 1):
                return f"yield value must be 0 or 1, got {value}"
            if bool(value) == bool(self.yield_[x]):
                return "yield: no change"
            why = yield_editable(an, x, bool(value))
            if why:
                return why
            if not value and int(self.reuse()[x]):
                return (f"yield: 0x{16 * x:x} carries reuse flags, which ptxas only writes with the yield bit "
                        "(nvdisasm decodes them away without it); clear the flags first")
            if value and int(self.stall[x]) > control.MAX_STALL_YIELD:
                return (f"yield: stall {int(self.stall[x])} of 0x{16 * x:x} is above {control.MAX_STALL_YIELD}, "
                        "which the yield bit does not allow")
            return None
        if kind == "reuse":
            if not 0 <= value < 1 << control.REUSE_BITS:
                return f"reuse flags must be 0..15, got {value}"
            cur = int(self.reuse()[x])
            if value == cur:
                return "reuse: no change"
            added = value & ~cur
            if added and not self.yield_[x]:
                return f"reuse: 0x{16 * x:x} has no yield bit; ptxas writes reuse flags only with it"
            if added & ~self.reuse_settable(x):
                return (f"reuse: flags {added:#x} of 0x{16 * x:x} are not proven safe (the next instruction must "
                        "read the same register in the same operand slot, with no write in between)")
            return None
        # stall
        cur = int(self.stall[x])
        if value == cur:
            return "stall: no change"
        if an.sems[x].pinned:
            return f"pinned: instruction at 0x{16 * x:x} ({an.sems[x].pinned})"
        if value > cur:
            limit = int(self._max_stall[x])
            return None if value <= limit else f"stall: {value} is above {limit}, the most this word may carry"
        why = stall_lowerable(an.sems[x])
        if why:
            return f"stall: never lowered on 0x{16 * x:x}: {why}"
        floor = self.stall_floor(x)
        if value < floor:
            return (f"stall: lowering 0x{16 * x:x} to {value} breaks a distance constraint (fixed latency from the "
                    f"ISA table) or the minimum {control.MIN_STALL_EDIT}; the lowest safe value is {floor}")
        return None

    def apply_edit(self, record: Any) -> Entry:
        """Apply one move record (see the module docstring): what :attr:`records` gives back and the tuner
        replays. IllegalMove (a UsageError) when it breaks a rule, UsageError when it is malformed."""
        kind, rest = _parse_record(record)
        if kind == "move":
            return self.apply(*rest)
        if kind == "far":
            return self.apply_far(*rest)
        why = self.why_edit_illegal(record)
        if why:
            raise IllegalMove(f"cannot apply {tuple(record)!r}: {why}")
        x, value = rest
        if kind == "yield":
            edit = Edit(kind, x, value, (int(self.yield_[x]),))
            self.yield_[x] = bool(value)
            self._max_stall[x] = control.MAX_STALL_YIELD if value else control.MAX_STALL
        elif kind == "reuse":
            edit = Edit(kind, x, value, (int(self.reuse_flags[x]), int(self.reuse_cleared[x])))
            self.reuse_flags[x] = value
            self.reuse_cleared[x] = False
        else:
            edit = Edit(kind, x, value, (int(self.stall[x]),))
            self.stall[x] = value
            self._refresh_prefix()
        self.moves.append(edit)
        return edit

    def _undo_edit(self, e: Edit) -> None:
        x = e.instr
        if e.kind == "yield":
            self.yield_[x] = bool(e.old[0])
            self._max_stall[x] = control.MAX_STALL_YIELD if e.old[0] else control.MAX_STALL
        elif e.kind == "reuse":
            self.reuse_flags[x], self.reuse_cleared[x] = e.old[0], bool(e.old[1])
        else:
            self.stall[x] = e.old[0]
            self._refresh_prefix()

    @property
    def records(self) -> list[tuple]:
        """The replayable records of :attr:`moves`, in order (:meth:`apply_edit` takes each)."""
        return [e.record for e in self.moves]

    def control_state(self) -> bytes:
        """Yield bits and reuse flags when an edit changed them from the original (b"" otherwise): what,
        besides :attr:`order` and :attr:`stall`, identifies the written machine code."""
        if np.array_equal(self.yield_, self._yield0) and np.array_equal(self.reuse_flags, self._reuse0):
            return b""
        return self.yield_.tobytes() + self.reuse().astype(np.int64).tobytes()

    def undo(self) -> Entry:
        """Undo the last entry of :attr:`moves` (a one-slot move, a whole far move, or an edit)."""
        if not self.moves:
            raise IndexError("no move to undo")
        entry = self.moves.pop()
        if isinstance(entry, Move):
            self._undo_move(entry)
        elif isinstance(entry, FarMove):
            for mv in reversed(entry.steps):
                self._undo_move(mv)
        else:
            self._undo_edit(entry)
        return entry

    def _undo_move(self, mv: Move) -> None:
        s, a, b = mv.swap, mv.upper, mv.lower
        self.order[s], self.order[s + 1] = a, b
        self.pos[a], self.pos[b] = s, s + 1
        for x, old in reversed(mv.repairs):
            self.stall[x] = old
        for x in mv.cleared:
            self.reuse_cleared[x] = False
        self._refresh_prefix()
        self._update_static(s)

    def _update_static(self, s: int) -> None:
        for t in (s - 1, s, s + 1):
            if 0 <= t < self.n - 1:
                self._static[t] = self.analysis.pair_conflict(int(self.order[t]), int(self.order[t + 1])) is None

    # --- output --------------------------------------------------------------------------------
    def word_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The current text as ``(lo, hi)`` uint64 arrays, one entry per slot."""
        o = self.order
        lo = self._lo[o]
        hi = self._hi[o]
        hi = (hi & np.uint64(~control.HI_STALL_MASK & 0xFFFFFFFFFFFFFFFF)) | (
            self.stall[o].astype(np.uint64) << np.uint64(control.HI_STALL_SHIFT))
        keep = np.uint64(~(control.HI_REUSE_MASK | control.HI_YIELD_MASK) & 0xFFFFFFFFFFFFFFFF)
        hi = (hi & keep) | (self.reuse()[o].astype(np.uint64) << np.uint64(control.HI_REUSE_SHIFT)) | (
            self.yield_[o].astype(np.uint64) << np.uint64(control.HI_YIELD_SHIFT))
        return lo, hi

    def words(self) -> list[int]:
        lo, hi = self.word_arrays()
        return [int(a) | int(b) << 64 for a, b in zip(lo.tolist(), hi.tolist())]

    def to_cubin(self, *, verify: bool = True, disassemble_check: bool = True) -> bytes:
        """The rewritten cubin: text words permuted in place, nv.info offsets remapped.

        With ``verify`` the independent verifier checks it against the original (and, with
        ``disassemble_check``, nvdisasm re-decodes it and the text must equal the expected permuted
        text modulo ``.reuse``); a failure raises :class:`kbuild.sass.verify.VerificationError`."""
        if self.cubin is None:
            raise ValueError("this schedule was built without a cubin")
        text = self.cubin.text(self.kernel)
        patches = [(text.offset, control.join_words(*self.word_arrays()))]
        for file_off, _attr in self.analysis.offset_records:
            old = int.from_bytes(self.cubin.data[file_off:file_off + 4], "little")
            new = 16 * int(self.pos[old // 16])
            patches.append((file_off, new.to_bytes(4, "little")))
        data = elf.patch(self.cubin.data, patches)
        if verify:
            from .verify import VerificationError

            problems = self.verifier().check(data, expected_order=self.order, disassemble_check=disassemble_check)
            if problems:
                raise VerificationError(problems)
        return data

    def verifier(self) -> Verifier:
        """The independent :class:`~kbuild.sass.verify.Verifier` of the original (built once)."""
        if self._verifier is None:
            from .verify import Verifier

            assert self.cubin is not None
            self._verifier = Verifier(self.analysis, self.cubin)
        return self._verifier

    def write(self, path: str | os.PathLike[str], *, verify: bool = True) -> bytes:
        data = self.to_cubin(verify=verify)
        elf.write_atomic(Path(path), data)
        return data

    def diff(self) -> str:
        """The moves and edits made, then each slot that differs from the original (position, stall, yield or
        reuse flags): new offset, old offset, control code, text."""
        ins = self.analysis.instructions
        lines = [f"{len(self.moves)} move(s) on {self.kernel}:"]
        for k, e in enumerate(self.moves, 1):
            if isinstance(e, Edit):
                lines.append(f"  {k:3d}. {e.kind:5s} 0x{16 * e.instr:05x} {e.old[0]} -> {e.value}  {ins[e.instr].text}")
                continue
            steps = e.steps if isinstance(e, FarMove) else [e]
            rep = "".join(f"; stall of 0x{16 * r:x} raised" for mv in steps for r, _ in mv.repairs)
            what = f"far {_DIR_NAME[e.direction]} x{len(steps)}" if isinstance(e, FarMove) else _DIR_NAME[e.direction]
            lines.append(f"  {k:3d}. {what:4s} slot {e.slot:5d}  {ins[e.moved].text}{rep}")
        reuse = self.reuse()
        changed = [t for t in range(self.n) if self.order[t] != t or self.stall[self.order[t]] != self._orig_stall[t]
                   or self.yield_[self.order[t]] != self._yield0[t] or reuse[self.order[t]] != self._reuse0[t]]
        lines.append(f"{len(changed)} slot(s) differ from the original:")
        for t in changed:
            x = int(self.order[t])
            y = "Y" if self.yield_[x] else "-"
            lines.append(f"  0x{16 * t:05x} (was 0x{16 * x:05x}) S{int(self.stall[x]):02d}:{y}:U{int(reuse[x]):x}  "
                         f"{ins[x].text}")
        return "\n".join(lines)

"""The independent verifier: given the original cubin and a rewritten one, decide whether the rewrite
keeps every dependency, without looking at how the rewrite was made.

**Independent of the move code.** It never imports :mod:`kbuild.sass.schedule`: not the legal-move
mask, not the exact swap check with its stall repairs, not the cubin writer or the nv.info remapping.
It identifies which original instruction sits in each slot of the rewritten text by the word with
stall and reuse bits cleared, checks *every* pair of a block rather than neighbours, and re-reads the
rewritten bytes itself. A bug in how moves are chosen, applied, repaired or written is caught here.

**Shared with the dependency model.** It re-derives the facts about the original with the same
:func:`kbuild.sass.deps.analyze` the move code uses: the ISA table's semantics of each instruction
(registers read and written, memory space, pin reasons, variable latency), the basic blocks, the
DEPBAR-counted scoreboards, the remappable nv.info offsets, and the issue-distance constraints with
their required cycles; and :func:`kbuild.sass.deps.mem_conflict`. A rule that is missing or wrong
there (an implicit operand the table does not list, a latency the constraints under-estimate) is
missing or wrong here too, and the verifier will accept the rewrite. Those gaps are found only by
running rewrites on the GPU (``benchmarks/gpu_sass_fuzz.py``; its results: README, "Measured so far").

It checks:

1. identical ELF layout; every byte outside ``.text.<kernel>`` and the remapped nv.info offsets equal;
2. each slot holds an instruction of the same basic block; pinned instructions keep their slot;
3. control codes: wait mask and barriers unchanged; the yield bit changed only where
   :func:`~kbuild.sass.deps.yield_editable` allows, and never with a stall above 11; a stall lowered only on
   an instruction :func:`~kbuild.sass.deps.stall_lowerable` allows, never below
   :data:`~kbuild.sass.control.MIN_STALL_EDIT` (the distance constraints of item 5 then decide); every
   reuse flag either one the original had on an instruction that kept its slot and its successor, or one
   :func:`~kbuild.sass.deps.reuse_settable` proves for the instruction that now follows it, and none on a
   word whose yield bit is clear (ptxas never writes that; nvdisasm decodes the flags away);
4. every pair that must keep its order still does (register, memory and scoreboard conflicts, anything
   against a pinned instruction, and anything after a wait-carrier) — checked for *all* pairs of a
   block, not only neighbours;
5. every issue-distance constraint holds with the new positions and stalls;
6. every nv.info offset in a plain offset list points at the same instruction as before;
7. optionally, ``nvdisasm`` decodes the rewritten cubin to the expected permuted text (modulo ``.reuse``).
"""

from __future__ import annotations

import collections
import re
from collections import defaultdict, deque

import numpy as np

from kbuild.errors import KBuildError, VerificationError

from . import control, elf
from .deps import Analysis, analyze, mem_conflict, reuse_settable, stall_lowerable, yield_editable
from .disasm import disassemble
from .isa import arch_spec
from .operands import NREGS

# An instruction is identified by its word without stall, yield and reuse bits (the editable control fields).
_KEY_MASK = ~(control.STALL_MASK | control.REUSE_MASK | (1 << control.YIELD_SHIFT))
_HI_KEY = np.uint64(~(control.HI_STALL_MASK | control.HI_REUSE_MASK | control.HI_YIELD_MASK) & 0xFFFFFFFFFFFFFFFF)
_REUSE_TEXT = re.compile(r"\.reuse\b")


def _bits_matrix(values: list[int]) -> np.ndarray:
    m = np.zeros((len(values), NREGS), dtype=np.float32)
    for i, v in enumerate(values):
        while v:
            low = v & -v
            m[i, low.bit_length() - 1] = 1.0
            v ^= low
    return m


class Verifier:
    """Facts about one original kernel, computed once, against which rewrites are checked."""

    def __init__(self, analysis: Analysis, cubin: elf.Cubin) -> None:
        self.an = an = analysis
        self.cubin = cubin
        self.text = cubin.text(an.kernel)
        self.keys = [w & _KEY_MASK for w in an.words]
        self.lo, self.hi = control.split_words(control.words_to_bytes(an.words))
        self.hi_key = self.hi & _HI_KEY
        groups = collections.Counter(zip(an.block_of.tolist(), self.lo.tolist(), self.hi_key.tolist()))
        #: instructions whose word (without stall/reuse) occurs more than once in their block: they are
        #: interchangeable, and are matched to slots in their original order
        self.dup = np.array([groups[k] > 1 for k in zip(an.block_of.tolist(), self.lo.tolist(),
                                                         self.hi_key.tolist())], dtype=bool)
        self.stall = np.array([s.stall for s in an.sems], dtype=np.int64)
        self.reuse = np.array([control.decode(w).reuse for w in an.words], dtype=np.int64)
        self.yield0 = np.array([control.decode(w).yield_ for w in an.words], dtype=bool)
        self.pinned = an.pinned
        self.offset_set = {off for off, _ in an.offset_records}
        # must-keep-order matrices per block (upper triangle)
        self.blocks: list[tuple[int, np.ndarray, np.ndarray]] = []
        sems = an.sems
        for s, e in zip(an.block_start.tolist(), an.block_end.tolist()):
            idx = list(range(s, e))
            R = _bits_matrix([sems[i].reads for i in idx])
            W = _bits_matrix([sems[i].writes for i in idx])
            M = (W @ (R + W).T > 0) | (R @ W.T > 0)
            m = len(idx)
            wait = np.array([sems[i].wait for i in idx], dtype=np.int64)
            sets = np.array([sems[i].sets for i in idx], dtype=np.int64)
            M |= (sets[:, None] & wait[None, :]) != 0
            M |= (wait[:, None] & sets[None, :]) != 0
            M |= (sets[:, None] & sets[None, :] & an.depbar_mask) != 0
            M |= (wait != 0)[:, None]  # nothing after a wait-carrier may move above it
            var = np.array([sems[i].variable for i in idx], dtype=bool)
            M |= var[:, None] & var[None, :]
            pin = self.pinned[s:e]
            M |= pin[:, None] | pin[None, :]
            for a in range(m):
                sa = sems[s + a]
                if sa.space is None:
                    continue
                for b in range(a + 1, m):
                    if mem_conflict(sa, sems[s + b]):
                        M[a, b] = True
            ii, jj = np.nonzero(np.triu(M, 1))
            self.blocks.append((s, ii + s, jj + s))

    @classmethod
    def from_bytes(cls, original: bytes, kernel: str | None = None, *, origin: str = "original") -> Verifier:
        cubin = elf.Cubin(original, origin)
        kernel = cubin.default_kernel(kernel)
        an = analyze(cubin, kernel, disassemble(cubin, kernel), arch_spec(cubin.sm, origin))
        return cls(an, cubin)

    # ---------------------------------------------------------------------------------------------
    def mapping(self, data: bytes) -> tuple[np.ndarray | None, list[str]]:
        """Slot → original instruction for ``data``'s text, plus any layout problems."""
        problems: list[str] = []
        an, orig = self.an, self.cubin
        try:
            new = elf.Cubin(data, "rewritten")
        except KBuildError as exc:
            return None, [f"not a cubin: {exc}"]
        if len(data) != len(orig.data) or [(s.name, s.offset, s.size) for s in new.sections] != [
                (s.name, s.offset, s.size) for s in orig.sections]:
            return None, ["ELF layout differs from the original (sizes or sections)"]
        t0, t1 = self.text.offset, self.text.offset + self.text.size
        a = np.frombuffer(orig.data, dtype=np.uint8)
        b = np.frombuffer(data, dtype=np.uint8)
        diff = np.flatnonzero(a != b)
        outside = [int(d) for d in diff if not (t0 <= d < t1) and (int(d) - int(d) % 4) not in self.offset_set
                   and not any(o <= d < o + 4 for o in self.offset_set)]
        if outside:
            problems.append(f"{len(outside)} byte(s) outside .text.{an.kernel} changed (first at file offset "
                            f"0x{outside[0]:x}) that are not nv.info instruction offsets")
        lo, hi = control.split_words(data[t0:t1])
        same = (lo == self.lo) & ((hi & _HI_KEY) == self.hi_key) & ~self.dup
        order = np.where(same, np.arange(an.n), -1).astype(np.int64)
        displaced = np.flatnonzero(~same)
        pools: dict[tuple[int, int, int], deque[int]] = defaultdict(deque)
        for i in displaced.tolist():
            pools[(int(an.block_of[i]), int(self.lo[i]), int(self.hi_key[i]))].append(i)
        for t in displaced.tolist():
            q = pools.get((int(an.block_of[t]), int(lo[t]), int(hi[t] & _HI_KEY)))
            if not q:
                problems.append(f"slot 0x{16 * t:x} holds an instruction that is not in this block of the original")
                continue
            order[t] = q.popleft()
        if (order < 0).any():
            return None, problems
        return order, problems

    def check(self, data: bytes, *, expected_order: np.ndarray | None = None,
              disassemble_check: bool = False) -> list[str]:
        """All problems found in ``data`` (empty list: the rewrite is accepted)."""
        an = self.an
        order, problems = self.mapping(data)
        if order is None:
            return problems
        n = an.n
        pos = np.empty(n, dtype=np.int64)
        pos[order] = np.arange(n)
        if expected_order is not None and not (
                np.array_equal(self.lo[order], self.lo[expected_order])
                and np.array_equal(self.hi_key[order], self.hi_key[expected_order])):
            problems.append("the instruction order differs from the schedule's")
        moved_pinned = np.flatnonzero(self.pinned & (pos != np.arange(n)))
        for i in moved_pinned[:5]:
            problems.append(f"pinned instruction 0x{16 * int(i):x} ({an.sems[i].pinned}) moved to 0x{16 * int(pos[i]):x}")
        t0 = self.text.offset
        _lo, hi = control.split_words(data[t0:t0 + self.text.size])
        slot_stall = ((hi >> np.uint64(control.HI_STALL_SHIFT)) & np.uint64(0xF)).astype(np.int64)
        slot_reuse = ((hi >> np.uint64(control.HI_REUSE_SHIFT)) & np.uint64(0xF)).astype(np.int64)
        slot_yield = ((hi >> np.uint64(control.YIELD_SHIFT - 64)) & np.uint64(1)).astype(bool)
        new_stall = np.empty(n, dtype=np.int64)
        new_stall[order] = slot_stall
        lowered = np.flatnonzero(new_stall < self.stall).tolist()
        bad_low = [x for x in lowered if new_stall[x] < control.MIN_STALL_EDIT or stall_lowerable(an.sems[x])]
        for x in bad_low[:5]:
            why = stall_lowerable(an.sems[x]) or f"below the minimum {control.MIN_STALL_EDIT}"
            problems.append(f"stall of 0x{16 * x:x} lowered from {self.stall[x]} to {new_stall[x]}: {why}")
        new_yield = np.empty(n, dtype=bool)
        new_yield[order] = slot_yield
        yield_changed = new_yield != self.yield0
        for x in np.flatnonzero(yield_changed).tolist():
            refused = yield_editable(an, x, bool(new_yield[x]))
            if refused:
                problems.append(f"yield bit of 0x{16 * x:x} changed: {refused}")
        limit = np.where(slot_yield, control.MAX_STALL_YIELD, control.MAX_STALL)
        over = np.flatnonzero((slot_stall > limit) & ((slot_stall != self.stall[order]) | yield_changed[order]))
        for t in over[:5].tolist():
            problems.append(f"stall of 0x{16 * int(order[t]):x} is {slot_stall[t]}, beyond what its yield bit allows")
        other = np.flatnonzero(((hi ^ self.hi[order]) & _HI_KEY) != 0)  # wait/barriers and body
        for t in other[:5].tolist():
            problems.append(f"control bits other than stall/yield/reuse changed on 0x{16 * int(order[t]):x}")
        ar = np.arange(n)
        nxt_same = np.ones(n, dtype=bool)
        nxt_same[:-1] = order[1:] == ar[1:]
        kept = (order == ar) & nxt_same
        # fast path: no flag at all, or a subset of the original's on an unchanged neighbourhood
        keep_ok = (slot_reuse == 0) | (kept & ((slot_reuse & ~self.reuse[order]) == 0))
        bad_reuse = []
        for t in np.flatnonzero(~keep_ok).tolist():
            x = int(order[t])
            allowed = (int(self.reuse[x]) if kept[t] else 0) | reuse_settable(
                an, x, int(order[t + 1]) if t + 1 < n else None)
            if int(slot_reuse[t]) & ~allowed:
                bad_reuse.append(x)
        for x in bad_reuse[:5]:
            problems.append(f"reuse flags on 0x{16 * x:x} that are not proven safe for the instruction after it")
        # ptxas writes reuse flags only with the yield bit; nvdisasm decodes them away without it
        orig_reuse_slot = self.reuse[order]
        no_yield = np.flatnonzero((slot_reuse != 0) & ~slot_yield & ((slot_reuse != orig_reuse_slot)
                                                                    | (slot_yield != self.yield0[order])))
        for t in no_yield[:5].tolist():
            problems.append(f"reuse flags without the yield bit on 0x{16 * int(order[t]):x}")
        for _s, i, j in self.blocks:
            bad = pos[i] > pos[j]
            for a, b in list(zip(i[bad].tolist(), j[bad].tolist()))[:10]:
                problems.append(f"order: 0x{16 * a:x} ({an.instructions[a].text}) must stay before "
                                f"0x{16 * b:x} ({an.instructions[b].text})")
        # distances
        prefix = np.concatenate([[0], np.cumsum(new_stall[order])])
        vpos = np.empty(2 * len(an.block_start), dtype=np.int64)
        vpos[0::2], vpos[1::2] = an.block_start, an.block_end

        def npos(nodes: np.ndarray) -> np.ndarray:
            out = np.empty(len(nodes), dtype=np.int64)
            real = nodes < n
            out[real] = pos[nodes[real]]
            out[~real] = vpos[nodes[~real] - n]
            return out

        if len(an.cons_p):
            dist = prefix[npos(an.cons_c)] - prefix[npos(an.cons_p)]
            short = np.flatnonzero(dist < an.cons_req)
            for k in short[:10].tolist():
                problems.append(f"distance: constraint {int(an.cons_p[k])}→{int(an.cons_c[k])} has "
                                f"{int(dist[k])} of {int(an.cons_req[k])} cycles")
        # nv.info offsets
        for off, attr in an.offset_records:
            old = int.from_bytes(self.cubin.data[off:off + 4], "little")
            got = int.from_bytes(data[off:off + 4], "little")
            want = 16 * int(pos[old // 16])
            if got != want:
                problems.append(f"nv.info attribute 0x{attr:02x} at file offset 0x{off:x}: 0x{got:x}, expected 0x{want:x}")
        if disassemble_check and not problems:
            problems.extend(self.text_problems(data, order))
        return problems

    def text_problems(self, data: bytes, order: np.ndarray) -> list[str]:
        """Re-disassemble ``data``; each slot's text must equal its original instruction's (modulo .reuse)."""
        new = elf.Cubin(data, "rewritten")
        got = disassemble(new, self.an.kernel)
        probs = []
        for t, ins in enumerate(got):
            want = self.an.instructions[int(order[t])]
            if _REUSE_TEXT.sub("", ins.text) != want.text:
                probs.append(f"slot 0x{16 * t:x} disassembles to {ins.text!r}, expected {want.text!r}")
        return probs


def check_rewrite(analysis: Analysis, cubin: elf.Cubin, data: bytes, *, expected_order: np.ndarray | None = None,
                  disassemble_check: bool = True) -> None:
    """Raise :class:`VerificationError` unless ``data`` is an accepted rewrite of ``cubin``."""
    problems = Verifier(analysis, cubin).check(data, expected_order=expected_order,
                                               disassemble_check=disassemble_check)
    if problems:
        raise VerificationError(problems)


def verify_files(original: bytes, rewritten: bytes, kernel: str | None = None, *,
                 disassemble_check: bool = True) -> list[str]:
    """Problems of ``rewritten`` against ``original`` (both cubin bytes); empty when accepted."""
    v = Verifier.from_bytes(original, kernel)
    return v.check(rewritten, disassemble_check=disassemble_check)

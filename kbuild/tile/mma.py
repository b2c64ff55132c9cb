"""Synthesis for matrix products: the layouts an mma fixes, shared swizzles that avoid bank conflicts, the copy
engine, and the ranking of tile configurations.

An mma program (``zeros`` → ``loop("K")`` of ``shared`` copies and one ``mma`` → an elementwise epilogue →
``store``; see :mod:`kbuild.tile.lang`) has no free register layout: the instruction fixes them.

* **sm_90 (Hopper wgmma).** The accumulator is ``NVMMADistributedLayout(version=[3, 0], warps_per_cta,
  instr_shape=[16, n, 16])``: warps come in warpgroups of four along M; ``warps_per_cta`` and the instruction's
  ``n`` are chosen by the bytes the tensor cores read from shared memory per K step (fewer, larger
  instructions win). Both operands are read by the tensor cores from shared memory in an
  ``NVMMASharedLayout`` and filled by TMA (``tma.make_tensor_descriptor`` on the device, so the kernel takes
  plain pointers). The epilogue goes through an ``NVMMASharedLayout`` tile and a TMA store.
* **sm_80 (Ampere mma.sync), the fallback.** The accumulator is ``NVMMADistributedLayout(version=[2, 0],
  warps_per_cta, instr_shape=[16, 8])``; the operands are loaded from a ``SwizzledSharedLayout`` tile into
  registers in ``DotOperandLayout(operand, parent=accumulator, k_width=32 // bits)``; copies are cp.async.

The swizzle of every shared tile is derived, not assumed: :func:`wavefronts` computes, for a candidate
layout, the shared-memory wavefronts of the tensor cores' reads (8 rows × 16 bytes per phase: one core
matrix, which is what wgmma's descriptor fetch and ``ldmatrix`` read) from the layout's address function,
and :func:`choose_nvmma_swizzle` / :func:`choose_swizzled` keep the conflict-free candidate (the widest on a
tie). :func:`plans` enumerates tile shapes, warps and pipeline stages for a problem and ranks them by a
cost model (tensor-core, shared-memory and L2 cycles per tile, wave quantisation over the SMs, pipeline
latency, register and shared-memory limits); the best few become the kernel's variants for the tuner.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from kbuild.arch import Part, architecture, find, modelled
from kbuild.tile.lang import Op, Param, Program, TileError, Value

BANKS = 32
#: cycles each K step costs beyond its slowest unit (barrier wait, instruction issue, loop)
STEP_OVERHEAD = 64


class MmaError(TileError):
    """An mma program that no layout or configuration fits; names the operation and the conflict."""


def machine(arch: int, what: str) -> Part:
    """The GPU the cost model ranks configurations on for ``sm_<arch>``: its row's part (:mod:`kbuild.arch`); an
    :class:`MmaError` that begins with ``what`` and names the modelled architectures when there is none."""
    row = find(arch)
    if row is None or row.part is None:
        raise MmaError(f"{what} for sm_{arch} (supported: {', '.join(f'sm_{a}' for a in modelled())})")
    return row.part


def wgmma_path(arch: int) -> bool:
    """Whether an mma on ``sm_<arch>`` is Hopper's (wgmma, its operands in NVMMA shared tiles filled by TMA, a TMA
    store of the epilogue) rather than Ampere's (mma.sync fed by cp.async): the architecture has wgmma and TMA."""
    row = architecture(arch)
    return row.wgmma and row.tma


# -- layouts, spelled as Gluon spells them ----------------------------------------------------------------


@dataclass(frozen=True)
class NVMMAShared:
    swizzle: int
    element_bits: int

    def text(self) -> str:
        return f"gl.NVMMASharedLayout(swizzle_byte_width={self.swizzle}, element_bitwidth={self.element_bits}, rank=2)"


@dataclass(frozen=True)
class SwizzledShared:
    vec: int
    per_phase: int
    max_phase: int
    order: tuple[int, int] = (1, 0)

    def text(self) -> str:
        return f"gl.SwizzledSharedLayout(vec={self.vec}, per_phase={self.per_phase}, max_phase={self.max_phase}, " \
               f"order={list(self.order)})"


@dataclass(frozen=True)
class MmaAccumulator:
    version: tuple[int, int]
    warps_per_cta: tuple[int, int]
    instr_shape: tuple[int, ...]

    def text(self) -> str:
        return f"gl.NVMMADistributedLayout(version={list(self.version)}, warps_per_cta={list(self.warps_per_cta)}, " \
               f"instr_shape={list(self.instr_shape)})"


@dataclass(frozen=True)
class DotOperand:
    index: int
    k_width: int

    def text(self, parent: str) -> str:
        return f"gl.DotOperandLayout(operand_index={self.index}, parent={parent}, k_width={self.k_width})"


# -- bank conflicts -----------------------------------------------------------------------------------------


def address(layout: NVMMAShared | SwizzledShared | None, rows: int, row_bytes: int, r: int, byte: int) -> int:
    """Byte offset in shared memory of byte ``byte`` of row ``r`` of a ``rows``-row tile.

    ``NVMMAShared(s)``: columns in atoms ``s`` bytes wide, each atom ``rows`` × ``s`` bytes; in an atom, the
    16-byte chunk bits [4, 4+log2(s/16)) of the address are XORed with bits [7, ...) (CUTLASS's
    ``Swizzle<log2(s/16), 4, 3>``, what TMA writes). ``NVMMAShared(0)`` / ``None``: plain row-major.
    ``SwizzledShared``: Triton's formula, the ``vec``-element group index XORed with
    ``(row // per_phase) % max_phase``."""
    if isinstance(layout, SwizzledShared):
        elem = 2  # the formula is in elements; callers pass 16-bit tiles
        col = byte // elem
        group = (col // layout.vec) ^ ((r // layout.per_phase) % layout.max_phase)
        return r * row_bytes + (group * layout.vec + col % layout.vec) * elem + byte % elem
    s = layout.swizzle if isinstance(layout, NVMMAShared) else 0
    if s == 0:
        return r * row_bytes + byte
    atom, inner = divmod(byte, s)
    a = r * s + inner
    a ^= ((a >> 7) & (s // 16 - 1)) << 4
    return atom * rows * s + a


@functools.lru_cache(maxsize=4096)
def wavefronts(layout: NVMMAShared | SwizzledShared | None, rows: int, row_bytes: int) -> float:
    """Mean shared-memory wavefronts per core-matrix read (8 consecutive rows × 16 bytes at one 16-byte
    column: 32 words, conflict-free in 1 wavefront), over every such read of the tile (every swizzle here
    repeats within 64 rows, so the first 64 stand for the rest)."""
    total, count = 0, 0
    for r0 in range(0, min(rows, 64), 8):
        for chunk in range(0, row_bytes, 16):
            per_bank: dict[int, set[int]] = {}
            for r in range(r0, min(r0 + 8, rows)):
                for w in range(0, 16, 4):
                    word = address(layout, rows, row_bytes, r, chunk + w) // 4
                    per_bank.setdefault(word % BANKS, set()).add(word)
            total += max(len(words) for words in per_bank.values())
            count += 1
    return total / count


@functools.lru_cache(maxsize=1024)
def choose_nvmma_swizzle(rows: int, cols: int, elem_bytes: int) -> tuple[NVMMAShared, dict[int, float]]:
    """The NVMMASharedLayout of a ``rows`` × ``cols`` tile with the fewest wavefronts (widest swizzle on a tie),
    and every candidate's wavefronts. A swizzle wider than a row is no candidate (TMA's box must span it)."""
    row_bytes = cols * elem_bytes
    scores = {s: wavefronts(NVMMAShared(s, 8 * elem_bytes), rows, row_bytes)
              for s in (0, 32, 64, 128) if s <= row_bytes and row_bytes % max(s, 1) == 0}
    best = min(scores, key=lambda s: (scores[s], -s))
    return NVMMAShared(best, 8 * elem_bytes), scores


@functools.lru_cache(maxsize=1024)
def choose_swizzled(rows: int, cols: int, elem_bytes: int) -> tuple[SwizzledShared, dict[tuple[int, int], float]]:
    """The SwizzledSharedLayout (16-byte vectors) of a row-major tile with the fewest wavefronts for
    ``ldmatrix`` reads (fewest phases on a tie)."""
    vec = 16 // elem_bytes
    row_bytes = cols * elem_bytes
    groups = max(1, row_bytes // 16)
    scores: dict[tuple[int, int], float] = {}
    for max_phase in (1, 2, 4, 8):
        if max_phase > groups:
            continue
        for per_phase in (1, 2, 4, 8):
            scores[(per_phase, max_phase)] = wavefronts(SwizzledShared(vec, per_phase, max_phase), rows, row_bytes)
    (pp, mp) = min(scores, key=lambda k: (scores[k], k[1], k[0]))
    return SwizzledShared(vec, pp, mp), scores


# -- the accumulator -----------------------------------------------------------------------------------------


def wgmma_accumulators(block_m: int, block_n: int, num_warps: int, k: int = 16) -> list[tuple[MmaAccumulator, int]]:
    """Every Hopper accumulator layout for the tile, with the shared-memory bytes its wgmma instructions read
    per 16-wide K step (A's and B's part of each m64·n·k16 instruction): fewest first."""
    out: list[tuple[MmaAccumulator, int]] = []
    if num_warps % 4 or block_m < 64:
        return out
    for wm in (4, 8, 16):
        wn = num_warps // wm
        if wm * wn != num_warps or block_m % (16 * wm) or block_n % (8 * wn):
            continue
        per_warps_n = block_n // wn
        n = max(x for x in range(8, 257, 8) if per_warps_n % x == 0)
        groups = num_warps // 4
        m_reps = block_m // (16 * wm)
        n_reps = per_warps_n // n
        instructions = groups * m_reps * n_reps
        read = instructions * (64 * k + k * n) * 2
        out.append((MmaAccumulator((3, 0), (wm, wn), (16, n, k)), read))
    out.sort(key=lambda x: (x[1], -x[0].instr_shape[1]))
    return out


def mma_v2_accumulator(block_m: int, block_n: int, num_warps: int) -> MmaAccumulator | None:
    """The Ampere accumulator: warps split between M and N as evenly as the tile allows (16×8 atoms)."""
    best = None
    for wm in (1, 2, 4, 8, 16):
        wn = num_warps // wm
        if wm * wn != num_warps or block_m % (16 * wm) or block_n % (8 * wn):
            continue
        score = abs(math.log2(block_m / wm) - math.log2(block_n / wn))
        if best is None or score < best[0]:
            best = (score, MmaAccumulator((2, 0), (wm, wn), (16, 8)))
    return best[1] if best else None


# -- plans --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """One configuration of an mma kernel and the layouts synthesised for it."""

    arch: int
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    stages: int
    acc: MmaAccumulator
    a_shared: NVMMAShared | SwizzledShared
    b_shared: NVMMAShared | SwizzledShared
    c_shared: NVMMAShared | None
    operands: tuple[DotOperand, DotOperand] | None
    copy: str
    cost: float = 0.0
    parts: dict[str, float] = field(default_factory=dict, compare=False, hash=False)
    group_m: int = 8
    persistent: bool = False
    """One program per SM looping over output tiles (sm_90): the epilogue's TMA store of one tile overlaps the
    next tile's main loop (its own shared tile, not reused operand buffers)."""

    @property
    def constexprs(self) -> dict[str, int]:
        return {"BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "BLOCK_K": self.block_k, "STAGES": self.stages,
                "GROUP_M": self.group_m, "PERSISTENT": int(self.persistent)}

    def describe(self) -> str:
        kind = " persistent" if self.persistent else ""
        return (f"{self.block_m}x{self.block_n}x{self.block_k} w{self.num_warps} s{self.stages}{kind}: acc "
                f"{self.acc.text()}, A {self.a_shared.text()}, B {self.b_shared.text()}, copy {self.copy}")


def _smem_bytes(bm: int, bn: int, bk: int, stages: int, elem: int, arch: int) -> int:
    """Shared memory of a plan as emitted: the operand ring, the barriers and (sm_90) the epilogue tile; the
    operand ring is live across the tile loop, so Gluon's allocator places the epilogue tile beside it."""
    operands = stages * (bm * bk + bk * bn) * elem
    epilogue = bm * bn * 2 if wgmma_path(arch) else 0
    return operands + epilogue + stages * 8


def plan_cost(arch: int, bm: int, bn: int, bk: int, warps: int, stages: int, read: int, problem: tuple[int, int, int],
              elem: int, persistent: bool = False) -> tuple[float, dict[str, float]] | None:
    """Modelled cycles of the whole problem (None: does not fit). Per K step of one tile: tensor-core cycles,
    shared-memory read cycles (the instructions' operand bytes, ``read`` per 16-wide step), L2 → SM cycles
    of the tiles copied in; the slowest bounds the step, plus a fixed overhead. A pipeline shorter than the memory latency stalls;
    tiles run in waves over the SMs (a CTA per SM unless two fit). A persistent program pays the memory latency
    once and hides each tile's store behind the next tile's main loop."""
    hw = machine(arch, "mma: no tensor-core layouts")
    m, n, k = problem
    smem = _smem_bytes(bm, bn, bk, stages, elem, arch)
    if smem > hw.shared_per_block:
        return None
    acc_regs = bm * bn // (32 * warps)
    if acc_regs > 192:
        return None
    k_steps = math.ceil(k / bk)
    mma = bm * bn * bk * 2 / hw.tensor_flops
    smem_read = read * (bk // 16) / hw.shared_bandwidth
    l2 = (bm + bn) * bk * elem / hw.l2_bandwidth
    step = max(mma, smem_read, l2) + STEP_OVERHEAD
    # a step's copies must land (latency + streaming them in) while the stages ahead of it compute
    stall = k_steps * max(0.0, hw.memory_latency + l2 - (stages - 1) * step)
    epilogue = bm * bn * 2 / hw.shared_bandwidth if persistent else bm * bn * 2 / hw.l2_bandwidth + hw.memory_latency
    tile = k_steps * step + stall + epilogue
    spills = max(0, acc_regs + 40 - 255) * 64.0
    per_sm = max(1, min(hw.shared_per_block // smem, architecture(arch).registers_per_sm // (32 * warps * min(255, acc_regs + 40)), 2))
    tiles = math.ceil(m / bm) * math.ceil(n / bn)
    waves = math.ceil(tiles / (hw.sms * per_sm))
    if persistent:
        per_sm = 1
        waves = math.ceil(tiles / hw.sms)
    total = waves * tile * per_sm * (1 + spills / 1e4) + (hw.memory_latency if persistent else 0)
    # at the same modelled time, fewer tiles (bigger blocks) reuse more of each load
    return total, {"tile_cycles": tile, "waves": waves, "per_sm": per_sm, "step_mma": mma, "step_smem": smem_read,
                   "step_l2": l2, "stall": stall, "smem_bytes": smem, "acc_regs": acc_regs}


def plans(arch: int, problem: tuple[int, int, int], elem_bytes: int = 2, keep: int = 4,
          warps: tuple[int, ...] = (4, 8)) -> list[Plan]:
    """Ranked configurations (cheapest first) of an mma kernel for ``problem`` = (M, N, K) on ``sm_<arch>``."""
    machine(arch, "mma: no tensor-core layouts")
    hopper = wgmma_path(arch)
    out: list[Plan] = []
    space = itertools.product((64, 128, 256), (64, 128, 256), (32, 64, 128), warps, (2, 3, 4, 5),
                              (False, True) if hopper else (False,))
    for bm, bn, bk, w, stages, persistent in space:
        if hopper:
            accs = wgmma_accumulators(bm, bn, w)
            if not accs:
                continue
            acc, read = accs[0]
        else:
            acc2 = mma_v2_accumulator(bm, bn, w)
            if acc2 is None:
                continue
            acc = acc2
            wm, wn = acc.warps_per_cta
            read = (bm * 16 * wn + 16 * bn * wm) * elem_bytes  # every warp row reads A, every warp column B
        scored = plan_cost(arch, bm, bn, bk, w, stages, read, problem, elem_bytes, persistent)
        if scored is None:
            continue
        total, parts = scored
        if hopper:
            a_sh: NVMMAShared | SwizzledShared = choose_nvmma_swizzle(bm, bk, elem_bytes)[0]
            b_sh: NVMMAShared | SwizzledShared = choose_nvmma_swizzle(bk, bn, elem_bytes)[0]
            c_sh = choose_nvmma_swizzle(bm, bn, 2)[0]
            ops = None
            copy = "tma"
        else:
            a_sh = choose_swizzled(bm, bk, elem_bytes)[0]
            b_sh = choose_swizzled(bk, bn, elem_bytes)[0]
            c_sh = None
            ops = (DotOperand(0, 32 // (8 * elem_bytes)), DotOperand(1, 32 // (8 * elem_bytes)))
            copy = "cp.async"
        parts["wavefronts"] = wavefronts(a_sh, bm, bk * elem_bytes) + wavefronts(b_sh, bk, bn * elem_bytes)
        total *= 1 + (parts["wavefronts"] - 2) / 8
        out.append(Plan(arch, bm, bn, bk, w, stages, acc, a_sh, b_sh, c_sh, ops, copy, total, parts,
                        persistent=persistent))
    if not out:
        raise MmaError(f"mma: no tile configuration fits sm_{arch} for problem {problem}")
    # ties: larger tiles (more reuse of each load), then deeper pipelines (more latency hidden)
    out.sort(key=lambda p: (p.cost, p.parts["step_smem"], -p.block_m * p.block_n, -p.stages))
    # one plan per tile shape, warp count and kind (its best pipeline depth): the tuner's variants differ in kind
    seen: set[tuple[int, int, int, int, bool]] = set()
    distinct = []
    for p in out:
        key = (p.block_m, p.block_n, p.block_k, p.num_warps, p.persistent)
        if key not in seen:
            seen.add(key)
            distinct.append(p)
    return distinct[:keep]


# -- the program's shape -----------------------------------------------------------------------------------


@dataclass
class MmaProgram:
    """The parts of a traced mma program the emitter needs."""

    program: Program
    a: Param
    b: Param
    c: Param
    acc: Value
    stored: Value
    epilogue: list[Op]
    dtype: str


def analyse(program: Program) -> MmaProgram:
    """Check that ``program`` is an mma kernel this synthesiser handles and return its parts; a clear
    :class:`MmaError` naming the operation otherwise."""
    ops = program.ops

    def bad(op: Op, why: str) -> MmaError:
        return MmaError(f"{program.name}: {op.label}: {why}")

    kinds = [op.kind for op in ops]
    if kinds.count("mma") != 1 or kinds.count("loop") != 1:
        raise MmaError(f"{program.name}: an mma kernel has one loop('K') holding one mma "
                       f"(found {kinds.count('loop')} loops, {kinds.count('mma')} mma)")
    start, end = kinds.index("loop"), kinds.index("endloop")
    before, body, after = ops[:start], ops[start + 1:end], ops[end + 1:]
    if [op.kind for op in before] != ["zeros"]:
        extra = next(op for op in before if op.kind != "zeros") if any(op.kind != "zeros" for op in before) else ops[0]
        raise bad(extra, "before the K loop an mma kernel only makes its accumulator (zeros)")
    for op in body:
        if op.kind not in ("shared", "mma"):
            raise bad(op, "inside the K loop only shared copies and the mma are supported")
    (mma_op,) = [op for op in body if op.kind == "mma"]
    a, b, acc = mma_op.args
    assert before[0].result is not None
    if acc is not before[0].result:
        raise bad(mma_op, "the accumulator must be the zeros tile made before the loop")
    producers = {op.result.id: op for op in body if op.kind == "shared" and op.result is not None}
    if a.id not in producers or b.id not in producers:
        raise bad(mma_op, "the operands must be shared copies made in this loop")
    pa, pb = producers[a.id].args[0], producers[b.id].args[0]
    if pa.dims != "MK" or pb.dims != "KN":
        raise bad(mma_op, f"operands {pa.name} ({pa.dims}) and {pb.name} ({pb.dims}): expected an 'MK' and a 'KN' "
                          "tensor")
    store = epilogue_store(program, after)
    return MmaProgram(program, pa, pb, store.args[0], acc, store.args[1], after[:-1], pa.dtype)


def epilogue_store(program: Program, after: Sequence[Op]) -> Op:
    """The one store of an mma kernel's epilogue (the operations after its K loop), which may hold only
    elementwise operations on the M×N accumulator before it; a clear :class:`MmaError` otherwise."""
    stores = [op for op in after if op.kind == "store"]
    if len(stores) != 1 or stores[0].args[0].dims != "MN":
        raise MmaError(f"{program.name}: an mma kernel stores one 'MN' tile after the loop")
    for op in after:
        if op.kind not in ("binary", "unary", "store") or op.attrs.get("op") == "rearrange":
            raise MmaError(f"{program.name}: {op.label}: after the K loop only elementwise operations and one store "
                           "are supported")
        for x in op.args:
            if isinstance(x, Value) and x.shape != ("M", "N"):
                raise MmaError(f"{program.name}: {op.label}: the epilogue works on the M×N accumulator, not a "
                               f"{x.shape} tile")
    return stores[0]


__all__ = ["DotOperand", "MmaAccumulator", "MmaError", "MmaProgram", "NVMMAShared", "Plan", "SwizzledShared",
           "address", "analyse", "choose_nvmma_swizzle", "choose_swizzled", "machine", "mma_v2_accumulator",
           "plan_cost", "plans", "wavefronts", "wgmma_accumulators", "wgmma_path"]

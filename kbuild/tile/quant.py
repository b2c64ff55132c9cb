"""The int4 × fp16 group-scaled GEMM's weight layout, derived from the mma operand layout (issue 20, part 5).

Marlin makes its int4 GEMM fast with an offline shuffle of the weights: each thread loads its weights with one
wide, coalesced load and, after a few bit operations, holds fp16 values exactly in the registers the tensor-core
instruction expects. Here the shuffle is *derived* from the operand's layout rather than written down:

1. **The operand layout.** The dequantised weights enter the mma from registers, so their layout is a
   ``DotOperandLayout``. On sm_90 the product is computed transposed (``Yᵀ = Wᵀ · Xᵀ``, as Machete does) so
   the weights are wgmma's register operand A: ``DotOperandLayout(0, NVMMADistributedLayout([3, 0], [w, 1],
   [16, n, 16]), k_width=2)`` on an N×K tile. On sm_80 they are mma.sync's operand B:
   ``DotOperandLayout(1, NVMMADistributedLayout([2, 0], ...), k_width=2)`` on a K×N tile. Triton's own C++
   conversion gives its linear layout (:func:`kbuild.tile.linear.from_gluon`): register, lane and warp bases.
2. **Per-thread contiguity.** The packed order puts each thread's registers next to each other (registers
   fastest, then threads, then K tiles, then N tiles), so a thread's weights for one tile are one contiguous
   run of ``values / 2`` bytes and a warp's runs are adjacent: 16-byte loads, fully coalesced.
3. **The nibble order in a word.** The dequantisation is the lop3 trick: step ``s`` of a 32-bit word keeps
   nibbles ``s`` and ``s + 4`` (mask ``0x000f000f`` after a shift by ``4 s``), ORs in the exponent of 1024
   and subtracts, giving one fp16 pair (low half: nibble ``s``, high half: nibble ``s + 4``). The operand's
   registers ``2 j, 2 j + 1`` are one 32-bit fp16 pair, and the layout must make them adjacent along K (the
   operand's first register basis is one step of K: ``k_width = 2``); solving "pair ``s`` = registers
   ``2 s, 2 s + 1``" gives the nibble order, which comes out as Marlin's ``[0, 2, 4, 6, 1, 3, 5, 7]``.
4. **Scales.** With a group of 128 along K and K tiles of at most 128 that divide it, a thread's scales for a
   tile depend only on its N coordinates: the operand layout sliced along K. They stay in their natural
   ``[K / group, N]`` row-major layout; :attr:`WeightLayout.scales_per_thread` says how many each thread loads.

:func:`derive` returns a :class:`WeightLayout` with :meth:`~WeightLayout.pack` (the offline shuffle, pure
Python or torch), :meth:`~WeightLayout.unpack_torch` (its inverse) and :meth:`~WeightLayout.unpack` (what a
kernel's threads read back, simulated: the tests check the round trip).

5. **Into the operand layout without moving data.** A kernel loads a tile's words as a ``[threads, words]``
   tensor (thread ``t`` holds row ``t``), splits each word into its four fp16 pairs and joins them
   (``[threads, words, half, pair bit 0, pair bit 1]``). Every index bit of that tensor is one basis of the
   operand layout (lane, warp or register); :func:`register_chain` sorts the bits into the operand tile's
   order with one reshape, one permute and one reshape, which only rename registers. The kernel then
   converts to the ``DotOperandLayout`` with ``assert_trivial=True``: Triton refuses to compile it if the
   conversion would move a value to another thread. :meth:`RegisterChain.apply` replays the chain in numpy:
   the tests emulate a tile's threads with it and check every register against the operand layout.

:func:`packing` picks the packed tile for an architecture (one warpgroup's operand tile on sm_90, whatever the
kernel's configuration: weights are packed once for every token count). :func:`analyse` checks an int4 mma
program and :func:`plans` ranks its configurations; :mod:`kbuild.tile.gluon_quant` emits the kernel.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kbuild.arch import DEFAULT_SM, architecture
from kbuild.tile.lang import Op, Param, Program, Value
from kbuild.tile.linear import LinearBases, from_gluon
from kbuild.tile.mma import (
    MmaAccumulator,
    MmaError,
    NVMMAShared,
    SwizzledShared,
    choose_nvmma_swizzle,
    choose_swizzled,
    epilogue_store,
    machine,
    wgmma_path,
)

WORD_NIBBLES = 8
#: the lop3 dequantisation: step s of a word yields the fp16 pair (nibble s, nibble s + 4)
DEQUANT_PAIRS = tuple((s, s + 4) for s in range(4))


@dataclass(frozen=True)
class WeightLayout:
    """A derived packing of int4 weights ``W`` (K × N, values 0..15) for one operand layout."""

    arch: int
    role: str
    tile: tuple[int, int]
    """The operand tile's shape in its own order: (N, K) on sm_90 (wgmma A = Wᵀ), (K, N) on sm_80."""
    k_dim: int
    operand: str
    bases: LinearBases
    nibble_order: tuple[int, ...]
    """``nibble_order[p]``: which of a word's 8 register values nibble ``p`` holds."""
    group: int

    @property
    def threads(self) -> int:
        return 32 << len(self.bases.warp)

    @property
    def values_per_thread(self) -> int:
        return 1 << len(self.bases.reg)

    @property
    def words_per_thread(self) -> int:
        return self.values_per_thread // WORD_NIBBLES

    @property
    def bytes_per_thread(self) -> int:
        return self.values_per_thread // 2

    @property
    def scales_per_thread(self) -> int:
        """Distinct N coordinates of a thread's values in a tile (scales it loads per group)."""
        n_dim = 1 - self.k_dim
        return 1 << sum(1 for b in self.bases.reg if b[n_dim])

    def kn(self, coord: Sequence[int]) -> tuple[int, int]:
        return (coord[1], coord[0]) if self.k_dim == 1 else (coord[0], coord[1])

    def tile_kn(self) -> tuple[int, int]:
        return self.kn(self.tile)

    def sources(self) -> list[list[tuple[int, int]]]:
        """For each word of one tile in packed order (thread-major), the (k, n) in the tile of its 8 nibbles."""
        out = []
        for t in range(self.threads):
            lane, warp = t % 32, t // 32
            for w in range(self.words_per_thread):
                word = []
                for p in range(WORD_NIBBLES):
                    reg = w * WORD_NIBBLES + self.nibble_order[p]
                    word.append(self.kn(self.bases.apply(reg, lane, warp)))
                out.append(word)
        return out

    def _check(self, k: int, n: int) -> tuple[int, int]:
        tk, tn = self.tile_kn()
        if k % tk or n % tn:
            raise MmaError(f"int4 weights of {k}x{n}: K must be a multiple of {tk} and N of {tn} (the tile)")
        return k // tk, n // tn

    def pack(self, w: Any) -> list[int]:
        """The shuffle (pure Python): ``w[k][n]`` in 0..15 → int32 words (as unsigned ints) in packed order."""
        k, n = len(w), len(w[0])
        k_tiles, n_tiles = self._check(k, n)
        tk, tn = self.tile_kn()
        src = self.sources()
        out = []
        for nt in range(n_tiles):
            for kt in range(k_tiles):
                for word in src:
                    v = 0
                    for p, (kk, nn) in enumerate(word):
                        v |= (int(w[kt * tk + kk][nt * tn + nn]) & 0xF) << (4 * p)
                    out.append(v)
        return out

    def pack_torch(self, w: Any) -> Any:
        """The shuffle on a torch tensor (K × N, integer values 0..15) → an int32 tensor in packed order."""
        import torch

        k, n = w.shape
        k_tiles, n_tiles = self._check(k, n)
        tk, tn = self.tile_kn()
        src = torch.tensor(self.sources(), device=w.device)  # [words, 8, 2]
        tiles = w.reshape(k_tiles, tk, n_tiles, tn).permute(2, 0, 1, 3).to(torch.int64)  # [nt, kt, tk, tn]
        vals = tiles[:, :, src[..., 0], src[..., 1]]  # [nt, kt, words, 8]
        shifts = torch.arange(WORD_NIBBLES, device=w.device, dtype=torch.int64) * 4
        words = ((vals & 0xF) << shifts).sum(-1)
        return (words - (words >= 2**31).to(torch.int64) * 2**32).to(torch.int32).flatten()

    def unpack_torch(self, packed: Any, k: int, n: int) -> Any:
        """The inverse of :meth:`pack_torch`: packed int32 words → the K × N matrix of values 0..15 (int64)."""
        import torch

        k_tiles, n_tiles = self._check(k, n)
        tk, tn = self.tile_kn()
        src = torch.tensor(self.sources(), device=packed.device)  # [words, 8, 2]
        words = packed.reshape(n_tiles, k_tiles, src.shape[0]).to(torch.int64) & 0xFFFFFFFF
        shifts = torch.arange(WORD_NIBBLES, device=packed.device, dtype=torch.int64) * 4
        vals = (words[..., None] >> shifts) & 0xF  # [nt, kt, words, 8]
        tiles = torch.empty((n_tiles, k_tiles, tk, tn), dtype=torch.int64, device=packed.device)
        tiles[:, :, src[..., 0], src[..., 1]] = vals
        return tiles.permute(1, 2, 0, 3).reshape(k, n)

    def unpack(self, packed: Sequence[int], k: int, n: int) -> list[list[int]]:
        """What the kernel's threads hold after dequantising (simulated): thread ``t`` reads its contiguous
        words of each tile, splits each into the fp16 pairs of :data:`DEQUANT_PAIRS`, and its register ``r``
        lands at the operand layout's coordinate of ``r``. Returns ``W`` (K × N) as the threads see it."""
        k_tiles, n_tiles = self._check(k, n)
        tk, tn = self.tile_kn()
        out = [[-1] * n for _ in range(k)]
        i = 0
        for nt in range(n_tiles):
            for kt in range(k_tiles):
                for t in range(self.threads):
                    lane, warp = t % 32, t // 32
                    for w in range(self.words_per_thread):
                        word = int(packed[i]) & 0xFFFFFFFF
                        i += 1
                        for s, (lo, hi) in enumerate(DEQUANT_PAIRS):
                            pair = ((word >> (4 * s)) & 0x000F000F)
                            for half, nibble in ((0, lo), (1, hi)):
                                value = (pair >> (16 * half)) & 0xF
                                assert nibble == s + 4 * half
                                reg = w * WORD_NIBBLES + 2 * s + half
                                kk, nn = self.kn(self.bases.apply(reg, lane, warp))
                                out[kt * tk + kk][nt * tn + nn] = value
        return out


def _nibble_order(bases: LinearBases, k_dim: int) -> tuple[int, ...]:
    """Solve "dequantisation pair s = operand registers 2s, 2s+1" for the nibble holding each register."""
    if not bases.reg or bases.reg[0][k_dim] != 1 or any(c for i, c in enumerate(bases.reg[0]) if i != k_dim):
        raise MmaError(f"int4 dequantisation: the operand's registers 0 and 1 are not adjacent along K "
                       f"(first register basis {bases.reg[0] if bases.reg else None}); a fp16 pair cannot hold them")
    order = [0] * WORD_NIBBLES
    for s, (lo, hi) in enumerate(DEQUANT_PAIRS):
        order[lo], order[hi] = 2 * s, 2 * s + 1
    return tuple(order)


def operand_layout(arch: int, block_n: int, block_k: int, num_warps: int, tokens: int = 64) -> tuple[Any, tuple[int, int], int, str]:
    """The Gluon operand layout the dequantised weights must land in, its tile shape and K's dimension."""
    from triton.experimental.gluon import language as gl

    machine(arch, "int4 weights: no tensor-core operand layout")
    if wgmma_path(arch):
        if num_warps % 4 or block_n % (16 * num_warps):
            raise MmaError(f"int4 weights on sm_90: BLOCK_N = {block_n} rows of Wᵀ do not split over {num_warps} "
                           "warps in warpgroups of 64 rows")
        acc = MmaAccumulator((3, 0), (num_warps, 1), (16, tokens, 16))
        parent = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, tokens, 16])
        op = gl.DotOperandLayout(operand_index=0, parent=parent, k_width=2)
        return op, (block_n, block_k), 1, f"DotOperandLayout(0, {acc.text()}, k_width=2)"
    parent = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, num_warps], instr_shape=[16, 8])
    op = gl.DotOperandLayout(operand_index=1, parent=parent, k_width=2)
    acc = MmaAccumulator((2, 0), (1, num_warps), (16, 8))
    return op, (block_k, block_n), 0, f"DotOperandLayout(1, {acc.text()}, k_width=2)"


def derive(arch: int = DEFAULT_SM, block_n: int = 128, block_k: int = 64, num_warps: int = 4, group: int = 128
           ) -> WeightLayout:
    """The packed int4 weight layout for an mma on ``sm_<arch>`` with the given weight tile."""
    if group % block_k:
        raise MmaError(f"int4 weights: BLOCK_K = {block_k} must divide the scale group {group}")
    op, tile, k_dim, text = operand_layout(arch, block_n, block_k, num_warps)
    bases = from_gluon(op, list(tile))
    values = 1 << len(bases.reg)
    threads = 32 << len(bases.warp)
    if threads * values != tile[0] * tile[1] or any(not any(b) for b in (*bases.reg, *bases.lane, *bases.warp)):
        raise MmaError(f"int4 weights: the operand layout {text} replicates a {tile} tile over its threads; "
                       "each weight must be loaded once")
    if values % WORD_NIBBLES:
        raise MmaError(f"int4 weights: a thread holds {values} values of a {tile} tile, not whole 32-bit words")
    role = "wgmma register operand A (Wᵀ)" if wgmma_path(arch) else "mma.sync operand B"
    return WeightLayout(arch, role, tile, k_dim, text, bases, _nibble_order(bases, k_dim), group)


# -- into the operand layout: the register chain -------------------------------------------------------------


@dataclass(frozen=True)
class RegisterChain:
    """A reshape → permute → reshape that turns the joined dequantised pairs, a
    ``[threads, words, 2 (half), 2 (pair bit 0), 2 (pair bit 1)]`` tensor, into the operand tile: each run of
    index bits that stays in order is one dimension of ``runs``; ``order`` sorts the runs into the tile's
    row-major bit order."""

    src_shape: tuple[int, ...]
    runs: tuple[int, ...]
    order: tuple[int, ...]
    dst_shape: tuple[int, ...]

    def apply(self, a: Any) -> Any:
        """The chain on a numpy array of shape ``src_shape`` (what the kernel's reshape/permute do)."""
        return a.reshape(self.runs).transpose(self.order).reshape(self.dst_shape)

    def gluon(self, value: str) -> str:
        """The chain as Gluon source on the tensor named ``value``."""
        return f"gl.permute(gl.reshape({value}, {list(self.runs)}), {list(self.order)}).reshape({list(self.dst_shape)})"


def _tile_bit(coord: Sequence[int], shape: Sequence[int]) -> int:
    """The bit of the tile's row-major index that a single-bit basis sets."""
    nonzero = [(d, c) for d, c in enumerate(coord) if c]
    if len(nonzero) != 1 or nonzero[0][1] & (nonzero[0][1] - 1):
        raise MmaError(f"int4 weights: operand layout basis {list(coord)} is not one bit of one dimension; "
                       "the dequantised pairs cannot be renamed into it")
    d, c = nonzero[0]
    return (c.bit_length() - 1) + sum(x.bit_length() - 1 for x in shape[d + 1:])


def register_chain(lay: WeightLayout) -> RegisterChain:
    """The chain for ``lay``: bits of the joined tensor, most significant first, are the thread's warp and
    lane bits, its word bits (registers 3, 4, ...), then the half (register 0) and the pair bits (registers
    1, 2), as :data:`DEQUANT_PAIRS` and :func:`_nibble_order` put them."""
    b = lay.bases
    threads, words = lay.threads, lay.words_per_thread
    thread_bases = (*b.lane, *b.warp)
    bits = [_tile_bit(thread_bases[j], lay.tile) for j in reversed(range(threads.bit_length() - 1))]
    bits += [_tile_bit(b.reg[3 + j], lay.tile) for j in reversed(range(words.bit_length() - 1))]
    bits += [_tile_bit(b.reg[r], lay.tile) for r in (0, 1, 2)]
    runs: list[list[int]] = [[bits[0]]]
    for bit in bits[1:]:
        if bit == runs[-1][-1] - 1:
            runs[-1].append(bit)
        else:
            runs.append([bit])
    order = sorted(range(len(runs)), key=lambda i: -runs[i][0])
    return RegisterChain((threads, words, 2, 2, 2), tuple(1 << len(r) for r in runs), tuple(order), tuple(lay.tile))


def dequant_words(words: Any) -> Any:
    """Numpy emulation of the kernel's lop3 dequantisation of int32 words (any shape): the fp16
    ``[..., half, pair bit 0, pair bit 1]`` values ``1024 + q`` the joins build (the kernel subtracts 1032 and
    scales in the operand layout)."""
    import numpy as np

    w = np.asarray(words).astype(np.uint32)
    pairs = [((w >> np.uint32(4 * s)) & np.uint32(0x000F000F)) | np.uint32(0x64006400) for s in range(4)]
    halves = [np.stack([(p & 0xFFFF).astype(np.uint16), (p >> 16).astype(np.uint16)], axis=-1) for p in pairs]
    joined = np.stack([np.stack([halves[0], halves[1]], -1), np.stack([halves[2], halves[3]], -1)], -1)
    return joined.view(np.float16)


# -- the packed tile, the program, the configurations ------------------------------------------------------

#: rows of Wᵀ one sm_90 warpgroup multiplies (wgmma's M)
WARPGROUP_ROWS = 64


def packing(arch: int, group: int) -> WeightLayout:
    """The packed weight tile for ``sm_<arch>``, the same for every configuration of the kernel (weights are
    packed once, for every token count). sm_90: one warpgroup's operand tile, 64 rows of Wᵀ (a CTA of ``g``
    warpgroups reads ``g`` consecutive packed tiles, and its operand layout restricted to each warpgroup is
    this one); sm_80: a 4-warp CTA's B operand, 64 columns. BLOCK_K: the largest power of two up to 128 that
    divides ``group`` and gives each thread whole 16-byte vectors (one scale row per step when it is ``group``)."""
    machine(arch, "int4 weights: no tensor-core operand layout")
    for bk in (128, 64, 32, 16):
        if bk > group or group % bk:
            continue
        lay = derive(arch, WARPGROUP_ROWS, bk, 4, group)
        if lay.bytes_per_thread % 16 == 0:
            return lay
    raise MmaError(f"int4 weights: no K step divides the scale group {group} with 16-byte loads per thread")


@dataclass
class QuantProgram:
    """The parts of a traced int4 mma program (``mma(shared(x), dequant(w, s), acc)``) the emitter needs."""

    program: Program
    x: Param
    w: Param
    scales: Param
    y: Param
    group: int
    acc: Value
    stored: Value
    epilogue: list[Op]


def analyse(program: Program) -> QuantProgram:
    """Check that ``program`` is an int4 mma kernel this synthesiser handles; a clear :class:`MmaError`
    naming the operation otherwise."""
    ops = program.ops

    def bad(op: Op, why: str) -> MmaError:
        return MmaError(f"{program.name}: {op.label}: {why}")

    kinds = [op.kind for op in ops]
    if kinds.count("mma") != 1 or kinds.count("loop") != 1 or kinds.count("dequant") != 1:
        raise MmaError(f"{program.name}: an int4 mma kernel has one loop('K') holding one dequant and one mma "
                       f"(found {kinds.count('loop')} loops, {kinds.count('dequant')} dequant, {kinds.count('mma')} mma)")
    start, end = kinds.index("loop"), kinds.index("endloop")
    before, body, after = ops[:start], ops[start + 1:end], ops[end + 1:]
    if [op.kind for op in before] != ["zeros"]:
        raise bad(next((op for op in before if op.kind != "zeros"), ops[0]),
                  "before the K loop an mma kernel only makes its accumulator (zeros)")
    for op in body:
        if op.kind not in ("shared", "dequant", "mma"):
            raise bad(op, "inside the K loop of an int4 kernel only shared(x), dequant(w, s) and the mma are supported")
    mma_op = next(op for op in body if op.kind == "mma")
    deq = next(op for op in body if op.kind == "dequant")
    a, b, acc = mma_op.args
    assert deq.result is not None and before[0].result is not None
    if acc is not before[0].result:
        raise bad(mma_op, "the accumulator must be the zeros tile made before the loop")
    if b is not deq.result:
        raise bad(mma_op, "the dequantised weights must be the mma's K×N operand b")
    shared = {op.result.id: op for op in body if op.kind == "shared" and op.result is not None}
    if a.id not in shared:
        raise bad(mma_op, "operand a must be a shared copy made in this loop")
    x = shared[a.id].args[0]
    w, scales = deq.args
    if x.dtype != "fp16" or scales.dtype != "fp16":
        raise bad(deq, f"dequantisation to {scales.dtype} with {x.dtype} activations: only fp16 is built "
                       "(the exponent trick 0x6400 is fp16's)")
    store = epilogue_store(program, after)
    return QuantProgram(program, x, w, scales, store.args[0], deq.attrs["group"], acc, store.args[1], after[:-1])


@dataclass(frozen=True)
class QuantPlan:
    """One configuration of the int4 kernel (sm_90: ``warpgroups`` × 64 rows of Wᵀ against ``block_t`` tokens;
    sm_80: 4 warps, 64 columns of W against ``block_t`` tokens) and the layouts synthesised for it."""

    arch: int
    warpgroups: int
    block_t: int
    stages: int
    split: int
    """Programs sharing one output tile along K (split-K: partial sums in a workspace, added in a fixed order by
    the last program to finish, so the result is the same on every run)."""
    packed: WeightLayout
    layout: WeightLayout
    """The CTA's operand layout (``packed`` on each warpgroup)."""
    chain: RegisterChain
    acc: MmaAccumulator
    x_shared: NVMMAShared | SwizzledShared
    w_shared: NVMMAShared | SwizzledShared
    """sm_80: in 32-bit words (the bank-conflict model's 16-bit vector halved)."""
    y_shared: NVMMAShared | None
    cost: float = 0.0
    parts: dict[str, float] = field(default_factory=dict, compare=False, hash=False)

    @property
    def num_warps(self) -> int:
        return 4 * self.warpgroups

    @property
    def block_n(self) -> int:
        return WARPGROUP_ROWS * self.warpgroups

    @property
    def block_k(self) -> int:
        return self.packed.tile_kn()[0]

    @property
    def constexprs(self) -> dict[str, int]:
        return {"BLOCK_N": self.block_n, "BLOCK_K": self.block_k, "BLOCK_T": self.block_t, "STAGES": self.stages,
                "SPLIT_K": self.split}

    def describe(self) -> str:
        split = f" split-K {self.split}" if self.split > 1 else ""
        return (f"{self.block_n}x{self.block_t}x{self.block_k} (N x tokens x K) w{self.num_warps} s{self.stages}{split}: "
                f"acc {self.acc.text()}, W {self.w_shared.text()}")


def smem_bytes(block_n: int, block_t: int, block_k: int, stages: int, arch: int = DEFAULT_SM) -> int:
    """Shared memory of a plan as emitted. sm_90: the ring of X tiles, packed weights and scale rows with its
    barriers, or the epilogue tile if larger (it is allocated after the loop, when the ring is dead, and Gluon's
    allocator reuses the ring's memory for it). sm_80: the cp.async ring of X tiles and packed weights."""
    if not wgmma_path(arch):
        return stages * (block_t * block_k * 2 + block_n * block_k // 2)
    per_stage = block_t * block_k * 2 + block_n * block_k // 2 + block_n * 2
    return max(stages * per_stage, block_t * block_n * 2) + stages * 8


def plan_cost(arch: int, warpgroups: int, block_t: int, stages: int, packed: WeightLayout,
              problem: tuple[int, int, int], split: int = 1) -> tuple[float, dict[str, float]] | None:
    """Modelled cycles of the whole problem (None: does not fit). Per K step of one CTA: tensor-core cycles,
    the dequantisation's issue cycles (about 20 instructions per word, every warp of a scheduler), and the
    copies: L2 → SM bytes at the SM's L2 bandwidth, or, when the ring holds too few bytes, at what the bytes in
    flight sustain over the memory latency (Little's law). The wgmma is asynchronous, so the dequantisation of
    one step overlaps the product of the previous one. Tiles run in waves over the SMs; the weights, scales,
    activations and output cross DRAM at least once. Split-K runs ``split`` programs per tile on a ``split``-th
    of K each; every one writes its fp32 partial tile and the last reads them all back (L2 traffic)."""
    hw = machine(arch, "int4 weights: no tensor-core operand layout")
    m, n, k = problem
    block_n, block_k = WARPGROUP_ROWS * warpgroups, packed.tile_kn()[0]
    smem = smem_bytes(block_n, block_t, block_k, stages, arch)
    if smem > hw.shared_per_block:
        return None
    acc_regs = block_n * block_t // (32 * 4 * warpgroups)
    # the accumulator, this step's fp16 operand and the previous one's (kept alive for the async wgmma), the words
    regs = acc_regs + packed.values_per_thread + packed.words_per_thread + 40
    if not wgmma_path(arch):  # mma.sync's A: every warp holds the whole X tile's fragment
        regs += block_t * block_k // 64
    if regs > 255:
        return None
    tiles = -(-n // block_n) * -(-m // block_t) * split
    fits = max(1, min(hw.shared_per_block // smem, architecture(arch).registers_per_sm // (128 * warpgroups * regs), 2048 // (128 * warpgroups)))
    resident = min(fits, -(-tiles // hw.sms))  # CTAs sharing an SM in the busiest wave
    step_bytes = block_t * block_k * 2 + block_n * block_k // 2 + block_n * 2
    mma = resident * block_n * block_t * block_k * 2 / hw.tensor_flops
    dequant = resident * warpgroups * packed.words_per_thread * 20  # per scheduler: its warps' instructions
    in_flight = resident * (stages - 1) * step_bytes
    copy = resident * step_bytes / min(hw.l2_bandwidth, in_flight / hw.memory_latency)
    step = max(mma, dequant, copy) + 64
    reduce = 0.0 if split == 1 else resident * block_t * block_n * 4 * 2 / hw.l2_bandwidth + 2 * hw.memory_latency
    wave = (k // block_k // split) * step + hw.memory_latency + resident * block_t * block_n * 2 / hw.l2_bandwidth + reduce
    waves = -(-tiles // (hw.sms * resident))
    dram = (n * k // 2 + (k // packed.group) * n * 2 + m * k * 2 + m * n * 2) / hw.dram_bandwidth
    total = max(waves * wave, dram)
    return total, {"wave_cycles": wave, "reduce_cycles": reduce, "waves": waves, "resident": resident, "step_mma": mma,
                   "step_dequant": dequant, "step_copy": copy, "dram_cycles": dram, "smem_bytes": smem,
                   "acc_regs": acc_regs}


#: Split-K factors the synthesiser ranks: decode sizes have fewer output tiles than SMs (N = 4,096 is 64 tiles of 64
#: rows on 132 SMs), and a split's programs each run a shorter chain of K steps.
SPLITS = (1, 2, 4, 8, 16)


def plans(arch: int, problem: tuple[int, int, int], group: int = 128, keep: int = 3) -> list[QuantPlan]:
    """Ranked configurations (cheapest first) of the int4 kernel for ``problem`` = (M, N, K) on ``sm_<arch>``:
    warpgroups per CTA, the tokens tile (wgmma's N: 8 to 256), split-K (:data:`SPLITS`: more programs when the tiles
    alone leave SMs idle) and the ring's depth; the packed tile is fixed."""
    packed = packing(arch, group)
    m, n, k = problem
    bk = packed.tile_kn()[0]
    if n % WARPGROUP_ROWS or k % bk:
        raise MmaError(f"int4 mma kernel: N = {n} must be a multiple of {WARPGROUP_ROWS} and K = {k} of "
                       f"{bk} (the packed tile)")
    out: list[QuantPlan] = []
    layouts: dict[int, WeightLayout] = {}
    # sm_90: 1 or 2 warpgroups, wgmma's N from 8; sm_80: 4 warps along N, mma.sync's M from 16
    hopper = wgmma_path(arch)
    tokens = (8, 16, 32, 64, 128, 256) if hopper else (16, 32, 64, 128)
    for wg in (1, 2) if hopper else (1,):
        if n % (WARPGROUP_ROWS * wg):
            continue
        for bt, split in itertools.product(tokens, SPLITS):
            if bt > max(tokens[0], 2 * m):  # a tokens tile past twice the tokens only multiplies zeros
                continue
            if (k // bk) % split:
                continue
            # a ring deeper than the K steps of one program never fills: it only takes shared memory
            for stages in range(2, max(2, min(32, k // bk // split)) + 1):
                scored = plan_cost(arch, wg, bt, stages, packed, problem, split)
                if scored is None:
                    break  # deeper rings only use more shared memory
                total, parts = scored
                if wg not in layouts:
                    layouts[wg] = derive(arch, WARPGROUP_ROWS * wg, bk, 4 * wg, group)
                lay = layouts[wg]
                wpt = lay.words_per_thread
                if hopper:
                    acc = MmaAccumulator((3, 0), (4 * wg, 1), (16, bt, 16))
                    x_sh: NVMMAShared | SwizzledShared = choose_nvmma_swizzle(bt, bk, 2)[0]
                    w_sh: NVMMAShared | SwizzledShared = NVMMAShared(
                        choose_nvmma_swizzle(lay.threads // wg, wpt * 2, 2)[0].swizzle, 32)
                    y_sh: NVMMAShared | None = choose_nvmma_swizzle(bt, WARPGROUP_ROWS * wg, 2)[0]
                else:
                    acc = MmaAccumulator((2, 0), (1, 4), (16, 8))
                    x_sh = choose_swizzled(bt, bk, 2)[0]
                    half = choose_swizzled(lay.threads, wpt * 2, 2)[0]  # words as pairs of halves
                    w_sh = SwizzledShared(half.vec // 2, half.per_phase, half.max_phase)
                    y_sh = None
                out.append(QuantPlan(arch, wg, bt, stages, split, packed, lay, register_chain(lay), acc, x_sh, w_sh,
                                     y_sh, total, parts))
    if not out:
        raise MmaError(f"int4 mma kernel: no configuration fits sm_{arch} for problem {problem}")
    # ties: no split (no workspace round trip), then one warpgroup before two (more programs: on an H100, at the same
    # tokens tile and split, 1 warpgroup ran 7-15% faster than 2 on all 8 problems with M <= 64 that timed both,
    # results/h100/issue36/int4/), deeper rings (more bytes in flight than the model's latency asks for), then the
    # larger tokens tile
    out.sort(key=lambda p: (round(p.cost), p.split, p.warpgroups, -p.stages, -p.block_t))
    seen: set[tuple[int, int, int]] = set()
    distinct = []
    for p in out:
        if (p.warpgroups, p.block_t, p.split) not in seen:  # one depth per shape: variants differ in shape
            seen.add((p.warpgroups, p.block_t, p.split))
            distinct.append(p)
    return distinct[:keep]


__all__ = ["DEQUANT_PAIRS", "WARPGROUP_ROWS", "QuantPlan", "QuantProgram", "RegisterChain", "WeightLayout", "analyse",
           "dequant_words", "derive", "operand_layout", "packing", "plan_cost", "plans", "register_chain", "smem_bytes"]

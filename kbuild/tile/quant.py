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
Python or torch) and :meth:`~WeightLayout.unpack` (what a kernel's threads read back, simulated: the tests
check the round trip). What is *not* built yet: the Gluon emission of the int4 GEMM itself (the loads,
dequantisation and mma using this layout) and its benchmark against Marlin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kbuild.tile.linear import LinearBases, from_gluon
from kbuild.tile.mma import MmaAccumulator, MmaError

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

    if arch == 90:
        if num_warps % 4 or block_n % (16 * num_warps):
            raise MmaError(f"int4 weights on sm_90: BLOCK_N = {block_n} rows of Wᵀ do not split over {num_warps} "
                           "warps in warpgroups of 64 rows")
        acc = MmaAccumulator((3, 0), (num_warps, 1), (16, tokens, 16))
        parent = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, tokens, 16])
        op = gl.DotOperandLayout(operand_index=0, parent=parent, k_width=2)
        return op, (block_n, block_k), 1, f"DotOperandLayout(0, {acc.text()}, k_width=2)"
    if arch == 80:
        parent = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, num_warps], instr_shape=[16, 8])
        op = gl.DotOperandLayout(operand_index=1, parent=parent, k_width=2)
        acc = MmaAccumulator((2, 0), (1, num_warps), (16, 8))
        return op, (block_k, block_n), 0, f"DotOperandLayout(1, {acc.text()}, k_width=2)"
    raise MmaError(f"int4 weights: no tensor-core operand layout for sm_{arch} (supported: sm_80, sm_90)")


def derive(arch: int = 90, block_n: int = 128, block_k: int = 64, num_warps: int = 4, group: int = 128
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
    role = "wgmma register operand A (Wᵀ)" if arch == 90 else "mma.sync operand B"
    return WeightLayout(arch, role, tile, k_dim, text, bases, _nibble_order(bases, k_dim), group)


__all__ = ["DEQUANT_PAIRS", "WeightLayout", "derive", "operand_layout"]

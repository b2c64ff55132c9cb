"""kbuild.tile.quant: the int4 weight layout derived from the mma operand layout (Triton's own C++ linear
layouts, no GPU): the shuffle round-trips through what the threads read back, each thread's weights are one
contiguous 16-byte-multiple run, and the derivation lands on Marlin's nibble interleave and fragment."""

from __future__ import annotations

import random

import pytest

from kbuild.tile.mma import MmaError
from kbuild.tile.quant import derive

pytest.importorskip("triton.experimental.gluon")


@pytest.mark.parametrize(("arch", "block_n", "block_k", "warps"), [(90, 128, 64, 4), (90, 128, 128, 8),
                                                                  (80, 128, 64, 4), (80, 64, 32, 4)])
def test_pack_round_trips_through_the_threads_view(arch: int, block_n: int, block_k: int, warps: int) -> None:
    lay = derive(arch, block_n, block_k, warps)
    tk, tn = lay.tile_kn()
    assert (tk, tn) == (block_k, block_n)
    k, n = tk, 2 * tn
    rng = random.Random(arch * block_n + block_k)
    w = [[rng.randrange(16) for _ in range(n)] for _ in range(k)]
    packed = lay.pack(w)
    assert len(packed) == k * n // 8  # every weight once, 8 per word
    assert lay.unpack(packed, k, n) == w
    torch = pytest.importorskip("torch")
    assert [x & 0xFFFFFFFF for x in lay.pack_torch(torch.tensor(w)).tolist()] == packed


def test_each_thread_loads_one_contiguous_wide_run_and_the_nibbles_are_marlins() -> None:
    lay = derive(90, 128, 64, 4)
    assert lay.bytes_per_thread == 32 and lay.bytes_per_thread % 16 == 0  # two 16-byte loads per tile
    src = lay.sources()
    per_thread = lay.words_per_thread
    # packed order: thread t's words are [t * per_thread, (t + 1) * per_thread): their coordinates are its own
    for t in (0, 5, 127):
        words = src[t * per_thread:(t + 1) * per_thread]
        lane, warp = t % 32, t // 32
        mine = {lay.kn(lay.bases.apply(r, lane, warp)) for r in range(lay.values_per_thread)}
        assert {c for word in words for c in word} == mine
    assert lay.nibble_order == (0, 2, 4, 6, 1, 3, 5, 7)  # Marlin's interleave, derived from the lop3 pairs
    assert lay.scales_per_thread == 4


def test_sm80_fragment_is_the_mma_sync_b_fragment_marlin_shuffles_for() -> None:
    lay = derive(80, 128, 64, 4)
    for lane in range(32):
        regs = [lay.kn(lay.bases.apply(r, lane, 0)) for r in range(4)]
        k0 = 2 * (lane % 4)
        assert regs == [(k0, lane // 4), (k0 + 1, lane // 4), (k0 + 8, lane // 4), (k0 + 9, lane // 4)]


def test_bad_tiles_are_clear_errors() -> None:
    with pytest.raises(MmaError, match="must divide the scale group 128"):
        derive(90, 128, 96)
    with pytest.raises(MmaError, match="warpgroups of 64 rows"):
        derive(90, 32, 64, 4)
    with pytest.raises(MmaError, match="sm_70"):
        derive(70)
    lay = derive(90, 128, 64, 4)
    with pytest.raises(MmaError, match="K must be a multiple of 64 and N of 128"):
        lay.pack([[0] * 100 for _ in range(64)])

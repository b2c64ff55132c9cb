"""kbuild.tile.linear against Triton's own C++ linear layouts (``toLinearLayout``, no GPU).

:func:`blocked_tv` builds a BlockedLayout's thread-value map with the CuTe algebra; Triton 3.6's conversion of
the same Gluon layout is the oracle. Hopper's wgmma accumulator layouts go through the CuTe form and back.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbuild.tile.layout import Layout, LayoutError
from kbuild.tile.linear import LinearBases, blocked_tv, from_gluon, linear_to_tv, tv_to_linear

gl = pytest.importorskip("triton.experimental.gluon.language")


def _split(draw: st.DrawFn, total: int, rank: int) -> list[int]:
    out = [1] * rank
    for _ in range(total.bit_length() - 1):
        out[draw(st.integers(0, rank - 1))] *= 2
    return out


@st.composite
def blocked(draw: st.DrawFn) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    rank = draw(st.integers(1, 3))
    shape = [2 ** draw(st.integers(0, 8 if rank == 1 else 6 if rank == 2 else 4)) for _ in range(rank)]
    spt = [2 ** draw(st.integers(0, 3)) for _ in range(rank)]
    tpw = _split(draw, 32, rank)
    wpc = _split(draw, 2 ** draw(st.integers(0, 3)), rank)
    order = list(draw(st.permutations(range(rank))))
    return shape, spt, tpw, wpc, order


@settings(max_examples=150, deadline=None)
@given(blocked())
def test_blocked_tv_agrees_with_triton(case: tuple[list[int], ...]) -> None:
    shape, spt, tpw, wpc, order = case
    want = from_gluon(gl.BlockedLayout(spt, tpw, wpc, order), shape)
    tv = blocked_tv(shape, spt, tpw, wpc, order)
    assert tv_to_linear(tv, shape) == want
    assert tv_to_linear(linear_to_tv(want), shape) == want  # CuTe form and back


@settings(max_examples=60, deadline=None)
@given(blocked(), st.data())
def test_tv_layout_and_bases_give_the_same_coordinates(case: tuple[list[int], ...], data: st.DataObject) -> None:
    shape, spt, tpw, wpc, order = case
    tv = blocked_tv(shape, spt, tpw, wpc, order)
    bases = tv_to_linear(tv, shape)
    threads, vals = tv.mode(0).size(), tv.mode(1).size()
    t = data.draw(st.integers(0, threads - 1))
    v = data.draw(st.integers(0, vals - 1))
    idx = tv(t, v)
    coord = []
    for s in shape:
        coord.append(idx % s)
        idx //= s
    assert bases.apply(v, t % 32, t // 32) == tuple(coord)


@pytest.mark.parametrize("warps", [[4, 1], [2, 2], [8, 1], [1, 4]])
def test_wgmma_accumulator_layouts_have_a_cute_form(warps: list[int]) -> None:
    mma = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=warps, instr_shape=[16, 64, 16])
    bases = from_gluon(mma, [128, 128])
    tv = linear_to_tv(bases)
    assert tv_to_linear(tv, [128, 128]) == bases
    # each thread holds pairs of adjacent columns (the wgmma fragment): value mode starts 2:128 (dim 1, step 1)
    assert tv.mode(1).flat_modes()[0] == (2, 128)


def test_a_swizzle_has_no_cute_form() -> None:
    swz = LinearBases(reg=((0, 1), (1, 1)), lane=((0, 2), (0, 4), (0, 8), (0, 16), (0, 32)), warp=(), shape=(2, 64))
    with pytest.raises(LayoutError, match=r"reg basis 1 \[1, 1\] overlaps"):
        linear_to_tv(swz)


def test_a_layout_with_carries_is_not_linear() -> None:
    tv = Layout((32, 2), (1, 1))  # value 1 of thread 1 is index 2: a sum, not an XOR
    with pytest.raises(LayoutError, match="not F2-linear"):
        tv_to_linear(tv, [64])
    with pytest.raises(LayoutError, match="less than a warp"):
        tv_to_linear(Layout((16, 2), (1, 16)), [32])

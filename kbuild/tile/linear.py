"""Thread-value layouts ↔ Triton's linear layouts (and Gluon's layout objects).

A *TV layout* is a CuTe :class:`~kbuild.tile.layout.Layout` with two modes, ``(thread, value)``, whose
result is the column-major index of an element of a tile of shape ``shape`` (dimension 0 fastest). The
thread index is ``lane + 32 * warp``. Triton describes the same map as a *linear layout*: F2-linear bases
for each register, lane and warp bit, each basis a coordinate vector (Triton's ``DistributedLinearLayout``;
arXiv 2505.23819). The two agree exactly when every extent is a power of two and the bits of distinct
bases do not overlap (then an integer sum is an XOR); :class:`~kbuild.tile.layout.LayoutError` otherwise,
naming the layout (a layout that needs an XOR swizzle has no plain CuTe form).

:func:`blocked_tv` builds the TV layout of a Gluon ``BlockedLayout`` with the algebra; :func:`from_gluon`
asks Triton's own C++ conversion (``to_linear_layout``) for any Gluon layout, which the tests use as the
oracle for :func:`blocked_tv`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kbuild.tile.layout import Layout, LayoutError, coalesce, make_layout

WARP = 32


@dataclass(frozen=True)
class LinearBases:
    """The bases of a distributed linear layout (one CTA): each a coordinate vector in dimension order."""

    reg: tuple[tuple[int, ...], ...]
    lane: tuple[tuple[int, ...], ...]
    warp: tuple[tuple[int, ...], ...]
    shape: tuple[int, ...]

    def as_gluon(self) -> Any:
        """Gluon's ``DistributedLinearLayout`` of these bases (imports Triton)."""
        from triton.experimental.gluon import language as gl

        return gl.DistributedLinearLayout(reg_bases=[list(b) for b in self.reg], lane_bases=[list(b) for b in self.lane],
                                          warp_bases=[list(b) for b in self.warp], block_bases=[],
                                          shape=list(self.shape))

    def apply(self, reg: int, lane: int, warp: int) -> tuple[int, ...]:
        """The coordinate of register ``reg`` of lane ``lane`` of warp ``warp`` (XOR of the set bits' bases)."""
        out = [0] * len(self.shape)
        for bases, x in ((self.reg, reg), (self.lane, lane), (self.warp, warp)):
            for i, b in enumerate(bases):
                if x >> i & 1:
                    out = [o ^ c for o, c in zip(out, b)]
        return tuple(out)


def _log2(n: int, what: str) -> int:
    if n < 1 or n & (n - 1):
        raise LayoutError(f"{what} = {n} is not a power of two")
    return n.bit_length() - 1


def _index_to_coord(idx: int, shape: Sequence[int]) -> tuple[int, ...]:
    out = []
    for s in shape:
        out.append(idx % s)
        idx //= s
    if idx:
        raise LayoutError(f"index beyond the tile {tuple(shape)}")
    return tuple(out)


def _coord_to_index(coord: Sequence[int], shape: Sequence[int]) -> int:
    idx, scale = 0, 1
    for c, s in zip(coord, shape):
        idx += c * scale
        scale *= s
    return idx


def bit_images(layout: Layout, what: str) -> list[int]:
    """The image of each input bit of ``layout`` (its extents must be powers of two), lowest bit first."""
    out = []
    for s, d in layout.flat_modes():
        if s & (s - 1):
            raise LayoutError(f"an extent of {what} {layout} = {s} is not a power of two")
        for k in range(s.bit_length() - 1):
            out.append(d << k)
    return out


def tv_to_linear(tv: Layout, shape: Sequence[int]) -> LinearBases:
    """The linear layout of the TV layout ``tv`` over a tile of ``shape``; the thread mode must hold a whole
    number of warps."""
    shape = tuple(shape)
    for s in shape:
        _log2(s, f"tile extent in {shape}")
    if tv.rank() != 2:
        raise LayoutError(f"{tv} is not a (thread, value) layout")
    threads, values = bit_images(tv.mode(0), "threads of"), bit_images(tv.mode(1), "values of")
    if len(threads) < 5:
        raise LayoutError(f"{tv}: {2 ** len(threads)} threads is less than a warp")
    seen = 0
    for img in threads + values:
        if img & seen:
            raise LayoutError(f"{tv} is not F2-linear: two input bits reach index bit(s) {img & seen:#x} "
                              "(a sum with carries is not an XOR)")
        seen |= img
    total = math.prod(shape)
    if seen >= total:
        raise LayoutError(f"{tv} reaches index {seen} outside the tile {shape}")

    def coords(images: list[int]) -> tuple[tuple[int, ...], ...]:
        return tuple(_index_to_coord(i, shape) for i in images)

    return LinearBases(reg=coords(values), lane=coords(threads[:5]), warp=coords(threads[5:]), shape=shape)


def linear_to_tv(bases: LinearBases) -> Layout:
    """The TV layout of a linear layout whose bases reach disjoint bits; :class:`LayoutError` names a basis
    that needs a swizzle."""
    shape = bases.shape
    for s in shape:
        _log2(s, f"tile extent in {shape}")
    seen = 0
    for kind, group in (("reg", bases.reg), ("lane", bases.lane), ("warp", bases.warp)):
        for i, b in enumerate(group):
            idx = _coord_to_index(b, shape)
            if idx & seen:
                raise LayoutError(f"linear layout {kind} basis {i} {list(b)} overlaps an earlier basis: an XOR swizzle "
                                  "with no CuTe form")
            seen |= idx

    def mode(group: tuple[tuple[int, ...], ...]) -> Layout:
        if not group:
            return Layout(1, 0)
        return Layout(tuple(2 for _ in group), tuple(_coord_to_index(b, shape) for b in group))

    return make_layout(coalesce(mode((*bases.lane, *bases.warp))), coalesce(mode(bases.reg)))


def blocked_tv(shape: Sequence[int], size_per_thread: Sequence[int], threads_per_warp: Sequence[int],
               warps_per_cta: Sequence[int], order: Sequence[int]) -> Layout:
    """The TV layout of Gluon's ``BlockedLayout(size_per_thread, threads_per_warp, warps_per_cta, order)`` on a
    tile of ``shape``, as Triton lays it out: values, lanes and warps each run over the dimensions in ``order``
    (fastest first); where the tile is larger than one CTA's footprint the registers repeat it (again in
    ``order``), and where it is smaller, the registers, lanes and warps beyond it hold copies (stride 0)."""
    rank = len(shape)
    if not (len(size_per_thread) == len(threads_per_warp) == len(warps_per_cta) == len(order) == rank):
        raise LayoutError(f"blocked layout ranks differ from the tile's ({rank})")
    if sorted(order) != list(range(rank)):
        raise LayoutError(f"order {list(order)} is not a permutation of 0..{rank - 1}")
    if math.prod(threads_per_warp) != WARP:
        raise LayoutError(f"threads_per_warp {list(threads_per_warp)} does not multiply to {WARP}")
    dim_stride = [math.prod(shape[:d]) for d in range(rank)]

    def split(d: int, start: int, count: int) -> list[tuple[int, int]]:
        """``count`` steps of ``start`` along dimension ``d`` as bit modes: a step past the tile's edge wraps
        (becomes a copy, stride 0)."""
        modes = []
        for k in range(_log2(count, f"a blocked extent along dimension {d}")):
            step = start << k
            modes.append((2, step * dim_stride[d] if step < shape[d] else 0))
        return modes

    regs: list[tuple[int, int]] = []
    lanes: list[tuple[int, int]] = []
    warps: list[tuple[int, int]] = []
    footprint = []
    for d in range(rank):
        _log2(shape[d], f"tile extent along dimension {d}")
    for d in order:
        regs += split(d, 1, size_per_thread[d])
        lanes += split(d, size_per_thread[d], threads_per_warp[d])
        warps += split(d, size_per_thread[d] * threads_per_warp[d], warps_per_cta[d])
    for d in range(rank):
        footprint.append(size_per_thread[d] * threads_per_warp[d] * warps_per_cta[d])
    for d in order:
        if shape[d] > footprint[d]:
            regs += split(d, footprint[d], shape[d] // footprint[d])

    def as_layout(modes: list[tuple[int, int]]) -> Layout:
        if not modes:
            return Layout(1, 0)
        return Layout(tuple(s for s, _ in modes), tuple(d for _, d in modes))

    return make_layout(as_layout(lanes + warps), as_layout(regs))


def from_gluon(layout: Any, shape: Sequence[int]) -> LinearBases:
    """Triton's own linear layout of a Gluon distributed layout on ``shape`` (its C++ ``toLinearLayout``; no
    GPU, no kernel)."""
    from triton._C.libtriton import gluon_ir, ir

    ctx = ir.context()
    ir.load_dialects(ctx)
    builder = gluon_ir.GluonOpBuilder(ctx)
    ll = builder.to_linear_layout(layout._to_ir(builder), list(shape))
    if ll.block_bases:
        raise LayoutError(f"{layout} spans several CTAs; kbuild.tile handles one")

    def tup(bases: list[list[int]]) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(b) for b in bases)

    return LinearBases(reg=tup(ll.reg_bases), lane=tup(ll.lane_bases), warp=tup(ll.warp_bases),
                       shape=tuple(ll.shape))


__all__ = ["WARP", "LinearBases", "bit_images", "blocked_tv", "from_gluon", "linear_to_tv", "tv_to_linear"]

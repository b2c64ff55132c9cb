"""CuTe layouts and their algebra: hierarchical ``shape:stride`` functions from integers to integers.

A :class:`Layout` maps a coordinate (an integer, or a tuple congruent with its shape) to an index: the
integer is split column-major (the leftmost mode varies fastest) and the parts are dotted with the strides.
The operations follow CuTe's layout algebra (NVIDIA CUTLASS, ``media/docs/cute/02_layout_algebra.md``):
:func:`coalesce`, :func:`composition`, :func:`complement`, :func:`right_inverse`, :func:`left_inverse`,
:func:`logical_divide` and :func:`logical_product`, with by-mode forms when the second argument is a tuple
(a *tiler*). Strides are non-negative. Where CuTe's divisibility condition fails, :class:`LayoutError` says
which modes do not divide.

Pure Python, no Triton: :mod:`kbuild.tile.linear` converts to and from Triton's linear layouts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypeAlias

IntTuple: TypeAlias = int | tuple["IntTuple", ...]


class LayoutError(ValueError):
    """An operation of the algebra that is undefined for its arguments (shapes that do not divide, bad input)."""


# -- integer tuples ---------------------------------------------------------------------------------


def flatten(t: IntTuple) -> tuple[int, ...]:
    """The leaves of ``t``, left to right."""
    if isinstance(t, int):
        return (t,)
    return tuple(x for e in t for x in flatten(e))


def product(t: IntTuple) -> int:
    return math.prod(flatten(t))


def congruent(a: IntTuple, b: IntTuple) -> bool:
    """Same nesting (profile): both integers, or tuples of equal length with congruent elements."""
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int)
    return len(a) == len(b) and all(congruent(x, y) for x, y in zip(a, b))


def _text(t: IntTuple) -> str:
    return str(t) if isinstance(t, int) else "(" + ",".join(_text(e) for e in t) + ")"


def _flat_ok(shape: IntTuple, stride: IntTuple) -> bool:
    """The common case, checked quickly: integers, or flat tuples of integers of one length, in range."""
    if type(shape) is int and type(stride) is int:
        return shape >= 1 and stride >= 0
    if type(shape) is tuple and type(stride) is tuple and len(shape) == len(stride):
        return (all(type(s) is int and s >= 1 for s in shape)
                and all(type(d) is int and d >= 0 for d in stride))
    return False


def _check(shape: IntTuple, stride: IntTuple) -> None:
    if _flat_ok(shape, stride):
        return
    if not congruent(shape, stride):
        raise LayoutError(f"shape {_text(shape)} and stride {_text(stride)} are not congruent")
    for s in flatten(shape):
        if not isinstance(s, int) or isinstance(s, bool) or s < 1:
            raise LayoutError(f"shape {_text(shape)}: every extent must be an integer >= 1")
    for d in flatten(stride):
        if not isinstance(d, int) or isinstance(d, bool) or d < 0:
            raise LayoutError(f"stride {_text(stride)}: every stride must be an integer >= 0")


# -- the layout -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """``shape:stride``; ``Layout(8)`` is the compact column-major ``8:1``."""

    shape: IntTuple
    stride: IntTuple | None = None

    def __post_init__(self) -> None:
        if self.stride is None:
            object.__setattr__(self, "stride", compact_stride(self.shape))
        _check(self.shape, self.stride)  # type: ignore[arg-type]

    @property
    def strides(self) -> IntTuple:
        assert self.stride is not None
        return self.stride

    # size, rank, modes
    def size(self) -> int:
        return product(self.shape)

    def cosize(self) -> int:
        """One past the largest index the layout produces (strides are non-negative)."""
        return sum((s - 1) * d for s, d in zip(flatten(self.shape), flatten(self.strides))) + 1

    def rank(self) -> int:
        return 1 if isinstance(self.shape, int) else len(self.shape)

    def mode(self, i: int) -> Layout:
        """The ``i``-th top-level sublayout."""
        if isinstance(self.shape, int):
            if i != 0:
                raise LayoutError(f"{self} has rank 1; no mode {i}")
            return self
        assert isinstance(self.strides, tuple)
        return Layout(self.shape[i], self.strides[i])

    def modes(self) -> list[Layout]:
        return [self.mode(i) for i in range(self.rank())]

    def flat_modes(self) -> list[tuple[int, int]]:
        return list(zip(flatten(self.shape), flatten(self.strides)))

    # evaluation
    def __call__(self, *coord: IntTuple) -> int:
        c: IntTuple = coord[0] if len(coord) == 1 else tuple(coord)
        return _crd2idx(c, self.shape, self.strides)

    def image(self) -> list[int]:
        return [self(i) for i in range(self.size())]

    def __str__(self) -> str:
        return f"{_text(self.shape)}:{_text(self.strides)}"

    def __repr__(self) -> str:
        return f"Layout({self})"

    @classmethod
    def parse(cls, text: str) -> Layout:
        """``"(6,2):(8,2)"`` → ``Layout((6, 2), (8, 2))``."""
        shape_text, sep, stride_text = text.replace(" ", "").partition(":")
        if not sep:
            raise LayoutError(f"{text!r} is not 'shape:stride'")
        return cls(_parse_tuple(shape_text), _parse_tuple(stride_text))


def _parse_tuple(text: str) -> IntTuple:
    tokens = re.findall(r"\d+|[(),]", text)
    if "".join(tokens) != text:
        raise LayoutError(f"{text!r} is not an integer tuple")
    pos = 0

    def parse() -> IntTuple:
        nonlocal pos
        if tokens[pos] == "(":
            pos += 1
            items: list[IntTuple] = []
            while tokens[pos] != ")":
                items.append(parse())
                if tokens[pos] == ",":
                    pos += 1
            pos += 1
            return tuple(items)
        value = int(tokens[pos])
        pos += 1
        return value

    try:
        out = parse()
    except IndexError:
        raise LayoutError(f"{text!r} is not an integer tuple") from None
    if pos != len(tokens):
        raise LayoutError(f"{text!r} is not an integer tuple")
    return out


def compact_stride(shape: IntTuple, start: int = 1) -> IntTuple:
    """Column-major strides of ``shape`` (the leftmost leaf has stride ``start``)."""
    if isinstance(shape, int):
        return start
    out = []
    for s in shape:
        out.append(compact_stride(s, start))
        start *= product(s)
    return tuple(out)


def _crd2idx(coord: IntTuple, shape: IntTuple, stride: IntTuple) -> int:
    if isinstance(coord, int):
        if isinstance(shape, int):
            assert isinstance(stride, int)
            return coord * stride
        # an integer into a tuple mode: split it column-major
        assert isinstance(stride, tuple)
        total = 0
        for i, (s, d) in enumerate(zip(shape, stride)):
            n = product(s)
            part = coord if i == len(shape) - 1 else coord % n
            total += _crd2idx(part, s, d)
            coord //= n
        return total
    if isinstance(shape, int) or len(coord) != len(shape):
        raise LayoutError(f"coordinate {_text(coord)} does not fit shape {_text(shape)}")
    assert isinstance(stride, tuple)
    return sum(_crd2idx(c, s, d) for c, s, d in zip(coord, shape, stride))


def make_layout(*layouts: Layout) -> Layout:
    """Concatenation ``(L0, L1, ...)``: a layout whose modes are the given layouts."""
    return Layout(tuple(lay.shape for lay in layouts), tuple(lay.strides for lay in layouts))


def _from_modes(modes: Sequence[tuple[int, int]]) -> Layout:
    if not modes:
        return Layout(1, 0)
    if len(modes) == 1:
        return Layout(modes[0][0], modes[0][1])
    return Layout(tuple(s for s, _ in modes), tuple(d for _, d in modes))


# -- coalesce ---------------------------------------------------------------------------------------


def coalesce(layout: Layout, profile: IntTuple | None = None) -> Layout:
    """The same function on ``0 .. size-1`` with the fewest modes: size-1 modes dropped, and ``s0:d0, s1:s0*d0``
    merged into ``s0*s1:d0``. With ``profile`` (a tuple), each top-level mode is coalesced on its own."""
    if profile is not None and not isinstance(profile, int):
        if layout.rank() != len(profile):
            raise LayoutError(f"profile {_text(profile)} does not match the rank of {layout}")
        return make_layout(*(coalesce(m, p) for m, p in zip(layout.modes(), profile)))
    merged: list[tuple[int, int]] = []
    for s, d in layout.flat_modes():
        if s == 1:
            continue
        if merged and merged[-1][0] * merged[-1][1] == d:
            merged[-1] = (merged[-1][0] * s, merged[-1][1])
        else:
            merged.append((s, d))
    return _from_modes(merged)


# -- composition ------------------------------------------------------------------------------------

Tiler: TypeAlias = Layout | int | tuple["Tiler", ...]


def composition(a: Layout, b: Tiler) -> Layout:
    """``R = A ∘ B``: ``R(i) == A(B(i))`` for every ``i < size(B)``, with ``R`` congruent to ``B``.

    ``b`` may be a layout, an integer ``n`` (the layout ``n:1``) or a tuple (a tiler: composed mode by mode with
    ``a``'s top-level modes). :class:`LayoutError` when CuTe's divisibility condition fails."""
    if isinstance(b, tuple):
        if len(b) > a.rank():
            raise LayoutError(f"tiler of rank {len(b)} is longer than {a} (rank {a.rank()})")
        parts = [composition(a.mode(i), t) for i, t in enumerate(b)]
        parts += a.modes()[len(b):]
        return make_layout(*parts)
    if isinstance(b, int):
        b = Layout(b)
    if not isinstance(b.shape, int):
        return make_layout(*(composition(a, m) for m in b.modes()))
    return _compose_mode(a, b.shape, b.strides)  # type: ignore[arg-type]


def _compose_mode(a: Layout, shape: int, stride: int) -> Layout:
    if stride == 0:
        return Layout(shape, 0)
    flat = coalesce(a).flat_modes()
    out: list[tuple[int, int]] = []
    rest_shape, rest_stride = shape, stride
    for s, d in flat[:-1]:
        # divide out the stride ("every rest_stride-th element"), then keep up to rest_shape of what remains
        if s % rest_stride and rest_stride % s:
            raise LayoutError(f"composition {a} ∘ {shape}:{stride}: stride {rest_stride} and mode size {s} do not "
                              "divide one another")
        left = max(1, s // rest_stride)
        if left < rest_shape and rest_shape % left:
            raise LayoutError(f"composition {a} ∘ {shape}:{stride}: {rest_shape} elements do not divide into modes "
                              f"of {left}")
        take = min(left, rest_shape)
        if take != 1:
            out.append((take, rest_stride * d))
        rest_shape //= take
        rest_stride = -(-rest_stride // s)
    if rest_shape != 1 or not out:
        out.append((rest_shape, rest_stride * flat[-1][1]))
    return _from_modes(out)


# -- complement and inverses ------------------------------------------------------------------------


def complement(a: Layout, cotarget: int = 1) -> Layout:
    """The ordered layout ``R`` whose image fills the holes of ``A``'s up to ``cotarget``: ``(A, R)`` is
    injective on ``A``'s image ∪ ``R``'s and its cosize is at least ``cotarget``. Needs ``A`` injective with
    strides that divide one another in order."""
    modes = sorted((d, s) for s, d in a.flat_modes() if s != 1 and d != 0)
    out: list[tuple[int, int]] = []
    current = 1
    for d, s in modes:
        if d % current:
            raise LayoutError(f"complement of {a}: stride {d} is not a multiple of {current} (the modes overlap or "
                              "do not nest)")
        out.append((d // current, current))
        current = s * d
    out.append((-(-cotarget // current), current))
    return coalesce(_from_modes(out))


def right_inverse(a: Layout) -> Layout:
    """The largest compact ``R`` with ``A(R(i)) == i`` for every ``i < size(R)``."""
    flat = a.flat_modes()
    prefix = []
    p = 1
    for s, _ in flat:
        prefix.append(p)
        p *= s
    out: list[tuple[int, int]] = []
    current = 1
    for d, s, r in sorted((d, s, r) for (s, d), r in zip(flat, prefix)):
        if s == 1:
            continue
        if d != current:
            break
        out.append((s, r))
        current = s * d
    return coalesce(_from_modes(out))


def left_inverse(a: Layout) -> Layout:
    """``L`` with ``L(A(i)) == i`` for every ``i < size(A)`` (``A`` injective)."""
    return right_inverse(make_layout(a, complement(a)))


# -- divide and product -----------------------------------------------------------------------------


def logical_divide(a: Layout, tiler: Tiler) -> Layout:
    """``A ⊘ B = A ∘ (B, B*)``: mode 0 the elements ``B`` selects (a tile), mode 1 the tiles. A tuple tiler
    divides mode by mode."""
    if isinstance(tiler, tuple):
        parts = [logical_divide(a.mode(i), t) for i, t in enumerate(tiler)]
        return make_layout(*parts, *a.modes()[len(tiler):])
    b = Layout(tiler) if isinstance(tiler, int) else tiler
    return composition(a, make_layout(b, complement(b, a.size())))


def zipped_divide(a: Layout, tiler: tuple[Tiler, ...]) -> Layout:
    """``((tile modes...), (rest modes...))`` of a by-mode :func:`logical_divide`."""
    d = logical_divide(a, tiler)
    n = len(tiler)
    tiles = [d.mode(i).mode(0) for i in range(n)]
    rests = [d.mode(i).mode(1) for i in range(n)] + d.modes()[n:]
    return make_layout(make_layout(*tiles), make_layout(*rests))


def logical_product(a: Layout, b: Tiler) -> Layout:
    """``A ⊗ B = (A, A* ∘ B)``: ``A`` repeated in the order ``B`` gives. A tuple multiplies mode by mode."""
    if isinstance(b, tuple):
        parts = [logical_product(a.mode(i), t) for i, t in enumerate(b)]
        return make_layout(*parts, *a.modes()[len(b):])
    bl = Layout(b) if isinstance(b, int) else b
    return make_layout(a, composition(complement(a, a.size() * bl.cosize()), bl))


def iter_coords(shape: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Every coordinate of a flat shape, column-major."""
    for i in range(math.prod(shape)):
        out = []
        for s in shape:
            out.append(i % s)
            i //= s
        yield tuple(out)


__all__ = ["IntTuple", "Layout", "LayoutError", "Tiler", "coalesce", "compact_stride", "complement", "composition",
           "congruent", "flatten", "iter_coords", "left_inverse", "logical_divide", "logical_product", "make_layout",
           "product", "right_inverse", "zipped_divide"]

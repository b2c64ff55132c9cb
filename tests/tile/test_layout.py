"""kbuild.tile.layout: CuTe's documented examples and the algebra's laws (hypothesis).

The examples are those of NVIDIA CUTLASS ``media/docs/cute/02_layout_algebra.md`` (sections Coalesce,
Composition examples 1-2, By-mode composition, Complement examples, Logical product 1-D). Two examples of
its Division section do not agree with the document's own definition ``A ⊘ B = A ∘ (B, B*)``: the 1-D
divide of ``(2,4,3):(4,1,8)`` by ``4:2`` is stated as ``((2,2),(2,3)):((4,1),(2,8))`` (that is ``A``
divided by ``4:1``) and the 2-D tile's strides ``(236,(13,52))`` belong to the composition example's
``12``-row layout. Those two are checked against the definition, pointwise, instead.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kbuild.tile.layout import (
    Layout,
    LayoutError,
    coalesce,
    complement,
    composition,
    left_inverse,
    logical_divide,
    logical_product,
    make_layout,
    right_inverse,
    zipped_divide,
)

P = Layout.parse


def values(layout: Layout) -> list[int]:
    return [layout(i) for i in range(layout.size())]


# -- CuTe's documented examples ----------------------------------------------------------------------


def test_doc_coalesce() -> None:
    assert str(coalesce(P("(2,(1,6)):(1,(6,2))"))) == "12:1"
    assert str(coalesce(P("(2,(1,6)):(1,(6,2))"), (1, 1))) == "(2,6):(1,2)"


@pytest.mark.parametrize(("a", "b", "want"), [
    ("(6,2):(8,2)", "(4,3):(3,1)", "((2,2),3):((24,2),8)"),  # "Functional composition" example
    ("20:2", "(5,4):(4,1)", "(5,4):(8,2)"),  # Example 1
    ("(10,2):(16,4)", "(5,4):(1,5)", "(5,(2,2)):(16,(80,4))"),  # Example 2 (static result)
])
def test_doc_composition(a: str, b: str, want: str) -> None:
    r = composition(P(a), P(b))
    assert str(r) == want
    assert values(r) == [P(a)(P(b)(i)) for i in range(P(b).size())]


def test_doc_by_mode_composition() -> None:
    a = P("(12,(4,8)):(59,(13,1))")
    assert str(composition(a, (P("3:4"), P("8:2")))) == "(3,(2,4)):(236,(26,1))"
    assert str(composition(a, (3, 8))) == "(3,(4,2)):(59,(13,1))"


@pytest.mark.parametrize(("a", "want"), [
    ("4:1", "6:4"), ("6:4", "4:1"), ("(4,6):(1,4)", "1:0"), ("4:2", "(2,3):(1,8)"), ("(2,4):(1,6)", "3:2"),
    ("(2,2):(1,6)", "(3,2):(2,12)"),
])
def test_doc_complement(a: str, want: str) -> None:
    assert str(complement(P(a), 24)) == want


def test_doc_logical_product_1d() -> None:
    assert str(complement(P("(2,2):(4,1)"), 24)) == "(2,3):(2,8)"
    assert str(logical_product(P("(2,2):(4,1)"), P("6:1"))) == "((2,2),(2,3)):((4,1),(2,8))"


def test_doc_divide_examples_against_the_definition() -> None:
    a, b = P("(2,4,3):(4,1,8)"), P("4:2")
    assert str(complement(b, 24)) == "(2,3):(1,8)"  # the document's B*
    bb = make_layout(b, complement(b, 24))
    assert str(bb) == "(4,(2,3)):(2,(1,8))"  # the document's (B, B*)
    assert values(logical_divide(a, b)) == [a(bb(i)) for i in range(24)]
    assert values(logical_divide(a, b).mode(0)) == [0, 1, 2, 3]  # A(0), A(2), A(4), A(6)
    a2 = P("(9,(4,8)):(59,(13,1))")
    tiler = (P("3:3"), P("(2,4):(1,8)"))
    d = logical_divide(a2, tiler)
    assert [m.mode(0).size() for m in d.modes()] == [3, 8] and [m.mode(1).size() for m in d.modes()] == [3, 4]
    assert values(d.mode(0).mode(0)) == [a2.mode(0)(3 * i) for i in range(3)]
    assert values(d.mode(1).mode(0)) == [a2.mode(1)(P("(2,4):(1,8)")(i)) for i in range(8)]
    z = zipped_divide(a2, tiler)  # "layout<0>(zipped_divide(a, b)) == composition(a, b)"
    assert values(z.mode(0)) == values(composition(a2, tiler))


def test_errors_name_the_layouts() -> None:
    with pytest.raises(LayoutError, match="not congruent"):
        Layout((2, 3), 1)
    with pytest.raises(LayoutError, match=r"\(3,5\):\(1,7\)"):
        composition(P("(3,5):(1,7)"), P("2:2"))
    with pytest.raises(LayoutError, match="not 'shape:stride'"):
        Layout.parse("(2,3)")


# -- properties --------------------------------------------------------------------------------------

EXTENTS = st.sampled_from([1, 2, 3, 4, 6, 8])


@st.composite
def layouts(draw: st.DrawFn, max_rank: int = 3, max_stride: int = 64) -> Layout:
    rank = draw(st.integers(1, max_rank))
    shape = tuple(draw(EXTENTS) for _ in range(rank))
    stride = tuple(draw(st.integers(0, max_stride)) for _ in range(rank))
    if draw(st.booleans()) and rank >= 2:  # one level of nesting
        return Layout((shape[0], shape[1:]), (stride[0], stride[1:]))
    return Layout(shape, stride)


@st.composite
def compact_permuted(draw: st.DrawFn) -> Layout:
    """An injective layout: a factorisation of its size, with the compact strides permuted and scaled."""
    factors = draw(st.lists(st.sampled_from([2, 3, 4]), min_size=1, max_size=3))
    order = draw(st.permutations(range(len(factors))))  # the modes from the smallest stride up
    strides, acc = [0] * len(factors), 1
    for m in order:
        strides[m] = acc
        acc *= factors[m]
    scale = draw(st.sampled_from([1, 1, 2, 3]))
    return Layout(tuple(factors), tuple(d * scale for d in strides))


def injective(layout: Layout) -> bool:
    v = values(layout)
    return len(set(v)) == len(v)


@given(layouts())
def test_coalesce_keeps_the_function(a: Layout) -> None:
    c = coalesce(a)
    assert c.size() == a.size() and values(c) == values(a)
    assert coalesce(c) == c
    modes = c.flat_modes()
    assert all(s != 1 for s, _ in modes) or c == Layout(1, 0)
    assert all(modes[i][0] * modes[i][1] != modes[i + 1][1] for i in range(len(modes) - 1))


@given(layouts())
def test_size_and_cosize(a: Layout) -> None:
    v = values(a)
    assert len(v) == a.size()
    assert a.cosize() == max(v) + 1


@settings(max_examples=300)
@given(layouts(max_stride=8), compact_permuted())
def test_composition_is_function_composition(a: Layout, b: Layout) -> None:
    assume(b.cosize() <= a.size())
    try:
        r = composition(a, b)
    except LayoutError:
        assume(False)
        raise
    assert r.size() == b.size()
    assert values(r) == [a(b(i)) for i in range(b.size())]


@settings(max_examples=150)
@given(layouts(max_stride=8), compact_permuted(), compact_permuted())
def test_composition_is_associative(a: Layout, b: Layout, c: Layout) -> None:
    assume(b.cosize() <= a.size() and c.cosize() <= b.size())
    try:
        left = composition(composition(a, b), c)
        right = composition(a, composition(b, c))
    except LayoutError:
        assume(False)
        raise
    assert values(left) == values(right) == [a(b(c(i))) for i in range(c.size())]


@settings(max_examples=300)
@given(compact_permuted(), st.integers(1, 4))
def test_complement_is_disjoint_ordered_and_covers(a: Layout, times: int) -> None:
    target = a.cosize() * times
    try:
        r = complement(a, target)
    except LayoutError:
        assume(False)
        raise
    rv = values(r)
    assert all(x < y for x, y in itertools.pairwise(rv))  # ordered
    assert not set(values(a)) & set(rv[1:])  # disjoint codomains (0 is in both)
    both = make_layout(a, r)
    assert injective(both)
    assert both.cosize() >= target


@given(layouts(max_stride=16))
def test_right_inverse_round_trip(a: Layout) -> None:
    r = right_inverse(a)
    assert [a(r(i)) for i in range(r.size())] == list(range(r.size()))


@settings(max_examples=300)
@given(compact_permuted())
def test_left_inverse_round_trip(a: Layout) -> None:
    try:
        inv = left_inverse(a)
    except LayoutError:
        assume(False)
        raise
    assert [inv(a(i)) for i in range(a.size())] == list(range(a.size()))


def test_compact_layouts_invert_exactly() -> None:
    a = P("((2,4),(8,2)):((32,1),(4,64))")  # a permutation of 0..127
    assert sorted(values(a)) == list(range(128))
    r = right_inverse(a)
    assert r.size() == 128
    assert [r(a(i)) for i in range(128)] == list(range(128))


@settings(max_examples=200)
@given(layouts(max_stride=4), compact_permuted())
def test_logical_divide_is_composition_with_the_complement(a: Layout, b: Layout) -> None:
    try:
        d = logical_divide(a, b)
        bb = make_layout(b, complement(b, a.size()))
    except LayoutError:
        assume(False)
        raise
    assume(bb.cosize() <= a.size())
    assert values(d) == [a(bb(i)) for i in range(bb.size())]
    assert values(d.mode(0)) == [a(b(i)) for i in range(b.size())]


@settings(max_examples=200)
@given(compact_permuted(), compact_permuted())
def test_logical_product_repeats_a_without_overlap(a: Layout, b: Layout) -> None:
    try:
        p = logical_product(a, b)
    except LayoutError:
        assume(False)
        raise
    assert p.size() == a.size() * b.size()
    assert values(p.mode(0)) == values(a)
    if injective(b):
        assert injective(p)


def test_parse_round_trip() -> None:
    for text in ["8:1", "(4,6):(1,4)", "((2,2),(2,3)):((4,1),(2,8))", "(3,(2,4)):(236,(26,1))"]:
        assert str(Layout.parse(text)) == text
    assert Layout(8) == P("8:1") and Layout((2, 3)).strides == (1, 2)

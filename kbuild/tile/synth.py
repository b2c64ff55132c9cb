"""Layout synthesis: type inference of thread-value layouts over a traced :class:`~kbuild.tile.lang.Program`.

Every tile value gets a layout term: an unknown, a :class:`Blocked` layout, or ``Slice(dim, term)``.
Each operation adds equations, solved by first-order unification:

* elementwise operations, casts and broadcasts: operands and result share one layout;
* a reduction over ``axis``: result = ``Slice(axis, operand)``; ``v[:, None]``: ``v`` = ``Slice(1, result)``;
* ``rearrange``: no equation (Gluon's ``convert_layout`` joins two layouts);
* a pinned load: the tile's layout is the given one.

An equation that cannot hold raises :class:`LayoutConflict`, naming the operation, its source line and the
two layouts (with the operation that fixed each). The unknowns left are the *roots*; for each, the
candidates are the BlockedLayouts of its tile shape that do not replicate data (where the tile allows), and
:func:`cost` ranks them: global sectors and instructions of every load and store (coalescing, vector width;
computed by composing the global tensor's layout with the TV layout, :mod:`kbuild.tile.layout`), shuffle
rounds and shared-memory trips of every reduction, elementwise work per thread and register pressure. The
best few go to the tuner as variants.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

from kbuild.tile.lang import BYTES, Op, Program, TileError, Value
from kbuild.tile.layout import Layout, coalesce, composition
from kbuild.tile.linear import bit_images, blocked_tv, tv_to_linear

SECTOR = 32  # bytes
MAX_VECTOR = 16  # bytes per thread per access
REGISTERS = 255


@dataclass(frozen=True)
class Blocked:
    """Gluon's ``BlockedLayout`` (one CTA)."""

    size_per_thread: tuple[int, ...]
    threads_per_warp: tuple[int, ...]
    warps_per_cta: tuple[int, ...]
    order: tuple[int, ...]

    def __str__(self) -> str:
        return (f"BlockedLayout({list(self.size_per_thread)}, {list(self.threads_per_warp)}, "
                f"{list(self.warps_per_cta)}, {list(self.order)})")

    @property
    def num_warps(self) -> int:
        return math.prod(self.warps_per_cta)

    def tv(self, shape: Sequence[int]) -> Layout:
        return blocked_tv(shape, self.size_per_thread, self.threads_per_warp, self.warps_per_cta, self.order)


@dataclass(frozen=True)
class Slice:
    dim: int
    parent: Term

    def __str__(self) -> str:
        return f"SliceLayout({self.dim}, {self.parent})"


@dataclass(frozen=True)
class Var:
    id: int

    def __str__(self) -> str:
        return f"?L{self.id}"


Term: TypeAlias = Blocked | Slice | Var


class LayoutConflict(TileError):
    """No layout satisfies an operation's constraints; names the operation and the two layouts."""


@dataclass
class _Solver:
    program: Program
    parent: dict[int, Term] = field(default_factory=dict)
    origin: dict[int, str] = field(default_factory=dict)
    terms: dict[int, Term] = field(default_factory=dict)  # value id -> term
    next_var: int = 0

    def fresh(self) -> Var:
        v = Var(self.next_var)
        self.next_var += 1
        return v

    def find(self, t: Term) -> Term:
        while isinstance(t, Var) and t.id in self.parent:
            t = self.parent[t.id]
        return t

    def resolve(self, t: Term) -> Term:
        t = self.find(t)
        if isinstance(t, Slice):
            return Slice(t.dim, self.resolve(t.parent))
        return t

    def why(self, t: Term) -> str:
        t = self.find(t)
        root = t
        while isinstance(root, Slice):
            root = self.find(root.parent)
        src = self.origin.get(id(root)) if isinstance(root, Blocked) else None
        return f" (fixed by {src})" if src else ""

    def unify(self, a: Term, b: Term, op: Op, what: str) -> None:
        a, b = self.find(a), self.find(b)
        if a == b:
            return
        if isinstance(a, Var):
            self.parent[a.id] = b
            return
        if isinstance(b, Var):
            self.parent[b.id] = a
            return
        if isinstance(a, Slice) and isinstance(b, Slice) and a.dim == b.dim:
            self.unify(a.parent, b.parent, op, what)
            return
        where = f"{Path(self.program.source_file).name}: " if self.program.source_file else ""
        raise LayoutConflict(
            f"{where}{self.program.name}: {op.label}: no layout fits {what}: {self.resolve(a)}{self.why(a)} vs "
            f"{self.resolve(b)}{self.why(b)}; write rearrange(...) where the value changes layout")

    def term(self, v: Value) -> Term:
        if v.id not in self.terms:
            self.terms[v.id] = self.fresh()
        return self.terms[v.id]


def infer(program: Program) -> _Solver:
    """Solve the layout equations of ``program`` (:class:`LayoutConflict` when they have no solution)."""
    s = _Solver(program)
    for op in program.ops:
        out = op.result
        tiles = [a for a in op.args if isinstance(a, Value)]
        if op.kind == "load":
            assert out is not None
            pin = op.attrs.get("layout")
            t = s.term(out)
            if pin is not None:
                if not isinstance(pin, Blocked) or len(pin.order) != len(out.shape):
                    raise TileError(f"{program.name}: {op.label}: layout= takes a Blocked layout of rank "
                                    f"{len(out.shape)}, got {pin}")
                s.origin[id(pin)] = op.label
                s.unify(t, pin, op, "the pinned layout")
        elif op.kind == "binary":
            assert out is not None
            for i, a in enumerate(tiles):
                s.unify(s.term(a), s.term(out), op, f"operand {i + 1} and the result")
        elif op.kind == "unary":
            assert out is not None
            if op.attrs["op"] != "rearrange":
                s.unify(s.term(tiles[0]), s.term(out), op, "the operand and the result")
            else:
                s.term(out)
        elif op.kind == "reduce":
            assert out is not None
            s.unify(s.term(out), Slice(op.attrs["axis"], s.term(tiles[0])), op, "the reduced value")
        elif op.kind == "expand":
            assert out is not None
            s.unify(s.term(tiles[0]), Slice(op.attrs["axis"], s.term(out)), op, "the vector and its broadcast")
        elif op.kind == "store":
            s.term(tiles[0])
    return s


# -- candidates and cost ----------------------------------------------------------------------------


def _pow2_splits(total: int, rank: int) -> Iterator[tuple[int, ...]]:
    bits = total.bit_length() - 1
    for combo in itertools.product(range(bits + 1), repeat=rank):
        if sum(combo) == bits:
            yield tuple(1 << c for c in combo)


def candidates(shape: Sequence[int], num_warps: int, elem_bytes: int) -> list[Blocked]:
    """BlockedLayouts of ``num_warps`` warps for a tile of ``shape``, each distinct layout once (row-major
    spelling first); those that replicate data are left out when the tile holds a element per thread."""
    rank = len(shape)
    vec_max = max(1, MAX_VECTOR // elem_bytes)
    spt_choices = [tuple(1 << k for k in combo) for combo in itertools.product(range(5), repeat=rank)]
    out = []
    seen: set[Any] = set()
    enough = math.prod(shape) >= 32 * num_warps
    for spt in spt_choices:
        if any(s > e for s, e in zip(spt, shape)) or math.prod(spt) > 4 * vec_max:
            continue
        for tpw in _pow2_splits(32, rank):
            for wpc in _pow2_splits(num_warps, rank):
                foot = [a * b * c for a, b, c in zip(spt, tpw, wpc)]
                if enough and any(f > e for f, e in zip(foot, shape)):
                    continue
                for order in itertools.permutations(reversed(range(rank))):
                    b = Blocked(spt, tpw, wpc, tuple(order))
                    key = tv_to_linear(b.tv(shape), shape)
                    if key not in seen:
                        seen.add(key)
                        out.append(b)
    return out


@dataclass
class Costed:
    layouts: dict[int, Blocked]  # root var id -> layout
    cost: float
    parts: dict[str, float]


def _concrete(s: _Solver, t: Term, choice: dict[int, Blocked]) -> Blocked | tuple[int, Any]:
    t = s.find(t)
    if isinstance(t, Var):
        return choice[t.id]
    if isinstance(t, Slice):
        return (t.dim, _concrete(s, t.parent, choice))
    return t


def _shape(v: Value, blocks: dict[str, int]) -> tuple[int, ...]:
    return tuple(blocks[d] if isinstance(d, str) else d for d in v.shape)


@functools.lru_cache(maxsize=8192)
def _tv_of(layout: Blocked | tuple[int, Any], shape: tuple[int, ...]) -> Layout:
    """TV layout of a (possibly sliced) layout on ``shape``: a slice is its parent on the shape with a unit
    dimension put back (the sliced-away coordinates are all 0)."""
    if isinstance(layout, Blocked):
        return layout.tv(shape)
    dim, parent = layout
    return _tv_of(parent, (*shape[:dim], 1, *shape[dim:]))


def _values_per_thread(tv: Layout) -> int:
    return tv.mode(1).size()


@functools.lru_cache(maxsize=8192)
def _memory_cost(tv: Layout, shape: tuple[int, ...], dims: str, elem: int, num_warps: int) -> dict[str, float]:
    """Sectors and instructions of the tile's access (row-major global with a large row stride): the address
    map is the global layout composed with the TV layout; one warp-instruction's lanes give the sectors."""
    row_stride = 1 << 20
    if len(shape) == 2:
        g = Layout(shape, (row_stride, 1))
    else:
        g = Layout(shape[0], 1 if dims == "N" else row_stride)
    addr = composition(g, tv)  # (thread, value) -> element offset
    flat = [(s, d) for s, d in coalesce(addr.mode(1)).flat_modes() if s > 1 and d != 0]
    run = flat[0][0] if flat and flat[0][1] == 1 else 1
    vec = max(1, min(run, MAX_VECTOR // elem))
    instructions = max(1, math.prod(s for s, _ in flat) // vec)
    images = bit_images(addr.mode(0), "threads of")[:5]  # a lane's offset: the sum of its set bits' images
    starts = [sum(img for k, img in enumerate(images) if lane >> k & 1) for lane in range(32)]
    sectors = {(a + v) * elem // SECTOR for a in starts for v in range(vec)}
    return {"instructions": instructions * num_warps, "sectors": len(sectors) * instructions * num_warps,
            "vector": vec}


@functools.lru_cache(maxsize=8192)
def _reduction(tv: Layout, shape: tuple[int, ...], axis: int) -> dict[str, int]:
    """Per thread: values and distinct outputs; shuffle rounds (lane bits along ``axis``), warps along it."""
    bases = tv_to_linear(tv, shape)
    along = sum(1 for b in bases.reg if b[axis])
    other = sum(1 for b in bases.reg if any(c for i, c in enumerate(b) if i != axis))
    return {"values": 1 << (along + other), "outputs": 1 << other,
            "rounds": sum(1 for b in bases.lane if b[axis]), "warps": 1 << sum(1 for b in bases.warp if b[axis])}


def cost(s: _Solver, choice: dict[int, Blocked], blocks: dict[str, int], num_warps: int) -> Costed:
    """The modelled cost of one assignment of layouts to the roots (lower is better; rough issue slots)."""
    parts = {"memory": 0.0, "issue": 0.0, "reduce": 0.0, "alu": 0.0, "registers": 0.0}
    peak_values = 0
    for op in s.program.ops:
        if op.kind in ("load", "store"):
            v = op.result if op.kind == "load" else op.args[1]
            assert isinstance(v, Value)
            shape = _shape(v, blocks)
            tv = _tv_of(_concrete(s, s.term(v), choice), shape)
            m = _memory_cost(tv, shape, op.args[0].dims, BYTES[v.dtype], num_warps)
            parts["memory"] += m["sectors"]
            parts["issue"] += m["instructions"] * 2
            peak_values = max(peak_values, _values_per_thread(tv))
        elif op.kind == "reduce":
            src = op.args[0]
            shape = _shape(src, blocks)
            r = _reduction(_tv_of(_concrete(s, s.term(src), choice), shape), shape, op.attrs["axis"])
            parts["reduce"] += num_warps * (r["values"] + r["outputs"] * r["rounds"] * 4) / 4
            if r["warps"] > 1:
                parts["reduce"] += 200 + r["outputs"] * 8  # shared memory round trip and a barrier
        elif op.kind in ("binary", "unary") and op.result is not None:
            shape = _shape(op.result, blocks)
            tv = _tv_of(_concrete(s, s.term(op.result), choice), shape)
            weight = {"exp": 4, "div": 4, "sqrt": 4, "rsqrt": 4, "rearrange": 16}.get(op.attrs["op"], 1)
            parts["alu"] += num_warps * _values_per_thread(tv) * weight / 4
            peak_values = max(peak_values, _values_per_thread(tv))
    live = 3 * peak_values  # about three tiles live at once, 32-bit each
    if live > REGISTERS - 24:
        parts["registers"] = (live - REGISTERS + 24) * 64.0 * num_warps  # spills to local memory
    return Costed(dict(choice), sum(parts.values()), parts)


@dataclass
class Synthesis:
    """Inferred layouts: the ranked assignments of the roots (best first) and the solver to read terms from."""

    program: Program
    solver: _Solver
    blocks: dict[str, int]
    num_warps: int
    ranked: list[Costed]
    roots: list[int]
    seconds: float

    def layout_of(self, v: Value, rank: int = 0) -> Blocked | tuple[int, Any]:
        """The concrete layout of ``v`` in the ``rank``-th best assignment: a :class:`Blocked`, or
        ``(dim, parent)`` for a slice."""
        return _concrete(self.solver, self.solver.term(v), self.ranked[rank].layouts)


#: Most elements one tile may have: Triton's ``TRITON_MAX_TENSOR_NUMEL`` (a larger block does not compile).
MAX_TILE_ELEMENTS = 2**20


def synthesize(program: Program, blocks: dict[str, int], num_warps: int = 4, keep: int = 4) -> Synthesis:
    """Infer every value's layout for tiles of ``blocks`` (``{"M": BLOCK_M, "N": BLOCK_N}``, powers of two) and
    ``num_warps`` warps; keep the ``keep`` best assignments."""
    started = time.perf_counter()
    for name, b in blocks.items():
        if isinstance(b, bool) or not isinstance(b, int) or b < 1 or b & (b - 1):
            raise TileError(f"{program.name}: BLOCK_{name} = {b!r} is not a power of two")
    elements = math.prod(blocks.values())
    if elements > MAX_TILE_ELEMENTS:
        raise TileError(f"{program.name}: a tile of {' x '.join(f'BLOCK_{n} = {b:,}' for n, b in blocks.items())} "
                        f"has {elements:,} elements, over Triton's {MAX_TILE_ELEMENTS:,} (2**20) for one tensor")
    s = infer(program)
    # every root is the layout of some value directly (a slice's parent is a reduction's operand or a
    # broadcast's result); its tile is the largest of those values' shapes
    roots: dict[int, tuple[int, ...]] = {}
    elem: dict[int, int] = {}
    for v in program.values:
        if v.id not in s.terms:
            continue
        t = s.find(s.terms[v.id])
        if isinstance(t, Var):
            shape = _shape(v, blocks)
            prev = roots.get(t.id, (1,) * len(shape))
            roots[t.id] = tuple(max(a, b) for a, b in zip(prev, shape))
            elem[t.id] = min(elem.get(t.id, 4), BYTES[v.dtype])
    options = {r: candidates(shape, num_warps, elem.get(r, 4)) for r, shape in roots.items()}
    for r, opts in options.items():
        if not opts:
            raise LayoutConflict(f"{program.name}: no BlockedLayout of {num_warps} warps fits a tile of {roots[r]}")
    # roots are ranked one at a time (each with the others at their first candidate), then combined
    ranked_per_root: dict[int, list[Costed]] = {}
    base = {r: opts[0] for r, opts in options.items()}
    for r, opts in options.items():
        scored = [cost(s, {**base, r: c}, blocks, num_warps) for c in opts]
        scored.sort(key=lambda c: c.cost)  # stable: ties keep the candidates' (row-major first) order
        ranked_per_root[r] = scored[:keep]
        base[r] = scored[0].layouts[r]
    combos = []
    for picks in itertools.islice(itertools.product(*(ranked_per_root[r] for r in options)), 64):
        choice = {r: p.layouts[r] for r, p in zip(options, picks)}
        combos.append(cost(s, choice, blocks, num_warps))
    combos.sort(key=lambda c: c.cost)
    if not combos:  # no unknowns: every layout pinned
        combos = [cost(s, {}, blocks, num_warps)]
    return Synthesis(program, s, dict(blocks), num_warps, combos[:keep], sorted(options),
                     time.perf_counter() - started)


__all__ = ["Blocked", "Costed", "LayoutConflict", "Slice", "Synthesis", "Var", "candidates", "cost", "infer",
           "synthesize"]

"""The tile front end: Python functions over global tensors and register tiles, with no layout written.

A kernel is an ordinary function whose parameters are annotated with :class:`Tensor` (a global, row-major
tensor whose dimensions are named by letters: ``"MN"`` is rows × columns, ``"N"`` a vector along the
columns) or :class:`Scalar`. One program instance owns a block of ``BLOCK_M`` rows and ``BLOCK_N`` columns
(program ``i`` the rows ``i*BLOCK_M ..``), and every access is masked by the runtime extents ``n_rows`` and
``n_cols``. :func:`trace` calls the function once on proxies and records a :class:`Program`: a list of
:class:`Op` over :class:`Value` s whose thread-value layouts are left unknown for
:mod:`kbuild.tile.synth` to infer.

The operations: :func:`load` and :func:`store` (global ↔ register tiles), elementwise arithmetic with
Python operators and :func:`exp`, :func:`sqrt`, :func:`rsqrt`, :func:`maximum`, casts (``.to("fp32")``),
reductions (``.sum(axis)``, ``.max(axis)``, ``.min(axis)``), broadcasting by indexing with ``None``
(``m[:, None]``), and :func:`rearrange` (an explicit layout conversion: where two constraints conflict).

Matrix products add a third dimension, ``K``, that a program iterates: :func:`zeros` makes a register tile
(an accumulator), ``for k in loop("K"):`` traces its body once as a loop over the ``BLOCK_K`` steps of ``K``,
:func:`shared` copies the current step's tile of an ``"MK"`` or ``"KN"`` tensor into shared memory, and
:func:`mma` accumulates a product of shared tiles into a register tile in place (CuTe's ``gemm(a, b, c)``
convention: the accumulator is the loop-carried value). Their layouts (the mma's accumulator and operand
layouts, the shared tiles' swizzles, the copy engine) are synthesised by :mod:`kbuild.tile.mma`.

Quantised weights: a ``Tensor("int4", "KN")`` (values 0..15, zero point 8) with its scales, a
``Tensor("fp16", "GN")`` (one row per ``group`` rows of ``K``), is read only by :func:`dequant` inside the K
loop; it gives the step's ``(q - 8) · scale`` as an fp16 register tile that :func:`mma` takes as an operand.
The weights' in-memory order is not written either: :mod:`kbuild.tile.quant` derives it from the operand
layout the mma fixes, and packs a plain int4 matrix into it on the host.
"""

from __future__ import annotations

import contextvars
import inspect
import keyword
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kbuild.errors import UsageError

DTYPES = ("fp16", "bf16", "fp32")
#: element types a global tensor may have: the register types and packed 4-bit weights (read by :func:`dequant`)
TENSOR_DTYPES = (*DTYPES, "int4")
BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}
#: letters of tensor dimensions → the tile dimension (0: rows, 1: columns) they run along
DIMS = {"M": 0, "N": 1}
#: the dimension letters a global tensor may have (``K``: the dimension an mma program iterates over; ``G``:
#: groups of ``K``, the rows of a quantised weight's scales)
TENSOR_DIMS = ("MN", "N", "M", "MK", "KN", "GN")
#: types a runtime :class:`Scalar` parameter may have: the scalar types of the signature grammar
#: (:data:`kbuild.declarations.signature.SCALAR_TYPES`)
SCALAR_DTYPES = ("i1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "fp16", "bf16", "fp32", "fp64")


class TileError(UsageError, ValueError):
    """A tile program that is malformed (shapes, dtypes, a value of another program); names the operation.
    Exit status 2, as any bad input."""


@dataclass(frozen=True)
class Tensor:
    """Annotation of a global tensor parameter: element type and dimension letters (``"MN"`` or ``"N"``)."""

    dtype: str
    dims: str = "MN"

    def __post_init__(self) -> None:
        if self.dtype not in TENSOR_DTYPES:
            raise TileError(f"Tensor dtype {self.dtype!r} is not one of {', '.join(TENSOR_DTYPES)}")
        if self.dims not in TENSOR_DIMS:
            raise TileError(f"Tensor dims {self.dims!r}: expected one of {', '.join(map(repr, TENSOR_DIMS))}")
        if self.dtype == "int4" and self.dims != "KN":
            raise TileError(f"Tensor('int4', {self.dims!r}): int4 weights are a 'KN' tensor (read by dequant)")
        if self.dims == "GN" and self.dtype not in ("fp16", "bf16"):
            raise TileError(f"Tensor({self.dtype!r}, 'GN'): scales of quantised weights are fp16 or bf16")


@dataclass(frozen=True)
class Scalar:
    """Annotation of a runtime scalar parameter: one of :data:`SCALAR_DTYPES` (its type in the kernel's
    signature)."""

    dtype: str = "fp32"

    def __post_init__(self) -> None:
        if not isinstance(self.dtype, str) or self.dtype not in SCALAR_DTYPES:
            raise TileError(f"Scalar dtype {self.dtype!r} is not one of {', '.join(SCALAR_DTYPES)}")


@dataclass(eq=False)
class Value:
    """A register or shared tile of the traced program. ``shape`` names each dimension's extent: ``"M"``
    (``BLOCK_M``), ``"N"`` (``BLOCK_N``), ``"K"`` (``BLOCK_K``) or ``1`` (broadcast); ``space`` is
    ``"register"`` or ``"shared"``.

    A tile is traced, not computed: Python's own control flow and numbers cannot see its values. ``if``,
    ``while``, ``and``/``or``, ``range()``, ``float()``/``math.*``, comparisons, ``**``, ``@``, ``%``, ``//``,
    bitwise operators and item assignment on a tile raise a :class:`TileError` naming the program, the line
    and the tile operation to write instead. Equality is identity (a tile is never equal to a number)."""

    id: int
    shape: tuple[str | int, ...]
    dtype: str
    program: Program = field(repr=False)
    space: str = "register"

    # -- arithmetic ----------------------------------------------------------------------------------
    def _bin(self, op: str, other: Any, swap: bool = False) -> Value:
        a, b = (other, self) if swap else (self, other)
        return self.program.binary(op, a, b)

    def __add__(self, o: Any) -> Value: return self._bin("add", o)
    def __radd__(self, o: Any) -> Value: return self._bin("add", o, True)
    def __sub__(self, o: Any) -> Value: return self._bin("sub", o)
    def __rsub__(self, o: Any) -> Value: return self._bin("sub", o, True)
    def __mul__(self, o: Any) -> Value: return self._bin("mul", o)
    def __rmul__(self, o: Any) -> Value: return self._bin("mul", o, True)
    def __truediv__(self, o: Any) -> Value: return self._bin("div", o)
    def __rtruediv__(self, o: Any) -> Value: return self._bin("div", o, True)
    def __neg__(self) -> Value: return self._bin("sub", 0.0, True)

    def to(self, dtype: str) -> Value:
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise TileError(f"{self.program.where()}: .to({dtype!r}): expected one of {', '.join(map(repr, DTYPES))}")
        return self.program.unary("cast", self, dtype=dtype)

    # -- what a traced tile cannot do --------------------------------------------------------------
    def _refuse(self, what: str, instead: str) -> TileError:
        return TileError(f"{self.program.where()}: {what} on a tile: {instead}")

    def __bool__(self) -> bool:
        raise self._refuse("a Python truth test (if, while, and, or, not, assert)",
                           "a traced tile has no value yet; kbuild.tile has no data-dependent control flow")

    def __index__(self) -> int:
        raise self._refuse("an integer use (range(), indexing a list)", "a traced tile has no value yet")

    def __int__(self) -> int:
        raise self._refuse("int()", "a traced tile has no value yet")

    def __float__(self) -> float:
        raise self._refuse("float() or a math function", "use kbuild.tile's exp, sqrt, rsqrt and maximum")

    def __complex__(self) -> complex:
        raise self._refuse("complex()", "a traced tile has no value yet")

    def __iter__(self) -> Iterator[Value]:
        raise self._refuse("iteration", "reduce with .sum(axis), .max(axis) or .min(axis) instead")

    def __len__(self) -> int:
        raise self._refuse("len()", "a tile's extents are BLOCK_M and BLOCK_N, given when it is built")

    def __setitem__(self, index: Any, value: Any) -> None:
        raise self._refuse("item assignment", "tiles are values; store() writes a tile to a tensor")

    def _compare(self, other: Any) -> Value:
        raise self._refuse("a comparison (<, <=, >, >=)", "kbuild.tile has no masks; use maximum()")

    __lt__ = __le__ = __gt__ = __ge__ = _compare

    def _power(self, other: Any) -> Value:
        raise self._refuse("**", "write the product (x * x), or exp/sqrt/rsqrt")

    __pow__ = __rpow__ = _power

    def _matmul(self, other: Any) -> Value:
        raise self._refuse("@", "matrix products are mma(shared(a), shared(b), acc) inside loop('K')")

    __matmul__ = __rmatmul__ = _matmul

    def _other(self, other: Any) -> Value:
        raise self._refuse("this operator (%, //, &, |, ^, <<, >>, ~, abs)",
                           "kbuild.tile has + - * / and exp, sqrt, rsqrt, maximum")

    __mod__ = __rmod__ = __floordiv__ = __rfloordiv__ = __and__ = __rand__ = __or__ = __ror__ = _other
    __xor__ = __rxor__ = __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = _other

    def __invert__(self) -> Value:
        return self._other(None)

    def __abs__(self) -> Value:
        return self._other(None)

    def __pos__(self) -> Value:
        return self

    def sum(self, axis: int) -> Value:
        return self.program.reduce("sum", self, axis)

    def max(self, axis: int) -> Value:
        return self.program.reduce("max", self, axis)

    def min(self, axis: int) -> Value:
        return self.program.reduce("min", self, axis)

    def __getitem__(self, index: Any) -> Value:
        if not isinstance(index, tuple):
            index = (index,)
        if len(self.shape) != 1 or len(index) != 2:
            raise TileError(f"{self.program.where()}: only a vector can be indexed, as v[:, None] or v[None, :]")
        if index[0] is None and index[1] == slice(None):
            return self.program.expand(self, 0)
        if index[1] is None and index[0] == slice(None):
            return self.program.expand(self, 1)
        raise TileError(f"{self.program.where()}: index {index!r}: expected [:, None] or [None, :]")


@dataclass
class Param:
    name: str
    kind: str  # "tensor" | "scalar"
    dtype: str
    dims: str = ""


@dataclass
class Op:
    """One operation: ``kind`` (load, store, binary, unary, reduce, expand, rearrange, extent), its operand
    value ids (constants appear in ``attrs``), its result and where in the source it was written."""

    kind: str
    args: tuple[Any, ...]
    result: Value | None
    attrs: dict[str, Any]
    line: int

    @property
    def label(self) -> str:
        name = self.attrs.get("op", self.kind)
        return f"{name} (line {self.line})"


@dataclass
class Program:
    """A traced tile kernel: its parameters and operations, in order."""

    name: str
    params: list[Param]
    ops: list[Op] = field(default_factory=list)
    values: list[Value] = field(default_factory=list)
    source_file: str = ""
    qualname: str = ""
    """``module:function`` of the traced function (what emitted source names: no checkout path)."""

    def where(self) -> str:
        return f"{self.name} line {_caller_line()}"

    loop_depth: int = 0

    def _new(self, shape: tuple[str | int, ...], dtype: str, space: str = "register") -> Value:
        v = Value(len(self.values), shape, dtype, self, space)
        self.values.append(v)
        return v

    def _emit(self, kind: str, args: tuple[Any, ...], result: Value | None, **attrs: Any) -> Value | None:
        self.ops.append(Op(kind, args, result, attrs, _caller_line()))
        return result

    def _value(self, x: Any, what: str) -> Value | float | ScalarRef:
        if isinstance(x, Value):
            if x.program is not self:
                raise TileError(f"{self.where()}: {what}: a value of another kernel")
            if x.space != "register":
                raise TileError(f"{self.where()}: {what}: a shared tile; only mma reads shared tiles")
            return x
        if isinstance(x, ScalarRef):
            return x
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            return _number(x, f"{self.where()}: {what}")
        raise TileError(f"{self.where()}: {what}: {type(x).__name__} is not a tile, a scalar parameter or a number")

    # -- operations ----------------------------------------------------------------------------------
    def binary(self, op: str, a: Any, b: Any) -> Value:
        av, bv = self._value(a, op), self._value(b, op)
        tiles = [v for v in (av, bv) if isinstance(v, Value)]
        shape = tiles[0].shape
        if len(tiles) == 2:
            shape = _broadcast(tiles[0], tiles[1], op, self)
        dtype = _promote(*(t.dtype for t in tiles))
        out = self._new(shape, dtype)
        self._emit("binary", (av, bv), out, op=op)
        return out

    def unary(self, op: str, a: Any, dtype: str | None = None) -> Value:
        av = self._value(a, op)
        if not isinstance(av, Value):
            raise TileError(f"{self.where()}: {op} of a constant; write the number")
        if dtype is not None and dtype not in DTYPES:
            raise TileError(f"{self.where()}: cast to {dtype!r}: not one of {', '.join(DTYPES)}")
        out = self._new(av.shape, dtype or av.dtype)
        self._emit("unary", (av,), out, op=op)
        return out

    def reduce(self, op: str, a: Value, axis: int) -> Value:
        if axis not in range(len(a.shape)):
            raise TileError(f"{self.where()}: {op}(axis={axis}) of a rank-{len(a.shape)} tile")
        if len(a.shape) != 2:
            raise TileError(f"{self.where()}: {op}: reductions take a 2-D tile")
        out = self._new(a.shape[:axis] + a.shape[axis + 1:], "fp32" if a.dtype == "fp32" else a.dtype)
        self._emit("reduce", (a,), out, op=op, axis=axis)
        return out

    def expand(self, a: Value, axis: int) -> Value:
        out = self._new((*a.shape[:axis], 1, *a.shape[axis:]), a.dtype)
        self._emit("expand", (a,), out, axis=axis)
        return out


@dataclass
class ScalarRef:
    """A runtime scalar: a :class:`Scalar` parameter, or an extent (``n_rows``, ``n_cols``)."""

    name: str
    dtype: str = "fp32"


@dataclass
class GlobalRef:
    """A :class:`Tensor` parameter inside the traced function (only :func:`load` and :func:`store` take it)."""

    param: Param
    program: Program


_CURRENT: contextvars.ContextVar[Program | None] = contextvars.ContextVar("kbuild_tile_program", default=None)


def _caller_line() -> int:
    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_globals.get("__name__") != __name__:
            return frame.f_lineno
        frame = frame.f_back
    return 0


def _program() -> Program:
    p = _CURRENT.get()
    if p is None:
        raise TileError("tile operations run only inside kbuild.tile.trace()")
    return p


def _broadcast(a: Value, b: Value, op: str, program: Program) -> tuple[str | int, ...]:
    if len(a.shape) != len(b.shape):
        raise TileError(f"{program.where()}: {op} of shapes {a.shape} and {b.shape}: ranks differ (index a vector "
                        "with [:, None] or [None, :] to broadcast it)")
    out: list[str | int] = []
    for x, y in zip(a.shape, b.shape):
        if x != y and 1 not in (x, y):
            raise TileError(f"{program.where()}: {op} of shapes {a.shape} and {b.shape} do not broadcast")
        out.append(y if x == 1 else x)
    return tuple(out)


def _number(x: Any, where: str) -> float:
    """``x`` (an int or a float, not a bool) as the float a kernel's constant is; a :class:`TileError` for
    anything else, and for an int too large for a float (``10**400``)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TileError(f"{where}: {x!r:.60} is not a number")
    try:
        return float(x)
    except OverflowError:
        raise TileError(f"{where}: the integer {str(x)[:20]}… ({len(str(x))} digits) is too large for a float") from None


def _promote(*dtypes: str) -> str:
    return "fp32" if "fp32" in dtypes or len(set(dtypes)) > 1 else dtypes[0]


# -- the public operations ----------------------------------------------------------------------------


def load(src: GlobalRef, other: float = 0.0, layout: Any = None) -> Value:
    """The program's block of ``src`` as a register tile; elements past the tensor's edge read ``other``.
    ``layout`` (a :class:`kbuild.tile.synth.Blocked`) pins the tile's layout instead of leaving it to synthesis."""
    p = _program()
    if not isinstance(src, GlobalRef):
        raise TileError(f"{p.where()}: load takes a Tensor parameter, not {type(src).__name__}")
    if "K" in src.param.dims or "G" in src.param.dims:
        reader = "dequant()" if src.param.dtype == "int4" or "G" in src.param.dims else "shared()"
        raise TileError(f"{p.where()}: load({src.param.name}): a {src.param.dims!r} tensor is read by {reader} "
                        "inside loop('K')")
    fill = _number(other, f"{p.where()}: load({src.param.name}, other=...)")
    shape = tuple(src.param.dims)
    out = p._new(shape, src.param.dtype)
    p._emit("load", (src.param,), out, other=fill, layout=layout)
    return out


def store(dst: GlobalRef, value: Value) -> None:
    """Write ``value`` (cast to ``dst``'s element type) to the program's block of ``dst``."""
    p = _program()
    if not isinstance(dst, GlobalRef):
        raise TileError(f"{p.where()}: store takes a Tensor parameter, not {type(dst).__name__}")
    v = p._value(value, "store")
    if not isinstance(v, Value) or v.shape != tuple(dst.param.dims):
        shape = v.shape if isinstance(v, Value) else "a scalar"
        raise TileError(f"{p.where()}: store of {shape} into {dst.param.name} ({dst.param.dims}): shapes differ")
    if v.dtype != dst.param.dtype:
        v = p.unary("cast", v, dtype=dst.param.dtype)
    p._emit("store", (dst.param, v), None)


def exp(x: Value) -> Value:
    return _program().unary("exp", x)


def sqrt(x: Value) -> Value:
    return _program().unary("sqrt", x)


def rsqrt(x: Value) -> Value:
    return _program().unary("rsqrt", x)


def maximum(a: Any, b: Any) -> Value:
    return _program().binary("maximum", a, b)


def rearrange(x: Value) -> Value:
    """The same tile in a layout of its own: a layout conversion the synthesiser places (Gluon's
    ``convert_layout``). Write it where two operations want different layouts of one value."""
    return _program().unary("rearrange", x)


def extent(dim: str) -> ScalarRef:
    """The runtime extent of dimension ``"M"`` (``n_rows``) or ``"N"`` (``n_cols``)."""
    if dim not in DIMS:
        raise TileError(f"{_program().where()}: extent({dim!r}): expected 'M' or 'N'")
    return ScalarRef("n_rows" if dim == "M" else "n_cols", "i32")


def zeros(dims: str = "MN", dtype: str = "fp32") -> Value:
    """A register tile of zeros over ``dims`` (an accumulator for :func:`mma`)."""
    p = _program()
    if dims not in ("MN",) or dtype not in DTYPES:
        raise TileError(f"{p.where()}: zeros({dims!r}, {dtype!r}): expected dims 'MN' and one of {', '.join(DTYPES)}")
    out = p._new(tuple(dims), dtype)
    p._emit("zeros", (), out)
    return out


@dataclass
class LoopIndex:
    """The step of a :func:`loop` (its tile index along the dimension)."""

    dim: str


def loop(dim: str = "K") -> Iterator[LoopIndex]:
    """``for k in loop("K"):``: the body runs over the ``BLOCK_K`` steps of ``K`` (traced once)."""
    p = _program()
    if dim != "K":
        raise TileError(f"{p.where()}: loop({dim!r}): only the K dimension is iterated")
    if p.loop_depth:
        raise TileError(f"{p.where()}: loop({dim!r}) inside another loop")
    p._emit("loop", (), None, dim=dim)
    p.loop_depth += 1
    try:
        yield LoopIndex(dim)
    finally:
        p.loop_depth -= 1
        p._emit("endloop", (), None, dim=dim)


def shared(src: GlobalRef) -> Value:
    """The current K step's tile of ``src`` (an ``"MK"`` or ``"KN"`` tensor) copied into shared memory; only
    inside ``loop("K")``. The copy engine (TMA, cp.async) and the tile's swizzle are synthesised."""
    p = _program()
    if not isinstance(src, GlobalRef):
        raise TileError(f"{p.where()}: shared takes a Tensor parameter, not {type(src).__name__}")
    if "K" not in src.param.dims:
        raise TileError(f"{p.where()}: shared({src.param.name}): a {src.param.dims!r} tensor has no K dimension")
    if src.param.dtype == "int4":
        raise TileError(f"{p.where()}: shared({src.param.name}): int4 weights are read by dequant(), whose copy "
                        "and packing are synthesised")
    if not p.loop_depth:
        raise TileError(f"{p.where()}: shared({src.param.name}) outside loop('K'): which K step is meant?")
    out = p._new(tuple(src.param.dims), src.param.dtype, "shared")
    p._emit("shared", (src.param,), out)
    return out


def dequant(w: GlobalRef, scales: GlobalRef, group: int = 128) -> Value:
    """The current K step's tile of the int4 weights ``w`` (a ``"KN"`` tensor, values 0..15) as fp16
    ``(q - 8) · scale``, where ``scales`` (a ``"GN"`` tensor) holds one row per ``group`` rows of ``K``: a K×N
    register tile for :func:`mma`; only inside ``loop("K")``. How the weights are laid out in memory, copied
    and unpacked is synthesised (:mod:`kbuild.tile.quant`)."""
    p = _program()
    if not isinstance(w, GlobalRef) or w.param.dtype != "int4":
        raise TileError(f"{p.where()}: dequant takes an int4 Tensor parameter ('KN') as its weights")
    if not isinstance(scales, GlobalRef) or scales.param.dims != "GN":
        raise TileError(f"{p.where()}: dequant({w.param.name}, ...): the scales must be a 'GN' Tensor parameter "
                        "(one row per group of K)")
    if isinstance(group, bool) or not isinstance(group, int) or group < 16 or group & (group - 1):
        raise TileError(f"{p.where()}: dequant(group={group!r}): expected a power of two of at least 16")
    if not p.loop_depth:
        raise TileError(f"{p.where()}: dequant({w.param.name}) outside loop('K'): which K step is meant?")
    out = p._new(("K", "N"), scales.param.dtype)
    p._emit("dequant", (w.param, scales.param), out, group=group)
    return out


def mma(a: Value, b: Value, acc: Value) -> None:
    """``acc += a @ b`` in place: ``a`` an M×K and ``b`` a K×N tile (fp16 or bf16: shared tiles, or the
    register tile of :func:`dequant`), ``acc`` an M×N fp32 register tile from :func:`zeros`."""
    p = _program()
    for name, v, want in (("a", a, ("M", "K")), ("b", b, ("K", "N")), ("acc", acc, ("M", "N"))):
        if not isinstance(v, Value) or v.program is not p:
            raise TileError(f"{p.where()}: mma: {name} is not a tile of this kernel")
        if v.shape != want:
            raise TileError(f"{p.where()}: mma: {name} has shape {v.shape}, expected {want}")
    dequantised = {op.result.id for op in p.ops if op.kind == "dequant" and op.result is not None}
    if any(v.space != "shared" and v.id not in dequantised for v in (a, b)):
        raise TileError(f"{p.where()}: mma: operands must be shared tiles (shared(x) inside loop('K')) or "
                        f"dequant() tiles, got a in {a.space}, b in {b.space}")
    if acc.space != "register" or acc.dtype != "fp32":
        raise TileError(f"{p.where()}: mma: the accumulator must be an fp32 register tile (zeros('MN'))")
    if a.dtype != b.dtype or a.dtype not in ("fp16", "bf16"):
        raise TileError(f"{p.where()}: mma of {a.dtype} x {b.dtype}: expected two fp16 or two bf16 tiles")
    if not p.loop_depth:
        raise TileError(f"{p.where()}: mma outside loop('K')")
    p._emit("mma", (a, b, acc), None)


def trace(fn: Callable[..., Any]) -> Program:
    """Run ``fn`` once on proxies of its annotated parameters and return the recorded :class:`Program`.

    ``fn`` is the user's code: anything it raises but a :class:`TileError` (an annotation that does not
    evaluate, an exception, ``sys.exit``, endless recursion) becomes one :class:`TileError` naming the
    program (:func:`kbuild.usercode.call`), and so does anything that is not a Python function."""
    from kbuild import usercode

    if not inspect.isfunction(fn):
        raise TileError(f"{getattr(fn, '__module__', None) or '?'}:{getattr(fn, '__qualname__', fn)!s:.80}: not a "
                        f"Python function ({type(fn).__name__}); a tile kernel is a function whose parameters are "
                        "annotated with Tensor(...) or Scalar(...)")
    ref = f"{fn.__module__}:{fn.__qualname__}"
    if inspect.iscoroutinefunction(fn) or inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise TileError(f"{ref}: a generator or async function; a tile kernel is a plain function (def) that runs "
                        "once when traced")
    if not fn.__name__.isidentifier() or keyword.iskeyword(fn.__name__):
        raise TileError(f"{ref}: the function's name {fn.__name__!r} cannot name a kernel; a tile kernel is a "
                        "function defined with def")
    sig = usercode.call(lambda: inspect.signature(fn, eval_str=True), error=lambda m: TileError(f"{ref}: {m}"),
                        what="evaluating an annotation")
    params: list[Param] = []
    args: list[Any] = []
    program = Program(fn.__name__, params, source_file=inspect.getsourcefile(fn) or "", qualname=ref)
    for name, p in sig.parameters.items():
        ann = p.annotation
        if isinstance(ann, Tensor):
            params.append(Param(name, "tensor", ann.dtype, ann.dims))
            args.append(GlobalRef(params[-1], program))
        elif isinstance(ann, Scalar):
            params.append(Param(name, "scalar", ann.dtype))
            args.append(ScalarRef(name, ann.dtype))
        else:
            raise TileError(f"{fn.__name__}: parameter {name!r} needs a kbuild.tile Tensor(...) or Scalar(...) "
                            "annotation (a value, not a string)")
    token = _CURRENT.set(program)
    try:
        usercode.call(fn, *args, error=lambda m: TileError(f"{ref}: {m}"), what="tracing")
    finally:
        _CURRENT.reset(token)
    if not any(op.kind == "store" for op in program.ops):
        raise TileError(f"{fn.__name__}: stores nothing")
    return program


__all__ = ["BYTES", "DIMS", "DTYPES", "SCALAR_DTYPES", "TENSOR_DIMS", "TENSOR_DTYPES", "GlobalRef", "LoopIndex", "Op", "Param",
           "Program", "Scalar", "ScalarRef", "Tensor", "TileError", "Value", "dequant", "exp", "extent", "load", "loop",
           "maximum", "mma", "rearrange", "rsqrt", "shared", "sqrt", "store", "trace", "zeros"]

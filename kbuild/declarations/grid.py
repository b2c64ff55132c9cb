"""Grid expressions: the launch grid of a kernel as integer arithmetic over its arguments and constexprs.

``[tool.kbuild.kernels] grid = ["cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)", "1", "1"]`` (one to three entries,
the missing ones are 1) lets the generated C launcher compute the grid itself, from the runtime arguments
and the constexprs of the configuration that ships for the GPU it runs on. This module owns the
expressions: parsing into a safe subset (Python's :mod:`ast`, then a small tree of its own), a Python
evaluator, and the C code the launcher runs. Both evaluate exactly the same arithmetic:

* every value is a signed 64-bit integer; a runtime argument outside that range (a ``u64`` above
  ``INT64_MAX``) or any intermediate result outside it is an *overflow*;
* ``a // b`` and ``a % b`` are Python's floor division and modulo (the remainder takes the divisor's
  sign), ``cdiv(a, b)`` is Triton's ``(a + b - 1) // b``, ``min``/``max`` take two or more arguments;
  a zero divisor is a *division by zero*;
* every operation is evaluated (C evaluates all arguments of a call), a failed one gives 0 and sets a flag
  (:data:`OVERFLOW`, :data:`DIV_ZERO`); the flags of one evaluation are the same in C and Python;
* each grid dimension must then be within CUDA's limits (:data:`GRID_LIMITS`); 0 launches nothing (as an
  explicit zero grid always did); a negative one is an error.

Allowed: integer literals, names, ``+ - * // %``, unary ``-`` and ``+``, parentheses, ``cdiv``, ``min`` and
``max``. Anything else (a float, ``/``, ``**``, attribute access, a comparison...) is a
:class:`GridExprError` that says which construct; so is a division by a literal zero. Names are checked
by the caller (:func:`check_names`): a grid may read integer runtime arguments and integer constexprs,
never a pointer or a floating-point value.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

#: The flags of one evaluation (a bit mask; C and Python set the same ones).
OVERFLOW = 1
DIV_ZERO = 2
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
#: CUDA's largest grid, per dimension (x, y, z).
GRID_LIMITS = (2**31 - 1, 65535, 65535)
#: Most entries of a grid.
MAX_DIMS = 3
#: Longest expression text accepted (a grid is a line of arithmetic, not a program).
MAX_EXPR_CHARS = 1000
#: Deepest expression tree accepted.
MAX_DEPTH = 32
FUNCTIONS = ("cdiv", "min", "max")


class GridExprError(ValueError):
    """A grid expression outside the grammar, or naming what it may not (the caller adds file and key)."""


class GridEvalError(ValueError):
    """An evaluation that overflowed, divided by zero or gave a dimension outside CUDA's limits."""

    def __init__(self, message: str, flags: int = 0) -> None:
        self.flags = flags
        super().__init__(message)


# The tree: ("int", value) | ("name", id) | ("neg", x) | ("bin", op, a, b) | ("call", fn, (args...))
Node = tuple


def _wrap(value: int, flags: int) -> tuple[int, int]:
    if INT64_MIN <= value <= INT64_MAX:
        return value, flags
    return 0, flags | OVERFLOW


def _floordiv(a: int, b: int) -> tuple[int, int]:
    if b == 0:
        return 0, DIV_ZERO
    return _wrap(a // b, 0)


def _mod(a: int, b: int) -> tuple[int, int]:
    if b == 0:
        return 0, DIV_ZERO
    return _wrap(a % b, 0)


def _cdiv(a: int, b: int) -> tuple[int, int]:
    s, f1 = _wrap(a + b, 0)
    t, f2 = _wrap(s - 1, 0)
    q, f3 = _floordiv(t, b)
    return q, f1 | f2 | f3


_BINOPS: dict[str, Callable[[int, int], tuple[int, int]]] = {
    "+": lambda a, b: _wrap(a + b, 0),
    "-": lambda a, b: _wrap(a - b, 0),
    "*": lambda a, b: _wrap(a * b, 0),
    "//": _floordiv,
    "%": _mod,
}
_AST_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}
_C_HELPERS = {"+": "kb_i64_add", "-": "kb_i64_sub", "*": "kb_i64_mul", "//": "kb_i64_fdiv", "%": "kb_i64_fmod",
              "cdiv": "kb_i64_cdiv", "min": "kb_i64_min", "max": "kb_i64_max"}


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Constant):
        return f"the {type(node.value).__name__} literal {node.value!r}"
    if isinstance(node, ast.BinOp):
        sym = {ast.Div: "/", ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&", ast.BitOr: "|",
               ast.BitXor: "^", ast.MatMult: "@"}.get(type(node.op), type(node.op).__name__)
        hint = " (use // for integer division, or cdiv(a, b) to round up)" if isinstance(node.op, ast.Div) else ""
        return f"the operator {sym}{hint}"
    return {ast.Attribute: "attribute access", ast.Subscript: "indexing", ast.Compare: "a comparison",
            ast.BoolOp: "and/or", ast.IfExp: "a conditional expression", ast.Lambda: "a lambda",
            ast.Call: "a call", ast.UnaryOp: "this unary operator"}.get(type(node), f"a {type(node).__name__} node")


def parse_expr(text: str) -> Node:
    """The tree of one expression; :class:`GridExprError` says why not."""
    if not isinstance(text, str):
        raise GridExprError(f"expected an expression string, got {type(text).__name__}")
    if not text.strip():
        raise GridExprError("empty expression; write \"1\" for a dimension of one")
    if len(text) > MAX_EXPR_CHARS:
        raise GridExprError(f"expression of {len(text)} characters; at most {MAX_EXPR_CHARS}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise GridExprError(f"not an expression: {exc.msg} ({text.strip()!r:.80})") from None
    except (ValueError, RecursionError, MemoryError):  # NUL bytes, absurd nesting
        raise GridExprError(f"not an expression ({text!r:.80})") from None
    return _convert(tree.body, 0)


def _convert(node: ast.AST, depth: int) -> Node:
    if depth > MAX_DEPTH:
        raise GridExprError(f"expression nested more than {MAX_DEPTH} deep")
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int):
            raise GridExprError(f"{_describe(node)} is not allowed; a grid is integer arithmetic")
        if not INT64_MIN <= node.value <= INT64_MAX:
            raise GridExprError(f"the literal {node.value} does not fit in 64 bits")
        return ("int", node.value)
    if isinstance(node, ast.Name):
        if node.id in FUNCTIONS:
            raise GridExprError(f"{node.id} is a function; call it: {node.id}(a, b)")
        return ("name", node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _convert(node.operand, depth + 1)
        return ("neg", inner) if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp) and type(node.op) in _AST_OPS:
        op = _AST_OPS[type(node.op)]
        a, b = _convert(node.left, depth + 1), _convert(node.right, depth + 1)
        if op in ("//", "%") and b == ("int", 0):
            raise GridExprError(f"division by the literal 0 ({op} 0)")
        return ("bin", op, a, b)
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            what = node.func.id if isinstance(node.func, ast.Name) else "this expression"
            raise GridExprError(f"calling {what} is not allowed; the functions are {', '.join(FUNCTIONS)}")
        name = node.func.id
        if node.keywords:
            raise GridExprError(f"{name}() takes no keyword arguments")
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise GridExprError(f"{name}() takes no *arguments")
        args = tuple(_convert(a, depth + 1) for a in node.args)
        if name == "cdiv" and len(args) != 2:
            raise GridExprError(f"cdiv takes two arguments (cdiv(a, b) = (a + b - 1) // b), got {len(args)}")
        if name in ("min", "max") and len(args) < 2:
            raise GridExprError(f"{name} takes two or more arguments, got {len(args)}")
        if name == "cdiv" and args[1] == ("int", 0):
            raise GridExprError("division by the literal 0 (cdiv(..., 0))")
        return ("call", name, args)
    raise GridExprError(f"{_describe(node)} is not allowed; a grid uses integers, names, + - * // %, "
                        "parentheses and cdiv/min/max")


def names_of(node: Node) -> set[str]:
    """The names an expression reads."""
    kind = node[0]
    if kind == "name":
        return {node[1]}
    if kind == "neg":
        return names_of(node[1])
    if kind == "bin":
        return names_of(node[2]) | names_of(node[3])
    if kind == "call":
        return set().union(*(names_of(a) for a in node[2]))
    return set()


def eval_node(node: Node, values: Mapping[str, int]) -> tuple[int, int]:
    """(value, flags) of one expression, every operation evaluated; KeyError for a name without a value."""
    kind = node[0]
    if kind == "int":
        return node[1], 0
    if kind == "name":
        return _wrap(int(values[node[1]]), 0)
    if kind == "neg":
        v, f = eval_node(node[1], values)
        r, g = _wrap(-v, 0)
        return r, f | g
    if kind == "bin":
        a, fa = eval_node(node[2], values)
        b, fb = eval_node(node[3], values)
        r, fr = _BINOPS[node[1]](a, b)
        return r, fa | fb | fr
    args = [eval_node(a, values) for a in node[2]]
    flags = 0
    for _, f in args:
        flags |= f
    vals = [v for v, _ in args]
    if node[1] == "cdiv":
        r, fr = _cdiv(vals[0], vals[1])
        return r, flags | fr
    return (min(vals) if node[1] == "min" else max(vals)), flags


def fold(node: Node, constants: Mapping[str, int]) -> Node:
    """The expression with ``constants`` substituted and every constant subtree computed. A constant subtree
    that overflows or divides by zero is a :class:`GridEvalError` (the build can say so before any launch)."""
    kind = node[0]
    if kind == "int":
        return node
    if kind == "name":
        return ("int", int(constants[node[1]])) if node[1] in constants else node
    if kind == "neg":
        out: Node = ("neg", fold(node[1], constants))
    elif kind == "bin":
        out = ("bin", node[1], fold(node[2], constants), fold(node[3], constants))
    else:
        out = ("call", node[1], tuple(fold(a, constants) for a in node[2]))
    divisor = out[3] if out[0] == "bin" and out[1] in ("//", "%") else out[2][1] if out[0] == "call" and \
        out[1] == "cdiv" else None
    if divisor == ("int", 0):  # whatever the other operand, this divides by zero at every launch
        raise GridEvalError(_flag_text(DIV_ZERO), DIV_ZERO)
    if names_of(out):
        return out
    value, flags = eval_node(out, {})
    if flags:
        raise GridEvalError(_flag_text(flags), flags)
    return ("int", value)


def _flag_text(flags: int) -> str:
    parts = (["64-bit overflow"] if flags & OVERFLOW else []) + (["division by zero"] if flags & DIV_ZERO else [])
    return " and ".join(parts)


def c_literal(value: int) -> str:
    """A C expression of type ``int64_t`` for ``value``."""
    if value == INT64_MIN:
        return "(-INT64_C(9223372036854775807) - 1)"
    return f"INT64_C({value})"


def c_expr(node: Node, variables: Mapping[str, str]) -> str:
    """The C text of an expression whose names are ``variables`` (name → an ``int64_t`` C expression);
    ``kbl_err`` is the ``int`` flag word the helpers set."""
    kind = node[0]
    if kind == "int":
        return c_literal(node[1])
    if kind == "name":
        return variables[node[1]]
    if kind == "neg":
        return f"kb_i64_sub(INT64_C(0), {c_expr(node[1], variables)}, &kbl_err)"
    if kind == "bin":
        return f"{_C_HELPERS[node[1]]}({c_expr(node[2], variables)}, {c_expr(node[3], variables)}, &kbl_err)"
    fn, args = node[1], [c_expr(a, variables) for a in node[2]]
    if fn == "cdiv":
        return f"kb_i64_cdiv({args[0]}, {args[1]}, &kbl_err)"
    text = args[0]
    for a in args[1:]:  # min/max fold left: kb_i64_min(kb_i64_min(a, b), c)
        text = f"{_C_HELPERS[fn]}({text}, {a})"
    return text


@dataclass(frozen=True)
class Grid:
    """A parsed grid: three expressions (the missing ones are ``1``) and the text they came from."""

    texts: tuple[str, ...]
    trees: tuple[Node, Node, Node]

    def names(self) -> set[str]:
        return set().union(*(names_of(t) for t in self.trees))

    def evaluate_raw(self, values: Mapping[str, int]) -> tuple[tuple[int, int, int], int]:
        """(the three values, the flags), before the limits are checked: what the C code computes."""
        out = [eval_node(t, values) for t in self.trees]
        flags = 0
        for _, f in out:
            flags |= f
        return (out[0][0], out[1][0], out[2][0]), flags

    def evaluate(self, values: Mapping[str, int]) -> tuple[int, int, int]:
        """The grid for ``values`` (every name the expressions read), or :class:`GridEvalError`."""
        dims, flags = self.evaluate_raw(values)
        if flags:
            raise GridEvalError(f"grid: {_flag_text(flags)}", flags)
        check_dims(dims)
        return dims


def check_dims(dims: Sequence[int]) -> None:
    """:class:`GridEvalError` when a dimension is negative or above CUDA's limit."""
    for axis, (d, limit) in enumerate(zip(dims, GRID_LIMITS)):
        if d < 0 or d > limit:
            raise GridEvalError(f"grid dimension {'xyz'[axis]} = {d} is outside 0..{limit}")


def parse_grid(texts: Sequence[str], *, on_error: Callable[[int | None, str], Exception] | None = None) -> Grid:
    """Parse one to three expressions. ``on_error(index, message)`` makes the exception to raise (the caller
    names file and key; ``index`` None: the list itself); by default a :class:`GridExprError`."""
    def fail(index: int | None, message: str) -> Exception:
        return on_error(index, message) if on_error is not None else GridExprError(
            message if index is None else f"grid[{index}]: {message}")

    if not isinstance(texts, (list, tuple)) or not 1 <= len(texts) <= MAX_DIMS:
        n = len(texts) if isinstance(texts, (list, tuple)) else None
        raise fail(None, f"expected 1 to {MAX_DIMS} expressions (x, y, z), got {n if n is not None else texts!r}")
    trees: list[Node] = []
    for i, text in enumerate(texts):
        try:
            trees.append(parse_expr(text))
        except GridExprError as exc:
            raise fail(i, str(exc)) from None
    while len(trees) < MAX_DIMS:
        trees.append(("int", 1))
    return Grid(tuple(texts), (trees[0], trees[1], trees[2]))


def check_names(grid: Grid, *, integers: Iterable[str], others: Mapping[str, str],
                on_error: Callable[[int, str], Exception]) -> None:
    """Every name the grid reads must be in ``integers`` (integer runtime arguments and integer constexprs);
    ``others`` maps the kernel's other names to what they are (``"a pointer argument (*fp16)"``), for the
    message. ``on_error(index, message)`` makes the exception, for the first expression at fault."""
    allowed = set(integers)
    for i, tree in enumerate(grid.trees[:len(grid.texts)]):
        for name in sorted(names_of(tree)):
            if name in allowed:
                continue
            if name in others:
                raise on_error(i, f"{name!r} is {others[name]}; a grid reads integer arguments and integer "
                                  "constexprs only")
            hint = difflib.get_close_matches(name, sorted(allowed), n=1)
            known = ", ".join(sorted(allowed)) or "none"
            raise on_error(i, f"unknown name {name!r}" + (f"; did you mean {hint[0]!r}?" if hint else "")
                           + f" (integer arguments and constexprs: {known})")


#: C helpers of the generated launchers (emitted once, before the first kernel with a grid).
C_HELPERS = """\
/* ---- grid expressions: 64-bit integer arithmetic, every failure flagged (kbuild/declarations/grid.py); inline, so that
 * helpers a file does not use raise no warning ---- */
#define KB_OVERFLOW 1
#define KB_DIV_ZERO 2
static inline int64_t kb_i64_add(int64_t a, int64_t b, int *err) {
  if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) { *err |= KB_OVERFLOW; return 0; }
  return a + b;
}
static inline int64_t kb_i64_sub(int64_t a, int64_t b, int *err) {
  if ((b < 0 && a > INT64_MAX + b) || (b > 0 && a < INT64_MIN + b)) { *err |= KB_OVERFLOW; return 0; }
  return a - b;
}
static inline int64_t kb_i64_mul(int64_t a, int64_t b, int *err) {
  int bad = a > 0 ? (b > 0 ? a > INT64_MAX / b : b < INT64_MIN / a)
                  : (b > 0 ? a < INT64_MIN / b : (a != 0 && b < INT64_MAX / a));
  if (bad) { *err |= KB_OVERFLOW; return 0; }
  return a * b;
}
static inline int64_t kb_i64_fdiv(int64_t a, int64_t b, int *err) { /* Python's a // b */
  if (b == 0) { *err |= KB_DIV_ZERO; return 0; }
  if (a == INT64_MIN && b == -1) { *err |= KB_OVERFLOW; return 0; }
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int64_t kb_i64_fmod(int64_t a, int64_t b, int *err) { /* Python's a % b */
  if (b == 0) { *err |= KB_DIV_ZERO; return 0; }
  if (b == -1) return 0;
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline int64_t kb_i64_cdiv(int64_t a, int64_t b, int *err) { /* Triton's cdiv: (a + b - 1) // b */
  return kb_i64_fdiv(kb_i64_sub(kb_i64_add(a, b, err), 1, err), b, err);
}
static inline int64_t kb_i64_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t kb_i64_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t kb_i64_u64(uint64_t a, int *err) {
  if (a > (uint64_t)INT64_MAX) { *err |= KB_OVERFLOW; return 0; }
  return (int64_t)a;
}
/* The grid g of kernel k, checked: no flag set, each dimension within CUDA's limits. */
static inline CUresult kb_griddims(const char *k, const char *arch, int err, const int64_t g[3], unsigned int out[3]) {
  static const int64_t limit[3] = {INT64_C(2147483647), INT64_C(65535), INT64_C(65535)};
  if (err != 0) {
    kb_set_error("kbuild: %s (%s): the grid expression failed: %s%s%s", k, arch,
                 (err & KB_OVERFLOW) ? "64-bit overflow" : "", (err & KB_OVERFLOW) && (err & KB_DIV_ZERO) ? " and " : "",
                 (err & KB_DIV_ZERO) ? "division by zero" : "");
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (int i = 0; i < 3; ++i) {
    if (g[i] < 0 || g[i] > limit[i]) {
      kb_set_error("kbuild: %s (%s): grid dimension %c = %lld is outside 0..%lld", k, arch, "xyz"[i],
                   (long long)g[i], (long long)limit[i]);
      return CUDA_ERROR_INVALID_VALUE;
    }
    out[i] = (unsigned int)g[i];
  }
  return CUDA_SUCCESS;
}
"""


__all__ = ["C_HELPERS", "DIV_ZERO", "FUNCTIONS", "GRID_LIMITS", "OVERFLOW", "Grid", "GridEvalError", "GridExprError",
           "c_expr", "c_literal", "check_dims", "check_names", "eval_node", "fold", "names_of", "parse_expr",
           "parse_grid"]

"""Gluon emission: a synthesised tile program becomes readable ``triton.experimental.gluon`` source.

:func:`emit` writes one ``@gluon.jit`` kernel. Its parameters: a pointer per tensor (``x_ptr``), a row stride
per 2-D tensor (``stride_x``), the scalars, the extents ``n_rows`` and ``n_cols``, and the constexprs
``BLOCK_M``, ``BLOCK_N`` and, when several layout assignments are kept, ``VARIANT`` (the kbuild tuner picks
one on the GPU: each variant is a ``Config`` of the bench spec). The layouts are named ``L0, L1, ...`` at the
top of the body; every other layout is a ``SliceLayout`` of one of them. :func:`load_kernel` turns the
source into a ``GluonJITFunction`` (the source is kept in :mod:`linecache`, so Triton reads it as it reads a
file, and the artefact can carry it for debugging).
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import linecache
import types
from dataclasses import dataclass
from typing import Any

from kbuild.tile.lang import Op, Param, Program, ScalarRef, TileError, Value
from kbuild.tile.synth import Blocked, Synthesis

#: Gluon's spelling of each kbuild.tile dtype, binary operator and unary function (every emitter of this package).
GL_DTYPE = {"fp16": "gl.float16", "bf16": "gl.bfloat16", "fp32": "gl.float32"}
BINARY = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
UNARY = {"exp": "gl.exp", "sqrt": "gl.sqrt", "rsqrt": "gl.rsqrt"}


@dataclass(frozen=True)
class Variant:
    """One kept layout assignment: its warps and the :class:`~kbuild.tile.synth.Synthesis` rank it came from."""

    synthesis: Synthesis
    rank: int = 0

    @property
    def num_warps(self) -> int:
        return self.synthesis.num_warps


def kernel_params(program: Program, variants: int) -> list[str]:
    """The emitted kernel's parameter names, in order."""
    names: list[str] = []
    for p in program.params:
        if p.kind == "tensor":
            names.append(f"{p.name}_ptr")
    for p in program.params:
        if p.kind == "tensor" and len(p.dims) == 2:
            names.append(f"stride_{p.name}")
    names += [p.name for p in program.params if p.kind == "scalar"]
    names += ["n_rows", "n_cols", "BLOCK_M", "BLOCK_N"]
    if variants > 1:
        names.append("VARIANT")
    return names


def signature(program: Program) -> dict[str, str]:
    """The AOT signature of the runtime parameters (the ``[tool.kbuild.kernels].signature`` grammar)."""
    sig: dict[str, str] = {}
    for p in program.params:
        if p.kind == "tensor":
            sig[f"{p.name}_ptr"] = f"*{p.dtype}:16"
    for p in program.params:
        if p.kind == "tensor" and len(p.dims) == 2:
            sig[f"stride_{p.name}"] = "i32:16"
    for p in program.params:
        if p.kind == "scalar":
            sig[p.name] = p.dtype
    sig["n_rows"] = "i32"
    sig["n_cols"] = "i32:16"
    return sig


class _Writer:
    def __init__(self, variant: Variant, names: dict[Blocked, str]) -> None:
        self.v = variant
        self.names = names
        self.lines: list[str] = []
        self.indices: dict[tuple[str, str], str] = {}

    def layout(self, value: Value) -> str:
        return self.spell(self.v.synthesis.layout_of(value, self.v.rank))

    def spell(self, layout: Blocked | tuple[int, Any]) -> str:
        if isinstance(layout, Blocked):
            return self.names[layout]
        dim, parent = layout
        return f"gl.SliceLayout({dim}, {self.spell(parent)})"

    def index(self, which: str, layout: str) -> str:
        """``rows``/``cols`` index vector of the given (1-D) layout, defined once."""
        key = (which, layout)
        if key not in self.indices:
            name = f"{which}{len(self.indices)}"
            block = "BLOCK_M" if which == "rows" else "BLOCK_N"
            start = "pid * BLOCK_M + " if which == "rows" else ""
            self.lines.append(f"{name} = {start}gl.arange(0, {block}, layout={layout})")
            self.indices[key] = name
        return self.indices[key]

    def address(self, param: Param, value: Value) -> tuple[str, str]:
        """Pointer and mask expressions of ``param``'s block in the layout of ``value``."""
        lay = self.layout(value)
        if len(param.dims) == 2:
            rows = self.index("rows", f"gl.SliceLayout(1, {lay})")
            cols = self.index("cols", f"gl.SliceLayout(0, {lay})")
            ptr = f"{param.name}_ptr + {rows}[:, None].to(gl.int64) * stride_{param.name} + {cols}[None, :]"
            mask = f"({rows}[:, None] < n_rows) & ({cols}[None, :] < n_cols)"
            return ptr, mask
        which, extent = ("rows", "n_rows") if param.dims == "M" else ("cols", "n_cols")
        idx = self.index(which, lay)
        return f"{param.name}_ptr + {idx}", f"{idx} < {extent}"


def operand(x: Any) -> str:
    """An operation's argument as Gluon source: a traced value's variable (``v3``), a scalar parameter's name, or a
    float literal (infinities spelt so that the source stays valid Python)."""
    if isinstance(x, Value):
        return f"v{x.id}"
    if isinstance(x, ScalarRef):
        return x.name
    if x == float("inf"):
        return 'float("inf")'
    if x == float("-inf"):
        return '-float("inf")'
    return repr(float(x))


#: The operations of a row-wise program, each written by :func:`_statement`; the rest (``zeros``, ``shared``,
#: ``dequant``, ``loop``, ``mma``) belong to K-loop programs (:mod:`kbuild.tile.gluon_mma`).
ROW_WISE = frozenset({"load", "store", "binary", "unary", "reduce", "expand"})


def _statement(w: _Writer, op: Op) -> str | None:
    out = f"v{op.result.id}" if op.result is not None else ""
    if op.kind == "load":
        assert op.result is not None
        ptr, mask = w.address(op.args[0], op.result)
        return f"{out} = gl.load({ptr}, mask={mask}, other={operand(op.attrs['other'])})"
    if op.kind == "store":
        ptr, mask = w.address(op.args[0], op.args[1])
        return f"gl.store({ptr}, {operand(op.args[1])}, mask={mask})"
    if op.kind == "binary":
        a, b = (operand(x) for x in op.args)
        if op.attrs["op"] == "maximum":
            return f"{out} = gl.maximum({a}, {b})"
        return f"{out} = {a} {BINARY[op.attrs['op']]} {b}"
    if op.kind == "unary":
        a = operand(op.args[0])
        name = op.attrs["op"]
        if name == "cast":
            assert op.result is not None
            return f"{out} = {a}.to({GL_DTYPE[op.result.dtype]})"
        if name == "rearrange":
            assert op.result is not None
            return f"{out} = gl.convert_layout({a}, {w.layout(op.result)})"
        return f"{out} = {UNARY[name]}({a})"
    if op.kind == "reduce":
        return f"{out} = gl.{op.attrs['op']}({operand(op.args[0])}, axis={op.attrs['axis']})"
    if op.kind == "expand":
        return f"{out} = gl.expand_dims({operand(op.args[0])}, {op.attrs['axis']})"
    raise AssertionError(op.kind)


def blocked_text(b: Blocked) -> str:
    """``b`` as a ``gl.BlockedLayout(...)`` expression."""
    return (f"gl.BlockedLayout(size_per_thread={list(b.size_per_thread)}, threads_per_warp={list(b.threads_per_warp)}, "
            f"warps_per_cta={list(b.warps_per_cta)}, order={list(b.order)})")


def layouts_of(variant: Variant) -> list[Blocked]:
    """Every BlockedLayout the variant uses, in the order of first use."""
    seen: list[Blocked] = []
    for v in variant.synthesis.program.values:
        if v.id not in variant.synthesis.solver.terms:
            continue
        lay: Any = variant.synthesis.layout_of(v, variant.rank)
        while isinstance(lay, tuple):
            lay = lay[1]
        if lay not in seen:
            seen.append(lay)
    return seen


def emit(variants: list[Variant]) -> str:
    """Gluon source of one kernel for the given layout assignments (of one program, same blocks)."""
    if not variants:
        raise ValueError("no variant to emit")
    program = variants[0].synthesis.program
    first = layouts_of(variants[0])
    per_variant = [layouts_of(v) for v in variants]
    if any(len(x) != len(first) for x in per_variant):
        raise ValueError("variants of one kernel must use the same number of layouts")
    names = {b: f"L{i}" for i, b in enumerate(first)}
    body = _Writer(variants[0], names)
    body.lines.append("pid = gl.program_id(0)")
    for op in program.ops:
        stmt = _statement(body, op)
        if stmt:
            body.lines.append(stmt)
    params = kernel_params(program, len(variants))
    constexprs = {"BLOCK_M", "BLOCK_N", "VARIANT"}
    head = [
        f'"""{program.name}: emitted by kbuild.tile from {program.qualname or program.name}; layouts synthesised.',
        "",
    ]
    for i, v in enumerate(variants):
        c = v.synthesis.ranked[v.rank]
        parts = ", ".join(f"{k} {val:.0f}" for k, val in c.parts.items())
        head.append(f"variant {i}: num_warps={v.num_warps}, modelled cost {c.cost:.0f} ({parts})")
    head += ['"""', "", "from triton.experimental import gluon", "from triton.experimental.gluon import language as gl",
             "", "", "@gluon.jit"]
    args = ", ".join(f"{n}: gl.constexpr" if n in constexprs else n for n in params)
    lines = [*head, f"def {program.name}({args}):"]
    if len(variants) == 1:
        for b, name in names.items():
            lines.append(f"    {name}: gl.constexpr = {blocked_text(b)}")
    else:
        for i, layouts in enumerate(per_variant):
            kw = "if" if i == 0 else "elif" if i < len(variants) - 1 else "else"
            cond = f" VARIANT == {i}" if kw != "else" else ""
            lines.append(f"    {kw}{cond}:")
            for b, name in zip(layouts, names.values()):
                lines.append(f"        {name}: gl.constexpr = {blocked_text(b)}")
    lines += [f"    {line}" for line in body.lines]
    return "\n".join(lines) + "\n"


def load_kernel(source: str, program: Program) -> Any:
    """Execute emitted source as a module of its own and return its ``@gluon.jit`` kernel, ``program``'s name,
    after :func:`check_names` (the row-wise, mma and int4 emitters all load through here)."""
    check_names(source, program)
    name = program.name
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    module_name = f"kbuild_tile_{name}_{digest}"
    filename = f"<kbuild.tile {module_name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    module = types.ModuleType(module_name)
    module.__file__ = filename
    import sys

    sys.modules[module_name] = module
    exec(compile(source, filename, "exec"), module.__dict__)
    return module.__dict__[name]


def check_names(source: str, program: Program) -> None:
    """The names the user chose, the kernel's and its parameters', against the emitted source of ``program``:
    a :class:`TileError` naming the parameter when one of the kernel's arguments would be bound twice
    (``x_ptr`` beside a tensor ``x``), would be assigned in the body (``pid``, ``v0``, ``acc``), or would hide a
    module name or a builtin the body needs (``gl``, ``float``); and when the kernel's name hides one. Such
    source would not compile, or would compute something else."""
    tree = ast.parse(source)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == program.name)
    module_names = {alias.asname or alias.name.split(".")[0] for n in tree.body
                    if isinstance(n, (ast.Import, ast.ImportFrom)) for alias in n.names}
    assigned = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    taken = module_names | set(dir(builtins))
    if program.name in taken:
        raise TileError(f"{program.name}: the kernel's name hides {program.name!r}, which the emitted Gluon "
                        "module needs; rename the function")
    args = [a.arg for a in fn.args.args]
    for i, arg in enumerate(args):
        owner = next((p.name for p in program.params if arg in (p.name, f"{p.name}_ptr", f"stride_{p.name}")), None)
        if owner is None:
            continue  # kbuild's own: n_rows, BLOCK_M, ...
        what = ("another parameter of the emitted kernel" if arg in args[:i] + args[i + 1:]
                else "a name the kernel's body assigns" if arg in assigned
                else "a name the emitted module needs" if arg in taken or arg == program.name else None)
        if what is not None:
            raise TileError(f"{program.name}: parameter {owner!r} becomes {arg!r}, {what}; rename the parameter")


__all__ = ["BINARY", "GL_DTYPE", "ROW_WISE", "UNARY", "Variant", "blocked_text", "check_names", "emit", "kernel_params", "layouts_of",
           "load_kernel", "operand", "signature"]

"""Emit: C sources that embed each kernel's cubins and launch them (``templates/*.in``).

For a set of kernels, each with one artefact per target, :func:`render_sources` produces two
files, ``<basename>.h`` (one launcher declaration per kernel) and ``<basename>.c`` (the cubins
as byte arrays, a run-time loader of ``libcuda.so.1``, and the launchers). The output is
byte-deterministic: kernels sorted by name, cubins by target, no timestamps, no absolute paths.

Each launcher takes ``(CUstream stream, unsigned grid_x, grid_y, grid_z, <non-constexpr
arguments>)`` and passes Triton 3.6's two trailing scratch pointers (``global_scratch``,
``profile_scratch``) as 0; kernels that need scratch memory or clusters are refused here.
A kernel declared with a ``grid`` (:mod:`kbuild.declarations.grid`) gets a launcher of ``(CUstream stream,
<non-constexpr arguments>)`` instead (``kernel_grid.*.in``): it computes the grid in 64-bit
arithmetic from the integer arguments and the constexprs of the artefact that ships for the GPU it
runs on (each target's configuration may differ, so the grid follows the tuned configuration), and
fails with ``CUDA_ERROR_INVALID_VALUE`` (and a message in ``last_error``) on an overflow, a division
by zero or a dimension outside CUDA's limits. Shared memory and threads per block are each shipped
artefact's own, as always.

Kernel parameter names are Python identifiers chosen by the kernel's author, and any of them may
be a C keyword (``char``, ``auto``), a macro of the included headers (``NULL``, ``linux``) or a
name the launcher uses itself (``stream``). So the generated C never uses them as they are: in
the ``.c`` file every parameter is ``kbp_<name>``, next to the launchers' own ``kbl_*`` names and
each kernel's ``kbk_``/``kbi_``/``kbc_`` tables. The public header keeps the author's names, for
people to read, wherever they are plain C and C++ names, and otherwise appends ``_``
(``char`` → ``char_``, see :func:`header_param_names`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbuild import __version__, fsutil
from kbuild.errors import KernelSourceError, UsageError
from kbuild.targets import Target
from kbuild.templates import render

#: C type of each scalar kernel parameter type (pointers are ``CUdeviceptr``). Floating-point
#: scalars follow the kernel ABI: fp32 is a ``float``, fp16/bf16 their raw 16-bit patterns.
C_TYPES: dict[str, str] = {
    "i1": "int8_t", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t",
    "u1": "uint8_t", "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t",
    "fp16": "uint16_t", "bf16": "uint16_t", "fp32": "float", "f32": "float", "fp64": "double",
}

#: Types that appear in the launchers' prototypes.
_HEADER_TYPES = frozenset({"CUstream", "CUdeviceptr", "CUresult", *C_TYPES.values()})

if TYPE_CHECKING:
    from kbuild.settings.model import Settings

_IDENT = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")  # \Z: "$" also matches before a final newline

#: Keywords of C (C89 to C23, with GNU's ``asm`` and extended floating types); none may name a
#: parameter in the header.
C_KEYWORDS: frozenset[str] = frozenset("""
    auto break case char const continue default do double else enum extern float for goto if inline int long
    register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
    _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn _Static_assert _Thread_local
    alignas alignof bool constexpr false nullptr static_assert thread_local true typeof typeof_unqual
    _BitInt _Decimal32 _Decimal64 _Decimal128 asm _Float16 _Float32 _Float64 _Float128 _Float32x _Float64x
    _Float128x
""".split())

#: Keywords and alternative operator tokens of C++ (the header is also read by C++ extensions).
CXX_KEYWORDS: frozenset[str] = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class
    compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype
    default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline
    int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public register
    reinterpret_cast requires return short signed sizeof static static_assert static_cast struct switch template
    this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t
    while xor xor_eq
""".split())

#: The launcher's own arguments, named in the header before the kernel's.
LAUNCHER_ARGS = ("stream", "grid_x", "grid_y", "grid_z")

#: Object-like macros that the header's includes (``cuda.h``, ``stdint.h`` and what they pull in) or
#: the compiler define and that no pattern of :data:`_MACRO_PATTERN` covers.
_INCLUDED_MACROS = frozenset("""
    NULL EXIT_FAILURE EXIT_SUCCESS RAND_MAX MB_CUR_MAX FD_SETSIZE NFDBITS BIG_ENDIAN LITTLE_ENDIAN PDP_ENDIAN
    BYTE_ORDER WCONTINUED WEXITED WNOHANG WNOWAIT WSTOPPED WUNTRACED RESOURCE_ABI_EXTERNAL_BYTES
    RESOURCE_ABI_VERSION linux unix i386 errno stdin stdout stderr EOF
""".split())
_MACRO_PATTERN = re.compile(r"^(?:CU_|CUDA|cu[A-Z]|(?:U?INT(?:_LEAST|_FAST)?[0-9]+|U?INTMAX|U?INTPTR|PTRDIFF|SIG_ATOMIC"
                            r"|SIZE|WCHAR|WINT)_(?:MAX|MIN|WIDTH)$)")

#: Prefixes of the generated file's own identifiers (``kb_load``, ``kbk_<kernel>``, ``KB_ALIGNED``...).
_INTERNAL = re.compile(r"^(?:kb[kiclp]?_|KB_)")


def c_name_problem(name: str, *, extra: Iterable[str] = ()) -> str | None:
    """Why ``name`` cannot appear as it is in the generated header (``None``: it can).

    Refused: anything but an ASCII identifier, C and C++ keywords, reserved identifiers (a leading
    ``_``, or ``__`` anywhere), macros of the headers it includes, the types of the launchers'
    arguments, and the names in ``extra`` (the header's own macros)."""
    if not _IDENT.match(name):
        return "not an ASCII C identifier"
    if name in C_KEYWORDS:
        return "a C keyword"
    if name in CXX_KEYWORDS:
        return "a C++ keyword"
    if name.startswith("_") or "__" in name:
        return "a reserved identifier"
    if name in _INCLUDED_MACROS or _MACRO_PATTERN.match(name):
        return "a macro of cuda.h or the C library"
    if name in _HEADER_TYPES:
        return "a type name of the launchers"
    if name in set(extra):
        return "a macro of the generated header"
    return None


def header_param_names(names: Sequence[str], *, header_macros: Iterable[str] = ()) -> list[str]:
    """The name each parameter gets in the header's prototype: the author's own where it is a plain
    C and C++ name (:func:`c_name_problem`) other than a launcher argument, else with ``_`` appended
    (``char`` → ``char_``, ``stream`` → ``stream_``, ``_Bool`` → ``arg_Bool_``, a non-ASCII name →
    ``arg<i>_``), and more ``_`` until it is unique."""
    macros = set(header_macros)
    keep = [n not in LAUNCHER_ARGS and c_name_problem(n, extra=macros) is None for n in names]
    taken = set(LAUNCHER_ARGS) | {n for n, k in zip(names, keep) if k}
    out = []
    for i, (name, kept) in enumerate(zip(names, keep)):
        if kept:
            out.append(name)
            continue
        base = name if _IDENT.match(name) else f"arg{i}"
        cand = ("arg" + base if base.startswith("_") else base) + "_"
        while cand in taken:
            cand += "_"
        taken.add(cand)
        out.append(cand)
    return out


def c_param_name(name: str, index: int) -> str:
    """The parameter's name in the generated ``.c`` file: ``kbp_<name>`` (``kbp_<index>`` when the
    name is not ASCII), a namespace nothing else in the file uses."""
    return f"kbp_{name}" if _IDENT.match(name) else f"kbp_{index}"


class EmitError(UsageError):
    """A kernel that the generated launchers cannot support (named, with the reason)."""


@dataclass(frozen=True)
class EmitKernel:
    """One kernel and its artefact (``kbuild.cache.Artefact``) per target."""

    name: str
    source: str
    images: tuple[tuple[Target, Any], ...] = field(default=())
    grid: tuple[str, ...] = ()
    """The declared grid expressions (``[tool.kbuild.kernels].grid``); empty: the launcher takes the grid."""


def c_type(ty: str) -> str:
    ty = ty.strip()
    if ty.startswith("*"):
        return "CUdeviceptr"
    if ty in C_TYPES:
        return C_TYPES[ty]
    raise KeyError(ty)


_HEX = [f"0x{b:02x}" for b in range(256)]


def _bytes_initialiser(data: bytes) -> str:
    """16 bytes a line, ``  0x7f, 0x45, ...,``."""
    hexes = list(map(_HEX.__getitem__, data))
    return "\n".join("  " + ", ".join(hexes[i:i + 16]) + "," for i in range(0, len(hexes), 16))


def _c_string(text: str) -> str:
    """``text`` as the inside of a C string literal: printable ASCII as it is (``?`` escaped, against
    trigraphs), everything else as octal escapes of its UTF-8 bytes."""
    out = []
    for b in text.encode("utf-8"):
        c = chr(b)
        out.append("\\" + c if c in '\\"?' else c if 0x20 <= b < 0x7F else f"\\{b:03o}")
    return "".join(out)


def _comment(text: str) -> str:
    return text.replace("*/", "* /")


def _kernel_params(kernel: EmitKernel) -> list[tuple[str, str]]:
    """The (C type, name) of each runtime parameter, the same for every target, or EmitError."""
    lists = []
    for target, art in kernel.images:
        meta = art.meta
        where = f"kernel {kernel.name!r} ({target.name}, key {art.key[:12]})"
        if int(meta.get("global_scratch_size", 0) or 0) > 0:
            raise EmitError(f"{where}: needs {meta['global_scratch_size']} bytes of global scratch memory, which "
                            "ahead-of-time launchers do not allocate; simplify the kernel or launch it through Triton")
        if int(meta.get("num_ctas", 1) or 1) != 1:
            raise EmitError(f"{where}: num_ctas = {meta['num_ctas']} (thread-block clusters) is not supported by "
                            "the generated launchers")
        params = []
        for p in meta.get("params", []):
            if p.get("constexpr"):
                continue
            name = p.get("name")
            if not isinstance(name, str) or not name.isidentifier():
                raise EmitError(f"{where}: parameter name {name!r} is not an identifier; the artefact's metadata "
                                "is damaged (kbuild cache verify --fix)")
            try:
                params.append((c_type(str(p["type"])), name))
            except KeyError:
                raise EmitError(f"{where}: parameter {name!r} has type {p.get('type')!r}, which the "
                                "generated launchers do not support") from None
        lists.append(params)
    if any(p != lists[0] for p in lists[1:]):
        raise EmitError(f"kernel {kernel.name!r}: its targets disagree on the parameter list; rebuild every target")
    return lists[0] if lists else []


def _kernel_param_types(kernel: EmitKernel) -> dict[str, str]:
    """Declared type (without hint) of each runtime parameter, by name, from the first image's metadata."""
    meta = kernel.images[0][1].meta if kernel.images else {}
    return {str(p.get("name")): str(p.get("type", "")).strip().partition(":")[0]
            for p in meta.get("params", []) if not p.get("constexpr")}


def _grid_code(kernel: EmitKernel, images: Sequence[tuple[Target, Any]], params: Sequence[tuple[str, str]],
               c_names: Sequence[str]) -> tuple[str, str, str]:
    """(the switch's cases, the grid function's extra parameters, the launcher's arguments to it) of a kernel
    with a grid; EmitError naming the kernel, target and expression when it cannot be computed."""
    from kbuild.declarations import grid as gridmod
    from kbuild.declarations.signature import INTEGER_TYPES

    where = f"kernel {kernel.name!r}: grid"
    grid = gridmod.parse_grid(list(kernel.grid), on_error=lambda i, m: EmitError(
        f"{where}" + ("" if i is None else f"[{i}] {kernel.grid[i]!r}") + f": {m}"))
    types = _kernel_param_types(kernel)
    runtime = {name: (ty, cn) for (ty, name), cn in zip(params, c_names)}
    used_runtime: list[str] = []
    cases = []
    for index, (target, art) in enumerate(images):
        constants = {n: v for n, v in (art.meta.get("constexprs") or {}).items()
                     if isinstance(v, int) and not isinstance(v, bool)}
        variables: dict[str, str] = {}
        for name in sorted(grid.names()):
            if name in constants:
                continue
            if name in runtime and types.get(name) in INTEGER_TYPES:
                cty, cn = runtime[name]
                variables[name] = f"kb_i64_u64({cn}, &kbl_err)" if cty == "uint64_t" else f"(int64_t){cn}"
                if name not in used_runtime:
                    used_runtime.append(name)
                continue
            raise EmitError(f"{where} reads {name!r}, which is neither an integer argument nor an integer constexpr "
                            f"of the {target.name} artefact (key {art.key[:12]}); fix [tool.kbuild.kernels].grid")
        lines = []
        for axis, tree in enumerate(grid.trees):
            try:
                folded = gridmod.fold(tree, constants)
            except gridmod.GridEvalError as exc:
                cx = ", ".join(f"{n}={constants[n]}" for n in sorted(constants))
                raise EmitError(f"{where}[{axis}] {grid.texts[axis] if axis < len(grid.texts) else '1'!r} for "
                                f"{target.name} ({cx}): {exc}") from None
            lines.append(f"    kbl_g[{axis}] = {gridmod.c_expr(folded, variables)};\n")
        label = _comment(", ".join(f"{n}={constants[n]}" for n in sorted(constants)) or "no constexprs")
        cases.append(f"  case {index}: /* {target.name} ({target.arch}): {label} */\n{''.join(lines)}    break;\n")
    order = [name for _, name in params if name in used_runtime]
    grid_params = "".join(f", {runtime[n][0]} {runtime[n][1]}" for n in order)
    grid_args = "".join(f", {runtime[n][1]}" for n in order)
    return "".join(cases), grid_params, grid_args


def _config_label(art: Any) -> str:
    from kbuild.declarations.space import label

    config = art.meta.get("config")
    return label(config) if isinstance(config, dict) else "default"


def _check_public_name(name: str, what: str, header_macros: Iterable[str]) -> None:
    """A launcher's C name must be a plain C/C++ name outside the generated code's own namespaces."""
    problem = c_name_problem(name, extra=header_macros)
    if problem is None and _INTERNAL.match(name):
        problem = "in the generated code's own namespace (kb_, kbk_, KB_...)"
    if problem is None and name in LAUNCHER_ARGS:
        problem = "a launcher argument's name"
    if problem is not None:
        raise EmitError(f"{what}: the launcher's C name {name!r} is {problem}; rename the kernel "
                        "([tool.kbuild.kernels].name) or choose another prefix")


#: Longest ``--basename``: ``<basename>.h`` must fit a file name (255 bytes on common file systems).
MAX_BASENAME = 200


def check_output_names(prefix: str, basename: str) -> None:
    """``--prefix`` must start C identifiers (or be empty) and ``--basename`` be a plain file stem: a
    :class:`UsageError` naming the option otherwise (``kbuild emit`` checks both before any work)."""
    if not _IDENT.match(prefix) and prefix != "":
        raise UsageError(f"--prefix: {prefix!r} is not a C identifier prefix")
    if not _IDENT.match(basename):
        raise UsageError(f"--basename: {basename!r} is not a plain file name stem (letters, digits and _)")
    if len(basename) > MAX_BASENAME:
        raise UsageError(f"--basename: {len(basename):,} characters; a file name stem has at most {MAX_BASENAME}")


def render_sources(kernels: Sequence[EmitKernel], *, prefix: str = "kbuild_", basename: str = "kbuild_kernels",
                   config_name: str = "pyproject.toml") -> dict[str, bytes]:
    """``{"<basename>.h": ..., "<basename>.c": ...}`` for ``kernels``; deterministic bytes."""
    check_output_names(prefix, basename)
    ordered = sorted(kernels, key=lambda k: k.name)
    if not ordered:
        raise UsageError("no kernels to emit")
    all_targets = sorted({t for k in ordered for t, _ in k.images})
    decls, bodies = [], []
    grid_helpers = False
    upper = prefix.upper()
    guard = f"KBUILD_{basename.upper()}_H"
    header_macros = (f"{upper}API", f"{upper}KERNEL_COUNT", guard)
    _check_public_name(f"{prefix}last_error", f"--prefix {prefix!r}", header_macros)
    for k in ordered:
        if not _IDENT.match(k.name):
            raise EmitError(f"kernel name {k.name!r} is not a C identifier")
        _check_public_name(f"{prefix}{k.name}", f"kernel {k.name!r} (with --prefix {prefix!r})",
                           (*header_macros, f"{prefix}last_error"))
        images = sorted(k.images, key=lambda ti: ti[0])
        if not images:
            raise EmitError(f"kernel {k.name!r} has no cubin for any target")
        symbols = {art.meta.get("symbol") for _, art in images}
        if len(symbols) != 1 or None in symbols:
            raise EmitError(f"kernel {k.name!r}: artefacts name different or no entry symbols: {sorted(map(str, symbols))}")
        symbol = str(symbols.pop())
        params = _kernel_params(EmitKernel(k.name, k.source, tuple(images)))
        h_names = header_param_names([name for _, name in params], header_macros=header_macros)
        c_names = [c_param_name(name, i) for i, (_, name) in enumerate(params)]
        target_list = ", ".join(f"{t.name} ({t.arch})" for t, _ in images)
        constexprs: dict[str, Any] = next(
            (art.meta["constexprs"] for _, art in images if art.meta.get("constexprs")), {})
        cx_text = ", ".join(f"{n}={constexprs[n]}" for n in sorted(constexprs)) or "none"
        num_warps = int(images[0][1].meta.get("num_warps", 4))
        h_params = "".join(f", {ty} {n}" for (ty, _), n in zip(params, h_names))
        if k.grid:
            configs = "; ".join(f"{t.name}: {_config_label(art)}" for t, art in images)
            decls.append(render("kernel_grid.h.in", PREFIX=prefix, PREFIX_UPPER=upper, KERNEL=k.name,
                                SOURCE=_comment(k.source), NUM_WARPS=num_warps, CONSTEXPRS=_comment(cx_text),
                                TARGET_LIST=target_list, GRID=_comment(", ".join(k.grid)),
                                CONFIGS=_comment(configs), PARAMS=h_params))
        else:
            decls.append(render("kernel.h.in", PREFIX=prefix, PREFIX_UPPER=upper, KERNEL=k.name,
                                SOURCE=_comment(k.source), NUM_WARPS=num_warps, CONSTEXPRS=_comment(cx_text),
                                TARGET_LIST=target_list, PARAMS=h_params))
        cubins, rows = [], []
        for target, art in images:
            var = f"kbc_{target.arch}_{k.name}"
            cubins.append(f"/* {target.name} ({target.arch}): key {art.key}, cubin sha256 {art.cubin_sha256}"
                          f"{', tuned' if art.meta.get('tuned') else ', baseline'} */\n"
                          f"static const unsigned char {var}[{len(art.cubin)}] KB_ALIGNED = {{\n"
                          f"{_bytes_initialiser(art.cubin)}\n}};")
            exact = 1 if target.arch.endswith("a") else 0
            threads = int(art.meta.get("num_warps", num_warps)) * 32
            rows.append(f'  {{{target.cc}, {exact}, "{target.arch}", {var}, {int(art.meta.get("shared", 0))}u, '
                        f"{threads}u}},\n")
        arg_pointers = ", ".join([f"&{n}" for n in c_names] + ["&kbl_global_scratch", "&kbl_profile_scratch"])
        common_body = {"PREFIX": prefix, "KERNEL": k.name, "SOURCE": _comment(k.source), "CUBINS": "\n".join(cubins),
                       "IMAGES": "".join(rows), "IMAGE_COUNT": len(images), "SYMBOL": _c_string(symbol),
                       "TARGET_LIST": _c_string(", ".join(t.name for t, _ in images)),
                       "PARAMS": "".join(f", {ty} {n}" for (ty, _), n in zip(params, c_names)),
                       "ARG_COUNT": len(params) + 2, "ARG_POINTERS": arg_pointers}
        if k.grid:
            cases, grid_params, grid_args = _grid_code(k, images, params, c_names)
            if not grid_helpers:  # once, before the first kernel with a grid; files without grids are unchanged
                from kbuild.declarations.grid import C_HELPERS

                bodies.append(C_HELPERS + "\n")
                grid_helpers = True
            bodies.append(render("kernel_grid.c.in", **common_body, GRID=_comment(", ".join(k.grid)),
                                 GRID_CASES=cases, GRID_PARAMS=grid_params, GRID_ARGS=grid_args))
        else:
            bodies.append(render("kernel.c.in", **common_body))
    header_name = f"{basename}.h"
    common = {"KBUILD_VERSION": __version__, "CONFIG_NAME": _comment(config_name)}
    header = render("launcher.h.in", **common, PREFIX=prefix, PREFIX_UPPER=upper,
                    GUARD=guard, KERNEL_COUNT=len(ordered),
                    TARGET_LIST=", ".join(t.name for t in all_targets), DECLARATIONS="".join(decls))
    source = render("launcher.c.in", **common, PREFIX=prefix, HEADER=header_name, KERNELS="".join(bodies))
    return {header_name: header.encode("utf-8"), f"{basename}.c": source.encode("utf-8")}


def cuda_include_dir() -> Path:
    """Triton's bundled CUDA headers (``cuda.h``), found without importing Triton."""
    import importlib.util

    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError("Triton is not installed; the generated launchers need its bundled cuda.h")
    for loc in spec.submodule_search_locations:
        inc = Path(loc) / "backends" / "nvidia" / "include"
        if (inc / "cuda.h").is_file():
            return inc
    raise UsageError("Triton's bundled cuda.h (triton/backends/nvidia/include) is missing")


def kernel_sources(settings: Settings) -> list[Path]:
    """``pyproject.toml``, ``kbuild.lock`` (when present) and every ``.py`` file of the packages the
    kernels live in: under the project (``python_path``) first, else wherever Python finds the top-level
    package (an installed one: its files and its distribution's ``RECORD``, which changes when the package is
    reinstalled or upgraded). Nothing of the kernels is imported; a package found nowhere is an error."""
    out = {Path(settings.config_file).resolve()}
    lock = settings.project_dir / "kbuild.lock"
    if lock.is_file():
        out.add(lock.resolve())
    roots = [(settings.project_dir / p) for p in settings.python_path]
    for i, k in enumerate(settings.kernels):
        top = k.module.split(".")[0]
        found = False
        for root in roots:
            pkg, mod = root / top, root / f"{top}.py"
            if pkg.is_dir():
                out.update(p.resolve() for p in pkg.rglob("*.py") if "__pycache__" not in p.parts)
                found = True
                break
            if mod.is_file():
                out.add(mod.resolve())
                found = True
                break
        if not found:
            installed = installed_sources(top)
            if installed is None:
                raise KernelSourceError(settings.config_file, f"[tool.kbuild.kernels][{i if k.entry is None else k.entry}]"
                                        ".source", f"kernel {k.name!r}: module {k.module!r} not found under "
                                        f"{', '.join(str(r) for r in roots)} (python_path) nor on sys.path")
            out.update(installed)
    return sorted(out)


def installed_sources(top: str) -> list[Path] | None:
    """The ``.py`` files of the top-level package or module ``top`` as Python finds it on ``sys.path`` (without
    importing it), and the ``RECORD`` of each installed distribution that provides it; None when not found."""
    import importlib.util

    from kbuild.distributions import providers, record_file

    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    files: set[Path] = set()
    for loc in spec.submodule_search_locations or []:
        files.update(p.resolve() for p in Path(loc).rglob("*.py") if "__pycache__" not in p.parts)
    if not spec.submodule_search_locations and spec.origin and Path(spec.origin).is_file():
        files.add(Path(spec.origin).resolve())
    if not files:
        return None
    for dist in providers(top):
        record = record_file(dist)
        if record is not None:
            files.add(Path(record).resolve())
    return sorted(files)


def write_files(out_dir: str | os.PathLike[str], files: Mapping[str, bytes], *, what: str | None = None) -> list[Path]:
    """Write the files into ``out_dir``, all or none (:func:`kbuild.fsutil.write_files`); the paths, sorted.
    With ``what`` (the option and path, ``"--out-dir build/k"``) a failure is a :class:`UsageError`."""
    return fsutil.write_files(out_dir, files, what=what)


__all__ = ["C_TYPES", "EmitError", "EmitKernel", "c_type", "cuda_include_dir", "installed_sources", "kernel_sources",
           "render_sources", "write_files"]

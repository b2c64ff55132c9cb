"""Emit: C sources that embed each kernel's cubins and launch them (``templates/*.in``).

For a set of kernels, each with one artefact per target, :func:`render_sources` produces two
files, ``<basename>.h`` (one launcher declaration per kernel) and ``<basename>.c`` (the cubins
as byte arrays, a run-time loader of ``libcuda.so.1``, and the launchers). The output is
byte-deterministic: kernels sorted by name, cubins by target, no timestamps, no absolute paths.

Each launcher takes ``(CUstream stream, unsigned grid_x, grid_y, grid_z, <non-constexpr
arguments>)`` and passes Triton 3.6's two trailing scratch pointers (``global_scratch``,
``profile_scratch``) as 0; kernels that need scratch memory or clusters are refused here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbuild import __version__
from kbuild.errors import KernelSourceError, UsageError
from kbuild.fsutil import write_atomic
from kbuild.targets import Target
from kbuild.templates import render

#: C type of each scalar kernel parameter type (pointers are ``CUdeviceptr``). Floating-point
#: scalars follow the kernel ABI: fp32 is a ``float``, fp16/bf16 their raw 16-bit patterns.
C_TYPES: dict[str, str] = {
    "i1": "int8_t", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t",
    "u1": "uint8_t", "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t",
    "fp16": "uint16_t", "bf16": "uint16_t", "fp32": "float", "f32": "float", "fp64": "double",
}

if TYPE_CHECKING:
    from kbuild.config import Settings

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class EmitError(UsageError):
    """A kernel that the generated launchers cannot support (named, with the reason)."""


@dataclass(frozen=True)
class EmitKernel:
    """One kernel and its artefact (``kbuild.cache.Artefact``) per target."""

    name: str
    source: str
    images: tuple[tuple[Target, Any], ...] = field(default=())


def c_type(ty: str) -> str:
    ty = ty.strip()
    if ty.startswith("*"):
        return "CUdeviceptr"
    if ty in C_TYPES:
        return C_TYPES[ty]
    raise KeyError(ty)


def kernels_from_builds(builds: Iterable[Any]) -> list[EmitKernel]:
    """Group pipeline results (:class:`kbuild.hooks.pipeline.KernelBuild`) by kernel."""
    grouped: dict[str, list[Any]] = {}
    sources: dict[str, str] = {}
    for b in builds:
        grouped.setdefault(b.spec.name, []).append((b.target, b.artefact))
        sources[b.spec.name] = b.spec.source
    return [EmitKernel(name, sources[name], tuple(images)) for name, images in grouped.items()]


_HEX = [f"0x{b:02x}" for b in range(256)]


def _bytes_initialiser(data: bytes) -> str:
    """16 bytes a line, ``  0x7f, 0x45, ...,``."""
    hexes = list(map(_HEX.__getitem__, data))
    return "\n".join("  " + ", ".join(hexes[i:i + 16]) + "," for i in range(0, len(hexes), 16))


def _c_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


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
            try:
                params.append((c_type(str(p["type"])), str(p["name"])))
            except KeyError:
                raise EmitError(f"{where}: parameter {p.get('name')!r} has type {p.get('type')!r}, which the "
                                "generated launchers do not support") from None
        lists.append(params)
    if any(p != lists[0] for p in lists[1:]):
        raise EmitError(f"kernel {kernel.name!r}: its targets disagree on the parameter list; rebuild every target")
    return lists[0] if lists else []


def render_sources(kernels: Sequence[EmitKernel], *, prefix: str = "kbuild_", basename: str = "kbuild_kernels",
                   config_name: str = "pyproject.toml") -> dict[str, bytes]:
    """``{"<basename>.h": ..., "<basename>.c": ...}`` for ``kernels``; deterministic bytes."""
    if not _IDENT.match(prefix) and prefix != "":
        raise UsageError(f"--prefix: {prefix!r} is not a C identifier prefix")
    if not _IDENT.match(basename):
        raise UsageError(f"basename {basename!r} is not a plain file name stem (letters, digits and _)")
    ordered = sorted(kernels, key=lambda k: k.name)
    if not ordered:
        raise UsageError("no kernels to emit")
    all_targets = sorted({t for k in ordered for t, _ in k.images})
    decls, bodies = [], []
    upper = prefix.upper()
    for k in ordered:
        if not _IDENT.match(k.name):
            raise EmitError(f"kernel name {k.name!r} is not a C identifier")
        images = sorted(k.images, key=lambda ti: ti[0])
        if not images:
            raise EmitError(f"kernel {k.name!r} has no cubin for any target")
        symbols = {art.meta.get("symbol") for _, art in images}
        if len(symbols) != 1 or None in symbols:
            raise EmitError(f"kernel {k.name!r}: artefacts name different or no entry symbols: {sorted(map(str, symbols))}")
        symbol = str(symbols.pop())
        params = _kernel_params(EmitKernel(k.name, k.source, tuple(images)))
        param_text = "".join(f", {ty} {name}" for ty, name in params)
        target_list = ", ".join(f"{t.name} ({t.arch})" for t, _ in images)
        constexprs: dict[str, Any] = next(
            (art.meta["constexprs"] for _, art in images if art.meta.get("constexprs")), {})
        cx_text = ", ".join(f"{n}={constexprs[n]}" for n in sorted(constexprs)) or "none"
        num_warps = int(images[0][1].meta.get("num_warps", 4))
        decls.append(render("kernel.h.in", PREFIX=prefix, PREFIX_UPPER=upper, KERNEL=k.name, SOURCE=_comment(k.source),
                            NUM_WARPS=num_warps, CONSTEXPRS=_comment(cx_text), TARGET_LIST=target_list,
                            PARAMS=param_text))
        cubins, rows = [], []
        for target, art in images:
            var = f"kb_{k.name}_{target.arch}"
            cubins.append(f"/* {target.name} ({target.arch}): key {art.key}, cubin sha256 {art.cubin_sha256}"
                          f"{', tuned' if art.meta.get('tuned') else ', baseline'} */\n"
                          f"static const unsigned char {var}[{len(art.cubin)}] KB_ALIGNED = {{\n"
                          f"{_bytes_initialiser(art.cubin)}\n}};")
            exact = 1 if target.arch.endswith("a") else 0
            threads = int(art.meta.get("num_warps", num_warps)) * 32
            rows.append(f'  {{{target.cc}, {exact}, "{target.arch}", {var}, {int(art.meta.get("shared", 0))}u, '
                        f"{threads}u}},\n")
        arg_pointers = ", ".join([f"&{name}" for _, name in params] + ["&global_scratch", "&profile_scratch"])
        bodies.append(render("kernel.c.in", PREFIX=prefix, KERNEL=k.name, SOURCE=_comment(k.source),
                             CUBINS="\n".join(cubins), IMAGES="".join(rows), IMAGE_COUNT=len(images),
                             SYMBOL=_c_string(symbol), TARGET_LIST=_c_string(", ".join(t.name for t, _ in images)),
                             PARAMS=param_text, ARG_COUNT=len(params) + 2, ARG_POINTERS=arg_pointers))
    header_name = f"{basename}.h"
    common = {"KBUILD_VERSION": __version__, "CONFIG_NAME": _comment(config_name)}
    header = render("launcher.h.in", **common, PREFIX=prefix, PREFIX_UPPER=upper,
                    GUARD=f"KBUILD_{basename.upper()}_H", KERNEL_COUNT=len(ordered),
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
    kernels live in. Nothing is imported; a kernel whose package cannot be found is an error."""
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
            raise KernelSourceError(settings.config_file, f"[tool.kbuild.kernels][{i}].source",
                                    f"kernel {k.name!r}: module {k.module!r} not found under "
                                    f"{', '.join(str(r) for r in roots)} (python_path)")
    return sorted(out)


def write_files(out_dir: str | os.PathLike[str], files: Mapping[str, bytes]) -> list[Path]:
    """Write each file atomically (temp file in ``out_dir`` + ``os.replace``); returns the paths."""
    out = Path(out_dir)
    return [write_atomic(out / name, files[name]) for name in sorted(files)]


__all__ = ["C_TYPES", "EmitError", "EmitKernel", "c_type", "cuda_include_dir", "kernel_sources", "kernels_from_builds",
           "render_sources", "write_files"]

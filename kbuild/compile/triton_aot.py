"""Triton ahead-of-time compilation: a kernel declaration + a target → a baseline cubin.

This works with no GPU: ``triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, 32))``
runs Triton's passes and the bundled ptxas. Output is deterministic and independent of the
checkout path: line info is off (cubins would otherwise embed source paths), and every compile
runs against a private, empty Triton cache so that nothing stale or foreign is reused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbuild.config import KernelSettings, Settings
from kbuild.errors import CompileError, KernelSourceError, MissingDependencyError
from kbuild.targets import Target
from kbuild.toolchain import ptxas_version, triton_version


@dataclass(frozen=True)
class CompiledKernel:
    """A baseline cubin and what the build needs to know about it."""

    kernel: str
    target: Target
    cubin: bytes
    metadata: dict[str, Any]
    compile_seconds: float

    @property
    def cubin_sha256(self) -> str:
        return hashlib.sha256(self.cubin).hexdigest()


def kernel_index(settings: Settings, spec: KernelSettings) -> int:
    return next(i for i, k in enumerate(settings.kernels) if k.name == spec.name)


@contextlib.contextmanager
def _project_on_path(settings: Settings) -> Iterator[None]:
    added = [str((settings.project_dir / p).resolve()) for p in settings.python_path]
    added = [p for p in added if Path(p).is_dir() and p not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for p in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(p)


def load_jit_function(settings: Settings, spec: KernelSettings) -> Any:
    """Import ``spec.source`` and check it is a ``@triton.jit`` function."""
    try:
        from triton.runtime.jit import JITFunction
    except ImportError as exc:
        raise MissingDependencyError(f"Triton is not installed ({exc}); kbuild needs triton>=3.6,<3.7") from None
    where = settings.config_file
    key = f"[tool.kbuild.kernels][{kernel_index(settings, spec)}].source"
    with _project_on_path(settings):
        try:
            module = importlib.import_module(spec.module)
        except ModuleNotFoundError as exc:
            raise KernelSourceError(where, key, f"cannot import module {spec.module!r} ({exc}); the project root and "
                                    f"{settings.python_path} are on the path") from None
        except Exception as exc:  # the user's module raised while importing
            raise KernelSourceError(where, key, f"importing {spec.module!r} raised {type(exc).__name__}: {exc}") from None
    fn = getattr(module, spec.function, None)
    if fn is None:
        raise KernelSourceError(where, key, f"module {spec.module!r} has no attribute {spec.function!r}")
    if not isinstance(fn, JITFunction):
        kind = type(fn).__name__
        hint = " (an @triton.autotune or @triton.heuristics wrapper? point at the inner @triton.jit function)" \
            if hasattr(fn, "fn") else ""
        raise KernelSourceError(where, key, f"{spec.source!r} is a {kind}, not a @triton.jit function{hint}")
    return fn


def source_hash(fn: Any) -> str:
    """Triton's own hash of the function and everything it calls (``JITFunction.cache_key``)."""
    return str(fn.cache_key)


def ast_source_args(settings: Settings, spec: KernelSettings, fn: Any) -> dict[str, Any]:
    """Signature, constexprs and attrs for ``ASTSource``, from the declaration, with clear errors."""
    where = settings.config_file
    base = f"[tool.kbuild.kernels][{kernel_index(settings, spec)}]"
    params = list(fn.arg_names)
    unknown = [n for n in (*spec.signature, *spec.constexprs) if n not in params]
    if unknown:
        section = "signature" if unknown[0] in spec.signature else "constexprs"
        raise KernelSourceError(where, f"{base}.{section}.{unknown[0]}",
                                f"{spec.function}() has no parameter {unknown[0]!r}; its parameters: {', '.join(params)}")
    constexpr_params = {p.name for p in fn.params if p.is_constexpr}
    signature: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    attrs: dict[tuple[int, ...], list[list[Any]]] = {}
    for i, name in enumerate(params):
        if name in spec.constexprs:
            signature[name] = "constexpr"
            constexprs[name] = spec.constexprs[name]
        elif name in spec.signature:
            if name in constexpr_params:
                raise KernelSourceError(where, f"{base}.signature.{name}",
                                        f"{name!r} is a tl.constexpr parameter; give its value under constexprs")
            ty, _, hint = spec.signature[name].strip().partition(":")
            signature[name] = ty
            if hint == "16":
                attrs[(i,)] = [["tt.divisibility", 16]]
            elif hint == "1":  # Triton's AOT convention: value 1 is specialised as a constant
                signature[name] = "constexpr"
                constexprs[name] = 1
        else:
            section = "constexprs" if name in constexpr_params else "signature"
            raise KernelSourceError(where, f"{base}.{section}",
                                    f"parameter {name!r} of {spec.function}() is not declared")
    return {"signature": signature, "constexprs": constexprs, "attrs": attrs}


def compiler_options(target: Target, spec: KernelSettings) -> dict[str, Any]:
    """Triton's parsed backend options for this kernel and target, minus machine-specific paths."""
    import triton
    from triton.backends.compiler import GPUTarget

    backend = triton.compiler.make_backend(GPUTarget("cuda", target.cc, 32))
    options = backend.parse_options({"num_warps": spec.num_warps, "num_stages": spec.num_stages})
    return dataclasses.asdict(options)


def portable_options(options: dict[str, Any]) -> dict[str, Any]:
    """Options with install paths replaced by file names, for keys and metadata."""
    out = dict(options)
    if out.get("extern_libs"):
        out["extern_libs"] = [[name, Path(path).name] for name, path in out["extern_libs"]]
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in out.items()}


def hermetic_compile(src: Any, cc: int, options: dict[str, Any]) -> Any:
    """``triton.compile`` the way every kbuild compile runs: line info off (no source paths in the
    cubin) and a private, empty Triton cache (nothing stale or foreign reused). No GPU needed."""
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget

    with tempfile.TemporaryDirectory(prefix="kbuild-triton-") as tmp, knobs.compilation.scope(), knobs.cache.scope():
        knobs.compilation.disable_line_info = True
        knobs.cache.dir = tmp
        return triton.compile(src, target=GPUTarget("cuda", cc, 32), options=options)


def compile_kernel(settings: Settings, spec: KernelSettings, target: Target, fn: Any | None = None) -> CompiledKernel:
    """Compile one kernel for one target to a cubin, deterministically, without a GPU."""
    from triton.compiler import ASTSource

    fn = fn if fn is not None else load_jit_function(settings, spec)
    args = ast_source_args(settings, spec, fn)
    options = compiler_options(target, spec)
    started = time.perf_counter()
    try:
        compiled = hermetic_compile(ASTSource(fn=fn, **args), target.cc, options)
    except Exception as exc:
        raise CompileError(
            f"Triton failed to compile kernel {spec.name!r} ({spec.source}) for {target.name}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    seconds = time.perf_counter() - started
    md = compiled.metadata
    cubin = compiled.asm["cubin"]
    metadata = {
        "kernel": spec.name,
        "source": spec.source,
        "symbol": md.name,
        "target": target.name,
        "arch": target.arch,
        "shared": md.shared,
        "num_warps": md.num_warps,
        "num_stages": md.num_stages,
        "num_ctas": md.num_ctas,
        "global_scratch_size": getattr(md, "global_scratch_size", 0),
        "params": [{"name": n, "type": args["signature"][n], "constexpr": n in args["constexprs"]} for n in fn.arg_names],
        "constexprs": args["constexprs"],
        "triton_version": triton_version(),
        "ptxas_version": ptxas_version(),
        "line_info": False,
    }
    return CompiledKernel(kernel=spec.name, target=target, cubin=cubin, metadata=metadata, compile_seconds=seconds)

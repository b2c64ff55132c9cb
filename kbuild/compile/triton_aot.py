"""Triton ahead-of-time compilation: a kernel declaration + a target → a baseline cubin.

This works with no GPU: ``triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, 32))``
runs Triton's passes and the bundled ptxas. Output is deterministic and independent of the
checkout path: line info is off (cubins would otherwise embed source paths), and every compile
runs against a private, empty Triton cache so that nothing stale or foreign is reused.

Every compile runs in one private temporary directory (Triton's cache, its ``.ptx``/``.log``
scratch files and the ptxas guard), removed when the compile ends, fails, is interrupted
(SIGINT) or terminated (SIGTERM: the directory is removed, then the process dies of the signal
as it would have). ptxas runs under a wall-clock bound (``compile_timeout``; see
:mod:`kbuild.compile.ptxas_guard`).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import hashlib
import importlib
import inspect
import io
import json
import os
import shlex
import signal
import sys
import tempfile
import threading
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbuild.compile import signature
from kbuild.config import KernelSettings, Settings, env_value
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
    """Import ``spec.source`` and check it is a ``@triton.jit`` function; an ``@triton.autotune`` object over
    one is unwrapped (its configs: :func:`load_autotuner`)."""
    fn = load_source(settings, spec)
    return fn.fn if _is_autotuner(fn) else fn


def _is_autotuner(obj: Any) -> bool:
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    return isinstance(obj, Autotuner) and isinstance(getattr(obj, "fn", None), JITFunction)


def load_autotuner(settings: Settings, spec: KernelSettings) -> Any | None:
    """The ``@triton.autotune`` object ``spec.source`` names, or None when it is a plain ``@triton.jit`` function."""
    obj = load_source(settings, spec)
    return obj if _is_autotuner(obj) else None


def load_source(settings: Settings, spec: KernelSettings) -> Any:
    """Import ``spec.source``: a ``@triton.jit`` function or an ``@triton.autotune`` object over one."""
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
    if not isinstance(fn, JITFunction) and not _is_autotuner(fn):
        kind = type(fn).__name__
        hint = " (an @triton.heuristics wrapper? point at the inner @triton.jit function)" \
            if hasattr(fn, "fn") else ""
        raise KernelSourceError(where, key, f"{spec.source!r} is a {kind}, not a @triton.jit function{hint}")
    return fn


@dataclass(frozen=True)
class FoldedGlobal:
    """A global value a kernel (or a ``@triton.jit`` function it calls) reads: Triton folds it into the code."""

    module: str | None
    """The module whose globals hold it (None: a closure variable)."""
    name: str
    """Its name there (``Config.BLOCK`` for a class attribute)."""
    value: Any
    attribute: bool
    """Read as an attribute (``consts.SCALE``): Triton's own hash leaves those out."""

    @property
    def text(self) -> str | None:
        """A stable text of the value, or None when it has none (an object printed by address)."""
        return _stable_text(self.value)


def _stable_text(value: Any) -> str | None:
    if isinstance(value, (tuple, list)):
        parts = [_stable_text(v) for v in value]
        return None if any(p is None for p in parts) else f"{type(value).__name__}({', '.join(parts)})"  # type: ignore[arg-type]
    text = f"{type(value).__module__}.{type(value).__qualname__}:{value!r}"
    return None if " at 0x" in text else text


def folded_globals(fn: Any) -> list[FoldedGlobal]:
    """Every global value ``fn`` and the ``@triton.jit`` functions it calls read, in a stable order.

    Names read directly (``SCALE``) come from Triton's own record (``used_global_vals``, filled by
    ``cache_key``). Attributes of modules and classes (``consts.SCALE``, ``Config.BLOCK``) are found
    by walking each function's syntax tree, as Triton's ``DependenciesFinder`` does; Triton folds
    them into the code too but leaves them out of its hash. Triton's own modules are skipped (its
    version covers them).
    """
    from triton.language.core import constexpr
    from triton.runtime.jit import JITCallable as jit_callable

    module_type = types.ModuleType
    found: dict[tuple[str | None, str], FoldedGlobal] = {}
    seen: set[int] = set()
    todo = [fn]
    while todo:
        f = todo.pop()
        f = getattr(f, "__func__", f)  # a bound constexpr function
        if id(f) in seen or not isinstance(f, jit_callable):
            continue
        seen.add(id(f))
        f.cache_key  # noqa: B018 - fills used_global_vals
        for (name, _), (value, scope) in sorted(getattr(f, "used_global_vals", {}).items(), key=lambda kv: kv[0][0]):
            owner = sys.modules.get(str(scope.get("__name__", "")))
            module = owner.__name__ if owner is not None and vars(owner) is scope else None
            found.setdefault((module, name), FoldedGlobal(module, name, value, attribute=False))
        scope = dict(f.__globals__)
        with contextlib.suppress(TypeError, ValueError):
            scope.update(inspect.getclosurevars(f.fn).nonlocals)
        for node in ast.walk(f.parse()):
            if isinstance(node, ast.Name) and isinstance(scope.get(node.id), jit_callable):
                todo.append(scope[node.id])
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                chain: list[str] = []
                root: ast.expr = node
                while isinstance(root, ast.Attribute):
                    chain.insert(0, root.attr)
                    root = root.value
                if not isinstance(root, ast.Name):
                    continue
                owner = scope.get(root.id)
                if not isinstance(owner, (module_type, type)):
                    continue
                base = owner.__name__ if isinstance(owner, module_type) else owner.__module__
                if base.split(".")[0] == "triton":
                    continue
                try:
                    for attr in chain[:-1]:
                        owner = getattr(owner, attr)
                    value = getattr(owner, chain[-1])
                except AttributeError:
                    continue
                if isinstance(value, jit_callable):
                    todo.append(value)
                elif not isinstance(value, (module_type, type)) and (isinstance(value, constexpr) or not callable(value)):
                    key: tuple[str | None, str]
                    if isinstance(owner, module_type):
                        key = (owner.__name__, chain[-1])
                    else:
                        key = (getattr(owner, "__module__", None), f"{getattr(owner, '__qualname__', '?')}.{chain[-1]}")
                    found.setdefault(key, FoldedGlobal(key[0], key[1], value, attribute=True))
    return [found[k] for k in sorted(found, key=lambda k: (k[0] or "", k[1]))]


def source_hash(fn: Any) -> str:
    """Triton's own hash of the function and everything it calls (``JITFunction.cache_key``), and
    the values of the module and class attributes they read (``consts.SCALE``), which Triton folds
    into the code but not into its hash. Without such attributes this is exactly Triton's hash."""
    base = str(fn.cache_key)
    extra = [[f"{g.module}:{g.name}", g.text] for g in folded_globals(fn) if g.attribute]
    if not extra:
        return base
    return hashlib.sha256(json.dumps([base, extra], sort_keys=True).encode()).hexdigest()


def ast_source_args(settings: Settings, spec: KernelSettings, fn: Any) -> dict[str, Any]:
    """Signature, constexprs and attrs for ``ASTSource`` (:func:`kbuild.compile.signature.ast_source_args`, the one
    builder), from the declaration, with errors naming its key."""
    where = settings.config_file
    base = f"[tool.kbuild.kernels][{kernel_index(settings, spec)}]"
    params = list(fn.arg_names)
    unknown = [n for n in (*spec.signature, *spec.constexprs) if n not in params]
    if unknown:
        section = "signature" if unknown[0] in spec.signature else "constexprs"
        raise KernelSourceError(where, f"{base}.{section}.{unknown[0]}",
                                f"{spec.function}() has no parameter {unknown[0]!r}; its parameters: {', '.join(params)}")
    constexpr_params = {p.name for p in fn.params if p.is_constexpr}
    for name in params:
        if name in spec.constexprs:
            continue
        if name not in spec.signature:
            section = "constexprs" if name in constexpr_params else "signature"
            raise KernelSourceError(where, f"{base}.{section}",
                                    f"parameter {name!r} of {spec.function}() is not declared")
        if name in constexpr_params:
            raise KernelSourceError(where, f"{base}.signature.{name}",
                                    f"{name!r} is a tl.constexpr parameter; give its value under constexprs")
    try:
        return signature.ast_source_args(params, spec.signature, spec.constexprs)
    except signature.SignatureError as exc:
        key = f"{base}.signature.{exc.param}" if exc.param in spec.signature else f"{base}.signature"
        raise KernelSourceError(where, key, str(exc)) from None


def compiler_options(target: Target, spec: KernelSettings) -> dict[str, Any]:
    """Triton's parsed backend options for this kernel and target, minus machine-specific paths."""
    import triton
    from triton.backends.compiler import GPUTarget

    backend = triton.compiler.make_backend(GPUTarget("cuda", target.cc, 32))
    given: dict[str, Any] = {"num_warps": spec.num_warps, "num_stages": spec.num_stages}
    if getattr(spec, "maxnreg", None):  # left out when unset, so that such kernels keep their keys
        given["maxnreg"] = spec.maxnreg
    if getattr(spec, "num_ctas", 1) != 1:
        given["num_ctas"] = spec.num_ctas
    options = backend.parse_options(given)
    return dataclasses.asdict(options)


#: Variables Triton reads in Python that swap in other code (IR overrides, instrumentation, another
#: libdevice) and that its cache key does not list.
_CODE_KNOBS = ("TRITON_KERNEL_OVERRIDE", "TRITON_OVERRIDE_DIR", "TRITON_INSTRUMENTATION_MODE", "TRITON_LIBDEVICE_PATH",
               "TRITON_ALLOW_NON_CONSTEXPR_GLOBALS")


def triton_env() -> dict[str, str]:
    """The environment variables set here that change what Triton compiles: the ones Triton's own cache
    key takes (``get_cache_invalidating_env_vars``: ``DISABLE_PTXAS_OPT``, ``TRITON_DEFAULT_FP_FUSION``,
    ...), less the line-info switch kbuild sets itself, and :data:`_CODE_KNOBS`. Knobs that reach the
    backend options (``PTXAS_OPTIONS``, ``TRITON_DEBUG``, ...) are in the options already."""
    from triton._C.libtriton import get_cache_invalidating_env_vars

    env = {str(k): str(v) for k, v in get_cache_invalidating_env_vars().items()}
    env.pop("TRITON_DISABLE_LINE_INFO", None)
    for name in _CODE_KNOBS:
        value = env_value(name)
        if value is not None:
            env[name] = value
    return dict(sorted(env.items()))


def portable_options(options: dict[str, Any]) -> dict[str, Any]:
    """Options with install paths replaced by file names, for keys and metadata, and (only when some are
    set) the environment variables that change the compiled code (:func:`triton_env`)."""
    out = dict(options)
    if out.get("extern_libs"):
        out["extern_libs"] = [[name, Path(path).name] for name, path in out["extern_libs"]]
    env = triton_env()
    if env:
        out["triton_env"] = env
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in out.items()}


#: Seconds ptxas may run when no setting says otherwise (``compile_timeout``'s default).
DEFAULT_COMPILE_TIMEOUT: float = Settings.__dataclass_fields__["compile_timeout"].default  # type: ignore[assignment]

#: One compile at a time: Triton's knobs and ``tempfile.tempdir`` are process-wide.
_COMPILE_LOCK = threading.RLock()


class PtxasTimeout(Exception):
    """ptxas ran past the compile timeout and was stopped (:func:`compile_kernel` names the kernel)."""

    def __init__(self, seconds: float, detail: str) -> None:
        super().__init__(f"ptxas ran past {seconds:g} s and was stopped")
        self.seconds = seconds
        self.detail = detail


class _Terminated(BaseException):
    """SIGTERM arrived during a compile: unwind (removing the temporary directory), then die of it."""


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """While a compile runs, SIGTERM raises instead of killing the process outright, so that the
    ``finally`` clauses and context managers inside run (the private directory is removed and ptxas is
    killed); then the signal is delivered again with the default action, so the process still dies of
    SIGTERM. Only in the main thread, and only where nobody installed a handler of their own."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def raise_terminated(signum: int, frame: Any) -> None:
        raise _Terminated()

    signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    except _Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        raise
    finally:
        if signal.getsignal(signal.SIGTERM) is raise_terminated:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def _private_tempdir(path: Path) -> Iterator[None]:
    """Triton writes its ``.ptx``, ``.log`` and ``.o`` scratch files with ``tempfile`` (and leaves them
    when ptxas fails or the process is interrupted): put them in our directory."""
    saved = tempfile.tempdir
    tempfile.tempdir = str(path)
    try:
        yield
    finally:
        tempfile.tempdir = saved


def _guarded_tool(bin_dir: Path, real: str, seconds: float, marker: Path) -> str:
    """An executable that runs ``real`` under :mod:`kbuild.compile.ptxas_guard` (a wall-clock bound)."""
    guard = Path(__file__).with_name("ptxas_guard.py")
    script = bin_dir / Path(real).name
    args = [sys.executable, "-I", "-S", str(guard), real, f"{seconds:g}", str(marker), str(os.getpid())]
    script.write_text(f"#!/bin/sh\nexec {' '.join(shlex.quote(a) for a in args)} \"$@\"\n")
    script.chmod(0o700)
    return str(script)


def hermetic_compile(src: Any, cc: int, options: dict[str, Any], *,
                     timeout: float | None = DEFAULT_COMPILE_TIMEOUT) -> Any:
    """``triton.compile`` the way every kbuild compile runs: line info off (no source paths in the
    cubin), a private, empty Triton cache (nothing stale or foreign reused), Triton's scratch files in
    a private directory removed at the end (SIGTERM included), ptxas stopped after ``timeout`` seconds
    (:class:`PtxasTimeout`; None: no bound) and Triton's prints kept off stdout. No GPU needed."""
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget

    with _COMPILE_LOCK, _sigterm_unwinds(), tempfile.TemporaryDirectory(prefix="kbuild-triton-") as tmp, \
            knobs.compilation.scope(), knobs.cache.scope(), knobs.nvidia.scope():
        root = Path(tmp)
        for sub in ("cache", "tmp", "bin"):
            (root / sub).mkdir()
        knobs.compilation.disable_line_info = True
        knobs.cache.dir = str(root / "cache")
        marker = root / "ptxas-timed-out"
        if timeout is not None:
            # Triton falls back to its bundled binary when the knob's path fails, so a broken guard
            # costs the bound, never the build.
            knobs.nvidia.ptxas = _guarded_tool(root / "bin", knobs.nvidia.ptxas.path, timeout, marker)
            knobs.nvidia.ptxas_blackwell = _guarded_tool(root / "bin", knobs.nvidia.ptxas_blackwell.path, timeout,
                                                         marker)
        printed = io.StringIO()  # Triton prints the whole PTX on a ptxas failure; stdout may carry --json
        try:
            with _private_tempdir(root / "tmp"), contextlib.redirect_stdout(printed):
                compiled = triton.compile(src, target=GPUTarget("cuda", cc, 32), options=options)
        except Exception as exc:
            if timeout is not None and marker.exists():
                raise PtxasTimeout(timeout, str(exc).strip()[-2000:]) from None
            raise
        if printed.getvalue():
            sys.stderr.write(printed.getvalue())
        return compiled


def compile_kernel(settings: Settings, spec: KernelSettings, target: Target, fn: Any | None = None) -> CompiledKernel:
    """Compile one kernel for one target to a cubin, deterministically, without a GPU."""
    from triton.compiler import ASTSource

    fn = fn if fn is not None else load_jit_function(settings, spec)
    args = ast_source_args(settings, spec, fn)
    options = compiler_options(target, spec)
    started = time.perf_counter()
    try:
        compiled = hermetic_compile(ASTSource(fn=fn, **args), target.cc, options, timeout=settings.compile_timeout)
    except PtxasTimeout as exc:
        raise CompileError(
            f"ptxas ran past compile_timeout = {exc.seconds:g} s compiling kernel {spec.name!r} ({spec.source}) for "
            f"{target.name} and was stopped ({settings.config_file}: [tool.kbuild] compile_timeout, or "
            "KBUILD_COMPILE_TIMEOUT)\n  next step: smaller blocks or constexprs for this kernel, or a larger "
            "compile_timeout if it really needs that long"
        ) from None
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

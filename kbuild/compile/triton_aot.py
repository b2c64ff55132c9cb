"""Triton ahead-of-time compilation: a kernel declaration + a target → a baseline cubin.

This works with no GPU: ``triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, 32))``
runs Triton's passes and the bundled ptxas. Output is deterministic and independent of the
checkout path: line info is off (cubins would otherwise embed source paths), and every compile
runs against a private, empty Triton cache so that nothing stale or foreign is reused.

Every compile runs in one private temporary directory (Triton's cache, its ``.ptx``/``.log``
scratch files and the ptxas guard), removed when the compile ends, fails, is interrupted
(SIGINT) or terminated (SIGTERM: the directory is removed, then the process dies of the signal
as it would have).

:func:`compile_kernel` compiles in a child process (:class:`kbuild.compile.workers.CompileProcess`) under a
wall-clock bound, ``compile_timeout``: Triton's passes have none of their own (a kernel declared with ``BLOCK =
1048576`` ran 351 s), and past it the child is stopped and the compile fails naming the kernel, the target and
the setting. ptxas has the same bound inside the child (:mod:`kbuild.compile.ptxas_guard`), and dies with it.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import hashlib
import inspect
import io
import json
import logging
import os
import shlex
import signal
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbuild import usercode
from kbuild.compile.workers import CompileProcess, Deadline, WorkerDied
from kbuild.declarations import signature
from kbuild.declarations.kernel import KernelSettings
from kbuild.errors import CompileError, KBuildError, KernelSourceError, MissingDependencyError, UsageError
from kbuild.settings.environ import env_value
from kbuild.settings.model import Settings
from kbuild.targets import Target
from kbuild.toolchain import ptxas_version, triton_version

log = logging.getLogger(__name__)


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
    """The index of ``spec``'s ``[[tool.kbuild.kernels]]`` table (the variants of one table share it)."""
    if spec.entry is not None:
        return spec.entry
    return next(i for i, k in enumerate(settings.kernels) if k.name == spec.name)


def declared_at(settings: Settings, spec: KernelSettings) -> tuple[str, str]:
    """``(file, key)`` an error about ``spec`` names: its ``[tool.kbuild.kernels][i]`` table in the settings' file,
    or the recorded specialisation it was made from (``kbuild-recording.json``, ``kernels[3].specializations[0]``)."""
    if spec.recorded is not None:
        return spec.recorded
    return settings.config_file, f"[tool.kbuild.kernels][{kernel_index(settings, spec)}]"


@contextlib.contextmanager
def project_on_path(settings: Settings) -> Iterator[None]:
    """The project's ``python_path`` folders (those that exist and are not there yet) first on ``sys.path`` while
    the block runs, removed afterwards: where the kernels' modules are imported, and found."""
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
    """Import ``spec.source`` and return its ``@triton.jit`` function: ``@triton.autotune`` and
    ``@triton.heuristics`` objects over one are unwrapped (:func:`unwrap`)."""
    return unwrap(load_source(settings, spec)).jit


@dataclass(frozen=True)
class SourceLayers:
    """What ``source`` names, taken apart: the ``@triton.jit`` function and the wrappers around it."""

    jit: Any
    autotuner: Any | None
    """The ``@triton.autotune`` object, if any (its configs: :func:`kbuild.declarations.space.autotune_configs`)."""
    heuristics: tuple[tuple[str, Any], ...]
    """``(name, lambda args: value)`` of every ``@triton.heuristics`` layer, in the order Triton runs them (the
    outermost layer first)."""


def unwrap(obj: Any) -> SourceLayers:
    """Take ``@triton.autotune`` (``Autotuner``) and ``@triton.heuristics`` (``Heuristics``: ``.values`` maps a
    name to ``lambda args: value``) layers off ``obj``, in any order and nesting, down to the ``@triton.jit``
    function. A ValueError says what is not such a layer."""
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction

    autotuner = None
    heuristics: list[tuple[str, Any]] = []
    seen = 0
    while not isinstance(obj, JITFunction):
        seen += 1
        if seen > 16:
            raise ValueError("more than 16 layers of decorators")
        if isinstance(obj, Autotuner):
            if autotuner is not None:
                raise ValueError("two @triton.autotune layers")
            autotuner = obj
        elif isinstance(obj, Heuristics):
            values = getattr(obj, "values", None)
            if not isinstance(values, dict):
                raise ValueError("an @triton.heuristics object without a values dict")
            heuristics.extend((str(n), f) for n, f in values.items())
        else:
            raise ValueError(f"a {type(obj).__name__}, not a @triton.jit function")
        obj = getattr(obj, "fn", None)
    return SourceLayers(jit=obj, autotuner=autotuner, heuristics=tuple(heuristics))


def _is_autotuner(obj: Any) -> bool:
    from triton.runtime.autotuner import Autotuner

    if not isinstance(obj, Autotuner):
        return False
    try:
        unwrap(obj)
    except ValueError:
        return False
    return True


def load_autotuner(settings: Settings, spec: KernelSettings) -> Any | None:
    """The ``@triton.autotune`` object ``spec.source`` names (or wraps, or is wrapped by a heuristics layer), or
    None when there is none."""
    return unwrap(load_source(settings, spec)).autotuner


def load_source(settings: Settings, spec: KernelSettings) -> Any:
    """Import ``spec.source``: a ``@triton.jit`` function, or ``@triton.autotune``/``@triton.heuristics`` objects
    over one (:func:`unwrap`). The module is imported from the project (``python_path``) or, failing that,
    wherever Python finds it (an installed package)."""
    try:
        from triton.runtime.jit import JITFunction  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(f"Triton is not installed ({exc}); kbuild needs triton>=3.6,<3.7") from None
    where, base = declared_at(settings, spec)
    key = f"{base}.source"
    with project_on_path(settings):  # anything the user's module raises, sys.exit too, is one error
        module = usercode.import_module(spec.module, error=lambda m: KernelSourceError(where, key, m),
                                        hint=f"; the project root and {settings.python_path} are on the path")
    fn = getattr(module, spec.function, None)
    if fn is None:
        raise KernelSourceError(where, key, f"module {spec.module!r} has no attribute {spec.function!r}")
    try:
        unwrap(fn)
    except ValueError as exc:
        raise KernelSourceError(where, key, f"{spec.source!r} is not a @triton.jit function (or @triton.autotune / "
                                            f"@triton.heuristics over one): {exc}") from None
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
    """Signature, constexprs and attrs for ``ASTSource`` (:func:`kbuild.declarations.signature.ast_source_args`, the one
    builder), from the declaration, with errors naming its key."""
    where, base = declared_at(settings, spec)
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


def triton_constexprs(constexprs: dict[str, Any]) -> dict[str, Any]:
    """Declared constexpr values as Triton's JIT passes them: a dtype table (``{"dtype": "fp16"}``) becomes
    Triton's dtype object (``tl.float16``); everything else is as declared."""
    from triton.language import str_to_ty

    out = {}
    for name, value in constexprs.items():
        dtype = signature.dtype_constexpr(value)
        out[name] = str_to_ty(dtype, None) if dtype is not None else value
    return out


def declared_value(value: Any) -> Any:
    """A Python value Triton would pass as a constexpr (a default, a heuristic's result) in declaration form:
    ``tl.float16`` → ``{"dtype": "fp16"}``, ``tl.constexpr(4)`` → 4, numbers and strings as they are, None. A
    ValueError for anything a declaration cannot hold."""
    import numbers

    from triton.language import constexpr, dtype, str_to_ty

    if isinstance(value, constexpr):
        value = value.value
    if isinstance(value, dtype):
        for name in signature.ELEMENT_TYPES:
            if str_to_ty(name, None) == value:
                return {"dtype": name}
        raise ValueError(f"dtype {value} has no declaration name")
    if value is None or isinstance(value, (bool, str)):
        return value
    if type(value).__name__ == "bool_":  # numpy's bool
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise ValueError(f"a {type(value).__name__} ({value!r})")


def _default_type(param: Any) -> str:
    """The declared type of a runtime parameter from its default, as Triton's JIT specialises that value
    (``native_specialize_impl``, honouring ``do_not_specialize``): 1 → ``"i32:1"``, None → ``"none"``, an
    integer divisible by 16 → ``"i32:16"``, a float → ``"fp32"``, a bool → ``"u1"``."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    ty, attr = native_specialize_impl(BaseBackend, param.default, bool(param.is_const),
                                      not param.do_not_specialize, not param.do_not_specialize_on_alignment)
    if ty == "constexpr":
        if attr is None:
            return signature.NONE_TYPE
        if attr == 1 and not isinstance(attr, bool):
            return "i32:1"
        raise ValueError(f"Triton specialises it to the constant {attr!r}")
    annotated = getattr(param, "annotation_type", "")
    if isinstance(annotated, str) and annotated:
        ty = annotated
        if annotated == "u1" or annotated[:2] in ("fp", "bf"):
            attr = None
    return ty + (":16" if attr == "D" else "")


def complete_declaration(settings: Settings, spec: KernelSettings, layers: SourceLayers,
                         skip: set[str] | frozenset[str] = frozenset()) -> KernelSettings:
    """``spec`` with every parameter it leaves out that has a default in the Python signature declared as Triton
    would call the kernel: a ``tl.constexpr`` default is its value, a runtime default is specialised as Triton's
    JIT specialises it (:func:`_default_type`). Declared values win; ``skip`` (set by an autotuner's configs) and
    names a heuristic sets are left alone. A default a declaration cannot hold is an error naming the key."""
    fn = layers.jit
    base = f"[tool.kbuild.kernels][{kernel_index(settings, spec)}]"
    set_by_heuristics = {n for n, _ in layers.heuristics}
    sig, cx = dict(spec.signature), dict(spec.constexprs)
    for p in fn.params:
        if p.name in sig or p.name in cx or p.name in skip or p.name in set_by_heuristics or not p.has_default:
            continue
        section = "constexprs" if p.is_constexpr else "signature"
        try:
            if p.is_constexpr:
                cx[p.name] = declared_value(p.default)
            else:
                sig[p.name] = _default_type(p)
                signature.parse_type(sig[p.name])
        except (ValueError, TypeError) as exc:
            raise KernelSourceError(settings.config_file, f"{base}.{section}.{p.name}",
                                    f"the default of {p.name!r} in {spec.function}() cannot be taken as it is ({exc}); "
                                    f"declare {p.name} under {section}") from None
    if sig == spec.signature and cx == spec.constexprs:
        return spec
    return dataclasses.replace(spec, signature=sig, constexprs=cx)


class _Unknown(Exception):
    """A heuristic read an argument whose value the declaration does not fix."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class _Pointer:
    """Stands in for a tensor argument in a heuristic's ``args`` (it is not None; anything else is unknown)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        raise _Unknown(f"{self._name}.{attr}")


class _Args(dict):  # type: ignore[type-arg]
    def __missing__(self, key: str) -> Any:
        raise _Unknown(key)


def heuristic_args(spec: KernelSettings, constexprs: dict[str, Any]) -> dict[str, Any]:
    """The ``args`` a heuristic sees at build time: constexprs (dtypes as Triton's objects), runtime arguments
    fixed by their declared type (``:1`` → 1, ``"none"`` → None) and stand-ins for pointers; reading any other
    argument raises (its value is known only at run time)."""
    args = _Args()
    for name, ty in spec.signature.items():
        t = signature.parse_type(ty)
        if t.is_none:
            args[name] = None
        elif t.is_constant_one:
            args[name] = 1
        elif t.pointer:
            args[name] = _Pointer(name)
    args.update(triton_constexprs(constexprs))
    return args


def evaluate_heuristics(settings: Settings, spec: KernelSettings, layers: SourceLayers, point: dict[str, Any], *,
                        declared: dict[str, Any], where: str = "constexprs") -> dict[str, Any]:
    """``point`` (a :mod:`kbuild.declarations.space` point) with the values of ``layers``' heuristics put into its constexprs,
    each evaluated as Triton does, on the arguments the declaration fixes (:func:`heuristic_args`) and the values
    of the heuristics before it. ``declared``: names the declaration (or a config, under the key ``where``) gives;
    a value a heuristic contradicts is an error naming that key; one a heuristic cannot compute at build time (it
    reads a runtime argument) is taken as declared, and is an error when not declared."""
    base = f"[tool.kbuild.kernels][{kernel_index(settings, spec)}]"
    cx = dict(point["constexprs"])
    for name, heur in layers.heuristics:
        key = f"{base}.{where}.{name}"
        try:
            value = declared_value(heur(heuristic_args(spec, cx)))
        except _Unknown as exc:
            if name in declared:
                continue
            raise KernelSourceError(settings.config_file, f"{base}.constexprs.{name}",
                                    f"the @triton.heuristics value of {name!r} reads argument {exc.name!r}, whose "
                                    f"value is known only at run time; declare {name} under constexprs") from None
        except Exception as exc:
            raise KernelSourceError(settings.config_file, key, f"the @triton.heuristics value of {name!r} raised "
                                                               f"{type(exc).__name__}: {exc}") from None
        if name in declared and not _same_value(declared[name], value):
            raise KernelSourceError(settings.config_file, key,
                                    f"declared {declared[name]!r}, but the source's @triton.heuristics gives "
                                    f"{value!r} for these arguments; leave {name} out (the heuristic sets it) or "
                                    "declare the value it gives")
        cx[name] = value
    return {**point, "constexprs": cx}


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


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
    if getattr(spec, "ptx_options", ""):  # likewise: unset keeps Triton's default (PTXAS_OPTIONS) and the key
        given["ptx_options"] = spec.ptx_options
    try:
        options = backend.parse_options(given)
    except (AssertionError, ValueError, TypeError) as exc:  # Triton checks its options with asserts
        raise UsageError(f"{spec.name} for {target.name}: Triton refuses the launch options {given}: "
                         f"{exc or type(exc).__name__}") from None
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
        super().__init__(seconds, detail)  # both in args: it pickles (it crosses from the compile process)
        self.seconds = seconds
        self.detail = detail

    def __str__(self) -> str:
        return f"ptxas ran past {self.seconds:g} s and was stopped"


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
                     timeout: float | None = DEFAULT_COMPILE_TIMEOUT, ptxas_log: list[str] | None = None) -> Any:
    """``triton.compile`` the way every kbuild compile runs: line info off (no source paths in the
    cubin), a private, empty Triton cache (nothing stale or foreign reused), Triton's scratch files in
    a private directory removed at the end (SIGTERM included), ptxas stopped after ``timeout`` seconds
    (:class:`PtxasTimeout`; None: no bound) and Triton's prints kept off stdout. No GPU needed.

    ``ptxas_log``: a list that gets the resource report of Triton's own ptxas run (Triton always runs ptxas
    with ``-v``; its ``dump_ptxas_log`` knob prints what ptxas wrote, which is taken here instead of echoed;
    :mod:`kbuild.compile.ptxas_report` reads it). Turning it on changes neither the options nor the cubin."""
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
        if ptxas_log is not None:
            knobs.nvidia.dump_ptxas_log = True
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
        text = printed.getvalue()
        if ptxas_log is not None:
            text, log = _split_ptxas_log(text)
            ptxas_log.append(log)
        if text:
            sys.stderr.write(text)
        return compiled


def _split_ptxas_log(printed: str) -> tuple[str, str]:
    """(what Triton printed before ptxas's log, the log): the log is printed last, after the compile's passes
    (``make_cubin``), and starts with ptxas's first ``ptxas info`` line."""
    lines = printed.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith("ptxas")), len(lines))
    return "".join(lines[:start]), "".join(lines[start:])


def ast_source_class(fn: Any) -> Any:
    """Triton's ``ASTSource`` for a ``@triton.jit`` function; ``GluonASTSource`` for a ``@gluon.jit`` one (Gluon
    kernels start from TTGIR with their own layouts, and compile AOT the same way otherwise)."""
    if getattr(fn, "is_gluon", lambda: False)():
        from triton.experimental.gluon._runtime import GluonASTSource

        return GluonASTSource
    from triton.compiler import ASTSource

    return ASTSource


class _Failed(Exception):
    """What a compile in the child raised that is not kbuild's own, as one line (Triton's exceptions do not all
    pickle)."""


#: ``setup(fn)``: a context the kernel is compiled in (``kbuild.compile.folded.ImportedAs``: a recording's
#: module-level values set back), picklable: the compile process runs it too.
ImportSetup = Callable[[Any], contextlib.AbstractContextManager[Any]]


def _compile_here(settings: Settings, spec: KernelSettings, cc: int, args: dict[str, Any], options: dict[str, Any],
                  expected: str, path: list[str], scratch: str, setup: ImportSetup | None = None) -> dict[str, Any]:
    """The compile as the child process (:func:`compile_kernel`) runs it: import the kernel with the parent's
    ``sys.path`` (in ``setup``'s context, if any), check that it is the function the parent keyed (``expected``:
    its :func:`source_hash`), compile with Triton's scratch files under ``scratch`` (which the parent removes,
    whatever happens here); what the parent needs of Triton's ``CompiledKernel``, as plain data."""
    sys.path[:] = path
    try:
        fn = load_jit_function(settings, spec)
        with setup(fn) if setup is not None else contextlib.nullcontext():
            got = source_hash(fn)
            if got != expected:
                raise CompileError(
                    f"kernel {spec.name!r} ({spec.source}), imported again to compile it, is not the function whose "
                    f"key was computed (source hash {got[:16]} here, {expected[:16]} in the build): its module "
                    "changed on disk during the build, or sets the values it folds in differently in each process")
            source = ast_source_class(fn)(fn=fn, **{**args, "constexprs": triton_constexprs(args["constexprs"])})
            saved = tempfile.tempdir
            tempfile.tempdir = scratch
            try:
                compiled = hermetic_compile(source, cc, options, timeout=settings.compile_timeout)
            finally:
                tempfile.tempdir = saved
    except (KBuildError, PtxasTimeout):
        raise
    except BaseException as exc:  # SystemExit from the user's module included: one line, never this process's end
        raise _Failed(f"{type(exc).__name__}: {exc}") from None
    md = compiled.metadata
    return {"cubin": compiled.asm["cubin"], "ptx": compiled.asm.get("ptx"), "symbol": md.name, "shared": md.shared,
            "num_warps": md.num_warps, "num_stages": md.num_stages, "num_ctas": md.num_ctas,
            "global_scratch_size": getattr(md, "global_scratch_size", 0), "triton_metadata": triton_metadata(compiled)}


def compile_kernel(settings: Settings, spec: KernelSettings, target: Target, fn: Any | None = None, *,
                   process: CompileProcess | None = None, setup: ImportSetup | None = None) -> CompiledKernel:
    """Compile one kernel for one target to a cubin, deterministically, without a GPU, in a child process that
    is stopped past ``settings.compile_timeout`` (a :class:`CompileError` naming the kernel, the target and the
    setting). ``process``: the :class:`~kbuild.compile.workers.CompileProcess` to compile in (a build passes one
    for all its compiles); None: one started for this compile alone. ``setup``: the context the kernel is keyed
    and compiled in, here and in the child (:data:`ImportSetup`)."""
    fn = fn if fn is not None else load_jit_function(settings, spec)
    with setup(fn) if setup is not None else contextlib.nullcontext():
        expected = source_hash(fn)
    args = ast_source_args(settings, spec, fn)
    options = compiler_options(target, spec)
    what = f"kernel {spec.name!r} ({spec.source}) for {target.name}"
    setting = f"{settings.config_file}: [tool.kbuild] compile_timeout, or KBUILD_COMPILE_TIMEOUT"
    started = time.perf_counter()
    with _sigterm_unwinds(), contextlib.ExitStack() as stack:
        if process is None:
            process = stack.enter_context(CompileProcess())
        # Removed after the child ended, even one killed inside a C++ pass (which leaves its own directory behind).
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="kbuild-compile-", ignore_cleanup_errors=True))
        try:
            out = process.call(settings.compile_timeout, _compile_here, settings, spec, target.cc, args, options,
                               expected, list(sys.path), scratch, setup)
        except Deadline:
            raise CompileError(
                f"compiling {what} ran past compile_timeout = {settings.compile_timeout:g} s and was stopped "
                f"({setting})\n  next step: smaller blocks or constexprs for this kernel, or a larger compile_timeout "
                "if it really needs that long") from None
        except PtxasTimeout as exc:
            raise CompileError(
                f"ptxas ran past compile_timeout = {exc.seconds:g} s compiling {what} and was stopped ({setting})"
                "\n  next step: smaller blocks or constexprs for this kernel, or a larger compile_timeout if it "
                "really needs that long") from None
        except WorkerDied as exc:
            raise CompileError(f"the process compiling {what} died ({exc}); out of memory?") from None
        except _Failed as exc:
            raise CompileError(f"Triton failed to compile {what}: {exc}") from None
    seconds = time.perf_counter() - started
    cubin = out["cubin"]
    metadata = {
        "kernel": spec.name,
        "source": spec.source,
        "symbol": out["symbol"],
        "target": target.name,
        "arch": target.arch,
        "shared": out["shared"],
        "num_warps": out["num_warps"],
        "num_stages": out["num_stages"],
        "num_ctas": out["num_ctas"],
        "global_scratch_size": out["global_scratch_size"],
        "params": [{"name": n, "type": args["signature"][n], "constexpr": n in args["constexprs"]} for n in fn.arg_names],
        "constexprs": args["constexprs"],
        "triton_version": triton_version(),
        "ptxas_version": ptxas_version(),
        "line_info": False,
        # Triton's own metadata (as its cache stores it; install paths reduced to file names): what
        # kbuild.runtime.loader needs to launch this cubin without running Triton's compiler (issue 16).
        "triton_metadata": out["triton_metadata"],
    }
    if target.architecture.wgmma:
        hazards = _wgmma_hazards(settings, cubin, out["symbol"], out["ptx"], spec, target)
        if hazards:  # recorded only when present: every other kernel's metadata stays as it was
            metadata["wgmma_register_hazards"] = hazards  # refused by the pipeline under wgmma_hazards = "error"
    return CompiledKernel(kernel=spec.name, target=target, cubin=cubin, metadata=metadata, compile_seconds=seconds)


def _wgmma_hazards(settings: Settings, cubin: bytes, symbol: str, ptx: str | None, spec: KernelSettings,
                   target: Target) -> list[str]:
    """:mod:`kbuild.sass.hazards` on a cubin (of an architecture with wgmma) with a register-operand wgmma, with a
    warning when it finds a race: Triton 3.6 pipelines such a wgmma over registers the next iteration overwrites
    (triton-lang/triton#9433), and the results then depend on timing. The cubin is what Triton produced: under
    ``wgmma_hazards = "error"`` the pipeline refuses it (:func:`kbuild.build.hazards.refuse_wgmma_hazards`), and a
    check that cannot run here is an error instead of a skip."""
    try:
        from kbuild.sass.hazards import WGMMA_RACE_ISSUE, recorded, register_wgmma_hazards

        found = register_wgmma_hazards(cubin, symbol, ptx)
    except (KBuildError, OSError, ImportError) as exc:  # no nvdisasm, or no numpy (the core install without the
        if settings.wgmma_hazards == "error":  # tune extra): skipped, not the compile, unless it was asked for
            raise MissingDependencyError(
                f"{settings.config_file}: wgmma_hazards: \"error\" needs the wgmma hazard check of kernel "
                f"{spec.name!r} ({spec.source}) for {target.name}, whose PTX has a wgmma with a register operand, "
                f"and the check cannot run here: {type(exc).__name__}: {exc}\n  next step: pip install 'kbuild[tune]' "
                "(the SASS engine's numpy) and make nvdisasm available (KBUILD_NVDISASM), or set wgmma_hazards = "
                "\"warn\"") from None
        log.debug("wgmma hazard check of %s skipped: %s", spec.name, exc)
        return []
    if found:
        log.warning("kernel %r (%s) for %s: %d instruction(s) touch a wgmma operand register before the wait that "
                    "retires it, first %s; its results can differ from run to run on the GPU (Triton's pipelining of "
                    "a wgmma with a register operand, %s)", spec.name, spec.source, target.name,
                    len(found), found[0], WGMMA_RACE_ISSUE)
    return recorded(found)


def triton_metadata(compiled: Any) -> dict[str, Any]:
    """A Triton ``CompiledKernel``'s metadata as Triton writes it into its cache (``json.dumps(.., default=vars)``),
    with ``extern_libs`` paths reduced to file names (the launch never reads them)."""
    md: dict[str, Any] = json.loads(json.dumps(compiled.metadata._asdict(), default=vars))
    if md.get("extern_libs"):
        md["extern_libs"] = [[name, Path(path).name] for name, path in md["extern_libs"]]
    return md

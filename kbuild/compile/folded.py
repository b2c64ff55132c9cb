"""What a kernel's code is on the machine that imported it: the globals Triton folds into it and the ``@triton.jit``
callees its names resolve to, as data, and a kernel imported with them set to the values another machine saw.

A package may decide at import time what its kernels compile to: a global set to ``tl.constexpr("tf32")`` on a GPU
and ``"ieee"`` on a CPU, or a callee chosen by a hardware probe (``softplus = _softplus_ptx if
torch.cuda.is_available() else _softplus_plain``). Triton folds both into the kernel's ``cache_key``, so the same
function has another source hash (:func:`kbuild.compile.triton_aot.source_hash`) on each machine, and a cubin built
on a CPU machine never answers the GPU's call.

:func:`snapshot` describes what the kernel reads, the way ``kbuild record`` keeps it (:mod:`kbuild.record.format`,
a kernel's ``globals``): ``"module:NAME"`` (the module whose globals hold the name, a dotted ``NAME`` for a module
or class attribute read as ``consts.SCALE``) → one of

* ``{"constexpr": value}``: a ``tl.constexpr`` (a dtype as ``{"dtype": "fp16"}``);
* ``{"value": value}``: a plain bool, int, float, string or None (an attribute read Triton folds in);
* ``{"jit": "module:qualname"}``: a ``@triton.jit`` function the name resolves to;
* ``{"text": "..."}``: any other value, by a stable text (described, never set again).

:func:`imported_as` sets those names back to recorded values while a block runs (and restores them): the build
computes the key and compiles, in its compile process too, the kernel as the recording machine imported it
(:mod:`kbuild.build.recorded`). :func:`differences` says in words what differs. Nothing here reads a GPU.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import math
import sys
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kbuild.compile.triton_aot import declared_value, folded_globals

#: Rounds of :func:`imported_as`: a callee set back to the recorded one may read globals of its own.
MAX_ROUNDS = 4


class ImportMismatch(Exception):
    """A recorded value cannot be set here (its module is not imported, its callee does not exist, it has no
    value to set); the message says which."""


def _jit_callables() -> tuple[type, ...]:
    from triton.runtime.jit import JITCallable

    return (JITCallable,)


def describe(value: Any) -> dict[str, Any] | None:
    """A folded value as :func:`snapshot` holds it; None for a value with no stable description (printed by
    address)."""
    from triton.language.core import constexpr

    if isinstance(value, _jit_callables()):
        fn = getattr(value, "fn", None)
        return {"jit": f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', '?')}"}
    if isinstance(value, constexpr):
        inner = _plain(value.value)
        if inner is not _NOT_PLAIN:
            return {"constexpr": inner}
        try:
            return {"constexpr": declared_value(value)}
        except ValueError:
            pass
    else:
        plain = _plain(value)
        if plain is not _NOT_PLAIN:
            return {"value": plain}
    text = f"{type(value).__module__}.{type(value).__qualname__}:{value!r}"
    return None if " at 0x" in text else {"text": text}


_NOT_PLAIN = object()


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)) or type(value) is int:
        return value
    if type(value) is float and math.isfinite(value):
        return value
    return _NOT_PLAIN


def _callees(fn: Any) -> dict[tuple[str, str], Any]:
    """``(module, name) → callee`` of every ``@triton.jit`` function ``fn`` and its callees reach by a module-level
    name or a module attribute (``softplus(x)``, ``ops.softplus(x)``)."""
    jit_types = _jit_callables()
    found: dict[tuple[str, str], Any] = {}
    seen: set[int] = set()
    todo = [fn]
    while todo:
        f = todo.pop()
        f = getattr(f, "__func__", f)
        if id(f) in seen or not isinstance(f, jit_types) or not hasattr(f, "parse"):
            continue
        seen.add(id(f))
        scope = getattr(f, "__globals__", {})
        module = str(scope.get("__name__", ""))
        for node in ast.walk(f.parse()):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                value = scope.get(node.id)
                if isinstance(value, jit_types) and module:
                    found.setdefault((module, node.id), value)
                    todo.append(value)
            elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
                  and isinstance(node.value, ast.Name)):
                owner = scope.get(node.value.id)
                if isinstance(owner, types.ModuleType) and owner.__name__.split(".")[0] != "triton":
                    value = getattr(owner, node.attr, None)
                    if isinstance(value, jit_types):
                        found.setdefault((owner.__name__, node.attr), value)
                        todo.append(value)
    return found


def snapshot(fn: Any) -> dict[str, dict[str, Any]]:
    """What ``fn`` (a ``@triton.jit`` function) and the functions it calls read at module level, described (see the
    module docstring), sorted by name. Closure variables are left out (nothing can set them again)."""
    out: dict[str, dict[str, Any]] = {}
    for g in folded_globals(fn):
        if g.module is None:
            continue
        described = describe(g.value)
        if described is not None:
            out[f"{g.module}:{g.name}"] = described
    for (module, name), callee in _callees(fn).items():
        described = describe(callee)
        if described is not None:
            out.setdefault(f"{module}:{name}", described)
    return dict(sorted(out.items()))


def differences(recorded: Mapping[str, Any], here: Mapping[str, Any]) -> list[str]:
    """Each name whose value differs between ``recorded`` (another machine's :func:`snapshot`) and ``here``, in
    words: ``global kbx.kernels:PRECISION: recorded constexpr 'tf32', here constexpr 'ieee'``."""
    out = []
    for name in sorted(set(recorded) | set(here)):
        a, b = recorded.get(name), here.get(name)
        if a != b:
            out.append(f"global {name}: recorded {_words(a)}, here {_words(b)}")
    return out


def _words(value: Mapping[str, Any] | None) -> str:
    if value is None:
        return "nothing (not read)"
    (kind, v), = value.items()
    return f"{kind} {v!r}" if kind != "jit" else f"@triton.jit {v}"


def _value(described: Mapping[str, Any], name: str) -> Any:
    """The Python value to set for a recorded description."""
    import triton.language as tl

    (kind, v), = described.items()
    if kind == "jit":
        module, _, qualname = str(v).partition(":")
        return _lookup(module, qualname, f"the @triton.jit function {v} that {name} was on the recording machine")
    if kind == "constexpr":
        if isinstance(v, dict) and set(v) == {"dtype"}:
            return tl.constexpr(tl.str_to_ty(str(v["dtype"]), None))
        return tl.constexpr(v)
    if kind == "value":
        return v
    raise ImportMismatch(f"{name} was {v} on the recording machine: a value kbuild cannot set again")


def _lookup(module: str, dotted: str, what: str) -> Any:
    try:
        obj: Any = importlib.import_module(module)
    except Exception as exc:  # the user's module: anything it raises
        raise ImportMismatch(f"{what}: module {module!r} cannot be imported here ({type(exc).__name__}: {exc})") \
            from None
    for part in dotted.split("."):
        if not hasattr(obj, part):
            raise ImportMismatch(f"{what}: {module}:{dotted} does not exist here")
        obj = getattr(obj, part)
    return obj


def _owner(name: str) -> tuple[Any, str]:
    """The object (a module, a class) whose attribute ``"module:A.B"`` names, and the attribute."""
    module, _, dotted = name.partition(":")
    owner = sys.modules.get(module)
    if owner is None:
        raise ImportMismatch(f"global {name}: module {module!r} is not imported here")
    *path, attr = dotted.split(".")
    for part in path:
        if not hasattr(owner, part):
            raise ImportMismatch(f"global {name}: {module}:{'.'.join(path)} does not exist here")
        owner = getattr(owner, part)
    return owner, attr


def _forget_hashes(functions: list[Any]) -> None:
    """Clear the cached ``cache_key`` of ``functions`` (Triton recomputes them; its own protocol after a change:
    ``JITFunction._unsafe_update_src``)."""
    for f in functions:
        if hasattr(f, "hash"):
            f.hash = None


def _reached(fn: Any) -> list[Any]:
    return [fn, *_callees(fn).values()]


@contextlib.contextmanager
def imported_as(fn: Any, recorded: Mapping[str, Mapping[str, Any]]) -> Iterator[list[str]]:
    """While the block runs, every name of ``recorded`` (a :func:`snapshot` from another machine) that differs here
    holds the recorded value; yields the names set, in words (:func:`differences`). Afterwards the old values are
    back and ``fn``'s hash is Triton's own again. An :class:`ImportMismatch` when a value cannot be set."""
    saved: list[tuple[Any, str, Any]] = []
    missing = object()
    changed: list[str] = []
    touched = _reached(fn)
    try:
        for _ in range(MAX_ROUNDS):
            here = snapshot(fn)
            todo = [(name, value) for name, value in recorded.items() if here.get(name) != value]
            if not todo:
                break
            changed += differences({n: v for n, v in todo}, {n: here.get(n) for n, _ in todo})
            for name, value in todo:
                owner, attr = _owner(name)
                new = _value(value, name)
                saved.append((owner, attr, getattr(owner, attr, missing)))
                setattr(owner, attr, new)
            _forget_hashes(touched)
            touched += _reached(fn)
        if saved:  # a callee reached only now may hold a hash computed before its globals were set
            touched += _reached(fn)
            _forget_hashes(touched)
        yield changed
    finally:
        for owner, attr, old in reversed(saved):
            if old is missing:
                with contextlib.suppress(AttributeError):
                    delattr(owner, attr)
            else:
                setattr(owner, attr, old)
        if saved:
            _forget_hashes(touched)


@dataclass(frozen=True)
class ImportedAs:
    """``ImportedAs(recorded)(fn)`` is :func:`imported_as` ``(fn, recorded)``: a picklable setup the compile process
    runs too (:data:`kbuild.compile.triton_aot.ImportSetup`)."""

    recorded: Mapping[str, Mapping[str, Any]]

    def __call__(self, fn: Any) -> contextlib.AbstractContextManager[list[str]]:
        return imported_as(fn, self.recorded)


__all__ = ["MAX_ROUNDS", "ImportMismatch", "ImportedAs", "describe", "differences", "imported_as", "snapshot"]

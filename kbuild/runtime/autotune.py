"""The ``@triton.autotune`` key a declared call has, computed at build time as Triton 3.6 computes it at run time.

``Autotuner.run`` (``triton/runtime/autotuner.py``, 3.6.0) looks its choice up in ``self.cache`` under::

    _args = {k: v for k, v in {**dict(zip(arg_names, args)), **kwargs}.items() if k in arg_names}
    key = [_args[k] for k in self.keys if k in _args] + [str(a.dtype) for a in _args.values() if hasattr(a, "dtype")]

(only when it has more than one config). :func:`autotune_key` derives that tuple from a declaration, so the
package index can carry it (``autotune.key``) and :func:`kbuild.runtime.loader.answer_autotuner` can fill the
cache before Triton benchmarks anything. What the call passes is taken to be every parameter of the kernel
except those the autotuner's configs and the ``@triton.heuristics`` layers set, positionally, in parameter order
(Triton's key follows the call's argument order: a caller passing keywords in another order keys differently and
is autotuned by Triton, correct and logged). Tensors are assumed to be torch tensors (``str(dtype)`` is
``"torch.float16"``); integers, floats, bools, ``None`` and ``tl.dtype`` constexprs have no ``dtype``.

**Missing values: the key is left out, with the reason** (not an error). A key argument's value comes from the
declaration: a constexpr's declared value, ``1`` for a ``":1"`` argument, ``None`` for ``"none"``. An integer
runtime argument (``n_cols = "i32"``) has no declared value, so no key can be derived; nor when a key argument
or a pointer has a Python default (whether the caller passes it changes the key), or a key value is a dtype
(not JSON). Then the entry ships without ``autotune`` and Triton autotunes on the first call, as without kbuild;
the reason is returned for the build to log and record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: Triton's pointer element type (declaration notation, canonical) → the name torch gives the dtype
#: (``str(torch.float16) == "torch.float16"``). Triton's own table (``triton._utils.type_canonicalisation_dict``)
#: maps the other way; the torch spelling is what reaches the autotuner's key.
TORCH_DTYPE_NAMES = {
    "fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64", "i1": "bool", "u1": "bool",
    "fp8e4nv": "float8_e4m3fn", "fp8e5": "float8_e5m2", "fp8e4b8": "float8_e4m3fnuz", "fp8e5b16": "float8_e5m2fnuz",
}

_SCALARS = (bool, int, float, str)


def _pointer_dtype(ty: str) -> str | None:
    """``"torch.float16"`` for ``"*fp16:16"``; None for a non-pointer; ValueError for an unknown element type."""
    t = "".join(ty.split())
    if not t.startswith("*"):
        return None
    elem = t[1:].partition(":")[0]
    if elem.startswith("k"):  # "*kfp16": a const pointer, same tensor dtype
        elem = elem[1:]
    name = TORCH_DTYPE_NAMES.get(elem)
    if name is None:
        raise ValueError(f"pointer type {ty!r} has no torch dtype kbuild knows")
    return f"torch.{name}"


def autotuner_sets(autotuner: Any, heuristics: Iterable[tuple[str, Any]] = ()) -> set[str]:
    """The parameters the caller does not pass: those the autotuner's configs set, and those heuristics set."""
    names = {name for c in getattr(autotuner, "configs", ()) for name in getattr(c, "kwargs", {})}
    return names | {name for name, _ in heuristics}


def autotune_key(autotuner: Any, jit: Any, signature: Mapping[str, str], constexprs: Mapping[str, Any], *,
                 heuristics: Iterable[tuple[str, Any]] = ()) -> tuple[list[Any] | None, str | None]:
    """``(key, None)``: the list ``Autotuner.run`` makes into its cache key for the declared call (JSON values, in
    Triton's order); or ``(None, reason)`` when it cannot be derived (see the module docstring).

    ``autotuner``: the ``@triton.autotune`` object (its ``keys``, ``configs``); ``jit``: the ``@triton.jit``
    function under it (its ``params``); ``signature``/``constexprs``: the shipped configuration's declaration
    (every runtime parameter's type, every constexpr's value, the configuration's included)."""
    if autotuner is None:
        return None, "not an @triton.autotune kernel"
    if len(getattr(autotuner, "configs", ())) <= 1:
        return None, "the autotuner has one config: Triton launches it without a key"
    keys = list(getattr(autotuner, "keys", ()))
    not_passed = autotuner_sets(autotuner, heuristics)
    passed = [p for p in jit.params if p.name not in not_passed]
    values: dict[str, Any] = {}
    dtypes: list[str] = []
    for p in passed:
        name = p.name
        ty = signature.get(name)
        if p.has_default and (name in keys or (ty is not None and ty.strip().startswith("*"))):
            return None, (f"argument {name!r} has a Python default: whether the caller passes it changes Triton's "
                          "autotune key")
        if ty is not None:
            try:
                dtype = _pointer_dtype(ty)
            except ValueError as exc:
                return None, f"argument {name!r}: {exc}"
            if dtype is not None:
                dtypes.append(dtype)
        if name not in keys:
            continue
        if name in constexprs:
            value = constexprs[name]
            if value is not None and type(value) not in _SCALARS:
                return None, f"autotune key argument {name!r} = {value!r} is not a JSON scalar (a dtype?)"
            values[name] = value
        elif ty is not None and "".join(ty.split()) == "none":
            values[name] = None
        elif ty is not None and "".join(ty.split()).endswith(":1"):
            values[name] = 1
        else:
            return None, (f"the declaration gives no value for the autotune key argument {name!r} "
                          f"({ty or 'not declared'}); Triton autotunes it on the first call")
    return [values[k] for k in keys if k in values] + dtypes, None


__all__ = ["TORCH_DTYPE_NAMES", "autotune_key", "autotuner_sets"]

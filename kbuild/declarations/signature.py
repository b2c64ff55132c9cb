"""The kernel-declaration grammar: Triton's AOT type of one runtime parameter, and ``ASTSource``'s arguments.

Both declarations of a kernel use it: ``[tool.kbuild.kernels].signature`` (:mod:`kbuild.declarations.kernel`, compiled by
:mod:`kbuild.compile.triton_aot`) and a bench spec's ``signature`` (:mod:`kbuild.bench.spec`). Each is read
here and nowhere else, so the type a project declares, the type it is compiled with and the type its
inputs are checked against agree.

The grammar is Triton 3.6's own, on the NVIDIA backend::

    type    := pointer | scalar | "none"
    pointer := "*" ["k"] element [":16"]      "k": pointer to constant data (``str_to_ty``)
    scalar  := integer [":16" | ":1"] | boolean | float
    integer := i8 | i16 | i32 | i64 | u8 | u16 | u32 | u64
    boolean := i1 | u1                        Triton canonicalises bool to u1; both name int1
    float   := fp16 | bf16 | fp32 | fp64
    element := integer | boolean | float | fp8e4nv | fp8e5 | fp8e4b15

Where each rule comes from (``site-packages/triton``):

* ``language/__init__.py`` ``str_to_ty``: a leading ``*`` makes a pointer and a ``k`` right after it a
  pointer to constant data (``"ki32"`` is not a type); the element names.
* ``backends/nvidia/compiler.py`` ``CUDAOptions.supported_fp8_dtypes``: fp8e5 and fp8e4b15, and fp8e4nv
  from sm_89 on (:meth:`kbuild.targets.Target.type_problem` says so per target). fp8e4b8 and fp8e5b16 are
  AMD's. fp8 is an element type only: neither Triton's launcher (``driver.py`` ``ty_to_cpp``) nor kbuild's
  (:data:`kbuild.emit.C_TYPES`) can pass an fp8 scalar.
* ``tools/compile.py`` (Triton's AOT compiler): the text after ``:`` is a hint, 16 or 1. ``:16`` adds
  ``tt.divisibility = 16``; ``:1`` makes the parameter the compile-time constant 1 (its signature entry
  becomes ``"constexpr"``). The JIT (``backends/compiler.py`` ``get_int_specialization`` and the native
  specialiser) gives those hints to integers and pointers only, never to floats or bools, and the
  constant 1 only to integers; a hint elsewhere would declare a kernel Triton never builds.

``"none"`` declares a parameter that is passed ``None`` (an optional pointer left out): Triton's JIT
specialises ``None`` to a compile-time constant (``native_specialize_impl`` gives ``("constexpr", None)``), so
it becomes a constexpr of value None and the launcher takes no argument for it. ``"None"`` (Python's
spelling) is an error that says to write ``"none"``.

A constexpr may be a dtype (Triton passes ``tl.float32``-like objects): ``{ dtype = "fp32" }``, the element
names above (:func:`dtype_constexpr`). Its value stays that table in keys and metadata;
:mod:`kbuild.compile.triton_aot` turns it into Triton's dtype object.

Surrounding whitespace is ignored (TOML authors align tables); whitespace inside a type is an error.
This module imports nothing of triton or torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Integer types: the only scalars Triton specialises (``:16``, ``:1``).
INTEGER_TYPES = ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")
#: Booleans (int1); Triton's JIT writes u1.
BOOLEAN_TYPES = ("i1", "u1")
FLOAT_TYPES = ("fp16", "bf16", "fp32", "fp64")
#: fp8 formats of Triton's NVIDIA backend; element types only.
FP8_TYPES = ("fp8e4nv", "fp8e5", "fp8e4b15")
SCALAR_TYPES = (*INTEGER_TYPES, *BOOLEAN_TYPES, *FLOAT_TYPES)
ELEMENT_TYPES = (*SCALAR_TYPES, *FP8_TYPES)

#: The torch dtype (attribute of ``torch``) that holds each element type; None where torch has none.
TORCH_DTYPES: dict[str, str | None] = {
    "i1": "bool", "u1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64",
    "fp8e4nv": "float8_e4m3fn", "fp8e5": "float8_e5m2", "fp8e4b15": None,
}

#: A parameter passed None (Triton specialises it to the constant None).
NONE_TYPE = "none"

#: The hints Triton's AOT compiler knows: divisible by 16, and the constant 1.
HINTS = (16, 1)

EXAMPLES = '"*fp16:16", "*kfp32", "i32", "i64:16", "i32:1", "fp32", "none"'


class SignatureError(ValueError):
    """A declaration Triton cannot compile: one parameter, and why (callers add the file and the key)."""

    def __init__(self, param: str | None, message: str) -> None:
        self.param = param
        super().__init__(message)


@dataclass(frozen=True)
class ParamType:
    """One parsed parameter type; ``str()`` gives it back in declaration notation."""

    element: str
    """The scalar type, or a pointer's element type."""
    pointer: bool = False
    const: bool = False
    """A pointer to constant data (``*k``)."""
    hint: int | None = None
    """16: divisible by 16 (a pointer: 16-byte aligned); 1: the constant 1; None: no hint."""

    @property
    def triton_type(self) -> str:
        """The type ``ASTSource``'s signature takes (the declaration without its hint)."""
        return f"{'*' if self.pointer else ''}{'k' if self.const else ''}{self.element}"

    @property
    def is_constant_one(self) -> bool:
        """Declared ``:1``: Triton compiles the parameter as the constant 1."""
        return self.hint == 1

    @property
    def is_none(self) -> bool:
        """Declared ``"none"``: the argument is None, a compile-time constant."""
        return self.element == NONE_TYPE

    @property
    def torch_dtype(self) -> str | None:
        """The torch dtype a pointer's tensor holds (None: torch has none)."""
        return TORCH_DTYPES.get(self.element)

    def __str__(self) -> str:
        return self.triton_type + (f":{self.hint}" if self.hint is not None else "")


def parse_type(text: str) -> ParamType:
    """Read one declared type (``"*fp16:16"``); :class:`SignatureError` (a ValueError) says why not."""
    if not isinstance(text, str):
        raise SignatureError(None, f"expected a type string such as {EXAMPLES}, got {type(text).__name__}")
    if text.strip() == NONE_TYPE:
        return ParamType(element=NONE_TYPE)
    if text.strip().lower() == NONE_TYPE:
        raise SignatureError(None, f"{text!r} is not a Triton type; write \"none\" (lower case) for an argument "
                                   "passed None")
    body, colon, hint_text = text.strip().partition(":")
    pointer = body.startswith("*")
    element = body[1:] if pointer else body
    const = pointer and element.startswith("k")  # no element type starts with k
    if const:
        element = element[1:]
    if element not in (ELEMENT_TYPES if pointer else SCALAR_TYPES):
        if not pointer and element in FP8_TYPES:
            why = "an fp8 scalar cannot be passed to a kernel (fp8 is a pointer element type: \"*" + element + "\")"
        elif not pointer and element.startswith("k") and element[1:] in ELEMENT_TYPES:
            why = "'k' (constant data) qualifies a pointer only: \"*" + element + "\""
        else:
            why = f"expected e.g. {EXAMPLES}"
        raise SignatureError(None, f"{text!r} is not a Triton type; {why}")
    hint: int | None = None
    if colon:
        if hint_text not in ("16", "1"):
            raise SignatureError(None, f"{text!r}: the hint after ':' must be 16 (divisible by 16) or 1 (the constant 1)")
        hint = int(hint_text)
        integer = not pointer and element in INTEGER_TYPES
        if hint == 16 and not (pointer or integer):
            raise SignatureError(None, f"{text!r}: ':16' applies to pointers and integers only")
        if hint == 1 and not integer:
            raise SignatureError(None, f"{text!r}: ':1' (the constant 1) applies to integers only")
    return ParamType(element=element, pointer=pointer, const=const, hint=hint)


def is_type(text: object) -> bool:
    """Whether ``text`` is a declared type :func:`parse_type` accepts."""
    try:
        parse_type(text)  # type: ignore[arg-type]
    except SignatureError:
        return False
    return True


DTYPE_EXAMPLE = '{ dtype = "fp16" }'


def dtype_constexpr(value: object) -> str | None:
    """The element type of a dtype constexpr (``{ dtype = "fp16" }`` → ``"fp16"``); None for any other value.
    A table that is not exactly one ``dtype`` key naming an element type is a :class:`SignatureError`."""
    if not isinstance(value, Mapping):
        return None
    if set(value) != {"dtype"}:
        raise SignatureError(None, f"a table constexpr declares a dtype and has the one key 'dtype', e.g. "
                                   f"{DTYPE_EXAMPLE}; got keys {sorted(map(str, value))}")
    name = value["dtype"]
    if not isinstance(name, str) or name.strip() not in ELEMENT_TYPES:
        raise SignatureError(None, f"dtype {name!r} is not a Triton element type; expected one of "
                                   f"{', '.join(ELEMENT_TYPES)}")
    return name.strip()


def check_constexpr_value(value: object, *, recorded: bool = False) -> None:
    """A declared constexpr value Triton can take: a scalar or a dtype table (:func:`dtype_constexpr`). A
    hand-written string ``"None"`` is refused (it would reach the kernel as a string): a None argument is declared
    under signature as ``"none"``. A ``recorded`` value is what the call passed (a recorded None is JSON null), so
    the string ``"none"`` there is the kernel's own value (Liger's ``reduction="none"``) and is kept.
    :class:`SignatureError` says why."""
    if not recorded and isinstance(value, str) and value.strip() in ("None", "none"):
        raise SignatureError(None, f"{value!r} would reach the kernel as a string; for an argument passed None, "
                                   "declare it under signature as \"none\"")
    dtype_constexpr(value)


def ast_source_args(arg_names: Sequence[str], signature: Mapping[str, str],
                    constexprs: Mapping[str, Any]) -> dict[str, Any]:
    """``ASTSource``'s ``signature``, ``constexprs`` and ``attrs`` for a kernel with parameters ``arg_names``.

    Every parameter must be in exactly one of ``signature`` (declared types) and ``constexprs`` (values).
    As Triton's AOT compiler does, a ``:16`` hint becomes ``tt.divisibility = 16`` and a ``:1`` one the
    constant 1 and a ``"none"`` one the constant None; the result lists parameters in the function's order.
    Dtype constexprs stay tables here (:func:`dtype_constexpr`; the caller makes Triton's objects). :class:`SignatureError` names the
    first parameter that is undeclared, declared twice, unknown or of a bad type.
    """
    unknown = [n for n in (*signature, *constexprs) if n not in arg_names]
    if unknown:
        raise SignatureError(unknown[0], f"the kernel has no parameter {unknown[0]!r}; "
                                         f"its parameters: {', '.join(arg_names)}")
    sig: dict[str, str] = {}
    consts: dict[str, Any] = {}
    attrs: dict[tuple[int, ...], list[list[Any]]] = {}
    for i, name in enumerate(arg_names):
        if name in constexprs:
            if name in signature:
                raise SignatureError(name, f"parameter {name!r} is declared both in signature and constexprs")
            sig[name] = "constexpr"
            consts[name] = constexprs[name]
            continue
        if name not in signature:
            raise SignatureError(name, f"parameter {name!r} is not declared")
        try:
            ty = parse_type(signature[name])
        except SignatureError as exc:
            raise SignatureError(name, str(exc)) from None
        if ty.is_constant_one or ty.is_none:
            sig[name] = "constexpr"
            consts[name] = None if ty.is_none else 1
            continue
        sig[name] = ty.triton_type
        if ty.hint == 16:
            attrs[(i,)] = [["tt.divisibility", 16]]
    return {"signature": sig, "constexprs": consts, "attrs": attrs}


__all__ = ["BOOLEAN_TYPES", "ELEMENT_TYPES", "FLOAT_TYPES", "FP8_TYPES", "HINTS", "INTEGER_TYPES", "NONE_TYPE",
           "SCALAR_TYPES", "TORCH_DTYPES", "ParamType", "SignatureError", "ast_source_args", "check_constexpr_value",
           "dtype_constexpr", "is_type", "parse_type"]

"""Variants: one kernel declaration expanded over a matrix of values into several entries.

A ``[[tool.kbuild.kernels]]`` table may carry ``variants``, a table of lists::

    signature = { X = "*{dtype}:16", Y = "*{dtype}:16", n_cols = "i32" }
    constexprs = { X_dtype = { dtype = "{dtype}" } }
    variants = { BLOCK_SIZE = [1024, 4096], dtype = ["fp16", "bf16"] }

Every combination of the lists (the cartesian product, in the order written) becomes one entry. A key of
``variants`` is either

* a **placeholder**, when ``{key}`` appears in a type under ``signature`` or in a string (or a dtype table)
  under ``constexprs``: the text is put in there (a string that is exactly ``"{key}"`` takes the value
  itself, so an integer stays an integer); or
* a **constexpr**, otherwise: the entry declares ``constexprs.key = value``.

An entry's name is C-safe and readable, ``rms_norm_fwd_BLOCK_SIZE_1024_dtype_bf16``; its label
(:attr:`kbuild.declarations.kernel.KernelSettings.label`) is ``rms_norm_fwd[BLOCK_SIZE=1024,dtype=bf16]``, and the
CLI takes either. Errors are :class:`VariantError` with the key below the kernel's table (``variants.dtype[1]``,
``signature.X``); :mod:`kbuild.settings.sources` adds the file and the table. This is the one place variants are
expanded; it works on a declaration's parts (its name, signature, constexprs and variants), so that
:mod:`kbuild.declarations.kernel` imports it and not the other way round, and imports nothing of Triton.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Most entries one declaration may expand to.
MAX_VARIANTS = 1024

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class VariantError(ValueError):
    """A ``variants`` declaration that is not valid: ``key`` (below the kernel's table) and why."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.detail = message
        super().__init__(f"{key}: {message}")


@dataclass(frozen=True)
class Variant:
    """One combination of a declaration's ``variants``: the entry it becomes."""

    name: str
    """The entry's C-safe name (:func:`entry_name`)."""
    values: dict[str, Any]
    """The variant's value of each key of ``variants``, in the order written."""
    signature: dict[str, Any]
    """The declaration's ``signature`` with the placeholders filled in."""
    constexprs: dict[str, Any]
    """The declaration's ``constexprs`` with the placeholders filled in and the constexpr variants added."""


def _texts(signature: Mapping[str, Any], constexprs: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key below the table, text) of every string a placeholder may appear in."""
    out = [(f"signature.{n}", t) for n, t in signature.items() if isinstance(t, str)]
    for n, v in constexprs.items():
        if isinstance(v, str):
            out.append((f"constexprs.{n}", v))
        elif isinstance(v, Mapping) and isinstance(v.get("dtype"), str):
            out.append((f"constexprs.{n}.dtype", v["dtype"]))
    return out


def placeholders(signature: Mapping[str, Any], constexprs: Mapping[str, Any]) -> dict[str, str]:
    """Each placeholder name ``{name}`` used in a declaration's ``signature`` and ``constexprs``, with the first key
    it appears under."""
    found: dict[str, str] = {}
    for key, text in _texts(signature, constexprs):
        for m in _PLACEHOLDER.finditer(text):
            found.setdefault(m.group(1), key)
    return found


def value_text(value: Any) -> str:
    """A variant value as the label shows it (a dtype table: its dtype)."""
    if isinstance(value, Mapping) and "dtype" in value:
        return str(value["dtype"])
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def c_safe(text: str) -> str:
    """``text`` with every character that is not a letter, digit or ``_`` made ``_`` (``-`` → ``m``, ``.`` →
    ``p``, so that ``-0.5`` is ``m0p5``)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", text.replace("-", "m").replace(".", "p"))


def entry_name(base: str, values: Mapping[str, Any]) -> str:
    """The C-safe name of one variant: ``base_KEY_value_KEY2_value2`` (runs of ``_`` made one: C++ reserves
    ``__``)."""
    return re.sub("_{2,}", "_", "_".join([base, *(f"{k}_{c_safe(value_text(v))}" for k, v in values.items())]))


def label(base: str, values: Mapping[str, Any]) -> str:
    """The readable name of one variant: ``base[KEY=value,KEY2=value2]``."""
    return f"{base}[{','.join(f'{k}={value_text(v)}' for k, v in values.items())}]"


def _substitute(text: str, values: Mapping[str, Any]) -> Any:
    whole = _PLACEHOLDER.fullmatch(text)
    if whole and whole.group(1) in values:
        value = values[whole.group(1)]
        return value["dtype"] if isinstance(value, Mapping) and "dtype" in value else value
    return _PLACEHOLDER.sub(lambda m: value_text(values[m.group(1)]) if m.group(1) in values else m.group(0), text)


def expand(base: str, signature: Mapping[str, Any], constexprs: Mapping[str, Any],
           variants: Mapping[str, Any]) -> list[Variant]:
    """The combinations the declaration ``base`` (its ``signature``, ``constexprs`` and ``variants``) declares, one
    :class:`Variant` each (see the module docstring); none when it has no ``variants``. :class:`VariantError`
    naming the key: an empty or non-list value, a placeholder no variant gives, a constexpr variant also
    declared under ``constexprs`` or ``signature``, too many combinations."""
    used = placeholders(signature, constexprs)
    if not variants:
        if used:
            name, key = next(iter(used.items()))
            raise VariantError(key, f"placeholder {{{name}}} but the kernel has no variants; declare "
                                    f"variants = {{ {name} = [...] }}")
        return []
    lists: list[list[Any]] = []
    total = 1
    for name, given in variants.items():
        values: Any = given
        if not name.isidentifier():
            raise VariantError(f"variants.{name}", "not a name (an identifier)")
        if not isinstance(values, list) or not values:
            raise VariantError(f"variants.{name}", "expected a non-empty list of values")
        if name not in used:
            if name in constexprs:
                raise VariantError(f"variants.{name}", f"{name!r} is declared under constexprs too; a variant sets "
                                                       "it (or use it as a placeholder, \"{" + name + "}\")")
            if name in signature:
                raise VariantError(f"variants.{name}", f"{name!r} is a runtime parameter (under signature); "
                                                       "variants set constexprs or fill {placeholders}")
        seen: list[Any] = []
        for i, v in enumerate(values):
            if isinstance(v, (dict, list)) and (name in used or not isinstance(v, Mapping)):
                raise VariantError(f"variants.{name}[{i}]", "a placeholder takes a string or a number"
                                   if name in used else "expected a constexpr value or a dtype table")
            if any(type(s) is type(v) and s == v for s in seen):
                raise VariantError(f"variants.{name}[{i}]", f"{v!r} is listed twice")
            seen.append(v)
        lists.append(values)
        total *= len(values)
    if total > MAX_VARIANTS:
        raise VariantError("variants", f"{total} combinations (the product of the lists); at most {MAX_VARIANTS}")
    missing = sorted(set(used) - set(variants))
    if missing:
        raise VariantError(used[missing[0]], f"placeholder {{{missing[0]}}} is not a key of variants "
                                             f"({', '.join(variants)})")
    names = list(variants)
    out = []
    for combo in itertools.product(*lists):
        point: dict[str, Any] = dict(zip(names, combo))
        sig = {n: _substitute(t, point) if isinstance(t, str) else t for n, t in signature.items()}
        cx: dict[str, Any] = {}
        for n, v in constexprs.items():
            if isinstance(v, str):
                cx[n] = _substitute(v, point)
            elif isinstance(v, Mapping) and isinstance(v.get("dtype"), str):
                cx[n] = {**v, "dtype": _substitute(v["dtype"], point)}
            else:
                cx[n] = v
        cx.update({n: v for n, v in point.items() if n not in used})
        out.append(Variant(entry_name(base, point), point, sig, cx))
    return out


__all__ = ["MAX_VARIANTS", "Variant", "VariantError", "c_safe", "entry_name", "expand", "label", "placeholders",
           "value_text"]

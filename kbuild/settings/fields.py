"""Typed fields: how a value read from TOML, a variable, a config setting or a flag becomes a field of the
settings model, checked by the field's rules.

A field of the model is made by :func:`setting`, whose metadata says:

* ``env``: the ``KBUILD_*`` variable that overrides it (environment beats pyproject);
* ``key``: whether the value changes the shipped machine code, so that :mod:`kbuild.key` collects those fields
  itself (:func:`key_fields`) instead of keeping its own list;
* ``check``: a rule beyond the type (:data:`Check`), run where the value is read, so that its error names that place;
* ``schema``: keywords the JSON schema adds (:mod:`kbuild.schema`).

Fields made with :func:`dataclasses.field` may also carry ``env_only`` (why the field comes from the environment
alone: a secret, a path on this machine, a switch of one process), ``secret`` and ``internal`` (resolved context,
never read from TOML).

:class:`Converter` turns a TOML value into a field's type, and :func:`from_string` a string (a variable, a config
setting) first into the TOML-like value: a wrong type or an unknown key raises :class:`kbuild.errors.ConfigError`
naming the file (or variable, or config setting, or flag) and the dotted key, and suggests the closest valid key.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from kbuild.errors import ConfigError, dotted_key

from .environ import bool_message, parse_bool

#: ``check(value, converter, path)``: a field's rule beyond its type, run on the converted value where it was read
#: (the file, the variable, the flag); it raises ``converter.error(path, ...)``.
Check = Callable[[Any, "Converter", str], None]


def setting(default: Any = dataclasses.MISSING, *, env: str | None = None, key: bool = False,
            default_factory: Any = dataclasses.MISSING, check: Check | None = None,
            schema: Mapping[str, Any] | None = None) -> Any:
    """A field of the settings model: its default (or ``default_factory``), its ``env`` variable, whether it is in
    the ``key``, its ``check`` (:data:`Check`) and the JSON-schema keywords of ``schema``."""
    meta: dict[str, Any] = {"env": env, "key": key, "check": check, "schema": dict(schema or {})}
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


class Converter:
    """Values read from TOML (or from a string, :func:`from_string`) into the model's typed fields, each checked
    against its type: a wrong type is a :class:`ConfigError` naming ``where`` (the file, the environment, the
    command line) and the dotted key, and an unknown key suggests the closest valid one."""

    def __init__(self, where: str) -> None:
        self.where = where

    def error(self, path: str, message: str) -> ConfigError:
        """The error for ``message`` about the dotted key ``path`` read from :attr:`where`."""
        return ConfigError(self.where, path, message)

    def convert(self, value: Any, tp: Any, path: str) -> Any:
        """``value`` (as TOML gives it) as the type ``tp`` (a scalar, ``Path``, ``Literal``, a union, a list, a
        dict or a settings dataclass), read at ``path``."""
        origin = get_origin(tp)
        if isinstance(value, float) and not math.isfinite(value):
            # TOML has nan/inf literals and float() reads "nan" and "inf": no setting means either.
            raise self.error(path, f"non-finite number {value!r}; expected a finite number")
        if tp is Any:
            return value
        if origin in (Union, types.UnionType):
            options = get_args(tp)
            if value is None and type(None) in options:
                return None
            errors: list[ConfigError] = []
            for opt in options:
                if opt is type(None):
                    continue
                try:
                    return self.convert(value, opt, path)
                except ConfigError as exc:
                    errors.append(exc)
            if len(errors) == 1:  # ``X | None``: X's own message says more
                raise errors[0]
            raise self.error(path, f"expected {type_name(tp)}, got {value_name(value)}")
        if origin is Literal:
            allowed = get_args(tp)
            if value not in allowed:
                hint = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
                extra = f"; did you mean {hint[0]!r}?" if hint else ""
                raise self.error(path, f"expected one of {', '.join(repr(a) for a in allowed)}, got {value!r}{extra}")
            return value
        if origin is list:
            (item_tp,) = get_args(tp)
            if not isinstance(value, list):
                raise self.error(path, f"expected an array, got {value_name(value)}")
            return [self.convert(v, item_tp, f"{path}[{i}]") for i, v in enumerate(value)]
        if origin is dict:
            _, val_tp = get_args(tp)
            if not isinstance(value, dict):
                raise self.error(path, f"expected a table, got {value_name(value)}")
            return {str(k): self.convert(v, val_tp, dotted_key(path, k)) for k, v in value.items()}
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, dict):
                raise self.error(path, f"expected a table, got {value_name(value)}")
            return self.dataclass(tp, value, path)
        if tp is bool:
            if not isinstance(value, bool):
                raise self.error(path, f"expected true or false, got {value_name(value)}")
            return value
        if tp is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.error(path, f"expected an integer, got {value_name(value)}")
            return value
        if tp is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise self.error(path, f"expected a number, got {value_name(value)}")
            return float(value)
        if tp is str:
            if not isinstance(value, str):
                raise self.error(path, f"expected a string, got {value_name(value)}")
            return value
        if tp is Path:
            if not isinstance(value, str):
                raise self.error(path, f"expected a path string, got {value_name(value)}")
            if not value.strip():  # Path("") is "." — the project directory; never by accident
                raise self.error(path, f"empty path {value!r}; leave the key out for its default, or write \".\" "
                                       "for the project directory")
            if "\0" in value:
                raise self.error(path, "the path contains a NUL character")
            try:
                return Path(value).expanduser()
            except RuntimeError:  # "~name" for a user this machine does not have
                raise self.error(path, f"cannot expand {value.split('/', 1)[0]!r} in {value!r}: "
                                       "no such user's home directory here") from None
        raise TypeError(f"settings model uses an unsupported type {tp!r}")  # pragma: no cover

    def dataclass(self, cls: Any, table: dict[str, Any], path: str) -> Any:
        """The settings dataclass ``cls`` from ``table`` (keys spelled with dashes or underscores), each field
        converted and checked (its ``check``); an ``env_only`` field, an unknown key or a missing required one is
        an error."""
        hints = type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
        kwargs: dict[str, Any] = {}
        for raw_key, value in table.items():
            name = str(raw_key).replace("-", "_")
            sub = dotted_key(path, raw_key)
            if name in fields and fields[name].metadata.get("env_only"):
                raise self.error(sub, f"set {fields[name].metadata['env']} in the environment; "
                                      f"{fields[name].metadata['env_only']}")
            if name not in fields:
                hint = difflib.get_close_matches(name, list(fields), n=1)
                extra = f"; did you mean {hint[0]!r}?" if hint else f"; valid keys: {', '.join(fields)}"
                raise self.error(sub, f"unknown key{extra}")
            kwargs[name] = self.convert(value, hints[name], sub)
            check = fields[name].metadata.get("check")
            if check is not None:
                check(kwargs[name], self, sub)
        for f in fields.values():
            if f.name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise self.error(f"{path}.{f.name}" if path else f.name, "required key is missing")
        return cls(**kwargs)


_HINTS: dict[Any, dict[str, Any]] = {}


def type_hints(cls: Any) -> dict[str, Any]:
    """The resolved type of each field of the dataclass ``cls`` (computed once per class)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def type_name(tp: Any) -> str:
    """A type as an error message names it (``an integer or a string``)."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(type_name(a) for a in get_args(tp) if a is not type(None))
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", Path: "a path"}.get(tp, str(tp))


def value_name(value: Any) -> str:
    """A value as an error message names it (``boolean True``, ``a table``, ``int 3``)."""
    if isinstance(value, bool):
        return f"boolean {value}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return f"{type(value).__name__} {value!r}"


def from_string(raw: str, tp: Any, conv: Converter, key: str) -> Any:
    """A value given as a string (a variable, a config setting) converted to the field's type ``tp``."""
    if tp is bool:
        flag = parse_bool(raw)
        if flag is None:
            raise conv.error(key, bool_message(raw))
        return flag
    words = bool_or_words(tp)
    if words:  # a boolean or some words (``KBUILD_RUNTIME``: the boolean words, or ``strict``)
        flag = parse_bool(raw)
        if flag is not None:
            return flag
        word = raw.strip().lower()
        if word not in words:
            raise conv.error(key, bool_message(raw, also=words))
        return word
    return conv.convert(_parse_env(raw, tp), tp, key)


def bool_or_words(tp: Any) -> tuple[str, ...]:
    """The words of a field typed "a boolean or some words" (``bool | Literal["strict"]``), else ``()``."""
    args = get_args(tp) if get_origin(tp) in (Union, types.UnionType) else ()
    if bool not in args:
        return ()
    return tuple(str(w) for a in args if get_origin(a) is Literal for w in get_args(a))


def _parse_env(raw: str, tp: Any) -> Any:
    """Turn an environment string into the TOML-like value the converter expects."""
    origin = get_origin(tp)
    args = [a for a in get_args(tp) if a is not type(None)]
    if origin in (Union, types.UnionType) and len(args) == 1:
        tp, origin = args[0], get_origin(args[0])
    if origin is list:
        return [p.strip() for p in raw.split(",") if p.strip()]
    if tp is int:
        try:
            return int(raw)
        except ValueError:
            return raw
    if tp is float:
        try:
            return float(raw)
        except ValueError:
            return raw
    if tp is bool:
        flag = parse_bool(raw)
        return raw if flag is None else flag
    return raw


def key_fields(cls: type) -> list[str]:
    """Names of the fields of ``cls`` marked as changing the machine code."""
    return [f.name for f in dataclasses.fields(cls) if f.metadata.get("key")]


__all__ = ["Check", "Converter", "bool_or_words", "from_string", "key_fields", "setting", "type_hints", "type_name", "value_name"]

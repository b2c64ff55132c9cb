"""Reading JSON that kbuild did not write itself: the one safe loader for untrusted files and servers.

``json.loads`` trusts its input in ways that hurt on a hostile file:

* it recurses once per nesting level, so ``[[[[...]]]]`` 100,000 deep raises :class:`RecursionError`,
  which is not a :class:`ValueError` and escapes every ``except ValueError``; a document a few hundred
  levels deep parses, and then overflows the next recursive consumer (``json.dumps``, a digest);
* it reads ``NaN``, ``Infinity`` and ``1e400`` (which becomes ``inf``), none of them JSON, and
  :func:`kbuild.canonical.canonical_json` refuses them later with a :class:`ValueError`;
* it returns lone surrogates (``"\\ud800"``), which fail later when the string is encoded as UTF-8;
* it reads any size.

:func:`load_json` checks all of these and turns every failure into one error class of the caller's
choice (a :class:`kbuild.errors.KBuildError` subclass, so the CLI prints one line and exits with its
code), with the message ``<where>: <what is wrong>``. :func:`read_json_file` adds a bounded file read (:func:`kbuild.fsutil.read_bounded`).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
from collections.abc import Callable
from typing import Any

from kbuild.errors import UsageError

#: Largest document read by default (16 MiB: manifests, records and indexes are a few kB).
DEFAULT_MAX_BYTES = 16 * 2**20
#: Deepest nesting accepted by default; kbuild's own documents nest fewer than ten levels.
DEFAULT_MAX_DEPTH = 64

ErrorFactory = Callable[[str], Exception]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def load_json(data: bytes | bytearray | str, *, where: str, max_bytes: int = DEFAULT_MAX_BYTES,
              max_depth: int = DEFAULT_MAX_DEPTH, error: ErrorFactory = UsageError) -> Any:
    """The JSON value in ``data``; ``error("<where>: ...")`` when it is not valid, too large, nested deeper
    than ``max_depth``, holds a non-finite number or a string that is not valid Unicode."""
    if len(data) > max_bytes:  # bytes, or characters for text
        raise error(f"{where}: {len(data):,} bytes of JSON, over the {max_bytes:,}-byte limit")
    try:
        return parse_json(data, max_depth=max_depth)
    except ValueError as exc:
        raise error(f"{where}: not valid JSON ({exc})") from None


def parse_json(data: bytes | bytearray | str, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """The parser under :func:`load_json`, for callers that cap the size and word the error themselves (the
    store's records, listings, bundles): a :class:`ValueError` that says only what is wrong."""
    try:
        value = json.loads(data, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError(f"nested deeper than {max_depth} levels") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, too many integer digits, NaN
        raise ValueError(str(exc)) from None
    problem = _check(value, max_depth, strings=_may_hold_surrogates(data))
    if problem is not None:
        raise ValueError(problem)
    return value


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _may_hold_surrogates(data: bytes | bytearray | str) -> bool:
    """Whether a string of the parsed document may be a lone surrogate, not valid Unicode: bytes decode as strict
    UTF-8 (which has no surrogates), so only a ``\\uD800``-``\\uDFFF`` escape makes one; text may hold one as it is.
    A scan at C speed, so that a large document (a wheel's index) is not walked string by string."""
    if isinstance(data, str):  # text may hold one as it is, or escaped
        return not data.isascii() or _SURROGATE_ESCAPE.search(data.encode("ascii")) is not None
    return _SURROGATE_ESCAPE.search(data) is not None


def read_json_file(path: str | os.PathLike[str], *, where: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
                   max_depth: int = DEFAULT_MAX_DEPTH, error: ErrorFactory = UsageError) -> Any:
    """:func:`load_json` of a file read with :func:`kbuild.fsutil.read_bounded` (a regular file of at most
    ``max_bytes``); a file that cannot be read that way is ``error`` too."""
    from kbuild.fsutil import read_bounded

    name = where if where is not None else str(path)
    try:
        data = read_bounded(path, max_bytes=max_bytes)
    except OSError as exc:
        if exc.errno == errno.EFBIG:
            raise error(f"{name}: over the {max_bytes:,}-byte limit for a JSON document ({exc.strerror})") from None
        raise error(f"{name}: cannot read: {exc.strerror or exc}") from None
    return load_json(data, where=name, max_bytes=max_bytes, max_depth=max_depth, error=error)


def _check(value: Any, max_depth: int, *, strings: bool = True) -> str | None:
    """The first problem in a parsed document, without recursion (the document may be deep). ``strings``: whether
    strings must be checked for lone surrogates (:func:`_may_hold_surrogates`); only containers are pushed on the
    stack, scalars are checked where they sit."""
    # Each stack entry: (container, depth, where) with ``where`` = (parent's where, key or index), built into
    # a readable path only for the message.
    if not isinstance(value, (dict, list)):
        return _scalar_problem(value, None, strings)
    stack: list[tuple[Any, int, Any]] = [(value, 0, None)]
    while stack:
        item, depth, at = stack.pop()
        if depth >= max_depth:
            return f"nested deeper than {max_depth} levels at {_path(at)}"
        pairs = item.items() if isinstance(item, dict) else enumerate(item)
        for k, v in pairs:
            if strings and isinstance(k, str) and not _is_unicode(k):
                return f"a key at {_path(at)} is not valid Unicode"
            if isinstance(v, (dict, list)):
                stack.append((v, depth + 1, (at, k)))
            elif isinstance(v, (float, str)):
                problem = _scalar_problem(v, (at, k), strings)
                if problem is not None:
                    return problem
    return None


def _scalar_problem(item: Any, at: Any, strings: bool) -> str | None:
    if isinstance(item, float) and not math.isfinite(item):
        return f"non-finite number at {_path(at)}"
    if strings and isinstance(item, str) and not _is_unicode(item):
        return f"the string at {_path(at)} is not valid Unicode"
    return None


def _path(at: Any) -> str:
    """``kernels[0].speedup`` for a stack entry's ``where``; keys that are not identifiers are quoted (ASCII)."""
    parts: list[str] = []
    while at is not None:
        at, key = at
        if isinstance(key, int):
            parts.append(f"[{key}]")
        elif key.isidentifier() and key.isascii():
            parts.append(f".{key}")
        else:
            parts.append(f"[{json.dumps(key)}]")
    text = "".join(reversed(parts)).removeprefix(".")
    return text or "the top level"


def _is_unicode(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_DEPTH", "load_json", "parse_json", "read_json_file"]

"""``kbuild.lock``: pins each kernel and target to one artefact (key and cubin sha256).

The file is TOML with one table per kernel and target, sorted, in one fixed format, so that
writing the same pins twice gives the same bytes and diffs stay small::

    # kbuild.lock: written by `kbuild lock`. Builds with --locked use exactly these artefacts.
    version = 1

    [kernels.add_kernel.sm_90]
    key = "3f2a..."
    cubin_sha256 = "9c1e..."

The pipeline computes the expected ``(kernel, target, key)`` triples (:mod:`kbuild.key`); this
module writes them with the store's digests (:func:`update_lock`), reads them back
(:func:`read_lock`), and checks a ``--locked`` build (:func:`check_lock`), which fails with one
error that lists every missing or stale entry.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from kbuild.errors import LockFileError, LockMismatchError
from kbuild.fsutil import read_bounded, write_atomic

from .record import Artefact, is_digest
from .store import Store

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

LOCK_FILE = "kbuild.lock"
LOCK_VERSION = 1
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_HEADER = ("# kbuild.lock: written by `kbuild lock`; do not edit by hand.\n"
           "# Pins each kernel and target to one artefact. Builds with --locked use exactly these.\n")


class LockKey(NamedTuple):
    """What the project expects: a kernel, a target, and the key computed for them now."""

    kernel: str
    target: str
    key: str


@dataclass(frozen=True, order=True)
class LockEntry:
    """One pin: ``kernel`` × ``target`` → artefact ``key`` whose cubin has ``cubin_sha256``."""

    kernel: str
    target: str
    key: str
    cubin_sha256: str

    def as_dict(self) -> dict[str, str]:
        return {"kernel": self.kernel, "target": self.target, "key": self.key, "cubin_sha256": self.cubin_sha256}


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _toml_str(value: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters (incl. DEL) escaped."""
    out = []
    for ch in value:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else _toml_str(name)  # not match: "$" also matches before a final "\n"


def format_lock(entries: Iterable[LockEntry]) -> str:
    """The lock file text for ``entries`` (sorted by kernel, then target)."""
    ordered = sorted(entries)
    seen: set[tuple[str, str]] = set()
    for e in ordered:
        if (e.kernel, e.target) in seen:
            raise ValueError(f"two lock entries for kernel {e.kernel!r} and target {e.target!r}")
        seen.add((e.kernel, e.target))
        if not is_digest(e.key) or not is_digest(e.cubin_sha256):
            raise ValueError(f"lock entry {e.kernel}/{e.target}: key and cubin_sha256 must be sha256 hex digests")
    parts = [_HEADER, f"version = {LOCK_VERSION}\n"]
    for e in ordered:
        parts.append(f"\n[kernels.{_toml_key(e.kernel)}.{_toml_key(e.target)}]\n"
                     f"key = {_toml_str(e.key)}\ncubin_sha256 = {_toml_str(e.cubin_sha256)}\n")
    return "".join(parts)


def write_lock(path: str | os.PathLike[str], entries: Iterable[LockEntry]) -> str:
    """Write the lock file atomically (:func:`kbuild.fsutil.write_atomic`); returns its text."""
    text = format_lock(entries)
    write_atomic(path, text)
    return text


def parse_lock(text: str, where: str = LOCK_FILE) -> list[LockEntry]:
    """Entries of a lock file's text; :class:`LockFileError` naming the file and entry otherwise."""
    try:
        data = tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, and an integer of more than 4300 digits
        raise LockFileError(f"{where}: not valid TOML ({exc}); regenerate it with `kbuild lock`") from None
    except RecursionError:  # tomllib recurses once per level of nested arrays and inline tables
        raise LockFileError(f"{where}: not valid TOML (arrays or inline tables nested too deeply); regenerate it "
                            "with `kbuild lock`") from None
    version = data.get("version")
    if version != LOCK_VERSION:
        raise LockFileError(f"{where}: version: expected {LOCK_VERSION}, got {version!r}; regenerate it with `kbuild lock`")
    unknown = sorted(set(data) - {"version", "kernels"})
    if unknown:
        raise LockFileError(f"{where}: {_name(unknown[0])}: unknown key (expected version and [kernels.*])")
    kernels = data.get("kernels", {})
    if not isinstance(kernels, Mapping):
        raise LockFileError(f"{where}: kernels: expected a table")
    entries: list[LockEntry] = []
    for kernel, targets in kernels.items():
        if not isinstance(targets, Mapping):
            raise LockFileError(f"{where}: {_name('kernels', kernel)}: expected a table of targets")
        for target, pin in targets.items():
            name = _name("kernels", kernel, target)
            if not isinstance(pin, Mapping):
                raise LockFileError(f"{where}: {name}: expected a table with key and cubin_sha256")
            extra = sorted(set(pin) - {"key", "cubin_sha256"})
            if extra:
                raise LockFileError(f"{where}: {name}.{_name(extra[0])}: unknown key (expected key and cubin_sha256)")
            for field_name in ("key", "cubin_sha256"):
                value: Any = pin.get(field_name)
                if not isinstance(value, str) or not is_digest(value):
                    raise LockFileError(f"{where}: {name}.{field_name}: expected a sha256 (64 lowercase hex digits), "
                                        f"got {value!r}")
            entries.append(LockEntry(str(kernel), str(target), pin["key"], pin["cubin_sha256"]))
    return sorted(entries)


def _name(*keys: str) -> str:
    """A dotted TOML key for messages: bare keys as they are, others quoted with every non-printable character
    escaped, so that a message about a hostile file stays one line."""
    out = []
    for key in keys:
        if re.fullmatch(r"[A-Za-z0-9_-]+", key):
            out.append(key)
        else:
            quoted = json.dumps(key, ensure_ascii=False)
            out.append("".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                               for c in quoted))
    return ".".join(out)


#: Largest lock file read (a pin is about 300 bytes).
MAX_LOCK_BYTES = 16 * 2**20


def read_lock(path: str | os.PathLike[str]) -> list[LockEntry]:
    """Entries of the lock file at ``path`` (sorted), read with :func:`kbuild.fsutil.read_bounded` (a regular
    file of at most :data:`MAX_LOCK_BYTES`)."""
    path = Path(path)
    try:
        text = read_bounded(path, max_bytes=MAX_LOCK_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise LockFileError(f"{path}: no such lock file; run `kbuild lock` to create it") from None
    except OSError as exc:
        raise LockFileError(f"{path}: cannot read the lock file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise LockFileError(f"{path}: cannot read the lock file: {exc}") from None
    return parse_lock(text, str(path))


def _short(digest: str) -> str:
    return digest[:16] + "…"


def _expected(expected: Iterable[tuple[str, str, str]]) -> list[LockKey]:
    out = [LockKey(*e) for e in expected]
    seen: set[tuple[str, str]] = set()
    for e in out:
        if (e.kernel, e.target) in seen:
            raise ValueError(f"kernel {e.kernel!r} and target {e.target!r} expected twice")
        seen.add((e.kernel, e.target))
    return out


def lock_entries(expected: Iterable[tuple[str, str, str]], store: Store, *,
                 where: str = LOCK_FILE) -> list[LockEntry]:
    """Pins for ``expected`` (kernel, target, key) from the store's verified artefacts.

    Raises :class:`LockMismatchError` listing every key the store does not hold.
    """
    entries: list[LockEntry] = []
    problems: list[str] = []
    for e in sorted(_expected(expected)):
        art = store.get(e.key)
        if art is None:
            problems.append(f"{e.kernel} / {e.target}: key {_short(e.key)} is in no store tier "
                            "(build or prewarm it first)")
            continue
        entries.append(LockEntry(e.kernel, e.target, e.key, art.cubin_sha256))
    if problems:
        raise LockMismatchError(where, problems)
    return entries


@dataclass(frozen=True)
class LockUpdate:
    """What :func:`update_lock` changed, by ``kernel/target``."""

    added: list[str]
    changed: list[str]
    removed: list[str]
    entries: list[LockEntry]

    def as_dict(self) -> dict[str, Any]:
        return {"added": self.added, "changed": self.changed, "removed": self.removed,
                "entries": [e.as_dict() for e in self.entries]}


def update_lock(path: str | os.PathLike[str], expected: Iterable[tuple[str, str, str]], store: Store) -> LockUpdate:
    """``kbuild lock``: write the pins of ``expected`` from the store, replacing the file's old pins.

    Nothing is written when any artefact is missing (:class:`LockMismatchError` lists them all).
    An existing lock file that does not parse is replaced (it is regenerated from the store).
    """
    path = Path(path)
    entries = lock_entries(expected, store, where=str(path))
    old: dict[tuple[str, str], LockEntry] = {}
    if path.exists():
        with contextlib.suppress(LockFileError):
            old = {(e.kernel, e.target): e for e in read_lock(path)}
    new = {(e.kernel, e.target): e for e in entries}
    added = sorted(f"{k}/{t}" for (k, t) in new.keys() - old.keys())
    removed = sorted(f"{k}/{t}" for (k, t) in old.keys() - new.keys())
    changed = sorted(f"{k}/{t}" for (k, t) in new.keys() & old.keys() if new[(k, t)] != old[(k, t)])
    write_lock(path, entries)
    return LockUpdate(added, changed, removed, sorted(entries))


def check_lock(expected: Iterable[tuple[str, str, str]], store: Store, *,
               lock: str | os.PathLike[str] | Iterable[LockEntry] = LOCK_FILE,
               where: str | None = None) -> dict[tuple[str, str], Artefact]:
    """``--locked``: the pinned, verified artefact of every expected (kernel, target, key).

    ``lock`` is the lock file's path or its entries (then ``where`` names the file in the error). Raises :class:`LockMismatchError` listing
    every problem at once: a kernel/target missing from the lock file, a pin whose key is stale
    (the project now computes another key), a pinned artefact no store tier holds, a stored
    cubin whose sha256 differs from the pin, and pins for kernels/targets the project no longer has.
    """
    if isinstance(lock, (str, os.PathLike)):
        where = where or str(lock)
        pins = read_lock(lock)
    else:
        where = where or LOCK_FILE
        pins = sorted(lock)
    pinned = {(p.kernel, p.target): p for p in pins}
    wanted = _expected(expected)
    problems: list[str] = []
    result: dict[tuple[str, str], Artefact] = {}
    for e in sorted(wanted):
        pin = pinned.get((e.kernel, e.target))
        if pin is None:
            problems.append(f"{e.kernel} / {e.target}: missing from the lock file")
            continue
        if pin.key != e.key:
            problems.append(f"{e.kernel} / {e.target}: stale: the lock pins key {_short(pin.key)} but the project now "
                            f"gives key {_short(e.key)} (sources, options or toolchain changed)")
            continue
        art = store.get(pin.key)
        if art is None:
            problems.append(f"{e.kernel} / {e.target}: pinned key {_short(pin.key)} is in no store tier "
                            "(import a bundle or configure the remote that holds it)")
            continue
        if art.cubin_sha256 != pin.cubin_sha256:
            problems.append(f"{e.kernel} / {e.target}: stale: the store's cubin for key {_short(pin.key)} has sha256 "
                            f"{_short(art.cubin_sha256)}, the lock pins {_short(pin.cubin_sha256)}")
            continue
        result[(e.kernel, e.target)] = art
    wanted_pairs = {(e.kernel, e.target) for e in wanted}
    for (kernel, target) in sorted(pinned.keys() - wanted_pairs):
        problems.append(f"{kernel} / {target}: stale: pinned in the lock file but no longer part of the project")
    if problems:
        raise LockMismatchError(where, problems)
    return result

"""The package-data index: ``<package>/_kbuild/index.json`` next to the shipped ``<sha256>.cubin`` files.

One entry per kernel × target, keyed by the kernel's **baseline** key: the key the run time can
recompute from what Triton's JIT compiled (:mod:`kbuild.runtime.keys`). The tuned artefact's own
key also covers the tuner's settings, which the run time cannot know; it is kept as
``artefact_key``. Each entry holds what identifies the compiled kernel (source hash,
``module:qualname``, declared signature and constexprs, options, target, Triton and ptxas
versions, the full key components), the facts checked against Triton's compiled kernel before
its cubin is replaced (``checks``: kernel symbol, shared memory, warps, CTAs, scratch), and the
cubin's file name, sha256 and size, the tuned flag and the measured speedup, ``state`` (``tuned``,
``baseline-kept``, ``baseline``, or ``default-of-tuned``: the declared default's compile shipped in place of a
tuned configuration the caller cannot reach) and, where there is something to say, a ``note``.

An ``@triton.autotune`` kernel whose tuned configuration is not the declared default has its entry keyed by
that configuration's baseline key (what the call the answered autotuner launches recomputes), with the
``autotune`` key that makes the autotuner choose it (:func:`kbuild.build.package_data.select_shipped`).

Version 2 (issue 16, zero-JIT loading: :mod:`kbuild.runtime.loader`) adds, per entry, what Triton
needs to launch the shipped cubin without compiling anything:

* ``triton_metadata``: Triton's own metadata of the compiled kernel, as Triton writes it into its
  cache (``json.dumps(metadata, default=vars)``: name, shared, options, target, scratch sizes, ...);
  absent when the artefact did not record it (then only the post-compile substitution applies);
* ``config``: the launch configuration the cubin was compiled for, in ``triton.Config`` terms
  (``kwargs`` = the constexprs, ``num_warps``, ``num_stages``, ``num_ctas``, ``maxnreg``, and ``ptx_options``
  only when the cubin was compiled with extra ptxas flags: no ``triton.Config`` carries them, so such an entry
  answers only a call whose options hold the same flags, never an autotuner);
* ``autotune`` (optional): ``{"key": [...]}``, the ``@triton.autotune`` key (the values of the
  autotuner's ``key`` arguments, then ``str(arg.dtype)`` of each argument with a dtype, in argument
  order, as ``Autotuner.run`` builds it) for which this entry's config is the shipped choice.

Version 1 indexes are still read: their entries lack these fields, so their kernels fall back to
the post-compile substitution of :mod:`kbuild.runtime.hook` (Triton compiles, the cubin is swapped).

The file is canonical: sorted keys, no timestamps, no paths, so that the same builds always give
the same bytes. The build writes it (:mod:`kbuild.build.package_data` makes each entry from a build); this module
owns its format and reads it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbuild.errors import UsageError
from kbuild.key import KEY_SCHEMA, digest

INDEX_FORMAT = "kbuild-runtime-index"
INDEX_VERSION = 2
#: Index versions this kbuild reads (version 1: no zero-JIT fields).
READ_VERSIONS = (1, 2)
#: Folder inside the package that holds the index and the cubins (and the generated ``__init__.py``).
DATA_DIR = "_kbuild"
#: The largest index the run time, ``kbuild inspect`` and the build read (a bounded read: a FIFO or a device is
#: refused). An entry is about 4.5 KB (its key components, Triton's metadata): Liger-Kernel's 25 recorded kernels
#: for one target are 1,488 entries, 6.6 MB, and an index passes the 16 MiB every other JSON document of kbuild
#: stays under (:data:`kbuild.jsonio.DEFAULT_MAX_BYTES`) at about 3,700 entries (fla-core's tests launch about
#: 2,000 specialisations per target).
MAX_INDEX_BYTES = 512 * 2**20
INDEX_FILE = "index.json"

#: Compiled-kernel metadata fields that must agree between the artefact and Triton's kernel.
CHECK_FIELDS = ("name", "shared", "num_warps", "num_ctas", "global_scratch_size")

_REQUIRED = ("function", "source_hash", "signature", "constexprs", "options", "target", "triton_version",
             "ptxas_version", "checks", "cubin", "cubin_sha256", "key_components", "tuned")


class IndexFormatError(UsageError):
    """An index that is not a kbuild runtime index, or is inconsistent."""


def entry_config(constexprs: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """The ``config`` field: a compiled kernel's launch configuration in ``triton.Config`` terms."""
    maxnreg = options.get("maxnreg")
    out = {"kwargs": dict(constexprs), "num_warps": int(options.get("num_warps", 4)),
           "num_stages": int(options.get("num_stages", 3)), "num_ctas": int(options.get("num_ctas", 1)),
           "maxnreg": int(maxnreg) if maxnreg is not None else None}
    if options.get("ptx_options"):
        out["ptx_options"] = str(options["ptx_options"])
    return out


def autotune_keys(entry: Mapping[str, Any]) -> list[list[Any]]:
    """The tuning keys an entry is the autotuner's choice for: ``autotune.key``, then ``autotune.also_keys`` (other
    keys whose measured choice is the same configuration); empty for an entry that answers no autotuner."""
    autotune = entry.get("autotune")
    if not autotune:
        return []
    return [list(autotune["key"]), *(list(k) for k in autotune.get("also_keys", []))]


def build_index(entries: Iterable[tuple[str, Mapping[str, Any]]], *, package: str) -> dict[str, Any]:
    from kbuild import __version__

    out: dict[str, Any] = {}
    for key, entry in entries:
        if key in out and out[key]["cubin_sha256"] != entry["cubin_sha256"]:
            raise IndexFormatError(f"two artefacts for the same kernel key {key} ({out[key]['kernel']}, "
                              f"{entry['kernel']}): declare each kernel × target once")
        out[key] = dict(entry)
    return {"format": INDEX_FORMAT, "version": INDEX_VERSION, "key_schema": KEY_SCHEMA, "package": package,
            "kbuild_version": __version__, "entries": {k: out[k] for k in sorted(out)}}


def index_bytes(index: Mapping[str, Any]) -> bytes:
    """Canonical bytes: sorted keys, no whitespace (an index is read by programs; ``kbuild inspect`` shows it to
    people), ASCII, one trailing newline."""
    return (json.dumps(index, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
            + "\n").encode("ascii")


@dataclass(frozen=True)
class Index:
    """A loaded, checked index and the folder its cubins live in."""

    package: str
    data_dir: Path
    entries: dict[str, dict[str, Any]]
    version: int = INDEX_VERSION
    conflicts: dict[str, str] = field(default_factory=dict)
    """Key → why the entry is not trusted although it parses: it names the same cubin as an entry of another
    key, and the two do not declare it to each other (:func:`kbuild.runtime.verify.pairing_conflicts`)."""

    def by_function(self) -> dict[str, list[ShippedEntry]]:
        """The entries per ``module:qualname`` of the function they were compiled from, in the index's order."""
        out: dict[str, list[ShippedEntry]] = {}
        for key, entry in self.entries.items():
            out.setdefault(entry["function"], []).append(ShippedEntry(self, key, entry))
        return out


@dataclass(frozen=True)
class ShippedEntry:
    """One entry of an enabled package's index, with the index it comes from (its data folder, its conflicts)."""

    index: Index
    key: str
    """The entry's baseline key (hex), the one a matching call recomputes."""
    entry: dict[str, Any]


#: Types of the entry fields the run time reads (kbuild.runtime.lookup, .hook, .loader).
_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "function": str, "source_hash": str, "signature": dict, "constexprs": dict, "options": dict, "target": dict,
    "triton_version": str, "ptxas_version": str, "checks": dict, "cubin": str, "cubin_sha256": str,
    "key_components": dict, "tuned": bool}

#: Types of the optional fields of version 2 (checked when present).
_OPTIONAL_TYPES: dict[str, type | tuple[type, ...]] = {"triton_metadata": dict, "config": dict, "autotune": dict,
                                                       "state": str, "note": str, "shares_cubin_with": list,
                                                       "serves_call": dict}


def parse_index(data: bytes | str, *, data_dir: Path, where: str) -> Index:
    """Check the format and every entry; an entry whose key is not the digest of its components is an error."""
    from kbuild.jsonio import load_json

    return _check_index(load_json(data, where=where, error=IndexFormatError, max_bytes=MAX_INDEX_BYTES),
                        data_dir=data_dir, where=where)


def _check_index(doc: Any, *, data_dir: Path, where: str) -> Index:
    if not isinstance(doc, dict) or doc.get("format") != INDEX_FORMAT:
        raise IndexFormatError(f"{where}: not a kbuild runtime index (format {doc.get('format') if isinstance(doc, dict) else None!r:.80})")
    version = doc.get("version")
    if type(version) is not int or version not in READ_VERSIONS or doc.get("key_schema") != KEY_SCHEMA:
        raise IndexFormatError(f"{where}: index version {version!r:.40} / key schema {doc.get('key_schema')!r:.40}; "
                               f"this kbuild reads versions {', '.join(map(str, READ_VERSIONS))} / key schema {KEY_SCHEMA}")
    entries = doc.get("entries")
    if not isinstance(entries, dict):
        raise IndexFormatError(f"{where}: 'entries' is not a table")
    for key, entry in entries.items():
        if not isinstance(entry, dict):
            raise IndexFormatError(f"{where}: entries.{key}: not a table")
        missing = [f for f in _REQUIRED if f not in entry]
        if missing:
            raise IndexFormatError(f"{where}: entries.{key}: missing {', '.join(missing)}")
        for name, ty in _FIELD_TYPES.items():
            if not isinstance(entry[name], ty):
                raise IndexFormatError(f"{where}: entries.{key}.{name}: expected {getattr(ty, '__name__', ty)}, "
                                       f"got {type(entry[name]).__name__}")
        for name, ty in _OPTIONAL_TYPES.items():
            if name in entry and not isinstance(entry[name], ty):
                raise IndexFormatError(f"{where}: entries.{key}.{name}: expected {getattr(ty, '__name__', ty)}, "
                                       f"got {type(entry[name]).__name__}")
        _check_v2_fields(entry, where=f"{where}: entries.{key}")
        if digest(entry["key_components"]) != key:
            raise IndexFormatError(f"{where}: entries.{key}: the key is not the digest of its key_components")
        if entry["cubin"] != f"{entry['cubin_sha256']}.cubin" or "/" in entry["cubin"] or "\\" in entry["cubin"]:
            raise IndexFormatError(f"{where}: entries.{key}: cubin file must be <sha256>.cubin")
    from kbuild.runtime.verify import pairing_conflicts

    return Index(package=str(doc.get("package", "")), data_dir=data_dir, entries=dict(entries), version=version,
                 conflicts=pairing_conflicts(entries))


def _check_v2_fields(entry: Mapping[str, Any], *, where: str) -> None:
    md = entry.get("triton_metadata")
    if md is not None:
        target = md.get("target")
        if not isinstance(md.get("name"), str) or not isinstance(target, dict) or \
                not isinstance(target.get("arch"), int) or not isinstance(md.get("shared"), int):
            raise IndexFormatError(f"{where}.triton_metadata: needs name, shared and target.arch")
        if md["name"] != (entry.get("checks") or {}).get("name"):
            raise IndexFormatError(f"{where}.triton_metadata.name: {md['name']!r:.80} is not the entry's kernel symbol")
    config = entry.get("config")
    if config is not None:
        if not isinstance(config.get("kwargs"), dict) or any(type(config.get(f)) is not int
                                                              for f in ("num_warps", "num_stages", "num_ctas")):
            raise IndexFormatError(f"{where}.config: needs kwargs (a table) and integer num_warps, num_stages, num_ctas")
    serves = entry.get("serves_call")
    if serves is not None:
        from kbuild.declarations.space import SERVABLE_OPTIONS, SERVED_CONSTEXPRS

        odd = sorted(n for n in serves if n not in (*SERVABLE_OPTIONS, SERVED_CONSTEXPRS))
        if odd:
            raise IndexFormatError(f"{where}.serves_call.{odd[0]}: not an option a call may be served "
                                   f"({', '.join(SERVABLE_OPTIONS)}, or {SERVED_CONSTEXPRS} shown safe)")
        cx = serves.get(SERVED_CONSTEXPRS)
        if cx is not None and (not isinstance(cx, dict) or not cx or not all(isinstance(k, str) for k in cx)):
            raise IndexFormatError(f"{where}.serves_call.{SERVED_CONSTEXPRS}: expected a non-empty table of "
                                   "constexpr names")
        if md is None:
            raise IndexFormatError(f"{where}.serves_call: a served configuration needs its triton_metadata")
    autotune = entry.get("autotune")
    if autotune is not None:
        if not isinstance(autotune.get("key"), list):
            raise IndexFormatError(f"{where}.autotune.key: expected a list")
        also = autotune.get("also_keys", [])
        if not isinstance(also, list) or not all(isinstance(k, list) for k in also):
            raise IndexFormatError(f"{where}.autotune.also_keys: expected a list of keys (lists)")
        if config is None:
            raise IndexFormatError(f"{where}.autotune: an autotuned entry needs its config")


def load_index(path: str | Path) -> Index:
    """The index file ``path``: a regular file of at most :data:`MAX_INDEX_BYTES`, read through
    :func:`kbuild.fsutil.read_bounded` (a FIFO or a device is refused, never waited on)."""
    from kbuild.fsutil import read_bounded

    p = Path(path)
    try:
        data = read_bounded(p, max_bytes=MAX_INDEX_BYTES)
    except OSError as exc:
        raise IndexFormatError(f"{p}: cannot read: {exc.strerror or exc}") from None
    return parse_index(data, data_dir=p.parent, where=str(p))


__all__ = [
    "CHECK_FIELDS",
    "DATA_DIR",
    "INDEX_FILE",
    "INDEX_FORMAT",
    "INDEX_VERSION",
    "MAX_INDEX_BYTES",
    "READ_VERSIONS",
    "Index",
    "IndexFormatError",
    "ShippedEntry",
    "autotune_keys",
    "build_index",
    "entry_config",
    "index_bytes",
    "load_index",
    "parse_index",
]

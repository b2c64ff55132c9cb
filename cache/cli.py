"""``kbuild cache``: ls | stats | gc | verify | rm | export | import | put | get.

Every sub-verb takes ``--json`` and then prints exactly one JSON document on stdout; tables and
warnings go to stderr. The store comes from the settings model (``--config``, default
``./pyproject.toml`` when present) and ``--store DIR`` overrides its local directory. Bad input
exits with status 2 and leaves the store unchanged.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from kbuild.console import emit_json, info, print_table
from kbuild.errors import ExitCode, StoreUsageError
from kbuild.fsutil import check_output_file, read_bounded, write_atomic
from kbuild.jsonio import parse_json

from .bundle import export_bundle, import_bundle, iter_bundle
from .local import LocalBackend
from .open import open_store
from .record import MAX_BLOB_BYTES, MAX_RECORD_BYTES, Artefact, check_key
from .stats import load_stats, reset_stats
from .tier import Tier
from .tiered import TieredStore


def add_parser(subparsers: Any) -> None:
    """Add the ``cache`` verb and its sub-verbs to the ``kbuild`` command."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="PYPROJECT", help="pyproject.toml to read [tool.kbuild] from "
                        "(default: ./pyproject.toml when present)")
    common.add_argument("--store", metavar="DIR", help="local store directory (overrides the settings)")
    common.add_argument("--strict", action="store_true", help="fail when a remote tier is unavailable")
    common.add_argument("--json", action="store_true", help="print one JSON document on stdout")

    parser = subparsers.add_parser("cache", help="inspect and maintain the artefact store",
                                   description=__doc__.splitlines()[0] if __doc__ else None)
    verbs = parser.add_subparsers(dest="cache_command", metavar="VERB", required=True)

    p = verbs.add_parser("ls", parents=[common], help="list entries")
    p.add_argument("--target", help="only entries for this target (e.g. sm_90)")
    p.add_argument("--all-tiers", action="store_true", help="list the remote tiers too")
    p.set_defaults(func=cmd_ls)

    p = verbs.add_parser("stats", parents=[common], help="hits, misses, bytes and time saved")
    p.add_argument("--reset", action="store_true", help="zero the recorded statistics")
    p.set_defaults(func=cmd_stats)

    p = verbs.add_parser("gc", parents=[common], help="evict to the size bound, drop dangling and orphan data")
    p.add_argument("--max-bytes", type=int, help="shrink to this many bytes instead of store_max_bytes")
    p.set_defaults(func=cmd_gc)

    p = verbs.add_parser("verify", parents=[common], help="re-check every entry's digests and signatures")
    p.add_argument("--fix", action="store_true", help="delete damaged entries")
    p.add_argument("--all-tiers", action="store_true", help="verify the remote tiers too")
    p.set_defaults(func=cmd_verify)

    p = verbs.add_parser("rm", parents=[common], help="delete entries from the writable tiers")
    p.add_argument("keys", nargs="+", metavar="KEY")
    p.add_argument("--all-tiers", action="store_true", help="delete from writable remote tiers too")
    p.set_defaults(func=cmd_rm)

    p = verbs.add_parser("export", parents=[common], help="write a deterministic bundle of the local store")
    p.add_argument("file", metavar="FILE", help="bundle to write (.tar, or .tar.gz/.tgz for gzip)")
    p.add_argument("--target", help="only entries for this target (e.g. sm_90)")
    p.set_defaults(func=cmd_export)

    p = verbs.add_parser("import", parents=[common], help="verify a bundle and add it to the local store")
    p.add_argument("file", metavar="FILE")
    p.set_defaults(func=cmd_import)

    p = verbs.add_parser("put", parents=[common], help="store a cubin under a key (scripting, debugging)")
    p.add_argument("--key", required=True, help="artefact key (sha256 hex)")
    p.add_argument("--cubin", required=True, metavar="FILE")
    p.add_argument("--meta", metavar="FILE", help="JSON object of metadata")
    p.set_defaults(func=cmd_put)

    p = verbs.add_parser("get", parents=[common], help="fetch a verified artefact")
    p.add_argument("key", metavar="KEY")
    p.add_argument("-o", "--output", metavar="FILE", help="write the cubin here (default: stdout, unless --json)")
    p.set_defaults(func=cmd_get)


# ----------------------------------------------------------------------------------------------

def _settings(args: argparse.Namespace) -> Any:
    from kbuild.settings.sources import load_settings, settings_from_table

    if args.config:
        settings = load_settings(args.config, require_table=False)
    elif Path("pyproject.toml").is_file():
        settings = load_settings("pyproject.toml", require_table=False)
    else:
        settings = settings_from_table({}, where="<defaults>")
    if args.store:  # absolute, links kept (resolving a link loop raises; opening the store says what is wrong)
        settings = dataclasses.replace(settings, store=Path(os.path.abspath(args.store)))
    return settings


def _open(args: argparse.Namespace) -> TieredStore:
    return open_store(_settings(args), strict=args.strict)


def _tiers(store: TieredStore, all_tiers: bool) -> list[Tier]:
    return list(store.tiers) if all_tiers else [store.local]


def _local_backend(store: TieredStore) -> LocalBackend:
    backend = store.local.backend
    assert isinstance(backend, LocalBackend)
    return backend


def _needs_writes(store: TieredStore, what: str) -> LocalBackend:
    """The local backend; a clear error when it is read-only (it still serves reads)."""
    local = _local_backend(store)
    if local.read_only:
        raise StoreUsageError(f"store directory {local.path}: the store is read-only; {what} needs write access "
                              "(reading still works)")
    return local


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def _target(name: str | None) -> str | None:
    """``--target``'s canonical name (:func:`kbuild.targets.parse_target`: ``sm90`` is refused, not matched
    against nothing), or None."""
    if name is None:
        return None
    from kbuild.targets import parse_target

    try:
        return parse_target(name).name
    except ValueError as exc:
        raise StoreUsageError(f"--target: {exc}") from None


def cmd_ls(args: argparse.Namespace) -> int:
    args.target = _target(args.target)
    with _open(args) as store:
        rows = []
        for tier in _tiers(store, args.all_tiers):
            for e in tier.entries():
                if args.target and e.meta.get("target") != args.target:
                    continue
                rows.append(e)
    rows.sort(key=lambda e: (str(e.meta.get("kernel", "")), str(e.meta.get("target", "")), e.key, e.tier))
    if args.json:
        emit_json({"count": len(rows), "bytes": sum(e.cubin_size for e in rows),
                   "entries": [e.as_dict() for e in rows]})
    else:
        print_table(f"{len(rows)} entries", ["key", "kernel", "target", "tuned", "size", "created", "tier"],
                    [(e.key[:16], e.meta.get("kernel", "-"), e.meta.get("target", "-"), e.meta.get("tuned", "-"),
                      _human(e.cubin_size), e.meta.get("created_at", "-"), e.tier) for e in rows])
    return ExitCode.OK


def cmd_stats(args: argparse.Namespace) -> int:
    with _open(args) as store:
        local = _needs_writes(store, "--reset") if args.reset else _local_backend(store)
        if args.reset:
            try:
                reset_stats(local.path)
            except OSError as exc:
                raise StoreUsageError(f"{local.path}: cannot reset the statistics: {exc.strerror or exc}") from None
        recorded = load_stats(local.path)
        entries = list(store.local.entries())
        volume = local.volume()
    targets = Counter(str(e.meta.get("target", "?")) for e in entries)
    tuned = sum(1 for e in entries if e.meta.get("tuned") is True)
    doc = {
        "store": str(local.path),
        "entries": len(entries),
        "tuned": tuned,
        "cubin_bytes": sum(e.cubin_size for e in entries),
        "disk_bytes": volume,
        "max_bytes": local.max_bytes,
        "by_target": dict(sorted(targets.items())),
        **recorded.as_dict(),
    }
    if args.json:
        emit_json(doc)
    else:
        info(f"store {doc['store']}: {len(entries)} entries ({tuned} tuned), {_human(doc['cubin_bytes'])} of cubins, "
             f"{_human(volume)} on disk of {_human(local.max_bytes)}")
        rate = doc["hit_rate"]
        info(f"time saved by hits: {doc['time_saved_seconds']:.1f} s; hit rate: "
             f"{'-' if rate is None else f'{100 * rate:.1f}%'}")
        print_table(None, ["tier", "hits", "misses", "corrupt", "rejected", "errors", "read", "written"],
                    [(name, t["hits"], t["misses"], t["corrupt"], t["rejected"], t["errors"], _human(t["bytes_read"]),
                      _human(t["bytes_written"])) for name, t in doc["tiers"].items()])
    return ExitCode.OK


def cmd_gc(args: argparse.Namespace) -> int:
    if args.max_bytes is not None and args.max_bytes < 0:
        raise StoreUsageError(f"--max-bytes must not be negative, got {args.max_bytes}")
    with _open(args) as store:
        report = _needs_writes(store, "gc").gc(max_bytes=args.max_bytes)
    if args.json:
        emit_json(report.as_dict())
    else:
        info(f"gc: {report.entries} entries kept; removed {report.evicted_blobs} evicted cubins, "
             f"{report.dangling_records} dangling records, {report.orphan_blobs} orphan cubins, "
             f"{report.unreadable_records} unreadable records, {report.half_written_files} half-written files; "
             f"{_human(report.bytes_before)} → "
             f"{_human(report.bytes_after)} in {report.seconds:.2f} s")
    return ExitCode.OK


def cmd_verify(args: argparse.Namespace) -> int:
    checked = 0
    problems = []
    file_warnings = 0
    with _open(args) as store:
        secret = store.local.secret
        if args.fix:
            _needs_writes(store, "verify --fix").make_room()  # on a full disk: free space before fixing
        for tier in _tiers(store, args.all_tiers):
            n, found = tier.verify(fix=args.fix, secret=secret)
            checked += n
            problems.extend(found)
        file_warnings = _local_backend(store).check_files(fix=args.fix)
    remaining = [p for p in problems if not p.fixed]
    if args.json:
        emit_json({"checked": checked, "ok": not remaining, "problems": [p.as_dict() for p in problems],
                   "file_warnings": file_warnings})
    else:
        for p in problems:
            info(f"{p.tier}: {p.key}: {p.problem}{' (deleted)' if p.fixed else ''}")
        info(f"verified {checked} entries: {len(problems)} problems, {len(problems) - len(remaining)} fixed")
    return ExitCode.FAILED if remaining else ExitCode.OK  # problems left: a negative answer


def cmd_rm(args: argparse.Namespace) -> int:
    keys = [check_key(k) for k in args.keys]
    removed: list[str] = []
    missing: list[str] = []
    with _open(args) as store:
        _needs_writes(store, "rm")
        tiers = [t for t in _tiers(store, args.all_tiers) if t.writable]
        for key in keys:
            hit = False
            for tier in tiers:
                hit = tier.delete(key) or hit
            (removed if hit else missing).append(key)
    if args.json:
        emit_json({"removed": removed, "missing": missing})
    else:
        info(f"removed {len(removed)} entries" + (f"; not found: {', '.join(missing)}" if missing else "")
             + ("; run `kbuild cache gc` to free their cubins" if removed else ""))
    return ExitCode.FAILED if missing else ExitCode.OK  # a key not found: a negative answer


def _output_file(path: str, what: str) -> Path:
    """``path`` as a file kbuild may write: its directory must exist (kbuild creates none) and be writable,
    and it must not be a directory, a device or a FIFO (:func:`kbuild.fsutil.check_output_file`); a clear
    error naming it otherwise, before anything is opened."""
    out = Path(path)
    parent = out.parent if str(out.parent) else Path(".")
    if out.is_dir():
        raise StoreUsageError(f"{path}: is a directory; give a file name for the {what}")
    check_output_file(out, f"the {what} file")
    if not parent.is_dir():
        raise StoreUsageError(f"{path}: the directory {parent} does not exist (kbuild does not create it); "
                              f"create it or write the {what} elsewhere")
    if not os.access(parent, os.W_OK):
        raise StoreUsageError(f"{path}: the directory {parent} is not writable")
    return out


def cmd_export(args: argparse.Namespace) -> int:
    args.target = _target(args.target)
    _output_file(args.file, "bundle")
    with _open(args) as store:
        report = export_bundle(store.local, args.file, target=args.target)
    if args.json:
        emit_json(report.as_dict())
    else:
        info(f"exported {report.entries} entries ({report.blobs} cubins, {_human(report.bytes)}) to {report.path}")
    return ExitCode.OK


def cmd_import(args: argparse.Namespace) -> int:
    settings = _settings(args)
    # verified in full before the store is opened: a file that is no bundle changes nothing, not even the store's
    # database; a bundle bigger than the store's size bound could not stay in it: that bound caps the bundle too
    verified = iter_bundle(args.file, secret=settings.store_secret, max_bytes=settings.store_max_bytes)
    with open_store(settings, strict=args.strict) as store:
        _needs_writes(store, "import")
        report = import_bundle(store.local, args.file, verified=verified)
    if args.json:
        emit_json(report.as_dict())
    else:
        info(f"imported {report.imported} entries from {report.path} ({report.already_present} already present)")
    return ExitCode.OK


def _read_file(path: str, what: str, max_bytes: int) -> bytes:
    """The file a user named, read with :func:`kbuild.fsutil.read_bounded` (a regular file, at most ``max_bytes``)."""
    try:
        return read_bounded(path, max_bytes=max_bytes)
    except OSError as exc:
        raise StoreUsageError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None


def cmd_put(args: argparse.Namespace) -> int:
    cubin = _read_file(args.cubin, "cubin", MAX_BLOB_BYTES)
    meta: Any = {}
    if args.meta:
        try:
            meta = parse_json(_read_file(args.meta, "metadata", MAX_RECORD_BYTES))
        except ValueError as exc:
            raise StoreUsageError(f"{args.meta}: not JSON: {exc}") from None
        if not isinstance(meta, dict):
            raise StoreUsageError(f"{args.meta}: expected a JSON object of metadata")
    art = Artefact.create(key=args.key, cubin=cubin, meta=meta)
    with _open(args) as store:
        _needs_writes(store, "put")
        store.put(art, required=True)  # storing is this command's whole job: a full or busy store is an error
        found = store.local.fetch(art.key, count=False)
        stored = found[0] if found else None
    doc = {"key": art.key, "cubin_sha256": art.cubin_sha256, "meta_sha256": art.meta_sha256, "size": art.size,
           "kept_existing": stored is not None and stored.cubin_sha256 != art.cubin_sha256}
    if args.json:
        emit_json(doc)
    else:
        info(f"stored {art.key} ({_human(art.size)})" + (" — an entry with another cubin already existed and was kept"
                                                         if doc["kept_existing"] else ""))
    return ExitCode.OK




def cmd_get(args: argparse.Namespace) -> int:
    key = check_key(args.key)
    if args.output:
        _output_file(args.output, "cubin")
    with _open(args) as store:
        art = store.get(key)
    if art is None:
        if args.json:
            emit_json({"key": key, "hit": False})
        else:
            info(f"miss: {key} is in no store tier")
        return ExitCode.FAILED  # a miss: a negative answer, not an error
    if args.output:
        try:
            write_atomic(Path(args.output), art.cubin)
        except OSError as exc:
            raise StoreUsageError(f"{args.output}: cannot write the cubin: {exc.strerror or exc}") from None
    elif not args.json:
        if sys.stdout.isatty():
            raise StoreUsageError("refusing to write a cubin to a terminal; pass -o FILE or redirect stdout")
        sys.stdout.buffer.write(art.cubin)
        sys.stdout.flush()
    if args.json:
        emit_json({"key": key, "hit": True, "cubin_sha256": art.cubin_sha256, "meta_sha256": art.meta_sha256,
                   "size": art.size, "output": args.output, "meta": art.meta})
    return ExitCode.OK

"""``kbuild inspect WHEEL [--json]``: the kernels a wheel ships.

Two kinds of wheel: an extension wheel's launchers are described by its ``.dist-info/kbuild.json`` (the
manifest); a JIT package's wheel (``ship = "package-data"``) has the manifest too and ships the cubins as
package data, ``<package>/_kbuild/index.json`` next to ``<sha256>.cubin`` files. This module reads both: each
index is checked as the run time checks it (:func:`kbuild.runtime.index.parse_index`), and each cubin it names
as the run time checks it before loading it (:mod:`kbuild.runtime.verify`): in the wheel, of the recorded size
and sha256, its ELF (architecture, kernel symbol, block size, parameter layout, shared-memory use) agreeing
with the entry, and named by no entry of another key. The wheel's member names must be safe to install
(relative, no ``..``, no backslash, each once), and a ``_kbuild/`` folder must hold only what kbuild writes.

It also shows what a JIT package's wheel covers (:mod:`kbuild.record.covers`): its kernels × specialisations ×
targets, from the indexes (``"covers"`` in ``--json``), and with ``--recording FILE`` (a ``kbuild record``
recording) which recorded specialisations and autotuning keys the wheel answers, and why not the others
(``"recording"``).

Exit status, as a verifier's: 0 when every check holds, 1 when one fails (each failure is a warning line, and
the ``--json`` document lists them under ``"problems"``; with ``--recording``, a recorded specialisation or tuning
the wheel does not answer is such a failure), 2 when the input cannot be read at all.
"""

from __future__ import annotations

import argparse
import hashlib
import zipfile
import zlib
from collections import Counter
from pathlib import Path, PurePosixPath
from typing import Any

from kbuild.console import emit_json, print_table, table_text, warn
from kbuild.errors import ExitCode

#: Errors a damaged zip member raises when read.
_MEMBER_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show the kernel manifest and package data of a wheel built with kbuild",
                       description="Print each kernel × target a wheel ships: its key, cubin digest, tuned or "
                                   "baseline state, speedup, the launch configuration it ships (* marks the "
                                   "default), the tuner's level-1 (configuration) and level-2 (SASS) gains and, "
                                   "for an autotuned entry made from a recording, where its choice came from "
                                   "(from <name>.dist-info/kbuild.json); for a JIT package's wheel (ship = "
                                   "\"package-data\") also the entries of each <package>/_kbuild/index.json, "
                                   "with each cubin checked against its sha256.")
    p.add_argument("wheel", metavar="WHEEL", help="a .whl file (or a kbuild.json manifest)")
    p.add_argument("--recording", metavar="FILE",
                   help="a recording from `kbuild record`: say which recorded specialisations and autotuning keys "
                        "the wheel answers, and why not the others (exit status 1 when one is not answered)")
    p.add_argument("--json", action="store_true",
                   help="print the manifest as one JSON document on stdout (with a \"package_data\" list for a "
                        "wheel that ships package data, and \"problems\": every failed check); the exit status is "
                        "1 when a check fails")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kbuild.build.manifest import read_manifest, wheel_manifest

    # Both readers check the manifest's size and shape first (kbuild.build.manifest.check_manifest): every
    # field used below has its type. Its strings are still untrusted: the table shows them through
    # table_text (no terminal escapes, no rich markup); --json keeps them, JSON-escaped.
    package_data: list[dict[str, Any]] = []
    problems: list[str] = []
    if args.wheel.endswith(".json"):
        manifest: dict[str, Any] | None = read_manifest(args.wheel)
    else:
        has_manifest, package_data, problems = wheel_package_data(args.wheel)
        manifest = wheel_manifest(args.wheel) if has_manifest or not package_data else None
    covers: list[dict[str, Any]] = []
    recorded: dict[str, Any] | None = None
    if package_data or args.recording:
        from kbuild.record.covers import recording_coverage, shipped_specializations

        indexes = [] if args.wheel.endswith(".json") else wheel_indexes(args.wheel)
        covers = shipped_specializations(indexes)
        if args.recording:
            from kbuild.record.format import load

            recorded = {"file": args.recording, **recording_coverage(indexes, load(args.recording))}
            problems += [f"recorded {r['function']} [{r['target']}] {_sig(r['signature'])}: {r['reason']}"
                         for r in recorded["rows"] if not r["answered"]]
            problems += [f"recorded tuning {r['function']} [{r['target']}] key {r['key']}: {r['reason']}"
                         for r in recorded["tuning_rows"] if not r["answered"]]
    for problem in problems:
        warn(f"{table_text(args.wheel)}!{table_text(problem)}")
    status = ExitCode.FAILED if problems else ExitCode.OK
    if args.json:
        doc = dict(manifest) if manifest is not None else {}
        if package_data:
            doc["package_data"] = package_data
            doc["covers"] = covers
        if recorded is not None:
            doc["recording"] = recorded
        doc["problems"] = problems
        emit_json(doc)
        return status
    if manifest is not None:
        _print_manifest(args.wheel + (" (the build's manifest; the cubins shipped: its package data, below)"
                                      if package_data else ""), manifest)
    for data in package_data:
        _print_package_data(args.wheel, data)
    if covers:
        _print_covers(args.wheel, covers)
    if recorded is not None:
        _print_recording(recorded)
    return status


def _sig(signature: dict[str, Any]) -> str:
    return "(" + ", ".join(f"{n}: {t}" for n, t in signature.items()) + ")"


def _print_covers(wheel: str, covers: list[dict[str, Any]]) -> None:
    rows = []
    for r in covers:
        const = ", ".join(f"{k}={v}" for k, v in r["constexprs"].items())
        opts = ", ".join(f"{k}={v}" for k, v in r["options"].items())
        autotune = "; ".join(f"{t}: {k}" for t, k in r["autotune"].items()) or "–"
        cells = (r["function"], _sig(r["signature"]), const, opts, ", ".join(r["targets"]),
                 "zero-JIT" if r["zero_jit"] else "after a compile", autotune)
        rows.append(tuple(table_text(c) for c in cells))
    targets = sorted({t for r in covers for t in r["targets"]})
    title = (f"{wheel} covers {len({r['function'] for r in covers})} kernel(s) × {len(covers)} specialisation(s) × "
             f"{len(targets)} target(s) ({', '.join(targets)})")
    print_table(table_text(title), ["function", "signature", "constexprs", "options", "targets", "answered",
                                    "autotune key"], rows)


def _print_recording(recorded: dict[str, Any]) -> None:
    rows = []
    for r in recorded["rows"]:
        cells = (r["function"], r["target"], _sig(r["signature"]),
                 ", ".join(f"{k}={v}" for k, v in r["constexprs"].items()), r["calls"],
                 r["stage"] if r["answered"] else "no", r["reason"] or "")
        rows.append(tuple(table_text(c) for c in cells))
    for r in recorded["tuning_rows"]:
        cells = (r["function"], r["target"], f"autotune key {r['key']}", "", "", "yes" if r["answered"] else "no",
                 r["reason"] or "")
        rows.append(tuple(table_text(c) for c in cells))
    title = (f"{recorded['file']}: {recorded['answered']} of {recorded['specializations']} recorded specialisation(s) "
             f"and {recorded['tunings_answered']} of {recorded['tunings']} tuning(s) answered by the wheel")
    print_table(table_text(title), ["function", "target", "signature", "constexprs", "calls", "answered", "why not"],
                rows)


def wheel_indexes(wheel: str | Path) -> list[Any]:
    """The wheel's ``<package>/_kbuild/index.json`` files, parsed (:func:`kbuild.runtime.index.parse_index`)."""
    from kbuild.build.manifest import open_wheel
    from kbuild.runtime.index import MAX_INDEX_BYTES, parse_index

    path = Path(wheel)
    out = []
    with open_wheel(path) as zf:
        for name in sorted(n for n in set(zf.namelist()) if _is_index_name(n)):
            where = f"{path}!{name}"
            raw = _read_member(zf, zf.getinfo(name), MAX_INDEX_BYTES, where=where)
            out.append(parse_index(raw, data_dir=Path(PurePosixPath(name).parent.as_posix()), where=where))
    return out


def _print_manifest(wheel: str, manifest: dict[str, Any]) -> None:
    rows = []
    # The column only for a manifest with autotuned entries made from a recording (the others' tables keep their width).
    choices = any(choice_cell(e) != "–" for e in manifest["kernels"])
    for e in manifest["kernels"]:
        speedup = e.get("speedup")
        gains = e.get("gains") or {}
        cells = (e["kernel"], e["target"], e.get("arch") or "", e["key"][:12], e["cubin_sha256"][:12],
                 f"{e.get('cubin_bytes') or 0:,} B", e.get("state") or "", _ratio(speedup), config_cell(e),
                 _ratio(gains.get("level1")), _ratio(gains.get("level2")), *([choice_cell(e)] if choices else []))
        rows.append(tuple(table_text(c) for c in cells))
    for e in manifest.get("cuda_kernels") or []:  # CUDA C++ kernels through kbuild-nvcc (kbuild.nvcc.tuned)
        point = e.get("ptxas") if isinstance(e.get("ptxas"), dict) else {}
        flags = ",".join(f"{k}={v}" for k, v in point.items() if v) or "as compiled"
        cells = (f"{e['kernel']} (CUDA)", e["target"], e.get("arch") or "", e["key"][:12], e["cubin_sha256"][:12],
                 f"{e.get('cubin_bytes') or 0:,} B", e.get("state") or "", _ratio(e.get("speedup")), flags, "", "",
                 *([""] if choices else []))
        rows.append(tuple(table_text(c) for c in cells))
    title = (f"{wheel} — kbuild {manifest.get('kbuild_version') or '?'}, "
             f"tune = {manifest.get('tune') or '?'}")
    print_table(table_text(title), ["kernel", "target", "arch", "key", "cubin sha256", "size", "state", "speedup",
                                    "config", "level 1", "level 2", *(["autotune choice"] if choices else [])], rows)


def _print_package_data(wheel: str, data: dict[str, Any]) -> None:
    rows = []
    for e in data["entries"]:
        cells = (e["kernel"], e["target"], e["arch"], e["key"][:12], e["cubin_sha256"][:12],
                 f"{e['cubin_bytes']:,} B", "tuned" if e["tuned"] else "baseline", _ratio(e["speedup"]),
                 e["cubin_check"])
        rows.append(tuple(table_text(c) for c in cells))
    title = (f"{wheel}!{data['index']} — package {data['package']}, kbuild {data.get('kbuild_version') or '?'}, "
             f"{len(rows)} entries")
    print_table(table_text(title), ["kernel", "target", "arch", "key", "cubin sha256", "size", "ships", "speedup",
                                    "cubin"], rows)


def _is_index_name(name: str) -> bool:
    from kbuild.runtime.index import DATA_DIR, INDEX_FILE

    parts = PurePosixPath(name).parts
    return (len(parts) >= 3 and parts[-1] == INDEX_FILE and parts[-2] == DATA_DIR
            and not parts[0].endswith((".dist-info", ".data")))


def unsafe_member(name: str) -> str | None:
    """Why a wheel member's name is not safe to install (None: it is): an installer writes it below
    site-packages, so it must be a relative path without ``..``, backslashes or empty parts."""
    if not name or "\0" in name:
        return "an empty name or one with a NUL byte"
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "an absolute path"
    if "\\" in name:
        return "a backslash (a Windows path separator)"
    parts = name.rstrip("/").split("/")
    if ".." in parts:
        return "'..' (a path out of the install folder)"
    if any(part in ("", ".") for part in parts):
        return "an empty or '.' path part"
    return None


def wheel_package_data(wheel: str | Path) -> tuple[bool, list[dict[str, Any]], list[str]]:
    """Whether ``wheel`` has a ``.dist-info/kbuild.json``, its package data, and every failed check.

    The package data: one table per ``<package>/_kbuild/index.json`` (``index``: the member's name, ``package``,
    ``kbuild_version``, ``entries``: one per kernel × target, sorted by kernel and target, each with
    ``cubin_check`` (``ok``, ``missing``, ``size mismatch``, ``sha256 mismatch``, ``ELF mismatch`` or
    ``conflict``) and ``problems``, the reasons; ``problems``: members of the ``_kbuild/`` folder kbuild does not
    write). The failed checks: those reasons, each prefixed with its member, and each unsafe member name.

    A :class:`~kbuild.errors.UsageError` names the wheel (and the member) when it is no zip, an index is over
    :data:`kbuild.runtime.index.MAX_INDEX_BYTES` or is no kbuild runtime index (:func:`kbuild.runtime.index.parse_index`).
    """
    from kbuild.build.manifest import MANIFEST_NAME, open_wheel

    path = Path(wheel)
    with open_wheel(path) as zf:
        names = zf.namelist()
        has_manifest = any(n.count("/") == 1 and n.split("/")[0].endswith(".dist-info")
                           and n.endswith("/" + MANIFEST_NAME) for n in names)
        problems = [f"{n}: unsafe member name: {why}" for n in names if (why := unsafe_member(n))]
        problems += [f"{n}: appears {count} times" for n, count in sorted(Counter(names).items()) if count > 1]
        out = [_read_index(zf, path, name) for name in sorted(n for n in set(names) if _is_index_name(n))]
    for data in out:
        problems += [f"{data['index'].rpartition('/')[0]}/: {p}" for p in data["problems"]]
        problems += [f"{e['cubin']}: {p}" for e in data["entries"] for p in e["problems"]]
    return has_manifest, out, problems


def _read_index(zf: zipfile.ZipFile, path: Path, name: str) -> dict[str, Any]:
    from kbuild.build.package_data import render_init
    from kbuild.errors import UsageError
    from kbuild.jsonio import load_json
    from kbuild.runtime.index import INDEX_FILE, MAX_INDEX_BYTES, parse_index

    where = f"{path}!{name}"
    info = zf.getinfo(name)
    if info.file_size > MAX_INDEX_BYTES:
        raise UsageError(f"{where}: {info.file_size:,} bytes, over the {MAX_INDEX_BYTES:,}-byte limit for an index")
    raw = _read_member(zf, info, MAX_INDEX_BYTES, where=where)
    folder = PurePosixPath(name).parent
    index = parse_index(raw, data_dir=Path(folder.as_posix()), where=where)
    infos = {i.filename: i for i in zf.infolist()}
    entries = []
    for key, e in index.entries.items():
        target = e["target"]
        speedup = e.get("speedup")
        member = (folder / e["cubin"]).as_posix()
        check, problems = _check_cubin(zf, infos.get(member), key, e, index.conflicts.get(key),
                                       where=f"{path}!{member}")
        entries.append({
            "key": key, "kernel": str(e.get("kernel", e["function"])), "function": e["function"],
            "target": str(target.get("name", "")), "arch": str(target.get("arch", "")),
            "tuned": e["tuned"], "speedup": speedup if _is_number(speedup) else None,
            "cubin": member, "cubin_sha256": e["cubin_sha256"],
            "cubin_bytes": e["cubin_bytes"] if _is_number(e.get("cubin_bytes")) else 0,
            "cubin_check": check, "problems": problems,
        })
    entries.sort(key=lambda x: (x["kernel"], x["target"], x["key"]))
    version = load_json(raw, where=where, max_bytes=MAX_INDEX_BYTES).get("kbuild_version")  # a table: parse_index
    expected = {INDEX_FILE, "__init__.py"} | {e["cubin"] for e in index.entries.values()}
    folder_problems = [f"{n}: not written by kbuild (a _kbuild/ folder holds {INDEX_FILE}, __init__.py and "
                       "the cubins its index names)" for n in sorted(infos)
                       if PurePosixPath(n).parent == folder and PurePosixPath(n).name not in expected]
    init = infos.get((folder / "__init__.py").as_posix())
    if init is not None and _read_member(zf, init, 1 << 20, where=f"{path}!{init.filename}") != render_init(index.package):
        folder_problems.append(f"__init__.py is not the module kbuild writes for package {index.package!r} "
                               "(it runs when the package is imported)")
    return {"index": name, "package": index.package, "kbuild_version": version if isinstance(version, str) else None,
            "entries": entries, "problems": folder_problems}


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int, *, where: str) -> bytes:
    """At most ``limit + 1`` bytes of a member (a longer one is then seen to be too long)."""
    from kbuild.errors import UsageError

    try:
        with zf.open(info) as f:
            return f.read(limit + 1)
    except _MEMBER_ERRORS as exc:
        raise UsageError(f"{where}: cannot read the member: {exc}") from None


def _check_cubin(zf: zipfile.ZipFile, info: zipfile.ZipInfo | None, key: str, entry: dict[str, Any],
                 conflict: str | None, *, where: str) -> tuple[str, list[str]]:
    """``(status, reasons)`` of one entry's cubin, checked as the run time checks it before loading it."""
    from kbuild.runtime.verify import MAX_CUBIN_BYTES, cubin_mismatch

    problems = [conflict] if conflict else []
    status = "conflict" if conflict else "ok"
    if info is None:
        return "missing", [*problems, "not in the wheel"]
    size = entry.get("cubin_bytes")
    if type(size) is not int or not 0 < size <= MAX_CUBIN_BYTES:
        return "size mismatch", [*problems, f"the entry records no usable cubin size (cubin_bytes {size!r:.40})"]
    if info.file_size != size:
        return "size mismatch", [*problems, f"{info.file_size:,} bytes, the entry records {size:,}"]
    data = _read_member(zf, info, size, where=where)
    if len(data) != size:
        return "size mismatch", [*problems, f"{len(data):,} bytes read, the entry records {size:,}"]
    if hashlib.sha256(data).hexdigest() != entry["cubin_sha256"]:
        return "sha256 mismatch", [*problems, "sha256 mismatch: the run time will not load this cubin"]
    elf = cubin_mismatch(data, entry, where=where)
    if elf is not None:
        return ("conflict" if conflict else "ELF mismatch"), [*problems, elf]
    return status, problems


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _ratio(value: object) -> str:
    return f"×{value:.3f}" if _is_number(value) else "–"


def choice_cell(entry: dict[str, Any]) -> str:
    """Where a recorded autotuned entry's choice for its target came from (``recorded.autotune``, :mod:`kbuild.build.
    recorded`): ``recording`` or ``triton-cache`` (with the tuning key it answers), ``none`` (Triton's autotuner
    benchmarks on the first call); ``–`` for any other entry."""
    recorded = entry.get("recorded")
    autotune = recorded.get("autotune") if isinstance(recorded, dict) else None
    if not isinstance(autotune, dict):
        return "–"
    if not autotune.get("choice"):
        return "none: Triton autotunes"
    return f"{autotune['choice']} {autotune.get('key')}"


def config_cell(entry: dict[str, object]) -> str:
    """The entry's configuration label (:func:`kbuild.declarations.space.label`), ``*`` after the default; ``–`` for a manifest
    from before configurations were recorded."""
    from kbuild.declarations.space import label

    config = entry.get("config")
    if not isinstance(config, dict):
        return "–"
    return label(config) + (" *" if entry.get("default_config") else "")

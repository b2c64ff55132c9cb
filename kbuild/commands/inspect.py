"""``kbuild inspect WHEEL [--json]``: the kernels a wheel ships.

Two kinds of wheel: an extension wheel's launchers are described by its ``.dist-info/kbuild.json`` (the
manifest); a JIT package's wheel (``ship = "package-data"``) has the manifest too and ships the cubins as
package data, ``<package>/_kbuild/index.json`` next to ``<sha256>.cubin`` files. This module reads both: each
index is checked as the run time checks it (:func:`kbuild.runtime.index.parse_index`), and each cubin it names
must be in the wheel with that sha256.
"""

from __future__ import annotations

import argparse
import hashlib
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Any

from kbuild.console import emit_json, print_table, table_text, warn

#: Errors a damaged zip member raises when read.
_MEMBER_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show the kernel manifest and package data of a wheel built with kbuild",
                       description="Print each kernel × target a wheel ships: its key, cubin digest, tuned or "
                                   "baseline state, speedup, the launch configuration it ships (* marks the "
                                   "default) and the tuner's level-1 (configuration) and level-2 (SASS) gains "
                                   "(from <name>.dist-info/kbuild.json); for a JIT package's wheel (ship = "
                                   "\"package-data\") also the entries of each <package>/_kbuild/index.json, "
                                   "with each cubin checked against its sha256.")
    p.add_argument("wheel", metavar="WHEEL", help="a .whl file (or a kbuild.json manifest)")
    p.add_argument("--json", action="store_true",
                   help="print the manifest as one JSON document on stdout (with a \"package_data\" list for a "
                        "wheel that ships package data)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kbuild.hooks.manifest import read_manifest, wheel_manifest

    # Both readers check the manifest's size and shape first (hooks.manifest.check_manifest): every
    # field used below has its type. Its strings are still untrusted: the table shows them through
    # table_text (no terminal escapes, no rich markup); --json keeps them, JSON-escaped.
    package_data: list[dict[str, Any]] = []
    if args.wheel.endswith(".json"):
        manifest: dict[str, Any] | None = read_manifest(args.wheel)
    else:
        has_manifest, package_data = wheel_package_data(args.wheel)
        manifest = wheel_manifest(args.wheel) if has_manifest or not package_data else None
        for data in package_data:
            for e in data["entries"]:
                if e["cubin_check"] != "ok":
                    warn(f"{table_text(args.wheel)}!{table_text(e['cubin'])}: {e['cubin_check']}: "
                         "the run time will not substitute this cubin")
    if args.json:
        doc = dict(manifest) if manifest is not None else {}
        if package_data:
            doc["package_data"] = package_data
        emit_json(doc)
        return 0
    if manifest is not None:
        _print_manifest(args.wheel + (" (the build's manifest; the cubins shipped: its package data, below)"
                                      if package_data else ""), manifest)
    for data in package_data:
        _print_package_data(args.wheel, data)
    return 0


def _print_manifest(wheel: str, manifest: dict[str, Any]) -> None:
    rows = []
    for e in manifest["kernels"]:
        speedup = e.get("speedup")
        gains = e.get("gains") or {}
        cells = (e["kernel"], e["target"], e.get("arch") or "", e["key"][:12], e["cubin_sha256"][:12],
                 f"{e.get('cubin_bytes') or 0:,} B", e.get("state") or "", _ratio(speedup), config_cell(e),
                 _ratio(gains.get("level1")), _ratio(gains.get("level2")))
        rows.append(tuple(table_text(c) for c in cells))
    for e in manifest.get("cuda_kernels") or []:  # CUDA C++ kernels through kbuild-nvcc (kbuild.nvcc.tuned)
        point = e.get("ptxas") if isinstance(e.get("ptxas"), dict) else {}
        flags = ",".join(f"{k}={v}" for k, v in point.items() if v) or "as compiled"
        cells = (f"{e['kernel']} (CUDA)", e["target"], e.get("arch") or "", e["key"][:12], e["cubin_sha256"][:12],
                 f"{e.get('cubin_bytes') or 0:,} B", e.get("state") or "", _ratio(e.get("speedup")), flags, "", "")
        rows.append(tuple(table_text(c) for c in cells))
    title = (f"{wheel} — kbuild {manifest.get('kbuild_version') or '?'}, "
             f"tune = {manifest.get('tune') or '?'}")
    print_table(table_text(title), ["kernel", "target", "arch", "key", "cubin sha256", "size", "state", "speedup",
                                    "config", "level 1", "level 2"], rows)


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


def wheel_package_data(wheel: str | Path) -> tuple[bool, list[dict[str, Any]]]:
    """Whether ``wheel`` has a ``.dist-info/kbuild.json``, and its package data: one table per
    ``<package>/_kbuild/index.json`` (``index``: the member's name, ``package``, ``kbuild_version``,
    ``entries``: one per kernel × target, sorted by kernel and target, each with ``cubin_check``: ``ok``,
    ``missing`` or ``sha256 mismatch``).

    A :class:`~kbuild.errors.UsageError` names the wheel (and the member) when it is no zip, an index is over
    :data:`kbuild.jsonio.DEFAULT_MAX_BYTES` or is no kbuild runtime index (:func:`kbuild.runtime.index.parse_index`).
    """
    from kbuild.hooks.manifest import MANIFEST_NAME, open_wheel

    path = Path(wheel)
    with open_wheel(path) as zf:
        names = zf.namelist()
        has_manifest = any(n.count("/") == 1 and n.split("/")[0].endswith(".dist-info")
                           and n.endswith("/" + MANIFEST_NAME) for n in names)
        out = [_read_index(zf, path, name) for name in sorted(n for n in set(names) if _is_index_name(n))]
    return has_manifest, out


def _read_index(zf: zipfile.ZipFile, path: Path, name: str) -> dict[str, Any]:
    from kbuild.errors import UsageError
    from kbuild.jsonio import DEFAULT_MAX_BYTES, load_json
    from kbuild.runtime.index import parse_index

    where = f"{path}!{name}"
    info = zf.getinfo(name)
    if info.file_size > DEFAULT_MAX_BYTES:
        raise UsageError(f"{where}: {info.file_size:,} bytes, over the {DEFAULT_MAX_BYTES:,}-byte limit for an index")
    try:
        with zf.open(info) as f:
            raw = f.read(DEFAULT_MAX_BYTES + 1)
    except _MEMBER_ERRORS as exc:
        raise UsageError(f"{where}: cannot read the member: {exc}") from None
    folder = PurePosixPath(name).parent
    index = parse_index(raw, data_dir=Path(folder.as_posix()), where=where)
    members = set(zf.namelist())
    entries = []
    for key, e in index.entries.items():
        target = e["target"]
        speedup = e.get("speedup")
        member = (folder / e["cubin"]).as_posix()
        entries.append({
            "key": key, "kernel": str(e.get("kernel", e["function"])), "function": e["function"],
            "target": str(target.get("name", "")), "arch": str(target.get("arch", "")),
            "tuned": e["tuned"], "speedup": speedup if _is_number(speedup) else None,
            "cubin": member, "cubin_sha256": e["cubin_sha256"],
            "cubin_bytes": e["cubin_bytes"] if _is_number(e.get("cubin_bytes")) else 0,
            "cubin_check": _check_cubin(zf, member, e["cubin_sha256"], where=f"{path}!{member}")
            if member in members else "missing",
        })
    entries.sort(key=lambda x: (x["kernel"], x["target"], x["key"]))
    version = load_json(raw, where=where).get("kbuild_version")  # parse_index checked it is a table
    return {"index": name, "package": index.package, "kbuild_version": version if isinstance(version, str) else None,
            "entries": entries}


def _check_cubin(zf: zipfile.ZipFile, member: str, sha256: str, *, where: str) -> str:
    from kbuild.errors import UsageError

    h = hashlib.sha256()
    try:
        with zf.open(member) as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except _MEMBER_ERRORS as exc:
        raise UsageError(f"{where}: cannot read the member: {exc}") from None
    return "ok" if h.hexdigest() == sha256 else "sha256 mismatch"


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _ratio(value: object) -> str:
    return f"×{value:.3f}" if _is_number(value) else "–"


def config_cell(entry: dict[str, object]) -> str:
    """The entry's configuration label (:func:`kbuild.space.label`), ``*`` after the default; ``–`` for a manifest
    from before configurations were recorded."""
    from kbuild.space import label

    config = entry.get("config")
    if not isinstance(config, dict):
        return "–"
    return label(config) + (" *" if entry.get("default_config") else "")

"""``kbuild verify-wheel WHEEL [--project DIR]``: rebuild the project and compare the wheels byte for byte.

The rebuild runs ``pip wheel --no-deps`` on the project (default: the current directory) with
``SOURCE_DATE_EPOCH`` taken from the wheel's own timestamps, so a reproducible build gives the
same bytes. It reports the members that differ, are missing or are extra; exit status 0 when
the wheels are identical, 6 otherwise.
"""

from __future__ import annotations

import argparse
import calendar
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Any

from kbuild.build.manifest import open_wheel
from kbuild.console import emit_json, info, print_table, printable, table_text
from kbuild.errors import KBuildError, ToolError, UsageError

#: Exit status when the rebuilt wheel differs.
DIFFERS = 6


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify-wheel", help="rebuild the project and check the wheel is byte-identical",
                       description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("wheel", metavar="WHEEL")
    p.add_argument("--project", default=".", metavar="DIR", help="the project's source directory (default: .)")
    p.add_argument("--isolation", action="store_true",
                   help="build in an isolated environment (default: use this environment, no downloads)")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.set_defaults(func=run)


#: Errors a damaged zip raises while its members are read.
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError)


def wheel_epoch(wheel: Path) -> int:
    """The timestamp the wheel's members carry, as a Unix time (zip times are UTC in reproducible wheels)."""
    with open_wheel(wheel) as zf:
        infos = zf.infolist()
        if not infos:
            raise UsageError(f"{wheel}: empty archive")
        return calendar.timegm((*infos[0].date_time, 0, 0, 0))


def _members(wheel: Path) -> dict[str, tuple[str, tuple[Any, ...]]]:
    """Member name → (sha256 of its contents, zip metadata), reading each member in chunks (a wheel
    may hold members of any size; only their digests are kept)."""
    out = {}
    with open_wheel(wheel) as zf:
        for info in zf.infolist():
            h = hashlib.sha256()
            try:
                with zf.open(info) as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
            except _ZIP_ERRORS as exc:
                raise UsageError(f"{wheel}!{printable(info.filename)}: cannot read the member: {exc}") from None
            out[info.filename] = (h.hexdigest(), (info.date_time, info.external_attr, info.compress_type))
    return out


def compare_wheels(a: Path, b: Path) -> dict[str, Any]:
    """Compare two wheels; the member names that differ (contents or zip metadata), or exist in one only."""
    ma, mb = _members(a), _members(b)
    both = ma.keys() & mb.keys()
    differing = sorted(n for n in both if ma[n][0] != mb[n][0])
    metadata = sorted(n for n in both if ma[n][0] == mb[n][0] and ma[n][1] != mb[n][1])
    sha = {p: _file_sha256(p) for p in (a, b)}
    return {
        "identical": sha[a] == sha[b],
        "wheel_sha256": sha[a],
        "rebuilt_sha256": sha[b],
        "differing": differing,
        "differing_zip_metadata": metadata,
        "only_in_wheel": sorted(ma.keys() - mb.keys()),
        "only_in_rebuild": sorted(mb.keys() - ma.keys()),
    }


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_manifest_if_any(wheel: Path) -> None:
    """A wheel that carries a kbuild manifest must carry a valid one (checked before the rebuild)."""
    from kbuild.build.manifest import MANIFEST_NAME, wheel_manifest

    with open_wheel(wheel) as zf:
        has = any(n.count("/") == 1 and n.endswith(f".dist-info/{MANIFEST_NAME}") for n in zf.namelist())
    if has:
        wheel_manifest(wheel)


def rebuild(project: Path, out: Path, *, epoch: int, isolation: bool) -> Path:
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(project)]
    if not isolation:
        cmd.insert(5, "--no-build-isolation")
    env = dict(os.environ)  # the child's environment: the build reads KBUILD_* through the settings model
    env["SOURCE_DATE_EPOCH"] = str(epoch)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise ToolError("rebuilding the wheel", cmd, proc.returncode, proc.stdout + proc.stderr)
    wheels = sorted(out.glob("*.whl"))
    if len(wheels) != 1:
        raise KBuildError(f"rebuilding {project} gave {len(wheels)} wheels in {out}")
    return wheels[0]


def run(args: argparse.Namespace) -> int:
    # absolute, links kept: resolving a loop of links raises; opening the wheel says what is wrong with it
    wheel = Path(os.path.abspath(args.wheel))
    if not os.path.lexists(wheel):
        raise UsageError(f"{wheel}: no such wheel")
    if not args.project:
        raise UsageError("--project: empty path; give the project's source directory (default: .)")
    project = Path(os.path.abspath(args.project))
    if not (project / "pyproject.toml").is_file():
        raise UsageError(f"{project}: no pyproject.toml; pass --project DIR, the source directory of the wheel")
    epoch = wheel_epoch(wheel)
    check_manifest_if_any(wheel)
    with tempfile.TemporaryDirectory(prefix="kbuild-verify-") as tmp:
        rebuilt = rebuild(project, Path(tmp), epoch=epoch, isolation=args.isolation)
        result = compare_wheels(wheel, rebuilt)
    result.update({"wheel": str(wheel), "rebuilt_name": rebuilt.name, "project": str(project),
                   "source_date_epoch": epoch})
    if args.json:
        emit_json(result)
    elif result["identical"]:
        info(f"{wheel.name}: identical to a rebuild from {project} (sha256 {result['wheel_sha256'][:16]}…)")
    else:
        rows = [(table_text(n), "contents differ") for n in result["differing"]]
        rows += [(table_text(n), "zip metadata differs") for n in result["differing_zip_metadata"]]
        rows += [(table_text(n), "only in the wheel") for n in result["only_in_wheel"]]
        rows += [(table_text(n), "only in the rebuild") for n in result["only_in_rebuild"]]
        print_table(table_text(f"{wheel.name}: differs from a rebuild from {project}"), ["member", "difference"],
                    rows)
    return 0 if result["identical"] else DIFFERS

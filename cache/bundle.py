"""Bundles: move a prewarmed store to a machine without a remote (``kbuild cache export/import``).

A bundle is a tar archive (gzip-compressed when the file name ends in ``.gz`` or ``.tgz``) of

* ``kbuild-bundle.json`` — ``{"format": "kbuild-bundle/1", "keys": [...]}``, always first;
* ``ac/<key>`` — each entry's record, byte for byte as stored (signatures included);
* ``cas/<sha256>`` — each cubin once.

Export is deterministic: members sorted, mtime 0, uid/gid 0, no user names, mode 0644, USTAR
format, gzip header without name or time. Exporting the same entries twice gives the same bytes.

Import reads the archive in memory without extracting anything and accepts only regular files
with exactly those names: absolute paths, ``..``, links, devices and directories are rejected
(tar-slip). Every record's key and metadata digest and every cubin's sha256 are checked, and
with a secret every signature, *before* anything is written; on any problem the store is left
unchanged and :class:`BundleError` (exit 2) names the bundle and the member.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbuild.errors import BundleError

from .store import (
    Artefact,
    IntegrityError,
    Record,
    SignatureError,
    Tier,
    check_blob,
    check_signature,
    parse_record,
    sha256_hex,
)

BUNDLE_FORMAT = "kbuild-bundle/1"
MANIFEST = "kbuild-bundle.json"
MAX_MEMBER_BYTES = 1 << 30
_MEMBER = re.compile(r"^(ac|cas)/([0-9a-f]{64})$")


@dataclass(frozen=True)
class BundleReport:
    path: str
    entries: int
    blobs: int
    bytes: int
    imported: int = 0
    already_present: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _is_gzip_name(path: Path) -> bool:
    return path.name.endswith((".gz", ".tgz"))


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    tar.addfile(info, io.BytesIO(data))


def export_bundle(tier: Tier, path: str | os.PathLike[str], *, target: str | None = None) -> BundleReport:
    """Write the verified entries of ``tier`` (only those whose ``meta["target"]`` is ``target``,
    when given) to a deterministic bundle at ``path``, atomically. Damaged entries are skipped
    (and reported by the tier)."""
    path = Path(path)
    records: dict[str, bytes] = {}
    blobs: dict[str, bytes] = {}
    for key in sorted(tier.keys()):
        found = tier.fetch(key, count=False)
        if found is None:
            continue
        art, raw = found
        if target is not None and art.meta.get("target") != target:
            continue
        records[key] = raw
        blobs[art.cubin_sha256] = art.cubin
    manifest = json.dumps({"format": BUNDLE_FORMAT, "keys": sorted(records)}, indent=1, sort_keys=True).encode()
    fd, tmp = tempfile.mkstemp(prefix=".bundle-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as raw_file:
            stream: Any = raw_file
            gz = None
            if _is_gzip_name(path):
                gz = gzip.GzipFile(filename="", mode="wb", fileobj=raw_file, mtime=0, compresslevel=6)
                stream = gz
            with tarfile.open(fileobj=stream, mode="w", format=tarfile.USTAR_FORMAT) as tar:
                _add(tar, MANIFEST, manifest)
                for key in sorted(records):
                    _add(tar, f"ac/{key}", records[key])
                for digest in sorted(blobs):
                    _add(tar, f"cas/{digest}", blobs[digest])
            if gz is not None:
                gz.close()
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return BundleReport(path=str(path), entries=len(records), blobs=len(blobs),
                        bytes=path.stat().st_size)


def _read_members(path: Path) -> dict[str, bytes]:
    """Every member's bytes, after rejecting anything but the expected regular files."""
    where = str(path)
    try:
        tar = tarfile.open(path, mode="r:*")
    except FileNotFoundError:
        raise BundleError(f"{where}: no such bundle") from None
    except IsADirectoryError:
        raise BundleError(f"{where}: is a directory, not a kbuild bundle") from None
    except tarfile.ReadError:
        raise BundleError(f"{where}: not a kbuild bundle (not a tar or tar.gz archive)") from None
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise BundleError(f"{where}: not a kbuild bundle ({exc})") from None
    members: dict[str, bytes] = {}
    try:
        with tar:
            for m in tar:
                name = m.name
                if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
                    raise BundleError(f"{where}: member {name!r} has an absolute path; refusing the bundle")
                if ".." in name.replace("\\", "/").split("/"):
                    raise BundleError(f"{where}: member {name!r} contains '..'; refusing the bundle")
                if m.issym() or m.islnk():
                    raise BundleError(f"{where}: member {name!r} is a link (to {m.linkname!r}); refusing the bundle")
                if not m.isreg():
                    raise BundleError(f"{where}: member {name!r} is not a regular file; refusing the bundle")
                if name != MANIFEST and not _MEMBER.match(name):
                    raise BundleError(f"{where}: unexpected member {name!r} (a bundle holds {MANIFEST}, ac/<key> "
                                      "and cas/<sha256> only)")
                if name in members:
                    raise BundleError(f"{where}: member {name!r} appears twice")
                if m.size > MAX_MEMBER_BYTES:
                    raise BundleError(f"{where}: member {name!r} is {m.size} bytes, over the {MAX_MEMBER_BYTES} limit")
                f = tar.extractfile(m)
                if f is None:  # pragma: no cover - regular files always have data
                    raise BundleError(f"{where}: member {name!r} has no data")
                members[name] = f.read()
    except BundleError:
        raise
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise BundleError(f"{where}: not a kbuild bundle (damaged archive: {exc})") from None
    return members


def read_bundle(path: str | os.PathLike[str], *, secret: str | None = None) -> list[tuple[Artefact, bytes]]:
    """Every entry of a bundle as (artefact, raw record), fully verified; :class:`BundleError` otherwise."""
    path = Path(path)
    where = str(path)
    members = _read_members(path)
    if MANIFEST not in members:
        raise BundleError(f"{where}: not a kbuild bundle ({MANIFEST} is missing)")
    try:
        manifest = json.loads(members[MANIFEST])
        if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
            raise ValueError(f"format is not {BUNDLE_FORMAT}")
        keys = manifest["keys"]
        if not isinstance(keys, list):
            raise ValueError("keys is not a list")
    except (ValueError, KeyError) as exc:
        raise BundleError(f"{where}: {MANIFEST}: not a kbuild bundle manifest ({exc})") from None
    records = {m.group(2): data for name, data in members.items() if (m := _MEMBER.match(name)) and m.group(1) == "ac"}
    blobs = {m.group(2): data for name, data in members.items() if (m := _MEMBER.match(name)) and m.group(1) == "cas"}
    if sorted(records) != sorted(str(k) for k in keys):
        raise BundleError(f"{where}: {MANIFEST} lists other keys than the ac/ members")
    for digest, blob in sorted(blobs.items()):
        if sha256_hex(blob) != digest:
            raise BundleError(f"{where}: member cas/{digest}: sha256 of its bytes does not match its name")
    out: list[tuple[Artefact, bytes]] = []
    for key in sorted(records):
        raw = records[key]
        try:
            rec: Record = parse_record(key, raw)
            if secret is not None:
                check_signature(rec, secret)
        except (IntegrityError, SignatureError) as exc:
            raise BundleError(f"{where}: member ac/{key}: {exc}") from None
        found = blobs.get(rec.cubin_sha256)
        if found is None:
            raise BundleError(f"{where}: member ac/{key}: its cubin cas/{rec.cubin_sha256} is not in the bundle")
        blob = found
        try:
            check_blob(rec, blob)
        except IntegrityError as exc:
            raise BundleError(f"{where}: member cas/{rec.cubin_sha256}: {exc}") from None
        art = Artefact(key=key, cubin=blob, meta=rec.meta, cubin_sha256=rec.cubin_sha256, meta_sha256=rec.meta_sha256)
        out.append((art, raw))
    return out


def import_bundle(tier: Tier, path: str | os.PathLike[str], *, secret: str | None = None) -> BundleReport:
    """Verify the whole bundle, then add its entries to ``tier`` (existing keys are kept as they are).

    With ``secret``, every record must carry a valid signature (a bundle is untrusted input).
    """
    path = Path(path)
    entries = read_bundle(path, secret=secret)
    imported = present = 0
    for art, raw in entries:
        if tier.store_record(art, raw):
            imported += 1
        else:
            present += 1
    return BundleReport(path=str(path), entries=len(entries), blobs=len({a.cubin_sha256 for a, _ in entries}),
                        bytes=path.stat().st_size, imported=imported, already_present=present)


__all__ = ["BUNDLE_FORMAT", "BundleReport", "export_bundle", "import_bundle", "read_bundle"]

"""Bundles: move a prewarmed store to a machine without a remote (``kbuild cache export/import``).

A bundle is a tar archive (gzip-compressed when the file name ends in ``.gz`` or ``.tgz``) of

* ``kbuild-bundle.json`` — ``{"format": "kbuild-bundle/1", "keys": [...]}``, always first;
* ``ac/<key>`` — each entry's record, byte for byte as stored (signatures included);
* ``cas/<sha256>`` — each cubin once.

Export is deterministic: members sorted, mtime 0, uid/gid 0, no user names, mode 0644, USTAR
format, gzip header without name or time. Exporting the same entries twice gives the same bytes.

Import extracts nothing to disk and accepts only regular files with exactly those names:
absolute paths, ``..``, links, devices and directories are rejected (tar-slip). It reads the
archive three times, never holding more than one cubin in memory:

1. the headers only: names, types, and sizes against the caps (a record at most
   :data:`~kbuild.cache.record.MAX_RECORD_BYTES`, a cubin :data:`~kbuild.cache.record.MAX_BLOB_BYTES`,
   the manifest :data:`MAX_MANIFEST_BYTES`, all members together ``max_bytes`` uncompressed), so
   that a small archive that expands to gigabytes is refused before any member is read;
2. every record's key and metadata digest, and with a secret its signature, and every cubin's
   sha256, streamed, *before* anything is written;
3. the entries, one cubin at a time, into the store.

On any problem the store is left unchanged and :class:`BundleError` (exit 2) names the bundle and
the member. Export, likewise, holds one cubin at a time.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kbuild.errors import BundleError, StoreUsageError
from kbuild.fsutil import open_regular
from kbuild.jsonio import parse_json

from .record import (
    MAX_BLOB_BYTES,
    MAX_RECORD_BYTES,
    Artefact,
    IntegrityError,
    Record,
    SignatureError,
    check_blob,
    check_signature,
    parse_record,
    sha256_hex,
)
from .tier import Tier

BUNDLE_FORMAT = "kbuild-bundle/1"
MANIFEST = "kbuild-bundle.json"
#: The manifest lists every key (about 70 bytes each): 16 MiB is some 240,000 entries.
MAX_MANIFEST_BYTES = 16 << 20
#: Default cap on the uncompressed total of a bundle's members: the local store's default size bound
#: (``kbuild cache import`` passes its store's own ``store_max_bytes``: a bigger bundle could not stay in it).
MAX_BUNDLE_BYTES = 10 << 30
_MEMBER = re.compile(r"^(ac|cas)/([0-9a-f]{64})$")
_CHUNK = 1 << 20


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
    (and reported by the tier). One cubin at a time is held in memory."""
    path = Path(path)
    records: dict[str, bytes] = {}
    digests: dict[str, int] = {}
    for key in sorted(tier.keys()):
        found = tier.fetch(key, count=False)
        if found is None:
            continue
        art, raw = found
        if target is not None and art.meta.get("target") != target:
            continue
        records[key] = raw
        digests[art.cubin_sha256] = art.size
    manifest = json.dumps({"format": BUNDLE_FORMAT, "keys": sorted(records)}, indent=1, sort_keys=True).encode()
    if path.is_dir():
        raise StoreUsageError(f"{path}: is a directory; give a file name for the bundle")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".bundle-", dir=path.parent)
    except OSError as exc:
        raise StoreUsageError(f"{path}: cannot write the bundle: {exc.strerror or exc}") from None
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
                for digest in sorted(digests):
                    try:
                        blob = tier.backend.get_blob(digest, digests[digest])
                    except IntegrityError:  # over the size its record states, or no value at all
                        blob = None
                    if blob is None or len(blob) != digests[digest] or sha256_hex(blob) != digest:
                        raise BundleError(f"{path}: cubin {digest} changed in the store {tier.name} during the "
                                          "export; nothing was written, run the export again")
                    _add(tar, f"cas/{digest}", blob)
            if gz is not None:
                gz.close()
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise StoreUsageError(f"{path}: cannot write the bundle: {exc.strerror or exc}") from None
        raise
    return BundleReport(path=str(path), entries=len(records), blobs=len(digests),
                        bytes=path.stat().st_size)


@contextlib.contextmanager
def _members(path: Path) -> Iterator[Iterator[tuple[tarfile.TarInfo, tarfile.TarFile]]]:
    """The archive's members in order, each checked (name, type, size cap) before the caller sees it;
    :class:`BundleError` for anything that is not a kbuild bundle."""
    where = str(path)
    try:  # a regular file only: a FIFO would block, /dev/zero reads as an endless run of empty tar blocks
        raw = open_regular(path)
    except FileNotFoundError:
        raise BundleError(f"{where}: no such bundle") from None
    except IsADirectoryError:
        raise BundleError(f"{where}: is a directory, not a kbuild bundle") from None
    except OSError as exc:
        raise BundleError(f"{where}: cannot read the bundle: {exc.strerror or exc}") from None
    try:
        tar = tarfile.open(fileobj=raw, mode="r:*")
    except tarfile.ReadError:
        raw.close()
        raise BundleError(f"{where}: not a kbuild bundle (not a tar or tar.gz archive)") from None
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raw.close()
        raise BundleError(f"{where}: not a kbuild bundle ({exc})") from None

    def each() -> Iterator[tuple[tarfile.TarInfo, tarfile.TarFile]]:
        seen: set[str] = set()
        for m in tar:
            _check_member(where, m, seen)
            yield m, tar

    try:
        with raw, tar:
            yield each()
    except BundleError:
        raise
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise BundleError(f"{where}: not a kbuild bundle (damaged archive: {exc})") from None


def _check_member(where: str, m: tarfile.TarInfo, seen: set[str]) -> None:
    name = m.name
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise BundleError(f"{where}: member {name!r} has an absolute path; refusing the bundle")
    if ".." in name.replace("\\", "/").split("/"):
        raise BundleError(f"{where}: member {name!r} contains '..'; refusing the bundle")
    if m.issym() or m.islnk():
        raise BundleError(f"{where}: member {name!r} is a link (to {m.linkname!r}); refusing the bundle")
    if not m.isreg():
        raise BundleError(f"{where}: member {name!r} is not a regular file; refusing the bundle")
    match = _MEMBER.fullmatch(name)
    if name != MANIFEST and not match:
        raise BundleError(f"{where}: unexpected member {name!r} (a bundle holds {MANIFEST}, ac/<key> "
                          "and cas/<sha256> only)")
    if name in seen:
        raise BundleError(f"{where}: member {name!r} appears twice")
    seen.add(name)
    cap, what = ((MAX_MANIFEST_BYTES, "a manifest") if match is None else
                 (MAX_RECORD_BYTES, "a record") if match.group(1) == "ac" else (MAX_BLOB_BYTES, "a cubin"))
    if m.size > cap:
        raise BundleError(f"{where}: member {name!r} is {m.size} bytes, over the {cap}-byte cap for {what}; "
                          "refusing the bundle")


def _data(tar: tarfile.TarFile, m: tarfile.TarInfo) -> IO[bytes]:
    f = tar.extractfile(m)
    if f is None:  # pragma: no cover - regular files always have data
        raise BundleError(f"member {m.name!r} has no data")
    return f


def _scan(path: Path, max_bytes: int) -> None:
    """Pass 1: every header, and the members' total size against ``max_bytes``, before any member is read."""
    total = 0
    with _members(path) as members:
        for m, _ in members:
            total += m.size
            if total > max_bytes:
                raise BundleError(f"{path}: the members add up to more than {max_bytes} bytes uncompressed (at "
                                  f"{m.name!r}); refusing the bundle before extracting anything")


@dataclass(frozen=True)
class _Verified:
    records: dict[str, tuple[Record, bytes]]
    blob_sizes: dict[str, int]


def _verify(path: Path, secret: str | None) -> _Verified:
    """Pass 2: the manifest, every record (and signature), every cubin's sha256 (streamed)."""
    where = str(path)
    manifest_raw: bytes | None = None
    raw_records: dict[str, bytes] = {}
    blob_sizes: dict[str, int] = {}
    bad_blob: str | None = None  # reported after the manifest: a tar that is no bundle says so first
    with _members(path) as members:
        for m, tar in members:
            f = _data(tar, m)
            match = _MEMBER.fullmatch(m.name)
            if match is None:
                manifest_raw = f.read()
            elif match.group(1) == "ac":
                raw_records[match.group(2)] = f.read()
            else:
                digest, h, size = match.group(2), hashlib.sha256(), 0
                while chunk := f.read(_CHUNK):
                    h.update(chunk)
                    size += len(chunk)
                if h.hexdigest() != digest and bad_blob is None:
                    bad_blob = f"{where}: member cas/{digest}: sha256 of its bytes does not match its name"
                blob_sizes[digest] = size
    if manifest_raw is None:
        raise BundleError(f"{where}: not a kbuild bundle ({MANIFEST} is missing)")
    try:
        manifest = parse_json(manifest_raw)
        if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
            raise ValueError(f"format is not {BUNDLE_FORMAT}")
        keys = manifest["keys"]
        if not isinstance(keys, list):
            raise ValueError("keys is not a list")
    except (ValueError, KeyError) as exc:
        raise BundleError(f"{where}: {MANIFEST}: not a kbuild bundle manifest ({exc})") from None
    if bad_blob is not None:
        raise BundleError(bad_blob)
    if sorted(raw_records) != sorted(str(k) for k in keys):
        raise BundleError(f"{where}: {MANIFEST} lists other keys than the ac/ members")
    records: dict[str, tuple[Record, bytes]] = {}
    for key in sorted(raw_records):
        raw = raw_records[key]
        try:
            rec: Record = parse_record(key, raw)
            if secret is not None:
                check_signature(rec, secret)
        except (IntegrityError, SignatureError) as exc:
            raise BundleError(f"{where}: member ac/{key}: {exc}") from None
        if rec.cubin_sha256 not in blob_sizes:
            raise BundleError(f"{where}: member ac/{key}: its cubin cas/{rec.cubin_sha256} is not in the bundle")
        if blob_sizes[rec.cubin_sha256] != rec.cubin_size:
            raise BundleError(f"{where}: member cas/{rec.cubin_sha256}: cubin has {blob_sizes[rec.cubin_sha256]} "
                              f"bytes, record says {rec.cubin_size}")
        records[key] = (rec, raw)
    return _Verified(records, blob_sizes)


def iter_bundle(path: str | os.PathLike[str], *, secret: str | None = None,
                max_bytes: int = MAX_BUNDLE_BYTES) -> Iterator[tuple[Artefact, bytes]]:
    """Every entry of a bundle as (artefact, raw record), fully verified before the first one is
    yielded (:class:`BundleError` otherwise), then one cubin at a time."""
    path = Path(path)
    _scan(path, max_bytes)
    verified = _verify(path, secret)
    by_digest: dict[str, list[str]] = {}
    for key, (rec, _) in verified.records.items():
        by_digest.setdefault(rec.cubin_sha256, []).append(key)

    def entries() -> Iterator[tuple[Artefact, bytes]]:  # pass 3
        with _members(path) as members:
            for m, tar in members:
                match = _MEMBER.fullmatch(m.name)
                if match is None or match.group(1) != "cas" or match.group(2) not in by_digest:
                    continue
                blob = _data(tar, m).read()
                for key in sorted(by_digest[match.group(2)]):
                    rec, raw = verified.records[key]
                    try:
                        check_blob(rec, blob)  # the file could have changed since pass 2
                    except IntegrityError as exc:
                        raise BundleError(f"{path}: member cas/{rec.cubin_sha256}: {exc}") from None
                    yield Artefact(key=key, cubin=blob, meta=rec.meta, cubin_sha256=rec.cubin_sha256,
                                   meta_sha256=rec.meta_sha256), raw

    return entries()


def read_bundle(path: str | os.PathLike[str], *, secret: str | None = None,
                max_bytes: int = MAX_BUNDLE_BYTES) -> list[tuple[Artefact, bytes]]:
    """Every entry of a bundle as (artefact, raw record), fully verified; :class:`BundleError` otherwise.
    Holds every cubin in memory: :func:`iter_bundle` holds one at a time."""
    return list(iter_bundle(path, secret=secret, max_bytes=max_bytes))


def import_bundle(tier: Tier, path: str | os.PathLike[str], *, secret: str | None = None,
                  max_bytes: int = MAX_BUNDLE_BYTES,
                  verified: Iterator[tuple[Artefact, bytes]] | None = None) -> BundleReport:
    """Verify the whole bundle, then add its entries to ``tier`` (existing keys are kept as they are).

    With ``secret``, every record must carry a valid signature (a bundle is untrusted input).
    ``max_bytes`` caps the members' uncompressed total, checked before any member is read. ``verified``: the
    entries :func:`iter_bundle` gave for ``path`` already (verified before the store was opened: a file that
    is no bundle then changes nothing, not even the store's database).
    """
    path = Path(path)
    imported = present = entries = 0
    digests: set[str] = set()
    for art, raw in verified if verified is not None else iter_bundle(path, secret=secret, max_bytes=max_bytes):
        entries += 1
        digests.add(art.cubin_sha256)
        if tier.store_record(art, raw):
            imported += 1
        else:
            present += 1
    return BundleReport(path=str(path), entries=entries, blobs=len(digests), bytes=path.stat().st_size,
                        imported=imported, already_present=present)


__all__ = ["BUNDLE_FORMAT", "MAX_BUNDLE_BYTES", "MAX_MANIFEST_BYTES", "BundleReport", "export_bundle",
           "import_bundle", "iter_bundle", "read_bundle"]

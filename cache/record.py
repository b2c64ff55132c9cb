"""The artefact and its record: the format every tier stores, its digests and its signature.

An **artefact** is a cubin plus a metadata record. It is stored content-addressed in the Bazel
remote-cache layout that every backend shares:

* the cubin bytes as a *blob* under their sha256 (``cas/<sha256>``);
* a JSON *record* under the artefact key (``ac/<key>``)::

      {"format": "kbuild-artefact/1", "key": ..., "cubin_sha256": ..., "cubin_size": ...,
       "meta": {...}, "meta_sha256": ..., "signature": "hmac-sha256:..."}

  written as canonical JSON (:func:`kbuild.canonical.canonical_json`: sorted keys, no spaces, UTF-8).
  ``signature`` is present when a secret is configured: HMAC-SHA256 over the canonical record without
  the signature. It binds key, cubin digest and metadata, so a record cannot be planted, altered or
  moved to another key.

This module makes records (:meth:`Artefact.record`) and checks them (:func:`parse_record`,
:func:`check_signature`, :func:`check_blob`); it does no I/O. The caps on what a tier may hand back
(:data:`MAX_RECORD_BYTES`, :data:`MAX_BLOB_BYTES`) live here too, next to the format they bound.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kbuild.canonical import canonical_json
from kbuild.errors import StoreUsageError
from kbuild.jsonio import parse_json

RECORD_FORMAT = "kbuild-artefact/1"
SIGNATURE_PREFIX = "hmac-sha256:"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")

#: Largest record any tier or bundle may hand us. A record is a small JSON document: the key, two
#: digests and the metadata the pipeline writes, a few KiB. 1 MiB leaves ample room and bounds what a
#: hostile remote can make a build read (one answered 1.5 GB and cost 1.9 GB of memory).
MAX_RECORD_BYTES = 1 << 20

#: Largest cubin stored or accepted. Triton's cubins are KiB to a few MiB and the biggest fat kernels
#: tens of MiB; 256 MiB is ten times that and still a bounded read. A bigger answer is a damaged or
#: hostile entry: a miss, never an allocation of whatever size a server claims.
MAX_BLOB_BYTES = 256 << 20

#: Metadata fields the build pipeline records (the store requires none of them; ``target``
#: is used by ``export --target`` and ``compile_seconds``/``tune_seconds`` by the statistics).
META_FIELDS = (
    "key_components", "kernel", "symbol", "target", "tuned", "baseline_ns", "baseline_spread",
    "tuned_ns", "tuned_spread", "speedup", "evaluations", "gpu_name", "driver", "seed",
    "schedule_diff", "verification", "kbuild_version", "created_at", "compile_seconds", "tune_seconds",
)


def is_digest(value: Any) -> bool:
    """Whether ``value`` is a lowercase hex sha256 (the form of keys and blob digests)."""
    return isinstance(value, str) and bool(_HEX64.fullmatch(value))


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_key(key: str) -> str:
    if not is_digest(key):
        raise StoreUsageError(f"artefact key {key!r} is not a sha256 (64 lowercase hex digits)")
    return key


class IntegrityError(Exception):
    """A stored entry does not match its digests (or cannot be parsed)."""


class SignatureError(Exception):
    """A record is unsigned or wrongly signed while a secret is configured."""


class EntryTooLarge(IntegrityError):
    """A tier answered with a record or cubin over its cap (raised by backends before reading it all)."""


class UnreadableEntry(IntegrityError):
    """What a tier holds under one name is no value kbuild could have written: a Redis key of another type
    (a list), a WebDAV collection (a directory) where a record or cubin belongs, a local value that is not
    bytes. Raised by backends for that name alone: the tier treats it as a corrupt entry (a miss for that
    key, deleted from writable tiers) and a writer replaces it; the tier as a whole stays available."""


@dataclass(frozen=True)
class Artefact:
    """A cubin with its metadata and digests. Build one with :meth:`create`."""

    key: str
    cubin: bytes = field(repr=False)
    meta: dict[str, Any]
    cubin_sha256: str
    meta_sha256: str

    @classmethod
    def create(cls, key: str, cubin: bytes, meta: Mapping[str, Any]) -> Artefact:
        """Make an artefact and compute its digests.

        ``meta`` must be JSON data (no NaN); it is normalised through JSON so that the artefact
        compares equal to the one read back from any tier. ``created_at`` (UTC, ISO 8601) and
        ``kbuild_version`` are filled in when absent.
        """
        check_key(key)
        if not isinstance(cubin, (bytes, bytearray, memoryview)):
            raise TypeError(f"cubin must be bytes, got {type(cubin).__name__}")
        cubin = bytes(cubin)
        full = dict(meta)
        if "created_at" not in full:
            full["created_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if "kbuild_version" not in full:
            from kbuild import __version__

            full["kbuild_version"] = __version__
        try:
            encoded = canonical_json(full)
            parse_json(encoded)  # what every reader will do with it
        except (TypeError, ValueError, RecursionError) as exc:
            raise StoreUsageError(f"metadata of artefact {key} is not JSON data: {exc}") from None
        if len(encoded) > MAX_RECORD_BYTES - 4096:  # room for the key, digests and signature
            raise StoreUsageError(f"metadata of artefact {key} is {len(encoded)} bytes; a record holds at most "
                                  f"{MAX_RECORD_BYTES} bytes (MAX_RECORD_BYTES)")
        if len(cubin) > MAX_BLOB_BYTES:
            raise StoreUsageError(f"cubin of artefact {key} is {len(cubin)} bytes, over the {MAX_BLOB_BYTES}-byte "
                                  "cap of the store (MAX_BLOB_BYTES)")
        normalised = json.loads(encoded)
        return cls(key=key, cubin=cubin, meta=normalised, cubin_sha256=sha256_hex(cubin),
                   meta_sha256=sha256_hex(encoded))

    @property
    def size(self) -> int:
        return len(self.cubin)

    def record(self, secret: str | None = None) -> bytes:
        """The canonical JSON record of this artefact, signed when ``secret`` is given."""
        body: dict[str, Any] = {
            "format": RECORD_FORMAT,
            "key": self.key,
            "cubin_sha256": self.cubin_sha256,
            "cubin_size": len(self.cubin),
            "meta": self.meta,
            "meta_sha256": self.meta_sha256,
        }
        if secret is not None:
            body["signature"] = sign(body, secret)
        return canonical_json(body)


def sign(body: Mapping[str, Any], secret: str) -> str:
    unsigned = {k: v for k, v in body.items() if k != "signature"}
    mac = hmac.new(secret.encode("utf-8"), canonical_json(unsigned), hashlib.sha256).hexdigest()
    return SIGNATURE_PREFIX + mac


@dataclass(frozen=True)
class Record:
    """A parsed, self-consistent record (its blob not yet checked)."""

    key: str
    cubin_sha256: str
    cubin_size: int
    meta: dict[str, Any]
    meta_sha256: str
    signature: str | None
    raw: bytes = field(repr=False)


def parse_record(key: str, raw: bytes) -> Record:
    """Parse and check a record's shape, key and metadata digest; :class:`IntegrityError` otherwise."""
    try:
        body = parse_json(raw)
    except ValueError as exc:  # UnicodeDecodeError included
        raise IntegrityError(f"record is not JSON ({exc})") from None
    if not isinstance(body, dict) or body.get("format") != RECORD_FORMAT:
        raise IntegrityError("record has an unknown format")
    if body.get("key") != key:
        raise IntegrityError(f"record names key {body.get('key')!r}")
    digest, size, meta = body.get("cubin_sha256"), body.get("cubin_size"), body.get("meta")
    if not isinstance(digest, str) or not is_digest(digest) or not isinstance(size, int) or size < 0 \
            or not isinstance(meta, dict):
        raise IntegrityError("record lacks a valid cubin digest, size or metadata")
    try:
        meta_sha = sha256_hex(canonical_json(meta))
    except ValueError as exc:  # NaN, a lone surrogate: JSON that has no canonical form
        raise IntegrityError(f"metadata is not canonical JSON ({exc})") from None
    if body.get("meta_sha256") != meta_sha:
        raise IntegrityError("metadata digest does not match")
    signature = body.get("signature")
    if signature is not None and not isinstance(signature, str):
        raise IntegrityError("signature is not a string")
    return Record(key=key, cubin_sha256=digest, cubin_size=size, meta=meta, meta_sha256=meta_sha,
                  signature=signature, raw=raw)


def check_signature(record: Record, secret: str) -> None:
    if record.signature is None:
        raise SignatureError("record is not signed")
    try:
        expected = sign(parse_json(record.raw), secret).encode("ascii")
        given = record.signature.encode("utf-8")
    except ValueError:  # fields without a canonical form (a lone surrogate): it cannot have been signed
        raise SignatureError("record signature does not match the configured secret") from None
    if not hmac.compare_digest(expected, given):
        raise SignatureError("record signature does not match the configured secret")


def check_blob(record: Record, blob: bytes) -> None:
    if len(blob) != record.cubin_size:
        raise IntegrityError(f"cubin has {len(blob)} bytes, record says {record.cubin_size}")
    if sha256_hex(blob) != record.cubin_sha256:
        raise IntegrityError("cubin sha256 does not match")


__all__ = ["MAX_BLOB_BYTES", "MAX_RECORD_BYTES", "META_FIELDS", "RECORD_FORMAT", "SIGNATURE_PREFIX", "Artefact",
           "EntryTooLarge", "IntegrityError", "Record", "SignatureError", "UnreadableEntry", "check_blob", "check_key",
           "check_signature", "is_digest", "parse_record", "sha256_hex", "sign"]

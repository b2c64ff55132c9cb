"""The store interface, the artefact, and the tiered composition.

An **artefact** is a cubin plus a metadata record. It is stored content-addressed in the Bazel
remote-cache layout that every backend shares:

* the cubin bytes as a *blob* under their sha256 (``cas/<sha256>``);
* a JSON *record* under the artefact key (``ac/<key>``)::

      {"format": "kbuild-artefact/1", "key": ..., "cubin_sha256": ..., "cubin_size": ...,
       "meta": {...}, "meta_sha256": ..., "signature": "hmac-sha256:..."}

  written as canonical JSON (sorted keys, no spaces). ``signature`` is present when a secret is
  configured: HMAC-SHA256 over the canonical record without the signature. It binds key, cubin
  digest and metadata, so a record cannot be planted, altered or moved to another key.

Writes put the blob first and the record last, so a writer that dies in between leaves an
unreferenced blob (removed by ``gc``) and never a visible partial entry. Every read re-checks the
record's key, the metadata digest, the blob's size and sha256 and, when a secret is set, the
signature, in every tier, the local one included: an entry backfilled from a remote before the
secret was set is no more trustworthy than the remote was.

**Entries are immutable.** Putting a key that is already stored keeps the stored entry (first
writer wins) and is not an error: two machines that tune the same key at the same time both
succeed. When the cubin differs, the put is counted as a ``conflict`` and logged as a warning.
A stored record that fails verification (planted, damaged, unsigned or wrongly signed) is no
entry: a writer replaces it, compare-and-set where the backend can (``put_record(replace=)``),
so a record planted first cannot keep the legitimate one out.

A :class:`Tier` turns a raw :class:`Backend` (local diskcache, HTTP, Redis) into a verified
:class:`Store`; :class:`TieredStore` reads tiers in order, backfills faster writable tiers on a
hit in a slower one, writes every writable tier on ``put``, and turns remote failures into a
warning plus a miss (or a :class:`TierUnavailableError` when ``strict``).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import json
import logging
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from kbuild.errors import StoreError, StoreUsageError, TierUnavailableError

from .stats import StoreStats

if TYPE_CHECKING:
    from pathlib import Path

    from kbuild.config import Settings

log = logging.getLogger(__name__)

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

#: Deepest nesting of arrays and objects accepted in any JSON kbuild reads (records, metadata,
#: manifests). The pipeline's metadata nests a few levels; Python's parser and encoder recurse once
#: per level, so without a bound a hostile document ends in a RecursionError instead of a message.
MAX_JSON_DEPTH = 64

#: Metadata fields the build pipeline records (the store requires none of them; ``target``
#: is used by ``export --target`` and ``compile_seconds``/``tune_seconds`` by the statistics).
META_FIELDS = (
    "key_components", "kernel", "symbol", "target", "tuned", "baseline_ns", "baseline_spread",
    "tuned_ns", "tuned_spread", "speedup", "evaluations", "gpu_name", "driver", "seed",
    "schedule_diff", "verification", "kbuild_version", "created_at", "compile_seconds", "tune_seconds",
)


def is_digest(value: Any) -> bool:
    """Whether ``value`` is a lowercase hex sha256 (the form of keys and blob digests)."""
    return isinstance(value, str) and bool(_HEX64.match(value))


def check_key(key: str) -> str:
    if not is_digest(key):
        raise StoreUsageError(f"artefact key {key!r} is not a sha256 (64 lowercase hex digits)")
    return key


def canonical_json(value: Any) -> bytes:
    """The one byte encoding of JSON data used for digests and signatures."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parse_json(data: bytes | str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` that raises :class:`ValueError` (never :class:`RecursionError`) for a document nested
    deeper than ``max_depth``, as for any other malformed one."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise ValueError(f"nested more than {max_depth} levels deep") from None
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > max_depth:
                raise ValueError(f"nested more than {max_depth} levels deep")
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return value


class IntegrityError(Exception):
    """A stored entry does not match its digests (or cannot be parsed)."""


class SignatureError(Exception):
    """A record is unsigned or wrongly signed while a secret is configured."""


class EntryTooLarge(IntegrityError):
    """A tier answered with a record or cubin over its cap (raised by backends before reading it all)."""


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


@dataclass(frozen=True)
class EntryInfo:
    """What ``ls`` shows of an entry: its record, without reading the cubin."""

    key: str
    cubin_sha256: str
    cubin_size: int
    meta: dict[str, Any]
    signed: bool
    tier: str

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "cubin_sha256": self.cubin_sha256, "cubin_size": self.cubin_size,
                "signed": self.signed, "tier": self.tier, "meta": self.meta}


@dataclass(frozen=True)
class VerifyProblem:
    """One entry that failed ``verify``."""

    tier: str
    key: str
    problem: str
    fixed: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"tier": self.tier, "key": self.key, "problem": self.problem, "fixed": self.fixed}


# ----------------------------------------------------------------------------------------------
# The two interfaces.

@runtime_checkable
class Backend(Protocol):
    """Raw storage of records (``ac/<key>``) and blobs (``cas/<sha256>``). One file per backend.

    Backends do no verification. Failures of a remote raise :class:`TierUnavailableError`;
    local failures raise :class:`StoreError` (or :class:`StoreFullError`).
    """

    location: str
    """Where the data lives, for messages (never with credentials)."""

    def get_record(self, key: str) -> bytes | None:
        """The record, or None; :class:`EntryTooLarge` past :data:`MAX_RECORD_BYTES` (not read whole)."""
    def get_blob(self, digest: str) -> bytes | None:
        """The blob, or None; :class:`EntryTooLarge` past :data:`MAX_BLOB_BYTES` (not read whole)."""
    def has_record(self, key: str) -> bool: ...
    def has_blob(self, digest: str) -> bool: ...
    def put_blob(self, digest: str, data: bytes) -> None:
        """Store a blob under its sha256 (idempotent: the same digest always means the same bytes)."""
    def put_record(self, key: str, data: bytes, replace: bytes | None = None) -> bool:
        """Store a record after its blob; False when a record for ``key`` already exists, unless that
        record is byte for byte ``replace`` (one the tier found invalid), which is replaced: atomically
        (compare-and-set) where the backend can."""
    def delete_record(self, key: str) -> bool: ...
    def delete_blob(self, digest: str) -> bool: ...
    def record_keys(self) -> Iterator[str]: ...
    def close(self) -> None: ...


@runtime_checkable
class Store(Protocol):
    """The store interface the build pipeline uses. Implemented by :class:`Tier` and :class:`TieredStore`."""

    def get(self, key: str) -> Artefact | None:
        """The verified artefact, or None (miss, corrupt or rejected entry)."""
    def put(self, art: Artefact) -> None:
        """Store ``art`` (a no-op when the key is already stored: entries are immutable)."""
    def contains(self, key: str) -> bool: ...
    def delete(self, key: str) -> bool: ...
    def keys(self) -> Iterator[str]: ...
    def entries(self) -> Iterator[EntryInfo]: ...
    def close(self) -> None: ...


# ----------------------------------------------------------------------------------------------
# One tier: a backend plus verification, trust and statistics.

class Tier:
    """A verified :class:`Store` over one :class:`Backend`.

    When ``secret`` is set, every record must carry its signature. Corrupt entries are deleted
    only from ``writable`` tiers; wrongly signed ones are skipped on reads (another team's secret
    is not proof of damage), replaced by writes and evicted by ``verify --fix``.
    """

    def __init__(self, backend: Backend, *, name: str | None = None, writable: bool = True,
                 secret: str | None = None, stats: StoreStats | None = None,
                 read_only_reason: str | None = None) -> None:
        self.backend = backend
        self.name = name or backend.location
        self.writable = writable
        self.read_only_reason = read_only_reason
        """Why a tier that should be writable cannot be (a read-only local store): puts skip it with a warning."""
        self.secret = secret
        self.stats = stats if stats is not None else StoreStats()

    def __repr__(self) -> str:
        return f"Tier({self.name!r}, writable={self.writable})"

    # -- reads

    def fetch(self, key: str, *, count: bool = True) -> tuple[Artefact, bytes] | None:
        """The verified artefact and its raw record, or None. Damaged entries are reported and
        deleted (writable tiers); wrongly signed ones are reported and skipped."""
        return self._lookup(key, count=count)[0]

    def _lookup(self, key: str, *, count: bool = True) -> tuple[tuple[Artefact, bytes] | None, bytes | None]:
        """(:meth:`fetch`'s answer, the raw record when one is stored but invalid and was left in place)."""
        check_key(key)
        try:
            raw = self.backend.get_record(key)
        except EntryTooLarge as exc:
            self._corrupt(key, None, str(exc))
            if count:
                self.stats.count(self.name, "misses")
            return None, None
        if raw is None:
            if count:
                self.stats.count(self.name, "misses")
            return None, None
        record: Record | None = None
        try:
            record = parse_record(key, raw)
            if self.secret is not None:
                check_signature(record, self.secret)
            try:
                blob = self.backend.get_blob(record.cubin_sha256)
            except EntryTooLarge as exc:
                self._corrupt(key, record, str(exc), blob_bad=True)
                if count:
                    self.stats.count(self.name, "misses")
                return None, raw
            if blob is None:
                # The blob was evicted (or its writer died): a plain miss; drop the dangling record.
                log.debug("%s: entry %s has no cubin; dropping the record", self.name, key)
                if self.writable:
                    self._discard(key)
                if count:
                    self.stats.count(self.name, "misses")
                return None, raw
            try:
                check_blob(record, blob)
            except IntegrityError as exc:
                self._corrupt(key, record, str(exc), blob_bad=True)
                if count:
                    self.stats.count(self.name, "misses")
                return None, raw
        except SignatureError as exc:
            log.warning("%s: rejected entry %s: %s; treated as a miss (`kbuild cache verify --fix` evicts it)",
                        self.name, key, exc)
            self.stats.count(self.name, "rejected")
            if count:
                self.stats.count(self.name, "misses")
            return None, raw
        except IntegrityError as exc:
            self._corrupt(key, record, str(exc))
            if count:
                self.stats.count(self.name, "misses")
            return None, raw
        if count:
            self.stats.count(self.name, "hits")
            self.stats.count(self.name, "bytes_read", len(blob) + len(raw))
        art = Artefact(key=key, cubin=blob, meta=record.meta, cubin_sha256=record.cubin_sha256,
                       meta_sha256=record.meta_sha256)
        return (art, raw), None

    def _corrupt(self, key: str, record: Record | None, why: str, *, blob_bad: bool = False) -> None:
        self.stats.count(self.name, "corrupt")
        action = "deleted it" if self.writable else "the tier is read-only, left it"
        log.warning("%s: corrupt entry %s (%s); treated as a miss, %s", self.name, key, why, action)
        if self.writable:
            self._discard(key, record.cubin_sha256 if record is not None and blob_bad else None)

    def _discard(self, key: str, digest: str | None = None) -> None:
        """Delete a bad record (and blob). A tier that refuses (e.g. no DELETE) is logged, not fatal:
        the entry is a miss either way."""
        try:
            self.backend.delete_record(key)
            if digest is not None:
                self.backend.delete_blob(digest)
        except StoreError as exc:
            log.warning("%s: could not delete the damaged entry %s: %s", self.name, key, exc)

    def get(self, key: str) -> Artefact | None:
        found = self.fetch(key)
        if found is None:
            return None
        self.stats.saved(found[0].meta)
        return found[0]

    def contains(self, key: str) -> bool:
        """Whether a record for ``key`` is present (not verified; :meth:`get` verifies)."""
        return self.backend.has_record(check_key(key))

    def keys(self) -> Iterator[str]:
        return self.backend.record_keys()

    def __iter__(self) -> Iterator[str]:
        return self.keys()

    def entries(self) -> Iterator[EntryInfo]:
        """Records of every entry (unverified cubins; unparseable records are skipped and logged)."""
        for key in self.keys():
            try:
                raw = self.backend.get_record(key)
                if raw is None:
                    continue
                rec = parse_record(key, raw)
            except IntegrityError as exc:
                log.warning("%s: unreadable record %s: %s", self.name, key, exc)
                continue
            yield EntryInfo(key=key, cubin_sha256=rec.cubin_sha256, cubin_size=rec.cubin_size,
                            meta=rec.meta, signed=rec.signature is not None, tier=self.name)

    # -- writes

    def _check_writable(self) -> None:
        if not self.writable:
            raise StoreError(f"{self.name}: tier is read-only (set writable = true on trusted machines only)")

    def put(self, art: Artefact) -> None:
        self.store_record(art, art.record(self.secret))

    def store_record(self, art: Artefact, record: bytes) -> bool:
        """Write ``art`` with the given record bytes (blob first, record last). False when the key
        was already stored (kept as is: entries are immutable). A stored record that fails
        verification is replaced (compare-and-set on the bytes that failed)."""
        self._check_writable()
        with self._transaction():
            existing, invalid = self._lookup(art.key, count=False)
            if existing is not None:
                self._conflict(art, existing[0])
                return False
            fresh = not self.backend.has_blob(art.cubin_sha256)
            self.backend.put_blob(art.cubin_sha256, art.cubin)
            try:
                if not self.backend.put_record(art.key, record, replace=invalid):
                    return False
            except StoreError:
                if fresh:  # leave no orphan cubin behind a failed put (a full disk, a remote that went away)
                    with contextlib.suppress(StoreError):
                        self.backend.delete_blob(art.cubin_sha256)
                raise
            if invalid is not None:
                log.info("%s: replaced the invalid record of %s", self.name, art.key)
        self.stats.count(self.name, "puts")
        self.stats.count(self.name, "bytes_written", len(art.cubin) + len(record))
        return True

    def _transaction(self) -> contextlib.AbstractContextManager[Any]:
        """The backend's cross-process write lock when it has one (the local tier)."""
        tx = getattr(self.backend, "transaction", None)
        return tx() if tx is not None else contextlib.nullcontext()

    def _conflict(self, new: Artefact, old: Artefact) -> None:
        if new.cubin_sha256 != old.cubin_sha256:
            self.stats.count(self.name, "conflicts")
            log.warning("%s: key %s is already stored with a different cubin (sha256 %s, new %s); "
                        "kept the stored one: entries are immutable", self.name, new.key,
                        old.cubin_sha256[:12], new.cubin_sha256[:12])
        else:
            log.debug("%s: key %s already stored", self.name, new.key)

    def delete(self, key: str) -> bool:
        """Remove the record (its blob is left for ``gc``: other keys may share it)."""
        self._check_writable()
        return self.backend.delete_record(check_key(key))

    # -- maintenance

    def verify(self, *, fix: bool = False, secret: str | None = None) -> tuple[int, list[VerifyProblem]]:
        """Re-check every entry's digests (and signature, when a secret is given).

        Returns (entries checked, problems). With ``fix``, damaged entries, and with a secret
        unsigned or wrongly signed ones, are deleted (writable tiers only).
        """
        secret = secret if secret is not None else self.secret
        checked = 0
        problems: list[VerifyProblem] = []
        for key in list(self.keys()):
            rec: Record | None = None
            problem: str | None = None
            delete_blob = False
            try:
                raw = self.backend.get_record(key)
                if raw is None:
                    continue
                rec = parse_record(key, raw)
                if secret is not None:
                    check_signature(rec, secret)
                try:
                    blob = self.backend.get_blob(rec.cubin_sha256)
                    if blob is None:
                        problem = "cubin missing (evicted or never written)"
                    else:
                        check_blob(rec, blob)
                except IntegrityError as exc:
                    problem, delete_blob = str(exc), True
            except (IntegrityError, SignatureError) as exc:
                problem = str(exc)
            checked += 1
            if problem is None:
                continue
            fixed = False
            if fix and self.writable:
                try:
                    self.backend.delete_record(key)
                    if delete_blob and rec is not None:
                        self.backend.delete_blob(rec.cubin_sha256)
                    fixed = True
                except StoreError as exc:  # a full disk, a remote without DELETE: reported, left for later
                    log.warning("%s: could not delete the damaged entry %s: %s", self.name, key, exc)
            problems.append(VerifyProblem(self.name, key, problem, fixed))
        return checked, problems

    def close(self) -> None:
        self.backend.close()


# ----------------------------------------------------------------------------------------------
# Tiers composed.

class TieredStore:
    """Tiers read in order. A hit in a lower tier backfills the writable tiers above it.

    Failures of remote tiers (``remote=True`` tiers, i.e. all but the local one) become one
    warning and a miss, and the tier is skipped for the rest of this store's life; with
    ``strict`` they raise :class:`TierUnavailableError`. Failures of the local tier always raise;
    a local store that is read-only is skipped by puts, with one warning.
    """

    def __init__(self, tiers: Sequence[Tier], *, strict: bool = False, stats: StoreStats | None = None,
                 stats_dir: Path | None = None, local: bool = True) -> None:
        if not tiers:
            raise ValueError("a store needs at least one tier")
        self.tiers = list(tiers)
        self.strict = strict
        self.stats = stats if stats is not None else StoreStats()
        for t in self.tiers:
            t.stats = self.stats
        self.stats_dir = stats_dir
        self._first_is_local = local
        self._down: set[int] = set()
        self._warned_read_only = False

    def __enter__(self) -> TieredStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def local(self) -> Tier:
        """The first (local) tier."""
        return self.tiers[0]

    def _remote(self, i: int) -> bool:
        return i > 0 or not self._first_is_local

    def _live(self) -> Iterator[tuple[int, Tier]]:
        for i, t in enumerate(self.tiers):
            if i not in self._down:
                yield i, t

    def _failed(self, i: int, exc: StoreError, op: str) -> None:
        tier = self.tiers[i]
        self.stats.count(tier.name, "errors")
        if self.strict or not self._remote(i) or not isinstance(exc, TierUnavailableError):
            raise exc
        self._down.add(i)
        log.warning("store tier %s is unavailable (%s during %s); continuing without it for this run",
                    tier.name, exc, op)

    def get(self, key: str) -> Artefact | None:
        check_key(key)
        for i, tier in self._live():
            try:
                found = tier.fetch(key)
            except StoreError as exc:
                self._failed(i, exc, "get")
                continue
            if found is None:
                continue
            art, raw = found
            self._backfill(i, art, raw)
            self.stats.saved(art.meta)
            return art
        return None

    def _backfill(self, hit: int, art: Artefact, raw: bytes) -> None:
        for j, upper in self._live():
            if j >= hit:
                break
            if not upper.writable:
                continue
            try:
                if upper.store_record(art, raw):
                    self.stats.count(upper.name, "backfills")
            except StoreError as exc:
                if not self._remote(j):  # the hit is good; a local write problem must not fail the read
                    self.stats.count(upper.name, "errors")
                    log.warning("could not backfill %s into %s: %s", art.key, upper.name, exc)
                    continue
                self._failed(j, exc, "backfill")

    def put(self, art: Artefact) -> None:
        """Write ``art`` to every writable tier (records signed when a secret is set)."""
        records: dict[str | None, bytes] = {}
        wrote = False
        for i, tier in self._live():
            if not tier.writable:
                continue
            if tier.secret not in records:
                records[tier.secret] = art.record(tier.secret)
            try:
                tier.store_record(art, records[tier.secret])
                wrote = True
            except StoreError as exc:
                self._failed(i, exc, "put")
        if not wrote:
            reason = next((t.read_only_reason for _, t in self._live() if t.read_only_reason), None)
            if reason is None:
                raise StoreError("no writable store tier is available; the artefact was not stored")
            if not self._warned_read_only:  # a read-only store still serves its hits; say once what is lost
                self._warned_read_only = True
                log.warning("%s: new artefacts are not stored (%s was the first); the build goes on", reason, art.key)

    def contains(self, key: str) -> bool:
        check_key(key)
        for i, tier in self._live():
            try:
                if tier.contains(key):
                    return True
            except StoreError as exc:
                self._failed(i, exc, "contains")
        return False

    def delete(self, key: str) -> bool:
        """Delete from every writable tier; True when any tier held the key."""
        check_key(key)
        deleted = False
        for i, tier in self._live():
            if not tier.writable:
                continue
            try:
                deleted = tier.delete(key) or deleted
            except StoreError as exc:
                self._failed(i, exc, "delete")
        return deleted

    def keys(self) -> Iterator[str]:
        seen: set[str] = set()
        for i, tier in self._live():
            try:
                for key in tier.keys():
                    if key not in seen:
                        seen.add(key)
                        yield key
            except StoreError as exc:
                self._failed(i, exc, "keys")

    def __iter__(self) -> Iterator[str]:
        return self.keys()

    def entries(self) -> Iterator[EntryInfo]:
        seen: set[str] = set()
        for i, tier in self._live():
            try:
                for info in tier.entries():
                    if info.key not in seen:
                        seen.add(info.key)
                        yield info
            except StoreError as exc:
                self._failed(i, exc, "entries")

    def close(self) -> None:
        if self.stats_dir is not None:
            self.stats.flush(self.stats_dir)
        for t in self.tiers:
            with contextlib.suppress(Exception):
                t.close()


# ----------------------------------------------------------------------------------------------
# Construction from the settings model.

def redact_url(url: str) -> str:
    """``url`` without credentials, for names and messages."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


_LABEL = re.compile(r"^[A-Za-z0-9_-]{1,63}$")


def check_host(url: str, host: str | None) -> None:
    """:class:`StoreUsageError` unless ``host`` (of ``url``) is an IP address or a name a resolver can look
    up: IDNA-encodable, labels of 1 to 63 letters, digits, ``-`` or ``_``, ``xn--`` labels valid Punycode."""
    def bad(why: str) -> StoreUsageError:
        return StoreUsageError(f"store URL {redact_url(url)!r}: host {host!r} {why}")

    if not host:
        raise bad("is missing")
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    try:
        name = host.encode("idna").decode("ascii").rstrip(".")
    except UnicodeError as exc:
        raise bad(f"is not a valid host name ({exc.__context__ or exc})") from None
    if len(name) > 253:
        raise bad("is longer than 253 characters")
    for label in name.split("."):
        if not _LABEL.match(label):
            raise bad(f"has the label {label!r}: a label is 1 to 63 letters, digits, '-' or '_'")
        if label.lower().startswith("xn--"):
            try:
                unicode = label[4:].encode("ascii").decode("punycode")
            except UnicodeError:
                unicode = ""
            if not unicode or unicode.isascii() or not all(c.isalnum() or c == "-" for c in unicode):
                raise bad(f"has the label {label!r}, which is not valid IDNA (Punycode)")


def backend_for_url(url: str, *, where: str = "remotes", timeout: float = 5.0, deadline: float = 30.0) -> Backend:
    """The backend for a remote tier URL (no connection is made yet). ``timeout`` bounds each socket
    operation, ``deadline`` each whole request. A bad URL is a :class:`StoreUsageError` naming ``where``."""
    scheme = urlsplit(url).scheme.lower()
    try:
        if scheme in ("http", "https"):
            from .http import HttpBackend

            return HttpBackend(url, timeout=timeout, deadline=deadline)
        if scheme in ("redis", "rediss", "unix"):
            from .redis_tier import RedisBackend

            return RedisBackend(url, timeout=timeout, deadline=deadline)
    except StoreUsageError as exc:
        raise StoreUsageError(f"{where}: {exc}") from None
    raise StoreUsageError(
        f"{where}: unknown store URL scheme {scheme + '://' if scheme else '(none)'} in {redact_url(url)!r}; "
        "expected http://, https:// (Bazel remote-cache layout) or redis://")


def open_store(settings: Settings, strict: bool = False, *, timeout: float = 5.0) -> TieredStore:
    """The tiered store described by ``settings``: the local tier at ``settings.store_path``
    (bounded by ``store_max_bytes``), then ``settings.remotes`` in order, each request to them
    bounded by ``timeout`` per socket operation and ``settings.remote_deadline`` in all.

    Raises :class:`StoreUsageError` (exit 2) for an unknown URL scheme or an unusable store
    directory. Remotes are contacted lazily, so a remote that is down does not fail here.
    ``tune = "require"`` implies ``strict``: a build that must ship tuned code cannot shrug off a
    remote tier that may hold it.
    """
    from .local import LocalBackend

    strict = strict or settings.tune == "require"

    secret = settings.store_secret
    if settings.remotes and secret is None:
        _warn_unauthenticated([redact_url(r.url) for r in settings.remotes])
    stats = StoreStats()
    remotes: list[Tier] = []
    for i, remote in enumerate(settings.remotes):
        backend = backend_for_url(remote.url, where=f"{settings.config_file}: remotes[{i}].url", timeout=timeout,
                                  deadline=settings.remote_deadline)
        remotes.append(Tier(backend, name=redact_url(remote.url), writable=remote.writable, secret=secret,
                            stats=stats))
    local = LocalBackend(settings.store_path, max_bytes=settings.store_max_bytes)
    reason = f"the local store {local.path} is read-only" if local.read_only else None
    tiers = [Tier(local, name="local", writable=not local.read_only, secret=secret, stats=stats,
                  read_only_reason=reason), *remotes]
    # statistics are a write too: a store opened for reading only (read-only, full disk) keeps none
    return TieredStore(tiers, strict=strict, stats=stats, stats_dir=local.path if local.degraded is None else None)


_WARNED_UNAUTHENTICATED: set[tuple[str, ...]] = set()


def _warn_unauthenticated(urls: list[str]) -> None:
    """One warning per process (and set of remotes) that their records are taken on trust."""
    if tuple(urls) in _WARNED_UNAUTHENTICATED:
        return
    _WARNED_UNAUTHENTICATED.add(tuple(urls))
    log.warning("remote store tiers without KBUILD_STORE_SECRET: records from %s are not authenticated, so "
                "whoever can write there can plant the cubins this build ships; set KBUILD_STORE_SECRET (the same "
                "shared secret on every machine) to sign and verify them", ", ".join(urls))

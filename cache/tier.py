"""One tier: a :class:`~kbuild.cache.store.Backend` made into a verified :class:`~kbuild.cache.store.Store`.

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
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kbuild.errors import StoreError

from .record import (
    Artefact,
    IntegrityError,
    Record,
    SignatureError,
    check_blob,
    check_key,
    check_signature,
    parse_record,
)
from .stats import StoreStats
from .store import Backend, EntryInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VerifyProblem:
    """One entry that failed ``verify``."""

    tier: str
    key: str
    problem: str
    fixed: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"tier": self.tier, "key": self.key, "problem": self.problem, "fixed": self.fixed}


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
        except IntegrityError as exc:  # over the cap, or no record at all under the name: this key's problem
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
            try:  # capped at the size the record states: a planted giant blob is refused unread
                blob = self.backend.get_blob(record.cubin_sha256, record.cubin_size)
            except IntegrityError as exc:
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
        with self.backend.transaction():
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
                    blob = self.backend.get_blob(rec.cubin_sha256, rec.cubin_size)
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


__all__ = ["Tier", "VerifyProblem"]

"""The local tier: two diskcache caches under the store directory.

Layout of ``<store>/``:

* ``blobs/`` — a ``diskcache.Cache`` of cubins keyed by sha256, bounded by ``store_max_bytes``
  with least-recently-used eviction (a read refreshes an entry): while the store is over its
  bound, each write evicts the least recently used cubin; ``gc`` evicts down to the bound;
* ``records/`` — a ``diskcache.Cache`` of metadata records keyed by artefact key, without
  eviction, so that listing the store never touches the cubins or their access times;
* ``write.lock`` — a ``filelock`` taken by writers (put, delete, gc, verify --fix, import), so
  that a sweep never removes the blob of an entry whose record is about to be written;
* ``stats.json`` — accumulated statistics (:mod:`kbuild.cache.stats`).

diskcache writes a value's file before it commits the index row in SQLite, and the tier writes
the blob before the record, so a writer killed at any point leaves at most an unreferenced blob
(removed by ``gc``) and never a visible partial entry. A blob evicted by the size bound leaves a
dangling record, which reads treat as a miss and ``gc`` removes.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import diskcache
from filelock import FileLock

from kbuild.errors import StoreError, StoreFullError, StoreUsageError

log = logging.getLogger(__name__)

_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


@dataclass(frozen=True)
class GcReport:
    """What ``gc`` removed."""

    evicted_blobs: int
    dangling_records: int
    orphan_blobs: int
    unreadable_records: int
    entries: int
    bytes_before: int
    bytes_after: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class LocalBackend:
    """The local diskcache tier. Cross-process safe; one instance per process is enough."""

    def __init__(self, path: str | os.PathLike[str], *, max_bytes: int = 10 * 2**30, timeout: float = 60.0) -> None:
        self.path = Path(path)
        self.location = str(self.path)
        self.max_bytes = int(max_bytes)
        self._prepare_directory()
        try:
            self._records = diskcache.Cache(str(self.path / "records"), timeout=timeout, eviction_policy="none",
                                            size_limit=2**62, cull_limit=0, statistics=False)
            self._blobs = diskcache.Cache(str(self.path / "blobs"), timeout=timeout,
                                          eviction_policy="least-recently-used", size_limit=self.max_bytes,
                                          cull_limit=1, statistics=False)
        except (OSError, sqlite3.Error) as exc:
            raise StoreUsageError(f"store directory {self.path}: cannot open the local store: {exc}") from None
        self.lock = FileLock(str(self.path / "write.lock"), timeout=timeout)
        self._no_lru = threading.Lock()

    def _prepare_directory(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUsageError(f"store directory {self.path}: cannot create it: {exc.strerror or exc}; "
                                  "set [tool.kbuild] store or KBUILD_STORE to a writable directory") from None
        if not self.path.is_dir():
            raise StoreUsageError(f"store directory {self.path}: is not a directory")
        if not os.access(self.path, os.R_OK | os.W_OK | os.X_OK):
            raise StoreUsageError(f"store directory {self.path}: not readable and writable by this user; "
                                  "set [tool.kbuild] store or KBUILD_STORE to a writable directory")

    def __repr__(self) -> str:
        return f"LocalBackend({self.location!r}, max_bytes={self.max_bytes})"

    @contextlib.contextmanager
    def _io(self, what: str) -> Iterator[None]:
        """Map OS and SQLite failures to store errors naming the store; a full disk is a usage error."""
        try:
            yield
        except diskcache.Timeout:
            raise StoreError(f"{what} in the local store {self.path}: timed out waiting for the database") from None
        except sqlite3.Error as exc:
            if "full" in str(exc).lower():
                raise StoreFullError(f"{what} in the local store {self.path}: disk full ({exc}); nothing was "
                                     "stored; free space or lower store_max_bytes") from None
            raise StoreError(f"{what} in the local store {self.path}: database error: {exc}") from None
        except OSError as exc:
            if exc.errno in _FULL_ERRNOS:
                raise StoreFullError(f"{what} in the local store {self.path}: disk full ({exc.strerror}); nothing "
                                     "was stored; free space or lower store_max_bytes") from None
            raise StoreError(f"{what} in the local store {self.path}: {exc}") from None

    # -- Backend protocol

    def get_record(self, key: str) -> bytes | None:
        with self._io("reading record " + key):
            value = self._records.get(key, retry=True)
        return bytes(value) if value is not None else None

    def get_blob(self, digest: str) -> bytes | None:
        try:
            with self._io("reading cubin " + digest):
                value = self._blobs.get(digest, retry=True)
        except StoreFullError:
            # An LRU read also writes (the access time). On a full disk, still serve the hit:
            # read without refreshing the access time.
            with self._io("reading cubin " + digest), self._no_lru:
                policy = self._blobs.eviction_policy
                object.__setattr__(self._blobs, "eviction_policy", "none")
                try:
                    value = self._blobs.get(digest, retry=True)
                finally:
                    object.__setattr__(self._blobs, "eviction_policy", policy)
        return bytes(value) if value is not None else None

    def has_record(self, key: str) -> bool:
        with self._io("looking up " + key):
            return key in self._records

    def has_blob(self, digest: str) -> bool:
        with self._io("looking up cubin " + digest):
            return digest in self._blobs

    def put_blob(self, digest: str, data: bytes) -> None:
        with self._io("writing cubin " + digest), self.lock:
            self._blobs.add(digest, bytes(data), retry=True)

    def put_record(self, key: str, data: bytes, replace: bytes | None = None) -> bool:
        with self._io("writing record " + key), self.lock:  # writers hold the lock: compare-and-set
            if replace is not None:
                current = self._records.get(key, retry=True)
                if current is None or bytes(current) == replace:
                    self._records.set(key, bytes(data), retry=True)
                    return True
            return bool(self._records.add(key, bytes(data), retry=True))

    def delete_record(self, key: str) -> bool:
        with self._io("deleting record " + key), self.lock:
            return bool(self._records.delete(key, retry=True))

    def delete_blob(self, digest: str) -> bool:
        with self._io("deleting cubin " + digest), self.lock:
            return bool(self._blobs.delete(digest, retry=True))

    def record_keys(self) -> Iterator[str]:
        with self._io("listing records"):
            keys = [str(k) for k in self._records.iterkeys()]
        return iter(keys)

    def close(self) -> None:
        self._records.close()
        self._blobs.close()

    def transaction(self) -> FileLock:
        """The cross-process write lock (re-entrant in this process)."""
        return self.lock

    # -- maintenance

    def volume(self) -> int:
        """Bytes on disk used by both caches (as diskcache counts them)."""
        with self._io("measuring"):
            return int(self._blobs.volume()) + int(self._records.volume())

    def blob_count(self) -> int:
        with self._io("counting"):
            return len(self._blobs)

    def gc(self, *, max_bytes: int | None = None) -> GcReport:
        """Evict least-recently-used cubins beyond the size bound (``max_bytes`` or the store's), then
        drop records whose cubin is gone and cubins no record refers to."""
        import time

        start = time.perf_counter()
        with self._io("collecting garbage"), self.lock:
            before = self.volume()
            n_blobs = len(self._blobs)
            limit = self.max_bytes if max_bytes is None else int(max_bytes)
            self._evict_to(limit)
            evicted = n_blobs - len(self._blobs)
            blobs = {str(k) for k in self._blobs.iterkeys()}
            referenced: set[str] = set()
            drop: list[str] = []
            dangling = unreadable = entries = 0
            for key in list(self._records.iterkeys()):
                raw = self._records.get(key, retry=True)
                if raw is None:
                    continue
                try:
                    digest = json.loads(raw)["cubin_sha256"]
                    if not isinstance(digest, str):
                        raise TypeError(digest)
                except (ValueError, KeyError, TypeError):
                    drop.append(key)
                    unreadable += 1
                    continue
                if digest not in blobs:
                    drop.append(key)
                    dangling += 1
                    continue
                referenced.add(digest)
                entries += 1
            with self._records.transact(retry=True):  # one transaction, not one per delete
                for key in drop:
                    self._records.delete(key, retry=True)
            orphans = 0
            with self._blobs.transact(retry=True):
                for digest in sorted(blobs - referenced):
                    if self._blobs.delete(digest, retry=True):
                        orphans += 1
            after = self.volume()
        return GcReport(evicted_blobs=evicted, dangling_records=dangling, orphan_blobs=orphans,
                        unreadable_records=unreadable, entries=entries, bytes_before=before, bytes_after=after,
                        seconds=time.perf_counter() - start)

    def _evict_to(self, limit: int) -> None:
        """Evict least-recently-used cubins, one at a time, until the cubins fit in ``limit`` bytes."""
        if self._blobs.volume() <= limit:
            return
        sql = getattr(self._blobs, "_sql", None)
        if sql is None:  # pragma: no cover - another diskcache version: its own (coarser) cull
            saved = self._blobs.size_limit
            self._blobs.reset("size_limit", limit)
            try:
                self._blobs.cull(retry=True)
            finally:
                self._blobs.reset("size_limit", saved)
            return
        # diskcache keeps the access time of each row; this is its own LRU ordering query.
        order = [row[0] for row in sql("SELECT key FROM Cache ORDER BY access_time").fetchall()]
        while order and self._blobs.volume() > limit:
            batch, order = order[:100], order[100:]
            with self._blobs.transact(retry=True):
                for digest in batch:
                    self._blobs.delete(digest, retry=True)
                    if self._blobs.volume() <= limit:
                        break

    def check_files(self, *, fix: bool = False) -> int:
        """diskcache's own consistency check (untracked or missing value files); number of warnings."""
        with self._io("checking files"), self.lock:
            return len(self._blobs.check(fix=fix)) + len(self._records.check(fix=fix))

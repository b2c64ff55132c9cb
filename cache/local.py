"""The local tier: two diskcache caches under the store directory.

Layout of ``<store>/``:

* ``blobs/`` — a ``diskcache.Cache`` of cubins keyed by sha256, bounded by ``store_max_bytes``
  with least-recently-used eviction (a read refreshes an entry): while the store is over its
  bound, each write evicts the least recently used cubin; ``gc`` evicts down to the bound;
* ``records/`` — a ``diskcache.Cache`` of metadata records keyed by artefact key, without
  eviction, so that listing the store never touches the cubins or their access times;
* ``write.lock`` — a ``filelock`` taken by writers (put, delete, gc, verify --fix, import), so
  that a sweep never removes the blob of an entry whose record is about to be written. A put waits
  for it at most :data:`WRITE_LOCK_WAIT` seconds, then fails with :class:`StoreBusyError` (a build
  then goes on without storing); maintenance waits ``timeout`` seconds;
* ``reserve`` — :data:`RESERVE_BYTES` of ballast, given back when cleanup must write on a full disk;
* ``stats.json`` — accumulated statistics (:mod:`kbuild.cache.stats`).

Every cubin is a file of its own (``disk_min_file_size = 0``): deleting a file frees its space without
writing anything, while deleting a row needs a database write first (SQLite's journal), which a full
disk refuses; so evicting cubins frees their space at once, even on a full disk.
Values are read as bytes only, value files through :func:`kbuild.fsutil.read_bounded`: a row of
another kind (diskcache would unpickle it) or a value file that is no regular file is
:class:`~kbuild.cache.record.UnreadableEntry`, a miss for that key.

diskcache writes a value's file before it commits the index row in SQLite, and the tier writes
the blob before the record, so a writer killed at any point leaves at most an unreferenced blob
or a half-written value file that no row names (both removed by ``gc``) and never a visible
partial entry. A blob evicted by the size bound leaves a dangling record, which reads treat as a
miss and ``gc`` removes. A write that fails (a full disk) removes the value file it was writing.

**Full disks and read-only stores.** diskcache writes to its database whenever it opens it, so
on a full disk or a read-only mount it cannot open at all. The tier then reads through SQLite
opened read-only (:class:`_ReadOnlyCache`): hits are served, ``ls``, ``stats`` and ``verify``
work, and writes fail with a clear error (a full disk) or are refused (a read-only store).
Cleanup frees space before it needs any: ``gc`` (and ``verify --fix``) first delete value files,
half-written ones and those of the cubins it evicts, and only then update the database. When other
files fill the disk, cleanup that must write the database first (``rm``, ``verify --fix``, ``gc``
when no cubin file is left to delete) deletes the ``reserve`` file, which gives SQLite room for its
journal; the reserve is made again when the store next opens for writing on a disk with
:data:`RESERVE_ROOM` free.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import diskcache
import filelock
from filelock import FileLock

from kbuild.errors import StoreBusyError, StoreError, StoreFullError, StoreUsageError
from kbuild.fsutil import read_bounded

from .record import MAX_BLOB_BYTES, EntryTooLarge, UnreadableEntry, is_digest

log = logging.getLogger(__name__)

T = TypeVar("T")

_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_DB = "cache.db"

#: How long a put waits for another process's write lock (a ``gc``, an ``import``) before it gives up with
#: :class:`StoreBusyError`: puts hold the lock for milliseconds, so only maintenance holds it this long.
WRITE_LOCK_WAIT = 5.0

#: Ballast kept in the store directory and deleted when cleanup must write the database on a full disk:
#: SQLite needs room for its write-ahead logs and shared-memory indexes (reopening both databases and
#: deleting a row failed with a 256 KiB reserve and worked with 512 KiB on a tmpfs; 1 MiB leaves a margin).
#: Random bytes, so that a compressing file system stores all of it.
RESERVE_BYTES = 1 << 20
RESERVE_FILE = "reserve"
#: The reserve is made only on a disk with this much room: never out of the last MiB a full disk has left.
RESERVE_ROOM = 4 * RESERVE_BYTES


class _StoreDisk(diskcache.Disk):
    """diskcache's :class:`~diskcache.Disk` for a store of bytes.

    * Values come back as bytes or not at all: a row of another mode (diskcache would unpickle it, or
      decode text) raises :class:`UnreadableEntry` instead, and value files are read with
      :func:`~kbuild.fsutil.read_bounded` (a FIFO, a device or a directory planted in their place is
      refused, never read or waited on);
    * it remembers (per thread) the value file it last named, so that a write that fails after creating
      it (a full disk) can remove it: diskcache leaves it behind.
    """

    def __init__(self, directory: str, **kwargs: Any) -> None:
        super().__init__(directory, **kwargs)
        self._made = threading.local()

    def filename(self, key: Any = diskcache.core.UNKNOWN, value: Any = diskcache.core.UNKNOWN) -> tuple[str, str]:
        name, full_path = super().filename(key, value)
        self._made.path = full_path
        return name, full_path

    def take(self) -> str | None:
        """The value file named since the last call, if any."""
        path = getattr(self._made, "path", None)
        self._made.path = None
        return path

    def fetch(self, mode: int, filename: str | None, value: Any, read: bool) -> bytes:
        if mode == diskcache.core.MODE_RAW and isinstance(value, (bytes, memoryview)) and not read:
            return bytes(value)
        if mode == diskcache.core.MODE_BINARY and filename is not None and not read:
            try:
                return read_bounded(os.path.join(self._directory, filename), max_bytes=MAX_BLOB_BYTES)
            except FileNotFoundError:
                raise  # diskcache's own answer: the entry was deleted meanwhile, a miss
            except OSError as exc:
                raise UnreadableEntry(f"its value file {filename}: {exc.strerror or exc}") from None
        kind = {diskcache.core.MODE_TEXT: "text", diskcache.core.MODE_PICKLE: "a pickled object"}.get(
            mode, f"a {type(value).__name__}")
        raise UnreadableEntry(f"it holds {kind}, not bytes")

    def get(self, key: Any, raw: bool) -> Any:
        """A key as stored; a pickled one is not unpickled (no kbuild key is), only named."""
        return super().get(key, raw) if raw else "<a pickled key>"


class _ReadOnlyCache:
    """One diskcache directory read through SQLite opened read-only, for a store whose database cannot
    be opened for writing (a full disk, a read-only mount). ``mode=ro`` first; ``immutable=1`` when
    even that needs to write (the WAL index on a full disk). Keys and values are decoded by diskcache's
    own :class:`~diskcache.Disk`; the subset of :class:`diskcache.Cache` the tier reads is offered."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._disk = _StoreDisk(str(directory))
        self._lock = threading.Lock()
        self._con: sqlite3.Connection | None = None
        db = directory / _DB
        if not db.is_file():
            return  # an empty store: every lookup misses
        error: sqlite3.Error | None = None
        for query in ("mode=ro", "immutable=1"):
            con = sqlite3.connect(f"{db.as_uri()}?{query}", uri=True, check_same_thread=False, isolation_level=None)
            try:
                con.execute("SELECT COUNT(*) FROM Cache").fetchall()
            except sqlite3.Error as exc:
                con.close()
                error = exc
                continue
            self._con = con
            return
        assert error is not None
        raise error

    def rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        if self._con is None:
            return []
        with self._lock:
            return self._con.execute(sql, args).fetchall()

    def get(self, key: Any, default: Any = None, retry: bool = False) -> Any:
        db_key, raw = self._disk.put(key)
        rows = self.rows("SELECT mode, filename, value FROM Cache WHERE key = ? AND raw = ?"
                         " AND (expire_time IS NULL OR expire_time > ?)", (db_key, raw, time.time()))
        if not rows:
            return default
        mode, filename, value = rows[0]
        try:
            return self._disk.fetch(mode, filename, value, False)
        except OSError:  # the file is gone: a miss, as diskcache would say
            return default

    def __contains__(self, key: Any) -> bool:
        db_key, raw = self._disk.put(key)
        return bool(self.rows("SELECT 1 FROM Cache WHERE key = ? AND raw = ?", (db_key, raw)))

    def iterkeys(self) -> Iterator[Any]:
        return iter([self._disk.get(k, raw) for k, raw in self.rows("SELECT key, raw FROM Cache ORDER BY rowid")])

    def __len__(self) -> int:
        return int(self.rows("SELECT COUNT(*) FROM Cache")[0][0]) if self._con is not None else 0

    def volume(self) -> int:
        if self._con is None:
            return 0
        ((pages,),) = self.rows("PRAGMA page_count")
        ((page_size,),) = self.rows("PRAGMA page_size")
        ((size,),) = self.rows("SELECT COALESCE(SUM(size), 0) FROM Cache")
        return int(pages) * int(page_size) + int(size)

    def close(self) -> None:
        if self._con is not None:
            self._con.close()


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
    half_written_files: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class LocalBackend:
    """The local diskcache tier. Cross-process safe; one instance per process is enough.

    ``degraded`` says why the store was opened for reading only (``None`` when it is writable):
    ``read_only`` stores refuse every write; on a full disk each write first tries to reopen the
    store for writing (``gc`` may have freed space) and fails with :class:`StoreFullError`.
    ``timeout``: how long maintenance (and SQLite) waits for the write lock; ``lock_wait``: how long a
    put (:meth:`transaction`) waits before :class:`StoreBusyError`.
    """

    def __init__(self, path: str | os.PathLike[str], *, max_bytes: int = 10 * 2**30, timeout: float = 60.0,
                 lock_wait: float = WRITE_LOCK_WAIT) -> None:
        self.path = Path(path)
        self.location = str(self.path)
        self.max_bytes = int(max_bytes)
        self.timeout = timeout
        self.lock_wait = lock_wait
        self.read_only = False
        self.degraded: str | None = None
        self._prepare_directory()
        self.lock = FileLock(str(self.path / "write.lock"), timeout=timeout)
        self._no_lru = threading.Lock()
        self._records: Any = None
        self._blobs: Any = None
        self._blob_disk: _StoreDisk | None = None
        self._open()

    def _prepare_directory(self) -> None:
        if not self.path.is_dir():
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreUsageError(f"store directory {self.path}: cannot create it: {exc.strerror or exc}; "
                                      "set [tool.kbuild] store or KBUILD_STORE to a writable directory") from None
        if not self.path.is_dir():
            raise StoreUsageError(f"store directory {self.path}: is not a directory")
        if not os.access(self.path, os.R_OK | os.X_OK):
            raise StoreUsageError(f"store directory {self.path}: not readable by this user; "
                                  "set [tool.kbuild] store or KBUILD_STORE to a directory you can read and write")
        if not os.access(self.path, os.W_OK):
            self.read_only = True

    def _open(self) -> None:
        """Open both caches for writing, or else (a full disk, a read-only store) for reading only."""
        if not self.read_only:
            try:
                records = diskcache.Cache(str(self.path / "records"), timeout=self.timeout, eviction_policy="none",
                                          size_limit=2**62, cull_limit=0, statistics=False, disk=_StoreDisk)
                try:  # every cubin in a file of its own (disk_min_file_size=0): evicting it frees its space
                    blobs = diskcache.Cache(str(self.path / "blobs"), timeout=self.timeout, disk=_StoreDisk,
                                            eviction_policy="least-recently-used", size_limit=self.max_bytes,
                                            cull_limit=1, statistics=False, disk_min_file_size=0)
                except BaseException:
                    records.close()
                    raise
            except (OSError, sqlite3.Error) as exc:
                if not _full(exc) and not _read_only(exc):
                    raise StoreUsageError(f"store directory {self.path}: cannot open the local store: {exc}") from None
                self.read_only = _read_only(exc) and not _full(exc)
                first_error: BaseException = exc
            else:
                self._records, self._blobs, self.degraded = records, blobs, None
                self._blob_disk = blobs.disk  # type: ignore[assignment]
                self._keep_reserve()
                return
        else:
            first_error = PermissionError(errno.EACCES, "not writable by this user")
        try:
            ro_records = _ReadOnlyCache(self.path / "records")
            try:
                ro_blobs = _ReadOnlyCache(self.path / "blobs")
            except BaseException:
                ro_records.close()
                raise
        except sqlite3.Error as exc:
            raise StoreUsageError(f"store directory {self.path}: cannot open the local store: {first_error}; "
                                  f"nor read it: {exc}") from None
        self._records, self._blobs, self._blob_disk = ro_records, ro_blobs, None
        self.degraded = ("the store is read-only" if self.read_only
                         else f"the disk is full ({first_error})")
        log.debug("%s: opened for reading only: %s", self.path, self.degraded)

    def _reopen(self) -> bool:
        """After a full disk: try to open the store for writing again; whether it worked."""
        if self.degraded is None:
            return True
        if self.read_only:
            return False
        old = (self._records, self._blobs)
        try:
            self._open()
        except StoreUsageError:
            return False
        if self.degraded is None:
            for cache in old:
                cache.close()
            return True
        self._records.close()
        self._blobs.close()
        self._records, self._blobs = old
        return False

    def _writable(self, what: str) -> None:
        """Raise the reason when this store cannot be written now."""
        if self.degraded is None or self._reopen():
            return
        if self.read_only:
            raise StoreUsageError(f"{what} in the local store {self.path}: the store is read-only; it still serves "
                                  "hits, but set KBUILD_STORE to a writable directory to store anything")
        raise StoreFullError(f"{what} in the local store {self.path}: {self.degraded}; nothing was stored; free "
                             "space (`kbuild cache gc --max-bytes N` frees some) or lower store_max_bytes")

    def __repr__(self) -> str:
        return f"LocalBackend({self.location!r}, max_bytes={self.max_bytes})"

    @contextlib.contextmanager
    def _io(self, what: str) -> Iterator[None]:
        """Map OS and SQLite failures to store errors naming the store; a full disk is a usage error."""
        try:
            yield
        except filelock.Timeout as exc:  # a TimeoutError, so before OSError
            raise StoreBusyError(f"{what} in the local store {self.path}: another process held its write lock "
                                 f"({exc.lock_file}) for longer than the wait; nothing was written (a "
                                 "`kbuild cache gc`, `import` or `verify --fix` may be running)") from None
        except diskcache.Timeout:
            raise StoreError(f"{what} in the local store {self.path}: timed out waiting for the database") from None
        except sqlite3.Error as exc:
            if _full(exc):
                raise StoreFullError(f"{what} in the local store {self.path}: disk full ({exc}); nothing was "
                                     "stored; free space or lower store_max_bytes") from None
            raise StoreError(f"{what} in the local store {self.path}: database error: {exc}") from None
        except OSError as exc:
            if exc.errno in _FULL_ERRNOS:
                raise StoreFullError(f"{what} in the local store {self.path}: disk full ({exc.strerror}); nothing "
                                     "was stored; free space or lower store_max_bytes") from None
            raise StoreError(f"{what} in the local store {self.path}: {exc}") from None

    @contextlib.contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        """A write under the lock that, when it fails, removes the value file it made and drops the
        connection (a failed COMMIT can leave it inside a transaction)."""
        self._writable(what)
        with self._io(what), self.lock:
            if self._blob_disk is not None:
                self._blob_disk.take()
            try:
                yield
            except BaseException:
                made = self._blob_disk.take() if self._blob_disk is not None else None
                if made is not None:
                    with contextlib.suppress(OSError):
                        os.remove(made)
                for cache in (self._records, self._blobs):
                    with contextlib.suppress(Exception):
                        cache.close()  # diskcache reconnects on next use
                raise

    # -- Backend protocol

    @contextlib.contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """:meth:`_io` for a read, and an unreadable value named: the store, the record or cubin."""
        try:
            with self._io(what):
                yield
        except UnreadableEntry as exc:
            raise UnreadableEntry(f"{self.path}: {what}: {exc}") from None

    def get_record(self, key: str) -> bytes | None:
        with self._reading("reading record " + key):
            value = self._records.get(key, retry=True)
        return value  # type: ignore[no-any-return]  # _StoreDisk.fetch: bytes or None

    def get_blob(self, digest: str, max_bytes: int | None = None) -> bytes | None:
        limit = MAX_BLOB_BYTES if max_bytes is None else min(max_bytes, MAX_BLOB_BYTES)
        with self._reading("reading cubin " + digest):  # the row's size first: a file over the cap is not read
            rows = self._select(self._blobs, "SELECT size FROM Cache WHERE key = ? AND raw = ?", (digest, 1))
        if rows and int(rows[0][0] or 0) > limit:
            raise EntryTooLarge(f"{self.path}: cubin {digest}: {rows[0][0]} bytes, over the {limit}-byte cap")
        try:
            with self._reading("reading cubin " + digest):
                value = self._blobs.get(digest, retry=True)
        except StoreFullError:
            # An LRU read also writes (the access time). On a full disk, still serve the hit:
            # read without refreshing the access time.
            with self._reading("reading cubin " + digest), self._no_lru:
                policy = self._blobs.eviction_policy
                object.__setattr__(self._blobs, "eviction_policy", "none")
                try:
                    value = self._blobs.get(digest, retry=True)
                finally:
                    object.__setattr__(self._blobs, "eviction_policy", policy)
        if value is not None and len(value) > limit:
            raise EntryTooLarge(f"{self.path}: cubin {digest}: {len(value)} bytes, over the {limit}-byte cap")
        return value  # type: ignore[no-any-return]

    def _holds_bytes(self, cache: Any, name: str, what: str) -> bool:
        """Whether ``name`` holds a value of bytes (a row of another kind is no record and no cubin)."""
        with self._io(what):
            rows = self._select(cache, "SELECT mode, value FROM Cache WHERE key = ? AND raw = ?", (name, 1))
        if not rows:
            return False
        mode, value = rows[0]
        return bool(mode == diskcache.core.MODE_BINARY or (mode == diskcache.core.MODE_RAW
                                                          and isinstance(value, bytes)))

    def has_record(self, key: str) -> bool:
        return self._holds_bytes(self._records, key, "looking up " + key)

    def has_blob(self, digest: str) -> bool:
        return self._holds_bytes(self._blobs, digest, "looking up cubin " + digest)

    def put_blob(self, digest: str, data: bytes) -> None:
        with self._writing("writing cubin " + digest):  # a row of another kind is replaced
            if not self._holds_bytes(self._blobs, digest, "looking up cubin " + digest):
                self._blobs.set(digest, bytes(data), retry=True)

    def put_record(self, key: str, data: bytes, replace: bytes | None = None) -> bool:
        with self._writing("writing record " + key):  # writers hold the lock: compare-and-set
            if not self._holds_bytes(self._records, key, "looking up " + key) or (
                    replace is not None and self._records.get(key, retry=True) == replace):
                self._records.set(key, bytes(data), retry=True)  # absent, of another kind, or the invalid one
                return True
            return False

    def delete_record(self, key: str) -> bool:
        return self._clean("deleting record " + key, lambda: bool(self._records.delete(key, retry=True)))

    def delete_blob(self, digest: str) -> bool:
        """Remove a cubin: its file first (that frees the space even when the database then cannot be
        written; a row without its file reads as a miss and ``gc`` drops it), then its row."""
        def delete() -> bool:
            for (filename,) in self._select(self._blobs, "SELECT filename FROM Cache WHERE key = ? AND raw = ?"
                                            " AND filename IS NOT NULL", (digest, 1)):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self.path / "blobs" / filename)
            return bool(self._blobs.delete(digest, retry=True))

        return self._clean("deleting cubin " + digest, delete)

    def record_keys(self) -> Iterator[str]:
        with self._io("listing records"):
            keys = [str(k) for k in self._records.iterkeys()]
        return iter([k for k in keys if is_digest(k)])

    def close(self) -> None:
        self._records.close()
        self._blobs.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """The cross-process write lock (re-entrant in this process), waited for at most ``lock_wait``
        seconds (:class:`StoreBusyError`); a clear error first when the store cannot be written."""
        self._writable("writing")
        with self._io("writing"):
            self.lock.acquire(timeout=self.lock_wait)
            try:
                yield
            finally:
                self.lock.release()

    # -- the reserve: room for cleanup on a full disk

    def _keep_reserve(self) -> None:
        """Make the reserve file when it is missing and the disk has :data:`RESERVE_ROOM` free (else leave it
        for a later open)."""
        path = self.path / RESERVE_FILE
        tmp = self.path / f".{RESERVE_FILE}.{os.getpid()}.tmp"
        try:
            if path.exists():
                return
            st = os.statvfs(self.path)
            if st.f_bavail * st.f_frsize < RESERVE_ROOM:
                return
            with open(tmp, "wb") as f:
                f.write(os.urandom(RESERVE_BYTES))
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            log.debug("%s: no room for the reserve: %s", self.path, exc)

    def _release_reserve(self) -> bool:
        """Delete the reserve (cleanup on a full disk needs the room); whether there was one."""
        try:
            (self.path / RESERVE_FILE).unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            log.debug("%s: could not delete the reserve: %s", self.path, exc)
            return False
        log.info("%s: the disk is full; gave back the store's %d-byte reserve so that cleanup can write",
                 self.path, RESERVE_BYTES)
        return True

    def _clean(self, what: str, fn: Callable[[], T]) -> T:
        """``fn`` (a delete: it frees space or repairs) under the write lock. On a full disk the reserve is
        given back first, so that SQLite has room to record the delete even when other files filled the disk."""
        if self.degraded is not None and not self._reopen() and not self.read_only:
            if self._release_reserve():
                self._reopen()
        try:
            with self._writing(what):
                return fn()
        except StoreFullError:  # opened writable, and the database write itself found the disk full
            if not self._release_reserve():
                raise
        with self._writing(what):
            return fn()

    # -- maintenance

    @staticmethod
    def _select(cache: Any, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        """Rows of a read-only query on either kind of cache."""
        if isinstance(cache, _ReadOnlyCache):
            return cache.rows(sql, args)
        return list(cache._sql(sql, args).fetchall())

    def volume(self) -> int:
        """Bytes on disk used by both caches (as diskcache counts them)."""
        with self._io("measuring"):
            return int(self._blobs.volume()) + int(self._records.volume())

    def blob_count(self) -> int:
        with self._io("counting"):
            return len(self._blobs)

    def _stray_files(self) -> list[Path]:
        """Value files that no row names: half-written by a writer that was killed (or that failed
        before the fix that removes them)."""
        out: list[Path] = []
        for name, cache in (("records", self._records), ("blobs", self._blobs)):
            root = self.path / name
            known = {str(root / f) for (f,) in self._select(cache, "SELECT filename FROM Cache WHERE filename IS NOT NULL")}
            for dirpath, _, files in os.walk(root):
                for f in files:
                    full = os.path.join(dirpath, f)
                    if f.endswith(".val") and full not in known:
                        out.append(Path(full))
        return out

    def _remove_strays(self) -> tuple[int, int]:
        """Delete the stray value files and the directories left empty; (files, bytes). Under the lock."""
        removed = freed = 0
        for f in self._stray_files():
            with contextlib.suppress(FileNotFoundError):
                size = f.stat().st_size
                f.unlink()
                removed, freed = removed + 1, freed + size
        for name in ("records", "blobs"):
            root = self.path / name
            for dirpath, _dirs, files in os.walk(root, topdown=False):  # bottom-up: parents after children
                if Path(dirpath) != root and not files:
                    with contextlib.suppress(OSError):
                        os.rmdir(dirpath)
        return removed, freed

    def _missing_files(self) -> list[str]:
        """Cubins whose row names a value file that is gone (evicted file-first on a full disk, or lost)."""
        rows = self._select(self._blobs, "SELECT key, filename FROM Cache WHERE filename IS NOT NULL")
        return [str(k) for k, f in rows if not (self.path / "blobs" / f).exists()]

    def _evict_files_to(self, limit: int) -> int:
        """On a full disk: delete the files of least-recently-used cubins until they fit in ``limit``, before
        the database can be written (the rows go later); the number of files deleted."""
        rows = self._select(self._blobs, "SELECT filename, size FROM Cache WHERE filename IS NOT NULL"
                                         " ORDER BY access_time")
        volume = int(self._blobs.volume())
        n = 0
        for filename, size in rows:
            if volume <= limit:
                break
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path / "blobs" / filename)
                n += 1
            volume -= int(size or 0)
        return n

    def make_room(self) -> int:
        """Delete stray value files, and reopen the store for writing if a full disk had it read-only;
        the number of stray files removed. :class:`StoreUsageError` for a read-only store."""
        if self.read_only:
            raise StoreUsageError(f"store directory {self.path}: the store is read-only; cleaning it up needs "
                                  "write access")
        with self._io("removing half-written files"), self.lock:
            removed, _ = self._remove_strays()
        if not self._reopen() and self._release_reserve():  # room for the fixes that follow
            self._reopen()
        return removed

    def gc(self, *, max_bytes: int | None = None) -> GcReport:
        """Delete half-written value files; evict least-recently-used cubins beyond the size bound
        (``max_bytes`` or the store's); then drop records whose cubin is gone and cubins no record
        refers to. Works on a full disk: files are deleted before the database is written."""
        start = time.perf_counter()
        if self.read_only:
            raise StoreUsageError(f"store directory {self.path}: the store is read-only; gc needs write access")
        limit = self.max_bytes if max_bytes is None else int(max_bytes)
        with self._io("collecting garbage"), self.lock:
            before = self.volume()
            n_blobs = len(self._blobs)
            strays, _ = self._remove_strays()
            evicted_files = 0
            if self.degraded is not None and not self._reopen():
                evicted_files = self._evict_files_to(limit)  # frees space without touching the database
                if not self._reopen() and not (self._release_reserve() and self._reopen()):
                    log.warning("%s: the disk is still full after removing %d half-written and %d evicted cubin "
                                "files; the database was left as it is (the evicted entries read as misses)",
                                self.path, strays, evicted_files)
                    return GcReport(evicted_blobs=evicted_files, dangling_records=0, orphan_blobs=0,
                                    unreadable_records=0, entries=len(self._records), bytes_before=before,
                                    bytes_after=self.volume(), seconds=time.perf_counter() - start,
                                    half_written_files=strays)
            missing = self._missing_files()
            if missing:
                with self._blobs.transact(retry=True):
                    for digest in missing:
                        self._blobs.delete(digest, retry=True)
            self._evict_to(limit)
            evicted = n_blobs - len(self._blobs)
            blobs = {str(k) for k in self._blobs.iterkeys()}
            referenced: set[str] = set()
            drop: list[str] = []
            dangling = unreadable = entries = 0
            for key in list(self._records.iterkeys()):
                try:
                    raw = self._records.get(key, retry=True)
                    if raw is None:
                        continue
                    digest = json.loads(raw)["cubin_sha256"]
                    if not isinstance(digest, str):
                        raise TypeError(digest)
                except (ValueError, KeyError, TypeError, RecursionError, UnreadableEntry):
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
        self._keep_reserve()
        return GcReport(evicted_blobs=evicted, dangling_records=dangling, orphan_blobs=orphans,
                        unreadable_records=unreadable, entries=entries, bytes_before=before, bytes_after=after,
                        seconds=time.perf_counter() - start, half_written_files=strays)

    def _evict_to(self, limit: int) -> None:
        """Evict least-recently-used cubins, one at a time, until the cubins fit in ``limit`` bytes."""
        if self._blobs.volume() <= limit:
            return
        # diskcache keeps the access time of each row; this is its own LRU ordering query.
        order = [row[0] for row in self._select(self._blobs, "SELECT key FROM Cache ORDER BY access_time")]
        while order and self._blobs.volume() > limit:
            batch, order = order[:100], order[100:]
            with self._blobs.transact(retry=True):
                for digest in batch:
                    self._blobs.delete(digest, retry=True)
                    if self._blobs.volume() <= limit:
                        break

    def check_files(self, *, fix: bool = False) -> int:
        """The files against the databases: value files no row names (half-written) and rows whose file
        is gone; the number found. With ``fix`` both are removed (and directories left empty), files
        first, so that this works on a full disk too. No VACUUM: it needs as much free space as the
        database is large."""
        with self._io("checking files"):
            problems: list[str] = []
            for name, cache in (("records", self._records), ("blobs", self._blobs)):
                rows = self._select(cache, "PRAGMA quick_check")
                if [tuple(r) for r in rows] != [("ok",)]:
                    problems += [f"{name}: {r[0]}" for r in rows]
            strays = self._stray_files()
            missing = self._missing_files()
            for f in strays:
                log.warning("%s: half-written file %s (no entry names it)%s", self.path, f, "; deleted" if fix else "")
            for digest in missing:
                log.warning("%s: cubin %s has lost its file%s", self.path, digest, "; dropped" if fix else "")
            for problem in problems:
                log.warning("%s: database check: %s", self.path, problem)
            if fix and (strays or missing):
                self.make_room()
                if missing:
                    self._writable("dropping cubins whose file is gone")
                    with self.lock, self._blobs.transact(retry=True):
                        for digest in missing:
                            self._blobs.delete(digest, retry=True)
            elif fix:
                with self.lock:
                    self._remove_strays()  # empty directories, which are no problem
        return len(strays) + len(missing) + len(problems)


def _full(exc: BaseException) -> bool:
    """Whether an OS or SQLite error means the disk is full."""
    if isinstance(exc, OSError):
        return exc.errno in _FULL_ERRNOS
    text = str(exc).lower()
    return "full" in text or "disk i/o error" in text  # SQLite's words when its journal cannot grow


def _read_only(exc: BaseException) -> bool:
    """Whether an OS or SQLite error means the store cannot be written at all."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
    text = str(exc).lower()
    return "readonly" in text or "read-only" in text or "unable to open" in text

"""Tiers composed: the store a build uses.

:class:`TieredStore` reads its tiers in order, backfills the faster writable tiers on a hit in a
slower one, writes every writable tier on ``put``, and turns remote failures into a warning plus a
miss (or a :class:`~kbuild.errors.TierUnavailableError` when ``strict``), as sccache's multi-level
storage does.

Its policy for a local tier that cannot store now is one, whatever the reason: a read-only store, a
full disk (:class:`~kbuild.errors.StoreFullError`), or another process holding the write lock past
its short wait (:class:`~kbuild.errors.StoreBusyError`). ``put`` skips that tier for the rest of the
store's life with one warning and the build goes on with what it compiled; ``put(required=True)``
(``kbuild cache put``) raises instead. Reads are not affected.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING

from kbuild.errors import StoreBusyError, StoreError, StoreFullError, StoreUsageError, TierUnavailableError

from .record import Artefact, check_key
from .stats import StoreStats
from .store import EntryInfo
from .tier import Tier

if TYPE_CHECKING:
    from pathlib import Path

log = logging.getLogger(__name__)


class TieredStore:
    """Tiers read in order. A hit in a lower tier backfills the writable tiers above it.

    Failures of remote tiers (``remote=True`` tiers, i.e. all but the local one) become one
    warning and a miss, and the tier is skipped for the rest of this store's life; with
    ``strict`` they raise :class:`TierUnavailableError`. Other failures of the local tier raise;
    a local store that is read-only, full or busy is skipped by puts, with one warning.
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
        self._no_puts: dict[int, str] = {}
        """Tiers that cannot store now (read-only, full, busy) → why; puts skip them, reads do not."""

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

    def put(self, art: Artefact, *, required: bool = False) -> None:
        """Write ``art`` to every writable tier (records signed when a secret is set).

        A local tier that cannot store now (read-only, full disk, write lock busy) is skipped for the rest
        of this store's life with one warning; with ``required`` that raises instead."""
        records: dict[str | None, bytes] = {}
        wrote = False
        for i, tier in self._live():
            if i in self._no_puts:
                continue
            if not tier.writable:
                if tier.read_only_reason:
                    self._cannot_store(i, art, tier.read_only_reason, StoreUsageError, required)
                continue
            if tier.secret not in records:
                records[tier.secret] = art.record(tier.secret)
            try:
                tier.store_record(art, records[tier.secret])
                wrote = True
            except (StoreFullError, StoreBusyError) as exc:
                if self._remote(i):
                    raise
                self.stats.count(tier.name, "errors")
                self._cannot_store(i, art, str(exc), type(exc), required)
            except StoreError as exc:
                self._failed(i, exc, "put")
        if not wrote and not self._no_puts:
            raise StoreError("no writable store tier is available; the artefact was not stored")

    def _cannot_store(self, i: int, art: Artefact, reason: str, error: type[StoreError], required: bool) -> None:
        """Tier ``i`` cannot store now: raise (``required``), or skip it from now on and say so once, as a
        read-only store always did: it still serves its hits, and the build goes on with what it compiled."""
        if required:
            raise error(reason)
        self._no_puts[i] = reason
        log.warning("%s; new artefacts are not stored in the %s store for the rest of this run (%s was the "
                    "first); the build goes on", reason.rstrip("."), self.tiers[i].name, art.key)

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


__all__ = ["TieredStore"]

"""The store's two interfaces: :class:`Backend` (raw bytes) and :class:`Store` (verified artefacts).

The package is built around them (sccache's ``Storage`` trait is the model: a small interface, one file
per backend, behaviour composed by wrappers):

* a :class:`Backend` holds records and blobs and checks nothing: :mod:`kbuild.cache.local`,
  :mod:`kbuild.cache.http` and :mod:`kbuild.cache.redis_tier`, one file each, all held to the same
  contract suite (``tests/cache/test_store_contract.py``);
* a :class:`Store` hands out verified artefacts (:mod:`kbuild.cache.record`):
  :class:`~kbuild.cache.tier.Tier` makes one of a backend, :class:`~kbuild.cache.tiered.TieredStore`
  composes tiers, and :func:`~kbuild.cache.open.open_store` builds that from the settings.

This module holds only the interfaces and the types they return; it imports no backend.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .record import Artefact


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


@runtime_checkable
class Backend(Protocol):
    """Raw storage of records (``ac/<key>``) and blobs (``cas/<sha256>``). One file per backend.

    Backends do no verification. Failures of a remote raise :class:`TierUnavailableError`;
    local failures raise :class:`StoreError` (:class:`StoreFullError` for a full disk,
    :class:`StoreBusyError` when another process holds the write lock).

    **One bad name is that name's problem.** What a backend finds under one name that no kbuild could
    have written (a Redis list, a WebDAV collection, a local value that is not bytes) raises
    :class:`UnreadableEntry` from the reads of that name, ``has_*`` answers False for it, and
    ``put_*`` and ``delete_*`` replace or remove it like any value: it never makes the whole backend
    unavailable. A size cap holds before the value is read: :class:`EntryTooLarge` after reading at
    most the cap (and a few KiB of framing), never the whole value.
    """

    location: str
    """Where the data lives, for messages (never with credentials)."""

    def get_record(self, key: str) -> bytes | None:
        """The record, or None; :class:`EntryTooLarge` past :data:`MAX_RECORD_BYTES` (not read whole)."""
    def get_blob(self, digest: str, max_bytes: int | None = None) -> bytes | None:
        """The blob, or None; :class:`EntryTooLarge` past ``max_bytes`` (the size its record states) or
        :data:`MAX_BLOB_BYTES`, whichever is smaller, known before the blob is read."""
    def has_record(self, key: str) -> bool: ...
    def has_blob(self, digest: str) -> bool: ...
    def put_blob(self, digest: str, data: bytes) -> None:
        """Store a blob under its sha256 (idempotent: the same digest always means the same bytes);
        whatever else the name held is replaced."""
    def put_record(self, key: str, data: bytes, replace: bytes | None = None) -> bool:
        """Store a record after its blob; False when a record for ``key`` already exists, unless that
        record is byte for byte ``replace`` (one the tier found invalid), which is replaced: atomically
        (compare-and-set) where the backend can. A name holding no record at all (see
        :class:`UnreadableEntry`) counts as free."""
    def delete_record(self, key: str) -> bool: ...
    def delete_blob(self, digest: str) -> bool: ...
    def record_keys(self) -> Iterator[str]: ...
    def close(self) -> None: ...
    def transaction(self) -> contextlib.AbstractContextManager[Any]:
        """The context in which a tier checks for an entry and writes it (:meth:`Tier.store_record
        <kbuild.cache.tier.Tier.store_record>`): the local backend's cross-process write lock. A backend
        with no lock returns :func:`contextlib.nullcontext`; its ``put_record`` alone decides a race
        (create-if-absent or compare-and-set where the server has it)."""


@runtime_checkable
class Store(Protocol):
    """The store interface the build pipeline uses. Implemented by :class:`~kbuild.cache.tier.Tier` and
    :class:`~kbuild.cache.tiered.TieredStore`."""

    def get(self, key: str) -> Artefact | None:
        """The verified artefact, or None (miss, corrupt or rejected entry)."""
    def put(self, art: Artefact) -> None:
        """Store ``art`` (a no-op when the key is already stored: entries are immutable)."""
    def contains(self, key: str) -> bool: ...
    def delete(self, key: str) -> bool: ...
    def keys(self) -> Iterator[str]: ...
    def entries(self) -> Iterator[EntryInfo]: ...
    def close(self) -> None: ...


__all__ = ["Backend", "EntryInfo", "Store"]

"""kbuild.cache: the content-addressed artefact store.

Owns the store interface, its tiers (local diskcache, HTTP, Redis), the lock file, bundles
and statistics. It stores bytes and metadata under keys and never imports triton or torch.

    from kbuild.cache import Artefact, open_store
    art = Artefact.create(key=key, cubin=cubin, meta={"kernel": "add", "target": "sm_90"})
    with open_store(settings) as store:
        store.put(art)
        assert store.get(key) == art
"""

from __future__ import annotations

from kbuild.errors import (
    BundleError,
    LockFileError,
    LockMismatchError,
    StoreFullError,
    StoreUsageError,
    TierUnavailableError,
)

from .lock import LockEntry, LockKey, check_lock, lock_entries, read_lock, update_lock, write_lock
from .stats import StoreStats, TierStats
from .store import (
    Artefact,
    Backend,
    EntryInfo,
    Store,
    Tier,
    TieredStore,
    backend_for_url,
    open_store,
)

__all__ = [
    "Artefact",
    "Backend",
    "BundleError",
    "EntryInfo",
    "LockEntry",
    "LockFileError",
    "LockKey",
    "LockMismatchError",
    "Store",
    "StoreFullError",
    "StoreStats",
    "StoreUsageError",
    "Tier",
    "TierStats",
    "TierUnavailableError",
    "TieredStore",
    "backend_for_url",
    "check_lock",
    "lock_entries",
    "open_store",
    "read_lock",
    "update_lock",
    "write_lock",
]

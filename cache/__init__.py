"""kbuild.cache: the content-addressed artefact store.

It stores bytes and metadata under keys and never imports triton or torch. Module by module:

* ``store`` — the two interfaces: :class:`Backend` (raw records and blobs) and :class:`Store`
  (verified artefacts), and :class:`EntryInfo`;
* ``record`` — :class:`Artefact`, the record format (``kbuild-artefact/1``), its digests, signature
  and caps;
  (records are written with :func:`kbuild.canonical.canonical_json`, shared with the content key);
* ``tier`` — :class:`Tier`: one backend made a verified store (verify on read, blob first and record
  last on write, ``verify``);
* ``tiered`` — :class:`TieredStore`: tiers read in order with backfill, remote failures a warning;
* ``open`` — :func:`open_store` from the settings model, :func:`backend_for_url`;
* ``local``, ``http``, ``redis_tier`` — one backend each (diskcache; Bazel-layout HTTP; Redis),
  with ``url`` (credentials redacted, host names checked) and ``deadline`` (a bound on a whole
  request) for the remote ones;
* ``lock`` — ``kbuild.lock``; ``bundle`` — ``kbuild cache export/import``; ``stats`` — hit and
  miss counts and time saved; ``cli`` — ``kbuild cache``.

::

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
from .open import backend_for_url, open_store
from .record import Artefact
from .stats import StoreStats, TierStats
from .store import Backend, EntryInfo, Store
from .tier import Tier
from .tiered import TieredStore

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

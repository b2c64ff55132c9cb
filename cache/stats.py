"""Store statistics: hits and misses per tier, bytes moved, and build time saved.

A :class:`StoreStats` lives in memory while a store is open; :meth:`StoreStats.flush` adds it to
the totals kept in ``<store>/stats.json`` (under a file lock, written atomically), which is what
``kbuild cache stats`` shows. Time saved is the sum, over hits, of the artefact metadata's
``compile_seconds`` and ``tune_seconds``: the work a hit did not have to redo.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from kbuild.fsutil import write_atomic
from kbuild.jsonio import parse_json

log = logging.getLogger(__name__)

STATS_FILE = "stats.json"
_COUNTERS = ("hits", "misses", "corrupt", "rejected", "errors", "puts", "backfills", "conflicts",
             "bytes_read", "bytes_written")


@dataclass
class TierStats:
    """Counters of one tier."""

    hits: int = 0
    misses: int = 0
    corrupt: int = 0
    """Entries whose digests did not match; they count as misses and were deleted (writable tiers)."""
    rejected: int = 0
    """Records refused because of a missing or wrong HMAC signature (poisoning)."""
    errors: int = 0
    """Failed operations (remote down, timeout, unexpected status)."""
    puts: int = 0
    backfills: int = 0
    conflicts: int = 0
    """Puts of an existing key with different bytes (the first writer's entry was kept)."""
    bytes_read: int = 0
    bytes_written: int = 0

    def add(self, other: TierStats) -> None:
        for name in _COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclass
class StoreStats:
    """Counters of every tier plus the time saved by hits. Thread-safe increments."""

    tiers: dict[str, TierStats] = field(default_factory=dict)
    time_saved_seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def tier(self, name: str) -> TierStats:
        with self._lock:
            return self.tiers.setdefault(name, TierStats())

    def count(self, tier: str, counter: str, n: int = 1) -> None:
        stats = self.tier(tier)
        with self._lock:
            setattr(stats, counter, getattr(stats, counter) + n)

    def saved(self, meta: Mapping[str, Any]) -> None:
        seconds = 0.0
        for name in ("compile_seconds", "tune_seconds"):
            value = meta.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                seconds += float(value)
        with self._lock:
            self.time_saved_seconds += seconds

    def is_empty(self) -> bool:
        return self.time_saved_seconds == 0 and all(
            not any(getattr(t, c) for c in _COUNTERS) for t in self.tiers.values())

    def totals(self) -> TierStats:
        total = TierStats()
        for t in self.tiers.values():
            total.add(t)
        return total

    def as_dict(self) -> dict[str, Any]:
        total = self.totals()
        lookups = total.hits + total.misses
        return {
            "tiers": {name: t.as_dict() for name, t in sorted(self.tiers.items())},
            "time_saved_seconds": round(self.time_saved_seconds, 6),
            "hit_rate": round(total.hits / lookups, 6) if lookups else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StoreStats:
        out = cls()
        tiers = data.get("tiers", {})
        if isinstance(tiers, Mapping):
            for name, counters in tiers.items():
                t = out.tier(str(name))
                if isinstance(counters, Mapping):
                    for c in _COUNTERS:
                        v = counters.get(c, 0)
                        if isinstance(v, int):
                            setattr(t, c, v)
        saved = data.get("time_saved_seconds", 0.0)
        out.time_saved_seconds = float(saved) if isinstance(saved, (int, float)) else 0.0
        return out

    def take(self) -> StoreStats:
        """Return the counters so far and reset them (so that flushing twice does not count twice)."""
        with self._lock:
            snapshot = StoreStats(tiers=self.tiers, time_saved_seconds=self.time_saved_seconds)
            self.tiers = {}
            self.time_saved_seconds = 0.0
        return snapshot

    def flush(self, directory: Path) -> None:
        """Add the counters to ``directory/stats.json`` and reset them. Failures are logged, not raised."""
        snapshot = self.take()
        if snapshot.is_empty():
            return
        try:
            with FileLock(str(directory / (STATS_FILE + ".lock")), timeout=10):
                total = load_stats(directory)
                for name, t in snapshot.tiers.items():
                    total.tier(name).add(t)
                total.time_saved_seconds += snapshot.time_saved_seconds
                _write_json_atomic(directory / STATS_FILE, total.as_dict())
        except Exception as exc:  # statistics must never fail a build
            log.warning("could not update store statistics in %s: %s", directory, exc)


def load_stats(directory: Path) -> StoreStats:
    """The accumulated statistics of the store at ``directory`` (empty when none were recorded)."""
    path = directory / STATS_FILE
    try:
        data = parse_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return StoreStats()
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable statistics file %s: %s", path, exc)
        return StoreStats()
    return StoreStats.from_dict(data) if isinstance(data, Mapping) else StoreStats()


def reset_stats(directory: Path) -> None:
    with FileLock(str(directory / (STATS_FILE + ".lock")), timeout=10), contextlib.suppress(FileNotFoundError):
        (directory / STATS_FILE).unlink()


def _write_json_atomic(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")

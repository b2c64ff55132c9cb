"""Leases in a shared tier: at most one prewarm works on a key at a time, and a dead one's claim expires.

A lease is a small JSON record (:class:`LeaseRecord`, ``kbuild-lease/1``) stored beside the entries of a
remote tier, one per artefact key. Its ``holder`` names the prewarm run that took it (every task of one run
shares it, so a task that Ray retries after its node died takes its own run's lease again at once); its
``token`` names one taking of it; ``expires`` is a Unix time after which anyone may take it over. The holder
renews it (:meth:`Leases.renew`) while it works, so the time to live only bounds how long a run that died
keeps others waiting. Expiry compares wall clocks of different machines: keep them in NTP sync.

Two backends, each using what its server makes atomic:

* **Redis** (:class:`RedisLeases`): ``<prefix>:lease:<key>`` with a ``PX`` expiry, taken, renewed and
  released by server-side scripts that compare the holder (Redis expires it itself).
* **HTTP/WebDAV** (:class:`HttpLeases`; nginx with ``dav_methods PUT DELETE MOVE``): a lease is the collection
  ``{prefix}/lease/<key>/`` holding the record ``holder``. It is taken by writing the record into a private
  staging collection and moving that onto ``lease/<key>/`` with ``Overwrite: F``: a rename, which the server
  refuses when the lease exists (412). An expired lease is taken over by moving it to the tombstone
  ``lease/tomb/<key>.<token>/`` (``Overwrite: F``): only one mover per expired token can succeed, so two runs
  that saw the same expired lease cannot both take it over; the winner then checks that what it moved is the
  expired record and moves it back otherwise. Releasing moves the lease to its tombstone too, so a stale
  holder can never remove a newer lease. Tombstones are small and left in place (``kbuild cache`` ignores them).
  A server without MOVE (bazel-remote, an nginx without it) answers 405: :class:`LeaseUnsupported`.

Nothing here imports triton or torch; :func:`leases_for` picks the implementation for a backend.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Protocol
from urllib.parse import quote

from kbuild.errors import StoreUsageError, TierUnavailableError

from .record import check_key

log = logging.getLogger(__name__)

LEASE_FORMAT = "kbuild-lease/1"
#: Most bytes of a lease record read back (a record is about 300 bytes).
MAX_LEASE_BYTES = 1 << 14


class LeaseUnsupported(StoreUsageError):
    """The tier cannot hold leases (an HTTP server without WebDAV MOVE; the local tier). Exit status 2."""


@dataclass(frozen=True)
class LeaseRecord:
    """One lease on one artefact key."""

    key: str
    holder: str
    """The run that holds it (every task of a prewarm run shares one holder)."""
    token: str
    """Unique per taking (and kept by renewals): names the tombstone a takeover or release moves it to."""
    expires: float
    """Unix time after which another run may take the lease over."""
    owner: dict[str, Any]
    """Who is working under it, for messages: host, node, GPU, pid."""
    format: str = LEASE_FORMAT

    def expired(self, now: float | None = None) -> bool:
        return (time.time() if now is None else now) >= self.expires

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes, key: str) -> LeaseRecord | None:
        """The record, or None when ``raw`` is not one for ``key`` (a damaged or planted record counts as
        expired: whoever finds it may take the lease over)."""
        try:
            doc = json.loads(raw)
            rec = cls(key=str(doc["key"]), holder=str(doc["holder"]), token=str(doc["token"]),
                      expires=float(doc["expires"]), owner=dict(doc.get("owner") or {}), format=str(doc["format"]))
        except (ValueError, KeyError, TypeError):
            return None
        return rec if rec.key == key and rec.format == LEASE_FORMAT else None


def new_record(key: str, holder: str, seconds: float, owner: dict[str, Any] | None = None) -> LeaseRecord:
    return LeaseRecord(key=key, holder=holder, token=uuid.uuid4().hex, expires=time.time() + seconds,
                       owner=dict(owner or {}))


@dataclass(frozen=True)
class Claim:
    """The answer of :meth:`Leases.acquire`: ``held`` is the lease as it now stands (ours when ``ok``)."""

    ok: bool
    held: LeaseRecord | None


class Leases(Protocol):
    """Lease operations on one tier. Network failures raise :class:`TierUnavailableError`."""

    location: str

    def acquire(self, key: str, holder: str, seconds: float, owner: dict[str, Any] | None = None) -> Claim:
        """Take the lease on ``key`` for ``seconds`` unless another holder has one that has not expired. The same
        ``holder`` takes its own lease again (a retried task of the same run)."""
    def renew(self, lease: LeaseRecord, seconds: float) -> LeaseRecord | None:
        """Push the expiry of a lease we hold ``seconds`` ahead; None when it is no longer ours."""
    def release(self, lease: LeaseRecord) -> bool:
        """Give the lease up; False when it was no longer ours (expired and taken over)."""
    def current(self, key: str) -> LeaseRecord | None:
        """The lease on ``key`` as stored (expired or not), or None."""


# ---------------------------------------------------------------------------------------------
# Redis

_ACQUIRE = """
local cur = redis.call('GET', KEYS[1])
if cur then
    local ok, rec = pcall(cjson.decode, cur)
    if ok and type(rec) == 'table' and rec['holder'] ~= ARGV[2] then
        return {0, cur}
    end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
return {1, ARGV[1]}
"""

_RENEW = """
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
local ok, rec = pcall(cjson.decode, cur)
if ok and type(rec) == 'table' and rec['token'] == ARGV[2] then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
    return 1
end
return 0
"""

_RELEASE = """
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
local ok, rec = pcall(cjson.decode, cur)
if ok and type(rec) == 'table' and rec['token'] == ARGV[1] then
    redis.call('DEL', KEYS[1])
    return 1
end
return 0
"""


class RedisLeases:
    """Leases on a :class:`~kbuild.cache.redis_tier.RedisBackend`'s server (Redis expires them itself)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.location = backend.location
        client = backend.client
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    def _name(self, key: str) -> str:
        return f"{self.backend.prefix}:lease:{check_key(key)}"

    @staticmethod
    def _ms(seconds: float) -> int:
        return max(1, int(seconds * 1000))

    def acquire(self, key: str, holder: str, seconds: float, owner: dict[str, Any] | None = None) -> Claim:
        rec = new_record(key, holder, seconds, owner)
        ok, raw = self.backend._call("lease acquire", self._acquire, keys=[self._name(key)],
                                     args=[rec.to_bytes(), holder, self._ms(seconds)])
        return Claim(bool(ok), LeaseRecord.from_bytes(bytes(raw), key))

    def renew(self, lease: LeaseRecord, seconds: float) -> LeaseRecord | None:
        new = LeaseRecord(key=lease.key, holder=lease.holder, token=lease.token, expires=time.time() + seconds,
                          owner=lease.owner)
        ok = self.backend._call("lease renew", self._renew, keys=[self._name(lease.key)],
                                args=[new.to_bytes(), lease.token, self._ms(seconds)])
        return new if ok else None

    def release(self, lease: LeaseRecord) -> bool:
        return bool(self.backend._call("lease release", self._release, keys=[self._name(lease.key)],
                                       args=[lease.token]))

    def current(self, key: str) -> LeaseRecord | None:
        raw = self.backend._call("lease read", self.backend.client.get, self._name(key))
        return LeaseRecord.from_bytes(bytes(raw), key) if raw is not None else None


# ---------------------------------------------------------------------------------------------
# HTTP (WebDAV)

class HttpLeases:
    """Leases on a WebDAV server through an :class:`~kbuild.cache.http.HttpBackend` (see the module docstring)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.location = backend.location

    def _path(self, key: str) -> str:
        return f"/lease/{quote(check_key(key))}/"

    def _url(self, path: str) -> str:
        b = self.backend
        default = 443 if b.scheme == "https" else 80
        netloc = b.host if b.port == default else f"{b.host}:{b.port}"
        return f"{b.scheme}://{netloc}{b.prefix}{path}"

    def _move(self, src: str, dst: str) -> int:
        """MOVE ``src`` onto ``dst`` without overwriting; the status (201 moved, 412 ``dst`` exists, 404 no
        ``src``). 405/501: the server has no MOVE."""
        status, body = self.backend.request("MOVE", src,
                                            extra_headers={"Destination": self._url(dst), "Overwrite": "F"})
        if status in (405, 501):
            raise LeaseUnsupported(f"{self.location}: the server does not support WebDAV MOVE (HTTP {status}), which "
                                   "leases need; nginx: dav_methods PUT DELETE MOVE;")
        if status in (201, 204, 404, 409, 412):
            return status
        raise self.backend._unexpected("MOVE", src, status, body)

    def _raw(self, path: str) -> bytes | None:
        return self.backend._get(path + "holder", MAX_LEASE_BYTES)  # type: ignore[no-any-return]

    def current(self, key: str) -> LeaseRecord | None:
        raw = self._raw(self._path(key))
        return LeaseRecord.from_bytes(raw, key) if raw is not None else None

    def _install(self, rec: LeaseRecord) -> bool:
        """Write ``rec`` into a private staging collection and move it onto the lease: True when it was absent."""
        staging = f"/lease/staging/{rec.token}/"
        self.backend._put(staging + "holder", rec.to_bytes())
        status = self._move(staging, self._path(rec.key))
        if status in (201, 204):
            return True
        self.backend._delete(staging + "holder")
        return False

    def _tomb(self, key: str, name: str) -> str:
        return f"/lease/tomb/{quote(check_key(key))}.{quote(name)}/"

    def acquire(self, key: str, holder: str, seconds: float, owner: dict[str, Any] | None = None) -> Claim:
        rec = new_record(key, holder, seconds, owner)
        self.backend._put("/lease/tomb/.keep", b"")  # MOVE does not create the destination's parent
        for _ in range(16):  # each round either ends or sees the lease change hands
            if self._install(rec):
                return Claim(True, rec)
            raw = self._raw(self._path(key))
            if raw is None:  # given up or taken over between our two requests: try again
                continue
            held = LeaseRecord.from_bytes(raw, key)
            if held is not None and held.holder == holder:  # our run's own lease (a retried task): take it again
                mine = LeaseRecord(key=key, holder=holder, token=held.token, expires=rec.expires, owner=rec.owner)
                self.backend._put(self._path(key) + "holder", mine.to_bytes())
                return Claim(True, mine)
            if held is not None and not held.expired():
                return Claim(False, held)
            # Expired (or damaged): bury exactly that record. Its tombstone is named by its token (a damaged one by
            # its bytes' digest), and the record stays on the lease until moved there, so of all the runs that saw
            # it only the first mover succeeds; the others get 412 (or 404) and look again.
            name = held.token if held is not None else "damaged-" + hashlib.sha256(raw).hexdigest()[:16]
            if self._move(self._path(key), self._tomb(key, name)) not in (201, 204):
                continue
            moved = self._raw(self._tomb(key, name))
            if held is not None and moved is not None and moved != raw:
                again = LeaseRecord.from_bytes(moved, key)
                if again is not None and again.token == held.token and not again.expired():
                    # renewed by its holder between our read and the move: give it back
                    log.warning("%s: the lease on %s was renewed while being taken over; giving it back",
                                self.location, key)
                    self._move(self._tomb(key, name), self._path(key))
                    return Claim(False, again)
            log.info("%s: took over the expired lease on %s (held by %s)", self.location, key,
                     held.holder if held else "a damaged record")
        return Claim(False, self.current(key))

    def renew(self, lease: LeaseRecord, seconds: float) -> LeaseRecord | None:
        held = self.current(lease.key)
        if held is None or held.token != lease.token:
            return None
        new = LeaseRecord(key=lease.key, holder=lease.holder, token=lease.token, expires=time.time() + seconds,
                          owner=lease.owner)
        self.backend._put(self._path(lease.key) + "holder", new.to_bytes())
        return new

    def release(self, lease: LeaseRecord) -> bool:
        held = self.current(lease.key)
        if held is None or held.token != lease.token:
            return False
        return self._move(self._path(lease.key), self._tomb(lease.key, lease.token)) in (201, 204)


def leases_for(backend: Any) -> Leases:
    """The lease implementation for a remote backend; :class:`LeaseUnsupported` for one that has none."""
    from .http import HttpBackend

    if isinstance(backend, HttpBackend):
        return HttpLeases(backend)
    try:
        from .redis_tier import RedisBackend
    except ImportError:  # pragma: no cover - the module itself imports nothing optional
        RedisBackend = None  # type: ignore[assignment,misc]
    if RedisBackend is not None and isinstance(backend, RedisBackend):
        return RedisLeases(backend)
    raise LeaseUnsupported(f"{getattr(backend, 'location', backend)}: this tier cannot hold leases; a distributed "
                           "prewarm needs a shared http(s):// (WebDAV with MOVE) or redis:// tier")


__all__ = [
    "LEASE_FORMAT",
    "Claim",
    "HttpLeases",
    "LeaseRecord",
    "LeaseUnsupported",
    "Leases",
    "RedisLeases",
    "TierUnavailableError",
    "leases_for",
    "new_record",
]

"""The Redis tier (redis-py), for teams that already run Redis for Triton's or inductor's caches.

``redis://[user:password@]host[:port][/db][?prefix=kbuild]`` (also ``rediss://`` and
``unix://``). Keys: ``<prefix>:cas:<sha256>`` holds the cubin, ``<prefix>:ac:<key>`` the JSON
record. Records are written after their blob by a server-side script that creates the record when the
name holds none, so the first writer wins atomically; a record that failed verification is replaced
by compare-and-set (a record planted first must not keep the legitimate one out). Size and eviction
are the Redis server's business (``maxmemory`` with an LRU policy); an evicted blob makes a dangling
record, which reads treat as a miss.

**One key is one key's problem.** Reads are one server-side script (:data:`_READ`) that answers with
the value only when the key holds a string no longer than the cap: a key of another type (``LPUSH``
onto a record's name) is :class:`~kbuild.cache.record.UnreadableEntry` and a value over the cap is
:class:`~kbuild.cache.record.EntryTooLarge`, both known from ``TYPE`` and ``STRLEN`` before a byte of
the value crosses the wire, and both a miss for that key alone. Writes replace a key of another type
(``SET`` replaces any type; the record script treats a non-string as no record).

``timeout`` bounds each socket operation and ``deadline`` each whole command: a server that
drips its reply is cut off by closing the connections (:mod:`kbuild.cache.deadline`), and a
connection error is retried once, without back-off.

The module is not called ``redis.py`` so that it never shadows the redis-py package.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from kbuild.errors import StoreUsageError, TierUnavailableError

from .deadline import Deadline
from .record import MAX_BLOB_BYTES, MAX_RECORD_BYTES, EntryTooLarge, UnreadableEntry, is_digest
from .url import check_host, redact_url

log = logging.getLogger(__name__)

T = TypeVar("T")

_PREFIX = re.compile(r"^[A-Za-z0-9_.-]+$")

#: KEYS[1] = a record or cubin key, ARGV[1] = the cap in bytes. {0}: absent; {1, type}: a key of another
#: type; {2, length}: a string over the cap (not sent); {3, value}: the value.
_READ = """
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return {0} end
if kind ~= 'string' then return {1, kind} end
local size = redis.call('STRLEN', KEYS[1])
if size > tonumber(ARGV[1]) then return {2, size} end
return {3, redis.call('GET', KEYS[1])}
"""

#: KEYS[1] = record key, ARGV[1] = new record, ARGV[2] (optional) = the record the writer found invalid.
#: Writes when the key holds no string (absent, or a key of another type: never a record) or holds exactly
#: ARGV[2]; 1 when it wrote.
_PUT_RECORD = """
if redis.call('TYPE', KEYS[1])['ok'] == 'string' then
    if ARGV[2] == nil or redis.call('GET', KEYS[1]) ~= ARGV[2] then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
"""


class RedisBackend:
    """A Redis server as a store tier. The connection is made on first use."""

    def __init__(self, url: str, *, timeout: float = 5.0, deadline: float = 30.0) -> None:
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError:
            raise StoreUsageError(f"store URL {redact_url(url)!r} needs redis-py: pip install 'kbuild[remote]'") from None
        self._redis = redis
        parts = urlsplit(url)
        if parts.scheme != "unix":
            check_host(url, parts.hostname or "localhost")  # redis-py's default host
        query = parse_qsl(parts.query, keep_blank_values=True)
        prefix = "kbuild"
        rest = []
        for name, value in query:
            if name == "prefix":
                prefix = value
            else:
                rest.append((name, value))
        if not _PREFIX.fullmatch(prefix):
            raise StoreUsageError(f"store URL {redact_url(url)!r}: prefix {prefix!r} must be letters, digits, _ . -")
        self.prefix = prefix
        clean = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(rest), parts.fragment))
        self.location = redact_url(url)
        self.deadline = deadline
        self.max_record_bytes = MAX_RECORD_BYTES
        self.max_blob_bytes = MAX_BLOB_BYTES
        try:
            self.client = redis.Redis.from_url(clean, socket_timeout=timeout, socket_connect_timeout=timeout,
                                               retry=Retry(NoBackoff(), 1))
        except ValueError as exc:
            raise StoreUsageError(f"store URL {self.location!r}: {exc}") from None
        self._read = self.client.register_script(_READ)
        self._put_record = self.client.register_script(_PUT_RECORD)

    def __repr__(self) -> str:
        return f"RedisBackend({self.location!r})"

    def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` within the deadline; Redis failures become :class:`TierUnavailableError`."""
        with Deadline(self.deadline, self.client.connection_pool.disconnect) as deadline:
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                if deadline.expired:  # the connection was closed under the command: any error may follow
                    raise self._late(what) from None
                if isinstance(exc, self._redis.RedisError):
                    raise TierUnavailableError(f"{self.location}: {what}: {exc}") from None
                # redis-py trips over replies it did not expect (a server that is not Redis, or a broken one)
                log.debug("%s: %s failed", self.location, what, exc_info=True)
                raise TierUnavailableError(f"{self.location}: {what}: unexpected reply "
                                           f"({type(exc).__name__}: {exc})") from None
            if deadline.expired:
                raise self._late(what)
            return result

    def _late(self, what: str) -> TierUnavailableError:
        return TierUnavailableError(f"{self.location}: {what}: no complete answer within the {self.deadline:g} s "
                                    "deadline (remote_deadline, KBUILD_REMOTE_DEADLINE)")

    def _ac(self, key: str) -> str:
        return f"{self.prefix}:ac:{key}"

    def _cas(self, digest: str) -> str:
        return f"{self.prefix}:cas:{digest}"

    # -- Backend protocol

    def _get(self, what: str, name: str, limit: int) -> bytes | None:
        """The value of ``name`` (:data:`_READ`): none of it crosses the wire when the key is of another type
        or its length is over ``limit``, so a planted giant value costs a length, not its size in memory."""
        answer = self._call(what, self._read, keys=[name], args=[limit])
        if not isinstance(answer, list) or not answer or answer[0] not in (0, 1, 2, 3):
            raise TierUnavailableError(f"{self.location}: {what}: unexpected reply {str(answer)[:80]!r}")
        if answer[0] == 0:
            return None
        if answer[0] == 1:
            kind = answer[1].decode("ascii", "replace") if isinstance(answer[1], bytes) else str(answer[1])
            raise UnreadableEntry(f"{self.location}: {what} {name}: the key holds a Redis {kind}, not a string")
        if answer[0] == 2:
            raise EntryTooLarge(f"{self.location}: {what} {name}: {answer[1]} bytes, over the {limit}-byte cap")
        return bytes(answer[1])

    def get_record(self, key: str) -> bytes | None:
        return self._get("GET record", self._ac(key), self.max_record_bytes)

    def get_blob(self, digest: str, max_bytes: int | None = None) -> bytes | None:
        limit = self.max_blob_bytes if max_bytes is None else min(max_bytes, self.max_blob_bytes)
        return self._get("GET cubin", self._cas(digest), limit)

    def _is_string(self, name: str) -> bool:
        """Whether ``name`` holds a value (a string): a key of another type is no record and no cubin."""
        return self._call("TYPE", self.client.type, name) in (b"string", "string")

    def has_record(self, key: str) -> bool:
        return self._is_string(self._ac(key))

    def has_blob(self, digest: str) -> bool:
        return self._is_string(self._cas(digest))

    def put_blob(self, digest: str, data: bytes) -> None:
        self._call("SET cubin", self.client.set, self._cas(digest), bytes(data))

    def put_record(self, key: str, data: bytes, replace: bytes | None = None) -> bool:
        # One server-side step (_PUT_RECORD): write when the key holds no record (absent, or of another type) or
        # still holds the invalid record the tier read, never over a record another writer stored in between.
        args = [bytes(data)] if replace is None else [bytes(data), bytes(replace)]
        return bool(self._call("SET record", self._put_record, keys=[self._ac(key)], args=args))

    def delete_record(self, key: str) -> bool:
        return bool(self._call("DEL record", self.client.delete, self._ac(key)))

    def delete_blob(self, digest: str) -> bool:
        return bool(self._call("DEL cubin", self.client.delete, self._cas(digest)))

    def record_keys(self) -> Iterator[str]:
        start = len(self.prefix) + len(":ac:")

        def scan() -> list[str]:
            out = []
            for raw in self.client.scan_iter(match=f"{self.prefix}:ac:*", count=1000):
                name = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
                if is_digest(name[start:]):
                    out.append(name[start:])
            return sorted(out)

        return iter(self._call("SCAN", scan))

    def close(self) -> None:
        self.client.close()

    def transaction(self) -> contextlib.AbstractContextManager[Any]:
        """No lock: :meth:`put_record` is create-if-absent (``SET NX``) or compare-and-set on the server."""
        return contextlib.nullcontext()

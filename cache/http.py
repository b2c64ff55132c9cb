"""The HTTP tier, in the Bazel remote-cache layout.

``http(s)://[user:password@]host[:port][/prefix]``:

* ``GET/PUT/HEAD {prefix}/cas/<sha256>`` — the cubin bytes;
* ``GET/PUT/HEAD {prefix}/ac/<key>`` — the JSON metadata record (kbuild's record in place of
  Bazel's ActionResult protobuf; bazel-remote needs ``--disable_http_ac_validation``);
* ``DELETE`` for ``kbuild cache rm``/``verify --fix``, and ``GET {prefix}/ac/`` as a JSON
  directory listing for ``ls`` — both optional.

nginx serves all of it with the WebDAV module::

    location / { dav_methods PUT DELETE; create_full_put_path on; autoindex on; autoindex_format json; }

nginx writes a PUT body to a temporary file and renames it into place, so readers never see a
partial record or blob. Credentials in the URL are sent as HTTP basic authentication and never
shown. Connections are kept alive, one per thread. ``timeout`` bounds each socket operation and
``deadline`` each whole request (connecting, headers and body: :mod:`kbuild.cache.deadline`), so
a server that drips its answer cannot hold a build. Any network failure, timeout, missed deadline
or unexpected status raises :class:`TierUnavailableError`, which the tiered store turns into a
warning.

**One path is one key's problem.** A WebDAV collection (a directory, made by ``PUT /ac/<key>/x``)
where a record or cubin belongs answers GET and HEAD with a redirect to the same path plus ``/``:
that is :class:`~kbuild.cache.record.UnreadableEntry` for that key (a miss; listed, so that
``verify --fix`` finds it), never the tier down. PUT and DELETE on it answer 409 Conflict; the
backend then deletes the collection (``DELETE <path>/``) and repeats the request once, so the next
writer repairs the key. Size caps hold before a body is read: a declared ``Content-Length`` over
the cap is refused unread, a streamed one after the cap.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import logging
import socket
import ssl
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from kbuild.errors import StoreUsageError, TierUnavailableError
from kbuild.jsonio import parse_json

from .deadline import Deadline
from .record import MAX_BLOB_BYTES, MAX_RECORD_BYTES, EntryTooLarge, UnreadableEntry, is_digest
from .url import check_host, redact_url

log = logging.getLogger(__name__)

_OK_PUT = {200, 201, 204}
#: The JSON listing of ``/ac/``: about 150 bytes per entry, so a million entries.
_MAX_LISTING_BYTES = 256 << 20
#: What is read of any other answer (error pages, PUT and DELETE answers).
_MAX_OTHER_BYTES = 1 << 16
_REDIRECTS = {301, 302, 303, 307, 308}


class HttpBackend:
    """A Bazel-layout HTTP cache (nginx WebDAV, bazel-remote, ...)."""

    def __init__(self, url: str, *, timeout: float = 5.0, deadline: float = 30.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise StoreUsageError(f"store URL {redact_url(url)!r}: expected http(s)://host[:port][/prefix]")
        check_host(url, parts.hostname)
        self.location = redact_url(url)  # exactly as configured, so messages can be matched to remotes[i]
        self.scheme = parts.scheme
        self.host = parts.hostname
        try:
            self.port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise StoreUsageError(f"store URL {self.location!r}: invalid port") from None
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.deadline = deadline
        self.max_record_bytes = MAX_RECORD_BYTES
        self.max_blob_bytes = MAX_BLOB_BYTES
        self.headers: dict[str, str] = {}
        if parts.username is not None:
            token = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            self.headers["Authorization"] = "Basic " + base64.b64encode(token).decode("ascii")
        self._tls = ssl.create_default_context() if parts.scheme == "https" else None
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"HttpBackend({self.location!r})"

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._tls is not None:
                conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self._tls)
            else:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            self._local.conn = conn
            self._local.fresh = True
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def request(self, method: str, path: str, body: bytes | None = None, *,
                limit: int | None = None, extra_headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """One request (retried once on a kept-alive connection the server closed), finished within
        ``deadline`` seconds in all or :class:`TierUnavailableError`. All kbuild requests are
        idempotent, so the retry is safe. A successful answer's body over ``limit`` bytes raises
        :class:`EntryTooLarge` after reading at most ``limit`` + 64 KiB of it. ``extra_headers``: for this
        request only (WebDAV's ``Destination`` and ``Overwrite`` for :mod:`kbuild.cache.lease`)."""
        status, data, _ = self._exchange(method, path, body, limit=limit, extra_headers=extra_headers)
        return status, data

    def _exchange(self, method: str, path: str, body: bytes | None = None, *, limit: int | None = None,
                  extra_headers: dict[str, str] | None = None) -> tuple[int, bytes, str | None]:
        """:meth:`request`, and the answer's ``Location`` header."""
        url = self.prefix + path
        headers = {**self.headers, **(extra_headers or {})}
        if body is not None:
            headers["Content-Type"] = "application/octet-stream"
        current: list[http.client.HTTPConnection] = []

        def abort() -> None:  # runs in the deadline's timer thread: shut the socket, never close the object
            sock = current[-1].sock if current else None
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)

        with Deadline(self.deadline, abort) as deadline:
            for attempt in (0, 1):
                conn = self._connection()
                current.append(conn)
                reused = not getattr(self._local, "fresh", True)
                self._local.fresh = False
                if conn.sock is None:
                    conn.timeout = max(0.001, min(self.timeout, deadline.remaining()))
                try:
                    conn.request(method, url, body=body, headers=headers)
                    resp = conn.getresponse()
                    if limit is not None and resp.status == 200:
                        data = self._read_body(resp, method, path, limit)
                    else:
                        data = self._read_some(resp)
                    if deadline.expired:
                        raise TimeoutError("deadline")
                    if resp.will_close:
                        self._drop()
                    return resp.status, data, resp.getheader("Location")
                except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                    self._drop()
                    if deadline.expired:
                        raise self._late(method, path) from None
                    if attempt == 0 and reused:
                        continue
                    raise TierUnavailableError(f"{self.location}: {method} {path}: {exc}") from None
                except (OSError, http.client.HTTPException) as exc:
                    self._drop()
                    if deadline.expired:
                        raise self._late(method, path) from None
                    raise TierUnavailableError(f"{self.location}: {method} {path}: {exc}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _read_body(self, resp: http.client.HTTPResponse, method: str, path: str, limit: int) -> bytes:
        """The body, read in pieces so that an oversized one is refused before it is in memory."""
        if resp.length is not None and resp.length > limit:  # declared too large: read none of it
            self._drop()
            raise EntryTooLarge(f"{self.location}: {method} {path}: the answer has {resp.length} bytes, over the "
                                f"{limit}-byte cap")
        parts: list[bytes] = []
        size = 0
        while chunk := resp.read1(1 << 16):
            size += len(chunk)
            if size > limit:
                self._drop()
                raise EntryTooLarge(f"{self.location}: {method} {path}: the answer has more than {limit} bytes, "
                                    "over the cap")
            parts.append(chunk)
        resp.read()  # closes the response, so that the connection can serve the next request
        return b"".join(parts)

    def _read_some(self, resp: http.client.HTTPResponse) -> bytes:
        """The first 64 KiB of a body kbuild only shows in messages (errors, PUT answers); the connection is
        dropped when there is more."""
        data = b""
        while len(data) <= _MAX_OTHER_BYTES:
            chunk = resp.read1(_MAX_OTHER_BYTES + 1 - len(data))
            if not chunk:
                resp.read()  # the end (a HEAD answer, too): lets the connection serve the next request
                return data
            data += chunk
        self._drop()
        return data[:_MAX_OTHER_BYTES]

    def _late(self, method: str, path: str) -> TierUnavailableError:
        return TierUnavailableError(f"{self.location}: {method} {path}: no complete answer within the "
                                    f"{self.deadline:g} s deadline (remote_deadline, KBUILD_REMOTE_DEADLINE)")

    def _unexpected(self, method: str, path: str, status: int, data: bytes) -> TierUnavailableError:
        snippet = data[:200].decode("utf-8", "replace").strip()
        return TierUnavailableError(f"{self.location}: {method} {path} answered HTTP {status}"
                                    + (f": {snippet}" if snippet else ""))

    def _to_collection(self, path: str, status: int, location: str | None) -> bool:
        """Whether an answer for ``path`` is the redirect a WebDAV server gives for a collection: to the same
        path plus ``/`` (any other redirect, e.g. to https, is the server's business and unexpected)."""
        return status in _REDIRECTS and location is not None and urlsplit(location).path == self.prefix + path + "/"

    def _get(self, path: str, limit: int) -> bytes | None:
        status, data, location = self._exchange("GET", path, limit=limit)
        if status == 200:
            return data
        if status == 404:
            return None
        if self._to_collection(path, status, location):
            raise UnreadableEntry(f"{self.location}: GET {path}: a collection (a directory) stands where a value "
                                  "belongs")
        raise self._unexpected("GET", path, status, data)

    def _head(self, path: str) -> bool:
        status, data, location = self._exchange("HEAD", path)
        if status == 200:
            return True
        if status == 404 or self._to_collection(path, status, location):  # a collection holds no value
            return False
        raise self._unexpected("HEAD", path, status, data)

    def _remove_collection(self, path: str) -> bool:
        """After a 409 Conflict for ``path``: delete the collection that may stand there (``DELETE <path>/``,
        which WebDAV servers need for a collection); whether one was deleted."""
        status, _ = self.request("DELETE", path + "/")
        if status in (200, 202, 204):
            log.info("%s: deleted the collection at %s/ (no value kbuild wrote)", self.location, path)
            return True
        return False

    def _put(self, path: str, data: bytes) -> None:
        status, body = self.request("PUT", path, bytes(data))
        if status == 409 and self._remove_collection(path):
            status, body = self.request("PUT", path, bytes(data))
        if status not in _OK_PUT:
            raise self._unexpected("PUT", path, status, body)

    def _delete(self, path: str) -> bool:
        status, body = self.request("DELETE", path)
        if status in (200, 202, 204):
            return True
        if status == 404:
            return False
        if status == 409 and self._remove_collection(path):
            return True
        raise self._unexpected("DELETE", path, status, body)

    # -- Backend protocol

    def get_record(self, key: str) -> bytes | None:
        return self._get(f"/ac/{quote(key)}", self.max_record_bytes)

    def get_blob(self, digest: str, max_bytes: int | None = None) -> bytes | None:
        limit = self.max_blob_bytes if max_bytes is None else min(max_bytes, self.max_blob_bytes)
        return self._get(f"/cas/{quote(digest)}", limit)

    def has_record(self, key: str) -> bool:
        return self._head(f"/ac/{quote(key)}")

    def has_blob(self, digest: str) -> bool:
        return self._head(f"/cas/{quote(digest)}")

    def put_blob(self, digest: str, data: bytes) -> None:
        self._put(f"/cas/{quote(digest)}", data)

    def put_record(self, key: str, data: bytes, replace: bytes | None = None) -> bool:
        # WebDAV has no atomic "create if absent" or compare-and-set: the tier checked for an existing valid
        # record first, and an invalid one (``replace``) is overwritten like an absent one.
        self._put(f"/ac/{quote(key)}", data)
        return True

    def delete_record(self, key: str) -> bool:
        return self._delete(f"/ac/{quote(key)}")

    def delete_blob(self, digest: str) -> bool:
        return self._delete(f"/cas/{quote(digest)}")

    def record_keys(self) -> Iterator[str]:
        """Keys from the JSON directory listing of ``/ac/`` (nginx ``autoindex_format json``)."""
        try:
            status, data = self.request("GET", "/ac/", limit=_MAX_LISTING_BYTES)
        except EntryTooLarge as exc:
            raise TierUnavailableError(f"{exc}; too large for a listing") from None
        if status == 404:
            return iter(())
        if status != 200:
            raise self._unexpected("GET", "/ac/", status, data)
        try:
            listing = parse_json(data)
            # a collection named like a key is listed too: it is a damaged entry that verify must see
            names = [str(item["name"]) for item in listing if item.get("type", "file") in ("file", "directory")]
        except (ValueError, TypeError, KeyError, AttributeError):
            raise TierUnavailableError(f"{self.location}: GET /ac/ did not return a JSON listing; listing an HTTP "
                                       "tier needs nginx `autoindex on; autoindex_format json;`") from None
        return iter(sorted(n for n in names if is_digest(n)))

    def close(self) -> None:
        self._drop()

    def transaction(self) -> contextlib.AbstractContextManager[Any]:
        """No lock: an HTTP cache has none to offer (see :meth:`put_record`)."""
        return contextlib.nullcontext()

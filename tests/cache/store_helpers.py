"""Helpers shared by the store tests (imported as a plain module: pytest puts this folder on sys.path)."""

from __future__ import annotations

import contextlib
import hashlib
import socketserver
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from server_helpers import free_port as free_port  # the store tests import it from here

from kbuild.cache.record import Artefact


def unique() -> str:
    return uuid.uuid4().hex[:12]


def make_key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def make_artefact(name: str = "k", size: int = 1000, **meta: object) -> Artefact:
    body = hashlib.sha256(name.encode()).digest()
    cubin = b"\x7fELF" + (body * (size // len(body) + 1))[: max(0, size - 4)]
    fields = {"kernel": name, "target": "sm_90", "tuned": False, "compile_seconds": 2.0, "tune_seconds": 0.0}
    fields.update(meta)
    return Artefact.create(key=make_key(name), cubin=cubin, meta=fields)


# ----------------------------------------------------------------------------------------------
# Misbehaving servers: they answer, then drip the body one byte at a time (bounded: each stops by
# itself after `count` bytes, or when the client hangs up, or when the fixture ends).

@dataclass
class DripServer:
    url: str
    port: int
    requests: list[str]
    """The first line of every request (HTTP) or command name (Redis) the server received."""
    server: Any = None

    @property
    def sent(self) -> int:
        return int(self.server.sent)


class _DripHandler(socketserver.BaseRequestHandler):
    server: _DripTCPServer

    def read_request(self) -> bool:
        """Read one HTTP request head and record its request line; False when the client hung up first."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.request.recv(65536)
            if not chunk:
                return False
            data += chunk
        self.server.requests.append(data.split(b"\r\n", 1)[0].decode())
        return True

    def drip(self, head: bytes) -> None:
        srv = self.server
        self.request.sendall(head)
        for _ in range(srv.count):
            if srv.stopping.wait(srv.interval):
                return
            self.request.sendall(b"x")


class _HttpDrip(_DripHandler):
    def handle(self) -> None:
        if not self.read_request():
            return
        with contextlib.suppress(OSError):
            self.drip(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 100000\r\n\r\n")


class _HttpBloat(_DripHandler):
    """Answers every GET with ``count`` bytes (declared in Content-Length, or chunked when ``interval`` < 0),
    as fast as the client takes them; ``sent`` counts what the client took before it hung up."""

    def handle(self) -> None:
        if not self.read_request():
            return
        srv = self.server
        block = b"\0" * (1 << 16)
        chunked = srv.interval < 0
        head = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" if chunked else
                f"HTTP/1.1 200 OK\r\nContent-Length: {srv.count}\r\n\r\n".encode())
        with contextlib.suppress(OSError):
            self.request.sendall(head)
            left = srv.count
            while left > 0 and not srv.stopping.is_set():
                piece = block[:left]
                self.request.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                left -= len(piece)
                srv.sent += len(piece)


class _RedisDrip(_DripHandler):
    """Just enough RESP: OK to the client's connection set-up, then every other command gets a bulk reply
    that never completes."""

    def handle(self) -> None:
        buf = b""
        with contextlib.suppress(OSError):
            while True:
                chunk = self.request.recv(65536)
                if not chunk:
                    return
                buf += chunk
                while True:
                    cmd, buf = _resp_command(buf)
                    if cmd is None:
                        break
                    name = cmd[0].upper().decode() if cmd else ""
                    self.server.requests.append(name)
                    if name == "HELLO":  # redis-py 8 speaks RESP3: a map with the protocol version
                        self.request.sendall(b"%1\r\n$5\r\nproto\r\n:3\r\n")
                    elif name in ("CLIENT", "SELECT", "PING"):
                        self.request.sendall(b"+OK\r\n")
                    else:
                        self.drip(b"$100000\r\n")
                        return


def _resp_command(buf: bytes) -> tuple[list[bytes] | None, bytes]:
    """One RESP array of bulk strings from ``buf`` (None when incomplete) and the rest."""
    if not buf.startswith(b"*") or b"\r\n" not in buf:
        return None, buf
    head, rest = buf.split(b"\r\n", 1)
    items: list[bytes] = []
    for _ in range(int(head[1:])):
        if b"\r\n" not in rest:
            return None, buf
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line[1:])
        if len(rest) < size + 2:
            return None, buf
        items.append(rest[:size])
        rest = rest[size + 2:]
    return items, rest


class _DripTCPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, handler: type[_DripHandler], interval: float, count: int) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.interval = interval
        self.count = count
        self.stopping = threading.Event()
        self.requests: list[str] = []
        self.sent = 0


@contextlib.contextmanager
def drip_server(kind: str, *, interval: float = 0.5, count: int = 60) -> Iterator[DripServer]:
    """A server on loopback that answers every request (``kind`` "http" or "redis") and then sends one byte
    of the body every ``interval`` seconds, ``count`` bytes at most (30 s by default), never the whole body.

    ``kind`` "bloat" is an HTTP server that answers every GET with ``count`` zero bytes at full speed
    (chunked when ``interval`` < 0); :attr:`DripServer.sent` says how many the client took."""
    handler = {"http": _HttpDrip, "redis": _RedisDrip, "bloat": _HttpBloat}[kind]
    srv = _DripTCPServer(handler, interval, count)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    port = srv.server_address[1]
    url = f"redis://127.0.0.1:{port}/0" if kind == "redis" else f"http://127.0.0.1:{port}/c"
    try:
        yield DripServer(url=url, port=port, requests=srv.requests, server=srv)
    finally:
        srv.stopping.set()
        srv.shutdown()
        srv.server_close()
        thread.join(5)

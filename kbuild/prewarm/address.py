"""The Ray address of ``kbuild prewarm --ray``: whether a Ray cluster answers there, within a deadline.

``ray.init(address=...)`` retries an address where no cluster answers for minutes: 20 attempts
(``RAY_NUM_REDIS_GET_RETRIES``), each a 5 s gRPC connect (``RAY_gcs_rpc_server_connect_timeout_s``) and a 30 s
wait for the cluster id (measured with Ray 2.60: 41 s per attempt, for ``127.0.0.1:1`` as for a port where an HTTP
server listens); its C++ waits do not return to Python, so no signal or thread can cut them short. A ``ray://``
address without ``ray[client]`` is a ValueError, and any other ``scheme://`` makes Ray import a module of that
name. So kbuild checks an address before Ray sees it:

1. its form (:func:`kbuild.settings.ray_address.parse`; the settings model runs it on ``[tool.kbuild.prewarm]
   address`` and on ``--ray``): ``auto``, ``local``, ``host:port`` (a cluster's GCS, as ``ray start --head`` prints
   it) or ``ray://host[:port]`` (a Ray Client server; port 10001 by default). Anything else is a
   :class:`~kbuild.errors.ConfigError` (exit 2).
2. that a cluster answers there (:func:`check_reachable`, within ``[tool.kbuild.prewarm] connect_timeout``
   seconds in all): the host name resolves, a TCP connection opens, and what listens answers a gRPC call, as
   Ray's servers (the GCS, the Ray Client server) do: one unary call over plain HTTP/2, written here by hand
   (Ray's core install has no gRPC client for Python), answered with ``:status: 200``. An HTTP/2 server or proxy
   that is not gRPC fails it (this machine's egress proxy answers any outside address over HTTP/2, with 404).
   That step is left out when Ray's own TLS is on (``RAY_USE_TLS``). A failure is a
   :class:`~kbuild.errors.ClusterUnreachableError` (exit 2) naming the address and the step that failed.

Another gRPC server on that port passes the check; ``ray.init`` and its own retries decide then.

Standard library only; nothing here imports Ray.
"""

from __future__ import annotations

import socket
import threading
import time

from kbuild.errors import ClusterUnreachableError
from kbuild.settings.ray_address import RayAddress

#: HTTP/2 (RFC 9113): the client's connection preface, then an empty SETTINGS frame (section 3.4); frame types.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_H2_DATA, _H2_HEADERS, _H2_RST_STREAM, _H2_SETTINGS, _H2_GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x7
#: The gRPC method the probe calls: the first one Ray's own client calls on a GCS (read-only).
_GRPC_PATH = b"/ray.rpc.NodeInfoGcsService/GetClusterId"


def _resolve(address: RayAddress, seconds: float) -> list[tuple[int, tuple[object, ...]]]:
    """``getaddrinfo`` under a deadline (it has none of its own): in a daemon thread, given up after ``seconds``."""
    found: list[object] = []

    def look_up() -> None:
        try:
            found.append(socket.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM))
        except OSError as exc:
            found.append(exc)

    worker = threading.Thread(target=look_up, name="kbuild-ray-resolve", daemon=True)
    worker.start()
    worker.join(seconds)
    if not found:
        raise ClusterUnreachableError(f"the host name {address.host!r} did not resolve within {seconds:g} s")
    result = found[0]
    if isinstance(result, OSError):
        raise ClusterUnreachableError(f"the host name {address.host!r} does not resolve ({result.strerror or result})")
    return [(family, sockaddr) for family, _, _, _, sockaddr in result]  # type: ignore[attr-defined]


def check_reachable(address: RayAddress, seconds: float, *, grpc: bool = True) -> None:
    """Raise :class:`~kbuild.errors.ClusterUnreachableError` unless, within ``seconds`` in all, ``address``'s host
    resolves, a TCP connection to it opens and (``grpc``) a gRPC server answers there (:func:`_answers_grpc`).
    ``auto`` and ``local`` are not checked here."""
    if address.kind not in ("gcs", "client"):
        return
    deadline = time.monotonic() + seconds
    candidates = _resolve(address, seconds)
    errors: list[str] = []
    for family, sockaddr in candidates:
        left = deadline - time.monotonic()
        if left <= 0:
            errors.append(f"no answer within {seconds:g} s")
            break
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            try:
                sock.settimeout(left)
                sock.connect(sockaddr)
            except TimeoutError:
                errors.append(f"no TCP connection within {seconds:g} s")
                break
            except ConnectionRefusedError:
                errors.append("connection refused (nothing listens on that port)")
                continue
            except OSError as exc:
                errors.append(exc.strerror or str(exc))
                continue
            if grpc:
                _answers_grpc(sock, address, deadline, seconds)
            return
    raise ClusterUnreachableError(f"no Ray cluster answers at {address.endpoint}: {'; '.join(dict.fromkeys(errors))}")


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def _literal(name: bytes, value: bytes) -> bytes:
    """An HPACK header field, literal, not indexed, no Huffman (RFC 7541, 6.2.2); short strings only."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def _grpc_call(address: RayAddress) -> bytes:
    """The HTTP/2 preface, an empty SETTINGS frame and one unary gRPC call with an empty message (HEADERS, then
    DATA ending the stream) on stream 1: ``GetClusterId``, the first call Ray's own client makes of a GCS."""
    headers = (b"\x83\x86"  # :method POST, :scheme http (HPACK static table entries 3 and 6)
               + _literal(b":path", _GRPC_PATH) + _literal(b":authority", address.endpoint.encode()[:100])
               + _literal(b"content-type", b"application/grpc") + _literal(b"te", b"trailers"))
    return (_H2_PREFACE + _frame(_H2_HEADERS, 0x4, 1, headers)  # END_HEADERS
            + _frame(_H2_DATA, 0x1, 1, b"\x00\x00\x00\x00\x00"))  # END_STREAM; an uncompressed, empty message


def _first_response(sock: socket.socket, deadline: float) -> bytes | None:
    """The header block of the first HEADERS frame on stream 1 (None: the connection ended, the server reset the
    stream or went away first, or its first frame is not the SETTINGS every HTTP/2 server starts with: it speaks
    something else); SETTINGS frames are acknowledged as HTTP/2 asks."""
    buf, first = b"", True
    while True:
        if first and len(buf) >= 9:
            if buf[3] != _H2_SETTINGS:
                return None
            first = False
        while len(buf) >= 9:
            size = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + size:
                break
            kind, flags, stream = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
            payload, buf = buf[9:9 + size], buf[9 + size:]
            if kind == _H2_SETTINGS and not flags & 0x1:
                sock.sendall(_frame(_H2_SETTINGS, 0x1, 0))
            elif kind == _H2_HEADERS and stream == 1:
                if flags & 0x8:  # PADDED
                    payload = payload[1:len(payload) - payload[0]] if payload else b""
                if flags & 0x20:  # PRIORITY
                    payload = payload[5:]
                return payload
            elif kind == _H2_GOAWAY or (kind == _H2_RST_STREAM and stream == 1):
                return None
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk


def _answers_grpc(sock: socket.socket, address: RayAddress, deadline: float, seconds: float) -> None:
    """One gRPC call (:func:`_grpc_call`): a gRPC server answers it with ``:status: 200`` (HPACK's indexed field
    0x88, which a server's first response starts with), whatever the call's own status (a Ray Client server has
    no such method: it answers 200 with ``grpc-status`` 12). An HTTP/1 server, Redis, or an HTTP/2 server or
    proxy that is not gRPC (it answers 404) does not."""
    try:
        sock.sendall(_grpc_call(address))
        block = _first_response(sock, deadline)
    except TimeoutError:
        raise ClusterUnreachableError(f"a TCP connection to {address.endpoint} opened, but no gRPC answer came "
                                      f"within {seconds:g} s") from None
    except OSError as exc:
        raise ClusterUnreachableError(f"something listens at {address.endpoint}, but not a Ray cluster: the gRPC "
                                      f"call failed ({exc.strerror or exc})") from None
    if block is None or not block.startswith(b"\x88"):
        what = "it ended the call without an answer" if block is None else "it answered, but not as gRPC does"
        raise ClusterUnreachableError(f"something listens at {address.endpoint}, but not a Ray cluster: {what} "
                                      "(an HTTP/1 server, an HTTP/2 server or proxy that is not gRPC, or another "
                                      "protocol)")

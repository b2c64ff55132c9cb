"""The Ray address of ``kbuild prewarm --ray``: its form, and whether a Ray cluster answers there, within a deadline.

``ray.init(address=...)`` retries an address where no cluster answers for minutes: 20 attempts
(``RAY_NUM_REDIS_GET_RETRIES``), each a 5 s gRPC connect (``RAY_gcs_rpc_server_connect_timeout_s``) and a 30 s
wait for the cluster id (measured with Ray 2.60: 41 s per attempt, for ``127.0.0.1:1`` as for a port where an HTTP
server listens); its C++ waits do not return to Python, so no signal or thread can cut them short. A ``ray://``
address without ``ray[client]`` is a ValueError, and any other ``scheme://`` makes Ray import a module of that
name. So kbuild checks an address before Ray sees it:

1. its form (:func:`parse`; the settings model runs it on ``[tool.kbuild.prewarm] address`` and on ``--ray``):
   ``auto``, ``local``, ``host:port`` (a cluster's GCS, as ``ray start --head`` prints it) or ``ray://host[:port]``
   (a Ray Client server; port 10001 by default). Anything else is a :class:`~kbuild.errors.ConfigError` (exit 2).
2. that a cluster answers there (:func:`check_reachable`, within ``[tool.kbuild.prewarm] connect_timeout``
   seconds in all): the host name resolves, a TCP connection opens, and what listens speaks HTTP/2, as the
   gRPC servers of Ray (the GCS, the Ray Client server) do: it answers the HTTP/2 connection preface with a
   SETTINGS frame. That last step is left out when Ray's own TLS is on (``RAY_USE_TLS``). A failure is a
   :class:`~kbuild.errors.ClusterUnreachableError` (exit 2) naming the address and the step that failed.

What passes the check but is not Ray (another gRPC or HTTP/2 server on that port) is left to ``ray.init`` and its
own retries: telling a GCS from other gRPC servers would take a gRPC client, which Ray's core install lacks.

Standard library only; nothing here imports Ray.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

from kbuild.errors import ClusterUnreachableError

#: The Ray Client server's port when a ``ray://`` address names none.
RAY_CLIENT_PORT = 10001
#: What the driver asks of a server to learn whether it speaks HTTP/2: the client connection preface, then an
#: empty SETTINGS frame (RFC 9113, section 3.4).
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_H2_SETTINGS = 0x04
_FORMS = "auto, local, HOST:PORT (the cluster's GCS, e.g. head-node:6379) or ray://HOST[:PORT] (a Ray Client server)"


@dataclass(frozen=True)
class RayAddress:
    """An address :func:`parse` accepted: ``kind`` is ``auto``, ``local``, ``gcs`` or ``client``."""

    text: str
    kind: str
    host: str = ""
    port: int = 0

    @property
    def endpoint(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse(text: str) -> RayAddress:
    """``text`` as a Ray address (the forms in the module docstring); a ValueError saying what is wrong."""
    if text in ("auto", "local"):
        return RayAddress(text, text)
    if not text or text != text.strip() or any(c.isspace() or not c.isprintable() for c in text):
        raise ValueError(f"{text!r} is not a Ray address; expected {_FORMS}")
    kind, rest, default_port = "gcs", text, None
    if "://" in text:
        scheme, _, rest = text.partition("://")
        if scheme != "ray":
            raise ValueError(f"{text!r}: the scheme {scheme!r}:// is not one kbuild joins a Ray cluster by; "
                             f"expected {_FORMS}")
        kind, default_port = "client", RAY_CLIENT_PORT
    host, port_text = _split_host_port(rest)
    if port_text is None:
        if default_port is None:
            raise ValueError(f"{text!r} names no port; expected {_FORMS}")
        port = default_port
    else:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"{text!r}: the port {port_text!r} is not a number from 1 to 65535")
        port = int(port_text)
    if not host or "/" in host or "@" in host or len(host) > 253:
        raise ValueError(f"{text!r} is not a Ray address; expected {_FORMS}")
    return RayAddress(text, kind, host, port)


def _split_host_port(rest: str) -> tuple[str, str | None]:
    if rest.startswith("["):  # [IPv6]:port
        host, sep, tail = rest[1:].partition("]")
        if not sep or (tail and not tail.startswith(":")):
            raise ValueError(f"{rest!r} is not a Ray address; expected {_FORMS}")
        return host, tail[1:] if tail else None
    if rest.count(":") > 1:
        raise ValueError(f"{rest!r}: write an IPv6 address in brackets, [ADDRESS]:PORT")
    host, sep, port = rest.partition(":")
    return host, port if sep else None


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


def check_reachable(address: RayAddress, seconds: float, *, h2: bool = True) -> None:
    """Raise :class:`~kbuild.errors.ClusterUnreachableError` unless, within ``seconds`` in all, ``address``'s host
    resolves, a TCP connection to it opens and (``h2``) the server answers the HTTP/2 preface with a SETTINGS
    frame. ``auto`` and ``local`` are not checked here."""
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
            if h2:
                _speaks_http2(sock, address, deadline, seconds)
            return
    raise ClusterUnreachableError(f"no Ray cluster answers at {address.endpoint}: {'; '.join(dict.fromkeys(errors))}")


def _speaks_http2(sock: socket.socket, address: RayAddress, deadline: float, seconds: float) -> None:
    """Send the HTTP/2 preface and read the first frame's header: a gRPC server's first frame is SETTINGS."""
    got = b""
    try:
        sock.sendall(_H2_PREFACE)
        while len(got) < 9:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
            chunk = sock.recv(9 - len(got))
            if not chunk:
                break
            got += chunk
    except TimeoutError:
        raise ClusterUnreachableError(f"a TCP connection to {address.endpoint} opened, but nothing answered the gRPC "
                                      f"(HTTP/2) handshake within {seconds:g} s") from None
    except OSError as exc:
        got = got or f"<{exc.strerror or exc}>".encode()
    if len(got) < 9 or got[3] != _H2_SETTINGS:
        what = f"it answered {got[:24]!r}" if got else "it closed the connection"
        raise ClusterUnreachableError(f"something listens at {address.endpoint}, but not a Ray cluster: it does not "
                                      f"speak gRPC (HTTP/2); {what}")

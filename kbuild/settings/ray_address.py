"""The form of a Ray address, the value of ``[tool.kbuild.prewarm] address`` and of ``kbuild prewarm --ray``.

``auto``, ``local``, ``host:port`` (a cluster's GCS, as ``ray start --head`` prints it) or ``ray://host[:port]``
(a Ray Client server; port 10001 by default). The settings model checks the setting's form here (anything else is
a :class:`~kbuild.errors.ConfigError`, exit 2); whether a Ray cluster answers at an address is
:mod:`kbuild.prewarm.address`'s question. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The Ray Client server's port when a ``ray://`` address names none.
RAY_CLIENT_PORT = 10001
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


__all__ = ["RAY_CLIENT_PORT", "RayAddress", "parse"]

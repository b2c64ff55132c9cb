"""Remote store URLs: credentials kept out of messages, and host names checked before any connection.

Shared by the remote backends (:mod:`kbuild.cache.http`, :mod:`kbuild.cache.redis_tier`) and by
:mod:`kbuild.cache.open`, which picks the backend for a URL.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit, urlunsplit

from kbuild.errors import StoreUsageError


def redact_url(url: str) -> str:
    """``url`` without credentials, for names and messages."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


_LABEL = re.compile(r"^[A-Za-z0-9_-]{1,63}$")


def check_host(url: str, host: str | None) -> None:
    """:class:`StoreUsageError` unless ``host`` (of ``url``) is an IP address or a name a resolver can look
    up: IDNA-encodable, labels of 1 to 63 letters, digits, ``-`` or ``_``, ``xn--`` labels valid Punycode."""
    def bad(why: str) -> StoreUsageError:
        return StoreUsageError(f"store URL {redact_url(url)!r}: host {host!r} {why}")

    if not host:
        raise bad("is missing")
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    try:
        name = host.encode("idna").decode("ascii").rstrip(".")
    except UnicodeError as exc:
        raise bad(f"is not a valid host name ({exc.__context__ or exc})") from None
    if len(name) > 253:
        raise bad("is longer than 253 characters")
    for label in name.split("."):
        if not _LABEL.fullmatch(label):
            raise bad(f"has the label {label!r}: a label is 1 to 63 letters, digits, '-' or '_'")
        if label.lower().startswith("xn--"):
            try:
                unicode = label[4:].encode("ascii").decode("punycode")
            except UnicodeError:
                unicode = ""
            if not unicode or unicode.isascii() or not all(c.isalnum() or c == "-" for c in unicode):
                raise bad(f"has the label {label!r}, which is not valid IDNA (Punycode)")


__all__ = ["check_host", "redact_url"]

"""Opening the store from the settings model: the local tier, then the configured remotes.

:func:`open_store` is what every caller uses (the build pipeline, ``kbuild cache``, ``kbuild lock``);
:func:`backend_for_url` picks the backend for a remote URL by its scheme.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from kbuild.errors import StoreUsageError

from .stats import StoreStats
from .store import Backend
from .tier import Tier
from .tiered import TieredStore
from .url import redact_url

if TYPE_CHECKING:
    from kbuild.settings.model import Settings

log = logging.getLogger(__name__)


def backend_for_url(url: str, *, where: str = "remotes", timeout: float = 5.0, deadline: float = 30.0) -> Backend:
    """The backend for a remote tier URL (no connection is made yet). ``timeout`` bounds each socket
    operation, ``deadline`` each whole request. A bad URL is a :class:`StoreUsageError` naming ``where``."""
    scheme = urlsplit(url).scheme.lower()
    try:
        if scheme in ("http", "https"):
            from .http import HttpBackend

            return HttpBackend(url, timeout=timeout, deadline=deadline)
        if scheme in ("redis", "rediss", "unix"):
            from .redis_tier import RedisBackend

            return RedisBackend(url, timeout=timeout, deadline=deadline)
    except StoreUsageError as exc:
        raise StoreUsageError(f"{where}: {exc}") from None
    raise StoreUsageError(
        f"{where}: unknown store URL scheme {scheme + '://' if scheme else '(none)'} in {redact_url(url)!r}; "
        "expected http://, https:// (Bazel remote-cache layout) or redis://")


def open_store(settings: Settings, strict: bool = False, *, timeout: float = 5.0) -> TieredStore:
    """The tiered store described by ``settings``: the local tier at ``settings.store_path``
    (bounded by ``store_max_bytes``), then ``settings.remotes`` in order, each request to them
    bounded by ``timeout`` per socket operation and ``settings.remote_deadline`` in all.

    Raises :class:`StoreUsageError` (exit 2) for an unknown URL scheme or an unusable store
    directory. Remotes are contacted lazily, so a remote that is down does not fail here.
    ``tune = "require"`` implies ``strict``: a build that must ship tuned code cannot shrug off a
    remote tier that may hold it.
    """
    from .local import LocalBackend

    strict = strict or settings.tune == "require"

    secret = settings.store_secret
    if settings.remotes and secret is None:
        _warn_unauthenticated([redact_url(r.url) for r in settings.remotes])
    stats = StoreStats()
    remotes: list[Tier] = []
    for i, remote in enumerate(settings.remotes):
        backend = backend_for_url(remote.url, where=f"{settings.config_file}: remotes[{i}].url", timeout=timeout,
                                  deadline=settings.remote_deadline)
        remotes.append(Tier(backend, name=redact_url(remote.url), writable=remote.writable, secret=secret,
                            stats=stats))
    local = LocalBackend(settings.store_path, max_bytes=settings.store_max_bytes)
    reason = f"the local store {local.path} is read-only" if local.read_only else None
    tiers = [Tier(local, name="local", writable=not local.read_only, secret=secret, stats=stats,
                  read_only_reason=reason), *remotes]
    # statistics are a write too: a store opened for reading only (read-only, full disk) keeps none
    return TieredStore(tiers, strict=strict, stats=stats, stats_dir=local.path if local.degraded is None else None)


_WARNED_UNAUTHENTICATED: set[tuple[str, ...]] = set()


def _warn_unauthenticated(urls: list[str]) -> None:
    """One warning per process (and set of remotes) that their records are taken on trust."""
    if tuple(urls) in _WARNED_UNAUTHENTICATED:
        return
    _WARNED_UNAUTHENTICATED.add(tuple(urls))
    log.warning("remote store tiers without KBUILD_STORE_SECRET: records from %s are not authenticated, so "
                "whoever can write there can plant the cubins this build ships; set KBUILD_STORE_SECRET (the same "
                "shared secret on every machine) to sign and verify them", ", ".join(urls))


__all__ = ["backend_for_url", "open_store"]

"""A total time limit for one request to a remote tier.

Socket timeouts bound each read, not a request: a server that sends its headers and then one
byte every two seconds never trips a five-second read timeout and can hold a build forever.
:class:`Deadline` bounds the whole request (connecting, headers, body). The request runs in the
calling thread; a timer calls ``on_expiry`` when the time is up, which closes the connection, so
a blocked read returns at once. It keeps closing every quarter second until the request is over,
so a client library that reconnects and retries cannot outlive it either. The caller then sees
:attr:`Deadline.expired` and reports the tier as down.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

#: After the deadline, how often ``on_expiry`` runs again while the request has not returned.
_REPEAT_SECONDS = 0.25


class Deadline:
    """``with Deadline(seconds, close) as d: ...``; afterwards ``d.expired`` says whether it fired."""

    def __init__(self, seconds: float, on_expiry: Callable[[], object]) -> None:
        self.seconds = seconds
        self._on_expiry = on_expiry
        self._end = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._done = False
        self._timer: threading.Timer | None = None
        self.expired = False

    def remaining(self) -> float:
        """Seconds left (never negative)."""
        return max(0.0, self._end - time.monotonic())

    def _arm(self, delay: float) -> None:
        timer = threading.Timer(delay, self._fire)
        timer.daemon = True
        self._timer = timer
        timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.expired = True
            try:
                self._on_expiry()
            except Exception:  # closing a connection that is already gone is not news
                pass
            self._arm(_REPEAT_SECONDS)

    def __enter__(self) -> Deadline:
        with self._lock:
            self._arm(self.remaining())
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._lock:
            self._done = True
            if self._timer is not None:
                self._timer.cancel()

"""Messages between the parent and the measurement worker: length-prefixed pickles over two pipes.

Requests are dicts with an ``op`` (``load``, ``check``, ``time``, ``ping``, ``quit``; level 1's
``cfg_load``, ``cfg_add``, ``cfg_time``). Replies
are dicts with ``ok``; a failed request has ``error`` (text) and ``kind``:

* ``"usage"``: bad input (no GPU, wrong architecture, bad spec); the worker stays usable;
* ``"candidate"``: the candidate is bad but the CUDA context survived;
* ``"fault"``: a CUDA error made the context unusable; the worker exits after replying.

Both ends are our own processes, so pickle is safe here.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import time
from typing import Any

_HEADER = struct.Struct("!Q")
PROTOCOL_VERSION = 1


class ChannelClosed(EOFError):
    """The other end closed its pipe (the worker exited or crashed)."""


class ChannelTimeout(TimeoutError):
    """No complete message within the deadline (the worker hangs)."""


def send(fd: int, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks: list[bytes] = []
    left = n
    while left:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChannelTimeout(f"no answer within the deadline ({n - left} of {n} bytes read)")
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise ChannelClosed("pipe closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(fd: int, timeout: float | None = None) -> Any:
    """Next message from ``fd``; :class:`ChannelTimeout` after ``timeout`` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    (length,) = _HEADER.unpack(_read_exact(fd, _HEADER.size, deadline))
    return pickle.loads(_read_exact(fd, length, deadline))

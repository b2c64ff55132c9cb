"""Writing files so that a reader never sees half of one: the one atomic-write helper.

The data goes to a temporary file in the destination's directory, which then replaces the
destination with ``os.replace``. A crash or an error leaves the old file (or none) and no
temporary file behind.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], data: bytes | str, *, mode: int = 0o644) -> Path:
    """Write ``data`` (text is UTF-8 with ``\\n`` newlines) to ``path`` atomically; creates the directory."""
    dest = Path(path)
    parent = dest.parent if str(dest.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.chmod(tmp, mode)  # mkstemp makes 0600; these are ordinary files
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest

"""Writing files so that a reader never sees half of one: the one atomic-write helper.

The data goes to a temporary file in the destination's directory, which then replaces the
destination with ``os.replace``. A crash or an error leaves the old file (or none) and no
temporary file behind. :func:`write_files` does the same for a set of files (all or none), and
:func:`check_output_dir` and :func:`check_output_file` check an output directory or file given on the command
line before any work.
:func:`read_bounded` is the one reader of a file named by a user or by untrusted data: a regular file
only (never a FIFO, a device or a directory, so it neither blocks nor reads forever) and never more
than a stated number of bytes; :func:`open_regular` makes the same checks for a reader that seeks
(a zip archive, a tar bundle) instead of holding the whole file.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO


def write_atomic(path: str | os.PathLike[str], data: bytes | str, *, mode: int = 0o644) -> Path:
    """Write ``data`` (text is UTF-8 with ``\\n`` newlines) to ``path`` atomically; creates the directory.

    Only a file (or a symbolic link, which is replaced, not followed) is replaced: a directory, a device
    (``-o /dev/null`` run as root would otherwise replace the machine's device node with a file), a FIFO
    or a socket at ``path`` raises :class:`OSError` naming it, before anything is written."""
    dest = Path(path)
    _check_replaceable(dest)
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


def _check_replaceable(dest: Path) -> None:
    """An :class:`OSError` naming ``dest`` when it exists and is neither a file nor a symbolic link."""
    try:
        mode = os.lstat(dest).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:  # a name too long, a parent that is a file: the write would fail the same way
        raise OSError(exc.errno, exc.strerror, str(dest)) from None
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", str(dest))
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise OSError(errno.EINVAL, f"{_kind(mode)}, not a file: kbuild replaces only files", str(dest))


def _kind(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


def read_bounded(path: str | os.PathLike[str], *, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path`` (symbolic links followed), at most ``max_bytes`` of them.

    Opened without blocking (a FIFO with no writer would block ``open`` itself), then checked with
    ``fstat`` on the open descriptor: anything but a regular file, or a file larger than ``max_bytes``,
    raises :class:`OSError` with a message that says which, before any byte is read. ``/dev/zero``, a
    FIFO and a directory are refused; a file that grows while being read is cut at ``max_bytes + 1`` and
    refused too. Callers turn the :class:`OSError` into their own error naming the file and the key; one
    that does not still has ``filename`` set, which the CLI's handler (:mod:`kbuild.cli`) reports."""
    fd = _open_regular(path, max_bytes)
    try:
        chunks: list[bytes] = []
        got = 0
        while got <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > max_bytes:
            raise OSError(errno.EFBIG, f"grew past the {max_bytes:,}-byte limit while being read", os.fspath(path))
        return b"".join(chunks)
    finally:
        os.close(fd)


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` open for reading, checked as :func:`read_bounded` checks it (a regular file, opened without
    blocking), for readers that seek and read parts of a file too large to hold: a wheel's zip archive, a
    bundle's tar. An :class:`OSError` with ``filename`` set otherwise."""
    return os.fdopen(_open_regular(path, None), "rb")


def _open_regular(path: str | os.PathLike[str], max_bytes: int | None) -> int:
    """A blocking descriptor of the regular file ``path`` of at most ``max_bytes`` (None: any size)."""
    name = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), name) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            code = errno.EISDIR if stat.S_ISDIR(st.st_mode) else errno.EINVAL  # IsADirectoryError for a directory
            raise OSError(code, f"{_kind(st.st_mode)}, not a regular file", name)
        if max_bytes is not None and st.st_size > max_bytes:
            raise OSError(errno.EFBIG, f"{st.st_size:,} bytes, over the {max_bytes:,}-byte limit", name)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_output_dir(path: str | os.PathLike[str], flag: str) -> Path:
    """``path``, given with the option ``flag`` (``--out-dir``), checked as a place to write files into.

    It must be a directory, or not exist under a directory; and a file must be creatable there. A
    probe file (``.kbuild-probe-*``) is created and removed at once: permission bits do not stop root,
    /proc refuses anyway, and a read-only mount only says so when written to. Creates nothing; a
    :class:`~kbuild.errors.UsageError` (exit 2) naming ``flag`` and ``path`` otherwise."""
    from kbuild.errors import UsageError

    p = Path(path)
    if str(path) == "":
        raise UsageError(f"{flag}: empty path")
    try:
        os.lstat(p)
    except (FileNotFoundError, NotADirectoryError):  # a parent that is a file is found below
        pass
    except OSError as exc:  # a name too long, a loop of links, no permission
        raise UsageError(f"{flag} {p}: {exc.strerror or exc}") from None
    base = p
    while not os.path.lexists(base) and base.parent != base:
        base = base.parent
    if not base.is_dir():
        what = "exists and is not a directory" if base == p else f"{base} is not a directory"
        raise UsageError(f"{flag} {p}: {what}")
    try:
        fd, probe = tempfile.mkstemp(prefix=".kbuild-probe-", dir=base)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        where = "" if base == p else f" (in {base})"
        raise UsageError(f"{flag} {p}: cannot write there{where}: {exc.strerror or exc}") from None
    return p


def check_output_file(path: str | os.PathLike[str], flag: str) -> Path:
    """``path``, given with the option ``flag`` (``--lock-file``), checked as a file to write (replace) before any
    work: not a directory, a device or a FIFO (:func:`write_atomic` replaces only files), and its directory as
    :func:`check_output_dir` checks one. Creates nothing; a :class:`~kbuild.errors.UsageError` (exit 2) naming
    ``flag`` and ``path`` otherwise."""
    from kbuild.errors import UsageError

    p = Path(path)
    if str(path) == "":
        raise UsageError(f"{flag}: empty path")
    try:
        _check_replaceable(p)
    except OSError as exc:
        if not isinstance(exc, NotADirectoryError):
            raise UsageError(f"{flag} {p}: {exc.strerror or exc}") from None
    check_output_dir(p.parent, f"{flag} {p}: its directory")
    return p


def write_files(directory: str | os.PathLike[str], files: Mapping[str, bytes | str], *, mode: int = 0o644,
                what: str | None = None) -> list[Path]:
    """Write ``files`` (name → content) into ``directory``, all or nothing: every file goes to a temporary
    file first, and only when all are written are they renamed into place (a destination that is a
    directory, the one thing that makes a rename fail, is refused before). On an error no file is
    replaced, no temporary file is left, and directories this call created are removed again. With
    ``what`` (e.g. ``"--out-dir build/k"``), an :class:`OSError` becomes a
    :class:`~kbuild.errors.UsageError` starting with it. Returns the paths, sorted by name."""
    d = Path(directory)
    created = []
    base = d
    while not os.path.lexists(base) and base.parent != base:
        created.append(base)
        base = base.parent
    temps: list[tuple[str, Path]] = []
    try:
        d.mkdir(parents=True, exist_ok=True)
        for name in sorted(files):  # what would make a rename fail, before anything is written
            if (d / name).parent != d:
                raise ValueError(f"{name!r} is not a plain file name")
            _check_replaceable(d / name)
        for name in sorted(files):
            dest = d / name
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=d)
            temps.append((tmp, dest))
            data = files[name]
            with os.fdopen(fd, "wb") as f:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
            os.chmod(tmp, mode)
        for tmp, dest in temps:
            os.replace(tmp, dest)
    except BaseException as exc:
        for tmp, _ in temps:
            Path(tmp).unlink(missing_ok=True)
        for c in created:  # innermost first
            try:
                c.rmdir()
            except OSError:
                break
        if what is not None and isinstance(exc, OSError):
            from kbuild.errors import UsageError

            name = f" {exc.filename}" if exc.filename else ""
            raise UsageError(f"{what}: cannot write{name}: {exc.strerror or exc}") from None
        raise
    return [dest for _, dest in temps]
